/*  gather.c - the host's batch gather (gather.h): one row copy per
    example, in the epoch's order. The CUDA backend's device gather takes
    the same elements one by one (trn_gather_src). */
#include <string.h>

#include "trainer/gather.h"

void trn_gather_rows(const float *x, const uint8_t *y, int dim, const int *perm, int at,
                     int nb, float *xo, uint8_t *yo)
{
    for (int r = 0; r < nb; r++) {
        int k = trn_gather_row(perm, at, r);
        memcpy(xo + (size_t)r * dim, x + (size_t)k * dim, (size_t)dim * sizeof(float));
        yo[r] = y[k];
    }
}
