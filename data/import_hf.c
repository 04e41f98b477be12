// import_hf.c: Hugging Face GPT-2 weights (model.safetensors of gpt2, gpt2-medium, gpt2-large,
// gpt2-xl, or any GPT2LMHeadModel saved by transformers) -> an llm.c model file, version 3
// (fp32) or 5 (bf16), which train_gpt2 and infer_gpt2 read.
//
//   import_hf [--n-head N] [--bf16] model.safetensors gpt2_124M.bin
//
// The weights, with config.json beside them for the head count (no network is needed here):
//   https://huggingface.co/openai-community/gpt2/resolve/main/model.safetensors          124M
//   https://huggingface.co/openai-community/gpt2-medium/resolve/main/model.safetensors   350M
//   https://huggingface.co/openai-community/gpt2-large/resolve/main/model.safetensors    774M
//   https://huggingface.co/openai-community/gpt2-xl/resolve/main/model.safetensors       1558M
//
// safetensors: 8 bytes, the little-endian length N of a JSON header; N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {..}}; then the data, offsets counted from its start. Parsed here by a
// small JSON reader, every offset and size checked against the file.
//
// The mapping. HF's names (with or without a "transformer." prefix; lm_head.weight, when
// present, must equal wte: GPT-2 ties them) and our parameter tensors, in checkpoint order:
//   wte.weight (V, C)                 wte (Vp, C), rows V..Vp-1 zero (Vp: V rounded up to 128)
//   wpe.weight (maxT, C)              wpe
//   h.{l}.ln_1.weight / .bias         ln1w, ln1b (L, C)
//   h.{l}.attn.c_attn.weight (C, 3C)  qkvw (L, 3C, C)    transposed: HF's Conv1D stores
//   h.{l}.attn.c_attn.bias (3C)       qkvb (L, 3C)       (in, out), we store (out, in)
//   h.{l}.attn.c_proj.weight (C, C)   attprojw (L, C, C)  transposed
//   h.{l}.attn.c_proj.bias            attprojb (L, C)
//   h.{l}.ln_2.weight / .bias         ln2w, ln2b (L, C)
//   h.{l}.mlp.c_fc.weight (C, 4C)     fcw (L, 4C, C)     transposed
//   h.{l}.mlp.c_fc.bias               fcb (L, 4C)
//   h.{l}.mlp.c_proj.weight (4C, C)   fcprojw (L, C, 4C)  transposed
//   h.{l}.mlp.c_proj.bias             fcprojb (L, C)
//   ln_f.weight / .bias               lnfw, lnfb (C)
// The config comes from the shapes (V, maxT from wte and wpe; C; L from the h.{l} blocks);
// the head count, which no shape shows, from --n-head, else config.json's n_head beside the
// file, else GPT-2's own sizes (C = 768, 1024, 1280, 1600: 12, 16, 20, 25 heads).
// F32, F16 and BF16 tensors are read; every value must be finite.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../utils.h"

#define CHECKPOINT_MAGIC 20240326
#define MAX_DIMS 8

// ----------------------------------------------------------------------------------------
// the safetensors header

// the dtypes read; a tensor of another dtype (the boolean attention masks some files carry)
// is fine as long as the checkpoint does not need it
typedef enum { DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_OTHER } DType;
static const char *const dtype_names[] = {"F32", "F16", "BF16"};
static const size_t dtype_sizes[] = {4, 2, 2};

typedef struct {
    char *name;            // without a "transformer." prefix
    DType dtype;
    char other_dtype[16];  // the name of a DTYPE_OTHER
    int ndim;
    uint64_t shape[MAX_DIMS];
    uint64_t begin, end;   // byte offsets into the data section
} TensorInfo;

typedef struct {
    const char *path;
    const char *p, *end;   // the JSON text being read
    const char *start;
} Json;

static void __attribute__((noreturn)) json_fail(const Json *j, const char *what) {
    die("%s: bad safetensors header at byte %ld of the JSON: %s", j->path,
        (long)(j->p - j->start), what);
}

