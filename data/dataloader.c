// dataloader.c: see dataloader.h.
#include "dataloader.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "tokenizer.h"

// splitmix64: a tiny, good, seedable generator for the shuffles
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// Fisher-Yates permutation of 0..n-1 drawn from (seed, epoch, salt)
static void permutation(long *out, long n, uint64_t seed, long epoch, long salt, int shuffle) {
    for (long i = 0; i < n; i++) out[i] = i;
    if (!shuffle) return;
    uint64_t state = seed ^ (0x9E3779B97F4A7C15ULL * (uint64_t)(epoch + 1)) ^ ((uint64_t)salt << 32);
    for (long i = n - 1; i > 0; i--) {
        long j = (long)(splitmix64(&state) % (uint64_t)(i + 1));
        long tmp = out[i]; out[i] = out[j]; out[j] = tmp;
    }
}

// reads and checks the header of a token file (data/tokenizer.h); returns its number of tokens
static size_t read_token_header(FILE *f, const char *path) {
    int32_t header[TOKEN_FILE_HEADER_INTS] = {0};
    long size = file_size_or_die(f, path);
    if (size >= (long)TOKEN_FILE_HEADER_BYTES)
        fread_or_die(header, sizeof(int32_t), TOKEN_FILE_HEADER_INTS, f, path);
    size_t ntokens = 0;
    char err[256];
    if (token_file_check(header, (uint64_t)size, &ntokens, err, sizeof(err)) != 0)
        die("%s: %s", path, err);
    return ntokens;
}

// every token of an open file (just past its header) below vocab_size; each goes into *hash
// (FNV-1a, 64 bits, one token at a time), in the order of the file
static void check_tokens(FILE *f, const char *path, size_t ntokens, int vocab_size, const char *what,
                         uint64_t *hash) {
    enum { CHUNK = 1 << 16 };
    uint16_t chunk[CHUNK];
    for (size_t first = 0; first < ntokens; first += CHUNK) {
        size_t n = ntokens - first < CHUNK ? ntokens - first : CHUNK;
        fread_or_die(chunk, sizeof(uint16_t), n, f, path);
        uint64_t h = *hash;
        for (size_t i = 0; i < n; i++) h = (h ^ chunk[i]) * 0x100000001B3ULL;
        *hash = h;
        uint16_t worst = 0;   // a branch-free pass first: most chunks are clean
        for (size_t i = 0; i < n; i++) worst = chunk[i] > worst ? chunk[i] : worst;
        if (worst < vocab_size) continue;
        for (size_t i = 0; i < n; i++)
            if (chunk[i] >= vocab_size)
                die("%s (%s file): token %zu (byte offset %zu) is %d, outside the model's vocabulary "
                    "[0, %d)", path, what, first + i, TOKEN_FILE_HEADER_BYTES + 2 * (first + i),
                    chunk[i], vocab_size);
    }
}

void dataloader_init(DataLoader *dl, const char *pattern, int B, int T, int shuffle, uint64_t seed,
                     int vocab_size, const char *what, int fit_batch) {
    memset(dl, 0, sizeof(*dl));
    dl->B = B;
    dl->T = T;
    dl->shuffle = shuffle;
    dl->seed = seed;
    dl->rank = 0;
    dl->world = 1;
    dl->open_shard = -1;
    dl->hash = 0xCBF29CE484222325ULL;   // FNV-1a's offset basis
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH) die("no %s token file matches '%s'", what, pattern);
    if (rc != 0) die("cannot expand the %s file pattern '%s'", what, pattern);
    dl->num_shards = (int)g.gl_pathc;
    dl->paths = malloc(g.gl_pathc * sizeof(char *));
    dl->shard_tokens = malloc(g.gl_pathc * sizeof(size_t));
    if (!dl->paths || !dl->shard_tokens) die("out of host memory for the data loader");
    size_t need = (size_t)B * T + 1;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        dl->paths[i] = strdup(g.gl_pathv[i]);
        FILE *f = fopen_or_die(dl->paths[i], "rb");
        dl->shard_tokens[i] = read_token_header(f, dl->paths[i]);
        if (fit_batch && dl->shard_tokens[i] < need && dl->shard_tokens[i] > (size_t)T) {
            B = (int)((dl->shard_tokens[i] - 1) / T);   // the most rows this file holds
            dl->B = B;
            need = (size_t)B * T + 1;
        }
        if (dl->shard_tokens[i] < need)
            die("%s (%s file): %zu tokens, fewer than one batch needs (B*T+1 = %d*%d+1 = %zu); use a "
                "smaller -b or -t", dl->paths[i], what, dl->shard_tokens[i], B, T, need);
        check_tokens(f, dl->paths[i], dl->shard_tokens[i], vocab_size, what, &dl->hash);
        fclose(f);
        dl->total_tokens += dl->shard_tokens[i];
    }
    globfree(&g);
    dl->buffer = malloc(need * sizeof(uint16_t));
    dl->inputs = malloc((size_t)B * T * sizeof(int));
    dl->targets = malloc((size_t)B * T * sizeof(int));
    if (!dl->buffer || !dl->inputs || !dl->targets)
        die("out of host memory for the data loader");
    dataloader_reset(dl);
}

