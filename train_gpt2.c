// train_gpt2.c: the training driver. Flags, data, the loop (LR schedule, gradient
// accumulation, clipping, AdamW), validation, sampling, checkpoints and resume, progress.
// The model itself is gpt2.c; this file never touches a device pointer.
//
// Data parallelism: one process (rank) per device, launched by mpirun, torchrun, srun or by
// hand (--world, --rank, --comm-dir). Each rank trains on its own micro-batches (every
// world-th batch of the one-process sequence), gpt2_update sums the gradients over the ranks
// (ZeRO-1, runtime/comm.h), and rank 0 alone prints, logs and writes checkpoints, whose
// training state does not depend on the number of ranks.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attention/attention.h"
#include "data/dataloader.h"
#include "data/tokenizer.h"
#include "gpt2.h"
#include "runtime/comm.h"
#include "sampler.h"
#include "train_state.h"
#include "utils.h"

typedef struct {
    const char *train_pattern;   // -i
    const char *val_pattern;     // -j
    const char *init;            // -e  checkpoint path or dN
    int init_given;              // -e was on the command line (a resumed run checks it)
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
    int keep_checkpoints;        // -nk (0: all)
    int resume;                  // -y
    int recompute;               // -r  activation recomputation level (gpt2.h: RECOMPUTE_*)
    int overwrite;               // --overwrite
    int shuffle;                 // --shuffle
    int deterministic;           // --deterministic (required: refused where it cannot be)
    int nondeterministic;        // --nondeterministic
    int max_seq_len;             // --max-seq-len (from-scratch models)
    float max_grad_norm;         // --max-grad-norm
    uint64_t seed;               // --seed
    int world;                   // --world  (default: the launcher's environment, else 1)
    int rank;                    // --rank   (likewise, else 0)
    int local_rank;              // --local-rank (likewise, else -1: rank % GPUs)
    const char *comm_dir;        // --comm-dir
    const char *comm;            // --comm   auto, or the build's transport (nccl, shm)
    double comm_timeout;         // --comm-timeout
    double peak_tflops;          // --peak-tflops: the MFU's peak; 0 = the device's datasheet rate
} Options;

