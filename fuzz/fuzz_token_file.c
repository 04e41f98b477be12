// fuzz/fuzz_token_file.c: the llm.c token file parser (magic 20240520, uint16 tokens). A file
// that parses holds exactly the tokens its header counts.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../data/tokenizer.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint16_t *tokens;
    size_t n;
    char err[256];
    if (token_file_parse(data, size, &tokens, &n, err, sizeof(err)) != 0) {
        FUZZ_ASSERT(err[0] != 0 && tokens == NULL, "a refusal says why and returns nothing");
        return 0;
    }
    FUZZ_ASSERT(TOKEN_FILE_HEADER_BYTES + 2 * n == size, "the header counts every token");
    FUZZ_ASSERT(n == 0 || memcmp(tokens, data + TOKEN_FILE_HEADER_BYTES, 2 * n) == 0, "tokens copied as stored");
    free(tokens);
    return 0;
}
