/*  cuda_cnn_kernels.cuh - the CUDA CNN's own element-wise kernels (ReLU,
    the residual add, gradient accumulation, global average pooling, NHWC):
    a section of backend_cudnn.cu (included by it alone), split out to
    keep that file under 1000 lines. NEVER RUN ON A GPU: written and
    compiled on a machine without one. */
#ifndef JZ_TRN_CUDA_CNN_KERNELS_CUH
#define JZ_TRN_CUDA_CNN_KERNELS_CUH

/* ---- kernels ------------------------------------------------------------------- */

__global__ void k_relu_fwd(const float *x, float *y, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i] > 0 ? x[i] : 0.0f;
}

/* gx = (acc ? gx : 0) + gy * (y > 0) */
__global__ void k_relu_bwd_acc(const float *y, const float *gy, float *gx, long n,
                               int acc)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        gx[i] = (acc ? gx[i] : 0.0f) + (y[i] > 0 ? gy[i] : 0.0f);
}

__global__ void k_add(const float *a, const float *b, float *y, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a[i] + b[i];
}

/* gx = (acc ? gx : 0) + gy */
__global__ void k_acc(const float *gy, float *gx, long n, int acc)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        gx[i] = (acc ? gx[i] : 0.0f) + gy[i];
}

/* y[n][c] = mean over hw of x[n][hw][c] (NHWC); one thread per (n, c) */
__global__ void k_gap_fwd(const float *x, float *y, int nb, int c, int hw)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nb * c)
        return;
    int s = i / c, j = i % c;
    const float *xs = x + (long)s * hw * c + j;
    float acc = 0;
    for (int p = 0; p < hw; p++)
        acc += xs[(long)p * c];
    y[i] = acc / hw;
}

/* gx[n][hw][c] = (acc ? gx : 0) + gy[n][c] / hw */
__global__ void k_gap_bwd(const float *gy, float *gx, int nb, int c, int hw, int acc)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= (long)nb * hw * c)
        return;
    int j = (int)(i % c);
    long s = i / ((long)hw * c);
    gx[i] = (acc ? gx[i] : 0.0f) + gy[s * c + j] / hw;
}

#endif
