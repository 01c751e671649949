/*  linear_dnnl.c - fully connected layers through oneDNN (linear_dnnl.h).

    Per layer a small cache of entries keyed by (batch, precision)
    (dnnl_cache.c, shared with the convolutions), each
    with three primitives: the forward (bias, ReLU fused), the backward
    data and the backward weights. Two kinds, chosen per layer at creation:
    - matmul (the default): plain row-major activations throughout; the
      weights are used as they are in fp32, and in bf16 through a plain
      bf16 copy (d->w16, one vectorised pass per forward) or, at
      S_PACK_ROWS rows and more, packed from fp32 into the layouts the
      forward's and the backward data's kernels ask for (wpack.h), once
      per pass each (plain weights are packed again inside every
      execution); dW = dy^T x reads dy transposed through strides; the
      bias gradient is one pass here (or the ReLU's backward's, taken as
      it wrote dy). Measured against the inner products (bf16,
      784-256-256-10, ONEDNN_VERBOSE, one thread, a 2-core Xeon with
      AMX): oneDNN time per step 0.48 ms against 0.73 at batch 128 (there
      half the inner products' time went to weight reorders) and 2.5
      against 3.6 at 1024; and the inner products' backward weights took
      4-6 ms a layer on two threads at batch 1024 (their threads reduce
      over the batch and meet at a barrier while the other core was
      busy), the matmul's 0.9.
    - inner product (JIZHI_DNNL_LINEAR=ip, kept to measure on other CPUs):
      blocked weights reordered from jizhi's [m][k] fp32 once per call
      (on one thread: on two, 256x784 took 0.25-0.44 ms against 0.17),
      the backward data reusing the forward's copy when the layouts agree,
      dW reordered back; oneDNN sums the bias gradient.
    Either way every primitive runs on one thread per 256 rows in fp32
    and per 1024 in bf16 on AMX (256 without; at most --threads; net.c sets that count
   around the whole step, trn_dlin_threads_push, so the passes between the linears follow
   it too), and activations are never reordered. The engine, stream and helpers are
   conv_dnnl.c's (dnnl_impl.h); scratchpads are oneDNN's own (library mode).
*/
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/align.h"
#include "trainer/bf16.h"
#include "trainer/conv_dnnl.h"
#include "trainer/linear_dnnl.h"
#include "trainer/trn.h"
#include "trainer/wpack.h"

#ifdef TRN_HAVE_DNNL

#include "trainer/dnnl_impl.h"

/* entries per layer (LRU): a default epoch uses five batch sizes (the
   training batch, the gradient-noise half batch, the last short batch, the
   evaluation chunk and its last chunk); with 4 some were recreated every
   epoch (cheap: oneDNN keeps its own primitive cache) */
#define S_CACHE 8

typedef struct {
    trn__dnnl_entry h; /* key, primitives, reorders, weights */
    int mm;            /* matmul primitives (plain layouts) instead of inner products */
    int wshare;        /* bwd data takes the forward's layout: it reuses that copy */
    int wfwd_ok;       /* a forward filled wfwd (a remade entry's is empty) */
    dnnl_memory_t bias, dbias; /* handles set per call */
    dnnl_memory_t dyt;         /* matmul: dy seen as [m][n] (the backward weights' A) */
    /* matmul in bf16: the weights reordered into the layouts the kernels
       chose (h.wfwd, h.wbwd: packed once per pass instead of inside every
       execution), from w as [m][k] seen as the backward's [m][k] (h.wuser
       is the forward's view, [k][m]) */
    int packed;
    int own_fwd, own_bwd; /* that layout is wpack.h's: packed by trn_wpack_*, else
                             by oneDNN's reorders h.wr_fwd, h.wr_bwd */
    dnnl_memory_t wuser_b;
} s_entry;

struct trn_dlin {
    int k, m, bias, relu, f32out;
    int mm;        /* matmul primitives, or inner products (JIZHI_DNNL_LINEAR=ip) */
    uint16_t *w16; /* matmul in bf16 below S_PACK_ROWS: the weights rounded to bf16
                      by the forward */
    s_entry e[S_CACHE];
    trn__dnnl_cache cache; /* over e[] */
    float *tmp;            /* dw and db before accumulation (beta != 0) */
    size_t tmp_cap;
    uint16_t *dyh; /* bf16 copy of an f32out layer's output gradient */
    size_t dyh_cap;
};

