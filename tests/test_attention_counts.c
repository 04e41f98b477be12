// test_attention_counts.c: the pencil counts of bench/attention_counts.c against the closed
// forms of the FlashAttention paper (Dao et al. 2022), on small shapes, per head unless said.
//   standard attention (its Algorithm 0 forward, Algorithm 3 backward), in elements:
//     forward  4Nd + 4N^2 (read Q, K; write S; read S; write P; read P, V; write O)
//     backward 8Nd + 7N^2 (dV = P^T dO; dP = dO V^T; dS from P, dP; dQ = dS K; dK = dS^T Q)
//   tiled attention (Theorem 2): Theta(N^2 d^2 / M) with M the on-chip memory; with query and
//   key tiles of b rows the K, V re-reads are N^2 d / b = N^2 d^2 / M for M = b d.
// The naive backend differs from Algorithm 0 by exactly two things its code does: permute
// kernels around the products (qkv -> Q, K, V and back: 8Nd forward, 14Nd backward) and
// softmax kernels that read only the causal half of each row (N(N+1)/2 of N^2). The test states
// those differences and checks that nothing else differs. FLOPs: the convention of
// attention_counts.h (2 per multiply-add, causal halves, flash's backward recomputes S).
// Counted figures only: no measured figure is asserted on anywhere.
#include <string.h>

#include "../bench/attention_counts.h"
#include "test.h"

static double total(AttnCount c) { return c.bytes_read + c.bytes_written; }
static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b); }

// the flash tiles of the paper's picture: b x b, mma.sync kernels (no Hopper extras)
static FlashTiles square_tiles(int b, int sm90) {
    FlashTiles t = {b, b, b, b, sm90, sm90};
    return t;
}

static void test_naive_closed_forms(void) {
    const int Ns[] = {64, 256, 1000}, ds[] = {64, 128};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            const double N = Ns[i], d = ds[j], causal = N * (N + 1) / 2;
            AttnCount f, b;
            CHECK(naive_attention_count(&f, ATTN_FORWARD, 1, Ns[i], 1, ds[j]) == 0, "naive fwd");
            CHECK(naive_attention_count(&b, ATTN_BACKWARD, 1, Ns[i], 1, ds[j]) == 0, "naive bwd");
            const double paper_fwd = 4 * N * d + 4 * N * N, paper_bwd = 8 * N * d + 7 * N * N;
            const double fwd = paper_fwd + 8 * N * d - (N * N - causal);
            const double bwd = paper_bwd + 14 * N * d - 2 * (N * N - causal);
            CHECK(near(total(f), 2 * fwd), "naive forward N=%g d=%g: %.0f bytes, closed form %.0f",
                  N, d, total(f), 2 * fwd);
            CHECK(near(total(b), 2 * bwd), "naive backward N=%g d=%g: %.0f bytes, closed form %.0f",
                  N, d, total(b), 2 * bwd);
            // S, P, dP, dS: what is written of size N^2 is 2N^2 each way (S and P; dP and dS)
            CHECK(near(f.bytes_written, 2 * (5 * N * d + 2 * N * N)), "naive forward writes N=%g", N);
            CHECK(near(b.bytes_written, 2 * (10 * N * d + 2 * N * N)), "naive backward writes N=%g", N);
            // FLOPs: 4N^2 d forward and 8N^2 d backward, halved by the causal mask
            CHECK(near(f.flops, 2 * N * N * d), "naive forward FLOPs %.0f", f.flops);
            CHECK(near(b.flops, 4 * N * N * d), "naive backward FLOPs %.0f", b.flops);
        }
}

