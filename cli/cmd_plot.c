/*  cmd_plot.c - `jizhi plot STUDY`: one self-contained SVG file, readable
    in any browser with no other tool, with two panels:

      history  the objective of every trial with one by trial number:
               completed ones (<circle class="point" data-trial=ID>),
               stopped ones at their last value (<path class="stopped-point">,
               a cross), running ones at their latest (<circle
               class="running-point">, hollow), and the best so far as a
               step line (<path class="best">);
      curves   the objective (or --metric) of every trial's latest attempt
               against the step, the time since the trial's first point, or
               another metric such as epoch or samples (--x; samples falls
               back to batch_size summed over the steps), one <polyline
               class="curve" id="trial-ID" data-trial=ID> per trial (empty
               points when it reported nothing yet; long curves thinned to
               2000 vertices), coloured by the trial's objective (dark is
               better, the best in red and on top), dashed when stopped or
               failed; live changes and scheduler stops marked on the curve
               where they happened (<path class="intervention">). The y
               range covers the quantiles 2-98 % of the curves' second
               halves (--full-y: everything), so early transients do not
               squash the part that matters; --log-y for a log scale.

    It reads the database file only, so it works with or without a
    controller. Every piece of text from the study is XML-escaped.
*/
#include "cli.h"

#include "../common/spec.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char s_usage[] =
    "usage: jizhi plot STUDY [--db FILE] [--output FILE.svg] [--metric NAME]\n"
    "                  [--x step|time|METRIC] [--log-y] [--full-y]\n"
    "Writes an SVG of the optimisation history (every trial's objective and the\n"
    "best so far) and the learning curves (objective, or --metric, against the\n"
    "step, the seconds since the trial's first point, or another metric such as\n"
    "epoch or samples (without a samples metric: batch_size summed over the\n"
    "steps); coloured by objective, interventions marked). The y range\n"
    "follows the curves' tails unless --full-y. Default output: STUDY.svg;\n"
    "--output - writes to stdout.\n";

/* Geometry (SVG user units). */
enum {
    P_W = 1120,    /* image width (the legend needs 320 px right of the plots) */
    P_LEFT = 90,   /* plot area left edge */
    P_RIGHT = 780, /* plot area right edge; the legend is to its right */
    P_PH = 360,    /* plot area height */
    P_TOP1 = 70,   /* first panel's plot area top */
    P_TOP2 = 540,  /* second panel's */
    P_H = 970,     /* image height */
    P_LEGEND_MAX = 24,
    P_MAX_VERTICES = 2000 /* per learning curve */
};

typedef struct {
    double lo, hi; /* data range shown */
    /* pixels: x from px0 (at lo) to px1, y from py0 (at lo) to py1 */
    double px0, px1, py0, py1;
} p_axis;

static void s_xml(FILE *f, const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        switch (*p) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&apos;", f);
            break;
        default:
            /* control characters are not allowed in XML 1.0 */
            if (*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r')
                fputc('?', f);
            else
                fputc(*p, f);
        }
    }
}

/* A range with a little room, never empty. */
static void s_range(double *lo, double *hi, double pad)
{
    if (!isfinite(*lo) || !isfinite(*hi)) {
        *lo = 0;
        *hi = 1;
        return;
    }
    if (*hi - *lo <= 0) {
        double d = fabs(*lo) > 0 ? fabs(*lo) * 0.1 : 1;
        *lo -= d;
        *hi += d;
        return;
    }
    double d = (*hi - *lo) * pad;
    *lo -= d;
    *hi += d;
}

static double s_px(const p_axis *a, double x)
{
    return a->px0 + (x - a->lo) / (a->hi - a->lo) * (a->px1 - a->px0);
}

static double s_py(const p_axis *a, double y)
{
    return a->py0 + (y - a->lo) / (a->hi - a->lo) * (a->py1 - a->py0);
}

