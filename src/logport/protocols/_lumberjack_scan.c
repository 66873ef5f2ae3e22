/* A Lumberjack window in one C pass: from the inflated bytes of a C frame (its J and D frames) straight to
 * the stored PackedForward batch bodies, as servers/lumberjack.py's decode_window and build_batches (the
 * reference) make them, byte for byte, without a Python object per event and without the GIL.
 *
 * decode_window answers None whenever the Python path must decide: any frame other than J or D (W, a nested
 * C frame), a frame past the limits, a count other than the window's, JSON or a D frame the transcoder does
 * not take (_jsonpack.h), consecutive events whose @metadata differ in bytes (Python compares them as
 * values). None is
 * always a safe answer: the Python path then gives the same batches or raises the protocol's error.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_jsonpack.h"

#define MAX_EVENT_DEPTH 512 /* batch.MAX_NESTING_DEPTH: the record nests that deep, @metadata one less */

typedef struct {
    const unsigned char *start; /* the frame's first byte (D frames) */
    const unsigned char *payload; /* a J frame's JSON */
    uint32_t seq;
    unsigned char kind;
    uint32_t length;            /* J: payload bytes; D: pairs */
} frame;

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* The frames of [p, end), exactly `expected` J/D frames; -1 for anything else. */
static int walk_frames(const unsigned char *p, const unsigned char *end, frame *frames, Py_ssize_t expected,
                       uint64_t limit) {
    Py_ssize_t n = 0;
    while (p < end) {
        if (end - p < 10 || n == expected || (p[0] != '1' && p[0] != '2'))
            return -1;
        frame *f = &frames[n++];
        f->start = p;
        f->payload = p + 10;
        f->kind = p[1];
        f->seq = be32(p + 2);
        f->length = be32(p + 6);
        if (f->kind == 'J') {
            if (f->length > limit || (uint64_t)(end - p - 10) < f->length)
                return -1;
            p += 10 + f->length;
        } else if (f->kind == 'D') {
            if ((uint64_t)f->length * 8 > limit)
                return -1;
            const unsigned char *q = p + 10;
            for (uint32_t i = 0; i < 2 * f->length; i++) {
                if (end - q < 4)
                    return -1;
                uint64_t stop = (uint64_t)(q - p) + 4 + be32(q);
                if (stop > limit || stop > (uint64_t)(end - p))
                    return -1;
                q = p + stop;
            }
            p = q;
        } else {
            return -1;
        }
    }
    return n == expected ? 0 : -1;
}

/* A D frame's pairs as a map (keys and values str), "@metadata"'s value diverted, "@timestamp"'s noted. */
static int d_frame_record(jp_parser *ps, const frame *f, jp_buf *record, jp_top *top) {
    const unsigned char *q = f->start + 10;
    long fix = jp_open(record, 1);
    if (fix < 0)
        return -1;
    ps->nkeys = 0;
    top->diverted_found = 0;
    top->noted_found[0] = 0;
    uint32_t count = 0;
    for (uint32_t i = 0; i < f->length; i++) {
        uint32_t klen = be32(q), vlen = be32(q + 4 + klen);
        const unsigned char *key = q + 4, *value = q + 8 + klen;
        q = value + vlen;
        if (!jp_valid_utf8(key, key + klen) || !jp_valid_utf8(value, value + vlen))
            return -1; /* Python decodes with "replace" */
        if (klen == 9 && memcmp(key, "@metadata", 9) == 0) {
            if (top->diverted_found)
                return -1;
            top->diverted_found = 1;
            if (jp_str(top->diverted, value, vlen))
                return -1;
            continue;
        }
        if (jp_str(record, key, klen) || jp_push_key(ps, record, record->len - klen, klen))
            return -1;
        size_t value_start = record->len;
        if (jp_str(record, value, vlen))
            return -1;
        if (klen == 10 && memcmp(key, "@timestamp", 10) == 0) {
            top->noted_found[0] = 1;
            top->noted_start[0] = value_start;
            top->noted_end[0] = record->len;
        }
        count++;
    }
    if (jp_unique_keys(ps, 0))
        return -1;
    ps->nkeys = 0;
    record->fix[fix].count = count;
    return 0;
}

/* --- @timestamp, as protocols/lumberjack.py's parse_timestamp --- */

static int digits(const unsigned char *p, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 0;
}

