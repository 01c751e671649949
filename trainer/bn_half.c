/*  bn_half.c - the CPU twin of the CUDA CNN's own bf16 BatchNorm kernels
    (bn_half.h): the same chunks, the same fold in chunk order and the same
    per-channel formulas, on the host, so that every machine's unit tests
    check the math the GPU runs (tests/test_trn_cuda_host.c, against a
    double reference).
*/
#include "trainer/bn_half.h"

#include "trainer/bf16.h"

/* Chunk k's partial sum of channel j: the mean pass (mu NULL) or the
   squared deviations from mu, lane by lane as the GPU adds them. */
static float s_part(const uint16_t *x, int c, long s, int j, int k, const float *mu)
{
    long a, e;
    trn_bnh_chunk(s, k, &a, &e);
    int lanes = trn_bnh_lanes(c);
    float t = 0;
    for (int q = 0; q < lanes; q++) {
        float l = 0;
        for (long p = a + q; p < e; p += lanes) {
            float v = trn_bf2f(x[p * c + j]);
            l += mu ? (v - *mu) * (v - *mu) : v;
        }
        t += l;
    }
    return t;
}

void trn_bnh_fwd_train(const uint16_t *x, uint16_t *y, int c, long s, const float *g,
                       const float *b, float *rm, float *rv, float mo, float eps,
                       float *mean, float *inv)
{
    float part[TRN_BNH_CHUNKS];
    for (int j = 0; j < c; j++) {
        for (int k = 0; k < TRN_BNH_CHUNKS; k++)
            part[k] = s_part(x, c, s, j, k, NULL);
        mean[j] = (float)(trn_bnh_fold(part, 1) / (double)(s > 0 ? s : 1));
        for (int k = 0; k < TRN_BNH_CHUNKS; k++)
            part[k] = s_part(x, c, s, j, k, &mean[j]);
        double sq = trn_bnh_fold(part, 1);
        inv[j] = trn_bnh_inv(sq, s, eps);
        trn_bnh_running(&rm[j], &rv[j], mean[j], sq, s, mo);
        float a = g[j] * inv[j], off = b[j] - g[j] * inv[j] * mean[j];
        for (long p = 0; p < s; p++)
            y[p * c + j] = trn_f2bf(a * trn_bf2f(x[p * c + j]) + off);
    }
}

void trn_bnh_bwd(const uint16_t *x, const uint16_t *dy, uint16_t *dx, int acc, int c,
                 long s, const float *g, const float *mean, const float *inv, float *dg,
                 float *db)
{
    float pd[TRN_BNH_CHUNKS], px[TRN_BNH_CHUNKS];
    for (int j = 0; j < c; j++) {
        for (int k = 0; k < TRN_BNH_CHUNKS; k++) {
            long a, e;
            trn_bnh_chunk(s, k, &a, &e);
            int lanes = trn_bnh_lanes(c);
            float td = 0, tx = 0;
            for (int q = 0; q < lanes; q++) { /* as s_part */
                float ld = 0, lx = 0;
                for (long p = a + q; p < e; p += lanes) {
                    float d = trn_bf2f(dy[p * c + j]);
                    ld += d;
                    lx += d * ((trn_bf2f(x[p * c + j]) - mean[j]) * inv[j]);
                }
                td += ld, tx += lx;
            }
            pd[k] = td, px[k] = tx;
        }
        db[j] = (float)trn_bnh_fold(pd, 1);
        dg[j] = (float)trn_bnh_fold(px, 1);
        if (!dx)
            continue;
        for (long p = 0; p < s; p++) { /* from db, dg as stored (as the GPU) */
            float v = trn_bnh_dx(trn_bf2f(x[p * c + j]), trn_bf2f(dy[p * c + j]), g[j],
                                 mean[j], inv[j], db[j], dg[j], s);
            dx[p * c + j] = trn_f2bf((acc ? trn_bf2f(dx[p * c + j]) : 0.0f) + v);
        }
    }
}
