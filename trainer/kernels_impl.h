/*  kernels_impl.h - layer kernels, written once for a real type R.

    Included by kernels_f32.c (R = float, suffix _f: what the trainer runs)
    and kernels_f64.c (R = double, suffix _d: what the gradient tests check
    against finite differences), so the tested code is the trained code.
    Before including, define R, SFX (name suffix), GEMM (cblas_sgemm or
    cblas_dgemm).

    Layouts: dense layers use rows [N, features]; convolutional layers use
    [C, N, H, W] ("CNHW"), so a convolution is a GEMM over the columns of
    a tile of images (s_tile_images) and each BN channel is one contiguous
    row. A single-channel image batch
    [N, H*W] is the same memory in both layouts. Backward kernels write
    dW = beta*dW + grad (beta = 1 accumulates micro-batches) and
    dX = dxbeta*dX + grad (dxbeta = 1 accumulates a residual branch).
*/
#include <math.h>
#include <string.h>

#define TRN_CAT_(a, b) a##_##b
#define TRN_CAT(a, b) TRN_CAT_(a, b)
#define FN(name) TRN_CAT(name, SFX)

void FN(trn_linear_fwd)(const R *x, const R *w, const R *b, R *y, int n, int k, int m)
{
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1, x, k, w, k, 0, y, m);
    if (b)
        for (int i = 0; i < n; i++) {
            R *yi = y + (size_t)i * m;
            for (int j = 0; j < m; j++)
                yi[j] += b[j];
        }
}

void FN(trn_linear_bwd)(const R *x, const R *w, const R *dy, R *dx, R *dw, R *db, int n,
                        int k, int m, R beta)
{
    if (dx)
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, k, m, 1, dy, m, w, k, 0, dx,
             k);
    GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, m, k, n, 1, dy, m, x, k, beta, dw, k);
    if (db) {
        if (beta == 0)
            memset(db, 0, (size_t)m * sizeof(R));
        for (int i = 0; i < n; i++) {
            const R *di = dy + (size_t)i * m;
            for (int j = 0; j < m; j++)
                db[j] += di[j];
        }
    }
}

void FN(trn_relu_fwd)(const R *x, R *y, long n)
{
    for (long i = 0; i < n; i++) {
        R v = x[i];
        y[i] = v > 0 ? v : 0;
    }
}

/* Branch-free (the mask is data-dependent), so it vectorises; dx must not
   alias y or dy. */
void FN(trn_relu_bwd)(const R *y, const R *dy, R *dx, long n, R beta)
{
    const R *restrict yy = y, *restrict d = dy;
    R *restrict out = dx;
    if (beta == 0)
        for (long i = 0; i < n; i++) {
            R g = d[i];
            out[i] = yy[i] > 0 ? g : (R)0;
        }
    else
        for (long i = 0; i < n; i++) {
            R g = d[i], o = out[i];
            out[i] = yy[i] > 0 ? o + g : o;
        }
}

/* Output columns ow whose input column ow*s - pad + kj lies inside [0, wd). */
static void FN(s_valid_range)(int kj, int s, int pad, int wd, int wo, int *lo, int *hi)
{
    int off = kj - pad; /* iw = ow*s + off */
    int l = off >= 0 ? 0 : (-off + s - 1) / s;
    int h = wd - off <= 0 ? 0 : (wd - off + s - 1) / s;
    *lo = l < wo ? l : wo;
    *hi = h < wo ? h : wo;
    if (*hi < *lo)
        *hi = *lo;
}

/* Images [n0, n0 + nc) of the CNHW batch x (n images) as columns:
   cols[(c*k+ki)*k+kj][(i*ho+oh)*wo+ow] = x[c][n0+i][oh*s-pad+ki][ow*s-pad+kj]
   (0 outside), rows of nc*ho*wo. */
