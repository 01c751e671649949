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
*/
#include "cli.h"

#include "../common/spec.h"
#include "../common/keys.h"
#include "../common/wire.h"
#include "../common/util.h"

#include <curses.h>
#include <errno.h>
#include <getopt.h>
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

#define W_SERIES_CAP 256 /* objective points kept per trial (downsampled) */
#define W_MAX_NAMES 32   /* metric names tracked per study */
#define W_SPARK 16       /* sparkline width in cells */
#define W_MAX_PENDING 16 /* requests in flight to the controller */
#define W_REQ_TIMEOUT 30.0

typedef struct {
    long id;
    int have_row; /* the trial row has been read */
    long number, attempt, last_step;
    char state[16];
    json_t *params; /* owned, NULL before the row */
    double value, started, ended;
    long m_attempt;               /* attempt the metrics below belong to */
    long m_step;                  /* last step reported, -1 none */
    double mval[W_MAX_NAMES + 1]; /* last value per name index; [W_MAX_NAMES] objective */
    float series[W_SERIES_CAP];   /* objective, one slot per `stride` points */
    int nseries, stride, slot_fill;
    char shown_state[16]; /* last state printed in line mode */
    int paused;           /* this view's pause was acknowledged (no resume since) */
    int mark;             /* on the Pareto set (several objectives) or the best
                             feasible trial (constraints): spec_mark_trials */
    int infeasible;       /* completed but breaks a constraint */
} w_trial;

typedef struct {
    long req, trial;
    char what[160];
    double sent;
} w_pending;

typedef struct {
    const char *db, *controller, *name;
    double interval;
    store_t *s;
    long study_id;
    char study_state[16];
    double created, finished;
    char metric[64]; /* objective metric */
    int maximize;
    spec_t *spec;    /* parsed when the study has several objectives or
                        constraints (for the marks), else NULL; owned */
    long budget;     /* budget.trials, 0 when unknown */
    long after;      /* metrics rowid read up to */
    w_trial *trials; /* by id, unordered */
    long ntrials, cap;
    long *order; /* indexes of trials with rows, by number */
    long norder;
    long cache; /* last trial index hit */
    char names[W_MAX_NAMES][64];
    int nnames;
    int utf8;
    /* interactive state */
    long sel_id, top;
    enum { W_NORMAL, W_EDIT, W_CONFIRM } mode;
    char action[16]; /* stop, pause, resume, set */
    char edit[128];
    char status[256];
    char warning[512]; /* the study's latest warning event, "" when none */
    cli_src src;       /* remote reads (--controller) when src.s is NULL */
    enum { W_BY_ID, W_BY_OBJECTIVE, W_BY_STATE, W_SORTS } sort; /* key o cycles */
    void *zctx, *sock;
    long next_req;
    w_pending pending[W_MAX_PENDING];
    int npending;
} w_view;

static volatile sig_atomic_t s_quit;

static void s_on_signal(int sig)
{
    (void)sig;
    s_quit = 1;
}

/* ---- model ---- */

static w_trial *s_trial(w_view *v, long id)
{
    if (v->cache >= 0 && v->cache < v->ntrials && v->trials[v->cache].id == id)
        return &v->trials[v->cache];
    for (long i = 0; i < v->ntrials; i++)
        if (v->trials[i].id == id) {
            v->cache = i;
            return &v->trials[i];
        }
    if (v->ntrials == v->cap) {
        long cap = v->cap ? v->cap * 2 : 64;
        w_trial *nt = realloc(v->trials, (size_t)cap * sizeof *nt);
        if (!nt)
            return NULL;
        v->trials = nt;
        v->cap = cap;
    }
    w_trial *t = &v->trials[v->ntrials];
    memset(t, 0, sizeof *t);
    t->id = id;
    t->m_step = -1;
    t->stride = 1;
    t->value = wire_none(); /* a reported NaN is a value: "nan" */
    for (int k = 0; k <= W_MAX_NAMES; k++)
        t->mval[k] = wire_none();
    v->cache = v->ntrials++;
    return t;
}

/* Index of a metric name, adding it; -1 when the table is full. */
static int s_name_index(w_view *v, const char *name)
{
    if (!strcmp(name, v->metric))
        return W_MAX_NAMES;
    for (int i = 0; i < v->nnames; i++)
        if (!strcmp(v->names[i], name))
            return i;
    if (v->nnames == W_MAX_NAMES)
        return -1;
    snprintf(v->names[v->nnames], sizeof v->names[0], "%s", name);
    return v->nnames++;
}

