// layers.h: the C API of every operation GPT-2 is made of. The memory they work in, floatX and
// the device come from the runtime they stand on (runtime/device.h, included here).
//
// One header, two implementations chosen at build time (BACKEND=cpu|cuda):
//   layers/*.c   CPU, fp32 storage and math, OpenMP
//   layers/*.cu  CUDA, bf16 storage (floatX), fp32 math and accumulation, cuBLAS(Lt) for matmuls
// The model (gpt2.c) calls only these functions and never knows which backend it runs on.
// Every pointer argument is device memory of the backend (host memory on the CPU).
//
// Shape names, everywhere: B batch, T time (sequence length), C channels, OC output channels,
// NH heads, HS head size (C = NH*HS), V vocabulary (50257), Vp padded vocabulary (50304),
// N = B*T rows.
//
// Scratch: a layer that needs temporary device memory inside a call says how much through
// its *_scratch_size function and is given it (void *scratch) by the caller, who allocates
// it up front in an arena, so that every byte shows in the memory report and nothing is
// allocated during a call (CUDA graph capture must never meet an allocation). The space is
// free again when the call returns, so calls on one stream may share it. Scratch sized for a
// shape serves every smaller one (fewer rows, a shorter cache). The CPU backend needs none
// (size 0; scratch may then be NULL).
//
// Gradient conventions (the same on both backends):
//   - parameter gradients (dweight, dbias, dwte, dwpe, ...) are ACCUMULATED (+=), so that
//     gradient accumulation over micro-steps and the tied wte need nothing special;
//   - activation gradients are OVERWRITTEN (=), except layernorm_backward's dinp, which is
//     accumulated (+=) because it lands in the residual stream's gradient.
#ifndef LAYERS_H
#define LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "../runtime/device.h"

#ifdef __cplusplus
extern "C" {
#endif

// ----------------------------------------------------------------------------------------
// layers: forward and backward side by side

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
// out (B,T,C), tokens (B,T) int32 device array, wte (Vp,C), wpe (maxT,C)
void encoder_forward(floatX *out, const int *tokens, const floatX *wte, const floatX *wpe,
                     int B, int T, int C);
// dwte (Vp,C) +=, dwpe (maxT,C) +=, from dout (B,T,C)
// scratch: encoder_backward_scratch_size(B, T) bytes (CUDA: the tokens sorted, for a
// deterministic dwte without atomics)
size_t encoder_backward_scratch_size(int B, int T);
void encoder_backward(floatX *dwte, floatX *dwpe, void *scratch, const floatX *dout,
                      const int *tokens, int B, int T, int C);

// out = (inp - mean) * rstd * weight + bias, per row, rstd = 1 / sqrt(variance + eps)
#define LAYERNORM_EPS 1e-5f
// out (N,C), mean (N) fp32, rstd (N) fp32, inp (N,C), weight (C), bias (C)
void layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp,
                       const floatX *weight, const floatX *bias, int N, int C);
// The residual add and the layernorm after it, in one pass over memory (4 tensors of N x C
// moved instead of residual_forward's 3 and layernorm_forward's 2): residual = a + b, then
// out, mean, rstd = layernorm_forward of residual, with the very bits those two calls give
// (so a layernorm recomputed from the stored residual matches it). residual may alias a.
// residual (N,C), out (N,C), mean (N), rstd (N), a (N,C), b (N,C), weight (C), bias (C)
void layernorm_residual_forward(floatX *residual, floatX *out, float *mean, float *rstd,
                                const floatX *a, const floatX *b, const floatX *weight,
                                const floatX *bias, int N, int C);
// dinp (N,C) += , dweight (C) +=, dbias (C) +=
// dproj_bias (C) += colsum(dinp), dinp as it leaves (skipped when NULL). In the model dinp is
// the residual stream's gradient, which is also the gradient of the projection (attproj,
// fcproj) whose output the residual add before this layernorm took in: its bias gradient comes
// from this pass over dinp instead of one more (matmul_backward is then given no dbias).
// scratch: layernorm_backward_scratch_size(N, C) bytes (CUDA: per-block partial sums of
// dweight, dbias and dproj_bias, added in a fixed order)
size_t layernorm_backward_scratch_size(int N, int C);
void layernorm_backward(floatX *dinp, floatX *dweight, floatX *dbias, floatX *dproj_bias,
                        void *scratch, const floatX *dout, const floatX *inp,
                        const floatX *weight, const float *mean, const float *rstd, int N, int C);

