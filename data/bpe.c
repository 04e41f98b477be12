// data/bpe.c: see bpe.h.
#include "bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "json.h"

// GPT-2's split pattern (encoder.py), with \s written \p{White_Space} and \S \P{White_Space}.
// GPT-2 ran it with Python's `regex` module, whose \s is Unicode's White_Space property, and so
// does tiktoken; PCRE2's \s in UCP mode also matches U+180E MONGOLIAN VOWEL SEPARATOR, which
// would make "a\u180e b" split differently. Everything else is as GPT-2 wrote it.
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d"
    "| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
    "|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+";

#define EOT_LEN (sizeof(BPE_EOT_TEXT) - 1)
#define PAIR_EMPTY UINT64_MAX

// ---- small helpers ----------------------------------------------------------------------------

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory allocating %zu bytes", n);
    return p;
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) die("out of memory allocating %zu bytes", n);
    return p;
}

void tokenlist_push(TokenList *t, int id) {
    if (t->len == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->ids = xrealloc(t->ids, t->cap * sizeof(int));
    }
    t->ids[t->len++] = id;
}

static void tokenlist_extend(TokenList *t, const int *ids, size_t n) {
    if (n == 0) return;
    if (t->len + n > t->cap) {
        size_t cap = t->cap ? t->cap : 1024;
        while (cap < t->len + n) cap *= 2;
        t->ids = xrealloc(t->ids, cap * sizeof(int));
        t->cap = cap;
    }
    memcpy(t->ids + t->len, ids, n * sizeof(int));
    t->len += n;
}

void tokenlist_free(TokenList *t) {
    free(t->ids);
    memset(t, 0, sizeof(*t));
}

static inline uint64_t mix64(uint64_t x) {   // splitmix64's finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static inline uint64_t load64(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

static inline uint64_t load32(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}

// Whole-word loads only (a byte-by-byte tail copied into a word stalls store forwarding); short
// and ragged tails are read as two overlapping words, the length being mixed in first.
static inline uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n, w;
    if (n >= 8) {
        const uint8_t *last = p + n - 8;
        for (; p < last; p += 8) {
            h = (h ^ load64(p)) * 0xbf58476d1ce4e5b9ULL;
            h ^= h >> 29;
        }
        w = load64(last);
    } else if (n >= 4) {
        w = load32(p) | load32(p + n - 4) << 32;
    } else {
        w = n ? (uint64_t)p[0] | (uint64_t)p[n / 2] << 8 | (uint64_t)p[n - 1] << 16 : 0;
    }
    return mix64(h ^ w);
}

static size_t pow2_at_least(size_t n) {
    size_t p = 16;
    while (p < n) p *= 2;
    return p;
}

// ---- GPT-2's byte alphabet ---------------------------------------------------------------------
// vocab.bpe and encoder.json spell each byte as one Unicode character: printable Latin-1 bytes
// as themselves, the other 68 (controls, space, DEL, NBSP, soft hyphen...) as U+0100.. in order.

#define ALPHABET_CODEPOINTS 324   // 256 + 68

static void byte_alphabet(int byte_of_codepoint[ALPHABET_CODEPOINTS]) {
    for (int c = 0; c < ALPHABET_CODEPOINTS; c++) byte_of_codepoint[c] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        byte_of_codepoint[printable ? b : 256 + extra++] = b;
    }
}

// Turn a token spelled in the byte alphabet (UTF-8 text) into its bytes; out holds n bytes at
// least (one character is at least one byte). Returns the byte count, or -1 when the text has a
// character outside the alphabet or is not UTF-8.
static long alphabet_to_bytes(const int byte_of_codepoint[ALPHABET_CODEPOINTS], const uint8_t *s,
                              size_t n, uint8_t *out) {
    const uint8_t *p = s, *end = s + n;
    long len = 0;
    while (p < end) {
        uint32_t cp;
        int k = utf8_decode(p, end, &cp);
        if (k == 0 || cp >= ALPHABET_CODEPOINTS || byte_of_codepoint[cp] < 0) return -1;
        out[len++] = (uint8_t)byte_of_codepoint[cp];
        p += k;
    }
    return len;
}

// Quote a token for an error message: printable ASCII as is, anything else as \xNN.
static const char *quote(const uint8_t *s, size_t n, char *buf, size_t cap) {
    size_t j = 0;
    for (size_t i = 0; i < n && j + 5 < cap; i++) {
        if (s[i] >= 0x20 && s[i] < 0x7F && s[i] != '\\') buf[j++] = (char)s[i];
        else j += (size_t)snprintf(buf + j, cap - j, "\\x%02x", s[i]);
    }
    buf[j] = 0;
    return buf;
}

