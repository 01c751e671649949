/*  gather.c - the host's batch gather (gather.h): one row copy per
    example, in the epoch's order. The CUDA backend's device gather takes
    the same elements one by one (trn_gather_src). */
#include <string.h>

#include "trainer/bf16.h"
#include "trainer/gather.h"
#include "trainer/trn.h"

void trn_gather_rows(const float *x, const uint8_t *y, int dim, const int *perm, int at,
                     int nb, float *xo, uint8_t *yo)
{
    for (int r = 0; r < nb; r++) {
        int k = trn_gather_row(perm, at, r);
        memcpy(xo + (size_t)r * dim, x + (size_t)k * dim, (size_t)dim * sizeof(float));
        yo[r] = y[k];
    }
}

/* One row: no OpenMP region per row (trn_bf16_from_f32 opens one, even
   when it runs on one thread: 1024 of them cost more than the copy saved). */
TRN_CLONES static void s_row_bf16(uint16_t *restrict o, const float *restrict x, int dim)
{
    for (int i = 0; i < dim; i++)
        o[i] = trn_f2bf(x[i]);
}

void trn_gather_rows_bf16(const float *x, const uint8_t *y, int dim, const int *perm,
                          int at, int nb, uint16_t *xo, uint8_t *yo)
{
    for (int r = 0; r < nb; r++) {
        int k = trn_gather_row(perm, at, r);
        if (r + 1 < nb) { /* the next row's lines, while this one converts */
            const char *nx =
                (const char *)(x + (size_t)trn_gather_row(perm, at, r + 1) * dim);
            for (size_t b = 0; b < (size_t)dim * sizeof(float); b += 64)
                __builtin_prefetch(nx + b);
        }
        s_row_bf16(xo + (size_t)r * dim, x + (size_t)k * dim, dim);
        yo[r] = y[k];
    }
}

void trn_gather_rows_h(const uint16_t *x, const uint8_t *y, int dim, const int *perm,
                       int at, int nb, uint16_t *xo, uint8_t *yo)
{
    size_t row = (size_t)dim * sizeof *x;
    for (int r = 0; r < nb; r++) {
        int k = trn_gather_row(perm, at, r);
        if (r + 1 < nb) { /* the next row's lines, while this one copies */
            const char *nx =
                (const char *)(x + (size_t)trn_gather_row(perm, at, r + 1) * dim);
            for (size_t b = 0; b < row; b += 64)
                __builtin_prefetch(nx + b);
            __builtin_prefetch(nx + row - 1); /* its last line, when unaligned */
        }
        memcpy(xo + (size_t)r * dim, x + (size_t)k * dim, row);
        yo[r] = y[k];
    }
}