static void json_ws(Json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static void json_expect(Json *j, char c) {
    json_ws(j);
    if (j->p >= j->end || *j->p != c) {
        char what[32];
        snprintf(what, sizeof(what), "expected '%c'", c);
        json_fail(j, what);
    }
    j->p++;
}

// next non-space character is c (consumed when it is)
static int json_accept(Json *j, char c) {
    json_ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return 1;
    }
    return 0;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// a JSON string, unescaped, as a fresh NUL-terminated string (malloc'ed)
static char *json_string(Json *j) {
    json_expect(j, '"');
    size_t cap = 64, n = 0;
    char *s = malloc(cap);
    if (!s) die("out of memory");
    for (;;) {
        if (j->p >= j->end) json_fail(j, "unterminated string");
        char c = *j->p++;
        if (c == '"') break;
        uint32_t cp = (uint8_t)c;
        int raw = 1;
        if (c == '\\') {
            if (j->p >= j->end) json_fail(j, "unterminated string");
            char e = *j->p++;
            raw = 0;
            switch (e) {
                case '"': cp = '"'; break;
                case '\\': cp = '\\'; break;
                case '/': cp = '/'; break;
                case 'b': cp = '\b'; break;
                case 'f': cp = '\f'; break;
                case 'n': cp = '\n'; break;
                case 'r': cp = '\r'; break;
                case 't': cp = '\t'; break;
                case 'u': {
                    cp = 0;
                    for (int k = 0; k < 4; k++) {
                        int d = j->p < j->end ? hex_digit(*j->p++) : -1;
                        if (d < 0) json_fail(j, "bad \\u escape");
                        cp = cp * 16 + (uint32_t)d;
                    }
                    if (cp >= 0xD800 && cp <= 0xDFFF) json_fail(j, "surrogate \\u escapes are not supported");
                    break;
                }
                default: json_fail(j, "bad escape");
            }
        }
        if (n + 5 > cap) {
            cap *= 2;
            s = realloc(s, cap);
            if (!s) die("out of memory");
        }
        if (raw || cp < 0x80) {
            s[n++] = (char)cp;
        } else if (cp < 0x800) {
            s[n++] = (char)(0xC0 | (cp >> 6));
            s[n++] = (char)(0x80 | (cp & 0x3F));
        } else {
            s[n++] = (char)(0xE0 | (cp >> 12));
            s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            s[n++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    s[n] = '\0';
    return s;
}

// a non-negative integer
static uint64_t json_uint(Json *j) {
    json_ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') json_fail(j, "expected a non-negative integer");
    uint64_t v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (v > (UINT64_MAX - 9) / 10) json_fail(j, "integer too large");
        v = v * 10 + (uint64_t)(*j->p++ - '0');
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E')) json_fail(j, "expected an integer");
    return v;
}

// skips any JSON value
static void json_skip(Json *j, int depth) {
    if (depth > 64) json_fail(j, "nested too deeply");
    json_ws(j);
    if (j->p >= j->end) json_fail(j, "unexpected end");
    char c = *j->p;
    if (c == '"') {
        free(json_string(j));
    } else if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        if (json_accept(j, close)) return;
        do {
            if (c == '{') {
                free(json_string(j));
                json_expect(j, ':');
            }
            json_skip(j, depth + 1);
        } while (json_accept(j, ','));
        json_expect(j, close);
    } else {   // number, true, false, null
        const char *start = j->p;
        while (j->p < j->end && strchr(",}] \t\r\n", *j->p) == NULL) j->p++;
        if (j->p == start) json_fail(j, "expected a value");
    }
}

// one tensor's entry: {"dtype": .., "shape": [..], "data_offsets": [b, e]}
static void json_tensor(Json *j, TensorInfo *t) {
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    json_expect(j, '{');
    if (!json_accept(j, '}')) {
        do {
            char *key = json_string(j);
            json_expect(j, ':');
            if (!strcmp(key, "dtype")) {
                char *dtype = json_string(j);
                t->dtype = DTYPE_OTHER;
                for (int d = 0; d < 3; d++)
                    if (!strcmp(dtype, dtype_names[d])) t->dtype = (DType)d;
                if (t->dtype == DTYPE_OTHER) snprintf(t->other_dtype, sizeof(t->other_dtype), "%s", dtype);
                free(dtype);
                have_dtype = 1;
            } else if (!strcmp(key, "shape")) {
                json_expect(j, '[');
                t->ndim = 0;
                if (!json_accept(j, ']')) {
                    do {
                        if (t->ndim == MAX_DIMS) json_fail(j, "more than 8 dimensions");
                        t->shape[t->ndim++] = json_uint(j);
                    } while (json_accept(j, ','));
                    json_expect(j, ']');
                }
                have_shape = 1;
            } else if (!strcmp(key, "data_offsets")) {
                json_expect(j, '[');
                t->begin = json_uint(j);
                json_expect(j, ',');
                t->end = json_uint(j);
                json_expect(j, ']');
                have_offsets = 1;
            } else {
                json_skip(j, 1);
            }
            free(key);
        } while (json_accept(j, ','));
        json_expect(j, '}');
    }
    if (!have_dtype || !have_shape || !have_offsets)
        die("%s: tensor %s lacks its %s", j->path, t->name,
            !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
}

typedef struct {
    const char *path;
    uint8_t *map;           // the whole file, mapped
    size_t size;
    const uint8_t *data;    // the data section
    uint64_t data_size;
    TensorInfo *tensors;
    int n;
} SafeTensors;

static void safetensors_open(SafeTensors *st, const char *path) {
    memset(st, 0, sizeof(*st));
    st->path = path;
    int fd = open(path, O_RDONLY);
    if (fd < 0) die("cannot open %s for reading: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) die("%s: cannot stat: %s", path, strerror(errno));
    st->size = (size_t)sb.st_size;
    if (st->size < 8) die("%s: not a safetensors file: %zu bytes, shorter than the 8-byte header length", path, st->size);
    st->map = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (st->map == MAP_FAILED) die("%s: cannot map: %s", path, strerror(errno));
    close(fd);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = header_len << 8 | st->map[i];   // little-endian
    if (header_len > st->size - 8)
        die("%s: not a safetensors file: its header length %llu runs past the end of the file "
            "(%zu bytes)", path, (unsigned long long)header_len, st->size);
    st->data = st->map + 8 + header_len;
    st->data_size = st->size - 8 - header_len;

    Json j = {path, (const char *)st->map + 8, (const char *)st->map + 8 + header_len,
              (const char *)st->map + 8};
    int cap = 64;
    st->tensors = malloc(cap * sizeof(TensorInfo));
    if (!st->tensors) die("out of memory");
    json_expect(&j, '{');
    if (!json_accept(&j, '}')) {
        do {
            char *name = json_string(&j);
            json_expect(&j, ':');
            if (!strcmp(name, "__metadata__")) {
                json_skip(&j, 1);
                free(name);
                continue;
            }
            if (st->n == cap) {
                cap *= 2;
                st->tensors = realloc(st->tensors, cap * sizeof(TensorInfo));
                if (!st->tensors) die("out of memory");
            }
            TensorInfo *t = &st->tensors[st->n++];
            memset(t, 0, sizeof(*t));
            const char *prefix = "transformer.";
            size_t plen = strlen(prefix);
            if (!strncmp(name, prefix, plen)) memmove(name, name + plen, strlen(name) - plen + 1);
            t->name = name;
            json_tensor(&j, t);
            uint64_t elems = 1;
            for (int d = 0; d < t->ndim; d++) {
                if (t->shape[d] && elems > UINT64_MAX / t->shape[d]) die("%s: tensor %s is too large", path, name);
                elems *= t->shape[d];
            }
            if (t->end < t->begin || t->end > st->data_size)
                die("%s: tensor %s: data offsets [%llu, %llu) outside the %llu bytes of data", path,
                    name, (unsigned long long)t->begin, (unsigned long long)t->end,
                    (unsigned long long)st->data_size);
            if (t->dtype != DTYPE_OTHER && t->end - t->begin != elems * dtype_sizes[t->dtype])
                die("%s: tensor %s: %llu bytes of data for %llu %s values", path, name,
                    (unsigned long long)(t->end - t->begin), (unsigned long long)elems,
                    dtype_names[t->dtype]);
        } while (json_accept(&j, ','));
        json_expect(&j, '}');
    }
}

static void safetensors_close(SafeTensors *st) {
    for (int i = 0; i < st->n; i++) free(st->tensors[i].name);
    free(st->tensors);
    munmap(st->map, st->size);
}

static const TensorInfo *find_tensor(const SafeTensors *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
    return NULL;
}

// the tensor `name`, which must have shape (d0) or (d0, d1) (d1 = 0 for one dimension)
static const TensorInfo *require(const SafeTensors *st, const char *name, uint64_t d0, uint64_t d1) {
    const TensorInfo *t = find_tensor(st, name);
    if (!t) die("%s: missing tensor %s (is this a GPT-2 model?)", st->path, name);
    if (t->dtype == DTYPE_OTHER)
        die("%s: tensor %s has dtype %s; import_hf reads F32, F16 and BF16", st->path, name,
            t->other_dtype);
    int ndim = d1 ? 2 : 1;
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
        char got[128] = "", want[64];
        size_t n = 0;
        for (int d = 0; d < t->ndim; d++)
            n += snprintf(got + n, sizeof(got) - n, "%s%llu", d ? ", " : "", (unsigned long long)t->shape[d]);
        if (ndim == 2) snprintf(want, sizeof(want), "%llu, %llu", (unsigned long long)d0, (unsigned long long)d1);
        else snprintf(want, sizeof(want), "%llu", (unsigned long long)d0);
        die("%s: tensor %s has shape (%s), expected (%s)", st->path, name, got, want);
    }
    return t;
}

// ----------------------------------------------------------------------------------------
// conversion

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    uint32_t bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (mant << 13);   // inf, nan
    } else if (exp == 0) {                           // zero, subnormal: mant * 2^-24
        float f = (float)mant * 5.9604644775390625e-8f;
        return sign ? -f : f;
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// element i of t as fp32
static float tensor_at(const SafeTensors *st, const TensorInfo *t, size_t i) {
    const uint8_t *p = st->data + t->begin + i * dtype_sizes[t->dtype];
    switch (t->dtype) {
        case DTYPE_F32: { float f; memcpy(&f, p, 4); return f; }
        case DTYPE_F16: return half_to_float((uint16_t)(p[0] | p[1] << 8));
        case DTYPE_BF16: {
            uint32_t bits = (uint32_t)(p[0] | p[1] << 8) << 16;
            float f;
            memcpy(&f, &bits, 4);
            return f;
        }
        case DTYPE_OTHER: break;   // require() refuses these before any value is read
    }
    return 0.0f;
}

static uint16_t float_to_bf16(float f) {   // round to nearest even (values are finite)
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

typedef struct {
    AtomicFile af;
    int bf16;
    float *buf;   // one tensor's fp32 values, grown as needed
    size_t cap;
} Writer;

static float *writer_buffer(Writer *w, size_t n) {
    if (n > w->cap) {
        free(w->buf);
        w->buf = malloc(n * sizeof(float));
        if (!w->buf) die("out of memory for a tensor of %zu values", n);
        w->cap = n;
    }
    return w->buf;
}

static void writer_put(Writer *w, const float *x, size_t n) {
    if (!w->bf16) {
        atomic_write(&w->af, x, n * sizeof(float));
        return;
    }
    uint16_t chunk[4096];
    for (size_t i = 0; i < n; i += 4096) {
        size_t m = n - i < 4096 ? n - i : 4096;
        for (size_t k = 0; k < m; k++) chunk[k] = float_to_bf16(x[i + k]);
        atomic_write(&w->af, chunk, m * sizeof(uint16_t));
    }
}

// out (rows, cols) = t, transposed when `transpose` (t is then (cols, rows)); checked finite
static void read_tensor(const SafeTensors *st, const TensorInfo *t, float *out, size_t rows,
                        size_t cols, int transpose) {
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < cols; c++) {
            float x = tensor_at(st, t, transpose ? c * rows + r : r * cols + c);
            if (!isfinite(x)) die("%s: tensor %s holds a value that is not finite", st->path, t->name);
            out[r * cols + c] = x;
        }
    }
}

// writes, for every layer l, the tensor h.{l}.<suffix> as (rows, cols), transposed or not
static void put_layers(Writer *w, const SafeTensors *st, int L, const char *suffix, uint64_t hf0,
                       uint64_t hf1, int transpose) {
    size_t rows = transpose ? hf1 : hf0, cols = transpose ? hf0 : (hf1 ? hf1 : 1);
    float *buf = writer_buffer(w, rows * cols);
    for (int l = 0; l < L; l++) {
        char name[128];
        snprintf(name, sizeof(name), "h.%d.%s", l, suffix);
        read_tensor(st, require(st, name, hf0, hf1), buf, rows, cols, transpose);
        writer_put(w, buf, rows * cols);
    }
}

static void put_tensor(Writer *w, const SafeTensors *st, const char *name, uint64_t d0, uint64_t d1) {
    size_t rows = d0, cols = d1 ? d1 : 1;
    float *buf = writer_buffer(w, rows * cols);
    read_tensor(st, require(st, name, d0, d1), buf, rows, cols, 0);
    writer_put(w, buf, rows * cols);
}

// ----------------------------------------------------------------------------------------
// config

// n_head from config.json in the folder of `path`, or 0
static int config_json_heads(const char *path) {
    char dir[4096], cfg[4200];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    snprintf(cfg, sizeof(cfg), "%s/config.json", slash ? dir : ".");
    FILE *f = fopen(cfg, "rb");
    if (!f) return 0;
    char text[65536];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *key = strstr(text, "\"n_head\"");
    if (!key) return 0;
    const char *p = key + strlen("\"n_head\"");
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p != ':') return 0;
    p++;
    int heads = (int)strtol(p, NULL, 10);
    if (heads > 0) printf("n_head %d from %s\n", heads, cfg);
    return heads > 0 ? heads : 0;
}

static int known_heads(uint64_t C) {
    switch (C) {
        case 768: return 12;    // gpt2
        case 1024: return 16;   // gpt2-medium
        case 1280: return 20;   // gpt2-large
        case 1600: return 25;   // gpt2-xl
        default: return 0;
    }
}

// every tensor the checkpoint needs, present with its shape, before anything is written
static void check_tensors(const SafeTensors *st, int L, uint64_t C, uint64_t maxT, uint64_t V) {
    static const struct { const char *suffix; int d0, d1; } block[] = {   // shapes in units of C
        {"ln_1.weight", 1, 0}, {"ln_1.bias", 1, 0}, {"attn.c_attn.weight", 1, 3},
        {"attn.c_attn.bias", 3, 0}, {"attn.c_proj.weight", 1, 1}, {"attn.c_proj.bias", 1, 0},
        {"ln_2.weight", 1, 0}, {"ln_2.bias", 1, 0}, {"mlp.c_fc.weight", 1, 4},
        {"mlp.c_fc.bias", 4, 0}, {"mlp.c_proj.weight", 4, 1}, {"mlp.c_proj.bias", 1, 0}};
    require(st, "wte.weight", V, C);
    require(st, "wpe.weight", maxT, C);
    for (int l = 0; l < L; l++) {
        for (size_t i = 0; i < sizeof(block) / sizeof(block[0]); i++) {
            char name[128];
            snprintf(name, sizeof(name), "h.%d.%s", l, block[i].suffix);
            require(st, name, block[i].d0 * C, block[i].d1 * C);
        }
    }
    require(st, "ln_f.weight", C, 0);
    require(st, "ln_f.bias", C, 0);
}

// a value found not finite half way through ends the program: the partial output goes too
static AtomicFile *pending_output = NULL;
static void remove_pending_output(void) {
    if (pending_output && pending_output->f) atomic_abort(pending_output);
}

static void usage(FILE *out) {
    fprintf(out,
        "usage: import_hf [flags] MODEL.safetensors OUT.bin\n"
        "  Hugging Face GPT-2 weights -> llm.c model file (train_gpt2 -e OUT.bin, infer_gpt2 -c OUT.bin)\n"
        "  --n-head N  attention heads (default: n_head of config.json beside MODEL, else\n"
        "              GPT-2's: 12, 16, 20, 25 heads at C = 768, 1024, 1280, 1600)\n"
        "  --bf16      write version 5 (bf16) instead of version 3 (fp32)\n"
        "  -h, --help  this text\n"
        "  e.g. curl -L -o model.safetensors https://huggingface.co/openai-community/gpt2/resolve/main/model.safetensors\n"
        "       import_hf model.safetensors gpt2_124M.bin\n");
}

int main(int argc, char **argv) {
    int heads = 0, bf16 = 0;
    Flag flags[] = {INT_FLAG("--n-head", &heads, 1, 4096), SWITCH_FLAG("--bf16", &bf16)};
    char *files[2];
    int nfiles = parse_flags(argc, argv, flags, 2, "import_hf", usage, files, 2);
    const char *in = nfiles > 0 ? files[0] : NULL, *out = nfiles > 1 ? files[1] : NULL;
    if (!in || !out) { usage(stderr); die("give the input model.safetensors and the output file"); }

    SafeTensors st;
    safetensors_open(&st, in);
    const TensorInfo *wte = find_tensor(&st, "wte.weight"), *wpe = find_tensor(&st, "wpe.weight");
    if (!wte || !wpe) die("%s: missing tensor %s (is this a GPT-2 model?)", in, wte ? "wpe.weight" : "wte.weight");
    if (wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1])
        die("%s: wte.weight and wpe.weight must be (V, C) and (maxT, C)", in);
    uint64_t V = wte->shape[0], C = wte->shape[1], maxT = wpe->shape[0];
    uint64_t Vp = (V + 127) / 128 * 128;
    int L = 0;
    for (;; L++) {
        char name[64];
        snprintf(name, sizeof(name), "h.%d.ln_1.weight", L);
        if (!find_tensor(&st, name)) break;
    }
    if (L == 0) die("%s: no transformer blocks (h.0.ln_1.weight) found", in);
    if (!heads) heads = config_json_heads(in);
    if (!heads) heads = known_heads(C);
    if (!heads) die("%s: cannot tell the number of heads of a model with C = %llu: give --n-head", in,
                    (unsigned long long)C);
    if (C % heads != 0) die("C = %llu is not a multiple of %d heads", (unsigned long long)C, heads);
    if (V > (1u << 24) || C > 65536 || maxT > (1u << 24) || L > 1024) die("%s: model too large", in);

    check_tensors(&st, L, C, maxT, V);

    // lm_head, when saved, must be the tied wte
    const TensorInfo *head = find_tensor(&st, "lm_head.weight");
    if (head) {
        require(&st, "lm_head.weight", V, C);
        for (size_t i = 0; i < V * C; i++)
            if (tensor_at(&st, head, i) != tensor_at(&st, wte, i))
                die("%s: lm_head.weight differs from wte.weight: untied heads are not supported", in);
    }

    int header[256] = {0};
    header[0] = CHECKPOINT_MAGIC;
    header[1] = bf16 ? 5 : 3;
    header[2] = (int)maxT;
    header[3] = (int)V;
    header[4] = L;
    header[5] = heads;
    header[6] = (int)C;
    header[7] = (int)Vp;
    Writer w = {.bf16 = bf16};
    atomic_open(&w.af, out);
    pending_output = &w.af;
    atexit(remove_pending_output);
    atomic_write(&w.af, header, sizeof(header));
    float *buf = writer_buffer(&w, Vp * C);   // wte, then the zero rows of the padding
    read_tensor(&st, require(&st, "wte.weight", V, C), buf, V, C, 0);
    memset(buf + V * C, 0, (Vp - V) * C * sizeof(float));
    writer_put(&w, buf, Vp * C);
    put_tensor(&w, &st, "wpe.weight", maxT, C);
    put_layers(&w, &st, L, "ln_1.weight", C, 0, 0);
    put_layers(&w, &st, L, "ln_1.bias", C, 0, 0);
    put_layers(&w, &st, L, "attn.c_attn.weight", C, 3 * C, 1);
    put_layers(&w, &st, L, "attn.c_attn.bias", 3 * C, 0, 0);
    put_layers(&w, &st, L, "attn.c_proj.weight", C, C, 1);
    put_layers(&w, &st, L, "attn.c_proj.bias", C, 0, 0);
    put_layers(&w, &st, L, "ln_2.weight", C, 0, 0);
    put_layers(&w, &st, L, "ln_2.bias", C, 0, 0);
    put_layers(&w, &st, L, "mlp.c_fc.weight", C, 4 * C, 1);
    put_layers(&w, &st, L, "mlp.c_fc.bias", 4 * C, 0, 0);
    put_layers(&w, &st, L, "mlp.c_proj.weight", 4 * C, C, 1);
    put_layers(&w, &st, L, "mlp.c_proj.bias", C, 0, 0);
    put_tensor(&w, &st, "ln_f.weight", C, 0);
    put_tensor(&w, &st, "ln_f.bias", C, 0);
    atomic_commit(&w.af);
    free(w.buf);

    uint64_t params = Vp * C + maxT * C + (uint64_t)L * (12 * C * C + 13 * C) + 2 * C;
    printf("wrote %s: version %d (%s), L=%d NH=%d C=%llu maxT=%llu V=%llu Vp=%llu, %llu parameters\n",
           out, header[1], bf16 ? "bf16" : "fp32", L, heads, (unsigned long long)C,
           (unsigned long long)maxT, (unsigned long long)V, (unsigned long long)Vp,
           (unsigned long long)params);
    safetensors_close(&st);
    return 0;
}
