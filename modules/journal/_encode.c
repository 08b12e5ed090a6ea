/*
 * The journal's encoder: hook records -> JSON Lines, in C.
 *
 * A hook formats its record at once, into its journal's Recorder, while the message
 * is still in the processor's cache: measured, encoding records a tenth of a second
 * later, from a list of tuples that kept the messages alive, cost several times as much
 * (every field a cache miss). The journal's writer thread then only writes bytes, with
 * the interpreter lock released.
 *
 * compile(plans) -> Plans
 *   plans: tuple indexed by record kind of (head, expand, dest_op, ops) where
 *     head    bytes written first: '{"v":1,"event":"NAME"' and any constant fields
 *     expand  the record slot holding a sequence: one line per element; -1: one line
 *     dest_op the op giving the line's destination (the per-destination switch), or -1
 *     ops     tuple of (key, slot, path, type):
 *             key   bytes: ',"name":'
 *             slot  the record slot the value starts from (-1: the expanded element)
 *             path  tuple of attribute names (str) and tuple indexes (int)
 *             type  STR 0, INT 1, BOOL 2, MS 3 (the record's time, whole ms), LEN 4
 *   A record is (kind, ts, slot2, slot3, ...): slot 1 is its time.
 *
 * Recorder(plans, default_on, exceptions)
 *   .add(kind, slot2, slot3, ...)  the record of ``kind`` at the time now
 *   .take() -> bytes               what was added since the last take
 *   .lines                         lines added since the last take
 *
 * encode(plans, records, default_on, exceptions) -> bytes
 *   records: a list of whole records (kind, ts, ...), ts in seconds (float) or ms (int).
 *
 * index_lines(data, base) -> bytes
 *   The index entries of the lines of ``data`` (whole JSON Lines, written at offset ``base``
 *   of their file) that name a message: one 8-byte little-endian entry per line, the line's
 *   offset in its file (40 bits) and the key of its message id (24 bits, the top). Runs
 *   without the interpreter lock. index_key(message_id) -> the key a lookup searches for.
 *   sort_index(entries) -> the entries sorted by key, then offset (as 64-bit numbers), also
 *   without the interpreter lock.
 *
 * A value that is None leaves its field out. A line is written when default_on differs
 * from whether its destination is in the frozenset ``exceptions``; exceptions None: every
 * line is written. An attribute that is a __slots__ member is read at its offset once its
 * type is known (as the interpreter's own attribute caches do); any other through
 * PyObject_GetAttr. Most values repeat from one line to the next (the destination, the
 * subscriptions of a topic, the millisecond): each op remembers, for the last few objects
 * it read (by the record's object, and by the value read), where it wrote them in the
 * current output, and copies those bytes when it meets one again.
 */
#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

enum { V_STR = 0, V_INT = 1, V_BOOL = 2, V_MS = 3, V_LEN = 4 };
#define MAX_STEPS 4
#define MAX_SLOTS 16
#define TS_SLOT 1

/* -- output buffers ---------------------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
    uint64_t generation; /* new whenever the buffer is emptied: older memos do not apply */
} Buffer;

static uint64_t generations = 0;
static Buffer *out = NULL; /* the buffer being written (the interpreter lock is held) */

static void
buffer_reset(Buffer *buffer)
{
    buffer->len = 0;
    buffer->generation = ++generations;
}

