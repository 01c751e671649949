/*  train.c - the training loop of jizhi-train.

    One step: gather the next global batch (the epoch's order is a
    permutation drawn from (seed, epoch), so a resumed run sees the same
    order), run forward/backward over micro-batches accumulating gradients
    of loss * loss_scale, check for inf/NaN (skip the step and halve the
    scale), unscale, [all-reduce between ranks goes here], then the
    optimiser. The gradient-noise-scale inputs come almost for free: the
    mean |g|^2 of the full-size micro-batches (B_small; each chunk's
    gradient is the accumulators' growth over it) and |G|^2 after the whole
    batch (B_big); on report steps without micro-batching the batch is split
    in two halves.

    With several ranks (trn_trainer_set_comm) each rank runs its shard of
    the global batch (a device backend with step_dist runs it and sums the
    gradients itself: dist_dev.h), the gradients go through the fusion
    buckets of dist.c
    (all-reduced, in true units, during or after backward) and the loss
    scaler sees the summed gradients, so every rank takes the same decision.
    B_small is then a rank's shard (|G|^2 averaged over ranks) and B_big the
    global batch. The run loop, evaluation and reports are in train_run.c.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainer/gns.h"
#include "trainer/train_impl.h"
#include "common/util.h"

int trn__auto_fp16(const trn_trainer *t)
{
    int fp16 = t->psched.n ? 0 : trn_precision_from_name(t->cfg.precision) == TRN_FP16;
    for (int i = 0; i < t->psched.n; i++)
        fp16 |= t->psched.prec[i] == TRN_FP16;
    return fp16;
}

/* The scalers' kind from cfg: dynamic or not, and the initial scale. */
static void s_scaler_kind(const trn_trainer *t, int *dynamic, double *init)
{
    const char *ls = t->cfg.loss_scale;
    if (!strcmp(ls, "auto")) {
        *dynamic = trn__auto_fp16(t);
        *init = *dynamic ? t->cfg.init_loss_scale : 1.0;
    } else if (!strcmp(ls, "dynamic")) {
        *dynamic = 1;
        *init = t->cfg.init_loss_scale;
    } else if (!strcmp(ls, "none")) {
        *dynamic = 0;
        *init = 1.0;
    } else {
        *dynamic = 0;
        *init = strtod(ls, NULL);
    }
}

void trn__setup_scalers(trn_trainer *t)
{
    int dynamic;
    double init;
    s_scaler_kind(t, &dynamic, &init);
    trn_scaler_init(&t->scaler, init, dynamic, t->cfg.scale_window);
    for (int l = 0; l < t->nlayers; l++) {
        trn_scaler_init(&t->lscalers[l], init, dynamic, t->cfg.scale_window);
        t->lscale[l] = init;
    }
}

void trn__scalers_follow_config(trn_trainer *t)
{
    int dynamic;
    double init;
    s_scaler_kind(t, &dynamic, &init);
    t->scaler.dynamic = dynamic;
    t->scaler.window = t->cfg.scale_window;
    for (int l = 0; l < t->nlayers; l++) {
        t->lscalers[l].dynamic = dynamic;
        t->lscalers[l].window = t->cfg.scale_window;
    }
}

void trn__apply_config(trn_trainer *t)
{
    const trn_config *c = &t->cfg;
    long ot = t->opt.t;
    trn_optim_init(&t->opt, c);
    t->opt.t = ot;
    t->psched.n = 0;
    if (c->precision_schedule[0]) {
        char err[TRN_ERRLEN];
        if (trn_prec_schedule_parse(&t->psched, c->precision_schedule, err) < 0)
            t->psched.n = 0;
    }
}

trn_trainer *trn_trainer_new(const trn_config *cfg, const trn_dataset *train,
                             const trn_dataset *val, const trn_dataset *test, char *err)
{
    if (trn_config_validate(cfg, err) < 0)
        return NULL;
    if (!train || train->n < 1) {
        snprintf(err, TRN_ERRLEN, "no training data");
        return NULL;
    }
    trn_trainer *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    t->cfg = *cfg;
    t->train = train;
    t->val = val;
    t->test = test;
    t->perm_epoch = -1;
    t->dev_order_epoch = -1;
    t->last_eval_step = -1;
    t->nranks = 1;
    t->net = trn_net_new(cfg, train->c, train->h, train->w, train->classes, err);
    if (!t->net)
        goto fail;
    t->nlayers = trn_net_nlayers(t->net);
    t->lscalers = calloc((size_t)t->nlayers, sizeof *t->lscalers);
    t->lscale = calloc((size_t)t->nlayers, sizeof *t->lscale);
    t->bad = calloc((size_t)(t->nlayers > 0 ? t->nlayers : 1), sizeof *t->bad);
    t->unscale = calloc((size_t)trn_net_nparams(t->net), sizeof *t->unscale);
    t->perm = malloc((size_t)train->n * sizeof(int));
    if (!t->lscalers || !t->lscale || !t->bad || !t->unscale || !t->perm) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        goto fail;
    }
    trn__apply_config(t);
    t->prec = t->psched.n ? trn_prec_schedule_at(&t->psched, 0)
                          : trn_precision_from_name(cfg->precision);
    trn_rng_seed(&t->rng, (uint64_t)cfg->seed);
    trn_net_init(t->net, &t->rng);
    trn_net_set_precision(t->net, t->prec);
    t->said_prec = (int)t->prec;
    trn__setup_scalers(t);
    t->t_since = util_now();
    return t;
