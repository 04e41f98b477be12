// flash_sm90.cu: the forward of flash attention for Hopper (sm_90a): TMA loads, wgmma tensor-core
// products, mbarrier pipelines and warp specialisation. Same algorithm and notation as flash.cu
// (FlashAttention-2's online softmax in the exp2 domain; read its top comment first), same
// inputs and outputs: packed qkv (B,T,3,NH,HS) in, out (B,T,NH,HS) and one logsumexp per row
// (B,NH,T) out, so flash.cu's backward runs on what this forward saves.
//
// Its own file because it is built for another target: `-gencode arch=compute_90a,code=sm_90a`
// (wgmma and setmaxnreg exist only there), while flash.cu is built for CUDA_ARCH. flash.cu calls
// flash_sm90_forward when flash_sm90_enabled() says the device is compute capability 9.0.
//
// ---- the tile picture: one work item = one query tile of BR = 64 x CONSUMERS rows of one head ---
// (CONSUMERS = 2, BR = 128, drawn; 3 and 192 at HS=64 beyond T=1024, see Shape). A CTA does one
// item, or, at T <= 2048 (persistent: one CTA per SM), one item after another: the picture
// repeats per item, Q in one of two slots (one at HS = 128), the K/V ring running on.
//
//   global qkv ──TMA──► shared memory                            registers (per consumer warpgroup)
//                       ┌─────────────┐
//   Q rows q0..q0+127 ─►│ Q  128 x HS │── rows 0-63 ──► consumer 0 ─┐  S = QK^T 64x128 fp32 (wgmma,
//     (once an item)    │             │── rows 64-127 ► consumer 1 ─┤        Q and K from shared)
//                       ├─────────────┤                             │  online softmax: m, l, P=exp2
//   K, V tile j    ───► │ stage r % S │  full[s]: TMA bytes landed  │  P -> bf16 A-operand regs
//     (128 rows)        │  K 128 x HS │ ◄────────────────────────── │  O += P V  64xHS fp32 (wgmma,
//                       │  V 128 x HS │  empty[s]: all consumer     │        P from registers,
//                       └─────────────┘  threads done with stage s  │        V from shared)
//   producer warpgroup 0 (24 registers/thread): one thread issues  ─┘  at the end: O / l -> out,
//   every TMA copy; consumers 1, 2 (240 registers/thread).              logsumexp -> saved
//
// Per consumer, in time (tile j's softmax runs while tile j-1's P V is on the tensor cores, and
// while the other consumer's products are):
//   wait full[j]; wait for my turn; issue S_j = Q K_j^T and O += P_{j-1} V_{j-1}; pass the turn
//   wait S_j; softmax(S_j) in place (fp32 exp2 values; P_{j-1} registers still being read)
//   wait P V; arrive empty[j-1]; O *= alpha_j; P_j = bf16(S_j)
// (after the item's last S, arrive q_empty: the next item's Q may load), and finally
// O += P_last V_last; arrive empty[last]; O / l -> out. The producer runs up to S stages ahead of
// the consumers; r counts a CTA's key/value tiles over all its items.
//
// ---- shared-memory layout: 128-byte swizzle, what TMA writes and wgmma reads -------------------
// A tile of R rows x HS columns (bf16) is stored as HS/64 panels of R rows x 64 columns; a panel
// row is 128 bytes, and within each group of 8 rows (1024 bytes, 1024-aligned) 16-byte chunk c
// of row r sits at chunk c ^ (r % 8): TMA's CU_TENSOR_MAP_SWIZZLE_128B, which wgmma reads as
// swizzle mode 1 (see smem_desc). One TMA box is one panel: {64 columns, 1 head, R rows, 1}.
//
// ---- wgmma fragments (m64nNk16, one warpgroup = warps 0-3 of the consumer) ---------------------
// Accumulator D (64 x N fp32): warp w holds rows 16w..16w+15, thread lane = 4g + t holds
//   d[i] at row 16w + g + 8*((i/2)%2), column 8*(i/4) + 2t + i%2     (Frag::row, Frag::col)
// A from registers (64 x 16 bf16, 4 x 32 bits): the mma.sync m16k16 A fragment of the warp's 16
// rows, so the accumulator of S, packed two by two, is already P's A operand:
//   A regs of k-step kk = { pack(d[8kk], d[8kk+1]), pack(d[8kk+2], d[8kk+3]),
//                           pack(d[8kk+4], d[8kk+5]), pack(d[8kk+6], d[8kk+7]) }
// Shared operands are read through 64-bit matrix descriptors (smem_desc):
//   S = Q K^T: A = Q (64 x 16 per k-step), B = K (16 x 128): both K-major (HS contiguous).
//     k-step ks lies in panel ks/4 at byte offset 32*(ks%4) of each 128-byte row; the 8-row
//     groups are 1024 bytes apart (stride byte offset); the leading byte offset is unused.
//   O += P V: B = V (16 kv rows x HS): MN-major (HS contiguous), the transpose flag set. k-step
//     kk starts 16 rows = 2048 bytes in; 8-row groups 1024 bytes apart (stride byte offset);
//     the two 64-column panels of HS = 128 are 128*128 bytes apart (leading byte offset).
#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/cuda_common.cuh"
#include "../runtime/tensor_map.h"
#include "flash_sm90.h"
#include "flash_tile.cuh"

