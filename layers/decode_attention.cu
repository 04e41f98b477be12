// decode_attention.cu: generation's attention on CUDA: one new query per sequence against the
// KV cache (flash-decoding), and the writes of new keys and values into the cache.
//
// At batch 1 a decode step has only NH queries, far too few blocks for the GPU if each (b, h)
// were one block reading the whole cache. Flash-decoding splits the cache length into
// `splits` parts of split_len positions, one block each:
//   split kernel    block (split, h, b): over its positions s, online softmax in the exp2
//                   domain, score_s = q . k_s * scale * log2(e); writes the partial result
//                   (m = max score, l = sum 2^(score - m), acc = sum 2^(score - m) v_s)
//   combine kernel  block (b, h): M = max m_i, L = sum l_i 2^(m_i - M),
//                   out = sum acc_i 2^(m_i - M) / L, over the splits that hold positions
// Inside a split block, a group of G = HS/8 (rounded up to a power of two) lanes handles a
// cache row, each lane 8 channels through one 16-byte load of k and one of v, kRows rows per
// round with all their loads in flight together; each group keeps its own (m, l, acc), merged
// in shared memory at the end. bf16 storage, fp32 math.
//
// The layout (split_len, splits) depends on the span the cache may hold (len for
// attention_decode, maxT for attention_decode_dev): enough blocks to cover the SMs a few times,
// at least kMinSplitKeys positions each. Blocks past len return at once, so one layout serves
// every position of a CUDA graph. Partial results live in the caller's scratch
// (attention_decode_scratch_size), sized for the longest span, maxT.
#include <math.h>

#include "../attention/flash_tile.cuh"   // kLog2e and the other attention kernels' vocabulary
#include "../runtime/cuda_common.cuh"
#include "layers.h"

namespace {

constexpr int kSplitThreads = 128;
constexpr int kRows = 4;             // cache rows a group loads at once
constexpr int kCombineThreads = 128;
constexpr int kMinSplitKeys = 64;    // positions per split at least: one round at HS = 64
constexpr int kBlocksPerSM = 4;      // blocks wanted per SM when B*NH alone is too few

// G lanes per cache row, 8 channels each; kRows rows per group per round
template <int G>
__global__ void __launch_bounds__(kSplitThreads)
    decode_split_kernel(float *__restrict__ partial, const bf16 *__restrict__ q,
                        const bf16 *__restrict__ kcache, const bf16 *__restrict__ vcache,
                        const int *__restrict__ len_dev, int len_host, int maxT, int NH, int HS,
                        int split_len, int splits, float scale_log2) {
    constexpr int kGroups = kSplitThreads / G;    // groups per block
    constexpr int kWarpGroups = 32 / G;           // groups per warp
    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int len = len_dev ? *len_dev : len_host;
    const int start = split * split_len;
    if (start >= len) return;
    const int end = min(start + split_len, len);
    const int C = NH * HS;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int member = lane % G;
    const int group = warp * kWarpGroups + lane / G;
    const bool active = member * 8 < HS;   // lanes past HS (HS/8 not a power of two) idle

    float qv[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (active) {
        load_bf16<8>(qv, q + (size_t)b * C + h * HS + member * 8);
#pragma unroll
        for (int i = 0; i < 8; i++) qv[i] *= scale_log2;
    }
    float running_max = -INFINITY, running_sum = 0.0f;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const size_t head = (size_t)b * maxT * C + h * HS + member * 8;

    // A round: group g takes rows base + r * kGroups + g, r < kRows. All 2 * kRows loads of a
    // round are issued before any math, so one memory latency covers kRows rows. The loop is
    // block-uniform (the shuffles need every lane); rows past `end` weigh nothing.
    for (int base = start; base < end; base += kGroups * kRows) {
        int4 k_raw[kRows], v_raw[kRows];
        bool valid[kRows];
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const int s = base + r * kGroups + group;
            valid[r] = s < end;
            k_raw[r] = v_raw[r] = make_int4(0, 0, 0, 0);
            if (valid[r] && active) {
                k_raw[r] = *reinterpret_cast<const int4 *>(kcache + head + (size_t)s * C);
                v_raw[r] = *reinterpret_cast<const int4 *>(vcache + head + (size_t)s * C);
            }
        }
        float score[kRows];
        float round_max = -INFINITY;
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const bf16 *k = reinterpret_cast<const bf16 *>(&k_raw[r]);
            score[r] = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; i++) score[r] += qv[i] * __bfloat162float(k[i]);
#pragma unroll
            for (int offset = G / 2; offset > 0; offset >>= 1)
                score[r] += __shfl_xor_sync(0xffffffffu, score[r], offset);
            if (valid[r]) round_max = fmaxf(round_max, score[r]);
        }
        if (round_max == -INFINITY) continue;   // this group has no row in this round
        const float new_max = fmaxf(running_max, round_max);
        const float correction = exp2f(running_max - new_max);   // 0 at the first row
        running_max = new_max;
        running_sum *= correction;
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] *= correction;
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const float p = valid[r] ? exp2f(score[r] - new_max) : 0.0f;
            const bf16 *v = reinterpret_cast<const bf16 *>(&v_raw[r]);
            running_sum += p;
