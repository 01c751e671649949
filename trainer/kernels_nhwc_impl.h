/*  kernels_nhwc_impl.h - the body of the fused channels-last kernels,
    included by kernels_nhwc.c once per storage type: float activations
    (rounded to the emulated precision p as they are stored) and bf16
    activations (uint16_t, the oneDNN path's real bf16 storage; p is
    ignored, every store rounds to bf16). The including file defines
    T (the element type), LD(v) (T -> float), ST(v, p) (float -> T) and
    NM(name) (the name with the type's suffix). Arithmetic is float with
    double accumulators in either case.

    Every pass over memory is a function of its own over a range of values,
    compiled per CPU (TRN_CLONES), with restrict pointers and loads that do
    not depend on a condition: the shape the vectoriser takes. (Written as
    the bodies of OpenMP loops, GCC 12 outlined them into functions it left
    scalar: one value per instruction, most of a bf16 step's time.) The
    OpenMP loops hand each thread whole chunks of RB vectors. */

/* Per-channel sums over s rows of c values, channels [c0, c0 + cb): float
   partial sums over RB rows (one vector operation per row), added into
   double. mu == NULL: sums of x into o1; else sums of (x - mu)^2 into o1.
   With dy: sums of the masked d (mask: ry > 0, or none when ry is NULL)
   into o1 and of d*(x - mu)*is into o2. */
static inline void NM(s_range_sums)(const T *x, const T *dy, const T *ry, const float *mu,
                                    const float *is, int c, int c0, int cb, long lo,
                                    long hi, double *o1, double *o2)
{
    for (int j = 0; j < cb; j++)
        o1[j] = o2[j] = 0;
    for (long i0 = lo; i0 < hi; i0 += RB) {
        long i1 = i0 + RB < hi ? i0 + RB : hi;
        float p1[CB], p2[CB];
        for (int j = 0; j < cb; j++)
            p1[j] = p2[j] = 0;
        for (long i = i0; i < i1; i++) {
            const T *xi = x + i * c + c0;
            if (dy && ry) {
                const T *di = dy + i * c + c0, *ri = ry + i * c + c0;
                for (int j = 0; j < cb; j++) {
                    float dv = LD(di[j]), d = LD(ri[j]) > 0 ? dv : 0.0f;
                    p1[j] += d;
                    p2[j] += d * ((LD(xi[j]) - mu[j]) * is[j]);
                }
            } else if (dy) {
                const T *di = dy + i * c + c0;
                for (int j = 0; j < cb; j++) {
                    float d = LD(di[j]);
                    p1[j] += d;
                    p2[j] += d * ((LD(xi[j]) - mu[j]) * is[j]);
                }
            } else if (mu) {
                for (int j = 0; j < cb; j++) {
                    float d = LD(xi[j]) - mu[j];
                    p1[j] += d * d;
                }
            } else {
                for (int j = 0; j < cb; j++)
                    p1[j] += LD(xi[j]);
            }
        }
        for (int j = 0; j < cb; j++) {
            o1[j] += p1[j];
            o2[j] += p2[j];
        }
    }
}

/* The same sums when the block is all c channels and c divides VL: rows
   lo..hi are one run of values, read VL at a time (lane t is channel
   t % c, so the loops have a fixed length the vectoriser likes); float
   partial sums over RB runs of VL, added into double, lanes folded into
   channels at the end. */
