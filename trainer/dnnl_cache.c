/*  dnnl_cache.c - the primitive cache of a oneDNN layer (dnnl_impl.h),
    shared by the convolutions (conv_dnnl.c) and the linears
    (linear_dnnl.c): a few entries per layer keyed by (batch, precision),
    each starting with a trn__dnnl_entry (its three primitives, their
    thread counts and what both kinds hold), the least recently used one
    replaced when full, and an entry made again when --threads changed
    since it was made. Each layer kind fills its entries (init) and frees
    what it added to them (fini).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/trn.h"

#ifdef TRN_HAVE_DNNL

#include "trainer/dnnl_impl.h"

void trn__dnnl_cache_init(trn__dnnl_cache *c, void *slots, size_t size, int cap,
                          trn__dnnl_entry_init init, void (*fini)(void *entry),
                          void *owner)
{
    memset(slots, 0, size * (size_t)cap);
    *c = (trn__dnnl_cache){.slots = slots,
                           .size = size,
                           .cap = cap,
                           .init = init,
                           .fini = fini,
                           .owner = owner};
}

static trn__dnnl_entry *s_slot(const trn__dnnl_cache *c, int i)
{
    return (trn__dnnl_entry *)((char *)c->slots + (size_t)i * c->size);
}

/* Destroys what entry e holds (the kind's part first) and zeroes it. */
static void s_free(trn__dnnl_cache *c, trn__dnnl_entry *e)
{
    if (c->fini)
        c->fini(e);
    for (int i = 0; i < 3; i++) {
        if (e->prim[i])
            dnnl_primitive_destroy(e->prim[i]);
        if (e->pd[i])
            dnnl_primitive_desc_destroy(e->pd[i]);
    }
    dnnl_primitive_t pr[] = {e->wr_fwd, e->wr_bwd, e->dwr};
    for (size_t i = 0; i < sizeof pr / sizeof pr[0]; i++)
        if (pr[i])
            dnnl_primitive_destroy(pr[i]);
    dnnl_memory_t m[] = {e->src,  e->dst,  e->ddst, e->dsrc,  e->wuser,
                         e->wfwd, e->wbwd, e->dw,   e->dwuser};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (m[i])
            dnnl_memory_destroy(m[i]);
    free(e->wfwd_buf);
    free(e->wbwd_buf);
    free(e->dw_buf);
    memset(e, 0, c->size);
}

void trn__dnnl_cache_fini(trn__dnnl_cache *c)
{
    for (int i = 0; i < c->ne; i++)
        s_free(c, s_slot(c, i));
    c->ne = 0;
}

void *trn__dnnl_cache_get(trn__dnnl_cache *c, int n, int bf16, char *err)
{
    if (n < 1) { /* oneDNN would take it (a descriptor's error unchecked) */
        snprintf(err, TRN_ERRLEN, "oneDNN: a batch of %d rows (at least 1)", n);
        return NULL;
    }
    c->clock++;
    int slot = -1, nthr = trn__dnnl_threads();
    for (int i = 0; i < c->ne && slot < 0; i++) {
        trn__dnnl_entry *e = s_slot(c, i);
        if (e->n == n && e->bf16 == bf16) {
            if (e->nthr == nthr) {
                e->used = c->clock;
                return e;
            }
            s_free(c, e); /* made under another --threads: made again here */
            slot = i;
        }
    }
    if (slot < 0 && (slot = c->ne) == c->cap) { /* full: the least recently used */
        slot = 0;
        for (int i = 1; i < c->cap; i++)
            if (s_slot(c, i)->used < s_slot(c, slot)->used)
                slot = i;
        s_free(c, s_slot(c, slot));
    } else if (slot == c->ne) {
        c->ne++;
    }
    trn__dnnl_entry *e = s_slot(c, slot);
    e->n = n, e->bf16 = bf16, e->nthr = nthr;
    if (c->init(c->owner, e, err) < 0) { /* the last entry fills the hole */
        s_free(c, e);
        trn__dnnl_entry *last = s_slot(c, c->ne - 1);
        if (last != e) {
            memcpy(e, last, c->size);
            memset(last, 0, c->size);
        }
        c->ne--;
        return NULL;
    }
    e->used = c->clock;
    return e;
}

int trn__dnnl_cache_threads(trn__dnnl_cache *c, int n, int bf16, int which, char *err)
{
    if (which < 0 || which > 2) {
        snprintf(err, TRN_ERRLEN,
                 "oneDNN: no primitive %d (0 fwd, 1 bwd data, 2 bwd weights)", which);
        return -1;
    }
    trn__dnnl_entry *e = trn__dnnl_cache_get(c, n, bf16, err);
    return e ? e->thr[which] : -1;
}

int trn__dnnl_cache_describe(trn__dnnl_cache *c, int n, int bf16, const char *kind,
                             char *buf, size_t len, char *err)
{
    trn__dnnl_entry *e = trn__dnnl_cache_get(c, n, bf16, err);
    if (!e)
        return -1;
    snprintf(buf, len, "%sfwd %s, bwd-data %s, bwd-weights %s", kind, e->impl[0],
             e->impl[1], e->impl[2]);
    return 0;
}

#endif
