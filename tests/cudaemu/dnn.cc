/*  dnn.cc - cudaemu's cuDNN (include/cudnn.h): the legacy cuDNN 9 calls of
    the CUDA CNN (trainer/cudnn_dl.cuh's S_DNN_FUNCS), on the CPU, built
    with -shared -fPIC into the libcudnn.so.9 that the trainer dlopens; it
    calls emu.h's functions, which the test executable exports (-rdynamic).
    NOT A GPU.

    What it emulates: 4-d tensor and filter descriptors (NCHW or NHWC;
    filters KCRS or KRSC), 2-d convolution descriptors (padding, stride,
    dilation, CROSS_CORRELATION or CONVOLUTION = flipped kernel, math
    type); convolution forward, backward data and backward filter with
    alpha/beta (beta 0: the output is not read) in float compute on FLOAT,
    HALF or BFLOAT16 data (the accumulation in float in a fixed order,
    the output rounded once to its type; FLOAT data under a math type other
    than FMA has its inputs rounded to TF32 first, as tensor cores may); the
    _v7 algorithm queries (a fixed list) and the workspace queries; spatial
    batch normalization, training forward and backward; the handle's
    stream.

    Workspace needs (made up, not cuDNN's: deterministic, 0 for some
    algorithms, growing with the sizes so that a workspace sized for one
    batch is too small for a larger one). x N x C x H x W, w K x C x R x S,
    y N x K x P x Q, e the data type's bytes; the _v7 lists report the same
    `memory` as the *WorkspaceSize query. The deterministic algorithms the
    lists offer need a few bytes per pixel (a few MB at batch 1024, far
    below what a caller would cap the workspace at); the others more:
      forward   IMPLICIT_GEMM, DIRECT, WINOGRAD  0
                IMPLICIT_PRECOMP_GEMM            N*P*Q*4
                GEMM                             N*P*Q*C*R*S*e (im2col)
      bwd data  ALGO_0, WINOGRAD                 0
                ALGO_1                           N*H*W*4
      bwd filt  ALGO_0                           0
                ALGO_1                           N*P*Q*4 + K*C*R*S*4
                ALGO_3                           N*K*C*R*S*4
      FFT, FFT_TILING, WINOGRAD_NONFUSED (each direction):
                (N*C + K*C + N*K) * (H + 2 pad_h) * (W + 2 pad_w) * 8
    A convolution given workSpaceSizeInBytes below its algorithm's need
    returns CUDNN_STATUS_BAD_PARAM (what cuDNN returned for one: chainer
    issue 3922, cudnnConvolutionForward with tensor cores) and prints
    "cudaemu: <call>: workspace of N bytes, the algorithm needs M"; a
    workspace size > 0 must be device memory of that size (NULL with 0 is
    fine when the need is 0), checked at the call and again when the work
    runs. Every op runs on the handle's stream as
    an emu_enqueue closure, holding copies of the descriptors and the host
    scalars taken at the call; every device pointer is checked with
    emu_need at its exact extent at the call.

    Limits (NOT_SUPPORTED where the real library would run): compute
    types other than FLOAT, DOUBLE data, NCHW_VECT_C, PER_ACTIVATION batch
    norm. Algorithms are accepted but all compute the same way (none is
    non-deterministic here). Descriptors destroyed or never created end the
    process (emu_fail). The arithmetic: dnn_compute.cc (dnn_impl.h).
*/
#include <cudnn.h>

#include <stdio.h>
#include <string.h>

#include <mutex>
#include <set>
#include <vector>

#include "dnn_impl.h"
#include "emu.h"

/* ---- live objects ------------------------------------------------------------------ */

static std::mutex g_mu;
static std::set<const void *> g_live; /* handles and descriptors not destroyed */

static void s_add(const void *p)
{
    std::lock_guard<std::mutex> l(g_mu);
    g_live.insert(p);
}

/* Ends the process when p (not NULL) is not a live object of this library. */
static void s_alive(const void *p, const char *fn, const char *what)
{
    std::lock_guard<std::mutex> l(g_mu);
    if (!g_live.count(p))
        emu_fail("%s: %s %p was destroyed or never created", fn, what, p);
}

static void s_remove(const void *p)
{
    std::lock_guard<std::mutex> l(g_mu);
    g_live.erase(p);
}

/* a new value-initialised object, registered */
template <typename D> static cudnnStatus_t s_create(D **p)
{
    if (!p)
        return CUDNN_STATUS_BAD_PARAM;
    *p = new D{};
    s_add(*p);
    return CUDNN_STATUS_SUCCESS;
}

