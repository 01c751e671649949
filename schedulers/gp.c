/*  gp.c - Gaussian-process regression: Matérn-5/2 ARD kernel, log
    marginal likelihood with analytic gradients, BFGS2 fitting with
    restarts, jittered Cholesky, posterior mean/variance and their input
    gradients. See gp.h for the contract.

    Matérn-5/2 with r^2 = sum_i (a_i - b_i)^2 / l_i^2:
        k = sf2 (1 + sqrt5 r + 5/3 r^2) exp(-sqrt5 r)
        dk/dlog l_i = sf2 5/3 (1 + sqrt5 r) exp(-sqrt5 r) (a_i - b_i)^2 / l_i^2
        dk/da_i     = -sf2 5/3 (1 + sqrt5 r) exp(-sqrt5 r) (a_i - b_i) / l_i^2
    Log marginal likelihood L = -y'a/2 - sum log L_ii - n/2 log 2pi with
    a = K^-1 y, and dL/dt = tr((a a' - K^-1) dK/dt) / 2.
*/
#include "gp.h"
#include "common/util.h"

#include <gsl/gsl_blas.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_multimin.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define S_SQRT5 2.23606797749978969641
#define S_LOG2PI 1.83787706640934548356

/* Weak priors on theta (log-normal on lengthscales, signal and noise) and
   a soft box that keeps BFGS away from absurd values. The noise prior is
   centred low (1e-6 of the data's variance) and the floor is lower still:
   a deterministic objective is then fitted nearly exactly, so the model
   resolves the small differences near an optimum (with a noise of 1e-4
   it could not tell apart values closer than ~1% of the data's sd); a
   noisy one moves the noise up by likelihood (gp_fit also starts from a
   noisy hypothesis, see there). */
#define S_LS_SD 1.5
#define S_SF_MU 0.0
#define S_SF_SD 1.5
#define S_NOISE_MU (-13.815510557964274) /* log 1e-6 */
#define S_NOISE_SD 3.0
#define S_BOX_SD 0.05
/* GP_PRIOR_WALL's weight (see gp.h) */
#define S_WALL 0.1

struct gp {
    int d, n;
    double *X;         /* n x d inputs */
    double *y;         /* n standardised outputs */
    double ymean, ysd; /* standardisation */
    double *theta;     /* d + 2 */
    gsl_matrix *L;     /* Cholesky factor (lower) of K + noise I + jitter I */
    gsl_vector *alpha; /* K^-1 y */
    int factored;      /* L and alpha match theta and the data */
    gp_prior prior;    /* the lengthscale prior */
    double jitter;     /* of the last factorisation */
    double objective;  /* log marginal + log prior of the last factorisation */
    double *il;        /* d: scratch for inverse length scales (heap: d is the
                          user's number of params) */
    double *ks, *dk;   /* predict scratch: n, n x d */
    gsl_vector *v;     /* predict scratch: n */
};

/* LAPACK from OpenBLAS (linked as -lopenblas): its blocked, threaded
   Cholesky and inverse are several times faster than GSL's at n ~ 1000.
   A row-major lower triangle is LAPACK's column-major upper one. The
   trailing size_t is the Fortran hidden length of the character argument. */
extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info,
                    size_t);
extern void dpotri_(const char *uplo, const int *n, double *a, const int *lda, int *info,
                    size_t);

/* In-place Cholesky of the lower triangle of a row-major matrix. 0 or -1. */
static int s_potrf(gsl_matrix *K)
{
    int n = (int)K->size1, lda = (int)K->tda, info = 0;
    dpotrf_("U", &n, K->data, &lda, &info, 1);
    return info == 0 ? 0 : -1;
}

/* From the factor in the lower triangle, the inverse in the lower triangle
   (the upper one is left as it was). 0 or -1. */
static int s_potri(gsl_matrix *K)
{
    int n = (int)K->size1, lda = (int)K->tda, info = 0;
    dpotri_("U", &n, K->data, &lda, &info, 1);
    return info == 0 ? 0 : -1;
}

static pthread_once_t s_once = PTHREAD_ONCE_INIT;

/* GSL's default handler aborts the process; return codes are checked. */
static void s_gsl_init(void)
{
    gsl_set_error_handler_off();
}

static double s_ls_mu(int d)
{
    return log(0.5) + 0.5 * log((double)d);
}

