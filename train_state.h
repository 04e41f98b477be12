// train_state.h: the training-state file written beside each model checkpoint
// (state_%08d.bin): everything besides the model that a resumed run needs to continue
// exactly: step, data position, sampling RNG, the shapes and the data order it was made with,
// and the optimizer state (AdamW first moments, second moments, then fp32 master weights where
// the model keeps them; each an array of num_parameters floats). docs/FORMATS.md states the
// layout.
//
// The header is a struct of named fields in memory; on disk it is little-endian at fixed
// offsets, packed and unpacked here alone (train_state_pack, train_state_unpack):
//   version 2 (written)                     version 1 (read: files of older runs)
//   0   int32 magic 20241129                the same, up to byte 72,
//   4   int32 version                       but [28] is 0 (no shuffle recorded)
//   8   int32 step                          and the header ends at 72: no data
//   12  int32 B                             order recorded, so a resumed run
//   16  int32 T                             cannot check it
//   20  int32 micro-batches per step (all ranks)
//   24  int32 has master weights (0, 1)
//   28  int32 shuffle (0, 1)
//   32  int64 data epoch, 40 int64 data shard, 48 int64 data batch
//   56  uint64 sampling RNG state
//   64  uint64 number of parameters
//   72  uint64 seed
//   80  uint64 training tokens
//   88  uint64 training tokens' hash
//   96  int32 training files
//   100 int32 0
//   104 the optimizer state: 2 or 3 arrays of num_parameters fp32
//
// The checks are functions that report instead of exiting, so that they can be fuzzed
// (fuzz/fuzz_train_state.c); train_gpt2 adds the file name and dies.
#ifndef TRAIN_STATE_H
#define TRAIN_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TRAIN_STATE_MAGIC 20241129
#define TRAIN_STATE_VERSION 2          // written; version 1 is read too
#define TRAIN_STATE_V1_HEADER_BYTES 72
#define TRAIN_STATE_HEADER_BYTES 104   // version 2's header: the most a reader needs

typedef struct {
    int version;               // the file's: 1 or 2 (train_state_pack writes TRAIN_STATE_VERSION)
    int step;                  // optimizer steps done, at least 1
    int B, T;                  // -b, -t
    int micro_batches;         // per step, all ranks together (the same for any number of ranks)
    int has_master;            // 1: fp32 master weights follow the AdamW moments
    int64_t data_epoch, data_shard, data_batch;   // the training loader's position (DataPosition)
    uint64_t rng;              // the sampling RNG's state
    uint64_t num_parameters;
    // What decides which batches come next besides -b, -t and -d (version 2; 0 in version 1):
    // a resumed run must be given the same, or it would continue on other data.
    int shuffle;               // --shuffle
    uint64_t seed;             // --seed: the shuffle's permutations are drawn from it
    int data_files;            // the training token files (-i's matches)
    uint64_t data_tokens;      // their tokens, in all
    uint64_t data_hash;        // their tokens' hash (DataLoader.hash)
} TrainState;

// bytes of the header of a file of this version (0 for a version that does not exist)
size_t train_state_header_bytes(int version);
// the size of a whole training-state file that train_state_pack's header begins
uint64_t train_state_bytes(uint64_t num_parameters, int has_master);
// the size of the whole file that the header s (of s->version) announces
uint64_t train_state_file_bytes(const TrainState *s);

// s as the header of a version TRAIN_STATE_VERSION file (s->version is not read)
void train_state_pack(const TrainState *s, uint8_t out[TRAIN_STATE_HEADER_BYTES]);

// Reads and checks the header in bytes (n of them: the file's first min(file_size,
// TRAIN_STATE_HEADER_BYTES) bytes) against the size of the file it came from: magic, a version
// this program reads, a step of at least 1, positive shapes, flags of 0 or 1, a data position
// that is not negative, (version 2) at least one training file and token, and exactly the
// optimizer state the header announces after it. Returns 0, or -1 with the reason in err.
int train_state_unpack(const uint8_t *bytes, size_t n, uint64_t file_size, TrainState *out, char *err,
                       size_t err_len);

// Checks the optimizer-state floats that follow the header, read from f (positioned just
// after it) in chunks: each finite, second moments not negative. Returns 0, or -1 naming the
// array (first moments, second moments, master weights), the index and the byte offset, or
// the read error.
int train_state_check_values(const TrainState *s, FILE *f, char *err, size_t err_len);

// A whole file in memory: train_state_unpack, then train_state_check_values on what follows.
int train_state_parse(const uint8_t *data, size_t size, TrainState *out, char *err, size_t err_len);

#endif
