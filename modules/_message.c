/*
 * How a Message is made, in C (modules/message.py).
 *
 * bind(cls, persistent_queue, default_queue, by_class_of_service, no_tails, plain_tail,
 *      escaped_tail, frame_only)
 *     Make `cls` (``Message``) use `new` as its ``__new__`` and `wire_tail` as its
 *     ``wire_tail`` method; the constants are the egress queue of a persistent message
 *     (G-1), of a non-persistent one without a known class of service (D-1), the egress
 *     queue by class of service, the empty wire tails every message starts with, the
 *     encoder's two ways of making a MESSAGE frame's tail (``plain_message_tail``, None
 *     where a header needs escaping, and ``escaped_message_tail``) and the headers a
 *     tail leaves out.
 *
 * Message(message_id, destination, headers, body, sender=None, waiter=None, expires=0,
 *         timestamp=0)
 *     A new message, every slot set as message.py documents it: ``persistent`` from the
 *     ``persistent`` header ("true"), its egress queue (G-1 if persistent, else by its
 *     ``class-of-service`` header, D-1 by default), ``receipt`` and ``transaction`` from
 *     their headers, ``size`` the body's length, the rest as a message that has been
 *     nowhere yet (no position, not answered, not redelivered, no target, no unit, no
 *     wire tails). ``level``, ``group`` and ``home`` stay unset: a queue sets them.
 *
 * message.wire_tail(stomp_version)
 *     The MESSAGE frame's bytes after its subscription and ack lines, for
 *     ``stomp_version``: from the message's ``wire`` tails if encoded already, else
 *     encoded (plainly if no header needs escaping) and kept in a new ``wire`` dict
 *     (the one it had may be the shared empty ``no_tails``, or another message's).
 *
 * passes_through(batch) -> bool
 *     Whether every message of the list `batch` goes straight through the pipeline's
 *     transaction and storage steps: none persistent, none transacted, none of a
 *     committed transaction (``unit``). Those steps then hand the batch on as it is,
 *     instead of looking at each message in Python (0.13 µs a message, both together).
 *
 * shared_target(batch) -> target | None
 *     The destination every message of the list `batch` is on its way to (their
 *     ``target``: the same object), or None if they are not all: the distributing
 *     step then enqueues the whole batch at once.
 *
 * waiting_runs(batch) -> [(waiter, messages), ...]
 *     The messages of the list `batch` that have a ``waiter``, taken from it (set to
 *     None) and grouped in runs of one waiter, in order: the chain's end tells each
 *     waiter of its run at once (``chain.Terminal``).
 *
 * take_sends(events, start, send_type, prefix, sends, new_id, sender, waiter, timestamp)
 *     -> index
 *     A new message appended to the list `sends` for each of the list `events` from
 *     `start` on that is a SEND (of `send_type`: destination, headers, body) to a
 *     destination whose name begins with `prefix` (one domain's), up to the first that
 *     is not: its id from `new_id()`, the rest as ``Message(id, destination, headers,
 *     body, sender, waiter, 0, timestamp)``. Returns the index of the first not taken
 *     (``len(events)``: none). A client's run of SENDs to one domain is made here
 *     (``ClientConnection._act``), not one by one in Python.
 *
 * plain_admitted(batch, index, target, sender, name, admitted) -> index
 *     The admission step's common case (``AdmissionModule.handle``), in C: once it has
 *     admitted a message of `sender` to `target` (and read that destination's
 *     ``maxttl``: 0), each message of the list `batch` from `index` on that follows it
 *     in that run is appended to the list `admitted`, up to the first that does not:
 *     one of another sender, one on its way elsewhere (its ``target`` another; with no
 *     target yet, a destination other than `name`, which names `target`: None, none is
 *     resolved here), one with a ``class-of-service`` or ``expires`` header, or one in a
 *     transaction. A message with no target yet gets `target`. Returns the index of the
 *     first not admitted (``len(batch)``: none).
 *
 * plain_entries(messages, index, queue, to_g1, frame, limits, entries)
 *     -> (index, taken, nbytes, burst, work_left)
 *     A subscription's deliveries of a run (``Subscription.deliver_run``, in the common
 *     case: nothing to screen, nothing to track, nothing to discard), in C: for each of
 *     the list `messages` from `index` on, while it is a message for egress queue
 *     `queue` (``to_g1``, if not None, the queue every message goes to instead of its
 *     own: a queue's in-order deliveries behind G-1 frames), of at most ``large`` bytes,
 *     and the subscription is ready for it, one egress entry appended to the list
 *     `entries`: ``make(head, message.wire_tail(version), owner, work, message)``, its
 *     work the frame's 2 KiB units. `frame` is (head, version, owner, make); `limits`
 *     (large, slots, nbytes_left, burst, work_left): ready while fewer than `slots`
 *     messages and `nbytes_left` bytes were taken, and the egress queue admits the
 *     frame (while `burst` is positive, or its units fit in `work_left`: a queue that
 *     never blocks passes a `burst` it never spends). Returns the index of the first message not taken,
 *     how many were taken, their bytes, and what the egress queue admits after them.
 *
 * plain_arrivals(messages, start, arrivals, keys, level) -> (index, nbytes)
 *     Number the messages of the list `messages` from `start` on that arrive at a
 *     queue's default level, up to the first that does not (one read back from a store,
 *     or one with a header of `keys`: ``priority``, ``JMSXGroupID``): their ``arrival``
 *     is `arrivals` + 1, + 2, ..., and where `level` is not None (a queue with
 *     selective consumers routes them), their ``level`` is `level` and their ``group``
 *     None. Returns the index of the first not numbered (``len(messages)``: none) and
 *     their bytes (``Queue.enqueue`` counts them, and lists them, at once).
 *
 * Numbered(prefix)
 *     Called, the next of the ids prefix + "1", prefix + "2", ... (an ASCII prefix): a
 *     message's id, made for every SEND (``modules/ids.py``). The same ids from Python
 *     (``map`` and ``str.format`` over ``itertools.count``) cost 0.16 µs each, here
 *     0.04 µs.
 *
 * Every message the server receives is made here, once per SEND: in Python the
 * ``__init__`` with its 21 attribute stores and four header look-ups cost 0.58 µs,
 * here 0.2 µs (a queued message's path: 7 % fewer instructions; bench/README.md), and
 * 0.13 µs as the class's vectorcall, which takes the arguments without a tuple. The
 * slots are written through their offsets, found once from the class's member
 * descriptors (what ``__slots__`` made), so that the layout is the class's own.
 * Every delivery asks for its message's tail: in Python the method cost 0.44 µs to
 * encode one (0.11 of it the encoding) and 0.08 µs to find it kept.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* The slots `new` sets, in the order of `values` below. */
