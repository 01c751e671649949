/*  web_read.c - the GET handlers: JSON read from the store over the
    request's read-only connection (shapes in docs/WEB.md). Nothing here
    writes. */
#include "web_internal.h"

#include "../common/spec.h"
#include "../common/text.h"
#include "../common/wire.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The study's objective: metric name and whether larger is better. */
static void s_objective(const json_t *spec, const char **metric, int *maximize)
{
    json_t *o = json_object_get(spec, "objective");
    if (json_is_array(o))
        o = json_array_get(o, 0);
    const char *m = json_string_value(json_object_get(o, "metric"));
    const char *mode = json_string_value(json_object_get(o, "mode"));
    *metric = m ? m : "";
    *maximize = mode && !strcmp(mode, "max");
}

/* A study's counts for its summary, from store_trial_counts (an index's
   COUNT .. GROUP BY state, no row read). */
typedef struct {
    long n, completed, failed, stopped, pruned, running;
} s_tally;

/* A page of trials written as a JSON array straight into `out` (no JSON
   objects built: 1000 trials cost a few milliseconds). */
typedef struct {
    web_buf *out;
    long n; /* rows written */
} s_rows;

/* The default and largest page of GET .../trials and of /page's trials
   (docs/WEB.md). */
#define WEB_TRIALS_PAGE 1000
#define WEB_TRIALS_PAGE_MAX 10000

/* A double as JSON in its shortest exact form (null when not finite). */
static void s_num_full(web_buf *b, double x)
{
    if (!isfinite(x))
        web_buf_add(b, "null", 4);
    else if (x == (double)(long long)x && fabs(x) < 1e15)
        web_buf_long(b, (long)x);
    else {
        char num[TEXT_DOUBLE_MAX];
        web_buf_str(b, text_double(x, num));
    }
}

/* An objective value as wire_real writes it (common/wire.h): a reported
   NaN or infinity as "nan", "inf", "-inf", none as null. */
static void s_value_full(web_buf *b, double x)
{
    const char *name = wire_real_name(x);
    if (name)
        web_buf_jstr(b, name);
    else
        s_num_full(b, x); /* null for none */
}

static int s_row_json(void *arg, const store_trial_brief *t, const char *params)
{
    s_rows *y = arg;
    web_buf *b = y->out;
    web_buf_str(b, y->n++ ? ",{\"id\":" : "{\"id\":");
    web_buf_long(b, t->id);
    web_buf_str(b, ",\"number\":");
    web_buf_long(b, t->number);
    web_buf_str(b, ",\"state\":");
    web_buf_jstr(b, store_trial_state_name(t->state));
    web_buf_str(b, ",\"attempt\":");
    web_buf_long(b, t->attempt);
    web_buf_str(b, ",\"value\":");
    s_value_full(b, t->value);
    web_buf_str(b, ",\"last_value\":");
    s_value_full(b, t->last_value);
    web_buf_str(b, ",\"best_value\":");
    s_value_full(b, t->best_value);
    web_buf_str(b, ",\"last_step\":");
    if (t->last_step >= 0)
        web_buf_long(b, t->last_step);
    else
        web_buf_str(b, "null");
    web_buf_str(b, ",\"generation\":");
    web_buf_long(b, t->generation);
    web_buf_str(b, ",\"started\":");
    s_num_full(b, t->started);
    web_buf_str(b, ",\"ended\":");
    s_num_full(b, t->ended);
    web_buf_str(b, ",\"reason\":");
    web_buf_jstr(b, t->reason);
    web_buf_str(b, ",\"params\":");
    web_buf_str(b, params); /* JSON text made by SQLite's json_group_object */
    web_buf_str(b, "}");
    return 0;
}

/* The study's counts; 0 or -1. */
static int s_tally_run(store_t *s, const store_study *st, s_tally *y)
{
    long c[TRIAL_STATE_COUNT];
    memset(y, 0, sizeof *y);
    if (store_trial_counts(s, st->id, c) != 0)
        return -1;
    for (int i = 0; i < TRIAL_STATE_COUNT; i++)
        y->n += c[i];
    y->completed = c[TRIAL_COMPLETED];
    y->failed = c[TRIAL_FAILED];
    y->stopped = c[TRIAL_STOPPED];
    y->pruned = c[TRIAL_PRUNED];
    y->running = c[TRIAL_RUNNING] + c[TRIAL_STARTING] + c[TRIAL_PAUSED];
    return 0;
}

