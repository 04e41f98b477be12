// column_sums.cuh: the CUDA layers' deterministic parameter-gradient reductions over rows
// (layernorm's dweight and dbias, the bias gradients). Their kernels write per-block partial
// sums to scratch instead of adding with atomics, and add_column_sums adds those in a fixed
// order: the same bits on every run.
#pragma once

#include "../runtime/cuda_common.cuh"

// With partial (slices, parts * part_width) fp32 sums, adds the column sums in a fixed order
// into bf16 parameter gradients, part p's columns into dst.part[p]:
// dst.part[c / part_width][c % part_width] += sum_s partial[s][c]
struct ColumnSumsDst {
    bf16 *part[3];
};
void add_column_sums(ColumnSumsDst dst, int parts, int part_width, const float *partial,
                     int slices);

// ---- column sums of a matrix made row by row: column_sums(dst, partial, rows, N, width, ...) ----
// dst (width) += colsum of the (N, width) matrix whose values rows(x, row, stride, valid, col)
// gives: x[r][0..VEC) = columns col.. of row + r * stride, for r < valid, VEC consecutive
// columns of COLUMN_ROWS_IN_FLIGHT rows at a time (all their loads issued before any use). It
// loads them (a bias gradient of a stored dout) or computes and stores them too
// (gelu_backward's dinp), so the sum costs no pass of its own.
// Blocks of (32, COLUMN_ROW_LANES) threads: block (x, y) covers columns 32*VEC*x.. and the
// row slice y; lane y of a column sums rows y, y + COLUMN_ROW_LANES, ... of the slice, in order.
enum { COLUMN_ROW_LANES = 8, COLUMN_ROWS_IN_FLIGHT = 2 };

// the grid at (N, width), vec columns a thread: col_blocks x slices, about 8 blocks an SM in
// all, each slice at least 64 rows (rows_per_block). slices is at most max_slices, which never
// decreases with N (so scratch for N serves any fewer rows).
struct ColumnSumsLayout {
    int col_blocks, slices, rows_per_block, max_slices;
};
ColumnSumsLayout column_sums_layout(int N, int width, int vec);
// the partial sums' bytes, for whichever vector width the caller uses
size_t column_sums_scratch_size(int N, int width);

template <int VEC, typename Rows>
__global__ void __launch_bounds__(32 * COLUMN_ROW_LANES)
    column_partial_sums_kernel(float *partial, Rows rows, int N, int width, int rows_per_block) {
    __shared__ float sums[COLUMN_ROW_LANES][VEC][32];
    const int col = (blockIdx.x * 32 + threadIdx.x) * VEC;
    const int row_begin = blockIdx.y * rows_per_block;
    const int row_end = min(N, row_begin + rows_per_block);
    float acc[VEC] = {};
    if (col < width) {
        // COLUMN_ROWS_IN_FLIGHT rows a round, their loads issued together; added in row order
        for (int row = row_begin + threadIdx.y; row < row_end;
             row += COLUMN_ROWS_IN_FLIGHT * COLUMN_ROW_LANES) {
            const int left = (row_end - row + COLUMN_ROW_LANES - 1) / COLUMN_ROW_LANES;
            const int valid = min(COLUMN_ROWS_IN_FLIGHT, left);   // rows of this round
            float x[COLUMN_ROWS_IN_FLIGHT][VEC];
            rows(x, row, COLUMN_ROW_LANES, valid, col);
#pragma unroll
            for (int r = 0; r < COLUMN_ROWS_IN_FLIGHT; r++) {
                if (r >= valid) break;
#pragma unroll
                for (int k = 0; k < VEC; k++) acc[k] += x[r][k];
            }
        }
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) sums[threadIdx.y][k][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && col < width) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float s = 0.0f;
#pragma unroll
            for (int lane = 0; lane < COLUMN_ROW_LANES; lane++) s += sums[lane][k][threadIdx.x];
            partial[(size_t)blockIdx.y * width + col + k] = s;
        }
    }
}

template <int VEC, typename Rows>
void column_sums_launch(bf16 *dst, float *partial, Rows rows, int N, int width) {
    const ColumnSumsLayout l = column_sums_layout(N, width, VEC);
    column_partial_sums_kernel<VEC><<<dim3(l.col_blocks, l.slices), dim3(32, COLUMN_ROW_LANES), 0,
                                      cuda_stream>>>(partial, rows, N, width, l.rows_per_block);
    LAUNCH_CHECK();
    add_column_sums(ColumnSumsDst{{dst}}, 1, width, partial, l.slices);
}
// partial: column_sums_scratch_size(N, width) bytes; aligned16: every pointer rows reads or
// writes allows 16-byte accesses (then 8 columns a thread, where width is a multiple of 8)
template <typename Rows>
void column_sums(bf16 *dst, float *partial, Rows rows, int N, int width, bool aligned16) {
    if (aligned16 && width % 8 == 0) column_sums_launch<8>(dst, partial, rows, N, width);
    else column_sums_launch<1>(dst, partial, rows, N, width);
}

// rows for column_sums: the values of a stored bf16 (N, width) matrix
struct StoredRows {
    const bf16 *x;
    int width;
    template <int VEC, int R>
    __device__ void operator()(float (&v)[R][VEC], int row, int stride, int valid, int col) const {
        typename BF16Raw<VEC>::type raw[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < valid)
                raw[r] = load_bf16_raw<VEC>(x + (size_t)(row + r * stride) * width + col);
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < valid) unpack_bf16<VEC>(v[r], raw[r]);
    }
};
