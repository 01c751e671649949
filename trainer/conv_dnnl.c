/*  conv_dnnl.c - convolutions through oneDNN's primitives (conv_dnnl.h).

    One CPU engine and stream for the process, a scratchpad shared by every
    primitive (user-managed, grown as needed), and per layer a small cache
    of entries keyed by (batch, precision) (dnnl_cache.c), each with its
    three convolution primitives and the weight reorders between jizhi's
    OIHW and the layouts the kernels chose. Activations are given as NHWC so that no
   activation is reordered; only the weights (small) are. In bf16 the activations and
    their gradients arrive and leave as bf16: no conversion here either.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/conv_dnnl.h"
#include "trainer/trn.h"

#ifdef TRN_HAVE_DNNL

#include <omp.h>

#include "trainer/dnnl_impl.h"

#define S_CACHE                                                                          \
    4 /* entries per layer: the training batch, evaluation, a last short batch */

typedef struct {
    trn__dnnl_entry h;        /* key, primitives, reorders, weights */
    dnnl_memory_t scratch[3]; /* each primitive's scratchpad (over g_scratch) */
} s_entry;

struct trn_dconv {
    int c, h, w, co, k, stride, pad, ho, wo;
    s_entry e[S_CACHE];
    trn__dnnl_cache cache; /* over e[] */
    void *tmp;             /* dx or dw before accumulation */
    size_t tmp_cap;
};

/* Images per thread below which the backward-weights kernel runs on fewer
   threads. Measured (ONEDNN_VERBOSE, fp32, channels 8,16, 2 threads against
   1 on this project's 2-core Xeon): at batch 32 and 128 every layer's
   backward weights took 1.4-7x longer on two threads than on one (each
   thread reduces its share of the images into its own copy of dW, then the
   threads meet at oneDNN's spinning barrier and sum them); at batch 512 two
   threads were 1.2-1.3x faster. docs/bench.md, "fourth pass". Measured
   for two threads only: with more, the same images-per-thread rule is an
   extrapolation (at --threads 16 and batch 1024 it runs on 4). */
#define S_BWW_IMAGES 256

static dnnl_engine_t g_eng;
static dnnl_stream_t g_stream;
static void *g_scratch;
static size_t g_scratch_cap;

int trn_dnnl_available(void)
{
    return 1;
}

/* oneDNN's ISA values are nested bit sets (avx2_vnni 0x407 is above
   avx512_core_bf16 0xe7 in value but lacks its bits), so test the bits. */
static int s_isa_has(dnnl_cpu_isa_t have, dnnl_cpu_isa_t want)
{
    return ((unsigned)have & (unsigned)want) == (unsigned)want;
}

int trn_dnnl_bf16_native(void)
{
    return s_isa_has(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_bf16);
}

int trn__dnnl_amx(void)
{
    static int amx = -1; /* the effective ISA is fixed at oneDNN's first use */
    if (amx < 0)
        amx = s_isa_has(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_amx);
    return amx;
}

const char *trn_dnnl_isa_name(void)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return s_isa_has(isa, dnnl_cpu_isa_avx512_core_amx)    ? "avx512_core_amx"
           : s_isa_has(isa, dnnl_cpu_isa_avx512_core_bf16) ? "avx512_core_bf16"
           : s_isa_has(isa, dnnl_cpu_isa_avx512_core_vnni) ? "avx512_core_vnni"
           : s_isa_has(isa, dnnl_cpu_isa_avx512_core)      ? "avx512_core"
           : s_isa_has(isa, dnnl_cpu_isa_avx2)             ? "avx2"
           : s_isa_has(isa, dnnl_cpu_isa_avx)              ? "avx"
           : s_isa_has(isa, dnnl_cpu_isa_sse41)            ? "sse41"
                                                           : "generic";
}

void trn_dnnl_version(char *buf, size_t len)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, len, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
}

