/*  kernels_nhwc.c - fused channels-last kernels of the oneDNN path (float).

    A conv-BN-ReLU layer on the oneDNN path runs the convolution in oneDNN
    and BatchNorm + ReLU here in one pass over memory each way: forward,
    the statistics then y = relu(round(a*x + off)) straight into the ReLU's
    buffer (the BN output is never stored; rounding to the storage format
    commutes with ReLU as it keeps signs); backward, BN's gradient with the
    ReLU mask applied as it reads, rounded as it is stored. The arithmetic is that of the
   separate kernels in kernels_impl.h (double accumulators), which the gradient tests
   check in double; tests/test_trn_grad.c compares these with them. Compiled for AVX-512
   and AVX2 too and chosen at load time by the CPU. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "trainer/trn.h"

#define CB 64 /* channels per block: the accumulators stay on the stack */
/* With oneDNN's OpenMP (trainer.mk) the passes over rows share the
   threads the convolutions use (--threads); without it they run on one. */
#ifdef _OPENMP
#include <omp.h>
#define S_OMP(x) _Pragma(x)
#else
#define S_OMP(x)
#endif

static inline float s_round(float v, trn_precision p)
{
    if (p == TRN_BF16) {
        uint32_t u;
        memcpy(&u, &v, 4);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        u = (u & 0x7fffffffu) > 0x7f800000u ? u : r;
        memcpy(&v, &u, 4);
        return v;
    }
    return p == TRN_FP16 ? trn_round_fp16(v) : v;
}

/* Per-channel sums over s rows of c values, channels [c0, c0 + cb): float
   partial sums over RB rows (one vector operation per row), added into
   double. The rows are cut into one range per thread and the ranges'
   sums added in order, so the result depends on the thread count only,
   never on timing. mu == NULL: sums of x into o1; else sums of
   (x - mu)^2 into o1. With dy (and the ReLU output ry): sums of the
   masked d into o1 and of d*(x - mu)*is into o2. */
#define RB 128
#define MAXT 16
static inline void s_range_sums(const float *x, const float *dy, const float *ry,
                                const float *mu, const float *is, int c, int c0, int cb,
                                long lo, long hi, double *o1, double *o2)
{
    for (int j = 0; j < cb; j++)
        o1[j] = o2[j] = 0;
    for (long i0 = lo; i0 < hi; i0 += RB) {
        long i1 = i0 + RB < hi ? i0 + RB : hi;
        float p1[CB], p2[CB];
        for (int j = 0; j < cb; j++)
            p1[j] = p2[j] = 0;
        for (long i = i0; i < i1; i++) {
            const float *xi = x + i * c + c0;
            if (dy) {
                const float *di = dy + i * c + c0, *ri = ry + i * c + c0;
                for (int j = 0; j < cb; j++) {
                    float d = ri[j] > 0 ? di[j] : 0.0f;
                    p1[j] += d;
                    p2[j] += d * ((xi[j] - mu[j]) * is[j]);
                }
            } else if (mu) {
                for (int j = 0; j < cb; j++) {
                    float d = xi[j] - mu[j];
                    p1[j] += d * d;
                }
            } else {
                for (int j = 0; j < cb; j++)
                    p1[j] += xi[j];
            }
        }
        for (int j = 0; j < cb; j++) {
            o1[j] += p1[j];
            o2[j] += p2[j];
        }
    }
}

static void s_sums(const float *x, const float *dy, const float *ry, const float *mu,
                   const float *is, int c, int c0, int cb, long s, double *o1, double *o2)
{
    int nt = 1;
#ifdef _OPENMP
    nt = s > 4 * RB ? omp_get_max_threads() : 1;
    nt = nt < 1 ? 1 : nt > MAXT ? MAXT : nt;
#endif
    double part1[MAXT][CB], part2[MAXT][CB];
    S_OMP("omp parallel for num_threads(nt) schedule(static, 1)")
    for (int t = 0; t < nt; t++)
        s_range_sums(x, dy, ry, mu, is, c, c0, cb, s * t / nt, s * (t + 1) / nt, part1[t],
                     part2[t]);
    for (int j = 0; j < cb; j++) {
        o1[j] = o2[j] = 0;
        for (int t = 0; t < nt; t++) {
            o1[j] += part1[t][j];
            o2[j] += part2[t][j];
        }
    }
}

