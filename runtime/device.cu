// device.cu: the CUDA backend's device, memory and conversions: uses the current GPU (0, or
// the one comm_init chose), creates the one stream and the cuBLAS/cuBLASLt handles, allocates
// with accounting (in use, peak) and says clearly what did not fit when the GPU runs out of
// memory.
#include "cuda_common.cuh"

#include <string.h>

cudaStream_t cuda_stream;
cublasHandle_t cublas_handle;
cublasLtHandle_t cublaslt_handle;
void *cublaslt_workspace;
size_t cublaslt_workspace_size = 32u << 20;   // cuBLASLt's heuristics pick faster kernels with it
int cuda_num_sms;

static int backend_ready = 0;
static cudaDeviceProp device_prop;

void cuda_fail(cudaError_t err, const char *what, const char *file, int line) {
    die("CUDA error at %s:%d: %s: %s", file, line, what, cudaGetErrorString(err));
}

void cublas_fail(cublasStatus_t status, const char *what, const char *file, int line) {
    die("cuBLAS error at %s:%d: %s: %s", file, line, what, cublasGetStatusString(status));
}

const char *backend_name(void) { return "cuda"; }

int backend_init(void) {
    if (backend_ready) return 0;
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        // not fatal here: a test or benchmark without a GPU skips; a program dies after it
        note("no CUDA device: %s",
             err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount found none");
        cudaGetLastError();   // clear the sticky error so later checks report their own
        return -1;
    }
    // the current device: GPU 0 unless comm_init picked this process's GPU of several
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaGetDeviceProperties(&device_prop, device));
    cuda_num_sms = device_prop.multiProcessorCount;
    CUDA_CHECK(cudaStreamCreate(&cuda_stream));
    CUBLAS_CHECK(cublasCreate(&cublas_handle));
    CUBLAS_CHECK(cublasSetStream(cublas_handle, cuda_stream));
    CUBLAS_CHECK(cublasLtCreate(&cublaslt_handle));
    backend_ready = 1;   // before dev_malloc, which initialises the backend when it is not
    cublaslt_workspace = dev_malloc(cublaslt_workspace_size, "cuBLAS(Lt) workspace");
    // cuBLAS shares it: both run on cuda_stream, one call after another. Given a workspace,
    // cuBLAS allocates nothing later (which would break CUDA graph capture).
    CUBLAS_CHECK(cublasSetWorkspace(cublas_handle, cublaslt_workspace, cublaslt_workspace_size));
    return 0;
}

void backend_describe(char *buf, size_t n) {
    if (backend_init() != 0) {
        snprintf(buf, n, "cuda: no device");
        return;
    }
    snprintf(buf, n, "%s, %d SMs, %.1f GiB, compute capability %d.%d", device_prop.name,
             device_prop.multiProcessorCount, device_prop.totalGlobalMem / 1073741824.0,
             device_prop.major, device_prop.minor);
}

size_t backend_workspace_size(void) { return cublaslt_workspace_size; }

bool cuda_is_sm90(void) {
    static int is = -1;   // asked of the driver: callers may come before the backend's init
    if (is < 0) {
        int dev, major, minor;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        is = major == 9 && minor == 0;
    }
    return is;
}

bool pdl_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) {
        enabled = env_flag("CUDA_PDL", 1) && device_prop.major >= 9;
    }
    return enabled;
}

// Dense bf16 tensor-core peaks (TFLOP/s, without sparsity) from NVIDIA's datasheets, by the
// device name the driver reports; the first entry whose name is part of the device's name
// wins, so the more specific names come first.
static const struct { const char *name; double tflops; } peak_table[] = {
    {"GH200", 989.4},    {"H200 NVL", 835.0}, {"H200", 989.4},
    {"H100 NVL", 835.0}, {"H100 PCIe", 756.0}, {"H100", 989.4},   // "H100 80GB HBM3": SXM
    {"H800", 989.4},
    {"A100", 312.0},     {"A800", 312.0},
    {"L40S", 362.1},     {"L40", 181.0},     {"L4", 121.0},    {"A10", 125.0},
};

