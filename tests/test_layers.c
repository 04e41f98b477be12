// test_layers.c: every function of layers/layers.h on the backend it is built for (the CPU in
// CI), against double-precision references written here.
//
// Gradient checks: each backward is compared with central finite differences of a tiny
// double-precision reference forward, of the objective L = sum(out * dout) for a random dout,
// so that dL/d(input) is exactly what backward computes from the upstream gradient dout.
// With step 1e-5 in double the reference gradients are accurate to about 1e-9 relative, so
// the tolerances below measure the fp32 implementation alone:
//   FWD_TOL 1e-5  forward values against the double reference (relative L2 error)
//   BWD_TOL 1e-5  gradients against the finite differences (measured: below 5e-7), and a
//                 second backward call against twice the first (accumulation)
// Elsewhere: exact where the operation is one fp32 add or a copy (encoder forward, residual,
// dinp overwritten); 1e-6 for accumulated sums checked in double (encoder backward, AdamW
// moments and params, grad_sumsq); 1e-4 for the AdamW step recovered as new - old param,
// a difference that loses about 1e-5 relative to the step.
// Sizes are deliberately not multiples of anything (tiles of 6, 16, 32, 64, 256 in matmul).
#include "../layers/layers.h"
#include "test.h"

#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define FWD_TOL 1e-5
#define BWD_TOL 1e-5
#define FD_STEP 1e-5

static unsigned long long rng;

static float *random_array(size_t n, float scale) {
    float *x = malloc(n * sizeof(float));
    test_fill(x, n, scale, &rng);
    return x;
}

static float *zero_array(size_t n) { return calloc(n, sizeof(float)); }

// NaN everywhere: an output the function fails to write then fails the comparison
static float *poisoned_array(size_t n) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

// a - b in double, rounded once; used to isolate what an accumulating (+=) call added
static float *difference(const float *a, const float *b, size_t n) {
    float *d = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) d[i] = (float)((double)a[i] - (double)b[i]);
    return d;
}

static float *scaled(const float *x, size_t n, float s) {
    float *y = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) y[i] = s * x[i];
    return y;
}

// grad[i] = dL/dx[i] by central differences of objective(ctx), which reads x
typedef double (*Objective)(const void *ctx);
static float *numeric_grad(double *x, size_t n, Objective objective, const void *ctx) {
    float *grad = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + FD_STEP;
        double plus = objective(ctx);
        x[i] = saved - FD_STEP;
        double minus = objective(ctx);
        x[i] = saved;
        grad[i] = (float)((plus - minus) / (2.0 * FD_STEP));
    }
    return grad;
}

// ----------------------------------------------------------------------------------------
// device memory

// (test_exit_status silences the children's stderr: the message is the expected outcome, not news)
static void allocate_impossible(void *unused) { dev_malloc(SIZE_MAX - 1, "test: impossible request"); }
#ifndef __SANITIZE_ADDRESS__   // AddressSanitizer aborts on this request instead of failing it
static void allocate_petabyte(void *unused) { dev_malloc((size_t)1 << 50, "test: a petabyte"); }
#endif

