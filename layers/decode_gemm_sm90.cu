// decode_gemm_sm90.cu: the decode step's matmuls at FUSED_MAX_ROWS + 1 to 64 rows on Hopper
// (sm_90a: TMA, wgmma): out (N, OC) = x (N, K) W^T + bias, then as it is, GELU, or added to out
// (the residual); x = inp, or up to 32 rows layernorm(inp) from the row statistics that the
// residual call which wrote inp left (row_statistics, below). fused.cu calls it
// (layernorm_matmul_forward, matmul_residual_forward, attention_matmul_residual_step); built for
// sm_90a as attention/flash_sm90.cu is, and launched where decode_gemm_sm90_fits says so.
//
// Why a kernel of its own: at 9-64 rows a decode matmul reads 1.2-4.7 MB of weights once, 0.3-1.1
// us at the copy ceiling, but cuBLASLt's kernels take 4-7 us each (a batch-64 step: 264 us in 49
// GEMMs and their split-K reductions, docs/PERF.md, twelfth session), and session 9's mma.sync
// kernel for these rows ran its phases one after another. Here a CTA's whole share of the weights
// is in flight at once, before pdl_wait (they do not depend on the kernel before: with
// programmatic dependent launch they stream while it finishes), its share of the input rows right
// after it, and the products are a few wgmma. Measured per call of a batch-64 step (docs/PERF.md,
// fifteenth session): the boundary itself 0.3-1.3 us, the input rows 0.1-0.5, the exchange
// between slices about 1 us, 3.8-6.0 us in all against cuBLASLt's 4.4-7.6.
//
// ---- the tile picture: one CTA = 64 output channels x one slice of K, for all N rows ------------
//
//   weight (OC, K) ──TMA, before pdl_wait──► W: boxes b = 0..BOXES-1 of 64 channels x 64 columns
//   inp (N, K)     ──TMA, after pdl_wait───► X: the same boxes of ROWS x 64 (ROWS = 16, 32 or 64,
//                                               N rounded up; rows past N are TMA's zeros)
//   [LN: X layer-normed in place, with the rows' statistics loaded after pdl_wait]
//   acc (64 channels x ROWS rows, fp32) = sum over the boxes of W X^T   (wgmma m64nROWSk16, SS,
//                                          both K-major: D^T = W X^T, so that N is wgmma's N)
//   acc -> staged, over the boxes: grouped by the rank that finishes each row (n % SPLITS)
//   each other rank's group ──bulk copy (cp.async.bulk, CTA to CTA in the cluster)──► its parts,
//                              completing on its mbarrier
//   CTA r, once its SPLITS - 1 parts are in: its rows' sums added in rank order (deterministic)
//   + bias [GELU | + the residual, loaded while the products ran] -> out, bf16 (the bias loaded
//   before pdl_wait) [stats_out: each output row's mean and squares about it over the tile's
//   64 channels, for the next call's layernorm]; a cluster barrier before the exit keeps the
//   staging until it is copied
//
// The split of K: as many slices (a divisor of K / 64, at most 8, the portable cluster) as keep
// the grid within about one CTA an SM, at most 6 boxes a slice (at most 115 KB of shared memory):
// GPT-2 124M's QKV 36 tiles x 4 slices, FC 48 x 3, the projections 12 x 6 (K = 768) and 12 x 8
// (K = 3,072).
//
// Numerics as the plain layers': fp32 sums, the product rounded to bf16 before GELU and before
// the residual add; only the order of the sum differs (cuBLASLt's is its own).
#include <cooperative_groups.h>
#include <cuda.h>

#include "../attention/flash_tile.cuh"   // TMA, mbarrier, wgmma: their PTX, written once
#include "../runtime/cuda_common.cuh"
#include "../runtime/tensor_map.h"
#include "argmax.cuh"
#include "decode_gemm_sm90.h"
#include "gelu.cuh"