int gp_ntheta(int d)
{
    return d + 2;
}

void gp_default_theta(int d, double *theta)
{
    for (int i = 0; i < d; i++)
        theta[i] = s_ls_mu(d);
    theta[d] = S_SF_MU;
    theta[d + 1] = S_NOISE_MU;
}

gp_t *gp_new(int d)
{
    pthread_once(&s_once, s_gsl_init);
    if (d < 1)
        return NULL;
    gp_t *gp = calloc(1, sizeof *gp);
    if (!gp)
        return NULL;
    gp->d = d;
    gp->ysd = 1;
    gp->theta = malloc(sizeof(double) * (size_t)gp_ntheta(d));
    gp->il = malloc(sizeof(double) * (size_t)d);
    if (!gp->theta || !gp->il) {
        free(gp->theta);
        free(gp->il);
        free(gp);
        return NULL;
    }
    gp_default_theta(d, gp->theta);
    return gp;
}

static void s_free_data(gp_t *gp)
{
    free(gp->X);
    free(gp->y);
    free(gp->ks);
    free(gp->dk);
    if (gp->L)
        gsl_matrix_free(gp->L);
    if (gp->alpha)
        gsl_vector_free(gp->alpha);
    if (gp->v)
        gsl_vector_free(gp->v);
    gp->X = gp->y = gp->ks = gp->dk = NULL;
    gp->L = NULL;
    gp->alpha = gp->v = NULL;
    gp->n = 0;
    gp->factored = 0;
}

void gp_destroy(gp_t **gp_p)
{
    if (!gp_p || !*gp_p)
        return;
    gp_t *gp = *gp_p;
    s_free_data(gp);
    free(gp->theta);
    free(gp->il);
    free(gp);
    *gp_p = NULL;
}

int gp_dim(const gp_t *gp)
{
    return gp->d;
}

int gp_size(const gp_t *gp)
{
    return gp->n;
}

double gp_y_mean(const gp_t *gp)
{
    return gp->ymean;
}

double gp_y_sd(const gp_t *gp)
{
    return gp->ysd;
}

double gp_y_std(const gp_t *gp, int i)
{
    return gp->y[i];
}

const double *gp_theta(const gp_t *gp)
{
    return gp->theta;
}

double gp_jitter(const gp_t *gp)
{
    return gp->jitter;
}

double gp_objective(const gp_t *gp)
{
    return gp->objective;
}

int gp_set_data(gp_t *gp, const double *X, const double *y, int n, int standardise)
{
    if (n < 1)
        return -1;
    int d = gp->d;
    s_free_data(gp);
    gp->X = malloc(sizeof(double) * (size_t)n * (size_t)d);
    gp->y = malloc(sizeof(double) * (size_t)n);
    gp->ks = malloc(sizeof(double) * (size_t)n);
    gp->dk = malloc(sizeof(double) * (size_t)n * (size_t)d);
    gp->L = gsl_matrix_alloc((size_t)n, (size_t)n);
    gp->alpha = gsl_vector_alloc((size_t)n);
    gp->v = gsl_vector_alloc((size_t)n);
    if (!gp->X || !gp->y || !gp->ks || !gp->dk || !gp->L || !gp->alpha || !gp->v) {
        s_free_data(gp);
        return -1;
    }
    gp->n = n;
    memcpy(gp->X, X, sizeof(double) * (size_t)n * (size_t)d);
    if (standardise) {
        double m = 0, s = 0;
        for (int i = 0; i < n; i++)
            m += y[i];
        m /= n;
        for (int i = 0; i < n; i++)
            s += (y[i] - m) * (y[i] - m);
        s = n > 1 ? sqrt(s / n) : 0;
        gp->ymean = m;
        gp->ysd = s > 1e-12 * fmax(1.0, fabs(m)) ? s : 1.0;
    }
    for (int i = 0; i < n; i++)
        gp->y[i] = (y[i] - gp->ymean) / gp->ysd;
    return 0;
}

/* ---- kernel ----------------------------------------------------------- */

