/* The compiled lane's replay loop in C (ringccl.backends.shm._lanec).
 *
 * One call of a lowered shared-memory all_reduce (ringccl/backends/shm/lane.py, which builds
 * the program and keeps the Python replay of the same operations as the fallback): on the
 * caller's buffer itself (an all-or-nothing call: on a copy, copied in first and out after the
 * last receive), per step the sends (copy into this rank's area half, descriptor, release
 * store of `posted`) and the receives (acquire load of `posted`, descriptor check, combine /
 * copy / fold, `released`), the begin and end waits. Every wait polls a bounded
 * number of times and otherwise returns to Python with its position (Python's bounded wait:
 * timeout, abort word, the peer's liveness, the error naming step and peer); a descriptor the
 * lane does not expect returns too (Python reads it, or raises the transport's mismatch).
 *
 * The transport's Python counters (lists sent / expected / released, lane_marks, lane_call, the
 * group's calls and lazy) are updated here in place, so they end as the Python replay leaves
 * them. Memory order: __atomic release stores / acquire loads on the control words (the
 * Python replay relies on x86-64's TSO, which check_platform requires anyway).
 *
 * Reductions: only where the result is bitwise the backend's own function (the lane checks
 * that at lowering against the backend's functions on NaN/inf/zero/overflow probes, in both
 * operand orders, see lane_native.py): integer add/mul in unsigned arithmetic (wrap), min/max,
 * and/or/xor; float add/mul with the NaN that survives two NaN operands chosen per position
 * (nan_rule), float min/max as numpy.minimum/maximum (a NaN operand, the left one's first,
 * returned as it is; ties as `rule` says). Operand order (the IR's): d := d ⊕ s, or with `left`
 * d := s ⊕ d (a receive from a peer below this rank, an accumulator's flush), each order with
 * its own rule (H_RULE, H_RULE_LEFT).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* program header words (lane_native.py writes them: keep the two in step) */
/* H_WORK: an all-or-nothing call's working copy (0: the loop works on the caller's buffer);
 * the sends' and receives' buffer addresses are byte offsets in the one it works on */
enum { H_MAGIC, H_NOPS, H_CTRL, H_SERIAL, H_ABORT, H_WORK, H_BYTES, H_DTYPE, H_OP, H_RULE,
       H_RULE_LEFT, H_NEED, H_NEED0, H_NEED1, H_ENTERED, H_SEG, H_SEGBYTES, H_RING, H_SPIN,
       H_ITEMSIZE, HDR = 20 };
#define OPW 12
#define MAGIC 0x4c414e4543303031LL
enum { K_BEGIN_WAIT = 1, K_PUBLISH, K_COPY_IN, K_SEND, K_RECV, K_COPY_OUT, K_END_WAIT };
enum { D_F32, D_F64, D_I8, D_I16, D_I32, D_I64, D_U8 };
enum { O_SUM, O_PROD, O_MIN, O_MAX, O_BAND, O_BOR, O_BXOR };
#define R_DONE (-1)
#define R_CANNOT (-2)
#define R_BUFFER (-3)

static long long native_runs;   /* calls completed here (tests: the native replay ran) */
static PyObject *s_enabled, *s_closed, *s_work_serial, *s_retired, *s_lazy, *s_calls, *s_sent,
    *s_expected, *s_released, *s_lane_marks, *s_lane_call, *s_data_ptr, *s_is_contiguous;