// ---- token bytes -> id (used while loading) ------------------------------------------------------

typedef struct {
    const Tokenizer *tok;
    int *slot;                // id, or -1 when empty
    size_t mask;
} TokenIndex;

static void token_index_init(TokenIndex *ix, const Tokenizer *tok) {
    ix->tok = tok;
    ix->mask = pow2_at_least(2 * (size_t)tok->vocab_size) - 1;
    ix->slot = xmalloc((ix->mask + 1) * sizeof(int));
    for (size_t i = 0; i <= ix->mask; i++) ix->slot[i] = -1;
}

// Returns the id of the token with these bytes; when absent, inserts insert_id (if >= 0) and
// returns -1.
static int token_index_find(TokenIndex *ix, const uint8_t *s, size_t n, int insert_id) {
    size_t i = hash_bytes(s, n) & ix->mask;
    for (;; i = (i + 1) & ix->mask) {
        int id = ix->slot[i];
        if (id < 0) {
            if (insert_id >= 0) ix->slot[i] = insert_id;
            return -1;
        }
        size_t len;
        const uint8_t *t = tokenizer_token(ix->tok, id, &len);
        if (len == n && memcmp(t, s, n) == 0) return id;
    }
}

// ---- encoder.json ----------------------------------------------------------------------------
// A JSON object of string keys and token ids (integers), nothing more; data/json.c reads it.

typedef struct {
    ByteBuf keys;          // every key's bytes (already turned from the alphabet into raw bytes)
    size_t *key_off;       // entry i: keys.data[key_off[i] .. key_off[i+1])
    int *id;
    size_t n, cap;
    int eot_entry;         // entry index of <|endoftext|>, or -1
} JsonEntries;

static void json_entries_free(JsonEntries *e) {
    bytebuf_free(&e->keys);
    free(e->key_off);
    free(e->id);
}

#define MAX_VOCAB (1 << 24)

static int parse_encoder_json(const uint8_t *data, size_t n, const char *name,
                              const int byte_of_codepoint[ALPHABET_CODEPOINTS], JsonEntries *out,
                              char *err, size_t err_len) {
    Json j = json_reader(data, n, 0, name, err, err_len);
    memset(out, 0, sizeof(*out));
    out->eot_entry = -1;
    out->cap = 1024;
    out->key_off = xmalloc((out->cap + 1) * sizeof(size_t));
    out->id = xmalloc(out->cap * sizeof(int));
    out->key_off[0] = 0;
    ByteBuf key = {0};
    int rc = -1, more;
    if (json_peek(&j) != '{') {
        json_fail(&j, "not a JSON object (expected '{' at the start)");
        goto done;
    }
    j.p++;
    for (size_t i = 0; (more = json_next(&j, '}', i)) > 0; i++) {
        uint64_t value;
        if (json_key(&j, &key) || json_uint(&j, "a token id", 0, MAX_VOCAB - 1, &value)) goto done;
        if (out->n == out->cap) {
            out->cap *= 2;
            out->key_off = xrealloc(out->key_off, (out->cap + 1) * sizeof(size_t));
            out->id = xrealloc(out->id, out->cap * sizeof(int));
        }
        if (json_string_is(&key, BPE_EOT_TEXT)) {
            if (out->eot_entry >= 0) {
                fail_with(err, err_len, "%s: %s appears twice", name, BPE_EOT_TEXT);
                goto done;
            }
            out->eot_entry = (int)out->n;
            bytebuf_append(&out->keys, key.data, key.len);
        } else {
            if (key.len == 0) {
                fail_with(err, err_len, "%s: an empty token (id %d)", name, (int)value);
                goto done;
            }
            size_t at = out->keys.len;
            bytebuf_append(&out->keys, key.data, key.len);   // reserve: bytes <= UTF-8 length
            long len = alphabet_to_bytes(byte_of_codepoint, key.data, key.len, out->keys.data + at);
            if (len < 0) {
                char q[96];
                fail_with(err, err_len, "%s: token \"%s\" (id %d) is not spelled in GPT-2's byte alphabet", name,
                     quote(key.data, key.len, q, sizeof(q)), (int)value);
                goto done;
            }
            out->keys.len = at + (size_t)len;
        }
        out->id[out->n] = (int)value;
        out->n++;
        out->key_off[out->n] = out->keys.len;
    }
    if (more < 0 || json_end(&j)) goto done;
    rc = 0;
done:
    bytebuf_free(&key);
    if (rc != 0) json_entries_free(out);
    return rc;
}