static void test_device(void) {
    CHECK(strcmp(backend_name(), "cpu") == 0, "backend_name is \"%s\"", backend_name());
    CHECK(backend_init() == 0 && backend_init() == 0, "backend_init succeeds twice");
    char line[256] = "";
    backend_describe(line, sizeof(line));
    CHECK(strlen(line) > 0, "backend_describe writes a line");
    printf("backend: %s\n", line);
    CHECK(device_memory_total() > 0, "device_memory_total > 0");

    size_t in_use0 = dev_bytes_in_use();
    float *a = dev_malloc(1000, "test a");
    float *b = dev_malloc(3333, "test b");
    CHECK(dev_bytes_in_use() == in_use0 + 4333, "in use after two allocations: %zu, want %zu",
          dev_bytes_in_use(), in_use0 + 4333);
    size_t peak = dev_bytes_peak();
    CHECK(peak >= in_use0 + 4333, "peak %zu >= in use", peak);
    CHECK((uintptr_t)a % 64 == 0 && (uintptr_t)b % 64 == 0, "allocations are 64-byte aligned");
    dev_free(a);
    CHECK(dev_bytes_in_use() == in_use0 + 3333, "in use after one free: %zu, want %zu",
          dev_bytes_in_use(), in_use0 + 3333);
    CHECK(dev_bytes_peak() == peak, "a free does not lower the peak");
    dev_free(b);
    dev_free(NULL);
    CHECK(dev_bytes_in_use() == in_use0, "in use back to where it started");
    void *empty = dev_malloc(0, "test empty");
    dev_free(empty);
    CHECK(dev_bytes_in_use() == in_use0, "a zero-byte allocation is accounted as zero");

    // transfers and conversions round-trip exactly
    size_t n = 517;
    float *host = random_array(n, 1.0f), *back = poisoned_array(n);
    float *dev1 = dev_malloc(n * sizeof(float), "test dev1");
    float *dev2 = dev_malloc(n * sizeof(float), "test dev2");
    dev_upload(dev1, host, n * sizeof(float));
    dev_copy(dev2, dev1, n * sizeof(float));
    dev_download(back, dev2, n * sizeof(float));
    dev_synchronize();
    CHECK(memcmp(back, host, n * sizeof(float)) == 0, "upload, copy, download round-trip");
    floatX_upload(dev1, host, n);
    floatX_from_float(dev2, dev1, n);
    floatX_download(back, dev2, n);
    CHECK(memcmp(back, host, n * sizeof(float)) == 0, "floatX conversions round-trip (fp32)");
    dev_memset_zero(dev2, n * sizeof(float));
    dev_download(back, dev2, n * sizeof(float));
    int all_zero = 1;
    for (size_t i = 0; i < n; i++) all_zero &= back[i] == 0.0f;
    CHECK(all_zero, "dev_memset_zero zeroes");
    // host memory the device writes, and events (on the CPU both immediate)
    int *ring = dev_host_alloc(3 * 2 * sizeof(int), "test ring");
    int toks[4] = {11, 22, 5, 6};   // tokens (2), then two steps' position cells
    DevEvent *e = dev_event_new();
    dev_event_wait(e);   // never recorded: returns
    decode_advance(ring, 3, toks + 2, 2, 0, 0, toks, 2);   // step 0 of 2: slot 5 % 3
    toks[0] = 33;
    toks[1] = 44;
    decode_advance(ring, 3, toks + 2, 2, 1, 1, toks, 2);   // step 1, the last: slot 6 % 3, the next cells
    dev_event_record(e);
    dev_event_wait(e);
    CHECK(ring[4] == 11 && ring[5] == 22 && ring[0] == 33 && ring[1] == 44,
          "decode_advance: slot 2 holds %d %d (want 11 22), slot 0 %d %d (want 33 44)", ring[4],
          ring[5], ring[0], ring[1]);
    CHECK(toks[2] == 7 && toks[3] == 8, "decode_advance at a graph's last step: the next cells %d "
          "%d, want 7 8", toks[2], toks[3]);
    dev_event_free(e);
    dev_event_free(NULL);
    dev_host_free(ring);

    dev_free(dev1);
    dev_free(dev2);
    free(host);
    free(back);

    CHECK(test_exit_status(allocate_impossible, NULL) == 1, "dev_malloc exits(1) on SIZE_MAX - 1 bytes");
#ifdef __SANITIZE_ADDRESS__
    SKIP("dev_malloc of a petabyte: AddressSanitizer aborts instead of returning NULL");
#else
    CHECK(test_exit_status(allocate_petabyte, NULL) == 1, "dev_malloc exits(1) when out of memory");
#endif
}

// ----------------------------------------------------------------------------------------
// encoder

static void test_encoder(void) {
    int B = 3, T = 5, C = 19, Vp = 7, maxT = 6;   // 15 tokens from 7: repeats are certain
    int tokens[15];
    for (int i = 0; i < B * T; i++) tokens[i] = (int)((test_randf(&rng) + 1.0f) * 0.5f * Vp) % Vp;
    tokens[0] = tokens[1] = tokens[B * T - 1];   // and one token shared by several rows
    float *wte = random_array((size_t)Vp * C, 1.0f), *wpe = random_array((size_t)maxT * C, 1.0f);
    float *out = poisoned_array((size_t)B * T * C);
    encoder_forward(out, tokens, wte, wpe, B, T, C);
    float *want = malloc((size_t)B * T * C * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                want[(b * T + t) * C + c] = wte[tokens[b * T + t] * C + c] + wpe[t * C + c];
    CHECK_CLOSE(out, want, (size_t)B * T * C, 0.0, "encoder_forward");

    // backward accumulates into whatever the gradients already hold
    float *dout = random_array((size_t)B * T * C, 1.0f);
    float *dwte = random_array((size_t)Vp * C, 1.0f), *dwpe = random_array((size_t)maxT * C, 1.0f);
    double *dwte_want = test_to_double(dwte, (size_t)Vp * C), *dwpe_want = test_to_double(dwpe, (size_t)maxT * C);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                dwte_want[tokens[b * T + t] * C + c] += dout[(b * T + t) * C + c];
                dwpe_want[t * C + c] += dout[(b * T + t) * C + c];
            }
    void *scratch = dev_malloc(encoder_backward_scratch_size(B, T), "encoder_backward scratch");
    encoder_backward(dwte, dwpe, scratch, dout, tokens, B, T, C);
    dev_free(scratch);
    float *dwte_wantf = test_to_float(dwte_want, (size_t)Vp * C), *dwpe_wantf = test_to_float(dwpe_want, (size_t)maxT * C);
    CHECK_CLOSE(dwte, dwte_wantf, (size_t)Vp * C, 1e-6, "encoder_backward dwte +=");
    CHECK_CLOSE(dwpe, dwpe_wantf, (size_t)maxT * C, 1e-6, "encoder_backward dwpe +=");
    free(wte); free(wpe); free(out); free(want); free(dout); free(dwte); free(dwpe);
    free(dwte_want); free(dwpe_want); free(dwte_wantf); free(dwpe_wantf);
}

