// gemm_algos.cu: can the GEMMs of a GPT-2 124M training step (T=1024, C=768, Vp=50304, 12
// layers) run faster on cuBLASLt, (1) by timing the heuristic's top K candidates instead of
// taking its first, as layers/matmul.cu does, and (2) by moving element-wise work into
// cuBLASLt epilogues, their algorithm chosen by timing too?
//
// Every GEMM is issued as layers/matmul.cu issues it: column-major, each row-major product as
// its transpose, bf16 in and out, CUBLAS_COMPUTE_32F, the project's workspace, handle and
// stream, the pointer alignments given to the heuristic. For each of the 15 plain GEMMs
// (forward, dinp and dweight of qkv, attproj, fc, fcproj and the LM head) and each epilogue
// variant, the heuristic is asked for K candidates; each is timed as the median of REPS launches
// (CUDA events around each) after 3 (bench_common.cuh's time_ms); a candidate that does not
// launch is counted as failed.
// Epilogue variants, beside the GEMM plus the separate kernel(s) they would replace (written
// here: vectorized GELU forward and backward, a column sum into fp32):
//   fc forward, GELU_AUX_BIAS      vs fc forward (BIAS) + GELU forward over N x 4C
//   fcproj dinp, DGELU             vs fcproj dinp + GELU backward
//   fcproj dinp, DGELU_BGRAD       vs fcproj dinp + GELU backward + column sum (fc's dbias)
//   dweight, BGRADB (with bias)    vs dweight + column sum of dout (the layer's dbias)
// (the bias gradient is written by cuBLASLt, not added to: training's += is the caller's.)
// Checks: "best vs first" is max |best - first| / max |first| over the outputs (D, and the
// bias gradient where there is one), the same inputs and initial D; "epi vs sep" the same
// between the epilogue's outputs and those of the GEMM plus separate kernels. Both should be
// about 1e-2 or less (bf16). Inputs are random, scaled so that values stay O(1).
//
// With -8, each plain GEMM is also timed in FP8 (issue 19: the ceiling of what FP8 GEMMs could give
// a training step whose bf16 GEMMs run at 96% of the measured ceiling): cuBLASLt's FP8 kernels on
// Hopper take both operands K-major (A transposed, B not), so every product is issued in that
// form, e4m3 x e4m3 forward, e4m3 x e5m2 for the two backward products (dout in e5m2), per-tensor
// scales (amax to the format's largest), bf16 out; the operands that are not K-major in the
// step's layout (dinp's weight, dweight's inp and dout) as transposed copies. Its rows ("fp8",
// and "fp8 fast" with CUBLASLT_MATMUL_DESC_FAST_ACCUM) read their last columns against the bf16
// GEMM's best: "plain best + kernels ms" is the bf16 best, the ratio fp8's speedup over it, and
// "epi vs sep" fp8's max |D - D_bf16| / max |D_bf16|. The casts an FP8 step would add (each
// operand cast, and transposed where it must be, once) are timed as kernels written here and
// summed per step below the table.
//
// Usage: gemm_algos [-k K] [-b B] [-t T] [-r REPS] [-8]    defaults: K = 16, B = 64, T = 1024 (N = B*T),
// REPS = 20. `-b 64 -t 1` gives a batch-64 decode step's GEMMs (N = 64 rows).
#include "../runtime/cuda_common.cuh"
#include "bench_common.cuh"   // random_tensor, fill_random, time_ms

#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

static int K = 16, B = 64, T = 1024;   // and bench_reps = 20 (-r), bench_warmup = 3
static bool fp8 = false;                // -8
static const int C = 768, L = 12, Vp = 50304;

// ---- inputs and the separate kernels ------------------------------------------------------

static floatX *bf16_tensor(size_t n, const char *what) {
    return (floatX *)dev_malloc(n * sizeof(floatX), what);
}

// GELU, tanh approximation (as layers/gelu.cu and cuBLASLt's GELU epilogue)
static const float GELU_S = 0.7978845608f, GELU_A = 0.044715f;
__device__ __forceinline__ float gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_S * (x + GELU_A * x * x * x)));
}
__device__ __forceinline__ float gelu_grad(float x) {
    const float t = tanhf(GELU_S * (x + GELU_A * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_S * (1.0f + 3.0f * GELU_A * x * x);
}
// 8 elements a thread through 16-byte accesses; n % 8 == 0 here (N * 4C)
__global__ void gelu_forward_kernel(bf16 *out, const bf16 *inp, size_t n) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    float x[8];
    load_bf16<8>(x, inp + i);
    for (int k = 0; k < 8; k++) x[k] = gelu(x[k]);
    store_bf16<8>(out + i, x);
}
__global__ void gelu_backward_kernel(bf16 *dinp, const bf16 *pre, const bf16 *dout, size_t n) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    float x[8], d[8];
    load_bf16<8>(x, pre + i);
    load_bf16<8>(d, dout + i);
    for (int k = 0; k < 8; k++) d[k] *= gelu_grad(x[k]);
    store_bf16<8>(dinp + i, d);
}
static void gelu_forward(floatX *out, const floatX *inp, size_t n) {
    gelu_forward_kernel<<<ceil_div(n / 8, 256), 256, 0, cuda_stream>>>(BF(out), CBF(inp), n);
    LAUNCH_CHECK();
}
static void gelu_backward(floatX *dinp, const floatX *pre, const floatX *dout, size_t n) {
    gelu_backward_kernel<<<ceil_div(n / 8, 256), 256, 0, cuda_stream>>>(BF(dinp), CBF(pre), CBF(dout), n);
    LAUNCH_CHECK();
}

