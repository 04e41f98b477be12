// decode_layers_sm90.h: the decode step's layers at one row on Hopper, two kernels a layer
// (decode_layers_sm90.cu, built for sm_90a), called by layers/fused.cu's decode_layers_step.
#pragma once

#include "layers.h"

// decode_layers_sm90 takes this call: a device of compute capability 9.0, one row (B = 1), head
// size 64, C = NH * 64 <= 1,792, at least one layer; x, kcache, vcache and every layer's ln1w,
// ln1b, qkvw, attprojw, ln2w, ln2b, fcw, fcprojw 16-byte aligned, its four biases
bool decode_layers_sm90_fits(int B, int C, int NH, int HS, const DecodeLayerWeights *w, int L,
                             const void *x, const void *kcache, const void *vcache);
// bytes of the scratch decode_layers_sm90 needs, at any C it takes (its own: not zeroed, not kept)
size_t decode_layers_sm90_scratch_size(void);
// decode_layers_step (layers.h) at one row, all of it but the last layer's FC projection, which
// the caller adds (x += fch @ fcprojw^T + fcprojb of w[L - 1]): x (C) through the L layers of w,
// against layer l's caches kcache, vcache + l * layer_stride (NH, maxT, 64) at positions 0 .. *pos
// (each layer's new k and v written at *pos); att (C) and fch (4C) left as the last layer's. As
// the plain calls, summed in other orders. scratch: decode_layers_sm90_scratch_size() bytes,
// 16-byte aligned.
void decode_layers_sm90(floatX *x, floatX *att, floatX *fch, void *scratch, const DecodeLayerWeights *w,
                        int L, floatX *kcache, floatX *vcache, size_t layer_stride, const int *pos,
                        int C, int maxT, int NH);
