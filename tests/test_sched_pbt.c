/*  test_sched_pbt.c - the pbt scheduler (schedulers/sched_pbt.c and
    sched_pbt_pb2.c) through sched_ops, with scripted sequences of
    on_metric / on_checkpoint / on_complete calls:

    option refusals; the initial population (legal, reproducible, DONE
    after budget.trials); exploit only from the top quantile and only by
    the bottom quantile; a checkpoint asked of the donor unless it has a
    recent one, and `load` {path, params, from} when it arrives; explore
    (×0.8/×1.2 clamped, ints move, choices to a neighbour, all legal);
    trial ids matched to suggestions; reproducibility for a seed;
    save/restore mid-run giving the same decisions; interval_s; expiry of
    an unanswered checkpoint request; pb2 picking the maximiser of a known
    improvement function.
*/
#include "jz_test.h"
#include "sched_testlib.h"
#include "schedulers/sched_pbt.h"

static spec_t *s_spec(const char *sched, const char *space, int trials, int parallel)
{
    char budget[64];
    snprintf(budget, sizeof budget, "{\"trials\":%d,\"parallel\":%d}", trials, parallel);
    return stl_spec("score", "max", sched, budget, space);
}

static const char *SPACE =
    "{\"lr\":{\"type\":\"float\",\"low\":1e-4,\"high\":1,\"log\":true},"
    "\"m\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
    "\"bs\":{\"type\":\"int\",\"low\":8,\"high\":512,\"log\":true},"
    "\"k\":{\"type\":\"int\",\"low\":1,\"high\":4},"
    "\"opt\":{\"type\":\"choice\",\"values\":[\"sgd\",\"adam\",3]}}";

/* ---- a scripted driver ---------------------------------------------------- */

typedef struct {
    spec_t *spec;
    sched_t *s;
    json_t *log;    /* every instruction, as {trial, kind, args, reason} */
    json_t *params; /* suggestion number -> params */
} drv;

static const char *s_space = NULL; /* SPACE unless a test sets another */

static int s_drv_init(drv *d, const char *sched, int n)
{
    memset(d, 0, sizeof *d);
    d->spec = s_spec(sched, s_space ? s_space : SPACE, n, n);
    if (!d->spec)
        return -1;
    char err[256] = "";
    d->s = sched_new(d->spec, err, sizeof err);
    if (!d->s) {
        printf("sched_new: %s\n", err);
        return -1;
    }
    d->log = json_array();
    d->params = json_array();
    return 0;
}

static void s_drv_fini(drv *d)
{
    sched_destroy(&d->s);
    spec_destroy(&d->spec);
    json_decref(d->log);
    json_decref(d->params);
}

static void s_collect(drv *d, sched_instr *ins, int k)
{
    for (int i = 0; i < k; i++) {
        json_array_append_new(d->log, json_pack("{s:I, s:s, s:O?, s:s}", "trial",
                                                (json_int_t)ins[i].trial, "kind",
                                                ins_kind_name(ins[i].kind), "args",
                                                ins[i].args, "reason", ins[i].reason));
        sched_instr_fini(&ins[i]);
    }
}

static int s_report(drv *d, long id, long step, double value, double now)
{
    sched_instr ins[8];
    int k = d->s->ops->on_metric(d->s, id, step, "score", value, now, ins, 8);
    s_collect(d, ins, k);
    return k;
}

static int s_ckpt(drv *d, long id, long step, double now)
{
    char path[64];
    snprintf(path, sizeof path, "/ck/%ld/%ld", id, step);
    sched_instr ins[8];
    int k = d->s->ops->on_checkpoint(d->s, id, step, path, now, ins, 8);
    s_collect(d, ins, k);
    return k;
}

/* Suggestions for trials first_id, first_id + 1, ... (the controller
   passes each new trial's id; the scripted world's trials are 100 + i). */
static int s_suggest_from(drv *d, int n, long first_id)
{
    for (int i = 0; i < n; i++) {
        json_t *p = NULL;
        if (d->s->ops->suggest(d->s, first_id + i, &p) != SCHED_OK)
            return i;
        json_array_append_new(d->params, p);
    }
    return n;
}

static int s_suggest_all(drv *d, int n)
{
    return s_suggest_from(d, n, 0);
}

