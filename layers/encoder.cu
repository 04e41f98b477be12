// encoder.cu: token and position embeddings, forward and backward.
//
// The backward is deterministic: instead of atomics (whose order, and so whose rounding,
// changes from run to run) the rows of dout are grouped by token with a stable radix sort of
// (token, row) pairs; each token's rows are then summed in row order by one block and added
// once into its row of dwte. dwpe sums over the batch, also in a fixed order.
#include "../runtime/cuda_common.cuh"
#include "layers.h"

#include <cub/device/device_radix_sort.cuh>

// out[n, :] = wte[tokens[n], :] + wpe[t, :], t = n % T, or pos[0] where pos is given (the
// decode step's position cell, in device memory); one thread per VEC channels of one row. It
// lets the kernel after it start at once (PDL: the decode step's first layer kernel loads its
// weights meanwhile), and reads the tokens after its wait: in a graph of several greedy steps
// (where decode_step_end does not embed them itself) the LM head before it chose them.
template <int VEC>
__global__ void encoder_forward_kernel(bf16 *__restrict__ out, const int *__restrict__ tokens,
                                       const bf16 *__restrict__ wte, const bf16 *__restrict__ wpe,
                                       const int *__restrict__ pos, int N, int T, int C) {
    pdl_launch_dependents();
    pdl_wait();
    const int nvec = C / VEC;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * nvec) return;
    const int n = (int)(idx / nvec), c = (int)(idx % nvec) * VEC;
    const int t = pos ? pos[0] : n % T;
    float w[VEC], p[VEC], y[VEC];
    load_bf16<VEC>(w, wte + (size_t)tokens[n] * C + c);
    load_bf16<VEC>(p, wpe + (size_t)t * C + c);
#pragma unroll
    for (int k = 0; k < VEC; k++) y[k] = w[k] + p[k];
    store_bf16<VEC>(out + (size_t)n * C + c, y);
}

// the training pass's (pos NULL: a plain launch) and the decode step's (with PDL where it
// follows the step before in the same graph: layers.h)
template <bool PDL>
static void encoder_launch(floatX *out, const int *tokens, const floatX *wte, const floatX *wpe,
                           const int *pos, int N, int T, int C) {
    const bool vec = C % 8 == 0 && is_aligned16(out) && is_aligned16(wte) && is_aligned16(wpe);
    launch_elementwise<8, PDL>(encoder_forward_kernel<8>, encoder_forward_kernel<1>, vec, (size_t)N * C,
                               BF(out), tokens, CBF(wte), CBF(wpe), pos, N, T, C);
    LAUNCH_CHECK();
}

void encoder_forward(floatX *out, const int *tokens, const floatX *wte, const floatX *wpe,
                     int B, int T, int C) {
    encoder_launch<false>(out, tokens, wte, wpe, NULL, B * T, T, C);
}

void decode_embed(floatX *out, const int *tokens, const int *cell, const floatX *wte,
                  const floatX *wpe, int B, int C, int chained) {
    if (chained) encoder_launch<true>(out, tokens, wte, wpe, cell, B, 1, C);
    else encoder_launch<false>(out, tokens, wte, wpe, cell, B, 1, C);
}

// ----------------------------------------------------------------------------------------
// backward

__global__ void iota_kernel(int *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i;
}

enum { WTE_ROW_LANES = 8, WTE_UNROLL = 4 };

// dwte[token, :] += sum of dout[row, :] over the rows holding that token.
// sorted_tokens, sorted_rows: the (token, row) pairs sorted by token, rows ascending within a
// token. A block walks the sorted positions with a grid stride; at the first position of a
// token it sums that token's rows: lane threadIdx.y takes every WTE_ROW_LANES-th row, then
// the lanes are added in order (sorted order is monotone, so a lane stops at its first row
// of another token). Block (32, WTE_ROW_LANES); blockIdx.y picks 32*VEC channels.
template <int VEC>
__global__ void __launch_bounds__(32 * WTE_ROW_LANES)
    encoder_backward_wte_kernel(bf16 *__restrict__ dwte, const bf16 *__restrict__ dout,
                                const unsigned int *__restrict__ sorted_tokens,
                                const int *__restrict__ sorted_rows, int N, int C) {
    __shared__ float sums[WTE_ROW_LANES][VEC][32];
    const int c = (blockIdx.y * 32 + threadIdx.x) * VEC;
    for (int start = blockIdx.x; start < N; start += gridDim.x) {
        const unsigned int token = sorted_tokens[start];
        if (start > 0 && sorted_tokens[start - 1] == token) continue;   // the same for the block
        float acc[VEC] = {};
        if (c < C) {
            // WTE_UNROLL rows per lane per round, so that frequent tokens keep loads in flight
            for (int i = start + threadIdx.y;; i += WTE_ROW_LANES * WTE_UNROLL) {
                int rows[WTE_UNROLL];
#pragma unroll
                for (int u = 0; u < WTE_UNROLL; u++) {
                    const int j = i + u * WTE_ROW_LANES;
                    rows[u] = (j < N && sorted_tokens[j] == token) ? sorted_rows[j] : -1;
                }
#pragma unroll
                for (int u = 0; u < WTE_UNROLL; u++) {
                    if (rows[u] < 0) break;
                    float x[VEC];
                    load_bf16<VEC>(x, dout + (size_t)rows[u] * C + c);
#pragma unroll
                    for (int k = 0; k < VEC; k++) acc[k] += x[k];
                }
                if (rows[WTE_UNROLL - 1] < 0) break;
            }
        }
#pragma unroll
        for (int k = 0; k < VEC; k++) sums[threadIdx.y][k][threadIdx.x] = acc[k];
        __syncthreads();
        if (threadIdx.y == 0 && c < C) {
            float total[VEC], w[VEC];
            load_bf16<VEC>(w, dwte + (size_t)token * C + c);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                total[k] = 0.0f;
#pragma unroll
                for (int lane = 0; lane < WTE_ROW_LANES; lane++) total[k] += sums[lane][k][threadIdx.x];
                total[k] += w[k];
            }
            store_bf16<VEC>(dwte + (size_t)token * C + c, total);
        }
        __syncthreads();
    }
}

