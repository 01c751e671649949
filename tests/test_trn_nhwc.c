/*  test_trn_nhwc.c - the channels-last passes of the oneDNN path
    (trainer/kernels_nhwc.c) against references: BN(+ReLU) forward and
    backward, on real bf16 storage and on float storage, against the same
    formulas in double; the bf16 element-wise passes (add+ReLU, ReLU and
    its gradient, accumulate, scale, conversions) against one value at a
    time through trn_f2bf/trn_bf2f.

    Tolerances: a bf16 output is rounded once from a float result, so it
    lies within one bf16 step (2^-8 relative) of the double reference, plus
    1e-4 of the largest value for the float arithmetic before the rounding
    (BN's backward cancels terms); float storage within 1e-4 of the largest
    value; weight gradients (double sums) within 1e-5 relative. Masked
    copies (the ReLU's forward and gradient) are exact, special values
    (signed zeros, subnormals, inf, NaN) included. The shapes reach every
    code path: channels dividing 64 (one run of values, with a tail), 24
    and 80 (rows, and two channel blocks), and more values than one chunk
    of the element-wise passes. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jz_test.h"
#include "trainer/bf16.h"
#include "trainer/conv_dnnl.h"
#include "trainer/trn.h"

static trn_rng g_rng;

static double s_rnd(double lo, double hi)
{
    return lo + (hi - lo) * trn_rng_uniform(&g_rng);
}

/* BN statistics and y = BN(x) (relu: max(., 0)) in double */
static void s_bn_ref(const double *x, const float *g, const float *b, int c, long s,
                     int relu, double *mu, double *is, double *y)
{
    for (int j = 0; j < c; j++) {
        double m = 0, v = 0;
        for (long i = 0; i < s; i++)
            m += x[i * c + j];
        m /= (double)s;
        for (long i = 0; i < s; i++)
            v += (x[i * c + j] - m) * (x[i * c + j] - m);
        v /= (double)s;
        mu[j] = m;
        is[j] = 1.0 / sqrt(v + 1e-5);
        for (long i = 0; i < s; i++) {
            double u = g[j] * (x[i * c + j] - m) * is[j] + b[j];
            y[i * c + j] = relu && u < 0 ? 0 : u;
        }
    }
}

/* BN's backward in double: dy masked where ry <= 0 (ry NULL: no mask) */
static void s_bn_bwd_ref(const double *x, const float *g, const double *mu,
                         const double *is, const double *ry, const double *dy, int c,
                         long s, double *dx, double *dg, double *db)
{
    for (int j = 0; j < c; j++) {
        double sd = 0, sdx = 0;
        for (long i = 0; i < s; i++) {
            long e = i * c + j;
            double d = !ry || ry[e] > 0 ? dy[e] : 0;
            sd += d;
            sdx += d * (x[e] - mu[j]) * is[j];
        }
        dg[j] = sdx;
        db[j] = sd;
        double k = g[j] * is[j] / (double)s;
        for (long i = 0; i < s; i++) {
            long e = i * c + j;
            double d = !ry || ry[e] > 0 ? dy[e] : 0;
            dx[e] = k * ((double)s * d - sd - (x[e] - mu[j]) * is[j] * sdx);
        }
    }
}

static double s_maxabs(const double *v, long n)
{
    double m = 0;
    for (long i = 0; i < n; i++)
        m = fmax(m, fabs(v[i]));
    return m;
}

/* values a bf16 output may differ from its double reference by */
static int s_close_bf(double got, double ref, double scale)
{
    return fabs(got - ref) <= fabs(ref) / 256.0 + 1e-4 * scale;
}

/* One BN(+ReLU) case on bf16 and on float storage: forward (training
   statistics), then backward with the ReLU's mask, written and added. */
