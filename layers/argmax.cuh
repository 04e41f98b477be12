// argmax.cuh: greedy decoding's order on (logit, index) pairs, written once for every kernel that
// picks a row's largest logit: logits_argmax (argmax.cu), the one-row and few-row LM heads
// (fused.cu) and the 9-64-row LM head (decode_gemm_sm90.cu).
#pragma once

#include <float.h>
#include <stdint.h>

// (v, i) is better than (best_v, best_i): larger, or equal and earlier. A NaN is never better, and
// -0 equals +0. Every reduction starts from (-FLT_MAX, 0x7fffffff), an index past any vocabulary,
// which the caller turns into index 0 (a row of NaNs), as the CPU does.
__device__ __forceinline__ bool better(float v, int i, float best_v, int best_i) {
    return v > best_v || (v == best_v && i < best_i);
}

// best over the lanes `offset` apart for every offset from 16 down to `lowest` (a power of two)
__device__ __forceinline__ void warp_best(float &best_v, int &best_i, int lowest) {
#pragma unroll
    for (int offset = 16; offset >= lowest; offset >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, best_v, offset);
        const int i = __shfl_xor_sync(0xffffffffu, best_i, offset);
        if (better(v, i, best_v, best_i)) { best_v = v; best_i = i; }
    }
}

// (v, i) as one 64-bit key whose unsigned order is `better`'s, for pairs `better` has chosen
// (never a NaN): the float's bits made monotonic (a negative's flipped, a positive's sign bit set;
// -0 first made +0, which `better` holds equal), then the index inverted, so that among equal
// values the earlier index is the larger key. So a grid's blocks can reduce their bests with one
// atomicMax a row, in any order; 0 is below every key (the sentinel's included).
__device__ __forceinline__ unsigned long long best_key(float v, int i) {
    const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
    const uint32_t ordered = u & 0x80000000u ? ~u : u | 0x80000000u;
    return (unsigned long long)ordered << 32 | (0xffffffffu - (uint32_t)i);
}
__device__ __forceinline__ int best_key_index(unsigned long long key) {
    return (int)(0xffffffffu - (uint32_t)key);
}
