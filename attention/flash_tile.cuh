// flash_tile.cuh: the tile vocabulary of the attention kernels: each PTX instruction wrapped once
// in a named function with a one-line comment, and the stages the kernels share (accumulator
// fragments, the causal mask, the online softmax, the forwards' epilogue) written once. Read it
// once; the kernels (flash.cu, the Hopper forward and backward in flash_sm90.cu,
// layers/decode_attention.cu) name these and not the PTX.
//
//   constants and packing       kLog2e, kLn2, pack_bf16, smem_addr
//   cp.async, mma.sync          16-byte async copies to shared memory; the m16n8k16 bf16
//                               product and its fragments' lanes
//   accumulator fragments       Frag: the row and column of accumulator register i, of mma.sync
//                               and wgmma alike; frag_reg; quad_max, quad_sum over a row's lanes
//   the causal mask             causal_hidden, causal_mask
//   online softmax              SoftmaxRow (m, l): update -> alpha, exponentiate, finish; rescale
//   the forwards' epilogue      FwdOut, store_o: O / l and the logsumexp, rows past T skipped
//   mbarrier                    init, arrive, arrive with expected bytes, wait on a phase parity
//   ring stages                 RingSlot: the stage and the phase parity of a step
//   work items                  ItemRing: the producer's items to the CTA's other roles
//   TMA (bulk tensor copy)      global -> shared tile loads; shared -> global tile reduce-add;
//                               1-D bulk loads; the bulk group commit and waits
//   proxies                     fence.proxy.async: ordinary shared stores before TMA/wgmma reads
//   warpgroups                  setmaxnreg, named barriers
//   clusters                    the cluster barrier's arrive and wait, apart; a CTA's shared
//                               address in another; bulk copies and register stores between
//                               CTAs' shared memory
//   wgmma                       descriptors of 128-byte swizzled shared tiles, the products
//   accumulators as A operands  pack_a
//
// Everything below "Hopper" exists only on sm_90a (wgmma, setmaxnreg) or sm_90 (TMA, mbarrier
// transactions); those functions are compiled only where a kernel calls them.
#pragma once

#include <cuda.h>
#include <stdint.h>

#include "../runtime/cuda_common.cuh"

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// generic pointer into shared memory -> the 32-bit shared address PTX takes
__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// two floats -> bf16x2 (round to nearest even), `lo` in the low half
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

// ---- cp.async (sm_80 and later) ---------------------------------------------------------------
// 16 bytes global -> shared, bypassing L1; when !valid nothing is read and zeros are written
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
}
// close the group of cp.async issued since the last commit
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// wait until at most N of this thread's committed groups are still in flight
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- mma.sync (sm_80 and later) ---------------------------------------------------------------
// c += a b (16x8x16, bf16 in, fp32 accumulate): mma.sync.aligned.m16n8k16.row.col. Lane
// (g = lane / 4, t = lane % 4) holds a[0] = A(g, 2t..2t+1), a[1] = A(g+8, 2t..2t+1),
// a[2] = A(g, 2t+8..2t+9), a[3] = A(g+8, 2t+8..2t+9); b0 = B(2t..2t+1, g), b1 = B(2t+8..2t+9, g);
// c = C(g, 2t), C(g, 2t+1), C(g+8, 2t), C(g+8, 2t+1)
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- accumulator fragments (fp32) -------------------------------------------------------------
// mma.sync m16n8 and wgmma m64nN leave their results in one layout: per warp 16 rows, and per
// 8-column block n four registers 4n + e (e < 4) of lane 4g + t (g = lane / 4, t = lane % 4):
//   register i at row g + Frag::row(i), column 2t + Frag::col(i)
// flash.cu keeps a 16 x 8N accumulator as N mma.sync C fragments, float[N][4]; flash_sm90.cu as
// one wgmma accumulator, float[4N], whose warp w holds rows 16w..16w+15 of the warpgroup's 64.
// frag_reg(d, i) is register i of either; Frag::regs<D> counts them.
struct Frag {
    static __device__ __forceinline__ int row(int i) { return 8 * ((i >> 1) & 1); }
    static __device__ __forceinline__ int col(int i) { return 8 * (i >> 2) + (i & 1); }
    template <typename D>
    static constexpr int regs = sizeof(D) / sizeof(float);
};
template <int N>
__device__ __forceinline__ float &frag_reg(float (&d)[N], int i) { return d[i]; }
template <int N>
__device__ __forceinline__ float frag_reg(const float (&d)[N], int i) { return d[i]; }
template <int N>
__device__ __forceinline__ float &frag_reg(float (&d)[N][4], int i) { return d[i / 4][i % 4]; }
template <int N>
__device__ __forceinline__ float frag_reg(const float (&d)[N][4], int i) { return d[i / 4][i % 4]; }
// the max / the sum over the 4 lanes of a quad, the threads that share an accumulator row
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---- the causal mask ---------------------------------------------------------------------------
// A key is hidden from every query before it.
__device__ __forceinline__ bool causal_hidden(int query, int key) { return key > query; }
// S (queries x keys) of a tile that crosses the diagonal: -inf where the key is hidden. row0,
// col0: the query and the key of the thread's register 0 (row g, column 2t).
template <typename D>
__device__ __forceinline__ void causal_mask(D &s, int row0, int col0) {
#pragma unroll
    for (int i = 0; i < Frag::regs<D>; i++)
        if (causal_hidden(row0 + Frag::row(i), col0 + Frag::col(i))) frag_reg(s, i) = -INFINITY;
}