// ----------------------------------------------------------------------------------------
// layernorm

typedef struct {
    double *inp, *weight, *bias, *dout;
    int N, C;
} LayernormCase;

// out (N,C) of the reference; also mean and rstd when not NULL; returns sum(out * dout)
static double layernorm_reference(const LayernormCase *lc, double *out, double *mean, double *rstd) {
    int N = lc->N, C = lc->C;
    double objective = 0.0;
    for (int i = 0; i < N; i++) {
        const double *x = lc->inp + (size_t)i * C;
        double m = 0.0, var = 0.0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        var /= C;
        double s = 1.0 / sqrt(var + 1e-5);
        for (int c = 0; c < C; c++) {
            double o = (x[c] - m) * s * lc->weight[c] + lc->bias[c];
            if (out) out[(size_t)i * C + c] = o;
            objective += o * lc->dout[(size_t)i * C + c];
        }
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = s;
    }
    return objective;
}
static double layernorm_objective(const void *ctx) {
    return layernorm_reference(ctx, NULL, NULL, NULL);
}

// want (width) = start + colsum(m (N, width)), in double
static float *column_sums_want(const float *start, const float *m, int N, int width) {
    float *want = malloc(width * sizeof(float));
    for (int c = 0; c < width; c++) {
        double sum = start[c];
        for (int i = 0; i < N; i++) sum += m[(size_t)i * width + c];
        want[c] = (float)sum;
    }
    return want;
}

static void test_layernorm(int N, int C) {
    size_t NC = (size_t)N * C;
    float *inp = random_array(NC, 2.0f), *weight = random_array(C, 1.0f);
    float *bias = random_array(C, 1.0f), *dout = random_array(NC, 1.0f);
    for (size_t i = 0; i < NC; i++) inp[i] += 0.5f;   // a mean far from zero
    LayernormCase lc = {test_to_double(inp, NC), test_to_double(weight, C), test_to_double(bias, C),
                        test_to_double(dout, NC), N, C};

    float *out = poisoned_array(NC), *mean = poisoned_array(N), *rstd = poisoned_array(N);
    layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
    double *out_ref = malloc(NC * sizeof(double)), *mean_ref = malloc(N * sizeof(double));
    double *rstd_ref = malloc(N * sizeof(double));
    layernorm_reference(&lc, out_ref, mean_ref, rstd_ref);
    float *out_reff = test_to_float(out_ref, NC), *mean_reff = test_to_float(mean_ref, N);
    float *rstd_reff = test_to_float(rstd_ref, N);
    CHECK_CLOSE(out, out_reff, NC, FWD_TOL, "layernorm_forward out N=%d C=%d", N, C);
    CHECK_CLOSE(mean, mean_reff, N, FWD_TOL, "layernorm_forward mean N=%d C=%d", N, C);
    CHECK_CLOSE(rstd, rstd_reff, N, FWD_TOL, "layernorm_forward rstd N=%d C=%d", N, C);

    float *dinp_want = numeric_grad(lc.inp, NC, layernorm_objective, &lc);
    float *dweight_want = numeric_grad(lc.weight, C, layernorm_objective, &lc);
    float *dbias_want = numeric_grad(lc.bias, C, layernorm_objective, &lc);
    float *dinp_before = random_array(NC, 1.0f);
    float *dinp = malloc(NC * sizeof(float));
    memcpy(dinp, dinp_before, NC * sizeof(float));
    float *dweight = zero_array(C), *dbias = zero_array(C);
    void *scratch = dev_malloc(layernorm_backward_scratch_size(N, C), "layernorm_backward scratch");
    layernorm_backward(dinp, dweight, dbias, NULL, scratch, dout, inp, weight, mean, rstd, N, C);
    float *dinp_added = difference(dinp, dinp_before, NC);
    CHECK_CLOSE(dinp_added, dinp_want, NC, BWD_TOL, "layernorm_backward dinp += N=%d C=%d", N, C);
    CHECK_CLOSE(dweight, dweight_want, C, BWD_TOL, "layernorm_backward dweight N=%d C=%d", N, C);
    CHECK_CLOSE(dbias, dbias_want, C, BWD_TOL, "layernorm_backward dbias N=%d C=%d", N, C);
    // a second call adds the same again
    float *dweight_twice = scaled(dweight, C, 2.0f), *dbias_twice = scaled(dbias, C, 2.0f);
    // the second with dproj_bias: += the column sums of dinp as it leaves
    float *dproj_before = random_array(C, 1.0f), *dproj = malloc(C * sizeof(float));
    memcpy(dproj, dproj_before, C * sizeof(float));
    layernorm_backward(dinp, dweight, dbias, dproj, scratch, dout, inp, weight, mean, rstd, N, C);
    dev_free(scratch);
    float *dproj_want = column_sums_want(dproj_before, dinp, N, C);
    CHECK_CLOSE(dproj, dproj_want, C, BWD_TOL, "layernorm_backward dproj_bias N=%d C=%d", N, C);
    free(dproj_before); free(dproj); free(dproj_want);
    CHECK_CLOSE(dweight, dweight_twice, C, BWD_TOL, "layernorm_backward dweight accumulates");
    CHECK_CLOSE(dbias, dbias_twice, C, BWD_TOL, "layernorm_backward dbias accumulates");
    float *dinp_added_twice = difference(dinp, dinp_before, NC);
    float *dinp_want_twice = scaled(dinp_want, NC, 2.0f);
    CHECK_CLOSE(dinp_added_twice, dinp_want_twice, NC, BWD_TOL, "layernorm_backward dinp accumulates");

    free(inp); free(weight); free(bias); free(dout);
    free(lc.inp); free(lc.weight); free(lc.bias); free(lc.dout);
    free(out); free(mean); free(rstd); free(out_ref); free(mean_ref); free(rstd_ref);
    free(out_reff); free(mean_reff); free(rstd_reff);
    free(dinp_want); free(dweight_want); free(dbias_want); free(dinp_before); free(dinp);
    free(dweight); free(dbias); free(dinp_added); free(dweight_twice); free(dbias_twice);
    free(dinp_added_twice); free(dinp_want_twice);
}

