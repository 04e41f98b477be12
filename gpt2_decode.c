// gpt2_decode.c: GPT-2 generation with a KV cache: the inference forward of the same model as
// gpt2.c, in two parts.
//   prefill      the prompt goes through the model's own forward pass (gpt2_forward, so the
//                built attention backend, naive or flash), and each layer's keys and values
//                are copied from its qkv activations into the cache
//   decode step  one token per sequence: the embedding of the step's tokens at its position,
//                then the same layers at N = B rows, as the decode step's
//                fused calls (layers.h): per layer layernorm + QKV, the attention of the new
//                query against the cache (attention_decode_step, which writes the new key and
//                value into the cache first, so the token attends to itself as causality
//                wants), attention projection + residual, layernorm + FC + GELU, FC projection
//                + residual (all the layers one call, decode_layers_step); then the final
//                layernorm + LM head + argmax, left where the next step reads its tokens,
//                copied to the host's ring, and embedded for the next step (at a graph's end
//                the next graph's positions written instead): decode_step_end.
//                On CUDA at a few rows each is one kernel
//                (fused.cu, decode_attention.cu), 5 a layer where the plain layers took 12, and
//                at one row on Hopper 2 (layernorm, QKV, the attention and each head's part of
//                its projection in one; the parts' sum, layernorm, FC and the FC projection's
//                parts in another: decode_layers_sm90.cu); with more rows they are the
//                plain layers or Hopper's wgmma kernels (decode_gemm_sm90.cu). From 18
//                rows on Hopper the layers run as two to four parts of the batch at once
//                (decode_step_parts), all but the first on branch streams.
// Like gpt2.c, it calls only layers/ and never knows the backend. The decode step reads its
// tokens and position from device memory, and the device moves the position on itself, so on
// CUDA a step (or several) is one graph replayed again and again, and greedy steps need nothing
// from the host: DECODE_GRAPH_STEPS of them one graph, each step's position in a cell of its own
// written before the graph starts, so that no kernel waits at a step's start for the step
// before to end (decode_graph).
#include "gpt2.h"

#include <string.h>

// ----------------------------------------------------------------------------------------
// the cache and the decode step's activations (gpt2.h: GPT2_DECODE_TENSORS)

#define DECODE_NAME(name, ...) #name,
static const char *const decode_names[NUM_DECODE_TENSORS] = {GPT2_DECODE_TENSORS(DECODE_NAME)};
#undef DECODE_NAME

void kv_cache_init(KVCache *cache, const GPT2 *model, int B, int maxT) {
    GPT2Config c = model->config;
    if (B < 1 || maxT < 1 || maxT > c.max_seq_len)
        die("KV cache of %d sequences of %d positions: needs B >= 1 and 1 <= maxT <= %d (the "
            "model's max_seq_len)", B, maxT, c.max_seq_len);
    memset(cache, 0, sizeof(*cache));
    cache->L = c.num_layers;
    cache->B = B;
    cache->maxT = maxT;
    cache->NH = c.num_heads;
    cache->HS = c.channels / c.num_heads;
    cache->V = c.vocab_size;
    cache->Vp = c.padded_vocab_size;
    // the local names the table's shapes are written in
    size_t L = c.num_layers, C = c.channels, Vp = c.padded_vocab_size;
    int NH = cache->NH, HS = cache->HS;
    // the parts of the batch at once: part i is rows [i * B / parts, (i + 1) * B / parts), and
    // the branches' parts (all but part 0) get scratches for the most rows a part has
    cache->parts = decode_step_parts(B, c.channels);
    size_t Pb = cache->parts - 1, *part_bytes = cache->part_bytes;
    if (Pb) {
        int rows = (B + cache->parts - 1) / cache->parts;
        part_bytes[0] = ROW_STATS_FLOATS(rows, C) * sizeof(float);
        part_bytes[1] = attention_decode_scratch_size(rows, maxT, NH, HS);
        part_bytes[2] = fused_scratch_size(rows, C, 4 * C);
        for (int i = 0; i < 3; i++) part_bytes[i] = arena_align(part_bytes[i]);
    }
#define SIZE(name, type, elements) cache->bytes[DECODE_##name] = (elements) * sizeof(type);
    GPT2_DECODE_TENSORS(SIZE)
#undef SIZE
    size_t offsets[NUM_DECODE_TENSORS];
    char *base = arena_alloc(offsets, cache->bytes, NUM_DECODE_TENSORS,
                             "KV cache and decode activations");
    size_t total = offsets[NUM_DECODE_TENSORS - 1] + cache->bytes[NUM_DECODE_TENSORS - 1];
    dev_memset_zero(base, total);   // the scratches' counters start at zero (layers.h)
    cache->memory = base;
#define POINT(name, type, ...) cache->name = (type *)(base + offsets[DECODE_##name]);
    GPT2_DECODE_TENSORS(POINT)
#undef POINT
    cache->chosen = dev_host_alloc((size_t)DECODE_TOKEN_SLOTS * B * sizeof(int),
                                   "greedy decoding's tokens");
    for (int i = 0; i < DECODE_TOKEN_SLOTS; i++) {
        cache->chosen_done[i] = dev_event_new();
        cache->chosen_pos[i] = -1;
    }
}

