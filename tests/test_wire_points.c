/*  test_wire_points.c - the quick decoder of a metrics message's points
    (common/wire_points.c) against the reference: jansson's decoding of
    the whole message and the controller's reading of each point
    ([integer step, valid name, wire_to_double value]). Every body it
    accepts must give the same points, bit for bit, and the same other
    fields; every body outside the plain form must be declined (the
    controller then decodes it whole and answers the same errors as
    before). Bodies written by jansson, by libjizhi's form, hand-written
    edge cases, random batches, and each prefix of a body (a truncated
    frame is never read past its end: run under ASan by `make test`).
*/
#include "jz_test.h"
#include "common/util.h"
#include "common/wire.h"
#include "common/wire_points.h"

#include <ctype.h>
#include <stdint.h>

/* The reference: what the controller made of the points before, or -1
   where it refuses the message or its points. */
static long s_ref(const char *body, size_t len, wire_point *out, size_t cap,
                  json_t **rest)
{
    json_error_t e;
    json_t *m = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);
    const char *type = json_string_value(json_object_get(m, "type"));
    json_t *pts = json_object_get(m, "points");
    if (!type || strcmp(type, "metrics") || !json_is_array(pts)) {
        json_decref(m);
        return -1;
    }
    size_t n = json_array_size(pts);
    for (size_t i = 0; i < n && i < cap; i++) {
        json_t *p = json_array_get(pts, i);
        json_t *st = json_array_get(p, 0), *nm = json_array_get(p, 1);
        const char *name = json_string_value(nm);
        int ok = json_is_array(p) && json_array_size(p) == 3 && json_is_integer(st) &&
                 name && (isalpha((unsigned char)*name) || *name == '_') &&
                 strlen(name) < 64 &&
                 wire_to_double(json_array_get(p, 2), &out[i].value) == 0;
        for (const char *c = name; ok && *c; c++)
            ok = isalnum((unsigned char)*c) || *c == '_' || *c == '.';
        if (!ok) {
            json_decref(m);
            return -1;
        }
        static char names[4096][64];
        snprintf(names[i], sizeof names[i], "%s", name);
        out[i].step = (long)json_integer_value(st);
        out[i].name = names[i];
    }
    json_object_set_new(m, "points", json_array());
    *rest = m;
    return (long)n;
}

static int s_same_double(double a, double b)
{
    uint64_t x, y;
    memcpy(&x, &a, 8);
    memcpy(&y, &b, 8);
    return x == y;
}

/* 1 when the quick decoder accepted the body, 0 when it declined; checks
   that what it accepted equals the reference. */
static int s_check(wire_points *wp, const char *body)
{
    size_t len = strlen(body);
    char *copy = util_xmalloc(len ? len : 1); /* not NUL-terminated */
    memcpy(copy, body, len);
    json_t *got = wire_points_split(wp, copy, len);
    static wire_point ref[4096];
    json_t *rest = NULL;
    long n = s_ref(body, len, ref, 4096, &rest);
    if (got) {
        CHECK(n >= 0);
        if (n >= 0) {
            CHECK(wp->n == (size_t)n);
            for (size_t i = 0; i < wp->n && i < (size_t)n; i++) {
                CHECK(wp->p[i].step == ref[i].step);
                CHECK_STR(wp->p[i].name, ref[i].name);
                CHECK(s_same_double(wp->p[i].value, ref[i].value));
            }
            CHECK(json_equal(got, rest));
        }
    } else {
        CHECK(wp->n == 0);
    }
    json_decref(rest);
    json_decref(got);
    free(copy);
    return got != NULL;
}

#define HEAD "{\"type\":\"metrics\",\"trial\":3,\"token\":\"t\",\"req\":7,\"points\":"

TEST(plain_forms_are_read_like_jansson)
{
    wire_points wp;
    wire_points_init(&wp);
    const char *ok[] = {
        HEAD "[[1,\"loss\",0.5],[2,\"val_acc\",1e-3],[3,\"a.b_c9\",-2.5E+10]]}",
        HEAD "[]}",
        HEAD " [ [ 1 , \"x\" , 3 ] "
             ",\n[-4,\"_y\",\"nan\"],[0,\"z\",\"inf\"],[5,\"z\",\"-inf\"] ] }",
        /* an integer value is jansson's integer made a double: -0 is +0 */
        HEAD "[[1,\"x\",-0],[2,\"x\",-0.0],[3,\"x\",123456789012345678],[4,\"x\",0]]}",
        HEAD "[[999999999999999999,\"x\",1.7976931348623157e308]]}",
        /* points first, and other members (even with "points" inside) after */
        "{\"points\":[[1,\"x\",2.5]],\"type\":\"metrics\",\"trial\":3,\"token\":\"t\","
        "\"req\":1,\"session\":\"s\\\"points\\\":[\",\"extra\":{\"points\":[[1]]}}",
        /* libjizhi's form: %.17g, "3.0" for integral doubles */
        HEAD "[[1,\"loss\",0.10000000000000001],[2,\"loss\",3.0],[3,\"l\",\"nan\"]],"
             "\"session\":\"ab12\"}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        int accepted = s_check(&wp, ok[i]);
        if (!accepted)
            printf("  declined: %s\n", ok[i]);
        CHECK(accepted);
    }
    wire_points_fini(&wp);
}