namespace {

constexpr int kBC = 128;               // key/value rows of a tile
constexpr int kPanelCols = 64;         // bf16 columns of one 128-byte swizzled panel row
constexpr int kRowBytes = 128;         // bytes of one panel row
constexpr int kProducerRegs = 24;      // registers per producer thread after setmaxnreg
// Ping-pong: the consumers take turns to issue their products (named barriers), so that one
// warpgroup's softmax (forward) or exponentials (backward) run while another's products use the
// tensor cores. Build with -DFLASH_SM90_PINGPONG=0 (FLASH_FLAGS in tests/gpu/attention.mk) to
// let them run unordered.
#ifndef FLASH_SM90_PINGPONG
#define FLASH_SM90_PINGPONG 1
#endif
// The forward's grid (forward_launch): one CTA per SM (persistent) up to this T, one CTA per
// item beyond (0: never persistent, to time against)
#ifndef FLASH_SM90_FWD_PERSISTENT_T
#define FLASH_SM90_FWD_PERSISTENT_T 2048
#endif
// The backward's grid (backward_launch): 1, one CTA per SM, each taking work items from a
// counter (persistent); 0, one CTA per item, to time against.
#ifndef FLASH_SM90_PERSISTENT
#define FLASH_SM90_PERSISTENT 1
#endif
// The backward's work items in groups of this many key blocks of one head (4: a d12 B=64 step
// 1.3-1.9% faster than 1, the attention alone 7-14% at T = 1,024, level from T = 8,192 on, and
// the deterministic mode 12-14% at T = 1,024; 1: key block n of every head before block n + 1,
// to time against).
#ifndef FLASH_SM90_BWD_GROUP
#define FLASH_SM90_BWD_GROUP 4
#endif
static_assert(FLASH_SM90_BWD_GROUP >= 1, "FLASH_SM90_BWD_GROUP: key blocks of a group, at least 1");
// The backward's dQ tiles at HS = 128 added by two writer threads, the CTA's even and odd steps
// (1, the default; 0: one thread, to time against). One thread took each step's whole wait list
// in turn (the order's flag, the staging's reads, the additions' completion, the fence, the
// release) before the next tile; with two, a step's completion and release overlap the next
// step's additions: deterministic fwd+bwd 2-5% faster at every T, unordered level
// (docs/PERF.md, eighteenth session, call 5). HS = 64 has one writer (the consumers' staging,
// shared with the dK/dV rounds, counts its phases on one thread).
#ifndef FLASH_SM90_TWO_WRITERS
#define FLASH_SM90_TWO_WRITERS 1
#endif
// From this T on, the backward's key blocks sweep their query tiles downward, from the last to
// the diagonal (the kernel's comment on work items says why): deterministic fwd+bwd 3-5% faster
// at T = 8,192-32,768 with HS=128 and up to 2% with HS=64, but 4-13% slower at T <= 2,048
// (docs/PERF.md, eighteenth session). 0: always downward; a T past any: always upward.
#ifndef FLASH_SM90_BWD_DESC_T
#define FLASH_SM90_BWD_DESC_T 8192
#endif

// The backward's dQ product at HS = 128 in a warpgroup of its own (1, the default; 0: by the two
// consumers, as at HS = 64, to time against). Off in trace builds, whose 24 KB of events do not
// fit beside its staging.
#ifndef FLASH_SM90_DQ_WG
#define FLASH_SM90_DQ_WG (!FLASH_SM90_TRACE)
#endif

// The backward's timeline, a measuring tool (off by default): build with -DFLASH_SM90_TRACE=1
// (scripts/flash_variant.sh trace -DFLASH_SM90_TRACE=1) and run with FLASH_TRACE=FILE. One
// thread of each role (producer, consumer 0, consumer 1, writer) of the first kTraceCtas CTAs
// records (clock64, event) at each stage boundary into shared memory (not global: a consumer's
// next fence.proxy.async would wait for the stores), copies them out at the kernel's end, and
// each launch rewrites FILE with them; scripts/flash_trace.py turns them into a per-stage account.
#ifndef FLASH_SM90_TRACE
#define FLASH_SM90_TRACE 0
#endif
enum TraceEvent {
    // consumer (roles 1, 2)
    kTrItem = 1, kTrKV, kTrFull, kTrTurn, kTrIssued, kTrP, kTrDS, kTrBar, kTrDQ, kTrDQEmpty,
    kTrStepEnd, kTrDKVRound, kTrItemEnd, kTrExit,
    // producer (role 0)
    kTrPItem = 20, kTrPKVEmpty, kTrPEmpty, kTrPIssued,
    // writer (role 3)
    kTrWItem = 30, kTrWFlag, kTrWFull, kTrWRead, kTrWDKVFull, kTrWDKVRead,
};
#if FLASH_SM90_TRACE
constexpr int kTraceCtas = 132, kTraceRoles = 4, kTraceEvents = 768;
constexpr int kTraceBytes = kTraceRoles * kTraceEvents * 8;   // the events, in shared memory
// per CTA and role: [0] the count, [1] globaltimer and [2] clock64 at the start, [3], [4] at the
// end, then the events: clock64 << 16 | payload << 8 | event
constexpr int kTraceHead = 5;
__device__ unsigned long long g_trace[kTraceCtas][kTraceRoles][kTraceHead + kTraceEvents];
#else
constexpr int kTraceBytes = 0;
#endif
struct Trace {
#if FLASH_SM90_TRACE
    uint32_t buf = 0;   // shared address of this role's events; 0: off
    int n = 0, role;
    __device__ static unsigned long long globaltimer() {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
        return t;
    }
    __device__ static unsigned long long clock() {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
        return t;
    }
    __device__ Trace(unsigned char *smem, int role_) : role(role_) {   // role < 0: off
        if (role >= 0 && blockIdx.x < kTraceCtas) {
            buf = smem_addr(smem) + role * kTraceEvents * 8;
            g_trace[blockIdx.x][role][1] = globaltimer();
            g_trace[blockIdx.x][role][2] = clock();
        }
    }
    __device__ void operator()(int event, int payload = 0) {
        if (buf && n < kTraceEvents) {
            const unsigned long long e = clock() << 16 | (unsigned)(payload & 255) << 8 | event;
            asm volatile("st.shared.u64 [%0], %1;" ::"r"(buf + 8 * n), "l"(e) : "memory");
            n++;
        }
    }
    __device__ void flush(const unsigned char *smem) {
        if (!buf) return;
        unsigned long long *out = g_trace[blockIdx.x][role];
        const unsigned long long *events = reinterpret_cast<const unsigned long long *>(smem) + role * kTraceEvents;
        out[0] = n, out[3] = globaltimer(), out[4] = clock();
        for (int i = 0; i < n; i++) out[kTraceHead + i] = events[i];
    }
#else
    __device__ Trace(unsigned char *, int) {}
    __device__ void operator()(int, int = 0) {}
    __device__ void flush(const unsigned char *) {}
#endif
};

// The shapes measured best on an H200 (docs/PERF.md, "Hopper forward"): HS=128, 2 consumers and
// a 3-stage ring (all the shared memory there is; 2 stages left the consumers waiting for K/V);
// HS=64, a 4-stage ring and 3 consumers (192-row query tiles) except at T <= 1024, where 2
// consumers' smaller tiles make more work items and waste less of the diagonal tiles
// (flash_sm90_forward)
template <int HS, int CONSUMERS_>
struct Shape {
    static constexpr int CONSUMERS = CONSUMERS_;      // consumer warpgroups, 64 query rows each
    static constexpr int BR = 64 * CONSUMERS;         // query rows of a CTA
    static constexpr int THREADS = 128 * (1 + CONSUMERS);
    // registers per consumer thread: what the producer leaves of the SM's 65,536, a multiple
    // of 8 (2 consumers: 128*24 + 256*240 = 64,512; 3: 128*24 + 384*160 = 64,512)
    static constexpr int CONSUMER_REGS = (65536 / 128 - kProducerRegs) / CONSUMERS / 8 * 8;
    static constexpr int STAGES = HS == 64 ? 4 : 3;   // K/V ring depth
    static constexpr int PANELS = HS / kPanelCols;
    static constexpr int Q_BYTES = BR * HS * 2;
    static constexpr int KV_BYTES = kBC * HS * 2;     // one K or one V tile
    // + 1024: the dynamic shared memory is aligned up to 1024 bytes (the swizzle's period)
    static constexpr size_t KV_SMEM = 1024 + 2 * STAGES * KV_BYTES;
    // Q tiles: two where they fit (a persistent CTA loads its next item's Q while its consumers
    // finish the last), else one (HS = 128: loaded once the last item's last S is done)
    static constexpr int Q_SLOTS = KV_SMEM + 2 * Q_BYTES <= 227 * 1024 ? 2 : 1;
    static constexpr size_t SMEM = KV_SMEM + Q_SLOTS * Q_BYTES;
    static_assert(SMEM <= 227 * 1024, "shared memory of one CTA");
    static_assert(CONSUMER_REGS <= 256, "setmaxnreg takes at most 256");
};

// ---- online softmax over one tile ---------------------------------------------------------------
// The thread's two rows (m[half], l[half]: rows g and g+8 of its warp, see SoftmaxRow) take the
// tile's logits s, which leave as P (fp32); alpha[half] is what the row of O is to be rescaled by
// (once the tile before's P V, still running, is done: see the kernel).
__device__ __forceinline__ void online_softmax(float (&s)[kBC / 2], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], float scale_log2) {
#pragma unroll
    for (int half = 0; half < 2; half++) {
        SoftmaxRow row{m[half], l[half]};
        float mx = row.m;
#pragma unroll
        for (int i = 0; i < kBC / 2; i++)
            if (Frag::row(i) == 8 * half) mx = fmaxf(mx, s[i]);
        alpha[half] = row.update(quad_max(mx), scale_log2);
        row.exponentiate(s, half, alpha[half], scale_log2);
    }
}

// ================================================================================================
// The kernel. Work items: (query tiles) x (B*NH). One CTA per SM (shared memory and registers
// both allow only one).
// - A grid of one CTA per item (long T): CTA i does item i. Items are numbered the last query
//   tiles of every head (the most key tiles under the causal mask) first, so that the short ones
//   fill the tail.
// - A grid of one CTA per SM (persistent, forward_launch at short T): CTA i starts with item i
//   and takes each next one from a counter (g_fwd_items), so that the CTAs run the items in
//   their order, whatever their lengths. Items are numbered head by head, a head's query tiles
//   in a row, the last first: the ~132 items in flight then cover ~16 heads (T = 1,024), whose
//   keys and values stay in L2 while each is read by all of the head's query tiles. (In the
//   other order, with the many heads of a training step, 768 at d12 B=64, a head's next query
//   tile came 768 items later, after its K, V had left L2: ncu measured the forward's DRAM reads
//   at 99% of the no-reuse count, 1.34 GB for a 0.51 ms pass; docs/PERF.md, "The receipt".)
//   The next item's Q and first K, V tiles load while the consumers finish the last item's tiles
//   and write its O. At T=1,024 an item is 4.5 key/value tiles on average, and a CTA's start and
//   end, unoverlapped, weigh most.
// ================================================================================================
// The persistent grid's item counter: [0] items handed out after the grid's first ones, [1] CTAs
// done. The last CTA to finish sets both back to 0 for the next launch (launches on one stream
// do not overlap: the forward is not launched with PDL).
__device__ uint32_t g_fwd_items[2];

