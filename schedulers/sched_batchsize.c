/*  sched_batchsize.c - the batch-size scheduler (docs/design.md, Schedulers): adapts a
    running trial's batch size and learning rate from the gradient noise
    scale it reports (McCandlish et al. 2018; Pollux, OSDI'21; AdaScale).

    New trials: random search over the space (like `random`, own stream).
    Running trials: each report of the four gradient-noise metrics of one
    step (grad_sqnorm_small, grad_sqnorm_big, batch_small, batch_big, any
    order) gives unbiased estimates of |G|^2 and tr(Sigma) (see
    sched_gns_estimate), each smoothed by its own bias-corrected EMA
    (option `ema`, default 0.95) before dividing: B_simple = tr/|G|^2.
    Throughput is fitted from `samples_per_s` (or `step_time_s`) at the
    batch sizes seen (with option `throughput` "cpu": from `step_cpu_s`,
    the process CPU-seconds per step jizhi-train reports, so the cost per
    example is in CPU time, which neighbours on a shared CPU host do not
    inflate; not for GPU trainers, whose steps cost little CPU), as step time t(B) = alpha
   + beta*B (least squares over the lower-quartile step time of each size, beta kept at
   least a quarter of the best per-example time measured; before two sizes are seen, the
   prior alpha = prior_overhead * t(B1), default 0.5, which only picks a direction: while
   one size has been seen, the first decision tries its better neighbour, x2 or /2,
   "explore", and does not jump on the prior; a size with `min_measurements` windows is
   scored by its own measured time, the fit only extrapolates). Every candidate B in [min,
   max] (option `grid`: "pow2" = the powers of two in range, default; "int" = every
   integer) is scored by goodput(B) = B/t(B) * (B_noise + B0)/ (B_noise + B), B0 the
   trial's initial batch, B_noise = B_simple/(1 - m) for SGD with momentum m (option
   `momentum`, default 0; sched_bs_noise_scale). On Fashion-MNIST with m = 0.9 it predicts
   the samples better (1.3x at batch 512 against 64, measured 1.0-1.3x, where B_simple
   alone, 100-400, predicts 2-3x) but its decisions were no better (it picked 256 where
   B_simple alone picked 128, the sample-efficient size there; both 0.99x the
   best fixed batch over 5 seeds), so it is an option, not read from the
   trial's `momentum` param. When the best
   candidate beats the current batch's goodput by `min_gain` (default 10%), and at least
   `interval` steps (default 200) have passed since the last change and `min_measurements`
   (default 3) were seen, the scheduler sends `set batch_size` and a new learning rate lr0
   * gain, gain from `lr_rule`: "adascale" (default; r = (s2 + m2)/(s2/S + m2), S = B/B0),
    "sqrt", "linear" or "none". A higher rate is warmed up linearly over
    `warmup` steps (default 100) by further `set lr` instructions sent as
    the trial reports (the trainer's own warmup counts from the start of
    training, so the scheduler does it); a lower rate is set at once. Run
    jizhi-train with its default --lr-scaling none, or the rate is scaled
    twice. The numbers behind each decision travel in the instruction's
    args ("decision") and reason, so they land in the events table.

    Probes wait less: before the first change, and after a change that
    explored or was made on the throughput prior alone (one size measured),
    `probe_interval` steps (default `interval`) are enough once the size in
    force has `min_measurements` step-time windows. Those decisions wait for
    measurements, not for the model to settle. The way back from an
    explore is taken then even while the explored size's rate is still
    ramping up (other changes wait for the ramp's end); a change ends any
    ramp under way at the rate it had reached.

    Annealing by batch growth (option `plateau_window` W, default 0 = off;
    "Don't decay the learning rate, increase the batch size", Smith et al.
    2018): when the least-squares trend of the study objective over the
    trial's last W reports gains less than `plateau_delta` (default 0.01,
    in the objective's units; a fall for "min") across those W reports, the
    trial has reached the noise floor of its lr/B: the batch is doubled
    with the lr held, which halves lr/B as halving the lr would; at `max`,
    or where the step-time table has measured an example to cost more at
    twice the batch, the lr is halved instead. The window then starts
    over. From the first such decision on the trial is annealing: goodput
    decisions stop (their AdaScale lr would undo the annealing).
    Evaluations evenly spaced in samples (jizhi-train
    --eval-every-samples) keep the window's span the same whatever the
    batch.

    With `grow_only` (default false) no candidate is below the current
    batch, and the exploring step goes up: the noise scale grows as the
    loss falls (McCandlish et al.), so a smaller batch later is the
    throughput fit's noise more often than the model's insight; a shrink
    mid-run also costs accuracy (a measured 0.85 -> 0.80 drop at 128->32).
    The one exception: the decision after an explore, if it comes within
    `interval` steps of it, may go back to the size the explore left, if
    the explored one measured worse.

    lr0 is option `lr` if given, else the trial's `lr` param if the space
    has one, else the last `lr` the trial reported before the first change
    (with jizhi-train: its peak rate once any --warmup-epochs are over). B0
    is the trial's `batch_size` param, else the first batch_size it
    reports. State (EMAs, throughput table, ramp) is saved.
*/
#include "sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS_MAX_TP 24 /* distinct batch sizes in a trial's throughput table */

enum { GNS_GS = 1, GNS_GB = 2, GNS_BS = 4, GNS_BB = 8, GNS_ALL = 15 };
enum { RULE_ADASCALE = 0, RULE_SQRT, RULE_LINEAR, RULE_NONE };
static const char *const s_rules[] = {"adascale", "sqrt", "linear", "none"};

#define BS_TP_WIN 16 /* step times kept per batch size (their lower quartile is used) */
#define BS_PL_MAX 64 /* the largest plateau_window */

typedef struct {
    double b;            /* batch size */
    double t[BS_TP_WIN]; /* the last step times seen at b (a ring) */
    int n, next;         /* how many held, where the next goes */
} bs_tp;