static void FN(s_im2col)(const R *x, R *cols, int c, int n, int n0, int nc, int h, int wd,
                         int k, int s, int pad, int ho, int wo)
{
    long p = (long)nc * ho * wo;
    for (int ci = 0; ci < c; ci++)
        for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++) {
                R *row = cols + ((long)(ci * k + ki) * k + kj) * p;
                int lo, hi, off = kj - pad;
                FN(s_valid_range)(kj, s, pad, wd, wo, &lo, &hi);
                for (int ni = 0; ni < nc; ni++) {
                    const R *img = x + ((long)ci * n + n0 + ni) * h * wd;
                    for (int oh = 0; oh < ho; oh++) {
                        int ih = oh * s - pad + ki;
                        R *out = row + ((long)ni * ho + oh) * wo;
                        if (ih < 0 || ih >= h) {
                            memset(out, 0, (size_t)wo * sizeof(R));
                            continue;
                        }
                        const R *in = img + (long)ih * wd + off;
                        for (int ow = 0; ow < lo; ow++)
                            out[ow] = 0;
                        if (s == 1)
                            memcpy(out + lo, in + lo, (size_t)(hi - lo) * sizeof(R));
                        else
                            for (int ow = lo; ow < hi; ow++)
                                out[ow] = in[ow * s];
                        for (int ow = hi; ow < wo; ow++)
                            out[ow] = 0;
                    }
                }
            }
}

/* The adjoint of s_im2col: adds the columns of images [n0, n0 + nc) into x. */
static void FN(s_col2im)(const R *cols, R *x, int c, int n, int n0, int nc, int h, int wd,
                         int k, int s, int pad, int ho, int wo)
{
    long p = (long)nc * ho * wo;
    for (int ci = 0; ci < c; ci++)
        for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++) {
                const R *row = cols + ((long)(ci * k + ki) * k + kj) * p;
                int lo, hi, off = kj - pad;
                FN(s_valid_range)(kj, s, pad, wd, wo, &lo, &hi);
                for (int ni = 0; ni < nc; ni++) {
                    R *img = x + ((long)ci * n + n0 + ni) * h * wd;
                    for (int oh = 0; oh < ho; oh++) {
                        int ih = oh * s - pad + ki;
                        if (ih < 0 || ih >= h)
                            continue;
                        const R *in = row + ((long)ni * ho + oh) * wo;
                        R *out = img + (long)ih * wd + off;
                        for (int ow = lo; ow < hi; ow++)
                            out[ow * s] += in[ow];
                    }
                }
            }
}

static int FN(s_is_identity)(int k, int s, int pad)
{
    return k == 1 && s == 1 && pad == 0;
}

/* Images per im2col tile: their columns fit TRN_CONV_TILE bytes (at least
   one image), so a tile is built and multiplied while in cache; the whole
   batch's columns (ckk*n*ho*wo values, 231 MB for 72 rows at 1024 28x28
   images) are not. */
static int FN(s_tile_images)(int n, int ckk, int ho, int wo)
{
    long per = (long)ckk * ho * wo * (long)sizeof(R);
    long nc = per > 0 ? TRN_CONV_TILE / per : n;
    return nc < 1 ? 1 : nc > n ? n : (int)nc;
}

void FN(trn_conv_fwd)(const R *x, const R *w, R *y, R *cols, int c, int n, int h, int wd,
                      int co, int k, int stride, int pad)
{
    int ho = trn_conv_out(h, k, stride, pad), wo = trn_conv_out(wd, k, stride, pad);
    long p = (long)n * ho * wo, hw = (long)ho * wo;
    int ckk = c * k * k;
    if (FN(s_is_identity)(k, stride, pad)) {
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, co, (int)p, ckk, 1, w, ckk, x,
             (int)p, 0, y, (int)p);
        return;
    }
    int tile = FN(s_tile_images)(n, ckk, ho, wo);
    for (int n0 = 0; n0 < n; n0 += tile) {
        int nc = n - n0 < tile ? n - n0 : tile;
        FN(s_im2col)(x, cols, c, n, n0, nc, h, wd, k, stride, pad, ho, wo);
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, co, (int)(nc * hw), ckk, 1, w,
             ckk, cols, (int)(nc * hw), 0, y + n0 * hw, (int)p);
    }
}

