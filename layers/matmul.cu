// matmul.cu: out = inp @ weight^T + bias and its backward, on cuBLASLt (bf16 in and out, fp32
// accumulation), the bias added in the GEMM's epilogue. The bias gradient is a column sum of
// dout by a two-kernel deterministic reduction (column_sums.cuh), unless the caller has it
// summed by the pass that makes dout (gelu_backward, layernorm_backward) and passes no dbias.
//
// cuBLAS(Lt) is column-major: a row-major (R, K) matrix is a column-major (K, R) one, so every
// row-major product below is issued as its transpose: out^T = weight @ inp^T, and so on.
#include "../runtime/cuda_common.cuh"
#include "column_sums.cuh"
#include "gelu.cuh"
#include "layers.h"

// ---- the algorithm: the heuristic's first, or the fastest of its candidates with its bits ----
// The heuristic's first algorithm is not always the fastest at the training step's shapes:
// bench/gemm_algos measured on an H200 (d12, B=64) the fc projection's dinp at 0.566 ms with it
// and 0.410 with its 7th candidate, the LM head's forward at 8.05 against 7.29 ms, and a step's
// GEMMs 4.8% faster with the best of 16 (docs/PERF.md, "Issue 19: cuBLASLt's candidates").
// So a GEMM of at least kTuneFlops that overwrites its output (beta = 0) times the heuristic's
// top TUNE_CANDIDATES once, on its own operands, the first time its plan is used outside a
// graph capture, and keeps the fastest of those whose output has the very bits the first's has
// on those operands (a hash of the output, compared): in practice the candidates that add the
// same products in the same order (no other split of k), so the choice makes a GEMM faster
// without changing a result, and a run, and a run resumed from a checkpoint, gives the same
// bits whatever the timings pick (test_layers_gpu checks it on other operands than the
// tuning's; gpu_check.sh's interrupt stage, on whole runs). MATMUL_TUNE=0 in the environment
// keeps the heuristic's first; MATMUL_TUNE=2 also reports each choice on stderr.
static const double kTuneFlops = 1e10;   // ~15 us of GEMM: 7 launches a candidate pay back soon
enum { TUNE_CANDIDATES = 8, TUNE_REPS = 5 };

