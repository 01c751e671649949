/*  dist.h - gradient exchange of a data-parallel trainer: fusion buckets,
    the communication thread, compression state (dist.c).

    Buckets are runs of parameters in backward order (last layer first),
    each at least `fusion_bytes` long (one parameter per bucket when 0;
    when -1, chosen at start from a measured bandwidth curve and the
    backward's timing: trn_fusion_choose). During the
    backward pass of a step the net reports each parameter whose gradient
    is final (trn_dist_ready); a bucket whose parameters are all final is
    packed (unscaled into true units) and handed, in bucket order, to the
    communication thread (overlap on) or kept for trn_dist_finish (overlap
    off). trn_dist_finish sends what is left, waits for the thread and
    writes the summed gradients back into the params.

    Gradients are summed, not averaged: each rank's gradient is already
    weighted by its share of the global batch (local count / global batch),
    so the sum is the global-batch mean, also when the batch does not divide
    by the rank count.
    Caller owns a trn_dist and must destroy it; the comm and net are
    borrowed and must outlive it. Errors: 0/-1, constructors NULL + err.
*/
#ifndef TRN_DIST_H
#define TRN_DIST_H

#include "trainer/comm.h"

typedef struct trn_dist_opts {
    trn_ar_algo algo;  /* ring | hier | native */
    trn_wire wire;     /* fp32 | fp16 | bf16 (ring and hier) */
    double topk;       /* 0: dense; else the fraction of each bucket sent */
    long fusion_bytes; /* bucket size; 0 = one param per bucket; -1 = auto */
    int overlap;       /* communication thread during backward */
    /* top-k only (Deep Gradient Compression): momentum correction when
       momentum > 0 (the optimiser's momentum; it then skips its own), and
       local clipping of each bucket's share when clip > 0 */
    double momentum;
    int nesterov;
    double clip; /* global-norm threshold; a rank's bucket: clip*sqrt(n_b/n/ranks) */
    /* auto fusion: when a param's gradient is final, seconds after the
       step's forward starts (NULL: unknown), and the forward+backward time;
       rank 0's choice is used everywhere */
    const double *ready_s;
    double backward_s;
    /* A benchmark of the layouts (dense only): after auto fusion's choice
       (or from the first step with a fixed threshold) the steps cycle
       through the layout in use and these thresholds (bytes; 0 = no
       fusion), one step each, timing each step's trn_dist_begin .. end of
       trn_dist_finish; each cycle times every layout once, in an order
       shuffled per cycle (the same on every rank); trn_dist_compare_report
       sums them up.
       A threshold < 0 is the layout in use once more (an A/A control: its
       ratio shows the noise). ncompare entries (at most
       TRN_COMPARE_KB_MAX), copied. */
    const long *compare;
    int ncompare;
} trn_dist_opts;

typedef struct trn_dist trn_dist;

/* Builds buckets for the net's params (measuring the curve when auto;
   collective: every rank calls it). */
trn_dist *trn_dist_new(trn_comm *c, trn_net *net, const trn_dist_opts *o, char *err);
void trn_dist_destroy(trn_dist **dp);

/* The fraction of each bucket top-k sends from now on (density warm-up);
   (0, 1]. No effect when dense. */
void trn_dist_set_density(trn_dist *d, double density);

/* Top-k: per param, the L2 norm of this rank's gradient share as it entered
   compression in the last step (true units, after clipping); borrowed. */
const double *trn_dist_local_gnorm(const trn_dist *d);

/* Per-rank compression state (top-k residuals, momentum-correction
   velocities): its size in floats (0 when dense), and a copy out / in, in
   bucket order. trn_dist_state_set fails (-1) on a size mismatch. */
long trn_dist_state_count(const trn_dist *d);
void trn_dist_state_get(const trn_dist *d, float *out);
int trn_dist_state_set(trn_dist *d, const float *in, long n);
void trn_dist_state_clear(trn_dist *d);

/* Starts a step: unscale[i] is the factor bringing param i's gradient to
   true units (1 / its loss scale). Copies the factors. */
void trn_dist_begin(trn_dist *d, const double *unscale);

/* Param i's gradient is final for this step (called from the backward). */
void trn_dist_ready(trn_dist *d, int i);

/* Sends the remaining buckets, waits for all, writes the sums into the
   params' g. Returns 0 or -1. */
int trn_dist_finish(trn_dist *d);

/* The bucket size in use (bytes) and the bucket count. */
long trn_dist_fusion_bytes(const trn_dist *d);
int trn_dist_nbuckets(const trn_dist *d);
/* Auto fusion: the fitted alpha (s) and beta (s/byte), and the predicted
   exposed communication per step (s) of the choice and of no fusion (all
   0 for a fixed threshold). */
void trn_dist_fusion_model(const trn_dist *d, double *alpha, double *beta, double *cost,
                           double *cost_none);

/* Auto fusion also measures (dense, several ranks): trn_dist_new takes
   the model's pick (trn_fusion_choose) and shortlists the distinct layouts
   of it, no fusion, 256 KiB, 1 MiB, 4 MiB and one bucket; the first
   candidates x 4 training steps use them in turn (the layout only changes
   how gradients are grouped, not their sums), timing trn_dist_begin ..
   the end of trn_dist_finish; then every rank takes the candidate with
   rank 0's lowest median over the last 3 rounds (a broadcast inside
   trn_dist_finish).
   trn_dist_fusion_note: once, right after the choice, a line saying what
   was timed (else NULL); borrowed. */
const char *trn_dist_fusion_note(trn_dist *d);

/* The layout benchmark (trn_dist_opts.compare) so far, one line into out
   (n bytes): per layout the median and q1..q3 of its step times (rank 0's
   clock) and, per cycle through the layouts, the ratio of each one's time
   to the layout in use (median, q1..q3): two steps of the same moment, so
   load that comes and goes cancels. Returns 0, or -1 (out untouched)
   when no full cycle was timed. */
int trn_dist_compare_report(const trn_dist *d, char *out, size_t n);

/* The automatic fusion threshold: for every bucket layout a threshold can
   give (no fusion, or a bucket closing after each param in backward
   order), simulates one step with the fitted t = alpha + bytes * beta per
   bucket: a bucket starts when its last param is ready (ready_s, or
   spread over backward_s by bytes when NULL) and the previous bucket is
   done; the cost is the communication left after backward ends (overlap)
   or all of it (no overlap). Returns the threshold in bytes of the
   cheapest layout (the largest threshold within 2 % of it, fewer buckets
   being the safer side of a noisy fit); *cost and *cost_none (may be NULL)
   get the predicted cost of the choice and of no fusion. pn: floats per
   param in net order. */
long trn_fusion_choose(int np, const long *pn, const double *ready_s, double backward_s,
                       double alpha, double beta, int overlap, double *cost,
                       double *cost_none);

/* Measures the all-reduce time of the chosen algorithm at sizes 4 KB ...
   4 MB and fits t = alpha + bytes * beta (rank 0's fit, broadcast).
   Collective. Returns 0 or -1. */
int trn_dist_fit_curve(trn_comm *c, const trn_dist_opts *o, double *alpha, double *beta);

#endif
