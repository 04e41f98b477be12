// flash.cu: causal multi-head attention as fused tiled kernels with an online softmax
// (FlashAttention-2's algorithm) on bf16 tensor cores, implementing attention.h.
//
// Nothing of size T x T ever reaches device memory. The forward keeps one logsumexp per row;
// the backward recomputes the probabilities tile by tile from Q, K and that logsumexp.
//
// On Hopper (compute capability 9.0) the forward and the backward's main kernel are
// flash_sm90.cu's TMA + wgmma kernels instead (chosen at run time; both are in every flash
// build). They save and read the same logsumexp, and the backward's prep and convert kernels
// below serve both main kernels.
//
// ---- notation -------------------------------------------------------------------------------
// Per head (b, h): Q, K, V, O, dO are (T, HS) views of the packed tensors, read and written in
// place (row stride 3*C in qkv and dqkv, C in out and dout; C = NH*HS), so no permute kernels.
//   S = Q K^T * scale (scale = 1/sqrt(HS)), causal: S[i][j] = -inf for j > i
//   P = softmax_rows(S), O = P V, logsumexp[i] = log sum_j exp(S[i][j])
//   backward: D[i] = sum_k dO[i][k] O[i][k]; dP = dO V^T; dS = P * (dP - D[row]);
//             dQ = scale dS K; dK = scale dS^T Q; dV = P^T dO
// The softmax runs in the exp2 domain: exp(x*scale - m) = exp2(x*scale*log2(e) - m*log2(e)),
// so each probability costs one FFMA and one MUFU.EX2.
//
// ---- tensor-core fragments: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 --------------
// D(16x8) += A(16x16) B(16x8), one warp. Lane = 4*g + t (g = lane/4 in 0..7, t = lane%4 in 0..3).
// Each 32-bit register holds two bf16 of adjacent columns, the lower column in the low half.
//   A: a0 = A[g][2t..2t+1]  a1 = A[g+8][2t..2t+1]  a2 = A[g][2t+8..2t+9]  a3 = A[g+8][2t+8..2t+9]
//   B: b0 = B[2t..2t+1][g]  b1 = B[2t+8..2t+9][g]      (two k-rows of one n-column)
//   C: c0,c1 = C[g][2t..2t+1]  c2,c3 = C[g+8][2t..2t+1]  (fp32)
// Two side by side C tiles (columns 0-7 and 8-15) hold, rounded to bf16, exactly the A fragment
// of their 16x16 block: {c0c1, c2c3} of the left tile = {a0, a1}, of the right tile = {a2, a3}.
// So P = exp(S) goes from the S accumulators straight into the A operand of P V, in registers.
//
// ldmatrix.x4 loads four 8x8 bf16 matrices from shared memory; lanes 8i..8i+7 give the row
// addresses of matrix i, and lane 4g+t receives row g, columns 2t..2t+1 of each matrix (with
// .trans: column g, rows 2t..2t+1). Two address patterns, each plain or .trans, cover every
// operand here:
//   A pattern   row = r0 + lane%16, 16-byte chunk = c0 + lane/16:
//               plain: the A fragment of a row-major 16x16 block (Q, K, V as A operands);
//               .trans: the B fragments of two n-tiles of a row-major (k x n) block (V, dO, Q,
//               K stored [k][n]), registers {0,1} for columns c0*8.., {2,3} for c0*8+8..
//   B pattern   row = r0 + lane%8 + 8*(lane/16), chunk = c0 + (lane/8)%2:
//               plain: the B fragments of two n-tiles of an operand stored [n][k] (K in Q K^T,
//               Q in K Q^T, dO in V dO^T), registers {0,1} for rows r0.., {2,3} for r0+8..;
//               .trans: the A fragment of a 16x16 block stored transposed (dS^T -> dS).
//
// ---- shared memory --------------------------------------------------------------------------
// Tiles are row-major, one row = HS bf16 = HS/8 chunks of 16 bytes, and chunk c of row r is
// stored at chunk position c ^ (r % 8) (see swizzle_bits). The 8 row addresses of one
// ldmatrix phase (8 consecutive rows, one chunk each) then fall into 8 different 16-byte bank
// groups: no bank conflicts, no padding. Loads are cp.async (16 bytes a thread, L2 only),
// zero-filled past T.
#include <stdint.h>

#include "../runtime/cuda_common.cuh"
#include "attention.h"
#include "flash_sm90.h"
#include "flash_tile.cuh"

// Tile shapes, overridable at build time (FLASH_FLAGS in tests/gpu/attention.mk) to compare:
// query rows per warp of the forward at HS=64 (16 or 32; HS=128 always uses 16, since 32 rows
// of a 128-wide accumulator would need 128 registers a thread), and the warps of a backward
// block at HS=64 (4 or 8, each owning 16 key/value rows).
#ifndef FLASH_FWD_WARP_ROWS
#define FLASH_FWD_WARP_ROWS 32
#endif
#ifndef FLASH_BWD_KV_WARPS
#define FLASH_BWD_KV_WARPS 4
#endif

