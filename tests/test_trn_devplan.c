/*  test_trn_devplan.c - the host-side plan of the device-resident gradient
    exchange (trainer/devplan.c): bucket layout against dist.c's for the
    same threshold, launch stages in backward order with and without
    overlap, and the ring schedule simulated over 1-5 in-memory ranks
    (every rank ends with the same bits, the sum of all ranks' buffers).
    Runs without a GPU: this is the part of the CUDA path every machine
    checks. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "jz_test.h"
#include "trainer/comm.h"
#include "trainer/devplan.h"
#include "trainer/dist.h"

/* the MLP 784-256-256-10: params w0 b0 w1 b1 w2 b2; layer l's backward is
   stage 2 - l */
static const long g_pn[6] = {784L * 256, 256, 256L * 256, 256, 256L * 10, 10};
static const int g_stage[6] = {2, 2, 1, 1, 0, 0};

/* every param in exactly one bucket, in backward order, offsets contiguous */
static int s_well_formed(const trn_devbucket *b, int nb, int np, const long *pn)
{
    int want = np - 1;
    long off = 0;
    for (int k = 0; k < nb; k++) {
        if (b[k].first != want || b[k].last > b[k].first || b[k].off != off)
            return 0;
        long n = 0;
        for (int i = b[k].first; i >= b[k].last; i--)
            n += pn[i];
        if (n != b[k].n)
            return 0;
        off += n;
        want = b[k].last - 1;
    }
    return want == -1;
}

TEST(buckets_one_param_each)
{
    trn_devbucket b[6];
    int nb = trn_devplan_buckets(6, g_pn, g_stage, 3, 0, 1, b);
    REQUIRE(nb == 6);
    CHECK(s_well_formed(b, nb, 6, g_pn));
    const int launch[6] = {0, 0, 1, 1, 2, 2};
    for (int k = 0; k < 6; k++) {
        CHECK(b[k].first == 5 - k && b[k].last == 5 - k);
        CHECK(b[k].launch == launch[k]);
    }
    CHECK(b[1].off == 10 && b[2].off == 10 + 2560);
    /* overlap off: everything after the last stage */
    nb = trn_devplan_buckets(6, g_pn, g_stage, 3, 0, 0, b);
    for (int k = 0; k < nb; k++)
        CHECK(b[k].launch == 2);
}

TEST(buckets_fused)
{
    trn_devbucket b[6];
    /* 64 KiB: b2 w2 b1 are small, w1 closes the first bucket (stage 1);
       b0 w0 the second (stage 2) */
    int nb = trn_devplan_buckets(6, g_pn, g_stage, 3, 64L << 10, 1, b);
    REQUIRE(nb == 2);
    CHECK(s_well_formed(b, nb, 6, g_pn));
    CHECK(b[0].first == 5 && b[0].last == 2 && b[0].launch == 1);
    CHECK(b[1].first == 1 && b[1].last == 0 && b[1].launch == 2);
    CHECK(b[0].n == 10 + 2560 + 256 + 65536);
    /* one bucket */
    nb = trn_devplan_buckets(6, g_pn, g_stage, 3, 1L << 40, 1, b);
    REQUIRE(nb == 1);
    CHECK(b[0].launch == 2 && b[0].n == 784L * 256 + 256 + 65536 + 256 + 2570);
    /* a stage out of order never launches a bucket ahead of the one before */
    const long pn3[3] = {4, 4, 4};
    const int st3[3] = {1, 2, 0}; /* backward order: param 2 (0), 1 (2), 0 (1) */
    nb = trn_devplan_buckets(3, pn3, st3, 3, 0, 1, b);
    REQUIRE(nb == 3);
    CHECK(b[0].launch == 0 && b[1].launch == 2 && b[2].launch == 2);
}

/* the same cut as dist.c (the host path) for a range of thresholds */
TEST(buckets_match_dist_layout)
{
    char err[TRN_ERRLEN];
    trn_config cfg;
    trn_config_defaults(&cfg);
    snprintf(cfg.hidden, sizeof cfg.hidden, "256,256");
    trn_net *net = trn_net_new(&cfg, 1, 28, 28, 10, err);
    REQUIRE(net != NULL);
    trn_comm *c = trn_comm_local_new(err);
    REQUIRE(c != NULL);
    int np = trn_net_nparams(net);
    REQUIRE(np == 6);
    for (int i = 0; i < np; i++)
        CHECK(trn_net_param(net, i)->n == g_pn[i]);
    const long thr[] = {0, 1, 4096, 10280, 64L << 10, 256L << 10, 1L << 20, 4L << 20};
    for (size_t t = 0; t < sizeof thr / sizeof thr[0]; t++) {
        trn_dist_opts o = {.algo = TRN_AR_RING, .fusion_bytes = thr[t]};
        trn_dist *d = trn_dist_new(c, net, &o, err);
        REQUIRE(d != NULL);
        trn_devbucket b[6];
        int nb = trn_devplan_buckets(np, g_pn, g_stage, 3, thr[t], 1, b);
        CHECK(nb == trn_dist_nbuckets(d));
        trn_dist_destroy(&d);
    }
    trn_comm_destroy(&c);
    trn_net_destroy(&net);
}

