/*  cmd_importance.c - `jizhi study importance NAME`: how much each
    parameter matters to the objective, from the study's completed trials
    (schedulers/importance.h: Sobol indices of a GP fitted to them). Reads
    like `study show` (the database file, or a controller). Trials that
    failed, were stopped or early-stopped, or are still running are left
    out: their values are not final.
*/
#include "cli.h"

#include "../common/spec.h"
#include "../schedulers/importance.h"

#include <math.h>
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

int cli_study_importance(const cli_opts *o)
{
    const char *name = o->args[0];
    cli_src src;
    if (cli_src_open(o, &src) != CLI_OK)
        return CLI_FAIL;
    json_t *d = cli_src_read(&src, "study", name, 0, 0);
    cli_src_close(&src);
    if (!d)
        return CLI_FAIL;
    spec_error se;
    spec_t *spec = spec_parse(json_object_get(d, "spec"), 0, &se);
    if (!spec) {
        char buf[512];
        cli_error("study importance %s: its spec no longer parses: %s", name,
                  spec_strerror(&se, buf, sizeof buf));
        json_decref(d);
        return CLI_FAIL;
    }
    json_t *trials = json_object_get(d, "trials");
    size_t nt = json_array_size(trials);
    json_t **params = malloc(sizeof(json_t *) * (nt ? nt : 1));
    double *y = malloc(sizeof(double) * (nt ? nt : 1));
    int rc = CLI_FAIL, n = 0;
    imp_result r = {0};
    s_rank *rk = malloc(sizeof(s_rank) * (spec->nparams ? spec->nparams : 1));
    if (!params || !y || !rk) {
        cli_error("out of memory");
        goto done;
    }
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t)
    {
        json_t *v = json_object_get(t, "value");
        if (strcmp(json_string_value(json_object_get(t, "state")) ?: "", "completed") ||
            !json_is_number(v) || !isfinite(json_number_value(v)))
            continue;
        params[n] = json_object_get(t, "params");
        y[n++] = json_number_value(v);
    }
    char err[256];
    if (imp_compute(spec, params, y, n, 0, (unsigned long long)spec->seed, &r, err,
                    sizeof err) != 0) {
        cli_error("study importance %s: %s", name, err);
        goto done;
    }
    for (size_t k = 0; k < spec->nparams; k++)
        rk[k] = (s_rank){r.importance[k], (int)k};
    qsort(rk, spec->nparams, sizeof *rk, s_rank_cmp);
    if (o->json) {
        json_t *arr = json_array();
        for (size_t k = 0; k < spec->nparams; k++) {
            int p = rk[k].k;
            json_array_append_new(arr, json_pack("{s:s,s:f,s:f,s:f}", "name",
                                                 spec->params[p].name, "importance",
                                                 r.importance[p], "first", r.first[p],
                                                 "total", r.total[p]));
        }
        cli_print_json(json_pack("{s:s,s:s,s:i,s:o}", "study", name, "method", "sobol-gp",
                                 "trials", r.n_used, "params", arr));
    } else {
        printf("study %s: parameter importance from %d completed trials\n"
               "(first-order Sobol indices of a GP fitted to them, normalised to sum to "
               "1; TOTAL includes interactions)\n",
               name, r.n_used);
        int w = 5;
        for (size_t k = 0; k < spec->nparams; k++)
            w = (int)strlen(spec->params[k].name) > w ? (int)strlen(spec->params[k].name)
                                                      : w;
        printf("%-*s  IMPORTANCE  FIRST   TOTAL\n", w, "PARAM");
        for (size_t k = 0; k < spec->nparams; k++) {
            int p = rk[k].k;
            printf("%-*s  %10.3f  %6.3f  %6.3f\n", w, spec->params[p].name,
                   r.importance[p], r.first[p], r.total[p]);
        }
    }
    rc = CLI_OK;
done:
    imp_result_fini(&r);
    free(rk);
    free(params);
    free(y);
    spec_destroy(&spec);
    json_decref(d);
    return rc;
}
