// decode_layers_sm90.cu: the decode step's layers at one row on Hopper, two kernels a layer,
// each a grid of thread-block clusters:
//   qkv_attention_kernel   the layer before's FC projection parts summed into the row (from the
//                          second layer on), layernorm + QKV + attention + the attention
//                          projection's part of each head: a cluster of kRanks CTAs a head
//   residual_fc_kernel     the attention projection's parts summed into the row, layernorm + FC +
//                          GELU + the FC projection's part of each cluster: clusters of kRanks
//                          CTAs, each cluster the whole row
// The last layer's FC kernel leaves the FC projection to the caller (fused.cu's GEMV: +0.9% over
// its parts and a kernel summing them into x, docs/PERF.md, twenty-seventh session, call 10),
// then the LM head.
//
// Why: at batch 1 a decode step's time is its kernel boundaries and each kernel's chain of
// latencies after its wait, not its bytes (docs/PERF.md, thirteenth session: the QKV GEMV 2.2 us
// on the step's path, the attention kernel after it 2.4 us for some 100 KB a head). But the
// attention of head h needs only head h's q, k and v, 192 of the QKV's 3C outputs. So the 8 CTAs
// of head h's cluster compute those 192 (24 each, with the GEMV's plan, fused.cu: the weights
// loaded before pdl_wait, the row layer-normed in shared memory, a warp's 4 sums reduced
// together), give them to each other through the cluster's shared memory, and attend to the
// cache's positions split 8 ways; rank 0 merges the 8 partial results into the head's 64
// outputs. No grid-wide boundary between the QKV and the attention, no partial results through
// L2. The exchanges are st.async stores that complete on the receiver's mbarrier: with a cluster
// barrier for each (whose arrival releases the CTA's global stores too) the kernel was 4.3 us on
// the path, with these 3.4, and the QKV GEMV alone 2.2 (docs/PERF.md, twenty-sixth session: batch
// 1 5.8K -> 6.6K tokens/s).
// The attention projection (C outputs from all the heads' 64) was a GEMV kernel of its own, 1.8
// us on the path. Now rank 0 hands the head's 64 outputs to its ranks, and each rank multiplies
// them by its C / 8 rows of the projection's 64 columns of head h (prefetched into shared memory
// before the wait): the head's part of the projection, (NH, C) fp32 partials in all. The kernel
// after it sums them: each of its clusters' ranks sums the NH parts of its eighth of the row (in
// head order: the same bits every run), adds the bias and the residual, and hands its eighth to
// every rank of its cluster, so each CTA has the whole new row for the layernorm and its FC rows
// without a grid-wide boundary. The FC projection (C outputs from 4C) the same way: each CTA of
// the FC kernel multiplies its 16 hidden units by their columns of fcproj, each cluster sums its
// CTAs' products into its part, (C / 32, C) fp32, and the next layer's cluster kernel sums the parts
// into the row as the FC kernel sums the heads'. So a layer is two kernels where it was four (a
// GEMV each for the projections): 9.9 -> 8.7 us on the step's path (docs/PERF.md, twenty-seventh
// session; fcproj's 4.7 MB, now asked for one kernel ahead with the FC's, cost most of what the
// FC projection's boundary saved: without them the step measured 9.8% faster).
//
// qkv_attention_kernel, head h, rank r of the cluster (6 warps; w: warp):
//   before pdl_wait  the weight rows of outputs i = 24 r + 4 w + (0..3) of the head's [q | k | v]
//                    (row (i / 64) C + 64 h + i % 64 of the QKV matrix), their biases, the
//                    layernorm's weights; the first round of the cache rows of the rank's
//                    positions [r chunk, (r + 1) chunk), chunk = ceil(len / 8); cp.async of the
//                    projection's rows [r C / 8, (r + 1) C / 8), columns [64 h, 64 h + 64)
//   after it         the row -> shared memory: inp at the first layer, else inp + the layer
//                    before's FC projection parts, rank r its eighth, to every rank (head 0's
//                    cluster also leaves it in x_in, the residual for the kernel after); warp 0
//                    layer-norms it in place; the
//                    products; lane 8k of warp w holds output i = 24 r + 4 w + k: bf16(sum +
//                    bias), two by two, into every rank's head_qkv[i] (st.async into
//                    distributed shared memory, completing on the receiver's barrier), and for
//                    k and v into the caches at the new position
//   qkv_full         every rank holds the head's q, k, v (each waits on its own barrier)
//   attention        the rank's positions as decode_attention.cu's split kernel takes a split:
//                    a group of 8 lanes a cache row (8 channels a lane), kRows rows a group a
//                    round, the next round's loads in flight during this one's math, the online
//                    softmax in the exp2 domain; the new position's k, v from head_qkv; the
//                    groups merged by shuffles, the warps through shared memory
//   part_full        rank r's (acc, m, l) in rank 0's part[r] (st.async again)
//   rank 0           out = sum_r acc_r 2^(m_r - M) / sum_r l_r 2^(m_r - M), M = max_r m_r, rounded
//                    to bf16 -> att, and to every rank's head_att (st.async)
//   att_full         each rank: partials[h][o] = sum_e proj[o][64 h + e] att[e] for its C / 8
//                    outputs o, 8 lanes a row
// Numerics: the QKV outputs are gemv_kernel's (the same products and sums in the same order, so
// the same bits at C = 768); the attention sums in another order than the split kernel's; the
// projection sums each head's 64 products, then the heads in order, where the GEMV summed the C
// products in its own order (and the FC projection 16 hidden units a CTA, then the CTAs of a
// cluster, then the clusters); the layernorms and the FC are gemv_kernel's.
#include <cooperative_groups.h>
#include <math.h>

