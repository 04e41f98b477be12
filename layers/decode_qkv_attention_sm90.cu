// decode_qkv_attention_sm90.cu: a layer's first call of the decode step at one row on Hopper,
// layernorm + QKV + attention as one kernel: a thread-block cluster of kRanks CTAs per head.
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
// L2, and the output projection reads a plain row. The exchanges are st.async stores that
// complete on the receiver's mbarrier: with a cluster barrier for each (whose arrival releases
// the CTA's global stores too) the kernel was 4.3 us on the path, with these 3.4, and the QKV
// GEMV alone 2.2 (docs/PERF.md, twenty-sixth session: batch 1 5.8K -> 6.6K tokens/s).
//
// The picture, head h, rank r of the cluster (6 warps; w: warp):
//   before pdl_wait  the weight rows of outputs i = 24 r + 4 w + (0..3) of the head's [q | k | v]
//                    (row (i / 64) C + 64 h + i % 64 of the QKV matrix), their biases, the
//                    layernorm's weights; the first round of the cache rows of the rank's
//                    positions [r chunk, (r + 1) chunk), chunk = ceil(len / 8)
//   after it         inp -> shared memory; warp 0 layer-norms it in place; the products; lane
//                    8k of warp w holds output i = 24 r + 4 w + k: bf16(sum + bias), two by two,
//                    into every rank's head_qkv[i] (st.async into distributed shared memory,
//                    completing on the receiver's barrier), and for k and v into the caches at
//                    the new position
//   qkv_full         every rank holds the head's q, k, v (each waits on its own barrier)
//   attention        the rank's positions as decode_attention.cu's split kernel takes a split:
//                    a group of 8 lanes a cache row (8 channels a lane), kRows rows a group a
//                    round, the next round's loads in flight during this one's math, the online
//                    softmax in the exp2 domain; the new position's k, v from head_qkv; the
//                    groups merged by shuffles, the warps through shared memory
//   part_full        rank r's (acc, m, l) in rank 0's part[r] (st.async again); the others exit
//   rank 0           out = sum_r acc_r 2^(m_r - M) / sum_r l_r 2^(m_r - M), M = max_r m_r -> att
// Numerics: the QKV outputs are gemv_kernel's (the same products and sums in the same order, so
// the same bits at C = 768); the attention sums in another order than the split kernel's.
#include <cooperative_groups.h>
#include <math.h>

#include "../attention/flash_tile.cuh"   // kLog2e, SoftmaxRow, mbarriers, clusters, store_to_cta
#include "../runtime/cuda_common.cuh"
#include "decode_attention.cuh"
#include "decode_qkv_attention_sm90.h"
#include "gemv.cuh"

namespace cg = cooperative_groups;

// Build with -DDECODE_QKV_ATTENTION=0 to leave batch 1 to the QKV GEMV and the split attention
// kernel, to time against
#ifndef DECODE_QKV_ATTENTION
#define DECODE_QKV_ATTENTION 1
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

struct Args {
    bf16 *att;                     // (NH * 64)
    const bf16 *inp, *lnw, *lnb;   // (C)
    const bf16 *weight, *bias;     // (3C, C), (3C)
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
    // head_qkv and part are written by the cluster's CTAs with st.async, each completing its bytes
    // on the receiver's barrier: the receiver waits on its own barrier, with no cluster barrier
    // (whose release would also wait for this CTA's global stores)
    __shared__ uint64_t qkv_full, part_full;
    if (threadIdx.x == 0) {
        mbar_init(&qkv_full, 1);
        mbar_init(&part_full, 1);
        mbar_fence_init();
        mbar_arrive_expect_tx(&qkv_full, 3 * kHS * sizeof(bf16));
        if (rank == 0) mbar_arrive_expect_tx(&part_full, kRanks * (kHS + 2) * sizeof(float));
    }
    cluster_arrive_relaxed();   // this CTA runs, its barriers set: the others may write to it (after their wait)

    // ---- before the wait: the warp's weight rows, their biases, the layernorm's weights (at
    // K <= 768, as gemv_kernel), the first round of the rank's cache rows (earlier steps wrote
    // them)
    const int i0 = (rank * kWarps + warp) * kR;   // the warp's first output of the head's 192
    int4 w[kR][KC];
    float bias[kR];
#pragma unroll
    for (int r = 0; r < kR; r++) {
        const int i = i0 + r, row = (i / kHS) * C + h * kHS + i % kHS;
#pragma unroll
        for (int j = 0; j < KC; j++) {
            const int c = j * 32 + lane;
            w[r][j] = make_int4(0, 0, 0, 0);
            if (FULL || c < nchunks) w[r][j] = load_streaming(a.weight + (size_t)row * C + c * 8);
        }
        bias[r] = __bfloat162float(a.bias[row]);
    }
    constexpr bool kLnEarly = KC <= 3;
    int4 lnw[KC], lnb[KC];
#pragma unroll
    for (int j = 0; j < KC; j++) {
        const int c = j * 32 + lane;
        lnw[j] = lnb[j] = make_int4(0, 0, 0, 0);
        if (kLnEarly && (FULL || c < nchunks)) {
            lnw[j] = *reinterpret_cast<const int4 *>(a.lnw + c * 8);
            lnb[j] = *reinterpret_cast<const int4 *>(a.lnb + c * 8);
        }
    }
    const int len = *a.pos + 1, new_pos = len - 1;   // the host wrote the position before the step
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
    pdl_launch_dependents();
    pdl_wait();

