// train_gpt2.c: the training driver. Flags, data, the loop (LR schedule, gradient
// accumulation, clipping, AdamW), validation, sampling, checkpoints and resume, progress.
// The model itself is gpt2.c; this file never touches a device pointer.
//
// Data parallelism: one process (rank) per device, launched by mpirun, torchrun, srun or by
// hand (--world, --rank, --comm-dir). Each rank trains on its own micro-batches (every
// world-th batch of the one-process sequence), gpt2_update sums the gradients over the ranks
// (ZeRO-1, layers/comm.h), and rank 0 alone prints, logs and writes checkpoints, whose
// training state does not depend on the number of ranks.
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attention/attention.h"
#include "data/dataloader.h"
#include "data/tokenizer.h"
#include "gpt2.h"
#include "sampler.h"
#include "layers/comm.h"
#include "utils.h"

#define TRAIN_STATE_MAGIC 20241129
#define TRAIN_STATE_VERSION 1

typedef struct {
    const char *train_pattern;   // -i
    const char *val_pattern;     // -j
    const char *init;            // -e  checkpoint path or dN
    const char *out_dir;         // -o
    const char *tokenizer_path;  // --tokenizer
    int B;                       // -b
    int T;                       // -t
    long total_batch;            // -d  tokens per optimizer step (gradient accumulation)
    float lr;                    // -l
    int warmup;                  // -u
    float final_lr_frac;         // -q
    float weight_decay;          // -c
    int max_steps;               // -x  (-1: one epoch of the training data)
    int val_every;               // -v
    int val_batches;             // -m
    int sample_every;            // -s
    int gen_tokens;              // -g
    int checkpoint_every;        // -n
    int resume;                  // -y
    int recompute;               // -r  activation recomputation level (gpt2.h: RECOMPUTE_*)
    int shuffle;                 // --shuffle
    int max_seq_len;             // --max-seq-len (from-scratch models)
    float max_grad_norm;         // --max-grad-norm
    uint64_t seed;               // --seed
    int world;                   // --world  (default: the launcher's environment, else 1)
    int rank;                    // --rank   (likewise, else 0)
    int local_rank;              // --local-rank (likewise, else -1: rank % GPUs)
    const char *comm_dir;        // --comm-dir
    const char *comm;            // --comm   auto, or the build's transport (nccl, shm)
    double comm_timeout;         // --comm-timeout
} Options;