double gp_kernel(int d, const double *theta, const double *a, const double *b,
                 double *dtheta, double *dx)
{
    double sf2 = exp(theta[d]), r2 = 0;
    for (int i = 0; i < d; i++) {
        double z = (a[i] - b[i]) * exp(-theta[i]);
        r2 += z * z;
    }
    double r = sqrt(r2), e = exp(-S_SQRT5 * r);
    double k = sf2 * (1 + S_SQRT5 * r + 5.0 / 3.0 * r2) * e;
    double c = sf2 * 5.0 / 3.0 * (1 + S_SQRT5 * r) * e;
    if (dtheta) {
        for (int i = 0; i < d; i++) {
            double z = (a[i] - b[i]) * exp(-theta[i]);
            dtheta[i] = c * z * z;
        }
        dtheta[d] = k;
        dtheta[d + 1] = 0;
    }
    if (dx)
        for (int i = 0; i < d; i++)
            dx[i] = -c * (a[i] - b[i]) * exp(-2 * theta[i]);
    return k;
}

/* k(a, b) with inverse lengthscales il precomputed. */
static inline double s_k(int d, const double *il, double sf2, const double *a,
                         const double *b)
{
    double r2 = 0;
    for (int i = 0; i < d; i++) {
        double z = (a[i] - b[i]) * il[i];
        r2 += z * z;
    }
    double r = sqrt(r2);
    return sf2 * (1 + S_SQRT5 * r + 5.0 / 3.0 * r2) * exp(-S_SQRT5 * r);
}

/* Lower triangle (and diagonal) of Kf + diag I for n points. The strict
   upper triangle, which the factorisation leaves alone, receives
   exp(-sqrt5 r) of each pair for the gradient. */
static void s_build_K(int d, int n, const double *X, const double *theta, double diag,
                      gsl_matrix *K, double *il /* scratch, d */)
{
    double sf2 = exp(theta[d]);
    for (int i = 0; i < d; i++)
        il[i] = exp(-theta[i]);
    size_t tda = K->tda;
    for (int a = 0; a < n; a++) {
        const double *xa = X + (size_t)a * d;
        double *row = gsl_matrix_ptr(K, (size_t)a, 0);
        for (int b = 0; b < a; b++) {
            const double *xb = X + (size_t)b * d;
            double r2 = 0;
            for (int i = 0; i < d; i++) {
                double z = (xa[i] - xb[i]) * il[i];
                r2 += z * z;
            }
            double r = sqrt(r2), e = exp(-S_SQRT5 * r);
            row[b] = sf2 * (1 + S_SQRT5 * r + 5.0 / 3.0 * r2) * e;
            K->data[(size_t)b * tda + (size_t)a] = e;
        }
        row[a] = sf2 + diag;
    }
}

static int s_theta_ok(int d, const double *theta)
{
    for (int i = 0; i < d + 2; i++)
        if (!isfinite(theta[i]) || fabs(theta[i]) > 700)
            return 0;
    return 1;
}

/* Factorises K(theta) + noise I into K's lower triangle, adding jitter
   (1e-10 sf2, x10 each time, up to 1e-2 sf2) until it is positive definite.
   0 with *jit set, or -1. */
static int s_chol(int d, int n, const double *X, const double *theta, gsl_matrix *K,
                  double *jit, double *il /* scratch, d */)
{
    if (!s_theta_ok(d, theta))
        return -1;
    double sf2 = exp(theta[d]), noise = GP_NOISE_FLOOR + exp(theta[d + 1]);
    double jitter = 0;
    for (int attempt = 0; attempt < 10; attempt++) {
        s_build_K(d, n, X, theta, noise + jitter, K, il);
        if (s_potrf(K) == 0) {
            int ok = 1;
            for (int a = 0; a < n && ok; a++) {
                double l = gsl_matrix_get(K, (size_t)a, (size_t)a);
                ok = isfinite(l) && l > 0;
            }
            if (ok) {
                *jit = jitter;
                return 0;
            }
        }
        jitter = jitter == 0 ? 1e-10 * sf2 : jitter * 10;
    }
    return -1;
}

/* ---- log marginal likelihood ------------------------------------------ */

typedef struct {
    int n;
    gsl_matrix *K, *Ki;
    gsl_vector *alpha, *y;
    double *scr; /* 3d + 2: il2, dd and the gradient (d + 2) */
} s_lml_ws;

