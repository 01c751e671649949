/*  test_trn_grad.c - every layer's backward against central finite
    differences, in double precision (the _d kernels are the same source as
    the float kernels the trainer runs, see trainer/kernels_impl.h).
    Loss = sum(out .* r) for a fixed random r, so d loss/d out = r.
    Tolerance: 1e-6 relative (or absolute) with step h = 1e-5.
    The channels-last BN and pooling of the oneDNN path likewise, and
    against their CNHW twins. Plus a whole-graph check in float (MLP and
    residual CNN with BN, the CNN on both convolution paths, the MLP on
    both --matmul paths): directional derivatives within 2% with h = 1e-3. */
#include <stdlib.h>
#include <string.h>

#include "jz_test.h"
#include "trainer/conv_dnnl.h"
#include "trainer/softmax.h"
#include "trainer/trn.h"

#define H 1e-5
#define TOL 1e-6

static trn_rng g_rng;

static double *s_rand(long n)
{
    double *v = malloc((size_t)n * sizeof(double));
    for (long i = 0; i < n; i++)
        v[i] = 2 * trn_rng_uniform(&g_rng) - 1;
    return v;
}

static double s_dot(const double *a, const double *b, long n)
{
    double s = 0;
    for (long i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* ---- linear ---- */
typedef struct {
    double *x, *w, *b, *y, *r;
    int n, k, m;
} lin_ctx;

static double lin_loss(lin_ctx *c)
{
    trn_linear_fwd_d(c->x, c->w, c->b, c->y, c->n, c->k, c->m);
    return s_dot(c->y, c->r, (long)c->n * c->m);
}

static void check_fd(double *v, long n, const double *analytic, double (*f)(void *),
                     void *ctx, const char *what)
{
    int bad = 0;
    for (long i = 0; i < n; i++) {
        double o = v[i];
        v[i] = o + H;
        double a = f(ctx);
        v[i] = o - H;
        double b = f(ctx);
        v[i] = o;
        double fd = (a - b) / (2 * H);
        double d = fabs(fd - analytic[i]);
        if (d > TOL && d > TOL * fabs(fd)) {
            if (bad++ < 3)
                JZT_FAIL("%s[%ld]: analytic %.12g, finite difference %.12g", what, i,
                         analytic[i], fd);
        }
    }
}

TEST(linear_grad)
{
    lin_ctx c = {.n = 3, .k = 5, .m = 4};
    c.x = s_rand(15);
    c.w = s_rand(20);
    c.b = s_rand(4);
    c.y = s_rand(12);
    c.r = s_rand(12);
    double *dx = calloc(15, 8), *dw = calloc(20, 8), *db = calloc(4, 8);
    trn_linear_bwd_d(c.x, c.w, c.r, dx, dw, db, 3, 5, 4, 0.0);
    double (*f)(void *) = (double (*)(void *))lin_loss;
    check_fd(c.x, 15, dx, f, &c, "dx");
    check_fd(c.w, 20, dw, f, &c, "dw");
    check_fd(c.b, 4, db, f, &c, "db");
    /* beta = 1 accumulates */
    double *dw2 = malloc(20 * 8), *db2 = malloc(4 * 8);
    memcpy(dw2, dw, 20 * 8);
    memcpy(db2, db, 4 * 8);
    trn_linear_bwd_d(c.x, c.w, c.r, NULL, dw2, db2, 3, 5, 4, 1.0);
    for (int i = 0; i < 20; i++)
        CHECK_NEAR(dw2[i], 2 * dw[i], 1e-12);
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(db2[i], 2 * db[i], 1e-12);
    free(c.x), free(c.w), free(c.b), free(c.y), free(c.r), free(dx), free(dw), free(db);
    free(dw2), free(db2);
}

/* ---- relu ---- */
typedef struct {
    double *x, *y, *r;
    long n;
} relu_ctx;

static double relu_loss(relu_ctx *c)
{
    trn_relu_fwd_d(c->x, c->y, c->n);
    return s_dot(c->y, c->r, c->n);
}

TEST(relu_grad)
{
    relu_ctx c = {.n = 20};
    c.x = s_rand(20);
    for (int i = 0; i < 20; i++) /* keep away from the kink */
        if (fabs(c.x[i]) < 0.05)
            c.x[i] = 0.3;
    c.y = s_rand(20);
    c.r = s_rand(20);
    double *dx = calloc(20, 8);
    relu_loss(&c);
    trn_relu_bwd_d(c.y, c.r, dx, 20, 0.0);
    check_fd(c.x, 20, dx, (double (*)(void *))relu_loss, &c, "dx");
    free(c.x), free(c.y), free(c.r), free(dx);
}

/* ---- conv ---- */
typedef struct {
    double *x, *w, *y, *r, *cols;
    int c, n, h, wd, co, k, s, p;
} conv_ctx;

static long conv_ysize(const conv_ctx *c)
{
    return (long)c->co * c->n * trn_conv_out(c->h, c->k, c->s, c->p) *
           trn_conv_out(c->wd, c->k, c->s, c->p);
}

static double conv_loss(conv_ctx *c)
{
    trn_conv_fwd_d(c->x, c->w, c->y, c->cols, c->c, c->n, c->h, c->wd, c->co, c->k, c->s,
                   c->p);
    return s_dot(c->y, c->r, conv_ysize(c));
}

static void conv_case(int k, int s, int p)
{
    conv_ctx c = {.c = 2, .n = 2, .h = 5, .wd = 6, .co = 3, .k = k, .s = s, .p = p};
    long nx = (long)c.c * c.n * c.h * c.wd, nw = (long)c.co * c.c * k * k;
    long ny = conv_ysize(&c);
    c.x = s_rand(nx);
    c.w = s_rand(nw);
    c.y = s_rand(ny);
    c.r = s_rand(ny);
    c.cols = malloc((size_t)c.c * k * k * ny / c.co * sizeof(double) + 64);
    double *dx = s_rand(nx), *dw = calloc((size_t)nw, 8), *dx0 = malloc((size_t)nx * 8);
    memcpy(dx0, dx, (size_t)nx * 8);
    /* dxbeta = 1: the gradient is added to what dx held */
    trn_conv_bwd_d(c.x, c.w, c.r, dx, dw, c.cols, c.c, c.n, c.h, c.wd, c.co, k, s, p, 0.0,
                   1.0);
    for (long i = 0; i < nx; i++)
        dx[i] -= dx0[i];
    check_fd(c.x, nx, dx, (double (*)(void *))conv_loss, &c, "dx");
    check_fd(c.w, nw, dw, (double (*)(void *))conv_loss, &c, "dw");
    free(c.x), free(c.w), free(c.y), free(c.r), free(c.cols), free(dx), free(dw),
        free(dx0);
}

TEST(conv3x3_grad)
{
    conv_case(3, 1, 1);
}

TEST(conv3x3_stride2_grad)
{
    conv_case(3, 2, 1);
}

TEST(conv1x1_grad)
{
    conv_case(1, 1, 0);
}

/* Batches whose im2col columns exceed TRN_CONV_TILE bytes are convolved a
   tile of images at a time: forward, dW (accumulated over the tiles on top
   of beta * dW) and dX (added to dxbeta * dX) against a direct convolution,
   with `cols` exactly as large as trn.h says, so ASan sees any overrun.
   28x28 images of 4 channels: one image a tile at stride 1 (3 tiles), four at
   stride 2 (a full tile and a remainder of 2). */
static void conv_tiled_case(int n, int s)
{
    int c = 4, h = 28, wd = 28, co = 5, k = 3, p = 1;
    int ho = trn_conv_out(h, k, s, p), wo = trn_conv_out(wd, k, s, p);
    long nx = (long)c * n * h * wd, nw = (long)co * c * k * k,
         ny = (long)co * n * ho * wo;
    long per = (long)c * k * k * ho * wo * (long)sizeof(double);
    REQUIRE(TRN_CONV_TILE / per < n); /* more than one tile */
    double *x = s_rand(nx), *w = s_rand(nw), *dy = s_rand(ny),
           *y = malloc((size_t)ny * 8);
    double *dx = s_rand(nx), *dw = s_rand(nw), *rdx = malloc((size_t)nx * 8),
           *rdw = malloc((size_t)nw * 8);
    double *cols = malloc((size_t)(per > TRN_CONV_TILE ? per : TRN_CONV_TILE));
    for (long i = 0; i < nx; i++)
        rdx[i] = dx[i]; /* dxbeta 1 */
    for (long i = 0; i < nw; i++)
        rdw[i] = 0.5 * dw[i]; /* beta 0.5 */
    double err = 0;
    for (int o = 0; o < co; o++)
        for (int ni = 0; ni < n; ni++)
            for (int oh = 0; oh < ho; oh++)
                for (int ow = 0; ow < wo; ow++) {
                    double acc = 0, g = dy[(((long)o * n + ni) * ho + oh) * wo + ow];
                    for (int ci = 0; ci < c; ci++)
                        for (int ki = 0; ki < k; ki++)
                            for (int kj = 0; kj < k; kj++) {
                                int ih = oh * s - p + ki, iw = ow * s - p + kj;
                                if (ih < 0 || ih >= h || iw < 0 || iw >= wd)
                                    continue;
                                long xi = (((long)ci * n + ni) * h + ih) * wd + iw;
                                long wi = (((long)o * c + ci) * k + ki) * k + kj;
                                acc += w[wi] * x[xi];
                                rdw[wi] += g * x[xi];
                                rdx[xi] += g * w[wi];
                            }
                    y[(((long)o * n + ni) * ho + oh) * wo + ow] = acc;
                }
    double *ty = malloc((size_t)ny * 8);
    trn_conv_fwd_d(x, w, ty, cols, c, n, h, wd, co, k, s, p);
    for (long i = 0; i < ny; i++)
        err = fmax(err, fabs(ty[i] - y[i]));
    CHECK(err < 1e-10);
    trn_conv_bwd_d(x, w, dy, dx, dw, cols, c, n, h, wd, co, k, s, p, 0.5, 1.0);
    err = 0;
    for (long i = 0; i < nw; i++)
        err = fmax(err, fabs(dw[i] - rdw[i]) / (1 + fabs(rdw[i])));
    CHECK(err < 1e-10);
    err = 0;
    for (long i = 0; i < nx; i++)
        err = fmax(err, fabs(dx[i] - rdx[i]));
    CHECK(err < 1e-10);
    free(x), free(w), free(dy), free(y), free(ty), free(dx), free(dw), free(rdx),
        free(rdw), free(cols);
}

TEST(conv_tiles_match_the_direct_convolution)
{
    conv_tiled_case(3, 1);
    conv_tiled_case(6, 2);
}

/* ---- batch norm (training mode) ---- */
typedef struct {
    double *x, *g, *b, *y, *r, *mean, *invstd;
    int c;
    long s;
} bn_ctx;

static double bn_loss(bn_ctx *c)
{
    trn_bn_fwd_train_d(c->x, c->g, c->b, c->y, c->mean, c->invstd, c->c, c->s, 1e-5);
    return s_dot(c->y, c->r, c->c * c->s);
}

TEST(batchnorm_grad)
{
    bn_ctx c = {.c = 3, .s = 7};
    long n = c.c * c.s;
    c.x = s_rand(n);
    c.g = s_rand(3);
    c.b = s_rand(3);
    c.y = s_rand(n);
    c.r = s_rand(n);
    c.mean = calloc(3, 8);
    c.invstd = calloc(3, 8);
    double *dx = calloc((size_t)n, 8), *dg = calloc(3, 8), *db = calloc(3, 8);
    bn_loss(&c);
    trn_bn_bwd_d(c.x, c.g, c.mean, c.invstd, c.r, dx, dg, db, c.c, c.s, 0.0, 0.0);
    double (*f)(void *) = (double (*)(void *))bn_loss;
    check_fd(c.x, n, dx, f, &c, "dx");
    check_fd(c.g, 3, dg, f, &c, "dgamma");
    check_fd(c.b, 3, db, f, &c, "dbeta");
    /* eval mode with running stats equal to the batch stats gives the same output */
    double *rv = malloc(3 * 8), *y2 = malloc((size_t)n * 8);
    for (int i = 0; i < 3; i++)
        rv[i] = 1.0 / (c.invstd[i] * c.invstd[i]) - 1e-5;
    bn_loss(&c);
    trn_bn_fwd_eval_d(c.x, c.g, c.b, y2, c.mean, rv, c.c, c.s, 1e-5);
    for (long i = 0; i < n; i++)
        CHECK_NEAR(y2[i], c.y[i], 1e-9);
    free(c.x), free(c.g), free(c.b), free(c.y), free(c.r), free(c.mean), free(c.invstd);
    free(dx), free(dg), free(db), free(rv), free(y2);
}

/* ---- global average pooling ---- */
typedef struct {
    double *x, *y, *r;
    int c, n, hw;
} gap_ctx;

static double gap_loss(gap_ctx *c)
{
    trn_gap_fwd_d(c->x, c->y, c->c, c->n, c->hw);
    return s_dot(c->y, c->r, (long)c->c * c->n);
}

TEST(gap_grad)
{
    gap_ctx c = {.c = 3, .n = 2, .hw = 5};
    c.x = s_rand(30);
    c.y = s_rand(6);
    c.r = s_rand(6);
    double *dx = calloc(30, 8);
    trn_gap_bwd_d(c.r, dx, 3, 2, 5, 0.0);
    check_fd(c.x, 30, dx, (double (*)(void *))gap_loss, &c, "dx");
    free(c.x), free(c.y), free(c.r), free(dx);
}

/* ---- channels-last (NHWC) BN and pooling: the oneDNN path's layout ---- */
static double bnh_loss(bn_ctx *c)
{
    trn_bn_fwd_train_nhwc_d(c->x, c->g, c->b, c->y, c->mean, c->invstd, c->c, c->s, 1e-5);
    return s_dot(c->y, c->r, c->c * c->s);
}

/* 70 channels: two blocks of the kernels' channel tiling (64 + 6) */
TEST(batchnorm_nhwc_grad)
{
    bn_ctx c = {.c = 70, .s = 5};
    long n = c.c * c.s;
    c.x = s_rand(n);
    c.g = s_rand(c.c);
    c.b = s_rand(c.c);
    c.y = s_rand(n);
    c.r = s_rand(n);
    c.mean = calloc((size_t)c.c, 8);
    c.invstd = calloc((size_t)c.c, 8);
    double *dx = s_rand(n), *dx0 = malloc((size_t)n * 8), *dg = calloc((size_t)c.c, 8),
           *db = calloc((size_t)c.c, 8);
    memcpy(dx0, dx, (size_t)n * 8);
    bnh_loss(&c);
    trn_bn_bwd_nhwc_d(c.x, c.g, c.mean, c.invstd, c.r, dx, dg, db, c.c, c.s, 0.0, 1.0);
    for (long i = 0; i < n; i++) /* dxbeta 1 adds */
        dx[i] -= dx0[i];
    double (*f)(void *) = (double (*)(void *))bnh_loss;
    check_fd(c.x, n, dx, f, &c, "dx");
    check_fd(c.g, c.c, dg, f, &c, "dgamma");
    check_fd(c.b, c.c, db, f, &c, "dbeta");
    /* the same numbers as the CNHW kernel on the transposed input */
    double *xt = malloc((size_t)n * 8), *yt = malloc((size_t)n * 8),
           *y2 = malloc((size_t)n * 8);
    double *m2 = calloc((size_t)c.c, 8), *i2 = calloc((size_t)c.c, 8);
    for (long i = 0; i < c.s; i++)
        for (int j = 0; j < c.c; j++)
            xt[j * c.s + i] = c.x[i * c.c + j];
    bnh_loss(&c);
    trn_bn_fwd_train_d(xt, c.g, c.b, yt, m2, i2, c.c, c.s, 1e-5);
    for (long i = 0; i < c.s; i++)
        for (int j = 0; j < c.c; j++)
            CHECK_NEAR(c.y[i * c.c + j], yt[j * c.s + i], 1e-12);
    /* eval mode with the batch statistics as running statistics */
    double *rv = malloc((size_t)c.c * 8);
    for (int i = 0; i < c.c; i++)
        rv[i] = 1.0 / (c.invstd[i] * c.invstd[i]) - 1e-5;
    trn_bn_fwd_eval_nhwc_d(c.x, c.g, c.b, y2, c.mean, rv, c.c, c.s, 1e-5);
    for (long i = 0; i < n; i++)
        CHECK_NEAR(y2[i], c.y[i], 1e-9);
    free(c.x), free(c.g), free(c.b), free(c.y), free(c.r), free(c.mean), free(c.invstd);
    free(dx), free(dx0), free(dg), free(db), free(xt), free(yt), free(y2), free(m2),
        free(i2), free(rv);
}

static double gaph_loss(gap_ctx *c)
{
    trn_gap_fwd_nhwc_d(c->x, c->y, c->c, c->n, c->hw);
    return s_dot(c->y, c->r, (long)c->c * c->n);
}

TEST(gap_nhwc_grad)
{
    gap_ctx c = {.c = 67, .n = 2, .hw = 5};
    long nx = (long)c.c * c.n * c.hw;
    c.x = s_rand(nx);
    c.y = s_rand(c.c * c.n);
    c.r = s_rand(c.c * c.n);
    double *dx = calloc((size_t)nx, 8);
    trn_gap_bwd_nhwc_d(c.r, dx, c.c, c.n, c.hw, 0.0);
    check_fd(c.x, nx, dx, (double (*)(void *))gaph_loss, &c, "dx");
    free(c.x), free(c.y), free(c.r), free(dx);
}

/* ---- softmax cross-entropy with label smoothing ---- */
typedef struct {
    double *z;
    uint8_t lab[4];
    double smooth;
} ce_ctx;

static double ce_loss(ce_ctx *c)
{
    return trn_softmax_ce_d(c->z, c->lab, NULL, 4, 5, c->smooth, 0, NULL);
}

TEST(softmax_ce_grad)
{
    for (int sm = 0; sm < 2; sm++) {
        ce_ctx c = {.lab = {0, 3, 4, 1}, .smooth = sm ? 0.1 : 0.0};
        c.z = s_rand(20);
        for (int i = 0; i < 20; i++)
            c.z[i] *= 3;
        double *dz = calloc(20, 8);
        int ok;
        trn_softmax_ce_d(c.z, c.lab, dz, 4, 5, c.smooth, 1.0 / 4, &ok);
        check_fd(c.z, 20, dz, (double (*)(void *))ce_loss, &c, "dlogits");
        free(c.z), free(dz);
    }
    /* value: uniform logits give log(k) whatever the smoothing */
    double z[5] = {0};
    uint8_t l = 2;
    CHECK_NEAR(trn_softmax_ce_d(z, &l, NULL, 1, 5, 0.1, 0, NULL), log(5.0), 1e-12);
}

/* The float loss the trainer runs (trn_softmax_ce_f: for up to 16
   classes the AVX-512 rows of softmax_avx512.c where the CPU has them)
   against the double one: loss within 1e-6 relative, gradients within
   1e-6 of gscale, the same right answers (ties included: the first of
   equal largest logits counts), smoothing on and off, 1 to 17 classes
   (17: the template), and a NaN logit giving a NaN loss. */
TEST(float_softmax_matches_double)
{
    enum { N = 37 };
    printf("  AVX-512 rows here for 10 classes: %s\n",
           trn_softmax_ce16_ok(10) ? "yes" : "no");
    trn_rng r;
    trn_rng_seed(&r, 21);
    for (int k = 1; k <= 17; k++)
        for (int sm = 0; sm < 2; sm++) {
            float zf[N * 17], gf[N * 17];
            double zd[N * 17], gd[N * 17];
            uint8_t lab[N];
            for (int i = 0; i < N * k; i++) {
                zf[i] = (float)(4 * trn_rng_normal(&r));
                if (i % 11 == 0 && i > 0)
                    zf[i] = zf[i - 1]; /* ties */
                if (i % 29 == 0)
                    zf[i] = -1e30f; /* a logit whose exp is 0 */
                if (i / k % 5 == 4) /* confident rows: one logit far ahead */
                    zf[i] = i % k == (i / k) % k ? 40.0f : (float)(i % 3);
                zd[i] = zf[i];
            }
            for (int i = 0; i < N; i++)
                lab[i] = (uint8_t)((i * 7) % k);
            double smooth = sm ? 0.1 : 0.0, gscale = 1.0 / N;
            int okf = -1, okd = -2;
            double lf = trn_softmax_ce_f(zf, lab, gf, N, k, smooth, gscale, &okf);
            double ld = trn_softmax_ce_d(zd, lab, gd, N, k, smooth, gscale, &okd);
            CHECK(fabs(lf - ld) <= 1e-6 * fabs(ld) + 1e-7);
            double worst = 0;
            for (int i = 0; i < N * k; i++)
                worst = fmax(worst, fabs(gf[i] - gd[i]));
            CHECK(worst <= 1e-6 * gscale);
            CHECK(okf == okd);
            if (fabs(lf - ld) > 1e-6 * fabs(ld) + 1e-7 || worst > 1e-6 * gscale)
                printf(
                    "  k %d smoothing %g: loss %.9g against %.9g, gradient off by %.3g\n",
                    k, smooth, lf, ld, worst);
        }
    /* one confident row alone: its loss log(1 + 9 e^-gap), kept to 1e-6
       (a log of the float sum near 1 gave 0 from a gap of about 17; the
       double template's log of its sum loses it too, from about 30) */
    for (int gap = 10; gap <= 40; gap += 10) {
        float zc[10] = {(float)gap};
        uint8_t l0 = 0;
        double lf = trn_softmax_ce_f(zc, &l0, NULL, 1, 10, 0.0, 1.0, NULL);
        double exact = log1p(9 * exp(-(double)gap));
        CHECK(fabs(lf - exact) <= 1e-6 * exact);
        if (!(fabs(lf - exact) <= 1e-6 * exact))
            printf("  gap %d: loss %.9g against %.9g\n", gap, lf, exact);
    }
    float z[10] = {1, 2, 3, NAN, 0, 0, 0, 0, 0, 0};
    uint8_t l = 1;
    float g[10];
    CHECK(isnan(trn_softmax_ce_f(z, &l, g, 1, 10, 0.0, 1.0, NULL)));
    for (int j = 0; j < 10; j++) /* every logit NaN: no largest found */
        z[j] = NAN;
    int right = -1;
    CHECK(isnan(trn_softmax_ce_f(z, &l, g, 1, 10, 0.0, 1.0, &right)));
    CHECK(right == 0); /* the first lane taken, as the template's scan: label 1 */
}

/* ---- whole graph in float: wiring, residual accumulation, BN ---- */
static void net_case(const char *model, const char *channels, const char *conv,
                     const char *matmul)
{
    char err[TRN_ERRLEN];
    trn_config cfg;
    trn_config_defaults(&cfg);
    snprintf(cfg.model, sizeof cfg.model, "%s", model);
    snprintf(cfg.hidden, sizeof cfg.hidden, "7,6");
    snprintf(cfg.channels, sizeof cfg.channels, "%s", channels);
    cfg.blocks = 1;
    snprintf(cfg.conv, sizeof cfg.conv, "%s", conv);
    snprintf(cfg.matmul, sizeof cfg.matmul, "%s", matmul);
    trn_net *n = trn_net_new(&cfg, 1, 6, 6, 4, err);
    REQUIRE(n);
    trn_rng r;
    trn_rng_seed(&r, 7);
    trn_net_init(n, &r);
    /* the zero-initialised residual BN gamma would hide its branch */
    for (int i = 0; i < trn_net_nparams(n); i++) {
        trn_param *p = trn_net_param(n, i);
        for (long j = 0; j < p->n; j++)
            p->w[j] += (float)(0.2 * trn_rng_normal(&r));
    }
    trn_net_sync_weights(n);
    int nb = 5;
    float x[5 * 36];
    uint8_t y[5] = {0, 1, 2, 3, 1};
    for (int i = 0; i < 5 * 36; i++)
        x[i] = (float)trn_rng_normal(&r);
    trn_net_zero_grad(n);
    trn_net_forward_backward(n, x, y, nb, 1, 0.0, 1.0 / nb, NULL, NULL);
    /* a random direction over every param */
    int np = trn_net_nparams(n);
    float **dir = calloc((size_t)np, sizeof *dir), **w0 = calloc((size_t)np, sizeof *w0);
    double analytic = 0;
    for (int i = 0; i < np; i++) {
        trn_param *p = trn_net_param(n, i);
        dir[i] = malloc((size_t)p->n * sizeof(float));
        w0[i] = malloc((size_t)p->n * sizeof(float));
        memcpy(w0[i], p->w, (size_t)p->n * sizeof(float));
        for (long j = 0; j < p->n; j++) {
            dir[i][j] = (float)trn_rng_normal(&r);
            analytic += (double)dir[i][j] * p->g[j];
        }
    }
    const double h = 1e-3;
    double lv[2];
    for (int side = 0; side < 2; side++) {
        for (int i = 0; i < np; i++) {
            trn_param *p = trn_net_param(n, i);
            for (long j = 0; j < p->n; j++)
                p->w[j] = (float)(w0[i][j] + (side ? -h : h) * dir[i][j]);
        }
        trn_net_sync_weights(n);
        trn_net_zero_grad(n);
        lv[side] = trn_net_forward_backward(n, x, y, nb, 1, 0.0, 1.0 / nb, NULL, NULL);
    }
    double fd = (lv[0] - lv[1]) / (2 * h);
    CHECK_NEAR(analytic, fd, 2e-2);
    for (int i = 0; i < np; i++)
        free(dir[i]), free(w0[i]);
    free(dir), free(w0);
    trn_net_destroy(&n);
}

TEST(mlp_graph_grad)
{
    net_case("mlp", "2", "gemm", "blas");
}

TEST(cnn_graph_grad)
{
    net_case("cnn", "2,3", "gemm", "auto");
}

/* the MLP's whole-graph check with its linears on oneDNN (--matmul dnnl) */
TEST(mlp_graph_grad_onednn)
{
    if (!trn_dnnl_available())
        SKIP("this build has no oneDNN (libdnnl-dev)");
    net_case("mlp", "2", "gemm", "dnnl");
}

/* the same whole-graph check with oneDNN's convolutions and NHWC layers */
TEST(cnn_graph_grad_onednn)
{
    if (!trn_dnnl_available())
        SKIP("this build has no oneDNN (libdnnl-dev)");
    net_case("cnn", "2,3", "dnnl", "auto");
}

/* --zero-gamma: by default the last BN of each residual branch starts with
   gamma 0 (one per block: 2 stages x 2 blocks here), every other BN with 1;
   --zero-gamma 0 starts them all at 1. Betas start at 0 either way. */
static int zero_gamma_count(int zero_gamma, int *ones)
{
    char err[TRN_ERRLEN];
    trn_config cfg;
    trn_config_defaults(&cfg);
    char *argv[] = {"jizhi-train",
                    "--model",
                    "cnn",
                    "--channels",
                    "2,3",
                    "--blocks",
                    "2",
                    "--conv",
                    "gemm",
                    "--zero-gamma",
                    zero_gamma ? "1" : "0"};
    FILE *devnull = fopen("/dev/null", "w");
    int rc = trn_config_parse_args(&cfg, 11, argv, devnull, err);
    fclose(devnull);
    if (rc != 0 || cfg.zero_gamma != zero_gamma)
        return -1;
    trn_net *n = trn_net_new(&cfg, 1, 6, 6, 4, err);
    if (!n)
        return -1;
    trn_rng r;
    trn_rng_seed(&r, 7);
    trn_net_init(n, &r);
    int zeros = 0;
    *ones = 0;
    for (int i = 0; i < trn_net_nparams(n); i++) {
        trn_param *p = trn_net_param(n, i);
        if (p->kind != TRN_PBN || !strstr(p->name, "gamma"))
            continue;
        int z = 1, o = 1;
        for (long j = 0; j < p->n; j++)
            z &= p->w[j] == 0.0f, o &= p->w[j] == 1.0f;
        zeros += z;
        *ones += o;
    }
    trn_net_destroy(&n);
    return zeros;
}

TEST(cnn_zero_gamma)
{
    int ones = 0;
    /* stem, transition, and per block (4) two BNs: 1 + 1 + 8 = 10 BNs */
    CHECK(zero_gamma_count(1, &ones) == 4);
    CHECK(ones == 6);
    CHECK(zero_gamma_count(0, &ones) == 0);
    CHECK(ones == 10);
}

int main(void)
{
    trn_rng_seed(&g_rng, 42);
    RUN(linear_grad);
    RUN(relu_grad);
    RUN(conv3x3_grad);
    RUN(conv3x3_stride2_grad);
    RUN(conv1x1_grad);
    RUN(conv_tiles_match_the_direct_convolution);
    RUN(batchnorm_grad);
    RUN(gap_grad);
    RUN(softmax_ce_grad);
    RUN(float_softmax_matches_double);
    RUN(mlp_graph_grad);
    RUN(mlp_graph_grad_onednn);
    RUN(batchnorm_nhwc_grad);
    RUN(gap_nhwc_grad);
    RUN(cnn_graph_grad);
    RUN(cnn_graph_grad_onednn);
    RUN(cnn_zero_gamma);
    TEST_DONE();
}