// One cached plan per distinct GEMM: descriptors and the algorithm chosen.
typedef struct {
    cublasOperation_t transa, transb;
    int m, n, k, lda, ldb, ldd;
    int has_bias, accumulate, gelu;   // gelu: an Epi (below)
    int align_a, align_b, align_d;   // bytes the pointers are aligned to (up to 256)
    int tune;                        // MATMUL_TUNE when the plan was made (0, 1, 2)
    int lt;                          // MATMUL_LT when the plan was made (0: cublasGemmEx)
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a_layout, b_layout, d_layout;
    cublasLtMatmulAlgo_t algo;       // the one used
    cublasLtMatmulAlgo_t candidates[TUNE_CANDIDATES];   // the heuristic's, best first
    int n_candidates;
    int tuned;         // algo is final: chosen by timing, or no timing wanted
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

// What the epilogue does to the product (gelu in get_plan and MatmulPlan), after the bias:
//   EPI_GELU    GELU of it (cuBLASLt's formula, of the fp32 sum)
//   EPI_DGELU   times gelu'(aux), aux (m,n) bf16 with D's leading dimension: the GELU's input
//               kept by the forward, so that D is the gradient before the GELU
enum Epi { EPI_NONE = 0, EPI_GELU = 1, EPI_DGELU = 2 };

static MatmulPlan *get_plan(cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, int lda, int ldb, int ldd, int has_bias, int accumulate,
                            int gelu, int align_a, int align_b, int align_d) {
    // read at every call, not once: a plan made under MATMUL_TUNE=0 is another plan (the tests
    // compare the two in one process)
    const char *tune_env = getenv("MATMUL_TUNE");
    const int tune = tune_env ? atoi(tune_env) : 1;
    // MATMUL_LT=0: every GEMM through cublasGemmEx, bias and GELU apart, as for a shape cuBLASLt
    // has no algorithm for (a test switch: that path is otherwise rare)
    const int lt = env_flag("MATMUL_LT", 1);
    for (int i = 0; i < plans_count; i++) {
        MatmulPlan *p = &plans[i];
        if (p->transa == transa && p->transb == transb && p->m == m && p->n == n && p->k == k &&
            p->lda == lda && p->ldb == ldb && p->ldd == ldd && p->has_bias == has_bias &&
            p->accumulate == accumulate && p->gelu == gelu && p->align_a == align_a &&
            p->align_b == align_b &&
            p->align_d == align_d && p->tune == tune && p->lt == lt)
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
    *p = MatmulPlan{transa, transb, m, n, k, lda, ldb, ldd, has_bias, accumulate, gelu,
                    align_a, align_b, align_d, tune, lt};
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa,
                                                sizeof(transa)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb,
                                                sizeof(transb)));
    if (gelu == EPI_DGELU && has_bias) die("internal error: no bias with the GELU's gradient");
    const cublasLtEpilogue_t epilogue =
        gelu == EPI_DGELU ? CUBLASLT_EPILOGUE_DGELU
        : has_bias        ? (gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                          : (gelu ? CUBLASLT_EPILOGUE_GELU : CUBLASLT_EPILOGUE_DEFAULT);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                sizeof(epilogue)));
    if (gelu == EPI_DGELU) {
        const cudaDataType_t aux_type = CUDA_R_16BF;
        const int64_t aux_ld = ldd;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                                    &aux_type, sizeof(aux_type)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                    &aux_ld, sizeof(aux_ld)));
    }
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
    if (!lt) {   // no heuristic to ask
        p->use_gemm_ex = 1;
        return p;
    }

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
    cublasLtMatmulHeuristicResult_t results[TUNE_CANDIDATES];
    int found = 0;
    // "not supported" is how the heuristic may say it found nothing: any failure here falls back
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        cublaslt_handle, p->desc, p->a_layout, p->b_layout, p->d_layout, p->d_layout, pref,
        TUNE_CANDIDATES, results, &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
        p->use_gemm_ex = 1;
        note("cuBLASLt has no algorithm for the bf16 GEMM m=%d n=%d k=%d (lda=%d ldb=%d ldd=%d, "
             "pointer alignments %d %d %d bytes, bias %d, GELU %d): using cublasGemmEx",
             m, n, k, lda, ldb, ldd, align_a, align_b, align_d, has_bias, gelu);
        return p;
    }
    p->algo = results[0].algo;
    p->n_candidates = found;
    for (int i = 0; i < found; i++) p->candidates[i] = results[i].algo;
    p->tuned = !tune || accumulate || found < 2 || 2.0 * m * n * k < kTuneFlops;
    return p;
}

// out (8 bytes of device memory) = an order-free 64-bit hash of the n bf16 values at x
__global__ void hash_bf16_kernel(unsigned long long *out, const uint16_t *x, size_t n) {
    unsigned long long acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long v = (x[i] + 1ull) * 0x9E3779B97F4A7C15ull ^ i * 0xC2B2AE3D27D4EB4Full;
        v ^= v >> 31;
        acc += v * 0xBF58476D1CE4E5B9ull;
    }
    atomicAdd(out, acc);   // a sum mod 2^64: the same whatever the order
}

// the hash of D (m x n, leading dimension ldd) as it is after the work queued so far
static unsigned long long hash_output(const floatX *D, int m, int n, int ldd) {
    unsigned long long *h = (unsigned long long *)cublaslt_workspace;   // free between GEMMs
    CUDA_CHECK(cudaMemsetAsync(h, 0, sizeof(*h), cuda_stream));
    hash_bf16_kernel<<<4 * cuda_num_sms, 256, 0, cuda_stream>>>(
        h, (const uint16_t *)D, (size_t)ldd * (n - 1) + m);
    LAUNCH_CHECK();
    unsigned long long out;
    CUDA_CHECK(cudaMemcpyAsync(&out, h, sizeof(out), cudaMemcpyDeviceToHost, cuda_stream));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
    return out;
}

