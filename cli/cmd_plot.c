/*  cmd_plot.c - `jizhi plot STUDY`: one self-contained SVG file, readable
    in any browser with no other tool, with two panels:

      history  the objective of every completed trial by trial number
               (<circle class="point" data-trial=ID>) and the best so far
               as a step line (<path class="best">);
      curves   the objective (or --metric) against the step for every
               trial, one <polyline class="curve" id="trial-ID"
               data-trial=ID> per trial of the study (empty points when
               it reported nothing yet; long curves thinned to 2000
               vertices), colours keyed in a legend.

    It reads the database file only, so it works with or without a
    controller. Every piece of text from the study is XML-escaped.
*/
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char s_usage[] =
    "usage: jizhi plot STUDY [--db FILE] [--output FILE.svg] [--metric NAME]\n"
    "Writes an SVG of the optimisation history (objective per completed trial and\n"
    "the best so far) and the learning curves (objective, or --metric, against the\n"
    "step, one line per trial). Default output: STUDY.svg; --output - writes to "
    "stdout.\n";

/* Geometry (SVG user units). */
enum {
    P_W = 1000,    /* image width */
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
static void s_axes(FILE *f, const p_axis *x, const p_axis *y, int integer_x)
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
                "text-anchor=\"end\">%.6g</text>\n",
                P_LEFT - 8, py + 4, fabs(t) < step * 1e-9 ? 0.0 : t);
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

