// train_state.c: see train_state.h.
#include "train_state.h"

#include <math.h>
#include <string.h>

#include "utils.h"

static int arrays(int has_master) { return 2 + (has_master != 0); }

size_t train_state_header_bytes(int version) {
    return version == 1 ? TRAIN_STATE_V1_HEADER_BYTES : version == 2 ? TRAIN_STATE_HEADER_BYTES : 0;
}

uint64_t train_state_bytes(uint64_t num_parameters, int has_master) {
    return TRAIN_STATE_HEADER_BYTES + (uint64_t)arrays(has_master) * num_parameters * sizeof(float);
}

uint64_t train_state_file_bytes(const TrainState *s) {
    return train_state_header_bytes(s->version) +
           (uint64_t)arrays(s->has_master) * s->num_parameters * sizeof(float);
}

// ----------------------------------------------------------------------------------------
// the header's bytes: little-endian at the offsets of train_state.h, whatever the host

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> 8 * i); }
static int32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << 8 * i;
    return (int32_t)v;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << 8 * i;
    return v;
}

void train_state_pack(const TrainState *s, uint8_t out[TRAIN_STATE_HEADER_BYTES]) {
    memset(out, 0, TRAIN_STATE_HEADER_BYTES);
    put32(out + 0, TRAIN_STATE_MAGIC);
    put32(out + 4, TRAIN_STATE_VERSION);
    put32(out + 8, (uint32_t)s->step);
    put32(out + 12, (uint32_t)s->B);
    put32(out + 16, (uint32_t)s->T);
    put32(out + 20, (uint32_t)s->micro_batches);
    put32(out + 24, (uint32_t)s->has_master);
    put32(out + 28, (uint32_t)s->shuffle);
    put64(out + 32, (uint64_t)s->data_epoch);
    put64(out + 40, (uint64_t)s->data_shard);
    put64(out + 48, (uint64_t)s->data_batch);
    put64(out + 56, s->rng);
    put64(out + 64, s->num_parameters);
    put64(out + 72, s->seed);
    put64(out + 80, s->data_tokens);
    put64(out + 88, s->data_hash);
    put32(out + 96, (uint32_t)s->data_files);
    // 100: int32 0, room for a flag without a new version
}

int train_state_unpack(const uint8_t *bytes, size_t n, uint64_t file_size, TrainState *s, char *err,
                       size_t err_len) {
    memset(s, 0, sizeof(*s));
    if (file_size < 8 || n < 8)
        return fail_with(err, err_len, "%llu bytes, shorter than the header of a training-state file",
                         (unsigned long long)file_size);
    if (get32(bytes) != TRAIN_STATE_MAGIC)
        return fail_with(err, err_len, "not a training-state file (magic %d, expected %d)", get32(bytes),
                         TRAIN_STATE_MAGIC);
    s->version = get32(bytes + 4);
    size_t header = train_state_header_bytes(s->version);
    if (!header)
        return fail_with(err, err_len, "unsupported training-state version %d (this program reads 1 and %d)",
                         s->version, TRAIN_STATE_VERSION);
    if (file_size < header || n < header)
        return fail_with(err, err_len, "%llu bytes, shorter than the %zu-byte header of a version %d "
                         "training-state file", (unsigned long long)file_size, header, s->version);
    s->step = get32(bytes + 8);
    s->B = get32(bytes + 12);
    s->T = get32(bytes + 16);
    s->micro_batches = get32(bytes + 20);
    s->has_master = get32(bytes + 24);
    int32_t at28 = get32(bytes + 28);   // version 1: reserved, 0; version 2: the shuffle flag
    s->data_epoch = (int64_t)get64(bytes + 32);
    s->data_shard = (int64_t)get64(bytes + 40);
    s->data_batch = (int64_t)get64(bytes + 48);
    s->rng = get64(bytes + 56);
    s->num_parameters = get64(bytes + 64);
    int bad28 = s->version == 1 ? at28 != 0 : at28 != 0 && at28 != 1;
    if (s->step < 1 || s->B < 1 || s->T < 1 || s->micro_batches < 1 ||
        (s->has_master != 0 && s->has_master != 1) || bad28)
        return fail_with(err, err_len, "corrupt header (step %d, B %d, T %d, %d micro-batches, "
                         "master weights %d, %s %d)", s->step, s->B, s->T, s->micro_batches, s->has_master,
                         s->version == 1 ? "reserved" : "shuffle", at28);
    if (s->version >= 2) {
        s->shuffle = at28;
        s->seed = get64(bytes + 72);
        s->data_tokens = get64(bytes + 80);
        s->data_hash = get64(bytes + 88);
        s->data_files = get32(bytes + 96);
        int32_t reserved = get32(bytes + 100);
        if (s->data_files < 1 || s->data_tokens < 1 || reserved != 0)
            return fail_with(err, err_len, "corrupt header (%d training files, %llu tokens, reserved %d)",
                             s->data_files, (unsigned long long)s->data_tokens, reserved);
    }
    if (s->data_epoch < 0 || s->data_shard < 0 || s->data_batch < 0)
        return fail_with(err, err_len, "corrupt data position (epoch %lld, shard %lld, batch %lld)",
                         (long long)s->data_epoch, (long long)s->data_shard, (long long)s->data_batch);
    // at most UINT64_MAX bytes: the arrays' size must not wrap around
    uint64_t max_params = (UINT64_MAX - header) / ((uint64_t)arrays(s->has_master) * sizeof(float));
    if (s->num_parameters < 1 || s->num_parameters > max_params)
        return fail_with(err, err_len, "corrupt header: %llu parameters",
                         (unsigned long long)s->num_parameters);
    uint64_t want = train_state_file_bytes(s);
    if (file_size < want)
        return fail_with(err, err_len, "truncated: %llu bytes, the optimizer state of %llu parameters "
                         "needs %llu", (unsigned long long)file_size,
                         (unsigned long long)s->num_parameters, (unsigned long long)want);
    if (file_size > want)
        return fail_with(err, err_len, "%llu unexpected bytes after the optimizer state",
                         (unsigned long long)(file_size - want));
    return 0;
}

int train_state_check_values(const TrainState *s, FILE *f, char *err, size_t err_len) {
    static const char *const names[3] = {"AdamW first moments", "AdamW second moments",
                                         "master weights"};
    enum { CHUNK = 1 << 14 };
    float chunk[CHUNK];
    uint64_t total = (uint64_t)arrays(s->has_master) * s->num_parameters;
    for (uint64_t first = 0; first < total; first += CHUNK) {
        size_t n = total - first < CHUNK ? (size_t)(total - first) : CHUNK;
        if (fread(chunk, sizeof(float), n, f) != n)
            return fail_with(err, err_len, "truncated or unreadable at value %llu of the optimizer state",
                             (unsigned long long)first);
        for (size_t i = 0; i < n; i++) {
            float v = chunk[i];
            uint64_t index = first + i, array = index / s->num_parameters;
            if (isfinite(v) && (array != 1 || v >= 0.0f)) continue;
            return fail_with(err, err_len, "the file is corrupt: value %llu of the %s (byte %llu) is %g",
                             (unsigned long long)(index % s->num_parameters), names[array < 3 ? array : 2],
                             (unsigned long long)(train_state_header_bytes(s->version) + index * sizeof(float)),
                             (double)v);
        }
    }
    return 0;
}

int train_state_parse(const uint8_t *data, size_t size, TrainState *out, char *err, size_t err_len) {
    size_t n = size < TRAIN_STATE_HEADER_BYTES ? size : TRAIN_STATE_HEADER_BYTES;
    if (train_state_unpack(data, n, size, out, err, err_len) != 0) return -1;
    // the check above leaves at least one parameter's arrays after the header: never empty
    size_t header = train_state_header_bytes(out->version);
    FILE *f = fmemopen((void *)(data + header), size - header, "rb");
    if (!f) return fail_with(err, err_len, "cannot read the file from memory");
    int rc = train_state_check_values(out, f, err, err_len);
    fclose(f);
    return rc;
}
