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
// ---- the tile picture: one CTA = one query tile of BR = 64 x CONSUMERS rows of one head --------
// (CONSUMERS = 2, BR = 128, drawn; 3 and 192 at HS=64 beyond T=1024, see Shape)
//
//   global qkv ──TMA──► shared memory                            registers (per consumer warpgroup)
//                       ┌─────────────┐
//   Q rows q0..q0+127 ─►│ Q  128 x HS │── rows 0-63 ──► consumer 0 ─┐  S = QK^T 64x128 fp32 (wgmma,
//     (once)            │             │── rows 64-127 ► consumer 1 ─┤        Q and K from shared)
//                       ├─────────────┤                             │  online softmax: m, l, P=exp2
//   K, V tile j    ───► │ stage j % S │  full[s]: TMA bytes landed  │  P -> bf16 A-operand regs
//     (128 rows)        │  K 128 x HS │ ◄────────────────────────── │  O += P V  64xHS fp32 (wgmma,
//                       │  V 128 x HS │  empty[s]: 256 consumer     │        P from registers,
//                       └─────────────┘  threads done with stage s  │        V from shared)
//   producer warpgroup 0 (24 registers/thread): one thread issues  ─┘  at the end: O / l -> out,
//   every TMA copy; consumers 1, 2 (240 registers/thread).              logsumexp -> saved
//
// Per consumer, in time (tile j's softmax runs while tile j-1's P V is on the tensor cores, and
// while the other consumer's products are):
//   wait full[j]; wait for my turn; issue S_j = Q K_j^T and O += P_{j-1} V_{j-1}; pass the turn
//   wait S_j; softmax(S_j) in place (fp32 exp2 values; P_{j-1} registers still being read)
//   wait P V; arrive empty[j-1]; O *= alpha_j; P_j = bf16(S_j)
// and finally O += P_last V_last. The producer runs up to S stages ahead of the consumers.
//
// ---- shared-memory layout: 128-byte swizzle, what TMA writes and wgmma reads -------------------
// A tile of R rows x HS columns (bf16) is stored as HS/64 panels of R rows x 64 columns; a panel
// row is 128 bytes, and within each group of 8 rows (1024 bytes, 1024-aligned) 16-byte chunk c
// of row r sits at chunk c ^ (r % 8): TMA's CU_TENSOR_MAP_SWIZZLE_128B, which wgmma reads as
// swizzle mode 1 (see smem_desc). One TMA box is one panel: {64 columns, 1 head, R rows, 1}.
//
// ---- wgmma fragments (m64nNk16, one warpgroup = warps 0-3 of the consumer) ---------------------
// Accumulator D (64 x N fp32): warp w holds rows 16w..16w+15, thread lane = 4g + t holds
//   d[i] at row 16w + g + 8*((i/2)%2), column 8*(i/4) + 2t + i%2     (frag_row, frag_col)
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
#include <cudaTypedefs.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../layers/cuda_common.cuh"
#include "flash_sm90.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

constexpr int kBC = 128;               // key/value rows of a tile
constexpr int kPanelCols = 64;         // bf16 columns of one 128-byte swizzled panel row
constexpr int kRowBytes = 128;         // bytes of one panel row
constexpr int kProducerRegs = 24;      // registers per producer thread after setmaxnreg
// Ping-pong: the consumers take turns to issue their products (named barriers 1..CONSUMERS), so
// that one warpgroup's softmax runs while another's products use the tensor cores. Build with
// -DFLASH_SM90_PINGPONG=0 (FLASH_FLAGS in tests/gpu/attention.mk) to let them run unordered.
#ifndef FLASH_SM90_PINGPONG
#define FLASH_SM90_PINGPONG 1
#endif

