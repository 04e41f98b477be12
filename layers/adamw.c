// adamw.c: the optimizer's two passes over the gradients: their sum of squares (for global
// norm clipping) and the AdamW update.
#include "layers.h"

#include <math.h>

// out: a single float, += sum of grads[i]^2; grads (n)
void grad_sumsq(float *out, const floatX *grads, size_t n) {
    double sum = 0.0;
    #pragma omp parallel for reduction(+:sum)
    for (size_t i = 0; i < n; i++) sum += (double)grads[i] * grads[i];
    *out = (float)((double)*out + sum);
}

// params (n), master (n) or NULL, grads (n), m (n), v (n), grad_sumsq (1)
void adamw_update(floatX *params, float *master, const floatX *grads, float *m, float *v,
                  size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  const float *grad_sumsq, float max_grad_norm, int t) {
    float norm = sqrtf(*grad_sumsq);
    if (!isfinite(norm)) return;   // the caller reports it; parameters stay as they were
    float grad_scale = (max_grad_norm > 0.0f && norm > max_grad_norm) ? max_grad_norm / norm : 1.0f;
    float beta1_correction = 1.0f - (float)pow(beta1, t);
    float beta2_correction = 1.0f - (float)pow(beta2, t);
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float grad = grads[i] * grad_scale;
        float m_i = beta1 * m[i] + (1.0f - beta1) * grad;
        float v_i = beta2 * v[i] + (1.0f - beta2) * grad * grad;
        m[i] = m_i;
        v[i] = v_i;
        float m_hat = m_i / beta1_correction;
        float v_hat = v_i / beta2_correction;
        float param = master ? master[i] : params[i];
        param -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * param);
        if (master) master[i] = param;
        params[i] = param;
    }
}