// p->algo = the fastest candidate whose output has the bits of the heuristic's first (see the
// top of this section), timed on these operands; D is overwritten, as the call will anyway.
// Not inside a graph capture (timing needs synchronisation): the plan then waits for a call
// outside one.
static void tune_plan(MatmulPlan *p, const floatX *A, const floatX *B, floatX *D,
                      const float *alpha, const float *beta) {
    cudaStreamCaptureStatus capture;
    CUDA_CHECK(cudaStreamIsCapturing(cuda_stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) return;
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    unsigned long long first_hash = 0;
    float best_ms = 0.0f, first_ms = 0.0f;
    int best = 0, other_bits = 0;
    for (int c = 0; c < p->n_candidates; c++) {
        auto launch = [&]() {
            return cublasLtMatmul(cublaslt_handle, p->desc, alpha, A, p->a_layout, B, p->b_layout,
                                  beta, D, p->d_layout, D, p->d_layout, &p->candidates[c],
                                  cublaslt_workspace, cublaslt_workspace_size, cuda_stream);
        };
        if (launch() != CUBLAS_STATUS_SUCCESS) {   // the warm-up; a candidate may refuse
            if (c == 0) break;                      // (not the first: it stays, untimed)
            continue;
        }
        CUDA_CHECK(cudaEventRecord(start, cuda_stream));
        for (int r = 0; r < TUNE_REPS; r++) CUBLAS_CHECK(launch());
        CUDA_CHECK(cudaEventRecord(stop, cuda_stream));
        const unsigned long long hash = hash_output(D, p->m, p->n, p->ldd);
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        ms /= TUNE_REPS;
        if (c == 0) {
            first_hash = hash;
            first_ms = best_ms = ms;
        } else if (hash != first_hash) {
            other_bits++;
        } else if (ms < best_ms) {
            best = c;
            best_ms = ms;
        }
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    p->algo = p->candidates[best];
    p->tuned = 1;
    if (p->tune >= 2)
        note("matmul m=%d n=%d k=%d: candidate %d of %d, %.3f ms against the heuristic's first's "
             "%.3f (%d candidates with other bits left out)",
             p->m, p->n, p->k, best, p->n_candidates, best_ms, first_ms, other_bits);
}

// D[i, j] += bias[i] (bias not NULL), then D[i, j] = gelu(D[i, j]) (gelu), for the (m,n)
// column-major D of the cublasGemmEx fallback
__global__ void bias_gelu_kernel(bf16 *D, const bf16 *bias, int m, int n, int ldd, int gelu) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)m * n) return;
    const int i = (int)(idx % m), j = (int)(idx / m);
    bf16 *d = D + (size_t)j * ldd + i;
    float x = __bfloat162float(*d);
    if (bias) x = __bfloat162float(__float2bfloat16_rn(x + __bfloat162float(bias[i])));
    if (gelu) x = gelu_value(x);
    *d = __float2bfloat16_rn(x);
}

// D (m,n) = [gelu of] op(A) @ op(B) [+ bias over rows of D] [+ D], column-major, bf16, fp32
// accumulation, one rounding (GELU: cuBLASLt's, of the fp32 sum). With epi EPI_DGELU (and aux:
// the GELU's input, (m,n) with leading dimension ldd), D = gelu'(aux) * op(A) @ op(B). Returns
// false where the DGELU was not applied: cuBLASLt had no algorithm for the shape, D is the
// plain product (cublasGemmEx), and the caller applies the GELU's backward itself.
static bool lt_matmul(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                      const floatX *A, int lda, const floatX *B, int ldb, floatX *D, int ldd,
                      const floatX *bias, int accumulate, int epi = EPI_NONE,
                      const floatX *aux = NULL) {
    if ((epi == EPI_DGELU) != (aux != NULL)) die("internal error: lt_matmul's DGELU needs aux");
    // aux's alignment goes in with D's (the smaller of the two): the plan's heuristic is asked
    // before any aux pointer is set, so the D and C alignment preferences are what keep it from
    // an algorithm that needs a more aligned aux
    const int align_d = aux && pointer_alignment(aux) < pointer_alignment(D) ? pointer_alignment(aux)
                                                                            : pointer_alignment(D);
    MatmulPlan *p = get_plan(transa, transb, m, n, k, lda, ldb, ldd, bias != NULL, accumulate,
                             epi, pointer_alignment(A), pointer_alignment(B), align_d);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    // the bias epilogue needs a 16-byte aligned bias; without one, the bias goes apart too
    if (p->use_gemm_ex || (bias && !is_aligned16(bias))) {
        CUBLAS_CHECK(cublasGemmEx(cublas_handle, transa, transb, m, n, k, &alpha, A, CUDA_R_16BF,
                                  lda, B, CUDA_R_16BF, ldb, &beta, D, CUDA_R_16BF, ldd,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        if (epi == EPI_DGELU) return false;
        if (bias || epi == EPI_GELU) {
            bias_gelu_kernel<<<ceil_div((long)m * n, 256), 256, 0, cuda_stream>>>(BF(D), CBF(bias), m, n, ldd,
                                                                              epi == EPI_GELU);
            LAUNCH_CHECK();
        }
        return true;
    }
    if (bias) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias, sizeof(bias)));
    }
    if (aux) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &aux, sizeof(aux)));
    }
    if (!p->tuned) tune_plan(p, A, B, D, &alpha, &beta);
    CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle, p->desc, &alpha, A, p->a_layout, B, p->b_layout,
                                &beta, D, p->d_layout, D, p->d_layout, &p->algo,
                                cublaslt_workspace, cublaslt_workspace_size, cuda_stream));
    return true;
}

