/* A stored batch's entries, `[EventTime, record]` msgpack, to Spark VARIANT binaries in one C pass
 * over the whole buffer, with no Python object per record or field: the column buffers come back
 * as bytes (value and metadata data with int32 offsets, times as int64 nanoseconds), ready for
 * pyarrow's from_buffers. logport/spark/variant.py is the reference: for every input this accepts,
 * the bytes are exactly the ones VariantEncoder makes from what msgpack unpacks (a hypothesis
 * test holds it to that); anything else (an entry that is not `[EventTime, record]`, a map key that
 * is not a string, duplicate keys, invalid UTF-8, a key outside the BMP, an ext other than
 * EventTime, nesting deeper than MAX_DEPTH, a variant at Spark's size limit, bytes that are not
 * whole entries to the end) answers None and the Python path decides, as it did before.
 * VariantColumn keeps the rows of many batches on one set of buffers, one take() per Arrow batch, and
 * remembers the last top-level key set (Shape): a record with the same keys in the same order skips their
 * sort, checks and hashing and, without nested maps, copies the metadata it had.
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

/* Inline, with the room check first: a record is mostly small pieces (a header byte, a few bytes of value),
 * and a call per piece into reserve() and a memcpy of one byte cost 15-20% of the pass. */
static inline int put(Buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap && reserve(b, n))
        return FAIL;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static inline int put_byte(Buf *b, unsigned char c) {
    if (b->len + 1 > b->cap && reserve(b, 1))
        return FAIL;
    b->data[b->len++] = c;
    return 0;
}

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
    const unsigned char *key;
    uint32_t len;
    uint32_t index; /* its position in the msgpack map */
    const unsigned char *value;
} Field;

/* The top-level key set of the last record whose top-level map took the full path: its keys as they came
 * (bytes and lengths in msgpack order), the sorted order of their positions, and the metadata of those keys
 * alone. A log record's keys mostly come in the same order every time: a record with the same keys, byte
 * for byte and in the same order, takes the sorted order and ids (0..n-1: the top-level map's keys are the
 * first a record's dictionary gets) from here, and, when no nested map adds keys, its metadata too; it
 * skips the key validation, the sort, the duplicate check and the hash table. */
typedef struct {
    int valid;
    uint32_t n;
    uint32_t len[SMALL_MAP];
    uint32_t order[SMALL_MAP];
    Buf keys;     /* the key bytes, concatenated in msgpack order */
    Buf metadata; /* the metadata of the n keys */
} Shape;

typedef struct {
    const unsigned char *end;
    Buf *out;
    Keys *keys;
    Shape *shape;           /* NULL: no cache (encode_entries) */
    const Field *pending;   /* a cached record's sorted top-level fields, not in `keys` yet */
    uint32_t pending_n;
    int shape_hit;          /* this record's top-level map took its keys from the shape */
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

/* Whether the fields (msgpack order) are the shape's keys, byte for byte, in the same order. */
static int shape_matches(const Shape *shape, const Field *fields, uint64_t n) {
    if (!shape->valid || shape->n != n)
        return 0;
    const unsigned char *at = shape->keys.data;
    for (uint64_t i = 0; i < n; i++) {
        if (fields[i].len != shape->len[i] || memcmp(fields[i].key, at, fields[i].len) != 0)
            return 0;
        at += fields[i].len;
    }
    return 1;
}

static int write_metadata(Buf *meta, const Keys *k);

/* Keep a top-level key set that took the full path (fields sorted, keys holding exactly their ids). */
static int shape_store(Shape *shape, const Field *sorted, uint64_t n, const Keys *keys) {
    shape->valid = 0;
    if (n > SMALL_MAP)
        return 0;
    const unsigned char *key[SMALL_MAP];
    for (uint64_t i = 0; i < n; i++) {
        key[sorted[i].index] = sorted[i].key;
        shape->len[sorted[i].index] = sorted[i].len;
        shape->order[i] = sorted[i].index;
    }
    shape->keys.len = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (put(&shape->keys, key[i], shape->len[i]))
            return FAIL;
    }
    shape->metadata.len = 0;
    if (write_metadata(&shape->metadata, keys))
        return FAIL;
    shape->n = (uint32_t)n;
    shape->valid = 1;
    return 0;
}

