// gpt2.c: GPT-2 forward, backward and AdamW over one parameter arena and one activation
// arena. Reads top to bottom: config, parameter table, activation table, initialisation,
// checkpoints, forward, backward, update. Every layer call goes through layers/layers.h and
// attention/attention.h, so this file is the same for every backend.
#include "gpt2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention/attention.h"
#include "runtime/comm.h"
#include "runtime/graph.h"

// ----------------------------------------------------------------------------------------
// config

int gpt2_config_from_name(GPT2Config *config, const char *name, int max_seq_len) {
    int depth = 0, consumed = 0;
    if (sscanf(name, "d%d%n", &depth, &consumed) != 1 || name[consumed] != '\0' || depth < 1 ||
        depth > 256)
        return -1;
    config->max_seq_len = max_seq_len;
    config->vocab_size = GPT2_VOCAB_SIZE;
    config->padded_vocab_size = GPT2_PADDED_VOCAB_SIZE;
    // GPT-2's published sizes and llm.c's larger ones, under llm.c's names, so that `-e d48`
    // means the same model in both projects; any other depth: head size 64, one head per layer
    static const struct { int depth, channels, heads; } named[] = {
        {24, 1024, 16},   // gpt2-medium (350M)
        {36, 1280, 20},   // gpt2-large (774M)
        {48, 1600, 25},   // gpt2-xl (1558M)
        {60, 1920, 30},   // llm.c's 2.7B
        {72, 2880, 30},   // llm.c's 7.3B (head size 96)
        {84, 3456, 36},   // llm.c's 12.2B (head size 96)
    };
    config->num_layers = depth;
    config->num_heads = depth;
    config->channels = 64 * depth;   // d6 (30M) and d12 (GPT-2 124M) are of this form too
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
        if (named[i].depth == depth) {
            config->channels = named[i].channels;
            config->num_heads = named[i].heads;
        }
    return 0;
}

// ----------------------------------------------------------------------------------------
// arenas: a list of sizes laid out in one allocation

#define ARENA_ALIGN 256   // every tensor starts on a 256-byte boundary (vector loads, cuBLASLt)
size_t arena_align(size_t n) { return (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

// sets offsets[i] and returns the arena's size
static size_t arena_layout(size_t *offsets, const size_t *bytes, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        offsets[i] = total;
        total += arena_align(bytes[i]);
    }
    return total;
}

char *arena_alloc(size_t *offsets, const size_t *bytes, int n, const char *what) {
    return dev_malloc(arena_layout(offsets, bytes, n), what);
}

double arena_print(FILE *out, const char *const *names, const size_t *bytes, int n) {
    char buf[32];
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        format_bytes(buf, sizeof(buf), (double)bytes[i]);
        fprintf(out, "  %-18s %21s\n", names[i], buf);
        total += arena_align(bytes[i]);
    }
    return total;
}

// ----------------------------------------------------------------------------------------
// the parameter table (checkpoint.h: GPT2_PARAMETERS; its names and sizes are checkpoint.c's), in
// checkpoint order

enum { INIT_NORMAL, INIT_RESIDUAL, INIT_EMBEDDING, INIT_ONES, INIT_ZEROS };
#define DECAY(name, elements, decay, init) decay,
#define INIT(name, elements, decay, init) init,
static const int param_decays[NUM_PARAMETER_TENSORS] = {GPT2_PARAMETERS(DECAY, DECAY)};
static const int param_inits[NUM_PARAMETER_TENSORS] = {GPT2_PARAMETERS(INIT, INIT)};
#undef DECAY
#undef INIT

// points the tensors of *t into the arena memory, one after another in table order
static void point_parameters(ParameterTensors *t, floatX *memory,
                             const size_t sizes[NUM_PARAMETER_TENSORS]) {
#define POINT(name, ...) t->name = memory, memory += sizes[PARAM_##name];
    GPT2_PARAMETERS(POINT, POINT)
#undef POINT
}

LayerParams gpt2_layer_params(const ParameterTensors *t, size_t C, int l) {
    LayerParams p;
#define LAYER(name, elements, ...) p.name = t->name + (size_t)l * (elements);
    GPT2_PARAMETERS(GPT2_NOTHING, LAYER)
#undef LAYER
    return p;
}

static void validate_config(GPT2Config c, const char *source) {
    char err[256];
    if (checkpoint_config_check(c, err, sizeof(err)) != 0) die("%s: %s", source, err);
}

// parameters in the arenas: num_parameters, then the zero padding that makes the shards equal
static size_t padded_parameters(const GPT2 *model) { return model->shard_size * comm_world(); }

// the parameters of this rank's shard that exist (the last shards may be padding, or empty)
static size_t shard_owned(const GPT2 *model) {
    if (model->shard_start >= model->num_parameters) return 0;
    size_t rest = model->num_parameters - model->shard_start;
    return rest < model->shard_size ? rest : model->shard_size;
}

// the model of config, without memory yet: the sizes of its parameter tensors and their sum
static void size_parameters(GPT2 *model, GPT2Config config) {
    memset(model, 0, sizeof(*model));
    model->config = config;
    checkpoint_tensor_sizes(model->param_sizes, config);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) model->num_parameters += model->param_sizes[i];
}

