// cli.h: for the tests that run a program as a user would (tests/test_cli.c,
// tests/test_data_parallel.c, tests/test_interrupt.c): a scratch folder, shell commands whose
// output is captured, a program started in the background to be signalled, and token files to
// train on.
#ifndef TESTS_CLI_H
#define TESTS_CLI_H

#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

static char bin[512];              // the program under test: $BUILD/<program>
static char dir[256];              // the test's scratch folder
static char output[1 << 16];       // what the last run() printed, stdout and stderr together

// finds $BUILD/<program> (make test sets BUILD) and makes the scratch folder /tmp/<name>_XXXXXX;
// returns 0, or 1 with a message when either fails
static inline int cli_init(const char *program, const char *name) {
    const char *build = getenv("BUILD");
    snprintf(bin, sizeof(bin), "%s/%s", build ? build : "build/cpu-flash", program);
    if (access(bin, X_OK) != 0) {
        printf("FAIL: %s not found (run through `make test`)\n", bin);
        return 1;
    }
    snprintf(dir, sizeof(dir), "/tmp/%s_XXXXXX", name);
    if (!mkdtemp(dir)) {
        printf("FAIL: cannot make a folder %s\n", dir);
        return 1;
    }
    return 0;
}

// runs a shell command with stdout and stderr captured into `output`; returns the exit code
// (128 when the command did not exit normally, e.g. a crash)
static inline int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int run(const char *fmt, ...) {
    char cmd[8192], path[300], full[8600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    snprintf(path, sizeof(path), "%s/output.txt", dir);
    snprintf(full, sizeof(full), "( %s ) > %s 2>&1", cmd, path);
    int status = system(full);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(output, 1, sizeof(output) - 1, f) : 0;
    output[n] = '\0';
    if (f) fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// a file's text, its first sizeof(output) - 1 bytes, in `output`
static inline const char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(output, 1, sizeof(output) - 1, f) : 0;
    output[n] = '\0';
    if (f) fclose(f);
    return output;
}

static inline void sleep_ms(double ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)((ms - 1000 * (long)(ms / 1000)) * 1e6)};
    nanosleep(&ts, NULL);
}

// starts the shell command `cmd` in the background, its stdout and stderr into log; returns
// its pid. The log is removed first, so that what the caller reads in it is this run's own
// output (the child's shell truncates it only once it runs: until then an earlier run's text
// would be read).
static inline pid_t start_logged(const char *cmd, const char *log) {
    char full[8600];
    unlink(log);
    snprintf(full, sizeof(full), "exec %s > %s 2>&1", cmd, log);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", full, (char *)NULL);
        _exit(127);
    }
    return pid;
}

// waits, up to 60 s, until text appears in the log of the running process pid; returns 1, or
// 0 when pid ended first (it is left to the caller's waitpid) or the time ran out
static inline int wait_for_text(pid_t pid, const char *log, const char *text) {
    for (int w = 0; w < 6000; w++) {
        if (strstr(slurp(log), text)) return 1;
        siginfo_t info = {0};
        if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) return 0;
        sleep_ms(10);
    }
    return 0;
}

// a token file (llm.c format: a header of 256 int32, magic and version and the token count it
// declares, then uint16 tokens) of ntokens random tokens below 1000
static inline void write_token_file(const char *path, int ntokens, int magic, int version, int declared,
                             unsigned long long *rng) {
    int header[256] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = declared;
    FILE *f = fopen(path, "wb");
    if (!f) { printf("FAIL: cannot write %s\n", path); exit(1); }
    fwrite(header, sizeof(int), 256, f);
    for (int i = 0; i < ntokens; i++) {
        uint16_t t = (uint16_t)((test_randf(rng) * 0.5f + 0.5f) * 1000);   // a small vocabulary
        fwrite(&t, 2, 1, f);
    }
    fclose(f);
}

// train.bin (3000 tokens) and val.bin (600) in the scratch folder
static inline void write_train_val(unsigned long long *rng) {
    char p[512];
    snprintf(p, sizeof(p), "%s/train.bin", dir);
    write_token_file(p, 3000, 20240520, 1, 3000, rng);
    snprintf(p, sizeof(p), "%s/val.bin", dir);
    write_token_file(p, 600, 20240520, 1, 600, rng);
}

// whether two files have the same bytes
static inline int files_equal(const char *a, const char *b) {
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "cmp -s %s %s", a, b);
    return system(cmd) == 0;
}

// the end of main: rc from test_summary(); the scratch folder is removed when all passed and
// kept, for a look, when not
static inline int cli_finish(int rc) {
    if (rc == 0) run("rm -rf %s", dir);
    else printf("files kept in %s\n", dir);
    return rc;
}

#endif
