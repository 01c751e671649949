/*  test_acq_ehvi.c - expected hypervolume improvement
    (schedulers/acq_ehvi.c): the hypervolume improvement of a point equals
    the exact hypervolume gained (common/pareto.c) in 2 and 3 objectives,
    its gradient and log EHVI's gradient match finite differences, an
    empty front leaves one box up to the reference point, and EHVI ranks
    a point that extends the front above one that is dominated.
*/
#include "jz_test.h"
#include "common/pareto.h"
#include "schedulers/acq_ehvi.h"

static unsigned long long s_st = 7;

static double s_unif(void)
{
    s_st = s_st * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(s_st >> 11) / 9007199254740992.0;
}

/* a GP of dimension d on n random points of a smooth function */
static gp_t *s_gp(int d, int n, double shift)
{
    gp_t *gp = gp_new(d);
    double X[n * d], y[n];
    for (int a = 0; a < n; a++) {
        y[a] = 0;
        for (int i = 0; i < d; i++) {
            X[a * d + i] = s_unif();
            y[a] += (X[a * d + i] - shift) * (X[a * d + i] - shift);
        }
    }
    gp_set_data(gp, X, y, n, 1);
    gp_fit(gp, NULL);
    return gp;
}

/* points on a curved front (with some dominated ones mixed in) */
static void s_front(int m, int np, double *F)
{
    for (int i = 0; i < np; i++) {
        double s = 0;
        for (int k = 0; k < m; k++) {
            F[i * m + k] = 0.05 + s_unif();
            s += F[i * m + k] * F[i * m + k];
        }
        double r = i % 4 == 3 ? 1.3 : 1.0; /* every fourth off the front */
        for (int k = 0; k < m; k++)
            F[i * m + k] *= r / sqrt(s);
    }
}

TEST(hvi_equals_the_hypervolume_gained)
{
    gp_t *gp = s_gp(2, 8, 0.3);
    for (int m = 2; m <= 3; m++) {
        int np = 12;
        double F[(np + 1) * m], ref[3] = {1.1, 1.1, 1.1};
        s_front(m, np, F);
        gp_t *gps[3] = {gp, gp, gp};
        acq_ehvi *e = acq_ehvi_new(m, gps, F, np, ref, 4, 1);
        REQUIRE(e);
        CHECK(acq_ehvi_nboxes(e) > 0);
        double hv0 = pareto_hypervolume(F, (size_t)np, (size_t)m, ref);
        for (int t = 0; t < 200; t++) {
            double *y = F + np * m; /* appended as the last point */
            for (int k = 0; k < m; k++)
                y[k] = -0.1 + 1.3 * s_unif(); /* some beyond ref, some below 0 */
            double gained = pareto_hypervolume(F, (size_t)np + 1, (size_t)m, ref) - hv0;
            CHECK_NEAR(acq_ehvi_hvi(e, y, NULL), gained, 1e-12);
        }
        acq_ehvi_destroy(&e);
        CHECK(e == NULL);
    }
    gp_destroy(&gp);
}

TEST(empty_front_is_one_box_up_to_the_reference)
{
    gp_t *gp = s_gp(2, 8, 0.3);
    gp_t *gps[2] = {gp, gp};
    double ref[2] = {1.0, 2.0}, y[2] = {0.25, 0.5}, dy[2];
    acq_ehvi *e = acq_ehvi_new(2, gps, NULL, 0, ref, 4, 1);
    REQUIRE(e);
    CHECK(acq_ehvi_nboxes(e) == 1);
    CHECK_NEAR(acq_ehvi_hvi(e, y, dy), 0.75 * 1.5, 1e-15);
    CHECK_NEAR(dy[0], -1.5, 1e-15);
    CHECK_NEAR(dy[1], -0.75, 1e-15);
    y[0] = 1.5; /* beyond the reference: nothing */
    CHECK(acq_ehvi_hvi(e, y, NULL) == 0);
    acq_ehvi_destroy(&e);
    gp_destroy(&gp);
}