static const char *const SLOTS[] = {
    "message_id", "destination", "headers",   "body",   "persistent", "expires",
    "store_seq",  "arrival",     "egress_queue", "_stored_size", "transaction", "receipt",
    "answered",   "sender",      "waiter",    "target", "size",       "redelivered",
    "unit",       "wire",        "timestamp",
};
#define NSLOTS (sizeof SLOTS / sizeof SLOTS[0])
/* Where the functions below find what they read, in SLOTS. */
enum {
    MESSAGE_ID = 0,
    DESTINATION = 1,
    HEADERS = 2,
    BODY = 3,
    PERSISTENT = 4,
    STORE_SEQ = 6,
    ARRIVAL = 7,
    TRANSACTION = 10,
    SENDER = 13,
    WAITER = 14,
    TARGET = 15,
    EGRESS_QUEUE = 8,
    SIZE = 16,
    REDELIVERED = 17,
    UNIT = 18,
    WIRE = 19,
};

static PyTypeObject *message_type; /* the bound class (a strong reference) */
static Py_ssize_t offsets[NSLOTS];
/* The slots a queue sets later (``level``, ``group``), which `new` leaves unset. */
static const char *const LATER[] = {"level", "group"};
#define NLATER (sizeof LATER / sizeof LATER[0])
enum { LEVEL = 0, GROUP = 1 };
static Py_ssize_t later_offsets[NLATER];
#define LATER_SLOT(message, index) (*(PyObject **)((char *)(message) + later_offsets[index]))
/* Slot `index` of `message` (an lvalue): the object, NULL if unset. */
#define SLOT(message, index) (*(PyObject **)((char *)(message) + offsets[index]))
static PyObject *persistent_queue, *default_queue, *by_class_of_service, *no_tails;
static PyObject *plain_tail, *escaped_tail, *frame_only;
static PyObject *zero, *minus_one;
static PyObject *s_persistent, *s_true, *s_class_of_service, *s_receipt, *s_transaction;
static PyObject *s_expires;

static const char *const NAMES[] = {"message_id", "destination", "headers", "body",
                                    "sender",     "waiter",      "expires", "timestamp"};
#define NARGS 8
#define NREQUIRED 4

/* Put a keyword argument in its place of `values`; -1 with an exception if it has none. */
static int
keyword(PyObject **values, PyObject *name, PyObject *value)
{
    for (int i = 0; i < NARGS; i++) {
        if (PyUnicode_CompareWithASCIIString(name, NAMES[i]) == 0) {
            if (values[i] != NULL) {
                break;
            }
            values[i] = value;
            return 0;
        }
    }
    PyErr_Format(PyExc_TypeError, "Message() got an unexpected or repeated argument %R", name);
    return -1;
}

static PyObject *make(PyTypeObject *type, PyObject *const *values);

/* Put `nargs` positional arguments and the keyword ones (`kwnames`, their values after
 * the positional ones in `args`) in their places of `values`; -1 with an exception if
 * they do not fit. */