#pragma unroll
            for (int i = 0; i < 8; i++) acc[i] += p * __bfloat162float(v[i]);
        }
    }

    // merge the groups: weight_g = 2^(m_g - M), groups that saw no row have l = 0, m = -inf
    __shared__ float group_max[kGroups], group_weight[kGroups];
    __shared__ float group_acc[kGroups][G * 8];
    __shared__ float block_max, block_sum;
    if (member == 0) group_max[group] = running_max;
#pragma unroll
    for (int i = 0; i < 8; i++) group_acc[group][member * 8 + i] = acc[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = -INFINITY;
        for (int g = 0; g < kGroups; g++) m = fmaxf(m, group_max[g]);
        block_max = m;
    }
    __syncthreads();
    if (member == 0) {
        const float w = running_max == -INFINITY ? 0.0f : exp2f(running_max - block_max);
        group_weight[group] = w;
        group_max[group] = running_sum * w;   // reused: this group's share of the sum
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float l = 0.0f;
        for (int g = 0; g < kGroups; g++) l += group_max[g];
        block_sum = l;
    }
    float *record = partial + (((size_t)b * NH + h) * splits + split) * (HS + 2);
    for (int i = threadIdx.x; i < HS; i += kSplitThreads) {
        float sum = 0.0f;
        for (int g = 0; g < kGroups; g++) sum += group_acc[g][i] * group_weight[g];
        record[i] = sum;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        record[HS] = block_max;
        record[HS + 1] = block_sum;
    }
}

// out (B, NH, HS) from the partial records of the splits that hold positions
__global__ void __launch_bounds__(kCombineThreads)
    decode_combine_kernel(bf16 *__restrict__ out, const float *__restrict__ partial,
                          const int *__restrict__ len_dev, int len_host, int NH, int HS,
                          int split_len, int splits) {
    const int bh = blockIdx.x;   // b * NH + h
    const int len = len_dev ? *len_dev : len_host;
    const int used = min(splits, (len + split_len - 1) / split_len);
    const float *records = partial + (size_t)bh * splits * (HS + 2);
    float m = -INFINITY;
    for (int i = 0; i < used; i++) m = fmaxf(m, records[i * (HS + 2) + HS]);
    float l = 0.0f;
    for (int i = 0; i < used; i++)
        l += records[i * (HS + 2) + HS + 1] * exp2f(records[i * (HS + 2) + HS] - m);
    const float inv_l = 1.0f / l;
    for (int e = threadIdx.x; e < HS; e += kCombineThreads) {
        float sum = 0.0f;
        for (int i = 0; i < used; i++)
            sum += records[i * (HS + 2) + e] * exp2f(records[i * (HS + 2) + HS] - m);
        out[(size_t)bh * HS + e] = __float2bfloat16_rn(sum * inv_l);
    }
}

// the most splits of a span for B*NH heads: enough blocks to cover the SMs kBlocksPerSM
// times, at least kMinSplitKeys positions each. It never decreases with span.
int max_splits(int B, int NH, int span) {
    const int wanted = ceil_div((long)kBlocksPerSM * cuda_num_sms, (long)B * NH);
    const int most = ceil_div(span, kMinSplitKeys);
    return wanted < 1 ? 1 : wanted > most ? most : wanted;
}

// splits of the span [0, span) for B*NH heads: (split_len, splits), splits <= max_splits
void decode_layout(int B, int NH, int span, int *split_len, int *splits) {
    const int n = max_splits(B, NH, span);
    *split_len = ceil_div(ceil_div(span, n), 16) * 16;
    *splits = ceil_div(span, *split_len);
}