#include "../attention/flash_tile.cuh"   // kLog2e, SoftmaxRow, mbarriers, clusters, store_to_cta
#include "../runtime/cuda_common.cuh"
#include "decode_attention.cuh"
#include "decode_layers_sm90.h"
#include "gelu.cuh"
#include "gemv.cuh"

namespace cg = cooperative_groups;

// Build with -DDECODE_LAYERS_SM90=0 to leave batch 1 to the GEMVs and the split attention kernel, to
// time against
#ifndef DECODE_LAYERS_SM90
#define DECODE_LAYERS_SM90 1
#endif

namespace {

constexpr int kHS = 64;                      // the head size this kernel is written for
constexpr int kRanks = 8;                    // CTAs of a head's cluster (the portable limit)
constexpr int kWarps = 6, kThreads = 32 * kWarps;
constexpr int kR = 4;                        // QKV outputs a warp (warp_reduce_scatter: a power of 2)
static_assert(kRanks * kWarps * kR == 3 * kHS, "the cluster's warps cover the head's q, k, v");
constexpr int kMaxKC = 7;                    // 16-byte chunks of a weight row a lane: C <= 1,792
constexpr int kG = kHS / 8;                  // lanes a cache row, 8 channels each
constexpr int kGroups = kThreads / kG;       // cache rows a round takes side by side
constexpr int kRows = 4;                     // cache rows a group a round, loaded together
constexpr int kRound = kGroups * kRows;      // positions a round

// ---- a warp's rows of a matrix times the layer-normed row, with gemv_kernel's plan (fused.cu) ----
// Before the wait: the warp's R weight rows row_of(0 .. R-1) of weight (rows of C), lane l taking
// the 16-byte chunks c = j * 32 + l, j < KC, and their biases.
template <int R, int KC, bool FULL, typename RowOf>
__device__ __forceinline__ void load_warp_rows(int4 (&w)[R][KC], float (&bias)[R], const bf16 *weight,
                                               const bf16 *bias_in, RowOf row_of, int C, int lane) {
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int row = row_of(r);
#pragma unroll
        for (int j = 0; j < KC; j++) {
            const int c = j * 32 + lane;
            w[r][j] = make_int4(0, 0, 0, 0);
            if (FULL || c < C / 8) w[r][j] = load_streaming(weight + (size_t)row * C + c * 8);
        }
        bias[r] = __bfloat162float(bias_in[row]);
    }
}
// and the layernorm's weights, lane l's chunks as layernorm_row (gemv.cuh) takes them, where they
// fit beside the matrix's in registers (C <= 768, as gemv_kernel)
template <int KC, bool FULL>
__device__ __forceinline__ void load_ln_weights(int4 (&lnw)[KC], int4 (&lnb)[KC], const bf16 *w,
                                                const bf16 *b, int C, int lane) {
#pragma unroll
    for (int j = 0; j < KC; j++) {
        const int c = j * 32 + lane;
        lnw[j] = lnb[j] = make_int4(0, 0, 0, 0);
        if (KC <= 3 && (FULL || c < C / 8)) {
            lnw[j] = *reinterpret_cast<const int4 *>(w + c * 8);
            lnb[j] = *reinterpret_cast<const int4 *>(b + c * 8);
        }
    }
}
// After it, with the row in xs (C / 8 chunks, layer-normed): the warp's R sums, reduced together
// (warp_reduce_scatter); lane l gets row l / (32 / R)'s sum plus its bias.
template <int R, int KC, bool FULL>
__device__ __forceinline__ float warp_rows_times_row(const int4 (&w)[R][KC], const float (&bias)[R],
                                                     const int4 *xs, int C, int lane) {
    float sums[R] = {};
#pragma unroll
    for (int j = 0; j < KC; j++) {
        const int c = j * 32 + lane;
        if (!FULL && c >= C / 8) break;
        float xv[8], wf[R][8];
        unpack_bf16<8>(xv, xs[c]);
#pragma unroll
        for (int r = 0; r < R; r++) unpack_bf16<8>(wf[r], w[r][j]);
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int k = 0; k < 8; k++) sums[r] += wf[r][k] * xv[k];
    }
    const int my_r = lane / (32 / R);
    float my_bias = 0.0f;
#pragma unroll
    for (int r = 0; r < R; r++)
        if (r == my_r) my_bias = bias[r];
    return warp_reduce_scatter<R>(sums, lane) + my_bias;
}

