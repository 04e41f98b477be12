// graph.h: a piece of device work recorded once and replayed in one launch (generation's
// decode step: some 150 small kernels, whose launch cost would otherwise be most of the step).
//   runtime/graph.c   the CPU: no launch cost to save, a "graph" is the call itself
//   runtime/graph.cu  CUDA: a CUDA graph captured on cuda_stream
#ifndef RUNTIME_GRAPH_H
#define RUNTIME_GRAPH_H

#ifdef __cplusplus
extern "C" {
#endif

// Runs fn(ctx), which must launch the same work with the same arguments at every call. On
// CUDA the first call runs it (lazy set-up such as cuBLASLt plans happens then), the second
// captures it into a CUDA graph on cuda_stream, and later calls launch that graph in one go;
// CUDA_GRAPHS=0 in the environment turns graphs off. On the CPU it calls fn. *graph starts
// NULL; device_graph_free(NULL) does nothing.
typedef struct DeviceGraph DeviceGraph;
void device_graph_run(DeviceGraph **graph, void (*fn)(void *ctx), void *ctx);
void device_graph_free(DeviceGraph *graph);

#ifdef __cplusplus
}
#endif
#endif
