/*  sched_grid.c - grid search over the cartesian product of the space.

    Options: "points" (values per float/int parameter, default 3, spaced
    evenly on the parameter's scale; an int range with fewer values takes
    them all; grid steps that round to the same value are kept once) and
    "shuffle" (visit the grid in a seeded random order). Choice parameters
    take every value. Only active combinations are visited: a point where a
    conditional parameter is inactive is suggested once (with that
    parameter absent), not once per its values. The state is the next
    index.
*/
#include "sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    sched_t base;
    long points; /* per numeric parameter */
    int shuffle;
    long *sizes;   /* values per parameter */
    long total;    /* product of sizes */
    long next;     /* next grid index to suggest */
    long *order;   /* permutation of [0,total) when shuffling, else NULL */
    json_t **vals; /* per parameter: its distinct grid values (array), owned */
    long *at;      /* s_point's scratch: a point's value index per parameter */
} sched_grid;

static long s_size(const sched_grid *g, const spec_param *p)
{
    if (p->type == SPEC_CHOICE)
        return (long)p->nvalues;
    long grid = spec_param_grid(p); /* an int's or a stepped float's values */
    if (grid > 0 && grid <= g->points)
        return grid;
    return g->points;
}

static json_t *s_value(const spec_param *p, long i, long n)
{
    if (p->type == SPEC_CHOICE)
        return json_deep_copy(json_array_get(p->values, (size_t)i));
    if (n == 1)
        return spec_param_from_unit(p, 0.5);
    if (spec_param_grid(p) == n) /* every value of the grid */
        return spec_param_snap(p, p->low + (double)i * (p->step > 0 ? p->step : 1));
    /* evenly spaced from low to high on the parameter's own scale (not
       from_unit's, whose ints own cells of [low-0.5, high+0.5]); with a step
       at least a step apart, so distinct on the grid */
    double u = (double)i / (double)(n - 1);
    if (!p->log)
        return spec_param_snap(p, p->low + (p->high - p->low) * u);
    double x = exp(log(p->low) + u * (log(p->high) - log(p->low)));
    if (p->type == SPEC_INT) { /* the nearer integer on the log scale */
        double r = floor(x);
        x = x * x > r * (r + 1) ? r + 1 : r;
    }
    return spec_param_snap(p, x);
}

/* Builds grid point idx into *params. 0, or 1 when the point repeats an
   earlier one: an inactive conditional parameter away from its first
   value (only the first stands for all of them). */
static int s_point(const sched_grid *g, const spec_t *spec, long idx, json_t **params)
{
    json_t *p = json_object();
    long *at = g->at;
    /* the last parameter varies fastest */
    for (size_t k = spec->nparams; k-- > 0;) {
        long n = g->sizes[k];
        at[k] = idx % n;
        json_object_set_new(p, spec->params[k].name,
                            json_deep_copy(json_array_get(g->vals[k], (size_t)at[k])));
        idx /= n;
    }
    int dup = 0;
    for (size_t k = 0; k < spec->nparams && !dup; k++)
        dup = at[k] != 0 && !spec_param_active(spec, k, p);
    spec_params_prune(spec, p);
    *params = p;
    return dup;
}

static int s_suggest(sched_t *s, long trial_id, json_t **params)
{
    sched_grid *g = (sched_grid *)s;
    (void)trial_id;
    while (g->next < g->total) {
        long idx = g->order ? g->order[g->next] : g->next;
        g->next++;
        json_t *p = NULL;
        if (s_point(g, s->spec, idx, &p) == 0) {
            *params = p;
            return SCHED_OK;
        }
        json_decref(p);
    }
    return SCHED_DONE;
}

static json_t *s_save(sched_t *s)
{
    return json_pack("{s:I}", "next", (json_int_t)((sched_grid *)s)->next);
}

static int s_restore(sched_t *s, const json_t *state)
{
    json_int_t next;
    if (json_unpack((json_t *)state, "{s:I}", "next", &next) != 0 || next < 0)
        return -1;
    ((sched_grid *)s)->next = (long)next;
    return 0;
}