static int
reserve(Py_ssize_t more)
{
    if (out->len + more <= out->cap)
        return 0;
    Py_ssize_t cap = out->cap ? out->cap : 65536;
    while (cap < out->len + more)
        cap *= 2;
    char *data = PyMem_Realloc(out->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    out->data = data;
    out->cap = cap;
    return 0;
}

static inline int
put(const char *s, Py_ssize_t n)
{
    if (reserve(n) < 0)
        return -1;
    memcpy(out->data + out->len, s, n);
    out->len += n;
    return 0;
}

static const char DIGIT_PAIRS[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static int
put_long(long long value)
{
    char digits[24];
    char *end = digits + sizeof digits, *p = end;
    unsigned long long n = value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    while (n >= 100) {
        unsigned pair = (unsigned)(n % 100) * 2;
        n /= 100;
        *--p = DIGIT_PAIRS[pair + 1];
        *--p = DIGIT_PAIRS[pair];
    }
    if (n >= 10) {
        *--p = DIGIT_PAIRS[n * 2 + 1];
        *--p = DIGIT_PAIRS[n * 2];
    }
    else {
        *--p = (char)('0' + n);
    }
    if (value < 0)
        *--p = '-';
    return put(p, end - p);
}

static const char HEX[] = "0123456789abcdef";

/* The bytes a JSON string must escape: control characters, quote and backslash. */
static unsigned char ESCAPED[256];

/* A JSON string: quotes, backslashes and control characters escaped, UTF-8 kept. */
static int
put_string(const char *s, Py_ssize_t n)
{
    if (reserve(n * 6 + 2) < 0)
        return -1;
    char *o = out->data + out->len;
    *o++ = '"';
    Py_ssize_t plain = 0;
    while (plain < n && !ESCAPED[(unsigned char)s[plain]])
        plain++;
    memcpy(o, s, plain);
    o += plain;
    for (Py_ssize_t i = plain; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!ESCAPED[c]) {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = HEX[c >> 4];
            *o++ = HEX[c & 15];
        }
    }
    *o++ = '"';
    out->len = o - out->data;
    return 0;
}

static int
put_str_value(PyObject *value)
{
    if (!PyUnicode_Check(value)) {
        PyErr_Format(PyExc_TypeError, "journal: expected str, got %.100s",
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    if (PyUnicode_IS_COMPACT_ASCII(value))
        return put_string((const char *)PyUnicode_DATA(value), PyUnicode_GET_LENGTH(value));
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(value, &n);
    if (s != NULL)
        return put_string(s, n);
    /* Not encodable as UTF-8 (lone surrogates): written with backslash escapes. */
    PyErr_Clear();
    PyObject *encoded = PyUnicode_AsEncodedString(value, "utf-8", "backslashreplace");
    if (encoded == NULL)
        return -1;
    int result = put_string(PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded));
    Py_DECREF(encoded);
    return result;
}

/* -- compiled plans ---------------------------------------------------------------------- */

typedef struct {
    PyObject *name;      /* attribute name (str), or NULL for a tuple index */
    Py_ssize_t index;
    PyTypeObject *type;  /* the type last seen here (a strong reference) */
    Py_ssize_t offset;   /* its __slots__ member's offset, or 0 */
} Step;

/* Where an op wrote ',"key":value' in the output of ``generation``, [offset, offset +
 * len), for ``key`` (a record slot's object, or a value read; strong references both). */
typedef struct {
    PyObject *key;
    PyObject *value;
    uint64_t generation;
    Py_ssize_t offset, len;
} MemoEntry;

#define MEMO_SLOTS 8 /* 2 ** 3: entry_for keeps the top 3 bits of its hash */

typedef struct {
    MemoEntry by_base[MEMO_SLOTS]; /* record-level ops: the record's object */
    MemoEntry by_value[MEMO_SLOTS];
    uint64_t ms_generation; /* the ms op: the last whole millisecond */
    long long ms;
    Py_ssize_t ms_offset, ms_len;
} Memo;

typedef struct {
    const char *key;
    Py_ssize_t key_len;
    Py_ssize_t slot;
    int type;
    int steps;
    Step step[MAX_STEPS];
    Memo memo;
} Op;

typedef struct {
    const char *head;
    Py_ssize_t head_len;
    Py_ssize_t expand;
    Py_ssize_t dest_op;
    Py_ssize_t count;
    Op *ops;
} Plan;

typedef struct {
    PyObject_HEAD
    PyObject *source; /* the plans tuple: keeps the keys, heads and names alive */
    Py_ssize_t count;
    Plan *plans;
} PlansObject;

static inline MemoEntry *
entry_for(MemoEntry *entries, PyObject *key)
{
    /* Fibonacci hashing: objects allocated a fixed size apart still spread. */
    return &entries[((uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ULL) >> 61];
}

static void
forget_entry(MemoEntry *entry)
{
    Py_CLEAR(entry->key);
    Py_CLEAR(entry->value);
}

/* Forget what the plan's ops wrote in the current output from ``from`` on (a line taken
 * back). */
static void
forget_from(Plan *plan, Py_ssize_t from)
{
    for (Py_ssize_t o = 0; o < plan->count; o++) {
        Memo *memo = &plan->ops[o].memo;
        for (int e = 0; e < MEMO_SLOTS; e++) {
            MemoEntry *b = &memo->by_base[e], *v = &memo->by_value[e];
            if (b->key != NULL && b->generation == out->generation && b->offset >= from)
                forget_entry(b);
            if (v->key != NULL && v->generation == out->generation && v->offset >= from)
                forget_entry(v);
        }
        if (memo->ms_generation == out->generation && memo->ms_offset >= from)
            memo->ms_generation = 0;
    }
}

static void
plans_dealloc(PlansObject *self)
{
    for (Py_ssize_t p = 0; p < self->count; p++) {
        Plan *plan = &self->plans[p];
        for (Py_ssize_t o = 0; o < plan->count; o++) {
            Op *op = &plan->ops[o];
            for (int e = 0; e < MEMO_SLOTS; e++) {
                forget_entry(&op->memo.by_base[e]);
                forget_entry(&op->memo.by_value[e]);
            }
            for (int s = 0; s < op->steps; s++)
                Py_XDECREF(op->step[s].type);
        }
        PyMem_Free(plan->ops);
    }
    PyMem_Free(self->plans);
    Py_XDECREF(self->source);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject PlansType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wiremq.modules.journal._encode.Plans",
    .tp_basicsize = sizeof(PlansObject),
    .tp_dealloc = (destructor)plans_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Compiled encoding plans (see the file's comment).",
};

static int
bad_plan(const char *what)
{
    PyErr_Format(PyExc_ValueError, "journal plan: %s", what);
    return -1;
}

static int
compile_op(Op *op, PyObject *spec)
{
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 4)
        return bad_plan("an op is (key, slot, path, type)");
    PyObject *key = PyTuple_GET_ITEM(spec, 0), *path = PyTuple_GET_ITEM(spec, 2);
    if (!PyBytes_Check(key) || !PyTuple_Check(path))
        return bad_plan("an op's key is bytes and its path a tuple");
    op->key = PyBytes_AS_STRING(key);
    op->key_len = PyBytes_GET_SIZE(key);
    op->slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 1));
    op->type = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 3));
    if (PyErr_Occurred())
        return -1;
    if (op->type < V_STR || op->type > V_LEN)
        return bad_plan("unknown value type");
    if (op->slot >= MAX_SLOTS)
        return bad_plan("slot out of range");
    if ((op->type == V_MS) != (op->slot == TS_SLOT))
        return bad_plan("the record's time, and only it, is in slot 1");
    op->steps = (int)PyTuple_GET_SIZE(path);
    if (op->steps > MAX_STEPS)
        return bad_plan("path too long");
    for (int s = 0; s < op->steps; s++) {
        PyObject *step = PyTuple_GET_ITEM(path, s);
        Step *st = &op->step[s];
        if (PyUnicode_Check(step)) {
            st->name = step;
        }
        else {
            st->index = PyLong_AsSsize_t(step);
            if (st->index == -1 && PyErr_Occurred())
                return -1;
        }
    }
    return 0;
}

