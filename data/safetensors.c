// data/safetensors.c: see safetensors.h. One small JSON reader (RFC 8259) serves both files. It
// checks the grammar of everything it reads, skipped values included, so a header that parses
// is JSON; it keeps only what import_hf needs.
#include "safetensors.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"

// ----------------------------------------------------------------------------------------
// JSON

typedef struct {
    const uint8_t *p, *start, *end;   // the text being read; p: the next byte
    char *err;
    size_t err_len;
} Json;

#define JSON_MAX_DEPTH 64

static int json_fail(const Json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int json_fail(const Json *j, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return fail_with(j->err, j->err_len, "at byte %zu of the JSON: %s", (size_t)(j->p - j->start), what);
}

static void json_ws(Json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

// the next byte after whitespace, or -1 at the end
static int json_peek(Json *j) {
    json_ws(j);
    return j->p < j->end ? *j->p : -1;
}

static int json_expect(Json *j, char c) {
    int next = json_peek(j);
    if (next == (uint8_t)c) {
        j->p++;
        return 0;
    }
    if (next < 0) return json_fail(j, "expected '%c', found the end", c);
    return json_fail(j, "expected '%c', found '%c'", c, next >= 0x20 && next < 0x7F ? next : '?');
}

static int json_accept(Json *j, char c) {
    if (json_peek(j) != (uint8_t)c) return 0;
    j->p++;
    return 1;
}

static int is_digit(const Json *j) { return j->p < j->end && *j->p >= '0' && *j->p <= '9'; }

// the length of the valid UTF-8 sequence at p (shortest form, no surrogates), or 0
static size_t utf8_sequence(const uint8_t *p, const uint8_t *end) {
    uint8_t c = p[0];
    if (c < 0x80) return 1;
    size_t n;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)(end - p) < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

static int json_hex4(Json *j, uint32_t *cp) {
    *cp = 0;
    for (int k = 0; k < 4; k++) {
        int c = j->p < j->end ? *j->p : -1, d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return json_fail(j, "a \\u escape needs 4 hex digits");
        j->p++;
        *cp = *cp << 4 | (uint32_t)d;
    }
    return 0;
}

typedef struct {
    char *s;
    size_t len, cap;
} Str;

static void str_put(Str *b, const void *src, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        b->s = realloc(b->s, cap);
        if (!b->s) die("out of memory reading a JSON string");
        b->cap = cap;
    }
    memcpy(b->s + b->len, src, n);
    b->len += n;
    b->s[b->len] = '\0';
}

// A string, unescaped into *out (malloc'ed, NUL-terminated) or, with out NULL, only checked.
// Kept strings may not hold U+0000: they are C strings.
static int json_string(Json *j, char **out) {
    Str b = {0};
    if (out) {
        *out = NULL;
        str_put(&b, "", 0);
    }
    if (json_expect(j, '"')) return -1;
    for (;;) {
        if (j->p >= j->end) { free(b.s); return json_fail(j, "unterminated string"); }
        uint8_t c = *j->p;
        if (c == '"') { j->p++; break; }
        if (c < 0x20) { free(b.s); return json_fail(j, "control byte 0x%02X in a string (JSON escapes it)", c); }
        if (c != '\\') {
            size_t n = utf8_sequence(j->p, j->end);
            if (!n) { free(b.s); return json_fail(j, "invalid UTF-8 in a string"); }
            if (out) str_put(&b, j->p, n);
            j->p += n;
            continue;
        }
        j->p++;
        int e = j->p < j->end ? *j->p++ : -1;
        const char *simple = NULL;
        switch (e) {
            case '"': simple = "\""; break;
            case '\\': simple = "\\"; break;
            case '/': simple = "/"; break;
            case 'b': simple = "\b"; break;
            case 'f': simple = "\f"; break;
            case 'n': simple = "\n"; break;
            case 'r': simple = "\r"; break;
            case 't': simple = "\t"; break;
            case 'u': break;
            default: free(b.s); return json_fail(j, "unknown escape in a string");
        }
        if (simple) {
            if (out) str_put(&b, simple, 1);
            continue;
        }
        uint32_t cp, low;
        if (json_hex4(j, &cp)) { free(b.s); return -1; }
        if (cp >= 0xDC00 && cp <= 0xDFFF) { free(b.s); return json_fail(j, "a lone low surrogate \\u%04X", cp); }
        if (cp >= 0xD800 && cp <= 0xDBFF) {   // a pair: \uD8xx\uDCxx
            if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u') {
                free(b.s);
                return json_fail(j, "the high surrogate \\u%04X lacks its low half", cp);
            }
            j->p += 2;
            if (json_hex4(j, &low)) { free(b.s); return -1; }
            if (low < 0xDC00 || low > 0xDFFF) {
                free(b.s);
                return json_fail(j, "the high surrogate \\u%04X lacks its low half", cp);
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        if (!out) continue;
        if (cp == 0) { free(b.s); return json_fail(j, "\\u0000 in a name"); }
        uint8_t u[4];
        size_t n;
        if (cp < 0x80) { u[0] = (uint8_t)cp; n = 1; }
        else if (cp < 0x800) { u[0] = (uint8_t)(0xC0 | cp >> 6); u[1] = (uint8_t)(0x80 | (cp & 0x3F)); n = 2; }
        else if (cp < 0x10000) {
            u[0] = (uint8_t)(0xE0 | cp >> 12); u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
            u[2] = (uint8_t)(0x80 | (cp & 0x3F)); n = 3;
        } else {
            u[0] = (uint8_t)(0xF0 | cp >> 18); u[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
            u[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)); u[3] = (uint8_t)(0x80 | (cp & 0x3F)); n = 4;
        }
        str_put(&b, u, n);
    }
    if (out) *out = b.s;
    return 0;
}

// a number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?; *integer: no fraction, no exponent
static int json_number(Json *j, int *integer) {
    json_ws(j);
    if (j->p < j->end && *j->p == '-') j->p++;
    if (!is_digit(j)) return json_fail(j, "expected a value");
    if (*j->p == '0') j->p++;
    else while (is_digit(j)) j->p++;
    *integer = 1;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (!is_digit(j)) return json_fail(j, "a number needs digits after its '.'");
        while (is_digit(j)) j->p++;
        *integer = 0;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (!is_digit(j)) return json_fail(j, "a number needs digits in its exponent");
        while (is_digit(j)) j->p++;
        *integer = 0;
    }
    return 0;
}

// an integer in [lo, hi]; `what` names it in messages
static int json_uint(Json *j, const char *what, uint64_t lo, uint64_t hi, uint64_t *v) {
    json_ws(j);
    const uint8_t *start = j->p;
    int c = j->p < j->end ? *j->p : -1, integer;
    if (c != '-' && !(c >= '0' && c <= '9')) return json_fail(j, "%s must be an integer", what);
    if (json_number(j, &integer)) return -1;
    int len = (int)(j->p - start) < 40 ? (int)(j->p - start) : 40;
    if (!integer) return json_fail(j, "%s: %.*s is not an integer", what, len, (const char *)start);
    int out_of_range = c == '-' && j->p - start > 2;   // every negative but -0
    uint64_t x = 0;
    for (const uint8_t *q = start + (c == '-'); q < j->p && !out_of_range; q++) {
        if (x > (UINT64_MAX - (uint64_t)(*q - '0')) / 10) out_of_range = 1;
        else x = x * 10 + (uint64_t)(*q - '0');
    }
    if (out_of_range || x < lo || x > hi)
        return json_fail(j, "%s: %.*s is out of range [%llu, %llu]", what, len, (const char *)start,
                         (unsigned long long)lo, (unsigned long long)hi);
    *v = x;
    return 0;
}

static int json_literal(Json *j, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0) return json_fail(j, "expected a value");
    j->p += n;
    return 0;
}

