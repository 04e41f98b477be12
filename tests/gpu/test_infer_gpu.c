// test_infer_gpu.c: generation on the GPU (BACKEND=cuda, bf16 storage): the flash-decoding
// kernel against a double-precision reference and against the CPU attention_decode (fp32),
// both computed from the same bf16-rounded inputs, the cache
// writes bit for bit, the argmax, and the model's KV-cached decoding (through a CUDA graph)
// against recomputing the whole sequence. Prints SKIP and passes where there is no GPU.
// --sanitize: the decode attention's two kernels at two lengths each (and at one row on Hopper
// the cluster kernel of layernorm, QKV and attention), the cache writes, the argmax and the fused
// calls at a few shapes and row counts only (1, 4, 9, 16, 17, 64 rows:
// gemv_kernel, gemv_tc_kernel, the wgmma kernel's three tile heights; the LM head at 1, 4, 17
// and 40), and greedy decoding at batch 1 (graphs of 8 steps) and 8, small enough for
// compute-sanitizer's racecheck and synccheck. Also infer_gpt2 (beside this program's folder)
// with DECODE_PARTS out of range: a message and exit 1.
//
// Tolerances: attention_decode relative 1e-2 (its output is rounded to bf16, 2^-9 relative,
// and the probabilities are fp32); cached against recomputed logits relative 2e-2 (the two
// paths round differently: the prefill's flash attention feeds bf16 probabilities to tensor
// cores, the decode step keeps fp32 softmax weights; the fused QKV matmul is two matmuls in
// the decode step). Measured on an H200: 7.8e-3 to 8.7e-3 at B >= 3 and 8.9e-3 to 1.01e-2 at
// B = 1 over the seeds of four runs, so 1e-2 failed at random; 2e-2 is hf_parity.sh's bound for
// the same bf16 logits, and a wrong attention or cache gives errors of order 1. Replaying the graph must give the same bits as launching kernel by kernel.
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../gpt2.h"
#include "../decode_reference.h"
#include "../test.h"
#include "../tiny_model.h"   // random_tokens
#include "cpu_reference.h"   // cpu_attention_decode (fp32)

// ----------------------------------------------------------------------------------------
// attention_decode

// host (n) -> device floatX, and back rounded: what the kernel really sees
static floatX *upload_rounded(float *host, size_t n) {
    floatX *d = dev_malloc(n * sizeof(floatX), "test input");
    floatX_upload(d, host, n);
    floatX_download(host, d, n);
    return d;
}

static void poison(floatX *d, size_t n) {   // bf16 0xFFFF is a NaN
    uint16_t *p = malloc(n * sizeof(uint16_t));
    memset(p, 0xFF, n * sizeof(uint16_t));
    dev_upload(d, p, n * sizeof(uint16_t));
    free(p);
}

// --sanitize: a few shapes and row counts, and greedy decoding at batch 1 and 8, for
// compute-sanitizer's slow tools
static int sanitize_mode = 0;

