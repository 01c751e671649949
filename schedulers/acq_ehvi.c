/*  acq_ehvi.c - expected hypervolume improvement over independent GPs
    (see acq_ehvi.h for the method). */
#include "acq_ehvi.h"

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_qrng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_VAR_FLOOR 1e-12

struct acq_ehvi {
    int m, d;
    gp_t *const *gps; /* m, borrowed */
    int nb;           /* boxes */
    double *lo, *hi;  /* nb x m each; lo may be -INFINITY */
    int ns;           /* draws */
    double *z;        /* ns x m standard normal draws */
};

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* p weakly dominates q (p <= q in every objective) */
static int s_weakly_dominates(const double *p, const double *q, int m)
{
    for (int k = 0; k < m; k++)
        if (p[k] > q[k])
            return 0;
    return 1;
}

/* The front points below ref that no other kept point dominates, into P
   (np x m; returns how many). Duplicates are kept once. */
static int s_nondominated(const double *front, int np, const double *ref, int m,
                          double *P)
{
    int k = 0;
    for (int i = 0; i < np; i++) {
        const double *p = front + (size_t)i * m;
        int below = 1;
        for (int j = 0; j < m; j++)
            below &= isfinite(p[j]) && p[j] < ref[j];
        if (!below)
            continue;
        int dominated = 0;
        for (int j = 0; j < np && !dominated; j++) {
            const double *q = front + (size_t)j * m;
            if (j == i || !s_weakly_dominates(q, p, m))
                continue;
            /* q <= p: p is out unless they are equal and p comes first */
            dominated = memcmp(q, p, sizeof(double) * (size_t)m) != 0 || j < i;
        }
        if (!dominated)
            memcpy(P + (size_t)(k++) * m, p, sizeof(double) * (size_t)m);
    }
    return k;
}

/* Cuts the non-dominated region below ref into boxes (see the header). */
static int s_boxes(acq_ehvi *e, const double *P, int np, const double *ref)
{
    int m = e->m, ax = m - 1; /* axes split into cells */
    double **c = calloc((size_t)(ax ? ax : 1), sizeof *c);
    int *nc = calloc((size_t)(ax ? ax : 1), sizeof *nc);
    int *idx = calloc((size_t)(ax ? ax : 1), sizeof *idx);
    int rc = -1;
    if (!c || !nc || !idx)
        goto out;
    size_t cells = 1;
    for (int k = 0; k < ax; k++) {
        c[k] = malloc(sizeof(double) * (size_t)(np ? np : 1));
        if (!c[k])
            goto out;
        for (int i = 0; i < np; i++)
            c[k][i] = P[(size_t)i * m + k];
        qsort(c[k], (size_t)np, sizeof(double), s_cmp_double);
        int u = 0;
        for (int i = 0; i < np; i++)
            if (u == 0 || c[k][i] != c[k][u - 1])
                c[k][u++] = c[k][i];
        nc[k] = u;
        cells *= (size_t)u + 1;
    }
    e->lo = malloc(sizeof(double) * cells * (size_t)m);
    e->hi = malloc(sizeof(double) * cells * (size_t)m);
    if (!e->lo || !e->hi)
        goto out;
    e->nb = 0;
    for (size_t cell = 0; cell < cells; cell++) {
        double *lo = e->lo + (size_t)e->nb * m, *hi = e->hi + (size_t)e->nb * m;
        for (int k = 0; k < ax; k++) {
            int i = idx[k]; /* interval i: below c[0], between c[i-1] and c[i], or up to
                               ref */
            lo[k] = i == 0 ? -INFINITY : c[k][i - 1];
            hi[k] = i == nc[k] ? ref[k] : c[k][i];
        }
        lo[ax] = -INFINITY;
        hi[ax] = ref[ax];
        for (int i = 0; i < np; i++) {
            const double *p = P + (size_t)i * m;
            int dom = 1;
            for (int k = 0; k < ax && dom; k++)
                dom = p[k] <= lo[k];
            if (dom)
                hi[ax] = fmin(hi[ax], p[ax]);
        }
        int empty = 0;
        for (int k = 0; k < m; k++)
            empty |= !(hi[k] > lo[k]);
        if (!empty)
            e->nb++;
        for (int k = 0; k < ax; k++) { /* the next cell, mixed radix */
            if (++idx[k] <= nc[k])
                break;
            idx[k] = 0;
        }
    }
    rc = 0;
out:
    for (int k = 0; c && k < ax; k++)
        free(c[k]);
    free(c);
    free(nc);
    free(idx);
    return rc;
}

/* ns x m standard normal draws: shifted Sobol points through the normal
   quantile (uniform draws past GSL's 40 Sobol dimensions) */
static int s_draws(acq_ehvi *e, unsigned long long seed)
{
    int m = e->m;
    e->z = malloc(sizeof(double) * (size_t)e->ns * (size_t)m);
    double *u = malloc(sizeof(double) * (size_t)m), *shift = malloc(sizeof(double) * m);
    if (!e->z || !u || !shift) {
        free(u);
        free(shift);
        return -1;
    }
    unsigned long long s = seed;
    for (int k = 0; k < m; k++) { /* splitmix64 */
        unsigned long long x = (s += 0x9E3779B97F4A7C15ULL);
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
        shift[k] = (double)((x ^ (x >> 31)) >> 11) / 9007199254740992.0;
    }
    gsl_qrng *q = m <= 40 ? gsl_qrng_alloc(gsl_qrng_sobol, (unsigned)m) : NULL;
    if (q)
        gsl_qrng_get(q, u); /* the origin */
    for (int i = 0; i < e->ns; i++) {
        if (q)
            gsl_qrng_get(q, u);
        for (int k = 0; k < m; k++) {
            double w = (q ? u[k] : (i + 0.5) / e->ns) + shift[k];
            w -= floor(w);
            w = fmin(fmax(w, 1e-12), 1 - 1e-12);
            e->z[(size_t)i * m + k] = gsl_cdf_ugaussian_Pinv(w);
        }
    }
    if (q)
        gsl_qrng_free(q);
    free(u);
    free(shift);
    return 0;
}

