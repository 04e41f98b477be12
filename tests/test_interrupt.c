// test_interrupt.c: train_gpt2 killed at random moments, as a crash, an OOM killer or a user
// would: SIGKILL (nothing runs after it) and SIGINT (the run ends its step, checkpoints and
// exits 130), each KILLS times at random delays after start-up (into training and its
// checkpoint writes), with a checkpoint every step (-n 1, the last 3 kept: -nk 3) of a tiny
// model (V=64, C=64, L=2) made here. Each run resumes from the folder's latest checkpoint. Afterwards the run is finished, and checked against one
// uninterrupted run: every checkpoint left is byte-identical to the uninterrupted run's of
// the same step (so each loads, and resuming was exact), log.csv holds one header and one
// complete line per step with the same values, and no temporary file is left.
// The binary under test is $BUILD/train_gpt2 (make test sets BUILD).
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../checkpoint.h"
#include "cli.h"
#include "test.h"

#define KILLS 10             // of each signal
#define V 64
#define MAXT 32
#define C 64
#define L 2

// an llm.c fp32 model file (version 3) of the tiny config, random parameters
static void write_tiny_model(const char *path, unsigned long long *rng) {
    GPT2Config config = {.max_seq_len = MAXT, .vocab_size = V, .padded_vocab_size = V,
                         .num_layers = L, .num_heads = 1, .channels = C};
    int32_t header[CHECKPOINT_HEADER_INTS];
    checkpoint_header_pack(header, config, CHECKPOINT_VERSION_FP32);
    size_t n = checkpoint_num_parameters(config);
    FILE *f = fopen(path, "wb");
    if (!f) { printf("FAIL: cannot write %s\n", path); exit(1); }
    fwrite(header, sizeof(int32_t), CHECKPOINT_HEADER_INTS, f);
    for (size_t i = 0; i < n; i++) {
        float x = 0.05f * test_randf(rng);
        fwrite(&x, sizeof(float), 1, f);
    }
    fclose(f);
}

static void write_tokens(const char *path, int n, unsigned long long *rng) {
    int header[256] = {20240520, 1, n};
    FILE *f = fopen(path, "wb");
    if (!f) { printf("FAIL: cannot write %s\n", path); exit(1); }
    fwrite(header, sizeof(int), 256, f);
    for (int i = 0; i < n; i++) {
        uint16_t t = (uint16_t)((test_randf(rng) * 0.5f + 0.5f) * (V - 1));
        fwrite(&t, sizeof(t), 1, f);
    }
    fclose(f);
}

static char common[2048];

// starts train_gpt2 with `extra` flags into folder out, its output into log; returns its pid
static pid_t start(const char *out, const char *extra, const char *log) {
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s %s %s -o %s/%s", bin, common, extra, dir, out);
    return start_logged(cmd, log);
}

// whether the run whose output is in log trained a step: its last lines say so. Read from the
// end, as a long log would not fit `output`.
static int trained_a_step(const char *log) {
    static char tail[8192];
    FILE *f = fopen(log, "rb");
    size_t n = 0;
    if (f) {
        if (fseek(f, -(long)(sizeof(tail) - 1), SEEK_END) != 0) rewind(f);   // shorter than tail
        n = fread(tail, 1, sizeof(tail) - 1, f);
        fclose(f);
    }
    tail[n] = '\0';
    return strstr(tail, "resume with the same flags") != NULL;
}

// the newest step with a state file in folder (a complete checkpoint: it is written last), or -1
static int latest_state(const char *folder, int *count, int *temporaries) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, folder);
    DIR *d = opendir(path);
    int best = -1;
    *count = 0;
    if (temporaries) *temporaries = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int step;
        if (strstr(e->d_name, ".tmp.") && temporaries) (*temporaries)++;
        if (sscanf(e->d_name, "state_%d.bin", &step) == 1 && !strstr(e->d_name, ".tmp.")) {
            (*count)++;
            if (step > best) best = step;
        }
    }
    closedir(d);
    return best;
}

// Reads log.csv: the header count, the train lines (without their timing columns) and
// whether every line is complete. Returns the number of train lines.
static int read_log(const char *folder, char lines[][160], int max, int *headers, int *complete) {
    char path[512], line[512];
    snprintf(path, sizeof(path), "%s/%s/log.csv", dir, folder);
    FILE *f = fopen(path, "r");
    *headers = 0;
    *complete = 1;
    if (!f) return 0;
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') *complete = 0;
        if (!strncmp(line, "step,kind,", 10)) { (*headers)++; continue; }
        char *p = line;   // keep "step,train,loss,grad_norm,lr": the ms and tokens/s differ
        for (int commas = 0; *p && commas < 5; p++) commas += *p == ',';
        p[-1] = '\0';
        if (n < max) snprintf(lines[n], 160, "%.159s", line);
        n++;
    }
    fclose(f);
    return n;
}


