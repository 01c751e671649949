/*  blas.cc - cudaemu's cuBLAS and cuBLASLt (tests/cudaemu/README.md): the
    calls of include/cublas_api.h and include/cublasLt.h run on the CPU, so
    that the CUDA trainer's GEMMs run in tests where no GPU is. NOT A GPU:
    nothing measured here is a GPU number.

    Emulated: handles (stream, workspace, math mode), cublasSgemm and
    cublasGemmEx (A/B in fp32, bf16 or fp16; C in the same type or, for the
    half types, fp32; float compute), and cuBLASLt's matmul with the
    DEFAULT, RELU, BIAS and RELU_BIAS epilogues, its descriptors, and a
    heuristic (no split-K) that offers up to two algorithms: first, when the
    preference's MAX_WORKSPACE_BYTES allows it, one that needs a workspace
    of m*n*4 bytes (m x n: D's shape; made up, not cuBLASLt's), then one
    that needs none (so a preference of 0 still gets an algorithm).
    cublasLtMatmul with the first and workspaceSizeInBytes below the call's
    m*n*4 returns CUBLAS_STATUS_INVALID_VALUE, as documented for a workspace
    smaller than the algorithm requires, and prints "cudaemu:
    cublasLtMatmul: workspace of N bytes, the algorithm needs M" (a NULL
    algo: the implicit heuristic with the default preference, no
    workspace).
    Column-major, as documented: D = alpha op(A) op(B) + beta C, then the
    epilogue (bias: one value per row of D, added before the ReLU).

    Numerics: op(A) op(B) summed in float in ascending k order (a product
    rounded, then added: no FMA), alpha times it, plus beta times C (C is
    not read when beta is 0), plus the bias, the ReLU, and one rounding to
    the output type (to nearest even). Deterministic; not bitwise what a
    GPU gives (its kernels sum in other orders, with FMA).

    Checks: arguments that cuBLAS rejects return its documented status;
    every matrix, bias and workspace a call touches is checked against the
    device allocations (emu_need) at the call and again when the work runs
    (a graph replays it), and an output that overlaps an input, a use of a
    destroyed handle or descriptor, or a mode this file does not emulate
    (TF32, device pointer mode, other epilogues and compute types) ends
    the process. Work goes on the handle's stream (the stream argument for
    cublasLtMatmul) through emu_enqueue; alpha and beta (host pointer mode)
    are read at the call.

    Counts of calls per function: emu_blas_calls(name), and
    emu_blas_print_calls(FILE *), also printed at exit under
    CUDAEMU_STATS=1.
*/
#include "emu.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

/* cuBLAS values that the stand-in headers leave out (only what the trainer
   names is declared there), from NVIDIA's cublas_api.h */
enum {
    S_TENSOR_OP_MATH = 1,      /* deprecated: fp32 inputs may become fp16 */
    S_TF32_TENSOR_OP_MATH = 3, /* fp32 inputs may become TF32 */
    S_FP32_EMULATED_BF16X9_MATH = 4,
    S_FP64_EMULATED_FIXEDPOINT_MATH = 8,
    S_COMPUTE_32F_PEDANTIC = 69,
    S_GEMM_ALGO23 = 23,
    S_GEMM_DEFAULT_TENSOR_OP = 99,
    S_GEMM_ALGO15_TENSOR_OP = 115
};

/* ---- call counts ----------------------------------------------------------------- */

static std::mutex g_mu; /* guards g_calls and g_live */
static std::map<std::string, long> g_calls;

/* calls of the function named fn so far */
long emu_blas_calls(const char *fn)
{
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_calls.find(fn);
    return it == g_calls.end() ? 0 : it->second;
}

/* one line per function called at least once */
void emu_blas_print_calls(FILE *f)
{
    std::lock_guard<std::mutex> lock(g_mu);
    for (const auto &c : g_calls)
        fprintf(f, "cudaemu: %s: %ld calls\n", c.first.c_str(), c.second);
}

static void s_print_at_exit(void)
{
    emu_blas_print_calls(stderr);
}

