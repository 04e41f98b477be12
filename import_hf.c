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
// The safetensors header and config.json are read and checked by data/safetensors.c (see
// data/safetensors.h): a file that is not exactly what the format says is refused before anything
// is written.
//
// The mapping is checkpoint.h's table (checkpoint_hf_tensors): HF's names (with or without a
// "transformer." prefix; lm_head.weight, when present, must equal wte: GPT-2 ties them) and our
// parameter tensors, in checkpoint order:
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
// file, else GPT-2's own sizes (C = 768, 1024, 1280, 1600: 12, 16, 20, 25 heads). The other
// sizes config.json gives must agree with the shapes, and the config must be one that
// checkpoint loading accepts (gpt2_config_problem). Every tensor of the file must find its
// place, but the attention masks of older files. F32, F16 and BF16 tensors are read; every
// value must be finite.
//
// It links checkpoint.c, utils.c and the parsers of data/ (safetensors.c, json.c, the ByteBuf
// of tokenizer.c): no model, no backend, no PCRE2, so it builds and runs the same everywhere.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "checkpoint.h"
#include "data/safetensors.h"
#include "utils.h"

// ----------------------------------------------------------------------------------------
// the input

// the dtypes read; a tensor of another dtype (the boolean attention masks some files carry)
// is fine as long as the checkpoint does not need it
typedef enum { DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_OTHER } DType;
static const char *const dtype_names[] = {"F32", "F16", "BF16"};
static const size_t dtype_sizes[] = {4, 2, 2};

typedef struct {
    const char *name;      // without a "transformer." prefix
    const SafeTensor *t;
    DType dtype;
    int used;              // read into the checkpoint, or checked to be ignorable
} TensorInfo;

typedef struct {
    const char *path;
    uint8_t *map;           // the whole file, mapped
    size_t size;
    const uint8_t *data;    // the data section
    SafeTensorsHeader header;
    TensorInfo *tensors;    // sorted by name
    size_t n;
} SafeTensors;

static int by_name(const void *a, const void *b) {   // then by the full name: a stable order
    const TensorInfo *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->t && y->t ? strcmp(x->t->name, y->t->name) : 0;
}

static void safetensors_open(SafeTensors *st, const char *path) {
    memset(st, 0, sizeof(*st));
    st->path = path;
    FILE *f = fopen_or_die(path, "rb");
    st->size = (size_t)file_size_or_die(f, path);
    static const uint8_t empty[1];
    const uint8_t *bytes = empty;
    if (st->size > 0) {
        st->map = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fileno(f), 0);
        if (st->map == MAP_FAILED) die("%s: cannot map: %s", path, strerror(errno));
        bytes = st->map;
    }
    fclose(f);
    char err[512];
    if (safetensors_parse(&st->header, bytes, st->size, err, sizeof(err)) != 0)
        die("%s: bad safetensors file: %s", path, err);
    st->data = bytes + st->header.data_offset;
    st->n = st->header.n;
    st->tensors = calloc(st->n ? st->n : 1, sizeof(TensorInfo));
    if (!st->tensors) die("out of memory");
    const char *prefix = "transformer.";
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < st->n; i++) {
        TensorInfo *t = &st->tensors[i];
        t->t = &st->header.tensors[i];
        t->name = strncmp(t->t->name, prefix, plen) ? t->t->name : t->t->name + plen;
        t->dtype = DTYPE_OTHER;
        for (int d = 0; d < 3; d++)
            if (!strcmp(t->t->dtype, dtype_names[d])) t->dtype = (DType)d;
    }
    qsort(st->tensors, st->n, sizeof(TensorInfo), by_name);
    for (size_t i = 1; i < st->n; i++)
        if (!strcmp(st->tensors[i - 1].name, st->tensors[i].name))
            die("%s: tensors %s and %s are the same tensor, given twice", path, st->tensors[i - 1].t->name,
                st->tensors[i].t->name);
}

static void safetensors_close(SafeTensors *st) {
    free(st->tensors);
    safetensors_free(&st->header);
    if (st->map) munmap(st->map, st->size);
}

static TensorInfo *find_tensor(const SafeTensors *st, const char *name) {
    TensorInfo key = {.name = name};
    return st->n ? bsearch(&key, st->tensors, st->n, sizeof(TensorInfo), by_name) : NULL;
}

