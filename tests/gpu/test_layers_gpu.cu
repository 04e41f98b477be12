// test_layers_gpu.cu: every CUDA layer (layers/*.cu) and the CUDA naive attention
// (attention/naive.cu) against the CPU implementations (layers/*.c, attention/naive.c), which
// are linked into this program with their symbols prefixed cpu_ (tests/gpu/cpu_reference.h).
//
// Inputs are drawn in fp32 from a fresh seed and rounded to bf16 before either side sees them,
// so both compute from identical values; the CPU (fp32) is the reference. Tolerances, as
// relative L2 error (test.h's rel_error):
//   BF16_TOL 1e-2  every bf16 output (one bf16 rounding is up to 2^-9 = 2e-3 relative;
//                  attention also rounds S, P, dP and dS to bf16 on the way)
//   FP32_TOL 1e-5  fp32 outputs computed in fp32 from the same inputs: layernorm mean and
//                  rstd, cross-entropy losses, AdamW master weights and moments, grad_sumsq
// Exact checks: masked entries of P and padding columns of the logits' gradient are 0; logits
// are untouched when dloss == 0; params == bf16(master) after AdamW; the deterministic kernels
// (encoder, layernorm and matmul-bias backward, grad_sumsq) repeat bit for bit.
// Every output is poisoned (all bits set: NaN in bf16 and fp32) before each call, so an
// element a kernel fails to write fails the comparison; parameter gradients and layernorm's
// dinp start from random values, so the comparisons check += against =.
//
// Each group runs in its own process, forked before any CUDA call, so that a crash or an exit
// inside one (a kernel fault, a GEMM shape cuBLASLt refuses) is reported and the rest still
// run. Usage: test_layers_gpu [group ...]   (default: all; names as printed by "== name")
// Without a GPU it prints SKIP and exits 0.
#include "../../attention/attention.h"
#include "../../runtime/cuda_common.cuh"
#include "../test.h"
#include "cpu_reference.h"   // cpu_encoder_forward, ... (fp32)

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BF16_TOL 1e-2
#define FP32_TOL 1e-5

static unsigned long long rng;

// ----------------------------------------------------------------------------------------
// host and device arrays

static float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

static float *host_alloc(size_t n) {
    float *x = (float *)malloc((n ? n : 1) * sizeof(float));
    if (!x) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    return x;
}
// offset + scale * uniform[-1, 1), rounded to bf16
static float *host_random(size_t n, float scale, float offset = 0.0f) {
    float *x = host_alloc(n);
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(offset + scale * test_randf(&rng));
    return x;
}
static float *host_copy(const float *src, size_t n) {
    float *x = host_alloc(n);
    memcpy(x, src, n * sizeof(float));
    return x;
}
// a device bf16 copy of host (n; host NULL: left unwritten), starting misalign elements into
// its allocation (for the kernels' unaligned paths); free it with dev_free(d - misalign)
static floatX *dev_bf16(const float *host, size_t n, int misalign = 0) {
    floatX *d = (floatX *)dev_malloc((n + misalign) * sizeof(floatX), "test tensor") + misalign;
    if (host) floatX_upload(d, host, n);
    return d;
}
static float *dev_f32(const float *host, size_t n) {
    float *d = (float *)dev_malloc(n * sizeof(float), "test tensor");
    dev_upload(d, host, n * sizeof(float));
    return d;
}
static int *dev_ints(const int *host, size_t n) {
    int *d = (int *)dev_malloc(n * sizeof(int), "test tensor");
    dev_upload(d, host, n * sizeof(int));
    return d;
}
static float *get_bf16(const floatX *d, size_t n) {
    float *x = host_alloc(n);
    floatX_download(x, d, n);
    return x;
}
static float *get_f32(const float *d, size_t n) {
    float *x = host_alloc(n);
    dev_download(x, d, n * sizeof(float));
    return x;
}
static void poison(void *d, size_t bytes) {
    CUDA_CHECK(cudaMemsetAsync(d, 0xFF, bytes, cuda_stream));
}

// ----------------------------------------------------------------------------------------
// checks that print what they measured, pass or fail, so one run shows the margins

static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double tol) {
    const double err = rel_error(got, want, n);
    const bool ok = err <= tol;
    printf("    %-34s rel err %.2e  (tol %.0e)%s\n", what, err, tol, ok ? "" : "  <-- FAIL");
    if (!ok) {
        size_t worst = 0, nonfinite = 0;
        double worst_diff = -1.0;
        for (size_t i = 0; i < n; i++) {
            if (!isfinite(got[i])) {
                if (nonfinite++ == 0) worst = i, worst_diff = INFINITY;
                continue;
            }
            const double d = fabs((double)got[i] - want[i]);
            if (d > worst_diff) worst_diff = d, worst = i;
        }
        printf("      worst at [%zu]: got %.6g want %.6g; %zu non-finite of %zu\n", worst,
               got[worst], want[worst], nonfinite, n);
    }
    CHECK(ok, "%s: rel error %.3e > %.1e", what, err, tol);
}

static void expect_identical(const char *what, const float *got, const float *want, size_t n) {
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && differ++ == 0) first = i;
    }
    printf("    %-34s %s\n", what, differ ? "DIFFER  <-- FAIL" : "identical");
    if (differ)
        printf("      %zu of %zu differ, first [%zu]: got %.8g want %.8g\n", differ, n, first,
               got[first], want[first]);
    CHECK(differ == 0, "%s: %zu of %zu elements differ", what, differ, n);
}

// ----------------------------------------------------------------------------------------
// device: backend, memory accounting, copies, conversions

