// adamw.cu: the optimizer step and the gradient's sum of squares (for global-norm clipping).
//
// AdamW keeps fp32 master weights when given them: the update happens in fp32 on master and
// params receives its bf16 rounding, so small updates are never lost to bf16's 8-bit mantissa.
// grad_sumsq is deterministic: per-block sums, then the last block to finish adds them in
// block order (no float atomics, whose order would change the rounding from run to run).
#include "../runtime/cuda_common.cuh"
#include "layers.h"

#include <math.h>

struct AdamWArgs {
    float lr, beta1, beta2, eps, weight_decay, max_grad_norm;
    float bias_correction1, bias_correction2;   // 1 - beta^t
};

// The clip scale from the gradient's sum of squares, as the host computed it before it moved
// here (so that no step waits for the norm): IEEE square root and division (__fsqrt_rn,
// __fdiv_rn), which --use_fast_math would otherwise approximate. Not finite: no update.
__device__ __forceinline__ bool clip_scale(float &scale, const float *grad_sumsq, const AdamWArgs &a) {
    const float norm = __fsqrt_rn(*grad_sumsq);
    if (!isfinite(norm)) return false;
    scale = (a.max_grad_norm > 0.0f && norm > a.max_grad_norm) ? __fdiv_rn(a.max_grad_norm, norm) : 1.0f;
    return true;
}

// one parameter: p, m, v updated in place from gradient g, scaled by grad_scale
__device__ __forceinline__ void adamw_element(float &p, float g, float &m, float &v,
                                              float grad_scale, const AdamWArgs &a) {
    g *= grad_scale;
    m = a.beta1 * m + (1.0f - a.beta1) * g;
    v = a.beta2 * v + (1.0f - a.beta2) * g * g;
    const float m_hat = m / a.bias_correction1, v_hat = v / a.bias_correction2;
    p -= a.lr * (m_hat / (sqrtf(v_hat) + a.eps) + a.weight_decay * p);
}

template <int VEC>
__device__ __forceinline__ void load_f32(float (&dst)[VEC], const float *src) {
    if constexpr (VEC == 4) {
        float4 f = *reinterpret_cast<const float4 *>(src);
        dst[0] = f.x; dst[1] = f.y; dst[2] = f.z; dst[3] = f.w;
    } else {
        dst[0] = src[0];
    }
}
template <int VEC>
__device__ __forceinline__ void store_f32(float *dst, const float (&src)[VEC]) {
    if constexpr (VEC == 4) {
        *reinterpret_cast<float4 *>(dst) = make_float4(src[0], src[1], src[2], src[3]);
    } else {
        dst[0] = src[0];
    }
}

// MASTER: the fp32 copy in master is updated and params gets its bf16 rounding; otherwise
// params (bf16) is read, updated in fp32 and rounded back.
template <int VEC, bool MASTER>
__global__ void adamw_kernel(bf16 *__restrict__ params, float *__restrict__ master,
                             const bf16 *__restrict__ grads, float *__restrict__ m,
                             float *__restrict__ v, size_t n,
                             const float *__restrict__ grad_sumsq, AdamWArgs a) {
    float grad_scale;
    if (!clip_scale(grad_scale, grad_sumsq, a)) return;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n) {
        float p[VEC], g[VEC], mv[VEC], vv[VEC];
        if constexpr (MASTER) load_f32<VEC>(p, master + i);
        else load_bf16<VEC>(p, params + i);
        load_bf16<VEC>(g, grads + i);
        load_f32<VEC>(mv, m + i);
        load_f32<VEC>(vv, v + i);
#pragma unroll
        for (int k = 0; k < VEC; k++) adamw_element(p[k], g[k], mv[k], vv[k], grad_scale, a);
        if constexpr (MASTER) store_f32<VEC>(master + i, p);
        store_bf16<VEC>(params + i, p);
        store_f32<VEC>(m + i, mv);
        store_f32<VEC>(v + i, vv);
    } else {
        for (; i < n; i++) {
            float p = MASTER ? master[i] : __bfloat162float(params[i]);
            float mi = m[i], vi = v[i];
            adamw_element(p, __bfloat162float(grads[i]), mi, vi, grad_scale, a);
            if (MASTER) master[i] = p;
            params[i] = __float2bfloat16_rn(p);
            m[i] = mi;
            v[i] = vi;
        }
    }
}

