// gemv.cuh: the decode step's GEMV (fused.cu describes it): its arguments and one block's
// work, shared by the per-call kernels (fused.cu) and the persistent decode step
// (decode_step.cu), so that both compute every output the same way, bit for bit.
#pragma once

#include <float.h>

#include "../runtime/cuda_common.cuh"
#include "gelu.cuh"
#include "layers.h"

constexpr int kThreads = 128, kWarps = kThreads / 32;
constexpr int kLoadsPerLane = 12;          // R * KC: 16-byte weight loads in flight per lane
constexpr int kMaxK = 32 * 8 * 12;         // 3072: the largest K of one pass (KC = 12)
constexpr int kLogitsBlocksPerSM = 2;      // the LM head's grid-stride loop: blocks per SM

enum Epilogue { kBias, kBiasGelu, kBiasResidual, kLogits };

struct GemvArgs {
    bf16 *out;                 // (N, OC); for kBiasResidual the residual, added to in place
    const bf16 *inp;           // (N, K)
    const bf16 *lnw, *lnb;     // (K): the layernorm of inp, for the LN kernels
    const bf16 *weight;        // (OC, K)
    const bf16 *bias;          // (OC); null for kLogits
    float *best_v;             // kLogits: (gridDim.x, N) each block's best logit per row
    int *best_i;               //          and its index
    unsigned *counter;         //          blocks done; reset to 0 by the last
    int *argmax;               //          (N) the result
    int N, K, OC, V, epilogue;
};

// (v, i) is better than (best_v, best_i): larger, or equal and earlier (as logits_argmax)
static __device__ __forceinline__ bool better(float v, int i, float best_v, int best_i) {
    return v > best_v || (v == best_v && i < best_i);
}

static __device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// One block's share of a GEMV call, over the grid this block is part of (blockIdx.x of
// gridDim.x): the body of gemv_kernel (fused.cu) and of each GEMV phase of the persistent
// decode step (decode_step.cu). wait() is called once, after this block's first weights are
// in flight and before anything another kernel or block writes is read: PDL's wait in the
// kernel, the grid barrier before the phase in the persistent step.
// NR: input rows rounded up to a power of two (N <= NR); KC: 16-byte chunks of a weight row
// per lane; LN: layernorm the input rows first. Dynamic shared memory: N * K bf16.
template <int NR, int KC, bool LN, typename Wait>
__device__ __forceinline__ void gemv_block(const GemvArgs &a, Wait wait) {
    constexpr int R = kLoadsPerLane / KC;   // weight rows per warp
    static_assert(R * NR <= 32, "one lane per output of a warp's tile");
    extern __shared__ int4 xs[];            // (N, K/8) the input rows, 8 bf16 a chunk
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int N = a.N, K = a.K, OC = a.OC, nchunks = K / 8;
    const int tile_stride = gridDim.x * kWarps * R;
    int row0 = (blockIdx.x * kWarps + warp) * R;   // this warp's first tile of R rows

    // ---- before the wait: this warp's first tile of weights, its bias, the layernorm's
    // weights (none depends on the kernel before)
    int4 w[R][KC];
    float bias[R];
    auto load_tile = [&](int first_row) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int row = first_row + r;
#pragma unroll
            for (int j = 0; j < KC; j++) {
                const int c = j * 32 + lane;
                w[r][j] = make_int4(0, 0, 0, 0);
                if (row < OC && c < nchunks) w[r][j] = load_streaming(a.weight + (size_t)row * K + c * 8);
            }
            bias[r] = a.bias && row < OC ? __bfloat162float(a.bias[row]) : 0.0f;
        }
    };
    load_tile(row0);
    // the layernorm's weights too at K <= 768 (GPT-2 124M); at KC = 12 they would not fit
    // beside the matrix's in registers, and are read where they are used
    constexpr bool kLnEarly = LN && KC <= 3;
    int4 lnw[KC], lnb[KC];
