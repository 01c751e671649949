/*  test_importance.c - parameter importance (schedulers/importance.c)
    against functions whose Sobol indices are known in closed form.
*/
#include "jz_test.h"
#include "common/spec.h"
#include "schedulers/importance.h"

#include <math.h>
#include <string.h>

static unsigned long long s_state = 777;
static double s_u(void)
{
    s_state = s_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(s_state >> 11) / 9007199254740992.0;
}

static spec_t *s_spec(const char *space)
{
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"name\":\"t\",\"objective\":{\"metric\":\"y\",\"mode\":\"min\"},"
             "\"scheduler\":{\"type\":\"random\"},\"budget\":{\"trials\":50},"
             "\"space\":%s,\"trial\":{\"command\":[\"true\"]}}",
             space);
    json_t *j = json_loads(buf, 0, NULL);
    spec_error err;
    spec_t *s = j ? spec_parse(j, 0, &err) : NULL;
    json_decref(j);
    return s;
}

/* y = 3 a + 2 b + c + 0 d on [0,1]^4 (d does nothing): the first-order
   indices are the shares of the coefficients' squares, 9:4:1:0 (/14), and
   there are no interactions, so the total indices equal them. */
TEST(linear_known_shares)
{
    spec_t *sp = s_spec("{\"a\":{\"type\":\"float\",\"low\":0,\"high\":1},"
                        "\"b\":{\"type\":\"float\",\"low\":0,\"high\":1},"
                        "\"c\":{\"type\":\"float\",\"low\":0,\"high\":1},"
                        "\"d\":{\"type\":\"float\",\"low\":0,\"high\":1}}");
    REQUIRE(sp);
    enum { N = 60 };
    json_t *params[N];
    double y[N];
    for (int i = 0; i < N; i++) {
        double a = s_u(), b = s_u(), c = s_u(), d = s_u();
        params[i] = json_pack("{s:f,s:f,s:f,s:f}", "a", a, "b", b, "c", c, "d", d);
        y[i] = 3 * a + 2 * b + c + 0 * d;
    }
    imp_result r;
    char err[256];
    REQUIRE(imp_compute(sp, params, y, N, 4096, 1, &r, err, sizeof err) == 0);
    CHECK(r.n_used == N);
    const double want[4] = {9.0 / 14, 4.0 / 14, 1.0 / 14, 0};
    for (int k = 0; k < 4; k++) {
        CHECK_NEAR(r.importance[k], want[k], 0.04);
        CHECK_NEAR(r.first[k], want[k], 0.05);
        CHECK_NEAR(r.total[k], want[k], 0.05);
    }
    CHECK(r.importance[0] > r.importance[1] && r.importance[1] > r.importance[2] &&
          r.importance[2] > r.importance[3]);
    /* the same trials and seed give the same answer */
    imp_result r2;
    REQUIRE(imp_compute(sp, params, y, N, 4096, 1, &r2, err, sizeof err) == 0);
    CHECK(memcmp(r.importance, r2.importance, 4 * sizeof(double)) == 0);
    imp_result_fini(&r);
    imp_result_fini(&r2);
    for (int i = 0; i < N; i++)
        json_decref(params[i]);
    spec_destroy(&sp);
}

/* More trials than IMP_MAX_TRIALS: an evenly spaced IMP_MAX_TRIALS of
   them are fitted, and the shares are still the known ones. */
TEST(many_trials_are_subsampled)
{
    spec_t *sp = s_spec("{\"a\":{\"type\":\"float\",\"low\":0,\"high\":1},"
                        "\"b\":{\"type\":\"float\",\"low\":0,\"high\":1}}");
    REQUIRE(sp);
    enum { N = IMP_MAX_TRIALS * 3 + 7 };
    static json_t *params[N];
    static double y[N];
    for (int i = 0; i < N; i++) {
        double a = s_u(), b = s_u();
        params[i] = json_pack("{s:f,s:f}", "a", a, "b", b);
        y[i] = 2 * a + b;
    }
    imp_result r;
    char err[256];
    REQUIRE(imp_compute(sp, params, y, N, 2048, 1, &r, err, sizeof err) == 0);
    CHECK(r.n_used == IMP_MAX_TRIALS);
    CHECK_NEAR(r.importance[0], 0.8, 0.04); /* 4:1 */
    CHECK_NEAR(r.importance[1], 0.2, 0.04);
    imp_result_fini(&r);
    for (int i = 0; i < N; i++)
        json_decref(params[i]);
    spec_destroy(&sp);
}

