// bench_layers_gpu.cu: time every CUDA layer at GPT-2 124M's shapes (T=1024, C=768, NH=12,
// Vp=50304, 12 layers) for each batch size asked (default 16 and 64), and add the layers up
// as one training step calls them, to show where a step's time goes.
//
// Each row: CUDA events around one call, median of 15 calls after 3 (bench_common.cuh); the
// bytes each call must move at least (memory-bound kernels, against the copy bandwidth) or the
// FLOPs it does (matmuls and attention, against the bf16 GEMM rate). Both ceilings are measured in the
// same run: a device-to-device copy of 2 GiB, and one 8192^3 bf16 GEMM through matmul_forward
// (published H200 figures: about 4.3 TB/s copy, about 790 TFLOP/s bf16 through cuBLAS).
// Attention FLOPs follow the stated convention: forward 4*B*NH*T^2*HS halved for causal,
// backward 2.5x forward. Inputs are random.
//
// Usage: bench_layers_gpu [B ...]      e.g. bench_layers_gpu 16 64
#include "../attention/attention.h"
#include "../runtime/cuda_common.cuh"
#include "bench_common.cuh"   // random_tensor, time_ms (median of 15 after 3)

#include <algorithm>
#include <cstring>
#include <vector>

static const int T = 1024, C = 768, NH = 12, HS = 64, L = 12, V = 50257, Vp = 50304;
static const size_t GPT2_PARAMS = 124475904;   // GPT-2 124M with Vp = 50304

static float *zero_floats(size_t n, const char *what) {
    float *x = (float *)dev_malloc(n * sizeof(float), what);
    dev_memset_zero(x, n * sizeof(float));
    return x;
}

typedef struct {
    const char *name;
    int per_step;   // calls in one training step (forward + backward + update)
    double ms;      // one call
    double bytes;   // at least moved by one call (0: compute-bound row)
    double flops;   // one call (0: memory-bound row)
} Row;

static double copy_gbs, gemm_tflops;   // the ceilings measured in this run

static void measure_ceilings(void) {
    const size_t bytes = (size_t)2 << 30;
    void *a = dev_malloc(bytes, "copy ceiling"), *b = dev_malloc(bytes, "copy ceiling");
    dev_memset_zero(a, bytes);
    const double copy_ms = time_ms([&] { dev_copy(b, a, bytes); });
    copy_gbs = 2.0 * bytes / (copy_ms * 1e-3) / 1e9;   // read + write
    dev_free(a);
    dev_free(b);

    const int n = 8192;
    floatX *x = random_tensor((size_t)n * n, 1.0f, "gemm ceiling");
    floatX *w = random_tensor((size_t)n * n, 1.0f, "gemm ceiling");
    floatX *y = (floatX *)dev_malloc((size_t)n * n * sizeof(floatX), "gemm ceiling");
    const double gemm_ms = time_ms([&] { matmul_forward(y, x, w, NULL, n, n, n); });
    gemm_tflops = 2.0 * n * n * (double)n / (gemm_ms * 1e-3) / 1e12;
    dev_free(x);
    dev_free(w);
    dev_free(y);
    printf("ceilings measured now: device copy %.0f GB/s (read + write), bf16 GEMM 8192^3 %.0f TFLOP/s\n\n",
           copy_gbs, gemm_tflops);
}