// a rank's eighth of a row: C / kRanks channels, at most 32 KC (C <= KC * 256); the attention
// projection's rows a rank of a head's cluster multiplies, the slice of a new row a rank sums
constexpr int kProjRowsPerChunk = 32;

// Both kernels begin a layer's half with a new residual row, the last one's projection added:
// rank r of each cluster makes the slice [r C / 8, (r + 1) C / 8) of residual + bf16(sum_k
// parts[k][c] + bias[c]), the NPARTS parts summed in order (so every cluster, every run, has the
// same bits) and the sum rounded before the residual is added (fused.cu's kBiasResidual epilogue),
// and stores it two by two into every rank's row xs (st.async, completing on each rank's `bar`,
// which expects the whole row); out, where not NULL, gets the slice too. pbias: the bias of this
// thread's channels rank C / 8 + thread + i * THREADS (loaded before the wait). The cluster's CTAs
// must all run, their barriers set (cluster_wait), before it stores. Every thread calls it.
template <int THREADS, int SLICE, int MAXPARTS, bool FIXED>
__device__ __forceinline__ void hand_out_slice(int4 *xs, uint64_t *bar, bf16 *out, const bf16 *residual,
                                               const float *parts, int nparts, const float (&pbias)[SLICE],
                                               int C, int rank) {
    const int slice = C / kRanks;
    float sum[SLICE], res[SLICE];
#pragma unroll
    for (int i = 0; i < SLICE; i++) {   // every part of every channel in flight at once
        const int t = threadIdx.x + i * THREADS, c = rank * slice + t;
        sum[i] = res[i] = 0.0f;
        if (t >= slice) continue;
        res[i] = __bfloat162float(__ldcg(residual + c));
#pragma unroll
        for (int k = 0; k < MAXPARTS; k++) {
            if (!FIXED && k >= nparts) break;
            sum[i] += __ldcg(parts + (size_t)k * C + c);
        }
    }
    cluster_wait();   // every CTA of the cluster runs, its barrier set
#pragma unroll
    for (int i = 0; i < SLICE; i++) {
        const int t = threadIdx.x + i * THREADS, c = rank * slice + t;
        const uint32_t mine = __bfloat16_as_ushort(__float2bfloat16_rn(res[i] + round_bf16(sum[i] + pbias[i])));
        const uint32_t pair = mine | __shfl_down_sync(0xffffffffu, mine, 1) << 16;
        if (t >= slice || t % 2) continue;   // (slice is a multiple of 8: pairs never straddle it)
        const uint32_t dst = smem_addr(reinterpret_cast<bf16 *>(xs) + c), b = smem_addr(bar);
#pragma unroll
        for (int d = 0; d < kRanks; d++) store_to_cta(cluster_map(dst, d), pair, cluster_map(b, d));
        if (out) *reinterpret_cast<uint32_t *>(out + c) = pair;
    }
}

// the bias of this thread's channels of the rank's slice, as hand_out_slice takes it
template <int THREADS, int SLICE>
__device__ __forceinline__ void load_slice_bias(float (&pbias)[SLICE], const bf16 *bias, int C, int rank) {
    const int slice = C / kRanks;
#pragma unroll
    for (int i = 0; i < SLICE; i++) {
        const int t = threadIdx.x + i * THREADS;
        pbias[i] = bias && t < slice ? __bfloat162float(bias[rank * slice + t]) : 0.0f;
    }
}

struct Args {
    bf16 *att;                     // (NH * 64)
    bf16 *x_in;                    // (C): the layer's input row, the residual of the kernel after
    float *partials;               // (NH, C): each head's part of the attention projection
    const bf16 *inp;               // (C): the residual stream (before the last projection's parts)
    const float *fc_parts;         // (C / 32, C): the layer before's FC projection by cluster of
                                   // residual_fc_kernel, or NULL (the first layer: inp is the row)
    const bf16 *fc_bias;           // (C): the layer before's FC projection's bias
    const bf16 *lnw, *lnb;         // (C)
    const bf16 *weight, *bias;     // (3C, C), (3C)
    const bf16 *proj;              // (C, C): the attention projection's weight
    bf16 *kcache, *vcache;         // (NH, maxT, 64)
    const int *pos;                // the new token's position: len = *pos + 1
    int C, maxT;
    float scale_log2;              // log2(e) / sqrt(64)
};