// ----------------------------------------------------------------------------------------
// matmul

typedef struct {
    double *inp, *weight, *bias, *dout;   // bias may be NULL
    int N, C, OC;
} MatmulCase;

// out (N,OC) of the reference when not NULL; returns sum(out * dout)
static double matmul_reference(const MatmulCase *mc, double *out) {
    double objective = 0.0;
    for (int i = 0; i < mc->N; i++) {
        for (int o = 0; o < mc->OC; o++) {
            double sum = mc->bias ? mc->bias[o] : 0.0;
            for (int c = 0; c < mc->C; c++) {
                sum += mc->inp[(size_t)i * mc->C + c] * mc->weight[(size_t)o * mc->C + c];
            }
            if (out) out[(size_t)i * mc->OC + o] = sum;
            objective += sum * mc->dout[(size_t)i * mc->OC + o];
        }
    }
    return objective;
}
static double matmul_objective(const void *ctx) { return matmul_reference(ctx, NULL); }

// Gradients by finite differences on small shapes, by their closed forms in double on
// larger ones (finite differences would cost O((N*C*OC)^2) there).
static void test_matmul(int N, int C, int OC, int with_bias) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    float *inp = random_array(NC, 1.0f), *weight = random_array(OCC, 1.0f);
    float *bias = with_bias ? random_array(OC, 1.0f) : NULL, *dout = random_array(NOC, 1.0f);
    MatmulCase mc = {test_to_double(inp, NC), test_to_double(weight, OCC),
                     with_bias ? test_to_double(bias, OC) : NULL, test_to_double(dout, NOC), N, C, OC};

    float *out = poisoned_array(NOC);
    matmul_forward(out, inp, weight, bias, N, C, OC);
    double *out_ref = malloc(NOC * sizeof(double));
    matmul_reference(&mc, out_ref);
    float *out_reff = test_to_float(out_ref, NOC);
    CHECK_CLOSE(out, out_reff, NOC, FWD_TOL, "matmul_forward N=%d C=%d OC=%d bias=%d",
                N, C, OC, with_bias);

    float *dinp_want, *dweight_want, *dbias_want = NULL;
    int small = NC * OC <= 4096;
    if (small) {
        dinp_want = numeric_grad(mc.inp, NC, matmul_objective, &mc);
        dweight_want = numeric_grad(mc.weight, OCC, matmul_objective, &mc);
        if (with_bias) dbias_want = numeric_grad(mc.bias, OC, matmul_objective, &mc);
    } else {
        double *dinp_ref = calloc(NC, sizeof(double)), *dweight_ref = calloc(OCC, sizeof(double));
        double *dbias_ref = calloc(OC, sizeof(double));
        for (int i = 0; i < N; i++) {
            for (int o = 0; o < OC; o++) {
                double d = mc.dout[(size_t)i * OC + o];
                for (int c = 0; c < C; c++) {
                    dinp_ref[(size_t)i * C + c] += d * mc.weight[(size_t)o * C + c];
                    dweight_ref[(size_t)o * C + c] += d * mc.inp[(size_t)i * C + c];
                }
                dbias_ref[o] += d;
            }
        }
        dinp_want = test_to_float(dinp_ref, NC);
        dweight_want = test_to_float(dweight_ref, OCC);
        if (with_bias) dbias_want = test_to_float(dbias_ref, OC);
        free(dinp_ref); free(dweight_ref); free(dbias_ref);
    }

    float *dinp = poisoned_array(NC), *dweight = zero_array(OCC);
    float *dbias = with_bias ? zero_array(OC) : NULL;
    void *scratch = dev_malloc(matmul_backward_scratch_size(N, OC), "matmul_backward scratch");
    matmul_backward(dinp, dweight, dbias, scratch, dout, inp, weight, N, C, OC);
    CHECK_CLOSE(dinp, dinp_want, NC, BWD_TOL, "matmul_backward dinp N=%d C=%d OC=%d", N, C, OC);
    CHECK_CLOSE(dweight, dweight_want, OCC, BWD_TOL, "matmul_backward dweight N=%d C=%d OC=%d",
                N, C, OC);
    if (with_bias) {
        CHECK_CLOSE(dbias, dbias_want, OC, BWD_TOL, "matmul_backward dbias N=%d C=%d OC=%d",
                    N, C, OC);
    }
    // second call: parameter gradients double, dinp is overwritten with the same values
    float *dinp_once = malloc(NC * sizeof(float));
    memcpy(dinp_once, dinp, NC * sizeof(float));
    float *dweight_twice = scaled(dweight, OCC, 2.0f);
    float *dbias_twice = with_bias ? scaled(dbias, OC, 2.0f) : NULL;
    for (size_t i = 0; i < NC; i++) dinp[i] = NAN;
    matmul_backward(dinp, dweight, dbias, scratch, dout, inp, weight, N, C, OC);
    CHECK_CLOSE(dinp, dinp_once, NC, 0.0, "matmul_backward dinp is overwritten, not accumulated");
    CHECK_CLOSE(dweight, dweight_twice, OCC, BWD_TOL, "matmul_backward dweight accumulates");
    if (with_bias) CHECK_CLOSE(dbias, dbias_twice, OC, BWD_TOL, "matmul_backward dbias accumulates");

    // dinp NULL and dbias NULL are skipped; dweight is still right
    memset(dweight, 0, OCC * sizeof(float));
    matmul_backward(NULL, dweight, NULL, scratch, dout, inp, weight, N, C, OC);
    dev_free(scratch);
    CHECK_CLOSE(dweight, dweight_want, OCC, BWD_TOL, "matmul_backward with dinp, dbias NULL");

    free(inp); free(weight); free(bias); free(dout);
    free(mc.inp); free(mc.weight); free(mc.bias); free(mc.dout);
    free(out); free(out_ref); free(out_reff); free(dinp_want); free(dweight_want); free(dbias_want);
    free(dinp); free(dweight); free(dbias); free(dinp_once); free(dweight_twice); free(dbias_twice);
}