static void test_device(void) {
    CHECK(strcmp(backend_name(), "cuda") == 0, "backend_name is '%s'", backend_name());
    char desc[256] = "";
    backend_describe(desc, sizeof(desc));
    printf("    %s\n", desc);
    CHECK(strlen(desc) > 0, "backend_describe is empty");
    CHECK(device_memory_total() > ((size_t)1 << 30), "device_memory_total %zu", device_memory_total());
    CHECK(backend_init() == 0, "backend_init a second time fails");

    const size_t before = dev_bytes_in_use();
    void *p = dev_malloc(1000003, "accounting test");
    CHECK(dev_bytes_in_use() == before + 1000003, "in use %zu after malloc, want %zu",
          dev_bytes_in_use(), before + 1000003);
    CHECK(dev_bytes_peak() >= dev_bytes_in_use(), "peak %zu < in use %zu", dev_bytes_peak(),
          dev_bytes_in_use());
    dev_free(p);
    CHECK(dev_bytes_in_use() == before, "in use %zu after free, want %zu", dev_bytes_in_use(), before);

    // bf16 round trip across the staging chunks, and the rounding of upload
    const size_t n = (5u << 20) + 3;
    float *exact = host_random(n, 3.0f);
    floatX *d = dev_bf16(exact, n);
    float *back = get_bf16(d, n);
    expect_identical("floatX upload/download round trip", back, exact, n);
    float *raw = host_alloc(n), *rounded = host_alloc(n);
    for (size_t i = 0; i < n; i++) {
        raw[i] = 3.0f * test_randf(&rng);
        rounded[i] = bf16_round(raw[i]);
    }
    floatX_upload(d, raw, n);
    floatX_download(back, d, n);
    expect_identical("floatX_upload rounds to nearest", back, rounded, n);

    // floatX_from_float on the device: vectorised, and misaligned by one element
    float *draw = dev_f32(raw, n);
    poison(d, n * sizeof(floatX));
    floatX_from_float(d, draw, n);
    floatX_download(back, d, n);
    expect_identical("floatX_from_float", back, rounded, n);
    poison(d, n * sizeof(floatX));
    floatX_from_float(d + 1, draw + 1, n - 1);
    floatX_download(back, d, n);
    expect_identical("floatX_from_float misaligned", back + 1, rounded + 1, n - 1);

    // dev_copy, dev_memset_zero, dev_read_float
    float *dcopy = (float *)dev_malloc(n * sizeof(float), "copy test");
    poison(dcopy, n * sizeof(float));
    dev_copy(dcopy, draw, n * sizeof(float));
    float *copied = get_f32(dcopy, n);
    expect_identical("dev_copy", copied, raw, n);
    CHECK(dev_read_float(dcopy + 12345) == raw[12345], "dev_read_float %g want %g",
          dev_read_float(dcopy + 12345), raw[12345]);
    dev_memset_zero(dcopy, n * sizeof(float));
    float *zeros = get_f32(dcopy, n), *want_zeros = host_alloc(n);
    memset(want_zeros, 0, n * sizeof(float));
    expect_identical("dev_memset_zero", zeros, want_zeros, n);

    // host memory the device writes (decode_advance's ring of greedy tokens), read once the
    // event recorded after the kernels has been waited for: a graph's two steps, the first
    // letting the second start early, the last writing the next graph's cells
    int *ring = (int *)dev_host_alloc(4 * 3 * sizeof(int), "test ring");
    memset(ring, 0, 4 * 3 * sizeof(int));
    int *dtok = (int *)dev_malloc(5 * sizeof(int), "test tokens");
    int toks[5] = {7, 8, 9, 6, 7};   // 3 tokens, then two steps' position cells
    dev_upload(dtok, toks, sizeof(toks));
    DevEvent *done = dev_event_new();
    decode_advance(ring, 4, dtok + 3, 2, 0, 0, dtok, 3);   // slot 6 % 4 = 2
    decode_advance(ring, 4, dtok + 3, 2, 1, 1, dtok, 3);   // slot 3, then the cells
    dev_event_record(done);
    dev_event_wait(done);   // the ring read at once, nothing else waited for
    int want_ring[12] = {0, 0, 0, 0, 0, 0, 7, 8, 9, 7, 8, 9};
    CHECK(memcmp(ring, want_ring, sizeof(want_ring)) == 0, "decode_advance twice: slots 2 and 3 "
          "hold %d %d %d and %d %d %d (want 7 8 9)", ring[6], ring[7], ring[8], ring[9], ring[10], ring[11]);
    dev_download(toks, dtok, sizeof(toks));
    CHECK(toks[3] == 8 && toks[4] == 9, "decode_advance at a graph's last step: the next cells %d "
          "%d, want 8 9", toks[3], toks[4]);
    dev_event_free(done);
    dev_free(dtok);
    dev_host_free(ring);

    dev_free(d);
    dev_free(draw);
    dev_free(dcopy);
    free(exact); free(back); free(raw); free(rounded); free(copied); free(zeros); free(want_zeros);
}

// ----------------------------------------------------------------------------------------
// encoder

enum TokenMix { TOKENS_UNIFORM, TOKENS_SKEWED, TOKENS_ALL_SAME };

static void test_encoder_case(int B, int T, int C, int Vp, TokenMix mix) {
    const int N = B * T;
    printf("  encoder B=%d T=%d C=%d Vp=%d tokens %s\n", B, T, C, Vp,
           mix == TOKENS_UNIFORM ? "uniform" : mix == TOKENS_SKEWED ? "skewed (30%% one token)" : "all the same");
    int *tokens = (int *)malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) {
        int uniform = (int)((test_randf(&rng) * 0.5f + 0.5f) * Vp);
        if (uniform >= Vp) uniform = Vp - 1;
        if (mix == TOKENS_ALL_SAME) tokens[i] = Vp - 1;
        else if (mix == TOKENS_SKEWED && test_randf(&rng) < -0.4f) tokens[i] = 13 % Vp;
        else tokens[i] = uniform;
    }
    float *wte = host_random((size_t)Vp * C, 1.0f), *wpe = host_random((size_t)T * C, 1.0f);
    int *d_tokens = dev_ints(tokens, N);
    floatX *d_wte = dev_bf16(wte, (size_t)Vp * C), *d_wpe = dev_bf16(wpe, (size_t)T * C);

    float *out = host_alloc((size_t)N * C);
    cpu_encoder_forward(out, tokens, wte, wpe, B, T, C);
    floatX *d_out = (floatX *)dev_malloc((size_t)N * C * sizeof(floatX), "test");
    poison(d_out, (size_t)N * C * sizeof(floatX));
    encoder_forward(d_out, d_tokens, d_wte, d_wpe, B, T, C);
    float *got_out = get_bf16(d_out, (size_t)N * C);
    expect_close("forward out", got_out, out, (size_t)N * C, BF16_TOL);

    // backward: dwte and dwpe start random (+=)
    float *dout = host_random((size_t)N * C, 1.0f);
    float *dwte0 = host_random((size_t)Vp * C, 0.5f), *dwpe0 = host_random((size_t)T * C, 0.5f);
    float *dwte = host_copy(dwte0, (size_t)Vp * C), *dwpe = host_copy(dwpe0, (size_t)T * C);
    cpu_encoder_backward(dwte, dwpe, NULL, dout, tokens, B, T, C);   // the CPU needs no scratch
    floatX *d_dout = dev_bf16(dout, (size_t)N * C);
    floatX *d_dwte = dev_bf16(dwte0, (size_t)Vp * C), *d_dwpe = dev_bf16(dwpe0, (size_t)T * C);
    void *d_scratch = dev_malloc(encoder_backward_scratch_size(B, T), "test scratch");
    poison(d_scratch, encoder_backward_scratch_size(B, T));
    encoder_backward(d_dwte, d_dwpe, d_scratch, d_dout, d_tokens, B, T, C);
    float *got_dwte = get_bf16(d_dwte, (size_t)Vp * C), *got_dwpe = get_bf16(d_dwpe, (size_t)T * C);

    // dwte: compare the rows some token touched; the others must be exactly their start value
    char *used = (char *)calloc(Vp, 1);
    for (int i = 0; i < N; i++) used[tokens[i]] = 1;
    size_t used_rows = 0;
    for (int v = 0; v < Vp; v++) used_rows += used[v];
    float *got_used = host_alloc(used_rows * C), *want_used = host_alloc(used_rows * C);
    float *got_unused = host_alloc((Vp - used_rows) * C + 1), *want_unused = host_alloc((Vp - used_rows) * C + 1);
    size_t iu = 0, in = 0;
    for (int v = 0; v < Vp; v++) {
        for (int c = 0; c < C; c++) {
            const size_t k = (size_t)v * C + c;
            if (used[v]) got_used[iu] = got_dwte[k], want_used[iu++] = dwte[k];
            else got_unused[in] = got_dwte[k], want_unused[in++] = dwte0[k];
        }
    }
    char label[64];
    snprintf(label, sizeof(label), "dwte (%zu rows used)", used_rows);
    expect_close(label, got_used, want_used, iu, BF16_TOL);
    expect_identical("dwte rows not used: untouched", got_unused, want_unused, in);
    expect_close("dwpe", got_dwpe, dwpe, (size_t)T * C, BF16_TOL);

    // determinism: the same backward again from the same start
    floatX_upload(d_dwte, dwte0, (size_t)Vp * C);
    floatX_upload(d_dwpe, dwpe0, (size_t)T * C);
    encoder_backward(d_dwte, d_dwpe, d_scratch, d_dout, d_tokens, B, T, C);
    float *again_dwte = get_bf16(d_dwte, (size_t)Vp * C), *again_dwpe = get_bf16(d_dwpe, (size_t)T * C);
    expect_identical("dwte deterministic", again_dwte, got_dwte, (size_t)Vp * C);
    expect_identical("dwpe deterministic", again_dwpe, got_dwpe, (size_t)T * C);

    dev_free(d_tokens); dev_free(d_wte); dev_free(d_wpe); dev_free(d_out); dev_free(d_dout);
    dev_free(d_dwte); dev_free(d_dwpe); dev_free(d_scratch);
    free(tokens); free(wte); free(wpe); free(out); free(got_out); free(dout); free(dwte0);
    free(dwpe0); free(dwte); free(dwpe); free(got_dwte); free(got_dwpe); free(used);
    free(got_used); free(want_used); free(got_unused); free(want_unused); free(again_dwte);
    free(again_dwpe);
}

