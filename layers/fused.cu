// fused.cu: the decode step's fused calls on CUDA (layers.h): at one row, a GEMV kernel each
// (gemv_kernel); at 2 to FUSED_MAX_ROWS rows, the same call with its products on tensor cores
// (gemv_tc_kernel); above it, up to 64 rows on Hopper, decode_gemm_sm90.cu's wgmma kernel (up to
// 32 rows the layernorm folded in, from the row statistics the residual call before left; a
// kernel before it above, or where there are none); elsewhere the plain layers (fused_plain.h:
// cuBLASLt's GEMMs).
//
// Why a GEMV of its own: at batch 1 a decode step reads 249 MB of weights (60 us at the H200's
// ~4.2 TB/s) but took 504 us as some 150 kernels of a few microseconds each. Each matrix of
// GPT-2 124M is 1.2-4.7 MB: less than the bytes the GPU must have in flight to reach full
// bandwidth (4.2 TB/s x ~0.7 us of DRAM latency, ~3 MB), so one such kernel is bound by a few
// memory latencies and its launch, not by bandwidth. Hence:
//   - each kernel is the whole of its layers (layernorm + matmul + bias [+ GELU] [+ residual]),
//     so a layer is four of these and the attention (decode_attention.cu);
//   - every lane issues all its weight loads at once (12 loads of 16 bytes), so the whole matrix
//     is in flight in one round trip;
//   - those loads are issued before pdl_wait (the weights do not depend on the kernel before):
//     with programmatic dependent launch (runtime/cuda_common.cuh) the weights stream while
//     the previous kernel finishes, and the launch gap is hidden.
// gemv_kernel's block: 4 warps; warp w owns R consecutive weight rows (OC), its lanes split the
// K columns in 16-byte chunks (chunk c = j * 32 + lane, j < KC), so a warp reads each row with
// fully coalesced 512-byte loads. The input row is staged in shared memory as bf16 (K),
// layer-normed there when the call has a layernorm. fp32 FMAs, then the warp's R sums reduced
// together (warp_reduce_scatter: R - 1 + 5 - log2(R) shuffles), and one lane per output writes
// it. R * KC = 12 keeps the weight registers at 48: KC = 3 (K <= 768), R = 4; KC = 12 (K <=
// 3072), R = 1. Larger K goes the plain way. gemv_tc_kernel's plan is at its definition.
//
// Numerics: the layernorm is layernorm.cu's computation in the same order (the same bits);
// the matmul output is rounded to bf16 before GELU and before the residual add, as the plain
// layers round it; only the matmul's summation order differs from cuBLASLt's (and between the
// one-row and the tensor-core kernels).
//
// At one row on Hopper a layer is two kernels of its own (decode_layers_step: decode_layers_sm90.cu,
// a cluster of CTAs a head for layernorm, QKV, attention and the projection's part of the head,
// then clusters for the parts' sum, layernorm, FC and the FC projection's parts).
//
// The LM head (Vp = 50304 rows of wte) is the same kernel with a grid-stride loop over row
// tiles, at K = 768 with R = 8; greedy decoding's argmax rides in its epilogue: each block keeps
// the best (value, index) per input row, the last block to finish (a counter in the scratch
// elects it) reduces the blocks' bests, so greedy decoding needs no separate argmax kernel. At
// 9-64 rows on Hopper the LM head is decode_gemm_sm90.cu's decode_lm_head_kernel, its argmax in
// its epilogue too.
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "../attention/flash_tile.cuh"   // mma_bf16: its PTX, written once
#include "../runtime/cuda_common.cuh"
#include "argmax.cuh"
#include "decode_layers_sm90.h"
#include "decode_gemm_sm90.h"
#include "fused_plain.h"
#include "gelu.cuh"
#include "gemv.cuh"
#include "layers.h"

namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;
constexpr int kLoadsPerLane = 12;          // R * KC: 16-byte weight loads in flight per lane
constexpr int kMaxK = 32 * 8 * 12;         // 3072: the largest K of one pass (KC = 12)
// the LM head's grid-stride loop: blocks per SM, all the registers allow (156 a thread). Its warps
// are issue-bound (ncu at batch 1: an instruction every 7.6 cycles a warp, the issue slots 24%
// busy, DRAM 63%), so a third block an SM is more warps to issue from: 28.3 -> 26.6 us alone,
// +2% tokens/s at batch 1 (docs/PERF.md, thirteenth session)
constexpr int kLogitsBlocksPerSM = 3;

enum Epilogue { kBias, kBiasGelu, kBiasResidual, kLogits };
// where the input rows come from: inp as it is, or inp layer-normed
enum Input { kInput, kLayernorm };

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
    // kLogits in the LM head's kernel (launch_gemv's wide form: one row, K = 768) with
    // decode_step_end folded in (ring set): the step's position cell is argmax[1 + step] (the
    // cells follow the tokens, as in the KV cache); next_cells is decode_advance's ncells at a
    // graph's last step, which writes them, and 0 at the others, which write the next step's
    // embedding into inp instead: inp (K) = weight[argmax] + wpe[position + 1]. (These fields
    // keep the struct at 128 bytes: above, ptxas laid out every GEMV kernel anew, 1-36 registers
    // more or fewer, whose times move with their schedules; docs/PERF.md, thirtieth session.)
    int slots, step, next_cells;
    int *ring;
    const bf16 *wpe;
};
static_assert(sizeof(GemvArgs) <= 128, "the GEMV kernels' parameters as measured (above)");

// ---- the GEMV's timeline, a measuring tool (off by default) -------------------------------------
// Build with -DFUSED_TRACE=1 and run with FUSED_TRACE=FILE: every block of every gemv_kernel launch
// records %globaltimer (ns) where it starts, after pdl_wait, after its input is staged, after the
// layernorm, and where each warp ends its tiles, with the launch's weight pointer and grid (its
// identity across steps: a decode step replays the same calls), into a ring of kTraceRecords;
// at exit the ring goes to FILE and scripts/gemv_trace.py turns it into each call's stages and
// the gaps between calls. The trace build adds an atomic and a few stores a block.
#ifndef FUSED_TRACE
#define FUSED_TRACE 0
#endif
#if FUSED_TRACE
constexpr int kTraceRecords = 1 << 16, kTraceWords = 12;
// record: [0] weight pointer, [1] blockIdx | gridDim << 32, [2..5] start, waited, staged,
// normalised, [6..6+kWarps) each warp's end of its tiles
__device__ unsigned long long g_trace[kTraceRecords][kTraceWords];
__device__ unsigned long long g_trace_count;
__device__ __forceinline__ unsigned long long globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}
#endif

