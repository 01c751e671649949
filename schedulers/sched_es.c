/*  sched_es.c - early stopping monitors: ASHA, Hyperband brackets and the
    median stopping rule (docs/design.md, Schedulers). All are monitors (suggest NULL)
   created from the spec's early_stopping object, so they work next to any scheduler.

    Both pair each trial's objective with its resource (option `resource`,
    default "epoch"; "step" means the report step itself): a point (r, v)
    is formed when a resource value r and an objective value v arrive for
    the same step, or when the objective arrives at or after the step of a
    resource value still unpaired (either order of reports works).

    asha - asynchronous successive halving (Li et al. 2018, Ray Tune's
    AsyncHyperBand rule). Rungs at grace·η^k of the resource (η =
    `reduction`, default 3; with `max_resource`, only rungs below it).
    When a trial's point first reaches a rung, its objective v is compared
    with the values recorded earlier at that rung: the cutoff is their
    (1 − 1/η) quantile (1/η for mode min; linear interpolation, as numpy),
    and the trial is stopped when v is strictly worse than the cutoff
    ("not in the top 1/η"). A rung with no earlier value lets it pass.
    Then v is recorded at the rung either way. A point that jumps over
    several rungs is judged at each, lowest first. `max_resource` is the
    resource a full trial gets: no rung at or above it (the trial's own
    budget ends it, so it completes rather than being stopped).

    median - the median stopping rule (Golovin et al. 2017, Vizier): at a
    point (r, v) with r >= `grace` (default 1), the trial is stopped when
    its best objective so far is strictly worse than the median of the
    running averages (mean of the objective values at resource <= r) of
    the other trials that have reached r, when at least `min_trials`
    (default 3) such trials exist. Finished trials count too.

    hyperband - several brackets of asynchronous successive halving (Li et
    al. 2017; brackets as Optuna's HyperbandPruner and Ray's
    AsyncHyperBand lay them out). `max_resource` R is required; with
    grace g and reduction η there are B = floor(log_η(R/g)) + 1 brackets
    (at most ES_MAX_BRACKETS). Bracket b runs the ASHA rule above with its
    own rung records and grace g·η^b (rungs g·η^(b+k) below R): bracket 0
    stops the most, the last bracket (grace near R) stops few or none.
    Trials are assigned to brackets in turn when first seen, in
    proportion to Hyperband's trial counts n_b = ceil(B/(B-b)·η^(B-1-b)),
    interleaved by smooth weighted round robin (each assignment adds n_b
    to every bracket's credit, takes the bracket with the most credit,
    lowest first on ties, and takes the total from it): for R/g = 9 and
    η = 3, n = 9, 5, 3 and the trials go to brackets 0 1 0 2 0 1 0 2 0 ...
    The credits are saved.

    State (every record, every trial's pairing) is in save/restore.
*/
#include "sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ES_MAX_RUNGS 64
#define ES_MAX_BRACKETS 16

typedef struct {
    double r, v;
} es_pt;

typedef struct {
    long id;
    int done;      /* ended or stopped by us: no more decisions */
    long obj_step; /* step of the last objective value (-1 none) */
    double obj;    /* last objective value */
    long res_step; /* step of the last resource value (-1 none) */
    double res;    /* last resource value */
    int pend;      /* the last resource value waits for an objective */
    int next_rung; /* asha: first rung not yet judged */
    int bracket;   /* hyperband: the trial's bracket (asha: 0) */
    double best;   /* median: best objective so far (NaN none) */
    es_pt *hist;   /* median: points (resource, objective), owned */
    size_t nhist, caphist;
    long last_step; /* highest step seen (a lower one: a retry) */
} es_trial;

typedef struct {
    long trial;
    double v;
} es_rec;

typedef struct {
    es_rec *recs;
    size_t n, cap;
} es_rung;

enum { ES_ASHA = 0, ES_MEDIAN = 1, ES_HYPERBAND = 2 };