static void s_count(const char *fn)
{
    static std::once_flag once;
    std::call_once(once, [] {
        const char *e = getenv("CUDAEMU_STATS");
        if (e && !strcmp(e, "1"))
            atexit(s_print_at_exit);
    });
    std::lock_guard<std::mutex> lock(g_mu);
    g_calls[fn]++;
}

/* ---- live objects: a destroyed or unknown handle ends the process ---------------- */

enum s_kind { K_HANDLE = 1, K_LT, K_LAYOUT, K_DESC, K_PREF };
static const char *const s_kind_name[] = {"",
                                          "cuBLAS handle",
                                          "cuBLASLt handle",
                                          "cuBLASLt matrix layout",
                                          "cuBLASLt matmul descriptor",
                                          "cuBLASLt matmul preference"};

static std::map<const void *, s_kind> g_live;

static void s_add(const void *p, s_kind k)
{
    std::lock_guard<std::mutex> lock(g_mu);
    g_live[p] = k;
}

/* ends the process unless p is a live object of kind k */
static void s_need_live(const void *p, s_kind k, const char *fn)
{
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_live.find(p);
    if (it == g_live.end() || it->second != k)
        emu_fail("%s: %p is not a live %s (destroyed, or never created)", fn, p,
                 s_kind_name[k]);
}

static void s_remove(const void *p, s_kind k, const char *fn)
{
    s_need_live(p, k, fn);
    std::lock_guard<std::mutex> lock(g_mu);
    g_live.erase(p);
}

/* ---- the objects ----------------------------------------------------------------- */

struct cublasContext {
    cudaStream_t st; /* NULL: the legacy default stream */
    int math;        /* cublasMath_t bits */
    void *ws;        /* user workspace (cublasSetWorkspace), NULL: the default */
    size_t ws_bytes;
};

struct cublasLtContext {
    int unused;
};

struct s_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};

struct s_desc {
    int compute;
    cudaDataType_t scale;
    int32_t transa, transb; /* cublasOperation_t */
    uint32_t epilogue;      /* cublasLtEpilogue_t */
    const void *bias;
    int32_t bias_type; /* -1: the type of D */
};

struct s_pref {
    uint64_t max_ws;
};

static s_layout *s_lay(cublasLtMatrixLayout_t p)
{
    return reinterpret_cast<s_layout *>(p);
}

static s_desc *s_dsc(cublasLtMatmulDesc_t p)
{
    return reinterpret_cast<s_desc *>(p);
}

static s_pref *s_prf(cublasLtMatmulPreference_t p)
{
    return reinterpret_cast<s_pref *>(p);
}

/* marks the algorithms the heuristic hands out (algo.data[0]); data[1]:
   1 for the one that needs a workspace (s_lt_need), 0 for the other */
static const uint64_t S_ALGO_MAGIC = 0x454d55424c415331ull; /* "EMUBLAS1" */

/* the workspace bytes algorithm variant ws needs for an m x n D */
static uint64_t s_lt_need(uint64_t ws, uint64_t m, uint64_t n)
{
    return ws ? m * n * 4 : 0;
}

/* ---- element types --------------------------------------------------------------- */

static int s_type_ok(int t)
{
    return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

static size_t s_esize(cudaDataType_t t)
{
    return t == CUDA_R_32F ? 4 : 2;
}

static float s_load(cudaDataType_t t, const void *p, size_t i)
{
    switch (t) {
    case CUDA_R_32F:
        return ((const float *)p)[i];
    case CUDA_R_16BF:
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CUDA_R_16F:
        return __half2float(((const __half *)p)[i]);
    default:
        emu_fail("cuBLAS emulation: element type %d not emulated", (int)t);
    }
}

static void s_store(cudaDataType_t t, void *p, size_t i, float v)
{
    switch (t) {
    case CUDA_R_32F:
        ((float *)p)[i] = v;
        return;
    case CUDA_R_16BF:
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
        return;
    case CUDA_R_16F:
        ((__half *)p)[i] = __float2half_rn(v);
        return;
    default:
        emu_fail("cuBLAS emulation: element type %d not emulated", (int)t);
    }
}

/* bytes a column-major rows x cols matrix with leading dimension ld spans */
static size_t s_extent(long rows, long cols, long ld, cudaDataType_t t)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    return ((size_t)ld * (size_t)(cols - 1) + (size_t)rows) * s_esize(t);
}

