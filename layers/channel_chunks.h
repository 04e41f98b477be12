// channel_chunks.h: how the CPU layers sum a parameter gradient over rows (encoder's dwte and
// dwpe, layernorm's dweight and dbias, matmul's dbias) on all threads: the channels are cut
// into chunks and a thread owns its chunk across every row, so no two threads write the same
// element (repeated tokens in dwte included) and every element adds its rows in row order,
// the same bits on any number of threads.
#ifndef LAYERS_CHANNEL_CHUNKS_H
#define LAYERS_CHANNEL_CHUNKS_H

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

#endif
