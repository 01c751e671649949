/* cudaemu stand-in for <cuda_fp16.h> (tests/cudaemu/README.md): the fp16
   type and the conversions jizhi's CUDA code uses, through the compiler's
   _Float16 (IEEE binary16, round to nearest even). */
#ifndef JZ_CUDAEMU_CUDA_FP16_H
#define JZ_CUDAEMU_CUDA_FP16_H
#include <stdint.h>
#include <string.h>
struct __half {
    uint16_t x;
};
static inline float __half2float(__half h)
{
    _Float16 v;
    memcpy(&v, &h.x, 2);
    return (float)v;
}
static inline __half __float2half_rn(float f)
{
    _Float16 v = (_Float16)f;
    __half h;
    memcpy(&h.x, &v, 2);
    return h;
}
static inline __half __float2half(float f)
{
    return __float2half_rn(f);
}
#endif
