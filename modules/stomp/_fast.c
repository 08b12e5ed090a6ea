/* The codec's fast paths, in C: decoding plain frames, encoding plain MESSAGE tails.
 *
 * scan(buf, pos, frames, frame, send, max_body, max_headers, max_header_bytes) -> pos
 *
 * Appends frame(command, headers, body) to `frames` for every frame of `buf`
 * from `pos` on that is complete and plain, and returns the position of the
 * first byte it did not take. With a `send` type (not None), a SEND frame whose
 * destination header is not empty is appended as send(destination, headers, body)
 * instead: the session's request, made once (codec.FrameDecoder's ``sends``). Both
 * are tuple types, made here as tuple.__new__ would, without their Python-level
 * __new__. It stops, leaving the rest to the decoder in
 * codec.py, at anything it does not handle: an incomplete frame, a carriage
 * return or a backslash in a frame head (line endings and escapes), a head
 * that is not UTF-8, a header line without a colon, too many headers or a
 * line too long, a content-length that is not plain digits or over the limit,
 * a body over the limit or not followed by NUL. The decoder in codec.py
 * handles all of those, and every error, so this file decides nothing a
 * frame's meaning depends on: what it accepts, codec.py accepts the same way
 * (tests/unit/test_codec_fuzz.py checks that the two agree on any input).
 *
 * message_tail(message_id, destination, headers, exclude, body, redelivered) -> bytes | None
 *
 * The MESSAGE frame after its per-delivery head, as encoder.escaped_message_tail
 * builds it, when no header (name or value, destination included) holds a
 * character that needs escaping in some STOMP version (backslash, CR, LF,
 * colon) and there are at most MAX_TAIL_HEADERS of them; None otherwise, and
 * encoder.escaped_message_tail builds it.
 *
 * new_body(size) -> bytes;  fill(body, offset, data) -> copied
 *
 * A large body is copied into its bytes object as its pieces arrive, instead of
 * keeping the pieces and joining them (and slicing the body out) once the frame is
 * complete: the decoder holds the body once, not three times over. new_body makes
 * a bytes object of that size whose content is not set yet (its pages are not
 * touched until written); fill copies as much of data as fits from offset on. The
 * decoder owns the object and hands it out only once it is full, so no one ever
 * sees it change (nor hashes it before).
 *
 * Maker(cls)(*items) -> cls
 *
 * A tuple of the NamedTuple `cls` holding `items`, one for each of its fields (a
 * TypeError otherwise), made at its size and filled as the scan's frames are: an
 * egress entry is made for every delivery (flow/egress_queues.py, ``new_entry``),
 * where tuple.__new__(Entry, (...)) makes the argument tuple too and copies it.
 *
 * take_frames(entries, taken, size, budget) -> (size, work);  frame_parts(entries, parts)
 *
 * The per-frame steps of writing a client's egress (flow/egress_queues.py, drain, and
 * client/egress.py, write_out): moving entries up to a byte budget, then their heads and
 * tails and their owners' runs. See each function's comment.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>

static PyObject *content_length_key, *destination_key;

/* Short texts seen lately, by a hash of their bytes: header names, and values that repeat
 * from frame to frame (a destination, a content-length, "true"). A frame's texts come from
 * here when they were seen before, so that a stream of SENDs allocates, and later hashes
 * and compares, one str per distinct text instead of one per frame. Direct-mapped: a
 * slot holds the last text of its hash; a text of another hash replaces it. */
#define RECENT_SLOTS 512
#define RECENT_MAX_BYTES 64
static PyObject *recent[RECENT_SLOTS];