namespace {

constexpr int kRows = 64;                    // input rows of a tile at most: wgmma's N (16, 32, 64)
constexpr int kChannels = 64;                // output channels of a CTA: wgmma's M
constexpr int kBoxCols = 64;                 // K columns of a box: one 128-byte swizzled row
constexpr int kBoxBytes = 64 * 128;          // one box of W (of X: ROWS * 128)
constexpr int kMaxBoxes = 6;                 // K boxes of a slice at most
constexpr int kMaxSplits = 8;                // a cluster's CTAs at most (the portable limit)
constexpr int kThreads = 128;                // one warpgroup
// the layernorm folded in (from the row statistics) up to this many rows: above, the layernorm
// kernel before this one measured faster (batch 64: 117.3K tokens/s folded, 122.3K as two
// kernels; 9-32 rows +3-7% folded; docs/PERF.md, fifteenth session, call 10)
constexpr int kFoldRows = 32;

// A measuring tool (off by default): a build with -DDECODE_GEMM_PROBE=P skips a stage, so that a
// timeline of the decode step shows what the stage costs (the outputs are then wrong): 1 returns
// right after pdl_wait (the launch and the boundary alone), 2 does not wait for the input rows, 3
// skips the exchange between the slices (no cluster barrier; each CTA finishes its rows from its
// own part).
#ifndef DECODE_GEMM_PROBE
#define DECODE_GEMM_PROBE 0
#endif
// Another, to time against: the most K slices splits_for picks where fewer fit (a build with
// -DDECODE_GEMM_SPLITS=S, 1 to 8; by default kMaxSplits, the rule as measured). Fewer slices
// are less of the exchange between them and more input rows a CTA: the two waits of a 64-row
// call (13.9% and 23.6% of its stall samples, docs/PERF.md, twenty-third session).
#ifndef DECODE_GEMM_SPLITS
#define DECODE_GEMM_SPLITS kMaxSplits
#endif
static_assert(DECODE_GEMM_SPLITS >= 1 && DECODE_GEMM_SPLITS <= kMaxSplits, "DECODE_GEMM_SPLITS: 1 to 8");

enum Epilogue { kBias, kBiasGelu, kBiasResidual };

struct Args {
    bf16 *out;                 // (N, OC); for kBiasResidual the residual, added to in place
    const bf16 *bias;          // (OC)
    const bf16 *lnw, *lnb;     // (K): inp layer-normed first (the LN instantiations), with
    const float2 *stats_in;    // (N, K / 64) its rows' statistics (row_statistics)
    float2 *stats_out;         // kBiasResidual: (N, OC / 64) the output rows' statistics, or null
    int N, K, OC, epilogue;
};

// The layernorm of the input rows, folded into the matmul after them (LN), from the statistics
// that the residual call which wrote the rows left (this kernel's epilogue with stats_out): per
// row and 64-column piece t, its mean m_t and sum of squared deviations M2_t. Combined in piece
// order (Chan, Golub and LeVeque's pairwise update, all pieces of 64): mean = sum m_t / T,
// M2 = sum (M2_t + 64 (m_t - mean)^2), rstd = 1 / sqrt(M2 / K + eps), as layernorm.cu's two
// passes give them up to the order of the sums. Thread (row r = tid / TPR, sub = tid % TPR) takes
// the row's pieces sub, sub + TPR, .. (then the TPR threads' sums added by shuffles) and its
// 16-byte chunks sub, sub + TPR, .. of the CTA's slice (TPR = 128 / ROWS threads a row,
// consecutive lanes). Rows past N have no statistics: zeros (their outputs are never written).
constexpr int kMaxPieces = 32;   // 64-column pieces of a layer-normed row at most (K <= 2,048)

template <int ROWS>
__device__ __forceinline__ void row_statistics(const float2 *stats, int N, int K, float &m, float &rs) {
    constexpr int TPR = kThreads / ROWS, kPer = (kMaxPieces + TPR - 1) / TPR;
    const int r = threadIdx.x / TPR, sub = threadIdx.x % TPR, T = K / kChannels;
    float2 p[kPer];   // this thread's pieces, all loads in flight at once (through L2: the kernel
                      // before wrote them)
#pragma unroll
    for (int i = 0; i < kPer; i++) {
        const int t = sub + TPR * i;
        p[i] = r < N && t < T ? __ldcg(stats + (size_t)r * T + t) : make_float2(0.0f, 0.0f);
    }
    auto row_sum = [&](float v) {   // over the row's TPR threads
#pragma unroll
        for (int o = TPR / 2; o >= 1; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        return v;
    };
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; i++) sum += p[i].x;
    m = row_sum(sum) / T;
    float m2 = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; i++)
        if (sub + TPR * i < T) m2 += p[i].y + kChannels * (p[i].x - m) * (p[i].x - m);
    rs = rsqrtf(row_sum(m2) / K + LAYERNORM_EPS);
}

// the CTA's slice of the input rows (BOXES boxes of X at x_tile) layer-normed in place, with the
// row's mean m and rstd rs (row_statistics), the slice's weights ln_w, ln_b
template <int ROWS, int BOXES>
__device__ __forceinline__ void normalise_slice(unsigned char *x_tile, const bf16 *ln_w, const bf16 *ln_b,
                                                float m, float rs) {
    constexpr int TPR = kThreads / ROWS, kChunks = BOXES * 8 / TPR;   // a thread's chunks
    const int r = threadIdx.x / TPR, sub = threadIdx.x % TPR;
#pragma unroll
    for (int i = 0; i < kChunks; i++) {
        const int cc = sub + TPR * i;   // box cc / 8, 16-byte piece cc % 8 of row r
        int4 *chunk = reinterpret_cast<int4 *>(x_tile + (cc / 8) * ROWS * 128 + swizzle_128b(r, (cc % 8) * 16));
        float xv[8], wv[8], bv[8], y[8];
        unpack_bf16<8>(xv, *chunk);
        load_bf16<8>(wv, ln_w + 8 * cc);
        load_bf16<8>(bv, ln_b + 8 * cc);
#pragma unroll
        for (int k = 0; k < 8; k++) y[k] = (xv[k] - m) * rs * wv[k] + bv[k];
        store_bf16<8>(reinterpret_cast<bf16 *>(chunk), y);
    }
    fence_proxy_async_shared();   // the normalised slice, visible to wgmma
    __syncthreads();
}

