/*  test_sched_bo_large.c - bo's model at many observations
    (schedulers/sched_bo_large.c): past BO_LARGE_N a job keeps BO_LARGE_N
    rows, the best half by the fitted value and a sample of the rest, with
    every per-row array (X, y, constraints, feasibility, objectives) moved
    together; at or below BO_LARGE_N nothing changes.
*/
#include "jz_test.h"
#include "schedulers/sched_bo_job.h"

#include <math.h>
#include <stdlib.h>

/* y of row i: a permutation of 0..n-1 (17 is prime to the sizes used),
   NaN (failed) for every 10th row */
static double s_y(int i, int n)
{
    return i % 10 == 3 ? NAN : (double)((i * 17) % n);
}

static bo_job *s_job(bo_layout *l, int n, int nc, int nobj)
{
    bo_job *j = calloc(1, sizeof *j);
    j->lay = l;
    j->n = n;
    j->nc = nc;
    j->nobj = nobj;
    j->seed = 7;
    j->X = malloc(sizeof(double) * (size_t)n * 2);
    j->y = malloc(sizeof(double) * (size_t)n);
    if (nc) {
        j->C = malloc(sizeof(double) * (size_t)n * (size_t)nc);
        j->feas = malloc((size_t)n);
    }
    if (nobj)
        j->F = malloc(sizeof(double) * (size_t)n * (size_t)nobj);
    for (int i = 0; i < n; i++) {
        j->X[2 * i] = i;
        j->X[2 * i + 1] = -i;
        j->y[i] = s_y(i, n);
        for (int c = 0; c < nc; c++)
            j->C[i * nc + c] = 1000.0 * i + c;
        if (nc)
            j->feas[i] = (unsigned char)(i % 3 == 0);
        for (int o = 0; o < nobj; o++)
            j->F[i * nobj + o] = 0.5 * i + o;
    }
    return j;
}

static void s_free(bo_job *j)
{
    free(j->X);
    free(j->y);
    free(j->C);
    free(j->feas);
    free(j->F);
    free(j);
}

TEST(at_or_below_the_limit_nothing_changes)
{
    bo_layout l = {.D = 2};
    bo_job *j = s_job(&l, BO_LARGE_N, 0, 0);
    CHECK(sched__bo_large_subset(j) == 0);
    CHECK(j->n == BO_LARGE_N);
    for (int i = 0; i < j->n; i++)
        CHECK(j->X[2 * i] == i && (j->y[i] == s_y(i, BO_LARGE_N) || isnan(j->y[i])));
    s_free(j);
}

TEST(past_the_limit_the_best_half_and_a_sample_stay_with_their_rows)
{
    int n = 5003;
    bo_layout l = {.D = 2};
    bo_job *j = s_job(&l, n, 2, 3);
    CHECK(sched__bo_large_subset(j) == 0);
    CHECK(j->n == BO_LARGE_N);
    int prev = -1, finite = 0, below = 0, failed = 0;
    for (int k = 0; k < j->n; k++) {
        int i = (int)j->X[2 * k];
        CHECK(i > prev); /* original order, no row twice */
        prev = i;
        CHECK(j->X[2 * k + 1] == -i);
        CHECK((isnan(j->y[k]) && isnan(s_y(i, n))) || j->y[k] == s_y(i, n));
        CHECK(j->C[2 * k] == 1000.0 * i && j->C[2 * k + 1] == 1000.0 * i + 1);
        CHECK(j->feas[k] == (i % 3 == 0));
        CHECK(j->F[3 * k] == 0.5 * i && j->F[3 * k + 2] == 0.5 * i + 2);
        if (isnan(j->y[k]))
            failed++;
        else
            finite++;
        below += !isnan(j->y[k]) && j->y[k] < BO_LARGE_N / 2;
    }
    /* y is a permutation: the best half are exactly the values 0..499 that
       are not failed rows; every one of them is kept */
    int expect = 0;
    for (int i = 0; i < n; i++)
        expect += !isnan(s_y(i, n)) && s_y(i, n) < BO_LARGE_N / 2;
    CHECK(below >= expect);
    CHECK(finite > BO_LARGE_N / 2 && failed > 0); /* the sample reaches the rest */
    s_free(j);
}

int main(void)
{
    RUN(at_or_below_the_limit_nothing_changes);
    RUN(past_the_limit_the_best_half_and_a_sample_stay_with_their_rows);
    TEST_DONE();
}