static void s_ws_free(s_lml_ws *w)
{
    if (w->K)
        gsl_matrix_free(w->K);
    if (w->Ki)
        gsl_matrix_free(w->Ki);
    if (w->alpha)
        gsl_vector_free(w->alpha);
    if (w->y)
        gsl_vector_free(w->y);
    free(w->scr);
    memset(w, 0, sizeof *w);
}

static int s_ws_init(s_lml_ws *w, int n, int d, const double *y)
{
    memset(w, 0, sizeof *w);
    w->n = n;
    w->scr = malloc(sizeof(double) * (size_t)(3 * d + 2));
    w->K = gsl_matrix_alloc((size_t)n, (size_t)n);
    w->Ki = gsl_matrix_alloc((size_t)n, (size_t)n);
    w->alpha = gsl_vector_alloc((size_t)n);
    w->y = gsl_vector_alloc((size_t)n);
    if (!w->K || !w->Ki || !w->alpha || !w->y || !w->scr) {
        s_ws_free(w);
        return -1;
    }
    for (int i = 0; i < n; i++)
        gsl_vector_set(w->y, (size_t)i, y[i]);
    return 0;
}

static double s_lml(int d, const double *X, s_lml_ws *w, const double *theta,
                    double *grad)
{
    int n = w->n;
    double jit;
    if (s_chol(d, n, X, theta, w->K, &jit, w->scr) != 0)
        return -INFINITY;
    if (gsl_linalg_cholesky_solve(w->K, w->y, w->alpha) != GSL_SUCCESS)
        return -INFINITY;
    double yKy, logdet = 0;
    gsl_blas_ddot(w->y, w->alpha, &yKy);
    for (int a = 0; a < n; a++)
        logdet += log(gsl_matrix_get(w->K, (size_t)a, (size_t)a));
    double lml = -0.5 * yKy - logdet - 0.5 * n * S_LOG2PI;
    if (!grad)
        return lml;

    int nt = gp_ntheta(d);
    gsl_matrix_memcpy(w->Ki, w->K);
    if (s_potri(w->Ki) != 0)
        return -INFINITY;
    double sf2 = exp(theta[d]), en = exp(theta[d + 1]);
    double *il2 = w->scr, *dd = w->scr + d, *g = w->scr + 2 * d;
    for (int i = 0; i < d; i++)
        il2[i] = exp(-2 * theta[i]);
    memset(g, 0, sizeof(double) * (size_t)nt);
    const double *al = w->alpha->data;
    const double *E = w->K->data; /* exp(-sqrt5 r) in the strict upper triangle */
    size_t tda = w->K->tda;
    double trW = 0, sumWK = 0;
    for (int a = 0; a < n; a++) {
        const double *xa = X + (size_t)a * d;
        const double *kia = gsl_matrix_const_ptr(w->Ki, (size_t)a, 0);
        double Waa = al[a] * al[a] - kia[a];
        trW += Waa;
        for (int b = 0; b < a; b++) {
            const double *xb = X + (size_t)b * d;
            double r2 = 0;
            for (int i = 0; i < d; i++) {
                double z = xa[i] - xb[i];
                dd[i] = z * z * il2[i];
                r2 += dd[i];
            }
            double r = sqrt(r2), e = E[(size_t)b * tda + (size_t)a];
            double Wab = al[a] * al[b] - kia[b];
            sumWK += Wab * (1 + S_SQRT5 * r + 5.0 / 3.0 * r2) * e;
            double c = Wab * (1 + S_SQRT5 * r) * e;
            for (int i = 0; i < d; i++)
                g[i] += c * dd[i];
        }
    }
    /* off-diagonal pairs count twice in the trace; the 1/2 cancels that */
    for (int i = 0; i < d; i++)
        grad[i] = g[i] * sf2 * 5.0 / 3.0;
    grad[d] = sf2 * sumWK + 0.5 * sf2 * trW;
    grad[d + 1] = 0.5 * en * trW;
    return lml;
}

double gp_log_marginal(gp_t *gp, const double *theta, double *grad)
{
    s_lml_ws w;
    if (gp->n < 1 || s_ws_init(&w, gp->n, gp->d, gp->y) != 0)
        return -INFINITY;
    double v = s_lml(gp->d, gp->X, &w, theta, grad);
    s_ws_free(&w);
    return v;
}