/* Appends to the objective series: each slot holds the latest of `stride`
   points; when full, pairs of slots merge (the later wins) and the stride
   doubles, so the series always spans the whole run. */
static void s_series_add(w_trial *t, double x)
{
    if (t->slot_fill == 0) {
        if (t->nseries == W_SERIES_CAP) {
            for (int i = 0; i < W_SERIES_CAP / 2; i++)
                t->series[i] = t->series[2 * i + 1];
            t->nseries = W_SERIES_CAP / 2;
            t->stride *= 2;
        }
        t->nseries++;
    }
    t->series[t->nseries - 1] = (float)x;
    if (++t->slot_fill >= t->stride)
        t->slot_fill = 0;
}

static int s_on_point(void *arg, long trial_id, long attempt, long step, const char *name,
                      double value)
{
    w_view *v = arg;
    w_trial *t = s_trial(v, trial_id);
    if (!t || attempt < t->m_attempt)
        return 0;
    if (attempt > t->m_attempt) { /* a retry starts its curves afresh */
        t->m_attempt = attempt;
        t->m_step = -1;
        t->nseries = t->slot_fill = 0;
        t->stride = 1;
        for (int k = 0; k <= W_MAX_NAMES; k++)
            t->mval[k] = wire_none();
    }
    if (step > t->m_step)
        t->m_step = step;
    int k = s_name_index(v, name);
    if (k < 0)
        return 0;
    t->mval[k] = value;
    if (k == W_MAX_NAMES)
        s_series_add(t, value);
    return 0;
}

static const w_view *s_sort_view; /* qsort's context (the UI is one thread) */

/* Display order: by id; or by objective, best first (trials without one
   last); or by state (running first), then id. */
static int s_cmp_trials(const void *a, const void *b)
{
    const w_view *v = s_sort_view;
    const w_trial *x = &v->trials[*(const long *)a], *y = &v->trials[*(const long *)b];
    if (v->sort == W_BY_OBJECTIVE) {
        double fx = isfinite(x->value) ? x->value : x->mval[W_MAX_NAMES];
        double fy = isfinite(y->value) ? y->value : y->mval[W_MAX_NAMES];
        if (isfinite(fx) != isfinite(fy))
            return isfinite(fx) ? -1 : 1;
        if (isfinite(fx) && fx != fy)
            return (v->maximize ? fx > fy : fx < fy) ? -1 : 1;
    } else if (v->sort == W_BY_STATE) {
        int rx = strcmp(x->state, "running") != 0, ry = strcmp(y->state, "running") != 0;
        int c = rx != ry ? rx - ry : strcmp(x->state, y->state);
        if (c)
            return c;
    }
    return x->id < y->id ? -1 : x->id > y->id;
}

static const char *const s_sort_names[] = {"id", "objective", "state"};

/* Reads what changed since the last refresh. 0, or -1 with a message. */
/* The trial fields shown, from a store_trial_json object (remote). */
static void s_take_row(w_view *v, const json_t *r)
{
    w_trial *t = s_trial(v, (long)json_integer_value(json_object_get(r, "id")));
    if (!t)
        return;
    t->have_row = 1;
    t->number = (long)json_integer_value(json_object_get(r, "number"));
    t->attempt = (long)json_integer_value(json_object_get(r, "attempt"));
    t->last_step = (long)json_integer_value(json_object_get(r, "last_step"));
    const char *state = json_string_value(json_object_get(r, "state"));
    snprintf(t->state, sizeof t->state, "%s", state ? state : "?");
    json_decref(t->params);
    t->params = json_incref(json_object_get(r, "params"));
    json_t *val = json_object_get(r, "value");
    if (wire_to_value(val, &t->value) != 0)
        t->value = wire_none();
    t->started = json_number_value(json_object_get(r, "started"));
    t->ended = json_number_value(json_object_get(r, "ended"));
}