static void test_attention_decode(unsigned long long *rng) {
    // (B, maxT, NH, HS) and the lengths tried in one cache: 1, split boundaries (multiples of
    // 16 and 64) and one past them, lengths that are multiples of nothing, the whole cache
    // (B * NH >= 2 x 132 SMs puts each head in one block: the one-split kernel, at four head
    // sizes; and the batch-64 decode step's part, 32 x 12 heads, at 2 and 4 rows a round)
    // (decode_layers_step at one row on Hopper, head size 64: two kernels of clusters a layer, at
    // C = 768 (shape 0), 1,024 and 1,280, their three weight widths, and 256, a small model's;
    // elsewhere the plain calls)
    int shapes[][4] = {{1, 1024, 12, 64}, {4, 128, 4, 64}, {64, 512, 12, 64}, {2, 5000, 2, 128},
                       {3, 40, 2, 32}, {1, 300, 3, 80}, {1, 100, 2, 256}, {2, 70, 5, 8},
                       {24, 200, 24, 128}, {48, 130, 12, 80}, {96, 70, 6, 8}, {4, 1024, 12, 64},
                       {1, 2048, 16, 64}, {1, 700, 20, 64}, {1, 5000, 4, 64}, {32, 384, 12, 64}};
    // --sanitize: the split kernel at one row and the one-split kernel (shapes 0 and 2), two
    // lengths each
    int sanitize_shapes[] = {0, 2};
    size_t nshapes = sanitize_mode ? 2 : sizeof(shapes) / sizeof(shapes[0]);
    for (size_t kk = 0; kk < nshapes; kk++) {
        size_t k = sanitize_mode ? (size_t)sanitize_shapes[kk] : kk;
        int B = shapes[k][0], maxT = shapes[k][1], NH = shapes[k][2], HS = shapes[k][3];
        int C = NH * HS;
        size_t cache = (size_t)B * maxT * C;
        float *q = malloc(B * C * sizeof(float)), *kc = malloc(cache * sizeof(float));
        float *vc = malloc(cache * sizeof(float)), *o = malloc(B * C * sizeof(float));
        float *ref = malloc(B * C * sizeof(float)), *cpu = malloc(B * C * sizeof(float));
        test_fill(q, B * C, 2.0f, rng);
        test_fill(kc, cache, 1.0f, rng);
        test_fill(vc, cache, 1.0f, rng);
        floatX *dq = upload_rounded(q, B * C), *dk = upload_rounded(kc, cache);
        floatX *dv = upload_rounded(vc, cache), *dout = dev_malloc(B * C * sizeof(floatX), "out");
        int *dlen = dev_malloc(sizeof(int), "len");
        size_t scratch_bytes = attention_decode_scratch_size(B, maxT, NH, HS);
        void *dscratch = dev_malloc(scratch_bytes, "scratch");
        dev_memset_zero(dscratch, scratch_bytes);   // its counters start at zero (layers.h)
        // the decode step's call: qkv (B, 3C) holds q and the new row's k, v; its own cache
        float *qkv = malloc((size_t)B * 3 * C * sizeof(float)), *kc2 = malloc(cache * sizeof(float));
        floatX *dqkv = dev_malloc((size_t)B * 3 * C * sizeof(floatX), "qkv");
        floatX *dk2 = dev_malloc(cache * sizeof(floatX), "k2"), *dv2 = dev_malloc(cache * sizeof(floatX), "v2");
        // decode_layers_step's input and a layer's weights (both of its two layers):
        // layernorm (C) and QKV matmul: weight (3C, C), bias (3C), then the projection (C, C),
        // (C), the second layernorm, the FC (4C, C), (4C), the FC projection (C, 4C), (C); the
        // plain layers' qkv (B, 3C) of each layer and their k, v rows (B, NH, HS)
        float *hw = malloc((size_t)4 * C * C * sizeof(float)), *got = malloc((size_t)B * 4 * C * sizeof(float));
        float *want = malloc((size_t)B * 3 * C * sizeof(float)), *row = malloc(B * C * sizeof(float));
        float *kc3 = malloc(cache * sizeof(float));
        float *want_row = malloc(B * C * sizeof(float));
        test_fill(hw, (size_t)3 * C * C, 0.05f, rng);
        floatX *dw = upload_rounded(hw, (size_t)3 * C * C);
        test_fill(hw, 3 * C, 0.5f, rng);
        floatX *dbias = upload_rounded(hw, 3 * C);
        // its tokens (B, of a vocabulary of 7) and their embeddings: x = wte[token] + wpe[pos]
        float *hwte = malloc((size_t)7 * C * sizeof(float)), *hwpe = malloc((size_t)maxT * C * sizeof(float));
        test_fill(hwte, (size_t)7 * C, 1.0f, rng);
        test_fill(hwpe, (size_t)maxT * C, 1.0f, rng);
        floatX *dwte = upload_rounded(hwte, (size_t)7 * C), *dwpe = upload_rounded(hwpe, (size_t)maxT * C);
        int *htok = malloc(B * sizeof(int)), *dtok = dev_malloc(B * sizeof(int), "tokens");
        for (int b = 0; b < B; b++) htok[b] = (b * 5 + 3) % 7;
        dev_upload(dtok, htok, B * sizeof(int));
        test_fill(hw, 2 * C, 1.0f, rng);
        floatX *dlnw = upload_rounded(hw, C), *dlnb = upload_rounded(hw + C, C);
        test_fill(hw, (size_t)C * C, 0.05f, rng);
        floatX *dpw = upload_rounded(hw, (size_t)C * C);
        test_fill(hw, (size_t)4 * C * C, 0.05f, rng);
        floatX *dfw = upload_rounded(hw, (size_t)4 * C * C);
        test_fill(hw, 7 * C, 0.5f, rng);
        floatX *dpb = upload_rounded(hw, C), *dfb = upload_rounded(hw + C, 4 * C);
        floatX *dln2w = upload_rounded(hw + 5 * C, C), *dln2b = upload_rounded(hw + 6 * C, C);
        test_fill(hw, (size_t)4 * C * C, 0.05f, rng);
        floatX *dfpw = upload_rounded(hw, (size_t)4 * C * C);
        test_fill(hw, C, 0.5f, rng);
        floatX *dfpb = upload_rounded(hw, C);
        DecodeLayerWeights lw = {dlnw, dlnb, dw, dbias, dpw, dpb, dln2w, dln2b, dfw, dfb, dfpw, dfpb};
        DecodeLayerWeights layers2[2] = {lw, lw};
        // two layers' caches, the reference's and the call's
        floatX *dkr = dev_malloc(2 * cache * sizeof(floatX), "kr"), *dvr = dev_malloc(2 * cache * sizeof(floatX), "vr");
        floatX *dk3 = dev_malloc(2 * cache * sizeof(floatX), "k3"), *dv3 = dev_malloc(2 * cache * sizeof(floatX), "v3");
        float *want1 = malloc((size_t)B * 3 * C * sizeof(float));
        floatX *dx2 = dev_malloc(B * C * sizeof(floatX), "x2"), *dxref = dev_malloc(B * C * sizeof(floatX), "xref");
        floatX *dproj = dev_malloc(B * C * sizeof(floatX), "proj");
        floatX *dfc = dev_malloc((size_t)B * 4 * C * sizeof(floatX), "fc");
        floatX *dfch = dev_malloc((size_t)B * 4 * C * sizeof(floatX), "fch");
        floatX *dfch2 = dev_malloc((size_t)B * 4 * C * sizeof(floatX), "fch2");
        float *xstats = dev_malloc(ROW_STATS_FLOATS(B, C) * sizeof(float), "x stats");
        float *xref = malloc(B * C * sizeof(float)), *fchref = malloc((size_t)B * 4 * C * sizeof(float));
        floatX *dln = dev_malloc(B * C * sizeof(floatX), "ln"), *dqkv2 = dev_malloc((size_t)B * 3 * C * sizeof(floatX), "qkv2");
        float *dstats = dev_malloc(2 * B * sizeof(float), "ln stats");
        floatX *datt = dev_malloc(B * C * sizeof(floatX), "att");
        size_t fused_bytes = fused_scratch_size(B, C, 4 * C);
        void *dfused = dev_malloc(fused_bytes, "fused scratch");
        dev_memset_zero(dfused, fused_bytes);
        // (177 and 353 also put the new row where a round of the split before reaches past
        // that split's end, into this one's first rows, when split_len is 176 (B=4, maxT=1024, 12
        // heads on 132 SMs), as 333 does at B=2, maxT=5000: only the split that holds it may
        // store it)
        int lens[] = {1, 15, 16, 17, 63, 64, 65, 177, 333, 353, 1000, 4097, maxT};
        for (size_t j = 0; j < sizeof(lens) / sizeof(lens[0]); j++) {
            int len = lens[j];
            if (sanitize_mode && len != 17 && len != 333) continue;
            if (len > maxT) continue;
            reference_decode(ref, q, kc, vc, B, len, maxT, NH, HS);
            cpu_attention_decode(cpu, NULL, q, kc, vc, B, len, maxT, NH, HS);   // no scratch on the CPU
            CHECK_CLOSE(cpu, ref, (size_t)B * C, 1e-5, "CPU attention_decode B=%d len=%d (the reference's check)", B, len);
            poison(dout, B * C);
            attention_decode(dout, dscratch, dq, dk, dv, B, len, maxT, NH, HS);
            floatX_download(o, dout, B * C);
            CHECK_CLOSE(o, ref, (size_t)B * C, 1e-2, "attention_decode B=%d len=%d maxT=%d NH=%d HS=%d",
                        B, len, maxT, NH, HS);
            CHECK_CLOSE(o, cpu, (size_t)B * C, 1e-2, "attention_decode against the CPU's, B=%d len=%d", B, len);
            // attention_decode_step at pos = len - 1: the row comes from qkv, the cache's row
            // len-1 is poisoned first and must come out equal to the original
            for (int b = 0; b < B; b++) {
                memcpy(qkv + (size_t)b * 3 * C, q + (size_t)b * C, C * sizeof(float));
                cache_position(qkv + (size_t)b * 3 * C + C, kc, b, len - 1, maxT, NH, HS);
                cache_position(qkv + (size_t)b * 3 * C + 2 * C, vc, b, len - 1, maxT, NH, HS);
            }
            floatX_upload(dqkv, qkv, (size_t)B * 3 * C);
            dev_copy(dk2, dk, cache * sizeof(floatX));
            dev_copy(dv2, dv, cache * sizeof(floatX));
            for (int b = 0; b < B; b++)
                for (int h = 0; h < NH; h++) {
                    poison(dk2 + KV_CACHE_AT(b, h, len - 1, maxT, NH, HS), HS);
                    poison(dv2 + KV_CACHE_AT(b, h, len - 1, maxT, NH, HS), HS);
                }
            poison(dout, B * C);
            int pos = len - 1;
            dev_upload(dlen, &pos, sizeof(int));
            attention_decode_step(dout, dscratch, dqkv, dk2, dv2, dlen, B, 0, maxT, NH, HS);
            floatX_download(o, dout, B * C);
            // (laid out for maxT, not len: other splits, so not the same bits as attention_decode)
            CHECK_CLOSE(o, ref, (size_t)B * C, 1e-2, "attention_decode_step B=%d len=%d maxT=%d NH=%d HS=%d",
                        B, len, maxT, NH, HS);
            // the first element of the caches that differs, if any: (k or v, b, h, position, i)
            size_t bad = cache;
            const char *which = "k";
            floatX_download(kc2, dk2, cache);
            for (size_t e = 0; e < cache && bad == cache; e++)
                if (memcmp(&kc2[e], &kc[e], sizeof(float))) bad = e;
            if (bad == cache) {
                which = "v";
                floatX_download(kc2, dv2, cache);
                for (size_t e = 0; e < cache && bad == cache; e++)
                    if (memcmp(&kc2[e], &vc[e], sizeof(float))) bad = e;
            }
            CHECK(bad == cache, "attention_decode_step writes the new k and v at position %d, nothing "
                  "else (B=%d maxT=%d NH=%d HS=%d: first difference in %s at b %d, h %d, position %d, "
                  "channel %d: %g, want %g)", pos, B, maxT, NH, HS, which,
                  (int)(bad / ((size_t)NH * maxT * HS)), (int)(bad / ((size_t)maxT * HS) % NH),
                  (int)(bad / HS % maxT), (int)(bad % HS), bad < cache ? kc2[bad] : 0.0f,
                  bad < cache ? (which[0] == 'k' ? kc : vc)[bad] : 0.0f);
            // as a part of a batch, with as many sequences of another part beside it
            // (attention_decode_step's `beside`), which may take the other row count a round at
            // one block a head (the batch-64 step's parts of 32 rows, shape 15: 2 rows alone, 4
            // with 32 beside), the new row poisoned in the caches again: the same result within
            // the rounding, the new row from qkv
            for (int b = 0; b < B; b++)
                for (int h = 0; h < NH; h++) {
                    poison(dk2 + KV_CACHE_AT(b, h, len - 1, maxT, NH, HS), HS);
                    poison(dv2 + KV_CACHE_AT(b, h, len - 1, maxT, NH, HS), HS);
                }
            poison(dout, B * C);
            attention_decode_step(dout, dscratch, dqkv, dk2, dv2, dlen, B, B, maxT, NH, HS);
            floatX_download(o, dout, B * C);
            CHECK_CLOSE(o, ref, (size_t)B * C, 1e-2, "attention_decode_step B=%d beside %d len=%d "
                        "maxT=%d NH=%d HS=%d", B, B, len, maxT, NH, HS);
            // the step's embedding (decode_embed) against wte[token] + wpe[pos]; then from it
            // decode_layers_step over two layers (the same weights, their own caches) against the
            // plain layers, each as layernorm, the QKV matmul, attention_decode_step as above, the
            // projection and the residual, layernorm, the FC and GELU, the FC projection and the
            // residual; the caches as it left them but for the new position, whose k and v are the
            // plain matmuls' within their rounding
            decode_embed(dxref, dtok, dlen, dwte, dwpe, B, C, 0);
            floatX_download(xref, dxref, B * C);
            for (int b = 0; b < B; b++)
                for (int c = 0; c < C; c++)
                    row[b * C + c] = hwte[(size_t)htok[b] * C + c] + hwpe[(size_t)pos * C + c];
            CHECK_CLOSE(xref, row, (size_t)B * C, 1e-2, "decode_embed, B=%d C=%d at position %d", B, C, pos);
            for (int l = 0; l < 2; l++) {
                dev_copy(dkr + l * cache, dk, cache * sizeof(floatX));
                dev_copy(dvr + l * cache, dv, cache * sizeof(floatX));
                layernorm_forward(dln, dstats, dstats + B, dxref, dlnw, dlnb, B, C);
                matmul_forward(dqkv2, dln, dw, dbias, B, C, 3 * C);
                floatX_download(l ? want1 : want, dqkv2, (size_t)B * 3 * C);
                attention_decode_step(dout, dscratch, dqkv2, dkr + l * cache, dvr + l * cache, dlen, B, 0, maxT, NH, HS);
                matmul_forward(dproj, dout, dpw, dpb, B, C, C);
                residual_forward(dxref, dxref, dproj, (size_t)B * C);
                layernorm_forward(dln, dstats, dstats + B, dxref, dln2w, dln2b, B, C);
                matmul_forward(dfc, dln, dfw, dfb, B, C, 4 * C);
                gelu_forward(dfch, dfc, (size_t)B * 4 * C);
                matmul_forward(dproj, dfch, dfpw, dfpb, B, 4 * C, C);
                residual_forward(dxref, dxref, dproj, (size_t)B * C);
            }
            floatX_download(o, dout, B * C);
            floatX_download(xref, dxref, B * C);
            floatX_download(fchref, dfch, (size_t)B * 4 * C);
            for (int l = 0; l < 2; l++) {
                dev_copy(dk3 + l * cache, dk, cache * sizeof(floatX));
                dev_copy(dv3 + l * cache, dv, cache * sizeof(floatX));
                for (int b = 0; b < B; b++)
                    for (int h = 0; h < NH; h++) {
                        poison(dk3 + l * cache + KV_CACHE_AT(b, h, len - 1, maxT, NH, HS), HS);
                        poison(dv3 + l * cache + KV_CACHE_AT(b, h, len - 1, maxT, NH, HS), HS);
                    }
            }
            poison(datt, B * C);
            poison(dqkv, (size_t)B * 3 * C);
            poison(dfch2, (size_t)B * 4 * C);
            decode_embed(dx2, dtok, dlen, dwte, dwpe, B, C, 1);   // (chained: after a kernel with PDL)
            decode_layers_step(dx2, dqkv, datt, dfch2, dscratch, dfused, xstats, layers2, 2, dk3, dv3, cache,
                               dlen, B, 0, maxT, NH, HS);
            floatX_download(got, datt, B * C);
            CHECK_CLOSE(got, o, (size_t)B * C, 1e-2, "decode_layers_step's att, B=%d len=%d maxT=%d NH=%d HS=%d",
                        B, len, maxT, NH, HS);
            floatX_download(got, dx2, B * C);
            CHECK_CLOSE(got, xref, (size_t)B * C, 1e-2, "decode_layers_step's x, B=%d len=%d maxT=%d NH=%d HS=%d",
                        B, len, maxT, NH, HS);
            floatX_download(got, dfch2, (size_t)B * 4 * C);
            CHECK_CLOSE(got, fchref, (size_t)B * 4 * C, 2e-2, "decode_layers_step's fch, B=%d len=%d maxT=%d "
                        "NH=%d HS=%d", B, len, maxT, NH, HS);
            for (int l = 0; l < 2; l++)
                for (int kv = 0; kv < 2; kv++) {   // layer l's new position's k (kv 0) and v (1)
                    floatX_download(kc3, (kv ? dv3 : dk3) + l * cache, cache);
                    float *orig = kv ? vc : kc, *qkv_l = l ? want1 : want;
                    int others = 1;
                    for (int b = 0; b < B; b++)
                        for (int h = 0; h < NH; h++)
                            for (int s = 0; s < maxT; s++) {
                                size_t at = KV_CACHE_AT(b, h, s, maxT, NH, HS);
                                if (s != len - 1) {
                                    others &= memcmp(kc3 + at, orig + at, HS * sizeof(float)) == 0;
                                    continue;
                                }
                                memcpy(row + (b * NH + h) * HS, kc3 + at, HS * sizeof(float));
                                memcpy(want_row + (b * NH + h) * HS, qkv_l + (size_t)b * 3 * C + (kv + 1) * C + h * HS,
                                       HS * sizeof(float));
                            }
                    CHECK(others, "decode_layers_step writes layer %d's %s cache at position %d only (B=%d "
                          "maxT=%d NH=%d HS=%d)", l, kv ? "v" : "k", len - 1, B, maxT, NH, HS);
                    CHECK_CLOSE(row, want_row, (size_t)B * C, 1e-2, "decode_layers_step's new %s row of layer %d, "
                                "B=%d len=%d NH=%d HS=%d", kv ? "v" : "k", l, B, len, NH, HS);
                }
        }
        dev_free(dwte); dev_free(dwpe); dev_free(dtok); free(hwte); free(hwpe); free(htok);
        dev_free(dw); dev_free(dbias); dev_free(dlnw); dev_free(dlnb); dev_free(dln);
        dev_free(dqkv2); dev_free(dstats); dev_free(datt); dev_free(dfused);
        dev_free(dpw); dev_free(dfw); dev_free(dpb); dev_free(dfb); dev_free(dln2w); dev_free(dln2b);
        dev_free(dx2); dev_free(dxref); dev_free(dproj); dev_free(dfc); dev_free(dfch); dev_free(dfch2);
        dev_free(xstats); free(xref); free(fchref);
        dev_free(dfpw); dev_free(dfpb); dev_free(dkr); dev_free(dvr); dev_free(dk3); dev_free(dv3);
        free(want1); free(kc3);
        free(hw); free(got); free(want); free(row); free(want_row);
        dev_free(dq); dev_free(dk); dev_free(dv); dev_free(dout); dev_free(dlen); dev_free(dscratch);
        dev_free(dqkv); dev_free(dk2); dev_free(dv2);
        free(q); free(kc); free(vc); free(o); free(ref); free(cpu); free(qkv); free(kc2);
    }
}

