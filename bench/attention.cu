// attention.cu: the attention microbenchmark. Times both CUDA backends, naive and flash (linked
// together with their symbols prefixed by their names, see prefix_symbols in the Makefile),
// forward and forward+backward, causal, bf16, at B*T tokens held constant (16,384 by default:
// T = 1,024 with B = 16 up to T = 65,536 with B = 1), NH = 12, HS = 64 (GPT-2 small).
//
// Reports per (T, backend): the median time over repeats after warm-up (CUDA events around
// each call on the project's stream), TFLOP/s by the causal convention of docs (forward
// 2*B*NH*T^2*HS, i.e. 4*B*NH*T^2*HS halved; forward+backward 3.5x that), and device memory:
//   counted   qkv + out + dout + dqkv + saved + scratch, the bytes the backend asks for
//   measured  the drop in free device memory (cudaMemGetInfo) from before the allocations to
//             after the timed runs, so anything a library allocates on the side shows up too
// Where a backend cannot allocate, its row says "out of memory (needs X GiB)" and the others
// still run. Markdown table on stdout; one CSV row per (T, backend) to --csv PATH.
//
// usage: attention [--csv PATH] [--tokens N] [--nh N] [--hs N] [--tmin N] [--tmax N]
//                  [--backend naive|flash] [--deterministic] [--receipt fwd|fwdbwd]
// --deterministic times each backend's bitwise-reproducible backward (attention.h); a backend
// that has none is refused.
//
// --receipt fwd|fwdbwd (with --backend and --tmin = --tmax; B = tokens / T): the one pass of
// scripts/receipt.sh, for Nsight Compute to measure. Warm-up passes first (one-time set-up:
// shared-memory limits, tensor maps, cuBLAS's workspace), then exactly one forward, or one
// forward and one backward, between cudaProfilerStart and cudaProfilerStop with the device
// synchronised on both sides, so that `ncu --profile-from-start off` sees that pass's kernels
// and no others; then the same pass timed (median of 21, CUDA events). Prints one line,
//   receipt: backend=B pass=P B= T= NH= HS= path= tiles= flops= counted_read= counted_write= event_ms=
// with the FLOPs and pencil-count bytes of bench/attention_counts.h for the kernels that ran
// (path: cublas for naive; sm90, sm90+mma (Hopper forward, mma.sync backward) or mma for flash).
#include <cuda_profiler_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../attention/both_backends.h"
#include "../runtime/cuda_common.cuh"
#include "attention_counts.h"


static const double GiB = 1024.0 * 1024.0 * 1024.0;

typedef struct {
    int T, B, ok;
    double fwd_ms, fwdbwd_ms, fwd_tflops, fwdbwd_tflops;
    size_t counted_bytes, measured_bytes;
} Result;

