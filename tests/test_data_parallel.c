// test_data_parallel.c: train_gpt2 on several CPU ranks (processes meeting through a
// shared-memory file, runtime/comm.c) against one process, on a tiny model (d1):
//   - 2 ranks at batch B give the losses, gradient norms and validation losses of 1 rank at
//     batch 2B, and of 1 rank at batch B with 2 accumulation steps (fp32: 1e-5 relative);
//     3 ranks (shards of unequal use) likewise against 1 rank with 3 accumulation steps;
//   - 1 rank with the transport forced on is bit-identical to 1 rank without it;
//   - checkpoints of the 2-rank run resume on 1 rank, and those of 1 rank on 2 ranks, with
//     the next losses of the uninterrupted runs;
//   - SIGINT to one rank stops both after the same step, with that step's checkpoint;
//   - bad input ends with a clear message and a non-zero exit, never a hang: a rank outside
//     the world, a missing rendezvous folder, a rank that never arrives, a rank that dies.
// The binary under test is $BUILD/train_gpt2 (make test sets BUILD).
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "test.h"



// Starts `world` ranks of train_gpt2 with args (one thread each: CI has 2 cores), each in the
// background with its own --rank and the rendezvous folder <dir>/rv_<name>, and waits for all.
// Rank 0's output ends up in `output`, the others' after it. Returns 0 when every rank exited 0.
static int run_ranks(int world, const char *name, const char *args) {
    char cmd[8192];
    int len = snprintf(cmd, sizeof(cmd), "mkdir -p %s/rv_%s; pids=''; ", dir, name);
    for (int r = 0; r < world; r++)
        len += snprintf(cmd + len, sizeof(cmd) - len,
                        "OMP_NUM_THREADS=1 %s %s --world %d --rank %d --comm-dir %s/rv_%s --comm-timeout 30 "
                        "> %s/rank%d_%s.txt 2>&1 & pids=\"$pids $!\"; ",
                        bin, args, world, r, dir, name, dir, r, name);
    len += snprintf(cmd + len, sizeof(cmd) - len, "rc=0; for p in $pids; do wait $p || rc=1; done; ");
    for (int r = 0; r < world; r++)
        len += snprintf(cmd + len, sizeof(cmd) - len, "cat %s/rank%d_%s.txt; ", dir, r, name);
    snprintf(cmd + len, sizeof(cmd) - len, "exit $rc");
    return run("%s", cmd);
}

// log.csv of a run: per train step its loss and gradient norm, per validation its loss
typedef struct {
    int steps, vals;
    double loss[16], norm[16], val[16];
    char line[16][512];   // "step,train,loss,grad_norm,lr" as printed
} Log;

static Log read_log(const char *run_dir) {
    Log log;
    memset(&log, 0, sizeof(log));
    char path[512], line[512];
    snprintf(path, sizeof(path), "%s/%s/log.csv", dir, run_dir);
    FILE *f = fopen(path, "r");
    if (!f) return log;
    while (fgets(line, sizeof(line), f)) {
        int step;
        double a, b;
        if (sscanf(line, "%d,train,%lf,%lf", &step, &a, &b) == 3 && log.steps < 16) {
            char *p = line;
            for (int commas = 0; *p && commas < 5; p++) commas += *p == ',';
            p[-1] = '\0';
            snprintf(log.line[log.steps], sizeof(log.line[0]), "%s", line);
            log.loss[log.steps] = a;
            log.norm[log.steps++] = b;
        } else if (sscanf(line, "%d,val,%lf", &step, &a) == 2 && log.vals < 16) {
            log.val[log.vals++] = a;
        }
    }
    fclose(f);
    return log;
}