static inline int64_t load_acq(const int64_t *w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
static inline void store_rel(int64_t *w, int64_t v) { __atomic_store_n(w, v, __ATOMIC_RELEASE); }

/* poll `*word >= target` up to `spin` times (pause between): 1 when it is */
static inline int spin_ge(const int64_t *word, int64_t target, int64_t spin)
{
    for (int64_t k = 0; k <= spin; k++) {
        if (load_acq(word) >= target)
            return 1;
        __builtin_ia32_pause();
    }
    return 0;
}

/* ---- reductions ----------------------------------------------------------------------- */
#define BLOCK 256

/* integer ops are commutative bit for bit: d := s ⊕ d is d := d ⊕ s */
#define INT_OPS(NAME, T, U)                                                                   \
    static void NAME(T *restrict d, const T *restrict s, int64_t n, int op)                   \
    {                                                                                         \
        switch (op) {                                                                         \
        case O_SUM: for (int64_t i = 0; i < n; i++) d[i] = (T)((U)d[i] + (U)s[i]); break;     \
        case O_PROD: for (int64_t i = 0; i < n; i++) d[i] = (T)((U)d[i] * (U)s[i]); break;    \
        case O_MIN: for (int64_t i = 0; i < n; i++) d[i] = s[i] < d[i] ? s[i] : d[i]; break;  \
        case O_MAX: for (int64_t i = 0; i < n; i++) d[i] = s[i] > d[i] ? s[i] : d[i]; break;  \
        case O_BAND: for (int64_t i = 0; i < n; i++) d[i] &= s[i]; break;                     \
        case O_BOR: for (int64_t i = 0; i < n; i++) d[i] |= s[i]; break;                      \
        default: for (int64_t i = 0; i < n; i++) d[i] ^= s[i]; break;                         \
        }                                                                                     \
    }

/* 8- and 16-bit products in uint32 (a uint16 product promoted to int could overflow) */
INT_OPS(comb_i8, int8_t, uint32_t)
INT_OPS(comb_u8, uint8_t, uint32_t)
INT_OPS(comb_i16, int16_t, uint32_t)
INT_OPS(comb_i32, int32_t, uint32_t)
INT_OPS(comb_i64, int64_t, uint64_t)

/* Which operand's NaN survives an add/mul whose operands are both NaN (0: the left operand's,
 * 1: the right one's, quieted), as the backend's own loop does at element i of n: `rule` bit 0
 * for n == 1, bit 1 for n <= W, bit 2 for the first n - n % W elements, bit 3 for the rest,
 * W = rule >> 8 (0: bit 0 everywhere). numpy's vector loops keep one operand's NaN in full
 * vectors and the other's in the remainder; the lowering finds W and the bits, then checks them. */
static inline int nan_rule(int64_t rule, int64_t n, int64_t i)
{
    int64_t w = rule >> 8;
    if (w == 0 || n == 1)
        return (int)(rule & 1);
    if (n <= w)
        return (int)((rule >> 1) & 1);
    return (int)((rule >> (i < n - n % w ? 2 : 3)) & 1);
}

/* min/max of a (left) and b (right) into d[i]: a NaN left operand, else a NaN right one, else
 * the smaller (larger); on ties the left (rule 0) or the right (rule 1) */
#define MINMAX_LOOP(T, A, B)                                                                  \
    if (rule & 1) {                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                     \
            T a = A, b = B;                                                                   \
            d[i] = a != a ? a : b != b ? b : (mx ? a > b : a < b) ? a : b;                    \
        }                                                                                     \
    } else {                                                                                  \
        for (int64_t i = 0; i < n; i++) {                                                     \
            T a = A, b = B;                                                                   \
            d[i] = (a != a || (mx ? a >= b : a <= b)) ? a : b;                                \
        }                                                                                     \
    }

/* float add/mul: a block without NaN operands is order-free (IEEE results, the default NaN of
 * inf - inf included), so it runs vectorised; a block with one resolves NaNs element by element.
 * min/max: bits of an operand, never computed (MINMAX_LOOP). `left`: d := s ⊕ d. */
