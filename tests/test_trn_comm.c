/*  test_trn_comm.c - the trainer's communication layer (trainer/comm.c).

    Without arguments: one rank in-process (the local backend): wire
    formats against precision.c's rounding, top-k selection, error feedback
    (what was sent plus the residual equals the sum of the gradients),
    collectives as the identity. With --mpi (run by tests/integration/
    test_dist.py under mpirun): ring, hierarchical (2 ranks per node) and
    MPI_Allreduce against a double-precision reference, identical results on
    every rank, wire formats, top-k error feedback across ranks. Every rank
    prints its own "N passed, N failed" line.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "jz_test.h"
#include "trainer/comm.h"
#include "trainer/dist.h"

static trn_comm *g_comm;

/* deterministic value for (rank, i) */
static float s_val(int rank, long i)
{
    uint64_t x = (uint64_t)(rank + 1) * 0x9e3779b97f4a7c15ULL +
                 (uint64_t)i * 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 29;
    return (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

TEST(wire_formats_round_like_precision)
{
    trn_rng r;
    trn_rng_seed(&r, 7);
    int bad16 = 0, badbf = 0;
    for (int i = 0; i < 200000; i++) {
        float x = (float)(trn_rng_normal(&r) * pow(2.0, (double)(i % 60) - 30));
        if (trn_h2f(trn_f2h(x)) != trn_round_fp16(x))
            bad16++;
        if (trn_bf2f(trn_f2bf(x)) != trn_round_bf16(x))
            badbf++;
    }
    CHECK(bad16 == 0);
    CHECK(badbf == 0);
    CHECK(isinf(trn_h2f(trn_f2h(70000.0f))));
    CHECK(trn_h2f(trn_f2h(65504.0f)) == 65504.0f);
    CHECK(isnan(trn_h2f(trn_f2h(NAN))));
    CHECK(isnan(trn_bf2f(trn_f2bf(NAN))));
    CHECK(trn_h2f(trn_f2h(-0.0f)) == 0.0f && signbit(trn_h2f(trn_f2h(-0.0f))));
}

TEST(topk_selects_largest_magnitudes)
{
    float v[8] = {0.1f, -5.0f, 3.0f, 0.0f, -3.0f, 7.0f, 0.2f, NAN};
    int32_t idx[4];
    trn_topk_select(v, 8, 4, idx);
    /* NaN (an overflow) always goes; then 7, -5, and one of the tied 3s (lower index) */
    CHECK(idx[0] == 1 && idx[1] == 2 && idx[2] == 5 && idx[3] == 7);
    float w[5] = {1, 1, 1, 1, 1};
    int32_t j[2];
    trn_topk_select(w, 5, 2, j);
    CHECK(j[0] == 0 && j[1] == 1);
}

TEST(topk_error_feedback_keeps_every_gradient)
{
    enum { N = 1000, STEPS = 25 };
    long k = 10;
    float g[N], res[N] = {0}, buf[N];
    double sum_g[N] = {0}, sum_sent[N] = {0};
    trn_rng r;
    trn_rng_seed(&r, 3);
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < N; i++) {
            g[i] = (float)trn_rng_normal(&r);
            sum_g[i] += g[i];
            buf[i] = g[i];
        }
        REQUIRE(trn_comm_topk(g_comm, buf, res, N, k) == 0);
        int nonzero = 0;
        for (int i = 0; i < N; i++) {
            sum_sent[i] += buf[i];
            nonzero += buf[i] != 0;
        }
        CHECK(nonzero <= k);
    }
    double worst = 0;
    for (int i = 0; i < N; i++)
        worst = fmax(worst, fabs(sum_sent[i] + res[i] - sum_g[i]));
    CHECK(worst < 1e-4);
}

/* Momentum correction: the residual accumulates the velocity u = m*u + g,
   so what was sent plus the residual is the sum of the velocities a
   masking-free momentum would have had, minus what masking cleared; sent
   coordinates are cleared in both residual and velocity. */