static void test_encoder(void) {
    test_encoder_case(3, 37, 768, 101, TOKENS_UNIFORM);     // many repeated tokens
    test_encoder_case(4, 64, 40, 50, TOKENS_SKEWED);
    test_encoder_case(2, 33, 12, 20, TOKENS_UNIFORM);       // C % 8 != 0: scalar path
    test_encoder_case(2, 100, 768, 50304, TOKENS_ALL_SAME); // one token, 200 rows
    test_encoder_case(8, 1024, 768, 50304, TOKENS_SKEWED);  // GPT-2 shapes
}

// ----------------------------------------------------------------------------------------
// layernorm

// the residual add fused into layernorm forward: the same bits as residual_forward then
// layernorm_forward (what recomputation in backward relies on), also with residual over a
static void test_layernorm_residual_case(int N, int C) {
    printf("  layernorm_residual_forward N=%d C=%d\n", N, C);
    const size_t nc = (size_t)N * C;
    float *a = host_random(nc, 2.0f, 3.0f), *b = host_random(nc, 1.0f);
    float *weight = host_random(C, 0.5f, 1.0f), *bias = host_random(C, 0.5f);
    floatX *d_a = dev_bf16(a, nc), *d_b = dev_bf16(b, nc), *d_weight = dev_bf16(weight, C);
    floatX *d_bias = dev_bf16(bias, C);
    floatX *d_res = (floatX *)dev_malloc(nc * sizeof(floatX), "test");
    floatX *d_out = (floatX *)dev_malloc(nc * sizeof(floatX), "test");
    float *d_stats = (float *)dev_malloc(2 * N * sizeof(float), "test");
    residual_forward(d_res, d_a, d_b, nc);
    layernorm_forward(d_out, d_stats, d_stats + N, d_res, d_weight, d_bias, N, C);
    float *want_res = get_bf16(d_res, nc), *want_out = get_bf16(d_out, nc);
    float *want_stats = get_f32(d_stats, 2 * N);
    for (int alias = 0; alias <= 1; alias++) {
        poison(d_res, nc * sizeof(floatX));
        poison(d_out, nc * sizeof(floatX));
        poison(d_stats, 2 * N * sizeof(float));
        floatX *res = d_res;
        if (alias) {   // residual written over a
            dev_copy(d_res, d_a, nc * sizeof(floatX));
            layernorm_residual_forward(res, d_out, d_stats, d_stats + N, res, d_b, d_weight, d_bias, N, C);
        } else {
            layernorm_residual_forward(res, d_out, d_stats, d_stats + N, d_a, d_b, d_weight, d_bias, N, C);
        }
        float *got_res = get_bf16(d_res, nc), *got_out = get_bf16(d_out, nc);
        float *got_stats = get_f32(d_stats, 2 * N);
        expect_identical(alias ? "residual over a == residual_forward" : "residual == residual_forward",
                         got_res, want_res, nc);
        expect_identical("out == layernorm_forward of the residual", got_out, want_out, nc);
        expect_identical("mean, rstd == layernorm_forward's", got_stats, want_stats, 2 * N);
        free(got_res); free(got_out); free(got_stats);
    }
    dev_free(d_a); dev_free(d_b); dev_free(d_weight); dev_free(d_bias); dev_free(d_res);
    dev_free(d_out); dev_free(d_stats);
    free(a); free(b); free(weight); free(bias); free(want_res); free(want_out); free(want_stats);
}

static void test_layernorm_case(int N, int C) {
    printf("  layernorm N=%d C=%d\n", N, C);
    const size_t nc = (size_t)N * C;
    float *inp = host_random(nc, 2.0f, 3.0f);   // mean far from 0: the variance is two-pass
    float *weight = host_random(C, 0.5f, 1.0f), *bias = host_random(C, 0.5f);
    float *out = host_alloc(nc), *mean = host_alloc(N), *rstd = host_alloc(N);
    cpu_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);

    floatX *d_inp = dev_bf16(inp, nc), *d_weight = dev_bf16(weight, C), *d_bias = dev_bf16(bias, C);
    floatX *d_out = (floatX *)dev_malloc(nc * sizeof(floatX), "test");
    float *d_mean = (float *)dev_malloc(N * sizeof(float), "test");
    float *d_rstd = (float *)dev_malloc(N * sizeof(float), "test");
    poison(d_out, nc * sizeof(floatX));
    poison(d_mean, N * sizeof(float));
    poison(d_rstd, N * sizeof(float));
    layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_weight, d_bias, N, C);
    float *got_out = get_bf16(d_out, nc), *got_mean = get_f32(d_mean, N), *got_rstd = get_f32(d_rstd, N);
    expect_close("forward out", got_out, out, nc, BF16_TOL);
    expect_close("forward mean (fp32)", got_mean, mean, N, FP32_TOL);
    expect_close("forward rstd (fp32)", got_rstd, rstd, N, FP32_TOL);

    // backward: dinp, dweight, dbias all accumulate
    float *dout = host_random(nc, 1.0f);
    float *dinp0 = host_random(nc, 1.0f), *dweight0 = host_random(C, 1.0f), *dbias0 = host_random(C, 1.0f);
    float *dinp = host_copy(dinp0, nc), *dweight = host_copy(dweight0, C), *dbias = host_copy(dbias0, C);
    cpu_layernorm_backward(dinp, dweight, dbias, NULL, NULL, dout, inp, weight, mean, rstd, N, C);
    floatX *d_dout = dev_bf16(dout, nc), *d_dinp = dev_bf16(dinp0, nc);
    floatX *d_dweight = dev_bf16(dweight0, C), *d_dbias = dev_bf16(dbias0, C);
    void *d_scratch = dev_malloc(layernorm_backward_scratch_size(N, C), "test scratch");
    poison(d_scratch, layernorm_backward_scratch_size(N, C));
    layernorm_backward(d_dinp, d_dweight, d_dbias, NULL, d_scratch, d_dout, d_inp, d_weight,
                       d_mean, d_rstd, N, C);
    float *got_dinp = get_bf16(d_dinp, nc), *got_dweight = get_bf16(d_dweight, C), *got_dbias = get_bf16(d_dbias, C);
    expect_close("dinp (+=)", got_dinp, dinp, nc, BF16_TOL);
    expect_close("dweight (+=)", got_dweight, dweight, C, BF16_TOL);
    expect_close("dbias (+=)", got_dbias, dbias, C, BF16_TOL);

    // with dproj_bias: += the column sums of dinp as it leaves (the bias gradient of the
    // projection before the residual add), twice for the same bits
    float *dproj0 = host_random(C, 1.0f), *dproj = host_copy(dproj0, C);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) dproj[c] += dinp[(size_t)i * C + c];
    floatX *d_dproj = dev_bf16(dproj0, C);
    float *again[2][4];
    for (int run = 0; run < 2; run++) {
        floatX_upload(d_dinp, dinp0, nc);
        floatX_upload(d_dweight, dweight0, C);
        floatX_upload(d_dbias, dbias0, C);
        floatX_upload(d_dproj, dproj0, C);
        layernorm_backward(d_dinp, d_dweight, d_dbias, d_dproj, d_scratch, d_dout, d_inp,
                           d_weight, d_mean, d_rstd, N, C);
        again[run][0] = get_bf16(d_dinp, nc);
        again[run][1] = get_bf16(d_dweight, C);
        again[run][2] = get_bf16(d_dbias, C);
        again[run][3] = get_bf16(d_dproj, C);
    }
    dev_free(d_scratch);
    expect_identical("dinp, with dproj_bias", again[0][0], got_dinp, nc);
    expect_close("dweight (+=), with dproj_bias", again[0][1], dweight, C, BF16_TOL);
    expect_close("dbias (+=), with dproj_bias", again[0][2], dbias, C, BF16_TOL);
    expect_close("dproj_bias (+= colsum(dinp))", again[0][3], dproj, C, BF16_TOL);
    const char *names[4] = {"dinp deterministic", "dweight deterministic",
                            "dbias deterministic", "dproj_bias deterministic"};
    const size_t sizes[4] = {nc, (size_t)C, (size_t)C, (size_t)C};
    for (int k = 0; k < 4; k++) {
        expect_identical(names[k], again[1][k], again[0][k], sizes[k]);
        free(again[0][k]);
        free(again[1][k]);
    }

    dev_free(d_inp); dev_free(d_weight); dev_free(d_bias); dev_free(d_out); dev_free(d_mean);
    dev_free(d_rstd); dev_free(d_dout); dev_free(d_dinp); dev_free(d_dweight); dev_free(d_dbias);
    dev_free(d_dproj);
    free(inp); free(weight); free(bias); free(out); free(mean); free(rstd); free(got_out);
    free(got_mean); free(got_rstd); free(dout); free(dinp0); free(dweight0); free(dbias0);
    free(dinp); free(dweight); free(dbias); free(got_dinp); free(got_dweight); free(got_dbias);
    free(dproj0); free(dproj);
}