// out[c] = sum over rows of x (rows, cols) row-major, fp32: a block of (32, 8) threads sums
// 256 columns (8 a thread) over a slice of rows, then adds into out (zeroed first) atomically
__global__ void column_sum_kernel(float *out, const bf16 *x, int rows, int cols, int rows_per_block) {
    __shared__ float sums[8][32][8];
    const int col = (blockIdx.x * 32 + threadIdx.x) * 8;
    const int row_end = min(rows, (int)(blockIdx.y + 1) * rows_per_block);
    float acc[8] = {};
    if (col < cols)
        for (int row = blockIdx.y * rows_per_block + threadIdx.y; row < row_end; row += 8) {
            float v[8];
            load_bf16<8>(v, x + (size_t)row * cols + col);
            for (int k = 0; k < 8; k++) acc[k] += v[k];
        }
    for (int k = 0; k < 8; k++) sums[threadIdx.y][threadIdx.x][k] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && col < cols)
        for (int k = 0; k < 8; k++) {
            float s = 0.0f;
            for (int lane = 0; lane < 8; lane++) s += sums[lane][threadIdx.x][k];
            atomicAdd(out + col + k, s);
        }
}
static void column_sum(float *out, const floatX *x, int rows, int cols) {   // cols % 8 == 0
    CUDA_CHECK(cudaMemsetAsync(out, 0, cols * sizeof(float), cuda_stream));
    const int col_blocks = ceil_div(cols, 256);
    const int slices = std::max(1, std::min(8 * cuda_num_sms / col_blocks, ceil_div(rows, 64)));
    const int rows_per_block = ceil_div(rows, slices);
    column_sum_kernel<<<dim3(col_blocks, ceil_div(rows, rows_per_block)), dim3(32, 8), 0, cuda_stream>>>(
        out, CBF(x), rows, cols, rows_per_block);
    LAUNCH_CHECK();
}

// ---- FP8 operands (-8) ----------------------------------------------------------------------

// the two FP8 formats: e4m3 (the forward's operands) or e5m2 (the gradients)
template <typename F8>
constexpr bool kE4M3 = std::is_same<F8, __nv_fp8_e4m3>::value;
// two floats to two FP8 values (saturating), as 16 bits
template <typename F8>
__device__ __forceinline__ uint32_t fp8x2(float a, float b) {
    return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kE4M3<F8> ? __NV_E4M3 : __NV_E5M2);
}
// out = F8(x * scale), x (n) bf16: 8 elements a thread, one 8-byte store (n % 8 == 0)
template <typename F8>
__global__ void cast_fp8_kernel(F8 *out, const bf16 *x, size_t n, float scale) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    float v[8];
    load_bf16<8>(v, x + i);
    uint32_t w[4];
    for (int k = 0; k < 4; k++) w[k] = fp8x2<F8>(v[2 * k] * scale, v[2 * k + 1] * scale);
    *reinterpret_cast<uint2 *>(out + i) = make_uint2(w[0] | w[1] << 16, w[2] | w[3] << 16);
}
// out (cols, rows) = F8(x^T * scale): 32 x 32 tiles through shared memory, each of the 256
// threads storing 4 bytes of one output row (rows, cols % 32 == 0)
template <typename F8>
__global__ void cast_fp8_t_kernel(F8 *out, const bf16 *x, int rows, int cols, float scale) {
    __shared__ float tile[32][33];
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int r = threadIdx.y; r < 32; r += 8)
        tile[r][threadIdx.x] = __bfloat162float(x[(size_t)(r0 + r) * cols + c0 + threadIdx.x]);
    __syncthreads();
    const int t = threadIdx.y * 32 + threadIdx.x, c = t / 8, r = (t % 8) * 4;   // out row c0 + c
    const uint32_t lo = fp8x2<F8>(tile[r][c] * scale, tile[r + 1][c] * scale);
    const uint32_t hi = fp8x2<F8>(tile[r + 2][c] * scale, tile[r + 3][c] * scale);
    *reinterpret_cast<uint32_t *>(out + (size_t)(c0 + c) * rows + r0 + r) = lo | hi << 16;
}
// an FP8 copy of x (rows, cols), transposed or not, scaled so that amax (an upper bound of |x|)
// meets the format's largest value; *descale (device) = its inverse, cuBLASLt's A/B scale
template <typename F8>
struct Fp8Copy {
    void *data;
    float *descale;
};
template <typename F8>
static float fp8_max() { return kE4M3<F8> ? 448.0f : 57344.0f; }
template <typename F8>
static void cast_fp8(void *out, const floatX *x, int rows, int cols, float scale, bool transpose) {
    if (transpose) {
        cast_fp8_t_kernel<F8><<<dim3(cols / 32, rows / 32), dim3(32, 8), 0, cuda_stream>>>(
            (F8 *)out, CBF(x), rows, cols, scale);
    } else {
        const size_t n = (size_t)rows * cols;
        cast_fp8_kernel<F8><<<ceil_div(n / 8, 256), 256, 0, cuda_stream>>>((F8 *)out, CBF(x), n, scale);
    }
    LAUNCH_CHECK();
}
template <typename F8>
static Fp8Copy<F8> fp8_copy(const floatX *x, int rows, int cols, float amax, bool transpose, double *cast_ms) {
    Fp8Copy<F8> c;
    c.data = dev_malloc((size_t)rows * cols, "fp8 copy");
    c.descale = (float *)dev_malloc(sizeof(float), "fp8 scale");
    const float scale = fp8_max<F8>() / amax, descale = 1.0f / scale;
    dev_upload(c.descale, &descale, sizeof(float));
    *cast_ms = time_ms([&] { cast_fp8<F8>(c.data, x, rows, cols, scale, transpose); });
    return c;
}
template <typename F8>
static void fp8_free(Fp8Copy<F8> &c) { dev_free(c.data); dev_free(c.descale); }

