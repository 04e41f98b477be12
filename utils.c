// utils.c: see utils.h.
#include "utils.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
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
    long here = ftell(f);
    if (here < 0 || fseek(f, 0, SEEK_END) != 0) die("%s: cannot seek: %s", path, strerror(errno));
    long size = ftell(f);
    if (size < 0 || fseek(f, here, SEEK_SET) != 0) die("%s: cannot seek: %s", path, strerror(errno));
    return size;
}

int file_exists(const char *path) { return access(path, F_OK) == 0; }

void atomic_open(AtomicFile *af, const char *path) {
    if (strlen(path) >= sizeof(af->path)) die("path too long: %s", path);
    snprintf(af->path, sizeof(af->path), "%s", path);
    snprintf(af->tmp_path, sizeof(af->tmp_path), "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp_path, "wb");
    if (!af->f) die("cannot write %s: %s", af->tmp_path, strerror(errno));
}

void atomic_write(AtomicFile *af, const void *src, size_t bytes) {
    if (bytes && fwrite(src, 1, bytes, af->f) != bytes) {
        int e = errno;
        atomic_abort(af);
        die("%s: write error: %s", af->tmp_path, strerror(e));
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
