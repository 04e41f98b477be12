// fused_plain.h: the decode step's fused calls (layers.h) as the plain layers they fuse, one
// after another: the CPU backend's implementation of them (fused.c), and the CUDA backend's
// with more rows than its GEMV kernels take (fused.cu). One definition for both, so the CPU
// and the CUDA fallback cannot drift apart. Included by layers/fused.c and layers/fused.cu.
#ifndef FUSED_PLAIN_H
#define FUSED_PLAIN_H

#include "layers.h"

static inline size_t plain_align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// the plain calls' scratch: ln (N, C), its mean and rstd (N), pre (N, OC) a matmul's output
// before GELU or before the residual add
typedef struct {
    floatX *ln;
    float *mean, *rstd;
    floatX *pre;
} PlainScratch;

static inline size_t plain_scratch_size(int N, int C, int OC) {
    return plain_align256((size_t)N * C * sizeof(floatX)) + 2 * plain_align256((size_t)N * sizeof(float)) +
           plain_align256((size_t)N * OC * sizeof(floatX));
}

static inline PlainScratch plain_scratch(void *scratch, int N, int C) {
    char *p = (char *)scratch;
    PlainScratch s;
    s.ln = (floatX *)p;
    p += plain_align256((size_t)N * C * sizeof(floatX));
    s.mean = (float *)p;
    p += plain_align256((size_t)N * sizeof(float));
    s.rstd = (float *)p;
    p += plain_align256((size_t)N * sizeof(float));
    s.pre = (floatX *)p;
    return s;
}

static inline void plain_layernorm_matmul(floatX *out, PlainScratch s, const floatX *inp,
                                          const floatX *lnw, const floatX *lnb,
                                          const floatX *weight, const floatX *bias, int N, int C,
                                          int OC, int gelu) {
    layernorm_forward(s.ln, s.mean, s.rstd, inp, lnw, lnb, N, C);
    matmul_forward_epilogue(out, s.pre, s.ln, weight, bias, N, C, OC, gelu, 0);
}

static inline void plain_matmul_residual(floatX *residual, PlainScratch s, const floatX *inp,
                                         const floatX *weight, const floatX *bias, int N, int C,
                                         int OC) {
    matmul_forward_epilogue(residual, s.pre, inp, weight, bias, N, C, OC, 0, 1);
}

// decode_layers_step as the calls it is made of (layers.h), each the backend's own
static inline void plain_decode_layers(floatX *x, floatX *qkv, floatX *att, floatX *fch,
                                       void *att_scratch, void *scratch, float *x_stats,
                                       const DecodeLayerWeights *layers, int L, floatX *kcache,
                                       floatX *vcache, size_t layer_stride, const int *pos, int B,
                                       int beside, int maxT, int NH, int HS) {
    const int C = NH * HS;
    const float *stats = NULL;   // x's row statistics, where the call that last wrote x left them
    for (int l = 0; l < L; l++) {
        const DecodeLayerWeights *w = &layers[l];
        floatX *k = kcache + l * layer_stride, *v = vcache + l * layer_stride;
        // attention block: x += attproj(attention(qkv(ln1(x))))
        layernorm_matmul_forward(qkv, scratch, x, w->ln1w, w->ln1b, w->qkvw, w->qkvb, B, C, 3 * C, 0, stats);
        attention_decode_step(att, att_scratch, qkv, k, v, pos, B, beside, maxT, NH, HS);
        stats = matmul_residual_forward(x, scratch, att, w->attprojw, w->attprojb, B, C, C, x_stats) ? x_stats : NULL;
        // MLP block: x += fcproj(gelu(fc(ln2(x))))
        layernorm_matmul_forward(fch, scratch, x, w->ln2w, w->ln2b, w->fcw, w->fcb, B, C, 4 * C, 1, stats);
        stats = matmul_residual_forward(x, scratch, fch, w->fcprojw, w->fcprojb, B, 4 * C, C, x_stats) ? x_stats : NULL;
    }
}

static inline void plain_lm_head(floatX *logits, int *argmax, PlainScratch s, const floatX *inp,
                                 const floatX *lnw, const floatX *lnb, const floatX *wte, int N,
                                 int C, int V, int Vp) {
    layernorm_forward(s.ln, s.mean, s.rstd, inp, lnw, lnb, N, C);
    matmul_forward(logits, s.ln, wte, NULL, N, C, Vp);
    logits_argmax(argmax, logits, Vp, N, V);
}

// decode_step_end as its three calls (layers.h)
static inline void plain_decode_step_end(floatX *logits, int *tokens, void *scratch, floatX *x,
                                         const floatX *lnfw, const floatX *lnfb,
                                         const floatX *wte, const floatX *wpe, int *ring,
                                         int slots, int *cells, int ncells, int step, int last,
                                         int B, int C, int V, int Vp) {
    lm_head_forward(logits, tokens, scratch, x, lnfw, lnfb, wte, B, C, V, Vp);
    decode_advance(ring, slots, cells, ncells, step, last, tokens, B);
    if (!last) decode_embed(x, tokens, cells + step + 1, wte, wpe, B, C, 1);
}

#endif