// ---- loading ----------------------------------------------------------------------------------

static void pair_insert(BPE *bpe, int left, int right, int rank) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = mix64(key) & bpe->pair_mask;
    while (bpe->pair_keys[i] != PAIR_EMPTY) i = (i + 1) & bpe->pair_mask;
    bpe->pair_keys[i] = key;
    bpe->pair_rank[i] = rank;
}

static inline int pair_rank(const BPE *bpe, int left, int right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = mix64(key) & bpe->pair_mask;
    for (;; i = (i + 1) & bpe->pair_mask) {
        uint64_t k = bpe->pair_keys[i];
        if (k == key) return bpe->pair_rank[i];
        if (k == PAIR_EMPTY) return -1;
    }
}

static int compile_regex(BPE *bpe, char *err, size_t err_len) {
    int code;
    PCRE2_SIZE offset;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &offset, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof(msg));
        return fail_with(err, err_len, "PCRE2 cannot compile GPT-2's pattern at offset %zu: %s "
                    "(PCRE2 10.40 or newer is needed)", (size_t)offset, (char *)msg);
    }
    bpe->regex = re;
    bpe->regex_jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void bpe_unicode_version(char *out, size_t cap) {
    char version[24];   // PCRE2 asks for at least 24 code units
    pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, version);
    snprintf(out, cap, "%s", version);
}