static int s_legal(const spec_t *spec, const json_t *params)
{
    for (size_t i = 0; i < spec->nparams; i++)
        if (!spec_param_legal(&spec->params[i],
                              json_object_get(params, spec->params[i].name)))
            return 0;
    return 1;
}

/* ---- options ---------------------------------------------------------- */

TEST(option_refusals)
{
    struct {
        const char *sched, *want;
    } cases[] = {
        {"{\"type\":\"pbt\"}", "scheduler.interval: give exactly one of interval"},
        {"{\"type\":\"pbt\",\"interval\":5,\"interval_s\":3}",
         "scheduler.interval: give exactly one"},
        {"{\"type\":\"pbt\",\"interval\":2.5}", "scheduler.interval: must be an integer"},
        {"{\"type\":\"pbt\",\"interval\":0}",
         "scheduler.interval: must be a number from 1"},
        {"{\"type\":\"pbt\",\"interval\":5,\"quantile\":0.6}",
         "scheduler.quantile: must be a number"},
        {"{\"type\":\"pbt\",\"interval\":5,\"resample_p\":2}",
         "scheduler.resample_p: must be"},
        {"{\"type\":\"pbt\",\"interval\":5,\"perturb\":[1.2,0.8]}",
         "scheduler.perturb: must be [down, up]"},
        {"{\"type\":\"pbt\",\"interval\":5,\"perturb\":[0.8]}",
         "scheduler.perturb: must be [down, up]"},
        {"{\"type\":\"pbt\",\"interval\":5,\"pb2\":1}",
         "scheduler.pb2: must be true or false"},
        {"{\"type\":\"pbt\",\"interval\":5,\"window\":2}", "scheduler.window: must be"},
        {"{\"type\":\"pbt\",\"interval\":5,\"nope\":2}",
         "scheduler.nope: unknown option for the pbt scheduler"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spec_t *sp = s_spec(cases[i].sched, SPACE, 4, 4);
        REQUIRE(sp);
        char err[256] = "";
        sched_t *s = sched_new(sp, err, sizeof err);
        CHECK(s == NULL);
        if (strncmp(err, cases[i].want, strlen(cases[i].want)) != 0)
            JZT_FAIL("case %zu: got \"%s\", want \"%s...\"", i, err, cases[i].want);
        sched_destroy(&s);
        spec_destroy(&sp);
    }
    spec_t *sp =
        s_spec("{\"type\":\"pbt\",\"interval_s\":30,\"pb2\":true,\"quantile\":0.5,"
               "\"perturb\":[0.5,2],\"load_timeout_s\":5}",
               SPACE, 4, 4);
    REQUIRE(sp);
    char err[256] = "";
    CHECK(sched_check(sp, err, sizeof err) == 0);
    spec_destroy(&sp);
}

/* ---- population ------------------------------------------------------- */

TEST(population_then_done)
{
    drv a, b;
    REQUIRE(s_drv_init(&a, "{\"type\":\"pbt\",\"seed\":5,\"interval\":10}", 6) == 0);
    REQUIRE(s_drv_init(&b, "{\"type\":\"pbt\",\"seed\":5,\"interval\":10}", 6) == 0);
    CHECK(s_suggest_all(&a, 10) == 6);
    CHECK(s_suggest_all(&b, 6) == 6);
    CHECK(json_equal(a.params, b.params));
    for (size_t i = 0; i < 6; i++)
        CHECK(s_legal(a.spec, json_array_get(a.params, i)));
    /* the members differ */
    CHECK(!json_equal(json_array_get(a.params, 0), json_array_get(a.params, 1)));
    s_drv_fini(&a);
    s_drv_fini(&b);
}

/* Drives a population of n with ids 100+i through rounds [from, rounds):
   member i's state is a score that grows by 1 per round from i; a load
   copies the donor's score (as a real trial's state would) and every
   donor checkpoints when asked. Each instruction is checked against the
   ranking the scheduler saw (the latest reported values): checkpoint and
   load donors in the top quantile, receivers in the bottom; d->bad counts
   violations. */
typedef struct {
    double score[16]; /* the trials' states */
    double seen[16];  /* the latest reported values */
    int bad;
} s_world;

static int s_rank_ok(const s_world *w, int n, int who, int top, double q)
{
    int cut = (int)floor(n * q);
    if (cut < 1)
        cut = 1;
    int better = 0, worse = 0;
    for (int i = 0; i < n; i++) {
        if (i == who)
            continue;
        better += w->seen[i] > w->seen[who] || (w->seen[i] == w->seen[who] && i < who);
        worse += w->seen[i] < w->seen[who] || (w->seen[i] == w->seen[who] && i > who);
    }
    return top ? better < cut : worse < cut;
}

static void s_apply_log(drv *d, s_world *w, int n, size_t from, long step)
{
    for (size_t j = from; j < json_array_size(d->log); j++) {
        json_t *e = json_array_get(d->log, j);
        const char *kind = json_string_value(json_object_get(e, "kind"));
        int t = (int)json_integer_value(json_object_get(e, "trial")) - 100;
        if (!strcmp(kind, "checkpoint")) {
            if (!s_rank_ok(w, n, t, 1, 0.25))
                w->bad++;
            s_ckpt(d, 100 + t, step, (double)step);
        } else if (!strcmp(kind, "load")) {
            int from_t = (int)json_integer_value(
                             json_object_get(json_object_get(e, "args"), "from")) -
                         100;
            if (!s_rank_ok(w, n, from_t, 1, 0.25))
                w->bad++;
            w->score[t] = w->score[from_t];
            w->seen[t] = w->seen[from_t];
        }
    }
}

/* Trial i reports its score at step; instructions are checked and
   answered at once. */
static void s_world_report(drv *d, s_world *w, int n, int i, long step)
{
    size_t before = json_array_size(d->log);
    /* the ranking the receiver is judged on includes its own value */
    w->seen[i] = w->score[i];
    s_report(d, 100 + i, step, w->score[i], (double)step);
    for (size_t j = before; j < json_array_size(d->log); j++) {
        json_t *e = json_array_get(d->log, j);
        const char *kind = json_string_value(json_object_get(e, "kind"));
        int t = (int)json_integer_value(json_object_get(e, "trial")) - 100;
        if ((!strcmp(kind, "load") || (!strcmp(kind, "checkpoint") && t != i)) &&
            !s_rank_ok(w, n, i, 0, 0.25))
            w->bad++;
    }
    s_apply_log(d, w, n, before, step);
}

static void s_script_w(drv *d, s_world *w, int n, int rounds, int from_round)
{
    for (int r = from_round; r < rounds; r++) {
        long step = 10L * (r + 1);
        for (int i = 0; i < n; i++)
            s_world_report(d, w, n, i, step - 5);
        for (int i = n - 1; i >= 0; i--) {
            w->score[i] += 1;
            s_world_report(d, w, n, i, step);
        }
    }
}

static void s_world_init(s_world *w, int n)
{
    memset(w, 0, sizeof *w);
    for (int i = 0; i < n; i++)
        w->score[i] = i;
}

static void s_script(drv *d, int n, int rounds, int from_round)
{
    s_world w;
    s_world_init(&w, n);
    s_script_w(d, &w, n, rounds, from_round);
}

TEST(exploit_from_top_quantile)
{
    for (int seed = 1; seed <= 20; seed++) {
        char sched[128];
        snprintf(sched, sizeof sched, "{\"type\":\"pbt\",\"seed\":%d,\"interval\":10}",
                 seed);
        drv d;
        REQUIRE(s_drv_init(&d, sched, 8) == 0);
        REQUIRE(s_suggest_from(&d, 8, 100) == 8);
        s_world w;
        s_world_init(&w, 8);
        s_script_w(&d, &w, 8, 4, 0);
        CHECK(w.bad == 0);
        size_t i;
        json_t *e;
        int loads = 0;
        json_array_foreach(d.log, i, e)
        {
            const char *kind = json_string_value(json_object_get(e, "kind"));
            if (!strcmp(kind, "load")) {
                loads++;
                json_t *args = json_object_get(e, "args");
                long from = (long)json_integer_value(json_object_get(args, "from"));
                char want[64];
                /* the path is the donor's checkpoint */
                const char *path = json_string_value(json_object_get(args, "path"));
                snprintf(want, sizeof want, "/ck/%ld/", from);
                CHECK(path && !strncmp(path, want, strlen(want)));
                CHECK(s_legal(d.spec, json_object_get(args, "params")));
                CHECK(from != json_integer_value(json_object_get(e, "trial")));
            } else if (strcmp(kind, "checkpoint")) {
                JZT_FAIL("unexpected instruction %s", kind);
            }
        }
        /* the bottom 2 of 8 exploit at most rounds (the ranking changes
           as receivers take their donors' scores) */
        CHECK(loads >= 4 && loads <= 8);
        s_drv_fini(&d);
    }
}

TEST(recent_checkpoint_loads_at_once)
{
    drv d;
    REQUIRE(s_drv_init(&d, "{\"type\":\"pbt\",\"seed\":3,\"interval\":10}", 4) == 0);
    REQUIRE(s_suggest_from(&d, 4, 10) == 4);
    for (int i = 0; i < 4; i++)
        s_report(&d, 10 + i, 5, i, 1);
    /* the best member (13) checkpointed on its own at step 10, at its
       ready point */
    s_report(&d, 13, 10, 3.5, 2);
    s_ckpt(&d, 13, 10, 2);
    s_report(&d, 12, 10, 2.5, 2);
    s_report(&d, 11, 10, 1.5, 2);
    CHECK(json_array_size(d.log) == 0);
    s_report(&d, 10, 10, 0.5, 2); /* bottom 1 of 4 */
    REQUIRE(json_array_size(d.log) == 1);
    json_t *e = json_array_get(d.log, 0);
    CHECK(!strcmp(json_string_value(json_object_get(e, "kind")), "load"));
    CHECK(json_integer_value(json_object_get(e, "trial")) == 10);
    json_t *args = json_object_get(e, "args");
    CHECK(json_integer_value(json_object_get(args, "from")) == 13);
    CHECK(!strcmp(json_string_value(json_object_get(args, "path")), "/ck/13/10"));
    /* the new params come from the donor (number 3 is id 13) */
    json_t *donor = json_array_get(d.params, 3), *np = json_object_get(args, "params");
    double r = json_real_value(json_object_get(np, "lr")) /
               json_real_value(json_object_get(donor, "lr"));
    /* perturbed (×0.8/×1.2) unless resampled (p = 0.25): seed 3 perturbs */
    double lr = json_real_value(json_object_get(np, "lr")),
           dlr = json_real_value(json_object_get(donor, "lr"));
    CHECK(fabs(r - 0.8) < 1e-9 || fabs(r - 1.2) < 1e-9 || lr == 1.0 || lr == 1e-4);
    CHECK(lr != 1e-4 || dlr * 0.8 < 1e-4);
    /* the receiver waits out its next interval: no decision at step 12 */
    s_report(&d, 10, 12, 3.6, 3);
    CHECK(json_array_size(d.log) == 1);
    s_drv_fini(&d);
}

/* ---- explore ---------------------------------------------------------- */

TEST(explore_rules)
{
    /* resample_p 0: every param is perturbed */
    drv d;
    REQUIRE(s_drv_init(&d,
                       "{\"type\":\"pbt\",\"seed\":9,\"interval\":1,\"resample_p\":0}",
                       2) == 0);
    REQUIRE(s_suggest_all(&d, 2) == 2);
    json_t *donor = json_pack("{s:f, s:f, s:i, s:i, s:s}", "lr", 1.0, "m", -0.9, "bs", 8,
                              "k", 1, "opt", "adam");
    int saw[3] = {0, 0, 0}, lr_down = 0, m_moved = 0;
    s_report(&d, 0, 0, 0, 0);
    s_report(&d, 1, 0, 0, 0);
    for (int round = 0; round < 200; round++) {
        /* fresh scheduler state each time is not needed: every load
           rewrites the receiver; make trial 1 the donor with fixed params
           by completing nothing and restoring its params via save/restore */
        json_t *st = d.s->ops->save(d.s);
        json_t *ms = json_object_get(st, "members");
        size_t i;
        json_t *m;
        json_array_foreach(ms, i, m) if (json_integer_value(json_object_get(m, "id")) ==
                                         1) json_object_set(m, "params", donor);
        REQUIRE(d.s->ops->restore(d.s, st) == 0);
        json_decref(st);
        size_t before = json_array_size(d.log);
        s_report(&d, 1, 2 * round + 1, 10 + round, round);
        s_ckpt(&d, 1, 2 * round + 1, round);
        s_report(&d, 0, 2 * round + 1, 0, round);
        if (json_array_size(d.log) != before + 1) {
            JZT_FAIL("round %d: no load", round);
            break;
        }
        json_t *np = json_object_get(
            json_object_get(json_array_get(d.log, before), "args"), "params");
        CHECK(s_legal(d.spec, np));
        double lr = json_real_value(json_object_get(np, "lr"));
        CHECK(fabs(lr - 0.8) < 1e-12 || lr == 1.0); /* ×1.2 is clamped to the bound */
        lr_down += fabs(lr - 0.8) < 1e-12;
        /* m ranges over negatives: moves by ±0.2 of the range / 2 */
        double mv = json_real_value(json_object_get(np, "m"));
        CHECK(fabs(mv - (-1.0)) < 1e-12 || fabs(mv - (-0.9 + 0.2)) < 1e-12);
        m_moved += fabs(mv - (-0.7)) < 1e-12;
        /* int at the bottom of its range moves up by at least one or
           stays at the bound */
        json_int_t bs = json_integer_value(json_object_get(np, "bs"));
        CHECK(bs == 8 || bs == 10);
        json_int_t k = json_integer_value(json_object_get(np, "k"));
        CHECK(k == 1 || k == 2);
        /* choice: a neighbour of "adam" */
        json_t *opt = json_object_get(np, "opt");
        if (json_is_string(opt) && !strcmp(json_string_value(opt), "sgd"))
            saw[0]++;
        else if (json_is_integer(opt) && json_integer_value(opt) == 3)
            saw[2]++;
        else
            saw[1]++;
    }
    CHECK(saw[1] == 0);
    CHECK(saw[0] > 50 && saw[2] > 50);
    CHECK(lr_down > 50 && lr_down < 150);
    CHECK(m_moved > 50);
    json_decref(donor);
    s_drv_fini(&d);
}

/* Checks every load in d's log: its params legal (s_legal) and, when
   `why` is not NULL, its reason naming it. Returns how many loads. */
static int s_legal_loads(const drv *d, const char *why)
{
    size_t i;
    json_t *e;
    int loads = 0;
    json_array_foreach(d->log, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "kind")), "load"))
            continue;
        loads++;
        CHECK(s_legal(d->spec, json_object_get(json_object_get(e, "args"), "params")));
        if (why)
            CHECK(strstr(json_string_value(json_object_get(e, "reason")), why) != NULL);
    }
    return loads;
}

