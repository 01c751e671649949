/*  test_sched_batchsize.c - the batch-size scheduler and its estimators
    (schedulers/sched_batchsize.c, sched_bs_*.c): the gradient-noise estimator recovers a
    known B_simple from simulated gradients (stated tolerance) with a
    bootstrap interval that covers it; the scheduler picks the
    goodput-maximising batch in a hand-computed case and scales the rate
    by the AdaScale gain computed by hand; at most one change per
    interval; lr warmup after a raise; grow_only goes back from an explore
    measured worse; a plateau doubles the batch, or halves the lr where
    twice the batch was measured to cost more per example; option checks; suggestions are
    legal; save/restore at every point gives the same decisions.
*/
#include "jz_test.h"
#include "sched_testlib.h"

static spec_t *s_spec(const char *sched)
{
    char buf[4096];
    snprintf(
        buf, sizeof buf,
        "{\"name\":\"t\",\"objective\":{\"metric\":\"val_acc\",\"mode\":\"max\"},"
        "\"scheduler\":%s,\"budget\":{\"trials\":50},"
        "\"space\":{\"lr\":{\"type\":\"float\",\"low\":0.01,\"high\":0.1,\"log\":true},"
        "\"batch_size\":{\"type\":\"int\",\"low\":16,\"high\":1024,\"log\":true}},"
        "\"trial\":{\"command\":[\"true\"]}}",
        sched);
    return stl_parse(buf);
}

/* Standard normal from the scheduler rng (Box-Muller). */
static double s_gauss(sched_rng *r)
{
    double u = sched_rng_uniform(r), v = sched_rng_uniform(r);
    return sqrt(-2 * log(1 - u)) * cos(2 * M_PI * v);
}

/* One measurement from simulated per-example gradients g_i = G + noise,
   noise ~ N(0, diag(var)): the small-batch mean over the first bs
   examples, the big-batch mean over all bb (the big batch contains the
   small one, as in the trainer). */
static sched_gns_point s_simulate(sched_rng *r, const double *G, const double *var, int d,
                                  int bs, int bb)
{
    double gs = 0, gb = 0;
    for (int k = 0; k < d; k++) {
        double ms = G[k] + sqrt(var[k] / bs) * s_gauss(r);
        double mr = G[k] + sqrt(var[k] / (bb - bs)) * s_gauss(r);
        double mb = (bs * ms + (bb - bs) * mr) / bb;
        gs += ms * ms;
        gb += mb * mb;
    }
    return (sched_gns_point){gs, gb, bs, bb};
}

/* |G|^2 = 1 and tr(Sigma) = 400 over d = 50: B_simple = 400. */
static void s_problem(double *G, double *var, int d)
{
    for (int k = 0; k < d; k++) {
        G[k] = sqrt(1.0 / d);
        var[k] = 400.0 / d * (k % 2 ? 1.5 : 0.5);
    }
}

TEST(estimator_recovers_a_known_b_simple)
{
    enum { D = 50, N = 400 };
    double G[D], var[D];
    s_problem(G, var, D);
    sched_rng r;
    sched_rng_seed(&r, 7, 0);
    static sched_gns_point pts[N];
    for (int i = 0; i < N; i++)
        pts[i] = s_simulate(&r, G, var, D, 64, 256);
    /* exact point: the formulas invert E|G_B|^2 = |G|^2 + tr/B */
    double g2, tr;
    sched_gns_point exact = {1 + 400.0 / 32, 1 + 400.0 / 512, 32, 512};
    REQUIRE(sched_gns_estimate(&exact, &g2, &tr) == 0);
    CHECK_NEAR(g2, 1.0, 1e-12);
    CHECK_NEAR(tr, 400.0, 1e-12);
    sched_gns_point badp = {1, 1, 64, 64};
    CHECK(sched_gns_estimate(&badp, &g2, &tr) == -1);
    /* 400 noisy measurements: within 10% (the bootstrap sd here is ~3%) */
    sched_gns_result res;
    REQUIRE(sched_gns_critical(pts, N, 1000, 0.95, 1, &res) == 0);
    CHECK(res.n == N);
    CHECK_NEAR(res.b_simple, 400.0, 0.10);
    CHECK_NEAR(res.g2, 1.0, 0.10);
    CHECK_NEAR(res.trace, 400.0, 0.05);
    CHECK(res.lo < 400 && 400 < res.hi);
    CHECK(res.lo < res.b_simple && res.b_simple < res.hi);
    /* reproducible for a seed */
    sched_gns_result again;
    sched_gns_critical(pts, N, 1000, 0.95, 1, &again);
    CHECK(again.lo == res.lo && again.hi == res.hi);
    CHECK(sched_gns_critical(pts, 1, 10, 0.95, 1, &again) == -1);
}

TEST(efficiency_and_adascale_gain_by_hand)
{
    /* B_simple 256, B0 64, B 128: eff = 320/384, r = (4+1)/(2+1) = 5/3 = S*eff */
    CHECK_NEAR(sched_bs_efficiency(256, 64, 128), 320.0 / 384.0, 1e-15);
    CHECK_NEAR(sched_bs_adascale_gain(256, 64, 128), 5.0 / 3.0, 1e-15);
    CHECK_NEAR(sched_bs_adascale_gain(256, 64, 64), 1.0, 1e-15);
    /* no noise: linear scaling; all noise: no scaling */
    CHECK_NEAR(sched_bs_adascale_gain(1e-12, 64, 256), 1.0, 1e-9);
    CHECK_NEAR(sched_bs_adascale_gain(1e12, 64, 256), 4.0, 1e-6);
}

typedef struct {
    long trial, step;
    const char *metric;
    double value;
} ev;

static void s_fmt(sched_instr *ins, int k, char *out, size_t size)
{
    for (int j = 0; j < k; j++) {
        size_t len = strlen(out);
        json_t *v = json_object_get(ins[j].args, "value");
        snprintf(out + len, size - len, "%ld:%s %s=%.6g [%s];", ins[j].trial,
                 ins_kind_name(ins[j].kind),
                 json_string_value(json_object_get(ins[j].args, "name")),
                 json_number_value(v), ins[j].reason);
        sched_instr_fini(&ins[j]);
    }
}

/* Reports of a noise-free measurement: |G|^2 = 1, tr = bsimple. */
static int s_gns(ev *e, long trial, long step, double bsimple, double bs, double bb)
{
    e[0] = (ev){trial, step, "grad_sqnorm_small", 1 + bsimple / bs};
    e[1] = (ev){trial, step, "batch_small", bs};
    e[2] = (ev){trial, step, "grad_sqnorm_big", 1 + bsimple / bb};
    e[3] = (ev){trial, step, "batch_big", bb};
    return 4;
}

