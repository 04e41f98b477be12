// flash.c: causal multi-head attention on the CPU (fp32, OpenMP), FlashAttention-2 style.
//
// Never materialises the (T, T) scores. Forward walks the keys and values block by block
// for one block of queries and keeps, per query row, a running maximum and a running sum of
// exponentials (online softmax), rescaling the output accumulated so far whenever the
// maximum grows. It keeps one logsumexp per row for backward: B*NH*T floats instead of P.
// Backward recomputes each tile of probabilities from Q, K and that logsumexp:
//   P = exp(Q K^T * scale - logsumexp),  dV += P^T dO,  dP = dO V^T,
//   dS = P * (dP - D) with D = rowsum(dO * O) (= rowsum(dP * P), computed once up front),
//   dQ += dS K * scale,  dK += dS^T Q * scale
// Causal: key blocks entirely after a query block are never visited; only the diagonal
// block needs the per-element mask.
//
// The GPU's shared memory becomes the thread's stack, which stays in L1/L2: the blocks of
// Q, K, V, dO a tile needs are copied there contiguous (rows of the packed qkv lie 3*C floats
// apart, a stride at which a block's rows crowd into a few cache sets), K and V also
// transposed, (HS, KEY_BLOCK), so that a row of scores is sum_d q[d] * K^T[d][:], HS rows
// added with weights, rather than KEY_BLOCK dot products that each end in a horizontal sum
// across the vector lanes.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../utils.h"
#include "attention.h"
#include "cpu_kernels.h"

#ifdef BACKEND_CUDA
#error "attention/flash.c is the fp32 CPU backend; the CUDA build uses attention/flash.cu"
#endif

// Tile sizes: query rows per block and key/value rows per block. At HS = 64 one block of K,
// V, Q or dO is 16 KiB, so the tiles of a block pair stay in L1/L2.
#define QUERY_BLOCK 64
#define KEY_BLOCK 64
#define MAX_HEAD_SIZE 128   // bounds the tiles on the stack: 32 KiB each, 192 KiB in backward

const char *const attention_name = "flash";

// saved: logsumexp (B, NH, T) fp32
size_t attention_saved_size(int B, int T, int NH, int HS) {
    return (size_t)B * NH * T * sizeof(float);
}

// scratch: D = rowsum(dO * O) (B, NH, T) fp32, used by backward; forward needs none
size_t attention_scratch_size(int B, int T, int NH, int HS) {
    return (size_t)B * NH * T * sizeof(float);
}

// every sum in a fixed order: dQ is added per key block in order, without atomics, whatever is asked
int attention_set_deterministic(int on) { return 1; }
int attention_deterministic(void) { return 1; }

static inline int min_int(int a, int b) { return a < b ? a : b; }

static void check_head_size(int HS) {
    if (HS > MAX_HEAD_SIZE)
        die("CPU flash attention supports head sizes up to %d, not %d", MAX_HEAD_SIZE, HS);
}

// tile (num_rows, HS) = num_rows rows of HS floats, src_stride apart in src
static void load_tile(float *tile, const float *src, size_t src_stride, int num_rows, int HS) {
    for (int r = 0; r < num_rows; r++)
        memcpy(tile + r * HS, src + r * src_stride, HS * sizeof(float));
}

// tile_t (HS, KEY_BLOCK) = the same rows transposed: tile_t[d * KEY_BLOCK + r] = row r, column d
static void load_tile_transposed(float *tile_t, const float *src, size_t src_stride,
                                 int num_rows, int HS) {
    for (int r = 0; r < num_rows; r++)
        for (int d = 0; d < HS; d++) tile_t[d * KEY_BLOCK + r] = src[r * src_stride + d];
}

