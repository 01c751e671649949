/*  test_pareto.c - multi-objective and constrained studies:
    common/pareto.c (dominance, the front, exact hypervolume checked
    against counting unit cells), the spec's objective list and
    constraints (field-named refusals, spec_violation,
    spec_objective_values) and the bo scheduler's targets for them
    (schedulers/sched_bo_mo.c: infeasible worse than feasible and ordered
    by violation, reproducible weights) and a short bo run that keeps the
    metrics across save/restore.
*/
#include "jz_test.h"
#include "common/pareto.h"
#include "common/spec.h"
#include "sched_testlib.h"
#include "schedulers/sched_bo.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

TEST(dominance_and_front)
{
    double a[] = {1, 2}, b[] = {2, 2}, c[] = {1, 2};
    CHECK(pareto_dominates(a, b, 2) && !pareto_dominates(b, a, 2));
    CHECK(!pareto_dominates(a, c, 2)); /* equal: neither */
    double F[] = {1, 3, 2, 2, 3, 1, 2.5, 2.5, 1, 3, NAN, 0, 0, 0};
    unsigned char valid[] = {1, 1, 1, 1, 1, 1, 0}, front[7];
    size_t n = pareto_front(F, 7, 2, valid, front);
    /* (2.5,2.5) is dominated; the repeat of (1,3) stays; NaN and invalid are out */
    CHECK(n == 4);
    CHECK(front[0] && front[1] && front[2] && !front[3] && front[4] && !front[5] &&
          !front[6]);
}

TEST(hypervolume_known_values)
{
    double F2[] = {3, 1, 2, 2, 1, 3};
    double ref2[] = {4, 4};
    CHECK_NEAR(pareto_hypervolume(F2, 3, 2, ref2), 6.0, 1e-12);
    double F3[] = {0, 0, 1, 1, 1, 0};
    double ref3[] = {2, 2, 2};
    CHECK_NEAR(pareto_hypervolume(F3, 2, 3, ref3), 5.0, 1e-12); /* 4 + 2 - 1 */
    double one[] = {0, 0, 0}, r[] = {1, 2, 3};
    CHECK_NEAR(pareto_hypervolume(one, 1, 3, r), 6.0, 1e-12);
    double out[] = {5, 0, 0}; /* not below the reference: nothing */
    CHECK_NEAR(pareto_hypervolume(out, 1, 3, r), 0.0, 0);
}

TEST(hypervolume_matches_cell_counting)
{
    /* integer points in [0,5)^m and ref (5,..): the volume is the number of
       unit cells [c, c+1) some point is <= (exact) */
    srand(11);
    for (int m = 2; m <= 4; m++) {
        for (int rep = 0; rep < 20; rep++) {
            int n = 1 + rand() % 8;
            double F[8 * 4], ref[4] = {5, 5, 5, 5};
            for (int i = 0; i < n * m; i++)
                F[i] = rand() % 5;
            long cells = 0, total = 1;
            for (int k = 0; k < m; k++)
                total *= 5;
            for (long c = 0; c < total; c++) {
                int cc[4];
                long r = c;
                for (int k = 0; k < m; k++) {
                    cc[k] = (int)(r % 5);
                    r /= 5;
                }
                int dom = 0;
                for (int i = 0; i < n && !dom; i++) {
                    int ok = 1;
                    for (int k = 0; k < m; k++)
                        ok &= F[i * m + k] <= cc[k];
                    dom = ok;
                }
                cells += dom;
            }
            double hv = pareto_hypervolume(F, (size_t)n, (size_t)m, ref);
            if (fabs(hv - (double)cells) > 1e-9)
                printf("m=%d rep=%d: hv %g, cells %ld\n", m, rep, hv, cells);
            CHECK(fabs(hv - (double)cells) <= 1e-9);
        }
    }
}

