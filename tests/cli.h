// cli.h: for the tests that run a program as a user would (tests/test_cli.c,
// tests/test_data_parallel.c): a scratch folder, and shell commands whose output is captured.
#ifndef TESTS_CLI_H
#define TESTS_CLI_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

static char dir[256];              // the test's scratch folder (the test makes it with mkdtemp)
static char output[1 << 16];       // what the last run() printed, stdout and stderr together

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