TRN_CLONES static void NM(s_flat_sums)(const T *restrict x, const T *restrict dy,
                                       const T *restrict ry, const float *mu,
                                       const float *is, int c, long lo, long hi,
                                       double *o1, double *o2)
{
    float m[VL], sc[VL];
    double d1[VL], d2[VL];
    for (int t = 0; t < VL; t++) {
        m[t] = mu ? mu[t % c] : 0.0f;
        sc[t] = is ? is[t % c] : 0.0f;
        d1[t] = d2[t] = 0;
    }
    long e0 = lo * c, e1 = hi * c;
    for (long b0 = e0; b0 < e1; b0 += (long)RB * VL) {
        long b1 = b0 + (long)RB * VL < e1 ? b0 + (long)RB * VL : e1;
        float p1[VL], p2[VL];
        for (int t = 0; t < VL; t++)
            p1[t] = p2[t] = 0;
        long e = b0;
        for (; e + VL <= b1; e += VL) {
            const T *xe = x + e;
            if (dy && ry) {
                const T *de = dy + e, *re = ry + e;
                for (int t = 0; t < VL; t++) {
                    float dv = LD(de[t]), d = LD(re[t]) > 0 ? dv : 0.0f;
                    p1[t] += d;
                    p2[t] += d * ((LD(xe[t]) - m[t]) * sc[t]);
                }
            } else if (dy) {
                const T *de = dy + e;
                for (int t = 0; t < VL; t++) {
                    float d = LD(de[t]);
                    p1[t] += d;
                    p2[t] += d * ((LD(xe[t]) - m[t]) * sc[t]);
                }
            } else if (mu) {
                for (int t = 0; t < VL; t++) {
                    float d = LD(xe[t]) - m[t];
                    p1[t] += d * d;
                }
            } else {
                for (int t = 0; t < VL; t++)
                    p1[t] += LD(xe[t]);
            }
        }
        for (; e < b1; e++) { /* the tail: lane e % c is its channel */
            int t = (int)(e % c);
            float xv = LD(x[e]);
            if (dy) {
                float dv = LD(dy[e]), d = !ry || LD(ry[e]) > 0 ? dv : 0.0f;
                p1[t] += d;
                p2[t] += d * ((xv - m[t]) * sc[t]);
            } else if (mu) {
                p1[t] += (xv - m[t]) * (xv - m[t]);
            } else {
                p1[t] += xv;
            }
        }
        for (int t = 0; t < VL; t++) {
            d1[t] += p1[t];
            d2[t] += p2[t];
        }
    }
    for (int j = 0; j < c; j++)
        o1[j] = o2[j] = 0;
    for (int t = 0; t < VL; t++) {
        o1[t % c] += d1[t];
        o2[t % c] += d2[t];
    }
}

/* The rows are cut into one range per thread and the ranges' sums added in
   order, so the result depends on the thread count only, never on timing. */
TRN_CLONES static void NM(s_sums)(const T *x, const T *dy, const T *ry, const float *mu,
                                  const float *is, int c, int c0, int cb, long s,
                                  double *o1, double *o2)
{
    int nt = 1;
#ifdef _OPENMP
    nt = s > 4 * RB ? omp_get_max_threads() : 1;
    nt = nt < 1 ? 1 : nt > MAXT ? MAXT : nt;
#endif
    double part1[MAXT][CB], part2[MAXT][CB];
    S_OMP("omp parallel for num_threads(nt) schedule(static, 1)")
    for (int t = 0; t < nt; t++) {
        if (cb == c && VL % c == 0)
            NM(s_flat_sums)
        (x, dy, ry, mu, is, c, s * t / nt, s * (t + 1) / nt, part1[t], part2[t]);
        else NM(s_range_sums)(x, dy, ry, mu, is, c, c0, cb, s * t / nt, s * (t + 1) / nt,
                              part1[t], part2[t]);
    }
    for (int j = 0; j < cb; j++) {
        o1[j] = o2[j] = 0;
        for (int t = 0; t < nt; t++) {
            o1[j] += part1[t][j];
            o2[j] += part2[t][j];
        }
    }
}

/* ---- the passes over memory ------------------------------------------------ */

/* y = ST(max(av*x + ov, lo)) over the vectors [v0, v1) of VL values
   (lane t: channel t % c), and the same over rows [i0, i1) of channels
   [c0, c0 + cb) of c. The bodies are inlined with p a constant, so the
   float path's rounding folds away. */
S_INLINE void NM(s_affine_body)(const T *restrict x, T *restrict y,
                                const float *restrict av, const float *restrict ov,
                                float lo, long v0, long v1, trn_precision p)
{
    float a[VL], o[VL];
    for (int t = 0; t < VL; t++)
        a[t] = av[t], o[t] = ov[t];
    for (long v = v0; v < v1; v++) {
        const T *restrict xe = x + v * VL;
        T *restrict ye = y + v * VL;
        for (int t = 0; t < VL; t++) {
            float u = a[t] * LD(xe[t]) + o[t];
            ye[t] = ST(u > lo ? u : lo, p);
        }
    }
}

TRN_CLONES static void NM(s_affine_run)(const T *restrict x, T *restrict y,
                                        const float *restrict av,
                                        const float *restrict ov, float lo, long v0,
                                        long v1, trn_precision p)
{
    if (p == TRN_FP32)
        NM(s_affine_body)(x, y, av, ov, lo, v0, v1, TRN_FP32);
    else if (p == TRN_BF16)
        NM(s_affine_body)(x, y, av, ov, lo, v0, v1, TRN_BF16);
    else
        NM(s_affine_body)(x, y, av, ov, lo, v0, v1, p);
}

