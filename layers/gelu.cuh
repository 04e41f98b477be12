// gelu.cuh: the GELU of the CUDA layers, one definition for gelu.cu's kernels and the decode
// step's fused GEMV (fused.cu), so that both give the same bits.
#pragma once

// Through 0.5 (1 + tanh(u)) = sigmoid(2u): the same function, but for negative x, 1 + tanh(u)
// cancels to a few bits while the sigmoid keeps its relative precision (layers/gelu.c too).
// For large |x| the exponential overflows to inf and the results go cleanly to 0 or x.
static const float GELU_SCALE = 0.7978845608028654f;   // sqrt(2/pi)
static const float GELU_CUBIC = 0.044715f;

static __device__ __forceinline__ float gelu_value(float x) {
    const float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    return x / (1.0f + __expf(-2.0f * u));
}
