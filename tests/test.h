// test.h: the smallest test harness that does the job. Each tests/test_*.c is one program:
// it calls CHECK/CHECK_CLOSE as often as it likes and ends with `return test_summary();`,
// which prints "<name>: N passed, N failed" and returns non-zero when anything failed.
// tests/run_tests.sh runs them all and adds up the counts.
#ifndef TEST_H
#define TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static int test_passed_count = 0;
static int test_failed_count = 0;
static int test_skipped_count = 0;

// CHECK(condition, printf-style description)
#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (cond) {                                                          \
            test_passed_count++;                                             \
        } else {                                                             \
            test_failed_count++;                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                      \
            printf(__VA_ARGS__);                                             \
            printf("\n");                                                    \
        }                                                                    \
    } while (0)

// fn(arg) run in a child process, its stderr thrown away: the child's exit status, 128 + the
// signal that ended it, or -1 where it could not be run. For checking that an error ends the
// program with exit(1) (die()) while the test process goes on as it was.
static inline int test_exit_status(void (*fn)(void *), void *arg) {
    fflush(stdout);   // or the child's exit prints this process's buffered output again
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(2);
        fn(arg);
        _exit(0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

// Relative error ||a - b|| / ||b|| of two float arrays (L2 norms), in double precision.
// NaN or Inf anywhere yields INFINITY, so it never passes a tolerance check.
static inline double rel_error(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

// CHECK_CLOSE(a, b, n, tol, description): relative error of a against reference b <= tol
#define CHECK_CLOSE(a, b, n, tol, ...)                                       \
    do {                                                                     \
        double err_ = rel_error((a), (b), (n));                              \
        if (err_ <= (tol)) {                                                 \
            test_passed_count++;                                             \
        } else {                                                             \
            test_failed_count++;                                             \
            printf("FAIL %s:%d: rel error %.3e > %.1e: ", __FILE__, __LINE__, \
                   err_, (double)(tol));                                     \
            printf(__VA_ARGS__);                                             \
            printf("\n");                                                    \
        }                                                                    \
    } while (0)

#define SKIP(...)                                                            \
    do {                                                                     \
        test_skipped_count++;                                                \
        printf("SKIP: ");                                                    \
        printf(__VA_ARGS__);                                                 \
        printf("\n");                                                        \
    } while (0)

static inline int test_summary_named(const char *name) {
    printf("%s: %d passed, %d failed, %d skipped\n", name, test_passed_count,
           test_failed_count, test_skipped_count);
    return test_failed_count ? 1 : 0;
}
#define test_summary() test_summary_named(__FILE__)

// deterministic random numbers for tests (xorshift*), so a failure can be replayed
static inline float test_randf(unsigned long long *state) {   // uniform in [-1, 1)
    *state ^= *state >> 12; *state ^= *state << 25; *state ^= *state >> 27;
    unsigned long long r = *state * 0x2545F4914F6CDD1DULL;
    return (float)((r >> 40) / 16777216.0) * 2.0f - 1.0f;
}
// A fresh seed each run (from the clock), printed so that a failure can be replayed with
// TEST_SEED=<seed>.
#include <time.h>
static inline unsigned long long test_seed(void) {
    const char *env = getenv("TEST_SEED");
    unsigned long long seed = env ? strtoull(env, NULL, 10) : (unsigned long long)time(NULL);
    if (seed == 0) seed = 1;
    printf("random seed %llu (replay with TEST_SEED=%llu)\n", seed, seed);
    return seed;
}
static inline void test_fill(float *x, size_t n, float scale, unsigned long long *state) {
    for (size_t i = 0; i < n; i++) x[i] = scale * test_randf(state);
}

// new arrays (n) of the values of x widened to double, or rounded to float, for references
// computed in double; exits when out of memory
static inline double *test_to_double(const float *x, size_t n) {
    double *d = (double *)calloc(n ? n : 1, sizeof(double));
    if (!d) { fprintf(stderr, "out of memory (%zu doubles)\n", n); exit(1); }
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static inline float *test_to_float(const double *x, size_t n) {
    float *f = (float *)calloc(n ? n : 1, sizeof(float));
    if (!f) { fprintf(stderr, "out of memory (%zu floats)\n", n); exit(1); }
    for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
    return f;
}

#endif