typedef struct {
    long id;
    double b0, lr0;        /* initial batch and base lr (NaN unknown) */
    double mom;            /* the trial's SGD momentum (0: none or unknown) */
    double b;              /* current batch (last reported or set) */
    double lr_sent;        /* peak lr in force (last set, else lr0) */
    long pstep;            /* step of the pending gns measurement */
    int have;              /* GNS_* bits present for pstep */
    sched_gns_point p;     /* the pending measurement */
    double ema_g2, ema_tr; /* raw EMAs (bias-corrected on use) */
    long nmeas;            /* measurements folded into the EMAs */
    bs_tp tp[BS_MAX_TP];   /* throughput table */
    int ntp;
    int skip_tp;      /* drop the first throughput report after a change */
    int pend_b;       /* a set batch_size not yet seen in the reports */
    int explored;     /* tried a second size to measure throughput */
    double undo_b;    /* the size an explore left, a candidate even under grow_only
                         until the next decision, within `interval` steps (NaN: none) */
    int probing;      /* no change yet, or the last one explored: `probe` steps apply */
    int lr_fixed;     /* lr0 came from the params or the option, not reports */
    long last_change; /* step of the last decision (0 at start) */
    int ramp;         /* lr warmup in progress */
    double ramp_from, ramp_to;
    long ramp_start, ramp_last; /* ramp start step; last step a ramp lr was considered */
    long decisions;
    long last_step;       /* highest step reported (a lower one: a new attempt) */
    double pl[BS_PL_MAX]; /* the objective's reports since the last change (a ring) */
    int npl, pl_next;     /* how many held, where the next goes */
    int annealing;        /* a plateau decision was made: goodput no longer decides */
} bs_trial;

typedef struct {
    sched_t base;
    long count;            /* suggestions made */
    long bmin, bmax;       /* batch range */
    int grid_int;          /* candidates: every integer (else powers of two) */
    int tp_cpu;            /* step cost from step_cpu_s (else wall: samples_per_s) */
    int grow_only;         /* never a smaller batch than the current one */
    long interval, warmup; /* steps */
    long probe;            /* steps before the first change and after an exploring one */
    int rule;              /* RULE_* */
    double ema, min_gain, prior_overhead, lr_opt; /* lr_opt NaN = none */
    double mom_opt;                               /* option momentum, NaN = none */
    long min_meas;
    int plateau_w;        /* objective reports in the plateau window (0: off) */
    double plateau_delta; /* the least gain of the window's trend */
    bs_trial *trials;
    size_t ntrials, cap;
} sched_bs;

/* ---- the estimators (public, used by `jizhi batchsize-eval` too) ---- */

