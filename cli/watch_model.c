/*  watch_model.c - the model of `jizhi watch` (watch_internal.h): the
    study row, its trials and only the metric points stored since the
    previous refresh, read from the store (a read-only connection) or
    from the controller (--controller); per trial the last value of every
    metric and a downsampled series of the objective; the display order,
    the marks (best, Pareto set, infeasible) and the progress counts.
*/
#include "watch_internal.h"

#include "../common/util.h"
#include "../common/wire.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

w_trial *cli__watch_trial(w_view *v, long id)
{
    if (v->cache >= 0 && v->cache < v->ntrials && v->trials[v->cache].id == id)
        return &v->trials[v->cache];
    for (long i = 0; i < v->ntrials; i++)
        if (v->trials[i].id == id) {
            v->cache = i;
            return &v->trials[i];
        }
    if (v->ntrials == v->cap) {
        long cap = v->cap ? v->cap * 2 : 64;
        w_trial *nt = realloc(v->trials, (size_t)cap * sizeof *nt);
        if (!nt)
            return NULL;
        v->trials = nt;
        v->cap = cap;
    }
    w_trial *t = &v->trials[v->ntrials];
    memset(t, 0, sizeof *t);
    t->id = id;
    t->state = t->shown_state = -1;
    t->m_step = -1;
    t->stride = 1;
    t->value = wire_none(); /* a reported NaN is a value: "nan" */
    for (int k = 0; k <= W_MAX_NAMES; k++)
        t->mval[k] = wire_none();
    v->cache = v->ntrials++;
    return t;
}

/* Index of a metric name, adding it; -1 when the table is full. */
int cli__watch_name_index(w_view *v, const char *name)
{
    if (!strcmp(name, v->metric))
        return W_MAX_NAMES;
    for (int i = 0; i < v->nnames; i++)
        if (!strcmp(v->names[i], name))
            return i;
    if (v->nnames == W_MAX_NAMES)
        return -1;
    snprintf(v->names[v->nnames], sizeof v->names[0], "%s", name);
    return v->nnames++;
}

/* Appends to the objective series: each slot holds the latest of `stride`
   points; when full, pairs of slots merge (the later wins) and the stride
   doubles, so the series always spans the whole run. */
static void s_series_add(w_trial *t, double x)
{
    if (t->slot_fill == 0) {
        if (t->nseries == W_SERIES_CAP) {
            for (int i = 0; i < W_SERIES_CAP / 2; i++)
                t->series[i] = t->series[2 * i + 1];
            t->nseries = W_SERIES_CAP / 2;
            t->stride *= 2;
        }
        t->nseries++;
    }
    t->series[t->nseries - 1] = (float)x;
    if (++t->slot_fill >= t->stride)
        t->slot_fill = 0;
}

static int s_on_point(void *arg, long trial_id, long attempt, long step, const char *name,
                      double value)
{
    w_view *v = arg;
    w_trial *t = cli__watch_trial(v, trial_id);
    if (!t || attempt < t->m_attempt)
        return 0;
    if (attempt > t->m_attempt) { /* a retry starts its curves afresh */
        t->m_attempt = attempt;
        t->m_step = -1;
        t->nseries = t->slot_fill = 0;
        t->stride = 1;
        for (int k = 0; k <= W_MAX_NAMES; k++)
            t->mval[k] = wire_none();
    }
    if (step > t->m_step)
        t->m_step = step;
    int k = cli__watch_name_index(v, name);
    if (k < 0)
        return 0;
    t->mval[k] = value;
    if (k == W_MAX_NAMES)
        s_series_add(t, value);
    return 0;
}

static const w_view *s_sort_view; /* qsort's context (the UI is one thread) */

/* Display order: by id; or by objective, best first (trials without one
   last); or by state (running first), then id. */
static int s_cmp_trials(const void *a, const void *b)
{
    const w_view *v = s_sort_view;
    const w_trial *x = &v->trials[*(const long *)a], *y = &v->trials[*(const long *)b];
    if (v->sort == W_BY_OBJECTIVE) {
        double fx = isfinite(x->value) ? x->value : x->mval[W_MAX_NAMES];
        double fy = isfinite(y->value) ? y->value : y->mval[W_MAX_NAMES];
        if (isfinite(fx) != isfinite(fy))
            return isfinite(fx) ? -1 : 1;
        if (isfinite(fx) && fx != fy)
            return (v->maximize ? fx > fy : fx < fy) ? -1 : 1;
    } else if (v->sort == W_BY_STATE) {
        int rx = x->state != TRIAL_RUNNING, ry = y->state != TRIAL_RUNNING;
        int c = rx != ry ? rx - ry
                         : strcmp(cli__watch_state_name(x), cli__watch_state_name(y));
        if (c)
            return c;
    }
    return x->id < y->id ? -1 : x->id > y->id;
}

