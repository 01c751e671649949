/*  test_util.c - common/util.c and the schedulers' per-trial table. */
#include "jz_test.h"

#include "common/util.h"
#include "schedulers/sched.h"

#include <jansson.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <stdint.h>
#include <sys/stat.h>

/* sched_alloc_sets_the_base asks for SIZE_MAX bytes to see the out-of-memory
   path: under ASan an impossible allocation returns NULL, as in libc,
   instead of aborting the test. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}
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

TEST(backoff_schedule)
{
    /* base 2, cap 16: waits in [2,3), [4,6), [8,12), [16,24), then
       [16,24) for ever; every wait >= the nominal one, the jitter spread
       over the whole half */
    const double lo[] = {2, 4, 8, 16, 16, 16, 16};
    uint64_t s = 7;
    for (int k = 0; k < 7; k++) {
        double mn = 1e9, mx = 0;
        for (int i = 0; i < 2000; i++) {
            double w = util_backoff(k + 1, 2.0, 16.0, &s);
            mn = w < mn ? w : mn;
            mx = w > mx ? w : mx;
        }
        CHECK(mn >= lo[k] && mx < 1.5 * lo[k]);
        CHECK(mn < 1.02 * lo[k] && mx > 1.48 * lo[k]);
    }
    /* sends below 1 wait the base; a huge count stays at the cap */
    double w = util_backoff(0, 2.0, 16.0, &s);
    CHECK(w >= 2 && w < 3);
    w = util_backoff(1000000, 2.0, 16.0, &s);
    CHECK(w >= 16 && w < 24);
    /* a stopped controller for 60 s: at most 7 resends of one request,
       where a fixed 2 s period made 30 */
    double t = 0;
    int sends = 1;
    while ((t += util_backoff(sends, 2.0, 16.0, &s)) < 60)
        sends++;
    CHECK(sends - 1 <= 7 && sends - 1 >= 4);
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

TEST(sched_options_unknown)
{
    static const char *const known[] = {"type", "seed", NULL};
    json_t *o = json_pack("{s:s, s:i}", "type", "random", "seed", 3);
    CHECK(sched_opt_unknown(o, known) == NULL);
    CHECK(sched_opt_unknown(NULL, known) == NULL);
    json_object_set_new(o, "colour", json_integer(1));
    const char *k = sched_opt_unknown(o, known);
    CHECK(k && !strcmp(k, "colour"));
    static const char *const none[] = {NULL};
    k = sched_opt_unknown(o, none);
    CHECK(k && (!strcmp(k, "type") || !strcmp(k, "seed") || !strcmp(k, "colour")));
    json_decref(o);
}

TEST(sched_vi_order)
{
    sched_vi a[] = {{2.0, 0}, {-1.0, 1}, {2.0, 2}, {0.5, 3}, {-1.0, 4}, {2.0, 5}};
    qsort(a, 6, sizeof *a, sched_vi_cmp);
    static const int want[] = {1, 4, 3, 0, 2, 5}; /* by value, ties by index */
    for (int k = 0; k < 6; k++)
        CHECK(a[k].i == want[k]);
}

TEST(sched_alloc_sets_the_base)
{
    typedef struct {
        sched_t base;
        long n[8];
    } one;
    static const sched_ops ops = {.name = "x"};
    static spec_t spec; /* only its address is kept */
    char err[64] = "";
    one *o = sched_alloc(sizeof *o, &ops, &spec, err, sizeof err);
    REQUIRE(o != NULL);
    CHECK(o->base.ops == &ops && o->base.spec == &spec && o->n[7] == 0 && !err[0]);
    free(o);
    CHECK(sched_alloc(SIZE_MAX, &ops, &spec, err, sizeof err) == NULL);
    CHECK_STR(err, "out of memory");
}

TEST(env_at_most)
{
    unsetenv("JZ_TEST_LIMIT");
    CHECK(util_env_at_most("JZ_TEST_LIMIT", 30) == 30);
    static const struct {
        const char *text;
        double want;
    } cases[] = {{"2.5", 2.5}, {"30", 30}, {"31", 30}, {"0", 30},
                 {"-1", 30},   {"x", 30},  {"", 30},   {"1e-3", 1e-3}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        setenv("JZ_TEST_LIMIT", cases[i].text, 1);
        CHECK(util_env_at_most("JZ_TEST_LIMIT", 30) == cases[i].want);
    }
    unsetenv("JZ_TEST_LIMIT");
}

