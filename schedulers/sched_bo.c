/*  sched_bo.c - Bayesian optimisation: a GP (gp.c) on the trials' results
    and log-EI or UCB (acq.c) to choose the next trial (docs/design.md, Schedulers "bo").

    Parameters are encoded into [0,1]^D: float and int parameters take one
    dimension each through spec_param_to_unit (log scale for log ones),
    choices are one-hot while the whole encoding stays within
    S_MAX_ONEHOT_DIMS (the smallest choices first); a choice beyond that
    takes one ordered dimension, its values' cells in the spec's order, as
    an int does (a 100 000-value choice one-hot made every fit take 2 GB
    and every save of the 100 002 hyperparameters a second of the
    controller's loop). Suggestions are decoded with spec_param_from_unit
    and an argmax per one-hot choice, and the acquisition is only ever
    evaluated at such legal points (acq's round callback). Until n_init trials are known
    (finished or pending), and until two have results, suggestions come
    from a Sobol design with a seeded random shift.

    The GP fit and the acquisition search run in a worker thread per
    suggestion: the first `suggest` snapshots the data (results, failures
    imputed as the worst value, pending trials as fantasies) and returns
    SCHED_WAIT; later calls return SCHED_WAIT until the worker is done, then
    SCHED_OK. Randomness comes from streams derived from (seed, number of
    suggestions), so the state to save is the data, the pending trials,
    the two counters and the last hyperparameters (the warm start); a
    restored scheduler computes the same suggestions.
*/
#include "sched_bo.h"

#include "acq.h"
#include "gp.h"
#include "warp.h"

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_qrng.h>
#include <cblas.h> /* OpenBLAS: openblas_set_num_threads */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { S_BELIEVER = 0, S_LIAR = 1 };
enum { S_WARP_HALFRANK = 0, S_WARP_NONE = 1, S_WARP_POWER = 2, S_WARP_AUTO = 3 };
enum { S_CON_POF = 0, S_CON_PENALTY = 1 };
enum { S_MO_EHVI = 0, S_MO_PAREGO = 1 };
#define S_EHVI_MAX_OBJECTIVES 3 /* the boxes grow as (front size)^(m-1) */
#define S_EHVI_DRAWS 32
enum { S_FID_RUNGS = 0, S_FID_FINAL = 1, S_FID_JOINT = 2 };
#define S_TOPK 8 /* ranked suggestions the worker returns */
/* The most dimensions one-hot choices may bring the encoding to; beyond,
   a choice is one ordered dimension. Bounds the model's size (theta has
   D + 2 values, the candidates D each) whatever the spec's choices. */
#define S_MAX_ONEHOT_DIMS 256
/* warp "auto" chooses between its two warps from this many observations
   on, and up to this many (beyond, a second fit and the leave-one-out
   inverse cost too much: the power warp with half-rank is used) */
#define S_AUTO_MIN 8
#define S_AUTO_MAX 300
/* the end-game's trust region (option "local"): its side on a dimension of
   average lengthscale, in [0,1] units, starts at S_TR_INIT, doubles after
   S_TR_SUCC improvements in a row and halves after S_TR_FAIL local trials
   in a row that did not improve, within [S_TR_MIN, S_TR_MAX] */
#define S_TR_INIT 0.2
#define S_TR_MIN (1.0 / 256)
#define S_TR_MAX 0.8
#define S_TR_SUCC 2
#define S_TR_FAIL 2

typedef struct {
    const spec_t *spec;
    int np;              /* parameters */
    int D;               /* encoded dimensions */
    int *off;            /* first dimension of parameter k */
    unsigned char *mask; /* 1 for float/int/ordered dimensions, 0 for one-hot */
    unsigned char *hot;  /* per parameter: 1 for a one-hot choice (owned by lay,
                            shared by lay1) */
    int resdim;          /* 1: the last dimension is the resource (the joint
                            multi-fidelity model), kept at 1 by s_round */
} s_layout;

typedef struct {
    long trial;
    json_t *params;  /* owned */
    double *x;       /* D, encoded */
    double value;    /* objective as reported; NaN when none */
    int failed;      /* no usable value: imputed as the worst */
    json_t *metrics; /* other objectives and constraint metrics, owned, or NULL
                        (sched_bo_mo.c) */
    int stopped;     /* ended early (stopped): a partial result, not a final one */
    int local;       /* pending: suggested inside the end-game's trust region */
} s_point;

typedef struct {
    const s_layout *lay; /* borrowed from the scheduler, read-only */
    int n, m;            /* observations, pending */
    double *X, *y, *Xp;  /* n x D, n (lower is better; NaN = failed), m x D */
    double *theta0;      /* warm start or NULL */
    int acq, fantasy, warp;
    gp_prior prior; /* the objective model's lengthscale prior */
    double kappa;
    /* the end-game: > 0 to search only the trust region of this side
       around the incumbent (the best observation) */
    double tr_len;
    /* constraints modelled by probability of feasibility: nc GPs on the
       constraint metrics C (n x nc, NaN when not reported); feas[i] says
       whether observation i met every constraint. nc is 0 otherwise. */
    int nc;
    double *C;
    const spec_constraint *cons; /* nc, the spec's (outlives the job) */
    unsigned char *feas;
    /* several objectives modelled by EHVI: nobj GPs on F (n x nobj, each
       objective scaled to [0, 1], NaN for failed); nobj is 0 otherwise */
    int nobj;
    double *F;
    unsigned long long seed;
    atomic_int cancel;
    atomic_int done;
    pthread_t thread;
    int threaded;
    /* results */
    double *outp;  /* S_TOPK x D */
    int got;       /* rows in outp, or -1 */
    double *theta; /* fitted, D + 2 */
    int theta_ok;
} s_job;

typedef struct {
    sched_t base;
    s_layout lay;
    /* options */
    int acq;
    double kappa;
    long n_init;
    int fantasy;
    int warp;
    int cmodel;     /* S_CON_POF or S_CON_PENALTY */
    int momodel;    /* S_MO_EHVI or S_MO_PAREGO */
    gp_prior prior; /* the objective model's lengthscale prior */
    double local;   /* the end-game: this fraction of budget.trials, last */
    /* state */
    s_point *obs;
    size_t nobs, capobs;
    s_point *pend;
    size_t npend, cappend;
    long sobol;    /* Sobol design points handed out */
    long count;    /* suggestions made */
    double *theta; /* last fitted hyperparameters, D + 2 */
    int have_theta;
    s_job *job; /* in flight, or NULL */
    /* the end-game's trust region (see S_TR_INIT) */
    double tr_len;
    int tr_succ, tr_fail;
    /* multi-fidelity (sched_bo_mf.c): partial results under early stopping */
    int fidelity;  /* S_FID_* */
    bo_mf *mf;     /* owned; NULL without early stopping */
    s_layout lay1; /* joint: lay plus the resource dimension (off shared) */
    int joint;     /* the GP is over (params, resource) */
    int level;     /* level the last model was fitted on (-1: final values) */
} sched_bo;

/* ---- encoding --------------------------------------------------------- */

/* The fixed encoding of an inactive conditional parameter: the middle of
   a numeric dimension, all zeros for a one-hot block, so every trial
   where it is inactive sits at the same place along its dimensions. */
static void s_impute(const s_layout *l, int k, double *xk)
{
    const spec_param *p = &l->spec->params[k];
    if (l->hot[k])
        for (size_t i = 0; i < p->nvalues; i++)
            xk[i] = 0;
    else
        xk[0] = 0.5;
}

static int s_encode(const s_layout *l, const json_t *params, double *x)
{
    if (!json_is_object(params))
        return -1;
    for (int k = 0; k < l->np; k++) {
        const spec_param *p = &l->spec->params[k];
        const json_t *v = json_object_get(params, p->name);
        double *xk = x + l->off[k];
        if (!v && p->when && !spec_param_active(l->spec, (size_t)k, params)) {
            s_impute(l, k, xk); /* an inactive conditional parameter */
            continue;
        }
        if (!v || !spec_param_legal(p, v))
            return -1;
        if (l->hot[k]) {
            for (size_t i = 0; i < p->nvalues; i++)
                xk[i] = json_equal((json_t *)v, json_array_get(p->values, i)) ? 1 : 0;
        } else {
            double u = spec_param_to_unit(p, v);
            if (u < 0)
                return -1;
            xk[0] = u;
        }
    }
    return 0;
}

