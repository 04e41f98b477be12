// fuzz/fuzz_vocab.c: the vocabulary parsers (vocab.bpe and encoder.json, and the checks of one
// against the other). Input: 2 bytes (little-endian) giving the length of the vocab.bpe part,
// then vocab.bpe, then encoder.json. A vocabulary that loads must encode any text so that it
// decodes back.
#include <stdint.h>
#include <string.h>

#include "../data/bpe.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t merges_len = (size_t)(data[0] | data[1] << 8);
    if (merges_len > size - 2) merges_len = size - 2;
    const char *merges = (const char *)data + 2, *json = merges + merges_len;
    size_t json_len = size - 2 - merges_len;
    BPE bpe;
    char err[512];
    if (bpe_parse(&bpe, merges, merges_len, json, json_len, err, sizeof(err)) != 0) {
        FUZZ_ASSERT(err[0] != 0, "a refusal says why");
        return 0;
    }
    BPEScratch *s = bpe_scratch_new(&bpe);
    TokenList ids = {0};
    bpe_encode(&bpe, s, data, size, 1, &ids);   // the input itself as text
    ByteBuf back = {0};
    size_t bad;
    FUZZ_ASSERT(tokenizer_decode(&bpe.tokenizer, ids.ids, ids.len, &back, &bad) == 0, "ids in range");
    FUZZ_ASSERT(back.len == size && memcmp(back.data, data, size) == 0, "decode(encode(x)) == x");
    bytebuf_free(&back);
    tokenlist_free(&ids);
    bpe_scratch_free(s);
    bpe_free(&bpe);
    return 0;
}
