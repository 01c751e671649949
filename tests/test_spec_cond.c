/*  test_spec_cond.c - conditional spaces and constants (common/spec.c
    `when` and "const", and how the grid and bo schedulers treat them):
    field-named refusals, which parameters are active, pruning, the check
    of a person's parameters (study enqueue), {name:default} placeholders,
    the grid visiting only active combinations, bo suggesting legal pruned
    points and learning from them.
*/
#include "jz_test.h"
#include "common/spec.h"
#include "sched_testlib.h"

#include <math.h>
#include <unistd.h>

static spec_t *s_spec_full(const char *sched, const char *space, const char *command,
                           spec_error *err)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"name\":\"t\",\"objective\":{\"metric\":\"y\",\"mode\":\"min\"},"
             "\"scheduler\":%s,\"budget\":{\"trials\":50},"
             "\"space\":%s,\"trial\":{\"command\":%s}}",
             sched, space, command);
    json_error_t je;
    json_t *j = json_loads(buf, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        printf("bad test json: %s\n", je.text);
        return NULL;
    }
    spec_t *s = spec_parse(j, 0, err);
    json_decref(j);
    return s;
}

static spec_t *s_spec(const char *sched, const char *space)
{
    spec_error err;
    spec_t *s = s_spec_full(sched, space, "[\"true\"]", &err);
    if (!s) {
        char eb[400];
        printf("spec: %s\n", spec_strerror(&err, eb, sizeof eb));
    }
    return s;
}

/* The refusal text of a space (or of a command with a space), "" when it
   parses. */
static const char *s_refusal(const char *space, const char *command, char *buf,
                             size_t size)
{
    spec_error err;
    spec_t *s = s_spec_full("{\"type\":\"random\"}", space,
                            command ? command : "[\"true\"]", &err);
    if (s) {
        spec_destroy(&s);
        snprintf(buf, size, "%s", "");
        return buf;
    }
    return spec_strerror(&err, buf, size);
}

/* optimizer decides momentum (sgd) and trust (lars, lamb); trust decides
   clip (only when trust is "on"); depth is a const */
static const char *COND =
    "{\"optimizer\":{\"type\":\"choice\",\"values\":[\"sgd\",\"lars\",\"lamb\"]},"
    "\"lr\":{\"type\":\"float\",\"low\":0.001,\"high\":1,\"log\":true},"
    "\"momentum\":{\"type\":\"float\",\"low\":0,\"high\":0.99,"
    "\"when\":{\"optimizer\":[\"sgd\"]}},"
    "\"trust\":{\"type\":\"choice\",\"values\":[\"on\",\"off\"],"
    "\"when\":{\"optimizer\":[\"lars\",\"lamb\"]}},"
    "\"clip\":{\"type\":\"int\",\"low\":1,\"high\":3,\"when\":{\"trust\":[\"on\"]}},"
    "\"depth\":{\"type\":\"const\",\"value\":3}}";

TEST(parse_const_and_when)
{
    spec_t *s = s_spec("{\"type\":\"random\"}", COND);
    CHECK(s != NULL);
    if (!s)
        return;
    CHECK(s->nparams == 6);
    const spec_param *d = &s->params[5];
    CHECK(d->konst && d->type == SPEC_CHOICE && d->nvalues == 1);
    json_t *v = spec_param_from_unit(d, 0.9);
    CHECK(json_integer_value(v) == 3);
    json_decref(v);
    CHECK(!s->params[0].conditional && !s->params[1].conditional);
    CHECK(s->params[2].conditional && s->params[3].conditional);
    CHECK(s->params[4].conditional);
    CHECK(s->params[4].when != NULL && s->params[2].when != NULL);
    CHECK(spec_param_index(s, "clip") == 4 && spec_param_index(s, "nope") == -1);
    spec_destroy(&s);
}

