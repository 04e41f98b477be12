// encoder.c: token embedding plus position embedding, forward and backward.
#include "layers.h"

// channels per parallel work item in encoder_backward: a thread owns these columns of dwte
// and dwpe across all rows, so repeated tokens never race
#define ENCODER_CHANNEL_CHUNK 64

// out (B,T,C), tokens (B,T), wte (Vp,C), wpe (maxT,C)
void encoder_forward(floatX *out, const int *tokens, const floatX *wte, const floatX *wpe,
                     int B, int T, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *out_bt = out + ((size_t)b * T + t) * C;
            const float *wte_ix = wte + (size_t)tokens[b * T + t] * C;
            const float *wpe_t = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) out_bt[c] = wte_ix[c] + wpe_t[c];
        }
    }
}

size_t encoder_backward_scratch_size(int B, int T) { return 0; }

// dwte (Vp,C) +=, dwpe (maxT,C) +=, dout (B,T,C), tokens (B,T)
void encoder_backward(floatX *dwte, floatX *dwpe, void *scratch, const floatX *dout,
                      const int *tokens, int B, int T, int C) {
    int chunks = (C + ENCODER_CHANNEL_CHUNK - 1) / ENCODER_CHANNEL_CHUNK;
    #pragma omp parallel for
    for (int chunk = 0; chunk < chunks; chunk++) {
        int c0 = chunk * ENCODER_CHANNEL_CHUNK;
        int c1 = c0 + ENCODER_CHANNEL_CHUNK < C ? c0 + ENCODER_CHANNEL_CHUNK : C;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const float *dout_bt = dout + ((size_t)b * T + t) * C;
                float *dwte_ix = dwte + (size_t)tokens[b * T + t] * C;
                float *dwpe_t = dwpe + (size_t)t * C;
                for (int c = c0; c < c1; c++) {
                    dwte_ix[c] += dout_bt[c];
                    dwpe_t[c] += dout_bt[c];
                }
            }
        }
    }
}
