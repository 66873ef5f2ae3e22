/* The direct commit engine (store.direct_io, fsync = "always"): commit groups written back to back by a
 * native thread, without the GIL. See store/engine.py for the Python side and the reasons.
 *
 * The event loop hands each append to the engine (`add`): it gets its place in the open group, is copied
 * there (outside the engine's lock) and folded into the group's CRC32C while in cache. The engine's thread
 * takes the open group, whatever has been placed in it, as soon as the disk is free, waits for the copies
 * under way to end, seals it (the chunk's bytes of the first page before the group, the COMMIT frame with
 * its CRC32C, zeros to the last page's end) and writes it with one pwrite on an O_DIRECT|O_DSYNC
 * descriptor, durable when it returns. Groups are written one after another, each durable before the next
 * starts. Completions go out through an eventfd.
 *
 * The copy is the loop's: a copier thread of the engine's own was tried (the loop only placing appends),
 * and on two cores the copier and the loop left the writer thread no core when a group's appends came
 * back, so it took them all at once and the disk waited (61% busy, 840-1,101 MB/s at 64 KiB x 16 against
 * 86-90% and 1,185-1,241 copying in the loop, alternating runs, load 0.1-0.3).
 *
 * The COMMIT frame is store/groups.py's: type -4, length 20, then start (u64), length (u32), prev (u32)
 * and the CRC32C of those 16 bytes followed by the group's bytes, all big-endian.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#define PAGE 4096
#define COMMIT_SIZE 28
#define GATHER_NS 200000  /* the longest a group waits for the appends of the one before to come back */

#define POLY 0x82F63B78u  /* CRC32C (Castagnoli), reflected */

static uint32_t crc_table[256];
static uint32_t shift_ops[64][32];  /* shift_ops[k]: a CRC's register advanced over 2^k zero bytes, as a GF(2) matrix */
static int hw_crc;

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1) sum ^= *mat;
    return sum;
}

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        crc_table[i] = c;
    }
    uint32_t bit[32];  /* one zero bit */
    bit[0] = POLY;
    for (int n = 1; n < 32; n++) bit[n] = 1u << (n - 1);
    uint32_t two[32], four[32];
    for (int n = 0; n < 32; n++) two[n] = gf2_times(bit, bit[n]);
    for (int n = 0; n < 32; n++) four[n] = gf2_times(two, two[n]);
    for (int n = 0; n < 32; n++) shift_ops[0][n] = gf2_times(four, four[n]);  /* eight bits: one byte */
    for (int k = 1; k < 64; k++)
        for (int n = 0; n < 32; n++) shift_ops[k][n] = gf2_times(shift_ops[k - 1], shift_ops[k - 1][n]);
#if defined(__x86_64__)
    __builtin_cpu_init();
    hw_crc = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint64_t crc_hw(uint64_t c, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) { c = _mm_crc32_u8((uint32_t)c, *p++); n--; }
    while (n >= 8) { c = _mm_crc32_u64(c, *(const uint64_t *)p); p += 8; n -= 8; }
    while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return c;
}
#endif

/* CRC32C of `n` bytes continuing `crc` (the value a previous call returned; 0 to start), as the crc32c
 * package's crc32c(data, crc). */
static uint32_t crc32c(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = (uint32_t)~crc;
#if defined(__x86_64__)
    if (hw_crc) return ~(uint32_t)crc_hw(c, p, n);
#endif
    while (n--) c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~(uint32_t)c;
}

/* The CRC32C of A followed by B from crc1 = CRC of A, crc2 = CRC of B and B's length (zlib's combine). */
static uint32_t crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
    for (int k = 0; len2; k++, len2 >>= 1)
        if (len2 & 1) crc1 = gf2_times(shift_ops[k], crc1);
    return crc1 ^ crc2;
}

static void put_be32(unsigned char *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }
static void put_be64(unsigned char *p, uint64_t v) { put_be32(p, (uint32_t)(v >> 32)); put_be32(p + 4, (uint32_t)v); }

