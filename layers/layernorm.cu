// layernorm.cu: per-row layer normalisation, forward (optionally with the residual add before
// it fused in) and backward, one warp per row.
// Row statistics in fp32 by two passes over the row (mean, then variance about the mean; the
// second and third reads of a row hit L1). The weight and bias gradients are reduced
// deterministically: per-warp accumulators in shared memory, per-block partial sums in a
// scratch buffer the caller gives (layernorm_backward_scratch_size), then add_column_sums adds
// them in a fixed order into dweight and dbias (and dproj_bias: the column sums of dinp as it
// leaves, when the caller asks for them).
#include "../runtime/cuda_common.cuh"
#include "column_sums.cuh"
#include "layers.h"

// UNROLL, the vectors of a row a lane holds: as many as the row needs to be read once and kept
// in registers, up to 7 (C <= 1,792 at VEC = 8: every GPT-2 size); beyond, 4 a round and the
// row read again by the later passes (from L1, or from L2 once a block's rows do not fit: at
// C = 1,280 and 1,600 a second and third read of rows that L1 had lost)
template <int VEC>
static int layernorm_unroll(int C) {
    const int per_lane = ceil_div(C / VEC, 32);
    return VEC == 8 && per_lane > 4 ? (per_lane <= 5 ? 5 : per_lane <= 7 ? 7 : 4) : 4;
}

// x = a, or with add (not NULL) the residual add fused in: x = bf16(a + add), rounded as
// residual_forward rounds it, written to residual in the last pass (so residual may alias a:
// each element is read by the thread that writes it, before it writes it). One kernel for both,
// the add a branch that is the same for every thread, so that the statistics and the output
// are computed by the very same instructions: the layernorm of a stored residual (the
// recomputation in backward) gets the same bits as the fused pass that stored it.
template <int VEC>
__device__ __forceinline__ void row_values(float (&xv)[VEC], typename BF16Raw<VEC>::type a_raw,
                                           typename BF16Raw<VEC>::type add_raw, bool add) {
    unpack_bf16<VEC>(xv, a_raw);
    if (add) {
        float yv[VEC];
        unpack_bf16<VEC>(yv, add_raw);
#pragma unroll
        for (int k = 0; k < VEC; k++) xv[k] = __bfloat162float(__float2bfloat16_rn(xv[k] + yv[k]));
    }
}