static void test_kv_cache_store(unsigned long long *rng) {
    int B = 3, T = 5, NH = 4, HS = 64, C = NH * HS, maxT = 12, pos = 6;
    size_t cache = (size_t)B * maxT * C, src_n = (size_t)B * T * 3 * C;
    float *src = malloc(src_n * sizeof(float)), *kc = malloc(cache * sizeof(float));
    float *vc = malloc(cache * sizeof(float)), *zeros = calloc(cache, sizeof(float));
    test_fill(src, src_n, 1.0f, rng);
    floatX *dsrc = upload_rounded(src, src_n);
    floatX *dk = dev_malloc(cache * sizeof(floatX), "k"), *dv = dev_malloc(cache * sizeof(floatX), "v");
    int *dpos = dev_malloc(sizeof(int), "pos");
    floatX_upload(dk, zeros, cache);
    floatX_upload(dv, zeros, cache);
    dev_upload(dpos, &pos, sizeof(int));
    kv_cache_store(dk, dv, dsrc, dpos, B, T, maxT, NH, HS);
    floatX_download(kc, dk, cache);
    floatX_download(vc, dv, cache);
    int right = 1;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < maxT; s++)
            for (int c = 0; c < C; c++) {
                size_t i = KV_CACHE_AT(b, c / HS, s, maxT, NH, HS) + c % HS;
                const float *row = src + ((size_t)b * T + (s - pos)) * 3 * C;
                int in = s >= pos && s < pos + T;
                right &= kc[i] == (in ? row[C + c] : 0.0f) && vc[i] == (in ? row[2 * C + c] : 0.0f);
            }
    CHECK(right, "kv_cache_store copies k and v bit for bit to positions %d..%d, nothing else", pos, pos + T - 1);
    dev_free(dsrc); dev_free(dk); dev_free(dv); dev_free(dpos);
    free(src); free(kc); free(vc); free(zeros);
}