// The slices' sums of the tile in shared memory, as blocks of rows_per rows by the CTA that finishes
// them: row n is finished by rank o = n % SPLITS, as its j = n / SPLITS-th row. A CTA stages its
// own sums as staged[o][j][64] (block o goes to rank o) and receives the others' blocks as
// parts[s][j][64] (block s from rank s). The channel is swizzled by (n / 2) % 4, so that both the
// accumulators' stores (a warp: 8 channels x 4 rows 2 apart) and the epilogue's float2 reads (a
// warp: one row's 64 channels) fall on 32 different banks.
__device__ __forceinline__ int block_at(int o, int j, int rows_per, int n, int c) {
    return (o * rows_per + j) * kChannels + (c ^ (((n >> 1) & 3) << 3));
}

// the bytes of the boxes of W and X (rows of them), or of the staged sums over them where those
// need more
__host__ __device__ constexpr int boxes_bytes(int boxes, int rows, int N, int splits) {
    return boxes * (kBoxBytes + rows * 128) > (N + splits - 1) / splits * splits * kChannels * 4
               ? boxes * (kBoxBytes + rows * 128)
               : (N + splits - 1) / splits * splits * kChannels * 4;
}

template <int ROWS, int SPLITS, int BOXES, bool LN>
__global__ void __launch_bounds__(kThreads, 1)
    decode_gemm_kernel(const __grid_constant__ CUtensorMap w_map,   // weight, 64 x 64 boxes
                       const __grid_constant__ CUtensorMap x_map,   // inp, ROWS x 64 boxes
                       const Args a) {
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    constexpr int kXBoxBytes = ROWS * 128;                    // one box of X
    constexpr int kRowsPer = (ROWS + SPLITS - 1) / SPLITS;    // rows a CTA finishes, at most
    constexpr int kRounds = (kRowsPer + 3) / 4;                // of them a warp's, at most
    constexpr bool kExchange = SPLITS > 1 && DECODE_GEMM_PROBE != 3;   // (3: a probe, above)
    const int rank = (int)cluster.block_rank(), N = a.N;
    const int ch0 = blockIdx.x / SPLITS * kChannels, col0 = rank * BOXES * kBoxCols;
    const int rows_per = (N + SPLITS - 1) / SPLITS;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    extern __shared__ unsigned char smem_raw[];
    __shared__ uint64_t w_full, x_full, parts_full;
    __shared__ __align__(16) bf16 ln_w[LN ? BOXES * kBoxCols : 1], ln_b[LN ? BOXES * kBoxCols : 1];
    unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    const uint32_t w_tile = smem_addr(smem), x_tile = w_tile + BOXES * kBoxBytes;   // 1024-aligned
    // this CTA's sums, over the boxes once its products have read them; the other slices' parts
    // after the boxes (they may come while this CTA's products still read its boxes)
    float *staged = reinterpret_cast<float *>(smem);
    float *parts = reinterpret_cast<float *>(smem + boxes_bytes(BOXES, ROWS, N, SPLITS));
    const uint32_t block_bytes = rows_per * kChannels * 4;

    // the weights and the bias of this thread's two channels, 2 lane.., before the wait: they do
    // not depend on the kernel before
    if (threadIdx.x == 0) {
        prefetch_tensormap(&x_map);
        mbar_init(&w_full, 1);
        mbar_init(&x_full, 1);
        mbar_init(&parts_full, 1);
        mbar_fence_init();
        if (kExchange) mbar_arrive_expect_tx(&parts_full, (SPLITS - 1) * block_bytes);
        mbar_arrive_expect_tx(&w_full, BOXES * kBoxBytes);
        for (int b = 0; b < BOXES; b++)
            tma_load_4d(w_tile + b * kBoxBytes, &w_map, &w_full, col0 + b * kBoxCols, 0, ch0, 0);
    }
    const int c = 2 * lane;
    const __nv_bfloat162 bias = *reinterpret_cast<const __nv_bfloat162 *>(a.bias + ch0 + c);
    if (LN && threadIdx.x < BOXES * 16) {   // the layernorm's weights of the slice, 16 bytes a thread
        const int v = threadIdx.x % (BOXES * 8);
        const bf16 *src = (threadIdx.x < BOXES * 8 ? a.lnw : a.lnb) + col0 + 8 * v;
        *reinterpret_cast<int4 *>((threadIdx.x < BOXES * 8 ? ln_w : ln_b) + 8 * v) =
            *reinterpret_cast<const int4 *>(src);
    }
    __syncthreads();   // the barriers are initialised
    // ... and the other slices may copy into this CTA once it says so: this arrival, waited for
    // before the copies (relaxed: thread 0's fence above has released the barriers' init)
    if (kExchange) cluster_arrive_relaxed();
    pdl_launch_dependents();
    pdl_wait();
    if (DECODE_GEMM_PROBE == 1) {
        mbar_wait(&w_full, 0);
        return;
    }
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(&x_full, BOXES * kXBoxBytes);
        for (int b = 0; b < BOXES; b++)
            tma_load_4d(x_tile + b * kXBoxBytes, &x_map, &x_full, col0 + b * kBoxCols, 0, 0, 0);
    }
    // the residual of the rows this thread finishes (rows rank + SPLITS j, j = warp + 4 k), in
    // flight while the products run
    __nv_bfloat162 res[kRounds];
