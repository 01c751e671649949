/*  test_sched_bo_mf.c - bo under early stopping (schedulers/sched_bo_mf.c
    and its hooks in sched_bo.c): the values at the resource levels (either
    order of reports, "use": "best", a retry), the ladder for asha,
    hyperband and median specs, the level each model is fitted on (BOHB:
    the final values once n_init trials finished, else the highest level
    n_init trials reached), stopped trials never taken as finished, the
    "fidelity" option (rungs, joint, final), and save/restore mid-study giving the same
    suggestions.
*/
#include "jz_test.h"
#include "sched_testlib.h"
#include "schedulers/sched_bo.h"

#include <math.h>
#include <unistd.h>

static spec_t *s_spec(const char *sched, const char *es, const char *use)
{
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"name\":\"t\",\"objective\":{\"metric\":\"acc\",\"mode\":\"max\","
             "\"use\":\"%s\"},\"scheduler\":%s,\"early_stopping\":%s,"
             "\"budget\":{\"trials\":50,\"parallel\":4},"
             "\"space\":{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1},"
             "\"y\":{\"type\":\"float\",\"low\":0,\"high\":1}},"
             "\"trial\":{\"command\":[\"true\"]}}",
             use, sched, es);
    return stl_parse(buf);
}

static const char *ASHA9 = "{\"type\":\"asha\",\"grace\":1,\"reduction\":3,"
                           "\"max_resource\":9}";

TEST(levels_and_values_at_them)
{
    spec_t *sp = s_spec("{\"type\":\"bo\"}", ASHA9, "last");
    REQUIRE(sp);
    bo_mf *m = sched__bo_mf_new(sp);
    REQUIRE(m);
    CHECK(sched__bo_mf_levels(m) == 2); /* 1, 3 (not 9: a full trial) */
    CHECK(sched__bo_mf_level(m, 0) == 1 && sched__bo_mf_level(m, 1) == 3);
    /* trial 1: objective before the epoch of the same step; epoch 2 then
       4 (past level 3: its value there is the one at epoch 4) */
    sched__bo_mf_metric(m, 1, 10, "acc", 0.5);
    sched__bo_mf_metric(m, 1, 10, "epoch", 1);
    sched__bo_mf_metric(m, 1, 20, "epoch", 2);
    sched__bo_mf_metric(m, 1, 20, "acc", 0.6);
    sched__bo_mf_metric(m, 1, 20, "loss", 9); /* another metric: ignored */
    sched__bo_mf_metric(m, 1, 40, "epoch", 4);
    sched__bo_mf_metric(m, 1, 41, "acc", 0.7); /* at or after the unpaired epoch */
    CHECK(sched__bo_mf_at(m, 1, 0) == 0.5);
    CHECK(sched__bo_mf_at(m, 1, 1) == 0.7);
    /* trial 2 reached epoch 1 only; trial 3 is unknown */
    sched__bo_mf_metric(m, 2, 5, "epoch", 1);
    sched__bo_mf_metric(m, 2, 5, "acc", 0.2);
    CHECK(sched__bo_mf_at(m, 2, 0) == 0.2);
    CHECK(isnan(sched__bo_mf_at(m, 2, 1)));
    CHECK(isnan(sched__bo_mf_at(m, 3, 0)));
    /* a retry of trial 2 reports from the start: its new curve counts */
    sched__bo_mf_metric(m, 2, 1, "acc", 0.4);
    sched__bo_mf_metric(m, 2, 1, "epoch", 1);
    CHECK(sched__bo_mf_at(m, 2, 0) == 0.4);
    /* through save and restore */
    json_t *st = sched__bo_mf_save(m);
    bo_mf *m2 = sched__bo_mf_new(sp);
    REQUIRE(m2);
    CHECK(sched__bo_mf_restore(m2, st) == 0);
    CHECK(sched__bo_mf_at(m2, 1, 1) == 0.7 && sched__bo_mf_at(m2, 2, 0) == 0.4);
    json_t *bad = json_pack("[{s:i, s:[i]}]", "id", 1, "at", 1);
    CHECK(sched__bo_mf_restore(m2, bad) == -1); /* wrong number of levels */
    json_decref(bad);
    json_decref(st);
    sched__bo_mf_free(m2);
    sched__bo_mf_free(m);
    spec_destroy(&sp);

    /* "use": "best": the best so far at the level's point */
    sp = s_spec("{\"type\":\"bo\"}", ASHA9, "best");
    m = sched__bo_mf_new(sp);
    sched__bo_mf_metric(m, 1, 1, "acc", 0.8);
    sched__bo_mf_metric(m, 1, 1, "epoch", 1);
    sched__bo_mf_metric(m, 1, 3, "acc", 0.3);
    sched__bo_mf_metric(m, 1, 3, "epoch", 3);
    CHECK(sched__bo_mf_at(m, 1, 0) == 0.8 && sched__bo_mf_at(m, 1, 1) == 0.8);
    sched__bo_mf_free(m);
    spec_destroy(&sp);

    /* hyperband: the ladder from its grace up to max_resource; the step
       as resource; median: 1, 3, 9, ... */
    sp = s_spec("{\"type\":\"bo\"}",
                "{\"type\":\"hyperband\",\"resource\":\"step\",\"grace\":2,"
                "\"reduction\":2,\"max_resource\":16}",
                "last");
    m = sched__bo_mf_new(sp);
    CHECK(sched__bo_mf_levels(m) == 3); /* 2 4 8 */
    sched__bo_mf_metric(m, 7, 5, "acc", 0.1);
    CHECK(sched__bo_mf_at(m, 7, 1) == 0.1 && isnan(sched__bo_mf_at(m, 7, 2)));
    sched__bo_mf_free(m);
    spec_destroy(&sp);
    sp = s_spec("{\"type\":\"bo\"}", "{\"type\":\"median\",\"grace\":0}", "last");
    m = sched__bo_mf_new(sp);
    CHECK(sched__bo_mf_levels(m) > 3 && sched__bo_mf_level(m, 2) == 9);
    sched__bo_mf_free(m);
    spec_destroy(&sp);
}

