// wgmma_rate.cu: how fast the tensor cores run each wgmma form the flash backward uses, alone
// and with several warpgroups issuing at once: the ceiling each product of a backward step
// can reach, before any dependency between them (issue 18; docs/PERF.md, seventeenth session).
//
// One CTA per SM, each of its W warpgroups issuing the same product back to back into its own
// accumulator (groups of 4 k-steps, two groups in flight), operands in shared memory in the
// 128-byte swizzle (values small and not zero: zeros draw less power and clock higher):
//   ss N          m64nNk16, A and B from shared memory, K-major (S^T = K Q^T, dP^T = V dO^T)
//   ss-t N        the same, both transposed (MN-major: dQ = dS K)
//   rs N          A from registers, B from shared memory, MN-major (dV += P^T dO, dK += dS^T Q)
// and then the products of one HS = 128 backward step as flash_sm90.cu issues them, without the
// math between them (512 threads: an idle warpgroup, two consumers at 208 registers, a dQ
// warpgroup at 72, as BwdShape): per step each consumer S^T and dP^T (ss, N = 64, 8 k-steps),
// waits for them, then dV and dK (rs, N = 128, 4 k-steps) with the bf16 of S^T as A, waits; the
// dQ warpgroup, on its own, two dS K halves (ss-t, N = 64, 8 k-steps), each waited for:
//   products          all of them (2,560 cycles a step at the peak)
//   no dQ, dQ only    the consumers' products only (2,048), the dQ warpgroup's only (512)
//   + exp, + dS^T stores, + dQ staging: the products and that part of the kernel's other work
//                     (StepMode), to see which of it the tensor cores wait for
// Reported per form and W: cycles per k-step of one warpgroup, and FLOP per cycle per SM against
// the dense bf16 peak of 4,096 (989 TFLOP/s at 1,830 MHz on 132 SMs); shared-memory operand bytes
// per cycle beside it (A 2 KB and B 32N bytes a k-step for ss, B only for rs; the SM's shared
// memory reads 128 bytes a cycle). Cycles are clock64 on each SM, so the clock does not matter.
// usage: wgmma_rate [ITERS (4096)]      (bench/wgmma_rate.mk builds it; SKIP without a GPU)
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../attention/flash_tile.cuh"
#define BENCH_NAME "wgmma_rate"
#include "standalone.cuh"   // CHECK, bench_device

enum Form { SS = 0, SS_T = 1, RS = 2 };
constexpr int kTileBytes = 128 * 128 * 2;   // A: 64 x 64 bf16 (8 KB); B: up to 128 x 128 (32 KB)

// d (64 x N) += one k-chunk of 64 (4 k-steps) of the form's product
template <int N, int FORM>
__device__ __forceinline__ void chunk(float (&d)[N / 2], uint32_t a, uint32_t b,
                                      const uint32_t (&ar)[16]) {
    if constexpr (FORM == RS) {
        // B: 64 k-rows x N columns, MN-major: panels of 64 columns, 64 * 128 bytes apart
        const uint64_t db = smem_desc(b, 64 * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const uint32_t ak[4] = {ar[4 * kk], ar[4 * kk + 1], ar[4 * kk + 2], ar[4 * kk + 3]};
            wgmma_rs_tb<N>(d, ak, desc_advance(db, kk * 16 * 128));
        }
    } else if constexpr (FORM == SS) {
        // A: 64 rows x 64 k (one panel), B: N rows x 64 k, both K-major
        const uint64_t da = smem_desc(a, 16, 1024), db = smem_desc(b, 16, 1024);
#pragma unroll
        for (int ks = 0; ks < 4; ks++)
            wgmma_ss<0>(d, desc_advance(da, ks * 32), desc_advance(db, ks * 32), 1);
    } else {
        // both MN-major: A 64 k-rows x 64 M columns, B 64 k-rows x N columns
        const uint64_t da = smem_desc(a, 64 * 128, 1024), db = smem_desc(b, 64 * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wgmma_ss<1>(d, desc_advance(da, kk * 16 * 128), desc_advance(db, kk * 16 * 128), 1);
    }
}

template <int N, int FORM>
__global__ void __launch_bounds__(384, 1) rate_kernel(int iters, int wgs, long long *cycles,
                                                      float *sink) {
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    for (int i = threadIdx.x; i < 2 * kTileBytes / 4; i += blockDim.x)
        reinterpret_cast<uint32_t *>(smem)[i] = pack_bf16(0.001f * (i % 7 + 1), -0.001f * (i % 5 + 1));
    fence_proxy_async_shared();
    __syncthreads();
    const int wg = threadIdx.x / 128;
    if (wg >= wgs) return;
    const uint32_t a = smem_addr(smem), b = a + kTileBytes;
    uint32_t ar[16];
#pragma unroll
    for (int i = 0; i < 16; i++) ar[i] = pack_bf16(0.001f * (threadIdx.x % 3 + i), 0.002f);
    float d[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) d[i] = 0.0f;
    named_bar_sync(1, 128 * wgs);
    const long long t0 = clock64();
    for (int it = 0; it < iters; it++) {
        wgmma_fence();
        chunk<N, FORM>(d, a, b, ar);
        wgmma_commit();
        wgmma_wait<1>();
    }
    wgmma_wait<0>();
    fence_regs(d);
    const long long t1 = clock64();
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < N / 2; i++) s += d[i];
    if (s == 12345.0f) sink[0] = s;   // keeps the products; never true for these inputs
    if (threadIdx.x % 128 == 0) cycles[blockIdx.x * 3 + wg] = t1 - t0;
}