static int
collect(PyObject **values, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs > NARGS) {
        PyErr_SetString(PyExc_TypeError, "Message() takes at most 8 arguments");
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        values[i] = args[i];
    }
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        if (keyword(values, PyTuple_GET_ITEM(kwnames, k), args[nargs + k]) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Message(...): the class's vectorcall (what calling the class runs: no argument tuple). */
static PyObject *
message_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *values[NARGS] = {NULL};
    if (collect(values, args, PyVectorcall_NARGS(nargsf), kwnames) < 0) {
        return NULL;
    }
    return make((PyTypeObject *)type, values);
}

/* The class's tp_new: a call that comes with an argument tuple (``type.__call__``). */
static PyObject *
message_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *values[NARGS] = {NULL};
    if (collect(values, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), NULL) < 0) {
        return NULL;
    }
    if (kwargs != NULL) {
        PyObject *name, *value;
        Py_ssize_t position = 0;
        while (PyDict_Next(kwargs, &position, &name, &value)) {
            if (keyword(values, name, value) < 0) {
                return NULL;
            }
        }
    }
    return make(type, values);
}

/* Message.__new__(cls, ...): the same, called as a function (``__new__`` in the class). */
static PyObject *
new(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *values[NARGS] = {NULL};
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "Message.__new__(cls, ...) needs the class");
        return NULL;
    }
    if (!PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "Message.__new__(cls, ...): cls is not a class");
        return NULL;
    }
    if (collect(values, args + 1, nargs - 1, kwnames) < 0) {
        return NULL;
    }
    return make((PyTypeObject *)args[0], values);
}

/* A new message of `type` from its arguments in NAMES's order (NULL: not given). */
static PyObject *
make(PyTypeObject *type, PyObject *const *values)
{
    for (int i = 0; i < NREQUIRED; i++) {
        if (values[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "Message() missing argument %s", NAMES[i]);
            return NULL;
        }
    }
    if (type != message_type) {
        PyErr_SetString(PyExc_TypeError, "Message.__new__ makes Message only");
        return NULL;
    }
    PyObject *headers = values[2], *body = values[3];
    if (!PyDict_Check(headers)) {
        PyErr_SetString(PyExc_TypeError, "a message's headers are a dict");
        return NULL;
    }
    Py_ssize_t size = PyObject_Length(body);
    if (size < 0) {
        return NULL;
    }
    PyObject *flag = PyDict_GetItemWithError(headers, s_persistent);
    if (flag == NULL && PyErr_Occurred()) {
        return NULL;
    }
    int persistent = 0;
    if (flag != NULL) {
        persistent = PyObject_RichCompareBool(flag, s_true, Py_EQ);
        if (persistent < 0) {
            return NULL;
        }
    }
    PyObject *queue = default_queue;
    if (persistent) {
        queue = persistent_queue;
    } else {
        PyObject *service = PyDict_GetItemWithError(headers, s_class_of_service);
        if (service == NULL && PyErr_Occurred()) {
            return NULL;
        }
        if (service != NULL) {
            PyObject *chosen = PyDict_GetItemWithError(by_class_of_service, service);
            if (chosen == NULL && PyErr_Occurred()) {
                return NULL;
            }
            if (chosen != NULL) {
                queue = chosen;
            }
        }
    }
    PyObject *receipt = PyDict_GetItemWithError(headers, s_receipt);
    if (receipt == NULL && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *transaction = PyDict_GetItemWithError(headers, s_transaction);
    if (transaction == NULL && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *length = PyLong_FromSsize_t(size);
    if (length == NULL) {
        return NULL;
    }
    PyObject *slots[NSLOTS] = {
        values[0],                            /* message_id */
        values[1],                            /* destination */
        headers,                              /* headers */
        body,                                 /* body */
        persistent ? Py_True : Py_False,      /* persistent */
        values[6] ? values[6] : zero,         /* expires */
        zero,                                 /* store_seq */
        zero,                                 /* arrival */
        queue,                                /* egress_queue */
        minus_one,                            /* _stored_size */
        transaction ? transaction : Py_None,  /* transaction */
        receipt ? receipt : Py_None,          /* receipt */
        Py_False,                             /* answered */
        values[4] ? values[4] : Py_None,      /* sender */
        values[5] ? values[5] : Py_None,      /* waiter */
        Py_None,                              /* target */
        length,                               /* size */
        Py_False,                             /* redelivered */
        Py_None,                              /* unit */
        no_tails,                             /* wire */
        values[7] ? values[7] : zero,         /* timestamp */
    };
    PyObject *message = message_type->tp_alloc(message_type, 0);
    if (message == NULL) {
        Py_DECREF(length);
        return NULL;
    }
    for (size_t i = 0; i < NSLOTS; i++) {
        SLOT(message, i) = Py_NewRef(slots[i]);
    }
    Py_DECREF(length);
    return message;
}

/* The object in slot `index` of `message` (borrowed); NULL with AttributeError if unset. */
static PyObject *
slot(PyObject *message, int index)
{
    PyObject *value = SLOT(message, index);
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "Message has no %s", SLOTS[index]);
    }
    return value;
}

