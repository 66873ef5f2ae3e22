/* logjam messages in one C pass: a whole batch taken from a socket (their frames) to the batch bodies the
 * listener stores, as servers/logjam_ingest.py's Python path (the reference) makes them, byte for byte: the
 * frames checked (count, meta, app-env and topic), the body decompressed (zlib, snappy, lz4), its JSON
 * transcoded to the msgpack record as orjson.loads + msgpack's Packer make it, the event time taken from
 * `started_at` / `started_ms` / the meta as event_time_of does, and the stored body built.
 *
 * Whatever the C pass does not take it leaves to the Python path (None in its answer): pings, every
 * message the protocol refuses, every body a decompressor or the transcoder (_jsonpack.h) declines, and
 * every `started_at` not in the plain form parsed here. So errors and their words are the Python path's.
 * pack_body (one body) is the older, narrower entry point the consumer side still uses.
 *
 * drain (built where libzmq's headers are) takes the messages from a ROUTER or PULL socket itself, through
 * libzmq's C API on the socket pyzmq made, and runs the same pass on each as it comes, with no Python object
 * per message: the stored bodies, already framed for the store, in one buffer, and the messages held as
 * libzmq gave them until `finish` answers the sync senders and publishes them on PUB (or lets them go, when
 * the store failed). It stops at the first message the pass does not take, which goes back to Python whole:
 * the Python path's answers and order stand for it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <time.h>
#include <zlib.h>

#include "_jsonpack.h"

#if defined(__has_include)
#if __has_include(<zmq.h>)
#define LJ_NATIVE 1
#include <dlfcn.h>
#include <structmember.h>
#include <zmq.h>
#endif
#endif

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

/* The str bytes of the msgpack value at [p, p + n), or -1 if it is no str. */
static int lj_str_span(const unsigned char *p, size_t n, const unsigned char **s, size_t *len) {
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
        return -1;
    *s = p + head;
    *len = n - head;
    return 0;
}

/* The str at p (a msgpack str written by _jsonpack.h: valid UTF-8), or None for anything else. */
static PyObject *str_at(const unsigned char *p, size_t n) {
    const unsigned char *s;
    size_t len;
    if (lj_str_span(p, n, &s, &len))
        return Py_NewRef(Py_None);
    return PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)len, "strict");
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

/* --- a batch of messages --- */

#define LJ_NONE 0
#define LJ_ZLIB 1
#define LJ_SNAPPY 2
#define LJ_LZ4 3
#define LJ_MAX_FRAMES 6 /* routing id, empty frame, app-env, topic, body, meta */

/* One message: its frames (borrowed from the batch), then what the pass made of it. */
typedef struct {
    const unsigned char *frame[LJ_MAX_FRAMES];
    size_t size[LJ_MAX_FRAMES];
    int nframes;
    const char *peer;
    Py_ssize_t peer_len;
    int data; /* index of the app-env frame */
    int taken;
    int compression;
    uint64_t created_ms; /* the meta's (0: none) */
    size_t out_start, out_len;
} lj_message;