static void test_layernorm(void) {
    test_layernorm_residual_case(37, 768);
    test_layernorm_residual_case(67, 20);     // scalar path
    test_layernorm_residual_case(257, 1600);
    test_layernorm_residual_case(300, 1280);
    test_layernorm_residual_case(40, 2048);   // past 7 vectors a lane: the row read again
    test_layernorm_case(37, 768);
    test_layernorm_case(1, 768);
    test_layernorm_case(130, 40);
    test_layernorm_case(67, 20);     // C % 8 != 0: scalar path
    test_layernorm_case(64, 36);
    test_layernorm_case(4096, 768);  // GPT-2 width, many rows per block
    test_layernorm_case(257, 1600);  // GPT-2 XL width: > 48 KiB of shared memory, 7 vectors a lane
    test_layernorm_case(300, 1280);  // GPT-2 large (d36): 5 vectors a lane
    test_layernorm_case(70, 1024);   // GPT-2 medium (d24): 4, the row read once
    test_layernorm_case(40, 2048);   // past 7 vectors a lane: the row read again
}

// ----------------------------------------------------------------------------------------
// matmul

static void test_matmul_case(int N, int C, int OC, bool with_bias, int bias_misalign = 0) {
    printf("  matmul N=%d C=%d OC=%d %s%s\n", N, C, OC, with_bias ? "bias" : "no bias",
           bias_misalign ? " (bias misaligned by one element)" : "");
    const size_t nc = (size_t)N * C, no = (size_t)N * OC, oc = (size_t)OC * C;
    float *inp = host_random(nc, 1.0f), *weight = host_random(oc, 1.0f);
    float *bias = with_bias ? host_random(OC, 1.0f) : NULL;
    float *out = host_alloc(no);
    cpu_matmul_forward(out, inp, weight, bias, N, C, OC);
    floatX *d_inp = dev_bf16(inp, nc), *d_weight = dev_bf16(weight, oc);
    floatX *d_bias = NULL;
    if (with_bias) {
        d_bias = (floatX *)dev_malloc((OC + 1) * sizeof(floatX), "test") + bias_misalign;
        floatX_upload(d_bias, bias, OC);
    }
    floatX *d_out = (floatX *)dev_malloc(no * sizeof(floatX), "test");
    poison(d_out, no * sizeof(floatX));
    matmul_forward(d_out, d_inp, d_weight, d_bias, N, C, OC);
    float *got_out = get_bf16(d_out, no);
    expect_close("forward out", got_out, out, no, BF16_TOL);

    // the decode step's forms (matmul_forward_epilogue): GELU in the epilogue, and the output
    // added to a residual (beta = 1); with the bias misaligned, both apart from the GEMM
    if (with_bias) {
        float *want = host_alloc(no), *res = host_random(no, 1.0f);
        cpu_gelu_forward(want, out, no);
        matmul_forward_epilogue(d_out, NULL, d_inp, d_weight, d_bias, N, C, OC, 1, 0);
        float *got = get_bf16(d_out, no);
        expect_close("forward, GELU in the epilogue", got, want, no, BF16_TOL);
        free(got);
        floatX_upload(d_out, res, no);
        matmul_forward_epilogue(d_out, NULL, d_inp, d_weight, d_bias, N, C, OC, 0, 1);
        cpu_residual_forward(want, res, out, no);
        got = get_bf16(d_out, no);
        expect_close("forward, added to the residual", got, want, no, BF16_TOL);
        free(got); free(want); free(res);
    }

    float *dout = host_random(no, 1.0f);
    float *dweight0 = host_random(oc, 1.0f), *dbias0 = host_random(OC, 1.0f);
    float *dinp = host_alloc(nc), *dweight = host_copy(dweight0, oc), *dbias = host_copy(dbias0, OC);
    cpu_matmul_backward(dinp, dweight, with_bias ? dbias : NULL, NULL, dout, inp, weight, N, C, OC);
    floatX *d_dout = dev_bf16(dout, no), *d_dinp = (floatX *)dev_malloc(nc * sizeof(floatX), "test");
    floatX *d_dweight = dev_bf16(dweight0, oc), *d_dbias = dev_bf16(dbias0, OC);
    poison(d_dinp, nc * sizeof(floatX));
    void *d_scratch = dev_malloc(matmul_backward_scratch_size(N, OC), "test scratch");
    poison(d_scratch, matmul_backward_scratch_size(N, OC));
    matmul_backward(d_dinp, d_dweight, with_bias ? d_dbias : NULL, d_scratch, d_dout, d_inp,
                    d_weight, N, C, OC);
    float *got_dinp = get_bf16(d_dinp, nc), *got_dweight = get_bf16(d_dweight, oc), *got_dbias = get_bf16(d_dbias, OC);
    expect_close("dinp (=)", got_dinp, dinp, nc, BF16_TOL);
    expect_close("dweight (+=)", got_dweight, dweight, oc, BF16_TOL);
    if (with_bias) expect_close("dbias (+=)", got_dbias, dbias, OC, BF16_TOL);
    else expect_identical("dbias untouched when NULL", got_dbias, dbias0, OC);

    // dinp NULL: dweight and dbias only, the same values
    floatX_upload(d_dweight, dweight0, oc);
    floatX_upload(d_dbias, dbias0, OC);
    matmul_backward(NULL, d_dweight, with_bias ? d_dbias : NULL, d_scratch, d_dout, d_inp,
                    d_weight, N, C, OC);
    dev_free(d_scratch);
    float *again_dweight = get_bf16(d_dweight, oc), *again_dbias = get_bf16(d_dbias, OC);
    expect_close("dweight, dinp NULL", again_dweight, dweight, oc, BF16_TOL);
    if (with_bias) expect_identical("dbias deterministic", again_dbias, got_dbias, OC);

    dev_free(d_inp); dev_free(d_weight); if (d_bias) dev_free(d_bias - bias_misalign); dev_free(d_out);
    dev_free(d_dout); dev_free(d_dinp); dev_free(d_dweight); dev_free(d_dbias);
    free(inp); free(weight); free(bias); free(out); free(got_out); free(dout); free(dweight0);
    free(dbias0); free(dinp); free(dweight); free(dbias); free(got_dinp); free(got_dweight);
    free(got_dbias); free(again_dweight); free(again_dbias);
}

// A test that sets one of matmul.cu's switches (MATMUL_TUNE, MATMUL_LT) puts the user's value
// back afterwards: env_save before, env_restore after (unset if it was unset)
static char *env_save(const char *name) {
    const char *v = getenv(name);
    return v ? strdup(v) : NULL;
}
static void env_restore(const char *name, char *saved) {
    if (saved) setenv(name, saved, 1);
    else unsetenv(name);
    free(saved);
}

