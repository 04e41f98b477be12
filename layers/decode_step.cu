// decode_step.cu: the whole decode step at a few rows as ONE persistent kernel (layers.h:
// decode_step_persistent).
//
// Why: the per-call path (fused.cu, decode_attention.cu) is 61 kernels a step at d12, and on
// the H200 each costs ~4 us even with PDL and inside a CUDA graph (the wait for the whole
// previous grid, the launch, the tail), ~250 us a token where the 249 MB of weights take
// ~60 us. Here one grid of co-resident blocks (kStepBlocksPerSM per SM, never more than fit)
// walks the phases of every layer: LN1 + QKV GEMV; attention (cache write included); attproj
// GEMV + residual; LN2 + FC GEMV + GELU; FCproj GEMV + residual; then LN_f + LM head + argmax.
// Between two phases a grid barrier (an arrival counter and a generation in the fused
// scratch) replaces the kernel boundary. Each phase runs the very block bodies of the
// per-call kernels (gemv_block, decode_block), whose first weights (or cache rows) are
// issued BEFORE the barrier: they do not depend on the phase before, so DRAM latency hides
// behind the barrier as it hides behind PDL's wait in the per-call kernels.
// The same bodies with the same per-lane work give the same bits as the per-call path: a
// GEMV output depends only on its row and the lane split of K, not on the grid; the attention
// uses the per-call layout (decode_step_args); the argmax keeps its order of ties.
//
// Co-residency (without it a barrier deadlocks): the grid is at most the occupancy calculator's
// blocks per SM times the SM count, and the launch is cooperative, so the runtime refuses a
// grid that would not fit instead of hanging (the attribute is valid in graph kernel nodes, so
// the step is captured as before). The launch is not PDL: all SMs are free when it starts.
#include <string.h>

#include "decode_attention.cuh"
#include "gemv.cuh"

namespace {

// blocks per SM: two blocks of 12 x 16-byte loads a lane put 6.3 MB in flight at a barrier,
// twice the ~3 MB the H200 needs in flight for full bandwidth (4.2 TB/s x ~0.7 us), while
// every extra block is one more arrival at each of the 60 barriers. The LM head's partials in
// the scratch are sized for kLogitsBlocksPerSM blocks per SM.
constexpr int kStepBlocksPerSM = 2;
static_assert(kStepBlocksPerSM <= kLogitsBlocksPerSM, "the argmax partials are sized for kLogitsBlocksPerSM");
static_assert(kThreads == kSplitThreads, "one block size for the GEMV and the attention phases");
constexpr int kStepGroups = 8;   // the attention's lanes per cache row: HS in (32, 64], GPT-2's 64

// the fused scratch's first 256 bytes (fused.cu): the LM head's counter at 0, the barrier here
constexpr size_t kArrivedOffset = 64, kGenerationOffset = 128;

__device__ __forceinline__ unsigned load_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// A barrier of all gridDim.x blocks. arrived counts the blocks at the current barrier and is
// back at 0 once all are there (the last resets it); generation counts barriers passed (it
// runs freely across steps: a waiter only looks for a change). Memory order: bar.sync orders
// the block's writes before thread 0's fence (release at gpu scope), the arrival is an
// atomic; the last block fences (acquiring every arrival's release) and bumps generation;
// waiters spin with ld.acquire, then bar.sync hands the order to the block's threads. Data
// other blocks wrote is then read through L2 (ldcg) by the phase bodies, never via
// ld.global.nc.
struct GridBarrier {
    unsigned *arrived, *generation;

