// gpt2.h: THE model. GPT-2 config, parameters, activations, forward, backward, AdamW,
// checkpoints. It calls only layers/ and attention/, so the same file runs on the CPU (fp32)
// and on CUDA (bf16 storage, fp32 master weights), with either attention backend.
#ifndef GPT2_H
#define GPT2_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "checkpoint.h"
#include "layers/layers.h"
#include "runtime/graph.h"
#include "utils.h"

#define GPT2_VOCAB_SIZE 50257
#define GPT2_PADDED_VOCAB_SIZE 50304   // 50257 rounded up to a multiple of 128
#define GPT2_EOT 50256                 // <|endoftext|>

// ----------------------------------------------------------------------------------------
// The tensor tables. Each arena's tensors are listed once, as an X-macro (the parameters,
// GPT2_PARAMETERS, in checkpoint.h, since they are the model file's tensors in its order; the
// activations here); the struct fields, the sizes, the pointers into the arena, the checkpoint
// order and the memory report are all expanded from these lists (gpt2.c). A row of a layer
// (L, ...) is LAYER(...), one tensor for all layers, whose layer l is a view
// (gpt2_layer_params, gpt2_layer_acts); any other is ONE(...); an activation that
// recomputation may share between layers is RECOMPUTED(...). Shapes are in element counts of
// the local names of the expanding function.

// Activations of one forward pass at batch B and length T (N = B*T), kept for backward, one
// arena with every tensor on a 256-byte boundary: X(name, type, elements [per layer]).
// Sized for the largest (B, T) seen; smaller batches reuse the same memory. char rows are
// bytes whose layout belongs to the layer that uses them. RECOMPUTED(name, type, elements,
// level) is a layer's tensor that backward can rebuild from the ones kept: (L, ...) while the
// model's recompute level (gpt2_set_recompute) is below `level`; from `level` on, one (...)
// buffer that each layer's forward overwrites and backward recomputes before using it.
#define GPT2_ACTIVATIONS(ONE, LAYER, RECOMPUTED)                                                       \
    ONE(encoded,        floatX, N * C)                         /* (N, C) token + position embedding */ \
    RECOMPUTED(ln1,     floatX, N * C, RECOMPUTE_LAYERNORM)    /* (L or 1, N, C) */                    \
    LAYER(ln1_mean,     float, N)                              /* (L, N) */                            \
    LAYER(ln1_rstd,     float, N)                              /* (L, N) */                            \
    LAYER(qkv,          floatX, N * 3 * C)                     /* (L, N, 3C) */                        \
    LAYER(atty,         floatX, N * C)                         /* (L, N, C) attention output */        \
    LAYER(att_saved,    char, attention_saved_size(B, T, NH, HS)) /* naive: P; flash: logsumexp */     \
    LAYER(residual2,    floatX, N * C)                         /* (L, N, C) */                         \
    RECOMPUTED(ln2,     floatX, N * C, RECOMPUTE_LAYERNORM)    /* (L or 1, N, C) */                    \
    LAYER(ln2_mean,     float, N)                              /* (L, N) */                            \
    LAYER(ln2_rstd,     float, N)                              /* (L, N) */                            \
    LAYER(fch,          floatX, N * 4 * C)                     /* (L, N, 4C) */                        \
    RECOMPUTED(fch_gelu, floatX, N * 4 * C, RECOMPUTE_GELU)    /* (L or 1, N, 4C) */                   \
    LAYER(residual3,    floatX, N * C)                         /* (L, N, C) */                         \
    ONE(lnf,            floatX, N * C)                         /* (N, C) */                            \
    ONE(lnf_mean,       float, N)                              /* (N) */                               \
    ONE(lnf_rstd,       float, N)                              /* (N) */                               \
    ONE(logits,         floatX, N * Vp)                        /* (N, Vp) in training: dlogits */     \
    ONE(losses,         float, N)                              /* (N) */                               \
    ONE(inputs,         int, N)                                /* (N) */                               \
    ONE(targets,        int, N)                                /* (N) */                               \
    /* shared by all layers, one layer at a time: the projections' outputs in forward                  \
       (before the residual add) and the activation gradients in backward */                           \
    ONE(scratch_c,      floatX, N * C)                         /* (N, C) */                            \
    ONE(scratch_3c,     floatX, N * 3 * C)                     /* (N, 3C) */                           \
    ONE(scratch_4c,     floatX, N * 4 * C)                     /* (N, 4C) */                           \
    ONE(dresidual,      floatX, N * C)                         /* (N, C) residual stream's gradient */ \
    /* the layers' temporary space (layers.h, attention.h: *_scratch_size) */                          \
    ONE(att_scratch,    char, attention_scratch_size(B, T, NH, HS))                                    \
    ONE(layernorm_scratch, char, layernorm_backward_scratch_size(N, C))                                \
    ONE(matmul_scratch, char, matmul_scratch_size(N, C))                                              \
    ONE(encoder_scratch, char, encoder_backward_scratch_size(B, T))

