// both_backends.h: naive and flash linked into one program, for the tests and benchmarks that
// compare them. The Makefile compiles each backend a second time with its public symbols
// prefixed (naive_attention_forward, flash_attention_forward, ...; see ATTN_SYMS and `rename`
// there, and the .renamed.o rules of tests/gpu/attention.mk); this header declares them and
// lists both in one table to loop over. Programs that train use attention.h alone.
#ifndef ATTENTION_BOTH_BACKENDS_H
#define ATTENTION_BOTH_BACKENDS_H

#include <stddef.h>

#include "../layers/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DECLARE_ATTENTION_BACKEND(prefix)                                                      \
    extern const char *const prefix##_attention_name;                                          \
    size_t prefix##_attention_saved_size(int B, int T, int NH, int HS);                        \
    size_t prefix##_attention_scratch_size(int B, int T, int NH, int HS);                      \
    void prefix##_attention_forward(floatX *out, void *saved, void *scratch, const floatX *qkv, \
                                    int B, int T, int NH, int HS);                             \
    void prefix##_attention_backward(floatX *dqkv, void *scratch, const floatX *dout,          \
                                     const floatX *qkv, const floatX *out, const void *saved,  \
                                     int B, int T, int NH, int HS);
DECLARE_ATTENTION_BACKEND(naive)
DECLARE_ATTENTION_BACKEND(flash)
#undef DECLARE_ATTENTION_BACKEND

#ifdef __cplusplus
}
#endif

typedef struct {
    const char *name;      // "naive" or "flash"
    int saves_logsumexp;   // what `saved` holds: 0, P (B, NH, T, T); 1, logsumexp (B, NH, T) fp32
    size_t (*saved_size)(int B, int T, int NH, int HS);
    size_t (*scratch_size)(int B, int T, int NH, int HS);
    void (*forward)(floatX *out, void *saved, void *scratch, const floatX *qkv,
                    int B, int T, int NH, int HS);
    void (*backward)(floatX *dqkv, void *scratch, const floatX *dout, const floatX *qkv,
                     const floatX *out, const void *saved, int B, int T, int NH, int HS);
} AttentionBackend;

enum { NAIVE, FLASH, NUM_ATTENTION_BACKENDS };
static const AttentionBackend attention_backends[NUM_ATTENTION_BACKENDS] = {
    {"naive", 0, naive_attention_saved_size, naive_attention_scratch_size,
     naive_attention_forward, naive_attention_backward},
    {"flash", 1, flash_attention_saved_size, flash_attention_scratch_size,
     flash_attention_forward, flash_attention_backward},
};

#endif
