/*  devplan.c - bucket layout and launch stages of the device-resident
    gradient exchange (see devplan.h; the ring's schedule is ring.c). */
#include "trainer/devplan.h"

int trn_devplan_buckets(int np, const long *pn, const int *stage, int nstages, long thr,
                        int overlap, trn_devbucket *out)
{
    int nb = 0, prev = 0;
    long off = 0;
    int i = np - 1;
    while (i >= 0) {
        trn_devbucket *b = &out[nb];
        b->first = i;
        b->off = off;
        b->n = 0;
        int st = 0;
        while (i >= 0) {
            b->n += pn[i];
            st = stage[i] > st ? stage[i] : st;
            i--;
            if (b->n * (long)sizeof(float) >= thr)
                break;
        }
        b->last = i + 1;
        st = st < prev ? prev : st; /* in order: never ahead of the one before */
        b->launch = overlap ? st : nstages - 1;
        prev = st;
        off += b->n;
        nb++;
    }
    return nb;
}

void trn_devplan_fit(const long *floats, const double *t, int ns, double *alpha,
                     double *beta)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int s = ns - 3; s < ns; s++) {
        double x = (double)floats[s] * 4;
        sx += x;
        sy += t[s];
        sxx += x * x;
        sxy += x * t[s];
    }
    double b = (3 * sxy - sx * sy) / (3 * sxx - sx * sx);
    if (!(b > 0))
        b = t[ns - 1] / ((double)floats[ns - 1] * 4);
    double a = (4 * t[0] - t[1]) / 3; /* floats[1] = 4 floats[0] */
    if (!(a > 0))
        a = t[0] / 2;
    if (a < 1e-7)
        a = 1e-7;
    *alpha = a;
    *beta = b;
}

double trn_devplan_ready(int np, const int *stage, int nstages, const double *stage_s,
                         double *ready)
{
    for (int i = 0; i < np; i++)
        ready[i] = stage_s[stage[i]];
    return stage_s[nstages - 1];
}
