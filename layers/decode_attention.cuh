// decode_attention.cuh: the flash-decoding attention of one new query per sequence
// (decode_attention.cu describes it): its arguments and one block's work, shared by the
// per-call kernel (decode_attention.cu) and the persistent decode step (decode_step.cu), so
// that both compute the same bits.
#pragma once

#include <math.h>

#include "../runtime/cuda_common.cuh"
#include "layers.h"

constexpr int kSplitThreads = 128;
constexpr int kRows = 4;             // cache rows a group loads at once
constexpr int kMinSplitKeys = 64;    // positions per split at least: one round at HS = 64
constexpr int kBlocksPerSM = 4;      // blocks wanted per SM when B*NH alone is too few

struct DecodeArgs {
    bf16 *out;                        // (B, NH, HS)
    float *partial;                   // (B, NH, splits, HS + 2): acc (HS), m, l of each split
    unsigned *counters;               // (B, NH): splits done, reset to 0 by the combining block
    const bf16 *q;                    // row b at q + b * q_stride
    bf16 *kcache, *vcache;            // (B, maxT, NH, HS)
    const bf16 *new_k, *new_v;        // the step's new row b at new_k + b * q_stride, or null
    const int *pos_dev;               // the step's position (len = pos + 1), or null: len_host
    int len_host, q_stride, maxT, B, NH, HS, split_len, splits;
    float scale_log2;
};