static int lj_alpha(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* config.LOGJAM_APP_ENV: [A-Za-z][A-Za-z_-]*-[A-Za-z][A-Za-z_]*, the environment after the last '-' */
static int lj_valid_app_env(const unsigned char *p, size_t n) {
    if (n < 3 || !lj_alpha(p[0]))
        return 0;
    size_t dash = 0;
    for (size_t i = 1; i < n; i++) {
        unsigned char c = p[i];
        if (c == '-')
            dash = i;
        else if (!lj_alpha(c) && c != '_')
            return 0;
    }
    return dash > 0 && dash + 1 < n && lj_alpha(p[dash + 1]);
}

/* config.LOGJAM_TOPIC: (logs|javascript|events)(\.[A-Za-z][A-Za-z_-]*)* | frontend.page | frontend.ajax | mobile */
static int lj_valid_topic(const unsigned char *p, size_t n) {
    static const char *const exact[] = {"frontend.page", "frontend.ajax", "mobile"};
    for (int i = 0; i < 3; i++)
        if (n == strlen(exact[i]) && memcmp(p, exact[i], n) == 0)
            return 1;
    static const char *const heads[] = {"logs", "javascript", "events"};
    size_t i = 0;
    for (int h = 0; h < 3 && i == 0; h++) {
        size_t k = strlen(heads[h]);
        if (n >= k && memcmp(p, heads[h], k) == 0)
            i = k;
    }
    if (i == 0)
        return 0;
    while (i < n) {
        if (p[i] != '.' || i + 1 >= n || !lj_alpha(p[i + 1]))
            return 0;
        i += 2;
        while (i < n && (lj_alpha(p[i]) || p[i] == '_' || p[i] == '-'))
            i++;
    }
    return 1;
}

static inline uint64_t lj_be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* zlib or gzip (wbits 47, as protocols/logjam.py's _inflate): the whole stream within `limit` bytes. The
 * stream `z` is made once per batch (*ready) and reset per body: its window is not allocated per message. */
static int lj_inflate(z_stream *z, int *ready, const unsigned char *src, size_t n, size_t limit, jp_buf *out) {
    if (n > UINT_MAX)
        return -1;
    if (*ready ? inflateReset(z) != Z_OK : inflateInit2(z, 47) != Z_OK)
        return -1;
    *ready = 1;
    out->len = 0;
    size_t want = n * 4 < 4096 ? 4096 : n * 4;
    z->next_in = (Bytef *)src;
    z->avail_in = (uInt)n;
    int rc = Z_OK;
    for (;;) {
        if (want > limit + 1)
            want = limit + 1;
        if (want <= out->len || jp_reserve(out, want - out->len) || want - out->len > UINT_MAX) {
            rc = Z_MEM_ERROR;
            break;
        }
        z->next_out = out->data + out->len;
        z->avail_out = (uInt)(want - out->len);
        rc = inflate(z, Z_NO_FLUSH);
        out->len = want - z->avail_out;
        if (rc != Z_OK || out->len > limit || (z->avail_in == 0 && z->avail_out != 0))
            break;
        want *= 2;
    }
    return rc == Z_STREAM_END && out->len <= limit ? 0 : -1;
}

/* A back-reference of snappy and lz4: `len` bytes from `off` back, byte by byte, as the two may overlap
 * (a run); the caller has checked both against what is written and what is left. */
static unsigned char *lj_copy_match(unsigned char *op, size_t off, size_t len) {
    for (size_t i = 0; i < len; i++)
        op[i] = op[i - off];
    return op + len;
}

/* An lz4 length of 15 goes on in bytes, each added, until one below 255; -1 if the input ends first. */
static int lj_lz4_more(const unsigned char **ip, const unsigned char *iend, size_t *len) {
    unsigned char b;
    do {
        if (*ip >= iend)
            return -1;
        b = *(*ip)++;
        *len += b;
    } while (b == 255);
    return 0;
}

/* A raw snappy block; anything the reference decoder might answer differently is declined. */
static int lj_unsnappy(const unsigned char *ip, size_t n, size_t limit, jp_buf *out) {
    const unsigned char *iend = ip + n;
    uint64_t size = 0;
    for (int shift = 0;; shift += 7) {
        if (ip >= iend || shift > 28)
            return -1;
        unsigned char b = *ip++;
        size |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
    }
    if (size > 0xffffffffu || size > limit)
        return -1;
    out->len = 0;
    if (jp_reserve(out, size ? size : 1))
        return -1;
    unsigned char *dst = out->data, *op = dst, *oend = dst + size;
    while (ip < iend) {
        unsigned char tag = *ip++;
        size_t len, off;
        if ((tag & 3) == 0) {
            len = tag >> 2;
            if (len >= 60) {
                int k = (int)len - 59;
                if (iend - ip < k)
                    return -1;
                len = 0;
                for (int i = k - 1; i >= 0; i--)
                    len = (len << 8) | ip[i];
                ip += k;
            }
            len += 1;
            if (len > (size_t)(iend - ip) || len > (size_t)(oend - op))
                return -1;
            memcpy(op, ip, len);
            op += len;
            ip += len;
            continue;
        }
        if ((tag & 3) == 1) {
            if (ip >= iend)
                return -1;
            len = 4 + ((tag >> 2) & 7);
            off = ((size_t)(tag >> 5) << 8) | *ip++;
        } else if ((tag & 3) == 2) {
            if (iend - ip < 2)
                return -1;
            len = 1 + (tag >> 2);
            off = ip[0] | ((size_t)ip[1] << 8);
            ip += 2;
        } else {
            if (iend - ip < 4)
                return -1;
            len = 1 + (tag >> 2);
            off = ip[0] | ((size_t)ip[1] << 8) | ((size_t)ip[2] << 16) | ((size_t)ip[3] << 24);
            ip += 4;
        }
        if (off == 0 || off > (size_t)(op - dst) || len > (size_t)(oend - op))
            return -1;
        op = lj_copy_match(op, off, len);
    }
    if (op != oend)
        return -1;
    out->len = size;
    return 0;
}

/* An lz4 body: a 4-byte big-endian size, then a raw lz4 block that must fill exactly that many bytes,
 * kept to the block format's end rules (the last 5 bytes literals, no match starting in the last 12). */
static int lj_unlz4(const unsigned char *ip, size_t n, size_t limit, jp_buf *out) {
    if (n < 4)
        return -1;
    size_t size = (size_t)lj_be(ip, 4);
    if (size > limit || size == 0)
        return -1;
    const unsigned char *iend = ip + n;
    ip += 4;
    out->len = 0;
    if (jp_reserve(out, size))
        return -1;
    unsigned char *dst = out->data, *op = dst, *oend = dst + size;
    for (;;) {
        if (ip >= iend)
            return -1;
        unsigned token = *ip++;
        size_t lit = token >> 4;
        if (lit == 15 && lj_lz4_more(&ip, iend, &lit))
            return -1;
        if (lit > (size_t)(iend - ip) || lit > (size_t)(oend - op))
            return -1;
        memcpy(op, ip, lit);
        op += lit;
        ip += lit;
        if (ip == iend)
            break;
        if (iend - ip < 2)
            return -1;
        size_t off = ip[0] | ((size_t)ip[1] << 8);
        ip += 2;
        size_t len = token & 15;
        if (len == 15 && lj_lz4_more(&ip, iend, &len))
            return -1;
        len += 4;
        if (off == 0 || off > (size_t)(op - dst) || (size_t)(oend - op) < 12 || len > (size_t)(oend - op) - 5)
            return -1;
        op = lj_copy_match(op, off, len);
    }
    if (op != oend)
        return -1;
    out->len = size;
    return 0;
}

static int64_t lj_days_from_civil(int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static int lj_digits(const unsigned char *p, int n, unsigned *v) {
    *v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        *v = *v * 10 + (p[i] - '0');
    }
    return 0;
}

/* Microseconds since 1970 of `YYYY-MM-DDTHH:MM:SS[.f{1,6}][Z|+HH:MM|-HH:MM]` (bare: UTC), the plain form of
 * what datetime.fromisoformat reads; -1 for anything else (the Python path decides) and before 1970. */
static int lj_iso_micros(const unsigned char *p, size_t n, int64_t *micros) {
    unsigned y, mo, d, h, mi, s, frac = 0;
    if (n < 19 || p[4] != '-' || p[7] != '-' || p[10] != 'T' || p[13] != ':' || p[16] != ':')
        return -1;
    if (lj_digits(p, 4, &y) || lj_digits(p + 5, 2, &mo) || lj_digits(p + 8, 2, &d) || lj_digits(p + 11, 2, &h)
        || lj_digits(p + 14, 2, &mi) || lj_digits(p + 17, 2, &s))
        return -1;
    size_t i = 19;
    if (i < n && (p[i] == '.' || p[i] == ',')) {
        size_t k = 0;
        i++;
        while (i + k < n && p[i + k] >= '0' && p[i + k] <= '9')
            k++;
        if (k < 1 || k > 6)
            return -1;
        lj_digits(p + i, (int)k, &frac);
        for (size_t z = k; z < 6; z++)
            frac *= 10;
        i += k;
    }
    int64_t offset = 0;
    if (i < n && p[i] == 'Z') {
        i++;
    } else if (i < n && (p[i] == '+' || p[i] == '-')) {
        unsigned oh, om;
        if (n - i != 6 || p[i + 3] != ':' || lj_digits(p + i + 1, 2, &oh) || lj_digits(p + i + 4, 2, &om)
            || oh > 23 || om > 59)
            return -1;
        offset = (int64_t)(oh * 3600 + om * 60) * (p[i] == '-' ? -1 : 1);
        i += 6;
    }
    static const unsigned char mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (i != n || y < 1 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || s > 59)
        return -1;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d > (unsigned)(mdays[mo - 1] + (mo == 2 && leap)))
        return -1;
    int64_t seconds = lj_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - offset;
    *micros = seconds * 1000000 + frac;
    return *micros < 0 ? -1 : 0;
}

/* started_ms as event_time_of takes it: an int or float (not a bool) in [0, 2**52), in whole ms. */
static int lj_started_ms(const unsigned char *p, size_t n, uint64_t *ms) {
    if (n == 0)
        return -1;
    unsigned char b = p[0];
    if (b <= 0x7f) {
        *ms = b;
        return 0;
    }
    if (b >= 0xcc && b <= 0xcf) {
        *ms = lj_be(p + 1, (int)n - 1);
        return *ms < (1ull << 52) ? 0 : -1;
    }
    if (b == 0xcb) {
        uint64_t bits = lj_be(p + 1, 8);
        double v;
        memcpy(&v, &bits, 8);
        if (!(v >= 0.0 && v < 4503599627370496.0))
            return -1;
        *ms = (uint64_t)v;
        return 0;
    }
    return -1; /* negative integers, bools, nil, str, containers */
}

static int lj_put_str(jp_buf *b, const char *s) {
    return jp_str(b, s, strlen(s));
}

/* The rest of the scratch a pass needs, made once per call. */
typedef struct {
    jp_parser ps;
    jp_buf json, record;
    z_stream z;
    int z_ready;
} lj_scratch;

/* What a pass's scratch holds, let go (without the GIL: plain free). */
static void lj_scratch_free(lj_scratch *sc) {
    jp_parser_free(&sc->ps);
    if (sc->z_ready)
        inflateEnd(&sc->z);
    jp_buf_free(&sc->json);
    jp_buf_free(&sc->record);
}

/* One message: checked, decompressed, transcoded and stored into `out`; -1: the Python path decides. */
static int lj_take(lj_message *m, int router, size_t limit, const char *received_on, size_t received_on_len,
                   uint64_t now_ms, lj_scratch *sc, jp_buf *out) {
    int first = router ? 1 : 0;
    int sync = router && m->nframes > 1 && m->size[1] == 0;
    if (sync)
        first = 2;
    int n = m->nframes - first;
    if (n > 0 && m->size[first] == 4 && memcmp(m->frame[first], "ping", 4) == 0)
        return -1;
    uint64_t device = 0, sequence = 0, created_ms = 0;
    int compression = LJ_NONE;
    if (n == 4) {
        const unsigned char *meta = m->frame[first + 3];
        if (m->size[first + 3] != 24)
            return -1;
        unsigned tag = (unsigned)lj_be(meta, 2);
        if ((tag != 0xCABD && tag != 0xBDCA) || meta[2] > LJ_LZ4 || meta[3] != 1)
            return -1;
        compression = meta[2];
        device = lj_be(meta + 4, 4);
        created_ms = lj_be(meta + 8, 8);
        sequence = lj_be(meta + 16, 8);
    } else if (!(n == 3 && !sync)) {
        return -1;
    }
    const unsigned char *app_env = m->frame[first], *topic = m->frame[first + 1], *body = m->frame[first + 2];
    size_t app_env_len = m->size[first], topic_len = m->size[first + 1], body_len = m->size[first + 2];
    if (!lj_valid_app_env(app_env, app_env_len) || !lj_valid_topic(topic, topic_len))
        return -1;
    const unsigned char *json = body;
    size_t json_len = body_len;
    if (compression == LJ_NONE) {
        if (body_len > limit)
            return -1;
    } else {
        int rc = compression == LJ_ZLIB ? lj_inflate(&sc->z, &sc->z_ready, body, body_len, limit, &sc->json)
                 : compression == LJ_SNAPPY ? lj_unsnappy(body, body_len, limit, &sc->json)
                                            : lj_unlz4(body, body_len, limit, &sc->json);
        if (rc)
            return -1;
        json = sc->json.data;
        json_len = sc->json.len;
    }
    jp_top top = {0};
    top.noted[0] = "started_at";
    top.noted[1] = "started_ms";
    sc->record.len = sc->record.nfix = 0;
    if (jp_top_object(&sc->ps, json, json + json_len, &sc->record, &top))
        return -1;
    uint64_t stored_created = created_ms ? created_ms : now_ms;
    uint64_t seconds, nanos;
    int timed = 0;
    const unsigned char *s;
    size_t slen;
    if (top.noted_found[0] && lj_str_span(sc->record.data + top.noted_start[0],
                                          top.noted_end[0] - top.noted_start[0], &s, &slen) == 0) {
        int64_t micros;
        if (lj_iso_micros(s, slen, &micros))
            return -1; /* a form not parsed here, or before 1970: the Python path decides */
        seconds = (uint64_t)micros / 1000000;
        nanos = (uint64_t)micros % 1000000 * 1000;
        timed = 1;
    }
    uint64_t ms;
    if (!timed && top.noted_found[1]
        && lj_started_ms(sc->record.data + top.noted_start[1], top.noted_end[1] - top.noted_start[1], &ms) == 0) {
        seconds = ms / 1000;
        nanos = ms % 1000 * 1000000;
        timed = 1;
    }
    if (!timed) {
        seconds = stored_created / 1000;
        nanos = stored_created % 1000 * 1000000;
    }
    size_t record_len = jp_final_size(&sc->record); /* finished straight into `out` below, not copied */
    /* [tag, entries, option] as MessageDecoder.stored_body writes it */
    size_t tag_len = 7 + app_env_len + 1 + topic_len;
    size_t entry_len = 11 + record_len;
    if (entry_len > 0xffffffffu || jp_reserve(out, 64 + tag_len + entry_len + 2 * (app_env_len + topic_len)
                                                       + (size_t)m->peer_len + received_on_len + 160))
        return -1;
    m->out_start = out->len;
    unsigned char *p;
    jp_byte(out, 0x93);
    p = out->data + out->len;
    jp_write_str_header(p, tag_len);
    out->len += jp_str_header_size(tag_len);
    jp_put(out, "logjam.", 7);
    jp_put(out, app_env, app_env_len);
    jp_byte(out, '.');
    jp_put(out, topic, topic_len);
    p = out->data + out->len;
    if (entry_len < 0x100) {
        p[0] = 0xc4;
        jp_be(p + 1, entry_len, 1);
        out->len += 2;
    } else if (entry_len < 0x10000) {
        p[0] = 0xc5;
        jp_be(p + 1, entry_len, 2);
        out->len += 3;
    } else {
        p[0] = 0xc6;
        jp_be(p + 1, entry_len, 4);
        out->len += 5;
    }
    p = out->data + out->len;
    p[0] = 0x92;
    p[1] = 0xd7;
    p[2] = 0;
    jp_be(p + 3, seconds & 0xffffffffu, 4);
    jp_be(p + 7, nanos, 4);
    out->len += 11;
    if (jp_finish(&sc->record, out))
        return -1;
    jp_byte(out, 0x89);
    lj_put_str(out, "size");
    jp_uint(out, 1);
    lj_put_str(out, "source");
    lj_put_str(out, "logjam");
    lj_put_str(out, "peer");
    jp_str(out, m->peer, (size_t)m->peer_len);
    lj_put_str(out, "app_env");
    jp_str(out, app_env, app_env_len);
    lj_put_str(out, "topic");
    jp_str(out, topic, topic_len);
    lj_put_str(out, "device");
    jp_uint(out, device);
    lj_put_str(out, "sequence");
    jp_uint(out, sequence);
    lj_put_str(out, "created_ms");
    jp_uint(out, stored_created);
    lj_put_str(out, "received_on");
    if (jp_str(out, received_on, received_on_len))
        return -1;
    m->out_len = out->len - m->out_start;
    m->data = first;
    m->compression = compression;
    m->created_ms = created_ms;
    return 0;
}

/* The tag str "logjam.<app-env>.<topic>", the previous message's object when the names repeat. */
static PyObject *lj_tag(lj_message *m, const jp_buf *out, PyObject **last, lj_message **last_m) {
    const unsigned char *a = m->frame[m->data], *t = m->frame[m->data + 1];
    size_t an = m->size[m->data], tn = m->size[m->data + 1];
    lj_message *p = *last_m;
    if (*last != NULL && p->size[p->data] == an && p->size[p->data + 1] == tn
        && memcmp(p->frame[p->data], a, an) == 0 && memcmp(p->frame[p->data + 1], t, tn) == 0)
        return Py_NewRef(*last);
    size_t len = 7 + an + 1 + tn; /* the tag as written in the stored body, after its 0x93 and str header */
    PyObject *tag = PyUnicode_DecodeASCII((const char *)out->data + m->out_start + 1 + jp_str_header_size(len),
                                          (Py_ssize_t)len, "strict");
    if (tag == NULL)
        return NULL;
    Py_XSETREF(*last, Py_NewRef(tag));
    *last_m = m;
    return tag;
}

static PyObject *accept_batch(PyObject *module, PyObject *args) {
    PyObject *batch;
    int router;
    Py_ssize_t limit_arg;
    const char *received_on;
    Py_ssize_t received_on_len;
    unsigned long long now_ms;
    if (!PyArg_ParseTuple(args, "O!pns#K", &PyList_Type, &batch, &router, &limit_arg, &received_on,
                          &received_on_len, &now_ms))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(batch);
    lj_message *messages = calloc(count ? (size_t)count : 1, sizeof(*messages));
    if (messages == NULL)
        return PyErr_NoMemory();
    Py_INCREF(batch); /* its frames stay alive while the GIL is let go */
    for (Py_ssize_t i = 0; i < count; i++) {
        lj_message *m = &messages[i];
        m->nframes = -1; /* not taken unless its shape is (list of bytes, str) */
        PyObject *item = PyList_GET_ITEM(batch, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2)
            continue;
        PyObject *frames = PyTuple_GET_ITEM(item, 0), *peer = PyTuple_GET_ITEM(item, 1);
        if (!PyList_Check(frames) || PyList_GET_SIZE(frames) > LJ_MAX_FRAMES || !PyUnicode_Check(peer))
            continue;
        m->peer = PyUnicode_AsUTF8AndSize(peer, &m->peer_len);
        if (m->peer == NULL) {
            PyErr_Clear(); /* a str UTF-8 cannot hold: the Python path decides */
            continue;
        }
        int shaped = 1;
        for (Py_ssize_t f = 0; f < PyList_GET_SIZE(frames); f++) {
            PyObject *frame = PyList_GET_ITEM(frames, f);
            if (!PyBytes_CheckExact(frame)) {
                shaped = 0;
                break;
            }
            m->frame[f] = (const unsigned char *)PyBytes_AS_STRING(frame);
            m->size[f] = (size_t)PyBytes_GET_SIZE(frame);
        }
        if (shaped)
            m->nframes = (int)PyList_GET_SIZE(frames);
    }
    size_t limit = limit_arg < 0 ? 0 : (size_t)limit_arg;
    jp_buf out = {0};
    lj_scratch sc;
    memset(&sc, 0, sizeof(sc));
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    if (jp_parser_init(&sc.ps, MAX_BODY_DEPTH) == 0) {
        for (Py_ssize_t i = 0; i < count; i++) {
            lj_message *m = &messages[i];
            size_t mark = out.len;
            if (m->nframes >= 0)
                m->taken = lj_take(m, router, limit, received_on, (size_t)received_on_len, now_ms, &sc, &out) == 0;
            if (!m->taken)
                out.len = mark;
        }
    } else {
        failed = 1;
    }
    lj_scratch_free(&sc);
    Py_END_ALLOW_THREADS
    PyObject *result = failed ? NULL : PyList_New(count);
    PyObject *last_tag = NULL;
    lj_message *last_m = NULL;
    for (Py_ssize_t i = 0; result != NULL && i < count; i++) {
        lj_message *m = &messages[i];
        if (!m->taken) {
            PyList_SET_ITEM(result, i, Py_NewRef(Py_None));
            continue;
        }
        PyObject *frames = PyTuple_GET_ITEM(PyList_GET_ITEM(batch, i), 0);
        PyObject *tag = lj_tag(m, &out, &last_tag, &last_m);
        PyObject *taken = tag == NULL ? NULL : Py_BuildValue(
            "(y#NOOOiK)", (const char *)out.data + m->out_start, (Py_ssize_t)m->out_len, tag,
            PyList_GET_ITEM(frames, m->data), PyList_GET_ITEM(frames, m->data + 1),
            PyList_GET_ITEM(frames, m->data + 2), m->compression, (unsigned long long)m->created_ms);
        if (taken == NULL)
            Py_CLEAR(result);
        else
            PyList_SET_ITEM(result, i, taken);
    }
    if (failed)
        PyErr_NoMemory();
    Py_XDECREF(last_tag);
    jp_buf_free(&out);
    free(messages);
    Py_DECREF(batch);
    return result;
}

#ifdef LJ_NATIVE
/* --- draining a socket and publishing, through libzmq's C API --- */

/* libzmq's functions, looked up in the library pyzmq's backend loaded (bind_libzmq): this module works on
 * pyzmq's sockets, so with pyzmq's libzmq, which may be a copy of its own and not the system's. */
static struct {
    int ready;
    int (*msg_init)(zmq_msg_t *);
    int (*msg_recv)(zmq_msg_t *, void *, int);
    int (*msg_send)(zmq_msg_t *, void *, int);
    int (*msg_close)(zmq_msg_t *);
    int (*msg_copy)(zmq_msg_t *, zmq_msg_t *);
    void *(*msg_data)(zmq_msg_t *);
    size_t (*msg_size)(const zmq_msg_t *);
    int (*msg_more)(const zmq_msg_t *);
    const char *(*msg_gets)(const zmq_msg_t *, const char *);
    int (*send)(void *, const void *, size_t, int);
    int (*errno_)(void);
    const char *(*strerror_)(int);
} zq;

static PyObject *bind_libzmq(PyObject *module, PyObject *arg) {
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(arg, &path))
        return NULL;
    void *lib = dlopen(PyBytes_AS_STRING(path), RTLD_NOW | RTLD_NOLOAD); /* loaded already: pyzmq's backend */
    Py_DECREF(path);
    if (lib == NULL)
        Py_RETURN_FALSE;
    /* dlsym on a handle searches that object and those it depends on: the libzmq pyzmq's backend uses */
#define LJ_SYM(field, name) *(void **)(&zq.field) = dlsym(lib, name)
    LJ_SYM(msg_init, "zmq_msg_init");
    LJ_SYM(msg_recv, "zmq_msg_recv");
    LJ_SYM(msg_send, "zmq_msg_send");
    LJ_SYM(msg_close, "zmq_msg_close");
    LJ_SYM(msg_copy, "zmq_msg_copy");
    LJ_SYM(msg_data, "zmq_msg_data");
    LJ_SYM(msg_size, "zmq_msg_size");
    LJ_SYM(msg_more, "zmq_msg_more");
    LJ_SYM(msg_gets, "zmq_msg_gets");
    LJ_SYM(send, "zmq_send");
    LJ_SYM(errno_, "zmq_errno");
    LJ_SYM(strerror_, "zmq_strerror");
#undef LJ_SYM
    zq.ready = zq.msg_init && zq.msg_recv && zq.msg_send && zq.msg_close && zq.msg_copy && zq.msg_data
               && zq.msg_size && zq.msg_more && zq.msg_gets && zq.send && zq.errno_ && zq.strerror_;
    dlclose(lib); /* pyzmq's backend keeps it loaded */
    return PyBool_FromLong(zq.ready);
}