static double rel_diff(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

// the train steps first..first+n-1 of `a` against steps ref_first.. of `ref`, within tol
static void compare_steps(const Log *a, int first, const Log *ref, int ref_first, int n,
                          double tol, const char *what) {
    CHECK(a->steps >= first + n && ref->steps >= ref_first + n, "%s: %d and %d steps logged",
          what, a->steps, ref->steps);
    if (a->steps < first + n || ref->steps < ref_first + n) return;
    for (int i = 0; i < n; i++) {
        CHECK(rel_diff(a->loss[first + i], ref->loss[ref_first + i]) <= tol &&
                  rel_diff(a->norm[first + i], ref->norm[ref_first + i]) <= tol,
              "%s, step %d: '%s' vs '%s'", what, first + i + 1, a->line[first + i],
              ref->line[ref_first + i]);
    }
}

#define COMMON "-i %s/train.bin -j %s/val.bin -e d1 -t 16 --max-seq-len 64 -x 6 -n 3 -v 3 -m 3 -s 0 " \
               "-l 1e-3 -u 2 -q 0.1 -c 0.1"
static char common[1024];

static int run_one(const char *out, const char *extra) {
    return run("OMP_NUM_THREADS=1 %s %s %s -o %s/%s", bin, common, extra, dir, out);
}
static int run_many(int world, const char *out, const char *extra) {
    char args[2048];
    snprintf(args, sizeof(args), "%s %s -o %s/%s", common, extra, dir, out);
    return run_ranks(world, out, args);
}

static void test_same_losses(void) {
    int rc = run_one("one_2B", "-b 4");
    CHECK(rc == 0, "1 rank at B=4:\n%s", output);
    rc = run_one("one_accum2", "-b 2 -d 64");
    CHECK(rc == 0, "1 rank at B=2, 2 accumulation steps:\n%s", output);
    rc = run_many(2, "two", "-b 2");
    CHECK(rc == 0 && strstr(output, "2 ranks (shm"), "2 ranks at B=2:\n%s", output);
    CHECK(strstr(output, "tokens/step") && strstr(output, "64 tokens/step"), "-d defaults to all ranks' tokens");
    Log one_2B = read_log("one_2B"), one_accum2 = read_log("one_accum2"), two = read_log("two");
    compare_steps(&two, 0, &one_accum2, 0, 6, 1e-5, "2 ranks vs 1 rank with accumulation");
    compare_steps(&two, 0, &one_2B, 0, 6, 1e-5, "2 ranks at B vs 1 rank at 2B");
    CHECK(two.vals == 3 && one_2B.vals == 3, "validation at steps 0, 3, 6 (%d, %d)", two.vals, one_2B.vals);
    for (int i = 0; i < two.vals && i < one_accum2.vals; i++)
        CHECK(rel_diff(two.val[i], one_accum2.val[i]) <= 1e-5, "val loss %d: %.6f vs %.6f", i,
              two.val[i], one_accum2.val[i]);
    char a[512], b[512];
    struct stat sa, sb;
    snprintf(a, sizeof(a), "%s/two/state_00000006.bin", dir);
    snprintf(b, sizeof(b), "%s/one_accum2/state_00000006.bin", dir);
    CHECK(stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_size == sb.st_size,
          "the training state has the same size written by 2 ranks or 1");
    snprintf(a, sizeof(a), "%s/two/log.csv", dir);
    CHECK(access(a, F_OK) == 0, "rank 0 writes the log");

    // 3 ranks: the parameter count is not a multiple of 3 * 128, so the last shard is padded
    rc = run_one("one_accum3", "-b 2 -d 96");
    CHECK(rc == 0, "1 rank at B=2, 3 accumulation steps:\n%s", output);
    rc = run_many(3, "three", "-b 2");
    CHECK(rc == 0, "3 ranks at B=2:\n%s", output);
    Log one_accum3 = read_log("one_accum3"), three = read_log("three");
    compare_steps(&three, 0, &one_accum3, 0, 6, 1e-5, "3 ranks vs 1 rank with accumulation");

    // the transport forced on for one rank changes nothing, to the last bit
    run("mkdir -p %s/rv_forced", dir);
    char extra[512];
    snprintf(extra, sizeof(extra), "-b 2 -d 64 --comm shm --comm-dir %s/rv_forced", dir);
    rc = run_one("forced", extra);
    CHECK(rc == 0 && strstr(output, "1 ranks (shm"), "1 rank with --comm shm:\n%s", output);
    Log forced = read_log("forced");
    CHECK(forced.steps == 6, "6 steps with the forced transport (%d)", forced.steps);
    for (int i = 0; i < forced.steps && i < one_accum2.steps; i++)
        CHECK(strcmp(forced.line[i], one_accum2.line[i]) == 0, "forced transport, step %d: '%s' vs '%s'",
              i + 1, forced.line[i], one_accum2.line[i]);
    run("ls -A %s/rv_two %s/rv_three %s/rv_forced", dir, dir, dir);
    CHECK(!strstr(output, "comm.shm"), "no rendezvous file is left behind:\n%s", output);
}

// a run's step-3 checkpoint, resumed in a new folder on another number of ranks
static void test_resume_across_worlds(void) {
    run("mkdir -p %s/from_two %s/from_one && cp %s/two/model_00000003.bin %s/two/state_00000003.bin "
        "%s/from_two/ && cp %s/one_accum2/model_00000003.bin %s/one_accum2/state_00000003.bin %s/from_one/",
        dir, dir, dir, dir, dir, dir, dir, dir);
    int rc = run_one("from_two", "-b 2 -d 64 -y 1");
    CHECK(rc == 0 && strstr(output, "resumed from"), "2 ranks' checkpoint resumed on 1:\n%s", output);
    Log two = read_log("two"), one = read_log("one_accum2");
    Log from_two = read_log("from_two");
    compare_steps(&from_two, 0, &two, 3, 3, 1e-5, "resumed on 1 rank vs 2 ranks uninterrupted");
    rc = run_many(2, "from_one", "-b 2 -y 1");
    CHECK(rc == 0 && strstr(output, "resumed from"), "1 rank's checkpoint resumed on 2:\n%s", output);
    Log from_one = read_log("from_one");
    compare_steps(&from_one, 0, &one, 3, 3, 1e-5, "resumed on 2 ranks vs 1 rank uninterrupted");
    // another total batch is refused, as on one rank
    rc = run_many(2, "from_one", "-b 2 -d 128 -y 1");
    CHECK(rc != 0 && strstr(output, "resume with the same"), "resume with another -d refused:\n%s", output);
}

// SIGINT to one rank of two: both stop after the same step (they agree once per step), rank 0
// writes that step's checkpoint, the signalled rank exits 130 and the other 143
static void test_interrupt_one_rank(void) {
    int rc = run("mkdir -p %s/rv_stop; for r in 0 1; do OMP_NUM_THREADS=1 %s -i %s/train.bin -e d1 -t 16 "
                 "--max-seq-len 64 -b 2 -x 100000 -v 0 -s 0 -o %s/stop --world 2 --rank $r --comm-dir "
                 "%s/rv_stop --comm-timeout 30 > %s/stop_rank$r.txt 2>&1 & eval p$r=$!; done; "
                 "for i in $(seq 600); do [ \"$(grep -c ',train,' %s/stop/log.csv 2>/dev/null)\" -ge 3 ] "
                 "&& break; sleep 0.1; done; kill -INT $p1; wait $p0; r0=$?; wait $p1; r1=$?; "
                 "echo \"exit $r0 $r1\"; ls %s/stop; grep -c ',train,' %s/stop/log.csv",
                 dir, bin, dir, dir, dir, dir, dir, dir, dir);
    CHECK(rc == 0 && strstr(output, "exit 143 130"), "rank 0 exits 143, the signalled rank 1 130:\n%s", output);
    const char *last_line = output;   // the count of train lines
    for (const char *p = output; (p = strchr(p, '\n')) && p[1]; p++) last_line = p + 1;
    int steps = atoi(last_line);
    char want[64];
    snprintf(want, sizeof(want), "state_%08d.bin", steps);
    CHECK(steps >= 3 && strstr(output, want), "the checkpoint of the last logged step %d is written:\n%s", steps, output);
}

// expect a non-zero exit and `message` in the output
static void expect_error(int rc, const char *message, const char *what) {
    CHECK(rc != 0 && rc != 128 && strstr(output, message) != NULL && !strstr(output, "Sanitizer"),
          "%s: expected a non-zero exit with '%s', got exit %d:\n%s", what, message, rc, output);
}

static void test_bad_inputs(void) {
    char tiny[1024];
    snprintf(tiny, sizeof(tiny), "-i %s/train.bin -e d1 -b 2 -t 16 --max-seq-len 64 -x 1 -v 0 -s 0", dir);
    run("mkdir -p %s/rv_bad", dir);
    expect_error(run("%s %s --world 2 --rank 2 --comm-dir %s/rv_bad", bin, tiny, dir),
                 "rank 2 is outside a world of 2", "rank >= world");
    expect_error(run("%s %s --world 2 --rank 0", bin, tiny),
                 "need a rendezvous folder (--comm-dir)", "no rendezvous folder");
    expect_error(run("%s %s --world 2 --rank 0 --comm-dir %s/nothere", bin, tiny, dir),
                 "No such file or directory (create it first", "missing rendezvous folder");
    expect_error(run("%s %s --comm nccl", bin, tiny), "not this build's transport", "--comm nccl on the CPU");
    expect_error(run("%s %s --world 2 --rank 0 -d 32 --comm-dir %s/rv_bad", bin, tiny, dir),
                 "not a positive multiple of B*T*world = 2*16*2", "-d too small for 2 ranks");
    expect_error(run("%s %s --world 2 --rank 0 --comm-dir %s/rv_bad --comm-timeout 1", bin, tiny, dir),
                 "timed out after 1 s waiting in", "rank 1 never arrives");
    CHECK(strstr(output, "for rank(s) 1 to join"), "the message names the missing rank:\n%s", output);
    run("ls -A %s/rv_bad", dir);
    CHECK(output[0] == '\0', "a timed-out rank 0 leaves no file behind: '%s'", output);
    // rank and world from torchrun's variables
    expect_error(run("RANK=1 WORLD_SIZE=2 %s %s --comm-dir %s/rv_bad --comm-timeout 1", bin, tiny, dir),
                 "rank 1: timed out after 1 s waiting for rank 0", "rank 0 never arrives (from RANK, WORLD_SIZE)");
    // rank 1 dies after joining (its data file is missing): rank 0 stops too, with a message
    char args[2048];
    snprintf(args, sizeof(args), "%s -i %s/$( [ $r = 0 ] && echo train || echo nothere ).bin",
             strstr(tiny, " -e "), dir);   // tiny less its own -i
    int rc = run("mkdir -p %s/rv_dies; for r in 0 1; do OMP_NUM_THREADS=1 %s %s --world 2 --rank $r "
                 "--comm-dir %s/rv_dies --comm-timeout 30 & [ $r = 0 ] && p0=$!; done; wait $p0; rc=$?; "
                 "wait; exit $rc", dir, bin, args, dir);
    expect_error(rc, "rank 1 ended while this rank waited", "a rank that dies");
}

int main(void) {
    if (cli_init("train_gpt2", "test_dp") != 0) return 1;
    snprintf(common, sizeof(common), COMMON, dir, dir);
    unsigned long long rng = test_seed();
    write_train_val(&rng);
    test_same_losses();
    test_resume_across_worlds();
    test_interrupt_one_rank();
    test_bad_inputs();
    return cli_finish(test_summary());
}