// the step's products (see the top), and what `mode` adds or takes away:
enum StepMode {
    kNoDq = 1,       // the consumers' products only
    kDqOnly = 2,     // the dQ warpgroup's only
    kExp = 4,        // + the consumers' exponentials: 32 exp2 a thread on S^T, before the pack
    kDsStore = 8,    // + the consumers' dS^T stores (16 x 4 bytes a thread), fence.proxy.async
    kDqStage = 16,   // + the dQ warpgroup's staging (2 x 16 x 8 bytes a thread, as stage_dq)
};
__global__ void __launch_bounds__(512, 1) step_kernel(int iters, int mode, long long *cycles,
                                                      float *sink) {
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    // K, V (128 x 128), Q, dO (64 x 128), dS^T (128 x 64), dQ staging (64 x 128 fp32): 144 KB
    constexpr int K_OFF = 0, V_OFF = 32768, Q_OFF = 65536, DO_OFF = 81920, DS_OFF = 98304,
                  STG_OFF = 114688, BYTES = 147456;
    for (int i = threadIdx.x; i < BYTES / 4; i += blockDim.x)
        reinterpret_cast<uint32_t *>(smem)[i] = pack_bf16(0.001f * (i % 7 + 1), -0.001f * (i % 5 + 1));
    fence_proxy_async_shared();
    __syncthreads();
    const int wg = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);   // uniform (setmaxnreg)
    const uint32_t base = smem_addr(smem);
    float s = 0.0f;
    long long t0 = 0, t1 = 0;
    if (wg == 0) {
        setmaxnreg_dec<24>();
        return;
    } else if (wg < 3) {
        setmaxnreg_inc<208>();
        const int c = wg - 1;
        const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32, g = lane / 4, t = lane % 4;
        float st[32], dv[64], dk[64];
#pragma unroll
        for (int i = 0; i < 32; i++) st[i] = 0.001f * (threadIdx.x % 3 + i);
#pragma unroll
        for (int i = 0; i < 64; i++) dv[i] = dk[i] = 0.0f;
        named_bar_sync(1, 384);   // with the dQ warpgroup
        t0 = clock64();
        if (!(mode & kDqOnly)) {
            for (int it = 0; it < iters; it++) {
                // S^T and dP^T (into one accumulator: only their rate is measured), then dV
                // and dK from them as A operands, as the kernel orders them (without its math)
                // (every k-step accumulates: a product whose sums were overwritten unread would
                // be dropped by the compiler)
                wgmma_fence();
                const uint64_t dk_ = smem_desc(base + K_OFF + 64 * c * 128, 16, 1024),
                               dv_ = smem_desc(base + V_OFF + 64 * c * 128, 16, 1024),
                               dq_ = smem_desc(base + Q_OFF, 16, 1024),
                               ddo = smem_desc(base + DO_OFF, 16, 1024);
#pragma unroll
                for (int ks = 0; ks < 8; ks++) {   // S^T = K Q^T: 64 x 64, HS = 128
                    const uint32_t off = (ks / 4) * 128 * 128 + (ks % 4) * 32;
                    const uint32_t off_q = (ks / 4) * 64 * 128 + (ks % 4) * 32;
                    wgmma_ss<0>(st, desc_advance(dk_, off), desc_advance(dq_, off_q), 1);
                }
#pragma unroll
                for (int ks = 0; ks < 8; ks++) {   // dP^T = V dO^T
                    const uint32_t off = (ks / 4) * 128 * 128 + (ks % 4) * 32;
                    const uint32_t off_q = (ks / 4) * 64 * 128 + (ks % 4) * 32;
                    wgmma_ss<0>(st, desc_advance(dv_, off), desc_advance(ddo, off_q), 1);
                }
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(st);
                if (mode & kExp) {
#pragma unroll
                    for (int i = 0; i < 32; i++) st[i] = exp2f(fmaf(st[i], 0.01f, -0.5f));
                }
                uint32_t pa[16];
                pack_a(pa, st);
                wgmma_fence();
                gemm_rab<128, 64, 64>(dv, pa, base + DO_OFF);
                gemm_rab<128, 64, 64>(dk, pa, base + Q_OFF);
                wgmma_commit();
                if (mode & kDsStore) {   // as the kernel's store_ds
#pragma unroll
                    for (int k = 0; k < 16; k++) {
                        const int row = 64 * c + 16 * warp + g + 8 * (k & 1), col = 8 * (k >> 1) + 2 * t;
                        *reinterpret_cast<uint32_t *>(smem + DS_OFF + swizzle_128b(row, col * 2)) = pa[k];
                    }
                    fence_proxy_async_shared();
                }
                wgmma_wait<0>();
                fence_regs(dv);
                fence_regs(dk);
                fence_regs(pa);
            }
        }
        fence_regs(st);
        fence_regs(dv);
        fence_regs(dk);
        t1 = clock64();
#pragma unroll
        for (int i = 0; i < 32; i++) s += st[i];
#pragma unroll
        for (int i = 0; i < 64; i++) s += dv[i] + dk[i];
    } else {
        setmaxnreg_dec<72>();
        const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32, g = lane / 4, t = lane % 4;
        float dq[32];
#pragma unroll
        for (int i = 0; i < 32; i++) dq[i] = 0.0f;
        named_bar_sync(1, 384);   // starts with the consumers
        t0 = clock64();
        if (!(mode & kNoDq)) {
            for (int it = 0; it < iters; it++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    wgmma_fence();
                    const uint64_t dds = smem_desc(base + DS_OFF, 128 * 128, 1024),
                                   dk = smem_desc(base + K_OFF + h * 128 * 128, 128 * 128, 1024);
#pragma unroll
                    for (int kc = 0; kc < 8; kc++)   // (accumulating: see the consumers)
                        wgmma_ss<1>(dq, desc_advance(dds, kc * 16 * 128),
                                    desc_advance(dk, kc * 16 * 128), 1);
                    wgmma_commit();
                    wgmma_wait<0>();
                    fence_regs(dq);
                    if (mode & kDqStage) {   // as the kernel's stage_dq: two 64 x 32 fp32 boxes
#pragma unroll
                        for (int i = 0; i < 32; i += 2) {
                            const int row = 16 * warp + g + Frag::row(i), col = 2 * t + Frag::col(i);
                            *reinterpret_cast<float2 *>(smem + STG_OFF + h * 16384 + (col / 32) * 8192 +
                                                        swizzle_128b(row, (col % 32) * 4)) =
                                make_float2(dq[i], dq[i + 1]);
                        }
                    }
                }
                if (mode & kDqStage) fence_proxy_async_shared();
            }
            wgmma_wait<0>();
        }
        fence_regs(dq);
        t1 = clock64();
