// test_infer.c: generation on the CPU. In process: attention_decode against a double-precision
// reference and against the attention backend's forward, the cache writes, argmax, and the
// model's KV-cached decoding against recomputing the whole sequence at every step. Through the
// programs, as a user runs them ($BUILD/infer_gpt2 and $BUILD/import_hf; make test sets BUILD):
// greedy decoding equals the recomputed greedy continuation and is deterministic, seeded
// sampling is reproducible, top-k and top-p keep to their candidates, text in and out, -i,
// <|endoftext|>, the full context, clear errors; import_hf on safetensors files written here.
//
// Tolerances (fp32): relative 1e-5 for attention_decode and for cached against recomputed
// logits; the two differ only in the order of fp32 sums.
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../attention/attention.h"
#include "../data/tokenizer.h"
#include "../gpt2.h"
#include "decode_reference.h"
#include "test.h"
#include "tiny_model.h"   // tiny_config(max_seq_len): maxT 24 here

static char dir[256], infer_bin[512], import_bin[512];
static char out[1 << 16], err[1 << 16];
static size_t out_len;   // bytes in out (text output may hold NUL bytes)

// ----------------------------------------------------------------------------------------
// helpers

// runs a shell command, stdout into `out` and stderr into `err`; returns the exit code
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
    char cmd[8192], full[9000], out_path[300], err_path[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    snprintf(out_path, sizeof(out_path), "%s/stdout.txt", dir);
    snprintf(err_path, sizeof(err_path), "%s/stderr.txt", dir);
    snprintf(full, sizeof(full), "( %s ) > %s 2> %s", cmd, out_path, err_path);
    int status = system(full);
    const char *paths[2] = {out_path, err_path};
    char *bufs[2] = {out, err};
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(paths[i], "rb");
        size_t n = f ? fread(bufs[i], 1, sizeof(out) - 1, f) : 0;
        bufs[i][n] = '\0';
        if (i == 0) out_len = n;
        if (f) fclose(f);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

static int first_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

// whitespace-separated integers of text into ids (at most max); returns the count
static int parse_ints(const char *text, int *ids, int max) {
    int n = 0;
    const char *p = text;
    char *end;
    while (n < max) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        ids[n++] = (int)v;
        p = end;
    }
    return n;
}

// ----------------------------------------------------------------------------------------
// attention_decode, attention_decode_step, kv_cache_store, logits_argmax

static void test_attention_decode(unsigned long long *rng) {
    // (B, len, maxT, NH, HS): one position, lengths that are multiples of nothing, HS 64
    int shapes[][5] = {{1, 1, 1, 1, 8}, {3, 17, 20, 2, 5}, {2, 100, 128, 4, 64}, {1, 333, 333, 3, 16}};
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        int B = shapes[k][0], len = shapes[k][1], maxT = shapes[k][2], NH = shapes[k][3], HS = shapes[k][4];
        int C = NH * HS;
        size_t cache = (size_t)B * maxT * C;
        float *q = malloc(B * C * sizeof(float)), *kc = malloc(cache * sizeof(float));
        float *vc = malloc(cache * sizeof(float)), *o = malloc(B * C * sizeof(float));
        float *o2 = malloc(B * C * sizeof(float)), *ref = malloc(B * C * sizeof(float));
        test_fill(q, B * C, 2.0f, rng);   // scores of a few units: a peaked softmax
        test_fill(kc, cache, 1.0f, rng);
        test_fill(vc, cache, 1.0f, rng);
        for (int i = 0; i < B * C; i++) o[i] = o2[i] = NAN;   // poison
        void *scratch = malloc(attention_decode_scratch_size(B, maxT, NH, HS) + 1);
        attention_decode(o, scratch, q, kc, vc, B, len, maxT, NH, HS);
        reference_decode(ref, q, kc, vc, B, len, maxT, NH, HS);
        CHECK_CLOSE(o, ref, (size_t)B * C, 1e-5, "attention_decode B=%d len=%d maxT=%d NH=%d HS=%d", B, len, maxT, NH, HS);
        // the decode step's call: the same query and the last row's k, v given in qkv (B, 3C),
        // written into a cache whose row len-1 held something else
        float *qkv = malloc((size_t)B * 3 * C * sizeof(float));
        float *kc2 = malloc(cache * sizeof(float)), *vc2 = malloc(cache * sizeof(float));
        memcpy(kc2, kc, cache * sizeof(float));
        memcpy(vc2, vc, cache * sizeof(float));
        for (int b = 0; b < B; b++) {
            memcpy(qkv + (size_t)b * 3 * C, q + (size_t)b * C, C * sizeof(float));
            cache_position(qkv + (size_t)b * 3 * C + C, kc, b, len - 1, maxT, NH, HS);
            cache_position(qkv + (size_t)b * 3 * C + 2 * C, vc, b, len - 1, maxT, NH, HS);
            for (int c = 0; c < C; c++) {
                size_t last = KV_CACHE_AT(b, c / HS, len - 1, maxT, NH, HS) + c % HS;
                kc2[last] = vc2[last] = -9.0f;
            }
        }
        int pos = len - 1;
        attention_decode_step(o2, scratch, qkv, kc2, vc2, &pos, B, 0, maxT, NH, HS);
        CHECK(memcmp(o, o2, B * C * sizeof(float)) == 0, "attention_decode_step equals attention_decode (len %d)", len);
        CHECK(memcmp(kc, kc2, cache * sizeof(float)) == 0 && memcmp(vc, vc2, cache * sizeof(float)) == 0,
              "attention_decode_step writes the new k and v at position %d", pos);
        free(q); free(kc); free(vc); free(o); free(o2); free(ref); free(scratch);
        free(qkv); free(kc2); free(vc2);
    }
}

// the decode of position t against a cache of positions 0..t equals row t of the causal
// attention forward (the built backend) over the same qkv
static void test_decode_matches_forward(unsigned long long *rng) {
    int B = 2, T = 13, NH = 3, HS = 8, C = NH * HS, maxT = 16;
    size_t n = (size_t)B * T * 3 * C;
    float *qkv = malloc(n * sizeof(float)), *att = malloc((size_t)B * T * C * sizeof(float));
    float *kc = malloc((size_t)B * maxT * C * sizeof(float)), *vc = malloc((size_t)B * maxT * C * sizeof(float));
    float *q = malloc(B * C * sizeof(float)), *o = malloc(B * C * sizeof(float)), *row = malloc(B * C * sizeof(float));
    void *saved = malloc(attention_saved_size(B, T, NH, HS));
    void *scratch = malloc(attention_scratch_size(B, T, NH, HS) + 1);
    void *decode_scratch = malloc(attention_decode_scratch_size(B, maxT, NH, HS) + 1);
    test_fill(qkv, n, 1.5f, rng);
    attention_forward(att, saved, scratch, qkv, B, T, NH, HS);
    int zero = 0;
    kv_cache_store(kc, vc, qkv, &zero, B, T, maxT, NH, HS);
    double worst = 0.0;
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) {
            memcpy(q + b * C, qkv + ((size_t)b * T + t) * 3 * C, C * sizeof(float));
            memcpy(row + b * C, att + ((size_t)b * T + t) * C, C * sizeof(float));
        }
        attention_decode(o, decode_scratch, q, kc, vc, B, t + 1, maxT, NH, HS);
        double e = rel_error(o, row, (size_t)B * C);
        if (e > worst) worst = e;
    }
    CHECK(worst <= 1e-5, "attention_decode at every position equals the %s forward's row (worst rel error %.2e)",
          attention_name, worst);
    free(qkv); free(att); free(kc); free(vc); free(q); free(o); free(row); free(saved); free(scratch);
    free(decode_scratch);
}

