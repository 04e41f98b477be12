// fuzz/fuzz_safetensors.c: the two parsers of data/safetensors.c, on the same bytes: as a whole
// .safetensors file and as config.json. A refusal must say why. A header that parses must
// describe tensors that tile its data section exactly, and writing it out again (names valid
// UTF-8, re-escaped as \u escapes, another data section of the same size) must parse to the
// same tensors; a config that parses must hold values in range that read back the same.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../data/json.h"
#include "../data/safetensors.h"
#include "fuzz_common.h"

typedef struct {
    char *s;
    size_t len, cap;
} Text;

static void put(Text *t, const void *src, size_t n) {
    if (t->len + n > t->cap) {
        t->cap = (t->len + n) * 2 + 64;
        t->s = realloc(t->s, t->cap);
        FUZZ_ASSERT(t->s != NULL, "memory");
    }
    memcpy(t->s + t->len, src, n);
    t->len += n;
}

static void putf(Text *t, const char *fmt, unsigned long long v) {
    char buf[64];
    int n = snprintf(buf, sizeof(buf), fmt, v);
    put(t, buf, (size_t)n);
}

// s as a JSON string, every character that is not printable ASCII as a \u escape (a surrogate
// pair past U+FFFF), so that reading it back goes through the escapes, not the raw UTF-8 the
// fuzzer's input spelled it in
static void put_json_string(Text *t, const char *s) {
    const uint8_t *p = (const uint8_t *)s, *end = p + strlen(s);
    put(t, "\"", 1);
    while (p < end) {
        uint32_t cp;
        int n = utf8_decode(p, end, &cp);
        FUZZ_ASSERT(n > 0, "an accepted string is valid UTF-8");
        if (*p == '"' || *p == '\\') { put(t, "\\", 1); put(t, p, 1); }
        else if (cp >= 0x20 && cp < 0x7F) put(t, p, 1);
        else if (cp < 0x10000) putf(t, "\\u%04llx", cp);
        else {
            putf(t, "\\u%04llX", 0xD800 + ((cp - 0x10000) >> 10));
            putf(t, "\\u%04llx", 0xDC00 + ((cp - 0x10000) & 0x3FF));
        }
        p += n;
    }
    put(t, "\"", 1);
}

// the header as a file of its own: 8-byte length, JSON, then data_size zero bytes
static Text write_file(const SafeTensorsHeader *h) {
    Text json = {0}, file = {0};
    put(&json, "{\"__metadata__\": {\"format\": \"pt\"}", strlen("{\"__metadata__\": {\"format\": \"pt\"}"));
    for (size_t i = 0; i < h->n; i++) {
        const SafeTensor *x = &h->tensors[i];
        put(&json, ", ", 2);
        put_json_string(&json, x->name);
        put(&json, ": {\"dtype\": ", strlen(": {\"dtype\": "));
        put_json_string(&json, x->dtype);
        put(&json, ", \"shape\": [", strlen(", \"shape\": ["));
        for (int d = 0; d < x->ndim; d++) putf(&json, d ? ", %llu" : "%llu", x->shape[d]);
        putf(&json, "], \"data_offsets\": [%llu, ", x->begin);
        putf(&json, "%llu]}", x->end);
    }
    put(&json, "}  ", 3);
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(json.len >> (8 * i));
    put(&file, len, 8);
    put(&file, json.s, json.len);
    for (uint64_t i = 0; i < h->data_size; i++) put(&file, "", 1);
    free(json.s);
    return file;
}

static void check_header(const SafeTensorsHeader *h, size_t size) {
    FUZZ_ASSERT(h->data_offset + h->data_size == size, "header and data account for the file");
    uint64_t total = 0;
    for (size_t i = 0; i < h->n; i++) {
        const SafeTensor *t = &h->tensors[i];
        FUZZ_ASSERT(i == 0 || strcmp(h->tensors[i - 1].name, t->name) < 0, "names sorted and unique");
        FUZZ_ASSERT(t->begin <= t->end && t->end <= h->data_size, "offsets inside the data");
        FUZZ_ASSERT(t->numel * (uint64_t)t->dtype_bits == 8 * (t->end - t->begin), "bytes match shape and dtype");
        FUZZ_ASSERT(safetensors_find(h, t->name) == t, "every tensor is found by its name");
        total += t->end - t->begin;
    }
    FUZZ_ASSERT(total == h->data_size, "the tensors tile the data: no overlap, no gap");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "";
    SafeTensorsHeader h;
    if (safetensors_parse(&h, data, size, err, sizeof(err)) != 0) {
        FUZZ_ASSERT(err[0] != 0, "a refused header says why");
    } else {
        check_header(&h, size);
        if (h.data_size <= (1 << 20)) {   // zero-filled copies of bigger data would be slow
            Text again = write_file(&h);
            SafeTensorsHeader h2;
            FUZZ_ASSERT(safetensors_parse(&h2, (const uint8_t *)again.s, again.len, err, sizeof(err)) == 0,
                        "the header written out again parses");
            FUZZ_ASSERT(h2.n == h.n && h2.data_size == h.data_size, "the same tensors");
            for (size_t i = 0; i < h.n; i++) {
                const SafeTensor *a = &h.tensors[i], *b = &h2.tensors[i];
                FUZZ_ASSERT(!strcmp(a->name, b->name) && a->dtype == b->dtype && a->ndim == b->ndim &&
                            !memcmp(a->shape, b->shape, sizeof(a->shape)) && a->begin == b->begin &&
                            a->end == b->end, "each tensor reads back the same");
            }
            safetensors_free(&h2);
            free(again.s);
        }
        safetensors_free(&h);
    }

    HFConfig c;
    err[0] = 0;
    if (hf_config_parse(&c, data, size, err, sizeof(err)) != 0) {
        FUZZ_ASSERT(err[0] != 0, "a refused config says why");
        return 0;
    }
    int64_t values[5] = {c.n_head, c.n_embd, c.n_layer, c.n_positions, c.vocab_size};
    const char *keys[5] = {"n_head", "n_embd", "n_layer", "n_positions", "vocab_size"};
    Text json = {0};
    put(&json, "{", 1);
    for (int k = 0; k < 5; k++) {
        FUZZ_ASSERT(values[k] == -1 || (values[k] >= 1 && values[k] <= INT32_MAX), "config values in range");
        if (values[k] == -1) continue;
        if (json.len > 1) put(&json, ",", 1);
        put_json_string(&json, keys[k]);
        putf(&json, ":%llu", (unsigned long long)values[k]);
    }
    put(&json, "}", 1);
    HFConfig c2;
    FUZZ_ASSERT(hf_config_parse(&c2, (const uint8_t *)json.s, json.len, err, sizeof(err)) == 0 &&
                !memcmp(&c, &c2, sizeof(c)), "the config written out again reads back the same");
    free(json.s);
    return 0;
}
