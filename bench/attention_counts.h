// attention_counts.h: what one pass of causal attention costs, counted with a pencil: FLOPs and
// the bytes its kernels read and write in device memory (DRAM), for the three-kernel baseline
// (attention/naive.cu) and the fused kernels (attention/flash.cu, attention/flash_sm90.cu), as
// functions of B, NH, T, HS and the flash kernels' tile sizes. `make compare`'s receipt
// (scripts/receipt.sh, bench/attention --receipt) prints these beside what Nsight Compute
// measures; tests/test_attention_counts.c checks them against FlashAttention's closed forms.
//
// FLOPs, one convention for both backends (the one bench/attention.cu reports TFLOP/s with):
//   - matrix products only, 2 FLOPs per multiply-add (softmax, exp, scaling are O(T^2) without
//     the HS factor and left out, as the FlashAttention papers do);
//   - causal masking halves every T x T product: a product of (T, HS) and (HS, T), or of
//     (T, T) and (T, HS), counts 2*T*T*HS/2 = T^2*HS per head;
//   - forward: S = QK^T and O = PV, 2 products; backward: dV, dP, dQ, dK, 4 products, and flash
//     adds a 5th, the recomputation of S = QK^T (P from it and the logsumexp). So per head:
//     forward 2 T^2 HS for both, backward 4 T^2 HS naive and 5 T^2 HS flash.
//   (What the hardware executes differs: naive's cuBLAS products compute the full T x T, twice
//   the counted figure, and flash computes its diagonal tiles in full. The convention counts
//   the work the algorithm needs, so that the two backends differ only by the recomputation.)
//
// Bytes, the pencil count: every global load and store the pass's kernels issue, each counted
// once as issued, as if no cache stood between the kernels and DRAM. So K and V re-read by each
// query tile count each time, and the fp32 dQ sums that flash's backward adds tile by tile count
// as a read and a write per addition. cuBLAS's products are counted at their minimum: each
// operand read once, the result written once. Nsight Compute's dram__bytes measure what
// reached DRAM: below the pencil where L2 (50 MB on an H200) keeps re-read tiles and the dQ sums,
// above it where cuBLAS re-reads operands its tiling does not keep on chip.
//   naive (bf16 everywhere: Q, K, V, O split into (B,NH,T,HS) copies by permute kernels; S, P,
//   dP, dS (B,NH,T,T) bf16; each softmax kernel reads the causal half of its rows, columns
//   0..t, and writes whole rows, zeros past t):
//     forward   permute qkv -> Q,K,V; S = QK^T; P = softmax(S) in place; O = PV; permute O
//     backward  permute qkv, dout; dV = P^T dO; dP = dO V^T; dS = softmax'(P, dP) in place;
//               dQ = dS K; dK = dS^T Q; permute dQ, dK, dV -> dqkv
//   flash (Q, K, V, O, dO bf16 read in place from the packed tensors; logsumexp, D fp32):
//     forward   per query tile of BR rows: Q once, K and V of every key tile of BC rows up to
//               the diagonal, O and the logsumexp written once
//     backward  prep: dO, O (and on Hopper logsumexp) read; D (and on Hopper logsumexp*log2e,
//               the dQ order flags) written, rows padded to kFlashBwdRowPad; the fp32 dQ sums
//               zeroed. main: per key block of BC rows, K and V once, then Q, dO, logsumexp, D of
//               every query tile of BR rows from the diagonal on, dQ added per tile (read and
//               write, fp32), dK and dV written once. convert: dQ sums read, bf16 dQ written.
#ifndef ATTENTION_COUNTS_H
#define ATTENTION_COUNTS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ATTN_FORWARD = 0, ATTN_BACKWARD = 1 } AttnPass;

// doubles: B*NH*T^2*HS FLOPs pass 2^53 only far beyond any shape here, and stay exact below it
typedef struct {
    double flops;           // the convention above
    double bytes_read;      // pencil count, bytes
    double bytes_written;   // pencil count, bytes
} AttnCount;

// The tiles of the flash kernels that run: query rows and key rows of a forward tile, query rows
// of a backward step and key rows of a backward block, and which kernels (sm90 = Hopper's).
typedef struct {
    int fwd_br, fwd_bc, bwd_br, bwd_bc;
    int fwd_sm90, bwd_sm90;
} FlashTiles;

// The tiles attention/flash.cu and flash_sm90.cu pick for this T and HS (64 or 128): on Hopper
// (fwd_sm90: flash_sm90_enabled(), bwd_sm90: flash_sm90_backward_enabled()) Shape and BwdShape
// of flash_sm90.cu, else the mma.sync kernels' FLASH_FWD_WARP_ROWS and FLASH_BWD_KV_WARPS at
// their defaults. 0 on success, -1 (tiles untouched) for another head size or T < 1.
int flash_tiles_for(FlashTiles *tiles, int fwd_sm90, int bwd_sm90, int T, int HS);

// One pass of each backend. 0 on success; -1 (count untouched) when a size is below 1, a tile
// is below 1, or the pass is not ATTN_FORWARD or ATTN_BACKWARD.
int naive_attention_count(AttnCount *count, AttnPass pass, int B, int T, int NH, int HS);
int flash_attention_count(AttnCount *count, AttnPass pass, const FlashTiles *tiles, int B, int T,
                          int NH, int HS);

// a + b (forward + backward)
AttnCount attn_count_add(AttnCount a, AttnCount b);

#ifdef __cplusplus
}
#endif
#endif