// ----------------------------------------------------------------------------------------
// gelu and residual

typedef struct {
    double *inp, *dout;
    size_t n;
} GeluCase;

static double gelu_reference(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double gelu_objective(const void *ctx) {
    const GeluCase *gc = ctx;
    double sum = 0.0;
    for (size_t i = 0; i < gc->n; i++) sum += gelu_reference(gc->inp[i]) * gc->dout[i];
    return sum;
}

static void test_gelu(int N, int OC) {
    const size_t n = (size_t)N * OC;
    float *inp = random_array(n, 5.0f), *dout = random_array(n, 1.0f);
    // inputs moved off the zero of GELU's derivative (x = -0.7518): there the gradient is near 0,
    // and the relative error of one element (N = OC = 1) measured the finite differences' own
    // error against it (1.1e-5 > BWD_TOL for one seed in CI), not the backward
    for (size_t i = 0; i < n; i++)
        if (fabsf(inp[i] + 0.7518f) < 0.05f) inp[i] += 0.1f;
    GeluCase gc = {test_to_double(inp, n), test_to_double(dout, n), n};
    float *out = poisoned_array(n), *want = malloc(n * sizeof(float));
    gelu_forward(out, inp, n);
    for (size_t i = 0; i < n; i++) want[i] = (float)gelu_reference(inp[i]);
    CHECK_CLOSE(out, want, n, FWD_TOL, "gelu_forward n=%zu", n);

    float *dinp_want = numeric_grad(gc.inp, n, gelu_objective, &gc);
    float *dinp = poisoned_array(n);
    gelu_backward(dinp, NULL, NULL, inp, dout, N, OC);
    CHECK_CLOSE(dinp, dinp_want, n, BWD_TOL, "gelu_backward N=%d OC=%d", N, OC);
    // in place: dinp and dout the same array; with the bias gradient, added to what was there
    float *inplace = malloc(n * sizeof(float));
    memcpy(inplace, dout, n * sizeof(float));
    float *dbias_before = random_array(OC, 1.0f), *dbias = malloc(OC * sizeof(float));
    memcpy(dbias, dbias_before, OC * sizeof(float));
    void *scratch = dev_malloc(matmul_backward_scratch_size(N, OC), "gelu_backward scratch");
    gelu_backward(inplace, dbias, scratch, inp, inplace, N, OC);
    dev_free(scratch);
    CHECK_CLOSE(inplace, dinp, n, 0.0, "gelu_backward with dinp aliasing dout");
    float *dbias_want = column_sums_want(dbias_before, dinp, N, OC);
    CHECK_CLOSE(dbias, dbias_want, OC, BWD_TOL, "gelu_backward dbias += colsum(dinp) N=%d OC=%d",
                N, OC);
    free(inp); free(dout); free(gc.inp); free(gc.dout); free(out); free(want);
    free(dinp_want); free(dinp); free(inplace); free(dbias_before); free(dbias); free(dbias_want);
}

static void test_residual(size_t n) {
    float *a = random_array(n, 1.0f), *b = random_array(n, 1.0f);
    float *out = poisoned_array(n), *want = malloc(n * sizeof(float));
    residual_forward(out, a, b, n);
    for (size_t i = 0; i < n; i++) want[i] = a[i] + b[i];
    CHECK_CLOSE(out, want, n, 0.0, "residual_forward n=%zu", n);
    free(a); free(b); free(out); free(want);
}

// ----------------------------------------------------------------------------------------
// crossentropy

typedef struct {
    double *logits;   // (N,V): only the real columns
    const int *targets;
    int N, V;
    double dloss;
} CrossentropyCase;

// losses (N) when not NULL; returns dloss * sum(losses)
static double crossentropy_reference(const CrossentropyCase *cc, double *losses) {
    double total = 0.0;
    for (int i = 0; i < cc->N; i++) {
        const double *row = cc->logits + (size_t)i * cc->V;
        double maxval = row[0], sum = 0.0;
        for (int j = 1; j < cc->V; j++) maxval = row[j] > maxval ? row[j] : maxval;
        for (int j = 0; j < cc->V; j++) sum += exp(row[j] - maxval);
        double loss = log(sum) + maxval - row[cc->targets[i]];
        if (losses) losses[i] = loss;
        total += loss;
    }
    return cc->dloss * total;
}
static double crossentropy_objective(const void *ctx) { return crossentropy_reference(ctx, NULL); }

// padding columns hold large values, which must change nothing
static void fill_logits(float *logits, int N, int V, int Vp, float scale) {
    test_fill(logits, (size_t)N * Vp, scale, &rng);
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 1e4f;
}

static void test_crossentropy(int N, int V, int Vp, float dloss) {
    size_t NVp = (size_t)N * Vp, NV = (size_t)N * V;
    float *logits = malloc(NVp * sizeof(float));
    fill_logits(logits, N, V, Vp, 4.0f);
    int *targets = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) targets[i] = (int)((test_randf(&rng) + 1.0f) * 0.5f * V) % V;
    targets[0] = V - 1;   // the last real column
    CrossentropyCase cc = {malloc(NV * sizeof(double)), targets, N, V, dloss};
    for (int i = 0; i < N; i++)
        for (int j = 0; j < V; j++) cc.logits[(size_t)i * V + j] = logits[(size_t)i * Vp + j];
    double *losses_ref = malloc(N * sizeof(double));
    crossentropy_reference(&cc, losses_ref);
    float *losses_want = test_to_float(losses_ref, N);

    // dloss == 0: losses only, logits untouched
    float *logits_before = malloc(NVp * sizeof(float));
    memcpy(logits_before, logits, NVp * sizeof(float));
    float *losses = poisoned_array(N);
    crossentropy_forward_backward(logits, losses, targets, N, V, Vp, 0.0f);
    CHECK_CLOSE(losses, losses_want, N, FWD_TOL, "crossentropy losses, dloss=0, N=%d V=%d Vp=%d",
                N, V, Vp);
    CHECK(memcmp(logits, logits_before, NVp * sizeof(float)) == 0,
          "crossentropy with dloss=0 leaves logits unchanged");

    // dloss != 0: the same losses, and logits replaced by dloss * (softmax - onehot)
    for (int i = 0; i < N; i++) losses[i] = NAN;
    crossentropy_forward_backward(logits, losses, targets, N, V, Vp, dloss);
    CHECK_CLOSE(losses, losses_want, N, FWD_TOL, "crossentropy losses, dloss=%g", (double)dloss);
    float *dlogits = malloc(NV * sizeof(float));
    int padding_zero = 1;
    double worst_row_sum = 0.0;
    for (int i = 0; i < N; i++) {
        double row_sum = 0.0;
        for (int j = 0; j < V; j++) {
            dlogits[(size_t)i * V + j] = logits[(size_t)i * Vp + j];
            row_sum += logits[(size_t)i * Vp + j];
        }
        for (int j = V; j < Vp; j++) padding_zero &= logits[(size_t)i * Vp + j] == 0.0f;
        worst_row_sum = fmax(worst_row_sum, fabs(row_sum));
    }
    float *dlogits_want;
    if (NV <= 4096) {
        dlogits_want = numeric_grad(cc.logits, NV, crossentropy_objective, &cc);
    } else {   // closed form in double: dloss * (softmax - onehot)
        dlogits_want = malloc(NV * sizeof(float));
        for (int i = 0; i < N; i++) {
            const double *row = cc.logits + (size_t)i * V;
            for (int j = 0; j < V; j++) {
                double p = exp(row[j] - row[targets[i]] - losses_ref[i]);
                dlogits_want[(size_t)i * V + j] = (float)(dloss * (p - (j == targets[i])));
            }
        }
    }
    CHECK_CLOSE(dlogits, dlogits_want, NV, BWD_TOL, "crossentropy dlogits N=%d V=%d Vp=%d",
                N, V, Vp);
    CHECK(padding_zero, "crossentropy gradient is exactly 0 in the padding columns");
    // softmax sums to 1 and onehot to 1, so each gradient row sums to 0 (fp32: within 1e-6)
    CHECK(worst_row_sum <= 1e-6 * fabs(dloss), "crossentropy gradient rows sum to 0: worst %.3e",
          worst_row_sum);

    free(logits); free(targets); free(cc.logits); free(losses_ref); free(losses_want);
    free(logits_before); free(losses); free(dlogits); free(dlogits_want);
}