static void test_kv_cache_store(unsigned long long *rng) {
    int B = 3, T = 4, NH = 2, HS = 3, C = NH * HS, maxT = 9, pos = 5;
    size_t cache = (size_t)B * maxT * C, n = (size_t)B * T * 3 * C;
    float *qkv = malloc(n * sizeof(float));
    float *kc = malloc(cache * sizeof(float)), *vc = malloc(cache * sizeof(float));
    test_fill(qkv, n, 1.0f, rng);
    for (size_t i = 0; i < cache; i++) kc[i] = vc[i] = -7.0f;
    kv_cache_store(kc, vc, qkv, &pos, B, T, maxT, NH, HS);
    int right = 1, untouched = 1;
    for (int b = 0; b < B; b++) {
        for (int s = 0; s < maxT; s++) {
            for (int c = 0; c < C; c++) {
                size_t i = KV_CACHE_AT(b, c / HS, s, maxT, NH, HS) + c % HS;
                if (s >= pos && s < pos + T) {
                    const float *src = qkv + ((size_t)b * T + (s - pos)) * 3 * C;
                    right &= kc[i] == src[C + c] && vc[i] == src[2 * C + c];
                } else {
                    untouched &= kc[i] == -7.0f && vc[i] == -7.0f;
                }
            }
        }
    }
    CHECK(right, "kv_cache_store writes k and v at positions %d..%d of every sequence", pos, pos + T - 1);
    CHECK(untouched, "kv_cache_store leaves the other positions alone");
    free(qkv); free(kc); free(vc);
}

static void test_argmax(unsigned long long *rng) {
    int B = 3, V = 37, stride = 40;
    float logits[3 * 40];
    test_fill(logits, 3 * 40, 1.0f, rng);
    logits[0 * stride + 5] = logits[0 * stride + 9] = 3.0f;   // a tie: the first wins
    logits[1 * stride + 36] = 4.0f;                           // the last column
    logits[2 * stride + 38] = 9.0f;                           // in the padding: not seen
    int got[3];
    logits_argmax(got, logits, stride, B, V);
    CHECK(got[0] == 5, "argmax takes the first of equal maxima (got %d)", got[0]);
    CHECK(got[1] == 36, "argmax sees the last column (got %d)", got[1]);
    CHECK(got[2] == first_argmax(logits + 2 * stride, V), "argmax ignores the padding (got %d)", got[2]);
}

// ----------------------------------------------------------------------------------------
// the model: cached decoding against the whole sequence recomputed

// logits (B, V) of the last position of the sequences seq (B, T), by the full forward pass
static void full_logits(GPT2 *m, const int *seq, int B, int T, float *logits) {
    gpt2_forward(m, seq, NULL, B, T);
    for (int b = 0; b < B; b++) gpt2_logits_at(m, b, T - 1, logits + (size_t)b * m->config.vocab_size);
}

// cache->logits (B, V of Vp) into out (B, V)
static void cached_logits(const KVCache *cache, float *out) {
    float *all = malloc((size_t)cache->B * cache->Vp * sizeof(float));
    gpt2_decode_logits(cache, all);
    for (int b = 0; b < cache->B; b++) memcpy(out + (size_t)b * cache->V, all + (size_t)b * cache->Vp, cache->V * sizeof(float));
    free(all);
}

// gpt2_decode_chosen or gpt2_decode_greedy called with these arguments (test_exit_status's fn)
typedef struct {
    GPT2 *m;
    KVCache *cache;
    int reading, until;   // gpt2_decode_chosen's position: reading
} DecodeCall;
static void decode_chosen_of(void *p) {
    DecodeCall *a = p;
    int out[4096];
    gpt2_decode_chosen(a->cache, a->reading, out);
}
static void decode_greedy_of(void *p) {
    DecodeCall *a = p;
    gpt2_decode_greedy(a->m, a->cache, a->reading, a->until);
}

static void test_cached_decoding(unsigned long long *rng) {
    GPT2 m;
    gpt2_init_random(&m, tiny_config(24), 11);
    perturb_parameters(&m, rng);

    int B = 2, T0 = 5, maxT = 20, V = m.config.vocab_size;
    int seq[2][24], flat[2 * 24];
    float got[2 * 61], want[2 * 61];
    random_tokens(&seq[0][0], 24, V, rng);
    random_tokens(&seq[1][0], 24, V, rng);
    KVCache cache;
    kv_cache_init(&cache, &m, B, maxT);
    for (int b = 0; b < B; b++) memcpy(flat + b * T0, seq[b], T0 * sizeof(int));
    gpt2_prefill(&m, &cache, flat, B, T0);
    double worst = 0.0;
    int steps = 0;
    for (int pos = T0 - 1; pos < maxT; pos++) {   // pos: the position whose logits are compared
        if (pos >= T0) {
            int next[2] = {seq[0][pos], seq[1][pos]};
            gpt2_decode_step(&m, &cache, next, pos);
        }
        cached_logits(&cache, got);
        for (int b = 0; b < B; b++) memcpy(flat + b * (pos + 1), seq[b], (pos + 1) * sizeof(int));
        full_logits(&m, flat, B, pos + 1, want);
        double e = rel_error(got, want, (size_t)B * V);
        if (e > worst) worst = e;
        steps++;
    }
    CHECK(worst <= 1e-5, "cached logits equal the recomputed ones over %d positions (worst rel error %.2e)", steps, worst);
    CHECK(cache.len == maxT, "the cache holds %d positions after filling it (len %d)", maxT, cache.len);

    // rewind: decode again from position 8 with other tokens; the cache follows
    seq[0][8] = (seq[0][8] + 1) % V;
    seq[1][8] = (seq[1][8] + 7) % V;
    int next[2] = {seq[0][8], seq[1][8]};
    gpt2_decode_step(&m, &cache, next, 8);
    cached_logits(&cache, got);
    for (int b = 0; b < B; b++) memcpy(flat + b * 9, seq[b], 9 * sizeof(int));
    full_logits(&m, flat, B, 9, want);
    CHECK_CLOSE(got, want, (size_t)B * V, 1e-5, "a step at an earlier position overwrites the cache from there");

    // one prompt for all: prefilled once, every sequence then continues on its own
    gpt2_prefill(&m, &cache, seq[0], 1, T0);
    cached_logits(&cache, got);
    full_logits(&m, seq[0], 1, T0, want);
    CHECK_CLOSE(got + V, want, (size_t)V, 1e-5, "a shared prompt's logits reach every sequence");
    int diverge[2] = {3, 9};
    gpt2_decode_step(&m, &cache, diverge, T0);
    cached_logits(&cache, got);
    for (int b = 0; b < B; b++) {
        memcpy(flat + b * (T0 + 1), seq[0], T0 * sizeof(int));
        flat[b * (T0 + 1) + T0] = diverge[b];
    }
    full_logits(&m, flat, B, T0 + 1, want);
    CHECK_CLOSE(got, want, (size_t)B * V, 1e-5, "sequences that share a prompt then decode apart");

    // greedy through the device argmax equals the argmax of the logits
    int am[2];
    gpt2_decode_argmax(&cache, am);
    CHECK(am[0] == first_argmax(got, V) && am[1] == first_argmax(got + V, V), "gpt2_decode_argmax");

    // greedy with the tokens kept on the device: the same tokens and logits as reading each
    // step's argmax back and feeding it in, to the cache's last position
    int greedy[2 * 16];
    int at = greedy_on_device_mismatch(&m, &cache, seq[0], T0, maxT - T0 + 1, greedy);
    CHECK(at < 0, "greedy decoding on the device equals greedy through the host, %d steps "
          "(first difference at step %d)", maxT - T0 + 1, at);
    CHECK(cache.len == maxT, "the greedy steps fill the cache to %d positions (len %d)", maxT, cache.len);
    // the ring keeps the last DECODE_TOKEN_SLOTS positions' tokens; one older is an error
    int last[2];
    gpt2_decode_chosen(&cache, maxT - DECODE_TOKEN_SLOTS, last);   // greedy's step maxT - slots - T0 + 1
    const int *kept = greedy + 2 * (maxT - DECODE_TOKEN_SLOTS - T0 + 1);
    CHECK(last[0] == kept[0] && last[1] == kept[1], "gpt2_decode_chosen of the oldest position kept: "
          "%d %d, want %d %d", last[0], last[1], kept[0], kept[1]);
    gpt2_decode_chosen(&cache, maxT - 1, last);
    gpt2_decode_argmax(&cache, am);
    CHECK(last[0] == am[0] && last[1] == am[1], "gpt2_decode_chosen of the last step: %d %d, its "
          "argmax %d %d", last[0], last[1], am[0], am[1]);
    DecodeCall gone = {&m, &cache, maxT - 1 - DECODE_TOKEN_SLOTS, 0};
    CHECK(test_exit_status(decode_chosen_of, &gone) == 1,
          "gpt2_decode_chosen of a position no longer kept exits(1)");
    kv_cache_free(&cache);

    // at batch 1 the greedy steps run DECODE_GRAPH_STEPS a graph (gpt2_decode_greedy): the same
    // tokens and logits again, over one graph (the last logits at its end), and over a graph and
    // the single steps after it
    KVCache one;
    kv_cache_init(&one, &m, 1, maxT);
    const int tries[2] = {DECODE_GRAPH_STEPS + 1, maxT - T0 + 1};
    for (int k = 0; k < 2; k++) {
        at = greedy_on_device_mismatch(&m, &one, seq[1], T0, tries[k], greedy);
        CHECK(at < 0, "batch 1: greedy decoding in graphs of %d steps equals greedy through the "
              "host, %d tokens (first difference at step %d)", DECODE_GRAPH_STEPS, tries[k], at);
    }
    // at 96-128 rows graphs of DECODE_GRAPH_STEPS steps again: one graph, then a single step
    KVCache many;
    kv_cache_init(&many, &m, 96, maxT);
    int *many_tokens = malloc((size_t)96 * (DECODE_GRAPH_STEPS + 1) * sizeof(int));
    at = greedy_on_device_mismatch(&m, &many, seq[1], T0, DECODE_GRAPH_STEPS + 1, many_tokens);
    CHECK(at < 0, "batch 96: greedy decoding in graphs of %d steps equals greedy through the host "
          "(first difference at step %d)", DECODE_GRAPH_STEPS, at);
    free(many_tokens);
    kv_cache_free(&many);
    // gpt2_decode_greedy's arguments: a position past the cache, or reading ahead of it
    DecodeCall bad[2] = {{&m, &one, T0, maxT}, {&m, &one, maxT + 1, maxT - 1}};
    for (int k = 0; k < 2; k++)
        CHECK(test_exit_status(decode_greedy_of, &bad[k]) == 1, "gpt2_decode_greedy reading from %d "
              "up to %d (a cache of %d) exits(1)", bad[k].reading, bad[k].until, maxT);
    kv_cache_free(&one);
    gpt2_free(&m);
}

