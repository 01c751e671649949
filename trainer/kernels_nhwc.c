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
#define S_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

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

/* Per-channel sums of x (and of (x - mu)^2 when mu is given) over s rows
   of c values, channels [c0, c0 + cb): float partial sums over RB rows, so
   the inner loop is one vector operation per row, added into double. */
#define RB 128
static inline void s_sums(const float *x, int c, int c0, int cb, long s, const float *mu,
                          double *out)
{
    for (int j = 0; j < cb; j++)
        out[j] = 0;
    for (long i0 = 0; i0 < s; i0 += RB) {
        long i1 = i0 + RB < s ? i0 + RB : s;
        float ps[CB];
        for (int j = 0; j < cb; j++)
            ps[j] = 0;
        for (long i = i0; i < i1; i++) {
            const float *xi = x + i * c + c0;
            if (mu)
                for (int j = 0; j < cb; j++) {
                    float d = xi[j] - mu[j];
                    ps[j] += d * d;
                }
            else
                for (int j = 0; j < cb; j++)
                    ps[j] += xi[j];
        }
        for (int j = 0; j < cb; j++)
            out[j] += ps[j];
    }
}

S_CLONES void trn_bn_relu_fwd_nhwc(const float *x, const float *g, const float *b,
                                   float *y, float *mean, float *invstd,
                                   const float *rmean, const float *rvar, int c, long s,
                                   float eps, trn_precision p)
{
    for (int c0 = 0; c0 < c; c0 += CB) {
        int cb = c - c0 < CB ? c - c0 : CB;
        float a[CB], off[CB];
        if (!rmean) { /* training: this batch's statistics */
            double sum[CB], sq[CB];
            float muf[CB];
            s_sums(x, c, c0, cb, s, NULL, sum);
            for (int j = 0; j < cb; j++)
                muf[j] = (float)(sum[j] / (double)s);
            s_sums(x, c, c0, cb, s, muf, sq);
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
S_CLONES void trn_bn_relu_bwd_nhwc(const float *x, const float *g, const float *mean,
                                   const float *invstd, const float *ry, const float *dy,
                                   float *dx, float *dg, float *db, int c, long s,
                                   float beta, float dxbeta, trn_precision p)
{
    for (int c0 = 0; c0 < c; c0 += CB) {
        int cb = c - c0 < CB ? c - c0 : CB;
        double sdy[CB], sdyx[CB];
        float mu[CB], is[CB], A[CB], B[CB], C[CB];
        for (int j = 0; j < cb; j++) {
            sdy[j] = sdyx[j] = 0;
            mu[j] = mean[c0 + j];
            is[j] = invstd[c0 + j];
        }
        for (long i0 = 0; i0 < s; i0 += RB) {
            long i1 = i0 + RB < s ? i0 + RB : s;
            float p1[CB], p2[CB];
            for (int j = 0; j < cb; j++)
                p1[j] = p2[j] = 0;
            for (long i = i0; i < i1; i++) {
                const float *xi = x + i * c + c0, *di = dy + i * c + c0,
                            *ri = ry + i * c + c0;
                for (int j = 0; j < cb; j++) {
                    float d = ri[j] > 0 ? di[j] : 0.0f;
                    p1[j] += d;
                    p2[j] += d * ((xi[j] - mu[j]) * is[j]);
                }
            }
            for (int j = 0; j < cb; j++) {
                sdy[j] += p1[j];
                sdyx[j] += p2[j];
            }
        }
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
