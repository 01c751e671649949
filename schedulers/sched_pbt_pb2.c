/*  sched_pbt_pb2.c - the pb2 explore step of the pbt scheduler: GP-UCB on
    (params, time) -> improvement over one ready interval.

    Inputs are the params in the unit cube (log scale for log params,
    integers and choices at the centre of their cell; choices are treated
    as ordered, a simplification of the paper's categorical kernel) plus
    the step scaled to [0,1] by the largest step seen. The improvement is
    the objective's change over the interval, positive for better; the GP
    module minimises, so it models the negated improvement and the UCB
    (acq's "ucb": mean - kappa sd of the negated value) is maximised over
    the params with the time fixed at the present.

    Cost: one GP fit on at most the caller's window of points (a few dozen)
    and an acquisition search over 512 Sobol points: milliseconds, so it
    runs on the controller's thread.
*/
#include "sched_pbt.h"

#include "acq.h"
#include "gp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PB2_MIN_POINTS 4 /* fewer observations: fall back to perturbation */

typedef struct {
    const spec_t *spec;
    double t_now; /* the time coordinate every candidate gets */
} s_round_ctx;

/* Integers and choices to the centre of their cell, the time to now. */
static void s_round(void *ctx, double *x)
{
    const s_round_ctx *r = ctx;
    size_t d = r->spec->nparams;
    for (size_t i = 0; i < d; i++) {
        const spec_param *p = &r->spec->params[i];
        if (p->type == SPEC_FLOAT)
            continue;
        json_t *v = spec_param_from_unit(p, x[i]);
        x[i] = spec_param_to_unit(p, v);
        json_decref(v);
    }
    x[d] = r->t_now;
}

json_t *sched__pb2_select(const spec_t *spec, const pbt_obs *obs, int n, double step_now,
                          double kappa, unsigned long long seed)
{
    int d = (int)spec->nparams, D = d + 1;
    if (n < PB2_MIN_POINTS || d < 1)
        return NULL;
    double tmax = step_now;
    for (int i = 0; i < n; i++)
        tmax = fmax(tmax, obs[i].step);
    if (!(tmax > 0))
        tmax = 1;
    double *X = malloc(sizeof(double) * (size_t)n * (size_t)D);
    double *y = malloc(sizeof(double) * (size_t)n);
    double *out = malloc(sizeof(double) * (size_t)D);
    unsigned char *mask = malloc((size_t)D);
    gp_t *gp = gp_new(D);
    json_t *params = NULL;
    if (!X || !y || !out || !mask || !gp)
        goto done;
    for (int i = 0; i < n; i++) {
        memcpy(X + (size_t)i * D, obs[i].x, sizeof(double) * (size_t)d);
        X[(size_t)i * D + d] = obs[i].step / tmax;
        y[i] = -obs[i].y;
    }
    if (gp_set_data(gp, X, y, n, 1) != 0)
        goto done;
    gp_fit_opts fo;
    gp_fit_opts_init(&fo);
    fo.restarts = 1;
    fo.max_iter = 60;
    fo.seed = seed;
    if (gp_fit(gp, &fo) != 0)
        goto done;
    for (int i = 0; i < d; i++)
        mask[i] = spec->params[i].type == SPEC_FLOAT;
    mask[d] = 0;
    s_round_ctx rc = {spec, step_now / tmax};
    acq_t a = {.kind = ACQ_UCB, .best = 0, .kappa = kappa};
    acq_opt_opts ao;
    acq_opt_opts_init(&ao);
    ao.n_candidates = 512;
    ao.n_local = 128;
    ao.n_polish = 3;
    ao.max_iter = 20;
    ao.mask = mask;
    ao.round = s_round;
    ao.round_ctx = &rc;
    ao.seed = seed ^ 0x5bd1e995ULL;
    double val;
    if (acq_optimize(gp, &a, &ao, out, &val, 1) < 1)
        goto done;
    params = json_object();
    for (int i = 0; i < d; i++)
        json_object_set_new(params, spec->params[i].name,
                            spec_param_from_unit(&spec->params[i], out[i]));
done:
    gp_destroy(&gp);
    free(mask);
    free(out);
    free(y);
    free(X);
    return params;
}
