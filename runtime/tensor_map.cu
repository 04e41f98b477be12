// tensor_map.cu: TMA tensor maps, encoded through the driver and kept in a table (tensor_map.h).
#include <cudaTypedefs.h>

#include "cuda_common.cuh"
#include "tensor_map.h"

// cuTensorMapEncodeTiled from the driver, found through the runtime (so no -lcuda)
static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    if (!fn) {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult found;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                    cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || !p)
            die("tensor_map: the CUDA driver has no cuTensorMapEncodeTiled");
        fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }
    return fn;
}

const CUtensorMap *tensor_map_4d(const void *ptr, CUtensorMapDataType type, int cols, int heads,
                                 int T, int B, int box_cols, int rows) {
    struct Entry {
        const void *ptr;
        CUtensorMapDataType type;
        int cols, heads, T, B, box_cols, rows;
        CUtensorMap map;
    };
    // 48 layers x (two forward maps, three backward ones, four decode weights) and the decode
    // step's inputs fit
    constexpr int kEntries = 1024;
    static Entry table[kEntries];
    static int used = 0, next = 0;
    for (int i = 0; i < used; i++) {
        const Entry &e = table[i];
        if (e.ptr == ptr && e.type == type && e.cols == cols && e.heads == heads && e.T == T &&
            e.B == B && e.box_cols == box_cols && e.rows == rows)
            return &e.map;
    }
    Entry &e = table[next];
    next = (next + 1) % kEntries;
    if (used < kEntries) used++;
    e = Entry{ptr, type, cols, heads, T, B, box_cols, rows, {}};
    const cuuint64_t elem = type == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ? 4 : 2;
    const cuuint64_t dims[4] = {(cuuint64_t)cols, (cuuint64_t)heads, (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t strides[3] = {cols * elem, (cuuint64_t)heads * cols * elem,
                                   (cuuint64_t)T * heads * cols * elem};   // bytes, of dims 1..3
    const cuuint32_t box[4] = {(cuuint32_t)box_cols, 1, (cuuint32_t)rows, 1};
    const cuuint32_t unit[4] = {1, 1, 1, 1};
    const CUresult r = tensor_map_encoder()(
        &e.map, type, 4, const_cast<void *>(ptr), dims, strides, box, unit,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        die("tensor_map: cuTensorMapEncodeTiled failed (%d) for %p: %d x %d x %d x %d values of "
            "%d bytes, boxes of %d x %d", (int)r, ptr, cols, heads, T, B, (int)elem, box_cols, rows);
    return &e.map;
}