// ---- online softmax (FlashAttention-2's, in the exp2 domain) ------------------------------------
// One query row's running state, in each thread that holds part of the row: m, the running max
// of the raw logits (the same in every thread of the row), starting at -inf; l, the running sum
// of exp2((x - m) * scale_log2) over this thread's columns (over the whole row only in finish),
// starting at 0. SoftmaxRow is a view of the two where the kernel keeps them: the kernels keep
// an array of m and one of l (a struct per row interleaves them, and ptxas then allocates the
// sm_80 forward's registers differently). Per tile:
//   update        m = m_new, the max of m and the tile's logits of the row (the kernel folds
//                 them, in the order it was tuned with, and quad_max-es); returns alpha =
//                 exp2((m_old - m_new) * scale_log2), what l and the row of O are rescaled by
//   exponentiate  the row's logits x in an accumulator -> P = exp2(x * scale_log2 - m *
//                 scale_log2), in place; l = l * alpha + their sum
//   rescale       the row's registers of O *= alpha
// and at the end finish: l summed over the row's quad; then 1 / l and the logsumexp, (m *
// scale_log2 + log2 l) * ln 2 (store_o). A finite m needs one visible key per row in the first
// tile: key 0, visible to every row, is in tile 0.
struct SoftmaxRow {
    float &m, &l;

    __device__ __forceinline__ float update(float m_new, float scale_log2 = 1.0f) {
        const float alpha = exp2f((m - m_new) * scale_log2);
        m = m_new;
        return alpha;
    }
    // the registers of accumulator row g + 8 * half
    template <typename D>
    __device__ __forceinline__ void exponentiate(D &s, int half, float alpha, float scale_log2) {
        const float m_scaled = m * scale_log2;
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < Frag::regs<D>; i++)
            if (Frag::row(i) == 8 * half) {
                frag_reg(s, i) = exp2f(fmaf(frag_reg(s, i), scale_log2, -m_scaled));
                sum += frag_reg(s, i);
            }
        l = l * alpha + sum;
    }
    // The end, in every lane of the row's quad: l over the whole row; then 1 / l, what O is
    // multiplied by, and the logsumexp (computed where used: rows past T skip them)
    struct End {
        float m, l;
        __device__ __forceinline__ float inv_l() const { return 1.0f / l; }
        __device__ __forceinline__ float lse(float scale_log2) const {
            return (m * scale_log2 + log2f(l)) * kLn2;
        }
    };
    __device__ __forceinline__ End finish() const { return {m, quad_sum(l)}; }
};
template <typename D>
__device__ __forceinline__ void rescale(D &o, int half, float alpha) {
#pragma unroll
    for (int i = 0; i < Frag::regs<D>; i++)
        if (Frag::row(i) == 8 * half) frag_reg(o, i) *= alpha;
}