#pragma unroll
    for (int k = 0; k < kRounds; k++) {
        const int n = rank + SPLITS * (warp + 4 * k);
        if (a.epilogue == kBiasResidual && n < N)
            res[k] = *reinterpret_cast<const __nv_bfloat162 *>(a.out + (size_t)n * a.OC + ch0 + c);
    }

    // the layernorm's statistics of this thread's row, while the input rows load
    float ln_m = 0.0f, ln_rs = 0.0f;
    if (LN) row_statistics<ROWS>(a.stats_in, N, a.K, ln_m, ln_rs);

    // acc = W X^T over the slice: box b's k-step ks at byte 32 ks of its 128-byte rows
    float acc[ROWS / 2];
#pragma unroll
    for (int i = 0; i < ROWS / 2; i++) acc[i] = 0.0f;
    if (DECODE_GEMM_PROBE != 2) mbar_wait(&x_full, 0);
    if (LN) normalise_slice<ROWS, BOXES>(smem + BOXES * kBoxBytes, ln_w, ln_b, ln_m, ln_rs);
    mbar_wait(&w_full, 0);
    const uint64_t dw = smem_desc(w_tile, 16, 1024), dx = smem_desc(x_tile, 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int b = 0; b < BOXES; b++)
#pragma unroll
        for (int ks = 0; ks < kBoxCols / 16; ks++)
            wgmma_ss<0>(acc, desc_advance(dw, b * kBoxBytes + 32 * ks),
                        desc_advance(dx, b * kXBoxBytes + 32 * ks), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc);

    // the sums staged by the rank that finishes their rows (register i: row 2t + col(i), channel
    // 16 warp + g + row(i); rows past N are zeros and go nowhere), over the boxes: every warp's
    // products are done (the barrier)
    __syncthreads();
#pragma unroll
    for (int i = 0; i < ROWS / 2; i++) {
        const int n = 2 * t + Frag::col(i), ch = 16 * warp + g + Frag::row(i);
        if (n < N) staged[block_at(n % SPLITS, n / SPLITS, rows_per, n, ch)] = acc[i];
    }
    if (kExchange) {
        // each other rank's block, one bulk copy into its parts (the copy engine moves it; the
        // scalar stores of 16 KB into other CTAs' shared memory cost some 2 us a call, docs/PERF.md),
        // once every CTA of the cluster runs; then the blocks of the others into this one's
        fence_proxy_async_shared();   // the staged sums, visible to the copies
        cluster_wait();
        __syncthreads();
        if (threadIdx.x == 0)
            for (int o = 0; o < SPLITS; o++)
                if (o != rank)
                    bulk_copy_to_cta(cluster_map(smem_addr(parts) + rank * block_bytes, o),
                                     smem_addr(staged) + o * block_bytes, block_bytes,
                                     cluster_map(smem_addr(&parts_full), o));
        mbar_wait(&parts_full, 0);
        // this CTA's parts are in, so its copies into the others are too (they were issued
        // first): its staging may go once every CTA says so, waited for before the exit
        cluster_arrive_relaxed();
    } else {
        __syncthreads();
    }

    // this CTA's rows: a warp a row, a lane two channels; the slices added in rank order
#pragma unroll
    for (int k = 0; k < kRounds; k++) {
        const int j = warp + 4 * k, n = rank + SPLITS * j;
        if (n >= N) break;
        float x = 0.0f, y = 0.0f;
#pragma unroll
        for (int s = 0; s < SPLITS; s++) {
            const float *from = s == rank || !kExchange ? staged + block_at(rank, j, rows_per, n, c)
                                                        : parts + block_at(s, j, rows_per, n, c);
            const float2 p = *reinterpret_cast<const float2 *>(from);
            x += p.x;
            y += p.y;
        }
        x += __bfloat162float(bias.x);
        y += __bfloat162float(bias.y);
        __nv_bfloat162 *out = reinterpret_cast<__nv_bfloat162 *>(a.out + (size_t)n * a.OC + ch0 + c);
        if (a.epilogue == kBias) {
            *out = __floats2bfloat162_rn(x, y);
        } else if (a.epilogue == kBiasGelu) {
            *out = __floats2bfloat162_rn(gelu_value(round_bf16(x)), gelu_value(round_bf16(y)));
        } else {
            const __nv_bfloat162 o = __floats2bfloat162_rn(__bfloat162float(res[k].x) + round_bf16(x),
                                                           __bfloat162float(res[k].y) + round_bf16(y));
            *out = o;
            if (a.stats_out) {   // the row's 64 new values: their mean and squares about it
                const float y0 = __bfloat162float(o.x), y1 = __bfloat162float(o.y);
                const float mt = warp_allreduce_sum(y0 + y1) * (1.0f / kChannels);
                const float m2 = warp_allreduce_sum((y0 - mt) * (y0 - mt) + (y1 - mt) * (y1 - mt));
                if (lane == 0) a.stats_out[(size_t)n * (a.OC / kChannels) + ch0 / kChannels] = make_float2(mt, m2);
            }
        }
    }
    if (kExchange) cluster_wait();   // every copy out of this CTA's staging is done
    if (DECODE_GEMM_PROBE == 2) mbar_wait(&x_full, 0);   // no copy left in flight at the exit
}