static void test_flash_closed_forms(void) {
    const int bs[] = {64, 128}, ms[] = {1, 4, 16}, ds[] = {64, 128};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 2; j++)
                for (int sm90 = 0; sm90 <= 1; sm90++) {
                    const int bt = bs[i], Nt = bs[i] * ms[k];
                    const double b = bt, N = Nt, d = ds[j], m = ms[k];
                    const double M = b * d;   // Theorem 2's on-chip memory: one b x d tile
                    const FlashTiles t = square_tiles(bt, sm90);
                    AttnCount f, g;
                    CHECK(flash_attention_count(&f, ATTN_FORWARD, &t, 1, Nt, 1, ds[j]) == 0, "fwd");
                    CHECK(flash_attention_count(&g, ATTN_BACKWARD, &t, 1, Nt, 1, ds[j]) == 0, "bwd");
                    // forward: Q once, K and V N^2 d^2/M + Nd (tile i reads i+1 key tiles), O once
                    // (bf16), the logsumexp (fp32)
                    const double fwd = 2 * (N * d + (N * N * d * d / M + N * d) + N * d) + 4 * N;
                    CHECK(near(total(f), fwd), "flash forward N=%g b=%g d=%g: %.0f, closed form %.0f",
                          N, b, d, total(f), fwd);
                    // backward: m(m+1)/2 (key block, query tile) pairs, each Q, dO (bf16), lse, D
                    // (fp32) read and a b x d fp32 dQ tile added (read + write); K, V read and
                    // dK, dV written once; prep reads dO, O, writes D (rows padded to 128) and
                    // zeroes the dQ sums; convert reads the sums and writes bf16 dQ
                    const double pairs = m * (m + 1) / 2, pad = ceil(N / 128) * 128;
                    double bwd = pairs * (2 * 2 * b * d + 4 * 2 * b + 2 * 4 * b * d) +
                                 2 * 2 * N * d + 2 * 2 * N * d +            // K, V; dK, dV
                                 2 * 2 * N * d + 4 * pad + 4 * N * d +      // prep
                                 4 * N * d + 2 * N * d;                     // convert
                    if (sm90)   // prep: logsumexp read, logsumexp*log2e and the order flags written
                        bwd += 4 * N + 4 * pad + 4 * ceil(N / 64);
                    CHECK(near(total(g), bwd), "flash backward N=%g b=%g d=%g sm90=%d: %.0f, closed form %.0f",
                          N, b, d, sm90, total(g), bwd);
                    CHECK(near(f.flops, 2 * N * N * d), "flash forward FLOPs");
                    CHECK(near(g.flops, 5 * N * N * d), "flash backward FLOPs: S recomputed");
                }
}

// the exchange itself, counted at GPT-2 small's shape with the tiles the kernels pick: more
// FLOPs (7/6: the recomputation), fewer bytes; and the bytes ratio flat in N (d^2/M), while
// naive's bytes grow as N^2 against flash's N^2/b
static void test_exchange(void) {
    for (int sm90 = 0; sm90 <= 1; sm90++) {
        FlashTiles t;
        CHECK(flash_tiles_for(&t, sm90, sm90, 1024, 64) == 0, "tiles");
        AttnCount nf, nb, ff, fb;
        naive_attention_count(&nf, ATTN_FORWARD, 16, 1024, 12, 64);
        naive_attention_count(&nb, ATTN_BACKWARD, 16, 1024, 12, 64);
        flash_attention_count(&ff, ATTN_FORWARD, &t, 16, 1024, 12, 64);
        flash_attention_count(&fb, ATTN_BACKWARD, &t, 16, 1024, 12, 64);
        const AttnCount n = attn_count_add(nf, nb), f = attn_count_add(ff, fb);
        CHECK(near(f.flops / n.flops, 7.0 / 6.0), "flash/naive FLOPs %.4f, not 7/6", f.flops / n.flops);
        // without a cache the fp32 dQ additions and K, V re-reads weigh: 2-3x fewer bytes here
        CHECK(total(f) < total(n) / 2, "flash bytes %.3g not under half of naive's %.3g", total(f), total(n));
        printf("counted, B=16 T=1024 NH=12 HS=64, %s: naive %.2f GFLOP %.3f GB, flash %.2f GFLOP %.3f GB\n",
               sm90 ? "Hopper tiles" : "mma.sync tiles", n.flops / 1e9, total(n) / 1e9, f.flops / 1e9, total(f) / 1e9);
    }
    // the N^2 terms: b x b tiles, d = 64, N large: flash/naive tends to a constant
    const FlashTiles t = square_tiles(128, 0);
    double ratio[2];
    for (int k = 0; k < 2; k++) {
        const int N = 1 << (15 + k);
        AttnCount n, f;
        naive_attention_count(&n, ATTN_FORWARD, 1, N, 1, 64);
        flash_attention_count(&f, ATTN_FORWARD, &t, 1, N, 1, 64);
        ratio[k] = total(f) / total(n);
    }
    // forward: 2 N^2 d / b over 2 * 3.5 N^2 = d / (3.5 b) = d^2 / (3.5 M)
    CHECK(fabs(ratio[1] / ratio[0] - 1) < 1e-2, "bytes ratio not flat in N: %.5f then %.5f", ratio[0], ratio[1]);
    CHECK(fabs(ratio[1] / (64.0 / (3.5 * 128)) - 1) < 1e-2, "bytes ratio %.5f, not d/(3.5 b) = %.5f",
          ratio[1], 64.0 / (3.5 * 128));
}