// Above matmul.cu's tuning size a plan times the heuristic's candidates and keeps the fastest
// with the bits of the first: the outputs with tuning (MATMUL_TUNE unset, its default) are the
// bits of those without (MATMUL_TUNE=0, its own plans), and right against the CPU.
static void test_matmul_tuned(int N, int C, int OC) {
    printf("  matmul N=%d C=%d OC=%d, tuned against the heuristic's first\n", N, C, OC);
    test_matmul_case(N, C, OC, true);
    const size_t nc = (size_t)N * C, no = (size_t)N * OC, oc = (size_t)OC * C;
    float *inp = host_random(nc, 1.0f), *weight = host_random(oc, 1.0f);
    float *bias = host_random(OC, 1.0f), *dout = host_random(no, 1.0f);
    floatX *d_inp = dev_bf16(inp, nc), *d_weight = dev_bf16(weight, oc), *d_bias = dev_bf16(bias, OC);
    floatX *d_dout = dev_bf16(dout, no), *d_dweight = dev_bf16(NULL, oc);
    floatX *d_out = dev_bf16(NULL, no), *d_dinp = dev_bf16(NULL, nc);
    float *out[2], *dinp[2];
    char *user_tune = env_save("MATMUL_TUNE");
    for (int tuned = 0; tuned < 2; tuned++) {
        if (tuned) unsetenv("MATMUL_TUNE");
        else setenv("MATMUL_TUNE", "0", 1);
        poison(d_out, no * sizeof(floatX));
        poison(d_dinp, nc * sizeof(floatX));
        matmul_forward(d_out, d_inp, d_weight, d_bias, N, C, OC);
        matmul_backward(d_dinp, d_dweight, NULL, NULL, d_dout, d_inp, d_weight, N, C, OC);
        out[tuned] = get_bf16(d_out, no);
        dinp[tuned] = get_bf16(d_dinp, nc);
    }
    env_restore("MATMUL_TUNE", user_tune);
    expect_identical("forward, tuned: the heuristic's first's bits", out[1], out[0], no);
    expect_identical("dinp, tuned: the heuristic's first's bits", dinp[1], dinp[0], nc);
    dev_free(d_inp); dev_free(d_weight); dev_free(d_bias); dev_free(d_dout); dev_free(d_dweight);
    dev_free(d_out); dev_free(d_dinp);
    free(inp); free(weight); free(bias); free(dout);
    for (int t = 0; t < 2; t++) {
        free(out[t]);
        free(dinp[t]);
    }
}

// Training's fc projection backward with the GELU's (matmul_gelu_backward): against the CPU's
// matmul_backward then gelu_backward, and a second call the same bits
static void test_matmul_gelu_backward_case(int N, int C, int OC) {
    const size_t nc = (size_t)N * C, no = (size_t)N * OC, oc = (size_t)OC * C;
    float *pre = host_random(nc, 2.0f), *out = host_alloc(nc), *weight = host_random(oc, 1.0f);
    float *dout = host_random(no, 1.0f), *dweight0 = host_random(oc, 1.0f);
    float *dbias0 = host_random(C, 1.0f);
    float *dpre = host_alloc(nc), *dweight = host_copy(dweight0, oc), *dbias = host_copy(dbias0, C);
    // the CPU reference: gelu of the bf16 pre (as the GPU reads it), then the two layers
    floatX *d_pre = dev_bf16(pre, nc);
    float *pre_bf16 = get_bf16(d_pre, nc);
    cpu_gelu_forward(out, pre_bf16, nc);
    cpu_matmul_backward(dpre, dweight, NULL, NULL, dout, out, weight, N, C, OC);
    cpu_gelu_backward(dpre, dbias, NULL, pre_bf16, dpre, N, C);
    floatX *d_out = dev_bf16(out, nc), *d_weight = dev_bf16(weight, oc), *d_dout = dev_bf16(dout, no);
    floatX *d_dpre = dev_bf16(NULL, nc), *d_dweight = dev_bf16(NULL, oc), *d_dbias = dev_bf16(NULL, C);
    const size_t scratch_bytes = matmul_backward_scratch_size(N, C);
    void *d_scratch = dev_malloc(scratch_bytes, "test scratch");
    printf("  matmul + GELU backward N=%d C=%d OC=%d\n", N, C, OC);
    float *got[2][3];
    for (int run = 0; run < 2; run++) {
        poison(d_dpre, nc * sizeof(floatX));
        poison(d_scratch, scratch_bytes);
        floatX_upload(d_dweight, dweight0, oc);
        floatX_upload(d_dbias, dbias0, C);
        matmul_gelu_backward(d_dpre, d_dbias, d_dweight, d_scratch, d_dout, d_out, d_pre,
                             d_weight, N, C, OC);
        got[run][0] = get_bf16(d_dpre, nc);
        got[run][1] = get_bf16(d_dweight, oc);
        got[run][2] = get_bf16(d_dbias, C);
    }
    expect_close("dpre (=)", got[0][0], dpre, nc, BF16_TOL);
    expect_close("dweight (+=)", got[0][1], dweight, oc, BF16_TOL);
    expect_close("dbias (+=)", got[0][2], dbias, C, BF16_TOL);
    expect_identical("dpre, called again", got[1][0], got[0][0], nc);
    expect_identical("dweight, called again", got[1][1], got[0][1], oc);
    expect_identical("dbias, called again", got[1][2], got[0][2], C);
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 3; k++) free(got[r][k]);
    dev_free(d_scratch);
    dev_free(d_pre); dev_free(d_out); dev_free(d_weight); dev_free(d_dout); dev_free(d_dpre);
    dev_free(d_dweight); dev_free(d_dbias);
    free(pre); free(pre_bf16); free(out); free(weight); free(dout); free(dweight0); free(dbias0);
    free(dpre); free(dweight); free(dbias);
}

static void test_matmul(void) {
    test_matmul_case(37, 768, 2304, true);   // qkv
    test_matmul_case(128, 768, 768, true);   // attention projection
    test_matmul_case(300, 768, 3072, true);  // fc
    test_matmul_case(65, 3072, 768, true);   // fc projection
    test_matmul_case(77, 768, 50304, false); // lm head: no bias
    test_matmul_case(1, 64, 48, true);
    test_matmul_case(37, 768, 768, true, 1); // the bias apart from the GEMM
    test_matmul_case(33, 40, 24, true);
    test_matmul_case(33, 36, 20, true);      // rows not 16-byte multiples: cuBLASLt's slow paths
    test_matmul_tuned(4096, 768, 3072);      // fc at B=4: both products above the tuning size
    test_matmul_tuned(4096, 3072, 768);      // fc projection
    test_matmul_gelu_backward_case(300, 3072, 768);    // the fc projection's shape
    test_matmul_gelu_backward_case(4096, 3072, 768);   // above the tuning size
    test_matmul_gelu_backward_case(33, 40, 24);        // odd rows: cuBLASLt's slow paths or none
    test_matmul_gelu_backward_case(33, 36, 20);        // rows of 72 bytes: less aligned kernels
    // the same on the path of shapes cuBLASLt has no algorithm for (cublasGemmEx, the bias and
    // the GELU's forward or backward apart), forced
    char *user_lt = env_save("MATMUL_LT");
    setenv("MATMUL_LT", "0", 1);
    printf("  MATMUL_LT=0:\n");
    test_matmul_case(300, 768, 3072, true);
    test_matmul_gelu_backward_case(300, 3072, 768);
    env_restore("MATMUL_LT", user_lt);
}

// ----------------------------------------------------------------------------------------
// gelu and residual

