// infer_gpt2.c: the generation driver. A prompt goes in, the model's continuation streams out.
// The prompt (text, encoded by data/bpe.c, or token ids) is prefilled in one forward pass,
// then every new token is one KV-cached decode step (gpt2_decode.c). Tokens are chosen on the
// host from the logits: temperature, top-k, top-p (nucleus), or greedily (temperature 0), in
// which case only the argmax comes back from the device. Text goes to stdout as it is made;
// timings go to stderr. The model itself is gpt2.c; this file never touches a device pointer.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/bpe.h"
#include "data/tokenizer.h"
#include "gpt2.h"
#include "sampler.h"
#include "utils.h"

typedef struct {
    const char *checkpoint;      // -c
    const char *prompt;          // -p (NULL: stdin)
    const char *prompt_ids;      // --prompt-ids
    int max_new;                 // -n
    float temperature;           // --temperature (0: greedy)
    int top_k;                   // --top-k (0: off)
    float top_p;                 // --top-p (1: off)
    uint64_t seed;               // --seed
    int B;                       // -b
    int interactive;             // -i
    const char *vocab_dir;       // --vocab
    const char *tokenizer_path;  // --tokenizer
    int tokenizer_given;         // --tokenizer was on the command line: no fallback then
    int memory;                  // --memory
    int print_ids;               // --ids
    const char *logits_path;     // --logits
    int no_stop;                 // --no-stop
} Options;

static void usage(FILE *out) {
    fprintf(out,
        "usage: infer_gpt2 [flags]   generate text with GPT-2, prompt from -p or stdin\n"
        "  -c MODEL    checkpoint, llm.c model file v3 (fp32) or v5 (bf16) (default gpt2_124M.bin;\n"
        "              import_hf makes one from Hugging Face weights), or dN for a random model\n"
        "              of N layers, train_gpt2 -e's sizes (d12 124M ... d48 1.5B; benchmarks)\n"
        "  -p TEXT     the prompt (default: all of stdin less one final newline, and there must\n"
        "              be one; -p '' generates unconditionally, from <|endoftext|>)\n"
        "  --prompt-ids LIST  the prompt as token ids, separated by commas or spaces\n"
        "  -n N        new tokens at most per sample (default 256); fewer when the model's\n"
        "              context fills up\n"
        "  --temperature T  softmax temperature, 0 = greedy (default 1.0)\n"
        "  --top-k K   sample among the K most likely tokens only, 0 = all (default 0)\n"
        "  --top-p P   sample among the fewest most likely tokens holding probability P (default 1.0)\n"
        "  --seed N    sampling seed (default 1337); sample i draws from its own stream of (seed, i)\n"
        "  -b N        samples generated together as one batch, from the same prompt (default 1);\n"
        "              with one sample text streams as it is made, with more each is printed\n"
        "              whole after a '--- sample i' line\n"
        "  -i          interactive: one prompt per line of stdin, each answered on its own\n"
        "  --vocab DIR  vocab.bpe and encoder.json, to encode prompts (default data/gpt2)\n"
        "  --tokenizer PATH  tokenizer file, to decode tokens (default data/gpt2_tokenizer.bin)\n"
        "  --ids       print the generated token ids, a line per sample, instead of text\n"
        "  --logits FILE  write the logits each token was chosen from: fp32, (steps, samples, V);\n"
        "              the file appears only when complete\n"
        "  --no-stop   do not stop at <|endoftext|> (benchmarks)\n"
        "  --memory    print the KV cache's and the decode step's memory table (to stderr)\n"
        "  -h, --help  this text\n"
        "Generation stops at <|endoftext|>, after -n tokens, or when the context is full.\n"
        "A prompt from stdin is its bytes as they are (a NUL byte is GPT-2's token 188, as any\n"
        "byte); a closed stdin, a directory or an empty input is an error. A failed write to\n"
        "stdout (a full disk) ends the program with an error.\n"
        "Timings (time to first token, decode tokens/s) go to stderr. On CUDA each decode step\n"
        "is replayed as one CUDA graph; CUDA_GRAPHS=0 in the environment launches kernel by kernel.\n");
}