/* the count trn_dnnl_set_threads configured (0: never set, OpenMP's own) */
static int g_threads;

void trn_dnnl_set_threads(int n)
{
    if (n > 0) {
        g_threads = n;
        omp_set_num_threads(n);
    }
}

int trn__dnnl_threads(void)
{
    return g_threads > 0 ? g_threads : omp_get_max_threads();
}

/* Threads for primitive i (0 fwd, 1 bwd data, 2 bwd weights) at batch n
   when nthr are configured: all of them, but the backward weights on one
   thread per S_BWW_IMAGES images. */
int trn__dnnl_threads_for(int i, int n, int nthr)
{
    if (i != 2 || n >= S_BWW_IMAGES * nthr)
        return nthr;
    int t = n / S_BWW_IMAGES;
    return t < 1 ? 1 : t;
}

/* Sets the OpenMP threads oneDNN reads (at creation, where a kernel splits
   its work, and at execution); returns the previous count to restore. */
int trn__dnnl_threads_push(int t)
{
    int old = omp_get_max_threads();
    if (t != old)
        omp_set_num_threads(t);
    return old;
}

void trn__dnnl_threads_pop(int old)
{
    if (omp_get_max_threads() != old)
        omp_set_num_threads(old);
}

static int s_engine(char *err)
{
    if (g_eng)
        return 0;
    if (dnnl_engine_create(&g_eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&g_stream, g_eng, dnnl_stream_default_flags) != dnnl_success) {
        snprintf(err, TRN_ERRLEN, "oneDNN: cannot create the CPU engine");
        return -1;
    }
    return 0;
}

int trn__dnnl_engine(dnnl_engine_t *eng, dnnl_stream_t *stream, char *err)
{
    if (s_engine(err) < 0)
        return -1;
    *eng = g_eng;
    *stream = g_stream;
    return 0;
}

/* what a conv entry holds beyond its head (the cache frees the head) */
static void s_entry_fini(void *entry)
{
    s_entry *e = entry;
    for (int i = 0; i < 3; i++)
        if (e->scratch[i])
            dnnl_memory_destroy(e->scratch[i]);
}

static int s_entry_init(void *owner, trn__dnnl_entry *head, char *err);

trn_dconv *trn_dconv_new(int c, int h, int w, int co, int k, int stride, int pad,
                         char *err)
{
    if (s_engine(err) < 0)
        return NULL;
    trn_dconv *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    d->c = c, d->h = h, d->w = w, d->co = co, d->k = k, d->stride = stride, d->pad = pad;
    d->ho = trn_conv_out(h, k, stride, pad);
    d->wo = trn_conv_out(w, k, stride, pad);
    trn__dnnl_cache_init(&d->cache, d->e, sizeof d->e[0], S_CACHE, s_entry_init,
                         s_entry_fini, d);
    return d;
}

void trn_dconv_destroy(trn_dconv **dp)
{
    if (!dp || !*dp)
        return;
    trn_dconv *d = *dp;
    trn__dnnl_cache_fini(&d->cache);
    free(d->tmp);
    free(d);
    *dp = NULL;
}

/* A reorder from one layout to another, or NULL (*same = 1) when equal. */
int trn__dnnl_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                      dnnl_primitive_t *out, int *same, int thr)
{
    *out = NULL;
    *same = dnnl_memory_desc_equal(from, to);
    if (*same)
        return 0;
    int old = trn__dnnl_threads_push(thr);
    dnnl_primitive_desc_t pd;
    dnnl_status_t st =
        dnnl_reorder_primitive_desc_create(&pd, from, g_eng, to, g_eng, NULL);
    if (st == dnnl_success) {
        st = dnnl_primitive_create(out, pd);
        dnnl_primitive_desc_destroy(pd);
    }
    trn__dnnl_threads_pop(old);
    return st == dnnl_success ? 0 : -1;
}