namespace {

// ---- PTX wrappers -----------------------------------------------------------------------------

__device__ __forceinline__ void cp_async_4(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
// c0 += a b[0..1], c1 += a b[2..3]: the two 8-column n-tiles of one ldmatrix.x4 B fragment
__device__ __forceinline__ void mma_bf16_x2(float c0[4], float c1[4], const uint32_t a[4],
                                            const uint32_t b[4]) {
    mma_bf16(c0, a, b[0], b[1]);
    mma_bf16(c1, a, b[2], b[3]);
}
// the same for M 16-row tiles: c[m][n0] and c[m][n0 + 1] += a[m] b, for m < M
template <int M, int N>
__device__ __forceinline__ void mma_bf16_x2_rows(float (&c)[M][N][4], int n0,
                                                 const uint32_t (&a)[M][4], const uint32_t b[4]) {
#pragma unroll
    for (int m = 0; m < M; m++) mma_bf16_x2(c[m][n0], c[m][n0 + 1], a[m], b);
}
// *dst += v, two adjacent floats: one vector reduction (RED.E.ADD.F32x2) on sm_90
__device__ __forceinline__ void atomic_add_float2(float *dst, float2 v) {
#if __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2 *>(dst), v);
#else
    atomicAdd(dst, v.x);
    atomicAdd(dst + 1, v.y);
#endif
}
// four C fragments of a 16x16 block (left tile c, right tile d) -> its A fragment
__device__ __forceinline__ void c_to_a(uint32_t a[4], const float c[4], const float d[4]) {
    a[0] = pack_bf16(c[0], c[1]);
    a[1] = pack_bf16(c[2], c[3]);
    a[2] = pack_bf16(d[0], d[1]);
    a[3] = pack_bf16(d[2], d[3]);
}

// ---- swizzled tiles ---------------------------------------------------------------------------

// Swizzle: 16-byte chunk c of row r of a tile with ROW-element rows is stored at chunk
// position c ^ swizzle_bits(r). Rows of 64 or more elements (8+ chunks): r % 8. Rows of 32
// elements (4 chunks, two rows to a 128-byte line of banks; only the BR=32 dS^T tile): (r/2) % 4.
// Either way 8 consecutive rows at one chunk land in 8 different 16-byte bank groups.
template <int ROW>
__device__ __forceinline__ int swizzle_bits(int row) {
    static_assert(ROW == 32 || ROW % 64 == 0, "swizzle defined for 32 or 64k-element rows");
    return ROW >= 64 ? (row & 7) : ((row >> 1) & 3);
}
// element offset of 16-byte chunk `chunk` of row `row` in a tile of ROW-element rows
template <int ROW>
__device__ __forceinline__ int swz(int row, int chunk) {
    return row * ROW + ((chunk ^ swizzle_bits<ROW>(row)) << 3);
}
// Per-lane parts of the two ldmatrix address patterns (see the top of the file). Blocks start
// at an even chunk c0 (a multiple of 16 columns) and a row that is a multiple of 8, so the
// lane's row % 8 is lane % 8 and its swizzled chunk is (c0 + x) ^ s = c0 ^ (x ^ s), x < 2:
// the lane part x ^ s is computed once, the block part c0 is a constant.
struct LaneAddr {
    int a_row, a_x;   // A pattern: row offset, chunk offset
    int b_row, b_x;   // B pattern
    int row8;         // lane % 8 = (row of this lane's address) % 8
    __device__ explicit LaneAddr(int lane)
        : a_row(lane & 15), a_x(lane >> 4), b_row((lane & 7) + ((lane >> 4) << 3)),
          b_x((lane >> 3) & 1), row8(lane & 7) {}
};
// shared address of the lane's ldmatrix row for the block at (r0, c0) of a ROW-wide tile
template <int ROW>
__device__ __forceinline__ uint32_t a_addr(const bf16 *tile, const LaneAddr &la, int r0, int c0) {
    return smem_addr(tile + (r0 + la.a_row) * ROW +
                     ((c0 ^ la.a_x ^ swizzle_bits<ROW>(la.row8)) << 3));
}
template <int ROW>
__device__ __forceinline__ uint32_t b_addr(const bf16 *tile, const LaneAddr &la, int r0, int c0) {
    return smem_addr(tile + (r0 + la.b_row) * ROW +
                     ((c0 ^ la.b_x ^ swizzle_bits<ROW>(la.row8)) << 3));
}

// The 16-byte chunks of rows row0..row0+ROWS-1 of a tensor (each row HS bf16, `stride`
// elements apart) that thread tid copies into a swizzled ROWS x HS tile: copy(dst, offset,
// valid) for each, dst its offset in the tile, offset its source from the tensor's base (0
// for rows >= T: valid but not read, and valid false, so the chunk is zero-filled). One
// address computation serves every tensor copied with the same row layout; offsets within a
// tile fit in 32 bits.
template <int ROWS, int HS, int THREADS, typename Copy>
__device__ __forceinline__ void for_each_tile_chunk(int stride, int row0, int T, int tid,
                                                    Copy copy) {
    constexpr int CHUNKS = HS / 8;
    static_assert((ROWS * CHUNKS) % THREADS == 0, "tile copy must split evenly over threads");
    const size_t tile_offset = (size_t)row0 * stride;
#pragma unroll
    for (int i = 0; i < ROWS * CHUNKS / THREADS; i++) {
        const int idx = i * THREADS + tid;
        const int r = idx / CHUNKS, c = idx % CHUNKS;
        const bool valid = row0 + r < T;
        copy(swz<HS>(r, c), valid ? tile_offset + (r * stride + c * 8) : 0, valid);
    }
}
// Start copying those rows of two tensors with the same row layout (from base_a, base_b)
// into two tiles, or of one tensor into one tile.
template <int ROWS, int HS, int THREADS>
__device__ __forceinline__ void load_tile_pair(bf16 *tile_a, const bf16 *base_a, bf16 *tile_b,
                                               const bf16 *base_b, int stride, int row0, int T,
                                               int tid) {
    for_each_tile_chunk<ROWS, HS, THREADS>(stride, row0, T, tid,
                                           [&](int dst, size_t offset, bool valid) {
        cp_async_16(smem_addr(tile_a + dst), base_a + offset, valid);
        cp_async_16(smem_addr(tile_b + dst), base_b + offset, valid);
    });
}
template <int ROWS, int HS, int THREADS>
__device__ __forceinline__ void load_tile(bf16 *tile, const bf16 *base, int stride, int row0,
                                          int T, int tid) {
    for_each_tile_chunk<ROWS, HS, THREADS>(stride, row0, T, tid,
                                           [&](int dst, size_t offset, bool valid) {
        cp_async_16(smem_addr(tile + dst), base + offset, valid);
    });
}

// ================================================================================================
// Forward.
//
// One block of 4 warps per (query tile of BR rows, head). Warp w owns query rows
// q0 + w*WARP_ROWS .. +WARP_ROWS-1 (one or two 16-row mma tiles), whose Q fragments it keeps
// in registers for the whole kernel. Key/value tiles of BC = 64 rows stream through two
// shared-memory buffers: tile j+1 is copied (cp.async) while tile j is computed, with one
// barrier per tile. Per tile, per warp:
//   S = Q K^T               (WARP_ROWS x 64, fp32 accumulators; K fragments via ldmatrix)
//   diagonal tiles: S = -inf above the diagonal; tiles entirely above all of the warp's rows
//   are skipped (warp-uniform branch), tiles above the whole block are never loaded
//   m_new = max(m, rowmax S); alpha = exp2((m - m_new) * scale*log2e)
//   P = exp2(S * scale*log2e - m_new * scale*log2e); l = l * alpha + rowsum P; O = O * alpha
//   O += P V                (P stays in registers; V fragments via ldmatrix.trans)
// Each thread holds 2 rows per 16-row tile (g and g+8) and a quarter of their columns; row max
// needs a reduction over the 4 lanes of a quad each tile, row sum only at the end.
// At the end O /= l, written once as bf16, and logsumexp = (m*scale*log2e + log2 l) * ln 2.
//
// The grid is 1-D, (query tiles) x (B*NH), ordered so that the last query tiles of every head,
// which see the most key tiles under the causal mask, start first: the short ones fill the tail.
// ================================================================================================

constexpr int kFwdWarps = 4;
constexpr int kFwdThreads = kFwdWarps * 32;
constexpr int kFwdBC = 64;   // key/value rows per tile

template <int HS, int WARP_ROWS>
constexpr size_t fwd_smem_bytes() {
    return (size_t)(kFwdWarps * WARP_ROWS + 2 * 2 * kFwdBC) * HS * sizeof(bf16);   // Q, 2x(K, V)
}

template <int HS, int WARP_ROWS>
__global__ void __launch_bounds__(kFwdThreads)
    flash_forward_kernel(bf16 *__restrict__ out, float *__restrict__ logsumexp,
                         const bf16 *__restrict__ qkv, int T, int NH, int BNH, int q_tiles,
                         float scale_log2) {
    // Stages, per warp (shapes in the comment above):
    //   Q -> registers, once
    //   per key/value tile j (tile j+1 loading meanwhile; tiles after all the warp's rows skipped):
    //     S = Q K^T -> causal_mask (diagonal tiles) -> online softmax (SoftmaxRow: update,
    //     exponentiate; rescale O) -> O += P V (P from registers)
    //   store_o: O / l, logsumexp
    constexpr int MT = WARP_ROWS / 16;   // 16-row mma tiles per warp
    constexpr int BR = kFwdWarps * WARP_ROWS;
    constexpr int BC = kFwdBC;
    constexpr int KS = HS / 16;   // k-steps of Q K^T
    constexpr int NS = BC / 8;    // n-tiles of S
    constexpr int KP = BC / 16;   // k-steps of P V
    constexpr int NO = HS / 8;    // n-tiles of O

    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem);   // [BR][HS]
    bf16 *sK = sQ + BR * HS;                     // [2][BC][HS]
    bf16 *sV = sK + 2 * BC * HS;                 // [2][BC][HS]

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const LaneAddr la(lane);

    const int bh = blockIdx.x % BNH;
    const int q_tile = q_tiles - 1 - blockIdx.x / BNH;   // heaviest tiles first
    const int b = bh / NH, h = bh % NH;
    const int C = NH * HS;
    const int stride = 3 * C;   // between rows of qkv
    const bf16 *q_g = qkv + (size_t)b * T * stride + h * HS;
    const bf16 *k_g = q_g + C;
    const bf16 *v_g = q_g + 2 * C;
    const int q0 = q_tile * BR;
    const int kv_tiles = (min(q0 + BR, T) + BC - 1) / BC;   // causal: keys < q0 + BR
    const int warp_q0 = q0 + warp * WARP_ROWS;              // first query row of this warp

    load_tile<BR, HS, kFwdThreads>(sQ, q_g, stride, q0, T, tid);
    cp_async_commit();
    load_tile_pair<BC, HS, kFwdThreads>(sK, k_g, sV, v_g, stride, 0, T, tid);
    cp_async_commit();

    cp_async_wait<1>();   // Q has landed (tile 0 may still be in flight)
    __syncthreads();
    uint32_t qf[KS][MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
            ldsm_x4(qf[ks][mt], a_addr<HS>(sQ, la, warp * WARP_ROWS + mt * 16, 2 * ks));

    float o[MT][NO][4];
    float m_run[MT][2], l_run[MT][2];   // per owned row (g, g+8): see SoftmaxRow
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int n = 0; n < NO; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[mt][n][e] = 0.0f;
        m_run[mt][0] = m_run[mt][1] = -INFINITY;
        l_run[mt][0] = l_run[mt][1] = 0.0f;
    }

    for (int j = 0; j < kv_tiles; j++) {
        cp_async_wait<0>();
        __syncthreads();   // tile j visible to all; every warp is done with tile j-1's buffer
        if (j + 1 < kv_tiles) {
            const int nb = (j + 1) & 1;
            load_tile_pair<BC, HS, kFwdThreads>(sK + nb * BC * HS, k_g, sV + nb * BC * HS, v_g,
                                                stride, (j + 1) * BC, T, tid);
        }
        cp_async_commit();

        const int k0 = j * BC;
        if (k0 > warp_q0 + WARP_ROWS - 1) continue;   // all keys of the tile are in the future
        const bf16 *Kt = sK + (j & 1) * BC * HS;
        const bf16 *Vt = sV + (j & 1) * BC * HS;

        // S = Q K^T
        float s[MT][NS][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[mt][n][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
#pragma unroll
            for (int np = 0; np < NS / 2; np++) {
                uint32_t kb[4];
                ldsm_x4(kb, b_addr<HS>(Kt, la, np * 16, 2 * ks));
                mma_bf16_x2_rows(s, 2 * np, qf[ks], kb);
            }
        }

        // causal mask, only where the tile crosses the diagonal of this warp's rows
        if (k0 + BC - 1 > warp_q0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++) causal_mask(s[mt], warp_q0 + mt * 16 + g, k0 + 2 * t4);
        }

        // online softmax: S -> P in place, O rescaled
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                SoftmaxRow row{m_run[mt][hf], l_run[mt][hf]};
                float mx = row.m;
#pragma unroll
                for (int n = 0; n < NS; n++)
                    mx = fmaxf(mx, fmaxf(s[mt][n][2 * hf], s[mt][n][2 * hf + 1]));
                const float alpha = row.update(quad_max(mx), scale_log2);
                row.exponentiate(s[mt], hf, alpha, scale_log2);
                rescale(o[mt], hf, alpha);
            }

        // O += P V
#pragma unroll
        for (int kp = 0; kp < KP; kp++) {
            uint32_t pf[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) c_to_a(pf[mt], s[mt][2 * kp], s[mt][2 * kp + 1]);
#pragma unroll
            for (int np = 0; np < NO / 2; np++) {
                uint32_t vb[4];
                ldsm_x4_trans(vb, a_addr<HS>(Vt, la, kp * 16, 2 * np));
                mma_bf16_x2_rows(o, 2 * np, pf, vb);
            }
        }
    }

