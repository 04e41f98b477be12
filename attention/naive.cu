// naive.cu: causal multi-head attention on CUDA the textbook way, the baseline that
// flash.cu is measured against. Everything of size T x T goes through device memory:
//
//   forward   permute qkv (B,T,3,NH,HS) -> Q, K, V (B,NH,T,HS)
//             S = Q K^T * scale          cuBLAS strided-batched GEMM, into saved (B,NH,T,T)
//             P = causal_softmax(S)      kernel, in place in saved; masked entries exactly 0
//             O = P V                    cuBLAS
//             un-permute O -> out (B,T,NH,HS)
//   backward  permute qkv -> Q, K, V and dout -> dO
//             dV = P^T dO, dP = dO V^T   cuBLAS
//             dS = P * (dP - rowsum(dP * P))   kernel, in place over dP
//             dQ = dS K * scale, dK = dS^T Q * scale   cuBLAS
//             un-permute dQ, dK, dV -> dqkv (B,T,3,NH,HS)
//
// bf16 storage (S, P, dP, dS included), fp32 accumulation in the GEMMs and fp32 math in the
// kernels. The GEMMs compute full T x T products; the kernels read only the causal half of a
// row and write zeros over the rest.
#include "../runtime/cuda_common.cuh"
#include "attention.h"

#include <math.h>

const char *const attention_name = "naive";

static size_t round_up_256(size_t x) { return (x + 255) & ~(size_t)255; }

// scratch layout, each region 256-byte aligned:
//   q, k, v, o_or_dout, dq, dk, dv   (B, NH, T, HS) each
//   dp                               (B, NH, T, T): dP, then dS in place
typedef struct {
    bf16 *q, *k, *v, *o, *dq, *dk, *dv, *dp;
    size_t head_stride;   // elements between consecutive (B,NH,T,HS) regions (q -> k -> v, dq -> dk -> dv)
} Scratch;

static size_t head_tensor_bytes(int B, int T, int NH, int HS) {
    return round_up_256((size_t)B * NH * T * HS * sizeof(bf16));
}
static size_t scores_bytes(int B, int T, int NH) {
    return round_up_256((size_t)B * NH * T * T * sizeof(bf16));
}

static Scratch scratch_layout(void *scratch, int B, int T, int NH, int HS) {
    const size_t hb = head_tensor_bytes(B, T, NH, HS);
    char *base = (char *)scratch;
    Scratch s;
    s.q = (bf16 *)(base + 0 * hb);
    s.k = (bf16 *)(base + 1 * hb);
    s.v = (bf16 *)(base + 2 * hb);
    s.o = (bf16 *)(base + 3 * hb);
    s.dq = (bf16 *)(base + 4 * hb);
    s.dk = (bf16 *)(base + 5 * hb);
    s.dv = (bf16 *)(base + 6 * hb);
    s.dp = (bf16 *)(base + 7 * hb);
    s.head_stride = hb / sizeof(bf16);
    return s;
}

// P: B*NH*T*T bf16
size_t attention_saved_size(int B, int T, int NH, int HS) {
    return (size_t)B * NH * T * T * sizeof(bf16);
}

// seven (B,NH,T,HS) tensors (Q, K, V, O or dO, dQ, dK, dV) and dP (B,NH,T,T)
size_t attention_scratch_size(int B, int T, int NH, int HS) {
    return 7 * head_tensor_bytes(B, T, NH, HS) + scores_bytes(B, T, NH);
}

// cuBLAS products and kernels that sum in a fixed order, whatever is asked
int attention_set_deterministic(int on) { return 1; }
int attention_deterministic(void) { return 1; }

// ----------------------------------------------------------------------------------------
// permutes

// Element e of the packed (B,T,parts,NH,HS) layout is, in the split layout, at part p of
// (B,NH,T,HS), the parts head_stride apart: this returns that offset.
__device__ __forceinline__ size_t split_offset(size_t e, size_t head_stride, int parts, int T,
                                               int NH, int HS) {
    const int d = (int)(e % HS);
    size_t rest = e / HS;
    const int h = (int)(rest % NH);
    rest /= NH;
    const int p = (int)(rest % parts);
    rest /= parts;
    const int t = (int)(rest % T);
    const int b = (int)(rest / T);
    return p * head_stride + (((size_t)b * NH + h) * T + t) * HS + d;
}

