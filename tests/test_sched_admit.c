/*  test_sched_admit.c - a study's admission (sched_admit, schedulers/sched.h),
    the one check jizhi run, jizhi study submit, the web API and the
    controller's submit all make: a spec that does not parse, a scheduler
    option and an early-stopping (monitor) option that are wrong are each
    refused with their own message; a good spec comes back whole; the
    spec's JSON is only borrowed; paths are looked up only when asked; a
    short buffer is cut, not overrun.
*/
#include "jz_test.h"

#include "common/spec.h"
#include "schedulers/sched.h"

#include <string.h>

/* A spec's JSON with these parts (each a JSON text). */
static json_t *s_json(const char *sched, const char *es, const char *space,
                      const char *command)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"name\":\"adm\",\"objective\":{\"metric\":\"y\",\"mode\":\"min\"},"
             "\"scheduler\":%s%s%s,\"budget\":{\"trials\":20},"
             "\"space\":%s,\"trial\":{\"command\":[%s]}}",
             sched, es ? ",\"early_stopping\":" : "", es ? es : "", space, command);
    json_error_t je;
    json_t *j = json_loads(buf, 0, &je);
    if (!j)
        printf("bad test json: %s\n%s\n", je.text, buf);
    return j;
}

#define SPACE "{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1}}"

TEST(each_kind_of_wrong_spec_is_refused_with_its_message)
{
    static const struct {
        const char *sched, *es, *space, *want;
    } cases[] = {
        /* the spec itself */
        {"{\"type\":\"random\"}", NULL,
         "{\"x\":{\"type\":\"float\",\"low\":1,\"high\":0}}", "space.x"},
        {"{\"type\":\"nonesuch\"}", NULL, SPACE, "scheduler.type"},
        /* the scheduler's options */
        {"{\"type\":\"grid\",\"points\":1001}", NULL, SPACE,
         "scheduler.points: must be an integer from 1 to 1000"},
        {"{\"type\":\"random\",\"seed\":\"x\"}", NULL, SPACE, "scheduler.seed"},
        /* a monitor's (early stopping) options */
        {"{\"type\":\"random\"}", "{\"type\":\"asha\",\"grace\":0}", SPACE,
         "early_stopping.grace: must be > 0"},
        {"{\"type\":\"random\"}", "{\"type\":\"asha\",\"reduction\":1}", SPACE,
         "early_stopping.reduction: must be > 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = s_json(cases[i].sched, cases[i].es, cases[i].space, "\"true\"");
        REQUIRE(j);
        char err[256] = "";
        spec_t *sp = sched_admit(j, 0, err, sizeof err);
        if (sp) {
            JZT_FAIL("case %zu accepted", i);
            spec_destroy(&sp);
        } else if (strncmp(err, cases[i].want, strlen(cases[i].want)) != 0) {
            JZT_FAIL("case %zu: \"%s\", expected \"%s...\"", i, err, cases[i].want);
        }
        CHECK(j->refcount == 1); /* borrowed: nothing kept, nothing released */
        /* a short buffer is cut, not overrun */
        char tiny[10];
        memset(tiny, 'x', sizeof tiny);
        CHECK(sched_admit(j, 0, tiny, sizeof tiny) == NULL);
        CHECK(memchr(tiny, 0, sizeof tiny) != NULL);
        json_decref(j);
    }
}

TEST(a_good_spec_is_admitted_whole)
{
    json_t *j = s_json("{\"type\":\"random\",\"seed\":3}", "{\"type\":\"asha\"}", SPACE,
                       "\"true\"");
    REQUIRE(j);
    char err[256] = "";
    spec_t *sp = sched_admit(j, 0, err, sizeof err);
    REQUIRE(sp);
    CHECK_STR(err, "");
    CHECK_STR(sp->name, "adm");
    CHECK_STR(sp->sched_type, "random");
    CHECK(sp->trials == 20);
    CHECK(j->refcount >= 1);
    spec_destroy(&sp);
    CHECK(j->refcount == 1);
    json_decref(j);
}

TEST(paths_are_looked_up_only_when_asked)
{
    /* a program no trial could start: refused by a submitter that sees
       the trials' files (jizhi run, study submit, the web server), left
       to the dispatchers by the controller */
    json_t *j = s_json("{\"type\":\"random\"}", NULL, SPACE,
                       "\"/nonexistent/jizhi-test-program\"");
    REQUIRE(j);
    char err[256] = "";
    spec_t *sp = sched_admit(j, 1, err, sizeof err);
    CHECK(sp == NULL);
    CHECK(strstr(err, "trial.command") != NULL);
    spec_destroy(&sp);
    sp = sched_admit(j, 0, err, sizeof err);
    CHECK(sp != NULL);
    spec_destroy(&sp);
    json_decref(j);
}

int main(void)
{
    RUN(each_kind_of_wrong_spec_is_refused_with_its_message);
    RUN(a_good_spec_is_admitted_whole);
    RUN(paths_are_looked_up_only_when_asked);
    TEST_DONE();
}
