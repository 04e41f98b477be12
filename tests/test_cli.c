// test_cli.c: train_gpt2 as a user runs it, on a tiny model (d1) and small token files made
// here: a full run with validation, sampling and checkpoints; bit-exact resume; and every
// kind of bad input, each of which must end with a clear message and a non-zero exit.
// The binary under test is $BUILD/train_gpt2 (make test sets BUILD).
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "test.h"



static void write_token_file(const char *path, int ntokens, int magic, int version, int declared,
                             unsigned long long *rng) {
    int header[256] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = declared;
    FILE *f = fopen(path, "wb");
    fwrite(header, sizeof(int), 256, f);
    for (int i = 0; i < ntokens; i++) {
        uint16_t t = (uint16_t)((test_randf(rng) * 0.5f + 0.5f) * 1000);   // a small vocabulary
        fwrite(&t, 2, 1, f);
    }
    fclose(f);
}

// the train lines of log.csv without the timing columns: "step,train,loss,grad_norm,lr"
static int read_losses(const char *path, char lines[][512], int max) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f) && n < max) {
        if (!strstr(line, ",train,")) continue;
        char *p = line;
        for (int commas = 0; *p && commas < 5; p++) commas += *p == ',';
        p[-1] = '\0';
        snprintf(lines[n++], 512, "%s", line);
    }
    fclose(f);
    return n;
}

static int files_equal(const char *a, const char *b) {
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "cmp -s %s %s", a, b);
    return system(cmd) == 0;
}

#define TINY "-e d1 -b 2 -t 16 -m 2 -g 4"

static void test_full_run(void) {
    // -o names a folder whose parent does not exist yet: it is made, parents and all
    int rc = run("%s -i %s/train.bin -j %s/val.bin " TINY " -x 4 -v 2 -s 2 -o %s/new/run", bin, dir, dir, dir);
    CHECK(rc == 0, "a tiny training run exits 0 (got %d):\n%s", rc, output);
    CHECK(strstr(output, "step    1/4 | loss") != NULL, "per-step line printed");
    CHECK(strstr(output, "tok/s") && strstr(output, "ms |"), "step time and tokens/s printed");
    CHECK(strstr(output, "step 2: val loss") != NULL, "validation every 2 steps");
    CHECK(strstr(output, "generating:") != NULL, "sampled text");
    CHECK(strstr(output, "summary:") && strstr(output, "peak"), "summary with peak memory");
    run("mv %s/new/run %s/run", dir, dir);
    char path[512];
    snprintf(path, sizeof(path), "%s/run/model_00000004.bin", dir);
    CHECK(access(path, F_OK) == 0, "final checkpoint written");
    snprintf(path, sizeof(path), "%s/run/state_00000004.bin", dir);
    CHECK(access(path, F_OK) == 0, "final training state written");
    // the checkpoint is a model others can start from, also with another sequence length
    rc = run("%s -i %s/train.bin -e %s/run/model_00000004.bin -b 1 -t 8 -x 1 -v 0 -s 0", bin, dir, dir);
    CHECK(rc == 0, "training starts from a written checkpoint:\n%s", output);
}

// 6 steps in one go, against 3 steps + a resumed run from the step-3 checkpoint
static void test_resume_bit_exact(void) {
    int rc = run("%s -i %s/train.bin -j %s/val.bin " TINY " -x 6 -n 3 -v 0 -s 0 -l 1e-3 -u 2 -q 0.1 "
                 "-c 0.1 --shuffle -o %s/whole", bin, dir, dir, dir);
    CHECK(rc == 0, "uninterrupted run:\n%s", output);
    run("mkdir -p %s/resumed && cp %s/whole/model_00000003.bin %s/whole/state_00000003.bin %s/resumed/",
        dir, dir, dir, dir);
    rc = run("%s -i %s/train.bin -j %s/val.bin " TINY " -x 6 -n 3 -v 0 -s 0 -l 1e-3 -u 2 -q 0.1 "
             "-c 0.1 --shuffle -o %s/resumed -y 1", bin, dir, dir, dir);
    CHECK(rc == 0 && strstr(output, "resumed from"), "resumed run:\n%s", output);
    char a[16][512], b[16][512], pa[512], pb[512];
    snprintf(pa, sizeof(pa), "%s/whole/log.csv", dir);
    snprintf(pb, sizeof(pb), "%s/resumed/log.csv", dir);
    int na = read_losses(pa, a, 16), nb = read_losses(pb, b, 16);
    CHECK(na == 6 && nb == 3, "6 steps logged uninterrupted (%d), 3 after resuming (%d)", na, nb);
    for (int i = 0; i < nb && na == 6; i++)
        CHECK(strcmp(a[3 + i], b[i]) == 0, "resumed step equals uninterrupted: '%s' vs '%s'", b[i], a[3 + i]);
    snprintf(pa, sizeof(pa), "%s/whole/model_00000006.bin", dir);
    snprintf(pb, sizeof(pb), "%s/resumed/model_00000006.bin", dir);
    CHECK(files_equal(pa, pb), "final weights of the resumed run are bit-identical");
    snprintf(pa, sizeof(pa), "%s/whole/state_00000006.bin", dir);
    snprintf(pb, sizeof(pb), "%s/resumed/state_00000006.bin", dir);
    CHECK(files_equal(pa, pb), "final optimizer state of the resumed run is bit-identical");
    // resuming with other shapes is refused, and nothing already written is touched
    rc = run("%s -i %s/train.bin " TINY " -b 1 -x 8 -v 0 -s 0 -o %s/resumed -y 1", bin, dir, dir);
    CHECK(rc != 0 && strstr(output, "resume with the same"), "resume with another -b refused:\n%s", output);
    CHECK(files_equal(pa, pb), "a refused resume leaves the checkpoints intact");
}