/* One message as libzmq gave it: its frames, held until published, and what the pass made of it. */
typedef struct {
    zmq_msg_t part[LJ_MAX_FRAMES];
    int nparts; /* parts initialised (each closed once) */
    int sync;
    lj_message m;
} lj_held;

typedef struct {
    PyObject_HEAD
    lj_held *held;
    Py_ssize_t nheld;    /* entries of `held` whose parts are to be closed */
    Py_ssize_t count;    /* messages taken: held[0 .. count) */
    Py_ssize_t received; /* messages taken from the socket: count, and the one left to Python if any */
    int router;
    jp_buf framed;       /* the stored bodies, each an Event frame of the store (int32 0, uint32 length, body), lent
                          * as this object's buffer (never changed, freed with it) */
    PyObject *runs;      /* [(tag, start, end, frames)]: consecutive messages of one tag, their span of framed */
    PyObject *left;      /* (frames, peer) of the message the pass did not take, or None */
} Drained;

static void drained_release(Drained *d) {
    for (Py_ssize_t i = 0; i < d->nheld; i++)
        for (int f = 0; f < d->held[i].nparts; f++)
            zq.msg_close(&d->held[i].part[f]);
    d->nheld = 0;
    free(d->held);
    d->held = NULL;
}

static void drained_dealloc(Drained *d) {
    drained_release(d);
    jp_buf_free(&d->framed);
    Py_XDECREF(d->runs);
    Py_XDECREF(d->left);
    Py_TYPE(d)->tp_free((PyObject *)d);
}

