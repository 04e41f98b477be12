// tensor_map.h: TMA tensor maps (CUtensorMap), encoded once and kept in a table. Host code, for
// the Hopper kernels that load tiles with TMA (attention/flash_sm90.cu, layers/decode_gemm_sm90.cu).
#pragma once

#include <cuda.h>

// The tensor map of a 4-D tensor {cols, heads, T, B} (innermost first) of bf16 or fp32 values,
// rows of `cols` values, `heads` rows a position (3*NH in packed qkv and dqkv, NH in dout and
// the dQ sums; 1 for a plain matrix of T rows): boxes of {box_cols, 1 head, rows, 1 batch},
// 128-byte swizzle (box_cols values are 128 bytes), zeros where a load leaves the tensor,
// nothing written where a store or reduction does. A map is a function of (pointer, type,
// shape, box) alone, so maps are kept in a table: each buffer is encoded once, and a buffer
// freed and reallocated at the same address gets the same map.
const CUtensorMap *tensor_map_4d(const void *ptr, CUtensorMapDataType type, int cols, int heads,
                                 int T, int B, int box_cols, int rows);
