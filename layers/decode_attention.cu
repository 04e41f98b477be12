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
// hold positions. One kernel, not a split kernel and a combine kernel: at batch 1 every
// kernel boundary costs more than the combine's work.
// Inside a block, a group of G = HS/8 (rounded up to a power of two) lanes handles a cache row,
// each lane 8 channels through one 16-byte load of k and one of v, kRows rows per round with
// all their loads in flight together; each group keeps its own (m, l, acc), merged in shared
// memory at the end. bf16 storage, fp32 math.
//
// The decode step's call (attention_decode_step) also takes the new token's k and v from qkv
// and writes them into the cache: the block whose split holds the new position reads that row
// from qkv instead of the cache (and stores it there), so no kernel runs before it to copy
// them. It is launched with PDL: the first round of cache rows (written by earlier steps, never
// by the kernel before) is loaded before pdl_wait, the query and the new row after.
//
// The layout (split_len, splits) depends on the span the cache may hold (len for
// attention_decode, maxT for attention_decode_step): enough blocks to cover the SMs a few
// times, at least kMinSplitKeys positions each. Blocks past len return at once, so one layout
// serves every position of a CUDA graph. Partial results and the counters live in the caller's
// scratch (attention_decode_scratch_size), sized for the longest span, maxT.
#include "../attention/flash_tile.cuh"   // kLog2e and the other attention kernels' vocabulary
#include "decode_attention.cuh"

namespace {

// one flash-decoding call: block (split, h, b) of the grid (splits, NH, B)
template <int G>
__global__ void __launch_bounds__(kSplitThreads) decode_kernel(const DecodeArgs a) {
    decode_block<G>(a, blockIdx.x, blockIdx.y, blockIdx.z, [] {
        pdl_launch_dependents();
        pdl_wait();
    });
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

// a's q, caches, new row and length filled in by the caller; the checks, layout and scratch here
DecodeArgs decode_prepare(DecodeArgs a, floatX *out, void *scratch, int span, int B) {
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
    a.B = B;
    return a;
}

void decode_launch(const DecodeArgs &a) {
    const dim3 grid(a.splits, a.NH, a.B);
    switch (decode_groups(a.HS)) {
    case 1: launch_pdl(decode_kernel<1>, grid, kSplitThreads, 0, a); break;
    case 2: launch_pdl(decode_kernel<2>, grid, kSplitThreads, 0, a); break;
    case 4: launch_pdl(decode_kernel<4>, grid, kSplitThreads, 0, a); break;
    case 8: launch_pdl(decode_kernel<8>, grid, kSplitThreads, 0, a); break;
    case 16: launch_pdl(decode_kernel<16>, grid, kSplitThreads, 0, a); break;
    default: launch_pdl(decode_kernel<32>, grid, kSplitThreads, 0, a);
    }
    LAUNCH_CHECK();
}

// kcache, vcache rows (b, pos + t) = k, v of qkv row (b, t); one thread per VEC channels
template <int VEC>
__global__ void kv_cache_store_kernel(bf16 *__restrict__ kcache, bf16 *__restrict__ vcache,
                                      const bf16 *__restrict__ qkv, const int *__restrict__ pos,
                                      int B, int T, int maxT, int C) {
    const int nvec = C / VEC;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * nvec) return;
    const int c = (int)(idx % nvec) * VEC;
    const size_t bt = idx / nvec;
    const int t = (int)(bt % T), b = (int)(bt / T);
    const int p = *pos + t;
    if (p < 0 || p >= maxT) return;   // the caller checked; never write outside the cache
    const bf16 *src = qkv + bt * 3 * C + c;
    const size_t dst = ((size_t)b * maxT + p) * C + c;
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
    return counters_bytes(B, NH) + (size_t)B * NH * max_splits(B, NH, maxT) * (HS + 2) * sizeof(float);
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
    decode_launch(decode_prepare(a, out, scratch, len, B));
}

DecodeArgs decode_step_args(floatX *out, void *scratch, const floatX *qkv, floatX *kcache,
                            floatX *vcache, const int *pos, int B, int maxT, int NH, int HS) {
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
    return decode_prepare(a, out, scratch, maxT, B);
}

void attention_decode_step(floatX *out, void *scratch, const floatX *qkv, floatX *kcache,
                           floatX *vcache, const int *pos, int B, int maxT, int NH, int HS) {
    decode_launch(decode_step_args(out, scratch, qkv, kcache, vcache, pos, B, maxT, NH, HS));
}

void kv_cache_store(floatX *kcache, floatX *vcache, const floatX *qkv, const int *pos, int B,
                    int T, int maxT, int NH, int HS) {
    const int C = NH * HS, threads = 256;
    const size_t rows = (size_t)B * T;
    if (rows == 0) return;
    if (C % 8 == 0 && is_aligned16(kcache) && is_aligned16(vcache) && is_aligned16(qkv))
        kv_cache_store_kernel<8><<<ceil_div(rows * (C / 8), threads), threads, 0, cuda_stream>>>(
            BF(kcache), BF(vcache), CBF(qkv), pos, B, T, maxT, C);
    else
        kv_cache_store_kernel<1><<<ceil_div(rows * C, threads), threads, 0, cuda_stream>>>(
            BF(kcache), BF(vcache), CBF(qkv), pos, B, T, maxT, C);
    LAUNCH_CHECK();
}