/* s_load through the controller (--controller): the same reads, paged. */
static int s_load_remote(w_view *v, char *err, size_t errsize)
{
    for (int chunk = 0; chunk < 50; chunk++) {
        json_t *d = cli_src_read(&v->src, "metrics_since", v->name, 0, v->after);
        if (!d) {
            snprintf(err, errsize, "cannot read study %.100s from %.200s", v->name,
                     v->src.ep);
            return -1;
        }
        json_t *pts = json_object_get(d, "points");
        size_t i;
        json_t *p;
        json_array_foreach(pts, i, p)
        {
            double x;
            if (wire_to_value(json_array_get(p, 4), &x) != 0)
                x = wire_none();
            s_on_point(v, (long)json_integer_value(json_array_get(p, 0)),
                       (long)json_integer_value(json_array_get(p, 1)),
                       (long)json_integer_value(json_array_get(p, 2)),
                       json_string_value(json_array_get(p, 3)), x);
        }
        v->after = (long)json_integer_value(json_object_get(d, "after"));
        const char *state = json_string_value(json_object_get(d, "state"));
        const char *warning = json_string_value(json_object_get(d, "warning"));
        snprintf(v->study_state, sizeof v->study_state, "%s", state ? state : "?");
        snprintf(v->warning, sizeof v->warning, "%s", warning ? warning : "");
        v->created = json_number_value(json_object_get(d, "created"));
        v->finished = json_number_value(json_object_get(d, "finished"));
        json_array_foreach(json_object_get(d, "trials"), i, p) s_take_row(v, p);
        size_t npts = json_array_size(pts);
        json_decref(d);
        if (npts < 100000)
            break;
    }
    return 0;
}

static int s_order(w_view *v, char *err, size_t errsize);

/* Marks the Pareto set / best feasible trial and the infeasible ones from
   the last metric values this view holds (spec_mark_trials). */
static void s_marks(w_view *v)
{
    if (!v->spec)
        return;
    json_t *arr = json_array();
    for (long i = 0; i < v->norder; i++) {
        w_trial *t = &v->trials[v->order[i]];
        json_t *m = json_object();
        for (int k = 0; k < v->nnames; k++)
            if (isfinite(t->mval[k]))
                json_object_set_new(m, v->names[k], json_real(t->mval[k]));
        json_array_append_new(arr, json_pack("{s:s, s:o, s:o}", "state", t->state,
                                             "value", wire_real(t->value), "metrics", m));
    }
    spec_mark_trials(v->spec, arr);
    const char *mark = v->spec->nobjectives > 1 ? "pareto" : "best";
    for (long i = 0; i < v->norder; i++) {
        w_trial *t = &v->trials[v->order[i]];
        json_t *r = json_array_get(arr, (size_t)i);
        t->mark = json_is_true(json_object_get(r, mark));
        t->infeasible = json_is_false(json_object_get(r, "feasible"));
    }
    json_decref(arr);
}

static int s_load(w_view *v, char *err, size_t errsize)
{
    if (!v->s) {
        int rc = s_load_remote(v, err, errsize) || s_order(v, err, errsize);
        s_marks(v);
        return rc;
    }
    store_study st;
    if (store_study_get_id(v->s, v->study_id, &st) != 1) {
        snprintf(err, errsize, "cannot read study %s: %s", v->name, store_errmsg(v->s));
        return -1;
    }
    snprintf(v->study_state, sizeof v->study_state, "%s", st.state);
    v->created = st.created;
    v->finished = st.finished;
    store_study_fini(&st);
    store_event_last_reason(v->s, v->study_id, "warning", v->warning, sizeof v->warning);
    /* metrics first: a trial is inserted before any of its points, and a
       point for a trial not seen yet creates its entry */
    for (int chunk = 0; chunk < 50; chunk++) {
        long n = store_study_metrics_since(v->s, v->study_id, &v->after, 100000,
                                           s_on_point, v);
        if (n < 0) {
            snprintf(err, errsize, "cannot read metrics: %s", store_errmsg(v->s));
            return -1;
        }
        if (n < 100000)
            break;
    }
    store_trial *rows;
    long n = store_trials_load(v->s, v->study_id, &rows);
    if (n < 0) {
        snprintf(err, errsize, "cannot read trials: %s", store_errmsg(v->s));
        return -1;
    }
    for (long i = 0; i < n; i++) {
        w_trial *t = s_trial(v, rows[i].id);
        if (!t)
            break;
        t->have_row = 1;
        t->number = rows[i].number;
        t->attempt = rows[i].attempt;
        t->last_step = rows[i].last_step;
        snprintf(t->state, sizeof t->state, "%s", rows[i].state);
        json_decref(t->params);
        t->params = json_incref(rows[i].params);
        t->value = rows[i].value;
        t->started = rows[i].started;
        t->ended = rows[i].ended;
    }
    store_trials_free(rows, n);
    int rc = s_order(v, err, errsize);
    s_marks(v);
    return rc;
}

