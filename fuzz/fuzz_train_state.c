// fuzz/fuzz_train_state.c: the training-state file parser (train_state.c, the state_%08d.bin
// beside each checkpoint). A file that parses has a sane header, exactly the optimizer state
// that header announces, and only finite values (second moments not negative); a refusal
// says why.
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
    FUZZ_ASSERT(s.header[0] == TRAIN_STATE_MAGIC && s.header[1] == TRAIN_STATE_VERSION, "magic and version");
    FUZZ_ASSERT(s.header[2] >= 1 && s.header[3] >= 1 && s.header[4] >= 1 && s.header[5] >= 1,
                "step and shapes positive");
    FUZZ_ASSERT(s.data_epoch >= 0 && s.data_shard >= 0 && s.data_batch >= 0, "data position not negative");
    FUZZ_ASSERT(train_state_bytes(s.num_parameters, s.header[6]) == size, "the header accounts for every byte");
    uint64_t n = s.num_parameters;
    for (uint64_t i = 0; i < (size - sizeof(TrainState)) / sizeof(float); i++) {
        float v;
        memcpy(&v, data + sizeof(TrainState) + i * sizeof(float), sizeof(v));
        FUZZ_ASSERT(isfinite(v), "every value finite");
        FUZZ_ASSERT(i / n != 1 || v >= 0.0f, "second moments not negative");
    }
    return 0;
}
