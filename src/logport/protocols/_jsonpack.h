/* JSON text to msgpack bytes in one pass, as orjson.loads + ormsgpack.packb (or msgpack's Packer) make
 * them, byte for byte, for the C passes of the Lumberjack and logjam listeners (_lumberjack_scan.c,
 * _logjam_scan.c include this file). No Python object is made and the GIL is not needed.
 *
 * Every function answers 0 (done) or -1: -1 means "the Python path decides", never an error of its own.
 * So what the C pass accepts must be a subset of what orjson accepts, with the same value: integers in
 * [-2**63, 2**64) stay integers (msgpack's smallest form), every other number is a float64 correctly rounded
 * (strtod), -0 is the integer 0, a number that rounds to infinity is refused; strings must be valid UTF-8
 * (no encoded surrogates) with paired \u surrogates; only the four JSON whitespace bytes. Anything orjson
 * keeps in a form this pass does not reproduce is refused here too: duplicate keys (a dict keeps the first
 * key's place and the last value), nesting past the caller's limit.
 *
 * Containers are written with a 5-byte placeholder header and fixed up in one linear pass (jp_finish),
 * so a map's count need not be known before its contents are written.
 */
#ifndef LOGPORT_JSONPACK_H
#define LOGPORT_JSONPACK_H

#include <locale.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JP_PLACEHOLDER 5

typedef struct {
    size_t pos;      /* offset of the 5-byte placeholder */
    uint32_t count;  /* elements (maps: pairs) */
    unsigned char map;
} jp_fixup;

typedef struct {
    unsigned char *data;
    size_t len, cap;
    jp_fixup *fix;
    size_t nfix, capfix;
} jp_buf;

typedef struct {
    const jp_buf *buf;
    size_t off;
    size_t len;
    uint64_t hash;
} jp_key;

typedef struct {
    const unsigned char *p, *end;
    int max_depth;    /* containers, the outermost object counting as 1 */
    jp_key *keys;     /* keys of the open objects, for duplicate detection */
    size_t nkeys, capkeys;
    char *num;        /* scratch for strtod */
    size_t capnum;
} jp_parser;

/* The "C" locale for strtod_l (a decimal point whatever the process's LC_NUMERIC), made once at import. */
static locale_t jp_c_locale = (locale_t)0;

static int jp_init(void) {
    if (jp_c_locale == (locale_t)0)
        jp_c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    return jp_c_locale == (locale_t)0 ? -1 : 0;
}

static void jp_buf_free(jp_buf *b) {
    free(b->data);
    free(b->fix);
    memset(b, 0, sizeof(*b));
}

