// utils.h: small host-side helpers shared by every program: fatal errors, checked file I/O,
// atomic file writes. Every failure ends the program with a message naming the file.
// C, and usable from CUDA sources (host code) as well.
#ifndef UTILS_H
#define UTILS_H

#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// print "error: <message>\n" to stderr and exit(1)
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
// print "note: <message>\n" to stderr and go on: what the user should know of a failure the
// program works around or leaves to its caller (a slower fallback taken, no GPU found). Both
// flush stdout first, so that the message stands after what the program printed before it.
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// For parsers that report instead of exiting (so they can be fuzzed): writes the message into
// err (err_len bytes; nothing when err is NULL) and returns -1.
int fail_with(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// fopen that dies with "cannot open <path> for <reading|writing>: <strerror>", or, for
// reading, "<path> is a directory, not a file" (fopen opens a directory for reading)
FILE *fopen_or_die(const char *path, const char *mode);
// fread exactly n items or die with "<path>: truncated file (...)"
void fread_or_die(void *dst, size_t size, size_t n, FILE *f, const char *path);
void fwrite_or_die(const void *src, size_t size, size_t n, FILE *f, const char *path);
// the size of f, which must be a regular file (not a directory, pipe or device)
long file_size_or_die(FILE *f, const char *path);
// a whole file in memory (NUL-terminated for convenience; *n excludes the NUL)
uint8_t *read_file_or_die(const char *path, size_t *n);
int file_exists(const char *path);
// stdin can be read: dies with "stdin is closed: <hint>" or "stdin is a directory: <hint>"
void stdin_readable_or_die(const char *hint);
// flushes stdout; dies with "stdout: write error: <strerror>" when any write to it failed
void stdout_flush_or_die(void);

// Atomic writes: data goes to "<path>.tmp.<pid>", which is flushed, fsync'ed and renamed over
// <path> only when complete, so a crash or kill mid-write leaves any earlier <path> intact.
// An open AtomicFile is registered until it is committed or aborted: on exit (die included)
// its temporary file is removed, and atomic_remove_all_signal_safe does the same from a
// signal handler. What only kill -9 can leave, atomic_remove_stale cleans at the next start.
typedef struct {
    FILE *f;
    char path[4096];      // final path
    char tmp_path[4160];  // where the bytes go until atomic_commit
    int slot;             // its place among the open ones (see below)
} AtomicFile;
// atomic_open dies when the folder is not writable or <path> is there but is not a regular file
void atomic_open(AtomicFile *af, const char *path);
void atomic_write(AtomicFile *af, const void *src, size_t bytes);
void atomic_commit(AtomicFile *af);                   // fsync + rename; dies on failure
void atomic_abort(AtomicFile *af);                    // close and remove the temporary file
void atomic_remove_all_signal_safe(void);             // unlink every open one's temporary file
// removes dir's "*.tmp.<pid>" files whose process is gone; returns how many it removed
int atomic_remove_stale(const char *dir);

// parse helpers for command-line values: die naming the flag when the text is not a number
long parse_long(const char *flag, const char *text, long lo, long hi);
double parse_double(const char *flag, const char *text, double lo, double hi);

// Command-line flags, the one way every program reads them: a table of the flags, each with
// where its value goes and the range a number must lie in. parse_flags refuses, naming the
// flag: an unknown flag, a flag given twice, a missing value, a value that is not a number or
// lies outside its range, and arguments that are not flags where the program takes none.
typedef enum { FLAG_SWITCH, FLAG_TEXT, FLAG_INT, FLAG_LONG, FLAG_U64, FLAG_FLOAT, FLAG_DOUBLE } FlagKind;
typedef struct {
    const char *name;     // "-b", "--max-seq-len"
    FlagKind kind;
    void *value;          // SWITCH: int set to 1, takes no value; TEXT: const char *; INT: int;
                          // LONG: long; U64: uint64_t; FLOAT: float; DOUBLE: double
    long lo, hi;          // INT, LONG, U64: the allowed range
    double min, max;      // FLOAT, DOUBLE: the allowed range
    int given;            // set by parse_flags: the flag was on the command line
} Flag;
// The pointer's type is checked: a mismatch is a compiler warning.
#define SWITCH_FLAG(name, p) {name, FLAG_SWITCH, (void *)(1 ? (p) : (int *)0), 0, 0, 0, 0, 0}
#define TEXT_FLAG(name, p) {name, FLAG_TEXT, (void *)(1 ? (p) : (const char **)0), 0, 0, 0, 0, 0}
#define INT_FLAG(name, p, lo, hi) {name, FLAG_INT, (void *)(1 ? (p) : (int *)0), lo, hi, 0, 0, 0}
#define LONG_FLAG(name, p, lo, hi) {name, FLAG_LONG, (void *)(1 ? (p) : (long *)0), lo, hi, 0, 0, 0}
#define U64_FLAG(name, p, lo, hi) {name, FLAG_U64, (void *)(1 ? (p) : (uint64_t *)0), lo, hi, 0, 0, 0}
#define FLOAT_FLAG(name, p, min, max) {name, FLAG_FLOAT, (void *)(1 ? (p) : (float *)0), 0, 0, min, max, 0}
#define DOUBLE_FLAG(name, p, min, max) {name, FLAG_DOUBLE, (void *)(1 ? (p) : (double *)0), 0, 0, min, max, 0}

// Parses argv[1..argc) against flags[0..n). -h and --help print usage(stdout) and exit 0;
// "--" ends the flags. Positional arguments (anything not starting with '-', and "-") are
// stored in positional[] in order: at most max_positional of them among the flags, or, with
// FLAGS_THEN_REST, the flags end at the first one, which is stored with all that follow it.
// Returns the number stored. Messages name the program, for "see <program> --help".
#define FLAGS_THEN_REST (-1)
int parse_flags(int argc, char **argv, Flag *flags, int n, const char *program,
                void (*usage)(FILE *out), char **positional, int max_positional);
const Flag *flag_named(const Flag *flags, int n, const char *name);   // NULL when none

// an environment switch (benchmark and debugging switches): unset -> fallback, "0" -> 0,
// anything else -> 1. Callers that read it on a hot path keep the answer.
int env_flag(const char *name, int fallback);

double wall_seconds(void);               // monotonic clock
void format_bytes(char *buf, size_t n, double bytes);   // "123.4 MiB"

#ifdef __cplusplus
}
#endif
#endif