static spec_t *s_spec_text(const char *objective, const char *extra, const char *sched,
                           spec_error *err)
{
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"name\":\"t\",\"objective\":%s,%s\"scheduler\":%s,"
             "\"budget\":{\"trials\":50},"
             "\"space\":{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1},"
             "\"y\":{\"type\":\"float\",\"low\":0,\"high\":1}},"
             "\"trial\":{\"command\":[\"true\"]}}",
             objective, extra, sched);
    json_t *j = json_loads(buf, 0, NULL);
    if (!j) {
        snprintf(err->text, sizeof err->text, "bad test json");
        err->field[0] = 0;
        return NULL;
    }
    spec_t *s = spec_parse(j, 0, err);
    json_decref(j);
    return s;
}

static const char *s_refusal(const char *objective, const char *extra, char *b, size_t n)
{
    spec_error err;
    spec_t *s = s_spec_text(objective, extra, "{\"type\":\"random\"}", &err);
    if (s) {
        spec_destroy(&s);
        snprintf(b, n, "ok");
        return b;
    }
    return spec_strerror(&err, b, n);
}

TEST(spec_objectives_and_constraints)
{
    char b[400];
    CHECK_STR(s_refusal("[{\"metric\":\"a\",\"mode\":\"min\"},{\"metric\":\"b\",\"mode\":"
                        "\"max\"}]",
                        "\"constraints\":[{\"metric\":\"mem\",\"<=\":4}],", b, sizeof b),
              "ok");
    CHECK_STR(s_refusal("[]", "", b, sizeof b),
              "objective: a list of objectives holds 1 to 4 of them");
    CHECK_STR(s_refusal("[{\"metric\":\"a\",\"mode\":\"min\"},{\"metric\":\"a\",\"mode\":"
                        "\"max\"}]",
                        "", b, sizeof b),
              "objective[1].metric: \"a\" is already an objective");
    CHECK_STR(s_refusal("[{\"metric\":\"a\",\"mode\":\"min\"},{\"metric\":\"b\",\"mode\":"
                        "\"up\"}]",
                        "", b, sizeof b),
              "objective[1].mode: must be \"max\" or \"min\"");
    CHECK_STR(s_refusal("[{\"metric\":\"a\",\"mode\":\"min\"},7]", "", b, sizeof b),
              "objective[1]: must be an object {\"metric\", \"mode\"}, not an integer");
    CHECK_STR(s_refusal("\"a\"", "", b, sizeof b),
              "objective: must be an object or an array of objects, not a string");
    CHECK_STR(s_refusal("{\"metric\":\"a\",\"mode\":\"min\"}",
                        "\"constraints\":[{\"metric\":\"m\",\"<=\":1,\">=\":0}],", b,
                        sizeof b),
              "constraints[0]: needs exactly one bound, \"<=\" or \">=\"");
    CHECK_STR(s_refusal("{\"metric\":\"a\",\"mode\":\"min\"}",
                        "\"constraints\":[{\"metric\":\"m\",\"<\":1}],", b, sizeof b),
              "constraints[0].<: unknown key (expected one of: metric, <=, >=)");
    CHECK_STR(s_refusal("{\"metric\":\"a\",\"mode\":\"min\"}",
                        "\"constraints\":[{\"metric\":\"m\",\">=\":\"x\"}],", b,
                        sizeof b),
              "constraints[0].>=: must be a finite number, not a string");
    CHECK_STR(s_refusal("{\"metric\":\"a\",\"mode\":\"min\"}",
                        "\"constraints\":{\"metric\":\"m\"},", b, sizeof b),
              "constraints: must be an array, not an object");

    spec_error err;
    spec_t *s = s_spec_text(
        "[{\"metric\":\"a\",\"mode\":\"min\"},{\"metric\":\"b\",\"mode\":\"max\"}]",
        "\"constraints\":[{\"metric\":\"mem\",\"<=\":4},{\"metric\":\"acc\",\">=\":0.5}]"
        ",",
        "{\"type\":\"random\"}", &err);
    REQUIRE(s);
    CHECK(s->nobjectives == 2 && s->nconstraints == 2);
    CHECK_STR(s->metric, "a");
    CHECK(!s->maximize && s->objectives[1].maximize);
    json_t *m = json_pack("{s:f, s:f, s:f}", "b", 3.0, "mem", 5.0, "acc", 0.25);
    CHECK_NEAR(spec_violation(s, m), 1.0 + 0.25, 1e-12);
    double f[2];
    CHECK(spec_objective_values(s, 2.0, m, f) == 0);
    CHECK(f[0] == 2.0 && f[1] == -3.0); /* max negated */
    json_object_del(m, "acc");
    CHECK(isinf(spec_violation(s, m))); /* a constraint metric missing */
    json_object_del(m, "b");
    CHECK(spec_objective_values(s, 2.0, m, f) == -1);
    json_decref(m);
    m = json_pack("{s:f, s:f}", "mem", 4.0, "acc", 0.5); /* on the bounds: feasible */
    CHECK(spec_violation(s, m) == 0);
    json_decref(m);
    CHECK_STR(json_string_value(json_object_get(spec_json_objective(s->json), "metric")),
              "a");
    spec_destroy(&s);
}