static void s_box(double t, double lo, double hi, double *lp, double *g)
{
    double z = t < lo ? (t - lo) / S_BOX_SD : t > hi ? (t - hi) / S_BOX_SD : 0;
    *lp -= 0.5 * z * z;
    *g -= z / S_BOX_SD;
}

double gp_log_prior(int d, const double *theta, double *grad)
{
    return gp_log_prior_kind(d, GP_PRIOR_LOGNORMAL, theta, grad);
}

void gp_set_prior(gp_t *gp, gp_prior prior)
{
    gp->prior = prior;
    gp->factored = 0;
}

double gp_log_prior_kind(int d, gp_prior prior, const double *theta, double *grad)
{
    double lp = 0, mu = s_ls_mu(d), g;
    for (int i = 0; i < d + 2; i++) {
        double m = i < d ? mu : i == d ? S_SF_MU : S_NOISE_MU;
        double s = i < d ? S_LS_SD : i == d ? S_SF_SD : S_NOISE_SD;
        double z = (theta[i] - m) / s;
        if (i < d && prior == GP_PRIOR_WALL) {
            /* -0.1 (l^2 + 1/l^2): mode at l = 1, steep on both sides */
            double e2 = exp(2 * theta[i]);
            lp -= S_WALL * (e2 + 1 / e2);
            g = -2 * S_WALL * (e2 - 1 / e2);
        } else {
            lp -= 0.5 * z * z;
            g = -z / s;
        }
        if (i < d)
            s_box(theta[i], log(1e-3), log(1e3), &lp, &g);
        else if (i == d)
            s_box(theta[i], log(1e-3), log(1e3), &lp, &g);
        else
            s_box(theta[i], log(1e-12), log(10.0), &lp, &g);
        if (grad)
            grad[i] = g;
    }
    return lp;
}

/* ---- fitting ---------------------------------------------------------- */

typedef struct {
    int d, nt;
    const double *X;
    s_lml_ws *w;
    double last_f; /* cache of the last evaluation */
    double *last_t, *last_g;
    int have_last;
    double *scr; /* 3 nt: theta, its lml gradient, its prior gradient */
    gp_prior prior;
} s_fit_ctx;

static void s_eval(s_fit_ctx *c, const gsl_vector *v)
{
    if (c->have_last && memcmp(c->last_t, v->data, sizeof(double) * (size_t)c->nt) == 0)
        return;
    double *t = c->scr, *g = c->scr + c->nt, *gp_ = c->scr + 2 * c->nt;
    for (int i = 0; i < c->nt; i++)
        t[i] = gsl_vector_get(v, (size_t)i);
    double l = s_lml(c->d, c->X, c->w, t, g);
    double p = gp_log_prior_kind(c->d, c->prior, t, gp_);
    double n = c->w->n;
    if (!isfinite(l)) {
        /* not factorisable: a high flat value, which BFGS backs away from */
        c->last_f = 1e10;
        for (int i = 0; i < c->nt; i++)
            c->last_g[i] = 0;
    } else {
        c->last_f = -(l + p) / n;
        for (int i = 0; i < c->nt; i++)
            c->last_g[i] = -(g[i] + gp_[i]) / n;
    }
    memcpy(c->last_t, t, sizeof(double) * (size_t)c->nt);
    c->have_last = 1;
}

static double s_f(const gsl_vector *v, void *p)
{
    s_eval(p, v);
    return ((s_fit_ctx *)p)->last_f;
}

static void s_df(const gsl_vector *v, void *p, gsl_vector *g)
{
    s_fit_ctx *c = p;
    s_eval(c, v);
    for (int i = 0; i < c->nt; i++)
        gsl_vector_set(g, (size_t)i, c->last_g[i]);
}

static void s_fdf(const gsl_vector *v, void *p, double *f, gsl_vector *g)
{
    s_df(v, p, g);
    *f = ((s_fit_ctx *)p)->last_f;
}

static int s_cancelled(const atomic_int *cancel)
{
    return cancel && atomic_load(cancel);
}

/* Minimises -(lml + prior)/n from theta (updated in place). Returns the
   objective reached (+inf when it failed). */