/* message.wire_tail(stomp_version): a method of the bound class (see the top). */
static PyObject *
wire_tail(PyObject *message, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "wire_tail(stomp_version) takes one argument");
        return NULL;
    }
    PyObject *version = args[0];
    PyObject *wire = slot(message, WIRE);
    if (wire == NULL) {
        return NULL;
    }
    if (!PyDict_Check(wire)) {
        PyErr_SetString(PyExc_TypeError, "a message's wire tails are a dict");
        return NULL;
    }
    if (PyDict_GET_SIZE(wire)) {
        PyObject *kept = PyDict_GetItemWithError(wire, version);
        if (kept != NULL) {
            return Py_NewRef(kept);
        }
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    PyObject *parts[8] = {NULL}; /* parts[0]: room for the vectorcall's offset */
    static const int from[] = {MESSAGE_ID, DESTINATION, HEADERS, -1, BODY, REDELIVERED};
    for (int i = 0; i < 6; i++) {
        parts[i + 1] = from[i] < 0 ? frame_only : slot(message, from[i]);
        if (parts[i + 1] == NULL) {
            return NULL;
        }
    }
    parts[7] = version;
    /* The tails kept so far, copied before the encoders run (Python, for an escaped one). */
    PyObject *tails = PyDict_GET_SIZE(wire) ? PyDict_Copy(wire) : PyDict_New();
    if (tails == NULL) {
        return NULL;
    }
    PyObject *tail = PyObject_Vectorcall(plain_tail, parts + 1,
                                         6 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (tail == Py_None) {
        Py_DECREF(tail);
        tail = PyObject_Vectorcall(escaped_tail, parts + 1, 7 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                   NULL);
    }
    if (tail == NULL || PyDict_SetItem(tails, version, tail) < 0) {
        Py_DECREF(tails);
        Py_XDECREF(tail);
        return NULL;
    }
    Py_SETREF(SLOT(message, WIRE), tails);
    return tail;
}

static PyMethodDef wire_tail_method = {
    "wire_tail", (PyCFunction)(void (*)(void))wire_tail, METH_FASTCALL,
    "wire_tail(stomp_version): the MESSAGE frame after its subscription/ack lines, "
    "escaped for stomp_version (encoded once per version and kept)"};

/* The offsets of `type`'s object slots `names` (`count` of them), into `found`; -1 with
 * an exception if one is not an object slot of it. */
static int
find_slots(PyTypeObject *type, const char *const *names, size_t count, Py_ssize_t *found)
{
    for (size_t i = 0; i < count; i++) {
        PyObject *descriptor = PyDict_GetItemString(type->tp_dict, names[i]);
        if (descriptor == NULL || !Py_IS_TYPE(descriptor, &PyMemberDescr_Type)) {
            PyErr_Format(PyExc_TypeError, "%s has no slot %s", type->tp_name, names[i]);
            return -1;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descriptor)->d_member;
        if (member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", type->tp_name,
                         names[i]);
            return -1;
        }
        found[i] = member->offset;
    }
    return 0;
}