static void usage(FILE *out) {
    fprintf(out,
        "usage: train_gpt2 [flags]\n"
        "  -i PATTERN  training token files, a glob (default data/tinyshakespeare/tiny_shakespeare_train.bin)\n"
        "  -j PATTERN  validation token files, a glob (default data/tinyshakespeare/tiny_shakespeare_val.bin)\n"
        "  -e INIT     checkpoint to start from (llm.c v3/v5 file), or dN for a new model with\n"
        "              L=N, NH=N, C=64N (d12 = GPT-2 124M, d24, d36, d48) (default d12)\n"
        "  -o DIR      output folder for checkpoints and log.csv (default: none)\n"
        "  -b B        batch size per micro-step (default 4)\n"
        "  -t T        sequence length (default 1024)\n"
        "  -d TOKENS   tokens per optimizer step, a multiple of B*T: gradient accumulation (default B*T)\n"
        "  -l LR       peak learning rate (default 3e-4)\n"
        "  -u STEPS    linear warmup steps (default 0)\n"
        "  -q FRAC     final learning rate as a fraction of the peak, cosine decay (default 1.0: constant)\n"
        "  -c WD       AdamW weight decay on 2-D weights (default 0.0)\n"
        "  -x STEPS    optimizer steps (default -1: one epoch of the training data)\n"
        "  -v EVERY    validate every EVERY steps, 0 = never (default 20)\n"
        "  -m BATCHES  validation batches (default 20; capped at what the files hold)\n"
        "  -s EVERY    sample text every EVERY steps, 0 = never (default 20)\n"
        "  -g TOKENS   tokens to generate when sampling (default 64)\n"
        "  -n EVERY    checkpoint every EVERY steps into -o, 0 = only at the end when -o is set (default 0)\n"
        "  -y 1        resume from the latest checkpoint in -o (default 0)\n"
        "  -r LEVEL    recompute activations in backward to save memory: 0 none, 1 GELU,\n"
        "              2 GELU and layernorm; gradients stay bit-identical (default 0)\n"
        "  --shuffle   shuffle shard and batch order every epoch\n"
        "  --seed N    seed for initialisation, shuffling and sampling (default 1337)\n"
        "  --max-seq-len N  max_seq_len of a new dN model (default max(T, 1024))\n"
        "  --max-grad-norm X  clip the global gradient norm to X, 0 = off (default 1.0)\n"
        "  --tokenizer PATH  tokenizer file to decode samples (default data/gpt2_tokenizer.bin)\n"
        "data parallelism (one process per device; -b is per process, -d counts all processes):\n"
        "  --world N   number of processes (default: from mpirun, torchrun or srun, else 1)\n"
        "  --rank R    this process, 0 .. N-1 (default: from the environment, else 0)\n"
        "  --local-rank R  CUDA: this process's GPU on its machine (default: from the\n"
        "              environment, else rank %% GPUs)\n"
        "  --comm-dir DIR  rendezvous folder every process can reach; needed when N > 1\n"
        "  --comm MODE auto: communication only when N > 1; %s: set it up even for N = 1 (default auto)\n"
        "  --comm-timeout S  seconds to wait for every process to join (default 120)\n"
        "  -h, --help  this text\n", comm_transport());
}

// An integer from the environment, or -1 when the variable is not set.
static int env_int(const char *name) {
    const char *text = getenv(name);
    if (!text || !*text) return -1;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (*end != '\0' || v < 0 || v > (1 << 20)) die("environment %s='%s' is not a rank or count", name, text);
    return (int)v;
}

