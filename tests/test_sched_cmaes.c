/*  test_sched_cmaes.c - the cmaes scheduler (schedulers/sched_cmaes.c)
    through the scheduler interface: options and their messages, one study
    per seed, legal values of every type and conditional spaces, far better
    than random on a quadratic (full and separable), IPOP restarts on a
    stalled population (and none without), save/restore mid-generation,
    warm start and injected (enqueued) results, results of an older
    generation under parallel trials.
*/
#include "jz_test.h"
#include "sched_testlib.h"

static spec_t *s_spec(const char *sched, const char *space, const char *mode)
{
    return stl_spec("y", mode, sched, "{\"trials\":60,\"parallel\":4}", space);
}

static json_t *s_state(sched_t *s)
{
    return s->ops->save(s);
}

static long s_int(const json_t *o, const char *k)
{
    return (long)json_integer_value(json_object_get(o, k));
}

TEST(options_checked)
{
    const char *bad[][2] = {
        {"{\"type\":\"cmaes\",\"foo\":1}", "scheduler.foo: unknown option for the cmaes"},
        {"{\"type\":\"cmaes\",\"restart\":\"bipop\"}",
         "scheduler.restart: must be \"ipop\" or \"none\""},
        {"{\"type\":\"cmaes\",\"separable\":1}", "scheduler.separable: must be true"},
        {"{\"type\":\"cmaes\",\"sigma0\":0}", "scheduler.sigma0: must be a number from"},
        {"{\"type\":\"cmaes\",\"popsize\":1}", "scheduler.popsize: must be an integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spec_t *sp = s_spec(bad[i][0], STL_QSPACE, "min");
        REQUIRE(sp);
        stl_check_refused(sched_new, sp, bad[i][1]);
        spec_destroy(&sp);
    }
    /* only consts: nothing to adapt */
    spec_t *sp =
        s_spec("{\"type\":\"cmaes\"}", "{\"a\":{\"type\":\"const\",\"value\":1}}", "min");
    REQUIRE(sp);
    char err[256] = "";
    sched_t *s = sched_new(sp, err, sizeof err);
    CHECK(s == NULL && strncmp(err, "space: no parameter to search", 29) == 0);
    spec_destroy(&sp);
    sp = s_spec("{\"type\":\"cmaes\",\"seed\":1,\"restart\":\"none\",\"separable\":true,"
                "\"sigma0\":0.3,\"popsize\":12}",
                STL_QSPACE, "min");
    REQUIRE(sp);
    s = stl_new(sp);
    CHECK_STR(s ? s->ops->name : NULL, "cmaes");
    sched_destroy(&s);
    spec_destroy(&sp);
}

TEST(same_seed_same_study)
{
    const char *const scheds[] = {"{\"type\":\"cmaes\",\"seed\":4}",
                                  "{\"type\":\"cmaes\",\"seed\":4}",
                                  "{\"type\":\"cmaes\",\"seed\":5}"};
    stl_check_same_seed(s_spec, scheds, 40);
}

/* Every suggestion legal (stl_study checks it with spec_params_check:
   active parameters present and legal, inactive ones absent), ints whole,
   consts kept; the better branch of the condition is learned. */
TEST(types_and_conditional_spaces)
{
    const char *scheds[] = {"{\"type\":\"cmaes\",\"seed\":2}",
                            "{\"type\":\"cmaes\",\"seed\":2,\"separable\":true}"};
    for (int k = 0; k < 2; k++) {
        json_t *log = stl_mixed_cond_study(s_spec, scheds[k], 150);
        REQUIRE(log);
        int adam = stl_check_mixed_cond(log, 100);
        if (adam < 40)
            JZT_FAIL("variant %d: adam in %d of the last 50 trials", k, adam);
        json_decref(log);
    }
}

TEST(far_better_than_random_on_a_quadratic)
{
    const char *scheds[] = {"{\"type\":\"cmaes\",\"seed\":1}",
                            "{\"type\":\"cmaes\",\"seed\":1,\"separable\":true}"};
    spec_t *sr = s_spec("{\"type\":\"random\",\"seed\":1}", STL_QSPACE4, "min");
    REQUIRE(sr);
    sched_t *r = stl_new(sr);
    REQUIRE(r);
    double br = INFINITY;
    for (long id = 1; id <= 200; id++) {
        json_t *p = NULL;
        REQUIRE(r->ops->suggest(r, id, &p) == SCHED_OK);
        br = fmin(br, stl_quad4(p));
        json_decref(p);
    }
    for (int k = 0; k < 2; k++) {
        spec_t *sp = s_spec(scheds[k], STL_QSPACE4, "min");
        REQUIRE(sp);
        sched_t *s = stl_new(sp);
        REQUIRE(s);
        double bc = stl_study(s, 1, 200, stl_quad4, 1, NULL);
        printf("  4-D quadratic, 200 trials: %s %.3g, random %.3g\n", scheds[k], bc, br);
        CHECK(bc < 1e-3);
        CHECK(bc < br / 100);
        sched_destroy(&s);
        spec_destroy(&sp);
    }
    sched_destroy(&r);
    spec_destroy(&sr);
}

static double s_flat(const json_t *p)
{
    return 1.0;
}

/* A constant objective stalls the population: IPOP restarts with twice the
   population once the history of best values is flat; without restarts
   it goes on with the same one. */
TEST(ipop_restarts_a_stalled_population)
{
    spec_t *sp = s_spec("{\"type\":\"cmaes\",\"seed\":1}", STL_QSPACE, "min");
    spec_t *sn =
        s_spec("{\"type\":\"cmaes\",\"seed\":1,\"restart\":\"none\"}", STL_QSPACE, "min");
    REQUIRE(sp && sn);
    sched_t *s = stl_new(sp), *n = stl_new(sn);
    REQUIRE(s && n);
    stl_study(s, 1, 6, s_flat, 1, NULL);
    json_t *st = s_state(s);
    long lam0 = s_int(st, "lambda");
    CHECK(lam0 == 6); /* 4 + floor(3 ln 2) */
    CHECK(s_int(st, "restart") == 0 && s_int(st, "gen") == 1);
    json_decref(st);
    /* 10 + ceil(30 x 2 / 6) = 20 generations of history, then the check */
    stl_study(s, 7, 6 * 21, s_flat, 1, NULL);
    stl_study(n, 1, 6 * 22, s_flat, 1, NULL);
    st = s_state(s);
    CHECK(s_int(st, "restart") == 1);
    CHECK(s_int(st, "lambda") == 2 * lam0);
    CHECK(s_int(st, "gen") == 0);
    json_decref(st);
    st = s_state(n);
    CHECK(s_int(st, "restart") == 0 && s_int(st, "lambda") == lam0 &&
          s_int(st, "gen") == 22);
    json_decref(st);
    sched_destroy(&s);
    sched_destroy(&n);
    spec_destroy(&sp);
    spec_destroy(&sn);
}

TEST(save_restore_mid_generation)
{
    spec_t *sp = s_spec("{\"type\":\"cmaes\",\"seed\":6}", STL_MIXED_COND, "min");
    REQUIRE(sp);
    sched_t *a = stl_new(sp), *b = stl_new(sp);
    REQUIRE(a && b);
    stl_study(a, 1, 23, stl_mixed_cond, 1, NULL); /* mid-generation (lambda 10) */
    json_t *pa = NULL;
    REQUIRE(a->ops->suggest(a, 24, &pa) == SCHED_OK); /* one running */
    json_t *st = a->ops->save(a);
    REQUIRE(st);
    CHECK(b->ops->restore(b, st) == 0);
    a->ops->on_complete(a, 24, pa, SCHED_COMPLETED, stl_mixed_cond(pa));
    b->ops->on_complete(b, 24, pa, SCHED_COMPLETED, stl_mixed_cond(pa));
    json_t *la = json_array(), *lb = json_array();
    stl_study(a, 25, 30, stl_mixed_cond, 1, la);
    stl_study(b, 25, 30, stl_mixed_cond, 1, lb);
    CHECK(json_equal(la, lb));
    /* a broken state is refused and changes nothing */
    json_t *bad = json_deep_copy(st);
    json_object_set_new(bad, "C", json_pack("[i]", 1));
    CHECK(b->ops->restore(b, bad) == -1);
    json_t *st2 = b->ops->save(b);
    CHECK(s_int(st2, "count") == 54);
    json_decref(st2);
    json_decref(bad);
    json_decref(pa);
    json_decref(la);
    json_decref(lb);
    json_decref(st);
    sched_destroy(&a);
    sched_destroy(&b);
    spec_destroy(&sp);
}

/* Results before the first suggestion (warm start) place the first mean
   at the best of them; results of trials it did not suggest later
   (enqueued) join the current generation. */
TEST(warm_start_and_enqueued_results)
{
    spec_t *sp =
        s_spec("{\"type\":\"cmaes\",\"seed\":8,\"sigma0\":0.05}", STL_QSPACE, "min");
    REQUIRE(sp);
    sched_t *s = stl_new(sp);
    REQUIRE(s);
    json_t *far = json_pack("{s:f,s:f}", "x", -0.9, "y", 0.9);
    json_t *near = json_pack("{s:f,s:f}", "x", 0.25, "y", -0.15);
    s->ops->on_complete(s, -1, far, SCHED_COMPLETED, stl_quad(far));
    s->ops->on_complete(s, -2, near, SCHED_COMPLETED, stl_quad(near));
    for (long id = 1; id <= 6; id++) {
        json_t *p = NULL;
        REQUIRE(s->ops->suggest(s, id, &p) == SCHED_OK);
        /* sigma0 0.05 of the unit cube: 0.1 in x; far from (-0.9, 0.9) */
        CHECK(fabs(stl_num(p, "x") - 0.25) < 0.5 && fabs(stl_num(p, "y") + 0.15) < 0.5);
        json_decref(p);
    }
    json_t *st = s_state(s);
    CHECK(json_array_size(json_object_get(st, "gf")) == 0);
    json_decref(st);
    /* an enqueued trial's result counts in this generation */
    json_t *q = json_pack("{s:f,s:f}", "x", 0.3, "y", -0.2);
    s->ops->on_complete(s, 100, q, SCHED_COMPLETED, 0);
    st = s_state(s);
    CHECK(json_array_size(json_object_get(st, "gf")) == 1);
    CHECK(json_array_size(json_object_get(st, "pending")) == 6);
    json_decref(st);
    json_decref(q);
    json_decref(far);
    json_decref(near);
    sched_destroy(&s);
    spec_destroy(&sp);
}

/* Parallel trials: suggestions past lambda come from the same generation;
   once a generation is told, results of the older one only end. */
TEST(parallel_generations)
{
    spec_t *sp = s_spec("{\"type\":\"cmaes\",\"seed\":3}", STL_QSPACE, "max");
    REQUIRE(sp);
    sched_t *s = stl_new(sp);
    REQUIRE(s);
    json_t *p[8];
    for (int k = 0; k < 8; k++)
        REQUIRE(s->ops->suggest(s, k + 1, &p[k]) == SCHED_OK);
    for (int k = 0; k < 8; k++)
        for (int k2 = k + 1; k2 < 8; k2++)
            CHECK(!json_equal(p[k], p[k2]));
    for (int k = 0; k < 6; k++) /* lambda = 6 results: generation 1 */
        s->ops->on_complete(s, k + 1, p[k], k == 2 ? SCHED_FAILED : SCHED_COMPLETED,
                            k == 2 ? NAN : -stl_quad(p[k]));
    json_t *st = s_state(s);
    CHECK(s_int(st, "gen") == 1 && json_array_size(json_object_get(st, "gf")) == 0);
    json_decref(st);
    s->ops->on_complete(s, 7, p[6], SCHED_COMPLETED, -stl_quad(p[6]));
    st = s_state(s);
    CHECK(json_array_size(json_object_get(st, "gf")) == 0); /* an older generation's */
    CHECK(json_array_size(json_object_get(st, "pending")) == 1);
    json_decref(st);
    for (int k = 0; k < 8; k++)
        json_decref(p[k]);
    sched_destroy(&s);
    spec_destroy(&sp);
}

/* Beyond 100 searched parameters the covariance is diagonal unless
   "separable": false says otherwise. */
TEST(many_parameters_are_separable)
{
    char space[8192];
    size_t off = (size_t)snprintf(space, sizeof space, "{");
    for (int i = 0; i < 120; i++)
        off += (size_t)snprintf(space + off, sizeof space - off,
                                "%s\"p%d\":{\"type\":\"float\",\"low\":0,\"high\":1}",
                                i ? "," : "", i);
    snprintf(space + off, sizeof space - off, "}");
    const char *scheds[] = {"{\"type\":\"cmaes\",\"seed\":1}",
                            "{\"type\":\"cmaes\",\"seed\":1,\"separable\":false}"};
    for (int k = 0; k < 2; k++) {
        char buf[9000];
        snprintf(buf, sizeof buf,
                 "{\"name\":\"t\",\"objective\":{\"metric\":\"y\",\"mode\":\"min\"},"
                 "\"scheduler\":%s,\"budget\":{\"trials\":60},\"space\":%s,"
                 "\"trial\":{\"command\":[\"true\"]}}",
                 scheds[k], space);
        json_t *j = json_loads(buf, 0, NULL);
        spec_error e;
        spec_t *sp = j ? spec_parse(j, 0, &e) : NULL;
        json_decref(j);
        REQUIRE(sp);
        sched_t *s = stl_new(sp);
        REQUIRE(s);
        json_t *st = s_state(s);
        long lam = 4 + (long)floor(3 * log(120.0));
        json_decref(st);
        for (long id = 1; id <= lam; id++) {
            json_t *p = NULL;
            REQUIRE(s->ops->suggest(s, id, &p) == SCHED_OK);
            double v = 0;
            for (int i = 0; i < 120; i++) {
                char name[8];
                snprintf(name, sizeof name, "p%d", i);
                v += (i + 1) * pow(stl_num(p, name) - 0.3, 2);
            }
            s->ops->on_complete(s, id, p, SCHED_COMPLETED, v);
            json_decref(p);
        }
        st = s_state(s);
        CHECK(s_int(st, "gen") == 1);
        const json_t *C = json_object_get(st, "C");
        REQUIRE(json_array_size(C) == 120 * 120);
        double off_diag = 0;
        for (int a = 0; a < 120; a++)
            for (int b = 0; b < 120; b++)
                if (a != b)
                    off_diag = fmax(off_diag, fabs(json_number_value(json_array_get(
                                                  C, (size_t)(a * 120 + b)))));
        if (k == 0)
            CHECK(off_diag == 0);
        else
            CHECK(off_diag > 0);
        json_decref(st);
        sched_destroy(&s);
        spec_destroy(&sp);
    }
}

/* An int on a plateau (the objective flat within each value's cell):
   the margin keeps its sd at a quarter of a cell, so the search still
   moves it to the best value. */
static double s_step_k(const json_t *p)
{
    return 100 * pow(stl_num(p, "x") - 0.25, 2) + stl_num(p, "k");
}

TEST(discrete_dimensions_keep_a_margin)
{
    const char *space = "{\"x\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
                        "\"k\":{\"type\":\"int\",\"low\":1,\"high\":4}}";
    for (int seed = 1; seed <= 5; seed++) {
        char sched[64];
        snprintf(sched, sizeof sched, "{\"type\":\"cmaes\",\"seed\":%d}", seed);
        spec_t *sp = s_spec(sched, space, "min");
        REQUIRE(sp);
        sched_t *s = stl_new(sp);
        REQUIRE(s);
        json_t *log = json_array();
        double best = stl_study(s, 1, 120, s_step_k, 1, log);
        int k1 = 0;
        for (size_t i = 100; i < 120; i++)
            k1 += json_integer_value(json_object_get(json_array_get(log, i), "k")) == 1;
        if (!(best < 1.01) || k1 < 5)
            JZT_FAIL("seed %d: best %g, k = 1 in %d of the last 20", seed, best, k1);
        json_decref(log);
        sched_destroy(&s);
        spec_destroy(&sp);
    }
}

/* The first generation of a 4-D space (lambda 8, mean the centre, sigma0
   0.05 so that no point leaves the cube): mirrored orthogonal sampling,
   so points 2k and 2k + 1 are m + z_k and m - z_k and z_0 .. z_3 are
   orthogonal. Told a sphere around the mean, tilted a little (so the
   points of a pair differ by little), the mean moves by the weighted
   steps of the better point of each pair (pairwise selection), not by
   those of the best four points, where pairs would mostly cancel. */
TEST(mirrored_orthogonal_steps_selected_pairwise)
{
    spec_t *sp =
        s_spec("{\"type\":\"cmaes\",\"seed\":3,\"sigma0\":0.05}", STL_QSPACE4, "min");
    REQUIRE(sp);
    sched_t *s = stl_new(sp);
    REQUIRE(s);
    const char *names[4] = {"x", "y", "z", "w"};
    double y[8][4], f[8];
    json_t *ps[8];
    for (long id = 1; id <= 8; id++) {
        REQUIRE(s->ops->suggest(s, id, &ps[id - 1]) == SCHED_OK);
        f[id - 1] = 0;
        for (int i = 0; i < 4; i++) { /* [-1, 1] -> unit -> step / sigma0 */
            y[id - 1][i] = ((stl_num(ps[id - 1], names[i]) + 1) / 2 - 0.5) / 0.05;
            f[id - 1] += y[id - 1][i] * y[id - 1][i];
        }
        f[id - 1] += 0.1 * y[id - 1][0];
    }
    double mirror = 0, worst_cos = 0;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 4; i++)
            mirror = fmax(mirror, fabs(y[2 * k][i] + y[2 * k + 1][i]));
    for (int a = 0; a < 8; a += 2)
        for (int b = a + 2; b < 8; b += 2) {
            double d = 0, na = 0, nb = 0;
            for (int i = 0; i < 4; i++) {
                d += y[a][i] * y[b][i];
                na += y[a][i] * y[a][i];
                nb += y[b][i] * y[b][i];
            }
            worst_cos = fmax(worst_cos, fabs(d) / sqrt(na * nb));
        }
    printf("  mirrored pairs differ by %.1e; |cos| between pairs at most %.1e\n", mirror,
           worst_cos);
    CHECK(mirror < 1e-9);
    CHECK(worst_cos < 1e-9);
    for (long id = 1; id <= 8; id++) {
        s->ops->on_complete(s, id, ps[id - 1], SCHED_COMPLETED, f[id - 1]);
        json_decref(ps[id - 1]);
    }
    /* expected: the better point of each pair, ranked by f, weights
       log(4.5) - log(r), r = 1 .. 4, normalised */
    int ord[4];
    for (int k = 0; k < 4; k++)
        ord[k] = f[2 * k + 1] < f[2 * k] ? 2 * k + 1 : 2 * k;
    for (int i = 1; i < 4; i++)
        for (int j = i; j > 0 && f[ord[j]] < f[ord[j - 1]]; j--) {
            int t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    double w[4], ws = 0, want[4] = {0.5, 0.5, 0.5, 0.5};
    for (int r = 0; r < 4; r++)
        ws += w[r] = log(4.5) - log(r + 1.0);
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 4; i++)
            want[i] += w[r] / ws * 0.05 * y[ord[r]][i];
    json_t *st = s_state(s);
    REQUIRE(st);
    const json_t *m = json_object_get(st, "m");
    double err = 0, moved = 0;
    for (int i = 0; i < 4; i++) {
        double mi = json_number_value(json_array_get(m, (size_t)i));
        err = fmax(err, fabs(mi - want[i]));
        moved = fmax(moved, fabs(mi - 0.5));
    }
    printf("  the mean moved %.3g, %.1e from the pairwise-selected step\n", moved, err);
    CHECK(err < 1e-9);
    CHECK(moved > 1e-3);
    json_decref(st);
    sched_destroy(&s);
    spec_destroy(&sp);
}

