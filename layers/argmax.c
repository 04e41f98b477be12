// argmax.c: greedy decoding's choice, the largest logit of each row, on the CPU.
#include "layers.h"

// out (B), logits (B rows of row_stride, the first V read)
void logits_argmax(int *out, const floatX *logits, size_t row_stride, int B, int V) {
    for (int b = 0; b < B; b++) {
        const float *row = logits + (size_t)b * row_stride;
        int best = 0;
        for (int i = 1; i < V; i++)
            if (row[i] > row[best]) best = i;   // strict: the first of equal maxima stays
        out[b] = best;
    }
}
