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

void decode_advance(int *ring, int slots, int *pos, const int *tokens, int B) {
    int *slot = ring + (size_t)(pos[0] % slots) * B;
    for (int b = 0; b < B; b++) slot[b] = tokens[b];
    pos[0]++;
    pos[1]++;
}