void FN(trn_conv_bwd)(const R *x, const R *w, const R *dy, R *dx, R *dw, R *cols, int c,
                      int n, int h, int wd, int co, int k, int stride, int pad, R beta,
                      R dxbeta)
{
    int ho = trn_conv_out(h, k, stride, pad), wo = trn_conv_out(wd, k, stride, pad);
    long p = (long)n * ho * wo, hw = (long)ho * wo;
    int ckk = c * k * k;
    if (FN(s_is_identity)(k, stride, pad)) {
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, co, ckk, (int)p, 1, dy, (int)p, x,
             (int)p, beta, dw, ckk);
        if (dx)
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, (int)p, co, 1, w, ckk, dy,
                 (int)p, dxbeta, dx, (int)p);
        return;
    }
    if (dx && dxbeta == 0)
        memset(dx, 0, (size_t)c * n * h * wd * sizeof(R));
    int tile = FN(s_tile_images)(n, ckk, ho, wo);
    for (int n0 = 0; n0 < n; n0 += tile) {
        int nc = n - n0 < tile ? n - n0 : tile, q = (int)(nc * hw);
        FN(s_im2col)(x, cols, c, n, n0, nc, h, wd, k, stride, pad, ho, wo);
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, co, ckk, q, 1, dy + n0 * hw, (int)p,
             cols, q, n0 ? 1 : beta, dw, ckk);
        if (!dx)
            continue;
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, q, co, 1, w, ckk, dy + n0 * hw,
             (int)p, 0, cols, q);
        FN(s_col2im)(cols, dx, c, n, n0, nc, h, wd, k, stride, pad, ho, wo);
    }
}

void FN(trn_bn_fwd_train)(const R *x, const R *g, const R *b, R *y, R *mean, R *invstd,
                          int c, long s, R eps)
{
    for (int ci = 0; ci < c; ci++) {
        const R *xc = x + (long)ci * s;
        R *yc = y + (long)ci * s;
        double sum = 0, sq = 0;
        for (long i = 0; i < s; i++)
            sum += xc[i];
        double mu = sum / (double)s;
        for (long i = 0; i < s; i++) {
            double d = xc[i] - mu;
            sq += d * d;
        }
        double var = sq / (double)s;
        double is = 1.0 / sqrt(var + eps);
        mean[ci] = (R)mu;
        invstd[ci] = (R)is;
        R a = (R)(g[ci] * is), off = (R)(b[ci] - g[ci] * is * mu);
        for (long i = 0; i < s; i++)
            yc[i] = a * xc[i] + off;
    }
}

void FN(trn_bn_fwd_eval)(const R *x, const R *g, const R *b, R *y, const R *rmean,
                         const R *rvar, int c, long s, R eps)
{
    for (int ci = 0; ci < c; ci++) {
        double is = 1.0 / sqrt((double)rvar[ci] + eps);
        R a = (R)(g[ci] * is), off = (R)(b[ci] - g[ci] * is * rmean[ci]);
        const R *xc = x + (long)ci * s;
        R *yc = y + (long)ci * s;
        for (long i = 0; i < s; i++)
            yc[i] = a * xc[i] + off;
    }
}

void FN(trn_bn_bwd)(const R *x, const R *g, const R *mean, const R *invstd, const R *dy,
                    R *dx, R *dg, R *db, int c, long s, R beta, R dxbeta)
{
    for (int ci = 0; ci < c; ci++) {
        const R *xc = x + (long)ci * s, *dyc = dy + (long)ci * s;
        R *dxc = dx + (long)ci * s;
        double mu = mean[ci], is = invstd[ci];
        double sdy = 0, sdyx = 0;
        for (long i = 0; i < s; i++) {
            sdy += dyc[i];
            sdyx += dyc[i] * ((xc[i] - mu) * is);
        }
        dg[ci] =
            (R)(beta == 0 ? sdyx : beta * dg[ci] + sdyx); /* no 0*NaN from stale values */
        db[ci] = (R)(beta == 0 ? sdy : beta * db[ci] + sdy);
        if (!dx)
            continue;
        double k = g[ci] * is / (double)s;
        double m1 = sdy, m2 = sdyx;
        for (long i = 0; i < s; i++) {
            double xh = (xc[i] - mu) * is;
            R v = (R)(k * ((double)s * dyc[i] - m1 - xh * m2));
            dxc[i] = dxbeta == 0 ? v : dxc[i] + v;
        }
    }
}

void FN(trn_gap_fwd)(const R *x, R *y, int c, int n, int hw)
{
    for (int ci = 0; ci < c; ci++)
        for (int ni = 0; ni < n; ni++) {
            const R *p = x + ((long)ci * n + ni) * hw;
            double s = 0;
            for (int j = 0; j < hw; j++)
                s += p[j];
            y[(long)ni * c + ci] = (R)(s / hw);
        }
}

