// matmul.c: the fully connected layer, out = inp @ weight^T + bias, forward and backward.
// It is most of the FLOPs of a training step, so all three of its products (out, dinp,
// dweight) go through one blocked kernel, block_matmul, shaped for the vector units:
//   - the output is cut into blocks of MM_ROW_BLOCK rows by MM_COLS columns, one block per
//     OpenMP work item, so every output element has one owner and nothing races;
//   - per block, MM_DEPTH steps of the right-hand operand are first copied ("packed") into a
//     contiguous (MM_DEPTH, MM_COLS) buffer on the stack, whatever its layout in memory was;
//   - the innermost loop updates an MM_ROWS x MM_COLS tile of sums held in registers: per
//     depth step it reads one packed row (MM_COLS contiguous floats) and MM_ROWS scalars of
//     the left operand, and does MM_ROWS*MM_COLS multiply-adds, a loop the compiler vectorizes.
// A forward pass over fewer rows than one tile (token-by-token generation) takes a plain
// dot-product path instead, matmul_forward_few_rows.
#include "../utils.h"
#include "channel_chunks.h"
#include "layers.h"

#include <stddef.h>

// one packed row is two vector registers wide; the tile must fit the register file
// (AVX-512: 32 registers of 16 floats; AVX2 and NEON: 16 or 32 registers of 8 or 4 floats)
#if defined(__AVX512F__)
#define MM_COLS 32
#else
#define MM_COLS 16
#endif
#define MM_ROWS 6
#define MM_DEPTH 256
#define MM_ROW_BLOCK 64
#define MM_LANES 16        // partial sums per dot product in matmul_forward_few_rows

// A strided matrix view: element (i, k) is at data[i * row_stride + k * col_stride].
typedef struct {
    const float *data;
    size_t row_stride, col_stride;
} View;

static inline const float *view_at(View v, size_t i, size_t k) {
    return v.data + i * v.row_stride + k * v.col_stride;
}

// packed (MM_DEPTH, MM_COLS) = b[k0 : k0+depth, j0 : j0+cols], zero past column cols (those
// columns are computed but never stored). Reads run along b's contiguous dimension: along k
// for weight^T in the forward pass, along j otherwise.
static void pack(float *packed, View b, int k0, int depth, int j0, int cols) {
    if (b.row_stride == 1) {
        for (int j = 0; j < cols; j++) {
            const float *src = view_at(b, k0, j0 + j);
            for (int k = 0; k < depth; k++) packed[(size_t)k * MM_COLS + j] = src[k];
        }
    } else {
        for (int k = 0; k < depth; k++) {
            const float *src = view_at(b, k0 + k, j0);
            for (int j = 0; j < cols; j++) packed[(size_t)k * MM_COLS + j] = src[j * b.col_stride];
        }
    }
    for (int k = 0; k < depth; k++) {
        for (int j = cols; j < MM_COLS; j++) packed[(size_t)k * MM_COLS + j] = 0.0f;
    }
}

// out (M, Ncols) row-major with row stride ld_out, from a (M, K) and b (K, Ncols):
//   accumulate == 0: out = a @ b + bias (bias (Ncols) or NULL)
//   accumulate == 1: out += a @ b
static void block_matmul(float *out, size_t ld_out, View a, View b, const float *bias,
                         int M, int Ncols, int K, int accumulate) {
    int row_blocks = (M + MM_ROW_BLOCK - 1) / MM_ROW_BLOCK;
    int col_blocks = (Ncols + MM_COLS - 1) / MM_COLS;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int cb = 0; cb < col_blocks; cb++) {
        for (int rb = 0; rb < row_blocks; rb++) {
            float packed[MM_DEPTH * MM_COLS];
            int j0 = cb * MM_COLS;
            int cols = Ncols - j0 < MM_COLS ? Ncols - j0 : MM_COLS;
            int i_begin = rb * MM_ROW_BLOCK;
            int i_end = i_begin + MM_ROW_BLOCK < M ? i_begin + MM_ROW_BLOCK : M;
            for (int k0 = 0; k0 < K; k0 += MM_DEPTH) {
                int depth = K - k0 < MM_DEPTH ? K - k0 : MM_DEPTH;
                pack(packed, b, k0, depth, j0, cols);
                int overwrite = !accumulate && k0 == 0;
                for (int i0 = i_begin; i0 < i_end; i0 += MM_ROWS) {
                    int rows = i_end - i0 < MM_ROWS ? i_end - i0 : MM_ROWS;
                    // a partial tile repeats its last row, computed but never stored
                    const float *a_row[MM_ROWS];
                    for (int r = 0; r < MM_ROWS; r++) {
                        a_row[r] = view_at(a, i0 + (r < rows ? r : rows - 1), k0);
                    }
                    float sums[MM_ROWS][MM_COLS] = {{0}};
                    for (int k = 0; k < depth; k++) {
                        const float *p = packed + (size_t)k * MM_COLS;
                        for (int r = 0; r < MM_ROWS; r++) {
                            float a_rk = a_row[r][k * a.col_stride];
                            for (int j = 0; j < MM_COLS; j++) sums[r][j] += a_rk * p[j];
                        }
                    }
                    for (int r = 0; r < rows; r++) {
                        float *o = out + (size_t)(i0 + r) * ld_out + j0;
                        if (overwrite) {
                            for (int j = 0; j < cols; j++) {
                                o[j] = sums[r][j] + (bias ? bias[j0 + j] : 0.0f);
                            }
                        } else {
                            for (int j = 0; j < cols; j++) o[j] += sums[r][j];
                        }
                    }
                }
            }
        }
    }
}