static double s_bfgs(s_fit_ctx *c, double *theta, int max_iter, const atomic_int *cancel)
{
    int nt = c->nt;
    gsl_multimin_function_fdf F = {s_f, s_df, s_fdf, (size_t)nt, c};
    gsl_vector *x = gsl_vector_alloc((size_t)nt);
    gsl_multimin_fdfminimizer *m = gsl_multimin_fdfminimizer_alloc(
        gsl_multimin_fdfminimizer_vector_bfgs2, (size_t)nt);
    if (!x || !m) {
        if (x)
            gsl_vector_free(x);
        if (m)
            gsl_multimin_fdfminimizer_free(m);
        return INFINITY;
    }
    for (int i = 0; i < nt; i++)
        gsl_vector_set(x, (size_t)i, theta[i]);
    double best = INFINITY;
    if (gsl_multimin_fdfminimizer_set(m, &F, x, 0.1, 0.4) == GSL_SUCCESS) {
        for (int it = 0; it < max_iter && !s_cancelled(cancel); it++) {
            if (gsl_multimin_fdfminimizer_iterate(m) != GSL_SUCCESS)
                break;
            if (gsl_multimin_test_gradient(m->gradient, 1e-4) == GSL_SUCCESS)
                break;
        }
        best = m->f;
        if (isfinite(best) && best < 1e10)
            for (int i = 0; i < nt; i++)
                theta[i] = gsl_vector_get(m->x, (size_t)i);
        else
            best = INFINITY;
    }
    gsl_multimin_fdfminimizer_free(m);
    gsl_vector_free(x);
    return best;
}

void gp_fit_opts_init(gp_fit_opts *o)
{
    memset(o, 0, sizeof *o);
    o->restarts = 2;
    o->default_start = 1;
    o->max_iter = 100;
    o->subset = 0;
    o->polish_iter = 20;
}

int gp_fit(gp_t *gp, const gp_fit_opts *opts)
{
    gp_fit_opts dflt;
    if (!opts) {
        gp_fit_opts_init(&dflt);
        opts = &dflt;
    }
    int d = gp->d, nt = gp_ntheta(d), n = gp->n;
    if (n < 1)
        return -1;
    uint64_t seed = opts->seed ^ 0xD1B54A32D192ED03ULL;

    /* the data the starts run on: all of it, or a random subset */
    int use_subset = opts->subset > 0 && n > opts->subset;
    int ns = use_subset ? opts->subset : n;
    double *Xs = (double *)gp->X, *ys = gp->y;
    int *perm = NULL;
    if (use_subset) {
        perm = malloc(sizeof(int) * (size_t)n);
        Xs = malloc(sizeof(double) * (size_t)ns * (size_t)d);
        ys = malloc(sizeof(double) * (size_t)ns);
        if (!perm || !Xs || !ys) {
            free(perm);
            free(Xs);
            free(ys);
            return -1;
        }
        for (int i = 0; i < n; i++)
            perm[i] = i;
        for (int i = 0; i < ns; i++) {
            int j = i + (int)(util_unif01(&seed) * (n - i));
            if (j >= n)
                j = n - 1;
            int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
            memcpy(Xs + (size_t)i * d, gp->X + (size_t)perm[i] * d,
                   sizeof(double) * (size_t)d);
            ys[i] = gp->y[perm[i]];
        }
    }

    s_lml_ws w;
    int rc = -1;
    /* theta-sized scratch on the heap (nt grows with the user's params):
       last_t, last_g, best_t, t and the evaluation's 3 nt */
    double *buf = malloc(sizeof(double) * (size_t)(7 * nt));
    if (!buf) {
        if (use_subset) {
            free(perm);
            free(Xs);
            free(ys);
        }
        return -1;
    }
    double *last_t = buf, *last_g = buf + nt, *best_t = buf + 2 * nt, *t = buf + 3 * nt;
    size_t tbytes = sizeof(double) * (size_t)nt;
    s_fit_ctx c = {d, nt, Xs, &w, 0, last_t, last_g, 0, buf + 4 * nt, gp->prior};
    double best_f = INFINITY;
    if (s_ws_init(&w, ns, d, ys) == 0) {
        int warm = opts->theta0 != NULL, dflt_start = !warm || opts->default_start;
        /* the default starts: the prior mean, whose small noise makes the
           model interpolate, and the same with a noise of 1e-2 (in units of
           the data's variance): on noisy data the interpolating basin of the
           likelihood is a poor local optimum BFGS cannot leave */
        int noisy = dflt_start && opts->default_start;
        int nstarts =
            warm + dflt_start + noisy + (opts->restarts > 0 ? opts->restarts : 0);
        for (int k = 0; k < nstarts && !s_cancelled(opts->cancel); k++) {
            if (k == 0 && warm)
                memcpy(t, opts->theta0, tbytes);
            else if (k == warm && dflt_start)
                gp_default_theta(d, t);
            else if (k == warm + 1 && noisy) {
                gp_default_theta(d, t);
                t[d + 1] = log(1e-2);
            } else {
                gp_default_theta(d, t);
                for (int i = 0; i < d; i++)
                    t[i] += S_LS_SD * 0.7 * util_normal(&seed);
                t[d] += 0.5 * util_normal(&seed);
                t[d + 1] += S_NOISE_SD * 0.5 * util_normal(&seed);
            }
            c.have_last = 0;
            double f = s_bfgs(&c, t, opts->max_iter, opts->cancel);
            if (f < best_f) {
                best_f = f;
                memcpy(best_t, t, tbytes);
            }
        }
        s_ws_free(&w);
        if (use_subset && opts->polish_iter > 0 && isfinite(best_f) &&
            !s_cancelled(opts->cancel) && s_ws_init(&w, n, d, gp->y) == 0) {
            s_fit_ctx cf = {d,      nt,     gp->X, &w,           0,
                            last_t, last_g, 0,     buf + 4 * nt, gp->prior};
            memcpy(t, best_t, tbytes);
            if (isfinite(s_bfgs(&cf, t, opts->polish_iter, opts->cancel)))
                memcpy(best_t, t, tbytes);
            s_ws_free(&w);
        }
        if (!s_cancelled(opts->cancel)) {
            if (isfinite(best_f))
                rc = gp_set_theta(gp, best_t);
            if (rc != 0) {
                /* keep a usable model: the prior mean always factorises */
                gp_default_theta(d, best_t);
                rc = gp_set_theta(gp, best_t);
            }
        }
    }
    free(buf);
    if (use_subset) {
        free(perm);
        free(Xs);
        free(ys);
    }
    return rc;
}

