/*  warp.c - half-rank and Yeo-Johnson output warpings. See warp.h.

    Yeo-Johnson's lambda maximises the profile log likelihood of a normal
    model for the transformed values: -n/2 log var(psi(z)) plus the log
    Jacobian (lambda - 1) sum sign(z) log(1 + |z|). It is unimodal in
    lambda in practice; the golden-section search brackets [-3, 5] to
    1e-12 relative width (60 steps).
*/
#include "warp.h"
#include "sched.h"

#include <gsl/gsl_cdf.h>
#include <math.h>
#include <stdlib.h>

void warp_halfrank(double *y, int n)
{
    if (n < 4)
        return;
    sched_vi *r = malloc(sizeof(sched_vi) * (size_t)n);
    if (!r)
        return;
    for (int i = 0; i < n; i++)
        r[i] = (sched_vi){y[i], i};
    qsort(r, (size_t)n, sizeof *r, sched_vi_cmp);
    int half = (n - 1) / 2;
    double med = r[half].v, s = 0;
    for (int i = 0; i <= half; i++)
        s += (r[i].v - med) * (r[i].v - med);
    s = sqrt(s / (half + 1));
    if (s > 0) {
        for (int a = half + 1; a < n;) {
            int b = a; /* ties share their mean rank */
            while (b + 1 < n && r[b + 1].v == r[a].v)
                b++;
            double q = ((a + b) / 2.0 + 0.5) / n;
            double w = med + s * gsl_cdf_ugaussian_Pinv(q);
            for (int i = a; i <= b; i++)
                y[r[i].i] = fmin(r[i].v, w);
            a = b + 1;
        }
    }
    free(r);
}

double warp_yj(double z, double lambda)
{
    /* expm1: no cancellation as lambda nears 0 (or 2) */
    if (z >= 0)
        return fabs(lambda) < 1e-12 ? log1p(z) : expm1(lambda * log1p(z)) / lambda;
    double e = 2 - lambda;
    return fabs(e) < 1e-12 ? -log1p(-z) : -expm1(e * log1p(-z)) / e;
}

/* Profile log likelihood of lambda for the standardised values z. */
static double s_yj_ll(const double *z, int n, double lambda)
{
    double m = 0, v = 0, jac = 0;
    for (int i = 0; i < n; i++)
        m += warp_yj(z[i], lambda);
    m /= n;
    for (int i = 0; i < n; i++) {
        double t = warp_yj(z[i], lambda) - m;
        v += t * t;
        jac += (z[i] >= 0 ? 1 : -1) * log1p(fabs(z[i]));
    }
    v /= n;
    if (!(v > 0) || !isfinite(v))
        return -INFINITY;
    return -0.5 * n * log(v) + (lambda - 1) * jac;
}

double warp_yeojohnson(double *y, int n)
{
    if (n < 4)
        return 1;
    double m = 0, sd = 0;
    for (int i = 0; i < n; i++)
        m += y[i];
    m /= n;
    for (int i = 0; i < n; i++)
        sd += (y[i] - m) * (y[i] - m);
    sd = sqrt(sd / n);
    if (!(sd > 1e-12 * fmax(1.0, fabs(m))))
        return 1;
    double *z = malloc(sizeof(double) * (size_t)n);
    if (!z)
        return 1;
    for (int i = 0; i < n; i++)
        z[i] = (y[i] - m) / sd;
    const double g = 0.61803398874989484820;
    double a = -3, b = 5, c = b - g * (b - a), d = a + g * (b - a);
    double fc = s_yj_ll(z, n, c), fd = s_yj_ll(z, n, d);
    for (int it = 0; it < 60; it++) {
        if (fc > fd) {
            b = d;
            d = c;
            fd = fc;
            c = b - g * (b - a);
            fc = s_yj_ll(z, n, c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + g * (b - a);
            fd = s_yj_ll(z, n, d);
        }
    }
    double lambda = 0.5 * (a + b);
    for (int i = 0; i < n; i++)
        y[i] = warp_yj(z[i], lambda);
    free(z);
    return lambda;
}