static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* 1: (seconds, nanos) set; 0: not a timestamp (the receive time is used). */
static int parse_timestamp(const unsigned char *s, size_t n, int64_t *seconds, uint32_t *nanos) {
    int year, month, day, hour, minute, second;
    if (n < 20 || s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':' ||
        (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || digits(s, 4, &year) || digits(s + 5, 2, &month) ||
        digits(s + 8, 2, &day) || digits(s + 11, 2, &hour) || digits(s + 14, 2, &minute) ||
        digits(s + 17, 2, &second))
        return 0;
    size_t i = 19;
    uint32_t fraction = 0;
    if (s[i] == '.') {
        size_t first = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (i - first < 9)
                fraction = fraction * 10 + (s[i] - '0');
            i++;
        }
        if (i == first)
            return 0;
        for (size_t k = i - first; k < 9; k++)
            fraction *= 10;
    }
    int64_t offset = 0;
    if (i + 1 == n && (s[i] == 'Z' || s[i] == 'z')) {
        /* UTC */
    } else if (i + 6 == n && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
        int hours, minutes;
        if (digits(s + i + 1, 2, &hours) || digits(s + i + 4, 2, &minutes))
            return 0;
        offset = hours * 3600 + minutes * 60;
        if (s[i] == '+')
            offset = -offset;
    } else {
        return 0;
    }
    /* what time.strptime takes: a real date of years 1-9999, hours to 23, minutes to 59, seconds to 61 */
    static const int month_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (year < 1 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 61)
        return 0;
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (day > month_days[month - 1] + (month == 2 && leap))
        return 0;
    *seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second + offset;
    if (*seconds < 0)
        return 0;
    *nanos = fraction;
    return 1;
}

/* The bytes of a msgpack str at p (as this file's encoder writes it), or -1 if it is something else. */
static int str_at(const unsigned char *p, size_t n, const unsigned char **s, size_t *len) {
    if (n < 1)
        return -1;
    if ((p[0] & 0xe0) == 0xa0) {
        *len = p[0] & 0x1f;
        *s = p + 1;
    } else if (p[0] == 0xd9 && n >= 2) {
        *len = p[1];
        *s = p + 2;
    } else if (p[0] == 0xda && n >= 3) {
        *len = ((size_t)p[1] << 8) | p[2];
        *s = p + 3;
    } else if (p[0] == 0xdb && n >= 5) {
        *len = be32(p + 1);
        *s = p + 5;
    } else {
        return -1;
    }
    return (size_t)(*s - p) + *len == n ? 0 : -1;
}

/* The end of the msgpack object at p (written by this file's encoder: well formed), for walking @metadata. */
static const unsigned char *skip(const unsigned char *p) {
    uint64_t left = 1;
    while (left) {
        unsigned char b = *p++;
        left--;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        } else if (b <= 0x8f) {
            left += 2u * (b & 0x0f);
        } else if (b <= 0x9f) {
            left += b & 0x0f;
        } else if (b <= 0xbf) {
            p += b & 0x1f;
        } else {
            switch (b) {
            case 0xd9: p += 1 + p[0]; break;
            case 0xda: p += 2 + (((size_t)p[0] << 8) | p[1]); break;
            case 0xdb: p += 4 + (size_t)be32(p); break;
            case 0xcc: case 0xd0: p += 1; break;
            case 0xcd: case 0xd1: p += 2; break;
            case 0xce: case 0xd2: p += 4; break;
            case 0xcb: case 0xcf: case 0xd3: p += 8; break;
            case 0xdc: left += ((size_t)p[0] << 8) | p[1]; p += 2; break;
            case 0xdd: left += be32(p); p += 4; break;
            case 0xde: left += 2 * (((uint64_t)p[0] << 8) | p[1]); p += 2; break;
            case 0xdf: left += 2 * (uint64_t)be32(p); p += 4; break;
            }
        }
    }
    return p;
}

/* meta["beat"] when meta is a map and that is a non-empty str (the run's tag with tag_from_beat). */
static int beat_of(const jp_buf *meta, const unsigned char **tag, size_t *len) {
    const unsigned char *p = meta->data, *end = meta->data + meta->len;
    if (meta->len == 0)
        return 0;
    uint64_t pairs;
    if ((p[0] & 0xf0) == 0x80) {
        pairs = p[0] & 0x0f;
        p += 1;
    } else if (p[0] == 0xde) {
        pairs = ((uint64_t)p[1] << 8) | p[2];
        p += 3;
    } else if (p[0] == 0xdf) {
        pairs = be32(p + 1);
        p += 5;
    } else {
        return 0;
    }
    for (uint64_t i = 0; i < pairs; i++) {
        const unsigned char *key = p, *value = skip(p), *next = skip(value);
        const unsigned char *s;
        size_t n;
        if (str_at(key, (size_t)(value - key), &s, &n) == 0 && n == 4 && memcmp(s, "beat", 4) == 0) {
            const unsigned char *beat;
            size_t beat_len;
            if (str_at(value, (size_t)(next - value), &beat, &beat_len) == 0 && beat_len > 0) {
                *tag = beat;
                *len = beat_len;
                return 1;
            }
            return 0;
        }
        p = next;
    }
    (void)end;
    return 0;
}

