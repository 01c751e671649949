/*  sched_pbt.c - population based training (docs/design.md, Schedulers; Jaderberg et al.
    2017, "Population based training of neural networks").

    The population is budget.parallel trials started with random params.
    Each trial has ready points every `interval` steps (or `interval_s`
    seconds of controller time) of its own progress, counted on the
    reports of the objective metric. At a ready point the live members
    are ranked on their latest objective value; a member in the bottom
    `quantile` copies a random member of the top `quantile` (exploit) and
    perturbs the copied params (explore):

      exploit  the donor's latest checkpoint is used when it is at or after
               the donor's last ready point; otherwise the donor is sent a
               `checkpoint` instruction and the receiver waits for
               on_checkpoint. The receiver gets `load` {path, params, from}:
               the controller stores the params as a new generation with
               the donor as parent (lineage) and the trial loads the state
               live, without a restart (ctl_study.c restarts programs that
               do not acknowledge within load_timeout_s).
      explore  each param is resampled with probability `resample_p`, else
               multiplied by 0.8 or 1.2 (`perturb`), clamped to its bounds;
               log params and non-negative ranges scale multiplicatively,
               ranges with negative values move by ±(factor-1)·(high-low)/2;
               an int that rounds back to its value moves by one; a choice
               moves to a neighbouring value. With `pb2` the new params come
               from GP-UCB on recent improvement (sched_pbt_pb2.c) instead.

    Budget: the first budget.parallel suggestions are random; when
    budget.trials is larger, each later suggestion (made when a member has
    ended and freed its slot) starts from scratch with the best member's
    params, perturbed. budget.trials = budget.parallel gives the classic
    fixed population; budget.trials < parallel gives a smaller one.

    Trial ids: the controller passes suggest() the new trial's id, so each
    suggestion becomes a member at once. A trial first heard of in
    on_metric or on_complete (none of our suggestions) joins as a member
    with no suggestion number; on_complete gives its params.

    All randomness comes from one splitmix64 stream saved with the state,
    so a run is reproducible for a seed and order of calls and a restored
    scheduler makes the same decisions as one that never stopped.
*/
#include "sched.h"
#include "sched_pbt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PBT_DEFAULT_LOAD_TIMEOUT_S SCHED_LOAD_TIMEOUT_DEFAULT_S
#define PBT_MAX_OBS 4096 /* pb2 observations kept (the fit uses `window`) */

typedef struct {
    long id;         /* trial id */
    long num;        /* suggestion number, -1 for a trial we did not suggest */
    json_t *params;  /* current params (owned), NULL until known */
    double value;    /* latest objective value, NaN when none */
    long step;       /* step of that value */
    long ready_step; /* step of the last ready point (or load) */
    double
        ready_time; /* controller time of the last ready point, NaN before any report */
    double
        ready_value; /* objective at the last ready point (pb2 baseline), NaN when none */
    char *ckpt;      /* latest checkpoint (owned) or NULL */
    long ckpt_step;
    int ended;       /* completed, failed or stopped */
    int waiting;     /* waits for its donor's checkpoint */
    long generation; /* loads received */
} pbt_member;

typedef struct {
    long receiver, donor;
    double asked; /* controller time of the checkpoint request */
} pbt_pending;

typedef struct {
    sched_t base;
    /* options */
    long interval;     /* steps between ready points, 0 with interval_s */
    double interval_s; /* seconds between ready points, 0 with interval */
    double quantile;   /* bottom/top fraction (0, 0.5] */
    double resample_p; /* explore: probability of resampling a param */
    double factors[2]; /* explore: the two multipliers */
    int pb2;           /* explore by GP-UCB */
    double kappa;      /* pb2: UCB weight */
    int window;        /* pb2: most recent observations fitted */
    double timeout_s;  /* give up waiting for a donor's checkpoint */
    /* state */
    long count; /* suggestions made */
    sched_rng rng;
    pbt_member *m;
    size_t nm, capm;
    pbt_pending *pend;
    size_t np, capp;
    pbt_obs *obs;
    size_t nobs, capo;
    long exploits; /* loads sent */
} sched_pbt;

/* ---- small helpers ---------------------------------------------------- */

