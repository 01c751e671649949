/*  sched_tpe.c - the tree-structured Parzen estimator (docs/design.md,
    Schedulers "tpe"; Bergstra et al. 2011, Falkner et al. 2018 for the
    multivariate kernel, Watanabe 2023 for the choices below).

    The finished trials are split at a quantile: the best
    gamma(n) = min(ceil(gamma x n), gamma_max) of them make the density l,
    the others (with failed, stopped and running trials, so that parallel
    suggestions spread out) make g. Each density is a mixture of one
    kernel per trial plus a prior kernel over the whole range: truncated
    Gaussians on [0, 1] for float and int parameters (the unit scale of
    spec_param_to_unit, log for log ones, an int owning its cell), and for
    a choice a distribution that puts its trial's value first and spreads
    prior_weight over all values. n_candidates points are drawn from l and
    the one with the highest l/g is suggested.

    Multivariate (default): one kernel spans every parameter of a group,
    with the bandwidth 0.2 n^(-1/(d+4)); univariate: each parameter alone,
    with its neighbours' distances as bandwidths. Groups (conditional
    spaces): the parameters that share a `when` condition form a group,
    learned from the trials where it is active; without "group", the
    unconditional parameters form one group and each conditional one is
    alone. Inactive parameters are pruned from the suggestion.

    Until n_startup trials have results, suggestions are uniform draws.
    Randomness comes from streams derived from (seed, number of
    suggestions); the saved state is the trials and that number.
*/
#include "sched.h"
#include "../common/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    long trial;
    json_t *params; /* owned */
    double value;   /* minimisation form; NaN: no final value */
    int failed;     /* failed or stopped: in g only */
    double *u;      /* owned: each parameter by s_unit (NaN: inactive) */
} s_obs;

typedef struct {
    sched_t base;
    /* options */
    int multivariate;
    int group;
    long n_startup;
    int n_cand;
    double gamma;
    int gamma_max;
    double prior_weight;
    /* the parameters' groups: grp[k] for parameter k; konst ones are -1 */
    int *grp;
    int ngrp;
    /* state */
    s_obs *obs;
    size_t nobs, capobs;
    s_obs *pend; /* suggested, not ended */
    size_t npend, cappend;
    long count; /* suggestions made */
} sched_tpe;

/* A Parzen mixture over the parameters dims[0..d): nk kernels (the last
   the prior), each with a weight, and per dimension a centre and
   bandwidth (numeric); for a choice, kernel i < nk - 1 gives its value
   (mu) (1 + b) / (1 + b nv) and every other value b / (1 + b nv), with
   b = prior_weight / nk, the prior kernel 1 / nv (no table: a choice may
   have 10 000 values). */
typedef struct {
    const spec_t *spec;
    int d;
    const int *dims; /* parameter indices */
    int nk;
    double *lw;  /* nk log weights (normalised) */
    double *mu;  /* nk x d: centre in [0,1]; choice: the value's index */
    double *sig; /* nk x d: bandwidth (numeric) */
    double *lz;  /* nk x d: log of the truncation mass (numeric) */
    double b;    /* a choice kernel's spread: prior_weight / nk */
} s_parzen;

/* ---- encoding --------------------------------------------------------- */

/* Parameter k of params on its unit scale (a choice: its value's index),
   or NaN when absent or illegal. */
static double s_unit(const spec_param *p, const json_t *params)
{
    const json_t *v = json_object_get(params, p->name);
    if (!v)
        return NAN;
    double u = spec_param_to_unit(p, v);
    if (u < 0)
        return NAN;
    if (p->type == SPEC_CHOICE) {
        size_t i = (size_t)(u * (double)p->nvalues);
        return (double)(i < p->nvalues ? i : p->nvalues - 1);
    }
    return u;
}

static json_t *s_value(const spec_param *p, double u)
{
    if (p->type == SPEC_CHOICE)
        return json_deep_copy(json_array_get(p->values, (size_t)u));
    return spec_param_from_unit(p, u);
}