double device_peak_flops(const char **source) {
    static char desc[160];
    *source = "";
    if (backend_init() != 0) return 0.0;
    for (size_t i = 0; i < sizeof(peak_table) / sizeof(peak_table[0]); i++)
        if (strstr(device_prop.name, peak_table[i].name)) {
            snprintf(desc, sizeof(desc), "%s datasheet, dense bf16", peak_table[i].name);
            *source = desc;
            return peak_table[i].tflops * 1e12;
        }
    return 0.0;
}

size_t device_memory_total(void) {
    if (backend_init() != 0) return 0;
    return device_prop.totalGlobalMem;
}

size_t device_memory_free(void) {
    size_t free_bytes = 0, total_bytes = 0;
    if (backend_init() != 0) return 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return free_bytes;
}

// ----------------------------------------------------------------------------------------
// allocations through dev_malloc, with their sizes, for the in-use and peak figures

typedef struct {
    void *ptr;
    size_t bytes;
} Allocation;
static Allocation *allocations = NULL;
static int allocations_count = 0, allocations_capacity = 0;
static size_t bytes_in_use = 0, bytes_peak = 0;

void ensure_backend(void) {
    if (backend_init() != 0) die("the CUDA backend needs a GPU");
}

void *dev_try_malloc(size_t bytes) {
    ensure_backend();
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return NULL;
    }
    if (err != cudaSuccess) cuda_fail(err, "cudaMalloc", __FILE__, __LINE__);
    if (allocations_count == allocations_capacity) {
        allocations_capacity = allocations_capacity ? 2 * allocations_capacity : 64;
        allocations = (Allocation *)realloc(allocations, allocations_capacity * sizeof(Allocation));
        if (!allocations) die("out of host memory recording a GPU allocation");
    }
    allocations[allocations_count++] = Allocation{p, bytes};
    bytes_in_use += bytes;
    if (bytes_in_use > bytes_peak) bytes_peak = bytes_in_use;
    return p;
}

void *dev_malloc(size_t bytes, const char *what) {
    void *p = dev_try_malloc(bytes);
    if (!p) {
        size_t free_bytes = 0, total_bytes = 0;
        cudaMemGetInfo(&free_bytes, &total_bytes);
        const double MiB = 1048576.0;
        die("out of GPU memory: %s needs %.1f MiB, but the GPU has %.1f MiB free of %.1f MiB "
            "(%.1f MiB already allocated by this program).\nTry a smaller batch size (-b).",
            what, bytes / MiB, free_bytes / MiB, total_bytes / MiB, bytes_in_use / MiB);
    }
    return p;
}

void dev_free(void *p) {
    if (!p) return;
    for (int i = 0; i < allocations_count; i++) {
        if (allocations[i].ptr == p) {
            bytes_in_use -= allocations[i].bytes;
            allocations[i] = allocations[--allocations_count];
            CUDA_CHECK(cudaFree(p));
            return;
        }
    }
    die("dev_free of %p, which dev_malloc did not allocate", p);
}

size_t dev_bytes_in_use(void) { return bytes_in_use; }
size_t dev_bytes_peak(void) { return bytes_peak; }

// ----------------------------------------------------------------------------------------
// copies, all on cuda_stream. Uploads and downloads return when the host buffer may be
// reused (upload) or holds the data (download).

void dev_memset_zero(void *p, size_t bytes) {
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_stream));
}

void dev_upload(void *dst, const void *src_host, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, cuda_stream));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
}

