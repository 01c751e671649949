/*  test_importance.c - parameter importance (schedulers/importance.c)
    against functions whose Sobol indices are known in closed form.
*/
#include "jz_test.h"
#include "sched_testlib.h"
#include "common/spec.h"
#include "schedulers/importance.h"

#include <math.h>
#include <string.h>
#include <sys/resource.h>

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
    return stl_parse(buf);
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

/* A spec whose space is one float "x" and one choice "c" of nvalues
   values ("v0", "v1", ... or 0, 1, ... when numbers). */
static spec_t *s_spec_choice(int nvalues, int numbers)
{
    json_t *values = json_array();
    for (int i = 0; i < nvalues; i++) {
        char v[32];
        snprintf(v, sizeof v, "v%d", i);
        json_array_append_new(values, numbers ? json_integer(i) : json_string(v));
    }
    json_t *j = json_pack(
        "{s:s, s:{s:s, s:s}, s:{s:s}, s:{s:i}, s:{s:{s:s, s:f, s:f}, s:{s:s, s:o}}, "
        "s:{s:[s]}}",
        "name", "t", "objective", "metric", "y", "mode", "min", "scheduler", "type",
        "random", "budget", "trials", 50, "space", "x", "type", "float", "low", 0.0,
        "high", 1.0, "c", "type", "choice", "values", values, "trial", "command", "true");
    spec_error err;
    spec_t *s = j ? spec_parse(j, 0, &err) : NULL;
    json_decref(j);
    return s;
}

/* The peak resident memory of this process so far, in MiB. */
static double s_peak_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

/* A choice of 10 000 values (the most a spec may hold) is over the
   model's cap: imp_compute refuses it at once, and imp_study answers with
   the rank correlation, says so, and stays within a few MiB (a fit of a
   100 000-value choice took 4.7 GB before the cap). */
TEST(wide_choice_falls_back_to_ranks_within_bounded_memory)
{
    spec_t *sp = s_spec_choice(10000, 0);
    REQUIRE(sp);
    CHECK(imp_width(sp) == 10001);
    enum { N = 40 };
    json_t *params[N];
    double y[N];
    json_t *trials = json_array();
    for (int i = 0; i < N; i++) {
        char v[32];
        snprintf(v, sizeof v, "v%d", (i * 7919) % 10000);
        double x = s_u();
        params[i] = json_pack("{s:f, s:s}", "x", x, "c", v);
        y[i] = 5 * x;
        json_array_append_new(trials, json_pack("{s:s, s:f, s:O}", "state", "completed",
                                                "value", y[i], "params", params[i]));
    }
    imp_result r;
    char err[256] = "";
    CHECK(imp_compute(sp, params, y, N, 0, 1, &r, err, sizeof err) == -1);
    CHECK(strstr(err, "10001 dimensions") != NULL && strstr(err, "cap") != NULL);
    double before = s_peak_mib();
    json_t *detail = json_pack("{s:O, s:o}", "spec", sp->json, "trials", trials);
    json_t *imp = imp_study(detail, err, sizeof err);
    REQUIRE(imp);
    CHECK(s_peak_mib() - before < 64);
    CHECK(!strcmp(json_string_value(json_object_get(imp, "method")), "spearman"));
    const char *note = json_string_value(json_object_get(imp, "note"));
    CHECK(note && strstr(note, "no model fitted") && strstr(note, "Spearman"));
    CHECK(json_integer_value(json_object_get(imp, "trials")) == N);
    json_t *ps = json_object_get(imp, "params");
    REQUIRE(json_array_size(ps) == 2);
    /* y is x alone: x ranks first with rho 1; c, a value per trial,
       explains nothing */
    json_t *p0 = json_array_get(ps, 0), *p1 = json_array_get(ps, 1);
    CHECK(!strcmp(json_string_value(json_object_get(p0, "name")), "x"));
    CHECK_NEAR(json_real_value(json_object_get(p0, "importance")), 1.0, 1e-12);
    CHECK(json_is_null(json_object_get(p0, "first")));
    CHECK_NEAR(json_real_value(json_object_get(p1, "importance")), 0.0, 1e-12);
    json_decref(imp);
    json_decref(detail);
    for (int i = 0; i < N; i++)
        json_decref(params[i]);
    spec_destroy(&sp);
}

