/*  test_web.c - the web part's pieces that need no HTTP: roles and tokens
    (common/ident), number formatting (web_buf), the study curves cache
    (web_curves) over a real SQLite store, the gate on expensive reads
    (web_gate) and the checks of POST bodies (web_body). The HTTP API and the page are
    tested end to end in tests/integration/test_web_*.py. */
#include "jz_test.h"

#include "../common/ident.h"
#include "../store/store.h"
#include "../web/web_body.h"
#include "../web/web_buf.h"
#include "../web/web_curves.h"
#include "../web/web_gate.h"

#include <pthread.h>
#include <time.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char s_dir[64];

TEST(roles_and_what_they_allow)
{
    ident_role r;
    CHECK(ident_role_parse("admin", &r) == 0 && r == IDENT_ADMIN);
    CHECK(ident_role_parse("viewer", &r) == 0 && r == IDENT_VIEWER);
    CHECK(ident_role_parse("root", &r) == -1);
    CHECK(ident_role_parse(NULL, &r) == -1);
    CHECK(ident_role_parse("none", &r) == -1); /* no role one can name */
    for (int i = IDENT_ADMIN; i <= IDENT_DISPATCHER; i++) {
        CHECK(ident_role_parse(ident_role_str((ident_role)i), &r) == 0 && (int)r == i);
        CHECK(ident_allows((ident_role)i, IDENT_READ));
    }
    CHECK_STR(ident_role_str((ident_role)99), "none");
    CHECK(ident_allows(IDENT_USER, IDENT_STEER) &&
          ident_allows(IDENT_USER, IDENT_SUBMIT));
    CHECK(!ident_allows(IDENT_USER, IDENT_ADMINISTER) &&
          !ident_allows(IDENT_USER, IDENT_RUN));
    CHECK(!ident_allows(IDENT_VIEWER, IDENT_STEER) &&
          !ident_allows(IDENT_VIEWER, IDENT_SUBMIT));
    CHECK(!ident_allows(IDENT_DISPATCHER, IDENT_STEER) &&
          ident_allows(IDENT_DISPATCHER, IDENT_RUN));
    CHECK(ident_allows(IDENT_ADMIN, IDENT_ADMINISTER) &&
          !ident_allows(IDENT_ADMIN, IDENT_RUN));
    CHECK(!ident_allows(IDENT_NONE, IDENT_READ));
    CHECK(ident_valid_user("alice") && ident_valid_user("a.b-c_d@x"));
    CHECK(!ident_valid_user("") && !ident_valid_user("a b") && !ident_valid_user("a/b"));
    char long_name[80];
    memset(long_name, 'a', 64);
    long_name[64] = 0;
    CHECK(!ident_valid_user(long_name));
}

