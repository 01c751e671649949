/*  comm_mpi.c - the MPI backend (OpenMPI), compiled with MPI where mpicc
    exists (TRN_HAVE_MPI); elsewhere trn_comm_mpi_new says the binary has
    no MPI. The node of a rank comes from MPI_Comm_split_type(SHARED): the
    lowest world rank of each shared-memory group names the node.
    MPI errors abort the job (MPI's default handler), as CUDA_CHECK-style
    macros do in the trainer. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trainer/comm.h"

#ifdef TRN_HAVE_MPI
#include <mpi.h>

typedef struct {
    int we_init;      /* this object called MPI_Init_thread */
    int patient;      /* another thread of this rank computes while we wait */
    int oversub;      /* more ranks on this node than cores: yield while waiting */
    MPI_Request *req; /* exchange's requests (grown on demand) */
    long nreq;
} s_mpi;

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits for the requests. It polls MPI_Testall, as MPI's own blocking calls
   do: the fastest hand-over when this rank has a core of its own. When the
   node has more ranks than cores (oversubscribed; or OMPI_MCA_mpi_yield_
   when_idle=1), it gives the core to any other runnable thread between
   polls after 2 us (sched_yield): the peer may be waiting for this very
   core (4 ranks on 2 cores, SCHED_FIFO so other jobs stay out: after 2 us
   the ring's busbw per size was level with or above 20 us, 1-64 MB, and
   16 MB rose 1.02-1.05x -> 1.17x of MPI_Allreduce). When patient (the overlap thread,
   while the training thread computes) it yields after 20 us and sleeps 20 us between
   polls after 200 us. (Sleeping from the first microseconds, as this did before, cost a
   60-80 us sleep, the timer's slack, on nearly every message; yielding on a busy machine
   costs a scheduler slice, milliseconds, per message.) */
static int s_wait(s_mpi *m, MPI_Request *r, int n)
{
    double t0 = 0;
    for (long i = 0;; i++) {
        int done = 0;
        if (MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            return -1;
        if (done)
            return 0;
        if (i < 64)
            continue;
        if (i == 64)
            t0 = s_now();
        double w = s_now() - t0;
        if (m->patient && w > 200e-6) {
            struct timespec ts = {0, 20 * 1000};
            nanosleep(&ts, NULL);
        } else if ((m->patient && w > 20e-6) || (m->oversub && w > 2e-6)) {
            sched_yield();
        }
    }
}

static int s_sendrecv(void *self, const void *sbuf, size_t sbytes, int dst, void *rbuf,
                      size_t rbytes, int src)
{
    const int tag = 77;
    MPI_Request r[2];
    int n = 0;
    if (src >= 0 && MPI_Irecv(rbuf, (int)rbytes, MPI_BYTE, src, tag, MPI_COMM_WORLD,
                              &r[n++]) != MPI_SUCCESS)
        return -1;
    if (dst >= 0 && MPI_Isend(sbuf, (int)sbytes, MPI_BYTE, dst, tag, MPI_COMM_WORLD,
                              &r[n++]) != MPI_SUCCESS)
        return -1;
    return n ? s_wait(self, r, n) : 0;
}

/* Segment k of a buffer of `bytes` cut into pieces of seg bytes. */
static void s_piece(size_t bytes, size_t seg, long k, size_t *off, size_t *len)
{
    size_t a = (size_t)k * seg, e = a + seg;
    a = a < bytes ? a : bytes;
    e = e < bytes ? e : bytes;
    *off = a;
    *len = e - a;
}

/* Receives are posted S_WINDOW segments ahead (the transport copies on the
   receiving side as a receive is matched: posting all of them would copy
   everything before the first segment is handed over); sends are all
   posted at once, so the receiver pulls each segment when it is ready, with
   no round trip per segment. */
#define S_WINDOW 2

static int s_exchange(void *self, const void *sbuf, size_t sbytes, int dst, void *rbuf,
                      size_t rbytes, int src, size_t seg, long nseg, trn_seg_fn done,
                      void *arg)
{
    s_mpi *m = self;
    const int tag = 78;
    long ns = dst >= 0 ? nseg : 0, nr = src >= 0 ? nseg : 0;
    if (ns + nr > m->nreq) {
        MPI_Request *q = realloc(m->req, (size_t)(ns + nr) * sizeof *q);
        if (!q)
            return -1;
        m->req = q;
        m->nreq = ns + nr;
    }
    MPI_Request *rr = m->req, *sr = m->req + nr;
    size_t off, len;
    long posted = 0;
    for (; posted < nr && posted < S_WINDOW; posted++) {
        s_piece(rbytes, seg, posted, &off, &len);
        if (MPI_Irecv((char *)rbuf + off, (int)len, MPI_BYTE, src, tag, MPI_COMM_WORLD,
                      &rr[posted]) != MPI_SUCCESS)
            return -1;
    }
    for (long k = 0; k < ns; k++) {
        s_piece(sbytes, seg, k, &off, &len);
        if (MPI_Isend((const char *)sbuf + off, (int)len, MPI_BYTE, dst, tag,
                      MPI_COMM_WORLD, &sr[k]) != MPI_SUCCESS)
            return -1;
    }
    for (long k = 0; k < nr; k++) {
        if (s_wait(m, &rr[k], 1) < 0)
            return -1;
        if (posted < nr) {
            s_piece(rbytes, seg, posted, &off, &len);
            if (MPI_Irecv((char *)rbuf + off, (int)len, MPI_BYTE, src, tag,
                          MPI_COMM_WORLD, &rr[posted]) != MPI_SUCCESS)
                return -1;
            posted++;
        }
        s_piece(rbytes, seg, k, &off, &len);
        if (done && len)
            done(arg, off, len);
    }
    return ns ? s_wait(m, sr, (int)ns) : 0;
}

static void s_set_patient(void *self, int patient)
{
    ((s_mpi *)self)->patient = patient;
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
    if (m)
        free(m->req);
    free(m);
}

static const trn_comm_ops s_ops = {"mpi",         s_sendrecv, s_allreduce_f,
                                   s_allreduce_d, s_bcast,    s_barrier,
                                   s_destroy,     s_exchange, s_set_patient};

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
    int lowest = c->rank, nlocal = 1;
    MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, shm);
    MPI_Comm_size(shm, &nlocal);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *y = getenv("OMPI_MCA_mpi_yield_when_idle");
    m->oversub = (cores > 0 && nlocal > cores) || (y && atoi(y) > 0);
    MPI_Comm_free(&shm);
    MPI_Allgather(&lowest, 1, MPI_INT, c->node, 1, MPI_INT, MPI_COMM_WORLD);
    if (trn_comm_set_nodes(c, 0) < 0) {
        trn_comm_destroy(&c);
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    return c;
}

#else

trn_comm *trn_comm_mpi_new(char *err)
{
    snprintf(err, TRN_ERRLEN,
             "--comm mpi: this jizhi-train is built without MPI (install openmpi-bin and "
             "libopenmpi-dev, then rebuild)");
    return NULL;
}

#endif