static PyObject *
compile_plans(PyObject *module, PyObject *source)
{
    if (!PyTuple_Check(source))
        return PyErr_Format(PyExc_TypeError, "compile: plans must be a tuple");
    PlansObject *self = PyObject_New(PlansObject, &PlansType);
    if (self == NULL)
        return NULL;
    Py_INCREF(source);
    self->source = source;
    self->count = PyTuple_GET_SIZE(source);
    self->plans = PyMem_Calloc(self->count ? self->count : 1, sizeof(Plan));
    if (self->plans == NULL) {
        self->count = 0;
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t p = 0; p < self->count; p++) {
        PyObject *spec = PyTuple_GET_ITEM(source, p);
        Plan *plan = &self->plans[p];
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 4 ||
            !PyBytes_Check(PyTuple_GET_ITEM(spec, 0)) || !PyTuple_Check(PyTuple_GET_ITEM(spec, 3))) {
            bad_plan("a plan is (head, expand, dest_op, ops)");
            goto fail;
        }
        PyObject *head = PyTuple_GET_ITEM(spec, 0), *ops = PyTuple_GET_ITEM(spec, 3);
        plan->head = PyBytes_AS_STRING(head);
        plan->head_len = PyBytes_GET_SIZE(head);
        plan->expand = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 1));
        plan->dest_op = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 2));
        if (PyErr_Occurred())
            goto fail;
        if (plan->expand >= MAX_SLOTS) {
            bad_plan("expanded slot out of range");
            goto fail;
        }
        plan->count = PyTuple_GET_SIZE(ops);
        plan->ops = PyMem_Calloc(plan->count ? plan->count : 1, sizeof(Op));
        if (plan->ops == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t o = 0; o < plan->count; o++)
            if (compile_op(&plan->ops[o], PyTuple_GET_ITEM(ops, o)) < 0)
                goto fail;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* -- reading values ---------------------------------------------------------------------- */