TEST(topk_momentum_correction_sends_velocity_and_masks)
{
    enum { N = 500, STEPS = 30 };
    long k = 5;
    const float mu = 0.9f;
    float buf[N], res[N] = {0}, vel[N] = {0};
    double sum_u[N] = {0}, sum_sent[N] = {0};
    trn_rng r;
    trn_rng_seed(&r, 11);
    int masked_ok = 1, count_ok = 1;
    for (int s = 0; s < STEPS; s++) {
        float u_expect[N];
        for (int i = 0; i < N; i++) {
            buf[i] = (float)trn_rng_normal(&r);
            u_expect[i] = mu * vel[i] + buf[i]; /* the velocity before masking */
            sum_u[i] += u_expect[i];
        }
        REQUIRE(trn_comm_topk_dgc(g_comm, buf, res, vel, N, k, mu, 0) == 0);
        int nonzero = 0;
        for (int i = 0; i < N; i++) {
            sum_sent[i] += buf[i];
            if (buf[i] != 0) {
                nonzero++;
                masked_ok &= vel[i] == 0 && res[i] == 0; /* factor masking */
            } else {
                masked_ok &=
                    fabsf(vel[i] - u_expect[i]) <= 1e-6f * (1 + fabsf(u_expect[i]));
            }
        }
        count_ok &= nonzero <= k;
    }
    CHECK(masked_ok);
    CHECK(count_ok);
    double worst = 0;
    for (int i = 0; i < N; i++)
        worst = fmax(worst, fabs(sum_sent[i] + res[i] - sum_u[i]));
    CHECK(worst < 1e-3);
    /* with momentum 0 it is plain error feedback */
    float b1[4] = {1, -4, 2, 0.5f}, r1[4] = {0}, v1[4] = {0};
    float b2[4] = {1, -4, 2, 0.5f}, r2[4] = {0};
    REQUIRE(trn_comm_topk_dgc(g_comm, b1, r1, v1, 4, 2, 0.0f, 0) == 0);
    REQUIRE(trn_comm_topk(g_comm, b2, r2, 4, 2) == 0);
    CHECK(memcmp(b1, b2, sizeof b1) == 0 && memcmp(r1, r2, sizeof r1) == 0);
    CHECK(b1[1] == -4 && b1[2] == 2 && b1[0] == 0);
}

TEST(topk_density_warms_up_exponentially)
{
    trn_config c;
    trn_config_defaults(&c);
    c.topk = 0.01;
    c.topk_warmup = 4;
    CHECK(fabs(trn_topk_density(&c, 0) - 0.25) < 1e-12);
    CHECK(fabs(trn_topk_density(&c, 2) - 0.05) < 1e-12); /* geometric midpoint */
    CHECK(trn_topk_density(&c, 4) == 0.01 && trn_topk_density(&c, 9) == 0.01);
    CHECK(trn_topk_density(&c, 1) > trn_topk_density(&c, 1.5));
    c.topk_warmup = 0;
    CHECK(trn_topk_density(&c, 0) == 0.01);
    c.topk = 0.5; /* denser than the warm-up's start: no warm-up */
    c.topk_warmup = 4;
    CHECK(trn_topk_density(&c, 0) == 0.5);
}

/* Auto fusion's model: latency-bound links fuse everything, a fast link
   with per-layer timing leaves the last (first layer's) gradient alone, and
   without overlap one bucket is always cheapest. */
TEST(fusion_choice_follows_the_alpha_beta_model)
{
    const long pn[6] = {20000, 100, 50000, 100, 30000, 10}; /* floats, net order */
    const double ready[6] = {0.10, 0.09, 0.08, 0.05, 0.04, 0.01};
    long total = 100210 * 4;
    double cost, none;
    /* latency 50 ms per all-reduce, 10 GB/s: one bucket */
    long thr = trn_fusion_choose(6, pn, ready, 0.1, 0.05, 1e-10, 1, &cost, &none);
    CHECK(thr >= total);
    CHECK(cost < none);
    CHECK(fabs(cost - (0.05 + total * 1e-10)) < 1e-9); /* starts at 0.1, all exposed */
    /* no latency, 100 MB/s: what is left after backward is the first
       layer's 20000 floats, whatever came before overlapped */
    thr = trn_fusion_choose(6, pn, ready, 0.1, 1e-9, 1e-8, 1, &cost, &none);
    CHECK(cost <= none * 1.02);
    CHECK(fabs(cost - (1e-9 + 80000 * 1e-8)) < 1e-6);
    CHECK(thr < total);
    /* the same link, but communication longer than backward (1 MB/s):
       every bucket's latency counts, and so does the early start */
    thr = trn_fusion_choose(6, pn, ready, 0.1, 1e-3, 1e-6, 1, &cost, &none);
    CHECK(cost <= none * 1.02 && cost < total * 1e-6); /* better than one bucket */
    /* no overlap: the sum of the transfers, fewest buckets win */
    thr = trn_fusion_choose(6, pn, ready, 0.1, 1e-4, 1e-9, 0, &cost, &none);
    CHECK(thr >= total);
    CHECK(fabs(none - cost - 5 * 1e-4) < 1e-9); /* 6 buckets vs 1 */
    /* no timing: spread over backward by bytes */
    thr = trn_fusion_choose(6, pn, NULL, 0.1, 0.05, 1e-10, 1, &cost, &none);
    CHECK(thr >= total);
}