static PyObject *
bind(PyObject *module, PyObject *args)
{
    PyObject *cls, *g1, *d1, *by_service, *tails, *plain, *escaped, *only;
    if (!PyArg_ParseTuple(args, "O!OOO!O!OOO!", &PyType_Type, &cls, &g1, &d1, &PyDict_Type,
                          &by_service, &PyDict_Type, &tails, &plain, &escaped,
                          &PyFrozenSet_Type, &only)) {
        return NULL;
    }
    if (!PyCallable_Check(plain) || !PyCallable_Check(escaped)) {
        PyErr_SetString(PyExc_TypeError, "bind: the tail encoders are not callable");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    Py_ssize_t found[NSLOTS], found_later[NLATER];
    if (find_slots(type, SLOTS, NSLOTS, found) < 0
        || find_slots(type, LATER, NLATER, found_later) < 0) {
        return NULL;
    }
    PyObject *function = PyObject_GetAttrString(module, "new");
    if (function == NULL) {
        return NULL;
    }
    int failed = PyObject_SetAttrString(cls, "__new__", function);
    Py_DECREF(function);
    if (failed) {
        return NULL;
    }
    PyObject *method = PyDescr_NewMethod(type, &wire_tail_method);
    if (method == NULL) {
        return NULL;
    }
    failed = PyObject_SetAttrString(cls, "wire_tail", method);
    Py_DECREF(method);
    if (failed) {
        return NULL;
    }
    memcpy(offsets, found, sizeof offsets);
    memcpy(later_offsets, found_later, sizeof later_offsets);
    type->tp_new = message_new;
    type->tp_vectorcall = message_vectorcall; /* calling the class: no argument tuple */
    Py_XSETREF(message_type, (PyTypeObject *)Py_NewRef(cls));
    Py_XSETREF(persistent_queue, Py_NewRef(g1));
    Py_XSETREF(default_queue, Py_NewRef(d1));
    Py_XSETREF(by_class_of_service, Py_NewRef(by_service));
    Py_XSETREF(no_tails, Py_NewRef(tails));
    Py_XSETREF(plain_tail, Py_NewRef(plain));
    Py_XSETREF(escaped_tail, Py_NewRef(escaped));
    Py_XSETREF(frame_only, Py_NewRef(only));
    Py_RETURN_NONE;
}

/* passes_through(batch): see the top. */
static PyObject *
passes_through(PyObject *module, PyObject *batch)
{
    if (!PyList_Check(batch)) {
        PyErr_SetString(PyExc_TypeError, "passes_through(batch): a list of messages");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batch); i++) {
        PyObject *message = PyList_GET_ITEM(batch, i);
        if (Py_TYPE(message) != message_type || SLOT(message, PERSISTENT) != Py_False
            || SLOT(message, TRANSACTION) != Py_None || SLOT(message, UNIT) != Py_None) {
            Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

/* shared_target(batch): see the top. */
static PyObject *
shared_target(PyObject *module, PyObject *batch)
{
    if (!PyList_Check(batch)) {
        PyErr_SetString(PyExc_TypeError, "shared_target(batch): a list of messages");
        return NULL;
    }
    PyObject *target = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batch); i++) {
        PyObject *message = PyList_GET_ITEM(batch, i);
        if (Py_TYPE(message) != message_type) {
            Py_RETURN_NONE;
        }
        PyObject *its = SLOT(message, TARGET);
        if (its == NULL || its == Py_None || (target != NULL && its != target)) {
            Py_RETURN_NONE;
        }
        target = its;
    }
    return Py_NewRef(target != NULL ? target : Py_None);
}

/* Append (waiter, run) to `runs`, taking the references to both; -1 on an error. */
static int
add_run(PyObject *runs, PyObject *waiter, PyObject *run)
{
    PyObject *pair = PyTuple_Pack(2, waiter, run);
    Py_DECREF(waiter);
    Py_DECREF(run);
    if (pair == NULL) {
        return -1;
    }
    int failed = PyList_Append(runs, pair);
    Py_DECREF(pair);
    return failed;
}

/* waiting_runs(batch): see the top. */
static PyObject *
waiting_runs(PyObject *module, PyObject *batch)
{
    if (!PyList_Check(batch)) {
        PyErr_SetString(PyExc_TypeError, "waiting_runs(batch): a list of messages");
        return NULL;
    }
    PyObject *runs = PyList_New(0);
    PyObject *waiter = NULL, *run = NULL; /* the run being gathered (owned) */
    if (runs == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batch); i++) {
        PyObject *message = PyList_GET_ITEM(batch, i);
        if (Py_TYPE(message) != message_type) {
            PyErr_SetString(PyExc_TypeError, "waiting_runs(batch): a list of messages");
            goto error;
        }
        PyObject *its = SLOT(message, WAITER);
        if (its == NULL || its == Py_None) {
            continue;
        }
        SLOT(message, WAITER) = Py_NewRef(Py_None); /* its reference is now `its`'s */
        if (its != waiter) {
            if (run != NULL && add_run(runs, waiter, run) < 0) {
                waiter = run = NULL;
                Py_DECREF(its);
                goto error;
            }
            waiter = its;
            run = PyList_New(0);
            if (run == NULL) {
                goto error;
            }
        }
        else {
            Py_DECREF(its);
        }
        if (PyList_Append(run, message) < 0) {
            goto error;
        }
    }
    if (run != NULL && add_run(runs, waiter, run) < 0) {
        waiter = run = NULL;
        goto error;
    }
    return runs;
error:
    Py_XDECREF(waiter);
    Py_XDECREF(run);
    Py_DECREF(runs);
    return NULL;
}

/* Where a loop over a list begins: the int `arg`, 0 if negative; -1 with an exception if
 * it is not an index. */
static Py_ssize_t
start_index(PyObject *arg)
{
    Py_ssize_t index = PyLong_AsSsize_t(arg);
    if (index == -1 && PyErr_Occurred()) {
        return -1;
    }
    return index < 0 ? 0 : index;
}

