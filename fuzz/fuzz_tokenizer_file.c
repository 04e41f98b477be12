// fuzz/fuzz_tokenizer_file.c: the llm.c tokenizer file parser (magic 20240328). A file that
// parses must decode every id in range and refuse the first one out of range.
#include <stdint.h>
#include <string.h>

#include "../data/tokenizer.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Tokenizer t;
    char err[256];
    if (tokenizer_parse(&t, data, size, err, sizeof(err)) != 0) {
        FUZZ_ASSERT(err[0] != 0, "a refusal says why");
        return 0;
    }
    FUZZ_ASSERT(t.vocab_size > 0 && t.eot_token >= 0 && t.eot_token < t.vocab_size, "header values in range");
    size_t total = 0;
    for (int id = 0; id < t.vocab_size; id++) {
        size_t len;
        const uint8_t *tok = tokenizer_token(&t, id, &len);
        FUZZ_ASSERT(tok && len >= 1 && len <= 255, "every token has 1 to 255 bytes");
        total += len;
    }
    FUZZ_ASSERT(total + (size_t)t.vocab_size + 1024 == size, "tokens account for every byte");
    int ids[2] = {t.vocab_size - 1, t.vocab_size};
    ByteBuf out = {0};
    size_t bad = 0;
    FUZZ_ASSERT(tokenizer_decode(&t, ids, 2, &out, &bad) == -1 && bad == 1, "id == vocab_size is refused");
    bytebuf_free(&out);
    tokenizer_free(&t);
    return 0;
}