TEST(one_rank_collectives_are_the_identity)
{
    float x[5] = {1, 2, 3, 4, 5};
    for (int a = 0; a < 3; a++)
        CHECK(trn_comm_allreduce(g_comm, x, 5, (trn_ar_algo)a, TRN_WIRE_FP16) == 0);
    CHECK(x[0] == 1 && x[4] == 5);
    CHECK(trn_comm_mean(g_comm, x, 5) == 0); /* BN statistics: the mean of one */
    CHECK(x[0] == 1 && x[2] == 3 && x[4] == 5);
    CHECK(g_comm->size == 1 && g_comm->rank == 0);
    CHECK(trn_ar_algo_from_name("hier") == TRN_AR_HIER && trn_ar_algo_from_name("x") < 0);
    CHECK(trn_wire_from_name("bf16") == TRN_WIRE_BF16 && trn_wire_from_name("fp8") < 0);
}

/* ---- under mpirun --------------------------------------------------------- */

/* 1 when buf is bit-identical on every rank */
static int s_same_everywhere(const float *buf, long n)
{
    uint64_t h = 1469598103934665603ULL;
    const unsigned char *b = (const unsigned char *)buf;
    for (size_t j = 0; j < (size_t)n * 4; j++)
        h = (h ^ b[j]) * 1099511628211ULL;
    uint64_t h0 = h;
    trn_comm_bcast(g_comm, &h0, sizeof h0, 0);
    double differ = h != h0;
    trn_comm_sum_d(g_comm, &differ, 1);
    return differ == 0;
}

static void s_check_algo(trn_ar_algo a, trn_wire w, double tol)
{
    /* 300007 with 10007-float segments: many segments per chunk, the last
       ones shorter or empty */
    const long sizes[] = {1, 3, 1000, 4097, 100003, 300007, 300007};
    for (int s = 0; s < 7; s++) {
        long n = sizes[s];
        g_comm->seglen = s == 6 ? 10007 : 0;
        float *x = malloc((size_t)n * sizeof(float));
        REQUIRE(x);
        for (long i = 0; i < n; i++)
            x[i] = s_val(g_comm->rank, i);
        REQUIRE(trn_comm_allreduce(g_comm, x, n, a, w) == 0);
        double worst = 0;
        for (long i = 0; i < n; i++) {
            double ref = 0;
            for (int r = 0; r < g_comm->size; r++)
                ref += s_val(r, i);
            worst = fmax(worst, fabs(x[i] - ref));
        }
        if (worst > tol)
            JZT_FAIL("algo %d wire %d n %ld: max error %g > %g", a, w, n, worst, tol);
        CHECK(s_same_everywhere(x, n));
        free(x);
    }
    g_comm->seglen = 0;
}

/* BN running statistics after a data-parallel step (train.c, the CUDA
   CNN): the ring sum in fp32 times 1/size, the same bits on every rank. */
TEST(mpi_mean_is_the_ring_sum_over_the_ranks)
{
    enum { N = 1037 };
    float x[N], ring[N];
    for (long i = 0; i < N; i++)
        x[i] = ring[i] = s_val(g_comm->rank, i);
    REQUIRE(trn_comm_mean(g_comm, x, N) == 0);
    REQUIRE(trn_comm_allreduce(g_comm, ring, N, TRN_AR_RING, TRN_WIRE_FP32) == 0);
    int bad = 0;
    double worst = 0;
    for (long i = 0; i < N; i++) {
        bad += x[i] != ring[i] * (1.0f / (float)g_comm->size);
        double ref = 0;
        for (int r = 0; r < g_comm->size; r++)
            ref += s_val(r, i);
        worst = fmax(worst, fabs(x[i] - ref / g_comm->size));
    }
    CHECK(bad == 0);
    CHECK(worst < 1e-5);
    CHECK(s_same_everywhere(x, N));
}

TEST(mpi_ring_matches_reference)
{
    s_check_algo(TRN_AR_RING, TRN_WIRE_FP32, 1e-5);
}

/* A backend without exchange (NCCL's) gets one sendrecv per segment from
   comm.c: the same bits as MPI's pipelined exchange, ring and hierarchical. */
TEST(mpi_segment_by_segment_fallback_gives_the_same_bits)
{
    const long n = 300007;
    g_comm->seglen = 10007;
    float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
    REQUIRE(a && b);
    const trn_comm_ops *ops = g_comm->ops;
    trn_comm_ops plain = *ops;
    plain.exchange = NULL;
    for (int algo = 0; algo < 2; algo++)
        for (int w = 0; w < 2; w++) {
            trn_ar_algo al = algo ? TRN_AR_HIER : TRN_AR_RING;
            trn_wire wi = w ? TRN_WIRE_BF16 : TRN_WIRE_FP32;
            REQUIRE(trn_comm_set_nodes(g_comm, algo ? 2 : 0) == 0);
            for (long i = 0; i < n; i++)
                a[i] = b[i] = s_val(g_comm->rank, i);
            REQUIRE(trn_comm_allreduce(g_comm, a, n, al, wi) == 0);
            g_comm->ops = &plain;
            int rc = trn_comm_allreduce(g_comm, b, n, al, wi);
            g_comm->ops = ops;
            REQUIRE(rc == 0);
            if (memcmp(a, b, (size_t)n * sizeof(float)) != 0)
                JZT_FAIL("algo %d wire %d: the fallback differs", algo, w);
        }
    REQUIRE(trn_comm_set_nodes(g_comm, 0) == 0);
    g_comm->seglen = 0;
    free(a);
    free(b);
}

