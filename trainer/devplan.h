/*  devplan.h - the host-side plan of the device-resident gradient exchange
    (dist_dev.cu): which parameters form each bucket, after which backward
    stage each bucket is launched on the communication stream; the ring's
    schedule, shared with the host ring, is ring.h (included here). Pure
    functions (no CUDA), so every machine's unit tests check them
    (tests/test_trn_devplan.c).

    A backward "stage" is one unit of work after which some gradients are
    final (for the CUDA MLP: one linear layer's backward, stage 0 the last
    layer). The device path records a CUDA event on the compute stream
    after each stage; a bucket's launch stage is the stage whose event the
    communication stream waits on before packing and reducing it.
    Errors: none (sizes are the caller's).
*/
#ifndef TRN_DEVPLAN_H
#define TRN_DEVPLAN_H

#include "trainer/ring.h"

typedef struct {
    int first, last; /* param indices, first >= last (backward order) */
    long off, n;     /* floats: offset in the flat buffer and count */
    int launch;      /* the backward stage after which it is launched */
} trn_devbucket;

/* Cuts np params (pn[i] floats each, net order) in backward order (index
   np-1 first) into buckets of at least thr bytes, one param per bucket when
   thr is 0: the layout dist.c gives the same threshold. stage[i] in
   [0, nstages) is the stage after which param i is final. With overlap a
   bucket is launched after the latest stage of its params and never before
   the bucket ahead of it (buckets go out in order on every rank); without,
   every bucket after the last stage (nstages - 1). out has room for np
   buckets. Returns the bucket count. */
int trn_devplan_buckets(int np, const long *pn, const int *stage, int nstages, long thr,
                        int overlap, trn_devbucket *out);

/* Auto fusion on the device path: fits t = alpha + bytes * beta to the
   all-reduce times t[0..ns) (seconds) of sizes floats[0..ns) (ns >= 4,
   ascending, floats[1] = 4 floats[0]), as dist.c fits its host curve too: beta
   by least squares over the three largest sizes, alpha from the intercept
   of the line through the two smallest (at least 0.1 us; t[0] / 2 when
   that intercept is not positive; beta from the largest size alone when
   the slope is not positive). */
void trn_devplan_fit(const long *floats, const double *t, int ns, double *alpha,
                     double *beta);

/* The backward's timing as trn_fusion_choose (dist.h) takes it: ready[i]
   = stage_s[stage[i]] (seconds from the step's start to the end of the
   stage that makes param i final) for np params; returns the last
   stage's time (forward + backward). */
double trn_devplan_ready(int np, const int *stage, int nstages, const double *stage_s,
                         double *ready);

#endif