// out = inp @ weight^T + bias
// out (N,OC), inp (N,C), weight (OC,C), bias (OC) or NULL
void matmul_forward(floatX *out, const floatX *inp, const floatX *weight, const floatX *bias,
                    int N, int C, int OC);
// dinp (N,C) = dout @ weight (overwritten; skipped when dinp is NULL),
// dweight (OC,C) += dout^T @ inp, dbias (OC) += colsum(dout) (skipped when dbias is NULL)
// scratch: matmul_backward_scratch_size(N, OC) bytes (CUDA: partial column sums of dbias;
// unused without dbias)
size_t matmul_backward_scratch_size(int N, int OC);
void matmul_backward(floatX *dinp, floatX *dweight, floatX *dbias, void *scratch,
                     const floatX *dout, const floatX *inp, const floatX *weight, int N, int C,
                     int OC);
// The decode step's plain calls (fused_plain.h) with the work after the matmul in one call:
// out = gelu(inp @ weight^T + bias) when gelu, out += inp @ weight^T + bias when add (out the
// residual stream), else matmul_forward. pre (N,OC): scratch for the matmul's output where the
// backend applies GELU or the add apart (CPU: the very matmul_forward, gelu_forward and
// residual_forward of before); CUDA does not use it, and takes NULL. CUDA: one cuBLASLt GEMM,
// the work in its epilogue, rounded once, with cuBLASLt's GELU: not the separate kernels' bits,
// so for inference only (training's recomputation and resume need gelu_forward's and
// residual_forward's).
void matmul_forward_epilogue(floatX *out, floatX *pre, const floatX *inp, const floatX *weight,
                             const floatX *bias, int N, int C, int OC, int gelu, int add);
// Training's fc projection backward with the GELU's before it (its input out = gelu(pre)):
// dpre (N,C) = gelu'(pre) * (dout @ weight), dbias (C) += colsum(dpre) (the fc layer's bias),
// dweight (OC,C) += dout^T @ out. pre, out (N,C), dout (N,OC), weight (OC,C).
// CPU: matmul_backward then gelu_backward. CUDA: the GELU's derivative in the dinp GEMM's
// epilogue (cuBLASLt's formula: not gelu_backward's bits), the column sums apart; where
// cuBLASLt has no such algorithm for the shape, the GEMM then gelu_backward, as on the CPU.
// dbias may be NULL (no sums).
// scratch: matmul_backward_scratch_size(N, C) bytes
void matmul_gelu_backward(floatX *dpre, floatX *dbias, floatX *dweight, void *scratch,
                          const floatX *dout, const floatX *out, const floatX *pre,
                          const floatX *weight, int N, int C, int OC);

// GELU, tanh approximation: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// out (n), inp (n)
void gelu_forward(floatX *out, const floatX *inp, size_t n);
// dinp (N,OC) = dout * gelu'(inp), inp (N,OC), dout (N,OC); dinp may alias dout.
// dbias (OC) += colsum(dinp) (skipped when NULL): the bias gradient of the matmul that made
// inp, from this pass over dinp instead of one more (matmul_backward is then given no dbias).
// scratch: matmul_backward_scratch_size(N, OC) bytes (CUDA: partial column sums of dbias;
// unused without dbias)
void gelu_backward(floatX *dinp, floatX *dbias, void *scratch, const floatX *inp,
                   const floatX *dout, int N, int OC);

// out = a + b; out (n), a (n), b (n). Its backward is the identity: the model passes the
// residual stream's gradient through unchanged (see gpt2_backward).
void residual_forward(floatX *out, const floatX *a, const floatX *b, size_t n);

// Softmax over the first V of Vp columns of each row of logits, cross-entropy against
// targets: losses[i] = -log softmax(logits[i])[targets[i]].
// When dloss != 0, logits is overwritten by its gradient: dloss * (softmax - onehot(target))
// in columns < V and 0 in the padding; when dloss == 0 logits is left unchanged.
// logits (N,Vp) in/out, losses (N) fp32 out, targets (N) int32
void crossentropy_forward_backward(floatX *logits, float *losses, const int *targets,
                                   int N, int V, int Vp, float dloss);
// The mean of the N losses, on the device so that nobody waits for it: *mean = sum / N, the
// sum in double in a fixed order (the same bits every run); when sum is not NULL, also
// *sum += *mean (the mean losses of the micro-batches of a step). mean, sum: one fp32 each.
void crossentropy_loss_mean(float *mean, float *sum, const float *losses, int N);