/* Colour of the i-th trial: Tableau 10, then golden-angle hues. */
static void s_color(long i, char *buf, size_t size)
{
    static const char *const tab10[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                        "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                        "#bcbd22", "#17becf"};
    if (i < 10)
        snprintf(buf, size, "%s", tab10[i]);
    else
        snprintf(buf, size, "hsl(%ld,65%%,45%%)", (long)fmod(i * 137.508, 360.0));
}

static void s_params_title(FILE *f, const json_t *params)
{
    char *text = text_json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
    if (text)
        s_xml(f, text);
    free(text);
}

static int s_write(FILE *f, const store_study *st, store_trial *rows, long n,
                   json_t **series, const char *metric, const char *curve_metric,
                   int maximize)
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
    fprintf(f, " (%s): %s ", st->state, maximize ? "max" : "min");
    s_xml(f, metric);
    fputs("</text>\n", f);

    /* ---- history ---- */
    long ncomp = 0;
    double vlo = INFINITY, vhi = -INFINITY, nlo = INFINITY, nhi = -INFINITY;
    for (long i = 0; i < n; i++)
        if (!strcmp(rows[i].state, "completed") && isfinite(rows[i].value)) {
            ncomp++;
            vlo = fmin(vlo, rows[i].value);
            vhi = fmax(vhi, rows[i].value);
            nlo = fmin(nlo, (double)rows[i].number);
            nhi = fmax(nhi, (double)rows[i].number);
        }
    p_axis x = {nlo - 0.5, nhi + 0.5, P_LEFT, P_RIGHT, 0, 0};
    if (!ncomp)
        x.lo = -0.5, x.hi = 0.5;
    p_axis y = {vlo, vhi, 0, 0, P_TOP1 + P_PH, P_TOP1};
    s_range(&y.lo, &y.hi, 0.05);
    fprintf(f, "<g id=\"history\" class=\"panel\">\n");
    char ylabel[200];
    snprintf(ylabel, sizeof ylabel, "%s", metric);
    s_labels(f, P_TOP1, "Optimisation history", "trial number", ylabel);
    s_axes(f, &x, &y, 1);
    if (!ncomp) {
        fprintf(
            f,
            "<text class=\"empty\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">no completed "
            "trial yet</text>\n",
            (P_LEFT + P_RIGHT) / 2, P_TOP1 + P_PH / 2);
    } else {
        /* best so far: a step line through the completed trials in order */
        fputs("<path class=\"best\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" "
              "d=\"",
              f);
        double best = NAN;
        int first = 1;
        for (long i = 0; i < n; i++) {
            if (strcmp(rows[i].state, "completed") || !isfinite(rows[i].value))
                continue;
            double v = rows[i].value;
            if (isnan(best) || (maximize ? v > best : v < best)) {
                double px = s_px(&x, (double)rows[i].number);
                if (first)
                    fprintf(f, "M%.2f %.2f", px, s_py(&y, v));
                else
                    fprintf(f, " H%.2f V%.2f", px, s_py(&y, v));
                first = 0;
                best = v;
            }
        }
        fprintf(f, " H%.2f\"/>\n", s_px(&x, nhi));
        for (long i = 0; i < n; i++) {
            if (strcmp(rows[i].state, "completed") || !isfinite(rows[i].value))
                continue;
            fprintf(f,
                    "<circle class=\"point\" data-trial=\"%ld\" cx=\"%.2f\" cy=\"%.2f\" "
                    "r=\"4\" "
                    "fill=\"#1f77b4\"><title>trial %ld (#%ld): %.6g ",
                    rows[i].id, s_px(&x, (double)rows[i].number), s_py(&y, rows[i].value),
                    rows[i].id, rows[i].number, rows[i].value);
            s_params_title(f, rows[i].params);
            fputs("</title></circle>\n", f);
        }
    }
    int lx = P_RIGHT + 20, ly = P_TOP1 + 10;
    fprintf(f,
            "<g class=\"legend\">\n"
            "<circle cx=\"%d\" cy=\"%d\" r=\"4\" fill=\"#1f77b4\"/>"
            "<text x=\"%d\" y=\"%d\">completed trial (%ld)</text>\n"
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#d62728\" "
            "stroke-width=\"2\"/>"
            "<text x=\"%d\" y=\"%d\">best so far</text>\n</g>\n",
            lx + 8, ly, lx + 22, ly + 4, ncomp, lx, ly + 20, lx + 16, ly + 20, lx + 22,
            ly + 24);
    fprintf(f, "</g>\n");

    /* ---- learning curves ---- */
    double slo = INFINITY, shi = -INFINITY;
    vlo = INFINITY, vhi = -INFINITY;
    long npoints = 0;
    for (long i = 0; i < n; i++) {
        size_t k;
        json_t *pt;
        json_array_foreach(series[i], k, pt)
        {
            double s = (double)json_integer_value(json_array_get(pt, 0));
            double v = json_number_value(json_array_get(pt, 1));
            if (!json_is_number(json_array_get(pt, 1)) || !isfinite(v))
                continue;
            npoints++;
            slo = fmin(slo, s);
            shi = fmax(shi, s);
            vlo = fmin(vlo, v);
            vhi = fmax(vhi, v);
        }
    }
    p_axis cx = {slo, shi, P_LEFT, P_RIGHT, 0, 0};
    if (!npoints)
        cx.lo = 0, cx.hi = 1;
    else if (cx.hi <= cx.lo)
        cx.lo -= 0.5, cx.hi += 0.5;
    p_axis cy = {vlo, vhi, 0, 0, P_TOP2 + P_PH, P_TOP2};
    s_range(&cy.lo, &cy.hi, 0.05);
    fprintf(f, "<g id=\"curves\" class=\"panel\">\n");
    s_labels(f, P_TOP2, "Learning curves", "step", curve_metric);
    s_axes(f, &cx, &cy, 1);
    if (!npoints)
        fprintf(
            f,
            "<text class=\"empty\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">no points "
            "reported yet</text>\n",
            (P_LEFT + P_RIGHT) / 2, P_TOP2 + P_PH / 2);
    for (long i = 0; i < n; i++) {
        char color[40];
        s_color(i, color, sizeof color);
        fprintf(f,
                "<polyline class=\"curve state-%s\" id=\"trial-%ld\" data-trial=\"%ld\" "
                "fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"",
                rows[i].state, rows[i].id, rows[i].id, color,
                strcmp(rows[i].state, "failed") ? "" : " stroke-dasharray=\"4 3\"");
        size_t k;
        json_t *pt;
        int first = 1;
        /* at most P_MAX_VERTICES vertices a curve (every stride-th point and
           the last): the file stays small and a browser draws it at once */
        size_t npts = json_array_size(series[i]);
        size_t stride = (npts + P_MAX_VERTICES - 1) / P_MAX_VERTICES;
        json_array_foreach(series[i], k, pt)
        {
            double v = json_number_value(json_array_get(pt, 1));
            if (!json_is_number(json_array_get(pt, 1)) || !isfinite(v))
                continue;
            if (stride > 1 && k % stride != 0 && k + 1 != npts)
                continue;
            double s = (double)json_integer_value(json_array_get(pt, 0));
            fprintf(f, "%s%.2f,%.2f", first ? "" : " ", s_px(&cx, s), s_py(&cy, v));
            first = 0;
        }
        fprintf(f, "\"><title>trial %ld (#%ld, %s) ", rows[i].id, rows[i].number,
                rows[i].state);
        s_params_title(f, rows[i].params);
        fputs("</title></polyline>\n", f);
    }
    fprintf(f, "<g class=\"legend\">\n");
    ly = P_TOP2 + 10;
    for (long i = 0; i < n && i < P_LEGEND_MAX; i++) {
        char color[40];
        s_color(i, color, sizeof color);
        fprintf(f,
                "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                "stroke-width=\"3\"/>"
                "<text x=\"%d\" y=\"%d\">trial %ld (#%ld) %s</text>\n",
                lx, ly, lx + 16, ly, color, lx + 22, ly + 4, rows[i].id, rows[i].number,
                rows[i].state);
        ly += 15;
    }
    if (n > P_LEGEND_MAX)
        fprintf(f, "<text x=\"%d\" y=\"%d\">... and %ld more</text>\n", lx, ly + 4,
                n - P_LEGEND_MAX);
    fprintf(f, "</g>\n</g>\n</svg>\n");
    return ferror(f) ? -1 : 0;
}