// uniform [-1, 1) bf16 from a hash of the index: inputs on the device without a host copy
__global__ void fill_random_kernel(bf16 *x, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 0x9E3779B1u ^ (uint32_t)(i >> 32) ^ seed;
        h ^= h >> 16;
        h *= 0x85EBCA6Bu;
        h ^= h >> 13;
        h *= 0xC2B2AE35u;
        h ^= h >> 16;
        x[i] = __float2bfloat16((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}
static void fill_random(floatX *x, size_t n, uint32_t seed) {
    fill_random_kernel<<<4 * cuda_num_sms, 256, 0, cuda_stream>>>(BF(x), n, seed);
    LAUNCH_CHECK();
}

static int compare_floats(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// cudaMalloc that reports failure instead of exiting (and clears the error it leaves)
static int try_alloc(void **p, size_t bytes) {
    *p = NULL;
    if (bytes == 0) return 1;
    if (cudaMalloc(p, bytes) == cudaSuccess) return 1;
    (void)cudaGetLastError();
    *p = NULL;
    return 0;
}

typedef struct {
    floatX *qkv, *out, *dout, *dqkv;
    void *saved, *scratch;
} Buffers;

static void free_buffers(Buffers *b) {
    void *ptrs[] = {b->qkv, b->out, b->dout, b->dqkv, b->saved, b->scratch};
    for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++)
        if (ptrs[i]) CUDA_CHECK(cudaFree(ptrs[i]));
    memset(b, 0, sizeof *b);
}

// median of `reps` timed calls of fwd (and bwd when with_backward), after `warmup` untimed ones
static double time_ms(const AttentionBackend *be, Buffers *buf, int B, int T, int NH, int HS,
                      int with_backward, int warmup, int reps) {
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    float *ms = (float *)malloc(reps * sizeof(float));
    for (int r = -warmup; r < reps; r++) {
        CUDA_CHECK(cudaEventRecord(start, cuda_stream));
        be->forward(buf->out, buf->saved, buf->scratch, buf->qkv, B, T, NH, HS);
        if (with_backward)
            be->backward(buf->dqkv, buf->scratch, buf->dout, buf->qkv, buf->out, buf->saved, B,
                         T, NH, HS);
        CUDA_CHECK(cudaEventRecord(stop, cuda_stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        if (r >= 0) CUDA_CHECK(cudaEventElapsedTime(&ms[r], start, stop));
    }
    qsort(ms, reps, sizeof(float), compare_floats);
    const double median = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    free(ms);
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return median;
}

static Result run_backend(const AttentionBackend *be, int B, int T, int NH, int HS) {
    Result res;
    memset(&res, 0, sizeof res);
    res.T = T;
    res.B = B;
    const size_t n_qkv = (size_t)B * T * 3 * NH * HS, n_out = (size_t)B * T * NH * HS;
    const size_t saved = be->saved_size(B, T, NH, HS), scratch = be->scratch_size(B, T, NH, HS);
    res.counted_bytes = (2 * n_qkv + 2 * n_out) * sizeof(floatX) + saved + scratch;

    size_t free_before, total;
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
    Buffers buf;
    memset(&buf, 0, sizeof buf);
    const int ok = try_alloc((void **)&buf.qkv, n_qkv * sizeof(floatX)) &&
                   try_alloc((void **)&buf.out, n_out * sizeof(floatX)) &&
                   try_alloc((void **)&buf.dout, n_out * sizeof(floatX)) &&
                   try_alloc((void **)&buf.dqkv, n_qkv * sizeof(floatX)) &&
                   try_alloc(&buf.saved, saved) && try_alloc(&buf.scratch, scratch);
    if (!ok) {
        free_buffers(&buf);
        return res;
    }
    fill_random(buf.qkv, n_qkv, 0x1234u + T);
    fill_random(buf.dout, n_out, 0x5678u + T);

    // repeats: as many as fit in about half a second of the forward+backward, 5 to 50
    const double probe = time_ms(be, &buf, B, T, NH, HS, 1, 1, 1);
    int reps = (int)(500.0 / (probe > 1e-3 ? probe : 1e-3));
    reps = reps < 5 ? 5 : reps > 50 ? 50 : reps;
    res.fwd_ms = time_ms(be, &buf, B, T, NH, HS, 0, 3, reps);
    res.fwdbwd_ms = time_ms(be, &buf, B, T, NH, HS, 1, 3, reps);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaGetLastError());

    size_t free_after;
    CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    res.measured_bytes = free_before > free_after ? free_before - free_after : 0;
    const double fwd_flop = 2.0 * B * NH * (double)T * T * HS;   // causal: 4 B NH T^2 HS / 2
    res.fwd_tflops = fwd_flop / (res.fwd_ms * 1e-3) / 1e12;
    res.fwdbwd_tflops = 3.5 * fwd_flop / (res.fwdbwd_ms * 1e-3) / 1e12;
    res.ok = 1;
    free_buffers(&buf);
    return res;
}

// --receipt: one pass of one backend under the profiler's range, its counts and its time
static int run_receipt(const AttentionBackend *be, int with_backward, int B, int T, int NH, int HS) {
    AttnCount fwd, bwd;
    FlashTiles tiles;
    char path[32] = "cublas", tile_desc[64] = "-";
    if (!strcmp(be->name, "naive")) {
        naive_attention_count(&fwd, ATTN_FORWARD, B, T, NH, HS);
        naive_attention_count(&bwd, ATTN_BACKWARD, B, T, NH, HS);
    } else {
        // the kernels flash.cu picks: Hopper's on compute capability 9.0 unless FLASH_SM90=0
        // (FLASH_SM90_BWD=0: the mma.sync backward), as flash_sm90_enabled() decides
        int dev, major, minor;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        const int sm90 = major == 9 && minor == 0 && env_flag("FLASH_SM90", 1);
        if (flash_tiles_for(&tiles, sm90, sm90 && env_flag("FLASH_SM90_BWD", 1), T, HS) != 0) {
            fprintf(stderr, "error: --receipt: flash has no kernels for HS=%d (64 or 128)\n", HS);
            return 1;
        }
        flash_attention_count(&fwd, ATTN_FORWARD, &tiles, B, T, NH, HS);
        flash_attention_count(&bwd, ATTN_BACKWARD, &tiles, B, T, NH, HS);
        snprintf(path, sizeof path, "%s", tiles.bwd_sm90 ? "sm90" : tiles.fwd_sm90 ? "sm90+mma" : "mma");
        snprintf(tile_desc, sizeof tile_desc, "fwd%dx%d/bwd%dx%d", tiles.fwd_br, tiles.fwd_bc,
                 tiles.bwd_br, tiles.bwd_bc);
    }
    const AttnCount count = with_backward ? attn_count_add(fwd, bwd) : fwd;

    const size_t n_qkv = (size_t)B * T * 3 * NH * HS, n_out = (size_t)B * T * NH * HS;
    const size_t saved = be->saved_size(B, T, NH, HS), scratch = be->scratch_size(B, T, NH, HS);
    Buffers buf;
    memset(&buf, 0, sizeof buf);
    if (!(try_alloc((void **)&buf.qkv, n_qkv * sizeof(floatX)) &&
          try_alloc((void **)&buf.out, n_out * sizeof(floatX)) &&
          try_alloc((void **)&buf.dout, n_out * sizeof(floatX)) &&
          try_alloc((void **)&buf.dqkv, n_qkv * sizeof(floatX)) && try_alloc(&buf.saved, saved) &&
          try_alloc(&buf.scratch, scratch))) {
        fprintf(stderr, "error: --receipt: %s at B=%d T=%d NH=%d HS=%d: out of device memory "
                        "(needs %.1f GiB)\n", be->name, B, T, NH, HS,
                ((2 * n_qkv + 2 * n_out) * sizeof(floatX) + saved + scratch) / GiB);
        free_buffers(&buf);
        return 1;
    }
    fill_random(buf.qkv, n_qkv, 0x1234u + T);
    fill_random(buf.dout, n_out, 0x5678u + T);
    time_ms(be, &buf, B, T, NH, HS, 1, 2, 1);   // warm-up: every kernel of both passes, set up
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaProfilerStart());
    be->forward(buf.out, buf.saved, buf.scratch, buf.qkv, B, T, NH, HS);
    if (with_backward)
        be->backward(buf.dqkv, buf.scratch, buf.dout, buf.qkv, buf.out, buf.saved, B, T, NH, HS);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaProfilerStop());
    CUDA_CHECK(cudaGetLastError());
    const double ms = time_ms(be, &buf, B, T, NH, HS, with_backward, 0, 21);
    free_buffers(&buf);
    printf("receipt: backend=%s pass=%s B=%d T=%d NH=%d HS=%d path=%s tiles=%s flops=%.0f "
           "counted_read=%.0f counted_write=%.0f event_ms=%.4f\n",
           be->name, with_backward ? "fwdbwd" : "fwd", B, T, NH, HS, path, tile_desc, count.flops,
           count.bytes_read, count.bytes_written, ms);
    return 0;
}

static void usage(const char *prog) {
    fprintf(stderr,
            "usage: %s [--csv PATH] [--tokens N] [--nh N] [--hs N] [--tmin N] [--tmax N] "
            "[--backend naive|flash] [--deterministic] [--receipt fwd|fwdbwd]\n",
            prog);
    exit(2);
}

int main(int argc, char **argv) {
    const char *csv_path = NULL, *only = NULL, *receipt = NULL;
    long tokens = 16384, NH = 12, HS = 64, tmin = 1024, tmax = 65536;
    int deterministic = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--deterministic")) {
            deterministic = 1;
            continue;
        }
        if (i + 1 >= argc) usage(argv[0]);
        const char *flag = argv[i], *val = argv[++i];
        if (!strcmp(flag, "--csv")) csv_path = val;
        else if (!strcmp(flag, "--tokens")) tokens = strtol(val, NULL, 10);
        else if (!strcmp(flag, "--nh")) NH = strtol(val, NULL, 10);
        else if (!strcmp(flag, "--hs")) HS = strtol(val, NULL, 10);
        else if (!strcmp(flag, "--tmin")) tmin = strtol(val, NULL, 10);
        else if (!strcmp(flag, "--tmax")) tmax = strtol(val, NULL, 10);
        else if (!strcmp(flag, "--backend")) only = val;
        else if (!strcmp(flag, "--receipt")) receipt = val;
        else usage(argv[0]);
    }
    if (tokens < 1 || NH < 1 || HS < 1 || tmin < 1 || tmax < tmin) usage(argv[0]);
    if (receipt) {
        if (strcmp(receipt, "fwd") && strcmp(receipt, "fwdbwd")) {
            fprintf(stderr, "error: --receipt takes fwd or fwdbwd, not '%s'\n", receipt);
            return 2;
        }
        if (!only || tmin != tmax) {
            fprintf(stderr, "error: --receipt measures one pass: give --backend and one T "
                            "(--tmin = --tmax)\n");
            return 2;
        }
    }
    if (backend_init() != 0) {
        fprintf(stderr, "error: the attention benchmark needs a CUDA device\n");
        return 1;
    }
    for (int k = 0; k < NUM_ATTENTION_BACKENDS; k++) {
        const AttentionBackend *be = &attention_backends[k];
        if (only && strcmp(only, be->name)) continue;
        if (be->set_deterministic(deterministic) < deterministic) {
            fprintf(stderr, "error: --deterministic: %s has no deterministic backward on this device\n",
                    be->name);
            return 1;
        }
    }
    char desc[256];
    backend_describe(desc, sizeof desc);
    if (receipt) {
        for (int k = 0; k < NUM_ATTENTION_BACKENDS; k++)
            if (!strcmp(only, attention_backends[k].name)) {
                printf("# %s\n", desc);
                const int B = (int)(tokens / tmin > 0 ? tokens / tmin : 1);
                return run_receipt(&attention_backends[k], !strcmp(receipt, "fwdbwd"), B,
                                   (int)tmin, (int)NH, (int)HS);
            }
        fprintf(stderr, "error: --backend: no backend '%s' (naive, flash)\n", only);
        return 2;
    }
    FILE *csv = NULL;
    if (csv_path) {
        csv = fopen(csv_path, "w");
        if (!csv) {
            fprintf(stderr, "error: cannot open %s for writing\n", csv_path);
            return 1;
        }
        fprintf(csv, "T,B,NH,HS,backend,status,fwd_ms,fwd_tflops,fwdbwd_ms,fwdbwd_tflops,"
                     "counted_bytes,measured_bytes\n");
    }

    printf("# attention: causal, bf16, NH=%ld, HS=%ld, B*T=%ld tokens%s\n", NH, HS, tokens,
           deterministic ? ", deterministic backward" : "");
    printf("# %s\n", desc);
    printf("# TFLOP/s: forward 2*B*NH*T^2*HS (causal half of 4*B*NH*T^2*HS), fwd+bwd 3.5x that;\n");
    printf("# memory: counted = qkv+out+dout+dqkv+saved+scratch, measured = drop in free memory\n\n");
    printf("| T | B | backend | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | "
           "memory GiB (counted / measured) | flash speedup fwd / fwd+bwd |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (long T = tmin; T <= tmax; T *= 2) {
        const int B = (int)(tokens / T > 0 ? tokens / T : 1);
        Result res[NUM_ATTENTION_BACKENDS];
        for (int k = 0; k < NUM_ATTENTION_BACKENDS; k++) {
            const AttentionBackend *be = &attention_backends[k];
            if (only && strcmp(only, be->name)) {
                memset(&res[k], 0, sizeof res[k]);
                continue;
            }
            res[k] = run_backend(be, B, (int)T, (int)NH, (int)HS);
            const Result *r = &res[k];
            if (!r->ok) {
                printf("| %ld | %d | %s | %s: out of memory (needs %.1f GiB) | | | | | |\n", T, B,
                       be->name, be->name, r->counted_bytes / GiB);
            } else {
                char speedup[64] = "";
                if (k > 0 && res[0].ok)
                    snprintf(speedup, sizeof speedup, "%.2fx / %.2fx", res[0].fwd_ms / r->fwd_ms,
                             res[0].fwdbwd_ms / r->fwdbwd_ms);
                printf("| %ld | %d | %s | %.3f | %.1f | %.3f | %.1f | %.2f / %.2f | %s |\n", T,
                       B, be->name, r->fwd_ms, r->fwd_tflops, r->fwdbwd_ms, r->fwdbwd_tflops,
                       r->counted_bytes / GiB, r->measured_bytes / GiB, speedup);
            }
            fflush(stdout);
            if (csv) {
                fprintf(csv, "%ld,%d,%ld,%ld,%s,%s,%.4f,%.2f,%.4f,%.2f,%zu,%zu\n", T, B, NH, HS,
                        be->name, r->ok ? "ok" : "oom", r->fwd_ms, r->fwd_tflops, r->fwdbwd_ms,
                        r->fwdbwd_tflops, r->counted_bytes, r->measured_bytes);
                fflush(csv);
            }
        }
    }
    if (csv) fclose(csv);
    return 0;
}
