/*  store_best.c - a study's answer read from the store: its best trial
    (one objective) or its Pareto set (several), judged by the one
    definition of "best" (common/spec.h: spec_best_counts, through
    spec_mark_trials; docs/design.md, "Best trial"). study list and show,
    jizhi run's summary, the controller's read and the web API all take
    their best from here, so they agree with each other and with watch.
*/
#include "store.h"
#include "store_internal.h"

#include "../common/spec.h"
#include "../common/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the judgement reads of a trial (a store_trial is ~3 KB of
   fixed-size text fields: 10 000 of them were most of the cost). */
typedef struct {
    long id, number, generation;
    store_trial_state state;
    double value;
} s_judged;

/* The trials of a study as spec_mark_trials reads them; metrics only
   where the judgement needs them (constraints, several objectives). */
static json_t *s_marked(store_t *s, const spec_t *spec, const s_judged *rows, long n)
{
    json_t *arr = json_array();
    int need_metrics = spec->nobjectives > 1 || spec->nconstraints;
    for (long i = 0; i < n; i++) {
        json_t *m = need_metrics && rows[i].state == TRIAL_COMPLETED
                        ? store_metrics_last(s, rows[i].id)
                        : NULL;
        json_array_append_new(arr, json_pack("{s:s, s:o, s:o}", "state",
                                             store_trial_state_name(rows[i].state),
                                             "value", wire_real(rows[i].value), "metrics",
                                             m ? m : json_object()));
    }
    spec_mark_trials(spec, arr);
    return arr;
}

/* What the judgement reads of a study's trials (id, number, state,
   value, generation), in number order, without their params: only the
   best's or the Pareto set's are read (s_entry). Reading every trial's
   params, one query each, made GET /api/studies cost about a
   millisecond per trial. `completed_only`: the completed trials alone
   (an index range of trials_by_study_state). The count, or -1 (nothing
   owned in *out). */
static long s_judged_rows(store_t *s, long study_id, int completed_only, s_judged **out)
{
    enum { C_ID, C_NUMBER, C_STATE, C_VALUE, C_GENERATION };
    sqlite3_stmt *st = store__prepare(
        s, completed_only ? "SELECT id, number, state, value, generation FROM trials "
                            "WHERE study_id=? AND state='completed' ORDER BY number"
                          : "SELECT id, number, state, value, generation "
                            "FROM trials WHERE study_id=? ORDER BY number");
    *out = NULL;
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    long n = 0, cap = 0;
    int rc = SQLITE_ROW;
    while (rc == SQLITE_ROW && (rc = store__step(s, st)) == SQLITE_ROW) {
        if (store__reserve(out, &cap, n, sizeof **out)) {
            rc = SQLITE_NOMEM;
            break;
        }
        s_judged *t = &(*out)[n];
        t->id = (long)sqlite3_column_int64(st, C_ID);
        t->number = (long)sqlite3_column_int64(st, C_NUMBER);
        if (store__col_trial_state(s, st, C_STATE, t->id, &t->state) != 0) {
            rc = SQLITE_ERROR;
            break;
        }
        t->value = store__col_value(st, C_VALUE);
        t->generation = (long)sqlite3_column_int64(st, C_GENERATION);
        n++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(*out);
        *out = NULL;
        return -1;
    }
    return n;
}

/* {trial, number, value, params} of a trial; with several objectives
   also values: {metric: value}. Its params are read here. */
static json_t *s_entry(store_t *s, const spec_t *spec, const s_judged *t,
                       const json_t *marked)
{
    json_t *e = json_pack("{s:I, s:I, s:o, s:o}", "trial", (json_int_t)t->id, "number",
                          (json_int_t)t->number, "value", wire_real(t->value), "params",
                          store__params_of(s, t->id, t->generation));
    if (spec->nobjectives > 1) {
        json_t *vals = json_object();
        const json_t *metrics = json_object_get(marked, "metrics");
        for (size_t k = 0; k < spec->nobjectives; k++) {
            const json_t *x = k ? json_object_get(metrics, spec->objectives[k].metric)
                                : json_object_get(marked, "value");
            json_object_set(vals, spec->objectives[k].metric,
                            x ? (json_t *)x : json_null());
        }
        json_object_set_new(e, "values", vals);
    }
    return e;
}

int store_study_best(store_t *s, const store_study *st, json_t *out)
{
    spec_error err;
    spec_t *spec = spec_parse(st->spec, 0, &err);
    if (!spec) { /* a spec this build no longer reads: no answer, not an error */
        json_object_set_new(out, "best", json_null());
        return 0;
    }
    s_judged *rows = NULL;
    /* one objective and no constraint: the best is the first completed
       trial (in number order) with the best objective value, judged by
       the same functions as spec_mark_trials (spec_best_counts,
       spec_better) without a JSON object per
       trial (GET /api/studies: about 20 ms at 10 000 trials, issue 43) */
    int simple = spec->nobjectives == 1 && !spec->nconstraints;
    long n = s_judged_rows(s, st->id, simple, &rows);
    if (n < 0) {
        spec_destroy(&spec);
        return -1;
    }
    if (simple) {
        long best = -1; /* ties go to the lower number: only a better one moves it */
        for (long i = 0; i < n; i++)
            if (spec_best_counts("completed", rows[i].value, 1) &&
                (best < 0 || spec_better(spec, rows[i].value, rows[best].value)))
                best = i;
        json_object_set_new(
            out, "best", best >= 0 ? s_entry(s, spec, &rows[best], NULL) : json_null());
        free(rows);
        spec_destroy(&spec);
        return 0;
    }
    json_t *marked = s_marked(s, spec, rows, n);
    json_t *best = json_null(), *front = spec->nobjectives > 1 ? json_array() : NULL;
    for (long i = 0; i < n; i++) {
        json_t *m = json_array_get(marked, (size_t)i);
        if (spec->nobjectives == 1 && json_is_true(json_object_get(m, "best"))) {
            json_decref(best);
            best = s_entry(s, spec, &rows[i], m);
        }
        if (front && json_is_true(json_object_get(m, "pareto")))
            json_array_append_new(front, s_entry(s, spec, &rows[i], m));
    }
    json_object_set_new(out, "best", best);
    if (front)
        json_object_set_new(out, "pareto", front);
    json_decref(marked);
    free(rows);
    spec_destroy(&spec);
    return 0;
}