/* The display order of the trials with rows (v->sort). */
static int s_order(w_view *v, char *err, size_t errsize)
{
    long *order =
        realloc(v->order, (size_t)(v->ntrials ? v->ntrials : 1) * sizeof *order);
    if (!order) {
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    v->order = order;
    v->norder = 0;
    for (long i = 0; i < v->ntrials; i++)
        if (v->trials[i].have_row)
            v->order[v->norder++] = i;
    s_sort_view = v;
    qsort(v->order, (size_t)v->norder, sizeof *v->order, s_cmp_trials);
    return 0;
}

static int s_is_ended(const char *state)
{
    store_trial_state st;
    return store_trial_state_parse(state, &st) == 0 && store_trial_state_ended(st);
}

typedef struct {
    long done, running, failed, pending, total;
    const w_trial *best;
    double elapsed;
} w_progress;

static void s_progress(const w_view *v, w_progress *p)
{
    memset(p, 0, sizeof *p);
    for (long i = 0; i < v->norder; i++) {
        const w_trial *t = &v->trials[v->order[i]];
        if (s_is_ended(t->state))
            p->done++;
        if (!strcmp(t->state, "running") || !strcmp(t->state, "starting"))
            p->running++;
        else if (!strcmp(t->state, "pending"))
            p->pending++;
        if (!strcmp(t->state, "failed"))
            p->failed++;
        /* the best is the one s_marks found (spec_mark_trials, the one
           definition); several objectives have a Pareto set instead */
        if (t->mark && v->spec && v->spec->nobjectives == 1)
            p->best = t;
    }
    p->total = v->budget > v->norder ? v->budget : v->norder;
    double end =
        v->finished > 0 && strcmp(v->study_state, "running") ? v->finished : util_wall();
    p->elapsed = v->created > 0 ? end - v->created : 0;
}

/* "k=v k=v" of a params object, sorted by key. */
static void s_params_text(const json_t *params, char *buf, size_t size)
{
    buf[0] = 0;
    if (!params)
        return;
    char *text = text_json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *sorted = text ? json_loads(text, 0, NULL) : NULL; /* keys in sorted order */
    free(text);
    size_t len = 0;
    const char *k;
    json_t *x;
    json_object_foreach(sorted, k, x)
    {
        char val[64];
        cli_format_value(x, val, sizeof val);
        int w = snprintf(buf + len, size - len, "%s%s=%s", len ? " " : "", k, val);
        if (w < 0 || (size_t)w >= size - len)
            break;
        len += (size_t)w;
    }
    json_decref(sorted);
}

static void s_num(double x, char *buf, size_t size)
{
    if (wire_is_none(x))
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%.5g", x);
}

/* Sparkline of the objective series into buf (UTF-8 blocks, or ASCII). */
static void s_sparkline(const w_view *v, const w_trial *t, char *buf, size_t size)
{
    static const char *const blocks[8] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                          "\u2585", "\u2586", "\u2587", "\u2588"};
    static const char ascii[] = "_.-:=+*#";
    buf[0] = 0;
    int n = t->nseries;
    if (n == 0)
        return;
    int cells = n < W_SPARK ? n : W_SPARK;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(t->series[i])) {
            lo = fmin(lo, t->series[i]);
            hi = fmax(hi, t->series[i]);
        }
    size_t len = 0;
    for (int c = 0; c < cells; c++) {
        /* the latest point of the cell's share of the series */
        int i = (int)(((long)(c + 1) * n) / cells) - 1;
        double x = t->series[i];
        int level = !isfinite(x) ? -1
                    : hi > lo    ? (int)lrint((x - lo) / (hi - lo) * 7)
                                 : 3;
        const char *glyph = level < 0 ? " "
                            : v->utf8 ? blocks[level]
                                      : (char[2]){ascii[level], 0};
        size_t gl = strlen(glyph);
        if (len + gl + 1 > size)
            break;
        memcpy(buf + len, glyph, gl + 1);
        len += gl;
    }
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
    const char *eq = strchr(arg, '=');
    char key[64];
    if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof key) {
        snprintf(v->status, sizeof v->status, "expected KEY=VALUE, got \"%.100s\"", arg);
        return -1;
    }
    memcpy(key, arg, (size_t)(eq - arg));
    key[eq - arg] = 0;
    if (!spec_valid_name(key)) {
        snprintf(v->status, sizeof v->status, "\"%s\" is not a parameter name", key);
        return -1;
    }
    const char *val = eq + 1;
    char *end;
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
                w_trial *t = s_trial(v, p->trial);
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