void cli__watch_sort(w_view *v)
{
    s_sort_view = v;
    qsort(v->order, (size_t)v->norder, sizeof *v->order, s_cmp_trials);
}

const char *cli__watch_state_name(const w_trial *t)
{
    return t->state >= 0 ? store_trial_state_name((store_trial_state)t->state) : "?";
}

const char *cli__watch_study_state_name(const w_view *v)
{
    return v->study_state >= 0 ? store_study_state_name((store_study_state)v->study_state)
                               : "?";
}

const char *cli__watch_sort_name(const w_view *v)
{
    static const char *const names[W_SORTS] = {"id", "objective", "state"};
    return (unsigned)v->sort < W_SORTS ? names[v->sort] : "?";
}

/* The trial fields shown, from a store_trial_json object (remote). */
static void s_take_row(w_view *v, const json_t *r)
{
    w_trial *t = cli__watch_trial(v, (long)json_integer_value(json_object_get(r, "id")));
    if (!t)
        return;
    t->have_row = 1;
    t->number = (long)json_integer_value(json_object_get(r, "number"));
    t->attempt = (long)json_integer_value(json_object_get(r, "attempt"));
    t->last_step = (long)json_integer_value(json_object_get(r, "last_step"));
    store_trial_state st;
    t->state =
        store_trial_state_parse(json_string_value(json_object_get(r, "state")), &st) == 0
            ? (int)st
            : -1;
    json_decref(t->params);
    t->params = json_incref(json_object_get(r, "params"));
    json_t *val = json_object_get(r, "value");
    if (wire_to_value(val, &t->value) != 0)
        t->value = wire_none();
    t->started = json_number_value(json_object_get(r, "started"));
    t->ended = json_number_value(json_object_get(r, "ended"));
}

/* Appends text to t's lineage ("; " between) and sets its tag. */
static void s_lineage_add(w_trial *t, const char *text, const char *tag)
{
    size_t len = strlen(t->lineage);
    snprintf(t->lineage + len, sizeof t->lineage - len, "%s%s", len ? "; " : "", text);
    snprintf(t->tag, sizeof t->tag, "%s", tag);
}

/* Each trial's guarded changes and forks in words, oldest first, from the
   study's interventions ivs (borrowed: store_interv_study's array, read
   from the store or, with --controller, in the controller's
   metrics_since answer; NULL leaves the lineage as it was): "guard
   lr=0.4 reverted", "forked at step 40 into 5 6: best 6", a sibling's
   "fork of trial 1 at step 40 (lr=0.1): kept". */