/* The str of buf[start:stop], or NULL (no error set) if it is not UTF-8. */
static PyObject *
text_of(const char *buf, Py_ssize_t start, Py_ssize_t stop)
{
    Py_ssize_t size = stop - start;
    const char *bytes = buf + start;
    PyObject **slot = NULL;
    if (size <= RECENT_MAX_BYTES) {
        size_t hash = (size_t)size;
        for (Py_ssize_t i = 0; i < size; i++) {
            hash = hash * 31 + (unsigned char)bytes[i];
        }
        slot = &recent[hash % RECENT_SLOTS];
        PyObject *seen = *slot;
        /* Only ASCII texts are kept, so their UTF-8 is their data. */
        if (seen != NULL && PyUnicode_GET_LENGTH(seen) == size
            && memcmp(PyUnicode_DATA(seen), bytes, size) == 0) {
            Py_INCREF(seen);
            return seen;
        }
    }
    PyObject *text = PyUnicode_DecodeUTF8(bytes, size, NULL);
    if (text == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (slot != NULL && PyUnicode_IS_ASCII(text)) {
        Py_INCREF(text);
        Py_XSETREF(*slot, text);
    }
    return text;
}

/* Parse the head buf[start:stop] (command and header lines, no CR, no backslash).
 * Returns 1 and sets *command and *headers, 0 if the slow path must take it, -1 on
 * a Python error. */
static int
parse_head(const char *buf, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t max_headers,
           Py_ssize_t max_header_bytes, PyObject **command, PyObject **headers)
{
    const char *eol = memchr(buf + start, '\n', stop - start);
    Py_ssize_t line_end = eol ? eol - buf : stop;
    if (line_end - start > max_header_bytes) {
        return 0;
    }
    PyObject *cmd = text_of(buf, start, line_end);
    if (cmd == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *dict = PyDict_New();
    if (dict == NULL) {
        Py_DECREF(cmd);
        return -1;
    }
    Py_ssize_t count = 0;
    Py_ssize_t pos = line_end + 1;
    while (pos <= stop && line_end < stop) {
        eol = memchr(buf + pos, '\n', stop - pos);
        line_end = eol ? eol - buf : stop;
        if (++count > max_headers || line_end - pos > max_header_bytes) {
            goto slow;
        }
        const char *colon = memchr(buf + pos, ':', line_end - pos);
        if (colon == NULL) {
            goto slow;
        }
        Py_ssize_t split = colon - buf;
        PyObject *name = text_of(buf, pos, split);
        if (name == NULL) {
            goto slow;
        }
        PyObject *value = text_of(buf, split + 1, line_end);
        if (value == NULL) {
            Py_DECREF(name);
            goto slow;
        }
        PyObject *kept = PyDict_SetDefault(dict, name, value); /* the first one wins */
        Py_DECREF(name);
        Py_DECREF(value);
        if (kept == NULL) {
            goto error;
        }
        pos = line_end + 1;
    }
    *command = cmd;
    *headers = dict;
    return 1;
slow:
    Py_DECREF(cmd);
    Py_DECREF(dict);
    return PyErr_Occurred() ? -1 : 0;
error:
    Py_DECREF(cmd);
    Py_DECREF(dict);
    return -1;
}

/* The body length a content-length header gives: >= 0, -1 if there is none, -2 if
 * the slow path must judge it (not plain ASCII digits, or over max_body). */
static Py_ssize_t
content_length(PyObject *headers, Py_ssize_t max_body)
{
    PyObject *text = PyDict_GetItemWithError(headers, content_length_key);
    if (text == NULL) {
        return PyErr_Occurred() ? -3 : -1;
    }
    Py_ssize_t size;
    const char *digits = PyUnicode_AsUTF8AndSize(text, &size);
    if (digits == NULL) {
        return -3;
    }
    if (size == 0 || size > 18) {
        return -2;
    }
    Py_ssize_t length = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        if (digits[i] < '0' || digits[i] > '9') {
            return -2;
        }
        length = length * 10 + (digits[i] - '0');
    }
    return length > max_body ? -2 : length;
}

/* Whether `type` is a type of tuples with no more room than a tuple's (a NamedTuple). */
static int
is_tuple_type(PyObject *type)
{
    return PyType_Check(type) && PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)
           && ((PyTypeObject *)type)->tp_basicsize == PyTuple_Type.tp_basicsize
           && ((PyTypeObject *)type)->tp_itemsize == PyTuple_Type.tp_itemsize;
}

/* A new instance of the tuple type `type` holding the `count` `items` (new references to
 * them): allocated at its size and filled, as tuple.__new__(type, items) makes it,
 * without the argument tuple that call needs (the scan's frames, ``Maker``'s tuples). */
static PyObject *
filled(PyTypeObject *type, PyObject *const *items, Py_ssize_t count)
{
    PyObject *made = type->tp_alloc(type, count);
    if (made == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyTuple_SET_ITEM(made, i, Py_NewRef(items[i]));
    }
    return made;
}

/* The destination of a SEND frame `command` with `headers`, if `send` is a type to decode
 * it to and the destination is not empty (a new reference); NULL otherwise, and NULL with
 * an exception set on an error. */