static int jp_reserve(jp_buf *b, size_t extra) {
    if (b->cap - b->len >= extra)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    unsigned char *data = realloc(b->data, cap);
    if (data == NULL)
        return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int jp_put(jp_buf *b, const void *src, size_t n) {
    if (jp_reserve(b, n))
        return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static inline void jp_be(unsigned char *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (unsigned char)v;
        v >>= 8;
    }
}

static int jp_byte(jp_buf *b, unsigned char c) {
    if (jp_reserve(b, 1))
        return -1;
    b->data[b->len++] = c;
    return 0;
}

/* msgpack headers, smallest form, as msgpack-python and ormsgpack write them */

static int jp_str_header_size(size_t n) {
    return n < 32 ? 1 : n < 0x100 ? 2 : n < 0x10000 ? 3 : 5;
}

static void jp_write_str_header(unsigned char *p, size_t n) {
    if (n < 32) {
        p[0] = (unsigned char)(0xa0 | n);
    } else if (n < 0x100) {
        p[0] = 0xd9;
        p[1] = (unsigned char)n;
    } else if (n < 0x10000) {
        p[0] = 0xda;
        jp_be(p + 1, n, 2);
    } else {
        p[0] = 0xdb;
        jp_be(p + 1, n, 4);
    }
}

static int jp_str(jp_buf *b, const void *s, size_t n) {
    if (n > 0xffffffffu || jp_reserve(b, 5 + n))
        return -1;
    jp_write_str_header(b->data + b->len, n);
    b->len += jp_str_header_size(n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

static int jp_uint(jp_buf *b, uint64_t v) {
    if (jp_reserve(b, 9))
        return -1;
    unsigned char *p = b->data + b->len;
    if (v < 0x80) {
        p[0] = (unsigned char)v;
        b->len += 1;
    } else if (v < 0x100) {
        p[0] = 0xcc;
        p[1] = (unsigned char)v;
        b->len += 2;
    } else if (v < 0x10000) {
        p[0] = 0xcd;
        jp_be(p + 1, v, 2);
        b->len += 3;
    } else if (v < 0x100000000ull) {
        p[0] = 0xce;
        jp_be(p + 1, v, 4);
        b->len += 5;
    } else {
        p[0] = 0xcf;
        jp_be(p + 1, v, 8);
        b->len += 9;
    }
    return 0;
}

static int jp_int(jp_buf *b, int64_t v) {
    if (v >= 0)
        return jp_uint(b, (uint64_t)v);
    if (jp_reserve(b, 9))
        return -1;
    unsigned char *p = b->data + b->len;
    if (v >= -32) {
        p[0] = (unsigned char)(int8_t)v;
        b->len += 1;
    } else if (v >= -128) {
        p[0] = 0xd0;
        p[1] = (unsigned char)(int8_t)v;
        b->len += 2;
    } else if (v >= -32768) {
        p[0] = 0xd1;
        jp_be(p + 1, (uint64_t)v, 2);
        b->len += 3;
    } else if (v >= -2147483648ll) {
        p[0] = 0xd2;
        jp_be(p + 1, (uint64_t)v, 4);
        b->len += 5;
    } else {
        p[0] = 0xd3;
        jp_be(p + 1, (uint64_t)v, 8);
        b->len += 9;
    }
    return 0;
}

static int jp_float(jp_buf *b, double d) {
    uint64_t bits;
    memcpy(&bits, &d, 8);
    if (jp_reserve(b, 9))
        return -1;
    b->data[b->len] = 0xcb;
    jp_be(b->data + b->len + 1, bits, 8);
    b->len += 9;
    return 0;
}

/* A container's placeholder; its count is set when it closes. Returns the fixup's index or -1. */
static long jp_open(jp_buf *b, unsigned char map) {
    if (b->nfix == b->capfix) {
        size_t cap = b->capfix ? b->capfix * 2 : 16;
        jp_fixup *fix = realloc(b->fix, cap * sizeof(*fix));
        if (fix == NULL)
            return -1;
        b->fix = fix;
        b->capfix = cap;
    }
    if (jp_reserve(b, JP_PLACEHOLDER))
        return -1;
    jp_fixup *f = &b->fix[b->nfix];
    f->pos = b->len;
    f->count = 0;
    f->map = map;
    b->data[b->len] = 0xc1; /* never used in msgpack: a value's span noted in the record is no str or number */
    b->len += JP_PLACEHOLDER;
    return (long)b->nfix++;
}

static int jp_header_size(uint32_t count) {
    return count < 16 ? 1 : count < 0x10000 ? 3 : 5;
}

static void jp_write_header(unsigned char *p, const jp_fixup *f) {
    uint32_t n = f->count;
    if (n < 16) {
        p[0] = (unsigned char)((f->map ? 0x80 : 0x90) | n);
    } else if (n < 0x10000) {
        p[0] = f->map ? 0xde : 0xdc;
        jp_be(p + 1, n, 2);
    } else {
        p[0] = f->map ? 0xdf : 0xdd;
        jp_be(p + 1, n, 4);
    }
}

/* The size of b's bytes once its placeholders are fixed up. */
static size_t jp_final_size(const jp_buf *b) {
    size_t size = b->len;
    for (size_t i = 0; i < b->nfix; i++)
        size -= JP_PLACEHOLDER - jp_header_size(b->fix[i].count);
    return size;
}

/* b's bytes with real headers, appended to dst (one pass); b is left empty for the next value. */
static int jp_finish(jp_buf *b, jp_buf *dst) {
    size_t size = jp_final_size(b);
    if (jp_reserve(dst, size))
        return -1;
    unsigned char *out = dst->data + dst->len;
    size_t from = 0;
    for (size_t i = 0; i < b->nfix; i++) {
        const jp_fixup *f = &b->fix[i];
        memcpy(out, b->data + from, f->pos - from);
        out += f->pos - from;
        jp_write_header(out, f);
        out += jp_header_size(f->count);
        from = f->pos + JP_PLACEHOLDER;
    }
    memcpy(out, b->data + from, b->len - from);
    dst->len += size;
    b->len = 0;
    b->nfix = 0;
    return 0;
}

/* --- parsing --- */

static inline void jp_ws(jp_parser *ps) {
    const unsigned char *p = ps->p, *end = ps->end;
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    ps->p = p;
}

/* The length of the valid UTF-8 sequence at p (a non-ASCII lead byte), 0 if it is not one. */
static inline int jp_utf8(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    ptrdiff_t left = end - p;
    if (c >= 0xc2 && c <= 0xdf) {
        return left >= 2 && (p[1] & 0xc0) == 0x80 ? 2 : 0;
    }
    if (c >= 0xe0 && c <= 0xef) {
        if (left < 3 || (p[2] & 0xc0) != 0x80)
            return 0;
        unsigned char lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        return p[1] >= lo && p[1] <= hi ? 3 : 0;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (left < 4 || (p[2] & 0xc0) != 0x80 || (p[3] & 0xc0) != 0x80)
            return 0;
        unsigned char lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        return p[1] >= lo && p[1] <= hi ? 4 : 0;
    }
    return 0;
}

/* Whether [p, end) is all valid UTF-8. */
static int jp_valid_utf8(const unsigned char *p, const unsigned char *end) {
    while (p < end) {
        if (*p < 0x80) {
            p++;
            continue;
        }
        int n = jp_utf8(p, end);
        if (!n)
            return 0;
        p += n;
    }
    return 1;
}

static int jp_hex4(const unsigned char *p, const unsigned char *end, uint32_t *out) {
    if (end - p < 4)
        return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = (v << 4) | d;
    }
    *out = v;
    return 0;
}

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* The first byte at or after q that is a quote, a backslash, a control byte or not ASCII (or a position
 * less than 16 bytes before end): whole blocks of plain string bytes are skipped without a byte loop. */
static inline const unsigned char *jp_skip_plain(const unsigned char *q, const unsigned char *end);

/* Whether any of 8 bytes is a quote, a backslash, a control byte or not ASCII (SWAR: no byte loop). */
static inline uint64_t jp_special8(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    uint64_t quote = v ^ (ones * '"'), backslash = v ^ (ones * '\\');
    return (v | ((v - ones * 0x20) & ~v) | ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash)) & high;
}

static inline const unsigned char *jp_skip_plain(const unsigned char *q, const unsigned char *end) {
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - q >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)q);
        /* signed: bytes below 0x20 and from 0x80 up are both "less than" 0x20 */
        int mask = _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                                  _mm_cmplt_epi8(v, space)));
        if (mask)
            return q + __builtin_ctz((unsigned)mask);
        q += 16;
    }