static dnnl_engine_t g_eng;
static dnnl_stream_t g_stream;

/* The batch from which a bf16 matmul takes packed weights. MLP
   784-256-256-10, this project's AMX VM, alternating runs against plain
   weights: oneDNN's time per step 1.75 -> 1.56 ms at batch 1024, and
   samples/s +1.6-4.6% there on one thread (4 pairs), +1-5% on two (3);
   at batch 512 -6% to +1.5% (3), at 128 -5-7% (3): the packing (50-90 us
   a step, against 35-60 for the plain bf16 copy) cost more than the
   kernels saved. */
#define S_PACK_ROWS 1024

static _Atomic int g_force_reorder; /* tests: trn__dlin_force_reorder */

static int s_init(void *owner, trn__dnnl_entry *head, char *err);
static void s_entry_fini(void *entry);

trn_dlin *trn_dlin_new(int k, int m, int bias, int relu, int f32out, char *err)
{
    if (trn__dnnl_engine(&g_eng, &g_stream, err) < 0)
        return NULL;
    trn_dlin *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    d->k = k, d->m = m, d->bias = bias != 0, d->relu = relu != 0, d->f32out = f32out != 0;
    const char *kind = getenv("JIZHI_DNNL_LINEAR");
    d->mm = !(kind && !strcmp(kind, "ip"));
    if (d->mm && !(d->w16 = trn_alloc64((size_t)k * m * sizeof *d->w16, 0))) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        free(d);
        return NULL;
    }
    trn__dnnl_cache_init(&d->cache, d->e, sizeof d->e[0], S_CACHE, s_init, s_entry_fini,
                         d);
    return d;
}

/* what a linear's entry holds beyond its head (the cache frees the head) */
static void s_entry_fini(void *entry)
{
    s_entry *e = entry;
    dnnl_memory_t m[] = {e->dyt, e->bias, e->dbias, e->wuser_b};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (m[i])
            dnnl_memory_destroy(m[i]);
}

void trn_dlin_destroy(trn_dlin **dp)
{
    if (!dp || !*dp)
        return;
    trn_dlin *d = *dp;
    trn__dnnl_cache_fini(&d->cache);
    free(d->w16);
    free(d->tmp);
    free(d->dyh);
    free(d);
    *dp = NULL;
}

static int s_mem(dnnl_memory_t *m, const dnnl_memory_desc_t *md)
{
    return dnnl_memory_create(m, md, g_eng, DNNL_MEMORY_NONE) == dnnl_success ? 0 : -1;
}

/* The OpenMP threads a step of the MLP at batch n runs on, every
   primitive and every pass between them (trn_dlin_threads_push, around
   the whole forward and backward): one per S_ROWS_F32 rows in fp32,
   S_ROWS_AMX in bf16 where oneDNN's ISA has AMX, S_ROWS_F32 in bf16
   without it, at most nthr, at least one. Under OMP_WAIT_POLICY=passive
   (jizhi-train's default) every parallel region wakes its sleeping
   threads, and at small batches that costs more than the second thread
   gives. Measured only on this project's 2-core VM (Xeon with AMX,
   784-256-256-10, alternating runs, samples/s; docs/bench.md, "The whole
   step on one thread rule"):
   - fp32, primitives alone on one thread per 256 rows: batch 128 on two
     threads 72 K -> 89 K (one thread 89 K), batch 1024 unchanged; the
     whole step on that rule: two threads won from 512 rows (124 K
     against 99 K on one);
   - bf16 on AMX does about four times fp32's rate per row, so a second
     thread pays only later: the whole step on two threads against one,
     batch 1024: 271-287 K against 291-293 K; 1536: 289-294 K against
     282-287 K (even); 2048: 298-306 K against 282-284 K; 4096: 300-319 K
     against 270 K. Hence 1024 rows a thread there;
   - bf16 without AMX, emulated on the same VM by capping oneDNN with
     ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 (its avx512_core_bf16 kernels,
     nearer fp32's rate), two threads, 256 rows a thread against 1024:
     batch 512 84-108 K against 73-75 K, 1024 116-120 K against 74-77 K
     (docs/bench.md, "bf16 rows per thread by ISA"). Hence 256 there.
   Not measured on more than two cores. */