// Rank, world and local rank as the launcher sets them, where no flag did: mpirun (Open MPI),
// MPICH and Intel MPI (PMI), torchrun and the like (RANK, WORLD_SIZE), Slurm's srun.
static void ranks_from_environment(Options *o) {
    static const char *const vars[][3] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
        {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
        {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
        {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        int rank = env_int(vars[i][0]), world = env_int(vars[i][1]);
        if (rank < 0 || world < 1) continue;
        if (o->rank < 0) o->rank = rank;
        if (o->world < 0) o->world = world;
        if (o->local_rank < 0) o->local_rank = env_int(vars[i][2]);
        break;
    }
    if (o->world < 0) o->world = 1;
    if (o->rank < 0) o->rank = 0;
}

static Options parse_options(int argc, char **argv) {
    Options o = {
        .train_pattern = "data/tinyshakespeare/tiny_shakespeare_train.bin",
        .val_pattern = "data/tinyshakespeare/tiny_shakespeare_val.bin",
        .init = "d12", .out_dir = NULL, .tokenizer_path = "data/gpt2_tokenizer.bin",
        .B = 4, .T = 1024, .total_batch = -1, .lr = 3e-4f, .warmup = 0, .final_lr_frac = 1.0f,
        .weight_decay = 0.0f, .max_steps = -1, .val_every = 20, .val_batches = 20,
        .sample_every = 20, .gen_tokens = 64, .checkpoint_every = 0, .resume = 0, .recompute = 0, .shuffle = 0,
        .max_seq_len = 0, .max_grad_norm = 1.0f, .seed = 1337, .world = -1, .rank = -1,
        .local_rank = -1, .comm_dir = NULL, .comm = "auto", .comm_timeout = 120.0};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) { usage(stdout); exit(0); }
        if (!strcmp(flag, "--shuffle")) { o.shuffle = 1; continue; }
        if (i + 1 >= argc) { usage(stderr); die("flag %s needs a value", flag); }
        const char *v = argv[++i];
        if (!strcmp(flag, "-i")) o.train_pattern = v;
        else if (!strcmp(flag, "-j")) o.val_pattern = v;
        else if (!strcmp(flag, "-e")) o.init = v;
        else if (!strcmp(flag, "-o")) o.out_dir = v;
        else if (!strcmp(flag, "--tokenizer")) o.tokenizer_path = v;
        else if (!strcmp(flag, "-b")) o.B = (int)parse_long(flag, v, 1, 1 << 16);
        else if (!strcmp(flag, "-t")) o.T = (int)parse_long(flag, v, 1, 1 << 20);
        else if (!strcmp(flag, "-d")) o.total_batch = parse_long(flag, v, -1, 1L << 40);
        else if (!strcmp(flag, "-l")) o.lr = (float)parse_double(flag, v, 0.0, 10.0);
        else if (!strcmp(flag, "-u")) o.warmup = (int)parse_long(flag, v, 0, 1L << 30);
        else if (!strcmp(flag, "-q")) o.final_lr_frac = (float)parse_double(flag, v, 0.0, 1.0);
        else if (!strcmp(flag, "-c")) o.weight_decay = (float)parse_double(flag, v, 0.0, 10.0);
        else if (!strcmp(flag, "-x")) o.max_steps = (int)parse_long(flag, v, -1, 1L << 30);
        else if (!strcmp(flag, "-v")) o.val_every = (int)parse_long(flag, v, 0, 1L << 30);
        else if (!strcmp(flag, "-m")) o.val_batches = (int)parse_long(flag, v, 1, 1L << 30);
        else if (!strcmp(flag, "-s")) o.sample_every = (int)parse_long(flag, v, 0, 1L << 30);
        else if (!strcmp(flag, "-g")) o.gen_tokens = (int)parse_long(flag, v, 1, 1 << 20);
        else if (!strcmp(flag, "-n")) o.checkpoint_every = (int)parse_long(flag, v, 0, 1L << 30);
        else if (!strcmp(flag, "-y")) o.resume = (int)parse_long(flag, v, 0, 1);
        else if (!strcmp(flag, "-r")) o.recompute = (int)parse_long(flag, v, 0, RECOMPUTE_LEVELS - 1);
        else if (!strcmp(flag, "--seed")) o.seed = (uint64_t)parse_long(flag, v, 0, 0x7fffffffffffffffL);
        else if (!strcmp(flag, "--max-seq-len")) o.max_seq_len = (int)parse_long(flag, v, 1, 1 << 20);
        else if (!strcmp(flag, "--max-grad-norm")) o.max_grad_norm = (float)parse_double(flag, v, 0.0, 1e9);
        else if (!strcmp(flag, "--world")) o.world = (int)parse_long(flag, v, 1, 1 << 20);
        else if (!strcmp(flag, "--rank")) o.rank = (int)parse_long(flag, v, 0, 1 << 20);
        else if (!strcmp(flag, "--local-rank")) o.local_rank = (int)parse_long(flag, v, 0, 1 << 10);
        else if (!strcmp(flag, "--comm-dir")) o.comm_dir = v;
        else if (!strcmp(flag, "--comm")) o.comm = v;
        else if (!strcmp(flag, "--comm-timeout")) o.comm_timeout = parse_double(flag, v, 0.0, 1e6);
        else { usage(stderr); die("unknown flag %s", flag); }
    }
    ranks_from_environment(&o);
    if (o.rank >= o.world)
        die("rank %d is outside a world of %d rank(s): ranks are 0 .. world-1", o.rank, o.world);
    if (strcmp(o.comm, "auto") != 0 && strcmp(o.comm, comm_transport()) != 0)
        die("flag --comm: '%s' is not this build's transport; use auto or %s", o.comm, comm_transport());
    long micro = (long)o.B * o.T * o.world;   // tokens of one micro-step of every rank
    if (o.total_batch == -1) o.total_batch = micro;
    if (o.total_batch <= 0 || o.total_batch % micro != 0)
        die("flag -d: total batch %ld tokens is not a positive multiple of B*T*world = %d*%d*%d = %ld",
            o.total_batch, o.B, o.T, o.world, micro);
    if (o.resume && !o.out_dir) die("flag -y 1 needs -o: the folder to resume from");
    if (o.checkpoint_every && !o.out_dir) die("flag -n needs -o: the folder to write checkpoints to");
    return o;
}

