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
    the CPU. Own kernels (cuda_mlp_kernels.cuh) do the rest: bias+ReLU,
    softmax cross-entropy, ReLU backward, norms, the fused unscale/update;
    bias gradients are a GEMM against a vector of ones.

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

    Device-resident data (set_data, set_order, step_at; --gpu-data): the
    training set is copied to the device once and the epoch's order once
    per epoch; each step gathers its batch there (k_gather, index logic in
    gather.h, shared with the host's gather). The per-step scalars (lr,
    loss scales, the batch's place in the order) reach the kernels through
    a device struct copied in from pinned memory by the step's first
    operation, and the update kernels skip themselves when the overflow
    flag is up, so the whole one-rank step needs no host decision and is
    replayed as a CUDA graph per batch size (--cuda-graphs), captured after
    one eager warm-up step (cuda_mlp_graph.cuh; a failed capture or launch
    falls back to plain launches under auto, ends the run with exit 2
    under on: graph_policy.h). One wait per step remains: the sums and the
    flag read back at its end, for the trainer's loss scaler and metrics.

    Error handling: CUDA_CHECK/CUBLAS_CHECK exit the process (the trainer
    only, never a daemon; CONVENTIONS.md).
*/
#include <cublasLt.h>
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
#include "trainer/graph_policy.h"
#include "trainer/trn.h"
#ifdef TRN_WITH_CUDNN /* backend_cudnn.cu: the CNN */
trn_backend *trn_cudnn_backend_new(char *err);
void trn_cudnn_backend_destroy(trn_backend *b);
double trn_cudnn_step_dev(trn_backend *b, const float *X, const unsigned char *Y,
                          const int *perm, int dim, int at, int nb, int global, double lr,
                          double loss_scale, int *overflow, double *grad_sqnorm);
void trn_cudnn_set_comm(trn_backend *b, trn_comm *comm, const trn_dist_opts *o, int path,
                        int verbose);
double trn_cudnn_step_dist(trn_backend *b, const float *x, const uint8_t *y, int nb,
                           int global, double lr, double loss_scale, int *overflow,
                           double *grad_sqnorm);
#endif
}