/* obj.<step> as a new reference, or NULL with an error. */
static PyObject *
take_step(PyObject *obj, Step *step)
{
    if (step->name == NULL) {
        if (PyTuple_CheckExact(obj)) {
            if (step->index < 0 || step->index >= PyTuple_GET_SIZE(obj)) {
                PyErr_SetString(PyExc_IndexError, "journal: tuple index out of range");
                return NULL;
            }
            PyObject *item = PyTuple_GET_ITEM(obj, step->index);
            Py_INCREF(item);
            return item;
        }
        return PySequence_GetItem(obj, step->index);
    }
    PyTypeObject *type = Py_TYPE(obj);
    if (type != step->type) {
        Py_INCREF(type);
        Py_XSETREF(step->type, type);
        step->offset = 0;
        PyObject *descr = _PyType_Lookup(type, step->name); /* borrowed */
        if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX && !(member->flags & READ_RESTRICTED))
                step->offset = member->offset;
        }
    }
    if (step->offset) {
        PyObject *value = *(PyObject **)((char *)obj + step->offset);
        if (value != NULL) {
            Py_INCREF(value);
            return value;
        }
    }
    return PyObject_GetAttr(obj, step->name);
}

static PyObject *
follow(PyObject *base, Op *op)
{
    Py_INCREF(base);
    PyObject *value = base;
    for (int s = 0; s < op->steps && value != Py_None; s++) {
        PyObject *next = take_step(value, &op->step[s]);
        Py_DECREF(value);
        if (next == NULL)
            return NULL;
        value = next;
    }
    return value;
}

/* Copy bytes written before in the current output. */
static int
repeat(Py_ssize_t offset, Py_ssize_t len)
{
    if (reserve(len) < 0)
        return -1;
    memcpy(out->data + out->len, out->data + offset, len);
    out->len += len;
    return 0;
}

static void
remember(MemoEntry *entry, PyObject *key, PyObject *value, Py_ssize_t offset, Py_ssize_t len)
{
    Py_INCREF(key);
    Py_INCREF(value);
    forget_entry(entry);
    entry->key = key;
    entry->value = value;
    entry->generation = out->generation;
    entry->offset = offset;
    entry->len = len;
}

static inline int
remembers(MemoEntry *entry, PyObject *key)
{
    return entry->key == key && entry->generation == out->generation;
}

/* ',"key":value' for a value that is not None. */
static int
put_value(Op *op, PyObject *value)
{
    if (put(op->key, op->key_len) < 0)
        return -1;
    switch (op->type) {
    case V_STR:
        return put_str_value(value);
    case V_INT: {
        long long n = PyLong_AsLongLong(value);
        if (n == -1 && PyErr_Occurred())
            return -1;
        return put_long(n);
    }
    case V_BOOL:
        if (value == Py_True)
            return put("true", 4);
        if (value == Py_False)
            return put("false", 5);
        switch (PyObject_IsTrue(value)) {
        case 1: return put("true", 4);
        case 0: return put("false", 5);
        default: return -1;
        }
    default: { /* V_LEN (V_MS is put_op's) */
        Py_ssize_t n = PyObject_Length(value);
        if (n < 0)
            return -1;
        return put_long(n);
    }
    }
}

/* The record's time, whole ms. */
static int
put_ms(Op *op, long long ms)
{
    Memo *memo = &op->memo;
    if (memo->ms_generation == out->generation && memo->ms == ms)
        return repeat(memo->ms_offset, memo->ms_len);
    Py_ssize_t offset = out->len;
    if (put(op->key, op->key_len) < 0 || put_long(ms) < 0)
        return -1;
    memo->ms_generation = out->generation;
    memo->ms = ms;
    memo->ms_offset = offset;
    memo->ms_len = out->len - offset;
    return 0;
}

