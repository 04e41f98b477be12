// data/safetensors.h: the two JSON files of a Hugging Face model, read for import_hf.c: the
// header of a .safetensors file and config.json, whose JSON data/json.c reads. Both parsers
// report what is wrong instead of ending the program (fail_with in utils.c), so
// fuzz/fuzz_safetensors.c can feed them anything; a JSON error reads "at byte N: <problem>", N
// counted from the start of the file (a header's JSON begins at byte 8), and the caller adds the
// file's name.
//
// safetensors (https://github.com/huggingface/safetensors, "Format"): 8 bytes, the little-endian
// length N of a JSON header; N bytes of JSON that begin with '{' and may end in padding spaces,
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"key": "value", ..}}; then the data, offsets counted from its start. A valid
// file names every tensor once, and its tensors' bytes tile the data exactly: no overlap, no
// gap, nothing after the last one.
#ifndef SAFETENSORS_H
#define SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define SAFETENSORS_MAX_DIMS 8
#define SAFETENSORS_MAX_HEADER 100000000   // bytes of JSON; the reference implementation's limit

typedef struct {
    char *name;                  // as in the file
    const char *dtype;           // "F32", "BF16", "BOOL", ...: a name of the format's dtype table
    int dtype_bits;              // bits per value
    int ndim;
    uint64_t shape[SAFETENSORS_MAX_DIMS];
    uint64_t numel;              // product of the shape (1 for a scalar, shape ())
    uint64_t begin, end;         // byte offsets into the data section
} SafeTensor;

typedef struct {
    SafeTensor *tensors;         // sorted by name
    size_t n;
    uint64_t data_offset;        // 8 + N: where the data section starts in the file
    uint64_t data_size;          // bytes of the data section
} SafeTensorsHeader;

// Parses and checks the header of the safetensors file held in file[0, size): well-formed JSON
// with nothing but spaces after it, names unique, every dtype known, every shape consistent with
// its bytes, the tensors tiling the data section. Returns 0, or -1 with the reason in err.
int safetensors_parse(SafeTensorsHeader *h, const uint8_t *file, size_t size, char *err, size_t err_len);
const SafeTensor *safetensors_find(const SafeTensorsHeader *h, const char *name);   // NULL: absent
void safetensors_free(SafeTensorsHeader *h);

// The sizes config.json gives, each -1 when absent. Values must be integers in [1, 2^31 - 1].
typedef struct {
    int64_t n_head, n_embd, n_layer, n_positions, vocab_size;
} HFConfig;

// Parses config.json (text[0, n)): one JSON object, nothing after it but whitespace, none of
// the keys above twice. Returns 0, or -1 with the reason in err.
int hf_config_parse(HFConfig *c, const uint8_t *text, size_t n, char *err, size_t err_len);

#endif