/* --- runs and batches --- */

typedef struct {
    unsigned char *body;
    size_t size;
    unsigned char *tag; /* NULL: the configured tag */
    size_t tag_len;
    uint32_t count;
} batch;

typedef struct {
    batch *items;
    size_t n, cap;
} batches;

typedef struct {
    const unsigned char *tag, *peer;
    size_t tag_len, peer_len;
    int tag_from_beat;
    uint64_t max_body;
    int64_t default_s;
    uint32_t default_ns;
    uint64_t limit;
} settings;

static void batches_free(batches *bs) {
    for (size_t i = 0; i < bs->n; i++) {
        free(bs->items[i].body);
        free(bs->items[i].tag);
    }
    free(bs->items);
    memset(bs, 0, sizeof(*bs));
}

/* The stored body [tag, entries, option], as batch.encode_batch_pieces packs it. */
static int close_run(batches *bs, const settings *cfg, jp_buf *entries, uint32_t count, const jp_buf *meta,
                     int has_meta) {
    if (count == 0)
        return 0;
    const unsigned char *tag = cfg->tag;
    size_t tag_len = cfg->tag_len;
    int own_tag = cfg->tag_from_beat && has_meta && beat_of(meta, &tag, &tag_len);
    jp_buf body = {0};
    size_t n = entries->len;
    if (jp_byte(&body, 0x93) || jp_str(&body, tag, tag_len) || jp_reserve(&body, 5 + n))
        goto fail;
    unsigned char *p = body.data + body.len;
    if (n < 0x100) {
        p[0] = 0xc4;
        p[1] = (unsigned char)n;
        body.len += 2;
    } else if (n < 0x10000) {
        p[0] = 0xc5;
        jp_be(p + 1, n, 2);
        body.len += 3;
    } else {
        if (n > 0xffffffffu)
            goto fail;
        p[0] = 0xc6;
        jp_be(p + 1, n, 4);
        body.len += 5;
    }
    if (jp_put(&body, entries->data, n) || jp_byte(&body, has_meta ? 0x84 : 0x83) ||
        jp_str(&body, "size", 4) || jp_uint(&body, count) || jp_str(&body, "source", 6) ||
        jp_str(&body, "lumberjack", 10) || jp_str(&body, "peer", 4) || jp_str(&body, cfg->peer, cfg->peer_len))
        goto fail;
    if (has_meta && (jp_str(&body, "@metadata", 9) || jp_put(&body, meta->data, meta->len)))
        goto fail;
    if (bs->n == bs->cap) {
        size_t cap = bs->cap ? bs->cap * 2 : 4;
        batch *items = realloc(bs->items, cap * sizeof(*items));
        if (items == NULL)
            goto fail;
        bs->items = items;
        bs->cap = cap;
    }
    batch *b = &bs->items[bs->n];
    b->body = body.data;
    b->size = body.len;
    b->count = count;
    b->tag = NULL;
    b->tag_len = 0;
    if (own_tag) {
        b->tag = malloc(tag_len);
        if (b->tag == NULL)
            goto fail;
        memcpy(b->tag, tag, tag_len);
        b->tag_len = tag_len;
    }
    bs->n++;
    free(body.fix);
    entries->len = 0;
    return 0;
fail:
    jp_buf_free(&body);
    return -1;
}

