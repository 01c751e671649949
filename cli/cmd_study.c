/*  cmd_study.c - `jizhi study submit|list|show|stop|resume|enqueue|extend|export|events`
    (and `importance`, in cmd_importance.c; `delete` and `copy`, in
    cmd_study_ops.c).

    list/show/export/events read the database file (they work with no
    controller running); submit/stop/resume/enqueue/extend ask the
    controller.
*/
#include "cli.h"

#include "../common/spec.h"
#include "../common/wire.h"
#include "../store/store_export.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char s_usage[] =
    "usage: jizhi study submit SPEC.json [--priority high|normal|low]\n"
    "           submit to the running controller (--priority overrides the spec's)\n"
    "       jizhi study list [--json]\n"
    "       jizhi study show NAME [--json]\n"
    "       jizhi study stop NAME | resume NAME\n"
    "       jizhi study delete NAME [--yes]          a stopped or finished study, from\n"
    "           the database (logs and checkpoints stay); asks unless --yes\n"
    "       jizhi study copy NAME NEW                a new study with NAME's spec\n"
    "       jizhi study enqueue NAME PARAM=VALUE...  run this configuration next\n"
    "       jizhi study extend NAME --trials N       add N trials (a finished study "
    "runs\n"
    "           again)\n"
    "       jizhi study export NAME [--format csv|json|curves] [--all] [--output FILE]\n"
    "           csv: a row per trial: params as now (param_X) and, where one changed\n"
    "           live, as sampled (sampled_X), and last metrics; curves: every metric\n"
    "           point (trial,attempt,step,metric,value,time); --all keeps the\n"
    "           schedulers' internal metrics (grad_sqnorm_*, batch_small/big)\n"
    "       jizhi study events NAME [--json]\n"
    "       jizhi study importance NAME [--json]\n"
    "           how much each parameter matters, from the completed trials\n"
    "Common options: --db FILE, --controller ENDPOINT.\n";

static int s_need_args(const cli_opts *o, int n, const char *what)
{
    if (o->nargs != n)
        return cli_usage_error(s_usage, "study %s", what);
    return 0;
}

/* Says why a study or trial that a resume continued waits (the reply's
   `waiting`: the queue's words), if it does. */
static void s_say_waiting(const json_t *r, const char *what)
{
    const char *why = json_string_value(json_object_get(r, "waiting"));
    if (why)
        printf("%s waits: %s (`jizhi queue` shows the queue)\n", what, why);
}

static int s_controller_cmd(const cli_opts *o, json_t *msg)
{
    char buf[512];
    const char *ep = cli_controller(o->controller, o->db, buf, sizeof buf);
    if (!ep) {
        const char *type = json_string_value(json_object_get(msg, "type"));
        if (type && !strcmp(type, "study_resume"))
            cli_error(
                "no controller serves %s: `jizhi run SPEC.json --db %s` continues a "
                "stopped study by itself; or start `jizhi controller --db %s`, or "
                "pass --controller ENDPOINT",
                o->db, o->db, o->db);
        else
            cli_controller_of(o, buf, sizeof buf); /* says none is known */
        json_decref(msg);
        return CLI_FAIL;
    }
    const char *type = json_string_value(json_object_get(msg, "type"));
    int resume = type && !strcmp(type, "study_resume");
    char what[200];
    snprintf(what, sizeof what, "study %s",
             json_string_value(json_object_get(msg, "study")));
    json_t *r = cli_request(ep, msg, 10000);
    if (!r)
        return CLI_FAIL;
    printf("%s %s\n", what, resume ? "resumed" : "stopped");
    if (resume)
        s_say_waiting(r, what);
    json_decref(r);
    return CLI_OK;
}