// the fields of an X-macro row, and the rows' indices
#define GPT2_PARAM_FIELD(name, ...) floatX *name;
#define GPT2_ACT_FIELD(name, type, ...) type *name;
#define GPT2_ACT_INDEX(name, ...) ACT_##name,
#define GPT2_NOTHING(...)

typedef struct { GPT2_PARAMETERS(GPT2_PARAM_FIELD, GPT2_PARAM_FIELD) } ParameterTensors;
// one layer's parameters: views into the (L, ...) tensors
typedef struct { GPT2_PARAMETERS(GPT2_NOTHING, GPT2_PARAM_FIELD) } LayerParams;
// layer l's parameters (or gradients) of a model of C channels: views into the tensors of t
LayerParams gpt2_layer_params(const ParameterTensors *t, size_t C, int l);

typedef struct { GPT2_ACTIVATIONS(GPT2_ACT_FIELD, GPT2_ACT_FIELD, GPT2_ACT_FIELD) } ActivationTensors;
typedef struct { GPT2_ACTIVATIONS(GPT2_NOTHING, GPT2_ACT_FIELD, GPT2_ACT_FIELD) } LayerActs;
enum { GPT2_ACTIVATIONS(GPT2_ACT_INDEX, GPT2_ACT_INDEX, GPT2_ACT_INDEX) NUM_ACTIVATION_TENSORS };

// Activation recomputation levels (llm.c's -r), the `level` of the RECOMPUTED rows: each
// level trades memory for a little backward work, and gradients stay bit-identical (backward
// rebuilds a tensor with the very call, on the very inputs, that made it in forward).
enum {
    RECOMPUTE_NONE = 0,       // every layer's activations kept
    RECOMPUTE_GELU = 1,       // fch_gelu recomputed from fch
    RECOMPUTE_LAYERNORM = 2,  // and ln1, ln2 from the residual stream
    RECOMPUTE_LEVELS
};
// what each level recomputes, for messages and tables: "none", "GELU", "GELU and layernorm"
extern const char *const gpt2_recompute_names[RECOMPUTE_LEVELS];

typedef struct {
    GPT2Config config;
    ParameterTensors params;
    size_t param_sizes[NUM_PARAMETER_TENSORS];   // elements of each parameter tensor
    size_t num_parameters;
    // Data parallelism, ZeRO stage 1 (runtime/comm.h): the flat parameter array is cut into
    // comm_world() shards of shard_size; this rank updates [shard_start, shard_start +
    // shard_size) and keeps optimizer state for it alone. At world 1 the shard is everything.
    size_t shard_size;       // num_parameters at world 1; else ceil(num_parameters / world), rounded up
    size_t shard_start;      // comm_rank() * shard_size
    floatX *params_memory;   // (world * shard_size): num_parameters, then zero padding
    ParameterTensors grads;                      // same layout as params
    floatX *grads_memory;    // (world * shard_size)
    float *master_weights;   // (shard_size) fp32 copy when floatX is not fp32, else NULL
    float *adam_m;           // (shard_size) AdamW first moment, allocated at first update
    float *adam_v;           // (shard_size) AdamW second moment
    float *grad_sumsq;       // (1) device scratch for the global gradient norm
    float *loss;             // (2) device: the last pass's mean loss, then the sum of the mean
                             // losses of the micro-batches since gpt2_zero_grad
    ActivationTensors acts;
    size_t act_bytes[NUM_ACTIVATION_TENSORS];
    void *acts_memory;
    int recompute;           // RECOMPUTE_NONE (0), _GELU (1) or _LAYERNORM (2)
    int act_B, act_T;        // the (B, T) the activations are sized for; 0 before the first pass
    int last_B, last_T;      // the (B, T) of the last forward pass
    // a training pass (forward and backward of one micro-batch) recorded once and replayed
    // (runtime/graph.h), for the (B, T), loss scale and attention order below and the
    // activation arena it was recorded on
    struct DeviceGraph *pass_graph;
    int graph_B, graph_T, graph_deterministic;
    float graph_dloss;
} GPT2;