/* Fills o->u from o->params. 0, or -1 out of memory. */
static int s_obs_encode(const spec_t *sp, s_obs *o)
{
    o->u = malloc(sizeof(double) * (sp->nparams ? sp->nparams : 1));
    if (!o->u)
        return -1;
    for (size_t k = 0; k < sp->nparams; k++)
        o->u[k] = s_unit(&sp->params[k], o->params);
    return 0;
}

static void s_obs_fini(s_obs *o)
{
    json_decref(o->params);
    free(o->u);
    o->params = NULL;
    o->u = NULL;
}

/* A candidate on a legal point: an int (or a quantised float) at its
   value's place on the unit scale. */
static double s_legal(const spec_param *p, double u)
{
    if (p->type == SPEC_CHOICE)
        return u;
    json_t *v = spec_param_from_unit(p, u);
    double r = spec_param_to_unit(p, v);
    json_decref(v);
    return r < 0 ? u : r;
}

/* ---- the Parzen estimator --------------------------------------------- */

static double s_phi(double z) /* standard normal cdf */
{
    return 0.5 * erfc(-z / M_SQRT2);
}

static double s_gauss(sched_rng *r)
{
    double u1 = sched_rng_uniform(r), u2 = sched_rng_uniform(r);
    return sqrt(-2 * log(1 - u1)) * cos(2 * M_PI * u2);
}

static void s_parzen_fini(s_parzen *z)
{
    free(z->lw);
    free(z->mu);
    free(z->sig);
    free(z->lz);
    memset(z, 0, sizeof *z);
}

/* Builds the mixture from n points U (n x d, rows in the order of their
   age, oldest first) and the prior. Weights (Optuna's default): 1 for
   the newest 25, a ramp down to 1/n for older ones. 0, or -1 out of
   memory. */
static int s_parzen_init(s_parzen *z, const sched_tpe *t, int d, const int *dims,
                         const double *U, int n)
{
    const spec_t *sp = t->base.spec;
    memset(z, 0, sizeof *z);
    z->spec = sp;
    z->d = d;
    z->dims = dims;
    z->nk = n + 1;
    size_t cells = (size_t)z->nk * (size_t)(d ? d : 1);
    z->lw = malloc(sizeof(double) * (size_t)z->nk);
    z->mu = malloc(sizeof(double) * cells);
    z->sig = malloc(sizeof(double) * cells);
    z->lz = malloc(sizeof(double) * cells);
    sched_vi *srt = malloc(sizeof(sched_vi) * (size_t)(n + 1));
    if (!z->lw || !z->mu || !z->sig || !z->lz || !srt)
        goto fail;
    /* weights */
    double tot = 0;
    for (int i = 0; i < n; i++) {
        double w = 1;
        if (n > 25 && i < n - 25)
            w = 1.0 / n + (1 - 1.0 / n) * (double)i / (double)(n - 25);
        z->lw[i] = w;
        tot += w;
    }
    z->lw[n] = t->prior_weight;
    tot += t->prior_weight;
    for (int i = 0; i <= n; i++)
        z->lw[i] = log(z->lw[i] / tot);
    z->b = t->prior_weight / (double)z->nk;
    double msig = 0.2 * pow((double)(n + 1), -1.0 / (d + 4));
    double minsig = 1.0 / fmin(100, 1 + n + 1);
    for (int j = 0; j < d; j++) {
        const spec_param *p = &sp->params[dims[j]];
        if (p->type == SPEC_CHOICE) {
            for (int i = 0; i <= n; i++)
                z->mu[(size_t)i * d + j] = i < n ? U[(size_t)i * d + j] : -1;
            continue;
        }
        /* numeric: centres, bandwidths, truncation masses */
        for (int i = 0; i < n; i++)
            z->mu[(size_t)i * d + j] = U[(size_t)i * d + j];
        z->mu[(size_t)n * d + j] = 0.5;
        if (!t->multivariate || d == 1) {
            /* univariate: the larger gap to a neighbour among the points
               and the prior's centre (the ends of the range are no
               neighbours, as in Optuna) */
            for (int i = 0; i <= n; i++) {
                srt[i].v = z->mu[(size_t)i * d + j];
                srt[i].i = i;
            }
            qsort(srt, (size_t)n + 1, sizeof *srt, sched_vi_cmp);
            for (int q = 0; q <= n; q++) {
                double left = q > 0 ? srt[q].v - srt[q - 1].v : -1;
                double right = q < n ? srt[q + 1].v - srt[q].v : -1;
                if (srt[q].i < n)
                    z->sig[(size_t)srt[q].i * d + j] = fmax(fmax(left, right), 0);
            }
        } else {
            /* multivariate: Optuna's 0.2 n^(-1/(d+4)), narrowed as the
               points gather: times their sd over a uniform one's (capped
               at 1), so the kernels shrink with the good region */
            double m1 = 0, m2 = 0, f = 1;
            for (int i = 0; i < n; i++)
                m1 += U[(size_t)i * d + j];
            m1 = n ? m1 / n : 0;
            for (int i = 0; i < n; i++)
                m2 += pow(U[(size_t)i * d + j] - m1, 2);
            if (n >= 2)
                f = fmin(1, sqrt(m2 / (n - 1)) * sqrt(12.0));
            for (int i = 0; i < n; i++)
                z->sig[(size_t)i * d + j] = msig * f;
        }
        z->sig[(size_t)n * d + j] = 1; /* the prior */
        for (int i = 0; i <= n; i++) {
            size_t c = (size_t)i * d + j;
            z->sig[c] = fmin(fmax(z->sig[c], minsig), 1);
            double m = z->mu[c], s = z->sig[c];
            z->lz[c] = log(fmax(s_phi((1 - m) / s) - s_phi(-m / s), 1e-300));
        }
    }
    free(srt);
    return 0;
fail:
    free(srt);
    s_parzen_fini(z);
    return -1;
}