fail:
    trn_trainer_destroy(&t);
    return NULL;
}

void trn_trainer_destroy(trn_trainer **tp)
{
    if (!tp || !*tp)
        return;
    trn_trainer *t = *tp;
    if (t->backend && t->backend_attached && t->backend->detach)
        t->backend->detach(t->backend->self);
    trn_net_destroy(&t->net);
    free(t->lscalers);
    free(t->lscale);
    free(t->bad);
    free(t->perm);
    free(t->xb);
    free(t->yb);
    free(t->xh);
    free(t->unscale);
    free(t->gns_prev);
    trn_dist_destroy(&t->dist);
    free(t);
    *tp = NULL;
}

void trn_trainer_set_io(trn_trainer *t, const trn_io *io)
{
    if (io)
        t->io = *io;
    else
        memset(&t->io, 0, sizeof t->io);
}

void trn_trainer_defer_test(trn_trainer *t, trn_dataset *test)
{
    t->test_deferred = test;
}

void trn_trainer_set_backend(trn_trainer *t, const trn_backend *b)
{
    t->backend = b;
    t->backend_attached = 0;
}

long trn_trainer_step_count(const trn_trainer *t)
{
    return t->step;
}

double trn_trainer_last_loss(const trn_trainer *t)
{
    return t->last_loss;
}

const trn_scaler *trn_trainer_scaler(const trn_trainer *t)
{
    return &t->scaler;
}

trn_net *trn_trainer_net(trn_trainer *t)
{
    return t->net;
}

const trn_config *trn_trainer_config(const trn_trainer *t)
{
    return &t->cfg;
}

int trn__next_batch_size(const trn_trainer *t)
{
    long left = t->train->n - t->pos;
    return (int)(left < t->cfg.batch_size ? left : t->cfg.batch_size);
}

double trn_trainer_lr(const trn_trainer *t)
{
    const trn_config *c = &t->cfg;
    double n = t->train->n;
    double progress = t->epoch + (t->pos + trn__next_batch_size(t)) / n;
    return c->lr * trn_lr_scale_rule(c->lr_scaling, c->base_batch, c->batch_size) *
           trn_lr_factor(c->schedule, progress, c->warmup_epochs, c->epochs,
                         c->poly_power);
}

/* The scale each param's gradients carry in this step (its layer's, or the
   global one), taken before the step's decision can change it: 1/scale
   into t->unscale, which unscaling and the |G|^2 measures then use. */
static void s_step_scales(trn_trainer *t)
{
    for (int i = 0; i < trn_net_nparams(t->net); i++) {
        trn_param *p = trn_net_param(t->net, i);
        t->unscale[i] =
            1.0 / (t->cfg.per_layer_scale ? t->lscale[p->layer] : t->scaler.scale);
    }
}

/* |G|^2 of the accumulated gradients in true units: param i's gradients
   carry 1/t->unscale[i] (s_step_scales) times `mult`. */
static double s_sqnorm(trn_trainer *t, double mult)
{
    trn_net *n = t->net;
    double s = 0;
    for (int i = 0; i < trn_net_nparams(n); i++) {
        trn_param *p = trn_net_param(n, i);
        double sc = mult / t->unscale[i];
        double acc = 0;
        for (long j = 0; j < p->n; j++)
            acc += (double)p->g[j] * p->g[j];
        s += acc / (sc * sc);
    }
    return s;
}

/* |g|^2 of the chunk just accumulated, in true units: the accumulators
   minus their copy from before the chunk (mult as s_sqnorm), then the copy
   is brought up to date. -1 without memory for the copy. */
static double s_chunk_sqnorm(trn_trainer *t, double mult, int first)
{
    trn_net *n = t->net;
    long total = 0;
    for (int i = 0; i < trn_net_nparams(n); i++)
        total += trn_net_param(n, i)->n;
    if (total > t->gns_prev_n) {
        float *b = realloc(t->gns_prev, (size_t)total * sizeof *b);
        if (!b)
            return -1;
        t->gns_prev = b;
        t->gns_prev_n = total;
    }
    double s = 0;
    float *prev = t->gns_prev;
    for (int i = 0; i < trn_net_nparams(n); i++) {
        trn_param *p = trn_net_param(n, i);
        double sc = mult / t->unscale[i];
        double acc = 0;
        for (long j = 0; j < p->n; j++) {
            double d = first ? (double)p->g[j] : (double)p->g[j] - prev[j];
            acc += d * d;
            prev[j] = p->g[j];
        }
        s += acc / (sc * sc);
        prev += p->n;
    }
    return s;
}