    __device__ void sync() const {
        __syncthreads();
        if (threadIdx.x == 0) {
            // read before arriving: it cannot move before every block, this one included, arrives
            const unsigned gen = load_acquire(generation);
            __threadfence();
            if (atomicAdd(arrived, 1u) == gridDim.x - 1) {
                atomicExch(arrived, 0u);
                __threadfence();
                atomicAdd(generation, 1u);
            } else {
                while (load_acquire(generation) == gen) {
                }
            }
        }
        __syncthreads();
    }
};

// the phase bodies' wait(): the barrier after the phase before; none before the first phase,
// whose input (the embedding) a kernel before this one wrote
struct PhaseWait {
    GridBarrier barrier;
    bool first;
    __device__ void operator()() const {
        if (!first) barrier.sync();
    }
};

struct StepArgs {
    DecodeStep s;
    DecodeArgs attention;   // layer 0's; layer l's caches are l * cache_layer elements further
    size_t cache_layer;     // N * maxT * C: one layer of the cache
    GridBarrier barrier;
    int logits_max_blocks;  // the LM head's partials are laid out for this many blocks
};

// one GEMV phase: every block of the grid takes its tiles (gemv_block); not inlined, so that
// the phases share one copy of each body
template <int NR, int KC, bool LN>
__device__ __noinline__ void gemv_phase(const GemvArgs a, PhaseWait wait) {
    gemv_block<NR, KC, LN>(a, wait);
}

// the attention phase: the grid walks the flash-decoding blocks (split fastest, then head,
// then sequence), each block waiting at the barrier once, after its first block's cache rows
// are in flight; a block with none still takes part in the barrier
__device__ __noinline__ void attention_phase(const DecodeArgs a, PhaseWait barrier_wait) {
    bool waited = false;
    auto wait = [&] {
        if (!waited) barrier_wait();
        waited = true;
    };
    const int blocks = a.splits * a.NH * a.B;
    for (int i = blockIdx.x; i < blocks; i += gridDim.x) {
        decode_block<kStepGroups>(a, i % a.splits, i / a.splits % a.NH, i / (a.splits * a.NH), wait);
        __syncthreads();   // the next block's shared memory is this one's
    }
    wait();
}

// The step: x (N, C) the embedded tokens in, logits (N, Vp) and argmax (N) out; the residual
// stream updated in place in x, as gpt2_decode.c's per-call loop does. NR: N rounded up to a
// power of two. Layer l's parameters are l * their per-layer size past layer 0's (the model's
// (L, ...) tensors, checkpoint.h).
template <int NR>
__global__ void __launch_bounds__(kThreads, kStepBlocksPerSM) decode_step_kernel(const StepArgs a) {
    const DecodeStep &s = a.s;
    const size_t C = s.C;
    const int N = s.N, KC4 = gemv_chunks(4 * s.C);   // fcproj's K = 4C; every other K is C <= 768
    PhaseWait wait = {a.barrier, true};
    for (int l = 0; l < s.L; l++) {
        const bf16 *ln1w = CBF(s.ln1w) + l * C, *ln1b = CBF(s.ln1b) + l * C;
        const bf16 *qkvw = CBF(s.qkvw) + l * 3 * C * C, *qkvb = CBF(s.qkvb) + l * 3 * C;
        const bf16 *attprojw = CBF(s.attprojw) + l * C * C, *attprojb = CBF(s.attprojb) + l * C;
        const bf16 *ln2w = CBF(s.ln2w) + l * C, *ln2b = CBF(s.ln2b) + l * C;
        const bf16 *fcw = CBF(s.fcw) + l * 4 * C * C, *fcb = CBF(s.fcb) + l * 4 * C;
        const bf16 *fcprojw = CBF(s.fcprojw) + l * 4 * C * C, *fcprojb = CBF(s.fcprojb) + l * C;
        // attention block: x += attproj(attention(qkv(ln1(x))))
        gemv_phase<NR, 3, true>(layernorm_matmul_args(BF(s.qkv), CBF(s.x), ln1w, ln1b, qkvw, qkvb, N, C, 3 * C, false), wait);
        wait.first = false;
        DecodeArgs att = a.attention;
        att.kcache += l * a.cache_layer;
        att.vcache += l * a.cache_layer;
        attention_phase(att, wait);
        gemv_phase<NR, 3, false>(matmul_residual_args(BF(s.x), CBF(s.atty), attprojw, attprojb, N, C, C), wait);
        // MLP block: x += fcproj(gelu(fc(ln2(x))))
        gemv_phase<NR, 3, true>(layernorm_matmul_args(BF(s.fch_gelu), CBF(s.x), ln2w, ln2b, fcw, fcb, N, C, 4 * C, true), wait);
        const GemvArgs fcproj = matmul_residual_args(BF(s.x), CBF(s.fch_gelu), fcprojw, fcprojb, N, 4 * C, C);
        if (KC4 == 3) gemv_phase<NR, 3, false>(fcproj, wait);
        else gemv_phase<NR, 12, false>(fcproj, wait);
    }
    gemv_phase<NR, 3, true>(lm_head_args(BF(s.logits), s.argmax, s.fused_scratch, CBF(s.x), CBF(s.lnfw),
                                         CBF(s.lnfb), CBF(s.wte), N, C, s.V, s.Vp, a.logits_max_blocks),
                            wait);
}

// DECODE_PERSISTENT=0 turns the persistent step off (read once: a benchmark switch, the
// per-call fused path in the same binary for a same-run baseline)
bool persistent_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) {
        const char *env = getenv("DECODE_PERSISTENT");
        enabled = !(env && strcmp(env, "0") == 0);
    }
    return enabled;
}