/* A 1-2-5 tick step giving about n ticks over [lo, hi]. */
static double s_tick_step(double lo, double hi, int n)
{
    double raw = (hi - lo) / n;
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

/* Ticks, grid lines and tick labels of both axes of one panel. */
static void s_axes(FILE *f, const p_axis *x, const p_axis *y, int integer_x, int log_y)
{
    fprintf(f, "<g class=\"axes\">\n");
    fprintf(f,
            "<rect class=\"frame\" x=\"%d\" y=\"%.2f\" width=\"%d\" height=\"%d\" "
            "fill=\"none\" "
            "stroke=\"#444\"/>\n",
            P_LEFT, y->py1, P_RIGHT - P_LEFT, P_PH);
    double step = s_tick_step(x->lo, x->hi, 8);
    if (integer_x && step < 1)
        step = 1;
    for (double t = ceil(x->lo / step) * step; t <= x->hi + step * 1e-9; t += step) {
        double px = s_px(x, t);
        fprintf(f,
                "<line class=\"grid\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
                "stroke=\"#ddd\"/>\n",
                px, y->py0, px, y->py1);
        fprintf(f,
                "<line class=\"tick\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
                "stroke=\"#444\"/>\n",
                px, y->py0, px, y->py0 + 5);
        fprintf(f,
                "<text class=\"tick-label\" x=\"%.2f\" y=\"%.2f\" "
                "text-anchor=\"middle\">%.6g</text>\n",
                px, y->py0 + 18, fabs(t) < step * 1e-9 ? 0.0 : t);
    }
    step = s_tick_step(y->lo, y->hi, 6);
    for (double t = ceil(y->lo / step) * step; t <= y->hi + step * 1e-9; t += step) {
        double py = s_py(y, t);
        fprintf(f,
                "<line class=\"grid\" x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" "
                "stroke=\"#ddd\"/>\n",
                P_LEFT, py, P_RIGHT, py);
        fprintf(f,
                "<line class=\"tick\" x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" "
                "stroke=\"#444\"/>\n",
                P_LEFT - 5, py, P_LEFT, py);
        fprintf(f,
                "<text class=\"tick-label\" x=\"%d\" y=\"%.2f\" "
                "text-anchor=\"end\">%.*g</text>\n",
                P_LEFT - 8, py + 4, log_y ? 3 : 6,
                log_y                   ? pow(10, t)
                : fabs(t) < step * 1e-9 ? 0.0
                                        : t);
    }
    fprintf(f, "</g>\n");
}

static void s_labels(FILE *f, int top, const char *title, const char *xlabel,
                     const char *ylabel)
{
    fprintf(f,
            "<text class=\"panel-title\" x=\"%d\" y=\"%d\" font-size=\"16\" "
            "font-weight=\"bold\">",
            P_LEFT, top - 14);
    s_xml(f, title);
    fprintf(
        f,
        "</text>\n<text class=\"axis-label\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">",
        (P_LEFT + P_RIGHT) / 2, top + P_PH + 40);
    s_xml(f, xlabel);
    fprintf(
        f,
        "</text>\n<text class=\"axis-label\" x=\"%d\" y=\"%d\" text-anchor=\"middle\" "
        "transform=\"rotate(-90 %d %d)\">",
        24, top + P_PH / 2, 24, top + P_PH / 2);
    s_xml(f, ylabel);
    fputs("</text>\n", f);
}

/* Colour for u in [0, 1], 0 = worst, 1 = best: light grey-blue to dark blue. */
static void s_ramp(double u, char *buf, size_t size)
{
    static const int stops[][3] = {
        {186, 186, 214}, {107, 174, 214}, {33, 113, 181}, {8, 48, 107}};
    u = u < 0 ? 0 : u > 1 ? 1 : u;
    double x = u * 3;
    int i = x >= 3 ? 2 : (int)x;
    double f = x - i;
    int c[3];
    for (int k = 0; k < 3; k++)
        c[k] = (int)lround(stops[i][k] + (stops[i + 1][k] - stops[i][k]) * f);
    snprintf(buf, size, "#%02x%02x%02x", c[0], c[1], c[2]);
}

static void s_params_title(FILE *f, const json_t *params)
{
    char *text = text_json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
    if (text)
        s_xml(f, text);
    free(text);
}

/* One trial's learning curve (latest attempt): x, y and wall time. */
typedef struct {
    double *x, *y, *t;
    long n, cap;
} p_curve;

static int s_curve_add(void *arg, const store_metric_row *r)
{
    p_curve *c = arg;
    if (!isfinite(r->value))
        return 0;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 256;
        c->x = realloc(c->x, (size_t)c->cap * sizeof *c->x);
        c->y = realloc(c->y, (size_t)c->cap * sizeof *c->y);
        c->t = realloc(c->t, (size_t)c->cap * sizeof *c->t);
        if (!c->x || !c->y || !c->t)
            return 1;
    }
    c->x[c->n] = (double)r->step;
    c->y[c->n] = r->value;
    c->t[c->n] = r->time;
    c->n++;
    return 0;
}

static void s_curve_free(p_curve *c)
{
    free(c->x);
    free(c->y);
    free(c->t);
}

/* Moves x from steps to what --x asks: seconds since the first point, or
   the value of metric `xs` (the other curve, by step) interpolated. */
