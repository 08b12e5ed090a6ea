/* A thread that writes bytes into an open file and syncs them, never taking the GIL.
 *
 * SyncThread(notify_fd)
 *     .write(fd, offset, parts, poll=0.0, answers=())
 *                                hand over one write: the parts, one after the other, at
 *                                offset of fd (one pwritev), then fdatasync; then send
 *                                each answer, a (socket, bytes) pair, if it synced; then
 *                                poll for the next write for up to `poll` seconds
 *     .prepare(seconds)          a write is coming: wake the thread now, to wait for it
 *                                by polling for up to `seconds`
 *     .synced() -> int | None    None while it writes and syncs; then 0 or the errno it
 *                                failed with, while its answers may still be going out
 *     .result() -> int | None    None while it runs; then 0 or the errno it failed with,
 *                                once the answers are sent (waiting for them); ends it
 *     .sent -> tuple[int, ...]   after `result`: how many bytes of each answer the
 *                                socket took (the rest is the caller's to write)
 *     .preempted -> int          how many of its polls the kernel cut short for another
 *                                task (an involuntary context switch)
 *     .close()                   finish the write in hand, end the thread
 *
 * The write-ahead log's durability point is one pwrite and one fdatasync. Made
 * on a Python thread, each one costs two hand-overs of the interpreter lock
 * (the thread takes it to start and again to report) and wakes the event loop
 * through Twisted's thread queue. This thread runs plain system calls only: it
 * takes each of `parts` through the buffer protocol (held until `result` hands
 * the outcome back), writes them, syncs, and then writes 8 bytes to `notify_fd`
 * (an eventfd or a pipe the event loop watches), which is all the event loop
 * hears. A record in parts is a large message's body written from the bytes the
 * server holds, not from a copy joined to the record's header (one gather
 * write).
 *
 * Waking the sleeping thread costs about 20 µs on a virtual machine, and its
 * waker as much again. So the thread polls for the next write (a load and a
 * pause a turn) for `poll` seconds after each write, and `write` finds it
 * awake: a producer waiting for each receipt sends its next record within
 * that time. Past it, `prepare`, called while a record is still being made,
 * wakes the thread to poll for the write, so that its waking overlaps the
 * making. A write that does not come in time finds the thread asleep again.
 * Polling only pays on a CPU nothing else wants: a poll the scheduler ended to
 * run another task (counted in `preempted`) tells the caller to stop asking for
 * polls for a while (server/syncpoll.py).
 *
 * The answers are the replies the write makes true (a persistent message's
 * RECEIPT): sent from here as soon as the sync ends, they reach their clients
 * without waiting for the event loop to wake and to get to them. Each is sent
 * once, without waiting (MSG_DONTWAIT), on a descriptor the thread closes
 * afterwards (the caller hands a duplicate, so that a connection closed
 * meanwhile never lets the number reach another file); what a full socket
 * did not take is reported in `sent`. A failed write sends none. The event
 * loop is notified before the answers go (`result` waits for them, under the
 * lock the thread holds while it sends): whatever a client does once it has
 * its answer reaches the loop after the notification, and is handled after
 * the write is (a producer's next SEND sees the store's watermarks with the
 * message it was answered for). `synced` tells the outcome as soon as the loop
 * is notified, so that the loop runs the write's callbacks while the answers go
 * out, and waits for them (`result`) only after.
 *
 * One write at a time: `write` while one is in hand raises RuntimeError (the
 * caller queues). Signals are blocked in the thread, so that they reach the
 * interpreter's threads and never interrupt a write.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_IOV 1024 /* IOV_MAX on Linux: at most this many parts per pwritev */

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int started;   /* the thread runs (and the lock and condition exist) */
    int notify_fd;
    /* under `lock` */
    int stopping;
    int handed;    /* a write was handed over and not yet taken up by the thread (also
                      read without the lock, atomically, by the thread's polling) */
    long long prepared_ns; /* `prepare` asked the thread to poll this long for a write */
    long long poll_ns;     /* the write in hand's `poll`: how long to poll for the next */
    long preempted; /* polls cut short by an involuntary switch (atomic, no lock) */
    int finished;  /* the write in hand is done, answers sent; `error` says how */
    int synced;    /* the write in hand is synced (or failed): `error` is set (atomic:
                      read without the lock, which the thread holds while it sends) */
    int error;
    /* the write in hand: set by `write`, read by the thread, released by `result` */
    int in_hand;
    int fd;
    off_t offset;
    Py_ssize_t count;   /* parts */
    Py_buffer *parts;   /* their buffers */
    struct iovec *iov;  /* the same, as the thread writes them (it moves them on) */
    Py_ssize_t answer_count;
    int *answer_fds;       /* the sockets (duplicates: the thread closes them) */
    Py_buffer *answers;    /* the bytes to send on each */
    Py_ssize_t *answer_sent; /* bytes each socket took (set by the thread) */
    PyObject *sent;        /* the last write's `answer_sent`, as a tuple, once reported */
} SyncThread;

