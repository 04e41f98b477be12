// encoder.c: token embedding plus position embedding, forward and backward.
#include "channel_chunks.h"
#include "layers.h"

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

void decode_embed(floatX *out, const int *tokens, const int *cell, const floatX *wte,
                  const floatX *wpe, int B, int C, int chained) {
    encoder_forward(out, tokens, wte, wpe + (size_t)cell[0] * C, B, 1, C);
}

size_t encoder_backward_scratch_size(int B, int T) { return 0; }

typedef struct {
    floatX *dwte, *dwpe;
    const floatX *dout;
    const int *tokens;
    int B, T, C;
} EncoderBackward;

// channels [c0, c1) of dwte and dwpe, from every (b, t) in order (for_channel_chunks)
static void encoder_backward_channels(void *ctx, int c0, int c1) {
    const EncoderBackward *e = ctx;
    const int B = e->B, T = e->T, C = e->C;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *dout_bt = e->dout + ((size_t)b * T + t) * C;
            float *dwte_ix = e->dwte + (size_t)e->tokens[b * T + t] * C;
            float *dwpe_t = e->dwpe + (size_t)t * C;
            for (int c = c0; c < c1; c++) {
                dwte_ix[c] += dout_bt[c];
                dwpe_t[c] += dout_bt[c];
            }
        }
    }
}

// dwte (Vp,C) +=, dwpe (maxT,C) +=, dout (B,T,C), tokens (B,T)
void encoder_backward(floatX *dwte, floatX *dwpe, void *scratch, const floatX *dout,
                      const int *tokens, int B, int T, int C) {
    EncoderBackward e = {dwte, dwpe, dout, tokens, B, T, C};
    for_channel_chunks(C, encoder_backward_channels, &e);
}
