/*  test_trn_conv_dnnl.c - oneDNN's convolutions (trainer/conv_dnnl.c)
    against a direct convolution in double: forward, backward data and
    backward weights, fp32 (tolerance 1e-5 of the largest value) and bf16
    (activations and their gradients stored as bf16, in and out: products
    exact, fp32 sums, each output rounded to bf16 once, or twice where dX
    accumulates: 6e-3 of the largest value, about three bf16 half-steps;
    dW in fp32: 1e-4), stride 1 and 2, accumulation into dW (beta) and dX
    (dxbeta), batch sizes that come and go (the primitive cache), the
    backward weights' thread count by batch (and exact on two threads); the whole
    CNN on the oneDNN path against the im2col + GEMM path (loss and every
    gradient), in bf16 also against the fp32 GEMM path; and a short bf16
    training run whose loss falls. Skipped where the build has no oneDNN. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jz_test.h"
#include "trainer/conv_dnnl.h"
#include "trainer/trn.h"

static trn_rng g_rng;

static float *s_rand(long n, int bf16)
{
    float *v = malloc((size_t)n * sizeof(float));
    for (long i = 0; i < n; i++) {
        v[i] = (float)(2 * trn_rng_uniform(&g_rng) - 1);
        if (bf16)
            v[i] = trn_round_bf16(v[i]);
    }
    return v;
}

static double s_maxabs(const double *v, long n)
{
    double m = 0;
    for (long i = 0; i < n; i++)
        m = fmax(m, fabs(v[i]));
    return m;
}

/* One layer against the direct convolution in double (NHWC activations,
   OIHW weights); returns 0 or -1 after reporting. */