#define FLOAT_OPS(NAME, T, UI, QUIET)                                                         \
    static inline T NAME##_q(T x)                                                             \
    {                                                                                         \
        UI u; memcpy(&u, &x, sizeof u); u |= QUIET; memcpy(&x, &u, sizeof u); return x;      \
    }                                                                                         \
    static void NAME(T *restrict d, const T *restrict s, int64_t n, int op, int64_t rule,     \
                     int left)                                                                \
    {                                                                                         \
        if (op == O_MIN || op == O_MAX) {                                                     \
            int mx = op == O_MAX;                                                             \
            if (left) {                                                                       \
                MINMAX_LOOP(T, s[i], d[i])                                                    \
            } else {                                                                          \
                MINMAX_LOOP(T, d[i], s[i])                                                    \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        for (int64_t lo = 0; lo < n; lo += BLOCK) {                                           \
            int64_t hi = n - lo < BLOCK ? n : lo + BLOCK;                                     \
            int nan = 0;                                                                      \
            for (int64_t i = lo; i < hi; i++) nan |= (d[i] != d[i]) | (s[i] != s[i]);         \
            if (!nan) {                                                                       \
                if (op == O_SUM) for (int64_t i = lo; i < hi; i++) d[i] = d[i] + s[i];        \
                else for (int64_t i = lo; i < hi; i++) d[i] = d[i] * s[i];                    \
                continue;                                                                     \
            }                                                                                 \
            for (int64_t i = lo; i < hi; i++) {                                               \
                T a = left ? s[i] : d[i], b = left ? d[i] : s[i];                             \
                if (a != a && b != b)                                                         \
                    d[i] = NAME##_q(nan_rule(rule, n, i) ? b : a);                            \
                else if (a != a || b != b)                                                    \
                    d[i] = NAME##_q(a != a ? a : b);                                          \
                else                                                                          \
                    d[i] = op == O_SUM ? a + b : a * b;                                       \
            }                                                                                 \
        }                                                                                     \
    }

FLOAT_OPS(comb_f32, float, uint32_t, 0x00400000u)
FLOAT_OPS(comb_f64, double, uint64_t, 0x0008000000000000ull)

/* d := d ⊕ s, or with `left` d := s ⊕ d */
static void combine(int dtype, int op, int64_t rule, int left, void *d, const void *s,
                    int64_t nbytes)
{
    switch (dtype) {
    case D_F32: comb_f32(d, s, nbytes / 4, op, rule, left); break;
    case D_F64: comb_f64(d, s, nbytes / 8, op, rule, left); break;
    case D_I8: comb_i8(d, s, nbytes, op); break;
    case D_U8: comb_u8(d, s, nbytes, op); break;
    case D_I16: comb_i16(d, s, nbytes / 2, op); break;
    case D_I32: comb_i32(d, s, nbytes / 4, op); break;
    default: comb_i64(d, s, nbytes / 8, op); break;
    }
}

/* ---- Python list counters ---------------------------------------------------------------- */
static inline int get_item(PyObject *list, int64_t i, int64_t *out)
{
    if (!PyList_Check(list) || i < 0 || i >= PyList_GET_SIZE(list)) {
        PyErr_SetString(PyExc_RuntimeError, "lane: a transport counter is not a list of ranks");
        return -1;
    }
    *out = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static inline int set_item(PyObject *list, int64_t i, int64_t v)
{
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL)
        return -1;
    return PyList_SetItem(list, i, o);   /* steals o; bounds checked in get_item first */
}

static int set_int_attr(PyObject *obj, PyObject *name, int64_t v)
{
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL)
        return -1;
    int rc = PyObject_SetAttr(obj, name, o);
    Py_DECREF(o);
    return rc;
}

/* 1: the attribute is truthy; 0: not; -1: error */
static int attr_true(PyObject *obj, PyObject *name)
{
    PyObject *o = PyObject_GetAttr(obj, name);
    if (o == NULL)
        return -1;
    int r = PyObject_IsTrue(o);
    Py_DECREF(o);
    return r;
}

/* the group can run the lane now (pos 0 only): 1 yes, 0 no, -1 error */
static int can_run(const int64_t *p, PyObject *g)
{
    int r;
    if ((r = attr_true(g, s_closed)) != 0)
        return r < 0 ? -1 : 0;
    if ((r = attr_true(g, s_retired)) != 0)
        return r < 0 ? -1 : 0;
    if ((r = attr_true(g, s_lazy)) != 0)
        return r < 0 ? -1 : 0;
    PyObject *o = PyObject_GetAttr(g, s_work_serial);
    if (o == NULL)
        return -1;
    long long serial = PyLong_AsLongLong(o);
    Py_DECREF(o);
    if (serial == -1 && PyErr_Occurred())
        return -1;
    if (serial != p[H_SERIAL])
        return 0;
    return load_acq((const int64_t *)(intptr_t)p[H_CTRL] + p[H_ABORT]) == 0;
}

/* the caller's buffer: its address (buffer protocol, C-contiguous and writable; or a torch
 * tensor's data_ptr() when is_contiguous()); 1 found, 0 not usable, -1 error */
static int buffer_address(PyObject *buf, Py_buffer *view, int *held, const int64_t *p,
                          char **addr)
{
    *held = 0;
    if (PyObject_CheckBuffer(buf)) {
        if (PyObject_GetBuffer(buf, view, PyBUF_WRITABLE) < 0) {
            PyErr_Clear();   /* read-only or not contiguous: the general path says why */
            return 0;
        }
        *held = 1;
        *addr = view->buf;
        return view->len == p[H_BYTES];
    }
    PyObject *c = PyObject_CallMethodNoArgs(buf, s_is_contiguous);
    if (c == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = PyObject_IsTrue(c);
    Py_DECREF(c);
    if (ok <= 0) {
        PyErr_Clear();
        return 0;
    }
    PyObject *a = PyObject_CallMethodNoArgs(buf, s_data_ptr);
    if (a == NULL) {
        PyErr_Clear();
        return 0;
    }
    *addr = (char *)(intptr_t)PyLong_AsLongLong(a);
    Py_DECREF(a);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* one replay of program `p` on `buf` from operation `pos` (lane_run's results), or
 * RUN_ERROR with an exception set */
#define RUN_ERROR (-100)
static long run_program(const int64_t *p, PyObject *buf, int64_t c, Py_ssize_t pos,
                        PyObject *g, PyObject *t)
{
    if (pos == 0) {
        int ok = can_run(p, g);
        if (ok <= 0)
            return ok < 0 ? RUN_ERROR : R_CANNOT;
    }
    Py_buffer view;
    int held;
    char *mine = NULL;
    int found = buffer_address(buf, &view, &held, p, &mine);
    if (found <= 0) {
        if (held)
            PyBuffer_Release(&view);
        if (pos == 0)
            return R_BUFFER;
        PyErr_SetString(PyExc_RuntimeError, "lane: the buffer changed during the call");
        return RUN_ERROR;
    }
    int64_t *w = (int64_t *)(intptr_t)p[H_CTRL];
    char *seg = (char *)(intptr_t)p[H_SEG], *work = (char *)(intptr_t)p[H_WORK];
    char *base = work != NULL ? work : mine;
    int64_t serial = p[H_SERIAL], ring_n = p[H_RING], spin = p[H_SPIN], h = c & 1;
    int dtype = (int)p[H_DTYPE], op = (int)p[H_OP];
    int64_t rule = p[H_RULE], rule_left = p[H_RULE_LEFT];
    PyObject *sent = PyObject_GetAttr(t, s_sent), *expected = PyObject_GetAttr(t, s_expected),
             *released = PyObject_GetAttr(t, s_released), *marks = NULL;
    long result = R_DONE;
    int failed = sent == NULL || expected == NULL || released == NULL;
    for (Py_ssize_t i = pos; !failed && i < p[H_NOPS]; i++) {
        const int64_t *o = p + HDR + i * OPW;
        int64_t peer = o[1], seq, v;
        switch (o[0]) {
        case K_BEGIN_WAIT: {   /* the peer released what this rank sent before */
            if (marks == NULL) {
                PyObject *lc = PyObject_GetAttr(t, s_lane_call);
                if (lc == NULL) { failed = 1; break; }
                long long last = PyLong_AsLongLong(lc);
                Py_DECREF(lc);
                if (last == -1 && PyErr_Occurred()) { failed = 1; break; }
                if (last == c - 1) {
                    marks = PyObject_GetAttr(t, s_lane_marks);
                } else {
                    marks = sent;
                    Py_INCREF(marks);
                }
                if (marks == NULL) { failed = 1; break; }
            }
            if (get_item(marks, peer, &v) < 0) { failed = 1; break; }
            if (!spin_ge(w + o[2], v, spin)) { result = 2 * i; goto out; }
            break;
        }
        case K_PUBLISH: {   /* lane_marks = sent[:], counted, need and entry published */
            PyObject *copy = PyList_GetSlice(sent, 0, PyList_GET_SIZE(sent));
            if (copy == NULL) { failed = 1; break; }
            int rc = PyObject_SetAttr(t, s_lane_marks, copy);
            Py_DECREF(copy);
            if (rc < 0 || set_int_attr(t, s_lane_call, c) < 0 || set_int_attr(g, s_calls, c) < 0
                || set_int_attr(g, s_lazy, 0) < 0) { failed = 1; break; }
            store_rel(w + (h ? p[H_NEED1] : p[H_NEED0]), p[H_NEED]);
            store_rel(w + p[H_ENTERED], c);
            break;
        }
        case K_SEND: {   /* [2] src (offset), [3] nbytes, [4+h] area, [6+h] offset, [8] ring, [9] posted,
                            [10] first copy of this range */
            if (o[10])
                memcpy((char *)(intptr_t)o[4 + h], base + o[2], (size_t)o[3]);
            if (get_item(sent, peer, &seq) < 0 || set_item(sent, peer, seq + 1) < 0) {
                failed = 1;
                break;
            }
            int64_t *d = w + o[8] + (seq % ring_n) * 4;
            d[0] = serial;
            d[1] = o[6 + h];
            d[2] = o[3];
            d[3] = seq;
            store_rel(w + o[9], seq + 1);
            break;
        }
        case K_RECV: {   /* [2] dst (offset), [3] mode (lane.py), [4] fold, [5] flush, [6] nbytes,
                            [7] posted, [8] released, [9] ring */
            if (get_item(expected, peer, &seq) < 0) { failed = 1; break; }
            if (!spin_ge(w + o[7], seq + 1, spin)) { result = 2 * i; goto out; }
            const int64_t *d = w + o[9] + (seq % ring_n) * 4;
            int64_t off = d[1], nb = d[2];
            if (d[0] != serial || nb != o[6] || d[3] != seq || off < 0 ||
                off % p[H_ITEMSIZE] || off + nb > p[H_SEGBYTES]) {
                result = 2 * i + 1;
                goto out;
            }
            if (set_item(expected, peer, seq + 1) < 0) { failed = 1; break; }
            char *dst = base + o[2], *fold = (char *)(intptr_t)o[4];
            const char *src = seg + off;
            if (o[3] == 1)
                combine(dtype, op, rule, 0, dst, src, nb);
            else if (o[3] == 4)   /* from a peer below: src ⊕ dst */
                combine(dtype, op, rule_left, 1, dst, src, nb);
            else if (o[3] == 0)
                memcpy(dst, src, (size_t)nb);
            else {
                if (o[3] == 2)
                    memcpy(fold, src, (size_t)nb);
                else
                    combine(dtype, op, rule, 0, fold, src, nb);
                if (o[5])   /* the lower ranks' accumulator on the left */
                    combine(dtype, op, rule_left, 1, dst, fold, nb);
            }
            if (set_item(released, peer, seq + 1) < 0) { failed = 1; break; }
            store_rel(w + o[8], seq + 1);
            break;
        }
        case K_COPY_IN:   /* an all-or-nothing call: the caller's buffer read once, */
            memcpy(work, mine, (size_t)p[H_BYTES]);
            break;
        case K_COPY_OUT:  /* and written after the last receive */
            memcpy(mine, work, (size_t)p[H_BYTES]);
            break;
        case K_END_WAIT:   /* the peer entered this call */
            if (!spin_ge(w + o[2], c, spin)) { result = 2 * i; goto out; }
            break;
        default:
            PyErr_SetString(PyExc_ValueError, "lane: unknown operation");
            failed = 1;
        }
    }
    if (!failed)
        native_runs++;
out:
    Py_XDECREF(sent);
    Py_XDECREF(expected);
    Py_XDECREF(released);
    Py_XDECREF(marks);
    if (held)
        PyBuffer_Release(&view);
    return failed ? RUN_ERROR : result;
}

/* the program bytes' words, or NULL with ValueError */
static const int64_t *program_words(PyObject *prog)
{
    if (!PyBytes_Check(prog)) {
        PyErr_SetString(PyExc_TypeError, "lane: a program is bytes");
        return NULL;
    }
    const int64_t *p = (const int64_t *)PyBytes_AS_STRING(prog);
    if (PyBytes_GET_SIZE(prog) < HDR * 8 || p[H_MAGIC] != MAGIC ||
        PyBytes_GET_SIZE(prog) != (HDR + p[H_NOPS] * OPW) * 8) {
        PyErr_SetString(PyExc_ValueError, "lane: not a lane program");
        return NULL;
    }
    return p;
}

/* run(program, buffer, call, position, group, transport) -> int
 *   -1: the call is done; -2: the group cannot run it now, -3: the buffer is not a
 *   C-contiguous writable one of the lane's size (position 0 only; nothing done);
 *   2 * i: operation i waits for a word (Python waits, then calls again at i);
 *   2 * i + 1: receive i names a descriptor the lane does not expect (Python reads it). */
static PyObject *lane_run(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "run(program: bytes, buffer, call, position, group, "
                                         "transport)");
        return NULL;
    }
    const int64_t *p = program_words(args[0]);
    if (p == NULL)
        return NULL;
    int64_t c = PyLong_AsLongLong(args[2]);
    Py_ssize_t pos = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    long r = run_program(p, args[1], c, pos, args[4], args[5]);
    return r == RUN_ERROR ? NULL : PyLong_FromLong(r);
}

/* combine(dtype, op, rule, left, dst, src): the C reductions on two buffers, dst writable
 * (dst := dst ⊕ src, or src ⊕ dst with left; the lane's lowering checks them against the
 * backend's own functions; tests compare them too) */
static PyObject *lane_combine(PyObject *mod, PyObject *args)
{
    (void)mod;
    int dtype, op, left;
    long long rule;
    Py_buffer d, s;
    if (!PyArg_ParseTuple(args, "iiLpw*y*", &dtype, &op, &rule, &left, &d, &s))
        return NULL;
    if (d.len != s.len || dtype < D_F32 || dtype > D_U8 || op < O_SUM || op > O_BXOR) {
        PyBuffer_Release(&d);
        PyBuffer_Release(&s);
        PyErr_SetString(PyExc_ValueError, "combine: same-size buffers, known dtype and op");
        return NULL;
    }
    combine(dtype, op, rule, left, d.buf, s.buf, d.len);
    PyBuffer_Release(&d);
    PyBuffer_Release(&s);
    Py_RETURN_NONE;
}

static PyObject *lane_runs(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return PyLong_FromLongLong(native_runs);
}

/* ---- the replayed call: a compiled signature's entry and the front ends' call ------------ */

/* Entry(ref, lane, group, transport, state, done, slow): a compiled signature's table entry
 * (lane.py's _entry) whose common case runs here: the caller's group is the first call's
 * (ref() is it), the lane replays in C (state["native"]), the program runs to its end; then
 * done(buffer). Anything else goes to Python: a wait longer than the loop's polls
 * (lane._continue), a group or buffer the lane cannot run now (slow(group, buffer, key): the
 * Python entry, which decides), an error (the group aborted, as lane.py's replay does). */
typedef struct {
    PyObject_HEAD
    PyObject *ref, *lane, *program, *group, *transport, *state, *done, *slow;
} Entry;

static PyTypeObject EntryType;
static PyObject *s_native, *s_abort, *s_continue, *s_program;
static PyObject *call_table, *call_state, *call_env, *call_keys, *call_slow;

static void abort_group(PyObject *g)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (attr_true(g, s_closed) == 0) {
        PyObject *r = PyObject_CallMethodNoArgs(g, s_abort);
        Py_XDECREF(r);
    }
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
}

/* True: replayed; otherwise what the Python entry returns (False / None), or NULL */
static PyObject *entry_run(Entry *e, PyObject *group, PyObject *buf, PyObject *key)
{
    PyObject *who = PyObject_CallNoArgs(e->ref);
    if (who == NULL)
        return NULL;
    Py_DECREF(who);
    if (who != group)
        Py_RETURN_FALSE;
    PyObject *native = PyDict_GetItemWithError(e->state, s_native);
    if (native != Py_True) {
        if (native == NULL && PyErr_Occurred())
            return NULL;
        return PyObject_CallFunctionObjArgs(e->slow, group, buf, key, NULL);
    }
    PyObject *calls = PyObject_GetAttr(e->group, s_calls);
    if (calls == NULL)
        return NULL;
    int64_t c = PyLong_AsLongLong(calls) + 1;
    Py_DECREF(calls);
    if (PyErr_Occurred())
        return NULL;
    long r = run_program((const int64_t *)PyBytes_AS_STRING(e->program), buf, c, 0, e->group,
                         e->transport);
    if (r == RUN_ERROR) {
        abort_group(e->group);
        return NULL;
    }
    if (r == R_CANNOT || r == R_BUFFER)   /* nothing done: Python decides */
        return PyObject_CallFunctionObjArgs(e->slow, group, buf, key, NULL);
    if (r >= 0) {   /* a long wait or an unexpected descriptor: Python continues the call */
        PyObject *pr = PyLong_FromLong(r), *pc = PyLong_FromLongLong(c), *res = NULL;
        if (pr != NULL && pc != NULL)
            res = PyObject_CallMethodObjArgs(e->lane, s_continue, buf, pr, pc, NULL);
        Py_XDECREF(pr);
        Py_XDECREF(pc);
        if (res == NULL)
            return NULL;
        r = PyLong_AsLong(res);
        Py_DECREF(res);
        if (r == -1 && PyErr_Occurred())
            return NULL;
        if (r != R_DONE) {
            PyErr_SetString(PyExc_RuntimeError, "lane: a call stopped midway");
            return NULL;
        }
    }
    PyObject *d = PyObject_CallOneArg(e->done, buf);
    if (d == NULL)
        return NULL;
    Py_DECREF(d);
    Py_RETURN_TRUE;
}

static PyObject *entry_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    Entry *e = (Entry *)type->tp_alloc(type, 0);
    if (e == NULL)
        return NULL;
    static char *names[] = {"ref", "lane", "group", "transport", "state", "done", "slow", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO!OO", names, &e->ref, &e->lane, &e->group,
                                     &e->transport, &PyDict_Type, &e->state, &e->done,
                                     &e->slow)) {
        e->ref = e->lane = e->group = e->transport = e->state = e->done = e->slow = NULL;
        Py_DECREF(e);
        return NULL;
    }
    PyObject *objs[] = {e->ref, e->lane, e->group, e->transport, e->state, e->done, e->slow};
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
        Py_INCREF(objs[i]);
    e->program = PyObject_GetAttr(e->lane, s_program);
    if (e->program == NULL || program_words(e->program) == NULL) {
        Py_DECREF(e);
        return NULL;
    }
    return (PyObject *)e;
}