/* plain_admitted(batch, index, target, sender, name, admitted): see the top. */
static PyObject *
plain_admitted(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyList_Check(args[0]) || !PyLong_Check(args[1])
        || !(args[4] == Py_None || PyUnicode_Check(args[4])) || !PyList_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "plain_admitted(batch, index, target, sender, name, admitted): a list, "
                        "an int, two objects, a str or None and a list");
        return NULL;
    }
    PyObject *batch = args[0], *target = args[2], *sender = args[3], *name = args[4];
    PyObject *admitted = args[5];
    Py_ssize_t index = start_index(args[1]);
    if (index < 0) {
        return NULL;
    }
    for (; index < PyList_GET_SIZE(batch); index++) {
        PyObject *message = PyList_GET_ITEM(batch, index);
        if (Py_TYPE(message) != message_type || SLOT(message, SENDER) != sender
            || SLOT(message, TRANSACTION) != Py_None) {
            break;
        }
        PyObject *its = SLOT(message, TARGET), *headers = SLOT(message, HEADERS);
        if (its == NULL || headers == NULL || !PyDict_Check(headers)) {
            break; /* the caller's own way says what is wrong */
        }
        if (its == Py_None) {
            PyObject *destination = SLOT(message, DESTINATION);
            if (name == Py_None || destination == NULL || !PyUnicode_Check(destination)) {
                break;
            }
            int same = destination == name ? 1 : PyUnicode_Compare(destination, name) == 0;
            if (PyErr_Occurred()) {
                return NULL;
            }
            if (!same) {
                break;
            }
        }
        else if (its != target) {
            break;
        }
        int keyed = PyDict_Contains(headers, s_class_of_service);
        if (keyed == 0) {
            keyed = PyDict_Contains(headers, s_expires);
        }
        if (keyed) {
            if (keyed < 0) {
                return NULL;
            }
            break;
        }
        if (its == Py_None) {
            Py_SETREF(SLOT(message, TARGET), Py_NewRef(target));
        }
        if (PyList_Append(admitted, message) < 0) {
            return NULL;
        }
    }
    return PyLong_FromSsize_t(index);
}

/* plain_entries(messages, index, queue, to_g1, frame, limits, entries): see the top. */
static PyObject *
plain_entries(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *head, *version, *owner, *make;
    Py_ssize_t large, slots, nbytes_left, burst, work_left;
    if (nargs != 7 || !PyList_Check(args[0]) || !PyLong_Check(args[1]) || !PyList_Check(args[6])
        || !PyTuple_Check(args[4]) || !PyTuple_Check(args[5])
        || !PyArg_ParseTuple(args[4], "SOOO", &head, &version, &owner, &make)
        || !PyArg_ParseTuple(args[5], "nnnnn", &large, &slots, &nbytes_left, &burst,
                             &work_left)) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_SetString(PyExc_TypeError,
                            "plain_entries(messages, index, queue, to_g1, (head, version, "
                            "owner, make), (large, slots, nbytes_left, burst, work_left), "
                            "entries)");
        }
        return NULL;
    }
    PyObject *messages = args[0], *queue = args[2], *to_g1 = args[3], *entries = args[6];
    Py_ssize_t index = start_index(args[1]);
    if (index < 0) {
        return NULL;
    }
    Py_ssize_t taken = 0, nbytes = 0, head_length = PyBytes_GET_SIZE(head);
    for (; index < PyList_GET_SIZE(messages); index++) {
        PyObject *message = PyList_GET_ITEM(messages, index);
        if (Py_TYPE(message) != message_type) {
            break; /* None: an expired message's place (the caller passes over it) */
        }
        PyObject *its = slot(message, EGRESS_QUEUE), *size_object = slot(message, SIZE);
        if (its == NULL || size_object == NULL) {
            return NULL;
        }
        if (to_g1 != Py_None) {
            its = to_g1;
        }
        int same = its == queue ? 1 : PyObject_RichCompareBool(its, queue, Py_EQ);
        if (same <= 0) {
            if (same < 0) {
                return NULL;
            }
            break;
        }
        Py_ssize_t size = PyLong_AsSsize_t(size_object);
        if (size == -1 && PyErr_Occurred()) {
            return NULL;
        }
        Py_ssize_t size_units = (size + 2047) >> 11 ? (size + 2047) >> 11 : 1;
        if (size > large || taken >= slots || nbytes >= nbytes_left
            || (burst <= 0 && size_units > work_left)) {
            break; /* the caller sees why (``deliver_run``'s own test) */
        }
        PyObject *tail = wire_tail(message, &version, 1);
        if (tail == NULL) {
            return NULL;
        }
        if (!PyBytes_Check(tail)) {
            Py_DECREF(tail);
            PyErr_SetString(PyExc_TypeError, "plain_entries: a wire tail is bytes");
            return NULL;
        }
        Py_ssize_t units = (head_length + PyBytes_GET_SIZE(tail) + 2047) >> 11;
        if (units == 0) {
            units = 1;
        }
        PyObject *work = PyLong_FromSsize_t(units);
        if (work == NULL) {
            Py_DECREF(tail);
            return NULL;
        }
        PyObject *call[5] = {head, tail, owner, work, message};
        PyObject *entry = PyObject_Vectorcall(make, call, 5, NULL);
        Py_DECREF(tail);
        Py_DECREF(work);
        if (entry == NULL) {
            return NULL;
        }
        int failed = PyList_Append(entries, entry);
        Py_DECREF(entry);
        if (failed) {
            return NULL;
        }
        burst--;
        work_left -= units;
        taken++;
        nbytes += size;
    }
    return Py_BuildValue("(nnnnn)", index, taken, nbytes, burst, work_left);
}