static void test_argmax(unsigned long long *rng) {
    int B = 5, V = 50257, Vp = 50304;
    size_t n = (size_t)B * Vp;
    float *logits = malloc(n * sizeof(float));
    test_fill(logits, n, 4.0f, rng);   // in bf16, equal maxima happen: the first must win
    logits[(size_t)2 * Vp + V - 1] = 10.0f;   // the last column
    logits[(size_t)3 * Vp + V + 3] = 50.0f;   // padding: not seen
    floatX *d = upload_rounded(logits, n);
    int *dout = dev_malloc(B * sizeof(int), "argmax"), got[5];
    logits_argmax(dout, d, Vp, B, V);
    dev_download(got, dout, sizeof(got));
    int all = 1;
    for (int b = 0; b < B; b++) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[(size_t)b * Vp + i] > logits[(size_t)b * Vp + best]) best = i;
        all &= got[b] == best;
    }
    CHECK(all, "logits_argmax equals the host's first argmax of every row");
    dev_free(d); dev_free(dout); free(logits);
}

// ----------------------------------------------------------------------------------------
// the decode step's fused calls against the plain layers they fuse, on the same GPU: at
// N <= FUSED_MAX_ROWS they are GEMV kernels of their own (layers/fused.cu: FMAs at one row,
// tensor cores at 2-8), up to 64 rows on Hopper a wgmma kernel (layers/decode_gemm_sm90.cu; the
// layernorm folded in up to 32 rows from the row statistics a residual call left, a kernel of
// its own before it otherwise), otherwise the plain layers themselves. Tolerance relative 1e-2:
// both round their outputs to bf16 and sum in other orders; the argmax of the LM head must be
// exactly the first argmax of its own logits.

