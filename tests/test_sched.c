/*  test_sched.c - the scheduler registry and the random and grid
    schedulers (schedulers/sched.c, sched_random.c, sched_grid.c) through
    the sched_ops interface: option checks with "scheduler.xxx" messages,
    legal values, reproducibility for a seed, log-uniform sampling,
    the exact cartesian product of a grid, shuffling, and save/restore
    continuing the same sequence.
*/
#include "jz_test.h"
#include "sched_testlib.h"

#include <math.h>

static spec_t *s_spec(const char *sched, const char *space)
{
    return stl_spec("y", "min", sched, "{\"trials\":50}", space);
}

static sched_t *s_new(const spec_t *sp)
{
    char err[256] = "";
    sched_t *s = sched_new(sp, err, sizeof err);
    if (!s)
        printf("sched_new: %s\n", err);
    return s;
}

/* Suggests n parameter sets into out[] (caller decrefs). Returns how many
   came back SCHED_OK before anything else. */
static int s_take(sched_t *s, json_t **out, int n, long first_id)
{
    for (int i = 0; i < n; i++)
        if (s->ops->suggest(s, first_id + i, &out[i]) != SCHED_OK)
            return i;
    return n;
}

static void s_free_all(json_t **a, int n)
{
    for (int i = 0; i < n; i++)
        json_decref(a[i]);
}

static const char *SPACE5 =
    "{\"lr\":{\"type\":\"float\",\"low\":1e-4,\"high\":1,\"log\":true},"
    "\"m\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
    "\"bs\":{\"type\":\"int\",\"low\":8,\"high\":4096,\"log\":true},"
    "\"k\":{\"type\":\"int\",\"low\":1,\"high\":4},"
    "\"opt\":{\"type\":\"choice\",\"values\":[\"sgd\",\"adam\",3]}}";

/* ---- registry and options ----------------------------------------------- */