// Block (split, h, b) of the flash-decoding grid (splits, NH, B): the body of decode_kernel
// (decode_attention.cu) and of the persistent decode step's attention phase (decode_step.cu),
// which walks the grid's blocks. wait() is called once, after the first round of cache rows is
// in flight and before the query and the new row (written by the kernel or phase before) are
// read: PDL's wait in the kernel, the grid barrier in the persistent step. kSplitThreads
// threads; G lanes per cache row, 8 channels each; kRows rows per group per round.
template <int G, typename Wait>
__device__ __forceinline__ void decode_block(const DecodeArgs &a, int split, int h, int b, Wait wait) {
    constexpr int kGroups = kSplitThreads / G;    // groups per block
    constexpr int kWarpGroups = 32 / G;           // groups per warp
    // the position and the cache's rows before it were written before the kernel before this
    // one started (a host copy, earlier steps): they may be read before pdl_wait
    const int len = a.pos_dev ? *a.pos_dev + 1 : a.len_host;
    const int new_pos = a.new_k ? len - 1 : -1;   // the row that comes from qkv
    const int start = split * a.split_len;
    const int end = min(start + a.split_len, len);
    const int HS = a.HS, C = a.NH * HS;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int member = lane % G;
    const int group = warp * kWarpGroups + lane / G;
    const bool active = member * 8 < HS;   // lanes past HS (HS/8 not a power of two) idle
    const size_t head = (size_t)b * a.maxT * C + h * HS + member * 8;

    // A round: group g takes rows base + r * kGroups + g, r < kRows. All 2 * kRows loads of a
    // round are issued before any math, so one memory latency covers kRows rows.
    int4 k_raw[kRows], v_raw[kRows];
    auto load_round = [&](int base) {
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const int s = base + r * kGroups + group;
            k_raw[r] = v_raw[r] = make_int4(0, 0, 0, 0);
            if (s < end && active) {
                k_raw[r] = *reinterpret_cast<const int4 *>(a.kcache + head + (size_t)s * C);
                v_raw[r] = *reinterpret_cast<const int4 *>(a.vcache + head + (size_t)s * C);
            }
        }
    };
    if (start < end) load_round(start);   // before the wait: the cache is not the last kernel's
    wait();
    if (start >= end) return;   // past len: nothing to do (after the wait, as PDL wants)

    float qv[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (active) {
        const int4 raw = __ldcg(reinterpret_cast<const int4 *>(a.q + (size_t)b * a.q_stride + h * HS + member * 8));
        unpack_bf16<8>(qv, raw);
#pragma unroll
        for (int i = 0; i < 8; i++) qv[i] *= a.scale_log2;
    }
    float running_max = -INFINITY, running_sum = 0.0f;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};

    // The loop is block-uniform (the shuffles need every lane); rows past `end` weigh nothing.
    for (int base = start; base < end; base += kGroups * kRows) {
        if (base != start) load_round(base);
        bool valid[kRows];
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const int s = base + r * kGroups + group;
            valid[r] = s < end;
            if (s == new_pos && active) {   // the new token: from qkv, and into the cache
                const size_t src = (size_t)b * a.q_stride + h * HS + member * 8;
                k_raw[r] = __ldcg(reinterpret_cast<const int4 *>(a.new_k + src));
                v_raw[r] = __ldcg(reinterpret_cast<const int4 *>(a.new_v + src));
                *reinterpret_cast<int4 *>(a.kcache + head + (size_t)s * C) = k_raw[r];
                *reinterpret_cast<int4 *>(a.vcache + head + (size_t)s * C) = v_raw[r];
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
    __shared__ bool combines;
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
    __syncthreads();
    const size_t bh = (size_t)b * a.NH + h;
    bf16 *out = a.out + bh * HS;
    if (a.splits == 1) {   // the whole cache in this block: no partial record, no combine
        const float inv_l = 1.0f / block_sum;
        for (int i = threadIdx.x; i < HS; i += kSplitThreads) {
            float sum = 0.0f;
            for (int g = 0; g < kGroups; g++) sum += group_acc[g][i] * group_weight[g];
            out[i] = __float2bfloat16_rn(sum * inv_l);
        }
        return;
    }
    float *records = a.partial + bh * a.splits * (HS + 2);
    float *record = records + split * (HS + 2);
    for (int i = threadIdx.x; i < HS; i += kSplitThreads) {
        float sum = 0.0f;
        for (int g = 0; g < kGroups; g++) sum += group_acc[g][i] * group_weight[g];
        record[i] = sum;
    }
    if (threadIdx.x == 0) {
        record[HS] = block_max;
        record[HS + 1] = block_sum;
    }

    // The last of the head's used splits to get here combines: its record writes are made
    // visible (fence) before the count; the combining block fences again before reading the
    // others' records, through L2 (ldcg: they were written on other SMs).
    const int used = (len + a.split_len - 1) / a.split_len;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned done = atomicAdd(a.counters + bh, 1u);
        combines = done == (unsigned)used - 1;
        if (combines) {
            a.counters[bh] = 0;   // for the next call (stream-ordered after this kernel)
            __threadfence();
        }
    }
    __syncthreads();
    if (!combines) return;
    float m = -INFINITY;
    for (int i = 0; i < used; i++) m = fmaxf(m, __ldcg(records + i * (HS + 2) + HS));
    float l = 0.0f;
    for (int i = 0; i < used; i++)
        l += __ldcg(records + i * (HS + 2) + HS + 1) * exp2f(__ldcg(records + i * (HS + 2) + HS) - m);
    const float inv_l = 1.0f / l;
    for (int e = threadIdx.x; e < HS; e += kSplitThreads) {
        float sum = 0.0f;
        for (int i = 0; i < used; i++)
            sum += __ldcg(records + i * (HS + 2) + e) * exp2f(__ldcg(records + i * (HS + 2) + HS) - m);
        out[e] = __float2bfloat16_rn(sum * inv_l);
    }
}

// lanes per cache row for a head size: HS/8 rounded up to a power of two (the G of decode_block)
__host__ __device__ inline int decode_groups(int HS) {
    int g = 1;
    while (g < HS / 8) g *= 2;
    return g;
}

// The decode step's arguments (attention_decode_step, layers.h), layout and scratch included;
// checks the shape (dies on one it cannot do). decode_attention.cu.
DecodeArgs decode_step_args(floatX *out, void *scratch, const floatX *qkv, floatX *kcache,
                            floatX *vcache, const int *pos, int B, int maxT, int NH, int HS);
