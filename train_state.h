// train_state.h: the training-state file written beside each model checkpoint
// (state_%08d.bin): everything besides the model that a resumed run needs to continue
// exactly: step, data position, sampling RNG, the shapes it was made with, and the optimizer
// state (AdamW first moments, second moments, then fp32 master weights where the model keeps
// them; each an array of num_parameters floats). docs/FORMATS.md states the layout.
//
// The checks are functions that report instead of exiting, so that they can be fuzzed
// (fuzz/fuzz_train_state.c); train_gpt2 adds the file name and dies.
#ifndef TRAIN_STATE_H
#define TRAIN_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TRAIN_STATE_MAGIC 20241129
#define TRAIN_STATE_VERSION 1

typedef struct {
    int32_t header[8];         // magic, version, step, B, T, micro-batches per step (all ranks
                               // together: the same for any number of ranks), has_master, 0
    int64_t data_epoch, data_shard, data_batch;
    uint64_t rng;
    uint64_t num_parameters;
} TrainState;

// the size of a whole training-state file for a model of num_parameters
uint64_t train_state_bytes(uint64_t num_parameters, int has_master);

// Checks the header against the size of the file it came from: magic, version, a step of at
// least 1, positive shapes, a data position that is not negative, and exactly the optimizer
// state the header announces after it. Returns 0, or -1 with the reason in err.
int train_state_check(const TrainState *s, uint64_t file_size, char *err, size_t err_len);

// Checks the optimizer-state floats that follow the header, read from f (positioned just
// after it) in chunks: each finite, second moments not negative. Returns 0, or -1 naming the
// array (first moments, second moments, master weights), the index and the byte offset, or
// the read error.
int train_state_check_values(const TrainState *s, FILE *f, char *err, size_t err_len);

// A whole file in memory: train_state_check, then train_state_check_values on what follows.
int train_state_parse(const uint8_t *data, size_t size, TrainState *out, char *err, size_t err_len);

#endif