static void *s_grow(void *p, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return p;
    size_t nc = *cap ? *cap * 2 : 8;
    void *q = realloc(p, nc * elem);
    if (q)
        *cap = nc;
    return q;
}

static long s_get_long(const json_t *o, const char *key, long dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long)json_integer_value(v) : dflt;
}

/* better: 1 when a is better than b (NaN is worst). */
static int s_better(const sched_pbt *self, double a, double b)
{
    if (isnan(a))
        return 0;
    if (isnan(b))
        return 1;
    return self->base.spec->maximize ? a > b : a < b;
}

static pbt_member *s_find(sched_pbt *self, long id)
{
    for (size_t i = 0; i < self->nm; i++)
        if (self->m[i].id == id)
            return &self->m[i];
    return NULL;
}

static pbt_member *s_member(sched_pbt *self, long id)
{
    pbt_member *m = s_find(self, id);
    if (m)
        return m;
    pbt_member *a = s_grow(self->m, &self->capm, self->nm, sizeof *self->m);
    if (!a)
        return NULL;
    self->m = a;
    m = &self->m[self->nm++];
    memset(m, 0, sizeof *m);
    m->id = id;
    m->num = -1;
    m->value = m->ready_value = m->ready_time = NAN;
    m->step = -1;
    m->ckpt_step = -1;
    return m;
}

static void s_set_ckpt(pbt_member *m, const char *path, long step)
{
    char *p = strdup(path);
    if (!p)
        return;
    free(m->ckpt);
    m->ckpt = p;
    m->ckpt_step = step;
}

/* ---- explore ---------------------------------------------------------- */

static json_t *s_perturb_one(sched_pbt *self, const spec_param *p, const json_t *v)
{
    sched_rng *r = &self->rng;
    if (!spec_param_legal(p, v) || sched_rng_uniform(r) < self->resample_p)
        return spec_param_from_unit(p, sched_rng_uniform(r));
    int up = sched_rng_uniform(r) >= 0.5;
    if (p->type == SPEC_CHOICE) {
        size_t idx = 0;
        for (size_t i = 0; i < p->nvalues; i++)
            if (json_equal((json_t *)v, json_array_get(p->values, i)))
                idx = i;
        if (p->nvalues > 1) {
            if (up && idx + 1 >= p->nvalues)
                up = 0;
            else if (!up && idx == 0)
                up = 1;
            idx = up ? idx + 1 : idx - 1;
        }
        return json_deep_copy(json_array_get(p->values, idx));
    }
    double f = self->factors[up], x = json_number_value(v), nx;
    if ((p->log || p->low >= 0) && x != 0)
        nx = x * f;
    else
        nx = x + (f - 1) * (p->high - p->low) / 2;
    json_t *out = spec_param_snap(p, nx); /* its range, and its step or whole numbers */
    if ((p->type == SPEC_INT || p->step > 0) && json_number_value(out) == x) {
        /* too small to move: one step in the factor's direction */
        double st = p->step > 0 ? p->step : 1;
        json_decref(out);
        out = spec_param_snap(p, f > 1 ? x + st : x - st);
    }
    return out;
}

/* Perturbed copy of params: every parameter active in params is perturbed;
   then a conditional one that the perturbed parents turn off is dropped,
   and one they turn on is drawn afresh (repeated, for chains). */
static json_t *s_explore(sched_pbt *self, const json_t *params)
{
    const spec_t *spec = self->base.spec;
    json_t *out = params ? json_deep_copy(params) : json_object();
    for (size_t i = 0; i < spec->nparams; i++) {
        const spec_param *p = &spec->params[i];
        if (params && !spec_param_active(spec, i, params))
            continue;
        json_object_set_new(out, p->name,
                            s_perturb_one(self, p, json_object_get(params, p->name)));
    }
    for (size_t round = 0; round <= spec->nparams; round++) {
        int changed = spec_params_prune(spec, out) > 0;
        for (size_t i = 0; i < spec->nparams; i++) {
            const spec_param *p = &spec->params[i];
            if (!json_object_get(out, p->name) && spec_param_active(spec, i, out)) {
                json_object_set_new(
                    out, p->name, spec_param_from_unit(p, sched_rng_uniform(&self->rng)));
                changed = 1;
            }
        }
        if (!changed)
            break;
    }
    return out;
}

