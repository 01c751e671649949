/*  test_sched_tpe.c - the tpe scheduler (schedulers/sched_tpe.c) through the
    scheduler interface: options and their messages, one suggestion per
    seed, legal values of every type, conditional spaces (multivariate,
    grouped, univariate), far better than random on a quadratic with a
    fixed seed and budget, save/restore mid-study, warm start, distinct
    parallel suggestions, maximize.
*/
#include "jz_test.h"
#include "sched_testlib.h"

#include <sys/resource.h>

static spec_t *s_spec(const char *sched, const char *space, const char *mode)
{
    return stl_spec("y", mode, sched, "{\"trials\":60,\"parallel\":4}", space);
}

TEST(options_checked)
{
    const char *bad[][2] = {
        {"{\"type\":\"tpe\",\"foo\":1}", "scheduler.foo: unknown option for the tpe"},
        {"{\"type\":\"tpe\",\"multivariate\":1}", "scheduler.multivariate: must be true"},
        {"{\"type\":\"tpe\",\"multivariate\":false,\"group\":true}",
         "scheduler.group: groups are multivariate"},
        {"{\"type\":\"tpe\",\"n_startup\":0}", "scheduler.n_startup: must be an integer"},
        {"{\"type\":\"tpe\",\"n_candidates\":2.5}", "scheduler.n_candidates: "},
        {"{\"type\":\"tpe\",\"gamma\":0.9}", "scheduler.gamma: must be a number from"},
        {"{\"type\":\"tpe\",\"prior_weight\":\"x\"}", "scheduler.prior_weight: "},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spec_t *sp = s_spec(bad[i][0], STL_QSPACE, "min");
        REQUIRE(sp);
        stl_check_refused(sched_new, sp, bad[i][1]);
        spec_destroy(&sp);
    }
    /* several objectives: refused with a pointer to bo */
    const char *mo =
        "{\"name\":\"t\",\"objective\":[{\"metric\":\"a\",\"mode\":\"min\"},"
        "{\"metric\":\"b\",\"mode\":\"min\"}],\"scheduler\":{\"type\":\"tpe\"},"
        "\"budget\":{\"trials\":5},\"space\":{\"x\":{\"type\":\"float\","
        "\"low\":0,\"high\":1}},\"trial\":{\"command\":[\"true\"]}}";
    json_t *j = json_loads(mo, 0, NULL);
    spec_error e;
    spec_t *sp = j ? spec_parse(j, 0, &e) : NULL;
    json_decref(j);
    REQUIRE(sp);
    char err[256] = "";
    sched_t *s = sched_new(sp, err, sizeof err);
    CHECK(s == NULL && strstr(err, "use \"bo\""));
    spec_destroy(&sp);
    sp = s_spec("{\"type\":\"tpe\",\"seed\":1,\"multivariate\":false,\"n_startup\":3,"
                "\"n_candidates\":50,\"gamma\":0.2,\"gamma_max\":10,\"prior_weight\":2}",
                STL_QSPACE, "min");
    REQUIRE(sp);
    s = stl_new(sp);
    CHECK_STR(s ? s->ops->name : NULL, "tpe");
    sched_destroy(&s);
    spec_destroy(&sp);
}

TEST(same_seed_same_study)
{
    const char *const scheds[] = {"{\"type\":\"tpe\",\"seed\":4}",
                                  "{\"type\":\"tpe\",\"seed\":4}",
                                  "{\"type\":\"tpe\",\"seed\":5}"};
    stl_check_same_seed(s_spec, scheds, 30);
}

/* Every variant keeps every suggestion legal (stl_study checks it with
   spec_params_check: active parameters present and legal, inactive ones
   absent), ints whole, and learns the conditional branch. */
TEST(types_and_conditional_spaces)
{
    const char *scheds[] = {"{\"type\":\"tpe\",\"seed\":2}",
                            "{\"type\":\"tpe\",\"seed\":2,\"group\":false}",
                            "{\"type\":\"tpe\",\"seed\":2,\"multivariate\":false}"};
    for (int k = 0; k < 3; k++) {
        json_t *log = stl_mixed_cond_study(s_spec, scheds[k], 60);
        REQUIRE(log);
        int adam = stl_check_mixed_cond(log, 30);
        /* the better branch dominates the second half */
        if (adam < 20)
            JZT_FAIL("variant %d: adam in %d of the last 30 trials", k, adam);
        json_decref(log);
    }
}