/* ---- the matrix product both APIs share ------------------------------------------ */

/* D = epilogue(alpha op(A) op(B) + beta C): everything a run needs, by value */
struct s_mm {
    const char *fn;
    int ta, tb; /* 1: transposed */
    long m, n, k;
    float alpha, beta;
    cudaDataType_t at, bt, ct, dt, biast;
    const void *a, *b, *c;
    void *d;
    long lda, ldb, ldc, ldd;
    const void *bias; /* NULL: none */
    int relu;
    const void *ws; /* workspace: checked, not used */
    size_t ws_bytes;
};

/* A and B are read (BLAS reads neither when alpha is 0 or k is 0) */
static int s_reads_ab(const s_mm &g)
{
    return g.alpha != 0.0f && g.k > 0;
}

static void s_need(const s_mm &g, const char *arg, const void *p, size_t bytes)
{
    char what[96];
    snprintf(what, sizeof what, "%s %s", g.fn, arg);
    emu_need(p, bytes, 0, what);
}

static int s_overlap(const void *p, size_t np, const void *q, size_t nq)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return np && nq && a < b + nq && b < a + np;
}

/* every buffer the product touches lies in device memory; the output
   overlaps no input (other than C itself, in place) */
static void s_mm_check(const s_mm &g)
{
    size_t na = 0, nb = 0, nc = 0, nd, nbias = 0;
    if (s_reads_ab(g)) {
        na = s_extent(g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.lda, g.at);
        nb = s_extent(g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.ldb, g.bt);
        s_need(g, "A", g.a, na);
        s_need(g, "B", g.b, nb);
    }
    if (g.beta != 0.0f) {
        nc = s_extent(g.m, g.n, g.ldc, g.ct);
        s_need(g, "C", g.c, nc);
    }
    nd = s_extent(g.m, g.n, g.ldd, g.dt);
    s_need(g, g.c == g.d ? "C" : "D", g.d, nd);
    if (g.bias) {
        nbias = (size_t)g.m * s_esize(g.biast);
        s_need(g, "bias", g.bias, nbias);
    }
    if (g.ws_bytes)
        s_need(g, "workspace", g.ws, g.ws_bytes);
    const char *out = g.c == g.d ? "C" : "D";
    if (s_overlap(g.d, nd, g.a, na))
        emu_fail("%s: the output %s overlaps A", g.fn, out);
    if (s_overlap(g.d, nd, g.b, nb))
        emu_fail("%s: the output %s overlaps B", g.fn, out);
    if (g.c != g.d && s_overlap(g.d, nd, g.c, nc))
        emu_fail("%s: D overlaps C without being C (in place needs C == D)", g.fn);
    if (s_overlap(g.d, nd, g.bias, nbias))
        emu_fail("%s: the output %s overlaps the bias", g.fn, out);
}