static floatX *upload_random(float *host, size_t n, float scale, unsigned long long *rng) {
    test_fill(host, n, scale, rng);
    return upload_rounded(host, n);
}


// layernorm_matmul_forward (with rstats: inp's row statistics, or NULL) against layernorm_forward,
// matmul_forward and gelu_forward, without and with GELU; ln (N, C), stats (2N), pre (N, OC) and
// the host's got, want (N, OC) are the caller's space
static void check_layernorm_matmul(floatX *out, void *scratch, const floatX *inp, const floatX *lnw,
                                   const floatX *lnb, const floatX *w, const floatX *bias, int N,
                                   int C, int OC, const float *rstats, floatX *ln, float *stats,
                                   floatX *pre, float *got, float *want) {
    for (int gelu = 0; gelu <= 1; gelu++) {
        layernorm_matmul_forward(out, scratch, inp, lnw, lnb, w, bias, N, C, OC, gelu, rstats);
        floatX_download(got, out, (size_t)N * OC);
        layernorm_forward(ln, stats, stats + N, inp, lnw, lnb, N, C);
        matmul_forward(gelu ? pre : out, ln, w, bias, N, C, OC);
        if (gelu) gelu_forward(out, pre, (size_t)N * OC);
        floatX_download(want, out, (size_t)N * OC);
        CHECK_CLOSE(got, want, (size_t)N * OC, 1e-2, "layernorm_matmul_forward N=%d C=%d OC=%d gelu=%d%s",
                    N, C, OC, gelu, rstats ? ", from the row statistics a residual call left" : "");
    }
}