TEST(far_better_than_random_on_a_quadratic)
{
    spec_t *sp = s_spec("{\"type\":\"tpe\",\"seed\":1}", STL_QSPACE4, "min");
    spec_t *sr = s_spec("{\"type\":\"random\",\"seed\":1}", STL_QSPACE4, "min");
    REQUIRE(sp && sr);
    sched_t *s = stl_new(sp), *r = stl_new(sr);
    REQUIRE(s && r);
    double bt = stl_study(s, 1, 100, stl_quad4, 1, NULL);
    /* random has no on_complete: draw its 100 points */
    double br = INFINITY;
    for (long id = 1; id <= 100; id++) {
        json_t *p = NULL;
        REQUIRE(r->ops->suggest(r, id, &p) == SCHED_OK);
        br = fmin(br, stl_quad4(p));
        json_decref(p);
    }
    printf("  4-D quadratic, 100 trials: tpe %.3g, random %.3g\n", bt, br);
    CHECK(bt < br / 5);
    sched_destroy(&s);
    sched_destroy(&r);
    spec_destroy(&sp);
    spec_destroy(&sr);
}

TEST(maximize)
{
    spec_t *sp = s_spec("{\"type\":\"tpe\",\"seed\":3}", STL_QSPACE, "max");
    REQUIRE(sp);
    sched_t *s = stl_new(sp);
    REQUIRE(s);
    double best = stl_study(s, 1, 60, stl_quad, -1, NULL); /* reports -quad */
    CHECK(best < 2e-3);
    sched_destroy(&s);
    spec_destroy(&sp);
}

TEST(save_restore_mid_study)
{
    spec_t *sp = s_spec("{\"type\":\"tpe\",\"seed\":6}", STL_MIXED_COND, "min");
    REQUIRE(sp);
    sched_t *a = stl_new(sp), *b = stl_new(sp);
    REQUIRE(a && b);
    stl_study(a, 1, 20, stl_mixed_cond, 1, NULL);
    json_t *pa = NULL, *pb = NULL;
    REQUIRE(a->ops->suggest(a, 21, &pa) == SCHED_OK); /* one running */
    json_t *st = a->ops->save(a);
    REQUIRE(st);
    CHECK(b->ops->restore(b, st) == 0);
    /* both go on alike, the running one included */
    a->ops->on_complete(a, 21, pa, SCHED_COMPLETED, stl_mixed_cond(pa));
    b->ops->on_complete(b, 21, pa, SCHED_COMPLETED, stl_mixed_cond(pa));
    json_t *la = json_array(), *lb = json_array();
    stl_study(a, 22, 10, stl_mixed_cond, 1, la);
    stl_study(b, 22, 10, stl_mixed_cond, 1, lb);
    CHECK(json_equal(la, lb));
    /* a bad state is refused and changes nothing */
    json_t *bad = json_pack("{s:i,s:I,s:[i],s:[]}", "version", 1, "count", (json_int_t)3,
                            "obs", 1, "pending");
    CHECK(b->ops->restore(b, bad) == -1);
    json_t *st2 = b->ops->save(b);
    CHECK(json_integer_value(json_object_get(st2, "count")) == 31);
    json_decref(st2);
    json_decref(bad);
    json_decref(pa);
    json_decref(pb);
    json_decref(la);
    json_decref(lb);
    json_decref(st);
    sched_destroy(&a);
    sched_destroy(&b);
    spec_destroy(&sp);
}

/* Warm start (and enqueued trials): results of trials it never suggested
   count, so the first suggestions are already guided. */
TEST(warm_start_guides_the_first_suggestions)
{
    spec_t *sp = s_spec("{\"type\":\"tpe\",\"seed\":8}", STL_QSPACE, "min");
    spec_t *sr = s_spec("{\"type\":\"random\",\"seed\":9}", STL_QSPACE, "min");
    REQUIRE(sp && sr);
    sched_t *s = stl_new(sp), *r = stl_new(sr);
    REQUIRE(s && r);
    for (long k = 1; k <= 40; k++) {
        json_t *p = NULL;
        REQUIRE(r->ops->suggest(r, k, &p) == SCHED_OK);
        s->ops->on_complete(s, -k, p, SCHED_COMPLETED, stl_quad(p));
        json_decref(p);
    }
    double mean = 0;
    for (long id = 1; id <= 10; id++) {
        json_t *p = NULL;
        REQUIRE(s->ops->suggest(s, id, &p) == SCHED_OK);
        mean += stl_quad(p) / 10;
        json_decref(p);
    }
    /* uniform points average 0.80 on this quadratic */
    printf("  mean of the first 10 after a warm start: %.3g\n", mean);
    CHECK(mean < 0.25);
    sched_destroy(&s);
    sched_destroy(&r);
    spec_destroy(&sp);
    spec_destroy(&sr);
}