#define S_ROWS_F32 256
#define S_ROWS_AMX 1024

int trn_dlin_rows_per_thread(int bf16)
{
    return bf16 && trn__dnnl_amx() ? S_ROWS_AMX : S_ROWS_F32;
}

int trn_dlin_eval_rows(int bf16)
{
    long r = (long)trn_dlin_rows_per_thread(bf16) * trn__dnnl_threads();
    return r < INT_MAX ? (int)r : INT_MAX;
}

static int s_threads_for(int n, int bf16, int nthr)
{
    int rows = trn_dlin_rows_per_thread(bf16);
    if (n >= rows * nthr)
        return nthr;
    return n / rows < 1 ? 1 : n / rows;
}

int trn_dlin_threads_push(int n, int bf16)
{
    return trn__dnnl_threads_push(s_threads_for(n, bf16, trn__dnnl_threads()));
}

void trn_dlin_threads_pop(int old)
{
    trn__dnnl_threads_pop(old);
}

/* Makes entry e's (key n, bf16, nthr set) three primitives from the
   operation descriptors op[] (forward, backward data, backward weights),
   the forward with the ReLU as a post-op where the layer has one; an
   inner product's backward gets the forward as its hint. 0 or -1. */
static int s_make(trn_dlin *d, s_entry *e, int n, int bf16, int mm, const void *op[3])
{
    e->mm = mm;
    for (int i = 0; i < 3; i++)
        e->h.thr[i] = s_threads_for(n, bf16, e->h.nthr);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    int rc = -1;
    if (d->relu && /* max(0, .) fused into the forward's epilogue */
        (dnnl_primitive_attr_create(&attr) != dnnl_success ||
         dnnl_post_ops_create(&po) != dnnl_success ||
         dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) !=
             dnnl_success ||
         dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success))
        goto out;
    for (int i = 0; i < 3; i++) {
        int old = trn__dnnl_threads_push(e->h.thr[i]);
        dnnl_status_t st = dnnl_primitive_desc_create(
            &e->h.pd[i], op[i], i ? NULL : attr, g_eng, i && !mm ? e->h.pd[0] : NULL);
        if (st == dnnl_success)
            st = dnnl_primitive_create(&e->h.prim[i], e->h.pd[i]);
        trn__dnnl_threads_pop(old);
        if (st != dnnl_success)
            goto out;
        const char *impl = NULL;
        dnnl_primitive_desc_query(e->h.pd[i], dnnl_query_impl_info_str, 0, &impl);
        snprintf(e->h.impl[i], sizeof e->h.impl[i], "%s", impl ? impl : "?");
    }
    rc = 0;
out:
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return rc;
}