// ---- the forwards' epilogue ---------------------------------------------------------------------
// Where a forward writes head (b, h): O's rows in out (B, T, NH, HS), the logsumexp in (B, NH, T)
// (bh = b * NH + h).
struct FwdOut {
    bf16 *out;
    float *logsumexp;
    int b, h, bh, NH, HS, T;
};
// O / l and the logsumexp of the thread's rows of a 16-row accumulator o: m[half], l[half] of
// row row0 + 8 * half (row0: row g), t = lane % 4. Rows past T (computed on zero-filled Q) are not
// stored; the others' O / l goes out as bf16 pairs, the logsumexp from each row's thread t = 0.
template <typename D>
__device__ __forceinline__ void store_o(const FwdOut &dst, const D &o, float (&m)[2], float (&l)[2],
                                        int row0, int t, float scale_log2) {
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const SoftmaxRow::End end = SoftmaxRow{m[half], l[half]}.finish();
        const int row = row0 + 8 * half;
        if (row >= dst.T) continue;
        if (t == 0) dst.logsumexp[(size_t)dst.bh * dst.T + row] = end.lse(scale_log2);
        const float inv = end.inv_l();
        bf16 *out = dst.out + ((size_t)(dst.b * dst.T + row) * dst.NH + dst.h) * dst.HS + 2 * t;
#pragma unroll
        for (int i = 2 * half; i < Frag::regs<D>; i += 4)
            *reinterpret_cast<uint32_t *>(out + Frag::col(i)) =
                pack_bf16(frag_reg(o, i) * inv, frag_reg(o, i + 1) * inv);
    }
}

// ================================================================================================
// Hopper
// ================================================================================================

// ---- mbarrier ----------------------------------------------------------------------------------
// mbarrier.init: a barrier that completes a phase after `count` arrivals (and its expected bytes)
__device__ __forceinline__ void mbar_init(uint64_t *bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
// fence.mbarrier_init: make initialised barriers visible to the TMA unit (the async proxy)
__device__ __forceinline__ void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// mbarrier.arrive.expect_tx: arrive, and expect `bytes` more from TMA before the phase completes
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}
// mbarrier.arrive: one arrival (e.g. a consumer thread is done with a stage)
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// mbarrier.try_wait.parity: spin until the phase with this parity (0, 1, 0, ...) has completed.
// A fresh barrier counts as having completed the phase of parity 1 (so waiting on 1 passes).
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(parity)
            : "memory");
    } while (!done);
}

// ---- a ring of shared-memory stages: which stage step `step` uses, and the parity to wait on --
// The producer waits on `empty` with the parity flipped (round 0 passes at once), the consumers
// on `full` with it as is.
template <int STAGES>
struct RingSlot {
    int stage;
    uint32_t parity;
    __device__ explicit RingSlot(int step) : stage(step % STAGES), parity((step / STAGES) & 1) {}
};

// ---- work items handed out inside a CTA --------------------------------------------------------
// The Hopper kernels' producer thread takes the CTA's work items (from a counter) and passes each
// to the CTA's other roles through a ring of two slots: publish(n, t) makes t the CTA's n-th item
// (t past the last item: no more), take(n) returns it. Every one of the `takers` threads given to
// init takes every n, in order; one thread publishes. In shared memory; init by one thread before
// the CTA's first barrier (and mbar_fence_init).
struct ItemRing {
    uint64_t full[2], empty[2];
    int slot[2];
    __device__ void init(int takers) {
        for (int i = 0; i < 2; i++) {
            mbar_init(&full[i], 1);
            mbar_init(&empty[i], takers);
        }
    }
    __device__ void publish(int n, int t) {
        const RingSlot<2> s(n);
        mbar_wait(&empty[s.stage], s.parity ^ 1);
        slot[s.stage] = t;
        mbar_arrive(&full[s.stage]);
    }
    __device__ int take(int n) {
        const RingSlot<2> s(n);
        mbar_wait(&full[s.stage], s.parity);
        const int t = slot[s.stage];
        mbar_arrive(&empty[s.stage]);
        return t;
    }
};