template <int HS, int CONSUMERS_>
__global__ void __launch_bounds__(Shape<HS, CONSUMERS_>::THREADS, 1)
    flash_forward_sm90_kernel(const __grid_constant__ CUtensorMap q_map,
                              const __grid_constant__ CUtensorMap kv_map, bf16 *__restrict__ out,
                              float *__restrict__ logsumexp, int T, int NH, int BNH, int q_tiles,
                              float scale_log2) {
    // Stages (the tile picture at the top of the file), per item:
    //   producer: Q into slot n % Q_SLOTS once its consumers released it; K, V tile j into stage
    //     RingSlot(ring), ring counting the CTA's tiles over all its items
    //   consumer c (query rows 64c..): S_j = Q K_j^T -> causal_mask (diagonal tiles) ->
    //     online_softmax -> P_j (bf16), while O += P_{j-1} V_{j-1} runs; rescale O; release j-1;
    //     release Q after the last S; store_o: O / l, logsumexp
    using S = Shape<HS, CONSUMERS_>;
    constexpr int STAGES = S::STAGES, BR = S::BR, CONSUMERS = S::CONSUMERS;
    extern __shared__ unsigned char smem_raw[];
    constexpr int Q_SLOTS = S::Q_SLOTS;
    __shared__ uint64_t q_full[Q_SLOTS], q_empty[Q_SLOTS], kv_full[STAGES], kv_empty[STAGES];
    __shared__ ItemRing items_ring;   // the producer's items to the consumers
    const uint32_t sQ = (smem_addr(smem_raw) + 1023) & ~1023u;   // Q tiles [Q_SLOTS][panel][BR][64]
    const uint32_t sK = sQ + Q_SLOTS * S::Q_BYTES;   // K stages [STAGES][panel][128][64]
    const uint32_t sV = sK + STAGES * S::KV_BYTES;   // V stages, the same
    const int items = q_tiles * BNH;

    const bool persistent = (int)gridDim.x < items;

    struct Item {
        int b, h, bh, q0, kv_tiles;
    };
    auto item = [&](int t) {   // the heaviest tiles first: of each head (persistent), or of all
        Item it;
        it.bh = persistent ? t / q_tiles : t % BNH;
        const int q_tile = q_tiles - 1 - (persistent ? t % q_tiles : t / BNH);
        it.b = it.bh / NH;
        it.h = it.bh % NH;
        it.q0 = q_tile * BR;
        it.kv_tiles = (min(it.q0 + BR, T) + kBC - 1) / kBC;   // causal: keys < q0 + BR
        return it;
    };
    // the warpgroup, broadcast from lane 0 so that the compiler knows it is warp-uniform and keeps
    // what derives from it (operand addresses, wgmma descriptors) in uniform registers
    const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);

    if (threadIdx.x == 0) {
        for (int q = 0; q < Q_SLOTS; q++) {
            mbar_init(&q_full[q], 1);
            mbar_init(&q_empty[q], 128 * CONSUMERS);
        }
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&kv_full[s], 1);
            mbar_init(&kv_empty[s], 128 * CONSUMERS);
        }
        items_ring.init(128 * CONSUMERS);
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {
        // ---- producer: one thread issues every copy; the tensor maps' coordinates are
        // {column, part * NH + head, row, batch} with part 0, 1, 2 = q, k, v (q_map's boxes
        // have BR rows, kv_map's kBC)
        setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x == 0) {
            int ring = 0, t = blockIdx.x;
            for (int n = 0;; n++) {
                items_ring.publish(n, t);
                if (t >= items) break;
                const Item it = item(t);
                const RingSlot<Q_SLOTS> qs(n);
                mbar_wait(&q_empty[qs.stage], qs.parity ^ 1);   // round 0 passes at once
                mbar_arrive_expect_tx(&q_full[qs.stage], S::Q_BYTES);
                for (int p = 0; p < S::PANELS; p++)
                    tma_load_4d(sQ + qs.stage * S::Q_BYTES + p * BR * kRowBytes, &q_map,
                                &q_full[qs.stage], p * kPanelCols, it.h, it.q0, it.b);
                for (int j = 0; j < it.kv_tiles; j++, ring++) {
                    const RingSlot<STAGES> slot(ring);
                    const int st = slot.stage;
                    mbar_wait(&kv_empty[st], slot.parity ^ 1);   // round 0 passes at once
                    mbar_arrive_expect_tx(&kv_full[st], 2 * S::KV_BYTES);
                    const uint32_t k_dst = sK + st * S::KV_BYTES, v_dst = sV + st * S::KV_BYTES;
                    for (int p = 0; p < S::PANELS; p++) {
                        const uint32_t off = p * kBC * kRowBytes;
                        tma_load_4d(k_dst + off, &kv_map, &kv_full[st], p * kPanelCols,
                                    NH + it.h, j * kBC, it.b);
                        tma_load_4d(v_dst + off, &kv_map, &kv_full[st], p * kPanelCols,
                                    2 * NH + it.h, j * kBC, it.b);
                    }
                }
                // the next item, once these are issued
                t = persistent ? (int)gridDim.x + (int)atomicAdd(&g_fwd_items[0], 1u) : items;
            }
            if (persistent) {   // every CTA has taken its last item: the last one done resets
                __threadfence();
                if (atomicAdd(&g_fwd_items[1], 1u) == gridDim.x - 1) {
                    atomicExch(&g_fwd_items[0], 0u);
                    atomicExch(&g_fwd_items[1], 0u);
                }
            }
        }
    } else {
        // ---- consumer c: query rows q0 + 64c .. q0 + 64c + 63 of each of the CTA's items
        setmaxnreg_inc<S::CONSUMER_REGS>();
        const int c = wg - 1;
        const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
        const int col0 = 2 * (lane % 4);   // the thread's first column in each 8-block

        // Turns, round robin: consumer c waits on barrier 1 + c before it issues products, then
        // hands over to the next (arrives on its barrier). The last consumer lets consumer 0 go
        // first, once, before the CTA's first item, and hands over after its last P V of an
        // item only when another item follows, so that every wait has one arrival to match.
        // Consumer 0 then issues the next item's first S while the last consumer's epilogue runs
        // (measured 2-3% faster at T <= 2,048 than handing over at the next item's top:
        // docs/PERF.md, "2026-12-02").
        auto my_turn = [&]() {
            if (FLASH_SM90_PINGPONG) named_bar_sync(1 + c, 256);
        };
        auto your_turn = [&]() {
            if (FLASH_SM90_PINGPONG) named_bar_arrive(1 + (c + 1) % CONSUMERS, 256);
        };

        int ring = 0;   // the CTA's key/value tiles over all its items (the ring's stages)
        int t = items_ring.take(0);
        for (int n = 0; t < items; n++) {
            const Item it = item(t);
            const RingSlot<Q_SLOTS> qs(n);
            const int wg_row0 = it.q0 + 64 * c;
            const int row0 = wg_row0 + 16 * warp + lane / 4;   // the thread's rows: row0, row0 + 8
            const uint32_t q = sQ + qs.stage * S::Q_BYTES + 64 * c * kRowBytes;

            float s[kBC / 2], o[HS / 2];
            uint32_t p[kBC / 4];
            float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];   // rows row0, row0 + 8
#pragma unroll
            for (int i = 0; i < HS / 2; i++) o[i] = 0.0f;

            // S of tile j -> probabilities in s (fp32), with the causal mask where the tile
            // crosses the diagonal of this warpgroup's rows
            auto softmax_tile = [&](int j) {
                const int k0 = j * kBC;
                if (k0 + kBC - 1 > wg_row0) causal_mask(s, row0, k0 + col0);
                online_softmax(s, m, l, alpha, scale_log2);
            };
            auto to_bf16 = [&]() { pack_a(p, s); };
            // Q is read by the S products only: released once the item's last S is done
            auto release_q = [&](int j) {
                if (j == it.kv_tiles - 1) mbar_arrive(&q_empty[qs.stage]);
            };

            if (c == CONSUMERS - 1 && n == 0) your_turn();
            mbar_wait(&q_full[qs.stage], qs.parity);
            const RingSlot<STAGES> first(ring);
            mbar_wait(&kv_full[first.stage], first.parity);
            my_turn();
            wgmma_fence();
            gemm_abt<HS, kBC, BR, kBC>(s, q, sK + first.stage * S::KV_BYTES);
            wgmma_commit();
            your_turn();
            wgmma_wait<0>();
            fence_regs(s);
            release_q(0);
            softmax_tile(0);
            to_bf16();

            for (int j = 1; j < it.kv_tiles; j++) {
                const RingSlot<STAGES> slot(ring + j);
                const int st = slot.stage, prev = RingSlot<STAGES>(ring + j - 1).stage;
                mbar_wait(&kv_full[st], slot.parity);
                my_turn();
                wgmma_fence();
                gemm_abt<HS, kBC, BR, kBC>(s, q, sK + st * S::KV_BYTES);
                wgmma_commit();
                gemm_rab<HS, kBC, kBC>(o, p, sV + prev * S::KV_BYTES);
                wgmma_commit();
                your_turn();
                wgmma_wait<1>();   // S_j is done; P_{j-1} V_{j-1} may still run
                fence_regs(s);
                release_q(j);
                softmax_tile(j);
                wgmma_wait<0>();
                fence_regs(o);
                fence_regs(p);
                mbar_arrive(&kv_empty[prev]);
                rescale(o, 0, alpha[0]);
                rescale(o, 1, alpha[1]);
                to_bf16();
            }
            const int last = RingSlot<STAGES>(ring + it.kv_tiles - 1).stage;
            const int next = items_ring.take(n + 1);   // published once this item's loads were issued
            my_turn();
            wgmma_fence();
            gemm_rab<HS, kBC, kBC>(o, p, sV + last * S::KV_BYTES);
            wgmma_commit();
            if (c != CONSUMERS - 1 || next < items) your_turn();
            wgmma_wait<0>();
            fence_regs(o);
            mbar_arrive(&kv_empty[last]);   // the next item's tiles may load into it
            ring += it.kv_tiles;

            // O /= l, logsumexp
            store_o(FwdOut{out, logsumexp, it.b, it.h, it.bh, NH, HS, T}, o, m, l, row0, lane % 4,
                    scale_log2);
            t = next;
        }
    }
}