// The shapes measured best on an H200 (docs/PERF.md, "Hopper forward"): HS=128, 2 consumers and
// a 3-stage ring (all the shared memory there is; 2 stages left the consumers waiting for K/V);
// HS=64, a 4-stage ring and 3 consumers (192-row query tiles) except at T <= 1024, where 2
// consumers' smaller tiles make more CTAs and waste less of the diagonal tiles (flash_sm90_forward)
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
    static constexpr size_t SMEM = 1024 + Q_BYTES + 2 * STAGES * KV_BYTES;
    static_assert(SMEM <= 227 * 1024, "shared memory of one CTA");
    static_assert(CONSUMER_REGS <= 256, "setmaxnreg takes at most 256");
};

// ---- the Hopper vocabulary: each wrapper holds one PTX instruction -----------------------------
// (No fence.proxy.async is needed here: shared memory is written only by TMA and read only by
// wgmma, both in the async proxy, ordered by the mbarriers; nothing there is written by ordinary
// stores.)

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
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
// mbarrier.arrive: one arrival (a consumer thread is done with a stage)
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
// read of an accumulator is moved above the wait (the compiler does not know wgmma is async).
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
// wgmma matrix descriptor of a 128-byte-swizzled operand in shared memory: start address,
// leading and stride byte offsets (each >> 4, 14 bits), swizzle mode 1 = 128 bytes (bits 62-63)
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t leading_bytes,
                                              uint32_t stride_bytes) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)((leading_bytes >> 4) & 0x3FFF) << 16 |
           (uint64_t)((stride_bytes >> 4) & 0x3FFF) << 32 | 1ull << 62;
}
// wgmma.mma_async m64nNk16, bf16 in, fp32 accumulate, one warpgroup:
//   wgmma_ss:    d (+)= A B, A and B from shared memory, both K-major; accumulate = 0: d = A B
//   wgmma_rs_tb: d += A B, A from registers, B from shared memory MN-major (transposed)
template <int N>
__device__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate);
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
template <>
__device__ __forceinline__ void wgmma_ss<128>(float (&d)[64], uint64_t a, uint64_t b,
                                              int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WGMMA_REGS_64
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : WGMMA_D_64(d)
        : "l"(a), "l"(b), "r"(accumulate));
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

// two floats -> bf16x2 (round to nearest even), `lo` in the low half
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

// ---- fragment arithmetic (see the top of the file), written once --------------------------------
// row and column of accumulator register i, relative to the thread's first row and column
__device__ __forceinline__ int frag_row(int i) { return 8 * ((i >> 1) & 1); }
__device__ __forceinline__ int frag_col(int i) { return 8 * (i >> 2) + (i & 1); }

// ---- the two products of one tile ---------------------------------------------------------------

// s = Q K^T for this warpgroup's 64 query rows (q: their first row in the Q tile of BR rows,
// k: a K stage)
template <int HS, int BR>
__device__ __forceinline__ void gemm_qk(float (&s)[kBC / 2], uint32_t q, uint32_t k) {
#pragma unroll
    for (int ks = 0; ks < HS / 16; ks++) {
        const uint32_t off_q = (ks / 4) * BR * kRowBytes + (ks % 4) * 32;
        const uint32_t off_k = (ks / 4) * kBC * kRowBytes + (ks % 4) * 32;
        wgmma_ss<kBC>(s, smem_desc(q + off_q, 16, 8 * kRowBytes),
                      smem_desc(k + off_k, 16, 8 * kRowBytes), ks > 0);
    }
}
// o += P V (p: P as bf16 pairs, 4 registers per k-step of 16 keys; v: a V stage)
template <int HS>
__device__ __forceinline__ void gemm_pv(float (&o)[HS / 2], const uint32_t (&p)[kBC / 4],
                                        uint32_t v) {
#pragma unroll
    for (int kk = 0; kk < kBC / 16; kk++) {
        const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
        wgmma_rs_tb<HS>(o, a, smem_desc(v + kk * 16 * kRowBytes, kBC * kRowBytes, 8 * kRowBytes));
    }
}

