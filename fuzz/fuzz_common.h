// fuzz/fuzz_common.h: shared by the libFuzzer harnesses. A failed property aborts, which
// libFuzzer reports as a crash and saves the input that caused it.
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_ASSERT(cond, what)                                                  \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "fuzz property failed: %s (%s:%d)\n", what, __FILE__, __LINE__); \
            abort();                                                             \
        }                                                                        \
    } while (0)

#endif