// allocates the parameter and gradient arenas (and master weights where floatX is not fp32)
// of a model that size_parameters has sized
static void allocate_parameters(GPT2 *model) {
    size_t n = model->num_parameters;
    // ZeRO-1 shards: one rank keeps the whole array (no padding, nothing changes); several get
    // equal shards, a multiple of 128 elements (aligned vectors and collective chunks)
    size_t world = (size_t)comm_world();
    model->shard_size = world == 1 ? n : ((n + world - 1) / world + 127) / 128 * 128;
    model->shard_start = (size_t)comm_rank() * model->shard_size;
    size_t padded = padded_parameters(model);
    model->params_memory = dev_malloc(padded * sizeof(floatX), "parameters");
    model->grads_memory = dev_malloc(padded * sizeof(floatX), "gradients");
    dev_memset_zero(model->params_memory + n, (padded - n) * sizeof(floatX));
    dev_memset_zero(model->grads_memory, padded * sizeof(floatX));
    model->loss = dev_malloc(2 * sizeof(float), "loss");
    dev_memset_zero(model->loss, 2 * sizeof(float));
    point_parameters(&model->params, model->params_memory, model->param_sizes);
    point_parameters(&model->grads, model->grads_memory, model->param_sizes);
    if (sizeof(floatX) != sizeof(float))
        model->master_weights = dev_malloc(model->shard_size * sizeof(float), "fp32 master weights");
}

// puts the fp32 host values of parameters [first, first + n) on the device. With master weights
// (floatX not fp32), the part inside this rank's shard goes up once, as fp32 into the master
// weights, and the device rounds it into params (floatX_from_float: round to nearest even, as
// floatX_upload does on the host); the rest goes through floatX_upload.
static void upload_parameters(GPT2 *model, const float *host, size_t first, size_t n) {
    size_t end = first + n, lo = end, hi = end;   // [lo, hi): the part in the master shard
    if (model->master_weights) {
        size_t shard_end = model->shard_start + shard_owned(model);
        lo = first > model->shard_start ? first : model->shard_start;
        hi = end < shard_end ? end : shard_end;
        if (lo >= hi) lo = hi = end;
    }
    if (lo < hi) {
        float *master = model->master_weights + (lo - model->shard_start);
        dev_upload(master, host + (lo - first), (hi - lo) * sizeof(float));
        floatX_from_float(model->params_memory + lo, master, hi - lo);
    }
    floatX_upload(model->params_memory + first, host, lo - first);
    floatX_upload(model->params_memory + hi, host + (hi - first), end - hi);
}

// ----------------------------------------------------------------------------------------
// initialisation. Every random value is a function of (seed, tensor, element index) alone:
// tensor i draws from its own counter-based stream, element pair p of it from draws 2p and
// 2p + 1, so that threads and slabs may split the work anywhere and the values never depend
// on the number of threads.

