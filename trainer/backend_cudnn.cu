/*  backend_cudnn.cu - the residual CNN of net.c on cuDNN (issue 38, item 4),
    fp32, bf16 or fp16 (--precision), one rank or several. NEVER RUN ON A
    GPU: written and compiled on a machine without one (several ranks and
    bf16/fp16 included). BatchNorm: cuDNN's at fp32 and fp16, our own
    kernels at bf16 (cuda_bn_kernels.cuh; cuDNN's BN may derive bf16
    parameters for bf16 input, not the fp32 ones kept here).

    Built by `make cuda` where cudnn.h is found (trainer.mk: CUDNN_H sets
    HAVE_CUDNN, which adds TRN_CUDNN_OBJ and -DTRN_WITH_CUDNN) and linked
    into jizhi-train-cuda; libcudnn itself is opened at the first CNN
    attach (dlopen), so the binary still starts and runs the MLP where
    cuDNN is missing. backend_cuda.cu hands a "cnn:" model to it (--backend
    cuda --model cnn); scripts/gpu-check.sh compares it with the CPU CNN and
    times it against PyTorch. Device-resident data works (--gpu-data
    device: backend_cuda.cu keeps the training set and hands each step's
    place in the order to trn_cudnn_step_dev, which gathers the batch with
    the MLP's k_gather). Several ranks (trn_cudnn_set_comm, from
    backend_cuda.cu's set_comm): each rank runs its shard with BatchNorm on
    the shard's own statistics, as the CPU CNN per rank; after each op's
    backward its parameter gradients go to the device gradient exchange
    (dist_dev.h, one stage per op with params: cnn_layout.h), the norms,
    the overflow check and the update run on the sums, and the BN running
    statistics are averaged over the ranks after each step (trn_comm_mean,
    the CPU's own function, through pinned host memory). Not yet: CUDA
    graphs (--cuda-graphs on refused by trn_config_validate, exit 2;
    cudnn_host.h). Models of more than TRN_MAX_OPS ops are refused by
    s_build (and by trn_config_validate).

    bf16/fp16 (types per precision: cudnn_host.h's trn_cudnn_types_for):
    activations, their gradients and conv filters in the half type, NHWC,
    convolutions with float compute on tensor cores (CUDNN_TENSOR_OP_MATH),
    the head's GEMMs by cublasGemmEx (float compute; its weight and bias
    gradients written in fp32); BatchNorm's gamma/beta and running
    statistics fp32 (fp16: the type cuDNN derives for a half input, read
    back at attach: not FLOAT -> exit 2; bf16: own kernels), the head's
    bias fp32.
    Master weights, momenta and every gradient the norms, the
    exchange and the update read are fp32: a conv's weight gradient comes
    from cuDNN in the half type and is converted at once; conv and linear
    weights keep a half working copy rounded from the master by the update.
    The loss scale is train.c's (the same scaler as the CPU and the MLP:
    dlogits carry it, the norms unscale, an inf/NaN gradient raises the
    flag and the update is skipped on the device).

    What it does: the topology of net.c's "cnn" branch rebuilt from the
    net's arch string by host code (cnn_layout.c: stem conv-BN-ReLU; per
    stage a stride-2 transition conv-BN-ReLU after the first; per block
    conv-BN-ReLU, conv-BN, add the block's input, ReLU; global average
    pooling; linear head), with the parameters in net.c's order (conv
    weight; BN gamma, beta; linear weight, bias) and BN running statistics
    in net.c's state layout (per BN mean then variance), both checked
    against net.c by tests/test_trn_cuda_host.c. After the dlopen cuDNN's
    version is checked against the headers' (cudnn_host.h; a mismatch
    ends the run with exit status 2 naming both). The convolution
    algorithms are chosen once per (layer, batch size) and cached
    (cudnn_host.h, bounded); the BN parameter descriptor is derived by
    cudnnDeriveBNTensorDescriptor. Activations are NHWC (cuDNN tensors in
    CUDNN_TENSOR_NHWC; fp32 at --precision fp32), convolution weights are
    kept in KRSC (OHWI) on the device and transposed from and to the host's
    OIHW at attach and sync.
    Convolutions: cudnnConvolutionForward / BackwardData / BackwardFilter
    with, per direction, the first deterministic algorithm of cuDNN's _v7
    heuristics that fits the workspace (no tensor cores at fp32: no TF32;
    none: exit 1), each direction its own descriptor set to its result's
    math type (cached per batch size and precision). BatchNorm: cuDNN's
   spatial batch norm (eps 1e-5, running averages with factor 0.1 and the unbiased
    variance, as net.c). ReLU, add, pooling, the head's bias: own kernels;
    the head's GEMMs: cuBLAS; loss, norms and the SGD/LARS update: the MLP
    backend's kernels (cuda_mlp_kernels.cuh). A gradient buffer read by two
    ops (a block's input) sums both contributions (beta = 1 on the second).

    Error handling: CUDA_CHECK / CUBLAS_CHECK / CUDNN_CHECK exit the process
    (the trainer only).
*/
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <assert.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/cuda_check.cuh"
#include "trainer/cuda_mlp_kernels.cuh"
#include "trainer/layout.h"

