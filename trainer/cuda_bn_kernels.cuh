/*  cuda_bn_kernels.cuh - the CUDA CNN's own spatial BatchNorm over NHWC
    activations in a half type with fp32 parameters and statistics, used at
    --precision bf16 (cuDNN's BN may derive bf16 parameters for a bf16
    input: cudnn_host.h's own_bn). The math and the chunked, ordered sums
    are bn_half.h's, shared with the CPU twin (bn_half.c) that the host
    tests check against a double reference. A section of backend_cudnn.cu
    (included by it alone). NEVER RUN ON A GPU: written and compiled on a
    machine without one. */
#ifndef JZ_TRN_CUDA_BN_KERNELS_CUH
#define JZ_TRN_CUDA_BN_KERNELS_CUH

#include "trainer/bn_half.h"
#include "trainer/dev_elem.cuh"

/* One position's terms of mode's sums (k_bnh_part). */
__device__ __forceinline__ void s_bnh_add(int mode, float v, float d, float mu, float is,
                                          float &t0, float &t1)
{
    if (mode == 0) {
        t0 += v;
    } else if (mode == 1) {
        t0 += (v - mu) * (v - mu);
    } else {
        t0 += d;
        t1 += d * ((v - mu) * is);
    }
}

/* Loads a thread has in flight before it adds them (k_bnh_part): one at a
   time, each add waiting for its load, a warp kept one 64-byte request in
   flight, far under the memory's bandwidth (review34). */
#define S_BNH_UNROLL 8

/* Chunk blockIdx.x's partial sums of every channel into p0 (and p1) at
   [channel * TRN_BNH_CHUNKS + chunk]: mode 0 the sum of x, mode 1 of
   (x - mean)^2, mode 2 of dy and of dy * xhat. The lanes of bn_half.h:
   thread t sums channel t % c in lane t / c, a warp reading whole NHWC
   rows, and the lanes are added in lane order (the same bits run to run).
   c >= the block: one lane, thread t taking channels t, t +
   TRN_BNH_THREADS, ... A thread loads S_BNH_UNROLL of its positions, then
   adds them in position order: the sum of the one-at-a-time loop. */
template <typename T>
__global__ void k_bnh_part(const T *x, const T *dy, int c, long s, int mode,
                           const float *mean, const float *inv, float *p0, float *p1)
{
    __shared__ float a0[TRN_BNH_THREADS], a1[TRN_BNH_THREADS];
    int k = blockIdx.x, t = threadIdx.x;
    int lanes = trn_bnh_lanes(c);
    int q = lanes > 1 ? t / c : 0; /* this thread's lane */
    long lo, hi;
    trn_bnh_chunk(s, k, &lo, &hi);
    for (int j = lanes > 1 ? t % c : t; j < c && q < lanes; j += TRN_BNH_THREADS) {
        float mu = mode ? mean[j] : 0.0f, is = mode == 2 ? inv[j] : 0.0f, t0 = 0, t1 = 0;
        long p = lo + q;
        for (; p + (S_BNH_UNROLL - 1) * (long)lanes < hi;
             p += S_BNH_UNROLL * (long)lanes) {
            float v[S_BNH_UNROLL], d[S_BNH_UNROLL];
            for (int u = 0; u < S_BNH_UNROLL; u++) {
                long o = (p + u * (long)lanes) * c + j;
                v[u] = to_f<T>(x[o]);
                d[u] = mode == 2 ? to_f<T>(dy[o]) : 0.0f;
            }
            for (int u = 0; u < S_BNH_UNROLL; u++)
                s_bnh_add(mode, v[u], d[u], mu, is, t0, t1);
        }
        for (; p < hi; p += lanes)
            s_bnh_add(mode, to_f<T>(x[p * c + j]),
                      mode == 2 ? to_f<T>(dy[p * c + j]) : 0.0f, mu, is, t0, t1);
        if (lanes > 1) { /* one channel a thread: folded below */
            a0[t] = t0, a1[t] = t1;
            break;
        }
        p0[j * TRN_BNH_CHUNKS + k] = t0;
        if (p1)
            p1[j * TRN_BNH_CHUNKS + k] = t1;
    }
    if (lanes > 1) {
        __syncthreads();
        if (t < c) {
            float t0 = 0, t1 = 0;
            for (int l = 0; l < lanes; l++)
                t0 += a0[l * c + t], t1 += a1[l * c + t];
            p0[t * TRN_BNH_CHUNKS + k] = t0;
            if (p1)
                p1[t * TRN_BNH_CHUNKS + k] = t1;
        }
    }
}

