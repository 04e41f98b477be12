// graph.cu: replaying a decode step as one CUDA graph. A decode step at batch 1 is some 150
// small kernels; launched one by one, the CPU's launch cost (a few microseconds each) would
// be most of the step. Captured once into a graph, the whole step is one launch.
//
// The first call runs fn directly, so that everything lazy (cuBLASLt plans) is set up outside
// the capture; the second call captures and instantiates; later calls only
// launch. fn must therefore launch the same work with the same arguments every time.
#include <string.h>

#include "cuda_common.cuh"
#include "graph.h"

struct DeviceGraph {
    int calls;                 // calls so far
    cudaGraphExec_t exec;      // the instantiated graph, after the second call
};

static bool graphs_enabled(void) { return env_flag("CUDA_GRAPHS", 1); }

void device_graph_run(DeviceGraph **graph, void (*fn)(void *ctx), void *ctx) {
    if (!graphs_enabled()) {
        fn(ctx);
        return;
    }
    if (!*graph) {
        *graph = (DeviceGraph *)calloc(1, sizeof(DeviceGraph));
        if (!*graph) die("out of host memory for a CUDA graph");
    }
    DeviceGraph *g = *graph;
    if (g->exec) {
        CUDA_CHECK(cudaGraphLaunch(g->exec, cuda_stream));
        return;
    }
    if (g->calls++ == 0) {   // the warm-up run
        fn(ctx);
        return;
    }
    cudaGraph_t captured;
    CUDA_CHECK(cudaStreamBeginCapture(cuda_stream, cudaStreamCaptureModeThreadLocal));
    fn(ctx);
    CUDA_CHECK(cudaStreamEndCapture(cuda_stream, &captured));
    CUDA_CHECK(cudaGraphInstantiate(&g->exec, captured, 0));
    CUDA_CHECK(cudaGraphDestroy(captured));
    CUDA_CHECK(cudaGraphLaunch(g->exec, cuda_stream));
}

void device_graph_free(DeviceGraph *graph) {
    if (!graph) return;
    if (graph->exec) CUDA_CHECK(cudaGraphExecDestroy(graph->exec));
    free(graph);
}
