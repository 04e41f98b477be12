// layernorm.c: layer normalization over the channels of each row, forward and backward.
#include "channel_chunks.h"
#include "layers.h"

#include <math.h>

// One row: out (C), *mean, *rstd from x (C). Not inlined, so that both entry points run one
// compiled copy of it (the same vectorised sums): a layernorm recomputed from a stored residual
// gets the bits the fused residual pass gave.
__attribute__((noinline)) static void layernorm_row(float *o, float *mean, float *rstd,
                                                    const float *x, const floatX *weight,
                                                    const floatX *bias, int C) {
    float sum = 0.0f;
    #pragma omp simd reduction(+:sum)
    for (int c = 0; c < C; c++) sum += x[c];
    float m = sum / C;
    float sumsq = 0.0f;
    #pragma omp simd reduction(+:sumsq)
    for (int c = 0; c < C; c++) {
        float d = x[c] - m;
        sumsq += d * d;
    }
    float s = 1.0f / sqrtf(sumsq / C + LAYERNORM_EPS);
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    *mean = m;
    *rstd = s;
}

// out (N,C), mean (N), rstd (N), inp (N,C), weight (C), bias (C)
void layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp,
                       const floatX *weight, const floatX *bias, int N, int C) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++)
        layernorm_row(out + (size_t)i * C, &mean[i], &rstd[i], inp + (size_t)i * C, weight, bias, C);
}

// residual (N,C) = a + b (may alias a), then out (N,C), mean (N), rstd (N) of it
void layernorm_residual_forward(floatX *residual, floatX *out, float *mean, float *rstd,
                                const floatX *a, const floatX *b, const floatX *weight,
                                const floatX *bias, int N, int C) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float *r = residual + (size_t)i * C;
        const float *ai = a + (size_t)i * C, *bi = b + (size_t)i * C;
        for (int c = 0; c < C; c++) r[c] = ai[c] + bi[c];
        layernorm_row(out + (size_t)i * C, &mean[i], &rstd[i], r, weight, bias, C);
    }
}

size_t layernorm_backward_scratch_size(int N, int C) { return 0; }

typedef struct {
    floatX *dweight, *dbias;
    const floatX *dout, *inp;
    const float *mean, *rstd;
    int N, C;
} LayernormParamGrads;

// channels [c0, c1) of dweight and dbias, from every row in order (for_channel_chunks)
static void layernorm_param_grads_channels(void *ctx, int c0, int c1) {
    const LayernormParamGrads *g = ctx;
    const int N = g->N, C = g->C;
    for (int i = 0; i < N; i++) {
        const float *dout_i = g->dout + (size_t)i * C;
        const float *x = g->inp + (size_t)i * C;
        float m = g->mean[i], s = g->rstd[i];
        for (int c = c0; c < c1; c++) {
            g->dweight[c] += dout_i[c] * (x[c] - m) * s;
            g->dbias[c] += dout_i[c];
        }
    }
}

// dinp (N,C) +=, dweight (C) +=, dbias (C) +=, dproj_bias (C) += colsum(dinp) after the
// addition unless NULL, dout (N,C), inp (N,C), weight (C), mean (N), rstd (N)
void layernorm_backward(floatX *dinp, floatX *dweight, floatX *dbias, floatX *dproj_bias,
                        void *scratch, const floatX *dout, const floatX *inp,
                        const floatX *weight, const float *mean, const float *rstd, int N, int C) {
    // dinp: each row on its own, through the two row means the normalization couples
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float *dout_i = dout + (size_t)i * C;
        const float *x = inp + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
        #pragma omp simd reduction(+:dnorm_sum, dnorm_norm_sum)
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dnorm = dout_i[c] * weight[c];
            dnorm_sum += dnorm;
            dnorm_norm_sum += dnorm * norm;
        }
        float dnorm_mean = dnorm_sum / C;
        float dnorm_norm_mean = dnorm_norm_sum / C;
        float *dinp_i = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dnorm = dout_i[c] * weight[c];
            dinp_i[c] += s * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
        }
    }
    // dweight, dbias: sums over rows
    LayernormParamGrads g = {dweight, dbias, dout, inp, mean, rstd, N, C};
    for_channel_chunks(C, layernorm_param_grads_channels, &g);
    if (dproj_bias) column_sums_add(dproj_bias, dinp, N, C);
}
