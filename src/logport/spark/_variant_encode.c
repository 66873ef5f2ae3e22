/* A stored batch's entries, `[EventTime, record]` msgpack, to Spark VARIANT binaries in one C pass
 * over the whole buffer, with no Python object per record or field: the column buffers come back
 * as bytes (value and metadata data with int32 offsets, times as int64 nanoseconds), ready for
 * pyarrow's from_buffers. logport/spark/variant.py is the reference: for every input this accepts,
 * the bytes are exactly the ones VariantEncoder makes from what msgpack unpacks (a hypothesis
 * test holds it to that); anything else (an entry that is not `[EventTime, record]`, a map key that
 * is not a string, duplicate keys, invalid UTF-8, a key outside the BMP, an ext other than
 * EventTime, nesting deeper than MAX_DEPTH, a variant at Spark's size limit, bytes that are not
 * whole entries to the end) answers None and the Python path decides, as it did before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define SMALL_MAP 32 /* maps of up to this many fields keep their work arrays on the stack */
#define SIZE_LIMIT (16u * 1024u * 1024u) /* Spark's VariantUtil.SIZE_LIMIT */
#define BAIL 1
#define FAIL (-1) /* out of memory: MemoryError once the GIL is held again */

typedef struct {
    unsigned char *data;
    size_t len, cap;
} Buf;