TEST(resample_stays_legal)
{
    drv d;
    REQUIRE(s_drv_init(&d,
                       "{\"type\":\"pbt\",\"seed\":2,\"interval\":5,\"resample_p\":1}",
                       4) == 0);
    REQUIRE(s_suggest_from(&d, 4, 100) == 4);
    s_script(&d, 4, 10, 0);
    CHECK(s_legal_loads(&d, NULL) >= 10);
    s_drv_fini(&d);
}

/* A conditional space: every suggestion and every load carries exactly
   the active parameters (spec_params_check), and a load that turns the
   parent to the other branch drops the old child and draws the new one. */
TEST(conditional_space_perturbs_active_params_only)
{
    s_space = "{\"lr\":{\"type\":\"float\",\"low\":1e-4,\"high\":1,\"log\":true},"
              "\"opt\":{\"type\":\"choice\",\"values\":[\"sgd\",\"adam\"]},"
              "\"mom\":{\"type\":\"float\",\"low\":0,\"high\":0.9,"
              "\"when\":{\"opt\":[\"sgd\"]}},"
              "\"beta\":{\"type\":\"float\",\"low\":0.9,\"high\":0.999,"
              "\"when\":{\"opt\":[\"adam\"]}}}";
    drv d;
    int ok =
        s_drv_init(&d, "{\"type\":\"pbt\",\"seed\":5,\"interval\":5,\"resample_p\":0.5}",
                   6) == 0;
    s_space = NULL;
    REQUIRE(ok);
    REQUIRE(s_suggest_from(&d, 6, 100) == 6);
    spec_error err;
    for (size_t i = 0; i < json_array_size(d.params); i++) {
        json_t *c = json_deep_copy(json_array_get(d.params, i));
        CHECK(spec_params_check(d.spec, c, &err) == 0);
        json_decref(c);
    }
    s_script(&d, 6, 12, 0);
    size_t i;
    json_t *e;
    int loads = 0, bad = 0, switched = 0;
    json_array_foreach(d.log, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "kind")), "load"))
            continue;
        loads++;
        json_t *p = json_deep_copy(json_object_get(json_object_get(e, "args"), "params"));
        if (spec_params_check(d.spec, p, &err) != 0) {
            char b[300];
            printf("load params: %s\n", spec_strerror(&err, b, sizeof b));
            bad++;
        }
        json_decref(p);
    }
    /* a perturbed choice moves to its neighbour now and then: count loads
       whose branch differs from the donor's suggestion */
    json_array_foreach(d.log, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "kind")), "load"))
            continue;
        json_t *args = json_object_get(e, "args");
        long from = (long)json_integer_value(json_object_get(args, "from"));
        json_t *donor = from >= 100 && from < 106
                            ? json_array_get(d.params, (size_t)(from - 100))
                            : NULL;
        const char *a =
            json_string_value(json_object_get(json_object_get(args, "params"), "opt"));
        const char *b = json_string_value(json_object_get(donor, "opt"));
        switched += a && b && strcmp(a, b) != 0;
    }
    CHECK(loads >= 6);
    CHECK(bad == 0);
    CHECK(switched >= 1);
    s_drv_fini(&d);
}

