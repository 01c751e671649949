/*  test_spec_step.c - quantised parameters ("step" for float and int,
    common/spec_param.c): the unit-cube map lands on the grid and reaches
    every value in equal cells, legality and the check of a person's values
    name the step, snapping, and every scheduler's suggestions (random,
    grid, bo, pbt, tpe, cmaes) lie on the grid.
*/
#include "jz_test.h"
#include "common/spec.h"
#include "sched_testlib.h"

#include <math.h>
#include <unistd.h>

#define SPACE                                                                            \
    "{\"x\":{\"type\":\"float\",\"low\":-1,\"high\":1,\"step\":0.25},"                   \
    "\"n\":{\"type\":\"int\",\"low\":2,\"high\":32,\"step\":6},"                         \
    "\"m\":{\"type\":\"int\",\"low\":1,\"high\":1024,\"log\":true},"                     \
    "\"lr\":{\"type\":\"float\",\"low\":0.1,\"high\":0.3,\"step\":0.1}}"

static spec_t *s_spec(const char *sched)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"name\":\"t\",\"objective\":{\"metric\":\"y\",\"mode\":\"min\"},"
             "\"scheduler\":%s,\"budget\":{\"trials\":500},\"space\":%s}",
             sched, SPACE);
    return stl_parse(buf);
}

/* 1 when every parameter of p is legal and a grid value. */
static int s_on_grid(const spec_t *s, const json_t *p)
{
    for (size_t k = 0; k < s->nparams; k++) {
        const json_t *v = json_object_get(p, s->params[k].name);
        if (!spec_param_legal(&s->params[k], v))
            return 0;
    }
    return 1;
}

TEST(unit_map_lands_on_the_grid_in_equal_cells)
{
    spec_t *s = s_spec("{\"type\":\"random\"}");
    CHECK(s != NULL);
    if (!s)
        return;
    const spec_param *x = &s->params[spec_param_index(s, "x")];
    const spec_param *n = &s->params[spec_param_index(s, "n")];
    const spec_param *lr = &s->params[spec_param_index(s, "lr")];
    CHECK(spec_param_grid(x) == 9 && spec_param_grid(n) == 6 && spec_param_grid(lr) == 3);
    CHECK(spec_param_grid(&s->params[spec_param_index(s, "m")]) == 1024);
    int hits[9] = {0}, nhits[6] = {0};
    for (int i = 0; i < 9000; i++) {
        double u = (i + 0.5) / 9000.0;
        json_t *v = spec_param_from_unit(x, u);
        double d = json_real_value(v);
        CHECK(json_is_real(v) && spec_param_legal(x, v));
        int k = (int)lround((d + 1) / 0.25);
        CHECK(k >= 0 && k < 9 && d == -1 + 0.25 * k);
        hits[k]++;
        /* back to the middle of the same cell */
        CHECK_NEAR(spec_param_to_unit(x, v), (k + 0.5) / 9.0, 1e-12);
        json_decref(v);
        json_t *w = spec_param_from_unit(n, u);
        long m = (long)json_integer_value(w);
        CHECK(json_is_integer(w) && (m - 2) % 6 == 0 && m >= 2 && m <= 32);
        nhits[(m - 2) / 6]++;
        json_decref(w);
    }
    for (int k = 0; k < 9; k++)
        CHECK(hits[k] == 1000);
    for (int k = 0; k < 6; k++)
        CHECK(nhits[k] == 1500);
    /* 0.1 + 2 * 0.1 prints as 0.3, the top of the range */
    json_t *top = spec_param_from_unit(lr, 1);
    CHECK(json_real_value(top) == 0.3);
    json_decref(top);
    json_t *mid = spec_param_from_unit(lr, 0.5);
    CHECK(json_real_value(mid) == 0.2);
    json_decref(mid);
    spec_destroy(&s);
}

TEST(legal_snap_and_check_name_the_step)
{
    spec_t *s = s_spec("{\"type\":\"random\"}");
    if (!s)
        return;
    const spec_param *x = &s->params[spec_param_index(s, "x")];
    const spec_param *n = &s->params[spec_param_index(s, "n")];
    json_t *ok = json_real(0.75), *off = json_real(0.7), *ni = json_integer(9);
    CHECK(spec_param_legal(x, ok) && !spec_param_legal(x, off));
    CHECK(!spec_param_legal(n, ni));
    json_t *sn = spec_param_snap(x, 0.7);
    CHECK(json_real_value(sn) == 0.75);
    json_decref(sn);
    sn = spec_param_snap(n, 12);
    CHECK(json_integer_value(sn) == 14);
    json_decref(sn);
    sn = spec_param_snap(n, 99);
    CHECK(json_integer_value(sn) == 32);
    json_decref(sn);
    json_t *p = json_pack("{s:f, s:i, s:i, s:f}", "x", 0.7, "n", 8, "m", 3, "lr", 0.2);
    spec_error e;
    CHECK(spec_params_check(s, p, &e) == -1);
    CHECK_STR(e.field, "params.x");
    CHECK_STR(e.text, "must be a number from -1 to 1 in steps of 0.25");
    json_object_set_new(p, "x", json_real(-0.25));
    CHECK(spec_params_check(s, p, &e) == 0);
    json_decref(p);
    json_decref(ok);
    json_decref(off);
    json_decref(ni);
    spec_destroy(&s);
}

TEST(every_scheduler_suggests_on_the_grid)
{
    static const char *const scheds[] = {
        "{\"type\":\"random\",\"seed\":3}",
        "{\"type\":\"grid\",\"points\":4}",
        "{\"type\":\"grid\",\"points\":20}",
        "{\"type\":\"bo\",\"seed\":3,\"n_init\":4}",
        "{\"type\":\"pbt\",\"seed\":3,\"interval\":5}",
        "{\"type\":\"tpe\",\"seed\":3}",
        "{\"type\":\"cmaes\",\"seed\":3}",
    };
    for (size_t k = 0; k < sizeof scheds / sizeof scheds[0]; k++) {
        spec_t *s = s_spec(scheds[k]);
        char err[256] = "";
        sched_t *sc = s ? sched_new(s, err, sizeof err) : NULL;
        if (!sc) {
            JZT_FAIL("%s: %s", scheds[k], err);
            spec_destroy(&s);
            continue;
        }
        long n = 0, bad = 0;
        json_t *seen = json_array();
        for (long id = 1; id <= 24; id++) {
            json_t *p = NULL;
            int rc = stl_get(sc, id, &p);
            if (rc == SCHED_DONE)
                break;
            if (rc != SCHED_OK) {
                JZT_FAIL("%s: suggest %ld failed", scheds[k], id);
                break;
            }
            n++;
            bad += !s_on_grid(s, p);
            for (size_t i = 0; i < json_array_size(seen) && strstr(scheds[k], "grid");
                 i++)
                bad += json_equal(json_array_get(seen, i), p);
            json_array_append(seen, p);
            double y = json_number_value(json_object_get(p, "x"));
            if (sc->ops->on_complete)
                sc->ops->on_complete(sc, id, p, SCHED_COMPLETED, y * y);
            json_decref(p);
        }
        if (bad)
            JZT_FAIL("%s: %ld of %ld suggestions off the grid or repeated", scheds[k],
                     bad, n);
        CHECK(n == 24);
        json_decref(seen);
        sched_destroy(&sc);
        spec_destroy(&s);
    }
}

int main(void)
{
    RUN(unit_map_lands_on_the_grid_in_equal_cells);
    RUN(legal_snap_and_check_name_the_step);
    RUN(every_scheduler_suggests_on_the_grid);
    TEST_DONE();
}
