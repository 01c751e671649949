/*  sched_testlib.h - what the scheduler unit tests (tests/test_sched*.c)
    share, included after jz_test.h: a study spec from JSON text, a
    scheduler from a spec, sequential studies driven through sched_ops, and
    the objectives and spaces that several of them search (quadratics, a
    space of every type with a conditional pair).

    Each test file still states its own defaults (objective, budget) in a
    one-line s_spec of its own; only the parsing and the driving live here.
    Everything is static inline, so a file pays only for what it uses.
*/
#ifndef SCHED_TESTLIB_H
#define SCHED_TESTLIB_H

#include "common/util.h"
#include "jz_test.h"
#include "schedulers/sched.h"

#include <unistd.h>

/* The spec parsed from JSON text (spec_parse without the command check).
   NULL after printing why (the JSON's or the spec's error). Caller owns
   the result and must destroy it (spec_destroy). */
static inline spec_t *stl_parse(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) {
        printf("bad test json: %s\n", je.text);
        return NULL;
    }
    spec_error err;
    spec_t *s = spec_parse(j, 0, &err);
    json_decref(j);
    if (!s) {
        char eb[400];
        printf("spec: %s\n", spec_strerror(&err, eb, sizeof eb));
    }
    return s;
}

/* A study named "t" whose objective is `metric` to `mode` ("min", "max"),
   with scheduler, budget and space given as JSON texts and the command
   ["true"]; as stl_parse. */
static inline spec_t *stl_spec(const char *metric, const char *mode, const char *sched,
                               const char *budget, const char *space)
{
    char *text =
        util_strf("{\"name\":\"t\",\"objective\":{\"metric\":\"%s\",\"mode\":\"%s\"},"
                  "\"scheduler\":%s,\"budget\":%s,"
                  "\"space\":%s,\"trial\":{\"command\":[\"true\"]}}",
                  metric, mode, sched, budget, space);
    if (!text) {
        printf("out of memory\n");
        return NULL;
    }
    spec_t *s = stl_parse(text);
    free(text);
    return s;
}

/* The scheduler the spec names (sched_new), or NULL after failing the
   current test with sched_new's message. Caller owns it (sched_destroy). */
static inline sched_t *stl_new(const spec_t *sp)
{
    char err[256] = "";
    sched_t *s = sched_new(sp, err, sizeof err);
    if (!s)
        JZT_FAIL("sched_new: %s", err);
    return s;
}

/* make (sched_new, or a scheduler's own constructor) must refuse sp with
   a message that starts with want; fails the current test otherwise. */
static inline void stl_check_refused(sched_t *(*make)(const spec_t *, char *, size_t),
                                     const spec_t *sp, const char *want)
{
    char err[256] = "";
    sched_t *s = make(sp, err, sizeof err);
    CHECK(s == NULL);
    if (strncmp(err, want, strlen(want)) != 0)
        JZT_FAIL("error \"%s\", expected \"%s...\"", err, want);
    sched_destroy(&s);
}

/* Parameter k of p as a number (0 when absent). */
static inline double stl_num(const json_t *p, const char *k)
{
    return json_number_value(json_object_get(p, k));
}

/* 2-D quadratic over STL_QSPACE, minimum 0 at (0.3, -0.2) */
static inline double stl_quad(const json_t *p)
{
    double x = stl_num(p, "x"), y = stl_num(p, "y");
    return (x - 0.3) * (x - 0.3) + (y + 0.2) * (y + 0.2);
}

/* 4-D quadratic over STL_QSPACE4, minimum 0 at (0.3, -0.2, 0.1, 0.5) */
static inline double stl_quad4(const json_t *p)
{
    return stl_quad(p) + pow(stl_num(p, "z") - 0.1, 2) + pow(stl_num(p, "w") - 0.5, 2);
}

static const char *const STL_QSPACE4 =
    "{\"x\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
    "\"y\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
    "\"z\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
    "\"w\":{\"type\":\"float\",\"low\":-1,\"high\":1}}";

static const char *const STL_QSPACE = "{\"x\":{\"type\":\"float\",\"low\":-1,\"high\":1},"
                                      "\"y\":{\"type\":\"float\",\"low\":-1,\"high\":1}}";

/* every type (quantised ones too), and a conditional pair under a choice */
static const char *const STL_MIXED_COND =
    "{\"lr\":{\"type\":\"float\",\"low\":1e-5,\"high\":1,\"log\":true},"
    "\"layers\":{\"type\":\"int\",\"low\":1,\"high\":6},"
    "\"width\":{\"type\":\"int\",\"low\":8,\"high\":1024,\"log\":true},"
    "\"act\":{\"type\":\"choice\",\"values\":[\"relu\",\"tanh\",\"gelu\"]},"
    "\"opt\":{\"type\":\"choice\",\"values\":[\"sgd\",\"adam\"]},"
    "\"momentum\":{\"type\":\"float\",\"low\":0,\"high\":0.99,\"when\":{\"opt\":[\"sgd\"]"
    "}},"
    "\"nesterov\":{\"type\":\"choice\",\"values\":[\"yes\",\"no\"],\"when\":{\"opt\":["
    "\"sgd\"]}},"
    "\"beta2\":{\"type\":\"float\",\"low\":0.9,\"high\":0.9999,\"when\":{\"opt\":["
    "\"adam\"]}},"
    "\"drop\":{\"type\":\"float\",\"low\":0,\"high\":0.5,\"step\":0.125},"
    "\"batch\":{\"type\":\"int\",\"low\":16,\"high\":256,\"step\":16},"
    "\"seed\":{\"type\":\"const\",\"value\":7}}";

