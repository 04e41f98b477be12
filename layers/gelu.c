// gelu.c: GELU activation, tanh approximation, forward and backward.
// Computed through the identity 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)): the same
// function, but for negative inputs 1 + tanh(u) cancels to a few significant bits in fp32,
// while the sigmoid keeps full relative precision (and needs one exp instead of one tanh).
#include "channel_chunks.h"
#include "layers.h"

#include <math.h>

#define GELU_SCALE 0.7978845608028654f   // sqrt(2/pi)
#define GELU_CUBIC 0.044715f

// out (n), inp (n)
void gelu_forward(floatX *out, const floatX *inp, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        out[i] = x / (1.0f + expf(-2.0f * u));
    }
}

// dinp (N,OC) = dout * gelu'(inp); inp (N,OC), dout (N,OC); dbias (OC) += colsum(dinp) unless
// NULL. dinp may alias dout: each element is read before it is written.
// With s = sigmoid(2u): gelu = x s, and gelu' = s + 2 x s (1 - s) du/dx.
void gelu_backward(floatX *dinp, floatX *dbias, void *scratch, const floatX *inp,
                   const floatX *dout, int N, int OC) {
    const size_t n = (size_t)N * OC;
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        float du_dx = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
        float s = 1.0f / (1.0f + expf(-2.0f * u));
        float local_grad = s + 2.0f * x * s * (1.0f - s) * du_dx;
        dinp[i] = local_grad * dout[i];
    }
    if (dbias) column_sums_add(dbias, dinp, N, OC);
}
