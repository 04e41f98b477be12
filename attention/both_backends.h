// both_backends.h: every attention backend linked into one program, for the tests and
// benchmarks that compare them. The Makefile links each backend's object with its symbols
// prefixed by its name (naive_attention_forward, flash_attention_forward, ...; prefix_symbols
// there); this header declares them with the types attention.h gives (no copied prototypes)
// and lists them in one table to loop over. Programs that train use attention.h alone.
#ifndef ATTENTION_BOTH_BACKENDS_H
#define ATTENTION_BOTH_BACKENDS_H

#include <stddef.h>

#include "attention.h"

// The one list of backends: X(prefix, ENUM_NAME, saves_logsumexp). A new backend is
// attention/<prefix>.c and attention/<prefix>.cu and one line here.
#define ATTENTION_BACKEND_LIST(X) \
    X(naive, NAIVE, 0)            \
    X(flash, FLASH, 1)

#ifdef __cplusplus
#define ATTENTION_TYPEOF(x) decltype(x)
extern "C" {
#else
#define ATTENTION_TYPEOF(x) __typeof__(x)
#endif

#define DECLARE_ATTENTION_BACKEND(prefix, ENUM_NAME, saves_logsumexp)          \
    extern ATTENTION_TYPEOF(attention_name) prefix##_attention_name;           \
    ATTENTION_TYPEOF(attention_saved_size) prefix##_attention_saved_size;      \
    ATTENTION_TYPEOF(attention_scratch_size) prefix##_attention_scratch_size;  \
    ATTENTION_TYPEOF(attention_set_deterministic) prefix##_attention_set_deterministic;\
    ATTENTION_TYPEOF(attention_deterministic) prefix##_attention_deterministic;\
    ATTENTION_TYPEOF(attention_forward) prefix##_attention_forward;            \
    ATTENTION_TYPEOF(attention_backward) prefix##_attention_backward;
ATTENTION_BACKEND_LIST(DECLARE_ATTENTION_BACKEND)
#undef DECLARE_ATTENTION_BACKEND

#ifdef __cplusplus
}
#endif

typedef struct {
    const char *name;      // the prefix: "naive", "flash"
    int saves_logsumexp;   // what `saved` holds: 0, P (B, NH, T, T); 1, logsumexp (B, NH, T) fp32
    ATTENTION_TYPEOF(attention_saved_size) *saved_size;
    ATTENTION_TYPEOF(attention_scratch_size) *scratch_size;
    ATTENTION_TYPEOF(attention_set_deterministic) *set_deterministic;
    ATTENTION_TYPEOF(attention_deterministic) *deterministic;
    ATTENTION_TYPEOF(attention_forward) *forward;
    ATTENTION_TYPEOF(attention_backward) *backward;
} AttentionBackend;

#define ATTENTION_BACKEND_ENUM(prefix, ENUM_NAME, saves_logsumexp) ENUM_NAME,
enum { ATTENTION_BACKEND_LIST(ATTENTION_BACKEND_ENUM) NUM_ATTENTION_BACKENDS };
#undef ATTENTION_BACKEND_ENUM

#define ATTENTION_BACKEND_ENTRY(prefix, ENUM_NAME, saves_logsumexp)                 \
    {#prefix, saves_logsumexp, prefix##_attention_saved_size,                        \
     prefix##_attention_scratch_size, prefix##_attention_set_deterministic,         \
     prefix##_attention_deterministic,                                               \
     prefix##_attention_forward, prefix##_attention_backward},
static const AttentionBackend attention_backends[NUM_ATTENTION_BACKENDS] = {
    ATTENTION_BACKEND_LIST(ATTENTION_BACKEND_ENTRY)};
#undef ATTENTION_BACKEND_ENTRY

#endif