static void usage(FILE *out) {
    fprintf(out,
        "usage: train_gpt2 [flags]\n"
        "  -i PATTERN  training token files, a glob (default data/tinyshakespeare/tiny_shakespeare_train.bin)\n"
        "  -j PATTERN  validation token files, a glob (default data/tinyshakespeare/tiny_shakespeare_val.bin)\n"
        "  -e INIT     checkpoint to start from (llm.c v3/v5 file), or dN for a new model of N\n"
        "              layers, llm.c's sizes: d12 GPT-2 124M, d24 350M, d36 774M, d48 1.5B\n"
        "              (d60, d72, d84 too); any other N: NH=N, C=64N (default d12)\n"
        "  -o DIR      output folder for checkpoints and log.csv (default: none)\n"
        "  -b B        batch size per micro-step (default 4)\n"
        "  -t T        sequence length (default 1024)\n"
        "  -d TOKENS   tokens per optimizer step, a multiple of B*T: gradient accumulation (default B*T)\n"
        "  -l LR       peak learning rate (default 3e-4)\n"
        "  -u STEPS    linear warmup steps (default 0)\n"
        "  -q FRAC     final learning rate as a fraction of the peak, cosine decay (default 1.0: constant)\n"
        "  -c WD       AdamW weight decay on 2-D weights (default 0.0)\n"
        "  -x STEPS    optimizer steps, at least 1, or -1: one epoch of the training data (default -1)\n"
        "  -v EVERY    validate every EVERY steps, 0 = never (default 20)\n"
        "  -m BATCHES  validation batches (default 20; capped at what the files hold)\n"
        "  -s EVERY    sample text every EVERY steps, 0 = never (default 20)\n"
        "  -g TOKENS   tokens to generate when sampling (default 64)\n"
        "  -n EVERY    checkpoint every EVERY steps into -o, 0 = only at the end when -o is set (default 0)\n"
        "  -nk N       keep only the last N checkpoints in -o, 0 = all (default 0)\n"
        "  -y 1        resume from the latest checkpoint in -o (default 0)\n"
        "  -r LEVEL    recompute activations in backward to save memory: 0 none, 1 GELU,\n"
        "              2 GELU and layernorm; gradients stay bit-identical (default 0)\n"
        "  --overwrite a new run (no -y 1) into an -o folder that holds another run's checkpoints\n"
        "              and log.csv: delete them first (default: refuse)\n"
        "  --shuffle   shuffle shard and batch order every epoch\n"
        "  --deterministic  require every gradient summed in a fixed order, so that runs with\n"
        "              the same flags and a run resumed from a checkpoint match bit for bit: the\n"
        "              default wherever the backend can (the CPU, naive, flash on Hopper);\n"
        "              with it, flash's mma.sync backward on older GPUs is refused\n"
        "  --nondeterministic  let flash on Hopper add dQ in whatever order its blocks finish\n"
        "              (0.5-3%% faster; runs then differ in the last bits)\n"
        "  --seed N    seed for initialisation, shuffling and sampling (default 1337)\n"
        "  --max-seq-len N  max_seq_len of a new dN model (default max(T, 1024))\n"
        "  --max-grad-norm X  clip the global gradient norm to X, 0 = off (default 1.0)\n"
        "  --peak-tflops X   the peak the MFU is measured against (default: the GPU's\n"
        "                    datasheet dense bf16 rate, where the program knows the GPU)\n"
        "  --tokenizer PATH  tokenizer file to decode samples (default data/gpt2_tokenizer.bin)\n"
        "data parallelism (one process per device; -b is per process, -d counts all processes):\n"
        "  --world N   number of processes (default: from mpirun, torchrun or srun, else 1)\n"
        "  --rank R    this process, 0 .. N-1 (default: from the environment, else 0)\n"
        "  --local-rank R  CUDA: this process's GPU on its machine (default: from the\n"
        "              environment, else rank %% GPUs)\n"
        "  --comm-dir DIR  rendezvous folder every process can reach; needed when N > 1\n"
        "  --comm MODE auto: communication only when N > 1; %s: set it up even for N = 1 (default auto)\n"
        "  --comm-timeout S  seconds to wait for every process to join (default 120)\n"
        "  -h, --help  this text\n"
        "Ctrl-C (SIGINT), SIGTERM or SIGHUP (a closed terminal): the step in flight ends, a\n"
        "checkpoint is written into -o, and the program exits 130 (143, 129); a second one ends it\n"
        "at once. A closed or full stdout does not stop a run: log.csv and the checkpoints are its\n"
        "record. An -o folder takes one run at a time (the lock file .train_gpt2.lock in it).\n",
        comm_transport());
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
        .sample_every = 20, .gen_tokens = 64, .checkpoint_every = 0, .resume = 0, .shuffle = 0,
        .max_seq_len = 0, .max_grad_norm = 1.0f, .seed = 1337, .world = -1, .rank = -1,
        .local_rank = -1, .comm_dir = NULL, .comm = "auto", .comm_timeout = 120.0,
        .peak_tflops = 0.0};
    Flag flags[] = {
        TEXT_FLAG("-i", &o.train_pattern), TEXT_FLAG("-j", &o.val_pattern), TEXT_FLAG("-e", &o.init),
        TEXT_FLAG("-o", &o.out_dir), TEXT_FLAG("--tokenizer", &o.tokenizer_path),
        INT_FLAG("-b", &o.B, 1, 1 << 16), INT_FLAG("-t", &o.T, 1, 1 << 20),
        LONG_FLAG("-d", &o.total_batch, -1, 1L << 40), FLOAT_FLAG("-l", &o.lr, 0.0, 10.0),
        INT_FLAG("-u", &o.warmup, 0, 1 << 30), FLOAT_FLAG("-q", &o.final_lr_frac, 0.0, 1.0),
        FLOAT_FLAG("-c", &o.weight_decay, 0.0, 10.0), INT_FLAG("-x", &o.max_steps, -1, 1 << 30),
        INT_FLAG("-v", &o.val_every, 0, 1 << 30), INT_FLAG("-m", &o.val_batches, 1, 1 << 30),
        INT_FLAG("-s", &o.sample_every, 0, 1 << 30), INT_FLAG("-g", &o.gen_tokens, 1, 1 << 20),
        INT_FLAG("-n", &o.checkpoint_every, 0, 1 << 30), INT_FLAG("-nk", &o.keep_checkpoints, 0, 1 << 20),
        INT_FLAG("-y", &o.resume, 0, 1), INT_FLAG("-r", &o.recompute, 0, RECOMPUTE_LEVELS - 1),
        SWITCH_FLAG("--overwrite", &o.overwrite),
        SWITCH_FLAG("--shuffle", &o.shuffle), SWITCH_FLAG("--deterministic", &o.deterministic),
        SWITCH_FLAG("--nondeterministic", &o.nondeterministic),
        U64_FLAG("--seed", &o.seed, 0, LONG_MAX),
        INT_FLAG("--max-seq-len", &o.max_seq_len, 1, 1 << 20),
        FLOAT_FLAG("--max-grad-norm", &o.max_grad_norm, 0.0, 1e9),
        INT_FLAG("--world", &o.world, 1, 1 << 20), INT_FLAG("--rank", &o.rank, 0, 1 << 20),
        INT_FLAG("--local-rank", &o.local_rank, 0, 1 << 10), TEXT_FLAG("--comm-dir", &o.comm_dir),
        TEXT_FLAG("--comm", &o.comm), DOUBLE_FLAG("--comm-timeout", &o.comm_timeout, 0.0, 1e6),
        DOUBLE_FLAG("--peak-tflops", &o.peak_tflops, 0.0, 1e6)};
    const int n_flags = (int)(sizeof(flags) / sizeof(flags[0]));
    parse_flags(argc, argv, flags, n_flags, "train_gpt2", usage, NULL, 0);
    o.init_given = flag_named(flags, n_flags, "-e")->given;
    if (o.max_steps == 0) die("flag -x: 0 steps trains nothing; give a positive count, or -1 for one epoch");
    ranks_from_environment(&o);
    if (o.rank >= o.world)
        die("rank %d is outside a world of %d rank(s): ranks are 0 .. world-1", o.rank, o.world);
    if (strcmp(o.comm, "auto") != 0 && strcmp(o.comm, comm_transport()) != 0)
        die("flag --comm: '%s' is not this build's transport; use auto or %s", o.comm, comm_transport());
    // every size derived from the flags, in 64 bits: B*T indexes one micro-batch's tokens as an
    // int, and the micro-steps of a step are counted in an int (and in the training state)
    long tokens = (long)o.B * o.T, micro = tokens * o.world;   // one micro-step, one and all ranks
    if (tokens > INT_MAX)
        die("flags -b %d -t %d: %ld tokens per micro-batch, more than %d", o.B, o.T, tokens, INT_MAX);
    if (o.total_batch == -1) o.total_batch = micro;
    if (o.total_batch <= 0 || o.total_batch % micro != 0)
        die("flag -d: total batch %ld tokens is not a positive multiple of B*T*world = %d*%d*%d = %ld",
            o.total_batch, o.B, o.T, o.world, micro);
    if (o.total_batch / tokens > INT_MAX)
        die("flag -d: %ld tokens per step are %ld micro-batches of B*T = %ld, more than %d", o.total_batch,
            o.total_batch / tokens, tokens, INT_MAX);
    if (o.resume && !o.out_dir) die("flag -y 1 needs -o: the folder to resume from");
    if (o.out_dir && !o.out_dir[0]) die("flag -o needs a folder name, not an empty one");
    if (o.resume && o.overwrite) die("flags -y 1 and --overwrite: resume the run in -o, or replace it; not both");
    if (o.deterministic && o.nondeterministic)
        die("flags --deterministic and --nondeterministic: give one of them, not both");
    if (o.overwrite && !o.out_dir) die("flag --overwrite needs -o: the folder whose run it replaces");
    if (o.checkpoint_every && !o.out_dir) die("flag -n needs -o: the folder to write checkpoints to");
    if (o.keep_checkpoints && !o.out_dir) die("flag -nk needs -o: the folder whose checkpoints it prunes");
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
// the output folder: checkpoints (model_%08d.bin + state_%08d.bin, a step's checkpoint only
// when both are there: the model file is written first) and log.csv

