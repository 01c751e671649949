/*  softmax_avx512.c - softmax cross-entropy, one row of up to 16 logits
    per AVX-512 register (softmax.h). */
#include <math.h>
#include <stdint.h>

#include "trainer/softmax.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* e^x for x <= 0 (x - max), 0 below -104 (as e^x underflows in float):
   x = n ln2 + r, |r| <= ln2/2,
   e^r by its degree-6 Taylor polynomial (error about 2^-23 there), times
   2^n exactly (scalef): within 3 ulp of e^x over every float in [-87, 0]
   (2.74 at worst, a reviewer's exhaustive check). */
__attribute__((target("avx512f"))) static __m512 s_exp(__m512 x)
{
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f),
                      x); /* NaN stays NaN: max takes its second operand */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x); /* ln2 hi */
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);      /* ln2 lo */
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

__attribute__((target("avx512f"))) static double
s_rows(const float *logits, const uint8_t *labels, float *dlogits, int n, int k,
       double smoothing, double gscale, int *correct)
{
    const __mmask16 lanes = (__mmask16)((1u << k) - 1);
    const __m512i idx =
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const float qoff = (float)(smoothing / k), qon = (float)(1.0 - smoothing);
    const __m512 gs = _mm512_set1_ps((float)gscale);
    double total = 0;
    int ok = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (long)i * k;
        __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), lanes, z);
        float mx = _mm512_reduce_max_ps(v);
        /* the first lane holding the largest value, as the template's scan
           (none where the largest came out NaN: the loss is NaN then) */
        __mmask16 at = _mm512_mask_cmpeq_ps_mask(lanes, v, _mm512_set1_ps(mx));
        int arg = at ? __builtin_ctz((unsigned)at) : 0;
        __m512 d = _mm512_sub_ps(v, _mm512_set1_ps(mx));
        __m512 e = _mm512_maskz_mov_ps(lanes, s_exp(d));
        /* the largest lane's e is 1 exactly (a finite largest: an infinite
           one makes the loss NaN, as in the template): log(1 + the others' sum) by
           log1p keeps a confident row's tiny loss (log of a float sum
           near 1 would round it to 0 below about 6e-8) */
        float rest = _mm512_reduce_add_ps(
            _mm512_maskz_mov_ps((__mmask16)(lanes & ~(1u << arg)), e));
        float se = 1.0f + rest;
        float sz = _mm512_reduce_add_ps(_mm512_maskz_mov_ps(lanes, d));
        double lse = log1pf(rest);
        int y = labels[i];
        if (arg == y)
            ok++;
        double lp_y = (double)z[y] - mx - lse, mean_lp = (double)sz / k - lse;
        total += -(1.0 - smoothing) * lp_y - smoothing * mean_lp;
        if (dlogits) {
            __m512 p = _mm512_div_ps(e, _mm512_set1_ps(se));
            __m512 q =
                _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(idx, _mm512_set1_epi32(y)),
                                     _mm512_set1_ps(qoff), _mm512_set1_ps(qoff + qon));
            _mm512_mask_storeu_ps(dlogits + (long)i * k, lanes,
                                  _mm512_mul_ps(gs, _mm512_sub_ps(p, q)));
        }
    }
    if (correct)
        *correct = ok;
    return n ? total / n : 0;
}
#endif

int trn_softmax_ce16_ok(int k)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return k >= 1 && k <= 16 && __builtin_cpu_supports("avx512f");
#else
    (void)k;
    return 0;
#endif
}

double trn_softmax_ce16(const float *logits, const uint8_t *labels, float *dlogits, int n,
                        int k, double smoothing, double gscale, int *correct)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return s_rows(logits, labels, dlogits, n, k, smoothing, gscale, correct);
#else
    (void)logits, (void)labels, (void)dlogits, (void)n, (void)k, (void)smoothing;
    (void)gscale, (void)correct;
    return 0;
#endif
}
