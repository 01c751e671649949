/*  sched_bo_mf.c - what the bo scheduler learns from partial results when a
    study has early stopping (docs/design.md, Schedulers "bo", multi-fidelity).

    Trials report their objective as they go, against a resource (the
    early_stopping object's `resource`, default "epoch"; "step" is the
    report step). For each trial this part keeps the objective at a fixed
    ladder of resource levels: g·η^k for k = 0, 1, ... below the study's
    max_resource (g: early_stopping.grace, default 1, η: its reduction,
    default 3; the rungs of asha and of every hyperband bracket are among
    them). A trial's value at level L is its objective at the first report
    whose resource is >= L (the best so far at that point when the
    objective's `use` is "best"), so a trial that was stopped at epoch 3
    has values at levels 1 and 3 and none above: it is a partial result,
    never a finished one. Pairing of objective and resource reports is as
    in sched_es.c: a point forms when both arrive for the same step, or
    the objective arrives at or after the step of an unpaired resource.

    sched_bo.c models them with one GP over (params, resource), the
    resource placed by sched__bo_mf_u (fidelity "joint", the default), or
    chooses for each suggestion the level to model (fidelity "rungs", BOHB,
    Falkner et al. 2018): the finished trials' final values when at least
    n_init trials finished, else the highest level that at least n_init
    trials reached, else the lowest level (the one with the most data).

    State: every trial's level values and pairing, in save/restore.
*/
#include "sched_bo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MF_MAX_LEVELS 32

typedef struct {
    long id;
    long obj_step, res_step, last_step;
    double obj, res, best;
    int pend;
    double at[MF_MAX_LEVELS]; /* value at each level, NaN when not reached */
} mf_trial;

struct bo_mf {
    const spec_t *spec;
    char metric[64], resource[64];
    double level[MF_MAX_LEVELS];
    int nlevels;
    double top; /* a full trial's resource: max_resource, else a level above all */
    mf_trial *trials;
    size_t n, cap;
};

_Static_assert(offsetof(mf_trial, id) == 0, "sched_rows: id first");