// ---- checks and timing ----------------------------------------------------------------------

__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(float x) { return x; }
// out[0] = max |a - ref| (NaN or inf: FLT_MAX), out[1] = max |ref|, as float bits (>= 0)
template <typename TA, typename TR>
__global__ void max_diff_kernel(unsigned *out, const TA *a, const TR *ref, size_t n) {
    float d = 0.0f, r = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float x = to_float(a[i]), y = to_float(ref[i]);
        float e = fabsf(x - y);
        if (!(e <= FLT_MAX)) e = FLT_MAX;
        d = fmaxf(d, e);
        r = fmaxf(r, fabsf(y));
    }
    d = warp_allreduce_max(d);
    r = warp_allreduce_max(r);
    if (threadIdx.x % 32 == 0) {
        atomicMax(out, __float_as_uint(d));
        atomicMax(out + 1, __float_as_uint(r));
    }
}
// max |a - ref| / max |ref|; a and ref: bf16 (floatX) or fp32 device arrays of n
template <typename TA, typename TR>
static double rel_diff(const TA *a, const TR *ref, size_t n) {
    static unsigned *buf = (unsigned *)dev_malloc(2 * sizeof(unsigned), "max diff");
    CUDA_CHECK(cudaMemsetAsync(buf, 0, 2 * sizeof(unsigned), cuda_stream));
    typedef typename std::conditional<std::is_same<TA, float>::value, float, bf16>::type DA;
    typedef typename std::conditional<std::is_same<TR, float>::value, float, bf16>::type DR;
    max_diff_kernel<<<4 * cuda_num_sms, 256, 0, cuda_stream>>>(
        buf, reinterpret_cast<const DA *>(a), reinterpret_cast<const DR *>(ref), n);
    LAUNCH_CHECK();
    unsigned host[2];
    CUDA_CHECK(cudaMemcpyAsync(host, buf, sizeof(host), cudaMemcpyDeviceToHost, cuda_stream));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
    float d, r;
    memcpy(&d, &host[0], 4);
    memcpy(&r, &host[1], 4);
    return r > 0.0f ? d / r : d;
}

// ---- one cuBLASLt GEMM, its candidates timed ---------------------------------------------

