// fused.cu: the decode step's fused calls on CUDA (layers.h): at N <= FUSED_MAX_ROWS rows, one
// GEMV kernel each; with more rows, the plain layers (fused_plain.h: cuBLASLt's tensor-core
// GEMMs, which win once a weight row serves many input rows).
//
// Why a GEMV of its own: at batch 1 a decode step reads 249 MB of weights (60 us at the H200's
// ~4.2 TB/s) but took 504 us as some 150 kernels of a few microseconds each. Each matrix of
// GPT-2 124M is 1.2-4.7 MB: less than the bytes the GPU must have in flight to reach full
// bandwidth (4.2 TB/s x ~0.7 us of DRAM latency, ~3 MB), so one such kernel is bound by a few
// memory latencies and its launch, not by bandwidth. Hence:
//   - each kernel is the whole of its layers (layernorm + matmul + bias [+ GELU] [+ residual]),
//     so a layer is four of these and the attention (decode_attention.cu);
//   - every lane issues all its weight loads at once (R rows x KC chunks of 16 bytes, about
//     12 loads), so the whole matrix is in flight in one round trip;
//   - those loads are issued before pdl_wait (the weights do not depend on the kernel before):
//     with programmatic dependent launch (runtime/cuda_common.cuh) the weights stream while
//     the previous kernel finishes, and the launch gap is hidden.
// The block: 4 warps; warp w owns R consecutive weight rows (OC), its lanes split the K
// columns in 16-byte chunks (chunk c = j * 32 + lane, j < KC), so a warp reads each row with
// fully coalesced 512-byte loads. The N input rows are staged in shared memory as bf16 (N, K),
// layer-normed there when the call has a layernorm; every weight chunk is used for all N rows.
// fp32 accumulation, a warp shuffle reduction per (row, input row), then one lane per output
// writes it: lane = r * NR + n. R * KC = 12 keeps the weight registers at 48 whatever K:
// KC = 3 (K <= 768), R = 4; KC = 12 (K <= 3072), R = 1. Larger K goes the plain way.
//
// Numerics: the layernorm is layernorm.cu's computation in the same order (the same bits);
// the matmul output is rounded to bf16 before GELU and before the residual add, as the plain
// layers round it; only the matmul's summation order differs from cuBLASLt's.
//
// The LM head (Vp = 50304 rows of wte) is the same kernel with a grid-stride loop over row
// tiles; greedy decoding's argmax rides in its epilogue: each block keeps the best (value,
// index) per input row, the last block to finish (a counter in the scratch elects it) reduces
// the blocks' bests, so greedy decoding needs no separate argmax kernel.
#include <string.h>

#include "fused_plain.h"
#include "gemv.cuh"

// the fused path is taken for a shape it handles, unless DECODE_FUSED=0 (a benchmark switch:
// the plain layers in the same binary, for a same-run baseline)
bool fused_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) {
        const char *env = getenv("DECODE_FUSED");
        enabled = !(env && strcmp(env, "0") == 0);
    }
    return enabled;
}

namespace {

// one GEMV call: its weights in flight before PDL's wait (launch_pdl)
template <int NR, int KC, bool LN>
__global__ void __launch_bounds__(kThreads, 1) gemv_kernel(const GemvArgs a) {
    gemv_block<NR, KC, LN>(a, [] {
        pdl_launch_dependents();
        pdl_wait();
    });
}

bool gemv_fits(int N, int K, const void *inp, const void *weight) {
    return fused_enabled() && N >= 1 && N <= FUSED_MAX_ROWS && K % 8 == 0 && K <= kMaxK &&
           is_aligned16(inp) && is_aligned16(weight);
}

template <int NR, int KC>
void launch_rows_chunks(const GemvArgs &a, bool ln, int blocks) {
    // dynamic shared memory up to 8 * 3072 * 2 = 48 KiB, which with the static arrays is past
    // the 48 KiB a kernel gets without asking: asked for once per kernel, on the first call
    // (a decode step's first call runs before its graph capture, runtime/graph.cu)
    constexpr int kMaxSmem = FUSED_MAX_ROWS * kMaxK * sizeof(bf16);
    static bool asked[2] = {false, false};
    void (*kernel)(GemvArgs) = ln ? gemv_kernel<NR, KC, true> : gemv_kernel<NR, KC, false>;
    if (!asked[ln]) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem));
        asked[ln] = true;
    }
    launch_pdl(kernel, blocks, kThreads, (size_t)a.N * a.K * sizeof(bf16), a);
}

