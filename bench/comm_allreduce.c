/*  comm_allreduce.c - all-reduce bandwidth of the trainer's comm layer
    against MPI_Allreduce of the same OpenMPI, in one run (make bench-comm
    starts it under mpirun with 2 and 4 ranks; bench/comm.py reads it).

    For each size (4 KB ... 64 MB of floats) and algorithm: ring, hier
    (ranks_per_node = ranks / 2, so 2 "nodes"), top-k 1 % with error
    feedback, and MPI_Allreduce.

    How it times (the machine is shared, so the algorithms take turns):
    one sample is a batch of back-to-back calls of one algorithm (about
    1 MB of data per batch, at least one call) between two barriers; the
    sample's time is the slowest rank's time per call. Rounds interleave
    the algorithms (the order rotates each round), and each algorithm's time
    is the median of its samples. The ring/MPI ratio is also taken per
    round, from two samples of the same moment: its median and q1..q3 over
    the rounds are the paired comparison, the least moved by load that comes
    and goes; the fastest samples (the least disturbed by other programs)
    give a third ratio. The nccl-tests definitions: algbw = bytes / time,
    busbw = algbw * 2 (n - 1) / n. Also the bytes each rank sent (the layer
    counts them; for MPI_Allreduce the ring volume is assumed).
    Machine-readable lines start with "CURVE" (per algorithm and size) and
    "RATIOS" (the per-round ring/MPI ratios of a size, in round order).
    Usage: comm_allreduce [max_bytes [rounds]] (default 64 MiB, 31 rounds)
*/
#include <stdio.h>

#ifndef TRN_HAVE_MPI
int main(void)
{
    fprintf(stderr, "comm_allreduce: built without MPI (install libopenmpi-dev)\n");
    return 2;
}
#else
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/comm.h"

typedef enum { A_RING, A_HIER, A_TOPK, A_MPI, A_N } s_algo;
static const char *const s_names[A_N] = {"ring", "hier", "topk1%", "mpi"};

static void s_call(trn_comm *c, s_algo a, float *buf, float *res, long n)
{
    if (a == A_RING)
        trn_comm_allreduce(c, buf, n, TRN_AR_RING, TRN_WIRE_FP32);
    else if (a == A_HIER)
        trn_comm_allreduce(c, buf, n, TRN_AR_HIER, TRN_WIRE_FP32);
    else if (a == A_TOPK)
        trn_comm_topk(c, buf, res, n, n / 100 > 0 ? n / 100 : 1);
    else
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* One sample: `calls` back-to-back calls; the slowest rank's time per call. */
static double s_sample(trn_comm *c, s_algo a, float *buf, float *res, long n, int calls)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < calls; i++)
        s_call(c, a, buf, res, n);
    double t = (MPI_Wtime() - t0) / calls;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
}

static int s_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* value at fraction q of the sorted samples (nearest rank) */
static double s_quant(const double *sorted, int n, double q)
{
    int i = (int)(q * (n - 1) + 0.5);
    return sorted[i];
}