// ----------------------------------------------------------------------------------------
// learning rate: linear warmup, then cosine decay from lr to lr * final_lr_frac

static float learning_rate(const Options *o, int step, int max_steps) {   // step: 0-based
    if (step < o->warmup) return o->lr * (step + 1) / o->warmup;
    if (o->final_lr_frac >= 1.0f || max_steps <= o->warmup) return o->lr;
    float progress = (float)(step - o->warmup) / (float)(max_steps - o->warmup);
    float cosine = 0.5f * (1.0f + cosf((float)M_PI * progress));
    return o->lr * (o->final_lr_frac + (1.0f - o->final_lr_frac) * cosine);
}

// ----------------------------------------------------------------------------------------
// training state: everything besides the model file that a resumed run needs to continue
// exactly: step, data position, sampling RNG, the shapes it was made with, optimizer state.

typedef struct {
    int32_t header[8];         // magic, version, step, B, T, micro-batches per step (all ranks
                               // together: the same for any number of ranks), has_master, 0
    int64_t data_epoch, data_shard, data_batch;
    uint64_t rng;
    uint64_t num_parameters;
} TrainState;

static void model_path(char *buf, size_t n, const char *dir, int step) {
    snprintf(buf, n, "%s/model_%08d.bin", dir, step);
}
static void state_path(char *buf, size_t n, const char *dir, int step) {
    snprintf(buf, n, "%s/state_%08d.bin", dir, step);
}

// every rank calls it (the optimizer state is gathered from all); rank 0 writes the files
static void save_checkpoint(const Options *o, const GPT2 *model, const DataLoader *train,
                            int step, int global_micro, uint64_t rng) {
    int writer = comm_rank() == 0;
    char path[4096];
    model_path(path, sizeof(path), o->out_dir, step);
    if (writer) gpt2_save_checkpoint(model, path);
    TrainState s = {{TRAIN_STATE_MAGIC, TRAIN_STATE_VERSION, step, o->B, o->T, global_micro,
                     model->master_weights != NULL, 0},
                    train->pos.epoch, train->pos.shard, train->pos.batch, rng,
                    model->num_parameters};
    state_path(path, sizeof(path), o->out_dir, step);
    AtomicFile af;
    if (writer) {
        atomic_open(&af, path);
        atomic_write(&af, &s, sizeof(s));
    }
    gpt2_write_optimizer_state(model, writer ? &af : NULL);
    if (!writer) return;
    atomic_commit(&af);
    printf("saved checkpoint %s/model_%08d.bin and state_%08d.bin\n", o->out_dir, step, step);
}

// the largest step with both files in dir, or -1
static int latest_checkpoint(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) die("cannot read folder %s: %s", dir, strerror(errno));
    int best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int step, consumed = 0;
        if (sscanf(e->d_name, "state_%d.bin%n", &step, &consumed) == 1 &&
            e->d_name[consumed] == '\0' && consumed > 0 && step > best) {
            char path[4096];
            model_path(path, sizeof(path), dir, step);
            if (file_exists(path)) best = step;
        }
    }
    closedir(d);
    return best;
}

