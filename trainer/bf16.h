/*  bf16.h - bfloat16 storage: the one conversion of an fp32 value to bf16
    bits (round to nearest even; a NaN stays a NaN, its quiet bit set) and
    back (exact). Inline and branch-free so the kernels' inner loops
    vectorise with it (kernels_nhwc.c); also the wire format (comm.c) and
    the CPU emulation's rounding (precision.c). Pure functions: no state,
    no errors.
*/
#ifndef TRN_BF16_H
#define TRN_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t trn_f2bf(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)r;
}

static inline float trn_bf2f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

#endif