TEST(hvi_gradient_matches_finite_differences)
{
    gp_t *gp = s_gp(2, 8, 0.3);
    int m = 3, np = 10;
    double F[np * m], ref[3] = {1.1, 1.1, 1.1};
    s_front(m, np, F);
    gp_t *gps[3] = {gp, gp, gp};
    acq_ehvi *e = acq_ehvi_new(m, gps, F, np, ref, 4, 1);
    REQUIRE(e);
    int checked = 0;
    for (int t = 0; t < 100; t++) {
        double y[3], dy[3];
        for (int k = 0; k < m; k++)
            y[k] = 0.8 * s_unif();
        if (acq_ehvi_hvi(e, y, dy) <= 0)
            continue;
        for (int k = 0; k < m; k++) {
            double h = 1e-7, yp[3], ym[3];
            memcpy(yp, y, sizeof y);
            memcpy(ym, y, sizeof y);
            yp[k] += h;
            ym[k] -= h;
            CHECK_NEAR(dy[k],
                       (acq_ehvi_hvi(e, yp, NULL) - acq_ehvi_hvi(e, ym, NULL)) / (2 * h),
                       1e-6);
        }
        checked++;
    }
    CHECK(checked > 20);
    acq_ehvi_destroy(&e);
    gp_destroy(&gp);
}

TEST(log_ehvi_gradient_matches_finite_differences)
{
    int d = 2, m = 2;
    gp_t *g0 = s_gp(d, 12, 0.2), *g1 = s_gp(d, 12, 0.8);
    gp_t *gps[2] = {g0, g1};
    /* a front from the models' own values at a few points */
    double F[5 * 2], ref[2];
    for (int i = 0; i < 5; i++) {
        double x[2] = {s_unif(), s_unif()}, mu, var;
        for (int k = 0; k < m; k++) {
            gp_predict(gps[k], x, &mu, &var, NULL, NULL);
            F[i * m + k] = gp_y_mean(gps[k]) + gp_y_sd(gps[k]) * mu;
        }
    }
    for (int k = 0; k < m; k++) {
        ref[k] = -INFINITY;
        for (int i = 0; i < 5; i++)
            ref[k] = fmax(ref[k], F[i * m + k]);
        ref[k] += 0.1;
    }
    acq_ehvi *e = acq_ehvi_new(m, gps, F, 5, ref, 32, 3);
    REQUIRE(e);
    int checked = 0;
    for (int t = 0; t < 40; t++) {
        double x[2] = {0.05 + 0.9 * s_unif(), 0.05 + 0.9 * s_unif()}, g[2];
        double v = acq_ehvi_log(e, x, g);
        if (!isfinite(v))
            continue;
        for (int i = 0; i < d; i++) {
            double h = 1e-6, xp[2] = {x[0], x[1]}, xm[2] = {x[0], x[1]};
            xp[i] += h;
            xm[i] -= h;
            double fd = (acq_ehvi_log(e, xp, NULL) - acq_ehvi_log(e, xm, NULL)) / (2 * h);
            CHECK_NEAR(g[i], fd, 1e-3);
        }
        checked++;
    }
    CHECK(checked > 10);
    acq_ehvi_destroy(&e);
    gp_destroy(&g0);
    gp_destroy(&g1);
}

TEST(ehvi_prefers_extending_the_front_to_a_dominated_point)
{
    /* objective 0 grows with x0, objective 1 falls with x0: every x0 is
       on the trade-off; x1 only adds to both (0.5 in x1 dominates) */
    int d = 2, n = 20, m = 2;
    double X[n * d], y0[n], y1[n];
    for (int a = 0; a < n; a++) {
        X[a * d] = s_unif();
        X[a * d + 1] = s_unif();
        double pen = (X[a * d + 1] - 0.5) * (X[a * d + 1] - 0.5);
        y0[a] = X[a * d] + pen;
        y1[a] = 1 - X[a * d] + pen;
    }
    gp_t *g0 = gp_new(d), *g1 = gp_new(d);
    gp_set_data(g0, X, y0, n, 1);
    gp_fit(g0, NULL);
    gp_set_data(g1, X, y1, n, 1);
    gp_fit(g1, NULL);
    gp_t *gps[2] = {g0, g1};
    double F[n * m], ref[2] = {1.6, 1.6};
    for (int a = 0; a < n; a++) {
        F[a * m] = y0[a];
        F[a * m + 1] = y1[a];
    }
    acq_ehvi *e = acq_ehvi_new(m, gps, F, n, ref, 32, 5);
    REQUIRE(e);
    double on[2] = {0.5, 0.5}, off[2] = {0.5, 0.95};
    CHECK(acq_ehvi_log(e, on, NULL) > acq_ehvi_log(e, off, NULL));
    acq_ehvi_destroy(&e);
    gp_destroy(&g0);
    gp_destroy(&g1);
}

int main(void)
{
    RUN(hvi_equals_the_hypervolume_gained);
    RUN(empty_front_is_one_box_up_to_the_reference);
    RUN(hvi_gradient_matches_finite_differences);
    RUN(log_ehvi_gradient_matches_finite_differences);
    RUN(ehvi_prefers_extending_the_front_to_a_dominated_point);
    TEST_DONE();
}