static int entry_traverse(Entry *e, visitproc visit, void *arg)
{
    Py_VISIT(e->ref);
    Py_VISIT(e->lane);
    Py_VISIT(e->program);
    Py_VISIT(e->group);
    Py_VISIT(e->transport);
    Py_VISIT(e->state);
    Py_VISIT(e->done);
    Py_VISIT(e->slow);
    return 0;
}

static int entry_clear(Entry *e)
{
    Py_CLEAR(e->ref);
    Py_CLEAR(e->lane);
    Py_CLEAR(e->program);
    Py_CLEAR(e->group);
    Py_CLEAR(e->transport);
    Py_CLEAR(e->state);
    Py_CLEAR(e->done);
    Py_CLEAR(e->slow);
    return 0;
}

static void entry_dealloc(Entry *e)
{
    PyObject_GC_UnTrack(e);
    entry_clear(e);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

/* entry(group, buffer, key) -> bool | None, as lane.py's Python entry */
static PyObject *entry_call(Entry *e, PyObject *args, PyObject *kw)
{
    PyObject *group, *buf, *key;
    if (kw != NULL || !PyArg_UnpackTuple(args, "entry", 3, 3, &group, &buf, &key))
        return NULL;
    return entry_run(e, group, buf, key);
}

static PyMemberDef entry_members[] = {
    {"lane", T_OBJECT, offsetof(Entry, lane), READONLY, "the Lane replayed"},
    {NULL, 0, 0, 0, NULL}};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ringccl.backends.shm._lanec.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Entry(ref, lane, group, transport, state, done, slow): a compiled signature's "
              "table entry replayed in C (see _lanec.c)",
    .tp_new = entry_new,
    .tp_traverse = (traverseproc)entry_traverse,
    .tp_clear = (inquiry)entry_clear,
    .tp_dealloc = (destructor)entry_dealloc,
    .tp_call = (ternaryfunc)entry_call,
    .tp_members = entry_members,
};