int sched_gns_estimate(const sched_gns_point *p, double *g2, double *trace)
{
    if (!(p->bb > p->bs) || !(p->bs > 0) || !isfinite(p->gs) || !isfinite(p->gb))
        return -1;
    *g2 = (p->bb * p->gb - p->bs * p->gs) / (p->bb - p->bs);
    *trace = (p->gs - p->gb) / (1 / p->bs - 1 / p->bb);
    return 0;
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int sched_gns_critical(const sched_gns_point *pts, size_t n, int nboot, double conf,
                       unsigned long long seed, sched_gns_result *out)
{
    memset(out, 0, sizeof *out);
    out->lo = out->hi = NAN;
    double *g2 = malloc((n ? n : 1) * sizeof *g2), *tr = malloc((n ? n : 1) * sizeof *tr);
    if (!g2 || !tr) {
        free(g2);
        free(tr);
        return -1;
    }
    size_t m = 0;
    double sg = 0, st = 0;
    for (size_t i = 0; i < n; i++)
        if (sched_gns_estimate(&pts[i], &g2[m], &tr[m]) == 0) {
            sg += g2[m];
            st += tr[m];
            m++;
        }
    out->n = (int)m;
    if (m < 2 || sg <= 0) {
        free(g2);
        free(tr);
        return -1;
    }
    out->g2 = sg / (double)m;
    out->trace = st / (double)m;
    out->b_simple = st / sg;
    if (nboot > 0) {
        double *bs = malloc((size_t)nboot * sizeof *bs);
        if (bs) {
            sched_rng r;
            sched_rng_seed(&r, seed, 0x6e73);
            for (int k = 0; k < nboot; k++) {
                double a = 0, b = 0;
                for (size_t i = 0; i < m; i++) {
                    size_t j = (size_t)(sched_rng_uniform(&r) * (double)m);
                    a += g2[j];
                    b += tr[j];
                }
                bs[k] = a > 0 ? (b > 0 ? b / a : 0) : INFINITY; /* B_simple >= 0 */
            }
            qsort(bs, (size_t)nboot, sizeof *bs, s_cmp_double);
            double ql = (1 - conf) / 2 * (nboot - 1), qh = (1 + conf) / 2 * (nboot - 1);
            out->lo = bs[(size_t)floor(ql)];
            out->hi = bs[(size_t)ceil(qh)];
            if (!isfinite(out->lo))
                out->lo = NAN;
            if (!isfinite(out->hi))
                out->hi = NAN;
            free(bs);
        }
    }
    free(g2);
    free(tr);
    return 0;
}

double sched_bs_efficiency(double bsimple, double b0, double b)
{
    return (bsimple + b0) / (bsimple + b);
}

double sched_bs_noise_scale(double bsimple, double momentum)
{
    return momentum > 0 && momentum < 1 ? bsimple / (1 - momentum) : bsimple;
}

double sched_bs_adascale_gain(double bsimple, double b0, double b)
{
    /* sigma^2 = tr/b0 and mu^2 = |G|^2, divided through by |G|^2 */
    double s2 = bsimple / b0, S = b / b0;
    return (s2 + 1) / (s2 / S + 1);
}

/* ---- per-trial state ---- */

static void s_trial_init(bs_trial *t, long id)
{
    memset(t, 0, sizeof *t);
    t->id = id;
    t->b0 = t->lr0 = t->b = t->lr_sent = t->undo_b = NAN;
    t->mom = 0;
    t->pstep = -1;
    t->ramp_last = -1;
    t->skip_tp = 1; /* the first window holds the start-up */
    t->probing = 1;
}

_Static_assert(offsetof(bs_trial, id) == 0, "sched_rows: id first");

static bs_trial *s_trial(sched_bs *self, long id, int create)
{
    int created;
    bs_trial *t =
        SCHED_ROWS_GET(self->trials, self->ntrials, self->cap, id, create, &created);
    if (created)
        s_trial_init(t, id);
    return t;
}

static void s_tp_add(bs_trial *t, double b, double step_time)
{
    if (!(step_time > 0) || !isfinite(step_time) || !(b > 0))
        return;
    bs_tp *e = NULL;
    for (int i = 0; i < t->ntp && !e; i++)
        if (t->tp[i].b == b)
            e = &t->tp[i];
    if (!e) {
        if (t->ntp == BS_MAX_TP) /* forget the oldest size */
            memmove(&t->tp[0], &t->tp[1], (BS_MAX_TP - 1) * sizeof t->tp[0]);
        else
            t->ntp++;
        e = &t->tp[t->ntp - 1];
        memset(e, 0, sizeof *e);
        e->b = b;
    }
    e->t[e->next] = step_time;
    e->next = (e->next + 1) % BS_TP_WIN;
    if (e->n < BS_TP_WIN)
        e->n++;
}

/* The step time at one size: the lower quartile of the windows held. An
   evaluation, a checkpoint or a neighbour's burst in a window only slows
   it, and on a shared machine most windows can be slowed (the median of
   measured bench windows moved 2-3x between sizes, by load alone), so
   the fast end is the machine's speed at that size. */
static double s_tp_time(const bs_tp *e)
{
    double v[BS_TP_WIN];
    memcpy(v, e->t, (size_t)e->n * sizeof v[0]);
    qsort(v, (size_t)e->n, sizeof v[0], s_cmp_double);
    return v[(e->n - 1) / 4];
}

/* How many step-time windows the table holds at size b. */
static int s_tp_windows(const bs_trial *t, double b)
{
    for (int i = 0; i < t->ntp; i++)
        if (t->tp[i].b == b)
            return t->tp[i].n;
    return 0;
}

/* Fits t(B) = alpha + beta*B. 0, or -1 when nothing was measured. */
static int s_tp_fit(const sched_bs *self, const bs_trial *t, double *alpha, double *beta)
{
    if (t->ntp == 0)
        return -1;
    if (t->ntp == 1) {
        double tau = s_tp_time(&t->tp[0]);
        *alpha = self->prior_overhead * tau;
        *beta = (1 - self->prior_overhead) * tau / t->tp[0].b;
        return 0;
    }
    double mb = 0, mt = 0;
    for (int i = 0; i < t->ntp; i++) {
        mb += t->tp[i].b;
        mt += s_tp_time(&t->tp[i]);
    }
    mb /= t->ntp;
    mt /= t->ntp;
    double sxy = 0, sxx = 0, sxt = 0, sbb = 0;
    for (int i = 0; i < t->ntp; i++) {
        double ti = s_tp_time(&t->tp[i]);
        sxy += (t->tp[i].b - mb) * (ti - mt);
        sxx += (t->tp[i].b - mb) * (t->tp[i].b - mb);
        sxt += t->tp[i].b * ti;
        sbb += t->tp[i].b * t->tp[i].b;
    }
    double b = sxx > 0 ? sxy / sxx : 0, a = mt - b * mb;
    if (a < 0) { /* through the origin: no fixed cost per step */
        a = 0;
        b = sxt / sbb;
    }
    /* Noisy times can make the fitted slope tiny or negative, which would
       promise examples for free at large B: an example's marginal cost is
       kept at least a quarter of the best average cost measured. */
    double floor_b = INFINITY;
    for (int i = 0; i < t->ntp; i++)
        floor_b = fmin(floor_b, 0.25 * s_tp_time(&t->tp[i]) / t->tp[i].b);
    if (b < floor_b) {
        b = floor_b;
        a = fmax(0, mt - b * mb);
    }
    *alpha = a;
    *beta = b;
    return 0;
}

/* A candidate's step time: measured, where the table holds `min_measurements`
   windows at it, else the fit. A line cannot bend: on the CNN on one CPU
   rank an example costs 10% more at 128 than at 64, and the fit through
   both (alpha < 0, so through the origin) made them cost the same. */
static double s_step_time(const sched_bs *self, const bs_trial *t, double b, double alpha,
                          double beta)
{
    for (int i = 0; i < t->ntp; i++)
        if (t->tp[i].b == b && t->tp[i].n >= self->min_meas)
            return s_tp_time(&t->tp[i]);
    return alpha + beta * b;
}

static double s_gain(const sched_bs *self, double bsimple, double b0, double b)
{
    switch (self->rule) {
    case RULE_ADASCALE:
        return sched_bs_adascale_gain(bsimple, b0, b);
    case RULE_SQRT:
        return sqrt(b / b0);
    case RULE_LINEAR:
        return b / b0;
    default:
        return 1;
    }
}

static void s_set(sched_instr *out, long trial, const char *name, json_t *value,
                  json_t *decision, const char *reason)
{
    memset(out, 0, sizeof *out);
    out->trial = trial;
    snprintf(out->kind, sizeof out->kind, "set");
    out->args = json_pack("{s:s, s:o}", "name", name, "value", value);
    if (decision)
        json_object_set_new(out->args, "decision", decision);
    snprintf(out->reason, sizeof out->reason, "%s", reason);
}

/* A complete measurement at `step`: fold it in and maybe decide. */
static int s_measure(sched_bs *self, bs_trial *t, long step, sched_instr *out, int max)
{
    double g2, tr;
    if (sched_gns_estimate(&t->p, &g2, &tr) != 0)
        return 0;
    double e = self->ema;
    t->ema_g2 = e * t->ema_g2 + (1 - e) * g2;
    t->ema_tr = e * t->ema_tr + (1 - e) * tr;
    t->nmeas++;
    double corr = 1 - pow(e, (double)t->nmeas);
    double G2 = t->ema_g2 / corr, TR = t->ema_tr / corr;
    long wait = t->probing ? self->probe : self->interval;
    /* the way back from an explore is open once the explored size is
       measured, its warmup ramp over or not: on the CNN the ramp kept a size
       measured worse for 100 steps, at a rate raised for it (other changes
       wait for the ramp: on two MLP ranks, going on from 128 to 512 mid-ramp
       moved nothing but the spread) */
    int judge = !isnan(t->undo_b) && s_tp_windows(t, t->b) >= self->min_meas;
    if (t->annealing || t->nmeas < self->min_meas || step - t->last_change < wait ||
        (t->ramp && !judge) || max < 2 || isnan(t->b) || isnan(t->b0) ||
        (self->rule != RULE_NONE && isnan(t->lr0)))
        return 0;
    if (!(G2 > 0) || !(TR > 0))
        return 0; /* noise-dominated estimate: not usable yet */
    if (wait < self->interval && s_tp_windows(t, t->b) < self->min_meas)
        return 0; /* early: the size in force must have been measured */
    double bsimple = TR / G2, alpha, beta;
    /* The critical batch of SGD with momentum m: B_simple / (1 - m). */
    double bnoise = sched_bs_noise_scale(bsimple, t->mom);
    if (s_tp_fit(self, t, &alpha, &beta) != 0)
        return 0;
#define GOODPUT(B)                                                                       \
    ((B) / s_step_time(self, t, (B), alpha, beta) *                                      \
     sched_bs_efficiency(bnoise, t->b0, (B)))
    /* going back from an explore is judging it: within `interval` steps of
       it, or the shrink is one grow_only forbids (on two MLP ranks a dip in
       B_simple took 128 back to 64 430-530 steps after the explore) */
    double undo = step - t->last_change <= self->interval ? t->undo_b : NAN;
    double best_b = t->b, best_g = GOODPUT(t->b), cur_g = best_g;
    long span = self->bmax - self->bmin;
    if (self->grid_int) {
        long stepc = span > 100000 ? span / 100000 + 1 : 1;
        for (long b = self->bmin; b <= self->bmax; b += stepc)
            if ((!self->grow_only || b >= t->b || b == undo) &&
                GOODPUT((double)b) > best_g) {
                best_g = GOODPUT((double)b);
                best_b = (double)b;
            }
    } else {
        for (long b = 1; b <= self->bmax && b > 0; b *= 2)
            if (b >= self->bmin && (!self->grow_only || b >= t->b || b == undo) &&
                GOODPUT((double)b) > best_g) {
                best_g = GOODPUT((double)b);
                best_b = (double)b;
            }
    }
    /* One size seen: the throughput model is only the prior, which can be
       far off (alpha = 0.5 t(B1) predicted 1.5x the measured step at 512
       from 64 on two CPU ranks, so the first jump went to 256, not 512).
       Rather than act on it, try the better neighbour (x2 or /2) once, to
       measure a second size; the prior only picks the direction. */
    int explore = 0;
    if (t->ntp == 1 && !t->explored) {
        double up = self->grid_int ? t->b * 2 : pow(2, floor(log2(t->b)) + 1);
        double down = self->grid_int ? floor(t->b / 2) : pow(2, ceil(log2(t->b)) - 1);
        int up_ok = up <= (double)self->bmax,
            down_ok = down >= (double)self->bmin && down >= 1 && !self->grow_only;
        if (up_ok || down_ok) {
            best_b = up_ok && (!down_ok || GOODPUT(up) >= GOODPUT(down)) ? up : down;
            best_g = GOODPUT(best_b);
            explore = 1;
            t->explored = 1;
        }
    }

#undef GOODPUT
    if (!explore && (best_b == t->b || best_g < (1 + self->min_gain) * cur_g))
        return 0;
    if (t->ramp && best_b != t->undo_b)
        return 0; /* mid-ramp only the way back */
    double lr_new = self->rule == RULE_NONE
                        ? t->lr_sent
                        : t->lr0 * s_gain(self, bsimple, t->b0, best_b);
    double lr_old = isnan(t->lr_sent) ? t->lr0 : t->lr_sent;
    json_t *d = json_pack(
        "{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:I, s:b}",
        "b_simple", bsimple, "grad_sqnorm", G2, "trace", TR, "from", t->b, "b0", t->b0,
        "goodput_gain", best_g / cur_g, "efficiency",
        sched_bs_efficiency(bnoise, t->b0, best_b), "alpha", alpha, "beta", beta,
        "lr_from", isnan(lr_old) ? 0.0 : lr_old, "lr", isnan(lr_new) ? 0.0 : lr_new,
        "lr_rule", s_rules[self->rule], "measurements", (json_int_t)t->nmeas, "explore",
        explore);
    json_object_set_new(d, "step", json_integer((json_int_t)step));
    json_object_set_new(d, "b_noise", json_real(bnoise));
    json_object_set_new(d, "momentum", json_real(t->mom));
    char reason[128];
    snprintf(reason, sizeof reason,
             "batchsize: B_simple %.4g, batch %.0f->%.0f, %s x%.3g, "
             "lr %.3g->%.3g (%s)",
             bsimple, t->b, best_b, explore ? "explore, goodput" : "goodput",
             best_g / cur_g, lr_old, lr_new, s_rules[self->rule]);
    int k = 0;
    s_set(&out[k++], t->id, "batch_size", json_integer((json_int_t)best_b), d, reason);
    /* grow_only forbids a shrink the model asks for, not going back from a
       probe: measured worse (the CNN on one CPU rank: an example costs 10%
       more at 128 than at 64), the explored size is left for the one before */
    t->undo_b = explore ? t->b : NAN;
    t->b = best_b;
    t->pend_b = 1;
    t->last_change = step;
    t->skip_tp = 1;
    /* a change on the throughput prior alone (one size measured) is a probe
       too: the next decision has two sizes to fit */
    t->probing = explore || t->ntp == 1;
    t->decisions++;
    t->npl = t->pl_next = 0; /* the plateau window starts over at the new size */
    t->ramp = 0;             /* a ramp under way ends at the rate it reached */
    if (self->rule != RULE_NONE && isfinite(lr_new) && lr_new != lr_old) {
        if (self->warmup > 0 && lr_new > lr_old) {
            t->ramp = 1;
            t->ramp_from = lr_old;
            t->ramp_to = lr_new;
            t->ramp_start = step;
            t->ramp_last = step;
        } else {
            char r2[128];
            snprintf(r2, sizeof r2, "batchsize: lr %.4g for batch %.0f (%s)", lr_new,
                     best_b, s_rules[self->rule]);
            s_set(&out[k++], t->id, "lr", json_real(lr_new), NULL, r2);
            t->lr_sent = lr_new;
        }
    }
    return k;
}

/* The gain of the least-squares trend across the window (oldest to newest
   report, evenly spaced), signed so that positive is better. */
static double s_trend_gain(const bs_trial *t, int w, int maximize)
{
    double mx = (w - 1) / 2.0, my = 0, sxy = 0, sxx = 0;
    for (int i = 0; i < w; i++)
        my += t->pl[(t->pl_next + BS_PL_MAX - w + i) % BS_PL_MAX];
    my /= w;
    for (int i = 0; i < w; i++) {
        double y = t->pl[(t->pl_next + BS_PL_MAX - w + i) % BS_PL_MAX];
        sxy += (i - mx) * (y - my);
        sxx += (i - mx) * (i - mx);
    }
    double gain = sxy / sxx * (w - 1);
    return maximize ? gain : -gain;
}

/* A report of the objective: maybe a plateau decision (batch x2 holding
   the lr, or at `max` the lr halved). */
static int s_plateau(sched_bs *self, bs_trial *t, long step, double value,
                     sched_instr *out, int max)
{
    if (!isfinite(value) || t->pend_b)
        return 0; /* a report in flight from the old size is not of the new one */
    t->pl[t->pl_next] = value;
    t->pl_next = (t->pl_next + 1) % BS_PL_MAX;
    if (t->npl < BS_PL_MAX)
        t->npl++;
    int w = self->plateau_w;
    if (t->npl < w || t->ramp || isnan(t->b) || max < 1)
        return 0;
    double gain = s_trend_gain(t, w, self->base.spec->maximize);
    if (gain >= self->plateau_delta)
        return 0;
    double b2 = t->b * 2;
    int grow = b2 <= (double)self->bmax;
    /* Doubling the batch with the lr held and halving the lr with the batch
       held both halve lr/B and need about the same samples (Smith et al.),
       so the cheaper per example is taken: the batch doubles unless the
       step-time table says an example costs more at 2B (the CNN on one CPU
       rank: 13% more at 128 than at 64). The fit alone (alpha >= 0) never
       says so; only a measured 2B can. */
    double cost2 = NAN, alpha, beta;
    if (grow && s_tp_fit(self, t, &alpha, &beta) == 0) {
        cost2 = s_step_time(self, t, b2, alpha, beta) / 2 /
                s_step_time(self, t, t->b, alpha, beta);
        if (cost2 > 1 && t->lr_sent > 0)
            grow = 0;
    }
    if (!grow && !(t->lr_sent > 0))
        return 0; /* at max with no known lr: nothing to anneal */
    json_t *d =
        json_pack("{s:s, s:f, s:i, s:f, s:f, s:f, s:I}", "rule", "plateau", "trend_gain",
                  gain, "window", w, "delta", self->plateau_delta, "from", t->b,
                  "lr_from", t->lr_sent > 0 ? t->lr_sent : 0.0, "step", (json_int_t)step);
    if (isfinite(cost2)) /* an example's cost at 2B over its cost at B */
        json_object_set_new(d, "cost_x2", json_real(cost2));
    char reason[128];
    if (grow) {
        snprintf(reason, sizeof reason,
                 "batchsize: plateau (trend %+.3g over %d reports), batch %.0f->%.0f, lr "
                 "held",
                 gain, w, t->b, b2);
        s_set(out, t->id, "batch_size", json_integer((json_int_t)b2), d, reason);
        t->b = b2;
        t->pend_b = 1;
        t->skip_tp = 1;
    } else {
        if (b2 <= (double)self->bmax)
            snprintf(reason, sizeof reason,
                     "batchsize: plateau (trend %+.3g over %d reports), batch %.0f held "
                     "(x%.3g an example at %.0f), lr %.3g->%.3g",
                     gain, w, t->b, cost2, b2, t->lr_sent, t->lr_sent / 2);
        else
            snprintf(
                reason, sizeof reason,
                "batchsize: plateau (trend %+.3g over %d reports) at max batch %.0f, "
                "lr %.3g->%.3g",
                gain, w, t->b, t->lr_sent, t->lr_sent / 2);
        s_set(out, t->id, "lr", json_real(t->lr_sent / 2), d, reason);
        t->lr_sent /= 2;
    }
    t->annealing = 1;
    t->undo_b = NAN;
    t->last_change = step;
    t->decisions++;
    t->npl = t->pl_next = 0;
    return 1;
}

/* Warmup of a raised lr: a new value when it moved by a fifth of the ramp
   (and 2%), and at the end. */
static int s_ramp(sched_bs *self, bs_trial *t, long step, sched_instr *out, int max)
{
    if (!t->ramp || step <= t->ramp_last || max < 1)
        return 0;
    t->ramp_last = step;
    double f = (double)(step - t->ramp_start) / (double)self->warmup;
    int end = f >= 1;
    double lr = end ? t->ramp_to : t->ramp_from + (t->ramp_to - t->ramp_from) * f;
    /* about five steps per ramp: each `set` is an event and a params generation */
    double step_min = fmax(0.02 * t->lr_sent, 0.2 * fabs(t->ramp_to - t->ramp_from));
    if (!end && fabs(lr - t->lr_sent) < step_min)
        return 0;
    char reason[128];
    snprintf(reason, sizeof reason, "batchsize: lr warmup %.4g -> %.4g (%ld/%ld steps)",
             lr, t->ramp_to, end ? self->warmup : step - t->ramp_start, self->warmup);
    s_set(out, t->id, "lr", json_real(lr), NULL, reason);
    t->lr_sent = lr;
    if (end)
        t->ramp = 0;
    return 1;
}

/* ---- sched_ops ---- */

static int s_suggest(sched_t *s, long trial_id, json_t **params)
{
    sched_bs *self = (sched_bs *)s;
    sched_rng rng;
    sched_rng_seed(&rng, (unsigned long long)s->spec->seed,
                   (unsigned long long)self->count);
    json_t *p = json_object();
    for (size_t i = 0; i < s->spec->nparams; i++) {
        const spec_param *sp = &s->spec->params[i];
        json_object_set_new(p, sp->name,
                            spec_param_from_unit(sp, sched_rng_uniform(&rng)));
    }
    self->count++;
    bs_trial *t = s_trial(self, trial_id, 1); /* B0 and lr0 from the params, when there */
    json_t *b = json_object_get(p, "batch_size"), *lr = json_object_get(p, "lr");
    if (t) /* only from the option: the param is not read (see the header) */
        t->mom = !isnan(self->mom_opt) ? self->mom_opt : 0;
    if (t && json_is_number(b))
        t->b0 = t->b = json_number_value(b);
    if (t && (json_is_number(lr) || !isnan(self->lr_opt))) {
        t->lr0 = t->lr_sent = isnan(self->lr_opt) ? json_number_value(lr) : self->lr_opt;
        t->lr_fixed = 1;
    }
    *params = p;
    return SCHED_OK;
}

static int s_on_metric(sched_t *s, long trial_id, long step, const char *metric,
                       double value, double now, sched_instr *out, int max)
{
    sched_bs *self = (sched_bs *)s;
    bs_trial *t = s_trial(self, trial_id, 1);
    if (!t)
        return -1;
    if (step < t->last_step) { /* a retry starts over: so does its state */
        double b0 = t->b0, lr0 = t->lr0, mom = t->mom;
        int fixed = t->lr_fixed;
        s_trial_init(t, trial_id);
        t->mom = mom;
        if (fixed)
            t->lr0 = t->lr_sent = lr0, t->lr_fixed = 1;
        t->b0 = b0;
    }
    t->last_step = step;
    if (isnan(t->lr0) && !isnan(self->lr_opt))
        t->lr0 = t->lr_sent = self->lr_opt;
    if (!isnan(self->mom_opt))
        t->mom = self->mom_opt;
    int k = s_ramp(self, t, step, out, max);
    int bit = 0;
    if (!strcmp(metric, "batch_size") && value > 0) {
        if (isnan(t->b0))
            t->b0 = value;
        /* reports already in flight still show the old size: wait for the new
           one (or, if the trial never takes it, believe the reports after ten
           intervals; a fast trial can be that far ahead of its reports) */
        if (!t->pend_b || value == t->b || step >= t->last_change + 10 * self->interval) {
            t->pend_b = 0;
            t->b = value;
        }
    } else if (!strcmp(metric, "lr")) {
        if (!t->lr_fixed && isnan(self->lr_opt) && t->decisions == 0 && value > 0)
            t->lr0 = t->lr_sent = value; /* the rate in force before the first change */
    } else if (self->tp_cpu ? !strcmp(metric, "step_cpu_s")
                            : (!strcmp(metric, "samples_per_s") ||
                               !strcmp(metric, "step_time_s"))) {
        if (t->pend_b)
            ; /* measured at the old size */
        else if (t->skip_tp)
            t->skip_tp = 0; /* a window that straddles the change */
        else if (!isnan(t->b) && value > 0)
            s_tp_add(t, t->b, !strcmp(metric, "samples_per_s") ? t->b / value : value);
    } else if (self->plateau_w && !strcmp(metric, s->spec->metric)) {
        k += s_plateau(self, t, step, value, out + k, max - k);
    } else if (!strcmp(metric, "grad_sqnorm_small")) {
        bit = GNS_GS;
    } else if (!strcmp(metric, "grad_sqnorm_big")) {
        bit = GNS_GB;
    } else if (!strcmp(metric, "batch_small")) {
        bit = GNS_BS;
    } else if (!strcmp(metric, "batch_big")) {
        bit = GNS_BB;
    }
    if (bit) {
        if (step != t->pstep) {
            t->pstep = step;
            t->have = 0;
        }
        t->have |= bit;
        if (bit == GNS_GS)
            t->p.gs = value;
        else if (bit == GNS_GB)
            t->p.gb = value;
        else if (bit == GNS_BS)
            t->p.bs = value;
        else
            t->p.bb = value;
        if (t->have == GNS_ALL) {
            t->have = 0;
            k += s_measure(self, t, step, out + k, max - k);
        }
    }
    return k;
}

static void s_on_complete(sched_t *s, long trial_id, const json_t *params,
                          sched_outcome outcome, double value)
{
    sched_bs *self = (sched_bs *)s;
    for (size_t i = 0; i < self->ntrials; i++)
        if (self->trials[i].id == trial_id) { /* finished trials need no state */
            self->trials[i] = self->trials[--self->ntrials];
            return;
        }
}

static json_t *s_save(sched_t *s)
{
    sched_bs *self = (sched_bs *)s;
    json_t *trials = json_array();
    for (size_t i = 0; i < self->ntrials; i++) {
        const bs_trial *t = &self->trials[i];
        json_t *tp = json_array();
        for (int j = 0; j < t->ntp; j++) {
            json_t *ts = json_array();
            for (int q = 0; q < t->tp[j].n; q++)
                json_array_append_new(ts, json_real(t->tp[j].t[q]));
            json_array_append_new(tp,
                                  json_pack("[f,o,i]", t->tp[j].b, ts, t->tp[j].next));
        }
        json_t *o = json_pack(
            "{s:I, s:o, s:o, s:o, s:o, s:I, s:i, s:[o,o,o,o], s:o, s:o, s:I,"
            " s:o, s:i, s:I, s:b, s:o, s:o, s:I, s:I, s:I}",
            "id", (json_int_t)t->id, "b0", sched_json_real(t->b0), "lr0",
            sched_json_real(t->lr0), "b", sched_json_real(t->b), "lr_sent",
            sched_json_real(t->lr_sent), "pstep", (json_int_t)t->pstep, "have", t->have,
            "p", sched_json_real(t->p.gs), sched_json_real(t->p.gb),
            sched_json_real(t->p.bs), sched_json_real(t->p.bb), "ema_g2",
            sched_json_real(t->ema_g2), "ema_tr", sched_json_real(t->ema_tr), "nmeas",
            (json_int_t)t->nmeas, "tp", tp, "flags",
            t->probing * 16 + t->lr_fixed * 8 + t->explored * 4 + t->skip_tp * 2 +
                t->pend_b,
            "last_change", (json_int_t)t->last_change, "ramp", t->ramp, "ramp_from",
            sched_json_real(t->ramp_from), "ramp_to", sched_json_real(t->ramp_to),
            "ramp_start", (json_int_t)t->ramp_start, "ramp_last",
            (json_int_t)t->ramp_last, "decisions", (json_int_t)t->decisions);
        json_object_set_new(o, "last_step", json_integer((json_int_t)t->last_step));
        json_object_set_new(o, "mom", json_real(t->mom));
        json_t *pl = json_array(); /* the plateau window, oldest first */
        for (int j = 0; j < t->npl; j++)
            json_array_append_new(
                pl, json_real(t->pl[(t->pl_next + BS_PL_MAX - t->npl + j) % BS_PL_MAX]));
        json_object_set_new(o, "plateau", pl);
        json_object_set_new(o, "annealing", json_boolean(t->annealing));
        json_object_set_new(o, "undo_b", sched_json_real(t->undo_b));
        json_array_append_new(trials, o);
    }
    return json_pack("{s:I, s:o}", "count", (json_int_t)self->count, "trials", trials);
}

static int s_restore(sched_t *s, const json_t *state)
{
    sched_bs *self = (sched_bs *)s;
    json_int_t count;
    json_t *trials;
    if (json_unpack((json_t *)state, "{s:I, s:o}", "count", &count, "trials", &trials) !=
            0 ||
        count < 0 || !json_is_array(trials))
        return -1;
    self->count = (long)count;
    self->ntrials = 0;
    size_t i;
    json_t *o;
    json_array_foreach(trials, i, o)
    {
        json_t *id = json_object_get(o, "id"), *p = json_object_get(o, "p"),
               *tp = json_object_get(o, "tp");
        if (!json_is_integer(id) || json_array_size(p) != 4 || !json_is_array(tp) ||
            json_array_size(tp) > BS_MAX_TP)
            return -1;
        bs_trial *t = s_trial(self, (long)json_integer_value(id), 1);
        if (!t)
            return -1;
        t->b0 = sched_json_double(o, "b0");
        t->lr0 = sched_json_double(o, "lr0");
        t->b = sched_json_double(o, "b");
        t->lr_sent = sched_json_double(o, "lr_sent");
        t->pstep = (long)json_integer_value(json_object_get(o, "pstep"));
        t->have = (int)json_integer_value(json_object_get(o, "have"));
        double *pv[4] = {&t->p.gs, &t->p.gb, &t->p.bs, &t->p.bb};
        for (size_t j = 0; j < 4; j++) {
            json_t *v = json_array_get(p, j);
            *pv[j] = json_is_number(v) ? json_number_value(v) : NAN;
        }
        t->ema_g2 = sched_json_double(o, "ema_g2");
        t->ema_tr = sched_json_double(o, "ema_tr");
        t->nmeas = (long)json_integer_value(json_object_get(o, "nmeas"));
        if (isnan(t->ema_g2) || isnan(t->ema_tr))
            t->ema_g2 = t->ema_tr = 0, t->nmeas = 0;
        size_t j;
        json_t *e;
        json_array_foreach(tp, j, e)
        {
            json_t *b = json_array_get(e, 0), *ts = json_array_get(e, 1),
                   *nx = json_array_get(e, 2);
            if (!json_is_number(b) || !json_is_array(ts) ||
                json_array_size(ts) > BS_TP_WIN || !json_is_integer(nx) ||
                json_integer_value(nx) < 0 || json_integer_value(nx) >= BS_TP_WIN)
                return -1;
            bs_tp *d = &t->tp[t->ntp++];
            memset(d, 0, sizeof *d);
            d->b = json_number_value(b);
            d->next = (int)json_integer_value(nx);
            size_t q;
            json_t *x;
            json_array_foreach(ts, q, x)
            {
                if (!json_is_number(x))
                    return -1;
                d->t[d->n++] = json_number_value(x);
            }
        }
        int sk =
            (int)json_integer_value(json_object_get(o, "flags")); /* skip_tp, pend_b */
        t->skip_tp = sk >> 1 & 1;
        t->pend_b = sk & 1;
        t->explored = sk >> 2 & 1;
        t->lr_fixed = sk >> 3 & 1;
        t->probing = sk >> 4 & 1;
        t->last_change = (long)json_integer_value(json_object_get(o, "last_change"));
        t->ramp = json_is_true(json_object_get(o, "ramp"));
        t->ramp_from = sched_json_double(o, "ramp_from");
        t->ramp_to = sched_json_double(o, "ramp_to");
        t->ramp_start = (long)json_integer_value(json_object_get(o, "ramp_start"));
        t->ramp_last = (long)json_integer_value(json_object_get(o, "ramp_last"));
        t->decisions = (long)json_integer_value(json_object_get(o, "decisions"));
        t->last_step = (long)json_integer_value(json_object_get(o, "last_step"));
        json_t *mo = json_object_get(o, "mom"); /* absent in older states: 0 */
        t->mom =
            json_is_number(mo) && json_number_value(mo) >= 0 && json_number_value(mo) < 1
                ? json_number_value(mo)
                : 0;
        json_t *pl = json_object_get(o, "plateau"); /* absent in older states: empty */
        if (pl && (!json_is_array(pl) || json_array_size(pl) > BS_PL_MAX))
            return -1;
        json_array_foreach(pl, j, e)
        {
            if (!json_is_number(e))
                return -1;
            t->pl[t->npl++] = json_number_value(e);
        }
        t->pl_next = t->npl % BS_PL_MAX;
        t->annealing = json_is_true(json_object_get(o, "annealing"));
        t->undo_b = sched_json_double(o, "undo_b"); /* absent in older states: NaN */
    }
    return 0;
}

static void s_destroy(sched_t *s)
{
    sched_bs *self = (sched_bs *)s;
    free(self->trials);
    free(self);
}

static const sched_ops s_ops = {
    .name = "batchsize",
    .suggest = s_suggest,
    .on_metric = s_on_metric,
    .on_complete = s_on_complete,
    .save = s_save,
    .restore = s_restore,
    .destroy = s_destroy,
};

/* ---- construction ---- */

sched_t *sched_batchsize_new(const spec_t *spec, char *err, size_t errsize)
{
    /* the options (a set: the order only keeps the list compact) */
    static const char *const keys[] = {
        "type",       "min",       "plateau_window", "probe_interval",
        "min_gain",   "grow_only", "interval",       "grid",
        "momentum",   "warmup",    "prior_overhead", "min_measurements",
        "lr",         "max",       "lr_rule",        "ema",
        "throughput", "seed",      "plateau_delta",  NULL};
    const json_t *o = spec->sched_opts;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v)
    {
        int ok = 0;
        for (int i = 0; keys[i]; i++)
            ok |= !strcmp(key, keys[i]);
        if (!ok) {
            snprintf(err, errsize,
                     "scheduler.%s: unknown option for the batchsize scheduler", key);
            return NULL;
        }
    }
    double dmin = 16, dmax = 4096;
    for (size_t i = 0; i < spec->nparams; i++)
        if (!strcmp(spec->params[i].name, "batch_size") &&
            spec->params[i].type == SPEC_INT) {
            dmin = spec->params[i].low;
            dmax = spec->params[i].high;
        }
    double bmin, bmax, interval, warmup, mm, lr, probe, plw;
    sched_bs *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->base.ops = &s_ops;
    self->base.spec = spec;
    if (sched_opt_num(o, "scheduler", "min", dmin, 1, 1e9, 1, &bmin, err, errsize) ||
        sched_opt_num(o, "scheduler", "max", dmax, 1, 1e9, 1, &bmax, err, errsize) ||
        sched_opt_num(o, "scheduler", "interval", 200, 1, 1e12, 1, &interval, err,
                      errsize) ||
        sched_opt_num(o, "scheduler", "probe_interval", interval, 1, 1e12, 1, &probe, err,
                      errsize) ||
        sched_opt_num(o, "scheduler", "warmup", 100, 0, 1e12, 1, &warmup, err, errsize) ||
        sched_opt_num(o, "scheduler", "ema", 0.95, 0, 0.9999, 0, &self->ema, err,
                      errsize) ||
        sched_opt_num(o, "scheduler", "min_measurements", 3, 1, 1e9, 1, &mm, err,
                      errsize) ||
        sched_opt_num(o, "scheduler", "min_gain", 0.1, 0, 100, 0, &self->min_gain, err,
                      errsize) ||
        sched_opt_num(o, "scheduler", "prior_overhead", 0.5, 0, 0.99, 0,
                      &self->prior_overhead, err, errsize) ||
        sched_opt_num(o, "scheduler", "lr", NAN, 1e-300, 1e300, 0, &lr, err, errsize) ||
        sched_opt_num(o, "scheduler", "momentum", NAN, 0, 0.999, 0, &self->mom_opt, err,
                      errsize) ||
        sched_opt_num(o, "scheduler", "plateau_window", 0, 0, BS_PL_MAX, 1, &plw, err,
                      errsize) ||
        sched_opt_num(o, "scheduler", "plateau_delta", 0.01, 0, 1e300, 0,
                      &self->plateau_delta, err, errsize))
        goto fail;
    if (plw > 0 && plw < 3) {
        snprintf(err, errsize, "scheduler.plateau_window: must be 0 (off) or 3 to %d",
                 BS_PL_MAX);
        goto fail;
    }
    self->plateau_w = (int)plw;
    if (bmax < bmin) {
        snprintf(err, errsize, "scheduler.max: must be >= min (%g)", bmin);
        goto fail;
    }
    self->bmin = (long)bmin;
    self->bmax = (long)bmax;
    self->interval = (long)interval;
    self->probe = (long)fmin(probe, interval);
    self->warmup = (long)warmup;
    self->min_meas = (long)mm;
    self->lr_opt = lr;
    json_t *g = json_object_get(o, "grid");
    if (g) {
        const char *gs = json_string_value(g);
        if (!gs || (strcmp(gs, "pow2") && strcmp(gs, "int"))) {
            snprintf(err, errsize, "scheduler.grid: must be \"pow2\" or \"int\"");
            goto fail;
        }
        self->grid_int = !strcmp(gs, "int");
    }
    if (!self->grid_int && (1L << (long)floor(log2((double)self->bmax))) < self->bmin) {
        snprintf(err, errsize,
                 "scheduler.min: no power of two in [%ld, %ld] (use \"grid\": \"int\")",
                 self->bmin, self->bmax);
        goto fail;
    }
    json_t *go = json_object_get(o, "grow_only");
    if (go && !json_is_boolean(go)) {
        snprintf(err, errsize, "scheduler.grow_only: must be true or false");
        goto fail;
    }
    self->grow_only = json_is_true(go);
    json_t *tpo = json_object_get(o, "throughput");
    if (tpo) {
        const char *ts = json_string_value(tpo);
        if (!ts || (strcmp(ts, "wall") && strcmp(ts, "cpu"))) {
            snprintf(err, errsize, "scheduler.throughput: must be \"wall\" or \"cpu\"");
            goto fail;
        }
        self->tp_cpu = !strcmp(ts, "cpu");
    }
    json_t *r = json_object_get(o, "lr_rule");
    if (r) {
        const char *rs = json_string_value(r);
        self->rule = -1;
        for (int i = 0; rs && i < 4; i++)
            if (!strcmp(rs, s_rules[i]))
                self->rule = i;
        if (self->rule < 0) {
            snprintf(err, errsize,
                     "scheduler.lr_rule: must be \"adascale\", \"sqrt\", \"linear\" or "
                     "\"none\"");
            goto fail;
        }
    }
    return &self->base;
fail:
    free(self);
    return NULL;
}