// ================================================================================================
// Backward. Same notation as flash.cu's backward (read its comment first): per head, with
// P = exp2(S * scale*log2e - logsumexp*log2e) recomputed from Q, K and the forward's logsumexp,
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D) with D[q] = sum dO[q] O[q],
//   dK = scale dS^T Q,  dQ = scale dS K
// Three kernels: flash.cu's prep (D, logsumexp*log2e; the dQ sums zeroed, except in the
// deterministic mode, where each query tile's first key block stores its part), this one, flash.cu's
// convert (the fp32 dQ sums, times scale, to bf16 in dqkv).
//
// ---- the tile picture: one work item = one key/value block of BC = 128 rows of one head ---------
//
//   global ──TMA──► shared memory                               registers (per consumer warpgroup)
//                   ┌───────────────┐
//   K, V rows  ───► │ K, V 128 x HS │ rows 64c..64c+63 ──► consumer c: dK, dV (64 x HS fp32) for
//   kv0..kv0+127    │ (resident)    │                       the whole item
//                   ├───────────────┤  full[s] / empty[s]
//   Q, dO, lse, D ─►│ stage s of 2  │ ─────────────────► per query tile of BR rows (BR = 128 at
//   of query tile i │ Q, dO BR x HS │                      HS = 64, 64 at HS = 128):
//   (i = the block's│ lse, D  BR    │                      S^T = K Q^T, dP^T = V dO^T  (wgmma, SS*)
//    diagonal..end) └───────────────┘                      P^T = exp2(..), dS^T = P^T (dP^T - D)
//                   ┌───────────────┐                      dV += P^T dO, dK += dS^T Q (wgmma, RS)
//                   │ dS^T 128 x BR │ ◄── both consumers' dS^T ──┘
//                   │ (2 buffers)   │ ──► dQ_i = dS K: consumer c computes 64 x 64 of it (SS, both
//                   ├───────────────┤      operands transposed), -> shared memory, swizzled; at
//                   │               │      HS = 128 a fourth warpgroup computes all of it
//                   │               │      (BwdShape::DQ_WG), with a staging of its own
//                   │ dQ staging    │ ──► writer thread: TMA reduce-add into the fp32 dQ sums
//                   │               │      (B, T, NH, HS); `deterministic`: in a fixed order,
//                   │               │      a tile's first part stored (no zeroing beforehand);
//                   └───────────────┘      at an item's end dK, dV, TMA-stored into dqkv
//
//   producer warpgroup (24 registers): thread 0 issues every load (K, V once; then the ring),
//   thread 32 issues every dQ reduction (at HS = 128 every other step's, thread 64 the others)
//   and dK/dV store; consumers 1, 2 (240 registers; 208 at HS = 128, where warpgroup 3, with 72,
//   computes dQ).
//
// Why this shape (FlashAttention-3's backward, arXiv 2407.08608, is the same plan):
// - Key/value-outer: dK and dV stay in registers for the whole item and are written once; only
//   dQ, whose rows are shared between key blocks, is summed across CTAs.
// - The products are transposed (S^T, dP^T: key rows are the wgmma M rows), so P^T and dS^T come
//   out of the accumulators already as the A operands (from registers) of dV and dK.
// - dQ needs dS with queries as rows and all 128 keys as the reduction: it has to pass through
//   shared memory once, written by both consumers (one named barrier a step; at HS = 128 an
//   mbarrier to the dQ warpgroup), double-buffered so that a consumer may write step i+1's dS^T
//   while the other still reads step i's.
// - dQ is added with TMA reductions (one instruction per 64 x 32 box, element-wise atomic in L2)
//   from a swizzled staging tile: no per-thread atomics, and a fixed order is one flag per
//   query tile away (deterministic mode: a key block adds after the blocks handed out before
//   it, so the waits cannot deadlock; the writer's comment gives the order).
// - Tiles: BC = 128 keys (two consumers of 64); BR = 128 queries at HS = 64 (S^T and dP^T take
//   128 registers, dK and dV 64) and 64 at HS = 128 (dK and dV take 128).
//
// ---- per consumer, per step (query tile i, ring stage s) -----------------------------------------
//   wait full[s]; wait for my turn; issue S^T = K Q^T, dP^T = V dO^T; pass the turn
//   fence; arrive dq_full[c] (step i-1's dQ part, staged at its end, goes to the writer)
//   wait S^T: P^T (exp2, causal mask on the diagonal tiles); wait dP^T: dS^T
//   issue dV += P^T dO, dK += dS^T Q (A from registers); dS^T -> shared (buffer i % 2; at
//   HS = 64 before the issue); fence; named barrier with the other consumer
//   issue dQ_part = dS K; wait all; arrive empty[s]
//   wait dq_empty[c]; dQ_part -> staging
// (* At HS = 64 S^T's A operand, the consumer's 64 K rows, is loaded into registers once an item,
// after kv_full: RS.)
// At HS = 128 (BwdShape::DQ_WG): dP^T is issued after P^T (the registers), no dQ hand-over, and
// after the dV, dK issue: wait ds_free[i % 2]; dS^T -> shared; fence; arrive ds_full[i % 2];
// wait all; arrive empty[s]. The dQ warpgroup, per step: wait ds_full; dQ_i = dS K, 64 columns
// at a time, arrive ds_free after the last; wait dqw_empty; -> its staging; arrive dqw_full.
// ================================================================================================

constexpr int kDqBoxBytes = 64 * 128;   // a TMA box of dQ sums: 64 rows x 32 fp32

template <int HS>
struct BwdShape {
    static constexpr int BC = 128;                   // key/value rows of a CTA, 64 per consumer
    static constexpr int BR = HS == 64 ? 128 : 64;   // query rows of a step
    // dQ = dS K in a fourth warpgroup (HS = 128): the consumers no longer compute it, wait for
    // each other's dS^T or stage it (fwd+bwd 2-5% faster from T = 2,048 to 65,536, level at
    // 1,024: docs/PERF.md, sixteenth session, call 4; at HS = 64 the consumers' 128 registers of
    // S^T and dP^T leave no room for it)
    static constexpr bool DQ_WG = HS == 128 && FLASH_SM90_DQ_WG;
    static constexpr int THREADS = DQ_WG ? 512 : 384;   // producer warpgroup + 2 consumers (+ dQ)
    static constexpr int COMPUTE_THREADS = THREADS - 128;   // the consumers (and dQ warpgroup)
    // Registers: 128*24 + 256*240 = 64,512 of 65,536 with three warpgroups; with the dQ
    // warpgroup 128*24 + 256*208 + 128*72 = 65,536. By ptxas (-Xptxas -v):
    // - the dQ warpgroup's 64 x 64 products (32 accumulators) need more than 56: below 72 its
    //   setmaxnreg is ignored (C7507) and the whole kernel runs at 128 registers and spills.
    //   64 x 32 products fit at 56 but read dS^T from shared memory four times, not twice (1-4%
    //   slower, call 3);
    // - the consumers need 224 with S^T and dP^T in flight together (C7512, serialized wgmma,
    //   at 216), 216 with dP^T issued after P^T (P^T then held as bf16: see the consumer), and
    //   at 208 kept 3 values a step in local memory (20 bytes, L1), the price of the 72, until
    //   dV was issued with dP^T (eighteenth session): no consumer spill since. (The deterministic
    //   kernel's 24 bytes are the writers', at kProducerRegs.)
    static constexpr int CONSUMER_REGS = DQ_WG ? 208 : 240;
    static constexpr int DQ_WG_REGS = 72;
    static_assert(128 * (kProducerRegs + 2 * CONSUMER_REGS + (DQ_WG ? DQ_WG_REGS : 0)) <= 65536,
                  "registers of one CTA");
    static constexpr int STAGES = 2;                 // Q/dO ring (3 do not fit beside the rest)
    // dS^T stored before dV and dK are issued (the stores drain under the issue): 2-4% faster
    // at HS = 64, 1-3% slower at HS = 128 (docs/PERF.md, "Hopper backward", second round; with
    // the dQ warpgroup too, sixteenth session, call 3)
    static constexpr bool DS_FIRST = HS == 64;
    static_assert(!(DS_FIRST && DQ_WG), "with the dQ warpgroup dS^T is stored after ds_free's wait");
    static constexpr int PANELS = HS / kPanelCols;
    static constexpr int KV_BYTES = BC * HS * 2;        // K or V
    static constexpr int QT_BYTES = BR * HS * 2;        // one stage's Q or dO
    static constexpr int VEC_BYTES = BR * 4;            // one stage's lse*log2e or D
    static constexpr int DS_BYTES = BC * BR * 2;        // dS^T, [BR/64 panels][BC][64]
    static constexpr int DQ_BOX_BYTES = kDqBoxBytes;
    static constexpr int DQ_PART_BYTES = 2 * DQ_BOX_BYTES;   // a consumer's 64 x 64 of dQ
    // at an item's end the staging takes the consumer's dK, dV: 64 x 64 bf16 panels (8 KB, a
    // box's bytes), dK's HS/64 then dV's, two a round
    static constexpr int DKV_ROUNDS = PANELS;
    // consumer c's part of the BR x HS dQ tile: rows dq_row(c).., columns dq_col(c)..
    __device__ static constexpr int dq_row(int c) { return BR == 128 ? 64 * c : 0; }
    __device__ static constexpr int dq_col(int c) { return BR == 128 ? 0 : 64 * c; }
    // shared memory, every offset a multiple of 1024 (the swizzle's period)
    static constexpr int K_OFF = 0, V_OFF = KV_BYTES, Q_OFF = 2 * KV_BYTES,
                         DO_OFF = Q_OFF + STAGES * QT_BYTES, DS_OFF = DO_OFF + STAGES * QT_BYTES,
                         DQ_OFF = DS_OFF + 2 * DS_BYTES, DQW_OFF = DQ_OFF + 2 * DQ_PART_BYTES,
                         LSE_OFF = DQW_OFF + (DQ_WG ? BR * HS * 4 : 0),
                         D_OFF = LSE_OFF + STAGES * VEC_BYTES, TRACE_OFF = D_OFF + STAGES * VEC_BYTES,
                         BYTES = TRACE_OFF + kTraceBytes;
    static constexpr size_t SMEM = 1024 + BYTES;
    static_assert(SMEM <= 227 * 1024, "shared memory of one CTA");
    static_assert(BR % 64 == 0 && BC == 128, "dQ parts and dS^T panels assume these");
};

// dq (64 x 64) = dS K for one consumer: A = dS, read from dS^T's panel at `ds` (64 queries x BC
// keys, MN-major), B = K's panel at `k` (BC keys x 64 columns, MN-major)
template <int BC>
__device__ __forceinline__ void gemm_dsk(float (&dq)[32], uint32_t ds, uint32_t k) {
    const uint64_t dds = smem_desc(ds, BC * 128, 1024), dk = smem_desc(k, BC * 128, 1024);
#pragma unroll
    for (int kc = 0; kc < BC / 16; kc++)
        wgmma_ss<1>(dq, desc_advance(dds, kc * 16 * 128), desc_advance(dk, kc * 16 * 128), kc > 0);
}

// a 64 x 64 part of dQ (a warpgroup's accumulator) -> staging: two 64 x 32 fp32 TMA boxes
// (kDqBoxBytes apart) in TMA's 128-byte swizzle, for the writer's reduce-adds.
// A 64-bit store is served a half-warp at a time: lanes g = 0..3 (rows r, r % 8 = g) x t = 0..3,
// a row's four lanes 32 bytes (two 16-byte chunks) of one 8-column group. The swizzle permutes
// rows 0..3's chunk positions 0..3 among themselves, so with every lane on the same group 16
// lanes fall on 4 positions: two wavefronts a half-warp. So the odd rows store the group two
// further on (their chunks 4..7, swizzled to positions 4..7) while the even rows store their
// own, and the next store the other way round: 8 distinct positions, one wavefront, the same
// bytes in the same places (fwd+bwd 1.5-2.7% faster at HS=128 deterministic from T = 16,384 and
// 2.5% at the d12 step's shape, HS=64; level elsewhere: docs/PERF.md, twentieth session, call 4).
// The box layout stays TMA's 128-byte rows: 32-byte rows made the reduce-adds slower (nineteenth
// session, c1).
__device__ __forceinline__ void stage_dq(unsigned char *staging, const float (&dq)[32], int warp,
                                         int g, int t) {
    const bool odd = g & 1;
    const uint32_t flip = odd ? 64u : 0u;   // two groups on = +64 bytes = chunk ^ 4 = offset ^ 64
#pragma unroll
    for (int b = 0; b < 2; b++)   // box (columns 32b..)
#pragma unroll
        for (int h = 0; h < 2; h++)   // row half (Frag::row)
#pragma unroll
            for (int k0 = 0; k0 < 2; k0++) {   // groups 4b + k0 (accumulators ia) and 4b + k0 + 2 (ib)
                const int ia = 4 * (4 * b + k0) + 2 * h, ib = ia + 8;
                const int row = 16 * warp + g + 8 * h;
                unsigned char *box = staging + b * kDqBoxBytes;
                const uint32_t off = swizzle_128b(row, (8 * k0 + 2 * t) * 4);   // group 4b + k0's
                const float2 va = make_float2(dq[ia], dq[ia + 1]), vb = make_float2(dq[ib], dq[ib + 1]);
                *reinterpret_cast<float2 *>(box + (off ^ flip)) = odd ? vb : va;
                *reinterpret_cast<float2 *>(box + (off ^ flip ^ 64u)) = odd ? va : vb;
            }
}