// D (m,n) = op(A) @ op(B) [+ D], column-major as lt_matmul in layers/matmul.cu, with an epilogue
struct Gemm {
    std::string name;
    int per_step;   // calls in one training step (0: an epilogue variant, not in the step total)
    cublasOperation_t ta, tb;
    int m, n, k;
    const void *A;
    int lda;
    const void *B;
    int ldb;
    floatX *D;
    int ldd;
    bool accumulate;   // beta = 1 (dweight)
    cublasLtEpilogue_t epilogue;
    void *bias;        // BIAS: input (m); DGELU_BGRAD: output (m); BGRADB: output (n)
    cudaDataType_t bias_type;
    floatX *aux;       // GELU_AUX_BIAS: the pre-activation out; DGELU*: in; (m, n), ld m
    cudaDataType_t a_type, b_type;      // bf16, or the FP8 rows' e4m3 / e5m2
    const float *a_scale, *b_scale;     // FP8: the operands' dequantisation scales (device)
    bool fast_accum;                    // FP8: CUBLASLT_MATMUL_DESC_FAST_ACCUM
};
static Gemm gemm(const char *name, int per_step, cublasOperation_t ta, cublasOperation_t tb,
                 int m, int n, int k, const void *A, int lda, const void *B, int ldb,
                 floatX *D, int ldd, bool accumulate) {
    return Gemm{name, per_step, ta, tb, m, n, k, A, lda, B, ldb, D, ldd, accumulate,
                CUBLASLT_EPILOGUE_DEFAULT, NULL, CUDA_R_16BF, NULL, CUDA_R_16BF, CUDA_R_16BF, NULL, NULL,
                false};
}
static bool bias_is_output(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}
static size_t bias_bytes(const Gemm &g) {
    const size_t len = g.epilogue == CUBLASLT_EPILOGUE_BGRADB ? g.n : g.m;
    return len * (g.bias_type == CUDA_R_32F ? 4 : 2);
}

struct Result {
    const char *failure;   // NULL: ran; else why not ("not supported", ...)
    int candidates, failed, first, best;
    double first_ms, best_ms, diff;   // diff: best vs first
};

// returns the status of the first call that fails (an attribute the library refuses)
#define TRY(call) do { cublasStatus_t st_ = (call); if (st_ != CUBLAS_STATUS_SUCCESS) return st_; } while (0)
template <typename V>
static cublasStatus_t set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, V v) {
    return cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v));
}
static cublasStatus_t describe(const Gemm &g, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t *a,
                               cublasLtMatrixLayout_t *b, cublasLtMatrixLayout_t *d) {
    TRY(set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSA, g.ta));
    TRY(set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSB, g.tb));
    TRY(set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue));
    if (g.bias) {
        TRY(set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias));
        TRY(set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, (int32_t)g.bias_type));
    }
    if (g.a_scale) {
        TRY(set_attr(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, (const void *)g.a_scale));
        TRY(set_attr(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, (const void *)g.b_scale));
        TRY(set_attr(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, (int8_t)g.fast_accum));
    }
    if (g.aux) {
        TRY(set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (void *)g.aux));
        TRY(set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)g.m));
#if CUBLAS_VER_MAJOR >= 12
        TRY(set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, (int32_t)CUDA_R_16BF));
#endif
    }
    // stored shapes, before the op: A is (m,k) or (k,m), B is (k,n) or (n,k), D is (m,n)
    const bool na = g.ta == CUBLAS_OP_N, nb = g.tb == CUBLAS_OP_N;
    TRY(cublasLtMatrixLayoutCreate(a, g.a_type, na ? g.m : g.k, na ? g.k : g.m, g.lda));
    TRY(cublasLtMatrixLayoutCreate(b, g.b_type, nb ? g.k : g.n, nb ? g.n : g.k, g.ldb));
    TRY(cublasLtMatrixLayoutCreate(d, CUDA_R_16BF, g.m, g.n, g.ldd));
    return CUBLAS_STATUS_SUCCESS;
}

// largest power of two, up to 256, that divides the address (as layers/matmul.cu)
static uint32_t pointer_alignment(const void *p) {
    uint32_t align = 256;
    while (align > 1 && ((uintptr_t)p % align) != 0) align /= 2;
    return align;
}