/* log density of the mixture at x (d values) */
static double s_parzen_logpdf(const s_parzen *z, const double *x)
{
    double mx = -INFINITY;
    double *acc = NULL, stackacc[64];
    acc = z->nk <= 64 ? stackacc : malloc(sizeof(double) * (size_t)z->nk);
    if (!acc)
        return -INFINITY;
    for (int i = 0; i < z->nk; i++) {
        double l = z->lw[i];
        for (int j = 0; j < z->d; j++) {
            const spec_param *p = &z->spec->params[z->dims[j]];
            size_t c = (size_t)i * z->d + j;
            if (p->type == SPEC_CHOICE) {
                double nv = (double)p->nvalues;
                l += i == z->nk - 1 ? -log(nv)
                                    : log(((z->mu[c] == x[j]) + z->b) / (1 + z->b * nv));
            } else {
                double r = (x[j] - z->mu[c]) / z->sig[c];
                l += -0.5 * r * r - log(z->sig[c]) - 0.5 * log(2 * M_PI) - z->lz[c];
            }
        }
        acc[i] = l;
        mx = fmax(mx, l);
    }
    double s = 0;
    for (int i = 0; i < z->nk; i++)
        s += exp(acc[i] - mx);
    if (acc != stackacc)
        free(acc);
    return mx + log(s);
}