static void test_random_kills(unsigned long long *rng) {
    char log[512];
    snprintf(log, sizeof(log), "%s/killed.txt", dir);
    int sigint_ok = 0, sigkill_done = 0, finished = 0;
    for (int k = 0; k < 2 * KILLS && !finished; k++) {
        int use_int = k % 2 == 1;
        int count, tmp;
        int resume = latest_state("killed", &count, &tmp) >= 0;
        // -x large: the run is killed long before; constant lr, so -x changes nothing else
        pid_t pid = start("killed", resume ? "-x 100000 -y 1" : "-x 100000 --overwrite", log);
        // both after start-up, then a random while into training and its checkpoint writes
        // (before start-up a SIGINT ends any program at once, and a SIGKILL tests nothing)
        int up = wait_for_text(pid, log, "| steps");
        CHECK(up, "kill %d: the run started:\n%s", k, slurp(log));
        sleep_ms(200 * (1 + test_randf(rng)));
        kill(pid, use_int ? SIGINT : SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) { finished = 1; break; }
        int trained = trained_a_step(log);
        int latest = latest_state("killed", &count, &tmp);
        char lines[8][160];
        int headers, complete;
        int nlines = read_log("killed", lines, 0, &headers, &complete);
        CHECK(complete && headers <= 1, "kill %d: log.csv has complete lines and at most one header "
              "(%d headers)", k, headers);
        if (use_int) {
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 130, "SIGINT %d: exit 130 (status %d):\n%s",
                  k / 2, status, slurp(log));
            // the step in flight was finished and saved, unless none was trained yet
            CHECK(latest == nlines || !trained,
                  "SIGINT %d: a checkpoint of the last logged step (%d), latest %d", k / 2, nlines, latest);
            CHECK(tmp == 0, "SIGINT %d: no temporary file left (%d)", k / 2, tmp);
            // checkpoints are pruned only after one is saved: a SIGKILL between the rename of a
            // state file and the pruning leaves 4, which stay until a trained step saves again
            CHECK(count <= (trained ? 3 : 4), "SIGINT %d: -nk 3 keeps 3 checkpoints, 4 when no step "
                  "was trained since a SIGKILL before the pruning (%d, trained %d)", k / 2, count, trained);
            sigint_ok++;
        } else {
            CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "SIGKILL %d ended it", k / 2);
            sigkill_done++;
        }
    }
    CHECK(!finished && sigint_ok == KILLS && sigkill_done == KILLS,
          "%d SIGINTs and %d SIGKILLs, none after the run ended", sigint_ok, sigkill_done);

    // finish it a few steps past its latest checkpoint; then the same steps uninterrupted
    int count, tmp;
    int latest = latest_state("killed", &count, &tmp);
    CHECK(latest >= 1, "the killed run got past step 1 (latest checkpoint %d)", latest);
    if (latest < 1) return;
    int steps = latest + 3;
    char extra[64];
    snprintf(extra, sizeof(extra), "-x %d -y 1", steps);
    pid_t pid = start("killed", extra, log);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the killed run finishes:\n%s",
          slurp(log));
    snprintf(extra, sizeof(extra), "-x %d", steps);
    snprintf(log, sizeof(log), "%s/whole.txt", dir);
    pid = start("whole", extra, log);
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the uninterrupted run:\n%s",
          slurp(log));

    // every checkpoint left equals the uninterrupted run's of the same step
    int kept = 0;
    for (int step = 1; step <= steps; step++) {
        char a[512], b[512];
        snprintf(a, sizeof(a), "%s/killed/state_%08d.bin", dir, step);
        if (access(a, F_OK) != 0) continue;
        kept++;
        snprintf(b, sizeof(b), "%s/whole/state_%08d.bin", dir, step);
        CHECK(files_equal(a, b), "state of step %d byte-identical to the uninterrupted run's", step);
        snprintf(a, sizeof(a), "%s/killed/model_%08d.bin", dir, step);
        snprintf(b, sizeof(b), "%s/whole/model_%08d.bin", dir, step);
        CHECK(files_equal(a, b), "model of step %d byte-identical to the uninterrupted run's", step);
    }
    CHECK(kept == 3, "-nk 3: the last 3 checkpoints kept (%d)", kept);
    latest_state("killed", &count, &tmp);
    CHECK(tmp == 0, "no *.tmp.* file left (%d)", tmp);
    run("ls %s/killed | grep -v -E '^(model|state)_[0-9]{8}[.]bin$|^log[.]csv$' | head -5", dir);
    CHECK(output[0] == '\0', "nothing but checkpoints and log.csv in the folder: '%s'", output);

    static char a[4096][160], b[4096][160];
    int ha, hb, ca, cb;
    int na = read_log("killed", a, 4096, &ha, &ca), nb = read_log("whole", b, 4096, &hb, &cb);
    CHECK(ha == 1 && ca, "the killed run's log: one header (%d), complete lines", ha);
    CHECK(na == steps && nb == steps, "one log line per step: %d and %d of %d", na, nb, steps);
    int same = na == nb && na <= 4096;
    for (int i = 0; same && i < na; i++) {
        char want[32];
        snprintf(want, sizeof(want), "%d,train,", i + 1);
        same = strncmp(a[i], want, strlen(want)) == 0 && strcmp(a[i], b[i]) == 0;
        if (!same) printf("  line %d: '%s' vs '%s'\n", i + 1, a[i], b[i]);
    }
    CHECK(same, "the killed run's log equals the uninterrupted run's, step by step");
    printf("  %d SIGKILLs and %d SIGINTs over %d steps\n", sigkill_done, sigint_ok, steps);
}

int main(void) {
    if (cli_init("train_gpt2", "test_interrupt") != 0) return 1;
    unsigned long long rng = test_seed();
    char model[512], tokens[512];
    snprintf(model, sizeof(model), "%s/tiny.bin", dir);
    write_tiny_model(model, &rng);
    snprintf(tokens, sizeof(tokens), "%s/train.bin", dir);
    write_tokens(tokens, 20000, &rng);
    snprintf(common, sizeof(common), "-i %s -e %s -b 4 -t 32 -n 1 -nk 3 -v 0 -s 0 -l 1e-3 -c 0.1 "
             "--shuffle --tokenizer %s/none.bin", tokens, model, dir);
    test_random_kills(&rng);
    return cli_finish(test_summary());
}