// ---- online softmax over one tile ---------------------------------------------------------------
// The thread's two rows (hf = 0, 1: rows g and g+8 of its warp) each have a running max m (raw
// logits) and a running partial sum l over the thread's columns (summed over the 4 threads of a
// row only at the end). s holds the tile's logits and leaves holding exp2((s - m_new) * scale
// * log2 e); alpha[hf] = exp2((m_old - m_new) * scale*log2e) is what O and l are rescaled by.
// A finite m_new needs one visible key per row: tile 0 holds key 0, visible to every row.
__device__ __forceinline__ void online_softmax(float (&s)[kBC / 2], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], float scale_log2) {
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float mx = m[hf];
#pragma unroll
        for (int i = 0; i < kBC / 2; i++)
            if (frag_row(i) == 8 * hf) mx = fmaxf(mx, s[i]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        alpha[hf] = exp2f((m[hf] - mx) * scale_log2);
        m[hf] = mx;
        const float mx_scaled = mx * scale_log2;
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < kBC / 2; i++)
            if (frag_row(i) == 8 * hf) {
                s[i] = exp2f(fmaf(s[i], scale_log2, -mx_scaled));
                sum += s[i];
            }
        l[hf] = l[hf] * alpha[hf] + sum;
    }
}

// ================================================================================================
// The kernel. Grid: (query tiles) x (B*NH), 1-D, the last query tiles of every head (the most
// key tiles under the causal mask) first, so that the short ones fill the tail. One CTA per SM
// (shared memory and registers both allow only one).
// ================================================================================================
template <int HS, int CONSUMERS_>
__global__ void __launch_bounds__(Shape<HS, CONSUMERS_>::THREADS, 1)
    flash_forward_sm90_kernel(const __grid_constant__ CUtensorMap q_map,
                              const __grid_constant__ CUtensorMap kv_map, bf16 *__restrict__ out,
                              float *__restrict__ logsumexp, int T, int NH, int BNH, int q_tiles,
                              float scale_log2) {
    using S = Shape<HS, CONSUMERS_>;
    constexpr int STAGES = S::STAGES, BR = S::BR, CONSUMERS = S::CONSUMERS;
    extern __shared__ unsigned char smem_raw[];
    __shared__ uint64_t q_full, kv_full[STAGES], kv_empty[STAGES];
    const uint32_t sQ = (smem_addr(smem_raw) + 1023) & ~1023u;   // Q tile [panel][BR][64]
    const uint32_t sK = sQ + S::Q_BYTES;             // K stages [STAGES][panel][128][64]
    const uint32_t sV = sK + STAGES * S::KV_BYTES;   // V stages, the same

    const int bh = blockIdx.x % BNH;
    const int q_tile = q_tiles - 1 - blockIdx.x / BNH;   // heaviest tiles first
    const int b = bh / NH, h = bh % NH;
    const int q0 = q_tile * BR;
    const int kv_tiles = (min(q0 + BR, T) + kBC - 1) / kBC;   // causal: keys < q0 + BR
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        mbar_init(&q_full, 1);
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&kv_full[s], 1);
            mbar_init(&kv_empty[s], 128 * CONSUMERS);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {
        // ---- producer: one thread issues every copy; the tensor maps' coordinates are
        // {column, part * NH + head, row, batch} with part 0, 1, 2 = q, k, v (q_map's boxes
        // have BR rows, kv_map's kBC)
        setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x == 0) {
            mbar_arrive_expect_tx(&q_full, S::Q_BYTES);
            for (int p = 0; p < S::PANELS; p++)
                tma_load_4d(sQ + p * BR * kRowBytes, &q_map, &q_full, p * kPanelCols, h, q0, b);
            for (int j = 0; j < kv_tiles; j++) {
                const int st = j % STAGES;
                mbar_wait(&kv_empty[st], ((j / STAGES) & 1) ^ 1);   // round 0 passes at once
                mbar_arrive_expect_tx(&kv_full[st], 2 * S::KV_BYTES);
                const uint32_t k_dst = sK + st * S::KV_BYTES, v_dst = sV + st * S::KV_BYTES;
                for (int p = 0; p < S::PANELS; p++) {
                    const uint32_t off = p * kBC * kRowBytes;
                    tma_load_4d(k_dst + off, &kv_map, &kv_full[st], p * kPanelCols, NH + h,
                                j * kBC, b);
                    tma_load_4d(v_dst + off, &kv_map, &kv_full[st], p * kPanelCols, 2 * NH + h,
                                j * kBC, b);
                }
            }
        }
    } else {
        // ---- consumer c: query rows q0 + 64c .. q0 + 64c + 63
        setmaxnreg_inc<S::CONSUMER_REGS>();
        const int c = wg - 1;
        const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
        const int wg_row0 = q0 + 64 * c;
        const int row0 = wg_row0 + 16 * warp + lane / 4;   // the thread's rows: row0, row0 + 8
        const int col0 = 2 * (lane % 4);                   // its first column in each 8-block
        const uint32_t q = sQ + 64 * c * kRowBytes;

        float s[kBC / 2], o[HS / 2];
        uint32_t p[kBC / 4];
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
#pragma unroll
        for (int i = 0; i < HS / 2; i++) o[i] = 0.0f;

        // S of tile j -> probabilities in s (fp32), with the causal mask where the tile crosses
        // the diagonal of this warpgroup's rows
        auto softmax_tile = [&](int j) {
            const int k0 = j * kBC;
            if (k0 + kBC - 1 > wg_row0) {
#pragma unroll
                for (int i = 0; i < kBC / 2; i++)
                    if (k0 + col0 + frag_col(i) > row0 + frag_row(i)) s[i] = -INFINITY;
            }
            online_softmax(s, m, l, alpha, scale_log2);
        };
        auto to_bf16 = [&]() {
#pragma unroll
            for (int i = 0; i < kBC / 4; i++) p[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
        };

        // Turns, round robin: consumer c waits on barrier 1 + c before it issues products, then
        // hands over to the next (arrives on its barrier). The last consumer lets consumer 0 go
        // first and skips its own last hand-over, so that every wait has one arrival to match.
        auto my_turn = [&]() {
            if (FLASH_SM90_PINGPONG) named_bar_sync(1 + c, 256);
        };
        auto your_turn = [&]() {
            if (FLASH_SM90_PINGPONG) named_bar_arrive(1 + (c + 1) % CONSUMERS, 256);
        };
        if (c == CONSUMERS - 1) your_turn();

        mbar_wait(&q_full, 0);
        mbar_wait(&kv_full[0], 0);
        my_turn();
        wgmma_fence();
        gemm_qk<HS, BR>(s, q, sK);
        wgmma_commit();
        your_turn();
        wgmma_wait<0>();
        fence_regs(s);
        softmax_tile(0);
        to_bf16();

        for (int j = 1; j < kv_tiles; j++) {
            const int st = j % STAGES, prev = (j - 1) % STAGES;
            mbar_wait(&kv_full[st], (j / STAGES) & 1);
            my_turn();
            wgmma_fence();
            gemm_qk<HS, BR>(s, q, sK + st * S::KV_BYTES);
            wgmma_commit();
            gemm_pv<HS>(o, p, sV + prev * S::KV_BYTES);
            wgmma_commit();
            your_turn();
            wgmma_wait<1>();   // S_j is done; P_{j-1} V_{j-1} may still run
            fence_regs(s);
            softmax_tile(j);
            wgmma_wait<0>();
            fence_regs(o);
            fence_regs(p);
            mbar_arrive(&kv_empty[prev]);
#pragma unroll
            for (int i = 0; i < HS / 2; i++) o[i] *= alpha[frag_row(i) / 8];
            to_bf16();
        }
        my_turn();
        wgmma_fence();
        gemm_pv<HS>(o, p, sV + ((kv_tiles - 1) % STAGES) * S::KV_BYTES);
        wgmma_commit();
        if (c != CONSUMERS - 1) your_turn();
        wgmma_wait<0>();
        fence_regs(o);
        // (the last stage needs no release: nothing more is loaded)

        // O /= l, logsumexp; rows past T were computed on zero-filled Q and are not stored
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float sum = l[hf];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const int row = row0 + 8 * hf;
            if (row >= T) continue;
            if (lane % 4 == 0)
                logsumexp[(size_t)bh * T + row] = (m[hf] * scale_log2 + log2f(sum)) * kLn2;
            const float inv = 1.0f / sum;
            bf16 *dst = out + ((size_t)(b * T + row) * NH + h) * HS + col0;
#pragma unroll
            for (int i = 0; i < HS / 2; i += 4)
                *reinterpret_cast<uint32_t *>(dst + frag_col(i)) =
                    pack_bf16(o[i + 2 * hf] * inv, o[i + 2 * hf + 1] * inv);
        }
    }
}