int gp_set_theta(gp_t *gp, const double *theta)
{
    int d = gp->d, nt = gp_ntheta(d);
    memcpy(gp->theta, theta, sizeof(double) * (size_t)nt);
    gp->factored = 0;
    if (gp->n < 1)
        return -1;
    if (s_chol(d, gp->n, gp->X, theta, gp->L, &gp->jitter, gp->il) != 0)
        return -1;
    gsl_vector_view yv = gsl_vector_view_array(gp->y, (size_t)gp->n);
    if (gsl_linalg_cholesky_solve(gp->L, &yv.vector, gp->alpha) != GSL_SUCCESS)
        return -1;
    double yKy, logdet = 0;
    gsl_blas_ddot(&yv.vector, gp->alpha, &yKy);
    for (int a = 0; a < gp->n; a++)
        logdet += log(gsl_matrix_get(gp->L, (size_t)a, (size_t)a));
    gp->objective = -0.5 * yKy - logdet - 0.5 * gp->n * S_LOG2PI +
                    gp_log_prior_kind(d, gp->prior, theta, NULL);
    gp->factored = 1;
    return 0;
}

/* ---- prediction ------------------------------------------------------- */

void gp_predict(gp_t *gp, const double *x, double *mean, double *var, double *dmean,
                double *dvar)
{
    int d = gp->d, n = gp->n;
    const double *th = gp->theta;
    double sf2 = exp(th[d]);
    if (!gp->factored) {
        *mean = 0;
        *var = sf2;
        if (dmean)
            memset(dmean, 0, sizeof(double) * (size_t)d);
        if (dvar)
            memset(dvar, 0, sizeof(double) * (size_t)d);
        return;
    }
    int grads = dmean || dvar;
    for (int b = 0; b < n; b++)
        gp->ks[b] = gp_kernel(d, th, x, gp->X + (size_t)b * d, NULL,
                              grads ? gp->dk + (size_t)b * d : NULL);
    gsl_vector_view ks = gsl_vector_view_array(gp->ks, (size_t)n);
    double m;
    gsl_blas_ddot(&ks.vector, gp->alpha, &m);
    gsl_vector_memcpy(gp->v, &ks.vector);
    gsl_blas_dtrsv(CblasLower, CblasNoTrans, CblasNonUnit, gp->L, gp->v); /* v = L^-1 k */
    double vv;
    gsl_blas_ddot(gp->v, gp->v, &vv);
    *mean = m;
    *var = fmax(sf2 - vv, 0.0);
    if (!grads)
        return;
    /* dk/dx is n x d (row-major): dmean = dk' alpha, dvar = -2 dk' K^-1 k */
    gsl_matrix_view dk = gsl_matrix_view_array(gp->dk, (size_t)n, (size_t)d);
    if (dmean) {
        gsl_vector_view dm = gsl_vector_view_array(dmean, (size_t)d);
        gsl_blas_dgemv(CblasTrans, 1.0, &dk.matrix, gp->alpha, 0.0, &dm.vector);
    }
    if (dvar) {
        gsl_blas_dtrsv(CblasLower, CblasTrans, CblasNonUnit, gp->L, gp->v); /* K^-1 k */
        gsl_vector_view dv = gsl_vector_view_array(dvar, (size_t)d);
        gsl_blas_dgemv(CblasTrans, -2.0, &dk.matrix, gp->v, 0.0, &dv.vector);
    }
}