#pragma unroll
    for (int j = 0; j < KC; j++) {
        const int c = j * 32 + lane;
        lnw[j] = lnb[j] = make_int4(0, 0, 0, 0);
        if (kLnEarly && c < nchunks) {
            lnw[j] = *reinterpret_cast<const int4 *>(a.lnw + c * 8);
            lnb[j] = *reinterpret_cast<const int4 *>(a.lnb + c * 8);
        }
    }
    wait();

    // ---- the input rows into shared memory (through L2, ldcg: another kernel or block of
    // this kernel just wrote them, and L1 is not coherent across SMs)
    for (int i = threadIdx.x; i < N * nchunks; i += kThreads)
        xs[i] = __ldcg(reinterpret_cast<const int4 *>(a.inp) + i);
    __syncthreads();
    if (LN) {   // warp n normalises row n in place, as layernorm_forward_kernel computes it
        for (int n = warp; n < N; n += kWarps) {
            int4 *x = xs + n * nchunks;
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < KC; j++) {
                const int c = j * 32 + lane;
                if (c >= nchunks) break;
                float xv[8];
                unpack_bf16<8>(xv, x[c]);
#pragma unroll
                for (int k = 0; k < 8; k++) sum += xv[k];
            }
            const float m = warp_allreduce_sum(sum) / K;
            float sumsq = 0.0f;
#pragma unroll
            for (int j = 0; j < KC; j++) {
                const int c = j * 32 + lane;
                if (c >= nchunks) break;
                float xv[8];
                unpack_bf16<8>(xv, x[c]);
#pragma unroll
                for (int k = 0; k < 8; k++) sumsq += (xv[k] - m) * (xv[k] - m);
            }
            const float s = rsqrtf(warp_allreduce_sum(sumsq) / K + LAYERNORM_EPS);
#pragma unroll
            for (int j = 0; j < KC; j++) {
                const int c = j * 32 + lane;
                if (c >= nchunks) break;
                float xv[8], wv[8], bv[8], y[8];
                unpack_bf16<8>(xv, x[c]);
                if (kLnEarly) {
                    unpack_bf16<8>(wv, lnw[j]);
                    unpack_bf16<8>(bv, lnb[j]);
                } else {
                    load_bf16<8>(wv, a.lnw + c * 8);
                    load_bf16<8>(bv, a.lnb + c * 8);
                }
#pragma unroll
                for (int k = 0; k < 8; k++) y[k] = (xv[k] - m) * s * wv[k] + bv[k];
                store_bf16<8>(reinterpret_cast<bf16 *>(&x[c]), y);
            }
        }
        __syncthreads();
    }

    // ---- the tiles: this lane's output is (row0 + r, n) with lane = r * NR + n
    const int my_r = lane / NR, my_n = lane % NR;
    const bool writes = my_r < R && my_n < N;
    float best_v = -FLT_MAX;   // kLogits: this lane's best over its outputs
    int best_i = 0x7fffffff;
    for (; row0 < OC; row0 += tile_stride) {   // warp-uniform
        const int my_row = row0 + my_r;
        // the residual this lane adds to, in flight during the products
        float residual = 0.0f;
        if (a.epilogue == kBiasResidual && writes && my_row < OC)
            residual = __bfloat162float(__ldcg(a.out + (size_t)my_n * OC + my_row));
        float acc[R][NR];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int n = 0; n < NR; n++) acc[r][n] = 0.0f;
#pragma unroll
        for (int j = 0; j < KC; j++) {
            const int c = j * 32 + lane;
            if (c >= nchunks) break;
            float wf[R][8];
#pragma unroll
            for (int r = 0; r < R; r++) unpack_bf16<8>(wf[r], w[r][j]);
#pragma unroll
            for (int n = 0; n < NR; n++) {
                if (n >= N) break;
                float xv[8];
                unpack_bf16<8>(xv, xs[n * nchunks + c]);
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int k = 0; k < 8; k++) acc[r][n] += wf[r][k] * xv[k];
            }
        }
        // the next tile's weights in flight while this one is reduced and written
        const float tile_bias = [&] {
            float b = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++)
                if (r == my_r) b = bias[r];
            return b;
        }();
        if (row0 + tile_stride < OC) load_tile(row0 + tile_stride);

        float v = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int n = 0; n < NR; n++) {
                const float sum = warp_allreduce_sum(acc[r][n]);
                if (r == my_r && n == my_n) v = sum;
            }
        if (!writes || my_row >= OC) continue;
        bf16 *out = a.out + (size_t)my_n * OC + my_row;
        switch (a.epilogue) {
        case kBias: *out = __float2bfloat16_rn(v + tile_bias); break;
        case kBiasGelu: *out = __float2bfloat16_rn(gelu_value(round_bf16(v + tile_bias))); break;
        case kBiasResidual: *out = __float2bfloat16_rn(residual + round_bf16(v + tile_bias)); break;
        case kLogits: {
            const bf16 logit = __float2bfloat16_rn(v);
            *out = logit;
            if (my_row < a.V && better(__bfloat162float(logit), my_row, best_v, best_i)) {
                best_v = __bfloat162float(logit);
                best_i = my_row;
            }
        }
        }
    }
    if (a.epilogue != kLogits) return;

    // ---- argmax: the warp's best per input row (lanes n, n + NR, ... hold row n), then the
    // block's, then, in the last block to finish, the grid's
