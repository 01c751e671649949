/*  sched_bo.c - Bayesian optimisation: a GP (gp.c) on the trials' results
    and log-EI or UCB (acq.c) to choose the next trial (docs/design.md, Schedulers "bo").

    Parameters are encoded into [0,1]^D: float and int parameters take one
    dimension each through spec_param_to_unit (log scale for log ones),
    choices are one-hot while the whole encoding stays within
    BO_MAX_ONEHOT_DIMS (the smallest choices first); a choice beyond that
    takes one ordered dimension, its values' cells in the spec's order, as
    an int does (a 100 000-value choice one-hot made every fit take 2 GB
    and every save of the 100 002 hyperparameters a second of the
    controller's loop). Suggestions are decoded with spec_param_from_unit
    and an argmax per one-hot choice, and the acquisition is only ever
    evaluated at such legal points (acq's round callback). Until n_init
    trials are known (finished or pending), and until two have results, suggestions come
    from a Sobol design with a seeded random shift.

    The encoding is sched_bo_enc.c's, the GP fit and the acquisition
    search are sched_bo_job.c's; this file holds the state (observations,
    pending trials, counters) and the interface. The GP fit and the
    acquisition search run in a worker thread per
    suggestion: the first `suggest` snapshots the data (results, failures
    imputed as the worst value, pending trials as fantasies) and returns
    SCHED_WAIT; later calls return SCHED_WAIT until the worker is done, then
    SCHED_OK. Randomness comes from streams derived from (seed, number of
    suggestions), so the state to save is the data, the pending trials,
    the two counters and the last hyperparameters (the warm start); a
    restored scheduler computes the same suggestions.
*/
#include "sched_bo_job.h"
#include "../common/util.h"

#include <gsl/gsl_qrng.h>
#include <cblas.h> /* OpenBLAS: openblas_set_num_threads */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    sched_t base;
    bo_layout lay;
    bo_opts opt; /* the options (sched_bo_opts.c) */
    /* state */
    s_point *obs;
    size_t nobs, capobs;
    s_point *pend;
    size_t npend, cappend;
    long sobol;    /* Sobol design points handed out */
    long count;    /* suggestions made */
    double *theta; /* last fitted hyperparameters, D + 2 */
    int have_theta;
    bo_job *job; /* in flight, or NULL */
    /* the end-game's trust region (see BO_TR_INIT) */
    double tr_len;
    int tr_succ, tr_fail;
    /* multi-fidelity (sched_bo_mf.c): partial results under early stopping */
    bo_mf *mf;      /* owned; NULL without early stopping */
    bo_layout lay1; /* joint: lay plus the resource dimension (off shared) */
    int joint;      /* the GP is over (params, resource) */
    int level;      /* level the last model was fitted on (-1: final values) */
    bo_evidence ev; /* the last model's evidence of a rugged objective */
    int have_ev;    /* ev was read (option "rugged" "auto", one objective) */
    int lognormal;  /* a refitted model won: the log-normal prior from now on
                       (saved) */
} sched_bo;

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
    if (util_reserve(arr, cap, *n, sizeof **arr) != 0)
        return -1;
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
    if (!p.x || sched__bo_encode(&b->lay, params, p.x) != 0 ||
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
                               b->opt.cmodel == BO_CON_PENALTY, y);
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
    if (nfin >= b->opt.n_init || b->opt.fidelity == BO_FID_FINAL)
        return -1;
    for (int k = sched__bo_mf_levels(b->mf) - 1; k >= 0; k--)
        if (s_nlevel(b, k) >= b->opt.n_init)
            return k;
    return sched__bo_mf_levels(b->mf) > 0 && s_nlevel(b, 0) > nfin ? 0 : -1;
}

/* Fills the job's data for multi-fidelity: at level -1 the ended trials
   that were not stopped (failed ones as failures) with their final values;
   at level k every trial, ended or running, that reached it, with its
   value there, and the failed ones. Running trials that did not reach the
   level are the fantasies; stopped ones below it are left out. */
