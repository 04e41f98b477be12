// gpt2.h: THE model. GPT-2 config, parameters, activations, forward, backward, AdamW,
// checkpoints. It calls only layers/ and attention/, so the same file runs on the CPU (fp32)
// and on CUDA (bf16 storage, fp32 master weights), with either attention backend.
#ifndef GPT2_H
#define GPT2_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "layers/layers.h"
#include "utils.h"

#define GPT2_VOCAB_SIZE 50257
#define GPT2_PADDED_VOCAB_SIZE 50304   // 50257 rounded up to a multiple of 128
#define GPT2_EOT 50256                 // <|endoftext|>
#define CHECKPOINT_MAGIC 20240326      // llm.c model file
#define CHECKPOINT_VERSION_FP32 3
#define CHECKPOINT_VERSION_BF16 5

typedef struct {
    int max_seq_len;        // maxT, rows of wpe
    int vocab_size;         // V
    int padded_vocab_size;  // Vp (rows of wte; the padding rows stay zero)
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

// Parameters, in llm.c's checkpoint order. Each points into one contiguous arena.
#define NUM_PARAMETER_TENSORS 16
typedef struct {
    floatX *wte;       // (Vp, C)  token embedding, tied with the LM head
    floatX *wpe;       // (maxT, C) position embedding
    floatX *ln1w;      // (L, C)
    floatX *ln1b;      // (L, C)
    floatX *qkvw;      // (L, 3C, C)
    floatX *qkvb;      // (L, 3C)
    floatX *attprojw;  // (L, C, C)
    floatX *attprojb;  // (L, C)
    floatX *ln2w;      // (L, C)
    floatX *ln2b;      // (L, C)
    floatX *fcw;       // (L, 4C, C)
    floatX *fcb;       // (L, 4C)
    floatX *fcprojw;   // (L, C, 4C)
    floatX *fcprojb;   // (L, C)
    floatX *lnfw;      // (C)
    floatX *lnfb;      // (C)
} ParameterTensors;

// Activations of one forward pass at batch B and length T (N = B*T), kept for backward.
// Sized for the largest (B, T) seen; smaller batches reuse the same memory.
typedef struct {
    floatX *encoded;    // (N, C)            token + position embedding
    floatX *ln1;        // (L, N, C)
    float *ln1_mean;    // (L, N)
    float *ln1_rstd;    // (L, N)
    floatX *qkv;        // (L, N, 3C)
    floatX *atty;       // (L, N, C)         attention output
    void *att_saved;    // (L, attention_saved_size)   naive: P; flash: logsumexp
    floatX *residual2;  // (L, N, C)
    floatX *ln2;        // (L, N, C)
    float *ln2_mean;    // (L, N)
    float *ln2_rstd;    // (L, N)
    floatX *fch;        // (L, N, 4C)
    floatX *fch_gelu;   // (L, N, 4C)
    floatX *residual3;  // (L, N, C)
    floatX *lnf;        // (N, C)
    float *lnf_mean;    // (N)
    float *lnf_rstd;    // (N)
    floatX *logits;     // (N, Vp)           overwritten by dlogits in training
    float *losses;      // (N)
    int *inputs;        // (N)
    int *targets;       // (N)
    // scratch, shared by all layers: the projections' outputs in forward (before the
    // residual add) and the activation gradients in backward, one layer at a time
    floatX *scratch_c;  // (N, C)
    floatX *scratch_3c; // (N, 3C)
    floatX *scratch_4c; // (N, 4C)
    floatX *dresidual;  // (N, C)            gradient of the residual stream
    void *att_scratch;  // attention_scratch_size
} ActivationTensors;
#define NUM_ACTIVATION_TENSORS 26

typedef struct {
    GPT2Config config;
    ParameterTensors params;
    size_t param_sizes[NUM_PARAMETER_TENSORS];   // elements of each parameter tensor
    size_t num_parameters;
    // Data parallelism, ZeRO stage 1 (layers/comm.h): the flat parameter array is cut into
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
    ActivationTensors acts;
    size_t act_bytes[NUM_ACTIVATION_TENSORS];
    void *acts_memory;
    int act_B, act_T;        // the (B, T) the activations are sized for; 0 before the first pass
    int last_B, last_T;      // the (B, T) of the last forward pass
    float *host_losses;      // (act_B * act_T) host copy of losses
} GPT2;

// "d12" (GPT-2 124M: L=12, NH=12, C=768), "d24", "d36", "d48", or any "dN": L=N, NH=N,
// C=64N. Returns 0 on success, -1 when the name is not of that form.
int gpt2_config_from_name(GPT2Config *config, const char *name, int max_seq_len);
void gpt2_print_config(const GPT2 *model);

// Random GPT-2 initialisation, deterministic for the seed: weights N(0, 0.02), residual
// projections N(0, 0.02/sqrt(2L)), biases 0, layernorm weights 1, padding rows of wte 0.
void gpt2_init_random(GPT2 *model, GPT2Config config, uint64_t seed);
// llm.c model file, version 3 (fp32) or 5 (bf16). Dies naming the file on any problem.
void gpt2_load_checkpoint(GPT2 *model, const char *path);
// Writes version 3 (fp32) when floatX is fp32, else version 5 (bf16); atomic.
void gpt2_save_checkpoint(const GPT2 *model, const char *path);
size_t gpt2_checkpoint_bytes(const GPT2 *model);   // the size of the file it writes
void gpt2_free(GPT2 *model);

// Forward pass on inputs (B, T) host token ids. With targets (B, T), returns the mean
// cross-entropy loss; without (NULL), returns -1 and leaves the logits in acts.logits.
float gpt2_forward(GPT2 *model, const int *inputs, const int *targets, int B, int T);
// Forward and backward of one micro-batch: parameter gradients are accumulated (+=) with the
// loss scaled by loss_scale (1 / gradient-accumulation steps). Returns the mean loss.
float gpt2_forward_backward(GPT2 *model, const int *inputs, const int *targets, int B, int T,
                            float loss_scale);
void gpt2_zero_grad(GPT2 *model);
// Global gradient norm, then AdamW on every parameter with the gradient scaled so that its
// norm is at most max_grad_norm (no clipping when max_grad_norm <= 0). Weight decay applies
// to the 2-D weight matrices only (wte, wpe, qkvw, attprojw, fcw, fcprojw). step is 1-based.
// Returns the gradient norm before clipping. With several ranks it is collective: gradients
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

#define NUM_DECODE_TENSORS 16
typedef struct {
    int L, B, maxT, NH, HS;  // maxT positions of B sequences, for L layers of NH heads of HS
    int V, Vp;               // the model's vocabulary and padded vocabulary
    int len;                 // positions filled so far (the same for every sequence)
    floatX *k;               // (L, B, maxT, NH, HS)
    floatX *v;               // (L, B, maxT, NH, HS)
    // the decode step, reused by every layer (C = NH * HS)
    int *inputs;             // (B + 2) tokens, then the position and the length (position + 1)
    floatX *x;               // (B, C)   residual stream into the layer
    floatX *x2;              // (B, C)   residual stream after the attention block
    floatX *ln;              // (B, C)   layernorm output
    float *ln_mean;          // (B)
    float *ln_rstd;          // (B)
    floatX *qkv;             // (B, 3C)  the new token's query, key and value
    floatX *q;               // (B, C)   its query alone (the key and value go to the cache)
    floatX *atty;            // (B, C)   attention output
    floatX *proj;            // (B, C)   output of a projection, before the residual add
    floatX *fch;             // (B, 4C)
    floatX *fch_gelu;        // (B, 4C)
    floatX *logits;          // (B, Vp)  logits of the last position (prefill or step)
    int *argmax;             // (B)
    size_t bytes[NUM_DECODE_TENSORS];
    void *memory;
    DeviceGraph *graph;      // the decode step's layers, replayed (CUDA graph)
} KVCache;

// A cache of maxT positions (at most the model's max_seq_len) for B sequences.
void kv_cache_init(KVCache *cache, const GPT2 *model, int B, int maxT);
void kv_cache_free(KVCache *cache);
void kv_cache_print_memory(const KVCache *cache);
// Prefill from tokens (Bp, T) host ids, T <= cache->maxT: Bp = cache->B, a prompt per
// sequence, or Bp = 1, one prompt for all (run once, its keys and values copied to every
// sequence). Leaves the logits of position T-1 of each sequence in cache->logits; len = T.
void gpt2_prefill(GPT2 *model, KVCache *cache, const int *tokens, int Bp, int T);
// One token per sequence, tokens (B) host ids, at position pos (1 <= pos <= cache->len, so a
// step may also rewind; pos < maxT). Its logits (B, Vp) land in cache->logits; len = pos + 1.
void gpt2_decode_step(GPT2 *model, KVCache *cache, const int *tokens, int pos);
// Host copies of the current logits: out (B, Vp) fp32; or their argmax, out (B).
void gpt2_decode_logits(const KVCache *cache, float *out);
void gpt2_decode_argmax(KVCache *cache, int *out);

#endif
