/*  precision.c - low-precision emulation and loss scaling.

    On the CPU, bf16 and fp16 are emulated by rounding fp32 values to the
    nearest representable value (round-to-nearest-even) wherever a GPU would
    store them in that format: the working copy of the weights, each
    layer's activations, the activation gradients and the weight gradients.
    fp16 keeps its real range: values from 65520 up become inf, values below
    2^-24 flush to zero through the subnormals, so overflow, underflow and
    loss scaling behave as on a GPU. Master weights and optimiser state stay
    fp32. The loss scaler is the dynamic one of mixed-precision training:
    initial 2^16, x2 after `window` clean steps, x0.5 and a skipped step on
    inf/NaN.
*/
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/bf16.h"
#include "trainer/trn.h"

static inline uint32_t s_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static inline float s_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

float trn_round_bf16(float x)
{
    return trn_bf2f(trn_f2bf(x));
}

float trn_round_fp16(float x)
{
    uint32_t u = s_bits(x), sign = u & 0x80000000u, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return x;         /* inf, NaN */
    if (a >= 0x477ff000u) /* >= 65520: rounds to inf */
        return s_float(sign | 0x7f800000u);
    if (a < 0x38800000u) { /* below 2^-14: subnormal grid 2^-24 */
        float m = rintf(s_float(a) * 0x1p24f) * 0x1p-24f;
        return s_float(sign | s_bits(m));
    }
    a += 0xfffu + ((a >> 13) & 1u); /* keep 10 mantissa bits, RNE */
    return s_float(sign | (a & ~0x1fffu));
}

/* Branch-free over the bits (NaN kept by a select), so it vectorises: the
   bf16 path rounds every activation and gradient once per step. Compiled
   for AVX-512 and AVX2 too, chosen at load time by what the CPU has. */
TRN_CLONES static void s_round_bf16_buf(float *x, long n)
{
    uint32_t *restrict u = (uint32_t *)x;
#ifdef _OPENMP
#pragma omp parallel for if (n > 65536)
#endif
    for (long i = 0; i < n; i++) {
        uint32_t v = u[i];
        uint32_t r = (v + 0x7fffu + ((v >> 16) & 1u)) & 0xffff0000u;
        u[i] = (v & 0x7fffffffu) > 0x7f800000u ? v : r;
    }
}

void trn_round_buf(float *x, long n, trn_precision p)
{
    if (p == TRN_BF16)
        s_round_bf16_buf(x, n);
    else if (p == TRN_FP16)
        for (long i = 0; i < n; i++)
            x[i] = trn_round_fp16(x[i]);
}

TRN_CLONES int trn_has_nonfinite(const float *x, long n)
{
    /* exponent all ones <=> (bits & 0x7f800000) + 0x00800000 sets bit 31;
       an OR reduction the compiler vectorises, checked every 4096 values */
    for (long i = 0; i < n; i += 4096) {
        long end = i + 4096 < n ? i + 4096 : n;
        uint32_t acc = 0;
        for (long j = i; j < end; j++)
            acc |= (s_bits(x[j]) & 0x7f800000u) + 0x00800000u;
        if (acc & 0x80000000u)
            return 1;
    }
    return 0;
}

void trn_scaler_init(trn_scaler *s, double init, int dynamic, int window)
{
    memset(s, 0, sizeof *s);
    s->scale = init;
    s->dynamic = dynamic;
    s->window = window > 0 ? window : 2000;
    s->growth = 2.0;
    s->backoff = 0.5;
}

int trn_scaler_update(trn_scaler *s, int overflow)
{
    if (overflow) {
        if (s->dynamic && s->scale * s->backoff >= 0x1p-24)
            s->scale *= s->backoff;
        s->good_steps = 0;
        s->skipped++;
        return 1;
    }
    if (s->dynamic && ++s->good_steps >= s->window) {
        if (s->scale * s->growth <= 0x1p64)
            s->scale *= s->growth;
        s->good_steps = 0;
    }
    return 0;
}

int trn_prec_schedule_parse(trn_prec_schedule *s, const char *text, char *err)
{
    memset(s, 0, sizeof *s);
    const char *p = text;
    while (*p) {
        char name[16];
        int len = 0;
        while (p[len] && p[len] != ':' && p[len] != ',' && len < 15)
            len++;
        memcpy(name, p, (size_t)len);
        name[len] = 0;
        if (strcmp(name, "fp32") && strcmp(name, "bf16") && strcmp(name, "fp16")) {
            snprintf(err, TRN_ERRLEN,
                     "\"%s\": expected fp32, bf16 or fp16 in PREC:EPOCHS,...", name);
            return -1;
        }
        p += len;
        if (*p != ':') {
            snprintf(err, TRN_ERRLEN, "expected PREC:EPOCHS after \"%s\"", name);
            return -1;
        }
        char *end;
        long e = strtol(p + 1, &end, 10);
        if (end == p + 1 || e < 1 || e > 1000000) {
            snprintf(err, TRN_ERRLEN, "%s: expected a whole number of epochs >= 1", name);
            return -1;
        }
        if (s->n >= TRN_MAX_PHASES) {
            snprintf(err, TRN_ERRLEN, "at most %d phases", TRN_MAX_PHASES);
            return -1;
        }
        s->prec[s->n] = trn_precision_from_name(name);
        s->epochs[s->n] = (int)e;
        s->n++;
        p = end;
        if (*p == ',')
            p++;
        else if (*p) {
            snprintf(err, TRN_ERRLEN, "unexpected \"%s\"", p);
            return -1;
        }
    }
    if (s->n == 0) {
        snprintf(err, TRN_ERRLEN, "empty schedule");
        return -1;
    }
    return 0;
}

trn_precision trn_prec_schedule_at(const trn_prec_schedule *s, int epoch)
{
    int acc = 0;
    for (int i = 0; i < s->n; i++) {
        acc += s->epochs[i];
        if (epoch < acc)
            return s->prec[i];
    }
    return s->n ? s->prec[s->n - 1] : TRN_FP32;
}