// checks and steps over one value of any kind
static int json_skip(Json *j, int depth) {
    if (depth > JSON_MAX_DEPTH) return json_fail(j, "nested deeper than %d", JSON_MAX_DEPTH);
    int c = json_peek(j), integer;
    switch (c) {
        case -1: return json_fail(j, "expected a value, found the end");
        case '"': return json_string(j, NULL);
        case 't': return json_literal(j, "true");
        case 'f': return json_literal(j, "false");
        case 'n': return json_literal(j, "null");
        case '{':
        case '[': {
            char close = c == '{' ? '}' : ']';
            j->p++;
            if (json_accept(j, close)) return 0;
            do {
                if (c == '{') {
                    if (json_peek(j) != '"') return json_fail(j, "expected a key");
                    if (json_string(j, NULL) || json_expect(j, ':')) return -1;
                }
                if (json_skip(j, depth + 1)) return -1;
            } while (json_accept(j, ','));
            return json_expect(j, close);
        }
        default: return json_number(j, &integer);
    }
}

// ----------------------------------------------------------------------------------------
// the safetensors header

// the format's dtypes, with their bits per value
static const struct { const char *name; int bits; } dtypes[] = {
    {"BOOL", 8}, {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8}, {"I8", 8},
    {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8},
    {"I16", 16}, {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32}, {"U32", 32}, {"F32", 32},
    {"C64", 64}, {"F64", 64}, {"I64", 64}, {"U64", 64}};