void matmul_forward(floatX *out, const floatX *inp, const floatX *weight, const floatX *bias,
                    int N, int C, int OC) {
    // out^T (OC,N) = weight (OC,C) @ inp^T (C,N); weight is stored column-major as (C,OC)
    lt_matmul(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, out, OC, bias, 0);
}

// layers.h: the decode step's plain path (fused.cu above FUSED_MAX_ROWS rows) with the GELU or
// the residual add in the GEMM's epilogue, one kernel instead of two; pre is not needed here.
// The separate kernels round the matmul's output to bf16 before GELU or the add, the epilogue
// rounds once, and cuBLASLt's GELU is not gelu_forward's to the bit: inference only.
void matmul_forward_epilogue(floatX *out, floatX *pre, const floatX *inp, const floatX *weight,
                             const floatX *bias, int N, int C, int OC, int gelu, int add) {
    if (gelu && add) die("matmul_forward_epilogue: GELU or the add, not both");
    lt_matmul(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, out, OC, bias, add,
              gelu ? EPI_GELU : EPI_NONE);
}

// partial column sums of dbias (column_sums.cuh)
size_t matmul_backward_scratch_size(int N, int OC) {
    ensure_backend();
    return column_sums_scratch_size(N, OC);
}

void matmul_backward(floatX *dinp, floatX *dweight, floatX *dbias, void *scratch,
                     const floatX *dout, const floatX *inp, const floatX *weight, int N, int C,
                     int OC) {
    // dinp^T (C,N) = weight^T (C,OC) @ dout^T (OC,N); weight is stored column-major as (C,OC)
    if (dinp) lt_matmul(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, dinp, C, NULL, 0);
    // dweight^T (C,OC) += inp^T (C,N) @ dout (N,OC)
    lt_matmul(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, dweight, C, NULL, 1);
    if (!dbias) return;
    // dbias (OC) += colsum(dout (N,OC)), in a fixed order
    column_sums(BF(dbias), (float *)scratch, StoredRows{CBF(dout), OC}, N, OC, is_aligned16(dout));
}

// layers.h: the fc projection's backward and the GELU's before it. The GELU's derivative is
// taken in the dinp GEMM's epilogue (cuBLASLt's DGELU, aux = pre): one pass less over the
// (N, C) gradient than the GEMM then gelu_backward. cuBLASLt has no DGELU with the bias
// gradient (DGELU_BGRAD) for bf16 with an fp32 gradient on the shapes tried (docs/PERF.md,
// eleventh session), so the column sums go apart, over the stored dpre, as matmul_backward's
// dbias does.
void matmul_gelu_backward(floatX *dpre, floatX *dbias, floatX *dweight, void *scratch,
                          const floatX *dout, const floatX *out, const floatX *pre,
                          const floatX *weight, int N, int C, int OC) {
    // dpre^T (C,N) = gelu'(pre^T) * (weight^T (C,OC) @ dout^T (OC,N))
    const bool fused = lt_matmul(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, dpre, C,
                                 NULL, 0, EPI_DGELU, pre);
    matmul_backward(NULL, dweight, NULL, NULL, dout, out, weight, N, C, OC);   // dweight alone
    if (!fused) gelu_backward(dpre, dbias, scratch, pre, dpre, N, C);
    else if (dbias)
        column_sums(BF(dbias), (float *)scratch, StoredRows{CBF(dpre), C}, N, C, is_aligned16(dpre));
}