/* a descriptor destroyed (NULL: nothing to do) */
template <typename D> static cudnnStatus_t s_destroy(D *p, const char *fn)
{
    if (!p)
        return CUDNN_STATUS_SUCCESS;
    s_alive(p, fn, "descriptor");
    s_remove(p);
    delete p;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- library, handle --------------------------------------------------------------- */

extern "C" size_t cudnnGetVersion(void)
{
    return CUDNN_VERSION;
}

extern "C" size_t cudnnGetCudartVersion(void)
{
    return CUDART_VERSION;
}

/* clang-format off */
#define S_N(x) {x, #x}
/* clang-format on */
static const struct {
    int status;
    const char *name;
} k_names[] = {
    S_N(CUDNN_STATUS_SUCCESS),
    S_N(CUDNN_STATUS_NOT_INITIALIZED),
    S_N(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH),
    S_N(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH),
    S_N(CUDNN_STATUS_DEPRECATED),
    S_N(CUDNN_STATUS_LICENSE_ERROR),
    S_N(CUDNN_STATUS_RUNTIME_IN_PROGRESS),
    S_N(CUDNN_STATUS_RUNTIME_FP_OVERFLOW),
    S_N(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED),
    S_N(CUDNN_STATUS_BAD_PARAM),
    S_N(CUDNN_STATUS_INVALID_VALUE),
    S_N(CUDNN_STATUS_BAD_PARAM_NULL_POINTER),
    S_N(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER),
    S_N(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED),
    S_N(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND),
    S_N(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT),
    S_N(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH),
    S_N(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH),
    S_N(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES),
    S_N(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE),
    S_N(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH),
    S_N(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE),
    S_N(CUDNN_STATUS_NOT_SUPPORTED),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_SHAPE),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_PADDING),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API),
    S_N(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE),
    S_N(CUDNN_STATUS_INTERNAL_ERROR),
    S_N(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED),
    S_N(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE),
    S_N(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED),
    S_N(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
    S_N(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM),
    S_N(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED),
    S_N(CUDNN_STATUS_EXECUTION_FAILED),
    S_N(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER),
    S_N(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS),
    S_N(CUDNN_STATUS_EXECUTION_FAILED_CUDART),
    S_N(CUDNN_STATUS_EXECUTION_FAILED_CURAND),
};
#undef S_N

extern "C" const char *cudnnGetErrorString(cudnnStatus_t status)
{
    for (const auto &e : k_names)
        if (e.status == (int)status)
            return e.name;
    return "CUDNN_STATUS_UNKNOWN";
}

extern "C" cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)
{
    return s_create(handle);
}

extern "C" cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
{
    if (!handle)
        return CUDNN_STATUS_BAD_PARAM;
    s_alive(handle, "cudnnDestroy", "handle");
    s_remove(handle);
    delete handle;
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId)
{
    if (!handle)
        return CUDNN_STATUS_BAD_PARAM;
    s_alive(handle, "cudnnSetStream", "handle");
    handle->stream = streamId;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- descriptors ------------------------------------------------------------------- */

extern "C" cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc)
{
    return s_create(tensorDesc);
}

extern "C" cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc)
{
    return s_destroy(tensorDesc, "cudnnDestroyTensorDescriptor");
}

/* 1 x c x h x w ... packed in format fmt into t */
static void s_tensor_set(Tensor *t, cudnnTensorFormat_t fmt, cudnnDataType_t type, int n,
                         int c, int h, int w)
{
    t->set = 1;
    t->type = type;
    t->n = n, t->c = c, t->h = h, t->w = w;
    if (fmt == CUDNN_TENSOR_NHWC)
        t->ns = c * h * w, t->cs = 1, t->hs = w * c, t->ws = c;
    else
        t->ns = c * h * w, t->cs = h * w, t->hs = w, t->ws = 1;
}

extern "C" cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc,
                                                    cudnnTensorFormat_t format,
                                                    cudnnDataType_t dataType, int n,
                                                    int c, int h, int w)
{
    if (!tensorDesc)
        return CUDNN_STATUS_BAD_PARAM;
    s_alive(tensorDesc, "cudnnSetTensor4dDescriptor", "tensor descriptor");
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || !dnn_type_valid(dataType) ||
        (int)format < CUDNN_TENSOR_NCHW || (int)format > CUDNN_TENSOR_NCHW_VECT_C)
        return CUDNN_STATUS_BAD_PARAM;
    if (format == CUDNN_TENSOR_NCHW_VECT_C) /* not emulated */
        return CUDNN_STATUS_NOT_SUPPORTED;
    if ((long long)n * c * h * w > 0x7fffffffLL) /* cuDNN's 2 Gi elements */
        return CUDNN_STATUS_NOT_SUPPORTED;
    s_tensor_set(tensorDesc, format, dataType, n, c, h, w);
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t
cudnnGetTensor4dDescriptor(const cudnnTensorDescriptor_t tensorDesc,
                           cudnnDataType_t *dataType, int *n, int *c, int *h, int *w,
                           int *nStride, int *cStride, int *hStride, int *wStride)
{
    if (!tensorDesc)
        return CUDNN_STATUS_BAD_PARAM;
    s_alive(tensorDesc, "cudnnGetTensor4dDescriptor", "tensor descriptor");
    if (!tensorDesc->set || !dataType || !n || !c || !h || !w || !nStride || !cStride ||
        !hStride || !wStride)
        return CUDNN_STATUS_BAD_PARAM;
    const Tensor &t = *tensorDesc;
    *dataType = t.type;
    *n = t.n, *c = t.c, *h = t.h, *w = t.w;
    *nStride = t.ns, *cStride = t.cs, *hStride = t.hs, *wStride = t.ws;
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc)
{
    return s_create(filterDesc);
}

