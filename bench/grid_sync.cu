// grid_sync.cu: what a dependency between two phases of a decode step costs on this GPU, the
// number that decides between a chain of kernels and one persistent kernel (issue 20;
// docs/PERF.md, "Persistent decode kernel": the first persistent step lost, its grid barrier
// measured about 6 us a phase against 4 for a kernel boundary under PDL).
//
// Every form runs PHASES phases of the same work: each block writes one value, then (after the
// dependency) reads every block's value of the phase before and sums them, as a GEMV phase
// reads the whole vector the phase before wrote. Reported: us a phase, over PHASES phases,
// the best of three runs.
//   kernels, PDL     one kernel a phase, launched with programmatic dependent launch, recorded
//                    in a CUDA graph (the decode step's way today)
//   kernels          the same without PDL
//   persistent, X    one kernel, its blocks meeting at a grid barrier between phases, barrier X:
//     none           no barrier at all (the loop's own cost; reads whatever is there)
//     counter        one arrival counter; thread 0 of each block adds (release) and spins on
//                    an acquire load until it reaches the phase's target
//     counter+sleep  the same, with __nanosleep(32) between polls (less traffic on the line)
//     tree           16 group counters; the last arrival of each group adds to the top one
//     flags          one flag per block, stored (release) with the phase number; warp 0 of
//                    each block polls all of them (acquire) until each has reached the phase
//     cg             cooperative_groups::this_grid().sync() (a cooperative launch)
// usage: grid_sync [BLOCKS_PER_SM (1)] [PHASES (2000)]   (bench/grid_sync.mk builds it)
// Measured on an H200 (docs/PERF.md, eleventh session, call 2): kernels with PDL 1.10 us a
// phase, the best barrier 1.40 (counter with sleep), cooperative groups 1.57.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "../attention/flash_tile.cuh"   // load_acquire, add_release
#define BENCH_NAME "grid_sync"
#include "standalone.cuh"   // CHECK, bench_device, atom_acq_rel, pdl_config, capture_graph, best_of_3

namespace cg = cooperative_groups;

enum { THREADS = 128, GROUPS = 16 };
enum Barrier { B_NONE, B_COUNTER, B_COUNTER_SLEEP, B_TREE, B_FLAGS, B_CG, B_COUNT };
static const char *barrier_names[B_COUNT] = {"none", "counter", "counter+sleep", "tree", "flags", "cg"};

__device__ __forceinline__ void st_release(unsigned *p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// the phase's work: write this block's value, read all of the phase before's
__device__ __forceinline__ float phase_work(float *data, int phase, float acc) {
    const int nb = gridDim.x;
    const float *prev = data + (size_t)((phase + 1) & 1) * nb;
    float s = 0.0f;
    for (int i = threadIdx.x; i < nb; i += blockDim.x) s += __ldcg(prev + i);
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) __stcg(data + (size_t)(phase & 1) * nb + blockIdx.x, acc + s * 1e-9f + 1.0f);
    return acc + s;
}

// sync[0]: the counter (or the tree's top), sync[1..GROUPS]: the tree's groups, flags: nb
template <int KIND>
__global__ void __launch_bounds__(THREADS) persistent(float *data, unsigned *sync, unsigned *flags,
                                                      int phases, float *sink) {
    const unsigned nb = gridDim.x;
    float acc = 0.0f;
    for (int phase = 0; phase < phases; phase++) {
        acc = phase_work(data, phase, acc);
        const unsigned target = (unsigned)(phase + 1);
        if (KIND == B_CG) {
            cg::this_grid().sync();
        } else if (KIND == B_FLAGS) {
            __syncthreads();
            if (threadIdx.x == 0) st_release(flags + blockIdx.x, target);
            if (threadIdx.x < 32) {
                bool done;
                do {
                    done = true;
                    for (unsigned i = threadIdx.x; i < nb; i += 32) done &= load_acquire(flags + i) >= target;
                } while (!__all_sync(0xffffffffu, done));
            }
            __syncthreads();
        } else if (KIND != B_NONE) {
            __syncthreads();
            if (threadIdx.x == 0) {
                if (KIND == B_TREE) {
                    const unsigned g = blockIdx.x % GROUPS;
                    const unsigned size = nb / GROUPS + (g < nb % GROUPS ? 1 : 0);
                    const unsigned old = atom_acq_rel(sync + 1 + g, 1);
                    if (old + 1 == target * size) add_release(sync, 1);
                    while (load_acquire(sync) < target * GROUPS) {
                    }
                } else {
                    add_release(sync, 1);
                    while (load_acquire(sync) < target * nb) {
                        if (KIND == B_COUNTER_SLEEP) __nanosleep(32);
                    }
                }
            }
            __syncthreads();
        }
    }
    if (threadIdx.x == 0 && acc == -1.0f) *sink = acc;   // keep the work
}