static PyObject *
send_destination(PyObject *send, PyObject *command, PyObject *headers)
{
    if (send == Py_None || PyUnicode_GET_LENGTH(command) != 4 || !PyUnicode_IS_ASCII(command)
        || memcmp(PyUnicode_DATA(command), "SEND", 4) != 0) {
        return NULL;
    }
    PyObject *destination = PyDict_GetItemWithError(headers, destination_key);
    if (destination == NULL || !PyUnicode_Check(destination)
        || PyUnicode_GET_LENGTH(destination) == 0) {
        return NULL;
    }
    return Py_NewRef(destination);
}

/* Maker: makes tuples of one NamedTuple type (see the top). */
typedef struct {
    PyObject_HEAD
    PyTypeObject *made; /* the tuple type it makes */
    Py_ssize_t size;    /* how many items: its fields */
    vectorcallfunc vectorcall;
} Maker;

static PyObject *
maker_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Maker *self = (Maker *)callable;
    Py_ssize_t count = PyVectorcall_NARGS(nargsf);
    if (count != self->size || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd positional items", self->made->tp_name,
                     self->size);
        return NULL;
    }
    return filled(self->made, args, count);
}

static PyObject *
maker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *made;
    static char *keywords[] = {"cls", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O", keywords, &made)) {
        return NULL;
    }
    PyObject *fields = is_tuple_type(made) ? PyObject_GetAttrString(made, "_fields") : NULL;
    if (fields == NULL || !PyTuple_Check(fields)) {
        Py_XDECREF(fields);
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "Maker(cls): cls is not a NamedTuple");
        return NULL;
    }
    Py_ssize_t size = PyTuple_GET_SIZE(fields);
    Py_DECREF(fields);
    Maker *self = (Maker *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->made = (PyTypeObject *)Py_NewRef(made);
    self->size = size;
    self->vectorcall = maker_vectorcall;
    return (PyObject *)self;
}

static void
maker_dealloc(Maker *self)
{
    Py_DECREF(self->made);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject maker_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wiremq.modules.stomp._fast.Maker",
    .tp_basicsize = sizeof(Maker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Maker(cls): called with items, a tuple of cls holding them",
    .tp_new = maker_new,
    .tp_dealloc = (destructor)maker_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Maker, vectorcall),
};

static PyObject *
scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "scan() takes 8 arguments");
        return NULL;
    }
    PyObject *data = args[0];
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    PyObject *frames = args[2];
    PyObject *frame_type = args[3];
    PyObject *send_type = args[4];
    Py_ssize_t max_body = PyLong_AsSsize_t(args[5]);
    Py_ssize_t max_headers = PyLong_AsSsize_t(args[6]);
    Py_ssize_t max_header_bytes = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (!PyBytes_Check(data) || !PyList_Check(frames) || !is_tuple_type(frame_type)
        || (send_type != Py_None && !is_tuple_type(send_type))) {
        PyErr_SetString(PyExc_TypeError,
                        "scan() needs bytes, a list, a tuple type and a tuple type or None");
        return NULL;
    }
    const char *buf = PyBytes_AS_STRING(data);
    Py_ssize_t end = PyBytes_GET_SIZE(data);
    while (pos < end) {
        Py_ssize_t start = pos;
        while (start < end && (buf[start] == '\n' || buf[start] == '\0')) {
            /* heart-beats, EOLs and NULs after a frame's NUL */
            start++;
        }
        if (start >= end) {
            pos = start;
            break;
        }
        /* The head ends at the first blank line; it must hold no CR and no backslash. */
        Py_ssize_t head_end = -1;
        for (Py_ssize_t i = start; i + 1 < end; i++) {
            char c = buf[i];
            if (c == '\r' || c == '\\') {
                goto done;
            }
            if (c == '\n' && buf[i + 1] == '\n') {
                head_end = i;
                break;
            }
        }
        if (head_end < 0) {
            goto done;
        }
        PyObject *command = NULL, *headers = NULL;
        int parsed = parse_head(buf, start, head_end, max_headers, max_header_bytes, &command,
                                &headers);
        if (parsed <= 0) {
            if (parsed < 0) {
                return NULL;
            }
            goto done;
        }
        Py_ssize_t body_start = head_end + 2;
        Py_ssize_t length = content_length(headers, max_body);
        Py_ssize_t body_end;
        if (length == -3) {
            Py_DECREF(command);
            Py_DECREF(headers);
            return NULL;
        }
        if (length >= 0) {
            body_end = body_start + length;
            if (body_end >= end || buf[body_end] != '\0') {
                body_end = -1;
            }
        }
        else if (length == -1) {
            const char *nul = memchr(buf + body_start, '\0', end - body_start);
            body_end = nul ? nul - buf : -1;
            if (body_end - body_start > max_body) {
                body_end = -1;
            }
        }
        else {
            body_end = -1;
        }
        if (body_end < 0) {
            Py_DECREF(command);
            Py_DECREF(headers);
            goto done;
        }
        PyObject *body = PyBytes_FromStringAndSize(buf + body_start, body_end - body_start);
        if (body == NULL) {
            Py_DECREF(command);
            Py_DECREF(headers);
            return NULL;
        }
        PyObject *frame = NULL, *destination = send_destination(send_type, command, headers);
        if (destination != NULL) {
            PyObject *items[] = {destination, headers, body};
            frame = filled((PyTypeObject *)send_type, items, 3);
            Py_DECREF(destination);
        }
        else if (!PyErr_Occurred()) {
            PyObject *items[] = {command, headers, body};
            frame = filled((PyTypeObject *)frame_type, items, 3);
        }
        Py_DECREF(command);
        Py_DECREF(headers);
        Py_DECREF(body);
        if (frame == NULL || PyList_Append(frames, frame) < 0) {
            Py_XDECREF(frame);
            return NULL;
        }
        Py_DECREF(frame);
        pos = body_end + 1;
        continue;
    done:
        pos = start;
        break;
    }
    return PyLong_FromSsize_t(pos);
}