extern "C" cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc)
{
    return s_destroy(filterDesc, "cudnnDestroyFilterDescriptor");
}

extern "C" cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc,
                                                    cudnnDataType_t dataType,
                                                    cudnnTensorFormat_t format, int k,
                                                    int c, int h, int w)
{
    if (!filterDesc)
        return CUDNN_STATUS_BAD_PARAM;
    s_alive(filterDesc, "cudnnSetFilter4dDescriptor", "filter descriptor");
    if (k <= 0 || c <= 0 || h <= 0 || w <= 0 || !dnn_type_valid(dataType) ||
        (int)format < CUDNN_TENSOR_NCHW || (int)format > CUDNN_TENSOR_NCHW_VECT_C)
        return CUDNN_STATUS_BAD_PARAM;
    if (format == CUDNN_TENSOR_NCHW_VECT_C)
        return CUDNN_STATUS_NOT_SUPPORTED;
    if ((long long)k * c * h * w > 0x7fffffffLL)
        return CUDNN_STATUS_NOT_SUPPORTED;
    Filter &f = *filterDesc;
    f.set = 1;
    f.type = dataType;
    f.fmt = format;
    f.k = k, f.c = c, f.r = h, f.s = w;
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t
cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc)
{
    return s_create(convDesc);
}

extern "C" cudnnStatus_t
cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc)
{
    return s_destroy(convDesc, "cudnnDestroyConvolutionDescriptor");
}

extern "C" cudnnStatus_t
cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h,
                                int pad_w, int u, int v, int dilation_h, int dilation_w,
                                cudnnConvolutionMode_t mode, cudnnDataType_t computeType)
{
    if (!convDesc)
        return CUDNN_STATUS_BAD_PARAM;
    s_alive(convDesc, "cudnnSetConvolution2dDescriptor", "convolution descriptor");
    if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 ||
        dilation_w <= 0 ||
        (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) ||
        !dnn_type_valid(computeType))
        return CUDNN_STATUS_BAD_PARAM;
    Conv &d = *convDesc;
    d.set = 1;
    d.pad_h = pad_h, d.pad_w = pad_w, d.u = u, d.v = v;
    d.dil_h = dilation_h, d.dil_w = dilation_w;
    d.mode = mode;
    d.compute = computeType;
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t
cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                            cudnnMathType_t mathType)
{
    if (!convDesc)
        return CUDNN_STATUS_BAD_PARAM;
    s_alive(convDesc, "cudnnSetConvolutionMathType", "convolution descriptor");
    if ((int)mathType < CUDNN_DEFAULT_MATH || (int)mathType > CUDNN_FMA_MATH)
        return CUDNN_STATUS_BAD_PARAM;
    convDesc->math = mathType;
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t
cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derivedBnDesc,
                              const cudnnTensorDescriptor_t xDesc,
                              cudnnBatchNormMode_t mode)
{
    if (!derivedBnDesc || !xDesc)
        return CUDNN_STATUS_BAD_PARAM;
    s_alive(derivedBnDesc, "cudnnDeriveBNTensorDescriptor", "derived descriptor");
    s_alive(xDesc, "cudnnDeriveBNTensorDescriptor", "x descriptor");
    if (!xDesc->set || (int)mode < CUDNN_BATCHNORM_PER_ACTIVATION ||
        (int)mode > CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
        return CUDNN_STATUS_BAD_PARAM;
    /* documented: DOUBLE for DOUBLE input, else FLOAT (HALF, BFLOAT16 too) */
    cudnnDataType_t t =
        xDesc->type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    if (mode == CUDNN_BATCHNORM_PER_ACTIVATION)
        s_tensor_set(derivedBnDesc, CUDNN_TENSOR_NCHW, t, 1, xDesc->c, xDesc->h,
                     xDesc->w);
    else
        s_tensor_set(derivedBnDesc, CUDNN_TENSOR_NCHW, t, 1, xDesc->c, 1, 1);
    return CUDNN_STATUS_SUCCESS;
}

/* ---- convolutions: checks ---------------------------------------------------------- */

/* The checks the real library makes of a convolution's descriptors (x:
   the input's shape, y: the output's; for backward data x is dx and y
   dy). BAD_PARAM for missing or unset descriptors, mismatched types or
   shapes; NOT_SUPPORTED for a type configuration not emulated. */
static cudnnStatus_t s_conv_check(const char *fn, cudnnHandle_t handle, const Tensor *x,
                                  const Filter *f, const Conv *cd, const Tensor *y,
                                  Geo *g)
{
    if (!handle || !x || !f || !cd || !y)
        return CUDNN_STATUS_BAD_PARAM;
    s_alive(handle, fn, "handle");
    s_alive(x, fn, "tensor descriptor");
    s_alive(f, fn, "filter descriptor");
    s_alive(cd, fn, "convolution descriptor");
    s_alive(y, fn, "tensor descriptor");
    if (!x->set || !f->set || !cd->set || !y->set)
        return CUDNN_STATUS_BAD_PARAM;
    if (x->type != f->type || y->type != x->type || x->c != f->c || y->c != f->k ||
        y->n != x->n)
        return CUDNN_STATUS_BAD_PARAM;
    long er = (long)(f->r - 1) * cd->dil_h + 1, es = (long)(f->s - 1) * cd->dil_w + 1;
    long hp = x->h + 2L * cd->pad_h, wp = x->w + 2L * cd->pad_w;
    if (er > hp || es > wp)
        return CUDNN_STATUS_BAD_PARAM;
    long P = (hp - er) / cd->u + 1, Q = (wp - es) / cd->v + 1;
    if (y->h != P || y->w != Q)
        return CUDNN_STATUS_BAD_PARAM;
    if (cd->compute != CUDNN_DATA_FLOAT || !dnn_type_computed(x->type))
        return CUDNN_STATUS_NOT_SUPPORTED;
    *g = Geo{x->n,  x->c,      x->h,      x->w,
             f->k,  f->r,      f->s,      P,
             Q,     cd->pad_h, cd->pad_w, cd->u,
             cd->v, cd->dil_h, cd->dil_w, cd->mode == CUDNN_CONVOLUTION};
    g->es = dnn_esize(x->type);
    return CUDNN_STATUS_SUCCESS;
}

/* FLOAT data under a math type other than FMA: tensor cores may run it in TF32 */
static bool s_tf32_math(const Conv *cd, cudnnDataType_t t)
{
    return t == CUDNN_DATA_FLOAT && cd->math != CUDNN_FMA_MATH;
}

/* ---- workspace needs (the header's table) ------------------------------------------ */

enum { S_FWD, S_BWD_DATA, S_BWD_FILTER }; /* a convolution's direction */

/* Bytes that algorithm algo of direction dir needs for geometry g on
   elements of es bytes: deterministic, 0 for some algorithms, else growing
   with the sizes (the batch N included); es: g's element size. */
static size_t s_ws_need(int dir, int algo, const Geo &g)
{
    size_t es = g.es, N = g.N, C = g.C, H = g.H, W = g.W, K = g.K, RS = (size_t)g.R * g.S;
    size_t P = g.P, Q = g.Q, hw = (size_t)(g.H + 2 * g.ph) * (g.W + 2 * g.pw);
    /* FFT, FFT_TILING, WINOGRAD_NONFUSED: x, w and y transformed, complex float */
    size_t xform = (N * C + K * C + N * K) * hw * 8;
    if (dir == S_FWD)
        switch (algo) {
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
            return N * P * Q * 4; /* an int32 offset per output pixel */
        case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
            return N * P * Q * C * RS * es; /* im2col of x */
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
            return xform;
        default: /* IMPLICIT_GEMM, DIRECT, WINOGRAD */
            return 0;
        }
    if (dir == S_BWD_DATA)
        switch (algo) {
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1:
            return N * H * W * 4; /* an int32 offset per dx pixel */
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT:
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING:
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED:
            return xform;
        default: /* ALGO_0, WINOGRAD */
            return 0;
        }
    switch (algo) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1:
        return N * P * Q * 4 + K * C * RS * 4; /* offsets, a float dw */
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3:
        return N * K * C * RS * 4; /* a float partial dw per image */
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT:
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING:
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED:
        return xform;
    default: /* ALGO_0 */
        return 0;
    }
}