#define LJ_FRAME_HEADER 8 /* store/frames.py: int32 type (0: an Event), uint32 length */

/* Up to `max_batch` messages from `sock` (GIL released), each taken as it comes, its stored body framed into
 * `out`; stops when nothing waits, or at the first message not taken: *left is then its index in `held` (the
 * frames past LJ_MAX_FRAMES, which make it one the Python path refuses, copied into `extra` as an 8-byte
 * length and the bytes). Returns the messages taken, or -1 when a receive failed other than with EAGAIN. */
static Py_ssize_t lj_drain(void *sock, int router, Py_ssize_t max_batch, size_t limit, const char *received_on,
                           size_t received_on_len, uint64_t now_ms, size_t max_frame, lj_held *held,
                           Py_ssize_t *nheld, Py_ssize_t *left, lj_scratch *sc, jp_buf *out, jp_buf *extra,
                           int *err) {
    Py_ssize_t count = 0;
    while (count < max_batch) {
        lj_held *h = &held[count];
        zq.msg_init(&h->part[0]);
        h->nparts = 1;
        *nheld = count + 1;
        if (zq.msg_recv(&h->part[0], sock, ZMQ_DONTWAIT) < 0) {
            int e = zq.errno_();
            if (e == EAGAIN)
                return count;
            *err = e;
            return -1;
        }
        int whole = 1, more = zq.msg_more(&h->part[0]);
        while (more) {
            if (h->nparts < LJ_MAX_FRAMES) {
                zmq_msg_t *part = &h->part[h->nparts++];
                zq.msg_init(part);
                if (zq.msg_recv(part, sock, 0) < 0) {
                    *err = zq.errno_();
                    return -1;
                }
                more = zq.msg_more(part);
                continue;
            }
            zmq_msg_t part;
            zq.msg_init(&part);
            if (zq.msg_recv(&part, sock, 0) < 0) {
                zq.msg_close(&part);
                *err = zq.errno_();
                return -1;
            }
            size_t n = zq.msg_size(&part);
            unsigned char size[8];
            jp_be(size, n, 8);
            int failed = jp_put(extra, size, 8) || jp_put(extra, zq.msg_data(&part), n);
            more = zq.msg_more(&part);
            zq.msg_close(&part);
            if (failed) {
                *err = ENOMEM;
                return -1;
            }
            whole = 0;
        }
        lj_message *m = &h->m;
        memset(m, 0, sizeof(*m));
        m->nframes = h->nparts;
        for (int f = 0; f < h->nparts; f++) {
            m->frame[f] = zq.msg_data(&h->part[f]);
            m->size[f] = zq.msg_size(&h->part[f]);
        }
        m->peer = zq.msg_gets(&h->part[0], "Peer-Address"); /* as servers/logjam_ingest.py's peer_address */
        if (m->peer == NULL)
            m->peer = "unknown";
        m->peer_len = (Py_ssize_t)strlen(m->peer);
        h->sync = router && m->nframes > 1 && m->size[1] == 0;
        size_t mark = out->len;
        int taken = whole && jp_reserve(out, LJ_FRAME_HEADER) == 0;
        if (taken) {
            out->len += LJ_FRAME_HEADER;
            taken = lj_take(m, router, limit, received_on, received_on_len, now_ms, sc, out) == 0
                    && m->out_len <= max_frame; /* a bigger one the store refuses: the Python path says so */
        }
        if (!taken) {
            out->len = mark;
            *left = count;
            return count;
        }
        memset(out->data + mark, 0, 4);
        jp_be(out->data + mark + 4, m->out_len, 4);
        count++;
    }
    return count;
}

