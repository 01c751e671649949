/*  pareto.c - non-dominated sorting and hypervolume (see pareto.h). */
#include "pareto.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int pareto_dominates(const double *a, const double *b, size_t m)
{
    int better = 0;
    for (size_t k = 0; k < m; k++) {
        if (a[k] > b[k])
            return 0;
        if (a[k] < b[k])
            better = 1;
    }
    return better;
}

static int s_finite_row(const double *r, size_t m)
{
    for (size_t k = 0; k < m; k++)
        if (!isfinite(r[k]))
            return 0;
    return 1;
}

size_t pareto_front(const double *F, size_t n, size_t m, const unsigned char *valid,
                    unsigned char *front)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        front[i] = (!valid || valid[i]) && s_finite_row(F + i * m, m);
    for (size_t i = 0; i < n; i++) {
        if (!front[i])
            continue;
        for (size_t j = 0; j < n; j++) {
            if (j == i || !((!valid || valid[j]) && s_finite_row(F + j * m, m)))
                continue;
            if (pareto_dominates(F + j * m, F + i * m, m)) {
                front[i] = 0;
                break;
            }
        }
        count += front[i];
    }
    return count;
}

static int s_cmp_last(const void *a, const void *b, void *arg)
{
    size_t m = *(const size_t *)arg;
    double x = ((const double *)a)[m - 1], y = ((const double *)b)[m - 1];
    return (x > y) - (x < y);
}

/* qsort_r is a GNU extension; a small insertion sort on row indices keeps
   this portable and is fine for the sizes hypervolume is meant for. */
static void s_sort_rows(double *R, size_t n, size_t m)
{
    double *tmp = malloc(sizeof(double) * m);
    if (!tmp)
        return;
    for (size_t i = 1; i < n; i++) {
        memcpy(tmp, R + i * m, sizeof(double) * m);
        size_t j = i;
        while (j > 0 && s_cmp_last(R + (j - 1) * m, tmp, &m) > 0) {
            memcpy(R + j * m, R + (j - 1) * m, sizeof(double) * m);
            j--;
        }
        memcpy(R + j * m, tmp, sizeof(double) * m);
    }
    free(tmp);
}

/* R: n x m rows all strictly below ref. */
static double s_hv(double *R, size_t n, size_t m, const double *ref)
{
    if (n == 0)
        return 0;
    if (m == 1) {
        double lo = ref[0];
        for (size_t i = 0; i < n; i++)
            lo = fmin(lo, R[i]);
        return ref[0] - lo;
    }
    if (m == 2) { /* sweep: sort by the second objective */
        s_sort_rows(R, n, 2);
        double hv = 0, best0 = ref[0];
        for (size_t i = 0; i < n; i++) {
            double next = i + 1 < n ? R[(i + 1) * 2 + 1] : ref[1];
            best0 = fmin(best0, R[i * 2]);
            hv += (ref[0] - best0) * (next - R[i * 2 + 1]);
        }
        return hv;
    }
    s_sort_rows(R, n, m);
    /* slices between consecutive last-objective values: the rows at or
       below the slice, projected on the first m-1 objectives */
    double *P = malloc(sizeof(double) * n * (m - 1));
    if (!P)
        return -1;
    double hv = 0;
    for (size_t i = 0; i < n; i++) {
        double top = i + 1 < n ? R[(i + 1) * m + m - 1] : ref[m - 1];
        double h = top - R[i * m + m - 1];
        if (h <= 0)
            continue;
        for (size_t r = 0; r <= i; r++)
            memcpy(P + r * (m - 1), R + r * m, sizeof(double) * (m - 1));
        double a = s_hv(P, i + 1, m - 1, ref);
        if (a < 0) {
            free(P);
            return -1;
        }
        hv += a * h;
    }
    free(P);
    return hv;
}

double pareto_hypervolume(const double *F, size_t n, size_t m, const double *ref)
{
    if (m == 0)
        return 0;
    double *R = malloc(sizeof(double) * (n ? n : 1) * m);
    if (!R)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const double *r = F + i * m;
        int below = s_finite_row(r, m);
        for (size_t j = 0; j < m && below; j++)
            below = r[j] < ref[j];
        if (below)
            memcpy(R + (k++) * m, r, sizeof(double) * m);
    }
    double hv = s_hv(R, k, m, ref);
    free(R);
    return hv;
}
