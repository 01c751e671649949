/*  cuda_mlp_kernels.cuh - the CUDA backend's own kernels for the MLP step
    (backend_cuda.cu; header-only templates, included by that file alone).

    Element type T is the compute format (float, __nv_bfloat16, __half):
    values are read as float (to_f) and stored back rounded to nearest even
    (from_f), at the same points as the CPU emulation (net.c, precision.c).
    The per-step scalars (learning rate, loss scales, the batch's place in
    the epoch's order) are read from device memory (s_args), never passed
    by value, so a step captured as a CUDA graph replays with the values of
    the step it is launched for.
*/
#ifndef JZ_TRN_CUDA_MLP_KERNELS_CUH
#define JZ_TRN_CUDA_MLP_KERNELS_CUH

#include "trainer/dev_elem.cuh"
#include "trainer/gather.h"

/* The per-step scalars (one copy in pinned host memory, written before the
   step; one on the device, copied in by the step's first operation). */
typedef struct {
    float lr;        /* the step's learning rate */
    float inv_scale; /* 1 / the loss scale the gradients carry */
    float dscale;    /* dlogits scale: loss_scale / global batch */
    int at;          /* device data: the batch is perm[at .. at + nb) */
} s_args;

template <typename T> __global__ void k_convert(const float *x, T *y, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = from_f<T>(x[i]);
}

template <typename T> __global__ void k_fill(T *y, float v, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = from_f<T>(v);
}

/* The batch perm[at .. at + nb) of the device-resident training set X (rows
   of dim fp32 values) and Y, into out (nb x dim, in T: the conversion the
   host path does after its copy) and yout: one thread per element, its
   source from gather.h (tested on the host against the host's row copy). */
template <typename T>
__global__ void k_gather(const float *X, const unsigned char *Y, const int *perm,
                         const s_args *a, int nb, int dim, T *out, unsigned char *yout)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= (long)nb * dim)
        return;
    int at = a->at;
    out[i] = from_f<T>(X[trn_gather_src(perm, at, dim, i)]);
    if (i % dim == 0) {
        int r = (int)(i / dim);
        yout[r] = Y[trn_gather_row(perm, at, r)];
    }
}

/* z[n,m] += b (stored in T), then ReLU unless last */
template <typename T> __global__ void k_bias_act(T *z, const T *b, int n, int m, int relu)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= (long)n * m)
        return;
    float v = to_f<T>(z[i]) + to_f<T>(b[i % m]);
    if (relu && v < 0)
        v = 0;
    z[i] = from_f<T>(v);
}

/* one thread per row: loss sum (fp32 accumulate; a warp's rows summed
   before one atomic add to *loss) and dlogits = a->dscale * (softmax -
   target), smoothing as on the CPU. blockDim.x: a multiple of 32. */
template <typename T>
__global__ void k_softmax_ce(const T *z, const unsigned char *y, T *dz, int n, int k,
                             float smoothing, const s_args *a, float *loss)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float l = 0;
    if (i < n) {
        float gscale = a->dscale;
        const T *zi = z + (long)i * k;
        float mx = to_f<T>(zi[0]);
        for (int j = 1; j < k; j++)
            mx = fmaxf(mx, to_f<T>(zi[j]));
        float se = 0, sz = 0;
        for (int j = 0; j < k; j++) {
            float d = to_f<T>(zi[j]) - mx;
            se += expf(d);
            sz += d;
        }
        float lse = logf(se);
        int lab = y[i];
        l = -(1.0f - smoothing) * (to_f<T>(zi[lab]) - mx - lse) -
            smoothing * (sz / k - lse);
        for (int j = 0; j < k; j++) {
            float p = expf(to_f<T>(zi[j]) - mx - lse);
            float q = smoothing / k + (j == lab ? 1.0f - smoothing : 0.0f);
            dz[(long)i * k + j] = from_f<T>(gscale * (p - q));
        }
    }
    for (int s = 16; s > 0; s >>= 1)
        l += __shfl_down_sync(0xffffffffu, l, s);
    if ((threadIdx.x & 31) == 0 && l != 0)
        atomicAdd(loss, l);
}

/* dz = da * (a > 0), in place on da */
template <typename T> __global__ void k_relu_bwd(const T *a, T *d, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n && !(to_f<T>(a[i]) > 0))
        d[i] = from_f<T>(0.0f);
}

/* sums of squares, block by block: part[2b] = sum w^2, part[2b+1] = sum
   (g * inv)^2 over block b's elements, with inv = a->inv_scale (unscale)
   or 1 (gradients in true units); flag on non-finite g. blockDim.x 256.
   k_norms_fold then adds the blocks in a fixed order (no atomics: the same
   bits every run, with or without graphs; LARS reads them). */