static void test_fused_calls(unsigned long long *rng) {
    // (C, OC): GPT-2 124M's QKV and FC (K = 768, KC = 3), its projections from 4C (K = 3072,
    // KC = 12), a small model's (K = 256), a K that is no multiple of 256
    int shapes[][2] = {{768, 2304}, {3072, 768}, {768, 3072}, {256, 1024}, {1024, 256}, {200, 72}};
    // 1: gemv_kernel; 2-8: gemv_tc_kernel; 9-64 on Hopper: decode_gemm_sm90.cu's wgmma kernel
    // (tiles of 16, 32 or 64 rows, those past N TMA's zeros); the plain path (GELU and add in
    // cuBLASLt's epilogue) elsewhere and where a shape fits neither (K = 200)
    int rows[] = {1, 2, 3, 4, 6, 8, 9, 13, 16, 17, 32, 40, 64};
    const size_t nshapes = sanitize_mode ? 2 : sizeof(shapes) / sizeof(shapes[0]);
    for (size_t k = 0; k < nshapes; k++) {
        int C = shapes[k][0], OC = shapes[k][1];
        for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
            if (sanitize_mode && rows[r] != 1 && rows[r] != 4 && rows[r] != 9 && rows[r] != 16 &&
                rows[r] != 17 && rows[r] != 64)
                continue;
            int N = rows[r];
            float *h = malloc((size_t)(N * C + 2 * C + OC * C + OC + N * OC) * sizeof(float));
            float *got = malloc((size_t)N * OC * sizeof(float)), *want = malloc((size_t)N * OC * sizeof(float));
            floatX *inp = upload_random(h, (size_t)N * C, 2.0f, rng);
            floatX *lnw = upload_random(h, C, 1.0f, rng), *lnb = upload_random(h, C, 0.5f, rng);
            floatX *w = upload_random(h, (size_t)OC * C, 0.05f, rng), *bias = upload_random(h, OC, 0.5f, rng);
            floatX *res = upload_random(h, (size_t)N * OC, 1.0f, rng);
            floatX *out = dev_malloc((size_t)N * OC * sizeof(floatX), "out");
            floatX *ln = dev_malloc((size_t)N * C * sizeof(floatX), "ln");
            floatX *pre = dev_malloc((size_t)N * OC * sizeof(floatX), "pre");
            floatX *res2 = dev_malloc((size_t)N * OC * sizeof(floatX), "res2");
            float *stats = dev_malloc(2 * N * sizeof(float), "stats");
            size_t scratch_bytes = fused_scratch_size(N, C, OC);
            void *scratch = dev_malloc(scratch_bytes, "scratch");
            dev_memset_zero(scratch, scratch_bytes);
            check_layernorm_matmul(out, scratch, inp, lnw, lnb, w, bias, N, C, OC, NULL, ln, stats, pre, got, want);
            dev_copy(res2, res, (size_t)N * OC * sizeof(floatX));
            float *rstats = dev_malloc(ROW_STATS_FLOATS(N, OC) * sizeof(float), "row stats");
            int left = matmul_residual_forward(res2, scratch, inp, w, bias, N, C, OC, rstats);
            floatX_download(got, res2, (size_t)N * OC);
            matmul_forward(pre, inp, w, bias, N, C, OC);
            residual_forward(out, res, pre, (size_t)N * OC);
            floatX_download(want, out, (size_t)N * OC);
            CHECK_CLOSE(got, want, (size_t)N * OC, 1e-2, "matmul_residual_forward N=%d C=%d OC=%d", N, C, OC);
            if (left) {   // the layernorm of its rows from the statistics it left, into 128 outputs
                int OC2 = 128;
                float *h2 = malloc((size_t)OC2 * OC * sizeof(float));
                float *got2 = malloc((size_t)N * OC2 * sizeof(float)), *want2 = malloc((size_t)N * OC2 * sizeof(float));
                floatX *lnw2 = upload_random(h2, OC, 1.0f, rng), *lnb2 = upload_random(h2, OC, 0.5f, rng);
                floatX *w2 = upload_random(h2, (size_t)OC2 * OC, 0.05f, rng), *b2 = upload_random(h2, OC2, 0.5f, rng);
                floatX *out2 = dev_malloc((size_t)N * OC2 * sizeof(floatX), "out2");
                floatX *pre2 = dev_malloc((size_t)N * OC2 * sizeof(floatX), "pre2");
                floatX *ln2 = dev_malloc((size_t)N * OC * sizeof(floatX), "ln2");
                float *stats2 = dev_malloc(2 * N * sizeof(float), "stats2");
                void *scratch2 = dev_malloc(fused_scratch_size(N, OC, OC2), "scratch2");
                dev_memset_zero(scratch2, fused_scratch_size(N, OC, OC2));
                check_layernorm_matmul(out2, scratch2, res2, lnw2, lnb2, w2, b2, N, OC, OC2, rstats, ln2,
                                       stats2, pre2, got2, want2);
                dev_free(lnw2); dev_free(lnb2); dev_free(w2); dev_free(b2); dev_free(out2); dev_free(pre2);
                dev_free(ln2); dev_free(stats2); dev_free(scratch2);
                free(h2); free(got2); free(want2);
            }
            dev_free(rstats);
            dev_free(inp); dev_free(lnw); dev_free(lnb); dev_free(w); dev_free(bias); dev_free(res);
            dev_free(out); dev_free(ln); dev_free(pre); dev_free(res2); dev_free(stats); dev_free(scratch);
            free(h); free(got); free(want);
        }
    }

    // the LM head at GPT-2's vocabulary: logits against the plain layers', the argmax exact.
    // --sanitize: 1, 4, 17 and 40 rows, the one-row, the tensor-core and (on Hopper) the wgmma kernel,
    // each block several tiles (the grid-stride loop, gemv_tc_kernel's two buffers of sums, the
    // wgmma kernel's ring around several times, the argmax's last block and its keys)
    int C = 768, V = 50257, Vp = 50304;
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        int N = rows[r];
        if (sanitize_mode && N != 1 && N != 4 && N != 17 && N != 40) continue;
        float *h = malloc((size_t)Vp * C * sizeof(float));
        float *got = malloc((size_t)N * Vp * sizeof(float)), *want = malloc((size_t)N * Vp * sizeof(float));
        floatX *inp = upload_random(h, (size_t)N * C, 2.0f, rng);
        floatX *lnw = upload_random(h, C, 1.0f, rng), *lnb = upload_random(h, C, 0.5f, rng);
        floatX *wte = upload_random(h, (size_t)Vp * C, 0.05f, rng);
        floatX *logits = dev_malloc((size_t)N * Vp * sizeof(floatX), "logits");
        floatX *ln = dev_malloc((size_t)N * C * sizeof(floatX), "ln");
        float *stats = dev_malloc(2 * N * sizeof(float), "stats");
        int *am = dev_malloc(N * sizeof(int), "argmax"), got_am[128];
        size_t scratch_bytes = fused_scratch_size(N, C, 4 * C);
        void *scratch = dev_malloc(scratch_bytes, "scratch");
        dev_memset_zero(scratch, scratch_bytes);
        for (int call = 0; call < 2; call++) {   // twice: the counter must be left at zero
            lm_head_forward(logits, am, scratch, inp, lnw, lnb, wte, N, C, V, Vp);
            floatX_download(got, logits, (size_t)N * Vp);
            dev_download(got_am, am, N * sizeof(int));
            int first = 1;
            for (int n = 0; n < N; n++) {
                int best = 0;
                for (int i = 1; i < V; i++)
                    if (got[(size_t)n * Vp + i] > got[(size_t)n * Vp + best]) best = i;
                first &= got_am[n] == best;
            }
            CHECK(first, "lm_head_forward's argmax is the first argmax of its logits, N=%d (call %d)", N, call + 1);
        }
        layernorm_forward(ln, stats, stats + N, inp, lnw, lnb, N, C);
        matmul_forward(logits, ln, wte, NULL, N, C, Vp);
        floatX_download(want, logits, (size_t)N * Vp);
        CHECK_CLOSE(got, want, (size_t)N * Vp, 1e-2, "lm_head_forward's logits N=%d", N);
        // decode_step_end against its three calls (lm_head_forward, decode_advance, decode_embed
        // from the step's tokens and cells), bit for bit: the logits, the tokens, the cells, the
        // ring and the next step's embedding; at a graph's middle step (2 of 8) and its last (7),
        // which writes the next graph's cells and no embedding. At one row of 768 the LM head's
        // kernel does all three (fused.cu); above, the three calls themselves (--sanitize: 1 and
        // 4 rows, the kernel and the calls)
        if (!sanitize_mode || N <= 4) {
            enum { kSteps = 8, kSlots = 4, kMaxT = 64 };
            floatX *wpe = upload_random(h, (size_t)kMaxT * C, 0.5f, rng);
            floatX *xs[2], *lg[2];
            int *tc[2], *ring[2];   // [0] the three calls', [1] decode_step_end's
            int tc_init[128 + kSteps], got_tc[2][128 + kSteps];
            for (int n = 0; n < N; n++) tc_init[n] = 0;
            for (int i = 0; i < kSteps; i++) tc_init[N + i] = 37 + i;   // the graph's positions
            for (int k = 0; k < 2; k++) {
                xs[k] = dev_malloc((size_t)N * C * sizeof(floatX), "x");
                lg[k] = dev_malloc((size_t)N * Vp * sizeof(floatX), "logits");
                tc[k] = dev_malloc((N + kSteps) * sizeof(int), "tokens and cells");
                ring[k] = dev_host_alloc((size_t)kSlots * N * sizeof(int), "ring");
            }
            for (int last = 0; last < 2; last++) {
                int step = last ? kSteps - 1 : 2;
                for (int k = 0; k < 2; k++) {
                    dev_copy(xs[k], inp, (size_t)N * C * sizeof(floatX));
                    poison(lg[k], (size_t)N * Vp);
                    dev_upload(tc[k], tc_init, (N + kSteps) * sizeof(int));
                    memset(ring[k], 0xff, (size_t)kSlots * N * sizeof(int));
                }
                lm_head_forward(lg[0], tc[0], scratch, xs[0], lnw, lnb, wte, N, C, V, Vp);
                decode_advance(ring[0], kSlots, tc[0] + N, kSteps, step, last, tc[0], N);
                if (!last) decode_embed(xs[0], tc[0], tc[0] + N + step + 1, wte, wpe, N, C, 1);
                int folded = decode_step_end(lg[1], tc[1], scratch, xs[1], lnw, lnb, wte, wpe,
                                             ring[1], kSlots, tc[1] + N, kSteps, step, last, N, C,
                                             V, Vp);
                CHECK(folded == (N == 1), "decode_step_end at N=%d is %s (want %s)", N,
                      folded ? "the LM head's kernel" : "three calls",
                      N == 1 ? "the LM head's kernel" : "three calls");
                dev_synchronize();   // (the rings: host memory the device wrote)
                for (int k = 0; k < 2; k++) dev_download(got_tc[k], tc[k], (N + kSteps) * sizeof(int));
                CHECK(!memcmp(got_tc[0], got_tc[1], (N + kSteps) * sizeof(int)) &&
                      !memcmp(ring[0], ring[1], (size_t)kSlots * N * sizeof(int)) &&
                      ring[1][(37 + step) % kSlots * N] == got_tc[1][0],
                      "decode_step_end's tokens, cells and ring as its three calls', N=%d step %d%s "
                      "(token 0: %d, want %d; cell 0: %d, want %d)", N, step, last ? " (last)" : "",
                      got_tc[1][0], got_tc[0][0], got_tc[1][N], got_tc[0][N]);
                floatX_download(got, lg[1], (size_t)N * Vp);
                floatX_download(want, lg[0], (size_t)N * Vp);
                CHECK(!memcmp(got, want, (size_t)N * Vp * sizeof(float)),
                      "decode_step_end's logits as lm_head_forward's, N=%d step %d", N, step);
                floatX_download(got, xs[1], (size_t)N * C);
                floatX_download(want, xs[0], (size_t)N * C);
                CHECK(!memcmp(got, want, (size_t)N * C * sizeof(float)),
                      "decode_step_end's x as decode_embed's (or untouched at the last step), N=%d step %d",
                      N, step);
            }
            for (int k = 0; k < 2; k++) {
                dev_free(xs[k]); dev_free(lg[k]); dev_free(tc[k]); dev_host_free(ring[k]);
            }
            dev_free(wpe);
        }
        // ties everywhere: every row of wte the same, so every logit of a row is the same and
        // the first index must win, across the blocks (the wgmma kernel's keys: the index's order)
        for (size_t i = C; i < (size_t)Vp * C; i++) h[i] = h[i % C];
        floatX_upload(wte, h, (size_t)Vp * C);
        lm_head_forward(logits, am, scratch, inp, lnw, lnb, wte, N, C, V, Vp);
        dev_download(got_am, am, N * sizeof(int));
        int zeros = 1;
        for (int n = 0; n < N; n++) zeros &= got_am[n] == 0;
        CHECK(zeros, "lm_head_forward's argmax of equal logits is index 0, N=%d", N);
        dev_free(inp); dev_free(lnw); dev_free(lnb); dev_free(wte); dev_free(logits); dev_free(ln);
        dev_free(stats); dev_free(am); dev_free(scratch);
        free(h); free(got); free(want);
    }
}

