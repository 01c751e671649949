/*  gather.c - the host's batch gather (gather.h): one row copy per
    example, in the epoch's order, or one table lookup per value out of
    the set's bytes. The CUDA backend's device gather takes the same
    elements one by one (trn_gather_src). */
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define S_X86 1
#endif

#include "trainer/bf16.h"
#include "trainer/gather.h"
#include "trainer/trn.h"

/* the next row's lines (of bytes bytes), while this one is copied */
static void s_prefetch_row(const void *p, size_t bytes)
{
    const char *c = p;
    for (size_t b = 0; b < bytes; b += 64)
        __builtin_prefetch(c + b);
    __builtin_prefetch(c + bytes - 1); /* its last line, when unaligned */
}

void trn_gather_rows(const float *x, const uint8_t *y, int dim, const int *perm, int at,
                     int nb, float *xo, uint8_t *yo)
{
    for (int r = 0; r < nb; r++) {
        int k = trn_gather_row(perm, at, r);
        memcpy(xo + (size_t)r * dim, x + (size_t)k * dim, (size_t)dim * sizeof(float));
        yo[r] = y[k];
    }
}

/* One row: no OpenMP region per row (trn_bf16_from_f32 opens one, even
   when it runs on one thread: 1024 of them cost more than the copy saved). */
TRN_CLONES static void s_row_bf16(uint16_t *restrict o, const float *restrict x, int dim)
{
    for (int i = 0; i < dim; i++)
        o[i] = trn_f2bf(x[i]);
}

void trn_gather_rows_bf16(const float *x, const uint8_t *y, int dim, const int *perm,
                          int at, int nb, uint16_t *xo, uint8_t *yo)
{
    for (int r = 0; r < nb; r++) {
        int k = trn_gather_row(perm, at, r);
        if (r + 1 < nb)
            s_prefetch_row(x + (size_t)trn_gather_row(perm, at, r + 1) * dim,
                           (size_t)dim * sizeof(float));
        s_row_bf16(xo + (size_t)r * dim, x + (size_t)k * dim, dim);
        yo[r] = y[k];
    }
}

void trn_gather_rows_h(const uint16_t *x, const uint8_t *y, int dim, const int *perm,
                       int at, int nb, uint16_t *xo, uint8_t *yo)
{
    size_t row = (size_t)dim * sizeof *x;
    for (int r = 0; r < nb; r++) {
        int k = trn_gather_row(perm, at, r);
        if (r + 1 < nb)
            s_prefetch_row(x + (size_t)trn_gather_row(perm, at, r + 1) * dim, row);
        memcpy(xo + (size_t)r * dim, x + (size_t)k * dim, row);
        yo[r] = y[k];
    }
}

void trn__gather_rows_code_scalar(const uint8_t *code, const float *lut, const uint8_t *y,
                                  int dim, const int *perm, int at, int nb, float *xo,
                                  uint8_t *yo)
{
    for (int r = 0; r < nb; r++) {
        int k = trn_gather_row(perm, at, r);
        const uint8_t *s = code + (size_t)k * dim;
        float *o = xo + (size_t)r * dim;
        for (int j = 0; j < dim; j++)
            o[j] = lut[s[j]];
        yo[r] = y[k];
    }
}

void trn__gather_rows_code_h_scalar(const uint8_t *code, const uint16_t *lut16,
                                    const uint8_t *y, int dim, const int *perm, int at,
                                    int nb, uint16_t *xo, uint8_t *yo)
{
    for (int r = 0; r < nb; r++) {
        int k = trn_gather_row(perm, at, r);
        const uint8_t *s = code + (size_t)k * dim;
        uint16_t *o = xo + (size_t)r * dim;
        for (int j = 0; j < dim; j++)
            o[j] = lut16[s[j]];
        yo[r] = y[k];
    }
}

#ifdef S_X86
/* 16 bytes at a time: widened to 32-bit indices, one gather from lut */
__attribute__((target("avx512f"))) static void
s_code_avx512(const uint8_t *code, const float *lut, const uint8_t *y, int dim,
              const int *perm, int at, int nb, float *xo, uint8_t *yo)
{
    for (int r = 0; r < nb; r++) {
        int k = trn_gather_row(perm, at, r);
        if (r + 1 < nb)
            s_prefetch_row(code + (size_t)trn_gather_row(perm, at, r + 1) * dim,
                           (size_t)dim);
        const uint8_t *s = code + (size_t)k * dim;
        float *o = xo + (size_t)r * dim;
        int j = 0;
        for (; j + 16 <= dim; j += 16) {
            __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + j)));
            _mm512_storeu_ps(o + j, _mm512_i32gather_ps(idx, lut, 4));
        }
        for (; j < dim; j++)
            o[j] = lut[s[j]];
        yo[r] = y[k];
    }
}

