/*  backend_cuda.cu - the CUDA backend of jizhi-train (MLP, one GPU).

    Built only by `make cuda` (needs nvcc; never by `make all`/`make test`),
    linked into jizhi-train-cuda, selected with --backend cuda. It takes
    over the training step of an MLP; evaluation, checkpoints and metrics
    stay on the CPU side, fed by sync_to_host.

    Numerics mirror the CPU emulation (net.c, precision.c) so that
    scripts/gpu-check.sh can compare the two: activations, activation
    gradients and weight gradients are stored in the compute format (fp32,
    bf16 or fp16), GEMMs run on cuBLAS (cublasGemmEx: bf16/fp16 tensor-core
    GEMMs with fp32 accumulation; plain fp32 for fp32), master weights and
    momentum stay fp32, the loss is scaled before backward, any inf/NaN in
    a weight gradient raises a device flag and the step is skipped (the
    trainer's scaler then halves the scale). Optimisers: SGD with momentum
    (Nesterov option) and LARS, with weight decay on weights only, as on
    the CPU. Own kernels do the rest: bias+ReLU, softmax cross-entropy,
    ReLU backward, bias gradients, norms, the fused unscale/update.

    Data-parallel ranks (set_comm, step_dist): each rank runs its shard
    with the weight gradients scaled by shard/global batch; after each
    layer's backward the gradients of that layer are final and the device
    gradient exchange (dist_dev.h) is told (trn_devdist_stage): on the
    device path it records an event and the NCCL communication stream
    packs and all-reduces the buckets that layer completes while this
    stream computes the next layer's backward. The optimiser step waits
    for the communication stream and reads the summed fp32 gradients (true
    units); the overflow check and the norms run on the sums, so every rank
    takes the same decision.

    Error handling: CUDA_CHECK/CUBLAS_CHECK exit the process (the trainer
    only, never a daemon; CONVENTIONS.md).
*/
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/cuda_check.cuh"
#include "trainer/dev_elem.cuh" /* C++ templates: outside extern "C" */

extern "C" {
#include "trainer/dist_dev.h"
#include "trainer/trn.h"
}

#define CUBLAS_CHECK(x)                                                                  \
    do {                                                                                 \
        cublasStatus_t s_ = (x);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
            fprintf(stderr, "jizhi-train: cuBLAS error %d at %s:%d\n", (int)s_,          \
                    __FILE__, __LINE__);                                                 \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define MAXL 33
/* scratch: [0] loss sum, [1+2l] |w_l|^2, [2+2l] |g_l|^2, [BIAS] |b|^2, [BIAS+1] |g_b|^2
 */
#define SCR_BIAS (2 * MAXL + 1)
#define SCR_N (2 * MAXL + 4)

/* ---- element conversions ---------------------------------------------------- */

/* to_f and from_f: dev_elem.cuh */

template <typename T> static cudaDataType_t dtype();
template <> cudaDataType_t dtype<float>()
{
    return CUDA_R_32F;
}
template <> cudaDataType_t dtype<__nv_bfloat16>()
{
    return CUDA_R_16BF;
}
template <> cudaDataType_t dtype<__half>()
{
    return CUDA_R_16F;
}

/* ---- kernels ----------------------------------------------------------------- */

template <typename T> __global__ void k_convert(const float *x, T *y, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = from_f<T>(x[i]);
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

/* one thread per row: loss sum (fp32 accumulate, added to *loss) and
   dlogits = gscale * (softmax - target), smoothing as on the CPU */
template <typename T>
__global__ void k_softmax_ce(const T *z, const unsigned char *y, T *dz, int n, int k,
                             float smoothing, float gscale, float *loss)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
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
    float l =
        -(1.0f - smoothing) * (to_f<T>(zi[lab]) - mx - lse) - smoothing * (sz / k - lse);
    atomicAdd(loss, l);
    for (int j = 0; j < k; j++) {
        float p = expf(to_f<T>(zi[j]) - mx - lse);
        float q = smoothing / k + (j == lab ? 1.0f - smoothing : 0.0f);
        dz[(long)i * k + j] = from_f<T>(gscale * (p - q));
    }
}

/* dz = da * (a > 0), in place on da */
template <typename T> __global__ void k_relu_bwd(const T *a, T *d, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n && !(to_f<T>(a[i]) > 0))
        d[i] = from_f<T>(0.0f);
}