static void bn_case(int c, long s, int relu)
{
    long n = (long)c * s;
    uint16_t *xh = malloc((size_t)n * 2), *yh = malloc((size_t)n * 2),
             *dyh = malloc((size_t)n * 2), *dxh = malloc((size_t)n * 2);
    float *xf = malloc((size_t)n * 4), *yf = malloc((size_t)n * 4),
          *dyf = malloc((size_t)n * 4), *dxf = malloc((size_t)n * 4);
    double *x = malloc((size_t)n * 8), *y = malloc((size_t)n * 8),
           *dy = malloc((size_t)n * 8), *dx = malloc((size_t)n * 8);
    float g[96], b[96], mean[96], invstd[96], dg[96], db[96];
    double mu[96], is[96], rdg[96], rdb[96];
    for (int j = 0; j < c; j++) {
        g[j] = (float)s_rnd(0.5, 1.5);
        b[j] = (float)s_rnd(-0.5, 0.5);
    }
    for (long e = 0; e < n; e++) {
        /* per-channel offsets, so the statistics matter */
        xh[e] = trn_f2bf((float)(s_rnd(-2, 2) + 0.3 * (double)(e % c)));
        x[e] = xf[e] = trn_bf2f(xh[e]);
        dyh[e] = trn_f2bf((float)s_rnd(-1, 1));
        dy[e] = dyf[e] = trn_bf2f(dyh[e]);
    }
    s_bn_ref(x, g, b, c, s, relu, mu, is, y);
    double ys = s_maxabs(y, n);
    trn_bn_relu_fwd_nhwc_bf(xh, g, b, yh, mean, invstd, NULL, NULL, c, s, 1e-5f, TRN_BF16,
                            relu);
    trn_bn_relu_fwd_nhwc_f(xf, g, b, yf, mean, invstd, NULL, NULL, c, s, 1e-5f, TRN_FP32,
                           relu);
    long bad = 0, badf = 0;
    for (long e = 0; e < n; e++) {
        bad += !s_close_bf(trn_bf2f(yh[e]), y[e], ys);
        badf += fabs(yf[e] - y[e]) > 1e-4 * ys;
        if (relu && (yh[e] & 0x8000u))
            bad++; /* a ReLU output is never negative, nor -0 */
    }
    for (int j = 0; j < c; j++)
        badf += fabs(mean[j] - mu[j]) > 1e-5 * (fabs(mu[j]) + 1) ||
                fabs(invstd[j] - is[j]) > 1e-5 * is[j];
    if (bad || badf)
        JZT_FAIL("BN forward c=%d s=%ld relu=%d: %ld bf16, %ld float values off", c, s,
                 relu, bad, badf);
    /* backward: the mask is the bf16 forward's output (as net.c gives it) */
    double *ry = malloc((size_t)n * 8);
    for (long e = 0; e < n; e++)
        ry[e] = yf[e] = trn_bf2f(yh[e]);
    s_bn_bwd_ref(x, g, mu, is, relu ? ry : NULL, dy, c, s, dx, rdg, rdb);
    double dxs = s_maxabs(dx, n);
    for (int acc = 0; acc < 2; acc++) {
        uint16_t base = trn_f2bf(0.25f);
        for (long e = 0; e < n; e++) {
            dxh[e] = base;
            dxf[e] = 0.25f;
        }
        trn_bn_relu_bwd_nhwc_bf(xh, g, mean, invstd, relu ? yh : NULL, dyh, dxh, dg, db,
                                c, s, 0.0f, acc ? 1.0f : 0.0f, TRN_BF16);
        bad = 0;
        for (long e = 0; e < n; e++)
            bad += !s_close_bf(trn_bf2f(dxh[e]), dx[e] + (acc ? 0.25 : 0), dxs);
        for (int j = 0; j < c; j++)
            bad += fabs(dg[j] - rdg[j]) > 1e-5 * (fabs(rdg[j]) + 1) ||
                   fabs(db[j] - rdb[j]) > 1e-5 * (fabs(rdb[j]) + 1);
        trn_bn_relu_bwd_nhwc_f(xf, g, mean, invstd, relu ? yf : NULL, dyf, dxf, dg, db, c,
                               s, 0.0f, acc ? 1.0f : 0.0f, TRN_FP32);
        badf = 0;
        for (long e = 0; e < n; e++)
            badf += fabs(dxf[e] - (dx[e] + (acc ? 0.25 : 0))) > 1e-4 * dxs;
        if (bad || badf)
            JZT_FAIL("BN backward c=%d s=%ld relu=%d acc=%d: %ld bf16, %ld float values "
                     "off",
                     c, s, relu, acc, bad, badf);
    }
    free(xh), free(yh), free(dyh), free(dxh), free(xf), free(yf), free(dyf), free(dxf);
    free(x), free(y), free(dy), free(dx), free(ry);
}