static void s_curve_remap(p_curve *c, const char *xaxis, const p_curve *xs)
{
    if (!strcmp(xaxis, "step"))
        return;
    long k = 0;
    for (long i = 0; i < c->n; i++) {
        double x;
        if (!strcmp(xaxis, "time")) {
            x = c->t[i] - c->t[0];
        } else {
            if (!xs || xs->n == 0)
                continue;
            double st = c->x[i];
            long lo = 0, hi = xs->n - 1;
            if (st <= xs->x[0])
                x = xs->y[0];
            else if (st >= xs->x[hi])
                x = xs->y[hi];
            else {
                while (hi - lo > 1) {
                    long m = (lo + hi) / 2;
                    if (xs->x[m] <= st)
                        lo = m;
                    else
                        hi = m;
                }
                double d = xs->x[hi] - xs->x[lo];
                x = xs->y[lo] +
                    (d > 0 ? (st - xs->x[lo]) / d : 0) * (xs->y[hi] - xs->y[lo]);
            }
        }
        c->x[k] = x;
        c->y[k] = c->y[i];
        c->t[k] = c->t[i];
        k++;
    }
    c->n = k;
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A trial's objective for colour and history: its result, else its latest. */
static double s_score(const store_trial *t)
{
    return isfinite(t->value) ? t->value : t->last_value;
}

typedef struct {
    const char *metric, *curve_metric, *xaxis;
    int maximize, log_y, full_y;
    json_t *front; /* several objectives or constraints: {"ID": true} for the trials
                      on the Pareto set (or the best feasible one), else NULL */
} p_opts;

static void s_history(FILE *f, store_trial *rows, long n, const p_opts *o)
{
    long ncomp = 0, nstop = 0, nrun = 0, npruned = 0;
    double vlo = INFINITY, vhi = -INFINITY, nlo = INFINITY, nhi = -INFINITY;
    for (long i = 0; i < n; i++) {
        double v = s_score(&rows[i]);
        if (!isfinite(v) || rows[i].state == TRIAL_FAILED ||
            rows[i].state == TRIAL_PENDING)
            continue;
        vlo = fmin(vlo, v);
        vhi = fmax(vhi, v);
        nlo = fmin(nlo, (double)rows[i].number);
        nhi = fmax(nhi, (double)rows[i].number);
    }
    p_axis x = {nlo - 0.5, nhi + 0.5, P_LEFT, P_RIGHT, 0, 0};
    if (!isfinite(nlo))
        x.lo = -0.5, x.hi = 0.5;
    p_axis y = {vlo, vhi, 0, 0, P_TOP1 + P_PH, P_TOP1};
    s_range(&y.lo, &y.hi, 0.05);
    fprintf(f, "<g id=\"history\" class=\"panel\">\n");
    s_labels(f, P_TOP1, "Optimisation history", "trial (its number in the study)",
             o->metric);
    s_axes(f, &x, &y, 1, 0);
    double best = NAN;
    int first = 1;
    for (long i = 0; i < n; i++) {
        store_trial *t = &rows[i];
        double v = s_score(t);
        if (!isfinite(v) || t->state == TRIAL_FAILED || t->state == TRIAL_PENDING)
            continue;
        double px = s_px(&x, (double)t->number), py = s_py(&y, v);
        const char *state = store_trial_state_name(t->state);
        int completed = t->state == TRIAL_COMPLETED && isfinite(t->value);
        int pruned = t->state == TRIAL_PRUNED; /* by early stopping */
        int stopped = pruned || t->state == TRIAL_STOPPED;
        char key[32];
        snprintf(key, sizeof key, "%ld", t->id);
        int on_front = completed && json_object_get(o->front, key);
        if (on_front) /* a ring around the point */
            fprintf(f,
                    "<circle class=\"pareto\" data-trial=\"%ld\" cx=\"%.2f\" "
                    "cy=\"%.2f\" r=\"7\" fill=\"none\" stroke=\"#9467bd\" "
                    "stroke-width=\"2\"/>\n",
                    t->id, px, py);
        if (completed) {
            ncomp++;
            fprintf(f,
                    "<circle class=\"point\" data-trial=\"%ld\" cx=\"%.2f\" cy=\"%.2f\" "
                    "r=\"4\" fill=\"#1f77b4\"><title>trial %ld (no. %ld in the study): "
                    "%.6g %s",
                    t->id, px, py, t->id, t->number, v, on_front ? "(Pareto set) " : "");
        } else if (stopped) {
            nstop += !pruned;
            npruned += pruned;
            fprintf(f,
                    "<path class=\"%s-point\" data-trial=\"%ld\" d=\"M%.2f %.2f l8 8 "
                    "m0 -8 l-8 8\" stroke=\"%s\" stroke-width=\"2\"><title>trial %ld "
                    "(no. %ld in the study) %s at %.6g: ",
                    state, t->id, px - 4, py - 4, pruned ? "#8c564b" : "#d9822b", t->id,
                    t->number, state, v);
            s_xml(f, t->reason);
            fputc(' ', f);
        } else {
            nrun++;
            fprintf(f,
                    "<circle class=\"running-point\" data-trial=\"%ld\" cx=\"%.2f\" "
                    "cy=\"%.2f\" r=\"4\" fill=\"none\" stroke=\"#2ca25f\" "
                    "stroke-width=\"1.5\"><title>trial %ld (no. %ld in the study) %s, "
                    "latest %.6g ",
                    t->id, px, py, t->id, t->number, state, v);
        }
        s_params_title(f, t->params);
        fputs(completed ? "</title></circle>\n"
              : stopped ? "</title></path>\n"
                        : "</title></circle>\n",
              f);
    }
    /* best so far, over the completed trials, as a step line */
    fputs("<path class=\"best\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" d=\"",
          f);
    double last_px = 0;
    for (long i = 0; i < n; i++) {
        if (!spec_best_counts(store_trial_state_name(rows[i].state), rows[i].value, 1))
            continue; /* the one definition of best */
        double v = rows[i].value;
        last_px = s_px(&x, (double)rows[i].number);
        if (isnan(best) || (o->maximize ? v > best : v < best)) {
            if (first)
                fprintf(f, "M%.2f %.2f", last_px, s_py(&y, v));
            else
                fprintf(f, " H%.2f V%.2f", last_px, s_py(&y, v));
            first = 0;
            best = v;
        }
    }
    if (!first)
        fprintf(f, " H%.2f", s_px(&x, nhi));
    fputs("\"/>\n", f);
    if (!isfinite(nlo))
        fprintf(f,
                "<text class=\"empty\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">no trial "
                "has a value yet</text>\n",
                (P_LEFT + P_RIGHT) / 2, P_TOP1 + P_PH / 2);
    int lx = P_RIGHT + 20, ly = P_TOP1 + 10;
    fprintf(f,
            "<g class=\"legend\">\n"
            "<circle cx=\"%d\" cy=\"%d\" r=\"4\" fill=\"#1f77b4\"/>"
            "<text x=\"%d\" y=\"%d\">completed (%ld)</text>\n"
            "<path d=\"M%d %d l8 8 m0 -8 l-8 8\" stroke=\"#d9822b\" stroke-width=\"2\"/>"
            "<text x=\"%d\" y=\"%d\">stopped by a person, last value (%ld)</text>\n"
            "<circle cx=\"%d\" cy=\"%d\" r=\"4\" fill=\"none\" stroke=\"#2ca25f\"/>"
            "<text x=\"%d\" y=\"%d\">running, latest (%ld)</text>\n"
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#d62728\" "
            "stroke-width=\"2\"/><text x=\"%d\" y=\"%d\">best so far</text>\n",
            lx + 8, ly, lx + 22, ly + 4, ncomp, lx + 4, ly + 16, lx + 22, ly + 24, nstop,
            lx + 8, ly + 40, lx + 22, ly + 44, nrun, lx, ly + 60, lx + 16, ly + 60,
            lx + 22, ly + 64);
    (void)last_px;
    fprintf(f,
            "<path d=\"M%d %d l8 8 m0 -8 l-8 8\" stroke=\"#8c564b\" "
            "stroke-width=\"2\"/><text x=\"%d\" y=\"%d\">pruned (early stopping), last "
            "value (%ld)</text>\n",
            lx + 4, ly + 76, lx + 22, ly + 84, npruned);
    ly += 20;
    if (o->front)
        fprintf(f,
                "<circle cx=\"%d\" cy=\"%d\" r=\"7\" fill=\"none\" "
                "stroke=\"#9467bd\" stroke-width=\"2\"/><text x=\"%d\" y=\"%d\">%s "
                "(%zu)</text>\n",
                lx + 8, ly + 80, lx + 22, ly + 84,
                json_object_size(o->front) > 1 ? "Pareto set" : "best feasible",
                json_object_size(o->front));
    fprintf(f, "</g>\n</g>\n"); /* the legend, the panel */
}

/* The kinds of marks on the curves, each with its own colour and legend
   line (the order of the legend). */
enum {
    P_MARK_CHANGE,
    P_MARK_STOP,
    P_MARK_PRUNE,
    P_MARK_PBT,
    P_MARK_BATCH,
    P_MARK_SCHED,
    P_MARKS
};
static const struct {
    const char *cls, *color, *label;
} s_marks[P_MARKS] = {
    {"change", "#111", "a person's change (set, pause, release, resume)"},
    {"stop", "#d9822b", "stopped by a person"},
    {"prune", "#8c564b", "pruned by early stopping"},
    {"pbt", "#9467bd", "PBT: checkpoint, exploit, explore"},
    {"batch", "#2ca02c", "batch-size scheduler"},
    {"sched", "#555", "other scheduler decisions"},
};

/* A mark: its kind (P_MARK_*), what it says and who did it (borrowed). */
typedef struct {
    int kind;
    const char *what, *who;
} p_mark;

/* 1 when someone (not a scheduler) gave the instruction: cli, cli:USER,
   web:USER. */
static int s_by_person(const char *who)
{
    return who && (!strncmp(who, "cli", 3) || !strncmp(who, "web:", 4));
}

static const char *s_ev_kind(const json_t *e)
{
    const char *k = json_string_value(json_object_get(e, "kind"));
    return k ? k : "";
}

/* 1 when e is an instruction of kind `what`. */
static int s_is_instr(const json_t *e, const char *what)
{
    const char *w =
        json_string_value(json_object_get(json_object_get(e, "detail"), "kind"));
    return !strcmp(s_ev_kind(e), "instruction") && w && !strcmp(w, what);
}

/* 1 when e turns its trial's course: it ended, was suspended (a release)
   or started again (a retry, a resume). */
static int s_is_turn(const json_t *e)
{
    static const char *const turns[] = {"stopped", "pruned",    "completed",
                                        "failed",  "suspended", "retry"};
    for (size_t k = 0; k < sizeof turns / sizeof *turns; k++)
        if (!strcmp(s_ev_kind(e), turns[k]))
            return 1;
    return 0;
}

static int s_is_checkpoint_instr(const json_t *e)
{
    return s_is_instr(e, "checkpoint");
}

static int s_is_stop_instr(const json_t *e)
{
    return s_is_instr(e, "stop");
}

static int s_is_checkpoint_or_stop_instr(const json_t *e)
{
    return s_is_checkpoint_instr(e) || s_is_stop_instr(e);
}

/* The index of the first event of e's trial after (dir 1) or before (dir
   -1) index i that `pick` takes, or -1. */
static long s_find(const json_t *events, size_t i, int dir, int (*pick)(const json_t *))
{
    json_t *tj = json_object_get(json_array_get(events, i), "trial");
    for (long k = (long)i + dir; k >= 0 && k < (long)json_array_size(events); k += dir) {
        const json_t *x = json_array_get(events, (size_t)k);
        if (json_equal(json_object_get(x, "trial"), tj) && pick(x))
            return k;
    }
    return -1;
}

/* 1 when event i is the stop of a pause --release (a person's or the
   queue's): the trial was suspended by it, not ended. */
static int s_is_release_stop(const json_t *events, size_t i)
{
    if (!s_is_instr(json_array_get(events, i), "stop"))
        return 0;
    long k = s_find(events, i, 1, s_is_turn);
    return k >= 0 && !strcmp(s_ev_kind(json_array_get(events, (size_t)k)), "suspended");
}

/* The mark of event i into *m: 0, or -1 for none. Only what happened is
   marked: an instruction the trial refused, that timed out, was withdrawn
   or is still pending is not. A pause --release is one mark, "release",
   at its stop (its checkpoint is not marked, the stop is not a stop), by
   whoever asked for the checkpoint; the resume that starts the trial again
   is "resume", by the same. A trial's end as stopped or pruned is not
   marked again when a stop instruction of that trial was (each stop
   counts once). */
static int s_mark_of(const json_t *events, size_t i, p_mark *m)
{
    const json_t *e = json_array_get(events, i);
    const char *kind = s_ev_kind(e);
    if (!json_is_integer(json_object_get(e, "trial")))
        return -1;
    m->who = json_string_value(json_object_get(e, "who"));
    m->what = kind;
    if (!strcmp(kind, "stopped") || !strcmp(kind, "pruned")) {
        for (long k = s_find(events, i, -1, s_is_turn) + 1; k < (long)i; k++) {
            const json_t *x = json_array_get(events, (size_t)k);
            if (json_equal(json_object_get(x, "trial"), json_object_get(e, "trial")) &&
                s_is_instr(x, "stop") && json_is_true(json_object_get(x, "applied")))
                return -1;
        }
        m->kind = !strcmp(kind, "pruned") ? P_MARK_PRUNE : P_MARK_STOP;
        return 0;
    }
    long rel = -1; /* the release's stop, where event i belongs to one */
    if (!strcmp(kind, "retry")) {
        long k = s_find(events, i, -1, s_is_turn);
        if (k < 0 || strcmp(s_ev_kind(json_array_get(events, (size_t)k)), "suspended"))
            return -1; /* a failure's retry: the trial's curve shows it */
        rel = s_find(events, (size_t)k, -1, s_is_stop_instr);
        m->what = "resume";
    } else if (strcmp(kind, "instruction") ||
               !json_is_true(json_object_get(e, "applied")))
        return -1;
    else if (s_is_instr(e, "checkpoint")) {
        long k = s_find(events, i, 1, s_is_checkpoint_or_stop_instr);
        if (k >= 0 && s_is_release_stop(events, (size_t)k))
            return -1; /* marked at the release's stop */
    } else if (s_is_release_stop(events, i)) {
        rel = (long)i;
        m->what = "release";
    }
    if (rel >= 0) { /* by whoever asked for the release's checkpoint */
        long k = s_find(events, (size_t)rel, -1, s_is_checkpoint_instr);
        if (k < 0 || !s_is_release_stop(events, (size_t)rel))
            return -1;
        m->who =
            json_string_value(json_object_get(json_array_get(events, (size_t)k), "who"));
    } else if (!strcmp(kind, "instruction"))
        m->what =
            json_string_value(json_object_get(json_object_get(e, "detail"), "kind"));
    if (!m->what)
        m->what = kind;
    const char *who = m->who;
    if (!strcmp(m->what, "stop"))
        m->kind = s_by_person(who) ? P_MARK_STOP : P_MARK_PRUNE;
    else if (s_by_person(who))
        m->kind = P_MARK_CHANGE;
    else if (who && (!strcmp(who, "pbt") || !strcmp(who, "pb2")))
        m->kind = P_MARK_PBT;
    else if (who && !strcmp(who, "batchsize"))
        m->kind = P_MARK_BATCH;
    else
        m->kind = P_MARK_SCHED;
    return 0;
}

static void s_curves(FILE *f, store_trial *rows, long n, p_curve *cv,
                     const json_t *events, const p_opts *o)
{
    /* ranges: x over everything; y over the tails (robust) or everything */
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    long npoints = 0, ntail = 0, ncurves = 0;
    for (long i = 0; i < n; i++) {
        npoints += cv[i].n;
        ncurves += cv[i].n > 1;
    }
    double *tails = malloc((size_t)(npoints ? npoints : 1) * sizeof *tails);
    for (long i = 0; i < n; i++)
        for (long k = 0; k < cv[i].n; k++) {
            double yv = cv[i].y[k];
            if (o->log_y) {
                if (!(yv > 0))
                    continue;
                yv = log10(yv);
            }
            cv[i].y[k] = yv;
            xlo = fmin(xlo, cv[i].x[k]);
            xhi = fmax(xhi, cv[i].x[k]);
            ylo = fmin(ylo, yv);
            yhi = fmax(yhi, yv);
            /* a trial with one evaluation (pruned at the first rung) is
               left out of the robust range while some trial has a curve */
            if (tails && k >= cv[i].n / 2 && (cv[i].n > 1 || !ncurves))
                tails[ntail++] = yv;
        }
    if (!o->full_y && tails && ntail >= 4) {
        qsort(tails, (size_t)ntail, sizeof *tails, s_cmp_double);
        double q02 = tails[(long)(0.02 * (double)(ntail - 1))];
        double q98 = tails[(long)ceil(0.98 * (double)(ntail - 1))];
        double pad = (q98 - q02) * 0.15;
        if (!(pad > 0))
            pad = fabs(q98) * 0.05 > 0 ? fabs(q98) * 0.05 : 1;
        ylo = fmax(ylo, q02 - pad);
        yhi = fmin(yhi, q98 + pad);
        if (!o->log_y && ylo < 0 && q02 >= 0)
            ylo = 0;
    }
    free(tails);
    p_axis cx = {xlo, xhi, P_LEFT, P_RIGHT, 0, 0};
    if (!isfinite(xlo))
        cx.lo = 0, cx.hi = 1;
    else if (cx.hi <= cx.lo)
        cx.lo -= 0.5, cx.hi += 0.5;
    p_axis cy = {ylo, yhi, 0, 0, P_TOP2 + P_PH, P_TOP2};
    s_range(&cy.lo, &cy.hi, o->full_y ? 0.05 : 0.0);
    const char *xlabel =
        !strcmp(o->xaxis, "time") ? "seconds since the trial's first point" : o->xaxis;
    char ylabel[160];
    snprintf(ylabel, sizeof ylabel, "%s%s", o->curve_metric,
             o->log_y ? " (log scale)" : "");
    fprintf(f, "<g id=\"curves\" class=\"panel\">\n");
    s_labels(f, P_TOP2, "Learning curves", xlabel, ylabel);
    s_axes(f, &cx, &cy, !strcmp(o->xaxis, "step"), o->log_y);
    fprintf(f,
            "<clipPath id=\"curves-area\"><rect x=\"%d\" y=\"%d\" width=\"%d\" "
            "height=\"%d\"/></clipPath>\n",
            P_LEFT, P_TOP2, P_RIGHT - P_LEFT, P_PH);
    if (!npoints)
        fprintf(
            f,
            "<text class=\"empty\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">no points "
            "reported yet</text>\n",
            (P_LEFT + P_RIGHT) / 2, P_TOP2 + P_PH / 2);
    /* colour by objective; the best drawn last, in red */
    double slo = INFINITY, shi = -INFINITY;
    long best = -1;
    for (long i = 0; i < n; i++) {
        double v = s_score(&rows[i]);
        if (!isfinite(v))
            continue;
        slo = fmin(slo, v);
        shi = fmax(shi, v);
        if (spec_best_counts(store_trial_state_name(rows[i].state), rows[i].value, 1) &&
            (best < 0 || (o->maximize ? rows[i].value > rows[best].value
                                      : rows[i].value < rows[best].value)))
            best = i; /* the one definition of best */
    }
    long nsingle = 0; /* trials with one evaluation, drawn as markers */
    for (long pass = 0; pass < 2; pass++)
        for (long i = 0; i < n; i++) {
            if ((i == best) != (pass == 1))
                continue;
            char color[16] = "#9aa0aa";
            double v = s_score(&rows[i]);
            if (i == best)
                snprintf(color, sizeof color, "#d62728");
            else if (isfinite(v) && shi > slo) {
                double u = (v - slo) / (shi - slo);
                s_ramp(o->maximize ? u : 1 - u, color, sizeof color);
            }
            int dashed = rows[i].state == TRIAL_FAILED ||
                         rows[i].state == TRIAL_STOPPED || rows[i].state == TRIAL_PRUNED;
            fprintf(
                f,
                "<polyline class=\"curve state-%s%s\" id=\"trial-%ld\" "
                "data-trial=\"%ld\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s "
                "clip-path=\"url(#curves-area)\" points=\"",
                store_trial_state_name(rows[i].state), i == best ? " best" : "",
                rows[i].id, rows[i].id, color, i == best ? "2.5" : "1.2",
                dashed ? " stroke-dasharray=\"4 3\"" : "");
            long stride = (cv[i].n + P_MAX_VERTICES - 1) / P_MAX_VERTICES;
            int first = 1;
            for (long k = 0; k < cv[i].n; k++) {
                if (stride > 1 && k % stride != 0 && k + 1 != cv[i].n)
                    continue;
                if (o->log_y && !isfinite(cv[i].y[k]))
                    continue;
                fprintf(f, "%s%.2f,%.2f", first ? "" : " ", s_px(&cx, cv[i].x[k]),
                        s_py(&cy, cv[i].y[k]));
                first = 0;
            }
            fprintf(f, "\"><title>trial %ld (no. %ld in the study, %s) %.6g ", rows[i].id,
                    rows[i].number, store_trial_state_name(rows[i].state), v);
            s_params_title(f, rows[i].params);
            fputs("</title></polyline>\n", f);
            double py1 = cv[i].n == 1 ? s_py(&cy, cv[i].y[0]) : NAN;
            if (isfinite(py1) && py1 >= P_TOP2 && py1 <= P_TOP2 + P_PH) {
                /* one evaluation: a line of one vertex shows nothing, so a
                   marker (a cross when it was stopped there) */
                double px1 = s_px(&cx, cv[i].x[0]);
                if (dashed)
                    fprintf(f,
                            "<path class=\"single\" data-trial=\"%ld\" d=\"M%.2f %.2f "
                            "l7 7 m0 -7 l-7 7\" stroke=\"%s\" stroke-width=\"1.5\"/>\n",
                            rows[i].id, px1 - 3.5, py1 - 3.5, color);
                else
                    fprintf(f,
                            "<circle class=\"single\" data-trial=\"%ld\" cx=\"%.2f\" "
                            "cy=\"%.2f\" r=\"3.5\" fill=\"%s\"/>\n",
                            rows[i].id, px1, py1, color);
            }
            nsingle += cv[i].n == 1;
        }
    /* interventions and scheduler decisions, where they happened on the
       curve, each of one kind (s_mark_of): a stop counts once */
    long nmarks[P_MARKS] = {0};
    size_t ei;
    json_t *e;
    json_array_foreach(events, ei, e)
    {
        p_mark m;
        if (s_mark_of(events, ei, &m) != 0)
            continue;
        int mk = m.kind;
        long tid = (long)json_integer_value(json_object_get(e, "trial")), i = -1;
        for (long k = 0; k < n && i < 0; k++)
            if (rows[k].id == tid)
                i = k;
        if (i < 0 || cv[i].n == 0)
            continue;
        double when = json_number_value(json_object_get(e, "time"));
        long near = 0;
        for (long k = 1; k < cv[i].n; k++)
            if (fabs(cv[i].t[k] - when) < fabs(cv[i].t[near] - when))
                near = k;
        double px = s_px(&cx, cv[i].x[near]), py = s_py(&cy, cv[i].y[near]);
        if (!isfinite(py) || py < P_TOP2 || py > P_TOP2 + P_PH)
            py = py < P_TOP2 ? P_TOP2 + 6 : P_TOP2 + P_PH - 2;
        json_t *d = json_object_get(e, "detail");
        const char *name = json_string_value(json_object_get(d, "name"));
        fprintf(f,
                "<path class=\"intervention mark-%s\" data-trial=\"%ld\" d=\"M%.2f %.2f "
                "l5 -9 h-10 z\" fill=\"%s\" stroke=\"#fff\" stroke-width=\"0.8\"><title>"
                "trial %ld: ",
                s_marks[mk].cls, tid, px, py - 2, s_marks[mk].color, tid);
        s_xml(f, m.what);
        if (name) {
            fputc(' ', f);
            s_xml(f, name);
            json_t *val = json_object_get(d, "value");
            if (json_is_number(val))
                fprintf(f, "=%.6g", json_number_value(val));
        }
        fputs(" by ", f);
        s_xml(f, m.who ? m.who : "?");
        fputs("</title></path>\n", f);
        nmarks[mk]++;
    }
    /* legend: the colour scale, not one entry per trial */
    int lx = P_RIGHT + 20, ly = P_TOP2 + 10;
    fprintf(
        f,
        "<g class=\"legend\">\n<defs><linearGradient id=\"ramp\">"
        "<stop offset=\"0\" stop-color=\"#babad6\"/><stop offset=\"0.33\" "
        "stop-color=\"#6baed6\"/><stop offset=\"0.67\" stop-color=\"#2171b5\"/>"
        "<stop offset=\"1\" stop-color=\"#08306b\"/></linearGradient></defs>\n"
        "<text x=\"%d\" y=\"%d\">colour: final %s</text>\n"
        "<rect x=\"%d\" y=\"%d\" width=\"120\" height=\"10\" fill=\"url(#ramp)\"/>\n"
        "<text x=\"%d\" y=\"%d\" font-size=\"10\">worse</text>"
        "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">better</text>\n",
        lx, ly + 4, o->metric, lx, ly + 12, lx, ly + 34, lx + 120, ly + 34);
    ly += 52;
    if (best >= 0) {
        fprintf(
            f,
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#d62728\" "
            "stroke-width=\"3\"/><text x=\"%d\" y=\"%d\">best: trial %ld %.6g</text>\n",
            lx, ly, lx + 16, ly, lx + 22, ly + 4, rows[best].id, rows[best].value);
        ly += 18;
    }
    fprintf(
        f,
        "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#777\" "
        "stroke-dasharray=\"4 3\"/><text x=\"%d\" y=\"%d\">stopped or failed</text>\n",
        lx, ly, lx + 16, ly, lx + 22, ly + 4);
    ly += 18;
    if (nsingle) {
        fprintf(f,
                "<circle cx=\"%d\" cy=\"%d\" r=\"3.5\" fill=\"#6baed6\"/><text "
                "class=\"legend-single\" x=\"%d\" y=\"%d\">one evaluation (%ld), x if "
                "stopped</text>\n",
                lx + 8, ly, lx + 22, ly + 4, nsingle);
        ly += 18;
    }
    /* one line per kind of mark that occurs, with its count */
    for (int k = 0; k < P_MARKS; k++) {
        if (!nmarks[k])
            continue;
        fprintf(
            f,
            "<path d=\"M%d %d l5 -9 h-10 z\" fill=\"%s\"/><text class=\"legend-mark\" "
            "data-kind=\"%s\" x=\"%d\" y=\"%d\">%s (%ld)</text>\n",
            lx + 8, ly + 6, s_marks[k].color, s_marks[k].cls, lx + 22, ly + 4,
            s_marks[k].label, nmarks[k]);
        ly += 18;
    }
    fprintf(
        f,
        "<text x=\"%d\" y=\"%d\" font-size=\"10\">%ld trials; y: %s</text>\n</g>\n</g>\n",
        lx, ly + 6, n,
        o->full_y ? "full range" : "2-98 % of the curves' tails (of 2+ points)");
}

static int s_write(FILE *f, const store_study *st, store_trial *rows, long n, p_curve *cv,
                   const json_t *events, const p_opts *o)
{
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
            P_W, P_H, P_W, P_H);
    fputs("<title>", f);
    s_xml(f, st->name);
    fputs("</title>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n", f);
    fprintf(f,
            "<text class=\"title\" x=\"%d\" y=\"26\" font-size=\"20\" "
            "font-weight=\"bold\">study ",
            P_LEFT);
    s_xml(f, st->name);
    fprintf(f, " (%s): %s ", store_study_state_name(st->state),
            o->maximize ? "max" : "min");
    s_xml(f, o->metric);
    fputs("</text>\n", f);
    s_history(f, rows, n, o);
    s_curves(f, rows, n, cv, events, o);
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

/* The refusal of a --metric or --x metric that no trial of the study
   reported (rows[0..n)): a usage error naming it and what they did
   report, and 1. While they have reported nothing yet, 0 and nothing said:
   the plot is the empty panel it is without the option. */
static int s_unreported(store_t *s, const char *study, const store_trial *rows, long n,
                        const char *opt, const char *metric)
{
    json_t *seen = json_object(); /* every name once, in the order met */
    for (long i = 0; i < n; i++) {
        json_t *names = store_trial_metric_names(s, rows[i].id);
        size_t k;
        json_t *v;
        json_array_foreach(names, k, v)
            json_object_set(seen, json_string_value(v), json_null());
        json_decref(names);
    }
    if (json_object_size(seen) == 0) {
        json_decref(seen);
        return 0;
    }
    char list[512] = "";
    size_t len = 0;
    const char *key;
    json_t *v;
    json_object_foreach(seen, key, v)
    {
        if (len + strlen(key) + 8 >= sizeof list) { /* room for ", ..." */
            strcpy(list + len, len ? ", ..." : "...");
            break;
        }
        len += (size_t)sprintf(list + len, "%s%s", len ? ", " : "", key);
    }
    json_decref(seen);
    int x = !strcmp(opt, "--x");
    cli_error(
        "plot: %s %s: no trial of %s reported a metric \"%s\"%s (%s: %s)", opt, metric,
        study, metric, x && !strcmp(metric, "samples") ? " or batch_size" : "",
        x ? "use step, time, or a metric the trials report" : "the trials report", list);
    return 1;
}

int cmd_plot(int argc, char **argv)
{
    const char *curve_metric = NULL, *xaxis = "step";
    int log_y = 0, full_y = 0;
    const cli_opt_extra extra[] = {{"metric", &curve_metric, NULL},
                                   {"x", &xaxis, NULL},
                                   {"log-y", NULL, &log_y},
                                   {"full-y", NULL, &full_y},
                                   {NULL}};
    cli_opts o;
    int prc =
        cli_opts_parse_ext(argc, argv, CLI_OPT_DB | CLI_OPT_OUTPUT, extra, s_usage, &o);
    if (prc)
        return prc < 0 ? CLI_OK : prc;
    const char *db = o.db, *output = o.output;
    if (o.nargs != 1)
        return cli_usage_error(s_usage, "plot: expected STUDY");
    if (!*xaxis) {
        cli_error("plot: --x expects step, time or a metric name");
        return CLI_USAGE;
    }
    const char *name = o.args[0];
    store_t *s = cli_open_db(db);
    if (!s)
        return CLI_FAIL;
    store_study st;
    if (store_study_get(s, name, &st) != 1) {
        cli_error("no study named \"%s\" in %s", name, db);
        store_close(&s);
        return CLI_FAIL;
    }
    json_t *obj = json_object_get(st.spec, "objective");
    if (json_is_array(obj))
        obj = json_array_get(obj, 0);
    const char *metric = json_string_value(json_object_get(obj, "metric"));
    const char *mode = json_string_value(json_object_get(obj, "mode"));
    if (!metric)
        metric = "objective";
    int metric_given = curve_metric != NULL; /* one no trial reported is refused */
    if (!curve_metric)
        curve_metric = metric;
    p_opts po = {metric, curve_metric, xaxis, mode && !strcmp(mode, "max"),
                 log_y,  full_y,       NULL};
    spec_error serr;
    spec_t *spec = spec_parse(st.spec, 0, &serr);
    if (spec && (spec->nobjectives > 1 || spec->nconstraints)) {
        json_t *d = store_study_detail(s, name);
        size_t i;
        json_t *t;
        po.front = json_object();
        spec_mark_trials(spec, json_object_get(d, "trials"));
        json_array_foreach(json_object_get(d, "trials"), i, t)
        {
            if (json_is_true(
                    json_object_get(t, spec->nobjectives > 1 ? "pareto" : "best"))) {
                char key[32];
                snprintf(key, sizeof key, "%" JSON_INTEGER_FORMAT,
                         json_integer_value(json_object_get(t, "id")));
                json_object_set_new(po.front, key, json_true());
            }
        }
        json_decref(d);
    }
    spec_destroy(&spec);
    int metric_x = strcmp(xaxis, "step") && strcmp(xaxis, "time");
    store_trial *rows;
    long n = store_trials_load(s, st.id, &rows);
    int rc = CLI_FAIL;
    if (n < 0) {
        cli_error("cannot read the trials of %s: %s", name, store_errmsg(s));
        goto out;
    }
    p_curve *cv = calloc((size_t)(n ? n : 1), sizeof *cv);
    if (!cv) {
        cli_error("plot: out of memory");
        store_trials_free(rows, n);
        goto out;
    }
    long ncomp = 0, nx = 0, ny = 0;
    for (long i = 0; i < n; i++) {
        store_trial_points(s, rows[i].id, curve_metric, s_curve_add, &cv[i]);
        ny += cv[i].n;
        p_curve xs = {0};
        if (metric_x) {
            store_trial_points(s, rows[i].id, xaxis, s_curve_add, &xs);
            if (xs.n == 0 && !strcmp(xaxis, "samples")) {
                /* no sample count reported: the batch sizes summed over the
                   steps (jizhi-train reports batch_size every step) */
                store_trial_points(s, rows[i].id, "batch_size", s_curve_add, &xs);
                double total = 0, prev = -1;
                for (long k = 0; k < xs.n; k++) {
                    total += xs.y[k] * (xs.x[k] - prev);
                    prev = xs.x[k];
                    xs.y[k] = total;
                }
            }
            nx += xs.n;
        }
        s_curve_remap(&cv[i], xaxis, metric_x ? &xs : NULL);
        s_curve_free(&xs);
        ncomp += rows[i].state == TRIAL_COMPLETED && isfinite(rows[i].value);
    }
    json_t *events = store_events_list(s, st.id);
    char path[1100];
    if (((metric_x && nx == 0) || (metric_given && ny == 0)) && /* as --x, so --metric */
        s_unreported(s, name, rows, n, metric_x && nx == 0 ? "--x" : "--metric",
                     metric_x && nx == 0 ? xaxis : curve_metric)) {
        rc = CLI_USAGE;
        goto done;
    }
    if (output)
        snprintf(path, sizeof path, "%s", output);
    else {
        snprintf(path, sizeof path, "%s.svg", name);
        for (char *p = path; *p; p++)
            if (*p == '/')
                *p = '_';
    }
    int to_stdout = !strcmp(path, "-");
    FILE *f = to_stdout ? stdout : fopen(path, "w");
    if (!f) {
        cli_error("cannot write %s: %s", path, strerror(errno));
    } else {
        int w = s_write(f, &st, rows, n, cv, events, &po);
        if ((to_stdout ? fflush(f) : fclose(f)) != 0 || w != 0)
            cli_error("cannot write %s: %s", path, strerror(errno));
        else {
            rc = CLI_OK;
            if (!to_stdout)
                printf("wrote %s: %ld trials, %ld completed\n", path, n, ncomp);
        }
    }
done:
    json_decref(events);
    for (long i = 0; i < n; i++)
        s_curve_free(&cv[i]);
    free(cv);
    store_trials_free(rows, n);
out:
    json_decref(po.front);
    store_study_fini(&st);
    store_close(&s);
    return rc;
}
