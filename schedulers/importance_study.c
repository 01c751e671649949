/*  importance_study.c - a study's parameter importance as JSON, from its
    stored trials (see imp_study in importance.h); shared by `jizhi study
    importance` and the web API: the GP's Sobol indices within the caps of
    importance.h, the rank correlation (importance_rank.c) beyond them. */
#include "importance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double v;
    int k;
} s_rank;

static int s_rank_cmp(const void *a, const void *b)
{
    const s_rank *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return x->k - y->k;
}

/* The params array, most important first, from value[k] (and the Sobol
   indices when r is set). */
static json_t *s_params(const spec_t *spec, const double *value, const imp_result *r,
                        s_rank *rk)
{
    for (size_t k = 0; k < spec->nparams; k++)
        rk[k] = (s_rank){value[k], (int)k};
    qsort(rk, spec->nparams, sizeof *rk, s_rank_cmp);
    json_t *arr = json_array();
    for (size_t k = 0; k < spec->nparams; k++) {
        int p = rk[k].k;
        json_array_append_new(arr,
                              json_pack("{s:s,s:f,s:o,s:o}", "name", spec->params[p].name,
                                        "importance", value[p], "first",
                                        r ? json_real(r->first[p]) : json_null(), "total",
                                        r ? json_real(r->total[p]) : json_null()));
    }
    return arr;
}

json_t *imp_study(const json_t *detail, char *err, size_t errsize)
{
    spec_error se;
    spec_t *spec = spec_parse(json_object_get(detail, "spec"), 0, &se);
    if (!spec) {
        char buf[512];
        snprintf(err, errsize, "its spec no longer parses: %s",
                 spec_strerror(&se, buf, sizeof buf));
        return NULL;
    }
    json_t *trials = json_object_get(detail, "trials");
    size_t nt = json_array_size(trials);
    json_t **params = malloc(sizeof(json_t *) * (nt ? nt : 1));
    double *y = malloc(sizeof(double) * (nt ? nt : 1));
    size_t np = spec->nparams ? spec->nparams : 1;
    s_rank *rk = malloc(sizeof(s_rank) * np);
    double *rho = malloc(sizeof(double) * np);
    imp_result r = {0};
    json_t *out = NULL;
    int n = 0;
    if (!params || !y || !rk || !rho) {
        snprintf(err, errsize, "out of memory");
        goto done;
    }
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t)
    {
        json_t *v = json_object_get(t, "value");
        const char *state = json_string_value(json_object_get(t, "state"));
        if (!state || strcmp(state, "completed") || !json_is_number(v) ||
            !isfinite(json_number_value(v)))
            continue;
        params[n] = json_object_get(t, "params");
        y[n++] = json_number_value(v);
    }
    char why[300];
    if (imp_compute(spec, params, y, n, 0, (unsigned long long)spec->seed, &r, why,
                    sizeof why) == 0) {
        out = json_pack("{s:s,s:i,s:i,s:o}", "method", "sobol-gp", "trials", r.n_used,
                        "completed", n, "params", s_params(spec, r.importance, &r, rk));
        goto done;
    }
    /* no model: too few trials is an answer; anything else falls back to
       the rank correlation, which any space affords */
    int used = 0;
    if (n < 2) {
        snprintf(err, errsize, "%d finished trial%s with a value; at least 2 are needed",
                 n, n == 1 ? "" : "s");
        goto done;
    }
    if (imp_rank(spec, params, y, n, rho, &used, err, errsize) != 0)
        goto done;
    char note[600];
    snprintf(note, sizeof note,
             "no model fitted (%s): |Spearman rank correlation| between each parameter "
             "and the objective over %d completed trials (for a choice of other than "
             "numbers, the share of the objective's rank variance its values explain); "
             "a correlation, not a model-based importance",
             why, used);
    out = json_pack("{s:s,s:s,s:i,s:i,s:o}", "method", "spearman", "note", note, "trials",
                    used, "completed", n, "params", s_params(spec, rho, NULL, rk));
done:
    imp_result_fini(&r);
    free(rk);
    free(rho);
    free(params);
    free(y);
    spec_destroy(&spec);
    return out;
}
