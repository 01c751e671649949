/*  cmd_watch.c - `jizhi watch STUDY`: a live terminal view of a study.

    Every refresh reads the SQLite file through a read-only connection
    (WAL: a reader never blocks the controller): the study row, the trial
    rows, and only the metric points stored since the previous refresh
    (store_study_metrics_since), so a refresh costs what is new, not the
    study's whole history. Per trial it keeps the last value of every
    metric and a downsampled series of the objective for the sparkline.

    On a terminal it is an ncurses view (erase + refresh: only changed
    cells are sent, no flicker): progress, the best trial, a table of
    trials; keys select a trial and stop, pause, resume it or set one of
    its parameters, each after a y/n confirmation. Requests go to the
    controller serving the database (FILE.endpoint, like `jizhi trial`)
    over one DEALER socket without blocking the view: the reply (the
    trial's acknowledgement, or the refusal) lands in the status line.

    When stdout is not a terminal it prints plain lines instead (the
    study's progress when it changes, each trial's state changes) and
    exits when the study is no longer running.

    This file is the command and its loops, keys and requests; the model
    is watch_model.c, the screen watch_view.c (watch_internal.h).
*/
#include "watch_internal.h"

#include "../common/spec.h"
#include "../common/keys.h"
#include "../common/wire.h"
#include "../common/util.h"

#include <curses.h>
#include <errno.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

static const char s_usage[] =
    "usage: jizhi watch STUDY [--db FILE] [--interval S] [--controller ENDPOINT]\n"
    "Live view of a study: progress, the best trial, every trial's state, step,\n"
    "latest metrics, a sparkline of its objective and its running time.\n"
    "Keys: up/down or j/k select a trial; s stop, p pause, r resume, e set\n"
    "KEY=VALUE on it (each asks y/n); q quits. Refreshes every --interval\n"
    "seconds (default 1). When stdout is not a terminal it prints a line per\n"
    "change instead and exits once the study is no longer running.\n";

static volatile sig_atomic_t s_quit;

static void s_on_signal(int sig)
{
    (void)sig;
    s_quit = 1;
}

/* ---- requests to the controller (non-blocking) ---- */

static int s_connect(w_view *v)
{
    if (v->sock)
        return 0;
    char buf[512];
    const char *ep = cli_controller(v->controller, v->db, buf, sizeof buf);
    if (!ep) {
        snprintf(
            v->status, sizeof v->status,
            "no controller known for %s: is the study running? (--controller ENDPOINT)",
            v->db);
        return -1;
    }
    if (!v->zctx)
        v->zctx = zmq_ctx_new();
    v->sock = zmq_socket(v->zctx, ZMQ_DEALER);
    wire_socket_setup(v->sock);
    if (keys_client_setup(v->sock, ep, NULL, v->status, sizeof v->status) != 0) {
        zmq_close(v->sock);
        v->sock = NULL;
        return -1;
    }
    if (zmq_connect(v->sock, ep) != 0) {
        snprintf(v->status, sizeof v->status,
                 "cannot connect to the controller at %s: %s", ep, zmq_strerror(errno));
        zmq_close(v->sock);
        v->sock = NULL;
        return -1;
    }
    return 0;
}

/* Parses one KEY=VALUE into values (a number when it reads as one), like
   `jizhi trial set`. 0, or -1 with a message in v->status. */
static int s_parse_one(w_view *v, const char *arg, json_t *values)
{
    return cli_kv_parse(arg, values, v->status, sizeof v->status);
}

/* Parses "KEY=VALUE [KEY=VALUE...]" (space separated) into values. 0, or
   -1 with a message in v->status. */
static int s_parse_kv(w_view *v, const char *text, json_t *values)
{
    char buf[sizeof v->edit];
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save))
        if (s_parse_one(v, tok, values) != 0)
            return -1;
    if (json_object_size(values) == 0) {
        snprintf(v->status, sizeof v->status, "expected KEY=VALUE");
        return -1;
    }
    return 0;
}

