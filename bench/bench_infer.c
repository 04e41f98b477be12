// bench_infer.c: generation speed, as infer_gpt2 does it with greedy decoding: the prompt
// prefilled in one forward pass, then one decode step per token with only the argmax brought
// back to the host (what a user waits for, host work included).
//
//   bench_infer [-c MODEL|dN] [--ttft-prompt 1000] [--prompt 128] [-n 256] [-b 64] [-r 5]
//
// Measured, each the median of -r runs after one warm-up run:
//   time to first token   prompt of --ttft-prompt tokens at batch 1: prefill + argmax
//   decode tok/s, batch 1 -n steps after a --prompt-token prompt; with the step replayed as a
//                         CUDA graph and, for comparison, launched kernel by kernel
//   decode tok/s, batch 1 at long context: after the --ttft-prompt prompt, up to the context
//   decode tok/s, batch B -b sequences from one prompt
// Against the memory limit: a decode step must read every weight once, plus the cache it
// attends to: bytes = parameters * sizeof(floatX) + L * B * 2 * C * (mean length) * sizeof(floatX);
// at 4.3 TB/s (H200, device copy) that bounds the steps per second.
// Prints "key value" lines (bench/infer.sh reads them) and a markdown table.
#include <stdlib.h>
#include <string.h>

#include "../gpt2.h"

#define H200_BYTES_PER_S 4.3e12

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, n, sizeof(double), cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// seconds of one greedy generation: prefill of prompt (T), then `steps` decode steps
// (0: the prefill and first token alone); *first: seconds to the first token. As infer_gpt2
// does it: the tokens stay on the device (gpt2_decode_greedy), and the host reads each
// step's tokens while the next steps run; the time ends when the last tokens are on the host.
// GREEDY_ON_DEVICE=0 instead brings every step's tokens back before the next step starts (the
// host round trip of before, for a same-run comparison).
static double generate(GPT2 *m, KVCache *cache, const int *prompt, int T, int steps, double *first) {
    static int on_device = -1;
    if (on_device < 0) on_device = env_flag("GREEDY_ON_DEVICE", 1);
    int tokens[4096];   // B <= 4096
    dev_synchronize();
    double t0 = wall_seconds();
    gpt2_prefill(m, cache, prompt, 1, T);
    gpt2_decode_argmax(cache, tokens);
    *first = wall_seconds() - t0;
    if (!on_device) {
        for (int i = 0; i < steps; i++) {
            gpt2_decode_step(m, cache, tokens, T + i);
            gpt2_decode_argmax(cache, tokens);
        }
        return wall_seconds() - t0;
    }
    for (int i = 0; i <= steps; i++) {   // the steps ahead queued, then position T - 1 + i's tokens read
        gpt2_decode_greedy(m, cache, T - 1 + i, T - 1 + steps);
        if (i > 0) gpt2_decode_chosen(cache, T - 1 + i, tokens);
    }
    return wall_seconds() - t0;
}

// decode tokens per second (B sequences, `steps` steps after a prompt of T), median of runs
static double decode_rate(GPT2 *m, int B, const int *prompt, int T, int steps, int runs) {
    KVCache cache;
    kv_cache_init(&cache, m, B, T + steps);
    double rates[64], first;
    generate(m, &cache, prompt, T, steps, &first);   // warm-up: allocations, plans, the graph
    for (int r = 0; r < runs; r++) {
        double t = generate(m, &cache, prompt, T, steps, &first);
        rates[r] = (double)B * steps / (t - first);
    }
    kv_cache_free(&cache);
    return median(rates, runs);
}

// bytes a decode step must read: the weights once, the cache at mean length T + steps/2
static double step_bytes(const GPT2 *m, int B, int T, int steps) {
    const GPT2Config *c = &m->config;
    return (double)m->num_parameters * sizeof(floatX) +
           (double)c->num_layers * B * 2.0 * c->channels * (T + steps / 2.0) * sizeof(floatX);
}

