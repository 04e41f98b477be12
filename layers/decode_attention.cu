// decode_attention.cu: generation's attention on CUDA: one new query per sequence against the
// KV cache (flash-decoding), and the writes of new keys and values into the cache.
//
// At batch 1 a decode step has only NH queries, far too few blocks for the GPU if each (b, h)
// were one block reading the whole cache. Flash-decoding splits the cache length into
// `splits` parts of split_len positions, one block each, block (split, h, b): over its
// positions s, online softmax in the exp2 domain, score_s = q . k_s * scale * log2(e); its
// partial result is (m = max score, l = sum 2^(score - m), acc = sum 2^(score - m) v_s). The
// last block of a head to finish (a counter per head in the scratch elects it) combines them:
// M = max m_i, L = sum l_i 2^(m_i - M), out = sum acc_i 2^(m_i - M) / L, over the splits that
// hold positions (combine_splits); a length that fits in one split is
// written by its block directly. One kernel, not a split kernel and a combine kernel: at batch
// 1 every kernel boundary costs more than the combine's work. (In the decode step at batch 1 on
// Hopper neither runs: decode_layers_sm90.cu computes a head's q, k, v and its attention in one
// cluster of CTAs.)
// Inside a block, a group of G = HS/8 (rounded up to a power of two) lanes handles a cache row,
// each lane 8 channels through one 16-byte load of k and one of v, ROWS rows per round with
// all their loads in flight together; each group keeps its own (m, l, acc), merged at the end
// by warp shuffles, then the warps' through shared memory. bf16 storage, fp32 math.
//
// The decode step's call (attention_decode_step) also takes the new token's k and v from qkv
// and writes them into the cache: the block whose split holds the new position reads that row
// from qkv instead of the cache (and stores it there), so no kernel runs before it to copy
// them. It is launched with PDL: the first round of cache rows (written by earlier steps, never
// by the kernel before) is loaded before pdl_wait, the query and the new row after.
//
// The layout (split_len, splits) depends on the span the cache may hold (len for
// attention_decode, maxT for attention_decode_step): enough blocks to cover the SMs twice
// (kBlocksPerSM), at least kMinSplitKeys positions each. Blocks past len return at once, so one layout
// serves every position of a CUDA graph. Partial results and the counters live in the caller's
// scratch (attention_decode_scratch_size), sized for the longest span, maxT.
#include <math.h>

#include "../attention/flash_tile.cuh"   // kLog2e, SoftmaxRow: the attention kernels' vocabulary
#include "../runtime/cuda_common.cuh"
#include "decode_attention.cuh"
#include "layers.h"