static void s_add_obs(sched_pbt *self, const json_t *params, long step, double y)
{
    const spec_t *spec = self->base.spec;
    if (!params || spec->nparams == 0)
        return;
    if (self->nobs == PBT_MAX_OBS) { /* drop the oldest */
        free(self->obs[0].x);
        memmove(self->obs, self->obs + 1, (self->nobs - 1) * sizeof *self->obs);
        self->nobs--;
    }
    pbt_obs *a = s_grow(self->obs, &self->capo, self->nobs, sizeof *self->obs);
    double *x = malloc(sizeof(double) * spec->nparams);
    if (!a || !x) {
        free(x);
        if (a)
            self->obs = a;
        return;
    }
    self->obs = a;
    for (size_t i = 0; i < spec->nparams; i++) {
        double u = spec_param_to_unit(&spec->params[i],
                                      json_object_get(params, spec->params[i].name));
        x[i] = u < 0 ? 0.5 : u;
    }
    self->obs[self->nobs++] = (pbt_obs){x, (double)step, y};
}

/* New params for a receiver copying `donor`. */
static json_t *s_new_params(sched_pbt *self, const pbt_member *donor)
{
    if (self->pb2) {
        int n = (int)self->nobs < self->window ? (int)self->nobs : self->window;
        /* the pb2 seed is drawn even when the GP is not used, so the
           stream does not depend on how many points there are */
        unsigned long long seed = sched_rng_u64(&self->rng);
        json_t *p = sched__pb2_select(
            self->base.spec, self->obs + (self->nobs - (size_t)n), n,
            (double)(donor->step > 0 ? donor->step : 0), self->kappa, seed);
        if (p) {
            json_t *out = json_deep_copy(donor->params);
            json_object_update(out, p);
            json_decref(p);
            spec_params_prune(self->base.spec, out); /* conditional spaces */
            return out;
        }
    }
    return s_explore(self, donor->params);
}

/* ---- exploit ---------------------------------------------------------- */

static int s_emit(sched_instr *out, int k, int max, long trial, ins_kind kind,
                  json_t *args, const char *reason)
{
    if (k >= max) {
        json_decref(args);
        return k;
    }
    memset(&out[k], 0, sizeof out[k]);
    out[k].trial = trial;
    out[k].kind = kind;
    out[k].args = args;
    snprintf(out[k].reason, sizeof out[k].reason, "%.*s", (int)sizeof out[k].reason - 1,
             reason);
    return k + 1;
}

/* Tells receiver r to load donor d's checkpoint at path/step. */
static int s_load(sched_pbt *self, pbt_member *r, pbt_member *d, const char *path,
                  long step, double now, sched_instr *out, int k, int max)
{
    if (k >= max)
        return k;
    json_t *params = s_new_params(self, d);
    json_t *args = json_pack("{s:s, s:O, s:I}", "path", path, "params", params, "from",
                             (json_int_t)d->id);
    char reason[512];
    snprintf(reason, sizeof reason, "pbt%s: exploit trial %ld (%.4g vs %.4g) at step %ld",
             self->pb2 ? "/pb2" : "", d->id, d->value, r->value, step);
    k = s_emit(out, k, max, r->id, INS_LOAD, args, reason);
    json_decref(r->params);
    r->params = params;
    r->generation++;
    r->waiting = 0;
    r->value = r->ready_value = d->value;
    r->ready_step = step > r->step ? step : r->step;
    r->ready_time = now;
    self->exploits++;
    return k;
}

static int s_by_value(const void *a, const void *b, void *ctx)
{
    const sched_pbt *self = ctx;
    const pbt_member *x = *(pbt_member *const *)a, *y = *(pbt_member *const *)b;
    if (s_better(self, x->value, y->value))
        return -1;
    if (s_better(self, y->value, x->value))
        return 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Insertion sort with a context (qsort_r is not portable); n is small. */
static void s_sort(pbt_member **a, size_t n, sched_pbt *self)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && s_by_value(&a[j], &a[j - 1], self) < 0; j--) {
            pbt_member *t = a[j];
            a[j] = a[j - 1];
            a[j - 1] = t;
        }
}

