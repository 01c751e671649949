/*  test_gp.c - the Gaussian-process module (schedulers/gp.c): kernel,
    marginal-likelihood and posterior gradients against central finite
    differences in double precision, a posterior computed by hand, jitter
    escalation, a fit that recovers a smooth function, and the
    leave-one-out posterior against refits without each point.
*/
#include "jz_test.h"
#include "schedulers/gp.h"

static unsigned long long s_state = 12345;
static double s_u(void)
{
    s_state = s_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(s_state >> 11) / 9007199254740992.0;
}

static double s_func(const double *x, int d)
{
    double s = 0;
    for (int i = 0; i < d; i++)
        s += sin(3 * x[i] + i) + 0.5 * x[i] * x[i];
    return s;
}

static gp_t *s_make(int d, int n)
{
    gp_t *gp = gp_new(d);
    double X[n * d], y[n];
    for (int a = 0; a < n; a++) {
        for (int i = 0; i < d; i++)
            X[a * d + i] = s_u();
        y[a] = 10 + 3 * s_func(X + a * d, d);
    }
    gp_set_data(gp, X, y, n, 1);
    return gp;
}

TEST(kernel_gradients)
{
    int d = 3, nt = gp_ntheta(d);
    double th[5] = {log(0.3), log(0.7), log(1.9), log(1.7), log(0.01)};
    double a[3] = {0.1, 0.5, 0.9}, b[3] = {0.4, 0.45, 0.2};
    double dth[5], dx[3];
    double k = gp_kernel(d, th, a, b, dth, dx);
    CHECK(k > 0 && k < 1.7);
    /* Matérn-5/2 by hand at r */
    double r = sqrt(pow(0.3 / 0.3, 2) + pow(0.05 / 0.7, 2) + pow(0.7 / 1.9, 2));
    CHECK_NEAR(k, 1.7 * (1 + sqrt(5) * r + 5.0 / 3 * r * r) * exp(-sqrt(5) * r), 1e-14);
    CHECK_NEAR(gp_kernel(d, th, a, a, NULL, NULL), 1.7, 1e-14);
    for (int j = 0; j < nt; j++) {
        double h = 1e-6, tp[5], tm[5];
        memcpy(tp, th, sizeof th);
        memcpy(tm, th, sizeof th);
        tp[j] += h;
        tm[j] -= h;
        double fd =
            (gp_kernel(d, tp, a, b, NULL, NULL) - gp_kernel(d, tm, a, b, NULL, NULL)) /
            (2 * h);
        CHECK_NEAR(dth[j], fd, 1e-7);
    }
    for (int i = 0; i < d; i++) {
        double h = 1e-6, ap[3], am[3];
        memcpy(ap, a, sizeof a);
        memcpy(am, a, sizeof a);
        ap[i] += h;
        am[i] -= h;
        double fd =
            (gp_kernel(d, th, ap, b, NULL, NULL) - gp_kernel(d, th, am, b, NULL, NULL)) /
            (2 * h);
        CHECK_NEAR(dx[i], fd, 1e-7);
    }
}

TEST(marginal_likelihood_gradient)
{
    for (int d = 1; d <= 4; d += 3) {
        int n = 25, nt = gp_ntheta(d);
        gp_t *gp = s_make(d, n);
        REQUIRE(gp);
        double th[nt], g[nt];
        for (int i = 0; i < d; i++)
            th[i] = log(0.2 + 0.3 * i);
        th[d] = log(1.3);
        th[d + 1] = log(0.02);
        double l = gp_log_marginal(gp, th, g);
        CHECK(isfinite(l));
        for (int j = 0; j < nt; j++) {
            double h = 1e-5, tp[nt], tm[nt];
            memcpy(tp, th, sizeof th);
            memcpy(tm, th, sizeof th);
            tp[j] += h;
            tm[j] -= h;
            double fd =
                (gp_log_marginal(gp, tp, NULL) - gp_log_marginal(gp, tm, NULL)) / (2 * h);
            CHECK_NEAR(g[j], fd, 1e-6);
        }
        /* the prior's gradient too, inside and outside its soft box */
        double pg[nt];
        th[0] = log(5e-4);
        gp_log_prior(d, th, pg);
        for (int j = 0; j < nt; j++) {
            double h = 1e-6, tp[nt], tm[nt];
            memcpy(tp, th, sizeof th);
            memcpy(tm, th, sizeof th);
            tp[j] += h;
            tm[j] -= h;
            double fd = (gp_log_prior(d, tp, NULL) - gp_log_prior(d, tm, NULL)) / (2 * h);
            CHECK_NEAR(pg[j], fd, 1e-6);
        }
        gp_destroy(&gp);
        CHECK(gp == NULL);
    }
}