static int bpe_parse_named(BPE *bpe, const char *merges, size_t merges_len, const char *merges_name,
                           const char *encoder_json, size_t json_len, const char *json_name,
                           char *err, size_t err_len) {
    memset(bpe, 0, sizeof(*bpe));
    int byte_of_codepoint[ALPHABET_CODEPOINTS];
    byte_alphabet(byte_of_codepoint);
    char q1[96], q2[96];

    // encoder.json -> tokenizer (id -> bytes), checking the ids are 0..N-1 once each
    JsonEntries e;
    if (parse_encoder_json((const uint8_t *)encoder_json, json_len, json_name, byte_of_codepoint, &e,
                           err, err_len) != 0)
        return -1;
    int rc = -1;
    int vocab = (int)e.n;
    const uint8_t **token = xmalloc((e.n + 1) * sizeof(*token));
    size_t *token_len = xmalloc((e.n + 1) * sizeof(size_t));
    int *made_by = xmalloc((e.n + 1) * sizeof(int));      // rank of the merge that makes token i
    TokenIndex ix = {0};
    for (int i = 0; i < vocab; i++) token[i] = NULL;
    for (size_t k = 0; k < e.n; k++) {
        int id = e.id[k];
        if (id >= vocab) {
            fail_with(err, err_len, "%s: id %d is out of range: %d tokens have ids 0 to %d", json_name, id, vocab, vocab - 1);
            goto done;
        }
        if (token[id]) {
            fail_with(err, err_len, "%s: id %d is given to two tokens", json_name, id);
            goto done;
        }
        token[id] = e.keys.data + e.key_off[k];
        token_len[id] = e.key_off[k + 1] - e.key_off[k];
        made_by[id] = -1;
    }
    if (e.eot_entry < 0) {
        fail_with(err, err_len, "%s: has no %s token", json_name, BPE_EOT_TEXT);
        goto done;
    }
    bpe->eot_token = e.id[e.eot_entry];
    if (tokenizer_from_table(&bpe->tokenizer, vocab, bpe->eot_token, token, token_len, err, err_len) != 0) {
        char inner[200];
        snprintf(inner, sizeof(inner), "%s", err);
        fail_with(err, err_len, "%s: %s", json_name, inner);
        goto done;
    }
    token_index_init(&ix, &bpe->tokenizer);
    for (int id = 0; id < vocab; id++) {
        if (id == bpe->eot_token) continue;
        int other = token_index_find(&ix, token[id], token_len[id], id);
        if (other >= 0) {
            fail_with(err, err_len, "%s: tokens %d and %d have the same bytes \"%s\"", json_name, other, id,
                 quote(token[id], token_len[id], q1, sizeof(q1)));
            goto done;
        }
    }
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        bpe->byte_token[b] = token_index_find(&ix, &byte, 1, -1);
        if (bpe->byte_token[b] < 0) {
            fail_with(err, err_len, "%s: has no token for the byte 0x%02x", json_name, b);
            goto done;
        }
    }

    // vocab.bpe -> merges, each checked against encoder.json
    const char *p = merges, *end = merges + merges_len;
    if (end - p >= 8 && memcmp(p, "#version", 8) == 0) {   // the header line
        while (p < end && *p != '\n') p++;
        if (p < end) p++;
    }
    size_t lines_cap = 1024;
    bpe->merge_left = xmalloc(lines_cap * sizeof(int));
    bpe->merge_right = xmalloc(lines_cap * sizeof(int));
    bpe->merge_result = xmalloc(lines_cap * sizeof(int));
    bpe->pair_mask = pow2_at_least(2 * (size_t)vocab) - 1;   // merges < vocab: load under 1/2
    bpe->pair_keys = xmalloc((bpe->pair_mask + 1) * sizeof(uint64_t));
    bpe->pair_rank = xmalloc((bpe->pair_mask + 1) * sizeof(int32_t));
    for (size_t i = 0; i <= bpe->pair_mask; i++) bpe->pair_keys[i] = PAIR_EMPTY;
    uint8_t *buf = xmalloc(merges_len * 2 + 2);
    int line_no = p == merges ? 0 : 1;
    while (p < end) {
        line_no++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = eol ? eol : end;
        const char *next = eol ? eol + 1 : end;
        if (line_end > p && line_end[-1] == '\r') line_end--;
        if (line_end == p) {
            if (next != end) {
                fail_with(err, err_len, "%s line %d: empty line before the end of the file", merges_name, line_no);
                goto done_buf;
            }
            break;
        }
        const char *space = memchr(p, ' ', (size_t)(line_end - p));
        if (!space || space == p || space + 1 == line_end || memchr(space + 1, ' ', (size_t)(line_end - space - 1))) {
            fail_with(err, err_len, "%s line %d: expected two tokens separated by one space", merges_name, line_no);
            goto done_buf;
        }
        long la = alphabet_to_bytes(byte_of_codepoint, (const uint8_t *)p, (size_t)(space - p), buf);
        long lb = la < 0 ? -1 : alphabet_to_bytes(byte_of_codepoint, (const uint8_t *)space + 1,
                                                  (size_t)(line_end - space - 1), buf + la);
        if (la < 0 || lb < 0) {
            fail_with(err, err_len, "%s line %d: a token is not spelled in GPT-2's byte alphabet", merges_name, line_no);
            goto done_buf;
        }
        int left = token_index_find(&ix, buf, (size_t)la, -1);
        int right = token_index_find(&ix, buf + la, (size_t)lb, -1);
        int result = token_index_find(&ix, buf, (size_t)(la + lb), -1);
        if (left < 0 || right < 0 || result < 0) {
            const uint8_t *missing = left < 0 ? buf : right < 0 ? buf + la : buf;
            size_t missing_len = left < 0 ? (size_t)la : right < 0 ? (size_t)lb : (size_t)(la + lb);
            fail_with(err, err_len, "%s line %d: %s\"%s\" is not a token in %s (are the two files from the "
                 "same vocabulary?)", merges_name, line_no, left >= 0 && right >= 0 ? "the merged token " : "",
                 quote(missing, missing_len, q1, sizeof(q1)), json_name);
            goto done_buf;
        }
        int rank = bpe->n_merges;
        if ((token_len[left] > 1 && made_by[left] < 0) || (token_len[right] > 1 && made_by[right] < 0)) {
            fail_with(err, err_len, "%s line %d: merges \"%s\" + \"%s\" before an earlier line makes them",
                 merges_name, line_no, quote(token[left], token_len[left], q1, sizeof(q1)),
                 quote(token[right], token_len[right], q2, sizeof(q2)));
            goto done_buf;
        }
        if (made_by[result] >= 0) {
            fail_with(err, err_len, "%s line %d: \"%s\" is already made by the merge on line %d", merges_name,
                 line_no, quote(token[result], token_len[result], q1, sizeof(q1)),
                 made_by[result] + (line_no - rank));
            goto done_buf;
        }
        made_by[result] = rank;   // so at most one merge per token: n_merges < vocab
        if ((size_t)rank == lines_cap) {
            lines_cap *= 2;
            bpe->merge_left = xrealloc(bpe->merge_left, lines_cap * sizeof(int));
            bpe->merge_right = xrealloc(bpe->merge_right, lines_cap * sizeof(int));
            bpe->merge_result = xrealloc(bpe->merge_result, lines_cap * sizeof(int));
        }
        bpe->merge_left[rank] = left;
        bpe->merge_right[rank] = right;
        bpe->merge_result[rank] = result;
        // a pair listed twice would make its token twice, which the check above already refuses
        pair_insert(bpe, left, right, rank);
        bpe->n_merges++;
        p = next;
    }
    for (int id = 0; id < vocab; id++) {
        if (id != bpe->eot_token && token_len[id] > 1 && made_by[id] < 0) {
            fail_with(err, err_len, "%s: token %d \"%s\" is made by no merge in %s (are the two files from the "
                 "same vocabulary?)", json_name, id, quote(token[id], token_len[id], q1, sizeof(q1)), merges_name);
            goto done_buf;
        }
    }
    rc = compile_regex(bpe, err, err_len);