// best over the block's warps of input row n, from their bests in shared memory
template <int NR>
__device__ __forceinline__ void block_best(float &best_v, int &best_i, const float (*warp_v)[NR],
                                           const int (*warp_i)[NR], int n) {
    best_v = warp_v[0][n];
    best_i = warp_i[0][n];
    for (int k = 1; k < kWarps; k++)
        if (better(warp_v[k][n], warp_i[k][n], best_v, best_i)) { best_v = warp_v[k][n]; best_i = warp_i[k][n]; }
}

// ---- the input rows, as gemv_tc_kernel stages them -----------------------------------------------
// The same staging and weight loads as gemv_kernel's, which keeps its own copy inline: called
// through these, ptxas laid the one-row kernel out otherwise (its LN calls at 155-189 registers
// where 128, and other schedules) and batch 1 measured 2.3% slower with the same arithmetic
// (docs/PERF.md, fourteenth session, call 7). Both layer-norm through gemv.cuh's layernorm_row
// (for gemv_kernel the same PTX instructions as its inline copy had, the same registers, batch 1
// level: twenty-seventh session, call 12).
// The layernorm's weights at K <= 768 (KC <= 3; GPT-2 124M), loaded before the wait with the
// matrix's: at KC = 12 they would not fit beside it in registers, and are read where used.
template <int KC, int IN>
__device__ __forceinline__ void load_ln_weights(int4 (&lnw)[KC], int4 (&lnb)[KC], const GemvArgs &a,
                                                int nchunks, int lane) {
#pragma unroll
    for (int j = 0; j < KC; j++) {
        const int c = j * 32 + lane;
        lnw[j] = lnb[j] = make_int4(0, 0, 0, 0);
        if (IN == kLayernorm && KC <= 3 && c < nchunks) {
            lnw[j] = *reinterpret_cast<const int4 *>(a.lnw + c * 8);
            lnb[j] = *reinterpret_cast<const int4 *>(a.lnb + c * 8);
        }
    }
}

// The N input rows (inp) into shared memory, xs (N, K/8), after the wait (through L2: the kernel
// before just wrote them). A thread's chunks go in batches of BATCH, every load of a batch issued
// before its first store: a plain strided loop issued one dependent round trip after another
// (docs/PERF.md, fourteenth session, call 1).
template <int BATCH>
__device__ __forceinline__ void stage_rows(int4 *xs, const GemvArgs &a, int N, int nchunks) {
    const int total = N * nchunks, threads = blockDim.x;
    const int4 *src = reinterpret_cast<const int4 *>(a.inp);
    for (int s0 = 0; s0 < total; s0 += BATCH * threads) {
        int4 v[BATCH];
#pragma unroll
        for (int b = 0; b < BATCH; b++) {
            const int i = s0 + threadIdx.x + b * threads;
            if (i < total) v[b] = __ldcg(src + i);
        }
#pragma unroll
        for (int b = 0; b < BATCH; b++) {
            const int i = s0 + threadIdx.x + b * threads;
            if (i < total) xs[i] = v[b];
        }
    }
}

// Warp n of `warps` layer-norms staged row n in place (layernorm_row, gemv.cuh)
template <int KC>
__device__ __forceinline__ void layernorm_rows(int4 *xs, const GemvArgs &a, int N, int nchunks,
                                               const int4 (&lnw)[KC], const int4 (&lnb)[KC], int warps) {
    for (int n = threadIdx.x / 32; n < N; n += warps)   // load_ln_weights loaded them at KC <= 3
        layernorm_row<KC, (KC <= 3)>(xs + n * nchunks, a.lnw, a.lnb, a.K, nchunks, lnw, lnb, threadIdx.x % 32);
}

// the epilogue of output (input row n, channel row) with its matmul sum v; kLogits also keeps the
// thread's best (value, index)
__device__ __forceinline__ void write_output(const GemvArgs &a, int n, int row, float v, float bias,
                                             float residual, float &best_v, int &best_i) {
    bf16 *out = a.out + (size_t)n * a.OC + row;
    switch (a.epilogue) {
    case kBias: *out = __float2bfloat16_rn(v + bias); break;
    case kBiasGelu: *out = __float2bfloat16_rn(gelu_value(round_bf16(v + bias))); break;
    case kBiasResidual: *out = __float2bfloat16_rn(residual + round_bf16(v + bias)); break;
    case kLogits: {
        const bf16 logit = __float2bfloat16_rn(v);
        *out = logit;
        if (row < a.V && better(__bfloat162float(logit), row, best_v, best_i)) {
            best_v = __bfloat162float(logit);
            best_i = row;
        }
    }
    }
}

// The LM head's argmax across the grid, after each block has stored its best per input row in
// best_v, best_i: the last block to finish (the last-block pattern of runtime/cuda_common.cuh)
// reads all the blocks' bests with all its threads (thread k takes blocks k, k + blockDim, ...: one
// L2 round trip, where one thread per row walking 264 blocks took some 20 us at batch 1), then
// the warps' and the block's. `better` is a total order, so the result does not depend on who
// compared what. NR: the most input rows (N <= NR); warp_v, warp_i: (warps, 8) in shared memory,
// free to use; warps: the block's.
template <int NR>
__device__ __forceinline__ void grid_argmax(const GemvArgs &a, float (*warp_v)[8], int (*warp_i)[8], int warps) {
    __shared__ bool last;
    const int N = a.N, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();   // every best of this block is stored
    if (threadIdx.x == 0) {
        last = atomic_add_acq_rel(a.counter, 1u) == gridDim.x - 1;
        if (last) *a.counter = 0;   // for the next call (stream-ordered after this kernel)
    }
    __syncthreads();
    if (!last) return;
    float bv[NR];
    int bi[NR];
#pragma unroll
    for (int n = 0; n < NR; n++) { bv[n] = -FLT_MAX; bi[n] = 0x7fffffff; }
    for (unsigned blk = threadIdx.x; blk < gridDim.x; blk += blockDim.x) {
#pragma unroll
        for (int n = 0; n < NR; n++) {
            if (n >= N) break;
            const float v = __ldcg(a.best_v + blk * N + n);
            const int i = __ldcg(a.best_i + blk * N + n);
            if (better(v, i, bv[n], bi[n])) { bv[n] = v; bi[n] = i; }
        }
    }
#pragma unroll
    for (int n = 0; n < NR; n++) {
        if (n >= N) break;
        warp_best(bv[n], bi[n], 1);
        if (lane == 0) { warp_v[warp][n] = bv[n]; warp_i[warp][n] = bi[n]; }
    }
    __syncthreads();
    if (threadIdx.x >= N) return;
    const int n = threadIdx.x;
    float best = warp_v[0][n];
    int index = warp_i[0][n];
    for (int k = 1; k < warps; k++)
        if (better(warp_v[k][n], warp_i[k][n], best, index)) { best = warp_v[k][n]; index = warp_i[k][n]; }
    a.argmax[n] = index < a.V ? index : 0;   // rows of NaNs: index 0, as logits_argmax
}

