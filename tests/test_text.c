/*  test_text.c - numbers and times as text (common/text.c): shortest
    round-trip doubles against strtod on many values, JSON text with reals
    shortened and strings untouched, ISO 8601 times.
*/
#include "jz_test.h"
#include "common/text.h"

#include <stdint.h>

TEST(shortest_known_values)
{
    char b[TEXT_DOUBLE_MAX];
    CHECK(!strcmp(text_double(0.8728, b), "0.8728"));
    CHECK(!strcmp(text_double(0.2, b), "0.2"));
    CHECK(!strcmp(text_double(1e-6, b), "1e-06"));
    CHECK(!strcmp(text_double(3.0, b), "3"));
    CHECK(!strcmp(text_double(-0.1, b), "-0.1"));
    CHECK(!strcmp(text_double(0.1 + 0.2, b), "0.30000000000000004"));
    CHECK(!strcmp(text_double(50.0, b), "50"));
    CHECK(!strcmp(text_double(340.0, b), "340"));
    CHECK(!strcmp(text_double(1e14, b), "100000000000000"));
    CHECK(!strcmp(text_double(1e15, b), "1e+15"));
    CHECK(!strcmp(text_double(-2500.0, b), "-2500"));
    CHECK(!strcmp(text_double(NAN, b), "nan"));
    CHECK(!strcmp(text_double(-INFINITY, b), "-inf"));
}

TEST(shortest_round_trips_and_is_minimal)
{
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double v;
        if (i % 2) {
            memcpy(&v, &x, sizeof v);
            if (!isfinite(v))
                continue;
        } else {
            v = (double)(x >> 11) / 9007199254740992.0 * pow(10.0, (int)(x % 21) - 10);
        }
        char b[TEXT_DOUBLE_MAX], shorter[400];
        text_double(v, b);
        REQUIRE(strtod(b, NULL) == v);
        /* one digit fewer does not read back */
        /* significant digits: no leading zeros, and the zeros that end a
           whole number written out ("340") only place the point */
        int digits = 0, seen = 0, zeros = 0;
        for (const char *p = b; *p && *p != 'e'; p++) {
            if (*p == '.')
                zeros = 0;
            seen |= *p >= '1' && *p <= '9';
            if (seen && *p >= '0' && *p <= '9') {
                digits++;
                zeros = *p == '0' && !strchr(b, '.') ? zeros + 1 : 0;
            }
        }
        digits -= zeros;
        if (digits > 1) {
            snprintf(shorter, sizeof shorter, "%.*g", digits - 1 > 17 ? 17 : digits - 1,
                     v);
            REQUIRE(strtod(shorter, NULL) != v);
        }
    }
}

TEST(json_reals_shortened_strings_kept)
{
    json_t *j =
        json_pack("{s:f, s:f, s:f, s:i, s:s, s:[f, f]}", "high", 0.2, "lr", 1e-6, "whole",
                  2.0, "n", 7, "s", "0.20000000000000001", "a", 0.1, -1.5e300);
    char *t = text_json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    REQUIRE(t);
    CHECK(!strcmp(t, "{\"a\":[0.1,-1.5e+300],\"high\":0.2,\"lr\":1e-06,\"n\":7,"
                     "\"s\":\"0.20000000000000001\",\"whole\":2.0}"));
    json_t *back = json_loads(t, 0, NULL);
    REQUIRE(back);
    CHECK(json_equal(back, j));
    CHECK(json_is_real(json_object_get(back, "whole")));
    json_decref(back);
    free(t);
    json_decref(j);
    char esc[] = "{\"k\\\"1.50000\":[1.5000000000000000, \"a\\\\\", 12]}";
    text_json_shorten(esc);
    CHECK(!strcmp(esc, "{\"k\\\"1.50000\":[1.5, \"a\\\\\", 12]}"));
}

TEST(iso_times)
{
    char b[TEXT_TIME_MAX];
    CHECK(!strcmp(text_time(0, b), "-"));
    CHECK(!strcmp(text_time(1796090088.0, b), "2026-12-01T01:54:48Z"));
    CHECK(!strcmp(text_time(1796090088.25, b), "2026-12-01T01:54:48.250Z"));
    CHECK(!strcmp(text_time(1796090088.9996, b), "2026-12-01T01:54:49Z"));
}

int main(void)
{
    RUN(shortest_known_values);
    RUN(shortest_round_trips_and_is_minimal);
    RUN(json_reals_shortened_strings_kept);
    RUN(iso_times);
    TEST_DONE();
}