// the shapes the kernel is written for; anything else takes the per-call path
bool step_fits(const DecodeStep *s) {
    const void *aligned[] = {s->ln1w, s->ln1b, s->qkvw, s->attprojw, s->ln2w, s->ln2b, s->fcw,
                             s->fcprojw, s->lnfw, s->lnfb, s->wte, s->x, s->qkv, s->atty,
                             s->fch_gelu, s->kcache, s->vcache};
    for (const void *p : aligned)
        if (!is_aligned16(p)) return false;
    // C: a multiple of 8 (every layer's tensors 16-byte aligned as layer 0's), at most 768
    // (K = C in one pass at KC = 3, K = 4C at most kMaxK); the attention's G = 8 (HS 40..64)
    return persistent_enabled() && fused_enabled() && s->N >= 1 && s->N <= FUSED_MAX_ROWS &&
           s->C % 8 == 0 && s->C <= 768 && s->C % s->NH == 0 && (s->C / s->NH) % 8 == 0 &&
           decode_groups(s->C / s->NH) == kStepGroups;
}

// the grid for NR: kStepBlocksPerSM per SM, fewer if fewer fit (asked once, on the first call,
// which runs before any graph capture: runtime/graph.cu); 0 if none fits
template <int NR>
int step_grid(size_t smem) {
    static int blocks = -1;
    if (blocks < 0) {
        CUDA_CHECK(cudaFuncSetAttribute(decode_step_kernel<NR>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        FUSED_MAX_ROWS * kMaxK * (int)sizeof(bf16)));
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_step_kernel<NR>, kThreads, smem));
        blocks = (per_sm < kStepBlocksPerSM ? per_sm : kStepBlocksPerSM) * cuda_num_sms;
    }
    return blocks;
}

template <int NR>
bool launch_step(const StepArgs &a) {
    // dynamic shared memory: the largest phase's N rows of K = 4C (fcproj's input); the
    // occupancy is asked for the most any step takes (FUSED_MAX_ROWS rows of kMaxK), so one
    // answer serves every shape, and the grid fits whatever the launch asks
    const size_t smem = (size_t)a.s.N * 4 * a.s.C * sizeof(bf16);
    const int blocks = step_grid<NR>(FUSED_MAX_ROWS * kMaxK * sizeof(bf16));
    if (blocks == 0) return false;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeCooperative;
    attribute.val.cooperative = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = blocks;
    config.blockDim = kThreads;
    config.dynamicSmemBytes = smem;
    config.stream = cuda_stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&config, decode_step_kernel<NR>, a));
    return true;
}

}  // namespace

int decode_step_persistent(const DecodeStep *s) {
    if (!step_fits(s)) return 0;
    StepArgs a = {};
    a.s = *s;
    a.attention = decode_step_args(s->atty, s->att_scratch, s->qkv, s->kcache, s->vcache, s->pos,
                                   s->N, s->maxT, s->NH, s->C / s->NH);
    a.cache_layer = (size_t)s->N * s->maxT * s->C;
    a.barrier.arrived = (unsigned *)((char *)s->fused_scratch + kArrivedOffset);
    a.barrier.generation = (unsigned *)((char *)s->fused_scratch + kGenerationOffset);
    a.logits_max_blocks = kLogitsBlocksPerSM * cuda_num_sms;
    bool launched;
    if (s->N <= 1) launched = launch_step<1>(a);
    else if (s->N <= 2) launched = launch_step<2>(a);
    else if (s->N <= 4) launched = launch_step<4>(a);
    else launched = launch_step<8>(a);
    return launched;
}
