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
*/
#include "importance.h"

#include "common/util.h"
#include "gp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Encoded width of parameter p: 1, or its number of values. */
static int s_width(const spec_param *p)
{
    return p->type == SPEC_CHOICE ? (int)p->nvalues : 1;
}

/* Encodes a legal value of p into x (s_width(p) values). 0 or -1. */
static int s_encode_one(const spec_param *p, const json_t *v, double *x)
{
    if (!v || !spec_param_legal(p, v))
        return -1;
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

/* Whether trial i has a finite value and a legal value of every parameter. */
static int s_usable(const spec_t *spec, json_t *const *params, const double *y, int i)
{
    if (!isfinite(y[i]) || !json_is_object(params[i]))
        return 0;
    for (size_t k = 0; k < spec->nparams; k++) {
        json_t *v = json_object_get(params[i], spec->params[k].name);
        if (!v || !spec_param_legal(&spec->params[k], v))
            return 0;
    }
    return 1;
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
    out->first = calloc((size_t)np, sizeof(double));
    out->total = calloc((size_t)np, sizeof(double));
    out->importance = calloc((size_t)np, sizeof(double));
    gp_t *gp = gp_new(D);
    int rc = -1;
    if (!X || !Y || !P || !AB || !f || !out->first || !out->total || !out->importance ||
        !gp) {
        s_fail(err, errsize, "out of memory");
        goto done;
    }

    /* the j-th of m evenly spaced usable trials is usable trial j*usable/m */
    for (int i = 0, u = 0, j = 0; i < n && j < m; i++) {
        if (!s_usable(spec, params, y, i))
            continue;
        if (u++ != (int)((long long)j * usable / m))
            continue;
        for (int k = 0; k < np; k++)
            s_encode_one(&spec->params[k],
                         json_object_get(params[i], spec->params[k].name),
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

    /* A (rows 0..N-1) and B (N..2N-1) */
    uint64_t st = seed ^ 0x9E3779B97F4A7C15ULL;
    for (int r = 0; r < 2 * N; r++) {
        double *x = P + (size_t)r * D;
        for (int k = 0; k < np; k++) {
            const spec_param *p = &spec->params[k];
            json_t *v = spec_param_from_unit(p, util_unif01(&st));
            int bad = s_encode_one(p, v, x + off[k]);
            json_decref(v);
            if (bad) {
                s_fail(err, errsize, "a sampled value could not be encoded");
                goto done;
            }
        }
    }
    if (gp_predict_batch(gp, P, 2 * N, f, NULL) != 0) {
        s_fail(err, errsize, "out of memory");
        goto done;
    }
    /* AB_k: A with parameter k from B, one k at a time */
    for (int k = 0; k < np; k++) {
        for (int r = 0; r < N; r++) {
            double *x = AB + (size_t)r * D;
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
    if (rc != 0)
        imp_result_fini(out);
    return rc;
}