// the shard at position dl->pos.shard of this epoch's shard order
static int current_shard(const DataLoader *dl) {
    long *order = malloc(dl->num_shards * sizeof(long));
    if (!order) die("out of host memory for the data loader");
    permutation(order, dl->num_shards, dl->seed, dl->pos.epoch, -1, dl->shuffle);
    int shard = (int)order[dl->pos.shard];
    free(order);
    return shard;
}

// opens the shard of the current position and draws its batch order
static void open_current_shard(DataLoader *dl) {
    int shard = current_shard(dl);
    if (dl->file) fclose(dl->file);
    dl->file = fopen_or_die(dl->paths[shard], "rb");
    read_token_header(dl->file, dl->paths[shard]);
    dl->open_shard = shard;
    size_t per_batch = (size_t)dl->B * dl->T;
    dl->num_batches = (long)((dl->shard_tokens[shard] - 1) / per_batch);
    free(dl->batch_order);
    dl->batch_order = malloc(dl->num_batches * sizeof(long));
    if (!dl->batch_order) die("out of host memory for the data loader");
    permutation(dl->batch_order, dl->num_batches, dl->seed, dl->pos.epoch, shard, dl->shuffle);
}

void dataloader_seek(DataLoader *dl, DataPosition pos) {
    if (pos.epoch < 0 || pos.shard < 0 || pos.shard >= dl->num_shards || pos.batch < 0)
        die("data position (epoch %ld, shard %ld, batch %ld) does not fit these %d token files",
            pos.epoch, pos.shard, pos.batch, dl->num_shards);
    dl->pos = pos;
    open_current_shard(dl);
    if (pos.batch > dl->num_batches)
        die("data position (batch %ld) is past the end of %s (%ld batches)", pos.batch,
            dl->paths[dl->open_shard], dl->num_batches);
}

void dataloader_reset(DataLoader *dl) {
    DataPosition start = {0, 0, 0};
    dataloader_seek(dl, start);
}

void dataloader_set_rank(DataLoader *dl, int rank, int world) {
    if (world < 1 || rank < 0 || rank >= world)
        die("data loader: rank %d is outside a world of %d", rank, world);
    dl->rank = rank;
    dl->world = world;
}

// moves to the next shard (and epoch) when the current one is used up
static void next_shard_if_done(DataLoader *dl) {
    if (dl->pos.batch < dl->num_batches) return;
    dl->pos.batch = 0;
    if (++dl->pos.shard >= dl->num_shards) {
        dl->pos.shard = 0;
        dl->pos.epoch++;
    }
    open_current_shard(dl);
}

// reads the batch at the current position into inputs and targets
static void read_batch(DataLoader *dl) {
    size_t n = (size_t)dl->B * dl->T;
    long offset = (long)TOKEN_FILE_HEADER_BYTES +
                  dl->batch_order[dl->pos.batch] * (long)(n * sizeof(uint16_t));
    const char *path = dl->paths[dl->open_shard];
    if (fseek(dl->file, offset, SEEK_SET) != 0) die("%s: cannot seek to byte %ld", path, offset);
    fread_or_die(dl->buffer, sizeof(uint16_t), n + 1, dl->file, path);
    for (size_t i = 0; i < n; i++) {
        dl->inputs[i] = dl->buffer[i];
        dl->targets[i] = dl->buffer[i + 1];
    }
}

// the world batches of one group: this rank reads its own and steps over the others'
void dataloader_next_batch(DataLoader *dl) {
    for (int r = 0; r < dl->world; r++) {
        next_shard_if_done(dl);
        if (r == dl->rank) read_batch(dl);
        dl->pos.batch++;
    }
}

void dataloader_free(DataLoader *dl) {
    if (dl->file) fclose(dl->file);
    for (int i = 0; i < dl->num_shards; i++) free(dl->paths[i]);
    free(dl->paths);
    free(dl->shard_tokens);
    free(dl->batch_order);
    free(dl->buffer);
    free(dl->inputs);
    free(dl->targets);
    memset(dl, 0, sizeof(*dl));
}