#endif
    while (end - q >= 8 && !jp_special8(q))
        q += 8;
    return q;
}

/* The JSON string at ps->p (its opening quote) as a msgpack str; *len gets the decoded length. */
static int jp_string(jp_parser *ps, jp_buf *b, size_t *len) {
    const unsigned char *s = ps->p + 1, *q = s, *end = ps->end;
    for (;;) {
        q = jp_skip_plain(q, end);
        if (q >= end)
            return -1;
        unsigned char c = *q;
        if (c == '"')
            break;
        if (c == '\\')
            goto escaped;
        if (c < 0x20)
            return -1;
        if (c < 0x80) {
            q++;
            continue;
        }
        int n = jp_utf8(q, end);
        if (!n)
            return -1;
        q += n;
    }
    *len = (size_t)(q - s);
    ps->p = q + 1;
    return jp_str(b, s, *len);

escaped:
    /* find the closing quote: the raw length bounds the decoded one */
    while (q < end && *q != '"') {
        if (*q == '\\')
            q++;
        q++;
    }
    if (q >= end)
        return -1;
    size_t raw = (size_t)(q - s);
    if (raw > 0xffffffffu)
        return -1;
    int reserved = jp_str_header_size(raw);
    if (jp_reserve(b, reserved + raw))
        return -1;
    unsigned char *start = b->data + b->len + reserved, *out = start;
    const unsigned char *p = s;
    while (p < q) {
        unsigned char c = *p;
        if (c == '\\') {
            p++; /* p < q: the escaped byte is before the closing quote */
            switch (*p) {
            case '"': *out++ = '"'; p++; break;
            case '\\': *out++ = '\\'; p++; break;
            case '/': *out++ = '/'; p++; break;
            case 'b': *out++ = '\b'; p++; break;
            case 'f': *out++ = '\f'; p++; break;
            case 'n': *out++ = '\n'; p++; break;
            case 'r': *out++ = '\r'; p++; break;
            case 't': *out++ = '\t'; p++; break;
            case 'u': {
                uint32_t cp;
                if (jp_hex4(p + 1, q, &cp))
                    return -1;
                p += 5;
                if (cp >= 0xdc00 && cp <= 0xdfff)
                    return -1; /* a low surrogate first */
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    uint32_t low;
                    if (q - p < 6 || p[0] != '\\' || p[1] != 'u' || jp_hex4(p + 2, q, &low))
                        return -1;
                    if (low < 0xdc00 || low > 0xdfff)
                        return -1;
                    p += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
                }
                if (cp < 0x80) {
                    *out++ = (unsigned char)cp;
                } else if (cp < 0x800) {
                    *out++ = (unsigned char)(0xc0 | (cp >> 6));
                    *out++ = (unsigned char)(0x80 | (cp & 0x3f));
                } else if (cp < 0x10000) {
                    *out++ = (unsigned char)(0xe0 | (cp >> 12));
                    *out++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
                    *out++ = (unsigned char)(0x80 | (cp & 0x3f));
                } else {
                    *out++ = (unsigned char)(0xf0 | (cp >> 18));
                    *out++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
                    *out++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
                    *out++ = (unsigned char)(0x80 | (cp & 0x3f));
                }
                break;
            }
            default:
                return -1;
            }
        } else if (c < 0x20) {
            return -1;
        } else if (c < 0x80) {
            *out++ = c;
            p++;
        } else {
            int n = jp_utf8(p, q);
            if (!n)
                return -1;
            memcpy(out, p, n);
            out += n;
            p += n;
        }
    }
    size_t n = (size_t)(out - start);
    int size = jp_str_header_size(n);
    if (size < reserved)
        memmove(start - reserved + size, start, n);
    jp_write_str_header(b->data + b->len, n);
    b->len += size + n;
    *len = n;
    ps->p = q + 1;
    return 0;
}

