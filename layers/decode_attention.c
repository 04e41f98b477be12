// decode_attention.c: generation's attention on the CPU (fp32, OpenMP): one new query per
// sequence against the KV cache, and the writes of new keys and values into the cache.
//
// attention_decode is a single pass of online softmax over the cached positions: a running
// maximum m and sum l of exp(score - m), the output accumulated under m and rescaled when m
// grows, divided by l at the end. The cache is never copied and no (len) buffer is needed.
#include <math.h>
#include <string.h>

#include "../utils.h"
#include "layers.h"

// a (n) . b (n); the simd reduction lets the compiler vectorise the sum without -ffast-math
static inline float dot(const float *a, const float *b, int n) {
    float sum = 0.0f;
    #pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++) sum += a[i] * b[i];
    return sum;
}

size_t attention_decode_scratch_size(int B, int maxT, int NH, int HS) { return 0; }

// out (B, NH, HS), q row b at q + b * q_stride; kcache, vcache (B, NH, maxT, HS), positions
// 0..len-1 read
static void decode(floatX *out, const floatX *q, size_t q_stride, const floatX *kcache,
                   const floatX *vcache, int B, int len, int maxT, int NH, int HS) {
    if (len < 1 || len > maxT) die("attention_decode: length %d outside [1, %d]", len, maxT);
    const int C = NH * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *query = q + (size_t)b * q_stride + h * HS;
            float *o = out + (size_t)b * C + h * HS;
            memset(o, 0, HS * sizeof(*o));
            float running_max = -INFINITY, running_sum = 0.0f;
            const size_t head = KV_CACHE_AT(b, h, 0, maxT, NH, HS);
            for (int s = 0; s < len; s++) {
                const size_t row = head + (size_t)s * HS;
                const float score = dot(query, kcache + row, HS) * scale;
                if (score > running_max) {   // rescale what was summed under the old maximum
                    const float correction = expf(running_max - score);   // exp(-inf) = 0
                    running_sum *= correction;
                    for (int i = 0; i < HS; i++) o[i] *= correction;
                    running_max = score;
                }
                const float p = expf(score - running_max);
                running_sum += p;
                const float *value = vcache + row;
                #pragma omp simd
                for (int i = 0; i < HS; i++) o[i] += p * value[i];
            }
            const float inv_sum = 1.0f / running_sum;
            for (int i = 0; i < HS; i++) o[i] *= inv_sum;
        }
    }
}

void attention_decode(floatX *out, void *scratch, const floatX *q, const floatX *kcache,
                      const floatX *vcache, int B, int len, int maxT, int NH, int HS) {
    decode(out, q, (size_t)NH * HS, kcache, vcache, B, len, maxT, NH, HS);
}

// kcache, vcache (B, NH, maxT, HS) positions pos..pos+T-1 = k, v of qkv (B, T, 3, NH, HS)
void kv_cache_store(floatX *kcache, floatX *vcache, const floatX *qkv, const int *pos, int B,
                    int T, int maxT, int NH, int HS) {
    const int start = *pos, C = NH * HS;
    if (start < 0 || start + T > maxT)
        die("kv_cache_store: positions %d..%d outside a cache of %d", start, start + T - 1, maxT);
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const floatX *src = qkv + ((size_t)b * T + t) * 3 * C;
            for (int h = 0; h < NH; h++) {
                const size_t dst = KV_CACHE_AT(b, h, start + t, maxT, NH, HS);
                memcpy(kcache + dst, src + C + h * HS, HS * sizeof(floatX));
                memcpy(vcache + dst, src + 2 * C + h * HS, HS * sizeof(floatX));
            }
        }
    }
}

// the new k, v of qkv (B, 3, NH, HS) into the cache at *pos (pos in "device" memory, which on
// the CPU is host memory), then the query (strided in qkv) against positions 0..pos
void attention_decode_step(floatX *out, void *scratch, const floatX *qkv, floatX *kcache,
                           floatX *vcache, const int *pos, int B, int beside, int maxT, int NH,
                           int HS) {
    kv_cache_store(kcache, vcache, qkv, pos, B, 1, maxT, NH, HS);
    decode(out, qkv, (size_t)3 * NH * HS, kcache, vcache, B, *pos + 1, maxT, NH, HS);
}