static int s_level(sched_t *s)
{
    json_t *st = s->ops->save(s);
    int l = (int)json_integer_value(json_object_get(st, "level"));
    json_decref(st);
    return l;
}

/* acc at epoch e of a config: better near (0.7, 0.3), growing with e */
static double s_acc(const json_t *p, double e)
{
    double x = json_number_value(json_object_get(p, "x")),
           y = json_number_value(json_object_get(p, "y"));
    return (1 - (x - 0.7) * (x - 0.7) - (y - 0.3) * (y - 0.3)) * (1 - 0.5 / e);
}

static void s_report(sched_t *s, long id, const json_t *p, int e0, int e1)
{
    for (int e = e0; e <= e1; e++) {
        sched_instr ins[4];
        CHECK(s->ops->on_metric(s, id, e, "epoch", e, 0, ins, 4) == 0);
        CHECK(s->ops->on_metric(s, id, e, "acc", s_acc(p, e), 0, ins, 4) == 0);
    }
}

static sched_t *s_reload(const spec_t *sp, sched_t *s)
{
    char *txt = stl_stop(&s);
    char err[256];
    return stl_resume(sched_new(sp, err, sizeof err), txt);
}

/* A scripted study, n_init 3, asha ladder 1, 3: trials 1-3 (Sobol) reach
   epoch 1 and 1, 2 are stopped there; trial 3 goes on. The 4th model is
   on level 0 (3 trials reached epoch 1), with trial 3 observed there too.
   Trials 3, 4, 5 then reach epoch 3: level 1. Trial 3 finishes, and two
   more: the final values. With restore before every suggestion when
   `reload`; returns the params of trials 1..8 as text. */
static char *s_study(const spec_t *sp, int reload, int *levels)
{
    char err[256];
    sched_t *s = sched_new(sp, err, sizeof err);
    if (!s)
        return NULL;
    json_t *P[9] = {0};
    int nl = 0;
#define SUGGEST(id)                                                                      \
    do {                                                                                 \
        if (reload)                                                                      \
            s = s_reload(sp, s);                                                         \
        if (!s || stl_get(s, id, &P[id]) != SCHED_OK)                                    \
            goto out;                                                                    \
    } while (0)
    for (long id = 1; id <= 3; id++)
        SUGGEST(id);
    for (long id = 1; id <= 3; id++)
        s_report(s, id, P[id], 1, 1);
    s->ops->on_complete(s, 1, P[1], SCHED_STOPPED, s_acc(P[1], 1));
    s->ops->on_complete(s, 2, P[2], SCHED_STOPPED, s_acc(P[2], 1));
    SUGGEST(4);
    levels[nl++] = s_level(s);
    s_report(s, 4, P[4], 1, 3);
    s_report(s, 3, P[3], 2, 3);
    SUGGEST(5);
    levels[nl++] = s_level(s);
    s_report(s, 5, P[5], 1, 3);
    SUGGEST(6);
    levels[nl++] = s_level(s);
    s_report(s, 3, P[3], 4, 9);
    s->ops->on_complete(s, 3, P[3], SCHED_COMPLETED, s_acc(P[3], 9));
    for (long id = 4; id <= 6; id++) {
        s_report(s, id, P[id], 4, 9);
        s->ops->on_complete(s, id, P[id], SCHED_COMPLETED, s_acc(P[id], 9));
    }
    SUGGEST(7);
    levels[nl++] = s_level(s);
    SUGGEST(8);
out:;
    char *txt = NULL;
    json_t *all = json_array();
    for (int i = 1; i <= 8; i++)
        json_array_append(all, P[i] ? P[i] : json_null());
    txt = json_dumps(all, JSON_COMPACT | JSON_REAL_PRECISION(12));
    json_decref(all);
    for (int i = 0; i < 9; i++)
        json_decref(P[i]);
    sched_destroy(&s);
    return txt;
#undef SUGGEST
}

