/*  dev_elem.cuh - element conversions of the CUDA code (backend_cuda.cu,
    dist_dev.cu): to_f<T> reads an fp32, bf16 or fp16 element as float,
    from_f<T> writes a float back rounding to nearest even. Device code only;
    header-only (the specialisations are inline).
*/
#ifndef JZ_TRN_DEV_ELEM_CUH
#define JZ_TRN_DEV_ELEM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}
template <> __device__ __forceinline__ float to_f<__half>(__half v)
{
    return __half2float(v);
}

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_f<__half>(float v)
{
    return __float2half_rn(v);
}

#endif