TEST(tokens_are_random_and_only_their_hash_is_kept)
{
    char a[IDENT_TOKEN_LEN + 1], b[IDENT_TOKEN_LEN + 1];
    REQUIRE(ident_token_new(a) == 0 && ident_token_new(b) == 0);
    CHECK(strlen(a) == IDENT_TOKEN_LEN && !strncmp(a, "jzt_", 4));
    CHECK(strcmp(a, b) != 0);
    CHECK(ident_token_wellformed(a) && ident_token_wellformed(b));
    CHECK(!ident_token_wellformed("jzt_xyz") && !ident_token_wellformed(NULL));
    char bad[IDENT_TOKEN_LEN + 1];
    memcpy(bad, a, sizeof bad);
    bad[10] = 'G';
    CHECK(!ident_token_wellformed(bad));
    char ha[IDENT_HASH_LEN + 1], ha2[IDENT_HASH_LEN + 1], hb[IDENT_HASH_LEN + 1];
    ident_token_hash(a, ha);
    ident_token_hash(a, ha2);
    ident_token_hash(b, hb);
    CHECK(strlen(ha) == IDENT_HASH_LEN && !strcmp(ha, ha2) && strcmp(ha, hb));
    /* SHA-256 of "abc" (FIPS 180-2 example) */
    char h[IDENT_HASH_LEN + 1];
    ident_token_hash("abc", h);
    CHECK_STR(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    char tag[IDENT_TAG_LEN + 1];
    ident_attempt_tag("abc", tag); /* the hash's first 16 digits */
    CHECK_STR(tag, "ba7816bf8f01cfea");
}

static double s_roundtrip(double x, char *text, size_t size)
{
    web_buf b;
    web_buf_init(&b);
    web_buf_num(&b, x);
    snprintf(text, size, "%s", b.data);
    web_buf_fini(&b);
    return strtod(text, NULL);
}

TEST(numbers_print_with_seven_digits_and_integers_exactly)
{
    char t[64];
    static const struct {
        double x;
        const char *text;
    } cases[] = {{0, "0"},
                 {3, "3"},
                 {-2.5, "-2.5"},
                 {0.1, "0.1"},
                 {1e-5, "0.00001"},
                 {100.25, "100.25"},
                 {123456789, "123456789"},
                 {9.9999999, "10"},
                 {1234.56789, "1234.568"},
                 {-0.000123456, "-0.000123456"},
                 {1e300, "1e+300"},
                 {2.5e-9, "2.5e-09"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s_roundtrip(cases[i].x, t, sizeof t);
        CHECK_STR(t, cases[i].text);
    }
    s_roundtrip(NAN, t, sizeof t);
    CHECK_STR(t, "null");
    s_roundtrip(INFINITY, t, sizeof t);
    CHECK_STR(t, "null");
    /* many values across magnitudes read back within 7 digits */
    srand(7);
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        double x = (rand() / (double)RAND_MAX - 0.5) * pow(10, rand() % 30 - 12);
        double y = s_roundtrip(x, t, sizeof t);
        bad += x != 0 && fabs(y - x) > 5.01e-7 * fabs(x);
    }
    CHECK(bad == 0);
    web_buf b;
    web_buf_init(&b);
    web_buf_jstr(&b, "a\"b\\c\n\x01");
    CHECK_STR(b.data, "\"a\\\"b\\\\c\\u000a\\u0001\"");
    web_buf_fini(&b);
}

/* A study with `n` trials of `points` points of "loss" = trial + step/1000
   (and one "acc" point each), stored through the store's own API. */
static store_t *s_study(const char *file, long n, long points, long *sid)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", s_dir, file);
    unlink(path);
    char err[256];
    store_t *s = store_open(path, 0, err, sizeof err);
    if (!s)
        return NULL;
    json_t *spec = json_pack("{s:s}", "name", "c");
    *sid = store_study_insert(s, "c", spec, STUDY_RUNNING, 1);
    json_decref(spec);
    store_begin(s);
    for (long i = 0; i < n; i++) {
        store_trial t;
        memset(&t, 0, sizeof t);
        t.study_id = *sid;
        t.number = i;
        t.state = TRIAL_RUNNING;
        snprintf(t.token, sizeof t.token, "t%ld", i);
        t.params = json_object();
        t.parent = -1;
        t.value = t.last_value = t.best_value = NAN;
        store_trial_insert(s, &t);
        for (long k = 0; k < points; k++) {
            store_point p = {k, "loss", (double)i + (double)k / 1000};
            store_metrics_add(s, t.id, 0, &p, 1, 100 + (double)k);
        }
        store_point a = {0, "acc", 0.5};
        store_metrics_add(s, t.id, 0, &a, 1, 100);
        store_trial_fini(&t);
    }
    store_commit(s);
    return s;
}