// The KV cache's layout, (B, NH, maxT, HS): each head's positions are contiguous, so that the
// decode attention, which walks one head's positions, reads each block of them as one stream
// (the position-major (B, maxT, NH, HS) read 128 bytes of every 1,536 at d12). The offset of
// head h of position s of sequence b in a cache of maxT positions:
#define KV_CACHE_AT(b, h, s, maxT, NH, HS) ((((size_t)(b) * (NH) + (h)) * (maxT) + (s)) * (HS))

// Attention of one new query per sequence against a KV cache, for generation (causal by
// construction: the cache holds positions 0..len-1, the new token's own k, v included).
// out (B, NH, HS), q (B, NH, HS); kcache, vcache (B, NH, maxT, HS), of which the first len
// positions are read. Scale 1/sqrt(HS). One kernel for both attention backends: it is the
// decode step of either, and flash-decoding on the GPU (the cache split across blocks).
// scratch: attention_decode_scratch_size(B, maxT, NH, HS) bytes, enough for every len <=
// maxT (CUDA: the partial results of the splits of the cache, and a counter per head that
// elects the block that combines them), zero before its first use (dev_memset_zero once);
// every call leaves it zero again
size_t attention_decode_scratch_size(int B, int maxT, int NH, int HS);
void attention_decode(floatX *out, void *scratch, const floatX *q, const floatX *kcache,
                      const floatX *vcache, int B, int len, int maxT, int NH, int HS);

// The rest of generation's layer calls (layers/decode_attention.*, fused.*, argmax.*). What
// changes from one decode step to the next (its tokens and position) is read from device memory,
// so that the step is the same sequence of launches every time and CUDA can replay it as one
// graph (runtime/graph.h).
//
// The decode step's attention: the new token's key and value, read from qkv (B, 3, NH, HS), go
// into the cache at position pos (one int32 in device memory, the step's cell: below), and its
// query attends to positions 0..pos (its own included, as causality wants). out (B, NH, HS);
// kcache, vcache (B, NH, maxT, HS). The work is laid out for maxT positions; the parts past pos return at once.
// scratch: attention_decode_scratch_size(B, maxT, NH, HS) bytes, as for attention_decode.
// beside: the sequences of other calls whose attention runs at the same time as this one's (the
// decode step's other parts of a batch, gpt2_decode.c), 0 if none: on CUDA they choose how many
// cache rows a round the kernel loads (decode_attention.cu), not the result beyond its rounding.
void attention_decode_step(floatX *out, void *scratch, const floatX *qkv, floatX *kcache,
                           floatX *vcache, const int *pos, int B, int beside, int maxT, int NH,
                           int HS);
// The prefill's keys and values: those of qkv (B, T, 3, NH, HS) go into the KV cache at
// positions pos .. pos+T-1 (pos: one int32 in device memory). kcache, vcache (B, NH, maxT, HS).
void kv_cache_store(floatX *kcache, floatX *vcache, const floatX *qkv, const int *pos, int B,
                    int T, int maxT, int NH, int HS);

// The decode step's fused calls (layers/fused.*): each does what several layers above do one
// after another. A decode step has a row per sequence, N = B; at a few rows its matmuls are
// matrix-vector products bound by reading the weights, and at batch 1 the step's time went to
// the boundaries between some 150 small kernels. On CUDA with N <= FUSED_MAX_ROWS each call is
// one GEMV kernel (FMAs at one row, tensor cores at 2 to 8) that loads its weights before waiting
// for the kernel before it (runtime/cuda_common.cuh, PDL); above it, up to 64 rows on Hopper, a
// wgmma kernel of the same plan (decode_gemm_sm90.cu: K split across a thread-block cluster; the
// layernorm folded in up to 32 rows, from the row statistics below, a kernel of its own above
// and in the first layer); otherwise and on the CPU, the layers above one after another
// (layers/fused_plain.h), which is also what the fused kernels are tested against. Both round
// where the layers do (layernorm output, matmul output, GELU output to floatX), so the fused
// results differ from the layers' only by summation order.
// scratch: fused_scratch_size(N, C, OC) bytes for N rows, C channels in and OC outputs at most
// (a matmul's, not the LM head's); zero before its first use (dev_memset_zero once; the LM
// head's argmax keeps a counter there, and at 9-64 rows on Hopper its rows' best keys, which
// every call leaves zero).
#define FUSED_MAX_ROWS 8
size_t fused_scratch_size(int N, int C, int OC);
// The residual stream's row statistics, from a residual call to the layernorm call after it: on
// CUDA's wgmma path (9-32 rows on Hopper) a residual call given `stats` leaves there, for each
// row it writes, the mean and the sum of squared deviations of each 64-column piece ((N, C / 64)
// float pairs: ROW_STATS_FLOATS) and returns 1; layernorm_matmul_forward given them folds the
// layernorm into its matmul, with no pass over the rows of its own. A call that returns 0 left
// nothing, and the next layernorm call gets NULL; the CPU's calls return 0 and ignore stats.
#define ROW_STATS_FLOATS(N, C) ((size_t)(N) * (((C) + 63) / 64) * 2)
// out (N, OC) = layernorm(inp) @ weight^T + bias, then GELU when gelu != 0
// inp (N, C), lnw, lnb (C), weight (OC, C), bias (OC); stats: inp's row statistics or NULL
void layernorm_matmul_forward(floatX *out, void *scratch, const floatX *inp, const floatX *lnw,
                              const floatX *lnb, const floatX *weight, const floatX *bias, int N,
                              int C, int OC, int gelu, const float *stats);