/* In 2 dimensions steps are orthogonal in blocks of two, not mirrored. */
TEST(orthogonal_steps_in_two_dimensions)
{
    spec_t *sp =
        s_spec("{\"type\":\"cmaes\",\"seed\":3,\"sigma0\":0.05}", STL_QSPACE, "min");
    REQUIRE(sp);
    sched_t *s = stl_new(sp);
    REQUIRE(s);
    double y[6][2];
    for (long id = 1; id <= 6; id++) {
        json_t *p = NULL;
        REQUIRE(s->ops->suggest(s, id, &p) == SCHED_OK);
        y[id - 1][0] = ((stl_num(p, "x") + 1) / 2 - 0.5) / 0.05;
        y[id - 1][1] = ((stl_num(p, "y") + 1) / 2 - 0.5) / 0.05;
        json_decref(p);
    }
    double worst = 0;
    for (int k = 0; k < 6; k += 2)
        worst =
            fmax(worst, fabs(y[k][0] * y[k + 1][0] + y[k][1] * y[k + 1][1]) /
                            hypot(y[k][0], y[k][1]) / hypot(y[k + 1][0], y[k + 1][1]));
    printf("  2-D blocks: |cos| at most %.1e\n", worst);
    CHECK(worst < 1e-9);
    sched_destroy(&s);
    spec_destroy(&sp);
}