/* Member m reached a ready point: exploit when it ranks in the bottom. */
static int s_ready(sched_pbt *self, pbt_member *m, double now, sched_instr *out, int max)
{
    pbt_member **live = malloc(sizeof *live * (self->nm ? self->nm : 1));
    if (!live)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < self->nm; i++)
        if (!self->m[i].ended && !isnan(self->m[i].value)) /* NaN: none yet */
            live[n++] = &self->m[i];
    int k = 0;
    if (n >= 2) {
        s_sort(live, n, self);
        size_t cut = (size_t)floor((double)n * self->quantile);
        if (cut < 1)
            cut = 1;
        size_t pos = 0;
        while (pos < n && live[pos] != m)
            pos++;
        if (pos < n && pos >= n - cut) {
            pbt_member *d = live[sched_rng_u64(&self->rng) % cut];
            if (d->params) {
                if (d->ckpt && d->ckpt_step >= d->ready_step) {
                    k = s_load(self, m, d, d->ckpt, d->ckpt_step, now, out, k, max);
                } else {
                    int asked = 0;
                    for (size_t i = 0; i < self->np; i++)
                        asked |= self->pend[i].donor == d->id;
                    pbt_pending *a =
                        s_grow(self->pend, &self->capp, self->np, sizeof *self->pend);
                    if (a) {
                        self->pend = a;
                        self->pend[self->np++] = (pbt_pending){m->id, d->id, now};
                        m->waiting = 1;
                        if (!asked) {
                            char reason[512];
                            snprintf(reason, sizeof reason,
                                     "pbt: trial %ld will copy this trial's state",
                                     m->id);
                            k = s_emit(out, k, max, d->id, INS_CHECKPOINT, NULL, reason);
                        }
                    }
                }
            }
        }
    }
    free(live);
    return k;
}

static void s_drop_pending(sched_pbt *self, size_t i)
{
    pbt_member *r = s_find(self, self->pend[i].receiver);
    if (r)
        r->waiting = 0;
    self->pend[i] = self->pend[--self->np];
}

/* Requests older than timeout_s are dropped: the donor does not answer
   checkpoint instructions (a program that does not poll). The receiver
   tries again at its next ready point. */
static void s_expire(sched_pbt *self, double now)
{
    for (size_t i = 0; i < self->np;)
        if (self->timeout_s > 0 && now - self->pend[i].asked > self->timeout_s)
            s_drop_pending(self, i);
        else
            i++;
}

/* ---- sched_ops -------------------------------------------------------- */

static int s_suggest(sched_t *s, long trial_id, json_t **params)
{
    sched_pbt *self = (sched_pbt *)s;
    const spec_t *spec = s->spec;
    if (self->count >= spec->trials)
        return SCHED_DONE;
    json_t *p = NULL;
    if (self->count >= spec->parallel) {
        const pbt_member *best = NULL;
        for (size_t i = 0; i < self->nm; i++)
            if (self->m[i].params && isfinite(self->m[i].value) &&
                (!best || s_better(self, self->m[i].value, best->value)))
                best = &self->m[i];
        if (best)
            p = s_explore(self, best->params);
    }
    if (!p) {
        sched_rng r;
        sched_rng_seed(&r, (unsigned long long)spec->seed,
                       (unsigned long long)self->count);
        p = json_object();
        for (size_t i = 0; i < spec->nparams; i++)
            json_object_set_new(
                p, spec->params[i].name,
                spec_param_from_unit(&spec->params[i], sched_rng_uniform(&r)));
    }
    spec_params_prune(spec, p); /* conditional spaces: what the trial gets */
    pbt_member *m = s_member(self, trial_id);
    if (!m) {
        json_decref(p);
        return SCHED_ERR;
    }
    m->num = self->count++;
    json_decref(m->params);
    m->params = json_deep_copy(p);
    *params = p;
    return SCHED_OK;
}

