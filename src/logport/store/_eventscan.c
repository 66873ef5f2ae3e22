/* The store's event count in C: the per-frame loop of store/counting.py (scan_frames_in_python is the
 * reference, and a hypothesis test holds the two to the same answers). A segment-protocol append of small
 * events is a block of thousands of frames; the store counts them as they are written, so the loop must
 * cost next to nothing beside the write.
 *
 * scan_frames(data) -> (plain, others, end): over the whole frames of `data` (a 4-byte big-endian signed
 * type, a 4-byte big-endian length, the body), the Event frames (type 0) whose body's first byte opens no
 * msgpack array (opaque: one event each), the (offset, length) of every other Event body (a batch, maybe:
 * counted in Python), and where the whole frames end.
 *
 * scan_parts(parts): scan_frames over an append's buffers, as the store holds them.
 *
 * next_record(data, pos) -> (offset, found): from `pos` (a frame's start), the first whole frame that is no
 * Event (a store record: found), else where the whole frames end: frames.ChunkScan walks a group's records in
 * Python and the runs of Events between them here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define HEADER_SIZE 8

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static int array_head(unsigned char c) { return c == 0x92 || c == 0x93 || c == 0xdc || c == 0xdd; }

static PyObject *scan_frames(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *others = PyList_New(0);
    if (others == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *p = view.buf;
    Py_ssize_t end = view.len, pos = 0;
    long long plain = 0;
    while (end - pos >= HEADER_SIZE) {
        uint32_t type = be32(p + pos);
        Py_ssize_t length = (Py_ssize_t)be32(p + pos + 4);
        if (length > end - pos - HEADER_SIZE)
            break; /* a torn frame: not whole */
        if (type == 0) {
            if (length && array_head(p[pos + HEADER_SIZE])) {
                PyObject *item = Py_BuildValue("(nn)", pos + HEADER_SIZE, length);
                if (item == NULL || PyList_Append(others, item) < 0) {
                    Py_XDECREF(item);
                    Py_DECREF(others);
                    PyBuffer_Release(&view);
                    return NULL;
                }
                Py_DECREF(item);
            } else {
                plain++;
            }
        }
        pos += HEADER_SIZE + length;
    }
    PyBuffer_Release(&view);
    PyObject *result = Py_BuildValue("(LOn)", plain, others, pos);
    Py_DECREF(others);
    return result;
}

/* scan_parts(parts) -> (plain, others) | None: scan_frames over an append's buffers: one buffer of frames, or
 * a header then a body per frame (SegmentStore.append's); `others` as (buffer index, offset, length). None for
 * any other cut (the caller joins the buffers). */
static PyObject *scan_parts(PyObject *module, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "scan_parts: a list of buffers");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *result = NULL;
    if (n == 1) {
        PyObject *scanned = scan_frames(module, items[0]);
        if (scanned != NULL) {
            PyObject *others = PyTuple_GET_ITEM(scanned, 1);
            Py_ssize_t count = PyList_GET_SIZE(others);
            for (Py_ssize_t i = 0; i < count; i++) {  /* (offset, length) -> (0, offset, length) */
                PyObject *item = PyList_GET_ITEM(others, i);
                PyObject *moved = Py_BuildValue("(nOO)", (Py_ssize_t)0, PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1));
                if (moved == NULL) {
                    Py_DECREF(scanned);
                    Py_DECREF(seq);
                    return NULL;
                }
                PyList_SET_ITEM(others, i, moved);
                Py_DECREF(item);
            }
            result = Py_BuildValue("(OO)", PyTuple_GET_ITEM(scanned, 0), others);
            Py_DECREF(scanned);
        }
        Py_DECREF(seq);
        return result;
    }
    PyObject *others = PyList_New(0);
    if (others == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    long long plain = 0;
    int cut = n % 2;
    for (Py_ssize_t i = 0; i + 1 < n && !cut; i += 2) {
        Py_buffer head, body;
        if (PyObject_GetBuffer(items[i], &head, PyBUF_SIMPLE) < 0)
            goto fail;
        if (PyObject_GetBuffer(items[i + 1], &body, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&head);
            goto fail;
        }
        const unsigned char *h = head.buf, *b = body.buf;
        if (head.len != HEADER_SIZE || (Py_ssize_t)be32(h + 4) != body.len) {
            cut = 1;
        } else if (be32(h) == 0) {
            if (body.len && array_head(b[0])) {
                PyObject *item = Py_BuildValue("(nnn)", i + 1, (Py_ssize_t)0, body.len);
                if (item == NULL || PyList_Append(others, item) < 0) {
                    Py_XDECREF(item);
                    PyBuffer_Release(&head);
                    PyBuffer_Release(&body);
                    goto fail;
                }
                Py_DECREF(item);
            } else {
                plain++;
            }
        }
        PyBuffer_Release(&head);
        PyBuffer_Release(&body);
    }
    Py_DECREF(seq);
    if (cut) {
        Py_DECREF(others);
        Py_RETURN_NONE;
    }
    result = Py_BuildValue("(LO)", plain, others);
    Py_DECREF(others);
    return result;
fail:
    Py_DECREF(others);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *next_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "next_record(data, pos)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (pos < 0 || pos > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "next_record: pos must lie within the buffer");
        return NULL;
    }
    const unsigned char *p = view.buf;
    Py_ssize_t end = view.len;
    int found = 0;
    while (end - pos >= HEADER_SIZE) {
        Py_ssize_t length = (Py_ssize_t)be32(p + pos + 4);
        if (length > end - pos - HEADER_SIZE)
            break;
        if (be32(p + pos) != 0) {
            found = 1;
            break;
        }
        pos += HEADER_SIZE + length;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nO)", pos, found ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"scan_frames", scan_frames, METH_O,
     "scan_frames(data) -> (opaque Event frames, [(offset, length) of the other Event bodies], end of the whole frames)"},
    {"scan_parts", scan_parts, METH_O,
     "scan_parts(parts) -> (opaque Event frames, [(buffer, offset, length) of the other Event bodies]) | None"},
    {"next_record", (PyCFunction)(void (*)(void))next_record, METH_FASTCALL,
     "next_record(data, pos) -> (offset, found): the first whole frame from pos that is no Event, else the end of the whole frames"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "logport.store._eventscan", NULL, 0, methods};

PyMODINIT_FUNC PyInit__eventscan(void) { return PyModule_Create(&module); }
