/*  cudnn_host.c - cuDNN's version check, the convolution algorithm cache,
    the types and sizes per precision and the refused options of the CUDA
    CNN, host code (cudnn_host.h).
*/
#include "trainer/cudnn_host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/trn.h"

int trn_cudnn_major(long version)
{
    return (int)(version >= 90000 ? version / 10000 : version / 1000);
}

int trn_cudnn_minor(long version)
{
    return (int)(version >= 90000 ? version / 100 % 100 : version / 100 % 10);
}

const char *trn_cudnn_soname(long hdr, char *buf, size_t len)
{
    snprintf(buf, len, "libcudnn.so.%d", trn_cudnn_major(hdr));
    return buf;
}

const char *trn_cudnn_version_text(long v, char *buf, size_t len)
{
    if (v >= 90000)
        snprintf(buf, len, "%ld.%ld.%ld", v / 10000, v / 100 % 100, v % 100);
    else
        snprintf(buf, len, "%ld.%ld.%ld", v / 1000, v / 100 % 10, v % 100);
    return buf;
}

const char *trn_cuda_version_text(long v, char *buf, size_t len)
{
    snprintf(buf, len, "%ld.%ld", v / 1000, v % 1000 / 10);
    return buf;
}

int trn_cudnn_version_check(long lib, long hdr, long lib_cudart, long rt, char *err,
                            char *warn)
{
    char a[24], b[24];
    warn[0] = '\0';
    if (trn_cudnn_major(lib) != trn_cudnn_major(hdr)) {
        snprintf(
            err, TRN_ERRLEN,
            "cuDNN version mismatch: the library opened is %s, this jizhi-train-cuda "
            "was built with the cuDNN %s headers (major %d needed; put that cuDNN's "
            "libcudnn.so.%d first on LD_LIBRARY_PATH)",
            trn_cudnn_version_text(lib, a, sizeof a),
            trn_cudnn_version_text(hdr, b, sizeof b), trn_cudnn_major(hdr),
            trn_cudnn_major(hdr));
        return -1;
    }
    if (rt > 0 && lib_cudart > 0 && lib_cudart / 1000 != rt / 1000) {
        snprintf(err, TRN_ERRLEN,
                 "cuDNN %s was built for CUDA %s, this jizhi-train-cuda runs CUDA %s "
                 "(install the cuDNN for CUDA %ld)",
                 trn_cudnn_version_text(lib, a, sizeof a),
                 trn_cuda_version_text(lib_cudart, b, sizeof b),
                 trn_cuda_version_text(rt, (char[24]){0}, 24), rt / 1000);
        return -1;
    }
    if (trn_cudnn_minor(lib) < trn_cudnn_minor(hdr))
        snprintf(warn, TRN_ERRLEN,
                 "jizhi-train: warning: the cuDNN opened (%s) is older than the cuDNN "
                 "%s headers this jizhi-train-cuda was built with; it runs, but put "
                 "cuDNN %d.%d or newer first on LD_LIBRARY_PATH if it misbehaves",
                 trn_cudnn_version_text(lib, a, sizeof a),
                 trn_cudnn_version_text(hdr, b, sizeof b), trn_cudnn_major(hdr),
                 trn_cudnn_minor(hdr));
    return 0;
}

int trn_algo_cache_init(trn_algo_cache *c, int cap)
{
    *c = (trn_algo_cache){0};
    c->e = calloc((size_t)(cap > 0 ? cap : 1), sizeof *c->e);
    if (!c->e)
        return -1;
    c->cap = cap > 0 ? cap : 1;
    return 0;
}

void trn_algo_cache_fini(trn_algo_cache *c)
{
    free(c->e);
    free(c->model);
    *c = (trn_algo_cache){0};
}

int trn_algo_cache_attach(trn_algo_cache *c, int cap, const char *model)
{
    if (c->e && c->model && c->cap == (cap > 0 ? cap : 1) && !strcmp(c->model, model))
        return 0;
    trn_algo_cache_fini(c);
    char *key = strdup(model);
    if (!key || trn_algo_cache_init(c, cap) < 0) {
        free(key);
        return -1;
    }
    c->model = key;
    return 0;
}

