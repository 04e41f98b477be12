// cross_sum.cu: what summing partial tiles across CTAs costs on this GPU, the number that decides
// how a fused FC + GELU + FC projection would meet its parts at a batch-64 decode step (issue 20;
// docs/PERF.md, thirty-second session: each cluster owns a slice of the hidden layer, so every
// output element of the FC projection is a sum of one partial per cluster, and the two waits
// that decide the design are these sums' time in L2 and the last partial's hand-over).
//
// The picture, per phase (one kernel a phase, launched with programmatic dependent launch in a
// CUDA graph, as the decode step runs):
//
//   CTA (part, p, q), p < P partials, q < Q tiles: a partial tile of R rows x W channels, fp32, in
//   registers (6 float4 a thread at 32 x 96: a thread owns 16-byte pieces t, t + 128, ...)
//     ──sum over p──► sum (PARTS, R, Q * W), fp32 ──the tile's last CTA──► out (PARTS, R, Q * W), bf16
//
// Forms of the sum (each verified: the partials are multiples of 1/4 below 4, so every order of
// the additions gives the same fp32 sum, and out is its bf16 rounding):
//   none      each CTA stores its partial to a slot of its own and exits: the boundary, the
//             stores, the floor the others are read against (out is not written)
//   red       red.global.add.f32, element by element, into sum; then a counter a tile (the
//             last-block pattern): the tile's last CTA reads sum, writes out and zeros sum
//   red.v4    the same with one 16-byte red.global.add.v4.f32 a piece
//   bulk      the partial staged in shared memory (row-major), added by cp.reduce.async.bulk,
//             one row (W * 4 bytes) an instruction from one thread, completion awaited, then
//             the counter as above
//   ordered   each CTA stores its partial to its slot, then the counter; the tile's last CTA
//             adds the P slots in order p = 0, 1, ... (the only deterministic form)
//
// usage: cross_sum [PARTS (2)] [P (16)] [Q (8)] [R (32)] [W (96)] [PHASES (2000)]
//   (bench/cross_sum.mk builds it; one GPU, sm_90; prints SKIP without one). The defaults are a
//   batch-64 step's two parts of 32 rows, 16 hidden slices and 8 CTAs a cluster of 96 output
//   channels each (768).
#include <cuda_bf16.h>

#include "../attention/flash_tile.cuh"   // smem_addr, bulk_reduce_add_f32, red_add(_v4), tma_*, fences
#define BENCH_NAME "cross_sum"
#include "standalone.cuh"   // CHECK, bench_device, atom_acq_rel, pdl_config, capture_graph, best_of_3

enum { THREADS = 128 };
enum Form { F_NONE, F_RED, F_RED_V4, F_BULK, F_ORDERED, F_COUNT };
static const char *form_names[F_COUNT] = {"none", "red", "red.v4", "bulk", "ordered"};

struct Shape {
    int parts, P, Q, R, W;
};

// the partial of CTA (part, p, q) at (row, col) in phase `phase`: a multiple of 1/4 in [0, 4), so
// that any order of P <= 64 additions is exact in fp32; every index in it, so that a tile, part or
// phase taken for another shows in the check
__host__ __device__ inline float partial_value(int phase, int part, int p, int q, int row, int col) {
    return (float)((p * 7 + row * 3 + col + phase * 5 + q * 11 + part * 13) & 15) * 0.25f;
}