static void model_path(char *buf, size_t n, const char *dir, int step) {
    snprintf(buf, n, "%s/model_%08d.bin", dir, step);
}
static void state_path(char *buf, size_t n, const char *dir, int step) {
    snprintf(buf, n, "%s/state_%08d.bin", dir, step);
}

// the step of a checkpoint file's name ("model_%08d.bin" or "state_%08d.bin"), or -1
static int checkpoint_step(const char *name, const char *prefix) {
    size_t len = strlen(prefix);
    if (strncmp(name, prefix, len) != 0) return -1;
    int step, consumed = 0;
    if (sscanf(name + len, "%d.bin%n", &step, &consumed) != 1 || consumed == 0 ||
        name[len + consumed] != '\0' || step < 0)
        return -1;
    return step;
}

// the steps of the complete checkpoints in dir: the newest max of them into steps, newest
// first; returns how many there are in all
static int list_checkpoints(const char *dir, int *steps, int max) {
    DIR *d = opendir(dir);
    if (!d) die("cannot read folder %s: %s", dir, strerror(errno));
    int n = 0, kept = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int step = checkpoint_step(e->d_name, "state_");
        char path[4096];
        model_path(path, sizeof(path), dir, step);
        if (step < 0 || !file_exists(path)) continue;
        n++;
        if (kept == max && step < steps[max - 1]) continue;
        int i = kept < max ? kept++ : max - 1;   // insertion, dropping the oldest when full
        for (; i > 0 && steps[i - 1] < step; i--) steps[i] = steps[i - 1];
        steps[i] = step;
    }
    closedir(d);
    return n;
}

// A fresh run must not mix with another run's files (a later -y 1 would resume from its
// checkpoints, and its log would be cut): refuses, or with --overwrite names what goes. The
// files are deleted by remove_previous_run, once the model is built (-e may be one of them).
static int previous_run_files(const char *dir, int remove_them) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    char first[512] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        if (checkpoint_step(e->d_name, "model_") < 0 && checkpoint_step(e->d_name, "state_") < 0 &&
            strcmp(e->d_name, "log.csv") != 0)
            continue;
        if (!n) snprintf(first, sizeof(first), "%s", e->d_name);
        n++;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (remove_them && unlink(path) != 0) die("cannot delete %s: %s", path, strerror(errno));
    }
    closedir(d);
    if (n && !remove_them)
        die("-o %s holds another run (%s and %d more file(s) of checkpoints and log): resume it with "
            "-y 1, write elsewhere with another -o, or delete them with --overwrite", dir, first, n - 1);
    return n;
}

// -nk: deletes the files of the checkpoints older than the newest keep: every state file
// first, then the model files, so that a kill in between leaves model files alone, which are
// no checkpoint (and go with the next pruning)
static void prune_checkpoints(const char *dir, int keep) {
    if (keep <= 0) return;
    int *steps = malloc((size_t)keep * sizeof(int));
    if (!steps) die("out of host memory for -nk %d", keep);
    int n = list_checkpoints(dir, steps, keep), oldest_kept = n > keep ? steps[keep - 1] : 0;
    free(steps);
    if (n <= keep) return;
    int removed = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *prefix = pass == 0 ? "state_" : "model_";
        DIR *d = opendir(dir);
        if (!d) die("cannot read folder %s: %s", dir, strerror(errno));
        struct dirent *e;
        while ((e = readdir(d))) {
            int step = checkpoint_step(e->d_name, prefix);
            if (step < 0 || step >= oldest_kept) continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            if (unlink(path) != 0) die("cannot delete %s: %s", path, strerror(errno));
            removed += pass == 0;
        }
        closedir(d);
    }
    if (removed) printf("removed %d older checkpoint(s) (-nk %d)\n", removed, keep);
}

// every rank calls it (the optimizer state is gathered from all); rank 0 writes the files
static void save_checkpoint(const Options *o, const GPT2 *model, const DataLoader *train,
                            int step, int global_micro, uint64_t rng) {
    int writer = comm_rank() == 0;
    char path[4096];
    model_path(path, sizeof(path), o->out_dir, step);
    if (writer) gpt2_save_checkpoint(model, path);
    TrainState s = {.step = step, .B = o->B, .T = o->T, .micro_batches = global_micro,
                    .has_master = model->master_weights != NULL, .data_epoch = train->pos.epoch,
                    .data_shard = train->pos.shard, .data_batch = train->pos.batch, .rng = rng,
                    .num_parameters = model->num_parameters, .shuffle = o->shuffle, .seed = o->seed,
                    .data_files = train->num_shards, .data_tokens = train->total_tokens,
                    .data_hash = train->hash};
    uint8_t header[TRAIN_STATE_HEADER_BYTES];
    train_state_pack(&s, header);
    state_path(path, sizeof(path), o->out_dir, step);
    AtomicFile af;
    if (writer) {
        atomic_open(&af, path);
        atomic_write(&af, header, sizeof(header));
    }
    gpt2_write_optimizer_state(model, writer ? &af : NULL);
    if (!writer) return;
    atomic_commit(&af);
    printf("saved checkpoint %s/model_%08d.bin and state_%08d.bin\n", o->out_dir, step, step);
    prune_checkpoints(o->out_dir, o->keep_checkpoints);
}