/* configure(table, state, environ, names, slow): what call() reads (lane.py sets it once) */
static PyObject *lane_configure(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *table, *state, *env, *keys, *slow;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O", &PyDict_Type, &table, &PyDict_Type, &state,
                          &PyDict_Type, &env, &PyTuple_Type, &keys, &slow))
        return NULL;
    if (PyTuple_GET_SIZE(keys) < 1) {
        PyErr_SetString(PyExc_ValueError, "configure: names start with RINGCCL_DEBUG's");
        return NULL;
    }
    PyObject **slots[] = {&call_table, &call_state, &call_env, &call_keys, &call_slow};
    PyObject *vals[] = {table, state, env, keys, slow};
    for (size_t i = 0; i < 5; i++) {
        Py_INCREF(vals[i]);
        Py_XSETREF(*slots[i], vals[i]);
    }
    Py_RETURN_NONE;
}

/* call(parts, group, buffer) -> True (the compiled call for this signature replayed) or the
 * signature's key (None: no key) for the front end's first_call; lane.py's _call_python is
 * the same in Python and runs whatever is not the common case here */
static PyObject *lane_call(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    if (nargs != 3 || !PyTuple_Check(args[0]) || call_table == NULL) {
        PyErr_SetString(PyExc_TypeError, "call(parts: tuple, group, buffer) after configure()");
        return NULL;
    }
    PyObject *parts = args[0];
    if (PyDict_GetItemWithError(call_state, s_enabled) != Py_True ||
        PyDict_GetItemWithError(call_env, PyTuple_GET_ITEM(call_keys, 0)) != NULL ||
        PyErr_Occurred()) {   /* off, refused, or RINGCCL_DEBUG set: Python decides */
        PyErr_Clear();
        return PyObject_Vectorcall(call_slow, args, 3, NULL);
    }
    Py_ssize_t np_ = PyTuple_GET_SIZE(parts), nk = PyTuple_GET_SIZE(call_keys);
    PyObject *key = PyTuple_New(np_ + nk);
    if (key == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < np_; i++) {
        PyObject *o = PyTuple_GET_ITEM(parts, i);
        Py_INCREF(o);
        PyTuple_SET_ITEM(key, i, o);
    }
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *v = PyDict_GetItemWithError(call_env, PyTuple_GET_ITEM(call_keys, i));
        if (v == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(key);
                return NULL;
            }
            v = Py_None;
        }
        Py_INCREF(v);
        PyTuple_SET_ITEM(key, np_ + i, v);
    }
    PyObject *e = PyDict_GetItemWithError(call_table, key);
    if (e == NULL) {
        PyErr_Clear();   /* unknown, or an unhashable part: first_call decides */
        return key;
    }
    Py_INCREF(e);
    PyObject *r = Py_IS_TYPE(e, &EntryType) ? entry_run((Entry *)e, args[1], args[2], key)
                                            : PyObject_CallFunctionObjArgs(e, args[1], args[2],
                                                                           key, NULL);
    Py_DECREF(e);
    if (r == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    int hit = r == Py_True;
    Py_DECREF(r);
    if (hit) {
        Py_DECREF(key);
        Py_RETURN_TRUE;
    }
    return key;
}

