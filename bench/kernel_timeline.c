// kernel_timeline.c: a CUDA injection library that records when every kernel, memcpy and memset
// of a program ran on the GPU (CUPTI's activity API), as the program really runs them: back to
// back, at the clocks of a sustained run, with no replay. Nsight Compute times each kernel
// alone; Nsight Systems, which would show the timeline, is not on every GPU machine; this is
// the part of it that says where a training step's time goes between kernels.
//
//   gcc -shared -fPIC -O2 -I$CUDA/include bench/kernel_timeline.c -o libkernel_timeline.so -L$CUDA/lib -lcupti
//   CUDA_INJECTION64_PATH=$PWD/libkernel_timeline.so KERNEL_TIMELINE_OUT=run.csv ./program ...
//
// (make BACKEND=cuda build/cuda-flash/bench/libkernel_timeline.so builds it; any CUDA program
// works, llm.c's too.) The CUDA driver loads the library when the program first initialises
// CUDA and calls InitializeInjection; the records arrive in buffers, written as they complete,
// and the rest at exit. The output, one line per activity:
//   kind,start_ns,end_ns,stream,name      kind: kernel, memcpy or memset; name: the kernel's
//                                         (mangled) name, or the memcpy's direction
// scripts/timeline.py cuts a step out of it and splits its wall time into kernels, copies and
// the gaps where the GPU ran nothing.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cupti.h>

static FILE *out;

#define CUPTI_CHECK(call)                                                                     \
    do {                                                                                      \
        CUptiResult r_ = (call);                                                              \
        if (r_ != CUPTI_SUCCESS) {                                                            \
            const char *msg_ = "?";                                                           \
            cuptiGetResultString(r_, &msg_);                                                  \
            fprintf(stderr, "kernel_timeline: %s failed: %s\n", #call, msg_);                 \
            return r_;                                                                        \
        }                                                                                     \
    } while (0)

enum { BUFFER_BYTES = 8 << 20, ALIGN = 8 };

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    uint8_t *b = malloc(BUFFER_BYTES + ALIGN);
    *buffer = b ? (uint8_t *)(((uintptr_t)b + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1)) : NULL;
    *size = b ? BUFFER_BYTES : 0;
    *max_records = 0;   // as many as fit
    // the unaligned pointer is lost: a buffer lives as long as the process (a few per run)
}

static const char *copy_kind(uint8_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    default: return "other";
    }
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *record = NULL;
    while (out && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)record;
            fprintf(out, "kernel,%llu,%llu,%u,\"%s\"\n", (unsigned long long)k->start,
                    (unsigned long long)k->end, k->streamId, k->name ? k->name : "?");
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)record;
            fprintf(out, "memcpy,%llu,%llu,%u,%s %llu bytes\n", (unsigned long long)m->start,
                    (unsigned long long)m->end, m->streamId, copy_kind(m->copyKind),
                    (unsigned long long)m->bytes);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)record;
            fprintf(out, "memset,%llu,%llu,%u,%llu bytes\n", (unsigned long long)m->start,
                    (unsigned long long)m->end, m->streamId, (unsigned long long)m->bytes);
            break;
        }
        default: break;
        }
    }
    size_t dropped = 0;
    cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped);
    if (dropped) fprintf(stderr, "kernel_timeline: %zu records dropped\n", dropped);
}

static void at_exit(void) {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (out) fclose(out);
    out = NULL;
}

int InitializeInjection(void) {
    const char *path = getenv("KERNEL_TIMELINE_OUT");
    out = fopen(path ? path : "kernel_timeline.csv", "w");
    if (!out) {
        fprintf(stderr, "kernel_timeline: cannot write %s\n", path ? path : "kernel_timeline.csv");
        return 1;
    }
    fprintf(out, "kind,start_ns,end_ns,stream,name\n");
    CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
    CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
    atexit(at_exit);
    return 1;
}