namespace {

// A record per split: acc (HS floats, sum of 2^(score - m) v over the split's positions), then
// m (the split's largest score, exp2 domain) and l (sum of 2^(score - m)), padded to HS + 4
// floats so that every record starts 16-byte aligned. Records of head (b, h): splits of them
// at records + ((b * NH + h) * splits) * record_floats(HS); the first `used` hold positions.
__host__ __device__ constexpr int record_floats(int HS) { return HS + 4; }

// splits of a head that hold positions, for a cache of len positions
__device__ __forceinline__ int used_splits(int len, int split_len) {
    return (len + split_len - 1) / split_len;
}

// The attention output at channel e of the head whose first record is `head`, from its `used`
// records: (M, L, sum) merged as the online softmax merges rows, 8 records at a time with all
// their loads in flight (one L2 round trip per 8 splits). The records' m are finite (a used
// split holds a position), so M is finite after the first chunk.
__device__ __forceinline__ float combine_splits(const float *head, int used, int HS, int e) {
    constexpr int kChunk = 8;
    const int stride = record_floats(HS);
    float M = -INFINITY, L = 0.0f, sum = 0.0f;
    SoftmaxRow merged{M, L};
    for (int i0 = 0; i0 < used; i0 += kChunk) {
        float m_i[kChunk], l_i[kChunk], acc_i[kChunk];
#pragma unroll
        for (int j = 0; j < kChunk; j++) {
            const float *r = head + (size_t)(i0 + j) * stride;
            const bool in = i0 + j < used;
            float2 ml = make_float2(-INFINITY, 0.0f);
            if (in) ml = __ldcg(reinterpret_cast<const float2 *>(r + HS));
            m_i[j] = ml.x;
            l_i[j] = ml.y;
            acc_i[j] = in ? __ldcg(r + e) : 0.0f;
        }
        float m_new = M;
#pragma unroll
        for (int j = 0; j < kChunk; j++) m_new = fmaxf(m_new, m_i[j]);
        const float correction = merged.update(m_new);   // 0 at the first chunk
        L *= correction;
        sum *= correction;
#pragma unroll
        for (int j = 0; j < kChunk; j++) {
            const float w_j = exp2f(m_i[j] - m_new);   // 0 past `used`
            L += l_i[j] * w_j;
            sum += acc_i[j] * w_j;
        }
    }
    return sum / L;
}

constexpr int kSplitThreads = 128;
constexpr int kMinSplitKeys = 64;    // positions per split at least: one round at HS = 64
// Blocks wanted an SM where B*NH alone is too few (the splits of a head: decode_layout). 2, half
// of what the split kernel holds resident (4 an SM): batch 9-40 decodes 1.5-6% faster than with
// 4 and batch 1-8 level, while 1 costs batch 1 3% after 1,000 tokens (docs/PERF.md,
// twenty-fourth session, call 2). With 2, GPT-2 124M's heads are one block each from batch 22
// (4 made two splits up to batch 43), and two or three splits at 9-16 rows (4: three to five):
// fewer, longer splits, and room on the SMs for the next kernel's blocks to load their weights.
// Build with -DDECODE_BLOCKS_PER_SM=N to time another.
#ifndef DECODE_BLOCKS_PER_SM
#define DECODE_BLOCKS_PER_SM 2
#endif
constexpr int kBlocksPerSM = DECODE_BLOCKS_PER_SM;

struct DecodeArgs {
    bf16 *out;                        // (B, NH, HS)
    float *partial;                   // (B, NH, splits, record_floats(HS)): the records above
    unsigned *counters;               // (B, NH): splits done, reset to 0 by the combining block
    const bf16 *q;                    // row b at q + b * q_stride
    bf16 *kcache, *vcache;            // (B, NH, maxT, HS)
    const bf16 *new_k, *new_v;        // the step's new row b at new_k + b * q_stride, or null
    const int *pos_dev;               // the step's position (len = pos + 1), or null: len_host
    int len_host, q_stride, maxT, NH, HS, split_len, splits;
    float scale_log2;
};

// G lanes per cache row, 8 channels each; ROWS cache rows per group per round, loaded at once.
// ROWS = 4 (128 registers, 4 blocks an SM) where a head is split: the rows of a split are few,
// and more in flight at once shortens it. ROWS = 2 (80 registers, 6 blocks an SM) where each
// head is one block (B*NH blocks, batch 64 in one call: 768): then what counts is that every
// block is resident at once, one wave (792 on 132 SMs) and no tail (4% faster at batch 64 in one
// part, 2% slower at batch 1 if used there; docs/PERF.md). But ROWS = 4 at one block a head too
// where the call is a part of a batch (decode_layers_step's `beside`: the other parts' rows,
// running at once), its blocks fit one wave at 4 an SM, and with one block for each head of the
// other parts all fit one wave at 6: the batch-64 step's two parts of 32 rows (384 + 384 heads).
// Measured there +3.7% (153.3K tokens/s against 147.8K); the same call in three parts (batch 96)
// level and in four (128) 2% slower, so those keep 2 rows (docs/PERF.md, thirty-first session).
// For GPT-2 124M on 132 SMs the rule also takes the two parts of batch 49-63 and the 22-row parts
// of batch 65-66's three, unmeasured; a call that is not a part keeps the rows it had. Why, from
// the timeline: with 4 rows the first part's blocks take the SMs first and its attention ends
// about 7 us before the second's, so its matmuls start while the second part's attention streams
// the cache, where with 2 rows both ended together and the matmuls of both ran with the cache
// idle; with more parts the blocks past one wave cost more.
// Not held to fewer registers (72, so that the output projection's CTAs fit beside the 2-row
// kernel's blocks and load their weights while it runs: the step measured 3.4% slower, twenty-third
// session).
constexpr int kRows4PerSM = 4, kRows2PerSM = 6;
template <int G, int ROWS>
__global__ void __launch_bounds__(kSplitThreads, ROWS == 2 ? kRows2PerSM : 1) decode_kernel(const DecodeArgs a) {
    // Stages (the comment at the top of the file): the first round of cache rows (before
    // pdl_wait); q; per round (the next loading): scores, SoftmaxRow::update, acc += p v; the
    // groups merged by warp shuffles, then the warps' in shared memory; one split: out;
    // several: the split's record, and the last split of the head to finish combines the
    // records into out
    constexpr int kRows = ROWS;
    constexpr int kGroups = kSplitThreads / G;    // groups per block
    constexpr int kWarpGroups = 32 / G;           // groups per warp
    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    // the position and the cache's rows before it may be read before pdl_wait: the step's cell
    // was written before its graph began, and the rows by steps whose layers were done before the
    // step began (the LM head before it lets nothing start before its own wait: layers.h)
    const int len = a.pos_dev ? *a.pos_dev + 1 : a.len_host;
    const int new_pos = a.new_k ? len - 1 : -1;   // the row that comes from qkv
    const int start = split * a.split_len;
    const int end = min(start + a.split_len, len);
    const int HS = a.HS;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int member = lane % G;
    const int group = warp * kWarpGroups + lane / G;
    const bool active = member * 8 < HS;   // lanes past HS (HS/8 not a power of two) idle
    const size_t head = KV_CACHE_AT(b, h, 0, a.maxT, a.NH, HS) + member * 8;   // + s * HS: position s

    // A round: group g takes rows base + r * kGroups + g, r < kRows. All 2 * kRows loads of a
    // round are issued together, so one memory latency covers kRows rows.
    // The new token's row is not in the cache yet: a round loaded after the wait takes it from
    // qkv (new_k, new_v) with the round's other rows, so that a long span's last round waits for
    // no extra round trip; the first round, loaded before the wait, fetches it in the loop below.
    int4 k_raw[kRows], v_raw[kRows];
    const size_t new_src = (size_t)b * a.q_stride + h * HS + member * 8;
    auto load_round = [&](int base, bool after_wait) {
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const int s = base + r * kGroups + group;
            k_raw[r] = v_raw[r] = make_int4(0, 0, 0, 0);
            if (s < end && active) {
                const bool fresh = after_wait && s == new_pos;
                k_raw[r] = fresh ? __ldcg(reinterpret_cast<const int4 *>(a.new_k + new_src))
                                 : *reinterpret_cast<const int4 *>(a.kcache + head + (size_t)s * HS);
                v_raw[r] = fresh ? __ldcg(reinterpret_cast<const int4 *>(a.new_v + new_src))
                                 : *reinterpret_cast<const int4 *>(a.vcache + head + (size_t)s * HS);
            }
        }
    };
    if (start < end) load_round(start, false);   // before the wait: the cache is not the last kernel's
    pdl_launch_dependents();
    pdl_wait();
    if (start >= end) return;   // past len: nothing to do (after the wait, as PDL wants)