static int s_submit(const cli_opts *o)
{
    char buf[512];
    spec_t *spec = cli_spec_load(o->args[0], buf, sizeof buf);
    if (!spec) {
        cli_error("%s: %s", o->args[0], buf);
        return CLI_FAIL;
    }
    if (o->priority) /* --priority overrides the spec's */
        json_object_set_new(spec->json, "priority", json_string(o->priority));
    const char *ep = cli_controller_of(o, buf, sizeof buf);
    if (!ep) {
        spec_destroy(&spec);
        return CLI_FAIL;
    }
    json_t *r = cli_request(
        ep, json_pack("{s:s, s:O}", "type", "submit", "spec", spec->json), 10000);
    int rc = CLI_FAIL;
    if (r) {
        printf("study %s %s\n", spec->name,
               json_is_true(json_object_get(r, "finished"))  ? "has already finished"
               : json_is_true(json_object_get(r, "resumed")) ? "continues"
                                                             : "submitted");
        const char *warn = json_string_value(json_object_get(r, "warning"));
        if (warn) /* stored and waiting: say why it may never start */
            fprintf(stderr, "jizhi: warning: study %s waits: %s\n", spec->name, warn);
        char what[200];
        snprintf(what, sizeof what, "study %s", spec->name);
        s_say_waiting(r, what);
        json_decref(r);
        rc = CLI_OK;
    }
    spec_destroy(&spec);
    return rc;
}

/* A study's answer in a few words (store_study_best's "best" or
   "pareto"): "0.93 (trial 7)", "Pareto set: 3 trials (4 9 12)", "-". */
static void s_best_text(const json_t *e, char *buf, size_t size)
{
    const json_t *best = json_object_get(e, "best"),
                 *front = json_object_get(e, "pareto");
    snprintf(buf, size, "-");
    if (json_is_object(best)) {
        char v[64];
        cli_format_value(json_object_get(best, "value"), v, sizeof v);
        snprintf(buf, size, "%s (trial %" JSON_INTEGER_FORMAT ")", v,
                 json_integer_value(json_object_get(best, "trial")));
    } else if (json_array_size(front)) {
        size_t n = json_array_size(front);
        int len = snprintf(buf, size, "Pareto set: %zu trial%s (", n, n == 1 ? "" : "s");
        size_t i;
        const json_t *p;
        json_array_foreach(front, i, p)
        {
            if (len < 0 || (size_t)len + 24 >= size) { /* room for " ...)" */
                len += snprintf(buf + len, size - (size_t)len, " ...");
                break;
            }
            len +=
                snprintf(buf + len, size - (size_t)len, "%s%" JSON_INTEGER_FORMAT,
                         i ? " " : "", json_integer_value(json_object_get(p, "trial")));
        }
        if (len >= 0 && (size_t)len + 1 < size)
            snprintf(buf + len, size - (size_t)len, ")");
    }
}

/* The best trial's line under study show's header: value, trial (the
   global id that `trial` commands take) and params. */
static void s_print_best(const json_t *d, const char *metric)
{
    const json_t *best = json_object_get(d, "best");
    if (json_object_get(d, "pareto"))
        return; /* several objectives: the Pareto set under the table */
    if (!json_is_object(best)) {
        printf("best: none yet (no completed trial with a finite %s)\n", metric);
        return;
    }
    char v[64];
    cli_format_value(json_object_get(best, "value"), v, sizeof v);
    char *p =
        text_json_dumps(json_object_get(best, "params"), JSON_COMPACT | JSON_SORT_KEYS);
    printf("best: trial %" JSON_INTEGER_FORMAT " %s=%s params %s\n",
           json_integer_value(json_object_get(best, "trial")), metric, v, p ? p : "{}");
    free(p);
}

