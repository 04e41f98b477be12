// gelu.cu: GELU with the tanh approximation, forward and backward, 8 elements per thread
// through 16-byte accesses (element-wise, so memory-bound: one read and one write per element).
#include "../runtime/cuda_common.cuh"
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

void gelu_backward(floatX *dinp, const floatX *inp, const floatX *dout, size_t n) {
    if (n == 0) return;
    launch_elementwise<8>(gelu_backward_kernel<8>, gelu_backward_kernel<1>,
                          is_aligned16(dinp) && is_aligned16(inp) && is_aligned16(dout), n,
                          BF(dinp), CBF(inp), CBF(dout), n);
    LAUNCH_CHECK();
}