/* ---- ids, reproducibility, save/restore --------------------------------- */

/* Each suggestion is the member of the trial id suggest() was given; a
   trial the scheduler never suggested joins with no number, and its params
   come with on_complete. */
TEST(members_are_the_suggested_trials)
{
    drv d;
    REQUIRE(s_drv_init(&d,
                       "{\"type\":\"pbt\",\"seed\":4,\"interval\":10,\"resample_p\":0}",
                       4) == 0);
    REQUIRE(s_suggest_from(&d, 4, 41) == 4);
    /* ids 41..44 (numbers 0..3) first heard out of order, and 99 unknown */
    s_report(&d, 43, 1, 0, 0);
    s_report(&d, 41, 1, 0, 0);
    s_report(&d, 99, 1, 0, 0);
    s_report(&d, 44, 1, 0, 0);
    s_report(&d, 42, 1, 0, 0);
    json_t *p99 = json_pack("{s:f}", "x", 0.5);
    d.s->ops->on_complete(d.s, 99, p99, SCHED_COMPLETED, 1.0);
    json_t *st = d.s->ops->save(d.s);
    size_t i;
    json_t *m;
    int seen = 0;
    json_array_foreach(json_object_get(st, "members"), i, m)
    {
        long id = (long)json_integer_value(json_object_get(m, "id"));
        if (id == 99) {
            CHECK(json_integer_value(json_object_get(m, "num")) == -1);
            CHECK(json_equal(json_object_get(m, "params"), p99));
            seen++;
            continue;
        }
        REQUIRE(id >= 41 && id <= 44);
        CHECK(json_integer_value(json_object_get(m, "num")) == id - 41);
        CHECK(json_equal(json_object_get(m, "params"),
                         json_array_get(d.params, (size_t)(id - 41))));
        seen++;
    }
    CHECK(seen == 5);
    CHECK(json_object_get(st, "suggestions") == NULL);
    /* a state saved by the older version (with "suggestions") restores */
    json_object_set_new(st, "suggestions", json_array());
    char err[256];
    sched_t *s2 = sched_new(d.spec, err, sizeof err);
    REQUIRE(s2);
    CHECK(s2->ops->restore(s2, st) == 0);
    sched_destroy(&s2);
    json_decref(p99);
    json_decref(st);
    s_drv_fini(&d);
}

