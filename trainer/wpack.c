/*  wpack.c - fp32 weights into oneDNN's bf16 BA16a64b2a layout (wpack.h).
    The vector paths round with AVX-512F integer arithmetic (the same
    formula as trn_f2bf), so they need no bf16 instructions. */
#include <stddef.h>
#include <stdint.h>

#include "trainer/bf16.h"
#include "trainer/wpack.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define S_X86 1
#endif

static size_t s_at(int a, int b, int apad)
{
    return ((size_t)(b / 64) * (size_t)(apad / 32) + (size_t)(a / 32)) * 2048 +
           (size_t)((a % 32) / 2) * 128 + (size_t)(b % 64) * 2 + (size_t)(a % 2);
}

static int s_pad(int v, int to)
{
    return (v + to - 1) / to * to;
}

size_t trn_wpack_elems(int a, int b)
{
    return (size_t)s_pad(a, 32) * (size_t)s_pad(b, 64);
}

void trn__wpack_fwd_scalar(uint16_t *dst, const float *w, int m, int k)
{
    int apad = s_pad(k, 32);
    for (int b = 0; b < m; b++)
        for (int a = 0; a < k; a++)
            dst[s_at(a, b, apad)] = trn_f2bf(w[(size_t)b * k + a]);
}

void trn__wpack_bwd_scalar(uint16_t *dst, const float *w, int m, int k)
{
    int apad = s_pad(m, 32);
    for (int a = 0; a < m; a++)
        for (int b = 0; b < k; b++)
            dst[s_at(a, b, apad)] = trn_f2bf(w[(size_t)a * k + b]);
}

#ifdef S_X86
/* 16 floats to bf16 in the low halves of 16 dwords, as trn_f2bf */
__attribute__((target("avx512f"))) static __m512i s_round16(__m512 x)
{
    __m512i u = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
    __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    __mmask16 isnan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_blend_epi32(isnan, r, nan);
}

/* 16 rows of 16 dwords transposed in place: r[j] gets column j. */
__attribute__((target("avx512f"))) static void s_transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 4; c++) {
            t[8 * i + c] = _mm512_shuffle_i32x4(r[8 * i + c], r[8 * i + 4 + c], 0x88);
            t[8 * i + 4 + c] = _mm512_shuffle_i32x4(r[8 * i + c], r[8 * i + 4 + c], 0xdd);
        }
    for (int c = 0; c < 8; c++) {
        r[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xdd);
    }
}

/* A tile of 16 outputs b by 32 inputs a (zeros past k): each output's 32
   values rounded and paired into 16 dwords (a, a+1), the tile transposed
   so that dword j of the 16 outputs is one register, stored at its row
   of the block: 16 contiguous 64-byte stores instead of a scatter. */
__attribute__((target("avx512f"))) static void s_fwd_avx512(uint16_t *dst, const float *w,
                                                            int m, int k)
{
    int apad = s_pad(k, 32);
    uint32_t *d32 = (uint32_t *)dst;
    const __m512i ev =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od =
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int b0 = 0; b0 < m; b0 += 16) {
        int nb = m - b0 < 16 ? m - b0 : 16;
        for (int a0 = 0; a0 < k; a0 += 32) {
            int left = k - a0;
            __mmask16 m0 = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
            __mmask16 m1 = left >= 32  ? 0xffff
                           : left > 16 ? (__mmask16)((1u << (left - 16)) - 1)
                                       : 0;
            __m512i r[16];
            for (int i = 0; i < 16; i++) {
                if (i >= nb) {
                    r[i] = _mm512_setzero_si512();
                    continue;
                }
                const float *row = w + (size_t)(b0 + i) * k + a0;
                __m512i lo = s_round16(_mm512_maskz_loadu_ps(m0, row));
                __m512i hi = s_round16(_mm512_maskz_loadu_ps(m1, row + 16));
                __m512i e = _mm512_permutex2var_epi32(lo, ev, hi);
                __m512i o = _mm512_permutex2var_epi32(lo, od, hi);
                r[i] = _mm512_or_si512(e, _mm512_slli_epi32(o, 16));
            }
            s_transpose16(r);
            __mmask16 mb = nb == 16 ? 0xffff : (__mmask16)((1u << nb) - 1);
            uint32_t *o = d32 + s_at(a0, b0, apad) / 2; /* b0 % 16 == 0: one 64-block */
            for (int j = 0; j < 16; j++)
                _mm512_mask_storeu_epi32(o + (size_t)j * 64, mb, r[j]);
        }
    }
}

/* For each pair of outputs (a, a+1) (zeros past m) and 16 inputs b: the
   pairs interleaved into 16 dwords, one contiguous store. */
__attribute__((target("avx512f"))) static void s_bwd_avx512(uint16_t *dst, const float *w,
                                                            int m, int k)
{
    int apad = s_pad(m, 32);
    uint32_t *d32 = (uint32_t *)dst;
    for (int a = 0; a < m; a += 2) {
        const float *r0 = w + (size_t)a * k, *r1 = a + 1 < m ? r0 + k : NULL;
        for (int b0 = 0; b0 < k; b0 += 16) {
            int left = k - b0;
            __mmask16 mk = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
            __m512i v0 = s_round16(_mm512_maskz_loadu_ps(mk, r0 + b0));
            __m512i v1 = r1 ? s_round16(_mm512_maskz_loadu_ps(mk, r1 + b0))
                            : _mm512_setzero_si512();
            __m512i pair = _mm512_or_si512(v0, _mm512_slli_epi32(v1, 16));
            /* 16 b's of one 64-block are 16 consecutive dwords */
            _mm512_mask_storeu_epi32(d32 + s_at(a, b0, apad) / 2, mk, pair);
        }
    }
}
#endif

static int s_simd(void)
{
#ifdef S_X86
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

void trn_wpack_fwd(uint16_t *dst, const float *w, int m, int k)
{
#ifdef S_X86
    if (s_simd()) {
        s_fwd_avx512(dst, w, m, k);
        return;
    }
#endif
    trn__wpack_fwd_scalar(dst, w, m, k);
}

void trn_wpack_bwd(uint16_t *dst, const float *w, int m, int k)
{
#ifdef S_X86
    if (s_simd()) {
        s_bwd_avx512(dst, w, m, k);
        return;
    }
#endif
    trn__wpack_bwd_scalar(dst, w, m, k);
}