template <int VEC, int UNROLL, bool EARLY>
__global__ void layernorm_forward_kernel(bf16 *residual, bf16 *__restrict__ out,
                                         float *__restrict__ mean, float *__restrict__ rstd,
                                         const bf16 *a, const bf16 *__restrict__ add,
                                         const bf16 *__restrict__ weight,
                                         const bf16 *__restrict__ bias, int N, int C) {
    // EARLY (a grid of at most one block an SM, where occupancy does not matter), where the row
    // fits: the weight and bias of the lane's vectors loaded before the wait (they do not
    // depend on the kernel before). In the decode step this is a kernel of 9-64 rows between
    // two matmuls, and their round trip after the statistics was on its critical path; in
    // training's grids of thousands of blocks the 32-60 registers more would halve the warps
    // an SM.
    typedef typename BF16Raw<VEC>::type Raw;
    Raw w_raw[UNROLL], b_raw[UNROLL];
    if constexpr (EARLY) {
        const int lane = threadIdx.x % 32, nvec = C / VEC;
        if (nvec <= 32 * UNROLL) {
#pragma unroll
            for (int u = 0; u < UNROLL; u++)
                if (lane + 32 * u < nvec) {
                    w_raw[u] = load_bf16_raw<VEC>(weight + (lane + 32 * u) * VEC);
                    b_raw[u] = load_bf16_raw<VEC>(bias + (lane + 32 * u) * VEC);
                }
        }
    }
    // launched with PDL (launch_pdl): in the decode step's plain layers a chain of small
    // kernels, where this one's launch then overlaps the end of the GEMM before it
    pdl_launch_dependents();
    pdl_wait();
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const bool has_add = add != nullptr;
    const bf16 *x = a + (size_t)row * C;
    const bf16 *y = has_add ? add + (size_t)row * C : x;   // y: read only when has_add
    const int nvec = C / VEC;

    // the one pass that reads from DRAM: UNROLL vectors per lane in flight at once, kept for
    // the other two passes when the row fits (in_registers), else read again
    const bool in_registers = nvec <= 32 * UNROLL;
    Raw raw[UNROLL], raw_add[UNROLL] = {};
    float sum = 0.0f;
    for (int base = lane; base < nvec; base += 32 * UNROLL) {
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            if (base + 32 * u < nvec) {
                raw[u] = load_bf16_raw<VEC>(x + (base + 32 * u) * VEC);
                if (has_add) raw_add[u] = load_bf16_raw<VEC>(y + (base + 32 * u) * VEC);
            }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            if (base + 32 * u >= nvec) break;
            float xv[VEC];
            row_values<VEC>(xv, raw[u], raw_add[u], has_add);
#pragma unroll
            for (int k = 0; k < VEC; k++) sum += xv[k];
        }
    }
    const float m = warp_allreduce_sum(sum) / C;
    // f(xv, v, u) for the lane's vectors v = lane, lane + 32, ... in order: from the registers
    // (u: the register slot), or read again (u = -1)
    auto each_vector = [&](auto f) {
        if (in_registers) {
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                if (lane + 32 * u >= nvec) break;
                float xv[VEC];
                row_values<VEC>(xv, raw[u], raw_add[u], has_add);
                f(xv, lane + 32 * u, u);
            }
        } else {
            for (int v = lane; v < nvec; v += 32) {
                float xv[VEC];
                row_values<VEC>(xv, load_bf16_raw<VEC>(x + v * VEC),
                                has_add ? load_bf16_raw<VEC>(y + v * VEC) : Raw{}, has_add);
                f(xv, v, -1);
            }
        }
    };

    float sumsq = 0.0f;
    each_vector([&](const float (&xv)[VEC], int, int) {
#pragma unroll
        for (int k = 0; k < VEC; k++) sumsq += (xv[k] - m) * (xv[k] - m);
    });
    const float s = rsqrtf(warp_allreduce_sum(sumsq) / C + LAYERNORM_EPS);

    bf16 *o = out + (size_t)row * C;
    bf16 *r = has_add ? residual + (size_t)row * C : nullptr;
    each_vector([&](const float (&xv)[VEC], int v, int u) {
        float w[VEC], b[VEC], yv[VEC];
        if (has_add) store_bf16<VEC>(r + v * VEC, xv);   // already bf16 values: stored exactly
        bool loaded = false;   // before the wait (EARLY)
        if constexpr (EARLY) {
            if (u >= 0) {
                unpack_bf16<VEC>(w, w_raw[u]);
                unpack_bf16<VEC>(b, b_raw[u]);
                loaded = true;
            }
        }
        if (!loaded) {
            load_bf16<VEC>(w, weight + v * VEC);
            load_bf16<VEC>(b, bias + v * VEC);
        }
#pragma unroll
        for (int k = 0; k < VEC; k++) yv[k] = (xv[k] - m) * s * w[k] + b[k];
        store_bf16<VEC>(o + v * VEC, yv);
    });
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }
}

