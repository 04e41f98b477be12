// decode_attention.cuh: the arithmetic of the decode attention that its two kernels share
// (decode_attention.cu's split kernel, decode_layers_sm90.cu's cluster kernel): a group of
// G lanes takes a cache row, each lane 8 of its channels; a round is ROWS rows a group, their
// scores, the online softmax's update and acc += p v; at the end the warp's groups merged.
#pragma once

#include "../attention/flash_tile.cuh"   // SoftmaxRow
#include "../runtime/cuda_common.cuh"

// One round of the group's rows k_cur, v_cur (valid[r] false: a row past the span, weighing
// nothing): score = q . k over the group's lanes (qv already scaled into the exp2 domain), then
// (running_max, running_sum) and acc, the group's row of the online softmax, updated. Returns at
// once where the group has no row in the round. Every lane of the warp calls it (the shuffles).
// rows: the rows r < rows of the round may hold positions for some group, the others for none
// (the same in the whole block): those are skipped, work and all.
template <int G, int ROWS>
__device__ __forceinline__ void decode_round(const float (&qv)[8], const int4 (&k_cur)[ROWS],
                                             const int4 (&v_cur)[ROWS], const bool (&valid)[ROWS],
                                             float &running_max, float &running_sum, float (&acc)[8],
                                             int rows = ROWS) {
    float score[ROWS];
    float round_max = -INFINITY;
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        score[r] = 0.0f;
        if (r >= rows) break;
        float k[8];
        unpack_bf16<8>(k, k_cur[r]);
#pragma unroll
        for (int i = 0; i < 8; i++) score[r] += qv[i] * k[i];
#pragma unroll
        for (int offset = G / 2; offset > 0; offset >>= 1)
            score[r] += __shfl_xor_sync(0xffffffffu, score[r], offset);
        if (valid[r]) round_max = fmaxf(round_max, score[r]);
    }
    if (round_max == -INFINITY) return;   // this group has no row in this round
    SoftmaxRow row{running_max, running_sum};   // scores in the exp2 domain: scale 1
    const float correction = row.update(fmaxf(running_max, round_max));   // 0 at the first row
    running_sum *= correction;
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] *= correction;
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        if (r >= rows) break;
        const float p = valid[r] ? exp2f(score[r] - running_max) : 0.0f;
        float v[8];
        unpack_bf16<8>(v, v_cur[r]);
        running_sum += p;
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] += p * v[i];
    }
}

// The warp's groups merged (a group's lanes with the same channels are G apart), each weighed by
// 2^(m_group - m_warp), a group that saw no row (m = -inf) by 0: afterwards every lane holds its
// channels' warp sums in acc and the warp's l in running_sum; returns the warp's m.
template <int G>
__device__ __forceinline__ float merge_warp_groups(float running_max, float &running_sum, float (&acc)[8]) {
    float warp_max = running_max;
#pragma unroll
    for (int offset = G; offset < 32; offset <<= 1)
        warp_max = fmaxf(warp_max, __shfl_xor_sync(0xffffffffu, warp_max, offset));
    const float w = running_max == -INFINITY ? 0.0f : exp2f(running_max - warp_max);
    running_sum *= w;
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] *= w;
#pragma unroll
    for (int offset = G; offset < 32; offset <<= 1) {
        running_sum += __shfl_xor_sync(0xffffffffu, running_sum, offset);
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], offset);
    }
    return warp_max;
}

// N parts of a row's online softmax merged, for one channel: part k has maximum m(k) (exp2
// domain), sum l(k) and the channel's weighed values acc(k); each weighs 2^(m(k) - M), M the
// largest m, a part that saw no position (m = -inf) 0. Sets M and L (the merged sum) and returns
// the channel's merged acc. (The cluster kernel's warps into its CTA, and its ranks into rank 0.)
template <int N, typename FM, typename FL, typename FA>
__device__ __forceinline__ float merge_parts(FM m, FL l, FA acc, float &M, float &L) {
    M = -INFINITY;
#pragma unroll
    for (int k = 0; k < N; k++) M = fmaxf(M, m(k));
    L = 0.0f;
    float o = 0.0f;
#pragma unroll
    for (int k = 0; k < N; k++) {
        const float weight = m(k) == -INFINITY ? 0.0f : exp2f(m(k) - M);
        L += l(k) * weight;
        o += acc(k) * weight;
    }
    return o;
}