TEST(bn_relu_matches_double_reference)
{
    bn_case(8, 5001, 1);  /* one run of values, a tail, several chunks */
    bn_case(16, 300, 0);  /* no ReLU: every gradient passes */
    bn_case(24, 1000, 1); /* rows */
    bn_case(80, 700, 1);  /* two channel blocks */
}

/* bf16 bit patterns with the special values among ordinary ones */
static uint16_t s_special(long i)
{
    static const uint16_t sp[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x7f80,
                                  0xff80, 0x7fc0, 0xffc0, 0x3f80, 0xbf80};
    if (i % 7 == 0)
        return sp[(i / 7) % (long)(sizeof sp / sizeof sp[0])];
    return trn_f2bf((float)s_rnd(-3, 3));
}

static int s_same_bf(uint16_t a, uint16_t b)
{
    return a == b || (trn_bf2f(a) != trn_bf2f(a) && trn_bf2f(b) != trn_bf2f(b));
}

TEST(bf16_elementwise_passes_match_one_value_at_a_time)
{
    long n = 3 * 16384 + 77; /* several chunks and a short one */
    uint16_t *a = malloc((size_t)n * 2), *b = malloc((size_t)n * 2),
             *y = malloc((size_t)n * 2), *o = malloc((size_t)n * 2),
             *o0 = malloc((size_t)n * 2);
    float *f = malloc((size_t)n * 4);
    for (long i = 0; i < n; i++) {
        a[i] = s_special(i);
        b[i] = s_special(i + 3);
        o0[i] = trn_f2bf((float)s_rnd(-1, 1));
    }
    long bad[8] = {0};
    trn_relu_fwd_bf(a, y, n);
    for (long i = 0; i < n; i++)
        bad[0] += y[i] != ((a[i] & 0x8000u) ? 0 : a[i]);
    for (int relu = 0; relu < 2; relu++) {
        trn_add_relu_bf(a, b, y, n, relu);
        for (long i = 0; i < n; i++) {
            float v = trn_bf2f(a[i]) + trn_bf2f(b[i]), lo = relu ? 0.0f : -INFINITY;
            bad[1] += !s_same_bf(y[i], trn_f2bf(v > lo ? v : lo));
        }
    }
    /* the ReLU's gradient: exact masked copy, then added */
    trn_relu_bwd_bf(a, b, o, n, 0.0f);
    for (long i = 0; i < n; i++)
        bad[2] += o[i] != (trn_bf2f(a[i]) > 0 ? b[i] : 0);
    memcpy(o, o0, (size_t)n * 2);
    trn_relu_bwd_bf(a, b, o, n, 1.0f);
    for (long i = 0; i < n; i++) {
        float d = trn_bf2f(a[i]) > 0 ? trn_bf2f(b[i]) : 0.0f;
        bad[3] += !s_same_bf(o[i], trn_f2bf(trn_bf2f(o0[i]) + d));
    }
    memcpy(o, o0, (size_t)n * 2);
    trn_acc_bf(o, b, 0.5f, n);
    for (long i = 0; i < n; i++)
        bad[4] += !s_same_bf(o[i], trn_f2bf(0.5f * trn_bf2f(o0[i]) + trn_bf2f(b[i])));
    memcpy(o, b, (size_t)n * 2);
    trn_scale_bf(o, 0.375f, n);
    for (long i = 0; i < n; i++)
        bad[5] += !s_same_bf(o[i], trn_f2bf(0.375f * trn_bf2f(b[i])));
    trn_bf16_to_f32(f, a, n);
    for (long i = 0; i < n; i++)
        bad[6] += memcmp(&f[i], &(float){trn_bf2f(a[i])}, 4) != 0;
    for (long i = 0; i < n; i++)
        f[i] = (float)s_rnd(-5, 5) * (i % 11 == 0 ? 1e-39f : 1.0f); /* subnormals */
    trn_bf16_from_f32(o, f, n);
    for (long i = 0; i < n; i++)
        bad[7] += o[i] != trn_f2bf(f[i]);
    const char *what[] = {"relu",  "add+relu", "relu grad", "relu grad (add)",
                          "accum", "scale",    "to f32",    "from f32"};
    for (int k = 0; k < 8; k++)
        if (bad[k])
            JZT_FAIL("%s: %ld of %ld values differ", what[k], bad[k], n);
    free(a), free(b), free(y), free(o), free(o0), free(f);
}

