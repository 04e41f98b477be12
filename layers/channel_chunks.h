// channel_chunks.h: how the CPU layers sum a parameter gradient over rows (encoder's dwte and
// dwpe, layernorm's dweight and dbias, the bias gradients of column_sums_add) on all threads:
// the channels are cut into chunks and a thread owns its chunk across every row, so no two
// threads write the same element (repeated tokens in dwte included) and every element adds its
// rows in row order, the same bits on any number of threads.
#ifndef LAYERS_CHANNEL_CHUNKS_H
#define LAYERS_CHANNEL_CHUNKS_H

#include "layers.h"

#define CHANNEL_CHUNK 64   // channels per parallel work item

// fn(ctx, c0, c1) for each chunk [c0, c1) of the channels [0, C), the chunks in parallel
static inline void for_channel_chunks(int C, void (*fn)(void *ctx, int c0, int c1), void *ctx) {
    const int chunks = (C + CHANNEL_CHUNK - 1) / CHANNEL_CHUNK;
    #pragma omp parallel for
    for (int chunk = 0; chunk < chunks; chunk++) {
        const int c0 = chunk * CHANNEL_CHUNK;
        fn(ctx, c0, c0 + CHANNEL_CHUNK < C ? c0 + CHANNEL_CHUNK : C);
    }
}

typedef struct {
    floatX *dst;
    const floatX *src;
    int N, width;
} ColumnSums;

// channels [c0, c1) of dst, from every row of src in order (for_channel_chunks)
static inline void column_sums_channels(void *ctx, int c0, int c1) {
    const ColumnSums *s = (const ColumnSums *)ctx;
    for (int i = 0; i < s->N; i++) {
        const floatX *row = s->src + (size_t)i * s->width;
        for (int c = c0; c < c1; c++) s->dst[c] += row[c];
    }
}

// dst (width) += colsum(src (N, width)): a bias gradient
static inline void column_sums_add(floatX *dst, const floatX *src, int N, int width) {
    ColumnSums s = {dst, src, N, width};
    for_channel_chunks(width, column_sums_channels, &s);
}

#endif
