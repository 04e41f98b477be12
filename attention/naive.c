// naive.c: causal multi-head attention on the CPU (fp32, OpenMP), the textbook way.
//
// Forward materialises, per (b, h), the scores S = Q K^T / sqrt(HS) and the probabilities
// P = softmax(S) as a (T, T) matrix, and keeps P for backward: B*NH*T*T floats, the T^2
// memory flash attention avoids. S is computed into P's row and softmaxed in place.
// Backward reads P back instead of recomputing it:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)),
//   dQ = dS K / sqrt(HS),  dK = dS^T Q / sqrt(HS)
// Masked entries of P (key after query) are exactly 0, so they drop out of every sum above.
//
// A row of S = Q K^T (or of dP = dO V^T) is t+1 dot products of length HS; computed one by
// one, each ends in a horizontal sum across the vector lanes that costs more than its
// products. So K (forward) and V (backward) are first transposed into scratch, (HS, T) per
// head, and a row of S is sum_d q[d] * K^T[d][:], HS rows added with weights.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attention.h"
#include "cpu_kernels.h"

#ifdef BACKEND_CUDA
#error "attention/naive.c is the fp32 CPU backend; the CUDA build uses attention/naive.cu"
#endif

const char *const attention_name = "naive";

// saved: P (B, NH, T, T)
size_t attention_saved_size(int B, int T, int NH, int HS) {
    return (size_t)B * NH * T * T * sizeof(floatX);
}

// scratch: K (forward) or V (backward) transposed, (B, NH, HS, T), then, for backward, one
// row of dP (T) per (b, h); per (b, h) rather than per thread so that the size does not depend
// on how many threads OpenMP runs.
size_t attention_scratch_size(int B, int T, int NH, int HS) {
    return (size_t)B * NH * T * (HS + 1) * sizeof(float);
}

// every sum in a fixed order (one thread per output element or row), whatever is asked
int attention_set_deterministic(int on) { return 1; }
int attention_deterministic(void) { return 1; }

// y (n) += alpha * x (n)
static inline void axpy(float *y, float alpha, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += alpha * x[i];
}

// which = 1: keys, 2: values. transposed (B, NH, HS, T), qkv (B, T, 3, NH, HS)
static void transpose_keys_or_values(float *transposed, const float *qkv, int which,
                                     int B, int T, int NH, int HS) {
    const int C = NH * HS;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            float *dst = transposed + ((size_t)b * NH + h) * HS * T;
            for (int s = 0; s < T; s++) {
                const float *src = qkv + ((size_t)b * T + s) * 3 * C + which * C + h * HS;
                for (int d = 0; d < HS; d++) dst[(size_t)d * T + s] = src[d];
            }
        }
    }
}

// out (B, T, NH, HS), saved = P (B, NH, T, T), scratch: keys transposed (B, NH, HS, T),
// qkv (B, T, 3, NH, HS)
void attention_forward(floatX *out, void *saved, void *scratch, const floatX *qkv,
                       int B, int T, int NH, int HS) {
    const int C = NH * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    float *probs = (float *)saved;
    float *keys_t = (float *)scratch;
    transpose_keys_or_values(keys_t, qkv, 1, B, T, NH, HS);

    #pragma omp parallel for collapse(3) schedule(dynamic, 16)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float *query = qkv + ((size_t)b * T + t) * 3 * C + h * HS;
                const float *values = qkv + (size_t)b * T * 3 * C + 2 * C + h * HS;   // row 0
                const float *keys_t_bh = keys_t + ((size_t)b * NH + h) * HS * T;
                float *prob_row = probs + (((size_t)b * NH + h) * T + t) * T;

                // scores S[t, s] = q_t . k_s * scale for s <= t, and their maximum
                memset(prob_row, 0, (t + 1) * sizeof(*prob_row));
                accumulate_weighted_rows(prob_row, query, keys_t_bh, T, HS, t + 1);
                float max_score = -INFINITY;
                for (int s = 0; s <= t; s++) {
                    prob_row[s] *= scale;
                    if (prob_row[s] > max_score) max_score = prob_row[s];
                }
                // softmax in place, shifted by the maximum so that exp cannot overflow
                float sum = 0.0f;
                #pragma omp simd reduction(+ : sum)
                for (int s = 0; s <= t; s++) {
                    prob_row[s] = expf_vectorizable(prob_row[s] - max_score);
                    sum += prob_row[s];
                }
                const float inv_sum = 1.0f / sum;
                for (int s = 0; s <= t; s++) prob_row[s] *= inv_sum;
                for (int s = t + 1; s < T; s++) prob_row[s] = 0.0f;   // causal mask

                // out_t = sum_s P[t, s] v_s
                float *out_row = out + ((size_t)b * T + t) * C + h * HS;
                memset(out_row, 0, HS * sizeof(*out_row));
                accumulate_weighted_rows(out_row, prob_row, values, 3 * C, t + 1, HS);
            }
        }
    }
}