static void conv_case(int n, int c, int h, int wd, int co, int s, int bf16)
{
    int k = 3, p = 1;
    int ho = trn_conv_out(h, k, s, p), wo = trn_conv_out(wd, k, s, p);
    long nx = (long)n * h * wd * c, nw = (long)co * c * k * k,
         ny = (long)n * ho * wo * co;
    float *x = s_rand(nx, bf16), *w = s_rand(nw, bf16), *dy = s_rand(ny, bf16);
    float *y = malloc((size_t)ny * 4), *dx = s_rand(nx, bf16), *dw = s_rand(nw, 0);
    double *ry = calloc((size_t)ny, 8), *rdx = malloc((size_t)nx * 8),
           *rdw = malloc((size_t)nw * 8);
    for (long i = 0; i < nx; i++)
        rdx[i] = dx[i]; /* dxbeta 1 */
    for (long i = 0; i < nw; i++)
        rdw[i] = 0.5 * dw[i]; /* beta 0.5 */
    for (int ni = 0; ni < n; ni++)
        for (int oh = 0; oh < ho; oh++)
            for (int ow = 0; ow < wo; ow++)
                for (int o = 0; o < co; o++) {
                    long yi = (((long)ni * ho + oh) * wo + ow) * co + o;
                    double acc = 0, g = dy[yi];
                    for (int ki = 0; ki < k; ki++)
                        for (int kj = 0; kj < k; kj++) {
                            int ih = oh * s - p + ki, iw = ow * s - p + kj;
                            if (ih < 0 || ih >= h || iw < 0 || iw >= wd)
                                continue;
                            for (int ci = 0; ci < c; ci++) {
                                long xi = (((long)ni * h + ih) * wd + iw) * c + ci;
                                long wi = (((long)o * c + ci) * k + ki) * k + kj;
                                acc += (double)w[wi] * x[xi];
                                rdw[wi] += g * x[xi];
                                rdx[xi] += g * w[wi];
                            }
                        }
                    ry[yi] = acc;
                }
    char err[TRN_ERRLEN];
    trn_dconv *d = trn_dconv_new(c, h, wd, co, k, s, p, err);
    REQUIRE(d);
    /* another batch size first, so the entry for n is not the only one */
    float *x2 = s_rand((long)(n + 1) * h * wd * c, bf16),
          *y2 = malloc((size_t)(n + 1) * ho * wo * co * 4);
    /* bf16: the activations and gradients travel as bf16 (uint16_t) */
    uint16_t *hx = malloc((size_t)nx * 2), *hdy = malloc((size_t)ny * 2),
             *hy = malloc((size_t)ny * 2), *hdx = malloc((size_t)nx * 2),
             *hx2 = malloc((size_t)(n + 1) * h * wd * c * 2),
             *hy2 = malloc((size_t)(n + 1) * ho * wo * co * 2);
    trn_bf16_from_f32(hx, x, nx);
    trn_bf16_from_f32(hdy, dy, ny);
    trn_bf16_from_f32(hdx, dx, nx);
    trn_bf16_from_f32(hx2, x2, (long)(n + 1) * h * wd * c);
    REQUIRE(trn_dconv_fwd(d, bf16 ? (void *)hx2 : x2, w, bf16 ? (void *)hy2 : y2, n + 1,
                          bf16, err) == 0);
    REQUIRE(trn_dconv_fwd(d, bf16 ? (void *)hx : x, w, bf16 ? (void *)hy : y, n, bf16,
                          err) == 0);
    REQUIRE(trn_dconv_bwd(d, bf16 ? (void *)hx : x, w, bf16 ? (void *)hdy : dy,
                          bf16 ? (void *)hdx : dx, dw, n, bf16, 0.5f, 1.0f, err) == 0);
    if (bf16) {
        trn_bf16_to_f32(y, hy, ny);
        trn_bf16_to_f32(dx, hdx, nx);
    }
    double tol = bf16 ? 6e-3 : 1e-5, e = 0;
    double sy = s_maxabs(ry, ny), sx = s_maxabs(rdx, nx), sw = s_maxabs(rdw, nw);
    for (long i = 0; i < ny; i++)
        e = fmax(e, fabs(y[i] - ry[i]) / sy);
    printf("  n %d c %d->%d %dx%d stride %d %s: fwd %.2g", n, c, co, h, wd, s,
           bf16 ? "bf16" : "fp32", e);
    CHECK(e < tol);
    e = 0;
    for (long i = 0; i < nx; i++)
        e = fmax(e, fabs(dx[i] - rdx[i]) / sx);
    printf(", dx %.2g", e);
    CHECK(e < tol);
    e = 0;
    for (long i = 0; i < nw; i++)
        e = fmax(e, fabs(dw[i] - rdw[i]) / sw);
    printf(", dw %.2g\n", e);
    CHECK(e < (bf16 ? 1e-4 : tol)); /* fp32 weight gradients, fp32 sums */
    /* beta 0 / dxbeta 0 overwrite, and without dx */
    REQUIRE(trn_dconv_bwd(d, bf16 ? (void *)hx : x, w, bf16 ? (void *)hdy : dy, NULL, dw,
                          n, bf16, 0.0f, 0.0f, err) == 0);
    char line[256];
    REQUIRE(trn_dconv_describe(d, n, bf16, line, sizeof line, err) == 0);
    printf("  kernels: %s\n", line);
    CHECK(strstr(line, "ref") == NULL); /* never oneDNN's reference loops */
    trn_dconv_destroy(&d);
    CHECK(d == NULL);
    free(x), free(w), free(dy), free(y), free(dx), free(dw), free(ry), free(rdx),
        free(rdw), free(x2), free(y2);
    free(hx), free(hdy), free(hy), free(hdx), free(hx2), free(hy2);
}

TEST(conv_matches_the_direct_convolution_fp32)
{
    if (!trn_dnnl_available())
        SKIP("this build has no oneDNN (libdnnl-dev)");
    conv_case(3, 1, 12, 12, 8, 1, 0); /* the stem: one input channel */
    conv_case(4, 8, 10, 9, 16, 2, 0); /* a stride-2 transition */
    conv_case(2, 16, 7, 7, 16, 1, 0); /* a residual block */
}

TEST(conv_matches_the_direct_convolution_bf16)
{
    if (!trn_dnnl_available())
        SKIP("this build has no oneDNN (libdnnl-dev)");
    if (!trn_dnnl_bf16_native())
        SKIP("no bf16 instructions for oneDNN on this CPU (ISA %s)", trn_dnnl_isa_name());
    conv_case(3, 1, 12, 12, 8, 1, 1);
    conv_case(4, 8, 10, 9, 16, 2, 1);
    conv_case(2, 16, 7, 7, 16, 1, 1);
}