static PyMethodDef methods[] = {
    {"run", (PyCFunction)(void (*)(void))lane_run, METH_FASTCALL,
     "run(program, buffer, call, position, group, transport) -> int (see _lanec.c)"},
    {"combine", lane_combine, METH_VARARGS, "combine(dtype, op, rule, left, dst, src)"},
    {"runs", lane_runs, METH_NOARGS, "calls completed by run() in this process"},
    {"configure", lane_configure, METH_VARARGS,
     "configure(table, state, environ, names, slow): what call() reads"},
    {"call", (PyCFunction)(void (*)(void))lane_call, METH_FASTCALL,
     "call(parts, group, buffer) -> True or the signature's key (see _lanec.c)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lanec",
                                    "The compiled lane's replay loop (see lane_native.py).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__lanec(void)
{
    PyObject **names[] = {&s_enabled, &s_native, &s_abort, &s_continue, &s_program, &s_closed,
                          &s_work_serial, &s_retired, &s_lazy, &s_calls, &s_sent,
                          &s_expected, &s_released, &s_lane_marks, &s_lane_call, &s_data_ptr,
                          &s_is_contiguous};
    const char *text[] = {"enabled", "native", "abort", "_continue", "program", "closed",
                          "work_serial", "retired", "lazy", "calls", "sent",
                          "expected", "released", "lane_marks", "lane_call", "data_ptr",
                          "is_contiguous"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i] = PyUnicode_InternFromString(text[i])) == NULL)
            return NULL;
    if (PyType_Ready(&EntryType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&EntryType);
    if (PyModule_AddObject(m, "Entry", (PyObject *)&EntryType) < 0) {
        Py_DECREF(&EntryType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "MAGIC_LOW", (long)(MAGIC & 0x7fffffff)) < 0 ||
        PyModule_AddIntConstant(m, "HEADER_WORDS", HDR) < 0 ||
        PyModule_AddIntConstant(m, "OP_WORDS", OPW) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