TEST(registry_refusals)
{
    struct {
        const char *sched, *want;
    } cases[] = {
        {"{\"type\":\"nope\"}",
         "scheduler.type: unknown scheduler \"nope\" (expected one of: random grid bo"},
        {"{\"type\":\"Random\"}", "scheduler.type: unknown scheduler \"Random\""},
        {"{\"type\":\"random\",\"points\":3}",
         "scheduler.points: unknown option for the random scheduler"},
        {"{\"type\":\"random\",\"seed\":1,\"shuffle\":true}",
         "scheduler.shuffle: unknown option for the random scheduler"},
        {"{\"type\":\"grid\",\"foo\":1}",
         "scheduler.foo: unknown option for the grid scheduler"},
        {"{\"type\":\"grid\",\"points\":0}",
         "scheduler.points: must be an integer from 1 to 1000"},
        {"{\"type\":\"grid\",\"points\":1001}",
         "scheduler.points: must be an integer from 1 to 1000"},
        {"{\"type\":\"grid\",\"points\":\"3\"}",
         "scheduler.points: must be an integer from 1 to 1000"},
        {"{\"type\":\"grid\",\"points\":2.5}",
         "scheduler.points: must be an integer from 1 to 1000"},
        {"{\"type\":\"grid\",\"shuffle\":1}", "scheduler.shuffle: must be true or false"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spec_t *sp = s_spec(cases[i].sched, SPACE5);
        if (!sp) {
            JZT_FAIL("case %zu: spec refused", i);
            continue;
        }
        char err[256] = "";
        sched_t *s = sched_new(sp, err, sizeof err);
        if (s) {
            JZT_FAIL("case %zu (%s) accepted", i, cases[i].sched);
            sched_destroy(&s);
        } else if (strncmp(err, cases[i].want, strlen(cases[i].want))) {
            JZT_FAIL("case %zu: \"%s\", expected \"%s...\"", i, err, cases[i].want);
        }
        char err2[256] = "";
        CHECK(sched_check(sp, err2, sizeof err2) == -1);
        CHECK_STR(err2, err);
        /* a short buffer is cut, not overrun */
        char tiny[12];
        memset(tiny, 'x', sizeof tiny);
        CHECK(sched_new(sp, tiny, sizeof tiny) == NULL);
        CHECK(memchr(tiny, 0, sizeof tiny) != NULL);
        spec_destroy(&sp);
    }
}

TEST(grid_too_large)
{
    spec_t *sp = s_spec("{\"type\":\"grid\",\"points\":1000}",
                        "{\"a\":{\"type\":\"float\",\"low\":0,\"high\":1},"
                        "\"b\":{\"type\":\"float\",\"low\":0,\"high\":1},"
                        "\"c\":{\"type\":\"float\",\"low\":0,\"high\":1}}");
    REQUIRE(sp);
    char err[256] = "";
    CHECK(sched_new(sp, err, sizeof err) == NULL);
    CHECK(strstr(err, "scheduler") == err);
    CHECK(strstr(err, "more than 10000000 points") != NULL);
    spec_destroy(&sp);
}

TEST(accepted_options)
{
    const char *ok[] = {
        "{\"type\":\"random\"}", "{\"type\":\"random\",\"seed\":5}",
        "{\"type\":\"grid\"}",
        "{\"type\":\"grid\",\"points\":1000,\"shuffle\":false,\"seed\":2}"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        spec_t *sp = s_spec(ok[i], "{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1}}");
        REQUIRE(sp);
        char err[256] = "";
        CHECK(sched_check(sp, err, sizeof err) == 0);
        sched_t *s = sched_new(sp, err, sizeof err);
        CHECK(s != NULL);
        if (s)
            CHECK_STR(s->ops->name, sp->sched_type);
        sched_destroy(&s);
        CHECK(s == NULL);
        sched_destroy(&s);
        sched_destroy(NULL);
        spec_destroy(&sp);
    }
}

TEST(rng)
{
    sched_rng a, b, c;
    sched_rng_seed(&a, 42, 0);
    sched_rng_seed(&b, 42, 0);
    sched_rng_seed(&c, 42, 1);
    int same_c = 0;
    double sum = 0;
    for (int i = 0; i < 10000; i++) {
        unsigned long long x = sched_rng_u64(&a);
        CHECK(x == sched_rng_u64(&b));
        same_c += x == sched_rng_u64(&c);
        double u = sched_rng_uniform(&a);
        sched_rng_uniform(&b);
        CHECK(u >= 0 && u < 1);
        sum += u;
    }
    CHECK(same_c == 0);
    CHECK_NEAR(sum / 10000, 0.5, 0.02); /* sd of the mean: 0.0029 */
    sched_instr in = {.args = json_object()};
    sched_instr_fini(&in);
    CHECK(in.args == NULL);
    sched_instr_fini(&in);
    sched_instr_fini(NULL);
}

/* ---- random ----------------------------------------------------------------- */

TEST(random_legal_and_reproducible)
{
    spec_t *sp = s_spec("{\"type\":\"random\",\"seed\":11}", SPACE5);
    spec_t *sp2 = s_spec("{\"type\":\"random\",\"seed\":12}", SPACE5);
    REQUIRE(sp && sp2);
    sched_t *a = s_new(sp), *b = s_new(sp), *c = s_new(sp2);
    REQUIRE(a && b && c);
    enum { N = 200 };
    json_t *pa[N], *pb[N], *pc[N];
    REQUIRE(s_take(a, pa, N, 1) == N);
    REQUIRE(s_take(b, pb, N, 1000) == N); /* trial ids do not matter */
    REQUIRE(s_take(c, pc, N, 1) == N);
    int differ = 0, seen_choice[3] = {0}, seen_k[4] = {0};
    for (int i = 0; i < N; i++) {
        CHECK(json_equal(pa[i], pb[i]));
        differ += !json_equal(pa[i], pc[i]);
        REQUIRE(json_object_size(pa[i]) == sp->nparams);
        for (size_t k = 0; k < sp->nparams; k++) {
            json_t *v = json_object_get(pa[i], sp->params[k].name);
            if (!spec_param_legal(&sp->params[k], v)) {
                char *t = json_dumps(pa[i], JSON_COMPACT);
                JZT_FAIL("illegal %s in %s", sp->params[k].name, t);
                free(t);
            }
        }
        json_t *o = json_object_get(pa[i], "opt");
        for (size_t k = 0; k < 3; k++)
            seen_choice[k] += json_equal(o, json_array_get(sp->params[4].values, k));
        seen_k[json_integer_value(json_object_get(pa[i], "k")) - 1]++;
        if (i > 0)
            CHECK(!json_equal(pa[i], pa[i - 1]));
    }
    CHECK(differ == N);
    for (int k = 0; k < 3; k++)
        CHECK(seen_choice[k] > N / 6); /* expected N/3 each */
    for (int k = 0; k < 4; k++)
        CHECK(seen_k[k] > N / 8); /* expected N/4 each */
    s_free_all(pa, N);
    s_free_all(pb, N);
    s_free_all(pc, N);
    /* random search ignores results: it has no hooks */
    CHECK(a->ops->on_metric == NULL && a->ops->on_complete == NULL);
    sched_destroy(&a);
    sched_destroy(&b);
    sched_destroy(&c);
    spec_destroy(&sp);
    spec_destroy(&sp2);
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Log parameters are log-uniform: the median of log10(lr) over [1e-4, 1]
   is the geometric midpoint -2. Tolerance 0.15 in log10: the standard
   error of the median of n = 4001 uniform draws over a range of 4 is
   4/(2*sqrt(n)) = 0.032, so 0.15 is over 4 standard errors. The
   quartiles (-3, -1) get the same check, which a linear-uniform sampler
   (median log10 = log10(0.5) = -0.3) fails by far. */
TEST(random_log_uniform)
{
    spec_t *sp =
        s_spec("{\"type\":\"random\",\"seed\":3}",
               "{\"lr\":{\"type\":\"float\",\"low\":1e-4,\"high\":1,\"log\":true},"
               "\"bs\":{\"type\":\"int\",\"low\":1,\"high\":10000,\"log\":true}}");
    REQUIRE(sp);
    sched_t *s = s_new(sp);
    REQUIRE(s);
    enum { N = 4001 };
    double *lr = malloc(N * sizeof *lr), *bs = malloc(N * sizeof *bs);
    for (int i = 0; i < N; i++) {
        json_t *p;
        REQUIRE(s->ops->suggest(s, i, &p) == SCHED_OK);
        lr[i] = log10(json_real_value(json_object_get(p, "lr")));
        bs[i] = log10((double)json_integer_value(json_object_get(p, "bs")));
        json_decref(p);
    }
    qsort(lr, N, sizeof *lr, s_cmp_double);
    qsort(bs, N, sizeof *bs, s_cmp_double);
    CHECK_NEAR(lr[N / 2], -2.0, 0.15);
    CHECK_NEAR(lr[N / 4], -3.0, 0.15);
    CHECK_NEAR(lr[3 * N / 4], -1.0, 0.15);
    CHECK(lr[0] >= -4 && lr[N - 1] <= 0);
    /* int log over [1, 10000]: midpoint log10 is 2 (integer rounding moves
       it by far less than the tolerance) */
    CHECK_NEAR(bs[N / 2], 2.0, 0.15);
    free(lr);
    free(bs);
    sched_destroy(&s);
    spec_destroy(&sp);
}

TEST(random_save_restore)
{
    spec_t *sp = s_spec("{\"type\":\"random\",\"seed\":99}", SPACE5);
    REQUIRE(sp);
    sched_t *a = s_new(sp);
    REQUIRE(a);
    json_t *first[10], *rest_a[10], *rest_b[10];
    REQUIRE(s_take(a, first, 10, 1) == 10);
    json_t *state = a->ops->save(a);
    REQUIRE(state);
    /* through text, as the store keeps it */
    char *text = json_dumps(state, JSON_COMPACT);
    json_t *back = json_loads(text, 0, NULL);
    free(text);
    json_decref(state);
    REQUIRE(s_take(a, rest_a, 10, 11) == 10);

    sched_t *b = s_new(sp);
    REQUIRE(b);
    CHECK(b->ops->restore(b, back) == 0);
    REQUIRE(s_take(b, rest_b, 10, 11) == 10);
    for (int i = 0; i < 10; i++) {
        CHECK(json_equal(rest_a[i], rest_b[i]));
        CHECK(!json_equal(rest_b[i], first[i]));
    }
    json_decref(back);
    /* bad states are refused */
    const char *bad[] = {"{}", "{\"count\":-1}", "{\"count\":\"3\"}", "[]",
                         "{\"next\":2}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = json_loads(bad[i], 0, NULL);
        CHECK(b->ops->restore(b, j) == -1);
        json_decref(j);
    }
    s_free_all(first, 10);
    s_free_all(rest_a, 10);
    s_free_all(rest_b, 10);
    sched_destroy(&a);
    sched_destroy(&b);
    spec_destroy(&sp);
}

/* ---- grid -------------------------------------------------------------------- */

/* Collects every suggestion until SCHED_DONE (at most max). */
static int s_drain(sched_t *s, json_t **out, int max)
{
    int n = 0;
    json_t *p;
    int rc;
    while (n < max && (rc = s->ops->suggest(s, n, &p)) == SCHED_OK)
        out[n++] = p;
    return n;
}

static int s_index_of(json_t **a, int n, const json_t *v)
{
    for (int i = 0; i < n; i++)
        if (json_equal(a[i], v))
            return i;
    return -1;
}

static const char *GRID_SPACE =
    "{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1},"
    "\"n\":{\"type\":\"int\",\"low\":1,\"high\":2},"
    "\"opt\":{\"type\":\"choice\",\"values\":[\"a\",\"b\",\"c\"]}}";

TEST(grid_cartesian_product)
{
    spec_t *sp = s_spec("{\"type\":\"grid\",\"points\":3}", GRID_SPACE);
    REQUIRE(sp);
    sched_t *s = s_new(sp);
    REQUIRE(s);
    json_t *got[64];
    int n = s_drain(s, got, 64);
    CHECK(n == 18); /* 3 x 2 x 3 */
    /* exactly the product, each once */
    const double xs[] = {0, 0.5, 1};
    const char *opts[] = {"a", "b", "c"};
    int found = 0;
    for (int i = 0; i < 3; i++)
        for (int k = 1; k <= 2; k++)
            for (int o = 0; o < 3; o++) {
                json_t *want =
                    json_pack("{s:f, s:i, s:s}", "x", xs[i], "n", k, "opt", opts[o]);
                int at = s_index_of(got, n, want);
                if (at < 0)
                    JZT_FAIL("missing x=%g n=%d opt=%s", xs[i], k, opts[o]);
                else
                    found++;
                json_decref(want);
            }
    CHECK(found == 18);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            CHECK(!json_equal(got[i], got[j]));
    /* the last parameter varies fastest */
    if (n == 18) {
        CHECK_STR(json_string_value(json_object_get(got[0], "opt")), "a");
        CHECK_STR(json_string_value(json_object_get(got[1], "opt")), "b");
        CHECK(json_integer_value(json_object_get(got[3], "n")) == 2);
        CHECK_NEAR(json_real_value(json_object_get(got[6], "x")), 0.5, 0);
    }
    /* done stays done */
    json_t *p = NULL;
    CHECK(s->ops->suggest(s, 100, &p) == SCHED_DONE);
    CHECK(s->ops->suggest(s, 101, &p) == SCHED_DONE);
    CHECK(p == NULL);
    s_free_all(got, n);
    sched_destroy(&s);
    spec_destroy(&sp);
}

TEST(grid_values_per_type)
{
    /* default 3 points; a small int range takes all its values; a log
       float is spaced on the log scale; points = 1 takes the middle */
    spec_t *sp =
        s_spec("{\"type\":\"grid\",\"points\":5}",
               "{\"n\":{\"type\":\"int\",\"low\":-1,\"high\":1},"
               "\"lr\":{\"type\":\"float\",\"low\":1e-4,\"high\":1,\"log\":true}}");
    REQUIRE(sp);
    sched_t *s = s_new(sp);
    REQUIRE(s);
    json_t *got[64];
    int n = s_drain(s, got, 64);
    REQUIRE(n == 15);
    for (int i = 0; i < 15; i++) {
        CHECK(json_integer_value(json_object_get(got[i], "n")) == -1 + i / 5);
        CHECK_NEAR(json_real_value(json_object_get(got[i], "lr")), pow(10, -4 + i % 5),
                   1e-9);
    }
    s_free_all(got, n);
    sched_destroy(&s);
    spec_destroy(&sp);

    sp = s_spec("{\"type\":\"grid\"}",
                "{\"n\":{\"type\":\"int\",\"low\":0,\"high\":100},"
                "\"c\":{\"type\":\"choice\",\"values\":[1,2,3,4,5]}}");
    REQUIRE(sp);
    s = s_new(sp);
    REQUIRE(s);
    n = s_drain(s, got, 64);
    REQUIRE(n == 15); /* 3 points x 5 choices */
    CHECK(json_integer_value(json_object_get(got[0], "n")) == 0);
    CHECK(json_integer_value(json_object_get(got[5], "n")) == 50);
    CHECK(json_integer_value(json_object_get(got[10], "n")) == 100);
    for (int i = 0; i < 5; i++)
        CHECK(json_integer_value(json_object_get(got[i], "c")) == i + 1);
    s_free_all(got, n);
    sched_destroy(&s);
    spec_destroy(&sp);

    /* an int log range is spaced on the log scale from low to high (1, 8,
       64 and 1, 32, 1000; not 1, 6, 64 and 1, 22, 1000, which spacing its
       cells [low-0.5, high+0.5] gave) */
    sp = s_spec("{\"type\":\"grid\"}",
                "{\"n\":{\"type\":\"int\",\"low\":1,\"high\":64,\"log\":true},"
                "\"m\":{\"type\":\"int\",\"low\":1,\"high\":1000,\"log\":true}}");
    REQUIRE(sp);
    s = s_new(sp);
    REQUIRE(s);
    n = s_drain(s, got, 64);
    REQUIRE(n == 9);
    const long ns[] = {1, 8, 64}, ms[] = {1, 32, 1000};
    for (int i = 0; i < 9; i++) {
        CHECK(json_integer_value(json_object_get(got[i], "n")) == ns[i / 3]);
        CHECK(json_integer_value(json_object_get(got[i], "m")) == ms[i % 3]);
    }
    s_free_all(got, n);
    sched_destroy(&s);
    spec_destroy(&sp);

    sp = s_spec("{\"type\":\"grid\",\"points\":1}",
                "{\"x\":{\"type\":\"float\",\"low\":2,\"high\":4},"
                "\"o\":{\"type\":\"choice\",\"values\":[\"p\",\"q\"]}}");
    REQUIRE(sp);
    s = s_new(sp);
    REQUIRE(s);
    n = s_drain(s, got, 64);
    REQUIRE(n == 2);
    CHECK_NEAR(json_real_value(json_object_get(got[0], "x")), 3, 0);
    CHECK_NEAR(json_real_value(json_object_get(got[1], "x")), 3, 0);
    s_free_all(got, n);
    sched_destroy(&s);
    spec_destroy(&sp);
}

/* No grid point may repeat, even where the rounding of a log int range
   or a single-valued range would map several grid steps to one value. */
TEST(grid_no_repeated_points)
{
    const char *spaces[] = {
        "{\"b\":{\"type\":\"int\",\"low\":1,\"high\":100,\"log\":true}}",
        "{\"b\":{\"type\":\"int\",\"low\":1,\"high\":30}}",
        "{\"f\":{\"type\":\"float\",\"low\":0.5,\"high\":0.5},"
        "\"o\":{\"type\":\"choice\",\"values\":[\"p\",\"q\"]}}",
    };
    for (size_t c = 0; c < sizeof spaces / sizeof spaces[0]; c++) {
        spec_t *sp = s_spec("{\"type\":\"grid\",\"points\":20}", spaces[c]);
        REQUIRE(sp);
        sched_t *s = s_new(sp);
        REQUIRE(s);
        json_t *got[512];
        int n = s_drain(s, got, 512);
        CHECK(n >= 2);
        int dups = 0;
        for (int i = 0; i < n; i++) {
            for (size_t k = 0; k < sp->nparams; k++)
                CHECK(spec_param_legal(&sp->params[k],
                                       json_object_get(got[i], sp->params[k].name)));
            for (int j = 0; j < i; j++)
                dups += json_equal(got[i], got[j]);
        }
        if (dups)
            JZT_FAIL("space %zu: %d repeated grid points out of %d", c, dups, n);
        s_free_all(got, n);
        sched_destroy(&s);
        spec_destroy(&sp);
    }
}

TEST(grid_shuffle)
{
    spec_t *plain = s_spec("{\"type\":\"grid\",\"points\":3}", GRID_SPACE);
    spec_t *sh1 = s_spec("{\"type\":\"grid\",\"points\":3,\"shuffle\":true,\"seed\":1}",
                         GRID_SPACE);
    spec_t *sh2 = s_spec("{\"type\":\"grid\",\"points\":3,\"shuffle\":true,\"seed\":2}",
                         GRID_SPACE);
    REQUIRE(plain && sh1 && sh2);
    sched_t *p = s_new(plain), *a = s_new(sh1), *b = s_new(sh1), *c = s_new(sh2);
    REQUIRE(p && a && b && c);
    json_t *gp[32], *ga[32], *gb[32], *gc[32];
    int np = s_drain(p, gp, 32), na = s_drain(a, ga, 32), nb = s_drain(b, gb, 32),
        nc = s_drain(c, gc, 32);
    REQUIRE(np == 18 && na == 18 && nb == 18 && nc == 18);
    /* a permutation of the plain grid */
    int used[18] = {0}, moved = 0, same_ab = 0, same_ac = 0;
    for (int i = 0; i < 18; i++) {
        int at = s_index_of(gp, 18, ga[i]);
        CHECK(at >= 0);
        if (at >= 0) {
            CHECK(used[at] == 0);
            used[at] = 1;
            moved += at != i;
        }
        same_ab += json_equal(ga[i], gb[i]);
        same_ac += json_equal(ga[i], gc[i]);
    }
    CHECK(moved > 0);
    CHECK(same_ab == 18); /* reproducible for a seed */
    CHECK(same_ac < 18);  /* another seed, another order */
    json_t *x;
    CHECK(a->ops->suggest(a, 99, &x) == SCHED_DONE);
    s_free_all(gp, 18);
    s_free_all(ga, 18);
    s_free_all(gb, 18);
    s_free_all(gc, 18);
    sched_destroy(&p);
    sched_destroy(&a);
    sched_destroy(&b);
    sched_destroy(&c);
    spec_destroy(&plain);
    spec_destroy(&sh1);
    spec_destroy(&sh2);
}

static void s_grid_restore_case(const char *sched, int line)
{
    spec_t *sp = s_spec(sched, GRID_SPACE);
    if (!sp) {
        JZT_FAIL("line %d: spec", line);
        return;
    }
    sched_t *a = s_new(sp), *b = s_new(sp);
    json_t *ga[32], *gb[32];
    int na = s_take(a, ga, 7, 0);
    json_t *state = a->ops->save(a);
    char *text = json_dumps(state, JSON_COMPACT);
    json_t *back = json_loads(text, 0, NULL);
    free(text);
    if (b->ops->restore(b, back) != 0)
        JZT_FAIL("line %d: restore refused", line);
    na += s_drain(a, ga + na, 32 - na);
    int nb = s_drain(b, gb, 32);
    if (na != 18 || nb != 11)
        JZT_FAIL("line %d: %d then %d suggestions, expected 18 and 11", line, na, nb);
    for (int i = 0; i < nb && 7 + i < na; i++)
        if (!json_equal(ga[7 + i], gb[i]))
            JZT_FAIL("line %d: suggestion %d differs after restore", line, 7 + i);
    /* a state past the end restores to done */
    json_t *end = json_pack("{s:I}", "next", (json_int_t)18), *p = NULL;
    sched_t *c = s_new(sp);
    if (c->ops->restore(c, end) != 0 || c->ops->suggest(c, 0, &p) != SCHED_DONE)
        JZT_FAIL("line %d: restored at the end is not done", line);
    json_decref(end);
    const char *bad[] = {"{}", "{\"next\":-2}", "{\"next\":1.5}", "{\"count\":2}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = json_loads(bad[i], 0, NULL);
        if (c->ops->restore(c, j) != -1)
            JZT_FAIL("line %d: bad state %s accepted", line, bad[i]);
        json_decref(j);
    }
    json_decref(state);
    json_decref(back);
    s_free_all(ga, na);
    s_free_all(gb, nb);
    sched_destroy(&a);
    sched_destroy(&b);
    sched_destroy(&c);
    spec_destroy(&sp);
}

TEST(grid_save_restore)
{
    s_grid_restore_case("{\"type\":\"grid\",\"points\":3}", __LINE__);
    s_grid_restore_case("{\"type\":\"grid\",\"points\":3,\"shuffle\":true,\"seed\":8}",
                        __LINE__);
}

/* The saved-observation reader sched_bo and sched_tpe share: a finite
   value, null (failed), absent without with_value, and each malformed form
   refused. */
TEST(json_point_forms)
{
    long trial = 0;
    json_t *params = NULL;
    double v = 0;
    int failed = -1;
    json_t *e = json_loads("{\"trial\":7,\"params\":{\"x\":1},\"value\":2.5}", 0, NULL);
    CHECK(sched_json_point(e, 1, &trial, &params, &v, &failed) == 0);
    CHECK(trial == 7 && v == 2.5 && failed == 0);
    CHECK(params == json_object_get(e, "params")); /* borrowed */
    json_decref(e);
    e = json_loads("{\"trial\":3,\"params\":{},\"value\":null}", 0, NULL);
    CHECK(sched_json_point(e, 1, &trial, &params, &v, &failed) == 0);
    CHECK(trial == 3 && isnan(v) && failed == 1);
    json_decref(e);
    e = json_loads("{\"trial\":4,\"params\":{}}", 0, NULL);
    CHECK(sched_json_point(e, 0, &trial, &params, &v, &failed) == 0);
    CHECK(trial == 4 && isnan(v) && failed == 0);
    CHECK(sched_json_point(e, 1, &trial, &params, &v, &failed) == -1); /* value needed */
    json_decref(e);
    static const char *const bad[] = {"{\"trial\":1,\"params\":{},\"value\":\"x\"}",
                                      "{\"trial\":1,\"params\":[],\"value\":1}",
                                      "{\"params\":{},\"value\":1}",
                                      "{\"trial\":1,\"value\":1}", "[1]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e = json_loads(bad[i], JSON_DECODE_ANY, NULL);
        CHECK(e != NULL);
        CHECK(sched_json_point(e, 1, &trial, &params, &v, &failed) == -1);
        json_decref(e);
    }
}

int main(void)
{
    RUN(registry_refusals);
    RUN(grid_too_large);
    RUN(accepted_options);
    RUN(rng);
    RUN(random_legal_and_reproducible);
    RUN(random_log_uniform);
    RUN(random_save_restore);
    RUN(grid_cartesian_product);
    RUN(grid_values_per_type);
    RUN(grid_no_repeated_points);
    RUN(grid_shuffle);
    RUN(grid_save_restore);
    RUN(json_point_forms);
    TEST_DONE();
}