static void s_mm_run(const s_mm &g)
{
    long m = g.m, n = g.n, k = g.k;
    int ab = s_reads_ab(g);
    /* op(A) by columns (af[p*m + i]) and op(B) by columns (bf[j*k + p]) in
       float; each column of the product summed over p in ascending order,
       all of its rows at once (the inner loop vectorises, the order of each
       element's sum stays p = 0, 1, ...) */
    std::vector<float> af(ab ? (size_t)m * k : 0), bf(ab ? (size_t)n * k : 0), bias;
    if (ab) {
        for (long p = 0; p < k; p++)
            for (long i = 0; i < m; i++)
                af[p * m + i] = s_load(g.at, g.a, g.ta ? i * g.lda + p : p * g.lda + i);
        for (long j = 0; j < n; j++)
            for (long p = 0; p < k; p++)
                bf[j * k + p] = s_load(g.bt, g.b, g.tb ? p * g.ldb + j : j * g.ldb + p);
    }
    if (g.bias) {
        bias.resize(m);
        for (long i = 0; i < m; i++)
            bias[i] = s_load(g.biast, g.bias, i);
    }
    std::vector<float> col(m);
    for (long j = 0; j < n; j++) {
        float *__restrict__ acc = col.data();
        for (long i = 0; i < m; i++)
            acc[i] = 0.0f;
        if (ab)
            for (long p = 0; p < k; p++) {
                const float *__restrict__ x = &af[p * m];
                float y = bf[j * k + p];
                for (long i = 0; i < m; i++)
                    acc[i] += x[i] * y;
            }
        for (long i = 0; i < m; i++)
            acc[i] = ab ? g.alpha * acc[i] : 0.0f;
        for (long i = 0; i < m; i++) {
            float v = col[i];
            if (g.beta != 0.0f)
                v += g.beta * s_load(g.ct, g.c, j * g.ldc + i);
            if (g.bias)
                v += bias[i];
            if (g.relu)
                v = v > 0.0f ? v : 0.0f; /* max(x, 0); a NaN becomes 0, as fmaxf */
            s_store(g.dt, g.d, j * g.ldd + i, v);
        }
    }
}

/* checks now, and again when it runs (a graph may replay it after a free) */
static void s_mm_enqueue(cudaStream_t st, const s_mm &g)
{
    s_mm_check(g);
    emu_enqueue(st, g.fn, [g]() {
        s_mm_check(g);
        s_mm_run(g);
    });
}

/* ---- cuBLAS ---------------------------------------------------------------------- */