static int s_list(const cli_opts *o)
{
    cli_src src;
    if (cli_src_open(o, &src) != CLI_OK)
        return CLI_FAIL;
    json_t *list = cli_src_read(&src, "studies", NULL, 0, 0);
    cli_src_close(&src);
    if (!list)
        return CLI_FAIL;
    if (o->json) {
        cli_print_json(list);
        return CLI_OK;
    }
    printf("%-24s %-9s %7s %9s %6s %6s %7s  %s\n", "NAME", "STATE", "TRIALS", "COMPLETED",
           "PRUNED", "FAILED", "RUNNING", "BEST");
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        char best[128];
        s_best_text(e, best, sizeof best);
        printf("%-24s %-9s %3" JSON_INTEGER_FORMAT "/%-3" JSON_INTEGER_FORMAT
               " %9" JSON_INTEGER_FORMAT " %6" JSON_INTEGER_FORMAT
               " %6" JSON_INTEGER_FORMAT " %7" JSON_INTEGER_FORMAT "  %s\n",
               json_string_value(json_object_get(e, "name")),
               json_string_value(json_object_get(e, "state")),
               json_integer_value(json_object_get(e, "trials")),
               json_integer_value(json_object_get(e, "budget")),
               json_integer_value(json_object_get(e, "completed")),
               json_integer_value(json_object_get(e, "pruned")),
               json_integer_value(json_object_get(e, "failed")),
               json_integer_value(json_object_get(e, "running")), best);
    }
    json_decref(list);
    return CLI_OK;
}

/* The study `name` as store_study_detail gives it, from the database or
   the controller; NULL after printing why. */
static json_t *s_detail(const cli_opts *o, const char *name)
{
    cli_src src;
    if (cli_src_open(o, &src) != CLI_OK)
        return NULL;
    json_t *d = cli_src_read(&src, "study", name, 0, 0);
    cli_src_close(&src);
    return d;
}

/* Marks feasible / Pareto / best trials in d's trials (spec_mark_trials)
   for a study with several objectives or constraints. Returns the parsed
   spec when it did (caller destroys), else NULL. */
static spec_t *s_mark(json_t *d)
{
    return store_export_mark(d);
}

/* The lines under the trials table: the Pareto set and the best feasible
   trial. */
static void s_print_front(const spec_t *spec, const json_t *trials)
{
    size_t i;
    json_t *t;
    if (spec->nobjectives > 1) {
        printf("Pareto set (not dominated%s):", spec->nconstraints ? ", feasible" : "");
        int any = 0;
        json_array_foreach(trials, i, t)
        {
            if (!json_is_true(json_object_get(t, "pareto")))
                continue;
            printf("%s trial %" JSON_INTEGER_FORMAT " (", any++ ? ";" : "",
                   json_integer_value(json_object_get(t, "id")));
            for (size_t k = 0; k < spec->nobjectives; k++) {
                char v[64];
                const json_t *x = k ? json_object_get(json_object_get(t, "metrics"),
                                                      spec->objectives[k].metric)
                                    : json_object_get(t, "value");
                cli_format_value(x, v, sizeof v);
                printf("%s%s=%s", k ? ", " : "", spec->objectives[k].metric, v);
            }
            printf(")");
        }
        printf("%s\n", any ? "" : " none yet");
    }
    if (spec->nconstraints) {
        long feas = 0, done = 0;
        const json_t *best = NULL;
        json_array_foreach(trials, i, t)
        {
            json_t *f = json_object_get(t, "feasible");
            done += f != NULL;
            feas += json_is_true(f);
            if (json_is_true(json_object_get(t, "best")))
                best = t;
        }
        char v[64] = "-";
        if (best)
            cli_format_value(json_object_get(best, "value"), v, sizeof v);
        printf("feasible: %ld of %ld completed; best feasible: ", feas, done);
        if (best)
            printf("trial %" JSON_INTEGER_FORMAT " %s %s\n",
                   json_integer_value(json_object_get(best, "id")), spec->metric, v);
        else
            printf("none yet\n");
    }
}

