/*  cmd_trial.c - `jizhi trial list|show|logs|stop|pause|resume|set` and
    `jizhi report` (a trial reporting from a shell script through libjizhi).
*/
#include "cli.h"

#include "../common/spec.h"
#include "../common/wire.h"
#include "jizhi.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char s_usage[] =
    "usage: jizhi trial list STUDY [--json]\n"
    "       jizhi trial show ID [--json]\n"
    "       jizhi trial logs ID [--stderr] [-f|--follow]   -f: as the trial writes,\n"
    "                                        until it ends\n"
    "       jizhi trial stop ID | pause ID | resume ID   [--no-wait] [--timeout S]\n"
    "       jizhi trial pause ID --release   checkpoint, exit and free the slot; "
    "`resume`\n"
    "                                        restarts it from that checkpoint\n"
    "       jizhi trial set ID KEY=VALUE... [--no-wait] [--timeout S]\n"
    "Common options: --db FILE, --controller ENDPOINT.\n"
    "set/pause/resume return once the trial has acknowledged (or fail after the "
    "timeout,\n"
    "default 30 s); --no-wait returns as soon as the controller has recorded it.\n";

static int s_trial_id(const char *text, long *id)
{
    char *end;
    errno = 0;
    *id = strtol(text, &end, 10);
    if (errno || *end || *id <= 0) {
        cli_error("expected a trial id (a positive integer), got \"%s\"", text);
        return CLI_USAGE;
    }
    return 0;
}

static int s_list(const cli_opts *o)
{
    store_t *s = cli_open_db(o->db);
    if (!s)
        return CLI_FAIL;
    store_study st;
    if (store_study_get(s, o->args[0], &st) != 1) {
        cli_error("no study named \"%s\" in %s", o->args[0], o->db);
        store_close(&s);
        return CLI_FAIL;
    }
    store_trial *rows;
    long n = store_trials_load(s, st.id, &rows);
    json_t *arr = json_array();
    for (long i = 0; i < n; i++)
        json_array_append_new(arr, store_trial_json(&rows[i], s));
    store_trials_free(rows, n < 0 ? 0 : n);
    store_study_fini(&st);
    store_close(&s);
    if (o->json) {
        cli_print_json(arr);
        return CLI_OK;
    }
    cli_print_trials(arr);
    json_decref(arr);
    return CLI_OK;
}

/* Loads one trial row. */
static int s_get(const cli_opts *o, long id, store_t **s, store_trial *t)
{
    *s = cli_open_db(o->db);
    if (!*s)
        return CLI_FAIL;
    if (store_trial_get(*s, id, t) != 1) {
        cli_error("no trial %ld in %s", id, o->db);
        store_close(s);
        return CLI_FAIL;
    }
    return CLI_OK;
}

static int s_show(const cli_opts *o, long id)
{
    store_t *s;
    store_trial t;
    if (s_get(o, id, &s, &t) != CLI_OK)
        return CLI_FAIL;
    json_t *j = store_trial_json(&t, s);
    json_object_set_new(j, "lineage", store_trial_lineage(s, id));
    store_trial_fini(&t);
    store_close(&s);
    if (o->json) {
        cli_print_json(j);
        return CLI_OK;
    }
    int ended = json_number_value(json_object_get(j, "ended")) > 0;
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v)
    {
        char buf[600];
        if (json_is_object(v) || json_is_array(v)) {
            char *text = text_json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
            printf("%-12s %s\n", key, text);
            free(text);
            continue;
        }
        if (!strcmp(key, "created") || !strcmp(key, "started") || !strcmp(key, "ended"))
            text_time(json_number_value(v), buf); /* "-" when not yet */
        else if ((!ended && (!strcmp(key, "exit_code") || !strcmp(key, "exit_how"))) ||
                 (!strcmp(key, "last_step") && json_integer_value(v) < 0) ||
                 (!strcmp(key, "pid") && json_integer_value(v) <= 0) ||
                 (json_is_string(v) && !*json_string_value(v)))
            strcpy(buf, "-"); /* not there (yet) */
        else if (json_is_real(v))
            text_double(json_real_value(v), buf);
        else
            cli_format_value(v, buf, sizeof buf);
        printf("%-12s %s\n", key, buf);
    }
    json_decref(j);
    return CLI_OK;
}

static int s_cat(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        cli_error("cannot read log %s: %s", path, strerror(errno));
        return CLI_FAIL;
    }
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, stdout);
    fclose(f);
    return CLI_OK;
}

/* Copies what `path` holds past *off to `to`; advances *off. A file that
   does not exist (yet) copies nothing. */
static void s_copy_new(const char *path, long *off, FILE *to)
{
    FILE *f = path[0] ? fopen(path, "r") : NULL;
    if (!f)
        return;
    if (fseek(f, *off, SEEK_SET) == 0) {
        char buf[8192];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
            fwrite(buf, 1, n, to);
            *off += (long)n;
        }
        fflush(to);
    }
    fclose(f);
}