/* plain_arrivals(messages, start, arrivals, keys, level): see the top. */
static PyObject *
plain_arrivals(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyList_Check(args[0]) || !PyLong_Check(args[1])
        || !PyLong_Check(args[2]) || !PyTuple_Check(args[3])
        || !(args[4] == Py_None || PyLong_Check(args[4]))) {
        PyErr_SetString(PyExc_TypeError,
                        "plain_arrivals(messages, start, arrivals, keys, level): a list, two "
                        "ints, a tuple and an int or None");
        return NULL;
    }
    PyObject *messages = args[0], *keys = args[3], *level = args[4];
    Py_ssize_t start = start_index(args[1]);
    long long arrivals = PyLong_AsLongLong(args[2]);
    if (start < 0 || (arrivals == -1 && PyErr_Occurred())) {
        return NULL;
    }
    Py_ssize_t index = start, nbytes = 0;
    for (; index < PyList_GET_SIZE(messages); index++) {
        PyObject *message = PyList_GET_ITEM(messages, index);
        if (Py_TYPE(message) != message_type) {
            PyErr_SetString(PyExc_TypeError, "plain_arrivals: a list of messages");
            return NULL;
        }
        PyObject *stored = slot(message, STORE_SEQ), *headers = slot(message, HEADERS);
        PyObject *size = slot(message, SIZE);
        if (stored == NULL || headers == NULL || size == NULL) {
            return NULL;
        }
        int seq = PyObject_IsTrue(stored);
        if (seq < 0) {
            return NULL;
        }
        if (seq) {
            break;
        }
        int keyed = 0;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(keys) && !keyed; k++) {
            keyed = PyDict_Contains(headers, PyTuple_GET_ITEM(keys, k));
            if (keyed < 0) {
                return NULL;
            }
        }
        if (keyed) {
            break;
        }
        Py_ssize_t bytes = PyLong_AsSsize_t(size);
        if (bytes == -1 && PyErr_Occurred()) {
            return NULL;
        }
        PyObject *arrival = PyLong_FromLongLong(arrivals + (index - start) + 1);
        if (arrival == NULL) {
            return NULL;
        }
        Py_XSETREF(SLOT(message, ARRIVAL), arrival);
        if (level != Py_None) {
            Py_XSETREF(LATER_SLOT(message, LEVEL), Py_NewRef(level));
            Py_XSETREF(LATER_SLOT(message, GROUP), Py_NewRef(Py_None));
        }
        nbytes += bytes;
    }
    return Py_BuildValue("(nn)", index, nbytes);
}

/* Numbered: a counter that makes ids (see the top). */
typedef struct {
    PyObject_HEAD
    PyObject *prefix; /* an ASCII str */
    unsigned long long next;
} Numbered;

static PyObject *
numbered_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *prefix;
    static char *keywords[] = {"prefix", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "U", keywords, &prefix)) {
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(prefix)) {
        PyErr_SetString(PyExc_ValueError, "Numbered: the prefix is not ASCII");
        return NULL;
    }
    Numbered *self = (Numbered *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->prefix = Py_NewRef(prefix);
    self->next = 1;
    return (PyObject *)self;
}

static void
numbered_dealloc(Numbered *self)
{
    Py_DECREF(self->prefix);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The next id of `self`: the prefix and the number's decimal digits, in a new str. */
static PyObject *
numbered_next(Numbered *self)
{
    char digits[20];
    int count = 0;
    unsigned long long number = self->next++;
    do {
        digits[count++] = (char)('0' + number % 10);
        number /= 10;
    } while (number);
    Py_ssize_t length = PyUnicode_GET_LENGTH(self->prefix);
    PyObject *id = PyUnicode_New(length + count, 127);
    if (id == NULL) {
        return NULL;
    }
    Py_UCS1 *data = PyUnicode_1BYTE_DATA(id);
    memcpy(data, PyUnicode_1BYTE_DATA(self->prefix), length);
    for (int i = 0; i < count; i++) {
        data[length + i] = (Py_UCS1)digits[count - 1 - i];
    }
    return id;
}

static PyObject *
numbered_call(Numbered *self, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) || (kwargs != NULL && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "Numbered() takes no arguments");
        return NULL;
    }
    return numbered_next(self);
}

static PyTypeObject numbered_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wiremq.modules._message.Numbered",
    .tp_basicsize = sizeof(Numbered),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Numbered(prefix): called, the next id, prefix + '1', prefix + '2', ...",
    .tp_new = numbered_new,
    .tp_dealloc = (destructor)numbered_dealloc,
    .tp_call = (ternaryfunc)numbered_call,
};

/* take_sends(events, start, send_type, prefix, sends, new_id, sender, waiter, timestamp):
 * see the top. */