static void bench_batch(int B) {
    const int N = B * T;
    const size_t NC = (size_t)N * C;
    std::vector<Row> rows;
    auto add = [&](const char *name, int per_step, double bytes, double flops, double ms) {
        rows.push_back(Row{name, per_step, ms, bytes, flops});
    };

    // activations and their gradients
    floatX *x = random_tensor(NC, 1.0f, "x"), *y = random_tensor(NC, 1.0f, "y");
    floatX *dx = random_tensor(NC, 1.0f, "dx"), *dy = random_tensor(NC, 1.0f, "dy");
    floatX *qkv = random_tensor(NC * 3, 1.0f, "qkv"), *dqkv = random_tensor(NC * 3, 1.0f, "dqkv");
    floatX *h = random_tensor(NC * 4, 1.0f, "fc"), *hg = random_tensor(NC * 4, 1.0f, "fc gelu");
    floatX *dh = random_tensor(NC * 4, 1.0f, "dfc");
    floatX *logits = random_tensor((size_t)N * Vp, 1.0f, "logits");
    float *mean = zero_floats(N, "mean"), *rstd = zero_floats(N, "rstd"), *losses = zero_floats(N, "losses");
    // parameters and their gradients
    floatX *wte = random_tensor((size_t)Vp * C, 0.02f, "wte"), *wpe = random_tensor((size_t)T * C, 0.02f, "wpe");
    floatX *dwte = random_tensor((size_t)Vp * C, 0.02f, "dwte"), *dwpe = random_tensor((size_t)T * C, 0.02f, "dwpe");
    floatX *w = random_tensor((size_t)4 * C * C, 0.02f, "weight"), *dw = random_tensor((size_t)4 * C * C, 0.02f, "dweight");
    floatX *bias = random_tensor(4 * C, 0.02f, "bias"), *dbias = random_tensor(4 * C, 0.02f, "dbias");
    floatX *dproj_bias = random_tensor(C, 0.02f, "dproj_bias");
    floatX *lnw = random_tensor(C, 1.0f, "ln weight"), *lnb = random_tensor(C, 0.1f, "ln bias");

    std::vector<int> host_tokens(N);
    unsigned int state = 12345;
    for (int i = 0; i < N; i++) {
        state = state * 1664525u + 1013904223u;
        host_tokens[i] = (int)((state >> 8) % V);
    }
    int *tokens = (int *)dev_malloc(N * sizeof(int), "tokens");
    dev_upload(tokens, host_tokens.data(), N * sizeof(int));
    // the layers' scratch, one buffer for all as the model's arena gives them
    size_t scratch_bytes = encoder_backward_scratch_size(B, T);
    if (layernorm_backward_scratch_size(N, C) > scratch_bytes)
        scratch_bytes = layernorm_backward_scratch_size(N, C);
    for (int oc : {C, 3 * C, 4 * C})
        if (matmul_backward_scratch_size(N, oc) > scratch_bytes)
            scratch_bytes = matmul_backward_scratch_size(N, oc);
    void *layer_scratch = dev_malloc(scratch_bytes, "layer scratch");

    add("encoder_forward", 1, 2.0 * NC * 2 + 4.0 * N, 0,
        time_ms([&] { encoder_forward(x, tokens, wte, wpe, B, T, C); }));
    add("encoder_backward", 1, 3.0 * NC * 2 + 4.0 * N, 0,
        time_ms([&] { encoder_backward(dwte, dwpe, layer_scratch, dx, tokens, B, T, C); }));
    // a step's forward: layer 0's ln1 alone, every other layernorm with the residual add
    // before it (2 per layer: ln2, then the next ln1 or lnf)
    add("layernorm_forward", 1, 2.0 * NC * 2 + 8.0 * N, 0,
        time_ms([&] { layernorm_forward(y, mean, rstd, x, lnw, lnb, N, C); }));
    // (all but layer 0's ln1 also sum the projection's bias gradient, dproj_bias)
    add("layernorm_backward", 2 * L + 1, 4.0 * NC * 2 + 8.0 * N, 0,
        time_ms([&] {
            layernorm_backward(dx, dw, dbias, dproj_bias, layer_scratch, dy, x, lnw, mean, rstd,
                               N, C);
        }));
    add("layernorm_residual_forward", 2 * L, 4.0 * NC * 2 + 8.0 * N, 0,
        time_ms([&] { layernorm_residual_forward(dy, y, mean, rstd, x, dx, lnw, lnb, N, C); }));

    // bwd_bias: the backward sums the bias gradient itself (qkv); the others' come with the
    // GELU backward (fc) and the layernorm backwards (the projections), as in a step
    struct { const char *fwd, *bwd; int in, out; bool has_bias, bwd_bias; int per_step; floatX *inp, *outp; } mm[] = {
        {"matmul_forward qkv", "matmul_backward qkv", C, 3 * C, true, true, L, y, qkv},
        {"matmul_forward attn proj", "matmul_backward attn proj", C, C, true, false, L, y, x},
        {"matmul_forward fc", "matmul_backward fc", C, 4 * C, true, false, L, y, h},
        {"matmul_forward fc proj", "matmul_backward fc proj", 4 * C, C, true, false, L, hg, x},
        {"matmul_forward lm head", "matmul_backward lm head", C, Vp, false, false, 1, y, logits},
    };
    for (auto &m : mm) {
        const floatX *weight = m.out == Vp ? wte : w;
        floatX *dweight = m.out == Vp ? dwte : dw;
        const double flops = 2.0 * N * (double)m.in * m.out;
        add(m.fwd, m.per_step, 0, flops, time_ms([&] {
                matmul_forward(m.outp, m.inp, weight, m.has_bias ? bias : NULL, N, m.in, m.out);
            }));
        // the backward's dout: a tensor of the output's shape (logits for the lm head)
        floatX *dout = m.out == Vp ? logits : m.out == 4 * C ? dh : m.out == 3 * C ? dqkv : dy;
        floatX *dinp = m.in == 4 * C ? dh : dx;
        add(m.bwd, m.per_step, 0, 2 * flops, time_ms([&] {
                matmul_backward(dinp, dweight, m.bwd_bias ? dbias : NULL, layer_scratch, dout,
                                m.inp, weight, N, m.in, m.out);
            }));
    }

    add("gelu_forward", L, 2.0 * NC * 4 * 2, 0, time_ms([&] { gelu_forward(hg, h, NC * 4); }));
    add("gelu_backward (with fc's dbias)", L, 3.0 * NC * 4 * 2, 0, time_ms([&] {
            gelu_backward(dh, dbias, layer_scratch, h, dh, N, 4 * C);
        }));

    {
        void *saved = dev_malloc(attention_saved_size(B, T, NH, HS), "attention saved");
        void *scratch = dev_malloc(attention_scratch_size(B, T, NH, HS), "attention scratch");
        const double fwd_flops = 4.0 * B * NH * (double)T * T * HS / 2;
        floatX *att = x;
        add("attention_forward", L, 0, fwd_flops,
            time_ms([&] { attention_forward(att, saved, scratch, qkv, B, T, NH, HS); }));
        add("attention_backward", L, 0, 2.5 * fwd_flops, time_ms([&] {
                attention_backward(dqkv, scratch, dy, qkv, att, saved, B, T, NH, HS);
            }));
        dev_free(saved);
        dev_free(scratch);
    }

    {
        std::vector<int> host_targets(N);
        for (int i = 0; i < N; i++) host_targets[i] = host_tokens[(i + 1) % N];
        int *targets = (int *)dev_malloc(N * sizeof(int), "targets");
        dev_upload(targets, host_targets.data(), N * sizeof(int));
        // the in-place gradient replaces the logits; its timing does not depend on the values
        add("crossentropy_forward_backward", 1, 2.0 * N * (double)Vp * 2 + 8.0 * N, 0,
            time_ms([&] { crossentropy_forward_backward(logits, losses, targets, N, V, Vp, 1.0f / N); }));
        dev_free(targets);
    }

    {
        const size_t P = GPT2_PARAMS;
        floatX *params = random_tensor(P, 0.02f, "params"), *grads = random_tensor(P, 0.01f, "grads");
        float *master = zero_floats(P, "master"), *m = zero_floats(P, "adam m"), *v = zero_floats(P, "adam v");
        float *sumsq = zero_floats(1, "sumsq");
        add("grad_sumsq (124M)", 1, 2.0 * P, 0, time_ms([&] { grad_sumsq(sumsq, grads, P); }));
        int step = 0;
        add("adamw_update (124M, master)", 1, 26.0 * P, 0, time_ms([&] {
                adamw_update(params, master, grads, m, v, P, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, sumsq,
                             1.0f, ++step);
            }));
        dev_free(params); dev_free(grads); dev_free(master); dev_free(m); dev_free(v); dev_free(sumsq);
    }

    double step_ms = 0.0;
    for (const Row &r : rows) step_ms += r.per_step * r.ms;
    printf("### B=%d T=%d (N=%d tokens), GPT-2 124M shapes, attention '%s'\n\n", B, T, N, attention_name);
    printf("| op | calls/step | ms/call | ms/step | share | achieved | of ceiling |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (const Row &r : rows) {
        char achieved[64], ceiling[32];
        if (r.flops > 0) {
            const double tflops = r.flops / (r.ms * 1e-3) / 1e12;
            snprintf(achieved, sizeof(achieved), "%.0f TFLOP/s", tflops);
            snprintf(ceiling, sizeof(ceiling), "%.0f%%", 100.0 * tflops / gemm_tflops);
        } else {
            const double gbs = r.bytes / (r.ms * 1e-3) / 1e9;
            snprintf(achieved, sizeof(achieved), "%.0f GB/s", gbs);
            snprintf(ceiling, sizeof(ceiling), "%.0f%%", 100.0 * gbs / copy_gbs);
        }
        printf("| %s | %d | %.3f | %.2f | %.1f%% | %s | %s |\n", r.name, r.per_step, r.ms,
               r.per_step * r.ms, 100.0 * r.per_step * r.ms / step_ms, achieved, ceiling);
    }
    printf("\nsum of the layers for one step: %.1f ms, %.0f tokens/s (the step's own memsets, "
           "launch gaps and host work are not in it)\n\n", step_ms, N / (step_ms * 1e-3));

    dev_free(x); dev_free(y); dev_free(dx); dev_free(dy); dev_free(qkv); dev_free(dqkv);
    dev_free(h); dev_free(hg); dev_free(dh); dev_free(logits); dev_free(mean); dev_free(rstd);
    dev_free(losses); dev_free(wte); dev_free(wpe); dev_free(dwte); dev_free(dwpe); dev_free(w);
    dev_free(dw); dev_free(bias); dev_free(dbias); dev_free(dproj_bias); dev_free(lnw); dev_free(lnb); dev_free(tokens);
    dev_free(layer_scratch);
}

int main(int argc, char **argv) {
    if (backend_init() != 0) return 1;
    char desc[256];
    backend_describe(desc, sizeof(desc));
    printf("%s\n", desc);
    measure_ceilings();
    // --ceilings: the two ceilings alone (scripts/step_account.sh measures a step against them)
    if (argc == 2 && strcmp(argv[1], "--ceilings") == 0) return 0;
    if (argc == 1) {
        bench_batch(16);
        bench_batch(64);
    }
    for (int i = 1; i < argc; i++) bench_batch(atoi(argv[i]));
    return 0;
}
