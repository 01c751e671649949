/*  test_sched_guard.c - the divergence guard (schedulers/sched_guard.c),
    built by sched_monitors_new from the spec's "guard" object and driven
    with scripted on_metric / on_checkpoint calls: option refusals; a
    planted spike and a NaN each roll back to the last checkpoint with the
    lr halved; reports from before the rollback are ignored; after
    max_rollbacks the trial is stopped as diverged; no checkpoint means a
    stop; checkpoints taken while unhealthy are not used; checkpoint_every
    asks for checkpoints; save/restore continues with the same decisions.
*/
#include "jz_test.h"
#include "sched_testlib.h"

static spec_t *s_spec(const char *guard)
{
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"name\":\"t\",\"objective\":{\"metric\":\"val_acc\",\"mode\":\"max\"},"
             "\"scheduler\":{\"type\":\"random\"},\"budget\":{\"trials\":4},%s%s%s"
             "\"space\":{\"lr\":{\"type\":\"float\",\"low\":0.001,\"high\":1}},"
             "\"trial\":{\"command\":[\"true\"]}}",
             guard ? "\"guard\":" : "", guard ? guard : "", guard ? "," : "");
    return stl_parse(buf);
}

static sched_t *s_guard(spec_t *sp, char *err, size_t errsize)
{
    sched_t *mon[4];
    int n = sched_monitors_new(sp, mon, 4, err, errsize);
    if (n != 1) {
        for (int i = 0; i < n; i++)
            sched_destroy(&mon[i]);
        return NULL;
    }
    return mon[0];
}

typedef struct {
    sched_instr ins[8];
    int k;
} s_out;

static void s_out_fini(s_out *o)
{
    for (int i = 0; i < o->k; i++)
        sched_instr_fini(&o->ins[i]);
    o->k = 0;
}

static int s_loss(sched_t *g, long trial, long step, double v, s_out *o)
{
    s_out_fini(o);
    o->k = g->ops->on_metric(g, trial, step, "train_loss", v, (double)step, o->ins, 8);
    return o->k;
}

static void s_lr(sched_t *g, long trial, long step, double v)
{
    sched_instr ins[8];
    int k = g->ops->on_metric(g, trial, step, "lr", v, (double)step, ins, 8);
    for (int i = 0; i < k; i++)
        sched_instr_fini(&ins[i]);
}

static void s_ckpt(sched_t *g, long trial, long step)
{
    char path[64];
    snprintf(path, sizeof path, "/ck/%ld/%ld", trial, step);
    sched_instr ins[8];
    int k = g->ops->on_checkpoint(g, trial, step, path, (double)step, ins, 8);
    for (int i = 0; i < k; i++)
        sched_instr_fini(&ins[i]);
}

static double s_load_lr(const sched_instr *in)
{
    return json_real_value(json_object_get(json_object_get(in->args, "params"), "lr"));
}