// "__metadata__": an object of strings
static int parse_metadata(Json *j) {
    if (json_expect(j, '{')) return -1;
    if (json_accept(j, '}')) return 0;
    do {
        if (json_peek(j) != '"') return json_fail(j, "expected a key in __metadata__");
        if (json_string(j, NULL) || json_expect(j, ':')) return -1;
        if (json_peek(j) != '"') return json_fail(j, "the values of __metadata__ must be strings");
        if (json_string(j, NULL)) return -1;
    } while (json_accept(j, ','));
    return json_expect(j, '}');
}

static void format_shape(char *buf, size_t n, const SafeTensor *t) {
    size_t at = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < t->ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%llu", d ? ", " : "", (unsigned long long)t->shape[d]);
    if (at < n) snprintf(buf + at, n - at, ")");
}

// one tensor's entry {"dtype": .., "shape": [..], "data_offsets": [begin, end]}, and its bytes
// against its shape and the data section
static int parse_tensor(Json *j, SafeTensor *t, uint64_t data_size) {
    static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
    int have[3] = {0, 0, 0};
    if (json_expect(j, '{')) return -1;
    if (!json_accept(j, '}')) {
        do {
            if (json_peek(j) != '"') return json_fail(j, "tensor %s: expected a key", t->name);
            char *key;
            if (json_string(j, &key)) return -1;
            int k = 0;
            while (k < 3 && strcmp(key, keys[k]) != 0) k++;
            if (k == 3) {
                int rc = json_fail(j, "tensor %s: unknown key \"%.64s\" (a tensor has dtype, shape and data_offsets)",
                                   t->name, key);
                free(key);
                return rc;
            }
            free(key);
            if (have[k]) return json_fail(j, "tensor %s: %s given twice", t->name, keys[k]);
            have[k] = 1;
            if (json_expect(j, ':')) return -1;
            if (k == 0) {
                if (json_peek(j) != '"') return json_fail(j, "tensor %s: dtype must be a string", t->name);
                char *name;
                if (json_string(j, &name)) return -1;
                for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]) && !t->dtype; d++)
                    if (!strcmp(name, dtypes[d].name)) {
                        t->dtype = dtypes[d].name;
                        t->dtype_bits = dtypes[d].bits;
                    }
                if (!t->dtype) {
                    int rc = json_fail(j, "tensor %s: unknown dtype \"%.32s\"", t->name, name);
                    free(name);
                    return rc;
                }
                free(name);
            } else if (k == 1) {
                if (json_expect(j, '[')) return -1;
                if (!json_accept(j, ']')) {
                    do {
                        if (t->ndim == SAFETENSORS_MAX_DIMS)
                            return json_fail(j, "tensor %s: more than %d dimensions", t->name, SAFETENSORS_MAX_DIMS);
                        if (json_uint(j, "a dimension", 0, UINT64_MAX, &t->shape[t->ndim])) return -1;
                        t->ndim++;
                    } while (json_accept(j, ','));
                    if (json_expect(j, ']')) return -1;
                }
            } else {
                if (json_expect(j, '[') || json_uint(j, "an offset", 0, UINT64_MAX, &t->begin) ||
                    json_expect(j, ',') || json_uint(j, "an offset", 0, UINT64_MAX, &t->end) ||
                    json_expect(j, ']'))
                    return -1;
            }
        } while (json_accept(j, ','));
        if (json_expect(j, '}')) return -1;
    }
    for (int k = 0; k < 3; k++)
        if (!have[k]) return json_fail(j, "tensor %s lacks its %s", t->name, keys[k]);

    char shape[256];
    format_shape(shape, sizeof(shape), t);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] && t->numel > UINT64_MAX / t->shape[d])
            return fail_with(j->err, j->err_len, "tensor %s: shape %s is too large", t->name, shape);
        t->numel *= t->shape[d];
    }
    if (t->numel > UINT64_MAX / (uint64_t)t->dtype_bits)
        return fail_with(j->err, j->err_len, "tensor %s: shape %s is too large", t->name, shape);
    uint64_t bits = t->numel * (uint64_t)t->dtype_bits;
    if (bits % 8)
        return fail_with(j->err, j->err_len, "tensor %s: %llu %s values (%d bits each) do not fill whole bytes",
                         t->name, (unsigned long long)t->numel, t->dtype, t->dtype_bits);
    if (t->end < t->begin)
        return fail_with(j->err, j->err_len, "tensor %s: data_offsets [%llu, %llu] end before they begin", t->name,
                         (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end - t->begin != bits / 8)
        return fail_with(j->err, j->err_len, "tensor %s: data_offsets [%llu, %llu] hold %llu bytes, but shape %s of "
                         "%s needs %llu", t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                         (unsigned long long)(t->end - t->begin), shape, t->dtype, (unsigned long long)(bits / 8));
    if (t->end > data_size)
        return fail_with(j->err, j->err_len, "tensor %s: data_offsets [%llu, %llu] run past the %llu bytes of data "
                         "in the file (truncated?)", t->name, (unsigned long long)t->begin,
                         (unsigned long long)t->end, (unsigned long long)data_size);
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const SafeTensor *)a)->name, ((const SafeTensor *)b)->name);
}

