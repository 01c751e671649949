/*  bench_bo.c - benchmark driver for the bo scheduler (make bench-bo).

    Runs a jizhi scheduler directly (suggest -> evaluate -> on_complete) on
    the standard test functions, and measures suggestion latency. The
    Python side (bench/bench_bo.py) runs the peers and prints the table;
    it checks that both sides evaluate the functions identically with the
    `eval` mode.

      bench_bo eval FUNC X1 .. Xd          f(x), one number
      bench_bo run FUNC METHOD EVALS SEED0 NSEEDS
                                           one JSON line per seed:
                                           {"func","method","seed","regret","best","seconds"};
                                           with BENCH_BO_TRACE set, every
                                           evaluation also goes to stderr
                                           as "ID VALUE BEST X1 .. Xd"
                                           (which basin a run is in)
      bench_bo latency N1,N2,.. [REPEATS [METHOD]]
                                           bo suggestion latency on
                                           Hartmann-6 with N observations:
                                           {"n","cold_ms","warm_ms"}; METHOD
                                           (default bo) e.g. bo{"local":1}
                                           to time the end-game's search
      bench_bo latency-told N1,N2,.. [REPEATS [METHOD]]
                                           the same, but the N observations
                                           are the scheduler's own
                                           suggestions, evaluated and told
                                           in order (no warm start):
                                           {"n","cold_ms","warm_ms",
                                           "tell_mean_ms","tell_max_ms"}: the
                                           mean and slowest on_complete of
                                           the run
      bench_bo large FUNC HIST K SEED0 NSEEDS METHOD..
                                           bo past BO_LARGE_N (issue 43): per
                                           seed, a history of HIST points
                                           made by jizhi's tpe (that seed)
                                           is told to a fresh scheduler of
                                           each METHOD, which then makes K
                                           more suggestions, each evaluated
                                           and told; one JSON line per seed
                                           and method: {"func","method",
                                           "seed","hist","k","hist_regret",
                                           "regret" (best-so-far after the
                                           K), "curve" (best-so-far regret
                                           after each suggestion),
                                           "lat_med_ms","lat_max_ms",
                                           "seconds"}; budget.trials is
                                           1000000 (no end-game)
      bench_bo importance < JSON           parameter importance (importance.h)
                                           of {"space": {...}, "trials":
                                           [{"params": {...}, "value": y}]}:
                                           {"name": importance, ...}
    METHOD: bo, bo-ucb, random (any scheduler type, with a seed), or
    TYPE{json options}. A run's spec has budget.trials = EVALS (bo's
    end-game, option "local", needs the budget); latency runs a budget of
    1000000.
*/
#include "schedulers/importance.h"
#include "schedulers/sched.h"
#include "common/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int d;
    double fopt;
    double (*f)(const double *x, int d);
    void (*bounds)(int i, double *lo, double *hi);
} s_func;

static double s_branin(const double *x, int d)
{
    double a = 1, b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, r = 6, s = 10,
           t = 1 / (8 * M_PI);
    double u = x[1] - b * x[0] * x[0] + c * x[0] - r;
    return a * u * u + s * (1 - t) * cos(x[0]) + s;
}

static void s_branin_b(int i, double *lo, double *hi)
{
    *lo = i == 0 ? -5 : 0;
    *hi = i == 0 ? 10 : 15;
}

