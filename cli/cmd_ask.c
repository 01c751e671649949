/*  cmd_ask.c - `jizhi trial ask STUDY` and `jizhi trial tell ID ...`:
    ask-and-tell from a shell (or any language that can run a command),
    through the controller's trial_ask and trial_tell (docs/PROTOCOL.md).
    The Python package's Study.ask/tell run these same commands.
*/
#include "cli.h"

#include "../common/client.h"
#include "../common/wire.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cli_ask_only_refused(const spec_t *spec, const char *path)
{
    if (!spec->ask_only)
        return 0;
    cli_error("%s: trial: missing: `jizhi run` starts trials with trial.command; a spec "
              "without it is an ask-and-tell study (`jizhi study submit`, then `jizhi "
              "trial ask`/`tell`, or Python's jizhi.create_study: docs/python.md)",
              path);
    return 1;
}

int cli_trial_ask(const cli_opts *o)
{
    if (o->nargs != 1) {
        cli_error("trial ask: expected STUDY");
        return CLI_USAGE;
    }
    char buf[512];
    const char *ep = cli_controller_of(o, buf, sizeof buf);
    if (!ep)
        return CLI_FAIL;
    /* the scheduler may not be ready (a model still fitting): ask again
       until --timeout */
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    json_t *r = NULL;
    for (;;) {
        char err[1200];
        json_t *msg = json_pack("{s:s, s:s}", "type", "trial_ask", "study", o->args[0]);
        r = client_call(ep, msg, (int)(o->timeout * 1000) + 5000, err, sizeof err);
        if (!r) {
            cli_error("%s", err);
            return CLI_FAIL;
        }
        if (!strcmp(wire_type(r), "ok"))
            break;
        const char *code = json_string_value(json_object_get(r, "code"));
        const char *text = json_string_value(json_object_get(r, "message"));
        clock_gettime(CLOCK_MONOTONIC, &now);
        double waited =
            (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
        if (!code || strcmp(code, "try_again") || waited > o->timeout) {
            cli_error("%s", text ? text : "the controller refused the request");
            json_decref(r);
            return CLI_FAIL;
        }
        json_decref(r);
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (o->json) {
        json_t *out = json_object();
        static const char *const keys[] = {"trial", "number",   "study",         "params",
                                           "token", "endpoint", "checkpoint_dir"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            json_object_set(out, keys[i], json_object_get(r, keys[i]));
        cli_print_json(out);
    } else {
        char *p =
            text_json_dumps(json_object_get(r, "params"), JSON_COMPACT | JSON_SORT_KEYS);
        printf("%" JSON_INTEGER_FORMAT " %s\n",
               json_integer_value(json_object_get(r, "trial")), p ? p : "{}");
        free(p);
    }
    json_decref(r);
    return CLI_OK;
}

/* A told value: a number, or nan/inf/-inf. 0 or -1. */
static int s_number(const char *text, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(text, &end);
    return *text && !*end && errno != ERANGE ? 0 : -1;
}

int cli_trial_tell(const cli_opts *o)
{
    if (o->nargs < 2) {
        cli_error("trial tell: expected ID and VALUE... (or `failed [MESSAGE]`, `pruned "
                  "[VALUE...] [MESSAGE]`)");
        return CLI_USAGE;
    }
    char *end;
    errno = 0;
    long id = strtol(o->args[0], &end, 10);
    if (errno || *end || id <= 0) {
        cli_error("expected a trial id (a positive integer), got \"%s\"", o->args[0]);
        return CLI_USAGE;
    }
    json_t *msg = json_pack("{s:s, s:I}", "type", "trial_tell", "trial", (json_int_t)id);
    int first = 1;
    const char *state = "completed";
    if (!strcmp(o->args[1], "failed") || !strcmp(o->args[1], "pruned")) {
        state = o->args[1];
        first = 2;
    }
    json_object_set_new(msg, "state", json_string(state));
    if (!strcmp(state, "failed")) {
        if (o->nargs > 3) {
            cli_error("trial tell ID failed: expected at most one MESSAGE (quote it)");
            json_decref(msg);
            return CLI_USAGE;
        }
        if (o->nargs == 3)
            json_object_set_new(msg, "message", json_string(o->args[2]));
    } else if (o->nargs > first) {
        int nvals = o->nargs;
        double x;
        /* pruned: a last argument that is not a number says why */
        if (!strcmp(state, "pruned") && s_number(o->args[nvals - 1], &x) != 0)
            json_object_set_new(msg, "message", json_string(o->args[--nvals]));
        json_t *vals = json_array();
        for (int i = first; i < nvals; i++) {
            if (s_number(o->args[i], &x) != 0) {
                cli_error("trial tell: \"%s\" is not a number (VALUE: the objective, one "
                          "per objective; or `failed [MESSAGE]`, `pruned [VALUE...] "
                          "[MESSAGE]`)",
                          o->args[i]);
                json_decref(vals);
                json_decref(msg);
                return CLI_USAGE;
            }
            json_array_append_new(vals, wire_real(x));
        }
        if (json_array_size(vals))
            json_object_set_new(msg, "values", vals);
        else
            json_decref(vals);
    }
    json_t *r = cli_request_of(o, msg, 10000);
    if (!r)
        return CLI_FAIL;
    if (o->json) {
        json_object_del(r, "type");
        json_object_del(r, "req");
        cli_print_json(r);
        return CLI_OK;
    }
    char v[64];
    cli_format_value(json_object_get(r, "value"), v, sizeof v);
    printf("trial %ld: %s%s%s\n", id, json_string_value(json_object_get(r, "state")),
           json_is_null(json_object_get(r, "value")) ? "" : ", value ",
           json_is_null(json_object_get(r, "value")) ? "" : v);
    json_decref(r);
    return CLI_OK;
}
