// dataloader.h: batches of (inputs, targets) from llm.c token files.
//
// Token file (data/tokenizer.h, docs/FORMATS.md): a header of 256 int32 (magic 20240520,
// version 1, number of tokens), then that many uint16 tokens. A glob pattern may name several files (shards), read in order, or in
// an order shuffled per epoch.
//
// A batch is B*T+1 consecutive tokens of one shard: inputs are the first B*T, targets the
// last B*T (inputs shifted by one). Batches start at multiples of B*T inside a shard; the
// tail of a shard that is shorter than a batch is skipped. With shuffling, the order of the
// shards and of the batches inside each shard is a permutation drawn from (seed, epoch), so
// the whole position is three integers and a resumed run continues exactly.
//
// Data parallelism: with dataloader_set_rank, rank r of world ranks reads batches r,
// r + world, r + 2*world, ... of the one-process sequence. The position stays the
// one-process position (after each call, that of the next group of world batches), so the
// ranks together read exactly what one process reads, and a saved position resumes on any
// number of ranks.
#ifndef DATALOADER_H
#define DATALOADER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    long epoch;        // completed passes over all shards
    long shard;        // index into this epoch's shard order
    long batch;        // index into this shard's batch order
} DataPosition;

typedef struct {
    int B, T;
    int shuffle;
    uint64_t seed;
    int rank, world;          // this process reads batch rank of every group of world batches
    char **paths;             // shard file names, sorted (from the glob)
    size_t *shard_tokens;     // number of tokens in each shard
    int num_shards;
    size_t total_tokens;
    uint64_t hash;            // FNV-1a (64 bits) of every token, shard after shard in path order:
                              // what a resumed run checks that its data is the run's
    DataPosition pos;
    // the shard that is open
    FILE *file;
    int open_shard;           // index into paths of the open file, -1 when none
    long *batch_order;        // (batches in the open shard) permutation of batch indices
    long num_batches;         // batches in the open shard
    uint16_t *buffer;         // (B*T+1) tokens read from the file
    int *inputs;              // (B*T) host
    int *targets;             // (B*T) host
} DataLoader;

// Opens every file matching pattern and validates its header, its size and its tokens (one
// pass over each file: every id below vocab_size; the same pass makes dl->hash). Dies with a
// message naming the file (and `what` it is for, e.g. "training") when one is missing, has a
// wrong magic or version, is truncated, holds fewer than B*T+1 tokens, or holds an id outside
// the vocabulary (with its position). With `fit_batch`, a file of fewer than B*T+1 tokens makes
// the batches smaller instead (dl->B rows, the most every file holds; an error only when not
// even one row of T+1 fits): for validation, whose files may be smaller than a training batch.
void dataloader_init(DataLoader *dl, const char *pattern, int B, int T, int shuffle, uint64_t seed,
                     int vocab_size, const char *what, int fit_batch);
// Fills dl->inputs and dl->targets with the next batch, moving to the next shard (and epoch)
// when the current one is used up.
void dataloader_next_batch(DataLoader *dl);
// From now on read batch rank of every group of world (default: rank 0 of world 1).
void dataloader_set_rank(DataLoader *dl, int rank, int world);
void dataloader_reset(DataLoader *dl);                     // back to the first batch of epoch 0
void dataloader_seek(DataLoader *dl, DataPosition pos);   // continue from a saved position
void dataloader_free(DataLoader *dl);

#endif
