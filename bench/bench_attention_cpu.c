// bench_attention_cpu.c: the two CPU attention backends alone, naive against flash, forward
// and forward+backward, at GPT-2 small's head shape (B=1, NH=12, HS=64) and T = 256, 512, ...
// doubling up to --tmax. Both backends are linked at once, each compiled with its symbols
// prefixed naive_ / flash_ (as for tests/test_attention). Prints a markdown table; --csv
// also writes the rows in the columns of bench/attention.cu's CSV (scripts/compare.sh).
//
// FLOPs, causal convention: forward 4*B*NH*T^2*HS halved = 2*B*NH*T^2*HS (QK^T and PV, each
// 2*T^2*HS per head, half of them masked); forward+backward 3.5x forward. Times: median of
// --repeats runs after one warm-up run.
//
// usage: bench_attention_cpu [--repeats N (5)] [--tmax T (2048)] [--csv FILE]
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../layers/layers.h"
#include "../attention/both_backends.h"
#include "../utils.h"


#define MAX_REPEATS 100

// one timed configuration: a backend and the buffers it reads and writes
typedef struct {
    const AttentionBackend *backend;
    floatX *out, *dqkv;
    const floatX *qkv, *dout;
    void *saved, *scratch;
    int B, T, NH, HS;
} Run;

static void *malloc_or_die(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die("out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// median wall time in ms of `repeats` runs after one warm-up, forward alone or with backward
static double median_ms(const Run *r, int with_backward, int repeats) {
    double ms[MAX_REPEATS];
    for (int i = -1; i < repeats; i++) {
        double start = wall_seconds();
        r->backend->forward(r->out, r->saved, r->scratch, r->qkv, r->B, r->T, r->NH, r->HS);
        if (with_backward)
            r->backend->backward(r->dqkv, r->scratch, r->dout, r->qkv, r->out, r->saved,
                                 r->B, r->T, r->NH, r->HS);
        double elapsed = wall_seconds() - start;
        if (i >= 0) ms[i] = 1e3 * elapsed;
    }
    qsort(ms, repeats, sizeof(double), compare_doubles);
    return repeats % 2 ? ms[repeats / 2] : 0.5 * (ms[repeats / 2 - 1] + ms[repeats / 2]);
}

// "model name" from /proc/cpuinfo, or "unknown CPU"
static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *value = strchr(line, ':');
        if (!value) continue;
        value += strspn(value, ": \t");
        value[strcspn(value, "\n")] = '\0';
        snprintf(buf, n, "%s", value);
        break;
    }
    fclose(f);
}

