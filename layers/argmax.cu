// argmax.cu: greedy decoding's choice, the largest logit of each row, so that a greedy step
// brings back B ints instead of B rows of logits. One block per row; each thread scans the row
// 8 entries (one 16-byte load) at a time, then the block reduces (value, index) pairs, the
// smaller index winning among equal values (as on the CPU).
#include <float.h>

#include "../runtime/cuda_common.cuh"
#include "layers.h"

namespace {

constexpr int kArgmaxThreads = 1024;

// (v, i) is better than (best_v, best_i): larger, or equal and earlier
__device__ __forceinline__ bool better(float v, int i, float best_v, int best_i) {
    return v > best_v || (v == best_v && i < best_i);
}

template <int VEC>
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(int *__restrict__ out, const bf16 *__restrict__ logits, size_t row_stride, int V) {
    const bf16 *row = logits + (size_t)blockIdx.x * row_stride;
    float best_v = -FLT_MAX;
    int best_i = 0x7fffffff;
    for (int i0 = threadIdx.x * VEC; i0 < V; i0 += kArgmaxThreads * VEC) {
        float x[VEC];
        if (i0 + VEC <= V) {
            load_bf16<VEC>(x, row + i0);
        } else {   // the row's tail
#pragma unroll
            for (int k = 0; k < VEC; k++) x[k] = i0 + k < V ? __bfloat162float(row[i0 + k]) : -FLT_MAX;
        }
#pragma unroll
        for (int k = 0; k < VEC; k++)
            if (better(x[k], i0 + k, best_v, best_i)) { best_v = x[k]; best_i = i0 + k; }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, best_v, offset);
        const int i = __shfl_xor_sync(0xffffffffu, best_i, offset);
        if (better(v, i, best_v, best_i)) { best_v = v; best_i = i; }
    }
    __shared__ float warp_v[kArgmaxThreads / 32];
    __shared__ int warp_i[kArgmaxThreads / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) { warp_v[warp] = best_v; warp_i[warp] = best_i; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kArgmaxThreads / 32; w++)
            if (better(warp_v[w], warp_i[w], best_v, best_i)) { best_v = warp_v[w]; best_i = warp_i[w]; }
        out[blockIdx.x] = best_i < V ? best_i : 0;   // a row of NaNs: index 0
    }
}

}  // namespace

void logits_argmax(int *out, const floatX *logits, size_t row_stride, int B, int V) {
    if (B == 0) return;
    if (row_stride % 8 == 0 && is_aligned16(logits))
        argmax_kernel<8><<<B, kArgmaxThreads, 0, cuda_stream>>>(out, CBF(logits), row_stride, V);
    else
        argmax_kernel<1><<<B, kArgmaxThreads, 0, cuda_stream>>>(out, CBF(logits), row_stride, V);
    LAUNCH_CHECK();
}
