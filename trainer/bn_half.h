/*  bn_half.h - spatial BatchNorm over NHWC activations stored in bf16 with
    fp32 parameters and statistics: the math the CUDA CNN's own BN kernels
    (cuda_bn_kernels.cuh) run at --precision bf16, where cuDNN's BN may
    derive bf16 parameters for a bf16 input (cudnn_host.h), and its CPU
    twin (bn_half.c), tested against a double reference by
    tests/test_trn_cuda_host.c. The per-channel formulas below are shared
    by both (TRN_BNH_FN: host and device under nvcc); the sums are taken in
    TRN_BNH_CHUNKS chunks of positions per channel (float partials, each
    the sum of trn_bnh_lanes lanes in a fixed order; on the GPU a block a
    chunk) and folded in chunk order in double, so the result does not
    depend on scheduling.

    Forward (training): mean and the biased variance over the s positions
    (two passes: the mean, then the squared deviations), inv = 1/sqrt(var +
    eps), y = g*inv*x + (b - g*inv*mean) rounded to bf16; the running
    statistics move by mo (0.1) towards the mean and the unbiased variance,
    as net.c. Backward: db = sum dy, dg = sum dy*xhat (xhat = (x-mean)*inv,
    written, not added), dx = g*inv/s * (s*dy - db - xhat*dg), added to dx
    when acc, rounded to bf16. Errors: none (sizes are the caller's).
*/
#ifndef TRN_BN_HALF_H
#define TRN_BN_HALF_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TRN_BNH_FN static __host__ __device__ __forceinline__
#else
#define TRN_BNH_FN static inline
#endif

/* partial sums per channel, folded in chunk order: on the GPU a block a
   chunk, over every channel: 512 blocks of 256 threads are about 4 a
   streaming multiprocessor on an H100 (132), enough loads in flight to
   reach its memory's bandwidth with 8 a thread (review34's estimate: 256
   blocks, one load a thread, about 0.2 of 3 TB/s); each channel's fold is
   then 512 adds in one thread */
#define TRN_BNH_CHUNKS 512
#define TRN_BNH_THREADS 256 /* a GPU block's threads (cuda_bn_kernels.cuh) */

/* Within a chunk, channel j's positions are dealt to trn_bnh_lanes(c)
   lanes: lane q sums positions lo + q, lo + q + lanes, ... in order, and
   the lanes' sums are added in lane order. On the GPU a lane is a thread
   (thread t: channel t % c, lane t / c), so a warp reads whole NHWC rows;
   the CPU twin deals them alike, so it adds in the GPU's order. */
TRN_BNH_FN int trn_bnh_lanes(int c)
{
    return c < TRN_BNH_THREADS ? TRN_BNH_THREADS / c : 1;
}

/* Positions [*a, *e) of chunk k (0 .. TRN_BNH_CHUNKS-1) of s. */
TRN_BNH_FN void trn_bnh_chunk(long s, int k, long *a, long *e)
{
    long len = (s + TRN_BNH_CHUNKS - 1) / TRN_BNH_CHUNKS;
    long lo = (long)k * len, hi = lo + len;
    *a = lo < s ? lo : s;
    *e = hi < s ? hi : s;
}

/* Folds the TRN_BNH_CHUNKS partials p[0..] (stride apart) in order. */
TRN_BNH_FN double trn_bnh_fold(const float *p, int stride)
{
    double t = 0;
    for (int k = 0; k < TRN_BNH_CHUNKS; k++)
        t += p[k * stride];
    return t;
}

/* 1/sqrt(var + eps) from the folded squared deviations sq over s. */
TRN_BNH_FN float trn_bnh_inv(double sq, long s, float eps)
{
    return (float)(1.0 / sqrt(sq / (double)(s > 0 ? s : 1) + eps));
}

/* The running mean and variance of one channel after a pass over s
   positions with batch mean `mean` and squared deviations sq. */
TRN_BNH_FN void trn_bnh_running(float *rm, float *rv, float mean, double sq, long s,
                                float mo)
{
    double var = sq / (double)(s > 0 ? s : 1);
    if (s > 1)
        var *= (double)s / (double)(s - 1);
    *rm = (1 - mo) * *rm + mo * mean;
    *rv = (float)((1 - mo) * *rv + mo * var);
}

/* dx of one element (before rounding and accumulation). */
TRN_BNH_FN float trn_bnh_dx(float x, float dy, float g, float mean, float inv, double sdy,
                            double sdyx, long s)
{
    double xh = ((double)x - mean) * inv;
    return (float)((double)g * inv / (double)s * ((double)s * dy - sdy - xh * sdyx));
}

/* The CPU twin (bn_half.c): x, y, dy, dx are s*c bf16 values (NHWC: the
   channel fastest); g, b, rm, rv, mean, inv, dg, db c floats each.
   Forward: y, mean, inv written, rm and rv updated (momentum mo). */
void trn_bnh_fwd_train(const uint16_t *x, uint16_t *y, int c, long s, const float *g,
                       const float *b, float *rm, float *rv, float mo, float eps,
                       float *mean, float *inv);

/* Backward: dg and db written; dx written, or added to when acc (dx NULL:
   none). */
void trn_bnh_bwd(const uint16_t *x, const uint16_t *dy, uint16_t *dx, int acc, int c,
                 long s, const float *g, const float *mean, const float *inv, float *dg,
                 float *db);

#endif