static sched_t *s_new_bs(const spec_t *sp)
{
    char err[256] = "";
    sched_t *s = sched_new(sp, err, sizeof err);
    if (!s)
        printf("sched_new: %s\n", err);
    return s;
}

/* Plays events (restore from saved text before event `cut`, -1 never). */
static sched_t *s_play(const spec_t *sp, const ev *evs, int n, int cut, char *out,
                       size_t size)
{
    sched_t *s = s_new_bs(sp);
    out[0] = 0;
    for (int i = 0; i < n && s; i++) {
        if (i == cut) {
            char *txt = stl_stop(&s);
            s = stl_resume(s_new_bs(sp), txt);
            if (!s)
                break;
        }
        sched_instr ins[8];
        int k = s->ops->on_metric(s, evs[i].trial, evs[i].step, evs[i].metric,
                                  evs[i].value, 0, ins, 8);
        s_fmt(ins, k, out, size);
    }
    return s;
}

/* Plays evs with a save/restore before each event in turn: every run must
   give the instructions `ref` (the run without one). */
static void s_same_at_every_cut(const spec_t *sp, const ev *evs, int n, const char *ref)
{
    for (int cut = 0; cut < n; cut++) {
        char out[4096];
        sched_t *s = s_play(sp, evs, n, cut, out, sizeof out);
        CHECK(s != NULL);
        if (strcmp(out, ref))
            JZT_FAIL("restore before event %d:\n%s\nvs\n%s", cut, out, ref);
        sched_destroy(&s);
    }
}

/* Step time t(B) = 0.01 + 1e-4 B seen at B = 128 and B = 64, B_simple 256,
   B0 = 64, lr0 = 0.1, powers of two in [16, 1024]. goodput(B) =
   B/t(B) * 320/(256 + B):
     16: 1622.7  32: 2693.6  64: 3902.4  128: 4678.4  256: 4494.4  512: 3485.8
   so 128 wins by x1.1989, and lr = 0.1 * r with r = 5/3 (AdaScale). */
static int s_goodput_case(ev *e)
{
    int n = 0;
    e[n++] = (ev){1, 5, "batch_size", 64};   /* B0 */
    e[n++] = (ev){1, 5, "samples_per_s", 1}; /* the start-up window: ignored */
    e[n++] = (ev){1, 10, "lr", 0.1};
    e[n++] = (ev){1, 10, "batch_size", 128};
    e[n++] = (ev){1, 10, "samples_per_s", 128 / (0.01 + 1e-4 * 128)};
    e[n++] = (ev){1, 20, "batch_size", 64};
    e[n++] = (ev){1, 20, "samples_per_s", 64 / (0.01 + 1e-4 * 64)};
    for (long step = 30; step <= 60; step += 10)
        n += s_gns(e + n, 1, step, 256, 32, 64);
    return n;
}

TEST(goodput_picks_the_hand_computed_batch_and_adascale_lr)
{
    spec_t *sp = s_spec("{\"type\":\"batchsize\",\"min\":16,\"max\":1024,\"interval\":60,"
                        "\"warmup\":0,\"min_measurements\":3}");
    REQUIRE(sp);
    ev e[64];
    int n = s_goodput_case(e);
    sched_t *s = s_new_bs(sp);
    REQUIRE(s);
    json_t *dec = NULL;
    int sets = 0;
    for (int i = 0; i < n; i++) {
        sched_instr ins[8];
        int k = s->ops->on_metric(s, e[i].trial, e[i].step, e[i].metric, e[i].value, 0,
                                  ins, 8);
        for (int j = 0; j < k; j++) {
            const char *name = json_string_value(json_object_get(ins[j].args, "name"));
            double v = json_number_value(json_object_get(ins[j].args, "value"));
            CHECK(e[i].step == 60); /* the first at >= interval, with >= 3 measurements */
            if (!strcmp(name, "batch_size")) {
                CHECK(v == 128);
                dec = json_incref(json_object_get(ins[j].args, "decision"));
                CHECK(strstr(ins[j].reason, "batch 64->128") != NULL);
            } else {
                CHECK_STR(name, "lr");
                CHECK_NEAR(v, 0.1 * 5.0 / 3.0, 1e-9);
            }
            sets++;
            sched_instr_fini(&ins[j]);
        }
    }
    CHECK(sets == 2);
    REQUIRE(dec);
    CHECK_NEAR(json_real_value(json_object_get(dec, "b_simple")), 256, 1e-9);
    CHECK_NEAR(json_real_value(json_object_get(dec, "goodput_gain")),
               (128 / 0.0228 * 320 / 384) / (64 / 0.0164), 1e-9);
    CHECK_NEAR(json_real_value(json_object_get(dec, "alpha")), 0.01, 1e-9);
    CHECK_NEAR(json_real_value(json_object_get(dec, "beta")), 1e-4, 1e-9);
    CHECK_NEAR(json_real_value(json_object_get(dec, "efficiency")), 320.0 / 384, 1e-12);
    json_decref(dec);
    sched_destroy(&s);
    spec_destroy(&sp);

    /* sqrt and linear rules on the same case */
    const char *rules[] = {"sqrt", "linear", "none"};
    double want[] = {0.1 * sqrt(2.0), 0.2, NAN};
    for (int r = 0; r < 3; r++) {
        char opt[256];
        snprintf(
            opt, sizeof opt,
            "{\"type\":\"batchsize\",\"interval\":60,\"warmup\":0,\"lr_rule\":\"%s\"}",
            rules[r]);
        sp = s_spec(opt);
        char out[2048];
        s = s_play(sp, e, n, -1, out, sizeof out);
        char expect[256];
        if (isnan(want[r]))
            snprintf(expect, sizeof expect, "1:set batch_size=128");
        else
            snprintf(expect, sizeof expect, "1:set lr=%.6g", want[r]);
        CHECK(strstr(out, expect) != NULL);
        if (isnan(want[r]))
            CHECK(strstr(out, "set lr") == NULL);
        sched_destroy(&s);
        spec_destroy(&sp);
    }
}

/* The same case for SGD with momentum 0.5: the efficiency uses
   B_noise = 256 / (1 - 0.5) = 512, goodput(B) = B/t(B) * 576/(512 + B):
     64: 3902.4  128: 5052.6  256: 5393.3  512: 4706.3
   so 256 wins; the AdaScale gain still comes from B_simple 256: S = 4,
   r = (4 + 1)/(4/4 + 1) = 2.5. The momentum comes from the option only:
   a trial's `momentum` param of 0.5 alone leaves the B_simple model (the
   hand-computed case above: 128). */