static void crossentropy_bad_target(void *unused) {
    float logits[2 * 8] = {0};
    float losses[2];
    int targets[2] = {0, 5};   // 5 >= V
    crossentropy_forward_backward(logits, losses, targets, 2, 5, 8, 1.0f);
}

// ----------------------------------------------------------------------------------------
// optimizer

static void test_adamw(size_t n, int use_master) {
    const float lr = 0.01f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, grad_scale = 0.7f;
    // a gradient of norm 1 clipped to 0.7: scaled by 0.7
    const float grad_sumsq = 1.0f, max_grad_norm = 0.7f;
    float *params = random_array(n, 1.0f), *m = zero_array(n), *v = zero_array(n);
    float *master = NULL;
    double *p_ref = test_to_double(params, n), *m_ref = calloc(n, sizeof(double));
    double *v_ref = calloc(n, sizeof(double));
    if (use_master) {
        master = malloc(n * sizeof(float));
        memcpy(master, params, n * sizeof(float));
    }
    for (int t = 1; t <= 3; t++) {
        float *grads = random_array(n, 1.0f);
        float *params_before = malloc(n * sizeof(float));
        memcpy(params_before, use_master ? master : params, n * sizeof(float));
        if (use_master) {   // params must be refreshed from master, whatever they held
            for (size_t i = 0; i < n; i++) params[i] = NAN;
        }
        adamw_update(params, master, grads, m, v, n, lr, beta1, beta2, eps, wd, &grad_sumsq,
                     max_grad_norm, t);
        // by hand, in double
        double *step_ref = malloc(n * sizeof(double));
        for (size_t i = 0; i < n; i++) {
            double g = (double)grads[i] * grad_scale;
            m_ref[i] = beta1 * m_ref[i] + (1.0 - beta1) * g;
            v_ref[i] = beta2 * v_ref[i] + (1.0 - beta2) * g * g;
            double m_hat = m_ref[i] / (1.0 - pow(beta1, t));
            double v_hat = v_ref[i] / (1.0 - pow(beta2, t));
            step_ref[i] = -lr * (m_hat / (sqrt(v_hat) + eps) + wd * p_ref[i]);
            p_ref[i] += step_ref[i];
        }
        float *step = difference(use_master ? master : params, params_before, n);
        float *step_reff = test_to_float(step_ref, n), *p_reff = test_to_float(p_ref, n);
        float *m_reff = test_to_float(m_ref, n), *v_reff = test_to_float(v_ref, n);
        CHECK_CLOSE(step, step_reff, n, 1e-4, "adamw step t=%d master=%d", t, use_master);
        CHECK_CLOSE(params, p_reff, n, 1e-6, "adamw params t=%d master=%d", t, use_master);
        CHECK_CLOSE(m, m_reff, n, 1e-6, "adamw m t=%d", t);
        CHECK_CLOSE(v, v_reff, n, 1e-6, "adamw v t=%d", t);
        if (use_master) {
            CHECK(memcmp(params, master, n * sizeof(float)) == 0, "adamw params = master");
        }
        free(grads); free(params_before); free(step_ref); free(step); free(step_reff);
        free(p_reff); free(m_reff); free(v_reff);
    }
    free(params); free(m); free(v); free(master); free(p_ref); free(m_ref); free(v_ref);
}