/* The page's query (limit, after, order, state; defaults in docs/WEB.md):
   0, or -1 with a 400 naming the parameter. */
static int s_page_query(web_req *r, store_trial_page *q)
{
    memset(q, 0, sizeof *q);
    q->state = -1;
    if (web__query_long(r, "limit", 1, WEB_TRIALS_PAGE_MAX, WEB_TRIALS_PAGE, &q->limit) ||
        web__query_long(r, "after", 0, 1L << 62, 0, &q->after))
        return -1;
    const char *order = web__query(r, "order");
    if (order && strcmp(order, "asc") && strcmp(order, "desc")) {
        web__error(r, 400, "bad_argument",
                   "order: expected \"asc\" or \"desc\", got \"%s\"", order);
        return -1;
    }
    q->desc = order && !strcmp(order, "desc");
    const char *state = web__query(r, "state");
    if (state) {
        store_trial_state ts;
        if (store_trial_state_parse(state, &ts) != 0) {
            web__error(r, 400, "bad_argument", "state: \"%s\" names no trial state",
                       state);
            return -1;
        }
        q->state = (int)ts;
    }
    return 0;
}

/* /page's trials: the first page in id order, only its limit chosen
   (trials_next then matches the ascending .../trials?after= pages that
   follow); after, order and state are refused. 0, or -1 with a 400 set. */