typedef struct {
    sched_t base;
    int rule;            /* ES_ASHA, ES_MEDIAN, ES_HYPERBAND */
    int median;          /* rule == ES_MEDIAN */
    char metric[64];     /* objective metric */
    char resource[64];   /* resource metric, "step" = report step */
    double grace;        /* asha: first rung; median: first resource judged;
                            hyperband: bracket 0's first rung */
    double eta;          /* asha, hyperband: reduction factor */
    double max_resource; /* asha: 0 = none; hyperband: required */
    long min_trials;     /* median */
    es_trial *trials;    /* owned */
    size_t ntrials, captrials;
    /* asha: bracket 0 only; hyperband: nbrackets */
    es_rung rungs[ES_MAX_BRACKETS][ES_MAX_RUNGS];
    int nrungs[ES_MAX_BRACKETS];    /* rungs that exist (below max_resource) */
    int nbrackets;                  /* 1 for asha */
    double weight[ES_MAX_BRACKETS]; /* hyperband: n_b */
    double credit[ES_MAX_BRACKETS]; /* hyperband: round-robin credits (saved) */
} sched_es;

/* ---- trials ---- */

/* Hyperband: the next trial's bracket by smooth weighted round robin. */
static int s_assign(sched_es *self)
{
    double total = 0;
    int pick = 0;
    for (int b = 0; b < self->nbrackets; b++) {
        self->credit[b] += self->weight[b];
        total += self->weight[b];
        if (self->credit[b] > self->credit[pick])
            pick = b;
    }
    self->credit[pick] -= total;
    return pick;
}

_Static_assert(offsetof(es_trial, id) == 0, "sched_rows: id first");

static es_trial *s_trial(sched_es *self, long id, int create)
{
    int created;
    es_trial *t = SCHED_ROWS_GET(self->trials, self->ntrials, self->captrials, id, create,
                                 &created);
    if (created) {
        t->obj_step = t->res_step = -1;
        t->obj = t->res = t->best = NAN;
        t->bracket = self->rule == ES_HYPERBAND ? s_assign(self) : 0;
    }
    return t;
}

static int s_hist_add(es_trial *t, double r, double v)
{
    if (t->nhist == t->caphist) {
        size_t cap = t->caphist ? t->caphist * 2 : 8;
        es_pt *nh = realloc(t->hist, cap * sizeof *nh);
        if (!nh)
            return -1;
        t->hist = nh;
        t->caphist = cap;
    }
    t->hist[t->nhist++] = (es_pt){r, v};
    return 0;
}

static int s_rung_add(es_rung *g, long trial, double v)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        es_rec *nr = realloc(g->recs, cap * sizeof *nr);
        if (!nr)
            return -1;
        g->recs = nr;
        g->cap = cap;
    }
    g->recs[g->n++] = (es_rec){trial, v};
    return 0;
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Quantile q in [0,1] of v[0..n) with linear interpolation (numpy's
   default); sorts v. */
static double s_quantile(double *v, size_t n, double q)
{
    qsort(v, n, sizeof *v, s_cmp_double);
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    size_t hi = lo + 1 < n ? lo + 1 : lo;
    double f = pos - (double)lo;
    return v[lo] + (v[hi] - v[lo]) * f;
}

/* Rung k of bracket b. */
static double s_rung_at(const sched_es *self, int b, int k)
{
    return self->grace * pow(self->eta, b + k);
}

static void s_instr_stop(sched_instr *out, long trial, const char *reason)
{
    memset(out, 0, sizeof *out);
    out->trial = trial;
    out->kind = INS_STOP;
    out->args = NULL;
    size_t n = strlen(reason); /* cut to fit, without a truncation warning */
    if (n >= sizeof out->reason)
        n = sizeof out->reason - 1;
    memcpy(out->reason, reason, n);
    out->reason[n] = 0;
}

/* ---- the two rules ---- */

/* ASHA at point (r, v) of t. Returns 1 and fills reason when t stops. */
static int s_asha_point(sched_es *self, es_trial *t, double r, double v, char *reason,
                        size_t rsize)
{
    int maximize = self->base.spec->maximize;
    const double tol = 1e-9;
    int b = t->bracket;
    while (t->next_rung < self->nrungs[b] &&
           r >= s_rung_at(self, b, t->next_rung) * (1 - tol)) {
        int k = t->next_rung++;
        es_rung *g = &self->rungs[b][k];
        int stop = 0;
        double cutoff = NAN;
        if (g->n > 0) {
            double *vals = malloc(g->n * sizeof *vals);
            if (!vals)
                return 0;
            for (size_t i = 0; i < g->n; i++)
                vals[i] = g->recs[i].v;
            cutoff = s_quantile(vals, g->n, maximize ? 1 - 1 / self->eta : 1 / self->eta);
            free(vals);
            stop = !isfinite(v) || (maximize ? v < cutoff : v > cutoff);
        }
        if (isfinite(v)) /* a diverged run (inf, nan) is stopped, never a cutoff */
            s_rung_add(g, t->id, v);
        if (stop && self->rule == ES_HYPERBAND) {
            snprintf(reason, rsize,
                     "hyperband: bracket %d rung %d (%s %g): %.4g not in top 1/%g "
                     "(cutoff %.4g)",
                     b, k, self->resource, s_rung_at(self, b, k), v, self->eta, cutoff);
            return 1;
        }
        if (stop) {
            snprintf(reason, rsize,
                     "asha: rung %d (%s %g): %.4g not in top 1/%g (cutoff %.4g)", k,
                     self->resource, s_rung_at(self, b, k), v, self->eta, cutoff);
            return 1;
        }
    }
    return 0;
}

