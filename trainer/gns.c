/*  gns.c - the gradient-noise measure's host logic (gns.h). */
#include "trainer/gns.h"

#include <math.h>

int trn_gns_measures(long step, int log_every)
{
    return log_every >= 1 && (step + 1) % log_every == 0;
}

int trn_gns_half(int nb)
{
    return nb >= 2 ? nb / 2 : 0;
}

int trn_gns_small(const double sq[2], int half, int nb, double *gs_small, int *b_small)
{
    if (half < 1 || half >= nb)
        return -1;
    int both = nb - half == half;
    if (!(sq[0] >= 0) || !isfinite(sq[0]) ||
        (both && (!(sq[1] >= 0) || !isfinite(sq[1]))))
        return -1;
    double ra = (double)nb / half;
    double g = sq[0] * ra * ra;
    if (both) {
        double rb = (double)nb / (nb - half);
        g = 0.5 * (g + sq[1] * rb * rb);
    }
    *gs_small = g;
    *b_small = half;
    return 0;
}