/* Two points in 1-D: K = [[s+e, c], [c, s+e]] inverted by hand. */
TEST(posterior_by_hand)
{
    gp_t *gp = gp_new(1);
    double X[2] = {0.2, 0.6}, y[2] = {1.0, 3.0};
    REQUIRE(gp_set_data(gp, X, y, 2, 1) == 0);
    CHECK_NEAR(gp_y_mean(gp), 2.0, 1e-15);
    CHECK_NEAR(gp_y_sd(gp), 1.0, 1e-15);
    double ell = 0.5, sf2 = 2.0, noise = 0.1;
    double th[3] = {log(ell), log(sf2), log(noise - GP_NOISE_FLOOR)};
    REQUIRE(gp_set_theta(gp, th) == 0);
    CHECK(gp_jitter(gp) == 0);
    double xs = 0.35;
#define M52(r) (sf2 * (1 + sqrt(5) * (r) + 5.0 / 3 * (r) * (r)) * exp(-sqrt(5) * (r)))
    double c = M52(0.4 / ell), s = sf2 + noise;
    double det = s * s - c * c;
    double k1 = M52(0.15 / ell), k2 = M52(0.25 / ell);
    double ys1 = -1, ys2 = 1; /* standardised */
    /* K^-1 = [[s, -c], [-c, s]] / det */
    double a1 = (s * ys1 - c * ys2) / det, a2 = (-c * ys1 + s * ys2) / det;
    double mean = k1 * a1 + k2 * a2;
    double var = sf2 - (k1 * (s * k1 - c * k2) + k2 * (-c * k1 + s * k2)) / det;
    double m, v;
    gp_predict(gp, &xs, &m, &v, NULL, NULL);
    CHECK_NEAR(m, mean, 1e-13);
    CHECK_NEAR(v, var, 1e-13);
    CHECK_NEAR(gp_y_mean(gp) + gp_y_sd(gp) * m, 2.0 + mean, 1e-13);
    /* log marginal likelihood by hand */
    double quad = ys1 * a1 + ys2 * a2;
    double lml = -0.5 * quad - 0.5 * log(det) - log(2 * M_PI);
    CHECK_NEAR(gp_log_marginal(gp, th, NULL), lml, 1e-13);
    gp_destroy(&gp);
#undef M52
}

TEST(posterior_gradients_and_batch)
{
    int d = 3, n = 30;
    gp_t *gp = s_make(d, n);
    double th[5] = {log(0.4), log(0.6), log(0.3), log(1.5), log(1e-4)};
    REQUIRE(gp_set_theta(gp, th) == 0);
    double xs[4 * 3];
    for (int i = 0; i < 12; i++)
        xs[i] = s_u();
    double bm[4], bv[4];
    REQUIRE(gp_predict_batch(gp, xs, 4, bm, bv) == 0);
    for (int p = 0; p < 4; p++) {
        double *x = xs + p * d, m, v, dm[3], dv[3];
        gp_predict(gp, x, &m, &v, dm, dv);
        CHECK_NEAR(bm[p], m, 1e-10);
        CHECK_NEAR(bv[p], v, 1e-10);
        for (int i = 0; i < d; i++) {
            double h = 1e-6, xp[3], xm[3], mp, vp, mm, vm;
            memcpy(xp, x, sizeof xp);
            memcpy(xm, x, sizeof xm);
            xp[i] += h;
            xm[i] -= h;
            gp_predict(gp, xp, &mp, &vp, NULL, NULL);
            gp_predict(gp, xm, &mm, &vm, NULL, NULL);
            CHECK_NEAR(dm[i], (mp - mm) / (2 * h), 1e-6);
            CHECK_NEAR(dv[i], (vp - vm) / (2 * h), 1e-6);
        }
    }
    gp_destroy(&gp);
}

TEST(jitter_escalates)
{
    /* identical inputs, huge signal variance: K + noise I is numerically
       singular, the factorisation must add jitter and still predict */
    int n = 40;
    double X[40], y[40];
    for (int i = 0; i < n; i++) {
        X[i] = 0.5 + (i % 2) * 1e-12;
        y[i] = i % 3;
    }
    gp_t *gp = gp_new(1);
    gp_set_data(gp, X, y, n, 1);
    double th[3] = {log(3.0), 30.0, -40.0};
    CHECK(gp_set_theta(gp, th) == 0);
    CHECK(gp_jitter(gp) > 0);
    double m, v;
    gp_predict(gp, (double[]){0.3}, &m, &v, NULL, NULL);
    CHECK(isfinite(m) && isfinite(v) && v >= 0);
    gp_destroy(&gp);
}

