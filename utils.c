// utils.c: see utils.h.
#include "utils.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// "<kind>: <message>\n" on stderr, after what stdout holds so far
static void report(const char *kind, const char *fmt, va_list ap) {
    fflush(stdout);
    fprintf(stderr, "%s: ", kind);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
}

void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report("error", fmt, ap);
    va_end(ap);
    exit(1);
}

void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report("note", fmt, ap);
    va_end(ap);
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

// The temporary files of the AtomicFiles that are open: a fixed table, so that a signal
// handler can walk it without allocating. A program has a few open at a time (one per file
// being written); more is a bug.
#define MAX_OPEN_ATOMIC 16
static char open_tmp_paths[MAX_OPEN_ATOMIC][4160];
static volatile sig_atomic_t open_tmp_used[MAX_OPEN_ATOMIC];

static void remove_open_temporaries(void) { atomic_remove_all_signal_safe(); }

void atomic_remove_all_signal_safe(void) {
    for (int i = 0; i < MAX_OPEN_ATOMIC; i++)
        if (open_tmp_used[i]) unlink(open_tmp_paths[i]);
}

static void unregister(AtomicFile *af) {
    if (af->slot >= 0) open_tmp_used[af->slot] = 0;
    af->slot = -1;
}

void atomic_open(AtomicFile *af, const char *path) {
    static int cleanup_registered = 0;
    if (!cleanup_registered) {
        atexit(remove_open_temporaries);
        cleanup_registered = 1;
    }
    af->f = NULL;   // not open yet, and in no slot: an atomic_abort after a die below frees none
    af->slot = -1;
    if (strlen(path) >= sizeof(af->path)) die("path too long: %s", path);
    snprintf(af->path, sizeof(af->path), "%s", path);
    snprintf(af->tmp_path, sizeof(af->tmp_path), "%s.tmp.%ld", path, (long)getpid());
    struct stat st;   // what the rename would replace: never a folder or a device
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode)) die("%s is a directory, not a file", path);
        die("%s is not a regular file (a device or a pipe?): it is written as a new file that "
            "replaces the old one when complete", path);
    }
    for (int i = 0; i < MAX_OPEN_ATOMIC && af->slot < 0; i++)
        if (!open_tmp_used[i]) af->slot = i;
    if (af->slot < 0) die("internal error: more than %d files written at once", MAX_OPEN_ATOMIC);
    memcpy(open_tmp_paths[af->slot], af->tmp_path, sizeof(af->tmp_path));
    atomic_signal_fence(memory_order_seq_cst);   // the path is whole before a handler can see the slot
    open_tmp_used[af->slot] = 1;   // before the file exists: a signal now unlinks nothing
    af->f = fopen(af->tmp_path, "wb");
    if (!af->f) {
        int e = errno;
        unregister(af);
        die("cannot write %s: %s", af->tmp_path, strerror(e));
    }
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
        atomic_abort(af);
        die("%s: write error: %s", af->tmp_path, strerror(e));
    }
    af->f = NULL;
    if (rename(af->tmp_path, af->path) != 0) {
        int e = errno;
        atomic_abort(af);
        die("cannot rename %s to %s: %s", af->tmp_path, af->path, strerror(e));
    }
    unregister(af);
}

void atomic_abort(AtomicFile *af) {
    if (af->f) fclose(af->f);
    af->f = NULL;
    remove(af->tmp_path);
    unregister(af);
}

// A name "<anything>.tmp.<digits>" whose process no longer exists. A process that lives on
// (another program writing into the folder now) keeps its file; one of another machine
// sharing the folder cannot be asked, so the folder should belong to one run at a time.
int atomic_remove_stale(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *tag = strstr(e->d_name, ".tmp.");
        if (!tag) continue;
        for (const char *next; (next = strstr(tag + 1, ".tmp.")); ) tag = next;
        const char *digits = tag + 5;
        char *end = NULL;
        long pid = strtol(digits, &end, 10);
        if (end == digits || *end != '\0' || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno == EPERM) continue;   // still running
        char path[4096];
        if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path)) continue;
        if (unlink(path) == 0) removed++;
    }
    closedir(d);
    return removed;
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

const Flag *flag_named(const Flag *flags, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(flags[i].name, name) == 0) return &flags[i];
    return NULL;
}

// a value of flag f from text; dies naming the flag when it does not parse or fit
static void set_flag(Flag *f, const char *text) {
    switch (f->kind) {
    case FLAG_SWITCH: *(int *)f->value = 1; break;
    case FLAG_TEXT: *(const char **)f->value = text; break;
    case FLAG_INT: *(int *)f->value = (int)parse_long(f->name, text, f->lo, f->hi); break;
    case FLAG_LONG: *(long *)f->value = parse_long(f->name, text, f->lo, f->hi); break;
    case FLAG_U64: *(uint64_t *)f->value = (uint64_t)parse_long(f->name, text, f->lo, f->hi); break;
    case FLAG_FLOAT: {
        const double v = parse_double(f->name, text, f->min, f->max);
        if (v != 0.0 && fabs(v) < FLT_MIN)   // would be read as 0 (or a denormal) in float
            die("flag %s: %s is too close to 0 for a float (its smallest is %g)", f->name, text,
                (double)FLT_MIN);
        *(float *)f->value = (float)v;
        break;
    }
    case FLAG_DOUBLE: *(double *)f->value = parse_double(f->name, text, f->min, f->max); break;
    }
}

int parse_flags(int argc, char **argv, Flag *flags, int n, const char *program,
                void (*usage)(FILE *out), char **positional, int max_positional) {
    int count = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int is_flag = arg[0] == '-' && arg[1] != '\0';
        if (is_flag && strcmp(arg, "--") == 0) {   // the rest are positional, whatever they look like
            for (i++; i < argc; i++) {
                if (max_positional != FLAGS_THEN_REST && count >= max_positional)
                    die("unexpected argument '%s' (see %s --help)", argv[i], program);
                positional[count++] = argv[i];
            }
            break;
        }
        if (!is_flag) {
            if (max_positional == FLAGS_THEN_REST) {
                while (i < argc) positional[count++] = argv[i++];
                break;
            }
            if (max_positional == 0)
                die("unexpected argument '%s': %s takes flags only (see %s --help)", arg, program, program);
            if (count >= max_positional)
                die("unexpected argument '%s': %s takes %d argument%s (see %s --help)", arg, program,
                    max_positional, max_positional == 1 ? "" : "s", program);
            positional[count++] = argv[i];
            continue;
        }
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) { usage(stdout); exit(0); }
        Flag *f = (Flag *)flag_named(flags, n, arg);
        if (!f) die("unknown flag %s (see %s --help)", arg, program);
        if (f->given) die("flag %s given twice: give each flag once", arg);
        f->given = 1;
        if (f->kind == FLAG_SWITCH) { set_flag(f, NULL); continue; }
        if (i + 1 >= argc) die("flag %s needs a value (see %s --help)", arg, program);
        if (f->kind == FLAG_TEXT && flag_named(flags, n, argv[i + 1]))
            die("flag %s needs a value, not the flag %s that follows it", arg, argv[i + 1]);
        set_flag(f, argv[++i]);
    }
    return count;
}

int env_flag(const char *name, int fallback) {
    const char *v = getenv(name);
    return v ? strcmp(v, "0") != 0 : fallback;
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