/* The UTF-8 of `text` in *utf8 and *size; 0 if it holds a character that needs escaping
 * in some STOMP version (backslash, CR, LF, colon), -1 on error, 1 if plain. */
static int
plain_utf8(PyObject *text, const char **utf8, Py_ssize_t *size)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "header names and values must be str");
        return -1;
    }
    *utf8 = PyUnicode_AsUTF8AndSize(text, size);
    if (*utf8 == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < *size; i++) {
        char c = (*utf8)[i];
        if (c == '\\' || c == '\n' || c == '\r' || c == ':') {
            return 0;
        }
    }
    return 1;
}

#define PUT(data, size)              \
    do {                             \
        memcpy(at, (data), (size));  \
        at += (size);                \
    } while (0)
#define PUT_TEXT(text) PUT((text), sizeof(text) - 1)

/* At most this many headers are copied in one pass; a message with more (rare) is
 * left to encoder.escaped_message_tail. */
#define MAX_TAIL_HEADERS 64

/* "\ncontent-length:<size>\n\n" into ``out`` (room for 48); returns its length. By hand:
 * snprintf's format parsing was a percent of the server's CPU, once per message. */
static Py_ssize_t
content_length_line(char *out, Py_ssize_t size)
{
    static const char name[] = "\ncontent-length:";
    char digits[24];
    int n = 0;
    size_t value = (size_t)size;
    do {
        digits[n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    memcpy(out, name, sizeof(name) - 1);
    Py_ssize_t at = sizeof(name) - 1;
    while (n)
        out[at++] = digits[--n];
    out[at++] = '\n';
    out[at++] = '\n';
    return at;
}

static PyObject *
message_tail(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "message_tail() takes 6 arguments");
        return NULL;
    }
    PyObject *message_id = args[0], *destination = args[1], *headers = args[2];
    PyObject *exclude = args[3], *body = args[4];
    int redelivered = PyObject_IsTrue(args[5]);
    if (redelivered < 0) {
        return NULL;
    }
    if (!PyUnicode_Check(message_id) || !PyUnicode_Check(destination) || !PyDict_Check(headers)
        || !PyAnySet_Check(exclude) || !PyBytes_Check(body)) {
        PyErr_SetString(PyExc_TypeError, "message_tail() needs str, str, dict, set, bytes");
        return NULL;
    }
    /* First every part's UTF-8 and the whole size, then one allocation. */
    const char *utf8[2 * MAX_TAIL_HEADERS + 2];
    Py_ssize_t sizes[2 * MAX_TAIL_HEADERS + 2];
    int parts = 0, plain;
    if ((plain = plain_utf8(message_id, &utf8[0], &sizes[0])) <= 0
        || (plain = plain_utf8(destination, &utf8[1], &sizes[1])) <= 0) {
        goto not_plain;
    }
    parts = 2;
    Py_ssize_t total = sizes[0] + sizes[1];
    Py_ssize_t pos = 0;
    PyObject *name, *value;
    while (PyDict_Next(headers, &pos, &name, &value)) {
        int excluded = PySet_Contains(exclude, name);
        if (excluded < 0) {
            return NULL;
        }
        if (excluded) {
            continue;
        }
        if (parts == 2 * MAX_TAIL_HEADERS + 2) {
            Py_RETURN_NONE;
        }
        if ((plain = plain_utf8(name, &utf8[parts], &sizes[parts])) <= 0
            || (plain = plain_utf8(value, &utf8[parts + 1], &sizes[parts + 1])) <= 0) {
            goto not_plain;
        }
        total += sizes[parts] + sizes[parts + 1] + 2; /* "\n" before, ":" between */
        parts += 2;
    }
    char length[48];
    Py_ssize_t body_size = PyBytes_GET_SIZE(body);
    Py_ssize_t length_size = content_length_line(length, body_size);
    const char *redelivered_line = redelivered ? "\nredelivered:true" : "\nredelivered:false";
    Py_ssize_t redelivered_size = (Py_ssize_t)strlen(redelivered_line);
    total += sizeof("message-id:") - 1 + redelivered_size + sizeof("\ndestination:") - 1
             + length_size + body_size + 1;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) {
        return NULL;
    }
    char *at = PyBytes_AS_STRING(out);
    PUT_TEXT("message-id:");
    PUT(utf8[0], sizes[0]);
    PUT(redelivered_line, redelivered_size);
    PUT_TEXT("\ndestination:");
    PUT(utf8[1], sizes[1]);
    for (int i = 2; i < parts; i += 2) {
        PUT_TEXT("\n");
        PUT(utf8[i], sizes[i]);
        PUT_TEXT(":");
        PUT(utf8[i + 1], sizes[i + 1]);
    }
    PUT(length, length_size);
    PUT(PyBytes_AS_STRING(body), body_size);
    *at = '\0';
    return out;