TEST(option_refusals)
{
    struct {
        const char *guard, *want;
    } cases[] = {
        {"{\"foo\":1}", "guard.foo: unknown option"},
        {"{\"jump\":1}", "guard.jump: must be a number from"},
        {"{\"max_rollbacks\":-1}", "guard.max_rollbacks: must be an integer from 0"},
        {"{\"max_rollbacks\":1.5}", "guard.max_rollbacks: must be an integer"},
        {"{\"lr_factor\":1}", "guard.lr_factor: must be a number"},
        {"{\"metric\":\"\"}", "guard.metric: must be a non-empty string"},
        {"{\"metric\":3}", "guard.metric: must be a non-empty string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spec_t *sp = s_spec(cases[i].guard);
        REQUIRE(sp);
        char err[256] = "";
        CHECK(sched_check(sp, err, sizeof err) == -1);
        if (strncmp(err, cases[i].want, strlen(cases[i].want)) != 0)
            JZT_FAIL("case %zu: got \"%s\", want \"%s...\"", i, err, cases[i].want);
        spec_destroy(&sp);
    }
    spec_t *sp = s_spec("{}");
    char err[256] = "";
    sched_t *g = s_guard(sp, err, sizeof err);
    CHECK(g && !strcmp(g->ops->name, "guard") && g->ops->suggest == NULL);
    sched_destroy(&g);
    spec_destroy(&sp);
    /* no guard object: no monitor */
    sp = s_spec(NULL);
    sched_t *mon[4];
    CHECK(sched_monitors_new(sp, mon, 4, err, sizeof err) == 0);
    spec_destroy(&sp);
}

/* Healthy start: losses 1.0 .. 0.7 at steps 1..4, lr 0.1, checkpoint at 4. */
static void s_healthy(sched_t *g, long trial, s_out *o)
{
    s_lr(g, trial, 1, 0.1);
    for (int s = 1; s <= 4; s++) {
        s_loss(g, trial, s, 1.1 - 0.1 * s, o);
        if (o->k)
            JZT_FAIL("healthy step %d gave an instruction", s);
    }
    s_ckpt(g, trial, 4);
}

TEST(spike_and_nan_roll_back_then_stop)
{
    spec_t *sp = s_spec("{}");
    char err[256];
    sched_t *g = s_guard(sp, err, sizeof err);
    REQUIRE(g);
    s_out o = {.k = 0};
    s_healthy(g, 7, &o);
    /* a planted spike: 5.0 > 3 × the average (~0.87) */
    REQUIRE(s_loss(g, 7, 5, 5.0, &o) == 1);
    CHECK(o.ins[0].kind == INS_LOAD);
    CHECK(o.ins[0].trial == 7);
    CHECK_STR(json_string_value(json_object_get(o.ins[0].args, "path")), "/ck/7/4");
    CHECK_NEAR(s_load_lr(&o.ins[0]), 0.05, 1e-12);
    CHECK(strstr(o.ins[0].reason, "rollback 1/3") != NULL);
    CHECK(strstr(o.ins[0].reason, "> 3") != NULL);
    /* a report from before the load was applied (step beyond the spike) */
    CHECK(s_loss(g, 7, 6, NAN, &o) == 0);
    /* the trial went back: healthy again */
    CHECK(s_loss(g, 7, 5, 0.65, &o) == 0);
    /* a reported (effective) lr no longer overrides the one the guard set */
    s_lr(g, 7, 5, 0.3);
    /* NaN: second rollback, lr halved again */
    REQUIRE(s_loss(g, 7, 6, NAN, &o) == 1);
    CHECK(o.ins[0].kind == INS_LOAD);
    CHECK_NEAR(s_load_lr(&o.ins[0]), 0.025, 1e-12);
    CHECK(strstr(o.ins[0].reason, "nan") != NULL);
    CHECK(s_loss(g, 7, 5, 0.65, &o) == 0);
    REQUIRE(s_loss(g, 7, 6, INFINITY, &o) == 1);
    CHECK(o.ins[0].kind == INS_LOAD);
    CHECK_NEAR(s_load_lr(&o.ins[0]), 0.0125, 1e-12);
    CHECK(strstr(o.ins[0].reason, "rollback 3/3") != NULL);
    CHECK(s_loss(g, 7, 5, 0.65, &o) == 0);
    /* max_rollbacks used: stopped as diverged */
    REQUIRE(s_loss(g, 7, 6, 50.0, &o) == 1);
    CHECK(o.ins[0].kind == INS_STOP);
    CHECK(!strncmp(o.ins[0].reason, "diverged", 8));
    CHECK(strstr(o.ins[0].reason, "after 3 rollbacks") != NULL);
    /* nothing more for a stopped trial */
    CHECK(s_loss(g, 7, 7, NAN, &o) == 0);
    /* other trials are independent */
    s_healthy(g, 8, &o);
    CHECK(s_loss(g, 8, 5, 0.6, &o) == 0);
    s_out_fini(&o);
    sched_destroy(&g);
    spec_destroy(&sp);
}

TEST(no_checkpoint_stops)
{
    spec_t *sp = s_spec("{\"max_rollbacks\":2}");
    char err[256];
    sched_t *g = s_guard(sp, err, sizeof err);
    REQUIRE(g);
    s_out o = {.k = 0};
    CHECK(s_loss(g, 3, 1, 1.0, &o) == 0);
    REQUIRE(s_loss(g, 3, 2, NAN, &o) == 1);
    CHECK(o.ins[0].kind == INS_STOP);
    CHECK(strstr(o.ins[0].reason, "no checkpoint") != NULL);
    s_out_fini(&o);
    sched_destroy(&g);
    spec_destroy(&sp);
}

TEST(spikes_need_warmup_and_options_apply)
{
    spec_t *sp = s_spec("{\"metric\":\"loss\",\"jump\":2,\"warmup\":2,\"lr_factor\":0.1,"
                        "\"lr_param\":\"learning_rate\",\"lr_metric\":\"cur_lr\"}");
    char err[256];
    sched_t *g = s_guard(sp, err, sizeof err);
    REQUIRE(g);
    sched_instr ins[8];
    /* the first value cannot be a spike: no average yet */
    CHECK(g->ops->on_metric(g, 1, 1, "loss", 1.0, 0, ins, 8) == 0);
    CHECK(g->ops->on_metric(g, 1, 2, "loss", 10.0, 0, ins, 8) == 0); /* warmup: 1 of 2 */
    CHECK(g->ops->on_metric(g, 1, 3, "cur_lr", 0.4, 0, ins, 8) == 0);
    CHECK(g->ops->on_metric(g, 1, 3, "train_loss", NAN, 0, ins, 8) ==
          0); /* not watched */
    CHECK(g->ops->on_checkpoint(g, 1, 3, "/c", 0, ins, 8) == 0);
    /* average after 1.0 and 10.0 with weight 0.2: 2.8; 2 × 2.8 = 5.6 */
    CHECK(g->ops->on_metric(g, 1, 4, "loss", 5.5, 0, ins, 8) == 0);
    REQUIRE(g->ops->on_metric(g, 1, 5, "loss", 20, 0, ins, 8) == 1);
    CHECK(ins[0].kind == INS_LOAD);
    json_t *p = json_object_get(ins[0].args, "params");
    CHECK_NEAR(json_real_value(json_object_get(p, "learning_rate")), 0.04, 1e-12);
    CHECK(json_object_size(p) == 1);
    sched_instr_fini(&ins[0]);
    sched_destroy(&g);
    spec_destroy(&sp);
}

TEST(unknown_lr_keeps_it)
{
    spec_t *sp = s_spec("{}");
    char err[256];
    sched_t *g = s_guard(sp, err, sizeof err);
    REQUIRE(g);
    s_out o = {.k = 0};
    s_loss(g, 1, 1, 1.0, &o);
    s_ckpt(g, 1, 1);
    REQUIRE(s_loss(g, 1, 2, NAN, &o) == 1);
    CHECK(o.ins[0].kind == INS_LOAD);
    CHECK(json_object_size(json_object_get(o.ins[0].args, "params")) == 0);
    CHECK(strstr(o.ins[0].reason, "lr unknown") != NULL);
    s_out_fini(&o);
    sched_destroy(&g);
    spec_destroy(&sp);
}

TEST(unhealthy_checkpoint_not_used)
{
    spec_t *sp = s_spec("{}");
    char err[256];
    sched_t *g = s_guard(sp, err, sizeof err);
    REQUIRE(g);
    s_out o = {.k = 0};
    s_healthy(g, 2, &o); /* checkpoint at 4 */
    REQUIRE(s_loss(g, 2, 5, NAN, &o) == 1);
    /* a checkpoint while waiting for the rollback: not a rollback point */
    s_ckpt(g, 2, 6);
    CHECK(s_loss(g, 2, 5, 0.7, &o) == 0);
    REQUIRE(s_loss(g, 2, 6, NAN, &o) == 1);
    CHECK_STR(json_string_value(json_object_get(o.ins[0].args, "path")), "/ck/2/4");
    s_out_fini(&o);
    sched_destroy(&g);
    spec_destroy(&sp);
}

TEST(checkpoint_every)
{
    spec_t *sp = s_spec("{\"checkpoint_every\":10}");
    char err[256];
    sched_t *g = s_guard(sp, err, sizeof err);
    REQUIRE(g);
    s_out o = {.k = 0};
    int asked = 0;
    for (long s = 1; s <= 35; s++) {
        if (s_loss(g, 4, s, 1.0, &o) == 1) {
            CHECK(o.ins[0].kind == INS_CHECKPOINT);
            CHECK(s % 10 == 0);
            asked++;
        }
    }
    CHECK(asked == 3);
    s_out_fini(&o);
    sched_destroy(&g);
    spec_destroy(&sp);
}

/* The same script with a save/restore at `cut` (or none) gives the same
   instructions. */
static char *s_run(int cut)
{
    spec_t *sp = s_spec("{\"max_rollbacks\":2}");
    char err[256];
    sched_t *g = s_guard(sp, err, sizeof err);
    json_t *log = json_array();
    const double losses[] = {1, 0.9, 0.8, 9, 0.8, 0.7, NAN, 0.8, 0.7, 0.6, 30, 0.5};
    const long steps[] = {1, 2, 3, 4, 3, 4, 5, 3, 4, 5, 6, 7};
    for (int i = 0; i < 12; i++) {
        if (i == cut) {
            json_t *st = g->ops->save(g);
            sched_destroy(&g);
            g = s_guard(sp, err, sizeof err);
            if (g->ops->restore(g, st) != 0)
                json_array_append_new(log, json_string("restore failed"));
            json_decref(st);
        }
        sched_instr ins[8];
        if (i == 2) {
            s_lr(g, 1, 2, 0.2);
            s_ckpt(g, 1, 2);
        }
        int k = g->ops->on_metric(g, 1, steps[i], "train_loss", losses[i], 0, ins, 8);
        for (int j = 0; j < k; j++) {
            json_array_append_new(log, json_pack("{s:s, s:O?, s:s}", "kind",
                                                 ins_kind_name(ins[j].kind), "args",
                                                 ins[j].args, "reason", ins[j].reason));
            sched_instr_fini(&ins[j]);
        }
    }
    char *out = json_dumps(log, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(log);
    sched_destroy(&g);
    spec_destroy(&sp);
    return out;
}

TEST(save_restore)
{
    char *a = s_run(-1);
    REQUIRE(a);
    CHECK(strstr(a, "\"stop\"") != NULL);
    CHECK(strstr(a, "\"load\"") != NULL);
    for (int cut = 1; cut < 12; cut++) {
        char *b = s_run(cut);
        if (strcmp(a, b))
            JZT_FAIL("restored at %d:\n%s\nvs\n%s", cut, b, a);
        free(b);
    }
    free(a);
}

int main(void)
{
    RUN(option_refusals);
    RUN(spike_and_nan_roll_back_then_stop);
    RUN(no_checkpoint_stops);
    RUN(spikes_need_warmup_and_options_apply);
    RUN(unknown_lr_keeps_it);
    RUN(unhealthy_checkpoint_not_used);
    RUN(checkpoint_every);
    RUN(save_restore);
    TEST_DONE();
}