static double s_hartmann6(const double *x, int d)
{
    static const double A[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                   {0.05, 10, 17, 0.1, 8, 14},
                                   {3, 3.5, 1.7, 10, 17, 8},
                                   {17, 8, 0.05, 10, 0.1, 14}};
    static const double P[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                                   {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                                   {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                                   {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
    static const double al[4] = {1.0, 1.2, 3.0, 3.2};
    double s = 0;
    for (int i = 0; i < 4; i++) {
        double e = 0;
        for (int j = 0; j < 6; j++)
            e += A[i][j] * (x[j] - P[i][j]) * (x[j] - P[i][j]);
        s += al[i] * exp(-e);
    }
    return -s;
}

static void s_unit_b(int i, double *lo, double *hi)
{
    *lo = 0;
    *hi = 1;
}

static double s_ackley(const double *x, int d)
{
    double s1 = 0, s2 = 0;
    for (int i = 0; i < d; i++) {
        s1 += x[i] * x[i];
        s2 += cos(2 * M_PI * x[i]);
    }
    return -20 * exp(-0.2 * sqrt(s1 / d)) - exp(s2 / d) + 20 + M_E;
}

static void s_ackley_b(int i, double *lo, double *hi)
{
    *lo = -32.768;
    *hi = 32.768;
}

static double s_rosenbrock(const double *x, int d)
{
    double s = 0;
    for (int i = 0; i + 1 < d; i++)
        s += 100 * pow(x[i + 1] - x[i] * x[i], 2) + pow(1 - x[i], 2);
    return s;
}

static void s_rosen_b(int i, double *lo, double *hi)
{
    *lo = -5;
    *hi = 10;
}

static double s_levy(const double *x, int d)
{
    double w0 = 1 + (x[0] - 1) / 4, wl = 1 + (x[d - 1] - 1) / 4;
    double s = pow(sin(M_PI * w0), 2);
    for (int i = 0; i + 1 < d; i++) {
        double w = 1 + (x[i] - 1) / 4;
        s += pow(w - 1, 2) * (1 + 10 * pow(sin(M_PI * w + 1), 2));
    }
    s += pow(wl - 1, 2) * (1 + pow(sin(2 * M_PI * wl), 2));
    return s;
}

static void s_levy_b(int i, double *lo, double *hi)
{
    *lo = -10;
    *hi = 10;
}

static double s_styblinski(const double *x, int d)
{
    double s = 0;
    for (int i = 0; i < d; i++)
        s += pow(x[i], 4) - 16 * x[i] * x[i] + 5 * x[i];
    return s / 2;
}

static void s_sty_b(int i, double *lo, double *hi)
{
    *lo = -5;
    *hi = 5;
}

/* Shekel with its first m terms (Shekel-5, -7, -10) */
static double s_shekel_m(const double *x, int m)
{
    static const double beta[10] = {1, 2, 2, 4, 4, 6, 3, 7, 5, 5};
    static const double C[4][10] = {{4, 1, 8, 6, 3, 2, 5, 8, 6, 7},
                                    {4, 1, 8, 6, 7, 9, 3, 1, 2, 3.6},
                                    {4, 1, 8, 6, 3, 2, 5, 8, 6, 7},
                                    {4, 1, 8, 6, 7, 9, 3, 1, 2, 3.6}};
    double s = 0;
    for (int i = 0; i < m; i++) {
        double e = 0.1 * beta[i];
        for (int j = 0; j < 4; j++)
            e += (x[j] - C[j][i]) * (x[j] - C[j][i]);
        s -= 1 / e;
    }
    return s;
}

static double s_shekel(const double *x, int d)
{
    return s_shekel_m(x, 10);
}

static void s_shekel_b(int i, double *lo, double *hi)
{
    *lo = 0;
    *hi = 10;
}

static double s_sixhump(const double *x, int d)
{
    double a = x[0] * x[0], b = x[1] * x[1];
    return (4 - 2.1 * a + a * a / 3) * a + x[0] * x[1] + (-4 + 4 * b) * b;
}

static void s_sixhump_b(int i, double *lo, double *hi)
{
    *lo = i == 0 ? -3 : -2;
    *hi = i == 0 ? 3 : 2;
}

/* ---- rugged many-basin functions (held out: bo was not tuned on them) ---- */

static double s_rastrigin(const double *x, int d)
{
    double s = 10.0 * d;
    for (int i = 0; i < d; i++)
        s += x[i] * x[i] - 10 * cos(2 * M_PI * x[i]);
    return s;
}

static void s_rastrigin_b(int i, double *lo, double *hi)
{
    *lo = -5.12;
    *hi = 5.12;
}

static double s_schwefel(const double *x, int d)
{
    double s = 418.9829 * d;
    for (int i = 0; i < d; i++)
        s -= x[i] * sin(sqrt(fabs(x[i])));
    return s;
}

static void s_schwefel_b(int i, double *lo, double *hi)
{
    *lo = -500;
    *hi = 500;
}

static double s_michalewicz(const double *x, int d)
{
    double s = 0;
    for (int i = 0; i < d; i++)
        s -= sin(x[i]) * pow(sin((i + 1) * x[i] * x[i] / M_PI), 20);
    return s;
}

static void s_michalewicz_b(int i, double *lo, double *hi)
{
    *lo = 0;
    *hi = M_PI;
}

static double s_shekel5(const double *x, int d)
{
    return s_shekel_m(x, 5);
}

static double s_shekel7(const double *x, int d)
{
    return s_shekel_m(x, 7);
}

static double s_griewank(const double *x, int d)
{
    double s = 0, p = 1;
    for (int i = 0; i < d; i++) {
        s += x[i] * x[i] / 4000;
        p *= cos(x[i] / sqrt(i + 1.0));
    }
    return 1 + s - p;
}

static void s_griewank_b(int i, double *lo, double *hi)
{
    *lo = -600;
    *hi = 600;
}

static const s_func s_funcs[] = {
    {"branin", 2, 0.397887357729738, s_branin, s_branin_b},
    {"hartmann6", 6, -3.32236801141551, s_hartmann6, s_unit_b},
    {"ackley5", 5, 0, s_ackley, s_ackley_b},
    {"rosenbrock4", 4, 0, s_rosenbrock, s_rosen_b},
    {"levy4", 4, 0, s_levy, s_levy_b},
    {"styblinski4", 4, -39.16616570377142 * 4, s_styblinski, s_sty_b},
    /* beyond the usual six, so that a change is not fitted to them */
    {"shekel10", 4, -10.53644315348353, s_shekel, s_shekel_b},
    {"sixhump", 2, -1.0316284534898774, s_sixhump, s_sixhump_b},
    {"levy8", 8, 0, s_levy, s_levy_b},
    /* rugged, many basins (bench_bo.py --funcs rugged) */
    {"rastrigin3", 3, 0, s_rastrigin, s_rastrigin_b},
    {"rastrigin5", 5, 0, s_rastrigin, s_rastrigin_b},
    /* the minimum is at 420.968746 in each coordinate, not quite 0 */
    {"schwefel3", 3, 3 * (418.9829 - 418.98288727243369), s_schwefel, s_schwefel_b},
    {"michalewicz5", 5, -4.687658179, s_michalewicz, s_michalewicz_b},
    {"shekel5", 4, -10.1531996790582, s_shekel5, s_shekel_b},
    {"shekel7", 4, -10.4029405668187, s_shekel7, s_shekel_b},
    {"griewank5", 5, 0, s_griewank, s_griewank_b},
};

static const s_func *s_find(const char *name)
{
    for (size_t i = 0; i < sizeof s_funcs / sizeof s_funcs[0]; i++)
        if (!strcmp(s_funcs[i].name, name))
            return &s_funcs[i];
    return NULL;
}

static spec_t *s_spec(const s_func *f, const char *method, long seed, long trials)
{
    json_t *space = json_object();
    for (int i = 0; i < f->d; i++) {
        char name[16];
        double lo, hi;
        f->bounds(i, &lo, &hi);
        snprintf(name, sizeof name, "x%d", i);
        json_object_set_new(
            space, name,
            json_pack("{s:s,s:f,s:f}", "type", "float", "low", lo, "high", hi));
    }
    /* METHOD is a scheduler type, "bo-ucb", or TYPE{json options} */
    char type[64];
    const char *brace = strchr(method, '{');
    snprintf(type, sizeof type, "%.*s",
             brace ? (int)(brace - method) : (int)strlen(method), method);
    json_t *sched = json_pack("{s:s,s:I}", "type", type, "seed", (json_int_t)seed);
    if (!strcmp(type, "bo-ucb")) {
        json_object_set_new(sched, "type", json_string("bo"));
        json_object_set_new(sched, "acq", json_string("ucb"));
    }
    if (brace) {
        json_t *extra = json_loads(brace, 0, NULL);
        if (!json_is_object(extra)) {
            fprintf(stderr, "bench_bo: bad options in %s\n", method);
            json_decref(extra);
            json_decref(sched);
            json_decref(space);
            return NULL;
        }
        json_object_update(sched, extra);
        json_decref(extra);
    }
    json_t *j =
        json_pack("{s:s,s:{s:s,s:s},s:o,s:{s:i},s:o,s:{s:[s]}}", "name", "bench",
                  "objective", "metric", "y", "mode", "min", "scheduler", sched, "budget",
                  "trials", (int)trials, "space", space, "trial", "command", "true");
    spec_error err;
    spec_t *s = spec_parse(j, 0, &err);
    if (!s) {
        char buf[512];
        fprintf(stderr, "bench_bo: spec: %s\n", spec_strerror(&err, buf, sizeof buf));
    }
    json_decref(j);
    return s;
}

/* Asks until the worker is done; polls every 100 us. */
static int s_get(sched_t *s, long id, json_t **p)
{
    for (;;) {
        int rc = s->ops->suggest(s, id, p);
        if (rc != SCHED_WAIT)
            return rc;
        usleep(100);
    }
}

static int s_params_x(const json_t *p, int d, double *x)
{
    for (int i = 0; i < d; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        json_t *v = json_object_get(p, name);
        if (!json_is_number(v))
            return -1;
        x[i] = json_number_value(v);
    }
    return 0;
}

static int s_run(const s_func *f, const char *method, int evals, long seed)
{
    spec_t *sp = s_spec(f, method, seed, evals);
    char err[256];
    sched_t *s = sp ? sched_new(sp, err, sizeof err) : NULL;
    if (!s) {
        if (sp)
            fprintf(stderr, "bench_bo: %s\n", err);
        spec_destroy(&sp);
        return -1;
    }
    double best = INFINITY, t0 = util_now();
    for (long id = 1; id <= evals; id++) {
        json_t *p = NULL;
        double x[f->d];
        if (s_get(s, id, &p) != SCHED_OK || s_params_x(p, f->d, x) != 0) {
            fprintf(stderr, "bench_bo: suggest failed\n");
            json_decref(p);
            sched_destroy(&s);
            spec_destroy(&sp);
            return -1;
        }
        double v = f->f(x, f->d);
        best = fmin(best, v);
        if (getenv("BENCH_BO_TRACE")) { /* one line per evaluation, to stderr */
            fprintf(stderr, "%ld %.6g %.6g", id, v, best);
            for (int i = 0; i < f->d; i++)
                fprintf(stderr, " %.4f", x[i]);
            fprintf(stderr, "\n");
        }
        if (s->ops->on_complete) /* optional: random has none */
            s->ops->on_complete(s, id, p, SCHED_COMPLETED, v);
        json_decref(p);
    }
    json_t *line = json_pack("{s:s,s:s,s:I,s:f,s:f,s:f}", "func", f->name, "method",
                             method, "seed", (json_int_t)seed, "regret", best - f->fopt,
                             "best", best, "seconds", util_now() - t0);
    char *text = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(17));
    printf("%s\n", text);
    free(text);
    json_decref(line);
    fflush(stdout);
    sched_destroy(&s);
    spec_destroy(&sp);
    return 0;
}

/* n random observations of Hartmann-6, then suggestions timed from the
   first suggest call to SCHED_OK: the first (cold: no hyperparameters to
   start from) and the median of `repeats` more (warm). */
static int s_latency(int n, int repeats, const char *method)
{
    const s_func *f = s_find("hartmann6");
    spec_t *sp = s_spec(f, method, 1, 1000000);
    char err[256];
    sched_t *s = sp ? sched_new(sp, err, sizeof err) : NULL;
    if (!s)
        return -1;
    sched_rng r;
    sched_rng_seed(&r, 42, 0);
    for (long id = 1; id <= n; id++) {
        json_t *p = json_object();
        double x[6];
        for (int i = 0; i < 6; i++) {
            char name[16];
            snprintf(name, sizeof name, "x%d", i);
            x[i] = sched_rng_uniform(&r);
            json_object_set_new(p, name, json_real(x[i]));
        }
        s->ops->on_complete(s, id, p, SCHED_COMPLETED, f->f(x, 6));
        json_decref(p);
    }
    double ms[repeats + 1];
    for (int k = 0; k <= repeats; k++) {
        json_t *p = NULL;
        double t0 = util_now();
        if (s_get(s, n + 1 + k, &p) != SCHED_OK)
            return -1;
        ms[k] = 1e3 * (util_now() - t0);
        double x[6];
        s_params_x(p, 6, x);
        s->ops->on_complete(s, n + 1 + k, p, SCHED_COMPLETED, f->f(x, 6));
        json_decref(p);
    }
    /* median of the warm ones (insertion sort, few values) */
    for (int i = 2; i <= repeats; i++)
        for (int j = i; j > 1 && ms[j] < ms[j - 1]; j--) {
            double t = ms[j];
            ms[j] = ms[j - 1];
            ms[j - 1] = t;
        }
    double warm = repeats > 0 ? ms[1 + (repeats - 1) / 2] : NAN;
    printf("{\"n\":%d,\"cold_ms\":%.2f,\"warm_ms\":%.2f}\n", n, ms[0], warm);
    fflush(stdout);
    sched_destroy(&s);
    spec_destroy(&sp);
    return 0;
}

/* ---- large: methods continuing one history (issue 43) ---------------- */

static json_t *s_x_params(const double *x, int d)
{
    json_t *p = json_object();
    for (int i = 0; i < d; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        json_object_set_new(p, name, json_real(x[i]));
    }
    return p;
}

static int s_dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* hist x d points (hx) and their values (hv): a tpe run of min(hist,
   1000) evaluations with `seed`, then uniform random points (seeded) up
   to hist (tpe's cost per suggestion grows with n: a 5 000-point tpe run
   would take minutes). 0 or -1. */
static int s_history(const s_func *f, int hist, long seed, double *hx, double *hv)
{
    spec_t *sp = s_spec(f, "tpe", seed, 1000000);
    char err[256];
    sched_t *s = sp ? sched_new(sp, err, sizeof err) : NULL;
    int rc = s ? 0 : -1, ntpe = hist < 1000 ? hist : 1000;
    for (long id = 1; rc == 0 && id <= ntpe; id++) {
        json_t *p = NULL;
        double *x = hx + (size_t)(id - 1) * (size_t)f->d;
        if (s_get(s, id, &p) != SCHED_OK || s_params_x(p, f->d, x) != 0)
            rc = -1;
        else {
            hv[id - 1] = f->f(x, f->d);
            s->ops->on_complete(s, id, p, SCHED_COMPLETED, hv[id - 1]);
        }
        json_decref(p);
    }
    sched_rng r;
    sched_rng_seed(&r, (unsigned long long)seed, 7);
    for (int i = ntpe; rc == 0 && i < hist; i++) {
        double *x = hx + (size_t)i * (size_t)f->d;
        for (int k = 0; k < f->d; k++) {
            double lo, hi;
            f->bounds(k, &lo, &hi);
            x[k] = lo + (hi - lo) * sched_rng_uniform(&r);
        }
        hv[i] = f->f(x, f->d);
    }
    sched_destroy(&s);
    spec_destroy(&sp);
    return rc;
}

/* method told the history, then k suggestions; one JSON line. 0 or -1. */
static int s_continue(const s_func *f, const char *method, long seed, int hist,
                      const double *hx, const double *hv, int k)
{
    spec_t *sp = s_spec(f, method, seed, 1000000);
    char err[256];
    sched_t *s = sp ? sched_new(sp, err, sizeof err) : NULL;
    if (!s) {
        if (sp)
            fprintf(stderr, "bench_bo: %s\n", err);
        spec_destroy(&sp);
        return -1;
    }
    double best = INFINITY, t0 = util_now();
    for (int i = 0; i < hist; i++) {
        json_t *p = s_x_params(hx + (size_t)i * (size_t)f->d, f->d);
        if (s->ops->on_complete)
            s->ops->on_complete(s, i + 1, p, SCHED_COMPLETED, hv[i]);
        json_decref(p);
        best = fmin(best, hv[i]);
    }
    double hist_best = best;
    double *ms = malloc(sizeof(double) * (size_t)k);
    json_t *curve = json_array();
    int rc = ms ? 0 : -1;
    for (int i = 0; rc == 0 && i < k; i++) {
        json_t *p = NULL;
        double x[f->d], t1 = util_now();
        if (s_get(s, hist + 1 + i, &p) != SCHED_OK || s_params_x(p, f->d, x) != 0) {
            fprintf(stderr, "bench_bo: suggest failed\n");
            json_decref(p);
            rc = -1;
            break;
        }
        ms[i] = 1e3 * (util_now() - t1);
        double v = f->f(x, f->d);
        best = fmin(best, v);
        json_array_append_new(curve, json_real(best - f->fopt));
        if (s->ops->on_complete)
            s->ops->on_complete(s, hist + 1 + i, p, SCHED_COMPLETED, v);
        json_decref(p);
    }
    if (rc == 0) {
        double secs = util_now() - t0;
        qsort(ms, (size_t)k, sizeof *ms, s_dbl_cmp);
        json_t *line =
            json_pack("{s:s,s:s,s:I,s:i,s:i,s:f,s:f,s:O,s:f,s:f,s:f}", "func", f->name,
                      "method", method, "seed", (json_int_t)seed, "hist", hist, "k", k,
                      "hist_regret", hist_best - f->fopt, "regret", best - f->fopt,
                      "curve", curve, "lat_med_ms", k ? ms[(k - 1) / 2] : NAN,
                      "lat_max_ms", k ? ms[k - 1] : NAN, "seconds", secs);
        char *text = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(10));
        printf("%s\n", text);
        free(text);
        json_decref(line);
        fflush(stdout);
    }
    json_decref(curve);
    free(ms);
    sched_destroy(&s);
    spec_destroy(&sp);
    return rc;
}

static int s_large(const s_func *f, int hist, int k, long seed0, long ns, char **methods,
                   int nm)
{
    double *hx = malloc(sizeof(double) * (size_t)hist * (size_t)f->d);
    double *hv = malloc(sizeof(double) * (size_t)hist);
    int rc = hx && hv ? 0 : -1;
    for (long sd = seed0; rc == 0 && sd < seed0 + ns; sd++) {
        rc = s_history(f, hist, sd, hx, hv);
        for (int m = 0; rc == 0 && m < nm; m++)
            rc = s_continue(f, methods[m], sd, hist, hx, hv, k);
    }
    free(hx);
    free(hv);
    return rc;
}

/* Reads {"space", "trials"} from stdin and prints the importances. */
/* The scheduler's own n suggestions of Hartmann-6, each evaluated and told
   before the next (as a sequential study runs; no warm start), then
   `repeats` + 1 more timed like s_latency's; every on_complete (where
   cmaes updates its distribution) is timed too: their mean and the
   slowest. */
static int s_latency_told(int n, int repeats, const char *method)
{
    const s_func *f = s_find("hartmann6");
    spec_t *sp = s_spec(f, method, 1, 1000000);
    char err[256];
    sched_t *s = sp ? sched_new(sp, err, sizeof err) : NULL;
    if (!s) {
        spec_destroy(&sp);
        return -1;
    }
    double *ms = malloc(sizeof(double) * (size_t)(repeats + 1)), tell_max = 0,
           tell_sum = 0;
    int rc = ms ? 0 : -1;
    for (long k = 0; rc == 0 && k < n + repeats + 1; k++) {
        json_t *p = NULL;
        double x[6], t0 = util_now();
        if (s_get(s, k + 1, &p) != SCHED_OK || s_params_x(p, 6, x) != 0) {
            json_decref(p);
            rc = -1;
            break;
        }
        if (k >= n)
            ms[k - n] = 1e3 * (util_now() - t0);
        double v = f->f(x, 6);
        t0 = util_now();
        if (s->ops->on_complete)
            s->ops->on_complete(s, k + 1, p, SCHED_COMPLETED, v);
        double tms = 1e3 * (util_now() - t0);
        tell_max = fmax(tell_max, tms);
        tell_sum += tms;
        json_decref(p);
    }
    if (rc == 0) {
        for (int i = 2; i <= repeats; i++) /* the warm ones sorted */
            for (int j = i; j > 1 && ms[j] < ms[j - 1]; j--) {
                double t = ms[j];
                ms[j] = ms[j - 1];
                ms[j - 1] = t;
            }
        double warm = repeats > 0 ? ms[1 + (repeats - 1) / 2] : NAN;
        printf("{\"n\":%d,\"cold_ms\":%.3f,\"warm_ms\":%.3f,\"tell_mean_ms\":%.4f,"
               "\"tell_max_ms\":%.3f}\n",
               n, ms[0], warm, tell_sum / (n + repeats + 1), tell_max);
        fflush(stdout);
    }
    free(ms);
    sched_destroy(&s);
    spec_destroy(&sp);
    return rc;
}

static int s_importance(void)
{
    json_error_t je;
    json_t *in = json_loadf(stdin, 0, &je);
    json_t *trials = json_object_get(in, "trials");
    if (!in || !json_is_array(trials)) {
        fprintf(stderr,
                "bench_bo importance: expected {\"space\", \"trials\"} on stdin\n");
        json_decref(in);
        return 1;
    }
    json_t *j = json_pack("{s:s,s:{s:s,s:s},s:{s:s},s:O,s:{s:i},s:{s:[s]}}", "name",
                          "bench", "objective", "metric", "y", "mode", "min", "scheduler",
                          "type", "random", "space", json_object_get(in, "space"),
                          "budget", "trials", 1, "trial", "command", "true");
    spec_error err;
    spec_t *sp = spec_parse(j, 0, &err);
    json_decref(j);
    size_t n = json_array_size(trials);
    json_t **params = malloc(sizeof(json_t *) * (n ? n : 1));
    double *y = malloc(sizeof(double) * (n ? n : 1));
    int rc = 1;
    imp_result r;
    char e[256];
    if (!sp || !params || !y) {
        fprintf(stderr, "bench_bo importance: bad space or no memory\n");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(trials, i);
        params[i] = json_object_get(t, "params");
        y[i] = json_number_value(json_object_get(t, "value"));
    }
    if (imp_compute(sp, params, y, (int)n, 0, 0, &r, e, sizeof e) != 0) {
        fprintf(stderr, "bench_bo importance: %s\n", e);
        goto done;
    }
    json_t *out = json_object();
    for (size_t k = 0; k < sp->nparams; k++)
        json_object_set_new(out, sp->params[k].name, json_real(r.importance[k]));
    char *text = json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(10));
    printf("%s\n", text);
    free(text);
    json_decref(out);
    imp_result_fini(&r);
    rc = 0;
done:
    free(params);
    free(y);
    spec_destroy(&sp);
    json_decref(in);
    return rc;
}

static int s_usage(void)
{
    fprintf(stderr,
            "usage: bench_bo eval FUNC X1..Xd | run FUNC METHOD EVALS SEED0 NSEEDS | "
            "latency[-told] N1,N2,.. [REPEATS [METHOD]] | large FUNC HIST K SEED0 NSEEDS "
            "METHOD.. | importance < JSON\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "eval")) {
        const s_func *f = s_find(argv[2]);
        if (!f || argc != 3 + f->d)
            return s_usage();
        double x[f->d];
        for (int i = 0; i < f->d; i++)
            x[i] = strtod(argv[3 + i], NULL);
        printf("%.17g\n", f->f(x, f->d));
        return 0;
    }
    if (argc == 7 && !strcmp(argv[1], "run")) {
        const s_func *f = s_find(argv[2]);
        if (!f)
            return s_usage();
        int evals = atoi(argv[4]);
        long seed0 = atol(argv[5]), ns = atol(argv[6]);
        for (long k = 0; k < ns; k++)
            if (s_run(f, argv[3], evals, seed0 + k) != 0)
                return 1;
        return 0;
    }
    if (argc >= 3 && argc <= 5 &&
        (!strcmp(argv[1], "latency") || !strcmp(argv[1], "latency-told"))) {
        const char *method = argc == 5 ? argv[4] : "bo";
        int repeats = argc >= 4 ? atoi(argv[3]) : 3, told = argv[1][7] == '-';
        if (repeats < 0)
            return s_usage();
        char *save = NULL, *list = strdup(argv[2]);
        for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
            if ((told ? s_latency_told : s_latency)(atoi(t), repeats, method) != 0) {
                free(list);
                return 1;
            }
        free(list);
        return 0;
    }
    if (argc >= 8 && !strcmp(argv[1], "large")) {
        const s_func *f = s_find(argv[2]);
        int hist = atoi(argv[3]), k = atoi(argv[4]);
        long seed0 = atol(argv[5]), ns = atol(argv[6]);
        if (!f || hist < 1 || k < 1 || ns < 1)
            return s_usage();
        return s_large(f, hist, k, seed0, ns, argv + 7, argc - 7) == 0 ? 0 : 1;
    }
    if (argc == 2 && !strcmp(argv[1], "importance"))
        return s_importance();
    return s_usage();
}
