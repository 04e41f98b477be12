// layers.h: the C API of every operation GPT-2 is made of, and of the memory it lives in.
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

#ifdef __cplusplus
extern "C" {
#endif

// floatX: the storage type of parameters, activations and their gradients.
#if defined(BACKEND_CUDA)
typedef uint16_t floatX;   // bf16 bits; the kernels reinterpret them as __nv_bfloat16
#define FLOATX_NAME "bf16"
#else
typedef float floatX;
#define FLOATX_NAME "fp32"
#endif

// ----------------------------------------------------------------------------------------
// backend and device memory

const char *backend_name(void);            // "cpu" or "cuda"
// Sets up the backend (CUDA: picks the device, creates cuBLAS handles). Returns 0 on success;
// on failure prints why (e.g. "no CUDA device") and returns -1. Safe to call more than once.
int backend_init(void);
void backend_describe(char *buf, size_t n); // one line: CPU threads, or GPU name and memory
size_t device_memory_total(void);           // bytes the device has (CPU: physical RAM)
size_t device_memory_free(void);            // bytes free on it now (CPU: free physical RAM)
// The device's dense peak rate for floatX matrix products, in FLOP/s, from the vendor's
// datasheet (the training step's MFU is measured against it), and where it comes from: 0 and
// "" for a device the table does not know (and on the CPU, whose rate depends on its cores).
double device_peak_flops(const char **source);
// Bytes the backend allocates for itself, once, in backend_init: CUDA's cuBLAS(Lt) workspace,
// shared by every GEMM of the cuBLAS and cuBLASLt handles (the matmuls and naive attention's
// batched GEMMs), so it never grows and never moves; 0 on the CPU. The memory reports list it.
size_t backend_workspace_size(void);

// dev_malloc never returns NULL: when the device is out of memory it prints how many bytes
// were asked for, how many are free and in use, and the caller's `what`, then exits(1).
void *dev_malloc(size_t bytes, const char *what);
// as dev_malloc, but returns NULL when the device is out of memory, for a caller who can say
// what would fit (gpt2.c's activations)
void *dev_try_malloc(size_t bytes);
void dev_free(void *p);
void dev_memset_zero(void *p, size_t bytes);
void dev_upload(void *dst, const void *src_host, size_t bytes);     // host -> device
void dev_download(void *dst_host, const void *src, size_t bytes);   // device -> host
void dev_copy(void *dst, const void *src, size_t bytes);            // device -> device
void dev_synchronize(void);
size_t dev_bytes_in_use(void);   // bytes currently allocated through dev_malloc
size_t dev_bytes_peak(void);     // most bytes ever allocated at once through dev_malloc

// fp32 <-> floatX conversions between a host float array and a device floatX array
void floatX_upload(floatX *dst, const float *src_host, size_t n);
void floatX_download(float *dst_host, const floatX *src, size_t n);
// fp32 <-> floatX conversion between two device arrays (used for master weights)
void floatX_from_float(floatX *dst, const float *src, size_t n);

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

// out = (inp - mean) * rstd * weight + bias, per row, eps 1e-5
// out (N,C), mean (N) fp32, rstd (N) fp32, inp (N,C), weight (C), bias (C)
void layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp,
                       const floatX *weight, const floatX *bias, int N, int C);
// dinp (N,C) += , dweight (C) +=, dbias (C) +=
// scratch: layernorm_backward_scratch_size(N, C) bytes (CUDA: per-block partial sums of
// dweight and dbias, added in a fixed order)
size_t layernorm_backward_scratch_size(int N, int C);
void layernorm_backward(floatX *dinp, floatX *dweight, floatX *dbias, void *scratch,
                        const floatX *dout, const floatX *inp, const floatX *weight,
                        const float *mean, const float *rstd, int N, int C);

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

// GELU, tanh approximation: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// out (n), inp (n)
void gelu_forward(floatX *out, const floatX *inp, size_t n);
// dinp (n) = dout * gelu'(inp); dinp may alias dout
void gelu_backward(floatX *dinp, const floatX *inp, const floatX *dout, size_t n);

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

// Attention of one new query per sequence against a KV cache, for generation (causal by
// construction: the cache holds positions 0..len-1, the new token's own k, v included).
// out (B, NH, HS), q (B, NH, HS); kcache, vcache (B, maxT, NH, HS), of which the first len
// positions are read. Scale 1/sqrt(HS). One kernel for both attention backends: it is the
// decode step of either, and flash-decoding on the GPU (the cache split across blocks).
// scratch: attention_decode_scratch_size(B, maxT, NH, HS) bytes, enough for every len <=
// maxT (CUDA: the partial results of the splits of the cache)
size_t attention_decode_scratch_size(int B, int maxT, int NH, int HS);
void attention_decode(floatX *out, void *scratch, const floatX *q, const floatX *kcache,
                      const floatX *vcache, int B, int len, int maxT, int NH, int HS);

// The rest of generation's layer calls (layers/decode_attention.*, argmax.*, graph.*). What
// changes from one decode step to the next (the position) is read from device memory, so that
// the step is the same sequence of launches every time and CUDA can replay it as one graph.
//
// attention_decode with len read from device memory (one int32): the work is laid out for
// maxT positions and the parts past len return at once.
void attention_decode_dev(floatX *out, void *scratch, const floatX *q, const floatX *kcache,
                          const floatX *vcache, const int *len, int B, int maxT, int NH, int HS);
// Splits the qkv of T new positions: their keys and values go into the KV cache at positions
// pos .. pos+T-1 (pos: one int32 in device memory), their queries, when q is not NULL, to q.
// kcache, vcache (B, maxT, NH, HS); q (B, T, NH, HS) or NULL; qkv (B, T, 3, NH, HS).
void kv_cache_store(floatX *kcache, floatX *vcache, floatX *q, const floatX *qkv,
                    const int *pos, int B, int T, int maxT, int NH, int HS);
// out[b] = the index of the largest of the first V entries of row b of logits (rows
// row_stride elements apart), the smallest index among equals. out (B) int32 device array.
void logits_argmax(int *out, const floatX *logits, size_t row_stride, int B, int V);
// Runs fn(ctx), which must launch the same work with the same arguments at every call. On
// CUDA the first call runs it (lazy set-up such as cuBLASLt plans happens then), the second
// captures it into a CUDA graph on cuda_stream, and later calls launch that graph in one go;
// CUDA_GRAPHS=0 in the environment turns graphs off. On the CPU it calls fn. *graph starts
// NULL; device_graph_free(NULL) does nothing.
typedef struct DeviceGraph DeviceGraph;
void device_graph_run(DeviceGraph **graph, void (*fn)(void *ctx), void *ctx);
void device_graph_free(DeviceGraph *graph);

// ----------------------------------------------------------------------------------------
// optimizer

// sum of squares of a gradient array, added into *out (a single fp32 on the device)
void grad_sumsq(float *out, const floatX *grads, size_t n);
// read back the fp32 value written by grad_sumsq
float dev_read_float(const float *p);

// AdamW step on n parameters, with bias correction for step t (1-based) and gradient scale
// grad_scale (global-norm clipping). Weight decay is decoupled: param -= lr * wd * param.
// master: fp32 master weights when floatX is not fp32 (then params is refreshed from it),
// NULL on the CPU where params already are fp32. m, v: fp32 moments (n).
void adamw_update(floatX *params, float *master, const floatX *grads, float *m, float *v,
                  size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, int t);

#ifdef __cplusplus
}
#endif
#endif