// ---- the decode step's end in the LM head's last block (decode_step_end) -------------------------
// At one row of K = 768, gemv_kernel's wide form (the LM head) with a.ring set: its last block
// (elected as for the argmax) reduces the blocks' bests as the kernel's own tail does, then does
// decode_advance's and decode_embed's work as they compute it: the token into argmax[0] and the
// host's ring, then at a graph's last step (next_cells > 0) the next graph's cells, else the next
// step's embedding into x (K) = wte[token] + wpe[position + 1], over the row every block staged
// before it counted itself done. The position cells follow the token (argmax + 1) and are
// consecutive (layers.h), so the next step's is this one's + 1. The chosen
// row of wte is the one load that waits for the argmax (0.6 us on the step's path from DRAM): each
// block has prefetched its own best row into L2 (gemv_kernel), which gave back 0.2 us of it.
// Inlined: as a call (__noinline__) batch 1 measured 0.3% slower (docs/PERF.md, thirtieth
// session, calls 1-2).
__device__ __forceinline__ void lm_head_step_end(const float *best_v, const int *best_i, int V,
                                                int *argmax, int *ring, int slots, int step,
                                                int next_cells, const bf16 *wte, const bf16 *wpe,
                                                bf16 *x) {
    constexpr int K = 768, nchunks = K / 8;
    static_assert(nchunks <= kThreads, "a thread a chunk of the embedding");
    __shared__ float warp_v[kWarps];
    __shared__ int warp_i[kWarps], chosen;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int *cells = argmax + 1;
    const int pos = cells[step];
    int4 wpe_chunk = make_int4(0, 0, 0, 0);   // in flight while the bests are read
    if (!next_cells && threadIdx.x < nchunks)
        wpe_chunk = *reinterpret_cast<const int4 *>(wpe + (size_t)(pos + 1) * K + threadIdx.x * 8);
    float bv = -FLT_MAX;
    int bi = 0x7fffffff;
    for (unsigned blk = threadIdx.x; blk < gridDim.x; blk += kThreads) {
        const float v = __ldcg(best_v + blk);
        const int i = __ldcg(best_i + blk);
        if (better(v, i, bv, bi)) { bv = v; bi = i; }
    }
    warp_best(bv, bi, 1);
    if (lane == 0) { warp_v[warp] = bv; warp_i[warp] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < kWarps; k++)
            if (better(warp_v[k], warp_i[k], bv, bi)) { bv = warp_v[k]; bi = warp_i[k]; }
        chosen = bi < V ? bi : 0;   // a row of NaNs: index 0, as logits_argmax
        argmax[0] = chosen;
        ring[pos % slots] = chosen;
    }
    if (next_cells) {   // every thread read its position before the barrier above
        for (int i = threadIdx.x; i < next_cells; i += kThreads) cells[i] = pos + 1 + i;
        return;
    }
    __syncthreads();
    if (threadIdx.x < nchunks) {
        float wv[8], pv[8], y[8];
        load_bf16<8>(wv, wte + (size_t)chosen * K + threadIdx.x * 8);
        unpack_bf16<8>(pv, wpe_chunk);
#pragma unroll
        for (int k = 0; k < 8; k++) y[k] = wv[k] + pv[k];
        store_bf16<8>(x + threadIdx.x * 8, y);
    }
}

