// matmul.cu: out = inp @ weight^T + bias and its backward, on cuBLASLt (bf16 in and out, fp32
// accumulation), the bias added in the GEMM's epilogue. The bias gradient is a column sum of
// dout by a two-kernel deterministic reduction.
//
// cuBLAS(Lt) is column-major: a row-major (R, K) matrix is a column-major (K, R) one, so every
// row-major product below is issued as its transpose: out^T = weight @ inp^T, and so on.
#include "../runtime/cuda_common.cuh"
#include "column_sums.cuh"
#include "layers.h"

// One cached plan per distinct GEMM: descriptors and the algorithm the heuristic chose.
typedef struct {
    cublasOperation_t transa, transb;
    int m, n, k, lda, ldb, ldd;
    int has_bias, accumulate;
    int align_a, align_b, align_d;   // bytes the pointers are aligned to (up to 256)
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a_layout, b_layout, d_layout;
    cublasLtMatmulAlgo_t algo;
    int use_gemm_ex;   // cuBLASLt offered no algorithm (odd shapes): plain cuBLAS, bias apart
} MatmulPlan;

enum { MAX_PLANS = 256 };
static MatmulPlan plans[MAX_PLANS];
static int plans_count = 0;
static int plans_next_evicted = 0;   // the slot to recycle next once all are in use

// largest power of two, up to 256, that divides the address: cuBLASLt picks kernels by it
static int pointer_alignment(const void *p) {
    int align = 256;
    while (align > 1 && ((uintptr_t)p % align) != 0) align /= 2;
    return align;
}

static MatmulPlan *get_plan(cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, int lda, int ldb, int ldd, int has_bias, int accumulate,
                            int align_a, int align_b, int align_d) {
    for (int i = 0; i < plans_count; i++) {
        MatmulPlan *p = &plans[i];
        if (p->transa == transa && p->transb == transb && p->m == m && p->n == n && p->k == k &&
            p->lda == lda && p->ldb == ldb && p->ldd == ldd && p->has_bias == has_bias &&
            p->accumulate == accumulate && p->align_a == align_a && p->align_b == align_b &&
            p->align_d == align_d)
            return p;
    }
    // a full cache recycles its slots in turn (sampling and generation bring a new row count
    // at every length; the shapes of a training step are few and come back at once)
    MatmulPlan *p;
    if (plans_count < MAX_PLANS) {
        p = &plans[plans_count++];
    } else {
        p = &plans[plans_next_evicted];
        plans_next_evicted = (plans_next_evicted + 1) % MAX_PLANS;
        CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a_layout));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b_layout));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->d_layout));
    }
    *p = MatmulPlan{transa, transb, m, n, k, lda, ldb, ldd, has_bias, accumulate,
                    align_a, align_b, align_d};
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa,
                                                sizeof(transa)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb,
                                                sizeof(transb)));
    cublasLtEpilogue_t epilogue = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                sizeof(epilogue)));
    if (has_bias) {
        cudaDataType_t bias_type = CUDA_R_16BF;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bias_type, sizeof(bias_type)));
    }
    // stored shapes, before the op: A is (m,k) or (k,m), B is (k,n) or (n,k), D is (m,n)
    int a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
    int b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a_layout, CUDA_R_16BF, a_rows, a_cols, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b_layout, CUDA_R_16BF, b_rows, b_cols, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d_layout, CUDA_R_16BF, m, n, ldd));

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &cublaslt_workspace_size,
        sizeof(cublaslt_workspace_size)));
    const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t aligns[4] = {(uint32_t)align_a, (uint32_t)align_b, (uint32_t)align_d,
                                (uint32_t)align_d};
    for (int i = 0; i < 4; i++)
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i],
                                                          sizeof(aligns[i])));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    // "not supported" is how the heuristic may say it found nothing: any failure here falls back
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        cublaslt_handle, p->desc, p->a_layout, p->b_layout, p->d_layout, p->d_layout, pref, 1,
        &result, &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
        p->use_gemm_ex = 1;
        note("cuBLASLt has no algorithm for the bf16 GEMM m=%d n=%d k=%d (lda=%d ldb=%d ldd=%d, "
             "pointer alignments %d %d %d bytes, bias %d): using cublasGemmEx",
             m, n, k, lda, ldb, ldd, align_a, align_b, align_d, has_bias);
    } else {
        p->algo = result.algo;
    }
    return p;
}

// D[i, j] += bias[i] for the (m,n) column-major D of the cublasGemmEx fallback
__global__ void add_bias_kernel(bf16 *D, const bf16 *bias, int m, int n, int ldd) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)m * n) return;
    const int i = (int)(idx % m), j = (int)(idx / m);
    bf16 *d = D + (size_t)j * ldd + i;
    *d = __float2bfloat16_rn(__bfloat162float(*d) + __bfloat162float(bias[i]));
}