TEST(momentum_raises_the_noise_scale_of_the_efficiency)
{
    ev e[64];
    int n = s_goodput_case(e);
    for (int from_param = 0; from_param < 2; from_param++) {
        char buf[1024];
        snprintf(
            buf, sizeof buf,
            "{\"name\":\"t\",\"objective\":{\"metric\":\"val_acc\",\"mode\":\"max\"},"
            "\"scheduler\":{\"type\":\"batchsize\",\"min\":16,\"max\":1024,"
            "\"interval\":60,\"warmup\":0%s},\"budget\":{\"trials\":5},"
            "\"space\":{\"lr\":{\"type\":\"float\",\"low\":0.1,\"high\":0.1},"
            "\"momentum\":{\"type\":\"float\",\"low\":%s,\"high\":%s}},"
            "\"trial\":{\"command\":[\"true\"]}}",
            from_param ? "" : ",\"momentum\":0.5", from_param ? "0.5" : "0.9",
            from_param ? "0.5" : "0.9");
        json_t *j = json_loads(buf, 0, NULL);
        REQUIRE(j);
        spec_error serr;
        spec_t *sp = spec_parse(j, 0, &serr);
        json_decref(j);
        REQUIRE(sp);
        sched_t *s = s_new_bs(sp);
        REQUIRE(s);
        json_t *p = NULL;
        REQUIRE(s->ops->suggest(s, 1, &p) == SCHED_OK); /* trial 1: lr 0.1 */
        json_decref(p);
        json_t *dec = NULL;
        double lr = NAN;
        for (int i = 0; i < n; i++) {
            sched_instr ins[8];
            int k = s->ops->on_metric(s, e[i].trial, e[i].step, e[i].metric, e[i].value,
                                      0, ins, 8);
            for (int q = 0; q < k; q++) {
                const char *name =
                    json_string_value(json_object_get(ins[q].args, "name"));
                double v = json_number_value(json_object_get(ins[q].args, "value"));
                if (!strcmp(name, "batch_size")) {
                    CHECK(v == (from_param ? 128 : 256));
                    dec = json_incref(json_object_get(ins[q].args, "decision"));
                } else {
                    lr = v;
                }
                sched_instr_fini(&ins[q]);
            }
        }
        REQUIRE(dec);
        CHECK_NEAR(json_real_value(json_object_get(dec, "b_simple")), 256, 1e-9);
        CHECK_NEAR(json_real_value(json_object_get(dec, "b_noise")),
                   from_param ? 256 : 512, 1e-9);
        CHECK_NEAR(json_real_value(json_object_get(dec, "momentum")),
                   from_param ? 0 : 0.5, 1e-12);
        CHECK_NEAR(json_real_value(json_object_get(dec, "efficiency")),
                   from_param ? 320.0 / 384 : 576.0 / 768, 1e-12);
        CHECK_NEAR(lr, from_param ? 0.1 * 5.0 / 3.0 : 0.25, 1e-9);
        CHECK_NEAR(sched_bs_noise_scale(256, 0.5), 512, 1e-9);
        CHECK(sched_bs_noise_scale(256, 0) == 256 && sched_bs_noise_scale(256, 1) == 256);
        json_decref(dec);
        sched_destroy(&s);
        spec_destroy(&sp);
    }
}

/* B_simple switches between 20 and 5000 every 150 steps (no EMA
   smoothing), step time t = 0.02 + 1e-4 B, measurements every 10 steps
   over 2000, starting at B = 32: the scheduler wants to flip every 150
   steps but changes at most once per 300; each raised rate is warmed up
   over 100 steps by rising `set lr`, a lowered one set at once. */
TEST(at_most_one_change_per_interval_and_lr_warmup)
{
    spec_t *sp =
        s_spec("{\"type\":\"batchsize\",\"min\":16,\"max\":1024,\"interval\":300,"
               "\"warmup\":100,\"lr\":0.05,\"ema\":0,\"prior_overhead\":0.2}");
    REQUIRE(sp);
    sched_t *s = s_new_bs(sp);
    REQUIRE(s);
    json_t *params;
    REQUIRE(s->ops->suggest(s, 99, &params) == SCHED_OK); /* legal values */
    double b = json_number_value(json_object_get(params, "batch_size"));
    double lr0 = json_number_value(json_object_get(params, "lr"));
    CHECK(b >= 16 && b <= 1024 && b == floor(b) && lr0 >= 0.01 && lr0 <= 0.1);
    json_decref(params);
    json_t *st =
        s->ops->save(s); /* B0 from the params; lr0 from the option, which wins */
    json_t *t99 = json_array_get(json_object_get(st, "trials"), 0);
    CHECK(json_integer_value(json_object_get(t99, "id")) == 99);
    CHECK(json_real_value(json_object_get(t99, "b0")) == b);
    CHECK(json_real_value(json_object_get(t99, "lr0")) == 0.05);
    json_decref(st);
    b = 32; /* trial 1 was not suggested: B0 from its reports, lr0 from the option */
    long last_change = -1000, changes = 0, ups = 0, downs = 0, ramp_sets = 0;
    double last_lr = 0.05, target = NAN;
    for (long step = 10; step <= 2000; step += 10) {
        ev e[8];
        int n = 0;
        e[n++] = (ev){1, step, "batch_size", b};
        e[n++] = (ev){1, step, "samples_per_s", b / (0.02 + 1e-4 * b)};
        n += s_gns(e + n, 1, step, (step / 150) % 2 ? 5000 : 20, b / 2, b);
        for (int i = 0; i < n; i++) {
            sched_instr ins[8];
            int k =
                s->ops->on_metric(s, 1, e[i].step, e[i].metric, e[i].value, 0, ins, 8);
            for (int j = 0; j < k; j++) {
                const char *name =
                    json_string_value(json_object_get(ins[j].args, "name"));
                double v = json_number_value(json_object_get(ins[j].args, "value"));
                if (!strcmp(name, "batch_size")) {
                    CHECK(step - last_change >= 300);
                    CHECK(v != b);
                    ups += v > b;
                    downs += v < b;
                    last_change = step;
                    changes++;
                    b = v;
                    target = json_real_value(
                        json_object_get(json_object_get(ins[j].args, "decision"), "lr"));
                } else if (strstr(ins[j].reason, "warmup")) {
                    /* rising, never past the target, reached within 100 steps */
                    CHECK(v > last_lr && v <= target * (1 + 1e-12));
                    CHECK(step - last_change <= 100 && step > last_change);
                    if (step - last_change >= 100)
                        CHECK_NEAR(v, target, 1e-12);
                    last_lr = v;
                    ramp_sets++;
                } else {
                    CHECK(step == last_change && v < last_lr); /* a lower rate, at once */
                    CHECK_NEAR(v, target, 1e-12);
                    last_lr = v;
                }
                sched_instr_fini(&ins[j]);
            }
        }
    }
    CHECK(changes >= 4 && ups >= 2 && downs >= 2);
    CHECK(ramp_sets >= 2 * ups); /* several steps of warmup per raise */
    sched_destroy(&s);
    spec_destroy(&sp);
}