not_plain:
    if (plain < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
new_body(PyObject *module, PyObject *arg)
{
    Py_ssize_t size = PyLong_AsSsize_t(arg);
    if (size < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "a body size cannot be negative");
        }
        return NULL;
    }
    return PyBytes_FromStringAndSize(NULL, size);
}

static PyObject *
fill(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "fill(body: bytes, offset: int, data: buffer)");
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    if (offset == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (offset < 0 || offset > size) {
        PyErr_SetString(PyExc_ValueError, "offset outside the body");
        return NULL;
    }
    Py_buffer data;
    if (PyObject_GetBuffer(args[2], &data, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Py_ssize_t copied = data.len < size - offset ? data.len : size - offset;
    memcpy(PyBytes_AS_STRING(args[0]) + offset, data.buf, copied);
    PyBuffer_Release(&data);
    return PyLong_FromSsize_t(copied);
}

/* take_frames(entries, taken, size, budget) -> (size, work)
 *
 * The egress queues' drain (flow/egress_queues.py, EgressQueues.drain), for one queue: moves
 * entries (head, tail, owner, work, item) from the front of the deque `entries` to the list
 * `taken` while `size`, the bytes taken so far, is below `budget` (the whole-message rule:
 * the entry that crosses the budget is taken whole), and returns the new size and the work
 * units of what it moved. An entry that is not such a tuple is left in the deque and is an
 * error (a TypeError: only EgressQueues makes entries). */
static PyObject *
take_frames(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "take_frames(entries: deque, taken: list, size, budget)");
        return NULL;
    }
    PyObject *entries = args[0], *taken = args[1];
    Py_ssize_t size = PyLong_AsSsize_t(args[2]);
    if (size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t budget = PyLong_AsSsize_t(args[3]);
    if (budget == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *popleft = PyObject_GetAttrString(entries, "popleft");
    if (popleft == NULL) {
        return NULL;
    }
    Py_ssize_t work = 0;
    while (size < budget) {
        Py_ssize_t left = PyObject_Size(entries);
        if (left <= 0) {
            if (left < 0) {
                goto error;
            }
            break;
        }
        PyObject *entry = PySequence_GetItem(entries, 0); /* checked before it is taken */
        if (entry == NULL) {
            goto error;
        }
        Py_ssize_t units = -1;
        if (PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == 5
            && PyBytes_Check(PyTuple_GET_ITEM(entry, 0)) && PyBytes_Check(PyTuple_GET_ITEM(entry, 1))
            && PyLong_Check(PyTuple_GET_ITEM(entry, 3))) {
            units = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 3));
        }
        if (units < 0) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "an egress entry is (head, tail, owner, work, item)");
            }
            Py_DECREF(entry);
            goto error;
        }
        size += PyBytes_GET_SIZE(PyTuple_GET_ITEM(entry, 0)) + PyBytes_GET_SIZE(PyTuple_GET_ITEM(entry, 1));
        work += units;
        int appended = PyList_Append(taken, entry);
        Py_DECREF(entry);
        if (appended < 0) {
            goto error;
        }
        PyObject *gone = PyObject_CallNoArgs(popleft);
        if (gone == NULL) {
            goto error;
        }
        Py_DECREF(gone);
    }
    Py_DECREF(popleft);
    return Py_BuildValue("(nn)", size, work);