TRN_CLONES static void NM(s_affine_rows)(const T *restrict x, T *restrict y,
                                         const float *restrict a,
                                         const float *restrict off, float lo, int c,
                                         int c0, int cb, long i0, long i1,
                                         trn_precision p)
{
    for (long i = i0; i < i1; i++) {
        const T *restrict xi = x + i * c + c0;
        T *restrict yi = y + i * c + c0;
        for (int j = 0; j < cb; j++) {
            float v = a[j] * LD(xi[j]) + off[j];
            yi[j] = ST(v > lo ? v : lo, p);
        }
    }
}

/* BN's dx over the vectors [v0, v1): d = dy where rr > mk (the ReLU's
   mask; mk = -inf passes all), u = A*d + B*(x - m) + C, dx = ST(u), or
   ST(dx + u) when acc. */
S_INLINE void NM(s_bnbwd_body)(const T *restrict x, const T *restrict dy,
                               const T *restrict rr, T *restrict dx,
                               const float *restrict Av, const float *restrict Bv,
                               const float *restrict Cv, const float *restrict mv,
                               float mk, int acc, long v0, long v1, trn_precision p)
{
    float A[VL], B[VL], C[VL], m[VL];
    for (int t = 0; t < VL; t++)
        A[t] = Av[t], B[t] = Bv[t], C[t] = Cv[t], m[t] = mv[t];
    for (long v = v0; v < v1; v++) {
        const T *restrict xe = x + v * VL, *restrict de = dy + v * VL,
                          *restrict re = rr + v * VL;
        T *restrict o = dx + v * VL;
        if (acc)
            for (int t = 0; t < VL; t++) {
                float dv = LD(de[t]), d = LD(re[t]) > mk ? dv : 0.0f;
                o[t] = ST(LD(o[t]) + (A[t] * d + B[t] * (LD(xe[t]) - m[t]) + C[t]), p);
            }
        else
            for (int t = 0; t < VL; t++) {
                float dv = LD(de[t]), d = LD(re[t]) > mk ? dv : 0.0f;
                o[t] = ST(A[t] * d + B[t] * (LD(xe[t]) - m[t]) + C[t], p);
            }
    }
}

TRN_CLONES static void NM(s_bnbwd_run)(const T *restrict x, const T *restrict dy,
                                       const T *restrict rr, T *restrict dx,
                                       const float *Av, const float *Bv, const float *Cv,
                                       const float *mv, float mk, int acc, long v0,
                                       long v1, trn_precision p)
{
    if (p == TRN_FP32)
        NM(s_bnbwd_body)(x, dy, rr, dx, Av, Bv, Cv, mv, mk, acc, v0, v1, TRN_FP32);
    else if (p == TRN_BF16)
        NM(s_bnbwd_body)(x, dy, rr, dx, Av, Bv, Cv, mv, mk, acc, v0, v1, TRN_BF16);
    else
        NM(s_bnbwd_body)(x, dy, rr, dx, Av, Bv, Cv, mv, mk, acc, v0, v1, p);
}

TRN_CLONES static void NM(s_bnbwd_rows)(const T *restrict x, const T *restrict dy,
                                        const T *restrict rr, T *restrict dx,
                                        const float *restrict A, const float *restrict B,
                                        const float *restrict C, const float *restrict mu,
                                        float mk, int acc, int c, int c0, int cb, long i0,
                                        long i1, trn_precision p)
{
    for (long i = i0; i < i1; i++) {
        const T *restrict xi = x + i * c + c0, *restrict di = dy + i * c + c0,
                          *restrict ri = rr + i * c + c0;
        T *restrict o = dx + i * c + c0;
        for (int j = 0; j < cb; j++) {
            float dv = LD(di[j]), d = LD(ri[j]) > mk ? dv : 0.0f;
            float u = A[j] * d + B[j] * (LD(xi[j]) - mu[j]) + C[j];
            o[j] = ST(acc ? LD(o[j]) + u : u, p);
        }
    }
}

