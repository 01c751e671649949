/*  importance.c - Sobol indices of a GP's posterior mean over a study's
    space: which parameters matter. See importance.h for the contract.

    With A and B two N x np matrices of uniform draws (one column per
    parameter, on its own unit scale) and AB_k A with column k taken from
    B, f the posterior mean at the encoded points and V the variance of f
    over A and B together:
        first[k] = mean(f(B) (f(AB_k) - f(A))) / V      (Saltelli 2010)
        total[k] = mean((f(A) - f(AB_k))^2) / (2 V)     (Jansen 1999)
    Each row is encoded once (through spec_param_from_unit, so an int is
    rounded and a choice is one of its values); AB_k is assembled from the
    encodings of A and B.

    Conditional parameters (`when`): each gets one more dimension, 1 when
    it is active and 0 when not (its value dimensions then sit at 0.5, or 0
    for a choice's), so trials where it is inactive are usable too. A row
    is then decoded to parameter values and the inactive ones are judged
    by spec_param_active before encoding, and AB_k is assembled from the
    unit draws and encoded afresh (swapping a parent changes which
    children are active). first[k] of a parent thus includes what its
    children's activity does.
*/
#include "importance.h"

#include "common/util.h"
#include "gp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Encoded width of parameter p: 1, or its number of values; one more for
   a conditional one's activity. */
static int s_width(const spec_param *p)
{
    return (p->type == SPEC_CHOICE ? (int)p->nvalues : 1) + (p->conditional ? 1 : 0);
}

/* Encodes a legal value of p into x (s_width(p) values), or, with v NULL,
   a conditional p as inactive. 0 or -1. */
static int s_encode_one(const spec_param *p, const json_t *v, double *x)
{
    int w = s_width(p) - (p->conditional ? 1 : 0);
    if (!v && p->conditional) {
        for (int i = 0; i < w; i++)
            x[i] = p->type == SPEC_CHOICE ? 0 : 0.5;
        x[w] = 0;
        return 0;
    }
    if (!v || !spec_param_legal(p, v))
        return -1;
    if (p->conditional)
        x[w] = 1;
    if (p->type == SPEC_CHOICE) {
        for (size_t i = 0; i < p->nvalues; i++)
            x[i] = json_equal((json_t *)v, json_array_get(p->values, i)) ? 1 : 0;
        return 0;
    }
    double u = spec_param_to_unit(p, v);
    if (u < 0)
        return -1;
    x[0] = u;
    return 0;
}

/* Encodes the point whose parameters are drawn at the unit values u[0..np)
   into x: each decoded, the inactive ones encoded as such. 0 or -1. */
static int s_encode_unit(const spec_t *spec, const double *u, const int *off, double *x)
{
    json_t *obj = json_object();
    int rc = obj ? 0 : -1;
    for (size_t k = 0; k < spec->nparams && rc == 0; k++)
        rc = json_object_set_new(obj, spec->params[k].name,
                                 spec_param_from_unit(&spec->params[k], u[k]));
    for (size_t k = 0; k < spec->nparams && rc == 0; k++) {
        const spec_param *p = &spec->params[k];
        int on = !p->conditional || spec_param_active(spec, k, obj);
        rc = s_encode_one(p, on ? json_object_get(obj, p->name) : NULL, x + off[k]);
    }
    json_decref(obj);
    return rc;
}

void imp_result_fini(imp_result *r)
{
    if (!r)
        return;
    free(r->first);
    free(r->total);
    free(r->importance);
    memset(r, 0, sizeof *r);
}

static int s_fail(char *err, size_t errsize, const char *text)
{
    snprintf(err, errsize, "%s", text);
    return -1;
}

long imp_width(const spec_t *spec)
{
    long D = 0;
    for (size_t k = 0; k < spec->nparams; k++)
        D += s_width(&spec->params[k]);
    return D;
}

/* Whether trial i has a finite value and a legal value of every parameter
   active in it. */