/* Folds one chunk's |g|^2 (from s_chunk_sqnorm; < 0: none) of m examples
   (0: do not count it) into grad_sqnorm_small, the mean over the chunks. */
static void s_measure_add(trn_trainer *t, double g, int m)
{
    if (m > 0 && g >= 0 && isfinite(g)) {
        t->gns_sum += g;
        t->gns_chunks++;
    }
    if (t->gns_chunks > 0) {
        t->gs_small = t->gns_sum / t->gns_chunks;
        t->b_small = m > 0 ? m : t->b_small;
    }
}

/* A measuring step without micro-batches: the first m of its nb examples
   (at x) are run forward and backward on their own, before the whole batch,
   and their accumulators are kept in gns_prev (the chunk measure of the
   whole batch then gives the other half's as the difference). BN running
   statistics are put back afterwards, and the whole batch then runs as on
   any step, so measuring (--log-every) does not change the trajectory by a
   bit. Without memory for the copies nothing is measured. Returns -1 if
   the pass fails. */
static int s_measure_half(trn_trainer *t, const float *x, int m, int nb, double gscale)
{
    const trn_config *c = &t->cfg;
    t->gns_sum = 0, t->gns_chunks = 0, t->b_small = 0;
    long ns = trn_net_state_count(t->net);
    float *keep = ns > 0 ? malloc((size_t)ns * sizeof *keep) : NULL;
    if (ns > 0 && !keep)
        return 0;
    if (keep)
        memcpy(keep, trn_net_state(t->net), (size_t)ns * sizeof *keep);
    trn_net_zero_grad(t->net);
    double l =
        trn_net_forward_backward(t->net, x, t->yb, m, 1, c->label_smoothing, gscale,
                                 c->per_layer_scale ? t->lscale : NULL, NULL);
    if (keep) {
        memcpy(trn_net_state(t->net), keep, (size_t)ns * sizeof *keep);
        free(keep);
    }
    if (l < 0)
        return -1;
    s_measure_add(t, s_chunk_sqnorm(t, (double)m / nb, 1), m);
    return 0;
}

/* |G|^2 of gradients already in true units. */
static double s_sqnorm_true(trn_trainer *t)
{
    return trn_net_grad_sqnorm(t->net);
}

/* The loss-scale decision of every step path, in one place. With host
   gradients (host = 1) each layer's gradients are checked for inf/NaN;
   a device backend passes its own flag in `overflow` (host = 0). With
   per-layer scales each layer's scaler sees its own layers' result and
   the global scaler only counts the skip; otherwise the global scaler
   decides. Also accounts the step's mean loss. Returns 1 when the step
   must be skipped. */
static int s_scale_step(trn_trainer *t, int host, int overflow, double loss)
{
    t->last_loss = loss;
    t->loss_acc += loss;
    t->loss_n++;
    int per_layer = host && t->cfg.per_layer_scale;
    if (host) {
        trn_net *n = t->net;
        for (int l = 0; l < t->nlayers; l++)
            t->bad[l] = 0;
        for (int i = 0; i < trn_net_nparams(n); i++) {
            trn_param *p = trn_net_param(n, i);
            if (trn_has_nonfinite(p->g, p->n)) {
                t->bad[p->layer] = 1;
                overflow = 1;
            }
        }
    }
    if (!per_layer)
        return trn_scaler_update(&t->scaler, overflow);
    for (int l = 0; l < t->nlayers; l++) {
        trn_scaler_update(&t->lscalers[l], t->bad[l]);
        t->lscale[l] = t->lscalers[l].scale;
    }
    if (overflow)
        t->scaler.skipped++;
    return overflow;
}

/* Brings the gradients to true units with the scales they were computed
   at (s_step_scales), whatever the step's decision did to the scalers. */
static void s_unscale(trn_trainer *t)
{
    trn_net *n = t->net;
    for (int i = 0; i < trn_net_nparams(n); i++) {
        trn_param *p = trn_net_param(n, i);
        if (t->unscale[i] == 1.0)
            continue;
        float inv = (float)t->unscale[i];
        for (long j = 0; j < p->n; j++)
            p->g[j] *= inv;
    }
}

static void s_advance(trn_trainer *t, int nb)
{
    t->step++;
    t->pos += nb;
    if (t->pos >= t->train->n) {
        t->epoch++;
        t->pos = 0;
    }
}