static int s_ended_state(const char *state)
{
    store_trial_state st;
    return store_trial_state_parse(state, &st) == 0 &&
           (st == TRIAL_COMPLETED || st == TRIAL_FAILED || st == TRIAL_STOPPED);
}

/* trial logs -f: prints the logs as they grow (stdout to stdout, stderr to
   stderr), follows a retry into its new files, and returns once the trial
   has ended and everything it wrote was printed. */
static int s_follow(const cli_opts *o, long id)
{
    store_t *s;
    store_trial t;
    if (s_get(o, id, &s, &t) != CLI_OK)
        return CLI_FAIL;
    char out[sizeof t.out_path] = "", err[sizeof t.err_path] = "";
    long off_out = 0, off_err = 0;
    for (;;) {
        if (strcmp(out, t.out_path) || strcmp(err, t.err_path)) { /* a new attempt */
            snprintf(out, sizeof out, "%s", t.out_path);
            snprintf(err, sizeof err, "%s", t.err_path);
            off_out = off_err = 0;
        }
        int ended = s_ended_state(t.state);
        if (!o->err_only)
            s_copy_new(out, &off_out, stdout);
        s_copy_new(err, &off_err, o->err_only ? stdout : stderr);
        store_trial_fini(&t);
        if (ended)
            break;
        usleep(200 * 1000);
        if (store_trial_get(s, id, &t) != 1) {
            cli_error("trial %ld disappeared from %s", id, o->db);
            store_close(&s);
            return CLI_FAIL;
        }
    }
    store_close(&s);
    return CLI_OK;
}

static int s_logs(const cli_opts *o, long id)
{
    if (o->follow)
        return s_follow(o, id);
    store_t *s;
    store_trial t;
    if (s_get(o, id, &s, &t) != CLI_OK)
        return CLI_FAIL;
    int rc = CLI_OK;
    if (!t.out_path[0] && !t.err_path[0]) {
        cli_error("trial %ld has no logs yet (state %s)", id, t.state);
        rc = CLI_FAIL;
    } else if (o->err_only) {
        rc = s_cat(t.err_path);
    } else {
        rc = s_cat(t.out_path);
        if (t.err_path[0]) {
            fflush(stdout);
            FILE *f = fopen(t.err_path, "r");
            if (f) {
                char buf[8192];
                size_t n;
                while ((n = fread(buf, 1, sizeof buf, f)) > 0)
                    fwrite(buf, 1, n, stderr);
                fclose(f);
            }
        }
    }
    store_trial_fini(&t);
    store_close(&s);
    return rc;
}

/* Parses KEY=VALUE into values (number when it reads as one). */
static int s_kv(const char *arg, json_t *values)
{
    const char *eq = strchr(arg, '=');
    char key[64];
    if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof key) {
        cli_error("expected KEY=VALUE, got \"%s\"", arg);
        return CLI_USAGE;
    }
    memcpy(key, arg, (size_t)(eq - arg));
    key[eq - arg] = 0;
    if (!spec_valid_name(key)) {
        cli_error("\"%s\" is not a parameter name ([A-Za-z_][A-Za-z0-9_]*)", key);
        return CLI_USAGE;
    }
    char *end;
    const char *val = eq + 1;
    double x = strtod(val, &end);
    if (*val && !*end && isfinite(x)) {
        char *iend;
        long long li = strtoll(val, &iend, 10);
        json_object_set_new(values, key, !*iend ? json_integer(li) : json_real(x));
    } else {
        json_object_set_new(values, key, json_string(val));
    }
    return 0;
}

static int s_control(const cli_opts *o, const char *sub, long id)
{
    char type[32];
    snprintf(type, sizeof type, "trial_%s", sub);
    if (o->release && strcmp(sub, "pause")) {
        cli_error("--release goes with `trial pause` only");
        return CLI_USAGE;
    }
    json_t *msg = json_pack("{s:s, s:I, s:b, s:b}", "type", type, "trial", (json_int_t)id,
                            "wait", !o->no_wait && strcmp(sub, "stop") && !o->release,
                            "release", o->release);
    if (!strcmp(sub, "set")) {
        json_t *values = json_object();
        for (int i = 1; i < o->nargs; i++) {
            int rc = s_kv(o->args[i], values);
            if (rc) {
                json_decref(values);
                json_decref(msg);
                return rc;
            }
        }
        if (json_object_size(values) == 0) {
            cli_error("trial set: expected at least one KEY=VALUE");
            json_decref(values);
            json_decref(msg);
            return CLI_USAGE;
        }
        json_object_set_new(msg, "values", values);
    } else if (o->nargs != 1) {
        cli_error("trial %s: expected one ID", sub);
        json_decref(msg);
        return CLI_USAGE;
    }
    char buf[512];
    const char *ep = cli_controller(o->controller, o->db, buf, sizeof buf);
    if (!ep) {
        cli_error(
            "no controller known for %s: is the study running? (--controller ENDPOINT)",
            o->db);
        json_decref(msg);
        return CLI_FAIL;
    }
    json_t *r = cli_request(ep, msg, (int)(o->timeout * 1000));
    if (!r)
        return CLI_FAIL;
    json_t *lat = json_object_get(r, "latency_s");
    if (json_is_true(json_object_get(r, "releasing")))
        printf("trial %ld: releasing (checkpoint, then exit); `jizhi trial resume %ld` "
               "restarts it "
               "from the checkpoint\n",
               id, id);
    else if (json_is_true(json_object_get(r, "restarting")))
        printf("trial %ld: restarting from its checkpoint\n", id);
    else if (json_is_number(lat))
        printf("trial %ld: %s acknowledged in %.1f ms\n", id, sub,
               json_number_value(lat) * 1e3);
    else
        printf("trial %ld: %s sent\n", id, sub);
    json_decref(r);
    return CLI_OK;
}

