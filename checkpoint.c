// checkpoint.c: see checkpoint.h.
#include "checkpoint.h"

#include <string.h>

#include "utils.h"

const char *gpt2_config_problem(GPT2Config c) {
    if (c.num_layers < 1 || c.num_layers > 1024) return "L must be in [1, 1024]";
    if (c.num_heads < 1) return "NH must be at least 1";
    if (c.channels < 1 || c.channels > 65536) return "C must be in [1, 65536]";
    if (c.channels % c.num_heads != 0) return "C must be a multiple of NH";
    if (c.max_seq_len < 1 || c.max_seq_len > (1 << 24)) return "maxT must be in [1, 16777216]";
    if (c.vocab_size < 1) return "V must be at least 1";
    if (c.padded_vocab_size < c.vocab_size || c.padded_vocab_size > (1 << 24)) return "Vp must be in [V, 16777216]";
    return NULL;
}

int checkpoint_config_check(GPT2Config c, char *err, size_t err_len) {
    const char *problem = gpt2_config_problem(c);
    if (!problem) return 0;
    return fail_with(err, err_len, "invalid model config (L=%d NH=%d C=%d maxT=%d V=%d Vp=%d): %s",
                     c.num_layers, c.num_heads, c.channels, c.max_seq_len, c.vocab_size,
                     c.padded_vocab_size, problem);
}

// ----------------------------------------------------------------------------------------
// the tensor table

#define NAME(name, ...) #name,
const char *const checkpoint_tensor_names[NUM_PARAMETER_TENSORS] = {GPT2_PARAMETERS(NAME, NAME)};
#undef NAME

// By index, so that the table's order (GPT2_PARAMETERS) is the one order there is.
const CheckpointHFTensor checkpoint_hf_tensors[NUM_PARAMETER_TENSORS] = {
    [PARAM_wte] = {"wte.weight", 0, 1, 0},                  // (V, C): the padding rows are ours
    [PARAM_wpe] = {"wpe.weight", 0, 1, 0},                  // (maxT, C)
    [PARAM_ln1w] = {"h.%d.ln_1.weight", 1, 0, 0},
    [PARAM_ln1b] = {"h.%d.ln_1.bias", 1, 0, 0},
    [PARAM_qkvw] = {"h.%d.attn.c_attn.weight", 1, 3, 1},    // (C, 3C) -> (3C, C)
    [PARAM_qkvb] = {"h.%d.attn.c_attn.bias", 3, 0, 0},
    [PARAM_attprojw] = {"h.%d.attn.c_proj.weight", 1, 1, 1},
    [PARAM_attprojb] = {"h.%d.attn.c_proj.bias", 1, 0, 0},
    [PARAM_ln2w] = {"h.%d.ln_2.weight", 1, 0, 0},
    [PARAM_ln2b] = {"h.%d.ln_2.bias", 1, 0, 0},
    [PARAM_fcw] = {"h.%d.mlp.c_fc.weight", 1, 4, 1},        // (C, 4C) -> (4C, C)
    [PARAM_fcb] = {"h.%d.mlp.c_fc.bias", 4, 0, 0},
    [PARAM_fcprojw] = {"h.%d.mlp.c_proj.weight", 4, 1, 1},  // (4C, C) -> (C, 4C)
    [PARAM_fcprojb] = {"h.%d.mlp.c_proj.bias", 1, 0, 0},
    [PARAM_lnfw] = {"ln_f.weight", 1, 0, 0},
    [PARAM_lnfb] = {"ln_f.bias", 1, 0, 0},
};

void checkpoint_tensor_sizes(size_t sizes[NUM_PARAMETER_TENSORS], GPT2Config c) {
    size_t Vp = c.padded_vocab_size, C = c.channels, L = c.num_layers, maxT = c.max_seq_len;
#define ONE(name, elements, ...) sizes[PARAM_##name] = (elements);
#define LAYER(name, elements, ...) sizes[PARAM_##name] = L * (elements);
    GPT2_PARAMETERS(ONE, LAYER)
#undef ONE
#undef LAYER
}

size_t checkpoint_num_parameters(GPT2Config c) {
    size_t sizes[NUM_PARAMETER_TENSORS], n = 0;
    checkpoint_tensor_sizes(sizes, c);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) n += sizes[i];
    return n;
}

