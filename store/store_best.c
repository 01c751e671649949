/*  store_best.c - a study's answer read from the store: its best trial
    (one objective) or its Pareto set (several), judged by the one
    definition of "best" (common/spec.h: spec_best_counts, through
    spec_mark_trials; docs/design.md, "Best trial"). study list and show,
    jizhi run's summary, the controller's read and the web API all take
    their best from here, so they agree with each other and with watch.
*/
#include "store.h"

#include "../common/spec.h"
#include "../common/wire.h"

#include <stdlib.h>
#include <string.h>

/* The trials of a study as spec_mark_trials reads them; metrics only
   where the judgement needs them (constraints, several objectives). */
static json_t *s_marked(store_t *s, const spec_t *spec, const store_trial *rows, long n)
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

/* {trial, number, value, params} of a trial; with several objectives
   also values: {metric: value}. */
static json_t *s_entry(const spec_t *spec, const store_trial *t, const json_t *marked)
{
    json_t *e = json_pack("{s:I, s:I, s:o, s:O}", "trial", (json_int_t)t->id, "number",
                          (json_int_t)t->number, "value", wire_real(t->value), "params",
                          t->params ? t->params : json_null());
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
    store_trial *rows = NULL;
    long n = store_trials_load(s, st->id, &rows);
    if (n < 0) {
        spec_destroy(&spec);
        return -1;
    }
    json_t *marked = s_marked(s, spec, rows, n);
    json_t *best = json_null(), *front = spec->nobjectives > 1 ? json_array() : NULL;
    for (long i = 0; i < n; i++) {
        json_t *m = json_array_get(marked, (size_t)i);
        if (spec->nobjectives == 1 && json_is_true(json_object_get(m, "best"))) {
            json_decref(best);
            best = s_entry(spec, &rows[i], m);
        }
        if (front && json_is_true(json_object_get(m, "pareto")))
            json_array_append_new(front, s_entry(spec, &rows[i], m));
    }
    json_object_set_new(out, "best", best);
    if (front)
        json_object_set_new(out, "pareto", front);
    json_decref(marked);
    store_trials_free(rows, n);
    spec_destroy(&spec);
    return 0;
}
