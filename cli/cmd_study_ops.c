/*  cmd_study_ops.c - `jizhi study delete NAME` and `jizhi study copy NAME
    NEW` (dispatched by cmd_study.c; cli.h).

    Both ask the controller (messages study_delete and study_copy,
    docs/PROTOCOL.md), which allows them to the study's owner or an admin.
    delete asks for a confirmation on a terminal, or needs --yes; it
    removes the study from the database and names the log and checkpoint
    folders it leaves. copy starts a new study from the old one's spec
    under a new name, without its trials (docs/cli.md says why).
*/
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Asks "delete study NAME ...? [y/N]" on the terminal: 1 for yes. */
static int s_confirm(const cli_opts *o, const char *name)
{
    cli_src src;
    long ntrials = -1;
    const char *state = "?";
    char statebuf[32] = "";
    if (cli_src_open(o, &src) == CLI_OK) {
        json_t *d = cli_src_read(&src, "study", name, 0, 0);
        cli_src_close(&src);
        if (!d)
            return 0; /* unknown study: said why */
        ntrials = (long)json_array_size(json_object_get(d, "trials"));
        snprintf(statebuf, sizeof statebuf, "%s",
                 json_string_value(json_object_get(d, "state")));
        state = statebuf;
        json_decref(d);
    }
    if (ntrials >= 0)
        fprintf(stderr,
                "delete study %s (%s) and its %ld trial%s, their metrics and events from "
                "%s? Logs and checkpoints stay on disk. [y/N] ",
                name, state, ntrials, ntrials == 1 ? "" : "s", o->db);
    else
        fprintf(stderr, "delete study %s from %s? [y/N] ", name, o->db);
    char line[32];
    if (!fgets(line, sizeof line, stdin))
        return 0;
    return !strcmp(line, "y\n") || !strcmp(line, "yes\n") || !strcmp(line, "Y\n");
}

int cli_study_delete(const cli_opts *o)
{
    if (o->nargs != 1) {
        cli_error("study delete: expected NAME");
        return CLI_USAGE;
    }
    const char *name = o->args[0];
    if (!o->yes && !isatty(0)) {
        cli_error("study delete %s: stdin is not a terminal to confirm on; pass --yes to "
                  "delete it",
                  name);
        return CLI_USAGE;
    }
    char buf[512];
    const char *ep = cli_controller_of(o, buf, sizeof buf);
    if (!ep)
        return CLI_FAIL;
    if (!o->yes && !s_confirm(o, name)) {
        fprintf(stderr, "study %s not deleted\n", name);
        return CLI_FAIL;
    }
    json_t *r = cli_request(
        ep, json_pack("{s:s, s:s}", "type", "study_delete", "study", name), 10000);
    if (!r)
        return CLI_FAIL;
    printf("study %s deleted from %s: %" JSON_INTEGER_FORMAT
           " trials, %" JSON_INTEGER_FORMAT " metric points, %" JSON_INTEGER_FORMAT
           " events\n",
           name, o->db, json_integer_value(json_object_get(r, "trials")),
           json_integer_value(json_object_get(r, "metrics")),
           json_integer_value(json_object_get(r, "events")));
    /* files the database does not hold: left, named */
    const char *ckpt = json_string_value(json_object_get(r, "checkpoints"));
    if (ckpt)
        printf("left on disk: checkpoints under %s%s\n", ckpt,
               access(ckpt, F_OK) == 0 ? "" : " (none there on this machine)");
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(r, "logs"), i, d)
        printf("left on disk: trial logs in %s (on the dispatcher's machine)\n",
               json_string_value(d));
    json_decref(r);
    return CLI_OK;
}

int cli_study_copy(const cli_opts *o)
{
    if (o->nargs != 2) {
        cli_error("study copy: expected NAME NEW");
        return CLI_USAGE;
    }
    json_t *r = cli_request_of(o,
                               json_pack("{s:s, s:s, s:s}", "type", "study_copy", "study",
                                         o->args[0], "name", o->args[1]),
                               10000);
    if (!r)
        return CLI_FAIL;
    printf("study %s submitted: the spec of %s, %" JSON_INTEGER_FORMAT
           " trials to run (the trials of %s stay with it)\n",
           o->args[1], o->args[0], json_integer_value(json_object_get(r, "trials")),
           o->args[0]);
    const char *warn = json_string_value(json_object_get(r, "warning"));
    if (warn)
        fprintf(stderr, "jizhi: warning: study %s waits: %s\n", o->args[1], warn);
    json_decref(r);
    return CLI_OK;
}
