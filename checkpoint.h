// checkpoint.h: llm.c's model file, in one place: the header's layout, magic and versions, the
// config it carries and the check of that config, and the parameter tensors with their names,
// sizes and order (the X-macro table below). gpt2.c reads and writes model files through it,
// import_hf writes them, the tests build them with it, and scripts/hf_parity.py reads the
// same table from `parity_dump --layout` (checkpoint_print_layout). docs/FORMATS.md describes
// the file. It knows nothing of devices or floatX: a program that only writes model files
// (import_hf) links checkpoint.c and utils.c alone.
//
// The file: a header of 256 little-endian int32, then every parameter, fp32 (version 3) or
// bf16 (version 5), tensor after tensor in table order, each row-major:
//   [0] magic 20240326  [1] version  [2] maxT  [3] V  [4] L  [5] NH  [6] C  [7] Vp  [8..255] 0
#ifndef CHECKPOINT_H
#define CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CHECKPOINT_MAGIC 20240326      // llm.c model file
#define CHECKPOINT_VERSION_FP32 3      // parameters as fp32
#define CHECKPOINT_VERSION_BF16 5      // parameters as bf16 (the upper 16 bits of an fp32)
#define CHECKPOINT_HEADER_INTS 256     // the header: int32s, then the parameters
#define CHECKPOINT_HEADER_BYTES (CHECKPOINT_HEADER_INTS * 4)

typedef struct {
    int max_seq_len;        // maxT, rows of wpe
    int vocab_size;         // V
    int padded_vocab_size;  // Vp (rows of wte; the padding rows stay zero)
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

// NULL when the config describes a model this program can hold, else what is wrong with it.
const char *gpt2_config_problem(GPT2Config c);
// The same check, as the message every program gives: "invalid model config (L=.. NH=.. C=..
// maxT=.. V=.. Vp=..): <problem>". Returns 0, or -1 with that message in err.
int checkpoint_config_check(GPT2Config c, char *err, size_t err_len);

// ----------------------------------------------------------------------------------------
// The parameter tensors, in llm.c's checkpoint order (model files stay byte-compatible with
// llm.c), one contiguous arena in the model: X(name, elements [per layer], decay, init).
// A row of a layer (L, ...) is LAYER(...), one tensor for all layers, layer 0 first; any other
// is ONE(...). Shapes are in element counts of the local names of the expanding function
// (Vp, maxT, C). decay: AdamW weight decay, the 2-D weight matrices only. init
// (gpt2_init_random): N(0, 0.02); residual projections N(0, 0.02/sqrt(2L)); the token
// embedding N(0, 0.02) on its real rows, its padding rows 0; ones; zeros. Weights are (out,
// in): a linear layer computes out = inp @ weight^T + bias.
#define GPT2_PARAMETERS(ONE, LAYER)                                                              \
    ONE(wte,         Vp * C,     1, INIT_EMBEDDING)  /* (Vp, C) token embedding, tied LM head */ \
    ONE(wpe,         maxT * C,   1, INIT_NORMAL)     /* (maxT, C) position embedding */          \
    LAYER(ln1w,      C,          0, INIT_ONES)       /* (L, C) */                                \
    LAYER(ln1b,      C,          0, INIT_ZEROS)      /* (L, C) */                                \
    LAYER(qkvw,      3 * C * C,  1, INIT_NORMAL)     /* (L, 3C, C) */                            \
    LAYER(qkvb,      3 * C,      0, INIT_ZEROS)      /* (L, 3C) */                               \
    LAYER(attprojw,  C * C,      1, INIT_RESIDUAL)   /* (L, C, C) */                             \
    LAYER(attprojb,  C,          0, INIT_ZEROS)      /* (L, C) */                                \
    LAYER(ln2w,      C,          0, INIT_ONES)       /* (L, C) */                                \
    LAYER(ln2b,      C,          0, INIT_ZEROS)      /* (L, C) */                                \
    LAYER(fcw,       4 * C * C,  1, INIT_NORMAL)     /* (L, 4C, C) */                            \
    LAYER(fcb,       4 * C,      0, INIT_ZEROS)      /* (L, 4C) */                               \
    LAYER(fcprojw,   C * 4 * C,  1, INIT_RESIDUAL)   /* (L, C, 4C) */                            \
    LAYER(fcprojb,   C,          0, INIT_ZEROS)      /* (L, C) */                                \
    ONE(lnfw,        C,          0, INIT_ONES)       /* (C) */                                   \
    ONE(lnfb,        C,          0, INIT_ZEROS)      /* (C) */

#define GPT2_PARAM_INDEX(name, ...) PARAM_##name,
enum { GPT2_PARAMETERS(GPT2_PARAM_INDEX, GPT2_PARAM_INDEX) NUM_PARAMETER_TENSORS };

// each tensor's name, as the table spells it ("wte", "ln1w", ...)
extern const char *const checkpoint_tensor_names[NUM_PARAMETER_TENSORS];
// elements of each tensor of a model of config c (all layers of a LAYER row), in file order
void checkpoint_tensor_sizes(size_t sizes[NUM_PARAMETER_TENSORS], GPT2Config c);
size_t checkpoint_num_parameters(GPT2Config c);
// bytes of one parameter in a file of this version: 4 (fp32) or 2 (bf16)
size_t checkpoint_value_bytes(int version);
// the size of the whole file: header and parameters
uint64_t checkpoint_file_bytes(GPT2Config c, int version);

// Hugging Face's GPT2LMHeadModel name of each tensor (without the "transformer." prefix; a
// layer's has %d for its index) and its shape there, in units of C: rows_c x cols_c, cols_c 0
// for a vector, rows_c 0 for wte's V and wpe's maxT rows. transposed: HF's Conv1D stores the
// weight as (in, out), the file as (out, in). import_hf maps with it; hf_parity.py reads it.
typedef struct {
    const char *name;
    int rows_c, cols_c;
    int transposed;
} CheckpointHFTensor;
extern const CheckpointHFTensor checkpoint_hf_tensors[NUM_PARAMETER_TENSORS];

// ----------------------------------------------------------------------------------------
// the header

typedef struct {
    int version;            // CHECKPOINT_VERSION_FP32 or _BF16
    GPT2Config config;
} CheckpointHeader;

// the header of a model file of config c, version: 256 int32 as they go into the file
void checkpoint_header_pack(int32_t header[CHECKPOINT_HEADER_INTS], GPT2Config c, int version);
// Reads a header back and checks it: the magic, a version this program reads, and a config
// it can hold (checkpoint_config_check). Returns 0, or -1 with the reason in err
// ("not a model checkpoint: bad magic ...", "unsupported checkpoint version ...").
int checkpoint_header_unpack(const int32_t header[CHECKPOINT_HEADER_INTS], CheckpointHeader *out,
                             char *err, size_t err_len);
// The file's size against the one its header announces. Returns 0, or -1 with "truncated by
// N bytes: ..." or "too long by N bytes: ..." in err.
int checkpoint_check_size(const CheckpointHeader *h, uint64_t file_size, char *err, size_t err_len);

// Writes the layout as JSON, for scripts/hf_parity.py (parity_dump --layout): magic, versions,
// the header's fields in order, and every tensor in file order with its HF name pattern
// (Python's "{}" for the layer), whether it is per layer, and whether HF stores it transposed.
void checkpoint_print_layout(FILE *out);

#endif
