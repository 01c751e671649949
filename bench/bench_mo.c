/*  bench_mo.c - benchmark driver for multi-objective and constrained bo
    (make bench-mo; the peers and the table are in bench/bench_mo.py).

    Runs a jizhi scheduler directly (suggest -> evaluate ->
    on_complete_metrics), no processes.

      bench_mo eval FUNC X1 .. Xd     the objective (and constraint) values
      bench_mo run FUNC METHOD EVALS SEED0 NSEEDS
                                      one JSON line per seed:
                                      {"func","method","seed","F":[[f..]..],
                                       "c":[g..] (constrained ones),"seconds"}
    FUNC: zdt1, zdt2 (d = 6, 2 objectives), dtlz2 (d = 6, 3 objectives),
    branin_disk (Branin s.t. (x0-2.5)^2 + (x1-7.5)^2 <= 50), gardner
    (cos(2x0)cos(x1) + sin(x0) s.t. cos(x0+x1) <= 0.5 on [0,6]^2).
    METHOD: bo, random (a scheduler type; "bo:{json options}" adds options).
*/
#include "common/util.h"
#include "schedulers/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_MAXD 8

typedef struct {
    const char *name;
    int d, m, constrained;
    double lo[S_MAXD], hi[S_MAXD];
    void (*f)(const double *x, int d, double *out, double *g);
} s_func;

static void s_zdt1(const double *x, int d, double *o, double *g)
{
    (void)g;
    double s = 0;
    for (int i = 1; i < d; i++)
        s += x[i];
    double gg = 1 + 9 * s / (d - 1);
    o[0] = x[0];
    o[1] = gg * (1 - sqrt(x[0] / gg));
}

static void s_zdt2(const double *x, int d, double *o, double *g)
{
    (void)g;
    double s = 0;
    for (int i = 1; i < d; i++)
        s += x[i];
    double gg = 1 + 9 * s / (d - 1);
    o[0] = x[0];
    o[1] = gg * (1 - (x[0] / gg) * (x[0] / gg));
}

static void s_dtlz2(const double *x, int d, double *o, double *g)
{
    (void)g;
    double gg = 0;
    for (int i = 2; i < d; i++)
        gg += (x[i] - 0.5) * (x[i] - 0.5);
    double a = x[0] * M_PI / 2, b = x[1] * M_PI / 2;
    o[0] = (1 + gg) * cos(a) * cos(b);
    o[1] = (1 + gg) * cos(a) * sin(b);
    o[2] = (1 + gg) * sin(a);
}

static void s_branin_disk(const double *x, int d, double *o, double *g)
{
    (void)d;
    double b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, t = 1 / (8 * M_PI);
    double u = x[1] - b * x[0] * x[0] + c * x[0] - 6;
    o[0] = u * u + 10 * (1 - t) * cos(x[0]) + 10;
    g[0] = (x[0] - 2.5) * (x[0] - 2.5) + (x[1] - 7.5) * (x[1] - 7.5);
}

static void s_gardner(const double *x, int d, double *o, double *g)
{
    (void)d;
    o[0] = cos(2 * x[0]) * cos(x[1]) + sin(x[0]);
    g[0] = cos(x[0]) * cos(x[1]) - sin(x[0]) * sin(x[1]);
}

static const s_func s_funcs[] = {
    {"zdt1", 6, 2, 0, {0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}, s_zdt1},
    {"zdt2", 6, 2, 0, {0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}, s_zdt2},
    {"dtlz2", 6, 3, 0, {0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}, s_dtlz2},
    {"branin_disk", 2, 1, 1, {-5, 0}, {10, 15}, s_branin_disk},
    {"gardner", 2, 1, 1, {0, 0}, {6, 6}, s_gardner},
};

/* the constraint bound: g <= bound */
static double s_bound(const s_func *f)
{
    return !strcmp(f->name, "branin_disk") ? 50 : 0.5;
}

static const s_func *s_find(const char *name)
{
    for (size_t i = 0; i < sizeof s_funcs / sizeof s_funcs[0]; i++)
        if (!strcmp(s_funcs[i].name, name))
            return &s_funcs[i];
    return NULL;
}

