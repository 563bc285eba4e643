/* The compiled lane's data movement (ringccl.backends.shm._lanec; the loop is _lanec_loop.c):
 * one operation's bytes copied, reduced or read from a peer's memory, split over up to
 * H_THREADS threads (the calling one included) when the operation is large.
 *
 * Every part is an element range whose bits are those of the same range of the whole
 * operation (copies trivially; reductions are elementwise and lanec_combine_part counts the
 * NaN rule's positions in the whole), so the thread count never changes a result.
 *
 * The workers are a process-wide pool, started at the first operation that asks for them and
 * parked on a condition variable between operations; a forked child starts without them
 * (pthread_atfork resets the pool there). They never touch Python objects: the loop holds
 * the GIL and waits for every part before it goes on.
 */
#include "_lanec.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/uio.h>

/* ---- the pool ------------------------------------------------------------------------- */

typedef void (*task_fn)(void *arg, int64_t at, int64_t m);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static int started;                 /* workers running in this process */
static int cannot_start;            /* a pthread_create failed: no more tried */
static int in_flight;               /* a job runs (its caller waits for it) */
static uint64_t job;                /* the current job's number */
static uint64_t job_seen[MAX_THREADS];
static int pending;                 /* the current job's parts its workers have not finished */
static task_fn job_fn;
static void *job_arg;
static int64_t job_bytes, job_part;
static int job_parts;

static void *worker(void *arg)
{
    int k = (int)(intptr_t)arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (job == job_seen[k])
            pthread_cond_wait(&go, &mu);
        job_seen[k] = job;
        if (k >= job_parts)
            continue;
        int64_t at = k * job_part, m = job_bytes - at < job_part ? job_bytes - at : job_part;
        task_fn fn = job_fn;
        void *a = job_arg;
        pthread_mutex_unlock(&mu);
        fn(a, at, m);
        pthread_mutex_lock(&mu);
        if (--pending == 0)
            pthread_cond_signal(&done);
    }
    return NULL;
}

/* workers 1 .. n - 1 running (mu held): how many parts a job can have now (after a failed
 * pthread_create, e.g. a pids limit, no more are tried: fewer threads, the same bits) */