// K slices of a call (a divisor of K / 64, at most kMaxSplits and kMaxBoxes boxes a slice): the
// most that keep the grid within 1.1 CTAs an SM (and DECODE_GEMM_SPLITS), or the fewest that fit;
// 0: none fits
int splits_for(int K, int OC) {
    const int boxes = K / kBoxCols, tiles = OC / kChannels;
    int pick = 0;
    for (int s = 1; s <= kMaxSplits; s++) {
        if (boxes % s || boxes / s > kMaxBoxes) continue;
        if (!pick || (tiles * s * 10 <= cuda_num_sms * 11 && s <= DECODE_GEMM_SPLITS)) pick = s;
    }
    return pick;
}

// the shared memory of a call: the boxes of W and X (or the staged sums over them, where those
// need more: SPLITS blocks of rows_per rows of 64 fp32 sums, at most 71 rows), then the parts (as
// many), + the 1024-byte alignment
size_t smem_bytes(int boxes, int rows, int N, int splits) {
    return 1024 + boxes_bytes(boxes, rows, N, splits) + (size_t)ceil_div(N, splits) * splits * kChannels * 4;
}
constexpr size_t kSmemMax = 1024 + (size_t)2 * kMaxBoxes * kBoxBytes + (kRows + kMaxSplits - 1) * kChannels * 4;

// a grid of OC / 64 tiles x SPLITS slices of BOXES boxes, each tile's slices one cluster; the
// run-time (rows, splits, boxes) to their instantiation, one switch each
template <int ROWS, int SPLITS, int BOXES, bool LN>
void launch(const CUtensorMap &w_map, const CUtensorMap &x_map, const Args &a) {
    auto kernel = decode_gemm_kernel<ROWS, SPLITS, BOXES, LN>;
    static bool asked = false;   // past the 48 KiB a kernel gets without asking
    if (!asked) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmemMax));
        asked = true;
    }
    launch_pdl_cluster(kernel, a.OC / kChannels * SPLITS, kThreads, smem_bytes(BOXES, ROWS, a.N, SPLITS),
                       SPLITS, w_map, x_map, a);
}
template <int ROWS, int SPLITS, int BOXES>
void launch(const CUtensorMap &w_map, const CUtensorMap &x_map, const Args &a) {
    if (a.lnw) launch<ROWS, SPLITS, BOXES, true>(w_map, x_map, a);
    else launch<ROWS, SPLITS, BOXES, false>(w_map, x_map, a);
}
template <int ROWS, int SPLITS>
void launch(const CUtensorMap &w_map, const CUtensorMap &x_map, const Args &a, int boxes) {
    switch (boxes) {
    case 1: launch<ROWS, SPLITS, 1>(w_map, x_map, a); break;
    case 2: launch<ROWS, SPLITS, 2>(w_map, x_map, a); break;
    case 3: launch<ROWS, SPLITS, 3>(w_map, x_map, a); break;
    case 4: launch<ROWS, SPLITS, 4>(w_map, x_map, a); break;
    case 5: launch<ROWS, SPLITS, 5>(w_map, x_map, a); break;
    default: launch<ROWS, SPLITS, 6>(w_map, x_map, a); break;
    }
}
template <int ROWS>
void launch(const CUtensorMap &w_map, const CUtensorMap &x_map, const Args &a, int splits, int boxes) {
    switch (splits) {
    case 1: launch<ROWS, 1>(w_map, x_map, a, boxes); break;
    case 2: launch<ROWS, 2>(w_map, x_map, a, boxes); break;
    case 3: launch<ROWS, 3>(w_map, x_map, a, boxes); break;
    case 4: launch<ROWS, 4>(w_map, x_map, a, boxes); break;
    case 5: launch<ROWS, 5>(w_map, x_map, a, boxes); break;
    case 6: launch<ROWS, 6>(w_map, x_map, a, boxes); break;
    case 7: launch<ROWS, 7>(w_map, x_map, a, boxes); break;
    default: launch<ROWS, 8>(w_map, x_map, a, boxes); break;
    }
}

// the tile's rows: N rounded up to 16, 32 or 64 (wgmma's N; the X boxes' rows)
int tile_rows(int N) { return N <= 16 ? 16 : N <= 32 ? 32 : 64; }