// expect a non-zero exit and `message` in the output
static void expect_error(const char *message, const char *what, const char *fmt, ...) {
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    int rc = run("%s %s", bin, args);
    CHECK(rc != 0 && rc != 128 && strstr(output, message) != NULL && !strstr(output, "AddressSanitizer"),
          "%s: expected exit 1 with '%s', got exit %d:\n%s", what, message, rc, output);
}

static void test_bad_inputs(unsigned long long *rng) {
    char d[300];
    snprintf(d, sizeof(d), "%s", dir);
    char p[512];
    snprintf(p, sizeof(p), "%s/badmagic.bin", d);   write_token_file(p, 100, 12345, 1, 100, rng);
    snprintf(p, sizeof(p), "%s/badversion.bin", d); write_token_file(p, 100, 20240520, 7, 100, rng);
    snprintf(p, sizeof(p), "%s/truncated.bin", d);  write_token_file(p, 50, 20240520, 1, 100, rng);
    snprintf(p, sizeof(p), "%s/short.bin", d);      write_token_file(p, 20, 20240520, 1, 20, rng);
    run("head -c 100 %s/train.bin > %s/tiny_header.bin", d, d);
    run("printf 'hello' > %s/notckpt.bin", d);

    expect_error("unknown flag --frobnicate", "unknown flag", "--frobnicate 3");
    expect_error("flag -b: 'abc' is not an integer", "bad value", "-b abc");
    expect_error("flag -b: 0 is out of range", "out of range value", "-b 0");
    expect_error("flag -l: 'x' is not a number", "bad float", "-l x");
    expect_error("flag -t needs a value", "missing value", "-t");
    expect_error("flag -r: 3 is out of range [0, 2]", "a recompute level that does not exist", "-r 3");
    expect_error("not a positive multiple of B*T", "bad total batch", "-v 0 -s 0 -i %s/train.bin -b 2 -t 16 -d 33", d);
    expect_error("no token file matches", "missing file", "-v 0 -s 0 -i %s/nothere_*.bin", d);
    expect_error("not a token file (magic 12345", "wrong magic", "-v 0 -s 0 -i %s/badmagic.bin " TINY, d);
    expect_error("token file version 7 is not supported", "wrong version", "-v 0 -s 0 -i %s/badversion.bin " TINY, d);
    expect_error("truncated", "truncated token file", "-v 0 -s 0 -i %s/truncated.bin " TINY, d);
    expect_error("too short for a token file", "file shorter than a header", "-v 0 -s 0 -i %s/tiny_header.bin " TINY, d);
    expect_error("fewer than one batch needs", "too few tokens", "-v 0 -s 0 -i %s/short.bin " TINY, d);
    expect_error("cannot open", "missing checkpoint", "-v 0 -s 0 -i %s/train.bin -e %s/none.bin -b 2 -t 16", d, d);
    expect_error("not a model checkpoint", "checkpoint with bad magic",
                 "-v 0 -s 0 -i %s/train.bin -e %s/badmagic.bin -b 2 -t 16", d, d);
    expect_error("shorter than the 1024-byte header", "tiny checkpoint",
                 "-v 0 -s 0 -i %s/train.bin -e %s/notckpt.bin -b 2 -t 16", d, d);
    // a checkpoint cut short, one with an unknown version, and one whose config contradicts -t
    run("head -c 20000 %s/run/model_00000004.bin > %s/cut.bin", d, d);
    expect_error("truncated", "truncated checkpoint", "-v 0 -s 0 -i %s/train.bin -e %s/cut.bin -b 2 -t 16", d, d);
    run("cp %s/run/model_00000004.bin %s/v9.bin && printf '\\011' | dd of=%s/v9.bin bs=1 seek=4 conv=notrunc 2>/dev/null",
        d, d, d);
    expect_error("unsupported checkpoint version 9", "checkpoint version", "-v 0 -s 0 -i %s/train.bin -e %s/v9.bin -b 2 -t 16", d, d);
    expect_error("longer than the model's max_seq_len 1024", "-t beyond the checkpoint's maxT",
                 "-v 0 -s 0 -i %s/train.bin -e %s/run/model_00000004.bin -b 1 -t 2048", d, d);
    expect_error("-y 1 needs -o", "resume without a folder", "-v 0 -s 0 -i %s/train.bin " TINY " -y 1", d);
    run("mkdir -p %s/empty", d);
    expect_error("no checkpoint", "resume from an empty folder", "-v 0 -s 0 -i %s/train.bin " TINY " -o %s/empty -y 1", d, d);
    expect_error("cannot open d12x", "a config name that is not dN", "-v 0 -s 0 -i %s/train.bin -e d12x -b 2 -t 16", d);
}

