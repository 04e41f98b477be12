// fuzz/fuzz_encode.c: the GPT-2 encoder on arbitrary bytes. Properties: decode(encode(x)) == x,
// every id is in the vocabulary, and encoding in parts split at cut points (bpe_find_cut) gives
// the same ids as encoding whole. Input: one flag byte (bit 0: allow <|endoftext|>; the rest
// picks the part sizes), then the text. The vocabulary comes from $FUZZ_VOCAB_DIR, else
// $DATA_SRC/gpt2, ../shared/data/gpt2 or data/gpt2.
#include <stdint.h>
#include <string.h>

#include "../data/bpe.h"
#include "../utils.h"
#include "fuzz_common.h"

static BPE bpe;
static BPEScratch *scratch;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *env = getenv("FUZZ_VOCAB_DIR"), *data_src = getenv("DATA_SRC");
    char from_src[4096] = "";
    if (data_src) snprintf(from_src, sizeof(from_src), "%s/gpt2", data_src);
    const char *dirs[4] = {env, from_src, "../shared/data/gpt2", "data/gpt2"};
    for (int i = 0; i < 4; i++) {
        char probe[4200];
        if (!dirs[i] || !dirs[i][0]) continue;
        snprintf(probe, sizeof(probe), "%s/vocab.bpe", dirs[i]);
        if (!file_exists(probe)) continue;
        bpe_load(&bpe, dirs[i]);
        scratch = bpe_scratch_new(&bpe);
        return 0;
    }
    die("fuzz_encode: no GPT-2 vocabulary: set FUZZ_VOCAB_DIR or DATA_SRC (e.g. ../shared/data)");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int special = data[0] & 1;
    size_t step = 1 + (data[0] >> 1);
    const uint8_t *text = data + 1;
    size_t n = size - 1;

    TokenList whole = {0}, parts = {0};
    bpe_encode(&bpe, scratch, text, n, special, &whole);
    for (size_t i = 0; i < whole.len; i++)
        FUZZ_ASSERT(whole.ids[i] >= 0 && whole.ids[i] < bpe.tokenizer.vocab_size, "id in range");
    ByteBuf back = {0};
    size_t bad;
    FUZZ_ASSERT(tokenizer_decode(&bpe.tokenizer, whole.ids, whole.len, &back, &bad) == 0, "decode succeeds");
    FUZZ_ASSERT(back.len == n && (n == 0 || memcmp(back.data, text, n) == 0), "decode(encode(x)) == x");

    size_t begin = 0;
    while (begin < n) {
        size_t end = bpe_find_cut(text, n, begin + step, n);
        FUZZ_ASSERT(end > begin && end <= n, "cut moves forward");
        bpe_encode_range(&bpe, scratch, text, n, begin, end, special, &parts);
        begin = end;
    }
    FUZZ_ASSERT(parts.len == whole.len && (whole.len == 0 || memcmp(parts.ids, whole.ids, whole.len * sizeof(int)) == 0),
                "encoding in parts at cuts == encoding whole");
    bytebuf_free(&back);
    tokenlist_free(&whole);
    tokenlist_free(&parts);
    return 0;
}