/* ---- the ncurses view ---- */

enum { C_RUN = 1, C_DONE, C_FAIL, C_STOP, C_HEAD, C_SEL };

/* Writes ASCII text at (y, x), clipped to the screen width. */
static void s_put(int y, int x, const char *text)
{
    if (y < 0 || y >= LINES || x >= COLS)
        return;
    mvaddnstr(y, x, text, COLS - x);
}

/* s_put for text that may not fit (params, a trial's line): cut with
   "..." at the screen's edge, so a cut never looks like the end. */
static void s_put_cut(int y, int x, const char *text)
{
    int room = COLS - x;
    if (y < 0 || y >= LINES || room <= 0)
        return;
    if ((int)strlen(text) <= room || room <= 3) {
        mvaddnstr(y, x, text, room);
        return;
    }
    mvaddnstr(y, x, text, room - 3);
    addstr("...");
}

/* The first of `n` candidate lines (widest first) that fits `cols`
   columns, else the last. */
static const char *s_fit(char cand[][256], int n, int cols)
{
    for (int i = 0; i < n; i++)
        if ((int)strlen(cand[i]) <= cols)
            return cand[i];
    return cand[n - 1];
}

static const w_trial *s_selected(const w_view *v, long *index)
{
    for (long i = 0; i < v->norder; i++)
        if (v->trials[v->order[i]].id == v->sel_id) {
            if (index)
                *index = i;
            return &v->trials[v->order[i]];
        }
    return NULL;
}

/* Keeps a valid selection: the first running trial, else the first. */
static void s_fix_selection(w_view *v)
{
    if (s_selected(v, NULL) || v->norder == 0)
        return;
    v->sel_id = v->trials[v->order[0]].id;
    for (long i = 0; i < v->norder; i++)
        if (!strcmp(v->trials[v->order[i]].state, "running")) {
            v->sel_id = v->trials[v->order[i]].id;
            break;
        }
}

/* The two metrics shown next to the objective. */
static int s_columns(const w_view *v, int cols[2])
{
    static const char *const prefer[] = {"val_loss", "train_loss", "loss",
                                         "val_acc",  "lr",         "batch_size"};
    int n = 0;
    for (size_t p = 0; p < sizeof prefer / sizeof prefer[0] && n < 2; p++)
        for (int i = 0; i < v->nnames; i++)
            if (!strcmp(v->names[i], prefer[p]))
                cols[n++] = i;
    for (int i = 0; i < v->nnames && n < 2; i++)
        if (n == 0 || cols[0] != i)
            cols[n++] = i;
    return n;
}

static int s_state_color(const char *state)
{
    if (!strcmp(state, "running") || !strcmp(state, "starting"))
        return C_RUN;
    if (!strcmp(state, "completed"))
        return C_DONE;
    if (!strcmp(state, "failed"))
        return C_FAIL;
    if (!strcmp(state, "stopped") || !strcmp(state, "pruned"))
        return C_STOP;
    return 0;
}