/* a workspace of bytes > 0 must be device memory of that size: checked at
   the call and again when the work runs (after a free, it would fault) */
static void s_need_ws(const char *fn, const void *ws, size_t bytes)
{
    if (bytes > 0) {
        char what[96];
        snprintf(what, sizeof what, "%s workSpace", fn);
        emu_need(ws, bytes, 0, what);
    }
}

/* A convolution call given fewer workspace bytes than its algorithm needs:
   BAD_PARAM (what cuDNN returns for an insufficient workspace), the cause
   on stderr. Else SUCCESS, and the workspace checked as device memory of
   the size given. */
static cudnnStatus_t s_ws_enough(const char *fn, int dir, int algo, const Geo &g,
                                 const void *ws, size_t bytes)
{
    size_t need = s_ws_need(dir, algo, g);
    if (bytes < need) {
        fprintf(stderr, "cudaemu: %s: workspace of %zu bytes, the algorithm needs %zu\n",
                fn, bytes, need);
        return CUDNN_STATUS_BAD_PARAM;
    }
    s_need_ws(fn, ws, bytes);
    return CUDNN_STATUS_SUCCESS;
}

/* the _v7 answers: these algorithms in this order, each with its workspace
   need (s_ws_need; 0 when st is not SUCCESS) and the math type of the
   descriptor; ALGO_0 (and 3) are non-deterministic in cuDNN and said so
   here (listed first, as cuDNN's heuristics may) */
template <typename P, typename A>
static cudnnStatus_t s_perf(cudnnStatus_t st, const Conv *cd, int dir, const Geo &g,
                            const A *algos, const int *det, int navail, int requested,
                            int *returned, P *perf)
{
    int n = requested < navail ? requested : navail;
    for (int i = 0; i < n; i++) {
        memset(&perf[i], 0, sizeof perf[i]);
        perf[i].algo = algos[i];
        perf[i].status = st;
        perf[i].time = st == CUDNN_STATUS_SUCCESS ? 1.0f + i : -1.0f;
        perf[i].memory =
            st == CUDNN_STATUS_SUCCESS ? s_ws_need(dir, (int)algos[i], g) : 0;
        perf[i].determinism = det[i] ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
        perf[i].mathType = cd->math;
    }
    *returned = n;
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults)
{
    Geo g;
    cudnnStatus_t st = s_conv_check("cudnnGetConvolutionForwardAlgorithm_v7", handle,
                                    srcDesc, filterDesc, convDesc, destDesc, &g);
    if (st == CUDNN_STATUS_BAD_PARAM || requestedAlgoCount < 1 || !returnedAlgoCount ||
        !perfResults)
        return CUDNN_STATUS_BAD_PARAM;
    static const cudnnConvolutionFwdAlgo_t a[] = {
        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM};
    static const int det[] = {1, 1};
    return s_perf(st, convDesc, S_FWD, g, a, det, 2, requestedAlgoCount,
                  returnedAlgoCount, perfResults);
}

extern "C" cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults)
{
    Geo g;
    cudnnStatus_t st = s_conv_check("cudnnGetConvolutionBackwardDataAlgorithm_v7", handle,
                                    gradDesc, filterDesc, convDesc, diffDesc, &g);
    if (st == CUDNN_STATUS_BAD_PARAM || requestedAlgoCount < 1 || !returnedAlgoCount ||
        !perfResults)
        return CUDNN_STATUS_BAD_PARAM;
    static const cudnnConvolutionBwdDataAlgo_t a[] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_1};
    static const int det[] = {0, 1};
    return s_perf(st, convDesc, S_BWD_DATA, g, a, det, 2, requestedAlgoCount,
                  returnedAlgoCount, perfResults);
}

extern "C" cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults)
{
    Geo g;
    cudnnStatus_t st = s_conv_check("cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                                    handle, srcDesc, gradDesc, convDesc, diffDesc, &g);
    if (st == CUDNN_STATUS_BAD_PARAM || requestedAlgoCount < 1 || !returnedAlgoCount ||
        !perfResults)
        return CUDNN_STATUS_BAD_PARAM;
    static const cudnnConvolutionBwdFilterAlgo_t a[] = {
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3};
    static const int det[] = {0, 1, 0};
    return s_perf(st, convDesc, S_BWD_FILTER, g, a, det, 3, requestedAlgoCount,
                  returnedAlgoCount, perfResults);
}

/* the workspace queries' answer: s_ws_need for a valid algorithm */
static cudnnStatus_t s_ws_size(cudnnStatus_t st, int dir, int algo, int count,
                               const Geo &g, size_t *sizeInBytes)
{
    if (st == CUDNN_STATUS_SUCCESS && (!sizeInBytes || algo < 0 || algo >= count))
        st = CUDNN_STATUS_BAD_PARAM;
    if (st == CUDNN_STATUS_SUCCESS)
        *sizeInBytes = s_ws_need(dir, algo, g);
    return st;
}

extern "C" cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
    const cudnnFilterDescriptor_t wDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, cudnnConvolutionFwdAlgo_t algo,
    size_t *sizeInBytes)
{
    Geo g;
    cudnnStatus_t st = s_conv_check("cudnnGetConvolutionForwardWorkspaceSize", handle,
                                    xDesc, wDesc, convDesc, yDesc, &g);
    return s_ws_size(st, S_FWD, (int)algo, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, g,
                     sizeInBytes);
}

extern "C" cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
    const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t dxDesc, cudnnConvolutionBwdDataAlgo_t algo,
    size_t *sizeInBytes)
{
    Geo g;
    cudnnStatus_t st = s_conv_check("cudnnGetConvolutionBackwardDataWorkspaceSize",
                                    handle, dxDesc, wDesc, convDesc, dyDesc, &g);
    return s_ws_size(st, S_BWD_DATA, (int)algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, g,
                     sizeInBytes);
}

extern "C" cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
    const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc, cudnnConvolutionBwdFilterAlgo_t algo,
    size_t *sizeInBytes)
{
    Geo g;
    cudnnStatus_t st = s_conv_check("cudnnGetConvolutionBackwardFilterWorkspaceSize",
                                    handle, xDesc, gradDesc, convDesc, dyDesc, &g);
    if (st == CUDNN_STATUS_SUCCESS && algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD)
        st = CUDNN_STATUS_NOT_SUPPORTED; /* documented: not implemented */
    return s_ws_size(st, S_BWD_FILTER, (int)algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                     g, sizeInBytes);
}