// Work items: (key/value blocks) x (B*NH), numbered key block 0 of every head first (under the
// causal mask it sees every query tile: the longest first, the short ones fill the tail), in
// groups of `group` key blocks: the items of group s are key blocks s*group.. of every head, one
// head's blocks in a row, the last first. A head's consecutive blocks are then handed out one
// after the other, their CTAs sweep the same query tiles a step or two apart, and the later
// ones find the Q, dO tiles and the dQ sums the first brought into L2 (with group = 1 they came
// B*NH items apart: at short T, where B*NH is large, 768 heads in a d12 B=64 step, after the
// head's tiles had left L2; ncu at T = 1,024: 44% -> 69% L2 hits, half the DRAM bytes).
// Every item, a CTA's first too, is taken from a counter (items are handed out in increasing
// order, to whichever CTA gets to the end of its loads first), so an item is only ever held by a
// CTA that runs, and the deterministic mode's waits, on items handed out earlier, end whatever
// share of the grid is resident (with CTA i's first item fixed as item i, an item could be held
// by a CTA still waiting for an SM; timed level, docs/PERF.md, sixteenth session). With
// a grid of one CTA per item each CTA does one; with a grid of one CTA per SM (persistent,
// backward_launch) each does several, and the next item's K, V and first Q, dO tiles load while
// the consumers write the last item's dK, dV: at T = 1,024 an item is 4.5 query tiles on
// average, and a CTA's start and end, unoverlapped, are a large part of its time.
// A key block's steps go over its query tiles upward (its diagonal tile first) or, from
// FLASH_SM90_BWD_DESC_T on, downward (the last tile first). That matters to the deterministic
// order (the writer's comment), which is the same either way. Upward, the blocks handed out
// together start at different tiles, block b at its diagonal, and where a head has many groups
// at once (long T) a later group's block waits at its first tile for block 0 to get there: at
// T = 16,384, HS=128 the first 132 items are key blocks 0..21 of 6 heads, block 21 idles 42
// steps and the whole wave ends with block 0 (16% more time in a model of it, 14% by ncu).
// Downward, every block of a head is on the same tile at the same step, and the order costs one
// addition's round trip per block ahead of it, once. At short T, a head's few groups have no
// wavefront, and downward a group's blocks, on one tile together, wait on each other where
// upward each was a tile or two apart.
template <int HS, bool DETERMINISTIC>
__global__ void __launch_bounds__(BwdShape<HS>::THREADS, 1)
    flash_backward_sm90_kernel(const __grid_constant__ CUtensorMap q_map,    // qkv, BR-row boxes
                               const __grid_constant__ CUtensorMap kv_map,   // qkv, BC-row boxes
                               const __grid_constant__ CUtensorMap do_map,   // dout, BR-row boxes
                               const __grid_constant__ CUtensorMap dq_map,   // dQ sums, 64 x 32
                               const __grid_constant__ CUtensorMap dkv_map,  // dqkv, 64-row boxes
                               const float *__restrict__ lse2,
                               const float *__restrict__ Dg, uint32_t *__restrict__ dq_flags,
                               uint32_t *__restrict__ next_item, int T, int Tpad, int NH, int BNH,
                               int group, int descending, float scale, float scale_log2) {
    // Stages (the tile picture and the per-step list in the comment above):
    //   producer (thread 0): per item K, V once, then Q, dO, lse, D of each query tile (the ring)
    //   writer (thread 32; at HS = 128 with thread 64, even and odd steps): each step's dQ, TMA
    //     reduce-added into the fp32 sums; each item's dK, dV, TMA-stored (thread 32)
    //   consumer c (key rows 64c..), per query tile: S^T, dP^T -> P^T (causal on the diagonal),
    //     dS^T -> dV += P^T dO, dK += dS^T Q; dS^T -> shared -> dQ part = dS K -> staging
    //   per item: dK * scale, dV -> staging -> the writer
    using S = BwdShape<HS>;
    constexpr int BC = S::BC, BR = S::BR, STAGES = S::STAGES;
    constexpr int WRITER2 = S::DQ_WG && FLASH_SM90_TWO_WRITERS;
    extern __shared__ unsigned char smem_raw[];
    __shared__ uint64_t kv_full, kv_empty, full[STAGES], empty[STAGES], dq_full[2], dq_empty[2];
    __shared__ uint64_t ds_full[2], ds_free[2], dqw_full[2], dqw_empty;   // S::DQ_WG
    __shared__ ItemRing items_ring;   // the producer's items to the consumers and the writer
    // the dynamic shared memory, 1024-aligned: as a generic pointer and as a shared address
    unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    const uint32_t base = smem_addr(smem);

    const int q_tiles = (T + BR - 1) / BR;
    const int kv_blocks = (T + BC - 1) / BC, items = kv_blocks * BNH;
    // item t: key/value rows kv0.. of head h, batch b; its steps are the query tiles
    // first_tile..q_tiles-1 (earlier queries see none of the block's keys)
    struct Item {
        int bh, kv_block, group_first, group_last, b, h, kv0, first_tile, steps;
    };
    auto item = [&](int t) {
        Item it;
        it.group_first = t / (group * BNH) * group;
        it.group_last = min(it.group_first + group, kv_blocks) - 1;   // the last group: fewer
        const int width = it.group_last - it.group_first + 1;
        const int r = t - it.group_first * BNH;
        it.bh = r / width;
        it.kv_block = it.group_last - r % width;   // a group's last block first (see the writer)
        it.b = it.bh / NH;
        it.h = it.bh % NH;
        it.kv0 = it.kv_block * BC;
        it.first_tile = it.kv0 / BR;
        it.steps = q_tiles - it.first_tile;
        return it;
    };
    // the query tile of an item's step: first_tile up to the last, or (descending) down to it
    auto tile_of = [&](const Item &it, int step) {
        return descending ? q_tiles - 1 - step : it.first_tile + step;
    };
    // the warpgroup, broadcast from lane 0 so that the compiler knows it is warp-uniform and keeps
    // what derives from it (operand addresses, wgmma descriptors) in uniform registers
    const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);

    if (threadIdx.x == 0) {
        mbar_init(&kv_full, 1);
        mbar_init(&kv_empty, S::COMPUTE_THREADS);
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 256);
        }
        for (int c = 0; c < 2; c++) {
            mbar_init(&dq_full[c], 128);
            mbar_init(&dq_empty[c], 1);
        }
        if (S::DQ_WG) {
            for (int b = 0; b < 2; b++) {
                mbar_init(&ds_full[b], 256);
                mbar_init(&ds_free[b], 128);
            }
            mbar_init(&dqw_full[0], 128);
            mbar_init(&dqw_full[1], 128);
            mbar_init(&dqw_empty, 1);
        }
        items_ring.init(S::COMPUTE_THREADS + 1 + WRITER2);   // and the writer(s)
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {
        setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x == 0) {
            // ---- producer. Tensor-map coordinates: {column, part * NH + head, row, batch} in
            // qkv (part 0, 1, 2 = q, k, v), {column, head, row, batch} in dout. `ring` counts
            // the CTA's steps over all its items: the ring's stages and phases run on across them.
            Trace trace(smem + S::TRACE_OFF, 0);
            int ring = 0, t = atomicAdd(next_item, 1u);
            for (int n = 0;; n++) {
                items_ring.publish(n, t);
                trace(kTrPItem);
                if (t >= items) break;
                const Item it = item(t);
                if (n > 0) mbar_wait(&kv_empty, (n - 1) & 1);   // the last item's K, V are read
                trace(kTrPKVEmpty);
                mbar_arrive_expect_tx(&kv_full, 2 * S::KV_BYTES);
                for (int p = 0; p < S::PANELS; p++) {
                    const uint32_t off = p * BC * kRowBytes;
                    tma_load_4d(base + S::K_OFF + off, &kv_map, &kv_full, p * kPanelCols,
                                NH + it.h, it.kv0, it.b);
                    tma_load_4d(base + S::V_OFF + off, &kv_map, &kv_full, p * kPanelCols,
                                2 * NH + it.h, it.kv0, it.b);
                }
                for (int step = 0; step < it.steps; step++, ring++) {
                    const RingSlot<STAGES> slot(ring);
                    const int q0 = tile_of(it, step) * BR;
                    mbar_wait(&empty[slot.stage], slot.parity ^ 1);
                    trace(kTrPEmpty, step);
                    mbar_arrive_expect_tx(&full[slot.stage], 2 * S::QT_BYTES + 2 * S::VEC_BYTES);
                    for (int p = 0; p < S::PANELS; p++) {
                        const uint32_t off = slot.stage * S::QT_BYTES + p * BR * kRowBytes;
                        tma_load_4d(base + S::Q_OFF + off, &q_map, &full[slot.stage],
                                    p * kPanelCols, it.h, q0, it.b);
                        tma_load_4d(base + S::DO_OFF + off, &do_map, &full[slot.stage],
                                    p * kPanelCols, it.h, q0, it.b);
                    }
                    const size_t vec = (size_t)it.bh * Tpad + q0;
                    bulk_load(base + S::LSE_OFF + slot.stage * S::VEC_BYTES, lse2 + vec,
                              S::VEC_BYTES, &full[slot.stage]);
                    bulk_load(base + S::D_OFF + slot.stage * S::VEC_BYTES, Dg + vec, S::VEC_BYTES,
                              &full[slot.stage]);
                    trace(kTrPIssued, step);
                }
                t = atomicAdd(next_item, 1u);   // the next item, once these are issued
            }
            trace.flush(smem + S::TRACE_OFF);
        } else if (threadIdx.x == 32 || (WRITER2 && threadIdx.x == 64)) {
            // ---- writer: each step's two 64 x 64 dQ parts, reduce-added into the fp32 sums (stored
            // by a tile's first key block in the deterministic mode); at an item's end its dK, dV,
            // stored into dqkv (`staged` counts the staging's uses)
            // WRITER2: thread 32 takes the CTA's even steps, 64 the odd ones (their own dqw_full,
            // so that neither waits on a phase of the other's; dqw_empty's arrivals alternate)
            const int wr = threadIdx.x == 64;
            Trace trace(smem + S::TRACE_OFF, wr ? -1 : 3);
            int staged = 0, dq_staged = 0;   // uses of the consumers' / the dQ warpgroup's staging
            for (int n = 0;; n++) {
                const int t = items_ring.take(n);
                trace(kTrWItem);
                if (t >= items) break;
                const Item it = item(t);
                for (int step = 0; step < it.steps; step++) {
                    const int cta_step = dq_staged++;   // (DQ_WG: the CTA's steps over its items)
                    if (WRITER2 && (cta_step & 1) != wr) continue;   // the other writer's
                    const int tile = tile_of(it, step), q0 = tile * BR;
                    uint32_t *flag = dq_flags + (size_t)it.bh * q_tiles + tile;
                    bool first = false;   // the tile's first addition (deterministic): a store
                    if (DETERMINISTIC) {
                        // The tile's order: the key blocks of earlier groups (all of them reach
                        // this tile), then the group's, last first, as they were handed out, so
                        // that no CTA waits on a block handed out after its own (no deadlock),
                        // and a group's blocks, which start together, each one tile behind the
                        // one before (upward sweep), wait on nobody. Those of my group after me
                        // that reach the tile: up to block tile * BR / BC.
                        const int reach = min(it.group_last, tile * BR / BC);
                        const uint32_t before = it.group_first + reach - it.kv_block;
                        first = before == 0;
                        while (load_acquire(flag) != before) {
                        }
                        fence_proxy_async_global();
                        trace(kTrWFlag, step);
                    }
                    // the first of a tile's key blocks stores: the sums need no zeroing
                    // beforehand (the prep skips it), and no zeros are read back
                    auto add_box = [&](uint32_t box, int col, int row) {
                        if (first) tma_store_4d(&dq_map, box, col, it.h, row, it.b);
                        else tma_reduce_add_4d(&dq_map, box, col, it.h, row, it.b);
                    };
                    if (S::DQ_WG) {   // the whole BR x HS tile, HS / 32 boxes
                        mbar_wait(&dqw_full[WRITER2 ? cta_step & 1 : 0],
                                  (WRITER2 ? cta_step >> 1 : cta_step) & 1);
                        trace(kTrWFull, step);
                        for (int x = 0; x < HS / 32; x++)
                            add_box(base + S::DQW_OFF + x * S::DQ_BOX_BYTES, 32 * x, q0);
                    } else {
                        for (int c = 0; c < 2; c++) {
                            mbar_wait(&dq_full[c], staged & 1);
                            if (c == 1) trace(kTrWFull, step);
                            for (int x = 0; x < 2; x++)
                                add_box(base + S::DQ_OFF + c * S::DQ_PART_BYTES + x * S::DQ_BOX_BYTES,
                                        S::dq_col(c) + 32 * x, q0 + S::dq_row(c));
                        }
                    }
                    tma_commit();
                    tma_wait_read();   // staging read: the next step's may be written
                    trace(kTrWRead, step);
                    if (S::DQ_WG) {
                        mbar_arrive(&dqw_empty);
                    } else {
                        mbar_arrive(&dq_empty[0]);
                        mbar_arrive(&dq_empty[1]);
                        staged++;
                    }
                    if (DETERMINISTIC) {   // added: the next block in the tile's order may go
                        tma_wait();
                        fence_proxy_async_global();
                        add_release(flag, 1);
                    }
                }
                if (wr) continue;   // (the first writer stores dK, dV)
                // dK, dV: consumer c's 64 key rows, in rounds of two 64-column panels (S::DKV_ROUNDS)
                for (int r = 0; r < S::DKV_ROUNDS; r++, staged++) {
                    for (int c = 0; c < 2; c++) {
                        mbar_wait(&dq_full[c], staged & 1);
                        if (c == 1) trace(kTrWDKVFull, r);
                        for (int x = 0; x < 2; x++) {
                            const int panel = 2 * r + x, part = 1 + panel / S::PANELS;   // 1 K, 2 V
                            tma_store_4d(&dkv_map,
                                         base + S::DQ_OFF + c * S::DQ_PART_BYTES + x * S::DQ_BOX_BYTES,
                                         (panel % S::PANELS) * kPanelCols, part * NH + it.h,
                                         it.kv0 + 64 * c, it.b);
                        }
                    }
                    tma_commit();
                    tma_wait_read();
                    trace(kTrWDKVRead, r);
                    mbar_arrive(&dq_empty[0]);
                    mbar_arrive(&dq_empty[1]);
                }
            }
            tma_wait();
            trace.flush(smem + S::TRACE_OFF);
        }
    } else if (!S::DQ_WG || wg < 3) {
        // ---- consumer c: key rows kv0 + 64c .. kv0 + 64c + 63 of each of the CTA's items
        setmaxnreg_inc<S::CONSUMER_REGS>();
        const int c = wg - 1;
        const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
        const int g = lane / 4, t = lane % 4;
        const uint32_t k_rows = base + S::K_OFF + 64 * c * kRowBytes;
        const uint32_t v_rows = base + S::V_OFF + 64 * c * kRowBytes;
        // Ping-pong: the consumers take turns to issue S^T and dP^T (named barriers 2, 3),
        // consumer 0 first, so that one's exponentials run while the other's products do;
        // consumer 1 skips its last hand-over of an item so that every wait has one arrival to
        // match.
        auto my_turn = [&]() {
            if (FLASH_SM90_PINGPONG) named_bar_sync(2 + c, 256);
        };
        auto your_turn = [&]() {
            if (FLASH_SM90_PINGPONG) named_bar_arrive(2 + (c ^ 1), 256);
        };
        // the staged dQ part goes to the writer: its stores made visible to TMA, then signalled
        auto hand_over_dq = [&]() {
            fence_proxy_async_shared();
            mbar_arrive(&dq_full[c]);
        };

        // (the trace: warp 0, lane 0 of each consumer)
        Trace trace(smem + S::TRACE_OFF, threadIdx.x % 128 == 0 ? 1 + c : -1);
        int ring = 0;     // the CTA's steps over all its items (ring stages, dS^T buffers)
        int staged = 0;   // uses of this consumer's staging (each step's dQ part, each dK/dV round)
        for (int n = 0;; n++) {
            const int ti = items_ring.take(n);
            if (ti >= items) break;
            const Item it = item(ti);
            trace(kTrItem, it.steps);
            const int kv0 = it.kv0, steps = it.steps;
            const int key0 = kv0 + 64 * c + 16 * warp + g;   // the thread's key rows: key0, key0 + 8
            float dk[HS / 2], dv[HS / 2];
#pragma unroll
            for (int i = 0; i < HS / 2; i++) dk[i] = dv[i] = 0.0f;
            if (c == 1) your_turn();
            mbar_wait(&kv_full, n & 1);
            trace(kTrKV);
            // HS = 64: this consumer's 64 K rows, the A operand of every step's S^T, held in
            // registers for the item (16 a thread, loaded once) rather than read from shared
            // memory each step: S^T then reads 64 bytes a cycle of shared memory where it read
            // 96 (fwd+bwd 1-2% faster from T = 2,048 to 65,536 in two calls; at the d12 step's
            // shape level to 2.6%). V's 16 more, for dP^T, do not fit beside S^T and dP^T in
            // flight (ptxas spills; 15-20% slower). At HS = 128 the consumers have no 32
            // registers to spare. (docs/PERF.md, twenty-first session, calls 2 and 3)
            constexpr bool K_REGS = !S::DQ_WG;
            uint32_t ka[K_REGS ? HS / 4 : 1];
            if constexpr (K_REGS) load_a<HS, BC>(ka, smem + S::K_OFF + 64 * c * kRowBytes, warp, g, t);

            for (int step = 0; step < steps; step++, ring++) {
                const RingSlot<STAGES> slot(ring);
                const int q0 = tile_of(it, step) * BR;
                const uint32_t q = base + S::Q_OFF + slot.stage * S::QT_BYTES;
                const uint32_t dO = base + S::DO_OFF + slot.stage * S::QT_BYTES;
                const float *lse_s = reinterpret_cast<const float *>(smem + S::LSE_OFF) + slot.stage * BR;
                const float *D_s = reinterpret_cast<const float *>(smem + S::D_OFF) + slot.stage * BR;

                // S^T = K Q^T, dP^T = V dO^T (64 keys x BR queries each)
                float s[BR / 2], dp[BR / 2];
                mbar_wait(&full[slot.stage], slot.parity);
                trace(kTrFull, step);
                my_turn();
                trace(kTrTurn, step);
                wgmma_fence();
                if constexpr (K_REGS) gemm_rbt<HS, BR>(s, ka, q);
                else gemm_abt<HS, BR, BC, BR>(s, k_rows, q);
                wgmma_commit();
                if constexpr (!S::DQ_WG) {
                    gemm_abt<HS, BR, BC, BR>(dp, v_rows, dO);
                    wgmma_commit();
                }
                if (c == 0 || step + 1 < steps) your_turn();
                // the last step's dQ part, now that the fence's wait for its stores overlaps the
                // products above
                if (!S::DQ_WG && step > 0) hand_over_dq();
                trace(kTrIssued, step);

                // P^T = exp2(S^T * scale*log2e - lse[query]*log2e), 0 where the key is after the
                // query (only in tiles that cross this consumer's diagonal). Columns are queries:
                // the thread's are 8j + 2t + {0, 1}. Query rows past T were loaded as zeros, with
                // lse = D = 0: P = 1 there, but dO = 0 and dS = 1 * (0 - 0) = 0 add nothing.
                // At HS = 128 lse (and D below) are read into registers before the product's wait:
                // read after it, as the wait's memory clobber keeps them, the exponentials and
                // dS^T waited out the loads' latency (18% of the consumers' stall samples, ncu).
                // At HS = 64 those registers cost more than they save (docs/PERF.md, eighteenth
                // session, call 4).
                float2 lse_r[BR / 8];
                if constexpr (S::DQ_WG) {
#pragma unroll
                    for (int j = 0; j < BR / 8; j++)
                        lse_r[j] = *reinterpret_cast<const float2 *>(lse_s + 8 * j + 2 * t);
                }
                wgmma_wait<S::DQ_WG ? 0 : 1>();
                fence_regs(s);
                const bool diagonal = q0 < kv0 + 64 * c + 63;
#pragma unroll
                for (int j = 0; j < BR / 8; j++) {
                    const float2 l = S::DQ_WG ? lse_r[j]
                                              : *reinterpret_cast<const float2 *>(lse_s + 8 * j + 2 * t);
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = 4 * j + e;
                        float p = exp2f(fmaf(s[i], scale_log2, -((e & 1) ? l.y : l.x)));
                        if (diagonal && causal_hidden(q0 + 2 * t + Frag::col(i), key0 + Frag::row(i)))
                            p = 0.0f;
                        s[i] = p;
                    }
                }
                trace(kTrP, step);
                uint32_t pa[BR / 4], dsa[BR / 4];
                float2 d_r[BR / 8];
                if constexpr (S::DQ_WG) {
                    // dP^T issued only now, with P^T held as bf16 (16 registers where S^T took
                    // 32): CONSUMER_REGS do not hold S^T and dP^T in flight beside dK and dV
                    // (ptxas C7512). dS^T is then made from the bf16 P^T that dV uses. dV += P^T
                    // dO goes right after it, not with dK after dS^T: its product then runs
                    // while dS^T is computed (fwd+bwd 5% faster unordered, 1% deterministic at
                    // T = 8,192-16,384; no spill where there were 20 bytes. At HS = 64, where
                    // S^T and dP^T are issued together, 1-3% slower: docs/PERF.md, eighteenth
                    // session, calls 3-4).
                    pack_a(pa, s);
                    unpack_a(s, pa);   // (before the issue: pa is dV's A operand until it is done)
                    wgmma_fence();
                    gemm_abt<HS, BR, BC, BR>(dp, v_rows, dO);
                    wgmma_commit();
                    gemm_rab<HS, BR, BR>(dv, pa, dO);
                    wgmma_commit();
#pragma unroll
                    for (int j = 0; j < BR / 8; j++)
                        d_r[j] = *reinterpret_cast<const float2 *>(D_s + 8 * j + 2 * t);
                }
                // dS^T = P^T * (dP^T - D[query])
                wgmma_wait<S::DQ_WG ? 1 : 0>();   // (HS = 128: dV may still run)
                fence_regs(dp);
#pragma unroll
                for (int j = 0; j < BR / 8; j++) {
                    const float2 d = S::DQ_WG ? d_r[j]
                                              : *reinterpret_cast<const float2 *>(D_s + 8 * j + 2 * t);
#pragma unroll
                    for (int e = 0; e < 4; e++) dp[4 * j + e] = s[4 * j + e] * (dp[4 * j + e] - ((e & 1) ? d.y : d.x));
                }
                if constexpr (!S::DQ_WG) pack_a(pa, s);
                pack_a(dsa, dp);
                trace(kTrDS, step);

                // dS^T -> shared, as the MN-major A operand of dS K: [query panel][key row][64]
                // (dsa[k] holds key row 8*(k%2) and queries 8*(k/2) + 2t, +1 of the thread's)
                unsigned char *ds_tile = smem + S::DS_OFF + (ring & 1) * S::DS_BYTES;
                auto store_ds = [&]() {
#pragma unroll
                    for (int k = 0; k < BR / 4; k++) {
                        const int row = 64 * c + 16 * warp + g + 8 * (k & 1);
                        const int col = 8 * (k >> 1) + 2 * t;
                        *reinterpret_cast<uint32_t *>(ds_tile + (col / 64) * BC * kRowBytes +
                                                      swizzle_128b(row, (col % 64) * 2)) = dsa[k];
                    }
                };
                if (S::DS_FIRST) store_ds();

                // dV += P^T dO (HS = 64; at 128 issued above), dK += dS^T Q
                wgmma_fence();
                if constexpr (!S::DQ_WG) gemm_rab<HS, BR, BR>(dv, pa, dO);
                gemm_rab<HS, BR, BR>(dk, dsa, q);
                wgmma_commit();

                if constexpr (S::DQ_WG) {
                    // dS^T to the dQ warpgroup (once it has done with the buffer's last step)
                    mbar_wait(&ds_free[ring & 1], ((ring >> 1) & 1) ^ 1);
                    store_ds();
                    fence_proxy_async_shared();
                    mbar_arrive(&ds_full[ring & 1]);
                    trace(kTrBar, step);
                    wgmma_wait<0>();
                    fence_regs(dv);
                    fence_regs(dk);
                    fence_regs(pa);
                    fence_regs(dsa);
                    trace(kTrDQ, step);
                    mbar_arrive(&empty[slot.stage]);   // Q, dO, lse, D of this stage are no longer read
                    trace(kTrStepEnd, step);
                    continue;
                }
                if (!S::DS_FIRST) store_ds();
                fence_proxy_async_shared();
                named_bar_sync(1, 256);   // both consumers' dS^T are in
                trace(kTrBar, step);

                // this consumer's part of dQ_i = dS K
                float dq[32];
                wgmma_fence();
                gemm_dsk<BC>(dq, smem_addr(ds_tile) + (S::dq_row(c) / 64) * BC * kRowBytes,
                             base + S::K_OFF + (S::dq_col(c) / 64) * BC * kRowBytes);
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(dv);
                fence_regs(dk);
                fence_regs(dq);
                fence_regs(pa);
                fence_regs(dsa);
                trace(kTrDQ, step);
                mbar_arrive(&empty[slot.stage]);   // Q, dO, lse, D of this stage are no longer read

                // dQ part -> staging, two 64 x 32 fp32 boxes in TMA's 128-byte swizzle
                mbar_wait(&dq_empty[c], (staged++ & 1) ^ 1);
                trace(kTrDQEmpty, step);
                stage_dq(smem + S::DQ_OFF + c * S::DQ_PART_BYTES, dq, warp, g, t);
                // (handed to the writer at the next step, after its S^T and dP^T are issued)
                trace(kTrStepEnd, step);
            }
            if (!S::DQ_WG && steps > 0) hand_over_dq();
            mbar_arrive(&kv_empty);   // K and V no longer read: the producer may load the next item's

            // dK = scale * sum dS^T Q, dV = sum P^T dO, written once into packed dqkv: through
            // the staging, as 64 x 64 bf16 panels in TMA's 128-byte swizzle, stored by the writer.
            // Not stored from here: this thread's next fence.proxy.async (MEMBAR.ALL.CTA in SASS,
            // the dS^T store's, before the barrier with the other consumer) would wait for the
            // stores to complete, a memory latency an item on both consumers' path (a d12 B=64
            // step's attention 5% slower at HS=64, 7% at HS=128; docs/PERF.md, eighth session).
#pragma unroll
            for (int r = 0; r < S::DKV_ROUNDS; r++) {
                mbar_wait(&dq_empty[c], (staged++ & 1) ^ 1);
                trace(kTrDKVRound, r);
                unsigned char *staging = smem + S::DQ_OFF + c * S::DQ_PART_BYTES;
#pragma unroll
                for (int x = 0; x < 2; x++) {
                    const int panel = 2 * r + x;
                    const bool is_k = panel < S::PANELS;
                    const int col0 = (panel % S::PANELS) * kPanelCols;   // of the accumulator
#pragma unroll
                    for (int i = 0; i < HS / 2; i += 2) {
                        if (Frag::col(i) / kPanelCols != col0 / kPanelCols) continue;
                        const float a = is_k ? dk[i] * scale : dv[i];
                        const float a1 = is_k ? dk[i + 1] * scale : dv[i + 1];
                        const int row = 16 * warp + g + Frag::row(i), col = 2 * t + Frag::col(i) - col0;
                        *reinterpret_cast<uint32_t *>(staging + x * S::DQ_BOX_BYTES +
                                                      swizzle_128b(row, col * 2)) = pack_bf16(a, a1);
                    }
                }
                hand_over_dq();
            }
            trace(kTrItemEnd);
        }
        trace(kTrExit);
        trace.flush(smem + S::TRACE_OFF);
    } else if constexpr (S::DQ_WG) {
        // ---- dQ warpgroup (S::DQ_WG): per step, dQ_i = dS K (BR x HS) from both consumers' dS^T,
        // as HS / 64 products of 64 columns (32 accumulators; BwdShape says why), staged for the
        // writer
        setmaxnreg_dec<S::DQ_WG_REGS>();
        const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
        const int g = lane / 4, t = lane % 4;
        int ring = 0;   // the CTA's steps over all its items, as the consumers count them
        for (int n = 0;; n++) {
            const int ti = items_ring.take(n);
            if (ti >= items) break;
            const int steps = item(ti).steps;
            mbar_wait(&kv_full, n & 1);   // K of this item (its dS^T come after it anyway)
            for (int step = 0; step < steps; step++, ring++) {
                const uint32_t ds = base + S::DS_OFF + (ring & 1) * S::DS_BYTES;
                mbar_wait(&ds_full[ring & 1], (ring >> 1) & 1);
#pragma unroll
                for (int h = 0; h < S::PANELS; h++) {   // columns 64h..64h+63: boxes 2h, 2h + 1
                    float dq[32];
                    wgmma_fence();
                    gemm_dsk<BC>(dq, ds, base + S::K_OFF + h * BC * kRowBytes);
                    wgmma_commit();
                    wgmma_wait<0>();
                    fence_regs(dq);
                    if (h == S::PANELS - 1) mbar_arrive(&ds_free[ring & 1]);   // dS^T read
                    if (h == 0) mbar_wait(&dqw_empty, (ring & 1) ^ 1);          // staging free
                    stage_dq(smem + S::DQW_OFF + h * S::DQ_PART_BYTES, dq, warp, g, t);
                }
                fence_proxy_async_shared();
                mbar_arrive(&dqw_full[WRITER2 ? ring & 1 : 0]);
            }
            mbar_arrive(&kv_empty);   // K no longer read
        }
    }
}