// dwpe[t, :] += sum over b of dout[b, t, :], one thread per VEC channels of one position
template <int VEC>
__global__ void encoder_backward_wpe_kernel(bf16 *__restrict__ dwpe, const bf16 *__restrict__ dout,
                                            int B, int T, int C) {
    const int nvec = C / VEC;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * nvec) return;
    const int t = idx / nvec, c = (idx % nvec) * VEC;
    float acc[VEC];
    load_bf16<VEC>(acc, dwpe + (size_t)t * C + c);
#pragma unroll 4
    for (int b = 0; b < B; b++) {
        float x[VEC];
        load_bf16<VEC>(x, dout + ((size_t)b * T + t) * C + c);
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] += x[k];
    }
    store_bf16<VEC>(dwpe + (size_t)t * C + c, acc);
}

// The scratch of the sort (the caller's, encoder_backward_scratch_size): sorted keys, row
// indices in and out, each array_bytes, then CUB's temporary space (cub_bytes, which grows
// with N, so scratch for N serves fewer rows).
static size_t round_up_256(size_t x) { return (x + 255) & ~(size_t)255; }

static size_t sort_array_bytes(int N) { return round_up_256((size_t)N * sizeof(int)); }

static size_t sort_cub_bytes(int N) {
    size_t cub_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, cub_bytes, (const unsigned int *)NULL,
                                               (unsigned int *)NULL, (const int *)NULL,
                                               (int *)NULL, N, 0, 32, cuda_stream));
    return cub_bytes;
}

size_t encoder_backward_scratch_size(int B, int T) {
    ensure_backend();
    const int N = B * T;
    return 3 * sort_array_bytes(N) + sort_cub_bytes(N);
}

template <int VEC>
static void encoder_backward_launch(floatX *dwte, floatX *dwpe, void *scratch, const floatX *dout,
                                    const int *tokens, int B, int T, int C) {
    const int N = B * T;
    size_t cub_bytes = sort_cub_bytes(N);
    const size_t array_bytes = sort_array_bytes(N);
    char *base = (char *)scratch;
    unsigned int *sorted_tokens = (unsigned int *)base;
    int *rows = (int *)(base + array_bytes);
    int *sorted_rows = (int *)(base + 2 * array_bytes);
    void *cub_temp = base + 3 * array_bytes;

    iota_kernel<<<ceil_div(N, 256), 256, 0, cuda_stream>>>(rows, N);
    LAUNCH_CHECK();
    // tokens are non-negative, so sorting their bits as unsigned orders them
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, (const unsigned int *)tokens,
                                               sorted_tokens, rows, sorted_rows, N, 0, 32,
                                               cuda_stream));
    int walkers = 8 * cuda_num_sms;
    if (walkers > N) walkers = N;
    dim3 grid(walkers, ceil_div(C, 32 * VEC)), block(32, WTE_ROW_LANES);
    encoder_backward_wte_kernel<VEC><<<grid, block, 0, cuda_stream>>>(
        BF(dwte), CBF(dout), sorted_tokens, sorted_rows, N, C);
    LAUNCH_CHECK();
    encoder_backward_wpe_kernel<VEC><<<ceil_div((long)T * (C / VEC), 256), 256, 0, cuda_stream>>>(
        BF(dwpe), CBF(dout), B, T, C);
    LAUNCH_CHECK();
}

void encoder_backward(floatX *dwte, floatX *dwpe, void *scratch, const floatX *dout,
                      const int *tokens, int B, int T, int C) {
    if (C % 8 == 0 && is_aligned16(dwte) && is_aligned16(dwpe) && is_aligned16(dout))
        encoder_backward_launch<8>(dwte, dwpe, scratch, dout, tokens, B, T, C);
    else
        encoder_backward_launch<1>(dwte, dwpe, scratch, dout, tokens, B, T, C);
}
