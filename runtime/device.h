// device.h: the runtime's C API: the device the layers run on, the memory their tensors live
// in, copies and conversions, and floatX, the storage type of those tensors.
//
// One header, two implementations chosen at build time (BACKEND=cpu|cuda):
//   runtime/device_cpu.c  the CPU: host memory, with the accounting the CUDA backend keeps
//   runtime/device.cu     CUDA: the current GPU, its one stream, the cuBLAS(Lt) handles
// Every pointer argument is device memory of the backend (host memory on the CPU).
// The operations (layers/, attention/) stand on this header; it includes nothing of theirs,
// and neither does anything else in runtime/.
#ifndef RUNTIME_DEVICE_H
#define RUNTIME_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// floatX: the storage type of parameters, activations and their gradients.
#if defined(BACKEND_CUDA)
typedef uint16_t floatX;   // bf16 bits; the kernels reinterpret them as __nv_bfloat16
#define FLOATX_NAME "bf16"
#else
typedef float floatX;
#define FLOATX_NAME "fp32"
#endif

// ----------------------------------------------------------------------------------------
// backend and device

const char *backend_name(void);            // "cpu" or "cuda"
// Sets up the backend (CUDA: picks the device, creates cuBLAS handles). Returns 0 on success;
// on failure says why (a note on stderr: "no CUDA device") and returns -1. Safe to call again.
int backend_init(void);
void backend_describe(char *buf, size_t n); // one line: CPU threads, or GPU name and memory
size_t device_memory_total(void);           // bytes the device has (CPU: physical RAM)
size_t device_memory_free(void);            // bytes free on it now (CPU: free physical RAM)
// The device's dense peak rate for floatX matrix products, in FLOP/s, from the vendor's
// datasheet (the training step's MFU is measured against it), and where it comes from: 0 and
// "" for a device the table does not know (and on the CPU, whose rate depends on its cores).
double device_peak_flops(const char **source);
// Bytes the backend allocates for itself, once, in backend_init: CUDA's cuBLAS(Lt) workspace,
// shared by every GEMM of the cuBLAS and cuBLASLt handles (the matmuls and naive attention's
// batched GEMMs), so it never grows and never moves; 0 on the CPU. The memory reports list it.
size_t backend_workspace_size(void);

// ----------------------------------------------------------------------------------------
// memory and copies

// dev_malloc never returns NULL: when the device is out of memory it prints how many bytes
// were asked for, how many are free and in use, and the caller's `what`, then exits(1).
void *dev_malloc(size_t bytes, const char *what);
// as dev_malloc, but returns NULL when the device is out of memory, for a caller who can say
// what would fit (gpt2.c's activations)
void *dev_try_malloc(size_t bytes);
void dev_free(void *p);
void dev_memset_zero(void *p, size_t bytes);
void dev_upload(void *dst, const void *src_host, size_t bytes);     // host -> device
// host -> device in stream order, without waiting for the device: src is copied at once into
// pinned memory the runtime keeps (so the caller may reuse it on return), and the device copies
// it from there when its stream reaches the copy. For what a training step uploads (tokens), so
// that the step never stops the host to wait for the device (CPU: a plain copy).
void dev_upload_async(void *dst, const void *src_host, size_t bytes);
void dev_download(void *dst_host, const void *src, size_t bytes);   // device -> host
// Host memory the device writes directly, without a copy (CUDA: pinned and mapped into the
// device's address space, the same pointer on both; CPU: plain memory): for results the host
// reads while the device goes on (greedy decoding's tokens, gpt2_decode.c). Read what a kernel
// wrote there only after waiting for a DevEvent recorded after that kernel. dev_host_alloc never
// returns NULL: it dies naming `what`.
void *dev_host_alloc(size_t bytes, const char *what);
void dev_host_free(void *p);
// A point in the device's work: dev_event_record(e) marks everything launched so far;
// dev_event_wait(e) returns once the device has done it (at once if e was never recorded). On
// the CPU work is done when it is launched, and both return at once.
typedef struct DevEvent DevEvent;
DevEvent *dev_event_new(void);
void dev_event_record(DevEvent *e);
void dev_event_wait(DevEvent *e);
void dev_event_free(DevEvent *e);   // NULL: nothing
void dev_copy(void *dst, const void *src, size_t bytes);            // device -> device
void dev_synchronize(void);
// Branches: work that may run beside the main stream's (the decode step's parts of a batch).
// dev_branch_begin() sends what is launched next to a stream of its own, after everything
// launched so far on the main stream; dev_branch_end() sends what follows back to the main
// stream, to run beside the branch; dev_branch_join() makes the main stream wait for every
// branch ended since the last join. Up to DEV_MAX_BRANCHES at once, launched into one at a time.
// Inside a CUDA graph's capture they become branches of the graph. They share the cuBLAS(Lt)
// workspace, so only one stream at a time may run its GEMMs. On the CPU, no-ops (in order).
#define DEV_MAX_BRANCHES 3
void dev_branch_begin(void);
void dev_branch_end(void);
void dev_branch_join(void);
size_t dev_bytes_in_use(void);   // bytes currently allocated through dev_malloc
size_t dev_bytes_peak(void);     // most bytes ever allocated at once through dev_malloc

// fp32 <-> floatX conversions between a host float array and a device floatX array
void floatX_upload(floatX *dst, const float *src_host, size_t n);
void floatX_download(float *dst_host, const floatX *src, size_t n);
// fp32 <-> floatX conversion between two device arrays (used for master weights)
void floatX_from_float(floatX *dst, const float *src, size_t n);
// read back one fp32 value from device memory (grad_sumsq's result, a loss)
float dev_read_float(const float *p);

#ifdef __cplusplus
}
#endif
#endif