error:
    Py_DECREF(popleft);
    return NULL;
}

/* frame_parts(entries, parts) -> [(owner, items), ...]
 *
 * What the socket writer writes of drained egress entries (client/egress.py,
 * Egress.write_out): appends each entry's head and tail to `parts`, and returns the runs
 * of consecutive entries of one owner, each with the items of its entries, so that each
 * owner is told once per run what of its was written. */
static PyObject *
frame_parts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "frame_parts(entries: list, parts: list)");
        return NULL;
    }
    PyObject *entries = args[0], *parts = args[1];
    PyObject *runs = PyList_New(0);
    if (runs == NULL) {
        return NULL;
    }
    PyObject *owner = NULL, *items = NULL; /* the current run's, held by `runs` */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); i++) {
        PyObject *entry = PyList_GET_ITEM(entries, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 5) {
            PyErr_SetString(PyExc_TypeError, "an egress entry is (head, tail, owner, work, item)");
            goto error;
        }
        if (PyList_Append(parts, PyTuple_GET_ITEM(entry, 0)) < 0
            || PyList_Append(parts, PyTuple_GET_ITEM(entry, 1)) < 0) {
            goto error;
        }
        PyObject *who = PyTuple_GET_ITEM(entry, 2);
        if (items == NULL || who != owner) {
            items = PyList_New(0);
            if (items == NULL) {
                goto error;
            }
            PyObject *run = PyTuple_Pack(2, who, items);
            Py_DECREF(items);
            if (run == NULL) {
                goto error;
            }
            int appended = PyList_Append(runs, run);
            Py_DECREF(run);
            if (appended < 0) {
                goto error;
            }
            owner = who;
        }
        if (PyList_Append(items, PyTuple_GET_ITEM(entry, 4)) < 0) {
            goto error;
        }
    }
    return runs;
error:
    Py_DECREF(runs);
    return NULL;
}

static PyMethodDef methods[] = {
    {"new_body", (PyCFunction)new_body, METH_O,
     "A bytes object of this size to fill (see the file's comment)."},
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL,
     "Copy data into a body being filled from offset on; returns bytes copied."},
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "Decode the plain, complete frames of a buffer (see the file's comment)."},
    {"message_tail", (PyCFunction)(void (*)(void))message_tail, METH_FASTCALL,
     "A plain MESSAGE tail, or None when a header needs escaping (see the file's comment)."},
    {"frame_parts", (PyCFunction)(void (*)(void))frame_parts, METH_FASTCALL,
     "Heads and tails of drained egress entries, and their owners' runs (see its comment)."},
    {"take_frames", (PyCFunction)(void (*)(void))take_frames, METH_FASTCALL,
     "Move an egress queue's entries to a list up to a byte budget (see its comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fast", "The codec's fast paths, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__fast(void)
{
    content_length_key = PyUnicode_InternFromString("content-length");
    destination_key = PyUnicode_InternFromString("destination");
    if (content_length_key == NULL || destination_key == NULL || PyType_Ready(&maker_type) < 0) {
        return NULL;
    }
    PyObject *made = PyModule_Create(&module);
    if (made == NULL || PyModule_AddObjectRef(made, "Maker", (PyObject *)&maker_type) < 0) {
        Py_XDECREF(made);
        return NULL;
    }
    return made;
}
