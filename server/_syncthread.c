/* A thread that writes bytes into an open file and syncs them, never taking the GIL.
 *
 * SyncThread(notify_fd)
 *     .write(fd, offset, data)   hand over one write: data at offset of fd, then fdatasync
 *     .result() -> int | None    None while it runs; then 0 or the errno it failed with
 *     .close()                   finish the write in hand, end the thread
 *
 * The write-ahead log's durability point is one pwrite and one fdatasync. Made
 * on a Python thread, each one costs two hand-overs of the interpreter lock
 * (the thread takes it to start and again to report) and wakes the event loop
 * through Twisted's thread queue. This thread runs plain system calls only: it
 * takes `data` through the buffer protocol (held until `result` hands the
 * outcome back), writes it, syncs, and then writes 8 bytes to `notify_fd` (an
 * eventfd or a pipe the event loop watches), which is all the event loop hears.
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
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int started;   /* the thread runs (and the lock and condition exist) */
    int notify_fd;
    /* under `lock` */
    int stopping;
    int handed;    /* a write was handed over and not yet taken up by the thread */
    int finished;  /* the write in hand is done; `error` says how */
    int error;
    /* the write in hand: set by `write`, read by the thread, released by `result` */
    int in_hand;
    int fd;
    off_t offset;
    Py_buffer data;
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

/* Write all of buf at offset, then sync; 0 or an errno. */
static int
write_and_sync(int fd, const char *buf, Py_ssize_t size, off_t offset)
{
    while (size > 0) {
        ssize_t written = pwrite(fd, buf, (size_t)size, offset);
        if (written < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        }
        buf += written;
        size -= written;
        offset += written;
    }
    return sync_file(fd) < 0 ? errno : 0;
}

static void
notify(int fd)
{
    uint64_t one = 1;
    while (write(fd, &one, sizeof one) < 0 && errno == EINTR) {
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
            pthread_cond_wait(&self->wake, &self->lock);
        }
        if (!self->handed) {
            break; /* stopping, nothing in hand */
        }
        self->handed = 0;
        int fd = self->fd;
        off_t offset = self->offset;
        const char *buf = self->data.buf;
        Py_ssize_t size = self->data.len;
        pthread_mutex_unlock(&self->lock);
        int error = write_and_sync(fd, buf, size, offset);
        pthread_mutex_lock(&self->lock);
        self->error = error;
        self->finished = 1;
        pthread_mutex_unlock(&self->lock);
        notify(self->notify_fd);
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

static PyObject *
SyncThread_write(SyncThread *self, PyObject *args)
{
    int fd;
    long long offset;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "iLy*", &fd, &offset, &data)) {
        return NULL;
    }
    if (!self->started || self->stopping) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_RuntimeError, "the SyncThread is closed");
        return NULL;
    }
    if (self->in_hand) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_RuntimeError, "a write is in hand already");
        return NULL;
    }
    pthread_mutex_lock(&self->lock);
    self->fd = fd;
    self->offset = (off_t)offset;
    self->data = data;
    self->in_hand = 1;
    self->handed = 1;
    self->finished = 0;
    pthread_mutex_unlock(&self->lock);
    pthread_cond_signal(&self->wake);
    Py_RETURN_NONE;
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
    self->in_hand = 0;
    PyBuffer_Release(&self->data);
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
        PyBuffer_Release(&self->data);
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
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef SyncThread_methods[] = {
    {"write", (PyCFunction)SyncThread_write, METH_VARARGS,
     "write(fd, offset, data): write data at offset of fd and fdatasync it, on the thread"},
    {"result", (PyCFunction)SyncThread_result, METH_NOARGS,
     "None while the write runs; then 0, or the errno it failed with"},
    {"close", (PyCFunction)SyncThread_close, METH_NOARGS,
     "finish the write in hand and end the thread"},
    {NULL, NULL, 0, NULL},
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