// every rank reads the model and its own shard of the optimizer state
static int resume_from(const Options *o, GPT2 *model, DataLoader *train, int global_micro,
                       uint64_t *rng) {
    int step = latest_checkpoint(o->out_dir);
    if (step < 0) die("-y 1: no checkpoint (model_*.bin with state_*.bin) in %s", o->out_dir);
    char path[4096];
    model_path(path, sizeof(path), o->out_dir, step);
    gpt2_load_checkpoint(model, path);
    state_path(path, sizeof(path), o->out_dir, step);
    FILE *f = fopen_or_die(path, "rb");
    TrainState s;
    fread_or_die(&s, sizeof(s), 1, f, path);
    if (s.header[0] != TRAIN_STATE_MAGIC) die("%s: not a training-state file (bad magic)", path);
    if (s.header[1] != TRAIN_STATE_VERSION) die("%s: unsupported version %d", path, s.header[1]);
    if (s.header[2] != step) die("%s: holds step %d, its name says %d", path, s.header[2], step);
    if (s.header[3] != o->B || s.header[4] != o->T || s.header[5] != global_micro)
        die("%s: was written with -b %d -t %d and %d micro-batches per step (all ranks); these "
            "flags say -b %d -t %d and %d: resume with the same -b, -t and -d", path, s.header[3],
            s.header[4], s.header[5], o->B, o->T, global_micro);
    if (s.num_parameters != model->num_parameters || s.header[6] != (model->master_weights != NULL))
        die("%s: written for a model of %llu parameters%s; the checkpoint beside it has %zu%s",
            path, (unsigned long long)s.num_parameters, s.header[6] ? " with master weights" : "",
            model->num_parameters, model->master_weights ? " with master weights" : "");
    gpt2_read_optimizer_state(model, f, path);
    if (fgetc(f) != EOF) die("%s: unexpected bytes after the optimizer state", path);
    fclose(f);
    DataPosition pos = {s.data_epoch, s.data_shard, s.data_batch};
    dataloader_seek(train, pos);
    *rng = s.rng;
    printf("resumed from %s/model_%08d.bin at step %d\n", o->out_dir, step, step);
    return step;
}

// ----------------------------------------------------------------------------------------
// sampling: text generated from <|endoftext|> at temperature 1, through the KV cache of
// gpt2_decode.c and the sampler of sampler.c, as infer_gpt2 generates

static void sample_text(GPT2 *model, const Tokenizer *tok, int gen_tokens, uint64_t *rng) {
    int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    int len = gen_tokens + 1 < model->config.max_seq_len ? gen_tokens + 1 : model->config.max_seq_len;
    float *logits = malloc((size_t)Vp * sizeof(float));
    SampleCandidate *work = malloc((size_t)V * sizeof(SampleCandidate));
    if (!logits || !work) die("out of host memory for sampling");
    const SamplerSettings settings = {1.0f, 0, 1.0f};
    KVCache cache;
    kv_cache_init(&cache, model, 1, len);
    int token = GPT2_EOT;
    gpt2_prefill(model, &cache, &token, 1, 1);
    printf("generating:\n---\n");
    for (int pos = 1; pos < len; pos++) {
        gpt2_decode_logits(&cache, logits);
        token = sample_token(logits, V, settings, sampler_coin(rng), work);
        size_t n = 0;
        const uint8_t *bytes = tok ? tokenizer_token(tok, token, &n) : NULL;
        if (bytes) fwrite(bytes, 1, n, stdout);
        else printf("%d ", token);
        fflush(stdout);
        if (pos + 1 < len) gpt2_decode_step(model, &cache, &token, pos);
    }
    printf("\n---\n");
    kv_cache_free(&cache);
    free(logits);
    free(work);
}

// ----------------------------------------------------------------------------------------

static float evaluate(GPT2 *model, DataLoader *val, int max_batches) {
    dataloader_reset(val);
    long available = 0;
    for (int i = 0; i < val->num_shards; i++)
        available += (long)((val->shard_tokens[i] - 1) / ((size_t)val->B * val->T));
    int n = max_batches < available ? max_batches : (int)available;
    // the ranks share the n batches: rank r evaluates batches r, r + world, ...
    double sum = 0.0;
    for (int i = 0; i < n; i += val->world) {
        dataloader_next_batch(val);
        if (i + val->rank < n) sum += gpt2_forward(model, val->inputs, val->targets, val->B, val->T);
    }
    return (float)(comm_allreduce_sum_host(sum) / n);
}