static int
sync_file(int fd)
{
#ifdef __APPLE__
    return fsync(fd);
#else
    return fdatasync(fd);
#endif
}

/* Write all of the parts one after the other at offset, then sync; 0 or an errno. */
static int
write_and_sync(int fd, struct iovec *iov, Py_ssize_t count, off_t offset)
{
    while (count > 0) {
        if (iov->iov_len == 0) {
            iov++;
            count--;
            continue;
        }
        ssize_t written = pwritev(fd, iov, count < MAX_IOV ? (int)count : MAX_IOV, offset);
        if (written < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        }
        offset += written;
        while (count > 0 && (size_t)written >= iov->iov_len) {
            written -= (ssize_t)iov->iov_len;
            iov++;
            count--;
        }
        if (count > 0) {
            iov->iov_base = (char *)iov->iov_base + written;
            iov->iov_len -= (size_t)written;
        }
    }
    return sync_file(fd) < 0 ? errno : 0;
}

/* Send each answer once without waiting; record what each socket took, close it. */
static void
send_answers(SyncThread *self, int synced)
{
    for (Py_ssize_t i = 0; i < self->answer_count; i++) {
        const char *buf = self->answers[i].buf;
        Py_ssize_t len = self->answers[i].len, done = 0;
        while (synced && done < len) {
            ssize_t n = send(self->answer_fds[i], buf + done, (size_t)(len - done),
                             MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR) {
                    continue;
                }
                break; /* full (EAGAIN) or gone: the rest is the caller's */
            }
            done += n;
        }
        self->answer_sent[i] = done;
        close(self->answer_fds[i]);
        self->answer_fds[i] = -1;
    }
}