/* Sends the confirmed action on trial `id`. */
static void s_send(w_view *v, long id)
{
    if (v->npending == W_MAX_PENDING) {
        snprintf(v->status, sizeof v->status, "too many requests waiting for an answer");
        return;
    }
    if (s_connect(v) != 0)
        return;
    char type[32];
    snprintf(type, sizeof type, "trial_%s", v->action);
    long req = v->next_req++;
    json_t *msg =
        json_pack("{s:s, s:I, s:b, s:I}", "type", type, "trial", (json_int_t)id, "wait",
                  strcmp(v->action, "stop") != 0, "req", (json_int_t)req);
    w_pending *p = &v->pending[v->npending];
    p->req = req;
    p->trial = id;
    p->sent = util_now();
    if (!strcmp(v->action, "set")) {
        json_t *values = json_object();
        if (s_parse_kv(v, v->edit, values) != 0) {
            json_decref(values);
            json_decref(msg);
            return;
        }
        json_object_set_new(msg, "values", values);
        snprintf(p->what, sizeof p->what, "set %.120s", v->edit);
    } else {
        snprintf(p->what, sizeof p->what, "%s", v->action);
    }
    if (wire_send(v->sock, NULL, msg, 1) != 0) {
        snprintf(v->status, sizeof v->status, "trial %ld: %s not sent: %s", id, p->what,
                 zmq_strerror(errno));
        return;
    }
    v->npending++;
    snprintf(v->status, sizeof v->status, "trial %ld: %s sent, waiting for the trial...",
             id, p->what);
}

/* Takes replies off the socket and expires old requests. */
static void s_replies(w_view *v)
{
    while (v->sock) {
        char err[256];
        json_t *r = wire_recv(v->sock, NULL, 1, err, sizeof err);
        if (!r) {
            if (errno == EAGAIN)
                break;
            continue; /* malformed: consumed, try the next */
        }
        json_t *jr = json_object_get(r, "req");
        long req = json_is_integer(jr) ? (long)json_integer_value(jr) : -1;
        for (int i = 0; i < v->npending; i++) {
            w_pending *p = &v->pending[i];
            if (p->req != req)
                continue;
            if (!strcmp(wire_type(r), "ok")) {
                w_trial *t = cli__watch_trial(v, p->trial);
                if (t && (!strcmp(p->what, "pause") || !strcmp(p->what, "resume")))
                    t->paused = !strcmp(p->what, "pause");
                json_t *lat = json_object_get(r, "latency_s");
                if (json_is_number(lat))
                    snprintf(v->status, sizeof v->status,
                             "trial %ld: %s acknowledged in %.1f ms", p->trial, p->what,
                             json_number_value(lat) * 1e3);
                else
                    snprintf(v->status, sizeof v->status, "trial %ld: %s requested",
                             p->trial, p->what);
            } else {
                const char *m = json_string_value(json_object_get(r, "message"));
                snprintf(v->status, sizeof v->status, "trial %ld: %s failed: %s",
                         p->trial, p->what, m ? m : "refused by the controller");
            }
            v->pending[i] = v->pending[--v->npending];
            break;
        }
        json_decref(r);
    }
    double now = util_now();
    for (int i = 0; i < v->npending; i++)
        if (now - v->pending[i].sent > W_REQ_TIMEOUT) {
            snprintf(v->status, sizeof v->status,
                     "trial %ld: %s: no answer from the controller after %.0f s",
                     v->pending[i].trial, v->pending[i].what, W_REQ_TIMEOUT);
            v->pending[i--] = v->pending[--v->npending];
        }
}