/* Draws x (d values) from the mixture. */
static void s_parzen_sample(const s_parzen *z, sched_rng *r, double *x)
{
    double u = sched_rng_uniform(r), cum = 0;
    int k = z->nk - 1;
    for (int i = 0; i < z->nk; i++) {
        cum += exp(z->lw[i]);
        if (u < cum) {
            k = i;
            break;
        }
    }
    for (int j = 0; j < z->d; j++) {
        const spec_param *p = &z->spec->params[z->dims[j]];
        size_t c = (size_t)k * z->d + j;
        if (p->type == SPEC_CHOICE) {
            /* the kernel's value with probability 1 / (1 + b nv), else
               uniform (which may give it again) */
            double nv = (double)p->nvalues;
            size_t pick = (size_t)(sched_rng_uniform(r) * nv);
            if (pick >= p->nvalues)
                pick = p->nvalues - 1;
            if (k < z->nk - 1 && sched_rng_uniform(r) < 1 / (1 + z->b * nv))
                pick = (size_t)z->mu[c];
            x[j] = (double)pick;
            continue;
        }
        /* truncated to [0, 1]: redraw (at least ~half the mass is inside),
           then clip */
        double v = z->mu[c];
        for (int tries = 0; tries < 64; tries++) {
            v = z->mu[c] + z->sig[c] * s_gauss(r);
            if (v >= 0 && v <= 1)
                break;
        }
        x[j] = s_legal(p, fmin(fmax(v, 0), 1));
    }
}

/* ---- suggestion ------------------------------------------------------- */

/* Samples the parameters dims[0..d) into the object o: builds l and g
   from the trials where they are all active, draws n_cand candidates from
   l and keeps the best l/g. 0, or -1 out of memory. */
static int s_sample_group(sched_tpe *t, const int *dims, int d, sched_rng *r, json_t *o)
{
    const spec_t *sp = t->base.spec;
    size_t nall = t->nobs + t->npend, na = nall ? nall : 1;
    sched_vi *good = malloc(sizeof(sched_vi) * na);
    unsigned char *side = calloc(na, 1); /* 0: inactive, 1: in g, 2: in l */
    double *UL = malloc(sizeof(double) * na * (size_t)d);
    double *UG = malloc(sizeof(double) * na * (size_t)d);
    double *x = malloc(sizeof(double) * 2 * (size_t)d);
    int ng = 0, rc = -1;
    s_parzen l = {0}, g = {0};
    if (!good || !side || !UL || !UG || !x)
        goto out;
    /* the trials where the group is active; those with values are ranked */
    for (size_t i = 0; i < nall; i++) {
        const s_obs *ob = i < t->nobs ? &t->obs[i] : &t->pend[i - t->nobs];
        int ok = 1;
        for (int j = 0; j < d && ok; j++)
            ok = !isnan(ob->u[dims[j]]);
        if (!ok)
            continue;
        if (i < t->nobs && !ob->failed && !isnan(ob->value))
            good[ng++] = (sched_vi){ob->value, (int)i};
        else
            side[i] = 1;
    }
    /* the best gamma(n) of those with values make l, the rest g */
    qsort(good, (size_t)ng, sizeof *good, sched_vi_cmp);
    int nb = (int)ceil(t->gamma * ng);
    if (nb > t->gamma_max)
        nb = t->gamma_max;
    if (nb > ng)
        nb = ng;
    /* kernels in the order of age (the obs array is in completion order,
       then the running ones): past 25, the older ones weigh less
       (s_parzen_init), as in Optuna */
    for (int k = 0; k < nb; k++)
        side[good[k].i] = 2;
    for (int k = nb; k < ng; k++)
        side[good[k].i] = 1;
    int nl = 0, nu = 0;
    for (size_t i = 0; i < nall; i++) {
        const s_obs *ob = i < t->nobs ? &t->obs[i] : &t->pend[i - t->nobs];
        if (!side[i])
            continue;
        double *row = side[i] == 2 ? UL + (size_t)nl++ * d : UG + (size_t)nu++ * d;
        for (int j = 0; j < d; j++)
            row[j] = ob->u[dims[j]];
    }
    if (s_parzen_init(&l, t, d, dims, UL, nl) != 0 ||
        s_parzen_init(&g, t, d, dims, UG, nu) != 0)
        goto out;
    double best = -INFINITY;
    for (int c = 0; c < t->n_cand; c++) {
        s_parzen_sample(&l, r, x + d);
        double score = s_parzen_logpdf(&l, x + d) - s_parzen_logpdf(&g, x + d);
        if (c == 0 || score > best) {
            best = score;
            memcpy(x, x + d, sizeof(double) * (size_t)d);
        }
    }
    for (int j = 0; j < d; j++) {
        const spec_param *p = &sp->params[dims[j]];
        json_object_set_new(o, p->name, s_value(p, x[j]));
    }
    rc = 0;
out:
    s_parzen_fini(&l);
    s_parzen_fini(&g);
    free(good);
    free(side);
    free(UL);
    free(UG);
    free(x);
    return rc;
}

