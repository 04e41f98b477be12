// cuda_common.cuh: what every CUDA source of the project shares: error checks that name the
// file and line, the one stream and cuBLAS handles, and bf16 helpers.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "layers.h"

// storage type of floatX inside kernels (layers.h spells it uint16_t for the C side)
typedef __nv_bfloat16 bf16;
#define BF(p) (reinterpret_cast<bf16 *>(p))
#define CBF(p) (reinterpret_cast<const bf16 *>(p))

void cuda_fail(cudaError_t err, const char *what, const char *file, int line);
void cublas_fail(cublasStatus_t status, const char *what, const char *file, int line);
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

// Set up by backend_init (layers/device.cu): everything runs on this one stream.
extern cudaStream_t cuda_stream;
extern cublasHandle_t cublas_handle;
extern cublasLtHandle_t cublaslt_handle;
extern void *cublaslt_workspace;          // for cuBLASLt heuristics, cublaslt_workspace_size bytes
extern size_t cublaslt_workspace_size;
extern int cuda_num_sms;

static inline int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }
