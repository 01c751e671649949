/*  test_sched_bo.c - the bo scheduler (schedulers/sched_bo.c) through the
    scheduler interface: options, legal int/choice values only, SCHED_WAIT
    while the worker fits, determinism for a seed, save/restore mid-study,
    distinct parallel suggestions, failures, maximize, and a small study on
    a quadratic that must find the minimum to a stated tolerance.
*/
#include "jz_test.h"
#include "sched_testlib.h"
#include "schedulers/sched_bo.h"

#include <sys/resource.h>
#include <unistd.h>

static spec_t *s_spec(const char *sched, const char *space, const char *mode)
{
    return stl_spec("y", mode, sched, "{\"trials\":50,\"parallel\":4}", space);
}

static int s_waits; /* SCHED_WAIT answers seen */

/* Asks until the answer is not SCHED_WAIT (the worker thread is done). */
static int s_get(sched_t *s, long id, json_t **p)
{
    for (int i = 0; i < 200000; i++) {
        int rc = s->ops->suggest(s, id, p);
        if (rc != SCHED_WAIT)
            return rc;
        s_waits++;
        usleep(200);
    }
    return SCHED_ERR;
}

TEST(options_checked)
{
    char err[256];
    const char *bad[][2] = {
        {"{\"type\":\"bo\",\"foo\":1}", "scheduler.foo: unknown option"},
        {"{\"type\":\"bo\",\"acq\":\"pi\"}", "scheduler.acq: "},
        {"{\"type\":\"bo\",\"n_init\":0}", "scheduler.n_init: "},
        {"{\"type\":\"bo\",\"kappa\":-1}", "scheduler.kappa: "},
        {"{\"type\":\"bo\",\"fantasy\":1}", "scheduler.fantasy: "},
        {"{\"type\":\"bo\",\"warp\":\"log\"}",
         "scheduler.warp: must be \"auto\", \"power\", \"halfrank\" or \"none\""},
        {"{\"type\":\"bo\",\"lengthscale_prior\":\"flat\"}",
         "scheduler.lengthscale_prior: "},
        {"{\"type\":\"bo\",\"local\":1.5}", "scheduler.local: must be a number"},
        {"{\"type\":\"bo\",\"local\":\"end\"}", "scheduler.local: "},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spec_t *sp = s_spec(bad[i][0], STL_QSPACE, "min");
        REQUIRE(sp);
        stl_check_refused(sched_bo_new, sp, bad[i][1]);
        spec_destroy(&sp);
    }
    spec_t *sp = s_spec(
        "{\"type\":\"bo\",\"seed\":3,\"acq\":\"ucb\",\"kappa\":2,\"n_init\":4,"
        "\"fantasy\":\"liar\",\"warp\":\"none\",\"lengthscale_prior\":\"lognormal\"}",
        STL_QSPACE, "min");
    REQUIRE(sp);
    sched_t *s = sched_bo_new(sp, err, sizeof err);
    CHECK(s != NULL);
    CHECK_STR(s ? s->ops->name : NULL, "bo");
    sched_destroy(&s);
    CHECK(s == NULL);
    spec_destroy(&sp);
    const char *warps[] = {"{\"type\":\"bo\",\"warp\":\"auto\"}",
                           "{\"type\":\"bo\",\"warp\":\"power\"}",
                           "{\"type\":\"bo\",\"warp\":\"halfrank\"}"};
    for (size_t i = 0; i < sizeof warps / sizeof warps[0]; i++) {
        sp = s_spec(warps[i], STL_QSPACE, "min");
        REQUIRE(sp);
        s = sched_bo_new(sp, err, sizeof err);
        CHECK(s != NULL);
        sched_destroy(&s);
        spec_destroy(&sp);
    }
}

/* Runs a sequential study of n trials on f; returns the best value and
   appends every suggestion's text to log (when non-NULL). */
static double s_study(sched_t *s, int n, double (*f)(const json_t *), int maximize,
                      json_t *log)
{
    double best = maximize ? -INFINITY : INFINITY;
    for (long id = 1; id <= n; id++) {
        json_t *p = NULL;
        if (s_get(s, id, &p) != SCHED_OK) {
            JZT_FAIL("suggest failed at trial %ld", id);
            return NAN;
        }
        double v = f(p);
        best = maximize ? fmax(best, v) : fmin(best, v);
        s->ops->on_complete(s, id, p, SCHED_COMPLETED, v);
        if (log)
            json_array_append(log, p);
        json_decref(p);
    }
    return best;
}

TEST(quadratic_minimum)
{
    /* tolerance: within 30 trials the best value is below 1e-3, i.e. the
       best point is within 0.032 of the minimum on a [-1,1]^2 box */
    spec_t *sp = s_spec("{\"type\":\"bo\",\"seed\":1}", STL_QSPACE, "min");
    REQUIRE(sp);
    char err[256];
    sched_t *s = sched_bo_new(sp, err, sizeof err);
    REQUIRE(s);
    s_waits = 0;
    double best = s_study(s, 30, stl_quad, 0, NULL);
    CHECK(best < 1e-3);
    CHECK(s_waits > 0); /* the fits ran off the caller's thread */
    sched_destroy(&s);
    spec_destroy(&sp);
}

static double s_negquad(const json_t *p)
{
    return 5 - stl_quad(p);
}

TEST(quadratic_maximize_ucb)
{
    spec_t *sp =
        s_spec("{\"type\":\"bo\",\"seed\":2,\"acq\":\"ucb\"}", STL_QSPACE, "max");
    REQUIRE(sp);
    char err[256];
    sched_t *s = sched_bo_new(sp, err, sizeof err);
    REQUIRE(s);
    double best = s_study(s, 30, s_negquad, 1, NULL);
    CHECK(best > 5 - 1e-2);
    sched_destroy(&s);
    spec_destroy(&sp);
}

static const char *MIXED =
    "{\"lr\":{\"type\":\"float\",\"low\":1e-4,\"high\":1,\"log\":true},"
    "\"bs\":{\"type\":\"int\",\"low\":16,\"high\":4096,\"log\":true},"
    "\"layers\":{\"type\":\"int\",\"low\":1,\"high\":4},"
    "\"opt\":{\"type\":\"choice\",\"values\":[\"sgd\",\"lars\",\"lamb\"]},"
    "\"width\":{\"type\":\"choice\",\"values\":[64,128,256]}}";

static double s_mixed(const json_t *p)
{
    double lr = log10(stl_num(p, "lr")) + 2, bs = log2(stl_num(p, "bs")) - 9;
    const char *opt = json_string_value(json_object_get(p, "opt"));
    double o = !strcmp(opt, "lars") ? 0 : !strcmp(opt, "lamb") ? 0.3 : 1;
    return lr * lr + 0.1 * bs * bs + 0.2 * fabs(stl_num(p, "layers") - 3) + o +
           (stl_num(p, "width") == 128 ? 0 : 0.5);
}

TEST(legal_values_only)
{
    spec_t *sp = s_spec("{\"type\":\"bo\",\"seed\":5}", MIXED, "min");
    REQUIRE(sp);
    char err[256];
    sched_t *s = sched_bo_new(sp, err, sizeof err);
    REQUIRE(s);
    json_t *log = json_array();
    double best = s_study(s, 40, s_mixed, 0, log);
    CHECK(best < 0.5);
    size_t i;
    json_t *p;
    int bad = 0;
    json_array_foreach(log, i, p)
    {
        CHECK(json_object_size(p) == sp->nparams);
        for (size_t k = 0; k < sp->nparams; k++) {
            json_t *v = json_object_get(p, sp->params[k].name);
            if (!spec_param_legal(&sp->params[k], v))
                bad++;
            if (sp->params[k].type == SPEC_INT && !json_is_integer(v))
                bad++;
        }
    }
    CHECK(bad == 0);
    json_decref(log);
    sched_destroy(&s);
    spec_destroy(&sp);
}

static double s_fail_some(const json_t *p)
{
    return stl_num(p, "x") > 0.6 ? NAN : stl_quad(p);
}

TEST(determinism_and_failures)
{
    const char *sched = "{\"type\":\"bo\",\"seed\":11,\"n_init\":4}";
    json_t *logs[3];
    for (int r = 0; r < 3; r++) {
        spec_t *sp = s_spec(r < 2 ? sched : "{\"type\":\"bo\",\"seed\":12,\"n_init\":4}",
                            STL_QSPACE, "min");
        REQUIRE(sp);
        char err[256];
        sched_t *s = sched_bo_new(sp, err, sizeof err);
        REQUIRE(s);
        logs[r] = json_array();
        for (long id = 1; id <= 16; id++) {
            json_t *p = NULL;
            REQUIRE(s_get(s, id, &p) == SCHED_OK);
            double v = s_fail_some(p);
            s->ops->on_complete(s, id, p, isnan(v) ? SCHED_FAILED : SCHED_COMPLETED, v);
            json_array_append_new(logs[r], p);
        }
        sched_destroy(&s);
        spec_destroy(&sp);
    }
    CHECK(json_equal(logs[0], logs[1]));
    CHECK(!json_equal(logs[0], logs[2]));
    for (int r = 0; r < 3; r++)
        json_decref(logs[r]);
}

TEST(parallel_suggestions_differ)
{
    const char *fant[] = {"believer", "liar"};
    for (int f = 0; f < 2; f++) {
        char sched[128];
        snprintf(sched, sizeof sched,
                 "{\"type\":\"bo\",\"seed\":4,\"n_init\":5,\"fantasy\":\"%s\"}", fant[f]);
        spec_t *sp = s_spec(sched, STL_QSPACE, "min");
        REQUIRE(sp);
        char err[256];
        sched_t *s = sched_bo_new(sp, err, sizeof err);
        REQUIRE(s);
        s_study(s, 8, stl_quad, 0, NULL);
        json_t *p[4];
        for (int k = 0; k < 4; k++)
            REQUIRE(s_get(s, 100 + k, &p[k]) == SCHED_OK);
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < a; b++) {
                double dx = stl_num(p[a], "x") - stl_num(p[b], "x"),
                       dy = stl_num(p[a], "y") - stl_num(p[b], "y");
                if (!(sqrt(dx * dx + dy * dy) > 1e-2))
                    JZT_FAIL("%s %d %d dist %g", fant[f], a, b, sqrt(dx * dx + dy * dy));
            }
        for (int k = 0; k < 4; k++)
            json_decref(p[k]);
        sched_destroy(&s);
        spec_destroy(&sp);
    }
}

TEST(save_restore_continues)
{
    spec_t *sp = s_spec("{\"type\":\"bo\",\"seed\":9,\"n_init\":4}", MIXED, "max");
    REQUIRE(sp);
    char err[256];
    sched_t *a = sched_bo_new(sp, err, sizeof err),
            *b = sched_bo_new(sp, err, sizeof err);
    REQUIRE(a && b);
    json_t *p = NULL, *q = NULL;
    for (long id = 1; id <= 8; id++) {
        REQUIRE(s_get(a, id, &p) == SCHED_OK);
        a->ops->on_complete(a, id, p, id == 3 ? SCHED_FAILED : SCHED_COMPLETED,
                            id == 3 ? NAN : -s_mixed(p));
        json_decref(p);
    }
    REQUIRE(s_get(a, 9, &p) == SCHED_OK); /* left pending */
    /* a job in flight is not part of the state */
    CHECK(a->ops->suggest(a, 10, &q) == SCHED_WAIT);
    json_t *st = a->ops->save(a);
    REQUIRE(st);
    char *text = json_dumps(st, JSON_COMPACT);
    json_t *st2 = json_loads(text, 0, NULL); /* through text, as the store keeps it */
    free(text);
    REQUIRE(b->ops->restore(b, st2) == 0);
    json_t *bad = json_pack("{s:i}", "version", 1);
    CHECK(b->ops->restore(b, bad) == -1);
    json_decref(bad);
    json_t *st3 = b->ops->save(b);
    CHECK(json_equal(st, st3));
    json_decref(st3);
    for (long id = 10; id <= 14; id++) {
        json_t *pa = NULL, *pb = NULL;
        REQUIRE(s_get(a, id, &pa) == SCHED_OK);
        REQUIRE(s_get(b, id, &pb) == SCHED_OK);
        CHECK(json_equal(pa, pb));
        a->ops->on_complete(a, id, pa, SCHED_COMPLETED, -s_mixed(pa));
        b->ops->on_complete(b, id, pb, SCHED_COMPLETED, -s_mixed(pb));
        json_decref(pa);
        json_decref(pb);
    }
    /* the pending trial completes after the restart, with its params */
    a->ops->on_complete(a, 9, NULL, SCHED_STOPPED, -s_mixed(p));
    b->ops->on_complete(b, 9, NULL, SCHED_STOPPED, -s_mixed(p));
    json_t *fa = a->ops->save(a), *fb = b->ops->save(b);
    CHECK(json_equal(fa, fb));
    CHECK(json_array_size(json_object_get(fa, "pending")) == 0);
    CHECK(json_array_size(json_object_get(fa, "obs")) == 14);
    json_decref(fa);
    json_decref(fb);
    json_decref(p);
    json_decref(st);
    json_decref(st2);
    /* destroyed with a job in flight */
    CHECK(a->ops->suggest(a, 20, &q) == SCHED_WAIT);
    sched_destroy(&a);
    sched_destroy(&b);
    spec_destroy(&sp);
}

/* A study of the quadratic under the constraint g = x + y >= lo, through
   on_complete_metrics. Returns the best feasible value (INFINITY when
   none) and counts feasible trials from trial `from` on. */
static double s_con_study(const char *sched, double lo, int n, int from, int *first_feas,
                          int *nfeas)
{
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"name\":\"t\",\"objective\":{\"metric\":\"y\",\"mode\":\"min\"},"
             "\"constraints\":[{\"metric\":\"g\",\">=\":%g}],"
             "\"scheduler\":%s,\"budget\":{\"trials\":50},"
             "\"space\":%s,\"trial\":{\"command\":[\"true\"]}}",
             lo, sched, STL_QSPACE);
    json_t *j = json_loads(buf, 0, NULL);
    spec_error e;
    spec_t *sp = j ? spec_parse(j, 0, &e) : NULL;
    json_decref(j);
    char err[256];
    sched_t *s = sp ? sched_bo_new(sp, err, sizeof err) : NULL;
    double best = INFINITY;
    *first_feas = -1;
    *nfeas = 0;
    if (!s) {
        JZT_FAIL("constrained study: no scheduler");
        spec_destroy(&sp);
        return NAN;
    }
    for (long id = 1; id <= n; id++) {
        json_t *p = NULL;
        if (s_get(s, id, &p) != SCHED_OK) {
            JZT_FAIL("suggest failed at trial %ld", id);
            best = NAN;
            break;
        }
        double v = stl_quad(p), g = stl_num(p, "x") + stl_num(p, "y");
        json_t *m = json_pack("{s:f,s:f}", "y", v, "g", g);
        s->ops->on_complete_metrics(s, id, p, SCHED_COMPLETED, v, m);
        json_decref(m);
        json_decref(p);
        if (g >= lo) {
            best = fmin(best, v);
            if (*first_feas < 0)
                *first_feas = (int)id;
            if (id >= from)
                (*nfeas)++;
        }
    }
    sched_destroy(&s);
    spec_destroy(&sp);
    return best;
}

TEST(constraints_probability_of_feasibility)
{
    /* the unconstrained minimum (0.3, -0.2) breaks x + y >= 0.5; the
       constrained one is (0.5, 0) with value 0.08 */
    int first, nfeas;
    double best =
        s_con_study("{\"type\":\"bo\",\"seed\":2}", 0.5, 30, 11, &first, &nfeas);
    CHECK(best >= 0.08 - 1e-9 && best < 0.08 + 2e-3);
    CHECK(nfeas >= 12); /* of the 20 model-based trials, most are feasible */
    /* the penalty model is still selectable and finds the region too */
    double pen =
        s_con_study("{\"type\":\"bo\",\"seed\":2,\"constraint_model\":\"penalty\"}", 0.5,
                    30, 11, &first, &nfeas);
    CHECK(pen >= 0.08 - 1e-9 && pen < 0.2);
    /* a small feasible corner (x + y >= 1.6: 2% of the box) that the
       initial design misses: the probability of feasibility alone leads
       there, and then to the constrained minimum on the box's edge,
       (1, 0.6) with value 1.13 */
    best = s_con_study("{\"type\":\"bo\",\"seed\":4}", 1.6, 30, 1, &first, &nfeas);
    CHECK(first > 0 && first <= 15);
    CHECK(best >= 1.13 - 1e-9 && best < 1.13 + 0.01);
    /* an unknown model is refused */
    spec_t *sp =
        s_spec("{\"type\":\"bo\",\"constraint_model\":\"both\"}", STL_QSPACE, "min");
    REQUIRE(sp);
    char err[256] = "";
    CHECK(sched_bo_new(sp, err, sizeof err) == NULL);
    CHECK(strncmp(err, "scheduler.constraint_model: ", 28) == 0);
    spec_destroy(&sp);
}

/* The end-game's rule and box (sched_bo.h), then a study whose last half
   is local: every local suggestion lies in the box around the incumbent
   that the saved state describes (its theta and trust region), the region
   follows the rule trial by trial, and a restored scheduler continues
   identically. */
TEST(local_trust_region)
{
    double len = 0.2;
    int succ = 0, fail = 0;
    sched__bo_tr_update(&len, &succ, &fail, 1);
    CHECK(len == 0.2 && succ == 1 && fail == 0);
    sched__bo_tr_update(&len, &succ, &fail, 1); /* two in a row: doubles */
    CHECK(len == 0.4 && succ == 0);
    sched__bo_tr_update(&len, &succ, &fail, 1);
    sched__bo_tr_update(&len, &succ, &fail, 0); /* a failure resets the successes */
    CHECK(len == 0.4 && succ == 0 && fail == 1);
    sched__bo_tr_update(&len, &succ, &fail, 0); /* two failures: halves */
    CHECK(len == 0.2 && fail == 0);
    for (int i = 0; i < 40; i++)
        sched__bo_tr_update(&len, &succ, &fail, 0);
    CHECK(len > 0 && len < 0.01); /* shrinks to its floor, not to 0 */
    double floor = len;
    sched__bo_tr_update(&len, &succ, &fail, 0);
    sched__bo_tr_update(&len, &succ, &fail, 0);
    CHECK(len == floor);
    for (int i = 0; i < 40; i++)
        sched__bo_tr_update(&len, &succ, &fail, 1);
    CHECK(len <= 1 && len >= 0.5); /* grows to its ceiling */

    /* the box: sides in proportion to the lengthscales, geometric mean len,
       cut to [0, 1]; dimension 3 (not in the mask) is left whole */
    double theta[4 + 2] = {log(0.1), log(0.4), log(0.25), log(9), 0, 0};
    double x0[4] = {0.5, 0.5, 0.02, 0.5}, lo[4], hi[4];
    unsigned char mask[4] = {1, 1, 1, 0};
    sched__bo_tr_box(4, mask, theta, x0, 0.2, lo, hi); /* geometric mean 0.2154 */
    double g = cbrt(0.1 * 0.4 * 0.25);
    CHECK(fabs((hi[0] - lo[0]) - 0.2 * 0.1 / g) < 1e-12);
    CHECK(fabs((hi[1] - lo[1]) - 0.2 * 0.4 / g) < 1e-12);
    CHECK(fabs(lo[0] + hi[0] - 1) < 1e-12); /* centred on x0 */
    CHECK(lo[2] == 0 && fabs(hi[2] - (0.02 + 0.1 * 0.25 / g)) < 1e-12);
    CHECK(lo[3] == 0 && hi[3] == 1);

    /* a study of 30 trials, the last half local */
    const char *sched = "{\"type\":\"bo\",\"seed\":4,\"local\":0.5}";
    spec_t *sp = s_spec(sched, STL_QSPACE, "min");
    REQUIRE(sp);
    REQUIRE(sp->trials == 50);
    spec_destroy(&sp);
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"name\":\"t\",\"objective\":{\"metric\":\"y\",\"mode\":\"min\"},"
             "\"scheduler\":%s,\"budget\":{\"trials\":30},"
             "\"space\":%s,\"trial\":{\"command\":[\"true\"]}}",
             sched, STL_QSPACE);
    json_t *j = json_loads(buf, 0, NULL);
    spec_error e;
    sp = j ? spec_parse(j, 0, &e) : NULL;
    json_decref(j);
    REQUIRE(sp);
    char err[256];
    sched_t *s = sched_bo_new(sp, err, sizeof err);
    REQUIRE(s);
    double tl = 0.2, best = INFINITY, worst = -INFINITY;
    int ts = 0, tf = 0, nlocal = 0, shrunk = 0;
    for (long id = 1; id <= 30; id++) {
        json_t *p = NULL;
        REQUIRE(s_get(s, id, &p) == SCHED_OK);
        json_t *st = s->ops->save(s);
        json_t *pend = json_array_get(json_object_get(st, "pending"), 0);
        int local = json_is_true(json_object_get(pend, "local"));
        CHECK(local == (id > 15)); /* trials 16..30 */
        double u[2] = {(stl_num(p, "x") + 1) / 2, (stl_num(p, "y") + 1) / 2};
        if (local) {
            nlocal++;
            /* the region the suggestion came from: the saved length (the
               rule's, checked against ours), the fitted theta, the best
               observation */
            json_t *tr = json_object_get(st, "trust");
            CHECK(fabs(json_number_value(json_object_get(tr, "len")) - tl) < 1e-15);
            json_t *th = json_object_get(st, "theta");
            double t[4], c[2] = {0, 0}, bv = INFINITY;
            for (int i = 0; i < 4; i++)
                t[i] = json_number_value(json_array_get(th, (size_t)i));
            size_t i;
            json_t *o;
            json_array_foreach(json_object_get(st, "obs"), i, o)
            {
                double v = json_number_value(json_object_get(o, "value"));
                if (v < bv) {
                    json_t *op = json_object_get(o, "params");
                    bv = v;
                    c[0] = (stl_num(op, "x") + 1) / 2;
                    c[1] = (stl_num(op, "y") + 1) / 2;
                }
            }
            double blo[2], bhi[2];
            sched__bo_tr_box(2, NULL, t, c, tl, blo, bhi);
            for (int k = 0; k < 2; k++)
                if (!(u[k] >= blo[k] - 1e-12 && u[k] <= bhi[k] + 1e-12))
                    JZT_FAIL("trial %ld: %g outside [%g, %g] on dimension %d", id, u[k],
                             blo[k], bhi[k], k);
        }
        json_decref(st);
        double v = stl_quad(p);
        if (local) {
            double before = tl;
            sched__bo_tr_update(&tl, &ts, &tf, v < best - 1e-3 * (worst - best));
            shrunk += tl < before;
        }
        best = fmin(best, v);
        worst = fmax(worst, v);
        s->ops->on_complete(s, id, p, SCHED_COMPLETED, v);
        json_decref(p);
    }
    CHECK(nlocal == 15);
    CHECK(shrunk > 0); /* on a quadratic the region closes in */
    CHECK(best < 1e-5);
    json_t *st = s->ops->save(s);
    CHECK(fabs(json_number_value(json_object_get(json_object_get(st, "trust"), "len")) -
               tl) < 1e-15);
    json_decref(st);
    sched_destroy(&s);

    /* save in the local phase with a local trial pending, restore into a
       fresh scheduler: both continue identically */
    sched_t *a = sched_bo_new(sp, err, sizeof err),
            *b = sched_bo_new(sp, err, sizeof err);
    REQUIRE(a && b);
    json_t *p = NULL;
    for (long id = 1; id <= 20; id++) {
        REQUIRE(s_get(a, id, &p) == SCHED_OK);
        if (id < 20)
            a->ops->on_complete(a, id, p, SCHED_COMPLETED, stl_quad(p));
        if (id < 20)
            json_decref(p);
    }
    st = a->ops->save(a);
    REQUIRE(b->ops->restore(b, st) == 0);
    json_t *st2 = b->ops->save(b);
    CHECK(json_equal(st, st2));
    CHECK(json_is_true(
        json_object_get(json_array_get(json_object_get(st2, "pending"), 0), "local")));
    json_decref(st2);
    json_t *bad = json_deep_copy(st);
    json_object_set_new(json_object_get(bad, "trust"), "len", json_real(-1));
    CHECK(b->ops->restore(b, bad) == -1);
    json_decref(bad);
    json_decref(st);
    a->ops->on_complete(a, 20, NULL, SCHED_COMPLETED, stl_quad(p));
    b->ops->on_complete(b, 20, NULL, SCHED_COMPLETED, stl_quad(p));
    json_decref(p);
    for (long id = 21; id <= 24; id++) {
        json_t *pa = NULL, *pb = NULL;
        REQUIRE(s_get(a, id, &pa) == SCHED_OK);
        REQUIRE(s_get(b, id, &pb) == SCHED_OK);
        CHECK(json_equal(pa, pb));
        a->ops->on_complete(a, id, pa, SCHED_COMPLETED, stl_quad(pa));
        b->ops->on_complete(b, id, pb, SCHED_COMPLETED, stl_quad(pb));
        json_decref(pa);
        json_decref(pb);
    }
    json_t *fa = a->ops->save(a), *fb = b->ops->save(b);
    CHECK(json_equal(fa, fb));
    json_decref(fa);
    json_decref(fb);
    /* `study extend` raises budget.trials (the controller updates the
       spec in place): 24 suggestions of 60 are before the new end-game
       (from 42), so the next one is global and the region starts afresh */
    sp->trials = 60;
    REQUIRE(s_get(a, 25, &p) == SCHED_OK);
    st = a->ops->save(a);
    CHECK(!json_is_true(
        json_object_get(json_array_get(json_object_get(st, "pending"), 0), "local")));
    CHECK(json_number_value(json_object_get(json_object_get(st, "trust"), "len")) == 0.2);
    json_decref(st);
    json_decref(p);
    sched_destroy(&a);
    sched_destroy(&b);
    spec_destroy(&sp);
}

/* ---- a space too wide for one-hot (docs/spec.md, Limits) ---- */

static double s_peak_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

/* A spec with a float "x" and a choice "c" of n integer values (built as
   JSON: too long for s_spec's buffer). */
static spec_t *s_wide_spec(int n, int small)
{
    json_t *vals = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(vals, json_integer(i));
    json_t *space =
        json_pack("{s:{s:s, s:f, s:f}, s:{s:s, s:o}}", "x", "type", "float", "low", 0.0,
                  "high", 1.0, "c", "type", "choice", "values", vals);
    if (small)
        json_object_set_new(
            space, "k",
            json_pack("{s:s, s:[s,s,s]}", "type", "choice", "values", "a", "b", "c"));
    json_t *j =
        json_pack("{s:s, s:{s:s, s:s}, s:{s:s, s:i, s:i}, s:{s:i, s:i}, s:o, "
                  "s:{s:[s]}}",
                  "name", "wide", "objective", "metric", "y", "mode", "min", "scheduler",
                  "type", "bo", "seed", 5, "n_init", 3, "budget", "trials", 50,
                  "parallel", 2, "space", space, "trial", "command", "true");
    spec_error err;
    spec_t *sp = j ? spec_parse(j, 0, &err) : NULL;
    if (j && !sp) {
        char eb[400];
        printf("spec: %s\n", spec_strerror(&err, eb, sizeof eb));
    }
    json_decref(j);
    return sp;
}

