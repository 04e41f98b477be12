// test_flags.c: the command lines of infer_gpt2, prepare_data, tokenize and import_hf, read
// by the one parser of utils.c (parse_flags): a flag given twice, a stray argument, an unknown
// flag and a missing value are each refused with a message that names them, before any work
// (train_gpt2's own flags are in test_cli.c). The binaries are $BUILD/<program>.
#include <stdarg.h>
#include <string.h>

#include "cli.h"
#include "test.h"

static char build[512];

// expect exit `want` (1: an error) and `message` in the output of `program args`
static void expect(int want, const char *message, const char *program, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void expect(int want, const char *message, const char *program, const char *fmt, ...) {
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    int rc = run("%s/%s %s", build, program, args);
    CHECK(rc == want && strstr(output, message) != NULL && !strstr(output, "Sanitizer"),
          "%s %s: expected exit %d with '%s', got exit %d:\n%s", program, args, want, message, rc, output);
}

int main(void) {
    if (cli_init("infer_gpt2", "test_flags") != 0) return 1;
    snprintf(build, sizeof(build), "%s", getenv("BUILD") ? getenv("BUILD") : "build/cpu-flash");

    expect(1, "flag -p given twice", "infer_gpt2", "-c d1 -p A -p B");
    expect(1, "flag --ids given twice", "infer_gpt2", "-c d1 --ids --ids");
    expect(1, "unexpected argument 'hello': infer_gpt2 takes flags only", "infer_gpt2", "-c d1 hello");
    expect(1, "unknown flag --frobnicate", "infer_gpt2", "-c d1 -n 4 --frobnicate");
    expect(1, "flag -n needs a value", "infer_gpt2", "-c d1 -n");
    expect(1, "flag -n: 0 is out of range", "infer_gpt2", "-c d1 -n 0");
    expect(1, "flag --top-p: 2 is out of range", "infer_gpt2", "-c d1 --top-p 2");
    expect(1, "flag --top-p: 1e-300 is too close to 0 for a float", "infer_gpt2", "-c d1 --top-p 1e-300");
    expect(1, "flag -c needs a value, not the flag -p", "infer_gpt2", "-c -p hi");
    expect(0, "usage: infer_gpt2", "infer_gpt2", "--help");

    expect(1, "flag --threads given twice", "prepare_data", "--threads 2 --threads 3 in.txt out");
    expect(1, "unexpected argument 'c': prepare_data takes 2 arguments", "prepare_data", "a b c");
    expect(1, "give the INPUT text file and the OUT_PREFIX", "prepare_data", "a");
    expect(1, "unknown flag --frobnicate", "prepare_data", "a b --frobnicate");
    expect(1, "flag --val-tokens: -1 is out of range", "prepare_data", "--val-tokens -1 a b");
    expect(1, "flag --block-mb: 'x' is not an integer", "prepare_data", "--block-mb x a b");
    expect(1, "--tinyshakespeare and --sections", "prepare_data", "--tinyshakespeare --sections x a b");
    expect(0, "usage: prepare_data", "prepare_data", "-h");

    expect(1, "flag --vocab given twice", "tokenize", "--vocab a --vocab b encode hi");
    expect(1, "unknown flag --frobnicate", "tokenize", "--frobnicate encode hi");
    expect(1, "give a command", "tokenize", "--special");
    expect(1, "flag --threads needs a value", "tokenize", "--threads");
    expect(1, "flag --threads: 0 is out of range", "tokenize", "--threads 0 encode hi");
    expect(1, "unknown command 'frob'", "tokenize", "frob");
    expect(1, "tokenize decode-file takes one FILE, not 0 arguments", "tokenize", "decode-file");
    expect(0, "usage: tokenize", "tokenize", "--help");

    expect(1, "flag --n-head given twice", "import_hf", "--n-head 2 --n-head 3 a b");
    expect(1, "unexpected argument 'c': import_hf takes 2 arguments", "import_hf", "a b c");
    expect(1, "flag --n-head: 0 is out of range", "import_hf", "--n-head 0 a b");
    expect(1, "unknown flag --frobnicate", "import_hf", "a b --frobnicate");
    expect(1, "flag --n-head needs a value", "import_hf", "a b --n-head");

    int rc = test_summary();
    if (rc == 0) run("rm -rf %s", dir);
    return rc;
}
