/*  acq.c - log expected improvement, lower confidence bound, and their
    optimisation over [0,1]^d (Sobol set + local draws + projected
    spectral-gradient polishing). See acq.h.

    log EI for minimisation: with s the posterior sd and z = (best - mu)/s,
    EI = s h(z), h(z) = z Phi(z) + phi(z). For z > -3, h is computed
    directly (at most a tenfold loss of relative precision). For z <= -3,
    with t = -z and Mills' ratio R(t) = Q(t)/phi(t) = 1/(t + c(t)),
    c(t) = 1/(t + 2/(t + 3/(t + ...))) (a continued fraction that converges
    quickly for t >= 3), h = phi(t) c/(t + c) without cancellation, so
    log h = -t^2/2 - log(2pi)/2 + log c - log(t + c), and
    d log h/dz = Phi(z)/h(z) = 1/c.
*/
#include "acq.h"
#include "common/util.h"

#include <gsl/gsl_qrng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_LOG_SQRT2PI 0.91893853320467274178

/* c(t) = 1/(t + 2/(t + 3/(t + ...))) for t >= 3: Mills' ratio
   Q(t)/phi(t) = 1/(t + c(t)). */
static double s_mills_c(double t)
{
    int N = t < 4 ? 60 : t < 6 ? 40 : 24;
    double tail = t;
    for (int k = N; k >= 2; k--)
        tail = t + k / tail;
    return 1 / tail;
}

double acq_log_Phi(double z, double *dlog)
{
    if (z > -3) {
        double Phi = 0.5 * erfc(-z * M_SQRT1_2);
        if (dlog)
            *dlog = exp(-0.5 * z * z - S_LOG_SQRT2PI) / Phi;
        return log(Phi);
    }
    /* Phi(z) = Q(t) = phi(t) / (t + c(t)), t = -z */
    double t = -z;
    if (t > 1e150)
        t = 1e150;
    double c = s_mills_c(t);
    if (dlog)
        *dlog = t + c;
    return -0.5 * t * t - S_LOG_SQRT2PI - log(t + c);
}

double acq_log_h(double z, double *dlogh)
{
    if (z > -3) {
        double Phi = 0.5 * erfc(-z * M_SQRT1_2);
        double phi = exp(-0.5 * z * z - S_LOG_SQRT2PI);
        double h = z * Phi + phi;
        if (dlogh)
            *dlogh = Phi / h;
        return log(h);
    }
    double t = -z;
    if (t > 1e150)
        t = 1e150; /* t^2 would overflow; the value saturates */
    double c = s_mills_c(t);
    if (dlogh)
        *dlogh = 1 / c;
    return -0.5 * t * t - S_LOG_SQRT2PI + log(c) - log(t + c);
}

double acq_log_ei(double mu, double sigma, double best, double *dmu, double *dsigma)
{
    double z = (best - mu) / sigma, g;
    double v = log(sigma) + acq_log_h(z, &g);
    if (dmu)
        *dmu = -g / sigma;
    if (dsigma)
        *dsigma = (1 - g * z) / sigma;
    return v;
}

/* Variances below this are treated as this (sd 1e-9 in standardised
   units): EI at an observed point is then tiny but finite. */
#define S_VAR_FLOOR 1e-18

static double s_acq(const acq_t *a, double mu, double var, double *dmu, double *dsd)
{
    double sd = sqrt(fmax(var, S_VAR_FLOOR));
    if (a->kind == ACQ_UCB) {
        *dmu = -1;
        *dsd = a->kappa;
        return -mu + a->kappa * sd;
    }
    return acq_log_ei(mu, sd, a->best, dmu, dsd);
}

/* log P(constraint holds) for a constraint model's posterior (mu, var),
   and its partial derivatives in mu and sd. */
static double s_log_pof(const acq_con *c, double mu, double var, double *dmu, double *dsd)
{
    double sd = sqrt(fmax(var, S_VAR_FLOOR)), r;
    double z = c->upper ? (c->bound - mu) / sd : (mu - c->bound) / sd;
    double v = acq_log_Phi(z, &r);
    *dmu = (c->upper ? -r : r) / sd;
    *dsd = -r * z / sd;
    return v;
}