// both entry points: add and residual NULL for the plain layernorm
static void layernorm_forward_launch(floatX *residual, floatX *out, float *mean, float *rstd,
                                     const floatX *a, const floatX *add, const floatX *weight,
                                     const floatX *bias, int N, int C) {
    const int threads = 256, rows_per_block = threads / 32;
    const bool vec8 = C % 8 == 0 && is_aligned16(out) && is_aligned16(a) && is_aligned16(weight) &&
                      is_aligned16(bias) && (!add || (is_aligned16(add) && is_aligned16(residual)));
    const int blocks = ceil_div(N, rows_per_block);
    const int unroll = layernorm_unroll<8>(C);
    // EARLY where the grid is at most one block an SM, instantiated at UNROLL = 4 only (C <= 1,024:
    // GPT-2 124M and 350M, the sizes whose decode step was measured)
    const bool early = blocks <= cuda_num_sms;
    auto kernel = !vec8 ? layernorm_forward_kernel<1, 4, false>
                  : unroll == 5 ? layernorm_forward_kernel<8, 5, false>
                  : unroll == 7 ? layernorm_forward_kernel<8, 7, false>
                  : !early      ? layernorm_forward_kernel<8, 4, false>
                                : layernorm_forward_kernel<8, 4, true>;
    launch_pdl(kernel, blocks, threads, 0, BF(residual), BF(out), mean, rstd, CBF(a), CBF(add),
               CBF(weight), CBF(bias), N, C);
    LAUNCH_CHECK();
}

void layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp,
                       const floatX *weight, const floatX *bias, int N, int C) {
    layernorm_forward_launch(NULL, out, mean, rstd, inp, NULL, weight, bias, N, C);
}

void layernorm_residual_forward(floatX *residual, floatX *out, float *mean, float *rstd,
                                const floatX *a, const floatX *b, const floatX *weight,
                                const floatX *bias, int N, int C) {
    layernorm_forward_launch(residual, out, mean, rstd, a, b, weight, bias, N, C);
}

// ----------------------------------------------------------------------------------------
// backward. With norm = (x - mean) * rstd and dnorm = weight * dout, per row:
//   dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd
//   dweight += norm * dout, dbias += dout (summed over rows)

enum { LN_BACKWARD_THREADS = 128 };


