/*  comm_nccl.cu - the NCCL backend of the comm layer (comm.h), linked into
    jizhi-train-cuda where nccl.h exists (`make cuda`, TRN_WITH_NCCL).

    The comm layer's calls (comm.h) take host buffers (the CPU training
    path, and the CUDA backend's host gradient path), so each stages its
    buffers through device memory on the backend's stream: copy in, the
    NCCL call (ncclSend/ncclRecv inside a group for the point-to-point the
    algorithms use, ncclAllReduce for the backend's own all-reduce,
    ncclBroadcast), copy out, wait. The device calls of comm_nccl.h take
    device buffers and only enqueue on the same stream (the communication
    stream of the CUDA backend's device gradient path, dist_dev.cu): no
    staging, no wait; a later staged call waits for them by stream order. Device = the
   first of the rank's JIZHI_GPUS_PER_RANK devices (the dispatcher hands each trial
   trial.gpus x ranks devices in CUDA_VISIBLE_DEVICES), modulo the visible ones.
   Bootstrap: with MPI (under mpirun) rank 0's ncclUniqueId is broadcast over
   MPI_COMM_WORLD; without it the backend is one rank. Errors: a failure before
   ncclCommInitRank (no device, no stream, no id) is agreed over MPI: every rank
   returns NULL with the first failed rank's err;
   ncclCommInitRank failing on one of several ranks prints the reason and
   _exits(1) without MPI_Finalize (the others may wait inside theirs, and
   the launcher then ends them); later failures make the call return -1.
*/
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef TRN_HAVE_MPI
#include <mpi.h>
#endif

extern "C" {
#include "trainer/comm.h"
#include "trainer/comm_nccl.h"
}

typedef struct {
    ncclComm_t nc;
    cudaStream_t st;
    void *d_a, *d_b; /* staging buffers */
    size_t cap_a, cap_b;
    int we_init_mpi;
    int rank; /* this rank (s_bcast: the root uploads, the others download) */
    int dev;  /* its device: made current by every call (the CPU trainer's
                 overlap calls from its communication thread, whose current
                 device is otherwise device 0) */
} s_nccl;

static int s_grow(void **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    if (*p)
        cudaFree(*p);
    *p = NULL;
    *cap = 0;
    if (cudaMalloc(p, need) != cudaSuccess)
        return -1;
    *cap = need;
    return 0;
}

static int s_done(s_nccl *m, ncclResult_t r)
{
    if (r != ncclSuccess) {
        fprintf(stderr, "jizhi-train: nccl: %s\n", ncclGetErrorString(r));
        return -1;
    }
    return cudaStreamSynchronize(m->st) == cudaSuccess ? 0 : -1;
}