// out (B, T, NH, HS), saved = logsumexp (B, NH, T), qkv (B, T, 3, NH, HS); scratch unused
void attention_forward(floatX *out, void *saved, void *scratch, const floatX *qkv,
                       int B, int T, int NH, int HS) {
    check_head_size(HS);
    const int C = NH * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const int num_query_blocks = (T + QUERY_BLOCK - 1) / QUERY_BLOCK;
    float *logsumexp = (float *)saved;

    // Query blocks near the end of the sequence see more keys, hence the dynamic schedule.
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int query_block = 0; query_block < num_query_blocks; query_block++) {
                const int q_start = query_block * QUERY_BLOCK;
                const int q_end = min_int(q_start + QUERY_BLOCK, T);
                float keys_t[MAX_HEAD_SIZE * KEY_BLOCK];   // K block transposed (HS, KEY_BLOCK)
                float values[KEY_BLOCK * MAX_HEAD_SIZE];   // V block (KEY_BLOCK, HS)
                float running_max[QUERY_BLOCK];   // max score seen so far, per query row
                float running_sum[QUERY_BLOCK];   // sum of exp(score - running_max) so far
                float scores[KEY_BLOCK];          // one row of the S (then P) tile

                // The out rows of this (b, h, query block) belong to this iteration alone and
                // are fp32 on the CPU, so they serve as the output accumulator.
                for (int t = q_start; t < q_end; t++) {
                    running_max[t - q_start] = -INFINITY;
                    running_sum[t - q_start] = 0.0f;
                    float *out_row = out + ((size_t)b * T + t) * C + h * HS;
                    memset(out_row, 0, HS * sizeof(*out_row));
                }

                // Key blocks starting after the last query row lie above the diagonal: skipped.
                for (int k_start = 0; k_start < q_end; k_start += KEY_BLOCK) {
                    const int k_end = min_int(k_start + KEY_BLOCK, q_end);
                    const float *key_rows = qkv + ((size_t)b * T + k_start) * 3 * C + C + h * HS;
                    load_tile_transposed(keys_t, key_rows, 3 * C, k_end - k_start, HS);
                    load_tile(values, key_rows + C, 3 * C, k_end - k_start, HS);

                    for (int t = q_start; t < q_end; t++) {
                        const int num_keys = min_int(k_end, t + 1) - k_start;   // causal mask
                        if (num_keys <= 0) continue;
                        const int row = t - q_start;
                        const float *query = qkv + ((size_t)b * T + t) * 3 * C + h * HS;
                        float *out_row = out + ((size_t)b * T + t) * C + h * HS;

                        memset(scores, 0, num_keys * sizeof(float));
                        accumulate_weighted_rows(scores, query, keys_t, KEY_BLOCK, HS, num_keys);
                        float block_max = -INFINITY;
                        for (int j = 0; j < num_keys; j++) {
                            scores[j] *= scale;
                            if (scores[j] > block_max) block_max = scores[j];
                        }
                        // Rescale what was accumulated under the old maximum (the very first
                        // block has running_max = -inf, so the correction is exp(-inf) = 0).
                        const float new_max = fmaxf(running_max[row], block_max);
                        const float correction = expf(running_max[row] - new_max);
                        for (int i = 0; i < HS; i++) out_row[i] *= correction;
                        float block_sum = 0.0f;
                        #pragma omp simd reduction(+ : block_sum)
                        for (int j = 0; j < num_keys; j++) {
                            scores[j] = expf_vectorizable(scores[j] - new_max);
                            block_sum += scores[j];
                        }
                        accumulate_weighted_rows(out_row, scores, values, HS, num_keys, HS);
                        running_sum[row] = running_sum[row] * correction + block_sum;
                        running_max[row] = new_max;
                    }
                }

                for (int t = q_start; t < q_end; t++) {
                    const int row = t - q_start;
                    float *out_row = out + ((size_t)b * T + t) * C + h * HS;
                    const float inv_sum = 1.0f / running_sum[row];
                    for (int i = 0; i < HS; i++) out_row[i] *= inv_sum;
                    logsumexp[((size_t)b * NH + h) * T + t] =
                        running_max[row] + logf(running_sum[row]);
                }
            }
        }
    }
}

