// test_utils.c: the helpers every program relies on: atomic file writes (a process killed in
// the middle of one leaves the earlier file intact) and the checked parsing of flag values.
#include <signal.h>
#include <stdlib.h>
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

    // a writer that dies (die(), so exit(1)) mid-write takes its temporary file along
    pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        AtomicFile child;
        atomic_open(&child, path);
        atomic_write(&child, "half", 4);
        die("stop here");
    }
    waitpid(pid, &status, 0);
    char died[300];
    snprintf(died, sizeof(died), "%s.tmp.%d", path, (int)pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1 && access(died, F_OK) != 0,
          "die() mid-write removes the temporary file");

    // what a kill -9 left (the killed writer's above, and one more): removed when its process is
    // gone, kept while it lives
    pid = fork();
    if (pid == 0) _exit(0);
    waitpid(pid, &status, 0);   // pid: a process that no longer exists
    char stale[300], live[300];
    snprintf(stale, sizeof(stale), "%s/model.bin.tmp.%d", dir, (int)pid);
    snprintf(live, sizeof(live), "%s/model.bin.tmp.%d", dir, (int)getppid());
    fclose(fopen(stale, "wb"));
    fclose(fopen(live, "wb"));
    int removed = atomic_remove_stale(dir);
    CHECK(removed == 2 && access(stale, F_OK) != 0 && access(live, F_OK) == 0,
          "atomic_remove_stale removes dead processes' temporary files alone (%d)", removed);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "clean up");
}

static void parse_b(void *text) { parse_long("-b", text, 1, 100); }
static void parse_l(void *text) { parse_double("-l", text, 0.0, 1.0); }
// the exit status of parsing text with parse (in a child: die() exits with 1)
static int exit_code_of(void (*parse)(void *), const char *text) { return test_exit_status(parse, (void *)text); }

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

// what parse_flags accepts (its refusals exit; tests/test_flags.c and test_cli.c run those)
static void test_flag_table(void) {
    int n = 0, on = 0;
    long big = 0;
    float x = 0.0f;
    uint64_t seed = 0;
    const char *name = NULL;
    Flag flags[] = {INT_FLAG("-n", &n, 1, 10), SWITCH_FLAG("--on", &on), LONG_FLAG("-d", &big, -1, 1L << 40),
                    FLOAT_FLAG("-x", &x, 0.0, 1.0), U64_FLAG("--seed", &seed, 0, 1L << 62),
                    TEXT_FLAG("--name", &name)};
    char *argv[] = {"prog", "in", "-n", "7", "--on", "-d", "-1", "-", "-x", "0.5", "--seed", "99",
                    "--name", "-p", "--", "-n", NULL};
    char *pos[4];
    int count = parse_flags(16, argv, flags, 6, "prog", NULL, pos, 4);
    CHECK(n == 7 && on == 1 && big == -1 && x == 0.5f && seed == 99 && name && !strcmp(name, "-p"),
          "every kind of flag read (a value may start with '-')");
    CHECK(count == 3 && !strcmp(pos[0], "in") && !strcmp(pos[1], "-") && !strcmp(pos[2], "-n"),
          "positional arguments in order: '-' is one, and all after '--'");
    CHECK(flags[0].given && flags[1].given && !flag_named(flags, 6, "-q") && flag_named(flags, 6, "-x") == &flags[3],
          "given set, flags found by name");
    char *argv2[] = {"prog", "--on", "encode", "--on", "x", NULL};
    on = 0;
    flags[1].given = 0;
    count = parse_flags(5, argv2, flags, 6, "prog", NULL, pos, FLAGS_THEN_REST);
    CHECK(on == 1 && count == 3 && !strcmp(pos[0], "encode") && !strcmp(pos[1], "--on"),
          "FLAGS_THEN_REST: the flags end at the first positional argument");
}

// the benchmark switches (CUDA_PDL, DECODE_FUSED, ...): unset -> the fallback, "0" -> off,
// anything else -> on
static void test_env_flag(void) {
    unsetenv("TEST_UTILS_SWITCH");
    CHECK(env_flag("TEST_UTILS_SWITCH", 1) == 1 && env_flag("TEST_UTILS_SWITCH", 0) == 0,
          "env_flag: unset gives the fallback");
    setenv("TEST_UTILS_SWITCH", "0", 1);
    CHECK(env_flag("TEST_UTILS_SWITCH", 1) == 0, "env_flag: \"0\" is off");
    setenv("TEST_UTILS_SWITCH", "1", 1);
    CHECK(env_flag("TEST_UTILS_SWITCH", 0) == 1, "env_flag: \"1\" is on");
    setenv("TEST_UTILS_SWITCH", "no", 1);
    CHECK(env_flag("TEST_UTILS_SWITCH", 0) == 1, "env_flag: any other value is on");
    unsetenv("TEST_UTILS_SWITCH");
}

int main(void) {
    test_atomic_write();
    test_parsing();
    test_flag_table();
    test_env_flag();
    return test_summary();
}
