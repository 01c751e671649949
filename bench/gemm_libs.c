/*  gemm_libs.c - one library's GEMMs on the shapes jizhi multiplies: the
    worker of `make bench-gemm` (bench/gemm_libs.py runs it once per
    library, thread count and round, alternating libraries, and compares
    the medians with PyTorch's on the same shapes).

    Shapes (s_shapes): the trainer's MLP 784-256-256-10 at batch 128 and
    1024 (forward X*W^T, backward data dY*W, backward weights dY^T*X, the
    calls of trainer/kernels_impl.h's linear layer), the CNN's im2col GEMMs
    at batch 128 for the default net (channels 16,32, one block per stage,
    28x28 images: one tile of images per call, leading dimensions as
    trn_conv_fwd/_bwd pass them), and the bo GP's double-precision work at
    n = 200, 500, 1000 (the Cholesky dpotrf, its building blocks dsyrk and
    dgemm, and the predict's dtrsm of 128 rows, schedulers/gp.c).

    Libraries (--lib), one per process:
      openblas     libopenblas.so.0 by dlopen; the parent sets
                   OPENBLAS_CORETYPE (the library reads it when loaded)
      blis         libblis.so.4 by dlopen (RTLD_LOCAL|RTLD_DEEPBIND: its
                   cblas_* never meet another library's); no LAPACK, so
                   dpotrf only as the bench's blocked one on its dsyrk,
                   dgemm and dtrsm
      dnnl-sgemm   oneDNN's dnnl_sgemm (fp32 only, like all of oneDNN 2.6's
      dnnl-matmul  GEMMs); the matmul primitive, created once per shape
      dnnl-bf16    and executed many times; bf16 inputs, fp32 output
    Threads (--threads): openblas_set_num_threads, bli_thread_set_num_threads,
    omp_set_num_threads for oneDNN (its runtime is OpenMP), besides the
    environment the parent sets.

    Usage:
      gemm_libs --list                  the shapes, one JSON object a line
      gemm_libs --pick                  the OpenBLAS core jizhi picks (cpuid)
      gemm_libs --lib L [--threads T] [--target-ms MS]
                                        times each shape: one JSON line each
      gemm_libs --lib L --check         each shape's op at small sizes
                                        against a double reference; exit 1
                                        when a value is off
    Exit 0, 1 (a check failed, a call failed), 2 (bad usage), 3 (the
    library is absent: the line says why). GEMM_LIBS_FAULT=1 adds 1 to one
    output value in --check (so the test sees the check fail).
*/
#include "common/blaskern.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef GEMM_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

/* CBLAS enum values (the reference cblas.h; both libraries use them). */
enum { ROW = 101, NOTRANS = 111, TRANS = 112, LOWER = 122, NONUNIT = 131, RIGHT = 142 };

typedef enum { OP_GEMM, OP_SYRK, OP_TRSM, OP_POTRF, OP_POTRF_BLK } s_opkind;

typedef struct {
    char name[48];  /* group/what */
    char group[16]; /* mlp128, mlp1024, cnn128, gp200, ... */
    s_opkind op;
    int dbl;     /* 1: double (the GP) */
    int ta, tb;  /* GEMM: op(A) = A^T, op(B) = B^T */
    int m, n, k; /* C is m x n, the inner size k; SYRK n x n (k); TRSM m x n; POTRF n */
    int lda, ldb, ldc;
    float beta;
    double weight; /* calls per training step (the group's total) */
} s_shape;

#define MAX_SHAPES 64
static s_shape s_sh[MAX_SHAPES];
static int s_nsh;

static s_shape *s_add(const char *group, const char *what, s_opkind op, int dbl)
{
    s_shape *s = &s_sh[s_nsh++];
    memset(s, 0, sizeof *s);
    snprintf(s->group, sizeof s->group, "%s", group);
    snprintf(s->name, sizeof s->name, "%s/%s", group, what);
    s->op = op;
    s->dbl = dbl;
    s->weight = 1;
    return s;
}

static void s_gemm(const char *group, const char *what, int ta, int tb, int m, int n,
                   int k, int lda, int ldb, int ldc, float beta, double weight)
{
    s_shape *s = s_add(group, what, OP_GEMM, 0);
    s->ta = ta, s->tb = tb, s->m = m, s->n = n, s->k = k;
    s->lda = lda, s->ldb = ldb, s->ldc = ldc, s->beta = beta, s->weight = weight;
}