static spec_t *s_spec(const s_func *f, const char *method, long seed)
{
    json_t *space = json_object();
    for (int i = 0; i < f->d; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        json_object_set_new(space, name,
                            json_pack("{s:s,s:f,s:f}", "type", "float", "low", f->lo[i],
                                      "high", f->hi[i]));
    }
    const char *colon = strchr(method, ':');
    char type[32];
    snprintf(type, sizeof type, "%.*s", colon ? (int)(colon - method) : 31, method);
    json_t *sched = json_pack("{s:s,s:I}", "type", type, "seed", (json_int_t)seed);
    if (colon) {
        json_t *extra = json_loads(colon + 1, 0, NULL);
        if (json_is_object(extra))
            json_object_update(sched, extra);
        json_decref(extra);
    }
    json_t *obj = json_array();
    for (int k = 0; k < f->m; k++) {
        char name[16];
        snprintf(name, sizeof name, "f%d", k);
        json_array_append_new(obj, json_pack("{s:s,s:s}", "metric", name, "mode", "min"));
    }
    json_t *j = json_pack("{s:s,s:o,s:o,s:{s:i},s:o,s:{s:[s]}}", "name", "bench",
                          "objective", obj, "scheduler", sched, "budget", "trials",
                          1000000, "space", space, "trial", "command", "true");
    if (f->constrained)
        json_object_set_new(j, "constraints",
                            json_pack("[{s:s,s:f}]", "metric", "g", "<=", s_bound(f)));
    spec_error err;
    spec_t *s = spec_parse(j, 0, &err);
    if (!s) {
        char buf[512];
        fprintf(stderr, "bench_mo: spec: %s\n", spec_strerror(&err, buf, sizeof buf));
    }
    json_decref(j);
    return s;
}

static int s_get(sched_t *s, long id, json_t **p)
{
    for (;;) {
        int rc = s->ops->suggest(s, id, p);
        if (rc != SCHED_WAIT)
            return rc;
        usleep(100);
    }
}

static int s_run(const s_func *f, const char *method, int evals, long seed)
{
    spec_t *sp = s_spec(f, method, seed);
    char err[256];
    sched_t *s = sp ? sched_new(sp, err, sizeof err) : NULL;
    if (!s) {
        if (sp)
            fprintf(stderr, "bench_mo: %s\n", err);
        spec_destroy(&sp);
        return -1;
    }
    json_t *F = json_array(), *C = json_array();
    double t0 = util_now();
    for (long id = 1; id <= evals; id++) {
        json_t *p = NULL;
        double x[S_MAXD], o[4], g[1] = {0};
        if (s_get(s, id, &p) != SCHED_OK) {
            fprintf(stderr, "bench_mo: suggest failed\n");
            json_decref(p);
            json_decref(F);
            json_decref(C);
            sched_destroy(&s);
            spec_destroy(&sp);
            return -1;
        }
        for (int i = 0; i < f->d; i++) {
            char name[16];
            snprintf(name, sizeof name, "x%d", i);
            x[i] = json_number_value(json_object_get(p, name));
        }
        f->f(x, f->d, o, g);
        json_t *row = json_array(), *metrics = json_object();
        for (int k = 0; k < f->m; k++) {
            char name[16];
            snprintf(name, sizeof name, "f%d", k);
            json_array_append_new(row, json_real(o[k]));
            json_object_set_new(metrics, name, json_real(o[k]));
        }
        if (f->constrained) {
            json_object_set_new(metrics, "g", json_real(g[0]));
            json_array_append_new(C, json_real(g[0]));
        }
        json_array_append_new(F, row);
        if (s->ops->on_complete_metrics)
            s->ops->on_complete_metrics(s, id, p, SCHED_COMPLETED, o[0], metrics);
        else if (s->ops->on_complete)
            s->ops->on_complete(s, id, p, SCHED_COMPLETED, o[0]);
        json_decref(metrics);
        json_decref(p);
    }
    json_t *line =
        json_pack("{s:s,s:s,s:I,s:o,s:f}", "func", f->name, "method", method, "seed",
                  (json_int_t)seed, "F", F, "seconds", util_now() - t0);
    if (f->constrained) {
        json_object_set_new(line, "c", C);
        json_object_set_new(line, "bound", json_real(s_bound(f)));
    } else {
        json_decref(C);
    }
    char *text = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(17));
    printf("%s\n", text);
    fflush(stdout);
    free(text);
    json_decref(line);
    sched_destroy(&s);
    spec_destroy(&sp);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "eval")) {
        const s_func *f = s_find(argv[2]);
        if (!f || argc != 3 + f->d) {
            fprintf(stderr, "bench_mo eval: unknown function or wrong arity\n");
            return 2;
        }
        double x[S_MAXD], o[4], g[1] = {0};
        for (int i = 0; i < f->d; i++)
            x[i] = strtod(argv[3 + i], NULL);
        f->f(x, f->d, o, g);
        for (int k = 0; k < f->m; k++)
            printf("%s%.17g", k ? " " : "", o[k]);
        if (f->constrained)
            printf(" %.17g", g[0]);
        printf("\n");
        return 0;
    }
    if (argc == 7 && !strcmp(argv[1], "run")) {
        const s_func *f = s_find(argv[2]);
        if (!f) {
            fprintf(stderr, "bench_mo: unknown function %s\n", argv[2]);
            return 2;
        }
        int evals = atoi(argv[4]);
        long s0 = atol(argv[5]), ns = atol(argv[6]);
        for (long k = 0; k < ns; k++)
            if (s_run(f, argv[3], evals, s0 + k) != 0)
                return 1;
        return 0;
    }
    fprintf(stderr,
            "usage: bench_mo eval FUNC X..  |  bench_mo run FUNC METHOD EVALS SEED0 "
            "NSEEDS\n");
    return 2;
}