static void s_lineage(w_view *v, const json_t *ivs)
{
    if (!json_is_array(ivs))
        return;
    for (long i = 0; i < v->ntrials; i++)
        v->trials[i].lineage[0] = v->trials[i].tag[0] = 0;
    size_t i;
    json_t *iv;
    json_array_foreach(ivs, i, iv)
    {
        long id = (long)json_integer_value(json_object_get(iv, "trial_id"));
        store_iv_kind kind;
        int st;
        if (store_iv_kind_parse(json_string_value(json_object_get(iv, "kind")), &kind) ||
            store_iv_state_parse(kind, json_string_value(json_object_get(iv, "state")),
                                 &st))
            continue;
        const char *state = store_iv_state_name(kind, st);
        json_t *data = json_object_get(iv, "data");
        char text[256], tag[32], vals[128];
        w_trial *t = cli__watch_trial(v, id);
        if (!t)
            continue;
        if (kind == IV_GUARD) {
            cli__watch_params_text(json_object_get(data, "values"), vals, sizeof vals);
            snprintf(text, sizeof text, "guard %s %s", vals, state);
            snprintf(tag, sizeof tag, "guard %s", state);
            s_lineage_add(t, text, tag);
            continue;
        }
        json_t *sibs = json_object_get(data, "siblings");
        json_t *dec = json_object_get(data, "decision");
        long step = (long)json_integer_value(json_object_get(data, "fork_step"));
        char ids[96] = "";
        size_t k, len = 0;
        json_t *x;
        json_array_foreach(sibs, k, x)
        {
            len += (size_t)snprintf(ids + len, len < sizeof ids ? sizeof ids - len : 0,
                                    "%s%" JSON_INTEGER_FORMAT, k ? " " : "",
                                    json_integer_value(x));
            if (len >= sizeof ids)
                break;
        }
        json_t *best = json_object_get(dec, "best");
        if (st == FORK_DECIDED && json_is_integer(best))
            snprintf(text, sizeof text,
                     "forked at step %ld into %s: best %" JSON_INTEGER_FORMAT, step, ids,
                     json_integer_value(best));
        else if (st == FORK_RUNNING)
            snprintf(text, sizeof text, "forked at step %ld into %s: running", step, ids);
        else
            snprintf(text, sizeof text, "fork %s", state);
        snprintf(tag, sizeof tag, "fork %s", state);
        s_lineage_add(t, text, tag);
        json_array_foreach(sibs, k, x)
        {
            w_trial *sib = cli__watch_trial(v, (long)json_integer_value(x));
            if (!sib)
                continue;
            const char *how = "running";
            if (dec) {
                how = "kept";
                size_t j;
                json_t *y;
                json_array_foreach(json_object_get(dec, "stopped"), j,
                                   y) if (json_equal(x, y)) how = "stopped";
            }
            cli__watch_params_text(json_array_get(json_object_get(data, "values"), k),
                                   vals, sizeof vals);
            snprintf(text, sizeof text, "fork of trial %ld at step %ld (%s): %s", id,
                     step, vals, how);
            snprintf(tag, sizeof tag, "<%ld %s", id, how);
            s_lineage_add(sib, text, tag);
        }
    }
}

/* cli__watch_load through the controller (--controller): the same reads, paged. */
static int s_load_remote(w_view *v, char *err, size_t errsize)
{
    for (int chunk = 0; chunk < 50; chunk++) {
        json_t *d = cli_src_read(&v->src, "metrics_since", v->name, 0, v->after);
        if (!d) {
            snprintf(err, errsize, "cannot read study %.100s from %.200s", v->name,
                     v->src.ep);
            return -1;
        }
        json_t *pts = json_object_get(d, "points");
        size_t i;
        json_t *p;
        json_array_foreach(pts, i, p)
        {
            double x;
            if (wire_to_value(json_array_get(p, 4), &x) != 0)
                x = wire_none();
            s_on_point(v, (long)json_integer_value(json_array_get(p, 0)),
                       (long)json_integer_value(json_array_get(p, 1)),
                       (long)json_integer_value(json_array_get(p, 2)),
                       json_string_value(json_array_get(p, 3)), x);
        }
        v->after = (long)json_integer_value(json_object_get(d, "after"));
        store_study_state st;
        v->study_state = store_study_state_parse(
                             json_string_value(json_object_get(d, "state")), &st) == 0
                             ? (int)st
                             : -1;
        const char *warning = json_string_value(json_object_get(d, "warning"));
        snprintf(v->warning, sizeof v->warning, "%s", warning ? warning : "");
        v->created = json_number_value(json_object_get(d, "created"));
        v->finished = json_number_value(json_object_get(d, "finished"));
        json_array_foreach(json_object_get(d, "trials"), i, p) s_take_row(v, p);
        s_lineage(v, json_object_get(d, "interventions"));
        size_t npts = json_array_size(pts);
        json_decref(d);
        if (npts < 100000)
            break;
    }
    return 0;
}

static int s_order(w_view *v, char *err, size_t errsize);

/* Marks the Pareto set / best feasible trial and the infeasible ones from
   the last metric values this view holds (spec_mark_trials). */