static int ensure_workers(int n)
{
    sigset_t mask, old;
    pthread_attr_t attr;
    if (n > MAX_THREADS)
        n = MAX_THREADS;
    if (started + 1 >= n || cannot_start)
        return started + 1 < n ? started + 1 : n;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* asynchronous signals go to Python's threads, never to a worker; a fault in a worker
       still reaches its handler (faulthandler's traceback) */
    sigfillset(&mask);
    int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
        sigdelset(&mask, faults[i]);
    pthread_sigmask(SIG_SETMASK, &mask, &old);
    while (started + 1 < n) {
        pthread_t t;
        job_seen[started + 1] = job;
        if (pthread_create(&t, &attr, worker, (void *)(intptr_t)(started + 1)) != 0) {
            cannot_start = 1;
            break;
        }
        started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return started + 1;
}

/* fn over [0, nbytes): in parts of whole cache lines on up to `threads` threads when each part
 * would have at least PART_MIN bytes, else on the calling thread alone (also when no worker
 * can start, or while another thread's job runs: the loop holds the GIL, so only a caller
 * outside it could meet one) */
static void parallel(task_fn fn, void *arg, int64_t nbytes, int64_t threads)
{
    int64_t parts = nbytes / PART_MIN;
    if (threads < parts)
        parts = threads;
    if (parts <= 1) {
        fn(arg, 0, nbytes);
        return;
    }
    pthread_mutex_lock(&mu);
    parts = in_flight ? 1 : ensure_workers((int)parts);
    if (parts <= 1) {
        pthread_mutex_unlock(&mu);
        fn(arg, 0, nbytes);
        return;
    }
    /* every element size divides 64: a part boundary never splits an element */
    int64_t part = ((nbytes + parts - 1) / parts + 63) / 64 * 64;
    in_flight = 1;
    job_fn = fn;
    job_arg = arg;
    job_bytes = nbytes;
    job_part = part;
    job_parts = (int)((nbytes + part - 1) / part);
    pending = job_parts - 1;
    job++;
    pthread_cond_broadcast(&go);
    pthread_mutex_unlock(&mu);
    fn(arg, 0, part < nbytes ? part : nbytes);
    pthread_mutex_lock(&mu);
    while (pending > 0)
        pthread_cond_wait(&done, &mu);
    in_flight = 0;
    pthread_mutex_unlock(&mu);
}

static void pool_after_fork(void)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    mu = m;
    go = c;
    done = c;
    started = 0;
    cannot_start = 0;
    in_flight = 0;
}

int lanec_workers(void)
{
    pthread_mutex_lock(&mu);
    int n = started;
    pthread_mutex_unlock(&mu);
    return n;
}

int lanec_data_init(void)
{
    return pthread_atfork(NULL, NULL, pool_after_fork) == 0 ? 0 : -1;
}

/* ---- a send in the peer's own memory (peer_memory.py) ------------------------------------ */
/* bytes read from a peer per step of a reduction: the block stays in cache while it is
 * reduced; one block per thread */
#define PEER_BLOCK (128 << 10)
static __thread char *peer_block;

/* nbytes at address `from` of process `pid` into `to` (process_vm_readv): 0, or an errno */
static int peer_read(int64_t pid, char *to, int64_t from, int64_t nbytes)
{
    while (nbytes > 0) {
        struct iovec here = {to, (size_t)nbytes}, there = {(void *)(intptr_t)from, (size_t)nbytes};
        ssize_t k = process_vm_readv((pid_t)pid, &here, 1, &there, 1, 0);
        if (k <= 0)
            return k < 0 ? errno : EIO;
        to += k;
        from += k;
        nbytes -= k;
    }
    return 0;
}

/* bytes [at, at + m) of receive op `o`'s operation (mode o[3], lane.py) over its nb bytes,
 * their source at `src`: copy, reduce into dst (its result also to a later send's area), start
 * or fold into the accumulator; each part gives the bits of that part of the whole */
static void apply_part(const int64_t *p, const int64_t *o, char *dst, char *fold, char *also,
                       const char *src, int64_t m, int64_t nb, int64_t at)
{
    int dtype = (int)p[H_DTYPE], op = (int)p[H_OP];
    char *copy = also != NULL ? also + at : NULL;
    switch (o[3]) {
    case 0: memcpy(dst + at, src, (size_t)m); break;
    case 1: lanec_combine_part(dtype, op, p[H_RULE], 0, dst + at, src, m, copy, nb, at); break;
    case 4:   /* from a peer below: src ⊕ dst */
        lanec_combine_part(dtype, op, p[H_RULE_LEFT], 1, dst + at, src, m, copy, nb, at);
        break;
    case 2: memcpy(fold + at, src, (size_t)m); break;
    default: lanec_combine_part(dtype, op, p[H_RULE], 0, fold + at, src, m, NULL, nb, at);
    }
}

/* ---- the operations, each split over the program's threads ------------------------------ */
typedef struct {
    const int64_t *p, *o;
    char *dst, *fold, *also;
    const char *src;
    int64_t from, nb;
    int err;   /* a failed peer read's errno (the first) */
} Move;

static void copy_task(void *arg, int64_t at, int64_t m)
{
    Move *x = arg;
    memcpy(x->dst + at, x->src + at, (size_t)m);
}

void lanec_copy(const int64_t *p, char *dst, const char *src, int64_t nbytes)
{
    Move x = {.dst = dst, .src = src};
    parallel(copy_task, &x, nbytes, p[H_THREADS]);
}

static void apply_task(void *arg, int64_t at, int64_t m)
{
    Move *x = arg;
    apply_part(x->p, x->o, x->dst, x->fold, x->also, x->src + at, m, x->nb, at);
}

void lanec_apply(const int64_t *p, const int64_t *o, char *dst, char *fold, char *also,
                 const char *src, int64_t nb)
{
    Move x = {.p = p, .o = o, .dst = dst, .fold = fold, .also = also, .src = src, .nb = nb};
    parallel(apply_task, &x, nb, p[H_THREADS]);
}

/* a copy read straight into place (dst, or the accumulator it starts); a reduction block by
 * block through this thread's cached buffer */
static void peer_task(void *arg, int64_t at, int64_t m)
{
    Move *x = arg;
    int64_t pid = x->o[12];
    int e = 0;
    if (x->o[3] == 0 || x->o[3] == 2) {
        e = peer_read(pid, (x->o[3] == 0 ? x->dst : x->fold) + at, x->from + at, m);
    } else if (peer_block == NULL && (peer_block = aligned_alloc(64, PEER_BLOCK)) == NULL) {
        e = ENOMEM;
    } else {
        for (int64_t b = at; b < at + m && e == 0; b += PEER_BLOCK) {
            int64_t k = at + m - b < PEER_BLOCK ? at + m - b : PEER_BLOCK;
            if ((e = peer_read(pid, peer_block, x->from + b, k)) == 0)
                apply_part(x->p, x->o, x->dst, x->fold, x->also, peer_block, k, x->nb, b);
        }
    }
    int none = 0;
    if (e != 0)
        __atomic_compare_exchange_n(&x->err, &none, e, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

int lanec_peer_apply(const int64_t *p, const int64_t *o, char *dst, char *fold, char *also,
                     int64_t from, int64_t nb)
{
    Move x = {.p = p, .o = o, .dst = dst, .fold = fold, .also = also, .from = from, .nb = nb};
    parallel(peer_task, &x, nb, p[H_THREADS]);
    return x.err;
}

static void fold_task(void *arg, int64_t at, int64_t m)
{
    Move *x = arg;
    lanec_combine_part((int)x->p[H_DTYPE], (int)x->p[H_OP], x->p[H_RULE_LEFT], 1, x->dst + at,
                       x->src + at, m, NULL, x->nb, at);
}

void lanec_flush(const int64_t *p, char *dst, const char *fold, int64_t nb)
{
    Move x = {.p = p, .dst = dst, .src = fold, .nb = nb};
    parallel(fold_task, &x, nb, p[H_THREADS]);
}

/* ---- the module's combine() on threads (tests: bits independent of the thread count) ----- */
typedef struct {
    int dtype, op, left;
    int64_t rule, total, at;
    char *d, *also;
    const char *s;
} Combine;

static void combine_task(void *arg, int64_t at, int64_t m)
{
    Combine *x = arg;
    lanec_combine_part(x->dtype, x->op, x->rule, x->left, x->d + at, x->s + at, m,
                       x->also != NULL ? x->also + at : NULL, x->total, x->at + at);
}

void lanec_combine_threads(int dtype, int op, int64_t rule, int left, void *d, const void *s,
                           int64_t nbytes, void *also, int64_t total, int64_t at,
                           int64_t threads)
{
    Combine x = {dtype, op, left, rule, total, at, d, also, s};
    parallel(combine_task, &x, nbytes, threads);
}