/* A memory object over md with its own buffer (*buf, owned by the entry). */
int trn__dnnl_owned(dnnl_memory_t *m, const dnnl_memory_desc_t *md, void **buf)
{
    size_t sz = dnnl_memory_desc_get_size(md);
    *buf = aligned_alloc(64, (sz + 63) / 64 * 64);
    if (!*buf)
        return -1;
    return dnnl_memory_create(m, md, g_eng, *buf) == dnnl_success ? 0 : -1;
}

static int s_entry_init(void *owner, trn__dnnl_entry *head, char *err)
{
    trn_dconv *d = owner;
    s_entry *e = (s_entry *)head;
    int n = head->n, bf16 = head->bf16;
    dnnl_data_type_t lo = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t sdims = {n, d->c, d->h, d->w}, ddims = {n, d->co, d->ho, d->wo},
                wdims = {d->co, d->c, d->k, d->k}, strides = {d->stride, d->stride},
                pad = {d->pad, d->pad};
    dnnl_memory_desc_t src_lo, dst_lo, wany, wuser;
    dnnl_memory_desc_init_by_tag(&src_lo, 4, sdims, lo, dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&dst_lo, 4, ddims, lo, dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&wany, 4, wdims, lo, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wuser, 4, wdims, dnnl_f32, dnnl_oihw);
    dnnl_memory_desc_t wany_f;
    dnnl_memory_desc_init_by_tag(&wany_f, 4, wdims, dnnl_f32, dnnl_format_tag_any);
    /* the padding on the high side that makes the output size exact */
    dnnl_dims_t pad_r = {(d->ho - 1) * d->stride + d->k - d->h - d->pad,
                         (d->wo - 1) * d->stride + d->k - d->w - d->pad};
    dnnl_convolution_desc_t cd[3];
    dnnl_primitive_attr_t attr;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success)
        goto fail;
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (dnnl_convolution_forward_desc_init(
            &cd[0], dnnl_forward_training, dnnl_convolution_direct, &src_lo, &wany, NULL,
            &dst_lo, strides, pad, pad_r) != dnnl_success ||
        dnnl_convolution_backward_data_desc_init(&cd[1], dnnl_convolution_direct, &src_lo,
                                                 &wany, &dst_lo, strides, pad,
                                                 pad_r) != dnnl_success ||
        dnnl_convolution_backward_weights_desc_init(&cd[2], dnnl_convolution_direct,
                                                    &src_lo, &wany_f, NULL, &dst_lo,
                                                    strides, pad, pad_r) != dnnl_success)
        goto fail_attr;
    for (int i = 0; i < 3; i++)
        e->h.thr[i] = trn__dnnl_threads_for(i, n, e->h.nthr);
    for (int i = 0; i < 3; i++) {
        int old = trn__dnnl_threads_push(e->h.thr[i]);
        dnnl_status_t st = dnnl_primitive_desc_create(&e->h.pd[i], &cd[i], attr, g_eng,
                                                      i ? e->h.pd[0] : NULL);
        trn__dnnl_threads_pop(old);
        if (st != dnnl_success)
            goto fail_attr;
    }
    dnnl_primitive_attr_destroy(attr);
    for (int i = 0; i < 3; i++) {
        int old = trn__dnnl_threads_push(e->h.thr[i]);
        dnnl_status_t st = dnnl_primitive_create(&e->h.prim[i], e->h.pd[i]);
        trn__dnnl_threads_pop(old);
        if (st != dnnl_success)
            goto fail;
        const char *impl = NULL;
        dnnl_primitive_desc_query(e->h.pd[i], dnnl_query_impl_info_str, 0, &impl);
        snprintf(e->h.impl[i], sizeof e->h.impl[i], "%s", impl ? impl : "?");
        const dnnl_memory_desc_t *smd =
            dnnl_primitive_desc_query_md(e->h.pd[i], dnnl_query_scratchpad_md, 0);
        size_t sz = smd ? dnnl_memory_desc_get_size(smd) : 0;
        if (sz > g_scratch_cap) {
            free(g_scratch);
            g_scratch = aligned_alloc(64, (sz + 63) / 64 * 64);
            g_scratch_cap = g_scratch ? sz : 0;
            if (!g_scratch)
                goto fail;
        }
        if (sz && dnnl_memory_create(&e->scratch[i], smd, g_eng, DNNL_MEMORY_NONE) !=
                      dnnl_success)
            goto fail;
    }
    const dnnl_memory_desc_t *wf = dnnl_primitive_desc_query_md(e->h.pd[0],
                                                                dnnl_query_weights_md, 0),
                             *wb = dnnl_primitive_desc_query_md(e->h.pd[1],
                                                                dnnl_query_weights_md, 0),
                             *dwm = dnnl_primitive_desc_query_md(
                                 e->h.pd[2], dnnl_query_diff_weights_md, 0);
    int same;
    if (dnnl_memory_create(&e->h.src, &src_lo, g_eng, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&e->h.dst, &dst_lo, g_eng, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&e->h.ddst, &dst_lo, g_eng, DNNL_MEMORY_NONE) !=
            dnnl_success ||
        dnnl_memory_create(&e->h.dsrc, &src_lo, g_eng, DNNL_MEMORY_NONE) !=
            dnnl_success ||
        dnnl_memory_create(&e->h.wuser, &wuser, g_eng, DNNL_MEMORY_NONE) !=
            dnnl_success ||
        dnnl_memory_create(&e->h.dwuser, &wuser, g_eng, DNNL_MEMORY_NONE) != dnnl_success)
        goto fail;
    /* reorders on one thread: the weights are a few KiB, and on two threads
       each reorder cost 0.06-0.07 ms against 0.002 on one (batch 32,
       ONEDNN_VERBOSE), the partner's wake-up and not the copy */
    if (trn__dnnl_owned(&e->h.wfwd, wf, &e->h.wfwd_buf) < 0 ||
        trn__dnnl_owned(&e->h.wbwd, wb, &e->h.wbwd_buf) < 0 ||
        trn__dnnl_reorder(&wuser, wf, &e->h.wr_fwd, &same, 1) < 0 ||
        trn__dnnl_reorder(&wuser, wb, &e->h.wr_bwd, &same, 1) < 0 ||
        trn__dnnl_reorder(dwm, &wuser, &e->h.dwr, &same, 1) < 0)
        goto fail;
    if (e->h.dwr && trn__dnnl_owned(&e->h.dw, dwm, &e->h.dw_buf) < 0)
        goto fail;
    if (!e->h.dwr &&
        dnnl_memory_create(&e->h.dw, dwm, g_eng, DNNL_MEMORY_NONE) != dnnl_success)
        goto fail;
    return 0;
