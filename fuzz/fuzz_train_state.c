// fuzz/fuzz_train_state.c: the training-state file parser (train_state.c, the state_%08d.bin
// beside each checkpoint), versions 1 and 2. A file that parses has a sane header, exactly the
// optimizer state that header announces, and only finite values (second moments not
// negative); a version 2 header packs back to the very bytes it came from; a refusal says why.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../train_state.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    TrainState s;
    char err[256] = "";
    if (train_state_parse(data, size, &s, err, sizeof(err)) != 0) {
        FUZZ_ASSERT(err[0] != 0, "a refusal says why");
        return 0;
    }
    FUZZ_ASSERT(s.version == 1 || s.version == TRAIN_STATE_VERSION, "a version it reads");
    FUZZ_ASSERT(s.step >= 1 && s.B >= 1 && s.T >= 1 && s.micro_batches >= 1, "step and shapes positive");
    FUZZ_ASSERT((s.has_master == 0 || s.has_master == 1) && (s.shuffle == 0 || s.shuffle == 1),
                "flags 0 or 1");
    FUZZ_ASSERT(s.version == 1 ? s.data_files == 0 && s.data_tokens == 0 && s.shuffle == 0
                               : s.data_files >= 1 && s.data_tokens >= 1,
                "version 2 records the training data, version 1 nothing of it");
    FUZZ_ASSERT(s.data_epoch >= 0 && s.data_shard >= 0 && s.data_batch >= 0, "data position not negative");
    FUZZ_ASSERT(train_state_file_bytes(&s) == size, "the header accounts for every byte");
    size_t header = train_state_header_bytes(s.version);
    if (s.version == TRAIN_STATE_VERSION) {   // pack is unpack's inverse
        uint8_t packed[TRAIN_STATE_HEADER_BYTES];
        train_state_pack(&s, packed);
        FUZZ_ASSERT(memcmp(packed, data, TRAIN_STATE_HEADER_BYTES) == 0, "the header packs back to its bytes");
    }
    uint64_t n = s.num_parameters;
    for (uint64_t i = 0; i < (size - header) / sizeof(float); i++) {
        float v;
        memcpy(&v, data + header + i * sizeof(float), sizeof(v));
        FUZZ_ASSERT(isfinite(v), "every value finite");
        FUZZ_ASSERT(i / n != 1 || v >= 0.0f, "second moments not negative");
    }
    return 0;
}