static int s_entry_init(trn_dlin *d, s_entry *e, int n, int bf16, char *err)
{
    dnnl_data_type_t lo = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_data_type_t yt = bf16 && !d->f32out ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t sdims = {n, d->k}, ddims = {n, d->m}, wdims = {d->m, d->k},
                bdims = {d->m};
    dnnl_memory_desc_t src, dst, ddst, wany, wany_f, wuser, bmd;
    dnnl_memory_desc_init_by_tag(&src, 2, sdims, lo, dnnl_nc);
    dnnl_memory_desc_init_by_tag(&dst, 2, ddims, yt, dnnl_nc);
    /* the backward takes dy in the kernels' type (an f32out layer's is
       converted to bf16 first) */
    dnnl_memory_desc_init_by_tag(&ddst, 2, ddims, lo, dnnl_nc);
    dnnl_memory_desc_init_by_tag(&wany, 2, wdims, lo, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wany_f, 2, wdims, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wuser, 2, wdims, dnnl_f32, dnnl_oi);
    dnnl_memory_desc_init_by_tag(&bmd, 1, bdims, dnnl_f32, dnnl_a);
    const dnnl_memory_desc_t *bp = d->bias ? &bmd : NULL;
    dnnl_inner_product_desc_t id[3];
    const void *op[3] = {&id[0], &id[1], &id[2]};
    if (dnnl_inner_product_forward_desc_init(&id[0], dnnl_forward_training, &src, &wany,
                                             bp, &dst) != dnnl_success ||
        dnnl_inner_product_backward_data_desc_init(&id[1], &src, &wany, &ddst) !=
            dnnl_success ||
        dnnl_inner_product_backward_weights_desc_init(&id[2], &src, &wany_f, bp, &ddst) !=
            dnnl_success ||
        s_make(d, e, n, bf16, 0, op) < 0)
        goto fail;
    /* dW in the kernel's layout, reordered to [m][k] after: asking for
       [m][k] itself gets a generic GEMM here, 1.7 ms against 0.96 + 0.13
       (784 -> 256 at batch 1024, one thread, ONEDNN_VERBOSE) */
    const dnnl_memory_desc_t *wf = dnnl_primitive_desc_query_md(e->h.pd[0],
                                                                dnnl_query_weights_md, 0),
                             *wb = dnnl_primitive_desc_query_md(e->h.pd[1],
                                                                dnnl_query_weights_md, 0),
                             *dwm = dnnl_primitive_desc_query_md(
                                 e->h.pd[2], dnnl_query_diff_weights_md, 0);
    int same;
    if (s_mem(&e->h.src, &src) < 0 || s_mem(&e->h.dst, &dst) < 0 ||
        s_mem(&e->h.ddst, &ddst) < 0 || s_mem(&e->h.dsrc, &src) < 0 ||
        s_mem(&e->h.wuser, &wuser) < 0 || s_mem(&e->h.dwuser, &wuser) < 0 ||
        (d->bias && (s_mem(&e->bias, &bmd) < 0 || s_mem(&e->dbias, &bmd) < 0)))
        goto fail;
    e->wshare = dnnl_memory_desc_equal(wf, wb);
    if (trn__dnnl_owned(&e->h.wfwd, wf, &e->h.wfwd_buf) < 0 ||
        (!e->wshare && (trn__dnnl_owned(&e->h.wbwd, wb, &e->h.wbwd_buf) < 0 ||
                        trn__dnnl_reorder(&wuser, wb, &e->h.wr_bwd, &same, 1) < 0)) ||
        trn__dnnl_reorder(&wuser, wf, &e->h.wr_fwd, &same, 1) < 0 ||
        trn__dnnl_reorder(dwm, &wuser, &e->h.dwr, &same, 1) < 0)
        goto fail;
    if (e->h.dwr ? trn__dnnl_owned(&e->h.dw, dwm, &e->h.dw_buf) < 0
                 : s_mem(&e->h.dw, dwm) < 0)
        goto fail;
    return 0;
fail:
    snprintf(err, TRN_ERRLEN, "oneDNN: no inner product for %d -> %d at batch %d%s", d->k,
             d->m, n, bf16 ? " in bf16" : "");
    return -1;
}

/* The matmul twin of s_entry_init: plain row-major activations; the
   weights plain (bf16: d->w16), or packed in the kernels' layouts for a
   large bf16 batch (e->packed); the bias gradient is summed here
   (s_bias_grad). */