static int s_usable(const spec_t *spec, json_t *const *params, const double *y, int i)
{
    if (!isfinite(y[i]) || !json_is_object(params[i]))
        return 0;
    for (size_t k = 0; k < spec->nparams; k++) {
        json_t *v = json_object_get(params[i], spec->params[k].name);
        if (spec->params[k].conditional && !spec_param_active(spec, k, params[i]))
            continue;
        if (!v || !spec_param_legal(&spec->params[k], v))
            return 0;
    }
    return 1;
}

/* The value of parameter k in a usable trial's params: NULL when it is
   inactive there. */
static const json_t *s_value(const spec_t *spec, size_t k, const json_t *params)
{
    if (spec->params[k].conditional && !spec_param_active(spec, k, params))
        return NULL;
    return json_object_get(params, spec->params[k].name);
}

int imp_compute(const spec_t *spec, json_t *const *params, const double *y, int n,
                int samples, unsigned long long seed, imp_result *out, char *err,
                size_t errsize)
{
    memset(out, 0, sizeof *out);
    int np = (int)spec->nparams;
    if (np < 1)
        return s_fail(err, errsize, "the study has no parameters");
    long width = imp_width(spec);
    if (np > IMP_MAX_PARAMS || width > IMP_MAX_WIDTH) {
        snprintf(err, errsize,
                 "the space has %d parameters encoded in %ld dimensions, over the "
                 "model's cap (%d parameters, %d dimensions)",
                 np, width, IMP_MAX_PARAMS, IMP_MAX_WIDTH);
        return -1;
    }
    int D = (int)width;
    /* the usable trials, then an evenly spaced subsample of them: only
       those are encoded, so memory follows the cap, not the study */
    int cap = D > IMP_WIDE ? IMP_MAX_TRIALS_WIDE : IMP_MAX_TRIALS;
    int usable = 0;
    for (int i = 0; i < n; i++)
        usable += s_usable(spec, params, y, i);
    int m = usable < cap ? usable : cap;
    out->n_used = m;
    if (m < 2) {
        snprintf(err, errsize,
                 "%d finished trial%s with a value and legal parameters; at least 2 are "
                 "needed",
                 m, m == 1 ? "" : "s");
        return -1;
    }
    int N = samples;
    if (N <= 0) { /* 2048, fewer where the prediction's work would pass the cap */
        double per = (double)(np + 2) * m * D;
        N = per * 2048 > IMP_MAX_WORK ? (int)(IMP_MAX_WORK / per) : 2048;
        N = N < IMP_MIN_SAMPLES ? IMP_MIN_SAMPLES : N;
    }
    int *off = malloc(sizeof(int) * (size_t)(np + 1));
    if (!off)
        return s_fail(err, errsize, "out of memory");
    for (int k = 0, at = 0; k <= np; k++) {
        off[k] = at;
        at += k < np ? s_width(&spec->params[k]) : 0;
    }
    size_t rows = (size_t)N * (size_t)(np + 2);
    double *X = malloc(sizeof(double) * (size_t)m * (size_t)D);
    double *Y = malloc(sizeof(double) * (size_t)m);
    double *P = malloc(sizeof(double) * (size_t)N * 2 * (size_t)D); /* A, B */
    double *AB = malloc(sizeof(double) * (size_t)N * (size_t)D);    /* AB_k, one k */
    double *f = malloc(sizeof(double) * rows);
    double *U = malloc(sizeof(double) * (size_t)N * 2 * (size_t)np); /* unit draws */
    double *u = malloc(sizeof(double) * (size_t)np); /* one row of AB_k's draws */
    int cond = 0;
    for (int k = 0; k < np; k++)
        cond |= spec->params[k].conditional;
    out->first = calloc((size_t)np, sizeof(double));
    out->total = calloc((size_t)np, sizeof(double));
    out->importance = calloc((size_t)np, sizeof(double));
    gp_t *gp = gp_new(D);
    int rc = -1;
    if (!X || !Y || !P || !AB || !f || !U || !u || !out->first || !out->total ||
        !out->importance || !gp) {
        s_fail(err, errsize, "out of memory");
        goto done;
    }

    /* the j-th of m evenly spaced usable trials is usable trial j*usable/m */
    for (int i = 0, seen = 0, j = 0; i < n && j < m; i++) {
        if (!s_usable(spec, params, y, i))
            continue;
        if (seen++ != (int)((long long)j * usable / m))
            continue;
        for (int k = 0; k < np; k++)
            s_encode_one(&spec->params[k], s_value(spec, (size_t)k, params[i]),
                         X + (size_t)j * D + off[k]);
        Y[j++] = y[i];
    }
    gp_fit_opts fo;
    gp_fit_opts_init(&fo);
    fo.restarts = 4;
    fo.seed = seed;
    if (gp_set_data(gp, X, Y, m, 1) != 0 || gp_fit(gp, &fo) != 0) {
        s_fail(err, errsize, "the model could not be fitted to the trials");
        goto done;
    }

    /* A (rows 0..N-1) and B (N..2N-1), from the unit draws U */
    uint64_t st = seed ^ 0x9E3779B97F4A7C15ULL;
    for (size_t q = 0; q < (size_t)2 * N * np; q++)
        U[q] = util_unif01(&st);
    for (int r = 0; r < 2 * N; r++)
        if (s_encode_unit(spec, U + (size_t)r * np, off, P + (size_t)r * D) != 0) {
            s_fail(err, errsize, "a sampled value could not be encoded");
            goto done;
        }
    if (gp_predict_batch(gp, P, 2 * N, f, NULL) != 0) {
        s_fail(err, errsize, "out of memory");
        goto done;
    }
    /* AB_k: A with parameter k from B, one k at a time (encoded afresh
       where activity may change) */
    for (int k = 0; k < np; k++) {
        for (int r = 0; r < N; r++) {
            double *x = AB + (size_t)r * D;
            if (cond) {
                memcpy(u, U + (size_t)r * np, sizeof(double) * (size_t)np);
                u[k] = U[((size_t)N + r) * np + k];
                if (s_encode_unit(spec, u, off, x) != 0) {
                    s_fail(err, errsize, "a sampled value could not be encoded");
                    goto done;
                }
                continue;
            }
            memcpy(x, P + (size_t)r * D, sizeof(double) * (size_t)D);
            memcpy(x + off[k], P + ((size_t)N + r) * D + off[k],
                   sizeof(double) * (size_t)(off[k + 1] - off[k]));
        }
        if (gp_predict_batch(gp, AB, N, f + (size_t)(2 + k) * N, NULL) != 0) {
            s_fail(err, errsize, "out of memory");
            goto done;
        }
    }
    double mean = 0, V = 0;
    for (int r = 0; r < 2 * N; r++)
        mean += f[r];
    mean /= 2 * N;
    for (int r = 0; r < 2 * N; r++)
        V += (f[r] - mean) * (f[r] - mean);
    V /= 2 * N;
    const double *fA = f, *fB = f + N;
    double sum = 0;
    for (int k = 0; k < np; k++) {
        const double *fk = f + (size_t)(2 + k) * N;
        double s1 = 0, st2 = 0;
        for (int r = 0; r < N; r++) {
            s1 += fB[r] * (fk[r] - fA[r]);
            st2 += (fA[r] - fk[r]) * (fA[r] - fk[r]);
        }
        /* a flat mean (relative to the data's unit scale) explains nothing */
        out->first[k] = V > 1e-12 ? s1 / N / V : 0;
        out->total[k] = V > 1e-12 ? st2 / (2.0 * N) / V : 0;
        /* the estimators' sampling noise can break what the indices are:
           0 <= first <= total <= 1 */
        out->first[k] = fmin(fmax(out->first[k], 0), 1);
        out->total[k] = fmin(fmax(out->total[k], out->first[k]), 1);
        out->importance[k] = fmax(out->first[k], 0);
        sum += out->importance[k];
    }
    for (int k = 0; k < np; k++)
        out->importance[k] = sum > 0 ? out->importance[k] / sum : 0;
    rc = 0;
done:
    gp_destroy(&gp);
    free(off);
    free(X);
    free(Y);
    free(P);
    free(AB);
    free(f);
    free(U);
    free(u);
    if (rc != 0)
        imp_result_fini(out);
    return rc;
}