/* Running average of t's objective over points with resource <= r;
   NaN when it has none there. */
static double s_running_avg(const es_trial *t, double r)
{
    double sum = 0;
    size_t n = 0;
    for (size_t i = 0; i < t->nhist; i++)
        if (t->hist[i].r <= r * (1 + 1e-9) && !isnan(t->hist[i].v)) {
            sum += t->hist[i].v;
            n++;
        }
    return n ? sum / (double)n : NAN;
}

static double s_max_res(const es_trial *t)
{
    double m = -INFINITY;
    for (size_t i = 0; i < t->nhist; i++)
        if (t->hist[i].r > m)
            m = t->hist[i].r;
    return m;
}

static int s_median_point(sched_es *self, es_trial *t, double r, double v, char *reason,
                          size_t rsize)
{
    const spec_t *spec = self->base.spec;
    if (s_hist_add(t, r, v) != 0)
        return 0;
    if (!isnan(v) && (isnan(t->best) || spec_better(spec, v, t->best)))
        t->best = v;
    if (r < self->grace * (1 - 1e-9))
        return 0;
    double *avgs = malloc((self->ntrials ? self->ntrials : 1) * sizeof *avgs);
    if (!avgs)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < self->ntrials; i++) {
        const es_trial *o = &self->trials[i];
        if (o->id == t->id || s_max_res(o) < r * (1 - 1e-9))
            continue;
        double a = s_running_avg(o, r);
        if (isfinite(a)) /* a diverged run is no median to beat */
            avgs[n++] = a;
    }
    int stop = 0;
    if ((long)n >= self->min_trials && n > 0) {
        double med = s_quantile(avgs, n, 0.5);
        stop = isnan(t->best) || spec_better(spec, med, t->best);
        if (stop)
            snprintf(reason, rsize,
                     "median: %s %g: best %.4g worse than median %.4g of %zu trials",
                     self->resource, r, t->best, med, n);
    }
    free(avgs);
    return stop;
}

static int s_point(sched_es *self, es_trial *t, double r, double v, sched_instr *out,
                   int max)
{
    char reason[256]; /* cut to the instruction's 128 */
    t->pend = 0;
    int stop = self->median ? s_median_point(self, t, r, v, reason, sizeof reason)
                            : s_asha_point(self, t, r, v, reason, sizeof reason);
    if (!stop || max < 1)
        return 0;
    t->done = 1;
    s_instr_stop(out, t->id, reason);
    return 1;
}

/* ---- sched_ops ---- */

static int s_on_metric(sched_t *s, long trial_id, long step, const char *metric,
                       double value, double now, sched_instr *out, int max)
{
    sched_es *self = (sched_es *)s;
    int is_obj = !strcmp(metric, self->metric);
    int is_res = !strcmp(metric, self->resource);
    if (!is_obj && !is_res)
        return 0;
    es_trial *t = s_trial(self, trial_id, 1);
    if (!t)
        return -1;
    if (t->done)
        return 0;
    if (step < t->last_step) {
        /* a retry reports from the start again: pair afresh; the median rule
           forgets the failed attempt's curve (ASHA keeps its rung records,
           so rungs passed are not judged twice) */
        t->obj_step = t->res_step = -1;
        t->obj = t->res = NAN;
        t->pend = 0;
        if (self->median) {
            t->nhist = 0;
            t->best = NAN;
        }
    }
    t->last_step = step;
    if (!strcmp(self->resource, "step")) {
        if (!is_obj)
            return 0;
        t->obj_step = step;
        t->obj = value;
        return s_point(self, t, (double)step, value, out, max);
    }
    if (is_res) {
        t->res_step = step;
        t->res = value;
        t->pend = 1;
        if (t->obj_step == step)
            return s_point(self, t, value, t->obj, out, max);
    }
    if (is_obj) {
        t->obj_step = step;
        t->obj = value;
        if (t->pend && step >= t->res_step)
            return s_point(self, t, t->res, value, out, max);
    }
    return 0;
}

