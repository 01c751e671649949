/*  cmd_alerts.c - `jizhi alerts [STUDY]`: the alerts that fired (docs/cli.md),
    read from the database file, or from the controller with --controller
    like the other reads. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char s_usage[] =
    "usage: jizhi alerts [STUDY] [--json] [--db FILE] [--controller ENDPOINT]\n"
    "Lists the alerts that fired (every study's, or STUDY's), oldest first: when,\n"
    "the study and trial, the rule, what it is on, and what happened. Rules are\n"
    "set in the spec (\"alerts\") or by `jizhi controller --alerts FILE`.\n";

int cmd_alerts(int argc, char **argv)
{
    cli_opts o;
    int rc = cli_opts_parse(argc, argv, 0, s_usage, &o);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (o.nargs > 1)
        return cli_usage_error(
            s_usage, "alerts: expected at most one STUDY, got %d arguments", o.nargs);
    cli_src src;
    if (cli_src_open(&o, &src) != CLI_OK)
        return CLI_FAIL;
    json_t *al = cli_src_read(&src, "alerts", o.nargs ? o.args[0] : NULL, 0, 0);
    cli_src_close(&src);
    if (!al)
        return CLI_FAIL;
    if (o.json) {
        cli_print_json(al);
        return CLI_OK;
    }
    printf("%-24s %-20s %-9s %-28s %-18s %s\n", "TIME", "STUDY", "TRIAL", "RULE", "ON",
           "WHAT");
    size_t i;
    json_t *a;
    json_array_foreach(al, i, a)
    {
        char tm[TEXT_TIME_MAX], tb[32] = "-";
        text_time(json_number_value(json_object_get(a, "time")), tm);
        json_t *trial = json_object_get(a, "trial");
        if (json_is_integer(trial))
            snprintf(tb, sizeof tb, "%" JSON_INTEGER_FORMAT, json_integer_value(trial));
        json_t *d = json_object_get(a, "detail");
        const char *text = json_string_value(json_object_get(d, "text"));
        printf("%-24s %-20s %-9s %-28s %-18s %s\n", tm,
               json_string_value(json_object_get(a, "study")), tb,
               json_string_value(json_object_get(a, "rule")),
               json_string_value(json_object_get(a, "kind")), text ? text : "");
    }
    if (json_array_size(al) == 0)
        printf("(no alerts)\n");
    json_decref(al);
    return CLI_OK;
}