// dqkv (B, T, 3, NH, HS) overwritten, scratch: values transposed (B, NH, HS, T) then dP rows
// (B, NH, T), dout (B, T, NH, HS), qkv (B, T, 3, NH, HS), saved = P (B, NH, T, T); out is not
// needed (P already holds what it would give)
void attention_backward(floatX *dqkv, void *scratch, const floatX *dout, const floatX *qkv,
                        const floatX *out, const void *saved, int B, int T, int NH, int HS) {
    const int C = NH * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const float *probs = (const float *)saved;
    float *values_t = (float *)scratch;
    float *dprob_rows = values_t + (size_t)B * NH * HS * T;
    transpose_keys_or_values(values_t, qkv, 2, B, T, NH, HS);

    // One (b, h) per iteration: every query row adds into the dK and dV rows of all earlier
    // keys, so splitting a head's rows between threads would race on them.
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *keys = qkv + (size_t)b * T * 3 * C + C + h * HS;   // row 0
            const float *values_t_bh = values_t + ((size_t)b * NH + h) * HS * T;
            float *dprob_row = dprob_rows + ((size_t)b * NH + h) * T;   // dP, then dS

            for (int t = 0; t < T; t++) {
                float *dqkv_t = dqkv + ((size_t)b * T + t) * 3 * C + h * HS;
                memset(dqkv_t, 0, HS * sizeof(*dqkv_t));           // dq_t
                memset(dqkv_t + C, 0, HS * sizeof(*dqkv_t));       // dk_t
                memset(dqkv_t + 2 * C, 0, HS * sizeof(*dqkv_t));   // dv_t
            }

            for (int t = 0; t < T; t++) {
                const float *query = qkv + ((size_t)b * T + t) * 3 * C + h * HS;
                const float *dout_row = dout + ((size_t)b * T + t) * C + h * HS;
                const float *prob_row = probs + (((size_t)b * NH + h) * T + t) * T;
                float *dquery = dqkv + ((size_t)b * T + t) * 3 * C + h * HS;

                // dP[t, s] = dO_t . v_s, and rowsum(dP * P) for the softmax backward
                memset(dprob_row, 0, (t + 1) * sizeof(*dprob_row));
                accumulate_weighted_rows(dprob_row, dout_row, values_t_bh, T, HS, t + 1);
                float dprob_dot_prob = 0.0f;
                #pragma omp simd reduction(+ : dprob_dot_prob)
                for (int s = 0; s <= t; s++) dprob_dot_prob += dprob_row[s] * prob_row[s];
                // dS[t, s], with the 1/sqrt(HS) of S = Q K^T * scale folded in
                for (int s = 0; s <= t; s++)
                    dprob_row[s] = prob_row[s] * (dprob_row[s] - dprob_dot_prob) * scale;

                accumulate_weighted_rows(dquery, dprob_row, keys, 3 * C, t + 1, HS);
                for (int s = 0; s <= t; s++) {
                    float *dkey = dqkv + ((size_t)b * T + s) * 3 * C + C + h * HS;
                    float *dvalue = dkey + C;
                    axpy(dkey, dprob_row[s], query, HS);
                    axpy(dvalue, prob_row[s], dout_row, HS);
                }
            }
        }
    }
}