/* probe_interval 20, interval 300, B_simple 20 until step 100 and 5000
   after (ema 0), step time 0.02 + 1e-4 B from batch 64. The first change
   needs no interval: at step 40, when 3 noise measurements and 3 step-time
   windows at 64 (the first one dropped) are in, an exploring x2 (under the
   prior's 20% overhead 128 is worse, efficiency (20+64)/(20+128)); the next
   decision also waits only probe_interval and 3 windows at the new size,
   and at step 100 the noise scale calls for the largest batch; after that
   non-exploring change the next needs 300 steps. Without the option the
   first change waits the interval, as before. With B_simple 5000 from the
   start the prior alone would jump to 256 (goodput x1.13 by hand), but with
   one size measured the first change only explores (x2, to 128: the prior
   picks the direction), which is a probe: with 64 and 128 measured the fit
   is exact and 1024 wins (x1.83), at step 80, not 340. */
TEST(probe_interval_lets_the_first_and_the_exploring_changes_come_early)
{
    for (int k = 0; k < 3; k++) {
        spec_t *sp =
            s_spec(k != 1 ? "{\"type\":\"batchsize\",\"min\":16,\"max\":1024,"
                            "\"interval\":300,\"probe_interval\":20,\"warmup\":0,"
                            "\"ema\":0,\"prior_overhead\":0.2,\"grow_only\":true}"
                          : "{\"type\":\"batchsize\",\"min\":16,\"max\":1024,"
                            "\"interval\":300,\"warmup\":0,"
                            "\"ema\":0,\"prior_overhead\":0.2,\"grow_only\":true}");
        REQUIRE(sp);
        sched_t *s = s_new_bs(sp);
        REQUIRE(s);
        double b = 64;
        long at[8];
        int explore[8], nch = 0;
        double to[8];
        for (long step = 10; step <= 1000; step += 10) {
            ev e[8];
            int n = 0;
            e[n++] = (ev){1, step, "batch_size", b};
            e[n++] = (ev){1, step, "lr", 0.05};
            e[n++] = (ev){1, step, "samples_per_s", b / (0.02 + 1e-4 * b)};
            n += s_gns(e + n, 1, step, step < 100 && k < 2 ? 20 : 5000, b / 2, b);
            for (int i = 0; i < n; i++) {
                sched_instr ins[8];
                int m = s->ops->on_metric(s, 1, e[i].step, e[i].metric, e[i].value, 0,
                                          ins, 8);
                for (int j = 0; j < m; j++) {
                    const char *name =
                        json_string_value(json_object_get(ins[j].args, "name"));
                    if (!strcmp(name, "batch_size") && nch < 8) {
                        json_t *d = json_object_get(ins[j].args, "decision");
                        at[nch] = step;
                        to[nch] =
                            json_number_value(json_object_get(ins[j].args, "value"));
                        explore[nch] = json_is_true(json_object_get(d, "explore"));
                        b = to[nch++];
                    }
                    sched_instr_fini(&ins[j]);
                }
            }
        }
        if (k == 0) {
            REQUIRE(nch == 2);
            CHECK(at[0] == 40 && explore[0] && to[0] == 128);
            CHECK(at[1] == 100 && !explore[1] && to[1] == 1024);
        } else if (k == 1) {
            REQUIRE(nch >= 1);
            CHECK(at[0] >= 300);
        } else {
            REQUIRE(nch == 2);
            CHECK(at[0] == 40 && explore[0] && to[0] == 128);
            CHECK(at[1] == 80 && to[1] == 1024);
        }
        sched_destroy(&s);
        spec_destroy(&sp);
    }
}

/* Equal step times at 64 and 128 fit a flat line: beta is held at a
   quarter of the best per-example time, 0.25 * 0.01/128, and alpha takes
   the rest of the mean, 0.01 - beta * 96; so a large B_simple cannot
   promise free examples at 1024 (the pick is the goodput argmax). */
TEST(throughput_fit_keeps_a_marginal_cost)
{
    spec_t *sp = s_spec("{\"type\":\"batchsize\",\"interval\":10,\"warmup\":0}");
    REQUIRE(sp);
    ev e[64];
    int n = 0;
    e[n++] = (ev){1, 5, "batch_size", 64};
    e[n++] = (ev){1, 5, "samples_per_s", 1};
    e[n++] = (ev){1, 10, "lr", 0.1};
    e[n++] = (ev){1, 10, "batch_size", 128};
    e[n++] = (ev){1, 10, "samples_per_s", 128 / 0.01};
    e[n++] = (ev){1, 20, "batch_size", 64};
    e[n++] = (ev){1, 20, "samples_per_s", 64 / 0.01};
    for (long step = 30; step <= 50; step += 10)
        n += s_gns(e + n, 1, step, 10000, 32, 64);
    sched_t *s = s_new_bs(sp);
    REQUIRE(s);
    json_t *dec = NULL;
    double pick = 0;
    for (int i = 0; i < n; i++) {
        sched_instr ins[8];
        int k = s->ops->on_metric(s, 1, e[i].step, e[i].metric, e[i].value, 0, ins, 8);
        for (int j = 0; j < k; j++) {
            if (!strcmp(json_string_value(json_object_get(ins[j].args, "name")),
                        "batch_size")) {
                dec = json_incref(json_object_get(ins[j].args, "decision"));
                pick = json_number_value(json_object_get(ins[j].args, "value"));
            }
            sched_instr_fini(&ins[j]);
        }
    }
    REQUIRE(dec);
    double beta = 0.25 * 0.01 / 128, alpha = 0.01 - beta * 96;
    CHECK_NEAR(json_real_value(json_object_get(dec, "beta")), beta, 1e-12);
    CHECK_NEAR(json_real_value(json_object_get(dec, "alpha")), alpha, 1e-12);
    double bs = json_real_value(json_object_get(dec, "b_simple")), best = 0, bestg = 0;
    CHECK_NEAR(bs, 10000, 1e-9);
    for (double b = 16; b <= 1024; b *= 2) {
        double g = b / (alpha + beta * b) * (bs + 64) / (bs + b);
        if (g > bestg)
            bestg = g, best = b;
    }
    CHECK(pick == best);
    json_decref(dec);
    sched_destroy(&s);
    spec_destroy(&sp);
}

/* Contention slows most windows: of 16 windows at each size, 6 run at the
   machine's speed, t(B) = 0.01 + 1e-4 B, and 10 are slowed, 2x at 64 and
   3x at 128 (a neighbour's burst while the trial ran at 128). The fit
   takes each size's fast quartile, so it is the machine's line (alpha
   0.01, beta 1e-4) and the pick is the hand-computed 128 of the goodput
   case. The medians (0.0328 at 64, 0.0684 at 128) fit a line through
   the origin, beta 5.3e-4, and pick another size (checked: this test
   fails with the median). */