/* The backward weights run on one thread per 256 images (fewer threads
   than configured below that: on two threads at batch 32 and 128 they were
   slower than on one), the forward and backward data on every configured
   thread; and the convolution stays exact either way: at two threads,
   batch 32 (weights' gradient on one thread, the rest on two) and 520
   (every primitive on two). */
TEST(bwd_weights_threads_follow_the_batch)
{
    if (!trn_dnnl_available())
        SKIP("this build has no oneDNN (libdnnl-dev)");
    char err[TRN_ERRLEN] = "";
    trn_dnnl_set_threads(2);
    trn_dconv *d = trn_dconv_new(8, 6, 6, 8, 3, 1, 1, err);
    REQUIRE(d != NULL);
    CHECK(trn_dconv_threads(d, 32, 0, 2, err) == 1);
    CHECK(trn_dconv_threads(d, 32, 0, 0, err) == 2);
    CHECK(trn_dconv_threads(d, 32, 0, 1, err) == 2);
    CHECK(trn_dconv_threads(d, 256, 0, 2, err) == 1);
    CHECK(trn_dconv_threads(d, 512, 0, 2, err) == 2);
    CHECK(trn_dconv_threads(d, 1024, 0, 2, err) == 2);
    CHECK(trn_dconv_threads(d, 32, 0, 3, err) == -1);
    CHECK(strstr(err, "no primitive 3") != NULL);
    trn_dconv_destroy(&d);
    trn_dnnl_set_threads(4);
    d = trn_dconv_new(8, 6, 6, 8, 3, 1, 1, err);
    REQUIRE(d != NULL);
    CHECK(trn_dconv_threads(d, 512, 0, 2, err) == 2); /* 256 images a thread */
    CHECK(trn_dconv_threads(d, 512, 0, 0, err) == 4);
    /* a live --threads change: the cached batch follows the new count */
    trn_dnnl_set_threads(1);
    CHECK(trn_dconv_threads(d, 512, 0, 0, err) == 1);
    CHECK(trn_dconv_threads(d, 512, 0, 2, err) == 1);
    trn_dnnl_set_threads(4);
    CHECK(trn_dconv_threads(d, 512, 0, 0, err) == 4);
    trn_dconv_destroy(&d);
    trn_dnnl_set_threads(2);
    conv_case(32, 8, 6, 6, 8, 1, 0);
    conv_case(520, 8, 4, 4, 8, 1, 0);
    if (trn_dnnl_bf16_native()) /* bf16 kernels only with bf16 instructions */
        conv_case(32, 8, 6, 6, 8, 1, 1);
    trn_dnnl_set_threads(1);
}

/* The whole CNN on both paths: the same loss and gradients (fp32 within
   1e-4 of each param's largest gradient; bf16, where a different summation
   order may move a rounded value by one bf16 step, within 3e-2). With
   ref_prec, the GEMM path runs in that precision instead (bf16 on oneDNN
   against the fp32 reference). path1: the path compared with GEMM (dnnl,
   or gemm for the emulation's own distance). *worst_out: the worst gap. */