/* db[j] = sum_i dz[i,j], rounded through T like a stored gradient */
template <typename T> __global__ void k_bias_grad(const T *dz, T *db, int n, int m)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= m)
        return;
    float s = 0;
    for (int i = 0; i < n; i++)
        s += to_f<T>(dz[(long)i * m + j]);
    db[j] = from_f<T>(s);
}

/* sums of squares: out[0] += sum w^2, out[1] += sum (g/scale)^2; flag on
   non-finite g */
template <typename T>
__global__ void k_norms(const float *w, const T *g, long n, float inv_scale, float *out,
                        int *flag)
{
    __shared__ float sw[256], sg[256];
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    float a = 0, b = 0;
    if (i < n) {
        float gv = to_f<T>(g[i]);
        if (!isfinite(gv))
            *flag = 1;
        gv *= inv_scale;
        a = w[i] * w[i];
        b = gv * gv;
    }
    sw[threadIdx.x] = a;
    sg[threadIdx.x] = b;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            sw[threadIdx.x] += sw[threadIdx.x + s];
            sg[threadIdx.x] += sg[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(&out[0], sw[0]);
        atomicAdd(&out[1], sg[0]);
    }
}

/* fused: g = g_lp/scale (+ wd*w), momentum, update master, refresh lp copy.
   mode 0 SGD (nesterov), 1 LARS weight, 2 LARS bias (no wd, no trust).
   G: the gradient's element type (T, or fp32 sums of the ranks). */
template <typename T, typename G>
__global__ void k_update(float *w, T *wlp, const G *glp, float *m, long n,
                         float inv_scale, float lr, float mu, float wd, int nesterov,
                         int mode, float trust, const float *norms)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float g = to_f<G>(glp[i]) * inv_scale;
    float wi = w[i];
    if (mode == 0) {
        g += wd * wi;
        float v = mu * m[i] + g;
        m[i] = v;
        wi -= lr * (nesterov ? g + mu * v : v);
    } else if (mode == 1) {
        float wn = sqrtf(norms[0]), gn = sqrtf(norms[1]);
        float local = (wn > 0 && gn > 0) ? trust * wn / (gn + wd * wn) : 1.0f;
        float v = mu * m[i] + lr * local * (g + wd * wi);
        m[i] = v;
        wi -= v;
    } else {
        float v = mu * m[i] + lr * g;
        m[i] = v;
        wi -= v;
    }
    w[i] = wi;
    wlp[i] = from_f<T>(wi);
}

/* ---- state ---------------------------------------------------------------- */

/* data-parallel settings (set_comm): kept across attach/detach */
typedef struct {
    trn_comm *comm; /* borrowed; NULL: one rank */
    trn_dist_opts o;
    trn_grad_path path;
} s_ranks;

typedef struct {
    cublasHandle_t blas;
    cudaStream_t stream;
    int nl;             /* linear layers */
    int dims[MAXL + 1]; /* dims[0] input ... dims[nl] classes */
    trn_precision prec;
    int esize;                                      /* bytes per stored element */
    float *w[MAXL], *b[MAXL], *mw[MAXL], *mb[MAXL]; /* fp32 master + momentum */
    void *wlp[MAXL], *blp[MAXL];                    /* compute-format copies */
    void *gw[MAXL], *gb[MAXL];                      /* gradients, compute format */
    void *act[MAXL + 1]; /* act[0] input, act[i+1] output of layer i */
    void *dact[MAXL + 1];
    float *xin; /* fp32 input staging */
    unsigned char *y;
    float *scratch; /* loss, norms[2*MAXL], gsq */
    int *flag;
    int cap;
    trn_opt_kind opt;
    double momentum, wd, trust;
    int nesterov;
    double smoothing;
    s_ranks rk;
    trn_devdist *dd; /* with rk.comm: built at attach */
} s_cuda;