    // O /= l, logsumexp
    const FwdOut dst{out, logsumexp, b, h, bh, NH, HS, T};
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        store_o(dst, o[mt], m_run[mt], l_run[mt], warp_q0 + mt * 16 + g, t4, scale_log2);
}

// ================================================================================================
// Backward.
//
// Three kernels:
//  1. prep: D = rowsum(dO * O) per (b, h, t) into scratch, and the fp32 dQ accumulator zeroed
//     (for the Hopper main kernel also logsumexp * log2e, and its dQ order flags zeroed; the
//     deterministic Hopper kernel needs no zeroed accumulator: a tile's first part is stored).
//  2. main (on Hopper flash_sm90.cu's, the same algorithm with wgmma and TMA reductions; here
//     the mma.sync kernel of sm_80-89), key/value-outer: one block per (key/value tile of BC = 16*KV_WARPS rows, head);
//     warp w owns key/value rows kv0 + 16w .. +15 and keeps their dK, dV accumulators (and, at
//     HS=64, their K and V fragments) in registers. The block loops over the query tiles of
//     BR rows (64; 32 at HS=128, for registers) that can see its keys (from the diagonal to
//     T), Q, dO, logsumexp and D double-buffered through shared memory. Per query tile, per
//     warp, everything transposed so that the warp's own key rows are the mma rows:
//       S^T  = K Q^T                        (16 x BR)
//       P^T  = exp2(S^T * scale*log2e - logsumexp[col] * log2e), 0 above the diagonal
//       dP^T = V dO^T
//       dS^T = P^T * (dP^T - D[col])
//       dV  += P^T dO,  dK += dS^T Q        (P^T and dS^T stay in registers as A operands)
//       dS^T -> shared memory; barrier; then the block computes dQ_tile = dS K (BR x HS, each
//       warp 32 query rows x HS*BR/(32*KV_WARPS) columns) and adds it into the fp32 dQ
//       accumulator, (B, T, NH, HS) in scratch, with atomics (float2: one vector RED each).
//     At the end dK (times scale) and dV are written once, as bf16, into packed dqkv.
//  3. convert: dq (bf16) = scale * accumulator, into packed dqkv.
//
// Why atomics and not a separate query-outer dQ pass: the separate pass would recompute S, P
// and dP (two more of the five tile matmuls, 40% more tensor work, plus all the exp2 again);
// the atomics cost one 64x64 shared round trip of dS and BR*HS fp32 reductions per tile pair,
// which L2 absorbs (each warp-wide RED covers 8 full 32-byte sectors). The price is that dQ is
// not bitwise reproducible run to run (fp32 sums in varying order); dK, dV, O and logsumexp are.
//
// Causal balance: the first key/value tiles see the most query tiles, so the 1-D grid starts
// with key/value tile 0 of every head.
// ================================================================================================