TEST(utf8_len)
{
    const unsigned char *a = (const unsigned char *)"a";
    CHECK(util_utf8_len(a, 1) == 1);
    const unsigned char e2[] = {0xC3, 0xA9};             /* é */
    const unsigned char e3[] = {0xE2, 0x82, 0xAC};       /* € */
    const unsigned char e4[] = {0xF0, 0x9F, 0x98, 0x80}; /* U+1F600 */
    CHECK(util_utf8_len(e2, 2) == 2);
    CHECK(util_utf8_len(e3, 3) == 3);
    CHECK(util_utf8_len(e4, 4) == 4);
    CHECK(util_utf8_len(e4, 3) == 0); /* cut off */
    CHECK(util_utf8_len(e3, 2) == 0);
    const unsigned char overlong[] = {0xC0, 0xAF};
    CHECK(util_utf8_len(overlong, 2) == 0);
    const unsigned char cont[] = {0x80};
    CHECK(util_utf8_len(cont, 1) == 0); /* a continuation byte alone */
    const unsigned char badcont[] = {0xE2, 0x28, 0xA1};
    CHECK(util_utf8_len(badcont, 3) == 0);
    const unsigned char f8[] = {0xF8, 0x88, 0x80, 0x80, 0x80};
    CHECK(util_utf8_len(f8, 5) == 0); /* no five-byte forms */
}

TEST(proc_stat)
{
    char buf[512];
    const char *p = util_proc_stat((long)getpid(), buf, sizeof buf);
    REQUIRE(p != NULL);
    char state = 0;
    int ppid = 0;
    CHECK(sscanf(p, " %c %d", &state, &ppid) == 2);
    CHECK(state == 'R');
    CHECK(ppid == (int)getppid());
    CHECK(util_proc_stat(-5, buf, sizeof buf) == NULL);
    char small[8]; /* cut before the ")": not what Linux writes */
    CHECK(util_proc_stat((long)getpid(), small, sizeof small) == NULL);
}

TEST(reserve)
{
    long *a = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < 1000; i++) {
        REQUIRE(util_reserve(&a, &cap, i, sizeof *a) == 0);
        REQUIRE(cap > i);
        a[i] = (long)i * 7;
    }
    CHECK(cap == 1024); /* 16 doubled */
    for (size_t i = 0; i < 1000; i++)
        REQUIRE(a[i] == (long)i * 7);
    long *before = a;
    CHECK(util_reserve(&a, &cap, 1023, sizeof *a) == 0 && a == before && cap == 1024);
    /* an element count whose bytes overflow: refused, the array kept */
    CHECK(util_reserve(&a, &cap, SIZE_MAX / 4, sizeof *a) == -1);
    CHECK(a == before && cap == 1024 && a[999] == 999 * 7);
    free(a);
}

/* An enum's name table: the index, -1 for another text or NULL; a hole
   (NULL entry) is skipped. */
TEST(name_index)
{
    static const char *const names[] = {"", "set", NULL, "stop"};
    CHECK(util_name_index(names, 4, "set") == 1);
    CHECK(util_name_index(names, 4, "stop") == 3);
    CHECK(util_name_index(names, 4, "") == 0);
    CHECK(util_name_index(names, 3, "stop") == -1); /* past n */
    CHECK(util_name_index(names, 4, "Stop") == -1);
    CHECK(util_name_index(names, 4, NULL) == -1);
}

TEST(deadline)
{
    /* before <= the call <= after, so before + 1.5 s <= d <= after + 1.5 s */
    struct timespec before, after;
    clock_gettime(CLOCK_MONOTONIC, &before);
    struct timespec d = util_deadline(1500);
    clock_gettime(CLOCK_MONOTONIC, &after);
    CHECK(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
    long long dn = (long long)d.tv_sec * 1000000000LL + d.tv_nsec;
    long long bn = (long long)before.tv_sec * 1000000000LL + before.tv_nsec;
    long long an = (long long)after.tv_sec * 1000000000LL + after.tv_nsec;
    CHECK(dn >= bn + 1500000000LL && dn <= an + 1500000000LL);
    d = util_deadline(999);
    CHECK(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
    CHECK(util_deadline(0).tv_sec >= after.tv_sec);
}

int main(void)
{
    RUN(splitmix64_reference);
    RUN(uniform_and_normal);
    RUN(backoff_schedule);
    RUN(random_hex);
    RUN(strf);
    RUN(clocks);
    RUN(mkdirs);
    RUN(sched_rows);
    RUN(sched_options_read);
    RUN(sched_options_unknown);
    RUN(sched_vi_order);
    RUN(sched_alloc_sets_the_base);
    RUN(env_at_most);
    RUN(utf8_len);
    RUN(proc_stat);
    RUN(reserve);
    RUN(deadline);
    RUN(name_index);
    TEST_DONE();
}