// a gradient whose norm is not finite updates nothing (the caller reports the norm)
static void test_adamw_not_finite(void) {
    enum { n = 33 };
    float *params = random_array(n, 1.0f), *grads = random_array(n, 1.0f);
    float *m = random_array(n, 0.1f), *v = zero_array(n);
    float *p0 = malloc(n * sizeof(float)), *m0 = malloc(n * sizeof(float));
    memcpy(p0, params, n * sizeof(float));
    memcpy(m0, m, n * sizeof(float));
    const float sums[2] = {INFINITY, NAN};
    for (int k = 0; k < 2; k++) {
        adamw_update(params, NULL, grads, m, v, n, 0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, &sums[k], 1.0f, 1);
        CHECK(memcmp(params, p0, n * sizeof(float)) == 0 && memcmp(m, m0, n * sizeof(float)) == 0,
              "adamw with a %s gradient norm leaves parameters and moments as they were",
              k ? "NaN" : "infinite");
    }
    free(params); free(grads); free(m); free(v); free(p0); free(m0);
}

// the mean of the losses in double, then added to a running sum
static void test_loss_mean(int N) {
    float *losses = random_array(N, 5.0f);
    double want = 0.0;
    for (int i = 0; i < N; i++) want += losses[i];
    float mean = -1.0f, sum = 2.0f;
    crossentropy_loss_mean(&mean, &sum, losses, N);
    CHECK(mean == (float)(want / N), "loss mean N=%d: %.9g, want %.9g", N, mean, want / N);
    CHECK(sum == 2.0f + mean, "loss sum N=%d: %.9g, want %.9g", N, sum, 2.0f + mean);
    crossentropy_loss_mean(&mean, NULL, losses, N);
    CHECK(mean == (float)(want / N), "loss mean without a sum N=%d", N);
    free(losses);
}

