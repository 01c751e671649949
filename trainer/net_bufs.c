/*  net_bufs.c - the network's pass buffers: each op's activations (x, and
    their bf16 copies xh in half mode) and gradients (g, gh), and the CNN's
    im2col tile, grown to the largest batch a pass asked for and kept.
    A training pass reserves both; an evaluation's forward activations only
    (trn_net_eval), so its chunks (trn_net_eval_chunk) grow no gradient
    buffers. Part of net.c's object (net_impl.h).
*/
#include <stdint.h>
#include <stdlib.h>

#include "trainer/net_impl.h"

/* The bf16 buffers of half mode for nb samples: activations (xh), and
   with grads their gradients (gh) too. */
static int s_reserve_half(trn_net *n, int nb, int grads)
{
    if (!n->half)
        return 0;
    for (int i = 0; i < n->nbufs; i++) {
        trn__buf *b = &n->bufs[i];
        if (!b->hs)
            continue;
        if (nb > n->hcap) {
            uint16_t *x = realloc(b->xh, (size_t)nb * b->feat * sizeof *x);
            if (!x)
                return -1;
            b->xh = x;
        }
        if (grads && nb > n->ghcap) {
            uint16_t *g = realloc(b->gh, (size_t)nb * b->feat * sizeof *g);
            if (!g)
                return -1;
            b->gh = g;
        }
    }
    n->hcap = nb > n->hcap ? nb : n->hcap;
    if (grads)
        n->ghcap = nb > n->ghcap ? nb : n->ghcap;
    return 0;
}

int trn__net_reserve(trn_net *n, int nb, int grads)
{
    if (s_reserve_half(n, nb, grads) < 0)
        return -1;
    if (nb <= n->cap && (!grads || nb <= n->gcap))
        return 0;
    for (int i = 0; i < n->nbufs; i++) {
        trn__buf *b = &n->bufs[i];
        if (nb > n->cap) {
            float *x = realloc(b->x, (size_t)nb * b->feat * sizeof(float));
            if (!x)
                return -1;
            b->x = x;
        }
        if (grads && nb > n->gcap) {
            float *g = realloc(b->g, (size_t)nb * b->feat * sizeof(float));
            if (!g)
                return -1;
            b->g = g;
        }
    }
    if (n->cols_per_sample && nb > n->cap) { /* a tile of images (trn.h, TRN_CONV_TILE) */
        long cps = n->cols_per_sample, tile = TRN_CONV_TILE / (long)sizeof(float);
        long ncols = (long)nb * cps > tile ? (cps > tile ? cps : tile) : (long)nb * cps;
        float *c = realloc(n->cols, (size_t)ncols * sizeof(float));
        if (!c)
            return -1;
        n->cols = c;
    }
    n->cap = nb > n->cap ? nb : n->cap;
    if (grads)
        n->gcap = nb > n->gcap ? nb : n->gcap;
    return 0;
}

long trn_net_buffer_bytes(const trn_net *n)
{
    long b = 0;
    for (int i = 0; i < n->nbufs; i++) {
        long f = n->bufs[i].feat;
        b += f * (long)sizeof(float) * ((long)n->cap + n->gcap);
        if (n->bufs[i].hs && (n->bufs[i].xh || n->bufs[i].gh))
            b += f * (long)sizeof(uint16_t) * ((long)n->hcap + n->ghcap);
    }
    return b;
}