static int lj_same_names(const lj_message *a, const lj_message *b) {
    return a->size[a->data] == b->size[b->data] && a->size[a->data + 1] == b->size[b->data + 1]
           && memcmp(a->frame[a->data], b->frame[b->data], a->size[a->data]) == 0
           && memcmp(a->frame[a->data + 1], b->frame[b->data + 1], a->size[a->data + 1]) == 0;
}

/* [(tag, start, end, frames)]: the taken messages in runs of one tag, each its span of the framed bodies. */
static PyObject *lj_runs(const lj_held *held, Py_ssize_t count, const jp_buf *out) {
    PyObject *runs = PyList_New(0);
    Py_ssize_t first = 0;
    for (Py_ssize_t i = 1; runs != NULL && i <= count; i++) {
        if (i < count && lj_same_names(&held[i].m, &held[first].m))
            continue;
        const lj_message *m = &held[first].m;
        size_t len = 7 + m->size[m->data] + 1 + m->size[m->data + 1]; /* the tag, as the stored body has it */
        PyObject *tag = PyUnicode_DecodeASCII((const char *)out->data + m->out_start + 1 + jp_str_header_size(len),
                                              (Py_ssize_t)len, "strict");
        size_t end = i < count ? held[i].m.out_start - LJ_FRAME_HEADER : out->len;
        PyObject *run = tag == NULL ? NULL : Py_BuildValue("(Nnnn)", tag, (Py_ssize_t)(m->out_start - LJ_FRAME_HEADER),
                                                           (Py_ssize_t)end, i - first);
        if (run == NULL || PyList_Append(runs, run) < 0)
            Py_CLEAR(runs);
        Py_XDECREF(run);
        first = i;
    }
    return runs;
}