static int s_entry_init_mm(trn_dlin *d, s_entry *e, int n, int bf16, char *err)
{
    dnnl_data_type_t lo = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_data_type_t yt = bf16 && !d->f32out ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t xd = {n, d->k}, yd = {n, d->m}, wtd = {d->k, d->m}, wd = {d->m, d->k},
                bd = {1, d->m}, dytd = {d->m, n};
    dnnl_dims_t wts = {1, d->k}, dyts = {1, d->m}; /* w as [k][m], dy as [m][n] */
    dnnl_memory_desc_t x, y, dy, wt, w, b, dyt, dwf;
    dnnl_memory_desc_init_by_tag(&x, 2, xd, lo, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&y, 2, yd, yt, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&dy, 2, yd, lo, dnnl_ab);
    /* bf16 at S_PACK_ROWS rows or more: the weights in the layout the
       kernels ask for, packed from fp32 once per pass (wpack.h; else by
       oneDNN's reorders), where plain weights are packed again inside
       every execution */
    e->packed = bf16 && n >= S_PACK_ROWS;
    dnnl_memory_desc_t wtu, wu; /* w as it is: fp32 [m][k], seen both ways */
    dnnl_memory_desc_init_by_strides(&wtu, 2, wtd, dnnl_f32, wts);
    dnnl_memory_desc_init_by_tag(&wu, 2, wd, dnnl_f32, dnnl_ab);
    if (e->packed) {
        dnnl_memory_desc_init_by_tag(&wt, 2, wtd, lo, dnnl_format_tag_any);
        dnnl_memory_desc_init_by_tag(&w, 2, wd, lo, dnnl_format_tag_any);
    } else {
        dnnl_memory_desc_init_by_strides(&wt, 2, wtd, lo, wts);
        dnnl_memory_desc_init_by_tag(&w, 2, wd, lo, dnnl_ab);
    }
    dnnl_memory_desc_init_by_tag(&b, 2, bd, dnnl_f32, dnnl_ab);
    dnnl_memory_desc_init_by_strides(&dyt, 2, dytd, lo, dyts);
    dnnl_memory_desc_init_by_tag(&dwf, 2, wd, dnnl_f32, dnnl_ab);
    dnnl_matmul_desc_t md[3];
    const void *op[3] = {&md[0], &md[1], &md[2]};
    if (dnnl_matmul_desc_init(&md[0], &x, &wt, d->bias ? &b : NULL, &y) != dnnl_success ||
        dnnl_matmul_desc_init(&md[1], &dy, &w, NULL, &x) != dnnl_success ||
        dnnl_matmul_desc_init(&md[2], &dyt, &x, NULL, &dwf) != dnnl_success ||
        s_make(d, e, n, bf16, 1, op) < 0)
        goto fail;
    if (s_mem(&e->h.src, &x) < 0 || s_mem(&e->h.dst, &y) < 0 ||
        s_mem(&e->h.ddst, &dy) < 0 || s_mem(&e->h.dsrc, &x) < 0 ||
        s_mem(&e->dyt, &dyt) < 0 || s_mem(&e->h.dwuser, &dwf) < 0 ||
        (d->bias && s_mem(&e->bias, &b) < 0))
        goto fail;
    if (!e->packed) {
        if (s_mem(&e->h.wfwd, &wt) < 0 || s_mem(&e->h.wbwd, &w) < 0)
            goto fail;
        return 0;
    }
    const dnnl_memory_desc_t *wf = dnnl_primitive_desc_query_md(e->h.pd[0],
                                                                dnnl_query_weights_md, 0),
                             *wb = dnnl_primitive_desc_query_md(e->h.pd[1],
                                                                dnnl_query_weights_md, 0);
    dnnl_memory_desc_t ownf, ownb; /* wpack.h's layout, both ways */
    dnnl_memory_desc_init_by_tag(&ownf, 2, wtd, dnnl_bf16, dnnl_BA16a64b2a);
    dnnl_memory_desc_init_by_tag(&ownb, 2, wd, dnnl_bf16, dnnl_BA16a64b2a);
    e->own_fwd = !g_force_reorder && dnnl_memory_desc_equal(wf, &ownf);
    e->own_bwd = !g_force_reorder && dnnl_memory_desc_equal(wb, &ownb);
    int same;
    if (s_mem(&e->h.wuser, &wtu) < 0 || s_mem(&e->wuser_b, &wu) < 0 ||
        trn__dnnl_owned(&e->h.wfwd, wf, &e->h.wfwd_buf) < 0 ||
        trn__dnnl_owned(&e->h.wbwd, wb, &e->h.wbwd_buf) < 0 ||
        (!e->own_fwd &&
         trn__dnnl_reorder(&wtu, wf, &e->h.wr_fwd, &same, e->h.thr[0]) < 0) ||
        (!e->own_bwd && trn__dnnl_reorder(&wu, wb, &e->h.wr_bwd, &same, e->h.thr[1]) < 0))
        goto fail;
    /* the padding stays zero: trn_wpack_* write only the values */
    memset(e->h.wfwd_buf, 0, dnnl_memory_desc_get_size(wf));
    memset(e->h.wbwd_buf, 0, dnnl_memory_desc_get_size(wb));
    return 0;
fail:
    snprintf(err, TRN_ERRLEN, "oneDNN: no matmul for %d -> %d at batch %d%s", d->k, d->m,
             n, bf16 ? " in bf16" : "");
    return -1;
}

/* The weights' bf16 copy d->w16, on the primitives' thread count: on
   more threads than they use, the copy's own OpenMP region would wake a
   sleeping thread every step for a few microseconds of work. */
static void s_copy_w16(trn_dlin *d, const float *w, int thr)
{
    int old = trn__dnnl_threads_push(thr);
    trn_bf16_from_f32(d->w16, w, (long)d->m * d->k);
    trn__dnnl_threads_pop(old);
}