// -r 2 (GELU and layernorm recomputed) trains the very weights of -r 0: the run of
// test_resume_bit_exact again, uninterrupted and resumed, against its files
static void test_recompute(void) {
    const char *flags = TINY " -x 6 -n 3 -v 0 -s 0 -l 1e-3 -u 2 -q 0.1 -c 0.1 --shuffle -r 2";
    int rc = run("%s -i %s/train.bin -j %s/val.bin %s -o %s/r2", bin, dir, dir, flags, dir);
    CHECK(rc == 0, "a run with -r 2:\n%s", output);
    CHECK(strstr(output, "| recompute         | -r 2 (GELU and layernorm)") != NULL &&
          strstr(output, "recompute level 2):") != NULL,
          "the config table and the memory report show -r 2:\n%s", output);
    char a[16][512], b[16][512], pa[512], pb[512];
    snprintf(pa, sizeof(pa), "%s/whole/log.csv", dir);
    snprintf(pb, sizeof(pb), "%s/r2/log.csv", dir);
    int na = read_losses(pa, a, 16), nb = read_losses(pb, b, 16);
    CHECK(na == 6 && nb == 6, "6 steps logged at -r 0 (%d) and -r 2 (%d)", na, nb);
    for (int i = 0; i < nb && na == 6; i++)
        CHECK(strcmp(a[i], b[i]) == 0, "-r 2 step equals -r 0: '%s' vs '%s'", b[i], a[i]);
    snprintf(pa, sizeof(pa), "%s/whole/model_00000006.bin", dir);
    snprintf(pb, sizeof(pb), "%s/r2/model_00000006.bin", dir);
    CHECK(files_equal(pa, pb), "final weights at -r 2 are bit-identical to -r 0");
    run("mkdir -p %s/r2resumed && cp %s/r2/model_00000003.bin %s/r2/state_00000003.bin %s/r2resumed/",
        dir, dir, dir, dir);
    rc = run("%s -i %s/train.bin -j %s/val.bin %s -o %s/r2resumed -y 1", bin, dir, dir, flags, dir);
    CHECK(rc == 0 && strstr(output, "resumed from"), "resumed run at -r 2:\n%s", output);
    snprintf(pa, sizeof(pa), "%s/r2resumed/model_00000006.bin", dir);
    CHECK(files_equal(pa, pb), "final weights of the resumed -r 2 run are bit-identical");
}

// Activations that cannot fit (d1 at -b 16384 -t 1024: 3.4 TB of logits alone) end with the
// memory each -r needs and the -b that would fit. This needs an allocation that large to
// fail at once, as it does unless the kernel is set to overcommit always
// (vm.overcommit_memory = 1: then the allocation succeeds, and the test would train on it).
static void test_out_of_memory(unsigned long long *rng) {
    FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
    int mode = f ? fgetc(f) : EOF;
    if (f) fclose(f);
    if (mode == '1') {
        printf("SKIP: out-of-memory message (vm.overcommit_memory = 1 lets any allocation succeed)\n");
        return;
    }
    char p[512];
    snprintf(p, sizeof(p), "%s/big.bin", dir);
    write_token_file(p, 16384 * 1024 + 1, 20240520, 1, 16384 * 1024 + 1, rng);
    // (a sanitizer build's allocator would abort on so large a request; told to, it fails it)
    int rc = run("ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1 "
                 "%s -i %s -e d1 -b 16384 -t 1024 -v 0 -s 0", bin, p);
    CHECK(rc == 1 && strstr(output, "out of cpu memory for the activations of -b 16384 -t 1024") &&
          !strstr(output, "ERROR: AddressSanitizer"),
          "activations too big: exit 1 with the message (got %d):\n%s", rc, output);
    CHECK(strstr(output, "at -r 0: ") && strstr(output, "at -r 1: ") && strstr(output, "at -r 2: ") &&
          strstr(output, "-r 2 fits ("),
          "the message gives each -r's memory and the largest -b that fits:\n%s", output);
    run("rm -f %s", p);
}

int main(void) {
    if (cli_init("train_gpt2", "test_cli") != 0) return 1;
    unsigned long long rng = test_seed();
    char p[512];
    snprintf(p, sizeof(p), "%s/train.bin", dir);
    write_token_file(p, 3000, 20240520, 1, 3000, &rng);
    snprintf(p, sizeof(p), "%s/val.bin", dir);
    write_token_file(p, 600, 20240520, 1, 600, &rng);
    test_full_run();
    test_resume_bit_exact();
    test_bad_inputs(&rng);
    test_recompute();
    test_out_of_memory(&rng);
    int rc = test_summary();
    if (rc == 0) run("rm -rf %s", dir);
    else printf("files kept in %s\n", dir);
    return rc;
}