template <bool MASTER>
static void adamw_launch(floatX *params, float *master, const floatX *grads, float *m, float *v,
                         size_t n, const float *grad_sumsq, const AdamWArgs &a) {
    const int threads = 256;
    const bool vec4 = ((uintptr_t)params & 7) == 0 && ((uintptr_t)grads & 7) == 0 &&
                      is_aligned16(m) && is_aligned16(v) && (!MASTER || is_aligned16(master));
    if (vec4)
        adamw_kernel<4, MASTER><<<ceil_div(ceil_div(n, 4), threads), threads, 0, cuda_stream>>>(
            BF(params), master, CBF(grads), m, v, n, grad_sumsq, a);
    else
        adamw_kernel<1, MASTER><<<ceil_div(n, threads), threads, 0, cuda_stream>>>(
            BF(params), master, CBF(grads), m, v, n, grad_sumsq, a);
    LAUNCH_CHECK();
}

void adamw_update(floatX *params, float *master, const floatX *grads, float *m, float *v,
                  size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  const float *grad_sumsq, float max_grad_norm, int t) {
    if (n == 0) return;
    AdamWArgs a = {lr, beta1, beta2, eps, weight_decay, max_grad_norm,
                   1.0f - powf(beta1, (float)t), 1.0f - powf(beta2, (float)t)};
    if (master) adamw_launch<true>(params, master, grads, m, v, n, grad_sumsq, a);
    else adamw_launch<false>(params, master, grads, m, v, n, grad_sumsq, a);
}

// ----------------------------------------------------------------------------------------
// grad_sumsq

enum { SUMSQ_THREADS = 256, SUMSQ_MAX_BLOCKS = 1024 };
__device__ float sumsq_partials[SUMSQ_MAX_BLOCKS];
__device__ unsigned int sumsq_blocks_done = 0;   // back to 0 after each launch

// sum over a block's threads, the result in thread 0 (same order every time)
__device__ float block_sum(float x) {
    __shared__ float warp_sums[SUMSQ_THREADS / 32];
    x = warp_allreduce_sum(x);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = x;
    __syncthreads();
    float total = 0.0f;
    if (threadIdx.x == 0)
        for (int w = 0; w < SUMSQ_THREADS / 32; w++) total += warp_sums[w];
    __syncthreads();   // warp_sums may be reused by the next call
    return total;
}

template <int VEC>
__global__ void __launch_bounds__(SUMSQ_THREADS)
    grad_sumsq_kernel(float *out, const bf16 *__restrict__ grads, size_t n) {
    float acc = 0.0f;
    const size_t stride = (size_t)gridDim.x * SUMSQ_THREADS * VEC;
    for (size_t i = ((size_t)blockIdx.x * SUMSQ_THREADS + threadIdx.x) * VEC; i < n; i += stride) {
        if (i + VEC <= n) {
            float g[VEC], vec_sum = 0.0f;   // summed apart first: fewer rounding steps on acc
            load_bf16<VEC>(g, grads + i);
#pragma unroll
            for (int k = 0; k < VEC; k++) vec_sum += g[k] * g[k];
            acc += vec_sum;
        } else {
            for (size_t j = i; j < n; j++) {
                float g = __bfloat162float(grads[j]);
                acc += g * g;
            }
        }
    }
    const float block_total = block_sum(acc);

    __shared__ bool is_last_block;
    if (threadIdx.x == 0) {
        sumsq_partials[blockIdx.x] = block_total;   // published by the count (cuda_common.cuh)
        is_last_block = atomic_add_acq_rel(&sumsq_blocks_done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last_block) return;
    float sum = 0.0f;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += SUMSQ_THREADS)
        sum += __ldcg(&sumsq_partials[b]);
    const float total = block_sum(sum);
    if (threadIdx.x == 0) {
        *out += total;
        sumsq_blocks_done = 0;
    }
}

void grad_sumsq(float *out, const floatX *grads, size_t n) {
    if (n == 0) return;
    const bool vec8 = is_aligned16(grads);
    const int vec = vec8 ? 8 : 1;
    int blocks = ceil_div(ceil_div(n, vec), SUMSQ_THREADS);
    if (blocks > SUMSQ_MAX_BLOCKS) blocks = SUMSQ_MAX_BLOCKS;
    if (vec8)
        grad_sumsq_kernel<8><<<blocks, SUMSQ_THREADS, 0, cuda_stream>>>(out, CBF(grads), n);
    else
        grad_sumsq_kernel<1><<<blocks, SUMSQ_THREADS, 0, cuda_stream>>>(out, CBF(grads), n);
    LAUNCH_CHECK();
}