    float qv[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (active) {
        const int4 raw = __ldcg(reinterpret_cast<const int4 *>(a.q + (size_t)b * a.q_stride + h * HS + member * 8));
        unpack_bf16<8>(qv, raw);
#pragma unroll
        for (int i = 0; i < 8; i++) qv[i] *= a.scale_log2;
    }
    // the group's row of the online softmax (decode_round)
    float running_max = -INFINITY, running_sum = 0.0f;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};

    // The loop is block-uniform (the shuffles need every lane); rows past `end` weigh nothing.
    // The next round's loads are issued before this round's math (software pipelining), so a
    // long span (batch 64: one split of up to maxT rows per head) waits for one memory latency,
    // not one per round.
    constexpr int kRound = kGroups * kRows;
    for (int base = start; base < end; base += kRound) {
        int4 k_cur[kRows], v_cur[kRows];
#pragma unroll
        for (int r = 0; r < kRows; r++) { k_cur[r] = k_raw[r]; v_cur[r] = v_raw[r]; }
        if (base + kRound < end) load_round(base + kRound, true);
        bool valid[kRows];
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const int s = base + r * kGroups + group;
            valid[r] = s < end;
            // the new token: from qkv, and into the cache, by the split that holds it (a round
            // may reach past the split's end, into the next split's rows, where split_len is not
            // a multiple of kRound: those rows are invalid here and must not be stored)
            if (valid[r] && s == new_pos && active) {
                if (base == start) {   // the first round, loaded before the wait
                    k_cur[r] = __ldcg(reinterpret_cast<const int4 *>(a.new_k + new_src));
                    v_cur[r] = __ldcg(reinterpret_cast<const int4 *>(a.new_v + new_src));
                }
                *reinterpret_cast<int4 *>(a.kcache + head + (size_t)s * HS) = k_cur[r];
                *reinterpret_cast<int4 *>(a.vcache + head + (size_t)s * HS) = v_cur[r];
            }
        }
        decode_round<G, kRows>(qv, k_cur, v_cur, valid, running_max, running_sum, acc);
    }

    // merge the groups, first a warp's (then the warps' below)
    const float warp_max = merge_warp_groups<G>(running_max, running_sum, acc);
    const float warp_sum = running_sum;
    // then the block's, from the warps' (m, l, acc) in shared memory: thread e < HS sums
    // channel e, each thread the same M and L (4 values each)
    constexpr int kWarps = kSplitThreads / 32;
    __shared__ float warp_m[kWarps], warp_l[kWarps], warp_acc[kWarps][G * 8];
    __shared__ bool combines;
    if (lane < G) {
        if (lane == 0) { warp_m[warp] = warp_max; warp_l[warp] = warp_sum; }
#pragma unroll
        for (int i = 0; i < 8; i++) warp_acc[warp][member * 8 + i] = acc[i];
    }
    __syncthreads();
    float block_max = -INFINITY, block_sum = 0.0f, weight[kWarps];
