/* ringccl.backends.shm._lanec: the compiled lane's entry points (the replay loop itself and
 * the reductions are in _lanec_loop.c, whose comment says what a replay does).
 *
 * run(program, buffer, call, position, group, transport): one replay, resumable (lane.py's
 * native replay); combine(...): the C reductions (the lowering's probes, tests); Entry: a
 * compiled signature's table entry that runs the common case without a Python frame;
 * call(parts, group, buffer): the front ends' replayed call (the signature's key with the
 * environment, the table, the entry), whose Python twin is lane.py's _call_python.
 */
#include "_lanec.h"
#include <structmember.h>
#include <stddef.h>

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
    long r = lanec_run(p, args[1], c, pos, args[4], args[5]);
    return r == RUN_ERROR ? NULL : PyLong_FromLong(r);
}

/* lanec_combine(dtype, op, rule, left, dst, src[, also[, total, at[, threads]]]): the C
 * reductions on two buffers, dst writable (dst := dst ⊕ src, or src ⊕ dst with left; the
 * lane's lowering checks them against the backend's own functions; tests compare them too);
 * the result also written to `also` (None: not); with `total` and `at`, as bytes
 * [at, at + len) of a combine over `total` bytes (lanec_combine_part: a reduction read from a
 * peer block by block); split over `threads` threads when large (the same bits) */
static PyObject *lane_combine(PyObject *mod, PyObject *args)
{
    (void)mod;
    int dtype, op, left;
    long long rule, total = -1, at = 0, threads = 1;
    Py_buffer d, s, a = {0};
    PyObject *also = Py_None;
    if (!PyArg_ParseTuple(args, "iiLpw*y*|OLLL", &dtype, &op, &rule, &left, &d, &s, &also,
                          &total, &at, &threads))
        return NULL;
    if (also != Py_None && PyObject_GetBuffer(also, &a, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&d);
        PyBuffer_Release(&s);
        return NULL;
    }
    if (total < 0)
        total = d.len, at = 0;
    if (d.len != s.len || (a.buf != NULL && a.len != d.len) || dtype < D_F32 ||
        dtype > D_U8 || op < O_SUM || op > O_BXOR || at < 0 || at + d.len > total ||
        threads < 1) {
        PyBuffer_Release(&d);
        PyBuffer_Release(&s);
        if (a.buf != NULL)
            PyBuffer_Release(&a);
        PyErr_SetString(PyExc_ValueError,
                        "combine: same-size buffers, known dtype and op, threads >= 1");
        return NULL;
    }
    lanec_combine_threads(dtype, op, rule, left, d.buf, s.buf, d.len, a.buf, total, at, threads);
    PyBuffer_Release(&d);
    PyBuffer_Release(&s);
    if (a.buf != NULL)
        PyBuffer_Release(&a);
    Py_RETURN_NONE;
}

static PyObject *lane_workers(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return PyLong_FromLong(lanec_workers());
}

static PyObject *lane_runs(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return PyLong_FromLongLong(lanec_native_runs);
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
static PyObject *s_enabled, *s_native, *s_abort, *s_continue, *s_program, *s_closed,
    *s_calls;
static PyObject *call_table, *call_state, *call_env, *call_keys, *call_slow;

static void abort_group(PyObject *g)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (lanec_attr_true(g, s_closed) == 0) {
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
    long r = lanec_run((const int64_t *)PyBytes_AS_STRING(e->program), buf, c, 0, e->group,
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
    {"combine", lane_combine, METH_VARARGS,
     "lanec_combine(dtype, op, rule, left, dst, src[, also[, total, at[, threads]]])"},
    {"runs", lane_runs, METH_NOARGS, "calls completed by run() in this process"},
    {"workers", lane_workers, METH_NOARGS,
     "the threads started in this process to split large operations"},
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
                          &s_calls};
    const char *text[] = {"enabled", "native", "abort", "_continue", "program", "closed",
                          "calls"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i] = PyUnicode_InternFromString(text[i])) == NULL)
            return NULL;
    if (lanec_init() < 0 || PyType_Ready(&EntryType) < 0)
        return NULL;
    if (lanec_data_init() < 0) {
        PyErr_SetString(PyExc_OSError, "_lanec: pthread_atfork failed");
        return NULL;
    }
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
        PyModule_AddIntConstant(m, "OP_WORDS", OPW) < 0 ||
        PyModule_AddIntConstant(m, "PART_BYTES", PART_MIN) < 0 ||
        PyModule_AddIntConstant(m, "MAX_THREADS", MAX_THREADS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