static const char *QSPACE6 = "{\"a\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
                             "\"b\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
                             "\"c\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
                             "\"d\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
                             "\"e\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
                             "\"f\":{\"type\":\"float\",\"low\":-1,\"high\":1}}";

/* 6-D ellipsoid, minimum 0 at (0.3, -0.2, 0.1, 0.5, -0.4, 0.25), axis
   weights 1 .. 32 */
static double s_ellip6(const json_t *p)
{
    static const char *k[6] = {"a", "b", "c", "d", "e", "f"};
    static const double o[6] = {0.3, -0.2, 0.1, 0.5, -0.4, 0.25};
    double v = 0;
    for (int i = 0; i < 6; i++)
        v += pow(2, i) * pow(stl_num(p, k[i]) - o[i], 2);
    return v;
}

/* Convergence speed on a 6-D ellipsoid, 500 trials, seeds 1-9: the
   median best (step-size and covariance adaptation at work). Independent
   draws gave 5.0e-5, orthogonal sampling 2.0e-5, mirrored orthogonal
   sampling with pairwise selection 4.1e-6. */
TEST(converges_on_an_ellipsoid_within_a_budget)
{
    double best[9];
    for (int seed = 1; seed <= 9; seed++) {
        char sch[64];
        snprintf(sch, sizeof sch, "{\"type\":\"cmaes\",\"seed\":%d}", seed);
        spec_t *sp = s_spec(sch, QSPACE6, "min");
        REQUIRE(sp);
        sched_t *s = stl_new(sp);
        REQUIRE(s);
        best[seed - 1] = stl_study(s, 1, 500, s_ellip6, 1, NULL);
        sched_destroy(&s);
        spec_destroy(&sp);
    }
    for (int i = 1; i < 9; i++) /* sorted */
        for (int j = i; j > 0 && best[j] < best[j - 1]; j--) {
            double t = best[j];
            best[j] = best[j - 1];
            best[j - 1] = t;
        }
    printf("  6-D ellipsoid, 500 trials, median best of 9 seeds %.3g (%.3g .. %.3g)\n",
           best[4], best[0], best[8]);
    CHECK(best[4] < 1e-5);
}

int main(void)
{
    RUN(options_checked);
    RUN(same_seed_same_study);
    RUN(types_and_conditional_spaces);
    RUN(far_better_than_random_on_a_quadratic);
    RUN(ipop_restarts_a_stalled_population);
    RUN(save_restore_mid_generation);
    RUN(warm_start_and_enqueued_results);
    RUN(parallel_generations);
    RUN(many_parameters_are_separable);
    RUN(discrete_dimensions_keep_a_margin);
    RUN(mirrored_orthogonal_steps_selected_pairwise);
    RUN(orthogonal_steps_in_two_dimensions);
    RUN(converges_on_an_ellipsoid_within_a_budget);
    TEST_DONE();
}
