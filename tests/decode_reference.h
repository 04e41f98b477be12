// decode_reference.h: what the CPU (tests/test_infer.c) and GPU (tests/gpu/test_infer_gpu.c)
// tests of generation share: the double-precision reference of attention_decode, and greedy
// decoding with the tokens on the device against the same with them read back every step.
// Include after gpt2.h.
#ifndef DECODE_REFERENCE_H
#define DECODE_REFERENCE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// row (C = NH * HS) = position s of sequence b of a cache (B, NH, maxT, HS): one head at a time
static void cache_position(float *row, const float *cache, int b, int s, int maxT, int NH, int HS) {
    for (int h = 0; h < NH; h++)
        memcpy(row + h * HS, cache + KV_CACHE_AT(b, h, s, maxT, NH, HS), HS * sizeof(float));
}

// out (B, NH, HS) = softmax(q k^T / sqrt(HS)) v over positions 0..len-1, summed in double and
// rounded to fp32 once; q (B, NH, HS), kc and vc (B, NH, maxT, HS) (KV_CACHE_AT)
static void reference_decode(float *out, const float *q, const float *kc, const float *vc,
                             int B, int len, int maxT, int NH, int HS) {
    int C = NH * HS;
    double *scores = malloc(len * sizeof(double));
    if (!scores) {
        fprintf(stderr, "reference_decode: out of memory for %d scores\n", len);
        exit(1);
    }
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            double max = -INFINITY, sum = 0.0;
            for (int s = 0; s < len; s++) {
                double dot = 0.0;
                for (int i = 0; i < HS; i++)
                    dot += (double)q[b * C + h * HS + i] * kc[KV_CACHE_AT(b, h, s, maxT, NH, HS) + i];
                scores[s] = dot / sqrt((double)HS);
                if (scores[s] > max) max = scores[s];
            }
            for (int s = 0; s < len; s++) sum += (scores[s] = exp(scores[s] - max));
            for (int i = 0; i < HS; i++) {
                double acc = 0.0;
                for (int s = 0; s < len; s++) acc += scores[s] * vc[KV_CACHE_AT(b, h, s, maxT, NH, HS) + i];
                out[b * C + h * HS + i] = (float)(acc / sum);
            }
        }
    }
    free(scores);
}

// Greedy decoding from one prompt (tokens (1, T0), every sequence of the cache), steps tokens
// (the prefill's, then steps - 1 decode steps) four ways: gpt2_decode_greedy one step a graph,
// the host reading each step's tokens while the next step runs (gpt2_decode_chosen, as
// infer_gpt2 does) and its logits after; gpt2_decode_greedy as far ahead as the ring keeps (at
// batch 1 graphs of DECODE_GRAPH_STEPS steps where that many remain), nothing else read in
// between, and the last step's logits after; gpt2_decode_step fed the argmax read back at once;
// then the first steps so and greedy ones after them. Returns the first step whose tokens or
// logits (as floats, bit for bit) differ, or -1; *tokens_out (B * steps) the first run's
// tokens, for the caller's own checks.
static int greedy_on_device_mismatch(GPT2 *m, KVCache *cache, const int *prompt, int T0,
                                     int steps, int *tokens_out) {
    int B = cache->B, Vp = cache->Vp;
    size_t token_bytes = (size_t)B * sizeof(int), logit_bytes = (size_t)B * Vp * sizeof(float);
    float *logits = malloc((size_t)steps * B * Vp * sizeof(float));
    float *row = malloc(logit_bytes);
    int *host_fed = malloc(token_bytes);
    if (!logits || !row || !host_fed) {
        fprintf(stderr, "greedy_on_device_mismatch: out of memory\n");
        exit(1);
    }
    gpt2_prefill(m, cache, prompt, 1, T0);
    for (int i = 0; i < steps; i++) {
        // step i + 1 queued (alone in its graph) before step i's tokens are read; its logits after
        if (i + 1 < steps) gpt2_decode_greedy(m, cache, T0 - 1 + i, T0 + i);
        gpt2_decode_chosen(cache, T0 - 1 + i, tokens_out + (size_t)i * B);
        if (i + 1 < steps) gpt2_decode_logits(cache, logits + (size_t)(i + 1) * B * Vp);
    }
    // again with as many steps queued ahead of the host's reads as the ring keeps, in graphs of
    // several steps: the same tokens, and the same logits at the end
    gpt2_prefill(m, cache, prompt, 1, T0);
    int ahead_first = -1;
    for (int i = 0; i < steps; i++) {
        gpt2_decode_greedy(m, cache, T0 - 1 + i, T0 - 2 + steps);
        gpt2_decode_chosen(cache, T0 - 1 + i, host_fed);
        if (ahead_first < 0 && memcmp(host_fed, tokens_out + (size_t)i * B, token_bytes) != 0)
            ahead_first = i;
    }
    if (ahead_first < 0 && steps > 1) {
        gpt2_decode_logits(cache, row);
        if (memcmp(row, logits + (size_t)(steps - 1) * B * Vp, logit_bytes) != 0) ahead_first = steps - 1;
    }
    int first = -1;
    gpt2_prefill(m, cache, prompt, 1, T0);
    for (int i = 0; i < steps && first < 0; i++) {
        if (i > 0) gpt2_decode_step(m, cache, host_fed, T0 + i - 1);
        gpt2_decode_argmax(cache, host_fed);
        if (memcmp(host_fed, tokens_out + (size_t)i * B, token_bytes) != 0) first = i;
        if (i > 0) {
            gpt2_decode_logits(cache, row);
            if (memcmp(row, logits + (size_t)i * B * Vp, logit_bytes) != 0) first = i;
        }
    }
    // host-fed steps, then greedy ones from where they left the cache (the device's position
    // cells set by the host's last step): the same tokens
    int mixed_first = -1, fed = steps < 4 ? steps : 4;
    gpt2_prefill(m, cache, prompt, 1, T0);
    for (int i = 0; i < steps && mixed_first < 0; i++) {
        if (i > 0 && i < fed) gpt2_decode_step(m, cache, host_fed, T0 + i - 1);
        if (i >= fed - 1) {
            gpt2_decode_greedy(m, cache, T0 - 1 + i, T0 - 2 + steps);
            gpt2_decode_chosen(cache, T0 - 1 + i, host_fed);
        } else {
            gpt2_decode_argmax(cache, host_fed);
        }
        if (memcmp(host_fed, tokens_out + (size_t)i * B, token_bytes) != 0) mixed_first = i;
    }
    free(logits);
    free(row);
    free(host_fed);
    int worst = first;
    if (ahead_first >= 0 && (worst < 0 || ahead_first < worst)) worst = ahead_first;
    if (mixed_first >= 0 && (worst < 0 || mixed_first < worst)) worst = mixed_first;
    return worst;
}

#endif