void kv_cache_free(KVCache *cache) {
    if (cache->memory) dev_synchronize();   // queued steps may still write the ring and the arena
    for (int i = 0; i < 2; i++) device_graph_free(cache->graph[i]);
    dev_host_free(cache->chosen);
    for (int i = 0; i < DECODE_TOKEN_SLOTS; i++) dev_event_free(cache->chosen_done[i]);
    if (cache->memory) dev_free(cache->memory);
    memset(cache, 0, sizeof(*cache));
}

void kv_cache_print_memory(const KVCache *cache, FILE *out) {
    char buf[32];
    fprintf(out, "KV cache and decode step (B=%d, maxT=%d, %s):\n", cache->B, cache->maxT, FLOATX_NAME);
    double total = arena_print(out, decode_names, cache->bytes, NUM_DECODE_TENSORS);
    format_bytes(buf, sizeof(buf), total);
    fprintf(out, "  total: %s\n", buf);
}

// ----------------------------------------------------------------------------------------
// prefill

// the first step's position cell (layers.h), the position the next cache write and attention
// use, in device memory (in stream order, without waiting for the device)
static void upload_position(KVCache *cache, int pos) {
    dev_upload_async(cache->tokens + cache->B, &pos, sizeof(pos));
}

// The steps (or prefill) at positions pos .. pos + n - 1 have been queued, and their ends
// (decode_step_end, prefill's decode_advance) will leave their tokens in slots (pos + i) %
// DECODE_TOKEN_SLOTS: the slots' events mark when. Positions from pos on that the ring held
// belong to a continuation given up (a rewind, a new prefill): forgotten.
static void record_chosen(KVCache *cache, int pos, int n) {
    for (int i = 0; i < DECODE_TOKEN_SLOTS; i++)
        if (cache->chosen_pos[i] >= pos) cache->chosen_pos[i] = -1;
    for (int i = 0; i < n; i++) {
        int slot = (pos + i) % DECODE_TOKEN_SLOTS;
        dev_event_record(cache->chosen_done[slot]);
        cache->chosen_pos[slot] = pos + i;
    }
}

void gpt2_prefill(GPT2 *model, KVCache *cache, const int *tokens, int Bp, int T) {
    if (Bp != cache->B && Bp != 1)
        die("prefill of %d prompts into a cache of %d sequences (give %d prompts, or 1 for all)",
            Bp, cache->B, cache->B);
    if (T < 1 || T > cache->maxT)
        die("a prompt of %d tokens does not fit a KV cache of %d positions", T, cache->maxT);
    gpt2_forward(model, tokens, NULL, Bp, T);   // checks the token ids

    int C = model->config.channels, Vp = cache->Vp;
    size_t layer_stride = (size_t)cache->B * cache->maxT * C;   // one layer of the cache
    upload_position(cache, 0);
    for (int l = 0; l < cache->L; l++) {
        const floatX *qkv = gpt2_layer_acts(model, l).qkv;   // (Bp, T, 3C)
        floatX *k = cache->k + l * layer_stride, *v = cache->v + l * layer_stride;
        if (Bp == cache->B) {
            kv_cache_store(k, v, qkv, cache->tokens + cache->B, Bp, T, cache->maxT, cache->NH,
                           cache->HS);
        } else {   // one prompt, the same keys and values in every sequence
            for (int b = 0; b < cache->B; b++) {
                size_t offset = KV_CACHE_AT(b, 0, 0, cache->maxT, cache->NH, cache->HS);
                kv_cache_store(k + offset, v + offset, qkv, cache->tokens + cache->B, 1, T,
                               cache->maxT, cache->NH, cache->HS);
            }
        }
    }
    // logits of the last position, row (b, T-1) of the forward's (Bp, T, Vp)
    for (int b = 0; b < cache->B; b++) {
        size_t row = (size_t)(Bp == 1 ? 0 : b) * T + (T - 1);
        dev_copy(cache->logits + (size_t)b * Vp, model->acts.logits + row * Vp,
                 (size_t)Vp * sizeof(floatX));
    }
    logits_argmax(cache->tokens, cache->logits, Vp, cache->B, cache->V);
    // the chosen tokens to the host's ring, and the next graph's positions from T on
    upload_position(cache, T - 1);
    decode_advance(cache->chosen, DECODE_TOKEN_SLOTS, cache->tokens + cache->B, DECODE_GRAPH_STEPS,
                   0, 1, cache->tokens, cache->B);
    record_chosen(cache, T - 1, 1);
    cache->len = T;
}

