// column_sums.cuh: the end of the CUDA layers' deterministic parameter-gradient reductions
// (layernorm's dweight and dbias, matmul's dbias): their kernels write per-block partial sums
// to scratch instead of adding with atomics, and add_column_sums adds those in a fixed order.
#pragma once

#include "../runtime/cuda_common.cuh"

// With partial (slices, width) fp32 sums, adds the column sums in a fixed order into bf16
// parameter gradients: first[c] += sum_s partial[s][c] for c < split,
// second[c - split] += ... for c >= split.
void add_column_sums(bf16 *first, bf16 *second, int split, const float *partial, int slices,
                     int width);