double acq_value(gp_t *gp, const acq_t *a, const double *x, double *grad)
{
    int d = gp_dim(gp);
    double mu, var, gmu, gsd;
    double *dm = NULL, *dv = NULL; /* heap: d is the user's number of params */
    if (grad) {
        dm = malloc(sizeof(double) * 2 * (size_t)d);
        if (!dm)
            return NAN;
        dv = dm + d;
        for (int i = 0; i < d; i++)
            grad[i] = 0;
    }
    double v = 0;
    if (a->ehvi && !(a->ncons > 0 && a->infeasible)) {
        v = acq_ehvi_log(a->ehvi, x, grad);
    } else if (!(a->ncons > 0 && a->infeasible)) {
        gp_predict(gp, x, &mu, &var, dm, dv);
        v = s_acq(a, mu, var, &gmu, &gsd);
        if (grad) {
            /* below the floor the sd does not move with x */
            double dsd_dvar = var > S_VAR_FLOOR ? 0.5 / sqrt(var) : 0;
            for (int i = 0; i < d; i++)
                grad[i] += gmu * dm[i] + gsd * dsd_dvar * dv[i];
        }
    }
    for (int k = 0; k < a->ncons; k++) {
        gp_predict(a->cons[k].gp, x, &mu, &var, dm, dv);
        v += s_log_pof(&a->cons[k], mu, var, &gmu, &gsd);
        if (grad) {
            double dsd_dvar = var > S_VAR_FLOOR ? 0.5 / sqrt(var) : 0;
            for (int i = 0; i < d; i++)
                grad[i] += gmu * dm[i] + gsd * dsd_dvar * dv[i];
        }
    }
    free(dm);
    return v;
}

int acq_values(gp_t *gp, const acq_t *a, const double *X, int m, double *vals)
{
    double *mu = malloc(sizeof(double) * (size_t)(m > 0 ? m : 1));
    double *var = malloc(sizeof(double) * (size_t)(m > 0 ? m : 1));
    int rc = -1;
    int base = !(a->ncons > 0 && a->infeasible);
    if (mu && var && (!base || a->ehvi || gp_predict_batch(gp, X, m, mu, var) == 0)) {
        for (int i = 0; i < m; i++) {
            double g1, g2;
            vals[i] = !base     ? 0
                      : a->ehvi ? acq_ehvi_log(a->ehvi, X + (size_t)i * gp_dim(gp), NULL)
                                : s_acq(a, mu[i], var[i], &g1, &g2);
        }
        rc = 0;
        for (int k = 0; k < a->ncons && rc == 0; k++) {
            if (gp_predict_batch(a->cons[k].gp, X, m, mu, var) != 0) {
                rc = -1;
                break;
            }
            for (int i = 0; i < m; i++) {
                double g1, g2;
                vals[i] += s_log_pof(&a->cons[k], mu[i], var[i], &g1, &g2);
            }
        }
        for (int i = 0; i < m; i++)
            if (isnan(vals[i]))
                vals[i] = -INFINITY;
    }
    free(mu);
    free(var);
    return rc;
}

void acq_opt_opts_init(acq_opt_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_candidates = 1024;
    o->n_local = 256;
    o->n_polish = 5;
    o->max_iter = 40;
}

/* dimension i's bounds: the box when given, else [0, 1] */
static double s_clamp(const double *lo, const double *hi, int i, double x)
{
    double a = lo ? lo[i] : 0, b = hi ? hi[i] : 1;
    return x < a ? a : x > b ? b : x;
}

/* ---- polishing -------------------------------------------------------- */

/* Projected gradient ascent with Barzilai-Borwein steps and an Armijo
   backtracking line search (spectral projected gradient, monotone).
   Moves only the dimensions in mask. x is updated; returns its value. */
static double s_polish_from(gp_t *gp, const acq_t *a, const unsigned char *mask,
                            const double *lo, const double *hi, double *x, int max_iter,
                            double *g, double *xn, double *gn, double *dir);

