// sampler.h: the next token from a row of logits, as generation (infer_gpt2) and the samples
// printed during training (train_gpt2) both draw it: temperature, then top-k, then top-p
// (nucleus), then one draw from what is left; temperature 0 is greedy (argmax, the smaller
// id among equals). Random numbers come from seedable xorshift64* streams, one per sequence.
#ifndef SAMPLER_H
#define SAMPLER_H

#include <stdint.h>

typedef struct {
    float temperature;   // 0: greedy
    int top_k;           // 0: off
    float top_p;         // 1: off
} SamplerSettings;

typedef struct {
    float value;   // logit, then unnormalised probability
    int id;
} SampleCandidate;

// the state of stream `stream` (e.g. a sample's index in a batch) of a run seeded with `seed`
uint64_t sampler_seed(uint64_t seed, uint64_t stream);
// the next number of a stream, uniform in [0, 1)
float sampler_coin(uint64_t *state);
// one token from logits (V), given coin uniform in [0, 1); work (V) is scratch
int sample_token(const float *logits, int V, SamplerSettings s, float coin, SampleCandidate *work);

#endif