static size_t s_argmax(const double *x, size_t n)
{
    size_t b = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static json_t *s_decode(const s_layout *l, const double *x)
{
    json_t *o = json_object();
    for (int k = 0; k < l->np; k++) {
        const spec_param *p = &l->spec->params[k];
        const double *xk = x + l->off[k];
        json_t *v =
            l->hot[k]
                ? json_deep_copy(json_array_get(p->values, s_argmax(xk, p->nvalues)))
                : spec_param_from_unit(p, xk[0]);
        json_object_set_new(o, p->name, v);
    }
    spec_params_prune(l->spec, o);
    return o;
}

/* acq's round callback: int dimensions to their integer's position, one-hot
   blocks to their argmax. Thread-safe (reads the spec, allocates only
   private values). */
static void s_round(void *ctx, double *x)
{
    const s_layout *l = ctx;
    if (l->resdim) /* the joint model: suggestions are at the full resource */
        x[l->D - 1] = 1;
    for (int k = 0; k < l->np; k++) {
        const spec_param *p = &l->spec->params[k];
        double *xk = x + l->off[k];
        if (l->hot[k]) {
            size_t b = s_argmax(xk, p->nvalues);
            for (size_t i = 0; i < p->nvalues; i++)
                xk[i] = i == b ? 1 : 0;
        } else if (p->type == SPEC_CHOICE) {
            /* an ordered choice: the centre of its value's cell, as
               spec_param_from_unit and spec_param_to_unit map it */
            double u = isnan(xk[0]) ? 0.5 : fmin(fmax(xk[0], 0), 1);
            size_t i = (size_t)(u * (double)p->nvalues);
            if (i >= p->nvalues)
                i = p->nvalues - 1;
            xk[0] = ((double)i + 0.5) / (double)p->nvalues;
        } else if (p->type == SPEC_INT) {
            json_t *v = spec_param_from_unit(p, xk[0]);
            xk[0] = spec_param_to_unit(p, v);
            json_decref(v);
        }
    }
    /* conditional spaces: inactive parameters to their fixed encoding */
    int any = 0;
    for (int k = 0; k < l->np; k++)
        any |= l->spec->params[k].when != NULL;
    if (!any)
        return;
    json_t *o = s_decode(l, x);
    for (int k = 0; k < l->np; k++)
        if (l->spec->params[k].when && !json_object_get(o, l->spec->params[k].name))
            s_impute(l, k, x + l->off[k]);
    json_decref(o);
}

/* ---- the worker ------------------------------------------------------- */

static void s_job_free(s_job *j)
{
    if (!j)
        return;
    free(j->X);
    free(j->y);
    free(j->Xp);
    free(j->theta0);
    free(j->C);
    free(j->feas);
    free(j->F);
    free(j->outp);
    free(j->theta);
    free(j);
}

/* EHVI (several objectives): a GP per objective on the observations that
   have them all, the front from the feasible observations (by the
   constraint models' means for pending points, which join it at their
   believed values), the reference point 0.1 past the front's worst in
   each objective. 0, or -1 (out of memory or cancelled). */
static int s_ehvi(s_job *j, const acq_con *ac, int nac, const gp_fit_opts *fo,
                  gp_t ***og_p, double **front_p, acq_ehvi **eh_p)
{
    const s_layout *l = j->lay;
    int D = l->D, n = j->n, M = j->nobj, k = 0;
    double *Xo = malloc(sizeof(double) * (size_t)(n ? n : 1) * (size_t)D);
    double *yo = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *front = malloc(sizeof(double) * (size_t)(n + j->m + 1) * (size_t)M);
    gp_t **og = calloc((size_t)M, sizeof *og);
    *og_p = og;
    *front_p = front;
    int rc = -1;
    if (!Xo || !yo || !front || !og)
        goto out;
    for (int o = 0; o < M; o++) {
        k = 0;
        for (int i = 0; i < n; i++) {
            if (isnan(j->F[(size_t)i * M]))
                continue;
            memcpy(Xo + (size_t)k * D, j->X + (size_t)i * D, sizeof(double) * (size_t)D);
            yo[k++] = j->F[(size_t)i * M + o];
        }
        gp_fit_opts f = *fo;
        f.theta0 = NULL;
        f.seed = fo->seed ^ (0xD1B54A32D192ED03ULL * (unsigned long long)(o + 1));
        og[o] = gp_new(D);
        if (!og[o] || gp_set_data(og[o], Xo, yo, k, 1) != 0 || gp_fit(og[o], &f) != 0)
            goto out;
    }
    int np = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(j->F[(size_t)i * M]) && (!j->nc || j->feas[i]))
            memcpy(front + (size_t)(np++) * M, j->F + (size_t)i * M,
                   sizeof(double) * (size_t)M);
    for (int p = 0; p < j->m; p++) {
        const double *xp = j->Xp + (size_t)p * D;
        int ok = 1;
        for (int c = 0; c < nac && ok; c++) {
            double mu, var;
            gp_predict(ac[c].gp, xp, &mu, &var, NULL, NULL);
            ok = ac[c].upper ? mu <= ac[c].bound : mu >= ac[c].bound;
        }
        for (int o = 0; o < M && ok; o++) {
            double mu, var;
            gp_predict(og[o], xp, &mu, &var, NULL, NULL);
            front[(size_t)np * M + o] = gp_y_mean(og[o]) + gp_y_sd(og[o]) * mu;
        }
        np += ok;
    }
    /* the reference point: 0.1 past the worst of the non-dominated points
       (1.1, past every observation, while there are none) */
    double ref[S_EHVI_MAX_OBJECTIVES];
    for (int o = 0; o < M; o++)
        ref[o] = np ? -INFINITY : 1;
    for (int i = 0; i < np; i++) {
        const double *q = front + (size_t)i * M;
        int dom = 0;
        for (int i2 = 0; i2 < np && !dom; i2++) {
            const double *r = front + (size_t)i2 * M;
            int le = 1, lt = 0;
            for (int o = 0; o < M; o++) {
                le &= r[o] <= q[o];
                lt |= r[o] < q[o];
            }
            dom = le && lt;
        }
        for (int o = 0; o < M && !dom; o++)
            ref[o] = fmax(ref[o], q[o]);
    }
    for (int o = 0; o < M; o++)
        ref[o] += 0.1;
    *eh_p = acq_ehvi_new(M, og, front, np, ref, S_EHVI_DRAWS, j->seed ^ 0x5EEDULL);
    rc = *eh_p ? 0 : -1;
out:
    free(Xo);
    free(yo);
    return rc;
}

/* Leave-one-out log density of the better half of the observations (the
   values at or below the median of yo, the unwarped targets), in the units
   the two candidate warps share there (the power warp's): the GP's LOO
   posterior of each such point given the others, in standardised units,
   less log of the GP's standardising sd. -INFINITY when it cannot be
   computed. */
static double s_loo_score(gp_t *gp, const double *yo, double med, double *mv, int n)
{
    if (gp_loo(gp, mv, mv + n) != 0)
        return -INFINITY;
    double sc = 0, lsd = log(gp_y_sd(gp));
    for (int i = 0; i < n; i++) {
        if (yo[i] > med)
            continue;
        double r = gp_y_std(gp, i) - mv[i], v = mv[n + i];
        sc += -0.5 * r * r / v - 0.5 * log(v) - lsd;
    }
    return isfinite(sc) ? sc : -INFINITY;
}

static int s_dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* warp "auto": *gp_p was fitted on y = half-rank(Yeo-Johnson(targets)).
   Fits a second GP on Yeo-Johnson(targets) alone and keeps the one whose
   leave-one-out density of the better half is higher (both warps agree on
   that half, so the densities compare); when it is the second, y receives
   its values. 0, or -1 when cancelled; any other failure keeps the first
   model. */
static int s_auto_warp(s_job *j, gp_t **gp_p, const gp_fit_opts *fo, double *y)
{
    int n = j->n, D = j->lay->D, rc = 0;
    double *yo = malloc(sizeof(double) * (size_t)n);
    double *yy = malloc(sizeof(double) * (size_t)n);
    double *srt = malloc(sizeof(double) * (size_t)n);
    double *mv = malloc(sizeof(double) * 2 * (size_t)n);
    gp_t *g2 = gp_new(D);
    if (!yo || !yy || !srt || !mv || !g2)
        goto done;
    double worst = -INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(j->y[i]))
            worst = fmax(worst, j->y[i]);
    for (int i = 0; i < n; i++)
        yo[i] = isfinite(j->y[i]) ? j->y[i] : worst;
    memcpy(srt, yo, sizeof(double) * (size_t)n);
    qsort(srt, (size_t)n, sizeof(double), s_dbl_cmp);
    double med = srt[(n - 1) / 2];
    memcpy(yy, yo, sizeof(double) * (size_t)n);
    warp_yeojohnson(yy, n);
    if (gp_set_data(g2, j->X, yy, n, 1) != 0)
        goto done;
    gp_set_prior(g2, j->prior);
    /* one start, from the first model's hyperparameters: the data differ
       only in the worse half */
    gp_fit_opts f2 = *fo;
    f2.theta0 = gp_theta(*gp_p);
    f2.restarts = 0;
    f2.default_start = 0;
    if (gp_fit(g2, &f2) != 0) {
        rc = atomic_load(&j->cancel) ? -1 : 0;
        goto done;
    }
    double s1 = s_loo_score(*gp_p, yo, med, mv, n);
    double s2 = s_loo_score(g2, yo, med, mv, n);
    if (s2 > s1) {
        gp_t *t = *gp_p;
        *gp_p = g2;
        g2 = t;
        memcpy(y, yy, sizeof(double) * (size_t)n);
    }
