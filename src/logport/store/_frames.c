/* The frame walks of store/frames.py and the event count of store/counting.py in C. The Python functions
 * beside them are the references (frame_list_in_python, next_record_in_python, scan_frames_in_python,
 * scan_parts_in_python), and hypothesis tests hold the two to the same answers. A frame is a 4-byte big-endian
 * signed type, a 4-byte big-endian length, then the body; every loop here takes whole frames through
 * whole_frame().
 *
 * frame_list(data, base) -> (frames, consumed): (offset, type, body) of each whole frame `data` starts with,
 * each body a view of `data` (a reader's cut of what it read, nothing copied), and the bytes they take.
 *
 * next_record(data, pos) -> (offset, found): from `pos` (a frame's start), the first whole frame that is no
 * Event (a store record: found), else where the whole frames end: frames.ChunkScan walks a group's records in
 * Python and the runs of Events between them here.
 *
 * scan_frames(data) -> (plain, others, end): over the whole frames of `data`, the Event frames whose body's
 * first byte opens no msgpack array (opaque: one event each), the (offset, length) of every other Event body
 * (a batch, maybe: counted in Python), and where the whole frames end. A segment-protocol append of small
 * events is a block of thousands of frames, counted as it is written: this loop must cost next to nothing.
 *
 * scan_parts(parts): scan_frames over an append's buffers, as the store holds them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define HEADER_SIZE 8

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* The body length of the frame at p[pos:end], or -1 when the frame is not all there. */
static inline Py_ssize_t whole_frame(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end) {
    if (end - pos < HEADER_SIZE)
        return -1;
    Py_ssize_t length = (Py_ssize_t)be32(p + pos + 4);
    return length > end - pos - HEADER_SIZE ? -1 : length;
}

static int array_head(unsigned char c) { return c == 0x92 || c == 0x93 || c == 0xdc || c == 0xdd; }

static PyObject *frame_list(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "frame_list(data, base_offset)");
        return NULL;
    }
    long long base = PyLong_AsLongLong(args[1]);
    if (base == -1 && PyErr_Occurred())
        return NULL;
    PyObject *view = PyMemoryView_FromObject(args[0]); /* the bodies are its slices: they hold the buffer */
    if (view == NULL)
        return NULL;
    Py_buffer *buffer = PyMemoryView_GET_BUFFER(view);
    if (buffer->ndim != 1 || buffer->itemsize != 1 || buffer->shape == NULL || !PyBuffer_IsContiguous(buffer, 'C')) {
        Py_DECREF(view);
        PyErr_SetString(PyExc_ValueError, "frame_list: a contiguous buffer of bytes");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)buffer->buf;
    Py_ssize_t end = buffer->len;
    PyObject *found = PyList_New(0);
    if (found == NULL) {
        Py_DECREF(view);
        return NULL;
    }
    Py_ssize_t pos = 0, length;
    while ((length = whole_frame(p, pos, end)) >= 0) { /* an incomplete frame: the next read has its rest */
        int32_t type = (int32_t)be32(p + pos);
        /* view[pos + HEADER_SIZE : pos + HEADER_SIZE + length], made as memoryview's own slicing makes it (a
         * new view of the same managed buffer, its start and length moved), without a slice object per frame */
        PyObject *body = PyMemoryView_FromObject(view);
        if (body != NULL) {
            Py_buffer *part = PyMemoryView_GET_BUFFER(body);
            part->buf = (char *)part->buf + pos + HEADER_SIZE;
            part->len = length;
            part->shape[0] = length;
        }
        PyObject *offset = body ? PyLong_FromLongLong(base + (long long)pos) : NULL;
        PyObject *frame_type = offset ? PyLong_FromLong((long)type) : NULL;
        PyObject *item = frame_type ? PyTuple_Pack(3, offset, frame_type, body) : NULL;
        Py_XDECREF(offset);
        Py_XDECREF(frame_type);
        Py_XDECREF(body);
        if (item == NULL || PyList_Append(found, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(found);
            Py_DECREF(view);
            return NULL;
        }
        Py_DECREF(item);
        pos += HEADER_SIZE + length;
    }
    Py_DECREF(view);
    PyObject *result = Py_BuildValue("(Nn)", found, pos);
    return result;
}

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
    Py_ssize_t length;
    while ((length = whole_frame(p, pos, end)) >= 0) {
        if (be32(p + pos) == 0) {
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
    Py_ssize_t length;
    while ((length = whole_frame(p, pos, end)) >= 0) {
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
    {"frame_list", (PyCFunction)(void (*)(void))frame_list, METH_FASTCALL,
     "frame_list(data, base_offset) -> (frames, consumed): (offset, type, body) of each whole frame that "
     "`data` starts with, offsets from base_offset, each body a memoryview of data; consumed: the bytes "
     "they take (an incomplete frame after them is left out)."},
    {"scan_frames", scan_frames, METH_O,
     "scan_frames(data) -> (opaque Event frames, [(offset, length) of the other Event bodies], end of the whole frames)"},
    {"scan_parts", scan_parts, METH_O,
     "scan_parts(parts) -> (opaque Event frames, [(buffer, offset, length) of the other Event bodies]) | None"},
    {"next_record", (PyCFunction)(void (*)(void))next_record, METH_FASTCALL,
     "next_record(data, pos) -> (offset, found): the first whole frame from pos that is no Event, else the end of the whole frames"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "logport.store._frames", NULL, 0, methods};

PyMODINIT_FUNC PyInit__frames(void) { return PyModule_Create(&module); }