done_buf:
    free(buf);
done:
    free(ix.slot);
    free(token);
    free(token_len);
    free(made_by);
    json_entries_free(&e);
    if (rc != 0) bpe_free(bpe);
    return rc;
}

int bpe_parse(BPE *bpe, const char *merges, size_t merges_len, const char *encoder_json,
              size_t json_len, char *err, size_t err_len) {
    return bpe_parse_named(bpe, merges, merges_len, "vocab.bpe", encoder_json, json_len, "encoder.json",
                           err, err_len);
}

void bpe_load(BPE *bpe, const char *dir) {
    char merges_path[4096], json_path[4096];
    snprintf(merges_path, sizeof(merges_path), "%s/vocab.bpe", dir);
    snprintf(json_path, sizeof(json_path), "%s/encoder.json", dir);
    const char *paths[2] = {merges_path, json_path};
    for (int i = 0; i < 2; i++)
        if (!file_exists(paths[i]))
            die("%s: no such file (the GPT-2 vocabulary: `make data` fetches it into data/gpt2, "
                "or point to a folder holding vocab.bpe and encoder.json)", paths[i]);
    size_t merges_len, json_len;
    char *merges = (char *)read_file_or_die(merges_path, &merges_len);
    char *json = (char *)read_file_or_die(json_path, &json_len);
    char err[512];
    if (bpe_parse_named(bpe, merges, merges_len, merges_path, json, json_len, json_path, err, sizeof(err)) != 0)
        die("%s", err);
    free(merges);
    free(json);
}

void bpe_free(BPE *bpe) {
    tokenizer_free(&bpe->tokenizer);
    free(bpe->merge_left);
    free(bpe->merge_right);
    free(bpe->merge_result);
    free(bpe->pair_keys);
    free(bpe->pair_rank);
    if (bpe->regex) pcre2_code_free(bpe->regex);
    memset(bpe, 0, sizeof(*bpe));
}

// ---- per-thread scratch and the piece cache -----------------------------------------------------

// Pieces up to CACHE_MAX_PIECE bytes are remembered: natural text repeats its words, and a hit
// skips the merge loop. The cache is a fixed-size open-addressing table that is emptied when
// half full, so its memory stays bounded however long the input; it is kept small (about 1 MiB
// in all) so that it stays in the CPU's L2 cache, which matters more for speed than hit rate.
#define CACHE_SLOTS (1 << 15)
#define CACHE_ENTRIES (CACHE_SLOTS / 2)
#define CACHE_MAX_PIECE 64
#define CACHE_KEY_ARENA (CACHE_ENTRIES * 16)
#define CACHE_ID_ARENA (CACHE_ENTRIES * 4)

typedef struct {
    uint32_t tag;              // the high half of the piece's hash, with bit 0 set; 0: empty
    uint32_t key_off, id_off;  // into key_arena, id_arena
    uint8_t key_len, n_ids;
} CacheSlot;

struct BPEScratch {
    pcre2_match_data *match;
    pcre2_match_context *match_ctx;
    pcre2_jit_stack *jit_stack;
    // merge loop work arrays, each sized for the longest piece so far
    int *sym, *prev, *next;
    uint64_t *heap;
    size_t cap;
    CacheSlot *slots;
    uint8_t *key_arena;
    int *id_arena;
    size_t used_entries, key_used, id_used;
    size_t pieces, hits;
};