TEST(fit_recovers_function)
{
    int d = 2, n = 40;
    gp_t *gp = s_make(d, n);
    double th0[4];
    gp_default_theta(d, th0);
    double before = gp_log_marginal(gp, th0, NULL) + gp_log_prior(d, th0, NULL);
    gp_fit_opts o;
    gp_fit_opts_init(&o);
    o.seed = 7;
    REQUIRE(gp_fit(gp, &o) == 0);
    CHECK(gp_objective(gp) >= before);
    /* held-out error small relative to the function's range (~6) */
    double err = 0;
    for (int t = 0; t < 50; t++) {
        double x[2] = {0.05 + 0.9 * s_u(), 0.05 + 0.9 * s_u()}, m, v;
        gp_predict(gp, x, &m, &v, NULL, NULL);
        double f = 10 + 3 * s_func(x, d);
        err = fmax(err, fabs(gp_y_mean(gp) + gp_y_sd(gp) * m - f));
    }
    CHECK(err < 0.3);
    /* a second fit warm-started from the first gets the same objective */
    double th[4];
    memcpy(th, gp_theta(gp), sizeof th);
    double obj = gp_objective(gp);
    o.theta0 = th;
    o.restarts = 0;
    REQUIRE(gp_fit(gp, &o) == 0);
    CHECK_NEAR(gp_objective(gp), obj, 1e-6);
    /* fitting on a subset then polishing on everything also works */
    o.theta0 = NULL;
    o.restarts = 1;
    o.subset = 20;
    REQUIRE(gp_fit(gp, &o) == 0);
    CHECK(gp_objective(gp) >= before);
    gp_destroy(&gp);
    gp_destroy(&gp); /* NULL-safe */
}

/* The noise is learned: near the floor for a deterministic function (so
   the model can resolve small differences near an optimum), and about
   the true variance when the values are noisy. */
TEST(noise_learned)
{
    int d = 2;
    gp_fit_opts o;
    gp_fit_opts_init(&o);
    o.seed = 3;
    gp_t *gp = s_make(d, 40);
    REQUIRE(gp_fit(gp, &o) == 0);
    double sd2 = gp_y_sd(gp) * gp_y_sd(gp);
    double noise = (GP_NOISE_FLOOR + exp(gp_theta(gp)[d + 1])) * sd2;
    CHECK(noise < 1e-5);
    gp_destroy(&gp);

    /* noise sd 0.3 on a function of range ~6 */
    int n = 120;
    gp = gp_new(d);
    double X[120 * 2], y[120];
    unsigned long long st = 99;
    for (int a = 0; a < n; a++) {
        for (int i = 0; i < d; i++)
            X[a * d + i] = s_u();
        double z = 0; /* Box-Muller from the test's own generator */
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        double u1 = ((st >> 11) + 0.5) / 9007199254740992.0;
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        double u2 = (double)(st >> 11) / 9007199254740992.0;
        z = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
        y[a] = 10 + 3 * s_func(X + a * d, d) + 0.3 * z;
    }
    REQUIRE(gp_set_data(gp, X, y, n, 1) == 0);
    REQUIRE(gp_fit(gp, &o) == 0);
    sd2 = gp_y_sd(gp) * gp_y_sd(gp);
    noise = (GP_NOISE_FLOOR + exp(gp_theta(gp)[d + 1])) * sd2;
    CHECK(noise > 0.09 / 3 && noise < 0.09 * 3);
    gp_destroy(&gp);
}

TEST(cancel_gives_up)
{
    gp_t *gp = s_make(2, 20);
    atomic_int cancel = 1;
    gp_fit_opts o;
    gp_fit_opts_init(&o);
    o.cancel = &cancel;
    CHECK(gp_fit(gp, &o) == -1);
    gp_destroy(&gp);
    CHECK(gp_new(0) == NULL);
}