static Options parse_options(int argc, char **argv) {
    Options o = {.checkpoint = "gpt2_124M.bin", .max_new = 256, .temperature = 1.0f,
                 .top_k = 0, .top_p = 1.0f, .seed = 1337, .B = 1, .vocab_dir = "data/gpt2",
                 .tokenizer_path = "data/gpt2_tokenizer.bin"};
    Flag flags[] = {
        TEXT_FLAG("-c", &o.checkpoint), TEXT_FLAG("-p", &o.prompt), TEXT_FLAG("--prompt-ids", &o.prompt_ids),
        INT_FLAG("-n", &o.max_new, 1, 1 << 24), FLOAT_FLAG("--temperature", &o.temperature, 0.0, 100.0),
        INT_FLAG("--top-k", &o.top_k, 0, 1 << 24), FLOAT_FLAG("--top-p", &o.top_p, 0.0, 1.0),
        U64_FLAG("--seed", &o.seed, 0, 0x7fffffffffffffffL), INT_FLAG("-b", &o.B, 1, 4096),
        SWITCH_FLAG("-i", &o.interactive), TEXT_FLAG("--vocab", &o.vocab_dir),
        TEXT_FLAG("--tokenizer", &o.tokenizer_path), SWITCH_FLAG("--ids", &o.print_ids),
        TEXT_FLAG("--logits", &o.logits_path), SWITCH_FLAG("--no-stop", &o.no_stop),
        SWITCH_FLAG("--memory", &o.memory)};
    int n = (int)(sizeof(flags) / sizeof(flags[0]));
    parse_flags(argc, argv, flags, n, "infer_gpt2", usage, NULL, 0);
    o.tokenizer_given = flag_named(flags, n, "--tokenizer")->given;
    if (o.top_p <= 0.0f) die("flag --top-p: %g keeps no token; give a probability in (0, 1]", o.top_p);
    if (o.interactive && (o.prompt || o.prompt_ids))
        die("flag -i reads its prompts from stdin: it takes no -p or --prompt-ids");
    if (o.prompt && o.prompt_ids) die("give the prompt once: -p or --prompt-ids, not both");
    return o;
}

// ----------------------------------------------------------------------------------------
// generation

typedef struct {
    GPT2 model;
    KVCache cache;
    const Tokenizer *tok;   // decodes ids; NULL with --ids
    BPE bpe;                // encodes text prompts
    BPEScratch *scratch;
    int have_bpe;
    int eot;                // id of <|endoftext|>, -1 when the model's vocabulary has none
    int V, Vp, maxT;
    float *logits;          // (B, Vp) host
    SampleCandidate *work;  // (B, V)
    int *tokens;            // (B) the tokens of the current step
    int **generated;        // (B, max_new) ids per sample
    AtomicFile logits_out;  // --logits, renamed into place when generation is done
    int write_logits;
} Generator;

// a failed write sets stdout's error flag, which stdout_flush_or_die reports
static void write_token(const Generator *g, int id) {
    size_t n = 0;
    const uint8_t *bytes = tokenizer_token(g->tok, id, &n);
    fwrite(bytes, 1, n, stdout);
}

// tokens of a text prompt of len bytes (NUL bytes included); empty text starts from <|endoftext|>
static void encode_prompt(Generator *g, const char *text, size_t len, TokenList *out) {
    if (!g->have_bpe) die("internal error: no encoder loaded");
    bpe_encode(&g->bpe, g->scratch, (const uint8_t *)text, len, 1, out);
    if (out->len == 0) {
        if (g->eot < 0) die("the prompt is empty and the model has no <|endoftext|> to start from");
        tokenlist_push(out, g->eot);
    }
}

static void parse_prompt_ids(const char *text, TokenList *out) {
    const char *p = text;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        long id = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n'))
            die("flag --prompt-ids: '%s' is not a list of token ids", text);
        if (id < 0 || id > 0x7fffffff) die("flag --prompt-ids: token id %ld is out of range", id);
        tokenlist_push(out, (int)id);
        p = end;
    }
    if (out->len == 0) die("flag --prompt-ids: no token ids in '%s'", text);
}