/* per channel: the mean from the folded sums */
__global__ void k_bnh_mean(const float *p0, int c, long s, float *mean)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < c)
        mean[j] =
            (float)(trn_bnh_fold(p0 + j * TRN_BNH_CHUNKS, 1) / (double)(s > 0 ? s : 1));
}

/* per channel: inv and the running statistics from the folded deviations */
__global__ void k_bnh_var(const float *p0, int c, long s, float eps, float mo,
                          const float *mean, float *inv, float *rm, float *rv)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < c) {
        double sq = trn_bnh_fold(p0 + j * TRN_BNH_CHUNKS, 1);
        inv[j] = trn_bnh_inv(sq, s, eps);
        trn_bnh_running(&rm[j], &rv[j], mean[j], sq, s, mo);
    }
}

/* per channel: db and dg (written) from the folded sums */
__global__ void k_bnh_grads(const float *p0, const float *p1, int c, float *dg, float *db)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < c) {
        db[j] = (float)trn_bnh_fold(p0 + j * TRN_BNH_CHUNKS, 1);
        dg[j] = (float)trn_bnh_fold(p1 + j * TRN_BNH_CHUNKS, 1);
    }
}

template <typename T>
__global__ void k_bnh_y(const T *x, T *y, int c, long n, const float *g, const float *b,
                        const float *mean, const float *inv)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        int j = (int)(i % c);
        float a = g[j] * inv[j], off = b[j] - g[j] * inv[j] * mean[j];
        y[i] = from_f<T>(a * to_f<T>(x[i]) + off);
    }
}

template <typename T>
__global__ void k_bnh_dx(const T *x, const T *dy, T *dx, int acc, int c, long s,
                         const float *g, const float *mean, const float *inv,
                         const float *dg, const float *db)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < s * c) {
        int j = (int)(i % c);
        float v = trn_bnh_dx(to_f<T>(x[i]), to_f<T>(dy[i]), g[j], mean[j], inv[j], db[j],
                             dg[j], s);
        dx[i] = from_f<T>((acc ? to_f<T>(dx[i]) : 0.0f) + v);
    }
}

/* Forward (training) of one BN: x, y s*c values of T (NHWC); g, b fp32;
   rm, rv the running statistics (momentum 0.1, eps 1e-5 as net.c); mean,
   inv saved for the backward; part 2 * c * TRN_BNH_CHUNKS floats. */
template <typename T>
static void s_bnh_forward(cudaStream_t st, const T *x, T *y, int c, long s,
                          const float *g, const float *b, float *rm, float *rv,
                          float *mean, float *inv, float *part)
{
    unsigned cb = (unsigned)((c + 255) / 256), nb = (unsigned)((s * c + 255) / 256);
    k_bnh_part<T><<<TRN_BNH_CHUNKS, TRN_BNH_THREADS, 0, st>>>(x, NULL, c, s, 0, NULL,
                                                              NULL, part, NULL);
    k_bnh_mean<<<cb, 256, 0, st>>>(part, c, s, mean);
    k_bnh_part<T><<<TRN_BNH_CHUNKS, TRN_BNH_THREADS, 0, st>>>(x, NULL, c, s, 1, mean,
                                                              NULL, part, NULL);
    k_bnh_var<<<cb, 256, 0, st>>>(part, c, s, 1e-5f, 0.1f, mean, inv, rm, rv);
    k_bnh_y<T><<<nb, 256, 0, st>>>(x, y, c, s * c, g, b, mean, inv);
}

/* Backward of one BN: dg, db written (fp32, carrying dy's loss scale); dx
   written, or added to when acc. part as for the forward. */
template <typename T>
static void s_bnh_backward(cudaStream_t st, const T *x, const T *dy, T *dx, int acc,
                           int c, long s, const float *g, const float *mean,
                           const float *inv, float *dg, float *db, float *part)
{
    unsigned cb = (unsigned)((c + 255) / 256), nb = (unsigned)((s * c + 255) / 256);
    float *p1 = part + (size_t)c * TRN_BNH_CHUNKS;
    k_bnh_part<T>
        <<<TRN_BNH_CHUNKS, TRN_BNH_THREADS, 0, st>>>(x, dy, c, s, 2, mean, inv, part, p1);
    k_bnh_grads<<<cb, 256, 0, st>>>(part, p1, c, dg, db);
    k_bnh_dx<T><<<nb, 256, 0, st>>>(x, dy, dx, acc, c, s, g, mean, inv, dg, db);
}

#endif