TRN_CLONES void trn_bn_relu_fwd_nhwc(const float *x, const float *g, const float *b,
                                     float *y, float *mean, float *invstd,
                                     const float *rmean, const float *rvar, int c, long s,
                                     float eps, trn_precision p)
{
    for (int c0 = 0; c0 < c; c0 += CB) {
        int cb = c - c0 < CB ? c - c0 : CB;
        float a[CB], off[CB];
        if (!rmean) { /* training: this batch's statistics */
            double sum[CB], sq[CB], unused[CB];
            float muf[CB];
            s_sums(x, NULL, NULL, NULL, NULL, c, c0, cb, s, sum, unused);
            for (int j = 0; j < cb; j++)
                muf[j] = (float)(sum[j] / (double)s);
            s_sums(x, NULL, NULL, muf, NULL, c, c0, cb, s, sq, unused);
            for (int j = 0; j < cb; j++) {
                int ci = c0 + j;
                double mu = sum[j] / (double)s;
                /* sq is about muf; the exact mean differs by dm */
                double dm = mu - muf[j], var = sq[j] / (double)s - dm * dm;
                double is = 1.0 / sqrt((var > 0 ? var : 0) + eps);
                mean[ci] = (float)mu;
                invstd[ci] = (float)is;
                a[j] = (float)(g[ci] * is);
                off[j] = (float)(b[ci] - g[ci] * is * mu);
            }
        } else { /* evaluation: the running statistics */
            for (int j = 0; j < cb; j++) {
                int ci = c0 + j;
                double is = 1.0 / sqrt((double)rvar[ci] + eps);
                a[j] = (float)(g[ci] * is);
                off[j] = (float)(b[ci] - g[ci] * is * rmean[ci]);
            }
        }
        S_OMP("omp parallel for if (s > 4 * RB)")
        for (long i = 0; i < s; i++) {
            const float *xi = x + i * c + c0;
            float *yi = y + i * c + c0;
            for (int j = 0; j < cb; j++) {
                float v = s_round(a[j] * xi[j] + off[j], p);
                yi[j] = v > 0 ? v : 0;
            }
        }
    }
}

/* dy masked by the ReLU output ry: dL/dx of BN, with
   dx = k*(s*d - sum(d) - xh*sum(d*xh)), xh = (x - mu)*is, k = g*is/s,
   computed per element as A*d + B*(x - mu) + C in float. */
TRN_CLONES void trn_bn_relu_bwd_nhwc(const float *x, const float *g, const float *mean,
                                     const float *invstd, const float *ry,
                                     const float *dy, float *dx, float *dg, float *db,
                                     int c, long s, float beta, float dxbeta,
                                     trn_precision p)
{
    for (int c0 = 0; c0 < c; c0 += CB) {
        int cb = c - c0 < CB ? c - c0 : CB;
        double sdy[CB], sdyx[CB];
        float mu[CB], is[CB], A[CB], B[CB], C[CB];
        for (int j = 0; j < cb; j++) {
            mu[j] = mean[c0 + j];
            is[j] = invstd[c0 + j];
        }
        s_sums(x, dy, ry, mu, is, c, c0, cb, s, sdy, sdyx);
        for (int j = 0; j < cb; j++) {
            int ci = c0 + j;
            dg[ci] = (float)(beta == 0 ? sdyx[j] : beta * dg[ci] + sdyx[j]);
            db[ci] = (float)(beta == 0 ? sdy[j] : beta * db[ci] + sdy[j]);
            double k = g[ci] * (double)is[j] / (double)s;
            A[j] = (float)(k * (double)s);
            B[j] = (float)(-k * sdyx[j] * is[j]);
            C[j] = (float)(-k * sdy[j]);
        }
        if (!dx)
            continue;
        S_OMP("omp parallel for if (s > 4 * RB)")
        for (long i = 0; i < s; i++) {
            const float *xi = x + i * c + c0, *di = dy + i * c + c0,
                        *ri = ry + i * c + c0;
            float *o = dx + i * c + c0;
            if (dxbeta == 0)
                for (int j = 0; j < cb; j++) {
                    float d = ri[j] > 0 ? di[j] : 0.0f;
                    o[j] = s_round(A[j] * d + B[j] * (xi[j] - mu[j]) + C[j], p);
                }
            else
                for (int j = 0; j < cb; j++) {
                    float d = ri[j] > 0 ? di[j] : 0.0f;
                    o[j] = s_round(o[j] + (A[j] * d + B[j] * (xi[j] - mu[j]) + C[j]), p);
                }
        }
    }
}