/* y = x1 x2 on [-1,1]^2 plus a choice that shifts y by 0 or 0.6: the
   product has no first-order part (every share is interaction), so x1 and
   x2 have first index ~0 and total index Var(x1 x2)/V = (1/9)/V; the
   choice (variance 0.09) is first-order alone. A log-scale int that does
   nothing gets ~0. */
TEST(interaction_and_choice)
{
    spec_t *sp = s_spec("{\"x1\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
                        "\"x2\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
                        "\"opt\":{\"type\":\"choice\",\"values\":[\"sgd\",\"adam\"]},"
                        "\"n\":{\"type\":\"int\",\"low\":1,\"high\":64,\"log\":true}}");
    REQUIRE(sp);
    enum { N = 80 };
    json_t *params[N];
    double y[N];
    for (int i = 0; i < N; i++) {
        double x1 = 2 * s_u() - 1, x2 = 2 * s_u() - 1;
        int adam = s_u() < 0.5;
        params[i] = json_pack("{s:f,s:f,s:s,s:i}", "x1", x1, "x2", x2, "opt",
                              adam ? "adam" : "sgd", "n", 1 + (int)(s_u() * 63));
        y[i] = x1 * x2 + (adam ? 0.6 : 0);
    }
    imp_result r;
    char err[256];
    REQUIRE(imp_compute(sp, params, y, N, 4096, 3, &r, err, sizeof err) == 0);
    double V = 1.0 / 9 + 0.09;
    CHECK_NEAR(r.first[0], 0, 0.06);
    CHECK_NEAR(r.first[1], 0, 0.06);
    CHECK_NEAR(r.total[0], (1.0 / 9) / V, 0.1);
    CHECK_NEAR(r.total[1], (1.0 / 9) / V, 0.1);
    CHECK_NEAR(r.first[2], 0.09 / V, 0.08);
    CHECK_NEAR(r.total[3], 0, 0.05);
    CHECK(r.importance[2] > 0.6);
    imp_result_fini(&r);
    for (int i = 0; i < N; i++)
        json_decref(params[i]);
    spec_destroy(&sp);
}

TEST(errors)
{
    spec_t *sp = s_spec("{\"a\":{\"type\":\"float\",\"low\":0,\"high\":1}}");
    REQUIRE(sp);
    json_t *params[3] = {json_pack("{s:f}", "a", 0.5), json_pack("{s:f}", "a", 7.0),
                         json_pack("{s:f}", "b", 0.5)};
    double y[3] = {1, 2, 3};
    imp_result r;
    char err[256] = "";
    /* one legal trial only: 7.0 is outside the range, b is no parameter */
    CHECK(imp_compute(sp, params, y, 3, 0, 1, &r, err, sizeof err) == -1);
    CHECK(strstr(err, "1 finished trial with") != NULL);
    CHECK(r.first == NULL && r.importance == NULL);
    imp_result_fini(&r);
    y[0] = NAN;
    CHECK(imp_compute(sp, params, y, 1, 0, 1, &r, err, sizeof err) == -1);
    CHECK(strstr(err, "0 finished trials") != NULL);
    for (int i = 0; i < 3; i++)
        json_decref(params[i]);
    spec_destroy(&sp);
}

int main(void)
{
    RUN(linear_known_shares);
    RUN(many_trials_are_subsampled);
    RUN(interaction_and_choice);
    RUN(errors);
    TEST_DONE();
}
