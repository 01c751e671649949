/*  train_batch.c - the trainer's batches on the host: the epoch's order,
    the batch buffers and the gathers out of the training set (gather.h),
    in fp32 or, for a bf16 model on oneDNN that reads only its bf16 input
    (one rank, one chunk: train.c), in bf16.

    A training set read from IDX files keeps its pixel bytes (trn_dataset
    .code, with x == lut[code] exactly) where the run may take a vector
    lookup of this CPU (trn_gather_code_simd; data.c decides); where a
    gather has its lookup it takes the values from those, a quarter of
    the fp32 bytes (MLP, batch 1024, one thread: fp32 +2-5% samples/s;
    bf16 the same speed as the copy below, in half its memory and with no
    copy to make). The rest of this comment is the path of a set without
    bytes (synthetic ones; no lookup the run was to take: a live change to
    bf16 the start did not ask for, a CUDA run with its data on the
    device; or their memory refused, silently) or of a gather without its
    lookup.

    The bf16 gather reads a bf16 copy of the training set (t->xh), made on
    the first bf16 batch (a run that starts in fp32 and turns bf16 later,
    by a schedule or a live change, makes it then) and kept while bf16 is
    ahead: an fp32 batch with no bf16 epoch left in the schedule frees it
    (a later live change to bf16 makes it again). The rows it copies are
    the values the fp32 rows round to (trn_bf16_from_f32, to nearest even,
    as trn_gather_rows_bf16 rounds them), in half the bytes. The batch's
    rows are random rows of the whole set, so the gather is memory bound:
    MLP 784-256-256-10, bf16, batch 1024, one thread, perf: 13.6% of the
    cycles in the fp32 gather. The copy is refused (and the fp32 rows
    rounded as they are gathered, the same values; --verbose says it with
    the sizes) when it would take more than trn__xh_limit(); Fashion-MNIST's
    is 94 MB.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/align.h"
#include "trainer/bf16.h"
#include "trainer/gather.h"
#include "trainer/memlimit.h"
#include "trainer/train_impl.h"

/* The largest bf16 copy of the training set made (bytes). */
#define S_XH_MAX_BYTES (1L << 30)

void trn__order(trn_trainer *t)
{
    if (t->perm_epoch != t->epoch) {
        trn_rng r;
        trn_rng_seed(&r, (uint64_t)t->cfg.seed * 0x9e3779b97f4a7c15ULL +
                             (uint64_t)t->epoch + 1);
        trn_rng_perm(&r, t->perm, t->train->n);
        t->perm_epoch = t->epoch;
        t->dev_order_epoch = -1;
    }
}

/* Grows the batch buffers (xb, yb) to nb examples. 0 or -1. */
static int s_batch_bufs(trn_trainer *t, int nb)
{
    const trn_dataset *d = t->train;
    if (nb > t->xb_cap) {
        if (trn_regrow64((void **)&t->xb, (size_t)nb * d->dim * sizeof(float)) < 0)
            return -1;
        uint8_t *y = realloc(t->yb, (size_t)nb);
        if (!y)
            return -1;
        t->yb = y;
        t->xb_cap = nb;
    }
    return 0;
}

long trn__xh_limit(void)
{
    return trn_memlimit_pick(trn_memlimit_phys(), trn_memlimit_cgroup_self(),
                             trn_memlimit_available(), 16, S_XH_MAX_BYTES);
}

/* 1 when the schedule has a bf16 epoch at t->epoch or later (without a
   schedule: the config's precision is bf16). */
static int s_bf16_ahead(const trn_trainer *t)
{
    const trn_prec_schedule *s = &t->psched;
    if (!s->n)
        return !strcmp(t->cfg.precision, "bf16");
    long end = 0;
    for (int i = 0; i < s->n; i++) {
        end += s->epochs[i];
        if (s->prec[i] == TRN_BF16 && (i == s->n - 1 || end > t->epoch))
            return 1;
    }
    return 0;
}

/* The one transition function of t->xh_state: UNMADE -> READY (the copy
   made) or REFUSED (over t->xh_limit or trn__xh_limit(), or out of memory:
   the fp32 rows are rounded as they are gathered instead, the same
   values; --verbose says so with the sizes, once); READY -> UNMADE (freed:
   no bf16 ahead). REFUSED stays. */
static void s_xh_to(trn_trainer *t, trn__xh_state to)
{
    const trn_dataset *d = t->train;
    if (t->xh_state == TRN__XH_READY && to == TRN__XH_UNMADE) {
        free(t->xh);
        t->xh = NULL;
        t->xh_state = TRN__XH_UNMADE;
        return;
    }
    if (t->xh_state != TRN__XH_UNMADE || to != TRN__XH_READY)
        return;
    long vals = (long)d->n * d->dim, bytes = vals * (long)sizeof *t->xh;
    long lim = t->xh_limit > 0 ? t->xh_limit : trn__xh_limit();
    t->xh_state = TRN__XH_REFUSED;
    const char *why = bytes > lim ? "over its limit" : NULL;
    if (!why && !(t->xh = malloc((size_t)bytes)))
        why = "out of memory";
    if (why) {
        if (t->cfg.verbose && !t->cfg.quiet && t->rank == 0)
            fprintf(stderr,
                    "jizhi-train: bf16 batches: no bf16 copy of the training set (%.1f "
                    "MB, %s: %.1f MB, 1/16 of the least of memory, its cgroup's limit "
                    "and MemAvailable, at most 1 GiB): the fp32 rows are rounded as "
                    "they are gathered, the same values, slower\n",
                    bytes / 1e6, why, lim / 1e6);
        return;
    }
    trn_bf16_from_f32(t->xh, d->x, vals);
    t->xh_state = TRN__XH_READY;
}

int trn__gather_at(trn_trainer *t, int off, int nb, float *dst)
{
    const trn_dataset *d = t->train;
    if (s_batch_bufs(t, nb) < 0)
        return -1;
    trn__order(t);
    if (t->xh_state == TRN__XH_READY && t->prec != TRN_BF16 && !s_bf16_ahead(t))
        s_xh_to(t, TRN__XH_UNMADE);
    if (d->code && trn_gather_code_simd(0))
        trn_gather_rows_code(d->code, d->lut, d->y, d->dim, t->perm, (int)t->pos + off,
                             nb, dst ? dst : t->xb, t->yb);
    else
        trn_gather_rows(d->x, d->y, d->dim, t->perm, (int)t->pos + off, nb,
                        dst ? dst : t->xb, t->yb);
    return 0;
}

int trn__gather_bf16(trn_trainer *t, int nb, uint16_t *dst)
{
    const trn_dataset *d = t->train;
    if (s_batch_bufs(t, nb) < 0) /* the labels' buffer */
        return -1;
    trn__order(t);
    if (d->code && trn_gather_code_simd(1)) { /* the bytes are smaller than any copy */
        uint16_t lut16[256];
        for (int v = 0; v < 256; v++)
            lut16[v] = trn_f2bf(d->lut[v]);
        trn_gather_rows_code_h(d->code, lut16, d->y, d->dim, t->perm, (int)t->pos, nb,
                               dst, t->yb);
        return 0;
    }
    if (t->xh_state == TRN__XH_UNMADE)
        s_xh_to(t, TRN__XH_READY);
    if (t->xh_state == TRN__XH_READY)
        trn_gather_rows_h(t->xh, d->y, d->dim, t->perm, (int)t->pos, nb, dst, t->yb);
    else
        trn_gather_rows_bf16(d->x, d->y, d->dim, t->perm, (int)t->pos, nb, dst, t->yb);
    return 0;
}
