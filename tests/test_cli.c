// test_cli.c: train_gpt2 as a user runs it, on a tiny model (d1) and small token files made
// here: a full run with validation, sampling and checkpoints; bit-exact resume; and every
// kind of bad input, each of which must end with a clear message and a non-zero exit.
// The binary under test is $BUILD/train_gpt2 (make test sets BUILD).
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "test.h"



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

// MFU on every step line and in the summary: llm.c's FLOPs per token times the tokens per step,
// over the step's time, over the peak; the CPU has no tabled peak, so it is given here
static void test_mfu(void) {
    int rc = run("%s -i %s/train.bin " TINY " -x 2 -v 0 -s 0 --peak-tflops 0.001", bin, dir);
    CHECK(rc == 0, "a run with --peak-tflops exits 0:\n%s", output);
    double flops = 0.0, ms = 0.0, mfu = 0.0;
    const char *table = strstr(output, "| MFU               | 6N + 6LCT = ");
    CHECK(table && sscanf(table, "| MFU               | 6N + 6LCT = %lf", &flops) == 1 && flops > 0,
          "the config table states the FLOPs per token:\n%s", output);
    const char *line = strstr(output, "step    2/2 |");
    const char *ms_at = line ? strstr(line, " ms |") : NULL, *mfu_at = line ? strstr(line, "| MFU ") : NULL;
    if (ms_at) while (ms_at > line && ms_at[-1] != '|') ms_at--;
    CHECK(ms_at && mfu_at && sscanf(ms_at, " %lf", &ms) == 1 && sscanf(mfu_at, "| MFU %lf%%", &mfu) == 1,
          "the step line ends with its MFU:\n%s", output);
    double expected = 100.0 * flops * 32 / (ms / 1e3) / 1e9;   // B*T = 32 tokens, peak 1 GFLOP/s
    CHECK(fabs(mfu - expected) <= 0.01 * expected + 0.1, "MFU %.2f%% = FLOPs/token x tokens / time / peak (%.2f%%)",
          mfu, expected);
    CHECK(strstr(output, "TFLOP/s, MFU ") && strstr(output, "% of 0.001 TFLOP/s"), "the summary's mean MFU:\n%s", output);
    rc = run("%s -i %s/train.bin " TINY " -x 1 -v 0 -s 0", bin, dir);
    CHECK(rc == 0 && strstr(output, "not shown: no peak rate known") && !strstr(output, "| MFU 0"),
          "no MFU where the peak is unknown, and the table says why:\n%s", output);
    rc = run("%s -i %s/train.bin " TINY " -x 1 --peak-tflops -5", bin, dir);
    CHECK(rc != 0 && strstr(output, "--peak-tflops"), "a negative peak is refused naming the flag:\n%s", output);
}