// ----------------------------------------------------------------------------------------
// infer_gpt2: a tiny vocabulary (the 256 bytes, 3 merges, <|endoftext|>) written here, so that
// text goes in and out without the GPT-2 files

enum { TV = 260, TVP = 384, TEOT = 259, TMAXT = 64 };

// GPT-2's byte alphabet: printable bytes stand for themselves, the rest for 256 + n
static int byte_codepoint(int b) {
    int n = 0;
    for (int c = 0; c <= 255; c++) {
        int printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
        if (c == b) return printable ? c : 256 + n;
        if (!printable) n++;
    }
    return -1;
}

static void json_token(FILE *f, const char *bytes) {   // a token's bytes as a JSON string
    fputc('"', f);
    for (const uint8_t *p = (const uint8_t *)bytes; *p; p++) {
        int cp = byte_codepoint(*p);
        if (cp == '"' || cp == '\\') fprintf(f, "\\%c", cp);
        else if (cp < 0x80) fputc(cp, f);
        else if (cp < 0x800) { fputc(0xC0 | (cp >> 6), f); fputc(0x80 | (cp & 0x3F), f); }
    }
    fputc('"', f);
}

static void write_tiny_vocab(void) {
    char path[512];
    snprintf(path, sizeof(path), "%s/vocab", dir);
    mkdir(path, 0755);
    path_in(path, sizeof(path), "vocab/vocab.bpe");
    FILE *f = fopen(path, "w");
    fprintf(f, "#version: 0.2\nh e\nl l\nhe ll\n");
    fclose(f);
    path_in(path, sizeof(path), "vocab/encoder.json");
    f = fopen(path, "w");
    fprintf(f, "{");
    char one[2] = {0, 0};
    for (int b = 1; b < 256; b++) {   // byte 0 is written apart: strings here end at NUL
        one[0] = (char)b;
        json_token(f, one);
        fprintf(f, ": %d, ", b);
    }
    fprintf(f, "\"\\u0100\": 0, \"he\": 256, \"ll\": 257, \"hell\": 258, \"<|endoftext|>\": 259}");
    fclose(f);
    // the tokenizer file, the same ids -> bytes
    uint8_t bytes[256];
    const uint8_t *token[TV];
    size_t len[TV];
    for (int b = 0; b < 256; b++) { bytes[b] = (uint8_t)b; token[b] = &bytes[b]; len[b] = 1; }
    const char *merged[4] = {"he", "ll", "hell", "<|endoftext|>"};
    for (int i = 0; i < 4; i++) { token[256 + i] = (const uint8_t *)merged[i]; len[256 + i] = strlen(merged[i]); }
    Tokenizer t;
    char e[256];
    if (tokenizer_from_table(&t, TV, TEOT, token, len, e, sizeof(e)) != 0) {
        printf("FAIL: tiny tokenizer: %s\n", e);
        exit(1);
    }
    path_in(path, sizeof(path), "tok.bin");
    tokenizer_save(&t, path);
    tokenizer_free(&t);
}

static GPT2Config cli_config(void) {
    GPT2Config c = {.max_seq_len = TMAXT, .vocab_size = TV, .padded_vocab_size = TVP,
                    .num_layers = 2, .num_heads = 2, .channels = 32};
    return c;
}

// model.bin: random; eot.bin: one that always says <|endoftext|>
static void write_models(GPT2 *m) {
    char path[512];
    gpt2_init_random(m, cli_config(), 5);
    path_in(path, sizeof(path), "model.bin");
    gpt2_save_checkpoint(m, path);
    GPT2 e;
    gpt2_init_random(&e, cli_config(), 6);
    int C = e.config.channels;
    for (int c = 0; c < C; c++) {   // lnf = 0.5 everywhere, so logits = 0.5 * sum(wte row)
        e.params.lnfw[c] = 0.0f;
        e.params.lnfb[c] = 0.5f;
        e.params.wte[(size_t)TEOT * C + c] = 1.0f;
    }
    path_in(path, sizeof(path), "eot.bin");
    gpt2_save_checkpoint(&e, path);
    gpt2_free(&e);
}

// the greedy continuation by recomputing the whole sequence at every step
static void greedy_reference(GPT2 *m, const int *prompt, int T, int n, int *cont) {
    int seq[TMAXT];
    float logits[TV];
    memcpy(seq, prompt, T * sizeof(int));
    for (int i = 0; i < n; i++) {
        gpt2_forward(m, seq, NULL, 1, T + i);
        gpt2_logits_at(m, 0, T + i - 1, logits);
        cont[i] = seq[T + i] = first_argmax(logits, TV);
    }
}

#define INFER "%s -c %s/model.bin --tokenizer %s/tok.bin --vocab %s/vocab"
#define INFER_ARGS infer_bin, dir, dir, dir

static void test_greedy(GPT2 *m) {
    int prompt[3] = {104, 258, 33}, want[20], got[64];
    greedy_reference(m, prompt, 3, 20, want);
    int rc = run(INFER " --prompt-ids 104,258,33 -n 20 --temperature 0 --ids --no-stop", INFER_ARGS);
    int n = parse_ints(out, got, 64);
    CHECK(rc == 0 && n == 20, "greedy run exits 0 with 20 ids (exit %d, %d ids):\n%s%s", rc, n, out, err);
    CHECK(n == 20 && memcmp(got, want, sizeof(want)) == 0,
          "greedy with the cache equals greedy recomputing the sequence (first ids %d %d %d vs %d %d %d)",
          got[0], got[1], got[2], want[0], want[1], want[2]);
    char first[sizeof(out)];
    memcpy(first, out, sizeof(out));
    run(INFER " --prompt-ids 104,258,33 -n 20 --temperature 0 --ids --no-stop --seed 99", INFER_ARGS);
    CHECK(strcmp(first, out) == 0, "greedy is deterministic (and ignores the seed)");
    run(INFER " --prompt-ids 104,258,33 -n 20 --temperature 0 --ids --no-stop -b 3", INFER_ARGS);
    int lines = 0;
    for (char *line = strstr(out, "--- sample"); line; line = strstr(line + 1, "--- sample")) {
        char *ids = strchr(line, '\n') + 1;
        n = parse_ints(ids, got, 64);
        CHECK(n == 20 && memcmp(got, want, sizeof(want)) == 0, "greedy sample %d of a batch of 3", lines);
        lines++;
    }
    CHECK(lines == 3, "a batch of 3 prints 3 samples (%d):\n%s", lines, out);
    CHECK(strstr(err, "time to first token") && strstr(err, "tok/s"), "timings on stderr:\n%s", err);
}