/* The cache's init (dnnl_impl.h): the layer's kind of entry. */
static int s_init(void *owner, trn__dnnl_entry *head, char *err)
{
    trn_dlin *d = owner;
    return (d->mm ? s_entry_init_mm : s_entry_init)(d, (s_entry *)head, head->n,
                                                    head->bf16, err);
}

/* db[j] += the n rows' dy[i][j] (bf16 values, or float), row after row in
   order (the same sums at any vector width): 16 columns at a time, which
   the compiler turns into vector adds, then the last m % 16. */
TRN_CLONES static void s_colsum_bf(float *restrict db, const uint16_t *restrict dy, int n,
                                   int m)
{
    int m16 = m / 16 * 16;
    for (int i = 0; i < n; i++) {
        const uint16_t *restrict r = dy + (size_t)i * m;
        for (int j0 = 0; j0 < m16; j0 += 16)
            for (int j = j0; j < j0 + 16; j++)
                db[j] += trn_bf2f(r[j]);
        for (int j = m16; j < m; j++)
            db[j] += trn_bf2f(r[j]);
    }
}

TRN_CLONES static void s_colsum_f(float *restrict db, const float *restrict dy, int n,
                                  int m)
{
    int m16 = m / 16 * 16;
    for (int i = 0; i < n; i++) {
        const float *restrict r = dy + (size_t)i * m;
        for (int j0 = 0; j0 < m16; j0 += 16)
            for (int j = j0; j < j0 + 16; j++)
                db[j] += r[j];
        for (int j = m16; j < m; j++)
            db[j] += r[j];
    }
}

/* db[j] = sum over the n rows of dy[i][j] (bf16 values, or float). */
static void s_bias_grad(float *db, const void *dy, int n, int m, int bf16)
{
    memset(db, 0, (size_t)m * sizeof *db);
    if (bf16)
        s_colsum_bf(db, dy, n, m);
    else
        s_colsum_f(db, dy, n, m);
}

int trn_dlin_fwd(trn_dlin *d, const void *x, const float *w, const float *b, void *y,
                 int n, int bf16, char *err)
{
    s_entry *e = trn__dnnl_cache_get(&d->cache, n, bf16, err);
    if (!e)
        return -1;
    if (e->mm && !e->packed) { /* the weights as they are, or their bf16 copy */
        if (bf16)
            s_copy_w16(d, w, e->h.thr[0]);
        dnnl_memory_set_data_handle(e->h.wfwd, bf16 ? (void *)d->w16 : (void *)w);
    } else if (e->mm && e->own_fwd)
        trn_wpack_fwd(e->h.wfwd_buf, w, d->m, d->k);
    else if (trn__dnnl_weights(e->h.wuser, e->h.wr_fwd, e->h.wfwd, w,
                               e->mm ? e->h.thr[0] : 1) < 0)
        goto fail;
    e->wfwd_ok = 1;
    dnnl_memory_set_data_handle(e->h.src, (void *)x);
    dnnl_memory_set_data_handle(e->h.dst, y);
    dnnl_exec_arg_t a[4] = {{DNNL_ARG_SRC, e->h.src},
                            {DNNL_ARG_WEIGHTS, e->h.wfwd},
                            {DNNL_ARG_DST, e->h.dst}};
    int na = 3;
    if (d->bias) {
        dnnl_memory_set_data_handle(e->bias, (void *)b);
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->bias};
    }
    if (trn__dnnl_exec(e->h.prim[0], e->h.thr[0], na, a) < 0)
        goto fail;
    return 0;
fail:
    snprintf(err, TRN_ERRLEN, "oneDNN: inner product forward failed");
    return -1;
}