static float s_val(int rank, long i)
{
    uint64_t x = (uint64_t)(rank + 1) * 0x9e3779b97f4a7c15ULL +
                 (uint64_t)i * 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 29;
    return (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Runs the schedule over p in-memory ranks, every step synchronous (all
   ranks send, then all receive), with the wire rounding of fp16 when
   round16 (what dist_dev.cu does on the device). */
static void s_sim_ring(int p, long n, int round16, float **buf)
{
    float *msg = malloc((size_t)p * (size_t)(n / p + 1) * sizeof(float));
    long cap = n / p + 1;
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1)
            for (int me = 0; me < p; me++) { /* owners round their chunk */
                long o, l;
                trn_ring_chunk(n, p, trn_ring_owned(p, me), &o, &l);
                for (long j = 0; round16 && j < l; j++)
                    buf[me][o + j] = trn_h2f(trn_f2h(buf[me][o + j]));
            }
        for (int s = 0; s < p - 1; s++) {
            for (int me = 0; me < p; me++) {
                int sc, rc;
                trn_ring_step(p, me, phase, s, &sc, &rc);
                long o, l;
                trn_ring_chunk(n, p, sc, &o, &l);
                for (long j = 0; j < l; j++) /* into the right neighbour's inbox */
                    msg[(size_t)((me + 1) % p) * (size_t)cap + (size_t)j] =
                        round16 ? trn_h2f(trn_f2h(buf[me][o + j])) : buf[me][o + j];
            }
            for (int me = 0; me < p; me++) {
                int sc, rc;
                trn_ring_step(p, me, phase, s, &sc, &rc);
                int left = (me + p - 1) % p, lsc, lrc;
                trn_ring_step(p, left, phase, s, &lsc, &lrc);
                if (lsc != rc) /* the left neighbour sends what I expect */
                    buf[me][0] = NAN;
                long o, l;
                trn_ring_chunk(n, p, rc, &o, &l);
                const float *m = msg + (size_t)me * (size_t)cap;
                for (long j = 0; j < l; j++)
                    buf[me][o + j] = phase == 0 ? buf[me][o + j] + m[j] : m[j];
            }
        }
    }
    free(msg);
}

TEST(ring_schedule_sums_on_every_rank)
{
    const long sizes[] = {1, 7, 1000, 4099};
    for (int p = 1; p <= 5; p++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int r16 = 0; r16 < 2; r16++) {
                long n = sizes[si];
                float *buf[5];
                for (int r = 0; r < p; r++) {
                    buf[r] = malloc((size_t)n * sizeof(float));
                    for (long i = 0; i < n; i++)
                        buf[r][i] = s_val(r, i);
                }
                s_sim_ring(p, n, r16, buf);
                int same = 1, close = 1;
                for (long i = 0; i < n; i++) {
                    double ref = 0;
                    for (int r = 0; r < p; r++)
                        ref += s_val(r, i);
                    double tol = r16 ? 2e-3 * p : 1e-5 * p;
                    if (!(fabs(buf[0][i] - ref) <= tol))
                        close = 0;
                    for (int r = 1; r < p; r++)
                        if (memcmp(&buf[r][i], &buf[0][i], sizeof(float)))
                            same = 0;
                }
                if (!same || !close)
                    printf("  p=%d n=%ld fp16=%d: same %d close %d\n", p, n, r16, same,
                           close);
                CHECK(same);
                CHECK(close);
                for (int r = 0; r < p; r++)
                    free(buf[r]);
            }
}

TEST(ring_chunks_cover)
{
    for (int p = 1; p <= 7; p++)
        for (long n = 0; n < 30; n++) {
            long end = 0;
            for (int i = 0; i < p; i++) {
                long o, l;
                trn_ring_chunk(n, p, i, &o, &l);
                CHECK(o == end && l >= n / p && l <= n / p + 1);
                end = o + l;
            }
            CHECK(end == n);
        }
}

/* The neighbours both rings take from trn_ring_place: over the ranks in
   order (NULL) and over a subset in a given order (the hierarchical ring's
   leaders); a rank outside the group is -1. */