// SUMS column sums: dweight, dbias and, when SUMS = 3, dinp's as it leaves (dproj_bias).
// Shared memory: per warp, SUMS accumulators of C floats each, stored as [k][v] for channel
// v*VEC + k so that the lanes of a warp touch consecutive words.
// partial: (gridDim.x, SUMS, C) fp32, this block's sums in channel order.
template <int VEC, int SUMS, int UNROLL>
__global__ void __launch_bounds__(LN_BACKWARD_THREADS)
    layernorm_backward_kernel(float *__restrict__ partial, bf16 *__restrict__ dinp,
                              const bf16 *__restrict__ dout, const bf16 *__restrict__ inp,
                              const bf16 *__restrict__ weight, const float *__restrict__ mean,
                              const float *__restrict__ rstd, int N, int C) {
    extern __shared__ float accumulators[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int warps = blockDim.x / 32;
    const int nvec = C / VEC;
    float *dweight_acc = accumulators + (size_t)warp * SUMS * C;
    float *dbias_acc = dweight_acc + C;
    float *dproj_acc = dbias_acc + C;   // SUMS = 3 only
    for (int i = lane; i < SUMS * C; i += 32) dweight_acc[i] = 0.0f;
    __syncwarp();

    for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
        const bf16 *x = inp + (size_t)row * C;
        const bf16 *dy = dout + (size_t)row * C;
        bf16 *dx = dinp + (size_t)row * C;
        const float m = mean[row], s = rstd[row];

        // dx (and the column sums) of vector v of the row, from its values
        auto finish = [&](int v, const float (&xv)[VEC], const float (&dyv)[VEC], float (&dxv)[VEC],
                          float dnorm_mean, float dnorm_norm_mean) {
            float w[VEC];
            load_bf16<VEC>(w, weight + v * VEC);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                float norm = (xv[k] - m) * s;
                dxv[k] += (w[k] * dyv[k] - dnorm_mean - norm * dnorm_norm_mean) * s;
                dweight_acc[k * nvec + v] += norm * dyv[k];
                dbias_acc[k * nvec + v] += dyv[k];
                // as stored: the sum a separate pass over dinp would make
                if (SUMS == 3) dproj_acc[k * nvec + v] += __bfloat162float(__float2bfloat16_rn(dxv[k]));
            }
            store_bf16<VEC>(dx + v * VEC, dxv);
        };

        // The pass that reads the row from DRAM, UNROLL vectors of x and dout (and of dx, when
        // the row fits: then in registers for the second pass) in flight a lane. A row of up to
        // 32 * UNROLL vectors is read once; a longer one is read again by the second pass, from
        // L1 or L2.
        const bool in_registers = nvec <= 32 * UNROLL;
        typedef typename BF16Raw<VEC>::type Raw;
        Raw x_raw[UNROLL], dy_raw[UNROLL], dx_raw[UNROLL];
        float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
        for (int base = lane; base < nvec; base += 32 * UNROLL) {
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                if (base + 32 * u < nvec) {
                    x_raw[u] = load_bf16_raw<VEC>(x + (base + 32 * u) * VEC);
                    dy_raw[u] = load_bf16_raw<VEC>(dy + (base + 32 * u) * VEC);
                    if (in_registers) dx_raw[u] = load_bf16_raw<VEC>(dx + (base + 32 * u) * VEC);
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const int v = base + 32 * u;
                if (v >= nvec) break;
                float xv[VEC], dyv[VEC], w[VEC];
                unpack_bf16<VEC>(xv, x_raw[u]);
                unpack_bf16<VEC>(dyv, dy_raw[u]);
                load_bf16<VEC>(w, weight + v * VEC);
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    float dnorm = w[k] * dyv[k];
                    dnorm_sum += dnorm;
                    dnorm_norm_sum += dnorm * (xv[k] - m) * s;
                }
            }
        }
        const float dnorm_mean = warp_allreduce_sum(dnorm_sum) / C;
        const float dnorm_norm_mean = warp_allreduce_sum(dnorm_norm_sum) / C;

        if (in_registers) {
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const int v = lane + 32 * u;
                if (v >= nvec) break;
                float xv[VEC], dyv[VEC], dxv[VEC];
                unpack_bf16<VEC>(xv, x_raw[u]);
                unpack_bf16<VEC>(dyv, dy_raw[u]);
                unpack_bf16<VEC>(dxv, dx_raw[u]);
                finish(v, xv, dyv, dxv, dnorm_mean, dnorm_norm_mean);
            }
        } else {
            for (int v = lane; v < nvec; v += 32) {
                float xv[VEC], dyv[VEC], dxv[VEC];
                load_bf16<VEC>(xv, x + v * VEC);
                load_bf16<VEC>(dyv, dy + v * VEC);
                load_bf16<VEC>(dxv, dx + v * VEC);
                finish(v, xv, dyv, dxv, dnorm_mean, dnorm_norm_mean);
            }
        }
    }
    __syncthreads();

    float *block_partial = partial + (size_t)blockIdx.x * SUMS * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const int slot = (c % VEC) * nvec + c / VEC;
#pragma unroll
        for (int sum = 0; sum < SUMS; sum++) {
            float total = 0.0f;
            for (int w = 0; w < warps; w++) total += accumulators[(size_t)(w * SUMS + sum) * C + slot];
            block_partial[sum * C + c] = total;
        }
    }
}

template <int SUMS>
static size_t layernorm_backward_smem(int C) {
    return (size_t)(LN_BACKWARD_THREADS / 32) * SUMS * C * sizeof(float);
}

// the kernel for (VEC, SUMS) at width C (layernorm_unroll)
template <int VEC, int SUMS>
static void (*layernorm_backward_kernel_for(int C))(float *, bf16 *, const bf16 *, const bf16 *,
                                                    const bf16 *, const float *, const float *,
                                                    int, int) {
    if constexpr (VEC == 8) {
        switch (layernorm_unroll<VEC>(C)) {
        case 5: return layernorm_backward_kernel<VEC, SUMS, 5>;
        case 7: return layernorm_backward_kernel<VEC, SUMS, 7>;
        }
    }
    return layernorm_backward_kernel<VEC, SUMS, 4>;
}

