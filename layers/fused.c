// fused.c: the decode step's fused calls on the CPU: the plain layers one after another
// (fused_plain.h). The CPU has no launches to save; these calls exist so that the model
// (gpt2_decode.c) makes the same calls on both backends.
#include "fused_plain.h"

size_t fused_scratch_size(int N, int C, int OC) { return plain_scratch_size(N, C, OC); }

void layernorm_matmul_forward(floatX *out, void *scratch, const floatX *inp, const floatX *lnw,
                              const floatX *lnb, const floatX *weight, const floatX *bias, int N,
                              int C, int OC, int gelu, const float *stats) {
    plain_layernorm_matmul(out, plain_scratch(scratch, N, C), inp, lnw, lnb, weight, bias, N, C,
                           OC, gelu);
}

int matmul_residual_forward(floatX *residual, void *scratch, const floatX *inp,
                            const floatX *weight, const floatX *bias, int N, int C, int OC,
                            float *stats) {
    plain_matmul_residual(residual, plain_scratch(scratch, N, C), inp, weight, bias, N, C, OC);
    return 0;
}

void decode_layers_step(floatX *x, floatX *qkv, floatX *att, floatX *fch, void *att_scratch,
                        void *scratch, float *x_stats, const DecodeLayerWeights *w, int L,
                        floatX *kcache, floatX *vcache, size_t layer_stride, const int *pos, int B,
                        int beside, int maxT, int NH, int HS) {
    plain_decode_layers(x, qkv, att, fch, att_scratch, scratch, x_stats, w, L, kcache, vcache,
                        layer_stride, pos, B, beside, maxT, NH, HS);
}

void lm_head_forward(floatX *logits, int *argmax, void *scratch, const floatX *inp,
                     const floatX *lnw, const floatX *lnb, const floatX *wte, int N, int C, int V,
                     int Vp) {
    plain_lm_head(logits, argmax, plain_scratch(scratch, N, C), inp, lnw, lnb, wte, N, C, V, Vp);
}

int decode_step_end(floatX *logits, int *tokens, void *scratch, floatX *x, const floatX *lnfw,
                    const floatX *lnfb, const floatX *wte, const floatX *wpe, int *ring, int slots,
                    int *cells, int ncells, int step, int last, int B, int C, int V, int Vp) {
    plain_decode_step_end(logits, tokens, scratch, x, lnfw, lnfb, wte, wpe, ring, slots, cells,
                          ncells, step, last, B, C, V, Vp);
    return 0;
}

int decode_step_parts(int B, int C) { return 1; }   // the CPU runs its layers in order