// ---- TMA ---------------------------------------------------------------------------------------
// cp.async.bulk.tensor.4d: TMA copy of one box at coordinates {c0, c1, c2, c3} of the tensor
// map into shared memory (zeros where the box leaves the tensor); its bytes complete on `bar`
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, uint64_t *bar,
                                            int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
        "r"(smem_addr(bar))
        : "memory");
}
// prefetch.tensormap: bring a tensor map (a __grid_constant__ parameter) into the TMA unit's
// cache ahead of its first copy, e.g. before pdl_wait for a copy that must come after it
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap *map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// cp.reduce.async.bulk.tensor.4d .add: adds a shared-memory box into the tensor at {c0..c3},
// element by element, atomically with respect to other reductions (parts of the box outside the
// tensor are skipped); one bulk group operation (tma_commit, tma_wait_read, tma_wait)
__device__ __forceinline__ void tma_reduce_add_4d(const CUtensorMap *map, uint32_t src, int c0,
                                                  int c1, int c2, int c3) {
    asm volatile(
        "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group "
        "[%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(reinterpret_cast<uint64_t>(map)),
        "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}
// cp.async.bulk.tensor.4d global <- shared: TMA store of one shared-memory box into the tensor at
// {c0..c3} (parts outside the tensor are not written); one bulk group operation, as above
__device__ __forceinline__ void tma_store_4d(const CUtensorMap *map, uint32_t src, int c0, int c1,
                                             int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group "
        "[%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(reinterpret_cast<uint64_t>(map)),
        "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}
// cp.async.bulk (1-D): `bytes` (a multiple of 16, both addresses 16-byte aligned) from global
// to shared memory; they complete on `bar`
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes,
                                          uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
        ::"r"(dst), "l"(src), "r"(bytes), "r"(smem_addr(bar))
        : "memory");
}
// cp.reduce.async.bulk (1-D) .add.f32: adds `bytes` of fp32 (a multiple of 16, both addresses
// 16-byte aligned) from shared memory into global memory, element by element, atomically with
// respect to other reductions; one bulk group operation (tma_commit, tma_wait_read, tma_wait)
__device__ __forceinline__ void bulk_reduce_add_f32(float *dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                 ::"l"(dst), "r"(src), "r"(bytes)
                 : "memory");
}
// cp.async.bulk.commit_group: close the group of bulk stores/reductions issued since the last
__device__ __forceinline__ void tma_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// cp.async.bulk.wait_group.read 0: every committed group has finished reading shared memory
__device__ __forceinline__ void tma_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// cp.async.bulk.wait_group 0: every committed group has completed (its writes performed)
__device__ __forceinline__ void tma_wait() {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// ---- proxies ------------------------------------------------------------------------------------
// fence.proxy.async.shared::cta: this thread's ordinary shared stores (st.shared) become visible
// to the async proxy (TMA, wgmma); put before the barrier that lets them read
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// fence.proxy.async.global: orders this thread's async-proxy global accesses (TMA reductions)
// with its ordinary ones (the flags that order reductions between CTAs)
__device__ __forceinline__ void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
// ld.acquire.gpu: a flag written by another CTA, and everything it released
__device__ __forceinline__ uint32_t load_acquire(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// red.global.add.f32: *p += v atomically, nothing returned (an atomicAdd whose result goes unused
// may or may not compile to this)
__device__ __forceinline__ void red_add(float *p, float v) {
    asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(p), "f"(v) : "memory");
}
// red.global.add.v4.f32 (sm_90): p[0..3] += v, each element atomically (p 16-byte aligned)
__device__ __forceinline__ void red_add_v4(float *p, float4 v) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n"
                 ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
}
// red.release.gpu.add: *p += v after everything this thread wrote before
__device__ __forceinline__ void add_release(uint32_t *p, uint32_t v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// ---- warpgroups ---------------------------------------------------------------------------------
// setmaxnreg: this warpgroup gives registers back to the SM's pool / takes them from it
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
// bar.sync / bar.arrive on named barrier `id` (1..15; 0 is __syncthreads) counting n threads:
// wait for the barrier / arrive without waiting
__device__ __forceinline__ void named_bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// ---- thread-block clusters ------------------------------------------------------------------------
// barrier.cluster, split: arrive (relaxed: orders nothing, e.g. "this CTA has started, its shared
// memory may be written") and wait (acquire: for every CTA's arrival). cluster.sync() of
// cooperative_groups is the two together, the arrival with release semantics.
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}
// mapa: the shared::cluster address of `addr` (a shared address of this CTA's) in CTA `rank`
__device__ __forceinline__ uint32_t cluster_map(uint32_t addr, int rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
// cp.async.bulk shared::cta -> shared::cluster: `bytes` (a multiple of 16, both addresses 16-byte
// aligned) of this CTA's shared memory into another CTA's, dst and its barrier `bar` both mapped
// there (cluster_map); the bytes complete on that barrier (which expects them)
__device__ __forceinline__ void bulk_copy_to_cta(uint32_t dst, uint32_t src, uint32_t bytes,
                                                 uint32_t bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
        ::"r"(dst), "r"(src), "r"(bytes), "r"(bar)
        : "memory");
}
// st.async: 4 bytes from a register into another CTA's shared memory, dst and its barrier `bar`
// both mapped there (cluster_map); the bytes complete on that barrier (which expects them), so the
// receiver waits on its own barrier and no cluster barrier (nor its release of this CTA's global
// stores) is needed
__device__ __forceinline__ void store_to_cta(uint32_t dst, uint32_t value, uint32_t bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n"
                 ::"r"(dst), "r"(value), "r"(bar)
                 : "memory");
}