// Pinned staging for dev_upload_async: a few slots used in turn, each reused only once the copy
// out of it has finished (its event; for a slot last used UPLOAD_SLOTS uploads ago that has long
// happened, so the wait costs nothing). Pinned, because a pageable cudaMemcpyAsync is staged by
// the driver and returns only when the copy is done, i.e. after all the stream's earlier work.
// The slots grow to the largest upload seen and live as long as the process.
enum { UPLOAD_SLOTS = 4 };
static struct {
    void *host;
    size_t bytes;
    cudaEvent_t done;   // recorded after the slot's last copy; NULL before its first
} upload_slots[UPLOAD_SLOTS];
static int upload_next = 0;

void dev_upload_async(void *dst, const void *src_host, size_t bytes) {
    if (bytes == 0) return;
    ensure_backend();
    auto &slot = upload_slots[upload_next];
    upload_next = (upload_next + 1) % UPLOAD_SLOTS;
    if (slot.done) CUDA_CHECK(cudaEventSynchronize(slot.done));
    else CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
    if (slot.bytes < bytes) {
        if (slot.host) CUDA_CHECK(cudaFreeHost(slot.host));
        CUDA_CHECK(cudaMallocHost(&slot.host, bytes));
        slot.bytes = bytes;
    }
    memcpy(slot.host, src_host, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, slot.host, bytes, cudaMemcpyHostToDevice, cuda_stream));
    CUDA_CHECK(cudaEventRecord(slot.done, cuda_stream));
}

void *dev_host_alloc(size_t bytes, const char *what) {
    ensure_backend();
    void *p = NULL;
    cudaError_t err = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocMapped);
    if (err != cudaSuccess) die("out of pinned host memory for %s (%zu bytes): %s", what, bytes,
                                cudaGetErrorString(err));
    // with unified addressing (every 64-bit platform CUDA runs on) the device uses the same
    // pointer; the kernels that write here are given the host pointer
    void *on_device = NULL;
    CUDA_CHECK(cudaHostGetDevicePointer(&on_device, p, 0));
    if (on_device != p) die("pinned host memory for %s is mapped at another address", what);
    return p;
}

void dev_host_free(void *p) {
    if (p) CUDA_CHECK(cudaFreeHost(p));
}

struct DevEvent {
    cudaEvent_t event;
};

DevEvent *dev_event_new(void) {
    ensure_backend();
    DevEvent *e = (DevEvent *)malloc(sizeof(DevEvent));
    if (!e) die("out of host memory for an event");
    CUDA_CHECK(cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming));
    return e;
}

void dev_event_record(DevEvent *e) { CUDA_CHECK(cudaEventRecord(e->event, cuda_stream)); }
void dev_event_wait(DevEvent *e) { CUDA_CHECK(cudaEventSynchronize(e->event)); }

void dev_event_free(DevEvent *e) {
    if (!e) return;
    CUDA_CHECK(cudaEventDestroy(e->event));
    free(e);
}

void dev_download(void *dst_host, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, cuda_stream));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
}

void dev_copy(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream));
}

void dev_synchronize(void) { CUDA_CHECK(cudaStreamSynchronize(cuda_stream)); }

// the branches: their streams, the main stream while cuda_stream is a branch's, the event that
// forks each from the main stream and those that join them (created as first needed)
static cudaStream_t branch_stream[DEV_MAX_BRANCHES], main_stream;
static cudaEvent_t branch_fork, branch_done[DEV_MAX_BRANCHES];
static int in_branch, branches_ended;

void dev_branch_begin(void) {
    if (in_branch) die("dev_branch_begin: a branch is already open (one at a time)");
    if (branches_ended == DEV_MAX_BRANCHES)
        die("dev_branch_begin: %d branches ended and not joined (at most DEV_MAX_BRANCHES)",
            branches_ended);
    const int i = branches_ended;
    if (!branch_fork) CUDA_CHECK(cudaEventCreateWithFlags(&branch_fork, cudaEventDisableTiming));
    if (!branch_stream[i]) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&branch_stream[i], cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&branch_done[i], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaEventRecord(branch_fork, cuda_stream));
    CUDA_CHECK(cudaStreamWaitEvent(branch_stream[i], branch_fork, 0));
    main_stream = cuda_stream;
    cuda_stream = branch_stream[i];   // every launch reads cuda_stream; cuBLAS keeps its own
    CUBLAS_CHECK(cublasSetStream(cublas_handle, cuda_stream));
    in_branch = 1;
}