static void s_on_complete(sched_t *s, long trial_id, const json_t *params,
                          sched_outcome outcome, double value)
{
    es_trial *t = s_trial((sched_es *)s, trial_id, 0);
    if (t)
        t->done = 1;
}

static json_t *s_save(sched_t *s)
{
    sched_es *self = (sched_es *)s;
    json_t *trials = json_array();
    for (size_t i = 0; i < self->ntrials; i++) {
        const es_trial *t = &self->trials[i];
        json_t *h = json_array();
        for (size_t j = 0; j < t->nhist; j++)
            json_array_append_new(h, json_pack("[o,o]", sched_json_real(t->hist[j].r),
                                               sched_json_real(t->hist[j].v)));
        json_array_append_new(
            trials, json_pack("{s:I, s:b, s:I, s:o, s:I, s:o, s:b, s:i, s:o, s:o, s:I}",
                              "id", (json_int_t)t->id, "done", t->done, "obj_step",
                              (json_int_t)t->obj_step, "obj", sched_json_real(t->obj),
                              "res_step", (json_int_t)t->res_step, "res",
                              sched_json_real(t->res), "pend", t->pend, "next_rung",
                              t->next_rung, "best", sched_json_real(t->best), "hist", h,
                              "last_step", (json_int_t)t->last_step));
        if (self->rule == ES_HYPERBAND)
            json_object_set_new(json_array_get(trials, json_array_size(trials) - 1),
                                "bracket", json_integer(t->bracket));
    }
    /* asha: "rungs" [[trial, value]...] per rung; hyperband: "brackets",
       one such list per bracket, and the round-robin "credit" */
    json_t *brackets = json_array();
    for (int b = 0; b < self->nbrackets; b++) {
        json_t *rungs = json_array();
        for (int k = 0; k < self->nrungs[b]; k++) {
            const es_rung *g = &self->rungs[b][k];
            json_t *ja = json_array();
            for (size_t j = 0; j < g->n; j++)
                json_array_append_new(ja, json_pack("[I,o]", (json_int_t)g->recs[j].trial,
                                                    sched_json_real(g->recs[j].v)));
            json_array_append_new(rungs, ja);
        }
        json_array_append_new(brackets, rungs);
    }
    if (self->rule != ES_HYPERBAND) {
        json_t *rungs = json_incref(json_array_get(brackets, 0));
        json_decref(brackets);
        return json_pack("{s:s, s:o, s:o}", "rule", self->median ? "median" : "asha",
                         "trials", trials, "rungs", rungs ? rungs : json_array());
    }
    json_t *credit = json_array();
    for (int b = 0; b < self->nbrackets; b++)
        json_array_append_new(credit, json_real(self->credit[b]));
    return json_pack("{s:s, s:o, s:o, s:o}", "rule", "hyperband", "trials", trials,
                     "brackets", brackets, "credit", credit);
}

static const char *s_rule_name(const sched_es *self)
{
    return self->rule == ES_HYPERBAND ? "hyperband" : self->median ? "median" : "asha";
}

static void s_clear(sched_es *self)
{
    for (size_t i = 0; i < self->ntrials; i++)
        free(self->trials[i].hist);
    free(self->trials);
    self->trials = NULL;
    self->ntrials = self->captrials = 0;
    for (int b = 0; b < ES_MAX_BRACKETS; b++)
        for (int k = 0; k < ES_MAX_RUNGS; k++) {
            free(self->rungs[b][k].recs);
            memset(&self->rungs[b][k], 0, sizeof self->rungs[b][k]);
        }
    for (int b = 0; b < ES_MAX_BRACKETS; b++)
        self->credit[b] = 0;
}

/* Restores one bracket's rung records ([[trial, value]...] per rung). */
static int s_restore_rungs(sched_es *self, int b, const json_t *rungs)
{
    if (!json_is_array(rungs) || (int)json_array_size(rungs) > self->nrungs[b])
        return -1;
    size_t i;
    json_t *g;
    json_array_foreach(rungs, i, g)
    {
        size_t j;
        json_t *rec;
        json_array_foreach(g, j, rec)
        {
            json_t *tr = json_array_get(rec, 0), *v = json_array_get(rec, 1);
            if (!json_is_integer(tr) || !json_is_number(v) ||
                s_rung_add(&self->rungs[b][i], (long)json_integer_value(tr),
                           json_number_value(v)))
                return -1;
        }
    }
    return 0;
}