// draw k of the splitmix64 stream that starts from state key, computed from k alone
static uint64_t stream_draw(uint64_t key, uint64_t k) {
    uint64_t z = key + (k + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// elements [first, first + n) of a tensor, N(0, std) by Box-Muller from the tensor's stream
// key: pair p (elements 2p and 2p + 1) from draws 2p and 2p + 1. first is even.
static void fill_normal(float *out, size_t first, size_t n, float std, uint64_t key) {
    const size_t pairs = (n + 1) / 2;
#pragma omp parallel for schedule(static)
    for (size_t q = 0; q < pairs; q++) {
        const uint64_t p = first / 2 + q;
        double u1 = ((stream_draw(key, 2 * p) >> 11) + 1) * 0x1p-53;   // (0, 1], 53 bits
        double u2 = (stream_draw(key, 2 * p + 1) >> 11) * 0x1p-53;     // [0, 1)
        // the radius in double (53 bits of u1 reach 8.6 standard deviations), the angle in
        // float: sincosf takes half the time of double sin and cos, and moves a value by at
        // most 3e-7 of its radius
        float r = (float)(std * sqrt(-2.0 * log(u1))), sin_a, cos_a;
        sincosf((float)(2.0 * M_PI * u2), &sin_a, &cos_a);
        out[2 * q] = r * cos_a;
        if (2 * q + 1 < n) out[2 * q + 1] = r * sin_a;
    }
}

// Slab by slab (GPT2_INIT_SLAB parameters), each made on all threads and uploaded before the
// next: the host holds one slab, not a copy of the model.
void gpt2_init_random(GPT2 *model, GPT2Config config, uint64_t seed) {
    validate_config(config, "init");
    size_parameters(model, config);
    allocate_parameters(model);
    size_t n_slab = model->num_parameters < GPT2_INIT_SLAB ? model->num_parameters : GPT2_INIT_SLAB;
    float *slab = malloc(n_slab * sizeof(float));
    if (!slab) die("out of host memory initialising %zu parameters", model->num_parameters);
    const float std = 0.02f;
    const float residual_std = 0.02f / sqrtf(2.0f * config.num_layers);
    const size_t real = (size_t)config.vocab_size * config.channels;   // wte's token rows
    size_t offset = 0;   // the tensor's first parameter
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const uint64_t key = stream_draw(seed, (uint64_t)i);
        const size_t size = model->param_sizes[i];
        for (size_t start = 0; start < size; start += GPT2_INIT_SLAB) {
            size_t n = size - start < GPT2_INIT_SLAB ? size - start : GPT2_INIT_SLAB;
            switch (param_inits[i]) {
            case INIT_NORMAL: fill_normal(slab, start, n, std, key); break;
            case INIT_RESIDUAL: fill_normal(slab, start, n, residual_std, key); break;
            case INIT_EMBEDDING: {   // real vocabulary rows random, padding zero
                size_t random = start >= real ? 0 : real - start < n ? real - start : n;
                fill_normal(slab, start, random, std, key);
                memset(slab + random, 0, (n - random) * sizeof(float));
                break;
            }
            case INIT_ONES: for (size_t j = 0; j < n; j++) slab[j] = 1.0f; break;
            case INIT_ZEROS: memset(slab, 0, n * sizeof(float)); break;
            }
            upload_parameters(model, slab, offset + start, n);
        }
        offset += size;
    }
    free(slab);
}

// ----------------------------------------------------------------------------------------
// checkpoints: llm.c's model file (checkpoint.h: the header, the tensors in table order)

static float bf16_bits_to_float(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

// reads and checks the header of the model file f (file_size bytes): its config and version
static CheckpointHeader read_checkpoint_header(FILE *f, long file_size, const char *path) {
    int32_t header[CHECKPOINT_HEADER_INTS];
    if (file_size < (long)sizeof(header))
        die("%s: not a model checkpoint: %ld bytes, shorter than the %d-byte header", path, file_size,
            CHECKPOINT_HEADER_BYTES);
    fread_or_die(header, sizeof(int32_t), CHECKPOINT_HEADER_INTS, f, path);
    CheckpointHeader h;
    char err[256];
    if (checkpoint_header_unpack(header, &h, err, sizeof(err)) != 0) die("%s: %s", path, err);
    return h;
}

GPT2Config gpt2_checkpoint_config(const char *path) {
    FILE *f = fopen_or_die(path, "rb");
    CheckpointHeader h = read_checkpoint_header(f, file_size_or_die(f, path), path);
    fclose(f);
    return h.config;
}

void gpt2_load_checkpoint(GPT2 *model, const char *path) {
    FILE *f = fopen_or_die(path, "rb");
    long file_size = file_size_or_die(f, path);
    CheckpointHeader h = read_checkpoint_header(f, file_size, path);
    // the file's size against the config's before any allocation: a header that claims a
    // huge model in a small file is a truncated file, not a reason to allocate gigabytes
    char err[256];
    if (checkpoint_check_size(&h, (uint64_t)file_size, err, sizeof(err)) != 0) die("%s: %s", path, err);
    size_parameters(model, h.config);
    size_t n = model->num_parameters;
    allocate_parameters(model);
    float *host = malloc(n * sizeof(float));
    if (!host) die("out of host memory loading %s", path);
    if (h.version == CHECKPOINT_VERSION_FP32) {
        fread_or_die(host, sizeof(float), n, f, path);
    } else {   // bf16 -> fp32 in place, from the back so nothing is overwritten before use
        uint16_t *bits = (uint16_t *)host;
        fread_or_die(bits, sizeof(uint16_t), n, f, path);
        for (size_t i = n; i-- > 0;) host[i] = bf16_bits_to_float(bits[i]);
    }
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(host[i])) die("%s: parameter %zu is not a finite number", path, i);
    upload_parameters(model, host, 0, n);
    free(host);
}

size_t gpt2_checkpoint_bytes(const GPT2 *model) {
    return CHECKPOINT_HEADER_BYTES + model->num_parameters * sizeof(floatX);
}

void gpt2_save_checkpoint(const GPT2 *model, const char *path) {
    int32_t header[CHECKPOINT_HEADER_INTS];
    int fp32 = sizeof(floatX) == sizeof(float);
    checkpoint_header_pack(header, model->config, fp32 ? CHECKPOINT_VERSION_FP32 : CHECKPOINT_VERSION_BF16);
    size_t bytes = model->num_parameters * sizeof(floatX);   // floatX is fp32 or bf16 bits
    void *host = malloc(bytes);
    if (!host) die("out of host memory saving %s", path);
    dev_download(host, model->params_memory, bytes);
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(header));
    atomic_write(&af, host, bytes);
    atomic_commit(&af);
    free(host);
}

// ----------------------------------------------------------------------------------------
// the activation table (gpt2.h: GPT2_ACTIVATIONS)

#define NAME(name, ...) #name,
#define RECOMPUTE_LEVEL(name, type, elements, level) level,
#define NEVER(...) RECOMPUTE_LEVELS,
static const char *const activation_names[NUM_ACTIVATION_TENSORS] = {GPT2_ACTIVATIONS(NAME, NAME, NAME)};
// the level from which backward recomputes a tensor (RECOMPUTE_LEVELS: never)
static const int recompute_levels[NUM_ACTIVATION_TENSORS] = {
    GPT2_ACTIVATIONS(NEVER, NEVER, RECOMPUTE_LEVEL)};
#undef NAME
#undef RECOMPUTE_LEVEL
#undef NEVER

const char *const gpt2_recompute_names[RECOMPUTE_LEVELS] = {"none", "GELU", "GELU and layernorm"};

// whether the model's forward keeps one buffer of tensor act (ACT_*) for all layers, which
// backward therefore recomputes for each layer before using it
static int recomputed(const GPT2 *model, int act) { return model->recompute >= recompute_levels[act]; }

// the bias gradients' scratch in backward: qkv's (matmul_backward, OC = 3C) and fc's
// (matmul_gelu_backward's, over its 4C columns); attproj's and fcproj's come with the
// layernorms' own
static size_t matmul_scratch_size(int N, int C) {
    size_t qkv = matmul_backward_scratch_size(N, 3 * C), fc = matmul_backward_scratch_size(N, 4 * C);
    return qkv > fc ? qkv : fc;
}

