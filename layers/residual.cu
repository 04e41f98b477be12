// residual.cu: out = a + b, 8 elements per thread through 16-byte accesses (memory-bound).
#include "../runtime/cuda_common.cuh"
#include "layers.h"

// out may alias a or b: each element is read before it is written, by the same thread
// (launched with PDL, as layernorm_forward_kernel is)
template <int VEC>
__global__ void residual_forward_kernel(bf16 *out, const bf16 *a, const bf16 *b, size_t n) {
    pdl_launch_dependents();
    pdl_wait();
    elementwise2<VEC>(out, a, b, n, [](float x, float y) { return x + y; });
}

void residual_forward(floatX *out, const floatX *a, const floatX *b, size_t n) {
    if (n == 0) return;
    launch_elementwise<8, true>(residual_forward_kernel<8>, residual_forward_kernel<1>,
                                is_aligned16(out) && is_aligned16(a) && is_aligned16(b), n,
                                BF(out), CBF(a), CBF(b), n);
    LAUNCH_CHECK();
}
