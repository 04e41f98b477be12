// bench/bench_tokenizer.c: GPT-2 encode speed, MB/s of input text (10^6 bytes per second).
//
//   build/<variant>/bench_tokenizer [--vocab DIR] [--runs N] [--repeat K] [--threads LIST] INPUT
//
// Single thread: bpe_encode on the whole file with a fresh BPEScratch each run, so the piece
// cache starts empty every time, as it does for a program that encodes the file once (tiktoken,
// the usual baseline, keeps no cache between calls either). Multi-thread: bpe_encode_parallel on
// the file repeated K times (default 8, so that each thread has a few MB), fresh scratches each
// run. Median of --runs runs after one warm-up. The output is checked: every run must produce the
// same ids as the single-thread encode.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../data/bpe.h"
#include "../utils.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One timed encode; returns seconds. Fresh scratches, so every run starts with an empty cache.
static double encode_once(const BPE *bpe, int threads, const uint8_t *text, size_t n, TokenList *out) {
    BPEScratch *scratch[256];
    for (int t = 0; t < threads; t++) scratch[t] = bpe_scratch_new(bpe);
    out->len = 0;
    double t0 = wall_seconds();
    bpe_encode_parallel(bpe, scratch, threads, text, n, 0, out);
    double dt = wall_seconds() - t0;
    for (int t = 0; t < threads; t++) bpe_scratch_free(scratch[t]);
    return dt;
}

static void check_same(const TokenList *a, const TokenList *b, const char *what) {
    if (a->len != b->len || memcmp(a->ids, b->ids, a->len * sizeof(int)) != 0)
        die("%s: the ids differ from the single-thread encode", what);
}

int main(int argc, char **argv) {
    const char *vocab = "data/gpt2", *input = NULL;
    int runs = 7, repeat = 8;
    int thread_list[64], n_thread_list = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--vocab") == 0 && i + 1 < argc) vocab = argv[++i];
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = (int)parse_long("--runs", argv[++i], 1, 1000);
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) repeat = (int)parse_long("--repeat", argv[++i], 1, 1000);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            char *list = argv[++i];
            for (char *tok = strtok(list, ","); tok && n_thread_list < 64; tok = strtok(NULL, ","))
                thread_list[n_thread_list++] = (int)parse_long("--threads", tok, 1, 256);
        } else if (argv[i][0] != '-' && !input) input = argv[i];
        else die("usage: bench_tokenizer [--vocab DIR] [--runs N] [--repeat K] [--threads 1,2,4] INPUT");
    }
    if (!input) die("usage: bench_tokenizer [--vocab DIR] [--runs N] [--repeat K] [--threads 1,2,4] INPUT");
    if (n_thread_list == 0) {   // 1, 2, 4, ... up to the number of CPUs, and that number
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (cpus < 1) cpus = 1;
        if (cpus > 256) cpus = 256;
        for (int t = 1; t < cpus && n_thread_list < 63; t *= 2) thread_list[n_thread_list++] = t;
        thread_list[n_thread_list++] = (int)cpus;
    }

    double t0 = wall_seconds();
    BPE bpe;
    bpe_load(&bpe, vocab);
    double load_s = wall_seconds() - t0;
    size_t n;
    uint8_t *text = read_file_or_die(input, &n);
    double *times = malloc((size_t)runs * sizeof(double));
    char unicode[32];
    bpe_unicode_version(unicode, sizeof(unicode));
    printf("# GPT-2 encode, %s (%zu bytes); vocabulary loaded in %.1f ms; PCRE2 JIT %s, Unicode %s\n",
           input, n, 1e3 * load_s, bpe.regex_jit ? "on" : "off", unicode);

    // single thread, the whole file
    TokenList ref = {0}, out = {0};
    encode_once(&bpe, 1, text, n, &ref);
    for (int r = 0; r < runs; r++) {
        times[r] = encode_once(&bpe, 1, text, n, &out);
        check_same(&out, &ref, "single thread");
    }
    double single = median(times, runs);
    BPEScratch *s = bpe_scratch_new(&bpe);
    TokenList tmp = {0};
    bpe_encode(&bpe, s, text, n, 0, &tmp);
    size_t pieces, hits;
    bpe_scratch_stats(s, &pieces, &hits);
    bpe_scratch_free(s);
    tokenlist_free(&tmp);
    printf("| threads | input | tokens | median time | MB/s |\n|---|---|---|---|---|\n");
    printf("| 1 | 1x file | %zu | %.2f ms | %.1f |\n", ref.len, 1e3 * single, n / single / 1e6);
    printf("(single thread: %zu pieces, %.1f%% answered by the cache)\n\n", pieces, 100.0 * hits / pieces);

    // several threads, the file repeated
    size_t big_n = n * (size_t)repeat;
    uint8_t *big = malloc(big_n);
    if (!big) die("out of memory for %zu bytes", big_n);
    for (int k = 0; k < repeat; k++) memcpy(big + (size_t)k * n, text, n);
    TokenList big_ref = {0};
    encode_once(&bpe, 1, big, big_n, &big_ref);
    printf("| threads | input | tokens | median time | MB/s |\n|---|---|---|---|---|\n");
    for (int i = 0; i < n_thread_list; i++) {
        int threads = thread_list[i];
        encode_once(&bpe, threads, big, big_n, &out);   // warm-up
        for (int r = 0; r < runs; r++) {
            times[r] = encode_once(&bpe, threads, big, big_n, &out);
            check_same(&out, &big_ref, "multi-thread");
        }
        double t = median(times, runs);
        printf("| %d | %dx file | %zu | %.2f ms | %.1f |\n", threads, repeat, big_ref.len, 1e3 * t, big_n / t / 1e6);
    }
    tokenlist_free(&ref);
    tokenlist_free(&out);
    tokenlist_free(&big_ref);
    free(big);
    free(text);
    free(times);
    bpe_free(&bpe);
    return 0;
}