// the newest complete checkpoint in dir, or -1; a newer model file without its state file
// (a kill between the two writes) is named and passed over
static int latest_checkpoint(const char *dir) {
    int best = -1;
    list_checkpoints(dir, &best, 1);
    DIR *d = opendir(dir);
    if (!d) die("cannot read folder %s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        int step = checkpoint_step(e->d_name, "model_");
        if (step > best)
            printf("note: %s/%s has no state_%08d.bin (its checkpoint was cut short): not resumed "
                   "from; a run that reaches step %d writes it anew\n", dir, e->d_name, step, step);
    }
    closedir(d);
    return best;
}

// every rank reads the model and the training state (and its own shard of the optimizer state)
static int resume_from(const Options *o, GPT2 *model, TrainState *s) {
    int step = latest_checkpoint(o->out_dir);
    if (step < 0) die("-y 1: no checkpoint (model_*.bin with state_*.bin) in %s", o->out_dir);
    char path[4096];
    model_path(path, sizeof(path), o->out_dir, step);
    gpt2_load_checkpoint(model, path);
    state_path(path, sizeof(path), o->out_dir, step);
    FILE *f = fopen_or_die(path, "rb");
    long size = file_size_or_die(f, path);
    uint8_t header[TRAIN_STATE_HEADER_BYTES];
    size_t n = size < (long)sizeof(header) ? (size_t)size : sizeof(header);
    fread_or_die(header, 1, n, f, path);
    char err[256];
    if (train_state_unpack(header, n, (uint64_t)size, s, err, sizeof(err)) != 0) die("%s: %s", path, err);
    // one pass over the optimizer state before it is used: a corrupt value would otherwise
    // surface steps later as a diverged loss
    long begin = (long)train_state_header_bytes(s->version);
    if (fseek(f, begin, SEEK_SET) != 0) die("%s: cannot seek: %s", path, strerror(errno));
    if (train_state_check_values(s, f, err, sizeof(err)) != 0) die("%s: %s", path, err);
    if (s->step != step) die("%s: holds step %d, its name says %d", path, s->step, step);
    if (s->num_parameters != model->num_parameters || s->has_master != (model->master_weights != NULL))
        die("%s: written for a model of %llu parameters%s; the checkpoint beside it has %zu%s",
            path, (unsigned long long)s->num_parameters, s->has_master ? " with master weights" : "",
            model->num_parameters, model->master_weights ? " with master weights" : "");
    if (fseek(f, begin, SEEK_SET) != 0) die("%s: cannot seek: %s", path, strerror(errno));
    gpt2_read_optimizer_state(model, f, path);
    fclose(f);
    printf("resumed from %s/model_%08d.bin at step %d\n", o->out_dir, step, step);
    return step;
}

// A resumed run continues the model of its checkpoint. The flags that choose a new run's model
// (-e, --max-seq-len) may be given again, as "resume with the same flags" says, but must agree
// with it: a resume is never quietly a run of another model.
static void check_resumed_model(const Options *o, const GPT2 *model) {
    const GPT2Config *c = &model->config;
    if (o->max_seq_len && o->max_seq_len != c->max_seq_len)
        die("flag --max-seq-len %d with -y 1: the run in %s has max_seq_len %d (a resumed run keeps "
            "its checkpoint's model); drop the flag, or start a new run into another -o",
            o->max_seq_len, o->out_dir, c->max_seq_len);
    if (!o->init_given) return;
    GPT2Config want;
    if (gpt2_config_from_name(&want, o->init, c->max_seq_len) != 0)
        want = gpt2_checkpoint_config(o->init);
    if (want.num_layers != c->num_layers || want.num_heads != c->num_heads ||
        want.channels != c->channels || want.vocab_size != c->vocab_size)
        die("flags -e %s and -y 1: the run in %s is a model of L=%d NH=%d C=%d V=%d, and %s is "
            "L=%d NH=%d C=%d V=%d: a resumed run continues its own model; drop -e, or start a new "
            "run from %s into another -o", o->init, o->out_dir, c->num_layers, c->num_heads,
            c->channels, c->vocab_size, o->init, want.num_layers, want.num_heads, want.channels,
            want.vocab_size, o->init);
}

// A resumed run must read the batches that the run would have read next: the shapes its
// training state was written with must be these flags' (checked once the data loader knows
// the micro-batches of a step), and so must the data order: the same training tokens (files,
// count and hash), --shuffle, and with it --seed, whose permutations it draws. Version 1 files
// do not record the order; it is passed over with a note.
static void check_resumed_state(const Options *o, const TrainState *s, int global_micro,
                                const DataLoader *train) {
    if (s->B != o->B || s->T != o->T || s->micro_batches != global_micro)
        die("%s/state_%08d.bin: was written with -b %d -t %d and %d micro-batches per step (all "
            "ranks); these flags say -b %d -t %d and %d: resume with the same -b, -t and -d",
            o->out_dir, s->step, s->B, s->T, s->micro_batches, o->B, o->T, global_micro);
    if (s->version < 2) {
        printf("note: %s/state_%08d.bin is a version %d training state, which does not record the "
               "training data or --shuffle: resuming without checking them\n", o->out_dir, s->step,
               s->version);
        return;
    }
    if (s->data_files != train->num_shards || s->data_tokens != train->total_tokens ||
        s->data_hash != train->hash)
        die("%s/state_%08d.bin: the run was trained on %d file(s) of %llu tokens (token hash "
            "%016llx), and -i %s is %d file(s) of %llu tokens (token hash %016llx): its next batches "
            "would not be the run's; resume with the same training files, or start a new run into "
            "another -o", o->out_dir, s->step, s->data_files, (unsigned long long)s->data_tokens,
            (unsigned long long)s->data_hash, o->train_pattern, train->num_shards,
            (unsigned long long)train->total_tokens, (unsigned long long)train->hash);
    if (s->shuffle != o->shuffle)
        die("%s/state_%08d.bin: the run was trained %s --shuffle, and these flags %s it: the order "
            "of its next batches would change; resume with%s --shuffle", o->out_dir, s->step,
            s->shuffle ? "with" : "without", o->shuffle ? "give" : "do not give",
            s->shuffle ? "" : "out");
    if (s->shuffle && s->seed != o->seed)
        die("%s/state_%08d.bin: the run shuffled its batches with --seed %llu, and these flags say "
            "--seed %llu: the order of its next batches would change; resume with --seed %llu",
            o->out_dir, s->step, (unsigned long long)s->seed, (unsigned long long)o->seed,
            (unsigned long long)s->seed);
}