int main(int argc, char **argv) {
    int repeats = 5, max_T = 2048;
    const char *csv_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--repeats") == 0)
            repeats = (int)parse_long("--repeats", argv[++i], 1, MAX_REPEATS);
        else if (i + 1 < argc && strcmp(argv[i], "--tmax") == 0)
            max_T = (int)parse_long("--tmax", argv[++i], 256, 1 << 20);
        else if (i + 1 < argc && strcmp(argv[i], "--csv") == 0)
            csv_path = argv[++i];
        else
            die("usage: %s [--repeats N (5)] [--tmax T (2048)] [--csv FILE]", argv[0]);
    }
    const int B = 1, NH = 12, HS = 64, C = NH * HS;

    char model[256], date[32];
    cpu_model(model, sizeof model);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", localtime(&now));
    printf("machine: %ld CPUs (nproc), %s, %d OpenMP threads; %s\n",
           sysconf(_SC_NPROCESSORS_ONLN), model, omp_get_max_threads(), date);
    printf("CPU attention, fp32, causal, B=%d NH=%d HS=%d, median of %d runs after 1 warm-up; "
           "FLOPs: forward 2*B*NH*T^2*HS, forward+backward 3.5x that\n\n", B, NH, HS, repeats);
    printf("| T | backend | forward ms | forward GFLOP/s | fwd+bwd ms | fwd+bwd GFLOP/s "
           "| fwd+bwd speedup vs naive | kept: saved + scratch |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    FILE *csv = NULL;
    if (csv_path) {
        csv = fopen_or_die(csv_path, "w");
        fprintf(csv, "T,B,NH,HS,backend,status,fwd_ms,fwd_tflops,fwdbwd_ms,fwdbwd_tflops,"
                     "counted_bytes,measured_bytes\n");
    }

    // inputs and outputs sized for the longest T, shared by every run
    const size_t max_qkv = (size_t)B * max_T * 3 * C, max_out = (size_t)B * max_T * C;
    floatX *qkv = malloc_or_die(max_qkv * sizeof(floatX), "qkv");
    floatX *dqkv = malloc_or_die(max_qkv * sizeof(floatX), "dqkv");
    floatX *out = malloc_or_die(max_out * sizeof(floatX), "out");
    floatX *dout = malloc_or_die(max_out * sizeof(floatX), "dout");
    unsigned long long state = 88172645463325252ULL;   // xorshift, any fixed seed will do
    for (size_t i = 0; i < max_qkv; i++) {
        state ^= state << 13; state ^= state >> 7; state ^= state << 17;
        qkv[i] = (float)((state >> 40) / 16777216.0) * 2.0f - 1.0f;
    }
    for (size_t i = 0; i < max_out; i++) dout[i] = qkv[i];

    for (int T = 256; T <= max_T; T *= 2) {
        const double forward_flops = 2.0 * B * NH * (double)T * T * HS;
        // counted in the CSV's counted_bytes with saved and scratch: qkv, dqkv, out, dout
        const size_t io_bytes = 2 * (size_t)B * T * 4 * C * sizeof(floatX);
        double naive_fwd_bwd_ms = 0.0;
        for (int k = 0; k < NUM_ATTENTION_BACKENDS; k++) {
            const AttentionBackend *be = &attention_backends[k];
            size_t saved_bytes = be->saved_size(B, T, NH, HS);
            size_t scratch_bytes = be->scratch_size(B, T, NH, HS);
            Run r = {be, out, dqkv, qkv, dout, malloc(saved_bytes), malloc(scratch_bytes),
                     B, T, NH, HS};
            if (!r.saved || !r.scratch) {   // naive's T^2 at long T: a row that says so
                printf("| %d | %s | out of memory | | | | | |\n", T, be->name);
                if (csv) fprintf(csv, "%d,%d,%d,%d,%s,oom,,,,,%zu,\n", T, B, NH, HS, be->name,
                                 io_bytes + saved_bytes + scratch_bytes);
                free(r.saved);
                free(r.scratch);
                continue;
            }
            double fwd_ms = median_ms(&r, 0, repeats);
            double fwd_bwd_ms = median_ms(&r, 1, repeats);
            if (k == NAIVE) naive_fwd_bwd_ms = fwd_bwd_ms;
            double fwd_gflops = forward_flops / (fwd_ms * 1e6);
            double fwd_bwd_gflops = 3.5 * forward_flops / (fwd_bwd_ms * 1e6);
            char saved_text[32], scratch_text[32], speedup[32] = "";
            format_bytes(saved_text, sizeof saved_text, (double)saved_bytes);
            format_bytes(scratch_text, sizeof scratch_text, (double)scratch_bytes);
            if (naive_fwd_bwd_ms > 0.0)
                snprintf(speedup, sizeof speedup, "%.2fx", naive_fwd_bwd_ms / fwd_bwd_ms);
            printf("| %d | %s | %.2f | %.1f | %.2f | %.1f | %s | %s + %s |\n", T, be->name,
                   fwd_ms, fwd_gflops, fwd_bwd_ms, fwd_bwd_gflops, speedup, saved_text,
                   scratch_text);
            fflush(stdout);
            if (csv)
                fprintf(csv, "%d,%d,%d,%d,%s,ok,%.3f,%.5f,%.3f,%.5f,%zu,\n", T, B, NH, HS,
                        be->name, fwd_ms, fwd_gflops / 1e3, fwd_bwd_ms, fwd_bwd_gflops / 1e3,
                        io_bytes + saved_bytes + scratch_bytes);
            free(r.saved);
            free(r.scratch);
        }
    }
    if (csv && fclose(csv) != 0) die("%s: write error", csv_path);
    free(qkv); free(dqkv); free(out); free(dout);
    return 0;
}