static void test_sampling(void) {
    char a[sizeof(out)], b[sizeof(out)];
    run(INFER " -p hello -n 30 --seed 5 --ids --no-stop", INFER_ARGS);
    memcpy(a, out, sizeof(out));
    run(INFER " -p hello -n 30 --seed 5 --ids --no-stop", INFER_ARGS);
    CHECK(strcmp(a, out) == 0 && strlen(a) > 30, "sampling with a seed is reproducible:\n%s\n%s", a, out);
    run(INFER " -p hello -n 30 --seed 6 --ids --no-stop", INFER_ARGS);
    CHECK(strcmp(a, out) != 0, "another seed, other samples");
    run(INFER " -p hello -n 30 --seed 5 --ids --no-stop -b 4", INFER_ARGS);
    memcpy(b, out, sizeof(out));
    char *s0 = strstr(b, "--- sample 0\n"), *s1 = strstr(b, "--- sample 1\n");
    CHECK(s0 && s1 && strncmp(s0 + 13, a, strlen(a)) == 0,
          "sample 0 of a batch equals the single sample of the same seed:\n%s\n%s", a, b);
    CHECK(s0 && s1 && strncmp(s0 + 13, s1 + 13, strlen(a) - 1) != 0, "samples of a batch differ");
    // top-k 1 and a tiny top-p are greedy
    run(INFER " -p hello -n 30 --temperature 0 --ids --no-stop", INFER_ARGS);
    memcpy(a, out, sizeof(out));
    run(INFER " -p hello -n 30 --top-k 1 --seed 3 --ids --no-stop", INFER_ARGS);
    CHECK(strcmp(a, out) == 0, "top-k 1 is greedy");
    run(INFER " -p hello -n 30 --top-p 1e-6 --seed 3 --ids --no-stop", INFER_ARGS);
    CHECK(strcmp(a, out) == 0, "a tiny top-p is greedy");

    // every sampled token lies inside its top-k, or its nucleus, of the logits it came from
    const char *modes[3] = {"--top-k 3", "--top-p 0.5 --temperature 0.7", "--top-k 20 --top-p 0.3 --temperature 1.5"};
    for (int mode = 0; mode < 3; mode++) {
        int B = 3, n = 25;
        int rc = run(INFER " -p hello -n %d -b %d %s --seed 8 --ids --no-stop --logits %s/logits.bin",
                     INFER_ARGS, n, B, modes[mode], dir);
        CHECK(rc == 0, "%s runs:\n%s", modes[mode], err);
        char path[512];
        path_in(path, sizeof(path), "logits.bin");
        FILE *f = fopen(path, "rb");
        float *logits = malloc((size_t)n * B * TV * sizeof(float));
        size_t got = f ? fread(logits, sizeof(float), (size_t)n * B * TV, f) : 0;
        if (f) fclose(f);
        CHECK(got == (size_t)n * B * TV, "--logits wrote (steps, samples, V) = (%d, %d, %d) floats (%zu)", n, B, TV, got);
        int inside = 1, distinct = 0;
        for (int b = 0; b < B && got == (size_t)n * B * TV; b++) {
            char marker[32];
            snprintf(marker, sizeof(marker), "--- sample %d\n", b);
            char *line = strstr(out, marker);
            int ids[64];
            int count = line ? parse_ints(line + strlen(marker), ids, 64) : 0;
            inside &= count == n;
            for (int i = 0; i < count && i < n; i++) {
                const float *row = logits + ((size_t)i * B + b) * TV;
                float temp = mode == 0 ? 1.0f : mode == 1 ? 0.7f : 1.5f;
                double p_mine = 0.0, p_above = 0.0, sum = 0.0, maxl = row[first_argmax(row, TV)];
                int rank = 0;
                for (int v = 0; v < TV; v++) {
                    double pv = exp((row[v] - maxl) / temp);
                    int above = row[v] > row[ids[i]];
                    rank += above;
                    if (mode == 2 && v != ids[i]) {   // top-p after top-k: only the 20 best count
                        int r = 0;
                        for (int u = 0; u < TV; u++) r += row[u] > row[v];
                        if (r >= 20) continue;
                    }
                    sum += pv;
                    if (above) p_above += pv;
                    if (v == ids[i]) p_mine = pv;
                }
                (void)p_mine;
                if (mode == 0) inside &= rank < 3;
                if (mode == 1) inside &= p_above / sum < 0.5 + 1e-6;
                if (mode == 2) inside &= rank < 20 && p_above / sum < 0.3 + 1e-6;
                distinct += rank > 0;
            }
        }
        CHECK(inside, "%s: every token inside its candidates", modes[mode]);
        CHECK(distinct > 0, "%s: not always the best token", modes[mode]);
        free(logits);
    }
}

// the bytes of ids in the tiny vocabulary
static size_t tiny_text(const int *ids, int n, char *text) {
    const char *merged[3] = {"he", "ll", "hell"};
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 256) text[len++] = (char)ids[i];
        else if (ids[i] < 259) len += (size_t)sprintf(text + len, "%s", merged[ids[i] - 256]);
    }
    return len;
}

static void test_text(void) {
    char a[sizeof(out)], text[sizeof(out)];
    int ids[64];
    int rc = run(INFER " -p hello -n 12 --seed 2 --no-stop --ids", INFER_ARGS);
    int n = parse_ints(out, ids, 64);
    memcpy(a, out, sizeof(out));
    rc |= run(INFER " -p hello -n 12 --seed 2 --no-stop", INFER_ARGS);
    size_t len = tiny_text(ids, n, text);
    text[len++] = '\n';
    CHECK(rc == 0 && n == 12 && out_len == len && memcmp(out, text, len) == 0,
          "the text out is the bytes of the tokens (exit %d, %zu bytes, %zu expected):\n%s", rc, out_len, len, err);
    run(INFER " --prompt-ids 258,111 -n 12 --seed 2 --no-stop --ids", INFER_ARGS);
    CHECK(strcmp(a, out) == 0, "-p hello encodes to the merges: [hell, o]");
    run("printf 'hello\\n' | " INFER " -n 12 --seed 2 --no-stop --ids", INFER_ARGS);
    CHECK(strcmp(a, out) == 0, "the prompt from stdin (less its final newline) equals -p");
    char b[sizeof(out)];
    run(INFER " -p he -n 12 --seed 2 --no-stop --ids", INFER_ARGS);
    memcpy(b, out, sizeof(out));
    rc = run("printf 'hello\\nhe\\n' | " INFER " -i -n 12 --seed 2 --no-stop --ids", INFER_ARGS);
    char both[2 * sizeof(out)];
    snprintf(both, sizeof(both), "%s%s", a, b);
    CHECK(rc == 0 && strcmp(both, out) == 0, "-i answers each line as -p would:\n%s\nvs\n%s", out, both);
    // a line too long for the context is refused, the next one still answered
    char line[4 * TMAXT + 8];
    memset(line, 'x', 2 * TMAXT);
    line[2 * TMAXT] = '\0';
    rc = run("printf '%s\\nhe\\n' | " INFER " -i -n 12 --seed 2 --no-stop --ids", line, INFER_ARGS);
    CHECK(rc == 0 && strstr(err, "longer than the model's context") && strcmp(out, b) == 0,
          "-i reports a prompt too long and goes on (exit %d):\n%s\n%s", rc, out, err);
}

