// flash_sm90.h: the Hopper forward of flash attention (attention/flash_sm90.cu, built for
// sm_90a), called by attention/flash.cu.
#pragma once

#include "../layers/layers.h"

// true on a device of compute capability 9.0 (H100, H200) unless the environment says
// FLASH_SM90=0 (to run the mma.sync forward there, e.g. to compare the two); asked once
bool flash_sm90_enabled();
// flash.cu's attention_forward on Hopper: out (B,T,NH,HS), logsumexp (B,NH,T) from packed qkv
// (B,T,3,NH,HS); HS 64 or 128 (the caller checks)
void flash_sm90_forward(floatX *out, float *logsumexp, const floatX *qkv, int B, int T, int NH,
                        int HS);