static void test_gelu_case(int N, int OC, int misalign) {
    const size_t n = (size_t)N * OC;
    printf("  gelu N=%d OC=%d%s\n", N, OC, misalign ? " (misaligned by one element)" : "");
    float *inp = host_random(n, 4.0f), *dout = host_random(n, 1.0f);
    float *out = host_alloc(n), *dinp = host_alloc(n);
    float *dbias0 = host_random(OC, 1.0f), *dbias = host_copy(dbias0, OC);
    cpu_gelu_forward(out, inp, n);
    cpu_gelu_backward(dinp, dbias, NULL, inp, dout, N, OC);
    floatX *d_inp = dev_bf16(inp, n, misalign), *d_out = dev_bf16(NULL, n, misalign);
    floatX *d_dout = dev_bf16(dout, n, misalign), *d_dbias = dev_bf16(dbias0, OC);
    poison(d_out, n * sizeof(floatX));
    gelu_forward(d_out, d_inp, n);
    float *got = get_bf16(d_out, n);
    expect_close("forward", got, out, n, BF16_TOL);
    poison(d_out, n * sizeof(floatX));
    float *dbias_start = get_bf16(d_dbias, OC);
    gelu_backward(d_out, NULL, NULL, d_inp, d_dout, N, OC);
    float *got_dinp = get_bf16(d_out, n);
    expect_close("backward", got_dinp, dinp, n, BF16_TOL);
    float *dbias_after = get_bf16(d_dbias, OC);
    expect_identical("bias left alone without dbias", dbias_after, dbias_start, OC);
    free(dbias_start);
    free(dbias_after);
    // in place (dinp aliases dout), with the bias gradient in the same pass, twice for the bits
    const size_t scratch_bytes = matmul_backward_scratch_size(N, OC);
    void *d_scratch = dev_malloc(scratch_bytes, "test scratch");
    float *got_inplace[2], *got_dbias[2];
    for (int run = 0; run < 2; run++) {
        floatX_upload(d_dout, dout, n);
        floatX_upload(d_dbias, dbias0, OC);
        poison(d_scratch, scratch_bytes);
        gelu_backward(d_dout, d_dbias, d_scratch, d_inp, d_dout, N, OC);
        got_inplace[run] = get_bf16(d_dout, n);
        got_dbias[run] = get_bf16(d_dbias, OC);
    }
    dev_free(d_scratch);
    expect_identical("backward in place with dbias: dinp as without", got_inplace[0], got_dinp, n);
    // a column sum's error is relative to the magnitudes summed (|dbias0| + sum |dinp|), not to
    // the sum, which cancels: at OC = 1 the check is one element, and a sum near zero failed
    // 1e-2 of itself for 1 seed in 12 (docs/PERF.md, twenty-third session)
    double diff2 = 0.0, magnitude2 = 0.0;
    for (int c = 0; c < OC; c++) {
        double m = fabs(dbias0[c]);
        for (int r = 0; r < N; r++) m += fabs(dinp[(size_t)r * OC + c]);
        const double d = (double)got_dbias[0][c] - dbias[c];
        diff2 += isfinite(got_dbias[0][c]) ? d * d : INFINITY;
        magnitude2 += m * m;
    }
    const double err = sqrt(diff2 / magnitude2);
    printf("    %-34s rel err %.2e  (tol %.0e, of the magnitudes summed)%s\n", "dbias (+= colsum(dinp))",
           err, BF16_TOL, err <= BF16_TOL ? "" : "  <-- FAIL");
    CHECK(err <= BF16_TOL, "dbias (+= colsum(dinp)): error %.3e of the magnitudes summed > %.1e", err, BF16_TOL);
    expect_identical("dbias deterministic", got_dbias[1], got_dbias[0], OC);
    dev_free(d_inp - misalign); dev_free(d_out - misalign); dev_free(d_dout - misalign);
    dev_free(d_dbias);
    free(inp); free(dout); free(out); free(dinp); free(got); free(got_dinp); free(dbias0);
    free(dbias);
    for (int run = 0; run < 2; run++) {
        free(got_inplace[run]);
        free(got_dbias[run]);
    }
}

static void test_gelu(void) {
    test_gelu_case(37, 3072, 0);
    test_gelu_case(1000003, 1, 1);      // one column: misaligned, the scalar path
    test_gelu_case(7, 1, 0);
    test_gelu_case(4 * 1024, 3072, 0);  // a B=4 step's fc
    test_gelu_case(65, 20, 0);          // OC % 8 != 0: the scalar path
}

static void test_residual_case(size_t n, int misalign) {
    printf("  residual n=%zu%s\n", n, misalign ? " (misaligned by one element)" : "");
    float *a = host_random(n, 1.0f), *b = host_random(n, 1.0f), *out = host_alloc(n);
    cpu_residual_forward(out, a, b, n);
    floatX *d_a = dev_bf16(a, n, misalign), *d_b = dev_bf16(b, n, misalign);
    floatX *d_out = dev_bf16(NULL, n, misalign);
    poison(d_out, n * sizeof(floatX));
    residual_forward(d_out, d_a, d_b, n);
    float *got = get_bf16(d_out, n);
    expect_close("out = a + b", got, out, n, BF16_TOL);
    residual_forward(d_a, d_a, d_b, n);   // in place
    float *got_inplace = get_bf16(d_a, n);
    expect_close("a = a + b (in place)", got_inplace, out, n, BF16_TOL);
    dev_free(d_a - misalign); dev_free(d_b - misalign); dev_free(d_out - misalign);
    free(a); free(b); free(out); free(got); free(got_inplace);
}

static void test_residual(void) {
    test_residual_case((size_t)64 * 768 + 3, 0);
    test_residual_case(1000003, 1);
    test_residual_case(13, 0);
}

// ----------------------------------------------------------------------------------------
// cross-entropy

static void test_crossentropy_case(int N, int V, int Vp) {
    printf("  crossentropy N=%d V=%d Vp=%d\n", N, V, Vp);
    const size_t nv = (size_t)N * Vp;
    float *logits = host_random(nv, 4.0f);
    int *targets = (int *)malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) {
        int t = (int)((test_randf(&rng) * 0.5f + 0.5f) * V);
        targets[i] = t >= V ? V - 1 : t;
    }
    targets[0] = 0;
    if (N > 1) targets[1] = V - 1;
    int *d_targets = dev_ints(targets, N);
    floatX *d_logits = dev_bf16(logits, nv);
    float *d_losses = (float *)dev_malloc(N * sizeof(float), "test");
    const float dloss = 1.0f / N;

    float *grad = host_copy(logits, nv), *losses = host_alloc(N);
    cpu_crossentropy_forward_backward(grad, losses, targets, N, V, Vp, dloss);
    poison(d_losses, N * sizeof(float));
    crossentropy_forward_backward(d_logits, d_losses, d_targets, N, V, Vp, dloss);
    float *got_losses = get_f32(d_losses, N), *got_grad = get_bf16(d_logits, nv);
    expect_close("losses (fp32)", got_losses, losses, N, FP32_TOL);
    expect_close("gradient", got_grad, grad, nv, BF16_TOL);
    // the softmax part alone (the -dloss at each target dominates the norm above)
    float *got_soft = host_copy(got_grad, nv), *want_soft = host_copy(grad, nv);
    for (int i = 0; i < N; i++) got_soft[(size_t)i * Vp + targets[i]] = want_soft[(size_t)i * Vp + targets[i]] = 0.0f;
    expect_close("gradient, targets left out", got_soft, want_soft, nv, BF16_TOL);
    size_t nonzero_padding = 0;
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) nonzero_padding += got_grad[(size_t)i * Vp + j] != 0.0f;
    printf("    %-34s %zu nonzero%s\n", "padding columns", nonzero_padding, nonzero_padding ? "  <-- FAIL" : "");
    CHECK(nonzero_padding == 0, "%zu padding gradients are not 0", nonzero_padding);

    // dloss == 0: losses only, logits untouched
    floatX_upload(d_logits, logits, nv);
    poison(d_losses, N * sizeof(float));
    crossentropy_forward_backward(d_logits, d_losses, d_targets, N, V, Vp, 0.0f);
    float *got_losses0 = get_f32(d_losses, N), *got_logits = get_bf16(d_logits, nv);
    expect_close("losses, dloss = 0 (fp32)", got_losses0, losses, N, FP32_TOL);
    expect_identical("logits untouched, dloss = 0", got_logits, logits, nv);

    dev_free(d_targets); dev_free(d_logits); dev_free(d_losses);
    free(logits); free(targets); free(grad); free(losses); free(got_losses); free(got_grad);
    free(got_soft); free(want_soft); free(got_losses0); free(got_logits);
}