// ---- host side ----------------------------------------------------------------------------------

// the maps of packed qkv (boxes of `rows` rows of one head's q, k or v) and of dout
const CUtensorMap *qkv_tensor_map(const bf16 *qkv, int B, int T, int NH, int HS, int rows) {
    return tensor_map_4d(qkv, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, HS, 3 * NH, T, B, kPanelCols, rows);
}

template <int HS, int CONSUMERS>
void forward_launch(bf16 *out, float *logsumexp, const bf16 *qkv, int B, int T, int NH) {
    using S = Shape<HS, CONSUMERS>;
    static bool smem_set = false;
    if (!smem_set) {
        CUDA_CHECK(cudaFuncSetAttribute(flash_forward_sm90_kernel<HS, CONSUMERS>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::SMEM));
        smem_set = true;
    }
    const int q_tiles = ceil_div(T, S::BR);
    const float scale_log2 = kLog2e / sqrtf((float)HS);
    const CUtensorMap q_map = *qkv_tensor_map(qkv, B, T, NH, HS, S::BR);
    const CUtensorMap kv_map = *qkv_tensor_map(qkv, B, T, NH, HS, kBC);
    // Persistent (one CTA per SM, each taking items from a counter) where items are short,
    // T <= FLASH_SM90_FWD_PERSISTENT_T: a CTA's start and end then weigh most. Beyond, one CTA
    // per item: items differ in length by up to T / kBC tiles, and a fixed share of them would
    // leave SMs idle at the end (the backward's first persistent grid measured that, docs/PERF.md).
    const int items = q_tiles * B * NH;
    const int blocks = T <= FLASH_SM90_FWD_PERSISTENT_T && items > cuda_num_sms ? cuda_num_sms : items;
    flash_forward_sm90_kernel<HS, CONSUMERS><<<blocks, S::THREADS, S::SMEM, cuda_stream>>>(
        q_map, kv_map, out, logsumexp, T, NH, B * NH, q_tiles, scale_log2);
    LAUNCH_CHECK();
}

