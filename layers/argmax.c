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

void decode_advance(int *ring, int slots, int *cells, int ncells, int step, int last,
                    const int *tokens, int B) {
    const int p = cells[step];
    int *slot = ring + (size_t)(p % slots) * B;
    for (int b = 0; b < B; b++) slot[b] = tokens[b];
    if (!last) return;
    for (int i = 0; i < ncells; i++) cells[i] = p + 1 + i;
}