extern "C" {
#include "trainer/cnn_layout.h"
#include "trainer/cudnn_host.h"
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

#define CUDNN_CHECK(x)                                                                   \
    do {                                                                                 \
        cudnnStatus_t s_ = (x);                                                          \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                \
            fprintf(stderr, "jizhi-train: cuDNN error %s at %s:%d\n",                    \
                    p_cudnnGetErrorString(s_), __FILE__, __LINE__);                      \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* cudnn_host.h's type numbers are cuDNN's */
static_assert(TRN_CUDNN_DATA_FLOAT == (int)CUDNN_DATA_FLOAT, "cudnn_host.h");
static_assert(TRN_CUDNN_DATA_HALF == (int)CUDNN_DATA_HALF, "cudnn_host.h");
static_assert(TRN_CUDNN_DATA_BFLOAT16 == (int)CUDNN_DATA_BFLOAT16, "cudnn_host.h");
static_assert(TRN_CUDNN_STATUS_SUCCESS == (int)CUDNN_STATUS_SUCCESS, "cudnn_host.h");
static_assert(TRN_CUDNN_DETERMINISTIC == (int)CUDNN_DETERMINISTIC, "cudnn_host.h");
static_assert(TRN_CUDNN_DEFAULT_MATH == (int)CUDNN_DEFAULT_MATH, "cudnn_host.h");
static_assert(TRN_CUDNN_TENSOR_OP_MATH == (int)CUDNN_TENSOR_OP_MATH, "cudnn_host.h");
static_assert(TRN_CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ==
                  (int)CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,
              "cudnn_host.h");
static_assert(TRN_CUDNN_FMA_MATH == (int)CUDNN_FMA_MATH, "cudnn_host.h");

#define MAXOPS TRN_MAX_OPS           /* s_build refuses a larger model before building */
#define MAXP TRN_MAX_OPS             /* a cnn has fewer params than ops */
#define S_WS_MAX ((size_t)256 << 20) /* cuDNN workspace ceiling */
#define S_ALGO_NB 8                  /* batch sizes whose conv algorithms are cached */

#include "trainer/cudnn_dl.cuh"

#include "trainer/cuda_bn_kernels.cuh"
#include "trainer/cuda_cnn_kernels.cuh"

/* ---- the graph of ops (net.c's "cnn" branch) ------------------------------------- */

/* the op kinds of cnn_layout.h, which builds the graph on the host */
typedef trn_qkind s_kind;
constexpr s_kind Q_CONV = TRN_Q_CONV, Q_BN = TRN_Q_BN, Q_RELU = TRN_Q_RELU,
                 Q_ADD = TRN_Q_ADD, Q_GAP = TRN_Q_GAP, Q_LINEAR = TRN_Q_LINEAR;

typedef struct {
    s_kind kind;
    int in, in2, out;    /* buffer ids (in2: ADD) */
    int pw, pb;          /* param indices (-1: none) */
    int c, h, w, co;     /* input shape per sample; conv/linear outputs */
    int k, stride, pad;  /* conv */
    long st;             /* BN: offset of the running mean in the state */
    int stage;           /* backward stage after its param gradients (-1: none) */
    float *smean, *sinv; /* BN: saved batch statistics (device, c each) */
    cudnnFilterDescriptor_t fd;
    cudnnConvolutionDescriptor_t cd[TRN_ALGO_KINDS]; /* per direction (fwd, bwd
                                      data, bwd filter): each its result's math */
    cudnnConvolutionFwdAlgo_t fa;
    cudnnConvolutionBwdDataAlgo_t ba;
    cudnnConvolutionBwdFilterAlgo_t fb;
    cudnnTensorDescriptor_t bnd; /* BN: scale/bias/stat descriptor */
} s_op;

typedef struct {
    int c, h, w;                /* per sample, NHWC */
    void *x, *g;                /* cap * c*h*w elements of the act type */
    cudnnTensorDescriptor_t td; /* for the current batch size */
    int written;                /* the gradient has a contribution this pass */
} s_buf;

/* a data-parallel run (trn_cudnn_set_comm): the comm (borrowed), the
   exchange's options and path */
typedef struct {
    trn_comm *comm;
    trn_dist_opts o;
    trn_grad_path path;
    int verbose;
} s_ranks;

typedef struct {
    s_op op[MAXOPS];
    int nops;
    s_buf buf[MAXOPS + 1];
    int nbufs;
    int np;
    long pn[MAXP];   /* element counts */
    int pkind[MAXP]; /* trn_pkind */
    int pconv[MAXP]; /* conv weights: the op index (OIHW <-> KRSC), else -1 */
    float *w[MAXP], *m[MAXP], *g[MAXP]; /* fp32 masters, momenta, gradients */
    void *lp[MAXP];     /* the act-type working copy (conv/linear weights at
                           bf16/fp16), else w[i] itself (not owned) */
    trn_precision prec; /* the attached --precision */
    trn_cudnn_types ty; /* its types (cudnn_host.h) */
    void *gconv;        /* bf16/fp16: a conv's weight gradient as cuDNN writes
                           it, converted into g[i] at once (the largest conv's) */
    float *stage;       /* bf16/fp16: a host batch in fp32 before conversion */
    float *bnpart;      /* own BN (ty.own_bn): 2 x the widest BN x chunks */
    float *state;       /* BN running statistics, net.c's layout */
    long nstate;
    int classes;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    void *ws;
    size_t ws_size;
    void *ones; /* cap ones in the act type (the head's bias gradient) */
    float *scratch;
    float *part;      /* the norms' per-block partial sums (trn_norms) */
    unsigned char *y; /* cap labels */
    int *flag;
    s_args *args, *args_h;
    float *res_h;
    int *flag_h;
    int cap, desc_nb;
    trn_algo_cache algos; /* conv algorithms per (op, batch size); kept across
                             detach, keyed by the model's arch */
    int nstages;          /* backward stages (ops with params) */
    int pstage[MAXP];     /* param i final after stage pstage[i] */
    s_ranks rk;           /* several ranks (trn_cudnn_set_comm); kept across detach */
    trn_devdist *dd;      /* with rk.comm: the gradient exchange, built at attach */
    float *state_h;       /* with rk.comm: pinned copy of the BN statistics */
    trn_opt_kind opt;
    double momentum, wd, trust;
    int nesterov;
    double smoothing;
} s_cnn;

static unsigned s_blocks(long n)
{
    return (unsigned)((n + 255) / 256);
}

/* net.c's cnn from its arch "cnn:CxHxW:c0,c1,...:bB:K": the ops, buffers
   and parameters of cnn_layout.h (host code, checked against net.c by
   tests/test_trn_cuda_host.c), copied into the device-side structs. 0, or
   -1 with err. */
static int s_build(s_cnn *q, const char *arch, char *err)
{
    trn_cnn_layout *L = (trn_cnn_layout *)malloc(sizeof *L);
    if (!L) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        return -1;
    }
    if (trn_cnn_layout_build(L, arch, err) < 0) {
        free(L);
        return -1;
    }
    for (int i = 0; i < L->nops; i++) {
        const trn_qop *l = &L->op[i];
        s_op *o = &q->op[i];
        memset(o, 0, sizeof *o);
        o->kind = l->kind;
        o->in = l->in, o->in2 = l->in2, o->out = l->out;
        o->pw = l->pw, o->pb = l->pb;
        o->c = l->c, o->h = l->h, o->w = l->w, o->co = l->co;
        o->k = l->k, o->stride = l->stride, o->pad = l->pad;
        o->st = l->st;
        o->stage = l->stage;
    }
    for (int i = 0; i < L->nbufs; i++) {
        s_buf *b = &q->buf[i];
        memset(b, 0, sizeof *b);
        b->c = L->buf[i].c, b->h = L->buf[i].h, b->w = L->buf[i].w;
    }
    for (int i = 0; i < L->np; i++) {
        q->pn[i] = L->p[i].n;
        q->pkind[i] = L->p[i].kind;
        q->pconv[i] = L->p[i].conv;
    }
    q->nops = L->nops, q->nbufs = L->nbufs, q->np = L->np;
    q->nstate = L->nstate;
    q->classes = L->classes;
    q->nstages = L->nstages;
    trn_cnn_layout_param_stages(L, q->pstage);
    free(L);
    return 0;
}

/* ---- buffers, descriptors, algorithms: cudnn_bufs.cuh ------------------------- */

#include "trainer/cudnn_bufs.cuh"

/* ---- the step ---------------------------------------------------------------------- */

/* the act type as cuBLAS names it */
static cudaDataType_t s_blas_type(const s_cnn *q)
{
    return q->prec == TRN_BF16   ? CUDA_R_16BF
           : q->prec == TRN_FP16 ? CUDA_R_16F
                                 : CUDA_R_32F;
}

/* c = a . b (+ beta c), column-major as cuBLAS. fp32: cublasSgemm, pedantic
   math (no TF32), as before bf16/fp16 existed. bf16/fp16: a and b in the act
   type, c in it too unless c32 (then fp32: the head's weight and bias
   gradients), float compute on tensor cores (cublasGemmEx). */
static void s_gemm(s_cnn *q, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                   int k, const void *a, int lda, const void *b, int ldb, void *c,
                   int ldc, float beta, int c32)
{
    float alpha = 1.0f;
    if (q->prec == TRN_FP32) {
        CUBLAS_CHECK(cublasSgemm(q->blas, ta, tb, m, n, k, &alpha, (const float *)a, lda,
                                 (const float *)b, ldb, &beta, (float *)c, ldc));
        return;
    }
    cudaDataType_t t = s_blas_type(q);
    CUBLAS_CHECK(cublasGemmEx(q->blas, ta, tb, m, n, k, &alpha, a, t, lda, b, t, ldb,
                              &beta, c, c32 ? CUDA_R_32F : t, ldc, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

/* forward (training: batch statistics, running averages updated) and the
   loss: dlogits in the last buffer's gradient, the loss sum in scratch[0].
   T: the act type (float at fp32); conv filters and the head's weight
   from lp (w itself at fp32), BN's parameters and statistics fp32. */
template <typename T> static void s_forward(s_cnn *q, int nb)
{
    cudaStream_t st = q->stream;
    const float one = 1.0f, zero = 0.0f;
    for (int i = 0; i < q->nops; i++) {
        s_op *o = &q->op[i];
        s_buf *x = &q->buf[o->in], *y = &q->buf[o->out];
        long cnt = (long)nb * y->c * y->h * y->w;
        switch (o->kind) {
        case Q_CONV:
            CUDNN_CHECK(p_cudnnConvolutionForward(q->dnn, &one, x->td, x->x, o->fd,
                                                  q->lp[o->pw], o->cd[0], o->fa, q->ws,
                                                  q->ws_size, &zero, y->td, y->x));
            break;
        case Q_BN: {
            float *rm = q->state + o->st;
            if (q->ty.own_bn) { /* bf16: cuda_bn_kernels.cuh */
                s_bnh_forward<T>(st, (T *)x->x, (T *)y->x, o->c, (long)nb * o->h * o->w,
                                 q->w[o->pw], q->w[o->pb], rm, rm + o->c, o->smean,
                                 o->sinv, q->bnpart);
                break;
            }
            CUDNN_CHECK(p_cudnnBatchNormalizationForwardTraining(
                q->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x->td, x->x, y->td, y->x,
                o->bnd, q->w[o->pw], q->w[o->pb], 0.1, rm, rm + o->c, 1e-5, o->smean,
                o->sinv));
            break;
        }
        case Q_RELU:
            k_relu_fwd<T><<<s_blocks(cnt), 256, 0, st>>>((T *)x->x, (T *)y->x, cnt);
            break;
        case Q_ADD:
            k_add<T><<<s_blocks(cnt), 256, 0, st>>>((T *)x->x, (T *)q->buf[o->in2].x,
                                                    (T *)y->x, cnt);
            break;
        case Q_GAP:
            k_gap_fwd<T><<<s_blocks((long)nb * o->c), 256, 0, st>>>(
                (T *)x->x, (T *)y->x, nb, o->c, o->h * o->w);
            break;
        case Q_LINEAR:
            s_gemm(q, CUBLAS_OP_T, CUBLAS_OP_N, o->co, nb, o->c, q->lp[o->pw], o->c, x->x,
                   o->c, y->x, o->co, 0.0f, 0);
            k_bias_f32<T>
                <<<s_blocks(cnt), 256, 0, st>>>((T *)y->x, q->w[o->pb], nb, o->co);
            break;
        }
    }
    s_buf *z = &q->buf[q->nbufs - 1];
    k_softmax_ce<T><<<(nb + 127) / 128, 128, 0, st>>>((T *)z->x, q->y, (T *)z->g, nb,
                                                      q->classes, (float)q->smoothing,
                                                      q->args, q->scratch);
}

/* backward in reverse op order; parameter gradients into q->g (scaled by
   the loss scale); a buffer read twice sums both contributions. With dd
   (several ranks) each op's stage is reported once its parameter
   gradients are final, so the exchange sends them while the backward goes
   on. 0, or -1 when the exchange failed (the pass always completes).
   T: the act type; at bf16/fp16 a conv's weight gradient comes in T (the
   filter's type) into q->gconv and is converted into its fp32 q->g at
   once, the head's are written in fp32 by cuBLAS, BN's are fp32. */
template <typename T> static int s_backward(s_cnn *q, int nb, trn_devdist *dd)
{
    int rc = 0;
    cudaStream_t st = q->stream;
    const float one = 1.0f, zero = 0.0f;
    for (int i = 0; i < q->nbufs - 1; i++)
        q->buf[i].written = 0;
    q->buf[q->nbufs - 1].written = 1;
    for (int i = q->nops - 1; i >= 0; i--) {
        s_op *o = &q->op[i];
        s_buf *x = &q->buf[o->in], *y = &q->buf[o->out];
        long cnt = (long)nb * y->c * y->h * y->w, cin = (long)nb * x->c * x->h * x->w;
        int acc = x->written, need_dx = o->in != 0;
        switch (o->kind) {
        case Q_CONV: {
            int lp = q->lp[o->pw] != q->w[o->pw];
            CUDNN_CHECK(p_cudnnConvolutionBackwardFilter(
                q->dnn, &one, x->td, x->x, y->td, y->g, o->cd[2], o->fb, q->ws,
                q->ws_size, &zero, o->fd, lp ? q->gconv : q->g[o->pw]));
            if (lp)
                k_to_f32<T><<<s_blocks(q->pn[o->pw]), 256, 0, st>>>(
                    (const T *)q->gconv, q->g[o->pw], q->pn[o->pw]);
            if (dd && trn_devdist_stage(dd, o->stage) < 0)
                rc = -1;
            const float beta = acc ? 1.0f : 0.0f;
            if (need_dx)
                CUDNN_CHECK(p_cudnnConvolutionBackwardData(
                    q->dnn, &one, o->fd, q->lp[o->pw], y->td, y->g, o->cd[1], o->ba,
                    q->ws, q->ws_size, &beta, x->td, x->g));
            break;
        }
        case Q_BN: {
            const float beta = acc ? 1.0f : 0.0f;
            if (q->ty.own_bn)
                s_bnh_backward<T>(st, (T *)x->x, (T *)y->g, (T *)x->g, acc, o->c,
                                  (long)nb * o->h * o->w, q->w[o->pw], o->smean, o->sinv,
                                  q->g[o->pw], q->g[o->pb], q->bnpart);
            else
                CUDNN_CHECK(p_cudnnBatchNormalizationBackward(
                    q->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &beta, &one, &zero, x->td,
                    x->x, y->td, y->g, x->td, x->g, o->bnd, q->w[o->pw], q->g[o->pw],
                    q->g[o->pb], 1e-5, o->smean, o->sinv));
            if (dd && trn_devdist_stage(dd, o->stage) < 0)
                rc = -1;
            break;
        }
        case Q_RELU:
            k_relu_bwd_acc<T><<<s_blocks(cnt), 256, 0, st>>>((T *)y->x, (T *)y->g,
                                                             (T *)x->g, cnt, acc);
            break;
        case Q_ADD: {
            s_buf *x2 = &q->buf[o->in2];
            k_acc<T><<<s_blocks(cnt), 256, 0, st>>>((T *)y->g, (T *)x->g, cnt, acc);
            k_acc<T>
                <<<s_blocks(cnt), 256, 0, st>>>((T *)y->g, (T *)x2->g, cnt, x2->written);
            x2->written = 1;
            break;
        }
        case Q_GAP:
            k_gap_bwd<T><<<s_blocks(cin), 256, 0, st>>>((T *)y->g, (T *)x->g, nb, o->c,
                                                        o->h * o->w, acc);
            break;
        case Q_LINEAR:
            /* dW^T (c x co) = X^T . dY; db = dY^T . ones (both fp32 out);
               dX = W . dY */
            s_gemm(q, CUBLAS_OP_N, CUBLAS_OP_T, o->c, o->co, nb, x->x, o->c, y->g, o->co,
                   q->g[o->pw], o->c, 0.0f, 1);
            s_gemm(q, CUBLAS_OP_N, CUBLAS_OP_N, o->co, 1, nb, y->g, o->co, q->ones, nb,
                   q->g[o->pb], o->co, 0.0f, 1);
            if (dd && trn_devdist_stage(dd, o->stage) < 0)
                rc = -1;
            s_gemm(q, CUBLAS_OP_N, CUBLAS_OP_N, o->c, nb, o->co, q->lp[o->pw], o->c, y->g,
                   o->co, x->g, o->c, acc ? 1.0f : 0.0f, 0);
            break;
        }
        x->written = 1;
    }
    CUDA_CHECK(cudaGetLastError());
    return rc;
}

/* norms, the overflow flag, the update (skipped on the device when the flag
   is up), the sums to pinned memory. Gradients: this rank's own carrying
   the loss scale (dd NULL), or the ranks' fp32 sums in true units; both
   fp32 at every precision. The update writes the fp32 master and, for a
   param with a working copy (bf16/fp16: conv and linear weights), that
   copy rounded from it (k_update's wlp); T: the act type. */
template <typename T> static void s_finish(s_cnn *q, trn_devdist *dd)
{
    int uns = !dd;
    cudaStream_t st = q->stream;
    float mu = (float)q->momentum, wd = (float)q->wd;
    int lars = q->opt == TRN_LARS;
    for (int i = 0; i < q->np; i++)
        trn_norms<float>(st, q->w[i], dd ? trn_devdist_grad(dd, i) : q->g[i], q->pn[i],
                         q->args, uns, q->scratch + 1 + 2 * i, q->flag, q->part);
    for (int i = 0; i < q->np; i++) {
        int weight = q->pkind[i] == TRN_PW;
        const float *g = dd ? trn_devdist_grad(dd, i) : q->g[i];
        int mode = lars ? (weight ? 1 : 2) : 0;
        float wdi = weight ? wd : 0.0f, tr = (float)q->trust;
        if (q->lp[i] != q->w[i])
            k_update<T, float><<<s_blocks(q->pn[i]), 256, 0, st>>>(
                q->w[i], (T *)q->lp[i], g, q->m[i], q->pn[i], q->args, uns, mu, wdi,
                q->nesterov, mode, tr, q->scratch + 1 + 2 * i, q->flag);
        else
            k_update<float, float><<<s_blocks(q->pn[i]), 256, 0, st>>>(
                q->w[i], q->w[i], g, q->m[i], q->pn[i], q->args, uns, mu, wdi,
                q->nesterov, mode, tr, q->scratch + 1 + 2 * i, q->flag);
    }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpyAsync(q->res_h, q->scratch,
                               (1 + 2 * (size_t)q->np) * sizeof(float),
                               cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(
        cudaMemcpyAsync(q->flag_h, q->flag, sizeof(int), cudaMemcpyDeviceToHost, st));
}

/* ---- trn_backend interface ----------------------------------------------------- */

/* host values v of param i into device memory d (conv weights reordered) */
static int s_put(s_cnn *q, int i, const float *v, float *d)
{
    int oi = q->pconv[i];
    if (oi < 0) {
        CUDA_CHECK(cudaMemcpy(d, v, q->pn[i] * sizeof(float), cudaMemcpyHostToDevice));
        return 0;
    }
    float *t = (float *)malloc(q->pn[i] * sizeof(float));
    if (!t)
        return -1;
    s_op *o = &q->op[oi];
    trn_oihw_to_krsc(v, t, o->co, o->c, o->k);
    CUDA_CHECK(cudaMemcpy(d, t, q->pn[i] * sizeof(float), cudaMemcpyHostToDevice));
    free(t);
    return 0;
}

static int s_get(s_cnn *q, int i, const float *d, float *v)
{
    int oi = q->pconv[i];
    if (oi < 0) {
        CUDA_CHECK(cudaMemcpy(v, d, q->pn[i] * sizeof(float), cudaMemcpyDeviceToHost));
        return 0;
    }
    float *t = (float *)malloc(q->pn[i] * sizeof(float));
    if (!t)
        return -1;
    s_op *o = &q->op[oi];
    CUDA_CHECK(cudaMemcpy(t, d, q->pn[i] * sizeof(float), cudaMemcpyDeviceToHost));
    trn_krsc_to_oihw(t, v, o->co, o->c, o->k);
    free(t);
    return 0;
}

static void s_detach(void *self)
{
    s_cnn *q = (s_cnn *)self;
    s_ranks keep = q->rk;            /* set_comm's choice outlives an attach */
    trn_algo_cache algos = q->algos; /* so do the conv algorithms (host memory,
                                        keyed by the model; freed at destroy) */
    if (!q->dnn) { /* nothing on the device: forget a half-built graph */
        memset(q, 0, sizeof *q);
        q->rk = keep;
        q->algos = algos;
        return;
    }
    cudaStreamSynchronize(q->stream);
    /* auto fusion decided: a re-attach keeps the layout (as the MLP) */
    keep.o.fusion_bytes = trn_devdist_keep_fusion(q->dd, keep.o.fusion_bytes);
    trn_devdist_destroy(&q->dd);
    cudaFreeHost(q->state_h);
    for (int i = 0; i < q->nops; i++) {
        s_op *o = &q->op[i];
        cudaFree(o->smean), cudaFree(o->sinv);
        if (o->fd)
            p_cudnnDestroyFilterDescriptor(o->fd);
        for (int k = 0; k < TRN_ALGO_KINDS; k++)
            if (o->cd[k])
                p_cudnnDestroyConvolutionDescriptor(o->cd[k]);
        if (o->bnd)
            p_cudnnDestroyTensorDescriptor(o->bnd);
    }
    for (int i = 0; i < q->nbufs; i++) {
        cudaFree(q->buf[i].x), cudaFree(q->buf[i].g);
        if (q->buf[i].td)
            p_cudnnDestroyTensorDescriptor(q->buf[i].td);
    }
    for (int i = 0; i < q->np; i++) {
        if (q->lp[i] != q->w[i])
            cudaFree(q->lp[i]);
        cudaFree(q->w[i]), cudaFree(q->m[i]), cudaFree(q->g[i]);
    }
    cudaFree(q->gconv), cudaFree(q->stage), cudaFree(q->bnpart);
    cudaFree(q->state), cudaFree(q->ws), cudaFree(q->ones), cudaFree(q->y);
    cudaFree(q->scratch), cudaFree(q->part), cudaFree(q->flag), cudaFree(q->args);
    cudaFreeHost(q->args_h), cudaFreeHost(q->res_h), cudaFreeHost(q->flag_h);
    p_cudnnDestroy(q->dnn);
    cublasDestroy(q->blas);
    cudaStreamDestroy(q->stream);
    memset(q, 0, sizeof *q);
    q->rk = keep;
    q->algos = algos;
}

static int s_attach(void *self, trn_net *net, const trn_config *cfg, char *err)
{
    s_cnn *q = (s_cnn *)self;
    s_detach(self);
    int mismatch = 0;
    if (s_dnn_load(err, &mismatch) < 0) {
        if (mismatch) { /* a cuDNN of another version: exit 2, never a crash later */
            fprintf(stderr, "jizhi-train: --backend cuda --model cnn: %s\n", err);
            exit(2);
        }
        return -1;
    }
    if (s_build(q, trn_net_arch(net), err) < 0)
        return -1;
    q->prec = trn_precision_from_name(cfg->precision);
    if (trn_cudnn_types_for(q->prec, &q->ty, err) < 0)
        return -1;
    int nconv = 0;
    for (int i = 0; i < q->nops; i++)
        nconv += q->op[i].kind == Q_CONV;
    char key[TRN_ERRLEN]; /* the choices hold for one model at one precision */
    trn_cudnn_algo_key(trn_net_arch(net), q->prec, key, sizeof key);
    if (trn_algo_cache_attach(&q->algos, nconv * S_ALGO_NB, key) < 0) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        return -1;
    }
    if (q->buf[0].c != 1) {
        snprintf(err, TRN_ERRLEN, "the CUDA CNN takes single-channel images");
        return -1;
    }
    if (trn_net_nparams(net) != q->np || trn_net_state_count(net) != q->nstate) {
        snprintf(err, TRN_ERRLEN, "the model's parameters do not match the CUDA CNN's");
        return -1;
    }
    int opt = trn_optim_from_name(cfg->optimizer);
    if (opt != TRN_SGD && opt != TRN_LARS) {
        snprintf(err, TRN_ERRLEN, "the CUDA CNN supports --optimizer sgd and lars");
        return -1;
    }
    q->opt = (trn_opt_kind)opt;
    q->momentum = cfg->momentum;
    q->wd = cfg->weight_decay;
    q->trust = cfg->trust;
    q->nesterov = cfg->nesterov;
    q->smoothing = cfg->label_smoothing;
    CUDA_CHECK(cudaStreamCreate(&q->stream));
    CUBLAS_CHECK(cublasCreate(&q->blas));
    CUBLAS_CHECK(cublasSetStream(q->blas, q->stream));
    /* as the MLP's: fp32 no TF32; half no split-K sums in the half type */
    CUBLAS_CHECK(cublasSetMathMode(
        q->blas, q->ty.tensor_ops
                     ? (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                      CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)
                     : CUBLAS_PEDANTIC_MATH));
    CUDNN_CHECK(p_cudnnCreate(&q->dnn));
    CUDNN_CHECK(p_cudnnSetStream(q->dnn, q->stream));
    int conv[MAXP], lpw[MAXP]; /* fp32 weights, momenta, gradients, copies */
    for (int i = 0; i < q->np; i++)
        conv[i] = q->pconv[i] >= 0, lpw[i] = trn_cudnn_param_lp(&q->ty, q->pkind[i]);
    trn_cudnn_sizes wz;
    trn_cudnn_sizes_for(&q->ty, 0, 0, NULL, q->np, q->pn, conv, lpw, &wz);
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess && wz.master + wz.lp > fr) {
        snprintf(err, TRN_ERRLEN,
                 "the CUDA CNN's weights need %.0f MB (masters, momenta, gradients and "
                 "working copies), the GPU has %.0f MB free",
                 (wz.master + wz.lp) / 1e6, fr / 1e6);
        return -1;
    }
    for (int i = 0; i < q->np; i++) {
        trn_param *p = trn_net_param(net, i);
        if (p->n != q->pn[i]) {
            snprintf(err, TRN_ERRLEN,
                     "parameter %s: %ld values, the CUDA CNN expects %ld", p->name, p->n,
                     q->pn[i]);
            return -1;
        }
        CUDA_CHECK(cudaMalloc(&q->w[i], p->n * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&q->m[i], p->n * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&q->g[i], p->n * sizeof(float)));
        if (s_put(q, i, p->w, q->w[i]) < 0 || s_put(q, i, p->m, q->m[i]) < 0) {
            snprintf(err, TRN_ERRLEN, "out of memory");
            return -1;
        }
        q->lp[i] = q->w[i];
        if (trn_cudnn_param_lp(&q->ty, q->pkind[i])) { /* rounded from the master */
            CUDA_CHECK(cudaMalloc(&q->lp[i], p->n * (size_t)q->ty.esize));
            if (q->prec == TRN_BF16)
                k_convert<__nv_bfloat16><<<s_blocks(p->n), 256, 0, q->stream>>>(
                    q->w[i], (__nv_bfloat16 *)q->lp[i], p->n);
            else
                k_convert<__half><<<s_blocks(p->n), 256, 0, q->stream>>>(
                    q->w[i], (__half *)q->lp[i], p->n);
            CUDA_CHECK(cudaGetLastError());
        }
    }
    CUDA_CHECK(cudaMalloc(&q->state, q->nstate * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(q->state, trn_net_state(net), q->nstate * sizeof(float),
                          cudaMemcpyHostToDevice));
    for (int i = 0; i < q->nbufs; i++)
        CUDNN_CHECK(p_cudnnCreateTensorDescriptor(&q->buf[i].td));
    long maxbn = 0; /* own BN's partial sums */
    for (int i = 0; i < q->nops; i++) {
        s_op *o = &q->op[i];
        if (o->kind == Q_CONV) {
            CUDNN_CHECK(p_cudnnCreateFilterDescriptor(&o->fd));
            CUDNN_CHECK(p_cudnnSetFilter4dDescriptor(o->fd, (cudnnDataType_t)q->ty.act,
                                                     CUDNN_TENSOR_NHWC, o->co, o->c, o->k,
                                                     o->k));
            for (int k = 0; k < TRN_ALGO_KINDS; k++) { /* one per direction */
                CUDNN_CHECK(p_cudnnCreateConvolutionDescriptor(&o->cd[k]));
                CUDNN_CHECK(p_cudnnSetConvolution2dDescriptor(
                    o->cd[k], o->pad, o->pad, o->stride, o->stride, 1, 1,
                    CUDNN_CROSS_CORRELATION, (cudnnDataType_t)q->ty.compute));
                /* what the queries may return: fp32 FMA (no TF32); bf16/fp16
                   tensor cores, float accumulation; then the result's (s_algos) */
                CUDNN_CHECK(p_cudnnSetConvolutionMathType(
                    o->cd[k], q->ty.tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
            }
        } else if (o->kind == Q_BN && q->ty.own_bn) { /* bf16: own kernels */
            long need = 2L * o->c * TRN_BNH_CHUNKS;
            maxbn = need > maxbn ? need : maxbn;
            CUDA_CHECK(cudaMalloc(&o->smean, o->c * sizeof(float)));
            CUDA_CHECK(cudaMalloc(&o->sinv, o->c * sizeof(float)));
        } else if (o->kind == Q_BN) {
            /* scale, bias, mean and variance: the descriptor cuDNN derives
               from the input's for spatial BN (1 x C x 1 x 1, its type) */
            cudnnTensorDescriptor_t xd;
            CUDNN_CHECK(p_cudnnCreateTensorDescriptor(&xd));
            CUDNN_CHECK(p_cudnnSetTensor4dDescriptor(
                xd, CUDNN_TENSOR_NHWC, (cudnnDataType_t)q->ty.act, 1, o->c, o->h, o->w));
            CUDNN_CHECK(p_cudnnCreateTensorDescriptor(&o->bnd));
            CUDNN_CHECK(
                p_cudnnDeriveBNTensorDescriptor(o->bnd, xd, CUDNN_BATCHNORM_SPATIAL));
            CUDNN_CHECK(p_cudnnDestroyTensorDescriptor(xd));
            cudnnDataType_t dt; /* fp32 parameters only: else exit 2, no step */
            int dn, dc, dh, dw, sn, sc, sh, sw;
            CUDNN_CHECK(p_cudnnGetTensor4dDescriptor(o->bnd, &dt, &dn, &dc, &dh, &dw, &sn,
                                                     &sc, &sh, &sw));
            if (trn_cudnn_bn_type_check(q->prec, (int)dt, err) < 0) {
                fprintf(stderr, "jizhi-train: --backend cuda --model cnn: %s\n", err);
                exit(2);
            }
            CUDA_CHECK(cudaMalloc(&o->smean, o->c * sizeof(float)));
            CUDA_CHECK(cudaMalloc(&o->sinv, o->c * sizeof(float)));
        }
    }
    if (maxbn > 0)
        CUDA_CHECK(cudaMalloc(&q->bnpart, maxbn * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&q->scratch, (1 + 2 * (size_t)q->np) * sizeof(float)));
    long maxn = 1;
    for (int i = 0; i < q->np; i++)
        maxn = q->pn[i] > maxn ? q->pn[i] : maxn;
    CUDA_CHECK(cudaMalloc(&q->part, 2 * s_blocks(maxn) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&q->flag, sizeof(int)));
    CUDA_CHECK(cudaMalloc(&q->args, sizeof(s_args)));
    CUDA_CHECK(cudaMallocHost(&q->args_h, sizeof(s_args)));
    CUDA_CHECK(cudaMallocHost(&q->res_h, (1 + 2 * (size_t)q->np) * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&q->flag_h, sizeof(int)));
    if (q->rk.comm) { /* several ranks: op i's params final at its stage */
        CUDA_CHECK(cudaMallocHost(&q->state_h, (q->nstate + 1) * sizeof(float)));
        q->dd = trn_devdist_new(q->rk.comm, q->np, q->pn, q->pstage, q->nstages, &q->rk.o,
                                q->rk.path, (void *)q->stream, q->rk.verbose, err);
        if (!q->dd)
            return -1;
    }
    return 0;
}

/* BN running statistics on several ranks: the mean over the ranks after
   every step, as the CPU CNN's (trn_comm_mean: the same ring sum and
   1/size), through pinned host memory. 0 or -1. */
static int s_state_mean(s_cnn *q)
{
    if (q->nstate <= 0)
        return 0;
    size_t bytes = q->nstate * sizeof(float);
    CUDA_CHECK(cudaMemcpy(q->state_h, q->state, bytes, cudaMemcpyDeviceToHost));
    if (trn_comm_mean(q->rk.comm, q->state_h, q->nstate) < 0)
        return -1;
    CUDA_CHECK(cudaMemcpy(q->state, q->state_h, bytes, cudaMemcpyHostToDevice));
    return 0;
}

/* The batch into the input buffer in T (a host batch from the stage,
   converted; device data gathered and converted by k_gather), then the
   forward and the backward in T. 0, or -1 when the exchange failed. */
template <typename T>
static int s_pass_t(s_cnn *q, const float *x, const float *X, const unsigned char *Y,
                    const int *perm, int nb, long d0, trn_devdist *dd)
{
    cudaStream_t st = q->stream;
    T *in = (T *)q->buf[0].x;
    if (x && q->stage)
        k_convert<T><<<s_blocks(nb * d0), 256, 0, st>>>(q->stage, in, nb * d0);
    else if (!x)
        k_gather<T><<<s_blocks(nb * d0), 256, 0, st>>>(X, Y, perm, q->args, nb, (int)d0,
                                                       in, q->y);
    s_forward<T>(q, nb);
    return s_backward<T>(q, nb, dd);
}

static int s_pass(s_cnn *q, const float *x, const float *X, const unsigned char *Y,
                  const int *perm, int nb, long d0, trn_devdist *dd)
{
    if (q->prec == TRN_BF16)
        return s_pass_t<__nv_bfloat16>(q, x, X, Y, perm, nb, d0, dd);
    if (q->prec == TRN_FP16)
        return s_pass_t<__half>(q, x, X, Y, perm, nb, d0, dd);
    return s_pass_t<float>(q, x, X, Y, perm, nb, d0, dd);
}

/* One step: the batch from host memory (x, y) or, with x NULL, gathered on
   the device from the training set X, Y in the order perm (examples
   perm[at .. at + nb), gather.h; backend_cuda.cu's device data). One rank
   (q->dd NULL): global == nb. Several ranks: this rank's shard of nb
   examples (nb may be 0) of a global batch of `global`, BatchNorm on the
   shard's own statistics (as the CPU CNN per rank), the gradients summed
   over the ranks by the exchange while the backward runs, the norms, the
   overflow check and the update on the sums, then the BN running
   statistics averaged over the ranks. Returns the loss sum, or -1 when
   the exchange failed. NEVER RUN ON A GPU with several ranks. */
static double s_step_src(s_cnn *q, const float *x, const uint8_t *y, const float *X,
                         const unsigned char *Y, const int *perm, int at, int nb,
                         int global, double lr, double loss_scale, int *overflow,
                         double *grad_sqnorm)
{
    cudaStream_t st = q->stream;
    trn_devdist *dd = q->dd;
    int rc = 0;
    if (nb > 0)
        s_reserve(q, nb);
    q->args_h->lr = (float)lr;
    q->args_h->inv_scale = (float)(1.0 / loss_scale);
    q->args_h->dscale = (float)(loss_scale / global);
    q->args_h->at = at;
    s_buf *in = &q->buf[0];
    long d0 = (long)in->h * in->w; /* single-channel images: NCHW rows are NHWC */
    CUDA_CHECK(
        cudaMemcpyAsync(q->args, q->args_h, sizeof(s_args), cudaMemcpyHostToDevice, st));
    CUDA_CHECK(
        cudaMemsetAsync(q->scratch, 0, (1 + 2 * (size_t)q->np) * sizeof(float), st));
    CUDA_CHECK(cudaMemsetAsync(q->flag, 0, sizeof(int), st));
    if (dd) {
        void *g[MAXP];
        for (int i = 0; i < q->np; i++)
            g[i] = q->g[i];
        if (trn_devdist_begin(dd, g, TRN_FP32, (float)(1.0 / loss_scale)) < 0)
            rc = -1;
    }
    if (nb > 0) {
        if (x) /* host batch: fp32 into the input (fp32) or the stage */
            CUDA_CHECK(cudaMemcpyAsync(q->stage ? q->stage : (float *)in->x, x,
                                       (size_t)nb * d0 * sizeof(float),
                                       cudaMemcpyHostToDevice, st));
        if (x)
            CUDA_CHECK(cudaMemcpyAsync(q->y, y, (size_t)nb, cudaMemcpyHostToDevice, st));
        if (s_pass(q, x, X, Y, perm, nb, d0, dd) < 0)
            rc = -1;
    } else if (dd) { /* an empty shard: zero gradients, every stage still goes */
        for (int i = 0; i < q->np; i++)
            CUDA_CHECK(cudaMemsetAsync(q->g[i], 0, q->pn[i] * sizeof(float), st));
        for (int s = 0; s < q->nstages; s++)
            if (trn_devdist_stage(dd, s) < 0)
                rc = -1;
    }
    if (dd && trn_devdist_finish(dd) < 0)
        rc = -1;
    if (rc < 0) { /* a failed exchange: raise the flag (exactly 1, as the kernels
                     raise it; a byte memset would make it 0x01010101), so that
                     nothing is updated from partial sums; static storage outlives
                     the async copy (as backend_cuda.cu's s_step_dist_t) */
        static const int one = 1;
        CUDA_CHECK(
            cudaMemcpyAsync(q->flag, &one, sizeof one, cudaMemcpyHostToDevice, st));
    }
    if (q->prec == TRN_BF16)
        s_finish<__nv_bfloat16>(q, dd);
    else if (q->prec == TRN_FP16)
        s_finish<__half>(q, dd);
    else
        s_finish<float>(q, dd);
    CUDA_CHECK(cudaStreamSynchronize(st));
    /* no collective after a failed one: the other ranks may not be there */
    if (dd && rc == 0 && s_state_mean(q) < 0)
        rc = -1;
    double gsq = 0;
    for (int i = 0; i < q->np; i++)
        gsq += q->res_h[2 + 2 * i];
    *grad_sqnorm = gsq;
    *overflow = *q->flag_h;
    return rc < 0 ? -1 : q->res_h[0];
}

static double s_step(void *self, const float *x, const uint8_t *y, int nb, double lr,
                     double loss_scale, int *overflow, double *grad_sqnorm)
{
    return s_step_src((s_cnn *)self, x, y, NULL, NULL, NULL, 0, nb, nb, lr, loss_scale,
                      overflow, grad_sqnorm) /
           nb;
}

/* The step on device-resident data (backend_cuda.cu's set_data/set_order/
   step_at hand it over): X (n x dim fp32), Y and perm are device pointers,
   borrowed; dim must be the model's input size. One rank: global == nb;
   after trn_cudnn_set_comm this rank's shard of a global batch of
   `global`. Returns the loss sum, or -1 when dim does not match or the
   exchange failed. */
extern "C" double trn_cudnn_step_dev(trn_backend *b, const float *X,
                                     const unsigned char *Y, const int *perm, int dim,
                                     int at, int nb, int global, double lr,
                                     double loss_scale, int *overflow,
                                     double *grad_sqnorm)
{
    s_cnn *q = (s_cnn *)b->self;
    if (!q->dnn || dim != q->buf[0].c * q->buf[0].h * q->buf[0].w) {
        fprintf(stderr,
                "jizhi-train: CUDA CNN: device data rows of %d values for a model "
                "that takes %d\n",
                dim, q->dnn ? q->buf[0].c * q->buf[0].h * q->buf[0].w : 0);
        return -1;
    }
    return s_step_src(q, NULL, NULL, X, Y, perm, at, nb, global, lr, loss_scale, overflow,
                      grad_sqnorm);
}

/* Makes the CNN one rank of a data-parallel run over comm (borrowed, must
   outlive the backend): the exchange is built at the next attach with
   options o on path (TRN_GRAD_DEVICE or TRN_GRAD_HOST; backend_cuda.cu's
   set_comm has checked them). */
extern "C" void trn_cudnn_set_comm(trn_backend *b, trn_comm *comm, const trn_dist_opts *o,
                                   int path, int verbose)
{
    s_cnn *q = (s_cnn *)b->self;
    q->rk.comm = comm;
    q->rk.o = *o;
    q->rk.path = (trn_grad_path)path;
    q->rk.verbose = verbose;
}

/* A data-parallel step with this rank's shard (x, y: nb examples, nb may
   be 0) from host memory (trn_backend.step_dist). The shard's loss sum,
   or -1. */
extern "C" double trn_cudnn_step_dist(trn_backend *b, const float *x, const uint8_t *y,
                                      int nb, int global, double lr, double loss_scale,
                                      int *overflow, double *grad_sqnorm)
{
    s_cnn *q = (s_cnn *)b->self;
    if (!q->dd) {
        fprintf(stderr, "jizhi-train: CUDA CNN: a data-parallel step without set_comm\n");
        return -1;
    }
    return s_step_src(q, x, y, NULL, NULL, NULL, 0, nb, global, lr, loss_scale, overflow,
                      grad_sqnorm);
}

static void s_sync_to_host(void *self, trn_net *net)
{
    s_cnn *q = (s_cnn *)self;
    if (!q->dnn)
        return;
    CUDA_CHECK(cudaStreamSynchronize(q->stream));
    for (int i = 0; i < q->np; i++) {
        trn_param *p = trn_net_param(net, i);
        if (s_get(q, i, q->w[i], p->w) < 0 || s_get(q, i, q->m[i], p->m) < 0) {
            fprintf(stderr, "jizhi-train: CUDA CNN: out of memory\n");
            exit(1);
        }
    }
    CUDA_CHECK(cudaMemcpy(trn_net_state(net), q->state, q->nstate * sizeof(float),
                          cudaMemcpyDeviceToHost));
    trn_net_sync_weights(net);
}

/* The CNN backend (backend_cuda.cu creates it for a "cnn:" model). Returns
   NULL with err; caller owns the result (trn_cudnn_backend_destroy). */
extern "C" trn_backend *trn_cudnn_backend_new(char *err)
{
    trn_backend *b = (trn_backend *)calloc(1, sizeof *b);
    s_cnn *q = (s_cnn *)calloc(1, sizeof *q);
    if (!b || !q) {
        free(b);
        free(q);
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    b->name = "cuda-cnn";
    b->attach = s_attach;
    b->step = s_step;
    b->sync_to_host = s_sync_to_host;
    b->detach = s_detach;
    b->self = q;
    return b;
}

extern "C" void trn_cudnn_backend_destroy(trn_backend *b)
{
    if (!b)
        return;
    s_detach(b->self);
    trn_algo_cache_fini(&((s_cnn *)b->self)->algos);
    free(b->self);
    free(b);
}