static void s_free_bufs(s_cuda *c)
{
    for (int i = 0; i <= c->nl; i++) {
        cudaFree(c->act[i]);
        cudaFree(c->dact[i]);
        c->act[i] = c->dact[i] = NULL;
    }
    cudaFree(c->xin);
    cudaFree(c->y);
    c->xin = NULL;
    c->y = NULL;
    c->cap = 0;
}

static void s_reserve(s_cuda *c, int nb)
{
    if (nb <= c->cap)
        return;
    s_free_bufs(c);
    for (int i = 0; i <= c->nl; i++) {
        CUDA_CHECK(cudaMalloc(&c->act[i], (size_t)nb * c->dims[i] * c->esize));
        CUDA_CHECK(cudaMalloc(&c->dact[i], (size_t)nb * c->dims[i] * c->esize));
    }
    CUDA_CHECK(cudaMalloc(&c->xin, (size_t)nb * c->dims[0] * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&c->y, (size_t)nb));
    c->cap = nb;
}

static unsigned s_blocks(long n)
{
    return (unsigned)((n + 255) / 256);
}

template <typename T>
static void s_gemm(s_cuda *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                   int k, const void *a, int lda, const void *b, int ldb, void *cc,
                   int ldc, float beta)
{
    float alpha = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(c->blas, ta, tb, m, n, k, &alpha, a, dtype<T>(), lda, b,
                              dtype<T>(), ldb, &beta, cc, dtype<T>(), ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* Copies a batch of nb examples in, runs the forward pass and the loss,
   leaving dlogits = dscale * d(summed loss) in c->dact[nl] and the summed
   loss in c->scratch[0] (on c->stream; nb > 0, s_reserve done). */
template <typename T>
static void s_forward_loss(s_cuda *c, const float *x, const uint8_t *y, int nb,
                           float dscale)
{
    cudaStream_t st = c->stream;
    int d0 = c->dims[0];
    CUDA_CHECK(cudaMemcpyAsync(c->xin, x, (size_t)nb * d0 * sizeof(float),
                               cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaMemcpyAsync(c->y, y, (size_t)nb, cudaMemcpyHostToDevice, st));
    k_convert<T>
        <<<s_blocks((long)nb * d0), 256, 0, st>>>(c->xin, (T *)c->act[0], (long)nb * d0);
    for (int l = 0; l < c->nl; l++) {
        int k = c->dims[l], m = c->dims[l + 1];
        s_gemm<T>(c, CUBLAS_OP_T, CUBLAS_OP_N, m, nb, k, c->wlp[l], k, c->act[l], k,
                  c->act[l + 1], m, 0.0f);
        k_bias_act<T><<<s_blocks((long)nb * m), 256, 0, st>>>(
            (T *)c->act[l + 1], (const T *)c->blp[l], nb, m, l < c->nl - 1);
    }
    int K = c->dims[c->nl];
    k_softmax_ce<T><<<(nb + 127) / 128, 128, 0, st>>>(
        (const T *)c->act[c->nl], c->y, (T *)c->dact[c->nl], nb, K, (float)c->smoothing,
        dscale, c->scratch);
}

/* The backward pass from c->dact[nl] into c->gw/c->gb, last layer first.
   Once layer l's gradients are final (before its input gradient is
   computed) it calls layer_done(ctx, l) when given; a nonzero return is
   remembered and returned as -1 at the end (the pass always completes). */
template <typename T>
static int s_backward(s_cuda *c, int nb, int (*layer_done)(void *ctx, int l), void *ctx)
{
    cudaStream_t st = c->stream;
    int rc = 0;
    for (int l = c->nl - 1; l >= 0; l--) {
        int k = c->dims[l], m = c->dims[l + 1];
        if (l < c->nl - 1)
            k_relu_bwd<T><<<s_blocks((long)nb * m), 256, 0, st>>>(
                (const T *)c->act[l + 1], (T *)c->dact[l + 1], (long)nb * m);
        /* dW^T (k x m) = X^T (k x nb) . dY (nb x m) */
        s_gemm<T>(c, CUBLAS_OP_N, CUBLAS_OP_T, k, m, nb, c->act[l], k, c->dact[l + 1], m,
                  c->gw[l], k, 0.0f);
        k_bias_grad<T><<<s_blocks(m), 256, 0, st>>>((const T *)c->dact[l + 1],
                                                    (T *)c->gb[l], nb, m);
        if (layer_done && layer_done(ctx, l) != 0)
            rc = -1;
        if (l > 0) /* dX^T (k x nb) = W^T (k x m) . dY^T (m x nb) */
            s_gemm<T>(c, CUBLAS_OP_N, CUBLAS_OP_N, k, nb, m, c->wlp[l], k, c->dact[l + 1],
                      m, c->dact[l], k, 0.0f);
    }
    return rc;
}

/* Waits for the step's norm kernels on st and reads their sums back: the
   squared gradient norm (weights and biases) into *grad_sqnorm, the
   overflow flag into *overflow; returns the loss sum (scratch[0]). */
static float s_read_norms(s_cuda *c, cudaStream_t st, double *grad_sqnorm, int *overflow)
{
    float host[SCR_N];
    CUDA_CHECK(
        cudaMemcpyAsync(host, c->scratch, sizeof host, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(
        cudaMemcpyAsync(overflow, c->flag, sizeof *overflow, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    double gsq = host[SCR_BIAS + 1];
    for (int l = 0; l < c->nl; l++)
        gsq += host[2 + 2 * l];
    *grad_sqnorm = gsq;
    return host[0];
}

template <typename T>
static double s_step_t(s_cuda *c, const float *x, const uint8_t *y, int nb, double lr,
                       double loss_scale, int *overflow, double *grad_sqnorm)
{
    cudaStream_t st = c->stream;
    s_reserve(c, nb);
    CUDA_CHECK(cudaMemsetAsync(c->scratch, 0, SCR_N * sizeof(float), st));
    CUDA_CHECK(cudaMemsetAsync(c->flag, 0, sizeof(int), st));
    /* dlogits: gradient of loss_scale * mean loss */
    s_forward_loss<T>(c, x, y, nb, (float)(loss_scale / nb));
    s_backward<T>(c, nb, NULL, NULL);
    /* norms (for LARS and |G|^2) and the overflow flag */
    float inv = (float)(1.0 / loss_scale);
    for (int l = 0; l < c->nl; l++) {
        long nw = (long)c->dims[l] * c->dims[l + 1], nbias = c->dims[l + 1];
        k_norms<T><<<s_blocks(nw), 256, 0, st>>>(c->w[l], (const T *)c->gw[l], nw, inv,
                                                 c->scratch + 1 + 2 * l, c->flag);
        k_norms<T><<<s_blocks(nbias), 256, 0, st>>>(c->b[l], (const T *)c->gb[l], nbias,
                                                    inv, c->scratch + SCR_BIAS, c->flag);
    }
    int flag = 0;
    float loss_sum = s_read_norms(c, st, grad_sqnorm, &flag);
    *overflow = flag;
    if (!flag) {
        float mu = (float)c->momentum, wd = (float)c->wd;
        int lars = c->opt == TRN_LARS;
        for (int l = 0; l < c->nl; l++) {
            long nw = (long)c->dims[l] * c->dims[l + 1], nbias = c->dims[l + 1];
            k_update<T, T><<<s_blocks(nw), 256, 0, st>>>(
                c->w[l], (T *)c->wlp[l], (const T *)c->gw[l], c->mw[l], nw, inv,
                (float)lr, mu, wd, c->nesterov, lars ? 1 : 0, (float)c->trust,
                c->scratch + 1 + 2 * l);
            k_update<T, T><<<s_blocks(nbias), 256, 0, st>>>(
                c->b[l], (T *)c->blp[l], (const T *)c->gb[l], c->mb[l], nbias, inv,
                (float)lr, mu, 0.0f, c->nesterov, lars ? 2 : 0, (float)c->trust, NULL);
        }
        CUDA_CHECK(cudaGetLastError());
    }
    return loss_sum / nb;
}

/* s_backward's hook on a data-parallel rank: layer l's buckets are ready. */
static int s_stage_layer(void *ctx, int l)
{
    s_cuda *c = (s_cuda *)ctx;
    return trn_devdist_stage(c->dd, c->nl - 1 - l) < 0 ? -1 : 0;
}

/* One rank's step of a data-parallel run (see trn_backend.step_dist). */
template <typename T>
static double s_step_dist_t(s_cuda *c, const float *x, const uint8_t *y, int nb,
                            int global, double lr, double loss_scale, int *overflow,
                            double *grad_sqnorm)
{
    cudaStream_t st = c->stream;
    if (nb > 0)
        s_reserve(c, nb);
    CUDA_CHECK(cudaMemsetAsync(c->scratch, 0, SCR_N * sizeof(float), st));
    CUDA_CHECK(cudaMemsetAsync(c->flag, 0, sizeof(int), st));
    void *g[2 * MAXL];
    for (int l = 0; l < c->nl; l++) {
        g[2 * l] = c->gw[l];
        g[2 * l + 1] = c->gb[l];
    }
    int rc = trn_devdist_begin(c->dd, g, c->prec, (float)(1.0 / loss_scale));
    if (nb > 0) {
        /* the shard's share of the global mean: loss_scale / global; each
           layer's buckets go as soon as its gradients are final, while the
           next layer's backward runs */
        s_forward_loss<T>(c, x, y, nb, (float)(loss_scale / global));
        if (s_backward<T>(c, nb, s_stage_layer, c) != 0)
            rc = -1;
    } else { /* no examples this step: zeros, through the same collectives */
        for (int l = c->nl - 1; l >= 0; l--) {
            long nw = (long)c->dims[l] * c->dims[l + 1], nbias = c->dims[l + 1];
            CUDA_CHECK(cudaMemsetAsync(c->gw[l], 0, (size_t)nw * c->esize, st));
            CUDA_CHECK(cudaMemsetAsync(c->gb[l], 0, (size_t)nbias * c->esize, st));
            if (trn_devdist_stage(c->dd, c->nl - 1 - l) < 0)
                rc = -1;
        }
    }
    if (trn_devdist_finish(c->dd) < 0) /* the compute stream now waits for the sums */
        rc = -1;
    /* norms and the overflow flag on the sums (true units: scale 1) */
    for (int l = 0; l < c->nl; l++) {
        long nw = (long)c->dims[l] * c->dims[l + 1], nbias = c->dims[l + 1];
        k_norms<float>
            <<<s_blocks(nw), 256, 0, st>>>(c->w[l], trn_devdist_grad(c->dd, 2 * l), nw,
                                           1.0f, c->scratch + 1 + 2 * l, c->flag);
        k_norms<float><<<s_blocks(nbias), 256, 0, st>>>(
            c->b[l], trn_devdist_grad(c->dd, 2 * l + 1), nbias, 1.0f,
            c->scratch + SCR_BIAS, c->flag);
    }
    int flag = 0;
    float loss_sum = s_read_norms(c, st, grad_sqnorm, &flag);
    *overflow = flag;
    if (rc < 0)
        return -1;
    if (!flag) {
        float mu = (float)c->momentum, wd = (float)c->wd;
        int lars = c->opt == TRN_LARS;
        for (int l = 0; l < c->nl; l++) {
            long nw = (long)c->dims[l] * c->dims[l + 1], nbias = c->dims[l + 1];
            k_update<T, float><<<s_blocks(nw), 256, 0, st>>>(
                c->w[l], (T *)c->wlp[l], trn_devdist_grad(c->dd, 2 * l), c->mw[l], nw,
                1.0f, (float)lr, mu, wd, c->nesterov, lars ? 1 : 0, (float)c->trust,
                c->scratch + 1 + 2 * l);
            k_update<T, float><<<s_blocks(nbias), 256, 0, st>>>(
                c->b[l], (T *)c->blp[l], trn_devdist_grad(c->dd, 2 * l + 1), c->mb[l],
                nbias, 1.0f, (float)lr, mu, 0.0f, c->nesterov, lars ? 2 : 0,
                (float)c->trust, NULL);
        }
        CUDA_CHECK(cudaGetLastError());
    }
    return loss_sum;
}

/* ---- trn_backend interface ------------------------------------------------------ */

static int s_parse_arch(s_cuda *c, const char *arch, char *err)
{
    if (strncmp(arch, "mlp:", 4) != 0) {
        snprintf(err, TRN_ERRLEN, "the CUDA backend runs MLPs only (model %s)", arch);
        return -1;
    }
    const char *p = arch + 4;
    int n = 0;
    while (*p && n <= MAXL) {
        c->dims[n++] = atoi(p);
        p = strchr(p, '-');
        if (!p)
            break;
        p++;
    }
    if (n < 2 || n > MAXL + 1) {
        snprintf(err, TRN_ERRLEN, "bad architecture %s", arch);
        return -1;
    }
    c->nl = n - 1;
    return 0;
}

template <typename T> static void s_upload_lp(s_cuda *c)
{
    for (int l = 0; l < c->nl; l++) {
        long nw = (long)c->dims[l] * c->dims[l + 1], nbias = c->dims[l + 1];
        k_convert<T><<<s_blocks(nw), 256, 0, c->stream>>>(c->w[l], (T *)c->wlp[l], nw);
        k_convert<T>
            <<<s_blocks(nbias), 256, 0, c->stream>>>(c->b[l], (T *)c->blp[l], nbias);
    }
    CUDA_CHECK(cudaGetLastError());
}

static void s_detach(void *self)
{
    s_cuda *c = (s_cuda *)self;
    s_ranks keep = c->rk;
    if (!c->blas)
        return;
    cudaStreamSynchronize(c->stream);
    /* auto fusion decided: a re-attach (precision schedule, load, live
       change) keeps the layout instead of measuring again */
    if (c->dd && keep.o.fusion_bytes < 0 && !trn_devdist_tuning(c->dd) &&
        trn_devdist_path(c->dd) == TRN_GRAD_DEVICE && keep.comm && keep.comm->size > 1)
        keep.o.fusion_bytes = trn_devdist_fusion_bytes(c->dd);
    trn_devdist_destroy(&c->dd);
    for (int l = 0; l < c->nl; l++) {
        cudaFree(c->w[l]), cudaFree(c->b[l]), cudaFree(c->mw[l]), cudaFree(c->mb[l]);
        cudaFree(c->wlp[l]), cudaFree(c->blp[l]), cudaFree(c->gw[l]), cudaFree(c->gb[l]);
    }
    s_free_bufs(c);
    cudaFree(c->scratch);
    cudaFree(c->flag);
    cublasDestroy(c->blas);
    cudaStreamDestroy(c->stream);
    memset(c, 0, sizeof *c);
    c->rk = keep;
}

static int s_attach(void *self, trn_net *net, const trn_config *cfg, char *err)
{
    s_cuda *c = (s_cuda *)self;
    s_detach(self);
    if (s_parse_arch(c, trn_net_arch(net), err) < 0)
        return -1;
    if (trn_net_nparams(net) != 2 * c->nl) {
        snprintf(err, TRN_ERRLEN, "unexpected parameter layout");
        return -1;
    }
    int opt = trn_optim_from_name(cfg->optimizer);
    if (opt != TRN_SGD && opt != TRN_LARS) {
        snprintf(err, TRN_ERRLEN,
                 "the CUDA backend supports --optimizer sgd and lars (not %s)",
                 cfg->optimizer);
        return -1;
    }
    if (cfg->per_layer_scale) {
        snprintf(err, TRN_ERRLEN, "the CUDA backend has no per-layer loss scales");
        return -1;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        snprintf(err, TRN_ERRLEN, "no CUDA device");
        return -1;
    }
    c->opt = (trn_opt_kind)opt;
    c->momentum = cfg->momentum;
    c->wd = cfg->weight_decay;
    c->trust = cfg->trust;
    c->nesterov = cfg->nesterov;
    c->smoothing = cfg->label_smoothing;
    c->prec = trn_precision_from_name(cfg->precision);
    c->esize = c->prec == TRN_FP32 ? 4 : 2;
    CUDA_CHECK(cudaStreamCreate(&c->stream));
    CUBLAS_CHECK(cublasCreate(&c->blas));
    CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    CUBLAS_CHECK(cublasSetMathMode(c->blas, c->prec == TRN_FP32 ? CUBLAS_PEDANTIC_MATH
                                                                : CUBLAS_DEFAULT_MATH));
    for (int l = 0; l < c->nl; l++) {
        trn_param *pw = trn_net_param(net, 2 * l), *pb = trn_net_param(net, 2 * l + 1);
        long nw = (long)c->dims[l] * c->dims[l + 1], nbias = c->dims[l + 1];
        if (pw->n != nw || pb->n != nbias) {
            snprintf(err, TRN_ERRLEN, "parameter sizes do not match the architecture");
            return -1;
        }
        CUDA_CHECK(cudaMalloc(&c->w[l], nw * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&c->mw[l], nw * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&c->b[l], nbias * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&c->mb[l], nbias * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&c->wlp[l], nw * c->esize));
        CUDA_CHECK(cudaMalloc(&c->gw[l], nw * c->esize));
        CUDA_CHECK(cudaMalloc(&c->blp[l], nbias * c->esize));
        CUDA_CHECK(cudaMalloc(&c->gb[l], nbias * c->esize));
        CUDA_CHECK(
            cudaMemcpy(c->w[l], pw->w, nw * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(
            cudaMemcpy(c->mw[l], pw->m, nw * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(
            cudaMemcpy(c->b[l], pb->w, nbias * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(
            cudaMemcpy(c->mb[l], pb->m, nbias * sizeof(float), cudaMemcpyHostToDevice));
    }
    CUDA_CHECK(cudaMalloc(&c->scratch, SCR_N * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&c->flag, sizeof(int)));
    if (c->prec == TRN_BF16)
        s_upload_lp<__nv_bfloat16>(c);
    else if (c->prec == TRN_FP16)
        s_upload_lp<__half>(c);
    else
        s_upload_lp<float>(c);
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    if (c->rk.comm) { /* the gradient exchange: layer l's params final at stage nl-1-l */
        int np = 2 * c->nl;
        long pn[2 * MAXL];
        int stage[2 * MAXL];
        for (int l = 0; l < c->nl; l++) {
            pn[2 * l] = (long)c->dims[l] * c->dims[l + 1];
            pn[2 * l + 1] = c->dims[l + 1];
            stage[2 * l] = stage[2 * l + 1] = c->nl - 1 - l;
        }
        c->dd = trn_devdist_new(c->rk.comm, np, pn, stage, c->nl, &c->rk.o, c->rk.path,
                                (void *)c->stream, !cfg->quiet, err);
        if (!c->dd)
            return -1;
    }
    return 0;
}

static double s_step(void *self, const float *x, const uint8_t *y, int nb, double lr,
                     double loss_scale, int *overflow, double *grad_sqnorm)
{
    s_cuda *c = (s_cuda *)self;
    if (c->prec == TRN_BF16)
        return s_step_t<__nv_bfloat16>(c, x, y, nb, lr, loss_scale, overflow,
                                       grad_sqnorm);
    if (c->prec == TRN_FP16)
        return s_step_t<__half>(c, x, y, nb, lr, loss_scale, overflow, grad_sqnorm);
    return s_step_t<float>(c, x, y, nb, lr, loss_scale, overflow, grad_sqnorm);
}

static double s_step_dist(void *self, const float *x, const uint8_t *y, int nb,
                          int global, double lr, double loss_scale, int *overflow,
                          double *grad_sqnorm)
{
    s_cuda *c = (s_cuda *)self;
    if (!c->dd) {
        fprintf(stderr,
                "jizhi-train: cuda backend: a data-parallel step without set_comm\n");
        return -1;
    }
    if (c->prec == TRN_BF16)
        return s_step_dist_t<__nv_bfloat16>(c, x, y, nb, global, lr, loss_scale, overflow,
                                            grad_sqnorm);
    if (c->prec == TRN_FP16)
        return s_step_dist_t<__half>(c, x, y, nb, global, lr, loss_scale, overflow,
                                     grad_sqnorm);
    return s_step_dist_t<float>(c, x, y, nb, global, lr, loss_scale, overflow,
                                grad_sqnorm);
}

static int s_set_comm(void *self, trn_comm *comm, const struct trn_dist_opts *o,
                      const char *grad_path, char *msg)
{
    s_cuda *c = (s_cuda *)self;
    trn_grad_path path = !strcmp(grad_path, "device") ? TRN_GRAD_DEVICE
                         : !strcmp(grad_path, "host") ? TRN_GRAD_HOST
                                                      : trn_devdist_auto_path(comm, o);
    if (trn_devdist_check(comm, o, path, msg) < 0)
        return -1;
    /* the rank's GPU: the NCCL backend has chosen it already; with another
       comm (MPI, host path) the first of the rank's JIZHI_GPUS_PER_RANK
       devices by its index on the node (OpenMPI's local rank, else the
       comm's node grouping), modulo the visible ones */
    if (comm->size > 1 && strcmp(comm->ops->name, "nccl")) {
        int ndev = 0, local = 0;
        const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        if (lr && *lr)
            local = atoi(lr);
        else
            for (int r = 0; r < comm->rank; r++)
                local += comm->node[r] == comm->node[comm->rank];
        const char *gpr_env = getenv("JIZHI_GPUS_PER_RANK");
        int gpr = gpr_env && atoi(gpr_env) > 0 ? atoi(gpr_env) : 1;
        if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0)
            CUDA_CHECK(cudaSetDevice((local * gpr) % ndev));
    }
    c->rk.comm = comm;
    c->rk.o = *o;
    c->rk.path = path;
    if (path == TRN_GRAD_DEVICE)
        snprintf(msg, TRN_ERRLEN,
                 "gradients summed in GPU memory (%s on the NCCL stream, %s backward%s)",
                 o->algo == TRN_AR_NATIVE ? "ncclAllReduce"
                 : o->algo == TRN_AR_HIER ? "hierarchical on ncclSend/ncclRecv"
                                          : "ring on ncclSend/ncclRecv",
                 o->overlap ? "overlapped with" : "after",
                 o->fusion_bytes < 0 && comm->size > 1
                     ? "; fusion auto: curve timed on the device, layout chosen after 3 "
                       "timed steps"
                     : "");
    else
        snprintf(msg, TRN_ERRLEN,
                 "gradients copied to host memory and summed by the comm layer (%s), "
                 "after backward%s",
                 comm->ops->name, o->fusion_bytes < 0 ? "; fusion auto: 4096 KiB" : "");
    return 0;
}

static void s_sync_to_host(void *self, trn_net *net)
{
    s_cuda *c = (s_cuda *)self;
    if (!c->blas)
        return;
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    for (int l = 0; l < c->nl; l++) {
        trn_param *pw = trn_net_param(net, 2 * l), *pb = trn_net_param(net, 2 * l + 1);
        CUDA_CHECK(
            cudaMemcpy(pw->w, c->w[l], pw->n * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(
            cudaMemcpy(pw->m, c->mw[l], pw->n * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(
            cudaMemcpy(pb->w, c->b[l], pb->n * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(
            cudaMemcpy(pb->m, c->mb[l], pb->n * sizeof(float), cudaMemcpyDeviceToHost));
    }
    trn_net_sync_weights(net);
}

extern "C" trn_backend *trn_cuda_backend_new(char *err)
{
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev < 1) {
        snprintf(err, TRN_ERRLEN, "no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return NULL;
    }
    trn_backend *b = (trn_backend *)calloc(1, sizeof *b);
    s_cuda *c = (s_cuda *)calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    b->name = "cuda";
    b->attach = s_attach;
    b->step = s_step;
    b->sync_to_host = s_sync_to_host;
    b->set_comm = s_set_comm;
    b->step_dist = s_step_dist;
    b->detach = s_detach;
    b->self = c;
    return b;
}

extern "C" void trn_cuda_backend_destroy(trn_backend *b)
{
    if (!b)
        return;
    s_detach(b->self);
    free(b->self);
    free(b);
}