static char *s_run_dump(const char *sched, int stop_at, int rounds)
{
    drv d;
    if (s_drv_init(&d, sched, 6) != 0)
        return NULL;
    s_suggest_from(&d, 6, 100);
    s_world w;
    s_world_init(&w, 6);
    s_script_w(&d, &w, 6, stop_at, 0);
    if (stop_at < rounds) {
        /* a controller restart: a new scheduler restored from the state */
        char *text = stl_stop(&d.s);
        char err[256];
        d.s = stl_resume(sched_new(d.spec, err, sizeof err), text);
        if (!d.s) {
            s_drv_fini(&d);
            return NULL;
        }
        s_script_w(&d, &w, 6, rounds, stop_at);
    }
    char *out = json_dumps(d.log, JSON_COMPACT | JSON_SORT_KEYS);
    s_drv_fini(&d);
    return out;
}

TEST(reproducible_and_restorable)
{
    const char *kinds[] = {"{\"type\":\"pbt\",\"seed\":11,\"interval\":10}",
                           "{\"type\":\"pbt\",\"seed\":11,\"interval\":10,\"pb2\":true}"};
    for (int k = 0; k < 2; k++) {
        char *a = s_run_dump(kinds[k], 8, 8);
        char *b = s_run_dump(kinds[k], 8, 8);
        char *c = s_run_dump(kinds[k], 3, 8);
        char *e = s_run_dump(kinds[k], 5, 8);
        REQUIRE(a && b && c && e);
        CHECK(strlen(a) > 100);
        CHECK(!strcmp(a, b));
        if (strcmp(a, c))
            JZT_FAIL("%s: restored at round 3 differs", kinds[k]);
        if (strcmp(a, e))
            JZT_FAIL("%s: restored at round 5 differs", kinds[k]);
        free(a);
        free(b);
        free(c);
        free(e);
    }
    char *x = s_run_dump("{\"type\":\"pbt\",\"seed\":11,\"interval\":10}", 8, 8);
    char *y = s_run_dump("{\"type\":\"pbt\",\"seed\":12,\"interval\":10}", 8, 8);
    CHECK(x && y && strcmp(x, y) != 0);
    free(x);
    free(y);
}