static void s_set_epoch_precision(trn_trainer *t)
{
    trn_precision p = t->psched.n ? trn_prec_schedule_at(&t->psched, t->epoch)
                                  : trn_precision_from_name(t->cfg.precision);
    if (p != t->prec) {
        t->prec = p;
        trn_net_set_precision(t->net, p);
    }
    /* after a load too, which sets the precision itself (ckpt.c) */
    if (t->cfg.verbose && t->rank == 0 && !t->backend && (int)p != t->said_prec)
        trn_trainer_say_kernels(t, 0);
}

/* Attaches the device backend when needed (first step, after a precision
   change, a load or a live change). 0 or -1. */
static int s_backend_ready(trn_trainer *t)
{
    char err[TRN_ERRLEN];
    if (t->backend_attached && t->backend_prec != t->prec) { /* precision schedule */
        t->backend->sync_to_host(t->backend->self, t->net);
        t->backend->detach(t->backend->self);
        t->backend_attached = 0;
    }
    if (!t->backend_attached) {
        trn_config c = t->cfg;
        snprintf(c.precision, sizeof c.precision, "%s", trn_precision_name(t->prec));
        t->backend_prec = t->prec;
        if (t->backend->attach(t->backend->self, t->net, &c, err) < 0) {
            fprintf(stderr, "jizhi-train: %s backend: %s\n", t->backend->name, err);
            return -1;
        }
        t->backend_attached = 1;
    }
    return 0;
}

/* Before a one-rank backend step of nb examples: on a measuring step
   (gns.h) a backend that can (set_half) is asked to measure the gradient
   of the batch's first half and of the rest as well. Returns the half
   asked for, 0 when none. Several ranks: never asked (no small-batch
   measure; trn_backend.set_half). */
static int s_backend_half(trn_trainer *t, int nb)
{
    const trn_backend *b = t->backend;
    if (!b->set_half || !b->half_sqnorms)
        return 0;
    int half = trn_gns_measures(t->step, t->cfg.log_every) ? trn_gns_half(nb) : 0;
    b->set_half(b->self, half);
    return half;
}

/* After a backend's step of a global batch of nb: the loss scaler sees the
   overflow, the loss is accounted, |G|^2 of the batch kept when the step
   was taken; when the step measured its halves (half > 0, s_backend_half)
   and the backend gives their norms, the noise inputs are reported as the
   CPU step's (trn_gns_small). 1 = skipped. */
static int s_backend_done(trn_trainer *t, int nb, double loss, int overflow, double gsq,
                          int half)
{
    int skip = s_scale_step(t, 0, overflow, loss);
    if (!skip) {
        double sq[2];
        t->gs_big = gsq;
        t->b_big = nb;
        t->have_gns = half > 0 && t->backend->half_sqnorms(t->backend->self, sq) == 0 &&
                      trn_gns_small(sq, half, nb, &t->gs_small, &t->b_small) == 0;
    }
    s_advance(t, nb);
    return skip;
}

static int s_step_backend(trn_trainer *t, int nb, double lr)
{
    if (s_backend_ready(t) < 0)
        return -1;
    int overflow = 0;
    double gsq = 0;
    int half = s_backend_half(t, nb);
    double loss = t->backend->step(t->backend->self, t->xb, t->yb, nb, lr,
                                   t->scaler.scale, &overflow, &gsq);
    return s_backend_done(t, nb, loss, overflow, gsq, half);
}

static void s_grad_ready(void *ud, int i)
{
    trn_dist_ready(ud, i);
}

/* This rank's share of a global batch of nb: [*off, *off + *cnt). */
void trn__shard(const trn_trainer *t, int nb, int *off, int *cnt)
{
    int base = nb / t->nranks, extra = nb % t->nranks, r = t->rank;
    *off = r * base + (r < extra ? r : extra);
    *cnt = base + (r < extra ? 1 : 0);
}

/* One step as one of several ranks on a device backend: the backend runs
   the shard and sums the gradients itself (trn_backend.step_dist); the
   overflow decision comes from the sums, the same on every rank. */
static int s_step_backend_dist(trn_trainer *t, int nb, double lr)
{
    int off, cnt;
    trn__shard(t, nb, &off, &cnt);
    if (cnt > 0 && trn__gather_at(t, off, cnt, NULL) < 0)
        return -1;
    if (s_backend_ready(t) < 0)
        return -1;
    int overflow = 0;
    double gsq = 0;
    double red = t->backend->step_dist(t->backend->self, t->xb, t->yb, cnt, nb, lr,
                                       t->scaler.scale, &overflow, &gsq);
    if (red < 0 || trn_comm_sum_d(t->comm, &red, 1) < 0)
        return -1;
    return s_backend_done(t, nb, red / nb, overflow, gsq, 0);
}