static double s_polish(gp_t *gp, const acq_t *a, const unsigned char *mask,
                       const double *lo, const double *hi, double *x, int max_iter)
{
    int d = gp_dim(gp);
    double *g = malloc(sizeof(double) * 4 * (size_t)d);
    if (!g)
        return NAN;
    double *xn = g + d, *gn = g + 2 * d, *dir = g + 3 * d;
    double f = s_polish_from(gp, a, mask, lo, hi, x, max_iter, g, xn, gn, dir);
    free(g);
    return f;
}

static double s_polish_from(gp_t *gp, const acq_t *a, const unsigned char *mask,
                            const double *lo, const double *hi, double *x, int max_iter,
                            double *g, double *xn, double *gn, double *dir)
{
    int d = gp_dim(gp);
    size_t vbytes = sizeof(double) * (size_t)d;
    double f = acq_value(gp, a, x, g);
    if (!isfinite(f))
        return f;
    double gmax = 0;
    for (int i = 0; i < d; i++)
        if (!mask || mask[i])
            gmax = fmax(gmax, fabs(g[i]));
    if (gmax == 0)
        return f;
    double lam = 0.05 / gmax;
    for (int it = 0; it < max_iter; it++) {
        double nd = 0, gd = 0;
        for (int i = 0; i < d; i++) {
            dir[i] =
                (!mask || mask[i]) ? s_clamp(lo, hi, i, x[i] + lam * g[i]) - x[i] : 0;
            nd = fmax(nd, fabs(dir[i]));
            gd += g[i] * dir[i];
        }
        if (nd < 1e-9 || gd <= 0)
            break;
        double t = 1, fn = -INFINITY;
        int ok = 0;
        for (int ls = 0; ls < 20; ls++) {
            for (int i = 0; i < d; i++)
                xn[i] = s_clamp(lo, hi, i, x[i] + t * dir[i]);
            fn = acq_value(gp, a, xn, gn);
            if (isfinite(fn) && fn >= f + 1e-4 * t * gd) {
                ok = 1;
                break;
            }
            t *= 0.5;
        }
        if (!ok)
            break;
        double ss = 0, sy = 0;
        for (int i = 0; i < d; i++) {
            double s = xn[i] - x[i];
            ss += s * s;
            sy -= s * (gn[i] - g[i]);
        }
        double fold = f;
        memcpy(x, xn, vbytes);
        memcpy(g, gn, vbytes);
        f = fn;
        lam = sy > 0 ? ss / sy : 10 * lam;
        if (lam < 1e-12)
            lam = 1e-12;
        if (lam > 1e6)
            lam = 1e6;
        if (f - fold <= 1e-12 * (1 + fabs(f)) && t * nd < 1e-7)
            break;
    }
    return f;
}

/* ---- the optimiser ---------------------------------------------------- */

typedef struct {
    double v;
    int i;
} s_rank;

static int s_rank_cmp(const void *pa, const void *pb)
{
    const s_rank *a = pa, *b = pb;
    if (a->v > b->v)
        return -1;
    if (a->v < b->v)
        return 1;
    return (a->i > b->i) - (a->i < b->i);
}

static int s_same(const double *a, const double *b, int d)
{
    return memcmp(a, b, sizeof(double) * (size_t)d) == 0;
}