TEST(the_model_level_follows_the_data_and_survives_restore)
{
    spec_t *sp =
        s_spec("{\"type\":\"bo\",\"seed\":3,\"n_init\":3,\"fidelity\":\"rungs\"}", ASHA9,
               "last");
    REQUIRE(sp);
    int lv[4] = {9, 9, 9, 9}, lv2[4] = {9, 9, 9, 9};
    char *a = s_study(sp, 0, lv);
    REQUIRE(a);
    CHECK(!strstr(a, "null")); /* all 8 suggested */
    /* epoch 1 (3 there); still epoch 1 (trials 3, 4 at epoch 3: 2 < 3);
       epoch 3 (3, 4, 5); final values (4 finished) */
    CHECK(lv[0] == 0 && lv[1] == 0 && lv[2] == 1 && lv[3] == -1);
    char *b = s_study(sp, 1, lv2);
    REQUIRE(b);
    CHECK_STR(b, a);
    CHECK(memcmp(lv, lv2, sizeof lv) == 0);
    free(a);
    free(b);
    spec_destroy(&sp);
}

/* Stopped trials are never final values: with two trials stopped at a
   high epoch-1 value, and fidelity "final", the model waits for finished
   ones (Sobol until then) instead of taking them as finished. */
TEST(stopped_trials_do_not_count_as_finished)
{
    spec_t *sp =
        s_spec("{\"type\":\"bo\",\"seed\":1,\"n_init\":2,\"fidelity\":\"final\"}", ASHA9,
               "last");
    REQUIRE(sp);
    char err[256];
    sched_t *s = sched_new(sp, err, sizeof err);
    REQUIRE(s);
    json_t *p1, *p2, *p3;
    REQUIRE(stl_get(s, 1, &p1) == SCHED_OK);
    REQUIRE(stl_get(s, 2, &p2) == SCHED_OK);
    s->ops->on_complete(s, 1, p1, SCHED_STOPPED, 0.9);
    s->ops->on_complete(s, 2, p2, SCHED_STOPPED, 0.8);
    /* no trial finished: the third is still from the Sobol design */
    REQUIRE(stl_get(s, 3, &p3) == SCHED_OK);
    json_t *st = s->ops->save(s);
    CHECK(json_integer_value(json_object_get(st, "sobol")) == 3);
    CHECK(json_is_true(
        json_object_get(json_array_get(json_object_get(st, "obs"), 0), "stopped")));
    json_decref(st);
    json_decref(p1);
    json_decref(p2);
    json_decref(p3);
    sched_destroy(&s);
    spec_destroy(&sp);
    /* the option is checked */
    sp = s_spec("{\"type\":\"bo\",\"fidelity\":\"all\"}", ASHA9, "last");
    REQUIRE(sp);
    CHECK(sched_check(sp, err, sizeof err) == -1);
    CHECK_STR(err, "scheduler.fidelity: must be \"joint\", \"rungs\" or \"final\"");
    spec_destroy(&sp);
}

/* The joint model (one GP over params and resource) on the same study:
   every suggestion made, the same after restores. */
TEST(joint_model_suggests_and_survives_restore)
{
    spec_t *sp =
        s_spec("{\"type\":\"bo\",\"seed\":3,\"n_init\":3,\"fidelity\":\"joint\"}", ASHA9,
               "last");
    REQUIRE(sp);
    int lv[4], lv2[4];
    char *a = s_study(sp, 0, lv);
    REQUIRE(a);
    CHECK(!strstr(a, "null"));
    char *b = s_study(sp, 1, lv2);
    REQUIRE(b);
    CHECK_STR(b, a);
    /* suggestions stay in the space (the resource dimension is not a param) */
    json_t *all = json_loads(a, 0, NULL);
    size_t i;
    json_t *p;
    json_array_foreach(all, i, p)
    {
        CHECK(json_object_size(p) == 2);
        double x = json_number_value(json_object_get(p, "x"));
        CHECK(x >= 0 && x <= 1);
    }
    json_decref(all);
    free(a);
    free(b);
    spec_destroy(&sp);
}

int main(void)
{
    RUN(levels_and_values_at_them);
    RUN(the_model_level_follows_the_data_and_survives_restore);
    RUN(stopped_trials_do_not_count_as_finished);
    RUN(joint_model_suggests_and_survives_restore);
    TEST_DONE();
}