// ---- one row: gemv_kernel ------------------------------------------------------------------------
// KC: 16-byte chunks of a weight row per lane; IN: the input row's source (Input); FULL: K is
// KC * 256, every lane's KC chunks are in the row (GPT-2 124M's 768 and 3,072), so the compiler
// drops the chunk bounds and keeps the row's length as a constant in the weight addresses. The
// body is written for NR input rows (it took up to 8 before gemv_tc_kernel) and kept so at NR = 1:
// its SASS is the one measured (see the staging helpers above). R: weight rows a warp, 12 / KC
// loads in flight a lane; the LM head takes R = 8 (24 loads a lane, held to 168 registers for 3
// blocks an SM): its warps are issue-bound, and a tile's fixed work (the input's unpacks, the
// reduction, the epilogue) is then shared by 8 rows instead of 4 (22.4 -> 19.2 us on the batch-1
// step's path, docs/PERF.md, twenty-sixth session, call 11)
template <int KC, int IN, bool FULL, int R = kLoadsPerLane / KC>
__global__ void __launch_bounds__(kThreads, R == 8 ? kLogitsBlocksPerSM : 1) gemv_kernel(const GemvArgs a) {
    constexpr int NR = 1;                   // input rows
    static_assert(R * NR <= 32, "one lane per output of a warp's tile");
    extern __shared__ int4 xs[];            // (N, K/8) the input rows, 8 bf16 a chunk
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int N = a.N, K = FULL ? KC * 256 : a.K, OC = a.OC, nchunks = K / 8;
    const int tile_stride = gridDim.x * kWarps * R;
    int row0 = (blockIdx.x * kWarps + warp) * R;   // this warp's first tile of R rows
#if FUSED_TRACE
    __shared__ unsigned long long trace_slot;
    unsigned long long stamps[4];
    if (threadIdx.x == 0) {
        stamps[0] = globaltimer();
        trace_slot = atomicAdd(&g_trace_count, 1ull) % kTraceRecords;
    }
#define TRACE_STAMP(i) do { if (threadIdx.x == 0) stamps[i] = globaltimer(); } while (0)
#else
#define TRACE_STAMP(i) do { } while (0)
#endif

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
    constexpr bool LN = IN == kLayernorm;
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
    // the LM head lets the kernels after it start only after its wait (layers.h: the next decode
    // step's read the cache before their waits); the others at once
    if (a.epilogue != kLogits) pdl_launch_dependents();
    pdl_wait();
    if (a.epilogue == kLogits) pdl_launch_dependents();
    TRACE_STAMP(1);

    // ---- the input rows into shared memory (through L2: the kernel before just wrote them): a
    // thread's chunks loaded in batches of up to 6, all of a batch in flight before its first
    // store: at K = 3,072 a thread stages 3 chunks a row, which a plain strided loop issued as 3
    // dependent round trips (1.02 us against 0.44 at K = 768, docs/PERF.md)
    {
        constexpr int kSteps = (NR * KC * 32 + kThreads - 1) / kThreads, kBatch = kSteps < 6 ? kSteps : 6;
        const int total = N * nchunks;
        const int4 *src = reinterpret_cast<const int4 *>(a.inp);
        for (int s0 = 0; s0 < kSteps; s0 += kBatch) {
            int4 v[kBatch];
#pragma unroll
            for (int b = 0; b < kBatch; b++) {
                const int i = threadIdx.x + (s0 + b) * kThreads;
                if (i < total) v[b] = __ldcg(src + i);
            }
#pragma unroll
            for (int b = 0; b < kBatch; b++) {
                const int i = threadIdx.x + (s0 + b) * kThreads;
                if (i < total) xs[i] = v[b];
            }
        }
    }
    __syncthreads();
    TRACE_STAMP(2);
    if (LN) {   // warp n normalises row n in place (layernorm_row, gemv.cuh)
        for (int n = warp; n < N; n += kWarps)
            layernorm_row<KC, kLnEarly>(xs + n * nchunks, a.lnw, a.lnb, a.K, nchunks, lnw, lnb, lane);
        __syncthreads();
    }
    TRACE_STAMP(3);

    // ---- the tiles: after warp_reduce_scatter lane l holds output (row0 + r, n) with
    // r * NR + n = l / kLanes, the same in its kLanes lanes; the first of them writes it
    constexpr int kLanes = 32 / (R * NR);
    const int my_r = lane / kLanes / NR, my_n = lane / kLanes % NR;
    const bool writes = lane % kLanes == 0 && my_n < N;
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

        float sums[R * NR];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int n = 0; n < NR; n++) sums[r * NR + n] = acc[r][n];
        const float v = warp_reduce_scatter<R * NR>(sums, lane);
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
#if FUSED_TRACE
    if (lane == 0) {
        unsigned long long *rec = g_trace[trace_slot];
        rec[6 + warp] = globaltimer();
        if (warp == 0) {
            rec[0] = (unsigned long long)a.weight;
            rec[1] = blockIdx.x | (unsigned long long)gridDim.x << 32;
            for (int i = 0; i < 4; i++) rec[2 + i] = stamps[i];
        }
    }