template <int HS, int KV_WARPS, int BR>
constexpr size_t bwd_smem_bytes() {
    constexpr int BC = 16 * KV_WARPS;
    return (size_t)(2 * BC * HS + 2 * 2 * BR * HS + BC * BR) * sizeof(bf16)   // K V Q dO dS
           + 2 * 2 * BR * sizeof(float);                                      // lse, D
}

// Per (b, t, h), HS/8 threads: D[b,h,t] = sum_k dO[b,t,h,k] * O[b,t,h,k], dq_accum[b,t,h,:] = 0
// where dq_accum is given (null for the deterministic Hopper backward, which stores each tile's
// first part instead),
// and for the Hopper backward lse2[b,h,t] = logsumexp[b,h,t] * log2(e). D and lse2 are rows of
// Tpad (kFlashBwdRowPad multiple) floats per (b, h), zero past T; t runs to Tpad to write those.
// The first n_flags threads also zero the Hopper backward's dQ order flags.
template <int HS>
__global__ void flash_backward_prep_kernel(float *__restrict__ D, float *__restrict__ lse2,
                                           float *__restrict__ dq_accum,
                                           uint32_t *__restrict__ dq_flags, int n_flags,
                                           const bf16 *__restrict__ dout,
                                           const bf16 *__restrict__ out,
                                           const float *__restrict__ logsumexp, int T, int Tpad,
                                           int NH, int padded_rows) {
    constexpr int TPR = HS / 8;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (dq_flags && idx < n_flags) dq_flags[idx] = 0;
    const int prow = idx / TPR, c = idx % TPR;   // prow = (b*Tpad + t)*NH + h
    const int h = prow % NH, bt = prow / NH, t = bt % Tpad, b = bt / Tpad;
    const bool valid = prow < padded_rows && t < T;
    const size_t row = ((size_t)b * T + t) * NH + h;   // in dout, out and dq_accum
    float sum = 0.0f;
    if (valid) {
        const uint4 a = *reinterpret_cast<const uint4 *>(dout + row * HS + c * 8);
        const uint4 o = *reinterpret_cast<const uint4 *>(out + row * HS + c * 8);
        const __nv_bfloat162 *a2 = reinterpret_cast<const __nv_bfloat162 *>(&a);
        const __nv_bfloat162 *o2 = reinterpret_cast<const __nv_bfloat162 *>(&o);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 af = __bfloat1622float2(a2[i]), of = __bfloat1622float2(o2[i]);
            sum = fmaf(af.x, of.x, fmaf(af.y, of.y, sum));
        }
        if (dq_accum) {
            float4 *acc = reinterpret_cast<float4 *>(dq_accum + row * HS + c * 8);
            acc[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            acc[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
#pragma unroll
    for (int off = TPR / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (prow < padded_rows && c == 0) {
        const size_t bht = ((size_t)b * NH + h) * Tpad + t;
        D[bht] = sum;
        if (lse2) lse2[bht] = valid ? logsumexp[((size_t)b * NH + h) * T + t] * kLog2e : 0.0f;
    }
}

// dqkv[b,t,0,h,:] = bf16(scale * dq_accum[b,t,h,:]). HS/8 threads a row, 8 values each.
template <int HS>
__global__ void flash_dq_convert_kernel(bf16 *__restrict__ dqkv, const float *__restrict__ dq_accum,
                                        int NH, int rows, float scale) {
    constexpr int TPR = HS / 8;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = idx / TPR, c = idx % TPR;
    if (row >= rows) return;
    const float4 *src = reinterpret_cast<const float4 *>(dq_accum + (size_t)row * HS + c * 8);
    const float4 x = src[0], y = src[1];
    uint4 v;
    v.x = pack_bf16(x.x * scale, x.y * scale);
    v.y = pack_bf16(x.z * scale, x.w * scale);
    v.z = pack_bf16(y.x * scale, y.y * scale);
    v.w = pack_bf16(y.z * scale, y.w * scale);
    const int h = row % NH, bt = row / NH;
    *reinterpret_cast<uint4 *>(dqkv + (size_t)bt * 3 * NH * HS + h * HS + c * 8) = v;
}

template <int HS, int KV_WARPS, int BR>
__global__ void __launch_bounds__(KV_WARPS * 32)
    flash_backward_kernel(bf16 *__restrict__ dqkv, float *__restrict__ dq_accum,
                          const bf16 *__restrict__ dout, const bf16 *__restrict__ qkv,
                          const float *__restrict__ logsumexp, const float *__restrict__ Dg,
                          int T, int Tpad, int NH, int BNH, float scale, float scale_log2) {
    // Stages, per warp (shapes in the comment above):
    //   K, V of the block (at HS=64 into registers); dK = dV = 0
    //   per query tile i from the block's diagonal on (tile i+1 loading meanwhile):
    //     S^T = K Q^T, dP^T = V dO^T -> P^T (0 where causal, diagonal tiles), dS^T = P^T (dP^T - D)
    //     -> dV += P^T dO, dK += dS^T Q; dS^T -> shared -> dQ_i = dS K, added into the fp32 sums
    //   dK * scale, dV -> dqkv
    constexpr int THREADS = KV_WARPS * 32;
    constexpr int BC = 16 * KV_WARPS;   // key/value rows of the block
    constexpr int KS = HS / 16;         // k-steps over the head dim (S^T, dP^T)
    constexpr int NQ = BR / 8;          // n-tiles over queries (S^T, dP^T)
    constexpr int KQ = BR / 16;         // k-steps over queries (dV, dK)
    constexpr int NHd = HS / 8;         // n-tiles over the head dim (dV, dK)
    constexpr bool KV_IN_REGS = HS <= 64;
    // dQ split: DQ_ROW_GROUPS of 32 query rows (two mma tiles, so that each K fragment feeds
    // two mma) times DQ_COL_GROUPS of DQ_COLS head-dim columns, one warp each
    constexpr int DQ_ROW_GROUPS = BR / 32;
    constexpr int DQ_COL_GROUPS = KV_WARPS / DQ_ROW_GROUPS;
    constexpr int DQ_COLS = HS / DQ_COL_GROUPS;
    static_assert(BR % 32 == 0 && KV_WARPS % DQ_ROW_GROUPS == 0, "dQ warp split");
    static_assert(DQ_COLS % 16 == 0 && DQ_COLS <= 32, "dQ accumulators: at most 32 registers");
    static_assert(2 * BR <= THREADS, "one thread per logsumexp / D element");

    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sK = reinterpret_cast<bf16 *>(smem);   // [BC][HS]
    bf16 *sV = sK + BC * HS;                     // [BC][HS]
    bf16 *sQ = sV + BC * HS;                     // [2][BR][HS]
    bf16 *sdO = sQ + 2 * BR * HS;                // [2][BR][HS]
    bf16 *sdS = sdO + 2 * BR * HS;               // [BC][BR]  dS^T
    float *sL = reinterpret_cast<float *>(sdS + BC * BR);   // [2][BR] logsumexp
    float *sD = sL + 2 * BR;                                // [2][BR] D

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const LaneAddr la(lane);

    const int bh = blockIdx.x % BNH;
    const int kv_tile = blockIdx.x / BNH;   // heaviest (first) tiles first
    const int b = bh / NH, h = bh % NH;
    const int C = NH * HS;
    const int stride = 3 * C;   // between rows of qkv and dqkv
    const bf16 *q_g = qkv + (size_t)b * T * stride + h * HS;
    const bf16 *k_g = q_g + C;
    const bf16 *v_g = q_g + 2 * C;
    const bf16 *do_g = dout + (size_t)b * T * C + h * HS;
    const float *lse_g = logsumexp + (size_t)bh * T;
    const float *D_g = Dg + (size_t)bh * Tpad;
    const int kv0 = kv_tile * BC;
    const int first_q_tile = kv0 / BR;   // earlier query rows cannot see any key of the block
    const int q_tiles = (T + BR - 1) / BR;
    const int warp_kv0 = kv0 + warp * 16;

    // copy query tile i (Q, dO, logsumexp, D) into buffer `buf`
    auto load_q_tile = [&](int i, int buf) {
        const int q0 = i * BR;
        load_tile<BR, HS, THREADS>(sQ + buf * BR * HS, q_g, stride, q0, T, tid);
        load_tile<BR, HS, THREADS>(sdO + buf * BR * HS, do_g, C, q0, T, tid);
        if (tid < 2 * BR) {
            const int r = tid % BR, t = q0 + r;
            const bool valid = t < T;
            const float *src = (tid < BR ? lse_g : D_g) + (valid ? t : 0);
            cp_async_4(smem_addr((tid < BR ? sL : sD) + buf * BR + r), src, valid);
        }
    };

    load_tile_pair<BC, HS, THREADS>(sK, k_g, sV, v_g, stride, kv0, T, tid);
    cp_async_commit();
    load_q_tile(first_q_tile, 0);
    cp_async_commit();

    cp_async_wait<1>();   // K, V have landed
    __syncthreads();
    uint32_t kf[KV_IN_REGS ? KS : 1][4], vf[KV_IN_REGS ? KS : 1][4];
    if constexpr (KV_IN_REGS) {
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            ldsm_x4(kf[ks], a_addr<HS>(sK, la, warp * 16, 2 * ks));
            ldsm_x4(vf[ks], a_addr<HS>(sV, la, warp * 16, 2 * ks));
        }
    }

    float dk[NHd][4], dv[NHd][4];
#pragma unroll
    for (int n = 0; n < NHd; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;

    for (int i = first_q_tile; i < q_tiles; i++) {
        const int buf = (i - first_q_tile) & 1;
        cp_async_wait<0>();
        __syncthreads();   // tile i visible; every warp is done with tile i-1 (and with sdS)
        if (i + 1 < q_tiles) load_q_tile(i + 1, buf ^ 1);
        cp_async_commit();

        const int q0 = i * BR;
        const bf16 *Qt = sQ + buf * BR * HS;
        const bf16 *dOt = sdO + buf * BR * HS;
        const float *Lt = sL + buf * BR;
        const float *Dt = sD + buf * BR;

        // S^T = K Q^T, dP^T = V dO^T
        float st[NQ][4], dpt[NQ][4];
#pragma unroll
        for (int n = 0; n < NQ; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) st[n][e] = dpt[n][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            uint32_t ka[4], va[4];
            if constexpr (KV_IN_REGS) {
#pragma unroll
                for (int e = 0; e < 4; e++) ka[e] = kf[ks][e], va[e] = vf[ks][e];
            } else {
                ldsm_x4(ka, a_addr<HS>(sK, la, warp * 16, 2 * ks));
                ldsm_x4(va, a_addr<HS>(sV, la, warp * 16, 2 * ks));
            }
#pragma unroll
            for (int np = 0; np < NQ / 2; np++) {
                uint32_t qb[4], ob[4];
                ldsm_x4(qb, b_addr<HS>(Qt, la, np * 16, 2 * ks));
                mma_bf16_x2(st[2 * np], st[2 * np + 1], ka, qb);
                ldsm_x4(ob, b_addr<HS>(dOt, la, np * 16, 2 * ks));
                mma_bf16_x2(dpt[2 * np], dpt[2 * np + 1], va, ob);
            }
        }

        // P^T (into st) and dS^T (into dpt). Columns are queries: each thread needs the
        // logsumexp and D of columns n*8 + 2*t4 + {0,1}. Query rows past T hold zeros
        // (Q, dO, logsumexp and D zero-filled), so they give dS = 1 * (0 - 0) = 0 and
        // dO = 0: they add nothing to dK and dV.
        const bool diagonal = q0 < kv0 + BC;   // some key of the block is after some query
#pragma unroll
        for (int n = 0; n < NQ; n++) {
            const float2 lse2 = *reinterpret_cast<const float2 *>(Lt + n * 8 + 2 * t4);
            const float2 d2 = *reinterpret_cast<const float2 *>(Dt + n * 8 + 2 * t4);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float lse = (e & 1) ? lse2.y : lse2.x;
                const float d = (e & 1) ? d2.y : d2.x;
                float p = exp2f(fmaf(st[n][e], scale_log2, -lse * kLog2e));
                if (diagonal) {
                    const int kv = warp_kv0 + g + (e >> 1) * 8;
                    const int q = q0 + n * 8 + 2 * t4 + (e & 1);
                    if (q < kv) p = 0.0f;
                }
                st[n][e] = p;
                dpt[n][e] = p * (dpt[n][e] - d);
            }
        }

        // P^T and dS^T as bf16 A fragments; dS^T also -> shared memory, for dQ
        uint32_t pa[KQ][4], dsa[KQ][4];
#pragma unroll
        for (int kq = 0; kq < KQ; kq++) {
            c_to_a(pa[kq], st[2 * kq], st[2 * kq + 1]);
            c_to_a(dsa[kq], dpt[2 * kq], dpt[2 * kq + 1]);
            const int r = warp * 16 + g;
            uint32_t *ds_lo = reinterpret_cast<uint32_t *>(sdS + swz<BR>(r, 2 * kq) + 2 * t4);
            uint32_t *ds_hi = reinterpret_cast<uint32_t *>(sdS + swz<BR>(r, 2 * kq + 1) + 2 * t4);
            ds_lo[0] = dsa[kq][0];
            ds_lo[4 * BR] = dsa[kq][1];   // row r + 8: same swizzle bits as row r
            ds_hi[0] = dsa[kq][2];
            ds_hi[4 * BR] = dsa[kq][3];
        }

        // dV += P^T dO, dK += dS^T Q
#pragma unroll
        for (int kq = 0; kq < KQ; kq++) {
#pragma unroll
            for (int np = 0; np < NHd / 2; np++) {
                uint32_t ob[4], qb[4];
                ldsm_x4_trans(ob, a_addr<HS>(dOt, la, kq * 16, 2 * np));
                mma_bf16_x2(dv[2 * np], dv[2 * np + 1], pa[kq], ob);
                ldsm_x4_trans(qb, a_addr<HS>(Qt, la, kq * 16, 2 * np));
                mma_bf16_x2(dk[2 * np], dk[2 * np + 1], dsa[kq], qb);
            }
        }
        __syncthreads();   // dS^T of all warps in shared memory

        // dQ rows q0 + 32*rg .. +31, columns col0 .. +DQ_COLS-1: dS (dS^T via .trans) times K
        const int rg = warp % DQ_ROW_GROUPS, col0 = (warp / DQ_ROW_GROUPS) * DQ_COLS;
        float acc[2][DQ_COLS / 8][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int n = 0; n < DQ_COLS / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mt][n][e] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < BC / 16; kc++) {
            uint32_t dsf[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
                ldsm_x4_trans(dsf[mt], b_addr<BR>(sdS, la, kc * 16, 2 * (2 * rg + mt)));
#pragma unroll
            for (int np = 0; np < DQ_COLS / 16; np++) {
                uint32_t kb[4];
                ldsm_x4_trans(kb, a_addr<HS>(sK, la, kc * 16, col0 / 8 + 2 * np));
                mma_bf16_x2_rows(acc, 2 * np, dsf, kb);
            }
        }
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int q = q0 + rg * 32 + mt * 16 + g + hf * 8;
                if (q >= T) continue;
                float *dst = dq_accum + ((size_t)(b * T + q) * NH + h) * HS + col0 + 2 * t4;
#pragma unroll
                for (int n = 0; n < DQ_COLS / 8; n++)
                    atomic_add_float2(dst + n * 8,
                                      make_float2(acc[mt][n][2 * hf], acc[mt][n][2 * hf + 1]));
            }
    }

    // dK = scale * sum dS^T Q, dV = sum P^T dO: written once into packed dqkv
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int kv = warp_kv0 + g + hf * 8;
        if (kv >= T) continue;
        bf16 *dk_g = dqkv + (size_t)(b * T + kv) * stride + C + h * HS + 2 * t4;
        bf16 *dv_g = dk_g + C;
#pragma unroll
        for (int n = 0; n < NHd; n++) {
            *reinterpret_cast<uint32_t *>(dk_g + n * 8) =
                pack_bf16(dk[n][2 * hf] * scale, dk[n][2 * hf + 1] * scale);
            *reinterpret_cast<uint32_t *>(dv_g + n * 8) = pack_bf16(dv[n][2 * hf], dv[n][2 * hf + 1]);
        }
    }
}

// ---- host side ------------------------------------------------------------------------------

// raise a kernel's dynamic shared-memory limit once (needed above 48 KB)
template <typename Kernel>
void set_smem_limit(Kernel kernel, size_t bytes, bool *done) {
    if (*done) return;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = true;
}

// attention_set_deterministic's last word (the Hopper backward orders its dQ additions)
bool deterministic_asked = false;

[[noreturn]] void unsupported_head_size(int HS) {
    die("flash attention supports head sizes 64 and 128, not %d", HS);
}

template <int HS, int WARP_ROWS>
void forward_launch(floatX *out, float *logsumexp, const floatX *qkv, int B, int T, int NH) {
    constexpr size_t smem = fwd_smem_bytes<HS, WARP_ROWS>();
    static bool smem_set = false;
    set_smem_limit(flash_forward_kernel<HS, WARP_ROWS>, smem, &smem_set);
    const int q_tiles = ceil_div(T, kFwdWarps * WARP_ROWS);
    const float scale_log2 = kLog2e / sqrtf((float)HS);
    flash_forward_kernel<HS, WARP_ROWS><<<q_tiles * B * NH, kFwdThreads, smem, cuda_stream>>>(
        BF(out), logsumexp, CBF(qkv), T, NH, B * NH, q_tiles, scale_log2);
    LAUNCH_CHECK();
}

// The backward's scratch, in this order: the fp32 dQ sums (B, T, NH, HS); D and lse2 (B*NH rows
// of Tpad floats each, see the prep kernel); the Hopper backward's dQ order flags, one per
// (b, h, query tile of 64 or more rows), then its work-item counter. Sizes and offsets in this
// one place.
struct BwdScratch {
    float *dq_accum, *D, *lse2;
    uint32_t *dq_flags;
    int Tpad, n_flags;
    size_t bytes;
};
BwdScratch bwd_scratch(void *base, int B, int T, int NH, int HS) {
    BwdScratch s;
    s.Tpad = ceil_div(T, kFlashBwdRowPad) * kFlashBwdRowPad;
    s.n_flags = B * NH * ceil_div(T, 64) + 1;   // and the Hopper backward's item counter
    const size_t dq = (size_t)B * T * NH * HS, vec = (size_t)B * NH * s.Tpad;
    s.bytes = (dq + 2 * vec + s.n_flags) * sizeof(float);
    float *f = static_cast<float *>(base);
    s.dq_accum = f;
    s.D = f ? f + dq : nullptr;
    s.lse2 = f ? f + dq + vec : nullptr;
    s.dq_flags = f ? reinterpret_cast<uint32_t *>(f + dq + 2 * vec) : nullptr;
    return s;
}

// prep, the main kernel (Hopper's where there is one, else the mma.sync kernel above), convert
template <int HS, int KV_WARPS, int BR>
void backward_launch(floatX *dqkv, void *scratch, const floatX *dout, const floatX *qkv,
                     const floatX *out, const float *logsumexp, int B, int T, int NH) {
    const bool hopper = flash_sm90_backward_enabled();
    const BwdScratch sc = bwd_scratch(scratch, B, T, NH, HS);
    const int prep_threads = 256;
    const int padded_rows = B * sc.Tpad * NH;
    // the deterministic Hopper backward writes every query tile's sums first with a store (its
    // writer's comment): no zeros to write here, none for its first additions to read back
    const bool zero_dq = !(hopper && deterministic_asked);
    flash_backward_prep_kernel<HS><<<ceil_div((long)padded_rows * (HS / 8), prep_threads),
                                     prep_threads, 0, cuda_stream>>>(
        sc.D, hopper ? sc.lse2 : nullptr, zero_dq ? sc.dq_accum : nullptr,
        hopper ? sc.dq_flags : nullptr, sc.n_flags,
        CBF(dout), CBF(out), logsumexp, T, sc.Tpad, NH, padded_rows);
    LAUNCH_CHECK();

    const float scale = 1.0f / sqrtf((float)HS);
    if (hopper) {
        flash_sm90_backward(dqkv, sc.dq_accum, sc.lse2, sc.D, sc.dq_flags, dout, qkv, B, T,
                            sc.Tpad, NH, HS, deterministic_asked);
    } else {
        constexpr size_t smem = bwd_smem_bytes<HS, KV_WARPS, BR>();
        static bool smem_set = false;
        set_smem_limit(flash_backward_kernel<HS, KV_WARPS, BR>, smem, &smem_set);
        const int kv_tiles = ceil_div(T, 16 * KV_WARPS);
        flash_backward_kernel<HS, KV_WARPS, BR>
            <<<kv_tiles * B * NH, KV_WARPS * 32, smem, cuda_stream>>>(
                BF(dqkv), sc.dq_accum, CBF(dout), CBF(qkv), logsumexp, sc.D, T, sc.Tpad, NH,
                B * NH, scale, scale * kLog2e);
        LAUNCH_CHECK();
    }

    const int rows = B * T * NH;
    flash_dq_convert_kernel<HS><<<ceil_div((long)rows * (HS / 8), prep_threads), prep_threads, 0,
                                  cuda_stream>>>(BF(dqkv), sc.dq_accum, NH, rows, scale);
    LAUNCH_CHECK();
}

}  // namespace