static inline int jp_digit(const unsigned char *p, const unsigned char *end) {
    return p < end && *p >= '0' && *p <= '9';
}

static int jp_number(jp_parser *ps, jp_buf *b) {
    const unsigned char *s = ps->p, *q = s, *end = ps->end;
    int negative = 0, is_float = 0;
    if (*q == '-') {
        negative = 1;
        q++;
    }
    if (!jp_digit(q, end))
        return -1;
    const unsigned char *digits = q;
    if (*q == '0') {
        q++;
        if (jp_digit(q, end))
            return -1; /* leading zero */
    } else {
        while (jp_digit(q, end))
            q++;
    }
    const unsigned char *digits_end = q;
    if (q < end && *q == '.') {
        q++;
        if (!jp_digit(q, end))
            return -1;
        while (jp_digit(q, end))
            q++;
        is_float = 1;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < end && (*q == '+' || *q == '-'))
            q++;
        if (!jp_digit(q, end))
            return -1;
        while (jp_digit(q, end))
            q++;
        is_float = 1;
    }
    ps->p = q;
    if (!is_float) {
        uint64_t v = 0;
        int overflow = 0;
        for (const unsigned char *d = digits; d < digits_end; d++) {
            unsigned digit = *d - '0';
            if (v > (UINT64_MAX - digit) / 10) {
                overflow = 1;
                break;
            }
            v = v * 10 + digit;
        }
        if (!overflow) {
            if (!negative)
                return jp_uint(b, v);
            if (v <= 9223372036854775808ull)
                return jp_int(b, v == 9223372036854775808ull ? INT64_MIN : -(int64_t)v);
        }
        /* past 64 bits: orjson makes it a float */
    }
    size_t n = (size_t)(q - s);
    if (n + 1 > ps->capnum) {
        char *num = realloc(ps->num, n + 1);
        if (num == NULL)
            return -1;
        ps->num = num;
        ps->capnum = n + 1;
    }
    memcpy(ps->num, s, n);
    ps->num[n] = 0;
    char *stop;
    double d = strtod_l(ps->num, &stop, jp_c_locale);
    if (stop != ps->num + n || !isfinite(d))
        return -1; /* infinity: orjson refuses it */
    return jp_float(b, d);
}