/* A choice of 9 997 values (with a 3-value one, the most a spec may hold) is one ordered
   dimension, not 10 000 one-hot ones: a fit stays small (one took 2 GB at
   100 000 values, 200 MB at 10 000), the saved state holds a few
   hyperparameters, not 10 002, and suggestions are legal values. Small
   choices stay one-hot. */
TEST(wide_choice_is_one_ordered_dimension)
{
    char err[256];
    spec_t *sp = s_wide_spec(5, 1);
    REQUIRE(sp);
    sched_t *s = sched_bo_new(sp, err, sizeof err);
    REQUIRE(s);
    CHECK(sched__bo_dims(s) == 1 + 5 + 3); /* all one-hot */
    sched_destroy(&s);
    spec_destroy(&sp);

    sp = s_wide_spec(SPEC_MAX_CHOICE_VALUES - 3, 1);
    REQUIRE(sp);
    s = sched_bo_new(sp, err, sizeof err);
    REQUIRE(s);
    CHECK(sched__bo_dims(s) == 1 + 1 + 3); /* x, c ordered, k one-hot */
    double before = s_peak_mib();
    for (long id = 1; id <= 8; id++) {
        json_t *p = NULL;
        REQUIRE(s_get(s, id, &p) == SCHED_OK);
        json_t *c = json_object_get(p, "c");
        CHECK(json_is_integer(c) && json_integer_value(c) >= 0 &&
              json_integer_value(c) < SPEC_MAX_CHOICE_VALUES - 3);
        /* the best near c = 7000 */
        double v =
            fabs((double)json_integer_value(c) - 7000) / 10000 + stl_num(p, "x") * 0.1;
        s->ops->on_complete(s, id, p, SCHED_COMPLETED, v);
        json_decref(p);
    }
    double grew = s_peak_mib() - before;
    printf("  wide choice: peak RSS grew %.1f MiB over 5 fits\n", grew);
    CHECK(grew < 64);
    json_t *st = s->ops->save(s);
    REQUIRE(st);
    CHECK(json_array_size(json_object_get(st, "theta")) == 5 + 2);
    /* a state saved under the one-hot encoding (10 003 hyperparameters)
       restores, its warm start dropped */
    json_t *old = json_deep_copy(st);
    json_t *th = json_array();
    for (int i = 0; i < 10003; i++)
        json_array_append_new(th, json_real(0.1));
    json_object_set_new(old, "theta", th);
    sched_t *r = sched_bo_new(sp, err, sizeof err);
    REQUIRE(r);
    CHECK(r->ops->restore(r, old) == 0);
    json_t *p = NULL;
    CHECK(s_get(r, 9, &p) == SCHED_OK);
    json_decref(p);
    sched_destroy(&r);
    json_decref(old);
    json_decref(st);
    sched_destroy(&s);
    spec_destroy(&sp);
}

int main(void)
{
    RUN(options_checked);
    RUN(quadratic_minimum);
    RUN(quadratic_maximize_ucb);
    RUN(legal_values_only);
    RUN(determinism_and_failures);
    RUN(parallel_suggestions_differ);
    RUN(save_restore_continues);
    RUN(constraints_probability_of_feasibility);
    RUN(local_trust_region);
    RUN(wide_choice_is_one_ordered_dimension);
    TEST_DONE();
}