typedef struct {
    uint64_t seq;
    uint64_t start;       /* segment offset of its COMMIT frame */
    uint64_t lo;          /* segment offset of the buffer's first byte (start's page) */
    size_t len;           /* bytes placed in the buffer: head, COMMIT frame, frames */
    size_t copied;        /* of those, copied (the head and the COMMIT frame's place count from the start) */
    size_t appends;       /* appends placed in it */
    uint32_t data_crc;    /* CRC32C of its frames copied so far */
} Group;

typedef struct { uint64_t seq, start, end; double seconds; } Done;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t writer;
    int threads, stopping;
    int fd, efd;
    unsigned char *bufs[2];
    Group groups[2];      /* the group in each buffer */
    size_t cap;
    /* the position: set by start, moved on by add (end) and by each group sealed (prev, tail) */
    uint64_t base, limit, end;
    uint32_t prev;
    unsigned char tail[PAGE];  /* the chunk's bytes from the page of the last sealed group's end to it */
    size_t tail_len;
    int open;             /* the buffer of the open group, or -1 */
    int writing;          /* the buffer of the group taken by the writer thread, or -1 */
    int ready;            /* the buffer of a group closed at half a round, waiting for the writer thread, or -1 */
    size_t in_flight;     /* appends placed and not yet written */
    double round;         /* about how many appends are in flight at once, at most (a slowly falling peak) */
    uint64_t next_seq;
    Done *done; size_t n_done, cap_done;
    /* a failed write: its group and every one after it are not written */
    int err;
    uint64_t err_seq, err_start;
    uint32_t err_prev;
} Engine;

static double seconds_between(struct timespec a, struct timespec b) {
    return (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
}

static void *write_run(void *arg) {
    Engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stopping && ((e->open < 0 && e->ready < 0) || e->err)) pthread_cond_wait(&e->cv, &e->mu);
        if (e->stopping) break;
        int b = e->ready >= 0 ? e->ready : e->open;
        Group *g = &e->groups[b];
        if (b == e->open && 2 * g->appends < e->round) {
            /* The disk is free and appends are coming back (the acks of a group just written being answered):
             * wait a moment for half a round of them (add closes the group there), so that commits settle
             * into two halves that take turns, one written while the other's appenders hear and append
             * again. Taken at once, one append went to the disk and the other fifteen after it, one short
             * write and one long, again and again. */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += GATHER_NS;
            if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
            while (!e->stopping && !e->err && e->ready < 0 && 2 * g->appends < e->round)
                if (pthread_cond_timedwait(&e->cv, &e->mu, &until) == ETIMEDOUT) break;
            if (e->stopping) break;
            if (e->ready >= 0) b = e->ready, g = &e->groups[b];
        }
        if (b == e->ready) e->ready = -1;
        else e->open = -1;
        e->writing = b;
        while (!e->stopping && g->copied < g->len) pthread_cond_wait(&e->cv, &e->mu);
        if (e->stopping) break;
        uint32_t prev = e->prev;
        size_t head = g->start - g->lo;
        unsigned char *buf = e->bufs[b];
        memcpy(buf, e->tail, head);  /* tail_len == head: the group starts where the last one ended */
        pthread_mutex_unlock(&e->mu);

        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        unsigned char *commit = buf + head;
        uint64_t length = g->len - head - COMMIT_SIZE;
        put_be32(commit, (uint32_t)-4);
        put_be32(commit + 4, COMMIT_SIZE - 8);
        put_be64(commit + 8, g->start);
        put_be32(commit + 16, (uint32_t)length);
        put_be32(commit + 20, prev);
        uint32_t crc = crc32c_combine(crc32c(0, commit + 8, 16), g->data_crc, length);
        put_be32(commit + 24, crc);
        size_t size = (g->len + PAGE - 1) / PAGE * PAGE;
        memset(buf + g->len, 0, size - g->len);
        size_t done = 0;
        int err = 0;
        while (done < size) {
            ssize_t n = pwrite(e->fd, buf + done, size - done, (off_t)(g->lo - e->base + done));
            if (n < 0) {
                if (errno == EINTR) continue;
                err = errno;
                break;
            }
            if (n == 0) { err = EIO; break; }
            done += (size_t)n;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);

        pthread_mutex_lock(&e->mu);
        e->writing = -1;
        e->in_flight -= g->appends;
        e->round = e->round * 0.99 > (double)e->in_flight ? e->round * 0.99 : (double)e->in_flight;
        if (err) {
            e->err = err;
            e->err_seq = g->seq;
            e->err_start = g->start;
            e->err_prev = prev;
        } else {
            size_t cut = g->len / PAGE * PAGE;
            e->tail_len = g->len - cut;
            memcpy(e->tail, buf + cut, e->tail_len);
            e->prev = crc;
            if (e->n_done == e->cap_done) {
                size_t cap = e->cap_done ? 2 * e->cap_done : 64;
                Done *d = realloc(e->done, cap * sizeof(Done));
                if (d == NULL) abort();  /* 32 bytes a group; nothing sane is left to do */
                e->done = d;
                e->cap_done = cap;
            }
            e->done[e->n_done++] = (Done){g->seq, g->start, g->lo + g->len, seconds_between(t0, t1)};
        }
        pthread_cond_broadcast(&e->cv);
        uint64_t one = 1;
        (void)!write(e->efd, &one, sizeof one);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static int Engine_init(Engine *e, PyObject *args, PyObject *kw) {
    static char *names[] = {"buffer_bytes", NULL};
    Py_ssize_t cap;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "n", names, &cap)) return -1;
    if (cap < 4 * PAGE || cap % PAGE) {
        PyErr_Format(PyExc_ValueError, "buffer_bytes must be a multiple of %d of at least %d, not %zd", PAGE, 4 * PAGE, cap);
        return -1;
    }
    if (e->threads) {
        PyErr_SetString(PyExc_RuntimeError, "the engine is set up already");
        return -1;
    }
    e->cap = (size_t)cap;
    for (int i = 0; i < 2; i++) {
        if (posix_memalign((void **)&e->bufs[i], PAGE, e->cap)) {
            PyErr_NoMemory();
            return -1;
        }
    }
    e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->next_seq = 1;
    e->open = e->writing = e->ready = -1;
    if (pthread_create(&e->writer, NULL, write_run, e)) {
        PyErr_SetString(PyExc_OSError, "cannot start the commit engine's writer thread");
        return -1;
    }
    e->threads = 1;
    return 0;
}

