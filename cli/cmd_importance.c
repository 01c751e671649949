/*  cmd_importance.c - `jizhi study importance NAME`: how much each
    parameter matters to the objective, from the study's completed trials
    (schedulers/importance.h: Sobol indices of a GP fitted to them, or,
    over the model's caps, the rank correlation, with a line saying why).
    It runs in this process, never in the controller: the controller only
    answers the `read` of the study. Reads like `study show` (the
    database file, or a controller). Trials that
    failed, were stopped or early-stopped, or are still running are left
    out: their values are not final.
*/
#include "cli.h"

#include "../schedulers/importance.h"

#include <string.h>

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
    char err[512];
    json_t *imp = imp_study(d, err, sizeof err);
    json_decref(d);
    if (!imp) {
        cli_error("study importance %s: %s", name, err);
        return CLI_FAIL;
    }
    json_t *params = json_object_get(imp, "params");
    if (o->json) {
        json_object_set_new(imp, "study", json_string(name));
        cli_print_json(imp);
        return CLI_OK;
    }
    long long used = json_integer_value(json_object_get(imp, "trials"));
    long long done = json_integer_value(json_object_get(imp, "completed"));
    const char *note = json_string_value(json_object_get(imp, "note"));
    int model = !note; /* sobol-gp; else the rank correlation, with why */
    printf("study %s: parameter importance from %lld completed trials", name, used);
    if (done > used)
        printf(" (an evenly spaced %lld of %lld)", used, done);
    if (model)
        printf("\n(first-order Sobol indices of a GP fitted to them, normalised to sum "
               "to 1; TOTAL includes interactions)\n");
    else
        printf("\n(%s)\n", note);
    int w = 5;
    size_t i;
    json_t *p;
    json_array_foreach(params, i, p)
    {
        int len = (int)strlen(json_string_value(json_object_get(p, "name")));
        w = len > w ? len : w;
    }
    printf(model ? "%-*s  IMPORTANCE  FIRST   TOTAL\n" : "%-*s  |RANK CORR|\n", w,
           "PARAM");
    json_array_foreach(params, i, p)
    {
        const char *pname = json_string_value(json_object_get(p, "name"));
        double v = json_real_value(json_object_get(p, "importance"));
        if (model)
            printf("%-*s  %10.3f  %6.3f  %6.3f\n", w, pname, v,
                   json_real_value(json_object_get(p, "first")),
                   json_real_value(json_object_get(p, "total")));
        else
            printf("%-*s  %11.3f\n", w, pname, v);
    }
    json_decref(imp);
    return CLI_OK;
}