// partial (B, NH, splits, HS + 2): acc (HS), m, l of each split, in the caller's scratch
void decode(floatX *out, float *partial, const floatX *q, const floatX *kcache,
            const floatX *vcache, const int *len_dev, int len_host, int span, int B, int maxT,
            int NH, int HS) {
    if (HS % 8 != 0 || HS > 256 || !is_aligned16(q) || !is_aligned16(kcache) ||
        !is_aligned16(vcache))
        die("attention_decode needs a head size that is a multiple of 8, at most 256 (got %d), "
            "and 16-byte aligned q and caches", HS);
    int split_len, splits;
    decode_layout(B, NH, span, &split_len, &splits);
    const float scale_log2 = kLog2e / sqrtf((float)HS);
    const dim3 grid(splits, NH, B);
    const int groups = HS / 8;   // lanes per row, rounded up to a power of two below
#define LAUNCH_SPLIT(G)                                                                        \
    decode_split_kernel<G><<<grid, kSplitThreads, 0, cuda_stream>>>(                           \
        partial, CBF(q), CBF(kcache), CBF(vcache), len_dev, len_host, maxT, NH, HS, split_len, \
        splits, scale_log2)
    if (groups <= 1) LAUNCH_SPLIT(1);
    else if (groups <= 2) LAUNCH_SPLIT(2);
    else if (groups <= 4) LAUNCH_SPLIT(4);
    else if (groups <= 8) LAUNCH_SPLIT(8);
    else if (groups <= 16) LAUNCH_SPLIT(16);
    else LAUNCH_SPLIT(32);
#undef LAUNCH_SPLIT
    LAUNCH_CHECK();
    decode_combine_kernel<<<B * NH, kCombineThreads, 0, cuda_stream>>>(
        BF(out), partial, len_dev, len_host, NH, HS, split_len, splits);
    LAUNCH_CHECK();
}

// kcache, vcache rows (b, pos + t) = k, v of qkv row (b, t), and q row (b, t) = its q;
// one thread per VEC channels
template <int VEC>
__global__ void kv_cache_store_kernel(bf16 *__restrict__ kcache, bf16 *__restrict__ vcache,
                                      bf16 *__restrict__ q, const bf16 *__restrict__ qkv,
                                      const int *__restrict__ pos, int B, int T, int maxT, int C) {
    const int nvec = C / VEC;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * nvec) return;
    const int c = (int)(idx % nvec) * VEC;
    const size_t bt = idx / nvec;
    const int t = (int)(bt % T), b = (int)(bt / T);
    const int p = *pos + t;
    const bf16 *src = qkv + bt * 3 * C + c;
    float x[VEC];
    if (q) {
        load_bf16<VEC>(x, src);
        store_bf16<VEC>(q + bt * C + c, x);
    }
    if (p < 0 || p >= maxT) return;   // the caller checked; never write outside the cache
    const size_t dst = ((size_t)b * maxT + p) * C + c;
    load_bf16<VEC>(x, src + C);
    store_bf16<VEC>(kcache + dst, x);
    load_bf16<VEC>(x, src + 2 * C);
    store_bf16<VEC>(vcache + dst, x);
}

}  // namespace

// splits <= max_splits(maxT) for every span <= maxT
size_t attention_decode_scratch_size(int B, int maxT, int NH, int HS) {
    ensure_backend();
    return (size_t)B * NH * max_splits(B, NH, maxT) * (HS + 2) * sizeof(float);
}

void attention_decode(floatX *out, void *scratch, const floatX *q, const floatX *kcache,
                      const floatX *vcache, int B, int len, int maxT, int NH, int HS) {
    if (len < 1 || len > maxT) die("attention_decode: length %d outside [1, %d]", len, maxT);
    decode(out, (float *)scratch, q, kcache, vcache, nullptr, len, len, B, maxT, NH, HS);
}

void attention_decode_dev(floatX *out, void *scratch, const floatX *q, const floatX *kcache,
                          const floatX *vcache, const int *len, int B, int maxT, int NH, int HS) {
    decode(out, (float *)scratch, q, kcache, vcache, len, 0, maxT, B, maxT, NH, HS);
}

void kv_cache_store(floatX *kcache, floatX *vcache, floatX *q, const floatX *qkv,
                    const int *pos, int B, int T, int maxT, int NH, int HS) {
    const int C = NH * HS, threads = 256;
    const size_t rows = (size_t)B * T;
    if (rows == 0) return;
    if (C % 8 == 0 && is_aligned16(kcache) && is_aligned16(vcache) && is_aligned16(qkv) &&
        (!q || is_aligned16(q)))
        kv_cache_store_kernel<8><<<ceil_div(rows * (C / 8), threads), threads, 0, cuda_stream>>>(
            BF(kcache), BF(vcache), BF(q), CBF(qkv), pos, B, T, maxT, C);
    else
        kv_cache_store_kernel<1><<<ceil_div(rows * C, threads), threads, 0, cuda_stream>>>(
            BF(kcache), BF(vcache), BF(q), CBF(qkv), pos, B, T, maxT, C);
    LAUNCH_CHECK();
}
