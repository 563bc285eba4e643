/* The compiled lane's replay loop in C (ringccl.backends.shm._lanec; the module is _lanec.c).
 *
 * One call of a lowered shared-memory all_reduce (ringccl/backends/shm/lane.py, which builds
 * the program and keeps the Python replay of the same operations as the fallback): on the
 * caller's buffer itself (an all-or-nothing call: on a copy, copied in first and out after the
 * last receive), per step the sends (copy into this rank's area half, descriptor, release
 * store of `posted`) and the receives (acquire load of `posted`, descriptor check, combine /
 * copy / fold, `released`; a reduction whose result a later send sends unchanged writes
 * that send's area too, block by block while in cache), the begin and end waits. Every wait
 * polls a bounded number of times and otherwise returns to Python with its position (Python's
 * bounded wait: timeout, abort word, the peer's liveness, the error naming step and peer); a
 * descriptor the lane does not expect returns too (Python reads it, or raises the transport's
 * mismatch).
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
#include "_lanec.h"

long long lanec_native_runs;
static PyObject *s_closed, *s_work_serial, *s_retired, *s_lazy, *s_calls, *s_sent,
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
#define BLOCK 1024

/* each reduction loop also built for AVX2, picked at load time where the CPU has it (a 2 MiB
 * add runs at about twice the speed of its SSE2 build on this project's test machine); the
 * same IEEE operations either way (no FMA: -std=c11 keeps contraction off) */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef CLONES
#define CLONES
#endif