/* start(fd, base, end, prev, head, limit): go on from segment offset `end` of the chunk at `base`, written
 * through `fd` (O_DIRECT|O_DSYNC; the caller keeps it open while the engine is busy), continuing the CRC
 * chain at `prev`; `head`: the chunk's bytes from end's page start to `end`; groups end at `limit` at the
 * most. Only when idle. */
static PyObject *Engine_start(Engine *e, PyObject *args) {
    int fd;
    unsigned long long base, end, limit;
    unsigned int prev;
    Py_buffer head;
    if (!PyArg_ParseTuple(args, "iKKIy*K", &fd, &base, &end, &prev, &head, &limit)) return NULL;
    if ((size_t)head.len != (end - base) % PAGE) {
        PyBuffer_Release(&head);
        return PyErr_Format(PyExc_ValueError, "head of %zd bytes for an end %llu bytes into its page", head.len,
                            (end - base) % PAGE);
    }
    pthread_mutex_lock(&e->mu);
    int busy = e->open >= 0 || e->ready >= 0 || e->writing >= 0;
    if (!busy) {
        e->fd = fd;
        e->base = base;
        e->end = end;
        e->prev = prev;
        e->limit = limit;
        memcpy(e->tail, head.buf, head.len);
        e->tail_len = head.len;
        e->err = 0;
    }
    pthread_mutex_unlock(&e->mu);
    PyBuffer_Release(&head);
    if (busy) return PyErr_Format(PyExc_RuntimeError, "the commit engine is busy");
    Py_RETURN_NONE;
}

static void release_views(Py_buffer *views, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
}

/* add(parts, size) -> (seq, offset) | None: copy `size` bytes of frames (the buffers `parts`) into the open
 * group, a new one when none is open or it is full; `offset` is the segment offset of their first byte,
 * `seq` the group's number (completions name it). None when they would pass the limit, or the engine
 * failed (completed() says so). */
