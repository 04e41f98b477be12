// attention_counts.c: the pencil counts of attention_counts.h (conventions there). Each kernel
// of a pass is one block below, in the order the backend launches them, so that a count can be
// read against the code it describes.
#include "attention_counts.h"

enum { BF16 = 2, FP32 = 4 };
// attention/flash_sm90.h's kFlashBwdRowPad: D and logsumexp*log2e rows padded to a multiple
static const int kRowPad = 128;

static long ceil_div(long a, long b) { return (a + b - 1) / b; }
static long min_l(long a, long b) { return a < b ? a : b; }

AttnCount attn_count_add(AttnCount a, AttnCount b) {
    AttnCount c = {a.flops + b.flops, a.bytes_read + b.bytes_read,
                   a.bytes_written + b.bytes_written};
    return c;
}

int flash_tiles_for(FlashTiles *tiles, int fwd_sm90, int bwd_sm90, int T, int HS) {
    if (T < 1 || (HS != 64 && HS != 128)) return -1;
    FlashTiles t;
    t.fwd_sm90 = fwd_sm90 != 0;
    t.bwd_sm90 = t.fwd_sm90 && bwd_sm90 != 0;   // the Hopper backward only beside its forward
    if (t.fwd_sm90) {
        // flash_sm90_forward: 64 query rows per consumer warpgroup, 2 consumers, 3 at HS=64
        // beyond T=1024; key tiles of kBC = 128
        t.fwd_br = HS == 64 && T > 1024 ? 192 : 128;
        t.fwd_bc = 128;
    } else {
        // flash.cu forward_launch: kFwdWarps (4) x FLASH_FWD_WARP_ROWS (32; 16 at HS=128),
        // key tiles of kFwdBC = 64
        t.fwd_br = HS == 64 ? 128 : 64;
        t.fwd_bc = 64;
    }
    if (t.bwd_sm90) {
        t.bwd_br = HS == 64 ? 128 : 64;   // BwdShape::BR
        t.bwd_bc = 128;                   // BwdShape::BC
    } else {
        t.bwd_br = HS == 64 ? 64 : 32;    // backward_launch<64, 4, 64>, <128, 4, 32>
        t.bwd_bc = 16 * 4;                // 16 key rows per warp, FLASH_BWD_KV_WARPS = 4
    }
    *tiles = t;
    return 0;
}

int naive_attention_count(AttnCount *count, AttnPass pass, int B, int T, int NH, int HS) {
    if (B < 1 || T < 1 || NH < 1 || HS < 1) return -1;
    const double heads = (double)B * NH;
    const double n = heads * T * HS;                 // one (B,NH,T,HS) tensor, elements
    const double s = heads * T * (double)T;          // one (B,NH,T,T) tensor
    const double c = heads * T * ((double)T + 1) / 2;   // its causal half, columns 0..t
    const double mm = heads * (double)T * T * HS;    // one causal T x T product: 2*T*T*HS/2
    double rd = 0, wr = 0, flops = 0;
    if (pass == ATTN_FORWARD) {
        rd += 3 * n, wr += 3 * n;            // permute qkv -> Q, K, V
        rd += 2 * n, wr += s, flops += mm;   // S = Q K^T
        rd += c, wr += s;                    // P = softmax(S): causal half read, rows written
        rd += s + n, wr += n, flops += mm;   // O = P V
        rd += n, wr += n;                    // permute O -> out
    } else if (pass == ATTN_BACKWARD) {
        rd += 3 * n, wr += 3 * n;            // permute qkv -> Q, K, V
        rd += n, wr += n;                    // permute dout -> dO
        rd += s + n, wr += n, flops += mm;   // dV = P^T dO
        rd += 2 * n, wr += s, flops += mm;   // dP = dO V^T
        rd += 2 * c, wr += s;                // dS = P * (dP - rowsum(P dP)), in place over dP
        rd += s + n, wr += n, flops += mm;   // dQ = dS K
        rd += s + n, wr += n, flops += mm;   // dK = dS^T Q
        rd += 3 * n, wr += 3 * n;            // permute dQ, dK, dV -> dqkv
    } else {
        return -1;
    }
    count->flops = flops;
    count->bytes_read = rd * BF16;
    count->bytes_written = wr * BF16;
    return 0;
}