/* Device-resident data (--gpu-data, trn_backend.set_data): decided at the
   first step of a device backend. 1: the backend holds the training set
   and gathers its batches; 0: batches from host memory; -1: --gpu-data
   device and the copy failed (said on stderr). */
static int s_devdata(trn_trainer *t)
{
    const trn_backend *b = t->backend;
    if (t->devdata == 0) {
        t->devdata = 2;
        if (strcmp(t->cfg.gpu_data, "host") && b->set_data && b->set_order &&
            b->step_at) {
            char err[TRN_ERRLEN];
            if (b->set_data(b->self, t->train, err) == 0) {
                t->devdata = 1;
                if (t->rank == 0 && !t->cfg.quiet)
                    fprintf(stderr,
                            "jizhi-train: --gpu-data %s: training set in device memory "
                            "(%d examples), each batch gathered there\n",
                            t->cfg.gpu_data, t->train->n);
            } else if (!strcmp(t->cfg.gpu_data, "device")) {
                fprintf(stderr, "jizhi-train: --gpu-data device: %s\n", err);
                t->devdata = 0;
                return -1;
            } else if (t->rank == 0 && !t->cfg.quiet) {
                fprintf(stderr,
                        "jizhi-train: --gpu-data auto: %s; batches come from host "
                        "memory\n",
                        err);
            }
        }
    }
    return t->devdata == 1;
}

/* One step of a device backend that holds the data (s_devdata): the
   epoch's order goes to the device once per epoch, and the backend
   gathers this rank's share perm[pos + off .. + cnt) itself. */
static int s_step_backend_at(trn_trainer *t, int nb, double lr)
{
    const trn_backend *b = t->backend;
    char err[TRN_ERRLEN];
    int off = 0, cnt = nb;
    if (t->backend_dist)
        trn__shard(t, nb, &off, &cnt);
    if (s_backend_ready(t) < 0)
        return -1;
    trn__order(t);
    if (t->dev_order_epoch != t->perm_epoch) {
        if (b->set_order(b->self, t->perm, t->train->n, err) < 0) {
            fprintf(stderr, "jizhi-train: %s backend: %s\n", b->name, err);
            return -1;
        }
        t->dev_order_epoch = t->perm_epoch;
    }
    int overflow = 0;
    double gsq = 0;
    int half = t->backend_dist ? 0 : s_backend_half(t, nb);
    double red = b->step_at(b->self, (int)t->pos + off, cnt, nb, lr, t->scaler.scale,
                            &overflow, &gsq);
    if (red < 0 || (t->backend_dist && trn_comm_sum_d(t->comm, &red, 1) < 0))
        return -1;
    return s_backend_done(t, nb, red / nb, overflow, gsq, half);
}