static int s_on_metric(sched_t *s, long trial_id, long step, const char *metric,
                       double value, double now, sched_instr *out, int max)
{
    sched_pbt *self = (sched_pbt *)s;
    pbt_member *m = s_member(self, trial_id);
    if (!m || m->ended)
        return 0;
    if (isnan(m->ready_time))
        m->ready_time = now;
    if (strcmp(metric, s->spec->metric) != 0)
        return 0;
    /* a diverged run (inf, -inf, nan) ranks worst, so it is exploited */
    m->value = isfinite(value) ? value : s->spec->maximize ? -INFINITY : INFINITY;
    m->step = step;
    s_expire(self, now);
    if (m->waiting)
        return 0;
    int ready = self->interval > 0 ? step - m->ready_step >= self->interval
                                   : now - m->ready_time >= self->interval_s;
    if (!ready)
        return 0;
    if (self->pb2 && isfinite(m->ready_value) && isfinite(value) && step > m->ready_step)
        s_add_obs(self, m->params, step,
                  s->spec->maximize ? value - m->ready_value : m->ready_value - value);
    m->ready_step = step;
    m->ready_time = now;
    m->ready_value = value;
    return s_ready(self, m, now, out, max);
}

static int s_on_checkpoint(sched_t *s, long trial_id, long step, const char *path,
                           double now, sched_instr *out, int max)
{
    sched_pbt *self = (sched_pbt *)s;
    pbt_member *d = s_member(self, trial_id);
    if (!d)
        return 0;
    s_set_ckpt(d, path, step);
    int k = 0;
    for (size_t i = 0; i < self->np && k < max;) {
        if (self->pend[i].donor != trial_id) {
            i++;
            continue;
        }
        pbt_member *r = s_find(self, self->pend[i].receiver);
        s_drop_pending(self, i);
        if (r && !r->ended && d->params)
            k = s_load(self, r, d, path, step, now, out, k, max);
    }
    return k;
}

static void s_on_complete(sched_t *s, long trial_id, const json_t *params,
                          sched_outcome outcome, double value)
{
    sched_pbt *self = (sched_pbt *)s;
    pbt_member *m = s_member(self, trial_id);
    if (!m)
        return;
    m->ended = 1;
    if (params && !m->params)
        m->params = json_deep_copy(params);
    if (isfinite(value))
        m->value = value;
    for (size_t i = 0; i < self->np;) {
        if (self->pend[i].receiver == trial_id || self->pend[i].donor == trial_id)
            s_drop_pending(self, i);
        else
            i++;
    }
}

static json_t *s_save(sched_t *s)
{
    sched_pbt *self = (sched_pbt *)s;
    char rng[32];
    snprintf(rng, sizeof rng, "%016llx", self->rng.s);
    json_t *ms = json_array(), *ps = json_array(), *os = json_array();
    for (size_t i = 0; i < self->nm; i++) {
        const pbt_member *m = &self->m[i];
        json_array_append_new(
            ms, json_pack(
                    "{s:I, s:I, s:O?, s:o, s:I, s:I, s:o, s:o, s:s?, s:I, s:b, s:b, s:I}",
                    "id", (json_int_t)m->id, "num", (json_int_t)m->num, "params",
                    m->params, "value", sched_json_real(m->value), "step",
                    (json_int_t)m->step, "ready_step", (json_int_t)m->ready_step,
                    "ready_time", sched_json_real(m->ready_time), "ready_value",
                    sched_json_real(m->ready_value), "ckpt", m->ckpt, "ckpt_step",
                    (json_int_t)m->ckpt_step, "ended", m->ended, "waiting", m->waiting,
                    "generation", (json_int_t)m->generation));
    }
    for (size_t i = 0; i < self->np; i++)
        json_array_append_new(ps, json_pack("{s:I, s:I, s:f}", "receiver",
                                            (json_int_t)self->pend[i].receiver, "donor",
                                            (json_int_t)self->pend[i].donor, "asked",
                                            self->pend[i].asked));
    for (size_t i = 0; i < self->nobs; i++) {
        json_t *x = json_array();
        for (size_t j = 0; j < s->spec->nparams; j++)
            json_array_append_new(x, json_real(self->obs[i].x[j]));
        json_array_append_new(os, json_pack("{s:o, s:f, s:f}", "x", x, "step",
                                            self->obs[i].step, "y", self->obs[i].y));
    }
    return json_pack("{s:I, s:s, s:I, s:o, s:o, s:o}", "count", (json_int_t)self->count,
                     "rng", rng, "exploits", (json_int_t)self->exploits, "members", ms,
                     "pending", ps, "pb2", os);
}

