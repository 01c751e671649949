/*  test_sched_bo_large.c - bo's model at many observations
    (schedulers/sched_bo_large.c): past BO_LARGE_N a job keeps BO_LARGE_N
    rows, the best half by the fitted value and a sample of the rest, with
    every per-row array (X, y, constraints, feasibility, objectives) moved
    together; at or below BO_LARGE_N nothing changes. The rules behind
    the options "large_n", "large_subset" and "large_first": the share
    kept first, the nearest to the incumbent in the previous fit's
    lengthscales, deterministic by seed; the options' checks.
*/
#include "jz_test.h"
#include "sched_testlib.h"
#include "schedulers/sched_bo.h"
#include "schedulers/sched_bo_job.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* rows kept by a job of n rows (X as s_job makes them) under the rule */
static int s_kept(int n, int keep, int rule, double first, unsigned long long seed,
                  unsigned char *kept)
{
    bo_layout l = {.D = 2};
    bo_job *j = s_job(&l, n, 0, 0);
    j->large_n = keep;
    j->large_rule = rule;
    j->large_first = first;
    j->seed = seed;
    int rc = sched__bo_large_subset(j);
    for (int i = 0; i < n; i++)
        kept[i] = 0;
    for (int k = 0; rc == 0 && k < j->n; k++)
        kept[(int)j->X[2 * k]] = 1;
    int got = rc == 0 ? j->n : -1;
    s_free(j);
    return got;
}

TEST(the_first_share_is_the_best_and_the_rest_a_seeded_sample)
{
    int n = 3001, keep = 400;
    unsigned char *a = malloc((size_t)n), *b = malloc((size_t)n), *c = malloc((size_t)n);
    REQUIRE(a && b && c);
    CHECK(s_kept(n, keep, BO_LARGE_BEST, 0.8, 7, a) == keep);
    CHECK(s_kept(n, keep, BO_LARGE_BEST, 0.8, 7, b) == keep);
    CHECK(s_kept(n, keep, BO_LARGE_BEST, 0.8, 8, c) == keep);
    int best = 0, same = 1, differ = 0;
    for (int i = 0; i < n; i++) {
        /* the values 0..319 (of the finite rows) are the best 320 = 0.8 x 400 */
        double y = s_y(i, n);
        if (!isnan(y) && y < 320) {
            CHECK(a[i]);
            best++;
        }
        same &= a[i] == b[i];
        differ |= a[i] != c[i];
    }
    CHECK(best > 250); /* every 10th row failed: about 290 of them */
    CHECK(same);       /* the same seed, the same rows */
    CHECK(differ);     /* another seed, another sample */
    free(a);
    free(b);
    free(c);
}

TEST(nearest_keeps_the_incumbents_neighbourhood)
{
    /* s_job's rows lie on a line, x = (i, -i); the incumbent (y = 0) is
       row 0, so the nearest K are rows 0..K-1, failed ones included */
    int n = 2000, keep = 300;
    unsigned char *a = malloc((size_t)n);
    REQUIRE(a);
    CHECK(s_kept(n, keep, BO_LARGE_NEAREST, 1, 7, a) == keep);
    for (int i = 0; i < n; i++)
        CHECK(a[i] == (i < keep));
    /* 0.5: rows 0..149 and 150 others */
    CHECK(s_kept(n, keep, BO_LARGE_NEAREST, 0.5, 7, a) == keep);
    int near = 0, far = 0;
    for (int i = 0; i < n; i++) {
        near += i < 150 && a[i];
        far += i >= 150 && a[i];
    }
    CHECK(near == 150 && far == 150);
    free(a);
}

TEST(nearest_measures_in_the_fitted_lengthscales)
{
    /* incumbent (0.5, 0.5); A is 0.3 away along x, B 0.1 along y: B is
       nearer unless y's lengthscale is short (0.05 against x's 1) */
    bo_layout l = {.D = 2};
    double X0[] = {0.8, 0.5, 0.5, 0.5, 0.5, 0.6};
    double y0[] = {5, 0, 6};
    double theta[] = {0, log(0.05), 0, 0};
    for (int t = 0; t < 2; t++) {
        bo_job *j = s_job(&l, 3, 0, 0);
        memcpy(j->X, X0, sizeof X0);
        memcpy(j->y, y0, sizeof y0);
        j->large_n = 2;
        j->large_rule = BO_LARGE_NEAREST;
        j->large_first = 1;
        j->theta0 = t ? theta : NULL;
        CHECK(sched__bo_large_subset(j) == 0);
        CHECK(j->n == 2);
        /* kept in their original order: t = 0, the incumbent (row 1) and
           B; t = 1, A (y 5, nearer in these lengthscales) and the incumbent */
        CHECK(t ? (j->y[0] == 5 && j->y[1] == 0) : (j->y[0] == 0 && j->y[1] == 6));
        s_free(j);
    }
}

static spec_t *s_spec(const char *sched)
{
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"name\":\"t\",\"objective\":{\"metric\":\"y\",\"mode\":\"min\"},"
             "\"scheduler\":%s,\"budget\":{\"trials\":50},\"space\":{\"x\":{\"type\":"
             "\"float\",\"low\":0,\"high\":1}},\"trial\":{\"command\":[\"true\"]}}",
             sched);
    return stl_parse(buf);
}

TEST(options_checked)
{
    const char *bad[][2] = {
        {"{\"type\":\"bo\",\"large_n\":99}", "scheduler.large_n: must be an integer"},
        {"{\"type\":\"bo\",\"large_n\":5001}", "scheduler.large_n: "},
        {"{\"type\":\"bo\",\"large_n\":1000.5}", "scheduler.large_n: "},
        {"{\"type\":\"bo\",\"large_subset\":\"worst\"}",
         "scheduler.large_subset: must be \"best\" or \"nearest\""},
        {"{\"type\":\"bo\",\"large_first\":0}", "scheduler.large_first: must be"},
        {"{\"type\":\"bo\",\"large_first\":1.5}", "scheduler.large_first: "},
    };
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spec_t *sp = s_spec(bad[i][0]);
        REQUIRE(sp);
        stl_check_refused(sched_bo_new, sp, bad[i][1]);
        spec_destroy(&sp);
    }
    spec_t *sp = s_spec("{\"type\":\"bo\",\"large_n\":2000,\"large_subset\":\"nearest\","
                        "\"large_first\":0.8}");
    REQUIRE(sp);
    sched_t *s = sched_bo_new(sp, err, sizeof err);
    CHECK(s != NULL);
    sched_destroy(&s);
    spec_destroy(&sp);
    bo_opts o;
    sp = s_spec("{\"type\":\"bo\"}");
    REQUIRE(sp);
    CHECK(sched__bo_options(&o, sp, err, sizeof err) == 0);
    CHECK(o.large_n == BO_LARGE_N && o.large_n == 1000);
    spec_destroy(&sp);
}

int main(void)
{
    RUN(at_or_below_the_limit_nothing_changes);
    RUN(past_the_limit_the_best_half_and_a_sample_stay_with_their_rows);
    RUN(the_first_share_is_the_best_and_the_rest_a_seeded_sample);
    RUN(nearest_keeps_the_incumbents_neighbourhood);
    RUN(nearest_measures_in_the_fitted_lengthscales);
    RUN(options_checked);
    TEST_DONE();
}
