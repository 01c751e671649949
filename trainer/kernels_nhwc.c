/*  kernels_nhwc.c - fused channels-last kernels of the oneDNN path, for
    float activations (fp32, or bf16/fp16 emulated by rounding) and for
    real bf16 storage (uint16_t, --precision bf16 on the oneDNN path).

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

#include "trainer/bf16.h"
#include "trainer/trn.h"

#define RB 128
#define MAXT 16
#define CB 64 /* channels per block: the accumulators stay on the stack */
#define VL 64 /* values per step of the flat loops (channels dividing it) */
#define S_INLINE static inline __attribute__((always_inline))
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

/* ---- float storage --------------------------------------------------------- */

#define T float
#define LD(v) (v)
#define ST(v, p) s_round(v, p)
#define NM(name) name##_f
#include "trainer/kernels_nhwc_impl.h"
#undef T
#undef LD
#undef ST
#undef NM

/* ---- bf16 storage ---------------------------------------------------------- */

#define T uint16_t
#define LD(v) trn_bf2f(v)
#define ST(v, p) trn_f2bf(v)
#define NM(name) name##_bf
#include "trainer/kernels_nhwc_impl.h"
#undef T
#undef LD
#undef ST
#undef NM

/* The element-wise passes: each a function over [lo, hi) compiled per CPU
   with restrict pointers (the vectoriser's shape; see kernels_nhwc_impl.h),
   run in chunks of S_CH values that the OpenMP threads share. */
#define S_CH 16384L
#define S_HI(lo, n) ((lo) + S_CH < (n) ? (lo) + S_CH : (n))
#define S_PAR S_OMP("omp parallel for if (n > 2 * S_CH)")

TRN_CLONES static void s_from_f32(uint16_t *restrict o, const float *restrict x, long lo,
                                  long hi)
{
    for (long i = lo; i < hi; i++)
        o[i] = trn_f2bf(x[i]);
}

/* s_from_f32 on 512-bit vectors where the CPU has AVX-512BW (the clones
   above keep GCC's 256-bit preference): the same integer rounding, 16
   values an instruction. The bf16 MLP rounds its weights (268 K values)
   every step: 9.7% of the cycles at batch 128 on 256-bit vectors; end to
   end, batch 128 one thread 164-171 K -> 174-181 K samples/s, batch 1024
   unchanged within noise (alternating runs, 2-core Xeon with AMX). GCC
   only, as TRN_CLONES: clang (the fuzz build) ignores a target attribute
   naming prefer-vector-width and would build it for the baseline. */
#if defined(__GNUC__) && !defined(__clang__)
#define S_ZMM 1
__attribute__((target("avx512f,avx512bw,prefer-vector-width=512"))) static void
s_from_f32_zmm(uint16_t *restrict o, const float *restrict x, long lo, long hi)
{
    for (long i = lo; i < hi; i++)
        o[i] = trn_f2bf(x[i]);
}
#else
#define S_ZMM 0
#endif

int trn__bf16_from_f32_path(uint16_t *o, const float *x, long n, int wide)
{
    if (wide) {
#if S_ZMM
        if (__builtin_cpu_supports("avx512bw")) {
            S_PAR
            for (long i = 0; i < n; i += S_CH)
                s_from_f32_zmm(o, x, i, S_HI(i, n));
            return 0;
        }
#endif
        return -1;
    }
    S_PAR
    for (long i = 0; i < n; i += S_CH)
        s_from_f32(o, x, i, S_HI(i, n));
    return 0;
}

void trn_bf16_from_f32(uint16_t *o, const float *x, long n)
{
    if (trn__bf16_from_f32_path(o, x, n, 1) < 0)
        trn__bf16_from_f32_path(o, x, n, 0);
}

TRN_CLONES static void s_to_f32(float *restrict o, const uint16_t *restrict x, long lo,
                                long hi)
{
    for (long i = lo; i < hi; i++)
        o[i] = trn_bf2f(x[i]);
}

void trn_bf16_to_f32(float *o, const uint16_t *x, long n)
{
    S_PAR
    for (long i = 0; i < n; i += S_CH)
        s_to_f32(o, x, i, S_HI(i, n));
}

TRN_CLONES static void s_add_relu(const uint16_t *restrict a, const uint16_t *restrict b,
                                  uint16_t *restrict y, float lo_v, long lo, long hi)
{
    for (long i = lo; i < hi; i++) {
        float v = trn_bf2f(a[i]) + trn_bf2f(b[i]);
        y[i] = trn_f2bf(v > lo_v ? v : lo_v);
    }
}

void trn_add_relu_bf(const uint16_t *a, const uint16_t *b, uint16_t *y, long n, int relu)
{
    float lo = relu ? 0.0f : -INFINITY;
    S_PAR
    for (long i = 0; i < n; i += S_CH)
        s_add_relu(a, b, y, lo, i, S_HI(i, n));
}

TRN_CLONES static void s_relu_fwd(const uint16_t *restrict x, uint16_t *restrict y,
                                  long lo, long hi)
{
    for (long i = lo; i < hi; i++)
        y[i] = (x[i] & 0x8000u) ? 0 : x[i]; /* exact: -0 and negatives to +0 */
}

void trn_relu_fwd_bf(const uint16_t *x, uint16_t *y, long n)
{
    S_PAR
    for (long i = 0; i < n; i += S_CH)
        s_relu_fwd(x, y, i, S_HI(i, n));
}