int gp_predict_batch(gp_t *gp, const double *Xs, int m, double *mean, double *var)
{
    int d = gp->d, n = gp->n;
    double sf2 = exp(gp->theta[d]);
    if (!gp->factored) {
        for (int i = 0; i < m; i++) {
            mean[i] = 0;
            if (var)
                var[i] = sf2;
        }
        return 0;
    }
    const int B = 128;
    double *il = gp->il;
    for (int i = 0; i < d; i++)
        il[i] = exp(-gp->theta[i]);
    gsl_matrix *Ks = gsl_matrix_alloc((size_t)(m < B ? m : B), (size_t)n);
    if (!Ks)
        return -1;
    for (int i0 = 0; i0 < m; i0 += B) {
        int bs = m - i0 < B ? m - i0 : B;
        gsl_matrix_view K = gsl_matrix_submatrix(Ks, 0, 0, (size_t)bs, (size_t)n);
        for (int i = 0; i < bs; i++) {
            double *row = gsl_matrix_ptr(&K.matrix, (size_t)i, 0);
            for (int b = 0; b < n; b++)
                row[b] =
                    s_k(d, il, sf2, Xs + (size_t)(i0 + i) * d, gp->X + (size_t)b * d);
        }
        gsl_vector_view mv = gsl_vector_view_array(mean + i0, (size_t)bs);
        gsl_blas_dgemv(CblasNoTrans, 1.0, &K.matrix, gp->alpha, 0.0, &mv.vector);
        if (!var)
            continue;
        /* rows of K L^-T are (L^-1 k)' */
        gsl_blas_dtrsm(CblasRight, CblasLower, CblasTrans, CblasNonUnit, 1.0, gp->L,
                       &K.matrix);
        for (int i = 0; i < bs; i++) {
            const double *row = gsl_matrix_const_ptr(&K.matrix, (size_t)i, 0);
            double s = 0;
            for (int b = 0; b < n; b++)
                s += row[b] * row[b];
            var[i0 + i] = fmax(sf2 - s, 0.0);
        }
    }
    gsl_matrix_free(Ks);
    return 0;
}

int gp_loo(gp_t *gp, double *mu, double *var)
{
    int n = gp->n;
    if (!gp->factored || n < 2)
        return -1;
    gsl_matrix *Ki = gsl_matrix_alloc((size_t)n, (size_t)n);
    if (!Ki)
        return -1;
    /* K^-1 from the factor: LOO mean y_i - [K^-1 y]_i / [K^-1]_ii, variance
       1 / [K^-1]_ii (Rasmussen & Williams 5.12) */
    gsl_matrix_memcpy(Ki, gp->L);
    int rc = s_potri(Ki);
    for (int i = 0; rc == 0 && i < n; i++) {
        double kii = gsl_matrix_get(Ki, (size_t)i, (size_t)i);
        if (!(kii > 0)) {
            rc = -1;
            break;
        }
        mu[i] = gp->y[i] - gsl_vector_get(gp->alpha, (size_t)i) / kii;
        var[i] = 1 / kii;
    }
    gsl_matrix_free(Ki);
    return rc;
}
