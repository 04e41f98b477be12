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
typedef struct {
    FILE *f;
    char path[4096];      // final path
    char tmp_path[4160];  // where the bytes go until atomic_commit
} AtomicFile;
// atomic_open dies when the folder is not writable or <path> is there but is not a regular file
void atomic_open(AtomicFile *af, const char *path);
void atomic_write(AtomicFile *af, const void *src, size_t bytes);
void atomic_commit(AtomicFile *af);                   // fsync + rename; dies on failure
void atomic_abort(AtomicFile *af);                    // close and remove the temporary file

// parse helpers for command-line values: die naming the flag when the text is not a number
long parse_long(const char *flag, const char *text, long lo, long hi);
double parse_double(const char *flag, const char *text, double lo, double hi);

double wall_seconds(void);               // monotonic clock
void format_bytes(char *buf, size_t n, double bytes);   // "123.4 MiB"

#ifdef __cplusplus
}
#endif
#endif