static void s_mf_data(sched_bo *b, bo_job *j, int level)
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
static void s_joint_data(sched_bo *b, bo_job *j)
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
static int s_con_data(sched_bo *b, bo_job *j)
{
    const spec_t *spec = b->base.spec;
    int n = j->n, nc = (int)spec->nconstraints;
    if (b->opt.cmodel != BO_CON_POF || nc == 0)
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
static int s_obj_data(sched_bo *b, bo_job *j)
{
    const spec_t *spec = b->base.spec;
    int n = j->n, m = (int)spec->nobjectives;
    if (b->opt.momodel != BO_MO_EHVI || m < 2 || m > BO_EHVI_MAX_OBJECTIVES)
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
    if (!(b->opt.local > 0) || b->mf || sp->nobjectives > 1 || sp->nconstraints)
        return 0;
    long start = (long)ceil((1 - b->opt.local) * (double)sp->trials - 1e-9);
    return b->count >= start;
}

static int s_start_job(sched_bo *b)
{
    const bo_layout *ml = b->joint ? &b->lay1 : &b->lay; /* the model's */
    int D = ml->D, nt = gp_ntheta(D);
    bo_job *j = calloc(1, sizeof *j);
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
    j->outp = malloc(sizeof(double) * BO_TOPK * (size_t)D);
    j->theta = malloc(sizeof(double) * (size_t)nt);
    if (b->have_theta) {
        j->theta0 = malloc(sizeof(double) * (size_t)nt);
        if (j->theta0)
            memcpy(j->theta0, b->theta, sizeof(double) * (size_t)nt);
    }
    if (!j->X || !j->y || !j->Xp || !j->outp || !j->theta ||
        (b->have_theta && !j->theta0)) {
        sched__bo_job_free(j);
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
            sched__bo_job_free(j);
            return -1;
        }
        for (int i = 0; i < j->m; i++)
            memcpy(j->Xp + (size_t)i * D, b->pend[i].x, sizeof(double) * (size_t)D);
    }
    j->acq = b->opt.acq;
    j->kappa = b->opt.kappa;
    j->fantasy = b->opt.fantasy;
    j->warp = b->opt.warp;
    j->prior = b->opt.prior;
    /* one objective modelled by one GP over the parameters */
    j->rugged = b->opt.rugged == BO_RUGGED_AUTO && !b->mf && j->nobj == 0 &&
                b->base.spec->nobjectives <= 1;
    if (j->rugged && b->lognormal)
        j->prior = GP_PRIOR_LOGNORMAL; /* rugged: decided by an earlier fit */
    if (!s_local_now(b)) {
        /* before the end-game, or out of it again after `study extend`
           moved budget.trials: the next end-game starts afresh */
        b->tr_len = BO_TR_INIT;
        b->tr_succ = b->tr_fail = 0;
        j->tr_len = 0;
    } else
        j->tr_len = b->tr_len;
    j->large_n = b->opt.large_n;
    j->large_rule = b->opt.large_rule;
    j->large_first = b->opt.large_first;
    j->seed = s_job_seed(b);
    b->job = j;
    sched__bo_job_launch(j);
    return 0;
}

