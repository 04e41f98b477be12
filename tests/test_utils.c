// test_utils.c: the helpers every program relies on: atomic file writes (a process killed in
// the middle of one leaves the earlier file intact) and the checked parsing of flag values.
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../utils.h"
#include "test.h"

static int read_all(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = '\0';
    fclose(f);
    return (int)got;
}

static void test_atomic_write(void) {
    char dir[] = "/tmp/test_utils_XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return; }
    char path[256], buf[256];
    snprintf(path, sizeof(path), "%s/file.bin", dir);
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, "old contents", 12);
    atomic_commit(&af);
    CHECK(read_all(path, buf, sizeof(buf)) == 12 && strcmp(buf, "old contents") == 0,
          "a committed atomic write is there: '%s'", buf);

    // a writer killed between its writes and its commit: the old file must survive whole
    pid_t pid = fork();
    if (pid == 0) {
        AtomicFile child;
        atomic_open(&child, path);
        atomic_write(&child, "new con", 7);
        fflush(child.f);
        raise(SIGKILL);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the writer was killed mid-write");
    CHECK(read_all(path, buf, sizeof(buf)) == 12 && strcmp(buf, "old contents") == 0,
          "a write killed before its commit leaves the earlier file intact: '%s'", buf);

    // atomic_abort leaves the earlier file too, and removes its temporary file
    atomic_open(&af, path);
    atomic_write(&af, "never", 5);
    char tmp[sizeof(af.tmp_path)];
    snprintf(tmp, sizeof(tmp), "%s", af.tmp_path);
    atomic_abort(&af);
    CHECK(read_all(path, buf, sizeof(buf)) == 12, "an aborted write leaves the earlier file");
    CHECK(access(tmp, F_OK) != 0, "an aborted write removes its temporary file");

    atomic_open(&af, path);
    atomic_write(&af, "new contents!", 13);
    atomic_commit(&af);
    CHECK(read_all(path, buf, sizeof(buf)) == 13 && strcmp(buf, "new contents!") == 0,
          "a second committed write replaces the file: '%s'", buf);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "clean up");
}

// runs f(arg) in a child; returns its exit code (die() exits with 1)
static int exit_code_of(void (*f)(const char *), const char *arg) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        f(arg);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
static void parse_b(const char *text) { parse_long("-b", text, 1, 100); }
static void parse_l(const char *text) { parse_double("-l", text, 0.0, 1.0); }

static void test_parsing(void) {
    CHECK(parse_long("-b", "42", 1, 100) == 42, "an integer in range");
    CHECK(parse_double("-l", "3e-4", 0.0, 1.0) == 3e-4, "a float in range");
    CHECK(exit_code_of(parse_b, "12x") == 1, "trailing garbage after an integer is refused");
    CHECK(exit_code_of(parse_b, "") == 1, "an empty integer is refused");
    CHECK(exit_code_of(parse_b, "101") == 1, "an integer out of range is refused");
    CHECK(exit_code_of(parse_b, "99999999999999999999") == 1, "an integer that overflows is refused");
    CHECK(exit_code_of(parse_l, "nan") == 1, "NaN is refused");
    CHECK(exit_code_of(parse_l, "inf") == 1, "infinity is refused");
    CHECK(exit_code_of(parse_l, "2") == 1, "a float out of range is refused");
    char buf[32];
    format_bytes(buf, sizeof(buf), 1536.0);
    CHECK(strcmp(buf, "1.5 KiB") == 0, "format_bytes: '%s'", buf);
}

int main(void) {
    test_atomic_write();
    test_parsing();
    return test_summary();
}