// the grid of layernorm_backward_kernel<VEC, SUMS, ..> at (N, C): as many blocks as are resident
// on the GPU at once, no more than the rows need. Also sets the kernel's shared-memory limit.
template <int VEC, int SUMS>
static int layernorm_backward_blocks(int N, int C) {
    const size_t smem = layernorm_backward_smem<SUMS>(C);
    const auto kernel = layernorm_backward_kernel_for<VEC, SUMS>(C);
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int blocks_per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel,
                                                             LN_BACKWARD_THREADS, smem));
    if (blocks_per_sm < 1)
        die("layernorm_backward: C=%d needs more shared memory than a block has", C);
    int blocks = blocks_per_sm * cuda_num_sms;
    const int blocks_for_rows = ceil_div(N, LN_BACKWARD_THREADS / 32);
    return blocks < blocks_for_rows ? blocks : blocks_for_rows;
}

// partial (blocks, SUMS, C) fp32, for whichever vector width and sum count the call needs
size_t layernorm_backward_scratch_size(int N, int C) {
    ensure_backend();
    const size_t sizes[4] = {(size_t)layernorm_backward_blocks<8, 2>(N, C) * 2,
                             (size_t)layernorm_backward_blocks<1, 2>(N, C) * 2,
                             (size_t)layernorm_backward_blocks<8, 3>(N, C) * 3,
                             (size_t)layernorm_backward_blocks<1, 3>(N, C) * 3};
    size_t most = 0;
    for (int i = 0; i < 4; i++) most = sizes[i] > most ? sizes[i] : most;
    return most * C * sizeof(float);
}

template <int VEC, int SUMS>
static void layernorm_backward_launch(floatX *dinp, floatX *dweight, floatX *dbias,
                                      floatX *dproj_bias, float *partial, const floatX *dout,
                                      const floatX *inp, const floatX *weight, const float *mean,
                                      const float *rstd, int N, int C) {
    const int blocks = layernorm_backward_blocks<VEC, SUMS>(N, C);
    layernorm_backward_kernel_for<VEC, SUMS>(C)<<<blocks, LN_BACKWARD_THREADS,
                                                  layernorm_backward_smem<SUMS>(C), cuda_stream>>>(
        partial, BF(dinp), CBF(dout), CBF(inp), CBF(weight), mean, rstd, N, C);
    LAUNCH_CHECK();
    add_column_sums(ColumnSumsDst{{BF(dweight), BF(dbias), BF(dproj_bias)}}, SUMS, C, partial,
                    blocks);
}

void layernorm_backward(floatX *dinp, floatX *dweight, floatX *dbias, floatX *dproj_bias,
                        void *scratch, const floatX *dout, const floatX *inp,
                        const floatX *weight, const float *mean, const float *rstd, int N, int C) {
    const bool vec8 = C % 8 == 0 && is_aligned16(dinp) && is_aligned16(dout) &&
                      is_aligned16(inp) && is_aligned16(weight);
    float *partial = (float *)scratch;
    if (vec8 && dproj_bias)
        layernorm_backward_launch<8, 3>(dinp, dweight, dbias, dproj_bias, partial, dout, inp,
                                        weight, mean, rstd, N, C);
    else if (vec8)
        layernorm_backward_launch<8, 2>(dinp, dweight, dbias, NULL, partial, dout, inp, weight,
                                        mean, rstd, N, C);
    else if (dproj_bias)
        layernorm_backward_launch<1, 3>(dinp, dweight, dbias, dproj_bias, partial, dout, inp,
                                        weight, mean, rstd, N, C);
    else
        layernorm_backward_launch<1, 2>(dinp, dweight, dbias, NULL, partial, dout, inp, weight,
                                        mean, rstd, N, C);
}