extern "C" cudnnStatus_t cudnnConvolutionForward(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
    const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t yDesc, void *y)
{
    Geo g;
    cudnnStatus_t st = s_conv_check("cudnnConvolutionForward", handle, xDesc, wDesc,
                                    convDesc, yDesc, &g);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    if (!alpha || !beta || !x || !w || !y || (int)algo < 0 ||
        (int)algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
        return CUDNN_STATUS_BAD_PARAM;
    st = s_ws_enough("cudnnConvolutionForward", S_FWD, (int)algo, g, workSpace,
                     workSpaceSizeInBytes);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    Tensor xt = *xDesc, yt = *yDesc;
    Filter ft = *wDesc;
    emu_need(x, dnn_tbytes(xt), 0, "cudnnConvolutionForward x");
    emu_need(w, dnn_fbytes(ft), 0, "cudnnConvolutionForward w");
    emu_need(y, dnn_tbytes(yt), 0, "cudnnConvolutionForward y");
    float a = *(const float *)alpha, b = *(const float *)beta;
    bool tf32 = s_tf32_math(convDesc, xt.type);
    emu_enqueue(handle->stream, "cudnnConvolutionForward", [=]() {
        s_need_ws("cudnnConvolutionForward", workSpace, workSpaceSizeInBytes);
        std::vector<float> xv = dnn_unpack(xt, x, tf32);
        std::vector<float> wv = dnn_unpack_filter(ft, w, g.flip, tf32);
        dnn_pack(yt, y, dnn_fwd(g, xv, wv), a, b);
    });
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t cudnnConvolutionBackwardData(
    cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc,
    const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t dxDesc, void *dx)
{
    Geo g;
    cudnnStatus_t st = s_conv_check("cudnnConvolutionBackwardData", handle, dxDesc, wDesc,
                                    convDesc, dyDesc, &g);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    if (!alpha || !beta || !w || !dy || !dx || (int)algo < 0 ||
        (int)algo >= CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)
        return CUDNN_STATUS_BAD_PARAM;
    st = s_ws_enough("cudnnConvolutionBackwardData", S_BWD_DATA, (int)algo, g, workSpace,
                     workSpaceSizeInBytes);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    Tensor dyt = *dyDesc, dxt = *dxDesc;
    Filter ft = *wDesc;
    emu_need(w, dnn_fbytes(ft), 0, "cudnnConvolutionBackwardData w");
    emu_need(dy, dnn_tbytes(dyt), 0, "cudnnConvolutionBackwardData dy");
    emu_need(dx, dnn_tbytes(dxt), 0, "cudnnConvolutionBackwardData dx");
    float a = *(const float *)alpha, b = *(const float *)beta;
    bool tf32 = s_tf32_math(convDesc, dxt.type);
    emu_enqueue(handle->stream, "cudnnConvolutionBackwardData", [=]() {
        s_need_ws("cudnnConvolutionBackwardData", workSpace, workSpaceSizeInBytes);
        std::vector<float> dyv = dnn_unpack(dyt, dy, tf32);
        std::vector<float> wv = dnn_unpack_filter(ft, w, g.flip, tf32);
        dnn_pack(dxt, dx, dnn_bwd_data(g, dyv, wv), a, b);
    });
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t cudnnConvolutionBackwardFilter(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
    const void *x, const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnFilterDescriptor_t dwDesc, void *dw)
{
    Geo g;
    cudnnStatus_t st = s_conv_check("cudnnConvolutionBackwardFilter", handle, xDesc,
                                    dwDesc, convDesc, dyDesc, &g);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    if (!alpha || !beta || !x || !dy || !dw || (int)algo < 0 ||
        (int)algo >= CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT)
        return CUDNN_STATUS_BAD_PARAM;
    if (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD)
        return CUDNN_STATUS_NOT_SUPPORTED;
    st = s_ws_enough("cudnnConvolutionBackwardFilter", S_BWD_FILTER, (int)algo, g,
                     workSpace, workSpaceSizeInBytes);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    Tensor xt = *xDesc, dyt = *dyDesc;
    Filter ft = *dwDesc;
    emu_need(x, dnn_tbytes(xt), 0, "cudnnConvolutionBackwardFilter x");
    emu_need(dy, dnn_tbytes(dyt), 0, "cudnnConvolutionBackwardFilter dy");
    emu_need(dw, dnn_fbytes(ft), 0, "cudnnConvolutionBackwardFilter dw");
    float a = *(const float *)alpha, b = *(const float *)beta;
    bool tf32 = s_tf32_math(convDesc, xt.type);
    emu_enqueue(handle->stream, "cudnnConvolutionBackwardFilter", [=]() {
        s_need_ws("cudnnConvolutionBackwardFilter", workSpace, workSpaceSizeInBytes);
        std::vector<float> xv = dnn_unpack(xt, x, tf32);
        std::vector<float> dyv = dnn_unpack(dyt, dy, tf32);
        std::vector<float> acc =
            dnn_bwd_filter(g, xv, dyv); /* KRSC, flipped if CONVOLUTION */
        size_t o = 0;
        for (long k = 0; k < g.K; k++)
            for (long r = 0; r < g.R; r++)
                for (long s = 0; s < g.S; s++)
                    for (long c = 0; c < g.C; c++) {
                        long rr = g.flip ? g.R - 1 - r : r, ss = g.flip ? g.S - 1 - s : s;
                        size_t i = dnn_fidx(ft, k, c, rr, ss);
                        dnn_st(ft.type, dw, i, dnn_blend(a, acc[o++], b, ft.type, dw, i));
                    }
    });
    return CUDNN_STATUS_SUCCESS;
}

/* ---- batch normalization ----------------------------------------------------------- */

static bool s_same_shape(const Tensor *a, const Tensor *b)
{
    return a->type == b->type && a->n == b->n && a->c == b->c && a->h == b->h &&
           a->w == b->w;
}

/* The checks of a spatial batch norm's descriptors: x and y (dy, dx) of
   one shape and type, bn 1 x C x 1 x 1 FLOAT. */
static cudnnStatus_t s_bn_check(const char *fn, cudnnHandle_t handle,
                                cudnnBatchNormMode_t mode, const Tensor *x,
                                const Tensor *y, const Tensor *y2, const Tensor *bn,
                                double epsilon)
{
    if (!handle || !x || !y || !y2 || !bn)
        return CUDNN_STATUS_BAD_PARAM;
    s_alive(handle, fn, "handle");
    s_alive(x, fn, "tensor descriptor");
    s_alive(y, fn, "tensor descriptor");
    s_alive(y2, fn, "tensor descriptor");
    s_alive(bn, fn, "scale/bias descriptor");
    if ((int)mode < CUDNN_BATCHNORM_PER_ACTIVATION ||
        (int)mode > CUDNN_BATCHNORM_SPATIAL_PERSISTENT || !x->set || !y->set ||
        !y2->set || !bn->set || !s_same_shape(x, y) || !s_same_shape(x, y2) ||
        epsilon < CUDNN_BN_MIN_EPSILON)
        return CUDNN_STATUS_BAD_PARAM;
    if (mode == CUDNN_BATCHNORM_PER_ACTIVATION || !dnn_type_computed(x->type))
        return CUDNN_STATUS_NOT_SUPPORTED; /* not emulated */
    if (bn->n != 1 || bn->c != x->c || bn->h != 1 || bn->w != 1 ||
        bn->type != CUDNN_DATA_FLOAT)
        return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}

/* an optional (NULL) per-channel vector of bytes, checked when given */
static void s_need_opt(const void *p, size_t bytes, const char *what)
{
    if (p)
        emu_need(p, bytes, 0, what);
}

extern "C" cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void *alpha, const void *beta,
    const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t yDesc, void *y,
    const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void *bnScale,
    const void *bnBias, double exponentialAverageFactor, void *resultRunningMean,
    void *resultRunningVariance, double epsilon, void *resultSaveMean,
    void *resultSaveInvVariance)
{
    const char *fn = "cudnnBatchNormalizationForwardTraining";
    cudnnStatus_t st = s_bn_check(fn, handle, mode, xDesc, yDesc, yDesc,
                                  bnScaleBiasMeanVarDesc, epsilon);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    if (!alpha || !beta || !x || !y || !bnScale || !bnBias ||
        !resultRunningMean != !resultRunningVariance ||
        !resultSaveMean != !resultSaveInvVariance)
        return CUDNN_STATUS_BAD_PARAM;
    Tensor xt = *xDesc, yt = *yDesc, bt = *bnScaleBiasMeanVarDesc;
    size_t pb = dnn_tbytes(bt);
    emu_need(x, dnn_tbytes(xt), 0, "cudnnBatchNormalizationForwardTraining x");
    emu_need(y, dnn_tbytes(yt), 0, "cudnnBatchNormalizationForwardTraining y");
    emu_need(bnScale, pb, 0, "cudnnBatchNormalizationForwardTraining bnScale");
    emu_need(bnBias, pb, 0, "cudnnBatchNormalizationForwardTraining bnBias");
    s_need_opt(resultRunningMean, pb,
               "cudnnBatchNormalizationForwardTraining runningMean");
    s_need_opt(resultRunningVariance, pb,
               "cudnnBatchNormalizationForwardTraining runningVar");
    s_need_opt(resultSaveMean, pb, "cudnnBatchNormalizationForwardTraining saveMean");
    s_need_opt(resultSaveInvVariance, pb,
               "cudnnBatchNormalizationForwardTraining saveInvVar");
    float a = *(const float *)alpha, b = *(const float *)beta;
    double f = exponentialAverageFactor;
    float *rm = (float *)resultRunningMean, *rv = (float *)resultRunningVariance;
    float *sm = (float *)resultSaveMean, *sv = (float *)resultSaveInvVariance;
    const float *gam = (const float *)bnScale, *bet = (const float *)bnBias;
    emu_enqueue(handle->stream, fn, [=]() {
        long C = xt.c, M = (long)xt.n * xt.h * xt.w;
        std::vector<float> X = dnn_unpack(xt, x, false), mean, var;
        dnn_moments(X, M, C, mean, var);
        std::vector<float> inv(C), Y((size_t)M * C);
        for (long c = 0; c < C; c++)
            inv[c] = dnn_invstd(var[c], epsilon);
        for (long i = 0; i < M; i++)
            for (long c = 0; c < C; c++) {
                size_t pi = dnn_tidx(bt, 0, c, 0, 0);
                float xh = (X[i * C + c] - mean[c]) * inv[c];
                Y[i * C + c] = gam[pi] * xh + bet[pi];
            }
        dnn_pack(yt, y, Y, a, b);
        /* running averages: the mean, and the variance unbiased (M / (M - 1)) */
        double unb = M > 1 ? (double)M / (double)(M - 1) : 1.0;
        for (long c = 0; c < C; c++) {
            size_t pi = dnn_tidx(bt, 0, c, 0, 0);
            if (rm) {
                rm[pi] = (float)((1.0 - f) * rm[pi] + f * mean[c]);
                rv[pi] = (float)((1.0 - f) * rv[pi] + f * (var[c] * unb));
            }
            if (sm) {
                sm[pi] = mean[c];
                sv[pi] = inv[c];
            }
        }
    });
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void *alphaDataDiff,
    const void *betaDataDiff, const void *alphaParamDiff, const void *betaParamDiff,
    const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnTensorDescriptor_t dxDesc, void *dx,
    const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void *bnScale,
    void *dBnScaleResult, void *dBnBiasResult, double epsilon, const void *savedMean,
    const void *savedInvVariance)
{
    const char *fn = "cudnnBatchNormalizationBackward";
    cudnnStatus_t st =
        s_bn_check(fn, handle, mode, xDesc, dyDesc, dxDesc, dBnScaleBiasDesc, epsilon);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    if (!alphaDataDiff || !betaDataDiff || !alphaParamDiff || !betaParamDiff || !x ||
        !dy || !dx || !bnScale || !dBnScaleResult || !dBnBiasResult ||
        !savedMean != !savedInvVariance)
        return CUDNN_STATUS_BAD_PARAM;
    Tensor xt = *xDesc, dyt = *dyDesc, dxt = *dxDesc, bt = *dBnScaleBiasDesc;
    size_t pb = dnn_tbytes(bt);
    emu_need(x, dnn_tbytes(xt), 0, "cudnnBatchNormalizationBackward x");
    emu_need(dy, dnn_tbytes(dyt), 0, "cudnnBatchNormalizationBackward dy");
    emu_need(dx, dnn_tbytes(dxt), 0, "cudnnBatchNormalizationBackward dx");
    emu_need(bnScale, pb, 0, "cudnnBatchNormalizationBackward bnScale");
    emu_need(dBnScaleResult, pb, 0, "cudnnBatchNormalizationBackward dBnScaleResult");
    emu_need(dBnBiasResult, pb, 0, "cudnnBatchNormalizationBackward dBnBiasResult");
    s_need_opt(savedMean, pb, "cudnnBatchNormalizationBackward savedMean");
    s_need_opt(savedInvVariance, pb, "cudnnBatchNormalizationBackward savedInvVariance");
    float ad = *(const float *)alphaDataDiff, bd = *(const float *)betaDataDiff;
    float ap = *(const float *)alphaParamDiff, bp = *(const float *)betaParamDiff;
    const float *gam = (const float *)bnScale;
    const float *smp = (const float *)savedMean, *svp = (const float *)savedInvVariance;
    float *dg = (float *)dBnScaleResult, *db = (float *)dBnBiasResult;
    emu_enqueue(handle->stream, fn, [=]() {
        long C = xt.c, M = (long)xt.n * xt.h * xt.w;
        std::vector<float> X = dnn_unpack(xt, x, false), DY = dnn_unpack(dyt, dy, false);
        std::vector<float> mean(C), inv(C);
        if (smp) { /* the forward's saved statistics */
            for (long c = 0; c < C; c++) {
                size_t pi = dnn_tidx(bt, 0, c, 0, 0);
                mean[c] = smp[pi];
                inv[c] = svp[pi];
            }
        } else { /* recomputed from x */
            std::vector<float> var;
            dnn_moments(X, M, C, mean, var);
            for (long c = 0; c < C; c++)
                inv[c] = dnn_invstd(var[c], epsilon);
        }
        std::vector<float> sdy(C, 0.0f), sdyx(C, 0.0f);
        for (long i = 0; i < M; i++)
            for (long c = 0; c < C; c++) {
                float d = DY[i * C + c], xh = (X[i * C + c] - mean[c]) * inv[c];
                sdy[c] = sdy[c] + d;
                sdyx[c] = sdyx[c] + d * xh;
            }
        std::vector<float> DX((size_t)M * C);
        for (long i = 0; i < M; i++)
            for (long c = 0; c < C; c++) {
                float k = gam[dnn_tidx(bt, 0, c, 0, 0)] * inv[c] / (float)M;
                float xh = (X[i * C + c] - mean[c]) * inv[c];
                DX[i * C + c] = k * ((float)M * DY[i * C + c] - sdy[c] - xh * sdyx[c]);
            }
        dnn_pack(dxt, dx, DX, ad, bd);
        for (long c = 0; c < C; c++) {
            size_t pi = dnn_tidx(bt, 0, c, 0, 0);
            dg[pi] = dnn_blend(ap, sdyx[c], bp, CUDNN_DATA_FLOAT, dg, pi);
            db[pi] = dnn_blend(ap, sdy[c], bp, CUDNN_DATA_FLOAT, db, pi);
        }
    });
    return CUDNN_STATUS_SUCCESS;
}
