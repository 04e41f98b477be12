// data/safetensors.c: see safetensors.h. data/json.c reads both files: it checks the grammar of
// everything, skipped values included, so a header that parses is JSON; this file keeps only what
// import_hf needs.
#include "safetensors.h"

#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "json.h"

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
    int more;
    if (json_expect(j, '{')) return -1;
    for (size_t i = 0; (more = json_next(j, '}', i)) > 0; i++) {
        if (json_key(j, NULL)) return -1;
        if (json_peek(j) != '"') return json_fail(j, "the values of __metadata__ must be strings");
        if (json_string(j, NULL)) return -1;
    }
    return more;
}

static void format_shape(char *buf, size_t n, const SafeTensor *t) {
    size_t at = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < t->ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%llu", d ? ", " : "", (unsigned long long)t->shape[d]);
    if (at < n) snprintf(buf + at, n - at, ")");
}

// one tensor's entry {"dtype": .., "shape": [..], "data_offsets": [begin, end]}, and its bytes
// against its shape and the data section
static int parse_tensor(Json *j, SafeTensor *t, uint64_t data_size, ByteBuf *text) {
    static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
    int have[3] = {0, 0, 0}, more;
    if (json_expect(j, '{')) return -1;
    for (size_t i = 0; (more = json_next(j, '}', i)) > 0; i++) {
        if (json_key(j, text)) return -1;
        int k = 0;
        while (k < 3 && !json_string_is(text, keys[k])) k++;
        if (k == 3)
            return json_fail(j, "tensor %s: unknown key \"%.64s\" (a tensor has dtype, shape and data_offsets)",
                             t->name, (const char *)text->data);
        if (have[k]) return json_fail(j, "tensor %s: %s given twice", t->name, keys[k]);
        have[k] = 1;
        if (k == 0) {
            if (json_peek(j) != '"') return json_fail(j, "tensor %s: dtype must be a string", t->name);
            if (json_string(j, text)) return -1;
            for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]) && !t->dtype; d++)
                if (json_string_is(text, dtypes[d].name)) {
                    t->dtype = dtypes[d].name;
                    t->dtype_bits = dtypes[d].bits;
                }
            if (!t->dtype) return json_fail(j, "tensor %s: unknown dtype \"%.32s\"", t->name, (const char *)text->data);
        } else if (k == 1) {
            int dims;
            if (json_expect(j, '[')) return -1;
            for (size_t d = 0; (dims = json_next(j, ']', d)) > 0; d++) {
                if (t->ndim == SAFETENSORS_MAX_DIMS)
                    return json_fail(j, "tensor %s: more than %d dimensions", t->name, SAFETENSORS_MAX_DIMS);
                if (json_uint(j, "a dimension", 0, UINT64_MAX, &t->shape[t->ndim])) return -1;
                t->ndim++;
            }
            if (dims < 0) return -1;
        } else {
            if (json_expect(j, '[') || json_uint(j, "an offset", 0, UINT64_MAX, &t->begin) ||
                json_expect(j, ',') || json_uint(j, "an offset", 0, UINT64_MAX, &t->end) ||
                json_expect(j, ']'))
                return -1;
        }
    }
    if (more < 0) return -1;
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
    Json j = json_reader(file, 8 + header_len, 8, NULL, err, err_len);   // offsets in file bytes
    ByteBuf text = {0};   // the key or string being read
    size_t cap = 0;
    int have_metadata = 0, more;
    j.p++;   // '{'
    for (size_t i = 0; (more = json_next(&j, '}', i)) > 0; i++) {
        if (json_key(&j, &text)) goto fail;
        if (json_string_is(&text, "__metadata__")) {
            if (have_metadata) { json_fail(&j, "__metadata__ given twice"); goto fail; }
            have_metadata = 1;
            if (parse_metadata(&j)) goto fail;
            continue;
        }
        // names are C strings: a \u0000 would end one early and make two names equal
        if (memchr(text.data, 0, text.len)) { json_fail(&j, "a tensor name holds \\u0000"); goto fail; }
        if (h->n == cap) {
            cap = cap ? 2 * cap : 64;
            SafeTensor *grown = realloc(h->tensors, cap * sizeof(SafeTensor));
            if (!grown) die("out of memory for %zu tensors", cap);
            h->tensors = grown;
        }
        SafeTensor *t = &h->tensors[h->n++];
        memset(t, 0, sizeof(*t));
        t->name = strdup((const char *)text.data);
        if (!t->name) die("out of memory for a tensor name of %zu bytes", text.len);
        if (parse_tensor(&j, t, h->data_size, &text)) goto fail;
    }
    if (more < 0) goto fail;
    while (j.p < j.end && *j.p == ' ') j.p++;
    if (j.p != j.end) {
        json_fail(&j, "byte 0x%02X after the header's JSON object: only padding spaces may follow it", *j.p);
        goto fail;
    }
    if (h->n) qsort(h->tensors, h->n, sizeof(SafeTensor), by_name);   // (NULL when empty)
    if (check_layout(h, err, err_len)) goto fail;
    bytebuf_free(&text);
    return 0;
fail:
    bytebuf_free(&text);
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
    Json j = json_reader(text, n, 0, NULL, err, err_len);
    ByteBuf key = {0};
    int rc = -1, more;
    if (json_expect(&j, '{')) goto done;
    for (size_t i = 0; (more = json_next(&j, '}', i)) > 0; i++) {
        if (json_key(&j, &key)) goto done;
        int k = 0;
        while (k < NKEYS && !json_string_is(&key, keys[k])) k++;
        if (k == NKEYS) {
            if (json_skip(&j)) goto done;
            continue;
        }
        if (*values[k] != -1) { json_fail(&j, "%s given twice", keys[k]); goto done; }
        uint64_t v;
        if (json_uint(&j, keys[k], 1, INT32_MAX, &v)) goto done;
        *values[k] = (int64_t)v;
    }
    if (more == 0 && json_end(&j) == 0) rc = 0;
done:
    bytebuf_free(&key);
    return rc;
}