static int s_push(s_obs **arr, size_t *n, size_t *cap, s_obs o)
{
    if (util_reserve(arr, cap, *n, sizeof **arr) != 0)
        return -1;
    (*arr)[(*n)++] = o;
    return 0;
}

static int s_suggest(sched_t *s, long trial_id, json_t **params)
{
    sched_tpe *t = (sched_tpe *)s;
    const spec_t *sp = s->spec;
    sched_rng r;
    sched_rng_seed(&r, (unsigned long long)sp->seed, (unsigned long long)t->count);
    long nreal = 0;
    for (size_t i = 0; i < t->nobs; i++)
        nreal += !t->obs[i].failed && !isnan(t->obs[i].value);
    json_t *o = json_object();
    int *dims = malloc(sizeof(int) * (sp->nparams ? sp->nparams : 1));
    if (!o || !dims) {
        json_decref(o);
        free(dims);
        return SCHED_ERR;
    }
    if (nreal < t->n_startup) {
        for (size_t k = 0; k < sp->nparams; k++)
            json_object_set_new(
                o, sp->params[k].name,
                spec_param_from_unit(&sp->params[k], sched_rng_uniform(&r)));
    } else {
        for (int gi = 0; gi < t->ngrp; gi++) {
            int d = 0;
            for (size_t k = 0; k < sp->nparams; k++)
                if (t->grp[k] == gi)
                    dims[d++] = (int)k;
            if (d > 0 && s_sample_group(t, dims, d, &r, o) != 0) {
                json_decref(o);
                free(dims);
                return SCHED_ERR;
            }
        }
        for (size_t k = 0; k < sp->nparams; k++)
            if (t->grp[k] < 0) /* consts */
                json_object_set_new(
                    o, sp->params[k].name,
                    json_deep_copy(json_array_get(sp->params[k].values, 0)));
    }
    free(dims);
    spec_params_prune(sp, o);
    s_obs p = {trial_id, json_deep_copy(o), NAN, 0, NULL};
    if (!p.params || s_obs_encode(sp, &p) != 0 ||
        s_push(&t->pend, &t->npend, &t->cappend, p) != 0) {
        s_obs_fini(&p);
        json_decref(o);
        return SCHED_ERR;
    }
    t->count++;
    *params = o;
    return SCHED_OK;
}

static void s_on_complete(sched_t *s, long trial_id, const json_t *params,
                          sched_outcome outcome, double value)
{
    sched_tpe *t = (sched_tpe *)s;
    s_obs o = {trial_id, NULL, NAN, 0, NULL};
    for (size_t i = 0; i < t->npend; i++) {
        if (t->pend[i].trial != trial_id)
            continue;
        o = t->pend[i]; /* taken */
        memmove(&t->pend[i], &t->pend[i + 1], sizeof(s_obs) * (t->npend - i - 1));
        t->npend--;
        break;
    }
    /* the trial's own params (changed live, enqueued, or a warm start) win */
    if (json_is_object(params) && !(o.params && json_equal(o.params, (json_t *)params))) {
        s_obs_fini(&o);
        o.params = json_deep_copy(params);
        if (!o.params || s_obs_encode(s->spec, &o) != 0) {
            s_obs_fini(&o);
            return;
        }
    }
    if (!o.params)
        return;
    o.trial = trial_id;
    o.failed = outcome != SCHED_COMPLETED || !isfinite(value);
    o.value = o.failed ? NAN : s->spec->maximize ? -value : value;
    for (size_t i = 0; i < t->nobs; i++)
        if (t->obs[i].trial == trial_id && trial_id >= 0) { /* the last wins */
            s_obs_fini(&t->obs[i]);
            t->obs[i] = o;
            return;
        }
    if (s_push(&t->obs, &t->nobs, &t->capobs, o) != 0)
        s_obs_fini(&o);
}