// D (m,n) = op(A) @ op(B) [+ bias over rows of D] [+ D], column-major, bf16, fp32 accumulation
static void lt_matmul(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                      const floatX *A, int lda, const floatX *B, int ldb, floatX *D, int ldd,
                      const floatX *bias, int accumulate) {
    MatmulPlan *p = get_plan(transa, transb, m, n, k, lda, ldb, ldd, bias != NULL, accumulate,
                             pointer_alignment(A), pointer_alignment(B), pointer_alignment(D));
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    // the bias epilogue needs a 16-byte aligned bias; without one, the bias goes apart too
    if (p->use_gemm_ex || (bias && !is_aligned16(bias))) {
        CUBLAS_CHECK(cublasGemmEx(cublas_handle, transa, transb, m, n, k, &alpha, A, CUDA_R_16BF,
                                  lda, B, CUDA_R_16BF, ldb, &beta, D, CUDA_R_16BF, ldd,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        if (bias) {
            add_bias_kernel<<<ceil_div((long)m * n, 256), 256, 0, cuda_stream>>>(BF(D), CBF(bias), m, n, ldd);
            LAUNCH_CHECK();
        }
        return;
    }
    if (bias) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias, sizeof(bias)));
    }
    CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle, p->desc, &alpha, A, p->a_layout, B, p->b_layout,
                                &beta, D, p->d_layout, D, p->d_layout, &p->algo,
                                cublaslt_workspace, cublaslt_workspace_size, cuda_stream));
}

void matmul_forward(floatX *out, const floatX *inp, const floatX *weight, const floatX *bias,
                    int N, int C, int OC) {
    // out^T (OC,N) = weight (OC,C) @ inp^T (C,N); weight is stored column-major as (C,OC)
    lt_matmul(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, out, OC, bias, 0);
}

// ----------------------------------------------------------------------------------------
// dbias (OC) += colsum(dout (N,OC)): each block sums a slice of rows for 32*VEC columns into
// partial[blockIdx.y][col] (the caller's scratch, matmul_backward_scratch_size);
// add_column_sums adds the partials in a fixed order into dbias.

enum { BIAS_ROW_LANES = 8 };

template <int VEC>
__global__ void __launch_bounds__(32 * BIAS_ROW_LANES)
    bias_partial_sums_kernel(float *partial, const bf16 *dout, int N, int OC, int rows_per_block) {
    __shared__ float sums[BIAS_ROW_LANES][VEC][32];
    const int col = (blockIdx.x * 32 + threadIdx.x) * VEC;
    const int row_begin = blockIdx.y * rows_per_block;
    const int row_end = min(N, row_begin + rows_per_block);
    float acc[VEC] = {};
    if (col < OC) {
        for (int row = row_begin + threadIdx.y; row < row_end; row += BIAS_ROW_LANES) {
            float x[VEC];
            load_bf16<VEC>(x, dout + (size_t)row * OC + col);
#pragma unroll
            for (int k = 0; k < VEC; k++) acc[k] += x[k];
        }
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) sums[threadIdx.y][k][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && col < OC) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float s = 0.0f;
#pragma unroll
            for (int lane = 0; lane < BIAS_ROW_LANES; lane++) s += sums[lane][k][threadIdx.x];
            partial[(size_t)blockIdx.y * OC + col + k] = s;
        }
    }
}

// the grid of the dbias reduction at (N, OC), vec columns per thread: col_blocks x slices,
// about 8 blocks per SM in all, each slice over at least 64 rows (rows_per_block). slices is
// at most max_slices, which never decreases with N (so scratch for N serves any fewer rows).
typedef struct {
    int col_blocks, slices, rows_per_block, max_slices;
} BiasLayout;

static BiasLayout bias_layout(int N, int OC, int vec) {
    BiasLayout b;
    b.col_blocks = ceil_div(OC, 32 * vec);
    int slices = (8 * cuda_num_sms) / b.col_blocks;
    if (slices < 1) slices = 1;
    if (slices > ceil_div(N, 64)) slices = ceil_div(N, 64);
    b.max_slices = slices;
    b.rows_per_block = ceil_div(N, slices);
    b.slices = ceil_div(N, b.rows_per_block);
    return b;
}

// partial (max_slices, OC) fp32, for whichever vector width dout allows
size_t matmul_backward_scratch_size(int N, int OC) {
    ensure_backend();
    const int slices8 = bias_layout(N, OC, 8).max_slices;
    const int slices1 = bias_layout(N, OC, 1).max_slices;
    return (size_t)(slices8 > slices1 ? slices8 : slices1) * OC * sizeof(float);
}

static void bias_backward(floatX *dbias, float *bias_partial, const floatX *dout, int N, int OC) {
    const int vec = (OC % 8 == 0 && is_aligned16(dout)) ? 8 : 1;
    const BiasLayout layout = bias_layout(N, OC, vec);
    const int slices = layout.slices, rows_per_block = layout.rows_per_block;
    dim3 grid(layout.col_blocks, slices), block(32, BIAS_ROW_LANES);
    if (vec == 8)
        bias_partial_sums_kernel<8><<<grid, block, 0, cuda_stream>>>(bias_partial, CBF(dout), N,
                                                                     OC, rows_per_block);
    else
        bias_partial_sums_kernel<1><<<grid, block, 0, cuda_stream>>>(bias_partial, CBF(dout), N,
                                                                     OC, rows_per_block);
    LAUNCH_CHECK();
    add_column_sums(BF(dbias), NULL, OC, bias_partial, slices, OC);
}

void matmul_backward(floatX *dinp, floatX *dweight, floatX *dbias, void *scratch,
                     const floatX *dout, const floatX *inp, const floatX *weight, int N, int C,
                     int OC) {
    // dinp^T (C,N) = weight^T (C,OC) @ dout^T (OC,N); weight is stored column-major as (C,OC)
    if (dinp) lt_matmul(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, dinp, C, NULL, 0);
    // dweight^T (C,OC) += inp^T (C,N) @ dout (N,OC)
    lt_matmul(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, dweight, C, NULL, 1);
    if (dbias) bias_backward(dbias, (float *)scratch, dout, N, OC);
}