acq_ehvi *acq_ehvi_new(int m, gp_t *const *gps, const double *front, int np,
                       const double *ref, int nsamples, unsigned long long seed)
{
    acq_ehvi *e = calloc(1, sizeof *e);
    double *P = malloc(sizeof(double) * (size_t)(np > 0 ? np : 1) * (size_t)m);
    if (!e || !P || m < 1 || nsamples < 1) {
        free(e);
        free(P);
        return NULL;
    }
    e->m = m;
    e->d = gp_dim(gps[0]);
    e->gps = gps;
    e->ns = nsamples;
    int k = s_nondominated(front, np, ref, m, P);
    if (s_boxes(e, P, k, ref) != 0 || s_draws(e, seed) != 0)
        acq_ehvi_destroy(&e);
    free(P);
    return e;
}

void acq_ehvi_destroy(acq_ehvi **e_p)
{
    acq_ehvi *e = *e_p;
    if (!e)
        return;
    free(e->lo);
    free(e->hi);
    free(e->z);
    free(e);
    *e_p = NULL;
}

int acq_ehvi_nboxes(const acq_ehvi *e)
{
    return e->nb;
}

double acq_ehvi_hvi(const acq_ehvi *e, const double *y, double *dy)
{
    int m = e->m;
    double h = 0, f[16];
    double *fk = m <= 16 ? f : malloc(sizeof(double) * (size_t)m);
    if (!fk)
        return NAN;
    if (dy)
        for (int k = 0; k < m; k++)
            dy[k] = 0;
    for (int b = 0; b < e->nb; b++) {
        const double *lo = e->lo + (size_t)b * m, *hi = e->hi + (size_t)b * m;
        double vol = 1;
        int k;
        for (k = 0; k < m; k++) {
            fk[k] = hi[k] - fmax(y[k], lo[k]);
            if (!(fk[k] > 0))
                break;
            vol *= fk[k];
        }
        if (k < m)
            continue;
        h += vol;
        if (dy)
            for (k = 0; k < m; k++)
                if (y[k] > lo[k])
                    dy[k] -= vol / fk[k];
    }
    if (fk != f)
        free(fk);
    return h;
}

double acq_ehvi_log(const acq_ehvi *e, const double *x, double *grad)
{
    int m = e->m, d = e->d;
    size_t md = (size_t)m * (size_t)d;
    /* per objective: mean, sd, and (with grad) their gradients in x */
    double *buf = malloc(sizeof(double) * (5 * (size_t)m + (grad ? 2 * md : 0)));
    if (!buf)
        return NAN;
    double *M = buf, *S = M + m, *gM = S + m, *gS = gM + m, *y = gS + m;
    double *dM = grad ? y + m : NULL, *dS = grad ? dM + md : NULL;
    for (int k = 0; k < m; k++) {
        double mu, var;
        gp_predict(e->gps[k], x, &mu, &var, dM ? dM + (size_t)k * d : NULL,
                   dS ? dS + (size_t)k * d : NULL);
        double ys = gp_y_sd(e->gps[k]), sd = sqrt(fmax(var, S_VAR_FLOOR));
        M[k] = gp_y_mean(e->gps[k]) + ys * mu;
        S[k] = ys * sd;
        if (grad) {
            double dsd = var > S_VAR_FLOOR ? ys * 0.5 / sd : 0;
            for (int i = 0; i < d; i++) {
                dM[(size_t)k * d + i] *= ys;
                dS[(size_t)k * d + i] *= dsd;
            }
        }
        gM[k] = gS[k] = 0;
    }
    double E = 0, dy[16];
    double *dyk = m <= 16 ? dy : malloc(sizeof(double) * (size_t)m);
    if (!dyk) {
        free(buf);
        return NAN;
    }
    for (int s = 0; s < e->ns; s++) {
        const double *z = e->z + (size_t)s * m;
        for (int k = 0; k < m; k++)
            y[k] = M[k] + S[k] * z[k];
        E += acq_ehvi_hvi(e, y, grad ? dyk : NULL);
        if (grad)
            for (int k = 0; k < m; k++) {
                gM[k] += dyk[k];
                gS[k] += dyk[k] * z[k];
            }
    }
    E /= e->ns;
    if (grad) {
        for (int i = 0; i < d; i++)
            grad[i] = 0;
        if (E > 0)
            for (int k = 0; k < m; k++)
                for (int i = 0; i < d; i++)
                    grad[i] +=
                        (gM[k] * dM[(size_t)k * d + i] + gS[k] * dS[(size_t)k * d + i]) /
                        (e->ns * E);
    }
    if (dyk != dy)
        free(dyk);
    free(buf);
    return E > 0 ? log(E) : -INFINITY;
}