#pragma unroll
    for (int k = 0; k < kWarps; k++) block_max = fmaxf(block_max, warp_m[k]);
#pragma unroll
    for (int k = 0; k < kWarps; k++) {
        weight[k] = warp_m[k] == -INFINITY ? 0.0f : exp2f(warp_m[k] - block_max);
        block_sum += warp_l[k] * weight[k];
    }
    auto block_acc = [&](int e) {
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < kWarps; k++) sum += warp_acc[k][e] * weight[k];
        return sum;
    };
    const size_t bh = (size_t)b * a.NH + h;
    bf16 *out = a.out + bh * HS;
    const int used = used_splits(len, a.split_len);   // splits that hold positions
    if (used == 1) {   // the whole length in this block: out, no combine
        const float inv_l = 1.0f / block_sum;
        for (int e = threadIdx.x; e < HS; e += kSplitThreads)
            out[e] = __float2bfloat16_rn(block_acc(e) * inv_l);
        return;
    }
    const float *records = a.partial + bh * a.splits * record_floats(HS);
    float *record = a.partial + (bh * a.splits + split) * record_floats(HS);
    for (int e = threadIdx.x; e < HS; e += kSplitThreads) record[e] = block_acc(e);
    if (threadIdx.x == 0) {
        record[HS] = block_max;
        record[HS + 1] = block_sum;
    }
    // The last of the head's used splits to get here combines (runtime/cuda_common.cuh's
    // last-block pattern), reading the others' records through L2 (they were written on other
    // SMs).
    __syncthreads();
    if (threadIdx.x == 0) {
        combines = atomic_add_acq_rel(a.counters + bh, 1u) == (unsigned)used - 1;
        if (combines) a.counters[bh] = 0;   // for the next call (stream-ordered after this kernel)
    }
    __syncthreads();
    if (!combines) return;
    for (int e = threadIdx.x; e < HS; e += kSplitThreads)
        out[e] = __float2bfloat16_rn(combine_splits(records, used, HS, e));
}

