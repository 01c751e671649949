/*  sched_bo_job.c - the bo scheduler's worker (sched_bo_job.h): one job
    fits the GP (gp.c) to a snapshot of the data, with output warping
    (warp.c), constraint and objective models where the spec has them, and
    maximises the acquisition (acq.c) over legal points, in a thread of its
    own so the controller's loop never waits on it. It reads only the job
    and the layout and writes only the job's results; sched_bo.c builds
    the snapshot and reads the results.
*/
#include "sched_bo_job.h"

#include "acq.h"
#include "warp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_EHVI_DRAWS 32
/* warp "auto" chooses between its two warps from this many observations
   on, and up to this many (beyond, a second fit and the leave-one-out
   inverse cost too much: the power warp with half-rank is used) */
#define S_AUTO_MIN 8
#define S_AUTO_MAX 300

void sched__bo_job_free(bo_job *j)
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
static int s_ehvi(bo_job *j, const acq_con *ac, int nac, const gp_fit_opts *fo,
                  gp_t ***og_p, double **front_p, acq_ehvi **eh_p)
{
    const bo_layout *l = j->lay;
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
    double ref[BO_EHVI_MAX_OBJECTIVES];
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
static int s_auto_warp(bo_job *j, gp_t **gp_p, const gp_fit_opts *fo, double *y)
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
        if (++*succ >= BO_TR_SUCC) {
            *len = fmin(2 * *len, BO_TR_MAX);
            *succ = 0;
        }
    } else {
        *succ = 0;
        if (++*fail >= BO_TR_FAIL) {
            *len = fmax(0.5 * *len, BO_TR_MIN);
            *fail = 0;
        }
    }
}

static void s_run_job(bo_job *j)
{
    j->got = -1;
    if (sched__bo_large_subset(j) != 0)
        return;
    const bo_layout *l = j->lay;
    int D = l->D, n = j->n, m = j->m, nt = gp_ntheta(D);
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
    if (j->warp == BO_WARP_POWER || j->warp == BO_WARP_AUTO)
        warp_yeojohnson(y, n);
    if (j->warp != BO_WARP_NONE)
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
    if (j->warp == BO_WARP_AUTO && n >= S_AUTO_MIN && n <= S_AUTO_MAX &&
        s_auto_warp(j, &gp, &fo, y) != 0)
        goto out;
    /* a rugged objective: the model under the log-normal prior when the
       evidence says so (sched_bo_portfolio.c) */
    if (j->rugged && j->prior == GP_PRIOR_WALL && n <= BO_RUGGED_MAX_N &&
        sched__bo_evidence(gp, l->mask, &j->ev) == 0 &&
        sched__bo_rugged_refit(&gp, X, y, &fo, l->mask, &j->ev) != 0)
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
            y[n + p] = j->fantasy == BO_LIAR ? wy : gp_y_mean(gp) + gp_y_sd(gp) * mu;
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
    ao.round = sched__bo_round;
    ao.round_ctx = (void *)l;
    ao.starts = starts;
    ao.n_starts = ns;
    ao.lo = box;
    ao.hi = box ? box + D : NULL;
    ao.seed = j->seed ^ 0xA5A5A5A5ULL;
    ao.cancel = &j->cancel;
    double vals[BO_TOPK];
    j->got = acq_optimize(gp, &a, &ao, j->outp, vals, BO_TOPK);
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
    bo_job *j = arg;
    s_run_job(j);
    atomic_store(&j->done, 1);
    return NULL;
}

void sched__bo_job_launch(bo_job *j)
{
    atomic_init(&j->cancel, 0);
    atomic_init(&j->done, 0);
    if (pthread_create(&j->thread, NULL, s_worker, j) == 0)
        j->threaded = 1;
    else
        s_worker(j); /* no thread: compute here rather than fail */
}

void sched__bo_job_join(bo_job *j)
{
    if (j->threaded)
        pthread_join(j->thread, NULL);
    j->threaded = 0;
}

void sched__bo_job_abandon(bo_job *j)
{
    if (!j)
        return;
    atomic_store(&j->cancel, 1);
    sched__bo_job_join(j);
    sched__bo_job_free(j);
}