int acq_optimize(gp_t *gp, const acq_t *a, const acq_opt_opts *o, double *out,
                 double *vals, int k)
{
    acq_opt_opts dflt;
    if (!o) {
        acq_opt_opts_init(&dflt);
        o = &dflt;
    }
    int d = gp_dim(gp);
    int nc = o->n_candidates > 0 ? o->n_candidates : 1;
    int nl = o->n_starts > 0 && o->starts && o->n_local > 0 ? o->n_local : 0;
    int np = o->n_polish > 0 ? o->n_polish : 0;
    int m = nc + nl, total = m + np;
    uint64_t seed = o->seed ^ 0x3C6EF372FE94F82BULL;

    double *P = malloc(sizeof(double) * (size_t)total * (size_t)d);
    double *v = malloc(sizeof(double) * (size_t)total);
    s_rank *rk = malloc(sizeof(s_rank) * (size_t)total);
    double *shift = malloc(sizeof(double) * 2 * (size_t)d); /* and u */
    if (!P || !v || !rk || !shift || k < 1) {
        free(P);
        free(v);
        free(rk);
        free(shift);
        return -1;
    }

    /* Sobol points with a random shift (Cranley-Patterson rotation); GSL's
       Sobol generator goes up to 40 dimensions, beyond that uniform. */
    for (int i = 0; i < d; i++)
        shift[i] = util_unif01(&seed);
    gsl_qrng *q = d <= 40 ? gsl_qrng_alloc(gsl_qrng_sobol, (unsigned)d) : NULL;
    double *u = shift + d;
    if (q)
        gsl_qrng_get(q, u); /* skip the origin */
    for (int j = 0; j < nc; j++) {
        double *x = P + (size_t)j * d;
        if (q)
            gsl_qrng_get(q, u);
        else
            for (int i = 0; i < d; i++)
                u[i] = util_unif01(&seed);
        for (int i = 0; i < d; i++) {
            double w = u[i] + (q ? shift[i] : 0);
            x[i] = w >= 1 ? w - 1 : w;
            if (o->lo && (!o->mask || o->mask[i])) /* into the box */
                x[i] = o->lo[i] + (o->hi[i] - o->lo[i]) * x[i];
        }
    }
    if (q)
        gsl_qrng_free(q);

    /* local draws: Gaussian steps of a log-uniform scale around the starts
       on continuous dimensions, occasional resampling of discrete ones */
    for (int j = 0; j < nl; j++) {
        double *x = P + (size_t)(nc + j) * d;
        const double *s0 = o->starts + (size_t)(j % o->n_starts) * d;
        double scale = exp(log(1e-3) + util_unif01(&seed) * (log(0.2) - log(1e-3)));
        for (int i = 0; i < d; i++) {
            if (!o->mask || o->mask[i])
                x[i] = s_clamp(o->lo, o->hi, i, s0[i] + scale * util_normal(&seed));
            else
                x[i] = util_unif01(&seed) < 1.0 / d ? util_unif01(&seed) : s0[i];
        }
    }
    if (o->round)
        for (int j = 0; j < m; j++)
            o->round(o->round_ctx, P + (size_t)j * d);

    int rc = -1;
    if (acq_values(gp, a, P, m, v) != 0)
        goto done;
    for (int j = 0; j < m; j++)
        rk[j] = (s_rank){v[j], j};
    qsort(rk, (size_t)m, sizeof *rk, s_rank_cmp);

    /* polish the best distinct candidates */
    int polished = 0;
    for (int r = 0; r < m && polished < np; r++) {
        if (o->cancel && atomic_load(o->cancel))
            goto done;
        const double *x0 = P + (size_t)rk[r].i * d;
        int dup = 0; /* the same legal point as a better-ranked candidate */
        for (int r2 = 0; r2 < r && !dup; r2++)
            dup = s_same(x0, P + (size_t)rk[r2].i * d, d);
        if (dup || !isfinite(rk[r].v))
            continue;
        double *x = P + (size_t)(m + polished) * d;
        memcpy(x, x0, sizeof(double) * (size_t)d);
        s_polish(gp, a, o->mask, o->lo, o->hi, x, o->max_iter);
        if (o->round)
            o->round(o->round_ctx, x);
        v[m + polished] = acq_value(gp, a, x, NULL);
        if (isnan(v[m + polished]))
            v[m + polished] = -INFINITY;
        polished++;
    }
    int all = m + polished;
    for (int j = 0; j < all; j++)
        rk[j] = (s_rank){v[j], j};
    qsort(rk, (size_t)all, sizeof *rk, s_rank_cmp);
    int got = 0;
    for (int r = 0; r < all && got < k; r++) {
        const double *x = P + (size_t)rk[r].i * d;
        int dup = 0;
        for (int g = 0; g < got && !dup; g++)
            dup = s_same(x, out + (size_t)g * d, d);
        if (dup)
            continue;
        memcpy(out + (size_t)got * d, x, sizeof(double) * (size_t)d);
        vals[got++] = rk[r].v;
    }
    rc = got;
done:
    free(P);
    free(v);
    free(rk);
    free(shift);
    return rc;
}