/* One step as one of several ranks (see the header comment). */
static int s_step_dist(trn_trainer *t, int nb, double lr)
{
    const trn_config *c = &t->cfg;
    int off, cnt;
    trn__shard(t, nb, &off, &cnt);
    int per_layer = c->per_layer_scale;
    int mb = c->micro_batch > 0 && c->micro_batch < cnt ? c->micro_batch : cnt;
    int measure = (t->step + 1) % c->log_every == 0;
    float *direct = cnt > 0 && mb == cnt ? trn_net_input(t->net, cnt) : NULL;
    if (cnt > 0 && trn__gather_at(t, off, cnt, direct) < 0)
        return -1;
    const float *xsrc = direct ? direct : t->xb;
    double S = t->scaler.scale;
    double gscale = (per_layer ? 1.0 : S) / nb;
    int np = trn_net_nparams(t->net);
    s_step_scales(t);
    if (c->topk > 0)
        trn_dist_set_density(
            t->dist, trn_topk_density(c, t->epoch + (double)t->pos / t->train->n));
    trn_dist_begin(t->dist, t->unscale);
    trn_net_zero_grad(t->net);
    if (cnt == 0) /* no examples this step: contribute zeros */
        for (int i = 0; i < np; i++) {
            trn_param *p = trn_net_param(t->net, i);
            memset(p->g, 0, (size_t)p->n * sizeof(float));
        }
    double loss_sum = 0;
    for (int o = 0; o < cnt; o += mb) {
        int m = cnt - o < mb ? cnt - o : mb;
        trn_net_set_grad_hook(t->net, o + m >= cnt ? s_grad_ready : NULL, t->dist);
        double l = trn_net_forward_backward(t->net, xsrc + (size_t)o * t->train->dim,
                                            t->yb + o, m, 1, c->label_smoothing, gscale,
                                            per_layer ? t->lscale : NULL, NULL);
        trn_net_set_grad_hook(t->net, NULL, NULL);
        if (l < 0) {
            trn_dist_finish(t->dist); /* keep the ranks' collectives matched */
            return -1;
        }
        loss_sum += l * m;
    }
    /* [loss sum, |G_shard|^2, ranks measuring] before the sums replace g */
    double red[3] = {loss_sum, 0, 0};
    if (measure && cnt > 0) {
        red[1] = s_sqnorm(t, (double)cnt / nb);
        red[2] = 1;
    }
    /* top-k: g will hold only what was sent; LARS's trust ratio takes the
       dense gradient's norm instead, estimated as the sum over ranks of each
       rank's norm as it entered compression (after local clipping; exact
       when the ranks' gradients agree), so the ratio scales the decompressed
       update consistently */
    double *gnorm = NULL;
    if (c->topk > 0 && t->opt.kind == TRN_LARS &&
        !(gnorm = calloc((size_t)np, sizeof(double))))
        return -1;
    int frc = trn_dist_finish(t->dist);
    const char *note = trn_dist_fusion_note(t->dist);
    if (note && t->rank == 0 && !c->quiet)
        fprintf(stderr, "jizhi-train: %s\n", note);
    if (gnorm)
        memcpy(gnorm, trn_dist_local_gnorm(t->dist), (size_t)np * sizeof(double));
    if (frc < 0 || trn_comm_sum_d(t->comm, red, 3) < 0 ||
        (gnorm && trn_comm_sum_d(t->comm, gnorm, np) < 0)) {
        free(gnorm);
        return -1;
    }
    long ns = trn_net_state_count(t->net);
    /* BN running statistics: the mean over ranks (as the CUDA CNN's) */
    if (ns > 0 && trn_comm_mean(t->comm, trn_net_state(t->net), ns) < 0) {
        free(gnorm);
        return -1;
    }
    int skip = s_scale_step(t, 1, 0, red[0] / nb);
    if (!skip) {
        if (measure && red[2] > 0 && nb / t->nranks > 0) {
            t->gs_small = red[1] / red[2];
            t->b_small = nb / t->nranks;
            t->gs_big = s_sqnorm_true(t);
            t->b_big = nb;
            t->have_gns = 1;
        }
        t->opt.gnorm = gnorm;
        t->opt.corrected = t->dist_corrected;
        trn_optim_step(&t->opt, trn_net_param(t->net, 0), np, lr);
        t->opt.gnorm = NULL;
        t->opt.corrected = 0;
        trn_net_sync_weights(t->net);
    } else if (measure) {
        t->have_gns = 0;
    }
    free(gnorm);
    s_advance(t, nb);
    return skip;
}

double trn_topk_density(const trn_config *c, double epoch)
{
    const double d0 = 0.25;
    if (!(c->topk > 0) || c->topk >= d0 || !(c->topk_warmup > 0) ||
        epoch >= c->topk_warmup)
        return c->topk;
    double f = epoch < 0 ? 0 : epoch / c->topk_warmup;
    return d0 * pow(c->topk / d0, f);
}

typedef struct {
    double t0;
    double *ready;
} s_probe;

static void s_probe_hook(void *ud, int i)
{
    s_probe *p = ud;
    p->ready[i] = util_now() - p->t0;
}

/* Auto fusion's input: one forward/backward of this rank's first shard
   (twice; the second, warm one counts), recording when each param's
   gradient is final. BN running statistics are put back and the gradients
   zeroed, so training is unchanged. Returns the forward+backward seconds,
   or -1 (ready left at 0). */
static double s_probe_backward(trn_trainer *t, double *ready)
{
    int nb = t->cfg.batch_size < t->train->n ? t->cfg.batch_size : t->train->n;
    int off, cnt;
    trn__shard(t, nb, &off, &cnt);
    int mb =
        t->cfg.micro_batch > 0 && t->cfg.micro_batch < cnt ? t->cfg.micro_batch : cnt;
    if (mb <= 0 || trn__gather_at(t, off, mb, NULL) < 0)
        return -1;
    long ns = trn_net_state_count(t->net);
    float *st = ns > 0 ? malloc((size_t)ns * sizeof(float)) : NULL;
    if (ns > 0 && !st)
        return -1;
    if (st)
        memcpy(st, trn_net_state(t->net), (size_t)ns * sizeof(float));
    s_probe p = {0, ready};
    double total = -1;
    for (int rep = 0; rep < 2; rep++) {
        trn_net_zero_grad(t->net);
        trn_net_set_grad_hook(t->net, s_probe_hook, &p);
        p.t0 = util_now();
        double l = trn_net_forward_backward(t->net, t->xb, t->yb, mb, 1,
                                            t->cfg.label_smoothing, 1.0 / nb, NULL, NULL);
        total = l < 0 ? -1 : util_now() - p.t0;
        trn_net_set_grad_hook(t->net, NULL, NULL);
    }
    trn_net_zero_grad(t->net);
    if (st) {
        memcpy(trn_net_state(t->net), st, (size_t)ns * sizeof(float));
        free(st);
    }
    return total;
}