#endif
    if (a.epilogue != kLogits) return;

    // ---- argmax: the warp's best per input row (the writing lanes of row n are (n + k NR)
    // kLanes, 32 / R apart: after these steps lane n kLanes holds it), then the block's, then,
    // in the last block to finish, the grid's
    warp_best(best_v, best_i, 32 / R);
    __shared__ float warp_v[kWarps][NR];
    __shared__ int warp_i[kWarps][NR];
    __shared__ bool last;
    if (lane % kLanes == 0 && lane / kLanes < NR) {
        warp_v[warp][lane / kLanes] = best_v;
        warp_i[warp][lane / kLanes] = best_i;
    }
    __syncthreads();
    if (threadIdx.x < N) {
        const int n = threadIdx.x;
        float bv;
        int bi;
        block_best<NR>(bv, bi, warp_v, warp_i, n);
        a.best_v[blockIdx.x * N + n] = bv;
        a.best_i[blockIdx.x * N + n] = bi;
    }
    // decode_step_end (the LM head's kernel, R = 8, only ever launched at one row of 768): the
    // block's best row of wte into L2 (12 lines of 128 bytes), so that the last block's read of
    // the chosen one hits L2
    if constexpr (R == 8) {
        static_assert(KC == 3 && FULL && IN == kLayernorm, "the LM head's form (launch_gemv)");
        if (a.ring && threadIdx.x < K * (int)sizeof(bf16) / 128) {
            float bv;
            int bi;
            block_best<NR>(bv, bi, warp_v, warp_i, 0);
            if (bi < OC) prefetch_l2(a.weight + (size_t)bi * K + threadIdx.x * 64);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {   // the last-block pattern of runtime/cuda_common.cuh
        last = atomic_add_acq_rel(a.counter, 1u) == gridDim.x - 1;
        if (last) *a.counter = 0;   // for the next call (stream-ordered after this kernel)
    }
    __syncthreads();
    if (!last) return;
    // decode_step_end folded in (the LM head's kernel only: R = 8), a function of its own
    if constexpr (R == 8) {
        if (a.ring) {
            lm_head_step_end(a.best_v, a.best_i, a.V, a.argmax, a.ring, a.slots, a.step,
                             a.next_cells, a.weight, a.wpe, const_cast<bf16 *>(a.inp));
            return;
        }
    }
    // The grid's bests, read by all the block's threads (thread k takes blocks k, k + 128, ...;
    // one L2 round trip, where one thread per row walking 264 blocks took some 20 us at batch
    // 1), then the warps' and the block's bests as above. `better` is a total order, so the
    // result does not depend on who compared what.
    float bv[NR];
    int bi[NR];
#pragma unroll
    for (int n = 0; n < NR; n++) { bv[n] = -FLT_MAX; bi[n] = 0x7fffffff; }
    for (unsigned blk = threadIdx.x; blk < gridDim.x; blk += kThreads) {
#pragma unroll
        for (int n = 0; n < NR; n++) {
            if (n >= N) break;
            const float v = __ldcg(a.best_v + blk * N + n);
            const int i = __ldcg(a.best_i + blk * N + n);
            if (better(v, i, bv[n], bi[n])) { bv[n] = v; bi[n] = i; }
        }
    }
#pragma unroll
    for (int n = 0; n < NR; n++) {
        if (n >= N) break;
        warp_best(bv[n], bi[n], 1);
        if (lane == 0) { warp_v[warp][n] = bv[n]; warp_i[warp][n] = bi[n]; }
    }
    __syncthreads();
    if (threadIdx.x >= N) return;
    const int n = threadIdx.x;
    float best;
    int index;
    block_best<NR>(best, index, warp_v, warp_i, n);
    a.argmax[n] = index < a.V ? index : 0;   // rows of NaNs: index 0, as logits_argmax
}

// ---- 2 to 8 rows: gemv_tc_kernel, the products on tensor cores -----------------------------------
// The same call as gemv_kernel (weights loaded before pdl_wait, the input rows staged and
// layer-normed in shared memory, one pass, the epilogue fused), with the products on mma.sync:
// gemv_kernel's FFMAs grow with the rows (96 a lane for each row of a 4 x 768 tile, and as many
// bf16 unpacks), where one mma.sync m16n8k16 takes a 16-byte weight load as it is for up to 16
// rows. Measured against gemv_kernel (docs/PERF.md, fourteenth session): +6% tokens/s at 2 rows,
// +19% at 4, +54% at 8 (calls 6-8), but 7% slower at one row (calls 2-5), which therefore stays
// on gemv_kernel.
// The tile: the weights as B (n = 8 output channels: lane (g, t) loads 16 bytes of channel
// row0 + g at columns 32j + 8t.. of chunk j, a 64-byte piece of each of 8 rows per instruction)
// and the staged rows as A (m = input row: rows g < N of 16; rows N..7 a copy of row N - 1,
// computed and not used; rows 8..15 zero). The k order inside a 32-column chunk is permuted so
// that the lane's 16 bytes are its B fragments of the chunk's two k-steps as they are: physical
// column 8t + e is logical k 2t + e (e < 2), 8t + 2 + e is 2t + 8 + e, and 8t + 4.. the same for
// the second k-step; the A fragments, read from the staged rows with the same permutation, are
// one 16-byte shared load, and the sum over k is the same sum in another order. A warp owns 8
// channels and kTcChunks = 12 chunks of 32 columns (12 loads a lane in flight, 48 registers, as
// gemv_kernel); `ksplit` warps share a channel group's K (2 at K = 768, 8 at 3,072), their fp32
// sums meeting in shared memory and added in warp order. A block is 2 groups of 8 channels at
// ksplit = 2, else one.
// Numerics: mma.sync's fp32 sums (four accumulators a warp, k-step s into s % 4, added pairwise),
// then the warps' in order: another summation order than gemv_kernel's, rounding and epilogues
// as its.
constexpr int kTcChunks = 12;   // 32-column chunks of K per warp

__host__ __device__ __forceinline__ void gemv_tc_shape(int K, int &ksplit, int &groups) {
    ksplit = max(2, (K + 32 * kTcChunks - 1) / (32 * kTcChunks));
    groups = ksplit == 2 ? 2 : 1;   // channel groups of 8 a block
}

// KC: the layernorm's chunks a lane (K <= KC * 256); IN (kInput or kLayernorm), FULL as
// gemv_kernel's. A block is 128 threads at K <= 768 (KC = 3), up to 256 above
template <int KC, int IN, bool FULL>
__global__ void __launch_bounds__(KC == 3 ? 128 : 256, KC == 3 ? 3 : 1) gemv_tc_kernel(const GemvArgs a) {
    // dynamic shared memory: the input rows (N, K/8), 8 bf16 a chunk, then the warps' sums, two
    // buffers of [warp][input row][channel] (with the sums in a static array of their own, the
    // kernel measured 1-2% slower at one row, docs/PERF.md, fourteenth session, call 5)
    extern __shared__ int4 xs[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int N = a.N, K = FULL ? KC * 256 : a.K, OC = a.OC, nchunks = K / 8;
    const int warps = blockDim.x / 32;
    float2 *red = reinterpret_cast<float2 *>(xs + N * nchunks);   // 2 x warps * 32 float2
    int ksplit, groups;
    gemv_tc_shape(K, ksplit, groups);
    const int rows = 8 * groups, group = warp / ksplit, slice = warp % ksplit;
    const int nch32 = (K + 31) / 32, first_chunk = slice * kTcChunks;
    const int tile_stride = gridDim.x * rows;
    int row0 = blockIdx.x * rows;
    // the output this thread adds up and writes (threads < rows * 8): input row `on`, channel
    // row0 + orow
    const int on = threadIdx.x / rows, orow = threadIdx.x % rows;
    const bool writes = threadIdx.x < rows * 8 && on < N;

    // ---- before the wait: this warp's first tile of weights, the thread's bias, the
    // layernorm's weights
    int4 w[kTcChunks];
    auto load_tile = [&](int first_row) {
        const int wrow = first_row + group * 8 + g;
#pragma unroll
        for (int i = 0; i < kTcChunks; i++) {
            const int col = 32 * (first_chunk + i) + 8 * t;
            w[i] = make_int4(0, 0, 0, 0);
            if (wrow < OC && col < K) w[i] = load_streaming(a.weight + (size_t)wrow * K + col);
        }
    };
    load_tile(row0);
    float bias = writes && a.bias && row0 + orow < OC ? __bfloat162float(a.bias[row0 + orow]) : 0.0f;
    int4 lnw[KC], lnb[KC];
    load_ln_weights<KC, IN>(lnw, lnb, a, nchunks, lane);
    if (a.epilogue != kLogits) pdl_launch_dependents();   // (the LM head after its wait, as gemv_kernel)
    pdl_wait();
    if (a.epilogue == kLogits) pdl_launch_dependents();

    stage_rows<6>(xs, a, N, nchunks);
    __syncthreads();
    if (IN == kLayernorm) {
        layernorm_rows<KC>(xs, a, N, nchunks, lnw, lnb, warps);
        __syncthreads();
    }

    // ---- the tiles
    const int4 *xrow = xs + min(g, N - 1) * nchunks;   // lanes of rows past N: sums never used
    float best_v = -FLT_MAX;   // kLogits: this thread's best over its outputs
    int best_i = 0x7fffffff;
    for (int tile = 0; row0 < OC; row0 += tile_stride, tile++) {   // block-uniform
        float residual = 0.0f;
        if (a.epilogue == kBiasResidual && writes && row0 + orow < OC)
            residual = __bfloat162float(__ldcg(a.out + (size_t)on * OC + row0 + orow));
        float acc[4][4];
#pragma unroll
        for (int q = 0; q < 4; q++) acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = 0.0f;
#pragma unroll
        for (int i = 0; i < kTcChunks; i++) {
            if (first_chunk + i >= nch32) break;   // warp-uniform
            const int c = 4 * (first_chunk + i) + t;
            const int4 x = FULL || c < nchunks ? xrow[c] : make_int4(0, 0, 0, 0);
            const uint32_t k0[4] = {(uint32_t)x.x, 0u, (uint32_t)x.y, 0u};
            const uint32_t k1[4] = {(uint32_t)x.z, 0u, (uint32_t)x.w, 0u};
            mma_bf16(acc[(2 * i) % 4], k0, (uint32_t)w[i].x, (uint32_t)w[i].y);
            mma_bf16(acc[(2 * i + 1) % 4], k1, (uint32_t)w[i].z, (uint32_t)w[i].w);
        }
        // the next tile's weights in flight while this one is added up and written
        if (row0 + tile_stride < OC) load_tile(row0 + tile_stride);
        // C(g, 2t), C(g, 2t + 1): input row g, channels 2t, 2t + 1 of the warp's group
        float2 *buf = red + (tile % 2) * warps * 32;
        if (g < N)
            buf[((warp * 8 + g) * 8 + 2 * t) / 2] =
                make_float2((acc[0][0] + acc[1][0]) + (acc[2][0] + acc[3][0]),
                            (acc[0][1] + acc[1][1]) + (acc[2][1] + acc[3][1]));
        __syncthreads();   // (two buffers: a tile's sums are read before the next but one is written)
        if (!writes || row0 + orow >= OC) continue;
        if (tile > 0 && a.bias) bias = __bfloat162float(a.bias[row0 + orow]);
        const float *sums = reinterpret_cast<const float *>(buf);
        const int ow = orow / 8 * ksplit, oc = orow % 8;   // the output's first warp, its channel
        float v = sums[(ow * 8 + on) * 8 + oc];
        for (int s = 1; s < ksplit; s++) v += sums[((ow + s) * 8 + on) * 8 + oc];
        write_output(a, on, row0 + orow, v, bias, residual, best_v, best_i);
    }
    if (a.epilogue != kLogits) return;

    // ---- argmax: the block's best per input row (its `rows` threads are consecutive lanes of
    // one warp), then the grid's
    for (int offset = rows / 2; offset >= 1; offset >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, best_v, offset);
        const int i = __shfl_xor_sync(0xffffffffu, best_i, offset);
        if (better(v, i, best_v, best_i)) { best_v = v; best_i = i; }
    }
    if (writes && orow == 0) {
        a.best_v[blockIdx.x * N + on] = best_v;
        a.best_i[blockIdx.x * N + on] = best_i;
    }
    // the warps' bests in the sums' buffers, free once grid_argmax's first barrier is passed
    // (two barriers past their last read)
    grid_argmax<FUSED_MAX_ROWS>(a, reinterpret_cast<float (*)[8]>(red), reinterpret_cast<int (*)[8]>(red + warps * 32), warps);
}

// the fused path is taken for a shape it handles, unless DECODE_FUSED=0 (a benchmark switch:
// the plain layers in the same binary, for a same-run baseline)
bool fused_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) {
        enabled = env_flag("DECODE_FUSED", 1);
    }
    return enabled;
}