/* 64 bytes at a time: the bf16 table split into its low and high bytes
   (256 each, four registers apiece); vpermi2b looks up 128 entries by an
   index's low 7 bits, its top bit picks which half; the two bytes are
   interleaved into words, and the 128-bit lanes put back in order. */
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void
s_code_h_vbmi(const uint8_t *code, const uint16_t *lut16, const uint8_t *y, int dim,
              const int *perm, int at, int nb, uint16_t *xo, uint8_t *yo)
{
    uint8_t lo[256], hi[256];
    for (int v = 0; v < 256; v++) {
        lo[v] = (uint8_t)(lut16[v] & 0xff);
        hi[v] = (uint8_t)(lut16[v] >> 8);
    }
    __m512i l0 = _mm512_loadu_si512(lo), l1 = _mm512_loadu_si512(lo + 64),
            l2 = _mm512_loadu_si512(lo + 128), l3 = _mm512_loadu_si512(lo + 192);
    __m512i h0 = _mm512_loadu_si512(hi), h1 = _mm512_loadu_si512(hi + 64),
            h2 = _mm512_loadu_si512(hi + 128), h3 = _mm512_loadu_si512(hi + 192);
    /* unpacklo/hi work within 128-bit lanes: words of bytes 0-7, 16-23,
       32-39, 48-55 in w0 and 8-15, 24-31, 40-47, 56-63 in w1 */
    const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (int r = 0; r < nb; r++) {
        int k = trn_gather_row(perm, at, r);
        if (r + 1 < nb)
            s_prefetch_row(code + (size_t)trn_gather_row(perm, at, r + 1) * dim,
                           (size_t)dim);
        const uint8_t *s = code + (size_t)k * dim;
        uint16_t *o = xo + (size_t)r * dim;
        int j = 0;
        for (; j + 64 <= dim; j += 64) {
            __m512i idx = _mm512_loadu_si512(s + j);
            __mmask64 top = _mm512_movepi8_mask(idx);
            __m512i vl =
                _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(l0, idx, l1),
                                       _mm512_permutex2var_epi8(l2, idx, l3));
            __m512i vh =
                _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(h0, idx, h1),
                                       _mm512_permutex2var_epi8(h2, idx, h3));
            __m512i w0 = _mm512_unpacklo_epi8(vl, vh), w1 = _mm512_unpackhi_epi8(vl, vh);
            _mm512_storeu_si512(o + j, _mm512_permutex2var_epi64(w0, first, w1));
            _mm512_storeu_si512(o + j + 32, _mm512_permutex2var_epi64(w0, second, w1));
        }
        for (; j < dim; j++)
            o[j] = lut16[s[j]];
        yo[r] = y[k];
    }
}
#endif

/* 1 where the kernel says this CPU is not affected by Gather Data
   Sampling ("Downfall"), read once: where it is, the microcode
   mitigation makes AVX-512's gather instruction several times slower,
   and a guest that cannot tell ("Unknown: Dependent on hypervisor
   status") or a container without the file may sit on such a host, so
   only "Not affected" counts. */
static int s_gather_unaffected(void)
{
    static _Atomic int known = -1;
    int v = known;
    if (v < 0) {
        char line[128] = "";
        FILE *f =
            fopen("/sys/devices/system/cpu/vulnerabilities/gather_data_sampling", "r");
        if (f) {
            if (!fgets(line, sizeof line, f))
                line[0] = 0;
            fclose(f);
        }
        v = strncmp(line, "Not affected", 12) == 0;
        known = v;
    }
    return v;
}

int trn_gather_code_simd(int bf16)
{
#ifdef S_X86
    if (bf16)
        return __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
    return __builtin_cpu_supports("avx512f") && s_gather_unaffected();
#else
    (void)bf16;
    return 0;
#endif
}

void trn_gather_rows_code(const uint8_t *code, const float *lut, const uint8_t *y,
                          int dim, const int *perm, int at, int nb, float *xo,
                          uint8_t *yo)
{
#ifdef S_X86
    if (trn_gather_code_simd(0)) {
        s_code_avx512(code, lut, y, dim, perm, at, nb, xo, yo);
        return;
    }
#endif
    trn__gather_rows_code_scalar(code, lut, y, dim, perm, at, nb, xo, yo);
}

void trn_gather_rows_code_h(const uint8_t *code, const uint16_t *lut16, const uint8_t *y,
                            int dim, const int *perm, int at, int nb, uint16_t *xo,
                            uint8_t *yo)
{
#ifdef S_X86
    if (trn_gather_code_simd(1)) {
        s_code_h_vbmi(code, lut16, y, dim, perm, at, nb, xo, yo);
        return;
    }
#endif
    trn__gather_rows_code_h_scalar(code, lut16, y, dim, perm, at, nb, xo, yo);
}
