/*  test_sched_es.c - early stopping monitors (schedulers/sched_es.c):
    option checks with "early_stopping.xxx" messages, ASHA stopping exactly
    the trials its rule says on a scripted sequence (cutoffs computed by
    hand below), Hyperband's bracket assignment and per-bracket stops, mode min,
   max_resource, either order of the objective and resource reports, the median rule on a
   scripted sequence, and save/restore at every point of a run giving the same decisions.
*/
#include "jz_test.h"
#include "sched_testlib.h"

static spec_t *s_spec(const char *mode, const char *es)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"name\":\"t\",\"objective\":{\"metric\":\"acc\",\"mode\":\"%s\"},"
             "\"scheduler\":{\"type\":\"random\"},\"early_stopping\":%s,"
             "\"budget\":{\"trials\":50},"
             "\"space\":{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1}},"
             "\"trial\":{\"command\":[\"true\"]}}",
             mode, es);
    return stl_parse(buf);
}

static sched_t *s_monitor(const spec_t *sp, char *err, size_t errsize)
{
    sched_t *m[4];
    int n = sched_monitors_new(sp, m, 4, err, errsize);
    if (n != 1)
        return NULL;
    return m[0];
}

/* One scripted report. */
typedef struct {
    long trial, step;
    const char *metric;
    double value;
    int complete; /* 1: on_complete instead of a metric */
} ev;

/* Runs events on a monitor (restoring a fresh copy from its saved state
   before event `cut`, -1 for never); appends "trial:reason;" per stop to
   out. Returns the monitor (caller destroys). */
static sched_t *s_play(const spec_t *sp, const ev *evs, int n, int cut, char *out,
                       size_t size)
{
    char err[256];
    sched_t *m = s_monitor(sp, err, sizeof err);
    out[0] = 0;
    for (int i = 0; i < n && m; i++) {
        if (i == cut) {
            char *txt = stl_stop(&m); /* through text, as the store keeps it */
            m = stl_resume(s_monitor(sp, err, sizeof err), txt);
            if (!m)
                break;
        }
        if (evs[i].complete) {
            m->ops->on_complete(m, evs[i].trial, NULL, SCHED_COMPLETED, evs[i].value);
            continue;
        }
        sched_instr ins[8];
        int k = m->ops->on_metric(m, evs[i].trial, evs[i].step, evs[i].metric,
                                  evs[i].value, 0, ins, 8);
        for (int j = 0; j < k; j++) {
            size_t len = strlen(out);
            snprintf(out + len, size - len, "%ld:%s:%s;", ins[j].trial,
                     ins_kind_name(ins[j].kind), ins[j].reason);
            sched_instr_fini(&ins[j]);
        }
    }
    return m;
}