int trn_dlin_bwd(trn_dlin *d, const void *x, const float *w, const void *dy, void *dx,
                 float *dw, float *db, int n, int bf16, float beta, const float *dysum,
                 char *err)
{
    s_entry *e = trn__dnnl_cache_get(&d->cache, n, bf16, err);
    if (!e)
        return -1;
    long nw = (long)d->m * d->k, ny = (long)n * d->m;
    if (bf16 && d->f32out) { /* the logits' gradient, fp32, into bf16 */
        if ((size_t)ny > d->dyh_cap) {
            if (trn_regrow64((void **)&d->dyh, (size_t)ny * sizeof *d->dyh) < 0)
                goto oom;
            d->dyh_cap = (size_t)ny;
        }
        trn_bf16_from_f32(d->dyh, dy, ny);
        dy = d->dyh;
    }
    dnnl_memory_set_data_handle(e->h.src, (void *)x);
    dnnl_memory_set_data_handle(e->h.ddst, (void *)dy);
    /* weights: dw = beta*dw + grad, db likewise */
    float *dwo = dw, *dbo = db;
    if (beta != 0) {
        size_t need = (size_t)(nw + d->m);
        if (need > d->tmp_cap) {
            if (trn_regrow64((void **)&d->tmp, need * sizeof *d->tmp) < 0)
                goto oom;
            d->tmp_cap = need;
        }
        dwo = d->tmp;
        dbo = d->tmp + nw;
    }
    dnnl_memory_set_data_handle(e->h.dwuser, dwo);
    if (e->mm) { /* dW = dy^T x, db = the column sums of dy */
        dnnl_memory_set_data_handle(e->dyt, (void *)dy);
        dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, e->dyt},
                                {DNNL_ARG_WEIGHTS, e->h.src},
                                {DNNL_ARG_DST, e->h.dwuser}};
        if (trn__dnnl_exec(e->h.prim[2], e->h.thr[2], 3, a) < 0)
            goto fail;
        if (d->bias && dysum)
            memcpy(dbo, dysum, (size_t)d->m * sizeof *dbo);
        else if (d->bias)
            s_bias_grad(dbo, dy, n, d->m, bf16);
    } else {
        if (!e->h.dwr)
            dnnl_memory_set_data_handle(e->h.dw, dwo);
        dnnl_exec_arg_t a[4] = {{DNNL_ARG_SRC, e->h.src},
                                {DNNL_ARG_DIFF_DST, e->h.ddst},
                                {DNNL_ARG_DIFF_WEIGHTS, e->h.dw}};
        int na = 3;
        if (d->bias) {
            dnnl_memory_set_data_handle(e->dbias, dbo);
            a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, e->dbias};
        }
        if (trn__dnnl_exec(e->h.prim[2], e->h.thr[2], na, a) < 0)
            goto fail;
    }
    if (e->h.dwr) {
        dnnl_exec_arg_t r[] = {{DNNL_ARG_FROM, e->h.dw}, {DNNL_ARG_TO, e->h.dwuser}};
        if (trn__dnnl_exec(e->h.dwr, 1, 2, r) < 0)
            goto fail;
    }
    if (beta != 0) {
        trn__dnnl_axpby(dw, dwo, beta, nw);
        if (d->bias)
            trn__dnnl_axpby(db, dbo, beta, d->m);
    }
    if (!dx)
        return 0;
    /* the forward's copy of w when the layouts agree (w unchanged since),
       made here when this entry is new since the forward (a thread change
       or an eviction remade it) */
    dnnl_memory_t wb = e->wshare ? e->h.wfwd : e->h.wbwd;
    if (e->mm && e->packed) { /* bf16: w into the backward's own layout */
        if (e->own_bwd)
            trn_wpack_bwd(e->h.wbwd_buf, w, d->m, d->k);
        else if (trn__dnnl_weights(e->wuser_b, e->h.wr_bwd, e->h.wbwd, w, e->h.thr[1]) <
                 0)
            goto fail;
    } else if (e->mm) { /* the forward's bf16 copy (made here for an entry new
                           since the forward), or the weights as they are */
        if (bf16 && !e->wfwd_ok)
            s_copy_w16(d, w, e->h.thr[1]);
        dnnl_memory_set_data_handle(e->h.wbwd, bf16 ? (void *)d->w16 : (void *)w);
    } else if (e->wshare && !e->wfwd_ok) {
        if (trn__dnnl_weights(e->h.wuser, e->h.wr_fwd, e->h.wfwd, w, 1) < 0)
            goto fail;
    } else if (!e->wshare &&
               trn__dnnl_weights(e->h.wuser, e->h.wr_bwd, e->h.wbwd, w, 1) < 0)
        goto fail;
    e->wfwd_ok = 1;
    dnnl_memory_set_data_handle(e->h.dsrc, dx);
    dnnl_exec_arg_t b[3] = {{e->mm ? DNNL_ARG_SRC : DNNL_ARG_DIFF_DST, e->h.ddst},
                            {DNNL_ARG_WEIGHTS, wb},
                            {e->mm ? DNNL_ARG_DST : DNNL_ARG_DIFF_SRC, e->h.dsrc}};
    if (trn__dnnl_exec(e->h.prim[1], e->h.thr[1], 3, b) < 0)
        goto fail;
    return 0;