TEST(throughput_uses_the_fast_quartile_of_slowed_windows)
{
    spec_t *sp = s_spec("{\"type\":\"batchsize\",\"min\":16,\"max\":1024,"
                        "\"interval\":10,\"warmup\":0}");
    REQUIRE(sp);
    ev e[128];
    int n = 0;
    long step = 1;
    e[n++] = (ev){1, step, "batch_size", 64};
    e[n++] = (ev){1, step++, "samples_per_s", 1}; /* the start-up window */
    e[n++] = (ev){1, step, "lr", 0.1};
    double sizes[2] = {128, 64}, slow[2] = {3, 2};
    for (int k = 0; k < 2; k++) {
        double b = sizes[k], t = 0.01 + 1e-4 * b;
        e[n++] = (ev){1, step, "batch_size", b};
        for (int w = 0; w < 16; w++)
            e[n++] = (ev){1, step++, "samples_per_s", b / (w % 3 == 0 ? t : slow[k] * t)};
    }
    for (int i = 0; i < 4; i++, step += 10)
        n += s_gns(e + n, 1, step, 256, 32, 64);
    sched_t *s = s_new_bs(sp);
    REQUIRE(s);
    double pick = 0;
    json_t *dec = NULL;
    for (int i = 0; i < n; i++) {
        sched_instr ins[8];
        int k = s->ops->on_metric(s, 1, e[i].step, e[i].metric, e[i].value, 0, ins, 8);
        for (int j = 0; j < k; j++) {
            if (!strcmp(json_string_value(json_object_get(ins[j].args, "name")),
                        "batch_size") &&
                !dec) {
                dec = json_incref(json_object_get(ins[j].args, "decision"));
                pick = json_number_value(json_object_get(ins[j].args, "value"));
            }
            sched_instr_fini(&ins[j]);
        }
    }
    REQUIRE(dec);
    CHECK(pick == 128);
    CHECK_NEAR(json_real_value(json_object_get(dec, "alpha")), 0.01, 1e-9);
    CHECK_NEAR(json_real_value(json_object_get(dec, "beta")), 1e-4, 1e-9);
    json_decref(dec);
    sched_destroy(&s);
    spec_destroy(&sp);
}

/* "throughput": "cpu": the step cost comes from step_cpu_s (the goodput
   case's line, t = 0.01 + 1e-4 B, so the pick is 128 and the fit exact);
   wall-clock samples_per_s, here wildly off (as if 64 were 10x faster),
   is ignored. Without the option the same reports fit the wall times. */
TEST(cpu_throughput_uses_step_cpu_s)
{
    ev e[64];
    int n = 0;
    e[n++] = (ev){1, 5, "batch_size", 64};
    e[n++] = (ev){1, 5, "step_cpu_s", 1}; /* the start-up window: ignored */
    e[n++] = (ev){1, 10, "lr", 0.1};
    e[n++] = (ev){1, 10, "batch_size", 128};
    e[n++] = (ev){1, 10, "samples_per_s", 128 / (0.1 + 1e-4 * 128)};
    e[n++] = (ev){1, 10, "step_cpu_s", 0.01 + 1e-4 * 128};
    e[n++] = (ev){1, 20, "batch_size", 64};
    e[n++] = (ev){1, 20, "samples_per_s", 64 / (0.001 + 1e-4 * 64)};
    e[n++] = (ev){1, 20, "step_cpu_s", 0.01 + 1e-4 * 64};
    for (long step = 30; step <= 60; step += 10)
        n += s_gns(e + n, 1, step, 256, 32, 64);
    for (int cpu = 0; cpu < 2; cpu++) {
        spec_t *sp = s_spec(cpu ? "{\"type\":\"batchsize\",\"min\":16,\"max\":1024,"
                                  "\"interval\":60,\"warmup\":0,\"throughput\":\"cpu\"}"
                                : "{\"type\":\"batchsize\",\"min\":16,\"max\":1024,"
                                  "\"interval\":60,\"warmup\":0}");
        REQUIRE(sp);
        sched_t *s = s_new_bs(sp);
        REQUIRE(s);
        json_t *dec = NULL;
        for (int i = 0; i < n; i++) {
            sched_instr ins[8];
            int k =
                s->ops->on_metric(s, 1, e[i].step, e[i].metric, e[i].value, 0, ins, 8);
            for (int j = 0; j < k; j++) {
                if (!dec &&
                    !strcmp(json_string_value(json_object_get(ins[j].args, "name")),
                            "batch_size"))
                    dec = json_incref(json_object_get(ins[j].args, "decision"));
                sched_instr_fini(&ins[j]);
            }
        }
        if (cpu) {
            REQUIRE(dec);
            CHECK_NEAR(json_real_value(json_object_get(dec, "alpha")), 0.01, 1e-9);
            CHECK_NEAR(json_real_value(json_object_get(dec, "beta")), 1e-4, 1e-9);
        } else if (dec) { /* the wall line: 0.1 + 1e-4 B vs 0.001 + 1e-4 B */
            CHECK(json_real_value(json_object_get(dec, "alpha")) < 0.005 ||
                  json_real_value(json_object_get(dec, "beta")) > 2e-4);
        }
        json_decref(dec);
        sched_destroy(&s);
        spec_destroy(&sp);
    }
}

/* The instructions that events e[0..n) draw from the batch-size scheduler
   (min 16, max 1024, interval 60, no warmup), with grow_only or without,
   into out; 0, or -1 when there was no scheduler. */
static int s_play_grow(const ev *e, int n, int grow, char *out, size_t size)
{
    spec_t *sp = s_spec(grow ? "{\"type\":\"batchsize\",\"min\":16,\"max\":1024,"
                               "\"interval\":60,\"warmup\":0,\"grow_only\":true}"
                             : "{\"type\":\"batchsize\",\"min\":16,\"max\":1024,"
                               "\"interval\":60,\"warmup\":0}");
    sched_t *s = sp ? s_play(sp, e, n, -1, out, size) : NULL;
    int rc = s ? 0 : -1;
    sched_destroy(&s);
    spec_destroy(&sp);
    return rc;
}

/* grow_only: B_simple 8 at B = 64 with the goodput case's throughput
   line makes 32 (or 16) the goodput pick, and without the option the
   scheduler shrinks; with it, nothing below 64 is a candidate and 64
   stays (no instruction), and a first explore from one size goes up. */
