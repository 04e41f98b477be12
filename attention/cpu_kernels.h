// cpu_kernels.h: the two inner loops both CPU attention backends (naive.c, flash.c) are built
// from, shaped so that the compiler vectorises them: a vectorisable exp, and a weighted sum of
// rows kept in register accumulators. Static inline: each backend gets its own copy inlined.
#ifndef ATTENTION_CPU_KERNELS_H
#define ATTENTION_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

// exp(x) in plain arithmetic the compiler can vectorise (libm's expf is one call per element,
// which costs as much as the 4*HS flops around it). x = n ln2 + r with |r| <= ln2/2; exp(r)
// by Cephes' degree-7 polynomial; 2^n put straight into the exponent bits. Relative error
// below 1e-7 for x in [-87, 88]; x is clamped to that range (every caller passes x <= ~0,
// where the clamp turns an underflow into exp(-87) ~ 1.6e-38 instead of 0).
static inline float expf_vectorizable(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float round_shift = 12582912.0f;   // 1.5 * 2^23: adding it rounds to an integer
    const float n = (x * 1.44269504088896341f + round_shift) - round_shift;   // x / ln2
    float r = x - n * 0.693359375f;   // ln2 in two parts, so that r stays exact
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const uint32_t exponent_bits = (uint32_t)((int)n + 127) << 23;
    float two_to_n;
    memcpy(&two_to_n, &exponent_bits, sizeof two_to_n);
    return p * two_to_n;
}

#define ACCUMULATOR_WIDTH 64   // columns summed in registers at once: 4 AVX-512 or 8 AVX2 vectors

// y (width) += sum_k weights[k] * rows[k * row_stride + 0..width), rows (num_rows, width).
// Summed ACCUMULATOR_WIDTH columns at a time in local accumulators, which the compiler keeps
// in vector registers as independent FMA chains; adding row after row into y instead would
// store y and load it back for every row.
static inline void accumulate_weighted_rows(float *y, const float *weights, const float *rows,
                                     size_t row_stride, int num_rows, int width) {
    int i = 0;
    for (; i + ACCUMULATOR_WIDTH <= width; i += ACCUMULATOR_WIDTH) {
        float acc[ACCUMULATOR_WIDTH];
        for (int u = 0; u < ACCUMULATOR_WIDTH; u++) acc[u] = y[i + u];
        for (int k = 0; k < num_rows; k++) {
            const float *row = rows + k * row_stride + i;
            for (int u = 0; u < ACCUMULATOR_WIDTH; u++) acc[u] += weights[k] * row[u];
        }
        for (int u = 0; u < ACCUMULATOR_WIDTH; u++) y[i + u] = acc[u];
    }
    for (; i + 16 <= width; i += 16) {
        float acc[16];
        for (int u = 0; u < 16; u++) acc[u] = y[i + u];
        for (int k = 0; k < num_rows; k++) {
            const float *row = rows + k * row_stride + i;
            for (int u = 0; u < 16; u++) acc[u] += weights[k] * row[u];
        }
        for (int u = 0; u < 16; u++) y[i + u] = acc[u];
    }
    for (; i < width; i++) {
        float acc = y[i];
        for (int k = 0; k < num_rows; k++) acc += weights[k] * rows[k * row_stride + i];
        y[i] = acc;
    }
}

#endif
