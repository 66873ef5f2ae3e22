/* A logjam body in one C pass: its JSON (decompressed) to the msgpack record the listener stores, as
 * orjson.loads + msgpack's Packer make it in servers/logjam_ingest.py (the reference), byte for byte, with
 * `started_at` and `started_ms` picked out for the event time, without the GIL.
 *
 * pack_body answers None whenever the Python path must decide: anything the transcoder (_jsonpack.h) does
 * not take, which includes every body orjson refuses, duplicate keys and nesting past orjson's 1024 levels.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_jsonpack.h"

#define MAX_BODY_DEPTH 1024 /* orjson's limit */

/* The Python value of a msgpack number written by _jsonpack.h, or None for anything else. */
static PyObject *number_at(const unsigned char *p, size_t n) {
    if (n == 0)
        return Py_NewRef(Py_None);
    unsigned char b = p[0];
    uint64_t v = 0;
    for (size_t i = 1; i < n && i < 9; i++)
        v = (v << 8) | p[i];
    if (b <= 0x7f)
        return PyLong_FromLong(b);
    if (b >= 0xe0)
        return PyLong_FromLong((int8_t)b);
    switch (b) {
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        return PyLong_FromUnsignedLongLong(v);
    case 0xd0: return PyLong_FromLong((int8_t)v);
    case 0xd1: return PyLong_FromLong((int16_t)v);
    case 0xd2: return PyLong_FromLong((int32_t)v);
    case 0xd3: return PyLong_FromLongLong((int64_t)v);
    case 0xcb: {
        double d;
        memcpy(&d, &v, 8);
        return PyFloat_FromDouble(d);
    }
    default:
        return Py_NewRef(Py_None);
    }
}

/* The str at p (a msgpack str written by _jsonpack.h: valid UTF-8), or None for anything else. */
static PyObject *str_at(const unsigned char *p, size_t n) {
    size_t head;
    if (n >= 1 && (p[0] & 0xe0) == 0xa0)
        head = 1;
    else if (n >= 1 && p[0] == 0xd9)
        head = 2;
    else if (n >= 1 && p[0] == 0xda)
        head = 3;
    else if (n >= 1 && p[0] == 0xdb)
        head = 5;
    else
        return Py_NewRef(Py_None);
    return PyUnicode_DecodeUTF8((const char *)p + head, (Py_ssize_t)(n - head), "strict");
}

static PyObject *pack_body(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    jp_parser ps;
    jp_buf record = {0}, out = {0};
    jp_top top = {0};
    top.noted[0] = "started_at";
    top.noted[1] = "started_ms";
    int ok = -1;
    const unsigned char *start = view.buf;
    Py_BEGIN_ALLOW_THREADS
    if (jp_parser_init(&ps, MAX_BODY_DEPTH) == 0) {
        ok = jp_top_object(&ps, start, start + view.len, &record, &top);
        jp_parser_free(&ps);
    }
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (ok != 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *started_at = top.noted_found[0]
        ? str_at(record.data + top.noted_start[0], top.noted_end[0] - top.noted_start[0]) : Py_NewRef(Py_None);
    PyObject *started_ms = top.noted_found[1]
        ? number_at(record.data + top.noted_start[1], top.noted_end[1] - top.noted_start[1]) : Py_NewRef(Py_None);
    if (started_at == NULL || started_ms == NULL || jp_finish(&record, &out)) {
        Py_XDECREF(started_at);
        Py_XDECREF(started_ms);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("(y#NN)", (const char *)out.data, (Py_ssize_t)out.len, started_at, started_ms);
done:
    jp_buf_free(&record);
    jp_buf_free(&out);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"pack_body", pack_body, METH_O,
     "pack_body(json) -> (record, started_at, started_ms) | None: a logjam body's JSON object as the msgpack "
     "map the listener stores, with its started_at (a str, else None) and started_ms (a number, else None); "
     "None when the Python path must decide."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "logport.protocols._logjam_scan", NULL, 0, methods};

PyMODINIT_FUNC PyInit__logjam_scan(void) {
    if (jp_init()) {
        PyErr_SetString(PyExc_ImportError, "no C locale for strtod_l");
        return NULL;
    }
    return PyModule_Create(&module);
}
