// gemv.cuh: the pieces the decode step's one-row kernels share (layers/fused.cu's GEMV kernels,
// layers/decode_layers_sm90.cu): the layernorm of a row staged in shared memory, a warp's
// sums reduced together, and the rounded division they need.
#pragma once

#include "../runtime/cuda_common.cuh"
#include "layers.h"   // LAYERNORM_EPS

// x / y as --use_fast_math compiles it (div.approx: x times the approximate 1 / y), its product
// rounded by an explicit mul.rn, which ptxas does not contract into a following add
__device__ __forceinline__ float div_approx_rounded(float x, float y) {
    float q;
    asm("{\n\t.reg .f32 r;\n\trcp.approx.ftz.f32 r, %2;\n\tmul.rn.ftz.f32 %0, %1, r;\n\t}"
        : "=f"(q) : "f"(x), "f"(y));
    return q;
}

// The sums over the warp's 32 lanes of a lane's V values (V a power of two, at most 32), by a
// butterfly that gives half of its values away at each of its first log2(V) steps: at offset
// 16 the lanes with bit 16 keep the upper half (plus their partner's copy of it) and send the
// lower half, and so on down; the last 5 - log2(V) steps sum a single value. Afterwards lane l
// holds the warp's sum of value l / (32 / V). V - 1 + 5 - log2(V) shuffles in all.
template <int V>
__device__ __forceinline__ float warp_reduce_scatter(float (&v)[V], int lane) {
    static_assert(V >= 1 && V <= 32 && (V & (V - 1)) == 0, "a power of two up to 32");
#pragma unroll
    for (int step = 0; step < 5; step++) {
        const int offset = 16 >> step, half = V >> (step + 1);
        if (half >= 1) {
            const bool upper = lane & offset;
#pragma unroll
            for (int i = 0; i < half; i++) {
                const float send = upper ? v[i] : v[i + half];
                v[i] = (upper ? v[i + half] : v[i]) + __shfl_xor_sync(0xffffffffu, send, offset);
            }
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], offset);
        }
    }
    return v[0];
}

// One warp layer-norms the row x (K bf16 as nchunks 16-byte chunks in shared memory) in place, as
// layernorm_forward_kernel computes it (the same bits); lane l takes the chunks c = j * 32 + l.
// EARLY: the layernorm's weights are already in registers (lnw_r, lnb_r: chunk j * 32 + lane);
// else they are read from lnw, lnb where used.
template <int KC, bool EARLY>
__device__ __forceinline__ void layernorm_row(int4 *x, const bf16 *lnw, const bf16 *lnb, int K,
                                              int nchunks, const int4 (&lnw_r)[KC],
                                              const int4 (&lnb_r)[KC], int lane) {
    auto each_value = [&](auto f) {   // this lane's values of the row, in order
#pragma unroll
        for (int j = 0; j < KC; j++) {
            const int c = j * 32 + lane;
            if (c >= nchunks) break;
            float xv[8];
            unpack_bf16<8>(xv, x[c]);
#pragma unroll
            for (int k = 0; k < 8; k++) f(xv[k]);
        }
    };
    float sum = 0.0f;
    each_value([&](float v) { sum += v; });
    // the mean rounded once on its own (mul.rn cannot be contracted): in straight-line code
    // (FULL) ptxas folded m's product into each x - m (one FFMA for two roundings), which
    // changed the row's values; so the layernorm's SASS keeps the operations it had before
    // FULL (docs/PERF.md, thirteenth session)
    const float m = div_approx_rounded(warp_allreduce_sum(sum), (float)K);
    float sumsq = 0.0f;
    each_value([&](float v) { sumsq += (v - m) * (v - m); });
    const float s = rsqrtf(warp_allreduce_sum(sumsq) / K + LAYERNORM_EPS);
#pragma unroll
    for (int j = 0; j < KC; j++) {
        const int c = j * 32 + lane;
        if (c >= nchunks) break;
        float xv[8], wv[8], bv[8], y[8];
        unpack_bf16<8>(xv, x[c]);
        if (EARLY) {
            unpack_bf16<8>(wv, lnw_r[j]);
            unpack_bf16<8>(bv, lnb_r[j]);
        } else {
            load_bf16<8>(wv, lnw + c * 8);
            load_bf16<8>(bv, lnb + c * 8);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) y[k] = (xv[k] - m) * s * wv[k] + bv[k];
        store_bf16<8>(reinterpret_cast<bf16 *>(&x[c]), y);
    }
}
