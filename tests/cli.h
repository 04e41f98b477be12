// cli.h: for the tests that run a program as a user would (tests/test_cli.c,
// tests/test_data_parallel.c): a scratch folder, and shell commands whose output is captured.
#ifndef TESTS_CLI_H
#define TESTS_CLI_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char bin[512];              // the program under test: $BUILD/<program>
static char dir[256];              // the test's scratch folder
static char output[1 << 16];       // what the last run() printed, stdout and stderr together

// finds $BUILD/<program> (make test sets BUILD) and makes the scratch folder /tmp/<name>_XXXXXX;
// returns 0, or 1 with a message when either fails
static int cli_init(const char *program, const char *name) {
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
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
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

#endif