// 6 steps in one go, against 3 steps + a resumed run from the step-3 checkpoint (the CPU
// backends are deterministic whatever is asked: --deterministic is accepted and said, the
// default says it too, and --nondeterministic is accepted and changes nothing there)
static void test_resume_bit_exact(void) {
    int rc = run("%s -i %s/train.bin -j %s/val.bin " TINY " -x 6 -n 3 -v 0 -s 0 -l 1e-3 -u 2 -q 0.1 "
                 "-c 0.1 --shuffle --deterministic -o %s/whole", bin, dir, dir, dir);
    CHECK(rc == 0, "uninterrupted run:\n%s", output);
    CHECK(strstr(output, ", deterministic\n") != NULL, "the config table says the backward is "
          "deterministic:\n%s", output);
    run("mkdir -p %s/resumed && cp %s/whole/model_00000003.bin %s/whole/state_00000003.bin %s/resumed/",
        dir, dir, dir, dir);
    rc = run("%s -i %s/train.bin -j %s/val.bin " TINY " -x 6 -n 3 -v 0 -s 0 -l 1e-3 -u 2 -q 0.1 "
             "-c 0.1 --shuffle -o %s/resumed -y 1", bin, dir, dir, dir);
    CHECK(rc == 0 && strstr(output, "resumed from"), "resumed run:\n%s", output);
    CHECK(strstr(output, ", deterministic\n") != NULL, "deterministic by default:\n%s", output);
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
    rc = run("%s -i %s/train.bin " TINY " -x 1 -v 0 -s 0 --nondeterministic", bin, dir);
    CHECK(rc == 0 && strstr(output, ", deterministic\n") != NULL,
          "--nondeterministic is accepted; the CPU still sums in a fixed order:\n%s", output);
    // resuming with other shapes is refused, and nothing already written is touched
    rc = run("%s -i %s/train.bin -e d1 -b 1 -t 16 -m 2 -g 4 -x 8 -v 0 -s 0 -o %s/resumed -y 1", bin, dir, dir);
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
    expect_error("no training token file matches", "missing file", "-v 0 -s 0 -i %s/nothere_*.bin", d);
    expect_error("not a token file (magic 12345", "wrong magic", "-v 0 -s 0 -i %s/badmagic.bin " TINY, d);
    expect_error("token file version 7 is not supported", "wrong version", "-v 0 -s 0 -i %s/badversion.bin " TINY, d);
    expect_error("truncated", "truncated token file", "-v 0 -s 0 -i %s/truncated.bin " TINY, d);
    expect_error("too short for a token file", "file shorter than a header", "-v 0 -s 0 -i %s/tiny_header.bin " TINY, d);
    expect_error("fewer than one batch needs", "too few tokens", "-v 0 -s 0 -i %s/short.bin " TINY, d);
    // a validation file smaller than a batch (20 tokens; -b 2 -t 16 needs 33) is read in batches
    // of one row, and said so; one that holds not even one row of T+1 tokens is an error
    int rc = run("%s -i %s/train.bin -j %s/short.bin " TINY " -x 2 -v 1 -s 0", bin, d, d);
    CHECK(rc == 0 && strstr(output, "validation in batches of 1 rows") &&
              strstr(output, "step 2: val loss"),
          "a small validation file is read in smaller batches (exit %d):\n%s", rc, output);
    expect_error("fewer than one batch needs", "a validation file shorter than T+1",
                 "-i %s/train.bin -j %s/short.bin -e d1 -b 2 -t 32 -m 2 -g 4 -x 2 -v 1 -s 0", d, d);
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

// the flags themselves: each given once, no stray arguments, every number in range, and sizes
// derived from them that overflow nothing
static void test_bad_flags(void) {
    char d[300];
    snprintf(d, sizeof(d), "%s", dir);
    expect_error("flag -b given twice", "a duplicate flag", "-b 2 -b 4");
    expect_error("flag --shuffle given twice", "a duplicate switch", "--shuffle --shuffle");
    expect_error("flag --deterministic given twice", "a duplicate switch", "--deterministic --deterministic");
    expect_error("flags --deterministic and --nondeterministic: give one of them", "both orders asked",
                 "--deterministic --nondeterministic");
    expect_error("flag -o needs a folder name, not an empty one", "an empty -o", "-o ''");
    expect_error("flag -e d0: a new model is dN with N from 1 to 256 layers", "no model size", "-e d0");
    expect_error("flag -e d300: a new model is dN", "too deep a model", "-e d300");

    expect_error("unexpected argument 'foo': train_gpt2 takes flags only", "a positional argument last", "-b 2 foo");
    expect_error("unexpected argument 'foo'", "a positional argument first", "foo -b 2");
    expect_error("unknown flag --frobnicate", "an unknown flag last", "-b 2 --frobnicate");
    expect_error("flag -o needs a value, not the flag -y", "a flag where a value belongs", "-o -y 1");
    expect_error("flag -x: 0 steps trains nothing", "-x 0", "-x 0");
    expect_error("flag -x: -2 is out of range", "-x below -1", "-x -2");
    expect_error("flag -nk: -1 is out of range", "-nk negative", "-nk -1");
    expect_error("flag -nk needs -o", "-nk without a folder", "-nk 2");
    expect_error("flag --overwrite needs -o", "--overwrite without a folder", "--overwrite");
    expect_error("-y 1 and --overwrite", "resume and overwrite at once", "-y 1 --overwrite -o %s/x", d);
    expect_error("flag --seed: -1 is out of range", "negative seed", "--seed -1");
    expect_error("flag -g: 0 is out of range", "-g 0", "-g 0");
    // sizes from the flags: in 64 bits, each bound named (these once crashed or trained nothing)
    expect_error("1099511627776 micro-batches of B*T = 1, more than 2147483647", "-d 2^40 (was SIGFPE)",
                 "-e d2 -b 1 -t 1 -d 1099511627776");
    expect_error("2147483648 micro-batches", "-d 2^31 (was -2147483648 micro-steps)", "-e d2 -b 1 -t 1 -d 2147483648");
    expect_error("4294967297 micro-batches", "-d 2^32+1 (was one micro-step)", "-e d2 -b 1 -t 1 -d 4294967297");
    expect_error("flag -d: 1099511627777 is out of range", "-d past 2^40", "-d 1099511627777");
    expect_error("68719476736 tokens per micro-batch, more than 2147483647", "B*T past an int",
                 "-b 65536 -t 1048576");
    expect_error("not a positive multiple of B*T*world = 2*16*1", "-d not a multiple", "-b 2 -t 16 -d 48");
}

// a token id the model cannot embed is found when its file is opened, not when its batch comes
static void test_bad_token_ids(unsigned long long *rng) {
    char p[512];
    snprintf(p, sizeof(p), "%s/badid.bin", dir);
    write_token_file(p, 3000, 20240520, 1, 3000, rng);
    FILE *f = fopen(p, "r+b");
    uint16_t big = 60000;
    fseek(f, 1024 + 2 * 2345, SEEK_SET);
    fwrite(&big, 2, 1, f);
    fclose(f);
    expect_error("badid.bin (training file): token 2345 (byte offset 5714) is 60000, outside the model's "
                 "vocabulary [0, 50257)", "a training token past the vocabulary",
                 "-i %s/badid.bin -v 0 -s 0 " TINY " -x 1", dir);
    expect_error("badid.bin (validation file): token 2345", "a validation token past the vocabulary",
                 "-i %s/train.bin -j %s/badid.bin -v 1 -s 0 " TINY " -x 1", dir, dir);
}

#define RUN "-i %s/train.bin -v 0 -s 0 " TINY

static int count_files(const char *folder, const char *pattern) {
    run("ls %s/%s | grep -c -E '%s'", dir, folder, pattern);
    return atoi(output);
}

// the output folder: one run per folder, retention, what a kill leaves behind
static void test_output_folder(void) {
    int rc = run("%s " RUN " -x 5 -n 1 -nk 2 -o %s/keep", bin, dir, dir);
    CHECK(rc == 0, "a run with -nk 2:\n%s", output);
    CHECK(strstr(output, "| checkpoints       | ") && strstr(output, "each (model ") &&
          strstr(output, "the last 2 kept"), "the table says what each checkpoint takes on disk:\n%s", output);
    CHECK(count_files("keep", "^model_0000000[45][.]bin$") == 2 && count_files("keep", "^(model|state)_") == 4,
          "-nk 2 keeps the checkpoints of steps 4 and 5 alone");
    // a new run into it is refused, and nothing of the old one is touched
    char before[512], after[512];
    snprintf(before, sizeof(before), "%s/keep/state_00000005.bin", dir);
    run("cp %s %s/state5.copy", before, dir);
    snprintf(after, sizeof(after), "%s/state5.copy", dir);
    rc = run("%s " RUN " -x 2 -o %s/keep", bin, dir, dir);
    CHECK(rc == 1 && strstr(output, "holds another run") && strstr(output, "--overwrite"),
          "a fresh run into another run's folder is refused:\n%s", output);
    CHECK(files_equal(before, after), "the refused run left the folder as it was");
    // --overwrite replaces it: nothing of the old run is left to be resumed
    rc = run("%s " RUN " -x 2 -o %s/keep --overwrite", bin, dir, dir);
    CHECK(rc == 0 && strstr(output, "deleted 5 file(s) of the earlier run"), "--overwrite:\n%s", output);
    CHECK(count_files("keep", "^(model|state)_") == 2 && count_files("keep", "^model_00000002[.]bin$") == 1,
          "after --overwrite only the new run's checkpoint");
    // a kill between the model and the state file, and temporary files of a dead process
    run("cp %s/keep/model_00000002.bin %s/keep/model_00000007.bin && "
        "sh -c 'echo $$' > %s/deadpid && touch %s/keep/state_00000003.bin.tmp.$(cat %s/deadpid) "
        "%s/keep/log.csv.tmp.$(cat %s/deadpid)", dir, dir, dir, dir, dir, dir, dir);
    rc = run("%s " RUN " -x 4 -o %s/keep -y 1", bin, dir, dir);
    CHECK(rc == 0 && strstr(output, "resumed from") && strstr(output, "model_00000002.bin at step 2"),
          "resumes from the last complete checkpoint:\n%s", output);
    CHECK(strstr(output, "model_00000007.bin has no state_00000007.bin"), "the model without state is named");
    CHECK(strstr(output, "removed 2 temporary file(s)"), "stale temporary files removed at start");
    CHECK(count_files("keep", "[.]tmp[.]") == 0, "no temporary file left");
    // the log: one header, one line per step, across the resume
    run("grep -c '^step,kind' %s/keep/log.csv; grep -c ',train,' %s/keep/log.csv", dir, dir);
    CHECK(strcmp(output, "1\n4\n") == 0, "log.csv: 1 header and 4 train lines after resuming: '%s'", output);
    // resuming with the model flags of another model is refused (the same ones are accepted,
    // as everywhere above: "resume with the same flags"), and nothing is written
    snprintf(before, sizeof(before), "%s/keep/log.csv", dir);
    run("cp %s %s/log.copy", before, dir);
    snprintf(after, sizeof(after), "%s/log.copy", dir);
    rc = run("%s -i %s/train.bin -v 0 -s 0 -e d2 -b 2 -t 16 -m 2 -g 4 -x 6 -o %s/keep -y 1", bin, dir, dir);
    CHECK(rc == 1 && strstr(output, "flags -e d2 and -y 1: the run in") && strstr(output, "L=1 NH=1 C=64") &&
          strstr(output, "d2 is L=2 NH=2 C=128"), "resuming a d1 run with -e d2 is refused:\n%s", output);
    rc = run("%s " RUN " -x 6 --max-seq-len 64 -o %s/keep -y 1", bin, dir, dir);
    CHECK(rc == 1 && strstr(output, "flag --max-seq-len 64 with -y 1: the run in") &&
          strstr(output, "has max_seq_len 1024"), "resuming with another --max-seq-len is refused:\n%s", output);
    CHECK(files_equal(before, after), "the refused resumes left log.csv as it was");
}

// waits up to 60 s for pid to end; returns its status, or -1 when it had to be killed
static int wait_ended(pid_t pid) {
    int status;
    for (int w = 0; w < 6000; w++) {
        if (waitpid(pid, &status, WNOHANG) == pid) return status;
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

// the newest state_<step>.bin in the folder, or -1
static int latest_state(const char *folder) {
    run("ls %s/%s | sed -n -E 's/^state_0*([0-9]+)[.]bin$/\\1/p' | sort -n | tail -n 1", dir, folder);
    return output[0] ? atoi(output) : -1;
}

// SIGTERM, as a scheduler sends it, and SIGHUP, as a closed terminal or ssh session sends it:
// the step in flight ends, its checkpoint is written, and the exit status is 128 + the signal
// (143, 129); the run resumes from that checkpoint
static void test_stop_signals(void) {
    const int sigs[] = {SIGTERM, SIGHUP};
    for (int k = 0; k < 2; k++) {
        const int sig = sigs[k];
        const char *name = sig == SIGTERM ? "SIGTERM" : "SIGHUP";
        char log[512], cmd[2048], folder[32];
        snprintf(folder, sizeof(folder), "stop%d", sig);
        snprintf(log, sizeof(log), "%s/%s.txt", dir, folder);
        snprintf(cmd, sizeof(cmd), "%s " RUN " -x 1000000 -o %s/%s", bin, dir, dir, folder);
        pid_t pid = start_logged(cmd, log);
        int trained = wait_for_text(pid, log, "step    1/");   // (stdout is flushed after each step)
        CHECK(trained, "the run to be sent %s trains a step:\n%s", name, slurp(log));
        kill(pid, sig);
        int status = wait_ended(pid);
        CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig,
              "%s: exit %d (status %d):\n%s", name, 128 + sig, status, slurp(log));
        int step = -1;
        const char *note = strstr(slurp(log), "interrupted after step ");
        CHECK(note && sscanf(note, "interrupted after step %d: resume with the same flags", &step) == 1,
              "%s: the run says where to resume:\n%s", name, output);
        CHECK(step >= 1 && latest_state(folder) == step, "%s: the checkpoint of step %d written (latest %d)",
              name, step, latest_state(folder));
        CHECK(count_files(folder, "[.]tmp[.]") == 0, "%s: no temporary file left", name);
        int rc = run("%s " RUN " -x %d -o %s/%s -y 1", bin, dir, step + 1, dir, folder);
        CHECK(rc == 0 && strstr(output, "resumed from"), "the run stopped by %s resumes:\n%s", name, output);
    }
}

// An -o folder takes one run at a time: two runs started at the same instant into a new folder,
// many times; each time one trains and the other stops at once, naming the folder and the
// process that holds it
static void test_one_run_per_folder(void) {
    const int rounds = 12;
    int one_each = 0, named = 0;
    for (int r = 0; r < rounds; r++) {
        run("(%s " RUN " -x 3 -o %s/race%d > %s/race_a.txt 2>&1; echo $? > %s/race_a.rc) & "
            "(%s " RUN " -x 3 -o %s/race%d > %s/race_b.txt 2>&1; echo $? > %s/race_b.rc) & wait; "
            "cat %s/race_a.rc %s/race_b.rc %s/race_a.txt %s/race_b.txt", bin, dir, dir, r, dir, dir,
            bin, dir, dir, r, dir, dir, dir, dir, dir, dir);
        int a = -1, b = -1;
        sscanf(output, "%d %d", &a, &b);
        one_each += (a == 0 && b == 1) || (a == 1 && b == 0);
        char want[512];
        snprintf(want, sizeof(want), "-o %s/race%d is in use by another run (process ", dir, r);
        named += strstr(output, want) != NULL && strstr(output, ".train_gpt2.lock") != NULL;
        if (!((a == 0 && b == 1) || (a == 1 && b == 0))) printf("  round %d: exits %d and %d:\n%s\n", r, a, b, output);
    }
    CHECK(one_each == rounds, "two runs into one folder at once: one runs, one is refused, in %d of %d rounds",
          one_each, rounds);
    CHECK(named == rounds, "the refused run names the folder, the holder's process and the lock "
          "file (%d of %d)", named, rounds);
    // the lock goes with its process: the folder takes the next run, which resumes it
    int rc = run("%s " RUN " -x 4 -o %s/race0 -y 1", bin, dir, dir);
    CHECK(rc == 0 && strstr(output, "resumed from"), "a run after them resumes in the folder:\n%s", output);
}

// stdout is a view: closed (a pipe whose reader quit) or full, the run goes on to its end and
// writes its checkpoint and log, exit 0; the same for both
static void test_closed_stdout(void) {
    int rc = run("(%s " RUN " -x 3 -o %s/pipe; echo $? > %s/pipe.rc) | head -c 1 > /dev/null; "
                 "cat %s/pipe.rc", bin, dir, dir, dir, dir);
    CHECK(rc == 0 && atoi(output) == 0 && latest_state("pipe") == 3,
          "stdout closed by its reader: the run finishes (exit %s), checkpoint of step 3 (%d)",
          output, latest_state("pipe"));
    rc = run("%s " RUN " -x 3 -o %s/full > /dev/full", bin, dir, dir);
    CHECK(rc == 0 && latest_state("full") == 3, "stdout on a full device: exit %d, checkpoint of "
          "step 3 (%d)", rc, latest_state("full"));
}

// A file-size limit (ulimit -f, a quota) ends the run with the file and the cause named, exit
// 1, no temporary file left, log.csv of complete lines, the checkpoints before intact: once
// where the log meets the limit first (1-2 KB: sh counts 512- or 1024-byte blocks), once where
// a checkpoint does (50-100 KB: the model file is 13 MB). stdout goes to /dev/null, which has
// no size, and stderr to a small file of its own.
static void test_file_size_limit(void) {
    static const struct { const char *folder, *blocks, *checkpoint_every, *file; } cases[] = {
        {"fsz_log", "2", "0", "log.csv: write error: File too large"},
        {"fsz_ckpt", "100", "2", "model_00000002.bin.tmp."},
    };
    for (int k = 0; k < 2; k++) {
        int rc = run("(ulimit -f %s; %s " RUN " -x 60 -n %s -o %s/%s > /dev/null 2> %s/%s.err); "
                     "echo \"exit $?\"; cat %s/%s.err", cases[k].blocks, bin, dir,
                     cases[k].checkpoint_every, dir, cases[k].folder, dir, cases[k].folder, dir,
                     cases[k].folder);
        CHECK(rc == 0 && strstr(output, "exit 1\n") && strstr(output, cases[k].file) &&
              strstr(output, "File too large"), "ulimit -f %s: exit 1 naming %s and the cause:\n%s",
              cases[k].blocks, cases[k].file, output);
        CHECK(count_files(cases[k].folder, "[.]tmp[.]") == 0, "ulimit -f %s: no temporary file left",
              cases[k].blocks);
        run("tail -c 1 %s/%s/log.csv | od -An -c | tr -d ' '", dir, cases[k].folder);
        CHECK(strcmp(output, "\\n\n") == 0, "ulimit -f %s: log.csv ends with a complete line ('%s')",
              cases[k].blocks, output);
    }
}

// A second SIGINT ends the run at once, by the signal, its temporary files removed and the
// checkpoints before it intact. So that the first SIGINT's checkpoint cannot end the run before
// the second arrives, the run is held: its stdout is a pipe of one page that this test stops
// reading once it is nearly full, so the run cannot write its last lines and exit (a handler
// interrupts the blocked write, and SA_RESTART resumes it).
static void test_second_interrupt(void) {
    char log[512], cmd[2048], buf[1 << 16];
    snprintf(log, sizeof(log), "%s/second.txt", dir);
    snprintf(cmd, sizeof(cmd), "exec %s " RUN " -x 1000000 -n 1 -o %s/second 2> %s", bin, dir, dir, log);
    int fds[2];
    CHECK(pipe(fds) == 0, "a pipe for the run's output");
    int capacity = fcntl(fds[1], F_SETPIPE_SZ, 4096);
    CHECK(capacity > 0, "the pipe's size set to a page (%d)", capacity);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    // read up to the first checkpoint, then no more: 512 bytes left, less than the run's last lines
    size_t n = 0;
    buf[0] = '\0';
    while (n < sizeof(buf) - 1 && !strstr(buf, "saved checkpoint")) {
        ssize_t r = read(fds[0], buf + n, sizeof(buf) - 1 - n);
        if (r <= 0) break;
        buf[n += (size_t)r] = '\0';
    }
    CHECK(strstr(buf, "saved checkpoint") != NULL, "the run saves a first checkpoint:\n%s", buf);
    int queued = 0;
    for (int w = 0; w < 6000 && queued < capacity - 512; w++) {
        if (ioctl(fds[0], FIONREAD, &queued) != 0) break;
        sleep_ms(10);
    }
    CHECK(queued >= capacity - 512, "the run fills the pipe (%d of %d bytes)", queued, capacity);
    kill(pid, SIGINT);
    int noted = wait_for_text(pid, log, "interrupt again to quit at once");
    CHECK(noted, "the first SIGINT is noted:\n%s", slurp(log));
    kill(pid, SIGINT);
    int status = wait_ended(pid);
    close(fds[0]);
    CHECK(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGINT,
          "a second SIGINT ends the run by the signal (status %d):\n%s", status, slurp(log));
    CHECK(count_files("second", "[.]tmp[.]") == 0, "the second SIGINT leaves no temporary file");
    int step = latest_state("second");
    CHECK(step >= 1, "the checkpoints before the second SIGINT are kept (latest %d)", step);
    int rc = run("%s " RUN " -x %d -o %s/second -y 1", bin, dir, step + 1, dir);
    CHECK(rc == 0 && strstr(output, "resumed from"), "the run resumes from its latest checkpoint:\n%s", output);
}

// the training-state file: every corruption named as one, never blamed on the learning rate
static void test_bad_state(void) {
    int rc = run("%s " RUN " -x 2 -o %s/st", bin, dir, dir);
    CHECK(rc == 0, "a run to corrupt:\n%s", output);
    struct { const char *what, *poke, *message; } cases[] = {
        {"NaN in a first moment", "printf '\\000\\000\\300\\177' | dd of=F bs=1 seek=104 conv=notrunc",
         "the file is corrupt: value 0 of the AdamW first moments (byte 104) is nan"},
        {"a negative second moment", "N=$(( ( $(stat -c %s F) - 104 ) / 2 )); "   // 2 arrays: fp32 has no master weights
         "printf '\\000\\000\\200\\277' | dd of=F bs=1 seek=$((104 + N)) conv=notrunc",
         "value 0 of the AdamW second moments"},
        {"bad magic", "printf 'XXXX' | dd of=F bs=1 seek=0 conv=notrunc", "not a training-state file (magic"},
        {"a step of 0", "printf '\\000' | dd of=F bs=1 seek=8 conv=notrunc", "corrupt header (step 0"},
        {"a negative data position", "printf '\\377\\377\\377\\377\\377\\377\\377\\377' | dd of=F bs=1 seek=32 conv=notrunc",
         "corrupt data position (epoch -1"},
        {"truncated", "truncate -s -4 F", "truncated:"},
        {"bytes past the end", "printf 'x' >> F", "1 unexpected bytes after the optimizer state"},
        {"shorter than its header", "truncate -s 40 F", "shorter than the 104-byte header of a version 2"},
        {"a version to come", "printf '\\003' | dd of=F bs=1 seek=4 conv=notrunc",
         "unsupported training-state version 3 (this program reads 1 and 2)"},
        {"a shuffle flag of 2", "printf '\\002' | dd of=F bs=1 seek=28 conv=notrunc", "master weights 0, shuffle 2)"},
        {"no training files", "printf '\\000' | dd of=F bs=1 seek=96 conv=notrunc", "corrupt header (0 training files"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char folder[400], cmd[2000];
        snprintf(folder, sizeof(folder), "%s/stF%zu", dir, i);   // an F, as a random name can hold
        run("rm -rf %s && cp -r %s/st %s", folder, dir, folder);
        // F in the template (after a space or '=') is the file; only the template is scanned,
        // never the folder names put in (a temporary folder's random name can hold an F)
        size_t n = 0;
        for (const char *t = cases[i].poke; *t && n < sizeof(cmd) - 1; t++) {
            int is_file = *t == 'F' && (t == cases[i].poke || t[-1] == ' ' || t[-1] == '=');
            if (is_file) n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, "%s/state_00000002.bin", folder);
            else cmd[n++] = *t;
        }
        cmd[n < sizeof(cmd) ? n : sizeof(cmd) - 1] = '\0';
        run("%s", cmd);
        rc = run("%s " RUN " -x 4 -o %s -y 1", bin, dir, folder);
        CHECK(rc == 1 && strstr(output, cases[i].message) && strstr(output, "state_00000002.bin") &&
              !strstr(output, "learning rate"), "%s: expected '%s':\n%s", cases[i].what, cases[i].message, output);
    }
}

// A resumed run reads the batches the run would have read next, or none: another training
// file (the same size, other tokens), another --shuffle or another --seed with --shuffle is
// refused naming both, and leaves the checkpoint and log.csv as they were. A version 1 state
// file (older runs: no data order recorded) still resumes, with a note.
static void test_resume_data_order(unsigned long long *rng) {
    int rc = run("%s " RUN " -x 2 --shuffle --seed 7 -o %s/order", bin, dir, dir);
    CHECK(rc == 0, "a shuffled run to resume:\n%s", output);
    run("cp %s/order/state_00000002.bin %s/order/log.csv %s/order/model_00000002.bin %s/ &&"
        " mkdir -p %s/orderv1 && cp %s/order/model_00000002.bin %s/orderv1/", dir, dir, dir, dir, dir, dir, dir);
    char p[512];
    snprintf(p, sizeof(p), "%s/other.bin", dir);
    write_token_file(p, 3000, 20240520, 1, 3000, rng);   // as train.bin's size, other tokens
    rc = run("%s -i %s/other.bin -v 0 -s 0 " TINY " -x 4 --shuffle --seed 7 -o %s/order -y 1", bin, dir, dir);
    CHECK(rc == 1 && strstr(output, "state_00000002.bin: the run was trained on 1 file(s) of 3000 tokens") &&
          strstr(output, "other.bin is 1 file(s) of 3000 tokens") && strstr(output, "same training files"),
          "resuming on another training file is refused, naming both:\n%s", output);
    rc = run("%s " RUN " -x 4 -o %s/order -y 1", bin, dir, dir);
    CHECK(rc == 1 && strstr(output, "the run was trained with --shuffle, and these flags do not give it"),
          "resuming without --shuffle is refused:\n%s", output);
    rc = run("%s " RUN " -x 4 --shuffle --seed 8 -o %s/order -y 1", bin, dir, dir);
    CHECK(rc == 1 && strstr(output, "shuffled its batches with --seed 7, and these flags say --seed 8"),
          "resuming with another --seed is refused, naming both:\n%s", output);
    const char *kept[] = {"state_00000002.bin", "log.csv", "model_00000002.bin"};
    for (int i = 0; i < 3; i++) {
        char a[512], b[512];
        snprintf(a, sizeof(a), "%s/order/%s", dir, kept[i]);
        snprintf(b, sizeof(b), "%s/%s", dir, kept[i]);
        CHECK(files_equal(a, b), "the refused resumes left %s as it was", kept[i]);
    }
    rc = run("%s " RUN " -x 3 --shuffle --seed 7 -o %s/order -y 1", bin, dir, dir);
    CHECK(rc == 0 && strstr(output, "resumed from"), "the same flags resume:\n%s", output);
    // the same state as version 1: the 72 bytes it had (version 1, [28] reserved 0), then the arrays
    run("F=%s/state_00000002.bin; { head -c 4 $F; printf '\\001\\000\\000\\000'; tail -c +9 $F | head -c 20;"
             " printf '\\000\\000\\000\\000'; tail -c +33 $F | head -c 40; tail -c +105 $F; }"
             " > %s/orderv1/state_00000002.bin", dir, dir);
    rc = run("%s " RUN " -x 3 -o %s/orderv1 -y 1", bin, dir, dir);
    CHECK(rc == 0 && strstr(output, "resumed from") && strstr(output, "is a version 1 training state"),
          "a version 1 state file resumes, with a note that the data order is not checked:\n%s", output);
}

int main(void) {
    if (cli_init("train_gpt2", "test_cli") != 0) return 1;
    unsigned long long rng = test_seed();
    write_train_val(&rng);
    test_full_run();
    test_mfu();
    test_resume_bit_exact();
    test_resume_data_order(&rng);
    test_bad_inputs(&rng);
    test_recompute();
    test_out_of_memory(&rng);
    test_bad_flags();
    test_bad_token_ids(&rng);
    test_output_folder();
    test_bad_state();
    test_stop_signals();
    test_one_run_per_folder();
    test_closed_stdout();
    test_file_size_limit();
    test_second_interrupt();
    return cli_finish(test_summary());
}