/* ---- state ------------------------------------------------------------ */

static json_t *s_save(sched_t *s)
{
    sched_tpe *t = (sched_tpe *)s;
    json_t *obs = json_array(), *pend = json_array();
    for (size_t i = 0; i < t->nobs; i++) {
        const s_obs *o = &t->obs[i];
        double v = s->spec->maximize ? -o->value : o->value;
        json_array_append_new(
            obs, json_pack("{s:I,s:O,s:o}", "trial", (json_int_t)o->trial, "params",
                           o->params, "value", o->failed ? json_null() : json_real(v)));
    }
    for (size_t i = 0; i < t->npend; i++)
        json_array_append_new(pend, json_pack("{s:I,s:O}", "trial",
                                              (json_int_t)t->pend[i].trial, "params",
                                              t->pend[i].params));
    return json_pack("{s:i,s:I,s:o,s:o}", "version", 1, "count", (json_int_t)t->count,
                     "obs", obs, "pending", pend);
}

static void s_free_list(s_obs *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s_obs_fini(&a[i]);
    free(a);
}

static int s_load(const sched_tpe *t, const json_t *arr, int with_value, s_obs **out,
                  size_t *n, size_t *cap)
{
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e)
    {
        json_t *params;
        s_obs o = {0};
        if (sched_json_point(e, with_value, &o.trial, &params, &o.value, &o.failed) != 0)
            return -1;
        if (t->base.spec->maximize)
            o.value = -o.value; /* minimisation form */
        o.params = json_deep_copy(params);
        if (!o.params || s_obs_encode(t->base.spec, &o) != 0 ||
            s_push(out, n, cap, o) != 0) {
            s_obs_fini(&o);
            return -1;
        }
    }
    return 0;
}

static int s_restore(sched_t *s, const json_t *state)
{
    sched_tpe *t = (sched_tpe *)s;
    int version;
    json_int_t count;
    json_t *obs, *pend;
    if (json_unpack((json_t *)state, "{s:i,s:I,s:o,s:o}", "version", &version, "count",
                    &count, "obs", &obs, "pending", &pend) != 0 ||
        version != 1 || count < 0 || !json_is_array(obs) || !json_is_array(pend))
        return -1;
    s_obs *no = NULL, *np = NULL;
    size_t nno = 0, cno = 0, nnp = 0, cnp = 0;
    if (s_load(t, obs, 1, &no, &nno, &cno) != 0 ||
        s_load(t, pend, 0, &np, &nnp, &cnp) != 0) {
        s_free_list(no, nno);
        s_free_list(np, nnp);
        return -1;
    }
    s_free_list(t->obs, t->nobs);
    s_free_list(t->pend, t->npend);
    t->obs = no;
    t->nobs = nno;
    t->capobs = cno;
    t->pend = np;
    t->npend = nnp;
    t->cappend = cnp;
    t->count = (long)count;
    return 0;
}

static void s_destroy(sched_t *s)
{
    sched_tpe *t = (sched_tpe *)s;
    s_free_list(t->obs, t->nobs);
    s_free_list(t->pend, t->npend);
    free(t->grp);
    free(t);
}

static const sched_ops s_ops = {.name = "tpe",
                                .suggest = s_suggest,
                                .on_complete = s_on_complete,
                                .save = s_save,
                                .restore = s_restore,
                                .destroy = s_destroy};

/* ---- options and groups ----------------------------------------------- */