#define CUBLAS_CHECK(x)                                                                  \
    do {                                                                                 \
        cublasStatus_t s_ = (x);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS &&                                               \
            !trn__capture_note(cublasGetStatusName(s_), __FILE__, __LINE__)) {           \
            fprintf(stderr, "jizhi-train: cuBLAS error %d at %s:%d\n", (int)s_,          \
                    __FILE__, __LINE__);                                                 \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define MAXL 33
/* scratch: [0] loss sum, [1+2l] |w_l|^2, [2+2l] |g_l|^2, [BIAS] |b|^2, [BIAS+1] |g_b|^2
 */
#define SCR_BIAS (2 * MAXL + 1)
/* [HALF + 1] |first half's g|^2, [HALF + 3] |the rest's|^2 (cuda_mlp_half.cuh) */
#define SCR_HALF (SCR_BIAS + 2)
#define SCR_N (SCR_HALF + 4)
#define S_BLAS_WS ((size_t)32 << 20) /* cuBLAS workspace: 32 MiB */

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

#include "trainer/cuda_mlp_kernels.cuh"

#include "trainer/cuda_mlp_state.cuh"

static void s_graphs_drop(s_cuda *c)
{
    for (int i = 0; i < NGRAPH; i++) {
        if (c->graph[i].nb)
            cudaGraphExecDestroy(c->graph[i].exec);
        c->graph[i].nb = 0;
        c->graph[i].used = 0;
    }
    c->warm_nb = 0;
}

static void s_free_bufs(s_cuda *c)
{
    s_graphs_drop(c); /* they point into these buffers */
    for (int i = 0; i <= c->nl; i++) {
        cudaFree(c->act[i]);
        cudaFree(c->dact[i]);
        c->act[i] = c->dact[i] = NULL;
    }
    cudaFree(c->xin);
    cudaFree(c->y);
    cudaFree(c->ones);
    c->xin = NULL;
    c->y = NULL;
    c->ones = NULL;
    c->cap = 0;
}

static unsigned s_blocks(long n)
{
    return (unsigned)((n + 255) / 256);
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
    CUDA_CHECK(cudaMalloc(&c->ones, (size_t)nb * c->esize));
    if (c->prec == TRN_BF16)
        k_fill<__nv_bfloat16>
            <<<s_blocks(nb), 256, 0, c->stream>>>((__nv_bfloat16 *)c->ones, 1.0f, nb);
    else if (c->prec == TRN_FP16)
        k_fill<__half><<<s_blocks(nb), 256, 0, c->stream>>>((__half *)c->ones, 1.0f, nb);
    else
        k_fill<float><<<s_blocks(nb), 256, 0, c->stream>>>((float *)c->ones, 1.0f, nb);
    CUDA_CHECK(cudaGetLastError());
    c->cap = nb;
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

#include "trainer/cuda_mlp_half.cuh"

/* ---- the step, enqueued on c->stream --------------------------------------------- */

/* The step's scalars into pinned host memory; s_head copies them in. The
   previous step has finished (each step ends with a synchronisation), so
   nothing still reads them. */
static void s_set_args(s_cuda *c, double lr, double inv_scale, double dscale, int at)
{
    c->args_h->lr = (float)lr;
    c->args_h->inv_scale = (float)inv_scale;
    c->args_h->dscale = (float)dscale;
    c->args_h->at = at;
}

/* The first operations of every step: the scalars in, sums and flag zeroed. */
static void s_head(s_cuda *c)
{
    cudaStream_t st = c->stream;
    CUDA_CHECK(
        cudaMemcpyAsync(c->args, c->args_h, sizeof(s_args), cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaMemsetAsync(c->scratch, 0, SCR_N * sizeof(float), st));
    CUDA_CHECK(cudaMemsetAsync(c->flag, 0, sizeof(int), st));
}

/* A batch of nb examples from host memory into act[0] (compute format)
   and c->y: the copy the device-data path saves. */
template <typename T>
static void s_input_host(s_cuda *c, const float *x, const uint8_t *y, int nb)
{
    cudaStream_t st = c->stream;
    int d0 = c->dims[0];
    CUDA_CHECK(cudaMemcpyAsync(c->xin, x, (size_t)nb * d0 * sizeof(float),
                               cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaMemcpyAsync(c->y, y, (size_t)nb, cudaMemcpyHostToDevice, st));
    k_convert<T>
        <<<s_blocks((long)nb * d0), 256, 0, st>>>(c->xin, (T *)c->act[0], (long)nb * d0);
}

/* The batch perm[args.at .. + nb) gathered from the device-resident
   training set into act[0] and c->y: the same values s_input_host gives. */
template <typename T> static void s_input_dev(s_cuda *c, int nb)
{
    int d0 = c->dims[0];
    k_gather<T><<<s_blocks((long)nb * d0), 256, 0, c->stream>>>(
        c->data.x, c->data.y, c->data.perm, c->args, nb, d0, (T *)c->act[0], c->y);
}

#include "trainer/cuda_mlp_lt.cuh"

/* The forward pass from act[0] and the loss, leaving dlogits = dscale *
   d(summed loss) in c->dact[nl] and the summed loss in c->scratch[0]. */
template <typename T> static void s_forward_loss(s_cuda *c, int nb)
{
    cudaStream_t st = c->stream;
    for (int l = 0; l < c->nl; l++) {
        int k = c->dims[l], m = c->dims[l + 1];
        if (c->lt && s_lt_ready<T>(c, l, nb)) {
            s_lt *p = &c->ltl[l];
            float alpha = 1.0f, beta = 0.0f;
            CUBLAS_CHECK(cublasLtMatmul(c->lt, p->op, &alpha, c->wlp[l], p->a, c->act[l],
                                        p->b, &beta, c->act[l + 1], p->d, c->act[l + 1],
                                        p->d, &p->algo, c->blas_ws, S_BLAS_WS, st));
            continue;
        }
        s_gemm<T>(c, CUBLAS_OP_T, CUBLAS_OP_N, m, nb, k, c->wlp[l], k, c->act[l], k,
                  c->act[l + 1], m, 0.0f);
        k_bias_act<T><<<s_blocks((long)nb * m), 256, 0, st>>>(
            (T *)c->act[l + 1], (const T *)c->blp[l], nb, m, l < c->nl - 1);
    }
    int K = c->dims[c->nl];
    k_softmax_ce<T><<<(nb + 127) / 128, 128, 0, st>>>(
        (const T *)c->act[c->nl], c->y, (T *)c->dact[c->nl], nb, K, (float)c->smoothing,
        c->args, c->scratch);
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
        /* db (m) = dY^T (m x nb) . ones (nb): fp32 sums rounded once to T */
        s_gemm<T>(c, CUBLAS_OP_N, CUBLAS_OP_N, m, 1, nb, c->dact[l + 1], m, c->ones, nb,
                  c->gb[l], m, 0.0f);
        if (c->meas)
            s_half_layer<T>(c, l, k, m, nb);
        if (layer_done && layer_done(ctx, l) != 0)
            rc = -1;
        if (l > 0) /* dX^T (k x nb) = W^T (k x m) . dY^T (m x nb) */
            s_gemm<T>(c, CUBLAS_OP_N, CUBLAS_OP_N, k, nb, m, c->wlp[l], k, c->dact[l + 1],
                      m, c->dact[l], k, 0.0f);
    }
    return rc;
}

/* Norms (LARS and |G|^2), the overflow flag, and the update, which the
   kernels skip on the device when the flag is up; then the sums and the
   flag go to pinned host memory. Gradients: the step's own in T carrying
   the loss scale (g == NULL), or the ranks' fp32 sums in true units. */
template <typename T> static void s_finish(s_cuda *c, int dist)
{
    cudaStream_t st = c->stream;
    float mu = (float)c->momentum, wd = (float)c->wd;
    int lars = c->opt == TRN_LARS, uns = !dist;
    for (int pass = 0; pass < 2; pass++)
        for (int l = 0; l < c->nl; l++) {
            long nw = (long)c->dims[l] * c->dims[l + 1], nbias = c->dims[l + 1];
            float *nrm = c->scratch + 1 + 2 * l;
            if (pass == 0 && dist) {
                trn_norms<float>(st, c->w[l], trn_devdist_grad(c->dd, 2 * l), nw, c->args,
                                 0, nrm, c->flag, c->part);
                trn_norms<float>(st, c->b[l], trn_devdist_grad(c->dd, 2 * l + 1), nbias,
                                 c->args, 0, c->scratch + SCR_BIAS, c->flag, c->part);
            } else if (pass == 0) {
                trn_norms<T>(st, c->w[l], (const T *)c->gw[l], nw, c->args, 1, nrm,
                             c->flag, c->part);
                trn_norms<T>(st, c->b[l], (const T *)c->gb[l], nbias, c->args, 1,
                             c->scratch + SCR_BIAS, c->flag, c->part);
            } else if (dist) {
                k_update<T, float><<<s_blocks(nw), 256, 0, st>>>(
                    c->w[l], (T *)c->wlp[l], trn_devdist_grad(c->dd, 2 * l), c->mw[l], nw,
                    c->args, 0, mu, wd, c->nesterov, lars ? 1 : 0, (float)c->trust, nrm,
                    c->flag);
                k_update<T, float><<<s_blocks(nbias), 256, 0, st>>>(
                    c->b[l], (T *)c->blp[l], trn_devdist_grad(c->dd, 2 * l + 1), c->mb[l],
                    nbias, c->args, 0, mu, 0.0f, c->nesterov, lars ? 2 : 0,
                    (float)c->trust, NULL, c->flag);
            } else {
                k_update<T, T><<<s_blocks(nw), 256, 0, st>>>(
                    c->w[l], (T *)c->wlp[l], (const T *)c->gw[l], c->mw[l], nw, c->args,
                    uns, mu, wd, c->nesterov, lars ? 1 : 0, (float)c->trust, nrm,
                    c->flag);
                k_update<T, T><<<s_blocks(nbias), 256, 0, st>>>(
                    c->b[l], (T *)c->blp[l], (const T *)c->gb[l], c->mb[l], nbias,
                    c->args, uns, mu, 0.0f, c->nesterov, lars ? 2 : 0, (float)c->trust,
                    NULL, c->flag);
            }
        }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpyAsync(c->res_h, c->scratch, SCR_N * sizeof(float),
                               cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(
        cudaMemcpyAsync(c->flag_h, c->flag, sizeof(int), cudaMemcpyDeviceToHost, st));
}

/* The step's one wait: the stream has finished, the sums and the flag are
   in pinned memory. |G|^2 into *grad_sqnorm, the flag into *overflow;
   returns the loss sum. */
static double s_results(s_cuda *c, double *grad_sqnorm, int *overflow)
{
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    const float *h = c->res_h;
    double gsq = h[SCR_BIAS + 1];
    for (int l = 0; l < c->nl; l++)
        gsq += h[2 + 2 * l];
    *grad_sqnorm = gsq;
    *overflow = *c->flag_h;
    return h[0];
}

/* The whole one-rank step on device data, for capture or eager launch. */
template <typename T> static void s_enqueue_dev(s_cuda *c, int nb)
{
    s_head(c);
    s_input_dev<T>(c, nb);
    s_forward_loss<T>(c, nb);
    s_backward<T>(c, nb, NULL, NULL);
    s_finish<T>(c, 0);
}

#include "trainer/cuda_mlp_graph.cuh"

/* One rank's step: the batch from host memory (x, y) or, with x NULL, the
   device-resident examples perm[at .. at + nb). Returns the loss sum. */
template <typename T>
static double s_step_t(s_cuda *c, const float *x, const uint8_t *y, int at, int nb,
                       double lr, double loss_scale, int *overflow, double *grad_sqnorm)
{
    s_reserve(c, nb);
    /* dlogits: gradient of loss_scale * mean loss */
    s_set_args(c, lr, 1.0 / loss_scale, loss_scale / nb, at);
    s_half_begin(c, nb);
    if (x) {
        s_head(c);
        s_input_host<T>(c, x, y, nb);
        s_forward_loss<T>(c, nb);
        s_backward<T>(c, nb, NULL, NULL);
        s_finish<T>(c, 0);
    } else if (c->meas || !trn_graphs_active(&c->graphs) || !s_graph_launch<T>(c, nb)) {
        s_enqueue_dev<T>(c, nb); /* a measuring step: eager */
        c->warm_nb = nb;
    }
    double loss = s_results(c, grad_sqnorm, overflow);
    s_half_end(c);
    return loss;
}

/* s_backward's hook on a data-parallel rank: layer l's buckets are ready. */
static int s_stage_layer(void *ctx, int l)
{
    s_cuda *c = (s_cuda *)ctx;
    return trn_devdist_stage(c->dd, c->nl - 1 - l) < 0 ? -1 : 0;
}

/* One rank's step of a data-parallel run (see trn_backend.step_dist): the
   shard from host memory (x, y) or, with x NULL, the device-resident
   examples perm[at .. at + nb). No graphs here (NCCL, events, a second
   stream). Returns the shard's loss sum or -1. */
template <typename T>
static double s_step_dist_t(s_cuda *c, const float *x, const uint8_t *y, int at, int nb,
                            int global, double lr, double loss_scale, int *overflow,
                            double *grad_sqnorm)
{
    cudaStream_t st = c->stream;
    if (nb > 0)
        s_reserve(c, nb);
    s_set_args(c, lr, 1.0 / loss_scale, loss_scale / global, at);
    c->meas = c->half = c->half_ok = 0; /* several ranks: no small-batch measure */
    s_head(c);
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
        if (x)
            s_input_host<T>(c, x, y, nb);
        else
            s_input_dev<T>(c, nb);
        s_forward_loss<T>(c, nb);
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
    if (rc < 0) { /* a failed exchange: raise the flag (exactly 1, as the kernels
                     raise it; a byte memset would make it 0x01010101), so that
                     nothing is updated; static storage outlives the async copy */
        static const int one = 1;
        CUDA_CHECK(
            cudaMemcpyAsync(c->flag, &one, sizeof one, cudaMemcpyHostToDevice, st));
    }
    /* norms, the overflow flag and the update on the sums (true units) */
    s_finish<T>(c, 1);
    double loss_sum = s_results(c, grad_sqnorm, overflow);
    return rc < 0 ? -1 : loss_sum;
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
    if (c->cnn_on) {
        c->cnn->detach(c->cnn->self);
        c->cnn_on = 0;
    }
    if (!c->blas)
        return;
    cudaStreamSynchronize(c->stream);
    /* auto fusion decided: a re-attach (precision schedule, load, live
       change) keeps the layout instead of measuring again */
    keep.o.fusion_bytes = trn_devdist_keep_fusion(c->dd, keep.o.fusion_bytes);
    trn_devdist_destroy(&c->dd);
    for (int l = 0; l < c->nl; l++) {
        cudaFree(c->w[l]), cudaFree(c->b[l]), cudaFree(c->mw[l]), cudaFree(c->mb[l]);
        cudaFree(c->wlp[l]), cudaFree(c->blp[l]), cudaFree(c->gw[l]), cudaFree(c->gb[l]);
    }
    s_free_bufs(c);
    cudaFree(c->scratch);
    cudaFree(c->part);
    cudaFree(c->gtmp);
    cudaFree(c->flag);
    cudaFree(c->args);
    cudaFreeHost(c->args_h);
    cudaFreeHost(c->res_h);
    cudaFreeHost(c->flag_h);
    cublasDestroy(c->blas);
    for (int l = 0; l < c->nl; l++)
        s_lt_free(&c->ltl[l]);
    if (c->lt)
        cublasLtDestroy(c->lt);
    cudaFree(c->blas_ws);
    cudaStreamDestroy(c->stream);
    s_data data = c->data; /* the training set stays on the device */
    trn_backend *cnn = c->cnn;
    trn_graphs graphs = c->graphs; /* a fallback outlives a re-attach */
    memset(c, 0, sizeof *c);
    c->rk = keep;
    c->data = data;
    c->cnn = cnn;
    c->graphs = graphs;
}

static int s_attach(void *self, trn_net *net, const trn_config *cfg, char *err)
{
    s_cuda *c = (s_cuda *)self;
    s_detach(self);
    if (!strncmp(trn_net_arch(net), "cnn:", 4)) { /* the CNN: backend_cudnn.cu */
#ifdef TRN_WITH_CUDNN
        if (!c->cnn && !(c->cnn = trn_cudnn_backend_new(err)))
            return -1;
        if (c->rk.comm) /* several ranks: BN per rank, gradients summed (never run) */
            trn_cudnn_set_comm(c->cnn, c->rk.comm, &c->rk.o, (int)c->rk.path,
                               !cfg->quiet);
        if (c->cnn->attach(c->cnn->self, net, cfg, err) < 0)
            return -1;
        c->cnn_on = 1;
        return 0;
#else
        snprintf(err, TRN_ERRLEN,
                 "this jizhi-train-cuda was built without cuDNN (cudnn.h not found): "
                 "the CUDA backend runs MLPs only");
        return -1;
#endif
    }
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
    c->quiet = cfg->quiet;
    if (trn_graphs_attach(&c->graphs, cfg->cuda_graphs) < 0) { /* kept: detach */
        snprintf(err, TRN_ERRLEN, "--cuda-graphs: unknown value \"%s\"",
                 cfg->cuda_graphs);
        return -1;
    }
    CUDA_CHECK(cudaStreamCreate(&c->stream));
    CUBLAS_CHECK(cublasCreate(&c->blas));
    CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    /* a workspace of our own: cuBLAS then chooses the same kernels inside a
       graph capture as outside it (graphs on == off, bit for bit) */
    CUDA_CHECK(cudaMalloc(&c->blas_ws, S_BLAS_WS));
    CUBLAS_CHECK(cublasSetWorkspace(c->blas, c->blas_ws, S_BLAS_WS));
    /* --cuda-epilogue lt: the forward's bias (+ ReLU) in cuBLASLt's
       epilogue; it shares the workspace (one stream: never at once) */
    if (strcmp(cfg->cuda_epilogue, "kernel"))
        CUBLAS_CHECK(cublasLtCreate(&c->lt));
    /* fp32: no TF32; half: no split-K sums added in the half type */
    CUBLAS_CHECK(cublasSetMathMode(
        c->blas, c->prec == TRN_FP32
                     ? CUBLAS_PEDANTIC_MATH
                     : (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                      CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
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
    long maxn = 1; /* the norms' per-block partial sums: the largest tensor's blocks */
    for (int l = 0; l < c->nl; l++)
        if ((long)c->dims[l] * c->dims[l + 1] > maxn)
            maxn = (long)c->dims[l] * c->dims[l + 1];
    CUDA_CHECK(cudaMalloc(&c->part, 2 * s_blocks(maxn) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&c->flag, sizeof(int)));
    CUDA_CHECK(cudaMalloc(&c->args, sizeof(s_args)));
    CUDA_CHECK(cudaMallocHost(&c->args_h, sizeof(s_args)));
    CUDA_CHECK(cudaMallocHost(&c->res_h, SCR_N * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&c->flag_h, sizeof(int)));
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

/* One rank's step in the attached precision: the loss sum. */
static double s_step_any(s_cuda *c, const float *x, const uint8_t *y, int at, int nb,
                         double lr, double loss_scale, int *overflow, double *grad_sqnorm)
{
    if (c->prec == TRN_BF16)
        return s_step_t<__nv_bfloat16>(c, x, y, at, nb, lr, loss_scale, overflow,
                                       grad_sqnorm);
    if (c->prec == TRN_FP16)
        return s_step_t<__half>(c, x, y, at, nb, lr, loss_scale, overflow, grad_sqnorm);
    return s_step_t<float>(c, x, y, at, nb, lr, loss_scale, overflow, grad_sqnorm);
}

/* A data-parallel rank's step in the attached precision: the shard's loss
   sum, or -1. */
static double s_step_dist_any(s_cuda *c, const float *x, const uint8_t *y, int at, int nb,
                              int global, double lr, double loss_scale, int *overflow,
                              double *grad_sqnorm)
{
    if (!c->dd) {
        fprintf(stderr,
                "jizhi-train: cuda backend: a data-parallel step without set_comm\n");
        return -1;
    }
    if (c->prec == TRN_BF16)
        return s_step_dist_t<__nv_bfloat16>(c, x, y, at, nb, global, lr, loss_scale,
                                            overflow, grad_sqnorm);
    if (c->prec == TRN_FP16)
        return s_step_dist_t<__half>(c, x, y, at, nb, global, lr, loss_scale, overflow,
                                     grad_sqnorm);
    return s_step_dist_t<float>(c, x, y, at, nb, global, lr, loss_scale, overflow,
                                grad_sqnorm);
}

static double s_step(void *self, const float *x, const uint8_t *y, int nb, double lr,
                     double loss_scale, int *overflow, double *grad_sqnorm)
{
    s_cuda *c = (s_cuda *)self;
    if (c->cnn_on)
        return c->cnn->step(c->cnn->self, x, y, nb, lr, loss_scale, overflow,
                            grad_sqnorm);
    return s_step_any((s_cuda *)self, x, y, 0, nb, lr, loss_scale, overflow,
                      grad_sqnorm) /
           nb;
}

static double s_step_dist(void *self, const float *x, const uint8_t *y, int nb,
                          int global, double lr, double loss_scale, int *overflow,
                          double *grad_sqnorm)
{
    s_cuda *c = (s_cuda *)self;
#ifdef TRN_WITH_CUDNN
    if (c->cnn_on)
        return trn_cudnn_step_dist(c->cnn, x, y, nb, global, lr, loss_scale, overflow,
                                   grad_sqnorm);
#endif
    return s_step_dist_any(c, x, y, 0, nb, global, lr, loss_scale, overflow, grad_sqnorm);
}

static void s_data_free(s_data *d)
{
    cudaFree(d->x);
    cudaFree(d->y);
    cudaFree(d->perm);
    memset(d, 0, sizeof *d);
}

/* trn_backend.set_data: the training set into device memory, once. It must
   fit in half of what the device has free (the rest is the model's and
   the batch's); else the reason, and nothing kept. */
static int s_set_data(void *self, const trn_dataset *d, char *err)
{
    s_cuda *c = (s_cuda *)self;
    s_graphs_drop(c); /* they point at the old copy */
    s_data_free(&c->data);
    size_t xb = (size_t)d->n * d->dim * sizeof(float);
    size_t need = xb + (size_t)d->n * (1 + sizeof(int)), fr = 0, total = 0;
    cudaError_t e = cudaMemGetInfo(&fr, &total);
    if (e != cudaSuccess) {
        snprintf(err, TRN_ERRLEN, "cannot query the GPU's memory (%s)",
                 cudaGetErrorString(e));
        return -1;
    }
    if (need > fr / 2) {
        snprintf(err, TRN_ERRLEN,
                 "the training set (%.0f MB) does not fit in half of the GPU's free "
                 "memory (%.0f MB free)",
                 need / 1e6, fr / 1e6);
        return -1;
    }
    s_data *g = &c->data;
    if ((e = cudaMalloc(&g->x, xb)) != cudaSuccess ||
        (e = cudaMalloc(&g->y, (size_t)d->n)) != cudaSuccess ||
        (e = cudaMalloc(&g->perm, (size_t)d->n * sizeof(int))) != cudaSuccess ||
        (e = cudaMemcpy(g->x, d->x, xb, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemcpy(g->y, d->y, (size_t)d->n, cudaMemcpyHostToDevice)) !=
            cudaSuccess) {
        cudaGetLastError();
        s_data_free(g);
        snprintf(err, TRN_ERRLEN, "copying the training set to the GPU failed (%s)",
                 cudaGetErrorString(e));
        return -1;
    }
    g->n = d->n;
    g->dim = d->dim;
    return 0;
}

/* trn_backend.set_order: the epoch's order, copied once per epoch. */
static int s_set_order(void *self, const int *perm, int n, char *err)
{
    s_cuda *c = (s_cuda *)self;
    if (!c->data.n || n != c->data.n) {
        snprintf(err, TRN_ERRLEN, "an order of %d examples for a device data set of %d",
                 n, c->data.n);
        return -1;
    }
    /* the previous step has finished (each ends with a wait): nothing
       reads the old order any more */
    CUDA_CHECK(
        cudaMemcpy(c->data.perm, perm, (size_t)n * sizeof(int), cudaMemcpyHostToDevice));
    return 0;
}

/* trn_backend.step_at: the batch gathered on the device. */
static double s_step_at(void *self, int at, int nb, int global, double lr,
                        double loss_scale, int *overflow, double *grad_sqnorm)
{
    s_cuda *c = (s_cuda *)self;
#ifdef TRN_WITH_CUDNN
    if (c->cnn_on) { /* the CNN gathers from the same copy (trn_cudnn_step_dev) */
        if (!c->data.n || at < 0 || at + nb > c->data.n) {
            fprintf(stderr,
                    "jizhi-train: cuda backend: examples %d..%d of a device data set of "
                    "%d (the CNN)\n",
                    at, at + nb, c->data.n);
            return -1;
        }
        return trn_cudnn_step_dev(c->cnn, c->data.x, c->data.y, c->data.perm, c->data.dim,
                                  at, nb, global, lr, loss_scale, overflow, grad_sqnorm);
    }
#endif
    if (!c->data.n || c->data.dim != c->dims[0] || at < 0 || at + nb > c->data.n) {
        fprintf(stderr,
                "jizhi-train: cuda backend: examples %d..%d of a device data set of %d "
                "(rows of %d, the model takes %d)\n",
                at, at + nb, c->data.n, c->data.dim, c->dims[0]);
        return -1;
    }
    if (c->dd)
        return s_step_dist_any(c, NULL, NULL, at, nb, global, lr, loss_scale, overflow,
                               grad_sqnorm);
    return s_step_any(c, NULL, NULL, at, nb, lr, loss_scale, overflow, grad_sqnorm);
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
    if (c->cnn_on) {
        c->cnn->sync_to_host(c->cnn->self, net);
        return;
    }
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
    b->set_data = s_set_data;
    b->set_order = s_set_order;
    b->step_at = s_step_at;
    b->set_half = s_set_half;
    b->half_sqnorms = s_half_sqnorms;
    b->detach = s_detach;
    b->self = c;
    return b;
}

extern "C" void trn_cuda_backend_destroy(trn_backend *b)
{
    if (!b)
        return;
    s_detach(b->self);
    s_data_free(&((s_cuda *)b->self)->data);
#ifdef TRN_WITH_CUDNN
    trn_cudnn_backend_destroy(((s_cuda *)b->self)->cnn);
#endif
    free(b->self);
    free(b);
}