TEST(options_are_checked)
{
    static const struct {
        const char *es, *msg;
    } bad[] = {
        {"{\"type\":\"asha\",\"grace\":0}", "early_stopping.grace: must be > 0"},
        {"{\"type\":\"asha\",\"reduction\":1}", "early_stopping.reduction: must be > 1"},
        {"{\"type\":\"asha\",\"reduction\":\"3\"}",
         "early_stopping.reduction: must be a number"},
        {"{\"type\":\"asha\",\"grace\":2,\"max_resource\":1}",
         "early_stopping.max_resource: must be >= grace (2)"},
        {"{\"type\":\"asha\",\"resource\":\"a b\"}",
         "early_stopping.resource: must be a metric name"},
        {"{\"type\":\"asha\",\"min_trials\":2}",
         "early_stopping.min_trials: unknown option for asha"},
        {"{\"type\":\"median\",\"reduction\":2}",
         "early_stopping.reduction: unknown option for median"},
        {"{\"type\":\"median\",\"min_trials\":0}",
         "early_stopping.min_trials: must be a whole number >= 1"},
        {"{\"type\":\"median\",\"grace\":-1}", "early_stopping.grace: must be >= 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spec_t *sp = s_spec("max", bad[i].es);
        REQUIRE(sp);
        char err[256] = "";
        CHECK(sched_check(sp, err, sizeof err) == -1);
        CHECK_STR(err, bad[i].msg);
        spec_destroy(&sp);
    }
    spec_t *sp = s_spec("max", "{\"type\":\"asha\",\"resource\":\"epoch\",\"grace\":1,"
                               "\"reduction\":3,\"max_resource\":9,\"metric\":\"acc\"}");
    char err[256] = "";
    CHECK(sched_check(sp, err, sizeof err) == 0);
    sched_t *m = s_monitor(sp, err, sizeof err);
    REQUIRE(m);
    CHECK(m->ops->suggest == NULL);
    CHECK_STR(m->ops->name, "asha");
    sched_destroy(&m);
    spec_destroy(&sp);
}

/* Plays evs with a restore before each event from `first` on (-1: a run
   without one too): every run must stop the same trials for the same
   reasons, want. */
static void s_same_at_every_cut(const spec_t *sp, const ev *evs, int n, int first,
                                const char *want)
{
    for (int cut = first; cut < n; cut++) {
        char out[4096];
        sched_t *m = s_play(sp, evs, n, cut, out, sizeof out);
        CHECK(m != NULL);
        if (strcmp(out, want))
            JZT_FAIL("restore before event %d: %s", cut, out);
        sched_destroy(&m);
    }
}

/* mode max, grace 1, eta 3. Rung 0 (epoch 1), values in arrival order:
     t1 0.5  no earlier value                  -> continues
     t2 0.6  [0.5]             q=2/3 -> 0.5     -> continues
     t3 0.4  [0.5 0.6]         -> 0.5667        -> stopped
     t4 0.7  [0.4 0.5 0.6]     -> 0.5333        -> continues
     t5 0.55 [0.4 0.5 0.6 0.7] -> 0.6           -> stopped
     t6 0.3  [.4 .5 .55 .6 .7] -> 0.5833        -> stopped
   Rung 1 (epoch 3): t1 0.62 continues (first); t2 0.61 < 0.62 stopped;
   t4 0.8 vs [0.61 0.62] -> 0.6167 continues. Rung 2 (epoch 9): t4 first.
   Some trials report the objective before the epoch of the same step,
   others after it; t1 also reports epoch 2 (no rung) and t4 goes from
   epoch 3 to 9 in one report. */
static const ev ASHA_EVS[] = {
    {1, 10, "acc", 0.5, 0},  {1, 10, "epoch", 1, 0},  {2, 10, "epoch", 1, 0},
    {2, 10, "acc", 0.6, 0},  {3, 10, "acc", 0.4, 0},  {3, 10, "epoch", 1, 0},
    {1, 15, "acc", 0.58, 0}, {1, 20, "epoch", 2, 0},  {1, 20, "acc", 0.59, 0},
    {4, 10, "epoch", 1, 0},  {4, 10, "acc", 0.7, 0},  {5, 10, "acc", 0.55, 0},
    {5, 10, "epoch", 1, 0},  {3, 20, "acc", 0.9, 0},  {3, 20, "epoch", 2, 0},
    {6, 10, "acc", 0.3, 0},  {6, 10, "epoch", 1, 0},  {1, 30, "epoch", 3, 0},
    {1, 30, "acc", 0.62, 0}, {2, 30, "acc", 0.61, 0}, {2, 30, "epoch", 3, 0},
    {4, 30, "acc", 0.8, 0},  {4, 30, "epoch", 3, 0},  {1, 0, NULL, 0.62, 1},
    {4, 90, "acc", 0.85, 0}, {4, 90, "epoch", 9, 0},
};
static const char *ASHA_STOPS =
    "3:stop:asha: rung 0 (epoch 1): 0.4 not in top 1/3 (cutoff 0.5667);"
    "5:stop:asha: rung 0 (epoch 1): 0.55 not in top 1/3 (cutoff 0.6);"
    "6:stop:asha: rung 0 (epoch 1): 0.3 not in top 1/3 (cutoff 0.5833);"
    "2:stop:asha: rung 1 (epoch 3): 0.61 not in top 1/3 (cutoff 0.62);";

TEST(asha_stops_exactly_the_trials_the_rule_says)
{
    spec_t *sp = s_spec("max", "{\"type\":\"asha\",\"resource\":\"epoch\",\"grace\":1,"
                               "\"reduction\":3}");
    REQUIRE(sp);
    char out[4096];
    sched_t *m = s_play(sp, ASHA_EVS, (int)(sizeof ASHA_EVS / sizeof ASHA_EVS[0]), -1,
                        out, sizeof out);
    REQUIRE(m);
    CHECK_STR(out, ASHA_STOPS);
    sched_destroy(&m);
    spec_destroy(&sp);
}

TEST(asha_save_restore_at_every_point_gives_the_same_decisions)
{
    spec_t *sp = s_spec("max", "{\"type\":\"asha\",\"grace\":1,\"reduction\":3}");
    REQUIRE(sp);
    int n = (int)(sizeof ASHA_EVS / sizeof ASHA_EVS[0]);
    s_same_at_every_cut(sp, ASHA_EVS, n, 0, ASHA_STOPS);
    /* a state of the other rule, or garbage, is refused */
    char err[256];
    sched_t *m = s_monitor(sp, err, sizeof err);
    json_t *bad = json_pack("{s:s, s:[], s:[]}", "rule", "median", "trials", "rungs");
    CHECK(m->ops->restore(m, bad) == -1);
    json_decref(bad);
    bad =
        json_pack("{s:s, s:[{s:s}], s:[]}", "rule", "asha", "trials", "id", "x", "rungs");
    CHECK(m->ops->restore(m, bad) == -1);
    json_decref(bad);
    sched_destroy(&m);
    spec_destroy(&sp);
}

/* mode min, eta 2, grace 2 on resource "step", max_resource 8: rungs at
   steps 2, 4 (not 8). Rung 0: t1 1.0 first; t2 0.5 vs [1.0] q=1/2 -> 1.0
   continues; t3 2.0 vs [0.5 1.0] -> 0.75 stopped. Rung 1: t1 0.9 first,
   t2 0.4 continues. t4 first reports at step 8, past both rungs: judged
   at rung 0 first, 5.0 vs [0.5 1 2] -> 1: stopped. t5 0.1 at step 8 passes
   rungs 0 and 1, and there is no rung at max_resource 8. */
TEST(asha_mode_min_step_resource_and_max_resource)
{
    spec_t *sp = s_spec("min", "{\"type\":\"asha\",\"resource\":\"step\",\"grace\":2,"
                               "\"reduction\":2,\"max_resource\":8}");
    REQUIRE(sp);
    static const ev evs[] = {
        {1, 1, "acc", 3.0, 0}, {1, 2, "acc", 1.0, 0}, {2, 2, "acc", 0.5, 0},
        {3, 2, "acc", 2.0, 0}, {3, 3, "acc", 0.1, 0}, {1, 4, "acc", 0.9, 0},
        {2, 4, "acc", 0.4, 0}, {2, 7, "acc", 0.3, 0}, {2, 8, "acc", 0.3, 0},
        {2, 9, "acc", 0.3, 0}, {4, 8, "acc", 5.0, 0}, {5, 8, "acc", 0.1, 0},
    };
    char out[2048];
    sched_t *m = s_play(sp, evs, (int)(sizeof evs / sizeof evs[0]), -1, out, sizeof out);
    CHECK_STR(out, "3:stop:asha: rung 0 (step 2): 2 not in top 1/2 (cutoff 0.75);"
                   "4:stop:asha: rung 0 (step 2): 5 not in top 1/2 (cutoff 1);");
    sched_destroy(&m);
    spec_destroy(&sp);
}

/* A diverged report (inf, -inf, nan) is the worst in either direction
   (issue 36 item 8): ASHA stops it at its rung and keeps it out of the
   cutoffs. Before, t2's inf passed (inf > 0.5) and raised the cutoff to
   inf, which then stopped t3's 0.6; in mode min, -inf passed as the best. */
TEST(asha_stops_a_diverged_report_in_either_direction)
{
    spec_t *sp = s_spec("max", "{\"type\":\"asha\",\"resource\":\"step\",\"grace\":2,"
                               "\"reduction\":2}");
    REQUIRE(sp);
    static const ev evs[] = {
        {1, 2, "acc", 0.5, 0},
        {2, 2, "acc", INFINITY, 0},
        {3, 2, "acc", 0.6, 0},
        {4, 2, "acc", NAN, 0},
    };
    char out[2048];
    sched_t *m = s_play(sp, evs, 4, -1, out, sizeof out);
    CHECK_STR(out, "2:stop:asha: rung 0 (step 2): inf not in top 1/2 (cutoff 0.5);"
                   "4:stop:asha: rung 0 (step 2): nan not in top 1/2 (cutoff 0.55);");
    sched_destroy(&m);
    spec_destroy(&sp);

    sp = s_spec("min", "{\"type\":\"asha\",\"resource\":\"step\",\"grace\":2,"
                       "\"reduction\":2}");
    REQUIRE(sp);
    static const ev mins[] = {
        {1, 2, "acc", 1.0, 0},
        {2, 2, "acc", -INFINITY, 0},
        {3, 2, "acc", 0.5, 0},
    };
    m = s_play(sp, mins, 3, -1, out, sizeof out);
    CHECK_STR(out, "2:stop:asha: rung 0 (step 2): -inf not in top 1/2 (cutoff 1);");
    sched_destroy(&m);
    spec_destroy(&sp);
}

/* mode max, min_trials 3, grace 1 on epochs. Running averages at epoch r:
     t1 0.5 0.6 0.7 -> 0.5, 0.55, 0.6     t2 0.4 0.5 0.6 -> 0.4, 0.45, 0.5
     t3 0.3 0.35 0.4 -> 0.3, 0.325, 0.35 (fewer than 3 others before: kept)
   t4 epoch 1 best 0.2 vs median(0.5 0.4 0.3) = 0.4 -> stopped
   t5 epoch 1 0.45 vs median(.5 .4 .3 .2) = 0.35 -> continues
      epoch 2 best 0.45 vs median(.55 .45 .325) = 0.45 -> not worse: continues
      epoch 3 best 0.45 vs median(.6 .5 .35) = 0.5 -> stopped */
static const ev MED_EVS[] = {
    {1, 1, "acc", 0.5, 0}, {1, 1, "epoch", 1, 0},  {1, 2, "acc", 0.6, 0},
    {1, 2, "epoch", 2, 0}, {1, 3, "epoch", 3, 0},  {1, 3, "acc", 0.7, 0},
    {1, 0, NULL, 0.7, 1},  {2, 1, "acc", 0.4, 0},  {2, 1, "epoch", 1, 0},
    {3, 1, "acc", 0.3, 0}, {3, 1, "epoch", 1, 0},  {2, 2, "acc", 0.5, 0},
    {2, 2, "epoch", 2, 0}, {3, 2, "acc", 0.35, 0}, {3, 2, "epoch", 2, 0},
    {2, 3, "acc", 0.6, 0}, {2, 3, "epoch", 3, 0},  {3, 3, "acc", 0.4, 0},
    {3, 3, "epoch", 3, 0}, {4, 1, "acc", 0.2, 0},  {4, 1, "epoch", 1, 0},
    {4, 2, "acc", 0.9, 0}, {4, 2, "epoch", 2, 0},  {5, 1, "acc", 0.45, 0},
    {5, 1, "epoch", 1, 0}, {5, 2, "acc", 0.4, 0},  {5, 2, "epoch", 2, 0},
    {5, 3, "epoch", 3, 0}, {5, 3, "acc", 0.41, 0},
};
static const char *MED_STOPS =
    "4:stop:median: epoch 1: best 0.2 worse than median 0.4 of 3 trials;"
    "5:stop:median: epoch 3: best 0.45 worse than median 0.5 of 3 trials;";

TEST(median_rule_stops_exactly_the_trials_the_rule_says)
{
    spec_t *sp = s_spec("max", "{\"type\":\"median\",\"grace\":1,\"min_trials\":3}");
    REQUIRE(sp);
    int n = (int)(sizeof MED_EVS / sizeof MED_EVS[0]);
    s_same_at_every_cut(sp, MED_EVS, n, -1, MED_STOPS);
    spec_destroy(&sp);
}

TEST(median_grace_and_min_trials)
{
    /* grace 2: nothing is judged at epoch 1; min_trials 1 otherwise */
    spec_t *sp = s_spec("max", "{\"type\":\"median\",\"grace\":2,\"min_trials\":1}");
    REQUIRE(sp);
    static const ev evs[] = {
        {1, 1, "acc", 0.9, 0}, {1, 1, "epoch", 1, 0}, {1, 2, "acc", 0.9, 0},
        {1, 2, "epoch", 2, 0}, {2, 1, "acc", 0.1, 0}, {2, 1, "epoch", 1, 0},
        {2, 2, "acc", 0.2, 0}, {2, 2, "epoch", 2, 0},
    };
    char out[2048];
    sched_t *m = s_play(sp, evs, 8, -1, out, sizeof out);
    CHECK_STR(out, "2:stop:median: epoch 2: best 0.2 worse than median 0.9 of 1 trials;");
    sched_destroy(&m);
    spec_destroy(&sp);
}

/* A retried trial reports from step 1 again: the median rule judges the
   new attempt's curve, not the failed one's best (0.95). */
TEST(median_forgets_a_failed_attempt)
{
    spec_t *sp = s_spec("max", "{\"type\":\"median\",\"grace\":1,\"min_trials\":1}");
    REQUIRE(sp);
    static const ev evs[] = {
        {1, 10, "acc", 0.9, 0},  {1, 10, "epoch", 1, 0}, {1, 0, NULL, 0.9, 1},
        {2, 10, "acc", 0.95, 0}, {2, 10, "epoch", 1, 0}, {2, 20, "acc", 0.5, 0},
        {2, 10, "acc", 0.1, 0},  {2, 10, "epoch", 1, 0},
    };
    char out[1024];
    for (int cut = -1; cut < 8; cut++) {
        sched_t *m = s_play(sp, evs, 8, cut, out, sizeof out);
        CHECK_STR(out,
                  "2:stop:median: epoch 1: best 0.1 worse than median 0.9 of 1 trials;");
        sched_destroy(&m);
    }
    spec_destroy(&sp);
}

TEST(hyperband_options_are_checked)
{
    static const struct {
        const char *es, *msg;
    } bad[] = {
        {"{\"type\":\"hyperband\",\"grace\":1}",
         "early_stopping.max_resource: required for hyperband (the resource a full trial "
         "gets, e.g. its number of epochs)"},
        {"{\"type\":\"hyperband\",\"max_resource\":1e9,\"reduction\":2}",
         "early_stopping.max_resource: 1e+09 over grace 1 gives more than 16 brackets at "
         "reduction 2; raise grace or reduction"},
        {"{\"type\":\"hyperband\",\"max_resource\":9,\"min_trials\":2}",
         "early_stopping.min_trials: unknown option for hyperband"},
        {"{\"type\":\"hyperband\",\"max_resource\":9,\"reduction\":1}",
         "early_stopping.reduction: must be > 1"},
        {"{\"type\":\"hyperband\",\"max_resource\":0.5}",
         "early_stopping.max_resource: must be >= grace (1)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spec_t *sp = s_spec("max", bad[i].es);
        REQUIRE(sp);
        char err[256] = "";
        CHECK(sched_check(sp, err, sizeof err) == -1);
        CHECK_STR(err, bad[i].msg);
        spec_destroy(&sp);
    }
}

/* The bracket of each trial, from the saved state (-1 when unknown). */
static int s_bracket_of(sched_t *m, long trial)
{
    json_t *st = m->ops->save(m);
    int b = -1;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(st, "trials"), i, t)
    {
        if (json_integer_value(json_object_get(t, "id")) == trial)
            b = (int)json_integer_value(json_object_get(t, "bracket"));
    }
    json_decref(st);
    return b;
}

/* R 9, grace 1, eta 3: brackets 0 (rungs 1, 3), 1 (rung 3), 2 (none), with
   Hyperband's counts 9, 5, 3, assigned in turn 0 1 0 2 0 1 0 2 0 ... */
TEST(hyperband_assigns_brackets_in_proportion_and_in_turn)
{
    spec_t *sp =
        s_spec("max", "{\"type\":\"hyperband\",\"max_resource\":9,\"reduction\":3}");
    REQUIRE(sp);
    char err[256];
    sched_t *m = s_monitor(sp, err, sizeof err);
    REQUIRE(m);
    CHECK_STR(m->ops->name, "hyperband");
    int count[3] = {0, 0, 0};
    char seq[64] = "";
    for (long t = 1; t <= 34; t++) {
        sched_instr ins[8];
        int k = m->ops->on_metric(m, t, 1, "acc", 0.5, 0, ins, 8);
        for (int j = 0; j < k; j++)
            sched_instr_fini(&ins[j]);
        int b = s_bracket_of(m, t);
        REQUIRE(b >= 0 && b < 3);
        count[b]++;
        if (t <= 9)
            seq[t - 1] = (char)('0' + b);
    }
    CHECK_STR(seq, "010201020");
    CHECK(count[0] == 18 && count[1] == 10 && count[2] == 6);
    sched_destroy(&m);
    spec_destroy(&sp);
}

/* Brackets as above; trials 1..8 go to brackets 0 1 0 2 0 1 0 2.
   Bracket 0, rung 0 (epoch 1): t1 0.5 first; t3 0.4 vs [0.5] -> cutoff 0.5,
   stopped; t5 0.6 vs [0.4 0.5] -> 0.4667 continues; t7 0.45 vs [.4 .5 .6]
   -> 0.5333 stopped. Rung 1 (epoch 3): t1 0.7 first; t5 0.65 vs [0.7]
   stopped. Bracket 1 is not judged at epoch 1 (ASHA alone would stop t2
   at 0.1); at its rung (epoch 3) t2 0.3 first, t6 0.25 stopped. Bracket 2
   has no rung below 9: t4 and t8 run to the end however bad. */
static const ev HB_EVS[] = {
    {1, 1, "acc", 0.5, 0},  {1, 1, "epoch", 1, 0},  {2, 1, "epoch", 1, 0},
    {2, 1, "acc", 0.1, 0},  {3, 1, "acc", 0.4, 0},  {3, 1, "epoch", 1, 0},
    {4, 1, "acc", 0.05, 0}, {4, 1, "epoch", 1, 0},  {5, 1, "acc", 0.6, 0},
    {5, 1, "epoch", 1, 0},  {6, 1, "acc", 0.2, 0},  {6, 1, "epoch", 1, 0},
    {7, 1, "acc", 0.45, 0}, {7, 1, "epoch", 1, 0},  {8, 1, "acc", 0.01, 0},
    {8, 1, "epoch", 1, 0},  {1, 3, "acc", 0.7, 0},  {1, 3, "epoch", 3, 0},
    {2, 3, "acc", 0.3, 0},  {2, 3, "epoch", 3, 0},  {5, 3, "epoch", 3, 0},
    {5, 3, "acc", 0.65, 0}, {6, 3, "acc", 0.25, 0}, {6, 3, "epoch", 3, 0},
    {4, 3, "acc", 0.02, 0}, {4, 3, "epoch", 3, 0},  {8, 3, "acc", 0.01, 0},
    {8, 3, "epoch", 3, 0},  {4, 9, "acc", 0.03, 0}, {4, 9, "epoch", 9, 0},
    {4, 0, NULL, 0.03, 1},
};
static const char *HB_STOPS =
    "3:stop:hyperband: bracket 0 rung 0 (epoch 1): 0.4 not in top 1/3 (cutoff 0.5);"
    "7:stop:hyperband: bracket 0 rung 0 (epoch 1): 0.45 not in top 1/3 (cutoff 0.5333);"
    "5:stop:hyperband: bracket 0 rung 1 (epoch 3): 0.65 not in top 1/3 (cutoff 0.7);"
    "6:stop:hyperband: bracket 1 rung 0 (epoch 3): 0.25 not in top 1/3 (cutoff 0.3);";

TEST(hyperband_stops_by_the_rule_of_each_bracket_across_restores)
{
    spec_t *sp = s_spec("max", "{\"type\":\"hyperband\",\"resource\":\"epoch\","
                               "\"max_resource\":9,\"grace\":1,\"reduction\":3}");
    REQUIRE(sp);
    int n = (int)(sizeof HB_EVS / sizeof HB_EVS[0]);
    s_same_at_every_cut(sp, HB_EVS, n, -1, HB_STOPS);
    /* an asha state is refused, and so is a bracket out of range */
    char err[256];
    sched_t *m = s_monitor(sp, err, sizeof err);
    REQUIRE(m);
    json_t *bad = json_pack("{s:s, s:[], s:[]}", "rule", "asha", "trials", "rungs");
    CHECK(m->ops->restore(m, bad) == -1);
    json_decref(bad);
    bad = json_pack("{s:s, s:[{s:i, s:i}], s:[[],[],[]], s:[i,i,i]}", "rule", "hyperband",
                    "trials", "id", 1, "bracket", 7, "brackets", "credit", 0, 0, 0);
    CHECK(m->ops->restore(m, bad) == -1);
    json_decref(bad);
    sched_destroy(&m);
    spec_destroy(&sp);
}

int main(void)
{
    RUN(options_are_checked);
    RUN(asha_stops_exactly_the_trials_the_rule_says);
    RUN(asha_save_restore_at_every_point_gives_the_same_decisions);
    RUN(asha_mode_min_step_resource_and_max_resource);
    RUN(asha_stops_a_diverged_report_in_either_direction);
    RUN(hyperband_options_are_checked);
    RUN(hyperband_assigns_brackets_in_proportion_and_in_turn);
    RUN(hyperband_stops_by_the_rule_of_each_bracket_across_restores);
    RUN(median_rule_stops_exactly_the_trials_the_rule_says);
    RUN(median_grace_and_min_trials);
    RUN(median_forgets_a_failed_attempt);
    TEST_DONE();
}