static int s_first_page_query(web_req *r, store_trial_page *q)
{
    static const char *const refused[] = {"after", "order", "state"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (web__query(r, refused[i])) {
            web__error(r, 400, "bad_argument",
                       "%s: /page reads the first page only (limit=N); page on with "
                       ".../trials?after=",
                       refused[i]);
            return -1;
        }
    memset(q, 0, sizeof *q);
    q->state = -1;
    return web__query_long(r, "limit", 1, WEB_TRIALS_PAGE_MAX, WEB_TRIALS_PAGE,
                           &q->limit);
}

/* Writes `"trials":[...],"next":ID|null` for page q into b; 0 or -1. */
static int s_page_json(store_t *s, long study_id, const store_trial_page *q, web_buf *b,
                       const char *next_key)
{
    s_rows y = {.out = b};
    long next = 0;
    web_buf_str(b, "\"trials\":[");
    if (store_trials_page(s, study_id, q, s_row_json, &y, &next) < 0)
        return -1;
    web_buf_printf(b, "],\"%s\":", next_key);
    if (next > 0)
        web_buf_long(b, next);
    else
        web_buf_str(b, "null");
    return 0;
}

/* A study's summary: name, state, objective, counts, progress, and its
   best (or Pareto set) by the one definition: store_study_best's, or
   taken from `answer` (a row of store_study_list, which holds it) when
   not NULL. */
static json_t *s_summary_of(store_t *s, const store_study *st, const s_tally *y,
                            const json_t *answer)
{
    const char *metric;
    int maximize;
    s_objective(st->spec, &metric, &maximize);
    long done = y->completed + y->failed + y->stopped + y->pruned;
    /* the budget as `jizhi study list` shows it: `study extend` adds to it */
    json_t *budget = json_object_get(json_object_get(st->spec, "budget"), "trials");
    long total = json_is_integer(budget)
                     ? (long)json_integer_value(budget) + st->extra_trials
                     : y->n;
    json_t *out = json_pack(
        "{s:I, s:s, s:s, s:{s:s, s:s}, s:f, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, "
        "s:I}",
        "id", (json_int_t)st->id, "name", st->name, "state",
        store_study_state_name(st->state), "objective", "metric", metric, "mode",
        maximize ? "max" : "min", "created", st->created, "finished",
        st->finished > 0 ? json_real(st->finished) : json_null(), "trials",
        (json_int_t)y->n, "total", (json_int_t)total, "done", (json_int_t)done,
        "completed", (json_int_t)y->completed, "failed", (json_int_t)y->failed, "stopped",
        (json_int_t)y->stopped, "running", (json_int_t)y->running, "progress",
        total > 0 ? (double)done / (double)total : 0.0, "pruned", (json_int_t)y->pruned);
    if (out && answer) {
        json_object_set(out, "best",
                        json_object_get(answer, "best") ? json_object_get(answer, "best")
                                                        : json_null());
        if (json_object_get(answer, "pareto"))
            json_object_set(out, "pareto", json_object_get(answer, "pareto"));
    } else if (out && store_study_best(s, st, out) != 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static long s_int(const json_t *row, const char *key)
{
    return (long)json_integer_value(json_object_get(row, key));
}

static json_t *s_summary(store_t *s, const store_study *st, const json_t *answer)
{
    s_tally y;
    if (s_tally_run(s, st, &y) != 0)
        return NULL;
    return s_summary_of(s, st, &y, answer);
}

int web__get_studies(web_req *r)
{
    store_t *s = web__db(r);
    if (!s)
        return r->status;
    json_t *list = store_study_list(s);
    if (!list)
        return web__error(r, 500, "store", "listing studies: %s", store_errmsg(s));
    json_t *out = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(list, i, row)
    {
        store_study st;
        const char *name = json_string_value(json_object_get(row, "name"));
        if (store_study_get(s, name, &st) != 1)
            continue;
        /* the list counted each study's trials already: no second pass */
        s_tally y = {.n = s_int(row, "trials"),
                     .completed = s_int(row, "completed"),
                     .failed = s_int(row, "failed"),
                     .stopped = s_int(row, "stopped"),
                     .pruned = s_int(row, "pruned"),
                     .running = s_int(row, "running")};
        json_t *sum = s_summary_of(s, &st, &y, row);
        if (sum)
            json_array_append_new(out, sum);
        store_study_fini(&st);
    }
    json_decref(list);
    r->json = json_pack("{s:o}", "studies", out);
    return 200;
}

int web__get_study(web_req *r)
{
    store_study st;
    if (web__study(r, &st) != 1)
        return r->status;
    json_t *sum = s_summary(r->db, &st, NULL);
    if (sum)
        json_object_set_new(sum, "spec", web__spec_for(r, st.spec));
    store_study_fini(&st);
    if (!sum)
        return web__error(r, 500, "store", "reading trials: %s", store_errmsg(r->db));
    r->json = sum;
    return 200;
}

int web__get_trials(web_req *r)
{
    store_trial_page q;
    if (s_page_query(r, &q) != 0)
        return 400;
    store_study st;
    if (web__study(r, &st) != 1)
        return r->status;
    long c[TRIAL_STATE_COUNT];
    long id = st.id;
    store_study_fini(&st);
    web_buf *b = &r->text;
    web_buf_str(b, "{");
    /* one snapshot: the counts and the page agree */
    int bad = store_read_begin(r->db) != 0 || store_trial_counts(r->db, id, c) != 0 ||
              s_page_json(r->db, id, &q, b, "next") != 0;
    if (bad) {
        web_buf_fini(b);
        web__error(r, 500, "store", "reading trials: %s", store_errmsg(r->db));
    }
    store_read_end(r->db);
    if (bad)
        return 500;
    long total = 0;
    web_buf_str(b, ",\"counts\":{");
    for (int i = 0; i < TRIAL_STATE_COUNT; i++) {
        total += q.state < 0 || q.state == i ? c[i] : 0;
        web_buf_printf(b, i ? ",\"%s\":%ld" : "\"%s\":%ld",
                       store_trial_state_name((store_trial_state)i), c[i]);
    }
    web_buf_printf(b, "},\"total\":%ld}", total);
    return 200;
}

int web__get_pareto(web_req *r)
{
    store_study st;
    if (web__study(r, &st) != 1)
        return r->status;
    spec_error serr;
    spec_t *spec = spec_parse(st.spec, 0, &serr);
    store_study_fini(&st);
    if (!spec)
        return web__error(r, 500, "store", "the stored spec does not parse: %s",
                          serr.text);
    if (web__heavy_enter(r) != 0) { /* the study's whole detail is read */
        spec_destroy(&spec);
        return r->status;
    }
    json_t *d = store_study_detail(r->db, r->arg);
    web__heavy_leave(r);
    if (!d) {
        spec_destroy(&spec);
        return web__error(r, 500, "store", "reading trials: %s", store_errmsg(r->db));
    }
    json_t *trials = json_object_get(d, "trials");
    spec_mark_trials(spec, trials);
    json_t *objs = json_array(), *front = json_array();
    for (size_t k = 0; k < spec->nobjectives; k++)
        json_array_append_new(
            objs, json_pack("{s:s, s:s}", "metric", spec->objectives[k].metric, "mode",
                            spec->objectives[k].maximize ? "max" : "min"));
    json_t *all = json_array(); /* every completed trial: the page's scatter */
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t)
    {
        const char *mark = spec->nobjectives > 1 ? "pareto" : "best";
        int on = json_is_true(json_object_get(t, mark));
        const char *state = json_string_value(json_object_get(t, "state"));
        if (!on && (!state || strcmp(state, "completed")))
            continue;
        json_t *vals = json_object();
        for (size_t k = 0; k < spec->nobjectives; k++) {
            json_t *v = k ? json_object_get(json_object_get(t, "metrics"),
                                            spec->objectives[k].metric)
                          : json_object_get(t, "value");
            json_object_set(vals, spec->objectives[k].metric, v ? v : json_null());
        }
        json_t *feasible = json_object_get(t, "feasible");
        json_array_append_new(
            all,
            json_pack("{s:O, s:O, s:O, s:b, s:b}", "id", json_object_get(t, "id"),
                      "number", json_object_get(t, "number"), "values", vals, "feasible",
                      !feasible || json_is_true(feasible), "pareto", on));
        if (on)
            json_array_append_new(
                front, json_pack("{s:O, s:O, s:O, s:O}", "id", json_object_get(t, "id"),
                                 "number", json_object_get(t, "number"), "values", vals,
                                 "params", json_object_get(t, "params")));
        json_decref(vals);
    }
    r->json = json_pack("{s:o, s:O, s:o, s:o}", "objectives", objs, "constraints",
                        json_object_get(spec->json, "constraints")
                            ? json_object_get(spec->json, "constraints")
                            : json_null(),
                        "pareto", front, "trials", all);
    json_decref(d);
    spec_destroy(&spec);
    return 200;
}

int web__get_events(web_req *r)
{
    long after, limit;
    if (web__query_long(r, "after", 0, 1L << 62, 0, &after) ||
        web__query_long(r, "limit", 1, 100000, 1000, &limit))
        return 400;
    store_study st;
    if (web__study(r, &st) != 1)
        return r->status;
    json_t *ev = store_events_since(r->db, st.id, after, limit);
    store_study_fini(&st);
    if (!ev)
        return web__error(r, 500, "store", "reading events: %s", store_errmsg(r->db));
    r->json = json_pack("{s:o}", "events", ev);
    return 200;
}

/* Appends the curves object of `metric` to r->text. 0 or an error status. */
static int s_curves(web_req *r, long study_id, const char *metric, long points)
{
    char err[300];
    const char *band = web__query(r, "band");
    if (web_curves_json(r->w->curves, r->db, study_id, metric, (int)points,
                        band && !strcmp(band, "1"), &r->text, err, sizeof err))
        return web__error(r, 500, "store", "%s", err);
    return 0;
}

int web__get_curves(web_req *r)
{
    long points;
    if (web__query_long(r, "points", 2, WEB_CURVE_BUCKETS, 100, &points))
        return 400;
    store_study st;
    if (web__study(r, &st) != 1)
        return r->status;
    const char *metric = web__query(r, "metric");
    int maximize;
    const char *objective;
    s_objective(st.spec, &objective, &maximize);
    char m[128];
    snprintf(m, sizeof m, "%s", metric && *metric ? metric : objective);
    long id = st.id;
    store_study_fini(&st);
    int rc = s_curves(r, id, m, points);
    return rc ? rc : 200;
}

int web__get_page(web_req *r)
{
    long points = 0, nevents;
    const char *pq = web__query(r, "points");
    int autopoints = pq && !strcmp(pq, "auto");
    store_trial_page q;
    if ((!autopoints &&
         web__query_long(r, "points", 2, WEB_CURVE_BUCKETS, 100, &points)) ||
        web__query_long(r, "events", 0, 100000, 500, &nevents) ||
        s_first_page_query(r, &q))
        return 400;
    store_study st;
    if (web__study(r, &st) != 1)
        return r->status;
    store_t *s = r->db;
    /* one snapshot for the marks, summary, page, events and curves: they
       agree, and the stream starts where they end (store_read_end below) */
    if (store_read_begin(s) != 0) {
        store_study_fini(&st);
        return web__error(r, 500, "store", "reading the study: %s", store_errmsg(s));
    }
    long mark_metric = 0, mark_event = 0;
    store_marks(s, &mark_metric, &mark_event);
    const char *objective;
    int maximize;
    s_objective(st.spec, &objective, &maximize);
    const char *metric = web__query(r, "metric");
    char m[128];
    snprintf(m, sizeof m, "%s", metric && *metric ? metric : objective);
    /* the first page of the trials (the page follows trials_next for the
       rest: GET .../trials?after=), so that the answer stays small */
    web_buf trials;
    web_buf_init(&trials);
    s_tally y;
    int ok = s_tally_run(s, &st, &y) == 0 &&
             s_page_json(s, st.id, &q, &trials, "trials_next") == 0;
    json_t *head = ok ? s_summary_of(s, &st, &y, NULL) : NULL;
    json_t *events =
        store_events_since(s, st.id, mark_event > nevents ? mark_event - nevents : 0, 0);
    if (head)
        json_object_set_new(head, "spec", web__spec_for(r, st.spec));
    long id = st.id;
    store_study_fini(&st);
    if (!head || !events) {
        json_decref(head);
        json_decref(events);
        web_buf_fini(&trials);
        store_read_end(s);
        return web__error(r, 500, "store", "reading the study: %s", store_errmsg(s));
    }
    /* the big parts (trials, curves) are written straight into the text */
    web_buf *b = &r->text;
    char *text = text_json_dumps(head, JSON_COMPACT);
    web_buf_str(b, "{\"study\":");
    web_buf_str(b, text);
    free(text);
    web_buf_str(b, ",");
    web_buf_add(b, trials.data, trials.len);
    web_buf_fini(&trials);
    text = text_json_dumps(events, JSON_COMPACT);
    web_buf_str(b, ",\"events\":");
    web_buf_str(b, text);
    free(text);
    if (autopoints) { /* about 50 000 points in all: enough to draw, quick to send */
        points = y.n > 0 ? 50000 / y.n : WEB_CURVE_BUCKETS;
        points = points < 20                  ? 20
                 : points > WEB_CURVE_BUCKETS ? WEB_CURVE_BUCKETS
                                              : points;
    }
    json_decref(head);
    json_decref(events);
    web_buf_printf(b, ",\"curves_points\":%ld", points);
    web_buf_printf(b,
                   ",\"marks\":{\"metric\":%ld,\"event\":%ld},\"metrics\":", mark_metric,
                   mark_event);
    char err[300];
    int rc = web_curves_names(r->w->curves, s, id, b, err, sizeof err)
                 ? web__error(r, 500, "store", "%s", err)
                 : 0;
    if (!rc) {
        web_buf_str(b, ",\"curves\":");
        rc = s_curves(r, id, m, points);
    }
    store_read_end(s);
    if (rc)
        return rc;
    web_buf_str(b, "}");
    return 200;
}

/* The trial named by r->arg: 1 (filled), or 0 with the error set. */
static int s_trial_arg(web_req *r, store_trial *t)
{
    char *end;
    long id = strtol(r->arg, &end, 10);
    if (*end || id <= 0) {
        web__error(r, 400, "bad_argument", "\"%s\" is not a trial id", r->arg);
        return 0;
    }
    store_t *s = web__db(r);
    if (!s)
        return 0;
    int found = store_trial_get(s, id, t);
    if (found < 0)
        web__error(r, 500, "store", "reading trial %ld: %s", id, store_errmsg(s));
    else if (!found)
        web__error(r, 404, "unknown_trial", "no trial %ld", id);
    return found == 1;
}

int web__get_trial(web_req *r)
{
    store_trial t;
    if (!s_trial_arg(r, &t))
        return r->status;
    json_t *j = store_trial_json(&t, r->db);
    json_object_del(j, "stdout");
    json_object_del(j, "stderr");
    json_object_del(j, "pid");
    json_object_set_new(j, "lineage", store_trial_lineage(r->db, t.id));
    json_object_set_new(j, "metric_names", store_trial_metric_names(r->db, t.id));
    store_study st;
    if (store_study_get_id(r->db, t.study_id, &st) == 1) {
        json_object_set_new(j, "study", json_string(st.name));
        const char *objective;
        int maximize;
        s_objective(st.spec, &objective, &maximize);
        json_object_set_new(j, "objective",
                            json_pack("{s:s, s:s}", "metric", objective, "mode",
                                      maximize ? "max" : "min"));
        json_object_set(j, "space", json_object_get(st.spec, "space"));
        store_study_fini(&st);
    }
    long mark_metric = 0, mark_event = 0;
    store_marks(r->db, &mark_metric, &mark_event);
    json_object_set_new(j, "marks",
                        json_pack("{s:I, s:I}", "metric", (json_int_t)mark_metric,
                                  "event", (json_int_t)mark_event));
    store_trial_fini(&t);
    r->json = j;
    return 200;
}

/* Points of one series, averaged down to at most `max` by equal counts,
   in two passes over the store: the first counts (and finds the first
   time), the second folds each group of points as it comes, so memory
   follows `max`, not how many points the trial reported. */
typedef struct {
    long n;       /* pass 1: points; pass 2: points folded */
    double first; /* time of the first point */
    long group;   /* points per output point */
    long at, k;   /* points in the open group, those with a value */
    double sum, last_s, last_t;
    double *s, *y, *t; /* output points */
    long ng, cap;
} s_series;

static int s_count(void *arg, const store_metric_row *row)
{
    s_series *se = arg;
    if (!se->n++)
        se->first = row->time;
    return 0;
}

static void s_flush(s_series *se)
{
    if (!se->at)
        return;
    if (se->ng == se->cap) {
        se->cap = se->cap ? se->cap * 2 : 256;
        se->s = realloc(se->s, (size_t)se->cap * sizeof(double));
        se->y = realloc(se->y, (size_t)se->cap * sizeof(double));
        se->t = realloc(se->t, (size_t)se->cap * sizeof(double));
        if (!se->s || !se->y || !se->t)
            abort(); /* the server's policy (web_curves.h) */
    }
    se->s[se->ng] = se->last_s;
    se->y[se->ng] = se->k ? se->sum / (double)se->k : NAN;
    se->t[se->ng] = se->last_t;
    se->ng++;
    se->at = se->k = 0;
    se->sum = 0;
}

static int s_fold(void *arg, const store_metric_row *row)
{
    s_series *se = arg;
    if (!isnan(row->value)) {
        se->sum += row->value;
        se->k++;
    }
    se->last_s = (double)row->step;
    se->last_t = row->time;
    if (++se->at == se->group)
        s_flush(se);
    return 0;
}

static void s_series_json(const s_series *se, double t0, web_buf *b)
{
    const char *keys[] = {"{\"s\":[", "],\"y\":[", "],\"t\":["};
    const double *col[] = {se->s, se->y, se->t};
    for (int f = 0; f < 3; f++) {
        web_buf_str(b, keys[f]);
        for (long i = 0; i < se->ng; i++) {
            if (i)
                web_buf_add(b, ",", 1);
            web_buf_num(b, f < 2 ? col[f][i] : round((col[f][i] - t0) * 10) / 10);
        }
    }
    web_buf_str(b, "]}");
}

int web__get_trial_metrics(web_req *r)
{
    long points;
    if (web__query_long(r, "points", 2, 100000, 1000, &points))
        return 400;
    store_trial t;
    if (!s_trial_arg(r, &t))
        return r->status;
    if (web__heavy_enter(r) != 0) { /* every point of the trial is read */
        store_trial_fini(&t);
        return r->status;
    }
    const char *only = web__query(r, "name");
    json_t *names = only ? json_pack("[s]", only) : store_trial_metric_names(r->db, t.id);
    web_buf *b = &r->text;
    web_buf_printf(b, "{\"trial\":%ld,\"started\":", t.id);
    web_buf_num(b, t.started);
    web_buf_str(b, ",\"metrics\":{");
    size_t i;
    json_t *nm;
    int status = 200;
    json_array_foreach(names, i, nm)
    {
        const char *name = json_string_value(nm);
        s_series se = {0};
        int bad = store_trial_points(r->db, t.id, name, s_count, &se) < 0;
        se.group = se.n <= points ? 1 : (se.n + points - 1) / points;
        double t0 = t.started > 0 ? t.started : (se.n ? se.first : 0);
        se.n = 0;
        bad = bad || store_trial_points(r->db, t.id, name, s_fold, &se) < 0;
        s_flush(&se);
        if (bad) {
            status =
                web__error(r, 500, "store", "reading metrics: %s", store_errmsg(r->db));
        } else {
            if (i)
                web_buf_add(b, ",", 1);
            web_buf_jstr(b, name);
            web_buf_add(b, ":", 1);
            s_series_json(&se, t0, b);
        }
        free(se.s);
        free(se.y);
        free(se.t);
        if (bad)
            break;
    }
    web__heavy_leave(r);
    web_buf_str(b, "}}");
    json_decref(names);
    store_trial_fini(&t);
    if (status != 200)
        web_buf_fini(b);
    return status;
}

int web__get_whoami(web_req *r)
{
    if (web__authenticate(r) != 0)
        return r->status;
    r->json =
        json_pack("{s:s, s:s}", "user", r->who.user, "role", ident_role_str(r->who.role));
    return 200;
}