/* One op of a line, from ``base``: the bytes written before when it meets the same record
 * object or value again, else the value written and remembered. Sets *read to the value
 * read (a new reference, or NULL for None and the time). */
static int
put_op(Op *op, PyObject *base, PyObject **read)
{
    Memo *memo = &op->memo;
    MemoEntry *by_base = NULL;
    *read = NULL;
    if (op->slot >= 0) {
        by_base = entry_for(memo->by_base, base);
        if (remembers(by_base, base)) {
            Py_INCREF(by_base->value);
            *read = by_base->value;
            return repeat(by_base->offset, by_base->len);
        }
    }
    PyObject *value = follow(base, op);
    if (value == NULL)
        return -1;
    *read = value;
    if (value == Py_None)
        return 0;
    MemoEntry *by_value = entry_for(memo->by_value, value);
    Py_ssize_t offset, len;
    if (remembers(by_value, value)) {
        offset = by_value->offset;
        len = by_value->len;
        if (repeat(offset, len) < 0)
            return -1;
    }
    else {
        offset = out->len;
        if (put_value(op, value) < 0)
            return -1;
        len = out->len - offset;
        remember(by_value, value, value, offset, len);
    }
    if (by_base != NULL)
        remember(by_base, base, value, offset, len);
    return 0;
}

/* The switch's filter: exceptions (NULL: every line is written) and the default. */
typedef struct {
    PyObject *exceptions;
    int default_on;
} Switch;

/* One line of a record: its slots (slot 1, the time, is ``ms``) and ``item``, the expanded
 * element (or NULL). Returns 1 when written, 0 when its destination is switched off, -1. */
static int
put_line(PyObject *const *slots, Py_ssize_t nslots, long long ms, PyObject *item, Plan *plan,
         Switch *filter)
{
    Py_ssize_t start = out->len;
    int keep = 1;
    if (put(plan->head, plan->head_len) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < plan->count; i++) {
        Op *op = &plan->ops[i];
        if (op->type == V_MS) {
            if (put_ms(op, ms) < 0)
                return -1;
            continue;
        }
        PyObject *base;
        if (op->slot < 0)
            base = item;
        else if (op->slot < nslots && op->slot != TS_SLOT)
            base = slots[op->slot];
        else {
            PyErr_Format(PyExc_IndexError, "journal: record has no slot %zd", op->slot);
            return -1;
        }
        if (base == NULL) {
            PyErr_SetString(PyExc_ValueError, "journal: element slot used without expansion");
            return -1;
        }
        PyObject *value;
        int failed = put_op(op, base, &value);
        if (!failed && filter->exceptions != NULL && i == plan->dest_op) {
            int listed = value != NULL && value != Py_None
                             ? PySet_Contains(filter->exceptions, value)
                             : 0;
            if (listed < 0)
                failed = -1;
            keep = filter->default_on != listed;
        }
        Py_XDECREF(value);
        if (failed < 0)
            return -1;
    }
    if (!keep) {
        forget_from(plan, start);
        out->len = start;
        return 0;
    }
    return put("}\n", 2) < 0 ? -1 : 1;
}

/* The lines of one record (slots[0] its kind); returns how many were written, or -1. */
static Py_ssize_t
put_record(PlansObject *plans, PyObject *const *slots, Py_ssize_t nslots, long long ms,
           Switch *filter)
{
    Py_ssize_t kind = PyLong_AsSsize_t(slots[0]);
    if (kind < 0 || kind >= plans->count) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "journal: unknown record kind %zd", kind);
        return -1;
    }
    Plan *plan = &plans->plans[kind];
    if (plan->expand < 0)
        return put_line(slots, nslots, ms, NULL, plan, filter);
    if (plan->expand >= nslots || plan->expand == TS_SLOT) {
        PyErr_Format(PyExc_IndexError, "journal: record has no slot %zd", plan->expand);
        return -1;
    }
    PyObject *items = PySequence_Fast(slots[plan->expand],
                                      "journal: the expanded slot must be a sequence");
    if (items == NULL)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items), written = 0;
    PyObject **each = PySequence_Fast_ITEMS(items);
    for (Py_ssize_t i = 0; i < count; i++) {
        int line = put_line(slots, nslots, ms, each[i], plan, filter);
        if (line < 0) {
            Py_DECREF(items);
            return -1;
        }
        written += line;
    }
    Py_DECREF(items);
    return written;
}

