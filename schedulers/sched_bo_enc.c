/*  sched_bo_enc.c - the bo scheduler's encoding of parameters into
    [0,1]^D (sched_bo_job.h): float and int parameters take one dimension
    each through spec_param_to_unit, choices are one-hot while the whole
    encoding stays within BO_MAX_ONEHOT_DIMS (the smallest first), other
    choices one ordered dimension; inactive conditional parameters sit at a
    fixed place. Decoding is spec_param_from_unit and an argmax per
    one-hot block; the round callback keeps the acquisition on legal points.
*/
#include "sched_bo_job.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Which choices are one-hot (hot[k] = 1): every one while the encoding
   stays within BO_MAX_ONEHOT_DIMS dimensions, else the smallest first
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
        if (D + extra > BO_MAX_ONEHOT_DIMS)
            break;
        D += extra;
        hot[order[i]] = 1;
    }
    free(order);
    return 0;
}

int sched__bo_layout_init(bo_layout *l, const spec_t *spec)
{
    memset(l, 0, sizeof *l);
    l->spec = spec;
    l->np = (int)spec->nparams;
    l->off = malloc(sizeof(int) * (size_t)(l->np + 1));
    l->hot = calloc((size_t)(l->np ? l->np : 1), 1);
    if (!l->off || !l->hot || s_pick_onehot(spec, l->hot) != 0) {
        sched__bo_layout_fini(l);
        return -1;
    }
    int D = 0;
    for (int k = 0; k < l->np; k++) {
        l->off[k] = D;
        D += l->hot[k] ? (int)spec->params[k].nvalues : 1;
    }
    l->D = D;
    l->mask = malloc((size_t)(D ? D : 1));
    if (!l->mask) {
        sched__bo_layout_fini(l);
        return -1;
    }
    for (int k = 0; k < l->np; k++)
        for (int i = 0; i < (l->hot[k] ? (int)spec->params[k].nvalues : 1); i++)
            l->mask[l->off[k] + i] = !l->hot[k];
    return 0;
}

void sched__bo_layout_fini(bo_layout *l)
{
    free(l->off);
    free(l->hot);
    free(l->mask);
    l->off = NULL;
    l->hot = NULL;
    l->mask = NULL;
}

/* The fixed encoding of an inactive conditional parameter: the middle of
   a numeric dimension, all zeros for a one-hot block, so every trial
   where it is inactive sits at the same place along its dimensions. */
static void s_impute(const bo_layout *l, int k, double *xk)
{
    const spec_param *p = &l->spec->params[k];
    if (l->hot[k])
        for (size_t i = 0; i < p->nvalues; i++)
            xk[i] = 0;
    else
        xk[0] = 0.5;
}

int sched__bo_encode(const bo_layout *l, const json_t *params, double *x)
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

json_t *sched__bo_decode(const bo_layout *l, const double *x)
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

void sched__bo_round(void *ctx, double *x)
{
    const bo_layout *l = ctx;
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
    json_t *o = sched__bo_decode(l, x);
    for (int k = 0; k < l->np; k++)
        if (l->spec->params[k].when && !json_object_get(o, l->spec->params[k].name))
            s_impute(l, k, x + l->off[k]);
    json_decref(o);
}
