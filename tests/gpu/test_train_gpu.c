// test_train_gpu.c: training steps on the GPU with each micro-batch's forward and backward
// replayed as a CUDA graph (gpt2_forward_backward, runtime/graph.h) against the same steps
// launched kernel by kernel (CUDA_GRAPHS=0): every loss, every gradient and every parameter
// must have the same bits. The steps take two micro-batches each, an update between them, and
// in the middle a validation-style pass of a larger (B, T), which grows the activation arena:
// the new arena may take the old one's address with another layout, so the recorded graph must
// go with it (a graph kept would write the old layout). Prints SKIP and passes without a GPU.
#include <stdlib.h>
#include <string.h>

#include "../../attention/attention.h"
#include "../../gpt2.h"
#include "../test.h"
#include "../tiny_model.h"   // random_tokens

enum { STEPS = 4, MICRO = 2, B = 2, T = 64, BIG_B = 3, BIG_T = 128 };

// 2 layers of 2 heads of 64 (the flash kernels' head size), a vocabulary of 200 padded to 256
static GPT2Config test_config(void) {
    GPT2Config c = {.max_seq_len = BIG_T, .vocab_size = 200, .padded_vocab_size = 256,
                    .num_layers = 2, .num_heads = 2, .channels = 128};
    return c;
}

typedef struct {
    float losses[STEPS * 2];   // each step's summed micro-batch loss, then the larger pass's
    float *grads, *params;     // after the last step (n each)
    size_t n;                  // parameters
} Run;

// STEPS steps on the same tokens every time (seed), graphs on or off
static Run train(int graphs, unsigned long long seed) {
    setenv("CUDA_GRAPHS", graphs ? "1" : "0", 1);
    GPT2 m;
    gpt2_init_random(&m, test_config(), 5);
    const int V = m.config.vocab_size;
    unsigned long long rng = seed;
    int in[BIG_B * BIG_T], tg[BIG_B * BIG_T];
    Run r = {{0}, NULL, NULL, m.num_parameters};
    for (int step = 0; step < STEPS; step++) {
        gpt2_zero_grad(&m);
        for (int micro = 0; micro < MICRO; micro++) {
            random_tokens(in, B * T, V, &rng);
            random_tokens(tg, B * T, V, &rng);
            gpt2_forward_backward(&m, in, tg, B, T, 1.0f / MICRO);
        }
        r.losses[2 * step] = gpt2_loss_sum(&m);
        if (step == 1) {   // a larger pass: a new activation arena before the next step
            random_tokens(in, BIG_B * BIG_T, V, &rng);
            random_tokens(tg, BIG_B * BIG_T, V, &rng);
            r.losses[2 * step + 1] = gpt2_forward(&m, in, tg, BIG_B, BIG_T);
        }
        if (step + 1 < STEPS) gpt2_update(&m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step + 1);
    }
    r.grads = malloc(r.n * sizeof(float));
    r.params = malloc(r.n * sizeof(float));
    if (!r.grads || !r.params) { fprintf(stderr, "out of host memory\n"); exit(1); }
    floatX_download(r.grads, m.grads_memory, r.n);
    floatX_download(r.params, m.params_memory, r.n);
    gpt2_free(&m);
    return r;
}

int main(void) {
    if (backend_init() != 0) {
        SKIP("no CUDA device: the GPU tests of training did not run");
        return test_summary();
    }
    char desc[256];
    backend_describe(desc, sizeof(desc));
    printf("device: %s\n", desc);
    if (!attention_set_deterministic(1)) {
        SKIP("%s attention has no deterministic backward on this device: runs differ in their "
             "last bits whatever the graphs do", attention_name);
        return test_summary();
    }
    const unsigned long long seed = test_seed();
    Run g = train(1, seed), k = train(0, seed), g2 = train(1, seed);
    const size_t params = g.n;
    size_t nonzero = 0;
    for (size_t i = 0; i < params; i++) nonzero += g.grads[i] != 0.0f;
    CHECK(nonzero > params / 2, "the gradients were computed (%zu of %zu nonzero)", nonzero, params);
    for (int i = 0; i < STEPS * 2; i++)
        CHECK(memcmp(&g.losses[i], &k.losses[i], sizeof(float)) == 0,
              "loss %d: graph %.9g, kernel by kernel %.9g", i, g.losses[i], k.losses[i]);
    CHECK(g.losses[0] > 0.0f && g.losses[3] > 0.0f, "the losses were computed (%g, %g)", g.losses[0],
          g.losses[3]);
    CHECK(memcmp(g.grads, k.grads, params * sizeof(float)) == 0,
          "the last step's gradients: the same bits with and without the graph");
    CHECK(memcmp(g.params, k.params, params * sizeof(float)) == 0,
          "the parameters after %d updates: the same bits with and without the graph", STEPS - 1);
    CHECK(memcmp(g.grads, g2.grads, params * sizeof(float)) == 0,
          "two runs with graphs: the same gradients");
    free(g.grads); free(g.params); free(k.grads); free(k.params); free(g2.grads); free(g2.params);
    return test_summary();
}