/* One conv layer's GEMMs (trn_conv_fwd / trn_conv_bwd, one tile). */
static void s_conv(const char *tag, int c, int h, int co, int stride, int batch, int dx)
{
    int ho = (h + 2 - 3) / stride + 1, hw = ho * ho, ckk = c * 9;
    long per = (long)ckk * hw * 4;
    int tile = per >= 256L * 1024 ? 1 : (int)(256L * 1024 / per);
    int q = tile * hw, p = batch * hw;
    double calls = (double)batch / tile;
    char w[40];
    snprintf(w, sizeof w, "%s.fwd", tag);
    s_gemm("cnn128", w, 0, 0, co, q, ckk, ckk, q, p, 0, calls);
    snprintf(w, sizeof w, "%s.bwd_w", tag);
    s_gemm("cnn128", w, 0, 1, co, ckk, q, p, q, ckk, 1, calls);
    if (dx) {
        snprintf(w, sizeof w, "%s.bwd_x", tag);
        s_gemm("cnn128", w, 1, 0, ckk, q, co, ckk, p, q, 0, calls);
    }
}

static void s_shapes(void)
{
    static const int dims[] = {784, 256, 256, 10};
    static const int batches[] = {128, 1024};
    for (int bi = 0; bi < 2; bi++) {
        int nb = batches[bi];
        char g[16], w[40];
        snprintf(g, sizeof g, "mlp%d", nb);
        for (int l = 0; l < 3; l++) {
            int k = dims[l], m = dims[l + 1];
            snprintf(w, sizeof w, "%d-%d.fwd", k, m);
            s_gemm(g, w, 0, 1, nb, m, k, k, k, m, 0, 1);
            if (l > 0) { /* the first layer's input needs no gradient */
                snprintf(w, sizeof w, "%d-%d.bwd_x", k, m);
                s_gemm(g, w, 0, 0, nb, k, m, m, k, k, 0, 1);
            }
            snprintf(w, sizeof w, "%d-%d.bwd_w", k, m);
            s_gemm(g, w, 1, 0, m, k, nb, m, k, k, 0, 1);
        }
    }
    /* default CNN, batch 128: stem, stage 1's two block convs (one line,
       weight 2), the stride-2 transition, stage 2's two block convs */
    int n0 = s_nsh;
    s_conv("stem1-16", 1, 28, 16, 1, 128, 0);
    int n1 = s_nsh;
    s_conv("blk16-16", 16, 28, 16, 1, 128, 1);
    for (int i = n1; i < s_nsh; i++)
        s_sh[i].weight *= 2;
    s_conv("tr16-32s2", 16, 28, 32, 2, 128, 1);
    int n3 = s_nsh;
    s_conv("blk32-32", 32, 14, 32, 1, 128, 1);
    for (int i = n3; i < s_nsh; i++)
        s_sh[i].weight *= 2;
    (void)n0;
    static const int gpn[] = {200, 500, 1000};
    for (int i = 0; i < 3; i++) {
        int n = gpn[i];
        char g[16];
        snprintf(g, sizeof g, "gp%d", n);
        s_shape *s = s_add(g, "dpotrf", OP_POTRF, 1);
        s->n = n, s->lda = n;
        s = s_add(g, "dpotrf_blk", OP_POTRF_BLK, 1);
        s->n = n, s->lda = n;
        s = s_add(g, "dsyrk", OP_SYRK, 1);
        s->n = n, s->k = n, s->lda = n, s->ldc = n;
        s = s_add(g, "dgemm", OP_GEMM, 1);
        s->m = s->n = s->k = n, s->lda = s->ldb = s->ldc = n;
        s = s_add(g, "dtrsm128", OP_TRSM, 1);
        s->m = 128, s->n = n, s->lda = n, s->ldb = n;
    }
}

/* Nominal floating-point operations of one call. */
static double s_flops(const s_shape *s)
{
    switch (s->op) {
    case OP_GEMM:
        return 2.0 * s->m * s->n * s->k;
    case OP_SYRK:
        return (double)s->n * (s->n + 1) * s->k;
    case OP_TRSM:
        return (double)s->m * s->n * s->n;
    case OP_POTRF:
    case OP_POTRF_BLK:
        return (double)s->n * s->n * s->n / 3.0;
    }
    return 0;
}

/* ---- the libraries -------------------------------------------------------- */

typedef enum {
    LIB_OPENBLAS,
    LIB_BLIS,
    LIB_DNNL_SGEMM,
    LIB_DNNL_MATMUL,
    LIB_DNNL_BF16
} s_libkind;

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                         const double *, int, double, double *, int);
typedef void (*dsyrk_fn)(int, int, int, int, int, double, const double *, int, double,
                         double *, int);
typedef void (*dtrsm_fn)(int, int, int, int, int, int, int, double, const double *, int,
                         double *, int);
typedef void (*dpotrf_fn)(const char *, const int *, double *, const int *, int *,
                          size_t);

static struct {
    s_libkind kind;
    void *h;
    sgemm_fn sgemm;
    dgemm_fn dgemm;
    dsyrk_fn dsyrk;
    dtrsm_fn dtrsm;
    dpotrf_fn dpotrf; /* NULL: no LAPACK in this library */
    char info[200];
#ifdef GEMM_HAVE_DNNL
    dnnl_engine_t eng;
    dnnl_stream_t st;
#endif
} L;