done:
    gp_destroy(&g2);
    free(yo);
    free(yy);
    free(srt);
    free(mv);
    return rc;
}

void sched__bo_tr_box(int D, const unsigned char *mask, const double *theta,
                      const double *x0, double len, double *lo, double *hi)
{
    double ls = 0;
    int nm = 0;
    for (int i = 0; i < D; i++)
        if (!mask || mask[i]) {
            ls += theta[i];
            nm++;
        }
    ls = nm ? ls / nm : 0; /* log of the geometric mean */
    for (int i = 0; i < D; i++) {
        if (mask && !mask[i]) {
            lo[i] = 0;
            hi[i] = 1;
            continue;
        }
        double h = 0.5 * len * exp(theta[i] - ls);
        lo[i] = fmax(0, x0[i] - h);
        hi[i] = fmin(1, x0[i] + h);
    }
}

void sched__bo_tr_update(double *len, int *succ, int *fail, int improved)
{
    if (improved) {
        *fail = 0;
        if (++*succ >= S_TR_SUCC) {
            *len = fmin(2 * *len, S_TR_MAX);
            *succ = 0;
        }
    } else {
        *succ = 0;
        if (++*fail >= S_TR_FAIL) {
            *len = fmax(0.5 * *len, S_TR_MIN);
            *fail = 0;
        }
    }
}

static void s_run_job(s_job *j)
{
    const s_layout *l = j->lay;
    int D = l->D, n = j->n, m = j->m, nt = gp_ntheta(D);
    j->got = -1;
    double *y = malloc(sizeof(double) * (size_t)(n + m));
    double *X = malloc(sizeof(double) * (size_t)(n + m) * (size_t)D);
    double *starts = malloc(sizeof(double) * 3 * (size_t)D);
    gp_t *gp = gp_new(D);
    gp_t **cg = NULL; /* constraint models */
    acq_con *ac = NULL;
    double *key = NULL, *Xc = NULL, *yc = NULL;
    gp_t **og = NULL; /* objective models (EHVI) */
    acq_ehvi *eh = NULL;
    double *front = NULL;
    double *box = NULL; /* the end-game's trust region: lo (D), hi (D) */
    if (!y || !X || !starts || !gp)
        goto out;
    double worst = -INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(j->y[i]))
            worst = fmax(worst, j->y[i]);
    for (int i = 0; i < n; i++)
        y[i] = isfinite(j->y[i]) ? j->y[i] : worst;
    if (j->warp == S_WARP_POWER || j->warp == S_WARP_AUTO)
        warp_yeojohnson(y, n);
    if (j->warp != S_WARP_NONE)
        warp_halfrank(y, n);
    memcpy(X, j->X, sizeof(double) * (size_t)n * (size_t)D);
    if (gp_set_data(gp, X, y, n, 1) != 0)
        goto out;
    gp_set_prior(gp, j->prior);

    gp_fit_opts fo;
    gp_fit_opts_init(&fo);
    fo.theta0 = j->theta0;
    fo.seed = j->seed;
    fo.cancel = &j->cancel;
    /* the cost of a likelihood evaluation grows as n^3: fewer starts as n
       grows, and past 300 points the hyperparameters come from a random
       subset of 300 (the final model uses every point) */
    if (n > 60) {
        fo.restarts = 0;
        fo.default_start = 0;
    }
    if (n > 300) {
        fo.subset = 300;
        fo.polish_iter = 0;
    }
    if (gp_fit(gp, &fo) != 0)
        goto out;
    if (j->warp == S_WARP_AUTO && n >= S_AUTO_MIN && n <= S_AUTO_MAX &&
        s_auto_warp(j, &gp, &fo, y) != 0)
        goto out;
    memcpy(j->theta, gp_theta(gp), sizeof(double) * (size_t)nt);
    j->theta_ok = 1;

    /* constraints: a GP per constraint metric, fitted on the observations
       that reported it */
    int nc = j->nc, nac = 0, any_feas = 0;
    if (nc > 0) {
        cg = calloc((size_t)nc, sizeof *cg);
        ac = calloc((size_t)nc, sizeof *ac);
        key = malloc(sizeof(double) * (size_t)n);
        Xc = malloc(sizeof(double) * (size_t)n * (size_t)D);
        yc = malloc(sizeof(double) * (size_t)n);
        if (!cg || !ac || !key || !Xc || !yc)
            goto out;
        for (int c = 0; c < nc; c++) {
            int k = 0;
            for (int i = 0; i < n; i++) {
                double v = j->C[(size_t)i * nc + c];
                if (!isfinite(v))
                    continue;
                memcpy(Xc + (size_t)k * D, j->X + (size_t)i * D,
                       sizeof(double) * (size_t)D);
                yc[k++] = v;
            }
            if (k < 2)
                continue; /* nothing to learn from yet */
            gp_fit_opts fc = fo;
            fc.theta0 = NULL;
            fc.seed = j->seed ^ (0x9E3779B97F4A7C15ULL * (unsigned long long)(c + 1));
            cg[c] = gp_new(D);
            if (!cg[c] || gp_set_data(cg[c], Xc, yc, k, 1) != 0 ||
                gp_fit(cg[c], &fc) != 0) {
                if (atomic_load(&j->cancel))
                    goto out;
                gp_destroy(&cg[c]);
                continue;
            }
            double sd = gp_y_sd(cg[c]);
            ac[nac++] = (acq_con){cg[c], (j->cons[c].bound - gp_y_mean(cg[c])) / sd,
                                  j->cons[c].upper};
        }
        for (int i = 0; i < n; i++)
            any_feas |= j->feas[i];
        /* while nothing is feasible, rank by the violation: the sum over
           constraints of the distance past the bound, each over its spread */
        for (int i = 0; i < n; i++)
            key[i] = j->feas[i] ? gp_y_std(gp, i) : any_feas ? INFINITY : 0;
        if (!any_feas) {
            for (int c = 0; c < nc; c++) {
                double spread = 0;
                for (int i = 0; i < n; i++) {
                    double v = j->C[(size_t)i * nc + c];
                    if (isfinite(v))
                        spread = fmax(spread, fabs(v - j->cons[c].bound));
                }
                for (int i = 0; i < n; i++) {
                    double v = j->C[(size_t)i * nc + c];
                    double over =
                        j->cons[c].upper ? v - j->cons[c].bound : j->cons[c].bound - v;
                    key[i] += !isfinite(v) ? INFINITY
                              : over > 0   ? over / (spread > 0 ? spread : 1)
                                           : 0;
                }
            }
        }
    }
    double best = INFINITY;
    int bi[3] = {-1, -1, -1};
    double bv[3] = {INFINITY, INFINITY, INFINITY};
    double *xr = l->resdim ? malloc(sizeof(double) * (size_t)D) : NULL;
    if (l->resdim && !xr)
        goto out;
    for (int i = 0; i < n; i++) {
        double v = gp_y_std(gp, i);
        if (xr) {
            /* the joint model: every observation's predicted value at the
               full resource, the incumbent being the best of them */
            double var;
            memcpy(xr, j->X + (size_t)i * D, sizeof(double) * (size_t)D);
            xr[D - 1] = 1;
            gp_predict(gp, xr, &v, &var, NULL, NULL);
        }
        if (nc == 0 || j->feas[i] || (!any_feas && nac == 0))
            best = fmin(best, v);
        double kv = nc > 0 ? key[i] : v;
        if (nc > 0 && isinf(kv))
            continue;
        /* the three best observations seed the local search */
        for (int r = 0; r < 3; r++) {
            if (bi[r] < 0 || kv < bv[r]) {
                for (int s = 2; s > r; s--) {
                    bi[s] = bi[s - 1];
                    bv[s] = bv[s - 1];
                }
                bi[r] = i;
                bv[r] = kv;
                break;
            }
        }
    }
    free(xr);
    if (m > 0) {
        /* fantasies: the pending points count as observed, at the GP mean
           (kriging believer) or at the worst value (constant liar) */
        double wy = -INFINITY;
        for (int i = 0; i < n; i++)
            wy = fmax(wy, y[i]);
        for (int p = 0; p < m; p++) {
            double mu, var;
            gp_predict(gp, j->Xp + (size_t)p * D, &mu, &var, NULL, NULL);
            y[n + p] = j->fantasy == S_LIAR ? wy : gp_y_mean(gp) + gp_y_sd(gp) * mu;
        }
        memcpy(X + (size_t)n * D, j->Xp, sizeof(double) * (size_t)m * (size_t)D);
        if (gp_set_data(gp, X, y, n + m, 0) != 0 || gp_set_theta(gp, j->theta) != 0)
            goto out;
        /* believed values count as observed: a fantasy better than the
           incumbent becomes the incumbent, so EI at it is ~0 (with
           constraints, a fantasy that the constraint models' means call
           feasible) */
        for (int p = 0; p < m; p++) {
            int ok = nc == 0 || any_feas;
            for (int c = 0; c < nac && ok; c++) {
                double mu, var;
                gp_predict(ac[c].gp, j->Xp + (size_t)p * D, &mu, &var, NULL, NULL);
                ok = ac[c].upper ? mu <= ac[c].bound : mu >= ac[c].bound;
            }
            if (ok)
                best = fmin(best, gp_y_std(gp, n + p));
        }
    }
    int ns = 0;
    for (int r = 0; r < 3; r++)
        if (bi[r] >= 0)
            memcpy(starts + (size_t)(ns++) * D, j->X + (size_t)bi[r] * D,
                   sizeof(double) * (size_t)D);
    /* the end-game: a box around the incumbent, its sides in proportion to
       the lengthscales (their geometric mean gets tr_len), searched from
       the incumbent alone */
    if (j->tr_len > 0 && bi[0] >= 0) {
        box = malloc(sizeof(double) * 2 * (size_t)D);
        if (!box)
            goto out;
        sched__bo_tr_box(D, l->mask, gp_theta(gp), j->X + (size_t)bi[0] * D, j->tr_len,
                         box, box + D);
        ns = 1;
    }

    if (j->nobj > 0 && s_ehvi(j, ac, nac, &fo, &og, &front, &eh) != 0)
        goto out;
    acq_t a = {.kind = j->acq == 1 ? ACQ_UCB : ACQ_EI,
               .best = best,
               .kappa = j->kappa,
               .ncons = nac,
               .cons = ac,
               .infeasible = nac > 0 && !any_feas,
               .ehvi = eh};
    acq_opt_opts ao;
    acq_opt_opts_init(&ao);
    ao.n_candidates = D > 10 ? 2048 : 1024;
    if (n + m <= 100) {
        /* cheap while n is small: search the acquisition harder */
        ao.n_local = 512;
        ao.n_polish = 10;
        ao.max_iter = 80;
    } else if (n + m > 500) {
        ao.n_candidates = 512;
        ao.n_polish = 3;
        ao.max_iter = 20;
    }
    ao.mask = l->mask;
    ao.round = s_round;
    ao.round_ctx = (void *)l;
    ao.starts = starts;
    ao.n_starts = ns;
    ao.lo = box;
    ao.hi = box ? box + D : NULL;
    ao.seed = j->seed ^ 0xA5A5A5A5ULL;
    ao.cancel = &j->cancel;
    double vals[S_TOPK];
    j->got = acq_optimize(gp, &a, &ao, j->outp, vals, S_TOPK);