BPEScratch *bpe_scratch_new(const BPE *bpe) {
    BPEScratch *s = xmalloc(sizeof(BPEScratch));
    memset(s, 0, sizeof(*s));
    s->match = pcre2_match_data_create_from_pattern(bpe->regex, NULL);
    s->match_ctx = pcre2_match_context_create(NULL);
    if (!s->match || !s->match_ctx) die("out of memory creating PCRE2 match data");
    if (bpe->regex_jit) {
        // the default 32 KiB JIT stack is enough for this pattern; a larger limit costs nothing
        // until used and keeps very long runs of one class safe
        s->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        if (!s->jit_stack) die("out of memory creating a PCRE2 JIT stack");
        pcre2_jit_stack_assign(s->match_ctx, NULL, s->jit_stack);
    }
    s->slots = xmalloc(CACHE_SLOTS * sizeof(CacheSlot));
    memset(s->slots, 0, CACHE_SLOTS * sizeof(CacheSlot));
    s->key_arena = xmalloc(CACHE_KEY_ARENA);
    s->id_arena = xmalloc(CACHE_ID_ARENA * sizeof(int));
    return s;
}

void bpe_scratch_free(BPEScratch *s) {
    if (!s) return;
    pcre2_match_data_free(s->match);
    pcre2_match_context_free(s->match_ctx);
    if (s->jit_stack) pcre2_jit_stack_free(s->jit_stack);
    free(s->sym);
    free(s->prev);
    free(s->next);
    free(s->heap);
    free(s->slots);
    free(s->key_arena);
    free(s->id_arena);
    free(s);
}

void bpe_scratch_stats(const BPEScratch *s, size_t *pieces, size_t *cache_hits) {
    *pieces = s->pieces;
    *cache_hits = s->hits;
}

static void cache_clear(BPEScratch *s) {
    memset(s->slots, 0, CACHE_SLOTS * sizeof(CacheSlot));
    s->used_entries = s->key_used = s->id_used = 0;
}

// ---- byte-level BPE of one piece ----------------------------------------------------------------

static inline void heap_push(uint64_t *heap, size_t *len, uint64_t key) {
    size_t i = (*len)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (heap[parent] <= key) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = key;
}

static inline uint64_t heap_pop(uint64_t *heap, size_t *len) {
    uint64_t top = heap[0], last = heap[--(*len)];
    size_t i = 0, n = *len;
    while (1) {
        size_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && heap[child + 1] < heap[child]) child++;
        if (last <= heap[child]) break;
        heap[i] = heap[child];
        i = child;
    }
    if (n) heap[i] = last;
    return top;
}

// Merge the bytes of one piece (n >= 2) and append its ids. Candidate pairs wait in a min-heap
// keyed by (rank, position), so the pair that comes first in vocab.bpe merges first and, among
// equal pairs, the leftmost: GPT-2's order. A merge invalidates at most two queued pairs, which
// are skipped when popped. O(n log n).
static void merge_piece(const BPE *bpe, BPEScratch *s, const uint8_t *p, size_t n, TokenList *out) {
    if (n > s->cap) {
        s->cap = n;
        s->sym = xrealloc(s->sym, n * sizeof(int));
        s->prev = xrealloc(s->prev, n * sizeof(int));
        s->next = xrealloc(s->next, n * sizeof(int));
        s->heap = xrealloc(s->heap, 3 * n * sizeof(uint64_t));   // n - 1 pairs + 2 per merge
    }
    int *sym = s->sym, *prev = s->prev, *next = s->next;
    uint64_t *heap = s->heap;
    size_t heap_len = 0;
    for (size_t i = 0; i < n; i++) {
        sym[i] = bpe->byte_token[p[i]];
        prev[i] = (int)i - 1;
        next[i] = (int)i + 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int r = pair_rank(bpe, sym[i], sym[i + 1]);
        if (r >= 0) heap_push(heap, &heap_len, (uint64_t)r << 32 | i);
    }
    int end = (int)n;
    while (heap_len) {
        uint64_t key = heap_pop(heap, &heap_len);
        int r = (int)(key >> 32), i = (int)(uint32_t)key;
        int j = next[i];
        if (sym[i] != bpe->merge_left[r] || j == end || sym[j] != bpe->merge_right[r]) continue;  // stale
        sym[i] = bpe->merge_result[r];
        sym[j] = -1;
        next[i] = next[j];
        if (next[j] != end) prev[next[j]] = i;
        if (prev[i] >= 0) {
            int rl = pair_rank(bpe, sym[prev[i]], sym[i]);
            if (rl >= 0) heap_push(heap, &heap_len, (uint64_t)rl << 32 | (uint32_t)prev[i]);
        }
        if (next[i] != end) {
            int rr = pair_rank(bpe, sym[i], sym[next[i]]);
            if (rr >= 0) heap_push(heap, &heap_len, (uint64_t)rr << 32 | (uint32_t)i);
        }
    }
    for (int i = 0; i != end; i = next[i]) tokenlist_push(out, sym[i]);
}