// ----------------------------------------------------------------------------------------
// log.csv: a header, then a line per step and per validation. Each line goes to the file in
// one write() as it is made, so after any kill (-9 included) the log holds complete lines up
// to the last step. A resumed run continues the log from its checkpoint's step: the lines a
// run wrote after that step (it went on past its last checkpoint) are dropped first, so that
// the log reads as the one run that the checkpoints hold.

#define LOG_HEADER "step,kind,loss,grad_norm,lr,ms,tokens_per_s\n"

typedef struct {
    int fd;               // -1: no log (no -o, or not rank 0)
    char path[4096];
} Log;

static void log_line(Log *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_line(Log *log, const char *fmt, ...) {
    if (log->fd < 0) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof(line)) die("internal error: a log line longer than %zu bytes", sizeof(line));
    // A short write (disk full, a file-size limit) is retried for the rest, which reports the
    // cause; the part that went in is cut off again, so the log never ends in half a line.
    off_t start = lseek(log->fd, 0, SEEK_END);
    for (ssize_t done = 0, w; done < n; done += w) {
        w = write(log->fd, line + done, (size_t)(n - done));
        if (w < 0 && errno == EINTR) w = 0;
        else if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            if (start >= 0 && ftruncate(log->fd, start) != 0) {
                die("%s: write error: %s; and its last line could not be cut back: %s", log->path,
                    strerror(e), strerror(errno));
            }
            die("%s: write error: %s (the log keeps its complete lines, the checkpoints are as "
                "they were)", log->path, strerror(e));
        }
    }
}

// keeps the header and the complete lines of steps up to resume_step: a step's train line is
// logged before its checkpoint is written, its validation after (and again on resuming)
static void cut_log(const char *path, int resume_step) {
    FILE *in = fopen(path, "rb");
    if (!in) return;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, LOG_HEADER, strlen(LOG_HEADER));
    char line[1024];
    int dropped = 0;
    while (fgets(line, sizeof(line), in)) {
        int step, consumed = 0;
        char kind[8];
        size_t len = strlen(line);
        int keep = len > 0 && line[len - 1] == '\n' &&
                   sscanf(line, "%d,%7[a-z],%n", &step, kind, &consumed) == 2 && consumed > 0 &&
                   ((!strcmp(kind, "train") && step <= resume_step) ||
                    (!strcmp(kind, "val") && step < resume_step));
        if (keep) atomic_write(&af, line, len);
        else dropped += strcmp(line, LOG_HEADER) != 0;
    }
    if (ferror(in)) die("%s: read error: %s", path, strerror(errno));
    fclose(in);
    atomic_commit(&af);
    if (dropped) printf("log: dropped %d line(s) of %s past the checkpoint's step %d\n", dropped, path, resume_step);
}

static Log open_log(const char *dir, int resume_step) {
    Log log = {-1, ""};
    snprintf(log.path, sizeof(log.path), "%s/log.csv", dir);
    if (resume_step >= 0) cut_log(log.path, resume_step);
    int exists = file_exists(log.path);
    log.fd = open(log.path, O_WRONLY | O_CREAT | O_APPEND | (resume_step < 0 ? O_TRUNC : 0), 0644);
    if (log.fd < 0) die("cannot open %s for writing: %s", log.path, strerror(errno));
    if (resume_step < 0 || !exists) log_line(&log, "%s", LOG_HEADER);
    return log;
}

// ----------------------------------------------------------------------------------------
// interrupts: SIGINT, SIGTERM and SIGHUP (the terminal or ssh session closed) ask the loop to
// stop at the end of the step in flight (the handler only sets a flag); the loop then writes a
// checkpoint into -o and exits 128 + the signal. A second signal ends the program at once, its
// temporary files removed. Two signals that would end the program silently are ignored, so that
// the writes they stand for fail with a cause instead: SIGPIPE (stdout closed: printing fails
// and the run goes on, as it does into a full /dev/full) and SIGXFSZ (past a file-size limit:
// the checkpoint or log write fails with "File too large" and the program says so and stops).

static volatile sig_atomic_t stop_signal = 0;

static void on_stop_signal(int sig) {
    if (stop_signal) {
        atomic_remove_all_signal_safe();
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
    static const char note[] = "\ninterrupted: the step in flight ends, then a checkpoint is "
                               "written (-o); interrupt again to quit at once\n";
    if (write(STDERR_FILENO, note, sizeof(note) - 1) < 0) return;   // nothing to do about it
}

static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;   // reads and writes in flight continue
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
}