// Times the heuristic's top K candidates for g. Leaves in g.D (and the bias gradient) what
// the best one gives from g.D's initial contents (accumulate: those plus the product).
static Result bench_gemm(const Gemm &g) {
    Result r = {NULL, 0, 0, -1, -1, 0.0, 1e30, 0.0};
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a = NULL, b = NULL, d = NULL;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &cublaslt_workspace_size, sizeof(size_t)));
    const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t aligns[4] = {pointer_alignment(g.A), pointer_alignment(g.B),
                                pointer_alignment(g.D), pointer_alignment(g.D)};
    for (int i = 0; i < 4; i++)
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i], 4));
    std::vector<cublasLtMatmulHeuristicResult_t> cands(K);
    cublasStatus_t st = describe(g, desc, &a, &b, &d);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(cublaslt_handle, desc, a, b, d, d, pref, K,
                                            cands.data(), &r.candidates);
    if (st != CUBLAS_STATUS_SUCCESS || r.candidates == 0) {
        r.failure = st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_SUCCESS
                        ? "not supported" : cublasGetStatusName(st);
        r.candidates = 0;
    }

    const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
    auto run = [&](int i) {
        return cublasLtMatmul(cublaslt_handle, desc, &alpha, g.A, a, g.B, b, &beta, g.D, d, g.D, d,
                              &cands[i].algo, cublaslt_workspace, cublaslt_workspace_size, cuda_stream);
    };
    const size_t d_count = (size_t)g.m * g.n;
    floatX *d0 = NULL;   // the initial D, for the check (accumulate)
    if (r.candidates > 0 && g.accumulate) {
        d0 = bf16_tensor(d_count, "initial D");
        dev_copy(d0, g.D, d_count * sizeof(floatX));
    }
    for (int i = 0; i < r.candidates; i++) {
        if (cands[i].state != CUBLAS_STATUS_SUCCESS || run(i) != CUBLAS_STATUS_SUCCESS) {
            r.failed++;
            continue;
        }
        CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
        const double ms = time_ms([&] { CUBLAS_CHECK(run(i)); });
        if (r.first < 0) r.first = i, r.first_ms = ms;   // normally 0, the algorithm matmul.cu takes
        if (ms < r.best_ms) r.best = i, r.best_ms = ms;
    }
    if (r.candidates > 0 && r.first < 0) r.failure = "every candidate failed";

    if (!r.failure) {   // best against first, from the same initial D
        const bool has_grad = g.bias && bias_is_output(g.epilogue);
        floatX *ref = bf16_tensor(d_count, "first's D");
        void *ref_bias = has_grad ? dev_malloc(bias_bytes(g), "first's bias gradient") : NULL;
        if (d0) dev_copy(g.D, d0, d_count * sizeof(floatX));
        CUBLAS_CHECK(run(r.first));
        dev_copy(ref, g.D, d_count * sizeof(floatX));
        if (has_grad) dev_copy(ref_bias, g.bias, bias_bytes(g));
        if (d0) dev_copy(g.D, d0, d_count * sizeof(floatX));
        CUBLAS_CHECK(run(r.best));
        r.diff = rel_diff(g.D, ref, d_count);
        if (has_grad) {
            const size_t len = g.epilogue == CUBLASLT_EPILOGUE_BGRADB ? g.n : g.m;
            r.diff = std::max(r.diff, g.bias_type == CUDA_R_32F
                                          ? rel_diff((const float *)g.bias, (const float *)ref_bias, len)
                                          : rel_diff((const floatX *)g.bias, (const floatX *)ref_bias, len));
            dev_free(ref_bias);
        }
        dev_free(ref);
    }
    if (d0) dev_free(d0);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (a) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(a));
    if (b) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(b));
    if (d) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(d));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    return r;
}

// a bias-gradient epilogue: bf16 bias gradient if cuBLASLt has it for g, else fp32
static Result bench_bias_grad(Gemm &g) {
    g.bias_type = CUDA_R_16BF;
    Result r = bench_gemm(g);
    if (r.failure) {
        g.bias_type = CUDA_R_32F;
        Result r32 = bench_gemm(g);
        if (!r32.failure) r = r32;
        else g.bias_type = CUDA_R_16BF;
    }
    g.name += r.failure ? " (dbias bf16 or fp32)" : g.bias_type == CUDA_R_32F ? " (dbias fp32)" : " (dbias bf16)";
    return r;
}

// ---- the table ------------------------------------------------------------------------------

static double step_first_ms = 0.0, step_best_ms = 0.0;   // the plain GEMMs of one step
// -8: the same GEMMs' best in FP8 (without and with fast accumulation) and the casts they need
static double step_fp8_ms = 0.0, step_fp8_fast_ms = 0.0, step_cast_ms = 0.0;