/* ---- time intervals and expiry ------------------------------------------ */

TEST(interval_seconds_and_expiry)
{
    drv d;
    REQUIRE(s_drv_init(
                &d,
                "{\"type\":\"pbt\",\"seed\":1,\"interval_s\":30,\"load_timeout_s\":20}",
                4) == 0);
    REQUIRE(s_suggest_all(&d, 4) == 4);
    for (int i = 0; i < 4; i++)
        s_report(&d, i, 100, i, 0); /* the clock starts at the first report */
    for (int i = 0; i < 4; i++)
        s_report(&d, i, 200, i, 29);
    CHECK(json_array_size(d.log) == 0);
    s_report(&d, 3, 300, 3, 31);
    s_report(&d, 2, 300, 2, 31);
    s_report(&d, 1, 300, 1, 31);
    s_report(&d, 0, 300, 0, 31);
    REQUIRE(json_array_size(d.log) == 1);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(d.log, 0), "kind")),
                  "checkpoint"));
    CHECK(json_integer_value(json_object_get(json_array_get(d.log, 0), "trial")) == 3);
    /* the donor never answers: after load_timeout_s the receiver is free
       again and asks anew at its next ready point */
    s_report(&d, 0, 400, 0, 45);
    CHECK(json_array_size(d.log) == 1);
    s_report(&d, 0, 500, 0, 62);
    CHECK(json_array_size(d.log) == 2);
    /* a late checkpoint from the donor now resolves the new request */
    s_ckpt(&d, 3, 300, 63);
    REQUIRE(json_array_size(d.log) == 3);
    json_t *e = json_array_get(d.log, 2);
    CHECK(!strcmp(json_string_value(json_object_get(e, "kind")), "load"));
    CHECK(json_integer_value(json_object_get(e, "trial")) == 0);
    s_drv_fini(&d);
}

