// decode_qkv_attention_sm90.h: the decode step's layernorm + QKV + attention at one row on Hopper
// as one kernel (decode_qkv_attention_sm90.cu, built for sm_90a), called by layers/fused.cu's
// layernorm_qkv_attention_step.
#pragma once

#include "layers.h"

// decode_qkv_attention_sm90 takes this call: a device of compute capability 9.0, one row (B = 1),
// head size 64, C = NH * 64 <= 1,792, inp, lnw, lnb, weight, kcache, vcache 16-byte aligned, a bias
bool decode_qkv_attention_sm90_fits(int B, int C, int NH, int HS, const void *att, const void *inp,
                                    const void *lnw, const void *lnb, const void *weight,
                                    const void *bias, const void *kcache, const void *vcache);
// att (C) = the attention of the new token at position *pos, whose q, k, v are layernorm(inp)
// (C) @ weight^T + bias (weight (3C, C), bias (3C), rounded to bf16), against kcache, vcache
// (NH, maxT, 64) at positions 0 .. *pos; the new k and v are written into the caches at *pos.
// As layernorm_matmul_forward then attention_decode_step at B = 1, summed in other orders.
void decode_qkv_attention_sm90(floatX *att, const floatX *inp, const floatX *lnw, const floatX *lnb,
                               const floatX *weight, const floatX *bias, floatX *kcache,
                               floatX *vcache, const int *pos, int C, int maxT, int NH);