static int s_show(const cli_opts *o)
{
    json_t *d = s_detail(o, o->args[0]);
    if (!d)
        return CLI_FAIL;
    spec_t *marked = s_mark(d);
    if (o->json) {
        json_t *out = json_pack(
            "{s:O, s:O, s:O, s:O, s:O}", "name", json_object_get(d, "name"), "state",
            json_object_get(d, "state"), "spec", json_object_get(d, "spec"), "trials",
            json_object_get(d, "trials"), "events", json_object_get(d, "events"));
        /* the answer: best (null with several objectives) and the Pareto set */
        json_object_set(out, "best",
                        json_object_get(d, "best") ? json_object_get(d, "best")
                                                   : json_null());
        if (json_object_get(d, "pareto"))
            json_object_set(out, "pareto", json_object_get(d, "pareto"));
        cli_print_json(out);
    } else {
        const json_t *obj = spec_json_objective(json_object_get(d, "spec"));
        printf("study %s (%s), objective %s %s\n",
               json_string_value(json_object_get(d, "name")),
               json_string_value(json_object_get(d, "state")),
               json_string_value(json_object_get(obj, "mode")),
               json_string_value(json_object_get(obj, "metric")));
        s_print_best(d, json_string_value(json_object_get(obj, "metric")));
        cli_print_trials(json_object_get(d, "trials"));
        if (marked)
            s_print_front(marked, json_object_get(d, "trials"));
        cli_print_warnings(json_object_get(d, "events"));
    }
    spec_destroy(&marked);
    json_decref(d);
    return CLI_OK;
}

typedef struct {
    FILE *f;
    int all;
} s_curves_arg;

static int s_curve_row(void *arg, long trial, long attempt, long step, const char *name,
                       double value, double time)
{
    s_curves_arg *a = arg;
    if (!a->all && store_export_internal(name))
        return 0;
    char v[TEXT_DOUBLE_MAX], tm[TEXT_TIME_MAX];
    fprintf(a->f, "%ld,%ld,%ld,", trial, attempt, step);
    store_export_field(a->f, name, 0);
    /* a point always has a value: NaN is one reported ("nan") */
    fprintf(a->f, "%s,%s\n", text_double(value, v), text_time(time, tm));
    return 0;
}

static int s_export(const cli_opts *o)
{
    if (strcmp(o->format, "csv") && strcmp(o->format, "json") &&
        strcmp(o->format, "curves")) {
        cli_error("--format: expected csv, json or curves, got \"%s\"", o->format);
        return CLI_USAGE;
    }
    cli_src src;
    if (cli_src_open(o, &src) != CLI_OK)
        return CLI_FAIL;
    if (!strcmp(o->format, "curves") && !src.s) {
        cli_error("--format curves reads the database file (every metric point): run it "
                  "where the database is, with --db");
        cli_src_close(&src);
        return CLI_FAIL;
    }
    json_t *d = cli_src_read(&src, "study", o->args[0], 0, 0);
    spec_t *marked = d ? s_mark(d) : NULL;
    spec_destroy(&marked);
    FILE *f = d ? (o->output ? fopen(o->output, "w") : stdout) : NULL;
    int rc = CLI_OK;
    if (!d) {
        rc = CLI_FAIL;
    } else if (!f) {
        cli_error("cannot write %s: %s", o->output, strerror(errno));
        rc = CLI_FAIL;
    } else if (!strcmp(o->format, "curves")) {
        fputs("trial,attempt,step,metric,value,time\n", f);
        s_curves_arg a = {f, o->all};
        long id = (long)json_integer_value(json_object_get(d, "id"));
        if (store_study_curves(src.s, id, s_curve_row, &a) < 0) {
            cli_error("cannot read the metrics: %s", store_errmsg(src.s));
            rc = CLI_FAIL;
        }
    } else if (!strcmp(o->format, "json")) {
        store_export_json(f, json_object_get(d, "trials"));
    } else {
        store_export_csv(f, json_object_get(d, "trials"), o->all);
    }
    if (f && o->output)
        fclose(f);
    json_decref(d);
    cli_src_close(&src);
    return rc;
}