/* The rank measures against hand-computed values: a string choice whose
   groups do not overlap in y, with a float that orders y within them;
   then y = x (|rho| 1) with a choice that cycles without effect; a
   decreasing choice of numbers is ranked as numbers. */
TEST(rank_fallback_known_values)
{
    spec_t *sp = s_spec_choice(3, 0);
    REQUIRE(sp);
    enum { N = 30 };
    json_t *params[N];
    double y[N], out[2];
    static const char *const names[3] = {"v0", "v1", "v2"};
    for (int i = 0; i < N; i++) {
        double x = (i + 0.5) / N;
        params[i] = json_pack("{s:f, s:s}", "x", x, "c", names[i % 3]);
        y[i] = -exp(3 * x) + 100 * (i % 3); /* c's groups do not overlap */
    }
    int used = 0;
    char err[256];
    REQUIRE(imp_rank(sp, params, y, N, out, &used, err, sizeof err) == 0);
    CHECK(used == N);
    /* c's three groups hold ranks 0-9, 10-19, 20-29: within-group rank
       variance 8.25 each of 2247.5/30 in all, adjusted for 3 groups */
    CHECK_NEAR(out[1], sqrt(1 - (247.5 / 27) / (2247.5 / 29)), 1e-12);
    /* y's rank is 10 (i mod 3) + 9 - i/3 against x's i: rho = -7/29 */
    CHECK_NEAR(out[0], 7.0 / 29, 1e-12);
    for (int i = 0; i < N; i++) {
        json_decref(params[i]);
        y[i] = (double)i; /* now y is x, and c cycles without effect */
        params[i] = json_pack("{s:f, s:s}", "x", (i + 0.5) / N, "c", names[i % 3]);
    }
    REQUIRE(imp_rank(sp, params, y, N, out, &used, err, sizeof err) == 0);
    CHECK_NEAR(out[0], 1.0, 1e-12);
    CHECK(out[1] < 0.1);
    for (int i = 0; i < N; i++)
        json_decref(params[i]);
    spec_destroy(&sp);

    sp = s_spec_choice(5, 1); /* a choice of numbers: Spearman on them */
    REQUIRE(sp);
    for (int i = 0; i < N; i++) {
        params[i] = json_pack("{s:f, s:i}", "x", 0.5, "c", i % 5);
        y[i] = -(double)(i % 5);
    }
    REQUIRE(imp_rank(sp, params, y, N, out, &used, err, sizeof err) == 0);
    CHECK_NEAR(out[1], 1.0, 1e-12);
    CHECK(out[0] == 0); /* x is constant */
    for (int i = 0; i < N; i++)
        json_decref(params[i]);
    spec_destroy(&sp);
}

/* Over the caps in parameters: refused by the model, answered by ranks. */
TEST(too_many_parameters_fall_back)
{
    char space[8192];
    size_t at = 0;
    at += (size_t)snprintf(space + at, sizeof space - at, "{");
    for (int k = 0; k <= IMP_MAX_PARAMS; k++)
        at += (size_t)snprintf(space + at, sizeof space - at,
                               "%s\"p%d\":{\"type\":\"float\",\"low\":0,\"high\":1}",
                               k ? "," : "", k);
    snprintf(space + at, sizeof space - at, "}");
    json_t *sj = json_loads(space, 0, NULL);
    REQUIRE(sj);
    json_t *j = json_pack("{s:s, s:{s:s, s:s}, s:{s:s}, s:{s:i}, s:o, s:{s:[s]}}", "name",
                          "t", "objective", "metric", "y", "mode", "max", "scheduler",
                          "type", "random", "budget", "trials", 9, "space", sj, "trial",
                          "command", "true");
    spec_error se;
    spec_t *sp = spec_parse(j, 0, &se);
    REQUIRE(sp);
    json_t *trials = json_array();
    for (int i = 0; i < 12; i++) {
        json_t *p = json_object();
        for (int k = 0; k <= IMP_MAX_PARAMS; k++) {
            char nm[16];
            snprintf(nm, sizeof nm, "p%d", k);
            json_object_set_new(p, nm, json_real(k == 3 ? i / 12.0 : s_u()));
        }
        json_array_append_new(trials, json_pack("{s:s, s:f, s:o}", "state", "completed",
                                                "value", (double)i, "params", p));
    }
    json_t *detail = json_pack("{s:o, s:o}", "spec", j, "trials", trials);
    char err[256];
    json_t *imp = imp_study(detail, err, sizeof err);
    REQUIRE(imp);
    CHECK(!strcmp(json_string_value(json_object_get(imp, "method")), "spearman"));
    json_t *top = json_array_get(json_object_get(imp, "params"), 0);
    CHECK(!strcmp(json_string_value(json_object_get(top, "name")), "p3"));
    CHECK_NEAR(json_real_value(json_object_get(top, "importance")), 1.0, 1e-12);
    json_decref(imp);
    json_decref(detail);
    spec_destroy(&sp);
}

