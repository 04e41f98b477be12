// decode_gemm_sm90.h: the decode step's matmuls at 9 to 64 rows on Hopper (decode_gemm_sm90.cu,
// built for sm_90a), called by layers/fused.cu.
#pragma once

#include "layers.h"

// true on a device of compute capability 9.0 (H100, H200) unless the environment says
// DECODE_GEMM_SM90=0 (to run the other paths there, e.g. to compare); asked once
bool decode_gemm_sm90_enabled();
// the layernorm is folded in (and residual calls leave row statistics) at N rows: enabled, N <= 32
bool decode_gemm_sm90_folds_layernorm(int N);
// the rows of the tiles a call of N rows computes on (wgmma's N: 16, 32 or 64; rows past N are
// zeros)
int decode_gemm_sm90_tile_rows(int N);
// decode_gemm_sm90 takes calls of this shape (given pointers that fit): enabled, N <= 64, K and
// OC multiples of 64 with a split of K that fits
bool decode_gemm_sm90_shape_fits(int N, int K, int OC);
// decode_gemm_sm90 takes this call: enabled, N <= 64, K and OC multiples of 64 with a split of K
// that fits, inp, weight, lnw, lnb 16-byte aligned, bias, out 4-byte; a layernorm (lnw, lnb and
// stats_in all given or none) where it folds, over at most 2,048 columns
bool decode_gemm_sm90_fits(int N, int K, int OC, const void *inp, const void *weight,
                           const void *bias, const void *out, const void *lnw, const void *lnb,
                           const float *stats_in);
// out (N, OC) = x (N, K) weight^T + bias; then GELU (gelu), or added to out (residual); the
// product rounded to bf16 before either, as the plain layers do. x = inp, or with lnw, lnb (K)
// layernorm(inp), its rows' statistics stats_in as a residual call left them in stats_out: (N, K /
// 64) pairs (mean, sum of squared deviations) of 64-column pieces. stats_out (residual only,
// where it folds, or NULL): those of the output rows, (N, OC / 64) pairs. Dies where the call
// does not fit.
void decode_gemm_sm90(floatX *out, const floatX *inp, const floatX *lnw, const floatX *lnb,
                      const float *stats_in, const floatX *weight, const floatX *bias, int N, int K,
                      int OC, int gelu, int residual, float *stats_out);
// the LM head at 9-64 rows (decode_lm_head_kernel): logits (N, Vp) = inp (N, K) wte^T, rounded to
// bf16, and argmax (N) over each row's first V logits, as logits_argmax gives it. Takes the call
// where enabled, 9 <= N <= 64, K and Vp multiples of 64, inp (K / 64 boxes of N rows) fits in
// shared memory beside the ring (K <= 768 at 33-64 rows, 1,600 at 17-32), inp and wte 16-byte
// aligned.
bool decode_lm_head_sm90_fits(int N, int K, int Vp, const void *inp, const void *wte, const void *logits);
// counter (one unsigned) and keys (N, 8-byte aligned): zeros before the first call, and left so
// for the next. Dies where the call does not fit.
void decode_lm_head_sm90(floatX *logits, int *argmax, unsigned *counter, unsigned long long *keys,
                         const floatX *inp, const floatX *wte, int N, int K, int V, int Vp);