// Fewer rows than one tile (token-by-token generation) would not repay the packing: each
// weight row is instead read once, straight, and dotted with every input row, in MM_LANES
// partial sums so the loop vectorizes.
static void matmul_forward_few_rows(floatX *out, const floatX *inp, const floatX *weight,
                                    const floatX *bias, int N, int C, int OC) {
    #pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; o++) {
        const float *w = weight + (size_t)o * C;
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C;
            float lanes[MM_LANES] = {0};
            int c = 0;
            for (; c + MM_LANES <= C; c += MM_LANES) {
                for (int l = 0; l < MM_LANES; l++) lanes[l] += x[c + l] * w[c + l];
            }
            float sum = bias ? bias[o] : 0.0f;
            for (; c < C; c++) sum += x[c] * w[c];
            for (int l = 0; l < MM_LANES; l++) sum += lanes[l];
            out[(size_t)i * OC + o] = sum;
        }
    }
}

// out (N,OC), inp (N,C), weight (OC,C), bias (OC) or NULL
void matmul_forward(floatX *out, const floatX *inp, const floatX *weight, const floatX *bias,
                    int N, int C, int OC) {
    if (N < MM_ROWS) {
        matmul_forward_few_rows(out, inp, weight, bias, N, C, OC);
        return;
    }
    View inp_view = {inp, (size_t)C, 1};         // (N, C)
    View weight_t = {weight, 1, (size_t)C};      // weight^T: (C, OC)
    block_matmul(out, (size_t)OC, inp_view, weight_t, bias, N, OC, C, 0);
}

void matmul_forward_epilogue(floatX *out, floatX *pre, const floatX *inp, const floatX *weight,
                             const floatX *bias, int N, int C, int OC, int gelu, int add) {
    if (gelu && add) die("matmul_forward_epilogue: GELU or the add, not both");
    if (!gelu && !add) {
        matmul_forward(out, inp, weight, bias, N, C, OC);
        return;
    }
    matmul_forward(pre, inp, weight, bias, N, C, OC);
    if (add) residual_forward(out, out, pre, (size_t)N * OC);
    else gelu_forward(out, pre, (size_t)N * OC);
}

size_t matmul_backward_scratch_size(int N, int OC) { return 0; }

// dinp (N,C) = dout @ weight, or skipped when NULL; dweight (OC,C) += dout^T @ inp;
// dbias (OC) += colsum(dout), or skipped when NULL; dout (N,OC), inp (N,C), weight (OC,C)
void matmul_backward(floatX *dinp, floatX *dweight, floatX *dbias, void *scratch,
                     const floatX *dout, const floatX *inp, const floatX *weight, int N, int C,
                     int OC) {
    if (dinp) {
        View dout_view = {dout, (size_t)OC, 1};     // (N, OC)
        View weight_view = {weight, (size_t)C, 1};  // (OC, C)
        block_matmul(dinp, (size_t)C, dout_view, weight_view, NULL, N, C, OC, 0);
    }
    View dout_t = {dout, 1, (size_t)OC};            // dout^T: (OC, N)
    View inp_view = {inp, (size_t)C, 1};            // (N, C)
    block_matmul(dweight, (size_t)C, dout_t, inp_view, NULL, OC, C, N, 1);
    if (dbias) column_sums_add(dbias, dout, N, OC);
}

void matmul_gelu_backward(floatX *dpre, floatX *dbias, floatX *dweight, void *scratch,
                          const floatX *dout, const floatX *out, const floatX *pre,
                          const floatX *weight, int N, int C, int OC) {
    matmul_backward(dpre, dweight, NULL, scratch, dout, out, weight, N, C, OC);
    gelu_backward(dpre, dbias, scratch, pre, dpre, N, C);
}
