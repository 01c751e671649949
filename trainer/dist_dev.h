/*  dist_dev.h - the gradient exchange of the CUDA backend's data-parallel
    step (dist_dev.cu; jizhi-train-cuda only).

    The backend's weight gradients are in device memory, in the compute
    format (fp32, bf16 or fp16) and scaled by the loss scale. They are
    packed, unscaled into true units, into fusion buckets of fp32 in one
    flat device buffer, cut and launched as devplan.h says, and summed over
    the ranks on one of two paths:
      TRN_GRAD_DEVICE  in device memory on the NCCL backend's communication
                       stream: --allreduce native is ncclAllReduce, ring
                       and hier are comm.c's ring and hierarchical
                       all-reduce over ncclSend/ncclRecv with the adds and
                       the fp16/bf16 wire conversions as kernels on that
                       stream (the same order of additions and roundings as
                       comm.c, so the same bits from the same inputs). With
                       overlap, the communication stream waits for the
                       event recorded on the compute stream after each
                       backward stage and reduces the buckets that stage
                       completes while the compute stream goes on with the
                       next layer; without, it waits for the last stage.
      TRN_GRAD_HOST    after the backward, every bucket is copied to pinned
                       host memory, reduced by comm.c (trn_comm_allreduce:
                       ring, hier or native, any wire, on any backend) and
                       copied back: the reference the device path is checked
                       against, and the path of CUDA ranks over MPI.
    trn_devdist_finish makes the compute stream wait for the communication
    stream (the optimiser step reads the sums).
    Caller owns a trn_devdist and must destroy it (after the compute stream
    is idle); the comm is borrowed and must outlive it. Errors: 0/-1,
    constructors NULL + err; a CUDA failure exits the process (the
    backend's rule).
*/
#ifndef TRN_DIST_DEV_H
#define TRN_DIST_DEV_H

#include "trainer/dist.h"

typedef enum { TRN_GRAD_DEVICE = 0, TRN_GRAD_HOST } trn_grad_path;

typedef struct trn_devdist trn_devdist;

/* The path "auto" picks for a comm: device with the NCCL backend, else
   host. */
trn_grad_path trn_devdist_auto_path(trn_comm *c, const trn_dist_opts *o);

/* Checks that path can run o on c (what trn_devdist_new refuses): 0, or
   -1 with err. */
int trn_devdist_check(trn_comm *c, const trn_dist_opts *o, trn_grad_path path, char *err);

/* np params of pn[i] floats (net order); stage[i] the backward stage
   after which param i is final, in [0, nstages); compute_stream: the
   backend's cudaStream_t. o->fusion_bytes < 0 (auto): on the device path
   with several ranks the all-reduce is timed on the device at 4 KB ... 4 MB
   and fitted (t = alpha + bytes * beta), the first 3 steps run with 4 MiB
   buckets while events time when each stage ends (the first a warm-up),
   and the next trn_devdist_begin takes the layout trn_fusion_choose
   (dist.h) predicts cheapest (rank 0's pick, printed when verbose);
   elsewhere 4 MiB. Refuses top-k, and the device path without the NCCL
   backend, with a message in err. Collective when it measures. */
trn_devdist *trn_devdist_new(trn_comm *c, int np, const long *pn, const int *stage,
                             int nstages, const trn_dist_opts *o, trn_grad_path path,
                             void *compute_stream, int verbose, char *err);
void trn_devdist_destroy(trn_devdist **dp);

/* Starts a step: g[i] is param i's device gradient of element type prec
   (TRN_FP32, TRN_BF16 or TRN_FP16), unscale the factor to true units.
   Copies the pointers. Collective on the step auto fusion decides. 0 or
   -1. */
int trn_devdist_begin(trn_devdist *d, void *const *g, trn_precision prec, float unscale);

/* Stage s of the backward has been enqueued on the compute stream:
   records its event and launches the buckets the plan starts after it.
   Stages are reported in order, each once per step. 0 or -1. */
int trn_devdist_stage(trn_devdist *d, int s);

/* Launches what is left (host path: all of it, then waits), and makes
   the compute stream wait for the sums. 0 or -1. */
int trn_devdist_finish(trn_devdist *d);

/* Param i's summed gradient (device, pn[i] floats, fp32,
   true units), valid on the compute stream after trn_devdist_finish. */
float *trn_devdist_grad(trn_devdist *d, int i);

trn_grad_path trn_devdist_path(const trn_devdist *d);
/* 1 while auto fusion is still timing steps (the layout may change). */
int trn_devdist_tuning(const trn_devdist *d);
int trn_devdist_nbuckets(const trn_devdist *d);
long trn_devdist_fusion_bytes(const trn_devdist *d);
/* The fusion a re-attach (precision schedule, load, live change) should
   ask for, given what this one was asked (asked): the layout auto fusion
   (asked < 0) decided on the device path of several ranks, so that it is
   not measured again; else asked. d may be NULL. */
long trn_devdist_keep_fusion(const trn_devdist *d, long asked);

#endif
