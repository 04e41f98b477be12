// attention.h: the one swappable interface of causal multi-head self-attention.
//
// Two backends implement it, picked at build time (ATTENTION=naive|flash), each on the CPU
// (attention/*.c) and on CUDA (attention/*.cu):
//   naive: S = Q K^T / sqrt(HS) and P = softmax(S) materialised in memory, P kept for backward
//   flash: tiled online softmax, one logsumexp per row kept, backward recomputes P tile by tile
// The model sizes its activation arena with attention_saved_size and attention_scratch_size,
// so the T^2 memory of naive and the T memory of flash show up in the program's memory report.
//
// Layouts (the same for both backends):
//   qkv  (B, T, 3, NH, HS)  exactly as the QKV matmul writes it (q, k, v each (NH, HS))
//   out  (B, T, NH, HS)     = (B, T, C), ready for the output projection
//   dqkv (B, T, 3, NH, HS)  overwritten
// Attention is causal: position t attends to positions 0..t. Scale 1/sqrt(HS).
#ifndef ATTENTION_H
#define ATTENTION_H

#include <stddef.h>
#include "../layers/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const char *const attention_name;   // "naive" or "flash"

// Bytes kept from forward to backward, per layer (naive: P, B*NH*T*T floatX;
// flash: logsumexp, B*NH*T fp32).
size_t attention_saved_size(int B, int T, int NH, int HS);
// Bytes of temporary space used inside one forward or backward call and free to reuse after
// it returns (shared by all layers).
size_t attention_scratch_size(int B, int T, int NH, int HS);

// Determinism of attention_backward: 1 when its gradients are bitwise the same on every run with
// the same inputs (every sum in a fixed order), 0 when some are summed in an order that varies.
// attention_set_deterministic(1) asks for the fixed order and returns what is now in force:
// the CPU backends and naive are always deterministic; flash's Hopper backward then adds dQ in
// a fixed key-block order (slower, docs/PERF.md); its mma.sync backward (sm_80-89) cannot (fp32
// atomics) and returns 0. attention_set_deterministic(0) allows the faster unordered sums.
int attention_set_deterministic(int on);
int attention_deterministic(void);

void attention_forward(floatX *out, void *saved, void *scratch, const floatX *qkv,
                       int B, int T, int NH, int HS);
void attention_backward(floatX *dqkv, void *scratch, const floatX *dout, const floatX *qkv,
                        const floatX *out, const void *saved, int B, int T, int NH, int HS);

#ifdef __cplusplus
}
#endif
#endif
