// decode_block_sm90.h: the decode step's attention block and the MLP's first matmul at one row on
// Hopper as two kernels (decode_block_sm90.cu, built for sm_90a), called by layers/fused.cu's
// attention_block_fc_step.
#pragma once

#include "layers.h"

// decode_block_sm90 takes this call: a device of compute capability 9.0, one row (B = 1), head
// size 64, C = NH * 64 <= 1,792, x, ln1w, ln1b, qkvw, attprojw, ln2w, ln2b, fcw, kcache, vcache
// 16-byte aligned, the three biases
bool decode_block_sm90_fits(int B, int C, int NH, int HS, const DecodeBlockWeights *w, const void *x,
                            const void *kcache, const void *vcache);
// bytes of the scratch decode_block_sm90 needs, at any C it takes (its own: not zeroed, not kept)
size_t decode_block_sm90_scratch_size(void);
// attention_block_fc_step (layers.h) at one row: x (C) += attproj(att), att (C) = the attention of
// the new token at position *pos, whose q, k, v are layernorm(x) @ qkvw^T + qkvb, against
// kcache, vcache (NH, maxT, 64) at positions 0 .. *pos (the new k and v written into the caches at
// *pos); then fch (4C) = gelu(layernorm(x) @ fcw^T + fcb). As the plain calls, summed in other
// orders. scratch: decode_block_sm90_scratch_size() bytes, 16-byte aligned.
void decode_block_sm90(floatX *x, floatX *fch, floatX *att, void *scratch, const DecodeBlockWeights *w,
                       floatX *kcache, floatX *vcache, const int *pos, int C, int maxT, int NH);