/* Running trials count in g: four suggestions made before any result
   comes back after the startup are all different. */
TEST(parallel_suggestions_differ)
{
    spec_t *sp =
        s_spec("{\"type\":\"tpe\",\"seed\":2,\"n_startup\":5}", STL_QSPACE, "min");
    REQUIRE(sp);
    sched_t *s = stl_new(sp);
    REQUIRE(s);
    stl_study(s, 1, 12, stl_quad, 1, NULL);
    json_t *p[4];
    for (int k = 0; k < 4; k++)
        REQUIRE(s->ops->suggest(s, 13 + k, &p[k]) == SCHED_OK);
    for (int k = 0; k < 4; k++)
        for (int k2 = k + 1; k2 < 4; k2++)
            CHECK(!json_equal(p[k], p[k2]));
    /* a failed and a stopped one end; the others later */
    s->ops->on_complete(s, 13, p[0], SCHED_FAILED, NAN);
    s->ops->on_complete(s, 14, p[1], SCHED_STOPPED, 0.5);
    json_t *st = s->ops->save(s);
    CHECK(json_array_size(json_object_get(st, "pending")) == 2);
    CHECK(json_is_null(
        json_object_get(json_array_get(json_object_get(st, "obs"), 12), "value")));
    json_decref(st);
    for (int k = 0; k < 4; k++)
        json_decref(p[k]);
    sched_destroy(&s);
    spec_destroy(&sp);
}

static double s_peak_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

/* A choice of 9 000 values next to a float, 1 500 results: a choice's
   kernels are no table of (trials x values) probabilities (that was 100
   MB per suggestion), and the suggestions stay legal. */
TEST(wide_choice_costs_no_table)
{
    json_t *vals = json_array();
    for (int i = 0; i < 9000; i++)
        json_array_append_new(vals, json_integer(i));
    json_t *j =
        json_pack("{s:s,s:{s:s,s:s},s:{s:s,s:i},s:{s:i},s:{s:{s:s,s:o},s:{s:s,s:f,"
                  "s:f}},s:{s:[s]}}",
                  "name", "t", "objective", "metric", "y", "mode", "min", "scheduler",
                  "type", "tpe", "seed", 1, "budget", "trials", 2000, "space", "c",
                  "type", "choice", "values", vals, "x", "type", "float", "low", 0.0,
                  "high", 1.0, "trial", "command", "true");
    spec_error e;
    spec_t *sp = j ? spec_parse(j, 0, &e) : NULL;
    json_decref(j);
    REQUIRE(sp);
    sched_t *s = stl_new(sp);
    REQUIRE(s);
    sched_rng r;
    sched_rng_seed(&r, 5, 0);
    for (long k = 1; k <= 1500; k++) {
        int c = (int)(sched_rng_uniform(&r) * 9000);
        double x = sched_rng_uniform(&r);
        json_t *p = json_pack("{s:i,s:f}", "c", c, "x", x);
        s->ops->on_complete(s, -k, p, SCHED_COMPLETED,
                            fabs((double)c - 7000) / 9000.0 + x);
        json_decref(p);
    }
    double before = s_peak_mib();
    for (long id = 1; id <= 5; id++) {
        json_t *p = NULL;
        REQUIRE(s->ops->suggest(s, id, &p) == SCHED_OK);
        json_t *c = json_object_get(p, "c");
        CHECK(json_is_integer(c) && json_integer_value(c) >= 0 &&
              json_integer_value(c) < 9000);
        json_decref(p);
    }
    double grew = s_peak_mib() - before;
    printf("  wide choice, 1500 trials: peak RSS grew %.1f MiB over 5 suggestions\n",
           grew);
    CHECK(grew < 32);
    sched_destroy(&s);
    spec_destroy(&sp);
}

int main(void)
{
    RUN(options_checked);
    RUN(same_seed_same_study);
    RUN(types_and_conditional_spaces);
    RUN(far_better_than_random_on_a_quadratic);
    RUN(maximize);
    RUN(save_restore_mid_study);
    RUN(warm_start_guides_the_first_suggestions);
    RUN(parallel_suggestions_differ);
    RUN(wide_choice_costs_no_table);
    TEST_DONE();
}