    // ---- layernorm + QKV: the row into shared memory (the kernel before just wrote it), warp 0
    // normalises it, each warp's 4 outputs
    for (int c = threadIdx.x; c < nchunks; c += kThreads) xs[c] = __ldcg(reinterpret_cast<const int4 *>(a.inp) + c);
    __syncthreads();
    if (warp == 0) layernorm_row<KC, kLnEarly>(xs, a.lnw, a.lnb, C, nchunks, lnw, lnb, lane);
    __syncthreads();
    float sums[kR] = {};
#pragma unroll
    for (int j = 0; j < KC; j++) {
        const int c = j * 32 + lane;
        if (!FULL && c >= nchunks) break;
        float xv[8], wf[kR][8];
        unpack_bf16<8>(xv, xs[c]);
#pragma unroll
        for (int r = 0; r < kR; r++) unpack_bf16<8>(wf[r], w[r][j]);
#pragma unroll
        for (int r = 0; r < kR; r++)
#pragma unroll
            for (int k = 0; k < 8; k++) sums[r] += wf[r][k] * xv[k];
    }
    const int my_r = lane / (32 / kR);   // after the reduction lane l holds output i0 + l / 8
    float my_bias = 0.0f;
#pragma unroll
    for (int r = 0; r < kR; r++)
        if (r == my_r) my_bias = bias[r];
    const float sum = warp_reduce_scatter<kR>(sums, lane);
    // outputs i0 + my_r in pairs, 4 bytes a store: lane 0 (outputs 0, 1 of the warp's 4) and 16
    // (2, 3) take their neighbour's from lane 8 and 24
    const uint32_t mine = __bfloat16_as_ushort(__float2bfloat16_rn(sum + my_bias));
    const uint32_t pair = mine | __shfl_down_sync(0xffffffffu, mine, 32 / kR) << 16;
    cluster_wait();   // every CTA of the cluster runs, its barriers set
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
        float m = -INFINITY, l = 0.0f, o = 0.0f;
#pragma unroll
        for (int k = 0; k < kWarps; k++) m = fmaxf(m, warp_m[k]);
#pragma unroll
        for (int k = 0; k < kWarps; k++) {
            const float weight = warp_m[k] == -INFINITY ? 0.0f : exp2f(warp_m[k] - m);
            l += warp_l[k] * weight;
            o += warp_acc[k][e] * weight;
        }
        const uint32_t dst = cluster_map(smem_addr(&part[rank][0]), 0), bar = cluster_map(smem_addr(&part_full), 0);
        store_to_cta(dst + 4 * e, __float_as_uint(o), bar);
        if (e == 0) {
            store_to_cta(dst + 4 * kHS, __float_as_uint(m), bar);
            store_to_cta(dst + 4 * (kHS + 1), __float_as_uint(l), bar);
        }
    }
    // rank 0 waits for every rank's part, so its shared memory outlives their stores; the
    // others' shared memory is written no more
    if (rank != 0 || threadIdx.x >= kHS) return;
    mbar_wait(&part_full, 0);
    // ---- rank 0: the ranks' parts merged (a rank past len has m = -inf and weighs 0; rank 0
    // holds position 0, so M is finite)
    const int e = threadIdx.x;
    float M = -INFINITY, L = 0.0f, o = 0.0f;
#pragma unroll
    for (int r = 0; r < kRanks; r++) M = fmaxf(M, part[r][kHS]);
#pragma unroll
    for (int r = 0; r < kRanks; r++) {
        const float weight = part[r][kHS] == -INFINITY ? 0.0f : exp2f(part[r][kHS] - M);
        L += part[r][kHS + 1] * weight;
        o += part[r][e] * weight;
    }
    a.att[h * kHS + e] = __float2bfloat16_rn(o / L);
}

template <int KC>
void launch(const Args &a, int NH) {
    void (*kernel)(Args) = a.C == KC * 256 ? qkv_attention_kernel<KC, true> : qkv_attention_kernel<KC, false>;
    launch_pdl_cluster(kernel, NH * kRanks, kThreads, 0, kRanks, a);
}

}  // namespace

bool decode_qkv_attention_sm90_fits(int B, int C, int NH, int HS, const void *att, const void *inp,
                                    const void *lnw, const void *lnb, const void *weight,
                                    const void *bias, const void *kcache, const void *vcache) {
    return DECODE_QKV_ATTENTION && cuda_is_sm90() && B == 1 && HS == kHS && C == NH * HS && C <= kMaxKC * 256 && att &&
           bias && is_aligned16(inp) && is_aligned16(lnw) && is_aligned16(lnb) &&
           is_aligned16(weight) && is_aligned16(kcache) && is_aligned16(vcache);
}

void decode_qkv_attention_sm90(floatX *att, const floatX *inp, const floatX *lnw, const floatX *lnb,
                               const floatX *weight, const floatX *bias, floatX *kcache,
                               floatX *vcache, const int *pos, int C, int maxT, int NH) {
    if (!decode_qkv_attention_sm90_fits(1, C, NH, C / NH, att, inp, lnw, lnb, weight, bias, kcache, vcache))
        die("decode_qkv_attention_sm90: a call it does not take (C=%d, NH=%d)", C, NH);
    Args a = {};
    a.att = BF(att);
    a.inp = CBF(inp);
    a.lnw = CBF(lnw);
    a.lnb = CBF(lnb);
    a.weight = CBF(weight);
    a.bias = CBF(bias);
    a.kcache = BF(kcache);
    a.vcache = BF(vcache);
    a.pos = pos;
    a.C = C;
    a.maxT = maxT;
    a.scale_log2 = kLog2e / sqrtf((float)kHS);
    if (C <= 3 * 256) launch<3>(a, NH);
    else if (C <= 4 * 256) launch<4>(a, NH);
    else launch<kMaxKC>(a, NH);
    LAUNCH_CHECK();
}