size_t checkpoint_value_bytes(int version) { return version == CHECKPOINT_VERSION_FP32 ? 4 : 2; }

uint64_t checkpoint_file_bytes(GPT2Config c, int version) {
    return CHECKPOINT_HEADER_BYTES + (uint64_t)checkpoint_num_parameters(c) * checkpoint_value_bytes(version);
}

// ----------------------------------------------------------------------------------------
// the header: the config's fields at [2..7], in llm.c's order

void checkpoint_header_pack(int32_t header[CHECKPOINT_HEADER_INTS], GPT2Config c, int version) {
    memset(header, 0, CHECKPOINT_HEADER_INTS * sizeof(int32_t));
    header[0] = CHECKPOINT_MAGIC;
    header[1] = version;
    header[2] = c.max_seq_len;
    header[3] = c.vocab_size;
    header[4] = c.num_layers;
    header[5] = c.num_heads;
    header[6] = c.channels;
    header[7] = c.padded_vocab_size;
}

int checkpoint_header_unpack(const int32_t header[CHECKPOINT_HEADER_INTS], CheckpointHeader *out,
                             char *err, size_t err_len) {
    memset(out, 0, sizeof(*out));
    if (header[0] != CHECKPOINT_MAGIC)
        return fail_with(err, err_len, "not a model checkpoint: bad magic %d (expected %d)", header[0],
                         CHECKPOINT_MAGIC);
    if (header[1] != CHECKPOINT_VERSION_FP32 && header[1] != CHECKPOINT_VERSION_BF16)
        return fail_with(err, err_len, "unsupported checkpoint version %d (this program reads %d (fp32) "
                         "and %d (bf16))", header[1], CHECKPOINT_VERSION_FP32, CHECKPOINT_VERSION_BF16);
    out->version = header[1];
    out->config = (GPT2Config){.max_seq_len = header[2], .vocab_size = header[3], .num_layers = header[4],
                               .num_heads = header[5], .channels = header[6], .padded_vocab_size = header[7]};
    return checkpoint_config_check(out->config, err, err_len);
}

int checkpoint_check_size(const CheckpointHeader *h, uint64_t file_size, char *err, size_t err_len) {
    uint64_t want = checkpoint_file_bytes(h->config, h->version);
    if (file_size == want) return 0;
    return fail_with(err, err_len, "%s by %llu bytes: the header's config needs %zu parameters (%llu bytes "
                     "in all)", file_size < want ? "truncated" : "too long",
                     (unsigned long long)(file_size < want ? want - file_size : file_size - want),
                     checkpoint_num_parameters(h->config), (unsigned long long)want);
}

void checkpoint_print_layout(FILE *out) {
    fprintf(out, "{\"magic\": %d, \"version_fp32\": %d, \"version_bf16\": %d, \"header_ints\": %d,\n",
            CHECKPOINT_MAGIC, CHECKPOINT_VERSION_FP32, CHECKPOINT_VERSION_BF16, CHECKPOINT_HEADER_INTS);
    fprintf(out, " \"header\": [\"magic\", \"version\", \"maxT\", \"V\", \"L\", \"NH\", \"C\", \"Vp\"],\n");
    fprintf(out, " \"tensors\": [\n");
#define ONE(name, ...) 0,
#define LAYER(name, ...) 1,
    static const int per_layer[NUM_PARAMETER_TENSORS] = {GPT2_PARAMETERS(ONE, LAYER)};
#undef ONE
#undef LAYER
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const CheckpointHFTensor *t = &checkpoint_hf_tensors[i];
        char hf[128];   // %d -> {} for Python's str.format
        const char *d = strstr(t->name, "%d");
        if (d) snprintf(hf, sizeof(hf), "%.*s{}%s", (int)(d - t->name), t->name, d + 2);
        else snprintf(hf, sizeof(hf), "%s", t->name);
        fprintf(out, "  {\"name\": \"%s\", \"hf\": \"%s\", \"per_layer\": %s, \"transposed\": %s}%s\n",
                checkpoint_tensor_names[i], hf, per_layer[i] ? "true" : "false",
                t->transposed ? "true" : "false", i + 1 < NUM_PARAMETER_TENSORS ? "," : "");
    }
    fprintf(out, " ]}\n");
}
