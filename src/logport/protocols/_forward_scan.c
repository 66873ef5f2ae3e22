/* The PackedForward hot path in one C pass: count the entries of a stream that is nothing but
 * valid `[time, record]` entries, or answer -1 and let the Python scan (protocols/forward.py,
 * the reference) decide, cut and count. -1 is always a safe answer; a count is given only for a
 * stream the Python scan would keep whole with that count.
 *
 * An entry here is a fixarray of 2: the time as any msgpack integer or an EventTime (ext type 0
 * of 8 bytes, fixext8 or ext8), then a map, whose contents are walked without recursion (a stack
 * of element counts, MAX_DEPTH deep; deeper nesting is left to the Python scan).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define MAX_DEPTH 64

static uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* The end of the one msgpack object at p, or NULL if it is not whole and well-formed before end. */
static const unsigned char *skip_object(const unsigned char *p, const unsigned char *end) {
    uint64_t left[MAX_DEPTH]; /* elements still to come in each open array or map */
    int depth = 0;
    for (;;) {
        if (p >= end)
            return NULL;
        unsigned char b = *p++;
        uint64_t length = 0;   /* bytes of payload after the header */
        uint64_t elements = 0; /* for an array or a map: the objects inside */
        int container = 0;
        int size_bytes = 0;    /* a str/bin/ext length field of this many bytes follows */
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            /* fixint, nil, false, true: the byte is the object */
        } else if (b <= 0x8f) {
            elements = 2u * (b & 0x0f);
            container = 1;
        } else if (b <= 0x9f) {
            elements = b & 0x0f;
            container = 1;
        } else if (b <= 0xbf) {
            length = b & 0x1f;
        } else {
            switch (b) {
            case 0xc4: case 0xd9: size_bytes = 1; break; /* bin8, str8 */
            case 0xc5: case 0xda: size_bytes = 2; break;
            case 0xc6: case 0xdb: size_bytes = 4; break;
            case 0xc7: size_bytes = 1; length = 1; break; /* ext8: length, then a type byte */
            case 0xc8: size_bytes = 2; length = 1; break;
            case 0xc9: size_bytes = 4; length = 1; break;
            case 0xca: case 0xce: case 0xd2: length = 4; break;
            case 0xcb: case 0xcf: case 0xd3: length = 8; break;
            case 0xcc: case 0xd0: length = 1; break;
            case 0xcd: case 0xd1: length = 2; break;
            case 0xd4: length = 2; break; /* fixext: type byte and data */
            case 0xd5: length = 3; break;
            case 0xd6: length = 5; break;
            case 0xd7: length = 9; break;
            case 0xd8: length = 17; break;
            case 0xdc: case 0xdd: case 0xde: case 0xdf: {
                int n = (b == 0xdc || b == 0xde) ? 2 : 4;
                if (end - p < n)
                    return NULL;
                elements = be(p, n) * (b >= 0xde ? 2u : 1u);
                p += n;
                container = 1;
                break;
            }
            default: /* 0xc1, never used */
                return NULL;
            }
        }
        if (size_bytes) {
            if (end - p < size_bytes)
                return NULL;
            length += be(p, size_bytes);
            p += size_bytes;
        }
        if ((uint64_t)(end - p) < length)
            return NULL;
        p += length;
        if (container && elements) {
            if (depth == MAX_DEPTH)
                return NULL;
            left[depth++] = elements;
            continue;
        }
        /* a whole object: it completes the containers it was the last element of */
        for (;;) {
            if (depth == 0)
                return p;
            if (--left[depth - 1])
                break;
            depth--;
        }
    }
}

static Py_ssize_t count_valid_entries(const unsigned char *p, const unsigned char *end) {
    Py_ssize_t count = 0;
    while (p < end) {
        if (*p++ != 0x92 || p >= end)
            return -1;
        unsigned char t = *p;
        Py_ssize_t time_bytes;
        if (t <= 0x7f || t >= 0xe0)
            time_bytes = 1;
        else if (t >= 0xcc && t <= 0xd3)
            time_bytes = 1 + (1 << ((t - 0xcc) & 3));
        else if (t == 0xd7 && end - p >= 2 && p[1] == 0)
            time_bytes = 10;
        else if (t == 0xc7 && end - p >= 3 && p[1] == 8 && p[2] == 0)
            time_bytes = 11;
        else
            return -1; /* another time form (v1.5 [time, meta]) or junk: the Python scan decides */
        if (end - p <= time_bytes)
            return -1;
        p += time_bytes;
        if (!((*p >= 0x80 && *p <= 0x8f) || *p == 0xde || *p == 0xdf))
            return -1;
        p = skip_object(p, end);
        if (p == NULL)
            return -1;
        count++;
    }
    return count;
}

static PyObject *count_entries(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *start = view.buf;
    Py_ssize_t count;
    Py_BEGIN_ALLOW_THREADS
    count = count_valid_entries(start, start + view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(count);
}

static PyMethodDef methods[] = {
    {"count_entries", count_entries, METH_O,
     "count_entries(buffer) -> int: the number of entries of a PackedForward stream made only of valid "
     "[integer or EventTime, map] entries, or -1 when the Python scan must decide."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "logport.protocols._forward_scan", NULL, 0, methods};

PyMODINIT_FUNC PyInit__forward_scan(void) {
    return PyModule_Create(&module);
}