void FN(trn_gap_bwd)(const R *dy, R *dx, int c, int n, int hw, R dxbeta)
{
    for (int ci = 0; ci < c; ci++)
        for (int ni = 0; ni < n; ni++) {
            R v = dy[(long)ni * c + ci] / (R)hw;
            R *p = dx + ((long)ci * n + ni) * hw;
            if (dxbeta == 0)
                for (int j = 0; j < hw; j++)
                    p[j] = v;
            else
                for (int j = 0; j < hw; j++)
                    p[j] += v;
        }
}

/* ---- channels last (NHWC), the oneDNN path's layout (conv_dnnl.h) -------
   x[i][ci]: i over the s = n*h*w positions, c values at each. The same
   arithmetic as the CNHW kernels above (double accumulators), a block of
   up to NHWC_CB channels at a time so the accumulators stay on the stack. */
#ifndef NHWC_CB
#define NHWC_CB 64
#endif

void FN(trn_bn_fwd_train_nhwc)(const R *x, const R *g, const R *b, R *y, R *mean,
                               R *invstd, int c, long s, R eps)
{
    for (int c0 = 0; c0 < c; c0 += NHWC_CB) {
        int cb = c - c0 < NHWC_CB ? c - c0 : NHWC_CB;
        double mu[NHWC_CB], sq[NHWC_CB];
        R a[NHWC_CB], off[NHWC_CB];
        for (int j = 0; j < cb; j++)
            mu[j] = sq[j] = 0;
        for (long i = 0; i < s; i++) {
            const R *xi = x + i * c + c0;
            for (int j = 0; j < cb; j++)
                mu[j] += xi[j];
        }
        for (int j = 0; j < cb; j++)
            mu[j] /= (double)s;
        for (long i = 0; i < s; i++) {
            const R *xi = x + i * c + c0;
            for (int j = 0; j < cb; j++) {
                double d = xi[j] - mu[j];
                sq[j] += d * d;
            }
        }
        for (int j = 0; j < cb; j++) {
            int ci = c0 + j;
            double is = 1.0 / sqrt(sq[j] / (double)s + eps);
            mean[ci] = (R)mu[j];
            invstd[ci] = (R)is;
            a[j] = (R)(g[ci] * is);
            off[j] = (R)(b[ci] - g[ci] * is * mu[j]);
        }
        for (long i = 0; i < s; i++) {
            const R *xi = x + i * c + c0;
            R *yi = y + i * c + c0;
            for (int j = 0; j < cb; j++)
                yi[j] = a[j] * xi[j] + off[j];
        }
    }
}

void FN(trn_bn_fwd_eval_nhwc)(const R *x, const R *g, const R *b, R *y, const R *rmean,
                              const R *rvar, int c, long s, R eps)
{
    for (int c0 = 0; c0 < c; c0 += NHWC_CB) {
        int cb = c - c0 < NHWC_CB ? c - c0 : NHWC_CB;
        R a[NHWC_CB], off[NHWC_CB];
        for (int j = 0; j < cb; j++) {
            int ci = c0 + j;
            double is = 1.0 / sqrt((double)rvar[ci] + eps);
            a[j] = (R)(g[ci] * is);
            off[j] = (R)(b[ci] - g[ci] * is * rmean[ci]);
        }
        for (long i = 0; i < s; i++) {
            const R *xi = x + i * c + c0;
            R *yi = y + i * c + c0;
            for (int j = 0; j < cb; j++)
                yi[j] = a[j] * xi[j] + off[j];
        }
    }
}