// ---- wgmma ----------------------------------------------------------------------------------------
// Shared tiles are TMA's CU_TENSOR_MAP_SWIZZLE_128B layout: panels of R rows x 128 bytes (64
// bf16 or 32 fp32), 8-row groups of 1024 bytes (1024-aligned), 16-byte chunk c of row r at chunk
// c ^ (r % 8). swizzle_128b gives the byte offset of (row, byte) in one panel; ordinary stores
// that wgmma or TMA read next use it.
__device__ __forceinline__ uint32_t swizzle_128b(int row, int byte) {
    return row * 128 + ((((byte >> 4) ^ row) & 7) << 4) + (byte & 15);
}
// wgmma matrix descriptor of a 128-byte-swizzled operand in shared memory: start address,
// leading and stride byte offsets (each >> 4, 14 bits), swizzle mode 1 = 128 bytes (bits 62-63).
//   K-major operand (the reduction dimension contiguous: Q, K, V rows as A or B of x y^T): a
//     k-step of 16 lies in panel ks/4 at byte 32*(ks%4) of each row; stride = 1024 (8-row
//     groups); leading unused (16).
//   MN-major operand (the M or N dimension contiguous, the transpose flag set: V in P V, dO in
//     P^T dO, K in dS K, dS^T in dS K): a k-step of 16 rows starts 16 * 128 bytes in; stride =
//     1024 (8-row groups along k), leading = the distance between 64-wide panels along M or N.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t leading_bytes,
                                              uint32_t stride_bytes) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)((leading_bytes >> 4) & 0x3FFF) << 16 |
           (uint64_t)((stride_bytes >> 4) & 0x3FFF) << 32 | 1ull << 62;
}
// The descriptor of the same operand `bytes` further on (a multiple of 16): one integer add on
// the low word. The start-address field cannot carry into the leading byte offset above it,
// since shared addresses stay below 2^18. The products below build one descriptor per operand
// and advance it per k-step: building each from its address took five dependent integer
// instructions per wgmma, a third of the consumers' instructions (docs/PERF.md).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
    const uint32_t lo = (uint32_t)desc + (bytes >> 4), hi = (uint32_t)(desc >> 32);
    return (uint64_t)hi << 32 | lo;
}
// wgmma.fence: order earlier register writes (accumulators, A operands) before the next wgmma
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
// wgmma.commit_group: close the group of wgmma issued since the last commit
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// wgmma.wait_group N: wait until at most N committed groups are still running
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Tell the compiler that the registers of x change here: put after a wgmma_wait, so that no
// read of an accumulator is moved above the wait (the compiler does not know wgmma is async),
// and so that A-operand registers stay untouched until the products reading them are done.
template <int N>
__device__ __forceinline__ void fence_regs(float (&x)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(x[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&x)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(x[i])::"memory");
}
// wgmma.mma_async m64nNk16, bf16 in, fp32 accumulate, one warpgroup; N from d's size (N/2
// floats a thread: 8, 16, 32, 64 for N = 16, 32, 64, 128; wgmma_ss has all four):
//   wgmma_ss<MN_MAJOR>: d (+)= A B, A and B from shared memory, both K-major (MN_MAJOR = 0) or
//                       both MN-major (1: the transpose flags); accumulate = 0: d = A B
//   wgmma_rs_tb:        d += A B, A from registers, B from shared memory MN-major (transposed)
//   wgmma_rs_kb:        d (+)= A B, A from registers, B from shared memory K-major (N = 128)
template <int N>
__device__ void wgmma_rs_tb(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b);
// The accumulator operands of one wgmma, written once: "%0, ..., %31" in the instruction and
// "+f"(d[0]) ... "+f"(d[31]) as the asm's outputs (32 floats a thread for N = 64, 64 for 128).
#define WGMMA_REGS_32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WGMMA_REGS_64 WGMMA_REGS_32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, " \
                      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, " \
                      "%60, %61, %62, %63"