TEST(ended_members_are_not_donors)
{
    drv d;
    REQUIRE(s_drv_init(&d, "{\"type\":\"pbt\",\"seed\":1,\"interval\":10}", 4) == 0);
    REQUIRE(s_suggest_all(&d, 4) == 4);
    for (int i = 0; i < 4; i++)
        s_report(&d, i, 5, i, 0);
    d.s->ops->on_complete(d.s, 3, json_array_get(d.params, 3), SCHED_COMPLETED, 3);
    s_report(&d, 2, 10, 2, 1);
    s_report(&d, 1, 10, 1, 1);
    s_report(&d, 0, 10, 0, 1);
    REQUIRE(json_array_size(d.log) == 1);
    /* 3 members left: the donor is the best live one */
    CHECK(json_integer_value(json_object_get(json_array_get(d.log, 0), "trial")) == 2);
    s_drv_fini(&d);
}

/* A member whose objective diverges (inf in mode max, or nan) ranks worst
   and is exploited: it asks the best member's checkpoint (issue 36 item
   8). Before, a non-finite member was left out of the ranking and trained
   on forever. */
TEST(a_diverged_member_is_exploited)
{
    const double diverged[] = {INFINITY, NAN, -INFINITY};
    for (size_t c = 0; c < sizeof diverged / sizeof diverged[0]; c++) {
        drv d;
        REQUIRE(s_drv_init(&d, "{\"type\":\"pbt\",\"seed\":1,\"interval\":10}", 4) == 0);
        REQUIRE(s_suggest_all(&d, 4) == 4);
        for (int i = 0; i < 4; i++)
            s_report(&d, i, 5, i + 1, 0);
        CHECK(json_array_size(d.log) == 0);
        s_report(&d, 0, 10, diverged[c], 1);
        REQUIRE(json_array_size(d.log) == 1);
        json_t *e = json_array_get(d.log, 0);
        CHECK(json_integer_value(json_object_get(e, "trial")) == 3); /* the best */
        CHECK_STR(json_string_value(json_object_get(e, "kind")), "checkpoint");
        s_drv_fini(&d);
    }
}

