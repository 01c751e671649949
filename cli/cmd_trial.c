/*  cmd_trial.c - `jizhi trial list|show|logs|stop|pause|resume|set` and
    `jizhi report` (a trial reporting from a shell script through libjizhi).
*/
#include "cli.h"

#include "../common/spec.h"
#include "../common/wire.h"
#include "jizhi.h"

#include <errno.h>
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
    "       jizhi trial set ID KEY=VALUE... [--force] [--no-wait] [--timeout S]\n"
    "             [--guard[=values] [--watch-steps K] [--tolerance X]]\n"
    "                                        --guard: checkpoint, change, watch the "
    "next\n"
    "                                        K reports (5) and revert from the "
    "checkpoint\n"
    "                                        on a loss jump, NaN or a trend worse than\n"
    "                                        before by X (0.2); =values: set the old\n"
    "                                        values back, no checkpoint. Returns the\n"
    "                                        outcome: kept (exit 0) or reverted (exit "
    "1)\n"
    "       jizhi trial ask STUDY [--json] [--timeout S]   a new trial of an "
    "ask-and-tell\n"
    "                                        study: prints its ID and params (--json:\n"
    "                                        and its token, for jizhi.h's jz_open_as)\n"
    "       jizhi trial tell ID VALUE...      end an asked trial with its objective\n"
    "                                        (one VALUE per objective)\n"
    "       jizhi trial tell ID failed [MESSAGE]    (or: ID pruned [VALUE...])\n"
    "       jizhi trial fork ID KEY=VALUE[,KEY=VALUE...]... [--steps K] [--keep "
    "best|all]\n"
    "             [--force] [--no-wait] [--timeout S]   one sibling per argument, from\n"
    "                                        a checkpoint of the trial (which goes on);\n"
    "                                        after K steps (10) the best continues\n"
    "       jizhi trial fork ID --decide      decide a running fork now\n"
    "Common options: --db FILE, --controller ENDPOINT.\n"
    "set/pause/resume return once the trial has acknowledged (or fail after the "
    "timeout,\n"
    "default 30 s); pause --release once the trial has checkpointed and exited (exit 1\n"
    "when it refused); --no-wait returns as soon as the controller has recorded it.\n"
    "set refuses a value of the wrong type for a parameter of the space, and one\n"
    "outside the space unless --force; other names go to the program as given.\n";

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
    cli_src src;
    if (cli_src_open(o, &src) != CLI_OK)
        return CLI_FAIL;
    json_t *d = cli_src_read(&src, "study", o->args[0], 0, 0);
    cli_src_close(&src);
    if (!d)
        return CLI_FAIL;
    json_t *arr = json_incref(json_object_get(d, "trials"));
    json_decref(d);
    size_t i;
    json_t *t;
    json_array_foreach(arr, i, t) json_object_del(t, "sampled");
    if (o->json) {
        cli_print_json(arr);
        return CLI_OK;
    }
    cli_print_trials(arr);
    json_decref(arr);
    return CLI_OK;
}

/* The trial as store_trial_detail gives it (from the database or the
   controller), or NULL after printing why. */
static json_t *s_trial(const cli_opts *o, cli_src *src, long id)
{
    if (cli_src_open(o, src) != CLI_OK)
        return NULL;
    json_t *j = cli_src_read(src, "trial", NULL, id, 0);
    if (!j)
        cli_src_close(src);
    return j;
}