/* Handles one key. Returns 1 to quit. */
static int s_key(w_view *v, int ch)
{
    if (ch == KEY_RESIZE)
        return 0;
    if (v->mode == W_EDIT) {
        size_t n = strlen(v->edit);
        if (ch == 27) {
            v->mode = W_NORMAL;
            snprintf(v->status, sizeof v->status, "cancelled");
        } else if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
            json_t *probe = json_object();
            if (s_parse_kv(v, v->edit, probe) == 0)
                v->mode = W_CONFIRM;
            else
                v->mode = W_NORMAL;
            json_decref(probe);
        } else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
            if (n)
                v->edit[n - 1] = 0;
        } else if (ch >= 32 && ch < 127 && n + 1 < sizeof v->edit) {
            v->edit[n] = (char)ch;
            v->edit[n + 1] = 0;
        }
        return 0;
    }
    if (v->mode == W_CONFIRM) {
        if (ch == 'y' || ch == 'Y') {
            v->mode = W_NORMAL;
            s_send(v, v->sel_id);
        } else if (ch == 'n' || ch == 'N' || ch == 27 || ch == 'q') {
            v->mode = W_NORMAL;
            snprintf(v->status, sizeof v->status, "cancelled");
        }
        return 0;
    }
    switch (ch) {
    case 'q':
    case 'Q':
        return 1;
    case KEY_UP:
    case 'k':
        cli__watch_move(v, -1);
        break;
    case KEY_DOWN:
    case 'j':
        cli__watch_move(v, 1);
        break;
    case KEY_PPAGE:
        cli__watch_move(v, -(LINES > 10 ? LINES - 8 : 1));
        break;
    case KEY_NPAGE:
        cli__watch_move(v, LINES > 10 ? LINES - 8 : 1);
        break;
    case 'o':
        v->sort = (v->sort + 1) % W_SORTS;
        cli__watch_sort(v);
        snprintf(v->status, sizeof v->status, "sorted by %s", cli__watch_sort_name(v));
        break;
    case KEY_HOME:
    case 'g':
        cli__watch_move(v, -v->norder);
        break;
    case KEY_END:
    case 'G':
        cli__watch_move(v, v->norder);
        break;
    case 's':
    case 'p':
    case 'r':
    case 'e': {
        const w_trial *t = cli__watch_selected(v, NULL);
        if (!t) {
            snprintf(v->status, sizeof v->status, "no trial selected");
            break;
        }
        snprintf(v->action, sizeof v->action, "%s",
                 ch == 's'   ? "stop"
                 : ch == 'p' ? "pause"
                 : ch == 'r' ? "resume"
                             : "set");
        if (ch == 'e') {
            v->edit[0] = 0;
            v->mode = W_EDIT;
        } else {
            v->mode = W_CONFIRM;
        }
        break;
    }
    default:
        break;
    }
    return 0;
}

static int s_run_tty(w_view *v)
{
    setlocale(LC_ALL, "");
    v->utf8 = !strcmp(nl_langinfo(CODESET), "UTF-8");
    set_escdelay(25);
    if (!initscr()) {
        cli_error("watch: cannot start the terminal view");
        return CLI_FAIL;
    }
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    nodelay(stdscr, TRUE);
    curs_set(0);
    cli__watch_colors();
    int rc = CLI_OK;
    char err[512] = "";
    double next = 0;
    while (!s_quit) {
        double now = util_now();
        if (now >= next) {
            if (cli__watch_load(v, err, sizeof err) != 0) {
                rc = CLI_FAIL;
                break;
            }
            cli__watch_fix_selection(v);
            next = now + v->interval;
        }
        s_replies(v);
        int quit = 0, ch;
        while (!quit && (ch = getch()) != ERR)
            quit = s_key(v, ch);
        if (quit)
            break;
        cli__watch_draw(v);
        zmq_pollitem_t items[2] = {{NULL, STDIN_FILENO, ZMQ_POLLIN, 0},
                                   {v->sock, 0, ZMQ_POLLIN, 0}};
        long wait_ms = (long)((next - util_now()) * 1000) + 1;
        zmq_poll(items, v->sock ? 2 : 1, wait_ms < 1 ? 1 : wait_ms);
    }
    endwin();
    if (rc != CLI_OK)
        cli_error("watch: %s", err);
    return rc;
}

/* ---- plain lines (stdout is not a terminal) ---- */

static int s_run_lines(w_view *v)
{
    char last[1024] = "", line[1024], err[512], warned[512] = "";
    for (;;) {
        if (cli__watch_load(v, err, sizeof err) != 0) {
            cli_error("watch: %s", err);
            return CLI_FAIL;
        }
        if (strcmp(v->warning, warned)) {
            printf("warning: %s\n", v->warning);
            snprintf(warned, sizeof warned, "%s", v->warning);
        }
        for (long i = 0; i < v->norder; i++) {
            w_trial *t = &v->trials[v->order[i]];
            if (t->shown_state == t->state && !strcmp(t->shown_lineage, t->lineage))
                continue;
            char params[512], val[64];
            cli__watch_params_text(t->params, params, sizeof params);
            cli__watch_num(!wire_is_none(t->value) ? t->value : t->mval[W_MAX_NAMES], val,
                           sizeof val);
            printf("trial %ld %s step %ld %s=%s  %s%s%s\n", t->id,
                   cli__watch_state_name(t), t->m_step >= 0 ? t->m_step : t->last_step,
                   v->metric, val, params, t->lineage[0] ? "  | " : "", t->lineage);
            t->shown_state = t->state;
            snprintf(t->shown_lineage, sizeof t->shown_lineage, "%s", t->lineage);
        }
        w_progress p;
        cli__watch_progress(v, &p);
        char best[256] = "none yet";
        if (p.best) {
            char b[64];
            cli__watch_num(p.best->value, b, sizeof b);
            snprintf(best, sizeof best, "%s (trial %ld)", b, p.best->id);
        }
        snprintf(line, sizeof line,
                 "study %s %s: done %ld/%ld, running %ld, failed %ld, best %s%s %s",
                 v->name, cli__watch_study_state_name(v), p.done, p.total, p.running,
                 p.failed, v->spec && v->spec->nconstraints ? "feasible " : "", v->metric,
                 best);
        if (v->spec && v->spec->nobjectives > 1) {
            size_t len = strlen(line);
            len += (size_t)snprintf(line + len, sizeof line - len, ", Pareto set:");
            for (long i = 0; i < v->norder && len < sizeof line - 16; i++)
                if (v->trials[v->order[i]].mark)
                    len += (size_t)snprintf(line + len, sizeof line - len, " %ld",
                                            v->trials[v->order[i]].id);
        }
        if (strcmp(line, last)) {
            char el[32];
            cli_format_elapsed(p.elapsed, el, sizeof el);
            printf("%s, elapsed %s\n", line, el);
            snprintf(last, sizeof last, "%s", line);
        }
        fflush(stdout);
        if (v->study_state != STUDY_RUNNING || s_quit)
            return CLI_OK;
        usleep((useconds_t)(v->interval * 1e6));
    }
}

