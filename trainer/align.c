/*  align.c - 64-byte aligned blocks (align.h). */
#include <stdlib.h>
#include <string.h>

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

int trn_regrow64(void **p, size_t bytes)
{
    void *q = trn_alloc64(bytes, 0);
    if (!q)
        return -1;
    free(*p);
    *p = q;
    return 0;
}