// ---- the LM head: decode_lm_head_kernel ---------------------------------------------------------
// logits (N, Vp) = x (N, K) wte^T rounded to bf16, and argmax (N) over the first V columns of
// each row, at 9-64 rows (x: the final layernorm's output, from the layernorm kernel before).
//
// Why a kernel of its own: at these rows the LM head was cuBLASLt's GEMM (22.9 us for wte's 77 MB)
// and then logits_argmax (5.4-6.6 us), one after the other on the critical path of every step,
// alone after the parts join. Here the argmax rides in the GEMM's epilogue. The matmuls' kernel
// above holds a CTA's whole share of the weights at once, one tile a CTA: for the LM head's 786
// tiles of 64 vocabulary rows that would be six waves of it. So this one is persistent (one CTA an
// SM, tiles blockIdx.x, + gridDim.x, ...) and streams wte through a ring, the first kHeadStages
// boxes before pdl_wait (wte does not depend on the kernel before: they load while the layernorm
// runs):
//
//   x (N, K)   ──TMA, once, after pdl_wait──► X: K / 64 boxes of ROWS x 64 (rows past N zeros)
//   wte (Vp, K) ──TMA, producer warp──► ring of kHeadStages boxes of 64 channels x 64 columns
//      full[s]: the box landed   empty[s]: the consumer warpgroup's products have read it
//   consumer warpgroup, per tile: acc (64 channels x ROWS rows, fp32) = sum over boxes of W X^T
//      (wgmma m64nROWSk16, both K-major, as the kernel above), then the logits rounded to bf16 and
//      stored, and each thread's best (logit, channel) per row kept in registers across its tiles
//   after the last tile: each row's best over the warp's lanes (shuffles), the warpgroup's
//      (shared memory), the grid's by one atomicMax of best_key a row (any order gives the same
//      key); the last CTA to finish (the counter) turns the keys into argmax and zeroes them
//
// Measured (docs/PERF.md, twenty-fifth session): the ring alone streams wte in about 23 us,
// cuBLASLt's pace, whatever the boxes' size or the ring's depth (a form with wte loaded into
// registers as wgmma's A operand was slower); the kernel takes 24.5-27 us alone at 16-64 rows, and
// the step's LM head ends about 4 us sooner than the GEMM and the argmax kernel did (+1-3% tokens/s
// at batch 9-64). Its logits came out the same bits as cuBLASLt's at 9-64 rows (both sum K in
// order on the tensor cores); the argmax is the first argmax of the logits written, as
// logits_argmax's.
constexpr int kHeadStages = 12;              // boxes of wte in flight a CTA: 96 KB, 12.7 MB on 132 SMs
constexpr int kHeadRows = 64;                // the most rows it takes (X in shared memory beside the ring)
constexpr int kHeadThreads = kThreads + 32;  // the consumer warpgroup and the producer warp

struct HeadArgs {
    bf16 *logits;               // (N, Vp)
    unsigned long long *keys;   // (N) each row's best_key so far; zeros between calls
    unsigned *counter;          // CTAs done; zero between calls
    int *argmax;                // (N)
    int N, K, Vp, V;
};