void dev_branch_end(void) {
    if (!in_branch) die("dev_branch_end: no branch is open");
    CUDA_CHECK(cudaEventRecord(branch_done[branches_ended], cuda_stream));
    cuda_stream = main_stream;
    CUBLAS_CHECK(cublasSetStream(cublas_handle, cuda_stream));
    in_branch = 0;
    branches_ended++;
}

void dev_branch_join(void) {
    if (in_branch) die("dev_branch_join: a branch is still open");
    for (int i = 0; i < branches_ended; i++)
        CUDA_CHECK(cudaStreamWaitEvent(cuda_stream, branch_done[i], 0));
    branches_ended = 0;
}

float dev_read_float(const float *p) {
    float x;
    dev_download(&x, p, sizeof(float));
    return x;
}

// ----------------------------------------------------------------------------------------
// fp32 <-> bf16. Host arrays are converted on the host (round to nearest even, the same
// rounding as the device's __float2bfloat16_rn) through a bounded staging buffer.

enum { STAGING_ELEMS = 1 << 22 };   // 8 MiB of bf16 per transfer

// the host staging buffer of a transfer of n elements, and the elements of the transfer's
// chunk that starts at element start
static bf16 *staging_alloc(size_t n) {
    bf16 *staging = (bf16 *)malloc(sizeof(bf16) * (n < STAGING_ELEMS ? n : STAGING_ELEMS));
    if (!staging && n) die("out of host memory staging %zu values for the GPU", n);
    return staging;
}
static size_t staging_count(size_t n, size_t start) {
    return n - start < STAGING_ELEMS ? n - start : STAGING_ELEMS;
}

void floatX_upload(floatX *dst, const float *src_host, size_t n) {
    bf16 *staging = staging_alloc(n);
    for (size_t start = 0; start < n; start += STAGING_ELEMS) {
        const size_t count = staging_count(n, start);
        for (size_t i = 0; i < count; i++) staging[i] = __float2bfloat16_rn(src_host[start + i]);
        dev_upload(dst + start, staging, count * sizeof(bf16));
    }
    free(staging);
}

void floatX_download(float *dst_host, const floatX *src, size_t n) {
    bf16 *staging = staging_alloc(n);
    for (size_t start = 0; start < n; start += STAGING_ELEMS) {
        const size_t count = staging_count(n, start);
        dev_download(staging, src + start, count * sizeof(bf16));
        for (size_t i = 0; i < count; i++) dst_host[start + i] = __bfloat162float(staging[i]);
    }
    free(staging);
}

// dst[i] = bf16(src[i]), 4 per thread when both are 16/8-byte aligned
template <int VEC>
__global__ void float_to_bf16_kernel(bf16 *dst, const float *src, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n) {
        float x[VEC];
        if constexpr (VEC == 4) {
            float4 f = *reinterpret_cast<const float4 *>(src + i);
            x[0] = f.x; x[1] = f.y; x[2] = f.z; x[3] = f.w;
        } else {
            x[0] = src[i];
        }
        store_bf16<VEC>(dst + i, x);
    } else {
        for (; i < n; i++) dst[i] = __float2bfloat16_rn(src[i]);
    }
}

void floatX_from_float(floatX *dst, const float *src, size_t n) {
    if (n == 0) return;
    launch_elementwise<4>(float_to_bf16_kernel<4>, float_to_bf16_kernel<1>,
                          is_aligned16(src) && ((uintptr_t)dst & 7) == 0, n, BF(dst), src, n);
    LAUNCH_CHECK();
}