// the local names the table's shapes are written in, for a pass of (B, T)
#define ACTIVATION_SHAPES(c, B, T)                                                            \
    size_t N = (size_t)(B) * (T), C = (c).channels, Vp = (c).padded_vocab_size;               \
    int NH = (c).num_heads, HS = (c).channels / (c).num_heads;                                \
    (void)Vp, (void)NH, (void)HS

static void activation_sizes(size_t bytes[NUM_ACTIVATION_TENSORS], GPT2Config c, int B, int T,
                             int recompute) {
    ACTIVATION_SHAPES(c, B, T);
    size_t L = c.num_layers;
#define ONE(name, type, elements) bytes[ACT_##name] = (elements) * sizeof(type);
#define LAYER(name, type, elements) bytes[ACT_##name] = L * (elements) * sizeof(type);
#define RECOMPUTED(name, type, elements, level)                                               \
    bytes[ACT_##name] = (recompute >= (level) ? 1 : L) * (elements) * sizeof(type);
    GPT2_ACTIVATIONS(ONE, LAYER, RECOMPUTED)
#undef ONE
#undef LAYER
#undef RECOMPUTED
}

size_t gpt2_activation_bytes(GPT2Config c, int B, int T, int recompute) {
    size_t bytes[NUM_ACTIVATION_TENSORS], offsets[NUM_ACTIVATION_TENSORS];
    activation_sizes(bytes, c, B, T, recompute);
    return arena_layout(offsets, bytes, NUM_ACTIVATION_TENSORS);
}

LayerActs gpt2_layer_acts(const GPT2 *model, int l) {
    int B = model->last_B, T = model->last_T;
    ACTIVATION_SHAPES(model->config, B, T);
    const ActivationTensors *a = &model->acts;
    int recompute = model->recompute;
    LayerActs v;
#define LAYER(name, type, elements) v.name = a->name + (size_t)l * (elements);
#define RECOMPUTED(name, type, elements, level)                                               \
    v.name = a->name + (size_t)(recompute >= (level) ? 0 : l) * (elements);
    GPT2_ACTIVATIONS(GPT2_NOTHING, LAYER, RECOMPUTED)
#undef LAYER
#undef RECOMPUTED
    return v;
}

void gpt2_set_recompute(GPT2 *model, int level) {
    if (level < RECOMPUTE_NONE || level >= RECOMPUTE_LEVELS)
        die("recompute level %d: the levels are 0 (%s), 1 (%s) and 2 (%s)", level, gpt2_recompute_names[0],
            gpt2_recompute_names[1], gpt2_recompute_names[2]);
    if (model->acts_memory && level != model->recompute)
        die("internal error: the recompute level changed after the activations were allocated");
    model->recompute = level;
}

int gpt2_allocate_activations(GPT2 *model, int B, int T) {
    if (T > model->config.max_seq_len)
        die("sequence length %d is longer than the model's max_seq_len %d", T,
            model->config.max_seq_len);
    if (model->acts_memory && B <= model->act_B && T <= model->act_T) return 0;
    int act_B = B > model->act_B ? B : model->act_B, act_T = T > model->act_T ? T : model->act_T;
    // the old arena goes first, so that the new one may take its place (with another layout:
    // the training pass recorded on the old one goes too)
    device_graph_free(model->pass_graph);
    model->pass_graph = NULL;
    if (model->acts_memory) dev_free(model->acts_memory);
    model->acts_memory = NULL;
    size_t bytes[NUM_ACTIVATION_TENSORS], offsets[NUM_ACTIVATION_TENSORS];
    activation_sizes(bytes, model->config, act_B, act_T, model->recompute);
    char *base = dev_try_malloc(arena_layout(offsets, bytes, NUM_ACTIVATION_TENSORS));
    if (!base) return -1;
    model->acts_memory = base;
    model->act_B = act_B;
    model->act_T = act_T;
    memcpy(model->act_bytes, bytes, sizeof(bytes));
    ActivationTensors *a = &model->acts;
#define POINT(name, type, ...) a->name = (type *)(base + offsets[ACT_##name]);
    GPT2_ACTIVATIONS(POINT, POINT, POINT)
#undef POINT
    return 0;
}

// makes sure the activation arena holds a forward pass of (B, T); grows it when needed
static void ensure_activations(GPT2 *model, int B, int T) {
    if (gpt2_allocate_activations(model, B, T) == 0) return;
    if (model->act_B > B) B = model->act_B;   // the arena holds the largest pass seen
    if (model->act_T > T) T = model->act_T;
    char need[32], free_bytes[32];
    format_bytes(need, sizeof(need),
                 (double)gpt2_activation_bytes(model->config, B, T, model->recompute));
    format_bytes(free_bytes, sizeof(free_bytes), (double)device_memory_free());
    die("out of %s memory: the activations of a pass of B=%d T=%d at recompute level %d need %s, "
        "and %s is free; a smaller batch or a higher recompute level needs less",
        backend_name(), B, T, model->recompute, need, free_bytes);
}

// ----------------------------------------------------------------------------------------
// forward

// checked on the host, then uploaded in stream order without waiting for the device
static void upload_tokens(int *dst, const int *src, size_t n, int V, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (src[i] < 0 || src[i] >= V)
            die("%s token %zu is %d, outside the vocabulary [0, %d)", what, i, src[i], V);
    dev_upload_async(dst, src, n * sizeof(int));
}

// the forward pass; with targets, the mean loss in model->loss[0] (added to model->loss[1]
// when dloss != 0, a training micro-batch, which also leaves dlogits in place of logits)
// ----------------------------------------------------------------------------------------
// the transformer block: its forward, then (below) its backward. (A decode step has fused
// calls of its own, gpt2_decode.c.)

// a layernorm's output: what layernorm_residual_forward writes after a residual add
typedef struct {
    floatX *out;                    // (N, C)
    float *mean, *rstd;             // (N)
    const floatX *weight, *bias;    // (C)
} LayerNormOut;

// Block l's forward on N = B*T rows of C channels, from its input `residual` (N, C) and ln1 of
// it (made before the block: by forward for layer 0, by block l-1 for the others):
//   residual2 = residual + attproj(attention(qkv(ln1)))       ln2 = layernorm(residual2)
//   residual3 = residual2 + fcproj(gelu(fc(ln2)))             next = layernorm(residual3)
// where next is block l+1's ln1 or, after the last block, lnf. Each residual add is one pass
// with the layernorm after it; a.scratch_c holds each projection before its add.
static void block_forward(GPT2 *model, int l, const floatX *residual, LayerNormOut next) {
    GPT2Config c = model->config;
    int B = model->last_B, T = model->last_T, N = B * T;
    int NH = c.num_heads, C = c.channels, HS = C / NH;
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    LayerParams w = gpt2_layer_params(&p, C, l);
    LayerActs x = gpt2_layer_acts(model, l);
    floatX *proj = a.scratch_c;
    // attention block
    matmul_forward(x.qkv, x.ln1, w.qkvw, w.qkvb, N, C, 3 * C);
    attention_forward(x.atty, x.att_saved, a.att_scratch, x.qkv, B, T, NH, HS);
    matmul_forward(proj, x.atty, w.attprojw, w.attprojb, N, C, C);
    layernorm_residual_forward(x.residual2, x.ln2, x.ln2_mean, x.ln2_rstd, residual, proj,
                               w.ln2w, w.ln2b, N, C);
    // MLP block
    matmul_forward(x.fch, x.ln2, w.fcw, w.fcb, N, C, 4 * C);
    gelu_forward(x.fch_gelu, x.fch, (size_t)N * 4 * C);
    matmul_forward(proj, x.fch_gelu, w.fcprojw, w.fcprojb, N, 4 * C, C);
    layernorm_residual_forward(x.residual3, next.out, next.mean, next.rstd, x.residual2, proj,
                               next.weight, next.bias, N, C);
}

// the pass's activations for (B, T), then its tokens on the device (targets may be NULL)
static void prepare_pass(GPT2 *model, const int *inputs, const int *targets, int B, int T) {
    ensure_activations(model, B, T);
    model->last_B = B;
    model->last_T = T;
    const int N = B * T, V = model->config.vocab_size;
    upload_tokens(model->acts.inputs, inputs, N, V, "input");
    if (targets) upload_tokens(model->acts.targets, targets, N, V, "target");   // before any kernel
}

// the forward's kernels on the uploaded tokens (prepare_pass), with the loss when has_targets
static void forward_kernels(GPT2 *model, int has_targets, float dloss) {
    GPT2Config c = model->config;
    int B = model->last_B, T = model->last_T;
    int L = c.num_layers, C = c.channels, V = c.vocab_size, Vp = c.padded_vocab_size, N = B * T;
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    encoder_forward(a.encoded, a.inputs, p.wte, p.wpe, B, T, C);
    // layer 0's ln1; each later layernorm (ln1 of layer l + 1, then lnf) is made by block l
    // with the residual add before it
    LayerActs x0 = gpt2_layer_acts(model, 0);
    LayerParams w0 = gpt2_layer_params(&p, C, 0);
    layernorm_forward(x0.ln1, x0.ln1_mean, x0.ln1_rstd, a.encoded, w0.ln1w, w0.ln1b, N, C);
    for (int l = 0; l < L; l++) {
        floatX *residual = l == 0 ? a.encoded : gpt2_layer_acts(model, l - 1).residual3;
        LayerNormOut next = {a.lnf, a.lnf_mean, a.lnf_rstd, p.lnfw, p.lnfb};
        if (l + 1 < L) {
            LayerActs xn = gpt2_layer_acts(model, l + 1);
            LayerParams wn = gpt2_layer_params(&p, C, l + 1);
            next = (LayerNormOut){xn.ln1, xn.ln1_mean, xn.ln1_rstd, wn.ln1w, wn.ln1b};
        }
        block_forward(model, l, residual, next);
    }
    matmul_forward(a.logits, a.lnf, p.wte, NULL, N, C, Vp);   // tied LM head
    if (!has_targets) return;
    crossentropy_forward_backward(a.logits, a.losses, a.targets, N, V, Vp, dloss);
    crossentropy_loss_mean(&model->loss[0], dloss != 0.0f ? &model->loss[1] : NULL, a.losses, N);
}

float gpt2_forward(GPT2 *model, const int *inputs, const int *targets, int B, int T) {
    prepare_pass(model, inputs, targets, B, T);
    forward_kernels(model, targets != NULL, 0.0f);
    return targets ? dev_read_float(&model->loss[0]) : -1.0f;
}

// ----------------------------------------------------------------------------------------
// backward: the forward pass in reverse. The residual stream's gradient lives in dresidual
// (a residual add passes it through unchanged; each layernorm_backward adds its branch's
// part); each block's other activation gradients go through the shared scratch buffers.
// With recomputation (gpt2.h: RECOMPUTED rows), a tensor the later layers' forward overwrote
// is made again just before its use, by the forward's own call on the same kept inputs: the
// same bits, so the gradients are bit-identical to keeping it. A layernorm is recomputed in
// full (its mean and rstd are written again, with the bits they had), not from the saved
// statistics: a second normalising kernel could round differently, the same one cannot.

// Block l's backward, its forward in reverse: a.dresidual (N, C) holds the gradient of the
// block's output and leaves holding that of its input `residual`; the block's parameter
// gradients are accumulated into model->grads. The other activation gradients go through the
// shared scratch buffers (scratch_4c, scratch_3c, scratch_c).
static void block_backward(GPT2 *model, int l, const floatX *residual) {
    GPT2Config c = model->config;
    int B = model->last_B, T = model->last_T, N = B * T;
    int NH = c.num_heads, C = c.channels, HS = C / NH;
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors a = model->acts;
    LayerParams w = gpt2_layer_params(&p, C, l), dw = gpt2_layer_params(&g, C, l);
    LayerActs x = gpt2_layer_acts(model, l);
    void *mm = a.matmul_scratch, *ln = a.layernorm_scratch;
    // MLP block
    if (recomputed(model, ACT_fch_gelu)) gelu_forward(x.fch_gelu, x.fch, (size_t)N * 4 * C);
    // (fcprojb's gradient, the column sums of dresidual, came with the layernorm backward
    // before this block: lnf's or layer l+1's ln1; fcb's with the GELU's backward, as column
    // sums of its output; attprojb's with ln2's)
    matmul_gelu_backward(a.scratch_4c, dw.fcb, dw.fcprojw, mm, a.dresidual, x.fch_gelu, x.fch,
                         w.fcprojw, N, 4 * C, C);
    if (recomputed(model, ACT_ln2))
        layernorm_forward(x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2, w.ln2w, w.ln2b, N, C);
    matmul_backward(a.scratch_c, dw.fcw, NULL, mm, a.scratch_4c, x.ln2, w.fcw, N, C, 4 * C);
    layernorm_backward(a.dresidual, dw.ln2w, dw.ln2b, dw.attprojb, ln, a.scratch_c, x.residual2,
                       w.ln2w, x.ln2_mean, x.ln2_rstd, N, C);
    // attention block
    matmul_backward(a.scratch_c, dw.attprojw, NULL, mm, a.dresidual, x.atty, w.attprojw, N, C,
                    C);
    attention_backward(a.scratch_3c, a.att_scratch, a.scratch_c, x.qkv, x.atty, x.att_saved, B,
                       T, NH, HS);
    if (recomputed(model, ACT_ln1))
        layernorm_forward(x.ln1, x.ln1_mean, x.ln1_rstd, residual, w.ln1w, w.ln1b, N, C);
    matmul_backward(a.scratch_c, dw.qkvw, dw.qkvb, mm, a.scratch_3c, x.ln1, w.qkvw, N, C, 3 * C);
    // dresidual now is the gradient of layer l-1's output, residual2 + fcproj(...): of its
    // fcproj's output too, whose bias gradient this pass sums
    floatX *prev_fcprojb = l > 0 ? gpt2_layer_params(&g, C, l - 1).fcprojb : NULL;
    layernorm_backward(a.dresidual, dw.ln1w, dw.ln1b, prev_fcprojb, ln, a.scratch_c, residual,
                       w.ln1w, x.ln1_mean, x.ln1_rstd, N, C);
}

static void backward(GPT2 *model) {
    GPT2Config c = model->config;
    int B = model->last_B, T = model->last_T, N = B * T;
    int L = c.num_layers, C = c.channels, Vp = c.padded_vocab_size;
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors a = model->acts;

    // a.logits holds dlogits (written by the forward's cross-entropy)
    matmul_backward(a.scratch_c, g.wte, NULL, a.matmul_scratch, a.logits, a.lnf, p.wte, N, C, Vp);
    dev_memset_zero(a.dresidual, (size_t)N * C * sizeof(floatX));
    floatX *last = gpt2_layer_acts(model, L - 1).residual3;
    layernorm_backward(a.dresidual, g.lnfw, g.lnfb, gpt2_layer_params(&g, C, L - 1).fcprojb,
                       a.layernorm_scratch, a.scratch_c, last, p.lnfw, a.lnf_mean, a.lnf_rstd, N,
                       C);
    for (int l = L - 1; l >= 0; l--)
        block_backward(model, l, l == 0 ? a.encoded : gpt2_layer_acts(model, l - 1).residual3);
    encoder_backward(g.wte, g.wpe, a.encoder_scratch, a.dresidual, a.inputs, B, T, C);
}

typedef struct {
    GPT2 *model;
    float dloss;
} TrainPass;

static void train_pass_kernels(void *ctx) {
    TrainPass *pass = (TrainPass *)ctx;
    forward_kernels(pass->model, 1, pass->dloss);
    backward(pass->model);
}

// A pass is some 450 kernels at d12 (1,300 at d36), each waiting on the one before: launched one
// by one, the GPU idles between them for the launch's last steps (CUPTI: 1.2 ms of a d12 B=64
// step, 2.2 ms of a d36 B=16 one, in some 1,200 gaps). The tokens go up first, outside; the
// kernels are the same every micro-step (fixed buffers, the same arguments), so they are
// recorded once (at the second pass: the first sets up cuBLASLt's plans and timings) and
// replayed as one CUDA graph (runtime/graph.h; CUDA_GRAPHS=0 launches them one by one). A new
// (B, T), loss scale or attention order (attention_set_deterministic: the backward's kernels
// differ) records a new one, and so does a new activation arena (gpt2_allocate_activations
// drops the graph with the old one).
void gpt2_forward_backward(GPT2 *model, const int *inputs, const int *targets, int B, int T,
                           float loss_scale) {
    if (!targets) die("internal error: gpt2_forward_backward without targets");
    prepare_pass(model, inputs, targets, B, T);
    TrainPass pass = {model, loss_scale / (float)(B * T)};
    const int deterministic = attention_deterministic();
    if (model->graph_B != B || model->graph_T != T || model->graph_dloss != pass.dloss ||
        model->graph_deterministic != deterministic) {
        device_graph_free(model->pass_graph);
        model->pass_graph = NULL;
        model->graph_B = B;
        model->graph_T = T;
        model->graph_dloss = pass.dloss;
        model->graph_deterministic = deterministic;
    }
    device_graph_run(&model->pass_graph, train_pass_kernels, &pass);
}

float gpt2_loss_sum(const GPT2 *model) { return dev_read_float(&model->loss[1]); }

void gpt2_zero_grad(GPT2 *model) {
    dev_memset_zero(model->grads_memory, padded_parameters(model) * sizeof(floatX));
    dev_memset_zero(model->loss, 2 * sizeof(float));
}

// ----------------------------------------------------------------------------------------
// update

// AdamW moments for this rank's shard, zero
static void allocate_optimizer_state(GPT2 *model) {
    size_t bytes = model->shard_size * sizeof(float);
    model->adam_m = dev_malloc(bytes, "AdamW first moments");
    model->adam_v = dev_malloc(bytes, "AdamW second moments");
    dev_memset_zero(model->adam_m, bytes);
    dev_memset_zero(model->adam_v, bytes);
}

// ZeRO stage 1. Each rank holds the gradients of its own micro-batches, over all parameters.
// They are summed over the ranks so that each rank gets the sums of its shard alone
// (reduce-scatter); the norm is the global one (each shard's sum of squares, summed over the
// ranks); each rank updates its shard with its shard of the moments; then every rank gets
// every shard's new parameters (all-gather). At world 1 the shard is everything and the
// collectives return at once.
float gpt2_update(GPT2 *model, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float max_grad_norm, int step) {
    size_t shard = model->shard_size, start = model->shard_start;
    if (!model->adam_m) allocate_optimizer_state(model);
    comm_reduce_scatter(model->grads_memory, shard, COMM_FLOATX);
    if (!model->grad_sumsq) model->grad_sumsq = dev_malloc(sizeof(float), "gradient norm");
    dev_memset_zero(model->grad_sumsq, sizeof(float));
    grad_sumsq(model->grad_sumsq, model->grads_memory + start, shard);   // the padding is 0
    comm_allreduce_sum(model->grad_sumsq, 1, COMM_FLOAT);
    // AdamW reads the sum of squares from device memory and clips by it, or updates nothing
    // when the norm is not finite: no wait for the norm between the two
    // each tensor's part inside this rank's shard [start, start + shard): elements [lo, hi)
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t size = model->param_sizes[i];
        size_t lo = offset > start ? offset : start;
        size_t hi = offset + size < start + shard ? offset + size : start + shard;
        if (lo < hi) {
            float *master = model->master_weights ? model->master_weights + (lo - start) : NULL;
            adamw_update(model->params_memory + lo, master, model->grads_memory + lo,
                         model->adam_m + (lo - start), model->adam_v + (lo - start), hi - lo, lr,
                         beta1, beta2, eps, param_decays[i] ? weight_decay : 0.0f,
                         model->grad_sumsq, max_grad_norm, step);
        }
        offset += size;
    }
    comm_all_gather(model->params_memory, shard, COMM_FLOATX);
    return sqrtf(dev_read_float(model->grad_sumsq));   // the step's one wait, at its end
}