// the tensor `name`, which must have shape (d0) or (d0, d1) (d1 = 0 for one dimension)
static const TensorInfo *require(const SafeTensors *st, const char *name, uint64_t d0, uint64_t d1) {
    TensorInfo *t = find_tensor(st, name);
    if (!t) die("%s: missing tensor %s (is this a GPT-2 model?)", st->path, name);
    if (t->dtype == DTYPE_OTHER)
        die("%s: tensor %s has dtype %s; import_hf reads F32, F16 and BF16", st->path, name, t->t->dtype);
    int ndim = d1 ? 2 : 1;
    const uint64_t *shape = t->t->shape;
    if (t->t->ndim != ndim || shape[0] != d0 || (ndim == 2 && shape[1] != d1)) {
        char got[256] = "", want[64];
        size_t n = 0;
        for (int d = 0; d < t->t->ndim; d++)
            n += (size_t)snprintf(got + n, sizeof(got) - n, "%s%llu", d ? ", " : "", (unsigned long long)shape[d]);
        if (ndim == 2) snprintf(want, sizeof(want), "%llu, %llu", (unsigned long long)d0, (unsigned long long)d1);
        else snprintf(want, sizeof(want), "%llu", (unsigned long long)d0);
        die("%s: tensor %s has shape (%s), expected (%s)", st->path, name, got, want);
    }
    t->used = 1;
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
    const uint8_t *p = st->data + t->t->begin + i * dtype_sizes[t->dtype];
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

// HF's name of parameter tensor i (checkpoint.h: PARAM_*), of layer l where it is a layer's
static void hf_name(char *out, size_t n, int i, int l) {
    const char *pattern = checkpoint_hf_tensors[i].name;
    if (strstr(pattern, "%d")) snprintf(out, n, pattern, l);
    else snprintf(out, n, "%s", pattern);
}
static int per_layer(int i) { return strstr(checkpoint_hf_tensors[i].name, "%d") != NULL; }

// HF's shape of parameter tensor i: (d0, d1), d1 = 0 for a vector
static void hf_shape(int i, uint64_t C, uint64_t maxT, uint64_t V, uint64_t *d0, uint64_t *d1) {
    const CheckpointHFTensor *t = &checkpoint_hf_tensors[i];
    *d0 = t->rows_c ? (uint64_t)t->rows_c * C : i == PARAM_wte ? V : maxT;
    *d1 = (uint64_t)t->cols_c * C;
}

// Writes parameter tensor i, every layer's where it is a layer's, in our layout: (d1, d0) when
// HF stores it transposed, else (d0, d1); wte gets its Vp - V zero rows of padding. Returns
// the values written.
static size_t put_tensor(Writer *w, const SafeTensors *st, int i, int L, uint64_t C, uint64_t maxT,
                         uint64_t V, uint64_t Vp) {
    uint64_t d0, d1;
    hf_shape(i, C, maxT, V, &d0, &d1);
    int transpose = checkpoint_hf_tensors[i].transposed;
    size_t rows = transpose ? d1 : d0, cols = transpose ? d0 : (d1 ? d1 : 1);
    size_t padded = i == PARAM_wte ? (size_t)(Vp * C) : rows * cols;
    float *buf = writer_buffer(w, padded);
    memset(buf + rows * cols, 0, (padded - rows * cols) * sizeof(float));
    int layers = per_layer(i) ? L : 1;
    for (int l = 0; l < layers; l++) {
        char name[128];
        hf_name(name, sizeof(name), i, l);
        read_tensor(st, require(st, name, d0, d1), buf, rows, cols, transpose);
        writer_put(w, buf, padded);
    }
    return padded * (size_t)layers;
}

// ----------------------------------------------------------------------------------------
// config

// config.json in the folder of `path`, when there is one (its values then -1 when absent)
static HFConfig read_config_json(const char *path, char *cfg, size_t cfg_len) {
    HFConfig c = {-1, -1, -1, -1, -1};
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    snprintf(cfg, cfg_len, "%s/config.json", slash ? dir : ".");
    if (!file_exists(cfg)) return c;
    size_t n;
    uint8_t *text = read_file_or_die(cfg, &n);
    char err[512];
    if (hf_config_parse(&c, text, n, err, sizeof(err)) != 0) die("%s: %s", cfg, err);
    free(text);
    return c;
}

// a size config.json gives must be the one the weights have
static void check_config_value(const char *cfg, const char *key, int64_t value, uint64_t from_weights,
                               const char *what) {
    if (value >= 0 && (uint64_t)value != from_weights)
        die("%s: %s is %lld, but the weights have %s = %llu: they do not belong together", cfg, key,
            (long long)value, what, (unsigned long long)from_weights);
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
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        uint64_t d0, d1;
        hf_shape(i, C, maxT, V, &d0, &d1);
        for (int l = 0; l < (per_layer(i) ? L : 1); l++) {
            char name[128];
            hf_name(name, sizeof(name), i, l);
            require(st, name, d0, d1);
        }
    }
}