bool gemv_fits(int N, int K, const void *inp, const void *weight) {
    return fused_enabled() && N >= 1 && N <= FUSED_MAX_ROWS && K % 8 == 0 && K <= kMaxK &&
           is_aligned16(inp) && is_aligned16(weight);
}

// gemv_kernel (one row) or gemv_tc_kernel (2 to 8 rows) for this call: the kernel for its input
// and K; gemv_tc_kernel's dynamic shared memory (the rows and the warps' sums) goes past the 48 KiB
// a kernel gets without asking at 8 rows of 3,072: asked for once per kernel, on its first call
// (a decode step's first call runs before its graph capture, runtime/graph.cu). gemv_kernel asks
// for the 48 KiB it asked for when it took 8 rows, so that its launches are the ones measured.
template <int KC>
void launch_gemv(const GemvArgs &a, int in, int max_blocks) {
    const bool tc = a.N > 1, full = a.K == KC * 256;
    void (*kernel)(GemvArgs);
    if (tc)
        kernel = in == kLayernorm ? (full ? gemv_tc_kernel<KC, kLayernorm, true> : gemv_tc_kernel<KC, kLayernorm, false>)
                                  : (full ? gemv_tc_kernel<KC, kInput, true> : gemv_tc_kernel<KC, kInput, false>);
    else
        kernel = in == kLayernorm ? (full ? gemv_kernel<KC, kLayernorm, true> : gemv_kernel<KC, kLayernorm, false>)
                                  : (full ? gemv_kernel<KC, kInput, true> : gemv_kernel<KC, kInput, false>);
    // the one-row LM head of GPT-2 124M's shape: 8 weight rows a warp (gemv_kernel's R)
    bool wide = false;
    if constexpr (KC == 3) {
        wide = !tc && a.epilogue == kLogits && full && in == kLayernorm;
        if (wide) kernel = gemv_kernel<KC, kLayernorm, true, 8>;
    }
    static bool asked[2][2][2][2] = {};
    if (!asked[tc][in][full][wide]) {
        const size_t max_smem = FUSED_MAX_ROWS * kMaxK * sizeof(bf16) + (tc ? 2 * 8 * 32 * sizeof(float2) : 0);
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)max_smem));
        asked[tc][in][full][wide] = true;
    }
    int threads, rows_per_block;
    size_t smem = (size_t)a.N * a.K * sizeof(bf16);
    if (tc) {
        int ksplit, groups;
        gemv_tc_shape(a.K, ksplit, groups);
        threads = 32 * ksplit * groups;
        rows_per_block = 8 * groups;
        smem += 2 * (threads / 32) * 32 * sizeof(float2);
    } else {
        threads = kThreads;
        rows_per_block = kWarps * (wide ? 8 : kLoadsPerLane / KC);
    }
    const int blocks = std::min(ceil_div(a.OC, rows_per_block), max_blocks);
    launch_pdl(kernel, blocks, threads, smem, a);
}

// the arguments of every call: its tensors (lnw, lnb NULL without a layernorm, bias NULL for
// the LM head), shapes and epilogue; the LM head adds its argmax's
GemvArgs gemv_args(floatX *out, const floatX *inp, const floatX *lnw, const floatX *lnb,
                   const floatX *weight, const floatX *bias, int N, int K, int OC, Epilogue e) {
    GemvArgs a = {};
    a.out = BF(out);
    a.inp = CBF(inp);
    a.lnw = CBF(lnw);
    a.lnb = CBF(lnb);
    a.weight = CBF(weight);
    a.bias = CBF(bias);
    a.N = N;
    a.K = K;
    a.OC = OC;
    a.epilogue = e;
    return a;
}

