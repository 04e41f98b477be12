// data/tokenizer.c: see tokenizer.h. Byte order: the files are little-endian, which is what
// every machine this project targets (x86-64, AArch64) uses natively.
#include "tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the token and tokenizer file formats are little-endian; this host is not"
#endif

void bytebuf_append(ByteBuf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->data, cap);
        if (!p) die("out of memory growing a buffer to %zu bytes", cap);
        b->data = p;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, src, n);
    b->len += n;
}

void bytebuf_free(ByteBuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

// ---- tokenizer file ------------------------------------------------------------------------

int tokenizer_from_table(Tokenizer *t, int vocab_size, int eot_token, const uint8_t *const *token,
                         const size_t *token_len, char *err, size_t err_len) {
    memset(t, 0, sizeof(*t));
    if (vocab_size <= 0) return fail_with(err, err_len, "vocabulary size %d is not positive", vocab_size);
    if (eot_token < -1 || eot_token >= vocab_size)
        return fail_with(err, err_len, "end-of-text id %d is outside the vocabulary of %d", eot_token, vocab_size);
    size_t total = 0;
    for (int i = 0; i < vocab_size; i++) {
        if (token_len[i] == 0 || token_len[i] > 255)
            return fail_with(err, err_len, "token %d is %zu bytes long (must be 1 to 255)", i, token_len[i]);
        total += token_len[i];
    }
    t->offsets = malloc(((size_t)vocab_size + 1) * sizeof(uint32_t));
    t->bytes = malloc(total);
    if (!t->offsets || !t->bytes) die("out of memory for a tokenizer of %d tokens", vocab_size);
    uint32_t at = 0;
    for (int i = 0; i < vocab_size; i++) {
        t->offsets[i] = at;
        memcpy(t->bytes + at, token[i], token_len[i]);
        at += (uint32_t)token_len[i];
    }
    t->offsets[vocab_size] = at;
    t->vocab_size = vocab_size;
    t->eot_token = eot_token;
    return 0;
}

int tokenizer_parse(Tokenizer *t, const uint8_t *data, size_t n, char *err, size_t err_len) {
    memset(t, 0, sizeof(*t));
    uint32_t header[TOKENIZER_HEADER_INTS];
    if (n < sizeof(header))
        return fail_with(err, err_len, "too short for a tokenizer file (%zu bytes, the header alone is %zu)",
                    n, sizeof(header));
    memcpy(header, data, sizeof(header));
    if (header[0] != TOKENIZER_MAGIC)
        return fail_with(err, err_len, "not a tokenizer file (magic %u, expected %d)", header[0], TOKENIZER_MAGIC);
    uint32_t version = header[1], vocab_size = header[2], eot;
    if (version == 1) {
        // version 1 has no end-of-text field; llm.c wrote it for GPT-2 only, where it is 50256
        if (vocab_size != 50257)
            return fail_with(err, err_len, "version 1 tokenizer file with %u tokens (version 1 is GPT-2's 50257)",
                        vocab_size);
        eot = 50256;
    } else if (version == 2) {
        eot = header[3];
    } else {
        return fail_with(err, err_len, "unsupported tokenizer file version %u (this program reads 1 and 2)", version);
    }
    size_t body = n - sizeof(header);
    // each token takes at least 2 bytes (length byte + 1), which bounds vocab_size before allocating
    if (vocab_size == 0 || vocab_size > body / 2)
        return fail_with(err, err_len, "vocabulary size %u does not fit the file's %zu bytes of tokens", vocab_size, body);
    if (eot >= vocab_size)
        return fail_with(err, err_len, "end-of-text id %u is outside the vocabulary of %u", eot, vocab_size);
    const uint8_t *p = data + sizeof(header), *end = data + n;
    t->offsets = malloc(((size_t)vocab_size + 1) * sizeof(uint32_t));
    t->bytes = malloc(body);   // token bytes are fewer than the body's bytes
    if (!t->offsets || !t->bytes) die("out of memory for a tokenizer of %u tokens", vocab_size);
    uint32_t at = 0;
    for (uint32_t i = 0; i < vocab_size; i++) {
        if (p >= end) {
            tokenizer_free(t);
            return fail_with(err, err_len, "truncated: ends at token %u of %u", i, vocab_size);
        }
        uint8_t len = *p++;
        if (len == 0) {
            tokenizer_free(t);
            return fail_with(err, err_len, "token %u has length 0", i);
        }
        if ((size_t)(end - p) < len) {
            tokenizer_free(t);
            return fail_with(err, err_len, "truncated: token %u wants %u bytes, %zu left", i, len, (size_t)(end - p));
        }
        t->offsets[i] = at;
        memcpy(t->bytes + at, p, len);
        at += len;
        p += len;
    }
    t->offsets[vocab_size] = at;
    if (p != end) {
        size_t extra = (size_t)(end - p);
        tokenizer_free(t);
        return fail_with(err, err_len, "%zu unexpected bytes after the last token", extra);
    }
    t->vocab_size = (int)vocab_size;
    t->eot_token = (int)eot;
    return 0;
}

void tokenizer_load(Tokenizer *t, const char *path) {
    size_t n;
    uint8_t *data = read_file_or_die(path, &n);
    char err[256];
    if (tokenizer_parse(t, data, n, err, sizeof(err)) != 0) die("%s: %s", path, err);
    free(data);
}

void tokenizer_save(const Tokenizer *t, const char *path) {
    uint32_t header[TOKENIZER_HEADER_INTS] = {0};
    header[0] = TOKENIZER_MAGIC;
    header[1] = 2;
    header[2] = (uint32_t)t->vocab_size;
    // version 2 has no "none" value for the end-of-text id; a vocabulary without one stores 0
    header[3] = t->eot_token >= 0 ? (uint32_t)t->eot_token : 0;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(header));
    for (int i = 0; i < t->vocab_size; i++) {
        size_t len;
        const uint8_t *tok = tokenizer_token(t, i, &len);
        uint8_t len8 = (uint8_t)len;
        atomic_write(&af, &len8, 1);
        atomic_write(&af, tok, len);
    }
    atomic_commit(&af);
}