static void s_clear(sched_pbt *self)
{
    for (size_t i = 0; i < self->nm; i++) {
        json_decref(self->m[i].params);
        free(self->m[i].ckpt);
    }
    for (size_t i = 0; i < self->nobs; i++)
        free(self->obs[i].x);
    self->nm = self->np = self->nobs = 0;
}

static int s_restore(sched_t *s, const json_t *state)
{
    sched_pbt *self = (sched_pbt *)s;
    json_int_t count, exploits;
    const char *rng;
    json_t *ms, *ps, *os;
    /* States saved before suggest() knew trial ids also hold "suggestions";
       their members already carry the matched numbers, so it is ignored. */
    if (json_unpack((json_t *)state, "{s:I, s:s, s:I, s:o, s:o, s:o}", "count", &count,
                    "rng", &rng, "exploits", &exploits, "members", &ms, "pending", &ps,
                    "pb2", &os) != 0 ||
        !json_is_array(ms) || !json_is_array(ps) || !json_is_array(os) || count < 0)
        return -1;
    unsigned long long r;
    if (sscanf(rng, "%llx", &r) != 1)
        return -1;
    s_clear(self);
    self->count = (long)count;
    self->exploits = (long)exploits;
    self->rng.s = r;
    size_t i;
    json_t *v;
    json_array_foreach(ms, i, v)
    {
        pbt_member *m = s_member(self, s_get_long(v, "id", -1));
        if (!m)
            return -1;
        m->num = s_get_long(v, "num", -1);
        json_t *p = json_object_get(v, "params");
        m->params = json_is_object(p) ? json_deep_copy(p) : NULL;
        m->value = sched_json_double(v, "value");
        m->step = s_get_long(v, "step", -1);
        m->ready_step = s_get_long(v, "ready_step", 0);
        m->ready_time = sched_json_double(v, "ready_time");
        m->ready_value = sched_json_double(v, "ready_value");
        const char *ck = json_string_value(json_object_get(v, "ckpt"));
        if (ck)
            s_set_ckpt(m, ck, s_get_long(v, "ckpt_step", -1));
        m->ended = json_is_true(json_object_get(v, "ended"));
        m->waiting = json_is_true(json_object_get(v, "waiting"));
        m->generation = s_get_long(v, "generation", 0);
    }
    json_array_foreach(ps, i, v)
    {
        pbt_pending *a = s_grow(self->pend, &self->capp, self->np, sizeof *self->pend);
        if (!a)
            return -1;
        self->pend = a;
        self->pend[self->np++] =
            (pbt_pending){s_get_long(v, "receiver", -1), s_get_long(v, "donor", -1),
                          sched_json_double(v, "asked")};
    }
    json_array_foreach(os, i, v)
    {
        json_t *x = json_object_get(v, "x");
        if (json_array_size(x) != s->spec->nparams)
            return -1;
        pbt_obs *a = s_grow(self->obs, &self->capo, self->nobs, sizeof *self->obs);
        double *xs = malloc(sizeof(double) * (s->spec->nparams ? s->spec->nparams : 1));
        if (!a || !xs) {
            free(xs);
            return -1;
        }
        self->obs = a;
        for (size_t j = 0; j < s->spec->nparams; j++)
            xs[j] = json_number_value(json_array_get(x, j));
        self->obs[self->nobs++] =
            (pbt_obs){xs, sched_json_double(v, "step"), sched_json_double(v, "y")};
    }
    return 0;
}

static void s_destroy(sched_t *s)
{
    sched_pbt *self = (sched_pbt *)s;
    s_clear(self);
    free(self->m);
    free(self->pend);
    free(self->obs);
    free(self);
}

static double s_load_timeout(const sched_t *s)
{
    return ((const sched_pbt *)s)->timeout_s;
}

static const sched_ops s_ops = {
    .name = "pbt",
    .suggest = s_suggest,
    .on_metric = s_on_metric,
    .on_complete = s_on_complete,
    .save = s_save,
    .restore = s_restore,
    .destroy = s_destroy,
    .on_checkpoint = s_on_checkpoint,
    .load_timeout = s_load_timeout,
};