// Collective, once per step: every rank stops when any was signalled, so that all take the
// same step's checkpoint. Returns the signal, or 0; a rank not signalled itself reports
// SIGTERM (it was asked to stop from outside).
static int stop_requested(void) {
    int mine = stop_signal;
    if (comm_allreduce_sum_host(mine ? 1.0 : 0.0) == 0.0) return 0;
    return mine ? mine : SIGTERM;
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
// An output folder belongs to one run at a time: an exclusive flock on DIR/.train_gpt2.lock,
// held for the life of the process (the kernel lets it go however the process ends, so a crash
// never leaves the folder locked), taken before anything is written there. The holder writes
// its process id into the file, for the message of a run that finds the folder taken.
static void lock_output_folder(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/.train_gpt2.lock", dir) >= (int)sizeof(path))
        die("folder name too long: %s", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) die("cannot open %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) die("cannot lock %s: %s", path, strerror(errno));
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        die("-o %s is in use by another run (process %s holds %s): wait for it to end, or write "
            "elsewhere with another -o", dir, pid[0] ? pid : "whose id is not written yet", path);
    }
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        die("%s: write error: %s", path, strerror(errno));
    // fd stays open, and the lock with it, until the process ends
}

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

// Model FLOPs utilisation, by llm.c's convention: 6 FLOPs per parameter per token (forward
// and backward of every matrix product, the tied LM head counted once with wte) plus 6 L C T
// for attention's QK^T and PV (forward 2 L T C per token, backward twice that, causal masking
// not subtracted), against the peak the device's datasheet gives (device_peak_flops) or
// --peak-tflops.
static double flops_per_token(const GPT2 *model, int T) {
    const GPT2Config *c = &model->config;
    return 6.0 * (double)model->num_parameters + 6.0 * c->num_layers * c->channels * (double)T;
}

// ----------------------------------------------------------------------------------------
// the run: set-up, the table, the step, the summary. main reads as their sequence.

typedef struct {
    GPT2 model;
    DataLoader train, val;
    int have_val;                   // -v > 0
    Tokenizer tokenizer;
    const Tokenizer *tok;           // &tokenizer, or NULL when there is no tokenizer file
    CommConfig comm;
    int start_step, max_steps;      // the loop runs steps start_step .. max_steps
    int global_micro;               // micro-batches per step, all ranks
    int grad_accum;                 // micro-batches per step, this rank
    long batches_per_epoch;
    uint64_t rng;                   // the samples' random stream
    double peak_flops;              // the MFU's peak (0: none known), from peak_source
    const char *peak_source;
    double step_flops;              // one step's FLOPs on this rank
    Log log;
    // the loop's record, for the summary
    double total_ms;                // of the steps after the first (which warms up)
    int timed_steps, steps_done, interrupted;
    float last_train_loss, last_val_loss;
} Run;

// The other ranks first (on CUDA this also picks this process's GPU), then the backend and
// the attention's summation order; rank 0 alone prints, the others' errors still reach stderr.
static void start_backend(const Options *o, Run *r) {
    r->comm = (CommConfig){.rank = o->rank, .world = o->world, .local_rank = o->local_rank,
                           .dir = o->comm_dir, .timeout_s = o->comm_timeout,
                           .force = strcmp(o->comm, "auto") != 0};
    comm_init(&r->comm);
    if (backend_init() != 0) die("the %s backend could not start (see above)", backend_name());
    // A fixed order unless --nondeterministic; where the backend cannot (flash's mma.sync
    // backward) the run goes on without it, unless --deterministic requires it.
    if (attention_set_deterministic(!o->nondeterministic) < o->deterministic)
        die("flag --deterministic: %s attention's backward on this device sums dQ with atomics, in "
            "no fixed order; build with ATTENTION=naive, or train on a Hopper GPU (H100, H200)",
            attention_name);
    if (o->rank != 0 && !freopen("/dev/null", "w", stdout)) die("rank %d: cannot silence its output", o->rank);
}

// The output folder first: what a kill -9 left behind goes, and a new run does not mix with
// another one (checked before anything slow).
static void claim_output_folder(const Options *o) {
    if (!o->out_dir || o->rank != 0) return;
    make_dir(o->out_dir);
    lock_output_folder(o->out_dir);
    int stale = atomic_remove_stale(o->out_dir);
    if (stale) printf("removed %d temporary file(s) that an interrupted write left in %s\n", stale, o->out_dir);
    if (!o->resume && !o->overwrite) previous_run_files(o->out_dir, 0);
}

// The model: resumed from -o's latest checkpoint (its training state into *state), a new dN,
// or a checkpoint file given with -e.
static void build_model(const Options *o, Run *r, TrainState *state) {
    GPT2 *model = &r->model;
    if (o->resume) {
        r->start_step = resume_from(o, model, state);
        check_resumed_model(o, model);
    } else {
        GPT2Config config;
        int max_seq_len = o->max_seq_len ? o->max_seq_len : (o->T > 1024 ? o->T : 1024);
        if (gpt2_config_from_name(&config, o->init, max_seq_len) == 0) {
            gpt2_init_random(model, config, o->seed);
        } else {
            int depth, consumed = 0;
            if (!file_exists(o->init) && sscanf(o->init, "d%d%n", &depth, &consumed) == 1 &&
                o->init[consumed] == '\0')
                die("flag -e %s: a new model is dN with N from 1 to 256 layers (d12: GPT-2 124M), "
                    "and no checkpoint file is called %s", o->init, o->init);
            if (o->max_seq_len) die("flag --max-seq-len applies to new models only, not to %s", o->init);
            gpt2_load_checkpoint(model, o->init);
        }
    }
    if (o->T > model->config.max_seq_len)
        die("flag -t %d is longer than the model's max_seq_len %d (from %s)", o->T,
            model->config.max_seq_len, o->resume ? o->out_dir : o->init);
}

// The data: every token file is checked against the model's vocabulary as it is opened. Then
// the steps (-x, or one epoch), and for a resumed run its training state's checks, its data
// position and its sampling stream.
static void open_data(const Options *o, Run *r, const TrainState *state) {
    int V = r->model.config.vocab_size;
    dataloader_init(&r->train, o->train_pattern, o->B, o->T, o->shuffle, o->seed, V, "training", 0);
    dataloader_set_rank(&r->train, o->rank, o->world);
    r->have_val = o->val_every > 0;
    if (r->have_val) {
        // a validation file smaller than a training batch is read in batches of fewer rows
        dataloader_init(&r->val, o->val_pattern, o->B, o->T, 0, o->seed, V, "validation", 1);
        dataloader_set_rank(&r->val, o->rank, o->world);
        if (r->val.B < o->B && o->rank == 0)
            note("validation in batches of %d rows: %s holds fewer than the %zu tokens of a batch "
                 "of -b %d -t %d", r->val.B, o->val_pattern, (size_t)o->B * o->T + 1, o->B, o->T);
    }
    r->global_micro = (int)(o->total_batch / ((long)o->B * o->T));
    r->grad_accum = r->global_micro / o->world;
    for (int i = 0; i < r->train.num_shards; i++)
        r->batches_per_epoch += (long)((r->train.shard_tokens[i] - 1) / ((size_t)o->B * o->T));
    long epoch_steps = r->batches_per_epoch / r->global_micro;
    if (o->max_steps < 0 && epoch_steps >= 1 << 30)
        die("one epoch of %s is %ld steps, more than %d: give the number of steps with -x",
            o->train_pattern, epoch_steps, 1 << 30);
    r->max_steps = o->max_steps >= 0 ? o->max_steps : (int)epoch_steps;
    if (r->max_steps < 1) r->max_steps = 1;   // an epoch shorter than one step: one step
    r->rng = sampler_seed(o->seed, 0);
    if (!o->resume) return;
    check_resumed_state(o, state, r->global_micro, &r->train);
    if (r->max_steps <= r->start_step)
        die("flag -x: the checkpoint in %s is already at step %d, so -x %d trains nothing; give "
            "the total number of steps, more than %d", o->out_dir, r->start_step, r->max_steps, r->start_step);
    DataPosition pos = {state->data_epoch, state->data_shard, state->data_batch};
    dataloader_seek(&r->train, pos);
    r->rng = state->rng;
}

static void load_tokenizer(const Options *o, Run *r) {
    r->tok = NULL;
    if (file_exists(o->tokenizer_path)) {
        tokenizer_load(&r->tokenizer, o->tokenizer_path);
        r->tok = &r->tokenizer;
    } else {
        printf("note: no tokenizer file at %s (run `make data`); samples print token ids\n",
               o->tokenizer_path);
    }
}

// the table of what this run is: backend, model, data, batch, schedule, MFU, checkpoints
static void print_run_table(const Options *o, Run *r) {
    const GPT2 *model = &r->model;
    char desc[256];
    backend_describe(desc, sizeof(desc));
    printf("+-------------------+----------------------------------------------------+\n");
    printf("| backend           | %s, %s, attention=%s%s\n", backend_name(), FLOATX_NAME, attention_name,
           attention_deterministic() ? ", deterministic" : "");
    printf("| device            | %s\n", desc);
    printf("| init              | %s%s\n", o->resume ? o->out_dir : o->init, o->resume ? " (resumed)" : "");
    gpt2_print_config(model);
    printf("| train data        | %s: %d file(s), %zu tokens, %ld batches/epoch\n", o->train_pattern,
           r->train.num_shards, r->train.total_tokens, r->batches_per_epoch);
    if (r->have_val) printf("| val data          | %s: %zu tokens\n", o->val_pattern, r->val.total_tokens);
    if (o->world > 1 || r->comm.force)
        printf("| data parallel     | %d ranks (%s, rendezvous in %s), ZeRO-1\n", o->world,
               comm_transport(), o->comm_dir);
    printf("| batch             | B=%d T=%d, %d micro-steps%s: %ld tokens/step\n", o->B, o->T, r->grad_accum,
           o->world > 1 ? " on each rank" : "", o->total_batch);
    char act_bytes[32];
    format_bytes(act_bytes, sizeof(act_bytes),
                 (double)gpt2_activation_bytes(model->config, o->B, o->T, o->recompute));
    printf("| recompute         | -r %d (%s): activations %s\n", o->recompute,
           gpt2_recompute_names[o->recompute], act_bytes);
    printf("| steps             | %d (from %d)\n", r->max_steps, r->start_step);
    printf("| learning rate     | %.2e, warmup %d, final fraction %.3f, weight decay %.3f, clip %.2f\n",
           o->lr, o->warmup, o->final_lr_frac, o->weight_decay, o->max_grad_norm);
    printf("| seed              | %llu%s\n", (unsigned long long)o->seed, o->shuffle ? ", shuffled" : "");
    r->peak_source = "--peak-tflops";
    r->peak_flops = o->peak_tflops > 0.0 ? o->peak_tflops * 1e12 : device_peak_flops(&r->peak_source);
    // the peak is one device's; with several ranks each does 1/world of the step's tokens
    r->step_flops = flops_per_token(model, o->T) * (double)o->total_batch / o->world;
    if (r->peak_flops > 0.0)
        printf("| MFU               | 6N + 6LCT = %.3g FLOP/token (llm.c's count), against %.4g TFLOP/s (%s)%s\n",
               flops_per_token(model, o->T), r->peak_flops / 1e12, r->peak_source, o->world > 1 ? " per GPU" : "");
    else
        printf("| MFU               | not shown: no peak rate known for this device (give one with --peak-tflops)\n");
    if (o->out_dir) {
        double model_bytes = (double)gpt2_checkpoint_bytes(model);
        double state_bytes = (double)train_state_bytes(model->num_parameters, model->master_weights != NULL);
        char each[32], m[32], s[32], all[32] = "";
        format_bytes(each, sizeof(each), model_bytes + state_bytes);
        format_bytes(m, sizeof(m), model_bytes);
        format_bytes(s, sizeof(s), state_bytes);
        if (o->keep_checkpoints) format_bytes(all, sizeof(all), o->keep_checkpoints * (model_bytes + state_bytes));
        printf("| checkpoints       | %s each (model %s + state %s) into %s, ", each, m, s, o->out_dir);
        if (o->checkpoint_every) printf("every %d steps and at the end", o->checkpoint_every);
        else printf("at the end");
        if (o->keep_checkpoints) printf(", the last %d kept (%s)\n", o->keep_checkpoints, all);
        else printf(", all kept\n");
    }
    printf("+-------------------+----------------------------------------------------+\n");
    fflush(stdout);
}

// One optimizer step (step is 0-based): the micro-batches' gradients, AdamW, then its line on
// stdout and in log.csv. Dies when the loss or the gradient norm is not finite.
static void train_step(const Options *o, Run *r, int step) {
    GPT2 *model = &r->model;
    double t0 = wall_seconds();
    gpt2_zero_grad(model);
    // the micro-batches and the update go to the device back to back: nothing in between waits
    // for it (the losses and the norm stay on the device until the end of the step)
    for (int micro = 0; micro < r->grad_accum; micro++) {
        dataloader_next_batch(&r->train);
        // 1/global_micro: the gradients summed over micro-steps and ranks are their mean
        gpt2_forward_backward(model, r->train.inputs, r->train.targets, o->B, o->T,
                              1.0f / r->global_micro);
    }
    float lr = learning_rate(o, step, r->max_steps);
    float norm = gpt2_update(model, lr, 0.9f, 0.95f, 1e-8f, o->weight_decay, o->max_grad_norm, step + 1);
    double loss = comm_allreduce_sum_host(gpt2_loss_sum(model)) / r->global_micro;
    double ms = (wall_seconds() - t0) * 1e3;
    if (!isfinite(loss) || !isfinite(norm))
        die("training diverged at step %d (loss %f, gradient norm %f): try a lower learning "
            "rate (-l); checkpoints written so far are intact", step + 1, loss, norm);
    if (step > r->start_step) { r->total_ms += ms; r->timed_steps++; }   // the first step warms up
    double tok_s = o->total_batch / (ms / 1e3);
    printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %.0f tok/s", step + 1,
           r->max_steps, loss, norm, lr, ms, tok_s);
    if (r->peak_flops > 0.0) printf(" | MFU %.1f%%", 100.0 * r->step_flops / (ms / 1e3) / r->peak_flops);
    printf("\n");
    log_line(&r->log, "%d,train,%.6f,%.6f,%.6e,%.3f,%.1f\n", step + 1, loss, norm, lr, ms, tok_s);
    r->last_train_loss = (float)loss;
    fflush(stdout);
}