static void net_case(const char *prec, const char *ref_prec, const char *path1,
                     double tol, double *worst_out)
{
    char err[TRN_ERRLEN];
    trn_config cfg;
    trn_config_defaults(&cfg);
    strcpy(cfg.model, "cnn");
    strcpy(cfg.channels, "8,16");
    trn_net *net[2];
    const char *paths[2] = {"gemm", path1};
    int nb = 12;
    float *x = s_rand((long)nb * 28 * 28, 0);
    uint8_t y[12];
    for (int i = 0; i < nb; i++)
        y[i] = (uint8_t)(i % 10);
    double loss[2];
    for (int k = 0; k < 2; k++) {
        snprintf(cfg.conv, sizeof cfg.conv, "%s", paths[k]);
        net[k] = trn_net_new(&cfg, 1, 28, 28, 10, err);
        REQUIRE(net[k]);
        trn_rng r;
        trn_rng_seed(&r, 5);
        trn_net_init(net[k], &r);
        /* the zero-initialised residual BN gamma would hide its branch */
        for (int i = 0; i < trn_net_nparams(net[k]); i++) {
            trn_param *p = trn_net_param(net[k], i);
            for (long j = 0; j < p->n; j++)
                p->w[j] += (float)(0.1 * trn_rng_normal(&r));
        }
        trn_net_set_precision(
            net[k], trn_precision_from_name(k == 0 && ref_prec ? ref_prec : prec));
        trn_net_zero_grad(net[k]);
        loss[k] =
            trn_net_forward_backward(net[k], x, y, nb, 1, 0.0, 1.0 / nb, NULL, NULL);
        REQUIRE(loss[k] > 0);
    }
    char line[512];
    REQUIRE(trn_net_conv_describe(net[1], nb, line, sizeof line) == 0);
    CHECK(strstr(line, strcmp(path1, "dnnl") ? "GEMM" : "oneDNN") != NULL);
    REQUIRE(trn_net_conv_describe(net[0], nb, line, sizeof line) == 0);
    CHECK(strstr(line, "GEMM") != NULL);
    /* each param's largest gap over its largest gradient; against another
       precision, its gradient's relative distance |a - b| / |a| (2-norms) */
    double worst = 0;
    for (int i = 0; i < trn_net_nparams(net[0]); i++) {
        trn_param *a = trn_net_param(net[0], i), *b = trn_net_param(net[1], i);
        double m = 0, e = 0, na = 0, nd = 0;
        for (long j = 0; j < a->n; j++) {
            m = fmax(m, fabs(a->g[j]));
            e = fmax(e, fabs(a->g[j] - b->g[j]));
            na += (double)a->g[j] * a->g[j];
            nd += ((double)a->g[j] - b->g[j]) * ((double)a->g[j] - b->g[j]);
        }
        double gap = ref_prec ? sqrt(nd / na) : m > 0 ? e / m : e;
        worst = fmax(worst, gap);
    }
    printf("  %s: loss %.8f (gemm %s) %.8f (%s), worst gradient gap %.2g\n", prec,
           loss[0], ref_prec ? ref_prec : prec, loss[1], path1, worst);
    CHECK(fabs(loss[0] - loss[1]) < tol * loss[0]);
    CHECK(worst < tol);
    trn_net_destroy(&net[0]);
    trn_net_destroy(&net[1]);
    free(x);
    *worst_out = worst;
}

TEST(cnn_paths_agree)
{
    if (!trn_dnnl_available())
        SKIP("this build has no oneDNN (libdnnl-dev)");
    double worst;
    net_case("fp32", NULL, "dnnl", 1e-4, &worst);
    if (trn_dnnl_bf16_native()) /* bf16 kernels only with bf16 instructions */
        net_case("bf16", NULL, "dnnl", 3e-2, &worst);
}

/* The bf16 step (activations stored in bf16) against the fp32 reference:
   loss within 1e-2 relative; every param's gradient within 0.25 of the
   reference's norm (bf16 rounding, 2^-9 relative, at each of a dozen layers
   on the way back, amplified by BN's backward where its terms cancel: the
   emulated bf16 of the GEMM path, rounded at the same places, is 0.16 away
   on this case), and no further than the emulation's distance + 0.01. */
TEST(bf16_step_matches_the_fp32_reference)
{
    if (!trn_dnnl_available())
        SKIP("this build has no oneDNN (libdnnl-dev)");
    if (!trn_dnnl_bf16_native())
        SKIP("no bf16 instructions for oneDNN on this CPU (ISA %s)", trn_dnnl_isa_name());
    trn_rng keep = g_rng; /* the same input for both */
    double real = 1, emul = 0;
    net_case("bf16", "fp32", "dnnl", 0.25, &real);
    g_rng = keep;
    net_case("bf16", "fp32", "gemm", 0.25, &emul);
    CHECK(real < emul + 0.01);
}