static int
read_switch(PyObject *default_on, PyObject *exceptions, Switch *filter)
{
    filter->default_on = PyObject_IsTrue(default_on);
    if (filter->default_on < 0)
        return -1;
    if (exceptions == Py_None) {
        filter->exceptions = NULL;
        return 0;
    }
    if (!PyFrozenSet_Check(exceptions)) {
        PyErr_SetString(PyExc_TypeError, "journal: exceptions must be a frozenset or None");
        return -1;
    }
    filter->exceptions = exceptions;
    return 0;
}

static long long
whole_ms(PyObject *value)
{
    if (PyFloat_CheckExact(value))
        return (long long)(PyFloat_AS_DOUBLE(value) * 1000.0);
    return PyLong_AsLongLong(value);
}

/* -- encode: a batch of whole records ------------------------------------------------------ */

#define KEEP_BYTES (16 << 20) /* a batch buffer grown past this is given back after use */
static Buffer batch = {NULL, 0, 0, 0};

static PyObject *
encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Switch filter;
    if (nargs != 4 || !Py_IS_TYPE(args[0], &PlansType) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "encode(plans: Plans, records: list, default_on, "
                                         "exceptions: frozenset | None)");
        return NULL;
    }
    if (read_switch(args[2], args[3], &filter) < 0)
        return NULL;
    PlansObject *plans = (PlansObject *)args[0];
    PyObject *records = args[1], *result = NULL;
    Buffer *previous = out;
    out = &batch;
    buffer_reset(out);
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(records); r++) {
        PyObject *record = PyList_GET_ITEM(records, r);
        if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) < 2 ||
            PyTuple_GET_SIZE(record) > MAX_SLOTS) {
            PyErr_SetString(PyExc_TypeError, "encode: a record is a tuple (kind, ts, ...)");
            goto done;
        }
        long long ms = whole_ms(PyTuple_GET_ITEM(record, TS_SLOT));
        if (ms == -1 && PyErr_Occurred())
            goto done;
        if (put_record(plans, &PyTuple_GET_ITEM(record, 0), PyTuple_GET_SIZE(record), ms,
                       &filter) < 0)
            goto done;
    }
    result = PyBytes_FromStringAndSize(out->data ? out->data : "", out->len);
done:
    buffer_reset(out);
    if (out->cap > KEEP_BYTES) {
        PyMem_Free(out->data);
        out->data = NULL;
        out->cap = 0;
    }
    out = previous;
    return result;
}

/* -- Recorder: records formatted as they are added ------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PlansObject *plans;
    PyObject *exceptions; /* NULL: every line */
    int default_on;
    Buffer buffer;
    Py_ssize_t lines;
} RecorderObject;

