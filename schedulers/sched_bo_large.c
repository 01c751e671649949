/*  sched_bo_large.c - bo when a study has many finished trials.
    An exact GP costs O(n^3) time and O(n^2) memory per fit: 1.5-1.8 s a
    suggestion at n = 2 000 on the 2-core machine, about 25 s at 5 000 and
    3.2 GB for the kernel matrix alone at 20 000 (docs/design.md,
    Schedulers: bo at large n). Past K observations (option "large_n",
    default BO_LARGE_N) a job keeps K of them: a first share (option
    "large_first", default half) picked by a rule (option "large_subset"):
    the best by the value the model fits, so the incumbent and the region
    the acquisition searches stay exact, or the nearest to the incumbent;
    and an evenly spread random sample of the rest (the model's global
    shape and the failed trials' "worse than this" rows). Which rule and
    share is the default was measured with bench_bo large (docs/bench.md).
    Below K nothing changes, so the small-study behaviour (bench-bo at
    50-200 evaluations) is the same model as before.
*/
#include "sched_bo_job.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double y;
    int i;
} s_rank;

static int s_rank_cmp(const void *a, const void *b)
{
    const s_rank *x = a, *y = b;
    /* finite values first, lower first; NaN (failed) last */
    int nx = isnan(x->y), ny = isnan(y->y);
    if (nx != ny)
        return nx - ny;
    if (!nx && x->y != y->y)
        return x->y < y->y ? -1 : 1;
    return x->i - y->i;
}

/* Moves row `from` of a n x w array to row `to` (to <= from). */
static void s_move(double *a, int w, int to, int from)
{
    if (a && to != from)
        memmove(a + (size_t)to * (size_t)w, a + (size_t)from * (size_t)w,
                sizeof(double) * (size_t)w);
}

/* Ranks rows by distance to the incumbent (the lowest finite y): each
   dimension's difference divided by its lengthscale (theta0, log) when
   known. r[i].y receives the squared distance. */
static void s_nearest(const bo_job *j, s_rank *r)
{
    int n = j->n, D = j->lay->D, inc = -1;
    for (int i = 0; i < n; i++)
        if (!isnan(j->y[i]) && (inc < 0 || j->y[i] < j->y[inc]))
            inc = i;
    const double *x0 = j->X + (size_t)(inc < 0 ? 0 : inc) * (size_t)D;
    for (int i = 0; i < n; i++) {
        const double *x = j->X + (size_t)i * (size_t)D;
        double d2 = 0;
        for (int k = 0; k < D; k++) {
            double t = x[k] - x0[k];
            if (j->theta0)
                t *= exp(-j->theta0[k]);
            d2 += t * t;
        }
        r[i] = (s_rank){d2, i};
    }
}

int sched__bo_large_subset(bo_job *j)
{
    int n = j->n, keep = j->large_n > 0 ? j->large_n : BO_LARGE_N;
    if (n <= keep)
        return 0;
    s_rank *r = malloc(sizeof *r * (size_t)n);
    unsigned char *take = calloc((size_t)n, 1);
    if (!r || !take) {
        free(r);
        free(take);
        return -1;
    }
    if (j->large_rule == BO_LARGE_NEAREST)
        s_nearest(j, r);
    else
        for (int i = 0; i < n; i++)
            r[i] = (s_rank){j->y[i], i};
    qsort(r, (size_t)n, sizeof *r, s_rank_cmp);
    double share = j->large_first > 0 ? fmin(j->large_first, 1) : BO_LARGE_FIRST;
    int best = (int)lround(keep * share);
    for (int k = 0; k < best; k++)
        take[r[k].i] = 1;
    /* the rest: a random sample of keep - best from the other n - best
       (selection sampling, Knuth's algorithm S: each kept with the right
       probability, in index order) */
    unsigned long long st = j->seed ^ 0x6A09E667F3BCC909ULL;
    int need = keep - best, left = n - best;
    for (int k = best; k < n && need > 0; k++, left--) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = (double)(st >> 11) * 0x1.0p-53;
        if (u * left < need) {
            take[r[k].i] = 1;
            need--;
        }
    }
    int D = j->lay->D, out = 0;
    for (int i = 0; i < n; i++) {
        if (!take[i])
            continue;
        s_move(j->X, D, out, i);
        j->y[out] = j->y[i];
        if (j->nc > 0) {
            s_move(j->C, j->nc, out, i);
            j->feas[out] = j->feas[i];
        }
        if (j->nobj > 0)
            s_move(j->F, j->nobj, out, i);
        out++;
    }
    j->n = out;
    free(r);
    free(take);
    return 0;
}