void gpt2_logits_at(const GPT2 *model, int b, int t, float *out_host) {
    size_t row = (size_t)b * model->last_T + t;
    floatX_download(out_host, model->acts.logits + row * model->config.padded_vocab_size,
                    model->config.vocab_size);
}

// ----------------------------------------------------------------------------------------
// optimizer state for resuming: AdamW moments, then master weights where they exist

static void write_device_floats(AtomicFile *af, const float *src, size_t n) {
    float *host = malloc(n * sizeof(float));
    if (!host) die("out of host memory writing %s", af->path);
    dev_download(host, src, n * sizeof(float));
    atomic_write(af, host, n * sizeof(float));
    free(host);
}

static void read_device_floats(float *dst, size_t n, FILE *f, const char *path) {
    float *host = malloc(n * sizeof(float));
    if (!host) die("out of host memory reading %s", path);
    fread_or_die(host, sizeof(float), n, f, path);
    dev_upload(dst, host, n * sizeof(float));
    free(host);
}

// Collective: the whole array (num_parameters) of a sharded one (shard_size per rank) goes to
// af where af is not NULL. The shards are gathered into gather (world * shard_size) first;
// with no gather buffer (world 1) the shard is the whole array.
static void write_gathered(AtomicFile *af, const GPT2 *model, const float *shard, float *gather) {
    const float *whole = shard;
    if (gather) {
        dev_copy(gather + model->shard_start, shard, model->shard_size * sizeof(float));
        comm_all_gather(gather, model->shard_size, COMM_FLOAT);
        whole = gather;
    }
    if (af) write_device_floats(af, whole, model->num_parameters);
}