// the most splits of a span for B*NH heads: enough blocks to cover the SMs kBlocksPerSM
// times, at least kMinSplitKeys positions each. It never decreases with span.
int max_splits(int B, int NH, int span) {
    const int wanted = ceil_div((long)kBlocksPerSM * cuda_num_sms, (long)B * NH);
    const int most = ceil_div(span, kMinSplitKeys);
    return wanted < 1 ? 1 : wanted > most ? most : wanted;
}

// splits of the span [0, span) for B*NH heads: (split_len, splits), splits <= max_splits
void decode_layout(int B, int NH, int span, int *split_len, int *splits) {
    const int n = max_splits(B, NH, span);
    *split_len = ceil_div(ceil_div(span, n), 16) * 16;
    *splits = ceil_div(span, *split_len);
}

// the scratch: a counter per head (rounded up to 256 bytes), then the partial records
size_t counters_bytes(int B, int NH) { return (size_t)ceil_div((long)B * NH * sizeof(unsigned), 256) * 256; }

template <int ROWS>
void launch_groups(dim3 grid, int groups, const DecodeArgs &a) {
    if (groups <= 1) launch_pdl(decode_kernel<1, ROWS>, grid, kSplitThreads, 0, a);
    else if (groups <= 2) launch_pdl(decode_kernel<2, ROWS>, grid, kSplitThreads, 0, a);
    else if (groups <= 4) launch_pdl(decode_kernel<4, ROWS>, grid, kSplitThreads, 0, a);
    else if (groups <= 8) launch_pdl(decode_kernel<8, ROWS>, grid, kSplitThreads, 0, a);
    else if (groups <= 16) launch_pdl(decode_kernel<16, ROWS>, grid, kSplitThreads, 0, a);
    else launch_pdl(decode_kernel<32, ROWS>, grid, kSplitThreads, 0, a);
}

// a's q, caches, new row and length filled in by the caller; the layout, scratch and launch here
void decode(DecodeArgs a, floatX *out, void *scratch, int span, int B, int beside) {
    const int HS = a.HS, NH = a.NH;
    if (HS % 8 != 0 || HS > 256 || !is_aligned16(a.q) || !is_aligned16(a.kcache) ||
        !is_aligned16(a.vcache) || a.q_stride % 8 != 0)
        die("attention_decode needs a head size that is a multiple of 8, at most 256 (got %d), "
            "and 16-byte aligned q and caches", HS);
    decode_layout(B, NH, span, &a.split_len, &a.splits);
    a.out = BF(out);
    a.counters = (unsigned *)scratch;
    a.partial = (float *)((char *)scratch + counters_bytes(B, NH));
    a.scale_log2 = kLog2e / sqrtf((float)HS);
    const dim3 grid(a.splits, NH, B);
    const int groups = HS / 8;   // lanes per row, rounded up to a power of two below
    const long blocks = (long)a.splits * NH * B, beside_heads = (long)beside * NH;
    if (a.splits > 1 || (beside > 0 && blocks <= (long)kRows4PerSM * cuda_num_sms &&
                         blocks + beside_heads <= (long)kRows2PerSM * cuda_num_sms))
        launch_groups<4>(grid, groups, a);
    else
        launch_groups<2>(grid, groups, a);
    LAUNCH_CHECK();
}