TEST(grow_only_never_shrinks)
{
    ev e[64];
    int n = 0;
    e[n++] = (ev){1, 5, "batch_size", 64};
    e[n++] = (ev){1, 5, "samples_per_s", 1};
    e[n++] = (ev){1, 10, "lr", 0.1};
    e[n++] = (ev){1, 10, "batch_size", 128};
    e[n++] = (ev){1, 10, "samples_per_s", 128 / (0.01 + 1e-4 * 128)};
    e[n++] = (ev){1, 20, "batch_size", 64};
    e[n++] = (ev){1, 20, "samples_per_s", 64 / (0.01 + 1e-4 * 64)};
    for (long step = 30; step <= 60; step += 10)
        n += s_gns(e + n, 1, step, 8, 32, 64);
    for (int grow = 0; grow < 2; grow++) {
        char out[2048];
        REQUIRE(s_play_grow(e, n, grow, out, sizeof out) == 0);
        if (grow)
            CHECK(strstr(out, "set batch_size") == NULL);
        else
            CHECK(strstr(out, "set batch_size=32") != NULL ||
                  strstr(out, "set batch_size=16") != NULL);
    }
    /* one size seen (64), B_simple 8: the prior picks a smaller batch;
       grow_only tries 128 (the explore goes up) */
    n = 0;
    e[n++] = (ev){1, 5, "batch_size", 64};
    e[n++] = (ev){1, 5, "samples_per_s", 1};
    e[n++] = (ev){1, 10, "lr", 0.1};
    e[n++] = (ev){1, 10, "samples_per_s", 64 / (0.01 + 1e-4 * 64)};
    for (long step = 30; step <= 60; step += 10)
        n += s_gns(e + n, 1, step, 8, 32, 64);
    for (int grow = 0; grow < 2; grow++) {
        char out[2048];
        REQUIRE(s_play_grow(e, n, grow, out, sizeof out) == 0);
        if (grow)
            CHECK(strstr(out, "set batch_size=128") != NULL);
        else
            CHECK(strstr(out, "set batch_size=16") != NULL ||
                  strstr(out, "set batch_size=32") != NULL);
    }
}

/* grow_only, one size measured (64), B_simple 8: the first change explores
   up, to 128 (the prior picks the direction). Measured there, an example
   costs more (step 0.025 s against 0.01 at 64, where the prior promised
   0.015), so the next decision goes back to 64 though grow_only forbids
   other shrinks, and nothing changes after that (16 and 32 stay out of
   reach). With B_simple 10000 the efficiency is about the same at both
   (0.994 at 128) and only the measured times tell them apart: a line
   through (64, 0.01) and (128, 0.025) has alpha < 0, so it goes through
   the origin and makes an example cost the same at both; measured, 64 has
   1.25x the throughput. A save/restore at any step gives the same
   decisions. */
static void s_undo_run(const spec_t *sp, double bsimple, double t128, long dip, long cut,
                       char *out, size_t size)
{
    sched_t *s = s_new_bs(sp);
    double b = 64;
    out[0] = 0;
    for (long step = 5; step <= 400 && s; step += 5) {
        if (step == cut) {
            char *txt = stl_stop(&s);
            s = stl_resume(s_new_bs(sp), txt);
            if (!s)
                break;
        }
        ev e[8];
        int n = 0;
        e[n++] = (ev){1, step, "batch_size", b};
        e[n++] = (ev){1, step, "lr", 0.1};
        e[n++] = (ev){1, step, "samples_per_s", b / (b > 64 ? t128 : 0.01)};
        n += s_gns(e + n, 1, step, dip >= 0 && step >= dip ? 8 : bsimple, b / 2, b);
        for (int i = 0; i < n; i++) {
            sched_instr ins[8];
            int k =
                s->ops->on_metric(s, 1, e[i].step, e[i].metric, e[i].value, 0, ins, 8);
            for (int j = 0; j < k; j++)
                if (!strcmp(json_string_value(json_object_get(ins[j].args, "name")),
                            "batch_size"))
                    b = json_number_value(json_object_get(ins[j].args, "value"));
            s_fmt(ins, k, out, size);
        }
    }
    sched_destroy(&s);
}

TEST(grow_only_goes_back_from_an_explore_measured_worse)
{
    spec_t *sp =
        s_spec("{\"type\":\"batchsize\",\"min\":16,\"max\":1024,\"interval\":60,"
               "\"probe_interval\":20,\"warmup\":0,\"ema\":0,\"grow_only\":true}");
    REQUIRE(sp);
    for (int k = 0; k < 2; k++) {
        double bsimple = k ? 10000 : 8;
        char ref[4096];
        s_undo_run(sp, bsimple, 0.025, -1, -1, ref, sizeof ref);
        const char *up = strstr(ref, "set batch_size=128");
        REQUIRE(up);
        CHECK(strstr(up, "explore") != NULL);
        const char *back = strstr(up, "set batch_size=64");
        REQUIRE(back);
        CHECK(strstr(back + 1, "set batch_size") == NULL);
        CHECK(strstr(ref, "set batch_size=32") == NULL &&
              strstr(ref, "set batch_size=16") == NULL);
        for (long cut = 5; cut <= 400; cut += 5) {
            char out[4096];
            s_undo_run(sp, bsimple, 0.025, -1, cut, out, sizeof out);
            if (strcmp(out, ref))
                JZT_FAIL("restore at step %ld:\n%s\nvs\n%s", cut, out, ref);
        }
    }
    spec_destroy(&sp);
}

/* An explore is judged once the explored size is measured, not when its
   warmup ramp ends: with `warmup` 100 the way back from 128 (an example
   measured 1.25x as costly as at 64, B_simple 10000) comes after a ramp step
   and before the ramp's last, sets the rate back at once, and no ramp step
   follows it. */
TEST(an_explore_is_judged_before_its_warmup_ends)
{
    spec_t *sp =
        s_spec("{\"type\":\"batchsize\",\"min\":16,\"max\":1024,\"interval\":60,"
               "\"probe_interval\":20,\"warmup\":100,\"ema\":0,\"grow_only\":true}");
    REQUIRE(sp);
    char out[4096];
    s_undo_run(sp, 10000, 0.025, -1, -1, out, sizeof out); /* AdaScale: 0.1 -> 0.2 */
    const char *up = strstr(out, "set batch_size=128");
    REQUIRE(up);
    const char *back = strstr(up, "set batch_size=64");
    REQUIRE(back);
    CHECK(strstr(up, "lr warmup") != NULL && strstr(up, "lr warmup") < back);
    const char *end = strstr(up, "(100/100 steps)");
    CHECK(end == NULL || end > back);
    CHECK(strstr(back, "set lr=0.1 ") != NULL);
    CHECK(strstr(back, "lr warmup") == NULL);
    spec_destroy(&sp);
}

/* The way back from an explore stays open for `interval` steps only: 128
   explored at the same cost per example as 64 and B_simple 10000 keep 128;
   B_simple then falling to 8 makes 64 the goodput pick (x1.7), which goes
   back while within 60 steps of the explore and is a shrink grow_only
   forbids after. */