#if FUSED_TRACE
// at exit: FUSED_TRACE=FILE gets uint64 {records, words, count} and then the ring as it is
void trace_dump() {
    const char *path = getenv("FUSED_TRACE");
    if (!path) return;
    static unsigned long long host[kTraceRecords][kTraceWords];
    unsigned long long count = 0;
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpyFromSymbol(host, g_trace, sizeof(host)));
    CUDA_CHECK(cudaMemcpyFromSymbol(&count, g_trace_count, sizeof(count)));
    const unsigned long long head[3] = {kTraceRecords, kTraceWords, count};
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(head, sizeof(head), 1, f) != 1 || fwrite(host, sizeof(host), 1, f) != 1 ||
        fclose(f) != 0)
        die("fused.cu: cannot write the trace to %s", path);
}
#endif

void gemv(const GemvArgs &a, int max_blocks) {
#if FUSED_TRACE
    static bool registered = false;
    if (!registered) registered = atexit(trace_dump) == 0;
#endif
    const int in = a.lnw ? kLayernorm : kInput;
    if (a.K <= 32 * 8 * 3) launch_gemv<3>(a, in, max_blocks);
    else launch_gemv<12>(a, in, max_blocks);
    LAUNCH_CHECK();
}

// above FUSED_MAX_ROWS on Hopper: decode_gemm_sm90.cu's wgmma kernel, where the call fits it
bool wg_fits(int N, int K, int OC, const void *inp, const void *weight, const void *bias,
             const void *out, const void *lnw = nullptr, const void *lnb = nullptr,
             const float *stats = nullptr) {
    return fused_enabled() && N > FUSED_MAX_ROWS &&
           decode_gemm_sm90_fits(N, K, OC, inp, weight, bias, out, lnw, lnb, stats);
}

size_t logits_partials_bytes(int N) {
    return plain_align256((size_t)kLogitsBlocksPerSM * cuda_num_sms * N * (sizeof(float) + sizeof(int)));
}

}  // namespace

// the scratch: the LM head's counter (256 bytes), its per-block bests (at 9-64 rows on Hopper
// the rows' best keys, decode_lm_head_sm90), at one row decode_layers_sm90's (the same bytes at any
// C: the plain calls' part must start where their C, which need not be the model's, finds it),
// then the plain calls'
static size_t block_bytes(int N) { return N == 1 ? decode_layers_sm90_scratch_size() : 0; }

size_t fused_scratch_size(int N, int C, int OC) {
    ensure_backend();
    return 256 + logits_partials_bytes(N) + block_bytes(N) + plain_scratch_size(N, C, OC);
}

static void *block_part(void *scratch, int N) { return (char *)scratch + 256 + logits_partials_bytes(N); }

static PlainScratch plain_part(void *scratch, int N, int C) {
    return plain_scratch((char *)block_part(scratch, N) + block_bytes(N), N, C);
}

void layernorm_matmul_forward(floatX *out, void *scratch, const floatX *inp, const floatX *lnw,
                              const floatX *lnb, const floatX *weight, const floatX *bias, int N,
                              int C, int OC, int gelu, const float *stats) {
    // with the row statistics the residual call before left: the layernorm folded in
    if (stats && wg_fits(N, C, OC, inp, weight, bias, out, lnw, lnb, stats)) {
        decode_gemm_sm90(out, inp, lnw, lnb, stats, weight, bias, N, C, OC, gelu, 0, NULL);
        return;
    }
    PlainScratch s = plain_part(scratch, N, C);
    if (wg_fits(N, C, OC, s.ln, weight, bias, out)) {   // without them, the layernorm a kernel first
        layernorm_forward(s.ln, s.mean, s.rstd, inp, lnw, lnb, N, C);
        decode_gemm_sm90(out, s.ln, NULL, NULL, NULL, weight, bias, N, C, OC, gelu, 0, NULL);
        return;
    }
    if (!gemv_fits(N, C, inp, weight) || !is_aligned16(lnw) || !is_aligned16(lnb)) {
        plain_layernorm_matmul(out, s, inp, lnw, lnb, weight, bias, N, C, OC, gelu);
        return;
    }
    gemv(gemv_args(out, inp, lnw, lnb, weight, bias, N, C, OC, gelu ? kBiasGelu : kBias), 1 << 30);
}

int matmul_residual_forward(floatX *residual, void *scratch, const floatX *inp,
                            const floatX *weight, const floatX *bias, int N, int C, int OC,
                            float *stats) {
    if (wg_fits(N, C, OC, inp, weight, bias, residual)) {
        if (!decode_gemm_sm90_folds_layernorm(N)) stats = NULL;   // (the next layernorm a kernel)
        decode_gemm_sm90(residual, inp, NULL, NULL, NULL, weight, bias, N, C, OC, 0, 1, stats);
        return stats != NULL;
    }
    if (!gemv_fits(N, C, inp, weight)) {
        plain_matmul_residual(residual, plain_part(scratch, N, C), inp, weight, bias, N, C, OC);
        return 0;
    }
    gemv(gemv_args(residual, inp, NULL, NULL, weight, bias, N, C, OC, kBiasResidual), 1 << 30);
    return 0;
}

void decode_layers_step(floatX *x, floatX *qkv, floatX *att, floatX *fch, void *att_scratch,
                        void *scratch, float *x_stats, const DecodeLayerWeights *w, int L,
                        floatX *kcache, floatX *vcache, size_t layer_stride, const int *pos, int B,
                        int beside, int maxT, int NH, int HS) {
    if (fused_enabled() && decode_layers_sm90_fits(B, NH * HS, NH, HS, w, L, x, kcache, vcache)) {
        decode_layers_sm90(x, att, fch, block_part(scratch, B), w, L, kcache, vcache, layer_stride, pos,
                           NH * HS, maxT, NH);
        matmul_residual_forward(x, scratch, fch, w[L - 1].fcprojw, w[L - 1].fcprojb, B, 4 * NH * HS,
                                NH * HS, NULL);   // the last layer's FC projection
        return;
    }
    plain_decode_layers(x, qkv, att, fch, att_scratch, scratch, x_stats, w, L, kcache, vcache,
                        layer_stride, pos, B, beside, maxT, NH, HS);
}