int cmd_plot(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"output", required_argument, 0, 'o'},
                                         {"metric", required_argument, 0, 'm'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *db = NULL, *output = NULL, *curve_metric = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            db = optarg;
            break;
        case 'o':
            output = optarg;
            break;
        case 'm':
            curve_metric = optarg;
            break;
        case 'h':
            fputs(s_usage, stdout);
            return CLI_OK;
        default:
            fputs(s_usage, stderr);
            return CLI_USAGE;
        }
    }
    if (argc - optind != 1) {
        cli_error("plot: expected STUDY");
        fputs(s_usage, stderr);
        return CLI_USAGE;
    }
    const char *name = argv[optind];
    db = cli_db_path(db);
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
    const char *metric = json_string_value(json_object_get(obj, "metric"));
    const char *mode = json_string_value(json_object_get(obj, "mode"));
    if (!metric)
        metric = "objective";
    if (!curve_metric)
        curve_metric = metric;
    store_trial *rows;
    long n = store_trials_load(s, st.id, &rows);
    int rc = CLI_FAIL;
    if (n < 0) {
        cli_error("cannot read the trials of %s: %s", name, store_errmsg(s));
        goto out;
    }
    json_t **series = calloc((size_t)(n ? n : 1), sizeof *series);
    long ncomp = 0;
    for (long i = 0; i < n; i++) {
        series[i] = store_metrics_series(s, rows[i].id, curve_metric);
        ncomp += !strcmp(rows[i].state, "completed") && isfinite(rows[i].value);
    }
    char path[1100];
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
        int w = s_write(f, &st, rows, n, series, metric, curve_metric,
                        mode && !strcmp(mode, "max"));
        if ((to_stdout ? fflush(f) : fclose(f)) != 0 || w != 0)
            cli_error("cannot write %s: %s", path, strerror(errno));
        else {
            rc = CLI_OK;
            if (!to_stdout)
                printf("wrote %s: %ld trials, %ld completed\n", path, n, ncomp);
        }
    }
    for (long i = 0; i < n; i++)
        json_decref(series[i]);
    free(series);
    store_trials_free(rows, n);
out:
    store_study_fini(&st);
    store_close(&s);
    return rc;
}