TRN_CLONES void NM(trn_bn_relu_fwd_nhwc)(const T *x, const float *g, const float *b, T *y,
                                         float *mean, float *invstd, const float *rmean,
                                         const float *rvar, int c, long s, float eps,
                                         trn_precision p, int relu)
{
    (void)p;
    for (int c0 = 0; c0 < c; c0 += CB) {
        int cb = c - c0 < CB ? c - c0 : CB;
        float a[CB], off[CB];
        if (!rmean) { /* training: this batch's statistics */
            double sum[CB], sq[CB], unused[CB];
            float muf[CB];
            NM(s_sums)(x, NULL, NULL, NULL, NULL, c, c0, cb, s, sum, unused);
            for (int j = 0; j < cb; j++)
                muf[j] = (float)(sum[j] / (double)s);
            NM(s_sums)(x, NULL, NULL, muf, NULL, c, c0, cb, s, sq, unused);
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
        float lo = relu ? 0.0f : -INFINITY;
        if (cb == c && VL % c == 0) { /* one run of s*c values, VL at a time */
            float av[VL], ov[VL];
            for (int t = 0; t < VL; t++)
                av[t] = a[t % c], ov[t] = off[t % c];
            long ne = s * c, nv = ne / VL;
            S_OMP("omp parallel for if (ne > 4 * RB * VL)")
            for (long v = 0; v < nv; v += RB) {
                long v1 = v + RB < nv ? v + RB : nv;
                NM(s_affine_run)(x, y, av, ov, lo, v, v1, p);
            }
            for (long e = nv * VL; e < ne; e++) {
                float u = av[e % c] * LD(x[e]) + ov[e % c];
                y[e] = ST(u > lo ? u : lo, p);
            }
            continue;
        }
        S_OMP("omp parallel for if (s > 4 * RB)")
        for (long i = 0; i < s; i += RB) {
            long i1 = i + RB < s ? i + RB : s;
            NM(s_affine_rows)(x, y, a, off, lo, c, c0, cb, i, i1, p);
        }
    }
}

/* dy masked by the ReLU output ry (ry NULL: a BN without ReLU): dL/dx of
   BN, with dx = k*(s*d - sum(d) - xh*sum(d*xh)), xh = (x - mu)*is,
   k = g*is/s, computed per element as A*d + B*(x - mu) + C in float. */
TRN_CLONES void NM(trn_bn_relu_bwd_nhwc)(const T *x, const float *g, const float *mean,
                                         const float *invstd, const T *ry, const T *dy,
                                         T *dx, float *dg, float *db, int c, long s,
                                         float beta, float dxbeta, trn_precision p)
{
    (void)p;
    for (int c0 = 0; c0 < c; c0 += CB) {
        int cb = c - c0 < CB ? c - c0 : CB;
        double sdy[CB], sdyx[CB];
        float mu[CB], is[CB], A[CB], B[CB], C[CB];
        for (int j = 0; j < cb; j++) {
            mu[j] = mean[c0 + j];
            is[j] = invstd[c0 + j];
        }
        NM(s_sums)(x, dy, ry, mu, is, c, c0, cb, s, sdy, sdyx);
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
        float mk = ry ? 0.0f : -INFINITY; /* no ReLU: every d passes */
        const T *rr = ry ? ry : dy;
        int acc = dxbeta != 0;
        if (cb == c && VL % c == 0) { /* one run of s*c values, VL at a time */
            float Av[VL], Bv[VL], Cv[VL], mv[VL];
            for (int t = 0; t < VL; t++)
                Av[t] = A[t % c], Bv[t] = B[t % c], Cv[t] = C[t % c], mv[t] = mu[t % c];
            long ne = s * c, nv = ne / VL;
            S_OMP("omp parallel for if (ne > 4 * RB * VL)")
            for (long v = 0; v < nv; v += RB) {
                long v1 = v + RB < nv ? v + RB : nv;
                NM(s_bnbwd_run)(x, dy, rr, dx, Av, Bv, Cv, mv, mk, acc, v, v1, p);
            }
            for (long e = nv * VL; e < ne; e++) {
                int t = (int)(e % c);
                float d = LD(rr[e]) > mk ? LD(dy[e]) : 0.0f;
                float u = Av[t] * d + Bv[t] * (LD(x[e]) - mv[t]) + Cv[t];
                dx[e] = ST(acc ? LD(dx[e]) + u : u, p);
            }
            continue;
        }
        S_OMP("omp parallel for if (s > 4 * RB)")
        for (long i = 0; i < s; i += RB) {
            long i1 = i + RB < s ? i + RB : s;
            NM(s_bnbwd_rows)(x, dy, rr, dx, A, B, C, mu, mk, acc, c, c0, cb, i, i1, p);
        }
    }
}
