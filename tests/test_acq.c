/*  test_acq.c - acquisition functions and their optimiser
    (schedulers/acq.c): log-EI against a long-double evaluation where that
    is accurate, against the asymptotic series far from the incumbent (and
    finite everywhere), gradients against finite differences, and the
    optimiser against a dense grid, with legal (rounded) outputs.
*/
#include "jz_test.h"
#include "schedulers/acq.h"

#include <float.h>

/* h(z) = z Phi(z) + phi(z) in long double (64-bit mantissa): the
   cancellation for z < 0 costs about log10(z^2) digits, which long double
   can afford down to z = -40 for a 1e-13 check. */
static long double s_h_ref(long double z)
{
    long double Phi = 0.5L * erfcl(-z / sqrtl(2.0L));
    long double phi =
        expl(-0.5L * z * z) / sqrtl(2.0L * 3.14159265358979323846264338327950288L);
    return z * Phi + phi;
}

/* 1 when long double arithmetic really is wider than double (it is not
   under valgrind, which computes x87 values in double precision). */
static int s_extended(void)
{
    volatile long double one = 1, eps = LDBL_EPSILON;
    return one + eps != one && LDBL_MANT_DIG > DBL_MANT_DIG;
}

TEST(log_h_matches_long_double)
{
    /* without extended precision the reference itself is only good down
       to z = -5; the far tail is checked against the series below */
    double lo = s_extended() ? -40 : -5;
    if (lo > -40)
        printf("note: long double is not extended here; checking z >= %g\n", lo);
    for (double z = lo; z <= 12; z += 0.0625) {
        double lh = acq_log_h(z, NULL);
        double ref = (double)logl(s_h_ref(z));
        CHECK_NEAR(lh, ref, 1e-12);
    }
    /* around the switch between the direct formula and the fraction */
    for (double z = -3.01; z <= -2.99; z += 0.001)
        CHECK_NEAR(acq_log_h(z, NULL), (double)logl(s_h_ref(z)), 1e-13);
}

TEST(log_h_finite_far_away)
{
    /* asymptotic series: h(z) = phi(z)/z^2 (1 - 3/z^2 + 15/z^4 - ...) */
    double zs[] = {-50, -1e3, -1e5, -1e8, -1e12, -1e100, -1e150};
    for (size_t i = 0; i < sizeof zs / sizeof zs[0]; i++) {
        double z = zs[i], g;
        double lh = acq_log_h(z, &g);
        CHECK(isfinite(lh) && isfinite(g));
        double t = -z;
        double series = -0.5 * t * t - 0.5 * log(2 * M_PI) - 2 * log(t) +
                        log1p(-3 / (t * t) + 15 / (t * t * t * t) - 105 / pow(t, 6));
        CHECK_NEAR(lh, series, 1e-13);
        CHECK_NEAR(g, t + 2 / t, 1e-6); /* d log h/dz ~ -z + 2/(-z) */
    }
    double prev = acq_log_h(0, NULL);
    double beyond[] = {-1e200, -1e300, -DBL_MAX};
    for (size_t i = 0; i < 3; i++) {
        double lh = acq_log_h(beyond[i], NULL);
        CHECK(isfinite(lh));
        CHECK(lh < prev);
    }
    /* monotone increasing in z across the whole range */
    for (double z = -1e4; z < 50; z = z < -10 ? z * 0.9 : z + 0.01) {
        double a = acq_log_h(z, NULL), b = acq_log_h(z < -10 ? z * 0.9 : z + 0.01, NULL);
        if (!(b > a)) {
            JZT_FAIL("not increasing at z=%g", z);
            break;
        }
    }
}

TEST(log_h_derivative)
{
    for (double z = -60; z <= 8; z += 0.37) {
        double g, h = 1e-6 * fmax(1, fabs(z));
        acq_log_h(z, &g);
        double fd = (acq_log_h(z + h, NULL) - acq_log_h(z - h, NULL)) / (2 * h);
        CHECK_NEAR(g, fd, 1e-6);
    }
}