// The activations, sized before the first step so that a batch that does not fit is told
// which flags would: each -r from the one asked for, what it needs at this -b, and the
// largest -b that fits with it. "Fits" is against the memory free now, less the AdamW
// moments that the first update allocates.
static void allocate_activations(const Options *o, GPT2 *model) {
    if (gpt2_allocate_activations(model, o->B, o->T) == 0) return;
    GPT2Config c = model->config;
    size_t free_bytes = device_memory_free();
    size_t moments = model->adam_m ? 0 : 2 * model->shard_size * sizeof(float);
    size_t room = free_bytes > moments ? free_bytes - moments : 0;
    char msg[2048], a[32], b[32];
    format_bytes(a, sizeof(a), (double)free_bytes);
    format_bytes(b, sizeof(b), (double)moments);
    int n = snprintf(msg, sizeof(msg), "out of %s memory for the activations of -b %d -t %d: %s "
                     "free, of which the AdamW moments will take %s; the activations need",
                     backend_name(), o->B, o->T, a, b);
    for (int r = o->recompute; r < RECOMPUTE_LEVELS && n < (int)sizeof(msg); r++) {
        format_bytes(a, sizeof(a), (double)gpt2_activation_bytes(c, o->B, o->T, r));
        n += snprintf(msg + n, sizeof(msg) - n, "\n  at -r %d: %s", r, a);
        int lo = 0, hi = o->B;   // the largest -b that fits at -r r, by bisection: lo fits, hi not
        while (hi - lo > 1) {
            int mid = lo + (hi - lo) / 2;
            if (gpt2_activation_bytes(c, mid, o->T, r) <= room) lo = mid; else hi = mid;
        }
        if (gpt2_activation_bytes(c, o->B, o->T, r) <= room) {
            n += snprintf(msg + n, sizeof(msg) - n, ", fits: add -r %d", r);
        } else if (lo > 0) {
            format_bytes(a, sizeof(a), (double)gpt2_activation_bytes(c, lo, o->T, r));
            n += snprintf(msg + n, sizeof(msg) - n, ", too much; -b %d -r %d fits (%s)", lo, r, a);
        } else {
            n += snprintf(msg + n, sizeof(msg) - n, ", too much even at -b 1");
        }
    }
    if (gpt2_activation_bytes(c, 1, o->T, RECOMPUTE_LEVELS - 1) > room)
        n += snprintf(msg + n, sizeof(msg) - n, "\nnothing fits at -t %d: a shorter -t or a "
                      "smaller model would", o->T);
    die("%s", msg);
}

// mkdir -p: the folder and any missing parents
static void make_dir(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path)) die("folder name too long: %s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) die("cannot create folder %s: %s", path, strerror(errno));
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) die("cannot create folder %s: %s", dir, strerror(errno));
}