out:
    free(box);
    acq_ehvi_destroy(&eh);
    for (int k = 0; og && k < j->nobj; k++)
        gp_destroy(&og[k]);
    free(og);
    free(front);
    for (int c = 0; cg && c < j->nc; c++)
        gp_destroy(&cg[c]);
    free(cg);
    free(ac);
    free(key);
    free(Xc);
    free(yc);
    gp_destroy(&gp);
    free(starts);
    free(y);
    free(X);
}

static void *s_worker(void *arg)
{
    s_job *j = arg;
    s_run_job(j);
    atomic_store(&j->done, 1);
    return NULL;
}

/* Stops and frees the job in flight, if any. */
static void s_job_abandon(sched_bo *b)
{
    if (!b->job)
        return;
    atomic_store(&b->job->cancel, 1);
    if (b->job->threaded)
        pthread_join(b->job->thread, NULL);
    s_job_free(b->job);
    b->job = NULL;
}

/* ---- state ------------------------------------------------------------ */

static void s_point_fini(s_point *p)
{
    json_decref(p->metrics);
    p->metrics = NULL;
    json_decref(p->params);
    free(p->x);
    p->params = NULL;
    p->x = NULL;
}

static int s_push(s_point **arr, size_t *n, size_t *cap, s_point p)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        s_point *na = realloc(*arr, sizeof(s_point) * nc);
        if (!na)
            return -1;
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*n)++] = p;
    return 0;
}

static void s_clear(sched_bo *b)
{
    for (size_t i = 0; i < b->nobs; i++)
        s_point_fini(&b->obs[i]);
    for (size_t i = 0; i < b->npend; i++)
        s_point_fini(&b->pend[i]);
    b->nobs = b->npend = 0;
}

/* deterministic streams: (seed, purpose, index) */
static void s_rng(const sched_bo *b, sched_rng *r, unsigned long long purpose, long index)
{
    sched_rng_seed(r, (unsigned long long)b->base.spec->seed,
                   (purpose << 48) ^ (unsigned long long)index);
}

static unsigned long long s_job_seed(const sched_bo *b)
{
    sched_rng r;
    s_rng(b, &r, 2, b->count);
    return sched_rng_u64(&r);
}

/* Sobol point `idx` of the initial design in [0,1]^np, shifted by a
   seeded random vector (GSL's Sobol stops at 40 dimensions; beyond that,
   uniform draws). */
static void s_sobol(const sched_bo *b, long idx, double *u)
{
    int np = b->lay.np;
    sched_rng r;
    if (np > 40) {
        s_rng(b, &r, 3, idx);
        for (int k = 0; k < np; k++)
            u[k] = sched_rng_uniform(&r);
        return;
    }
    s_rng(b, &r, 1, 0);
    double shift[40]; /* np <= 40 here */
    for (int k = 0; k < np; k++)
        shift[k] = sched_rng_uniform(&r);
    gsl_qrng *q = gsl_qrng_alloc(gsl_qrng_sobol, (unsigned)np);
    int have = q != NULL;
    for (long i = 0; i <= idx + 1 && q; i++)
        gsl_qrng_get(q, u); /* the first point, the origin, is skipped */
    if (q)
        gsl_qrng_free(q);
    for (int k = 0; k < np; k++) {
        double w = (have ? u[k] : sched_rng_uniform(&r)) + shift[k];
        u[k] = w >= 1 ? w - 1 : w;
    }
}

static int s_is_known(const sched_bo *b, const json_t *params)
{
    for (size_t i = 0; i < b->nobs; i++)
        if (json_equal(b->obs[i].params, (json_t *)params))
            return 1;
    for (size_t i = 0; i < b->npend; i++)
        if (json_equal(b->pend[i].params, (json_t *)params))
            return 1;
    return 0;
}

/* Records a suggestion as pending (local: from the end-game's trust
   region) and hands it out. Takes params. */
static int s_hand_out(sched_bo *b, long trial_id, json_t *params, int local, json_t **out)
{
    spec_params_prune(b->lay.spec, params); /* conditional spaces */
    s_point p = {
        trial_id, params, malloc(sizeof(double) * (size_t)(b->lay.D ? b->lay.D : 1)),
        NAN,      0,      NULL,
        0,        local};
    if (!p.x || s_encode(&b->lay, params, p.x) != 0 ||
        s_push(&b->pend, &b->npend, &b->cappend, p) != 0) {
        free(p.x);
        json_decref(params);
        return SCHED_ERR;
    }
    b->count++;
    *out = json_deep_copy(params);
    return *out ? SCHED_OK : SCHED_ERR;
}

/* Several objectives or constraints: y from sched_bo_mo.c instead. */
static int s_mo_targets(sched_bo *b, double *y)
{
    const spec_t *spec = b->base.spec;
    if (spec->nobjectives <= 1 && !spec->nconstraints)
        return 0;
    size_t n = b->nobs;
    double *v = malloc(sizeof(double) * (n ? n : 1));
    json_t **mt = malloc(sizeof(json_t *) * (n ? n : 1));
    unsigned char *f = malloc(n ? n : 1);
    int rc = -1;
    if (v && mt && f) {
        for (size_t i = 0; i < n; i++) {
            v[i] = b->obs[i].value;
            mt[i] = b->obs[i].metrics;
            f[i] = (unsigned char)b->obs[i].failed;
        }
        rc = sched__bo_targets(spec, n, v, mt, f, s_job_seed(b),
                               b->cmodel == S_CON_PENALTY, y);
    }
    free(v);
    free(mt);
    free(f);
    return rc;
}