// KC: 16-byte chunks of a weight row a lane (C <= KC * 256); FULL: C == KC * 256, so the chunk
// bounds fold away (as gemv_kernel's FULL)
template <int KC, bool FULL>
__global__ void __launch_bounds__(kThreads) qkv_attention_kernel(const Args a) {
    const cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank(), h = blockIdx.x / kRanks;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int C = FULL ? KC * 256 : a.C, nchunks = C / 8;
    __shared__ int4 xs[KC * 32];                       // the row, then layer-normed
    __shared__ __align__(16) bf16 head_qkv[3 * kHS];   // the head's q, k, v: every rank's outputs
    __shared__ float part[kRanks][kHS + 2];            // rank 0: each rank's acc, m, l
    __shared__ float warp_m[kWarps], warp_l[kWarps], warp_acc[kWarps][kHS];
    __shared__ __align__(16) bf16 head_att[kHS];       // the head's attention output, from rank 0
    __shared__ int4 proj[kProjRowsPerChunk * KC][kHS / 8];   // the rank's rows of the projection's head-h columns
    // head_qkv, part and head_att are written by the cluster's CTAs with st.async, each completing
    // its bytes on the receiver's barrier: the receiver waits on its own barrier, with no cluster barrier
    // (whose release would also wait for this CTA's global stores)
    __shared__ uint64_t qkv_full, part_full, att_full, x_full;
    if (threadIdx.x == 0) {
        mbar_init(&qkv_full, 1);
        mbar_init(&part_full, 1);
        mbar_init(&att_full, 1);
        mbar_init(&x_full, 1);
        mbar_fence_init();
        if (a.fc_parts) mbar_arrive_expect_tx(&x_full, C * sizeof(bf16));
        mbar_arrive_expect_tx(&qkv_full, 3 * kHS * sizeof(bf16));
        if (rank == 0) mbar_arrive_expect_tx(&part_full, kRanks * (kHS + 2) * sizeof(float));
        mbar_arrive_expect_tx(&att_full, kHS * sizeof(bf16));
    }
    cluster_arrive_relaxed();   // this CTA runs, its barriers set: the others may write to it (after their wait)

    // ---- before the wait: the warp's weight rows, their biases, the layernorm's weights (at
    // K <= 768, as gemv_kernel), the first round of the rank's cache rows (earlier steps wrote
    // them)
    const int i0 = (rank * kWarps + warp) * kR;   // the warp's first output of the head's 192
    int4 w[kR][KC];
    float bias[kR];
    load_warp_rows<kR, KC, FULL>(w, bias, a.weight, a.bias, [&](int r) {   // output i of the head's q, k, v
        const int i = i0 + r;
        return (i / kHS) * C + h * kHS + i % kHS;
    }, C, lane);
    constexpr bool kLnEarly = KC <= 3;
    int4 lnw[KC], lnb[KC];
    load_ln_weights<KC, FULL>(lnw, lnb, a.lnw, a.lnb, C, lane);
    // the position is read before the wait, and the cache's rows before it: the step's cell was
    // written before its graph began, and the rows by steps whose layers were done before the
    // step began (the LM head before it lets nothing start before its own wait: layers.h)
    const int len = *a.pos + 1, new_pos = len - 1;
    const int chunk = (len + kRanks - 1) / kRanks;
    const int start = rank * chunk, end = min(start + chunk, len);
    const int member = lane % kG, group = threadIdx.x / kG;
    const size_t head = (size_t)h * a.maxT * kHS + member * 8;   // + s * 64: position s
    // a round: group g takes rows base + r * kGroups + g, r < kRows; the new position is not in
    // the cache yet (head_qkv holds it)
    int4 k_raw[kRows], v_raw[kRows];
    auto load_round = [&](int base) {
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const int s = base + r * kGroups + group;
            k_raw[r] = v_raw[r] = make_int4(0, 0, 0, 0);
            if (s < end && s != new_pos) {
                k_raw[r] = *reinterpret_cast<const int4 *>(a.kcache + head + (size_t)s * kHS);
                v_raw[r] = *reinterpret_cast<const int4 *>(a.vcache + head + (size_t)s * kHS);
            }
        }
    };
    if (start < end) load_round(start);
    // the rank's rows of the projection, columns of head h, into shared memory (used last)
    const int proj_rows = C / kRanks;
    for (int i = threadIdx.x; i < proj_rows * (kHS / 8); i += kThreads) {
        const int o = i / (kHS / 8), m = i % (kHS / 8);
        cp_async_16(smem_addr(&proj[o][m]), a.proj + (size_t)(rank * proj_rows + o) * C + h * kHS + m * 8, true);
    }
    cp_async_commit();
    constexpr int kSlice = (kProjRowsPerChunk * KC + kThreads - 1) / kThreads;
    float fc_bias[kSlice];
    load_slice_bias<kThreads>(fc_bias, a.fc_parts ? a.fc_bias : nullptr, C, rank);
    pdl_launch_dependents();
    pdl_wait();

    // ---- the row into shared memory (the kernels before just wrote it): after the first layer
    // the layer before's FC projection summed into it, each rank its eighth for the cluster; head
    // 0's cluster leaves it in x_in for the kernel after. Then warp 0 normalises it, each warp's
    // 4 outputs
    if (a.fc_parts) {   // (uniform)
        hand_out_slice<kThreads, kSlice, 8 * KC, FULL>(xs, &x_full, h == 0 ? a.x_in : nullptr, a.inp, a.fc_parts,
                                                      C / 32, fc_bias, C, rank);
        mbar_wait(&x_full, 0);
    } else {
        for (int c = threadIdx.x; c < nchunks; c += kThreads) {
            const int4 v = __ldcg(reinterpret_cast<const int4 *>(a.inp) + c);
            xs[c] = v;
            if (h == 0 && c % kRanks == rank) reinterpret_cast<int4 *>(a.x_in)[c] = v;   // (one copy)
        }
    }
    __syncthreads();
    if (warp == 0) layernorm_row<KC, kLnEarly>(xs, a.lnw, a.lnb, C, nchunks, lnw, lnb, lane);
    __syncthreads();
    const int my_r = lane / (32 / kR);   // lane l holds output i0 + l / 8
    const float sum = warp_rows_times_row<kR, KC, FULL>(w, bias, xs, C, lane);
    // outputs i0 + my_r in pairs, 4 bytes a store: lane 0 (outputs 0, 1 of the warp's 4) and 16
    // (2, 3) take their neighbour's from lane 8 and 24
    const uint32_t mine = __bfloat16_as_ushort(__float2bfloat16_rn(sum));
    const uint32_t pair = mine | __shfl_down_sync(0xffffffffu, mine, 32 / kR) << 16;
    if (!a.fc_parts) cluster_wait();   // every CTA of the cluster runs, its barriers set
    if (lane % (2 * 32 / kR) == 0) {
        const int i = i0 + my_r;   // even: the pair is 4-byte aligned, and never straddles q, k, v
        const uint32_t dst = smem_addr(head_qkv + i), bar = smem_addr(&qkv_full);
#pragma unroll
        for (int d = 0; d < kRanks; d++) store_to_cta(cluster_map(dst, d), pair, cluster_map(bar, d));
        if (i >= kHS)   // the new k or v into the cache
            *reinterpret_cast<uint32_t *>((i < 2 * kHS ? a.kcache : a.vcache) + (size_t)h * a.maxT * kHS +
                                          (size_t)new_pos * kHS + i % kHS) = pair;
    }
    mbar_wait(&qkv_full, 0);   // the head's q, k, v, from every rank

    // ---- the attention over the rank's positions (decode_attention.cu's split kernel, a round
    // at a time: the next round's loads issued before this one's math)
    float qv[8], acc[8] = {};
    unpack_bf16<8>(qv, reinterpret_cast<const int4 *>(head_qkv)[member]);
