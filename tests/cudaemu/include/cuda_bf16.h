/* cudaemu stand-in for <cuda_bf16.h> (tests/cudaemu/README.md): the bf16
   type and the conversions jizhi's CUDA code uses, with the toolkit's
   rounding (to nearest even; NaN kept a NaN). */
#ifndef JZ_CUDAEMU_CUDA_BF16_H
#define JZ_CUDAEMU_CUDA_BF16_H
#include <stdint.h>
#include <string.h>
struct __nv_bfloat16 {
    uint16_t x;
};
static inline float __bfloat162float(__nv_bfloat16 h)
{
    uint32_t u = (uint32_t)h.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, sign kept */
        h.x = (uint16_t)((u >> 16) | 0x40);
    else
        h.x = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
    return h;
}
static inline __nv_bfloat16 __float2bfloat16(float f)
{
    return __float2bfloat16_rn(f);
}
#endif