/* Multi-fidelity: the trials that finished (not stopped, not failed). */
static long s_nfinal(const sched_bo *b)
{
    long n = 0;
    for (size_t i = 0; i < b->nobs; i++)
        n += !b->obs[i].failed && !b->obs[i].stopped;
    return n;
}

/* Multi-fidelity: how many trials, ended or running, reached level k. */
static long s_nlevel(const sched_bo *b, int k)
{
    long n = 0;
    for (size_t i = 0; i < b->nobs; i++)
        n += !b->obs[i].failed && !isnan(sched__bo_mf_at(b->mf, b->obs[i].trial, k));
    for (size_t i = 0; i < b->npend; i++)
        n += !isnan(sched__bo_mf_at(b->mf, b->pend[i].trial, k));
    return n;
}

/* The level to model (BOHB): the final values when n_init trials
   finished, else the highest level n_init trials reached, else whichever
   of the final values and the lowest level has more data. */
static int s_pick_level(const sched_bo *b)
{
    long nfin = s_nfinal(b);
    if (nfin >= b->n_init || b->fidelity == S_FID_FINAL)
        return -1;
    for (int k = sched__bo_mf_levels(b->mf) - 1; k >= 0; k--)
        if (s_nlevel(b, k) >= b->n_init)
            return k;
    return sched__bo_mf_levels(b->mf) > 0 && s_nlevel(b, 0) > nfin ? 0 : -1;
}

/* Fills the job's data for multi-fidelity: at level -1 the ended trials
   that were not stopped (failed ones as failures) with their final values;
   at level k every trial, ended or running, that reached it, with its
   value there, and the failed ones. Running trials that did not reach the
   level are the fantasies; stopped ones below it are left out. */
static void s_mf_data(sched_bo *b, s_job *j, int level)
{
    int D = b->lay.D, maximize = b->base.spec->maximize, n = 0, m = 0;
    for (size_t i = 0; i < b->nobs; i++) {
        const s_point *p = &b->obs[i];
        double v = p->failed   ? NAN
                   : level < 0 ? (p->stopped ? NAN : p->value)
                               : sched__bo_mf_at(b->mf, p->trial, level);
        if (!p->failed && isnan(v))
            continue;
        memcpy(j->X + (size_t)n * D, p->x, sizeof(double) * (size_t)D);
        j->y[n++] = p->failed ? NAN : maximize ? -v : v;
    }
    for (size_t i = 0; i < b->npend; i++) {
        const s_point *p = &b->pend[i];
        double v = level < 0 ? NAN : sched__bo_mf_at(b->mf, p->trial, level);
        if (isnan(v)) {
            memcpy(j->Xp + (size_t)m++ * D, p->x, sizeof(double) * (size_t)D);
            continue;
        }
        memcpy(j->X + (size_t)n * D, p->x, sizeof(double) * (size_t)D);
        j->y[n++] = maximize ? -v : v;
    }
    j->n = n;
    j->m = m;
}

/* The joint model's data: a row (x, u) per level a trial reached, u its
   place on the resource ladder (sched__bo_mf_u), and (x, 1) for a finished
   trial's final value (failed ones there as failures); running trials are
   fantasies at (x, 1). Stopped trials have their partial rows only. */
static void s_joint_data(sched_bo *b, s_job *j)
{
    int D = b->lay.D, D1 = D + 1, maximize = b->base.spec->maximize, n = 0, m = 0;
    int nl = sched__bo_mf_levels(b->mf);
    for (size_t i = 0; i < b->nobs + b->npend; i++) {
        int ended = i < b->nobs;
        const s_point *p = ended ? &b->obs[i] : &b->pend[i - b->nobs];
        for (int k = 0; k <= nl; k++) {
            double v = k < nl       ? sched__bo_mf_at(b->mf, p->trial, k)
                       : !ended     ? NAN
                       : p->failed  ? NAN
                       : p->stopped ? NAN
                                    : p->value;
            double *row;
            if (k == nl && !ended)
                row = j->Xp + (size_t)m++ * D1;
            else if (!isnan(v) || (k == nl && p->failed)) {
                j->y[n] = p->failed && k == nl ? NAN : maximize ? -v : v;
                row = j->X + (size_t)n++ * D1;
            } else
                continue;
            memcpy(row, p->x, sizeof(double) * (size_t)D);
            row[D] = sched__bo_mf_u(b->mf, k);
        }
    }
    j->n = n;
    j->m = m;
}

/* Probability of feasibility: the constraint metrics of every
   observation, and which observations met every constraint. */
static int s_con_data(sched_bo *b, s_job *j)
{
    const spec_t *spec = b->base.spec;
    int n = j->n, nc = (int)spec->nconstraints;
    if (b->cmodel != S_CON_POF || nc == 0)
        return 0;
    j->nc = nc;
    j->cons = spec->constraints;
    j->C = malloc(sizeof(double) * (size_t)(n ? n : 1) * (size_t)nc);
    j->feas = malloc((size_t)(n ? n : 1));
    if (!j->C || !j->feas)
        return -1;
    for (int i = 0; i < n; i++) {
        const s_point *p = &b->obs[i];
        int ok = !p->failed && isfinite(j->y[i]);
        for (int c = 0; c < nc; c++) {
            const spec_constraint *sc = &spec->constraints[c];
            const json_t *g = json_object_get(p->metrics, sc->metric);
            double v = json_is_number(g) ? json_number_value(g) : NAN;
            j->C[(size_t)i * nc + c] = isfinite(v) ? v : NAN;
            ok = ok && isfinite(v) && (sc->upper ? v <= sc->bound : v >= sc->bound);
        }
        j->feas[i] = (unsigned char)ok;
    }
    return 0;
}

/* EHVI: every observation's objectives, each scaled to [0, 1]. */
static int s_obj_data(sched_bo *b, s_job *j)
{
    const spec_t *spec = b->base.spec;
    int n = j->n, m = (int)spec->nobjectives;
    if (b->momodel != S_MO_EHVI || m < 2 || m > S_EHVI_MAX_OBJECTIVES)
        return 0;
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    json_t **mt = malloc(sizeof(json_t *) * (size_t)(n ? n : 1));
    unsigned char *f = malloc((size_t)(n ? n : 1));
    j->F = malloc(sizeof(double) * (size_t)(n ? n : 1) * (size_t)m);
    int rc = -1;
    if (v && mt && f && j->F) {
        for (int i = 0; i < n; i++) {
            v[i] = b->obs[i].value;
            mt[i] = b->obs[i].metrics;
            f[i] = (unsigned char)b->obs[i].failed;
        }
        rc = sched__bo_objectives(spec, (size_t)n, v, mt, f, j->F);
        j->nobj = rc == 0 ? m : 0;
    }
    free(v);
    free(mt);
    free(f);
    return rc;
}

/* Whether the next suggestion is the end-game's (option "local"): within
   the last `local` fraction of budget.trials,
   for one objective without constraints or early stopping. */
static int s_local_now(const sched_bo *b)
{
    const spec_t *sp = b->base.spec;
    if (!(b->local > 0) || b->mf || sp->nobjectives > 1 || sp->nconstraints)
        return 0;
    long start = (long)ceil((1 - b->local) * (double)sp->trials - 1e-9);
    return b->count >= start;
}