// ----------------------------------------------------------------------------------------
// the model

static void full_logits(GPT2 *m, const int *seq, int B, int T, float *logits) {
    gpt2_forward(m, seq, NULL, B, T);
    for (int b = 0; b < B; b++) gpt2_logits_at(m, b, T - 1, logits + (size_t)b * m->config.vocab_size);
}

// (steps, B, V) cached logits of a run that prefills T0 tokens and feeds seq after them
static float *cached_run(GPT2 *m, const int *seq, int B, int T0, int steps, int seq_len) {
    int V = m->config.vocab_size, Vp = m->config.padded_vocab_size;
    float *all = malloc((size_t)steps * B * V * sizeof(float)), *row = malloc((size_t)B * Vp * sizeof(float));
    int *prompt = malloc((size_t)B * T0 * sizeof(int));
    for (int b = 0; b < B; b++) memcpy(prompt + b * T0, seq + b * seq_len, T0 * sizeof(int));
    KVCache cache;
    kv_cache_init(&cache, m, B, T0 + steps - 1);   // the last step fills its last position
    gpt2_prefill(m, &cache, prompt, B, T0);
    int *next = malloc((size_t)B * sizeof(int));
    for (int i = 0; i < steps; i++) {
        if (i > 0) {
            for (int b = 0; b < B; b++) next[b] = seq[b * seq_len + T0 + i - 1];
            gpt2_decode_step(m, &cache, next, T0 + i - 1);
        }
        gpt2_decode_logits(&cache, row);
        for (int b = 0; b < B; b++)
            memcpy(all + ((size_t)i * B + b) * V, row + (size_t)b * Vp, V * sizeof(float));
    }
    kv_cache_free(&cache);
    free(next);
    free(row);
    free(prompt);
    return all;
}

// B sequences, a prompt of T0, then steps - 1 decode steps: the first at position T0, the last
// at the cache's last position, T0 + steps - 2 (cached_run sizes the cache so)
static void check_cached_decoding(GPT2 *m, int B, int T0, int steps, unsigned long long *rng) {
    GPT2Config c = m->config;
    int len = T0 + steps, V = c.vocab_size;
    int *seq = malloc((size_t)B * len * sizeof(int)), *flat = malloc((size_t)B * len * sizeof(int));
    random_tokens(seq, B * len, V, rng);

    setenv("CUDA_GRAPHS", "1", 1);
    float *graphed = cached_run(m, seq, B, T0, steps, len);
    setenv("CUDA_GRAPHS", "0", 1);
    float *launched = cached_run(m, seq, B, T0, steps, len);
    setenv("CUDA_GRAPHS", "1", 1);
    CHECK(memcmp(graphed, launched, (size_t)steps * B * V * sizeof(float)) == 0,
          "the decode step replayed as a CUDA graph gives the same bits as kernel by kernel");

    double worst = 0.0;
    float *want = malloc((size_t)B * V * sizeof(float));
    for (int i = 0; i < steps; i++) {
        int T = T0 + i;
        for (int b = 0; b < B; b++) memcpy(flat + b * T, seq + b * len, T * sizeof(int));
        full_logits(m, flat, B, T, want);
        double e = rel_error(graphed + (size_t)i * B * V, want, (size_t)B * V);
        if (e > worst) worst = e;
    }
    CHECK(worst <= 2e-2, "cached logits on the GPU equal the recomputed ones, B=%d, positions %d..%d "
          "(worst rel error %.2e)", B, T0, T0 + steps - 2, worst);
    printf("cached vs recomputed logits, bf16, B=%d: worst relative error %.2e over %d steps\n", B, worst, steps);
    free(want); free(graphed); free(launched); free(seq); free(flat);
}

