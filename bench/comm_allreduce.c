/*  comm_allreduce.c - all-reduce bandwidth of the trainer's comm layer
    against MPI_Allreduce of the same OpenMPI, in one run (make bench-comm
    starts it under mpirun with 2 and 4 ranks; bench/comm.py reads it).

    For each size (4 KB ... 64 MB of floats) and algorithm: ring, hier
    (ranks_per_node = ranks / 2, so 2 "nodes"), top-k 1 % with error
    feedback, and MPI_Allreduce. Time = slowest rank's mean over iterations.
    The nccl-tests definitions: algbw = bytes / time, busbw = algbw *
    2 (n - 1) / n. Also the bytes each rank sent (the layer counts them;
    for MPI_Allreduce the ring volume is assumed) and the ratios.
    Machine-readable lines start with "CURVE".
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

static double s_time(trn_comm *c, s_algo a, float *buf, float *res, long n, int iters,
                     uint64_t *bytes)
{
    uint64_t b0 = c->bytes_out;
    for (int w = 0; w < 2; w++) { /* warm-up */
        if (a == A_RING)
            trn_comm_allreduce(c, buf, n, TRN_AR_RING, TRN_WIRE_FP32);
        else if (a == A_HIER)
            trn_comm_allreduce(c, buf, n, TRN_AR_HIER, TRN_WIRE_FP32);
        else if (a == A_TOPK)
            trn_comm_topk(c, buf, res, n, n / 100 > 0 ? n / 100 : 1);
        else
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    b0 = c->bytes_out;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (a == A_RING)
            trn_comm_allreduce(c, buf, n, TRN_AR_RING, TRN_WIRE_FP32);
        else if (a == A_HIER)
            trn_comm_allreduce(c, buf, n, TRN_AR_HIER, TRN_WIRE_FP32);
        else if (a == A_TOPK)
            trn_comm_topk(c, buf, res, n, n / 100 > 0 ? n / 100 : 1);
        else
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double t = (MPI_Wtime() - t0) / iters;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    uint64_t mine = (c->bytes_out - b0) / (uint64_t)iters, most = 0;
    MPI_Allreduce(&mine, &most, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    *bytes = most;
    return t;
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
    int p = c->size;
    trn_comm_set_nodes(c, p >= 2 ? p / 2 : 1);
    float *buf = calloc((size_t)max_bytes / 4, sizeof(float));
    float *res = calloc((size_t)max_bytes / 4, sizeof(float));
    if (!buf || !res)
        return 1;
    for (long i = 0; i < max_bytes / 4; i++)
        buf[i] = (float)((i * 7 + c->rank) % 13) * 1e-3f;
    if (c->rank == 0) {
        printf(
            "all-reduce, %d ranks (hier: %d nodes x %d), times are the slowest rank's\n",
            p, c->nleaders, p / c->nleaders);
        printf("%10s", "bytes");
        for (int a = 0; a < A_N; a++)
            printf(" | %-7s algbw  busbw", s_names[a]);
        printf(" | ring/mpi busbw | topk bytes vs ring\n");
    }
    for (long bytes = 4096; bytes <= max_bytes; bytes *= 4) {
        long n = bytes / 4;
        int iters = (int)(64L * 1024 * 1024 / bytes);
        iters = iters < 3 ? 3 : iters > 200 ? 200 : iters;
        double t[A_N], bus[A_N];
        uint64_t sent[A_N];
        for (int a = 0; a < A_N; a++) {
            memset(res, 0, (size_t)n * sizeof(float));
            t[a] = s_time(c, (s_algo)a, buf, res, n,
                          a == A_TOPK && iters > 20 ? 20 : iters, &sent[a]);
            bus[a] = bytes / t[a] * 2.0 * (p - 1) / p;
        }
        sent[A_MPI] = (uint64_t)(2.0 * (p - 1) / p * bytes); /* ring volume, assumed */
        if (c->rank == 0) {
            printf("%10ld", bytes);
            for (int a = 0; a < A_N; a++)
                printf(" | %7s %5.2f %6.2f", "", bytes / t[a] / 1e9, bus[a] / 1e9);
            printf(" | %14.2f | %.1fx fewer\n", bus[A_RING] / bus[A_MPI],
                   (double)sent[A_RING] / (double)(sent[A_TOPK] ? sent[A_TOPK] : 1));
            for (int a = 0; a < A_N; a++)
                printf("CURVE np=%d algo=%s bytes=%ld time=%.9g sent=%llu\n", p,
                       s_names[a], bytes, t[a], (unsigned long long)sent[a]);
        }
    }
    if (c->rank == 0)
        printf("(GB/s; busbw = algbw * 2(n-1)/n; top-k: dense bytes / time)\n");
    free(buf);
    free(res);
    trn_comm_destroy(&c);
    return 0;
}
#endif