template <int HS, bool DETERMINISTIC>
void backward_launch(bf16 *dqkv, float *dq_accum, const float *lse2, const float *D,
                     uint32_t *dq_flags, const bf16 *dout, const bf16 *qkv, int B, int T, int Tpad,
                     int NH) {
    using S = BwdShape<HS>;
    uint32_t *next_item = dq_flags + (size_t)B * NH * ceil_div(T, 64);   // after the order flags
    auto kernel = flash_backward_sm90_kernel<HS, DETERMINISTIC>;
    static bool smem_set = false;
    if (!smem_set) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)S::SMEM));
        smem_set = true;
    }
    if (Tpad % S::BR || ((uintptr_t)lse2 | (uintptr_t)D) % 16)
        die("flash_sm90 backward: lse and D must be 16-byte aligned rows of a multiple of %d "
            "(Tpad %d)", S::BR, Tpad);
    const float scale = 1.0f / sqrtf((float)HS);
    const CUtensorMap q_map = *qkv_tensor_map(qkv, B, T, NH, HS, S::BR);
    const CUtensorMap kv_map = *qkv_tensor_map(qkv, B, T, NH, HS, S::BC);
    const CUtensorMap do_map =
        *tensor_map_4d(dout, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, HS, NH, T, B, kPanelCols, S::BR);
    const CUtensorMap dq_map =
        *tensor_map_4d(dq_accum, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, HS, NH, T, B, 32, 64);
    const CUtensorMap dkv_map = *qkv_tensor_map(dqkv, B, T, NH, HS, 64);
    // Persistent: one CTA per SM, all resident at once (one CTA fills an SM), as the
    // deterministic mode's waits need, each taking items from the counter. On an H200 it
    // measured 1.03-1.05x one CTA per item at T <= 4,096 (HS=64) and level beyond and at HS=128
    // (docs/PERF.md, "Hopper backward, third session"): items are short at small T, and a CTA's
    // start and end then weigh most.
    const int items = ceil_div(T, S::BC) * B * NH;
    const int blocks = FLASH_SM90_PERSISTENT && items > cuda_num_sms ? cuda_num_sms : items;
    const int group = FLASH_SM90_BWD_GROUP;   // key blocks of a head in a row (the kernel says why)
    const int descending = T >= FLASH_SM90_BWD_DESC_T;   // the query tiles' direction (the kernel says why)