template <int NR>
void launch_rows(const GemvArgs &a, bool ln, int max_blocks) {
    const int KC = gemv_chunks(a.K);
    const int rows_per_block = kWarps * (kLoadsPerLane / KC);
    int blocks = ceil_div(a.OC, rows_per_block);
    if (blocks > max_blocks) blocks = max_blocks;
    if (KC == 3) launch_rows_chunks<NR, 3>(a, ln, blocks);
    else launch_rows_chunks<NR, 12>(a, ln, blocks);
}

void gemv(const GemvArgs &a, int max_blocks) {
    const bool ln = a.lnw != nullptr;
    if (a.N <= 1) launch_rows<1>(a, ln, max_blocks);
    else if (a.N <= 2) launch_rows<2>(a, ln, max_blocks);
    else if (a.N <= 4) launch_rows<4>(a, ln, max_blocks);
    else launch_rows<8>(a, ln, max_blocks);
    LAUNCH_CHECK();
}

// the scratch: 256 bytes of counters (the LM head's at byte 0; the persistent step's grid
// barrier at bytes 64 and 128, decode_step.cu), the LM head's per-block bests, then the plain
// calls'
size_t logits_partials_bytes(int N) {
    return plain_align256((size_t)kLogitsBlocksPerSM * cuda_num_sms * N * (sizeof(float) + sizeof(int)));
}

}  // namespace

size_t fused_scratch_size(int N, int C, int OC) {
    ensure_backend();
    return 256 + logits_partials_bytes(N) + plain_scratch_size(N, C, OC);
}

static PlainScratch plain_part(void *scratch, int N, int C) {
    return plain_scratch((char *)scratch + 256 + logits_partials_bytes(N), N, C);
}

void layernorm_matmul_forward(floatX *out, void *scratch, const floatX *inp, const floatX *lnw,
                              const floatX *lnb, const floatX *weight, const floatX *bias, int N,
                              int C, int OC, int gelu) {
    if (!gemv_fits(N, C, inp, weight) || !is_aligned16(lnw) || !is_aligned16(lnb)) {
        plain_layernorm_matmul(out, plain_part(scratch, N, C), inp, lnw, lnb, weight, bias, N, C,
                               OC, gelu);
        return;
    }
    const GemvArgs a = layernorm_matmul_args(BF(out), CBF(inp), CBF(lnw), CBF(lnb), CBF(weight),
                                             CBF(bias), N, C, OC, gelu != 0);
    gemv(a, 1 << 30);
}

void matmul_residual_forward(floatX *residual, void *scratch, const floatX *inp,
                             const floatX *weight, const floatX *bias, int N, int C, int OC) {
    if (!gemv_fits(N, C, inp, weight)) {
        plain_matmul_residual(residual, plain_part(scratch, N, C), inp, weight, bias, N, C, OC);
        return;
    }
    const GemvArgs a = matmul_residual_args(BF(residual), CBF(inp), CBF(weight), CBF(bias), N, C, OC);
    gemv(a, 1 << 30);
}

void lm_head_forward(floatX *logits, int *argmax, void *scratch, const floatX *inp,
                     const floatX *lnw, const floatX *lnb, const floatX *wte, int N, int C, int V,
                     int Vp) {
    if (!gemv_fits(N, C, inp, wte) || !is_aligned16(lnw) || !is_aligned16(lnb)) {
        plain_lm_head(logits, argmax, plain_part(scratch, N, C), inp, lnw, lnb, wte, N, C, V, Vp);
        return;
    }
    const int max_blocks = kLogitsBlocksPerSM * cuda_num_sms;
    const GemvArgs a = lm_head_args(BF(logits), argmax, scratch, CBF(inp), CBF(lnw), CBF(lnb),
                                    CBF(wte), N, C, V, Vp, max_blocks);
    gemv(a, max_blocks);
}