TEST(mpi_native_matches_reference)
{
    s_check_algo(TRN_AR_NATIVE, TRN_WIRE_FP32, 1e-5);
}

TEST(mpi_hierarchical_two_per_node_matches_reference)
{
    REQUIRE(trn_comm_set_nodes(g_comm, 2) == 0);
    CHECK(g_comm->nleaders == (g_comm->size + 1) / 2);
    s_check_algo(TRN_AR_HIER, TRN_WIRE_FP32, 1e-5);
    s_check_algo(TRN_AR_HIER, TRN_WIRE_BF16, 0.05 * g_comm->size);
    REQUIRE(trn_comm_set_nodes(g_comm, 0) == 0);
}

TEST(mpi_wire_formats)
{
    /* |sum| <= size; fp16 keeps 11 bits, bf16 8 bits, per hop */
    s_check_algo(TRN_AR_RING, TRN_WIRE_FP16, 0.004 * g_comm->size);
    s_check_algo(TRN_AR_RING, TRN_WIRE_BF16, 0.05 * g_comm->size);
}

TEST(mpi_topk_error_feedback_across_ranks)
{
    enum { N = 5000 };
    long k = 50;
    float *buf = malloc(N * sizeof(float)), *res = calloc(N, sizeof(float));
    double *sum_g = calloc(N, sizeof(double)), *sum_sent = calloc(N, sizeof(double));
    REQUIRE(buf && res && sum_g && sum_sent);
    uint64_t before = g_comm->bytes_out;
    for (int s = 0; s < 5; s++) {
        for (long i = 0; i < N; i++) {
            buf[i] = s_val(g_comm->rank + 17 * s, i);
            for (int r = 0; r < g_comm->size; r++)
                sum_g[i] += s_val(r + 17 * s, i); /* every rank's gradient */
        }
        REQUIRE(trn_comm_topk(g_comm, buf, res, N, k) == 0);
        CHECK(s_same_everywhere(buf, N));
        for (long i = 0; i < N; i++)
            sum_sent[i] += buf[i];
    }
    /* sent (summed over ranks and steps) + every rank's residual = all gradients */
    double *rs = malloc(N * sizeof(double));
    REQUIRE(rs);
    for (long i = 0; i < N; i++)
        rs[i] = res[i];
    REQUIRE(trn_comm_sum_d(g_comm, rs, N) == 0);
    double worst = 0;
    for (long i = 0; i < N; i++)
        worst = fmax(worst, fabs(sum_sent[i] + rs[i] - sum_g[i]));
    CHECK(worst < 1e-3);
    /* bytes: (size-1) records of k (index, value) pairs per step */
    CHECK(g_comm->bytes_out - before == (uint64_t)5 * (g_comm->size - 1) * k * 8);
    free(buf);
    free(res);
    free(sum_g);
    free(sum_sent);
    free(rs);
}

int main(int argc, char **argv)
{
    char err[TRN_ERRLEN];
    int mpi = argc > 1 && !strcmp(argv[1], "--mpi");
    g_comm = mpi ? trn_comm_mpi_new(err) : trn_comm_local_new(err);
    if (!g_comm) {
        printf("cannot create the comm: %s\n", err);
        return 1;
    }
    RUN(wire_formats_round_like_precision);
    RUN(topk_selects_largest_magnitudes);
    if (!mpi) {
        RUN(topk_error_feedback_keeps_every_gradient);
        RUN(topk_momentum_correction_sends_velocity_and_masks);
        RUN(topk_density_warms_up_exponentially);
        RUN(fusion_choice_follows_the_alpha_beta_model);
        RUN(one_rank_collectives_are_the_identity);
    } else {
        RUN(mpi_ring_matches_reference);
        RUN(mpi_mean_is_the_ring_sum_over_the_ranks);
        RUN(mpi_segment_by_segment_fallback_gives_the_same_bits);
        RUN(mpi_native_matches_reference);
        RUN(mpi_hierarchical_two_per_node_matches_reference);
        RUN(mpi_wire_formats);
        RUN(mpi_topk_error_feedback_across_ranks);
    }
    trn_comm_destroy(&g_comm);
    TEST_DONE();
}