static int s_is_dnnl(void)
{
    return L.kind >= LIB_DNNL_SGEMM;
}

/* Opens the library; 0, or -1 with *why set (absent). */
static int s_open(const char *name, int threads, char *why, size_t wlen)
{
    static const struct {
        const char *name;
        s_libkind kind;
    } tab[] = {{"openblas", LIB_OPENBLAS},
               {"blis", LIB_BLIS},
               {"dnnl-sgemm", LIB_DNNL_SGEMM},
               {"dnnl-matmul", LIB_DNNL_MATMUL},
               {"dnnl-bf16", LIB_DNNL_BF16}};
    int found = 0;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(name, tab[i].name)) {
            L.kind = tab[i].kind;
            found = 1;
        }
    if (!found) {
        snprintf(why, wlen, "unknown library \"%s\"", name);
        return -2;
    }
    if (s_is_dnnl()) {
#ifdef GEMM_HAVE_DNNL
        void (*omp)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
        if (omp)
            omp(threads);
        if (dnnl_engine_create(&L.eng, dnnl_cpu, 0) != dnnl_success ||
            dnnl_stream_create(&L.st, L.eng, dnnl_stream_default_flags) != dnnl_success) {
            snprintf(why, wlen, "oneDNN: no CPU engine");
            return -1;
        }
        const dnnl_version_t *v = dnnl_version();
        dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
        snprintf(L.info, sizeof L.info, "oneDNN %d.%d.%d (%s runtime, isa %s)", v->major,
                 v->minor, v->patch,
                 v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other",
                 isa == dnnl_cpu_isa_avx512_core_amx    ? "avx512_core_amx"
                 : isa == dnnl_cpu_isa_avx512_core_bf16 ? "avx512_core_bf16"
                 : isa == dnnl_cpu_isa_avx512_core      ? "avx512_core"
                 : isa == dnnl_cpu_isa_avx2             ? "avx2"
                                                        : "other");
        return 0;
#else
        snprintf(why, wlen, "built without oneDNN (install libdnnl-dev and rebuild)");
        return -1;
#endif
    }
    const char *so = L.kind == LIB_OPENBLAS ? "libopenblas.so.0" : "libblis.so.4";
    L.h = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!L.h) {
        snprintf(why, wlen, "%s not loadable (%s)%s", so, dlerror(),
                 L.kind == LIB_BLIS ? "; apt-get install libblis4" : "");
        return -1;
    }
    L.sgemm = (sgemm_fn)dlsym(L.h, "cblas_sgemm");
    L.dgemm = (dgemm_fn)dlsym(L.h, "cblas_dgemm");
    L.dsyrk = (dsyrk_fn)dlsym(L.h, "cblas_dsyrk");
    L.dtrsm = (dtrsm_fn)dlsym(L.h, "cblas_dtrsm");
    L.dpotrf = L.kind == LIB_OPENBLAS ? (dpotrf_fn)dlsym(L.h, "dpotrf_") : NULL;
    if (!L.sgemm || !L.dgemm || !L.dsyrk || !L.dtrsm) {
        snprintf(why, wlen, "%s lacks cblas_sgemm/dgemm/dsyrk/dtrsm", so);
        return -1;
    }
    if (L.kind == LIB_OPENBLAS) {
        void (*set)(int) = (void (*)(int))dlsym(L.h, "openblas_set_num_threads");
        char *(*core)(void) = (char *(*)(void))dlsym(L.h, "openblas_get_corename");
        char *(*cfg)(void) = (char *(*)(void))dlsym(L.h, "openblas_get_config");
        if (set)
            set(threads);
        snprintf(L.info, sizeof L.info, "%s; core %s", cfg ? cfg() : "OpenBLAS",
                 core ? core() : "?");
    } else {
        void (*set)(long) = (void (*)(long))dlsym(L.h, "bli_thread_set_num_threads");
        int (*arch)(void) = (int (*)(void))dlsym(L.h, "bli_arch_query_id");
        char *(*aname)(int) = (char *(*)(int))dlsym(L.h, "bli_arch_string");
        char *(*ver)(void) = (char *(*)(void))dlsym(L.h, "bli_info_get_version_str");
        if (set)
            set(threads);
        snprintf(L.info, sizeof L.info, "BLIS %s; arch %s", ver ? ver() : "?",
                 arch && aname ? aname(arch()) : "?");
    }
    return 0;
}

/* ---- one shape's buffers and call ------------------------------------------ */