/* 40 SGD steps in bf16 on one batch of 32 synthetic images (the class is
   a texture: horizontal or vertical stripes, a checkerboard or none, under
   noise): the loss falls below a third of where it started, as in fp32. */
static void s_train(const char *prec, double *first, double *last)
{
    char err[TRN_ERRLEN];
    trn_config cfg;
    trn_config_defaults(&cfg);
    strcpy(cfg.model, "cnn");
    strcpy(cfg.channels, "8,16");
    strcpy(cfg.conv, "dnnl");
    trn_net *n = trn_net_new(&cfg, 1, 28, 28, 10, err);
    REQUIRE(n);
    trn_rng r;
    trn_rng_seed(&r, 3);
    trn_net_init(n, &r);
    trn_net_set_precision(n, trn_precision_from_name(prec));
    int nb = 32;
    float *x = malloc((size_t)nb * 784 * sizeof(float));
    uint8_t y[32];
    for (int i = 0; i < nb; i++) {
        y[i] = (uint8_t)(i % 4);
        for (int p = 0; p < 784; p++) {
            int pr = p / 28 / 2 % 2, pc = p % 28 / 2 % 2;
            int on = y[i] == 0 ? pr : y[i] == 1 ? pc : y[i] == 2 ? pr ^ pc : 0;
            x[(long)i * 784 + p] = (float)(on + 0.5 * trn_rng_normal(&r));
        }
    }
    double loss = 0;
    for (int step = 0; step < 40; step++) {
        trn_net_zero_grad(n);
        loss = trn_net_forward_backward(n, x, y, nb, 1, 0.0, 1.0 / nb, NULL, NULL);
        REQUIRE(loss > 0);
        if (step == 0)
            *first = loss;
        for (int i = 0; i < trn_net_nparams(n); i++) {
            trn_param *p = trn_net_param(n, i);
            for (long j = 0; j < p->n; j++)
                p->w[j] -= 0.1f * p->g[j];
        }
        trn_net_sync_weights(n);
    }
    trn_net_destroy(&n);
    free(x);
    *last = loss;
}

TEST(bf16_training_learns)
{
    if (!trn_dnnl_available())
        SKIP("this build has no oneDNN (libdnnl-dev)");
    if (!trn_dnnl_bf16_native())
        SKIP("no bf16 instructions for oneDNN on this CPU (ISA %s)", trn_dnnl_isa_name());
    const char *precs[] = {"fp32", "bf16"};
    for (int k = 0; k < 2; k++) {
        double first = 0, last = 1e9;
        s_train(precs[k], &first, &last);
        printf("  %s: loss %.4f -> %.4f after 40 steps\n", precs[k], first, last);
        CHECK(last < first / 3);
    }
}

TEST(no_onednn_is_refused_clearly)
{
    char err[TRN_ERRLEN];
    trn_config cfg;
    trn_config_defaults(&cfg);
    strcpy(cfg.model, "cnn");
    strcpy(cfg.conv, "dnnl");
    trn_net *n = trn_net_new(&cfg, 3, 28, 28, 10, err); /* three channels */
    CHECK(n == NULL);
    printf("  %s\n", err);
    CHECK(strstr(err, "--conv dnnl") != NULL);
    /* auto falls back to the GEMM path where oneDNN cannot run */
    strcpy(cfg.conv, "auto");
    n = trn_net_new(&cfg, 3, 28, 28, 10, err);
    CHECK(n != NULL);
    char line[256];
    trn_net_conv_describe(n, 4, line, sizeof line);
    CHECK(strstr(line, "GEMM") != NULL);
    trn_net_destroy(&n);
}

int main(void)
{
    trn_rng_seed(&g_rng, 11);
    /* one thread: nothing waits spinning for a busy second core */
    trn_dnnl_set_threads(1);
    RUN(conv_matches_the_direct_convolution_fp32);
    RUN(conv_matches_the_direct_convolution_bf16);
    RUN(bwd_weights_threads_follow_the_batch);
    RUN(cnn_paths_agree);
    RUN(bf16_step_matches_the_fp32_reference);
    RUN(bf16_training_learns);
    RUN(no_onednn_is_refused_clearly);
    TEST_DONE();
}