/* a loss over STL_MIXED_COND: adam with lr near 1e-3 and 3 layers is best */
static inline double stl_mixed_cond(const json_t *p)
{
    double v = pow(log10(stl_num(p, "lr")) + 3, 2) + pow(stl_num(p, "layers") - 3, 2) / 4;
    const char *opt = json_string_value(json_object_get(p, "opt"));
    v += opt && !strcmp(opt, "adam") ? 10 * (0.9999 - stl_num(p, "beta2")) : 1;
    return v;
}

/* Checks that every suggestion in log (a study over STL_MIXED_COND) is
   legal in the ways spec_params_check does not look at: ints whole, the
   const kept, steps of the quantised ones, the inactive branch absent.
   Returns how many from index `from` on chose "adam" (the better branch). */
static inline int stl_check_mixed_cond(const json_t *log, size_t from)
{
    int adam = 0;
    size_t i;
    json_t *p;
    json_array_foreach(log, i, p)
    {
        CHECK(json_is_integer(json_object_get(p, "layers")));
        CHECK(json_is_integer(json_object_get(p, "width")));
        CHECK(json_integer_value(json_object_get(p, "seed")) == 7);
        double drop = stl_num(p, "drop");
        CHECK(drop * 8 == floor(drop * 8));
        CHECK(json_integer_value(json_object_get(p, "batch")) % 16 == 0);
        const char *opt = json_string_value(json_object_get(p, "opt"));
        CHECK(!json_object_get(p, !strcmp(opt, "adam") ? "momentum" : "beta2"));
        adam += i >= from && !strcmp(opt, "adam");
    }
    return adam;
}

/* Runs n sequential trials of f on s (ids from id0), each suggestion
   checked legal (spec_params_check) and told back as sign * f; returns the
   best f and appends every suggestion to log when non-NULL. A suggestion
   that does not come (SCHED_OK) fails the test and returns NaN. */
static inline double stl_study(sched_t *s, long id0, int n, double (*f)(const json_t *),
                               int sign, json_t *log)
{
    double best = INFINITY;
    for (long id = id0; id < id0 + n; id++) {
        json_t *p = NULL;
        if (s->ops->suggest(s, id, &p) != SCHED_OK || !p) {
            JZT_FAIL("suggest failed at trial %ld", id);
            return NAN;
        }
        spec_error e;
        json_t *chk = json_deep_copy(p);
        if (spec_params_check(s->spec, chk, &e) != 0)
            JZT_FAIL("illegal suggestion at trial %ld: %s", id, e.text);
        json_decref(chk);
        double v = f(p);
        best = fmin(best, v);
        s->ops->on_complete(s, id, p, SCHED_COMPLETED, sign * v);
        if (log)
            json_array_append(log, p);
        json_decref(p);
    }
    return best;
}

/* The suggestions (caller owns the array) of a study of n trials of
   stl_mixed_cond over STL_MIXED_COND under scheduler `sched` (JSON text),
   the spec from spec(sched, space, mode) with mode "min"; NULL after
   failing the current test when there was no spec or scheduler. */
static inline json_t *stl_mixed_cond_study(spec_t *(*spec)(const char *, const char *,
                                                           const char *),
                                           const char *sched, int n)
{
    spec_t *sp = spec(sched, STL_MIXED_COND, "min");
    sched_t *s = sp ? stl_new(sp) : NULL;
    json_t *log = NULL;
    if (s) {
        log = json_array();
        stl_study(s, 1, n, stl_mixed_cond, 1, log);
    } else {
        JZT_FAIL("no scheduler for %s", sched);
    }
    sched_destroy(&s);
    spec_destroy(&sp);
    return log;
}

/* Studies of n trials (stl_mixed_cond_study) under scheds[0], scheds[1]
   (the same seed) and scheds[2] (another seed): the first two must suggest
   the same, the third not. */
static inline void stl_check_same_seed(spec_t *(*spec)(const char *, const char *,
                                                       const char *),
                                       const char *const scheds[3], int n)
{
    json_t *logs[3];
    for (int k = 0; k < 3; k++)
        logs[k] = stl_mixed_cond_study(spec, scheds[k], n);
    CHECK(logs[0] && logs[1] && logs[2]);
    CHECK(json_equal(logs[0], logs[1]));
    CHECK(!json_equal(logs[0], logs[2]));
    for (int k = 0; k < 3; k++)
        json_decref(logs[k]);
}

/* Asks s for trial id's suggestion until the answer is not SCHED_WAIT (a
   scheduler with a worker thread, such as bo, is still fitting), for at
   most about 40 s; the answer (SCHED_ERR when it never came). */
static inline int stl_get(sched_t *s, long id, json_t **p)
{
    for (int i = 0; i < 200000; i++) {
        int rc = s->ops->suggest(s, id, p);
        if (rc != SCHED_WAIT)
            return rc;
        usleep(200);
    }
    return SCHED_ERR;
}

/* A controller restart, first half: the state of *s as the store keeps it
   (save, then JSON text; caller frees it), and *s destroyed (set to NULL).
   NULL when there is no state. */
static inline char *stl_stop(sched_t **s)
{
    json_t *st = (*s)->ops->save(*s);
    char *text = st ? json_dumps(st, JSON_COMPACT) : NULL;
    json_decref(st);
    sched_destroy(s);
    return text;
}

/* Second half: fresh (a new scheduler or monitor of the same spec; NULL
   allowed) restored from text (from stl_stop; freed here). Returns fresh,
   or NULL with fresh destroyed when there was none or the text does not
   restore. */
static inline sched_t *stl_resume(sched_t *fresh, char *text)
{
    json_t *back = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (fresh && (!back || fresh->ops->restore(fresh, back) != 0))
        sched_destroy(&fresh);
    json_decref(back);
    return fresh;
}

#endif