TEST(wall_prior)
{
    /* the wall prior's gradient against finite differences, across the
       range of lengthscales and in its soft box; mode at l = 1 */
    int d = 3, nt = gp_ntheta(d);
    double th[5], g[5];
    gp_default_theta(d, th);
    for (double t = log(5e-4); t < log(2e3); t += 0.7) {
        th[1] = t;
        gp_log_prior_kind(d, GP_PRIOR_WALL, th, g);
        for (int j = 0; j < nt; j++) {
            double h = 1e-6, tp[5], tm[5];
            memcpy(tp, th, sizeof th);
            memcpy(tm, th, sizeof th);
            tp[j] += h;
            tm[j] -= h;
            double fd = (gp_log_prior_kind(d, GP_PRIOR_WALL, tp, NULL) -
                         gp_log_prior_kind(d, GP_PRIOR_WALL, tm, NULL)) /
                        (2 * h);
            CHECK_NEAR(g[j], fd, 1e-5 * (1 + fabs(fd)));
        }
    }
    th[1] = 0;
    double at1 = gp_log_prior_kind(d, GP_PRIOR_WALL, th, NULL);
    th[1] = log(0.8);
    CHECK(gp_log_prior_kind(d, GP_PRIOR_WALL, th, NULL) < at1);
    th[1] = log(1.25);
    CHECK(gp_log_prior_kind(d, GP_PRIOR_WALL, th, NULL) < at1);
    /* at l = 0.1 the wall costs about 10 nats more than at l = 1; the
       log-normal about 1.5 */
    th[1] = log(0.1);
    CHECK(at1 - gp_log_prior_kind(d, GP_PRIOR_WALL, th, NULL) > 9);
    /* on a few points of a wiggly function, the fitted lengthscale is
       longer under the wall than under the log-normal prior */
    double X[8], y[8];
    for (int i = 0; i < 8; i++) {
        X[i] = (i + 0.5) / 8;
        y[i] = sin(25 * X[i]);
    }
    gp_t *a = gp_new(1), *b = gp_new(1);
    REQUIRE(a && b);
    gp_set_data(a, X, y, 8, 1);
    gp_set_data(b, X, y, 8, 1);
    gp_set_prior(b, GP_PRIOR_WALL);
    REQUIRE(gp_fit(a, NULL) == 0 && gp_fit(b, NULL) == 0);
    CHECK(gp_theta(b)[0] > gp_theta(a)[0]);
    CHECK(gp_theta(b)[0] > gp_theta(a)[0] + log(2.0)); /* 0.14 against 0.04 */
    gp_destroy(&a);
    gp_destroy(&b);
}

TEST(loo_matches_refit)
{
    /* the closed-form leave-one-out posterior against a GP on the other
       n - 1 points with the same hyperparameters and standardisation: its
       mean, and its latent variance plus the noise */
    enum { D = 2, N = 12 };
    double X[N * D], y[N], Xk[N * D], yk[N];
    for (int a = 0; a < N; a++) {
        for (int i = 0; i < D; i++)
            X[a * D + i] = s_u();
        y[a] = 10 + 3 * s_func(X + a * D, D);
    }
    gp_t *gp = gp_new(D);
    REQUIRE(gp && gp_set_data(gp, X, y, N, 1) == 0);
    double th[4] = {log(0.4), log(0.6), log(1.3), log(1e-3)};
    REQUIRE(gp_set_theta(gp, th) == 0);
    REQUIRE(gp_jitter(gp) == 0);
    double mu[N], var[N];
    REQUIRE(gp_loo(gp, mu, var) == 0);
    for (int k = 0; k < N; k++) {
        int m = 0;
        for (int a = 0; a < N; a++) {
            if (a == k)
                continue;
            memcpy(Xk + m * D, X + a * D, sizeof(double) * D);
            yk[m++] = gp_y_std(gp, a);
        }
        gp_t *g = gp_new(D); /* mean 0, sd 1: yk is used as given */
        REQUIRE(g && gp_set_data(g, Xk, yk, m, 0) == 0 && gp_set_theta(g, th) == 0);
        double pm, pv;
        gp_predict(g, X + k * D, &pm, &pv, NULL, NULL);
        CHECK_NEAR(mu[k], pm, 1e-8);
        CHECK_NEAR(var[k], pv + GP_NOISE_FLOOR + 1e-3, 1e-8);
        gp_destroy(&g);
    }
    gp_destroy(&gp);
    gp_t *g0 = gp_new(1); /* no data, no factorisation */
    REQUIRE(g0);
    CHECK(gp_loo(g0, mu, var) == -1);
    gp_destroy(&g0);
}

int main(void)
{
    RUN(kernel_gradients);
    RUN(marginal_likelihood_gradient);
    RUN(posterior_by_hand);
    RUN(posterior_gradients_and_batch);
    RUN(jitter_escalates);
    RUN(fit_recovers_function);
    RUN(noise_learned);
    RUN(cancel_gives_up);
    RUN(wall_prior);
    RUN(loo_matches_refit);
    TEST_DONE();
}