static PyObject *Engine_add(Engine *e, PyObject *args) {
    PyObject *parts;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "On", &parts, &size)) return NULL;
    PyObject *fast = PySequence_Fast(parts, "parts must be a sequence of buffers");
    if (fast == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **objects = PySequence_Fast_ITEMS(fast);
    Py_buffer *views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    if (views == NULL) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    Py_ssize_t total = 0, got = 0;
    for (; got < n; got++) {
        if (PyObject_GetBuffer(objects[got], &views[got], PyBUF_SIMPLE) < 0) break;
        total += views[got].len;
    }
    Py_DECREF(fast);
    if (got < n || total != size) {
        release_views(views, got);
        if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "parts hold %zd bytes, not the %zd given", total, size);
        return NULL;
    }
    pthread_mutex_lock(&e->mu);
    for (;;) {
        if (e->err) break;
        Group *g = e->open >= 0 ? &e->groups[e->open] : NULL;
        uint64_t lo = g ? g->lo : e->base + (e->end - e->base) / PAGE * PAGE;
        size_t len = g ? g->len : (size_t)(e->end - lo) + COMMIT_SIZE;
        if (lo + len + (uint64_t)size > e->limit) break;
        if (len + (size_t)size + PAGE > e->cap) {
            if (g == NULL) break;  /* larger than a buffer: the caller writes it the other way */
            Py_BEGIN_ALLOW_THREADS  /* full: wait until the writer thread takes it */
            while ((e->open >= 0 || e->ready >= 0) && !e->err) pthread_cond_wait(&e->cv, &e->mu);
            Py_END_ALLOW_THREADS
            continue;
        }
        if (g == NULL) {
            if (e->ready >= 0 && e->writing >= 0) {  /* both buffers taken: wait for the write under way */
                Py_BEGIN_ALLOW_THREADS
                while (e->ready >= 0 && e->writing >= 0 && !e->err) pthread_cond_wait(&e->cv, &e->mu);
                Py_END_ALLOW_THREADS
                continue;
            }
            e->open = e->writing == 0 || e->ready == 0 ? 1 : 0;
            g = &e->groups[e->open];
            *g = (Group){e->next_seq++, e->end, lo, len, len, 0, 0};
        }
        unsigned char *at = e->bufs[e->open] + g->len;
        uint64_t offset = g->lo + g->len;
        g->len += (size_t)size;
        g->appends++;
        e->end = g->lo + g->len;
        uint64_t seq = g->seq;
        if (++e->in_flight > e->round) e->round = (double)e->in_flight;
        if (e->writing < 0 && e->ready < 0 && e->round >= 2 && 2 * g->appends >= e->round) {
            /* the disk is free and the group holds half a round: it goes as it is, the next appends start
             * the other half (otherwise a writer thread slow to wake would take all sixteen at once, and a round
             * written whole leaves the disk waiting while its appends come back) */
            e->ready = e->open;
            e->open = -1;
        }
        /* copied outside the lock (the writer thread waits for g->copied to reach g->len); only the loop
         * adds, so the copies into a group, and its CRC, go in order */
        uint32_t crc = g->data_crc;
        pthread_mutex_unlock(&e->mu);
        unsigned char *to = at;
        for (Py_ssize_t i = 0; i < n; i++) {
            memcpy(to, views[i].buf, (size_t)views[i].len);
            to += views[i].len;
        }
        crc = crc32c(crc, at, (size_t)size);
        release_views(views, n);
        pthread_mutex_lock(&e->mu);
        g->data_crc = crc;
        g->copied += (size_t)size;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        return Py_BuildValue("(KK)", (unsigned long long)seq, (unsigned long long)offset);
    }
    pthread_mutex_unlock(&e->mu);
    release_views(views, n);
    Py_RETURN_NONE;
}

/* completed() -> ([(seq, start, end, seconds)...], failure): the groups written since the last call, in
 * order, and None or (errno, seq, start, prev) of the write that failed (it and every group after it are
 * not written; the engine takes nothing more until `start` again). */
