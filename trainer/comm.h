/*  comm.h - the trainer's communication layer (data-parallel ranks).

    One interface, three backends, each in its own file:
      comm_local.c  one rank in-process (no peers; every collective is the
                    identity), the default when the program is not under MPI
      comm_mpi.c    OpenMPI: point-to-point, MPI_Allreduce, node from
                    MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)
      comm_nccl.cu  NCCL on GPUs (jizhi-train-cuda only): host buffers are
                    staged through device memory; bootstrap over MPI
    The algorithms (comm.c) are built on the backend's point-to-point calls
    only: ring all-reduce (reduce-scatter then all-gather), hierarchical
    all-reduce (reduce to the node leader, ring across leaders, broadcast
    inside the node), top-k sparsification with error feedback (sparse
    all-gather, summed in rank order), and the backend's own all-reduce as
    the baseline. fp16/bf16 wire formats halve the bytes of ring and
    hierarchical transfers; every rank ends with bit-identical results
    (owners round their chunk to the wire format before the all-gather).

    Threads: a comm is used by one thread at a time (the fusion thread while
    a step's buckets are in flight, the training thread otherwise).
    Errors: functions return 0 or -1 (a backend failure; MPI aborts the job
    on its own errors, so -1 is rare); constructors return NULL with err.
*/
#ifndef TRN_COMM_H
#define TRN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/bf16.h"
#include "trainer/trn.h"

typedef enum { TRN_AR_RING = 0, TRN_AR_HIER, TRN_AR_NATIVE } trn_ar_algo;
typedef enum { TRN_WIRE_FP32 = 0, TRN_WIRE_FP16, TRN_WIRE_BF16 } trn_wire;

/* Called for each received segment of an exchange: bytes [off, off + len)
   of the receive buffer have arrived. */
typedef void (*trn_seg_fn)(void *arg, size_t off, size_t len);

/* What a backend provides. Buffers are host memory. */
typedef struct {
    const char *name;
    /* Sends sbytes to dst while receiving rbytes from src (either side may
       be skipped with dst/src = -1). */
    int (*sendrecv)(void *self, const void *sbuf, size_t sbytes, int dst, void *rbuf,
                    size_t rbytes, int src);
    /* The backend's own sum all-reduce over all ranks. */
    int (*allreduce_f)(void *self, float *buf, long n);
    int (*allreduce_d)(void *self, double *buf, long n);
    int (*bcast)(void *self, void *buf, size_t bytes, int root);
    int (*barrier)(void *self);
    void (*destroy)(void *self);
    /* Optional (NULL: comm.c exchanges the segments one sendrecv at a
       time). Sends sbuf to dst and receives rbuf from src, each cut into
       nseg messages of seg bytes (the last ones shorter or empty; both ends
       use the same nseg and seg), with all of them in flight at once; calls
       done for each received segment in order as soon as it has arrived,
       while the later ones are still moving. dst/src = -1 skips a side. */
    int (*exchange)(void *self, const void *sbuf, size_t sbytes, int dst, void *rbuf,
                    size_t rbytes, int src, size_t seg, long nseg, trn_seg_fn done,
                    void *arg);
    /* Optional: patient = 1 while another thread of this rank computes (the
       overlap thread): waits then leave the core sooner (sleep rather than
       poll). Default 0: poll, yielding the core to other runnable threads. */
    void (*set_patient)(void *self, int patient);
} trn_comm_ops;

typedef struct trn_comm {
    const trn_comm_ops *ops;
    void *self;
    int rank, size;
    int *node;          /* node id of each rank (size entries) */
    uint64_t bytes_out; /* payload bytes this rank sent (algorithms' p2p) */
    /* groups derived from node[] (trn_comm_set_nodes) */
    int *local; /* ranks of my node, leader first */
    int nlocal;
    int *leaders; /* one leader (lowest rank) per node, ascending */
    int nleaders;
    /* floats per segment of the pipelined transfers (0: the default,
       16 Mi floats, 64 MB); tests set it small to exercise many segments */
    long seglen;
    /* scratch (grown on demand) */
    void *sbuf, *rbuf;
    size_t scap, rcap;
} trn_comm;

/* Backends. Caller owns the result and must destroy it with
   trn_comm_destroy. */