static void s_destroy(sched_t *s)
{
    sched_grid *g = (sched_grid *)s;
    for (size_t k = 0; g->vals && k < s->spec->nparams; k++)
        json_decref(g->vals[k]);
    free(g->vals);
    free(g->sizes);
    free(g->order);
    free(g->at);
    free(g);
}

static const sched_ops s_ops = {
    .name = "grid",
    .suggest = s_suggest,
    .save = s_save,
    .restore = s_restore,
    .destroy = s_destroy,
};

#define GRID_MAX 10000000L

sched_t *sched_grid_new(const spec_t *spec, char *err, size_t errsize)
{
    json_int_t points = 3;
    int shuffle = 0;
    const char *key;
    json_t *v;
    json_object_foreach(spec->sched_opts, key, v)
    {
        if (!strcmp(key, "type") || !strcmp(key, "seed"))
            continue;
        if (!strcmp(key, "points")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > 1000) {
                snprintf(err, errsize,
                         "scheduler.points: must be an integer from 1 to 1000");
                return NULL;
            }
            points = json_integer_value(v);
        } else if (!strcmp(key, "shuffle")) {
            if (!json_is_boolean(v)) {
                snprintf(err, errsize, "scheduler.shuffle: must be true or false");
                return NULL;
            }
            shuffle = json_is_true(v);
        } else {
            snprintf(err, errsize, "scheduler.%s: unknown option for the grid scheduler",
                     key);
            return NULL;
        }
    }
    sched_grid *g = sched_alloc(sizeof *g, &s_ops, spec, err, errsize);
    if (!g)
        return NULL;
    g->points = (long)points;
    g->shuffle = shuffle;
    g->sizes = calloc(spec->nparams ? spec->nparams : 1, sizeof *g->sizes);
    g->vals = calloc(spec->nparams ? spec->nparams : 1, sizeof *g->vals);
    g->at = calloc(spec->nparams ? spec->nparams : 1, sizeof *g->at);
    if (!g->sizes || !g->vals || !g->at) {
        snprintf(err, errsize, "scheduler: out of memory");
        s_destroy(&g->base);
        return NULL;
    }
    g->total = 1;
    for (size_t k = 0; k < spec->nparams; k++) {
        /* Rounding (a log int range, low == high) can map several grid
           steps to one value; from_unit is monotone, so repeats are
           neighbours: keep each value once so no grid point repeats. */
        long n = s_size(g, &spec->params[k]);
        g->vals[k] = json_array();
        for (long i = 0; i < n; i++) {
            json_t *val = s_value(&spec->params[k], i, n);
            size_t m = json_array_size(g->vals[k]);
            if (m > 0 && json_equal(val, json_array_get(g->vals[k], m - 1)))
                json_decref(val);
            else
                json_array_append_new(g->vals[k], val);
        }
        g->sizes[k] = (long)json_array_size(g->vals[k]);
        if (g->total > GRID_MAX / g->sizes[k]) {
            snprintf(err, errsize, "scheduler: the grid has more than %ld points",
                     GRID_MAX);
            s_destroy(&g->base);
            return NULL;
        }
        g->total *= g->sizes[k];
    }
    if (shuffle) {
        g->order = malloc((size_t)g->total * sizeof *g->order);
        if (!g->order) {
            snprintf(err, errsize,
                     "scheduler: out of memory for %ld shuffled grid points", g->total);
            s_destroy(&g->base);
            return NULL;
        }
        for (long i = 0; i < g->total; i++)
            g->order[i] = i;
        sched_rng rng;
        sched_rng_seed(&rng, (unsigned long long)spec->seed, 0x67726964ULL);
        for (long i = g->total - 1; i > 0; i--) { /* Fisher-Yates */
            long j = (long)(sched_rng_u64(&rng) % (unsigned long long)(i + 1));
            long t = g->order[i];
            g->order[i] = g->order[j];
            g->order[j] = t;
        }
    }
    return &g->base;
}