static int s_restore(sched_t *s, const json_t *state)
{
    sched_es *self = (sched_es *)s;
    const char *rule = json_string_value(json_object_get(state, "rule"));
    json_t *trials = json_object_get(state, "trials");
    int hb = self->rule == ES_HYPERBAND;
    json_t *brackets = json_object_get(state, hb ? "brackets" : "rungs"),
           *credit = json_object_get(state, "credit");
    if (!rule || strcmp(rule, s_rule_name(self)) || !json_is_array(trials) ||
        !json_is_array(brackets) ||
        (hb &&
         (json_array_size(brackets) != (size_t)self->nbrackets ||
          !json_is_array(credit) || json_array_size(credit) != (size_t)self->nbrackets)))
        return -1;
    s_clear(self);
    size_t i;
    json_t *jt;
    json_array_foreach(trials, i, jt)
    {
        json_t *id = json_object_get(jt, "id"), *h = json_object_get(jt, "hist");
        if (!json_is_integer(id) || !json_is_array(h))
            return -1;
        es_trial *t = s_trial(self, (long)json_integer_value(id), 1);
        if (!t)
            return -1;
        t->done = json_is_true(json_object_get(jt, "done"));
        t->obj_step = (long)json_integer_value(json_object_get(jt, "obj_step"));
        t->obj = sched_json_double(jt, "obj");
        t->res_step = (long)json_integer_value(json_object_get(jt, "res_step"));
        t->res = sched_json_double(jt, "res");
        t->pend = json_is_true(json_object_get(jt, "pend"));
        t->next_rung = (int)json_integer_value(json_object_get(jt, "next_rung"));
        t->best = sched_json_double(jt, "best");
        t->last_step = (long)json_integer_value(json_object_get(jt, "last_step"));
        t->bracket = hb ? (int)json_integer_value(json_object_get(jt, "bracket")) : 0;
        if (t->bracket < 0 || t->bracket >= self->nbrackets)
            return -1;
        size_t j;
        json_t *p;
        json_array_foreach(h, j, p)
        {
            json_t *r = json_array_get(p, 0), *v = json_array_get(p, 1);
            if (s_hist_add(t, json_is_number(r) ? json_number_value(r) : NAN,
                           json_is_number(v) ? json_number_value(v) : NAN) != 0)
                return -1;
        }
    }
    if (!hb)
        return s_restore_rungs(self, 0, brackets);
    for (int b = 0; b < self->nbrackets; b++) {
        json_t *c = json_array_get(credit, (size_t)b);
        if (!json_is_number(c) ||
            s_restore_rungs(self, b, json_array_get(brackets, (size_t)b)))
            return -1;
        self->credit[b] = json_number_value(c);
    }
    return 0;
}

static void s_destroy(sched_t *s)
{
    sched_es *self = (sched_es *)s;
    s_clear(self);
    free(self);
}

static const sched_ops s_asha_ops = {
    .name = "asha",
    .on_metric = s_on_metric,
    .on_complete = s_on_complete,
    .save = s_save,
    .restore = s_restore,
    .destroy = s_destroy,
};
static const sched_ops s_hyperband_ops = {
    .name = "hyperband",
    .on_metric = s_on_metric,
    .on_complete = s_on_complete,
    .save = s_save,
    .restore = s_restore,
    .destroy = s_destroy,
};
static const sched_ops s_median_ops = {
    .name = "median",
    .on_metric = s_on_metric,
    .on_complete = s_on_complete,
    .save = s_save,
    .restore = s_restore,
    .destroy = s_destroy,
};

/* ---- construction ---- */

static int s_opt_str(const json_t *o, const char *key, const char *dflt, char *out,
                     size_t size, char *err, size_t errsize)
{
    json_t *v = json_object_get(o, key);
    if (!v) {
        snprintf(out, size, "%s", dflt);
        return 0;
    }
    if (!json_is_string(v) || !spec_valid_name(json_string_value(v))) {
        snprintf(err, errsize, "early_stopping.%s: must be a metric name", key);
        return -1;
    }
    snprintf(out, size, "%s", json_string_value(v));
    return 0;
}