// sum: (parts, R, Q * W) fp32, zero between phases; slots: (parts, P, Q, R * W) fp32; out:
// (parts, R, Q * W) bf16; counters: (parts, Q), zero between phases
template <int FORM>
__global__ void __launch_bounds__(THREADS) cross_sum(Shape s, int phase, float *sum, float *slots,
                                                     __nv_bfloat16 *out, unsigned *counters) {
    extern __shared__ __align__(16) unsigned char smem[];
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");   // the phase before's sums are zero again
    // (the bulk form adds through the async proxy to what the phase before zeroed with ordinary
    // stores: ordered explicitly, beside the grids' boundary)
    if (FORM == F_BULK && threadIdx.x == 0) fence_proxy_async_global();
    const int q = blockIdx.x % s.Q, p = blockIdx.x / s.Q % s.P, part = blockIdx.x / (s.Q * s.P);
    const int C = s.Q * s.W, pieces = s.R * s.W / 4, per_row = s.W / 4;
    float *tile_sum = sum + (size_t)part * s.R * C + (size_t)q * s.W;   // row r at + r * C
    float *slot = slots + (((size_t)part * s.P + p) * s.Q + q) * s.R * s.W;

    for (int i = threadIdx.x; i < pieces; i += THREADS) {   // this thread's pieces of the partial
        const int row = i / per_row, col = (i % per_row) * 4;
        const float4 v = make_float4(partial_value(phase, part, p, q, row, col),
                                     partial_value(phase, part, p, q, row, col + 1),
                                     partial_value(phase, part, p, q, row, col + 2),
                                     partial_value(phase, part, p, q, row, col + 3));
        float *at = tile_sum + (size_t)row * C + col;
        if (FORM == F_NONE || FORM == F_ORDERED) {
            __stcg(reinterpret_cast<float4 *>(slot) + i, v);
        } else if (FORM == F_RED) {
            red_add(at, v.x);
            red_add(at + 1, v.y);
            red_add(at + 2, v.z);
            red_add(at + 3, v.w);
        } else if (FORM == F_RED_V4) {
            red_add_v4(at, v);
        } else {   // F_BULK: staged row-major, R x W
            reinterpret_cast<float4 *>(smem)[i] = v;
        }
    }
    if (FORM == F_NONE) return;
    if (FORM == F_BULK) {
        fence_proxy_async_shared();   // the staged partial visible to the bulk copies
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int row = 0; row < s.R; row++)
                bulk_reduce_add_f32(tile_sum + (size_t)row * C, smem_addr(smem) + row * s.W * 4, s.W * 4);
            tma_commit();
            tma_wait();                  // the additions performed
            fence_proxy_async_global();  // ... and ordered before the count below
        }
    }

    // the tile's last CTA (the last-block pattern of runtime/cuda_common.cuh)
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *count = counters + (size_t)part * s.Q + q;
        last = atom_acq_rel(count, 1u) == (unsigned)s.P - 1;
        if (last) *count = 0;   // for the next phase (the next kernel waits for this one)
    }
    __syncthreads();
    if (!last) return;
    __nv_bfloat16 *tile_out = out + (size_t)part * s.R * C + (size_t)q * s.W;
    for (int i = threadIdx.x; i < pieces; i += THREADS) {
        const int row = i / per_row, col = (i % per_row) * 4;
        float4 v;
        if (FORM == F_ORDERED) {   // the P slots in order
            const float4 *first = reinterpret_cast<const float4 *>(slots + ((size_t)part * s.P * s.Q + q) * s.R * s.W);
            const size_t stride = (size_t)s.Q * s.R * s.W / 4;   // from partial p to p + 1
            v = __ldcg(first + i);
            for (int k = 1; k < s.P; k++) {
                const float4 w = __ldcg(first + k * stride + i);
                v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w;
            }
        } else {
            float4 *at = reinterpret_cast<float4 *>(tile_sum + (size_t)row * C + col);
            v = __ldcg(at);
            __stcg(at, make_float4(0.0f, 0.0f, 0.0f, 0.0f));   // zero for the next phase
        }
        __nv_bfloat162 *o = reinterpret_cast<__nv_bfloat162 *>(tile_out + (size_t)row * C + col);
        o[0] = __floats2bfloat162_rn(v.x, v.y);
        o[1] = __floats2bfloat162_rn(v.z, v.w);
    }
}

// the phase's out against its exact sum: the count of wrong elements
static long check_out(const Shape &s, int phase, const __nv_bfloat16 *d_out) {
    const int C = s.Q * s.W;
    const size_t n = (size_t)s.parts * s.R * C;
    __nv_bfloat16 *h = (__nv_bfloat16 *)malloc(n * sizeof(*h));
    CHECK(cudaMemcpy(h, d_out, n * sizeof(*h), cudaMemcpyDeviceToHost));
    long wrong = 0;
    for (size_t e = 0; e < n; e++) {
        const int ch = (int)(e % C), row = (int)(e / C % s.R), col = ch % s.W, q = ch / s.W;
        const int part = (int)(e / ((size_t)s.R * C));
        float want = 0.0f;
        for (int p = 0; p < s.P; p++) want += partial_value(phase, part, p, q, row, col);
        if (__bfloat162float(h[e]) != __bfloat162float(__float2bfloat16_rn(want))) wrong++;
    }
    free(h);
    return wrong;
}