static void s_draw(w_view *v)
{
    erase();
    char line[1024], a[64], b[64];
    w_progress p;
    s_progress(v, &p);
    cli_format_elapsed(p.elapsed, a, sizeof a);
    /* the header, as wide as the terminal allows (80 columns take the
       narrowest): narrower gaps, then no "jizhi watch" */
    char head[5][256];
    static const char *const gap[4] = {"   ", "  ", "  ", " "};
    for (int k = 0; k < 4; k++)
        snprintf(
            head[k], sizeof head[k],
            "%s%s [%s]%sdone %ld/%ld%srunning %ld%spending %ld%sfailed %ld%selapsed %s",
            k < 2 ? "jizhi watch  " : "", v->name, v->study_state, gap[k], p.done,
            p.total, gap[k], p.running, gap[k], p.pending, gap[k], p.failed, gap[k], a);
    snprintf(head[4], sizeof head[4], "%s [%s] done %ld/%ld run %ld pend %ld fail %ld %s",
             v->name, v->study_state, p.done, p.total, p.running, p.pending, p.failed, a);
    attron(A_BOLD);
    s_put(0, 0, s_fit(head, 5, COLS));
    attroff(A_BOLD);
    char params[512];
    if (p.best) {
        s_params_text(p.best->params, params, sizeof params);
        s_num(p.best->value, b, sizeof b);
        snprintf(line, sizeof line, "objective: %s %s   best %s = %s (trial %ld)  %s",
                 v->maximize ? "max" : "min", v->metric, v->metric, b, p.best->id,
                 params);
    } else {
        snprintf(line, sizeof line, "objective: %s %s   best: none completed yet",
                 v->maximize ? "max" : "min", v->metric);
    }
    s_put_cut(1, 0, line);
    if (v->warning[0]) {
        snprintf(line, sizeof line, "warning: %s", v->warning);
        attron(COLOR_PAIR(C_STOP));
        s_put(2, 0, line);
        attroff(COLOR_PAIR(C_STOP));
    }

    /* table: ID STATE STEP TIME objective [metric] [metric] CURVE PARAMS */
    int cols[2];
    int ncols = s_columns(v, cols);
    const int y0 = 3, x_state = 13, x_step = 23, x_time = 31, x_obj = 41;
    /* narrow terminals keep room for the params: fewer metric columns,
       then no curve */
    enum { W_PARAMS_MIN = 24 };
    while (ncols > 0 && x_obj + 12 * (1 + ncols) + W_SPARK + 2 > COLS - W_PARAMS_MIN)
        ncols--;
    const int spark_w = x_obj + 12 + W_SPARK + 2 > COLS - W_PARAMS_MIN ? 0 : W_SPARK + 2;
    const int x_spark = x_obj + 12 * (1 + ncols), x_params = x_spark + spark_w;
    attron(A_BOLD | COLOR_PAIR(C_HEAD));
    s_put(y0, 1, "ID");
    s_put(y0, x_state, "STATE");
    s_put(y0, x_step, "   STEP");
    s_put(y0, x_time, "TIME");
    for (int k = 0; k <= ncols; k++) {
        snprintf(line, sizeof line, "%11.11s",
                 k == 0 ? v->metric : v->names[cols[k - 1]]);
        s_put(y0, x_obj + 12 * k, line);
    }
    if (spark_w)
        s_put(y0, x_spark, "CURVE");
    s_put(y0, x_params, "PARAMS");
    attroff(A_BOLD | COLOR_PAIR(C_HEAD));
    int rows = LINES - y0 - 1 - 3;
    long sel = 0;
    s_selected(v, &sel);
    if (rows > 0) {
        if (sel < v->top)
            v->top = sel;
        if (sel >= v->top + rows)
            v->top = sel - rows + 1;
        if (v->top > v->norder - rows)
            v->top = v->norder - rows > 0 ? v->norder - rows : 0;
    }
    double now = util_wall();
    for (int r = 0; r < rows && v->top + r < v->norder; r++) {
        const w_trial *t = &v->trials[v->order[v->top + r]];
        int y = y0 + 1 + r;
        int is_sel = t->id == v->sel_id;
        if (is_sel) {
            attron(A_REVERSE);
            mvhline(y, 0, ' ', COLS); /* the bar spans the whole line */
        }
        /* the mark: the Pareto set, or the best feasible trial (a plain
           study's best is in the header line) */
        int marked =
            t->mark && v->spec && (v->spec->nobjectives > 1 || v->spec->nconstraints);
        snprintf(line, sizeof line, "%c%-6ld%s", is_sel ? '>' : ' ', t->id,
                 marked          ? (v->utf8 ? "\u25c6" : "*")
                 : t->infeasible ? "x"
                                 : "");
        s_put(y, 0, line);
        int paused = t->paused && !strcmp(t->state, "running");
        int color = paused ? C_STOP : s_state_color(t->state);
        if (color)
            attron(COLOR_PAIR(color));
        s_put(y, x_state, paused ? "paused" : t->state);
        if (color)
            attroff(COLOR_PAIR(color));
        long st = t->m_step >= 0 ? t->m_step : t->last_step;
        if (st >= 0)
            snprintf(line, sizeof line, "%7ld", st);
        else
            snprintf(line, sizeof line, "%7s", "-");
        s_put(y, x_step, line);
        double run = t->started > 0 ? (t->ended > 0 ? t->ended : now) - t->started : -1;
        if (run >= 0)
            cli_format_elapsed(run, a, sizeof a);
        else
            snprintf(a, sizeof a, "-");
        s_put(y, x_time, a);
        for (int k = 0; k <= ncols; k++) {
            s_num(k == 0 ? t->mval[W_MAX_NAMES] : t->mval[cols[k - 1]], b, sizeof b);
            snprintf(line, sizeof line, "%11.11s", b);
            s_put(y, x_obj + 12 * k, line);
        }
        char spark[W_SPARK * 4 + 1];
        s_sparkline(v, t, spark, sizeof spark);
        if (spark_w && x_spark + W_SPARK <= COLS)
            mvaddstr(y, x_spark, spark);
        s_params_text(t->params, params, sizeof params);
        s_put_cut(y, x_params, params);
        if (is_sel)
            attroff(A_REVERSE);
    }
    if (v->norder == 0)
        s_put(y0 + 1, 1, "(no trials yet)");

    /* the selected trial, the status line, the keys */
    const w_trial *t = s_selected(v, NULL);
    if (t) {
        s_params_text(t->params, params, sizeof params);
        size_t len =
            (size_t)snprintf(line, sizeof line, "trial %ld (try %ld, %s): %s |", t->id,
                             t->attempt + 1, /* runs from 1, as TRY in `trial list` */
                             t->state, params[0] ? params : "no params");
        for (int k = 0; k <= W_MAX_NAMES && len < sizeof line - 1; k++) {
            if (k < W_MAX_NAMES && k >= v->nnames)
                continue;
            if (wire_is_none(t->mval[k]))
                continue;
            s_num(t->mval[k], a, sizeof a);
            int w = snprintf(line + len, sizeof line - len, " %s=%s",
                             k == W_MAX_NAMES ? v->metric : v->names[k], a);
            if (w < 0)
                break;
            len += (size_t)w;
        }
        s_put_cut(LINES - 3, 0, line);
    }
    if (v->mode == W_EDIT) {
        snprintf(line, sizeof line,
                 "set on trial %ld, KEY=VALUE... (Enter to send, Esc to cancel): %s",
                 v->sel_id, v->edit);
        attron(A_BOLD);
        s_put(LINES - 2, 0, line);
        attroff(A_BOLD);
    } else if (v->mode == W_CONFIRM) {
        if (!strcmp(v->action, "set"))
            snprintf(line, sizeof line, "set %s on trial %ld? (y/n)", v->edit, v->sel_id);
        else
            snprintf(line, sizeof line, "%s trial %ld? (y/n)", v->action, v->sel_id);
        attron(A_BOLD);
        s_put(LINES - 2, 0, line);
        attroff(A_BOLD);
    } else {
        s_put_cut(LINES - 2, 0, v->status);
    }
    /* the keys: every one of them, also in 80 columns */
    char keys[3][256] = {
        "up/down j/k select   s stop   p pause   r resume   e set KEY=VALUE   o sort   "
        "q quit",
        "j/k select  s stop  p pause  r resume  e set KEY=VALUE  o sort  q quit",
        "j/k sel s stop p pause r resume e set o sort q quit"};
    attron(A_DIM);
    s_put(LINES - 1, 0, s_fit(keys, 3, COLS));
    attroff(A_DIM);
    if (v->mode == W_EDIT) {
        curs_set(1);
        int x = snprintf(
            NULL, 0, "set on trial %ld, KEY=VALUE... (Enter to send, Esc to cancel): %s",
            v->sel_id, v->edit);
        move(LINES - 2, x < COLS ? x : COLS - 1);
    } else {
        curs_set(0);
    }
    refresh();
}