typedef struct {
    const s_shape *s;
    size_t na, nb, nc; /* elements of A, B, C as stored */
    float *a, *b, *c;
    uint16_t *ua, *ub; /* bf16 copies of a, b */
    double *da, *db, *dc, *dsave;
    char impl[96]; /* the oneDNN implementation, "" otherwise */
#ifdef GEMM_HAVE_DNNL
    dnnl_primitive_t prim;
    dnnl_memory_t ma, mb, mc;
#endif
} s_run;

static uint64_t s_rng = 88172645463325252ULL;

static double s_rand(void)
{
    s_rng ^= s_rng << 13, s_rng ^= s_rng >> 7, s_rng ^= s_rng << 17;
    return (double)(s_rng >> 11) / 9007199254740992.0 * 2 - 1;
}

static uint16_t s_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float s_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A GP kernel matrix: squared exponential on points in [0, 10] plus
   jitter, as schedulers/gp.c factors (symmetric, positive definite). */
static void s_spd(double *a, int n, int lda)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double d = 10.0 * (i - j) / n;
            a[(size_t)i * lda + j] = exp(-0.5 * d * d) + (i == j ? 1e-2 : 0);
        }
}

/* Bench's LAPACK-style blocked Cholesky (dpotrf's algorithm: per block of
   nb columns dsyrk, an unblocked factor, dgemm, dtrsm) of the row-major
   lower triangle, on the library's level-3 calls. 0 or -1 (not SPD). */
static int s_potrf_blk(double *a, int n, int lda)
{
    const int nb = 64;
    for (int j = 0; j < n; j += nb) {
        int jb = n - j < nb ? n - j : nb;
        double *a11 = a + (size_t)j * lda + j;
        if (j > 0)
            L.dsyrk(ROW, LOWER, NOTRANS, jb, j, -1.0, a + (size_t)j * lda, lda, 1.0, a11,
                    lda);
        for (int c = 0; c < jb; c++) {
            double d = a11[(size_t)c * lda + c];
            for (int t = 0; t < c; t++)
                d -= a11[(size_t)c * lda + t] * a11[(size_t)c * lda + t];
            if (!(d > 0))
                return -1;
            d = sqrt(d);
            a11[(size_t)c * lda + c] = d;
            for (int r = c + 1; r < jb; r++) {
                double v = a11[(size_t)r * lda + c];
                for (int t = 0; t < c; t++)
                    v -= a11[(size_t)r * lda + t] * a11[(size_t)c * lda + t];
                a11[(size_t)r * lda + c] = v / d;
            }
        }
        int rest = n - j - jb;
        if (rest > 0) {
            double *a21 = a + (size_t)(j + jb) * lda + j;
            if (j > 0)
                L.dgemm(ROW, NOTRANS, TRANS, rest, jb, j, -1.0,
                        a + (size_t)(j + jb) * lda, lda, a + (size_t)j * lda, lda, 1.0,
                        a21, lda);
            L.dtrsm(ROW, RIGHT, LOWER, TRANS, NONUNIT, rest, jb, 1.0, a11, lda, a21, lda);
        }
    }
    return 0;
}

/* Whether this library runs the shape (and why not, in *why). */
static int s_supports(const s_shape *s, const char **why)
{
    if (s->dbl && s_is_dnnl()) {
        *why = "oneDNN 2.6 has no double GEMM";
        return 0;
    }
    if (s->op == OP_POTRF && !L.dpotrf) {
        *why = "no LAPACK in this library (dpotrf_blk is the bench's, on its BLAS)";
        return 0;
    }
    return 1;
}

static size_t s_rows_cols(int trans, int rows, int cols, int ld)
{
    return (size_t)(trans ? cols : rows) * (size_t)ld;
}