static double s_num(const json_t *o, const char *key, double dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

static void s_name(const json_t *o, const char *key, const char *dflt, char *out,
                   size_t size)
{
    const char *v = json_string_value(json_object_get(o, key));
    snprintf(out, size, "%s", v ? v : dflt);
}

bo_mf *sched__bo_mf_new(const spec_t *spec)
{
    const json_t *es = spec->early_stop;
    if (!es)
        return NULL;
    bo_mf *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->spec = spec;
    s_name(es, "metric", spec->metric, m->metric, sizeof m->metric);
    s_name(es, "resource", "epoch", m->resource, sizeof m->resource);
    /* the options were checked by the monitor (sched_es.c); the median
       rule has no reduction and may have grace 0: the ladder is 1, 3, 9.. */
    double g = s_num(es, "grace", 1), eta = s_num(es, "reduction", 3),
           rmax = s_num(es, "max_resource", 0);
    if (!(g > 0))
        g = 1;
    if (!(eta > 1))
        eta = 3;
    while (m->nlevels < MF_MAX_LEVELS) {
        double l = g * pow(eta, m->nlevels);
        if (rmax > 0 && l >= rmax * (1 - 1e-9))
            break;
        m->level[m->nlevels++] = l;
    }
    m->top = rmax > 0 ? rmax : g * pow(eta, m->nlevels);
    return m;
}

void sched__bo_mf_free(bo_mf *m)
{
    if (!m)
        return;
    free(m->trials);
    free(m);
}

int sched__bo_mf_levels(const bo_mf *m)
{
    return m ? m->nlevels : 0;
}

double sched__bo_mf_level(const bo_mf *m, int k)
{
    return m && k >= 0 && k < m->nlevels ? m->level[k] : NAN;
}

double sched__bo_mf_u(const bo_mf *m, int k)
{
    if (!m || k < 0 || k >= m->nlevels)
        return 1;
    double span = log(m->top / m->level[0]);
    return span > 0 ? log(m->level[k] / m->level[0]) / span : 0;
}

static mf_trial *s_trial(bo_mf *m, long id, int create)
{
    int created = 0;
    mf_trial *t = SCHED_ROWS_GET(m->trials, m->n, m->cap, id, create, &created);
    if (created) {
        t->obj_step = t->res_step = t->last_step = -1;
        t->obj = t->res = t->best = NAN;
        for (int k = 0; k < MF_MAX_LEVELS; k++)
            t->at[k] = NAN;
    }
    return t;
}

/* A point (resource r, objective v) of trial t. */
static void s_point(bo_mf *m, mf_trial *t, double r, double v)
{
    t->pend = 0;
    if (isnan(v))
        return;
    if (isnan(t->best) || spec_better(m->spec, v, t->best))
        t->best = v;
    double use = m->spec->use_best ? t->best : v;
    for (int k = 0; k < m->nlevels; k++)
        if (isnan(t->at[k]) && r >= m->level[k] * (1 - 1e-9))
            t->at[k] = use;
}

void sched__bo_mf_metric(bo_mf *m, long trial, long step, const char *metric,
                         double value)
{
    if (!m)
        return;
    int is_obj = !strcmp(metric, m->metric), is_res = !strcmp(metric, m->resource);
    if (!is_obj && !is_res)
        return;
    mf_trial *t = s_trial(m, trial, 1);
    if (!t)
        return;
    if (step < t->last_step) {
        /* a retry reports from the start again: its curve replaces the
           failed attempt's */
        t->obj_step = t->res_step = -1;
        t->obj = t->res = t->best = NAN;
        t->pend = 0;
        for (int k = 0; k < MF_MAX_LEVELS; k++)
            t->at[k] = NAN;
    }
    t->last_step = step;
    if (!strcmp(m->resource, "step")) {
        if (is_obj)
            s_point(m, t, (double)step, value);
        return;
    }
    if (is_res) {
        t->res_step = step;
        t->res = value;
        t->pend = 1;
        if (t->obj_step == step)
            s_point(m, t, value, t->obj);
    }
    if (is_obj) {
        t->obj_step = step;
        t->obj = value;
        if (t->pend && step >= t->res_step)
            s_point(m, t, t->res, value);
    }
}

double sched__bo_mf_at(const bo_mf *m, long trial, int k)
{
    if (!m || k < 0 || k >= m->nlevels)
        return NAN;
    for (size_t i = 0; i < m->n; i++)
        if (m->trials[i].id == trial)
            return m->trials[i].at[k];
    return NAN;
}

json_t *sched__bo_mf_save(const bo_mf *m)
{
    json_t *arr = json_array();
    for (size_t i = 0; m && i < m->n; i++) {
        const mf_trial *t = &m->trials[i];
        json_t *at = json_array();
        for (int k = 0; k < m->nlevels; k++) /* NaN: the level is not reached */
            json_array_append_new(at, isnan(t->at[k]) ? json_null()
                                                      : sched_json_real(t->at[k]));
        json_array_append_new(
            arr,
            json_pack("{s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:b, s:o}", "id",
                      (json_int_t)t->id, "obj_step", (json_int_t)t->obj_step, "res_step",
                      (json_int_t)t->res_step, "last_step", (json_int_t)t->last_step,
                      "obj", sched_json_real(t->obj), "res", sched_json_real(t->res),
                      "best", sched_json_real(t->best), "pend", t->pend, "at", at));
    }
    return arr;
}

int sched__bo_mf_restore(bo_mf *m, const json_t *arr)
{
    if (!json_is_array(arr))
        return -1;
    m->n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e)
    {
        json_t *id = json_object_get(e, "id"), *at = json_object_get(e, "at");
        if (!json_is_integer(id) || !json_is_array(at) ||
            json_array_size(at) != (size_t)m->nlevels)
            return -1;
        mf_trial *t = s_trial(m, (long)json_integer_value(id), 1);
        if (!t)
            return -1;
        t->obj_step = (long)json_integer_value(json_object_get(e, "obj_step"));
        t->res_step = (long)json_integer_value(json_object_get(e, "res_step"));
        t->last_step = (long)json_integer_value(json_object_get(e, "last_step"));
        t->obj = sched_json_double(e, "obj");
        t->res = sched_json_double(e, "res");
        t->best = sched_json_double(e, "best");
        t->pend = json_is_true(json_object_get(e, "pend"));
        for (int k = 0; k < m->nlevels; k++) {
            json_t *v = json_array_get(at, (size_t)k);
            t->at[k] = json_is_number(v) ? json_number_value(v) : NAN;
        }
    }
    return 0;
}