static long long
now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static PyObject *
recorder_add(RecorderObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* args: (kind, slot2, slot3, ...): the record's slots with its time, now, as slot 1 */
    PyObject *slots[MAX_SLOTS];
    if (nargs < 1 || nargs + 1 > MAX_SLOTS) {
        PyErr_SetString(PyExc_TypeError, "add(kind, *slots)");
        return NULL;
    }
    slots[0] = args[0];
    slots[TS_SLOT] = NULL;
    memcpy(slots + 2, args + 1, (nargs - 1) * sizeof(PyObject *));
    Switch filter = {self->exceptions, self->default_on};
    Buffer *previous = out;
    out = &self->buffer;
    Py_ssize_t start = out->len;
    Py_ssize_t lines = put_record(self->plans, slots, nargs + 1, now_ms(), &filter);
    if (lines < 0) {
        out->len = start; /* nothing of a record that failed half-way, */
        out->generation = ++generations; /* nor of what its ops remembered */
    }
    else
        self->lines += lines;
    out = previous;
    if (lines < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
recorder_take(RecorderObject *self, PyObject *unused)
{
    PyObject *data = PyBytes_FromStringAndSize(self->buffer.data ? self->buffer.data : "",
                                               self->buffer.len);
    if (data == NULL)
        return NULL;
    buffer_reset(&self->buffer);
    self->lines = 0;
    if (self->buffer.cap > KEEP_BYTES) {
        PyMem_Free(self->buffer.data);
        self->buffer.data = NULL;
        self->buffer.cap = 0;
    }
    return data;
}

static PyObject *
recorder_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *plans, *default_on, *exceptions;
    Switch filter;
    if (!PyArg_ParseTuple(args, "O!OO:Recorder", &PlansType, &plans, &default_on, &exceptions))
        return NULL;
    if (read_switch(default_on, exceptions, &filter) < 0)
        return NULL;
    RecorderObject *self = (RecorderObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    Py_INCREF(plans);
    self->plans = (PlansObject *)plans;
    Py_XINCREF(filter.exceptions);
    self->exceptions = filter.exceptions;
    self->default_on = filter.default_on;
    buffer_reset(&self->buffer);
    return (PyObject *)self;
}

static void
recorder_dealloc(RecorderObject *self)
{
    PyMem_Free(self->buffer.data);
    Py_XDECREF(self->plans);
    Py_XDECREF(self->exceptions);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef recorder_methods[] = {
    {"add", (PyCFunction)(void (*)(void))recorder_add, METH_FASTCALL,
     "add(kind, *slots): the record of kind, at the time now."},
    {"take", (PyCFunction)recorder_take, METH_NOARGS,
     "The bytes added since the last take."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef recorder_members[] = {
    {"lines", T_PYSSIZET, offsetof(RecorderObject, lines), READONLY,
     "Lines added since the last take."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wiremq.modules.journal._encode.Recorder",
    .tp_basicsize = sizeof(RecorderObject),
    .tp_dealloc = (destructor)recorder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Recorder(plans, default_on, exceptions): records formatted as they come.",
    .tp_methods = recorder_methods,
    .tp_members = recorder_members,
    .tp_new = recorder_new,
};


/* -- the index by message id ---------------------------------------------------------------- */

#define ID_FIELD "\"message_id\":\""
#define ID_FIELD_LEN (sizeof ID_FIELD - 1)
#define KEY_BITS 24
#define OFFSET_BITS 40

/* The key of a message id as written (its JSON string's bytes between the quotes): 64-bit
 * FNV-1a folded to 24 bits. */
static uint32_t
id_key(const unsigned char *s, Py_ssize_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    h ^= h >> 32;
    return (uint32_t)((h ^ (h >> 24)) & ((1u << KEY_BITS) - 1));
}

static void
put_entry(unsigned char *o, unsigned long long offset, uint32_t key)
{
    uint64_t entry = (offset & ((1ULL << OFFSET_BITS) - 1)) | ((uint64_t)key << OFFSET_BITS);
    for (int b = 0; b < 8; b++)
        o[b] = (unsigned char)(entry >> (8 * b));
}

/* The fewest bytes a line that names a message takes: {"v":1,"event":"","message_id":""}\n */
#define LINE_WITH_ID_MIN 40

/* Entries of ``data``'s whole lines into ``o`` (room for n / LINE_WITH_ID_MIN + 1); returns
 * how many. One search for the field over the whole buffer, then the line around it. */
static Py_ssize_t
scan_lines(const unsigned char *data, Py_ssize_t n, unsigned long long base, unsigned char *o)
{
    Py_ssize_t count = 0, at = 0;
    for (;;) {
        const unsigned char *field = memmem(data + at, n - at, ID_FIELD, ID_FIELD_LEN);
        if (field == NULL)
            return count;
        const unsigned char *before = memrchr(data + at, '\n', field - (data + at));
        Py_ssize_t line = before ? before - data + 1 : at;
        const unsigned char *value = field + ID_FIELD_LEN, *end = data + n, *p = value;
        while (p < end && *p != '"' && *p != '\n')
            p += (*p == '\\') ? 2 : 1;
        const unsigned char *stop = p < end ? memchr(p, '\n', end - p) : NULL;
        if (stop == NULL) /* a line not whole yet */
            return count;
        if (*p == '"') {
            put_entry(o + 8 * count, base + (unsigned long long)line, id_key(value, p - value));
            count++;
        }
        at = stop - data + 1;
    }
}

static PyObject *
index_lines(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "index_lines(data, base)");
        return NULL;
    }
    unsigned long long base = PyLong_AsUnsignedLongLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    unsigned char *entries = PyMem_RawMalloc(8 * (view.len / LINE_WITH_ID_MIN + 1));
    if (entries == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    Py_ssize_t count;
    Py_BEGIN_ALLOW_THREADS
    count = scan_lines(view.buf, view.len, base, entries);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *result = PyBytes_FromStringAndSize((const char *)entries, 8 * count);
    PyMem_RawFree(entries);
    return result;
}

#define DIGIT_BITS 11
#define DIGITS (1 << DIGIT_BITS)

/* Sort ``values`` (``spare``: room for as many) by a least-significant-digit radix sort:
 * a few linear passes where qsort's comparisons through a callback took a fifth of the
 * journal thread's time. A pass whose digit is the same in every value is skipped (the
 * offsets' high bits, within a file of some megabytes). */
static void
radix_sort(uint64_t *values, uint64_t *spare, Py_ssize_t count)
{
    Py_ssize_t counts[DIGITS];
    uint64_t *from = values, *to = spare;
    for (int shift = 0; shift < 64; shift += DIGIT_BITS) {
        memset(counts, 0, sizeof counts);
        for (Py_ssize_t i = 0; i < count; i++)
            counts[(from[i] >> shift) & (DIGITS - 1)]++;
        if (count == 0 || counts[(from[0] >> shift) & (DIGITS - 1)] == count)
            continue;
        Py_ssize_t at = 0;
        for (int d = 0; d < DIGITS; d++) {
            Py_ssize_t n = counts[d];
            counts[d] = at;
            at += n;
        }
        for (Py_ssize_t i = 0; i < count; i++)
            to[counts[(from[i] >> shift) & (DIGITS - 1)]++] = from[i];
        uint64_t *swap = from;
        from = to;
        to = swap;
    }
    if (from != values)
        memcpy(values, from, 8 * count);
}

static PyObject *
sort_index(PyObject *module, PyObject *entries)
{
    Py_buffer view;
    if (PyObject_GetBuffer(entries, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t count = view.len / 8;
    uint64_t *values = PyMem_RawMalloc(count ? 16 * count : 1); /* and the sort's spare */
    if (values == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    const unsigned char *in = view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t v = 0;
        for (int b = 7; b >= 0; b--)
            v = (v << 8) | in[8 * i + b];
        values[i] = v;
    }
    radix_sort(values, values + count, count);
    for (Py_ssize_t i = 0; i < count; i++) /* back to little-endian bytes, in place */
        put_entry((unsigned char *)&values[i], values[i] & ((1ULL << OFFSET_BITS) - 1),
                  (uint32_t)(values[i] >> OFFSET_BITS));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *result = PyBytes_FromStringAndSize((const char *)values, 8 * count);
    PyMem_RawFree(values);
    return result;
}

static PyObject *
index_key(PyObject *module, PyObject *message_id)
{
    /* The id as the encoder writes it, quotes and all, then the bytes between them. */
    Buffer scratch = {NULL, 0, 0, 0};
    Buffer *previous = out;
    out = &scratch;
    int failed = put_str_value(message_id);
    out = previous;
    if (failed < 0) {
        PyMem_Free(scratch.data);
        return NULL;
    }
    uint32_t key = id_key((const unsigned char *)scratch.data + 1, scratch.len - 2);
    PyMem_Free(scratch.data);
    return PyLong_FromUnsignedLong(key);
}

static PyMethodDef methods[] = {
    {"compile", (PyCFunction)compile_plans, METH_O,
     "Compile encoding plans (see the file's comment)."},
    {"encode", (PyCFunction)(void (*)(void))encode, METH_FASTCALL,
     "A batch of whole records -> JSON Lines bytes (see the file's comment)."},
    {"index_lines", (PyCFunction)(void (*)(void))index_lines, METH_FASTCALL,
     "index_lines(data, base) -> the index entries of data's lines (see the file's comment)."},
    {"index_key", (PyCFunction)index_key, METH_O,
     "index_key(message_id) -> the 24-bit key its index entries carry."},
    {"sort_index", (PyCFunction)sort_index, METH_O,
     "sort_index(entries) -> the index entries sorted by key, then offset."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_encode", "The audit journal's encoder, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__encode(void)
{
    for (int c = 0; c < 0x20; c++)
        ESCAPED[c] = 1;
    ESCAPED['"'] = ESCAPED['\\'] = 1;
    if (PyType_Ready(&PlansType) < 0 || PyType_Ready(&RecorderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RecorderType);
    if (PyModule_AddObject(m, "Recorder", (PyObject *)&RecorderType) < 0) {
        Py_DECREF(&RecorderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