static int s_prepare(s_run *r, const s_shape *s)
{
    memset(r, 0, sizeof *r);
    r->s = s;
    if (s->dbl) {
        size_t nn = (size_t)s->n * s->lda;
        if (s->op == OP_GEMM) {
            r->na = (size_t)s->m * s->lda, r->nb = (size_t)s->k * s->ldb;
            r->nc = (size_t)s->m * s->ldc;
        } else if (s->op == OP_SYRK) {
            r->na = nn, r->nc = (size_t)s->n * s->ldc;
        } else if (s->op == OP_TRSM) {
            r->na = nn, r->nc = (size_t)s->m * s->ldb; /* the factor, then B */
        } else {
            r->nc = nn; /* in place */
        }
        r->da = r->na ? malloc(r->na * 8) : NULL;
        r->db = r->nb ? malloc(r->nb * 8) : NULL;
        r->dc = malloc(r->nc * 8);
        r->dsave = malloc(r->nc * 8);
        if ((r->na && !r->da) || (r->nb && !r->db) || !r->dc || !r->dsave)
            return -1;
        for (size_t i = 0; i < r->na; i++)
            r->da[i] = s_rand();
        for (size_t i = 0; i < r->nb; i++)
            r->db[i] = s_rand();
        for (size_t i = 0; i < r->nc; i++)
            r->dc[i] = s_rand();
        if (s->op == OP_POTRF || s->op == OP_POTRF_BLK)
            s_spd(r->dc, s->n, s->lda);
        if (s->op == OP_TRSM) { /* a Cholesky factor to solve with */
            s_spd(r->da, s->n, s->lda);
            if (s_potrf_blk(r->da, s->n, s->lda) < 0)
                return -1;
            for (int i = 0; i < s->n; i++)
                for (int j = i + 1; j < s->n; j++)
                    r->da[(size_t)i * s->lda + j] = 0;
        }
        memcpy(r->dsave, r->dc, r->nc * 8);
        return 0;
    }
    r->na = s_rows_cols(s->ta, s->m, s->k, s->lda);
    r->nb = s_rows_cols(s->tb, s->k, s->n, s->ldb);
    r->nc = (size_t)s->m * s->ldc;
    r->a = malloc(r->na * 4), r->b = malloc(r->nb * 4), r->c = malloc(r->nc * 4);
    if (!r->a || !r->b || !r->c)
        return -1;
    int bf = L.kind == LIB_DNNL_BF16;
    if (bf && (!(r->ua = malloc(r->na * 2)) || !(r->ub = malloc(r->nb * 2))))
        return -1;
    for (size_t i = 0; i < r->na; i++) {
        r->a[i] = (float)s_rand();
        if (bf) { /* the reference sees what the library sees */
            r->ua[i] = s_to_bf16(r->a[i]);
            r->a[i] = s_from_bf16(r->ua[i]);
        }
    }
    for (size_t i = 0; i < r->nb; i++) {
        r->b[i] = (float)s_rand();
        if (bf) {
            r->ub[i] = s_to_bf16(r->b[i]);
            r->b[i] = s_from_bf16(r->ub[i]);
        }
    }
    for (size_t i = 0; i < r->nc; i++)
        r->c[i] = (float)s_rand();
    r->dsave = malloc(r->nc * 8);
    if (!r->dsave)
        return -1;
    for (size_t i = 0; i < r->nc; i++)
        r->dsave[i] = r->c[i];
#ifdef GEMM_HAVE_DNNL
    if (L.kind == LIB_DNNL_MATMUL || bf) {
        dnnl_data_type_t in = bf ? dnnl_bf16 : dnnl_f32;
        dnnl_memory_desc_t mda, mdb, mdc;
        dnnl_dims_t da = {s->m, s->k}, db = {s->k, s->n}, dc = {s->m, s->n};
        dnnl_dims_t sa = {s->ta ? 1 : s->lda, s->ta ? s->lda : 1};
        dnnl_dims_t sb = {s->tb ? 1 : s->ldb, s->tb ? s->ldb : 1};
        dnnl_dims_t sc = {s->ldc, 1};
        dnnl_matmul_desc_t md;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_post_ops_t po = NULL;
        dnnl_primitive_desc_t pd = NULL;
        int ok =
            dnnl_memory_desc_init_by_strides(&mda, 2, da, in, sa) == dnnl_success &&
            dnnl_memory_desc_init_by_strides(&mdb, 2, db, in, sb) == dnnl_success &&
            dnnl_memory_desc_init_by_strides(&mdc, 2, dc, dnnl_f32, sc) == dnnl_success &&
            dnnl_matmul_desc_init(&md, &mda, &mdb, NULL, &mdc) == dnnl_success &&
            dnnl_primitive_attr_create(&attr) == dnnl_success;
        if (ok && s->beta != 0)
            ok = dnnl_post_ops_create(&po) == dnnl_success &&
                 dnnl_post_ops_append_sum(po, s->beta) == dnnl_success &&
                 dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
        ok = ok &&
             dnnl_primitive_desc_create(&pd, &md, attr, L.eng, NULL) == dnnl_success &&
             dnnl_primitive_create(&r->prim, pd) == dnnl_success &&
             dnnl_memory_create(&r->ma, &mda, L.eng, bf ? (void *)r->ua : r->a) ==
                 dnnl_success &&
             dnnl_memory_create(&r->mb, &mdb, L.eng, bf ? (void *)r->ub : r->b) ==
                 dnnl_success &&
             dnnl_memory_create(&r->mc, &mdc, L.eng, r->c) == dnnl_success;
        if (ok) {
            const char *impl = NULL;
            if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) ==
                    dnnl_success &&
                impl)
                snprintf(r->impl, sizeof r->impl, "%s", impl);
        }
        if (pd)
            dnnl_primitive_desc_destroy(pd);
        if (po)
            dnnl_post_ops_destroy(po);
        if (attr)
            dnnl_primitive_attr_destroy(attr);
        if (!ok)
            return -1;
    }
#endif
    return 0;
}

