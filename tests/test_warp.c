/*  test_warp.c - the bo scheduler's output warpings (schedulers/warp.c):
    half-rank values computed by hand, the Yeo-Johnson formula at its
    special cases, its lambda against a direct scan of the profile
    likelihood, and what it does to skewed and to symmetric data.
*/
#include "jz_test.h"
#include "schedulers/warp.h"

static unsigned long long s_state = 777;
static double s_u(void)
{
    s_state = s_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((double)(s_state >> 11) + 0.5) / 9007199254740992.0;
}

static double s_normal(void)
{
    return sqrt(-2 * log(s_u())) * cos(2 * M_PI * s_u());
}

/* The profile log likelihood, written out independently of warp.c. */
static double s_ll(const double *y, int n, double lambda)
{
    /* standardised with the one-pass moments E[y^2] - E[y]^2 (warp.c
       takes two passes) */
    double s1 = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        s1 += y[i];
        s2 += y[i] * y[i];
    }
    double m = s1 / n, sd = sqrt(s2 / n - m * m);
    double t[64], tm = 0, v = 0, jac = 0;
    for (int i = 0; i < n; i++) {
        double z = (y[i] - m) / sd;
        t[i] = z >= 0 ? (pow(z + 1, lambda) - 1) / lambda
                      : -(pow(1 - z, 2 - lambda) - 1) / (2 - lambda);
        tm += t[i];
        jac += z >= 0 ? log(1 + z) : -log(1 - z);
    }
    tm /= n;
    for (int i = 0; i < n; i++)
        v += (t[i] - tm) * (t[i] - tm);
    return -0.5 * n * log(v / n) + (lambda - 1) * jac;
}

static double s_skew(const double *y, int n)
{
    double m = 0, m2 = 0, m3 = 0;
    for (int i = 0; i < n; i++)
        m += y[i];
    m /= n;
    for (int i = 0; i < n; i++) {
        m2 += (y[i] - m) * (y[i] - m);
        m3 += pow(y[i] - m, 3);
    }
    return (m3 / n) / pow(m2 / n, 1.5);
}

TEST(halfrank_by_hand)
{
    double y[5] = {3, 0, 100, 2, 1};
    warp_halfrank(y, 5);
    /* median 2 (rank 2 of 0..4), s = sqrt((4 + 1 + 0) / 3); 3 has rank 3:
       2 + s Phi^-1(0.7); 100 has rank 4: 2 + s Phi^-1(0.9) */
    double s = sqrt(5.0 / 3);
    CHECK_NEAR(y[0], 2 + s * 0.52440051270804067, 1e-12);
    CHECK_NEAR(y[2], 2 + s * 1.2815515655446004, 1e-12);
    CHECK(y[1] == 0 && y[3] == 2 && y[4] == 1);
    double few[3] = {5, 1, 9};
    warp_halfrank(few, 3); /* too few: unchanged */
    CHECK(few[0] == 5 && few[1] == 1 && few[2] == 9);
}

TEST(yj_formula)
{
    double zs[] = {-2.5, -0.5, 0, 0.7, 3};
    for (size_t i = 0; i < sizeof zs / sizeof zs[0]; i++) {
        double z = zs[i];
        CHECK_NEAR(warp_yj(z, 1), z, 1e-14);
        if (z >= 0) {
            CHECK_NEAR(warp_yj(z, 0), log1p(z), 1e-14);
            CHECK_NEAR(warp_yj(z, 1e-9), log1p(z), 1e-8); /* continuous at 0 */
            CHECK_NEAR(warp_yj(z, 0.5), 2 * (sqrt(z + 1) - 1), 1e-14);
        } else {
            CHECK_NEAR(warp_yj(z, 2), -log1p(-z), 1e-14);
            CHECK_NEAR(warp_yj(z, 2 - 1e-9), -log1p(-z), 1e-8);
            CHECK_NEAR(warp_yj(z, 0), -((1 - z) * (1 - z) - 1) / 2, 1e-14);
        }
    }
}

TEST(yj_skewed_data)
{
    /* log-normal values (the bad tail long, as a minimisation objective's
       often is): lambda is the likelihood's maximum (a scan agrees within
       its step), below 1, the order is kept and the skew mostly goes */
    enum { N = 40 };
    double y[N], w[N];
    for (int i = 0; i < N; i++)
        y[i] = w[i] = exp(1.2 * s_normal());
    double lam = warp_yeojohnson(w, N);
    double best = -INFINITY, arg = 0;
    for (double l = -3; l <= 5; l += 0.001) {
        double v = s_ll(y, N, l);
        if (v > best) {
            best = v;
            arg = l;
        }
    }
    CHECK_NEAR(lam, arg, 2e-3);
    CHECK(s_ll(y, N, lam) >= best - 1e-6);
    CHECK(lam < 1);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < N; k++)
            if (y[i] < y[k])
                CHECK(w[i] < w[k]);
    CHECK(s_skew(y, N) > 1.5);
    CHECK(fabs(s_skew(w, N)) < 0.5);
}

TEST(yj_symmetric_data)
{
    /* evenly spread normal quantiles: already Gaussian, lambda stays near
       1 and the values are only standardised */
    enum { N = 31 };
    double y[N];
    for (int i = 0; i < N; i++) {
        double q = (i + 0.5) / N; /* a crude inverse: the logit, scaled */
        y[i] = 5 + 2 * 0.6 * log(q / (1 - q));
    }
    double lam = warp_yeojohnson(y, N);
    CHECK(fabs(lam - 1) < 0.25);
    double same[4] = {2, 2, 2, 2};
    CHECK(warp_yeojohnson(same, 4) == 1);
    CHECK(same[0] == 2 && same[3] == 2);
    double few[3] = {1, 10, 100};
    CHECK(warp_yeojohnson(few, 3) == 1);
    CHECK(few[2] == 100);
}

int main(void)
{
    RUN(halfrank_by_hand);
    RUN(yj_formula);
    RUN(yj_skewed_data);
    RUN(yj_symmetric_data);
    TEST_DONE();
}
