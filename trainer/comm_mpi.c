/*  comm_mpi.c - the MPI backend (OpenMPI), compiled with MPI where mpicc
    exists (TRN_HAVE_MPI); elsewhere trn_comm_mpi_new says the binary has
    no MPI. The node of a rank comes from MPI_Comm_split_type(SHARED): the
    lowest world rank of each shared-memory group names the node.
    MPI errors abort the job (MPI's default handler), as CUDA_CHECK-style
    macros do in the trainer. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainer/comm.h"

#ifdef TRN_HAVE_MPI
#include <mpi.h>

typedef struct {
    int we_init; /* this object called MPI_Init_thread */
} s_mpi;

/* Waits for the requests without holding a core: a short spin, then
   sleeps of 20 us between tests. MPI's blocking calls poll at full speed,
   which on a shared CPU takes the core from the training thread while the
   communication thread waits. */
static int s_wait(MPI_Request *r, int n)
{
    for (long i = 0;; i++) {
        int done = 0;
        if (MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            return -1;
        if (done)
            return 0;
        if (i > 200) {
            struct timespec ts = {0, 20 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

static int s_sendrecv(void *self, const void *sbuf, size_t sbytes, int dst, void *rbuf,
                      size_t rbytes, int src)
{
    (void)self;
    const int tag = 77;
    MPI_Request r[2];
    int n = 0;
    if (src >= 0 && MPI_Irecv(rbuf, (int)rbytes, MPI_BYTE, src, tag, MPI_COMM_WORLD,
                              &r[n++]) != MPI_SUCCESS)
        return -1;
    if (dst >= 0 && MPI_Isend(sbuf, (int)sbytes, MPI_BYTE, dst, tag, MPI_COMM_WORLD,
                              &r[n++]) != MPI_SUCCESS)
        return -1;
    return n ? s_wait(r, n) : 0;
}

static int s_allreduce_f(void *self, float *buf, long n)
{
    (void)self;
    return MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) ==
                   MPI_SUCCESS
               ? 0
               : -1;
}

static int s_allreduce_d(void *self, double *buf, long n)
{
    (void)self;
    return MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM,
                         MPI_COMM_WORLD) == MPI_SUCCESS
               ? 0
               : -1;
}

static int s_bcast(void *self, void *buf, size_t bytes, int root)
{
    (void)self;
    return MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD) == MPI_SUCCESS ? 0
                                                                                     : -1;
}

static int s_barrier(void *self)
{
    (void)self;
    return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}

static void s_destroy(void *self)
{
    s_mpi *m = self;
    int fin = 0;
    MPI_Finalized(&fin);
    if (m && m->we_init && !fin)
        MPI_Finalize();
    free(m);
}

static const trn_comm_ops s_ops = {"mpi",   s_sendrecv, s_allreduce_f, s_allreduce_d,
                                   s_bcast, s_barrier,  s_destroy};

trn_comm *trn_comm_mpi_new(char *err)
{
    int init = 0;
    MPI_Initialized(&init);
    s_mpi *m = calloc(1, sizeof *m);
    trn_comm *c = calloc(1, sizeof *c);
    if (!m || !c) {
        free(m);
        free(c);
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    if (!init) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) !=
            MPI_SUCCESS) {
            free(m);
            free(c);
            snprintf(err, TRN_ERRLEN, "MPI_Init_thread failed");
            return NULL;
        }
        m->we_init = 1;
        if (provided < MPI_THREAD_SERIALIZED) {
            snprintf(err, TRN_ERRLEN,
                     "MPI provides thread level %d, the comm thread needs SERIALIZED",
                     provided);
            s_destroy(m);
            free(c);
            return NULL;
        }
    }
    c->ops = &s_ops;
    c->self = m;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    c->node = calloc((size_t)c->size, sizeof(int));
    if (!c->node) {
        trn_comm_destroy(&c);
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    MPI_Comm shm;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                        &shm);
    int lowest = c->rank;
    MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, shm);
    MPI_Comm_free(&shm);
    MPI_Allgather(&lowest, 1, MPI_INT, c->node, 1, MPI_INT, MPI_COMM_WORLD);
    if (trn_comm_set_nodes(c, 0) < 0) {
        trn_comm_destroy(&c);
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    return c;
}

int trn_comm_have_mpi(void)
{
    return 1;
}

#else

trn_comm *trn_comm_mpi_new(char *err)
{
    snprintf(err, TRN_ERRLEN,
             "--comm mpi: this jizhi-train is built without MPI (install openmpi-bin and "
             "libopenmpi-dev, then rebuild)");
    return NULL;
}

int trn_comm_have_mpi(void)
{
    return 0;
}

#endif