int cmd_trial(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(s_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    const char *sub = argv[1];
    cli_opts o;
    int rc = cli_opts_parse(
        argc - 1, argv + 1,
        CLI_OPT_WAIT | CLI_OPT_STDERR | CLI_OPT_RELEASE | CLI_OPT_FOLLOW, s_usage, &o);
    if (rc < 0)
        return CLI_OK;
    if (rc)
        return rc;
    if (!strcmp(sub, "list")) {
        if (o.nargs != 1) {
            cli_error("trial list: expected STUDY");
            return CLI_USAGE;
        }
        return s_list(&o);
    }
    static const char *const known[] = {"show", "logs", "stop", "pause", "resume", "set"};
    int ok = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        ok |= !strcmp(sub, known[i]);
    if (!ok) {
        cli_error("trial: unknown subcommand \"%s\"", sub);
        fputs(s_usage, stderr);
        return CLI_USAGE;
    }
    if (o.nargs < 1) {
        cli_error("trial %s: expected a trial ID", sub);
        return CLI_USAGE;
    }
    long id;
    if ((rc = s_trial_id(o.args[0], &id)))
        return rc;
    if (!strcmp(sub, "show"))
        return o.nargs == 1 ? s_show(&o, id) : CLI_USAGE;
    if (!strcmp(sub, "logs"))
        return o.nargs == 1 ? s_logs(&o, id) : CLI_USAGE;
    return s_control(&o, sub, id);
}

/* ---- report ---- */

static const char s_report_usage[] =
    "usage: jizhi report [--step N] NAME=VALUE...\n"
    "Reports metrics for the trial this process belongs to (JIZHI_* environment)\n"
    "and returns once the controller has stored them. Outside a study it prints\n"
    "them to stderr.\n";

int cmd_report(int argc, char **argv)
{
    static const struct option opts[] = {
        {"step", required_argument, 0, 's'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    long step = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': {
            char *end;
            errno = 0;
            step = strtol(optarg, &end, 10);
            if (errno || *end || !*optarg) {
                cli_error("--step: expected an integer, got \"%s\"", optarg);
                return CLI_USAGE;
            }
            break;
        }
        case 'h':
            fputs(s_report_usage, stdout);
            return CLI_OK;
        default:
            fputs(s_report_usage, stderr);
            return CLI_USAGE;
        }
    }
    if (optind >= argc) {
        cli_error("report: expected NAME=VALUE");
        fputs(s_report_usage, stderr);
        return CLI_USAGE;
    }
    /* parse everything first: a bad argument reports nothing */
    int n = argc - optind;
    char(*names)[64] = calloc((size_t)n, sizeof *names);
    double *vals = calloc((size_t)n, sizeof *vals);
    for (int i = 0; i < n; i++) {
        const char *a = argv[optind + i], *eq = strchr(a, '=');
        char *end;
        if (!eq || (size_t)(eq - a) >= 64) {
            cli_error("report: expected NAME=VALUE, got \"%s\"", a);
            free(names);
            free(vals);
            return CLI_USAGE;
        }
        memcpy(names[i], a, (size_t)(eq - a));
        vals[i] = strtod(eq + 1, &end);
        if (!spec_valid_name(names[i]) || !eq[1] || *end) {
            cli_error("report: \"%s\" is not NAME=NUMBER", a);
            free(names);
            free(vals);
            return CLI_USAGE;
        }
    }
    jz_trial *t = jz_open();
    int rc = CLI_FAIL;
    if (t) {
        rc = CLI_OK;
        for (int i = 0; i < n; i++)
            if (jz_report(t, step, names[i], vals[i]) != 0)
                rc = CLI_FAIL;
        if (jz_flush(t, 30000) != 0) {
            cli_error("report: the controller did not acknowledge the metrics");
            rc = CLI_FAIL;
        }
        jz_close(&t);
    }
    free(names);
    free(vals);
    return rc;
}
