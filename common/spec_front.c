/*  spec_front.c - which trials of a study are feasible, on its Pareto
    front, and best (spec.h, spec_mark_trials): the one judgement study
    show, export and the web API share.
*/
#include "pareto.h"
#include "spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int spec_best_counts(const char *state, double value, int feasible)
{
    return state && !strcmp(state, "completed") && isfinite(value) && feasible;
}

size_t spec_mark_trials(const spec_t *s, json_t *trials)
{
    size_t n = json_array_size(trials), m = s->nobjectives, count = 0;
    double *F = malloc(sizeof(double) * (n ? n : 1) * m);
    unsigned char *ok = calloc(n ? n : 1, 1), *front = calloc(n ? n : 1, 1);
    if (!F || !ok || !front) {
        free(F);
        free(ok);
        free(front);
        return 0;
    }
    long best = -1;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(trials, i);
        const char *state = json_string_value(json_object_get(t, "state"));
        const json_t *metrics = json_object_get(t, "metrics");
        const json_t *val = json_object_get(t, "value");
        int completed = state && !strcmp(state, "completed") && json_is_number(val);
        int feasible = 1;
        if (s->nconstraints) {
            feasible = completed && spec_violation(s, metrics) == 0;
            if (completed)
                json_object_set_new(t, "feasible", json_boolean(feasible));
        }
        ok[i] = completed && spec_best_counts(state, json_number_value(val), feasible) &&
                spec_objective_values(s, json_number_value(val), metrics, F + i * m) == 0;
        if (ok[i] && (best < 0 || F[i * m] < F[(size_t)best * m]))
            best = (long)i;
    }
    if (m > 1) {
        count = pareto_front(F, n, m, ok, front);
        for (size_t i = 0; i < n; i++)
            if (ok[i])
                json_object_set_new(json_array_get(trials, i), "pareto",
                                    json_boolean(front[i]));
    } else if (best >= 0) {
        count = 1;
    }
    if (best >= 0 && (m == 1 || s->nconstraints))
        json_object_set_new(json_array_get(trials, (size_t)best), "best", json_true());
    free(F);
    free(ok);
    free(front);
    return count;
}