fail_attr:
    dnnl_primitive_attr_destroy(attr);
fail:
    snprintf(err, TRN_ERRLEN,
             "oneDNN: no convolution for %dx%dx%d -> %d (k %d, stride %d) at batch %d%s",
             d->c, d->h, d->w, d->co, d->k, d->stride, n, bf16 ? " in bf16" : "");
    return -1;
}

/* Runs p on thr OpenMP threads (what it was created for). */
int trn__dnnl_exec(dnnl_primitive_t p, int thr, int nargs, const dnnl_exec_arg_t *args)
{
    int old = trn__dnnl_threads_push(thr);
    dnnl_status_t st = dnnl_primitive_execute(p, g_stream, nargs, args);
    trn__dnnl_threads_pop(old);
    return st == dnnl_success ? 0 : -1;
}

/* Runs primitive i of e with its scratchpad and the given args. */
static int s_run(s_entry *e, int i, dnnl_exec_arg_t *args, int nargs)
{
    if (e->scratch[i]) {
        dnnl_memory_set_data_handle(e->scratch[i], g_scratch);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch[i]};
    }
    return trn__dnnl_exec(e->h.prim[i], e->h.thr[i], nargs, args);
}

int trn__dnnl_weights(dnnl_memory_t user, dnnl_primitive_t r, dnnl_memory_t to,
                      const float *w, int thr)
{
    dnnl_memory_set_data_handle(user, (void *)w);
    if (!r) /* the same layout and type: f32, the user's */
        return dnnl_memory_set_data_handle(to, (void *)w) == dnnl_success ? 0 : -1;
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, to}};
    return trn__dnnl_exec(r, thr, 2, a);
}