// Every tensor of the file goes into the checkpoint, but the causal masks that older files
// keep as buffers (h.{l}.attn.bias, h.{l}.attn.masked_bias): a tensor left over is a model
// that is not GPT-2 (or a block past h.{L-1} after a gap), which the checkpoint would lose.
static void check_nothing_left(const SafeTensors *st, int L) {
    for (size_t i = 0; i < st->n; i++) {
        const TensorInfo *t = &st->tensors[i];
        int l, end = 0;
        char rest[32];
        if (t->used) continue;
        if (sscanf(t->name, "h.%d.attn.%31[a-z_]%n", &l, rest, &end) == 2 && t->name[end] == '\0' && l >= 0 &&
            l < L && (!strcmp(rest, "bias") || !strcmp(rest, "masked_bias")))
            continue;
        die("%s: tensor %s is not part of a GPT-2 model with %d blocks (h.0 to h.%d); import_hf would drop it",
            st->path, t->t->name, L, L - 1);
    }
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
    if (wte->t->ndim != 2 || wpe->t->ndim != 2 || wte->t->shape[1] != wpe->t->shape[1])
        die("%s: wte.weight and wpe.weight must be (V, C) and (maxT, C)", in);
    uint64_t V = wte->t->shape[0], C = wte->t->shape[1], maxT = wpe->t->shape[0];
    uint64_t Vp = (V + 127) / 128 * 128;
    int L = 0;
    for (; L <= 1024; L++) {
        char name[64];
        snprintf(name, sizeof(name), "h.%d.ln_1.weight", L);
        if (!find_tensor(&st, name)) break;
    }
    if (L == 0) die("%s: no transformer blocks (h.0.ln_1.weight) found", in);
    char cfg[4200];
    HFConfig hf = read_config_json(in, cfg, sizeof(cfg));
    check_config_value(cfg, "n_embd", hf.n_embd, C, "C");
    check_config_value(cfg, "n_layer", hf.n_layer, (uint64_t)L, "L");
    check_config_value(cfg, "n_positions", hf.n_positions, maxT, "maxT");
    check_config_value(cfg, "vocab_size", hf.vocab_size, V, "V");
    char heads_from[4300] = "--n-head";   // where the head count came from, for the messages
    if (!heads && hf.n_head > 0) {
        heads = hf.n_head > INT32_MAX ? INT32_MAX : (int)hf.n_head;
        printf("n_head %d from %s\n", heads, cfg);
        snprintf(heads_from, sizeof(heads_from), "n_head of %s", cfg);
    }
    if (!heads) {
        heads = known_heads(C);
        snprintf(heads_from, sizeof(heads_from), "GPT-2's sizes");
    }
    if (!heads) die("%s: cannot tell the number of heads of a model with C = %llu: give --n-head", in,
                    (unsigned long long)C);
    if (C % heads != 0)
        die("C = %llu is not a multiple of %d heads (from %s)", (unsigned long long)C, heads, heads_from);
    // the checkpoint must be one that train_gpt2 and infer_gpt2 load
    GPT2Config config = {.max_seq_len = maxT > INT32_MAX ? INT32_MAX : (int)maxT,
                         .vocab_size = V > INT32_MAX ? INT32_MAX : (int)V,
                         .padded_vocab_size = Vp > INT32_MAX ? INT32_MAX : (int)Vp,
                         .num_layers = L, .num_heads = heads, .channels = C > INT32_MAX ? INT32_MAX : (int)C};
    const char *problem = gpt2_config_problem(config);
    if (problem)
        die("%s: the model (L=%d NH=%d C=%llu maxT=%llu V=%llu) cannot be a checkpoint: %s", in, L, heads,
            (unsigned long long)C, (unsigned long long)maxT, (unsigned long long)V, problem);

    check_tensors(&st, L, C, maxT, V);

    // lm_head, when saved, must be the tied wte
    const TensorInfo *head = find_tensor(&st, "lm_head.weight");
    if (head) {
        require(&st, "lm_head.weight", V, C);
        for (size_t i = 0; i < V * C; i++)
            if (tensor_at(&st, head, i) != tensor_at(&st, wte, i))
                die("%s: lm_head.weight differs from wte.weight: untied heads are not supported", in);
    }
    check_nothing_left(&st, L);

    int version = bf16 ? CHECKPOINT_VERSION_BF16 : CHECKPOINT_VERSION_FP32;
    int32_t header[CHECKPOINT_HEADER_INTS];
    checkpoint_header_pack(header, config, version);
    size_t sizes[NUM_PARAMETER_TENSORS];
    checkpoint_tensor_sizes(sizes, config);
    Writer w = {.bf16 = bf16};
    atomic_open(&w.af, out);   // a value found not finite half way ends the program: its temporary goes too
    atomic_write(&w.af, header, sizeof(header));
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {   // checkpoint order
        size_t n = put_tensor(&w, &st, i, L, C, maxT, V, Vp);
        if (n != sizes[i])   // the HF table's shapes against the parameter table's sizes
            die("internal error: %s took %zu values, the checkpoint's table says %zu",
                checkpoint_tensor_names[i], n, sizes[i]);
    }
    atomic_commit(&w.af);
    free(w.buf);

    printf("wrote %s: version %d (%s), L=%d NH=%d C=%llu maxT=%llu V=%llu Vp=%llu, %zu parameters\n",
           out, version, bf16 ? "bf16" : "fp32", L, heads, (unsigned long long)C,
           (unsigned long long)maxT, (unsigned long long)V, (unsigned long long)Vp,
           checkpoint_num_parameters(config));
    safetensors_close(&st);
    return 0;
}
