/*  cudnn_host.c - cuDNN's version check and the convolution algorithm
    cache of the CUDA CNN, host code (cudnn_host.h).
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
                        const int algo[TRN_ALGO_KINDS], size_t ws)
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
        e->algo[k] = algo[k];
    e->ws = ws;
    e->used = ++c->clock;
}