/* Events [lo, hi) of the window into batches, as build_batches runs them. */
static int pack_events(const frame *frames, Py_ssize_t lo, Py_ssize_t hi, const settings *cfg, batches *out) {
    jp_parser ps;
    if (jp_parser_init(&ps, MAX_EVENT_DEPTH))
        return -1;
    jp_buf record = {0}, meta = {0}, event_meta = {0}, run_meta = {0}, entries = {0};
    jp_top top = {0};
    top.divert = "@metadata";
    top.diverted = &meta;
    top.noted[0] = "@timestamp";
    int result = -1, run_has_meta = 0;
    uint32_t run_count = 0;
    for (Py_ssize_t i = lo; i < hi; i++) {
        const frame *f = &frames[i];
        record.len = record.nfix = meta.len = meta.nfix = 0;
        if (f->kind == 'J') {
            if (jp_top_object(&ps, f->payload, f->payload + f->length, &record, &top))
                goto done;
        } else if (d_frame_record(&ps, f, &record, &top)) {
            goto done;
        }
        /* @metadata: null is as good as missing (dict.pop's default) */
        event_meta.len = 0;
        if (top.diverted_found && jp_finish(&meta, &event_meta))
            goto done;
        int has_meta = event_meta.len > 0 && !(event_meta.len == 1 && event_meta.data[0] == 0xc0);
        int64_t seconds = cfg->default_s;
        uint32_t nanos = cfg->default_ns;
        if (top.noted_found[0]) {
            const unsigned char *s;
            size_t n;
            const unsigned char *value = record.data + top.noted_start[0];
            if (str_at(value, top.noted_end[0] - top.noted_start[0], &s, &n) == 0) {
                int64_t ts;
                uint32_t ns;
                if (parse_timestamp(s, n, &ts, &ns)) {
                    seconds = ts;
                    nanos = ns;
                }
            }
        }
        uint64_t entry_bytes = jp_final_size(&record) + 11;
        int same_meta = has_meta == run_has_meta &&
                        (!has_meta || (event_meta.len == run_meta.len &&
                                       memcmp(event_meta.data, run_meta.data, run_meta.len) == 0));
        if (!same_meta && has_meta && run_has_meta)
            goto done; /* equal as values, maybe: Python compares them */
        if (!same_meta || (run_count && entries.len + entry_bytes > cfg->max_body)) {
            if (close_run(out, cfg, &entries, run_count, &run_meta, run_has_meta))
                goto done;
            run_count = 0;
            run_has_meta = has_meta;
            run_meta.len = 0;
            if (has_meta && jp_put(&run_meta, event_meta.data, event_meta.len))
                goto done;
        }
        if (jp_reserve(&entries, 11))
            goto done;
        unsigned char *head = entries.data + entries.len;
        head[0] = 0x92;
        head[1] = 0xd7;
        head[2] = 0x00;
        jp_be(head + 3, (uint64_t)seconds & 0xffffffffu, 4);
        jp_be(head + 7, nanos, 4);
        entries.len += 11;
        if (jp_finish(&record, &entries))
            goto done;
        run_count++;
    }
    if (close_run(out, cfg, &entries, run_count, &run_meta, run_has_meta))
        goto done;
    result = 0;
done:
    jp_buf_free(&record);
    jp_buf_free(&meta);
    jp_buf_free(&event_meta);
    jp_buf_free(&run_meta);
    jp_buf_free(&entries);
    jp_parser_free(&ps);
    return result;
}