/* (frames, peer) of the message the pass left: its parts and the frames copied past them, as bytes. */
static PyObject *lj_left(lj_held *h, const jp_buf *extra) {
    PyObject *frames = PyList_New(0);
    for (int f = 0; frames != NULL && f < h->nparts; f++) {
        PyObject *frame = PyBytes_FromStringAndSize(zq.msg_data(&h->part[f]), (Py_ssize_t)zq.msg_size(&h->part[f]));
        if (frame == NULL || PyList_Append(frames, frame) < 0)
            Py_CLEAR(frames);
        Py_XDECREF(frame);
    }
    for (size_t at = 0; frames != NULL && at + 8 <= extra->len;) {
        size_t n = (size_t)lj_be(extra->data + at, 8);
        PyObject *frame = PyBytes_FromStringAndSize((const char *)extra->data + at + 8, (Py_ssize_t)n);
        if (frame == NULL || PyList_Append(frames, frame) < 0)
            Py_CLEAR(frames);
        Py_XDECREF(frame);
        at += 8 + n;
    }
    if (frames == NULL)
        return NULL;
    return Py_BuildValue("(Ns)", frames, h->m.peer);
}

static PyTypeObject DrainedType;

static PyObject *drain(PyObject *module, PyObject *args) {
    unsigned long long handle, now_ms;
    int router;
    Py_ssize_t max_batch, limit_arg, max_frame_arg, received_on_len;
    const char *received_on;
    if (!PyArg_ParseTuple(args, "Kpnns#Kn", &handle, &router, &max_batch, &limit_arg, &received_on,
                          &received_on_len, &now_ms, &max_frame_arg))
        return NULL;
    if (!zq.ready) {
        PyErr_SetString(PyExc_RuntimeError, "drain: bind_libzmq found no libzmq");
        return NULL;
    }
    if (max_batch < 1)
        max_batch = 1;
    Drained *d = (Drained *)DrainedType.tp_alloc(&DrainedType, 0);
    if (d == NULL)
        return NULL;
    d->router = router;
    d->held = malloc((size_t)max_batch * sizeof(*d->held)); /* not zeroed: each entry is set as it is used */
    if (d->held == NULL) {
        Py_DECREF(d);
        return PyErr_NoMemory();
    }
    size_t limit = limit_arg < 0 ? 0 : (size_t)limit_arg, max_frame = max_frame_arg < 0 ? 0 : (size_t)max_frame_arg;
    jp_buf extra = {0};
    lj_scratch sc;
    memset(&sc, 0, sizeof(sc));
    Py_ssize_t count = -1, left = -1, nheld = 0;
    int err = ENOMEM;
    Py_BEGIN_ALLOW_THREADS
    if (jp_parser_init(&sc.ps, MAX_BODY_DEPTH) == 0)
        count = lj_drain((void *)(uintptr_t)handle, router, max_batch, limit, received_on, (size_t)received_on_len,
                         now_ms, max_frame, d->held, &nheld, &left, &sc, &d->framed, &extra, &err);
    lj_scratch_free(&sc);
    Py_END_ALLOW_THREADS
    d->nheld = nheld;
    if (count >= 0) {
        d->count = count;
        d->received = count + (left >= 0);
        d->runs = lj_runs(d->held, count, &d->framed);
        d->left = d->runs == NULL ? NULL : left >= 0 ? lj_left(&d->held[left], &extra) : Py_NewRef(Py_None);
    } else if (err == ENOMEM) {
        PyErr_NoMemory();
    } else {
        PyErr_SetObject(PyExc_OSError, Py_BuildValue("(is)", err, zq.strerror_(err)));
    }
    if (left >= 0) { /* back to Python as bytes: its parts are done with */
        for (int f = 0; f < d->held[left].nparts; f++)
            zq.msg_close(&d->held[left].part[f]);
        d->held[left].nparts = 0;
    }
    jp_buf_free(&extra);
    if (d->left == NULL) {
        Py_DECREF(d);
        return NULL;
    }
    return (PyObject *)d;
}