void FN(trn_bn_bwd_nhwc)(const R *x, const R *g, const R *mean, const R *invstd,
                         const R *dy, R *dx, R *dg, R *db, int c, long s, R beta,
                         R dxbeta)
{
    for (int c0 = 0; c0 < c; c0 += NHWC_CB) {
        int cb = c - c0 < NHWC_CB ? c - c0 : NHWC_CB;
        double sdy[NHWC_CB], sdyx[NHWC_CB], mu[NHWC_CB], is[NHWC_CB], k[NHWC_CB];
        for (int j = 0; j < cb; j++) {
            sdy[j] = sdyx[j] = 0;
            mu[j] = mean[c0 + j];
            is[j] = invstd[c0 + j];
        }
        for (long i = 0; i < s; i++) {
            const R *xi = x + i * c + c0, *di = dy + i * c + c0;
            for (int j = 0; j < cb; j++) {
                sdy[j] += di[j];
                sdyx[j] += di[j] * ((xi[j] - mu[j]) * is[j]);
            }
        }
        for (int j = 0; j < cb; j++) {
            int ci = c0 + j;
            dg[ci] = (R)(beta == 0 ? sdyx[j] : beta * dg[ci] + sdyx[j]);
            db[ci] = (R)(beta == 0 ? sdy[j] : beta * db[ci] + sdy[j]);
            k[j] = g[ci] * is[j] / (double)s;
        }
        if (!dx)
            continue;
        for (long i = 0; i < s; i++) {
            const R *xi = x + i * c + c0, *di = dy + i * c + c0;
            R *o = dx + i * c + c0;
            for (int j = 0; j < cb; j++) {
                double xh = (xi[j] - mu[j]) * is[j];
                R v = (R)(k[j] * ((double)s * di[j] - sdy[j] - xh * sdyx[j]));
                o[j] = dxbeta == 0 ? v : o[j] + v;
            }
        }
    }
}

void FN(trn_gap_fwd_nhwc)(const R *x, R *y, int c, int n, int hw)
{
    for (int ni = 0; ni < n; ni++)
        for (int c0 = 0; c0 < c; c0 += NHWC_CB) {
            int cb = c - c0 < NHWC_CB ? c - c0 : NHWC_CB;
            double acc[NHWC_CB];
            for (int j = 0; j < cb; j++)
                acc[j] = 0;
            for (int p = 0; p < hw; p++) {
                const R *xi = x + ((long)ni * hw + p) * c + c0;
                for (int j = 0; j < cb; j++)
                    acc[j] += xi[j];
            }
            for (int j = 0; j < cb; j++)
                y[(long)ni * c + c0 + j] = (R)(acc[j] / hw);
        }
}

void FN(trn_gap_bwd_nhwc)(const R *dy, R *dx, int c, int n, int hw, R dxbeta)
{
    for (int ni = 0; ni < n; ni++)
        for (int p = 0; p < hw; p++) {
            R *o = dx + ((long)ni * hw + p) * c;
            const R *d = dy + (long)ni * c;
            if (dxbeta == 0)
                for (int ci = 0; ci < c; ci++)
                    o[ci] = d[ci] / (R)hw;
            else
                for (int ci = 0; ci < c; ci++)
                    o[ci] += d[ci] / (R)hw;
        }
}

/* Mean cross-entropy (label smoothing eps: target (1-eps) on the label plus
   eps/k everywhere). dlogits (may be NULL) = gscale * d(sum of losses).
   In double inside; a file may rename it (SOFTMAX_CE) to put a faster
   path in front (kernels_f32.c). */
#ifndef SOFTMAX_CE
#define SOFTMAX_CE FN(trn_softmax_ce)
#endif
double SOFTMAX_CE(const R *logits, const uint8_t *labels, R *dlogits, int n, int k,
                  double smoothing, double gscale, int *correct)
{
    double total = 0;
    int ok = 0;
    for (int i = 0; i < n; i++) {
        const R *z = logits + (long)i * k;
        int arg = 0;
        double mx = z[0];
        for (int j = 1; j < k; j++)
            if (z[j] > mx) {
                mx = z[j];
                arg = j;
            }
        /* exp(z - mx) once per logit where k is small enough to keep them
           (p below is that over se, recomputed for larger k: the same) */
        double e[256], se = 0, sz = 0;
        for (int j = 0; j < k; j++) {
            double ej = exp((double)z[j] - mx);
            if (j < 256)
                e[j] = ej;
            se += ej;
            sz += (double)z[j] - mx;
        }
        double lse = log(se);
        int y = labels[i];
        if (arg == y)
            ok++;
        double lp_y = (double)z[y] - mx - lse;
        double mean_lp = sz / k - lse;
        total += -(1.0 - smoothing) * lp_y - smoothing * mean_lp;
        if (dlogits) {
            R *d = dlogits + (long)i * k;
            for (int j = 0; j < k; j++) {
                double p = (j < 256 ? e[j] : exp((double)z[j] - mx)) / se;
                double q = smoothing / k + (j == y ? 1.0 - smoothing : 0.0);
                d[j] = (R)(gscale * (p - q));
            }
        }
    }
    if (correct)
        *correct = ok;
    return n ? total / n : 0;
}