static void s_release(s_run *r)
{
#ifdef GEMM_HAVE_DNNL
    if (r->prim)
        dnnl_primitive_destroy(r->prim);
    if (r->ma)
        dnnl_memory_destroy(r->ma);
    if (r->mb)
        dnnl_memory_destroy(r->mb);
    if (r->mc)
        dnnl_memory_destroy(r->mc);
#endif
    free(r->a), free(r->b), free(r->c), free(r->ua), free(r->ub);
    free(r->da), free(r->db), free(r->dc), free(r->dsave);
}

/* Whether the call overwrites its input (restored before each call). */
static int s_destructive(const s_shape *s)
{
    return s->op == OP_POTRF || s->op == OP_POTRF_BLK || s->op == OP_TRSM;
}

static void s_restore(s_run *r)
{
    memcpy(r->dc, r->dsave, r->nc * 8);
}

/* One call. 0 or -1. */
static int s_call(s_run *r)
{
    const s_shape *s = r->s;
    if (s->dbl) {
        switch (s->op) {
        case OP_GEMM:
            L.dgemm(ROW, s->ta ? TRANS : NOTRANS, s->tb ? TRANS : NOTRANS, s->m, s->n,
                    s->k, 1.0, r->da, s->lda, r->db, s->ldb, s->beta, r->dc, s->ldc);
            return 0;
        case OP_SYRK:
            L.dsyrk(ROW, LOWER, NOTRANS, s->n, s->k, 1.0, r->da, s->lda, 0.0, r->dc,
                    s->ldc);
            return 0;
        case OP_TRSM: /* rows of B L^-T, as gp.c's predict */
            L.dtrsm(ROW, RIGHT, LOWER, TRANS, NONUNIT, s->m, s->n, 1.0, r->da, s->lda,
                    r->dc, s->ldb);
            return 0;
        case OP_POTRF: {
            int n = s->n, lda = s->lda, info = 0;
            L.dpotrf("U", &n, r->dc, &lda, &info, 1); /* row-major lower */
            return info == 0 ? 0 : -1;
        }
        case OP_POTRF_BLK:
            return s_potrf_blk(r->dc, s->n, s->lda);
        }
        return -1;
    }
    switch (L.kind) {
    case LIB_OPENBLAS:
    case LIB_BLIS:
        L.sgemm(ROW, s->ta ? TRANS : NOTRANS, s->tb ? TRANS : NOTRANS, s->m, s->n, s->k,
                1.0f, r->a, s->lda, r->b, s->ldb, s->beta, r->c, s->ldc);
        return 0;
#ifdef GEMM_HAVE_DNNL
    case LIB_DNNL_SGEMM:
        return dnnl_sgemm(s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->m, s->n, s->k, 1.0f,
                          r->a, s->lda, r->b, s->ldb, s->beta, r->c,
                          s->ldc) == dnnl_success
                   ? 0
                   : -1;
    case LIB_DNNL_MATMUL:
    case LIB_DNNL_BF16: {
        dnnl_exec_arg_t args[3] = {
            {DNNL_ARG_SRC, r->ma}, {DNNL_ARG_WEIGHTS, r->mb}, {DNNL_ARG_DST, r->mc}};
        if (dnnl_primitive_execute(r->prim, L.st, 3, args) != dnnl_success)
            return -1;
        return dnnl_stream_wait(L.st) == dnnl_success ? 0 : -1;
    }
#else
    default:
        break;
#endif
    }
    return -1;
}

/* ---- check: small sizes against a double reference ------------------------- */

/* The shape at check size: the same op, transposes and beta; sizes cut to
   at most 37 (the GP's n to 150: three of the blocked Cholesky's blocks),
   leading dimensions padded where the real ones are. */
static s_shape s_small(const s_shape *s)
{
    s_shape c = *s;
    if (s->dbl && s->op != OP_GEMM) {
        int n = 150;
        c.n = n, c.lda = c.ldb = c.ldc = n + 3;
        c.k = s->op == OP_SYRK ? 41 : c.k;
        c.m = s->op == OP_TRSM ? 29 : c.m;
        return c;
    }
    c.m = s->m < 37 ? s->m : 37, c.n = s->n < 35 ? s->n : 35, c.k = s->k < 33 ? s->k : 33;
    int nat_a = s->ta ? s->m : s->k, nat_b = s->tb ? s->k : s->n;
    c.lda = (s->ta ? c.m : c.k) + (s->lda > nat_a ? 5 : 0);
    c.ldb = (s->tb ? c.k : c.n) + (s->ldb > nat_b ? 3 : 0);
    c.ldc = c.n + (s->ldc > s->n ? 7 : 0);
    return c;
}

static double s_at(const s_run *r, int which, size_t i)
{
    if (r->s->dbl)
        return which == 0 ? r->da[i] : r->db[i];
    return which == 0 ? r->a[i] : r->b[i];
}

