/* The PackedForward hot path in C passes over the received bytes:
 *
 * count_entries: count the entries of a stream that is nothing but valid `[time, record]` entries,
 * or answer -1 and let the Python scan (protocols/forward.py, the reference) decide, cut and count.
 * -1 is always a safe answer; a count is given only for a stream the Python scan would keep whole
 * with that count. An entry here is a fixarray of 2: the time as any msgpack integer or an
 * EventTime (ext type 0 of 8 bytes, fixext8 or ext8), then a map, whose contents are walked
 * without recursion (a stack of element counts, MAX_DEPTH deep; deeper nesting is left to the
 * Python scan); a map's scalars (what records mostly hold) are stepped over without the stack.
 *
 * packed_forward_frame: where the parts of a PackedForward message `[tag, entries, option?]` lie
 * in the received bytes, so that the listener takes its entries as a view of them, without
 * msgpack's unpacker copying them in and out (protocols/forward.py ServerConnection; anything
 * else, or anything in another form, is left to the unpacker, the reference).
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

/* The end of the one msgpack object at p, or NULL if it is not whole and well-formed before end, or nests
 * more than max_depth (at most MAX_DEPTH) containers deep. */
static const unsigned char *skip_nested(const unsigned char *p, const unsigned char *end, int max_depth) {
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
            if (depth == max_depth)
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

static const unsigned char *skip_object(const unsigned char *p, const unsigned char *end) {
    return skip_nested(p, end, MAX_DEPTH);
}

/* The end of a value inside an entry's record (a map: one level of MAX_DEPTH): a scalar stepped over here,
 * anything else by skip_nested; NULL as there. */
static inline const unsigned char *skip_value(const unsigned char *p, const unsigned char *end) {
    if (p >= end)
        return NULL;
    unsigned char b = *p;
    uint64_t n;
    if (b >= 0xa0 && b <= 0xbf)
        n = 1 + (b & 0x1f); /* fixstr */
    else if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        n = 1;
    else if (b == 0xd9 || b == 0xc4) { /* str8, bin8 */
        if (end - p < 2)
            return NULL;
        n = 2 + (uint64_t)p[1];
    } else if (b == 0xcc || b == 0xd0)
        n = 2;
    else if (b == 0xcd || b == 0xd1)
        n = 3;
    else if (b == 0xca || b == 0xce || b == 0xd2)
        n = 5;
    else if (b == 0xcb || b == 0xcf || b == 0xd3)
        n = 9;
    else
        return skip_nested(p, end, MAX_DEPTH - 1);
    if ((uint64_t)(end - p) < n)
        return NULL;
    return p + n;
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
        uint64_t pairs;
        if (*p >= 0x80 && *p <= 0x8f) {
            pairs = *p & 0x0f;
            p += 1;
        } else if ((*p == 0xde && end - p >= 3) || (*p == 0xdf && end - p >= 5)) {
            int n = *p == 0xde ? 2 : 4;
            pairs = be(p + 1, n);
            p += 1 + n;
        } else
            return -1;
        for (uint64_t i = 0; i < 2 * pairs; i++) {
            p = skip_value(p, end);
            if (p == NULL)
                return -1;
        }
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

/* The str (str_only) or str/bin at p: its payload's start and length; 0 if incomplete, -1 if another type. */
static int str_or_bin(const unsigned char *p, const unsigned char *end, int str_only, const unsigned char **start,
                      uint64_t *length) {
    if (p >= end)
        return 0;
    unsigned char b = *p;
    int width;
    if (b >= 0xa0 && b <= 0xbf) {
        *start = p + 1;
        *length = b & 0x1f;
        return 1;
    }
    if (b == 0xd9 || (!str_only && b == 0xc4))
        width = 1;
    else if (b == 0xda || (!str_only && b == 0xc5))
        width = 2;
    else if (b == 0xdb || (!str_only && b == 0xc6))
        width = 4;
    else
        return -1;
    if (end - p < 1 + width)
        return 0;
    *start = p + 1 + width;
    *length = be(p + 1, width);
    return 1;
}

static PyObject *packed_forward_frame(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t offset;
    if (!PyArg_ParseTuple(args, "y*n", &view, &offset))
        return NULL;
    const unsigned char *base = view.buf, *end = base + view.len;
    if (offset < 0 || offset > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "offset outside the buffer");
        return NULL;
    }
    const unsigned char *start = base + offset, *p = start, *tag, *entries;
    uint64_t tag_length, entries_length;
    /* -1: not this form; -2: an option not whole (or too deep) after whole entries; n > 0: incomplete, at
     * least n bytes from offset are needed to tell more */
    Py_ssize_t need = -1;
    PyObject *result = NULL;
    int found;
    if (p >= end) {
        need = 1;
        goto answer;
    }
    if (*p != 0x92 && *p != 0x93)
        goto answer;
    int with_option = *p++ == 0x93;
    found = str_or_bin(p, end, 1, &tag, &tag_length);
    if (found <= 0) {
        need = found < 0 ? -1 : (end - start) + 1;
        goto answer;
    }
    if ((uint64_t)(end - tag) < tag_length) { /* the tag, and the first byte after it */
        uint64_t total = (uint64_t)(tag - start) + tag_length + 1;
        need = total > (uint64_t)PY_SSIZE_T_MAX ? PY_SSIZE_T_MAX : (Py_ssize_t)total;
        goto answer;
    }
    p = tag + tag_length;
    found = str_or_bin(p, end, 0, &entries, &entries_length);
    if (found <= 0) {
        need = found < 0 ? -1 : (end - start) + 1;
        goto answer;
    }
    if ((uint64_t)(end - entries) < entries_length) {
        uint64_t total = (uint64_t)(entries - start) + entries_length;
        need = total > (uint64_t)PY_SSIZE_T_MAX ? PY_SSIZE_T_MAX : (Py_ssize_t)total;
        goto answer;
    }
    p = entries + entries_length;
    const unsigned char *option = p;
    if (with_option) {
        if (p >= end) {
            need = (end - start) + 1;
            goto answer;
        }
        if (!((*p >= 0x80 && *p <= 0x8f) || *p == 0xde || *p == 0xdf || *p == 0xc0))
            goto answer; /* the unpacker says what is wrong with it */
        p = skip_object(p, end);
        if (p == NULL) { /* incomplete (its size is unknown), or no valid msgpack (too deep): the unpacker's */
            need = -2;
            goto answer;
        }
    }
    result = Py_BuildValue("nnnnnn", (Py_ssize_t)(p - base), (Py_ssize_t)(tag - base),
                           (Py_ssize_t)(tag - base + tag_length), (Py_ssize_t)(entries - base),
                           (Py_ssize_t)(entries - base + entries_length), (Py_ssize_t)(option - base));
    PyBuffer_Release(&view);
    return result;
answer:
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(need);
}

static PyMethodDef methods[] = {
    {"packed_forward_frame", packed_forward_frame, METH_VARARGS,
     "packed_forward_frame(buffer, offset) -> (end, tag_start, tag_end, entries_start, entries_end, option_start) "
     "of the PackedForward message [tag, entries] or [tag, entries, option] at offset (a str tag, str or bin "
     "entries, a map or nil option), offsets into buffer; or an int: at least that many bytes from offset are "
     "needed to tell more; -1: no message of that form starts there; -2: its option is not whole or not "
     "valid msgpack (an unpacker fed it all tells which)."},
    {"count_entries", count_entries, METH_O,
     "count_entries(buffer) -> int: the number of entries of a PackedForward stream made only of valid "
     "[integer or EventTime, map] entries, or -1 when the Python scan must decide."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "logport.protocols._forward_scan", NULL, 0, methods};

PyMODINIT_FUNC PyInit__forward_scan(void) {
    return PyModule_Create(&module);
}
