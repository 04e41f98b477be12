// column_sums.cu: add_column_sums (column_sums.cuh). Block (32, 32) over 32 columns; lane y
// sums slices y, y+32, ... of its column, then lane 0 adds the 32 lane sums in order, so the
// result is the same bits on every run.
#include "column_sums.cuh"

enum { COLUMN_LANES = 32 };

__global__ void add_column_sums_kernel(bf16 *first, bf16 *second, int split,
                                       const float *__restrict__ partial, int slices, int width) {
    __shared__ float sums[COLUMN_LANES][32];
    const int col = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (col < width)
        for (int s = threadIdx.y; s < slices; s += COLUMN_LANES) acc += partial[(size_t)s * width + col];
    sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < width) {
        float total = 0.0f;
        for (int y = 0; y < COLUMN_LANES; y++) total += sums[y][threadIdx.x];
        bf16 *dst = col < split ? first + col : second + (col - split);
        *dst = __float2bfloat16_rn(__bfloat162float(*dst) + total);
    }
}

void add_column_sums(bf16 *first, bf16 *second, int split, const float *partial, int slices,
                     int width) {
    add_column_sums_kernel<<<ceil_div(width, 32), dim3(32, COLUMN_LANES), 0, cuda_stream>>>(
        first, second, split, partial, slices, width);
    LAUNCH_CHECK();
}