#pragma unroll
    for (int i = 0; i < 8; i++) qv[i] *= a.scale_log2;
    const int4 new_k = reinterpret_cast<const int4 *>(head_qkv + kHS)[member];
    const int4 new_v = reinterpret_cast<const int4 *>(head_qkv + 2 * kHS)[member];
    float running_max = -INFINITY, running_sum = 0.0f;   // the group's row of the online softmax
    for (int base = start; base < end; base += kRound) {   // block-uniform: the shuffles need every lane
        int4 k_cur[kRows], v_cur[kRows];
#pragma unroll
        for (int r = 0; r < kRows; r++) { k_cur[r] = k_raw[r]; v_cur[r] = v_raw[r]; }
        if (base + kRound < end) load_round(base + kRound);
        bool valid[kRows];
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const int s = base + r * kGroups + group;
            valid[r] = s < end;
            if (s == new_pos) { k_cur[r] = new_k; v_cur[r] = new_v; }
        }
        // at a short span most of a round's rows hold no position of this rank (at 128-384
        // positions, 16-48 of the round's 96): skipped
        decode_round<kG, kRows>(qv, k_cur, v_cur, valid, running_max, running_sum, acc,
                                (end - base + kGroups - 1) / kGroups);
    }
    const float warp_max = merge_warp_groups<kG>(running_max, running_sum, acc);   // the warp's groups
    const float warp_sum = running_sum;
    if (lane < kG) {
        if (lane == 0) { warp_m[warp] = warp_max; warp_l[warp] = warp_sum; }
#pragma unroll
        for (int i = 0; i < 8; i++) warp_acc[warp][member * 8 + i] = acc[i];
    }
    __syncthreads();
    // the CTA's (acc, m, l) from its warps', into rank 0's part[rank]: thread e < 64 channel e
    if (threadIdx.x < kHS) {
        const int e = threadIdx.x;
        float m, l;
        const float o = merge_parts<kWarps>([&](int k) { return warp_m[k]; }, [&](int k) { return warp_l[k]; },
                                            [&](int k) { return warp_acc[k][e]; }, m, l);
        const uint32_t dst = cluster_map(smem_addr(&part[rank][0]), 0), bar = cluster_map(smem_addr(&part_full), 0);
        store_to_cta(dst + 4 * e, __float_as_uint(o), bar);
        if (e == 0) {
            store_to_cta(dst + 4 * kHS, __float_as_uint(m), bar);
            store_to_cta(dst + 4 * (kHS + 1), __float_as_uint(l), bar);
        }
    }
    // ---- rank 0: the ranks' parts merged (a rank past len has m = -inf and weighs 0; rank 0
    // holds position 0, so M is finite), to att and to every rank's head_att, two by two. Rank 0
    // waits for every rank's part, so its shared memory outlives their stores; each rank waits
    // for head_att, so its own outlives rank 0's
    if (rank == 0 && threadIdx.x < kHS) {
        mbar_wait(&part_full, 0);
        const int e = threadIdx.x;
        float M, L;
        const float o = merge_parts<kRanks>([&](int r) { return part[r][kHS]; }, [&](int r) { return part[r][kHS + 1]; },
                                            [&](int r) { return part[r][e]; }, M, L);
        const bf16 out = __float2bfloat16_rn(o / L);
        a.att[h * kHS + e] = out;
        const uint32_t mine = __bfloat16_as_ushort(out);
        const uint32_t pair = mine | __shfl_down_sync(0xffffffffu, mine, 1) << 16;   // (threads < 64: whole warps)
        if (e % 2 == 0) {
            const uint32_t dst = smem_addr(head_att + e), bar = smem_addr(&att_full);
#pragma unroll
            for (int d = 0; d < kRanks; d++) store_to_cta(cluster_map(dst, d), pair, cluster_map(bar, d));
        }
    }

    // ---- the head's part of the projection: the rank's outputs o = p * kThreads / 8 + thread / 8,
    // lane m of 8 taking channels [8 m, 8 m + 8) of the head's 64
    cp_async_wait<0>();
    __syncthreads();   // every thread's rows of proj landed
    mbar_wait(&att_full, 0);
    const int m = lane % 8;
    float av[8];
    unpack_bf16<8>(av, reinterpret_cast<const int4 *>(head_att)[m]);
    constexpr int kRowsAPass = kThreads / 8, kPasses = (kProjRowsPerChunk * KC + kRowsAPass - 1) / kRowsAPass;
    float ps[kPasses];
