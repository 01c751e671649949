/*  align.c - 64-byte aligned blocks, and huge-page ones for the training
    set's rows (align.h). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "trainer/align.h"

void *trn_alloc64(size_t bytes, int zero)
{
    size_t n = (bytes + 63) / 64 * 64; /* aligned_alloc wants a multiple */
    if (n < bytes)
        return NULL; /* overflow */
    void *p = aligned_alloc(64, n ? n : 64);
    if (p && zero)
        memset(p, 0, n ? n : 64);
    return p;
}

void *trn_alloc_rows(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    if (bytes < huge)
        return trn_alloc64(bytes, 0);
    size_t n = (bytes + huge - 1) / huge * huge;
    if (n < bytes)
        return NULL; /* overflow */
    void *p = aligned_alloc(huge, n);
    if (p) /* advice: a kernel without transparent huge pages ignores it */
        (void)madvise(p, n, MADV_HUGEPAGE);
    return p;
}

int trn_regrow64(void **p, size_t bytes)
{
    void *q = trn_alloc64(bytes, 0);
    if (!q)
        return -1;
    free(*p);
    *p = q;
    return 0;
}
