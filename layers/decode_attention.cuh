// decode_attention.cuh: the split records of the decode attention (decode_attention.cu) and
// their combination, shared with the kernel that may combine them instead of the attention:
// the output projection's GEMV (fused.cu, attention_matmul_residual_step), which then reads
// the records while it stages its input, so the attention's blocks need no count across them
// and no combine of their own (at batch 1: 3% of a step, docs/PERF.md "fifth session").
//
// A record per split: acc (HS floats, sum of 2^(score - m) v over the split's positions), then
// m (the split's largest score, exp2 domain) and l (sum of 2^(score - m)), padded to HS + 4
// floats so that every record starts 16-byte aligned. Records of head (b, h): splits of them
// at records + ((b * NH + h) * splits) * record_floats(HS); the first `used` hold positions.
#pragma once

#include "../attention/flash_tile.cuh"   // SoftmaxRow
#include "../runtime/cuda_common.cuh"

__host__ __device__ constexpr int record_floats(int HS) { return HS + 4; }

// where a decode step's records are, for a kernel that combines them (after its pdl_wait)
struct DecodeRecords {
    const float *records;   // (B, NH, splits, record_floats(HS))
    const int *pos;         // the step's position: len = *pos + 1
    int split_len, splits, NH, HS;
};

// splits of a head that hold positions, for a cache of len positions
__device__ __forceinline__ int used_splits(int len, int split_len) {
    return (len + split_len - 1) / split_len;
}

// out[w] = the attention output at channels e0 .. e0 + W - 1 of the head whose first record is
// `head`, from its `used` records: (M, L, sum) merged as the online softmax merges rows, 8
// records at a time with all their loads in flight (one L2 round trip per 8 splits). The
// records' m are finite (a used split holds a position), so M is finite after the first chunk.
// W = 1 (one channel a thread) or a multiple of 4 (vector loads; e0 a multiple of 4).
template <int W>
__device__ __forceinline__ void combine_splits(float (&out)[W], const float *head, int used,
                                               int HS, int e0) {
    constexpr int kChunk = 8;
    const int stride = record_floats(HS);
    float M = -INFINITY, L = 0.0f, sum[W];
#pragma unroll
    for (int w = 0; w < W; w++) sum[w] = 0.0f;
    SoftmaxRow merged{M, L};
    for (int i0 = 0; i0 < used; i0 += kChunk) {
        float m_i[kChunk], l_i[kChunk], acc_i[kChunk][W];
#pragma unroll
        for (int j = 0; j < kChunk; j++) {
            const float *r = head + (size_t)(i0 + j) * stride;
            const bool in = i0 + j < used;
            float2 ml = make_float2(-INFINITY, 0.0f);
            if (in) ml = __ldcg(reinterpret_cast<const float2 *>(r + HS));
            m_i[j] = ml.x;
            l_i[j] = ml.y;
            if constexpr (W % 4 == 0) {
#pragma unroll
                for (int w = 0; w < W; w += 4) {
                    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (in) v = __ldcg(reinterpret_cast<const float4 *>(r + e0 + w));
                    acc_i[j][w] = v.x; acc_i[j][w + 1] = v.y; acc_i[j][w + 2] = v.z; acc_i[j][w + 3] = v.w;
                }
            } else {
#pragma unroll
                for (int w = 0; w < W; w++) acc_i[j][w] = in ? __ldcg(r + e0 + w) : 0.0f;
            }
        }
        float m_new = M;
#pragma unroll
        for (int j = 0; j < kChunk; j++) m_new = fmaxf(m_new, m_i[j]);
        const float correction = merged.update(m_new);   // 0 at the first chunk
        L *= correction;
#pragma unroll
        for (int w = 0; w < W; w++) sum[w] *= correction;
#pragma unroll
        for (int j = 0; j < kChunk; j++) {
            const float w_j = exp2f(m_i[j] - m_new);   // 0 past `used`
            L += l_i[j] * w_j;
#pragma unroll
            for (int w = 0; w < W; w++) sum[w] += acc_i[j][w] * w_j;
        }
    }
#pragma unroll
    for (int w = 0; w < W; w++) out[w] = sum[w] / L;
}

// The decode step's attention (as attention_decode_step) leaving every split's record in
// scratch and no output: for a kernel that combines them (combine_splits) after its pdl_wait.
DecodeRecords attention_decode_step_records(void *scratch, const floatX *qkv, floatX *kcache,
                                            floatX *vcache, const int *pos, int B, int maxT,
                                            int NH, int HS);