#pragma unroll
    for (int p = 0; p < kPasses; p++) {
        const int o = p * kRowsAPass + threadIdx.x / 8;
        ps[p] = 0.0f;
        if (o < proj_rows) {
            float wv[8];
            unpack_bf16<8>(wv, proj[o][m]);
#pragma unroll
            for (int k = 0; k < 8; k++) ps[p] += wv[k] * av[k];
        }
    }
#pragma unroll
    for (int p = 0; p < kPasses; p++) {
#pragma unroll
        for (int offset = 4; offset >= 1; offset >>= 1) ps[p] += __shfl_xor_sync(0xffffffffu, ps[p], offset);
        const int o = p * kRowsAPass + threadIdx.x / 8;
        if (m == 0 && o < proj_rows) a.partials[(size_t)h * C + rank * proj_rows + o] = ps[p];
    }
}

// ---- residual_fc_kernel: the projection's parts summed, + bias + residual, layernorm + FC + GELU,
// and the FC projection's parts ----
// A CTA: 4 warps, each R = 4 rows of the FC matrix with gemv_kernel's plan (fused.cu: weights in
// registers before the wait, lanes across K, the 4 sums reduced together), 16 rows a CTA, so C / 4
// CTAs; clusters of kRanks. Each rank makes its eighth of the new row from x_in and the heads'
// parts (hand_out_slice), cluster 0 writes it to x, and every CTA of the cluster has the whole
// row. Then as gemv_kernel: warp 0 layer-norms the row in place, the products, GELU -> fch.
// Then the FC projection's part of the CTA's 16 hidden units j (fcproj's columns j, C x 32 bytes,
// cp.async into shared memory before the wait): thread t takes outputs o = t + 128 i, 16 products
// each, and stores each sum into the shared memory of the rank that owns o's eighth of the row;
// each rank sums its eighth over the cluster's 8 CTAs in rank order, the cluster's part of the
// projection over its 128 hidden units, into fc_parts[cluster] (C / 32 parts in all), which the
// next layer's first kernel sums into the row (the last layer's: fcproj NULL, none).
constexpr int kFcWarps = 4, kFcThreads = 32 * kFcWarps, kFcR = 4;
constexpr int kFcRowsPerCta = kFcWarps * kFcR;

struct FcArgs {
    bf16 *x;                      // (C): the residual stream; its new row written by cluster 0
    bf16 *fch;                    // (4C): gelu(layernorm(x) @ weight^T + bias)
    float *fc_parts;              // (C / 32, C): the FC projection's part of each cluster
    const float *partials;        // (NH, C): qkv_attention_kernel's parts of the projection
    const bf16 *x_in;             // (C): x before this layer's attention block
    const bf16 *proj_bias;        // (C)
    const bf16 *lnw, *lnb;        // (C)
    const bf16 *weight, *bias;    // (4C, C), (4C)
    const bf16 *fcproj;           // (C, 4C): the FC projection's weight; NULL: no parts (the last layer)
    int C;
};

