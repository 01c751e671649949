/*  jz_test.h - the minimal unit-test framework used by tests/test_*.c.

    A test file defines test functions with TEST(name) and lists them in
    main() with RUN(name). CHECK(...) records a failure and goes on;
    REQUIRE(...) records it and leaves the test. CHECK_NEAR compares
    doubles with an absolute-or-relative tolerance. SKIP("why") leaves a
    test that cannot run here (say what is missing); it counts as skipped,
    never as passed. The program prints one line per failure or skip and a
    closing "N passed, N failed, N skipped" line (a test passes when none
    of its checks failed) and exits 1 if any failed.
*/
#ifndef JZ_TEST_H
#define JZ_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int jzt_passed, jzt_failed, jzt_skipped, jzt_cur_failed, jzt_cur_skipped;
static const char *jzt_cur;

#define TEST(name) static void name(void)

#define RUN(name)                                                                        \
    do {                                                                                 \
        jzt_cur = #name;                                                                 \
        jzt_cur_failed = jzt_cur_skipped = 0;                                            \
        name();                                                                          \
        if (jzt_cur_failed)                                                              \
            jzt_failed++;                                                                \
        else if (jzt_cur_skipped)                                                        \
            jzt_skipped++;                                                               \
        else                                                                             \
            jzt_passed++;                                                                \
        fflush(stdout);                                                                  \
    } while (0)

#define JZT_FAIL(...)                                                                    \
    do {                                                                                 \
        printf("FAIL %s (%s:%d): ", jzt_cur, __FILE__, __LINE__);                        \
        printf(__VA_ARGS__);                                                             \
        printf("\n");                                                                    \
        jzt_cur_failed = 1;                                                              \
    } while (0)

#define SKIP(...)                                                                        \
    do {                                                                                 \
        printf("SKIP %s: ", jzt_cur);                                                    \
        printf(__VA_ARGS__);                                                             \
        printf("\n");                                                                    \
        jzt_cur_skipped = 1;                                                             \
        return;                                                                          \
    } while (0)

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond))                                                                     \
            JZT_FAIL("%s", #cond);                                                       \
    } while (0)

#define REQUIRE(cond)                                                                    \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            JZT_FAIL("%s", #cond);                                                       \
            return;                                                                      \
        }                                                                                \
    } while (0)

/* |a-b| <= tol or |a-b| <= tol*max(|a|,|b|) */
#define CHECK_NEAR(a, b, tol)                                                            \
    do {                                                                                 \
        double jzt_a = (a), jzt_b = (b), jzt_d = fabs(jzt_a - jzt_b);                    \
        double jzt_m = fmax(fabs(jzt_a), fabs(jzt_b));                                   \
        if (!(jzt_d <= (tol) || jzt_d <= (tol)*jzt_m))                                   \
            JZT_FAIL("%s = %.17g, %s = %.17g (tol %g)", #a, jzt_a, #b, jzt_b,            \
                     (double)(tol));                                                     \
    } while (0)

#define CHECK_STR(a, b)                                                                  \
    do {                                                                                 \
        const char *jzt_x = (a), *jzt_y = (b);                                           \
        if (!jzt_x || !jzt_y || strcmp(jzt_x, jzt_y) != 0)                               \
            JZT_FAIL("%s = \"%s\", expected \"%s\"", #a, jzt_x ? jzt_x : "(null)",       \
                     jzt_y ? jzt_y : "(null)");                                          \
    } while (0)

#define TEST_DONE()                                                                      \
    do {                                                                                 \
        printf("%d passed, %d failed, %d skipped\n", jzt_passed, jzt_failed,             \
               jzt_skipped);                                                             \
        return jzt_failed ? 1 : 0;                                                       \
    } while (0)

#endif