static int s_op_ok(int op)
{
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

static long s_max1(long v)
{
    return v > 1 ? v : 1;
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    s_count("cublasCreate");
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasContext *h = new cublasContext();
    h->math = CUBLAS_DEFAULT_MATH;
    s_add(h, K_HANDLE);
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

/* cuBLAS documents that destroying a handle implicitly calls
   cudaDeviceSynchronize */
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    s_count("cublasDestroy");
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    s_remove(handle, K_HANDLE, "cublasDestroy");
    cudaDeviceSynchronize();
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

/* as documented, setting the stream resets the workspace to the default */
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId)
{
    s_count("cublasSetStream");
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    s_need_live(handle, K_HANDLE, "cublasSetStream");
    handle->st = streamId;
    handle->ws = NULL;
    handle->ws_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

/* the workspace must be 256-byte aligned (else INVALID_VALUE, as
   documented) and lie in device memory */
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                     size_t workspaceSizeInBytes)
{
    s_count("cublasSetWorkspace");
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    s_need_live(handle, K_HANDLE, "cublasSetWorkspace");
    if ((uintptr_t)workspace % 256 != 0 || (!workspace && workspaceSizeInBytes))
        return CUBLAS_STATUS_INVALID_VALUE;
    emu_need(workspace, workspaceSizeInBytes, 0, "cublasSetWorkspace workspace");
    handle->ws = workspace;
    handle->ws_bytes = workspace ? workspaceSizeInBytes : 0;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    s_count("cublasSetMathMode");
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    s_need_live(handle, K_HANDLE, "cublasSetMathMode");
    int base = (int)mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base != CUBLAS_DEFAULT_MATH && base != S_TENSOR_OP_MATH &&
        base != CUBLAS_PEDANTIC_MATH && base != S_TF32_TENSOR_OP_MATH &&
        base != S_FP32_EMULATED_BF16X9_MATH && base != S_FP64_EMULATED_FIXEDPOINT_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->math = (int)mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t status)
{
    static const struct {
        cublasStatus_t s;
        const char *name;
    } names[] = {
        {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS"},
        {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED"},
        {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED"},
        {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE"},
        {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH"},
        {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR"},
        {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED"},
        {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR"},
        {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED"},
        {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR"},
    };
    for (const auto &n : names)
        if (n.s == status)
            return n.name;
    return "CUBLAS_STATUS_UNKNOWN";
}

/* the A, B, C type combinations of float compute that this file emulates
   (cuBLAS lists them for CUBLAS_COMPUTE_32F with a float scale) */
static int s_types_ok(int at, int bt, int ct)
{
    if (at != bt || !s_type_ok(at))
        return 0;
    return ct == at || (ct == CUDA_R_32F && at != CUDA_R_32F);
}

/* cublasGemmEx / cublasSgemm: the documented checks in order, then the
   product on the handle's stream */
static cublasStatus_t s_gemm(const char *fn, cublasHandle_t handle,
                             cublasOperation_t transa, cublasOperation_t transb, int m,
                             int n, int k, const void *alpha, const void *A, int at,
                             int lda, const void *B, int bt, int ldb, const void *beta,
                             void *C, int ct, int ldc, int compute, int algo)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    s_need_live(handle, K_HANDLE, fn);
    if (m < 0 || n < 0 || k < 0 || !s_op_ok(transa) || !s_op_ok(transb))
        return CUBLAS_STATUS_INVALID_VALUE;
    int ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N; /* real types: C is T */
    if (lda < s_max1(ta ? k : m) || ldb < s_max1(tb ? n : k) || ldc < s_max1(m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (compute != CUBLAS_COMPUTE_32F && compute != S_COMPUTE_32F_PEDANTIC)
        emu_fail("%s: compute type %d not emulated (only CUBLAS_COMPUTE_32F[_PEDANTIC])",
                 fn, compute);
    if (!s_types_ok(at, bt, ct))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!(algo >= CUBLAS_GEMM_DEFAULT && algo <= S_GEMM_ALGO23) &&
        !(algo >= S_GEMM_DEFAULT_TENSOR_OP && algo <= S_GEMM_ALGO15_TENSOR_OP))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    int math = handle->math & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (at == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F &&
        math != CUBLAS_DEFAULT_MATH && math != CUBLAS_PEDANTIC_MATH)
        emu_fail(
            "%s: fp32 GEMM under math mode %d (reduced-precision inputs) not emulated",
            fn, handle->math);
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    s_mm g;
    g.fn = fn;
    g.ta = ta;
    g.tb = tb;
    g.m = m;
    g.n = n;
    g.k = k;
    g.alpha = *(const float *)alpha; /* host pointer mode: read at the call */
    g.beta = *(const float *)beta;
    g.at = (cudaDataType_t)at;
    g.bt = (cudaDataType_t)bt;
    g.ct = g.dt = g.biast = (cudaDataType_t)ct;
    g.a = A;
    g.b = B;
    g.c = C;
    g.d = C;
    g.lda = lda;
    g.ldb = ldb;
    g.ldc = g.ldd = ldc;
    g.bias = NULL;
    g.relu = 0;
    g.ws = handle->ws;
    g.ws_bytes = handle->ws_bytes;
    s_mm_enqueue(handle->st, g);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, const float *B,
                              int ldb, const float *beta, float *C, int ldc)
{
    s_count("cublasSgemm");
    return s_gemm("cublasSgemm", handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F,
                  lda, B, CUDA_R_32F, ldb, beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                  CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType Atype, int lda,
                            const void *B, cudaDataType Btype, int ldb, const void *beta,
                            void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    s_count("cublasGemmEx");
    return s_gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                  B, Btype, ldb, beta, C, Ctype, ldc, computeType, algo);
}

/* ---- cuBLASLt: handle and descriptors -------------------------------------------- */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle)
{
    s_count("cublasLtCreate");
    if (!lightHandle)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtContext *h = new cublasLtContext();
    s_add(h, K_LT);
    *lightHandle = h;
    return CUBLAS_STATUS_SUCCESS;
}

/* as cublasDestroy, implicitly synchronises the device */
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle)
{
    s_count("cublasLtDestroy");
    if (!lightHandle)
        return CUBLAS_STATUS_INVALID_VALUE;
    s_remove(lightHandle, K_LT, "cublasLtDestroy");
    cudaDeviceSynchronize();
    delete lightHandle;
    return CUBLAS_STATUS_SUCCESS;
}

/* stored as given: checked when a matmul or heuristic uses it */
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout,
                                          cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld)
{
    s_count("cublasLtMatrixLayoutCreate");
    if (!matLayout)
        return CUBLAS_STATUS_INVALID_VALUE;
    s_layout *l = new s_layout{type, rows, cols, ld};
    s_add(l, K_LAYOUT);
    *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout)
{
    s_count("cublasLtMatrixLayoutDestroy");
    if (!matLayout)
        return CUBLAS_STATUS_SUCCESS;
    s_remove(matLayout, K_LAYOUT, "cublasLtMatrixLayoutDestroy");
    delete s_lay(matLayout);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType)
{
    s_count("cublasLtMatmulDescCreate");
    if (!matmulDesc)
        return CUBLAS_STATUS_INVALID_VALUE;
    s_desc *d = new s_desc{(int)computeType,          scaleType, CUBLAS_OP_N, CUBLAS_OP_N,
                           CUBLASLT_EPILOGUE_DEFAULT, NULL,      -1};
    s_add(d, K_DESC);
    *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)
{
    s_count("cublasLtMatmulDescDestroy");
    if (!matmulDesc)
        return CUBLAS_STATUS_SUCCESS;
    s_remove(matmulDesc, K_DESC, "cublasLtMatmulDescDestroy");
    delete s_dsc(matmulDesc);
    return CUBLAS_STATUS_SUCCESS;
}

/* INVALID_VALUE when buf is NULL or sizeInBytes is not the attribute's
   size, as documented */
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes)
{
    s_count("cublasLtMatmulDescSetAttribute");
    if (!matmulDesc || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    s_need_live(matmulDesc, K_DESC, "cublasLtMatmulDescSetAttribute");
    s_desc *d = s_dsc(matmulDesc);
    int32_t i32;
    uint32_t u32;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (sizeInBytes != sizeof i32)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&i32, buf, sizeof i32);
        if (!s_op_ok(i32))
            return CUBLAS_STATUS_INVALID_VALUE;
        (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->transa : d->transb) = i32;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (sizeInBytes != sizeof u32)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&u32, buf, sizeof u32);
        if (u32 != CUBLASLT_EPILOGUE_DEFAULT && u32 != CUBLASLT_EPILOGUE_RELU &&
            u32 != CUBLASLT_EPILOGUE_BIAS && u32 != CUBLASLT_EPILOGUE_RELU_BIAS)
            emu_fail("cublasLtMatmulDescSetAttribute: epilogue %u not emulated", u32);
        d->epilogue = u32;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (sizeInBytes != sizeof d->bias)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->bias, buf, sizeof d->bias);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (sizeInBytes != sizeof i32)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->bias_type, buf, sizeof i32);
        return CUBLAS_STATUS_SUCCESS;
    }
    emu_fail("cublasLtMatmulDescSetAttribute: attribute %d not emulated", (int)attr);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    s_count("cublasLtMatmulPreferenceCreate");
    if (!pref)
        return CUBLAS_STATUS_INVALID_VALUE;
    s_pref *p = new s_pref{0}; /* documented default: no workspace allowed */
    s_add(p, K_PREF);
    *pref = reinterpret_cast<cublasLtMatmulPreference_t>(p);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    s_count("cublasLtMatmulPreferenceDestroy");
    if (!pref)
        return CUBLAS_STATUS_SUCCESS;
    s_remove(pref, K_PREF, "cublasLtMatmulPreferenceDestroy");
    delete s_prf(pref);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                     cublasLtMatmulPreferenceAttributes_t attr,
                                     const void *buf, size_t sizeInBytes)
{
    s_count("cublasLtMatmulPreferenceSetAttribute");
    if (!pref || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    s_need_live(pref, K_PREF, "cublasLtMatmulPreferenceSetAttribute");
    if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
        emu_fail("cublasLtMatmulPreferenceSetAttribute: attribute %d not emulated",
                 (int)attr);
    if (sizeInBytes != sizeof(uint64_t))
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&s_prf(pref)->max_ws, buf, sizeof(uint64_t));
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLASLt: heuristic and matmul ---------------------------------------------- */

static int s_has_bias(const s_desc *d)
{
    return d->epilogue == CUBLASLT_EPILOGUE_BIAS ||
           d->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
}

/* the type of the bias vector: by default D's */
static int s_bias_type(const s_desc *d, const s_layout *dl)
{
    return d->bias_type == -1 ? (int)dl->type : d->bias_type;
}

/* what the heuristic and the matmul both check: the layouts agree with
   m x k times k x n into m x n, the types with float compute */
static cublasStatus_t s_lt_check(const char *fn, const s_desc *d, const s_layout *a,
                                 const s_layout *b, const s_layout *c, const s_layout *dl)
{
    if (d->compute != CUBLAS_COMPUTE_32F && d->compute != S_COMPUTE_32F_PEDANTIC)
        emu_fail("%s: compute type %d not emulated (only CUBLAS_COMPUTE_32F[_PEDANTIC])",
                 fn, d->compute);
    if (d->scale != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const s_layout *all[4] = {a, b, c, dl};
    for (int i = 0; i < 4; i++)
        if (all[i]->ld < (int64_t)s_max1((long)all[i]->rows))
            return CUBLAS_STATUS_INVALID_VALUE;
    int ta = d->transa != CUBLAS_OP_N, tb = d->transb != CUBLAS_OP_N;
    uint64_t am = ta ? a->cols : a->rows, ak = ta ? a->rows : a->cols;
    uint64_t bk = tb ? b->cols : b->rows, bn = tb ? b->rows : b->cols;
    if (am != dl->rows || bn != dl->cols || ak != bk || c->rows != dl->rows ||
        c->cols != dl->cols)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (c->type != dl->type || !s_types_ok(a->type, b->type, dl->type))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (s_has_bias(d)) {
        int bt = s_bias_type(d, dl);
        if (bt != (int)dl->type && bt != CUDA_R_32F)
            return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* the algorithm that needs a workspace when the preference allows it,
   then the one that needs none; both without split-K (reduction scheme
   NONE) */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
    cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount)
{
    const char *fn = "cublasLtMatmulAlgoGetHeuristic";
    s_count("cublasLtMatmulAlgoGetHeuristic");
    if (!lightHandle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!operationDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !preference ||
        requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount)
        return CUBLAS_STATUS_INVALID_VALUE;
    s_need_live(lightHandle, K_LT, fn);
    s_need_live(operationDesc, K_DESC, fn);
    s_need_live(Adesc, K_LAYOUT, fn);
    s_need_live(Bdesc, K_LAYOUT, fn);
    s_need_live(Cdesc, K_LAYOUT, fn);
    s_need_live(Ddesc, K_LAYOUT, fn);
    s_need_live(preference, K_PREF, fn);
    *returnAlgoCount = 0;
    cublasStatus_t s = s_lt_check(fn, s_dsc(operationDesc), s_lay(Adesc), s_lay(Bdesc),
                                  s_lay(Cdesc), s_lay(Ddesc));
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    uint64_t m = s_lay(Ddesc)->rows, n = s_lay(Ddesc)->cols;
    int got = 0;
    for (int ws = 1; ws >= 0 && got < requestedAlgoCount; ws--) {
        if (s_lt_need(ws, m, n) > s_prf(preference)->max_ws)
            continue;
        cublasLtMatmulHeuristicResult_t *r = &heuristicResultsArray[got++];
        memset(r, 0, sizeof *r);
        r->algo.data[0] = S_ALGO_MAGIC;
        r->algo.data[1] = (uint64_t)ws;
        r->workspaceSize = s_lt_need(ws, m, n);
        r->state = CUBLAS_STATUS_SUCCESS;
        r->wavesCount = 1.0f;
    }
    *returnAlgoCount = got;
    return CUBLAS_STATUS_SUCCESS;
}

static void s_need_algo(const cublasLtMatmulAlgo_t *algo, const char *fn)
{
    if (algo->data[0] != S_ALGO_MAGIC)
        emu_fail("%s: the algorithm did not come from cublasLtMatmulAlgoGetHeuristic "
                 "(uninitialised?)",
                 fn);
}

/* sizeInBytes 0: *sizeWritten gets the size needed, as documented */
cublasStatus_t
cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *algo,
                                     cublasLtMatmulAlgoConfigAttributes_t attr, void *buf,
                                     size_t sizeInBytes, size_t *sizeWritten)
{
    const char *fn = "cublasLtMatmulAlgoConfigGetAttribute";
    s_count("cublasLtMatmulAlgoConfigGetAttribute");
    if (!algo)
        return CUBLAS_STATUS_INVALID_VALUE;
    s_need_algo(algo, fn);
    if (attr != CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)
        emu_fail("%s: attribute %d not emulated", fn, (int)attr);
    uint32_t v = CUBLASLT_REDUCTION_SCHEME_NONE;
    if (sizeInBytes == 0) {
        if (!sizeWritten)
            return CUBLAS_STATUS_INVALID_VALUE;
        *sizeWritten = sizeof v;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || sizeInBytes != sizeof v)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, &v, sizeof v);
    if (sizeWritten)
        *sizeWritten = sizeof v;
    return CUBLAS_STATUS_SUCCESS;
}

static int s_same_layout(const s_layout *x, const s_layout *y)
{
    return x->type == y->type && x->rows == y->rows && x->cols == y->cols &&
           x->ld == y->ld;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle,
                              cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                              cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream)
{
    const char *fn = "cublasLtMatmul";
    s_count("cublasLtMatmul");
    if (!lightHandle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!computeDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    s_need_live(lightHandle, K_LT, fn);
    s_need_live(computeDesc, K_DESC, fn);
    s_need_live(Adesc, K_LAYOUT, fn);
    s_need_live(Bdesc, K_LAYOUT, fn);
    s_need_live(Cdesc, K_LAYOUT, fn);
    s_need_live(Ddesc, K_LAYOUT, fn);
    const s_desc *d = s_dsc(computeDesc);
    const s_layout *al = s_lay(Adesc), *bl = s_lay(Bdesc), *cl = s_lay(Cdesc),
                   *dl = s_lay(Ddesc);
    cublasStatus_t s = s_lt_check(fn, d, al, bl, cl, dl);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    /* in place needs C's layout to be D's; out of place, only the same
       type and shape (checked above) */
    if (C == D && !s_same_layout(cl, dl))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (s_has_bias(d) && !d->bias)
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((workspaceSizeInBytes && !workspace) || (uintptr_t)workspace % 256 != 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (algo)
        s_need_algo(algo, fn);
    uint64_t need = algo ? s_lt_need(algo->data[1], dl->rows, dl->cols) : 0;
    if (workspaceSizeInBytes < need) {
        fprintf(stderr, "cudaemu: %s: workspace of %zu bytes, the algorithm needs %llu\n",
                fn, workspaceSizeInBytes, (unsigned long long)need);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (dl->rows == 0 || dl->cols == 0)
        return CUBLAS_STATUS_SUCCESS;
    s_mm g;
    g.fn = fn;
    g.ta = d->transa != CUBLAS_OP_N;
    g.tb = d->transb != CUBLAS_OP_N;
    g.m = (long)dl->rows;
    g.n = (long)dl->cols;
    g.k = (long)(g.ta ? al->rows : al->cols);
    g.alpha = *(const float *)alpha; /* host pointer mode: read at the call */
    g.beta = *(const float *)beta;
    g.at = al->type;
    g.bt = bl->type;
    g.ct = cl->type;
    g.dt = dl->type;
    g.a = A;
    g.b = B;
    g.c = C;
    g.d = D;
    g.lda = (long)al->ld;
    g.ldb = (long)bl->ld;
    g.ldc = (long)cl->ld;
    g.ldd = (long)dl->ld;
    g.bias = s_has_bias(d) ? d->bias : NULL;
    g.biast = (cudaDataType_t)s_bias_type(d, dl);
    g.relu = d->epilogue == CUBLASLT_EPILOGUE_RELU ||
             d->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
    g.ws = workspace;
    g.ws_bytes = workspace ? workspaceSizeInBytes : 0;
    s_mm_enqueue(stream, g);
    return CUBLAS_STATUS_SUCCESS;
}