/* A nested map needs the dictionary: the cached top-level keys go in first, with their ids 0..n-1. */
static int flush_pending(Enc *e) {
    const Field *fields = e->pending;
    e->pending = NULL;
    for (uint32_t i = 0; i < e->pending_n; i++) {
        if (key_id(e->keys, fields[i].key, fields[i].len) < 0)
            return FAIL;
    }
    return 0;
}

static int encode_map(Enc *e, const unsigned char **pp, uint64_t n, int depth) {
    if (depth >= MAX_DEPTH || n > (uint64_t)(e->end - *pp))
        return BAIL;
    /* a log record's map is small: its arrays on the stack, not three mallocs per map per row */
    Field small_fields[SMALL_MAP], small_sorted[SMALL_MAP];
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
        if (read_str(pp, e->end, &key, &len) || len > 0xFFFFFFFFu) {
            rc = BAIL;
            goto done;
        }
        fields[i].key = key;
        fields[i].len = (uint32_t)len;
        fields[i].index = (uint32_t)i;
        fields[i].value = *pp;
        if ((rc = skip_value(pp, e->end, depth + 1)))
            goto done;
    }
    int64_t max_id = 0;
    if (depth == 0 && e->shape != NULL && shape_matches(e->shape, fields, n)) {
        /* the same keys as the shape's: valid, distinct, and sorted as its order says */
        for (uint64_t i = 0; i < n; i++) {
            small_sorted[i] = fields[e->shape->order[i]];
            ids[i] = (uint32_t)i;
        }
        fields = small_sorted; /* n <= SMALL_MAP: heap is 0, nothing to free */
        max_id = n ? (int64_t)n - 1 : 0;
        e->pending = small_sorted;
        e->pending_n = (uint32_t)n;
        e->shape_hit = 1;
    } else {
        if (e->pending && (rc = flush_pending(e)))
            goto done;
        for (uint64_t i = 0; i < n; i++) {
            if (!valid_utf8(fields[i].key, fields[i].len, 1)) {
                rc = BAIL;
                goto done;
            }
        }
        qsort(fields, n, sizeof(Field), compare_fields);
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
        if (depth == 0 && e->shape != NULL && (rc = shape_store(e->shape, fields, n, e->keys)))
            goto done;
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

/* The VARIANT column buffers that entries are encoded onto, and what a record's encoding reuses. */
typedef struct {
    Buf values, value_offsets, metas, meta_offsets; /* offsets: int32, a leading 0 */
    Py_ssize_t rows;
    Keys keys;
    Shape shape;
} Column;

static int column_init(Column *c) {
    memset(c, 0, sizeof(*c));
    return push_offset(&c->value_offsets, 0) || push_offset(&c->meta_offsets, 0) ? FAIL : 0;
}

static void column_free(Column *c) {
    free(c->values.data);
    free(c->value_offsets.data);
    free(c->metas.data);
    free(c->meta_offsets.data);
    free(c->keys.key);
    free(c->keys.len);
    free(c->keys.slots);
    free(c->shape.keys.data);
    free(c->shape.metadata.data);
    memset(c, 0, sizeof(*c));
}

/* Every `[EventTime, record]` entry of [p, end) onto the column (rows, and times as int64 nanoseconds onto
 * `times`); 0, BAIL or FAIL. On BAIL or FAIL the rows written so far stay: the caller cuts them off. */
static int encode_into(Column *c, const unsigned char *p, const unsigned char *end, Buf *times, Py_ssize_t *count) {
    Enc e = {end, &c->values, &c->keys, &c->shape, NULL, 0, 0};
    int rc = 0;
    while (!rc && p < end) {
        /* [EventTime, record]: fixarray of 2, fixext8 or ext8 of type 0 */
        if (end - p < 11 || p[0] != 0x92)
            return BAIL;
        const unsigned char *t = p + 1;
        if (t[0] == 0xd7 && t[1] == 0)
            t += 2;
        else if (t[0] == 0xc7 && end - t >= 11 && t[1] == 8 && t[2] == 0)
            t += 3;
        else
            return BAIL;
        if (end - t < 8)
            return BAIL;
        int64_t ns = (int64_t)be(t, 4) * 1000000000LL + (int64_t)be(t + 4, 4);
        p = t + 8;
        size_t value_start = c->values.len, meta_start = c->metas.len;
        keys_clear(&c->keys);
        e.pending = NULL;
        e.shape_hit = 0;
        if ((rc = encode_value(&e, &p, 0)))
            break;
        if (e.shape_hit && e.pending) /* no nested map added keys: the shape's metadata is this record's */
            rc = put(&c->metas, c->shape.metadata.data, c->shape.metadata.len);
        else
            rc = write_metadata(&c->metas, &c->keys);
        if (rc)
            break;
        if (c->values.len - value_start >= SIZE_LIMIT || c->metas.len - meta_start >= SIZE_LIMIT)
            return BAIL; /* Python keeps such a record in `raw` */
        if ((rc = push_offset(&c->value_offsets, c->values.len)) || (rc = push_offset(&c->meta_offsets, c->metas.len)) ||
            (rc = put(times, &ns, 8)))
            break;
        (*count)++;
    }
    return rc;
}

static PyObject *column_bytes(const Buf *b) {
    return PyBytes_FromStringAndSize(b->data ? (const char *)b->data : "", (Py_ssize_t)b->len);
}

/* (count, values, value_offsets, metadata, metadata_offsets) of the column's rows. */
static PyObject *column_tuple(const Column *c) {
    PyObject *values = column_bytes(&c->values), *value_offsets = column_bytes(&c->value_offsets);
    PyObject *metas = column_bytes(&c->metas), *meta_offsets = column_bytes(&c->meta_offsets);
    PyObject *result = NULL;
    if (values && value_offsets && metas && meta_offsets)
        result = Py_BuildValue("(nOOOO)", c->rows, values, value_offsets, metas, meta_offsets);
    Py_XDECREF(values);
    Py_XDECREF(value_offsets);
    Py_XDECREF(metas);
    Py_XDECREF(meta_offsets);
    return result;
}

/* Encode `entries` onto the column; the times bytes, or None (nothing added) when Python must decide. */
static PyObject *column_add(Column *c, PyObject *entries) {
    Py_buffer view;
    if (PyObject_GetBuffer(entries, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    size_t values = c->values.len, value_offsets = c->value_offsets.len, metas = c->metas.len,
           meta_offsets = c->meta_offsets.len;
    Buf times = {0};
    Py_ssize_t count = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = encode_into(c, view.buf, (const unsigned char *)view.buf + view.len, &times, &count);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (rc) {
        c->values.len = values;
        c->value_offsets.len = value_offsets;
        c->metas.len = metas;
        c->meta_offsets.len = meta_offsets;
        if (rc == BAIL)
            result = Py_NewRef(Py_None);
        else
            PyErr_NoMemory();
    } else {
        c->rows += count;
        result = column_bytes(&times);
    }
    free(times.data);
    return result;
}

static PyObject *encode_entries(PyObject *self, PyObject *args) {
    PyObject *entries;
    if (!PyArg_ParseTuple(args, "O", &entries))
        return NULL;
    Column c;
    if (column_init(&c)) {
        column_free(&c);
        return PyErr_NoMemory();
    }
    PyObject *times = column_add(&c, entries), *result = NULL;
    if (times == Py_None) {
        result = times;
    } else if (times != NULL) {
        PyObject *columns = column_tuple(&c);
        if (columns != NULL) {
            PyObject *values, *value_offsets, *metas, *meta_offsets;
            Py_ssize_t n;
            if (PyArg_ParseTuple(columns, "nOOOO", &n, &values, &value_offsets, &metas, &meta_offsets))
                result = Py_BuildValue("(nOOOOO)", n, times, values, value_offsets, metas, meta_offsets);
            Py_DECREF(columns);
        }
        Py_DECREF(times);
    }
    column_free(&c);
    return result;
}

typedef struct {
    PyObject_HEAD
    Column column;
    int busy; /* add() runs without the GIL: a second thread on the same column is refused */
} VariantColumn;

static int VariantColumn_init(VariantColumn *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":VariantColumn", kwlist))
        return -1;
    column_free(&self->column);
    if (column_init(&self->column)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void VariantColumn_dealloc(VariantColumn *self) {
    column_free(&self->column);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int VariantColumn_enter(VariantColumn *self) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "VariantColumn is in use by another thread");
        return -1;
    }
    if (self->column.value_offsets.len == 0) { /* not initialised (a subclass that skipped __init__) */
        PyErr_SetString(PyExc_RuntimeError, "VariantColumn was not initialised");
        return -1;
    }
    self->busy = 1;
    return 0;
}

static PyObject *VariantColumn_add(VariantColumn *self, PyObject *entries) {
    if (VariantColumn_enter(self))
        return NULL;
    PyObject *result = column_add(&self->column, entries);
    self->busy = 0;
    return result;
}

static PyObject *VariantColumn_take(VariantColumn *self, PyObject *unused) {
    if (VariantColumn_enter(self))
        return NULL;
    Column *c = &self->column;
    PyObject *result = column_tuple(c);
    if (result != NULL) {
        c->rows = 0;
        c->values.len = c->metas.len = 0;
        c->value_offsets.len = c->meta_offsets.len = 4; /* the leading 0 */
    }
    self->busy = 0;
    return result;
}

static PyObject *VariantColumn_rows(VariantColumn *self, void *closure) { return PyLong_FromSsize_t(self->column.rows); }

static PyMethodDef VariantColumn_methods[] = {
    {"add", (PyCFunction)VariantColumn_add, METH_O,
     "add(entries) -> times or None.\n\n"
     "Every `[EventTime, record]` entry's record as a VARIANT row of the column; returns their times (int64\n"
     "nanoseconds), or None, adding nothing, when the Python path must decide."},
    {"take", (PyCFunction)VariantColumn_take, METH_NOARGS,
     "take() -> (count, values, value_offsets, metadata, metadata_offsets): the rows added since the last\n"
     "take, as Arrow binary buffers (int32 offsets); the column is empty after it."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef VariantColumn_getset[] = {
    {"rows", (getter)VariantColumn_rows, NULL, "rows added since the last take()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject VariantColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logport.spark._variant_encode.VariantColumn",
    .tp_basicsize = sizeof(VariantColumn),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "VARIANT column buffers that the records of many batches' entries are encoded onto, one take()\n"
              "per Arrow batch; a run of records with the same top-level keys shares their sort and metadata.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)VariantColumn_init,
    .tp_dealloc = (destructor)VariantColumn_dealloc,
    .tp_methods = VariantColumn_methods,
    .tp_getset = VariantColumn_getset,
};

static PyMethodDef methods[] = {
    {"encode_entries", encode_entries, METH_VARARGS,
     "encode_entries(entries) -> (count, times, values, value_offsets, metadata, metadata_offsets) or None.\n\n"
     "Every `[EventTime, record]` entry's record as a VARIANT: the column buffers (int64 nanoseconds, binary\n"
     "data with int32 offsets); None when the Python path must decide."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_variant_encode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__variant_encode(void) {
    if (PyType_Ready(&VariantColumnType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "VariantColumn", (PyObject *)&VariantColumnType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