static void s_marks(w_view *v)
{
    if (!v->spec)
        return;
    json_t *arr = json_array();
    for (long i = 0; i < v->norder; i++) {
        w_trial *t = &v->trials[v->order[i]];
        json_t *m = json_object();
        for (int k = 0; k < v->nnames; k++)
            if (isfinite(t->mval[k]))
                json_object_set_new(m, v->names[k], json_real(t->mval[k]));
        json_array_append_new(arr, json_pack("{s:s, s:o, s:o}", "state",
                                             cli__watch_state_name(t), "value",
                                             wire_real(t->value), "metrics", m));
    }
    spec_mark_trials(v->spec, arr);
    const char *mark = v->spec->nobjectives > 1 ? "pareto" : "best";
    for (long i = 0; i < v->norder; i++) {
        w_trial *t = &v->trials[v->order[i]];
        json_t *r = json_array_get(arr, (size_t)i);
        t->mark = json_is_true(json_object_get(r, mark));
        t->infeasible = json_is_false(json_object_get(r, "feasible"));
    }
    json_decref(arr);
}

int cli__watch_load(w_view *v, char *err, size_t errsize)
{
    if (!v->s) {
        int rc = s_load_remote(v, err, errsize) || s_order(v, err, errsize);
        s_marks(v);
        return rc;
    }
    store_study st;
    if (store_study_get_id(v->s, v->study_id, &st) != 1) {
        snprintf(err, errsize, "cannot read study %s: %s", v->name, store_errmsg(v->s));
        return -1;
    }
    v->study_state = (int)st.state;
    v->created = st.created;
    v->finished = st.finished;
    store_study_fini(&st);
    store_event_last_reason(v->s, v->study_id, "warning", v->warning, sizeof v->warning);
    /* metrics first: a trial is inserted before any of its points, and a
       point for a trial not seen yet creates its entry */
    for (int chunk = 0; chunk < 50; chunk++) {
        long n = store_study_metrics_since(v->s, v->study_id, &v->after, 100000,
                                           s_on_point, v);
        if (n < 0) {
            snprintf(err, errsize, "cannot read metrics: %s", store_errmsg(v->s));
            return -1;
        }
        if (n < 100000)
            break;
    }
    store_trial *rows;
    long n = store_trials_load(v->s, v->study_id, &rows);
    if (n < 0) {
        snprintf(err, errsize, "cannot read trials: %s", store_errmsg(v->s));
        return -1;
    }
    for (long i = 0; i < n; i++) {
        w_trial *t = cli__watch_trial(v, rows[i].id);
        if (!t)
            break;
        t->have_row = 1;
        t->number = rows[i].number;
        t->attempt = rows[i].attempt;
        t->last_step = rows[i].last_step;
        t->state = (int)rows[i].state;
        json_decref(t->params);
        t->params = json_incref(rows[i].params);
        t->value = rows[i].value;
        t->started = rows[i].started;
        t->ended = rows[i].ended;
    }
    store_trials_free(rows, n);
    json_t *ivs = store_interv_study(v->s, v->study_id);
    s_lineage(v, ivs);
    json_decref(ivs);
    int rc = s_order(v, err, errsize);
    s_marks(v);
    return rc;
}

/* The display order of the trials with rows (v->sort). */
static int s_order(w_view *v, char *err, size_t errsize)
{
    long *order =
        realloc(v->order, (size_t)(v->ntrials ? v->ntrials : 1) * sizeof *order);
    if (!order) {
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    v->order = order;
    v->norder = 0;
    for (long i = 0; i < v->ntrials; i++)
        if (v->trials[i].have_row)
            v->order[v->norder++] = i;
    cli__watch_sort(v);
    return 0;
}

void cli__watch_progress(const w_view *v, w_progress *p)
{
    memset(p, 0, sizeof *p);
    for (long i = 0; i < v->norder; i++) {
        const w_trial *t = &v->trials[v->order[i]];
        if (t->state >= 0 && store_trial_state_ended((store_trial_state)t->state))
            p->done++;
        if (t->state == TRIAL_RUNNING || t->state == TRIAL_STARTING)
            p->running++;
        else if (t->state == TRIAL_PENDING)
            p->pending++;
        if (t->state == TRIAL_FAILED)
            p->failed++;
        /* the best is the one s_marks found (spec_mark_trials, the one
           definition); several objectives have a Pareto set instead */
        if (t->mark && v->spec && v->spec->nobjectives == 1)
            p->best = t;
    }
    p->total = v->budget > v->norder ? v->budget : v->norder;
    double end =
        v->finished > 0 && v->study_state != STUDY_RUNNING ? v->finished : util_wall();
    p->elapsed = v->created > 0 ? end - v->created : 0;
}