// NULL when the prompt can be generated from, else why not (into err)
static const char *check_prompt(const Generator *g, const TokenList *prompt, char *err, size_t n) {
    for (size_t i = 0; i < prompt->len; i++)
        if (prompt->ids[i] < 0 || prompt->ids[i] >= g->V) {
            snprintf(err, n, "prompt token %zu is id %d, outside the model's vocabulary [0, %d)",
                     i, prompt->ids[i], g->V);
            return err;
        }
    if ((int)prompt->len > g->maxT) {
        snprintf(err, n, "the prompt is %zu tokens, longer than the model's context of %d tokens",
                 prompt->len, g->maxT);
        return err;
    }
    return NULL;
}

// the next token of every sample from the current logits (sampling, or greedy when the logits
// are written out; plain greedy decoding keeps its tokens on the device, see generate)
static void choose_tokens(Generator *g, const Options *o, uint64_t *rng, const int *done) {
    int B = o->B;
    gpt2_decode_logits(&g->cache, g->logits);
    if (g->write_logits)
        for (int b = 0; b < B; b++)
            atomic_write(&g->logits_out, g->logits + (size_t)b * g->Vp, (size_t)g->V * sizeof(float));
    SamplerSettings settings = {o->temperature, o->top_k, o->top_p};
    float coins[B];
    for (int b = 0; b < B; b++) coins[b] = sampler_coin(&rng[b]);
    #pragma omp parallel for if (B > 1)
    for (int b = 0; b < B; b++)
        g->tokens[b] = done[b] ? g->eot : sample_token(g->logits + (size_t)b * g->Vp, g->V, settings,
                                                       coins[b], g->work + (size_t)b * g->V);
}

static void generate(Generator *g, const Options *o, const TokenList *prompt) {
    int B = o->B, T = (int)prompt->len;
    int steps = o->max_new < g->maxT - T + 1 ? o->max_new : g->maxT - T + 1;
    int cache_len = T + steps - 1;   // the last token is never fed back
    if (!g->cache.memory || g->cache.maxT < cache_len) {
        if (g->cache.memory) kv_cache_free(&g->cache);
        kv_cache_init(&g->cache, &g->model, B, o->interactive ? g->maxT : cache_len);
        if (o->memory) kv_cache_print_memory(&g->cache, stderr);
    }
    uint64_t rng[B];
    for (int b = 0; b < B; b++) rng[b] = sampler_seed(o->seed, (uint64_t)b);
    int done[B], count[B];
    memset(done, 0, sizeof(done));
    memset(count, 0, sizeof(count));

    double t0 = wall_seconds();
    gpt2_prefill(&g->model, &g->cache, prompt->ids, 1, T);
    double t_first = 0.0;
    int step = 0, live = B;
    // Greedy decoding keeps the tokens on the device: the next steps are queued before this
    // step's tokens are read (gpt2_decode_greedy, several steps a graph), so the GPU does not
    // wait for the host between steps; steps queued past the end of the text are computed and
    // dropped.
    const int greedy = o->temperature == 0.0f && !g->write_logits;
    for (; step < steps && live > 0; step++) {
        if (greedy) {
            gpt2_decode_greedy(&g->model, &g->cache, T - 1 + step, T + steps - 2);
            gpt2_decode_chosen(&g->cache, T - 1 + step, g->tokens);
        } else {
            if (step > 0) gpt2_decode_step(&g->model, &g->cache, g->tokens, T + step - 1);
            choose_tokens(g, o, rng, done);
        }
        if (step == 0) t_first = wall_seconds();
        for (int b = 0; b < B; b++) {
            if (done[b]) continue;
            int id = g->tokens[b];
            if (id == g->eot && !o->no_stop) {
                done[b] = 1;
                live--;
                continue;
            }
            g->generated[b][count[b]++] = id;
            if (B == 1 && !o->print_ids) {
                write_token(g, id);
                stdout_flush_or_die();   // stops at once on a full disk
            }
        }
    }
    double t_end = wall_seconds();   // (before the steps queued past the last token read, below)
    if (greedy && step < steps) dev_synchronize();

    for (int b = 0; b < B; b++) {
        if (B > 1) printf("--- sample %d\n", b);
        for (int i = 0; i < count[b]; i++) {
            if (o->print_ids) printf(i ? " %d" : "%d", g->generated[b][i]);
            else if (B > 1) write_token(g, g->generated[b][i]);
        }
        printf("\n");
    }
    stdout_flush_or_die();
    if (step == steps && steps < o->max_new && live > 0)
        fprintf(stderr, "note: stopped after %d tokens: the model's context of %d tokens is full\n",
                steps, g->maxT);
    double decode_s = t_end - t_first;
    fprintf(stderr, "prompt %d tokens | time to first token %.2f ms | %d steps x %d sample%s in "
            "%.2f ms: %.1f tok/s\n", T, (t_first - t0) * 1e3, step, B, B > 1 ? "s" : "",
            (t_end - t0) * 1e3, step > 1 ? (step - 1) * B / decode_s : 0.0);
}