static int s_start_job(sched_bo *b)
{
    const s_layout *ml = b->joint ? &b->lay1 : &b->lay; /* the model's */
    int D = ml->D, nt = gp_ntheta(D);
    s_job *j = calloc(1, sizeof *j);
    if (!j)
        return -1;
    j->lay = ml;
    j->n = (int)b->nobs;
    j->m = (int)b->npend;
    /* multi-fidelity: running ones too; joint: a row per level */
    size_t rows = (b->nobs + b->npend + 1) *
                  (b->joint ? (size_t)sched__bo_mf_levels(b->mf) + 1 : 1);
    j->X = malloc(sizeof(double) * rows * (size_t)D);
    j->y = malloc(sizeof(double) * rows);
    j->Xp = malloc(sizeof(double) * (size_t)(j->m ? j->m : 1) * (size_t)D);
    j->outp = malloc(sizeof(double) * S_TOPK * (size_t)D);
    j->theta = malloc(sizeof(double) * (size_t)nt);
    if (b->have_theta) {
        j->theta0 = malloc(sizeof(double) * (size_t)nt);
        if (j->theta0)
            memcpy(j->theta0, b->theta, sizeof(double) * (size_t)nt);
    }
    if (!j->X || !j->y || !j->Xp || !j->outp || !j->theta ||
        (b->have_theta && !j->theta0)) {
        s_job_free(j);
        return -1;
    }
    int maximize = b->base.spec->maximize;
    b->level = -1;
    if (b->joint) {
        s_joint_data(b, j);
    } else if (b->mf) {
        b->level = s_pick_level(b);
        s_mf_data(b, j, b->level);
    } else {
        for (int i = 0; i < j->n; i++) {
            const s_point *p = &b->obs[i];
            memcpy(j->X + (size_t)i * D, p->x, sizeof(double) * (size_t)D);
            j->y[i] = p->failed ? NAN : maximize ? -p->value : p->value;
        }
        if (s_mo_targets(b, j->y) != 0 || s_con_data(b, j) != 0 ||
            s_obj_data(b, j) != 0) {
            s_job_free(j);
            return -1;
        }
        for (int i = 0; i < j->m; i++)
            memcpy(j->Xp + (size_t)i * D, b->pend[i].x, sizeof(double) * (size_t)D);
    }
    j->acq = b->acq;
    j->kappa = b->kappa;
    j->fantasy = b->fantasy;
    j->warp = b->warp;
    j->prior = b->prior;
    if (!s_local_now(b)) {
        /* before the end-game, or out of it again after `study extend`
           moved budget.trials: the next end-game starts afresh */
        b->tr_len = S_TR_INIT;
        b->tr_succ = b->tr_fail = 0;
        j->tr_len = 0;
    } else
        j->tr_len = b->tr_len;
    j->seed = s_job_seed(b);
    atomic_init(&j->cancel, 0);
    atomic_init(&j->done, 0);
    b->job = j;
    if (pthread_create(&j->thread, NULL, s_worker, j) == 0) {
        j->threaded = 1;
    } else {
        /* no thread: compute here rather than fail */
        s_worker(j);
    }
    return 0;
}

static int s_finish_job(sched_bo *b, long trial_id, json_t **params)
{
    s_job *j = b->job;
    if (j->threaded)
        pthread_join(j->thread, NULL);
    b->job = NULL;
    int D = (b->joint ? b->lay1.D : b->lay.D), nt = gp_ntheta(D);
    if (j->theta_ok) {
        memcpy(b->theta, j->theta, sizeof(double) * (size_t)nt);
        b->have_theta = 1;
    }
    json_t *pick = NULL;
    int local = j->tr_len > 0;
    for (int r = 0; r < j->got && !pick; r++) {
        json_t *p = s_decode(&b->lay, j->outp + (size_t)r * D);
        if (!s_is_known(b, p))
            pick = p;
        else
            json_decref(p);
    }
    s_job_free(j);
    if (!pick) {
        /* the model failed, or every good point is taken: a random one */
        local = 0;
        sched_rng r;
        s_rng(b, &r, 4, b->count);
        pick = json_object();
        for (int k = 0; k < b->lay.np; k++) {
            const spec_param *sp = &b->lay.spec->params[k];
            json_object_set_new(pick, sp->name,
                                spec_param_from_unit(sp, sched_rng_uniform(&r)));
        }
    }
    return s_hand_out(b, trial_id, pick, local, params);
}

/* ---- the interface ---------------------------------------------------- */

static int s_suggest(sched_t *s, long trial_id, json_t **params)
{
    sched_bo *b = (sched_bo *)s;
    if (b->job) {
        if (!atomic_load(&b->job->done))
            return SCHED_WAIT;
        return s_finish_job(b, trial_id, params);
    }
    if (b->lay.np == 0) {
        *params = json_object();
        b->count++;
        return SCHED_OK;
    }
    long nreal = 0;
    for (size_t i = 0; i < b->nobs; i++)
        nreal += !b->obs[i].failed;
    if (b->mf) { /* partial results count, finished-looking stopped ones do not */
        nreal = s_nfinal(b);
        if (b->fidelity != S_FID_FINAL && sched__bo_mf_levels(b->mf) > 0 &&
            s_nlevel(b, 0) > nreal)
            nreal = s_nlevel(b, 0);
    }
    if ((long)(b->nobs + b->npend) < b->n_init || nreal < 2) {
        int np = b->lay.np;
        double *u = malloc(sizeof(double) * (size_t)(np > 0 ? np : 1));
        if (!u)
            return SCHED_ERR;
        s_sobol(b, b->sobol, u);
        b->sobol++;
        json_t *p = json_object();
        for (int k = 0; k < np; k++)
            json_object_set_new(p, b->lay.spec->params[k].name,
                                spec_param_from_unit(&b->lay.spec->params[k], u[k]));
        free(u);
        return s_hand_out(b, trial_id, p, 0, params);
    }
    if (s_start_job(b) != 0)
        return SCHED_ERR;
    if (atomic_load(&b->job->done) && !b->job->threaded)
        return s_finish_job(b, trial_id, params);
    return SCHED_WAIT;
}

/* The end-game's rule for a local trial that ended: did it improve on
   the best value of the other trials by 1e-3 of their spread? */
static void s_tr_result(sched_bo *b, long trial_id, sched_outcome outcome, double value)
{
    double sign = b->base.spec->maximize ? -1 : 1, lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < b->nobs; i++)
        if (!b->obs[i].failed && b->obs[i].trial != trial_id) {
            lo = fmin(lo, sign * b->obs[i].value);
            hi = fmax(hi, sign * b->obs[i].value);
        }
    int ok = outcome != SCHED_FAILED && isfinite(value);
    int improved = ok && (!isfinite(lo) || sign * value < lo - 1e-3 * (hi - lo));
    sched__bo_tr_update(&b->tr_len, &b->tr_succ, &b->tr_fail, improved);
}

static void s_on_complete(sched_t *s, long trial_id, const json_t *params,
                          sched_outcome outcome, double value)
{
    sched_bo *b = (sched_bo *)s;
    int D = b->lay.D;
    s_point p = {trial_id, NULL, malloc(sizeof(double) * (size_t)(D ? D : 1)),
                 value,    0,    NULL,
                 0,        0};
    if (!p.x)
        return;
    /* the trial's own params (they may have been changed live), else what
       was suggested for it */
    long pi = -1;
    for (size_t i = 0; i < b->npend; i++)
        if (b->pend[i].trial == trial_id)
            pi = (long)i;
    if (params && s_encode(&b->lay, params, p.x) == 0) {
        p.params = json_deep_copy(params);
    } else if (pi >= 0) {
        p.params = json_incref(b->pend[pi].params);
        memcpy(p.x, b->pend[pi].x, sizeof(double) * (size_t)D);
    }
    if (pi >= 0 && b->pend[pi].local && p.params)
        s_tr_result(b, trial_id, outcome, value);
    if (pi >= 0) {
        s_point_fini(&b->pend[pi]);
        memmove(&b->pend[pi], &b->pend[pi + 1],
                sizeof(s_point) * (b->npend - (size_t)pi - 1));
        b->npend--;
    }
    if (!p.params) {
        free(p.x);
        return;
    }
    p.failed = outcome == SCHED_FAILED || !isfinite(value);
    if (p.failed)
        p.value = NAN;
    p.stopped = outcome == SCHED_STOPPED;
    for (size_t i = 0; i < b->nobs; i++) {
        if (b->obs[i].trial == trial_id &&
            trial_id >= 0) { /* reported twice: the last wins */
            s_point_fini(&b->obs[i]);
            b->obs[i] = p;
            return;
        }
    }
    if (s_push(&b->obs, &b->nobs, &b->capobs, p) != 0)
        s_point_fini(&p);
}

/* on_complete with the trial's last metrics: keeps the other objectives
   and the constraint metrics with the observation. */
static void s_on_complete_metrics(sched_t *s, long trial_id, const json_t *params,
                                  sched_outcome outcome, double value,
                                  const json_t *metrics)
{
    sched_bo *b = (sched_bo *)s;
    s_on_complete(s, trial_id, params, outcome, value);
    const spec_t *spec = s->spec;
    for (size_t i = 0; i < b->nobs; i++) {
        if (b->obs[i].trial != trial_id)
            continue;
        json_t *keep = json_object();
        for (size_t k = 1; k < spec->nobjectives; k++) {
            json_t *v = json_object_get(metrics, spec->objectives[k].metric);
            if (v)
                json_object_set(keep, spec->objectives[k].metric, v);
        }
        for (size_t k = 0; k < spec->nconstraints; k++) {
            json_t *v = json_object_get(metrics, spec->constraints[k].metric);
            if (v)
                json_object_set(keep, spec->constraints[k].metric, v);
        }
        json_decref(b->obs[i].metrics);
        b->obs[i].metrics = keep;
    }
}