/* ---- options ---------------------------------------------------------- */

sched_t *sched_pbt_new(const spec_t *spec, char *err, size_t errsize)
{
    static const char *const known[] = {
        "type",    "seed", "interval", "interval_s", "quantile",       "resample_p",
        "perturb", "pb2",  "kappa",    "window",     "load_timeout_s", NULL};
    const json_t *o = spec->sched_opts;
    const char *key = sched_opt_unknown(o, known);
    if (key) {
        snprintf(err, errsize, "scheduler.%s: unknown option for the pbt scheduler", key);
        return NULL;
    }
    double interval, interval_s, quantile, resample_p, kappa, window, timeout;
    if (sched_opt_num(o, "scheduler", "interval", 0, 1, 1e12, 0, &interval, err,
                      errsize) ||
        sched_opt_num(o, "scheduler", "interval_s", 0, 1e-3, 1e9, 0, &interval_s, err,
                      errsize) ||
        sched_opt_num(o, "scheduler", "quantile", 0.25, 1e-9, 0.5, 0, &quantile, err,
                      errsize) ||
        sched_opt_num(o, "scheduler", "resample_p", 0.25, 0, 1, 0, &resample_p, err,
                      errsize) ||
        sched_opt_num(o, "scheduler", "kappa", 2.0, 1e-9, 100, 0, &kappa, err, errsize) ||
        sched_opt_num(o, "scheduler", "window", 48, 4, 1000, 0, &window, err, errsize) ||
        sched_opt_num(o, "scheduler", "load_timeout_s", PBT_DEFAULT_LOAD_TIMEOUT_S, 0,
                      1e9, 0, &timeout, err, errsize))
        return NULL;
    json_t *iv = json_object_get(o, "interval");
    if (iv && !json_is_integer(iv)) {
        snprintf(err, errsize, "scheduler.interval: must be an integer number of steps");
        return NULL;
    }
    if ((interval > 0) == (interval_s > 0)) {
        snprintf(err, errsize,
                 "scheduler.interval: give exactly one of interval (steps) and "
                 "interval_s (seconds)");
        return NULL;
    }
    if (json_object_get(o, "window") && !json_is_integer(json_object_get(o, "window"))) {
        snprintf(err, errsize, "scheduler.window: must be an integer from 4 to 1000");
        return NULL;
    }
    double factors[2] = {0.8, 1.2};
    json_t *pf = json_object_get(o, "perturb");
    if (pf) {
        if (!json_is_array(pf) || json_array_size(pf) != 2 ||
            !json_is_number(json_array_get(pf, 0)) ||
            !json_is_number(json_array_get(pf, 1)) ||
            !(json_number_value(json_array_get(pf, 0)) > 0) ||
            !(json_number_value(json_array_get(pf, 0)) < 1) ||
            !(json_number_value(json_array_get(pf, 1)) > 1) ||
            !(json_number_value(json_array_get(pf, 1)) < 100)) {
            snprintf(err, errsize,
                     "scheduler.perturb: must be [down, up] with 0 < down < 1 < up");
            return NULL;
        }
        factors[0] = json_number_value(json_array_get(pf, 0));
        factors[1] = json_number_value(json_array_get(pf, 1));
    }
    json_t *pb = json_object_get(o, "pb2");
    if (pb && !json_is_boolean(pb)) {
        snprintf(err, errsize, "scheduler.pb2: must be true or false");
        return NULL;
    }
    sched_pbt *self = sched_alloc(sizeof *self, &s_ops, spec, err, errsize);
    if (!self)
        return NULL;
    self->interval = (long)interval;
    self->interval_s = interval_s;
    self->quantile = quantile;
    self->resample_p = resample_p;
    self->factors[0] = factors[0];
    self->factors[1] = factors[1];
    self->pb2 = json_is_true(pb);
    self->kappa = kappa;
    self->window = (int)window;
    self->timeout_s = timeout;
    sched_rng_seed(&self->rng, (unsigned long long)spec->seed, 0x7062744ULL /* "pbt" */);
    return &self->base;
}