/* The one definition of best (spec_best_counts, spec_mark_trials):
   completed trials only, finite values, constraints met; the lower id
   on a tie; a pruned or stopped trial with a better value, a running one
   and a diverged one never count. */
TEST(best_counts_completed_feasible_finite_only)
{
    CHECK(spec_best_counts("completed", 0.5, 1));
    CHECK(!spec_best_counts("pruned", 0.5, 1));
    CHECK(!spec_best_counts("stopped", 0.5, 1));
    CHECK(!spec_best_counts("failed", 0.5, 1));
    CHECK(!spec_best_counts("running", 0.5, 1));
    CHECK(!spec_best_counts("completed", NAN, 1));
    CHECK(!spec_best_counts("completed", INFINITY, 1));
    CHECK(!spec_best_counts("completed", 0.5, 0)); /* infeasible */
    CHECK(!spec_best_counts(NULL, 0.5, 1));

    spec_error err;
    spec_t *s = s_spec_text("{\"metric\":\"acc\",\"mode\":\"max\"}", "",
                            "{\"type\":\"random\"}", &err);
    REQUIRE(s);
    json_t *trials = json_loads("[{\"state\":\"pruned\",\"value\":0.99},"
                                "{\"state\":\"completed\",\"value\":0.7},"
                                "{\"state\":\"stopped\",\"value\":0.95},"
                                "{\"state\":\"running\",\"value\":null},"
                                "{\"state\":\"completed\",\"value\":\"nan\"},"
                                "{\"state\":\"completed\",\"value\":0.8},"
                                "{\"state\":\"completed\",\"value\":0.8}]",
                                0, NULL);
    REQUIRE(trials);
    CHECK(spec_mark_trials(s, trials) == 1);
    for (size_t i = 0; i < json_array_size(trials); i++)
        CHECK(json_is_true(json_object_get(json_array_get(trials, i), "best")) ==
              (i == 5)); /* 0.8, the first of the tie */
    json_decref(trials);
    spec_destroy(&s);

    /* min with constraints: the best feasible, not the best value */
    s = s_spec_text("{\"metric\":\"loss\",\"mode\":\"min\"}",
                    "\"constraints\":[{\"metric\":\"mem\",\"<=\":4}],",
                    "{\"type\":\"random\"}", &err);
    REQUIRE(s);
    trials =
        json_loads("[{\"state\":\"completed\",\"value\":0.1,\"metrics\":{\"mem\":9}},"
                   "{\"state\":\"completed\",\"value\":0.3,\"metrics\":{\"mem\":2}},"
                   "{\"state\":\"pruned\",\"value\":0.2,\"metrics\":{\"mem\":1}}]",
                   0, NULL);
    REQUIRE(trials);
    spec_mark_trials(s, trials);
    CHECK(!json_object_get(json_array_get(trials, 0), "best"));
    CHECK(json_is_true(json_object_get(json_array_get(trials, 1), "best")));
    CHECK(!json_object_get(json_array_get(trials, 2), "best"));
    json_decref(trials);
    spec_destroy(&s);

    /* two objectives: the Pareto set of the completed trials only */
    s = s_spec_text("[{\"metric\":\"a\",\"mode\":\"min\"},{\"metric\":\"b\",\"mode\":"
                    "\"max\"}]",
                    "", "{\"type\":\"random\"}", &err);
    REQUIRE(s);
    trials = json_loads("[{\"state\":\"completed\",\"value\":1,\"metrics\":{\"b\":1}},"
                        "{\"state\":\"completed\",\"value\":2,\"metrics\":{\"b\":3}},"
                        "{\"state\":\"completed\",\"value\":3,\"metrics\":{\"b\":2}},"
                        "{\"state\":\"pruned\",\"value\":0,\"metrics\":{\"b\":9}}]",
                        0, NULL);
    REQUIRE(trials);
    CHECK(spec_mark_trials(s, trials) == 2);
    static const int on_front[] = {1, 1, 0, 0};
    for (size_t i = 0; i < 4; i++)
        CHECK(json_is_true(json_object_get(json_array_get(trials, i), "pareto")) ==
              on_front[i]);
    json_decref(trials);
    spec_destroy(&s);
}