int main(int argc, char **argv)
{
    char err[TRN_ERRLEN];
    trn_comm *c = trn_comm_mpi_new(err);
    if (!c) {
        fprintf(stderr, "comm_allreduce: %s\n", err);
        return 1;
    }
    long max_bytes = argc > 1 ? atol(argv[1]) : 64L << 20;
    int rounds = argc > 2 ? atoi(argv[2]) : 31;
    if (max_bytes < 4096 || rounds < 1) {
        fprintf(stderr, "usage: comm_allreduce [max_bytes >= 4096 [rounds >= 1]]\n");
        trn_comm_destroy(&c);
        return 2;
    }
    int p = c->size;
    trn_comm_set_nodes(c, p >= 2 ? p / 2 : 1);
    float *buf = calloc((size_t)max_bytes / 4, sizeof(float));
    float *res = calloc((size_t)max_bytes / 4, sizeof(float));
    double *samp = malloc((size_t)rounds * A_N * sizeof(double));
    if (!buf || !res || !samp)
        return 1;
    if (c->rank == 0) {
        printf("all-reduce, %d ranks (hier: %d nodes x %d); time per call: median of %d "
               "interleaved samples, each the slowest rank's\n",
               p, c->nleaders, p / c->nleaders, rounds);
        printf("%10s", "bytes");
        for (int a = 0; a < A_N; a++)
            printf(" | %-7s algbw  busbw", s_names[a]);
        printf(" | ring/mpi busbw; per round (q1..q3), fastest | topk bytes vs ring\n");
    }
    for (long bytes = 4096; bytes <= max_bytes; bytes *= 4) {
        long n = bytes / 4;
        for (long i = 0; i < n; i++) /* same data for every size and algorithm */
            buf[i] = (float)((i * 7 + c->rank) % 13) * 1e-3f;
        int calls = (int)((1L << 20) / bytes);
        calls = calls < 1 ? 1 : calls;
        uint64_t sent[A_N] = {0};
        for (int a = 0; a < A_N; a++) { /* warm-up, and the bytes sent per call */
            memset(res, 0, (size_t)n * sizeof(float));
            s_call(c, (s_algo)a, buf, res, n);
            uint64_t b0 = c->bytes_out;
            s_call(c, (s_algo)a, buf, res, n);
            uint64_t mine = c->bytes_out - b0;
            MPI_Allreduce(&mine, &sent[a], 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
        }
        sent[A_MPI] = (uint64_t)(2.0 * (p - 1) / p * bytes); /* ring volume, assumed */
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < A_N; k++) {
                int a = (k + r) % A_N;
                samp[a * rounds + r] = s_sample(c, (s_algo)a, buf, res, n, calls);
            }
        /* the ring/MPI ratio per round (same moment), for its spread */
        double ratio[rounds > 0 ? rounds : 1];
        for (int r = 0; r < rounds; r++)
            ratio[r] = samp[A_MPI * rounds + r] / samp[A_RING * rounds + r];
        double t[A_N], tmin[A_N], bus[A_N];
        for (int a = 0; a < A_N; a++) {
            qsort(samp + a * rounds, (size_t)rounds, sizeof(double), s_cmp_d);
            t[a] = s_quant(samp + a * rounds, rounds, 0.5);
            tmin[a] = samp[a * rounds];
            bus[a] = bytes / t[a] * 2.0 * (p - 1) / p;
        }
        if (c->rank == 0) { /* the per-round ratios in round order */
            printf("RATIOS np=%d bytes=%ld", p, bytes);
            for (int r = 0; r < rounds; r++)
                printf(" %.4f", ratio[r]);
            printf("\n");
        }
        qsort(ratio, (size_t)rounds, sizeof(double), s_cmp_d);
        if (c->rank == 0) {
            printf("%10ld", bytes);
            for (int a = 0; a < A_N; a++)
                printf(" | %7s %5.2f %6.2f", "", bytes / t[a] / 1e9, bus[a] / 1e9);
            printf(" | %5.2f; %4.2f (%4.2f..%4.2f) best %4.2f | %.1fx fewer\n",
                   bus[A_RING] / bus[A_MPI], s_quant(ratio, rounds, 0.5),
                   s_quant(ratio, rounds, 0.25), s_quant(ratio, rounds, 0.75),
                   tmin[A_MPI] / tmin[A_RING],
                   (double)sent[A_RING] / (double)(sent[A_TOPK] ? sent[A_TOPK] : 1));
            for (int a = 0; a < A_N; a++)
                printf("CURVE np=%d algo=%s bytes=%ld time=%.9g sent=%llu tmin=%.9g\n", p,
                       s_names[a], bytes, t[a], (unsigned long long)sent[a], tmin[a]);
        }
    }
    if (c->rank == 0)
        printf(
            "(GB/s; busbw = algbw * 2(n-1)/n; top-k: dense bytes / time; ring/mpi: "
            "ratio of the medians; median (q1..q3) of the per-round ratios, each of two "
            "samples taken in the same round; ratio of the fastest samples: the least "
            "disturbed by other load)\n");
    free(buf);
    free(res);
    free(samp);
    trn_comm_destroy(&c);
    return 0;
}
#endif