// residual (N, OC) += inp @ weight^T + bias, the product rounded to floatX before the add (as
// matmul_forward then residual_forward). inp (N, C), weight (OC, C), bias (OC). Returns 1 where
// it left the new rows' statistics in stats (not NULL), else 0
int matmul_residual_forward(floatX *residual, void *scratch, const floatX *inp,
                            const floatX *weight, const floatX *bias, int N, int C, int OC,
                            float *stats);
// One layer's weights as decode_layers_step takes them (gpt2.h's LayerParams has the same names)
typedef struct {
    const floatX *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    const floatX *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} DecodeLayerWeights;
// The decode step's layers at B rows (C = NH * HS): for l = 0 .. L-1, with w[l] and layer l's
// caches kcache + l * layer_stride, vcache + l * layer_stride (B, NH, maxT, HS):
//   qkv (B, 3C) = layernorm(x; ln1w, ln1b) @ qkvw^T + qkvb     layernorm_matmul_forward
//   att (B, C)  = attention_decode_step(qkv, caches, pos)       (the new k, v into the caches)
//   x (B, C)   += att @ attprojw^T + attprojb                  matmul_residual_forward
//   fch (B, 4C) = gelu(layernorm(x; ln2w, ln2b) @ fcw^T + fcb) layernorm_matmul_forward
//   x          += fch @ fcprojw^T + fcprojb                    matmul_residual_forward
// and those are the calls it makes (x's row statistics handed from each residual call to the
// layernorm after it, in x_stats: ROW_STATS_FLOATS(B, C) floats), but on CUDA at B = 1 on Hopper
// (head size 64, C <= 1,792): there a layer is two kernels (decode_layers_sm90.cu), the first a
// cluster of CTAs a head that computes its q, k, v, attends and multiplies its output by its
// columns of attprojw, the second clusters that sum the heads' parts into x, go on through the FC
// and multiply their rows of fch by their columns of fcprojw, whose parts the next layer's first
// kernel sums into x (the last layer's FC projection a GEMV kernel); qkv is then not written,
// nor att_scratch used. att and fch hold the last layer's. att_scratch:
// attention_decode_scratch_size bytes; scratch: fused_scratch_size(B, C, 4C). beside: the rows of
// the other parts of the batch whose layers run at the same time (attention_decode_step's).
void decode_layers_step(floatX *x, floatX *qkv, floatX *att, floatX *fch, void *att_scratch,
                        void *scratch, float *x_stats, const DecodeLayerWeights *w, int L,
                        floatX *kcache, floatX *vcache, size_t layer_stride, const int *pos, int B,
                        int beside, int maxT, int NH, int HS);
// How many parts of the batch the decode step's layers at B rows run as at once (gpt2_decode.c):
// part 0, the first B / parts rows, on the main stream and each other on a branch
// (dev_branch_begin), so that one part's attention streams the cache while another's matmuls
// run; 1: one batch. On CUDA where every call of every part is one of this project's kernels
// (cuBLAS(Lt) calls share one workspace and must not run at once: Hopper's wgmma matmuls, 9-64
// rows a part, so from 18 rows to 256), at most DECODE_PARTS in the environment (1 to
// DEV_MAX_BRANCHES + 1, the default), as fused.cu chooses. Always 1 on the CPU.
int decode_step_parts(int B, int C);
// The tied LM head and greedy decoding's choice: logits (N, Vp) = layernorm(inp) @ wte^T,
// argmax (N) as logits_argmax gives it over the first V columns of the rounded logits.
// inp (N, C), lnw, lnb (C), wte (Vp, C). On CUDA its last kernel lets the kernels after it start
// only after its wait (the decode step's end, below).
void lm_head_forward(floatX *logits, int *argmax, void *scratch, const floatX *inp,
                     const floatX *lnw, const floatX *lnb, const floatX *wte, int N, int C, int V,
                     int Vp);