static json_t *s_save(sched_t *s)
{
    sched_bo *b = (sched_bo *)s;
    json_t *obs = json_array(), *pend = json_array(), *theta = json_null();
    for (size_t i = 0; i < b->nobs; i++) {
        const s_point *p = &b->obs[i];
        json_t *o =
            json_pack("{s:I,s:O,s:o}", "trial", (json_int_t)p->trial, "params", p->params,
                      "value", p->failed ? json_null() : json_real(p->value));
        if (p->metrics)
            json_object_set(o, "metrics", p->metrics);
        if (p->stopped)
            json_object_set_new(o, "stopped", json_true());
        json_array_append_new(obs, o);
    }
    for (size_t i = 0; i < b->npend; i++) {
        json_t *o = json_pack("{s:I,s:O}", "trial", (json_int_t)b->pend[i].trial,
                              "params", b->pend[i].params);
        if (o && b->pend[i].local)
            json_object_set_new(o, "local", json_true());
        json_array_append_new(pend, o);
    }
    if (b->have_theta) {
        json_decref(theta);
        theta = json_array();
        for (int i = 0; i < gp_ntheta(b->joint ? b->lay1.D : b->lay.D); i++)
            json_array_append_new(theta, json_real(b->theta[i]));
    }
    json_t *st = json_pack("{s:i,s:I,s:I,s:o,s:o,s:o}", "version", 1, "count",
                           (json_int_t)b->count, "sobol", (json_int_t)b->sobol, "theta",
                           theta, "obs", obs, "pending", pend);
    if (b->local > 0 && st)
        json_object_set_new(st, "trust",
                            json_pack("{s:f,s:i,s:i}", "len", b->tr_len, "succ",
                                      b->tr_succ, "fail", b->tr_fail));
    if (b->mf && st) {
        json_object_set_new(st, "partial", sched__bo_mf_save(b->mf));
        json_object_set_new(st, "level", json_integer(b->level)); /* for people */
    }
    return st;
}

static int s_load_points(sched_bo *b, json_t *arr, int with_value, s_point **out,
                         size_t *n, size_t *cap)
{
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e)
    {
        json_int_t trial;
        json_t *params, *value = NULL;
        if (json_unpack(e, "{s:I,s:o,s?o}", "trial", &trial, "params", &params, "value",
                        &value) != 0)
            return -1;
        s_point p = {
            (long)trial, NULL, malloc(sizeof(double) * (size_t)(b->lay.D ? b->lay.D : 1)),
            NAN,         0,    NULL,
            0,           0};
        if (!p.x || s_encode(&b->lay, params, p.x) != 0) {
            free(p.x);
            return -1;
        }
        if (with_value) {
            if (value && json_is_number(value) && isfinite(json_number_value(value)))
                p.value = json_number_value(value);
            else if (value && json_is_null(value))
                p.failed = 1;
            else {
                free(p.x);
                return -1;
            }
        }
        p.params = json_deep_copy(params);
        json_t *mt = json_object_get(e, "metrics");
        if (json_is_object(mt))
            p.metrics = json_deep_copy(mt);
        p.stopped = json_is_true(json_object_get(e, "stopped"));
        p.local = !with_value && json_is_true(json_object_get(e, "local"));
        if (s_push(out, n, cap, p) != 0) {
            s_point_fini(&p);
            return -1;
        }
    }
    return 0;
}

static int s_restore(sched_t *s, const json_t *state)
{
    sched_bo *b = (sched_bo *)s;
    json_int_t count, sobol;
    json_t *theta, *obs, *pend;
    int version;
    if (json_unpack((json_t *)state, "{s:i,s:I,s:I,s:o,s:o,s:o}", "version", &version,
                    "count", &count, "sobol", &sobol, "theta", &theta, "obs", &obs,
                    "pending", &pend) != 0 ||
        version != 1 || count < 0 || sobol < 0 || !json_is_array(obs) ||
        !json_is_array(pend))
        return -1;
    int nt = gp_ntheta(b->joint ? b->lay1.D : b->lay.D);
    int have_theta = 0;
    if (json_is_array(theta) && json_array_size(theta) != (size_t)nt) {
        /* saved under another encoding (a large choice was one-hot before
           S_MAX_ONEHOT_DIMS): only a warm start, so the next fit starts
           afresh */
        have_theta = 0;
    } else if (json_is_array(theta)) {
        for (int i = 0; i < nt; i++) {
            json_t *t = json_array_get(theta, (size_t)i);
            if (!json_is_number(t) || !isfinite(json_number_value(t)))
                return -1;
        }
        have_theta = 1;
    } else if (!json_is_null(theta))
        return -1;
    /* the end-game's trust region (absent in a state saved before it) */
    double tr_len = S_TR_INIT;
    int tr_succ = 0, tr_fail = 0;
    json_t *trust = json_object_get(state, "trust");
    if (trust &&
        (json_unpack(trust, "{s:F,s:i,s:i}", "len", &tr_len, "succ", &tr_succ, "fail",
                     &tr_fail) != 0 ||
         !(tr_len >= S_TR_MIN && tr_len <= S_TR_MAX) || tr_succ < 0 || tr_fail < 0))
        return -1;
    /* partial results (absent in a state saved before multi-fidelity) */
    json_t *partial = json_object_get(state, "partial");
    bo_mf *mf = NULL;
    if (b->mf) {
        mf = sched__bo_mf_new(b->base.spec);
        if (!mf || (partial && sched__bo_mf_restore(mf, partial) != 0)) {
            sched__bo_mf_free(mf);
            return -1;
        }
    }
    /* parse into a fresh scheduler state; swap only when all is well */
    sched_bo tmp = {0};
    tmp.lay = b->lay;
    if (s_load_points(&tmp, obs, 1, &tmp.obs, &tmp.nobs, &tmp.capobs) != 0 ||
        s_load_points(&tmp, pend, 0, &tmp.pend, &tmp.npend, &tmp.cappend) != 0) {
        s_clear(&tmp);
        free(tmp.obs);
        free(tmp.pend);
        sched__bo_mf_free(mf);
        return -1;
    }
    if (mf) {
        sched__bo_mf_free(b->mf);
        b->mf = mf;
    }
    s_job_abandon(b);
    s_clear(b);
    free(b->obs);
    free(b->pend);
    b->obs = tmp.obs;
    b->nobs = tmp.nobs;
    b->capobs = tmp.capobs;
    b->pend = tmp.pend;
    b->npend = tmp.npend;
    b->cappend = tmp.cappend;
    b->count = (long)count;
    b->sobol = (long)sobol;
    b->tr_len = tr_len;
    b->tr_succ = tr_succ;
    b->tr_fail = tr_fail;
    json_t *lv = json_object_get(state, "level");
    b->level = json_is_integer(lv) ? (int)json_integer_value(lv) : -1;
    b->have_theta = have_theta;
    if (have_theta) /* checked above */
        for (int i = 0; i < nt; i++)
            b->theta[i] = json_number_value(json_array_get(theta, (size_t)i));
    return 0;
}

static void s_destroy(sched_t *s)
{
    sched_bo *b = (sched_bo *)s;
    s_job_abandon(b);
    s_clear(b);
    free(b->obs);
    free(b->pend);
    free(b->theta);
    free(b->lay.off);
    free(b->lay.hot);
    free(b->lay.mask);
    free(b->lay1.mask);
    sched__bo_mf_free(b->mf);
    free(b);
}

/* Multi-fidelity: the objective and resource reports of running trials. */
static int s_on_metric(sched_t *s, long trial_id, long step, const char *metric,
                       double value, double now, sched_instr *out, int max)
{
    sched__bo_mf_metric(((sched_bo *)s)->mf, trial_id, step, metric, value);
    return 0;
}

/* no on_metric without early stopping (bo learns from ended trials only),
   no on_checkpoint */
static const sched_ops s_ops = {.name = "bo",
                                .suggest = s_suggest,
                                .on_complete = s_on_complete,
                                .on_complete_metrics = s_on_complete_metrics,
                                .save = s_save,
                                .restore = s_restore,
                                .destroy = s_destroy};
static const sched_ops s_ops_mf = {.name = "bo",
                                   .suggest = s_suggest,
                                   .on_metric = s_on_metric,
                                   .on_complete = s_on_complete,
                                   .on_complete_metrics = s_on_complete_metrics,
                                   .save = s_save,
                                   .restore = s_restore,
                                   .destroy = s_destroy};

static int s_fail(char *err, size_t errsize, const char *key, const char *text)
{
    snprintf(err, errsize, "scheduler.%s: %s", key, text);
    return -1;
}