static void s_move(w_view *v, long delta)
{
    long i = 0;
    if (!s_selected(v, &i) || v->norder == 0)
        return;
    i += delta;
    if (i < 0)
        i = 0;
    if (i >= v->norder)
        i = v->norder - 1;
    v->sel_id = v->trials[v->order[i]].id;
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
        s_move(v, -1);
        break;
    case KEY_DOWN:
    case 'j':
        s_move(v, 1);
        break;
    case KEY_PPAGE:
        s_move(v, -(LINES > 10 ? LINES - 8 : 1));
        break;
    case KEY_NPAGE:
        s_move(v, LINES > 10 ? LINES - 8 : 1);
        break;
    case 'o':
        v->sort = (v->sort + 1) % W_SORTS;
        s_sort_view = v;
        qsort(v->order, (size_t)v->norder, sizeof *v->order, s_cmp_trials);
        snprintf(v->status, sizeof v->status, "sorted by %s", s_sort_names[v->sort]);
        break;
    case KEY_HOME:
    case 'g':
        s_move(v, -v->norder);
        break;
    case KEY_END:
    case 'G':
        s_move(v, v->norder);
        break;
    case 's':
    case 'p':
    case 'r':
    case 'e': {
        const w_trial *t = s_selected(v, NULL);
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
    if (has_colors()) {
        start_color();
        use_default_colors();
        init_pair(C_RUN, COLOR_GREEN, -1);
        init_pair(C_DONE, COLOR_CYAN, -1);
        init_pair(C_FAIL, COLOR_RED, -1);
        init_pair(C_STOP, COLOR_YELLOW, -1);
        init_pair(C_HEAD, COLOR_BLUE, -1);
    }
    int rc = CLI_OK;
    char err[512] = "";
    double next = 0;
    while (!s_quit) {
        double now = util_now();
        if (now >= next) {
            if (s_load(v, err, sizeof err) != 0) {
                rc = CLI_FAIL;
                break;
            }
            s_fix_selection(v);
            next = now + v->interval;
        }
        s_replies(v);
        int quit = 0, ch;
        while (!quit && (ch = getch()) != ERR)
            quit = s_key(v, ch);
        if (quit)
            break;
        s_draw(v);
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
        if (s_load(v, err, sizeof err) != 0) {
            cli_error("watch: %s", err);
            return CLI_FAIL;
        }
        if (strcmp(v->warning, warned)) {
            printf("warning: %s\n", v->warning);
            snprintf(warned, sizeof warned, "%s", v->warning);
        }
        for (long i = 0; i < v->norder; i++) {
            w_trial *t = &v->trials[v->order[i]];
            if (!strcmp(t->shown_state, t->state))
                continue;
            char params[512], val[64];
            s_params_text(t->params, params, sizeof params);
            s_num(!wire_is_none(t->value) ? t->value : t->mval[W_MAX_NAMES], val,
                  sizeof val);
            printf("trial %ld %s step %ld %s=%s  %s\n", t->id, t->state,
                   t->m_step >= 0 ? t->m_step : t->last_step, v->metric, val, params);
            snprintf(t->shown_state, sizeof t->shown_state, "%s", t->state);
        }
        w_progress p;
        s_progress(v, &p);
        char best[256] = "none yet";
        if (p.best) {
            char b[64];
            s_num(p.best->value, b, sizeof b);
            snprintf(best, sizeof best, "%s (trial %ld)", b, p.best->id);
        }
        snprintf(line, sizeof line,
                 "study %s %s: done %ld/%ld, running %ld, failed %ld, best %s%s %s",
                 v->name, v->study_state, p.done, p.total, p.running, p.failed,
                 v->spec && v->spec->nconstraints ? "feasible " : "", v->metric, best);
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
        if (strcmp(v->study_state, "running") || s_quit)
            return CLI_OK;
        usleep((useconds_t)(v->interval * 1e6));
    }
}

int cmd_watch(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"controller", required_argument, 0, 'c'},
                                         {"interval", required_argument, 0, 'i'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    w_view v;
    memset(&v, 0, sizeof v);
    v.interval = 1.0;
    v.next_req = 1;
    v.cache = -1;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            v.db = optarg;
            break;
        case 'c':
            v.controller = optarg;
            break;
        case 'i': {
            char *end;
            v.interval = strtod(optarg, &end);
            if (*end || !(v.interval >= 0.05 && v.interval <= 3600)) {
                cli_error(
                    "--interval: expected seconds between 0.05 and 3600, got \"%s\"",
                    optarg);
                return CLI_USAGE;
            }
            break;
        }
        case 'h':
            fputs(s_usage, stdout);
            return CLI_OK;
        default:
            fputs(s_usage, stderr);
            return CLI_USAGE;
        }
    }
    if (argc - optind != 1) {
        cli_error("watch: expected STUDY");
        fputs(s_usage, stderr);
        return CLI_USAGE;
    }
    v.name = argv[optind];
    cli_opts o = {.db = cli_db_path(v.db), .controller = v.controller};
    v.db = o.db;
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
        s_name_index(&v, k < v.spec->nobjectives
                             ? v.spec->objectives[k].metric
                             : v.spec->constraints[k - v.spec->nobjectives].metric);
    json_decref(d);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

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