/* trn_ring_move_at: the ranges of trn_ring_step's chunks, and what each
   position receives is what its left neighbour sends at that step. */
TEST(ring_move_ranges)
{
    for (int p = 1; p <= 5; p++)
        for (long n = 0; n <= 11; n++)
            for (int phase = 0; phase < 2; phase++)
                for (int s = 0; s < p - 1; s++)
                    for (int me = 0; me < p; me++) {
                        trn_ring_move m = trn_ring_move_at(n, p, me, phase, s);
                        trn_ring_move l =
                            trn_ring_move_at(n, p, (me + p - 1) % p, phase, s);
                        int sc, rc;
                        long o, len;
                        trn_ring_step(p, me, phase, s, &sc, &rc);
                        trn_ring_chunk(n, p, sc, &o, &len);
                        CHECK(m.soff == o && m.slen == len);
                        trn_ring_chunk(n, p, rc, &o, &len);
                        CHECK(m.roff == o && m.rlen == len);
                        CHECK(m.roff == l.soff && m.rlen == l.slen);
                        CHECK(m.soff >= 0 && m.soff + m.slen <= n);
                    }
}

TEST(ring_place_names_the_neighbours)
{
    int right = -7, left = -7;
    CHECK(trn_ring_place(NULL, 4, 0, &right, &left) == 0);
    CHECK(right == 1 && left == 3);
    CHECK(trn_ring_place(NULL, 4, 3, &right, &left) == 3);
    CHECK(right == 0 && left == 2);
    CHECK(trn_ring_place(NULL, 1, 0, &right, &left) == 0);
    CHECK(right == 0 && left == 0);
    const int leaders[] = {6, 2, 4};
    CHECK(trn_ring_place(leaders, 3, 2, &right, &left) == 1);
    CHECK(right == 4 && left == 6);
    CHECK(trn_ring_place(leaders, 3, 6, &right, &left) == 0);
    CHECK(right == 2 && left == 4);
    right = left = -7;
    CHECK(trn_ring_place(leaders, 3, 5, &right, &left) == -1);
    CHECK(right == -7 && left == -7);
}

TEST(fit_recovers_a_line)
{
    const long fl[6] = {1024, 4096, 16384, 65536, 262144, 1048576};
    double t[6], a, b;
    for (int s = 0; s < 6; s++)
        t[s] = 20e-6 + (double)fl[s] * 4 * 1e-10; /* 20 us, 10 GB/s */
    trn_devplan_fit(fl, t, 6, &a, &b);
    CHECK_NEAR(a, 20e-6, 1e-9);
    CHECK_NEAR(b, 1e-10, 1e-15);
    /* small sizes faster than the line: alpha floors at t0 / 2, then 0.1 us */
    t[1] = 10 * t[0];
    trn_devplan_fit(fl, t, 6, &a, &b);
    CHECK_NEAR(a, t[0] / 2, 1e-12);
    for (int s = 0; s < 6; s++)
        t[s] = 1e-9;
    trn_devplan_fit(fl, t, 6, &a, &b);
    CHECK(a >= 1e-7 && b > 0); /* a flat curve still gives a positive slope */
}

TEST(ready_times_per_param)
{
    const double st[3] = {0.004, 0.006, 0.009}; /* stage ends, seconds */
    double ready[6];
    double total = trn_devplan_ready(6, g_stage, 3, st, ready);
    CHECK(total == 0.009);
    CHECK(ready[5] == 0.004 && ready[4] == 0.004 && ready[3] == 0.006 &&
          ready[0] == 0.009);
    /* what auto fusion then picks from it, with overlap: never worse than
       no fusion, and the plan of its threshold has the launch stages */
    long thr = trn_fusion_choose(6, g_pn, ready, total, 30e-6, 1e-10, 1, NULL, NULL);
    trn_devbucket b[6];
    int nb = trn_devplan_buckets(6, g_pn, g_stage, 3, thr, 1, b);
    CHECK(nb >= 1 && nb <= 6 && s_well_formed(b, nb, 6, g_pn));
    double cost, none;
    trn_fusion_choose(6, g_pn, ready, total, 30e-6, 1e-10, 1, &cost, &none);
    CHECK(cost <= none);
}

int main(void)
{
    RUN(buckets_one_param_each);
    RUN(buckets_fused);
    RUN(buckets_match_dist_layout);
    RUN(ring_schedule_sums_on_every_rank);
    RUN(ring_chunks_cover);
    RUN(ring_place_names_the_neighbours);
    RUN(ring_move_ranges);
    RUN(fit_recovers_a_line);
    RUN(ready_times_per_param);
    TEST_DONE();
}