static int reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    unsigned char *data = realloc(b->data, cap);
    if (data == NULL)
        return FAIL;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int put(Buf *b, const void *src, size_t n) {
    if (reserve(b, n))
        return FAIL;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static int put_byte(Buf *b, unsigned char c) { return put(b, &c, 1); }

static void le(unsigned char *dst, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        dst[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Bytes (1-4) of the smallest unsigned little-endian integer that holds v. */
static int int_size(uint64_t v) { return v <= 0xFF ? 1 : v <= 0xFFFF ? 2 : v <= 0xFFFFFF ? 3 : 4; }

/* The metadata dictionary of one record: keys in first-use order, found again by a hash table. */
typedef struct {
    const unsigned char **key;
    uint32_t *len;
    size_t count, cap;
    int32_t *slots; /* index into key/len, -1 empty */
    size_t nslots;
} Keys;

static uint64_t hash_key(const unsigned char *p, uint32_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static void keys_clear(Keys *k) {
    k->count = 0;
    if (k->slots)
        memset(k->slots, 0xff, k->nslots * sizeof(int32_t));
}

static int keys_rehash(Keys *k, size_t nslots) {
    int32_t *slots = malloc(nslots * sizeof(int32_t));
    if (slots == NULL)
        return FAIL;
    memset(slots, 0xff, nslots * sizeof(int32_t));
    for (size_t i = 0; i < k->count; i++) {
        size_t s = hash_key(k->key[i], k->len[i]) & (nslots - 1);
        while (slots[s] >= 0)
            s = (s + 1) & (nslots - 1);
        slots[s] = (int32_t)i;
    }
    free(k->slots);
    k->slots = slots;
    k->nslots = nslots;
    return 0;
}

/* The id of a key, added when new; -1 when out of memory. */
static int64_t key_id(Keys *k, const unsigned char *p, uint32_t n) {
    if (k->nslots == 0 || (k->count + 1) * 2 > k->nslots) {
        if (keys_rehash(k, k->nslots ? k->nslots * 2 : 64))
            return -1;
    }
    size_t s = hash_key(p, n) & (k->nslots - 1);
    while (k->slots[s] >= 0) {
        int32_t i = k->slots[s];
        if (k->len[i] == n && memcmp(k->key[i], p, n) == 0)
            return i;
        s = (s + 1) & (k->nslots - 1);
    }
    if (k->count == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 64;
        const unsigned char **key = realloc(k->key, cap * sizeof(*key));
        if (key == NULL)
            return -1;
        k->key = key;
        uint32_t *len = realloc(k->len, cap * sizeof(*len));
        if (len == NULL)
            return -1;
        k->len = len;
        k->cap = cap;
    }
    k->key[k->count] = p;
    k->len[k->count] = n;
    k->slots[s] = (int32_t)k->count;
    return (int64_t)k->count++;
}

/* Whether [p, p+n) is UTF-8 as Python's strict decoder takes it; with bmp_only, no 4-byte sequence. */
static int valid_utf8(const unsigned char *p, size_t n, int bmp_only) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (p[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n || (p[i + 1] & 0xC0) != 0x80 || (p[i + 2] & 0xC0) != 0x80)
                return 0;
            if (c == 0xE0 && p[i + 1] < 0xA0)
                return 0; /* overlong */
            if (c == 0xED && p[i + 1] >= 0xA0)
                return 0; /* a surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4 && !bmp_only) {
            if (i + 3 >= n || (p[i + 1] & 0xC0) != 0x80 || (p[i + 2] & 0xC0) != 0x80 || (p[i + 3] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xF0 && p[i + 1] < 0x90) || (c == 0xF4 && p[i + 1] >= 0x90))
                return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

typedef struct {
    const unsigned char *end;
    Buf *out;
    Keys *keys;
} Enc;

/* The length of a str/bin/ext payload and where it starts; BAIL when it is not whole. */
static int sized(const unsigned char **pp, const unsigned char *end, int size_bytes, uint64_t *n) {
    if (end - *pp < size_bytes)
        return BAIL;
    *n = be(*pp, size_bytes);
    *pp += size_bytes;
    if ((uint64_t)(end - *pp) < *n)
        return BAIL;
    return 0;
}

static int write_int(Buf *out, int64_t v) {
    unsigned char b[9];
    int n;
    if (v >= -0x80 && v <= 0x7F) {
        b[0] = 3 << 2;
        n = 1;
    } else if (v >= -0x8000 && v <= 0x7FFF) {
        b[0] = 4 << 2;
        n = 2;
    } else if (v >= -0x80000000LL && v <= 0x7FFFFFFFLL) {
        b[0] = 5 << 2;
        n = 4;
    } else {
        b[0] = 6 << 2;
        n = 8;
    }
    le(b + 1, (uint64_t)v, n);
    return put(out, b, (size_t)n + 1);
}

static int write_string(Buf *out, const unsigned char *p, uint64_t n) {
    if (!valid_utf8(p, n, 0))
        return BAIL;
    if (n <= 0x3F) {
        if (put_byte(out, (unsigned char)(n << 2 | 1)))
            return FAIL;
    } else {
        unsigned char h[5] = {16 << 2};
        le(h + 1, n, 4);
        if (put(out, h, 5))
            return FAIL;
    }
    return put(out, p, n);
}

static int skip_value(const unsigned char **pp, const unsigned char *end, int depth);

/* Container header in front of `total` bytes of values written from `start`. */
static int finish_container(Buf *out, size_t start, int object, size_t n, const uint32_t *ids, int id_size,
                            const uint64_t *offs) {
    uint64_t total = out->len - start;
    int offset_size = int_size(total);
    int large = n > 0xFF;
    size_t header = 1 + (large ? 4 : 1) + (object ? n * (size_t)id_size : 0) + (n + 1) * (size_t)offset_size;
    if (reserve(out, header))
        return FAIL;
    unsigned char *at = out->data + start;
    memmove(at + header, at, total);
    if (object)
        *at++ = (unsigned char)(((large << 4 | (id_size - 1) << 2 | (offset_size - 1)) << 2) | 2);
    else
        *at++ = (unsigned char)(((large << 2 | (offset_size - 1)) << 2) | 3);
    le(at, n, large ? 4 : 1);
    at += large ? 4 : 1;
    if (object) {
        for (size_t i = 0; i < n; i++, at += id_size)
            le(at, ids[i], id_size);
    }
    for (size_t i = 0; i <= n; i++, at += offset_size)
        le(at, i < n ? offs[i] : total, offset_size);
    out->len += header;
    return 0;
}

static int encode_value(Enc *e, const unsigned char **pp, int depth);

static int encode_array(Enc *e, const unsigned char **pp, uint64_t n, int depth) {
    if (depth >= MAX_DEPTH || n > (uint64_t)(e->end - *pp))
        return BAIL;
    uint64_t *offs = malloc((n + 1) * sizeof(uint64_t));
    if (offs == NULL)
        return FAIL;
    size_t start = e->out->len;
    int rc = 0;
    for (uint64_t i = 0; i < n && !rc; i++) {
        offs[i] = e->out->len - start;
        rc = encode_value(e, pp, depth + 1);
    }
    if (!rc)
        rc = finish_container(e->out, start, 0, n, NULL, 0, offs);
    free(offs);
    return rc;
}

typedef struct {
    const unsigned char *key;
    uint32_t len;
    const unsigned char *value;
} Field;

static int compare_fields(const void *a, const void *b) {
    const Field *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->key, y->key, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* A str header at *pp: its payload; BAIL for anything else. */
static int read_str(const unsigned char **pp, const unsigned char *end, const unsigned char **s, uint64_t *n) {
    if (*pp >= end)
        return BAIL;
    unsigned char b = *(*pp)++;
    if (b >= 0xa0 && b <= 0xbf) {
        *n = b & 0x1f;
        if ((uint64_t)(end - *pp) < *n)
            return BAIL;
    } else if (b == 0xd9 || b == 0xda || b == 0xdb) {
        if (sized(pp, end, b == 0xd9 ? 1 : b == 0xda ? 2 : 4, n))
            return BAIL;
    } else {
        return BAIL;
    }
    *s = *pp;
    *pp += *n;
    return 0;
}

static int encode_map(Enc *e, const unsigned char **pp, uint64_t n, int depth) {
    if (depth >= MAX_DEPTH || n > (uint64_t)(e->end - *pp))
        return BAIL;
    /* a log record's map is small: its arrays on the stack, not three mallocs per map per row */
    Field small_fields[SMALL_MAP];
    uint32_t small_ids[SMALL_MAP];
    uint64_t small_offs[SMALL_MAP + 1];
    int heap = n > SMALL_MAP;
    Field *fields = heap ? malloc(n * sizeof(Field)) : small_fields;
    uint32_t *ids = heap ? malloc(n * sizeof(uint32_t)) : small_ids;
    uint64_t *offs = heap ? malloc((n + 1) * sizeof(uint64_t)) : small_offs;
    int rc = 0;
    if (fields == NULL || ids == NULL || offs == NULL) {
        rc = FAIL;
        goto done;
    }
    for (uint64_t i = 0; i < n; i++) {
        const unsigned char *key;
        uint64_t len;
        if (read_str(pp, e->end, &key, &len) || len > 0xFFFFFFFFu || !valid_utf8(key, len, 1)) {
            rc = BAIL;
            goto done;
        }
        fields[i].key = key;
        fields[i].len = (uint32_t)len;
        fields[i].value = *pp;
        if ((rc = skip_value(pp, e->end, depth + 1)))
            goto done;
    }
    qsort(fields, n, sizeof(Field), compare_fields);
    int64_t max_id = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (i && compare_fields(&fields[i - 1], &fields[i]) == 0) {
            rc = BAIL; /* a duplicate key: Python keeps the last */
            goto done;
        }
        int64_t id = key_id(e->keys, fields[i].key, fields[i].len);
        if (id < 0) {
            rc = FAIL;
            goto done;
        }
        ids[i] = (uint32_t)id;
        if (id > max_id)
            max_id = id;
    }
    size_t start = e->out->len;
    for (uint64_t i = 0; i < n && !rc; i++) {
        offs[i] = e->out->len - start;
        const unsigned char *v = fields[i].value;
        rc = encode_value(e, &v, depth + 1);
    }
    if (!rc)
        rc = finish_container(e->out, start, 1, n, ids, int_size((uint64_t)max_id), offs);
done:
    if (heap) {
        free(fields);
        free(ids);
        free(offs);
    }
    return rc;
}

static int encode_value(Enc *e, const unsigned char **pp, int depth) {
    const unsigned char *end = e->end;
    Buf *out = e->out;
    if (*pp >= end)
        return BAIL;
    unsigned char b = *(*pp)++;
    uint64_t n;
    if (b <= 0x7f)
        return write_int(out, b);
    if (b >= 0xe0)
        return write_int(out, (int8_t)b);
    if (b <= 0x8f)
        return encode_map(e, pp, b & 0x0f, depth);
    if (b <= 0x9f)
        return encode_array(e, pp, b & 0x0f, depth);
    if (b <= 0xbf) {
        n = b & 0x1f;
        if ((uint64_t)(end - *pp) < n)
            return BAIL;
        *pp += n;
        return write_string(out, *pp - n, n);
    }
    switch (b) {
    case 0xc0:
        return put_byte(out, 0);
    case 0xc2:
        return put_byte(out, 2 << 2);
    case 0xc3:
        return put_byte(out, 1 << 2);
    case 0xc4: case 0xc5: case 0xc6: {
        if (sized(pp, end, b == 0xc4 ? 1 : b == 0xc5 ? 2 : 4, &n))
            return BAIL;
        unsigned char h[5] = {15 << 2};
        le(h + 1, n, 4);
        *pp += n;
        return put(out, h, 5) ? FAIL : put(out, *pp - n, n);
    }
    case 0xd9: case 0xda: case 0xdb:
        if (sized(pp, end, b == 0xd9 ? 1 : b == 0xda ? 2 : 4, &n))
            return BAIL;
        *pp += n;
        return write_string(out, *pp - n, n);
    case 0xca: case 0xcb: {
        int size = b == 0xca ? 4 : 8;
        if (end - *pp < size)
            return BAIL;
        double d;
        if (size == 4) {
            uint32_t bits = (uint32_t)be(*pp, 4);
            float f;
            memcpy(&f, &bits, 4);
            d = f;
        } else {
            uint64_t bits = be(*pp, 8);
            memcpy(&d, &bits, 8);
        }
        *pp += size;
        unsigned char h[9] = {7 << 2};
        uint64_t bits;
        memcpy(&bits, &d, 8);
        le(h + 1, bits, 8);
        return put(out, h, 9);
    }
    case 0xcc: case 0xcd: case 0xce: case 0xcf: {
        int size = 1 << (b - 0xcc);
        if (end - *pp < size)
            return BAIL;
        uint64_t v = be(*pp, size);
        *pp += size;
        if (v <= (uint64_t)INT64_MAX)
            return write_int(out, (int64_t)v);
        unsigned char h[18] = {10 << 2, 0}; /* decimal(38, 0), 16 bytes little-endian */
        le(h + 2, v, 8);
        return put(out, h, 18);
    }
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        int size = 1 << (b - 0xd0);
        if (end - *pp < size)
            return BAIL;
        uint64_t v = be(*pp, size);
        *pp += size;
        int64_t s = size == 8 ? (int64_t)v : (int64_t)(v ^ (1ULL << (8 * size - 1))) - (int64_t)(1ULL << (8 * size - 1));
        return write_int(out, s);
    }
    case 0xdc: case 0xdd:
        if (end - *pp < (b == 0xdc ? 2 : 4))
            return BAIL;
        n = be(*pp, b == 0xdc ? 2 : 4);
        *pp += b == 0xdc ? 2 : 4;
        return encode_array(e, pp, n, depth);
    case 0xde: case 0xdf:
        if (end - *pp < (b == 0xde ? 2 : 4))
            return BAIL;
        n = be(*pp, b == 0xde ? 2 : 4);
        *pp += b == 0xde ? 2 : 4;
        return encode_map(e, pp, n, depth);
    case 0xd7: case 0xc7: {
        /* EventTime: ext type 0 of 8 bytes, as batch.ext_hook makes it: [seconds, nanoseconds] */
        if (b == 0xc7) {
            if (end - *pp < 1 || **pp != 8)
                return BAIL;
            (*pp)++;
        }
        if (end - *pp < 9 || **pp != 0)
            return BAIL;
        uint32_t seconds = (uint32_t)be(*pp + 1, 4), nanos = (uint32_t)be(*pp + 5, 4);
        *pp += 9;
        size_t start = out->len;
        uint64_t offs[2];
        offs[0] = 0;
        if (write_int(out, seconds))
            return FAIL;
        offs[1] = out->len - start;
        if (write_int(out, nanos))
            return FAIL;
        return finish_container(out, start, 0, 2, NULL, 0, offs);
    }
    default:
        return BAIL; /* another ext (Python prints it as its str), or 0xc1 */
    }
}

/* Past one well-formed msgpack value; BAIL when it is not whole or nests deeper than MAX_DEPTH. */
static int skip_value(const unsigned char **pp, const unsigned char *end, int depth) {
    if (depth >= MAX_DEPTH || *pp >= end)
        return BAIL;
    unsigned char b = *(*pp)++;
    uint64_t n = 0, elements = 0;
    int size_bytes = 0, fixed = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return 0;
    if (b <= 0x8f)
        elements = 2u * (b & 0x0f);
    else if (b <= 0x9f)
        elements = b & 0x0f;
    else if (b <= 0xbf)
        fixed = b & 0x1f;
    else {
        switch (b) {
        case 0xc4: case 0xd9: size_bytes = 1; break;
        case 0xc5: case 0xda: size_bytes = 2; break;
        case 0xc6: case 0xdb: size_bytes = 4; break;
        case 0xc7: size_bytes = 1; fixed = 1; break;
        case 0xc8: size_bytes = 2; fixed = 1; break;
        case 0xc9: size_bytes = 4; fixed = 1; break;
        case 0xca: case 0xce: case 0xd2: fixed = 4; break;
        case 0xcb: case 0xcf: case 0xd3: fixed = 8; break;
        case 0xcc: case 0xd0: fixed = 1; break;
        case 0xcd: case 0xd1: fixed = 2; break;
        case 0xd4: fixed = 2; break;
        case 0xd5: fixed = 3; break;
        case 0xd6: fixed = 5; break;
        case 0xd7: fixed = 9; break;
        case 0xd8: fixed = 17; break;
        case 0xdc: case 0xde:
            if (end - *pp < 2) return BAIL;
            elements = be(*pp, 2) * (b == 0xde ? 2u : 1u);
            *pp += 2;
            break;
        case 0xdd: case 0xdf:
            if (end - *pp < 4) return BAIL;
            elements = be(*pp, 4) * (b == 0xdf ? 2u : 1u);
            *pp += 4;
            break;
        default:
            return BAIL;
        }
    }
    if (size_bytes) {
        if (end - *pp < size_bytes)
            return BAIL;
        n = be(*pp, size_bytes);
        *pp += size_bytes;
    }
    n += (uint64_t)fixed;
    if ((uint64_t)(end - *pp) < n)
        return BAIL;
    *pp += n;
    if (elements > (uint64_t)(end - *pp))
        return BAIL;
    for (uint64_t i = 0; i < elements; i++) {
        int rc = skip_value(pp, end, depth + 1);
        if (rc)
            return rc;
    }
    return 0;
}

static int write_metadata(Buf *meta, const Keys *k) {
    uint64_t total = 0;
    for (size_t i = 0; i < k->count; i++)
        total += k->len[i];
    int offset_size = int_size(total > k->count ? total : k->count);
    size_t header = 1 + (size_t)offset_size * (k->count + 2);
    if (reserve(meta, header + total))
        return FAIL;
    unsigned char *at = meta->data + meta->len;
    *at++ = (unsigned char)((offset_size - 1) << 6 | 1);
    le(at, k->count, offset_size);
    at += offset_size;
    uint64_t offset = 0;
    for (size_t i = 0; i <= k->count; i++, at += offset_size) {
        le(at, offset, offset_size);
        if (i < k->count)
            offset += k->len[i];
    }
    for (size_t i = 0; i < k->count; i++) {
        memcpy(at, k->key[i], k->len[i]);
        at += k->len[i];
    }
    meta->len += header + total;
    return 0;
}

static int push_offset(Buf *offsets, size_t value) {
    if (value > INT32_MAX)
        return BAIL;
    int32_t v = (int32_t)value;
    return put(offsets, &v, 4);
}

static PyObject *encode_entries(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    const unsigned char *p = view.buf, *end = p + view.len;
    Buf values = {0}, value_offsets = {0}, metas = {0}, meta_offsets = {0}, times = {0};
    Keys keys = {0};
    Enc e = {end, &values, &keys};
    Py_ssize_t count = 0;
    int rc = push_offset(&value_offsets, 0);
    if (!rc)
        rc = push_offset(&meta_offsets, 0);
    Py_BEGIN_ALLOW_THREADS
    while (!rc && p < end) {
        /* [EventTime, record]: fixarray of 2, fixext8 or ext8 of type 0 */
        if (end - p < 11 || p[0] != 0x92) {
            rc = BAIL;
            break;
        }
        const unsigned char *t = p + 1;
        if (t[0] == 0xd7 && t[1] == 0) {
            t += 2;
        } else if (t[0] == 0xc7 && end - t >= 11 && t[1] == 8 && t[2] == 0) {
            t += 3;
        } else {
            rc = BAIL;
            break;
        }
        if (end - t < 8) {
            rc = BAIL;
            break;
        }
        int64_t ns = (int64_t)be(t, 4) * 1000000000LL + (int64_t)be(t + 4, 4);
        p = t + 8;
        size_t value_start = values.len, meta_start = metas.len;
        keys_clear(&keys);
        if ((rc = encode_value(&e, &p, 0)))
            break;
        if ((rc = write_metadata(&metas, &keys)))
            break;
        if (values.len - value_start >= SIZE_LIMIT || metas.len - meta_start >= SIZE_LIMIT) {
            rc = BAIL; /* Python keeps such a record in `raw` */
            break;
        }
        if ((rc = push_offset(&value_offsets, values.len)) || (rc = push_offset(&meta_offsets, metas.len)) ||
            (rc = put(&times, &ns, 8)))
            break;
        count++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (rc == BAIL) {
        result = Py_NewRef(Py_None);
    } else if (rc == FAIL) {
        PyErr_NoMemory();
    } else {
#define DATA(buf) ((buf).data ? (const char *)(buf).data : ""), (Py_ssize_t)(buf).len
        result = Py_BuildValue("(ny#y#y#y#y#)", count, DATA(times), DATA(values), DATA(value_offsets), DATA(metas),
                               DATA(meta_offsets));
#undef DATA
    }
    free(values.data);
    free(value_offsets.data);
    free(metas.data);
    free(meta_offsets.data);
    free(times.data);
    free(keys.key);
    free(keys.len);
    free(keys.slots);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_entries", encode_entries, METH_VARARGS,
     "encode_entries(entries) -> (count, times, values, value_offsets, metadata, metadata_offsets) or None.\n\n"
     "Every `[EventTime, record]` entry's record as a VARIANT: the column buffers (int64 nanoseconds, binary\n"
     "data with int32 offsets); None when the Python path must decide."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_variant_encode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__variant_encode(void) { return PyModule_Create(&module); }