TRN_CLONES void trn__dnnl_axpby(float *restrict o, const float *restrict g, float beta,
                                long n)
{
    for (long i = 0; i < n; i++)
        o[i] = beta * o[i] + g[i];
}

static void *s_tmp(trn_dconv *d, size_t bytes)
{
    if (bytes > d->tmp_cap) {
        void *t = realloc(d->tmp, bytes);
        if (!t)
            return NULL;
        d->tmp = t;
        d->tmp_cap = bytes;
    }
    return d->tmp;
}

int trn_dconv_fwd(trn_dconv *d, const void *x, const float *w, void *y, int n, int bf16,
                  char *err)
{
    s_entry *e = trn__dnnl_cache_get(&d->cache, n, bf16, err);
    if (!e)
        return -1;
    if (trn__dnnl_weights(e->h.wuser, e->h.wr_fwd, e->h.wfwd, w, 1) < 0)
        goto fail;
    dnnl_memory_set_data_handle(e->h.src, (void *)x);
    dnnl_memory_set_data_handle(e->h.dst, y);
    dnnl_exec_arg_t a[4] = {{DNNL_ARG_SRC, e->h.src},
                            {DNNL_ARG_WEIGHTS, e->h.wfwd},
                            {DNNL_ARG_DST, e->h.dst}};
    if (s_run(e, 0, a, 3) < 0)
        goto fail;
    return 0;
fail:
    snprintf(err, TRN_ERRLEN, "oneDNN: convolution forward failed");
    return -1;
}

int trn_dconv_bwd(trn_dconv *d, const void *x, const float *w, const void *dy, void *dx,
                  float *dw, int n, int bf16, float beta, float dxbeta, char *err)
{
    s_entry *e = trn__dnnl_cache_get(&d->cache, n, bf16, err);
    if (!e)
        return -1;
    long nx = (long)n * d->c * d->h * d->w, nw = (long)d->co * d->c * d->k * d->k;
    dnnl_memory_set_data_handle(e->h.src, (void *)x);
    dnnl_memory_set_data_handle(e->h.ddst, (void *)dy);
    /* weights: dw = beta*dw + grad */
    float *dwo = beta == 0 ? dw : s_tmp(d, (size_t)nw * sizeof(float));
    if (!dwo)
        goto oom;
    dnnl_memory_set_data_handle(e->h.dwuser, dwo);
    if (!e->h.dwr)
        dnnl_memory_set_data_handle(e->h.dw, dwo);
    dnnl_exec_arg_t a[4] = {{DNNL_ARG_SRC, e->h.src},
                            {DNNL_ARG_DIFF_DST, e->h.ddst},
                            {DNNL_ARG_DIFF_WEIGHTS, e->h.dw}};
    if (s_run(e, 2, a, 3) < 0)
        goto fail;
    if (e->h.dwr) {
        dnnl_exec_arg_t r[] = {{DNNL_ARG_FROM, e->h.dw}, {DNNL_ARG_TO, e->h.dwuser}};
        if (trn__dnnl_exec(e->h.dwr, 1, 2, r) < 0)
            goto fail;
    }
    if (beta != 0)
        trn__dnnl_axpby(dw, dwo, beta, nw);
    if (!dx)
        return 0;
    /* data: dx = dxbeta*dx + grad (in bf16, the sum rounded once) */
    size_t esz = bf16 ? sizeof(uint16_t) : sizeof(float);
    void *dxo = dxbeta == 0 ? dx : s_tmp(d, (size_t)nx * esz);
    if (!dxo)
        goto oom;
    if (trn__dnnl_weights(e->h.wuser, e->h.wr_bwd, e->h.wbwd, w, 1) < 0)
        goto fail;
    dnnl_memory_set_data_handle(e->h.dsrc, dxo);
    dnnl_exec_arg_t b[4] = {{DNNL_ARG_DIFF_DST, e->h.ddst},
                            {DNNL_ARG_WEIGHTS, e->h.wbwd},
                            {DNNL_ARG_DIFF_SRC, e->h.dsrc}};
    if (s_run(e, 1, b, 3) < 0)
        goto fail;
    if (dxbeta != 0 && bf16)
        trn_acc_bf(dx, dxo, dxbeta, nx);
    else if (dxbeta != 0)
        trn__dnnl_axpby(dx, dxo, dxbeta, nx);
    return 0;
oom:
    snprintf(err, TRN_ERRLEN, "out of memory");
    return -1;
fail:
    snprintf(err, TRN_ERRLEN, "oneDNN: convolution backward failed");
    return -1;
}