int trn_trainer_set_comm(trn_trainer *t, trn_comm *c, char *err)
{
    t->comm = c;
    t->rank = c ? c->rank : 0;
    t->nranks = c ? c->size : 1;
    trn_dist_destroy(&t->dist);
    /* one rank goes through the layer only when a backend was named (so
       `--comm nccl` on one GPU exercises it); else the plain step */
    if (!c || (c->size <= 1 && strcmp(t->cfg.comm, "mpi") && strcmp(t->cfg.comm, "nccl")))
        return 0;
    if (t->backend && !t->backend->set_comm) {
        snprintf(err, TRN_ERRLEN, "--backend %s: runs one rank only", t->backend->name);
        return -1;
    }
    const trn_config *cfg = &t->cfg;
    if (trn_comm_set_nodes(c, cfg->ranks_per_node) < 0) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        return -1;
    }
    trn_dist_opts o = {.algo = (trn_ar_algo)trn_ar_algo_from_name(cfg->allreduce),
                       .wire = (trn_wire)trn_wire_from_name(cfg->wire),
                       .topk = cfg->topk,
                       .fusion_bytes = cfg->fusion_kb < 0 ? -1 : cfg->fusion_kb * 1024,
                       .overlap = cfg->overlap,
                       .clip = cfg->topk > 0 ? cfg->topk_clip : 0};
    /* momentum correction: only for the momentum optimisers, whose momentum
       then moves into the residual */
    int ok = trn_optim_from_name(cfg->optimizer);
    if (cfg->topk > 0 && cfg->topk_correction && cfg->momentum > 0 &&
        (ok == TRN_SGD || ok == TRN_LARS)) {
        o.momentum = cfg->momentum;
        o.nesterov = cfg->nesterov;
        t->dist_corrected = 1;
    }
    long cmp[TRN_COMPARE_KB_MAX];
    o.ncompare = trn_parse_kb_list(cfg->fusion_compare, cmp, TRN_COMPARE_KB_MAX);
    if (o.ncompare < 0 || (o.ncompare > 0 && cfg->topk > 0))
        o.ncompare = 0;                  /* trn_config_validate said why */
    for (int i = 0; i < o.ncompare; i++) /* -1 (the layout in use) stays */
        cmp[i] = cmp[i] < 0 ? -1 : cmp[i] * 1024;
    o.compare = cmp;
    int np = trn_net_nparams(t->net);
    /* one model: rank 0's initial weights everywhere */
    for (int i = 0; i < np; i++) {
        trn_param *p = trn_net_param(t->net, i);
        if (trn_comm_bcast(c, p->w, (size_t)p->n * sizeof(float), 0) < 0) {
            snprintf(err, TRN_ERRLEN, "broadcasting the initial weights failed");
            return -1;
        }
    }
    trn_net_sync_weights(t->net);
    if (t->backend) { /* the device backend sums its own gradients */
        char msg[TRN_ERRLEN];
        if (o.ncompare > 0) {
            snprintf(err, TRN_ERRLEN,
                     "--fusion-compare: times the CPU trainer's buckets; it cannot run "
                     "with --backend %s",
                     t->backend->name);
            return -1;
        }
        o.compare = NULL; /* cmp lives on this stack */
        if (t->backend->set_comm(t->backend->self, c, &o, cfg->grad_path, msg) < 0) {
            memcpy(err, msg, TRN_ERRLEN); /* names the flags involved */
            return -1;
        }
        t->backend_dist = 1;
        t->backend_attached = 0; /* attach builds the exchange */
        if (t->rank == 0 && !cfg->quiet)
            fprintf(
                stderr,
                "jizhi-train: %d ranks (%s), --backend %s: %s; all-reduce %s, wire %s, "
                "fusion-kb %ld, overlap %s\n",
                c->size, c->ops->name, t->backend->name, msg, cfg->allreduce, cfg->wire,
                cfg->fusion_kb, cfg->overlap ? "on" : "off");
        return 0;
    }
    double *ready = NULL;
    if (o.fusion_bytes < 0 && c->size > 1) { /* auto fusion: time the backward */
        ready = calloc((size_t)np, sizeof(double));
        if (!ready) {
            snprintf(err, TRN_ERRLEN, "out of memory");
            return -1;
        }
        o.backward_s = s_probe_backward(t, ready);
        o.ready_s = o.backward_s > 0 ? ready : NULL;
        if (o.backward_s < 0)
            o.backward_s = 0;
    }
    t->dist = trn_dist_new(c, t->net, &o, err);
    free(ready);
    if (!t->dist)
        return -1;
    if (ready && t->rank == 0 && !cfg->quiet) {
        double a, b, cost, none;
        trn_dist_fusion_model(t->dist, &a, &b, &cost, &none);
        fprintf(
            stderr,
            "jizhi-train: fusion auto: alpha %.1f us, %.2f GB/s, forward+backward %.1f "
            "ms: exposed communication predicted %.2f ms/step (no fusion %.2f ms)\n",
            a * 1e6, 1e-9 / b, o.backward_s * 1e3, cost * 1e3, none * 1e3);
    }
    if (t->rank == 0 && !cfg->quiet)
        fprintf(stderr,
                "jizhi-train: %d ranks (%s), all-reduce %s, wire %s%s, fusion %ld KiB "
                "(%d buckets%s), overlap %s\n",
                c->size, c->ops->name, cfg->allreduce, cfg->wire,
                cfg->topk <= 0      ? ""
                : t->dist_corrected ? ", top-k (momentum correction)"
                                    : ", top-k",
                trn_dist_fusion_bytes(t->dist) / 1024, trn_dist_nbuckets(t->dist),
                cfg->fusion_kb < 0 ? ", auto" : "", cfg->overlap ? "on" : "off");
    return 0;
}