// SPLIT:  dst part p (B,NH,T,HS), parts head_stride apart  <-  src (B,T,parts,NH,HS)
// !SPLIT: the reverse, dst (B,T,parts,NH,HS)  <-  src part p (B,NH,T,HS)
// one thread per VEC elements, in packed order (coalesced on the packed side, 16-byte row
// chunks on the split side)
template <int VEC, bool SPLIT>
__global__ void permute_heads_kernel(bf16 *__restrict__ dst, const bf16 *__restrict__ src,
                                     size_t head_stride, int parts, int B, int T, int NH, int HS) {
    const size_t total = (size_t)B * T * parts * NH * HS / VEC;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    const size_t e = idx * VEC;
    float x[VEC];
    if (SPLIT) {
        load_bf16<VEC>(x, src + e);
        store_bf16<VEC>(dst + split_offset(e, head_stride, parts, T, NH, HS), x);
    } else {
        load_bf16<VEC>(x, src + split_offset(e, head_stride, parts, T, NH, HS));
        store_bf16<VEC>(dst + e, x);
    }
}

template <bool SPLIT>
static void permute_heads(bf16 *dst, const bf16 *src, size_t head_stride, int parts, int B,
                          int T, int NH, int HS) {
    const size_t n = (size_t)B * T * parts * NH * HS;   // a multiple of 8 when HS is
    launch_elementwise<8>(permute_heads_kernel<8, SPLIT>, permute_heads_kernel<1, SPLIT>,
                          HS % 8 == 0 && is_aligned16(dst) && is_aligned16(src), n, dst, src,
                          head_stride, parts, B, T, NH, HS);
    LAUNCH_CHECK();
}
static constexpr auto split_heads = permute_heads<true>;
static constexpr auto merge_heads = permute_heads<false>;

// ----------------------------------------------------------------------------------------
// GEMMs: out = alpha * op(X) @ op(Y) + beta * out, all row-major, batched with strides.
// Row-major out (M,N) is column-major out^T (N,M) = op(Y)^T-ish: cuBLAS gets (Y, X) swapped.
// ldx, ldy, ldo: row lengths of the matrices as stored.

