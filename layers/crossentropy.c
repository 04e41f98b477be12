// crossentropy.c: softmax over the vocabulary fused with the cross-entropy loss and, when
// asked, its gradient, written over the logits so the (N,Vp) probabilities never need their
// own buffer.
#include "layers.h"
#include "../utils.h"

#include <math.h>

// logits (N,Vp) in/out, losses (N), targets (N); only the first V columns are real
void crossentropy_forward_backward(floatX *logits, float *losses, const int *targets,
                                   int N, int V, int Vp, float dloss) {
    for (int i = 0; i < N; i++) {
        if (targets[i] < 0 || targets[i] >= V) {
            die("crossentropy: target %d of row %d is outside the vocabulary [0, %d)",
                targets[i], i, V);
        }
    }
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float *row = logits + (size_t)i * Vp;
        int target = targets[i];
        float maxval = -INFINITY;
        for (int j = 0; j < V; j++) maxval = row[j] > maxval ? row[j] : maxval;
        float target_logit = row[target];
        // the sum of V exponentials is accumulated in double so large vocabularies lose nothing
        double sum = 0.0;
        if (dloss != 0.0f) {
            for (int j = 0; j < V; j++) {
                row[j] = expf(row[j] - maxval);
                sum += row[j];
            }
            float scale = dloss / (float)sum;
            for (int j = 0; j < V; j++) row[j] *= scale;
            row[target] -= dloss;
            for (int j = V; j < Vp; j++) row[j] = 0.0f;
        } else {
            for (int j = 0; j < V; j++) sum += expf(row[j] - maxval);
        }
        losses[i] = (float)log(sum) - (target_logit - maxval);
    }
}

// mean (1), sum (1) or NULL, losses (N)
void crossentropy_loss_mean(float *mean, float *sum, const float *losses, int N) {
    double total = 0.0;
    for (int i = 0; i < N; i++) total += losses[i];
    *mean = (float)(total / N);
    if (sum) *sum += *mean;
}