// us a phase: the best of three runs of the graph of `phases` launches, after zeroing the sums,
// counters and out; then `wrong`: the elements of the last phase's out that are not its sum
static float time_form(int form, const Shape &s, int phases, float *sum, float *slots,
                       __nv_bfloat16 *out, unsigned *counters, cudaStream_t stream, long *wrong) {
    static void (*const kernels[F_COUNT])(Shape, int, float *, float *, __nv_bfloat16 *, unsigned *) = {
        cross_sum<F_NONE>, cross_sum<F_RED>, cross_sum<F_RED_V4>, cross_sum<F_BULK>, cross_sum<F_ORDERED>};
    const int blocks = s.parts * s.P * s.Q, C = s.Q * s.W;
    const size_t smem = form == F_BULK ? (size_t)s.R * s.W * 4 : 0;
    if (smem > 48 * 1024)
        CHECK(cudaFuncSetAttribute(kernels[form], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaGraphExec_t exec = capture_graph(stream, [&]() {
        for (int phase = 0; phase < phases; phase++) {
            cudaLaunchAttribute attr;
            const cudaLaunchConfig_t config = pdl_config(blocks, THREADS, smem, stream, &attr, true);
            CHECK(cudaLaunchKernelEx(&config, kernels[form], s, phase, sum, slots, out, counters));
        }
    });
    auto prepare = [&]() {   // sums and counters from zero, out poisoned (NaN)
        CHECK(cudaMemsetAsync(sum, 0, (size_t)s.parts * s.R * C * sizeof(float), stream));
        CHECK(cudaMemsetAsync(counters, 0, (size_t)s.parts * s.Q * sizeof(unsigned), stream));
        CHECK(cudaMemsetAsync(out, 0xff, (size_t)s.parts * s.R * C * sizeof(__nv_bfloat16), stream));
    };
    const float us = best_of_3(stream, phases, prepare, [&]() { CHECK(cudaGraphLaunch(exec, stream)); });
    *wrong = form == F_NONE ? 0 : check_out(s, phases - 1, out);
    CHECK(cudaGraphExecDestroy(exec));
    return us;
}

int main(int argc, char **argv) {
    Shape s = {2, 16, 8, 32, 96};
    int phases = 2000;
    int *fields[] = {&s.parts, &s.P, &s.Q, &s.R, &s.W, &phases};
    for (int i = 1; i < argc && i <= 6; i++) *fields[i - 1] = atoi(argv[i]);
    if (argc > 7 || s.parts < 1 || s.parts > 8 || s.P < 1 || s.P > 64 || s.Q < 1 || s.Q > 64 ||
        s.R < 1 || s.R > 64 || s.W < 4 || s.W % 4 || s.W > 256 || phases < 2) {
        fprintf(stderr, "usage: cross_sum [PARTS 1..8] [P 1..64] [Q 1..64] [R 1..64] [W 4..256, a "
                        "multiple of 4] [PHASES >= 2: the sums' zeroing is checked by the next]\n");
        return 2;
    }
    cudaDeviceProp prop;
    if (!bench_device(&prop)) return 0;
    if (prop.major < 9) {
        printf("SKIP: %s is not sm_90 (red.v4 and the bulk reductions need it)\n", prop.name);
        return 0;
    }
    const int C = s.Q * s.W;
    const size_t out_n = (size_t)s.parts * s.R * C;
    float *sum, *slots;
    __nv_bfloat16 *out;
    unsigned *counters;
    CHECK(cudaMalloc(&sum, out_n * sizeof(float)));
    CHECK(cudaMalloc(&slots, (size_t)s.parts * s.P * s.Q * s.R * s.W * sizeof(float)));
    CHECK(cudaMalloc(&out, out_n * sizeof(__nv_bfloat16)));
    CHECK(cudaMalloc(&counters, (size_t)s.parts * s.Q * sizeof(unsigned)));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    const double partial_mb = (double)s.parts * s.P * s.Q * s.R * s.W * 4 / 1e6;
    printf("%s: %d parts x %d partials x %d tiles of %d x %d fp32 (%d CTAs of %d threads, %.2f MB "
           "of partials a phase), %d phases\n", prop.name, s.parts, s.P, s.Q, s.R, s.W,
           s.parts * s.P * s.Q, THREADS, partial_mb, phases);
    printf("| form | us a phase | over none | out |\n|---|--:|--:|---|\n");
    float none = 0.0f;
    int failed = 0;
    for (int form = 0; form < F_COUNT; form++) {
        long wrong = 0;
        const float us = time_form(form, s, phases, sum, slots, out, counters, stream, &wrong);
        if (form == F_NONE) none = us;
        printf("| %s | %.3f | %+.3f | %s |\n", form_names[form], us, us - none,
               form == F_NONE ? "-" : wrong ? "WRONG" : "exact");
        if (wrong) {
            fprintf(stderr, "cross_sum: %s: %ld of %zu elements of the last phase wrong\n",
                    form_names[form], wrong, out_n);
            failed = 1;
        }
    }
    return failed;
}