int cmd_watch(int argc, char **argv)
{
    w_view v;
    memset(&v, 0, sizeof v);
    v.interval = 1.0;
    v.next_req = 1;
    v.cache = -1;
    v.study_state = -1;
    const char *interval = NULL;
    const cli_opt_extra extra[] = {{"interval", &interval, NULL}, {NULL}};
    cli_opts o;
    int prc = cli_opts_parse_ext(argc, argv, CLI_OPT_DB | CLI_OPT_CONTROLLER, extra,
                                 s_usage, &o);
    if (prc)
        return prc < 0 ? CLI_OK : prc;
    if (interval) {
        char *end;
        v.interval = strtod(interval, &end);
        if (*end || !(v.interval >= 0.05 && v.interval <= 3600)) {
            cli_error("--interval: expected seconds between 0.05 and 3600, got \"%s\"",
                      interval);
            return CLI_USAGE;
        }
    }
    if (o.nargs != 1)
        return cli_usage_error(s_usage, "watch: expected STUDY");
    v.name = o.args[0];
    v.db = o.db;
    v.controller = o.controller;
    if (cli_src_open(&o, &v.src) != CLI_OK)
        return CLI_FAIL;
    v.s = v.src.s;
    json_t *d = cli_src_read(&v.src, "study", v.name, 0, 0);
    if (!d) {
        cli_src_close(&v.src);
        return CLI_FAIL;
    }
    if (!v.controller && !v.s)
        v.controller = v.src.ep; /* instructions go where the reads come from */
    v.study_id = (long)json_integer_value(json_object_get(d, "id"));
    json_t *spec = json_object_get(d, "spec");
    const json_t *obj = spec_json_objective(spec);
    const char *metric = json_string_value(json_object_get(obj, "metric"));
    snprintf(v.metric, sizeof v.metric, "%s", metric ? metric : "objective");
    const char *mode = json_string_value(json_object_get(obj, "mode"));
    v.maximize = mode && !strcmp(mode, "max");
    json_t *bt = json_object_get(json_object_get(spec, "budget"), "trials");
    v.budget = json_is_integer(bt) ? (long)json_integer_value(bt) : 0;
    spec_error serr;
    v.spec = spec_parse(spec, 0, &serr); /* the best and the marks: s_marks */
    for (size_t k = 0; v.spec && k < v.spec->nobjectives + v.spec->nconstraints; k++)
        cli__watch_name_index(&v,
                              k < v.spec->nobjectives
                                  ? v.spec->objectives[k].metric
                                  : v.spec->constraints[k - v.spec->nobjectives].metric);
    json_decref(d);

    util_on_stop_signals(s_on_signal, 1);

    int rc = isatty(STDOUT_FILENO) ? s_run_tty(&v) : s_run_lines(&v);

    if (v.sock)
        zmq_close(v.sock);
    if (v.zctx)
        zmq_ctx_term(v.zctx);
    for (long i = 0; i < v.ntrials; i++)
        json_decref(v.trials[i].params);
    free(v.trials);
    free(v.order);
    spec_destroy(&v.spec);
    cli_src_close(&v.src);
    return rc;
}
