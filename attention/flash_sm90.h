// flash_sm90.h: the Hopper kernels of flash attention (attention/flash_sm90.cu, built for
// sm_90a), called by attention/flash.cu.
#pragma once

#include <stdint.h>

#include "../layers/layers.h"

// The backward's per-(b, h) vectors (D, logsumexp*log2e) are rows of a multiple of this many
// floats, so that every query tile's slice is 16-byte aligned for the bulk copies
constexpr int kFlashBwdRowPad = 128;

// true on a device of compute capability 9.0 (H100, H200) unless the environment says
// FLASH_SM90=0 (to run the mma.sync kernels there, e.g. to compare); asked once
bool flash_sm90_enabled();
// the Hopper backward too: flash_sm90_enabled() unless FLASH_SM90_BWD=0 (the Hopper forward
// with the mma.sync backward, to compare the two backwards)
bool flash_sm90_backward_enabled();
// flash.cu's attention_forward on Hopper: out (B,T,NH,HS), logsumexp (B,NH,T) from packed qkv
// (B,T,3,NH,HS); HS 64 or 128 (the caller checks)
void flash_sm90_forward(floatX *out, float *logsumexp, const floatX *qkv, int B, int T, int NH,
                        int HS);
// flash.cu's attention_backward on Hopper, between its prep and convert kernels: dK, dV into
// packed dqkv, dQ added into dq_accum (B,T,NH,HS fp32, zeroed by prep); lse2 = logsumexp*log2e
// and D = rowsum(dO*O), both (B*NH, Tpad) with zeros past T; dq_flags, B*NH*ceil(T/64) + 1
// zeros: flags that order the dQ additions when `deterministic` (bit-identical gradients run to
// run), then the counter that hands out the kernel's work items
void flash_sm90_backward(floatX *dqkv, float *dq_accum, const float *lse2, const float *D,
                         uint32_t *dq_flags, const floatX *dout, const floatX *qkv, int B, int T,
                         int Tpad, int NH, int HS, bool deterministic);