template <int KC, bool FULL>
__global__ void __launch_bounds__(kFcThreads) residual_fc_kernel(const FcArgs a) {
    const cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int C = FULL ? KC * 256 : a.C, nchunks = C / 8, slice = C / kRanks;
    constexpr int kSlice = (kProjRowsPerChunk * KC + kFcThreads - 1) / kFcThreads;   // slice channels a thread
    __shared__ int4 xs[KC * 32];   // the new row, from every rank of the cluster; then layer-normed
    __shared__ float hidden[kFcRowsPerCta];                      // the CTA's rows of fch
    __shared__ float owned[kRanks][kProjRowsPerChunk * KC];      // each rank's sums of this rank's eighth
    extern __shared__ int4 fcproj_cols[];                        // (C, 2): fcproj's columns of the CTA's rows
    __shared__ uint64_t x_full, owned_full;
    if (threadIdx.x == 0) {
        mbar_init(&x_full, 1);
        mbar_init(&owned_full, 1);
        mbar_fence_init();
        mbar_arrive_expect_tx(&x_full, C * sizeof(bf16));
        mbar_arrive_expect_tx(&owned_full, kRanks * slice * sizeof(float));
    }
    cluster_arrive_relaxed();   // this CTA runs, its barriers set

    // ---- before the wait: the warp's FC rows, their biases, the layernorm's weights, the
    // projection's bias of the rank's slice, the FC projection's columns
    const int row0 = (blockIdx.x * kFcWarps + warp) * kFcR;
    int4 w[kFcR][KC];
    float bias[kFcR];
    load_warp_rows<kFcR, KC, FULL>(w, bias, a.weight, a.bias, [&](int r) { return row0 + r; }, C, lane);
    constexpr bool kLnEarly = KC <= 3;
    int4 lnw[KC], lnb[KC];
    load_ln_weights<KC, FULL>(lnw, lnb, a.lnw, a.lnb, C, lane);
    float pbias[kSlice];
    load_slice_bias<kFcThreads>(pbias, a.proj_bias, C, rank);
    if (a.fcproj)   // (uniform)
        for (int i = threadIdx.x; i < 2 * C; i += kFcThreads)
            cp_async_16(smem_addr(&fcproj_cols[i]), a.fcproj + (size_t)(i / 2) * 4 * C + blockIdx.x * kFcRowsPerCta + (i % 2) * 8, true);
    cp_async_commit();
    pdl_launch_dependents();
    pdl_wait();

    // ---- the new row: x_in + the heads' parts of the projection, each rank its eighth
    hand_out_slice<kFcThreads, kSlice, 4 * KC, FULL>(xs, &x_full, blockIdx.x < kRanks ? a.x : nullptr, a.x_in,
                                                     a.partials, C / kHS, pbias, C, rank);
    mbar_wait(&x_full, 0);   // the whole row

    // ---- layernorm + FC + GELU, as gemv_kernel's kLayernorm input and kBiasGelu epilogue
    if (warp == 0) layernorm_row<KC, kLnEarly>(xs, a.lnw, a.lnb, C, nchunks, lnw, lnb, lane);
    __syncthreads();
    const int my_r = lane / (32 / kFcR);   // lane l holds row row0 + l / 8
    const float v = warp_rows_times_row<kFcR, KC, FULL>(w, bias, xs, C, lane);
    if (lane % (32 / kFcR) == 0) {
        const bf16 g = __float2bfloat16_rn(gelu_value(round_bf16(v)));
        a.fch[row0 + my_r] = g;
        hidden[warp * kFcR + my_r] = __bfloat162float(g);
    }
    if (!a.fcproj) return;   // the last layer (no other CTA writes here after x_full)
    cp_async_wait<0>();
    __syncthreads();   // hidden written, every thread's columns of fcproj landed

    // ---- the FC projection's part of the CTA's 16 hidden units, each output to its owner rank
    float hv[kFcRowsPerCta];
#pragma unroll
    for (int j = 0; j < kFcRowsPerCta; j++) hv[j] = hidden[j];
    constexpr int kOuts = (KC * 256 + kFcThreads - 1) / kFcThreads;
#pragma unroll
    for (int i = 0; i < kOuts; i++) {
        const int o = threadIdx.x + i * kFcThreads;
        if (o >= C) break;
        float w0[8], w1[8], sum = 0.0f;
        unpack_bf16<8>(w0, fcproj_cols[2 * o]);
        unpack_bf16<8>(w1, fcproj_cols[2 * o + 1]);
#pragma unroll
        for (int j = 0; j < 8; j++) sum += w0[j] * hv[j];
#pragma unroll
        for (int j = 0; j < 8; j++) sum += w1[j] * hv[8 + j];
        const int owner = o / slice;
        store_to_cta(cluster_map(smem_addr(&owned[rank][o % slice]), owner), __float_as_uint(sum),
                     cluster_map(smem_addr(&owned_full), owner));
    }
    mbar_wait(&owned_full, 0);   // every rank's sums of this rank's eighth (so this CTA outlives their stores)
#pragma unroll
    for (int i = 0; i < kSlice; i++) {
        const int t = threadIdx.x + i * kFcThreads;
        if (t >= slice) break;
        float part = 0.0f;
#pragma unroll
        for (int r = 0; r < kRanks; r++) part += owned[r][t];
        a.fc_parts[(size_t)(blockIdx.x / kRanks) * C + rank * slice + t] = part;
    }
}