static int by_offset(const void *a, const void *b) {
    const SafeTensor *x = *(const SafeTensor *const *)a, *y = *(const SafeTensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

// names unique, and the tensors' bytes tiling the data section: no overlap, no gap, no tail
static int check_layout(const SafeTensorsHeader *h, char *err, size_t err_len) {
    for (size_t i = 1; i < h->n; i++)
        if (!strcmp(h->tensors[i - 1].name, h->tensors[i].name))
            return fail_with(err, err_len, "tensor %s is named twice in the header", h->tensors[i].name);
    const SafeTensor **order = malloc((h->n ? h->n : 1) * sizeof(*order));
    if (!order) die("out of memory for %zu tensors", h->n);
    for (size_t i = 0; i < h->n; i++) order[i] = &h->tensors[i];
    qsort(order, h->n, sizeof(*order), by_offset);
    uint64_t at = 0;
    int rc = 0;
    for (size_t i = 0; i < h->n && rc == 0; i++) {
        const SafeTensor *t = order[i];
        if (t->begin < at)
            rc = fail_with(err, err_len, "tensors %s [%llu, %llu] and %s [%llu, %llu] overlap in the data",
                           order[i - 1]->name, (unsigned long long)order[i - 1]->begin,
                           (unsigned long long)order[i - 1]->end, t->name, (unsigned long long)t->begin,
                           (unsigned long long)t->end);
        else if (t->begin > at)
            rc = fail_with(err, err_len, "bytes [%llu, %llu) of the data, before tensor %s, belong to no tensor",
                           (unsigned long long)at, (unsigned long long)t->begin, t->name);
        at = t->end;
    }
    free(order);
    if (rc == 0 && at != h->data_size)
        rc = fail_with(err, err_len, "%llu bytes after the last tensor's data belong to no tensor",
                       (unsigned long long)(h->data_size - at));
    return rc;
}

int safetensors_parse(SafeTensorsHeader *h, const uint8_t *file, size_t size, char *err, size_t err_len) {
    memset(h, 0, sizeof(*h));
    if (size < 8)
        return fail_with(err, err_len, "not a safetensors file: %zu bytes, shorter than the 8-byte header length", size);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = header_len << 8 | file[i];   // little-endian
    if (header_len > size - 8)
        return fail_with(err, err_len, "not a safetensors file: its header length %llu runs past the end of the "
                         "file (%zu bytes)", (unsigned long long)header_len, size);
    if (header_len > SAFETENSORS_MAX_HEADER)
        return fail_with(err, err_len, "a header of %llu bytes, more than the %d a safetensors file may have",
                         (unsigned long long)header_len, SAFETENSORS_MAX_HEADER);
    if (header_len == 0 || file[8] != '{')
        return fail_with(err, err_len, "not a safetensors file: the header does not begin with '{'");
    h->data_offset = 8 + header_len;
    h->data_size = size - 8 - header_len;
    Json j = {file + 8, file + 8, file + 8 + header_len, err, err_len};
    size_t cap = 0;
    int have_metadata = 0;
    j.p++;   // '{'
    if (!json_accept(&j, '}')) {
        do {
            if (json_peek(&j) != '"') { json_fail(&j, "expected a tensor name"); goto fail; }
            char *name;
            if (json_string(&j, &name)) goto fail;
            if (json_expect(&j, ':')) { free(name); goto fail; }
            if (!strcmp(name, "__metadata__")) {
                free(name);
                if (have_metadata) { json_fail(&j, "__metadata__ given twice"); goto fail; }
                have_metadata = 1;
                if (parse_metadata(&j)) goto fail;
                continue;
            }
            if (h->n == cap) {
                cap = cap ? 2 * cap : 64;
                SafeTensor *grown = realloc(h->tensors, cap * sizeof(SafeTensor));
                if (!grown) die("out of memory for %zu tensors", cap);
                h->tensors = grown;
            }
            SafeTensor *t = &h->tensors[h->n++];
            memset(t, 0, sizeof(*t));
            t->name = name;
            if (parse_tensor(&j, t, h->data_size)) goto fail;
        } while (json_accept(&j, ','));
        if (json_expect(&j, '}')) goto fail;
    }
    while (j.p < j.end && *j.p == ' ') j.p++;
    if (j.p != j.end) {
        json_fail(&j, "byte 0x%02X after the header's JSON object: only padding spaces may follow it", *j.p);
        goto fail;
    }
    if (h->n) qsort(h->tensors, h->n, sizeof(SafeTensor), by_name);   // (NULL when empty)
    if (check_layout(h, err, err_len)) goto fail;
    return 0;
fail:
    safetensors_free(h);
    return -1;
}

const SafeTensor *safetensors_find(const SafeTensorsHeader *h, const char *name) {
    SafeTensor key = {.name = (char *)name};
    return h->n ? bsearch(&key, h->tensors, h->n, sizeof(SafeTensor), by_name) : NULL;
}

void safetensors_free(SafeTensorsHeader *h) {
    for (size_t i = 0; i < h->n; i++) free(h->tensors[i].name);
    free(h->tensors);
    memset(h, 0, sizeof(*h));
}

// ----------------------------------------------------------------------------------------
// config.json

int hf_config_parse(HFConfig *c, const uint8_t *text, size_t n, char *err, size_t err_len) {
    static const char *const keys[] = {"n_head", "n_embd", "n_layer", "n_positions", "vocab_size"};
    int64_t *values[] = {&c->n_head, &c->n_embd, &c->n_layer, &c->n_positions, &c->vocab_size};
    enum { NKEYS = sizeof(keys) / sizeof(keys[0]) };
    for (int k = 0; k < NKEYS; k++) *values[k] = -1;
    Json j = {text, text, text + n, err, err_len};
    if (json_expect(&j, '{')) return -1;
    if (!json_accept(&j, '}')) {
        do {
            if (json_peek(&j) != '"') return json_fail(&j, "expected a key");
            char *key;
            if (json_string(&j, &key)) return -1;
            if (json_expect(&j, ':')) { free(key); return -1; }
            int k = 0;
            while (k < NKEYS && strcmp(key, keys[k]) != 0) k++;
            free(key);
            if (k == NKEYS) {
                if (json_skip(&j, 1)) return -1;
                continue;
            }
            if (*values[k] != -1) return json_fail(&j, "%s given twice", keys[k]);
            uint64_t v;
            if (json_uint(&j, keys[k], 1, INT32_MAX, &v)) return -1;
            *values[k] = (int64_t)v;
        } while (json_accept(&j, ','));
        if (json_expect(&j, '}')) return -1;
    }
    if (json_peek(&j) != -1) return json_fail(&j, "text after the JSON object");
    return 0;
}
