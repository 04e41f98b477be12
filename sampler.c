// sampler.c: see sampler.h.
#include "sampler.h"

#include <math.h>
#include <stdlib.h>

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}
uint64_t sampler_seed(uint64_t seed, uint64_t stream) {
    return splitmix64(seed ^ splitmix64(stream)) | 1;   // xorshift64* needs a non-zero state
}

float sampler_coin(uint64_t *state) {   // xorshift64*, uniform in [0, 1)
    *state ^= *state >> 12; *state ^= *state << 25; *state ^= *state >> 27;
    return (float)((*state * 0x2545F4914F6CDD1DULL) >> 40) / 16777216.0f;
}

// larger first, the smaller id first among equals (the order greedy decoding uses)
static int before(SampleCandidate a, SampleCandidate b) { return a.value > b.value || (a.value == b.value && a.id < b.id); }
static int compare_candidates(const void *pa, const void *pb) {
    SampleCandidate a = *(const SampleCandidate *)pa, b = *(const SampleCandidate *)pb;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

static int argmax(const float *logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

// the k best of logits (V) into out (k), sorted best first: a min-heap of the best so far,
// whose root (the worst of them) each new logit must beat, O(V log k)
static void top_k(SampleCandidate *out, const float *logits, int V, int k) {
    int n = 0;
    for (int i = 0; i < V; i++) {
        SampleCandidate c = {logits[i], i};
        if (n == k && !before(c, out[0])) continue;
        int hole;
        if (n < k) {   // sift up from the end
            hole = n++;
            while (hole > 0 && before(out[(hole - 1) / 2], c)) {
                out[hole] = out[(hole - 1) / 2];
                hole = (hole - 1) / 2;
            }
        } else {       // replace the root, sift down
            hole = 0;
            for (;;) {
                int child = 2 * hole + 1;
                if (child >= n) break;
                if (child + 1 < n && before(out[child], out[child + 1])) child++;
                if (!before(c, out[child])) break;
                out[hole] = out[child];
                hole = child;
            }
        }
        out[hole] = c;
    }
    qsort(out, n, sizeof(SampleCandidate), compare_candidates);
}

int sample_token(const float *logits, int V, SamplerSettings s, float coin, SampleCandidate *work) {
    if (s.temperature == 0.0f) return argmax(logits, V);
    int n = V, sorted = 0;
    if (s.top_k > 0 && s.top_k < V) {
        top_k(work, logits, V, s.top_k);
        n = s.top_k;
        sorted = 1;
    } else {
        for (int i = 0; i < V; i++) work[i] = (SampleCandidate){logits[i], i};
    }
    float max = sorted ? work[0].value : logits[argmax(logits, V)];
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        work[i].value = expf((work[i].value - max) / s.temperature);
        sum += work[i].value;
    }
    if (s.top_p < 1.0f) {
        if (!sorted) {
            // Tokens below (1 - p) / (n - 1) of the mass cannot be in the nucleus: all n - 1 of
            // them together hold less than 1 - p, so the best tokens reach p before any of them.
            // Dropping them first leaves few to sort.
            double cutoff = (1.0 - s.top_p) / (n - 1) * sum;
            int kept = 0;
            for (int i = 0; i < n; i++)
                if (work[i].value >= cutoff) work[kept++] = work[i];
            n = kept;
            qsort(work, n, sizeof(SampleCandidate), compare_candidates);
        }
        double target = s.top_p * sum, mass = 0.0;
        int last = n - 1;
        for (int i = 0; i < n; i++) {
            mass += work[i].value;
            if (mass >= target) { last = i; break; }
        }
        n = last + 1;
        sum = 0.0;
        for (int i = 0; i < n; i++) sum += work[i].value;
    }
    double target = coin * sum, cdf = 0.0;
    for (int i = 0; i < n; i++) {
        cdf += work[i].value;
        if (target < cdf) return work[i].id;
    }
    return work[n - 1].id;   // rounding at the very end of the CDF
}
