// device_cpu.c: the CPU backend's "device": host memory, with the same accounting the CUDA
// backend keeps, so the program's memory report reads the same on both.
// Every block carries a small header holding its size, which is how dev_free knows how many
// bytes to take off the in-use count.
#include "device.h"
#include "../utils.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// 64 bytes keeps the block after the header cache-line aligned (and AVX-512 aligned).
#define BLOCK_ALIGN 64

typedef struct {
    size_t bytes;   // what the caller asked for
} BlockHeader;

static size_t bytes_in_use = 0;
static size_t bytes_peak = 0;

const char *backend_name(void) { return "cpu"; }

int backend_init(void) { return 0; }

double device_peak_flops(const char **source) {
    *source = "";
    return 0.0;   // a CPU's rate depends on its cores, clock and vector units: not tabled
}

size_t device_memory_total(void) {
    long pages = sysconf(_SC_PHYS_PAGES);
    long page_size = sysconf(_SC_PAGESIZE);
    if (pages < 0 || page_size < 0) return 0;
    return (size_t)pages * (size_t)page_size;
}

size_t backend_workspace_size(void) { return 0; }

size_t device_memory_free(void) {
    long pages = sysconf(_SC_AVPHYS_PAGES);
    long page_size = sysconf(_SC_PAGESIZE);
    if (pages < 0 || page_size < 0) return 0;
    return (size_t)pages * (size_t)page_size;
}

void backend_describe(char *buf, size_t n) {
    char total[32];
    format_bytes(total, sizeof(total), (double)device_memory_total());
    snprintf(buf, n, "CPU, %d OpenMP threads, %s RAM, fp32", omp_get_max_threads(), total);
}

void *dev_try_malloc(size_t bytes) {
    void *block = NULL;
    if (bytes > SIZE_MAX - BLOCK_ALIGN || posix_memalign(&block, BLOCK_ALIGN, BLOCK_ALIGN + bytes) != 0)
        return NULL;
    ((BlockHeader *)block)->bytes = bytes;
    bytes_in_use += bytes;
    if (bytes_in_use > bytes_peak) bytes_peak = bytes_in_use;
    return (char *)block + BLOCK_ALIGN;
}

void *dev_malloc(size_t bytes, const char *what) {
    void *p = dev_try_malloc(bytes);
    if (!p) {
        char asked[32], avail[32], used[32];
        format_bytes(asked, sizeof(asked), (double)bytes);
        format_bytes(avail, sizeof(avail), (double)device_memory_free());
        format_bytes(used, sizeof(used), (double)bytes_in_use);
        die("out of memory allocating %s (%zu bytes) for %s: %s free, %s in use",
            asked, bytes, what, avail, used);
    }
    return p;
}

void dev_free(void *p) {
    if (p == NULL) return;
    BlockHeader *block = (BlockHeader *)((char *)p - BLOCK_ALIGN);
    bytes_in_use -= block->bytes;
    free(block);
}

// Copies and fills of two blocks or more run on all threads, a block each: on fresh memory
// (the arenas at start-up) the first touch of every page is a page fault, and faults on
// several cores are handled side by side (6 GiB of fresh memory on the 2-vCPU development
// machine: 2.7-4.5 s on one thread, 1.3-1.7 s on two).
enum { PARALLEL_BLOCK = 1 << 20 };

static size_t block_bytes(size_t bytes, size_t start) {
    return bytes - start < PARALLEL_BLOCK ? bytes - start : PARALLEL_BLOCK;
}

static void copy_bytes(void *dst, const void *src, size_t bytes) {
    const size_t blocks = (bytes + PARALLEL_BLOCK - 1) / PARALLEL_BLOCK;
#pragma omp parallel for schedule(static) if (blocks >= 2)
    for (size_t b = 0; b < blocks; b++) {
        const size_t start = b * PARALLEL_BLOCK;
        memcpy((char *)dst + start, (const char *)src + start, block_bytes(bytes, start));
    }
}

void dev_memset_zero(void *p, size_t bytes) {
    const size_t blocks = (bytes + PARALLEL_BLOCK - 1) / PARALLEL_BLOCK;
#pragma omp parallel for schedule(static) if (blocks >= 2)
    for (size_t b = 0; b < blocks; b++) {
        const size_t start = b * PARALLEL_BLOCK;
        memset((char *)p + start, 0, block_bytes(bytes, start));
    }
}
void dev_upload(void *dst, const void *src_host, size_t bytes) { copy_bytes(dst, src_host, bytes); }
void dev_upload_async(void *dst, const void *src_host, size_t bytes) { copy_bytes(dst, src_host, bytes); }
void dev_download(void *dst_host, const void *src, size_t bytes) { copy_bytes(dst_host, src, bytes); }

void *dev_host_alloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die("out of host memory for %s (%zu bytes)", what, bytes);
    return p;
}
void dev_host_free(void *p) { free(p); }
struct DevEvent {
    int unused;
};
DevEvent *dev_event_new(void) {
    DevEvent *e = calloc(1, sizeof(DevEvent));
    if (!e) die("out of host memory for an event");
    return e;
}
void dev_event_record(DevEvent *e) { (void)e; }
void dev_event_wait(DevEvent *e) { (void)e; }
void dev_event_free(DevEvent *e) { free(e); }
void dev_copy(void *dst, const void *src, size_t bytes) { copy_bytes(dst, src, bytes); }
void dev_synchronize(void) {}
void dev_branch_begin(void) {}
void dev_branch_end(void) {}
void dev_branch_join(void) {}
size_t dev_bytes_in_use(void) { return bytes_in_use; }
size_t dev_bytes_peak(void) { return bytes_peak; }

// floatX is float on the CPU, so the conversions are copies
void floatX_upload(floatX *dst, const float *src_host, size_t n) {
    copy_bytes(dst, src_host, n * sizeof(float));
}
void floatX_download(float *dst_host, const floatX *src, size_t n) {
    copy_bytes(dst_host, src, n * sizeof(float));
}
void floatX_from_float(floatX *dst, const float *src, size_t n) {
    if (dst != src) copy_bytes(dst, src, n * sizeof(float));
}

float dev_read_float(const float *p) { return *p; }