// forward, one head: per query tile, Q once, K and V of each key tile it sees, O and logsumexp
static void flash_forward_head(const FlashTiles *t, long T, long HS, double *rd, double *wr) {
    const long q_tiles = ceil_div(T, t->fwd_br);
    for (long i = 0; i < q_tiles; i++) {
        const long q0 = i * t->fwd_br, rows = min_l(t->fwd_br, T - q0);
        // causal: key tiles holding keys < q0 + BR; loads past T are zero-filled, not read
        const long kv_tiles = ceil_div(min_l(q0 + t->fwd_br, T), t->fwd_bc);
        const long keys = min_l(kv_tiles * t->fwd_bc, T);
        *rd += (double)rows * HS * BF16 + 2.0 * keys * HS * BF16;
        *wr += (double)rows * HS * BF16 + (double)rows * FP32;
    }
}

// backward's main kernel, one head: per key block, K and V once, dK and dV once; per query tile
// from the diagonal on, Q, dO, logsumexp and D read, dQ added (read + write fp32)
static void flash_backward_head(const FlashTiles *t, long T, long HS, double *rd, double *wr) {
    const long q_tiles = ceil_div(T, t->bwd_br), kv_blocks = ceil_div(T, t->bwd_bc);
    for (long k = 0; k < kv_blocks; k++) {
        const long kv0 = k * t->bwd_bc, keys = min_l(t->bwd_bc, T - kv0);
        *rd += 2.0 * keys * HS * BF16;
        *wr += 2.0 * keys * HS * BF16;
        for (long i = kv0 / t->bwd_br; i < q_tiles; i++) {
            const long rows = min_l(t->bwd_br, T - i * t->bwd_br);
            // Hopper copies the padded vectors a whole tile at a time; mma.sync the valid rows
            const long vec_rows = t->bwd_sm90 ? t->bwd_br : rows;
            *rd += 2.0 * rows * HS * BF16 + 2.0 * vec_rows * FP32;
            *rd += (double)rows * HS * FP32;   // dQ sums: read ...
            *wr += (double)rows * HS * FP32;   // ... and written back with the addition
        }
    }
}

int flash_attention_count(AttnCount *count, AttnPass pass, const FlashTiles *tiles, int B, int T,
                          int NH, int HS) {
    if (B < 1 || T < 1 || NH < 1 || HS < 1 || !tiles || tiles->fwd_br < 1 || tiles->fwd_bc < 1 ||
        tiles->bwd_br < 1 || tiles->bwd_bc < 1)
        return -1;
    const double heads = (double)B * NH;
    const double n = heads * T * HS;
    const double mm = heads * (double)T * T * HS;   // one causal T x T product
    double rd = 0, wr = 0, flops = 0;                // per head in the kernels, then all heads
    if (pass == ATTN_FORWARD) {
        flash_forward_head(tiles, T, HS, &rd, &wr);
        rd *= heads, wr *= heads;
        flops = 2 * mm;   // S = QK^T, O = PV
    } else if (pass == ATTN_BACKWARD) {
        flash_backward_head(tiles, T, HS, &rd, &wr);
        rd *= heads, wr *= heads;
        const double padded = heads * ceil_div(T, kRowPad) * kRowPad;
        // prep: dO and O read, D written (padded rows), the fp32 dQ sums zeroed; on Hopper also
        // logsumexp read, logsumexp*log2e written, one order flag per (b, h, 64 query rows)
        rd += 2 * n * BF16;
        wr += padded * FP32 + n * FP32;
        if (tiles->bwd_sm90) {
            rd += heads * T * FP32;
            wr += padded * FP32 + heads * ceil_div(T, 64) * FP32;
        }
        // convert: dQ sums read, dQ written as bf16 into dqkv
        rd += n * FP32;
        wr += n * BF16;
        flops = 5 * mm;   // S recomputed, dP, dV, dK, dQ
    } else {
        return -1;
    }
    count->flops = flops;
    count->bytes_read = rd;
    count->bytes_written = wr;
    return 0;
}