static int s_options(sched_bo *b, const spec_t *spec, char *err, size_t errsize)
{
    const char *key;
    json_t *v;
    json_object_foreach(spec->sched_opts, key, v)
    {
        if (!strcmp(key, "type") || !strcmp(key, "seed"))
            continue;
        if (!strcmp(key, "acq")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "ei") && strcmp(a, "ucb")))
                return s_fail(err, errsize, key, "must be \"ei\" or \"ucb\"");
            b->acq = !strcmp(a, "ucb");
        } else if (!strcmp(key, "kappa")) {
            if (!json_is_number(v) || !(json_number_value(v) >= 0) ||
                json_number_value(v) > 100)
                return s_fail(err, errsize, key, "must be a number from 0 to 100");
            b->kappa = json_number_value(v);
        } else if (!strcmp(key, "n_init")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > 100000)
                return s_fail(err, errsize, key, "must be an integer from 1 to 100000");
            b->n_init = (long)json_integer_value(v);
        } else if (!strcmp(key, "fantasy")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "believer") && strcmp(a, "liar")))
                return s_fail(err, errsize, key, "must be \"believer\" or \"liar\"");
            b->fantasy = !strcmp(a, "liar") ? S_LIAR : S_BELIEVER;
        } else if (!strcmp(key, "constraint_model")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "pof") && strcmp(a, "penalty")))
                return s_fail(err, errsize, key, "must be \"pof\" or \"penalty\"");
            b->cmodel = !strcmp(a, "penalty") ? S_CON_PENALTY : S_CON_POF;
        } else if (!strcmp(key, "mo")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "ehvi") && strcmp(a, "parego")))
                return s_fail(err, errsize, key, "must be \"ehvi\" or \"parego\"");
            b->momodel = !strcmp(a, "parego") ? S_MO_PAREGO : S_MO_EHVI;
        } else if (!strcmp(key, "lengthscale_prior")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "wall") && strcmp(a, "lognormal")))
                return s_fail(err, errsize, key, "must be \"wall\" or \"lognormal\"");
            b->prior = !strcmp(a, "lognormal") ? GP_PRIOR_LOGNORMAL : GP_PRIOR_WALL;
        } else if (!strcmp(key, "warp")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "auto") && strcmp(a, "power") && strcmp(a, "halfrank") &&
                       strcmp(a, "none")))
                return s_fail(err, errsize, key,
                              "must be \"auto\", \"power\", \"halfrank\" or \"none\"");
            b->warp = !strcmp(a, "none")       ? S_WARP_NONE
                      : !strcmp(a, "halfrank") ? S_WARP_HALFRANK
                      : !strcmp(a, "power")    ? S_WARP_POWER
                                               : S_WARP_AUTO;
        } else if (!strcmp(key, "local")) {
            if (!json_is_number(v) || !(json_number_value(v) >= 0) ||
                json_number_value(v) > 1)
                return s_fail(err, errsize, key,
                              "must be a number from 0 to 1 (the fraction of "
                              "budget.trials at the end searched locally; 0: never)");
            b->local = json_number_value(v);
        } else if (!strcmp(key, "fidelity")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "rungs") && strcmp(a, "final") && strcmp(a, "joint")))
                return s_fail(err, errsize, key,
                              "must be \"joint\", \"rungs\" or \"final\"");
            b->fidelity = !strcmp(a, "final")   ? S_FID_FINAL
                          : !strcmp(a, "rungs") ? S_FID_RUNGS
                                                : S_FID_JOINT;
        } else {
            return s_fail(
                err, errsize, key,
                "unknown option for the bo scheduler (expected type, seed, acq, kappa, "
                "n_init, fantasy, warp, constraint_model, lengthscale_prior, mo, "
                "fidelity, local)");
        }
    }
    return 0;
}

/* Which choices are one-hot (hot[k] = 1): every one while the encoding
   stays within S_MAX_ONEHOT_DIMS dimensions, else the smallest first
   (ties in the spec's order) while they fit. 0, or -1 out of memory. */
static int s_pick_onehot(const spec_t *spec, unsigned char *hot)
{
    size_t np = spec->nparams, D = np, nc = 0;
    size_t *order = malloc(sizeof(size_t) * (np ? np : 1));
    if (!order)
        return -1;
    for (size_t k = 0; k < np; k++)
        if (spec->params[k].type == SPEC_CHOICE)
            order[nc++] = k;
    /* insertion sort by size, stable (nc is at most SPEC_MAX_PARAMS) */
    for (size_t i = 1; i < nc; i++)
        for (size_t j = i;
             j > 0 && spec->params[order[j]].nvalues < spec->params[order[j - 1]].nvalues;
             j--) {
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (size_t i = 0; i < nc; i++) {
        size_t extra = spec->params[order[i]].nvalues - 1;
        if (D + extra > S_MAX_ONEHOT_DIMS)
            break;
        D += extra;
        hot[order[i]] = 1;
    }
    free(order);
    return 0;
}

int sched__bo_dims(const sched_t *s)
{
    return ((const sched_bo *)s)->lay.D;
}

sched_t *sched_bo_new(const spec_t *spec, char *err, size_t errsize)
{
    /* OpenBLAS (under GSL here) otherwise starts one busy-waiting thread
       per core for every call; the GP's matrices are small, and the
       controller shares the machine with trials, so one thread is faster. */
    openblas_set_num_threads(1);
    if (spec->nparams == 0) {
        snprintf(
            err, errsize,
            "space: empty, so bo has nothing to search and every trial would be the "
            "same; list a parameter, or use scheduler \"random\" to repeat the command");
        return NULL;
    }
    sched_bo *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errsize, "out of memory");
        return NULL;
    }
    b->base.ops = &s_ops;
    b->base.spec = spec;
    b->acq = 0;
    b->kappa = 1.96;
    b->fantasy = S_BELIEVER;
    b->warp = S_WARP_AUTO;
    b->fidelity = S_FID_JOINT; /* bench-mf: see docs/bench.md */
    b->cmodel = S_CON_POF;
    b->momodel = S_MO_EHVI;
    b->prior = GP_PRIOR_WALL;
    b->local = 0.3; /* bench-bo: see docs/bench.md */
    b->tr_len = S_TR_INIT;
    long np = (long)spec->nparams;
    b->n_init = np * 2 < 5 ? 5 : np * 2 > 10 ? 10 : np * 2;
    if (spec->sched_opts && s_options(b, spec, err, errsize) != 0) {
        free(b);
        return NULL;
    }
    s_layout *l = &b->lay;
    l->spec = spec;
    l->np = (int)spec->nparams;
    l->off = malloc(sizeof(int) * (size_t)(l->np + 1));
    l->hot = calloc((size_t)l->np, 1);
    if (!l->off || !l->hot || s_pick_onehot(spec, l->hot) != 0) {
        snprintf(err, errsize, "out of memory");
        s_destroy(&b->base);
        return NULL;
    }
    int D = 0;
    for (int k = 0; k < l->np; k++) {
        l->off[k] = D;
        D += l->hot[k] ? (int)spec->params[k].nvalues : 1;
    }
    l->D = D;
    l->mask = malloc((size_t)(D ? D : 1));
    b->theta = malloc(sizeof(double) * (size_t)gp_ntheta(D + 1)); /* joint: D + 1 */
    if (!l->mask || !b->theta) {
        snprintf(err, errsize, "out of memory");
        s_destroy(&b->base);
        return NULL;
    }
    for (int k = 0; k < l->np; k++)
        for (int i = 0; i < (l->hot[k] ? (int)spec->params[k].nvalues : 1); i++)
            l->mask[l->off[k] + i] = !l->hot[k];
    /* multi-fidelity under early stopping, for one objective without
       constraints (those model the ended trials' last metrics) */
    b->level = -1;
    if (spec->early_stop && spec->nobjectives <= 1 && !spec->nconstraints) {
        b->mf = sched__bo_mf_new(spec);
        if (!b->mf) {
            snprintf(err, errsize, "out of memory");
            s_destroy(&b->base);
            return NULL;
        }
        b->base.ops = &s_ops_mf;
        if (b->fidelity == S_FID_JOINT) {
            b->joint = 1;
            b->lay1 = *l;
            b->lay1.D = D + 1;
            b->lay1.resdim = 1;
            b->lay1.mask = malloc((size_t)D + 1);
            if (!b->lay1.mask) {
                snprintf(err, errsize, "out of memory");
                s_destroy(&b->base);
                return NULL;
            }
            memcpy(b->lay1.mask, l->mask, (size_t)D);
            b->lay1.mask[D] = 1;
        }
    }
    return &b->base;
}