// the losses' mean on the device against the CPU's (the same double sum in another order:
// equal after rounding to fp32 but for a last-bit tie), added to a running sum
static void test_loss_mean_case(int N) {
    printf("  crossentropy_loss_mean N=%d\n", N);
    float *losses = host_random(N, 5.0f);
    float *d_losses = (float *)dev_malloc(N * sizeof(float), "test");
    float *d_out = (float *)dev_malloc(2 * sizeof(float), "test");
    dev_upload(d_losses, losses, N * sizeof(float));
    const float start[2] = {-1.0f, 2.0f};
    dev_upload(d_out, start, sizeof(start));
    crossentropy_loss_mean(d_out, d_out + 1, d_losses, N);
    float want_mean = 0.0f, want_sum = 2.0f;
    cpu_crossentropy_loss_mean(&want_mean, &want_sum, losses, N);
    float got[2];
    dev_download(got, d_out, sizeof(got));
    expect_close("mean (fp32)", &got[0], &want_mean, 1, FP32_TOL);
    expect_close("sum += mean (fp32)", &got[1], &want_sum, 1, FP32_TOL);
    crossentropy_loss_mean(d_out, NULL, d_losses, N);
    float again = dev_read_float(d_out);
    expect_identical("deterministic, and without a sum", &again, &got[0], 1);
    dev_free(d_losses); dev_free(d_out);
    free(losses);
}

static void test_crossentropy(void) {
    test_loss_mean_case(1);
    test_loss_mean_case(65536);   // B=64, T=1024
    test_crossentropy_case(37, 50257, 50304);
    test_crossentropy_case(5, 100, 128);
    test_crossentropy_case(7, 61, 67);        // Vp % 8 != 0: scalar path
    test_crossentropy_case(3, 64, 64);        // no padding
    test_crossentropy_case(1024, 50257, 50304);
}

// ----------------------------------------------------------------------------------------
// AdamW and grad_sumsq

static void test_adamw_case(size_t n, int misalign, bool with_master) {
    printf("  adamw n=%zu %s%s\n", n, with_master ? "fp32 master weights" : "no master (bf16 params)",
           misalign ? ", misaligned by one element" : "");
    const float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    // a gradient of norm 1 clipped to 0.7 (scaled by 0.7), the sum of squares in device memory
    const float grad_sumsq = 1.0f, max_grad_norm = 0.7f;
    float *d_sumsq = (float *)dev_malloc(sizeof(float), "test");
    dev_upload(d_sumsq, &grad_sumsq, sizeof(float));
    float *params = host_random(n, 1.0f);
    float *m = host_random(n, 0.01f), *v = host_alloc(n);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(test_randf(&rng)) * 1e-4f;
    const size_t pad = misalign;
    floatX *d_params = (floatX *)dev_malloc((n + 1) * sizeof(floatX), "test") + pad;
    floatX *d_grads = (floatX *)dev_malloc((n + 1) * sizeof(floatX), "test") + pad;
    float *d_master = with_master ? (float *)dev_malloc((n + 1) * sizeof(float), "test") + pad : NULL;
    float *d_m = (float *)dev_malloc((n + 1) * sizeof(float), "test") + pad;
    float *d_v = (float *)dev_malloc((n + 1) * sizeof(float), "test") + pad;
    floatX_upload(d_params, params, n);
    if (with_master) dev_upload(d_master, params, n * sizeof(float));
    dev_upload(d_m, m, n * sizeof(float));
    dev_upload(d_v, v, n * sizeof(float));
    for (int t = 1; t <= 3; t++) {
        float *grads = host_random(n, 1.0f);
        floatX_upload(d_grads, grads, n);
        cpu_adamw_update(params, NULL, grads, m, v, n, lr, beta1, beta2, eps, wd, &grad_sumsq,
                         max_grad_norm, t);
        adamw_update(d_params, d_master, d_grads, d_m, d_v, n, lr, beta1, beta2, eps, wd, d_sumsq,
                     max_grad_norm, t);
        free(grads);
    }
    float *got_params = get_bf16(d_params, n), *got_m = get_f32(d_m, n), *got_v = get_f32(d_v, n);
    if (with_master) {
        float *got_master = get_f32(d_master, n), *rounded = host_alloc(n);
        for (size_t i = 0; i < n; i++) rounded[i] = bf16_round(got_master[i]);
        expect_close("master after 3 steps (fp32)", got_master, params, n, FP32_TOL);
        expect_identical("params == bf16(master)", got_params, rounded, n);
        free(got_master); free(rounded);
    } else {
        expect_close("params after 3 steps", got_params, params, n, BF16_TOL);
    }
    expect_close("m (fp32)", got_m, m, n, FP32_TOL);
    expect_close("v (fp32)", got_v, v, n, FP32_TOL);
    // a gradient whose norm is not finite updates nothing: every array stays as it was
    const float not_finite[2] = {INFINITY, NAN};
    for (int k = 0; k < 2; k++) {
        dev_upload(d_sumsq, &not_finite[k], sizeof(float));
        adamw_update(d_params, d_master, d_grads, d_m, d_v, n, lr, beta1, beta2, eps, wd, d_sumsq,
                     max_grad_norm, 4);
        float *p4 = get_bf16(d_params, n), *m4 = get_f32(d_m, n), *v4 = get_f32(d_v, n);
        expect_identical(k ? "NaN norm: params unchanged" : "infinite norm: params unchanged", p4, got_params, n);
        expect_identical("not-finite norm: m unchanged", m4, got_m, n);
        expect_identical("not-finite norm: v unchanged", v4, got_v, n);
        free(p4); free(m4); free(v4);
    }
    dev_free(d_params - pad); dev_free(d_grads - pad); if (d_master) dev_free(d_master - pad);
    dev_free(d_m - pad); dev_free(d_v - pad); dev_free(d_sumsq);
    free(params); free(m); free(v); free(got_params); free(got_m); free(got_v);
}

static void test_grad_sumsq_case(size_t n, int misalign) {
    printf("  grad_sumsq n=%zu%s\n", n, misalign ? " (misaligned by one element)" : "");
    float *grads = host_random(n, 1.0f);
    floatX *d_grads = (floatX *)dev_malloc((n + 1) * sizeof(floatX), "test") + misalign;
    floatX_upload(d_grads, grads, n);
    float *d_out = (float *)dev_malloc(sizeof(float), "test");
    const float start = 1.5f;
    float want = start;
    cpu_grad_sumsq(&want, grads, n);
    dev_upload(d_out, &start, sizeof(float));
    grad_sumsq(d_out, d_grads, n);
    float got = dev_read_float(d_out);
    expect_close("start + sum of squares (fp32)", &got, &want, 1, FP32_TOL);
    // a second call adds again, bit-identically
    grad_sumsq(d_out, d_grads, n);
    float got2 = dev_read_float(d_out);
    float want2 = start;
    cpu_grad_sumsq(&want2, grads, n);
    cpu_grad_sumsq(&want2, grads, n);
    expect_close("second call accumulates (fp32)", &got2, &want2, 1, FP32_TOL);
    dev_upload(d_out, &start, sizeof(float));
    grad_sumsq(d_out, d_grads, n);
    float again = dev_read_float(d_out);
    expect_identical("deterministic", &again, &got, 1);
    dev_free(d_grads - misalign); dev_free(d_out);
    free(grads);
}

static void test_optimizer(void) {
    test_adamw_case(1000003, 0, true);
    test_adamw_case(1000003, 0, false);
    test_adamw_case(999, 1, true);
    test_adamw_case(999, 1, false);
    test_adamw_case((size_t)124475904, 0, true);   // GPT-2 124M's parameter count
    test_grad_sumsq_case(5, 0);
    test_grad_sumsq_case(1000003, 1);
    test_grad_sumsq_case((size_t)124475904, 0);
}

// ----------------------------------------------------------------------------------------
// naive attention (attention/naive.cu against attention/naive.c)