static void
notify(int fd)
{
    uint64_t one = 1;
    while (write(fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
}

static long long
now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* Involuntary context switches of the calling thread so far. */
static long
involuntary_switches(void)
{
    struct rusage usage;
    return getrusage(RUSAGE_THREAD, &usage) == 0 ? usage.ru_nivcsw : 0;
}

/* Poll for a write for up to `ns` nanoseconds (without the lock), counting in
 * `preempted` a poll the scheduler interrupted for another task. */
static void
poll_for_write(SyncThread *self, long long ns)
{
    long switches = involuntary_switches();
    long long until = now_ns() + ns;
    for (unsigned turn = 0;; turn++) {
        if (__atomic_load_n(&self->handed, __ATOMIC_ACQUIRE)) {
            break;
        }
        if ((turn & 63) == 63 && now_ns() >= until) {
            break;
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    if (involuntary_switches() != switches) {
        __atomic_add_fetch(&self->preempted, 1, __ATOMIC_RELAXED);
    }
}

static void *
run(void *arg)
{
    SyncThread *self = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&self->lock);
    for (;;) {
        while (!self->handed && !self->stopping) {
            if (self->prepared_ns) {
                long long ns = self->prepared_ns;
                self->prepared_ns = 0;
                pthread_mutex_unlock(&self->lock);
                poll_for_write(self, ns);
                pthread_mutex_lock(&self->lock);
                continue;
            }
            pthread_cond_wait(&self->wake, &self->lock);
        }
        if (!self->handed) {
            break; /* stopping, nothing in hand */
        }
        __atomic_store_n(&self->handed, 0, __ATOMIC_RELAXED);
        self->prepared_ns = 0; /* a `prepare` the write overtook */
        int fd = self->fd;
        off_t offset = self->offset;
        struct iovec *iov = self->iov;
        Py_ssize_t count = self->count;
        long long poll_ns = self->poll_ns;
        pthread_mutex_unlock(&self->lock);
        int error = write_and_sync(fd, iov, count, offset);
        pthread_mutex_lock(&self->lock);
        self->error = error;
        __atomic_store_n(&self->synced, 1, __ATOMIC_RELEASE);
        notify(self->notify_fd); /* first: see the module comment */
        send_answers(self, error == 0);
        self->finished = 1;
        pthread_mutex_unlock(&self->lock);
        if (poll_ns > 0) {
            poll_for_write(self, poll_ns);
        }
        pthread_mutex_lock(&self->lock);
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

static int
SyncThread_init(SyncThread *self, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"notify_fd", NULL};
    if (self->started) {
        PyErr_SetString(PyExc_RuntimeError, "SyncThread already started");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i", keywords, &self->notify_fd)) {
        return -1;
    }
    if (pthread_mutex_init(&self->lock, NULL) != 0) {
        PyErr_SetString(PyExc_OSError, "cannot create a lock");
        return -1;
    }
    if (pthread_cond_init(&self->wake, NULL) != 0) {
        pthread_mutex_destroy(&self->lock);
        PyErr_SetString(PyExc_OSError, "cannot create a condition");
        return -1;
    }
    int error = pthread_create(&self->thread, NULL, run, self);
    if (error != 0) {
        pthread_cond_destroy(&self->wake);
        pthread_mutex_destroy(&self->lock);
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->started = 1;
    return 0;
}

/* Let go of the parts and answers of the write in hand (with the GIL); a socket the
 * thread never got to (closed before it took the write) is closed here. */
static void
release_parts(SyncThread *self)
{
    for (Py_ssize_t i = 0; i < self->count; i++) {
        PyBuffer_Release(&self->parts[i]);
    }
    for (Py_ssize_t i = 0; i < self->answer_count; i++) {
        PyBuffer_Release(&self->answers[i]);
        if (self->answer_fds[i] >= 0) {
            close(self->answer_fds[i]);
        }
    }
    PyMem_Free(self->parts);
    PyMem_Free(self->iov);
    PyMem_Free(self->answers);
    PyMem_Free(self->answer_fds);
    PyMem_Free(self->answer_sent);
    self->parts = NULL;
    self->iov = NULL;
    self->answers = NULL;
    self->answer_fds = NULL;
    self->answer_sent = NULL;
    self->count = 0;
    self->answer_count = 0;
}

/* Take the (socket, bytes) answers into the write about to be handed over; -1 with an
 * exception (nothing kept) if they are not that. The sockets are closed by the thread. */
static int
take_answers(SyncThread *self, PyObject *sequence)
{
    PyObject *items = PySequence_Fast(sequence, "answers must be a sequence of (fd, bytes)");
    if (items == NULL) {
        return -1;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    Py_buffer *answers = PyMem_Calloc(count ? (size_t)count : 1, sizeof(Py_buffer));
    int *fds = PyMem_Calloc(count ? (size_t)count : 1, sizeof(int));
    Py_ssize_t *sent = PyMem_Calloc(count ? (size_t)count : 1, sizeof(Py_ssize_t));
    if (answers == NULL || fds == NULL || sent == NULL) {
        PyMem_Free(answers);
        PyMem_Free(fds);
        PyMem_Free(sent);
        Py_DECREF(items);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(items, i);
        if (!PyTuple_Check(pair)) {
            PyErr_SetString(PyExc_TypeError, "an answer is a (fd, bytes) tuple");
        }
        if (!PyTuple_Check(pair) || !PyArg_ParseTuple(pair, "iy*", &fds[i], &answers[i])) {
            while (i-- > 0) {
                PyBuffer_Release(&answers[i]);
            }
            PyMem_Free(answers);
            PyMem_Free(fds);
            PyMem_Free(sent);
            Py_DECREF(items);
            return -1;
        }
    }
    Py_DECREF(items);
    self->answer_count = count;
    self->answers = answers;
    self->answer_fds = fds;
    self->answer_sent = sent;
    return 0;
}

static PyObject *
SyncThread_write(SyncThread *self, PyObject *args)
{
    int fd;
    long long offset;
    PyObject *sequence;
    double poll = 0.0;
    PyObject *answers = NULL;
    if (!PyArg_ParseTuple(args, "iLO|dO", &fd, &offset, &sequence, &poll, &answers)) {
        return NULL;
    }
    if (!self->started || self->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "the SyncThread is closed");
        return NULL;
    }
    if (self->in_hand) {
        PyErr_SetString(PyExc_RuntimeError, "a write is in hand already");
        return NULL;
    }
    PyObject *items = PySequence_Fast(sequence, "parts must be a sequence of bytes-like objects");
    if (items == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    Py_buffer *parts = PyMem_Calloc(count ? (size_t)count : 1, sizeof(Py_buffer));
    struct iovec *iov = PyMem_Calloc(count ? (size_t)count : 1, sizeof(struct iovec));
    if (parts == NULL || iov == NULL) {
        PyMem_Free(parts);
        PyMem_Free(iov);
        Py_DECREF(items);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(items, i), &parts[i], PyBUF_SIMPLE) < 0) {
            while (i-- > 0) {
                PyBuffer_Release(&parts[i]);
            }
            PyMem_Free(parts);
            PyMem_Free(iov);
            Py_DECREF(items);
            return NULL;
        }
        iov[i].iov_base = parts[i].buf;
        iov[i].iov_len = (size_t)parts[i].len;
    }
    Py_DECREF(items);
    if (answers != NULL && take_answers(self, answers) < 0) {
        for (Py_ssize_t i = 0; i < count; i++) {
            PyBuffer_Release(&parts[i]);
        }
        PyMem_Free(parts);
        PyMem_Free(iov);
        return NULL;
    }
    pthread_mutex_lock(&self->lock);
    self->fd = fd;
    self->offset = (off_t)offset;
    self->count = count;
    self->parts = parts;
    self->iov = iov;
    self->poll_ns = poll > 0 ? (long long)(poll * 1e9) : 0;
    self->in_hand = 1;
    self->finished = 0;
    __atomic_store_n(&self->synced, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&self->handed, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&self->lock);
    pthread_cond_signal(&self->wake);
    Py_RETURN_NONE;
}

static PyObject *
SyncThread_prepare(SyncThread *self, PyObject *args)
{
    double seconds;
    if (!PyArg_ParseTuple(args, "d", &seconds)) {
        return NULL;
    }
    if (!self->started || self->stopping || self->in_hand || seconds <= 0) {
        Py_RETURN_NONE; /* busy (the write will wait for it) or closed: nothing to do */
    }
    pthread_mutex_lock(&self->lock);
    self->prepared_ns = (long long)(seconds * 1e9);
    pthread_mutex_unlock(&self->lock);
    pthread_cond_signal(&self->wake);
    Py_RETURN_NONE;
}

static PyObject *
SyncThread_synced(SyncThread *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->in_hand) {
        PyErr_SetString(PyExc_RuntimeError, "no write is in hand");
        return NULL;
    }
    if (!__atomic_load_n(&self->synced, __ATOMIC_ACQUIRE)) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLong(self->error);
}

static PyObject *
SyncThread_result(SyncThread *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->in_hand) {
        PyErr_SetString(PyExc_RuntimeError, "no write is in hand");
        return NULL;
    }
    pthread_mutex_lock(&self->lock);
    int finished = self->finished, error = self->error;
    pthread_mutex_unlock(&self->lock);
    if (!finished) {
        Py_RETURN_NONE;
    }
    PyObject *sent = PyTuple_New(self->answer_count);
    if (sent == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < self->answer_count; i++) {
        PyObject *taken = PyLong_FromSsize_t(self->answer_sent[i]);
        if (taken == NULL) {
            Py_DECREF(sent);
            return NULL;
        }
        PyTuple_SET_ITEM(sent, i, taken);
    }
    Py_XSETREF(self->sent, sent);
    self->in_hand = 0;
    release_parts(self);
    return PyLong_FromLong(error);
}

static PyObject *
SyncThread_close(SyncThread *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->started || self->stopping) {
        Py_RETURN_NONE;
    }
    pthread_mutex_lock(&self->lock);
    self->stopping = 1;
    pthread_mutex_unlock(&self->lock);
    pthread_cond_signal(&self->wake);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    if (self->in_hand) {
        self->in_hand = 0;
        release_parts(self);
    }
    Py_RETURN_NONE;
}

static void
SyncThread_dealloc(SyncThread *self)
{
    if (self->started) {
        PyObject *result = SyncThread_close(self, NULL);
        Py_XDECREF(result);
        pthread_cond_destroy(&self->wake);
        pthread_mutex_destroy(&self->lock);
    }
    Py_CLEAR(self->sent);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef SyncThread_methods[] = {
    {"write", (PyCFunction)SyncThread_write, METH_VARARGS,
     "write(fd, offset, parts, poll=0.0, answers=()): write the parts one after the other "
     "at offset of fd and fdatasync it, on the thread; then send each (socket, bytes) "
     "answer once, without waiting, and close the socket; then poll for the next write "
     "that long"},
    {"prepare", (PyCFunction)SyncThread_prepare, METH_VARARGS,
     "prepare(seconds): a write is coming; wake the thread to poll for it that long"},
    {"synced", (PyCFunction)SyncThread_synced, METH_NOARGS,
     "None while the write and its sync run; then 0, or the errno it failed with (the "
     "answers may still be going out)"},
    {"result", (PyCFunction)SyncThread_result, METH_NOARGS,
     "None while the write runs; then 0, or the errno it failed with, once its answers "
     "are sent (waits for them); ends the write"},
    {"close", (PyCFunction)SyncThread_close, METH_NOARGS,
     "finish the write in hand and end the thread"},
    {NULL, NULL, 0, NULL},
};

static PyObject *
SyncThread_get_preempted(SyncThread *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(__atomic_load_n(&self->preempted, __ATOMIC_RELAXED));
}

static PyObject *
SyncThread_get_sent(SyncThread *self, void *Py_UNUSED(closure))
{
    if (self->sent == NULL) {
        return PyTuple_New(0);
    }
    Py_INCREF(self->sent);
    return self->sent;
}

static PyGetSetDef SyncThread_getset[] = {
    {"sent", (getter)SyncThread_get_sent, NULL,
     "after `result`: how many bytes of each of the write's answers their socket took",
     NULL},
    {"preempted", (getter)SyncThread_get_preempted, NULL,
     "how many of the thread's polls an involuntary context switch cut short", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SyncThreadType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wiremq.server._syncthread.SyncThread",
    .tp_doc = "A thread that writes and syncs without the GIL; see the module source.",
    .tp_basicsize = sizeof(SyncThread),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SyncThread_init,
    .tp_dealloc = (destructor)SyncThread_dealloc,
    .tp_methods = SyncThread_methods,
    .tp_getset = SyncThread_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "wiremq.server._syncthread",
    .m_doc = "SyncThread: writes and syncs of the write-ahead log off the interpreter.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__syncthread(void)
{
    if (PyType_Ready(&SyncThreadType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&SyncThreadType);
    if (PyModule_AddObject(m, "SyncThread", (PyObject *)&SyncThreadType) < 0) {
        Py_DECREF(&SyncThreadType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
