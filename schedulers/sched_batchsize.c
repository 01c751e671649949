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

    This file: the scheduler's interface (sched_ops), its state's save and
    restore, and its options. The per-trial measurements and decisions are in
    sched_bs_trial.c, the estimators in sched_bs_gns.c, the shared state in
    sched_bs_internal.h.
*/
#include "sched_bs_internal.h"
#include "../common/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- sched_ops ---- */

static int s_suggest(sched_t *s, long trial_id, json_t **params)
{
    sched_bs *self = (sched_bs *)s;
    sched_rng rng;
    sched_rng_seed(&rng, (unsigned long long)s->spec->seed,
                   (unsigned long long)self->count);
    json_t *p = sched_random_params(s->spec, &rng);
    self->count++;
    bs_trial *t =
        sched__bs_trial(self, trial_id, 1); /* B0 and lr0 from the params, when there */
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
    bs_trial *t = sched__bs_trial(self, trial_id, 1);
    if (!t)
        return -1;
    if (step < t->last_step) { /* a retry starts over: so does its state */
        double b0 = t->b0, lr0 = t->lr0, mom = t->mom;
        int fixed = t->lr_fixed;
        sched__bs_trial_init(t, trial_id);
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
    int k = sched__bs_ramp(self, t, step, out, max);
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
            sched__bs_tp_add(t, t->b,
                             !strcmp(metric, "samples_per_s") ? t->b / value : value);
    } else if (self->plateau_w && !strcmp(metric, s->spec->metric)) {
        k += sched__bs_plateau(self, t, step, value, out + k, max - k);
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
            k += sched__bs_measure(self, t, step, out + k, max - k);
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
        bs_trial *t = sched__bs_trial(self, (long)json_integer_value(id), 1);
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
    const char *key = sched_opt_unknown(o, keys);
    if (key) {
        snprintf(err, errsize, "scheduler.%s: unknown option for the batchsize scheduler",
                 key);
        return NULL;
    }
    double dmin = 16, dmax = 4096;
    for (size_t i = 0; i < spec->nparams; i++)
        if (!strcmp(spec->params[i].name, "batch_size") &&
            spec->params[i].type == SPEC_INT) {
            dmin = spec->params[i].low;
            dmax = spec->params[i].high;
        }
    double bmin, bmax, interval, warmup, mm, lr, probe, plw;
    sched_bs *self = sched_alloc(sizeof *self, &s_ops, spec, err, errsize);
    if (!self)
        return NULL;
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
        self->rule = util_name_index(sched__bs_rules, 4, rs);
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