// kcache, vcache position pos + t of sequence b = k, v of qkv row (b, t); one thread per VEC
// channels
template <int VEC>
__global__ void kv_cache_store_kernel(bf16 *__restrict__ kcache, bf16 *__restrict__ vcache,
                                      const bf16 *__restrict__ qkv, const int *__restrict__ pos,
                                      int B, int T, int maxT, int NH, int HS) {
    const int C = NH * HS, nvec = C / VEC;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * nvec) return;
    const int c = (int)(idx % nvec) * VEC;
    const size_t bt = idx / nvec;
    const int t = (int)(bt % T), b = (int)(bt / T);
    const int p = *pos + t;
    if (p < 0 || p >= maxT) return;   // the caller checked; never write outside the cache
    const bf16 *src = qkv + bt * 3 * C + c;
    const size_t dst = KV_CACHE_AT(b, c / HS, p, maxT, NH, HS) + c % HS;   // VEC divides HS
    float x[VEC];
    load_bf16<VEC>(x, src + C);
    store_bf16<VEC>(kcache + dst, x);
    load_bf16<VEC>(x, src + 2 * C);
    store_bf16<VEC>(vcache + dst, x);
}

}  // namespace

// counters, then splits <= max_splits(maxT) records per head for every span <= maxT
size_t attention_decode_scratch_size(int B, int maxT, int NH, int HS) {
    ensure_backend();
    return counters_bytes(B, NH) + (size_t)B * NH * max_splits(B, NH, maxT) * record_floats(HS) * sizeof(float);
}

void attention_decode(floatX *out, void *scratch, const floatX *q, const floatX *kcache,
                      const floatX *vcache, int B, int len, int maxT, int NH, int HS) {
    if (len < 1 || len > maxT) die("attention_decode: length %d outside [1, %d]", len, maxT);
    DecodeArgs a = {};
    a.q = CBF(q);
    a.kcache = const_cast<bf16 *>(CBF(kcache));   // read only: no new row to store
    a.vcache = const_cast<bf16 *>(CBF(vcache));
    a.len_host = len;
    a.q_stride = NH * HS;
    a.maxT = maxT;
    a.NH = NH;
    a.HS = HS;
    decode(a, out, scratch, len, B, 0);
}

// the decode step's arguments: q and the new k, v from qkv, the position from pos
static DecodeArgs step_args(const floatX *qkv, floatX *kcache, floatX *vcache, const int *pos,
                            int maxT, int NH, int HS) {
    const int C = NH * HS;
    DecodeArgs a = {};
    a.q = CBF(qkv);
    a.new_k = CBF(qkv) + C;
    a.new_v = CBF(qkv) + 2 * C;
    a.kcache = BF(kcache);
    a.vcache = BF(vcache);
    a.pos_dev = pos;
    a.q_stride = 3 * C;
    a.maxT = maxT;
    a.NH = NH;
    a.HS = HS;
    return a;
}

void attention_decode_step(floatX *out, void *scratch, const floatX *qkv, floatX *kcache,
                           floatX *vcache, const int *pos, int B, int beside, int maxT, int NH,
                           int HS) {
    decode(step_args(qkv, kcache, vcache, pos, maxT, NH, HS), out, scratch, maxT, B, beside);
}

void kv_cache_store(floatX *kcache, floatX *vcache, const floatX *qkv, const int *pos, int B,
                    int T, int maxT, int NH, int HS) {
    const int C = NH * HS, threads = 256;
    const size_t rows = (size_t)B * T;
    if (rows == 0) return;
    if (HS % 8 == 0 && is_aligned16(kcache) && is_aligned16(vcache) && is_aligned16(qkv))
        kv_cache_store_kernel<8><<<ceil_div(rows * (C / 8), threads), threads, 0, cuda_stream>>>(
            BF(kcache), BF(vcache), CBF(qkv), pos, B, T, maxT, NH, HS);
    else
        kv_cache_store_kernel<1><<<ceil_div(rows * C, threads), threads, 0, cuda_stream>>>(
            BF(kcache), BF(vcache), CBF(qkv), pos, B, T, maxT, NH, HS);
    LAUNCH_CHECK();
}