static trn_algo_entry *s_find(trn_algo_cache *c, int layer, int nb)
{
    for (int i = 0; i < c->n; i++)
        if (c->e[i].layer == layer && c->e[i].nb == nb)
            return &c->e[i];
    return NULL;
}

const trn_algo_entry *trn_algo_cache_get(trn_algo_cache *c, int layer, int nb)
{
    trn_algo_entry *e = s_find(c, layer, nb);
    if (!e) {
        c->misses++;
        return NULL;
    }
    c->hits++;
    e->used = ++c->clock;
    return e;
}

void trn_algo_cache_put(trn_algo_cache *c, int layer, int nb,
                        const int algo[TRN_ALGO_KINDS], const int math[TRN_ALGO_KINDS],
                        size_t ws)
{
    trn_algo_entry *e = s_find(c, layer, nb);
    if (!e && c->n < c->cap)
        e = &c->e[c->n++];
    if (!e) { /* full: the least recently used goes */
        e = &c->e[0];
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < e->used)
                e = &c->e[i];
        c->evictions++;
    }
    e->layer = layer;
    e->nb = nb;
    for (int k = 0; k < TRN_ALGO_KINDS; k++)
        e->algo[k] = algo[k], e->math[k] = math[k];
    e->ws = ws;
    e->used = ++c->clock;
}

int trn_cudnn_algo_pick(const trn_cudnn_types *t, const trn_algo_perf *r, int n,
                        size_t ws_max)
{
    for (int j = 0; j < n; j++) {
        int tensor = r[j].math == TRN_CUDNN_TENSOR_OP_MATH ||
                     r[j].math == TRN_CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
        if (r[j].status == TRN_CUDNN_STATUS_SUCCESS &&
            r[j].determinism == TRN_CUDNN_DETERMINISTIC && r[j].memory <= ws_max &&
            (t->tensor_ops || !tensor))
            return j;
    }
    return -1;
}

int trn_cudnn_algo_math(const trn_cudnn_types *t, int result_math)
{
    if (!t->tensor_ops && result_math == TRN_CUDNN_DEFAULT_MATH)
        return TRN_CUDNN_FMA_MATH;
    return result_math;
}

void trn_cudnn_algo_list(FILE *out, const trn_algo_perf *r, int n)
{
    for (int i = 0; i < n; i++)
        fprintf(out, "  algorithm %d: status %d, %s, math %d, workspace %zu bytes\n",
                r[i].algo, r[i].status,
                r[i].determinism == TRN_CUDNN_DETERMINISTIC ? "deterministic"
                                                            : "not deterministic",
                r[i].math, r[i].memory);
}

void trn_cudnn_algo_none(int layer, int kind, int p, int nb, int n, char *err)
{
    static const char *const dir[TRN_ALGO_KINDS] = {"forward", "backward data",
                                                    "backward filter"};
    snprintf(err, TRN_ERRLEN,
             "conv op %d at --precision %s, batch %d: none of cuDNN's %d %s algorithms "
             "is deterministic%s and fits the workspace; try another --batch-size or "
             "--precision",
             layer, trn_precision_name((trn_precision)p), nb, n,
             dir[kind >= 0 && kind < TRN_ALGO_KINDS ? kind : 0],
             p == TRN_FP32 ? " without tensor cores (no TF32)" : "");
}

int trn_cudnn_types_for(int p, trn_cudnn_types *t, char *err)
{
    memset(t, 0, sizeof *t);
    t->compute = TRN_CUDNN_DATA_FLOAT;
    t->bn = TRN_CUDNN_DATA_FLOAT;
    switch (p) {
    case TRN_FP32:
        t->act = TRN_CUDNN_DATA_FLOAT;
        t->esize = 4;
        return 0;
    case TRN_BF16:
    case TRN_FP16:
        t->act = p == TRN_BF16 ? TRN_CUDNN_DATA_BFLOAT16 : TRN_CUDNN_DATA_HALF;
        t->tensor_ops = 1;
        t->esize = 2;
        t->lp_copy = 1;
        t->own_bn = p == TRN_BF16;
        return 0;
    }
    snprintf(err, TRN_ERRLEN, "the CUDA CNN has no precision %d (fp32, bf16, fp16)", p);
    return -1;
}

