// cuda_common.cuh: what every CUDA source of the project shares: error checks that name the
// file and line (through die, utils.h), the one stream and cuBLAS handles, and bf16 helpers.
// Part of the runtime: it includes nothing of layers/ or attention/, which include it.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "../utils.h"
#include "device.h"

// storage type of floatX inside kernels (runtime/device.h spells it uint16_t for the C side)
typedef __nv_bfloat16 bf16;
#define BF(p) (reinterpret_cast<bf16 *>(p))
#define CBF(p) (reinterpret_cast<const bf16 *>(p))

[[noreturn]] void cuda_fail(cudaError_t err, const char *what, const char *file, int line);
[[noreturn]] void cublas_fail(cublasStatus_t status, const char *what, const char *file, int line);
// every CUDA runtime call: CUDA_CHECK(cudaMemcpy(...));
#define CUDA_CHECK(call)                                                     \
    do {                                                                     \
        cudaError_t err_ = (call);                                           \
        if (err_ != cudaSuccess) cuda_fail(err_, #call, __FILE__, __LINE__); \
    } while (0)
// every cuBLAS / cuBLASLt call
#define CUBLAS_CHECK(call)                                                             \
    do {                                                                               \
        cublasStatus_t st_ = (call);                                                   \
        if (st_ != CUBLAS_STATUS_SUCCESS) cublas_fail(st_, #call, __FILE__, __LINE__); \
    } while (0)
// after every kernel launch: LAUNCH_CHECK();
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

// Set up by backend_init (runtime/device.cu): everything runs on this one stream.
extern cudaStream_t cuda_stream;
extern cublasHandle_t cublas_handle;
extern cublasLtHandle_t cublaslt_handle;
extern void *cublaslt_workspace;          // for cuBLASLt heuristics, cublaslt_workspace_size bytes
extern size_t cublaslt_workspace_size;
extern int cuda_num_sms;
// backend_init, or die: for what needs the device set up (dev_malloc, the *_scratch_size
// functions, which size launches by cuda_num_sms)
void ensure_backend(void);

static inline int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

// ---- kernel helpers shared by the CUDA sources (runtime, layers, attention) -----------------

// 16-byte vector accesses need 16-byte aligned addresses: kernels pick their vector width with this
static inline bool is_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// sum and max over the 32 lanes of a warp, the result in every lane
__device__ __forceinline__ float warp_allreduce_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}
__device__ __forceinline__ float warp_allreduce_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

// VEC consecutive bf16 <-> VEC floats in one access (VEC = 8: 16 bytes, 4: 8 bytes, 2: 4 bytes, 1)
template <int VEC> struct BF16Raw;
template <> struct BF16Raw<8> { typedef int4 type; };
template <> struct BF16Raw<4> { typedef uint2 type; };
template <> struct BF16Raw<2> { typedef unsigned int type; };
template <> struct BF16Raw<1> { typedef unsigned short type; };

// raw loads keep the bits packed (half the registers of floats) until unpack_bf16
template <int VEC>
__device__ __forceinline__ typename BF16Raw<VEC>::type load_bf16_raw(const bf16 *src) {
    return *reinterpret_cast<const typename BF16Raw<VEC>::type *>(src);
}
// A bf16 is the upper half of its fp32: a 32-bit word of two unpacks by one shift and one mask
// (__bfloat162float takes two instructions for the upper one: a byte permute, then a shift)
template <int VEC>
__device__ __forceinline__ void unpack_bf16(float (&dst)[VEC], typename BF16Raw<VEC>::type raw) {
    if constexpr (VEC == 1) {
        dst[0] = __uint_as_float((uint32_t)raw << 16);
    } else {
        const uint32_t *w = reinterpret_cast<const uint32_t *>(&raw);
#pragma unroll
        for (int k = 0; k < VEC / 2; k++) {
            dst[2 * k] = __uint_as_float(w[k] << 16);
            dst[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
    }
}
template <int VEC>
__device__ __forceinline__ void load_bf16(float (&dst)[VEC], const bf16 *src) {
    unpack_bf16<VEC>(dst, load_bf16_raw<VEC>(src));
}
template <int VEC>
__device__ __forceinline__ void store_bf16(bf16 *dst, const float (&src)[VEC]) {
    typename BF16Raw<VEC>::type raw;
    bf16 *h = reinterpret_cast<bf16 *>(&raw);
#pragma unroll
    for (int k = 0; k < VEC; k++) h[k] = __float2bfloat16_rn(src[k]);
    *reinterpret_cast<typename BF16Raw<VEC>::type *>(dst) = raw;
}

// x rounded to bf16 and back: the value a bf16 store of x keeps
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// The body of an element-wise kernel of two inputs: out[i] = bf16(op(a[i], b[i])) for the VEC
// elements of this thread (grid as launch_elementwise lays it out), one at a time in the tail.
// out may alias a or b: each element is read before it is written, by the same thread.
template <int VEC, typename Op>
__device__ __forceinline__ void elementwise2(bf16 *out, const bf16 *a, const bf16 *b, size_t n,
                                             Op op) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n) {
        float x[VEC], y[VEC], z[VEC];
        load_bf16<VEC>(x, a + i);
        load_bf16<VEC>(y, b + i);
#pragma unroll
        for (int k = 0; k < VEC; k++) z[k] = op(x[k], y[k]);
        store_bf16<VEC>(out + i, z);
    } else {
        for (; i < n; i++) out[i] = __float2bfloat16_rn(op(__bfloat162float(a[i]), __bfloat162float(b[i])));
    }
}

// ---- the last block to finish: reductions across a grid in one kernel --------------------------
// Each block writes its partial result, then __syncthreads(), then one thread counts the block
// in with atomic_add_acq_rel. Its release publishes the block's writes (ordered before that
// thread by the barrier) before the count; its acquire makes every earlier block's writes visible
// to the block that sees the last count, whose threads then read them through L2 (__ldcg) after
// another __syncthreads(). It compiles to one MEMBAR.ALL.GPU before the atomic, where
// __threadfence() + atomicAdd + __threadfence() gave two MEMBAR.SC.GPU (sequentially consistent
// fences, the strongest kind). CUTLASS's grid barriers use the same release/acquire pairing.
__device__ __forceinline__ unsigned atomic_add_acq_rel(unsigned *p, unsigned v) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

// ---- programmatic dependent launch (PDL, sm_90 and later) -----------------------------------
// A decode step is a chain of small kernels, each needing the one before it to finish. Launched
// with launch_pdl, a kernel may start while the one before it on the stream still runs: it may
// do what does not depend on that kernel first (issue the loads of its weights), then
// pdl_wait() blocks until the kernel before has completed and its writes are visible. So
// weight streaming overlaps the previous kernel's tail and the launch gap.
// Rules every such kernel keeps (the decode step's exceptions, and why they hold, are in
// layers/layers.h: its kernels read their position and the KV cache before their waits, and the
// LM head and a graph's last decode_advance let the kernels after them start only later):
//  - nothing written by an earlier kernel is read before pdl_wait();
//  - every block calls pdl_wait(), even a block with nothing to do, before it exits: then the
//    grid completes only after the one before it, and the next kernel's wait covers all
//    earlier kernels, not just the last;
//  - pdl_launch_dependents() early (after the weight loads are issued) lets the next kernel
//    start; it can only be scheduled once every block of this one runs, so it never takes the
//    place of a block this one still needs.
// Without PDL (a plain launch, or a GPU before sm_90) both are no-ops and launches serialise.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// PDL on unless CUDA_PDL=0 (read once: a benchmark switch, to measure what it saves)
bool pdl_enabled(void);
// the device is compute capability 9.0 (H100, H200), where the sm_90a kernels run (wgmma,
// setmaxnreg: attention/flash_sm90.cu, layers/decode_gemm_sm90.cu); asked once
bool cuda_is_sm90(void);

// kernel<<<grid, block, smem, cuda_stream>>>(args...), allowed to start before the previous
// kernel on the stream has finished (PDL); the kernel must keep the rules above. Kept across
// CUDA graph capture as a programmatic edge. With cluster > 0, blocks cluster consecutive
// blocks form a thread-block cluster (compute capability 9.0 and later; grid a multiple of it).
// The caller checks the launch (LAUNCH_CHECK).
template <typename... Params, typename... Args>
static void launch_pdl_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                               unsigned cluster, Args... args) {
    cudaLaunchAttribute attributes[2];
    attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
    attributes[1].id = cudaLaunchAttributeClusterDimension;
    attributes[1].val.clusterDim.x = cluster;
    attributes[1].val.clusterDim.y = 1;
    attributes[1].val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = cuda_stream;
    config.attrs = attributes;
    config.numAttrs = cluster > 0 ? 2 : 1;
    CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}