static void test_stops(void) {
    char model[512];
    path_in(model, sizeof(model), "eot.bin");
    int rc = run("%s -c %s --tokenizer %s/tok.bin --vocab %s/vocab -p hello -n 10 --ids", infer_bin, model, dir, dir);
    CHECK(rc == 0 && strcmp(out, "\n") == 0 && strstr(err, "1 steps"),
          "generation stops at <|endoftext|>, which is not printed (exit %d):\n%s%s", rc, out, err);
    rc = run("%s -c %s --tokenizer %s/tok.bin --vocab %s/vocab -p hello -n 5 --ids --no-stop", infer_bin, model, dir, dir);
    CHECK(rc == 0 && strcmp(out, "259 259 259 259 259\n") == 0, "--no-stop goes on past it:\n%s", out);
    // a prompt of 60 tokens leaves room for 5 in a context of 64
    char ids[512] = "";
    for (int i = 0; i < 60; i++) snprintf(ids + strlen(ids), sizeof(ids) - strlen(ids), "%d,", 97 + i % 20);
    int got[64];
    rc = run(INFER " --prompt-ids %s -n 20 --ids --no-stop", INFER_ARGS, ids);
    CHECK(rc == 0 && parse_ints(out, got, 64) == 5 && strstr(err, "context of 64 tokens is full"),
          "generation ends when the context is full (exit %d):\n%s%s", rc, out, err);
}

static void expect_error(const char *message, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void expect_error(const char *message, const char *what, const char *fmt, ...) {
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    int rc = run("%s", args);
    CHECK(rc != 0 && rc != 128 && strstr(err, message) && !strstr(err, "AddressSanitizer"),
          "%s: expected a failure with '%s', got exit %d:\n%s", what, message, rc, err);
}

static void test_infer_errors(void) {
    char ids[1024] = "";
    for (int i = 0; i < TMAXT + 1; i++) snprintf(ids + strlen(ids), sizeof(ids) - strlen(ids), "%d ", 100 + i);
    run("printf 'not a model at all' > %s/junk.bin && head -c 2000 %s/model.bin > %s/cut.bin", dir, dir, dir);
    expect_error("longer than the model's context of 64 tokens", "prompt too long",
                 INFER " --prompt-ids '%s'", INFER_ARGS, ids);
    expect_error("prompt token 1 is id 260, outside the model's vocabulary [0, 260)", "token id out of range",
                 INFER " --prompt-ids 5,260", INFER_ARGS);
    expect_error("is not a list of token ids", "ids that are not numbers", INFER " --prompt-ids 5,x", INFER_ARGS);
    expect_error("none.bin: no such checkpoint (import_hf", "missing checkpoint", "%s -c %s/none.bin --tokenizer %s/tok.bin --vocab %s/vocab -p hi",
                 infer_bin, dir, dir, dir);
    expect_error("not a model checkpoint", "not a checkpoint", "%s -c %s/junk.bin --tokenizer %s/tok.bin --vocab %s/vocab -p hi",
                 infer_bin, dir, dir, dir);
    expect_error("truncated", "truncated checkpoint", "%s -c %s/cut.bin --tokenizer %s/tok.bin --vocab %s/vocab -p hi",
                 infer_bin, dir, dir, dir);
    expect_error("no such file", "missing vocabulary", "%s -c %s/model.bin --tokenizer %s/tok.bin --vocab %s/none -p hi",
                 infer_bin, dir, dir, dir);
    expect_error("none.bin: no such file", "a --tokenizer that is missing (no fallback to encoder.json)",
                 "%s -c %s/model.bin --tokenizer %s/none.bin --vocab %s/vocab -p hi", infer_bin, dir, dir, dir);
    expect_error("keeps no token", "top-p 0", INFER " -p hi --top-p 0", INFER_ARGS);
    expect_error("flag -n: 0 is out of range", "-n 0", INFER " -p hi -n 0", INFER_ARGS);
    expect_error("flag --temperature: -1 is out of range", "negative temperature", INFER " -p hi --temperature -1", INFER_ARGS);
    expect_error("unknown flag --frobnicate", "unknown flag", INFER " --frobnicate 1", INFER_ARGS);
    expect_error("-p or --prompt-ids, not both", "two prompts", INFER " -p hi --prompt-ids 3", INFER_ARGS);
    // --memory: the KV cache's table on stderr, the text alone on stdout
    int rc = run(INFER " -p hi -n 4 --memory", INFER_ARGS);
    CHECK(rc == 0 && strstr(err, "KV cache and decode step (B=1") && strstr(err, "  total: ") &&
          !strstr(out, "KV cache"), "--memory prints the decode arena's table to stderr:\n%s", err);
    rc = run("%s --help", infer_bin);
    CHECK(rc == 0 && strstr(out, "--top-p") && strstr(out, "-i "), "--help");
}

// infer_gpt2 where its input or output is not what it should be: each an error with a message,
// a non-zero exit, and no file left half-written
static void test_infer_io(void) {
    // stdout on a full disk: text streamed token by token, ids, a batch
    const char *full = "stdout: write error: No space left on device";
    expect_error(full, "text to a full stdout", INFER " -p hello -n 5 --no-stop > /dev/full", INFER_ARGS);
    expect_error(full, "ids to a full stdout", INFER " -p hello -n 5 --ids > /dev/full", INFER_ARGS);
    expect_error(full, "a batch to a full stdout", INFER " -p hello -n 5 -b 2 > /dev/full", INFER_ARGS);
    expect_error(full, "-i to a full stdout", "printf 'he\\n' | " INFER " -i -n 5 > /dev/full", INFER_ARGS);
    // no prompt on stdin: closed, a directory, empty, only a newline
    expect_error("stdin is closed: give the prompt with -p", "closed stdin", INFER " -n 5 <&-", INFER_ARGS);
    expect_error("stdin is closed", "closed stdin with -i", INFER " -i -n 5 <&-", INFER_ARGS);
    expect_error("stdin is a directory", "a directory as stdin", INFER " -n 5 < %s", INFER_ARGS, dir);
    expect_error("stdin is a directory", "a directory as stdin with -i", INFER " -i -n 5 < %s", INFER_ARGS, dir);
    expect_error("stdin held no prompt (it is empty)", "empty stdin", INFER " -n 5 < /dev/null", INFER_ARGS);
    expect_error("stdin: the prompt is more than 64 MiB", "an endless stdin", "yes | " INFER " -n 5",
                 INFER_ARGS);
    expect_error("stdin held no prompt (only a newline)", "a newline on stdin", "printf '\\n' | " INFER " -n 5",
                 INFER_ARGS);
    // unconditional generation, asked for: -p '' starts from <|endoftext|>
    char a[sizeof(out)];
    run(INFER " --prompt-ids 259 -n 6 --ids --no-stop --temperature 0", INFER_ARGS);
    memcpy(a, out, sizeof(out));
    int rc = run(INFER " -p '' -n 6 --ids --no-stop --temperature 0", INFER_ARGS);
    CHECK(rc == 0 && strcmp(a, out) == 0 && strstr(err, "prompt 1 tokens"),
          "-p '' generates from <|endoftext|> (exit %d):\n%s%s", rc, out, err);
    // a NUL byte in the prompt is byte 0's token, as any byte: he|NUL|ll = 256, 0, 257
    run(INFER " --prompt-ids 256,0,257 -n 6 --ids --no-stop --temperature 0", INFER_ARGS);
    memcpy(a, out, sizeof(out));
    rc = run("printf 'he\\000ll' | " INFER " -n 6 --ids --no-stop --temperature 0", INFER_ARGS);
    CHECK(rc == 0 && strcmp(a, out) == 0 && strstr(err, "prompt 3 tokens"),
          "a NUL in the prompt from stdin is encoded, not the end of it (exit %d):\n%s\nvs\n%s%s", rc, out, a, err);
    rc = run("printf 'he\\000ll\\n' | " INFER " -i -n 6 --ids --no-stop --temperature 0", INFER_ARGS);
    CHECK(rc == 0 && strcmp(a, out) == 0, "a NUL in a line of -i is encoded (exit %d):\n%s%s", rc, out, err);
    // --logits: a device, a directory, a full disk; the file appears only when complete
    char logits[512];
    path_in(logits, sizeof(logits), "lg.bin");
    rc = run(INFER " -p hello -n 3 --logits %s && cp %s %s.keep", INFER_ARGS, logits, logits, logits);
    CHECK(rc == 0, "--logits writes its file (exit %d): %s", rc, err);
    expect_error("/dev/full is not a regular file", "--logits to a device", INFER " -p hello -n 5 --logits /dev/full",
                 INFER_ARGS);
    expect_error("is a directory", "--logits to a directory", INFER " -p hello -n 5 --logits %s", INFER_ARGS, dir);
    expect_error("lg.bin is left as it was", "--logits on a full disk (a file size limit here)",
                 "trap '' XFSZ; ulimit -f 8; " INFER " -p hello -n 60 --no-stop --ids --logits %s", INFER_ARGS, logits);
    run("cmp %s %s.keep && ls %s | grep -c 'lg.bin.tmp'", logits, logits, dir);
    CHECK(strcmp(out, "0\n") == 0, "a failed --logits leaves the earlier file intact and no temporary file (%s)", out);
}

// every loader given a directory says so (fopen_or_die, file_size_or_die): the checkpoint, the
// tokenizer file, encoder.json, vocab.bpe; and the data loader's token files, through train_gpt2
static void test_loader_directories(void) {
    run("mkdir -p %s/dirs/a/encoder.json %s/dirs/b/vocab.bpe %s/dirs/model.bin && cp %s/vocab/vocab.bpe %s/dirs/a && "
        "cp %s/vocab/encoder.json %s/dirs/b", dir, dir, dir, dir, dir, dir, dir);
    expect_error("model.bin is a directory, not a file", "a directory as the checkpoint",
                 "%s -c %s/dirs/model.bin --tokenizer %s/tok.bin --vocab %s/vocab -p hi", infer_bin, dir, dir, dir);
    expect_error("dirs is a directory, not a file", "a directory as the tokenizer file",
                 "%s -c %s/model.bin --tokenizer %s/dirs --vocab %s/vocab -p hi", infer_bin, dir, dir, dir);
    expect_error("encoder.json is a directory, not a file", "a directory as encoder.json",
                 "%s -c %s/model.bin --tokenizer %s/tok.bin --vocab %s/dirs/a -p hi", infer_bin, dir, dir, dir);
    expect_error("vocab.bpe is a directory, not a file", "a directory as vocab.bpe",
                 "%s -c %s/model.bin --tokenizer %s/tok.bin --vocab %s/dirs/b -p hi", infer_bin, dir, dir, dir);
    char train[600];
    snprintf(train, sizeof(train), "%.*s/train_gpt2", (int)(strrchr(infer_bin, '/') - infer_bin), infer_bin);
    expect_error("dirs is a directory, not a file", "a directory as a token file",
                 "%s -e d1 -i %s/dirs -j %s/dirs -b 1 -t 8 -x 1", train, dir, dir);
}

// ----------------------------------------------------------------------------------------
// import_hf: tiny GPT-2 safetensors files written here; values k/64, |k| <= 64, exact in
// F16 and BF16, so every dtype imports without rounding

typedef struct {
    char name[64];
    const char *dtype;   // F32, F16, BF16 hold data's values; any other dtype is zero bytes
    int rows, cols;      // cols 0: one dimension
    float *data;
    long shift;          // added to both data_offsets in the header (0: where the data really is)
} StTensor;

static uint16_t to_half(float f) {   // exact for the values used here (normal or zero)
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    if ((u & 0x7FFFFFFF) == 0) return sign;
    int e = (int)((u >> 23) & 0xFF) - 127 + 15;
    return (uint16_t)(sign | (e << 10) | ((u >> 13) & 0x3FF));
}

static size_t dtype_bytes(const char *dtype) {
    if (!strcmp(dtype, "F32")) return 4;
    if (!strcmp(dtype, "F16") || !strcmp(dtype, "BF16")) return 2;
    return !strcmp(dtype, "I64") ? 8 : 1;   // BOOL, and the unknown dtypes of the error tests
}

// a safetensors file of the tensors t in order; pad_header follows the JSON in the header
static void write_safetensors(const char *path, StTensor *t, int n, const char *pad_header) {
    char header[16384];
    size_t h = 0, offset = 0;
    h += snprintf(header + h, sizeof(header) - h, "{\"__metadata__\": {\"format\": \"pt\"}");
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)t[i].rows * (t[i].cols ? t[i].cols : 1) * dtype_bytes(t[i].dtype);
        char shape[64];
        if (t[i].cols) snprintf(shape, sizeof(shape), "%d, %d", t[i].rows, t[i].cols);
        else snprintf(shape, sizeof(shape), "%d", t[i].rows);
        h += snprintf(header + h, sizeof(header) - h, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [%s], "
                      "\"data_offsets\": [%ld, %ld]}", t[i].name, t[i].dtype, shape, (long)offset + t[i].shift,
                      (long)(offset + bytes) + t[i].shift);
        offset += bytes;
    }
    h += snprintf(header + h, sizeof(header) - h, "}%s", pad_header ? pad_header : "");
    FILE *f = fopen(path, "wb");
    uint64_t len = h;
    fwrite(&len, 8, 1, f);
    fwrite(header, 1, h, f);
    for (int i = 0; i < n; i++) {
        size_t elems = (size_t)t[i].rows * (t[i].cols ? t[i].cols : 1);
        for (size_t k = 0; k < elems; k++) {
            float x = t[i].data ? t[i].data[k] : 0.0f;
            uint32_t u;
            memcpy(&u, &x, 4);
            uint16_t bits = !strcmp(t[i].dtype, "F16") ? to_half(x) : (uint16_t)(u >> 16);
            uint8_t zeros[8] = {0};
            if (!strcmp(t[i].dtype, "F32")) fwrite(&x, 4, 1, f);
            else if (dtype_bytes(t[i].dtype) == 2) fwrite(&bits, 2, 1, f);
            else fwrite(zeros, dtype_bytes(t[i].dtype), 1, f);
        }
    }
    fclose(f);
}