static int s_show(const cli_opts *o, long id)
{
    cli_src src;
    json_t *j = s_trial(o, &src, id);
    if (!j)
        return CLI_FAIL;
    cli_src_close(&src);
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
        if (!strcmp(key, "interventions")) { /* one line each: kind, state, why */
            size_t i;
            json_t *iv;
            json_array_foreach(v, i, iv)
            {
                const json_t *d = json_object_get(iv, "data");
                const char *why = json_string_value(json_object_get(d, "reason"));
                long of = (long)json_integer_value(json_object_get(iv, "trial_id"));
                printf("%-12s %s %s\n", i ? "" : "changes",
                       json_string_value(json_object_get(iv, "kind")),
                       json_string_value(json_object_get(iv, "state")));
                if (of != id) /* this trial is one of the fork's siblings */
                    printf("%-12s   a sibling: trial %ld forked at step "
                           "%" JSON_INTEGER_FORMAT "\n",
                           "", of, json_integer_value(json_object_get(d, "fork_step")));
                if (why)
                    printf("%-12s   %s\n", "", why);
            }
            continue;
        }
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

/* Reads up to `max` bytes of the trial's log `stream` ("out" or "err")
   from `off`: from the file when the source is the database (the log is on
   this machine), else through the controller, which asks the trial's
   dispatcher. Returns the bytes put in buf and sets *used to the bytes of
   the file they stand for (they differ when the dispatcher replaced bytes
   that are not UTF-8); 0 at the end; -1 after printing why. */
static long s_log_read(cli_src *src, const json_t *t, const char *stream, long off,
                       char *buf, long max, long *used)
{
    if (src->s) {
        const char *path = json_string_value(
            json_object_get(t, !strcmp(stream, "out") ? "stdout" : "stderr"));
        FILE *f = path && *path ? fopen(path, "r") : NULL;
        if (!f)
            return 0; /* not there (yet) */
        long n = fseek(f, off, SEEK_SET) == 0 ? (long)fread(buf, 1, (size_t)max, f) : 0;
        fclose(f);
        *used = n;
        return n;
    }
    json_t *r = cli_request(
        src->ep,
        json_pack("{s:s, s:I, s:I, s:s, s:I, s:I}", "type", "read_log", "trial",
                  json_integer_value(json_object_get(t, "id")), "attempt",
                  json_integer_value(json_object_get(t, "attempt")), "stream", stream,
                  "offset", (json_int_t)off, "max", (json_int_t)max),
        15000);
    if (!r)
        return -1;
    const char *data = json_string_value(json_object_get(r, "data"));
    long n = data ? (long)json_string_length(json_object_get(r, "data")) : 0;
    if (n > max)
        n = max;
    memcpy(buf, data ? data : "", (size_t)n);
    *used = (long)json_integer_value(json_object_get(r, "bytes"));
    json_decref(r);
    return n;
}

/* Copies the log `stream` from *off to `to` and advances *off. -1 on a
   failed remote read. */
static int s_log_copy(cli_src *src, const json_t *t, const char *stream, long *off,
                      FILE *to)
{
    char buf[65536];
    for (;;) {
        long used = 0, n = s_log_read(src, t, stream, *off, buf, sizeof buf, &used);
        if (n < 0)
            return -1;
        if (used <= 0)
            break;
        fwrite(buf, 1, (size_t)n, to);
        *off += used;
    }
    fflush(to);
    return 0;
}

static int s_ended_state(const char *state)
{
    store_trial_state st;
    return state && store_trial_state_parse(state, &st) == 0 &&
           store_trial_state_ended(st);
}

/* trial logs [-f]: stdout to stdout, stderr to stderr (--stderr: only it,
   to stdout). With -f, prints them as they grow, follows a retry into its
   new files, and returns once the trial has ended and all was printed. */
static int s_logs(const cli_opts *o, long id)
{
    cli_src src;
    json_t *t = s_trial(o, &src, id);
    if (!t)
        return CLI_FAIL;
    const char *out0 = json_string_value(json_object_get(t, "stdout"));
    const char *err0 = json_string_value(json_object_get(t, "stderr"));
    if (!o->follow && (!out0 || !*out0) && (!err0 || !*err0)) {
        cli_error("trial %ld has no logs yet (state %s)", id,
                  json_string_value(json_object_get(t, "state")));
        json_decref(t);
        cli_src_close(&src);
        return CLI_FAIL;
    }
    long attempt = -1, off_out = 0, off_err = 0;
    int rc = CLI_OK;
    for (;;) {
        long a = (long)json_integer_value(json_object_get(t, "attempt"));
        if (a != attempt) { /* a new attempt writes new files */
            attempt = a;
            off_out = off_err = 0;
        }
        int ended = s_ended_state(json_string_value(json_object_get(t, "state")));
        if ((!o->err_only && s_log_copy(&src, t, "out", &off_out, stdout) != 0) ||
            s_log_copy(&src, t, "err", &off_err, o->err_only ? stdout : stderr) != 0) {
            rc = CLI_FAIL;
            break;
        }
        if (!o->follow || ended)
            break;
        usleep(200 * 1000);
        json_decref(t);
        if (!(t = cli_src_read(&src, "trial", NULL, id, 0))) {
            rc = CLI_FAIL;
            break;
        }
    }
    json_decref(t);
    cli_src_close(&src);
    return rc;
}

/* Parses KEY=VALUE into values (number when it reads as one). */
static int s_kv(const char *arg, json_t *values)
{
    char err[256];
    if (cli_kv_parse(arg, values, err, sizeof err) != 0) {
        cli_error("%s", err);
        return CLI_USAGE;
    }
    return 0;
}

/* A wait for a guarded change or a fork that may outlive its controller
   also reads the intervention's persisted state (store_interv_wait). */
#define IV_SLICE_MS 500

typedef struct {
    store_t *store;         /* read-only, owned; NULL: no reading (the plain wait) */
    store_interv_wait wait; /* on store */
} s_iv_wait;

/* Opens o->db to read kind's interventions on trial during a wait (w->store
   stays NULL when it cannot: then only the controller's answer counts). */
static void s_iv_wait_init(s_iv_wait *w, const cli_opts *o, long trial,
                           store_iv_kind kind)
{
    memset(w, 0, sizeof *w);
    char err[512];
    if (access(o->db, R_OK) != 0 || !(w->store = store_open(o->db, 1, err, sizeof err)))
        w->store = NULL;
    store_interv_wait_init(&w->wait, w->store, trial, kind);
}

/* Sends msg (takes it) to the controller of o->db and returns its answer
   (caller owns), waiting wait_s plus a margin for the controller's own
   timeout answer; NULL after printing why. With w (a waited guarded change
   or fork), the answer may come from the database instead
   (store_interv_wait_check). */
static json_t *s_ask_iv(const cli_opts *o, json_t *msg, double wait_s, s_iv_wait *w)
{
    char buf[512];
    const char *ep = cli_controller(o->controller, o->db, buf, sizeof buf);
    if (!ep) {
        cli_error(
            "no controller known for %s: is the study running? (--controller ENDPOINT)",
            o->db);
        json_decref(msg);
        return NULL;
    }
    if (w && w->store)
        return cli_request_check(ep, msg, (int)(wait_s * 1000) + 5000, IV_SLICE_MS,
                                 store_interv_wait_check, &w->wait);
    return cli_request(ep, msg, (int)(wait_s * 1000) + 5000);
}

static int s_control(const cli_opts *o, const char *sub, long id)
{
    char type[32];
    snprintf(type, sizeof type, "trial_%s", sub);
    if (o->release && strcmp(sub, "pause")) {
        cli_error("--release goes with `trial pause` only");
        return CLI_USAGE;
    }
    if (o->force && strcmp(sub, "set")) {
        cli_error("--force goes with `trial set` only");
        return CLI_USAGE;
    }
    if ((o->guard || o->watch_steps || o->tolerance >= 0) && strcmp(sub, "set")) {
        cli_error("--guard, --watch-steps and --tolerance go with `trial set` only");
        return CLI_USAGE;
    }
    if ((o->watch_steps || o->tolerance >= 0) && !o->guard) {
        cli_error("--watch-steps and --tolerance go with --guard");
        return CLI_USAGE;
    }
    if (o->steps || o->keep || o->decide) {
        cli_error("--steps, --keep and --decide go with `trial fork` only");
        return CLI_USAGE;
    }
    /* a guarded change is answered once decided: its window takes longer */
    double wait_s = o->guard && !o->timeout_set ? 600 : o->timeout;
    /* the controller answers a wait that ran out itself, saying what it
       knows; the margin is for its answer to arrive */
    json_t *msg = json_pack("{s:s, s:I, s:b, s:b, s:f}", "type", type, "trial",
                            (json_int_t)id, "wait", !o->no_wait && strcmp(sub, "stop"),
                            "release", o->release, "wait_s", wait_s);
    if (!strcmp(sub, "set")) {
        json_object_set_new(msg, "force", json_boolean(o->force));
        if (o->guard) {
            json_t *g =
                json_pack("{s:s}", "mode", o->guard == 2 ? "values" : "checkpoint");
            if (o->watch_steps)
                json_object_set_new(g, "watch_steps", json_integer(o->watch_steps));
            if (o->tolerance >= 0)
                json_object_set_new(g, "tolerance", json_real(o->tolerance));
            json_object_set_new(msg, "guard", g);
        }
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
    s_iv_wait w = {0};
    if (o->guard && !o->no_wait)
        s_iv_wait_init(&w, o, id, IV_GUARD);
    json_t *r = s_ask_iv(o, msg, wait_s, o->guard && !o->no_wait ? &w : NULL);
    store_close(&w.store);
    if (!r)
        return CLI_FAIL;
    const char *outcome = json_string_value(json_object_get(r, "guard"));
    if (outcome) { /* a guarded change, decided */
        const char *why = json_string_value(json_object_get(r, "reason"));
        int kept = store_iv_answer_state(r, IV_GUARD) == GUARD_KEPT;
        if (o->json) /* machine-readable: the answer alone */
            cli_print_json(json_incref(r));
        else {
            printf("trial %ld: guarded change %s: %s\n", id, outcome, why ? why : "");
            if (json_is_true(json_object_get(r, "from_store")))
                printf("  (read from the database: the controller restarted during the "
                       "wait)\n");
        }
        json_decref(r);
        return kept ? CLI_OK : CLI_FAIL;
    }
    if (o->guard) {
        printf("trial %ld: guarded change recorded, not waited for: `jizhi trial show "
               "%ld` tells the outcome\n",
               id, id);
        json_decref(r);
        return CLI_OK;
    }
    json_t *lat = json_object_get(r, "latency_s");
    if (json_is_true(json_object_get(r, "released")))
        printf("trial %ld: released: it saved a checkpoint at step %" JSON_INTEGER_FORMAT
               ", exited and freed its slot; `jizhi trial resume %ld` restarts it from "
               "the checkpoint\n",
               id, json_integer_value(json_object_get(r, "checkpoint_step")), id);
    else if (json_is_true(json_object_get(r, "releasing")))
        printf("trial %ld: releasing (checkpoint, then exit), not waited for: `jizhi "
               "trial show %ld` tells whether it was suspended\n",
               id, id);
    else if (json_is_true(json_object_get(r, "restarting")) &&
             json_is_string(json_object_get(r, "waiting"))) /* queued, not started */
        printf("trial %ld: restarting from its checkpoint once it gets a slot; it waits: "
               "%s (`jizhi queue` shows the queue)\n",
               id, json_string_value(json_object_get(r, "waiting")));
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

/* Prints a decided fork: the decision, then each sibling's values and result. */
static void s_fork_print(long id, const json_t *r)
{
    printf("trial %ld: fork %s: %s\n", id, json_string_value(json_object_get(r, "fork")),
           json_string_value(json_object_get(r, "reason"))
               ? json_string_value(json_object_get(r, "reason"))
               : "");
    json_t *sibs = json_object_get(r, "siblings"), *vals = json_object_get(r, "values");
    json_t *results = json_object_get(r, "results"),
           *stopped = json_object_get(json_object_get(r, "decision"), "stopped");
    size_t i;
    json_t *x;
    json_array_foreach(sibs, i, x)
    {
        char key[32], res[64] = "-";
        snprintf(key, sizeof key, "%" JSON_INTEGER_FORMAT, json_integer_value(x));
        json_t *v = json_object_get(results, key);
        if (v && !json_is_null(v))
            cli_format_value(v, res, sizeof res);
        char *text =
            text_json_dumps(json_array_get(vals, i), JSON_COMPACT | JSON_SORT_KEYS);
        int was_stopped = 0;
        size_t k;
        json_t *y;
        json_array_foreach(stopped, k, y) was_stopped |= json_equal(x, y);
        printf("  sibling %s  %s  result %s%s\n", key, text ? text : "", res,
               json_object_get(r, "decision")
                   ? (was_stopped ? "  stopped" : "  continues")
                   : "");
        free(text);
    }
}

/* trial fork ID KEY=VALUE[,KEY=VALUE]... | --decide */
static int s_fork(const cli_opts *o, long id)
{
    if (o->release || o->guard || o->watch_steps || o->tolerance >= 0) {
        cli_error("trial fork takes --steps, --keep, --decide, --force, --no-wait and "
                  "--timeout");
        return CLI_USAGE;
    }
    if (o->decide && (o->nargs != 1 || o->steps || o->keep)) {
        cli_error("trial fork ID --decide: no values, --steps or --keep");
        return CLI_USAGE;
    }
    if (!o->decide && o->nargs < 2) {
        cli_error(
            "trial fork: expected KEY=VALUE for each sibling (several values of one "
            "sibling joined by commas), or --decide");
        return CLI_USAGE;
    }
    double wait_s = o->timeout_set ? o->timeout : 600;
    json_t *msg = json_pack("{s:s, s:I, s:b, s:f, s:b, s:b}", "type", "trial_fork",
                            "trial", (json_int_t)id, "wait", !o->no_wait, "wait_s",
                            wait_s, "decide", o->decide, "force", o->force);
    if (o->steps)
        json_object_set_new(msg, "steps", json_integer(o->steps));
    if (o->keep)
        json_object_set_new(msg, "keep", json_string(o->keep));
    json_t *sibs = json_array();
    json_object_set_new(msg, "siblings", sibs);
    for (int i = 1; i < o->nargs; i++) {
        json_t *values = json_object();
        json_array_append_new(sibs, values);
        char buf[512];
        snprintf(buf, sizeof buf, "%s", o->args[i]);
        char *save = NULL;
        for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
            int rc = s_kv(p, values);
            if (rc) {
                json_decref(msg);
                return rc;
            }
        }
    }
    if (o->decide)
        json_object_del(msg, "siblings");
    s_iv_wait w = {0};
    int waits = !o->no_wait && !o->decide;
    if (waits)
        s_iv_wait_init(&w, o, id, IV_FORK);
    json_t *r = s_ask_iv(o, msg, wait_s, waits ? &w : NULL);
    store_close(&w.store);
    if (!r)
        return CLI_FAIL;
    int state = store_iv_answer_state(r, IV_FORK);
    if (state == FORK_REFUSED) { /* read from the database */
        cli_error("%s", json_string_value(json_object_get(r, "reason"))
                            ? json_string_value(json_object_get(r, "reason"))
                            : "the fork was refused");
        json_decref(r);
        return CLI_FAIL;
    }
    if (o->json)
        cli_print_json(json_incref(r));
    else if (state == FORK_DECIDED) {
        s_fork_print(id, r);
        if (json_is_true(json_object_get(r, "from_store")))
            printf("  (read from the database: the controller restarted during the "
                   "wait)\n");
    } else if (state == FORK_RUNNING) {
        printf("trial %ld: forked from step %" JSON_INTEGER_FORMAT
               "; not waited for: `jizhi trial fork %ld --decide` decides now\n",
               id, json_integer_value(json_object_get(r, "fork_step")), id);
        if (json_is_string(json_object_get(r, "waiting")))
            printf("  siblings wait for a slot: %s\n",
                   json_string_value(json_object_get(r, "waiting")));
        s_fork_print(id, r);
    } else
        printf("trial %ld: forking once it has checkpointed; not waited for: `jizhi "
               "trial show %ld` tells the outcome\n",
               id, id);
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
    int rc =
        cli_opts_parse(argc - 1, argv + 1,
                       CLI_OPT_WAIT | CLI_OPT_STDERR | CLI_OPT_RELEASE | CLI_OPT_FOLLOW |
                           CLI_OPT_FORCE | CLI_OPT_GUARD | CLI_OPT_FORK,
                       s_usage, &o);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!strcmp(sub, "ask"))
        return cli_trial_ask(&o);
    if (!strcmp(sub, "tell"))
        return cli_trial_tell(&o);
    if (!strcmp(sub, "list")) {
        if (o.nargs != 1) {
            cli_error("trial list: expected STUDY");
            return CLI_USAGE;
        }
        return s_list(&o);
    }
    static const char *const known[] = {"show",   "logs", "stop", "pause",
                                        "resume", "set",  "fork"};
    int ok = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        ok |= !strcmp(sub, known[i]);
    if (!ok)
        return cli_usage_error(s_usage, "trial: unknown subcommand \"%s\"", sub);
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
    if (!strcmp(sub, "fork"))
        return s_fork(&o, id);
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
    const char *step_text = NULL;
    const cli_opt_extra extra[] = {{"step", &step_text, NULL}, {NULL}};
    cli_opts o;
    int prc = cli_opts_parse_ext(argc, argv, 0, extra, s_report_usage, &o);
    if (prc)
        return prc < 0 ? CLI_OK : prc;
    long step = 0;
    if (step_text) {
        char *end;
        errno = 0;
        step = strtol(step_text, &end, 10);
        if (errno || *end || !*step_text) {
            cli_error("--step: expected an integer, got \"%s\"", step_text);
            return CLI_USAGE;
        }
    }
    if (o.nargs < 1) {
        cli_error("report: expected NAME=VALUE");
        fputs(s_report_usage, stderr);
        return CLI_USAGE;
    }
    /* parse everything first: a bad argument reports nothing */
    int n = o.nargs;
    char(*names)[64] = calloc((size_t)n, sizeof *names);
    double *vals = calloc((size_t)n, sizeof *vals);
    if (!names || !vals) {
        cli_error("report: out of memory");
        free(names);
        free(vals);
        return CLI_FAIL;
    }
    for (int i = 0; i < n; i++) {
        const char *a = o.args[i], *eq = strchr(a, '=');
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
    const cli_helper_api *jz = cli_helper();
    jz_trial *t = jz ? jz->open() : NULL;
    int rc = CLI_FAIL;
    if (t) {
        rc = CLI_OK;
        for (int i = 0; i < n; i++)
            if (jz->report(t, step, names[i], vals[i]) != 0)
                rc = CLI_FAIL;
        if (jz->flush(t, 30000) != 0) {
            cli_error("report: the controller did not acknowledge the metrics");
            rc = CLI_FAIL;
        }
        jz->close(&t);
    }
    free(names);
    free(vals);
    return rc;
}