#pragma unroll
    for (int offset = 16; offset >= NR; offset >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, best_v, offset);
        const int i = __shfl_xor_sync(0xffffffffu, best_i, offset);
        if (better(v, i, best_v, best_i)) { best_v = v; best_i = i; }
    }
    __shared__ float warp_v[kWarps][NR];
    __shared__ int warp_i[kWarps][NR];
    __shared__ bool last;
    if (lane < NR) { warp_v[warp][lane] = best_v; warp_i[warp][lane] = best_i; }
    __syncthreads();
    if (threadIdx.x < N) {
        const int n = threadIdx.x;
        float bv = warp_v[0][n];
        int bi = warp_i[0][n];
        for (int k = 1; k < kWarps; k++)
            if (better(warp_v[k][n], warp_i[k][n], bv, bi)) { bv = warp_v[k][n]; bi = warp_i[k][n]; }
        a.best_v[blockIdx.x * N + n] = bv;
        a.best_i[blockIdx.x * N + n] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {   // bests visible before the count; the last block fences again
        __threadfence();
        last = atomicAdd(a.counter, 1u) == gridDim.x - 1;
        if (last) {
            *a.counter = 0;   // for the next call (stream-ordered after this kernel)
            __threadfence();
        }
    }
    __syncthreads();
    if (!last || threadIdx.x >= N) return;
    const int n = threadIdx.x;
    float bv = -FLT_MAX;
    int bi = 0x7fffffff;
    for (unsigned blk = 0; blk < gridDim.x; blk++) {
        const float v = __ldcg(a.best_v + blk * N + n);
        const int i = __ldcg(a.best_i + blk * N + n);
        if (better(v, i, bv, bi)) { bv = v; bi = i; }
    }
    a.argmax[n] = bi < a.V ? bi : 0;   // rows of NaNs: index 0, as logits_argmax
}


// the fused path is taken for a shape it handles, unless DECODE_FUSED=0 (fused.cu)
bool fused_enabled(void);

// ---- the calls' arguments, one builder per kind of call (host: fused.cu; device: the
// persistent step builds each layer's)

// out (N, OC) = layernorm(inp) @ weight^T + bias [then GELU]
__host__ __device__ inline GemvArgs layernorm_matmul_args(bf16 *out, const bf16 *inp, const bf16 *lnw,
                                                          const bf16 *lnb, const bf16 *weight,
                                                          const bf16 *bias, int N, int K, int OC,
                                                          bool gelu) {
    GemvArgs a = {};
    a.out = out;
    a.inp = inp;
    a.lnw = lnw;
    a.lnb = lnb;
    a.weight = weight;
    a.bias = bias;
    a.N = N;
    a.K = K;
    a.OC = OC;
    a.epilogue = gelu ? kBiasGelu : kBias;
    return a;
}

// residual (N, OC) += inp @ weight^T + bias
__host__ __device__ inline GemvArgs matmul_residual_args(bf16 *residual, const bf16 *inp,
                                                         const bf16 *weight, const bf16 *bias,
                                                         int N, int K, int OC) {
    GemvArgs a = {};
    a.out = residual;
    a.inp = inp;
    a.weight = weight;
    a.bias = bias;
    a.N = N;
    a.K = K;
    a.OC = OC;
    a.epilogue = kBiasResidual;
    return a;
}

// logits (N, Vp) = layernorm(inp) @ wte^T, argmax (N); the counter and the per-block bests
// (for max_blocks blocks at most) in scratch: the counter in its first 4 bytes, the bests from
// byte 256 on
__host__ __device__ inline GemvArgs lm_head_args(bf16 *logits, int *argmax, void *scratch,
                                                 const bf16 *inp, const bf16 *lnw, const bf16 *lnb,
                                                 const bf16 *wte, int N, int K, int V, int Vp,
                                                 int max_blocks) {
    GemvArgs a = {};
    a.out = logits;
    a.inp = inp;
    a.lnw = lnw;
    a.lnb = lnb;
    a.weight = wte;
    a.counter = (unsigned *)scratch;
    a.best_v = (float *)((char *)scratch + 256);
    a.best_i = (int *)(a.best_v + (size_t)max_blocks * N);
    a.argmax = argmax;
    a.N = N;
    a.K = K;
    a.OC = Vp;
    a.V = V;
    a.epilogue = kLogits;
    return a;
}

// 16-byte chunks per lane of a weight row of K columns: 3 up to K = 768, else 12 (K <= kMaxK)
__host__ __device__ inline int gemv_chunks(int K) { return K <= 32 * 8 * 3 ? 3 : 12; }