oom:
    snprintf(err, TRN_ERRLEN, "out of memory");
    return -1;
fail:
    snprintf(err, TRN_ERRLEN, "oneDNN: inner product backward failed");
    return -1;
}

int trn__dlin_packing(trn_dlin *d, int n, int bf16, char *err)
{
    s_entry *e = trn__dnnl_cache_get(&d->cache, n, bf16, err);
    if (!e)
        return -1;
    return !e->mm || !e->packed ? 0 : e->own_fwd && e->own_bwd ? 1 : 2;
}

int trn_dlin_takes_sums(const trn_dlin *d)
{
    return d->mm;
}

void trn__dlin_force_reorder(int on)
{
    g_force_reorder = on != 0;
}

int trn_dlin_threads(trn_dlin *d, int n, int bf16, int which, char *err)
{
    return trn__dnnl_cache_threads(&d->cache, n, bf16, which, err);
}

int trn_dlin_describe(trn_dlin *d, int n, int bf16, char *buf, size_t len, char *err)
{
    return trn__dnnl_cache_describe(&d->cache, n, bf16,
                                    d->mm ? "matmul " : "inner product ", buf, len, err);
}

#else /* no oneDNN in this build: net.c keeps OpenBLAS's sgemm */

struct trn_dlin {
    int unused;
};

static const char s_none[] = "this jizhi-train was built without oneDNN";

trn_dlin *trn_dlin_new(int k, int m, int bias, int relu, int f32out, char *err)
{
    (void)k, (void)m, (void)bias, (void)relu, (void)f32out;
    snprintf(err, TRN_ERRLEN, "%s", s_none);
    return NULL;
}

void trn_dlin_destroy(trn_dlin **dp)
{
    if (dp)
        *dp = NULL;
}

int trn_dlin_fwd(trn_dlin *d, const void *x, const float *w, const float *b, void *y,
                 int n, int bf16, char *err)
{
    (void)d, (void)x, (void)w, (void)b, (void)y, (void)n, (void)bf16;
    snprintf(err, TRN_ERRLEN, "%s", s_none);
    return -1;
}

int trn__dlin_packing(trn_dlin *d, int n, int bf16, char *err)
{
    (void)d, (void)n, (void)bf16;
    snprintf(err, TRN_ERRLEN, "%s", s_none);
    return -1;
}

int trn_dlin_takes_sums(const trn_dlin *d)
{
    (void)d;
    return 0;
}

void trn__dlin_force_reorder(int on)
{
    (void)on;
}

int trn_dlin_bwd(trn_dlin *d, const void *x, const float *w, const void *dy, void *dx,
                 float *dw, float *db, int n, int bf16, float beta, const float *dysum,
                 char *err)
{
    (void)d, (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)db, (void)n,
        (void)dysum;
    (void)bf16, (void)beta;
    snprintf(err, TRN_ERRLEN, "%s", s_none);
    return -1;
}

int trn_dlin_threads(trn_dlin *d, int n, int bf16, int which, char *err)
{
    (void)d, (void)n, (void)bf16, (void)which;
    snprintf(err, TRN_ERRLEN, "%s", s_none);
    return -1;
}

int trn_dlin_threads_push(int n, int bf16)
{
    (void)n, (void)bf16;
    return 0;
}

int trn_dlin_rows_per_thread(int bf16)
{
    (void)bf16;
    return 0;
}

int trn_dlin_eval_rows(int bf16)
{
    (void)bf16;
    return 0;
}

void trn_dlin_threads_pop(int old)
{
    (void)old;
}

int trn_dlin_describe(trn_dlin *d, int n, int bf16, char *buf, size_t len, char *err)
{
    (void)d, (void)n, (void)bf16, (void)buf, (void)len;
    snprintf(err, TRN_ERRLEN, "%s", s_none);
    return -1;
}

#endif
