#include "ViewfinderKernels.h"
#if defined(__GLIBC__)
#include <malloc.h>
#endif

long long vf_heap_in_use_bytes(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 m = mallinfo2();
    return (long long)(m.uordblks + m.hblkhd);
#else
    return -1;
#endif
}