static uint64_t jp_hash(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int jp_push_key(jp_parser *ps, const jp_buf *b, size_t off, size_t len) {
    if (ps->nkeys == ps->capkeys) {
        size_t cap = ps->capkeys ? ps->capkeys * 2 : 64;
        jp_key *keys = realloc(ps->keys, cap * sizeof(*keys));
        if (keys == NULL)
            return -1;
        ps->keys = keys;
        ps->capkeys = cap;
    }
    jp_key *k = &ps->keys[ps->nkeys++];
    k->buf = b;
    k->off = off;
    k->len = len;
    k->hash = 0; /* hashed only when an object has many keys (jp_unique_keys) */
    return 0;
}

static int jp_key_cmp(const void *a, const void *b) {
    const jp_key *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return x->len < y->len ? -1 : x->len > y->len;
}

static int jp_same_key(const jp_key *x, const jp_key *y) {
    return x->hash == y->hash && x->len == y->len &&
           memcmp(x->buf->data + x->off, y->buf->data + y->off, x->len) == 0;
}

/* -1 if keys[from:] holds a key twice (sorting them, so an object of n keys costs n log n). */
static int jp_unique_keys(jp_parser *ps, size_t from) {
    jp_key *keys = ps->keys + from;
    size_t n = ps->nkeys - from;
    if (n <= 16) {
        for (size_t i = 1; i < n; i++)
            for (size_t j = 0; j < i; j++)
                if (keys[i].len == keys[j].len &&
                    memcmp(keys[i].buf->data + keys[i].off, keys[j].buf->data + keys[j].off, keys[i].len) == 0)
                    return -1;
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        keys[i].hash = jp_hash(keys[i].buf->data + keys[i].off, keys[i].len);
    qsort(keys, n, sizeof(*keys), jp_key_cmp);
    for (size_t i = 1; i < n; i++)
        if (jp_same_key(&keys[i], &keys[i - 1]))
            return -1;
    return 0;
}

static int jp_value(jp_parser *ps, jp_buf *b, int depth);

static int jp_literal(jp_parser *ps, jp_buf *b, const char *word, size_t n, unsigned char code) {
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return -1;
    ps->p += n;
    return jp_byte(b, code);
}

/* The object at ps->p ('{'), `depth` containers deep once open. */
static int jp_object(jp_parser *ps, jp_buf *b, int depth) {
    if (depth > ps->max_depth)
        return -1;
    long fix = jp_open(b, 1);
    if (fix < 0)
        return -1;
    ps->p++;
    jp_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return 0;
    }
    size_t first_key = ps->nkeys;
    uint32_t count = 0;
    for (;;) {
        if (ps->p >= ps->end || *ps->p != '"')
            return -1;
        size_t len;
        if (jp_string(ps, b, &len) || jp_push_key(ps, b, b->len - len, len))
            return -1;
        jp_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':')
            return -1;
        ps->p++;
        if (jp_value(ps, b, depth))
            return -1;
        count++;
        jp_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            jp_ws(ps);
            continue;
        }
        if (ps->p < ps->end && *ps->p == '}') {
            ps->p++;
            break;
        }
        return -1;
    }
    if (jp_unique_keys(ps, first_key))
        return -1;
    ps->nkeys = first_key;
    b->fix[fix].count = count;
    return 0;
}

static int jp_array(jp_parser *ps, jp_buf *b, int depth) {
    if (depth > ps->max_depth)
        return -1;
    long fix = jp_open(b, 0);
    if (fix < 0)
        return -1;
    ps->p++;
    jp_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        return 0;
    }
    uint32_t count = 0;
    for (;;) {
        if (jp_value(ps, b, depth))
            return -1;
        if (++count == 0xffffffffu)
            return -1;
        jp_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            break;
        }
        return -1;
    }
    b->fix[fix].count = count;
    return 0;
}

