// decode_reference.h: the double-precision reference of attention_decode, shared by the CPU
// (tests/test_infer.c) and GPU (tests/gpu/test_infer_gpu.c) tests of generation.
#ifndef DECODE_REFERENCE_H
#define DECODE_REFERENCE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

// out (B, NH, HS) = softmax(q k^T / sqrt(HS)) v over positions 0..len-1, summed in double and
// rounded to fp32 once; q (B, NH, HS), kc and vc (B, maxT, NH, HS)
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
                    dot += (double)q[b * C + h * HS + i] * kc[((size_t)b * maxT + s) * C + h * HS + i];
                scores[s] = dot / sqrt((double)HS);
                if (scores[s] > max) max = scores[s];
            }
            for (int s = 0; s < len; s++) sum += (scores[s] = exp(scores[s] - max));
            for (int i = 0; i < HS; i++) {
                double acc = 0.0;
                for (int s = 0; s < len; s++) acc += scores[s] * vc[((size_t)b * maxT + s) * C + h * HS + i];
                out[b * C + h * HS + i] = (float)(acc / sum);
            }
        }
    }
    free(scores);
}

#endif