// one phase as a kernel of its own
__global__ void __launch_bounds__(THREADS) one_phase(float *data, int phase) {
#if __CUDA_ARCH__ >= 900   // PDL (before sm_90 the launches serialise and these are not needed)
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    phase_work(data, phase, 0.0f);
}

static float time_persistent(int kind, int blocks, int phases, float *data, unsigned *sync,
                             unsigned *flags, float *sink, cudaStream_t stream) {
    static void (*const kernels[B_COUNT])(float *, unsigned *, unsigned *, int, float *) = {
        persistent<B_NONE>, persistent<B_COUNTER>, persistent<B_COUNTER_SLEEP>,
        persistent<B_TREE>, persistent<B_FLAGS>, persistent<B_CG>};
    void *args[] = {&data, &sync, &flags, &phases, &sink};
    auto prepare = [&]() {   // the barriers' counters and flags start from zero
        CHECK(cudaMemsetAsync(sync, 0, (1 + GROUPS) * sizeof(unsigned), stream));
        CHECK(cudaMemsetAsync(flags, 0, blocks * sizeof(unsigned), stream));
    };
    return best_of_3(stream, phases, prepare, [&]() {
        if (kind == B_CG)
            CHECK(cudaLaunchCooperativeKernel((void *)kernels[kind], blocks, THREADS, args, 0, stream));
        else
            CHECK(cudaLaunchKernel((void *)kernels[kind], blocks, THREADS, args, 0, stream));
    });
}

static float time_kernels(bool pdl, int blocks, int phases, float *data, cudaStream_t stream) {
    cudaGraphExec_t exec = capture_graph(stream, [&]() {
        for (int phase = 0; phase < phases; phase++) {
            cudaLaunchAttribute attr;
            const cudaLaunchConfig_t config = pdl_config(blocks, THREADS, 0, stream, &attr, pdl);
            CHECK(cudaLaunchKernelEx(&config, one_phase, data, phase));
        }
    });
    const float us = best_of_3(stream, phases, []() {},
                               [&]() { CHECK(cudaGraphLaunch(exec, stream)); });
    CHECK(cudaGraphExecDestroy(exec));
    return us;
}

int main(int argc, char **argv) {
    const int per_sm = argc > 1 ? atoi(argv[1]) : 1;
    const int phases = argc > 2 ? atoi(argv[2]) : 2000;
    if (per_sm < 1 || per_sm > 8 || phases < 1) {
        fprintf(stderr, "usage: grid_sync [BLOCKS_PER_SM 1..8] [PHASES >= 1]\n");
        return 2;
    }
    cudaDeviceProp prop;
    if (!bench_device(&prop)) return 0;
    const int blocks = prop.multiProcessorCount * per_sm;
    float *data, *sink;
    unsigned *sync, *flags;
    CHECK(cudaMalloc(&data, 2 * blocks * sizeof(float)));
    CHECK(cudaMalloc(&sink, sizeof(float)));
    CHECK(cudaMalloc(&sync, (1 + GROUPS) * sizeof(unsigned)));
    CHECK(cudaMalloc(&flags, blocks * sizeof(unsigned)));
    CHECK(cudaMemset(data, 0, 2 * blocks * sizeof(float)));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    printf("%s, %d blocks of %d threads (%d an SM), %d phases: us a phase\n", prop.name, blocks,
           THREADS, per_sm, phases);
    printf("| form | us a phase |\n|---|--:|\n");
    printf("| kernels, PDL, graph | %.3f |\n", time_kernels(true, blocks, phases, data, stream));
    printf("| kernels, graph | %.3f |\n", time_kernels(false, blocks, phases, data, stream));
    for (int kind = 0; kind < B_COUNT; kind++)
        printf("| persistent, %s | %.3f |\n", barrier_names[kind],
               time_persistent(kind, blocks, phases, data, sync, flags, sink, stream));
    return 0;
}