/* Any JSON value (after optional whitespace) inside `depth` open containers. */
static int jp_value(jp_parser *ps, jp_buf *b, int depth) {
    jp_ws(ps);
    if (ps->p >= ps->end)
        return -1;
    switch (*ps->p) {
    case '{':
        return jp_object(ps, b, depth + 1);
    case '[':
        return jp_array(ps, b, depth + 1);
    case '"': {
        size_t len;
        return jp_string(ps, b, &len);
    }
    case 't':
        return jp_literal(ps, b, "true", 4, 0xc3);
    case 'f':
        return jp_literal(ps, b, "false", 5, 0xc2);
    case 'n':
        return jp_literal(ps, b, "null", 4, 0xc0);
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
            return jp_number(ps, b);
        return -1;
    }
}

/* --- a top-level JSON object with keys the caller wants: one whose value goes to another buffer (and is left
 * out of the record, as dict.pop does) and some whose value's span in the record is noted --- */

#define JP_MAX_NOTED 2

typedef struct {
    const char *divert;         /* this key's value goes to `diverted`, not the record (NULL: none) */
    jp_buf *diverted;
    int diverted_found;
    const char *noted[JP_MAX_NOTED];   /* these keys' values' spans in the record are noted (NULL: none) */
    size_t noted_start[JP_MAX_NOTED], noted_end[JP_MAX_NOTED];
    int noted_found[JP_MAX_NOTED];
} jp_top;

static int jp_key_is(const jp_buf *b, size_t len, const char *name) {
    return name != NULL && strlen(name) == len && memcmp(b->data + b->len - len, name, len) == 0;
}

/* The document [p, end): a JSON object (whitespace around it) into `record`. */
static int jp_top_object(jp_parser *ps, const unsigned char *p, const unsigned char *end, jp_buf *record,
                         jp_top *top) {
    ps->p = p;
    ps->end = end;
    ps->nkeys = 0;
    top->diverted_found = 0;
    for (int i = 0; i < JP_MAX_NOTED; i++)
        top->noted_found[i] = 0;
    jp_ws(ps);
    if (ps->p >= end || *ps->p != '{' || ps->max_depth < 1)
        return -1;
    long fix = jp_open(record, 1);
    if (fix < 0)
        return -1;
    ps->p++;
    jp_ws(ps);
    uint32_t count = 0;
    if (ps->p < end && *ps->p == '}') {
        ps->p++;
    } else {
        for (;;) {
            if (ps->p >= end || *ps->p != '"')
                return -1;
            size_t len, key_start = record->len;
            if (jp_string(ps, record, &len))
                return -1;
            int divert = jp_key_is(record, len, top->divert);
            if (divert) {
                if (top->diverted_found)
                    return -1; /* twice: a dict keeps the last, leave it to Python */
                top->diverted_found = 1;
                record->len = key_start;
            } else if (jp_push_key(ps, record, record->len - len, len)) {
                return -1;
            }
            int noted = -1;
            for (int i = 0; i < JP_MAX_NOTED && !divert; i++)
                if (jp_key_is(record, len, top->noted[i]))
                    noted = i;
            jp_ws(ps);
            if (ps->p >= end || *ps->p != ':')
                return -1;
            ps->p++;
            if (divert) {
                if (jp_value(ps, top->diverted, 1))
                    return -1;
            } else {
                jp_ws(ps);
                size_t value_start = record->len;
                if (jp_value(ps, record, 1))
                    return -1;
                if (noted >= 0) {
                    top->noted_found[noted] = 1;
                    top->noted_start[noted] = value_start;
                    top->noted_end[noted] = record->len;
                }
                count++;
            }
            jp_ws(ps);
            if (ps->p < end && *ps->p == ',') {
                ps->p++;
                jp_ws(ps);
                continue;
            }
            if (ps->p < end && *ps->p == '}') {
                ps->p++;
                break;
            }
            return -1;
        }
    }
    jp_ws(ps);
    if (ps->p != end || jp_unique_keys(ps, 0))
        return -1;
    ps->nkeys = 0;
    record->fix[fix].count = count;
    return 0;
}

static int jp_parser_init(jp_parser *ps, int max_depth) {
    memset(ps, 0, sizeof(*ps));
    ps->max_depth = max_depth;
    return jp_c_locale == (locale_t)0 ? -1 : 0; /* jp_init() at import */
}

static void jp_parser_free(jp_parser *ps) {
    free(ps->keys);
    free(ps->num);
    memset(ps, 0, sizeof(*ps));
}

#endif