template <int ROWS>
__global__ void __launch_bounds__(kHeadThreads, 1)
    decode_lm_head_kernel(const __grid_constant__ CUtensorMap w_map,   // wte, 64 x 64 boxes
                          const __grid_constant__ CUtensorMap x_map,   // x, ROWS x 64 boxes
                          const HeadArgs a) {
    constexpr int kXBoxBytes = ROWS * 128;   // one box of X
    constexpr int kBest = ROWS / 4;          // the rows a thread holds: 2t + 8 (j / 2) + j % 2
    const int boxes = a.K / kBoxCols, N = a.N;
    const int my_tiles = (a.Vp / kChannels - blockIdx.x + gridDim.x - 1) / gridDim.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    extern __shared__ unsigned char smem_raw[];
    __shared__ uint64_t full[kHeadStages], empty[kHeadStages], x_full;
    __shared__ float warp_v[4][ROWS];
    __shared__ int warp_i[4][ROWS];
    __shared__ bool last;
    unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    const uint32_t x_tile = smem_addr(smem), w_ring = x_tile + boxes * kXBoxBytes;   // 1024-aligned

    if (threadIdx.x == 0) {
        prefetch_tensormap(&x_map);
        for (int s = 0; s < kHeadStages; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], kThreads);
        }
        mbar_init(&x_full, 1);
        mbar_fence_init();
    }
    __syncthreads();   // the barriers are initialised
    // the kernels after it start only after its wait (layers.h: the next decode step's read the
    // cache before their waits)

    if (warp == 4) {
        // the producer: the CTA's boxes in order, box b of its k-th tile at step k * boxes + b;
        // the first kHeadStages issued at once, before the wait
        if (lane == 0)
            for (int step = 0; step < my_tiles * boxes; step++) {
                const RingSlot<kHeadStages> s(step);
                const int tile = blockIdx.x + gridDim.x * (step / boxes);
                mbar_wait(&empty[s.stage], s.parity ^ 1);
                mbar_arrive_expect_tx(&full[s.stage], kBoxBytes);
                tma_load_4d(w_ring + s.stage * kBoxBytes, &w_map, &full[s.stage], (step % boxes) * kBoxCols, 0,
                            tile * kChannels, 0);
            }
        __syncwarp();
        pdl_wait();
        pdl_launch_dependents();
    } else {
        pdl_wait();
        pdl_launch_dependents();
        if (threadIdx.x == 0) {
            mbar_arrive_expect_tx(&x_full, boxes * kXBoxBytes);
            for (int b = 0; b < boxes; b++) tma_load_4d(x_tile + b * kXBoxBytes, &x_map, &x_full, b * kBoxCols, 0, 0, 0);
        }
        float best_v[kBest];
        int best_i[kBest];
#pragma unroll
        for (int j = 0; j < kBest; j++) { best_v[j] = -FLT_MAX; best_i[j] = 0x7fffffff; }
        float acc[ROWS / 2];
        const uint64_t dw = smem_desc(w_ring, 16, 1024), dx = smem_desc(x_tile, 16, 1024);
        mbar_wait(&x_full, 0);
        // the ring's stage and its parity, counted along (as RingSlot(step) without a division)
        int stage = 0, prev = 0;
        uint32_t parity = 0;
        for (int k = 0; k < my_tiles; k++) {
            // acc = W X^T over the boxes; a box's stage given back once the next box's products
            // are issued and its own done
            for (int b = 0; b < boxes; b++) {
                mbar_wait(&full[stage], parity);
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < kBoxCols / 16; ks++)
                    wgmma_ss<0>(acc, desc_advance(dw, stage * kBoxBytes + 32 * ks),
                                desc_advance(dx, b * kXBoxBytes + 32 * ks), b > 0 || ks > 0);
                wgmma_commit();
                if (b > 0) {
                    wgmma_wait<1>();
                    mbar_arrive(&empty[prev]);
                }
                prev = stage;
                if (++stage == kHeadStages) { stage = 0; parity ^= 1; }
            }
            wgmma_wait<0>();
            fence_regs(acc);
            mbar_arrive(&empty[prev]);
            // register i: row n = 2t + col(i), channel ch0 + row(i). Without branches: the store
            // predicated on n < N, and the best kept with a plain `>`: a thread's candidates come
            // in increasing channel order (its tiles, then row(i) 0 before 8), so a strictly
            // larger value is `better`'s choice (a profile at 64 rows had this epilogue, with a
            // branch an element, at 600 instructions a tile, a third of the kernel's samples)
            const int ch0 = (blockIdx.x + gridDim.x * k) * kChannels + 16 * warp + g;
            bf16 *out = a.logits + (size_t)(2 * t) * a.Vp + ch0;
#pragma unroll
            for (int i = 0; i < ROWS / 2; i++) {
                const int j = (i >> 2) * 2 + (i & 1), ch = ch0 + Frag::row(i);
                const bf16 logit = __float2bfloat16_rn(acc[i]);
                if (2 * t + Frag::col(i) < N) out[(size_t)Frag::col(i) * a.Vp + Frag::row(i)] = logit;
                const float v = ch < a.V ? __bfloat162float(logit) : -FLT_MAX;
                if (v > best_v[j]) { best_v[j] = v; best_i[j] = ch; }
            }
        }
        // each row's best over the warp's 8 lanes g that hold it, then into shared memory
#pragma unroll
        for (int j = 0; j < kBest; j++) {
            warp_best(best_v[j], best_i[j], 4);
            const int n = 2 * t + 8 * (j / 2) + j % 2;
            if (g == 0) { warp_v[warp][n] = best_v[j]; warp_i[warp][n] = best_i[j]; }
        }
    }
    __syncthreads();
    if (threadIdx.x < N) {   // the CTA's best of row n, into the grid's
        const int n = threadIdx.x;
        float v = warp_v[0][n];
        int i = warp_i[0][n];
        for (int w = 1; w < 4; w++)
            if (better(warp_v[w][n], warp_i[w][n], v, i)) { v = warp_v[w][n]; i = warp_i[w][n]; }
        atomicMax(a.keys + n, best_key(v, i));
    }
    __syncthreads();
    if (threadIdx.x == 0) {   // the last-block pattern of runtime/cuda_common.cuh
        last = atomic_add_acq_rel(a.counter, 1u) == gridDim.x - 1;
        if (last) *a.counter = 0;   // for the next call (stream-ordered after this kernel)
    }
    __syncthreads();
    if (!last || threadIdx.x >= N) return;
    const int n = threadIdx.x, index = best_key_index(__ldcg(a.keys + n));
    a.keys[n] = 0;   // for the next call
    a.argmax[n] = index < a.V ? index : 0;   // a row of NaNs: index 0, as logits_argmax
}

// the LM head's shared memory: X's boxes, the ring, + the 1024-byte alignment
size_t head_smem_bytes(int K, int rows) { return 1024 + (size_t)K / kBoxCols * rows * 128 + kHeadStages * kBoxBytes; }
constexpr size_t kHeadSmemMax = 200 * 1024;   // of the 227 KB a CTA may have, beside the static