/* ---- pb2 -------------------------------------------------------------- */

TEST(pb2_finds_the_best_region)
{
    spec_t *sp = s_spec("{\"type\":\"pbt\",\"interval\":5,\"pb2\":true}",
                        "{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1}}", 4, 4);
    REQUIRE(sp);
    /* improvement peaks at x = 0.3, whatever the time */
    pbt_obs obs[24];
    double xs[24];
    for (int i = 0; i < 24; i++) {
        xs[i] = (double)((i * 7) % 24) / 23.0;
        obs[i].x = &xs[i];
        obs[i].step = 10.0 * (i / 4 + 1);
        obs[i].y = -(xs[i] - 0.3) * (xs[i] - 0.3) + 0.01 * (i % 3);
    }
    json_t *p = sched__pb2_select(sp, obs, 24, 60, 0.5, 1);
    REQUIRE(p);
    double x = json_real_value(json_object_get(p, "x"));
    CHECK_NEAR(x, 0.3, 0.12);
    json_decref(p);
    /* too few points: no answer (the caller perturbs) */
    CHECK(sched__pb2_select(sp, obs, 3, 60, 0.5, 1) == NULL);
    spec_destroy(&sp);
}

TEST(pb2_loads_legal_params)
{
    drv d;
    REQUIRE(s_drv_init(&d, "{\"type\":\"pbt\",\"seed\":2,\"interval\":10,\"pb2\":true}",
                       6) == 0);
    REQUIRE(s_suggest_from(&d, 6, 100) == 6);
    s_script(&d, 6, 8, 0);
    CHECK(s_legal_loads(&d, "pbt/pb2") >= 4);
    /* improvements were recorded for the GP */
    json_t *st = d.s->ops->save(d.s);
    CHECK(json_array_size(json_object_get(st, "pb2")) >= 20);
    json_decref(st);
    s_drv_fini(&d);
}

int main(void)
{
    RUN(option_refusals);
    RUN(population_then_done);
    RUN(exploit_from_top_quantile);
    RUN(recent_checkpoint_loads_at_once);
    RUN(explore_rules);
    RUN(resample_stays_legal);
    RUN(conditional_space_perturbs_active_params_only);
    RUN(members_are_the_suggested_trials);
    RUN(reproducible_and_restorable);
    RUN(interval_seconds_and_expiry);
    RUN(ended_members_are_not_donors);
    RUN(a_diverged_member_is_exploited);
    RUN(pb2_finds_the_best_region);
    RUN(pb2_loads_legal_params);
    TEST_DONE();
}