// this rank's shard of a whole array (num_parameters floats) that starts at byte base of f;
// leaves f at the end of the array
static void read_shard(float *dst, const GPT2 *model, FILE *f, long base, const char *path) {
    size_t owned = shard_owned(model);
    if (fseek(f, base + (long)(model->shard_start * sizeof(float)), SEEK_SET) != 0)
        die("%s: cannot seek to this rank's optimizer state", path);
    if (owned) read_device_floats(dst, owned, f, path);
    if (fseek(f, base + (long)(model->num_parameters * sizeof(float)), SEEK_SET) != 0)
        die("%s: cannot seek past the optimizer state", path);
}

void gpt2_write_optimizer_state(const GPT2 *model, AtomicFile *af) {
    if (!model->adam_m) die("internal error: optimizer state written before the first update");
    float *gather = comm_world() == 1 ? NULL
                    : dev_malloc(padded_parameters(model) * sizeof(float), "gathered optimizer state");
    write_gathered(af, model, model->adam_m, gather);
    write_gathered(af, model, model->adam_v, gather);
    if (model->master_weights) write_gathered(af, model, model->master_weights, gather);
    if (gather) {
        dev_synchronize();   // the all-gathers that write into it have finished
        dev_free(gather);
    }
}

void gpt2_read_optimizer_state(GPT2 *model, FILE *f, const char *path) {
    size_t n = model->num_parameters;
    if (!model->adam_m) allocate_optimizer_state(model);
    long base = ftell(f);
    if (base < 0) die("%s: cannot tell the position in the file", path);
    read_shard(model->adam_m, model, f, base, path);
    read_shard(model->adam_v, model, f, base + (long)(n * sizeof(float)), path);
    if (model->master_weights) {
        read_shard(model->master_weights, model, f, base + 2 * (long)(n * sizeof(float)), path);
        floatX_from_float(model->params_memory + model->shard_start, model->master_weights,
                          shard_owned(model));
        comm_all_gather(model->params_memory, model->shard_size, COMM_FLOATX);
    }
}