static PyObject *
take_sends(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9 || !PyList_Check(args[0]) || !PyLong_Check(args[1]) || !PyType_Check(args[2])
        || !PyUnicode_Check(args[3]) || !PyList_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "take_sends(events, start, send_type, prefix, sends, new_id, sender, "
                        "waiter, timestamp): two lists, an int, a type and a str in their "
                        "places");
        return NULL;
    }
    if (message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "take_sends: no Message class is bound");
        return NULL;
    }
    PyObject *events = args[0], *send_type = args[2], *prefix = args[3], *sends = args[4];
    PyObject *new_id = args[5];
    Py_ssize_t index = start_index(args[1]);
    if (index < 0) {
        return NULL;
    }
    for (; index < PyList_GET_SIZE(events); index++) {
        PyObject *event = PyList_GET_ITEM(events, index);
        if ((PyObject *)Py_TYPE(event) != send_type) {
            break;
        }
        if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) != 3) {
            PyErr_SetString(PyExc_TypeError, "take_sends: a SEND is (destination, headers, body)");
            return NULL;
        }
        PyObject *destination = PyTuple_GET_ITEM(event, 0);
        if (!PyUnicode_Check(destination)) {
            break;
        }
        Py_ssize_t match = PyUnicode_Tailmatch(destination, prefix, 0, PY_SSIZE_T_MAX, -1);
        if (match < 0) {
            return NULL;
        }
        if (!match) {
            break;
        }
        PyObject *id = Py_IS_TYPE(new_id, &numbered_type) ? numbered_next((Numbered *)new_id)
                                                          : PyObject_CallNoArgs(new_id);
        if (id == NULL) {
            return NULL;
        }
        PyObject *values[NARGS] = {id,      destination, PyTuple_GET_ITEM(event, 1),
                                   PyTuple_GET_ITEM(event, 2), args[6], args[7],
                                   NULL,    args[8]};
        PyObject *message = make(message_type, values);
        Py_DECREF(id);
        if (message == NULL) {
            return NULL;
        }
        int failed = PyList_Append(sends, message);
        Py_DECREF(message);
        if (failed) {
            return NULL;
        }
    }
    return PyLong_FromSsize_t(index);
}

static PyMethodDef methods[] = {
    {"take_sends", (PyCFunction)(void (*)(void))take_sends, METH_FASTCALL,
     "take_sends(events, start, send_type, prefix, sends, new_id, sender, waiter, "
     "timestamp): a new message in sends for each SEND of a run to one domain (see the "
     "module source)"},
    {"plain_admitted", (PyCFunction)(void (*)(void))plain_admitted, METH_FASTCALL,
     "plain_admitted(batch, index, target, sender, name, admitted): the admission step's "
     "plain messages of a run (see the module source)"},
    {"plain_entries", (PyCFunction)(void (*)(void))plain_entries, METH_FASTCALL,
     "plain_entries(messages, index, queue, to_g1, (head, version, owner, make), (large, "
     "slots, nbytes_left, burst, work_left), entries): a subscription's plain deliveries of "
     "a run, as egress entries (see the module source)"},
    {"plain_arrivals", (PyCFunction)(void (*)(void))plain_arrivals, METH_FASTCALL,
     "plain_arrivals(messages, start, arrivals, keys, level): number the run of messages "
     "that arrive at a queue's default level (see the module source)"},
    {"waiting_runs", waiting_runs, METH_O,
     "waiting_runs(batch): the runs of messages of one waiter, each taken from its waiter "
     "(see the module source)"},
    {"shared_target", shared_target, METH_O,
     "shared_target(batch): the target every message of it has, or None (see the module "
     "source)"},
    {"passes_through", passes_through, METH_O,
     "passes_through(batch): whether no message of it is persistent, transacted or of a "
     "committed transaction (see the module source)"},
    {"new", (PyCFunction)(void (*)(void))new, METH_FASTCALL | METH_KEYWORDS,
     "new(cls, message_id, destination, headers, body, sender=None, waiter=None, "
     "expires=0, timestamp=0): a Message (see the module source)"},
    {"bind", bind, METH_VARARGS,
     "bind(cls, persistent_queue, default_queue, by_class_of_service, no_tails, "
     "plain_tail, escaped_tail, frame_only): make cls's messages and their wire tails "
     "here"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "wiremq.modules._message",
    .m_doc = "How a Message is made, in C; see the module source.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__message(void)
{
    zero = PyLong_FromLong(0);
    minus_one = PyLong_FromLong(-1);
    s_persistent = PyUnicode_InternFromString("persistent");
    s_true = PyUnicode_InternFromString("true");
    s_class_of_service = PyUnicode_InternFromString("class-of-service");
    s_receipt = PyUnicode_InternFromString("receipt");
    s_transaction = PyUnicode_InternFromString("transaction");
    s_expires = PyUnicode_InternFromString("expires");
    if (!zero || !minus_one || !s_persistent || !s_true || !s_class_of_service || !s_receipt ||
        !s_transaction || !s_expires) {
        return NULL;
    }
    if (PyType_Ready(&numbered_type) < 0) {
        return NULL;
    }
    PyObject *made = PyModule_Create(&module);
    if (made == NULL || PyModule_AddObjectRef(made, "Numbered", (PyObject *)&numbered_type) < 0) {
        Py_XDECREF(made);
        return NULL;
    }
    return made;
}