TEST(bo_targets_feasible_first)
{
    spec_error err;
    spec_t *s = s_spec_text("{\"metric\":\"a\",\"mode\":\"min\"}",
                            "\"constraints\":[{\"metric\":\"g\",\"<=\":1}],",
                            "{\"type\":\"bo\"}", &err);
    REQUIRE(s);
    double v[5] = {5, 1, 0.5, 3, 2};
    json_t *mt[5];
    double g[5] = {0, 2, 4, 1, 0.5};
    for (int i = 0; i < 5; i++)
        mt[i] = json_pack("{s:f}", "g", g[i]);
    unsigned char failed[5] = {0, 0, 0, 0, 1};
    double y[5];
    CHECK(sched__bo_targets(s, 5, v, mt, failed, 1, 1, y) == 0);
    /* feasible: 0 (v 5) and 3 (v 3, g on the bound): 3 is better */
    CHECK(y[3] < y[0]);
    /* every infeasible one is worse than every feasible one; more violation is worse */
    CHECK(y[1] > y[0] && y[2] > y[1]);
    CHECK(isnan(y[4]));
    /* no feasible trial: the violation itself */
    double v2[2] = {1, 2};
    double g2[2] = {3, 2};
    for (int i = 0; i < 2; i++) {
        json_decref(mt[i]);
        mt[i] = json_pack("{s:f}", "g", g2[i]);
    }
    unsigned char f2[2] = {0, 0};
    CHECK(sched__bo_targets(s, 2, v2, mt, f2, 1, 1, y) == 0);
    CHECK(y[1] < y[0]);
    for (int i = 0; i < 5; i++)
        json_decref(mt[i]);
    spec_destroy(&s);

    /* two objectives: the weights come from the seed (same seed, same y) */
    s = s_spec_text("[{\"metric\":\"a\",\"mode\":\"min\"},{\"metric\":\"b\",\"mode\":"
                    "\"min\"}]",
                    "", "{\"type\":\"bo\"}", &err);
    REQUIRE(s);
    double va[4] = {0, 1, 0.5, 1};
    double vb[4] = {1, 0, 0.5, 1};
    for (int i = 0; i < 4; i++)
        mt[i] = json_pack("{s:f}", "b", vb[i]);
    unsigned char f4[4] = {0};
    double y1[4], y2[4], y3[4];
    CHECK(sched__bo_targets(s, 4, va, mt, f4, 7, 1, y1) == 0);
    CHECK(sched__bo_targets(s, 4, va, mt, f4, 7, 1, y2) == 0);
    for (int i = 0; i < 4; i++)
        CHECK(y1[i] == y2[i]);
    /* (1,1) is dominated by every other point: worst under any weights */
    for (unsigned long long seed = 1; seed < 20; seed++) {
        CHECK(sched__bo_targets(s, 4, va, mt, f4, seed, 1, y3) == 0);
        CHECK(y3[3] > y3[0] && y3[3] > y3[1] && y3[3] > y3[2]);
    }
    for (int i = 0; i < 4; i++)
        json_decref(mt[i]);
    spec_destroy(&s);
}

