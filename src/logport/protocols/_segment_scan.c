/* The segment protocol's per-event loops in C, for blocks of small events (1 KiB events: a 1 MiB
 * block holds a thousand). protocols/segment.py keeps the Python versions as the reference and
 * uses them when this module was not built; a hypothesis test holds the two to the same answers.
 *
 * walk_events: the listener's check of the Event messages that arrived inside an append block.
 * append_event_frames: the client's framing of event bodies (a header for each, nothing copied).
 * (A reader's cut of a SegmentRead's data into frames is the store's: store/_frames.c.)
 *
 * An Event message is a 4-byte big-endian type (0) and a 4-byte big-endian length, then the body.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define HEADER_SIZE 8

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static PyObject *walk_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "walk_events(data, start, avail, remaining, max_event)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t avail = PyLong_AsSsize_t(args[2]);
    long long remaining = PyLong_AsLongLong(args[3]);
    long long max_event = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (start < 0 || avail < 0 || start > view.len || avail > view.len - start) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "walk_events: start and avail must lie within the buffer");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)view.buf + start;
    Py_ssize_t pos = 0;
    Py_ssize_t events = 0;
    int stop = 0;
    Py_BEGIN_ALLOW_THREADS
    while (remaining > 0 && avail - pos >= HEADER_SIZE) {
        if (be32(p + pos) != 0)
            break; /* another message type: the Python path reads it */
        long long length = be32(p + pos + 4);
        if (length > max_event) {
            stop = 1;
            break;
        }
        long long size = HEADER_SIZE + length;
        if (size > remaining) {
            stop = 2;
            break;
        }
        if (size > avail - pos)
            break; /* not all here yet */
        pos += (Py_ssize_t)size;
        remaining -= size;
        events++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("(nni)", pos, events, stop);
}

static PyObject *append_event_frames(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "append_event_frames(pending: list, bodies)");
        return NULL;
    }
    PyObject *pending = args[0];
    PyObject *seq = PySequence_Fast(args[1], "append_event_frames: a list or tuple of event bodies");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t before = PyList_GET_SIZE(pending);
    long long added = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *body;
        if (PyBytes_CheckExact(items[i])) {
            body = Py_NewRef(items[i]);
        } else {
            body = PyBytes_FromObject(items[i]); /* kept until acknowledged: it must not change meanwhile */
            if (body == NULL)
                goto fail;
        }
        Py_ssize_t length = PyBytes_GET_SIZE(body);
        if ((unsigned long long)length > 0xFFFFFFFFull) {
            PyErr_Format(PyExc_OverflowError, "an event body of %zd bytes does not fit a 4-byte length", length);
            Py_DECREF(body);
            goto fail;
        }
        PyObject *header = PyBytes_FromStringAndSize(NULL, HEADER_SIZE);
        if (header == NULL) {
            Py_DECREF(body);
            goto fail;
        }
        unsigned char *h = (unsigned char *)PyBytes_AS_STRING(header);
        memset(h, 0, 4);
        h[4] = (unsigned char)((uint32_t)length >> 24);
        h[5] = (unsigned char)((uint32_t)length >> 16);
        h[6] = (unsigned char)((uint32_t)length >> 8);
        h[7] = (unsigned char)length;
        int failed = PyList_Append(pending, header) < 0 || PyList_Append(pending, body) < 0;
        Py_DECREF(header);
        Py_DECREF(body);
        if (failed)
            goto fail;
        added += HEADER_SIZE + length;
    }
    Py_DECREF(seq);
    return PyLong_FromLongLong(added);
fail: /* all or nothing: the list as it was */
    PyList_SetSlice(pending, before, PY_SSIZE_T_MAX, NULL);
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef methods[] = {
    {"walk_events", (PyCFunction)(void (*)(void))walk_events, METH_FASTCALL,
     "walk_events(data, start, avail, remaining, max_event) -> (taken, events, stop): the whole Event "
     "messages at data[start:start + avail] that fit in `remaining` bytes of the block. stop is 0, or 1 "
     "for an Event longer than max_event at start + taken, or 2 for one crossing the block's end."},
    {"append_event_frames", (PyCFunction)(void (*)(void))append_event_frames, METH_FASTCALL,
     "append_event_frames(pending, bodies) -> int: append an Event header and the body (as bytes) to the list "
     "`pending` for each body; returns the bytes added. On an error, the list is left as it was."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "logport.protocols._segment_scan", NULL, 0, methods};

PyMODINIT_FUNC PyInit__segment_scan(void) {
    return PyModule_Create(&module);
}