/* The ReLU's backward that also sums its gradient's columns (the MLP's
   bias gradient, trn_relu_bwd_colsum_bf) writes trn_relu_bwd_bf's dx and
   the sums a row-after-row loop gives, bit for bit (+0, -0, NaN, negative
   and positive y; m around the 16-column blocks); on more than one
   thread it declines a batch the two passes would split, and does
   nothing then. */
TEST(relu_backward_with_column_sums_equals_the_two_passes)
{
    int ms[] = {1, 15, 16, 17, 256, 70};
    for (size_t c = 0; c < sizeof ms / sizeof ms[0]; c++) {
        int n = 37, m = ms[c];
        size_t ne = (size_t)n * m;
        uint16_t *y = malloc(ne * 2), *dy = malloc(ne * 2), *a = malloc(ne * 2),
                 *b = malloc(ne * 2);
        float *sa = malloc((size_t)m * 4), *sb = calloc((size_t)m, 4);
        REQUIRE(y && dy && a && b && sa && sb);
        for (size_t i = 0; i < ne; i++) {
            y[i] = (uint16_t[]){0x0000, 0x8000, 0x3f80, 0xbf80, 0x7fc0, 0x0001}[i % 6];
            dy[i] = trn_f2bf((float)sin((double)i) * 3.0f);
        }
        REQUIRE(trn_relu_bwd_colsum_bf(y, dy, a, n, m, sa) == 0);
        trn_relu_bwd_bf(y, dy, b, (long)ne, 0.0f);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++)
                sb[j] += trn_bf2f(b[(size_t)i * m + j]);
        CHECK(memcmp(a, b, ne * 2) == 0);
        CHECK(memcmp(sa, sb, (size_t)m * 4) == 0);
        free(y), free(dy), free(a), free(b), free(sa), free(sb);
    }
    /* 300 rows of 256 (more than two chunks) on two threads: declined */
    trn_dnnl_set_threads(2);
    uint16_t *y = calloc(300 * 256, 2), *dy = calloc(300 * 256, 2),
             *dx = calloc(300 * 256, 2);
    float s[256];
    REQUIRE(y && dy && dx);
    dx[5] = 0x1234;
    int rc = trn_relu_bwd_colsum_bf(y, dy, dx, 300, 256, s);
    if (trn_dnnl_available())
        CHECK(rc == -1 && dx[5] == 0x1234);
    trn_dnnl_set_threads(1);
    CHECK(trn_relu_bwd_colsum_bf(y, dy, dx, 300, 256, s) == 0 && dx[5] == 0);
    free(y), free(dy), free(dx);
}

int main(void)
{
    trn_rng_seed(&g_rng, 5);
    trn_dnnl_set_threads(1);
    RUN(bn_relu_matches_double_reference);
    RUN(bf16_elementwise_passes_match_one_value_at_a_time);
    RUN(relu_backward_with_column_sums_equals_the_two_passes);
    TEST_DONE();
}
