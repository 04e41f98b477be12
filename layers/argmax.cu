// argmax.cu: greedy decoding's choice, the largest logit of each row, so that a greedy step
// brings back B ints instead of B rows of logits. One block per row; each thread scans the row
// 8 entries (one 16-byte load) at a time, kBatch loads in flight before it compares any (at
// GPT-2's 50,257 a thread's 7 loads are one round trip to L2, where the GEMM just left the
// logits, not 7 after one another), then the block reduces (value, index) pairs, the smaller
// index winning among equal values (as on the CPU).
#include <float.h>

#include "../runtime/cuda_common.cuh"
#include "argmax.cuh"
#include "layers.h"

namespace {

constexpr int kArgmaxThreads = 1024;
constexpr int kBatch = 8;   // loads of a thread in flight at once

template <int VEC>
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(int *__restrict__ out, const bf16 *__restrict__ logits, size_t row_stride, int V) {
    // launched with PDL (launch_pdl): in the decode step it follows the LM head's GEMM, and its
    // launch then overlaps that GEMM's last blocks; the logits are read after the wait. The
    // kernels after it start only after its wait (it ends the LM head: layers.h)
    pdl_wait();
    pdl_launch_dependents();
    const bf16 *row = logits + (size_t)blockIdx.x * row_stride;
    float best_v = -FLT_MAX;
    int best_i = 0x7fffffff;
    typedef typename BF16Raw<VEC>::type Raw;
    constexpr int kStride = kArgmaxThreads * VEC;   // between a thread's loads
    for (int base = threadIdx.x * VEC; base < V; base += kBatch * kStride) {
        Raw raw[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; b++) {
            const int i0 = base + b * kStride;
            if (i0 + VEC <= V) raw[b] = load_bf16_raw<VEC>(row + i0);
        }
#pragma unroll
        for (int b = 0; b < kBatch; b++) {
            const int i0 = base + b * kStride;
            if (i0 >= V) break;
            float x[VEC];
            if (i0 + VEC <= V) {
                unpack_bf16<VEC>(x, raw[b]);
            } else {   // the row's tail
#pragma unroll
                for (int k = 0; k < VEC; k++) x[k] = i0 + k < V ? __bfloat162float(row[i0 + k]) : -FLT_MAX;
            }
#pragma unroll
            for (int k = 0; k < VEC; k++)
                if (better(x[k], i0 + k, best_v, best_i)) { best_v = x[k]; best_i = i0 + k; }
        }
    }
    warp_best(best_v, best_i, 1);
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
        launch_pdl(argmax_kernel<8>, B, kArgmaxThreads, 0, out, CBF(logits), row_stride, V);
    else
        launch_pdl(argmax_kernel<1>, B, kArgmaxThreads, 0, out, CBF(logits), row_stride, V);
    LAUNCH_CHECK();
}

// One block. Launched with PDL, so that it starts while the LM head ends. Within a graph it
// lets the next step start early: the next step's kernels read before their waits only their
// cells, written before the graph, and the cache's rows that the steps before wrote, done by
// then (layers.h). The graph's last step lets nothing after it start early (no
// pdl_launch_dependents), so the cells it writes are final before any kernel after it reads
// them before its wait (the next graph's first kernel is a plain launch, decode_embed: layers.h).
// At batch 1 of GPT-2 124M's width the LM head's kernel does this itself (decode_step_end).
__global__ void decode_advance_kernel(int *__restrict__ ring, int slots, int *__restrict__ cells,
                                      int ncells, int step, int last, const int *__restrict__ tokens,
                                      int B) {
    if (!last) pdl_launch_dependents();
    pdl_wait();
    const int p = cells[step];
    int *slot = ring + (size_t)(p % slots) * B;
    for (int b = threadIdx.x; b < B; b += blockDim.x) slot[b] = tokens[b];
    if (!last) return;
    __syncthreads();   // every thread has read its cell before the cells change
    for (int i = threadIdx.x; i < ncells; i += blockDim.x) cells[i] = p + 1 + i;
}

void decode_advance(int *ring, int slots, int *cells, int ncells, int step, int last,
                    const int *tokens, int B) {
    launch_pdl(decode_advance_kernel, 1, 256, 0, ring, slots, cells, ncells, step, last, tokens, B);
    LAUNCH_CHECK();
}