#define WGMMA_D8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
                       "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_D_32(d) WGMMA_D8(d, 0), WGMMA_D8(d, 8), WGMMA_D8(d, 16), WGMMA_D8(d, 24)
#define WGMMA_D_64(d) WGMMA_D_32(d), WGMMA_D8(d, 32), WGMMA_D8(d, 40), WGMMA_D8(d, 48), WGMMA_D8(d, 56)
template <int MN_MAJOR>
__device__ __forceinline__ void wgmma_ss(float (&d)[8], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
        "%8, %9, p, 1, 1, %11, %11;\n}\n"
        : WGMMA_D8(d, 0)
        : "l"(a), "l"(b), "r"(accumulate), "n"(MN_MAJOR));
}
template <int MN_MAJOR>
__device__ __forceinline__ void wgmma_ss(float (&d)[16], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, %19;\n}\n"
        : WGMMA_D8(d, 0), WGMMA_D8(d, 8)
        : "l"(a), "l"(b), "r"(accumulate), "n"(MN_MAJOR));
}
template <int MN_MAJOR>
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WGMMA_REGS_32
        "}, %32, %33, p, 1, 1, %35, %35;\n}\n"
        : WGMMA_D_32(d)
        : "l"(a), "l"(b), "r"(accumulate), "n"(MN_MAJOR));
}
template <int MN_MAJOR>
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WGMMA_REGS_64
        "}, %64, %65, p, 1, 1, %67, %67;\n}\n"
        : WGMMA_D_64(d)
        : "l"(a), "l"(b), "r"(accumulate), "n"(MN_MAJOR));
}
__device__ __forceinline__ void wgmma_rs_kb(float (&d)[64], const uint32_t (&a)[4], uint64_t b,
                                            int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WGMMA_REGS_64
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : WGMMA_D_64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_rs_tb<64>(float (&d)[32], const uint32_t (&a)[4],
                                                uint64_t b) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WGMMA_REGS_32
        "}, {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
        : WGMMA_D_32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
template <>
__device__ __forceinline__ void wgmma_rs_tb<128>(float (&d)[64], const uint32_t (&a)[4],
                                                 uint64_t b) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WGMMA_REGS_64
        "}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
        : WGMMA_D_64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

// ---- the products on whole tiles, for one warpgroup (64 rows of the result) -----------------------
// d (64 x N) = A B^T: A's 64 rows at `a` in a tile of A_ROWS rows, B's N rows at `b` in a tile
// of B_ROWS rows, both K-major over HS (S = Q K^T, S^T = K Q^T, dP^T = V dO^T)
template <int HS, int N, int A_ROWS, int B_ROWS>
__device__ __forceinline__ void gemm_abt(float (&d)[N / 2], uint32_t a, uint32_t b) {
    const uint64_t da = smem_desc(a, 16, 1024), db = smem_desc(b, 16, 1024);
#pragma unroll
    for (int ks = 0; ks < HS / 16; ks++) {
        const uint32_t col = (ks % 4) * 32;
        wgmma_ss<0>(d, desc_advance(da, (ks / 4) * A_ROWS * 128 + col),
                    desc_advance(db, (ks / 4) * B_ROWS * 128 + col), ks > 0);
    }
}
// d (64 x 128) = A B^T as gemm_abt, A's 64 rows from registers (load_a, 4 a k-step of 16)
template <int HS, int B_ROWS>
__device__ __forceinline__ void gemm_rbt(float (&d)[64], const uint32_t (&a)[HS / 4], uint32_t b) {
    const uint64_t db = smem_desc(b, 16, 1024);
#pragma unroll
    for (int ks = 0; ks < HS / 16; ks++) {
        const uint32_t ak[4] = {a[4 * ks], a[4 * ks + 1], a[4 * ks + 2], a[4 * ks + 3]};
        wgmma_rs_kb(d, ak, desc_advance(db, (ks / 4) * B_ROWS * 128 + (ks % 4) * 32), ks > 0);
    }
}
// A's 64 rows x HS columns (K-major, 128-byte swizzled panels of ROWS rows at `rows`) into the
// A-operand registers of one warpgroup's thread (warp, g = lane / 4, t = lane % 4): register
// 4 ks + r holds row 16 warp + g + 8 (r & 1), columns 16 ks + 8 (r >> 1) + 2 t and + 1
template <int HS, int ROWS>
__device__ __forceinline__ void load_a(uint32_t (&a)[HS / 4], const unsigned char *rows, int warp,
                                       int g, int t) {
#pragma unroll
    for (int i = 0; i < HS / 4; i++) {
        const int row = 16 * warp + g + 8 * (i & 1), col = 16 * (i / 4) + 8 * ((i >> 1) & 1) + 2 * t;
        a[i] = *reinterpret_cast<const uint32_t *>(rows + (col / 64) * ROWS * 128 +
                                                    swizzle_128b(row, (col % 64) * 2));
    }
}
// d (64 x HS) += A B: A (64 x K) in registers as bf16 pairs (4 a k-step, see pack_a), B (K x HS)
// the first K rows of a tile of B_ROWS rows, MN-major (O += P V, dV += P^T dO, dK += dS^T Q)
template <int HS, int K, int B_ROWS>
__device__ __forceinline__ void gemm_rab(float (&d)[HS / 2], const uint32_t (&a)[K / 4],
                                         uint32_t b) {
    const uint64_t db = smem_desc(b, B_ROWS * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++) {
        const uint32_t ak[4] = {a[4 * kk], a[4 * kk + 1], a[4 * kk + 2], a[4 * kk + 3]};
        wgmma_rs_tb<HS>(d, ak, desc_advance(db, kk * 16 * 128));
    }
}

// ---- accumulators as A operands -----------------------------------------------------------------
// Packed two by two, an accumulator (m64nN, see Frag) is the A operand (from registers) of the
// next product: pack_a turns N/2 floats into N/4 bf16 pairs, 4 per k-step of 16 columns.
template <int N>
__device__ __forceinline__ void pack_a(uint32_t (&a)[N / 2], const float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N / 2; i++) a[i] = pack_bf16(d[2 * i], d[2 * i + 1]);
}
// and back: the floats of pack_a's bf16 pairs, exactly (unpack_bf16, a word at a time)
template <int N>
__device__ __forceinline__ void unpack_a(float (&d)[N], const uint32_t (&a)[N / 2]) {
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        float pair[2];
        unpack_bf16<2>(pair, a[i]);
        d[2 * i] = pair[0];
        d[2 * i + 1] = pair[1];
    }
}
