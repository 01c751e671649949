/*  importance_rank.c - the model-free importance imp_study falls back to
    when a space is over the model's caps (see imp_rank in importance.h):
    rank correlations, O(n log n) per parameter in time and O(n) in memory
    whatever the space holds (a choice of 100 000 values costs no more
    than a float).
*/
#include "importance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const json_t *v; /* the parameter's value (categorical), borrowed */
    double x;        /* the parameter's value (numeric) */
    double y;        /* the objective */
    double rx, ry;   /* their ranks */
} s_pair;

static int s_cmp_x(const void *a, const void *b)
{
    const s_pair *p = a, *q = b;
    return p->x < q->x ? -1 : p->x > q->x;
}

static int s_cmp_y(const void *a, const void *b)
{
    const s_pair *p = a, *q = b;
    return p->y < q->y ? -1 : p->y > q->y;
}

/* A total order on JSON scalars: by type, then by value. */
static int s_cmp_v(const void *a, const void *b)
{
    const json_t *u = ((const s_pair *)a)->v, *w = ((const s_pair *)b)->v;
    int tu = (int)json_typeof(u), tw = (int)json_typeof(w);
    if (json_is_number(u) && json_is_number(w)) {
        double x = json_number_value(u), z = json_number_value(w);
        return x < z ? -1 : x > z;
    }
    if (tu != tw)
        return tu < tw ? -1 : 1;
    if (json_is_string(u))
        return strcmp(json_string_value(u), json_string_value(w));
    return 0; /* true, false, null: equal within their type */
}

/* Sorts by cmp and stores average ranks (ties share theirs) in ry or rx. */
static void s_rank(s_pair *p, int n, int (*cmp)(const void *, const void *), int on_y)
{
    qsort(p, (size_t)n, sizeof *p, cmp);
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && cmp(&p[i], &p[j]) == 0)
            j++;
        double r = (i + j - 1) / 2.0;
        for (int k = i; k < j; k++)
            *(on_y ? &p[k].ry : &p[k].rx) = r;
        i = j;
    }
}

/* |Pearson| of the ranks rx, ry. */
static double s_spearman(const s_pair *p, int n)
{
    double mx = 0, my = 0;
    for (int i = 0; i < n; i++) {
        mx += p[i].rx;
        my += p[i].ry;
    }
    mx /= n;
    my /= n;
    double sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; i++) {
        sxy += (p[i].rx - mx) * (p[i].ry - my);
        sxx += (p[i].rx - mx) * (p[i].rx - mx);
        syy += (p[i].ry - my) * (p[i].ry - my);
    }
    return sxx > 0 && syy > 0 ? fmin(fabs(sxy / sqrt(sxx * syy)), 1.0) : 0;
}

/* sqrt of the adjusted share of the variance of ry that the groups of
   equal v explain (p sorted by v). */
static double s_rank_eta(const s_pair *p, int n)
{
    double my = 0;
    for (int i = 0; i < n; i++)
        my += p[i].ry;
    my /= n;
    double sst = 0, ssw = 0;
    int groups = 0;
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && s_cmp_v(&p[i], &p[j]) == 0)
            j++;
        double gm = 0;
        for (int k = i; k < j; k++)
            gm += p[k].ry;
        gm /= j - i;
        for (int k = i; k < j; k++)
            ssw += (p[k].ry - gm) * (p[k].ry - gm);
        groups++;
        i = j;
    }
    for (int i = 0; i < n; i++)
        sst += (p[i].ry - my) * (p[i].ry - my);
    if (n - groups <= 0 || sst <= 0)
        return 0;
    double adj = 1 - (ssw / (n - groups)) / (sst / (n - 1));
    return adj > 0 ? sqrt(fmin(adj, 1.0)) : 0;
}

/* Whether p takes numbers only (a float, an int, a choice of numbers). */
static int s_numeric(const spec_param *p)
{
    if (p->type != SPEC_CHOICE)
        return 1;
    for (size_t i = 0; i < p->nvalues; i++)
        if (!json_is_number(json_array_get(p->values, i)))
            return 0;
    return 1;
}

int imp_rank(const spec_t *spec, json_t *const *params, const double *y, int n,
             double *out, int *n_used, char *err, size_t errsize)
{
    /* the trials read: those with a finite value, evenly spaced down to
       IMP_RANK_MAX_TRIALS */
    int usable = 0;
    for (int i = 0; i < n; i++)
        usable += isfinite(y[i]) && json_is_object(params[i]);
    int m = usable < IMP_RANK_MAX_TRIALS ? usable : IMP_RANK_MAX_TRIALS;
    *n_used = m;
    s_pair *p = malloc(sizeof *p * (size_t)(m ? m : 1));
    int *pick = malloc(sizeof *pick * (size_t)(m ? m : 1));
    if (!p || !pick) {
        free(p);
        free(pick);
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    for (int i = 0, u = 0, j = 0; i < n && j < m; i++) {
        if (!isfinite(y[i]) || !json_is_object(params[i]))
            continue;
        if (u++ == (int)((long long)j * usable / m))
            pick[j++] = i;
    }
    for (size_t k = 0; k < spec->nparams; k++) {
        const spec_param *sp = &spec->params[k];
        int numeric = s_numeric(sp), c = 0;
        for (int j = 0; j < m; j++) {
            json_t *v = json_object_get(params[pick[j]], sp->name);
            if (!v || (numeric && !json_is_number(v)))
                continue;
            p[c++] = (s_pair){v, numeric ? json_number_value(v) : 0, y[pick[j]], 0, 0};
        }
        out[k] = 0;
        if (c < 3)
            continue;
        s_rank(p, c, s_cmp_y, 1);
        if (numeric) {
            s_rank(p, c, s_cmp_x, 0);
            out[k] = s_spearman(p, c);
        } else {
            qsort(p, (size_t)c, sizeof *p, s_cmp_v);
            out[k] = s_rank_eta(p, c);
        }
    }
    free(p);
    free(pick);
    return 0;
}