// memory, losses, speed and MFU of the run, and where an interrupted one stands
static void print_summary(const Options *o, const Run *r) {
    char peak[32];
    format_bytes(peak, sizeof(peak), (double)dev_bytes_peak());
    gpt2_print_memory(&r->model);
    printf("summary: %d steps, final train loss %.6f, ", r->steps_done - r->start_step, r->last_train_loss);
    if (r->have_val) printf("final val loss %.6f, ", r->last_val_loss);
    if (r->timed_steps) {
        double mean_s = r->total_ms / r->timed_steps / 1e3;
        printf("%.2f ms/step, %.0f tok/s (mean over steps after the first), %.3g TFLOP/s, ",
               mean_s * 1e3, o->total_batch / mean_s, r->step_flops / mean_s / 1e12);
        if (r->peak_flops > 0.0)
            printf("MFU %.1f%% of %.4g TFLOP/s, ", 100.0 * r->step_flops / mean_s / r->peak_flops,
                   r->peak_flops / 1e12);
    }
    printf("peak %s memory %s\n", backend_name(), peak);
    if (r->interrupted) {
        if (!o->out_dir) printf("interrupted after step %d: no -o, so no checkpoint\n", r->steps_done);
        else if (r->steps_done > r->start_step)
            printf("interrupted after step %d: resume with the same flags and -y 1\n", r->steps_done);
        else printf("interrupted before a step was trained: nothing new to save\n");
    }
}

