/*  sched_bs_trial.c - the batch-size scheduler's per-trial state and decisions:
    the throughput table and its fit, the goodput decision on each complete
    gradient-noise measurement, the plateau (annealing) decision and the lr
    warmup ramp. Called by the scheduler's interface in sched_batchsize.c; what
    the decisions are is told in that file's header and docs/design.md.
*/
#include "sched_bs_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const sched__bs_rules[4] = {"adascale", "sqrt", "linear", "none"};

/* ---- per-trial state ---- */

void sched__bs_trial_init(bs_trial *t, long id)
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

bs_trial *sched__bs_trial(sched_bs *self, long id, int create)
{
    int created;
    bs_trial *t =
        SCHED_ROWS_GET(self->trials, self->ntrials, self->cap, id, create, &created);
    if (created)
        sched__bs_trial_init(t, id);
    return t;
}

void sched__bs_tp_add(bs_trial *t, double b, double step_time)
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
    qsort(v, (size_t)e->n, sizeof v[0], sched__bs_cmp_double);
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
    out->kind = INS_SET;
    out->args = json_pack("{s:s, s:o}", "name", name, "value", value);
    if (decision)
        json_object_set_new(out->args, "decision", decision);
    snprintf(out->reason, sizeof out->reason, "%s", reason);
}

/* A complete measurement at `step`: fold it in and maybe decide. */
int sched__bs_measure(sched_bs *self, bs_trial *t, long step, sched_instr *out, int max)
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
        "lr_rule", sched__bs_rules[self->rule], "measurements", (json_int_t)t->nmeas,
        "explore", explore);
    json_object_set_new(d, "step", json_integer((json_int_t)step));
    json_object_set_new(d, "b_noise", json_real(bnoise));
    json_object_set_new(d, "momentum", json_real(t->mom));
    char reason[128];
    snprintf(reason, sizeof reason,
             "batchsize: B_simple %.4g, batch %.0f->%.0f, %s x%.3g, "
             "lr %.3g->%.3g (%s)",
             bsimple, t->b, best_b, explore ? "explore, goodput" : "goodput",
             best_g / cur_g, lr_old, lr_new, sched__bs_rules[self->rule]);
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
                     best_b, sched__bs_rules[self->rule]);
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
int sched__bs_plateau(sched_bs *self, bs_trial *t, long step, double value,
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
int sched__bs_ramp(sched_bs *self, bs_trial *t, long step, sched_instr *out, int max)
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