// rows [i * B / parts, (i + 1) * B / parts) are part i: parts of B / parts rows or one more
static bool parts_fit(int B, int C, int parts) {
    const int fewest = B / parts, most = (B + parts - 1) / parts;
    if (fewest <= FUSED_MAX_ROWS) return false;   // (parts of 1-8 rows: the GEMV kernels)
    // every part's four matmuls on the wgmma kernel, whose rows have only an upper bound: the
    // largest part's fitting is enough
    return decode_gemm_sm90_shape_fits(most, C, 3 * C) &&
           decode_gemm_sm90_shape_fits(most, C, C) &&
           decode_gemm_sm90_shape_fits(most, C, 4 * C) &&
           decode_gemm_sm90_shape_fits(most, 4 * C, C);
}

// Of 2 to DECODE_PARTS parts that fit, those of at most 32 rows (the layernorm folded into the
// matmuls: no layernorm kernels), and of those the fewest rows in all once each part's are
// rounded up to its matmuls' tile (16, 32 or 64 rows), the fewest parts where they tie. Measured
// at batch 36-128 (docs/PERF.md, twenty-fourth session, call 6), the parts this picks were the
// fastest of 1-4: 3 of 12 rows at 36 (+5% over 2 of 18, padded to 32), 3 of 16 at 48 (+3%), 2
// of 32 at 64 (4 of 16: -2%, 3 of 21-22: -7%), 3 of 32 at 96 (+9% over 2 of 48), 4 of 32 at 128
// (+4% over 2 of 64).
int decode_step_parts(int B, int C) {
    ensure_backend();
    static int most = 0;
    if (!most) {
        const char *v = getenv("DECODE_PARTS");
        char *end = NULL;
        long n = v ? strtol(v, &end, 10) : DEV_MAX_BRANCHES + 1;
        if (v && (end == v || *end || n < 1 || n > DEV_MAX_BRANCHES + 1))
            die("DECODE_PARTS=%s: the decode step's parts at once must be a whole number from 1 "
                "(one batch) to %d", v, DEV_MAX_BRANCHES + 1);
        most = (int)n;
    }
    int best = 1;
    long best_score = 0;
    for (int parts = 2; parts <= most; parts++) {
        if (!parts_fit(B, C, parts)) continue;
        const int rows = (B + parts - 1) / parts;
        const long score = !decode_gemm_sm90_folds_layernorm(rows) * 1000000L +
                           (long)parts * decode_gemm_sm90_tile_rows(rows);
        if (best == 1 || score < best_score) best = parts, best_score = score;
    }
    return best;
}

// the LM head on the GEMV kernels: where it fits them, and its arguments
static bool lm_head_gemv_fits(int N, int C, const floatX *inp, const floatX *lnw, const floatX *lnb,
                              const floatX *wte) {
    return gemv_fits(N, C, inp, wte) && is_aligned16(lnw) && is_aligned16(lnb);
}

static GemvArgs lm_head_gemv_args(floatX *logits, int *argmax, void *scratch, const floatX *inp,
                                  const floatX *lnw, const floatX *lnb, const floatX *wte, int N,
                                  int C, int V, int Vp) {
    GemvArgs a = gemv_args(logits, inp, lnw, lnb, wte, NULL, N, C, Vp, kLogits);
    a.counter = (unsigned *)scratch;
    a.best_v = (float *)((char *)scratch + 256);
    a.best_i = (int *)(a.best_v + (size_t)kLogitsBlocksPerSM * cuda_num_sms * N);
    a.argmax = argmax;
    a.V = V;
    return a;
}

void lm_head_forward(floatX *logits, int *argmax, void *scratch, const floatX *inp,
                     const floatX *lnw, const floatX *lnb, const floatX *wte, int N, int C, int V,
                     int Vp) {
    PlainScratch s = plain_part(scratch, N, C);
    if (decode_lm_head_sm90_fits(N, C, Vp, s.ln, wte, logits)) {   // 9-64 rows on Hopper
        layernorm_forward(s.ln, s.mean, s.rstd, inp, lnw, lnb, N, C);
        decode_lm_head_sm90(logits, argmax, (unsigned *)scratch,
                            (unsigned long long *)((char *)scratch + 256), s.ln, wte, N, C, V, Vp);
        return;
    }
    if (!lm_head_gemv_fits(N, C, inp, lnw, lnb, wte)) {
        plain_lm_head(logits, argmax, s, inp, lnw, lnb, wte, N, C, V, Vp);
        return;
    }
    gemv(lm_head_gemv_args(logits, argmax, scratch, inp, lnw, lnb, wte, N, C, V, Vp),
         kLogitsBlocksPerSM * cuda_num_sms);
}

// At one row of 768 the LM head is gemv_kernel's wide form (launch_gemv), and the step's end is
// folded into it: the ring, the cells and the next step's embedding written by its last block,
// which has the argmax, instead of decode_advance's and decode_embed's kernels after it (one
// kernel boundary on the batch-1 step's path where there were three; the embedding's row of wte
// is the one read after the argmax, its row of wpe is read while the blocks' bests are).
// Elsewhere the three calls. (launch_gemv takes the wide form for a one-row LM head of K = 768
// with a layernorm: B = 1, C = 768 and lnfw set select it; lm_head_step_end asserts it.)
int decode_step_end(floatX *logits, int *tokens, void *scratch, floatX *x, const floatX *lnfw,
                    const floatX *lnfb, const floatX *wte, const floatX *wpe, int *ring, int slots,
                    int *cells, int ncells, int step, int last, int B, int C, int V, int Vp) {
    if (B != 1 || C != 3 * 256 || !lnfw || !lnfb || !ring ||
        !lm_head_gemv_fits(B, C, x, lnfw, lnfb, wte) || !is_aligned16(wpe) || cells != tokens + 1 ||
        (last && ncells < 1)) {
        plain_decode_step_end(logits, tokens, scratch, x, lnfw, lnfb, wte, wpe, ring, slots, cells,
                              ncells, step, last, B, C, V, Vp);
        return 0;
    }
    GemvArgs a = lm_head_gemv_args(logits, tokens, scratch, x, lnfw, lnfb, wte, B, C, V, Vp);
    a.ring = ring;
    a.slots = slots;
    a.step = step;
    a.next_cells = last ? ncells : 0;
    a.wpe = CBF(wpe);
    gemv(a, kLogitsBlocksPerSM * cuda_num_sms);
    return 1;
}