// ----------------------------------------------------------------------------------------
// decode step: the layers of one new token per sequence, N = B rows

// Rows [r0, r0 + n) of the step (a part of the batch, or all of it), and the scratches their
// calls use (each part on a branch has its own).
typedef struct {
    int r0, n;
    float *x_stats;
    void *att_scratch, *fused_scratch;
} DecodeRows;

// The layers of those rows: from their rows of cache->x, the embedded tokens, through every
// layer (decode_layers_step), on their slices of the step's tensors and of the cache; the
// residual stream stays in cache->x, each projection adding to it in place. Launches the same
// work with the same arguments at every position: the position is read from its cell, pos.
static void decode_rows(GPT2 *model, KVCache *d, DecodeRows rows, const int *pos) {
    GPT2Config c = model->config;
    int L = c.num_layers, C = c.channels, N = rows.n;
    size_t layer_stride = (size_t)d->B * d->maxT * C;                 // one layer of the cache
    size_t kv0 = KV_CACHE_AT(rows.r0, 0, 0, d->maxT, d->NH, d->HS);   // the rows' sequences
    ParameterTensors p = model->params;
    floatX *x = d->x + (size_t)rows.r0 * C, *qkv = d->qkv + (size_t)rows.r0 * 3 * C;
    floatX *atty = d->atty + (size_t)rows.r0 * C, *fch_gelu = d->fch_gelu + (size_t)rows.r0 * 4 * C;
    DecodeLayerWeights w[L];
    for (int l = 0; l < L; l++) {
        LayerParams p_l = gpt2_layer_params(&p, C, l);
        w[l] = (DecodeLayerWeights){p_l.ln1w, p_l.ln1b, p_l.qkvw, p_l.qkvb, p_l.attprojw,
                                    p_l.attprojb, p_l.ln2w, p_l.ln2b, p_l.fcw, p_l.fcb,
                                    p_l.fcprojw, p_l.fcprojb};
    }
    // every layer: x += attproj(attention(qkv(ln1(x)))), then x += fcproj(gelu(fc(ln2(x))))
    decode_layers_step(x, qkv, atty, fch_gelu, rows.att_scratch, rows.fused_scratch, rows.x_stats, w,
                       L, d->k + kv0, d->v + kv0, layer_stride, pos, N, d->B - N, d->maxT, d->NH,
                       d->HS);
}

// Step j of a graph (decode_graph), `last` its last: at the graph's first step, from
// cache->tokens and the step's position cell, the embedding into cache->x (B, C); the layers, in
// one go or as d->parts parts of the batch at once, all but the first each on a branch
// (dev_branch_begin), so that one part's attention streams the cache while another's matmuls
// run; then the step's end (decode_step_end): the LM head over all B rows, its logits into
// cache->logits (B, Vp) and their argmax over the tokens, those tokens into the host's ring,
// and the next step's embedding into cache->x, or after the graph's last step the next graph's
// cells.
static void decode_graph_step(GPT2 *model, KVCache *d, int j, int last) {
    GPT2Config c = model->config;
    int B = d->B, C = c.channels, V = c.vocab_size, Vp = c.padded_vocab_size, P = d->parts;
    ParameterTensors p = model->params;
    int *cells = d->tokens + B, *pos = cells + j;
    // a graph's first step embeds its tokens; a later step's embedding was the step before's end
    if (j == 0) decode_embed(d->x, d->tokens, pos, p.wte, p.wpe, B, C, 0);
    // the branches' parts first (each forked from the main stream as it is now), then part 0
    for (int i = P - 1; i >= 0; i--) {
        int r0 = i * B / P, r1 = (i + 1) * B / P;
        DecodeRows rows = {r0, r1 - r0, d->x_stats, d->att_scratch, d->fused_scratch};
        if (i > 0) {
            rows.x_stats = (float *)((char *)d->x_stats_b + (i - 1) * d->part_bytes[0]);
            rows.att_scratch = d->att_scratch_b + (i - 1) * d->part_bytes[1];
            rows.fused_scratch = d->fused_scratch_b + (i - 1) * d->part_bytes[2];
            dev_branch_begin();
        }
        decode_rows(model, d, rows, pos);
        if (i > 0) dev_branch_end();
    }
    if (P > 1) dev_branch_join();
    decode_step_end(d->logits, d->tokens, d->fused_scratch, d->x, p.lnfw, p.lnfb, p.wte, p.wpe,
                    d->chosen, DECODE_TOKEN_SLOTS, cells, DECODE_GRAPH_STEPS, j, last, B, C, V, Vp);
}

typedef struct {
    GPT2 *model;
    KVCache *cache;
    int steps;
} DecodeArgs;