template <int KC>
void launch(const Args &a, const FcArgs &f, int NH) {
    const bool full = a.C == KC * 256;
    void (*kernel)(Args) = full ? qkv_attention_kernel<KC, true> : qkv_attention_kernel<KC, false>;
    launch_pdl_cluster(kernel, NH * kRanks, kThreads, 0, kRanks, a);
    LAUNCH_CHECK();
    void (*fc)(FcArgs) = full ? residual_fc_kernel<KC, true> : residual_fc_kernel<KC, false>;
    const size_t smem = (size_t)a.C * 2 * sizeof(int4);   // fcproj_cols
    static bool asked[2] = {};
    if (!asked[full]) {   // past the 48 KiB a kernel gets without asking from C = 1,536
        CUDA_CHECK(cudaFuncSetAttribute(fc, cudaFuncAttributeMaxDynamicSharedMemorySize, KC * 256 * 2 * (int)sizeof(int4)));
        asked[full] = true;
    }
    launch_pdl_cluster(fc, 4 * a.C / kFcRowsPerCta, kFcThreads, smem, kRanks, f);
    LAUNCH_CHECK();
}

}  // namespace

// the scratch, for any C it takes: x_in (C), then partials (NH, C) and fc_parts (C / 32, C) fp32,
// each on a 256-byte boundary
constexpr int kMaxC = kMaxKC * 256;
constexpr size_t kXInBytes = (kMaxC * sizeof(bf16) + 255) / 256 * 256;
constexpr size_t kPartialsBytes = (size_t)(kMaxC / kHS) * kMaxC * sizeof(float);

size_t decode_layers_sm90_scratch_size(void) {
    return kXInBytes + kPartialsBytes + (size_t)(kMaxC / 32) * kMaxC * sizeof(float);
}

bool decode_layers_sm90_fits(int B, int C, int NH, int HS, const DecodeLayerWeights *w, int L,
                             const void *x, const void *kcache, const void *vcache) {
    if (!(DECODE_LAYERS_SM90 && cuda_is_sm90() && B == 1 && HS == kHS && C == NH * HS && C <= kMaxC && L >= 1 &&
          is_aligned16(x) && is_aligned16(kcache) && is_aligned16(vcache)))
        return false;
    for (int l = 0; l < L; l++) {
        const DecodeLayerWeights *p = &w[l];
        if (!p->qkvb || !p->attprojb || !p->fcb || !p->fcprojb || !is_aligned16(p->ln1w) ||
            !is_aligned16(p->ln1b) || !is_aligned16(p->qkvw) || !is_aligned16(p->attprojw) ||
            !is_aligned16(p->ln2w) || !is_aligned16(p->ln2b) || !is_aligned16(p->fcw) ||
            !is_aligned16(p->fcprojw))
            return false;
    }
    return true;
}

void decode_layers_sm90(floatX *x, floatX *att, floatX *fch, void *scratch, const DecodeLayerWeights *w,
                        int L, floatX *kcache, floatX *vcache, size_t layer_stride, const int *pos,
                        int C, int maxT, int NH) {
    if (!decode_layers_sm90_fits(1, C, NH, C / NH, w, L, x, kcache, vcache) || !is_aligned16(scratch))
        die("decode_layers_sm90: a call it does not take (C=%d, NH=%d, L=%d)", C, NH, L);
    bf16 *x_in = (bf16 *)scratch;
    float *partials = (float *)((char *)scratch + kXInBytes);
    float *fc_parts = (float *)((char *)scratch + kXInBytes + kPartialsBytes);
    for (int l = 0; l < L; l++) {
        Args a = {};
        a.att = BF(att);
        a.x_in = x_in;
        a.partials = partials;
        a.inp = CBF(x);
        a.fc_parts = l > 0 ? fc_parts : nullptr;
        a.fc_bias = l > 0 ? CBF(w[l - 1].fcprojb) : nullptr;
        a.lnw = CBF(w[l].ln1w);
        a.lnb = CBF(w[l].ln1b);
        a.weight = CBF(w[l].qkvw);
        a.bias = CBF(w[l].qkvb);
        a.proj = CBF(w[l].attprojw);
        a.kcache = BF(kcache + l * layer_stride);
        a.vcache = BF(vcache + l * layer_stride);
        a.pos = pos;
        a.C = C;
        a.maxT = maxT;
        a.scale_log2 = kLog2e / sqrtf((float)kHS);
        FcArgs f = {};
        f.x = BF(x);
        f.fch = BF(fch);
        f.fc_parts = fc_parts;
        f.partials = partials;
        f.x_in = x_in;
        f.proj_bias = CBF(w[l].attprojb);
        f.lnw = CBF(w[l].ln2w);
        f.lnb = CBF(w[l].ln2b);
        f.weight = CBF(w[l].fcw);
        f.bias = CBF(w[l].fcb);
        f.fcproj = l < L - 1 ? CBF(w[l].fcprojw) : nullptr;   // the last one's: the caller's
        f.C = C;
        if (C <= 3 * 256) launch<3>(a, f, NH);
        else if (C <= 4 * 256) launch<4>(a, f, NH);
        else launch<kMaxKC>(a, f, NH);
    }
}
