// residual.cu: out = a + b, 8 elements per thread through 16-byte accesses (memory-bound).
#include "cuda_common.cuh"

// out may alias a or b: each element is read before it is written, by the same thread
template <int VEC>
__global__ void residual_forward_kernel(bf16 *out, const bf16 *a, const bf16 *b, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n) {
        float x[VEC], y[VEC], z[VEC];
        load_bf16<VEC>(x, a + i);
        load_bf16<VEC>(y, b + i);
#pragma unroll
        for (int k = 0; k < VEC; k++) z[k] = x[k] + y[k];
        store_bf16<VEC>(out + i, z);
    } else {
        for (; i < n; i++)
            out[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
    }
}

void residual_forward(floatX *out, const floatX *a, const floatX *b, size_t n) {
    if (n == 0) return;
    const int threads = 256;
    if (is_aligned16(out) && is_aligned16(a) && is_aligned16(b))
        residual_forward_kernel<8><<<ceil_div(ceil_div(n, 8), threads), threads, 0, cuda_stream>>>(
            BF(out), CBF(a), CBF(b), n);
    else
        residual_forward_kernel<1><<<ceil_div(n, threads), threads, 0, cuda_stream>>>(
            BF(out), CBF(a), CBF(b), n);
    LAUNCH_CHECK();
}