template <typename... Params, typename... Args>
static void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                       Args... args) {
    launch_pdl_cluster(kernel, grid, block, smem, 0, args...);
}

// Launches an element-wise kernel over n elements, 256 threads a block, on cuda_stream: vec, VEC
// elements a thread, when `aligned` (every pointer it takes allows VEC-wide accesses), else
// scalar, one a thread. vec and scalar are two instantiations of one kernel template (e.g.
// gelu_forward_kernel<8> and <1>); the caller checks the launch (LAUNCH_CHECK). PDL: launched
// with launch_pdl, for kernels that keep its rules (pdl_wait before their first read).
template <int VEC, bool PDL = false, typename... Params, typename... Args>
static void launch_elementwise(void (*vec)(Params...), void (*scalar)(Params...), bool aligned,
                               size_t n, Args... args) {
    const int threads = 256;
    const size_t blocks = aligned ? ceil_div(ceil_div(n, VEC), threads) : ceil_div(n, threads);
    void (*kernel)(Params...) = aligned ? vec : scalar;
    if (PDL)
        launch_pdl(kernel, (unsigned)blocks, threads, 0, args...);
    else
        kernel<<<blocks, threads, 0, cuda_stream>>>(static_cast<Params>(args)...);
}

// the 128-byte line at p fetched into L2, nothing waiting for it
__device__ __forceinline__ void prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// 16 bytes of weights that are read once per decode step: not kept in L1 (the next use is a
// whole step away), through the read-only path
__device__ __forceinline__ int4 load_streaming(const void *p) {
    int4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}