/* Largest error relative to each value's scale; *tol set for the type. */
static double s_check_one(s_run *r, double *tol)
{
    const s_shape *s = r->s;
    double worst = 0;
    *tol = s->dbl ? 1e-9 : 1e-5;
    if (s->op == OP_GEMM) {
        for (int i = 0; i < s->m; i++)
            for (int j = 0; j < s->n; j++) {
                double ref = s->beta * r->dsave[(size_t)i * s->ldc + j];
                double sc = fabs(ref);
                for (int t = 0; t < s->k; t++) {
                    double x = s_at(
                        r, 0, s->ta ? (size_t)t * s->lda + i : (size_t)i * s->lda + t);
                    double y = s_at(
                        r, 1, s->tb ? (size_t)j * s->ldb + t : (size_t)t * s->ldb + j);
                    ref += x * y, sc += fabs(x * y);
                }
                size_t ic = (size_t)i * s->ldc + j;
                double got = s->dbl ? r->dc[ic] : r->c[ic];
                double e = fabs(got - ref) / (sc + 1e-30);
                worst = e > worst || e != e ? e : worst;
            }
        return worst;
    }
    if (s->op == OP_SYRK) { /* lower triangle of A A^T */
        for (int i = 0; i < s->n; i++)
            for (int j = 0; j <= i; j++) {
                double ref = 0, sc = 0;
                for (int t = 0; t < s->k; t++) {
                    double p =
                        r->da[(size_t)i * s->lda + t] * r->da[(size_t)j * s->lda + t];
                    ref += p, sc += fabs(p);
                }
                double e = fabs(r->dc[(size_t)i * s->ldc + j] - ref) / (sc + 1e-30);
                worst = e > worst || e != e ? e : worst;
            }
        return worst;
    }
    if (s->op == OP_TRSM) { /* X L^T = B: residual against B */
        for (int i = 0; i < s->m; i++)
            for (int j = 0; j < s->n; j++) {
                double v = 0, sc = 0;
                for (int t = 0; t <= j; t++) {
                    double p =
                        r->dc[(size_t)i * s->ldb + t] * r->da[(size_t)j * s->lda + t];
                    v += p, sc += fabs(p);
                }
                double b = r->dsave[(size_t)i * s->ldb + j];
                double e = fabs(v - b) / (sc + fabs(b) + 1e-30);
                worst = e > worst || e != e ? e : worst;
            }
        return worst;
    }
    /* Cholesky: L L^T against the matrix (lower triangles) */
    for (int i = 0; i < s->n; i++)
        for (int j = 0; j <= i; j++) {
            double v = 0, sc = 0;
            for (int t = 0; t <= j; t++) {
                double p = r->dc[(size_t)i * s->lda + t] * r->dc[(size_t)j * s->lda + t];
                v += p, sc += fabs(p);
            }
            double a = r->dsave[(size_t)i * s->lda + j];
            double e = fabs(v - a) / (sc + fabs(a) + 1e-30);
            worst = e > worst || e != e ? e : worst;
        }
    return worst;
}

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds per call: warm-up, then enough calls for target seconds. */
static int s_time(s_run *r, double target, double *sec, long *reps_out)
{
    int dest = s_destructive(r->s);
    for (int i = 0; i < 2; i++) {
        if (dest)
            s_restore(r);
        if (s_call(r) < 0)
            return -1;
    }
    if (dest)
        s_restore(r);
    double t0 = s_now();
    if (s_call(r) < 0)
        return -1;
    double one = s_now() - t0;
    long reps = one > 0 ? (long)(target / one) : 1000;
    reps = reps < 3 ? 3 : reps > 100000 ? 100000 : reps;
    double total = 0;
    if (dest) {
        for (long i = 0; i < reps; i++) {
            s_restore(r);
            t0 = s_now();
            if (s_call(r) < 0)
                return -1;
            total += s_now() - t0;
        }
    } else {
        t0 = s_now();
        for (long i = 0; i < reps; i++)
            if (s_call(r) < 0)
                return -1;
        total = s_now() - t0;
    }
    *sec = total / (double)reps;
    *reps_out = reps;
    return 0;
}

static const char *s_opname(s_opkind op)
{
    static const char *names[] = {"gemm", "syrk", "trsm", "potrf", "potrf_blk"};
    return names[op];
}