// `steps` decode steps as one CUDA graph (replayed: the same work at every position). The steps
// follow each other by programmatic dependent launch, as a step's kernels do: step j + 1's
// kernels start, loading their weights, while step j's LM head streams wte, and read before
// their waits only their cell and the cache's rows that the steps before wrote (layers.h). With
// a graph a step, the next step's first layer kernel could start only after the graph before
// had ended (docs/PERF.md, twenty-eighth and twenty-ninth sessions).
static void decode_graph(void *arg) {
    DecodeArgs *a = arg;
    for (int j = 0; j < a->steps; j++) decode_graph_step(a->model, a->cache, j, j == a->steps - 1);
}

// the steps at positions pos .. pos + n - 1 (n = 1 or DECODE_GRAPH_STEPS), the first one's
// tokens and the cells already in cache->tokens
static void decode_steps(GPT2 *model, KVCache *cache, int pos, int n) {
    DecodeArgs args = {model, cache, n};
    device_graph_run(&cache->graph[n > 1], decode_graph, &args);
    record_chosen(cache, pos, n);
    cache->len = pos + n;
}

void gpt2_decode_step(GPT2 *model, KVCache *cache, const int *tokens, int pos) {
    int B = cache->B, V = cache->V;
    if (pos < 1 || pos > cache->len || pos >= cache->maxT)
        die("decode step at position %d: needs 1 <= position <= %d (the cached length) and a "
            "position < %d (the cache's size)", pos, cache->len, cache->maxT);
    int inputs[B + 1];   // the tokens and the step's position cell, uploaded in one copy
    for (int b = 0; b < B; b++) {
        if (tokens[b] < 0 || tokens[b] >= V)
            die("decode step: token %d of sequence %d is outside the vocabulary [0, %d)",
                tokens[b], b, V);
        inputs[b] = tokens[b];
    }
    inputs[B] = pos;
    dev_upload(cache->tokens, inputs, sizeof(inputs));
    decode_steps(model, cache, pos, 1);
}

// The steps a greedy graph holds where that many remain: DECODE_GRAPH_STEPS at batch 1 (1.02x
// tokens/s, 1.05x after 1,000 tokens) and at 96-128 rows (1.017x at 96, 1.033x at 128: three and
// four parts of 32 rows), one elsewhere (with 8, batch 2-16 measured 0.1-1% slower, 64 0.9%, 200
// 0.5% and 256 0.9%; docs/PERF.md, twenty-ninth session, calls 8 and 10, thirtieth, calls 7-8)
static int greedy_graph_steps(const KVCache *cache) {
    int B = cache->B;
    return B == 1 || (B >= 96 && B <= 128) ? DECODE_GRAPH_STEPS : 1;
}

// Greedy decoding with the tokens kept on the device: each step's tokens are the argmax of the
// step (or prefill) before, where the LM head left them, and its position is in the cell that
// the graph before's last step end (or prefill's decode_advance) wrote (from cache->len on, the
// host's count, by construction). Nothing here waits for the device or sends it anything, so
// the host can queue the next graph before it has read this one's tokens (gpt2_decode_chosen),
// and the GPU goes from step to step with nothing from the host between them.
void gpt2_decode_greedy(GPT2 *model, KVCache *cache, int reading, int until) {
    if (cache->len < 1 || until >= cache->maxT || reading < 0 || reading > cache->len)
        die("greedy decoding up to position %d, reading from position %d: needs a prefill first, "
            "a position < %d (the cache's size) and 0 <= reading <= %d (the cached length)", until,
            reading, cache->maxT, cache->len);
    while (cache->len <= until) {
        int pos = cache->len;
        int k = greedy_graph_steps(cache), n = until - pos + 1 >= k ? k : 1;
        if (pos + n - reading > DECODE_TOKEN_SLOTS) return;   // the ring is full from `reading` on
        decode_steps(model, cache, pos, n);
    }
}

void gpt2_decode_chosen(KVCache *cache, int pos, int *out) {
    int slot = pos < 0 ? 0 : pos % DECODE_TOKEN_SLOTS;
    if (pos < 0 || cache->chosen_pos[slot] != pos)
        die("gpt2_decode_chosen: the tokens chosen at position %d are not kept (the last %d "
            "positions decoded are; position %d is in its slot)", pos, DECODE_TOKEN_SLOTS,
            cache->chosen_pos[slot]);
    dev_event_wait(cache->chosen_done[slot]);
    memcpy(out, cache->chosen + (size_t)slot * cache->B, (size_t)cache->B * sizeof(int));
}

void gpt2_decode_logits(const KVCache *cache, float *out) {
    floatX_download(out, cache->logits, (size_t)cache->B * cache->Vp);
}

void gpt2_decode_argmax(KVCache *cache, int *out) {
    dev_download(out, cache->tokens, (size_t)cache->B * sizeof(int));
}
