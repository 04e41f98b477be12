// residual.c: the residual connection. Its backward is the identity, so the model passes the
// residual stream's gradient through and there is no residual_backward.
#include "layers.h"

// out (n), a (n), b (n)
void residual_forward(floatX *out, const floatX *a, const floatX *b, size_t n) {
    #pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