enum { HL = 2, HC = 16, HNH = 2, HT = 8, HV = 50, HVP = 128 };

// the tensors of a tiny GPT-2 in HF's layout; returns the count
static int hf_tensors(StTensor *t, const char *prefix, unsigned long long *rng) {
    const char *dtypes[3] = {"F32", "F16", "BF16"};
    int n = 0;
    #define ADD(nm, r, c) do { snprintf(t[n].name, sizeof(t[n].name), "%s%s", prefix, nm); \
        t[n].rows = (r); t[n].cols = (c); t[n].dtype = dtypes[n % 3]; \
        size_t e_ = (size_t)(r) * ((c) ? (c) : 1); t[n].data = malloc(e_ * sizeof(float)); \
        for (size_t k = 0; k < e_; k++) t[n].data[k] = (float)(int)(test_randf(rng) * 64.0f) / 64.0f; \
        n++; } while (0)
    ADD("wte.weight", HV, HC);
    ADD("wpe.weight", HT, HC);
    for (int l = 0; l < HL; l++) {
        char nm[64];
        const char *suffix[12] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                  "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
        int shape[12][2] = {{HC, 0}, {HC, 0}, {HC, 3 * HC}, {3 * HC, 0}, {HC, HC}, {HC, 0},
                            {HC, 0}, {HC, 0}, {HC, 4 * HC}, {4 * HC, 0}, {4 * HC, HC}, {HC, 0}};
        for (int i = 0; i < 12; i++) {
            snprintf(nm, sizeof(nm), "h.%d.%s", l, suffix[i]);
            ADD(nm, shape[i][0], shape[i][1]);
        }
    }
    ADD("ln_f.weight", HC, 0);
    ADD("ln_f.bias", HC, 0);
    #undef ADD
    return n;
}

static const StTensor *hf_find(const StTensor *t, int n, const char *prefix, const char *name) {
    char full[96];
    snprintf(full, sizeof(full), "%s%s", prefix, name);
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, full)) return &t[i];
    return NULL;
}