#pragma unroll
        for (int i = 0; i < 32; i++) s += dq[i];
    }
    if (s == 12345.0f) sink[0] = s;
    if (threadIdx.x % 128 == 0) cycles[blockIdx.x * 3 + wg - 1] = t1 - t0;
}

// Cycles of one launch: the slowest of the first `wgs` timed warpgroups of each SM (3 slots an SM
// in cycles_d), averaged over the SMs; the best of three launches (`launch` runs one)
template <typename Launch>
static double best_cycles(Launch launch, int wgs, int sms, long long *cycles_d) {
    long long *cycles = (long long *)malloc(sizeof(long long) * 3 * sms);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        launch();
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(cycles, cycles_d, sizeof(long long) * 3 * sms, cudaMemcpyDeviceToHost));
        double mean = 0;
        for (int s = 0; s < sms; s++) {
            long long m = 0;
            for (int w = 0; w < wgs; w++) m = cycles[3 * s + w] > m ? cycles[3 * s + w] : m;
            mean += (double)m / sms;
        }
        best = mean < best ? mean : best;
    }
    free(cycles);
    return best;
}

template <int N, int FORM>
static void measure(const char *name, int iters, int sms, long long *cycles_d, float *sink) {
    auto kernel = rate_kernel<N, FORM>;
    const int smem = 2 * kTileBytes + 1024;
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    for (int wgs = 1; wgs <= 3; wgs++) {
        const double best = best_cycles(
            [&] { kernel<<<sms, 384, smem>>>(iters, wgs, cycles_d, sink); }, wgs, sms, cycles_d);
        const double ksteps = 4.0 * iters;
        const double per_kstep = best / ksteps;   // cycles per k-step of one warpgroup
        const double flop_clk = wgs * ksteps * 2.0 * 64 * N * 16 / best;
        const double bytes = (FORM == RS ? 0 : 64 * 16 * 2) + 16.0 * N * 2;
        printf("| %-6s | %3d | %d | %6.1f | %6.0f | %5.1f%% | %5.1f |\n", name, N, wgs, per_kstep,
               flop_clk, 100.0 * flop_clk / 4096, wgs * ksteps * bytes / best);
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const int iters = argc > 1 ? atoi(argv[1]) : 4096;
    if (iters < 1) {
        fprintf(stderr, "usage: wgmma_rate [ITERS >= 1]\n");
        return 2;
    }
    cudaDeviceProp p;
    if (!bench_device(&p)) return 0;
    if (p.major != 9) {
        printf("SKIP: wgmma needs compute capability 9.0 (this device: %d.%d)\n", p.major, p.minor);
        return 0;
    }
    const int sms = p.multiProcessorCount;
    long long *cycles_d;
    float *sink;
    CHECK(cudaMalloc(&cycles_d, sizeof(long long) * 3 * sms));
    CHECK(cudaMalloc(&sink, sizeof(float)));
    printf("%s, %d SMs, %d iterations of 4 k-steps a warpgroup\n\n", p.name, sms, iters);
    printf("| form | N | warpgroups | cycles a k-step | FLOP/cycle/SM | of peak | shared B/cycle |\n");
    printf("|---|--:|--:|--:|--:|--:|--:|\n");
    measure<64, SS>("ss", iters, sms, cycles_d, sink);
    measure<128, SS>("ss", iters, sms, cycles_d, sink);
    measure<64, SS_T>("ss-t", iters, sms, cycles_d, sink);
    measure<128, SS_T>("ss-t", iters, sms, cycles_d, sink);
    measure<64, RS>("rs", iters, sms, cycles_d, sink);
    measure<128, RS>("rs", iters, sms, cycles_d, sink);

    // the step's products
    const int smem = 147456 + 1024;
    CHECK(cudaFuncSetAttribute(step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const int modes[] = {0, kNoDq, kDqOnly, kExp, kDsStore, kDqStage, kDsStore | kDqStage,
                         kExp | kDsStore | kDqStage};
    const char *names[] = {"products", "no dQ", "dQ only", "+ exp", "+ dS^T stores",
                           "+ dQ staging", "+ dS^T stores, dQ staging", "+ exp, stores, staging"};
    printf("\n| one HS = 128 backward step, products and | cycles a step | products at the peak | of peak |\n");
    printf("|---|--:|--:|--:|\n");
    for (int m = 0; m < (int)(sizeof(modes) / sizeof(modes[0])); m++) {
        const int mode = modes[m];
        const int ideal = mode & kNoDq ? 2048 : mode & kDqOnly ? 512 : 2560;
        const double best = best_cycles(
            [&] { step_kernel<<<sms, 512, smem>>>(iters / 4, mode, cycles_d, sink); }, 3, sms, cycles_d);
        const double per_step = best / (iters / 4);
        printf("| %s | %.0f | %d | %.1f%% |\n", names[m], per_step, ideal, 100.0 * ideal / per_step);
    }
    CHECK(cudaFree(cycles_d));
    CHECK(cudaFree(sink));
    return 0;
}