/* A conditional space: mom exists only under opt = sgd, where y = 4 mom;
   under adam y = 2. Every trial is used (the adam ones have no mom), x
   does nothing, opt and mom share the rest, and 0 <= first <= total <= 1
   holds for each despite the Monte Carlo noise. */
TEST(conditional_parameters)
{
    spec_t *sp = s_spec("{\"opt\":{\"type\":\"choice\",\"values\":[\"sgd\",\"adam\"]},"
                        "\"mom\":{\"type\":\"float\",\"low\":0,\"high\":1,"
                        "\"when\":{\"opt\":[\"sgd\"]}},"
                        "\"x\":{\"type\":\"float\",\"low\":0,\"high\":1}}");
    REQUIRE(sp);
    enum { N = 60 };
    json_t *params[N];
    double y[N];
    for (int i = 0; i < N; i++) {
        double m = s_u(), x = s_u();
        if (i % 2 == 0) {
            params[i] = json_pack("{s:s,s:f,s:f}", "opt", "sgd", "mom", m, "x", x);
            y[i] = 4 * m;
        } else {
            params[i] = json_pack("{s:s,s:f}", "opt", "adam", "x", x);
            y[i] = 2;
        }
    }
    imp_result r;
    char err[256];
    REQUIRE(imp_compute(sp, params, y, N, 4096, 1, &r, err, sizeof err) == 0);
    CHECK(r.n_used == N);
    CHECK(r.importance[2] < 0.05);                   /* x */
    CHECK(r.importance[0] + r.importance[1] > 0.95); /* opt, mom */
    CHECK(r.importance[1] > 0.3);
    for (int k = 0; k < 3; k++)
        CHECK(r.first[k] >= 0 && r.first[k] <= r.total[k] && r.total[k] <= 1);
    imp_result_fini(&r);
    /* the same through imp_study: a model, not the rank fallback */
    json_t *trials = json_array();
    for (int i = 0; i < N; i++)
        json_array_append_new(trials, json_pack("{s:s,s:f,s:O}", "state", "completed",
                                                "value", y[i], "params", params[i]));
    json_t *spec_json =
        json_loads("{\"name\":\"t\",\"objective\":{\"metric\":\"y\","
                   "\"mode\":\"min\"},\"scheduler\":{\"type\":\"random\"},"
                   "\"budget\":{\"trials\":60},\"space\":{\"opt\":{\"type\":"
                   "\"choice\",\"values\":[\"sgd\",\"adam\"]},\"mom\":{"
                   "\"type\":\"float\",\"low\":0,\"high\":1,\"when\":{\"opt\":"
                   "[\"sgd\"]}},\"x\":{\"type\":\"float\",\"low\":0,\"high\":1}},"
                   "\"trial\":{\"command\":[\"true\"]}}",
                   0, NULL);
    json_t *detail = json_pack("{s:o,s:o}", "spec", spec_json, "trials", trials);
    json_t *out = imp_study(detail, err, sizeof err);
    REQUIRE(out);
    CHECK_STR(json_string_value(json_object_get(out, "method")), "sobol-gp");
    CHECK(json_integer_value(json_object_get(out, "trials")) == N);
    json_decref(out);
    json_decref(detail);
    for (int i = 0; i < N; i++)
        json_decref(params[i]);
    spec_destroy(&sp);
}

int main(void)
{
    RUN(linear_known_shares);
    RUN(many_trials_are_subsampled);
    RUN(interaction_and_choice);
    RUN(errors);
    RUN(wide_choice_falls_back_to_ranks_within_bounded_memory);
    RUN(rank_fallback_known_values);
    RUN(too_many_parameters_fall_back);
    RUN(conditional_parameters);
    TEST_DONE();
}
