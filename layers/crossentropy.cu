// crossentropy.cu: the fused classifier: softmax over the first V of Vp columns of each row of
// logits, the cross-entropy loss against the target, and (when dloss != 0) the gradient
// dloss * (softmax - onehot(target)) written in place over the logits, zero in the padding.
//
// One block per row. Pass 1 reads the row once, with an online (running max, running sum of
// exponentials) per thread, combined across the block. Pass 2 writes the gradient; it reads
// the row again from shared memory, where pass 1 left each thread's own vectors (a row of
// GPT-2's 50304 bf16 is 98 KiB, two blocks per SM), so the logits cross DRAM once each way.
#include "../runtime/cuda_common.cuh"
#include "layers.h"

#include <math.h>

enum { CE_THREADS = 512, CE_UNROLL = 4 };

struct MaxSum {
    float max, sum;   // running maximum and sum of exp(x - max)
};

__device__ __forceinline__ MaxSum maxsum_combine(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.max, b.max);
    if (m == -INFINITY) return a;   // both empty
    return MaxSum{m, a.sum * __expf(a.max - m) + b.sum * __expf(b.max - m)};
}

// STAGE: keep the row in shared memory between the passes (dynamic shared memory of Vp bf16)
template <int VEC, bool STAGE>
__global__ void __launch_bounds__(CE_THREADS)
    crossentropy_kernel(bf16 *logits, float *__restrict__ losses, const int *__restrict__ targets,
                        int V, int Vp, float dloss) {
    extern __shared__ int4 staged_raw[];
    bf16 *staged = reinterpret_cast<bf16 *>(staged_raw);
    __shared__ MaxSum warp_results[CE_THREADS / 32];
    __shared__ MaxSum row_result;

    bf16 *x = logits + (size_t)blockIdx.x * Vp;
    const int target = targets[blockIdx.x];
    // the target's logit: from the staged row after pass 1 (a load here, dependent on the target's,
    // held warp 0's first vectors back by a DRAM round trip, about 0.17 ms of a d12 B=64 step);
    // unstaged, read here, before pass 2 writes over it
    float target_logit = 0.0f;
    if (!STAGE && threadIdx.x == 0) target_logit = __bfloat162float(x[target]);

    // CE_UNROLL vectors per round, all loaded before any is used, to keep loads in flight
    MaxSum ms{-INFINITY, 0.0f};
    for (int base = threadIdx.x * VEC; base < V; base += CE_THREADS * VEC * CE_UNROLL) {
        typename BF16Raw<VEC>::type raw[CE_UNROLL];
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++) {
            const int c0 = base + u * CE_THREADS * VEC;
            if (c0 < V) raw[u] = load_bf16_raw<VEC>(x + c0);
        }
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++) {
            const int c0 = base + u * CE_THREADS * VEC;
            if (c0 >= V) break;
            if constexpr (STAGE)
                *reinterpret_cast<typename BF16Raw<VEC>::type *>(staged + c0) = raw[u];
            float v[VEC];
            unpack_bf16<VEC>(v, raw[u]);
            float chunk_max = -INFINITY;
#pragma unroll
            for (int k = 0; k < VEC; k++)
                if (c0 + k < V) chunk_max = fmaxf(chunk_max, v[k]);
            const float m = fmaxf(ms.max, chunk_max);
            float s = ms.sum * __expf(ms.max - m);
#pragma unroll
            for (int k = 0; k < VEC; k++)
                if (c0 + k < V) s += __expf(v[k] - m);
            ms = MaxSum{m, s};
        }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        MaxSum other{__shfl_xor_sync(0xffffffffu, ms.max, offset),
                     __shfl_xor_sync(0xffffffffu, ms.sum, offset)};
        ms = maxsum_combine(ms, other);
    }
    if (threadIdx.x % 32 == 0) warp_results[threadIdx.x / 32] = ms;
    __syncthreads();
    if (threadIdx.x == 0) {
        if (STAGE) target_logit = __bfloat162float(staged[target]);
        MaxSum total = warp_results[0];
        for (int w = 1; w < CE_THREADS / 32; w++) total = maxsum_combine(total, warp_results[w]);
        row_result = total;
        losses[blockIdx.x] = total.max + __logf(total.sum) - target_logit;
    }
    __syncthreads();
    if (dloss == 0.0f) return;

    const float row_max = row_result.max, inv_sum = 1.0f / row_result.sum;
    for (int c0 = threadIdx.x * VEC; c0 < Vp; c0 += CE_THREADS * VEC) {
        float g[VEC];
        if (c0 < V) {
            float v[VEC];
            load_bf16<VEC>(v, STAGE ? staged + c0 : x + c0);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                const int c = c0 + k;
                const float p = __expf(v[k] - row_max) * inv_sum;
                g[k] = c < V ? dloss * (p - (c == target ? 1.0f : 0.0f)) : 0.0f;
            }
        } else {
#pragma unroll
            for (int k = 0; k < VEC; k++) g[k] = 0.0f;
        }
        store_bf16<VEC>(x + c0, g);
    }
}

template <int VEC>
static void crossentropy_launch(floatX *logits, float *losses, const int *targets, int N, int V,
                                int Vp, float dloss) {
    const size_t stage_bytes = ((size_t)Vp * sizeof(bf16) + 15) / 16 * 16;
    static int max_smem = -1;
    if (max_smem < 0) CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    const size_t static_bytes = (CE_THREADS / 32 + 1) * sizeof(MaxSum);
    if (dloss != 0.0f && stage_bytes + static_bytes <= (size_t)max_smem) {
        CUDA_CHECK(cudaFuncSetAttribute(crossentropy_kernel<VEC, true>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)stage_bytes));
        crossentropy_kernel<VEC, true><<<N, CE_THREADS, stage_bytes, cuda_stream>>>(
            BF(logits), losses, targets, V, Vp, dloss);
    } else {
        crossentropy_kernel<VEC, false><<<N, CE_THREADS, 0, cuda_stream>>>(
            BF(logits), losses, targets, V, Vp, dloss);
    }
    LAUNCH_CHECK();
}

void crossentropy_forward_backward(floatX *logits, float *losses, const int *targets, int N,
                                   int V, int Vp, float dloss) {
    if (N == 0) return;
    if (Vp % 8 == 0 && is_aligned16(logits))
        crossentropy_launch<8>(logits, losses, targets, N, V, Vp, dloss);
    else
        crossentropy_launch<1>(logits, losses, targets, N, V, Vp, dloss);
}

// One block: 65,536 losses (B=64, T=1024) are 256 KB, a few microseconds for one SM, and one
// block sums in the same order every run without a second pass. Double, as the host summed.
enum { LOSS_MEAN_THREADS = 1024 };

__global__ void __launch_bounds__(LOSS_MEAN_THREADS)
    loss_mean_kernel(float *mean, float *sum, const float *__restrict__ losses, int N) {
    __shared__ double warp_sums[LOSS_MEAN_THREADS / 32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < N; i += LOSS_MEAN_THREADS) acc += losses[i];
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x != 0) return;
    double total = 0.0;
    for (int w = 0; w < LOSS_MEAN_THREADS / 32; w++) total += warp_sums[w];
    const float m = (float)(total / N);
    *mean = m;
    if (sum) *sum += m;
}

void crossentropy_loss_mean(float *mean, float *sum, const float *losses, int N) {
    loss_mean_kernel<<<1, LOSS_MEAN_THREADS, 0, cuda_stream>>>(mean, sum, losses, N);
    LAUNCH_CHECK();
}
