/*  test_util.c - common/util.c and the schedulers' per-trial table. */
#include "jz_test.h"

#include "common/util.h"
#include "schedulers/sched.h"

#include <jansson.h>

#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

TEST(splitmix64_reference)
{
    /* The published splitmix64 sequence for seed 1234567. */
    static const uint64_t want[] = {6457827717110365317ULL, 3203168211198807973ULL,
                                    9817491932198370423ULL, 4593380528125082431ULL,
                                    16408922859458223821ULL};
    uint64_t s = 1234567;
    for (int i = 0; i < 5; i++)
        CHECK(util_splitmix64(&s) == want[i]);
}

TEST(uniform_and_normal)
{
    uint64_t s = 42;
    double sum = 0, sq = 0;
    int n = 20000;
    for (int i = 0; i < n; i++) {
        double u = util_unif01(&s);
        REQUIRE(u > 0 && u < 1);
        double z = util_normal(&s);
        REQUIRE(isfinite(z));
        sum += z;
        sq += z * z;
    }
    CHECK_NEAR(sum / n, 0, 0.05);
    CHECK_NEAR(sq / n, 1, 0.05);
}

TEST(random_hex)
{
    char a[17], b[17];
    util_random_hex(a, 8);
    util_random_hex(b, 8);
    CHECK(strlen(a) == 16 && strlen(b) == 16);
    CHECK(strspn(a, "0123456789abcdef") == 16);
    CHECK(strcmp(a, b) != 0);
}

TEST(strf)
{
    char *s = util_strf("%s-%d", "trial", 7);
    REQUIRE(s);
    CHECK(!strcmp(s, "trial-7"));
    free(s);
    s = util_xstrf("%05.1f", 2.25);
    CHECK(!strcmp(s, "002.2") || !strcmp(s, "002.3"));
    free(s);
}

TEST(clocks)
{
    double a = util_now(), b = util_now();
    CHECK(b >= a);
    CHECK(util_wall() > 1.6e9); /* after 2020 */
}

TEST(mkdirs)
{
    char root[] = "/tmp/jz-util-XXXXXX";
    REQUIRE(mkdtemp(root));
    char *deep = util_strf("%s/a/b//c/", root);
    REQUIRE(deep);
    CHECK(util_mkdirs(deep, 0755) == 0);
    struct stat sb;
    CHECK(stat(deep, &sb) == 0 && S_ISDIR(sb.st_mode));
    CHECK(util_mkdirs(deep, 0755) == 0); /* already there */
    char *file = util_strf("%s/a/file", root);
    FILE *f = fopen(file, "w");
    REQUIRE(f);
    fclose(f);
    errno = 0;
    CHECK(util_mkdirs(file, 0755) == -1 && errno == ENOTDIR);
    char *under = util_strf("%s/x", file);
    CHECK(util_mkdirs(under, 0755) == -1);
    CHECK(util_mkdirs("", 0755) == -1);
    unlink(file);
    char *cmd = util_strf("rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    free(cmd);
    free(under);
    free(file);
    free(deep);
}

typedef struct {
    long id;
    double x;
} row;

TEST(sched_rows)
{
    row *rows = NULL;
    size_t n = 0, cap = 0;
    int created = -1;
    CHECK(SCHED_ROWS_GET(rows, n, cap, 5, 0, &created) == NULL && created == 0);
    for (long id = 1; id <= 100; id++) {
        row *r = SCHED_ROWS_GET(rows, n, cap, id * 3, 1, &created);
        REQUIRE(r && created == 1 && r->id == id * 3 && r->x == 0);
        r->x = (double)id;
    }
    CHECK(n == 100 && cap >= 100);
    for (long id = 1; id <= 100; id++) {
        row *r = SCHED_ROWS_GET(rows, n, cap, id * 3, 1, &created);
        REQUIRE(r && created == 0 && r->x == (double)id);
    }
    CHECK(SCHED_ROWS_GET(rows, n, cap, 4, 0, NULL) == NULL);
    CHECK(n == 100);
    CHECK(rows[0].id == 3 && rows[99].id == 300); /* arrival order kept */
    free(rows);
}

TEST(sched_options_read)
{
    json_t *o = json_pack("{s:i, s:f, s:s, s:f}", "n", 7, "x", 2.5, "s", "3", "w", 4.0);
    char err[128] = "";
    double v;
    CHECK(sched_opt_num(o, "guard", "absent", 1.5, 0, 10, 0, &v, err, sizeof err) == 0 &&
          v == 1.5);
    CHECK(sched_opt_num(o, "guard", "n", 0, 0, 10, 1, &v, err, sizeof err) == 0 &&
          v == 7);
    CHECK(sched_opt_num(o, "guard", "w", 0, 0, 10, 1, &v, err, sizeof err) == 0 &&
          v == 4);
    CHECK(sched_opt_num(o, "scheduler", "x", 0, 0, 10, 1, &v, err, sizeof err) == -1);
    CHECK_STR(err, "scheduler.x: must be an integer from 0 to 10");
    CHECK(sched_opt_num(o, "scheduler", "n", 0, 0, 5, 0, &v, err, sizeof err) == -1);
    CHECK_STR(err, "scheduler.n: must be a number from 0 to 5");
    CHECK(sched_opt_num(o, "early_stopping", "s", 0, -INFINITY, INFINITY, 0, &v, err,
                        sizeof err) == -1);
    CHECK_STR(err, "early_stopping.s: must be a number");
    json_decref(o);
}

int main(void)
{
    RUN(splitmix64_reference);
    RUN(uniform_and_normal);
    RUN(random_hex);
    RUN(strf);
    RUN(clocks);
    RUN(mkdirs);
    RUN(sched_rows);
    RUN(sched_options_read);
    TEST_DONE();
}