// the checkpoint import_hf must write, as floats after the header
static float *expected_checkpoint(const StTensor *t, int n, const char *prefix, size_t *count) {
    size_t C = HC, total = HVP * C + HT * C + HL * (12 * C * C + 13 * C) + 2 * C;
    float *e = calloc(total, sizeof(float)), *p = e;
    memcpy(p, hf_find(t, n, prefix, "wte.weight")->data, HV * C * sizeof(float));
    p += HVP * C;   // padding rows stay zero
    memcpy(p, hf_find(t, n, prefix, "wpe.weight")->data, HT * C * sizeof(float));
    p += HT * C;
    const char *order[12] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                             "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                             "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    for (int i = 0; i < 12; i++) {
        for (int l = 0; l < HL; l++) {
            char nm[64];
            snprintf(nm, sizeof(nm), "h.%d.%s", l, order[i]);
            const StTensor *s = hf_find(t, n, prefix, nm);
            if (s->cols) {   // HF (in, out) -> ours (out, in)
                for (int r = 0; r < s->cols; r++)
                    for (int c = 0; c < s->rows; c++) p[(size_t)r * s->rows + c] = s->data[(size_t)c * s->cols + r];
                p += (size_t)s->rows * s->cols;
            } else {
                memcpy(p, s->data, s->rows * sizeof(float));
                p += s->rows;
            }
        }
    }
    memcpy(p, hf_find(t, n, prefix, "ln_f.weight")->data, C * sizeof(float));
    p += C;
    memcpy(p, hf_find(t, n, prefix, "ln_f.bias")->data, C * sizeof(float));
    p += C;
    *count = (size_t)(p - e);
    return e;
}

// the floats of a checkpoint file (v3, or v5 widened) after checking its header
static float *read_checkpoint(const char *path, int version, size_t count) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    GPT2Config want = {.max_seq_len = HT, .vocab_size = HV, .padded_vocab_size = HVP, .num_layers = HL,
                       .num_heads = HNH, .channels = HC};
    int32_t header[CHECKPOINT_HEADER_INTS], expected[CHECKPOINT_HEADER_INTS];
    checkpoint_header_pack(expected, want, version);
    float *x = malloc(count * sizeof(float));
    int ok = fread(header, sizeof(int32_t), CHECKPOINT_HEADER_INTS, f) == CHECKPOINT_HEADER_INTS &&
             memcmp(header, expected, sizeof(header)) == 0;
    if (ok && version == CHECKPOINT_VERSION_FP32) {
        ok = fread(x, sizeof(float), count, f) == count;
    } else if (ok) {
        uint16_t *bits = malloc(count * 2);
        ok = fread(bits, 2, count, f) == count;
        for (size_t i = 0; ok && i < count; i++) {
            uint32_t u = (uint32_t)bits[i] << 16;
            memcpy(&x[i], &u, 4);
        }
        free(bits);
    }
    ok = ok && fgetc(f) == EOF;
    fclose(f);
    if (!ok) { free(x); return NULL; }
    return x;
}

// import_hf on files that are not what they should be: each refused with a message, before
// anything is written (the caller checks that the earlier output is intact)
static void test_import_defects(StTensor *t, int n, const char *st, const char *ckpt) {
    char bad[512];
    path_in(bad, sizeof(bad), "hf/bad.safetensors");
#define IMPORT_FAILS(message, what) expect_error(message, what, "%s --n-head 2 %s %s", import_bin, bad, ckpt)
    // wte (0, C): an empty vocabulary, which no program could load
    int rows = t[0].rows;
    t[0].rows = 0;
    write_safetensors(bad, t, n, NULL);
    t[0].rows = rows;
    IMPORT_FAILS("V must be at least 1", "V = 0");
    // a name twice, exactly or once with the "transformer." prefix
    t[n] = t[n - 1];
    write_safetensors(bad, t, n + 1, NULL);
    IMPORT_FAILS("tensor ln_f.bias is named twice", "a duplicate name");
    snprintf(t[n].name, sizeof(t[n].name), "transformer.ln_f.bias");
    write_safetensors(bad, t, n + 1, NULL);
    IMPORT_FAILS("ln_f.bias and transformer.ln_f.bias are the same tensor", "a duplicate name, with and without the prefix");
    // a tensor no GPT-2 has, or a block past a gap in the numbering: it would be dropped
    snprintf(t[n].name, sizeof(t[n].name), "h.3.ln_1.weight");
    write_safetensors(bad, t, n + 1, NULL);
    IMPORT_FAILS("tensor h.3.ln_1.weight is not part of a GPT-2 model with 2 blocks", "a block after a gap");
    // the header: garbage after the JSON, a JSON error, a dtype the format does not have
    write_safetensors(bad, t, n, "  x");
    IMPORT_FAILS("only padding spaces may follow", "garbage after the JSON header");
    write_safetensors(bad, t, n, "\n");
    IMPORT_FAILS("byte 0x0A after the header's JSON object", "a newline after the JSON header");
    // names that are not JSON strings (data/json.c): the offset counts file bytes, the 8 of the
    // header length included; t[0]'s name begins 36 bytes into the JSON, after the __metadata__
    char name0[sizeof(t[0].name)];
    memcpy(name0, t[0].name, sizeof(name0));
    snprintf(t[0].name, sizeof(t[0].name), "\\udc00%.48s", name0);
    write_safetensors(bad, t, n, NULL);
    IMPORT_FAILS("bad safetensors file: at byte 44: lone surrogate \\uDC00", "a lone surrogate in a name");
    snprintf(t[0].name, sizeof(t[0].name), "\xC0\xAF%.48s", name0);   // '/' spelled in 2 bytes
    write_safetensors(bad, t, n, NULL);
    IMPORT_FAILS("at byte 44: invalid UTF-8 (byte 0xC0) in a string", "an overlong UTF-8 sequence in a name");
    memcpy(t[0].name, name0, sizeof(name0));
    const char *dtype = t[5].dtype;
    t[5].dtype = "F99";
    write_safetensors(bad, t, n, NULL);
    t[5].dtype = dtype;
    IMPORT_FAILS("tensor h.0.attn.c_attn.bias: unknown dtype \"F99\"", "an unknown dtype");
    // data_offsets: overlapping, a gap, bytes that do not match the shape
    t[6].shift = -4;
    write_safetensors(bad, t, n, NULL);
    IMPORT_FAILS("overlap in the data", "overlapping offsets");
    for (int i = 6; i < n; i++) t[i].shift = 4;
    write_safetensors(bad, t, n, NULL);
    run("printf 'abcd' >> %s", bad);   // so that the last tensor ends where the data does
    IMPORT_FAILS("belong to no tensor", "a gap in the data");
    for (int i = 6; i < n; i++) t[i].shift = 0;
    t[n - 1].shift = 2;   // the last tensor: 2 bytes short in the header, 2 bytes past the data
    write_safetensors(bad, t, n, NULL);
    t[n - 1].shift = 0;
    IMPORT_FAILS("run past the", "offsets past the data");
    run("printf 'abc' >> %s", st);   // a good file with bytes after its data
    expect_error("3 bytes after the last tensor's data belong to no tensor", "bytes after the data",
                 "%s --n-head 2 %s %s", import_bin, st, ckpt);
    write_safetensors(st, t, n, NULL);
    // config.json beside the file
    run("printf '{\"n_head\": 4294967298}' > %s/hf/config.json", dir);
    expect_error("n_head: 4294967298 is out of range [1, 2147483647]", "n_head overflowing 32 bits",
                 "%s %s %s", import_bin, st, ckpt);
    run("printf '{\"n_head\": -2}' > %s/hf/config.json", dir);   // once read as 2
    expect_error("n_head: -2 is out of range [1, 2147483647]", "a negative n_head", "%s %s %s", import_bin, st, ckpt);
    run("printf '{\"n_head\": 2, \"n_embd\": 32}' > %s/hf/config.json", dir);
    expect_error("n_embd is 32, but the weights have C = 16", "config.json disagreeing with the weights",
                 "%s %s %s", import_bin, st, ckpt);
    run("printf '{\"n_head\": 3}' > %s/hf/config.json", dir);
    expect_error("is not a multiple of 3 heads (from n_head of ", "config.json's heads that do not "
                 "divide C, named on stderr", "%s %s %s", import_bin, st, ckpt);
    run("printf '{\"n_head\": 2,}' > %s/hf/config.json", dir);
    expect_error("config.json: at byte 13: expected a key", "config.json that is not JSON",
                 "%s %s %s", import_bin, st, ckpt);
    run("rm %s/hf/config.json && mkdir %s/hf/config.json", dir, dir);
    expect_error("config.json is a directory", "config.json a directory", "%s %s %s", import_bin, st, ckpt);
    run("rmdir %s/hf/config.json", dir);
    // files that are not files, or not safetensors
    run(": > %s", bad);
    IMPORT_FAILS("shorter than the 8-byte header length", "an empty file");
    expect_error("hf is a directory", "a directory as the input", "%s --n-head 2 %s/hf %s", import_bin, dir, ckpt);
    expect_error("hf is a directory", "a directory as the output", "%s --n-head 2 %s %s/hf", import_bin, st, dir);
    expect_error("/dev/full is not a regular file", "a device as the output", "%s --n-head 2 %s /dev/full", import_bin, st);
    // a full disk (a file size limit here): the write fails, the earlier output stays
    expect_error("write error", "a full disk",
                 "trap '' XFSZ; ulimit -f 16; %s --n-head 2 %s %s", import_bin, st, ckpt);
#undef IMPORT_FAILS
}