TEST(bo_two_objectives_beats_random_and_restores)
{
    /* a = x, b = (1 - sqrt(x)) * (1 + 4y): the front is y = 0. Tolerance:
       after 30 trials bo's hypervolume (ref (1.1, 5.5)) beats random's
       with the same seed, a margin the front's shape makes wide. */
    const char *obj =
        "[{\"metric\":\"a\",\"mode\":\"min\"},{\"metric\":\"b\",\"mode\":\"min\"}]";
    double hv[2];
    for (int r = 0; r < 2; r++) {
        spec_error err;
        spec_t *s = s_spec_text(obj, "",
                                r ? "{\"type\":\"random\",\"seed\":3}"
                                  : "{\"type\":\"bo\",\"seed\":3,\"n_init\":6}",
                                &err);
        REQUIRE(s);
        char e[256];
        sched_t *b = sched_new(s, e, sizeof e);
        REQUIRE(b);
        double F[60];
        for (long id = 1; id <= 30; id++) {
            json_t *p = NULL;
            REQUIRE(stl_get(b, id, &p) == SCHED_OK);
            double x = json_number_value(json_object_get(p, "x"));
            double y = json_number_value(json_object_get(p, "y"));
            F[2 * (id - 1)] = x;
            F[2 * (id - 1) + 1] = (1 - sqrt(x)) * (1 + 4 * y);
            json_t *m =
                json_pack("{s:f, s:f}", "a", F[2 * (id - 1)], "b", F[2 * (id - 1) + 1]);
            if (b->ops->on_complete_metrics)
                b->ops->on_complete_metrics(b, id, p, SCHED_COMPLETED, x, m);
            else if (b->ops->on_complete)
                b->ops->on_complete(b, id, p, SCHED_COMPLETED, x);
            json_decref(m);
            json_decref(p);
        }
        double ref[2] = {1.1, 5.5};
        hv[r] = pareto_hypervolume(F, 30, 2, ref);
        if (r == 0) {
            /* the other objective is kept with each observation */
            json_t *st = b->ops->save(b);
            json_t *o0 = json_array_get(json_object_get(st, "obs"), 0);
            CHECK(json_is_number(json_object_get(json_object_get(o0, "metrics"), "b")));
            sched_t *b2 = sched_new(s, e, sizeof e);
            CHECK(b2 && b2->ops->restore(b2, st) == 0);
            json_t *st2 = b2 ? b2->ops->save(b2) : NULL;
            CHECK(st2 && json_equal(st, st2));
            json_decref(st2);
            json_decref(st);
            sched_destroy(&b2);
        }
        sched_destroy(&b);
        spec_destroy(&s);
    }
    printf("hypervolume: bo %.4f, random %.4f\n", hv[0], hv[1]);
    CHECK(hv[0] > hv[1]);
}

int main(void)
{
    RUN(dominance_and_front);
    RUN(hypervolume_known_values);
    RUN(hypervolume_matches_cell_counting);
    RUN(spec_objectives_and_constraints);
    RUN(best_counts_completed_feasible_finite_only);
    RUN(bo_targets_feasible_first);
    RUN(bo_two_objectives_beats_random_and_restores);
    TEST_DONE();
}
