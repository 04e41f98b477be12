// gelu.cu: GELU with the tanh approximation, forward and backward, 8 elements per thread
// through 16-byte accesses (element-wise, so memory-bound: one read and one write per element).
// The backward with a bias gradient is one pass too: column_sums' grid (column_sums.cuh), whose
// rows functor computes and stores dinp and hands back what it stored for the sums.
#include "../runtime/cuda_common.cuh"
#include "column_sums.cuh"
#include "layers.h"

#include "gelu.cuh"   // gelu_value, GELU_SCALE, GELU_CUBIC (the decode step's GEMV uses them too)

// d gelu(x) / dx = s + 2 x s (1 - s) du/dx, with s = sigmoid(2u)
static __device__ __forceinline__ float gelu_derivative(float x) {
    const float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    const float du_dx = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    const float s = 1.0f / (1.0f + __expf(-2.0f * u));
    return s + 2.0f * x * s * (1.0f - s) * du_dx;
}

// Each thread handles VEC consecutive elements; the thread whose vector would run past n
// handles the remaining (fewer than VEC) elements one by one.
// (launched with PDL, as layernorm_forward_kernel is)
template <int VEC>
__global__ void gelu_forward_kernel(bf16 *__restrict__ out, const bf16 *__restrict__ inp, size_t n) {
    pdl_launch_dependents();
    pdl_wait();
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n) {
        float x[VEC], y[VEC];
        load_bf16<VEC>(x, inp + i);
#pragma unroll
        for (int k = 0; k < VEC; k++) y[k] = gelu_value(x[k]);
        store_bf16<VEC>(out + i, y);
    } else {
        for (; i < n; i++) out[i] = __float2bfloat16_rn(gelu_value(__bfloat162float(inp[i])));
    }
}

// dinp may alias dout: each element is read before it is written, by the same thread
template <int VEC>
__global__ void gelu_backward_kernel(bf16 *dinp, const bf16 *__restrict__ inp, const bf16 *dout,
                                     size_t n) {
    elementwise2<VEC>(dinp, inp, dout, n, [](float x, float dy) { return gelu_derivative(x) * dy; });
}

void gelu_forward(floatX *out, const floatX *inp, size_t n) {
    if (n == 0) return;
    launch_elementwise<8, true>(gelu_forward_kernel<8>, gelu_forward_kernel<1>,
                                is_aligned16(out) && is_aligned16(inp), n, BF(out), CBF(inp), n);
    LAUNCH_CHECK();
}

// rows for column_sums: dinp = gelu'(inp) * dout, stored, and summed as stored (bf16), as the
// bias gradient of a separate pass would read it. dinp may alias dout (no __restrict__): each
// element is read before it is written, by the same thread.
struct GeluBackwardRows {
    bf16 *dinp;
    const bf16 *inp, *dout;
    int width;
    template <int VEC, int R>
    __device__ void operator()(float (&d)[R][VEC], int row, int stride, int valid, int col) const {
        typedef typename BF16Raw<VEC>::type Raw;
        Raw x_raw[R], dy_raw[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= valid) break;
            const size_t i = (size_t)(row + r * stride) * width + col;
            x_raw[r] = load_bf16_raw<VEC>(inp + i);
            dy_raw[r] = load_bf16_raw<VEC>(dout + i);
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= valid) break;
            float x[VEC], dy[VEC];
            unpack_bf16<VEC>(x, x_raw[r]);
            unpack_bf16<VEC>(dy, dy_raw[r]);
#pragma unroll
            for (int k = 0; k < VEC; k++)
                d[r][k] = __bfloat162float(__float2bfloat16_rn(gelu_derivative(x[k]) * dy[k]));
            store_bf16<VEC>(dinp + (size_t)(row + r * stride) * width + col, d[r]);
        }
    }
};

void gelu_backward(floatX *dinp, floatX *dbias, void *scratch, const floatX *inp,
                   const floatX *dout, int N, int OC) {
    const size_t n = (size_t)N * OC;
    if (n == 0) return;
    const bool vec8 = is_aligned16(dinp) && is_aligned16(inp) && is_aligned16(dout);
    if (dbias) {   // one pass: dinp and its column sums
        const GeluBackwardRows rows{BF(dinp), CBF(inp), CBF(dout), OC};
        column_sums(BF(dbias), (float *)scratch, rows, N, OC, vec8);
        return;
    }
    launch_elementwise<8>(gelu_backward_kernel<8>, gelu_backward_kernel<1>, vec8, n, BF(dinp),
                          CBF(inp), CBF(dout), n);
    LAUNCH_CHECK();
}