int main(int argc, char **argv) {
    Options o = parse_options(argc, argv);
    // the other ranks first (on CUDA this also picks this process's GPU), then the backend
    CommConfig comm = {.rank = o.rank, .world = o.world, .local_rank = o.local_rank,
                       .dir = o.comm_dir, .timeout_s = o.comm_timeout,
                       .force = strcmp(o.comm, "auto") != 0};
    comm_init(&comm);
    if (backend_init() != 0) die("the %s backend could not start (see above)", backend_name());
    // rank 0 alone prints; the others' errors still reach stderr
    if (o.rank != 0 && !freopen("/dev/null", "w", stdout)) die("rank %d: cannot silence its output", o.rank);

    // data first: bad files fail fast, before the model is built
    DataLoader train, val;
    dataloader_init(&train, o.train_pattern, o.B, o.T, o.shuffle, o.seed);
    dataloader_set_rank(&train, o.rank, o.world);
    int have_val = o.val_every > 0;
    if (have_val) {
        dataloader_init(&val, o.val_pattern, o.B, o.T, 0, o.seed);
        dataloader_set_rank(&val, o.rank, o.world);
    }
    int global_micro = (int)(o.total_batch / ((long)o.B * o.T));   // per step, all ranks
    int grad_accum = global_micro / o.world;                        // per step, this rank
    long batches_per_epoch = 0;
    for (int i = 0; i < train.num_shards; i++)
        batches_per_epoch += (long)((train.shard_tokens[i] - 1) / ((size_t)o.B * o.T));
    int max_steps = o.max_steps >= 0 ? o.max_steps : (int)(batches_per_epoch / global_micro);
    if (max_steps < 1) max_steps = 1;

    // model
    GPT2 model;
    uint64_t rng = sampler_seed(o.seed, 0);   // the samples' random stream
    int start_step = 0;
    if (o.out_dir) make_dir(o.out_dir);
    if (o.resume) {
        start_step = resume_from(&o, &model, &train, global_micro, &rng);
    } else {
        GPT2Config config;
        int max_seq_len = o.max_seq_len ? o.max_seq_len : (o.T > 1024 ? o.T : 1024);
        if (gpt2_config_from_name(&config, o.init, max_seq_len) == 0) {
            gpt2_init_random(&model, config, o.seed);
        } else {
            if (o.max_seq_len) die("flag --max-seq-len applies to new models only, not to %s", o.init);
            gpt2_load_checkpoint(&model, o.init);
        }
    }
    if (o.T > model.config.max_seq_len)
        die("flag -t %d is longer than the model's max_seq_len %d (from %s)", o.T,
            model.config.max_seq_len, o.resume ? o.out_dir : o.init);
    gpt2_set_recompute(&model, o.recompute);
    allocate_activations(&o, &model);

    Tokenizer tokenizer;
    const Tokenizer *tok = NULL;
    if (file_exists(o.tokenizer_path)) {
        tokenizer_load(&tokenizer, o.tokenizer_path);
        tok = &tokenizer;
    } else {
        printf("note: no tokenizer file at %s (run `make data`); samples print token ids\n",
               o.tokenizer_path);
    }

    char desc[256];
    backend_describe(desc, sizeof(desc));
    printf("+-------------------+----------------------------------------------------+\n");
    printf("| backend           | %s, %s, attention=%s\n", backend_name(), FLOATX_NAME, attention_name);
    printf("| device            | %s\n", desc);
    printf("| init              | %s%s\n", o.resume ? o.out_dir : o.init, o.resume ? " (resumed)" : "");
    gpt2_print_config(&model);
    printf("| train data        | %s: %d file(s), %zu tokens, %ld batches/epoch\n", o.train_pattern,
           train.num_shards, train.total_tokens, batches_per_epoch);
    if (have_val) printf("| val data          | %s: %zu tokens\n", o.val_pattern, val.total_tokens);
    if (o.world > 1 || comm.force)
        printf("| data parallel     | %d ranks (%s, rendezvous in %s), ZeRO-1\n", o.world,
               comm_transport(), o.comm_dir);
    printf("| batch             | B=%d T=%d, %d micro-steps%s: %ld tokens/step\n", o.B, o.T, grad_accum,
           o.world > 1 ? " on each rank" : "", o.total_batch);
    static const char *const recompute_names[RECOMPUTE_LEVELS] = {"none", "GELU", "GELU and layernorm"};
    char act_bytes[32];
    format_bytes(act_bytes, sizeof(act_bytes),
                 (double)gpt2_activation_bytes(model.config, o.B, o.T, o.recompute));
    printf("| recompute         | -r %d (%s): activations %s\n", o.recompute,
           recompute_names[o.recompute], act_bytes);
    printf("| steps             | %d (from %d)\n", max_steps, start_step);
    printf("| learning rate     | %.2e, warmup %d, final fraction %.3f, weight decay %.3f, clip %.2f\n",
           o.lr, o.warmup, o.final_lr_frac, o.weight_decay, o.max_grad_norm);
    printf("| seed              | %llu%s\n", (unsigned long long)o.seed, o.shuffle ? ", shuffled" : "");
    printf("+-------------------+----------------------------------------------------+\n");

    FILE *log = NULL;
    if (o.out_dir && o.rank == 0) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/log.csv", o.out_dir);
        int fresh = !file_exists(path) || !o.resume;
        log = fopen_or_die(path, fresh ? "w" : "a");
        if (fresh) fprintf(log, "step,kind,loss,grad_norm,lr,ms,tokens_per_s\n");
    }

    double total_ms = 0.0;
    int timed_steps = 0;
    float last_train_loss = NAN, last_val_loss = NAN;
    for (int step = start_step; step <= max_steps; step++) {
        int last = step == max_steps;
        if (o.out_dir && step > start_step &&
            (last || (o.checkpoint_every && step % o.checkpoint_every == 0)))
            save_checkpoint(&o, &model, &train, step, global_micro, rng);
        if (have_val && (last || step % o.val_every == 0)) {
            last_val_loss = evaluate(&model, &val, o.val_batches);
            printf("step %d: val loss %.6f\n", step, last_val_loss);
            if (log) fprintf(log, "%d,val,%.6f,,,,\n", step, last_val_loss);
        }
        if (o.rank == 0 && o.sample_every && step > 0 && (last || step % o.sample_every == 0))
            sample_text(&model, tok, o.gen_tokens, &rng);
        if (last) break;

        double t0 = wall_seconds();
        gpt2_zero_grad(&model);
        double loss = 0.0;
        for (int micro = 0; micro < grad_accum; micro++) {
            dataloader_next_batch(&train);
            // 1/global_micro: the gradients summed over micro-steps and ranks are their mean
            loss += gpt2_forward_backward(&model, train.inputs, train.targets, o.B, o.T,
                                          1.0f / global_micro);
        }
        loss = comm_allreduce_sum_host(loss) / global_micro;
        float lr = learning_rate(&o, step, max_steps);
        float norm = gpt2_update(&model, lr, 0.9f, 0.95f, 1e-8f, o.weight_decay, o.max_grad_norm,
                                 step + 1);
        dev_synchronize();
        double ms = (wall_seconds() - t0) * 1e3;
        if (!isfinite(loss) || !isfinite(norm))
            die("training diverged at step %d (loss %f, gradient norm %f): try a lower learning "
                "rate (-l); checkpoints written so far are intact", step + 1, loss, norm);
        if (step > start_step) { total_ms += ms; timed_steps++; }   // the first step warms up
        double tok_s = o.total_batch / (ms / 1e3);
        printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %.0f tok/s\n", step + 1,
               max_steps, loss, norm, lr, ms, tok_s);
        if (log) fprintf(log, "%d,train,%.6f,%.6f,%.6e,%.3f,%.1f\n", step + 1, loss, norm, lr, ms, tok_s);
        last_train_loss = (float)loss;
        fflush(stdout);
    }

    char peak[32];
    format_bytes(peak, sizeof(peak), (double)dev_bytes_peak());
    gpt2_print_memory(&model);
    printf("summary: %d steps, final train loss %.6f, ", max_steps - start_step, last_train_loss);
    if (have_val) printf("final val loss %.6f, ", last_val_loss);
    if (timed_steps) printf("%.2f ms/step, %.0f tok/s (mean over steps after the first), ",
                            total_ms / timed_steps, o.total_batch / (total_ms / timed_steps / 1e3));
    printf("peak %s memory %s\n", backend_name(), peak);
    if (log) fclose(log);
    if (tok) tokenizer_free(&tokenizer);
    if (have_val) dataloader_free(&val);
    dataloader_free(&train);
    gpt2_free(&model);
    comm_free();
    return 0;
}