// Arenas (gpt2.c, used by gpt2_decode.c too): n tensors of bytes[i] bytes each in one
// device allocation, each on a 256-byte boundary (vector loads, cuBLASLt). arena_alloc sets
// offsets[i] (bytes from the start) and returns the allocation; arena_print writes one row
// per tensor, then the total, which it returns.
char *arena_alloc(size_t *offsets, const size_t *bytes, int n, const char *what);
// bytes rounded up to the arenas' 256-byte boundary (pieces of a tensor that must start on it)
size_t arena_align(size_t bytes);
double arena_print(FILE *out, const char *const *names, const size_t *bytes, int n);

// "dN", a model of N layers, as llm.c names them: d12 GPT-2 124M (C=768, NH=12), d24 gpt2-medium
// (C=1024, NH=16), d36 gpt2-large (C=1280, NH=20), d48 gpt2-xl (C=1600, NH=25), d60, d72, d84
// llm.c's 2.7B, 7.3B, 12.2B; any other N: NH=N, C=64N (head size 64). Returns 0 on success,
// -1 when the name is not of that form.
int gpt2_config_from_name(GPT2Config *config, const char *name, int max_seq_len);
void gpt2_print_config(const GPT2 *model);

// Random GPT-2 initialisation: weights N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
// biases 0, layernorm weights 1, padding rows of wte 0. Every value depends on the seed, its
// tensor and its place in it alone, never on the number of OpenMP threads that make them.
void gpt2_init_random(GPT2 *model, GPT2Config config, uint64_t seed);
#define GPT2_INIT_SLAB (1 << 20)   // parameters it makes and uploads at a time (4 MiB of fp32)
// llm.c model file, version 3 (fp32) or 5 (bf16). Dies naming the file on any problem.
void gpt2_load_checkpoint(GPT2 *model, const char *path);
// The config in a model file's header, checked as gpt2_load_checkpoint checks it (dies likewise)
GPT2Config gpt2_checkpoint_config(const char *path);
// Writes version 3 (fp32) when floatX is fp32, else version 5 (bf16); atomic.
void gpt2_save_checkpoint(const GPT2 *model, const char *path);
size_t gpt2_checkpoint_bytes(const GPT2 *model);   // the size of the file it writes
void gpt2_free(GPT2 *model);

// The recompute level (RECOMPUTE_*), after gpt2_init_random or gpt2_load_checkpoint and before
// the activations exist (the first pass or gpt2_allocate_activations): it fixes the arena's
// layout, so a later change dies rather than freeing tensors a caller may still read.
void gpt2_set_recompute(GPT2 *model, int level);
// Bytes of the activation arena of a model of config c for passes of (B, T) at a recompute
// level, as gpt2_print_memory lists them (each tensor rounded up to the arena's alignment).
size_t gpt2_activation_bytes(GPT2Config c, int B, int T, int recompute);
// Sizes the activation arena for passes of up to (B, T) now rather than at the first pass.
// Returns 0, or -1 when the device lacks the memory, so that the caller can say which setting
// would fit (the model then holds no activations; a pass allocates them again, or dies saying
// that they do not fit).
int gpt2_allocate_activations(GPT2 *model, int B, int T);
// layer l's activations of the last pass (last_B, last_T): views into the (L, ...) tensors
LayerActs gpt2_layer_acts(const GPT2 *model, int l);

// Forward pass on inputs (B, T) host token ids. With targets (B, T), returns the mean
// cross-entropy loss (waiting for the device to compute it); without (NULL), returns -1 and
// leaves the logits in acts.logits.
float gpt2_forward(GPT2 *model, const int *inputs, const int *targets, int B, int T);
// Forward and backward of one micro-batch: parameter gradients are accumulated (+=) with the
// loss scaled by loss_scale (1 / gradient-accumulation steps), and the micro-batch's mean loss
// is added to the loss sum on the device. It returns without waiting for the device: a step
// launches its micro-batches and its update back to back, and reads the loss at its end.
void gpt2_forward_backward(GPT2 *model, const int *inputs, const int *targets, int B, int T,
                           float loss_scale);