// ----------------------------------------------------------------------------------------
// reports

void gpt2_print_config(const GPT2 *model) {
    const GPT2Config *c = &model->config;
    printf("| model             | L=%d NH=%d C=%d maxT=%d V=%d Vp=%d |\n", c->num_layers,
           c->num_heads, c->channels, c->max_seq_len, c->vocab_size, c->padded_vocab_size);
    printf("| parameters        | %zu (%.1fM)                         |\n", model->num_parameters,
           model->num_parameters / 1e6);
}

void gpt2_print_memory(const GPT2 *model) {
    char buf[32];
    size_t n = model->num_parameters;
    printf("memory (%s, floatX=%s):\n", backend_name(), FLOATX_NAME);
    printf("  %-18s %14s %12s\n", "tensor", "elements", "bytes");
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        format_bytes(buf, sizeof(buf), (double)model->param_sizes[i] * sizeof(floatX));
        printf("  %-18s %14zu %12s\n", checkpoint_tensor_names[i], model->param_sizes[i], buf);
    }
    double shard = (double)model->shard_size;   // ZeRO-1: this rank's part of the optimizer
    double state = 2.0 * padded_parameters(model) * sizeof(floatX) +
                   (model->master_weights ? shard * 4.0 : 0.0) + (model->adam_m ? 2.0 * shard * 4.0 : 0.0);
    format_bytes(buf, sizeof(buf), state);
    printf("  parameters + gradients%s%s: %s", model->master_weights ? " + fp32 master" : "",
           model->adam_m ? " + AdamW moments" : "", buf);
    if (comm_world() > 1)
        printf(" (optimizer state for a shard of %zu of %zu parameters, rank %d of %d)",
               model->shard_size, n, comm_rank(), comm_world());
    printf("\n");
    if (backend_workspace_size()) {
        format_bytes(buf, sizeof(buf), (double)backend_workspace_size());
        printf("  backend workspace (cuBLAS, cuBLASLt): %s\n", buf);
    }
    if (!model->acts_memory) return;
    printf("  activations at B=%d T=%d (attention: %s, recompute level %d):\n", model->act_B,
           model->act_T, attention_name, model->recompute);
    double total = arena_print(stdout, activation_names, model->act_bytes, NUM_ACTIVATION_TENSORS);
    format_bytes(buf, sizeof(buf), total);
    printf("  activations total: %s (recompute level", buf);
    for (int level = RECOMPUTE_NONE; level < RECOMPUTE_LEVELS; level++) {
        format_bytes(buf, sizeof(buf),
                     (double)gpt2_activation_bytes(model->config, model->act_B, model->act_T, level));
        printf(" %d: %s%s", level, buf, level + 1 < RECOMPUTE_LEVELS ? "," : ")\n");
    }
}

void gpt2_free(GPT2 *model) {
    dev_free(model->params_memory);
    dev_free(model->grads_memory);
    if (model->master_weights) dev_free(model->master_weights);
    if (model->adam_m) dev_free(model->adam_m);
    if (model->adam_v) dev_free(model->adam_v);
    if (model->grad_sumsq) dev_free(model->grad_sumsq);
    dev_free(model->loss);
    if (model->acts_memory) dev_free(model->acts_memory);
    device_graph_free(model->pass_graph);
    memset(model, 0, sizeof(*model));
}