static int s_sendrecv(void *self, const void *sbuf, size_t sbytes, int dst, void *rbuf,
                      size_t rbytes, int src)
{
    s_nccl *m = (s_nccl *)self;
    if (cudaSetDevice(m->dev) != cudaSuccess)
        return -1;
    if (s_grow(&m->d_a, &m->cap_a, sbytes ? sbytes : 1) < 0 ||
        s_grow(&m->d_b, &m->cap_b, rbytes ? rbytes : 1) < 0)
        return -1;
    if (dst >= 0 && sbytes &&
        cudaMemcpyAsync(m->d_a, sbuf, sbytes, cudaMemcpyHostToDevice, m->st) !=
            cudaSuccess)
        return -1;
    ncclGroupStart();
    if (dst >= 0)
        ncclSend(m->d_a, sbytes, ncclChar, dst, m->nc, m->st);
    if (src >= 0)
        ncclRecv(m->d_b, rbytes, ncclChar, src, m->nc, m->st);
    if (s_done(m, ncclGroupEnd()) < 0)
        return -1;
    if (src >= 0 && rbytes &&
        cudaMemcpy(rbuf, m->d_b, rbytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        return -1;
    return 0;
}

static int s_allreduce(s_nccl *m, void *buf, size_t bytes, long n, ncclDataType_t t)
{
    if (cudaSetDevice(m->dev) != cudaSuccess)
        return -1;
    if (s_grow(&m->d_a, &m->cap_a, bytes ? bytes : 1) < 0)
        return -1;
    if (cudaMemcpyAsync(m->d_a, buf, bytes, cudaMemcpyHostToDevice, m->st) != cudaSuccess)
        return -1;
    if (s_done(m, ncclAllReduce(m->d_a, m->d_a, (size_t)n, t, ncclSum, m->nc, m->st)) < 0)
        return -1;
    return cudaMemcpy(buf, m->d_a, bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

static int s_allreduce_f(void *self, float *buf, long n)
{
    return s_allreduce((s_nccl *)self, buf, (size_t)n * sizeof(float), n, ncclFloat);
}

static int s_allreduce_d(void *self, double *buf, long n)
{
    return s_allreduce((s_nccl *)self, buf, (size_t)n * sizeof(double), n, ncclDouble);
}

/* Bytes per broadcast through the device scratch: a broadcast of any size
   (a checkpoint's 256 MiB pieces) holds at most this much on the GPU. */
#define S_BCAST_PIECE ((size_t)4 << 20)

static int s_bcast(void *self, void *buf, size_t bytes, int root)
{
    s_nccl *m = (s_nccl *)self;
    if (cudaSetDevice(m->dev) != cudaSuccess)
        return -1;
    size_t piece = bytes < S_BCAST_PIECE ? bytes : S_BCAST_PIECE;
    if (s_grow(&m->d_a, &m->cap_a, piece ? piece : 1) < 0)
        return -1;
    for (size_t off = 0; off < bytes; off += piece) {
        size_t n = bytes - off < piece ? bytes - off : piece;
        char *p = (char *)buf + off;
        if (m->rank == root &&
            cudaMemcpyAsync(m->d_a, p, n, cudaMemcpyHostToDevice, m->st) != cudaSuccess)
            return -1;
        if (s_done(m, ncclBroadcast(m->d_a, m->d_a, n, ncclChar, root, m->nc, m->st)) < 0)
            return -1;
        if (m->rank != root &&
            cudaMemcpy(p, m->d_a, n, cudaMemcpyDeviceToHost) != cudaSuccess)
            return -1;
    }
    return 0;
}

static int s_barrier(void *self)
{
    float x = 0;
    return s_allreduce_f(self, &x, 1);
}

static void s_destroy(void *self)
{
    s_nccl *m = (s_nccl *)self;
    if (!m)
        return;
    if (m->nc)
        ncclCommDestroy(m->nc);
    if (m->d_a)
        cudaFree(m->d_a);
    if (m->d_b)
        cudaFree(m->d_b);
    if (m->st)
        cudaStreamDestroy(m->st);
#ifdef TRN_HAVE_MPI
    int fin = 0;
    MPI_Finalized(&fin);
    if (m->we_init_mpi && !fin)
        MPI_Finalize();
#endif
    free(m);
}

static const trn_comm_ops s_ops = {"nccl",        s_sendrecv, s_allreduce_f,
                                   s_allreduce_d, s_bcast,    s_barrier,
                                   s_destroy,     NULL,       NULL};

/* ---- device-memory calls (comm_nccl.h) ------------------------------------ */

extern "C" int trn_nccl_is(const trn_comm *c)
{
    return c && c->ops == &s_ops;
}

extern "C" void *trn_nccl_stream(trn_comm *c)
{
    return trn_nccl_is(c) ? (void *)((s_nccl *)c->self)->st : NULL;
}

static int s_enq(ncclResult_t r)
{
    if (r != ncclSuccess) {
        fprintf(stderr, "jizhi-train: nccl: %s\n", ncclGetErrorString(r));
        return -1;
    }
    return 0;
}

extern "C" int trn_nccl_dev_allreduce(trn_comm *c, float *dbuf, long n)
{
    s_nccl *m = (s_nccl *)c->self;
    if (n <= 0)
        return 0;
    return s_enq(ncclAllReduce(dbuf, dbuf, (size_t)n, ncclFloat, ncclSum, m->nc, m->st));
}

extern "C" int trn_nccl_dev_sendrecv(trn_comm *c, const void *sbuf, size_t sbytes,
                                     int dst, void *rbuf, size_t rbytes, int src)
{
    s_nccl *m = (s_nccl *)c->self;
    if (s_enq(ncclGroupStart()) < 0)
        return -1;
    if (dst >= 0)
        ncclSend(sbuf, sbytes, ncclChar, dst, m->nc, m->st);
    if (src >= 0)
        ncclRecv(rbuf, rbytes, ncclChar, src, m->nc, m->st);
    return s_enq(ncclGroupEnd());
}

/* Collective over MPI_COMM_WORLD (size > 1): the lowest rank whose err is
   set, or -1 when none is; that rank's err is then every rank's (whichever
   rank's line the launcher shows before it ends the job names the reason). */
static int s_first_failed(int size, int rank, char *err)
{
    int first = err[0] ? rank : size;
#ifdef TRN_HAVE_MPI
    if (size > 1) {
        MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (first < size)
            MPI_Bcast(err, TRN_ERRLEN, MPI_CHAR, first, MPI_COMM_WORLD);
    }
#else
    (void)rank;
#endif
    return first < size ? first : -1;
}

extern "C" trn_comm *trn_comm_nccl_new(char *err)
{
    int rank = 0, size = 1, local = 0;
    s_nccl *m = (s_nccl *)calloc(1, sizeof *m);
    trn_comm *c = (trn_comm *)calloc(1, sizeof *c);
    if (!m || !c) {
        free(m);
        free(c);
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    int *node = NULL;
#ifdef TRN_HAVE_MPI
    if (trn_comm_under_mpi()) {
        int init = 0, provided = 0;
        MPI_Initialized(&init);
        if (!init) {
            MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
            m->we_init_mpi = 1;
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Comm shm;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL,
                            &shm);
        MPI_Comm_rank(shm, &local);
        int lowest = rank;
        MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, shm);
        MPI_Comm_free(&shm);
        node = (int *)calloc((size_t)size, sizeof(int));
        if (node)
            MPI_Allgather(&lowest, 1, MPI_INT, node, 1, MPI_INT, MPI_COMM_WORLD);
    }
#endif
    if (!node)
        node = (int *)calloc((size_t)size, sizeof(int));
    c->node = node;
    c->ops = &s_ops;
    c->self = m;
    c->rank = rank;
    c->size = size;
    m->rank = rank;
    /* the steps up to ncclCommInitRank can fail on one rank alone (its
       device, its stream): every rank learns of it before the broadcast of
       the id, which a failed rank 0 would never send */
    int ndev = 0;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    err[0] = 0;
    if (!node || cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        snprintf(err, TRN_ERRLEN, "--comm nccl: rank %d: no CUDA device", rank);
    } else {
        /* the dispatcher hands trial.gpus devices per rank, in rank order */
        const char *gpr_env = getenv("JIZHI_GPUS_PER_RANK");
        int gpr = gpr_env && atoi(gpr_env) > 0 ? atoi(gpr_env) : 1;
        m->dev = (local * gpr) % ndev;
        if (cudaSetDevice(m->dev) != cudaSuccess)
            snprintf(err, TRN_ERRLEN, "--comm nccl: rank %d: cannot use device %d", rank,
                     m->dev);
        else if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess)
            snprintf(err, TRN_ERRLEN, "--comm nccl: ncclGetUniqueId failed");
        else if (cudaStreamCreate(&m->st) != cudaSuccess)
            snprintf(err, TRN_ERRLEN, "--comm nccl: rank %d: cannot create a stream",
                     rank);
    }
    if (s_first_failed(size, rank, err) >= 0) {
        trn_comm_destroy(&c);
        return NULL;
    }
#ifdef TRN_HAVE_MPI
    if (size > 1)
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
    ncclResult_t r = ncclCommInitRank(&m->nc, size, id, rank);
    if (r != ncclSuccess) {
        m->nc = NULL;
        snprintf(err, TRN_ERRLEN, "--comm nccl: rank %d: ncclCommInitRank: %s", rank,
                 ncclGetErrorString(r));
        if (size > 1) {
            /* the others may wait inside theirs, where no agreement reaches
               them: leave without MPI_Finalize, so that the launcher ends
               every rank */
            fprintf(stderr, "jizhi-train: %s\n", err);
            fflush(NULL);
            _exit(1);
        }
        trn_comm_destroy(&c);
        return NULL;
    }
    if (trn_comm_set_nodes(c, 0) < 0) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        trn_comm_destroy(&c);
        return NULL;
    }
    return c;
}