/* [(tag or None for the configured one, body, count)] */
static PyObject *batch_list(const batches *bs) {
    PyObject *list = PyList_New((Py_ssize_t)bs->n);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < bs->n; i++) {
        const batch *b = &bs->items[i];
        PyObject *item = Py_BuildValue("(z#y#I)", (const char *)b->tag, (Py_ssize_t)b->tag_len,
                                       (const char *)b->body, (Py_ssize_t)b->size, b->count);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

static PyObject *decode_window(PyObject *module, PyObject *args) {
    Py_buffer inner, tag, peer;
    Py_ssize_t expected, lo, hi, max_body, limit;
    int tag_from_beat;
    long long default_s;
    unsigned long default_ns;
    if (!PyArg_ParseTuple(args, "y*nnny*py*nLkn:decode_window", &inner, &expected, &lo, &hi, &tag,
                          &tag_from_beat, &peer, &max_body, &default_s, &default_ns, &limit))
        return NULL;
    PyObject *result = NULL;
    frame *frames = NULL;
    batches bs = {0};
    int ok = -1;
    uint32_t last_seq = 0;
    /* a frame has at least 10 bytes: a window announcing more frames than that is not this window (and a
     * W frame's count must not size an allocation the bytes cannot back) */
    if (expected > 0 && lo >= 0 && lo < hi && hi <= expected && expected <= inner.len / 10) {
        frames = PyMem_RawMalloc((size_t)expected * sizeof(frame));
        if (frames == NULL) {
            PyErr_NoMemory();
            goto out;
        }
        settings cfg = {tag.buf, peer.buf, (size_t)tag.len, (size_t)peer.len, tag_from_beat,
                        (uint64_t)max_body, default_s, (uint32_t)default_ns, (uint64_t)limit};
        const unsigned char *start = inner.buf;
        Py_BEGIN_ALLOW_THREADS
        ok = walk_frames(start, start + inner.len, frames, expected, cfg.limit);
        if (ok == 0)
            ok = pack_events(frames, lo, hi, &cfg, &bs);
        if (ok == 0)
            last_seq = frames[hi - 1].seq;
        Py_END_ALLOW_THREADS
    }
    if (ok != 0) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    PyObject *list = batch_list(&bs);
    if (list != NULL)
        result = Py_BuildValue("(NIn)", list, last_seq, inner.len);
out:
    batches_free(&bs);
    PyMem_RawFree(frames);
    PyBuffer_Release(&inner);
    PyBuffer_Release(&tag);
    PyBuffer_Release(&peer);
    return result;
}

static PyObject *pack_json_events(PyObject *module, PyObject *args) {
    PyObject *events;
    Py_buffer tag, peer;
    Py_ssize_t max_body;
    int tag_from_beat;
    long long default_s;
    unsigned long default_ns;
    if (!PyArg_ParseTuple(args, "O!y*py*nLk:pack_json_events", &PyList_Type, &events, &tag, &tag_from_beat, &peer,
                          &max_body, &default_s, &default_ns))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(events), held = 0;
    frame *frames = n > 0 ? PyMem_RawMalloc((size_t)n * sizeof(frame)) : NULL;
    PyObject **payloads = n > 0 ? PyMem_RawMalloc((size_t)n * sizeof(PyObject *)) : NULL;
    batches bs = {0};
    int ok = -1;
    if (n > 0 && (frames == NULL || payloads == NULL)) {
        PyErr_NoMemory();
        goto out;
    }
    for (; held < n; held++) {
        PyObject *item = PyList_GET_ITEM(events, held);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2 || !PyBytes_CheckExact(PyTuple_GET_ITEM(item, 1)))
            break; /* a D frame's dict: the Python path */
        unsigned long seq = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(item, 0));
        if (PyErr_Occurred() || seq > 0xffffffffu) {
            PyErr_Clear();
            break;
        }
        PyObject *payload = PyTuple_GET_ITEM(item, 1);
        if ((size_t)PyBytes_GET_SIZE(payload) > 0xffffffffu)
            break;
        Py_INCREF(payload); /* the bytes stay whatever happens to the list while the GIL is released */
        payloads[held] = payload;
        frames[held].start = NULL;
        frames[held].payload = (const unsigned char *)PyBytes_AS_STRING(payload);
        frames[held].length = (uint32_t)PyBytes_GET_SIZE(payload);
        frames[held].seq = (uint32_t)seq;
        frames[held].kind = 'J';
    }
    if (n > 0 && held == n) {
        settings cfg = {tag.buf, peer.buf, (size_t)tag.len, (size_t)peer.len, tag_from_beat,
                        (uint64_t)max_body, default_s, (uint32_t)default_ns, UINT64_MAX};
        Py_BEGIN_ALLOW_THREADS
        ok = pack_events(frames, 0, n, &cfg, &bs);
        Py_END_ALLOW_THREADS
    }
    result = ok == 0 ? batch_list(&bs) : Py_NewRef(Py_None);
out:
    for (Py_ssize_t i = 0; i < held; i++)
        Py_DECREF(payloads[i]);
    batches_free(&bs);
    PyMem_RawFree(frames);
    PyMem_RawFree(payloads);
    PyBuffer_Release(&tag);
    PyBuffer_Release(&peer);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_window", decode_window, METH_VARARGS,
     "decode_window(inner, expected, lo, hi, tag, tag_from_beat, peer, max_body, default_s, default_ns, "
     "max_payload_size) -> (batches, last seq, bytes) | None: events [lo, hi) of a C frame's inflated bytes "
     "that hold exactly `expected` J/D frames, as build_batches makes them (a batch's tag None: the configured "
     "one); None when the Python path must decide. tag and peer are UTF-8 (surrogateescape) bytes."},
    {"pack_json_events", pack_json_events, METH_VARARGS,
     "pack_json_events(events, tag, tag_from_beat, peer, max_body, default_s, default_ns) -> batches | None: "
     "build_batches for a window of (seq, J frame JSON bytes) events; None when the Python path must decide "
     "(a D frame's dict among them, anything decode_window declines)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "logport.protocols._lumberjack_scan", NULL, 0, methods};

PyMODINIT_FUNC PyInit__lumberjack_scan(void) {
    if (jp_init()) {
        PyErr_SetString(PyExc_ImportError, "no C locale for strtod_l");
        return NULL;
    }
    return PyModule_Create(&module);
}