// ---- host side ----------------------------------------------------------------------------------

// cuTensorMapEncodeTiled from the driver, found through the runtime (so no -lcuda)
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    if (!fn) {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult found;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                    cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || !p)
            die("flash_sm90: the CUDA driver has no cuTensorMapEncodeTiled");
        fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }
    return fn;
}

// The tensor map of a packed qkv buffer: a 4-D bf16 tensor {HS, 3*NH, T, B} (innermost first),
// boxes of {64 columns, 1 head, `rows` rows, 1 batch}, 128-byte swizzle, zeros outside. A map is
// a function of (pointer, shape, box) alone, so maps are kept in a small table: each layer's qkv
// buffer is encoded once, and a buffer freed and reallocated at the same address gets the same map.
const CUtensorMap *qkv_tensor_map(const bf16 *qkv, int B, int T, int NH, int HS, int rows) {
    struct Entry {
        const bf16 *qkv;
        int B, T, NH, HS, rows;
        CUtensorMap map;
    };
    static Entry table[64];
    static int used = 0, next = 0;
    for (int i = 0; i < used; i++) {
        const Entry &e = table[i];
        if (e.qkv == qkv && e.B == B && e.T == T && e.NH == NH && e.HS == HS && e.rows == rows)
            return &e.map;
    }
    Entry &e = table[next];
    next = (next + 1) % 64;
    if (used < 64) used++;
    e = Entry{qkv, B, T, NH, HS, rows, {}};
    const cuuint64_t dims[4] = {(cuuint64_t)HS, (cuuint64_t)3 * NH, (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t strides[3] = {(cuuint64_t)HS * 2, (cuuint64_t)3 * NH * HS * 2,
                                   (cuuint64_t)T * 3 * NH * HS * 2};   // bytes, of dims 1..3
    const cuuint32_t box[4] = {kPanelCols, 1, (cuuint32_t)rows, 1};
    const cuuint32_t unit[4] = {1, 1, 1, 1};
    const CUresult r = tensor_map_encoder()(
        &e.map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<bf16 *>(qkv), dims, strides, box,
        unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        die("flash_sm90: cuTensorMapEncodeTiled failed (%d) for qkv %p, B=%d T=%d NH=%d HS=%d, "
            "boxes of %d rows", (int)r, (const void *)qkv, B, T, NH, HS, rows);
    return &e.map;
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
    const int blocks = q_tiles * B * NH;
    flash_forward_sm90_kernel<HS, CONSUMERS><<<blocks, S::THREADS, S::SMEM, cuda_stream>>>(
        q_map, kv_map, out, logsumexp, T, NH, B * NH, q_tiles, scale_log2);
    LAUNCH_CHECK();
}

}  // namespace

bool flash_sm90_enabled() {
    static int enabled = -1;
    if (enabled < 0) {
        int dev, major, minor;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        const char *env = getenv("FLASH_SM90");
        enabled = major == 9 && minor == 0 && !(env && !strcmp(env, "0"));
    }
    return enabled;
}

void flash_sm90_forward(floatX *out, float *logsumexp, const floatX *qkv, int B, int T, int NH,
                        int HS) {
    if (HS == 128) forward_launch<128, 2>(BF(out), logsumexp, CBF(qkv), B, T, NH);
    else if (T <= 1024) forward_launch<64, 2>(BF(out), logsumexp, CBF(qkv), B, T, NH);
    else forward_launch<64, 3>(BF(out), logsumexp, CBF(qkv), B, T, NH);
}
