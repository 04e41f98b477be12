// utils.c: see utils.h.
#include "utils.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void die(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
}

int fail_with(char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

FILE *fopen_or_die(const char *path, const char *mode) {
    FILE *f = fopen(path, mode);
    if (!f) die("cannot open %s for %s: %s", path, mode[0] == 'r' ? "reading" : "writing",
                strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) die("%s is a directory, not a file", path);
    return f;
}

void fread_or_die(void *dst, size_t size, size_t n, FILE *f, const char *path) {
    size_t got = fread(dst, size, n, f);
    if (got != n) {
        if (ferror(f)) die("%s: read error: %s", path, strerror(errno));
        die("%s: truncated file (wanted %zu more bytes, got %zu)", path, size * n, size * got);
    }
}

void fwrite_or_die(const void *src, size_t size, size_t n, FILE *f, const char *path) {
    if (fwrite(src, size, n, f) != n) die("%s: write error: %s", path, strerror(errno));
}

long file_size_or_die(FILE *f, const char *path) {
    struct stat st;
    if (fstat(fileno(f), &st) != 0) die("%s: cannot stat: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) die("%s is a directory, not a file", path);
    if (!S_ISREG(st.st_mode)) die("%s is not a regular file (a pipe or a device?)", path);
    long here = ftell(f);
    if (here < 0 || fseek(f, 0, SEEK_END) != 0) die("%s: cannot seek: %s", path, strerror(errno));
    long size = ftell(f);
    if (size < 0 || fseek(f, here, SEEK_SET) != 0) die("%s: cannot seek: %s", path, strerror(errno));
    return size;
}

uint8_t *read_file_or_die(const char *path, size_t *n) {
    FILE *f = fopen_or_die(path, "rb");
    long size = file_size_or_die(f, path);
    uint8_t *data = malloc((size_t)size + 1);
    if (!data) die("%s: out of memory reading %ld bytes", path, size);
    fread_or_die(data, 1, (size_t)size, f, path);
    fclose(f);
    data[size] = 0;
    *n = (size_t)size;
    return data;
}

int file_exists(const char *path) { return access(path, F_OK) == 0; }

void stdin_readable_or_die(const char *hint) {
    struct stat st;
    if (fstat(STDIN_FILENO, &st) != 0) die("stdin is closed: %s", hint);
    if (S_ISDIR(st.st_mode)) die("stdin is a directory: %s", hint);
}

void stdout_flush_or_die(void) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout))
        die("stdout: write error: %s", errno ? strerror(errno) : "an earlier write failed");
}

void atomic_open(AtomicFile *af, const char *path) {
    if (strlen(path) >= sizeof(af->path)) die("path too long: %s", path);
    snprintf(af->path, sizeof(af->path), "%s", path);
    snprintf(af->tmp_path, sizeof(af->tmp_path), "%s.tmp.%ld", path, (long)getpid());
    struct stat st;   // what the rename would replace: never a folder or a device
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode)) die("%s is a directory, not a file", path);
        die("%s is not a regular file (a device or a pipe?): it is written as a new file that "
            "replaces the old one when complete", path);
    }
    af->f = fopen(af->tmp_path, "wb");
    if (!af->f) die("cannot write %s: %s", af->tmp_path, strerror(errno));
}

void atomic_write(AtomicFile *af, const void *src, size_t bytes) {
    if (bytes && fwrite(src, 1, bytes, af->f) != bytes) {
        int e = errno;
        atomic_abort(af);
        die("%s: write error: %s (%s is left as it was)", af->tmp_path, strerror(e), af->path);
    }
}

void atomic_commit(AtomicFile *af) {
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) {
        int e = errno;
        atomic_abort(af);
        die("%s: write error: %s", af->tmp_path, strerror(e));
    }
    if (fclose(af->f) != 0) {
        af->f = NULL;
        int e = errno;
        remove(af->tmp_path);
        die("%s: write error: %s", af->tmp_path, strerror(e));
    }
    af->f = NULL;
    if (rename(af->tmp_path, af->path) != 0) {
        int e = errno;
        remove(af->tmp_path);
        die("cannot rename %s to %s: %s", af->tmp_path, af->path, strerror(e));
    }
}

void atomic_abort(AtomicFile *af) {
    if (af->f) fclose(af->f);
    af->f = NULL;
    remove(af->tmp_path);
}

long parse_long(const char *flag, const char *text, long lo, long hi) {
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0')
        die("flag %s: '%s' is not an integer", flag, text);
    if (v < lo || v > hi) die("flag %s: %ld is out of range [%ld, %ld]", flag, v, lo, hi);
    return v;
}

double parse_double(const char *flag, const char *text, double lo, double hi) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end != '\0' || !isfinite(v))
        die("flag %s: '%s' is not a number", flag, text);
    if (v < lo || v > hi) die("flag %s: %g is out of range [%g, %g]", flag, v, lo, hi);
    return v;
}

double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void format_bytes(char *buf, size_t n, double bytes) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) { bytes /= 1024.0; u++; }
    snprintf(buf, n, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
}