#define STDIN_HINT "give the prompt with -p TEXT or --prompt-ids IDS, or pipe it in"

// the next line of stdin without its newline, its length in *len, or NULL at the end (free() it)
static char *read_line(size_t *len) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        if (ferror(stdin)) die("stdin: read error: %s", strerror(errno));
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    *len = (size_t)n;
    return line;
}

// all of stdin less one final newline, its length in *len; an empty prompt is an error here
// (unconditional generation is asked for with -p ''), and so is one of more than
// MAX_STDIN_PROMPT bytes, which no model's context holds: reading stops there, so an endless
// input (`yes | infer_gpt2`) ends with a message instead of filling the memory
#define MAX_STDIN_PROMPT (64u << 20)
static char *read_stdin(size_t *len_out) {
    size_t len = 0, cap = 4096;
    char *text = malloc(cap);
    if (!text) die("out of host memory reading stdin");
    size_t n;
    while ((n = fread(text + len, 1, cap - len - 1, stdin)) > 0) {
        len += n;
        if (len > MAX_STDIN_PROMPT) {
            free(text);
            die("stdin: the prompt is more than %u MiB, longer than any model's context holds: "
                "give a shorter one", MAX_STDIN_PROMPT >> 20);
        }
        if (cap - len - 1 == 0) {
            cap *= 2;
            char *grown = realloc(text, cap);
            if (!grown) {
                free(text);
                die("out of host memory reading stdin");
            }
            text = grown;
        }
    }
    if (ferror(stdin)) die("stdin: read error: %s", strerror(errno));
    int newline = len > 0 && text[len - 1] == '\n';
    if (newline) len--;
    if (len == 0)
        die("stdin held no prompt (%s): %s; -p '' generates unconditionally, from <|endoftext|>",
            newline ? "only a newline" : "it is empty", STDIN_HINT);
    text[len] = '\0';
    *len_out = len;
    return text;
}