trn_comm *trn_comm_local_new(char *err);
/* MPI: initialises MPI (thread level SERIALIZED) when not done yet.
   Returns NULL with err when the binary has no MPI. */
trn_comm *trn_comm_mpi_new(char *err);
/* 1 when this process was started by an MPI launcher (OMPI/PMI env). */
int trn_comm_under_mpi(void);

/* Picks by name: "auto" (mpi when under an MPI launcher, else local),
   "local", "mpi", "nccl" (only where nccl_new is given). */
typedef trn_comm *(*trn_comm_ctor)(char *err);
trn_comm *trn_comm_new(const char *name, trn_comm_ctor nccl_new, char *err);

/* Finalises the backend (MPI_Finalize for MPI) and frees. NULL-safe. */
void trn_comm_destroy(trn_comm **cp);

/* Sets node ids: ranks_per_node > 0 overrides the backend's (rank /
   ranks_per_node). Builds the local and leader groups. 0 or -1. */
int trn_comm_set_nodes(trn_comm *c, int ranks_per_node);

/* See trn_comm_ops.set_patient; a no-op where the backend has none. */
void trn_comm_set_patient(trn_comm *c, int patient);

/* Sum all-reduce of n floats with algorithm a and wire format w. */
int trn_comm_allreduce(trn_comm *c, float *buf, long n, trn_ar_algo a, trn_wire w);

/* The mean over the ranks of n floats, in place: the ring all-reduce in
   fp32, then each value times 1/size (in float). What BN running
   statistics take after every data-parallel step, on the CPU (train.c)
   and in the CUDA CNN (backend_cudnn.cu) alike, so both give the same bits
   from the same inputs. 0 or -1. */
int trn_comm_mean(trn_comm *c, float *buf, long n);

/* Ring all-reduce over the ranks in group[0..gn) (this rank among them). */
int trn_comm_ring(trn_comm *c, const int *group, int gn, float *buf, long n, trn_wire w);

/* Hierarchical all-reduce over the node groups. */
int trn_comm_hier(trn_comm *c, float *buf, long n, trn_wire w);

/* Top-k with error feedback: v = buf + residual; the k largest |v| are sent
   (index, value) to every rank, residual keeps v minus what was sent; buf
   receives the sum over ranks of the sent sparse vectors (added in rank
   order, identical on every rank). k >= 1. residual has n floats. */
int trn_comm_topk(trn_comm *c, float *buf, float *residual, long n, long k);

/* Top-k with momentum correction (Deep Gradient Compression, Lin et al.
   2018): the local velocity u = momentum * u + g (Nesterov: u = momentum *
   (u + g), accumulating u + g) is what goes into the residual, so what is
   sent is already momentum-accumulated (the optimiser then applies it
   without momentum of its own); the sent coordinates are cleared in both
   residual and velocity (momentum factor masking). buf, residual, velocity:
   n floats each. */
int trn_comm_topk_dgc(trn_comm *c, float *buf, float *residual, float *velocity, long n,
                      long k, float momentum, int nesterov);

/* Selects the k largest |v[i]| (ties by lower index): writes their indices
   ascending into idx. Exposed for tests. */
void trn_topk_select(const float *v, long n, long k, int32_t *idx);

/* Gathers `bytes` from every rank to rank 0 (rbuf: size * bytes, in rank
   order; only rank 0's rbuf is written). Point-to-point, not counted in
   bytes_out. Collective. 0 or -1. */
int trn_comm_gather(trn_comm *c, const void *sbuf, size_t bytes, void *rbuf);

/* Small helpers on the backend. */
int trn_comm_bcast(trn_comm *c, void *buf, size_t bytes, int root);
int trn_comm_sum_d(trn_comm *c, double *buf, long n);
int trn_comm_barrier(trn_comm *c);

/* Names <-> enums (-1 for an unknown name). */
int trn_ar_algo_from_name(const char *s);
int trn_wire_from_name(const char *s);

/* fp16 conversion of one value (round to nearest even); bf16's is
   trn_f2bf/trn_bf2f (trainer/bf16.h). */
uint16_t trn_f2h(float x);
float trn_h2f(uint16_t h);

#endif