int trn_trainer_step(trn_trainer *t)
{
    const trn_config *c = &t->cfg;
    s_set_epoch_precision(t);
    int nb = trn__next_batch_size(t);
    double lr = trn_trainer_lr(t);
    if (t->backend) {
        /* attached first: set_data then knows the model (the CUDA CNN
           takes device data too, through trn_cudnn_step_dev) */
        if (s_backend_ready(t) < 0)
            return -1;
        int dd = s_devdata(t);
        if (dd < 0)
            return -1;
        if (dd)
            return s_step_backend_at(t, nb, lr);
    }
    if (t->backend_dist)
        return s_step_backend_dist(t, nb, lr);
    if (t->dist)
        return s_step_dist(t, nb, lr);
    if (t->backend) {
        if (trn__gather_at(t, 0, nb, NULL) < 0)
            return -1;
        return s_step_backend(t, nb, lr);
    }

    int per_layer = c->per_layer_scale;
    int mb = c->micro_batch > 0 && c->micro_batch < nb ? c->micro_batch : nb;
    int measure = trn_gns_measures(t->step, c->log_every);
    /* a one-chunk step that measures runs its first half once more, alone */
    int half = measure && mb == nb ? trn_gns_half(nb) : 0;
    /* one chunk: gather straight into the model's input buffer, in bf16
       where the model reads only that (not on a measuring step: its half
       pass takes the fp32 rows) */
    uint16_t *dh = mb == nb && !half ? trn_net_input_bf16(t->net, nb) : NULL;
    float *direct = !dh && mb == nb ? trn_net_input(t->net, nb) : NULL;
    if (dh ? trn__gather_bf16(t, nb, dh) < 0 : trn__gather_at(t, 0, nb, direct) < 0)
        return -1;
    const float *xsrc = direct ? direct : t->xb;
    double S = t->scaler.scale;
    double gscale = (per_layer ? 1.0 : S) / nb;
    s_step_scales(t);
    if (half && s_measure_half(t, xsrc, half, nb, gscale) < 0)
        return -1;
    trn_net_zero_grad(t->net);
    double loss_sum = 0;
    for (int off = 0; off < nb; off += mb) {
        int m = nb - off < mb ? nb - off : mb;
        double l = trn_net_forward_backward(
            t->net, dh ? NULL : xsrc + (size_t)off * t->train->dim, t->yb + off, m, 1,
            c->label_smoothing, gscale, per_layer ? t->lscale : NULL, NULL);
        if (l < 0)
            return -1;
        loss_sum += l * m;
        if (measure && m == mb && mb < nb) {
            /* each full-size chunk adds (m/nb) * g_chunk to the accumulators:
               grad_sqnorm_small is the mean |g|^2 over these chunks (each an
               unbiased estimate of |G|^2 + tr(Sigma)/m; the mean of two
               halves has half the variance of the first one alone) */
            if (off == 0)
                t->gns_sum = 0, t->gns_chunks = 0, t->b_small = 0;
            s_measure_add(t, s_chunk_sqnorm(t, (double)m / nb, off == 0), m);
        }
    }
    if (half && t->gns_chunks > 0) /* the second half: the whole batch less the first */
        s_measure_add(t, s_chunk_sqnorm(t, (double)(nb - half) / nb, 0),
                      nb - half == half ? half : 0);
    int skip = s_scale_step(t, 1, 0, loss_sum / nb);
    if (!skip) {
        if (measure && t->b_small > 0 && t->b_small < nb) {
            t->gs_big = s_sqnorm(t, 1.0);
            t->b_big = nb;
            t->have_gns = 1;
        }
        s_unscale(t);
        trn_optim_step(&t->opt, trn_net_param(t->net, 0), trn_net_nparams(t->net), lr);
        trn_net_sync_weights(t->net);
    } else if (measure) {
        t->have_gns = 0;
    }
    s_advance(t, nb);
    return skip;
}