TEST(refusals_name_the_field)
{
    char b[400];
    struct {
        const char *space, *command, *expect;
    } cases[] = {
        {"{\"a\":{\"type\":\"choice\",\"values\":[\"x\"],\"when\":{\"c\":[\"x\"]}},"
         "\"b\":{\"type\":\"choice\",\"values\":[\"x\"],\"when\":{\"a\":[\"x\"]}},"
         "\"c\":{\"type\":\"choice\",\"values\":[\"x\"],\"when\":{\"b\":[\"x\"]}}}",
         NULL, "space.a.when.c: a cycle: a depends on a through c"},
        {"{\"a\":{\"type\":\"float\",\"low\":0,\"high\":1,\"when\":{\"zz\":[\"x\"]}}}",
         NULL, "space.a.when.zz: names no parameter in space"},
        {"{\"a\":{\"type\":\"float\",\"low\":0,\"high\":1,\"when\":{\"a\":[1]}}}", NULL,
         "space.a.when.a: a parameter cannot depend on itself"},
        {"{\"f\":{\"type\":\"float\",\"low\":0,\"high\":1},"
         "\"a\":{\"type\":\"int\",\"low\":0,\"high\":1,\"when\":{\"f\":[0.5]}}}",
         NULL, "space.a.when.f: the parent must be a choice or a const"},
        {"{\"o\":{\"type\":\"choice\",\"values\":[\"x\",\"y\"]},"
         "\"a\":{\"type\":\"int\",\"low\":0,\"high\":1,\"when\":{\"o\":[\"x\",\"q\"]}}}",
         NULL, "space.a.when.o[1]: not a value of o"},
        {"{\"o\":{\"type\":\"choice\",\"values\":[\"x\"]},"
         "\"a\":{\"type\":\"int\",\"low\":0,\"high\":1,\"when\":{\"o\":[]}}}",
         NULL, "space.a.when.o: must be a non-empty array of values of o"},
        {"{\"a\":{\"type\":\"int\",\"low\":0,\"high\":1,\"when\":[]}}", NULL,
         "space.a.when: must be a non-empty object"},
        {"{\"c\":{\"type\":\"const\"}}", NULL, "space.c.value: missing (required)"},
        {"{\"c\":{\"type\":\"const\",\"value\":[1]}}", NULL,
         "space.c.value: must be a string or a number, not an array"},
        {"{\"c\":{\"type\":\"const\",\"value\":1,\"low\":0}}", NULL,
         "space.c.low: unknown key (expected one of: type, value, when)"},
        {"{\"c\":{\"type\":\"constant\",\"value\":1}}", NULL,
         "space.c.type: must be \"float\", \"int\", \"choice\" or \"const\""},
        /* a placeholder for a maybe-inactive parameter needs a default */
        {"{\"o\":{\"type\":\"choice\",\"values\":[\"x\",\"y\"]},"
         "\"m\":{\"type\":\"float\",\"low\":0,\"high\":1,\"when\":{\"o\":[\"x\"]}}}",
         "[\"true\",\"--m={m}\"]",
         "trial.command[1]: placeholder {m} names a parameter that can be inactive "
         "(space.m.when): give a default, {m:VALUE}"},
        {"{\"o\":{\"type\":\"choice\",\"values\":[\"x\",\"y\"]}}",
         "[\"true\",\"--m={zz:1}\"]",
         "trial.command[1]: placeholder {zz:1} names no parameter in space"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s_refusal(cases[i].space, cases[i].command, b, sizeof b);
        if (strncmp(b, cases[i].expect, strlen(cases[i].expect)) != 0)
            printf("case %zu: got \"%s\"\n", i, b);
        CHECK(strncmp(b, cases[i].expect, strlen(cases[i].expect)) == 0);
    }
    /* a parent may come after its child (stored specs have sorted keys) */
    CHECK_STR(s_refusal("{\"a\":{\"type\":\"int\",\"low\":0,\"high\":1,"
                        "\"when\":{\"z\":[\"x\"]}},"
                        "\"z\":{\"type\":\"choice\",\"values\":[\"x\",\"y\"]}}",
                        NULL, b, sizeof b),
              "");
    /* with a default, the placeholder is accepted */
    CHECK_STR(s_refusal("{\"o\":{\"type\":\"choice\",\"values\":[\"x\",\"y\"]},"
                        "\"m\":{\"type\":\"float\",\"low\":0,\"high\":1,"
                        "\"when\":{\"o\":[\"x\"]}}}",
                        "[\"true\",\"--m={m:0}\",\"{o}\"]", b, sizeof b),
              "");
}

TEST(active_prune_and_placeholder_default)
{
    spec_error err;
    spec_t *s = s_spec_full("{\"type\":\"random\"}", COND,
                            "[\"true\",\"--clip={clip:none}\",\"--d={depth}\"]", &err);
    CHECK(s != NULL);
    if (!s)
        return;
    json_t *p = json_pack("{s:s, s:f, s:f, s:s, s:i, s:i}", "optimizer", "sgd", "lr", 0.1,
                          "momentum", 0.9, "trust", "on", "clip", 2, "depth", 3);
    CHECK(spec_param_active(s, 2, p) == 1);
    CHECK(spec_param_active(s, 3, p) == 0);
    CHECK(spec_param_active(s, 4, p) == 0); /* its parent is inactive */
    CHECK(spec_params_prune(s, p) == 2);
    CHECK(json_object_size(p) == 4 && !json_object_get(p, "trust") &&
          !json_object_get(p, "clip"));
    json_t *cmd = spec_expand_command(s, p, &err);
    CHECK(cmd && !strcmp(json_string_value(json_array_get(cmd, 1)), "--clip=none"));
    CHECK(cmd && !strcmp(json_string_value(json_array_get(cmd, 2)), "--d=3"));
    json_decref(cmd);
    json_decref(p);

    p = json_pack("{s:s, s:f, s:f, s:s, s:i, s:i}", "optimizer", "lamb", "lr", 0.1,
                  "momentum", 0.9, "trust", "on", "clip", 2, "depth", 3);
    CHECK(spec_params_prune(s, p) == 1 && !json_object_get(p, "momentum"));
    CHECK(json_integer_value(json_object_get(p, "clip")) == 2);
    cmd = spec_expand_command(s, p, &err);
    CHECK(cmd && !strcmp(json_string_value(json_array_get(cmd, 1)), "--clip=2"));
    json_decref(cmd);
    json_decref(p);
    spec_destroy(&s);
}

static const char *s_check(const spec_t *s, const char *params, char *buf, size_t size)
{
    json_t *p = json_loads(params, 0, NULL);
    spec_error err;
    int rc = spec_params_check(s, p, &err);
    json_decref(p);
    if (rc == 0) {
        snprintf(buf, size, "ok");
        return buf;
    }
    return spec_strerror(&err, buf, size);
}

TEST(params_check)
{
    spec_t *s = s_spec("{\"type\":\"random\"}", COND);
    CHECK(s != NULL);
    if (!s)
        return;
    char b[300];
    CHECK_STR(
        s_check(s, "{\"optimizer\":\"sgd\",\"lr\":0.1,\"momentum\":0.5}", b, sizeof b),
        "ok");
    CHECK_STR(s_check(s,
                      "{\"optimizer\":\"lars\",\"lr\":0.1,\"trust\":\"off\",\"depth\":3}",
                      b, sizeof b),
              "ok");
    CHECK_STR(
        s_check(s, "{\"optimizer\":\"lars\",\"lr\":0.1,\"trust\":\"on\"}", b, sizeof b),
        "params.clip: missing (every active parameter needs a value)");
    CHECK_STR(
        s_check(s, "{\"optimizer\":\"sgd\",\"lr\":0.1,\"momentum\":0.5,\"trust\":\"on\"}",
                b, sizeof b),
        "params.trust: is inactive for these values (space.trust.when); leave it out");
    CHECK_STR(s_check(s, "{\"optimizer\":\"adam\",\"lr\":0.1}", b, sizeof b),
              "params.optimizer: must be one of [\"sgd\",\"lars\",\"lamb\"]");
    CHECK_STR(
        s_check(s, "{\"optimizer\":\"sgd\",\"lr\":5,\"momentum\":0.5}", b, sizeof b),
        "params.lr: must be a number from 0.001 to 1");
    CHECK_STR(s_check(s,
                      "{\"optimizer\":\"sgd\",\"lr\":0.1,\"momentum\":0.5,\"depth\":4}",
                      b, sizeof b),
              "params.depth: must be one of [3]");
    CHECK_STR(s_check(s, "{\"optimizer\":\"sgd\",\"lr\":0.1,\"momentum\":0.5,\"x\":4}", b,
                      sizeof b),
              "params.x: names no parameter in space");
    /* the const is filled in */
    json_t *p =
        json_loads("{\"optimizer\":\"sgd\",\"lr\":0.1,\"momentum\":0.5}", 0, NULL);
    spec_error err;
    CHECK(spec_params_check(s, p, &err) == 0);
    CHECK(json_integer_value(json_object_get(p, "depth")) == 3);
    json_decref(p);
    spec_destroy(&s);
}

TEST(grid_visits_active_combinations_once)
{
    /* optimizer 3 x lr 2 points; sgd: momentum 2 points; lars/lamb: trust on
       (clip 2 points) or off. Active combinations: 2*(2 + 2*(2+1)) = 16 */
    spec_t *s = s_spec("{\"type\":\"grid\",\"points\":2}", COND);
    char err[256] = "";
    sched_t *g = s ? sched_new(s, err, sizeof err) : NULL;
    CHECK(g != NULL);
    if (!g) {
        spec_destroy(&s);
        return;
    }
    json_t *seen = json_array();
    json_t *p;
    long id = 1;
    while (g->ops->suggest(g, id++, &p) == SCHED_OK) {
        spec_error e;
        json_t *c = json_deep_copy(p);
        CHECK(spec_params_check(s, c, &e) == 0); /* complete and pruned */
        json_decref(c);
        for (size_t i = 0; i < json_array_size(seen); i++)
            CHECK(!json_equal(json_array_get(seen, i), p));
        json_array_append_new(seen, p);
    }
    CHECK(json_array_size(seen) == 16);
    json_decref(seen);
    sched_destroy(&g);
    spec_destroy(&s);
}

/* sgd: (momentum - 0.7)^2 + 0.3; lars: lr-dependent, best 0 at lr = 0.01 */
static double s_cond_obj(const json_t *p)
{
    const char *o = json_string_value(json_object_get(p, "optimizer"));
    double lr = json_number_value(json_object_get(p, "lr"));
    if (!strcmp(o, "sgd")) {
        double m = json_number_value(json_object_get(p, "momentum"));
        return (m - 0.7) * (m - 0.7) + 0.3;
    }
    double d = log10(lr) + 2;
    return d * d + (!strcmp(o, "lamb") ? 0.5 : 0);
}

TEST(bo_conditional_space)
{
    const char *space =
        "{\"optimizer\":{\"type\":\"choice\",\"values\":[\"sgd\",\"lars\",\"lamb\"]},"
        "\"lr\":{\"type\":\"float\",\"low\":0.0001,\"high\":1,\"log\":true},"
        "\"momentum\":{\"type\":\"float\",\"low\":0,\"high\":0.99,"
        "\"when\":{\"optimizer\":[\"sgd\"]}},"
        "\"depth\":{\"type\":\"const\",\"value\":\"deep\"}}";
    spec_t *s = s_spec("{\"type\":\"bo\",\"seed\":4,\"n_init\":6}", space);
    char err[256] = "";
    sched_t *b = s ? sched_new(s, err, sizeof err) : NULL;
    CHECK(b != NULL);
    if (!b) {
        spec_destroy(&s);
        return;
    }
    double best = INFINITY;
    int bad = 0;
    for (long id = 1; id <= 30; id++) {
        json_t *p = NULL;
        if (stl_get(b, id, &p) != SCHED_OK) {
            JZT_FAIL("suggest failed at %ld", id);
            break;
        }
        json_t *c = json_deep_copy(p);
        spec_error e;
        bad += spec_params_check(s, c, &e) != 0 ||
               json_object_size(c) != json_object_size(p);
        json_decref(c);
        double v = s_cond_obj(p);
        best = fmin(best, v);
        b->ops->on_complete(b, id, p, SCHED_COMPLETED, v);
        json_decref(p);
    }
    CHECK(bad == 0); /* every suggestion complete, legal and pruned */
    /* tolerance: the lars branch reaches 0 at lr = 0.01; within 30 trials bo
       gets below the sgd branch's floor of 0.3 */
    CHECK(best < 0.05);
    /* the state (with pruned params) saves and restores */
    json_t *st = b->ops->save(b);
    sched_t *b2 = sched_new(s, err, sizeof err);
    CHECK(st && b2 && b2->ops->restore(b2, st) == 0);
    json_decref(st);
    sched_destroy(&b2);
    sched_destroy(&b);
    spec_destroy(&s);
}

int main(void)
{
    RUN(parse_const_and_when);
    RUN(refusals_name_the_field);
    RUN(active_prune_and_placeholder_default);
    RUN(params_check);
    RUN(grid_visits_active_combinations_once);
    RUN(bo_conditional_space);
    TEST_DONE();
}