// greedy decoding on the device against greedy through the host (greedy_on_device_mismatch),
// B sequences from a 16-token prompt, 33 steps: the prefill's token and 32 steps, at batch 1
// four graphs of 8 (replayed)
static void check_greedy(GPT2 *m, int B, int graphs, unsigned long long *rng) {
    int steps = 33, prompt[16], *tokens = malloc((size_t)B * steps * sizeof(int));
    random_tokens(prompt, 16, m->config.vocab_size, rng);
    KVCache cache;
    kv_cache_init(&cache, m, B, 16 + steps - 1);
    int at = greedy_on_device_mismatch(m, &cache, prompt, 16, steps, tokens);
    CHECK(at < 0, "greedy on the device equals greedy through the host, B=%d, C=%d, %d steps, "
          "CUDA_GRAPHS=%d (first difference at step %d)", B, m->config.channels, steps, graphs, at);
    kv_cache_free(&cache);
    free(tokens);
}

static void test_cached_decoding(unsigned long long *rng) {
    GPT2Config c = {.max_seq_len = 256, .vocab_size = 50257, .padded_vocab_size = 50304,
                    .num_layers = 4, .num_heads = 4, .channels = 256};
    GPT2 m;
    gpt2_init_random(&m, c, 3);
    if (!sanitize_mode) {   // (--sanitize: the greedy graphs below alone, at B = 1 and 8)
        check_cached_decoding(&m, 3, 37, 60, rng);    // B=3: the fused kernels at NR = 4
        check_cached_decoding(&m, 1, 1, 50, rng);     // batch 1 from position 1
        check_cached_decoding(&m, 4, 200, 57, rng);   // B=4 up to the model's last position, 255
        check_cached_decoding(&m, 9, 20, 12, rng);    // B=9: above FUSED_MAX_ROWS, the wgmma kernel
        check_cached_decoding(&m, 16, 20, 6, rng);    // B=16: its last row count
        check_cached_decoding(&m, 64, 20, 6, rng);    // B=64: bench_infer's batch
        // on Hopper (decode_step_parts) the layers as parts of the batch at once, all but the first
        // on branches: B=64 two of 32 rows, B=33 three of 11 (11 + 11 + 11), B=128 four of 32, and
        // B=200 four of 50 (where one batch would take cuBLASLt's GEMMs, and the parts the
        // layernorm kernel before their matmuls)
        check_cached_decoding(&m, 33, 20, 6, rng);
        check_cached_decoding(&m, 128, 20, 4, rng);
        check_cached_decoding(&m, 200, 20, 3, rng);
    }
    // greedy with the tokens kept on the device (a step a CUDA graph, the host reading each
    // step's argmax one step late; then as far ahead as the ring keeps, at batch 1 in graphs of
    // DECODE_GRAPH_STEPS steps; then host-fed steps and greedy ones after them): the same bits
    // as through the host; and again with the kernels launched one by one (CUDA_GRAPHS=0: the
    // PDL chain then runs from one graph's steps into the next's)
    // Then at GPT-2 124M's width (two layers) at batch 1, where the LM head's kernel ends the
    // step itself (decode_step_end: the ring, the cells and the next step's embedding)
    GPT2Config c768 = {.max_seq_len = 64, .vocab_size = 50257, .padded_vocab_size = 50304,
                       .num_layers = 2, .num_heads = 12, .channels = 768};
    GPT2 m768;
    gpt2_init_random(&m768, c768, 5);
    for (int graphs = 1; graphs >= 0; graphs--) {
        if (sanitize_mode && !graphs) break;
        setenv("CUDA_GRAPHS", graphs ? "1" : "0", 1);
        for (int B = 1; B <= (sanitize_mode ? 8 : 64); B *= 8) check_greedy(&m, B, graphs, rng);
        if (!sanitize_mode) check_greedy(&m, 128, graphs, rng);   // graphs of 8 steps again
        check_greedy(&m768, 1, graphs, rng);
    }
    unsetenv("CUDA_GRAPHS");
    gpt2_free(&m768);
    gpt2_free(&m);
}

// DECODE_PARTS, read once when the first cache is made (decode_step_parts): a value that is not
// a whole number from 1 to 4 stops infer_gpt2 at its start, naming it, with exit 1; one in range
// runs. Through the program next to this one's folder (build/<variant>/infer_gpt2), as a user
// runs it: the value is read once a process.
static void test_decode_parts_flag(void) {
    char exe[4096], cmd[8600], out[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    char *cut = len > 0 ? (exe[len] = '\0', strrchr(exe, '/')) : NULL;
    for (int up = 0; up < 2 && cut; up++) {   // .../tests/gpu/test_infer_gpu -> ...
        *cut = '\0';
        cut = strrchr(exe, '/');
    }
    if (!cut) {
        SKIP("DECODE_PARTS: this program's folder is unknown");
        return;
    }
    *cut = '\0';
    char infer[4200];
    snprintf(infer, sizeof(infer), "%s/infer_gpt2", exe);
    if (access(infer, X_OK) != 0) {
        SKIP("DECODE_PARTS: no %s", infer);
        return;
    }
    const char *values[] = {"0", "5", "x", "2x", "", "2"};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        const int ok = !strcmp(values[i], "2");
        snprintf(cmd, sizeof(cmd), "DECODE_PARTS='%s' '%s' -c d12 --prompt-ids 1,2,3 -n 2 --ids --no-stop "
                 "--temperature 0 -b 32 2>&1", values[i], infer);
        FILE *p = popen(cmd, "r");
        size_t n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
        out[n] = '\0';
        const int status = p ? pclose(p) : -1;
        const int code = status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        char said[64];
        snprintf(said, sizeof(said), "DECODE_PARTS=%s: the decode step's parts", values[i]);
        if (ok)
            CHECK(code == 0, "infer_gpt2 runs with DECODE_PARTS=%s (exit %d: %.200s)", values[i], code, out);
        else
            CHECK(code == 1 && strstr(out, said), "infer_gpt2 with DECODE_PARTS='%s' stops with exit 1 "
                  "and says so (exit %d: %.200s)", values[i], code, out);
    }
}

// usage: test_infer_gpu [--sanitize]
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sanitize")) sanitize_mode = 1;
        else {
            fprintf(stderr, "usage: %s [--sanitize]\n", argv[0]);
            return 2;
        }
    }
    if (backend_init() != 0) {
        SKIP("no CUDA device: the GPU tests of generation did not run");
        return test_summary();
    }
    char desc[256];
    backend_describe(desc, sizeof(desc));
    printf("device: %s\n", desc);
    unsigned long long rng = test_seed();
    test_attention_decode(&rng);
    test_kv_cache_store(&rng);
    test_argmax(&rng);
    test_fused_calls(&rng);
    test_cached_decoding(&rng);
    if (!sanitize_mode) test_decode_parts_flag();
    return test_summary();
}
