// column_sums.cu: add_column_sums and column_sums' grid (column_sums.cuh). add_column_sums:
// block (32, 32) over 32 columns; lane y sums slices y, y+32, ... of its column, then lane 0
// adds the 32 lane sums in order, so the result is the same bits on every run.
#include "column_sums.cuh"

enum { COLUMN_LANES = 32 };

__global__ void add_column_sums_kernel(ColumnSumsDst dst, int part_width,
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
        bf16 *d = dst.part[col / part_width] + col % part_width;
        *d = __float2bfloat16_rn(__bfloat162float(*d) + total);
    }
}

void add_column_sums(ColumnSumsDst dst, int parts, int part_width, const float *partial,
                     int slices) {
    const int width = parts * part_width;
    add_column_sums_kernel<<<ceil_div(width, 32), dim3(32, COLUMN_LANES), 0, cuda_stream>>>(
        dst, part_width, partial, slices, width);
    LAUNCH_CHECK();
}

ColumnSumsLayout column_sums_layout(int N, int width, int vec) {
    ColumnSumsLayout l;
    l.col_blocks = ceil_div(width, 32 * vec);
    int slices = (8 * cuda_num_sms) / l.col_blocks;
    if (slices < 1) slices = 1;
    if (slices > ceil_div(N, 64)) slices = ceil_div(N, 64);
    l.max_slices = slices;
    l.rows_per_block = ceil_div(N, slices);
    l.slices = ceil_div(N, l.rows_per_block);
    return l;
}

size_t column_sums_scratch_size(int N, int width) {
    const int slices8 = column_sums_layout(N, width, 8).max_slices;
    const int slices1 = column_sums_layout(N, width, 1).max_slices;
    return (size_t)(slices8 > slices1 ? slices8 : slices1) * width * sizeof(float);
}