static PyObject *drained_finish(Drained *d, PyObject *args) {
    unsigned long long pub_handle, router_handle, sequence, now_ms;
    int stored, recompress;
    unsigned long device;
    if (!PyArg_ParseTuple(args, "KKpkiKK", &pub_handle, &router_handle, &stored, &device, &recompress, &sequence,
                          &now_ms))
        return NULL;
    if (d->held == NULL && d->count) {
        PyErr_SetString(PyExc_RuntimeError, "finish: this batch was finished already");
        return NULL;
    }
    void *pub = (void *)(uintptr_t)pub_handle, *router = (void *)(uintptr_t)router_handle;
    jp_buf packed = {0};
    for (Py_ssize_t i = 0; stored && d->router && i < d->count; i++) { /* the replies first, as the Python path */
        lj_held *h = &d->held[i];
        if (!h->sync)
            continue;
        zmq_msg_t app_env;
        if (zq.msg_send(&h->part[0], router, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) /* the routing id */
            continue;
        zq.msg_init(&app_env);
        zq.msg_copy(&app_env, &h->part[h->m.data]);
        if (zq.msg_send(&app_env, router, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
            zq.msg_close(&app_env);
            continue;
        }
        zq.send(router, "202 Accepted", 12, ZMQ_DONTWAIT);
    }
    for (Py_ssize_t i = 0; stored && i < d->count; i++) { /* LogjamPublisher.publish_received */
        lj_held *h = &d->held[i];
        lj_message *m = &h->m;
        uint64_t created = m->created_ms ? m->created_ms : now_ms;
        int compression = m->compression, own = 0;
        if (compression == LJ_NONE && recompress == LJ_ZLIB) { /* zlib.compress(body) */
            uLongf len = compressBound((uLong)m->size[m->data + 2]);
            packed.len = 0;
            if (jp_reserve(&packed, len) == 0
                && compress2(packed.data, &len, m->frame[m->data + 2], (uLong)m->size[m->data + 2],
                             Z_DEFAULT_COMPRESSION) == Z_OK) {
                packed.len = len;
                own = 1;
                compression = LJ_ZLIB;
            }
        }
        sequence = sequence < UINT64_MAX ? sequence + 1 : 1;
        unsigned char meta[24];
        jp_be(meta, 0xCABD, 2);
        meta[2] = (unsigned char)compression;
        meta[3] = 1;
        jp_be(meta + 4, device, 4);
        jp_be(meta + 8, created, 8);
        jp_be(meta + 16, sequence, 8);
        zq.msg_send(&h->part[m->data], pub, ZMQ_SNDMORE | ZMQ_DONTWAIT); /* PUB drops past its HWM, never waits */
        zq.msg_send(&h->part[m->data + 1], pub, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        if (own)
            zq.send(pub, packed.data, packed.len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        else
            zq.msg_send(&h->part[m->data + 2], pub, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zq.send(pub, meta, sizeof(meta), ZMQ_DONTWAIT);
    }
    jp_buf_free(&packed);
    drained_release(d);
    return PyLong_FromUnsignedLongLong(sequence);
}

static int drained_getbuffer(Drained *d, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)d, d->framed.data != NULL ? d->framed.data : (void *)"",
                             (Py_ssize_t)d->framed.len, 1, flags);
}

static PyBufferProcs drained_as_buffer = {(getbufferproc)drained_getbuffer, NULL};

static PyObject *drained_framed(Drained *d, void *closure) {
    return PyMemoryView_FromObject((PyObject *)d);
}

static PyGetSetDef drained_getset[] = {
    {"framed", (getter)drained_framed, NULL, "the stored bodies as the store's Event frames (a view of this batch)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef drained_methods[] = {
    {"finish", (PyCFunction)drained_finish, METH_VARARGS,
     "finish(pub, router, stored, device, recompress, sequence, now_ms) -> sequence: once the store answered, "
     "the sync senders' replies on ROUTER and every message on PUB (its created_ms, else now_ms; uncompressed "
     "bodies zlib-compressed when recompress is 1), numbered on from `sequence`; nothing when not stored. The "
     "last sequence number used; the messages are let go."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef drained_members[] = {
    {"count", T_PYSSIZET, offsetof(Drained, count), READONLY, "messages taken"},
    {"received", T_PYSSIZET, offsetof(Drained, received), READONLY, "messages taken from the socket"},
    {"runs", T_OBJECT_EX, offsetof(Drained, runs), READONLY, "[(tag, start, end, frames)] over framed"},
    {"left", T_OBJECT, offsetof(Drained, left), READONLY, "(frames, peer) of the message left to Python, or None"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject DrainedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logport.protocols._logjam_scan.Drained",
    .tp_basicsize = sizeof(Drained),
    .tp_dealloc = (destructor)drained_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A batch drain() took from a socket: stored bodies framed, messages held until finish().",
    .tp_methods = drained_methods,
    .tp_members = drained_members,
    .tp_getset = drained_getset,
    .tp_as_buffer = &drained_as_buffer,
};
#endif /* LJ_NATIVE */

static PyMethodDef methods[] = {
    {"pack_body", pack_body, METH_O,
     "pack_body(json) -> (record, started_at, started_ms) | None: a logjam body's JSON object as the msgpack "
     "map the listener stores, with its started_at (a str, else None) and started_ms (a number, else None); "
     "None when the Python path must decide."},
    {"accept_batch", accept_batch, METH_VARARGS,
     "accept_batch(batch, router, limit, received_on, now_ms) -> list: for each (frames, peer) of a batch taken "
     "from a ROUTER (router true: the routing id first) or PULL socket, (stored body, tag, app_env, topic, body, "
     "compression, the meta's created_ms or 0) as MessageDecoder makes them, or None where the Python path "
     "decides (pings, refused messages, whatever this pass declines)."},
#ifdef LJ_NATIVE
    {"bind_libzmq", bind_libzmq, METH_O,
     "bind_libzmq(path) -> bool: find libzmq's functions through the loaded library at `path` (pyzmq's backend); "
     "whether drain can run."},
    {"drain", drain, METH_VARARGS,
     "drain(socket, router, max_batch, limit, received_on, now_ms, max_frame) -> Drained: up to max_batch "
     "messages from a ROUTER or PULL socket (libzmq's handle, zmq.Socket.underlying), each taken as accept_batch "
     "takes it and framed for the store, up to the first it does not take (Drained.left)."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "logport.protocols._logjam_scan", NULL, 0, methods};

PyMODINIT_FUNC PyInit__logjam_scan(void) {
    if (jp_init()) {
        PyErr_SetString(PyExc_ImportError, "no C locale for strtod_l");
        return NULL;
    }
#ifdef LJ_NATIVE
    if (PyType_Ready(&DrainedType) < 0)
        return NULL;
#endif
    return PyModule_Create(&module);
}