template <int ROWS>
void launch_head(const CUtensorMap &w_map, const CUtensorMap &x_map, const HeadArgs &a) {
    auto kernel = decode_lm_head_kernel<ROWS>;
    static bool asked = false;   // past the 48 KiB a kernel gets without asking
    if (!asked) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kHeadSmemMax));
        asked = true;
    }
    const int tiles = a.Vp / kChannels, grid = tiles < cuda_num_sms ? tiles : cuda_num_sms;
    launch_pdl(kernel, grid, kHeadThreads, head_smem_bytes(a.K, ROWS), w_map, x_map, a);
}
}  // namespace

bool decode_gemm_sm90_enabled() {
    static const bool enabled = cuda_is_sm90() && env_flag("DECODE_GEMM_SM90", 1);
    return enabled;
}

bool decode_gemm_sm90_folds_layernorm(int N) { return decode_gemm_sm90_enabled() && N <= kFoldRows; }

int decode_gemm_sm90_tile_rows(int N) { return tile_rows(N); }

bool decode_gemm_sm90_shape_fits(int N, int K, int OC) {
    return N >= 1 && N <= kRows && K % kBoxCols == 0 && OC % kChannels == 0 &&
           decode_gemm_sm90_enabled() && splits_for(K, OC) > 0;
}

bool decode_gemm_sm90_fits(int N, int K, int OC, const void *inp, const void *weight,
                           const void *bias, const void *out, const void *lnw, const void *lnb,
                           const float *stats_in) {
    return decode_gemm_sm90_shape_fits(N, K, OC) && bias && is_aligned16(inp) &&
           is_aligned16(weight) && (uintptr_t)bias % 4 == 0 && (uintptr_t)out % 4 == 0 &&
           !lnw == !lnb && !lnw == !stats_in && is_aligned16(lnw) && is_aligned16(lnb) &&
           (uintptr_t)stats_in % 8 == 0 &&
           (!lnw || (K / kChannels <= kMaxPieces && N <= kFoldRows));
}

void decode_gemm_sm90(floatX *out, const floatX *inp, const floatX *lnw, const floatX *lnb,
                      const float *stats_in, const floatX *weight, const floatX *bias, int N, int K,
                      int OC, int gelu, int residual, float *stats_out) {
    if (!decode_gemm_sm90_fits(N, K, OC, inp, weight, bias, out, lnw, lnb, stats_in) ||
        (stats_out && (!residual || (uintptr_t)stats_out % 8 || N > kFoldRows)))
        die("decode_gemm_sm90: N %d, K %d, OC %d do not fit (decode_gemm_sm90_fits)", N, K, OC);
    const int splits = splits_for(K, OC), boxes = K / kBoxCols / splits;
    const CUtensorMap w_map =
        *tensor_map_4d(weight, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, K, 1, OC, 1, kBoxCols, kChannels);
    const int rows = tile_rows(N);
    const CUtensorMap x_map =
        *tensor_map_4d(inp, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, K, 1, N, 1, kBoxCols, rows);
    const Args a = {BF(out), CBF(bias), CBF(lnw), CBF(lnb),
                    reinterpret_cast<const float2 *>(stats_in), reinterpret_cast<float2 *>(stats_out),
                    N, K, OC, residual ? kBiasResidual : gelu ? kBiasGelu : kBias};
    if (rows == 16) launch<16>(w_map, x_map, a, splits, boxes);
    else if (rows == 32) launch<32>(w_map, x_map, a, splits, boxes);
    else launch<64>(w_map, x_map, a, splits, boxes);
    LAUNCH_CHECK();
}

bool decode_lm_head_sm90_fits(int N, int K, int Vp, const void *inp, const void *wte, const void *logits) {
    return decode_gemm_sm90_enabled() && N > FUSED_MAX_ROWS && N <= kHeadRows && K % kBoxCols == 0 &&
           Vp % kChannels == 0 && head_smem_bytes(K, tile_rows(N)) <= kHeadSmemMax && is_aligned16(inp) &&
           is_aligned16(wte) && (uintptr_t)logits % 2 == 0;
}

void decode_lm_head_sm90(floatX *logits, int *argmax, unsigned *counter, unsigned long long *keys,
                         const floatX *inp, const floatX *wte, int N, int K, int V, int Vp) {
    if (!decode_lm_head_sm90_fits(N, K, Vp, inp, wte, logits) || (uintptr_t)keys % 8)
        die("decode_lm_head_sm90: N %d, K %d, Vp %d do not fit (decode_lm_head_sm90_fits)", N, K, Vp);
    const CUtensorMap w_map =
        *tensor_map_4d(wte, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, K, 1, Vp, 1, kBoxCols, kChannels);
    const int rows = tile_rows(N);
    const CUtensorMap x_map =
        *tensor_map_4d(inp, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, K, 1, N, 1, kBoxCols, rows);
    const HeadArgs a = {BF(logits), keys, counter, argmax, N, K, Vp, V};
    if (rows == 16) launch_head<16>(w_map, x_map, a);
    else if (rows == 32) launch_head<32>(w_map, x_map, a);
    else launch_head<64>(w_map, x_map, a);
    LAUNCH_CHECK();
}