static int s_finish_job(sched_bo *b, long trial_id, json_t **params)
{
    bo_job *j = b->job;
    sched__bo_job_join(j);
    b->job = NULL;
    int D = (b->joint ? b->lay1.D : b->lay.D), nt = gp_ntheta(D);
    if (j->theta_ok) {
        memcpy(b->theta, j->theta, sizeof(double) * (size_t)nt);
        b->have_theta = 1;
    }
    if (j->rugged && j->theta_ok && j->ev.n > 0) { /* the evidence was read */
        b->ev = j->ev;
        b->have_ev = 1;
        b->lognormal |= j->ev.refit;
    }
    json_t *pick = NULL;
    int local = j->tr_len > 0;
    for (int r = 0; r < j->got && !pick; r++) {
        json_t *p = sched__bo_decode(&b->lay, j->outp + (size_t)r * D);
        if (!s_is_known(b, p))
            pick = p;
        else
            json_decref(p);
    }
    sched__bo_job_free(j);
    if (!pick) {
        /* the model failed, or every good point is taken: a random one */
        local = 0;
        sched_rng r;
        s_rng(b, &r, 4, b->count);
        pick = sched_random_params(b->lay.spec, &r);
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
        if (b->opt.fidelity != BO_FID_FINAL && sched__bo_mf_levels(b->mf) > 0 &&
            s_nlevel(b, 0) > nreal)
            nreal = s_nlevel(b, 0);
    }
    if ((long)(b->nobs + b->npend) < b->opt.n_init || nreal < 2) {
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
    if (params && sched__bo_encode(&b->lay, params, p.x) == 0) {
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
    if (b->opt.local > 0 && st)
        json_object_set_new(st, "trust",
                            json_pack("{s:f,s:i,s:i}", "len", b->tr_len, "succ",
                                      b->tr_succ, "fail", b->tr_fail));
    /* the last evidence read (for people: every fit reads its own) and
       the decision it led to */
    if (b->have_ev && st)
        json_object_set_new(
            st, "evidence",
            json_pack("{s:i,s:o,s:f,s:b,s:b}", "n", b->ev.n, "loo_r2",
                      isfinite(b->ev.loo_r2) ? json_real(b->ev.loo_r2) : json_null(),
                      "noise", b->ev.noise, "rugged", b->ev.rugged, "refit",
                      b->ev.refit));
    if (b->lognormal && st)
        json_object_set_new(st, "rugged", json_true());
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
        json_t *params;
        s_point p = {.x = malloc(sizeof(double) * (size_t)(b->lay.D ? b->lay.D : 1))};
        if (!p.x ||
            sched_json_point(e, with_value, &p.trial, &params, &p.value, &p.failed) !=
                0 ||
            sched__bo_encode(&b->lay, params, p.x) != 0) {
            free(p.x);
            return -1;
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
           BO_MAX_ONEHOT_DIMS): only a warm start, so the next fit starts
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
    double tr_len = BO_TR_INIT;
    int tr_succ = 0, tr_fail = 0;
    json_t *trust = json_object_get(state, "trust");
    if (trust &&
        (json_unpack(trust, "{s:F,s:i,s:i}", "len", &tr_len, "succ", &tr_succ, "fail",
                     &tr_fail) != 0 ||
         !(tr_len >= BO_TR_MIN && tr_len <= BO_TR_MAX) || tr_succ < 0 || tr_fail < 0))
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
    sched__bo_job_abandon(b->job);
    b->job = NULL;
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
    b->lognormal = json_is_true(json_object_get(state, "rugged"));
    /* the last evidence, shown again until the next fit reads its own */
    json_t *ev = json_object_get(state, "evidence"), *r2 = json_object_get(ev, "loo_r2");
    int ev_rugged = 0, ev_refit = 0;
    b->have_ev =
        ev && json_unpack(ev, "{s:i,s:F,s:b,s:b}", "n", &b->ev.n, "noise", &b->ev.noise,
                          "rugged", &ev_rugged, "refit", &ev_refit) == 0;
    b->ev.loo_r2 = json_is_number(r2) ? json_number_value(r2) : NAN;
    b->ev.rugged = ev_rugged;
    b->ev.refit = ev_refit;
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
    sched__bo_job_abandon(b->job);
    b->job = NULL;
    s_clear(b);
    free(b->obs);
    free(b->pend);
    free(b->theta);
    sched__bo_layout_fini(&b->lay);
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
    sched_bo *b = sched_alloc(sizeof *b, &s_ops, spec, err, errsize);
    if (!b)
        return NULL;
    b->tr_len = BO_TR_INIT;
    if (sched__bo_options(&b->opt, spec, err, errsize) != 0) {
        free(b);
        return NULL;
    }
    bo_layout *l = &b->lay;
    if (sched__bo_layout_init(l, spec) != 0 ||
        !(b->theta = malloc(sizeof(double) * (size_t)gp_ntheta(l->D + 1)))) {
        /* joint: D + 1 */
        snprintf(err, errsize, "out of memory");
        s_destroy(&b->base);
        return NULL;
    }
    int D = l->D;
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
        if (b->opt.fidelity == BO_FID_JOINT) {
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