TEST(curves_are_downsampled_means_and_follow_new_points)
{
    long sid;
    store_t *s = s_study("curves.db", 3, 1000, &sid);
    REQUIRE(s);
    web_curves_t *c = web_curves_new();
    web_buf b;
    web_buf_init(&b);
    char err[256];
    REQUIRE(web_curves_json(c, s, sid, "loss", 10, 1, &b, err, sizeof err) == 0);
    json_error_t jerr;
    json_t *j = json_loads(b.data, 0, &jerr);
    REQUIRE(j);
    /* the same question with nothing new: the same answer */
    web_buf again;
    web_buf_init(&again);
    REQUIRE(web_curves_json(c, s, sid, "loss", 10, 1, &again, err, sizeof err) == 0);
    CHECK_STR(again.data, b.data);
    web_buf_fini(&again);
    json_t *trials = json_object_get(j, "trials");
    CHECK(json_object_size(trials) == 3);
    const char *key;
    json_t *cv;
    json_object_foreach(trials, key, cv)
    {
        long tid = atol(key);
        json_t *steps = json_object_get(cv, "s"), *ys = json_object_get(cv, "y");
        CHECK(json_array_size(steps) >= 5 && json_array_size(steps) <= 10);
        CHECK(json_array_size(ys) == json_array_size(steps));
        /* each point is the mean of its bucket: between the bucket's lo and
           hi, and the last point ends at the last step */
        size_t n = json_array_size(steps);
        CHECK(json_integer_value(json_array_get(steps, n - 1)) == 999);
        double prev = -1;
        for (size_t i = 0; i < n; i++) {
            double y = json_number_value(json_array_get(ys, i));
            double lo = json_number_value(json_array_get(json_object_get(cv, "lo"), i));
            double hi = json_number_value(json_array_get(json_object_get(cv, "hi"), i));
            CHECK(lo <= y + 1e-6 && y <= hi + 1e-6 && y > prev);
            prev = y;
            CHECK(floor(y) == (double)(tid - 1)); /* trial i's values are i + step/1000 */
        }
        /* the overall mean is preserved: (0 + 999)/2/1000 over the trial */
        CHECK(json_array_size(json_object_get(cv, "t")) == n);
    }
    json_decref(j);
    web_buf_fini(&b);
    /* a new attempt of trial 1 replaces its curve; new points of others add */
    store_begin(s);
    store_point p = {0, "loss", 42.0};
    long first = 1;
    store_trial t0;
    REQUIRE(store_trial_get(s, first, &t0) == 1);
    store_metrics_add(s, t0.id, 1, &p, 1, 5000);
    store_trial_fini(&t0);
    store_commit(s);
    web_buf_init(&b);
    REQUIRE(web_curves_json(c, s, sid, "loss", 10, 0, &b, err, sizeof err) == 0);
    j = json_loads(b.data, 0, &jerr);
    REQUIRE(j);
    json_t *c1 = json_object_get(json_object_get(j, "trials"), "1");
    CHECK(json_array_size(json_object_get(c1, "y")) == 1);
    CHECK(json_number_value(json_array_get(json_object_get(c1, "y"), 0)) == 42.0);
    CHECK(json_object_get(c1, "lo") == NULL); /* no band unless asked */
    json_decref(j);
    web_buf_fini(&b);
    /* names, and an unknown metric gives no curves */
    web_buf_init(&b);
    REQUIRE(web_curves_names(c, s, sid, &b, err, sizeof err) == 0);
    CHECK_STR(b.data, "[\"loss\",\"acc\"]");
    web_buf_fini(&b);
    web_buf_init(&b);
    REQUIRE(web_curves_json(c, s, sid, "nope", 10, 0, &b, err, sizeof err) == 0);
    CHECK_STR(b.data, "{\"metric\":\"nope\",\"trials\":{}}");
    web_buf_fini(&b);
    web_curves_destroy(&c);
    CHECK(c == NULL);
    web_curves_destroy(&c);
    store_close(&s);
}

/* The gate lets `max` in; the next is refused at once (wait 0) or after
   its wait; a place given back lets a waiter in. */
static web_gate s_gate;
static void *s_leave_soon(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    web_gate_leave(&s_gate);
    return NULL;
}

TEST(gate_bounds_expensive_reads)
{
    web_gate_init(&s_gate, 2);
    CHECK(web_gate_enter(&s_gate, 0) == 0);
    CHECK(web_gate_enter(&s_gate, 0) == 0);
    CHECK(web_gate_enter(&s_gate, 0) == -1);
    CHECK(web_gate_enter(&s_gate, 20) == -1);
    CHECK(s_gate.busy == 2);
    /* a waiter gets the place given back while it waits */
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, s_leave_soon, NULL) == 0);
    CHECK(web_gate_enter(&s_gate, 60000) == 0);
    pthread_join(th, NULL);
    CHECK(s_gate.busy == 2);
    web_gate_leave(&s_gate);
    web_gate_leave(&s_gate);
    CHECK(s_gate.busy == 0);
    CHECK(web_gate_enter(&s_gate, 0) == 0);
    web_gate_leave(&s_gate);
    web_gate_fini(&s_gate);
}

/* POST bodies: what each check accepts and the message it refuses with
   (the fuzz target tests/fuzz/fuzz_webjson.c drives the same functions). */
