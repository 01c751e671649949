/*  net_bufs.c - the network's pass buffers: each op's activations (x, and
    their bf16 copies xh in half mode) and gradients (g, gh), and the CNN's
    im2col tile, grown to the largest batch a pass asked for and kept, on
    64-byte boundaries (align.h); a growth does not keep their contents.
    A training pass reserves both; an evaluation's forward activations only
    (trn_net_eval), so its chunks (trn_net_eval_chunk) grow no gradient
    buffers. Part of net.c's object (net_impl.h).
*/
#include <stdint.h>
#include <stdlib.h>

#include "trainer/align.h"
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
        if (nb > n->hcap &&
            trn_regrow64((void **)&b->xh, (size_t)nb * b->feat * sizeof *b->xh) < 0)
            return -1;
        if (grads && nb > n->ghcap &&
            trn_regrow64((void **)&b->gh, (size_t)nb * b->feat * sizeof *b->gh) < 0)
            return -1;
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
        if (nb > n->cap &&
            trn_regrow64((void **)&b->x, (size_t)nb * b->feat * sizeof(float)) < 0)
            return -1;
        if (grads && nb > n->gcap &&
            trn_regrow64((void **)&b->g, (size_t)nb * b->feat * sizeof(float)) < 0)
            return -1;
    }
    if (n->cols_per_sample && nb > n->cap) { /* a tile of images (trn.h, TRN_CONV_TILE) */
        long cps = n->cols_per_sample, tile = TRN_CONV_TILE / (long)sizeof(float);
        long ncols = (long)nb * cps > tile ? (cps > tile ? cps : tile) : (long)nb * cps;
        if (trn_regrow64((void **)&n->cols, (size_t)ncols * sizeof(float)) < 0)
            return -1;
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