static void header(void) {
    printf("| GEMM | m n k | cand. (failed) | first ms | best ms | best # | speedup | TFLOP/s first / best "
           "| best vs first | sep. kernels ms | plain best + kernels ms | epi best vs plain + kernels | epi vs sep |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
}
// plain_ms < 0: a plain GEMM (the last four columns empty); else an epilogue variant beside the
// plain GEMM's best plain_ms plus the separate kernels' kernel_ms, sep_diff its check
static void row(const Gemm &g, const Result &r, double plain_ms = -1, double kernel_ms = 0,
                double sep_diff = 0) {
    printf("| %s | %d %d %d | ", g.name.c_str(), g.m, g.n, g.k);
    if (r.failure) {
        printf("%s | | | | | | | | | | |\n", r.failure);
        fflush(stdout);
        return;
    }
    const double flops = 2.0 * g.m * g.n * (double)g.k;
    // "first" is the heuristic's first candidate, unless that one failed (then the next that ran)
    printf("%d (%d)%s | %.3f | %.3f | %d | %.2fx | %.0f / %.0f | %.1e | ", r.candidates, r.failed,
           r.first != 0 ? ", #0 failed" : "", r.first_ms, r.best_ms, r.best, r.first_ms / r.best_ms,
           flops / (r.first_ms * 1e9), flops / (r.best_ms * 1e9), r.diff);
    if (plain_ms < 0)
        printf("| | | |\n");
    else
        printf("%.3f | %.3f | %.2fx | %.1e |\n", kernel_ms, plain_ms + kernel_ms,
               (plain_ms + kernel_ms) / r.best_ms, sep_diff);
    step_first_ms += g.per_step * r.first_ms;
    step_best_ms += g.per_step * r.best_ms;
    fflush(stdout);
}

// ---- the FP8 rows (-8) ----------------------------------------------------------------------

template <typename F8>
static cudaDataType_t fp8_type() {
    return kE4M3<F8> ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}
// bf (a plain GEMM, already timed: its best ref_ms, its result ref in bf.D's shape) again in FP8,
// A and B the FP8 copies in the K-major form (A transposed, B not) with leading dimensions lda,
// ldb, into d (from d_init's values where bf accumulates), without and with fast accumulation
template <typename FA, typename FB>
static void bench_fp8(const Gemm &bf, double ref_ms, const floatX *ref, const Fp8Copy<FA> &a, int lda,
                      const Fp8Copy<FB> &b, int ldb, floatX *d, const floatX *d_init) {
    Gemm g = bf;   // the same m, n, k, epilogue, bias, accumulation
    g.ta = CUBLAS_OP_T, g.tb = CUBLAS_OP_N;
    g.A = a.data, g.lda = lda, g.B = b.data, g.ldb = ldb, g.D = d, g.ldd = g.m;
    g.a_type = fp8_type<FA>(), g.b_type = fp8_type<FB>(), g.a_scale = a.descale, g.b_scale = b.descale;
    g.per_step = 0;   // (the FP8 totals are kept apart)
    for (int fast = 0; fast < 2; fast++) {
        g.fast_accum = fast;
        g.name = bf.name + (fast ? " fp8 fast" : " fp8");
        if (d_init) dev_copy(d, d_init, (size_t)g.m * g.n * sizeof(floatX));
        const Result r = bench_gemm(g);
        row(g, r, ref_ms, 0.0, r.failure ? 0.0 : rel_diff(d, ref, (size_t)g.m * g.n));
        (fast ? step_fp8_fast_ms : step_fp8_ms) += bf.per_step * (r.failure ? ref_ms : r.best_ms);
    }
}

// ---- the layers -----------------------------------------------------------------------------

static void bench_layer(const char *name, int in, int out, bool has_bias, int per_step) {
    const int N = B * T;
    const size_t n_in = (size_t)N * in, n_out = (size_t)N * out;
    std::string s(name);
    floatX *inp = random_tensor(n_in, 1.0f, "inp");
    floatX *weight = random_tensor((size_t)out * in, 1.0f / sqrtf((float)in), "weight");
    floatX *bias = has_bias ? random_tensor(out, 0.1f, "bias") : NULL;
    floatX *y = bf16_tensor(n_out, "out");
    floatX *dout = random_tensor(n_out, 1.0f / 16, "dout");   // dweight sums N=65536 products
    floatX *dinp = bf16_tensor(n_in, "dinp");
    const unsigned int dweight_seed = bench_next_seed++;
    floatX *dweight = bf16_tensor((size_t)out * in, "dweight");
    fill_random(dweight, (size_t)out * in, 0.1f, dweight_seed);

    // forward: out^T (OC,N) = weight (OC,C) @ inp^T (C,N) [+ bias]
    Gemm fwd = gemm((s + " fwd").c_str(), per_step, CUBLAS_OP_T, CUBLAS_OP_N, out, N, in, weight, in,
                    inp, in, y, out, false);
    if (has_bias) fwd.epilogue = CUBLASLT_EPILOGUE_BIAS, fwd.bias = bias;
    const Result fwd_r = bench_gemm(fwd);
    row(fwd, fwd_r);
    // -8: the FP8 copies (each cast timed once, counted per layer) and the forward in FP8
    const float w_amax = 1.0f / sqrtf((float)in), dout_amax = 1.0f / 16;
    double ms, cast_ms = 0.0;
    Fp8Copy<__nv_fp8_e4m3> inp8 = {}, weight8 = {}, weight_t8 = {}, inp_t8 = {};
    Fp8Copy<__nv_fp8_e5m2> dout8 = {}, dout_t8 = {};
    if (fp8) {
        inp8 = fp8_copy<__nv_fp8_e4m3>(inp, N, in, 1.0f, false, &ms), cast_ms += ms;
        weight8 = fp8_copy<__nv_fp8_e4m3>(weight, out, in, w_amax, false, &ms), cast_ms += ms;
        weight_t8 = fp8_copy<__nv_fp8_e4m3>(weight, out, in, w_amax, true, &ms), cast_ms += ms;
        inp_t8 = fp8_copy<__nv_fp8_e4m3>(inp, N, in, 1.0f, true, &ms), cast_ms += ms;
        dout8 = fp8_copy<__nv_fp8_e5m2>(dout, N, out, dout_amax, false, &ms), cast_ms += ms;
        dout_t8 = fp8_copy<__nv_fp8_e5m2>(dout, N, out, dout_amax, true, &ms), cast_ms += ms;
        step_cast_ms += per_step * cast_ms;
        printf("| %s: the FP8 casts (%s's operands, once a call) | %.3f ms a call, %d a step | "
               "| | | | | | | | | | |\n", name, name, cast_ms, per_step);
        floatX *y8 = bf16_tensor(n_out, "fp8 out");
        if (!fwd_r.failure) bench_fp8(fwd, fwd_r.best_ms, y, weight8, in, inp8, in, y8, NULL);
        dev_free(y8);
    }
    if (out == 4 * C && !fwd_r.failure) {   // fc: GELU in the epilogue, the pre-activation as aux
        floatX *h = bf16_tensor(n_out, "gelu out"), *pre = bf16_tensor(n_out, "pre-activation");
        floatX *sep = bf16_tensor(n_out, "separate gelu");
        Gemm e = fwd;
        e.name = s + " fwd GELU_AUX_BIAS", e.per_step = 0;
        e.D = h, e.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, e.aux = pre;
        const Result r = bench_gemm(e);
        const double kernel_ms = time_ms([&] { gelu_forward(sep, y, n_out); });
        const double diff = r.failure ? 0 : std::max(rel_diff(h, sep, n_out), rel_diff(pre, y, n_out));
        row(e, r, fwd_r.best_ms, kernel_ms, diff);
        dev_free(h); dev_free(pre); dev_free(sep);
    }

    // dinp^T (C,N) = weight^T (C,OC) @ dout^T (OC,N)
    Gemm bwd = gemm((s + " dinp").c_str(), per_step, CUBLAS_OP_N, CUBLAS_OP_N, in, N, out, weight, in,
                    dout, out, dinp, in, false);
    const Result bwd_r = bench_gemm(bwd);
    row(bwd, bwd_r);
    if (fp8 && !bwd_r.failure) {   // A: weight^T (in, out) row-major, op T; B: dout as it is
        floatX *dinp8 = bf16_tensor(n_in, "fp8 dinp");
        bench_fp8(bwd, bwd_r.best_ms, dinp, weight_t8, out, dout8, out, dinp8, NULL);
        dev_free(dinp8);
    }
    if (in == 4 * C && !bwd_r.failure) {   // fcproj: dinp through fc's GELU backward, fc's dbias
        floatX *pre = random_tensor(n_in, 1.0f, "pre-activation");
        floatX *dh = bf16_tensor(n_in, "epilogue dinp"), *sep = bf16_tensor(n_in, "separate dinp");
        float *dbias = (float *)dev_malloc(in * sizeof(float), "epilogue dbias");
        float *sep_dbias = (float *)dev_malloc(in * sizeof(float), "separate dbias");
        Gemm e = bwd;
        e.name = s + " dinp DGELU", e.per_step = 0;
        e.D = dh, e.epilogue = CUBLASLT_EPILOGUE_DGELU, e.aux = pre;
        Result r = bench_gemm(e);
        double kernel_ms = time_ms([&] { gelu_backward(sep, pre, dinp, n_in); });
        row(e, r, bwd_r.best_ms, kernel_ms, r.failure ? 0 : rel_diff(dh, sep, n_in));

        e.name = s + " dinp DGELU_BGRAD", e.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD, e.bias = dbias;
        r = bench_bias_grad(e);
        kernel_ms = time_ms([&] {
            gelu_backward(sep, pre, dinp, n_in);
            column_sum(sep_dbias, sep, N, in);
        });
        double diff = 0;
        if (!r.failure)
            diff = std::max(rel_diff(dh, sep, n_in),
                            e.bias_type == CUDA_R_32F ? rel_diff(dbias, sep_dbias, in)
                                                      : rel_diff((floatX *)dbias, sep_dbias, in));
        row(e, r, bwd_r.best_ms, kernel_ms, diff);
        dev_free(pre); dev_free(dh); dev_free(sep); dev_free(dbias); dev_free(sep_dbias);
    }

    // dweight^T (C,OC) += inp^T (C,N) @ dout (N,OC)
    Gemm dw = gemm((s + " dweight").c_str(), per_step, CUBLAS_OP_N, CUBLAS_OP_T, in, out, N, inp, in,
                   dout, out, dweight, in, true);
    const Result dw_r = bench_gemm(dw);
    row(dw, dw_r);
    if (fp8) {   // A: inp^T (in, N) row-major, op T; B: dout^T (out, N) row-major; D from dweight's start
        if (!dw_r.failure) {
            floatX *init = bf16_tensor((size_t)out * in, "dweight's initial values");
            floatX *dweight8 = bf16_tensor((size_t)out * in, "fp8 dweight");
            fill_random(init, (size_t)out * in, 0.1f, dweight_seed);
            bench_fp8(dw, dw_r.best_ms, dweight, inp_t8, N, dout_t8, N, dweight8, init);
            dev_free(init); dev_free(dweight8);
        }
        fp8_free(inp8); fp8_free(weight8); fp8_free(weight_t8); fp8_free(inp_t8);
        fp8_free(dout8); fp8_free(dout_t8);
    }
    if (has_bias && !dw_r.failure) {   // the bias gradient, colsum over N of dout, from B's reduction
        floatX *dweight2 = bf16_tensor((size_t)out * in, "epilogue dweight");
        fill_random(dweight2, (size_t)out * in, 0.1f, dweight_seed);   // dweight's initial values
        float *dbias = (float *)dev_malloc(out * sizeof(float), "epilogue dbias");
        float *sep_dbias = (float *)dev_malloc(out * sizeof(float), "separate dbias");
        Gemm e = dw;
        e.name = s + " dweight BGRADB", e.per_step = 0;
        e.D = dweight2, e.epilogue = CUBLASLT_EPILOGUE_BGRADB, e.bias = dbias;
        const Result r = bench_bias_grad(e);
        const double kernel_ms = time_ms([&] { column_sum(sep_dbias, dout, N, out); });
        double diff = 0;
        if (!r.failure)   // both dweights hold their initial values plus one product
            diff = std::max(rel_diff(dweight2, dweight, (size_t)out * in),
                            e.bias_type == CUDA_R_32F ? rel_diff(dbias, sep_dbias, out)
                                                      : rel_diff((floatX *)dbias, sep_dbias, out));
        row(e, r, dw_r.best_ms, kernel_ms, diff);
        dev_free(dweight2); dev_free(dbias); dev_free(sep_dbias);
    }
    dev_free(inp); dev_free(weight); dev_free(y); dev_free(dout); dev_free(dinp); dev_free(dweight);
    if (bias) dev_free(bias);
}

static void usage(void) {
    fprintf(stderr, "usage: gemm_algos [-k K candidates, 16] [-b B batch, 64] [-t T tokens a row, 1024] [-r REPS, 20] "
                    "[-8: also in FP8; B*T a multiple of 32]\n");
    exit(1);
}

int main(int argc, char **argv) {
    bench_reps = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-8")) {
            fp8 = true;
            continue;
        }
        if (i + 1 >= argc) usage();
        const int v = atoi(argv[i + 1]);
        if (v < 1) usage();
        if (!strcmp(argv[i], "-k")) K = v;
        else if (!strcmp(argv[i], "-b")) B = v;
        else if (!strcmp(argv[i], "-t")) T = v;
        else if (!strcmp(argv[i], "-r")) bench_reps = v;
        else usage();
        i++;
    }
    if (fp8 && (B * T) % 32) usage();   // (the transposing casts' 32 x 32 tiles)
    if (backend_init() != 0) return 1;
    char desc[256];
    backend_describe(desc, sizeof(desc));
    printf("%s\ncuBLASLt %zu (headers %d.%d.%d), workspace %zu MiB\n", desc, cublasLtGetVersion(),
           CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH, cublaslt_workspace_size >> 20);
    printf("GPT-2 124M GEMMs, B=%d T=%d (N=%d), top %d heuristic candidates, median of %d launches "
           "after %d\n\n", B, T, B * T, K, bench_reps, bench_warmup);
    header();
    bench_layer("qkv", C, 3 * C, true, L);
    bench_layer("attproj", C, C, true, L);
    bench_layer("fc", C, 4 * C, true, L);
    bench_layer("fcproj", 4 * C, C, true, L);
    bench_layer("lm head", C, Vp, false, 1);
    printf("\nthe plain GEMMs of one training step (12 layers + LM head; fwd, dinp, dweight): "
           "%.2f ms with the heuristic's first, %.2f ms with the best of %d (%.2f ms, %.1f%% less)\n",
           step_first_ms, step_best_ms, K, step_first_ms - step_best_ms,
           100.0 * (step_first_ms - step_best_ms) / step_first_ms);
    if (fp8)
        printf("in FP8 (each GEMM's best; a shape FP8 cannot take counted at its bf16 best): %.2f ms, "
               "%.2f ms with fast accumulation, against %.2f in bf16; the casts (each operand once, "
               "transposed where FP8 needs it, as kernels of their own) %.2f ms a step\n",
               step_fp8_ms, step_fp8_fast_ms, step_best_ms, step_cast_ms);
    return 0;
}