int trn_dconv_describe(trn_dconv *d, int n, int bf16, char *buf, size_t len, char *err)
{
    return trn__dnnl_cache_describe(&d->cache, n, bf16, "", buf, len, err);
}

int trn_dconv_threads(trn_dconv *d, int n, int bf16, int which, char *err)
{
    return trn__dnnl_cache_threads(&d->cache, n, bf16, which, err);
}

#else /* no oneDNN in this build: net.c uses the GEMM path */

struct trn_dconv {
    int unused;
};

int trn_dnnl_available(void)
{
    return 0;
}

int trn_dnnl_bf16_native(void)
{
    return 0;
}

const char *trn_dnnl_isa_name(void)
{
    return "none";
}

void trn_dnnl_version(char *buf, size_t len)
{
    snprintf(buf, len, "no oneDNN in this build");
}

void trn_dnnl_set_threads(int n)
{
    (void)n;
}

trn_dconv *trn_dconv_new(int c, int h, int w, int co, int k, int stride, int pad,
                         char *err)
{
    (void)c, (void)h, (void)w, (void)co, (void)k, (void)stride, (void)pad;
    snprintf(err, TRN_ERRLEN, "this jizhi-train was built without oneDNN");
    return NULL;
}

void trn_dconv_destroy(trn_dconv **dp)
{
    if (dp)
        *dp = NULL;
}

int trn_dconv_fwd(trn_dconv *d, const void *x, const float *w, void *y, int n, int bf16,
                  char *err)
{
    (void)d, (void)x, (void)w, (void)y, (void)n, (void)bf16;
    snprintf(err, TRN_ERRLEN, "this jizhi-train was built without oneDNN");
    return -1;
}

int trn_dconv_bwd(trn_dconv *d, const void *x, const float *w, const void *dy, void *dx,
                  float *dw, int n, int bf16, float beta, float dxbeta, char *err)
{
    (void)d, (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)n, (void)bf16;
    (void)beta, (void)dxbeta;
    snprintf(err, TRN_ERRLEN, "this jizhi-train was built without oneDNN");
    return -1;
}

int trn_dconv_describe(trn_dconv *d, int n, int bf16, char *buf, size_t len, char *err)
{
    (void)d, (void)n, (void)bf16, (void)buf, (void)len;
    snprintf(err, TRN_ERRLEN, "this jizhi-train was built without oneDNN");
    return -1;
}

int trn_dconv_threads(trn_dconv *d, int n, int bf16, int which, char *err)
{
    (void)d, (void)n, (void)bf16, (void)which;
    snprintf(err, TRN_ERRLEN, "this jizhi-train was built without oneDNN");
    return -1;
}

#endif