TEST(post_bodies_are_checked)
{
    json_t *in = NULL;
    char err[300];
    CHECK(web_body_parse("", 0, &in, err, sizeof err) == 0 && json_object_size(in) == 0);
    json_decref(in);
    CHECK(web_body_parse("[1]", 3, &in, err, sizeof err) == -1 && !in);
    CHECK(strstr(err, "must be a JSON object") != NULL);
    CHECK(web_body_parse("{\"a\":", 5, &in, err, sizeof err) == -1 && !in);
    CHECK(strstr(err, "malformed JSON") != NULL);
    /* a key given twice is ambiguous: refused */
    CHECK(web_body_parse("{\"a\":1,\"a\":2}", 13, &in, err, sizeof err) == -1);
    /* not NUL-terminated: only len bytes are read */
    CHECK(web_body_parse("{}garbage", 2, &in, err, sizeof err) == 0);
    json_decref(in);

    const json_t *values;
    static const char *const bad[] = {"{}",
                                      "{\"values\":{}}",
                                      "{\"values\":[1]}",
                                      "{\"values\":{\"a b\":1}}",
                                      "{\"values\":{\"lr\":[0.1]}}",
                                      "{\"values\":{\"lr\":null}}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        REQUIRE(web_body_parse(bad[i], strlen(bad[i]), &in, err, sizeof err) == 0);
        err[0] = 0;
        CHECK(web_body_set_values(in, &values, err, sizeof err) == -1 && !values &&
              err[0]);
        json_decref(in);
    }
    const char *good = "{\"values\":{\"lr\":0.01,\"opt\":\"adam\"}}";
    REQUIRE(web_body_parse(good, strlen(good), &in, err, sizeof err) == 0);
    CHECK(web_body_set_values(in, &values, err, sizeof err) == 0);
    CHECK(json_object_size(values) == 2);
    int release = -1;
    CHECK(web_body_release(in, &release, err, sizeof err) == 0 && release == 0);
    json_decref(in);
    REQUIRE(web_body_parse("{\"release\":1}", 13, &in, err, sizeof err) == 0);
    CHECK(web_body_release(in, &release, err, sizeof err) == -1);
    CHECK(strstr(err, "release: expected true or false") != NULL);
    json_decref(in);
    REQUIRE(web_body_parse("{\"release\":true}", 16, &in, err, sizeof err) == 0);
    CHECK(web_body_release(in, &release, err, sizeof err) == 0 && release == 1);
    json_decref(in);
    /* a waited fork: wait and wait_s (1..max, default def) */
    int wait = -1;
    double wait_s = 0;
    REQUIRE(web_body_parse("{}", 2, &in, err, sizeof err) == 0);
    CHECK(web_body_wait(in, &wait, &wait_s, 120, 600, err, sizeof err) == 0 &&
          wait == 0 && wait_s == 120);
    json_decref(in);
    const char *good_wait = "{\"wait\":true,\"wait_s\":40}";
    REQUIRE(web_body_parse(good_wait, strlen(good_wait), &in, err, sizeof err) == 0);
    CHECK(web_body_wait(in, &wait, &wait_s, 120, 600, err, sizeof err) == 0 &&
          wait == 1 && wait_s == 40);
    json_decref(in);
    const char *bad_wait[] = {"{\"wait\":1}", "{\"wait\":true,\"wait_s\":0}",
                              "{\"wait\":true,\"wait_s\":601}",
                              "{\"wait\":true,\"wait_s\":\"9\"}"};
    for (size_t i = 0; i < sizeof bad_wait / sizeof *bad_wait; i++) {
        REQUIRE(web_body_parse(bad_wait[i], strlen(bad_wait[i]), &in, err, sizeof err) ==
                0);
        CHECK(web_body_wait(in, &wait, &wait_s, 120, 600, err, sizeof err) == -1);
        CHECK(strstr(err, i ? "wait_s: expected seconds from 1 to 600"
                            : "wait: expected true or false") != NULL);
        json_decref(in);
    }
}

int main(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/jz-test-web-XXXXXX");
    if (!mkdtemp(s_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(roles_and_what_they_allow);
    RUN(tokens_are_random_and_only_their_hash_is_kept);
    RUN(numbers_print_with_seven_digits_and_integers_exactly);
    RUN(curves_are_downsampled_means_and_follow_new_points);
    RUN(gate_bounds_expensive_reads);
    RUN(post_bodies_are_checked);
    char path[128];
    snprintf(path, sizeof path, "rm -rf %s", s_dir);
    if (system(path) != 0)
        return 1;
    TEST_DONE();
}