// The sum of the mean losses of the micro-batches since gpt2_zero_grad (waits for the device).
float gpt2_loss_sum(const GPT2 *model);
// Zeroes the gradients and the loss sum, which the micro-batches of a step accumulate.
void gpt2_zero_grad(GPT2 *model);
// Global gradient norm, then AdamW on every parameter with the gradient scaled so that its
// norm is at most max_grad_norm (no clipping when max_grad_norm <= 0). Weight decay applies
// to the 2-D weight matrices only (wte, wpe, qkvw, attprojw, fcw, fcprojw). step is 1-based.
// Returns the gradient norm before clipping, read once all of it is launched (the device
// computes the clip scale itself, so nothing waits in between); when the norm is not finite
// the parameters and moments stay as they were and the caller reports it. With several ranks it is collective: gradients
// are summed over the ranks (so the loss_scale given to gpt2_forward_backward should hold the
// 1/world of the average), each rank updates its shard, and all ranks get all parameters back.
float gpt2_update(GPT2 *model, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float max_grad_norm, int step);
// Copies the logits at row (b, t) of the last forward pass (first V entries) to the host.
void gpt2_logits_at(const GPT2 *model, int b, int t, float *out_host);

// Optimizer state (AdamW moments, and master weights where they exist) for resumable
// training: appended to / read from a training-state file opened by the driver. The file
// holds whole arrays (num_parameters each), whatever the number of ranks, so a run resumes on
// another number of ranks. Both are collective: every rank calls them; for writing the
// shards are gathered and only rank 0 passes a file (the others NULL); for reading, every
// rank reads its own shard from the file.
void gpt2_write_optimizer_state(const GPT2 *model, AtomicFile *af);
void gpt2_read_optimizer_state(GPT2 *model, FILE *f, const char *path);

// Prints the parameter and activation tables: each tensor's shape-derived size and the
// totals, so every allocation of the model is visible in one place.
void gpt2_print_memory(const GPT2 *model);

// ----------------------------------------------------------------------------------------
// Generation with a KV cache (gpt2_decode.c). The prompt is prefilled by the model's own
// forward pass, through the built attention backend, and every layer's keys and values are
// kept; each new token is then one decode step: every layer on B rows (one per sequence),
// attention_decode against the cache. The B sequences advance together, at one position.
// The step's activations are small buffers of their own, beside the cache, in one arena.

// The cache and the decode step's tensors, one arena (256-byte aligned, zeroed once: the
// scratches keep counters that must start at zero): X(name, type, elements). The step's
// tensors are reused by every layer (C = NH * HS).
#define GPT2_DECODE_TENSORS(X)                                                               \
    X(k, floatX, L * B * maxT * C)  /* (L, B, NH, maxT, HS) key cache */                     \
    X(v, floatX, L * B * maxT * C)  /* (L, B, NH, maxT, HS) value cache */                   \
    X(tokens, int, B + DECODE_GRAPH_STEPS) /* the next step's tokens (the argmax of the */   \
              /* step before, or the host's), then each step of a graph its position,      */  \
              /* written before the graph starts                                            */ \
    X(x, floatX, B * C)             /* (B, C) residual stream, updated in place */           \
    X(x_stats, float, ROW_STATS_FLOATS(B, C)) /* x's row statistics (layers.h) */            \
    X(qkv, floatX, B * 3 * C)       /* (B, 3C) the new token's query, key and value */       \
    X(atty, floatX, B * C)          /* (B, C) attention output */                            \
    X(fch_gelu, floatX, B * 4 * C)  /* (B, 4C) the MLP's hidden layer, after GELU */         \
    X(logits, floatX, B * Vp)       /* (B, Vp) logits of the last position */                \
    X(att_scratch, char, attention_decode_scratch_size(B, maxT, NH, HS))                     \
    X(fused_scratch, char, fused_scratch_size(B, C, 4 * C))                                  \
    /* the branches' parts of the batch, Pb of them (parts - 1, decode_step_parts), each its   \
       own of these scratches (KVCache's part_bytes apart; part 0 uses those above) */          \
    X(x_stats_b, float, Pb * part_bytes[0] / sizeof(float))                                  \
    X(att_scratch_b, char, Pb * part_bytes[1])                                               \
    X(fused_scratch_b, char, Pb * part_bytes[2])
#define GPT2_DECODE_INDEX(name, ...) DECODE_##name,
enum { GPT2_DECODE_TENSORS(GPT2_DECODE_INDEX) NUM_DECODE_TENSORS };

