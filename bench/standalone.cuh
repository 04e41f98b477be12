// standalone.cuh: what the standalone CUDA probes of bench/ share (grid_sync, wgmma_rate,
// cross_sum: programs of one file each, linked with nothing of the runtime): a checked CUDA call
// that names the program, the device or a SKIP line, the last-block counter's atomic, a launch
// configuration with programmatic dependent launch, a graph captured from a stream, and the best
// of three timed runs.
#pragma once

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

// a CUDA call that must succeed, or the program stops naming it (BENCH_NAME: the program's name,
// #defined before this header)
#define CHECK(x)                                                                          \
    do {                                                                                  \
        cudaError_t e = (x);                                                              \
        if (e != cudaSuccess) {                                                           \
            fprintf(stderr, BENCH_NAME ": %s: %s (line %d)\n", #x, cudaGetErrorString(e), \
                    __LINE__);                                                            \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

// device 0's properties, or false after printing "SKIP: no GPU" (the probes exit 0 without one)
static bool bench_device(cudaDeviceProp *prop) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("SKIP: no GPU\n");
        return false;
    }
    CHECK(cudaGetDeviceProperties(prop, 0));
    return true;
}

// atom.acq_rel.gpu add: the count that elects a last block or ends a barrier (the runtime's
// atomic_add_acq_rel, runtime/cuda_common.cuh, for programs that link nothing of it)
__device__ __forceinline__ unsigned atom_acq_rel(unsigned *p, unsigned v) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

// a launch of grid x block on stream, programmatic dependent launch allowed or not (the
// attribute lives in *attr, which must outlive the launch call)
static cudaLaunchConfig_t pdl_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                     cudaLaunchAttribute *attr, bool pdl) {
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
    return config;
}

// what queue() queues on stream, captured as one graph and instantiated
template <typename Queue>
static cudaGraphExec_t capture_graph(cudaStream_t stream, Queue queue) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    queue();
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphDestroy(graph));
    return exec;
}

// us a phase: the best of three runs of launch() (which queues one run of `phases` phases on
// stream), timed by events, each after prepare() (queued outside the timed part)
template <typename Prepare, typename Launch>
static float best_of_3(cudaStream_t stream, int phases, Prepare prepare, Launch launch) {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    float best = 1e30f;
    for (int rep = 0; rep < 3; rep++) {
        prepare();
        CHECK(cudaEventRecord(start, stream));
        launch();
        CHECK(cudaEventRecord(stop, stream));
        CHECK(cudaEventSynchronize(stop));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (ms < best) best = ms;
    }
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    return best * 1000.0f / phases;
}
