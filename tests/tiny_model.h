// tiny_model.h: the tiny GPT-2 that the model and generation tests (tests/test_model.c,
// tests/test_infer.c) run on, random tokens for it, and its parameters made livelier.
#ifndef TINY_MODEL_H
#define TINY_MODEL_H

#include <stdlib.h>

#include "../gpt2.h"
#include "test.h"

// vocabulary 61 padded to 64, 2 layers, 2 heads, 16 channels
static inline GPT2Config tiny_config(int max_seq_len) {
    GPT2Config c = {.max_seq_len = max_seq_len, .vocab_size = 61, .padded_vocab_size = 64,
                    .num_layers = 2, .num_heads = 2, .channels = 16};
    return c;
}

// out (n) uniform in 0..V-1
static inline void random_tokens(int *out, int n, int V, unsigned long long *rng) {
    for (int i = 0; i < n; i++) out[i] = (int)((test_randf(rng) * 0.5f + 0.5f) * V) % V;
}

// a batch of n inputs and n targets in the tiny vocabulary
static inline void random_batch(int *in, int *tg, int n, unsigned long long *rng) {
    random_tokens(in, n, tiny_config(1).vocab_size, rng);
    random_tokens(tg, n, tiny_config(1).vocab_size, rng);
}

// adds up to +-0.1 to every parameter: larger biases and layernorm parameters than the
// init's, so that every path carries signal (and gradient)
static inline void perturb_parameters(GPT2 *m, unsigned long long *rng) {
    size_t n = m->num_parameters;
    float *p = malloc(n * sizeof(float));
    if (!p) { fprintf(stderr, "out of memory (%zu parameters)\n", n); exit(1); }
    floatX_download(p, m->params_memory, n);
    for (size_t i = 0; i < n; i++) p[i] += 0.1f * test_randf(rng);
    floatX_upload(m->params_memory, p, n);
    free(p);
}

#endif