/* integer ops are commutative bit for bit: d := s ⊕ d is d := d ⊕ s */
#define INT_OPS(NAME, T, U)                                                                   \
    CLONES static void NAME##_run(T *restrict d, const T *restrict s, int64_t n, int op)      \
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
    }                                                                                         \
    /* ... and with `also`, block by block, each block copied there while it is in cache */  \
    static void NAME(T *d, const T *s, int64_t n, int op, T *also)                            \
    {                                                                                         \
        if (also == NULL) {                                                                   \
            NAME##_run(d, s, n, op);                                                          \
            return;                                                                           \
        }                                                                                     \
        for (int64_t lo = 0; lo < n; lo += BLOCK) {                                           \
            int64_t m = n - lo < BLOCK ? n - lo : BLOCK;                                      \
            NAME##_run(d + lo, s + lo, m, op);                                                \
            memcpy(also + lo, d + lo, (size_t)m * sizeof(T));                                 \
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

/* min/max of a (left) and b (right) into D[i], i < M: a NaN left operand, else a NaN right one,
 * else the smaller (larger); on ties the left (rule 0) or the right (rule 1) */
#define MINMAX_LOOP(T, D, A, B, M)                                                            \
    if (rule & 1) {                                                                           \
        for (int64_t i = 0; i < (M); i++) {                                                   \
            T a = A, b = B;                                                                   \
            D[i] = a != a ? a : b != b ? b : (mx ? a > b : a < b) ? a : b;                    \
        }                                                                                     \
    } else {                                                                                  \
        for (int64_t i = 0; i < (M); i++) {                                                   \
            T a = A, b = B;                                                                   \
            D[i] = (a != a || (mx ? a >= b : a <= b)) ? a : b;                                \
        }                                                                                     \
    }

/* float ops, block by block: a block without NaN operands is computed in place, vectorised
 * (add/mul: order-free IEEE results, NaNs of inf - inf or 0 * inf included; min/max: compare
 * and select, the bits of an operand); a block with a NaN operand element by element, resolving
 * NaN operands as the backend does (MINMAX_LOOP; nan_rule). `left`: d := s ⊕ d. */
#define FLOAT_OPS(NAME, T, UI, QUIET)                                                         \
    static inline T NAME##_q(T x)                                                             \
    {                                                                                         \
        UI u; memcpy(&u, &x, sizeof u); u |= QUIET; memcpy(&x, &u, sizeof u); return x;      \
    }                                                                                         \
    /* d[i] := a[i] ⊕ b[i] for operands without NaN; a is d or s (one loop per case, so    \
     * that each vectorises) */                                                               \
    static inline void NAME##_plain(T *d, const T *a, const T *b, int64_t m, int op,         \
                                    int right_on_ties)                                        \
    {                                                                                         \
        if (op == O_SUM)                                                                      \
            for (int64_t i = 0; i < m; i++) d[i] = a[i] + b[i];                               \
        else if (op == O_PROD)                                                                \
            for (int64_t i = 0; i < m; i++) d[i] = a[i] * b[i];                               \
        else if (op == O_MAX && right_on_ties)                                                \
            for (int64_t i = 0; i < m; i++) d[i] = a[i] > b[i] ? a[i] : b[i];                 \
        else if (op == O_MAX)                                                                 \
            for (int64_t i = 0; i < m; i++) d[i] = a[i] >= b[i] ? a[i] : b[i];                \
        else if (right_on_ties)                                                               \
            for (int64_t i = 0; i < m; i++) d[i] = a[i] < b[i] ? a[i] : b[i];                 \
        else                                                                                  \
            for (int64_t i = 0; i < m; i++) d[i] = a[i] <= b[i] ? a[i] : b[i];                \
    }                                                                                         \
    CLONES static void NAME(T *restrict d, const T *restrict s, int64_t n, int op,          \
                            int64_t rule, int left, T *restrict also, int64_t total,          \
                            int64_t at)                                                       \
    {                                                                                         \
        int mx = op == O_MAX;                                                                 \
        for (int64_t lo = 0; lo < n; lo += BLOCK) {                                           \
            int64_t m = n - lo < BLOCK ? n - lo : BLOCK, hi = lo + m;                         \
            T *x = d + lo;                                                                    \
            const T *y = s + lo;                                                              \
            int nan = 0;                                                                      \
            for (int64_t i = 0; i < m; i++) nan |= (x[i] != x[i]) | (y[i] != y[i]);           \
            if (!nan) {                                                                       \
                if (left)                                                                     \
                    NAME##_plain(x, y, x, m, op, (int)(rule & 1));                            \
                else                                                                          \
                    NAME##_plain(x, x, y, m, op, (int)(rule & 1));                            \
            } else if (op == O_MIN || op == O_MAX) {                                          \
                if (left) {                                                                   \
                    MINMAX_LOOP(T, x, y[i], x[i], m)                                          \
                } else {                                                                      \
                    MINMAX_LOOP(T, x, x[i], y[i], m)                                          \
                }                                                                             \
            } else {                                                                          \
                for (int64_t i = lo; i < hi; i++) {                                           \
                    T a = left ? s[i] : d[i], b = left ? d[i] : s[i];                         \
                    if (a != a && b != b)                                                     \
                        d[i] = NAME##_q(nan_rule(rule, total, at + i) ? b : a);               \
                    else if (a != a || b != b)                                                \
                        d[i] = NAME##_q(a != a ? a : b);                                      \
                    else                                                                      \
                        d[i] = op == O_SUM ? a + b : a * b;                                   \
                }                                                                             \
            }                                                                                 \
            if (also != NULL)   /* the block, still in cache, copied to a send area too */    \
                memcpy(also + lo, x, (size_t)m * sizeof(T));                                  \
        }                                                                                     \
    }

FLOAT_OPS(comb_f32, float, uint32_t, 0x00400000u)
FLOAT_OPS(comb_f64, double, uint64_t, 0x0008000000000000ull)

void lanec_combine_part(int dtype, int op, int64_t rule, int left, void *d, const void *s,
                        int64_t nbytes, void *also, int64_t total, int64_t at)
{
    switch (dtype) {
    case D_F32: comb_f32(d, s, nbytes / 4, op, rule, left, also, total / 4, at / 4); break;
    case D_F64: comb_f64(d, s, nbytes / 8, op, rule, left, also, total / 8, at / 8); break;
    case D_I8: comb_i8(d, s, nbytes, op, also); break;
    case D_U8: comb_u8(d, s, nbytes, op, also); break;
    case D_I16: comb_i16(d, s, nbytes / 2, op, also); break;
    case D_I32: comb_i32(d, s, nbytes / 4, op, also); break;
    default: comb_i64(d, s, nbytes / 8, op, also); break;
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

int lanec_attr_true(PyObject *obj, PyObject *name)
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
    if ((r = lanec_attr_true(g, s_closed)) != 0)
        return r < 0 ? -1 : 0;
    if ((r = lanec_attr_true(g, s_retired)) != 0)
        return r < 0 ? -1 : 0;
    if ((r = lanec_attr_true(g, s_lazy)) != 0)
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

long lanec_run(const int64_t *p, PyObject *buf, int64_t c, Py_ssize_t pos, PyObject *g,
               PyObject *t)
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
    PyObject *sent = PyObject_GetAttr(t, s_sent), *expected = PyObject_GetAttr(t, s_expected),
             *released = PyObject_GetAttr(t, s_released), *marks = NULL;
    long result = R_DONE;
    int failed = sent == NULL || expected == NULL || released == NULL;
    for (Py_ssize_t i = pos; !failed && i < p[H_NOPS]; i++) {
        const int64_t *o = p + HDR + i * OPW;
        int64_t peer = o[1], seq, v;
        switch (o[0]) {
        case K_BEGIN_WAIT: {   /* the peer released what this rank sent before the previous
                                  call ([3] 0), or all it sent ([3] 1: one send area) */
            if (marks == NULL && o[3]) {
                marks = sent;
                Py_INCREF(marks);
            } else if (marks == NULL) {
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
            /* [2] one send area: both halves written, so the next call waits for all sent */
            if (rc < 0 || set_int_attr(t, s_lane_call, o[2] ? -1 : c) < 0 ||
                set_int_attr(g, s_calls, c) < 0
                || set_int_attr(g, s_lazy, 0) < 0) { failed = 1; break; }
            store_rel(w + (h ? p[H_NEED1] : p[H_NEED0]), p[H_NEED]);
            store_rel(w + p[H_ENTERED], c);
            break;
        }
        case K_SEND: {   /* [2] src (offset), [3] nbytes, [4+h] area, [6+h] offset, [8] ring,
                            [9] posted, [10] first copy of this range, [11] sent in place:
                            the descriptor names this process's memory, the peer reads it */
            if (o[10] && !o[11])
                lanec_copy(p, (char *)(intptr_t)o[4 + h], base + o[2], o[3]);
            if (get_item(sent, peer, &seq) < 0 || set_item(sent, peer, seq + 1) < 0) {
                failed = 1;
                break;
            }
            int64_t *d = w + o[8] + (seq % ring_n) * 4;
            d[0] = o[11] ? PEER_MEMORY : serial;
            d[1] = o[11] ? (int64_t)(intptr_t)(base + o[2]) : o[6 + h];
            d[2] = o[3];
            d[3] = seq;
            store_rel(w + o[9], seq + 1);
            break;
        }
        case K_RECV: {   /* [2] dst (offset), [3] mode (lane.py), [4] fold, [5] flush, [6] nbytes,
                            [7] posted, [8] released, [9] ring, [10+h] the area of a later send
                            of the result (0: none; modes 1 and 4), [12] the peer's pid */
            if (get_item(expected, peer, &seq) < 0) { failed = 1; break; }
            if (!spin_ge(w + o[7], seq + 1, spin)) { result = 2 * i; goto out; }
            const int64_t *d = w + o[9] + (seq % ring_n) * 4;
            int64_t off = d[1], nb = d[2];
            int remote = d[0] == PEER_MEMORY;
            if (nb != o[6] || d[3] != seq || (!remote && (d[0] != serial || off < 0 ||
                off % p[H_ITEMSIZE] || off + nb > p[H_SEGBYTES]))) {
                result = 2 * i + 1;
                goto out;
            }
            char *dst = base + o[2], *fold = (char *)(intptr_t)o[4];
            char *also = (char *)(intptr_t)o[10 + h];
            const char *src = seg + off;
            /* a peer's memory that cannot be read (it is gone): Python names the failure (a
               descriptor of the peer's memory is never unexpected otherwise) */
            if (remote && lanec_peer_apply(p, o, dst, fold, also, off, nb) != 0) {
                result = 2 * i + 1;
                goto out;
            }
            if (set_item(expected, peer, seq + 1) < 0) { failed = 1; break; }
            if (!remote)
                lanec_apply(p, o, dst, fold, also, src, nb);
            if (o[3] >= 2 && o[5])   /* the lower ranks' accumulator on the left */
                lanec_flush(p, dst, fold, nb);
            if (set_item(released, peer, seq + 1) < 0) { failed = 1; break; }
            store_rel(w + o[8], seq + 1);
            break;
        }
        case K_COPY_IN:   /* an all-or-nothing call: the caller's buffer read once, */
            lanec_copy(p, work, mine, p[H_BYTES]);
            break;
        case K_COPY_OUT:  /* and written after the last receive */
            lanec_copy(p, mine, work, p[H_BYTES]);
            break;
        case K_END_WAIT:   /* the peer entered this call */
            if (!spin_ge(w + o[2], c, spin)) { result = 2 * i; goto out; }
            break;
        case K_SEND_WAIT: {   /* [2] released word, [3] k: the peer read this call's send k to
                                 it (sent in place: before its bytes change or the call ends) */
            PyObject *lm = PyObject_GetAttr(t, s_lane_marks);
            if (lm == NULL) { failed = 1; break; }
            int rc = get_item(lm, peer, &v);
            Py_DECREF(lm);
            if (rc < 0) { failed = 1; break; }
            if (!spin_ge(w + o[2], v + o[3] + 1, spin)) { result = 2 * i; goto out; }
            break;
        }
        default:
            PyErr_SetString(PyExc_ValueError, "lane: unknown operation");
            failed = 1;
        }
    }
    if (!failed)
        lanec_native_runs++;
out:
    Py_XDECREF(sent);
    Py_XDECREF(expected);
    Py_XDECREF(released);
    Py_XDECREF(marks);
    if (held)
        PyBuffer_Release(&view);
    return failed ? RUN_ERROR : result;
}

int lanec_init(void)
{
    PyObject **names[] = {&s_closed, &s_work_serial, &s_retired, &s_lazy, &s_calls, &s_sent,
                          &s_expected, &s_released, &s_lane_marks, &s_lane_call, &s_data_ptr,
                          &s_is_contiguous};
    const char *text[] = {"closed", "work_serial", "retired", "lazy", "calls", "sent",
                          "expected", "released", "lane_marks", "lane_call", "data_ptr",
                          "is_contiguous"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i] = PyUnicode_InternFromString(text[i])) == NULL)
            return -1;
    return 0;
}