#if FLASH_SM90_TRACE
    void *trace_dev;
    CUDA_CHECK(cudaGetSymbolAddress(&trace_dev, g_trace));
    CUDA_CHECK(cudaMemsetAsync(trace_dev, 0, sizeof(g_trace), cuda_stream));
#endif
    kernel<<<blocks, S::THREADS, S::SMEM, cuda_stream>>>(q_map, kv_map, do_map, dq_map, dkv_map, lse2,
                                                        D, dq_flags, next_item, T, Tpad, NH,
                                                        B * NH, group, descending, scale, scale * kLog2e);
    LAUNCH_CHECK();
#if FLASH_SM90_TRACE
    // FLASH_TRACE=FILE: this launch's timeline (the last launch's is what stays in FILE):
    // int32 header {ctas, roles, head, events, HS, T, B, NH, items, deterministic}, then
    // g_trace as it is (uint64). Not while a CUDA graph is being recorded (train_gpt2's
    // passes: it waits for the stream; run those with CUDA_GRAPHS=0 to trace every pass).
    cudaStreamCaptureStatus capturing;
    CUDA_CHECK(cudaStreamIsCapturing(cuda_stream, &capturing));
    const char *path = getenv("FLASH_TRACE");
    if (path && capturing == cudaStreamCaptureStatusNone) {
        static unsigned long long host[kTraceCtas][kTraceRoles][kTraceHead + kTraceEvents];
        CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
        CUDA_CHECK(cudaMemcpyFromSymbol(host, g_trace, sizeof(host)));
        FILE *f = fopen(path, "wb");
        if (!f) die("flash_sm90: cannot write the trace to %s", path);
        const int head[10] = {kTraceCtas, kTraceRoles, kTraceHead, kTraceEvents, HS, T, B, NH,
                              items, DETERMINISTIC};
        if (fwrite(head, sizeof(head), 1, f) != 1 || fwrite(host, sizeof(host), 1, f) != 1 ||
            fclose(f) != 0)
            die("flash_sm90: cannot write the trace to %s", path);
    }
#endif
}

}  // namespace

bool flash_sm90_enabled() {
    static const bool enabled = cuda_is_sm90() && env_flag("FLASH_SM90", true);
    return enabled;
}

bool flash_sm90_backward_enabled() {
    static const bool enabled = flash_sm90_enabled() && env_flag("FLASH_SM90_BWD", true);
    return enabled;
}

void flash_sm90_forward(floatX *out, float *logsumexp, const floatX *qkv, int B, int T, int NH,
                        int HS) {
    if (HS == 128) forward_launch<128, 2>(BF(out), logsumexp, CBF(qkv), B, T, NH);
    else if (T <= 1024) forward_launch<64, 2>(BF(out), logsumexp, CBF(qkv), B, T, NH);
    else forward_launch<64, 3>(BF(out), logsumexp, CBF(qkv), B, T, NH);
}

void flash_sm90_backward(floatX *dqkv, float *dq_accum, const float *lse2, const float *D,
                         uint32_t *dq_flags, const floatX *dout, const floatX *qkv, int B, int T,
                         int Tpad, int NH, int HS, bool det) {
    if (HS == 64 && det)
        backward_launch<64, true>(BF(dqkv), dq_accum, lse2, D, dq_flags, CBF(dout), CBF(qkv), B, T, Tpad, NH);
    else if (HS == 64)
        backward_launch<64, false>(BF(dqkv), dq_accum, lse2, D, dq_flags, CBF(dout), CBF(qkv), B, T, Tpad, NH);
    else if (det)
        backward_launch<128, true>(BF(dqkv), dq_accum, lse2, D, dq_flags, CBF(dout), CBF(qkv), B, T, Tpad, NH);
    else
        backward_launch<128, false>(BF(dqkv), dq_accum, lse2, D, dq_flags, CBF(dout), CBF(qkv), B, T, Tpad, NH);
}