static int s_events(const cli_opts *o)
{
    json_t *d = s_detail(o, o->args[0]);
    if (!d)
        return CLI_FAIL;
    json_t *ev = json_incref(json_object_get(d, "events"));
    json_decref(d);
    if (o->json) {
        cli_print_json(ev);
        return CLI_OK;
    }
    printf("%-24s %-16s %-9s %-34s %-20s %s\n", "TIME", "WHO", "TRIAL", "WHAT", "OUTCOME",
           "REASON");
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        json_t *detail = json_object_get(e, "detail");
        json_t *trial = json_object_get(e, "trial"),
               *applied = json_object_get(e, "applied");
        json_t *lat = json_object_get(e, "latency_s");
        const char *kind = json_string_value(json_object_get(e, "kind"));
        const char *reason = json_string_value(json_object_get(detail, "reason"));
        const char *result = json_string_value(json_object_get(e, "result"));
        char tm[TEXT_TIME_MAX], tb[32] = "-", what[256], outcome[128];
        text_time(json_number_value(json_object_get(e, "time")), tm);
        if (json_is_integer(trial))
            snprintf(tb, sizeof tb, "trial %" JSON_INTEGER_FORMAT,
                     json_integer_value(trial));
        /* what: the event's kind, an instruction's own kind and arguments */
        const char *ins = json_string_value(json_object_get(detail, "kind"));
        size_t n =
            (size_t)snprintf(what, sizeof what, "%s",
                             kind && !strcmp(kind, "instruction") && ins ? ins : kind);
        const char *k;
        json_t *v;
        json_object_foreach(detail, k, v)
        {
            if (!strcmp(k, "kind") || !strcmp(k, "reason") || n >= sizeof what)
                continue;
            char *text = text_json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            n += (size_t)snprintf(what + n, sizeof what - n, " %s=%s", k,
                                  text ? text : "?");
            free(text);
        }
        if (json_is_null(applied))
            snprintf(outcome, sizeof outcome, "pending");
        else if (json_is_number(lat))
            snprintf(outcome, sizeof outcome, "%s in %.1f ms",
                     json_is_true(applied) ? "applied" : "refused",
                     json_number_value(lat) * 1e3);
        else
            snprintf(outcome, sizeof outcome, "%s",
                     json_is_true(applied) ? "done" : "refused");
        /* who: the channel ("cli", "web:USER", "controller") and, when the
           channel does not say it, the authenticated user behind it */
        const char *who = json_string_value(json_object_get(e, "who"));
        const char *actor = json_string_value(json_object_get(e, "actor"));
        char wb[160];
        size_t wl = who ? strlen(who) : 0, al = actor ? strlen(actor) : 0;
        if (actor && *actor &&
            !(wl > al && who[wl - al - 1] == ':' && !strcmp(who + wl - al, actor)))
            snprintf(wb, sizeof wb, "%s:%s", who ? who : "?", actor);
        else
            snprintf(wb, sizeof wb, "%s", who ? who : "?");
        printf("%-24s %-16s %-9s %-34s %-20s %s%s%s\n", tm, wb, tb, what, outcome,
               reason && *reason ? reason : "",
               result && *result && reason && *reason ? "; " : "",
               result && *result ? result : "");
    }
    json_decref(ev);
    return CLI_OK;
}

/* PARAM=VALUE arguments as an object: a value that reads as a JSON number
   is a number (the controller turns it back into text for a choice of
   strings, and a text into a number for a numeric parameter). */
static json_t *s_kv_params(const cli_opts *o)
{
    json_t *p = json_object();
    for (int i = 1; i < o->nargs; i++) {
        const char *a = o->args[i], *eq = strchr(a, '=');
        char name[128];
        if (!eq || eq == a || (size_t)(eq - a) >= sizeof name) {
            cli_error("study enqueue: expected PARAM=VALUE, got \"%s\"", a);
            json_decref(p);
            return NULL;
        }
        memcpy(name, a, (size_t)(eq - a));
        name[eq - a] = 0;
        if (json_object_get(p, name)) {
            cli_error("study enqueue: %s is given twice", name);
            json_decref(p);
            return NULL;
        }
        json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
        if (!v || !json_is_number(v)) {
            json_decref(v);
            v = json_string(eq + 1);
        }
        json_object_set_new(p, name, v);
    }
    return p;
}