/* dx = dy where y > 0, else 0 (acc: dx + that, rounded) */
TRN_CLONES static void s_relu_bwd(const uint16_t *restrict y, const uint16_t *restrict dy,
                                  uint16_t *restrict dx, int acc, long lo, long hi)
{
    /* y > 0 on the bits: 0x0001 (the least positive) to 0x7f80 (+inf);
       NaN and everything with the sign bit fail, as the float compare */
    if (!acc) /* a masked copy: exact */
        for (long i = lo; i < hi; i++)
            dx[i] = dy[i] & (uint16_t) - ((uint16_t)(y[i] - 1u) < 0x7f80u);
    else
        for (long i = lo; i < hi; i++) {
            uint16_t d = dy[i] & (uint16_t) - ((uint16_t)(y[i] - 1u) < 0x7f80u);
            dx[i] = trn_f2bf(trn_bf2f(dx[i]) + trn_bf2f(d));
        }
}

void trn_relu_bwd_bf(const uint16_t *y, const uint16_t *dy, uint16_t *dx, long n,
                     float dxbeta)
{
    S_PAR
    for (long i = 0; i < n; i += S_CH)
        s_relu_bwd(y, dy, dx, dxbeta != 0, i, S_HI(i, n));
}

/* One row of m: dx masked by y > 0, its values added to colsum, 16
   columns at a time (the compiler's vector adds), then m % 16. (Column
   blocks of 64 summed in registers over all the rows measured slower:
   the pass is bound by reading y and dy.) */
TRN_CLONES static void s_relu_colsum_row(const uint16_t *restrict y,
                                         const uint16_t *restrict dy,
                                         uint16_t *restrict dx, int m,
                                         float *restrict colsum)
{
    int m16 = m / 16 * 16;
    for (int j0 = 0; j0 < m16; j0 += 16)
        for (int j = j0; j < j0 + 16; j++) {
            uint16_t d = dy[j] & (uint16_t) - ((uint16_t)(y[j] - 1u) < 0x7f80u);
            dx[j] = d;
            colsum[j] += trn_bf2f(d);
        }
    for (int j = m16; j < m; j++) {
        uint16_t d = dy[j] & (uint16_t) - ((uint16_t)(y[j] - 1u) < 0x7f80u);
        dx[j] = d;
        colsum[j] += trn_bf2f(d);
    }
}

int trn_relu_bwd_colsum_bf(const uint16_t *y, const uint16_t *dy, uint16_t *dx, int n,
                           int m, float *colsum)
{
#ifdef _OPENMP
    if ((long)n * m > 2 * S_CH && omp_get_max_threads() > 1) /* as S_PAR would split it */
        return -1;
#endif
    memset(colsum, 0, (size_t)m * sizeof *colsum);
    for (int i = 0; i < n; i++)
        s_relu_colsum_row(y + (size_t)i * m, dy + (size_t)i * m, dx + (size_t)i * m, m,
                          colsum);
    return 0;
}

TRN_CLONES static void s_axpy_bf(uint16_t *restrict o, const uint16_t *restrict g,
                                 float beta, long lo, long hi)
{
    for (long i = lo; i < hi; i++)
        o[i] = trn_f2bf(beta * trn_bf2f(o[i]) + trn_bf2f(g[i]));
}

void trn_acc_bf(uint16_t *o, const uint16_t *g, float beta, long n)
{
    if (beta == 0) {
        memcpy(o, g, (size_t)n * sizeof *o);
        return;
    }
    S_PAR
    for (long i = 0; i < n; i += S_CH)
        s_axpy_bf(o, g, beta, i, S_HI(i, n));
}

TRN_CLONES static void s_scale(uint16_t *restrict x, float f, long lo, long hi)
{
    for (long i = lo; i < hi; i++)
        x[i] = trn_f2bf(f * trn_bf2f(x[i]));
}

void trn_scale_bf(uint16_t *x, float f, long n)
{
    S_PAR
    for (long i = 0; i < n; i += S_CH)
        s_scale(x, f, i, S_HI(i, n));
}

void trn_gap_fwd_nhwc_bf(const uint16_t *x, float *y, int c, int n, int hw)
{
    for (int i = 0; i < n; i++) {
        float *yi = y + (long)i * c;
        for (int j = 0; j < c; j++)
            yi[j] = 0;
        for (int p = 0; p < hw; p++) {
            const uint16_t *xp = x + ((long)i * hw + p) * c;
            for (int j = 0; j < c; j++)
                yi[j] += trn_bf2f(xp[j]);
        }
        for (int j = 0; j < c; j++)
            yi[j] /= (float)hw;
    }
}

void trn_gap_bwd_nhwc_bf(const float *dy, uint16_t *dx, int c, int n, int hw,
                         float dxbeta)
{
    for (int i = 0; i < n; i++) {
        const float *di = dy + (long)i * c;
        for (int p = 0; p < hw; p++) {
            uint16_t *xp = dx + ((long)i * hw + p) * c;
            for (int j = 0; j < c; j++) {
                float v = di[j] / (float)hw;
                xp[j] = dxbeta == 0 ? trn_f2bf(v) : trn_f2bf(trn_bf2f(xp[j]) + v);
            }
        }
    }
}