static PyObject *Engine_completed(Engine *e, PyObject *unused) {
    uint64_t count;
    (void)!read(e->efd, &count, sizeof count);
    pthread_mutex_lock(&e->mu);
    PyObject *list = PyList_New((Py_ssize_t)e->n_done);
    for (size_t i = 0; list && i < e->n_done; i++) {
        Done *d = &e->done[i];
        PyList_SET_ITEM(list, i, Py_BuildValue("(KKKd)", (unsigned long long)d->seq, (unsigned long long)d->start,
                                               (unsigned long long)d->end, d->seconds));
    }
    e->n_done = 0;
    PyObject *failure = NULL;
    if (e->err && e->writing < 0) {
        failure = Py_BuildValue("(iKKI)", e->err, (unsigned long long)e->err_seq, (unsigned long long)e->err_start,
                                e->err_prev);
        e->open = e->ready = -1;
        e->in_flight = 0;
    }
    pthread_mutex_unlock(&e->mu);
    if (list == NULL) return NULL;
    if (failure == NULL) {
        failure = Py_None;
        Py_INCREF(Py_None);
    }
    return Py_BuildValue("(NN)", list, failure);
}

/* (busy, end, prev, head): appends not yet written (or failed and not yet heard); where the engine stands
 * (head: the chunk's bytes from end's page start to end). */
static PyObject *Engine_state(Engine *e, PyObject *unused) {
    pthread_mutex_lock(&e->mu);
    PyObject *r = Py_BuildValue("(iKIy#)", e->open >= 0 || e->ready >= 0 || e->writing >= 0,
                                (unsigned long long)e->end, e->prev, (const char *)e->tail, (Py_ssize_t)e->tail_len);
    pthread_mutex_unlock(&e->mu);
    return r;
}

static PyObject *Engine_close(Engine *e, PyObject *unused) {
    if (e->threads) {
        pthread_mutex_lock(&e->mu);
        e->stopping = 1;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        Py_BEGIN_ALLOW_THREADS
        pthread_join(e->writer, NULL);
        Py_END_ALLOW_THREADS
        e->threads = 0;
    }
    if (e->efd >= 0) {
        close(e->efd);
        e->efd = -1;
    }
    Py_RETURN_NONE;
}

static void Engine_dealloc(Engine *e) {
    Engine_close(e, NULL);
    free(e->bufs[0]);
    free(e->bufs[1]);
    free(e->done);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyObject *Engine_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Engine *e = (Engine *)type->tp_alloc(type, 0);
    if (e != NULL) {
        e->fd = -1;
        e->efd = -1;
        e->open = e->writing = e->ready = -1;
    }
    return (PyObject *)e;
}

static PyObject *Engine_eventfd(Engine *e, void *closure) { return PyLong_FromLong(e->efd); }

static PyObject *Engine_end(Engine *e, void *closure) {
    pthread_mutex_lock(&e->mu);
    uint64_t end = e->end;
    pthread_mutex_unlock(&e->mu);
    return PyLong_FromUnsignedLongLong(end);
}

static PyObject *crc32c_py(PyObject *self, PyObject *args) {
    Py_buffer data;
    unsigned int crc = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &data, &crc)) return NULL;
    uint32_t r = crc32c(crc, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(r);
}

static PyMethodDef Engine_methods[] = {
    {"start", (PyCFunction)Engine_start, METH_VARARGS, NULL},
    {"add", (PyCFunction)Engine_add, METH_VARARGS, NULL},
    {"completed", (PyCFunction)Engine_completed, METH_NOARGS, NULL},
    {"state", (PyCFunction)Engine_state, METH_NOARGS, NULL},
    {"close", (PyCFunction)Engine_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Engine_getset[] = {
    {"eventfd", (getter)Engine_eventfd, NULL, NULL, NULL},
    {"end", (getter)Engine_end, NULL, "the segment offset past everything added", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logport.store._commitengine.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Engine_new,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
    .tp_getset = Engine_getset,
};

static PyMethodDef module_methods[] = {
    {"crc32c", crc32c_py, METH_VARARGS, "The engine's CRC32C, for the tests that hold it to the crc32c package's."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_commitengine", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__commitengine(void) {
    crc_init();
    if (PyType_Ready(&EngineType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0) {
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
