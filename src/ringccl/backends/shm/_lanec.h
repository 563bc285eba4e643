/* ringccl.backends.shm._lanec: what the module (_lanec.c), the replay loop (_lanec_loop.c)
 * and its data movement (_lanec_data.c) share. */
#ifndef RINGCCL_LANEC_H
#define RINGCCL_LANEC_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* program header words (lane_native.py writes them: keep the two in step) */
/* H_WORK: an all-or-nothing call's working copy (0: the loop works on the caller's buffer);
 * the sends' and receives' buffer addresses are byte offsets in the one it works on */
enum { H_MAGIC, H_NOPS, H_CTRL, H_SERIAL, H_ABORT, H_WORK, H_BYTES, H_DTYPE, H_OP, H_RULE,
       H_RULE_LEFT, H_NEED, H_NEED0, H_NEED1, H_ENTERED, H_SEG, H_SEGBYTES, H_RING, H_SPIN,
       H_ITEMSIZE, H_THREADS, HDR = 21 };
#define OPW 14
#define MAGIC 0x4c414e4543303031LL
enum { K_BEGIN_WAIT = 1, K_PUBLISH, K_COPY_IN, K_SEND, K_RECV, K_COPY_OUT, K_END_WAIT,
       K_SEND_WAIT };
/* a descriptor's serial word naming the sender's own memory (peer_memory.py: PEER_MEMORY) */
#define PEER_MEMORY (-1)
/* an operation is split over threads (_lanec_data.c) in parts of at least PART_MIN bytes: a
 * worker's wake-up costs tens of µs, and an operation that fits in cache runs at cache speed
 * on one thread (the float32 sum on this project's 2-core test machine, one process, two
 * threads against one: 0.64x at 512 KiB with 256 KiB parts; with 2 MiB parts 1.00x at 2 MiB,
 * 1.15x at 4 MiB, 1.39x at 16 MiB; benchmarks/bench_shm_threads.py measures an all_reduce) */
#define PART_MIN (2 << 20)
/* the most threads an operation is split over (lane_native.MAX_THREADS) */
#define MAX_THREADS 64
enum { D_F32, D_F64, D_I8, D_I16, D_I32, D_I64, D_U8 };
enum { O_SUM, O_PROD, O_MIN, O_MAX, O_BAND, O_BOR, O_BXOR };
#define R_DONE (-1)
#define R_CANNOT (-2)
#define R_BUFFER (-3)

#define RUN_ERROR (-100)

/* calls the loop completed in this process (tests: the native replay ran) */
extern long long lanec_native_runs;

/* intern the attribute names the loop reads: 0, or -1 with an exception set */
int lanec_init(void);

/* one replay of program `p` on `buf` from operation `pos`: R_DONE, R_CANNOT or R_BUFFER
 * (position 0 only, nothing done), 2 * i (operation i waits), 2 * i + 1 (receive i names a
 * descriptor the lane does not expect), or RUN_ERROR with an exception set */
long lanec_run(const int64_t *p, PyObject *buf, int64_t c, Py_ssize_t pos, PyObject *g,
               PyObject *t);

/* d := d ⊕ s, or with `left` d := s ⊕ d (the C reductions), on bytes [at, at + nbytes) of a
 * combine over `total` bytes (d, s, also point at byte `at`): the bits of that part of the
 * whole combine (the NaN rule counts positions in the whole); the result also written to
 * `also` block by block when it is not NULL */
void lanec_combine_part(int dtype, int op, int64_t rule, int left, void *d, const void *s,
                        int64_t nbytes, void *also, int64_t total, int64_t at);

/* one operation's bytes (_lanec_data.c), split over p[H_THREADS] threads when large (the
 * same bits): a copy; receive op `o`'s copy / reduction / accumulator part (lane.py's modes)
 * from `src`; the same from the peer's memory at `from` (0 or a failed read's errno); the
 * accumulator folded into dst on the left (d := fold ⊕ d) */
void lanec_copy(const int64_t *p, char *dst, const char *src, int64_t nbytes);
void lanec_apply(const int64_t *p, const int64_t *o, char *dst, char *fold, char *also,
                 const char *src, int64_t nb);
int lanec_peer_apply(const int64_t *p, const int64_t *o, char *dst, char *fold, char *also,
                     int64_t from, int64_t nb);
void lanec_flush(const int64_t *p, char *dst, const char *fold, int64_t nb);

/* lanec_combine_part on up to `threads` threads (the same bits) */
void lanec_combine_threads(int dtype, int op, int64_t rule, int left, void *d, const void *s,
                           int64_t nbytes, void *also, int64_t total, int64_t at,
                           int64_t threads);

/* the worker pool's fork handler: 0, or -1 */
int lanec_data_init(void);

/* the pool's workers running in this process (tests: a large operation was split) */
int lanec_workers(void);

/* 1: obj.name is truthy; 0: not; -1: error */
int lanec_attr_true(PyObject *obj, PyObject *name);

#endif