template <typename T>
__global__ void k_norms(const float *w, const T *g, long n, const s_args *a, int unscale,
                        float *part, int *flag)
{
    __shared__ float sw[256], sg[256];
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    float x = 0, y = 0;
    if (i < n) {
        float gv = to_f<T>(g[i]);
        if (!isfinite(gv))
            *flag = 1;
        gv *= unscale ? a->inv_scale : 1.0f;
        x = w[i] * w[i];
        y = gv * gv;
    }
    sw[threadIdx.x] = x;
    sg[threadIdx.x] = y;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            sw[threadIdx.x] += sw[threadIdx.x + s];
            sg[threadIdx.x] += sg[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = sw[0];
        part[2 * blockIdx.x + 1] = sg[0];
    }
}

/* out[0] += sum of part[2b], out[1] += sum of part[2b+1] over nblk blocks,
   in a fixed order. One block of 256 threads. */
__global__ static void k_norms_fold(const float *part, int nblk, float *out)
{
    __shared__ float sw[256], sg[256];
    float x = 0, y = 0;
    for (int b = threadIdx.x; b < nblk; b += 256) {
        x += part[2 * b];
        y += part[2 * b + 1];
    }
    sw[threadIdx.x] = x;
    sg[threadIdx.x] = y;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            sw[threadIdx.x] += sw[threadIdx.x + s];
            sg[threadIdx.x] += sg[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[0] += sw[0];
        out[1] += sg[0];
    }
}

/* |w|^2 and |g * inv|^2 of n elements added to out[0], out[1] on stream st
   (k_norms then k_norms_fold); part: 2 * ceil(n / 256) floats of scratch,
   free again once the fold has run (the next call on st may reuse it). */
template <typename T>
static void trn_norms(cudaStream_t st, const float *w, const T *g, long n,
                      const s_args *a, int unscale, float *out, int *flag, float *part)
{
    int nblk = (int)((n + 255) / 256);
    k_norms<T><<<nblk, 256, 0, st>>>(w, g, n, a, unscale, part, flag);
    k_norms_fold<<<1, 256, 0, st>>>(part, nblk, out);
}

/* fused: g = g_lp * inv (+ wd*w), momentum, update master, refresh lp copy;
   nothing when *flag (an inf/NaN gradient: the step is skipped). inv =
   a->inv_scale (unscale) or 1, lr = a->lr. mode 0 SGD (nesterov), 1 LARS
   weight, 2 LARS bias (no wd, no trust). G: the gradient's element type
   (T, or fp32 sums of the ranks). */
template <typename T, typename G>
__global__ void k_update(float *w, T *wlp, const G *glp, float *m, long n,
                         const s_args *a, int unscale, float mu, float wd, int nesterov,
                         int mode, float trust, const float *norms, const int *flag)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n || *flag)
        return;
    /* each product and sum rounded on its own (__f*_rn: nvcc would fuse
       them into FMAs), in optim.c's order, which is built without
       contraction: SGD's updates (plain, Nesterov, weight decay, unscaled)
       and LARS's biases round as the CPU's. LARS's weights do not quite:
       the CPU takes the norms and the trust ratio in double and rounds
       lr * trust once; here they are float and the step is rounded twice */
    float lr = a->lr;
    float g = __fmul_rn(to_f<G>(glp[i]), unscale ? a->inv_scale : 1.0f);
    float wi = w[i];
    if (mode == 0) {
        g = __fadd_rn(g, __fmul_rn(wd, wi));
        float v = __fadd_rn(__fmul_rn(mu, m[i]), g);
        m[i] = v;
        wi = __fsub_rn(wi, __fmul_rn(lr, nesterov ? __fadd_rn(g, __fmul_rn(mu, v)) : v));
    } else if (mode == 1) {
        float wn = sqrtf(norms[0]), gn = sqrtf(norms[1]);
        float local = (wn > 0 && gn > 0) ? trust * wn / (gn + wd * wn) : 1.0f;
        float v = __fadd_rn(__fmul_rn(mu, m[i]),
                            __fmul_rn(__fmul_rn(lr, local), __fadd_rn(g, __fmul_rn(wd, wi))));
        m[i] = v;
        wi = __fsub_rn(wi, v);
    } else {
        float v = __fadd_rn(__fmul_rn(mu, m[i]), __fmul_rn(lr, g));
        m[i] = v;
        wi = __fsub_rn(wi, v);
    }
    w[i] = wi;
    wlp[i] = from_f<T>(wi);
}

#endif