int main(int argc, char **argv) {
    Options o = parse_options(argc, argv);
    // a prompt from stdin is read first: a bad one fails before the model loads
    char *stdin_text = NULL;
    size_t stdin_len = 0;
    if (o.interactive || (!o.prompt && !o.prompt_ids)) {
        stdin_readable_or_die(STDIN_HINT);
        if (!o.interactive) {
            if (isatty(STDIN_FILENO))
                fprintf(stderr, "reading the prompt from stdin until its end (Ctrl-D); -p TEXT gives it here\n");
            stdin_text = read_stdin(&stdin_len);
        }
    }
    if (backend_init() != 0) die("the %s backend could not start (see above)", backend_name());
    Generator g;
    memset(&g, 0, sizeof(g));

    // text in and out: the encoder for text prompts, the tokenizer file to decode
    Tokenizer tokenizer;
    int need_encoder = o.prompt_ids == NULL;
    if (need_encoder) {
        bpe_load(&g.bpe, o.vocab_dir);
        g.scratch = bpe_scratch_new(&g.bpe);
        g.have_bpe = 1;
    }
    if (!o.print_ids) {
        if (file_exists(o.tokenizer_path)) {
            tokenizer_load(&tokenizer, o.tokenizer_path);
            g.tok = &tokenizer;
        } else if (g.have_bpe && !o.tokenizer_given) {
            g.tok = &g.bpe.tokenizer;   // the same ids -> bytes, from encoder.json
        } else {
            die("%s: no such file: the tokenizer file decodes the output (`make data` writes it; "
                "--tokenizer PATH, or --ids to print token ids)", o.tokenizer_path);
        }
    }

    GPT2Config config;
    if (gpt2_config_from_name(&config, o.checkpoint, 1024) == 0) {
        gpt2_init_random(&g.model, config, o.seed);
    } else {
        if (!file_exists(o.checkpoint))
            die("%s: no such checkpoint (import_hf makes one from Hugging Face's GPT-2 weights, "
                "train_gpt2 -o writes them; -c dN runs a random model)", o.checkpoint);
        gpt2_load_checkpoint(&g.model, o.checkpoint);
    }
    g.V = g.model.config.vocab_size;
    g.Vp = g.model.config.padded_vocab_size;
    g.maxT = g.model.config.max_seq_len;
    if (g.tok && g.tok->vocab_size < g.V)
        die("the model's vocabulary (%d tokens) is larger than the tokenizer's (%d): they do not "
            "belong together", g.V, g.tok->vocab_size);
    g.eot = g.tok ? g.tok->eot_token : g.have_bpe ? g.bpe.eot_token : GPT2_EOT;
    if (g.eot >= g.V) g.eot = -1;

    g.logits = malloc((size_t)o.B * g.Vp * sizeof(float));
    g.work = malloc((size_t)o.B * g.V * sizeof(SampleCandidate));
    g.tokens = malloc((size_t)o.B * sizeof(int));
    g.generated = malloc((size_t)o.B * sizeof(int *));
    if (!g.logits || !g.work || !g.tokens || !g.generated) die("out of host memory");
    for (int b = 0; b < o.B; b++) {
        g.generated[b] = malloc((size_t)o.max_new * sizeof(int));
        if (!g.generated[b]) die("out of host memory");
    }
    // opened before any work, so a bad path fails at once; whatever ends the program early
    // (die() included) removes its temporary file (utils.c: every open AtomicFile)
    if (o.logits_path) {
        atomic_open(&g.logits_out, o.logits_path);
        g.write_logits = 1;
    }

    char err[256];
    TokenList prompt = {0};
    if (o.interactive) {
        char *line;
        size_t len;
        if (isatty(STDIN_FILENO)) fprintf(stderr, "> ");
        while ((line = read_line(&len)) != NULL) {
            if (len) {
                prompt.len = 0;
                encode_prompt(&g, line, len, &prompt);
                const char *why = check_prompt(&g, &prompt, err, sizeof(err));
                if (why) fprintf(stderr, "error: %s\n", why);
                else generate(&g, &o, &prompt);
            }
            free(line);
            if (isatty(STDIN_FILENO)) fprintf(stderr, "> ");
        }
    } else {
        if (o.prompt_ids) {
            parse_prompt_ids(o.prompt_ids, &prompt);
        } else {
            if (o.prompt) encode_prompt(&g, o.prompt, strlen(o.prompt), &prompt);
            else encode_prompt(&g, stdin_text, stdin_len, &prompt);
            free(stdin_text);
        }
        const char *why = check_prompt(&g, &prompt, err, sizeof(err));
        if (why) die("%s", why);
        generate(&g, &o, &prompt);
    }

    if (g.write_logits) atomic_commit(&g.logits_out);
    stdout_flush_or_die();
    tokenlist_free(&prompt);
    for (int b = 0; b < o.B; b++) free(g.generated[b]);
    free(g.generated);
    free(g.tokens);
    free(g.work);
    free(g.logits);
    if (g.cache.memory) kv_cache_free(&g.cache);
    if (g.tok == &tokenizer) tokenizer_free(&tokenizer);
    if (g.have_bpe) {
        bpe_scratch_free(g.scratch);
        bpe_free(&g.bpe);
    }
    gpt2_free(&g.model);
    return 0;
}