// out[b] = the index of the largest of the first V entries of row b of logits (rows
// row_stride elements apart), the smallest index among equals. out (B) int32 device array.
void logits_argmax(int *out, const floatX *logits, size_t row_stride, int B, int V);
// The decode step's two ends, so that a greedy step needs nothing from the host and one CUDA
// graph holds several steps. A step's position is an int32 in device memory of its own, its
// cell, written before the step's graph starts (the cells of a graph's steps are consecutive
// positions): its kernels read it before their waits, and the cache's rows before it, which
// earlier steps wrote. That holds inside a graph because the LM head (lm_head_forward, and
// decode_step_end's) lets nothing after it start before its own wait, by which every layer of
// its step is done: the next step's kernels start after that.
// decode_embed, a graph's first call (a later step's embedding is the step before's end,
// decode_step_end): out[b, :] = wte[tokens[b], :] + wpe[cell[0], :]; out (B, C), tokens (B)
// int32, read after its wait. `chained`: inside a graph, launched with PDL after the step
// before's last kernel; else (a graph's first step) a plain launch, which starts only once
// everything before it is done, with CUDA graphs or without (CUDA_GRAPHS=0), so that the cells
// the graph before wrote are visible to the kernels after it that read them before their waits.
// decode_advance, after the LM head: the step's tokens (B) go into slot cells[step] % slots of
// ring (host memory the device writes, dev_host_alloc: `slots` slots of B int32). The graph's last
// step (`last`) then writes the next graph's ncells cells, step i's p + 1 + i where p is its own
// position, and lets nothing after it start early, so that all after it (the next graph, the
// host's uploads) see them; the others let the next step start early.
void decode_embed(floatX *out, const int *tokens, const int *cell, const floatX *wte,
                  const floatX *wpe, int B, int C, int chained);
void decode_advance(int *ring, int slots, int *cells, int ncells, int step, int last,
                    const int *tokens, int B);
// decode_step_end, the last call of step `step` of a graph: lm_head_forward(logits, tokens,
// scratch, x, lnfw, lnfb, wte, B, C, V, Vp), then decode_advance(ring, slots, cells, ncells,
// step, last, tokens, B), then, unless `last`, the next step's decode_embed(x, tokens, cells +
// step + 1, wte, wpe, B, C, 1), so that a graph's later steps begin with their layers. On CUDA
// at one row of C = 768 (the LM head on gemv_kernel), with the cells right after the token
// (cells == tokens + 1, as in the KV cache), the three are that one kernel (returns 1; else 0):
// its last block, which has the argmax, writes the ring and the cells or the next step's
// embedding (at position cells[step] + 1), so the step's end is one kernel boundary where it was
// three (docs/PERF.md, thirtieth session). That kernel lets the next start early even at a
// graph's last step, before it writes the cells: safe where decode_advance is not, because the
// next graph's first kernel is decode_embed's plain launch and the host's uploads are copies in
// stream order, each waiting for the whole kernel.
int decode_step_end(floatX *logits, int *tokens, void *scratch, floatX *x, const floatX *lnfw,
                    const floatX *lnfb, const floatX *wte, const floatX *wpe, int *ring, int slots,
                    int *cells, int ncells, int step, int last, int B, int C, int V, int Vp);

// ----------------------------------------------------------------------------------------
// optimizer

// sum of squares of a gradient array, added into *out (a single fp32 on the device)
void grad_sumsq(float *out, const floatX *grads, size_t n);
// (dev_read_float, runtime/device.h, reads it back)

// AdamW step on n parameters, with bias correction for step t (1-based) and global-norm
// clipping read from device memory, so that the host need not wait for the norm: grad_sumsq
// (one fp32) is the gradient's sum of squares over all parameters (grad_sumsq above); with
// norm = sqrt(*grad_sumsq), the gradient is scaled by max_grad_norm / norm when max_grad_norm
// > 0 and norm > max_grad_norm, and when norm is not finite nothing is updated (the caller
// reports it). Weight decay is decoupled: param -= lr * wd * param.
// master: fp32 master weights when floatX is not fp32 (then params is refreshed from it),
// NULL on the CPU where params already are fp32. m, v: fp32 moments (n).
void adamw_update(floatX *params, float *master, const floatX *grads, float *m, float *v,
                  size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  const float *grad_sumsq, float max_grad_norm, int t);

#ifdef __cplusplus
}
#endif
#endif