int main(int argc, char **argv) {
    Options o = parse_options(argc, argv);
    catch_stop_signals();
    static Run run;   // static: zeroed, so the loop's counters start at 0
    Run *r = &run;
    start_backend(&o, r);
    claim_output_folder(&o);
    TrainState state;
    build_model(&o, r, &state);
    open_data(&o, r, &state);
    if (o.overwrite && o.rank == 0) {
        int removed = previous_run_files(o.out_dir, 1);
        if (removed) printf("--overwrite: deleted %d file(s) of the earlier run in %s\n", removed, o.out_dir);
    }
    gpt2_set_recompute(&r->model, o.recompute);
    allocate_activations(&o, &r->model);
    load_tokenizer(&o, r);
    print_run_table(&o, r);
    r->log = (Log){-1, ""};
    if (o.out_dir && o.rank == 0) r->log = open_log(o.out_dir, o.resume ? r->start_step : -1);

    // step 0 .. max_steps: at each, the checkpoint, validation and sample that are due, then
    // (before max_steps) the next step; a stop signal ends the loop with a checkpoint
    r->steps_done = r->start_step;
    r->last_train_loss = r->last_val_loss = NAN;
    for (int step = r->start_step; step <= r->max_steps; step++) {
        r->steps_done = step;
        r->interrupted = stop_requested();
        int last = step == r->max_steps || r->interrupted;
        int save = o.out_dir && step > r->start_step &&
                   (last || (o.checkpoint_every && step % o.checkpoint_every == 0));
        if (save) save_checkpoint(&o, &r->model, &r->train, step, r->global_micro, r->rng);
        if (r->interrupted) break;
        if (r->have_val && (last || step % o.val_every == 0)) {
            r->last_val_loss = evaluate(&r->model, &r->val, o.val_batches);
            printf("step %d: val loss %.6f\n", step, r->last_val_loss);
            log_line(&r->log, "%d,val,%.6f,,,,\n", step, r->last_val_loss);
        }
        if (o.rank == 0 && o.sample_every && step > 0 && (last || step % o.sample_every == 0))
            sample_text(&r->model, r->tok, o.gen_tokens, &r->rng);
        if (last) break;
        // a signal during the checkpoint, validation or sampling stops before the next step
        if ((r->interrupted = stop_requested())) {
            if (o.out_dir && step > r->start_step && !save)
                save_checkpoint(&o, &r->model, &r->train, step, r->global_micro, r->rng);
            break;
        }
        train_step(&o, r, step);
    }

    print_summary(&o, r);
    if (r->log.fd >= 0 && close(r->log.fd) != 0) die("%s: write error: %s", r->log.path, strerror(errno));
    if (r->tok) tokenizer_free(&r->tokenizer);
    if (r->have_val) dataloader_free(&r->val);
    dataloader_free(&r->train);
    gpt2_free(&r->model);
    comm_free();
    return r->interrupted ? 128 + r->interrupted : 0;
}
