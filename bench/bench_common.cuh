// bench_common.cuh: what the CUDA benchmarks of bench/ share (each is a program of its own, so
// these are static): random bf16 inputs from a hash, and the median time of a call by CUDA events.
#pragma once

#include "../runtime/cuda_common.cuh"

#include <algorithm>
#include <vector>

// x[i] = scale * uniform[-1, 1), from a hash of (seed, i)
static __global__ void fill_random_kernel(bf16 *x, size_t n, unsigned int seed, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned int h = (unsigned int)i * 2654435761u ^ seed * 2246822519u ^ (unsigned int)(i >> 32);
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
        x[i] = __float2bfloat16_rn(scale * ((h >> 8) * (2.0f / 16777216.0f) - 1.0f));
    }
}
static void fill_random(floatX *x, size_t n, float scale, unsigned int seed) {
    fill_random_kernel<<<4 * cuda_num_sms, 256, 0, cuda_stream>>>(BF(x), n, seed, scale);
    LAUNCH_CHECK();
}
// the seed of the next random_tensor (each gets its own)
static unsigned int bench_next_seed = 1;
static floatX *random_tensor(size_t n, float scale, const char *what) {
    floatX *x = (floatX *)dev_malloc(n * sizeof(floatX), what);
    fill_random(x, n, scale, bench_next_seed++);
    return x;
}

// time_ms(fn): the median milliseconds of one call of fn over bench_reps calls, after
// bench_warmup calls (a program may change both, e.g. from its flags)
static int bench_warmup = 3, bench_reps = 15;
template <typename F>
static double time_ms(F fn) {
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < bench_warmup; i++) fn();
    std::vector<float> times;
    for (int i = 0; i < bench_reps; i++) {
        CUDA_CHECK(cudaEventRecord(start, cuda_stream));
        fn();
        CUDA_CHECK(cudaEventRecord(stop, cuda_stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        times.push_back(ms);
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}
