// train_state.c: see train_state.h.
#include "train_state.h"

#include <math.h>
#include <string.h>

#include "utils.h"

static int arrays(int has_master) { return 2 + (has_master != 0); }

uint64_t train_state_bytes(uint64_t num_parameters, int has_master) {
    return sizeof(TrainState) + (uint64_t)arrays(has_master) * num_parameters * sizeof(float);
}

int train_state_check(const TrainState *s, uint64_t file_size, char *err, size_t err_len) {
    const int32_t *h = s->header;
    if (file_size < sizeof(TrainState))
        return fail_with(err, err_len, "%llu bytes, shorter than the %zu-byte header of a training-state "
                         "file", (unsigned long long)file_size, sizeof(TrainState));
    if (h[0] != TRAIN_STATE_MAGIC)
        return fail_with(err, err_len, "not a training-state file (magic %d, expected %d)", h[0],
                         TRAIN_STATE_MAGIC);
    if (h[1] != TRAIN_STATE_VERSION)
        return fail_with(err, err_len, "unsupported training-state version %d (this program reads %d)",
                         h[1], TRAIN_STATE_VERSION);
    if (h[2] < 1 || h[3] < 1 || h[4] < 1 || h[5] < 1 || (h[6] != 0 && h[6] != 1) || h[7] != 0)
        return fail_with(err, err_len, "corrupt header (step %d, B %d, T %d, %d micro-batches, "
                         "master weights %d, reserved %d)", h[2], h[3], h[4], h[5], h[6], h[7]);
    if (s->data_epoch < 0 || s->data_shard < 0 || s->data_batch < 0)
        return fail_with(err, err_len, "corrupt data position (epoch %lld, shard %lld, batch %lld)",
                         (long long)s->data_epoch, (long long)s->data_shard, (long long)s->data_batch);
    // at most UINT64_MAX bytes: the arrays' size must not wrap around
    uint64_t max_params = (UINT64_MAX - sizeof(TrainState)) / ((uint64_t)arrays(h[6]) * sizeof(float));
    if (s->num_parameters < 1 || s->num_parameters > max_params)
        return fail_with(err, err_len, "corrupt header: %llu parameters",
                         (unsigned long long)s->num_parameters);
    uint64_t want = train_state_bytes(s->num_parameters, h[6]);
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
    uint64_t total = (uint64_t)arrays(s->header[6]) * s->num_parameters;
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
                             (unsigned long long)(sizeof(TrainState) + index * sizeof(float)), (double)v);
        }
    }
    return 0;
}

int train_state_parse(const uint8_t *data, size_t size, TrainState *out, char *err, size_t err_len) {
    memset(out, 0, sizeof(*out));
    if (size >= sizeof(TrainState)) memcpy(out, data, sizeof(TrainState));
    if (train_state_check(out, size, err, err_len) != 0) return -1;
    // the check above leaves at least one parameter's arrays after the header: never empty
    FILE *f = fmemopen((void *)(data + sizeof(TrainState)), size - sizeof(TrainState), "rb");
    if (!f) return fail_with(err, err_len, "cannot read the file from memory");
    int rc = train_state_check_values(out, f, err, err_len);
    fclose(f);
    return rc;
}