static inline int cacheable(size_t n) { return n >= 2 && n <= CACHE_MAX_PIECE; }

// Encode one piece; h is hash_bytes(p, n) when the piece is cacheable.
static void encode_piece(const BPE *bpe, BPEScratch *s, const uint8_t *p, size_t n, uint64_t h, TokenList *out) {
    s->pieces++;
    if (n == 1) {
        tokenlist_push(out, bpe->byte_token[p[0]]);
        return;
    }
    if (!cacheable(n)) {
        merge_piece(bpe, s, p, n, out);
        return;
    }
    uint32_t tag = (uint32_t)(h >> 32) | 1;
    size_t i = h & (CACHE_SLOTS - 1);
    for (; s->slots[i].tag; i = (i + 1) & (CACHE_SLOTS - 1)) {
        CacheSlot *c = &s->slots[i];
        if (c->tag == tag && c->key_len == n && memcmp(s->key_arena + c->key_off, p, n) == 0) {
            s->hits++;
            tokenlist_extend(out, s->id_arena + c->id_off, c->n_ids);
            return;
        }
    }
    size_t before = out->len;
    merge_piece(bpe, s, p, n, out);
    size_t n_ids = out->len - before;
    if (s->used_entries == CACHE_ENTRIES || s->key_used + n > CACHE_KEY_ARENA || s->id_used + n_ids > CACHE_ID_ARENA) {
        cache_clear(s);
        i = h & (CACHE_SLOTS - 1);
    }
    CacheSlot *c = &s->slots[i];
    c->tag = tag;
    c->key_off = (uint32_t)s->key_used;
    c->key_len = (uint8_t)n;
    c->id_off = (uint32_t)s->id_used;
    c->n_ids = (uint8_t)n_ids;
    memcpy(s->key_arena + s->key_used, p, n);
    memcpy(s->id_arena + s->id_used, out->ids + before, n_ids * sizeof(int));
    s->key_used += n;
    s->id_used += n_ids;
    s->used_entries++;
}

// ---- the pre-tokenizer ----------------------------------------------------------------------

// Pieces are found in batches and their cache slots prefetched before any is looked up, so the
// cache misses of a batch overlap instead of coming one after another.
#define PIECE_BATCH 32

typedef struct {
    size_t start, len;
    uint64_t hash;
} Piece;

static void encode_batch(const BPE *bpe, BPEScratch *s, const uint8_t *subject, Piece *pieces, int count,
                         TokenList *out) {
    for (int i = 0; i < count; i++) {
        if (!cacheable(pieces[i].len)) continue;
        pieces[i].hash = hash_bytes(subject + pieces[i].start, pieces[i].len);
        __builtin_prefetch(&s->slots[pieces[i].hash & (CACHE_SLOTS - 1)]);
    }
    for (int i = 0; i < count; i++)
        encode_piece(bpe, s, subject + pieces[i].start, pieces[i].len, pieces[i].hash, out);
}