TEST(other_forms_are_declined)
{
    wire_points wp;
    wire_points_init(&wp);
    const char *no[] = {
        HEAD "[[1.0,\"x\",1]]}",                 /* step not a plain integer */
        HEAD "[[1e2,\"x\",1]]}",                 /* idem */
        HEAD "[[1234567890123456789,\"x\",1]]}", /* 19 digits */
        HEAD "[[1,\"x\",12345678901234567890]]}",
        HEAD "[[1,\"x\",1e400]]}", /* overflow */
        HEAD "[[1,\"x\",4.9e-324]]}",
        HEAD "[[1,\"\\u0078\",1]]}", /* an escape in a name */
        HEAD "[[1,\"9x\",1]]}",      /* names jizhi.h refuses */
        HEAD "[[1,\"x-y\",1]]}",
        HEAD "[[1,\"\",1]]}",
        HEAD "[[1,\"x\",\"NaN\"]]}",
        HEAD "[[1,\"x\",null]]}",
        HEAD "[[1,\"x\",true]]}",
        HEAD "[[1,\"x\",01]]}",
        HEAD "[[1,\"x\",.5]]}",
        HEAD "[[1,\"x\",+1]]}",
        HEAD "[[1,\"x\",0x10]]}",
        HEAD "[[1,\"x\",1.]]}",
        HEAD "[[1,\"x\",1e]]}", /* an exponent without digits */
        HEAD "[[1,\"x\",1e+]]}",
        HEAD "[[1,\"x\",-]]}",
        HEAD "[[1,\"x\",-x]]}",
        HEAD "[[1,\"x\"]]}",
        HEAD "[[1,\"x\",1,2]]}",
        HEAD "[[1,\"x\",1],]}",
        HEAD "[[1,\"x\",1]]",                /* unclosed object */
        HEAD "[[1,\"x\",1]]} x",             /* trailing text */
        HEAD "[[1,\"x\",1]],\"points\":[]}", /* a duplicate key */
        HEAD "{}}",
        "{\"type\":\"hello\",\"trial\":3,\"points\":[[1,\"x\",1]]}", /* not metrics */
        "{\"type\":\"metrics\",\"trial\":3}",                        /* no points */
        "{\"type\":\"metrics\",\"trial\":3,\"point\\u0073\":[[1,\"x\",1]]}",
        "[1,2]",
        "",
        HEAD "[[1,\"x\",1]],\"req\":}",
    };
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        int accepted = s_check(&wp, no[i]);
        if (accepted)
            printf("  accepted: %s\n", no[i]);
        CHECK(!accepted);
    }
    wire_points_fini(&wp);
}

/* Every prefix of a body: declined, never read past its end. */
TEST(truncated_bodies_are_declined)
{
    wire_points wp;
    wire_points_init(&wp);
    const char *full = HEAD "[[1,\"loss\",0.5],[22,\"acc\",1.25e-3],[3,\"x\",\"nan\"]]}";
    size_t len = strlen(full);
    for (size_t k = 0; k < len; k++) {
        char *b = util_xmalloc(k ? k : 1);
        memcpy(b, full, k);
        json_t *m = wire_points_split(&wp, b, k);
        CHECK(!m);
        json_decref(m);
        free(b);
    }
    CHECK(s_check(&wp, full));
    wire_points_fini(&wp);
}

/* Random batches written by jansson (as the rig and the Python side do)
   and in libjizhi's form, values over the whole double range. */
TEST(random_batches_match_jansson)
{
    wire_points wp;
    wire_points_init(&wp);
    uint64_t rng = 43;
    int accepted = 0;
    for (int round = 0; round < 200; round++) {
        size_t n = util_splitmix64(&rng) % 300;
        json_t *pts = json_array();
        for (size_t i = 0; i < n; i++) {
            uint64_t bits = util_splitmix64(&rng);
            double v;
            switch (bits % 5) {
            case 0:
                memcpy(&v, &bits, 8); /* any double, NaN and inf included */
                break;
            case 1:
                v = util_unif01(&rng);
                break;
            case 2:
                v = (double)(int64_t)(util_splitmix64(&rng) % 2000001) - 1e6;
                break;
            default:
                v = (util_unif01(&rng) - 0.5) * 1e-300;
            }
            json_t *val = isfinite(v) ? json_real(v)
                          : isnan(v)  ? json_string("nan")
                                      : json_string(v > 0 ? "inf" : "-inf");
            char name[16];
            snprintf(name, sizeof name, "m%d.x_%d", (int)(bits % 7), (int)(i % 3));
            long step = (long)(util_splitmix64(&rng) % 2000000) - 1000000;
            json_array_append_new(pts, json_pack("[I,s,o]", (json_int_t)step, name, val));
        }
        json_t *m =
            json_pack("{s:s,s:i,s:s,s:I,s:s,s:o}", "type", "metrics", "trial", 9, "token",
                      "abc", "req", (json_int_t)round, "session", "s1", "points", pts);
        char *body = json_dumps(m, round % 2 ? JSON_COMPACT : JSON_INDENT(1));
        /* subnormals and overflows decline; everything else is read */
        accepted += s_check(&wp, body);
        free(body);
        json_decref(m);
    }
    CHECK(accepted >= 180); /* the quick path, not the fallback, was tested */
    printf("  %d of 200 random batches read by the quick path\n", accepted);
    wire_points_fini(&wp);
}

int main(void)
{
    RUN(plain_forms_are_read_like_jansson);
    RUN(other_forms_are_declined);
    RUN(truncated_bodies_are_declined);
    RUN(random_batches_match_jansson);
    TEST_DONE();
}
