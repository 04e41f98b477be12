// gpt2_decode.c: GPT-2 generation with a KV cache: the inference forward of the same model as
// gpt2.c, in two parts.
//   prefill      the prompt goes through the model's own forward pass (gpt2_forward, so the
//                built attention backend, naive or flash), and each layer's keys and values
//                are copied from its qkv activations into the cache
//   decode step  one token per sequence: the same layers at N = B rows, the attention of the
//                new query against the cache (attention_decode), the new key and value written
//                into the cache first, so the token attends to itself as causality wants
// Like gpt2.c, it calls only layers/ and never knows the backend. The decode step reads its
// position from device memory, so on CUDA its layers are one graph replayed at every step.
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
#define SIZE(name, type, elements) cache->bytes[DECODE_##name] = (elements) * sizeof(type);
    GPT2_DECODE_TENSORS(SIZE)
#undef SIZE
    size_t offsets[NUM_DECODE_TENSORS];
    char *base = arena_alloc(offsets, cache->bytes, NUM_DECODE_TENSORS,
                             "KV cache and decode activations");
    cache->memory = base;
#define POINT(name, type, ...) cache->name = (type *)(base + offsets[DECODE_##name]);
    GPT2_DECODE_TENSORS(POINT)
#undef POINT
}

void kv_cache_free(KVCache *cache) {
    device_graph_free(cache->graph);
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

// the position (and length) the next cache write and attention use, in device memory
static void upload_position(KVCache *cache, int pos) {
    int position_and_length[2] = {pos, pos + 1};
    dev_upload(cache->inputs + cache->B, position_and_length, sizeof(position_and_length));
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
            kv_cache_store(k, v, NULL, qkv, cache->inputs + cache->B, Bp, T, cache->maxT,
                           cache->NH, cache->HS);
        } else {   // one prompt, the same keys and values in every sequence
            for (int b = 0; b < cache->B; b++) {
                size_t offset = (size_t)b * cache->maxT * C;
                kv_cache_store(k + offset, v + offset, NULL, qkv, cache->inputs + cache->B, 1, T,
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
    cache->len = T;
}

// ----------------------------------------------------------------------------------------
// decode step: the layers of one new token per sequence, N = B rows

typedef struct {
    GPT2 *model;
    KVCache *cache;
} DecodeArgs;

// a decode step's attention in layer l: the new token's k and v go into the cache first (so
// the token attends to itself), then its q attends to the cache's first len positions
typedef struct {
    KVCache *cache;
    int l;
} DecodeAttention;
static void decode_attention(void *ctx, floatX *atty, const floatX *qkv) {
    const DecodeAttention *a = ctx;
    KVCache *d = a->cache;
    int B = d->B, NH = d->NH, HS = d->HS, maxT = d->maxT;
    size_t layer_stride = (size_t)B * maxT * NH * HS;
    floatX *kcache = d->k + a->l * layer_stride, *vcache = d->v + a->l * layer_stride;
    const int *pos = d->inputs + B, *len = d->inputs + B + 1;
    kv_cache_store(kcache, vcache, d->q, qkv, pos, B, 1, maxT, NH, HS);
    attention_decode_dev(atty, d->att_scratch, d->q, kcache, vcache, len, B, maxT, NH, HS);
}

// from cache->x, the embedded tokens (B, C), to cache->logits (B, Vp). Launches the same work
// with the same arguments at every position: the position is read from cache->inputs.
static void decode_layers(void *arg) {
    GPT2 *model = ((DecodeArgs *)arg)->model;
    KVCache *d = ((DecodeArgs *)arg)->cache;
    GPT2Config c = model->config;
    int B = d->B, L = c.num_layers, C = c.channels, Vp = c.padded_vocab_size;
    ParameterTensors p = model->params;
    // one set of buffers for every layer; the residual stream goes x -> x2 -> x
    BlockBuffers buf = {.ln1 = d->ln, .ln1_mean = d->ln_mean, .ln1_rstd = d->ln_rstd,
                        .qkv = d->qkv, .atty = d->atty, .proj = d->proj, .residual2 = d->x2,
                        .ln2 = d->ln, .ln2_mean = d->ln_mean, .ln2_rstd = d->ln_rstd,
                        .fch = d->fch, .fch_gelu = d->fch_gelu, .residual3 = d->x};
    for (int l = 0; l < L; l++) {
        LayerParams w = gpt2_layer_params(&p, C, l);
        DecodeAttention att = {d, l};
        block_forward(&w, &buf, d->x, (BlockAttention){decode_attention, &att}, B, C);
    }
    layernorm_forward(d->ln, d->ln_mean, d->ln_rstd, d->x, p.lnfw, p.lnfb, B, C);
    matmul_forward(d->logits, d->ln, p.wte, NULL, B, C, Vp);   // tied LM head
}

void gpt2_decode_step(GPT2 *model, KVCache *cache, const int *tokens, int pos) {
    int B = cache->B, C = model->config.channels, V = cache->V;
    if (pos < 1 || pos > cache->len || pos >= cache->maxT)
        die("decode step at position %d: needs 1 <= position <= %d (the cached length) and a "
            "position < %d (the cache's size)", pos, cache->len, cache->maxT);
    int inputs[B + 2];   // what changes between steps, uploaded in one copy
    for (int b = 0; b < B; b++) {
        if (tokens[b] < 0 || tokens[b] >= V)
            die("decode step: token %d of sequence %d is outside the vocabulary [0, %d)",
                tokens[b], b, V);
        inputs[b] = tokens[b];
    }
    inputs[B] = pos;
    inputs[B + 1] = pos + 1;
    dev_upload(cache->inputs, inputs, sizeof(inputs));
    // x = wte[token] + wpe[pos]: wpe from row pos, as the row 0 of a sequence of length 1
    encoder_forward(cache->x, cache->inputs, model->params.wte,
                    model->params.wpe + (size_t)pos * C, B, 1, C);
    DecodeArgs args = {model, cache};
    device_graph_run(&cache->graph, decode_layers, &args);
    cache->len = pos + 1;
}

void gpt2_decode_logits(const KVCache *cache, float *out) {
    floatX_download(out, cache->logits, (size_t)cache->B * cache->Vp);
}

void gpt2_decode_argmax(KVCache *cache, int *out) {
    logits_argmax(cache->argmax, cache->logits, cache->Vp, cache->B, cache->V);
    dev_download(out, cache->argmax, (size_t)cache->B * sizeof(int));
}