// Encode the pieces of text[begin, end); the regex sees text up to subject_end >= end, and end is
// a cut or equal to subject_end, so no piece crosses it.
static void encode_ordinary(const BPE *bpe, BPEScratch *s, const uint8_t *text, size_t begin,
                            size_t end, size_t subject_end, TokenList *out) {
    const uint8_t *subject = text + begin;
    size_t length = subject_end - begin, stop = end - begin, pos = 0;
    PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(s->match);
    Piece batch[PIECE_BATCH + 1];
    int count = 0;
    while (pos < stop) {
        int rc = bpe->regex_jit
                     ? pcre2_jit_match(bpe->regex, subject, length, pos, 0, s->match, s->match_ctx)
                     : pcre2_match(bpe->regex, subject, length, pos, 0, s->match, s->match_ctx);
        size_t match_start = length, match_end = length;
        if (rc >= 0) {
            match_start = ovector[0];
            match_end = ovector[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            die("GPT-2 pre-tokenizer regex failed at byte %zu: %s", begin + pos, (char *)msg);
        }
        // bytes the regex skipped are not valid UTF-8: each such run is a piece of its own
        size_t gap_end = match_start < stop ? match_start : stop;
        if (gap_end > pos) batch[count++] = (Piece){pos, gap_end - pos, 0};
        if (match_start >= stop) break;
        if (match_end <= match_start) die("GPT-2 pre-tokenizer regex matched nothing at byte %zu", begin + pos);
        batch[count++] = (Piece){match_start, match_end - match_start, 0};
        pos = match_end;
        if (count >= PIECE_BATCH) {
            encode_batch(bpe, s, subject, batch, count, out);
            count = 0;
        }
    }
    encode_batch(bpe, s, subject, batch, count, out);
}

void bpe_encode_range(const BPE *bpe, BPEScratch *s, const uint8_t *text, size_t n, size_t begin,
                      size_t end, int allow_special, TokenList *out) {
    if (!allow_special) {
        encode_ordinary(bpe, s, text, begin, end, n, out);
        return;
    }
    // text between special tokens is encoded as separate texts, as tiktoken does
    size_t at = begin;
    while (at < end) {
        const uint8_t *hit = memmem(text + at, end - at, BPE_EOT_TEXT, EOT_LEN);
        if (!hit) break;
        size_t h = (size_t)(hit - text);
        encode_ordinary(bpe, s, text, at, h, h, out);
        tokenlist_push(out, bpe->eot_token);
        at = h + EOT_LEN;
    }
    // a special token starting right at end ends this text for the regex too
    size_t subject_end = n;
    if (end < n && n - end >= EOT_LEN && memcmp(text + end, BPE_EOT_TEXT, EOT_LEN) == 0) subject_end = end;
    encode_ordinary(bpe, s, text, at, end, subject_end, out);
}

void bpe_encode(const BPE *bpe, BPEScratch *s, const uint8_t *text, size_t n, int allow_special,
                TokenList *out) {
    bpe_encode_range(bpe, s, text, n, 0, n, allow_special, out);
}

size_t bpe_find_cut(const uint8_t *text, size_t n, size_t from, size_t to) {
    if (to > n) to = n;
    for (size_t p = from > 0 ? from : 1; p < to;) {
        const uint8_t *newline = memchr(text + p - 1, '\n', to - p);   // at p - 1 .. to - 2
        if (!newline) break;
        p = (size_t)(newline - text) + 1;
        if (text[p] > ' ' && text[p] < 0x7F) return p;
        p++;
    }
    return to;
}

size_t bpe_find_last_cut(const uint8_t *text, size_t n, size_t from, size_t to) {
    if (to > n) to = n;
    size_t lo = from > 0 ? from : 1;
    while (to > lo) {
        const uint8_t *newline = memrchr(text + lo - 1, '\n', to - lo);   // at lo - 1 .. to - 2
        if (!newline) break;
        size_t p = (size_t)(newline - text) + 1;
        if (text[p] > ' ' && text[p] < 0x7F) return p;
        to = p;   // look for cuts before p
    }
    return from;
}

// ---- parallel encoding ------------------------------------------------------------------------

typedef struct {
    const BPE *bpe;
    BPEScratch *scratch;
    const uint8_t *text;
    size_t n, begin, end;
    int allow_special;
    TokenList out;
} EncodeJob;

static void *encode_job(void *arg) {
    EncodeJob *job = arg;
    bpe_encode_range(job->bpe, job->scratch, job->text, job->n, job->begin, job->end, job->allow_special,
                     &job->out);
    return NULL;
}

void bpe_encode_parallel(const BPE *bpe, BPEScratch **scratch, int nthreads, const uint8_t *text,
                         size_t n, int allow_special, TokenList *out) {
    if (nthreads <= 1) {
        bpe_encode(bpe, scratch[0], text, n, allow_special, out);
        return;
    }
    EncodeJob *jobs = xmalloc((size_t)nthreads * sizeof(EncodeJob));
    pthread_t *threads = xmalloc((size_t)nthreads * sizeof(pthread_t));
    size_t begin = 0;
    for (int t = 0; t < nthreads; t++) {
        size_t end = t == nthreads - 1 ? n : bpe_find_cut(text, n, n / (size_t)nthreads * (size_t)(t + 1), n);
        if (end < begin) end = begin;
        jobs[t] = (EncodeJob){bpe, scratch[t], text, n, begin, end, allow_special, {0}};
        begin = end;
    }
    for (int t = 1; t < nthreads; t++)
        if (pthread_create(&threads[t], NULL, encode_job, &jobs[t]) != 0) die("cannot start an encoder thread");
    encode_job(&jobs[0]);
    for (int t = 0; t < nthreads; t++) {
        if (t > 0) pthread_join(threads[t], NULL);
        tokenlist_extend(out, jobs[t].out.ids, jobs[t].out.len);
        tokenlist_free(&jobs[t].out);
    }
    free(jobs);
    free(threads);
}