TEST(grow_only_goes_back_only_soon_after_the_explore)
{
    spec_t *sp =
        s_spec("{\"type\":\"batchsize\",\"min\":16,\"max\":1024,\"interval\":60,"
               "\"probe_interval\":20,\"warmup\":0,\"ema\":0,\"grow_only\":true}");
    REQUIRE(sp);
    char out[4096];
    s_undo_run(sp, 10000, 0.02, -1, -1, out, sizeof out);
    const char *up = strstr(out, "set batch_size=128");
    REQUIRE(up);
    CHECK(strstr(up, "explore") != NULL);
    CHECK(strstr(up, "set batch_size=64") == NULL);
    s_undo_run(sp, 10000, 0.02, 60, -1, out, sizeof out); /* the dip within 60 steps */
    CHECK(strstr(out, "set batch_size=64") != NULL);
    s_undo_run(sp, 10000, 0.02, 150, -1, out, sizeof out); /* the dip after */
    CHECK(strstr(out, "set batch_size=128") != NULL);
    CHECK(strstr(out, "set batch_size=64") == NULL);
    spec_destroy(&sp);
}

/* A retried trial reports from step 0 again: its state starts over. */
TEST(a_retry_starts_the_trial_state_over)
{
    spec_t *sp = s_spec("{\"type\":\"batchsize\",\"interval\":60,\"warmup\":0}");
    REQUIRE(sp);
    ev e[64];
    int n = s_goodput_case(e);
    char out[2048];
    sched_t *s = s_play(sp, e, n, -1, out, sizeof out);
    REQUIRE(s);
    CHECK(strstr(out, "set batch_size=128") != NULL);
    sched_instr ins[8];
    CHECK(s->ops->on_metric(s, 1, 1, "batch_size", 64, 0, ins, 8) == 0);
    json_t *st = s->ops->save(s);
    json_t *t = json_array_get(json_object_get(st, "trials"), 0);
    CHECK(json_integer_value(json_object_get(t, "decisions")) == 0);
    CHECK(json_integer_value(json_object_get(t, "nmeas")) == 0);
    CHECK(json_real_value(json_object_get(t, "b0")) == 64);
    CHECK(json_array_size(json_object_get(t, "tp")) == 0);
    json_decref(st);
    sched_destroy(&s);
    spec_destroy(&sp);
}

TEST(save_restore_at_every_point_gives_the_same_decisions)
{
    spec_t *sp = s_spec("{\"type\":\"batchsize\",\"interval\":50,\"warmup\":40}");
    REQUIRE(sp);
    ev e[256];
    int n = s_goodput_case(e);
    for (long step = 70; step <= 150; step += 10) { /* the warmup ramp */
        e[n++] = (ev){1, step, "batch_size", 128};
        e[n++] = (ev){1, step, "samples_per_s", 128 / (0.01 + 1e-4 * 128)};
    }
    char ref[4096];
    sched_t *s = s_play(sp, e, n, -1, ref, sizeof ref);
    CHECK(strstr(ref, "set batch_size=128") != NULL);
    CHECK(strstr(ref, "lr warmup") != NULL);
    sched_destroy(&s);
    s_same_at_every_cut(sp, e, n, ref);
    spec_destroy(&sp);
}

/* Plateau (window 4, delta 0.01): a rising objective decides nothing; a
   flat one doubles the batch with the lr held, then at max halves the lr;
   the window starts over after each decision; a "min" objective falls. */
static int s_plateau_case(ev *e, const double *acc, int nacc, long step0, double batch)
{
    int n = 0;
    for (int i = 0; i < nacc; i++) {
        long step = step0 + 10 * i;
        e[n++] = (ev){1, step, "batch_size", batch};
        e[n++] = (ev){1, step, "val_acc", acc[i]};
    }
    return n;
}

TEST(plateau_grows_the_batch_holding_lr_then_halves_lr_at_max)
{
    spec_t *sp = s_spec("{\"type\":\"batchsize\",\"min\":16,\"max\":256,\"lr\":0.1,"
                        "\"plateau_window\":4,\"plateau_delta\":0.01}");
    REQUIRE(sp);
    static const double rising[] = {0.5, 0.6, 0.7, 0.8, 0.85, 0.9};
    static const double flat[] = {0.80, 0.805, 0.80, 0.806};
    ev e[64];
    int n = s_plateau_case(e, rising, 6, 10, 128);
    char out[4096];
    sched_t *s = s_play(sp, e, n, -1, out, sizeof out);
    REQUIRE(s);
    CHECK(out[0] == 0); /* trend +0.3 .. +0.15 across 4 reports: no plateau */
    sched_destroy(&s);

    /* flat at 128: 256 with the lr held; the reports in flight at 128 do
       not count; flat at 256 (max): lr 0.1 -> 0.05 */
    n = s_plateau_case(e, flat, 4, 10, 128);
    n += s_plateau_case(e + n, flat, 2, 50, 128);
    n += s_plateau_case(e + n, flat, 3, 70, 256);
    int before_last = n;
    n += s_plateau_case(e + n, flat, 1, 100, 256);
    n += s_plateau_case(e + n, flat, 4, 110, 256);
    s = s_play(sp, e, before_last, -1, out, sizeof out);
    REQUIRE(s);
    CHECK(strstr(out, "set batch_size=256") != NULL);
    CHECK(strstr(out, "lr held") != NULL);
    CHECK(strstr(out, "set lr") == NULL); /* 3 reports at 256: not a window yet */
    sched_destroy(&s);
    char ref[4096];
    s = s_play(sp, e, n, -1, ref, sizeof ref);
    REQUIRE(s);
    CHECK(strstr(ref, "set batch_size=256") != NULL);
    CHECK(strstr(ref, "set lr=0.05") != NULL);
    CHECK(strstr(ref, "at max batch 256") != NULL);
    /* the window starts over after the lr decision: 4 more flat reports
       decide again (lr 0.025) */
    CHECK(strstr(ref, "set lr=0.025") != NULL);
    sched_destroy(&s);
    s_same_at_every_cut(sp, e, n, ref); /* the window and the phase are saved */
    spec_destroy(&sp);

    /* off by default: the same flat reports decide nothing */
    sp = s_spec("{\"type\":\"batchsize\",\"min\":16,\"max\":256,\"lr\":0.1}");
    REQUIRE(sp);
    n = s_plateau_case(e, flat, 4, 10, 128);
    n += s_plateau_case(e + n, flat, 4, 50, 128);
    s = s_play(sp, e, n, -1, out, sizeof out);
    REQUIRE(s);
    CHECK(out[0] == 0);
    sched_destroy(&s);
    spec_destroy(&sp);
}

/* A plateau where the step-time table holds 2B: 128 measured at 0.025 s
   a step against 0.01 at 64 (an example costs 1.25x there) halves the lr
   and holds the batch; measured at 0.015 (0.75x) the batch doubles with
   the lr held. Unmeasured sizes are never judged costlier (the fit's
   alpha >= 0), so the first test above doubles. */