void tokenizer_free(Tokenizer *t) {
    free(t->offsets);
    free(t->bytes);
    memset(t, 0, sizeof(*t));
}

const uint8_t *tokenizer_token(const Tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->vocab_size) return NULL;
    *len = t->offsets[id + 1] - t->offsets[id];
    return t->bytes + t->offsets[id];
}

int tokenizer_decode(const Tokenizer *t, const int *ids, size_t n, ByteBuf *out, size_t *bad_index) {
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const uint8_t *tok = tokenizer_token(t, ids[i], &len);
        if (!tok) {
            if (bad_index) *bad_index = i;
            return -1;
        }
        bytebuf_append(out, tok, len);
    }
    return 0;
}

// ---- token files ---------------------------------------------------------------------------

void token_file_header_init(int32_t header[TOKEN_FILE_HEADER_INTS], size_t ntokens) {
    memset(header, 0, TOKEN_FILE_HEADER_BYTES);
    header[0] = TOKEN_FILE_MAGIC;
    header[1] = TOKEN_FILE_VERSION;
    header[2] = (int32_t)ntokens;
}

int token_file_check(const int32_t header[TOKEN_FILE_HEADER_INTS], uint64_t file_bytes,
                     size_t *ntokens, char *err, size_t err_len) {
    if (file_bytes < TOKEN_FILE_HEADER_BYTES)
        return fail_with(err, err_len, "too short for a token file (%llu bytes, the header alone is %zu)",
                    (unsigned long long)file_bytes, TOKEN_FILE_HEADER_BYTES);
    if (header[0] != TOKEN_FILE_MAGIC)
        return fail_with(err, err_len, "not a token file (magic %d, expected %d)", header[0], TOKEN_FILE_MAGIC);
    if (header[1] != TOKEN_FILE_VERSION)
        return fail_with(err, err_len, "token file version %d is not supported (version 1: uint16 tokens)", header[1]);
    if (header[2] < 0) return fail_with(err, err_len, "negative token count %d", header[2]);
    uint64_t want = TOKEN_FILE_HEADER_BYTES + (uint64_t)header[2] * sizeof(uint16_t);
    if (want != file_bytes)
        return fail_with(err, err_len, "header says %d tokens (%llu bytes) but the file has %llu bytes%s",
                    header[2], (unsigned long long)want, (unsigned long long)file_bytes,
                    file_bytes < want ? " (truncated)" : "");
    *ntokens = (size_t)header[2];
    return 0;
}

int token_file_parse(const uint8_t *data, size_t n, uint16_t **tokens, size_t *ntokens,
                     char *err, size_t err_len) {
    int32_t header[TOKEN_FILE_HEADER_INTS];
    *tokens = NULL;
    *ntokens = 0;
    if (n >= TOKEN_FILE_HEADER_BYTES) memcpy(header, data, TOKEN_FILE_HEADER_BYTES);
    size_t count = 0;
    if (token_file_check(header, n, &count, err, err_len) != 0) return -1;
    uint16_t *toks = malloc(count ? count * sizeof(uint16_t) : 1);
    if (!toks) die("out of memory for %zu tokens", count);
    memcpy(toks, data + TOKEN_FILE_HEADER_BYTES, count * sizeof(uint16_t));
    *tokens = toks;
    *ntokens = count;
    return 0;
}

uint16_t *token_file_load(const char *path, size_t *ntokens) {
    size_t n;
    uint8_t *data = read_file_or_die(path, &n);
    uint16_t *tokens;
    char err[256];
    if (token_file_parse(data, n, &tokens, ntokens, err, sizeof(err)) != 0) die("%s: %s", path, err);
    free(data);
    return tokens;
}