// counts scale with B*NH exactly; a tail tile (T not a multiple of the tiles) reads no row past T
static void test_scaling_and_tails(void) {
    FlashTiles t;
    CHECK(flash_tiles_for(&t, 1, 1, 1000, 64) == 0, "tiles T=1000");
    for (int pass = ATTN_FORWARD; pass <= ATTN_BACKWARD; pass++) {
        AttnCount one, many, f1, fm;
        naive_attention_count(&one, pass, 1, 1000, 1, 64);
        naive_attention_count(&many, pass, 2, 1000, 3, 64);
        CHECK(near(total(many), 6 * total(one)) && near(many.flops, 6 * one.flops), "naive B*NH");
        flash_attention_count(&f1, pass, &t, 1, 1000, 1, 64);
        flash_attention_count(&fm, pass, &t, 2, 1000, 3, 64);
        CHECK(near(total(fm), 6 * total(f1)) && near(fm.flops, 6 * f1.flops), "flash B*NH");
    }
    // T = 1 with 128-row tiles: forward reads q, k, v of one row, writes o and one logsumexp
    FlashTiles one_row;
    flash_tiles_for(&one_row, 0, 0, 1, 64);
    AttnCount c;
    flash_attention_count(&c, ATTN_FORWARD, &one_row, 1, 1, 1, 64);
    CHECK(c.bytes_read == 3 * 64 * 2 && c.bytes_written == 64 * 2 + 4,
          "T=1 forward: %.0f read, %.0f written", c.bytes_read, c.bytes_written);
}

// the tiles each code path picks, and what is refused
static void test_tiles_and_refusals(void) {
    FlashTiles t;
    CHECK(flash_tiles_for(&t, 1, 1, 1024, 64) == 0 && t.fwd_br == 128 && t.fwd_bc == 128 &&
              t.bwd_br == 128 && t.bwd_bc == 128, "Hopper, HS=64, T=1024");
    CHECK(flash_tiles_for(&t, 1, 1, 4096, 64) == 0 && t.fwd_br == 192, "Hopper, HS=64, T=4096: 3 consumers");
    CHECK(flash_tiles_for(&t, 1, 1, 4096, 128) == 0 && t.fwd_br == 128 && t.bwd_br == 64, "Hopper, HS=128");
    CHECK(flash_tiles_for(&t, 1, 0, 1024, 64) == 0 && t.fwd_sm90 && !t.bwd_sm90 && t.bwd_br == 64 &&
              t.bwd_bc == 64, "Hopper forward, mma.sync backward");
    CHECK(flash_tiles_for(&t, 0, 1, 1024, 64) == 0 && !t.bwd_sm90, "no Hopper backward without its forward");
    CHECK(flash_tiles_for(&t, 0, 0, 1024, 128) == 0 && t.fwd_br == 64 && t.fwd_bc == 64 &&
              t.bwd_br == 32 && t.bwd_bc == 64, "mma.sync, HS=128");
    CHECK(flash_tiles_for(&t, 0, 0, 1024, 96) == -1, "HS=96 refused");
    CHECK(flash_tiles_for(&t, 0, 0, 0, 64) == -1, "T=0 refused");
    AttnCount c = {1, 2, 3};
    CHECK(naive_attention_count(&c, ATTN_FORWARD, 0, 64, 1, 64) == -1, "B=0 refused");
    CHECK(naive_attention_count(&c, (AttnPass)2, 1, 64, 1, 64) == -1, "unknown pass refused");
    FlashTiles bad = {0, 64, 64, 64, 0, 0};
    CHECK(flash_attention_count(&c, ATTN_FORWARD, &bad, 1, 64, 1, 64) == -1, "tile of 0 rows refused");
    CHECK(flash_attention_count(&c, ATTN_FORWARD, NULL, 1, 64, 1, 64) == -1, "no tiles refused");
    CHECK(c.flops == 1 && c.bytes_read == 2 && c.bytes_written == 3, "a refused count leaves the result alone");
}

int main(void) {
    test_naive_closed_forms();
    test_flash_closed_forms();
    test_exchange();
    test_scaling_and_tails();
    test_tiles_and_refusals();
    return test_summary();
}
