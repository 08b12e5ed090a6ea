/*
 * A message property's text as a selector number, in C.
 *
 * number(text) -> int | float | None
 *   The rule of ``values.py``: the whole text written as a JMS numeric literal in decimal,
 *       [+-]? ( D+ | D+ '.' D* E? | '.' D+ E? | D+ E )      E: [eE] [+-]? D+
 *   is an exact number (int) without a point or an exponent, else an approximate one
 *   (float); anything else, and None, is None. D is a decimal digit as Python's ``\d``
 *   and ``int()`` read it (Unicode decimal digits, ``str.isdecimal``).
 *
 * Every selector comparing a header with a number converts it for every message it
 * tests: in Python this call was about 1,800 of a selective queue's 60,000 instructions
 * per message (bench/README.md, "What was tried").
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The position after the run of decimal digits starting at i. */
static Py_ssize_t
digits(int kind, const void *data, Py_ssize_t i, Py_ssize_t n)
{
    while (i < n && Py_UNICODE_ISDECIMAL(PyUnicode_READ(kind, data, i)))
        i++;
    return i;
}

static PyObject *
number(PyObject *module, PyObject *text)
{
    if (text == Py_None)
        Py_RETURN_NONE;
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "number() takes a str or None, not %.100s",
                     Py_TYPE(text)->tp_name);
        return NULL;
    }
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_ssize_t i = 0;
    if (i < n) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c == '+' || c == '-')
            i++;
    }
    Py_ssize_t start = i;
    i = digits(kind, data, i, n);
    Py_ssize_t whole = i - start; /* digits before a point */
    if (i == n) {
        if (whole == 0)
            Py_RETURN_NONE;
        return PyLong_FromUnicodeObject(text, 10);
    }
    Py_ssize_t fraction = 0;
    if (PyUnicode_READ(kind, data, i) == '.') {
        Py_ssize_t after = i + 1;
        i = digits(kind, data, after, n);
        fraction = i - after;
        if (whole == 0 && fraction == 0)
            Py_RETURN_NONE;
    }
    else if (whole == 0)
        Py_RETURN_NONE;
    if (i < n) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c != 'e' && c != 'E')
            Py_RETURN_NONE;
        i++;
        if (i < n) {
            c = PyUnicode_READ(kind, data, i);
            if (c == '+' || c == '-')
                i++;
        }
        Py_ssize_t exponent = i;
        i = digits(kind, data, i, n);
        if (i == exponent || i != n)
            Py_RETURN_NONE;
    }
    return PyFloat_FromString(text);
}

static PyMethodDef methods[] = {
    {"number", (PyCFunction)number, METH_O,
     "number(text) -> int | float | None: a property's text as a selector number."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_number", "A selector's numbers, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__number(void)
{
    return PyModule_Create(&module);
}