static void gemm_rowmajor(bool trans_x, bool trans_y, int M, int N, int K, float alpha,
                          const bf16 *X, int ldx, long long stride_x, const bf16 *Y, int ldy,
                          long long stride_y, bf16 *out, int ldo, long long stride_out, int batch) {
    const float beta = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        cublas_handle, trans_y ? CUBLAS_OP_T : CUBLAS_OP_N, trans_x ? CUBLAS_OP_T : CUBLAS_OP_N,
        N, M, K, &alpha, Y, CUDA_R_16BF, ldy, stride_y, X, CUDA_R_16BF, ldx, stride_x, &beta, out,
        CUDA_R_16BF, ldo, stride_out, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// ----------------------------------------------------------------------------------------
// softmax kernels: one warp per row of (B*NH*T, T); row r is query t = r % T, whose keys are
// 0..t. SOFTMAX_UNROLL vectors per lane per round are loaded before any is used.

enum { SOFTMAX_THREADS = 256, SOFTMAX_UNROLL = 4 };

// P = softmax(S) over columns 0..t of each row, 0 after; in place
template <int VEC>
__global__ void __launch_bounds__(SOFTMAX_THREADS)
    causal_softmax_kernel(bf16 *att, size_t rows, int T) {
    const int lane = threadIdx.x % 32;
    const size_t row = (size_t)blockIdx.x * (SOFTMAX_THREADS / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    const int t = (int)(row % T);
    bf16 *x = att + row * T;

    float row_max = -INFINITY, row_sum = 0.0f;   // running, over this lane's columns
    for (int base = lane * VEC; base <= t; base += 32 * VEC * SOFTMAX_UNROLL) {
        typename BF16Raw<VEC>::type raw[SOFTMAX_UNROLL];
#pragma unroll
        for (int u = 0; u < SOFTMAX_UNROLL; u++) {
            const int c0 = base + u * 32 * VEC;
            if (c0 <= t) raw[u] = load_bf16_raw<VEC>(x + c0);
        }
#pragma unroll
        for (int u = 0; u < SOFTMAX_UNROLL; u++) {
            const int c0 = base + u * 32 * VEC;
            if (c0 > t) break;
            float v[VEC];
            unpack_bf16<VEC>(v, raw[u]);
            float chunk_max = -INFINITY;
#pragma unroll
            for (int k = 0; k < VEC; k++)
                if (c0 + k <= t) chunk_max = fmaxf(chunk_max, v[k]);
            const float m = fmaxf(row_max, chunk_max);
            float s = row_sum * __expf(row_max - m);
#pragma unroll
            for (int k = 0; k < VEC; k++)
                if (c0 + k <= t) s += __expf(v[k] - m);
            row_max = m;
            row_sum = s;
        }
    }
    // combine lanes; lanes that saw no column have (-inf, 0) and must not make NaN
    const float m = warp_allreduce_max(row_max);
    const float lane_sum = row_max == -INFINITY ? 0.0f : row_sum * __expf(row_max - m);
    const float inv_sum = 1.0f / warp_allreduce_sum(lane_sum);

    for (int c0 = lane * VEC; c0 < T; c0 += 32 * VEC) {
        float p[VEC];
        if (c0 <= t) {
            float v[VEC];
            load_bf16<VEC>(v, x + c0);
#pragma unroll
            for (int k = 0; k < VEC; k++) p[k] = c0 + k <= t ? __expf(v[k] - m) * inv_sum : 0.0f;
        } else {
#pragma unroll
            for (int k = 0; k < VEC; k++) p[k] = 0.0f;
        }
        store_bf16<VEC>(x + c0, p);
    }
}

// dS = P * (dP - sum_j P dP) over columns 0..t, 0 after; in place over dP
template <int VEC>
__global__ void __launch_bounds__(SOFTMAX_THREADS)
    causal_softmax_backward_kernel(bf16 *dscores, const bf16 *__restrict__ probs, size_t rows, int T) {
    const int lane = threadIdx.x % 32;
    const size_t row = (size_t)blockIdx.x * (SOFTMAX_THREADS / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    const int t = (int)(row % T);
    bf16 *dx = dscores + row * T;
    const bf16 *px = probs + row * T;

    float dot = 0.0f;
    for (int base = lane * VEC; base <= t; base += 32 * VEC * SOFTMAX_UNROLL) {
        typename BF16Raw<VEC>::type p_raw[SOFTMAX_UNROLL], dp_raw[SOFTMAX_UNROLL];
#pragma unroll
        for (int u = 0; u < SOFTMAX_UNROLL; u++) {
            const int c0 = base + u * 32 * VEC;
            if (c0 <= t) {
                p_raw[u] = load_bf16_raw<VEC>(px + c0);
                dp_raw[u] = load_bf16_raw<VEC>(dx + c0);
            }
        }
#pragma unroll
        for (int u = 0; u < SOFTMAX_UNROLL; u++) {
            const int c0 = base + u * 32 * VEC;
            if (c0 > t) break;
            float p[VEC], dp[VEC];
            unpack_bf16<VEC>(p, p_raw[u]);
            unpack_bf16<VEC>(dp, dp_raw[u]);
#pragma unroll
            for (int k = 0; k < VEC; k++)
                if (c0 + k <= t) dot += p[k] * dp[k];
        }
    }
    dot = warp_allreduce_sum(dot);

    for (int c0 = lane * VEC; c0 < T; c0 += 32 * VEC) {
        float ds[VEC];
        if (c0 <= t) {
            float p[VEC], dp[VEC];
            load_bf16<VEC>(p, px + c0);
            load_bf16<VEC>(dp, dx + c0);
#pragma unroll
            for (int k = 0; k < VEC; k++) ds[k] = c0 + k <= t ? p[k] * (dp[k] - dot) : 0.0f;
        } else {
#pragma unroll
            for (int k = 0; k < VEC; k++) ds[k] = 0.0f;
        }
        store_bf16<VEC>(dx + c0, ds);
    }
}

static void causal_softmax(bf16 *att, int B, int NH, int T) {
    const size_t rows = (size_t)B * NH * T;
    const int blocks = ceil_div(rows, SOFTMAX_THREADS / 32);
    if (T % 8 == 0 && is_aligned16(att))
        causal_softmax_kernel<8><<<blocks, SOFTMAX_THREADS, 0, cuda_stream>>>(att, rows, T);
    else
        causal_softmax_kernel<1><<<blocks, SOFTMAX_THREADS, 0, cuda_stream>>>(att, rows, T);
    LAUNCH_CHECK();
}

static void causal_softmax_backward(bf16 *dscores, const bf16 *probs, int B, int NH, int T) {
    const size_t rows = (size_t)B * NH * T;
    const int blocks = ceil_div(rows, SOFTMAX_THREADS / 32);
    if (T % 8 == 0 && is_aligned16(dscores) && is_aligned16(probs))
        causal_softmax_backward_kernel<8><<<blocks, SOFTMAX_THREADS, 0, cuda_stream>>>(
            dscores, probs, rows, T);
    else
        causal_softmax_backward_kernel<1><<<blocks, SOFTMAX_THREADS, 0, cuda_stream>>>(
            dscores, probs, rows, T);
    LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------------------

void attention_forward(floatX *out, void *saved, void *scratch, const floatX *qkv,
                       int B, int T, int NH, int HS) {
    const Scratch s = scratch_layout(scratch, B, T, NH, HS);
    const int batch = B * NH;
    const long long head = (long long)T * HS, square = (long long)T * T;
    const float scale = 1.0f / sqrtf((float)HS);
    bf16 *att = BF(saved);

    split_heads(s.q, CBF(qkv), s.head_stride, 3, B, T, NH, HS);
    // S (T,T) = scale * Q (T,HS) @ K^T
    gemm_rowmajor(false, true, T, T, HS, scale, s.q, HS, head, s.k, HS, head, att, T, square, batch);
    causal_softmax(att, B, NH, T);
    // O (T,HS) = P (T,T) @ V (T,HS)
    gemm_rowmajor(false, false, T, HS, T, 1.0f, att, T, square, s.v, HS, head, s.o, HS, head, batch);
    merge_heads(BF(out), s.o, s.head_stride, 1, B, T, NH, HS);
}

void attention_backward(floatX *dqkv, void *scratch, const floatX *dout, const floatX *qkv,
                        const floatX *out, const void *saved, int B, int T, int NH, int HS) {
    const Scratch s = scratch_layout(scratch, B, T, NH, HS);
    const int batch = B * NH;
    const long long head = (long long)T * HS, square = (long long)T * T;
    const float scale = 1.0f / sqrtf((float)HS);
    const bf16 *probs = CBF(saved);
    bf16 *dout_heads = s.o;   // dO takes O's place

    split_heads(s.q, CBF(qkv), s.head_stride, 3, B, T, NH, HS);
    split_heads(dout_heads, CBF(dout), s.head_stride, 1, B, T, NH, HS);
    // dV (T,HS) = P^T (T,T) @ dO (T,HS)
    gemm_rowmajor(true, false, T, HS, T, 1.0f, probs, T, square, dout_heads, HS, head, s.dv, HS,
                  head, batch);
    // dP (T,T) = dO (T,HS) @ V^T
    gemm_rowmajor(false, true, T, T, HS, 1.0f, dout_heads, HS, head, s.v, HS, head, s.dp, T,
                  square, batch);
    causal_softmax_backward(s.dp, probs, B, NH, T);
    // dQ (T,HS) = scale * dS (T,T) @ K (T,HS);  dK (T,HS) = scale * dS^T @ Q
    gemm_rowmajor(false, false, T, HS, T, scale, s.dp, T, square, s.k, HS, head, s.dq, HS, head, batch);
    gemm_rowmajor(true, false, T, HS, T, scale, s.dp, T, square, s.q, HS, head, s.dk, HS, head, batch);
    merge_heads(BF(dqkv), s.dq, s.head_stride, 3, B, T, NH, HS);
}
