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

int imp_compute(const spec_t *spec, json_t *const *params, const double *y, int n,
                int samples, unsigned long long seed, imp_result *out, char *err,
                size_t errsize)
{
    memset(out, 0, sizeof *out);
    int np = (int)spec->nparams;
    if (np < 1)
        return s_fail(err, errsize, "the study has no parameters");
    int *off = malloc(sizeof(int) * (size_t)(np + 1));
    if (!off)
        return s_fail(err, errsize, "out of memory");
    int D = 0;
    for (int k = 0; k < np; k++) {
        off[k] = D;
        D += s_width(&spec->params[k]);
    }
    off[np] = D;
    int N = samples > 0 ? samples : 2048;
    size_t rows = (size_t)N * (size_t)(np + 2);
    double *X = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1) * (size_t)D);
    double *Y = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    double *P = malloc(sizeof(double) * rows * (size_t)D); /* A, B, AB_1.. AB_np */
    double *f = malloc(sizeof(double) * rows);
    out->first = calloc((size_t)np, sizeof(double));
    out->total = calloc((size_t)np, sizeof(double));
    out->importance = calloc((size_t)np, sizeof(double));
    gp_t *gp = gp_new(D);
    int rc = -1;
    if (!X || !Y || !P || !f || !out->first || !out->total || !out->importance || !gp) {
        s_fail(err, errsize, "out of memory");
        goto done;
    }

    /* the trials: those with every parameter legal and a finite value */
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(y[i]) || !json_is_object(params[i]))
            continue;
        int ok = 1;
        for (int k = 0; k < np && ok; k++)
            ok = s_encode_one(&spec->params[k],
                              json_object_get(params[i], spec->params[k].name),
                              X + (size_t)m * D + off[k]) == 0;
        if (ok)
            Y[m++] = y[i];
    }
    if (m >
        IMP_MAX_TRIALS) { /* an evenly spaced subsample keeps the fit's cost bounded */
        for (int j = 0; j < IMP_MAX_TRIALS; j++) {
            int from = (int)((long long)j * m / IMP_MAX_TRIALS);
            memmove(X + (size_t)j * D, X + (size_t)from * D, sizeof(double) * (size_t)D);
            Y[j] = Y[from];
        }
        m = IMP_MAX_TRIALS;
    }
    out->n_used = m;
    if (m < 2) {
        snprintf(err, errsize,
                 "%d finished trial%s with a value and legal parameters; at least 2 are "
                 "needed",
                 m, m == 1 ? "" : "s");
        goto done;
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
    /* AB_k: A with parameter k from B */
    for (int k = 0; k < np; k++)
        for (int r = 0; r < N; r++) {
            double *x = P + ((size_t)(2 + k) * N + r) * D;
            memcpy(x, P + (size_t)r * D, sizeof(double) * (size_t)D);
            memcpy(x + off[k], P + ((size_t)N + r) * D + off[k],
                   sizeof(double) * (size_t)(off[k + 1] - off[k]));
        }
    if (gp_predict_batch(gp, P, (int)rows, f, NULL) != 0) {
        s_fail(err, errsize, "out of memory");
        goto done;
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
    free(f);
    if (rc != 0)
        imp_result_fini(out);
    return rc;
}