static int s_bool(const json_t *o, const char *key, int dflt, int *out, char *err,
                  size_t errsize)
{
    const json_t *v = json_object_get(o, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v)) {
        snprintf(err, errsize, "scheduler.%s: must be true or false", key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

static int s_options(sched_tpe *t, const spec_t *spec, char *err, size_t errsize)
{
    const json_t *o = spec->sched_opts;
    static const char *const known[] = {
        "type",         "seed",  "multivariate", "group",        "n_startup",
        "n_candidates", "gamma", "gamma_max",    "prior_weight", NULL};
    const char *key = sched_opt_unknown(o, known);
    if (key) {
        snprintf(err, errsize,
                 "scheduler.%s: unknown option for the tpe scheduler (expected type, "
                 "seed, multivariate, group, n_startup, n_candidates, gamma, "
                 "gamma_max, prior_weight)",
                 key);
        return -1;
    }
    double n_startup, n_cand, gmax;
    if (s_bool(o, "multivariate", 1, &t->multivariate, err, errsize) != 0 ||
        s_bool(o, "group", t->multivariate, &t->group, err, errsize) != 0 ||
        sched_opt_num(o, "scheduler", "n_startup", 10, 1, 100000, 1, &n_startup, err,
                      errsize) != 0 ||
        sched_opt_num(o, "scheduler", "n_candidates", 24, 1, 10000, 1, &n_cand, err,
                      errsize) != 0 ||
        sched_opt_num(o, "scheduler", "gamma", 0.1, 0.01, 0.5, 0, &t->gamma, err,
                      errsize) != 0 ||
        sched_opt_num(o, "scheduler", "gamma_max", 25, 1, 100000, 1, &gmax, err,
                      errsize) != 0 ||
        sched_opt_num(o, "scheduler", "prior_weight", 1, 0.01, 100, 0, &t->prior_weight,
                      err, errsize) != 0)
        return -1;
    if (t->group && !t->multivariate) {
        snprintf(err, errsize,
                 "scheduler.group: groups are multivariate; set \"multivariate\": true "
                 "or leave \"group\" out");
        return -1;
    }
    t->n_startup = (long)n_startup;
    t->n_cand = (int)n_cand;
    t->gamma_max = (int)gmax;
    return 0;
}

/* Groups: multivariate with groups, one per distinct `when` (the
   unconditional parameters first); multivariate alone, the unconditional
   parameters together and each conditional one alone; univariate, each
   parameter alone. Consts are in none (-1). */
static void s_groups(sched_tpe *t, const spec_t *spec)
{
    int n = 0;
    for (size_t k = 0; k < spec->nparams; k++) {
        const spec_param *p = &spec->params[k];
        t->grp[k] = -2;
        if (p->konst)
            t->grp[k] = -1;
    }
    if (t->multivariate) {
        int any = 0;
        for (size_t k = 0; k < spec->nparams; k++)
            if (t->grp[k] == -2 && !spec->params[k].when) {
                t->grp[k] = n;
                any = 1;
            }
        n += any;
    }
    for (size_t k = 0; k < spec->nparams; k++) {
        if (t->grp[k] != -2)
            continue;
        t->grp[k] = n;
        if (t->group)
            for (size_t k2 = k + 1; k2 < spec->nparams; k2++)
                if (t->grp[k2] == -2 && spec->params[k].when && spec->params[k2].when &&
                    json_equal(spec->params[k].when, spec->params[k2].when))
                    t->grp[k2] = n;
        n++;
    }
    t->ngrp = n;
}

sched_t *sched_tpe_new(const spec_t *spec, char *err, size_t errsize)
{
    if (spec->nobjectives > 1 || spec->nconstraints) {
        snprintf(err, errsize,
                 "scheduler.type: tpe optimises one objective without constraints; use "
                 "\"bo\" for several objectives or constraints");
        return NULL;
    }
    sched_tpe *t = sched_alloc(sizeof *t, &s_ops, spec, err, errsize);
    if (!t)
        return NULL;
    if (s_options(t, spec, err, errsize) != 0) {
        free(t);
        return NULL;
    }
    t->grp = malloc(sizeof(int) * (spec->nparams ? spec->nparams : 1));
    if (!t->grp) {
        snprintf(err, errsize, "out of memory");
        free(t);
        return NULL;
    }
    s_groups(t, spec);
    return &t->base;
}