// Greedy decoding at batch 1 (and 96-128) runs DECODE_GRAPH_STEPS steps as one CUDA graph
// where that many are asked for (the steps chained by programmatic dependent launch, no graph
// boundary between them: 1.02x tokens/s over a graph a step, 1.05x after 1,000 tokens;
// docs/PERF.md, twenty-ninth session, call 10; 16 steps: +0.25% at batch 1 but 2.5% slower after
// 1,000 tokens, thirtieth session, call 7), and the host may read the tokens of the last
// DECODE_TOKEN_SLOTS positions: a graph's, while the next one runs.
#define DECODE_GRAPH_STEPS 8
#define DECODE_TOKEN_SLOTS (2 * DECODE_GRAPH_STEPS)

typedef struct {
    int L, B, maxT, NH, HS;  // maxT positions of B sequences, for L layers of NH heads of HS
    int V, Vp;               // the model's vocabulary and padded vocabulary
    int parts;               // the layers run as this many parts of the batch at once
    size_t part_bytes[3];    // a branch's part of x_stats_b, att_scratch_b, fused_scratch_b
    int len;                 // positions filled so far (the same for every sequence)
    GPT2_DECODE_TENSORS(GPT2_ACT_FIELD)
    size_t bytes[NUM_DECODE_TENSORS];
    void *memory;
    DeviceGraph *graph[2];   // one decode step, and DECODE_GRAPH_STEPS of them, replayed (CUDA graphs)
    // greedy decoding's tokens as they reach the host (gpt2_decode_chosen): those chosen at
    // position p in slot p % DECODE_TOKEN_SLOTS of chosen (host memory the device writes), the
    // slot's event recorded after the graph that fills it, chosen_pos its position (-1: none)
    int *chosen;
    DevEvent *chosen_done[DECODE_TOKEN_SLOTS];
    int chosen_pos[DECODE_TOKEN_SLOTS];
} KVCache;

// A cache of maxT positions (at most the model's max_seq_len) for B sequences.
void kv_cache_init(KVCache *cache, const GPT2 *model, int B, int maxT);
void kv_cache_free(KVCache *cache);
void kv_cache_print_memory(const KVCache *cache, FILE *out);
// Prefill from tokens (Bp, T) host ids, T <= cache->maxT: Bp = cache->B, a prompt per
// sequence, or Bp = 1, one prompt for all (run once, its keys and values copied to every
// sequence). Leaves the logits of position T-1 of each sequence in cache->logits and their
// argmax in cache->tokens (and for gpt2_decode_chosen); len = T.
void gpt2_prefill(GPT2 *model, KVCache *cache, const int *tokens, int Bp, int T);
// One token per sequence, tokens (B) host ids, at position pos (1 <= pos <= cache->len, so a
// step may also rewind; pos < maxT). Its logits (B, Vp) land in cache->logits and their argmax
// in cache->tokens (and for gpt2_decode_chosen); len = pos + 1.
void gpt2_decode_step(GPT2 *model, KVCache *cache, const int *tokens, int pos);
// Greedy decoding: steps from position cache->len on, until position `until` is queued
// (until < maxT) or the next graph would not fit the ring of chosen tokens without dropping
// position `reading` (the oldest the host has yet to read, as gpt2_decode_chosen keeps them):
// graphs of DECODE_GRAPH_STEPS steps at batch 1 and 96-128 rows while that many remain, else
// one step a graph (reading <= cache->len; once the host has read `reading`, a later call queues
// more). Each step's tokens are the argmax of the step or prefill before, which never leave the
// device, and the device moves its own position on, so the host sends nothing; returns without
// waiting for the device, so that the steps run while the host reads the tokens of those
// before. The same bits as gpt2_decode_step with that argmax.
void gpt2_decode_greedy(GPT2 *model, KVCache *cache, int reading, int until);
// out (B): the argmax of the logits at position pos (the prefill's last, T - 1, or a step's),
// greedy decoding's choice, as it reaches the host: waits for the graph that chose it (the
// last of its steps), not for any queued after it. The device writes it into host memory, with
// no copy of its own. pos must be one of the last DECODE_TOKEN_SLOTS positions decoded;
// otherwise it dies saying so.
void gpt2_decode_chosen(KVCache *cache, int pos, int *out);
// Host copies of the current logits: out (B, Vp) fp32; or their argmax, out (B) (computed
// with the logits: only B ints come back). Both wait for every step queued.
void gpt2_decode_logits(const KVCache *cache, float *out);
void gpt2_decode_argmax(KVCache *cache, int *out);

#endif