// the residual add fused into layernorm forward: the very bits of residual_forward then
// layernorm_forward (recomputation in backward relies on it), also with residual over a
static void test_layernorm_residual(int N, int C) {
    size_t NC = (size_t)N * C;
    float *a = random_array(NC, 2.0f), *b = random_array(NC, 1.0f);
    float *weight = random_array(C, 1.0f), *bias = random_array(C, 1.0f);
    float *res_want = malloc(NC * sizeof(float)), *out_want = malloc(NC * sizeof(float));
    float *mean_want = malloc(N * sizeof(float)), *rstd_want = malloc(N * sizeof(float));
    residual_forward(res_want, a, b, NC);
    layernorm_forward(out_want, mean_want, rstd_want, res_want, weight, bias, N, C);
    float *res = poisoned_array(NC), *out = poisoned_array(NC);
    float *mean = poisoned_array(N), *rstd = poisoned_array(N);
    layernorm_residual_forward(res, out, mean, rstd, a, b, weight, bias, N, C);
    CHECK(memcmp(res, res_want, NC * sizeof(float)) == 0 && memcmp(out, out_want, NC * sizeof(float)) == 0 &&
          memcmp(mean, mean_want, N * sizeof(float)) == 0 && memcmp(rstd, rstd_want, N * sizeof(float)) == 0,
          "layernorm_residual_forward N=%d C=%d: the bits of residual_forward then layernorm_forward", N, C);
    layernorm_residual_forward(a, out, mean, rstd, a, b, weight, bias, N, C);   // residual over a
    CHECK(memcmp(a, res_want, NC * sizeof(float)) == 0 && memcmp(out, out_want, NC * sizeof(float)) == 0,
          "layernorm_residual_forward N=%d C=%d with residual over a", N, C);
    free(a); free(b); free(weight); free(bias); free(res_want); free(out_want); free(mean_want);
    free(rstd_want); free(res); free(out); free(mean); free(rstd);
}

static void test_grad_sumsq(size_t n) {
    float *grads = random_array(n, 3.0f);
    double want = 1.5;
    for (size_t i = 0; i < n; i++) want += (double)grads[i] * grads[i];
    float out = 1.5f;   // grad_sumsq adds to what is there
    grad_sumsq(&out, grads, n);
    CHECK(fabs(dev_read_float(&out) - want) <= 1e-6 * want, "grad_sumsq n=%zu: %.8g, want %.8g",
          n, (double)out, want);
    free(grads);
}

int main(void) {
    rng = test_seed();
    test_device();
    test_encoder();

    test_layernorm(1, 8);
    test_layernorm(5, 24);
    test_layernorm(7, 13);
    test_layernorm(3, 77);   // more than one 64-channel chunk in dweight's loop
    test_layernorm_residual(5, 24);
    test_layernorm_residual(3, 77);

    // fewer rows than one 6-row tile: forward takes its dot-product path
    test_matmul(1, 1, 1, 1);
    test_matmul(5, 13, 7, 1);
    test_matmul(3, 77, 19, 1);    // 16-lane partial sums and a 13-element remainder
    // the blocked path (tiles of 6 rows x 16 or 32 columns, depth blocks of 256)
    test_matmul(7, 9, 33, 0);     // one full 32-column block and a 1-column remainder
    test_matmul(67, 259, 37, 1);  // two row blocks, two depth blocks in forward
    test_matmul(300, 45, 70, 1);  // five row blocks, two depth blocks in dweight

    test_gelu(1, 1);
    test_gelu(7, 143);
    test_residual(1);
    test_residual(1001);

    test_crossentropy(6, 11, 16, 0.37f);
    test_crossentropy(5, 17, 17, 1.0f);      // no padding
    test_crossentropy(3, 50257, 50304, 1.0f / 3.0f);   // GPT-2's vocabulary
    CHECK(test_exit_status(crossentropy_bad_target, NULL) == 1, "crossentropy exits(1) on a bad target");

    test_adamw(37, 0);
    test_adamw(1001, 1);
    test_adamw_not_finite();
    test_loss_mean(1);
    test_loss_mean(1000);
    test_grad_sumsq(1);
    test_grad_sumsq(100003);
    return test_summary();
}