extern "C" {

const char *const attention_name = "flash";

size_t attention_saved_size(int B, int T, int NH, int HS) {
    return (size_t)B * NH * T * sizeof(float);   // logsumexp (B, NH, T)
}

// backward only: the fp32 dQ sums and the per-row vectors (bwd_scratch)
size_t attention_scratch_size(int B, int T, int NH, int HS) {
    return bwd_scratch(nullptr, B, T, NH, HS).bytes;
}

// dQ is summed across key blocks: with fp32 atomics by the mma.sync kernel (never
// deterministic), in key-block order by the Hopper kernel when asked
int attention_set_deterministic(int on) {
    deterministic_asked = on != 0;
    return attention_deterministic();
}
int attention_deterministic(void) { return flash_sm90_backward_enabled() && deterministic_asked; }

void attention_forward(floatX *out, void *saved, void *scratch, const floatX *qkv, int B, int T,
                       int NH, int HS) {
    float *logsumexp = static_cast<float *>(saved);
    if ((HS == 64 || HS == 128) && flash_sm90_enabled()) {   // Hopper: TMA + wgmma kernel
        flash_sm90_forward(out, logsumexp, qkv, B, T, NH, HS);
        return;
    }
    switch (HS) {
        case 64: forward_launch<64, FLASH_FWD_WARP_ROWS>(out, logsumexp, qkv, B, T, NH); break;
        case 128: forward_launch<128, 16>(out, logsumexp, qkv, B, T, NH); break;
        default: unsupported_head_size(HS);
    }
}

void attention_backward(floatX *dqkv, void *scratch, const floatX *dout, const floatX *qkv,
                        const floatX *out, const void *saved, int B, int T, int NH, int HS) {
    const float *logsumexp = static_cast<const float *>(saved);
    switch (HS) {
        case 64:
            backward_launch<64, FLASH_BWD_KV_WARPS, 64>(dqkv, scratch, dout, qkv, out, logsumexp,
                                                        B, T, NH);
            break;
        case 128:
            backward_launch<128, 4, 32>(dqkv, scratch, dout, qkv, out, logsumexp, B, T, NH);
            break;
        default: unsupported_head_size(HS);
    }
}

}  // extern "C"