TEST(plateau_halves_the_lr_where_twice_the_batch_costs_more_per_example)
{
    spec_t *sp = s_spec("{\"type\":\"batchsize\",\"min\":16,\"max\":1024,\"lr\":0.1,"
                        "\"plateau_window\":4,\"plateau_delta\":0.01}");
    REQUIRE(sp);
    static const double flat[] = {0.80, 0.805, 0.80, 0.806};
    for (int k = 0; k < 2; k++) {
        double t128 = k ? 0.015 : 0.025;
        ev e[64];
        int n = 0;
        for (long step = 5; step <= 30; step += 5) { /* the first report is dropped */
            e[n++] = (ev){1, step, "batch_size", 128};
            e[n++] = (ev){1, step, "samples_per_s", 128 / t128};
        }
        for (long step = 35; step <= 60; step += 5) {
            e[n++] = (ev){1, step, "batch_size", 64};
            e[n++] = (ev){1, step, "samples_per_s", 64 / 0.01};
        }
        n += s_plateau_case(e + n, flat, 4, 70, 64);
        char out[4096];
        sched_t *s = s_play(sp, e, n, -1, out, sizeof out);
        REQUIRE(s);
        if (k) {
            CHECK(strstr(out, "set batch_size=128") != NULL);
            CHECK(strstr(out, "lr held") != NULL);
            CHECK(strstr(out, "set lr") == NULL);
        } else {
            CHECK(strstr(out, "set lr=0.05") != NULL);
            CHECK(strstr(out, "batch 64 held (x1.25 an example at 128)") != NULL);
            CHECK(strstr(out, "set batch_size") == NULL);
        }
        sched_destroy(&s);
    }
    spec_destroy(&sp);
}

/* After a plateau decision the trial anneals: a goodput case that alone
   picks 128 (s_goodput_case) changes nothing once the batch was doubled. */
TEST(after_a_plateau_goodput_no_longer_decides)
{
    spec_t *sp = s_spec("{\"type\":\"batchsize\",\"min\":16,\"max\":1024,\"interval\":60,"
                        "\"warmup\":0,\"plateau_window\":4}");
    REQUIRE(sp);
    ev e[128];
    static const double flat[] = {0.80, 0.805, 0.80, 0.806};
    int n = s_plateau_case(e, flat, 4, 1, 64);
    int m = s_goodput_case(e + n);
    for (int i = 0; i < m; i++) /* the goodput reports, at 64 -> 128 after the plateau */
        e[n + i].step += 100;
    n += m;
    char out[4096];
    sched_t *s = s_play(sp, e, n, -1, out, sizeof out);
    REQUIRE(s);
    CHECK(strstr(out, "set batch_size=128") != NULL);
    CHECK(strstr(out, "plateau") != NULL);
    CHECK(strstr(out, "goodput") == NULL);
    sched_destroy(&s);
    spec_destroy(&sp);
}

TEST(options_are_checked)
{
    static const struct {
        const char *sched, *msg;
    } bad[] = {
        {"{\"type\":\"batchsize\",\"colour\":1}",
         "scheduler.colour: unknown option for the batchsize scheduler"},
        {"{\"type\":\"batchsize\",\"min\":64,\"max\":32}",
         "scheduler.max: must be >= min (64)"},
        {"{\"type\":\"batchsize\",\"min\":33,\"max\":63}",
         "scheduler.min: no power of two in [33, 63] (use \"grid\": \"int\")"},
        {"{\"type\":\"batchsize\",\"grid\":\"odd\"}",
         "scheduler.grid: must be \"pow2\" or \"int\""},
        {"{\"type\":\"batchsize\",\"interval\":0}",
         "scheduler.interval: must be an integer from 1 to 1e+12"},
        {"{\"type\":\"batchsize\",\"ema\":1}",
         "scheduler.ema: must be a number from 0 to 0.9999"},
        {"{\"type\":\"batchsize\",\"lr_rule\":\"cubic\"}",
         "scheduler.lr_rule: must be \"adascale\", \"sqrt\", \"linear\" or \"none\""},
        {"{\"type\":\"batchsize\",\"throughput\":\"gpu\"}",
         "scheduler.throughput: must be \"wall\" or \"cpu\""},
        {"{\"type\":\"batchsize\",\"grow_only\":1}",
         "scheduler.grow_only: must be true or false"},
        {"{\"type\":\"batchsize\",\"momentum\":1}",
         "scheduler.momentum: must be a number from 0 to 0.999"},
        {"{\"type\":\"batchsize\",\"plateau_window\":2}",
         "scheduler.plateau_window: must be 0 (off) or 3 to 64"},
        {"{\"type\":\"batchsize\",\"plateau_window\":65}",
         "scheduler.plateau_window: must be an integer from 0 to 64"},
        {"{\"type\":\"batchsize\",\"plateau_delta\":-1}",
         "scheduler.plateau_delta: must be a number from 0 to 1e+300"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spec_t *sp = s_spec(bad[i].sched);
        REQUIRE(sp);
        char err[256] = "";
        CHECK(sched_check(sp, err, sizeof err) == -1);
        CHECK_STR(err, bad[i].msg);
        spec_destroy(&sp);
    }
    spec_t *sp =
        s_spec("{\"type\":\"batchsize\",\"min\":33,\"max\":63,\"grid\":\"int\"}");
    char err[256] = "";
    CHECK(sched_check(sp, err, sizeof err) == 0);
    spec_destroy(&sp);
}

int main(void)
{
    RUN(estimator_recovers_a_known_b_simple);
    RUN(efficiency_and_adascale_gain_by_hand);
    RUN(goodput_picks_the_hand_computed_batch_and_adascale_lr);
    RUN(momentum_raises_the_noise_scale_of_the_efficiency);
    RUN(at_most_one_change_per_interval_and_lr_warmup);
    RUN(probe_interval_lets_the_first_and_the_exploring_changes_come_early);
    RUN(throughput_fit_keeps_a_marginal_cost);
    RUN(throughput_uses_the_fast_quartile_of_slowed_windows);
    RUN(cpu_throughput_uses_step_cpu_s);
    RUN(grow_only_never_shrinks);
    RUN(grow_only_goes_back_from_an_explore_measured_worse);
    RUN(grow_only_goes_back_only_soon_after_the_explore);
    RUN(an_explore_is_judged_before_its_warmup_ends);
    RUN(a_retry_starts_the_trial_state_over);
    RUN(save_restore_at_every_point_gives_the_same_decisions);
    RUN(plateau_grows_the_batch_holding_lr_then_halves_lr_at_max);
    RUN(plateau_halves_the_lr_where_twice_the_batch_costs_more_per_example);
    RUN(after_a_plateau_goodput_no_longer_decides);
    RUN(options_are_checked);
    TEST_DONE();
}