// dqkv (B, T, 3, NH, HS) overwritten, scratch: D (B, NH, T), dout (B, T, NH, HS),
// qkv (B, T, 3, NH, HS), out (B, T, NH, HS), saved = logsumexp (B, NH, T)
void attention_backward(floatX *dqkv, void *scratch, const floatX *dout, const floatX *qkv,
                        const floatX *out, const void *saved, int B, int T, int NH, int HS) {
    check_head_size(HS);
    const int C = NH * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const float *logsumexp = (const float *)saved;
    float *dout_dot_out = (float *)scratch;   // D

    // D[t] = dO_t . O_t, which equals rowsum(dP * P) of the softmax backward because
    // O_t = sum_s P[t, s] v_s and dP[t, s] = dO_t . v_s.
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const size_t row = ((size_t)b * T + t) * C + h * HS;
                float sum = 0.0f;
                #pragma omp simd reduction(+ : sum)
                for (int i = 0; i < HS; i++) sum += dout[row + i] * out[row + i];
                dout_dot_out[((size_t)b * NH + h) * T + t] = sum;
            }
        }
    }

    // Key/value blocks outer, query blocks inner (as FlashAttention-2): dK and dV of a key
    // block are complete after one sweep over the queries, with K and V staying in cache,
    // while Q, dO and dQ stream past; the other order would stream and re-write both dK and
    // dV instead of dQ alone. dQ sums over key blocks, so one thread owns a whole (b, h) and
    // adds into dQ without atomics, which also keeps the gradients bitwise reproducible.
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *logsumexp_bh = logsumexp + ((size_t)b * NH + h) * T;
            const float *dout_dot_out_bh = dout_dot_out + ((size_t)b * NH + h) * T;
            float keys_t[MAX_HEAD_SIZE * KEY_BLOCK];     // K block transposed (HS, KEY_BLOCK)
            float values_t[MAX_HEAD_SIZE * KEY_BLOCK];   // V block transposed (HS, KEY_BLOCK)
            float keys[KEY_BLOCK * MAX_HEAD_SIZE];       // K block (KEY_BLOCK, HS)
            float queries[QUERY_BLOCK * MAX_HEAD_SIZE];  // Q block (QUERY_BLOCK, HS)
            float douts[QUERY_BLOCK * MAX_HEAD_SIZE];    // dO block (QUERY_BLOCK, HS)
            // the P and dS tiles, transposed (KEY_BLOCK, QUERY_BLOCK) for dV and dK
            float probs_t[KEY_BLOCK * QUERY_BLOCK];
            float dscores_t[KEY_BLOCK * QUERY_BLOCK];
            float probs[KEY_BLOCK];     // one row of P
            float dscores[KEY_BLOCK];   // one row of dP, then of dS

            for (int t = 0; t < T; t++) {
                float *dqkv_t = dqkv + ((size_t)b * T + t) * 3 * C + h * HS;
                memset(dqkv_t, 0, HS * sizeof(*dqkv_t));           // dq_t
                memset(dqkv_t + C, 0, HS * sizeof(*dqkv_t));       // dk_t
                memset(dqkv_t + 2 * C, 0, HS * sizeof(*dqkv_t));   // dv_t
            }

            for (int k_start = 0; k_start < T; k_start += KEY_BLOCK) {
                const int k_end = min_int(k_start + KEY_BLOCK, T);
                const int block_keys = k_end - k_start;
                const float *key_rows = qkv + ((size_t)b * T + k_start) * 3 * C + C + h * HS;
                load_tile_transposed(keys_t, key_rows, 3 * C, block_keys, HS);
                load_tile_transposed(values_t, key_rows + C, 3 * C, block_keys, HS);
                load_tile(keys, key_rows, 3 * C, block_keys, HS);

                // Query blocks ending before k_start lie above the diagonal: skipped.
                for (int q_start = k_start / QUERY_BLOCK * QUERY_BLOCK; q_start < T;
                     q_start += QUERY_BLOCK) {
                    const int q_end = min_int(q_start + QUERY_BLOCK, T);
                    const int block_queries = q_end - q_start;
                    load_tile(queries, qkv + ((size_t)b * T + q_start) * 3 * C + h * HS, 3 * C,
                              block_queries, HS);
                    load_tile(douts, dout + ((size_t)b * T + q_start) * C + h * HS, C,
                              block_queries, HS);

                    for (int row = 0; row < block_queries; row++) {
                        const int t = q_start + row;
                        const int num_keys = min_int(k_end, t + 1) - k_start;   // causal mask
                        const float *query = queries + row * HS;
                        const float *dout_row = douts + row * HS;
                        if (num_keys > 0) {
                            memset(probs, 0, num_keys * sizeof(float));
                            accumulate_weighted_rows(probs, query, keys_t, KEY_BLOCK, HS, num_keys);
                            for (int j = 0; j < num_keys; j++)
                                probs[j] = expf_vectorizable(probs[j] * scale - logsumexp_bh[t]);
                            memset(dscores, 0, num_keys * sizeof(float));
                            accumulate_weighted_rows(dscores, dout_row, values_t, KEY_BLOCK, HS,
                                                     num_keys);
                            // dS[t, s], with the scale of S = Q K^T * scale folded in
                            for (int j = 0; j < num_keys; j++)
                                dscores[j] = probs[j] * (dscores[j] - dout_dot_out_bh[t]) * scale;
                            float *dquery = dqkv + ((size_t)b * T + t) * 3 * C + h * HS;
                            accumulate_weighted_rows(dquery, dscores, keys, HS, num_keys, HS);
                        }
                        for (int j = 0; j < block_keys; j++) {   // masked entries are 0
                            probs_t[j * QUERY_BLOCK + row] = j < num_keys ? probs[j] : 0.0f;
                            dscores_t[j * QUERY_BLOCK + row] = j < num_keys ? dscores[j] : 0.0f;
                        }
                    }

                    // dV_s += sum_t P[t, s] dO_t and dK_s += sum_t dS[t, s] q_t over this block
                    for (int j = 0; j < block_keys; j++) {
                        float *dkey = dqkv + ((size_t)b * T + k_start + j) * 3 * C + C + h * HS;
                        float *dvalue = dkey + C;
                        accumulate_weighted_rows(dvalue, probs_t + j * QUERY_BLOCK, douts, HS,
                                                 block_queries, HS);
                        accumulate_weighted_rows(dkey, dscores_t + j * QUERY_BLOCK, queries, HS,
                                                 block_queries, HS);
                    }
                }
            }
        }
    }
}