static void test_import(unsigned long long *rng) {
    StTensor t[64];
    const char *prefixes[2] = {"transformer.", ""};
    char st[512], ckpt[512];
    path_in(st, sizeof(st), "hf/model.safetensors");
    path_in(ckpt, sizeof(ckpt), "hf/model.bin");
    run("mkdir -p %s/hf", dir);
    for (int k = 0; k < 2; k++) {
        int n = hf_tensors(t, prefixes[k], rng);
        t[n] = (StTensor){.dtype = "BOOL", .rows = 4};   // a mask, which the checkpoint does not need
        snprintf(t[n].name, sizeof(t[n].name), "%sh.0.attn.bias", prefixes[k]);
        write_safetensors(st, t, n + 1, k ? "    " : NULL);   // the header may end in spaces
        size_t count;
        float *want = expected_checkpoint(t, n, prefixes[k], &count);
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            int rc = run("%s --n-head %d %s %s %s", import_bin, HNH, bf16 ? "--bf16" : "", st, ckpt);
            CHECK(rc == 0 && strstr(out, "wrote"), "import_hf exits 0 (exit %d):\n%s%s", rc, out, err);
            float *got = read_checkpoint(ckpt, bf16 ? CHECKPOINT_VERSION_BF16 : CHECKPOINT_VERSION_FP32, count);
            CHECK(got && memcmp(got, want, count * sizeof(float)) == 0,
                  "import_hf (names '%s...', %s) writes the expected checkpoint: header, transposes, padding",
                  prefixes[k], bf16 ? "bf16" : "fp32");
            free(got);
        }
        free(want);
        if (k == 0) {
            // the model loads, runs, and config.json gives the head count
            GPT2 m;
            gpt2_load_checkpoint(&m, ckpt);
            int tokens[5] = {1, 2, 3, 4, 49};
            gpt2_forward(&m, tokens, NULL, 1, 5);
            float logits[HV];
            gpt2_logits_at(&m, 0, 4, logits);
            int finite = 1;
            for (int i = 0; i < HV; i++) finite &= isfinite(logits[i]);
            CHECK(finite && m.config.num_heads == HNH, "the imported model runs");
            gpt2_free(&m);
            run("printf '{\"n_embd\": 16,\\n  \"n_head\" : 2}' > %s/hf/config.json && %s %s %s/hf/cfg.bin",
                dir, import_bin, st, dir);
            CHECK(strstr(out, "n_head 2 from"), "n_head from config.json:\n%s%s", out, err);
            run("rm %s/hf/config.json", dir);
        }
        for (int i = 0; i < n; i++) free(t[i].data);
    }

    // errors, each leaving an earlier output file as it was
    int n = hf_tensors(t, "", rng);
    run("cp %s %s/hf/keep.bin", ckpt, dir);
    expect_error("cannot tell the number of heads", "no head count", "%s %s %s", import_bin, st, ckpt);
    expect_error("is not a multiple of 3 heads (from --n-head)", "heads that do not divide C", "%s --n-head 3 %s %s", import_bin, st, ckpt);
    StTensor fewer[64];   // all but h.1.mlp.c_proj.bias, the third from the end
    for (int i = 0, k = 0; i < n; i++)
        if (i != n - 3) fewer[k++] = t[i];
    write_safetensors(st, fewer, n - 1, NULL);
    expect_error("missing tensor h.1.mlp.c_proj.bias", "missing tensor", "%s --n-head 2 %s %s", import_bin, st, ckpt);
    t[4].cols = 2 * HC;   // h.0.attn.c_attn.weight
    t[4].rows = HC + HC / 2;
    write_safetensors(st, t, n, NULL);
    t[4].rows = HC;
    t[4].cols = 3 * HC;
    expect_error("tensor h.0.attn.c_attn.weight has shape (24, 32), expected (16, 48)", "wrong shape",
                 "%s --n-head 2 %s %s", import_bin, st, ckpt);
    const char *dtype = t[3].dtype;
    t[3].dtype = "I64";
    write_safetensors(st, t, n, NULL);
    t[3].dtype = dtype;
    expect_error("has dtype I64", "unsupported dtype", "%s --n-head 2 %s %s", import_bin, st, ckpt);
    t[7].data[3] = NAN;
    t[7].dtype = "F32";
    write_safetensors(st, t, n, NULL);
    t[7].data[3] = 0.0f;
    expect_error("not finite", "a NaN weight", "%s --n-head 2 %s %s", import_bin, st, ckpt);
    write_safetensors(st, t, n, NULL);
    run("head -c $(( $(stat -c %%s %s) - 100 )) %s > %s/hf/cut.safetensors && printf '\\377\\377\\377\\377\\377\\0\\0\\0' > %s/hf/huge.safetensors",
        st, st, dir, dir);
    expect_error("(truncated?)", "truncated data", "%s --n-head 2 %s/hf/cut.safetensors %s", import_bin, dir, ckpt);
    expect_error("runs past the end of the file", "header length too large", "%s --n-head 2 %s/hf/huge.safetensors %s",
                 import_bin, dir, ckpt);
    expect_error("cannot open", "missing input", "%s %s/hf/none.safetensors %s", import_bin, dir, ckpt);
    test_import_defects(t, n, st, ckpt);
    char keep[512];
    path_in(keep, sizeof(keep), "hf/keep.bin");
    run("cmp -s %s %s && ls %s/hf | grep -c tmp", keep, ckpt, dir);
    CHECK(strcmp(out, "0\n") == 0, "failed imports leave the earlier output intact and no temporary file (%s)", out);
    // lm_head: equal to wte is fine, different is refused
    StTensor head = t[0];
    snprintf(head.name, sizeof(head.name), "lm_head.weight");
    t[n] = head;
    write_safetensors(st, t, n + 1, NULL);
    int rc = run("%s --n-head 2 %s %s", import_bin, st, ckpt);
    CHECK(rc == 0, "a tied lm_head.weight is accepted:\n%s", err);
    float *other = malloc(HV * HC * sizeof(float));
    memcpy(other, head.data, HV * HC * sizeof(float));
    other[17] += 0.5f;
    t[n].data = other;
    write_safetensors(st, t, n + 1, NULL);
    expect_error("untied", "an untied lm_head", "%s --n-head 2 %s %s", import_bin, st, ckpt);
    free(other);
    for (int i = 0; i < n; i++) free(t[i].data);
}

int main(void) {
    unsigned long long rng = test_seed();
    test_attention_decode(&rng);
    test_decode_matches_forward(&rng);
    test_kv_cache_store(&rng);
    test_argmax(&rng);
    test_cached_decoding(&rng);

    const char *build = getenv("BUILD");
    snprintf(infer_bin, sizeof(infer_bin), "%s/infer_gpt2", build ? build : "build/cpu-flash");
    snprintf(import_bin, sizeof(import_bin), "%s/import_hf", build ? build : "build/cpu-flash");
    snprintf(dir, sizeof(dir), "/tmp/test_infer_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    if (access(infer_bin, X_OK) != 0) {
        CHECK(0, "%s not found (run through `make test`)", infer_bin);
    } else {
        write_tiny_vocab();
        GPT2 m;
        write_models(&m);
        test_greedy(&m);
        test_sampling();
        test_text();
        test_stops();
        test_infer_errors();
        test_infer_io();
        test_loader_directories();
        gpt2_free(&m);
    }
    if (access(import_bin, X_OK) != 0)
        CHECK(0, "%s not found (run through `make test`; the Makefile builds it with test-build)", import_bin);
    else test_import(&rng);
    int rc = test_summary();
    if (rc == 0) run("rm -rf %s", dir);
    else printf("files kept in %s\n", dir);
    return rc;
}