TEST(log_ei_direct_and_gradients)
{
    double cases[][3] = {
        {0.3, 0.5, 0.1}, {-1, 2, 0}, {2, 0.1, -1}, {0, 1e-3, 0.5}, {5, 0.2, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double mu = cases[c][0], s = cases[c][1], best = cases[c][2], dmu, ds;
        double v = acq_log_ei(mu, s, best, &dmu, &ds);
        long double z = (best - mu) / s;
        CHECK_NEAR(v, (double)logl(s * s_h_ref(z)), 1e-12);
        double h = 1e-7;
        CHECK_NEAR(dmu,
                   (acq_log_ei(mu + h, s, best, NULL, NULL) -
                    acq_log_ei(mu - h, s, best, NULL, NULL)) /
                       (2 * h),
                   1e-5);
        h = 1e-7 * s;
        CHECK_NEAR(ds,
                   (acq_log_ei(mu, s + h, best, NULL, NULL) -
                    acq_log_ei(mu, s - h, best, NULL, NULL)) /
                       (2 * h),
                   1e-5);
    }
}

static gp_t *s_gp(int d, int n, unsigned seed)
{
    unsigned long long st = seed;
    gp_t *gp = gp_new(d);
    double X[n * d], y[n];
    for (int a = 0; a < n; a++) {
        y[a] = 0;
        for (int i = 0; i < d; i++) {
            st = st * 6364136223846793005ULL + 1442695040888963407ULL;
            X[a * d + i] = (double)(st >> 11) / 9007199254740992.0;
            y[a] +=
                (X[a * d + i] - 0.3) * (X[a * d + i] - 0.3) + 0.1 * sin(9 * X[a * d + i]);
        }
    }
    gp_set_data(gp, X, y, n, 1);
    gp_fit(gp, NULL);
    return gp;
}

TEST(acquisition_gradients)
{
    int d = 2;
    gp_t *gp = s_gp(d, 15, 3);
    acq_t acqs[2] = {{.kind = ACQ_EI, .best = -1.2}, {.kind = ACQ_UCB, .kappa = 2.0}};
    for (int k = 0; k < 2; k++) {
        double pts[][2] = {{0.31, 0.72}, {0.9, 0.1}, {0.55, 0.45}};
        for (int p = 0; p < 3; p++) {
            double g[2];
            double v = acq_value(gp, &acqs[k], pts[p], g);
            CHECK(isfinite(v));
            for (int i = 0; i < d; i++) {
                double xp[2] = {pts[p][0], pts[p][1]}, xm[2] = {pts[p][0], pts[p][1]},
                       h = 1e-6;
                xp[i] += h;
                xm[i] -= h;
                double fd = (acq_value(gp, &acqs[k], xp, NULL) -
                             acq_value(gp, &acqs[k], xm, NULL)) /
                            (2 * h);
                CHECK_NEAR(g[i], fd, 1e-5);
            }
        }
    }
    /* far below the incumbent, log EI is still finite and ordered */
    acq_t far = {.kind = ACQ_EI, .best = -1e6};
    double a = acq_value(gp, &far, (double[]){0.3, 0.3}, NULL);
    double b = acq_value(gp, &far, (double[]){0.95, 0.95}, NULL);
    CHECK(isfinite(a) && isfinite(b) && a != b);
    gp_destroy(&gp);
}

TEST(optimiser_beats_grid)
{
    int d = 2;
    gp_t *gp = s_gp(d, 12, 5);
    double best = INFINITY;
    for (int i = 0; i < gp_size(gp); i++)
        best = fmin(best, gp_y_std(gp, i));
    acq_t a = {.kind = ACQ_EI, .best = best};
    double grid = -INFINITY;
    for (int i = 0; i <= 200; i++)
        for (int j = 0; j <= 200; j++)
            grid = fmax(grid, acq_value(gp, &a, (double[]){i / 200.0, j / 200.0}, NULL));
    acq_opt_opts o;
    acq_opt_opts_init(&o);
    o.seed = 1;
    double out[3 * 2], vals[3];
    int got = acq_optimize(gp, &a, &o, out, vals, 3);
    REQUIRE(got == 3);
    CHECK(vals[0] >= grid - 1e-6);
    CHECK(vals[0] >= vals[1] && vals[1] >= vals[2]);
    CHECK(!(out[0] == out[2] && out[1] == out[3]));
    for (int i = 0; i < 6; i++)
        CHECK(out[i] >= 0 && out[i] <= 1);
    CHECK_NEAR(acq_value(gp, &a, out, NULL), vals[0], 1e-12);
    /* same seed, same answer */
    double out2[6], vals2[3];
    acq_optimize(gp, &a, &o, out2, vals2, 3);
    CHECK(memcmp(out, out2, sizeof out) == 0);
    gp_destroy(&gp);
}

/* second coordinate legal only on multiples of 0.25 */
static void s_round(void *ctx, double *x)
{
    (*(int *)ctx)++;
    x[1] = floor(x[1] * 4 + 0.5) / 4;
}

TEST(optimiser_rounds_to_legal)
{
    int d = 2, calls = 0;
    gp_t *gp = s_gp(d, 10, 9);
    acq_t a = {.kind = ACQ_UCB, .kappa = 1.5};
    acq_opt_opts o;
    acq_opt_opts_init(&o);
    unsigned char mask[2] = {1, 0};
    double starts[2] = {0.5, 0.5};
    o.mask = mask;
    o.round = s_round;
    o.round_ctx = &calls;
    o.starts = starts;
    o.n_starts = 1;
    o.n_candidates = 256;
    double out[8 * 2], vals[8];
    int got = acq_optimize(gp, &a, &o, out, vals, 8);
    REQUIRE(got == 8);
    CHECK(calls > 256);
    for (int p = 0; p < got; p++) {
        double q = out[p * 2 + 1] * 4;
        CHECK(q == floor(q));
    }
    atomic_int cancel = 1;
    o.cancel = &cancel;
    CHECK(acq_optimize(gp, &a, &o, out, vals, 8) == -1);
    gp_destroy(&gp);
}

TEST(log_Phi_accurate_and_finite)
{
    /* against long double where that is accurate (erfc of a long double
       keeps its relative precision in the tail) */
    double lo = s_extended() ? -30 : -5;
    for (double z = lo; z <= 8; z += 0.03125) {
        double g;
        double v = acq_log_Phi(z, &g);
        long double P = 0.5L * erfcl(-(long double)z / sqrtl(2.0L));
        CHECK_NEAR(v, (double)logl(P), 1e-12);
        long double phi =
            expl(-0.5L * z * z) / sqrtl(2.0L * 3.14159265358979323846264338327950288L);
        CHECK_NEAR(g, (double)(phi / P), 1e-9);
    }
    /* far in the tail: log Phi(z) ~ -z^2/2 - log(-z) - log(2pi)/2 */
    double zs[] = {-40, -1e3, -1e8, -1e100};
    for (size_t i = 0; i < sizeof zs / sizeof zs[0]; i++) {
        double z = zs[i], g;
        double v = acq_log_Phi(z, &g);
        CHECK(isfinite(v) && isfinite(g));
        double t = -z;
        CHECK_NEAR(v, -0.5 * t * t - log(t) - 0.5 * log(2 * M_PI) + log1p(-1 / (t * t)),
                   1e-9 * (1 + 0.5 * t * t));
        CHECK_NEAR(g, t, 1e-3 * t);
    }
    /* monotone through the switch at -3 */
    double prev = -INFINITY;
    for (double z = -3.2; z <= -2.8; z += 0.001) {
        double v = acq_log_Phi(z, NULL);
        CHECK(v > prev);
        prev = v;
    }
}

/* A constraint GP over d=2: c(x) = x0 + x1 (feasible when <= 1). */
static gp_t *s_con_gp(int n, unsigned seed, double *mean, double *sd)
{
    unsigned long long st = seed;
    gp_t *gp = gp_new(2);
    double X[n * 2], y[n];
    for (int a = 0; a < n; a++) {
        for (int i = 0; i < 2; i++) {
            st = st * 6364136223846793005ULL + 1442695040888963407ULL;
            X[a * 2 + i] = (double)(st >> 11) / 9007199254740992.0;
        }
        y[a] = X[a * 2] + X[a * 2 + 1];
    }
    gp_set_data(gp, X, y, n, 1);
    gp_fit(gp, NULL);
    *mean = gp_y_mean(gp);
    *sd = gp_y_sd(gp);
    return gp;
}

TEST(probability_of_feasibility)
{
    gp_t *gp = s_gp(2, 15, 3);
    double cm, cs;
    gp_t *cg = s_con_gp(20, 11, &cm, &cs);
    acq_con con = {cg, (1.0 - cm) / cs, 1};
    acq_t plain = {.kind = ACQ_EI, .best = -1.2};
    acq_t pof = {.kind = ACQ_EI, .best = -1.2, .ncons = 1, .cons = &con};
    acq_t only = pof;
    only.infeasible = 1;
    double pts[][2] = {{0.2, 0.3}, {0.45, 0.5}, {0.9, 0.8}, {0.05, 0.95}};
    for (int p = 0; p < 4; p++) {
        /* the value is log EI + log PoF, with PoF from the constraint's
           posterior; the infeasible form is log PoF alone */
        double mu, var;
        gp_predict(cg, pts[p], &mu, &var, NULL, NULL);
        double lp = acq_log_Phi((con.bound - mu) / sqrt(fmax(var, 1e-18)), NULL);
        double e = acq_value(gp, &plain, pts[p], NULL);
        CHECK_NEAR(acq_value(gp, &pof, pts[p], NULL), e + lp, 1e-12);
        CHECK_NEAR(acq_value(gp, &only, pts[p], NULL), lp, 1e-12);
        /* gradients against finite differences */
        for (int k = 0; k < 2; k++) {
            const acq_t *a = k ? &only : &pof;
            double g[2];
            acq_value(gp, a, pts[p], g);
            for (int i = 0; i < 2; i++) {
                double xp[2] = {pts[p][0], pts[p][1]}, xm[2] = {pts[p][0], pts[p][1]},
                       h = 1e-6;
                xp[i] += h;
                xm[i] -= h;
                double fd =
                    (acq_value(gp, a, xp, NULL) - acq_value(gp, a, xm, NULL)) / (2 * h);
                CHECK_NEAR(g[i], fd, 1e-4 * (1 + fabs(fd)));
            }
        }
    }
    /* a clearly infeasible point scores far below a clearly feasible one
       under PoF alone; the batch form agrees with the single one */
    double X[4] = {0.1, 0.1, 0.95, 0.95}, v[2];
    REQUIRE(acq_values(gp, &only, X, 2, v) == 0);
    CHECK(v[0] > -0.1 && v[1] < -5);
    CHECK_NEAR(v[0], acq_value(gp, &only, X, NULL), 1e-9);
    /* (far outside, the posterior variance is near its floor, where the
       batched and single computations differ in their last digits) */
    CHECK_NEAR(v[1], acq_value(gp, &only, X + 2, NULL), 1e-3);
    REQUIRE(acq_values(gp, &pof, X, 2, v) == 0);
    CHECK_NEAR(v[1], acq_value(gp, &pof, X + 2, NULL), 1e-3);
    /* ">=" flips the side */
    acq_con ge = {cg, (1.0 - cm) / cs, 0};
    acq_t only_ge = {.kind = ACQ_EI, .ncons = 1, .cons = &ge, .infeasible = 1};
    CHECK(acq_value(gp, &only_ge, X, NULL) < -5 &&
          acq_value(gp, &only_ge, X + 2, NULL) > -0.1);
    /* the optimiser, searching PoF alone, lands in the feasible region */
    acq_opt_opts o;
    acq_opt_opts_init(&o);
    o.seed = 2;
    double out[2], val;
    REQUIRE(acq_optimize(gp, &only, &o, out, &val, 1) == 1);
    CHECK(out[0] + out[1] < 1);
    gp_destroy(&cg);
    gp_destroy(&gp);
}

int main(void)
{
    RUN(log_h_matches_long_double);
    RUN(log_h_finite_far_away);
    RUN(log_h_derivative);
    RUN(log_ei_direct_and_gradients);
    RUN(acquisition_gradients);
    RUN(optimiser_beats_grid);
    RUN(optimiser_rounds_to_legal);
    RUN(log_Phi_accurate_and_finite);
    RUN(probability_of_feasibility);
    TEST_DONE();
}