static sched_t *s_new(const spec_t *spec, int rule, char *err, size_t errsize)
{
    const json_t *o = spec->early_stop;
    int median = rule == ES_MEDIAN, hb = rule == ES_HYPERBAND;
    static const char *const asha_keys[] = {
        "type", "resource", "grace", "reduction", "max_resource", "metric", NULL};
    static const char *const median_keys[] = {"type",       "resource", "grace",
                                              "min_trials", "metric",   NULL};
    const char *const *keys = median ? median_keys : asha_keys;
    const char *key = sched_opt_unknown(o, keys);
    if (key) {
        snprintf(err, errsize, "early_stopping.%s: unknown option for %s", key,
                 hb       ? "hyperband"
                 : median ? "median"
                          : "asha");
        return NULL;
    }
    sched_es *self = sched_alloc(sizeof *self,
                                 hb       ? &s_hyperband_ops
                                 : median ? &s_median_ops
                                          : &s_asha_ops,
                                 spec, err, errsize);
    if (!self)
        return NULL;
    self->rule = rule;
    self->median = median;
    self->nbrackets = 1;
    double mt = 3;
    if (s_opt_str(o, "metric", spec->metric, self->metric, sizeof self->metric, err,
                  errsize) ||
        s_opt_str(o, "resource", "epoch", self->resource, sizeof self->resource, err,
                  errsize) ||
        sched_opt_num(o, "early_stopping", "grace", 1, -INFINITY, INFINITY, 0,
                      &self->grace, err, errsize) ||
        sched_opt_num(o, "early_stopping", "reduction", 3, -INFINITY, INFINITY, 0,
                      &self->eta, err, errsize) ||
        sched_opt_num(o, "early_stopping", "max_resource", 0, -INFINITY, INFINITY, 0,
                      &self->max_resource, err, errsize) ||
        sched_opt_num(o, "early_stopping", "min_trials", 3, -INFINITY, INFINITY, 0, &mt,
                      err, errsize))
        goto fail;
    if (median ? self->grace < 0 : self->grace <= 0) {
        snprintf(err, errsize, "early_stopping.grace: must be %s",
                 median ? ">= 0" : "> 0");
        goto fail;
    }
    if (!median && self->eta <= 1) {
        snprintf(err, errsize, "early_stopping.reduction: must be > 1");
        goto fail;
    }
    if (hb && !json_object_get(o, "max_resource")) {
        snprintf(err, errsize,
                 "early_stopping.max_resource: required for hyperband (the resource a "
                 "full trial gets, e.g. its number of epochs)");
        goto fail;
    }
    if (!median && json_object_get(o, "max_resource") &&
        self->max_resource < self->grace) {
        snprintf(err, errsize, "early_stopping.max_resource: must be >= grace (%g)",
                 self->grace);
        goto fail;
    }
    if (median && (mt < 1 || mt != floor(mt) || mt > 1e6)) {
        snprintf(err, errsize, "early_stopping.min_trials: must be a whole number >= 1");
        goto fail;
    }
    self->min_trials = (long)mt;
    if (hb) {
        /* B = floor(log_eta(R/g)) + 1 brackets */
        int nb = 1;
        while (nb <= ES_MAX_BRACKETS &&
               self->grace * pow(self->eta, nb) <= self->max_resource * (1 + 1e-9))
            nb++;
        if (nb > ES_MAX_BRACKETS) {
            snprintf(err, errsize,
                     "early_stopping.max_resource: %g over grace %g gives more than %d "
                     "brackets at reduction %g; raise grace or reduction",
                     self->max_resource, self->grace, ES_MAX_BRACKETS, self->eta);
            goto fail;
        }
        self->nbrackets = nb;
        for (int b = 0; b < nb; b++)
            self->weight[b] = ceil((double)nb / (nb - b) * pow(self->eta, nb - 1 - b));
    }
    if (!median) {
        for (int b = 0; b < self->nbrackets; b++)
            while (self->nrungs[b] < ES_MAX_RUNGS &&
                   (self->max_resource <= 0 || s_rung_at(self, b, self->nrungs[b]) <
                                                   self->max_resource * (1 - 1e-9)))
                self->nrungs[b]++;
    }
    return &self->base;
fail:
    free(self);
    return NULL;
}

sched_t *sched_asha_new(const spec_t *spec, char *err, size_t errsize)
{
    return s_new(spec, ES_ASHA, err, errsize);
}

sched_t *sched_median_new(const spec_t *spec, char *err, size_t errsize)
{
    return s_new(spec, ES_MEDIAN, err, errsize);
}

sched_t *sched_hyperband_new(const spec_t *spec, char *err, size_t errsize)
{
    return s_new(spec, ES_HYPERBAND, err, errsize);
}