static int s_enqueue(const cli_opts *o)
{
    if (o->nargs < 2)
        return cli_usage_error(
            s_usage, "study enqueue: expected NAME and at least one PARAM=VALUE");
    json_t *p = s_kv_params(o);
    if (!p)
        return CLI_USAGE;
    json_t *r = cli_request_of(o,
                               json_pack("{s:s, s:s, s:o}", "type", "study_enqueue",
                                         "study", o->args[0], "params", p),
                               10000);
    if (!r)
        return CLI_FAIL;
    char *text = text_json_dumps(json_object_get(r, "params"), JSON_COMPACT);
    const char *state = json_string_value(json_object_get(r, "state"));
    printf("study %s: queued %s (%lld waiting)%s\n", o->args[0], text ? text : "",
           (long long)json_integer_value(json_object_get(r, "queued")),
           state && !strcmp(state, "finished")
               ? "; the study has finished: `jizhi study extend` runs it"
               : "");
    free(text);
    json_decref(r);
    return CLI_OK;
}

static int s_extend(const cli_opts *o)
{
    if (o->nargs != 1 || o->trials <= 0)
        return cli_usage_error(s_usage, "study extend: expected NAME --trials N");
    json_t *r =
        cli_request_of(o,
                       json_pack("{s:s, s:s, s:I}", "type", "study_extend", "study",
                                 o->args[0], "trials", (json_int_t)o->trials),
                       10000);
    if (!r)
        return CLI_FAIL;
    printf("study %s: %lld trials in all (%s)\n", o->args[0],
           (long long)json_integer_value(json_object_get(r, "trials")),
           json_string_value(json_object_get(r, "state")));
    json_decref(r);
    return CLI_OK;
}

int cmd_study(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(s_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    const char *sub = argv[1];
    cli_opts o;
    int rc = cli_opts_parse(argc - 1, argv + 1,
                            CLI_OPT_FORMAT | CLI_OPT_OUTPUT | CLI_OPT_ALL |
                                (!strcmp(sub, "extend") ? CLI_OPT_TRIALS : 0) |
                                (!strcmp(sub, "submit") ? CLI_OPT_PRIORITY : 0) |
                                (!strcmp(sub, "delete") ? CLI_OPT_YES : 0),
                            s_usage, &o);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!strcmp(sub, "submit"))
        return (rc = s_need_args(&o, 1, "submit: expected SPEC.json")) ? rc
                                                                       : s_submit(&o);
    if (!strcmp(sub, "list"))
        return (rc = s_need_args(&o, 0, "list: takes no arguments")) ? rc : s_list(&o);
    if (!strcmp(sub, "show"))
        return (rc = s_need_args(&o, 1, "show: expected NAME")) ? rc : s_show(&o);
    if (!strcmp(sub, "export"))
        return (rc = s_need_args(&o, 1, "export: expected NAME")) ? rc : s_export(&o);
    if (!strcmp(sub, "importance"))
        return (rc = s_need_args(&o, 1, "importance: expected NAME"))
                   ? rc
                   : cli_study_importance(&o);
    if (!strcmp(sub, "enqueue"))
        return s_enqueue(&o);
    if (!strcmp(sub, "extend"))
        return s_extend(&o);
    if (!strcmp(sub, "delete") || !strcmp(sub, "copy")) {
        rc = !strcmp(sub, "delete") ? cli_study_delete(&o) : cli_study_copy(&o);
        if (rc == CLI_USAGE)
            fputs(s_usage, stderr);
        return rc;
    }
    if (!strcmp(sub, "events"))
        return (rc = s_need_args(&o, 1, "events: expected NAME")) ? rc : s_events(&o);
    if (!strcmp(sub, "stop") || !strcmp(sub, "resume")) {
        if ((rc = s_need_args(&o, 1, "stop/resume: expected NAME")))
            return rc;
        return s_controller_cmd(
            &o, json_pack("{s:s, s:s}", "type",
                          !strcmp(sub, "stop") ? "study_stop" : "study_resume", "study",
                          o.args[0]));
    }
    return cli_usage_error(s_usage, "study: unknown subcommand \"%s\"", sub);
}
