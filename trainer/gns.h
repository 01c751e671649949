/*  gns.h - the gradient-noise measure's host logic, shared by the CPU step
    (train.c) and the device backends (backend_cuda.cu).

    On a measuring step (every --log-every steps) a one-chunk step of nb
    examples also measures the gradient of its first `half` examples
    (trn_gns_half) and of the rest. The two squared norms come in "share of
    the mean" units: the gradient of (1/nb) * sum of the part's losses,
    unscaled, which is what the accumulators (or a device's weight-gradient
    GEMM over the part's rows with the step's dscale) hold. trn_gns_small
    turns them into the reported grad_sqnorm_small (the mean |g|^2 of the
    parts, each the gradient of its own mean loss) and batch_small. With
    unequal parts (odd nb) only the first counts, as on the CPU.

    Pure functions: no state, no allocation, nothing to free. */
#ifndef TRN_GNS_H
#define TRN_GNS_H

/* 1 when step (the count before this step) measures: (step + 1) is a
   multiple of log_every; 0 otherwise or when log_every < 1. */
int trn_gns_measures(long step, int log_every);

/* The first part's size for a batch of nb: nb / 2, or 0 (no measure) when
   nb < 2. */
int trn_gns_half(int nb);

/* grad_sqnorm_small and batch_small from the parts' squared norms sq[0]
   (the first `half` examples) and sq[1] (the other nb - half), in share-of-
   the-mean units: |g_a|^2 = sq[0] * (nb / half)^2, and likewise g_b when
   nb - half == half (then the mean of the two). Returns 0, or -1 (outputs
   untouched) when half is not in [1, nb) or a counted norm is negative or
   not finite. */
int trn_gns_small(const double sq[2], int half, int nb, double *gs_small, int *b_small);

#endif