int main(int argc, char **argv) {
    const char *model_name = "d12";
    int ttft_T = 1000, T = 128, steps = 256, big_B = 64, runs = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-c")) model_name = argv[i + 1];
        else if (!strcmp(argv[i], "--ttft-prompt")) ttft_T = (int)parse_long(argv[i], argv[i + 1], 1, 1 << 20);
        else if (!strcmp(argv[i], "--prompt")) T = (int)parse_long(argv[i], argv[i + 1], 1, 1 << 20);
        else if (!strcmp(argv[i], "-n")) steps = (int)parse_long(argv[i], argv[i + 1], 1, 1 << 20);
        else if (!strcmp(argv[i], "-b")) big_B = (int)parse_long(argv[i], argv[i + 1], 1, 4096);
        else if (!strcmp(argv[i], "-r")) runs = (int)parse_long(argv[i], argv[i + 1], 1, 64);
        else die("unknown flag %s (flags: -c --ttft-prompt --prompt -n -b -r)", argv[i]);
    }
    if (backend_init() != 0) die("the %s backend could not start", backend_name());
    GPT2 m;
    GPT2Config config;
    if (gpt2_config_from_name(&config, model_name, 1024) == 0) gpt2_init_random(&m, config, 1337);
    else gpt2_load_checkpoint(&m, model_name);
    int maxT = m.config.max_seq_len;
    if (ttft_T > maxT || T + steps > maxT) die("prompts and steps must fit the context of %d", maxT);
    int long_steps = maxT - ttft_T;
    int *prompt = malloc((size_t)maxT * sizeof(int));
    unsigned long long s = 42;
    for (int i = 0; i < maxT; i++) {   // random ids, fixed
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        prompt[i] = (int)(s % (unsigned long long)m.config.vocab_size);
    }
    char desc[256];
    backend_describe(desc, sizeof(desc));

    // time to first token
    KVCache cache;
    kv_cache_init(&cache, &m, 1, maxT);
    double firsts[64], first;
    generate(&m, &cache, prompt, ttft_T, 0, &first);
    for (int r = 0; r < runs; r++) generate(&m, &cache, prompt, ttft_T, 0, &firsts[r]);
    double ttft_ms = median(firsts, runs) * 1e3;
    kv_cache_free(&cache);

    double b1 = decode_rate(&m, 1, prompt, T, steps, runs);
    setenv("CUDA_GRAPHS", "0", 1);
    double b1_launched = decode_rate(&m, 1, prompt, T, steps, runs);
    setenv("CUDA_GRAPHS", "1", 1);
    double b1_long = long_steps > 0 ? decode_rate(&m, 1, prompt, ttft_T, long_steps, runs) : 0.0;
    double bB = decode_rate(&m, big_B, prompt, T, steps, runs);
    double bound1 = H200_BYTES_PER_S / step_bytes(&m, 1, T, steps);
    double boundB = big_B * H200_BYTES_PER_S / step_bytes(&m, big_B, T, steps);

    printf("device %s\n", desc);
    printf("model %s L=%d C=%d params=%zu floatX=%s\n", model_name, m.config.num_layers,
           m.config.channels, m.num_parameters, FLOATX_NAME);
    printf("ttft_ms %.3f\n", ttft_ms);
    printf("decode_b1_tok_s %.1f\n", b1);
    printf("decode_b1_nograph_tok_s %.1f\n", b1_launched);
    printf("decode_b1_long_tok_s %.1f\n", b1_long);
    printf("decode_bB_tok_s %.1f\n", bB);
    printf("bound_b1_tok_s %.1f\n", bound1);
    printf("bound_bB_tok_s %.1f\n", boundB);
    printf("\n| %s, %s (%s) | value |\n|---|---|\n", model_name, FLOATX_NAME, desc);
    printf("| time to first token, %d-token prompt, batch 1 | %.2f ms |\n", ttft_T, ttft_ms);
    printf("| decode, batch 1, %d steps after %d tokens | %.0f tok/s (%.0f%% of the %.0f tok/s memory bound) |\n",
           steps, T, b1, 100.0 * b1 / bound1, bound1);
    printf("| same, kernel by kernel (no CUDA graph) | %.0f tok/s |\n", b1_launched);
    printf("| decode, batch 1, %d steps after %d tokens | %.0f tok/s |\n", long_steps, ttft_T, b1_long);
    printf("| decode, batch %d, %d steps after %d tokens | %.0f tok/s (%.0f%% of %.0f) |\n", big_B, steps,
           T, bB, 100.0 * bB / boundB, boundB);
    free(prompt);
    gpt2_free(&m);
    return 0;
}
