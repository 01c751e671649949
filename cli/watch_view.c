/*  watch_view.c - the view of `jizhi watch` (watch_internal.h): the
    ncurses screen (header, best line, the table of trials with their
    sparklines, the selected trial, the status and key lines), drawn with
    erase + refresh so only changed cells are sent; and the text both the
    screen and the plain lines print.
*/
#include "watch_internal.h"

#include "../common/util.h"
#include "../common/wire.h"

#include <curses.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* "k=v k=v" of a params object, sorted by key. */
void cli__watch_params_text(const json_t *params, char *buf, size_t size)
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

void cli__watch_num(double x, char *buf, size_t size)
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

enum { C_RUN = 1, C_DONE, C_FAIL, C_STOP, C_HEAD, C_SEL };

void cli__watch_colors(void)
{
    if (has_colors()) {
        start_color();
        use_default_colors();
        init_pair(C_RUN, COLOR_GREEN, -1);
        init_pair(C_DONE, COLOR_CYAN, -1);
        init_pair(C_FAIL, COLOR_RED, -1);
        init_pair(C_STOP, COLOR_YELLOW, -1);
        init_pair(C_HEAD, COLOR_BLUE, -1);
    }
}

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

const w_trial *cli__watch_selected(const w_view *v, long *index)
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
void cli__watch_fix_selection(w_view *v)
{
    if (cli__watch_selected(v, NULL) || v->norder == 0)
        return;
    v->sel_id = v->trials[v->order[0]].id;
    for (long i = 0; i < v->norder; i++)
        if (v->trials[v->order[i]].state == TRIAL_RUNNING) {
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

static int s_state_color(int state)
{
    switch (state) {
    case TRIAL_RUNNING:
    case TRIAL_STARTING:
        return C_RUN;
    case TRIAL_COMPLETED:
        return C_DONE;
    case TRIAL_FAILED:
        return C_FAIL;
    case TRIAL_STOPPED:
    case TRIAL_PRUNED:
        return C_STOP;
    default:
        return 0;
    }
}

void cli__watch_draw(w_view *v)
{
    erase();
    char line[1024], a[64], b[64];
    w_progress p;
    cli__watch_progress(v, &p);
    cli_format_elapsed(p.elapsed, a, sizeof a);
    /* the header, as wide as the terminal allows (80 columns take the
       narrowest): narrower gaps, then no "jizhi watch" */
    char head[5][256];
    static const char *const gap[4] = {"   ", "  ", "  ", " "};
    for (int k = 0; k < 4; k++)
        snprintf(
            head[k], sizeof head[k],
            "%s%s [%s]%sdone %ld/%ld%srunning %ld%spending %ld%sfailed %ld%selapsed %s",
            k < 2 ? "jizhi watch  " : "", v->name, cli__watch_study_state_name(v), gap[k],
            p.done, p.total, gap[k], p.running, gap[k], p.pending, gap[k], p.failed,
            gap[k], a);
    snprintf(head[4], sizeof head[4], "%s [%s] done %ld/%ld run %ld pend %ld fail %ld %s",
             v->name, cli__watch_study_state_name(v), p.done, p.total, p.running,
             p.pending, p.failed, a);
    attron(A_BOLD);
    s_put(0, 0, s_fit(head, 5, COLS));
    attroff(A_BOLD);
    char params[512];
    if (p.best) {
        cli__watch_params_text(p.best->params, params, sizeof params);
        cli__watch_num(p.best->value, b, sizeof b);
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
    cli__watch_selected(v, &sel);
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
        int paused = t->paused && t->state == TRIAL_RUNNING;
        int color = paused ? C_STOP : s_state_color(t->state);
        if (color)
            attron(COLOR_PAIR(color));
        s_put(y, x_state, paused ? "paused" : cli__watch_state_name(t));
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
            cli__watch_num(k == 0 ? t->mval[W_MAX_NAMES] : t->mval[cols[k - 1]], b,
                           sizeof b);
            snprintf(line, sizeof line, "%11.11s", b);
            s_put(y, x_obj + 12 * k, line);
        }
        char spark[W_SPARK * 4 + 1];
        s_sparkline(v, t, spark, sizeof spark);
        if (spark_w && x_spark + W_SPARK <= COLS)
            mvaddstr(y, x_spark, spark);
        cli__watch_params_text(t->params, params, sizeof params);
        if (t->tag[0]) { /* its latest guarded change or fork, then the params */
            char tagged[sizeof params + sizeof t->tag + 4];
            snprintf(tagged, sizeof tagged, "[%s] %s", t->tag, params);
            s_put_cut(y, x_params, tagged);
        } else
            s_put_cut(y, x_params, params);
        if (is_sel)
            attroff(A_REVERSE);
    }
    if (v->norder == 0)
        s_put(y0 + 1, 1, "(no trials yet)");

    /* the selected trial, the status line, the keys */
    const w_trial *t = cli__watch_selected(v, NULL);
    if (t) {
        cli__watch_params_text(t->params, params, sizeof params);
        size_t len =
            (size_t)snprintf(line, sizeof line, "trial %ld (try %ld, %s): %s |", t->id,
                             t->attempt + 1, /* runs from 1, as TRY in `trial list` */
                             cli__watch_state_name(t), params[0] ? params : "no params");
        for (int k = 0; k <= W_MAX_NAMES && len < sizeof line - 1; k++) {
            if (k < W_MAX_NAMES && k >= v->nnames)
                continue;
            if (wire_is_none(t->mval[k]))
                continue;
            cli__watch_num(t->mval[k], a, sizeof a);
            int w = snprintf(line + len, sizeof line - len, " %s=%s",
                             k == W_MAX_NAMES ? v->metric : v->names[k], a);
            if (w < 0)
                break;
            len += (size_t)w;
        }
        if (t->lineage[0] && len < sizeof line - 1)
            snprintf(line + len, sizeof line - len, " | %s", t->lineage);
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

void cli__watch_move(w_view *v, long delta)
{
    long i = 0;
    if (!cli__watch_selected(v, &i) || v->norder == 0)
        return;
    i += delta;
    if (i < 0)
        i = 0;
    if (i >= v->norder)
        i = v->norder - 1;
    v->sel_id = v->trials[v->order[i]].id;
}