static void test_attention_case(int B, int T, int NH, int HS) {
    printf("  attention B=%d T=%d NH=%d HS=%d\n", B, T, NH, HS);
    const int C = NH * HS;
    const size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C;
    const size_t n_att = (size_t)B * NH * T * T;
    CHECK(attention_saved_size(B, T, NH, HS) == n_att * 2, "attention_saved_size %zu, want %zu",
          attention_saved_size(B, T, NH, HS), n_att * 2);
    CHECK(attention_scratch_size(B, T, NH, HS) >= 7 * n_out * 2 + n_att * 2,
          "attention_scratch_size %zu is less than Q,K,V,O,dQ,dK,dV and dP",
          attention_scratch_size(B, T, NH, HS));

    float *qkv = host_random(n_qkv, 1.0f), *dout = host_random(n_out, 1.0f);
    float *out = host_alloc(n_out), *dqkv = host_alloc(n_qkv);
    float *saved = (float *)malloc(cpu_attention_saved_size(B, T, NH, HS));
    void *scratch = malloc(cpu_attention_scratch_size(B, T, NH, HS) + 1);
    cpu_attention_forward(out, saved, scratch, qkv, B, T, NH, HS);
    cpu_attention_backward(dqkv, scratch, dout, qkv, out, saved, B, T, NH, HS);

    floatX *d_qkv = dev_bf16(qkv, n_qkv), *d_dout = dev_bf16(dout, n_out);
    floatX *d_out = (floatX *)dev_malloc(n_out * sizeof(floatX), "test");
    floatX *d_dqkv = (floatX *)dev_malloc(n_qkv * sizeof(floatX), "test");
    void *d_saved = dev_malloc(attention_saved_size(B, T, NH, HS), "test");
    void *d_scratch = dev_malloc(attention_scratch_size(B, T, NH, HS), "test");
    poison(d_out, n_out * sizeof(floatX));
    poison(d_saved, attention_saved_size(B, T, NH, HS));
    poison(d_scratch, attention_scratch_size(B, T, NH, HS));
    attention_forward(d_out, d_saved, d_scratch, d_qkv, B, T, NH, HS);
    float *got_out = get_bf16(d_out, n_out), *got_p = get_bf16((const floatX *)d_saved, n_att);
    expect_close("forward out", got_out, out, n_out, BF16_TOL);
    expect_close("P (saved)", got_p, saved, n_att, BF16_TOL);
    size_t masked_nonzero = 0, rows_off = 0;
    for (size_t r = 0; r < (size_t)B * NH * T; r++) {
        const int t = (int)(r % T);
        double sum = 0.0;
        for (int s = 0; s < T; s++) {
            const float p = got_p[r * T + s];
            if (s > t) masked_nonzero += p != 0.0f;
            else sum += p;
        }
        rows_off += fabs(sum - 1.0) > 1e-2;
    }
    printf("    %-34s %zu nonzero%s\n", "P above the diagonal", masked_nonzero, masked_nonzero ? "  <-- FAIL" : "");
    printf("    %-34s %zu rows off by > 1e-2%s\n", "P rows sum to 1", rows_off, rows_off ? "  <-- FAIL" : "");
    CHECK(masked_nonzero == 0, "%zu masked entries of P are not 0", masked_nonzero);
    CHECK(rows_off == 0, "%zu rows of P do not sum to 1", rows_off);

    poison(d_dqkv, n_qkv * sizeof(floatX));
    poison(d_scratch, attention_scratch_size(B, T, NH, HS));
    attention_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_saved, B, T, NH, HS);
    float *got_dqkv = get_bf16(d_dqkv, n_qkv);
    expect_close("dqkv", got_dqkv, dqkv, n_qkv, BF16_TOL);
    // each of dq, dk, dv on its own, to say which part is wrong
    float *got_part = host_alloc(n_out), *want_part = host_alloc(n_out);
    const char *names[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; part++) {
        for (size_t bt = 0; bt < (size_t)B * T; bt++) {
            memcpy(got_part + bt * C, got_dqkv + (bt * 3 + part) * C, C * sizeof(float));
            memcpy(want_part + bt * C, dqkv + (bt * 3 + part) * C, C * sizeof(float));
        }
        expect_close(names[part], got_part, want_part, n_out, BF16_TOL);
    }

    dev_free(d_qkv); dev_free(d_dout); dev_free(d_out); dev_free(d_dqkv); dev_free(d_saved);
    dev_free(d_scratch);
    free(qkv); free(dout); free(out); free(dqkv); free(saved); free(scratch); free(got_out);
    free(got_p); free(got_dqkv); free(got_part); free(want_part);
}

static void test_attention(void) {
    CHECK(strcmp(attention_name, "naive") == 0, "attention_name is '%s'", attention_name);
    test_attention_case(2, 37, 3, 16);
    test_attention_case(1, 64, 2, 64);
    test_attention_case(2, 129, 4, 32);
    test_attention_case(1, 1, 2, 8);        // one position
    test_attention_case(2, 29, 3, 12);      // HS % 8 != 0 and T % 8 != 0: scalar paths
    test_attention_case(4, 256, 12, 64);
    test_attention_case(1, 1024, 12, 64);   // GPT-2 124M's shape
}

// ----------------------------------------------------------------------------------------
// one process per group

typedef struct {
    const char *name;
    void (*run)(void);
} Group;

static const Group groups[] = {
    {"device", test_device},         {"encoder", test_encoder},
    {"layernorm", test_layernorm},   {"matmul", test_matmul},
    {"gelu", test_gelu},             {"residual", test_residual},
    {"crossentropy", test_crossentropy}, {"optimizer", test_optimizer},
    {"attention", test_attention},
};

// 1 when a CUDA device is usable; asked in a child so that this process never touches CUDA
// before it forks
static int gpu_present(void) {
    pid_t pid = fork();
    if (pid == 0) {
        int count = 0;
        _exit(cudaGetDeviceCount(&count) == cudaSuccess && count > 0 ? 0 : 3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void run_group(const Group *g) {
    fflush(stdout);
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        exit(1);
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        printf("== %s\n", g->name);
        if (backend_init() != 0) _exit(2);
        g->run();
        dev_synchronize();
        int counts[3] = {test_passed_count, test_failed_count, test_skipped_count};
        fflush(stdout);
        if (write(fds[1], counts, sizeof(counts)) != (ssize_t)sizeof(counts)) _exit(2);
        _exit(0);
    }
    close(fds[1]);
    int counts[3] = {0, 0, 0};
    const ssize_t got = read(fds[0], counts, sizeof(counts));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got == (ssize_t)sizeof(counts) && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        test_passed_count += counts[0];
        test_failed_count += counts[1];
        test_skipped_count += counts[2];
    } else {
        test_failed_count++;
        if (WIFSIGNALED(status))
            printf("FAIL: group %s died of signal %d\n", g->name, WTERMSIG(status));
        else
            printf("FAIL: group %s exited with status %d before finishing\n", g->name,
                   WEXITSTATUS(status));
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);   // lines reach a log even if a group crashes
    if (!gpu_present()) {
        SKIP("no CUDA device: the GPU layer tests need one");
        return test_summary_named("test_layers_gpu");
    }
    const unsigned long long seed = test_seed();
    const int ngroups = (int)(sizeof(groups) / sizeof(groups[0]));
    for (int i = 1; i < argc; i++) {
        int found = 0;
        for (int k = 0; k < ngroups; k++) found |= strcmp(argv[i], groups[k].name) == 0;
        if (!found) {
            fprintf(stderr, "unknown group '%s'; groups:", argv[i]);
            for (int k = 0; k < ngroups; k++) fprintf(stderr, " %s", groups[k].name);
            fprintf(stderr, "\n");
            return 2;
        }
    }
    for (int k = 0; k < ngroups; k++) {
        int wanted = argc == 1;
        for (int i = 1; i < argc; i++) wanted |= strcmp(argv[i], groups[k].name) == 0;
        if (!wanted) continue;
        rng = seed * 6364136223846793005ULL + k + 1;   // each group its own stream, replayable
        if (rng == 0) rng = 1;
        run_group(&groups[k]);
    }
    return test_summary_named("test_layers_gpu");
}