int trn_cudnn_param_lp(const trn_cudnn_types *t, int kind)
{
    return t->lp_copy && kind == TRN_PW;
}

void trn_cudnn_sizes_for(const trn_cudnn_types *t, int nb, int nbufs, const long *feat,
                         int np, const long *pn, const int *is_conv, const int *lp,
                         trn_cudnn_sizes *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < nbufs; i++)
        out->act += 2 * trn_cudnn_buf_bytes(t, nb, feat[i]);
    long gmax = 0;
    for (int i = 0; i < np; i++) {
        out->master += 3 * (size_t)pn[i] * sizeof(float);
        if (lp[i])
            out->lp += (size_t)pn[i] * (size_t)t->esize;
        if (t->lp_copy && is_conv[i] && pn[i] > gmax)
            gmax = pn[i];
    }
    out->gconv = (size_t)gmax * (size_t)t->esize;
    if (t->lp_copy && nbufs > 0)
        out->stage = (size_t)nb * (size_t)feat[0] * sizeof(float);
    out->ones = (size_t)nb * (size_t)t->esize;
    out->labels = (size_t)nb;
}

size_t trn_cudnn_buf_bytes(const trn_cudnn_types *t, int nb, long feat)
{
    return (size_t)nb * (size_t)feat * (size_t)t->esize;
}

size_t trn_cudnn_sizes_batch(const trn_cudnn_sizes *s)
{
    return s->act + s->gconv + s->stage + s->ones + s->labels;
}

int trn_cudnn_bn_type_check(int p, int derived, char *err)
{
    if (derived == TRN_CUDNN_DATA_FLOAT)
        return 0;
    snprintf(err, TRN_ERRLEN,
             "--precision %s: cuDNN derives BatchNorm parameters of type %d (not FLOAT) "
             "for this input; the CUDA CNN keeps them in fp32: use --precision fp32, or "
             "--backend cpu",
             trn_precision_name((trn_precision)p), derived);
    return -1;
}

const char *trn_cudnn_algo_key(const char *arch, int p, char *buf, size_t len)
{
    snprintf(buf, len, "%s@%s", arch, trn_precision_name((trn_precision)p));
    return buf;
}

int trn_cudnn_refuse(const struct trn_config *c, char *err)
{
    if (strcmp(c->backend, "cuda"))
        return 0;
    if (c->per_layer_scale) { /* the MLP and the CNN on CUDA alike */
        snprintf(err, TRN_ERRLEN,
                 "--per-layer-scale: the CUDA backend (--backend cuda) keeps one loss "
                 "scale for the whole model; drop the flag");
        return -1;
    }
    if (c->micro_batch > 0 && c->micro_batch < c->batch_size) {
        /* the backends' steps take the batch whole: the chunks would be
           ignored (the CNN's BatchNorm would see the whole batch) */
        snprintf(err, TRN_ERRLEN,
                 "--micro-batch %d: the CUDA backend (--backend cuda) runs each batch "
                 "whole (no gradient accumulation); give --micro-batch 0, or use "
                 "--backend cpu",
                 c->micro_batch);
        return -1;
    }
    if (strcmp(c->model, "cnn"))
        return 0;
    int opt = trn_optim_from_name(c->optimizer);
    if (opt != TRN_SGD && opt != TRN_LARS) {
        snprintf(err, TRN_ERRLEN,
                 "--optimizer %s: the CUDA CNN (--backend cuda --model cnn) supports "
                 "sgd and lars",
                 c->optimizer);
        return -1;
    }
    if (!strcmp(c->cuda_graphs, "on")) {
        snprintf(err, TRN_ERRLEN,
                 "--cuda-graphs on: the CUDA CNN (--backend cuda --model cnn) runs "
                 "without CUDA graphs; use --cuda-graphs auto or off");
        return -1;
    }
    return 0;
}