static void s_list(void)
{
    for (int i = 0; i < s_nsh; i++) {
        const s_shape *s = &s_sh[i];
        s_shape c = s_small(s);
        printf(
            "{\"shape\": \"%s\", \"group\": \"%s\", \"op\": \"%s\", \"dbl\": %d, "
            "\"ta\": %d, \"tb\": %d, \"m\": %d, \"n\": %d, \"k\": %d, \"lda\": %d, "
            "\"ldb\": %d, \"ldc\": %d, \"beta\": %g, \"weight\": %.6f, \"flops\": %.0f, "
            "\"check\": {\"m\": %d, \"n\": %d, \"k\": %d, \"lda\": %d, \"ldb\": %d, "
            "\"ldc\": %d}}\n",
            s->name, s->group, s_opname(s->op), s->dbl, s->ta, s->tb, s->m, s->n, s->k,
            s->lda, s->ldb, s->ldc, s->beta, s->weight, s_flops(s), c.m, c.n, c.k, c.lda,
            c.ldb, c.ldc);
    }
}

static void s_usage(void)
{
    fprintf(stderr, "usage: gemm_libs --list | --pick | --lib "
                    "openblas|blis|dnnl-sgemm|dnnl-matmul|dnnl-bf16 [--threads T] "
                    "[--target-ms MS] [--check] [--only PREFIX]\n");
}

int main(int argc, char **argv)
{
    const char *lib = NULL, *only = "";
    int threads = 1, check = 0;
    double target = 0.03;
    s_shapes();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--list")) {
            s_list();
            return 0;
        } else if (!strcmp(a, "--pick")) {
            blaskern_info in;
            blaskern_get(&in);
            printf("%s\n", in.cpu_core[0] ? in.cpu_core : "none");
            return 0;
        } else if (!strcmp(a, "--check")) {
            check = 1;
        } else if (i + 1 < argc && !strcmp(a, "--lib")) {
            lib = argv[++i];
        } else if (i + 1 < argc && !strcmp(a, "--only")) {
            only = argv[++i];
        } else if (i + 1 < argc && !strcmp(a, "--threads")) {
            threads = atoi(argv[++i]);
        } else if (i + 1 < argc && !strcmp(a, "--target-ms")) {
            target = atof(argv[++i]) / 1000;
        } else {
            fprintf(stderr, "gemm_libs: unknown argument \"%s\"\n", a);
            s_usage();
            return 2;
        }
    }
    if (!lib || threads < 1 || threads > 256 || !(target > 0)) {
        fprintf(stderr, "gemm_libs: %s\n",
                !lib ? "--lib is required" : "--threads 1..256 and --target-ms > 0");
        s_usage();
        return 2;
    }
    char why[300];
    int rc = s_open(lib, threads, why, sizeof why);
    if (rc < 0) {
        fprintf(stderr, "gemm_libs: %s\n", why);
        if (rc == -2)
            s_usage();
        printf("{\"lib\": \"%s\", \"skip\": \"%s\"}\n", lib, why);
        return rc == -2 ? 2 : 3;
    }
    printf("{\"lib\": \"%s\", \"info\": \"%s\", \"threads\": %d}\n", lib, L.info,
           threads);
    int fault = getenv("GEMM_LIBS_FAULT") && !strcmp(getenv("GEMM_LIBS_FAULT"), "1");
    int bad = 0;
    for (int i = 0; i < s_nsh; i++) {
        const s_shape *s0 = &s_sh[i];
        const char *nw;
        if (strncmp(s0->name, only, strlen(only)) || !s_supports(s0, &nw))
            continue;
        s_shape sm = s_small(s0);
        const s_shape *s = check ? &sm : s0;
        s_run r;
        if (s_prepare(&r, s) < 0) {
            printf("{\"shape\": \"%s\", \"error\": \"setup failed (memory, or oneDNN "
                   "refused the shape)\"}\n",
                   s->name);
            s_release(&r);
            bad = 1;
            continue;
        }
        if (check) {
            if (s_destructive(s))
                s_restore(&r);
            if (s_call(&r) < 0) {
                printf("{\"shape\": \"%s\", \"error\": \"call failed\"}\n", s->name);
                bad = 1;
            } else {
                if (fault) {
                    if (s->dbl)
                        r.dc[0] += 1;
                    else
                        r.c[0] += 1;
                }
                double tol, e = s_check_one(&r, &tol);
                int ok = e <= tol;
                printf(
                    "{\"shape\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"err\": %.3g, "
                    "\"tol\": %g, \"ok\": %s}\n",
                    s->name, s->m, s->n, s->k, e, tol, ok ? "true" : "false");
                bad |= !ok;
            }
        } else {
            double sec = 0;
            long reps = 0;
            if (s_time(&r, target, &sec, &reps) < 0) {
                printf("{\"shape\": \"%s\", \"error\": \"call failed\"}\n", s->name);
                bad = 1;
            } else {
                printf(
                    "{\"shape\": \"%s\", \"s\": %.9g, \"reps\": %ld, \"gflops\": %.3f, "
                    "\"impl\": \"%s\"}\n",
                    s->name, sec, reps, s_flops(s) / sec * 1e-9, r.impl);
            }
        }
        fflush(stdout);
        s_release(&r);
    }
    return bad ? 1 : 0;
}
