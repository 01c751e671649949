/*  cuda_cnn_kernels.cuh - the CUDA CNN's own element-wise kernels (ReLU,
    the residual add, gradient accumulation, global average pooling, the
    head's bias, NHWC): a section of backend_cudnn.cu (included by it
    alone), split out to keep that file under 1000 lines. Element type T is
    the activations' (float, __nv_bfloat16, __half; dev_elem.cuh): values
    are read as float, summed in float and stored back rounded to nearest
    even. NEVER RUN ON A GPU: written and compiled on a machine without
    one. */
#ifndef JZ_TRN_CUDA_CNN_KERNELS_CUH
#define JZ_TRN_CUDA_CNN_KERNELS_CUH

#include "trainer/dev_elem.cuh"

/* ---- kernels ------------------------------------------------------------------- */

template <typename T> __global__ void k_relu_fwd(const T *x, T *y, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = to_f<T>(x[i]);
        y[i] = from_f<T>(v > 0 ? v : 0.0f);
    }
}

/* gx = (acc ? gx : 0) + gy * (y > 0) */
template <typename T>
__global__ void k_relu_bwd_acc(const T *y, const T *gy, T *gx, long n, int acc)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        gx[i] = from_f<T>((acc ? to_f<T>(gx[i]) : 0.0f) +
                          (to_f<T>(y[i]) > 0 ? to_f<T>(gy[i]) : 0.0f));
}

template <typename T> __global__ void k_add(const T *a, const T *b, T *y, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = from_f<T>(to_f<T>(a[i]) + to_f<T>(b[i]));
}

/* gx = (acc ? gx : 0) + gy */
template <typename T> __global__ void k_acc(const T *gy, T *gx, long n, int acc)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        gx[i] = from_f<T>((acc ? to_f<T>(gx[i]) : 0.0f) + to_f<T>(gy[i]));
}

/* y[n][c] = mean over hw of x[n][hw][c] (NHWC); one thread per (n, c) */
template <typename T> __global__ void k_gap_fwd(const T *x, T *y, int nb, int c, int hw)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nb * c)
        return;
    int s = i / c, j = i % c;
    const T *xs = x + (long)s * hw * c + j;
    float acc = 0;
    for (int p = 0; p < hw; p++)
        acc += to_f<T>(xs[(long)p * c]);
    y[i] = from_f<T>(acc / hw);
}

/* gx[n][hw][c] = (acc ? gx : 0) + gy[n][c] / hw */
template <typename T>
__global__ void k_gap_bwd(const T *gy, T *gx, int nb, int c, int hw, int acc)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= (long)nb * hw * c)
        return;
    int j = (int)(i % c);
    long s = i / ((long)hw * c);
    gx[i] = from_f<T>((acc ? to_f<T>(gx[i]) : 0.0f) + to_f<T>(gy[s * c + j]) / hw);
}

/* z[n][m] += b[m]: the head's bias, kept in fp32 (its master), added in
   float and z rounded once */
template <typename T> __global__ void k_bias_f32(T *z, const float *b, int n, int m)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < (long)n * m)
        z[i] = from_f<T>(to_f<T>(z[i]) + b[i % m]);
}

/* y = float(x): a conv's weight gradient as cuDNN wrote it (the filter's
   type) into its fp32 gradient buffer, before the norms, the exchange and
   the update read it (an inf or NaN stays one: the overflow check sees it) */
template <typename T> __global__ void k_to_f32(const T *x, float *y, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = to_f<T>(x[i]);
}

#endif
