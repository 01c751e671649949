/*  ctl_guard.c - a guarded change (`trial set ID k=v --guard`, see
    ctl_interv.h for its state machine).

    The trial first checkpoints (or its latest checkpoint is used when it
    is at its last reported step), the change is sent, and the next
    `watch_steps` reports (default 5) are watched: each value of the loss
    metric (the spec's guard.metric, "train_loss" by default) goes through
    the divergence guard's loss-jump test (sched_jump_judge, with the
    spec's guard.jump/ema/warmup) against the average of the reports before
    the change, and a NaN/inf objective counts as divergence. After the
    window the trend is judged: the window's mean loss above (1 +
    tolerance) × that average, or the objective worse than before the
    change by more than tolerance × |its value|, is a trend clearly worse
    (tolerance default 0.2). Either reverts: the trial loads the
    checkpoint with the old values (a new params generation), or, with
    `--guard=values`, gets the old values back by `set`. Otherwise the
    change is kept. Each outcome is an event `guarded_change` with the
    evidence (the values before and after the change).

    Persisted data (interventions.data): values, old, mode, watch_steps,
    tolerance, who, metric, ckpt {path, step}, apply_step, base {ema, n,
    objective}, ema, n, seen, last_step, window [[step, name, value]],
    outcome, reason, evidence.
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_WATCH_DEFAULT 5
#define GUARD_TOLERANCE_DEFAULT 0.2
#define GUARD_BASE_POINTS 20 /* reports before the change that make its average */

/* ---- helpers ---- */

static double s_num(const json_t *o, const char *k, double dflt)
{
    return json_object_get(o, k) ? sched_json_double(o, k) : dflt;
}

/* "lr=0.4, momentum=0.9" of an object of values. */
static void s_values_text(const json_t *values, char *buf, size_t size)
{
    buf[0] = 0;
    const char *key;
    json_t *v;
    size_t n = 0;
    json_object_foreach((json_t *)values, key, v)
    {
        char val[64];
        if (json_is_string(v))
            snprintf(val, sizeof val, "%s", json_string_value(v));
        else if (json_is_integer(v))
            snprintf(val, sizeof val, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else if (json_is_number(v))
            snprintf(val, sizeof val, "%g", json_number_value(v));
        else
            snprintf(val, sizeof val, "null");
        n += (size_t)snprintf(buf + n, n < size ? size - n : 0, "%s%s=%s", n ? ", " : "",
                              key, val);
        if (n >= size)
            return;
    }
}

/* The answer to the waiting request (and the event) of a decided change. */
static json_t *s_outcome_fields(const ctl_iv *iv)
{
    json_t *o = json_pack(
        "{s:s, s:I, s:I, s:O, s:O}", "guard", store_iv_state_name(IV_GUARD, iv->state),
        "trial", (json_int_t)iv->trial_id, "intervention", (json_int_t)iv->id, "values",
        json_object_get(iv->data, "values"), "old", json_object_get(iv->data, "old"));
    json_t *x;
    if ((x = json_object_get(iv->data, "reason")))
        json_object_set(o, "reason", x);
    if ((x = json_object_get(iv->data, "evidence")))
        json_object_set(o, "evidence", x);
    return o;
}

/* A final state: the event, the log line, the waiter's answer. */
static void s_finish(ctl_t *c, ctl_iv *iv, store_guard_state to, const char *reason)
{
    json_object_set_new(iv->data, "reason", json_string(reason));
    if (ctl__iv_move(c, iv, to) != 0)
        return;
    json_t *detail = s_outcome_fields(iv);
    store_event_add(c->store, util_wall(), iv->study_id, iv->trial_id, "controller",
                    "guarded_change", detail, 1);
    log_info("ctl", "trial %ld: guarded change %s: %s", iv->trial_id,
             store_iv_state_name(IV_GUARD, to), reason);
    if (!iv->waiter.len) {
        json_decref(detail);
        return;
    }
    json_t *r;
    if (to == GUARD_REFUSED) {
        r = wire_error(iv->waiter_req, "refused", "%s", reason);
        json_decref(detail);
    } else {
        r = wire_ok(iv->waiter_req);
        json_object_update(r, detail);
        json_decref(detail);
    }
    ctl__iv_answer(c, iv, r);
}

/* The trial's values of the names in `values` (null when it has none). */
static json_t *s_old_values(const ctl_trial *t, const json_t *values)
{
    json_t *old = json_object();
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)values, key, v)
    {
        json_t *x = json_object_get(t->row.params, key);
        json_object_set_new(old, key, x ? json_incref(x) : json_null());
    }
    return old;
}

/* The old values that can be sent back (those the trial had). */
static json_t *s_revert_values(const ctl_iv *iv)
{
    json_t *back = json_object();
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(iv->data, "old"), key, v)
    {
        if (!json_is_null(v))
            json_object_set(back, key, v);
    }
    return back;
}

/* ---- the steps ---- */

static void s_send_checkpoint(ctl_t *c, ctl_iv *iv, ctl_trial *t)
{
    iv->instr = ctl__instruct(c, t, "checkpoint", NULL, ctl__iv_str(iv, "who"),
                              "guarded change: a checkpoint to go back to", NULL, 0);
}

static void s_send_change(ctl_t *c, ctl_iv *iv, ctl_trial *t)
{
    iv->instr = ctl__set_send(c, t, json_object_get(iv->data, "values"),
                              ctl__iv_str(iv, "who"), NULL, 0, 0);
}

/* The revert: a load of the checkpoint with the old values (a new params
   generation once applied), or a set of the old values. */
static void s_send_revert(ctl_t *c, ctl_iv *iv, ctl_trial *t)
{
    json_t *back = s_revert_values(iv);
    if (!strcmp(ctl__iv_str(iv, "mode"), "values")) {
        iv->instr =
            json_object_size(back) ? ctl__set_send(c, t, back, "guard", NULL, 0, 0) : -1;
    } else {
        json_t *ck = json_object_get(iv->data, "ckpt");
        json_t *args =
            json_pack("{s:O, s:O}", "path", json_object_get(ck, "path"), "params", back);
        iv->instr =
            ctl__instruct(c, t, "load", args, "guard",
                          "guarded change reverted: back to the checkpoint", NULL, 0);
        json_decref(args);
    }
    json_decref(back);
}

/* The average of the loss before the change, from the stored reports. */
static void s_baseline(ctl_t *c, ctl_iv *iv, ctl_trial *t)
{
    const char *metric = ctl__iv_str(iv, "metric");
    json_t *series = store_metrics_series(c->store, t->row.id, metric);
    size_t n = json_array_size(series),
           from = n > GUARD_BASE_POINTS ? n - GUARD_BASE_POINTS : 0;
    double alpha = s_num(iv->data, "alpha", 0.2), ema = NAN;
    long k = 0;
    for (size_t i = from; i < n; i++) {
        double v;
        if (wire_to_double(json_array_get(json_array_get(series, i), 1), &v) != 0 ||
            !isfinite(v))
            continue;
        ema = k == 0 ? v : ema + alpha * (v - ema);
        k++;
    }
    json_decref(series);
    json_t *base = json_pack(
        "{s:o, s:I, s:o}", "ema", sched_json_real(ema), "n", (json_int_t)k, "objective",
        sched_json_real(wire_is_none(t->row.last_value) ? NAN : t->row.last_value));
    json_object_set_new(iv->data, "base", base);
    json_object_set_new(iv->data, "ema", sched_json_real(ema));
    json_object_set_new(iv->data, "n", json_integer(k));
    json_object_set_new(iv->data, "apply_step", json_integer(t->row.last_step));
    json_object_set_new(iv->data, "last_step", json_integer(t->row.last_step));
    json_object_set_new(iv->data, "seen", json_integer(0));
    json_object_set_new(iv->data, "window", json_array());
}

/* Applied: the watch starts from the trial's last reported step. */
static void s_start_watch(ctl_t *c, ctl_iv *iv, ctl_trial *t)
{
    s_baseline(c, iv, t);
    ctl__iv_move(c, iv, GUARD_WATCH);
}

/* Diverged: the evidence, then the revert. */
static void s_revert(ctl_t *c, ctl_iv *iv, ctl_trial *t, const char *what)
{
    char vals[200], old[200], reason[700];
    s_values_text(json_object_get(iv->data, "values"), vals, sizeof vals);
    s_values_text(json_object_get(iv->data, "old"), old, sizeof old);
    json_t *base = json_object_get(iv->data, "base");
    json_t *ev =
        json_pack("{s:s, s:O, s:O, s:O, s:I, s:I}", "what", what, "before", base,
                  "window", json_object_get(iv->data, "window"), "checkpoint",
                  json_object_get(iv->data, "ckpt") ? json_object_get(iv->data, "ckpt")
                                                    : json_null(),
                  "apply_step", (json_int_t)ctl__iv_long(iv, "apply_step", -1), "reports",
                  (json_int_t)ctl__iv_long(iv, "seen", 0));
    json_object_set_new(iv->data, "evidence", ev);
    snprintf(reason, sizeof reason, "%s after %s: %s; back to %s%s", vals, "the change",
             what, old,
             strcmp(ctl__iv_str(iv, "mode"), "values") ? " from the checkpoint"
                                                       : " (values only)");
    json_object_set_new(iv->data, "reason", json_string(reason));
    if (ctl__iv_move(c, iv, GUARD_REVERT) == 0)
        s_send_revert(c, iv, t);
    if (iv->instr < 0 && iv->state == GUARD_REVERT)
        s_finish(c, iv, GUARD_FAILED, "the revert could not be sent");
}

/* The window is complete: the trend against the average before. */
static void s_judge_trend(ctl_t *c, ctl_iv *iv, ctl_trial *t)
{
    json_t *base = json_object_get(iv->data, "base");
    double tol = s_num(iv->data, "tolerance", GUARD_TOLERANCE_DEFAULT);
    double bema = sched_json_double(base, "ema"),
           bobj = sched_json_double(base, "objective");
    const char *metric = ctl__iv_str(iv, "metric");
    const spec_t *spec = t->study->spec;
    double sum = 0, lastobj = NAN;
    long nloss = 0;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(iv->data, "window"), i, p)
    {
        const char *name = json_string_value(json_array_get(p, 1));
        double v;
        if (wire_to_double(json_array_get(p, 2), &v) != 0)
            v = NAN;
        if (name && !strcmp(name, metric)) {
            sum += v;
            nloss++;
        } else if (name && !strcmp(name, spec->metric)) {
            lastobj = v;
        }
    }
    double mean = nloss ? sum / nloss : NAN;
    char what[400];
    if (nloss && isfinite(bema) && mean > (1 + tol) * bema) {
        snprintf(what, sizeof what,
                 "%s averaged %.4g over %ld reports, above %.4g (1 + tolerance %g) × "
                 "its average %.4g before",
                 metric, mean, nloss, 1 + tol, tol, bema);
        s_revert(c, iv, t, what);
        return;
    }
    if (isfinite(lastobj) && isfinite(bobj) && spec_better(spec, bobj, lastobj) &&
        fabs(lastobj - bobj) > tol * fabs(bobj)) {
        snprintf(what, sizeof what,
                 "%s %.4g after the change against %.4g before: worse by more than "
                 "tolerance %g × %.4g",
                 spec->metric, lastobj, bobj, tol, fabs(bobj));
        s_revert(c, iv, t, what);
        return;
    }
    char vals[200], reason[600];
    s_values_text(json_object_get(iv->data, "values"), vals, sizeof vals);
    if (nloss && isfinite(bema))
        snprintf(reason, sizeof reason,
                 "%s kept: %ld reports watched, %s averaged %.4g against %.4g before "
                 "(tolerance %g)",
                 vals, ctl__iv_long(iv, "seen", 0), metric, mean, bema, tol);
    else
        snprintf(reason, sizeof reason, "%s kept: %ld reports watched, no divergence",
                 vals, ctl__iv_long(iv, "seen", 0));
    json_object_set_new(iv->data, "evidence",
                        json_pack("{s:O, s:O, s:o, s:I, s:I}", "before", base, "window",
                                  json_object_get(iv->data, "window"), "mean",
                                  sched_json_real(mean), "apply_step",
                                  (json_int_t)ctl__iv_long(iv, "apply_step", -1),
                                  "reports", (json_int_t)ctl__iv_long(iv, "seen", 0)));
    s_finish(c, iv, GUARD_KEPT, reason);
}

/* ---- events ---- */

static void s_on_instr_done(ctl_t *c, ctl_iv *iv, int applied, const char *why)
{
    ctl_trial *t = ctl__trial_by_id(c, iv->trial_id);
    char reason[600];
    switch ((store_guard_state)iv->state) {
    case GUARD_CHECKPOINT:
        /* applied: its checkpoint_done follows (s_on_checkpoint) */
        if (!applied || !t) {
            snprintf(reason, sizeof reason,
                     "trial %ld cannot checkpoint (%s): --guard needs a checkpoint to go "
                     "back to; --guard=values reverts the values only; nothing was "
                     "changed",
                     iv->trial_id, why && *why ? why : "no checkpoint");
            s_finish(c, iv, GUARD_REFUSED, reason);
        }
        return;
    case GUARD_APPLY:
        if (!applied || !t) {
            snprintf(reason, sizeof reason, "the trial refused the change: %s",
                     why && *why ? why : "no reason given");
            s_finish(c, iv, GUARD_REFUSED, reason);
            return;
        }
        s_start_watch(c, iv, t);
        return;
    case GUARD_REVERT:
        if (!applied || !t) {
            snprintf(reason, sizeof reason, "%s; but the revert failed: %s",
                     ctl__iv_str(iv, "reason"), why && *why ? why : "refused");
            s_finish(c, iv, GUARD_FAILED, reason);
            return;
        }
        if (strcmp(ctl__iv_str(iv, "mode"), "values")) { /* a load: a new generation */
            json_t *back = s_revert_values(iv);
            json_object_update(t->row.params, back);
            json_decref(back);
            if (store_trial_set_params(c->store, t->row.id, t->row.generation + 1,
                                       t->row.parent, t->row.params) == 0) {
                t->row.generation++;
                ctl__trial_save(c, t);
            }
        }
        snprintf(reason, sizeof reason, "%s", ctl__iv_str(iv, "reason"));
        s_finish(c, iv, GUARD_REVERTED, reason);
        return;
    default:
        return;
    }
}

static void s_on_checkpoint(ctl_t *c, ctl_iv *iv, ctl_trial *t)
{
    if (iv->state != GUARD_CHECKPOINT)
        return;
    json_object_set_new(iv->data, "ckpt",
                        json_pack("{s:s, s:I}", "path", t->row.checkpoint, "step",
                                  (json_int_t)t->row.checkpoint_step));
    if (ctl__iv_move(c, iv, GUARD_APPLY) == 0)
        s_send_change(c, iv, t);
}

static void s_on_metrics(ctl_t *c, ctl_iv *iv, ctl_trial *t, const store_point *pts,
                         size_t n)
{
    if (iv->state != GUARD_WATCH)
        return;
    const spec_t *spec = t->study->spec;
    const char *metric = ctl__iv_str(iv, "metric");
    long apply_step = ctl__iv_long(iv, "apply_step", -1);
    long last = ctl__iv_long(iv, "last_step", apply_step),
         seen = ctl__iv_long(iv, "seen", 0);
    long K = ctl__iv_long(iv, "watch_steps", GUARD_WATCH_DEFAULT);
    double ema = sched_json_double(iv->data, "ema");
    long nh = ctl__iv_long(iv, "n", 0);
    sched_jump_test test = {s_num(iv->data, "jump", 3), s_num(iv->data, "alpha", 0.2),
                            ctl__iv_long(iv, "warmup", 3)};
    json_t *window = json_object_get(iv->data, "window");
    char what[300] = "";
    for (size_t i = 0; i < n && !what[0] && seen < K; i++) {
        const store_point *p = &pts[i];
        int is_loss = !strcmp(p->name, metric), is_obj = !strcmp(p->name, spec->metric);
        if (p->step <= apply_step || (!is_loss && !is_obj))
            continue;
        json_array_append_new(window, json_pack("[I, s, o]", (json_int_t)p->step, p->name,
                                                sched_json_real(p->value)));
        if (is_loss)
            sched_jump_judge(&test, metric, p->step, p->value, &ema, &nh, what,
                             sizeof what);
        else if (!isfinite(p->value))
            snprintf(what, sizeof what, "%s is %s at step %ld", p->name,
                     isnan(p->value) ? "nan" : "inf", p->step);
        if (p->step > last) {
            last = p->step;
            seen++;
        }
    }
    json_object_set_new(iv->data, "ema", sched_json_real(ema));
    json_object_set_new(iv->data, "n", json_integer(nh));
    json_object_set_new(iv->data, "last_step", json_integer(last));
    json_object_set_new(iv->data, "seen", json_integer(seen));
    if (what[0])
        s_revert(c, iv, t, what);
    else if (seen >= K)
        s_judge_trend(c, iv, t);
    else
        ctl__iv_save(c, iv);
}

static void s_on_tick(ctl_t *c, ctl_iv *iv, double now)
{
    (void)now;
    ctl_trial *t = ctl__trial_by_id(c, iv->trial_id);
    if (t && ctl_trial_active(t))
        return;
    /* instructions of an ended trial resolve as not applied (their own
       path); a watch has none */
    if (iv->state == GUARD_WATCH)
        s_finish(c, iv, GUARD_ENDED, "the trial ended while the change was watched");
    else if (iv->instr < 0 && iv->state == GUARD_REVERT)
        s_finish(c, iv, GUARD_FAILED, "the trial ended before the revert");
    else if (iv->instr < 0)
        s_finish(c, iv, GUARD_REFUSED, "the trial ended before the change");
}

static void s_on_resume(ctl_t *c, ctl_iv *iv)
{
    ctl_trial *t = ctl__trial_by_id(c, iv->trial_id);
    if (!t || !ctl_trial_active(t))
        return; /* the tick finishes it */
    switch ((store_guard_state)iv->state) {
    case GUARD_CHECKPOINT:
        s_send_checkpoint(c, iv, t);
        return;
    case GUARD_APPLY:
        s_send_change(c, iv, t);
        return;
    case GUARD_REVERT:
        s_send_revert(c, iv, t);
        return;
    default:
        return;
    }
}

const ctl_iv_ops ctl__guard_ops = {
    .instr_done = s_on_instr_done,
    .metrics = s_on_metrics,
    .tick = s_on_tick,
    .checkpoint = s_on_checkpoint,
    .resume = s_on_resume,
};

/* ---- the start ---- */

int ctl__guard_start(ctl_t *c, ctl_trial *t, const json_t *values, const json_t *guard,
                     const char *who, const wire_peer *from, long req, double wait_s,
                     const char **code, char *err, size_t size)
{
    const char *mode = json_is_object(guard)
                           ? json_string_value(json_object_get(guard, "mode"))
                           : "checkpoint";
    json_t *ws = json_object_get(guard, "watch_steps"),
           *tol = json_object_get(guard, "tolerance");
    long K = ws ? (long)json_integer_value(ws) : GUARD_WATCH_DEFAULT;
    double tolerance = tol ? json_number_value(tol) : GUARD_TOLERANCE_DEFAULT;
    *code = "malformed";
    if (!json_is_object(guard) || !mode ||
        (strcmp(mode, "checkpoint") && strcmp(mode, "values"))) {
        snprintf(err, size,
                 "field 'guard': expected {\"mode\": \"checkpoint\" or \"values\", "
                 "\"watch_steps\"?, \"tolerance\"?}");
        return -1;
    }
    if ((ws && (!json_is_integer(ws) || K < 1 || K > 100000)) ||
        (tol && (!json_is_number(tol) || !(tolerance >= 0) || tolerance > 100))) {
        snprintf(err, size,
                 "guard: watch_steps must be a whole number from 1 to 100000 and "
                 "tolerance a number from 0 to 100");
        return -1;
    }
    *code = "bad_state";
    if (!ctl_trial_active(t) || t->plan != PLAN_NONE) {
        snprintf(err, size, "trial %ld is not running (%s): a guarded change needs it",
                 t->row.id, store_trial_state_name(t->row.state));
        return -1;
    }
    if (ctl__iv_busy(c, t, err, size))
        return -1;
    sched_jump_test test;
    char metric[64], why[200];
    if (sched_jump_test_of(t->study->spec, &test, metric, sizeof metric, why,
                           sizeof why) != 0) {
        *code = "internal";
        snprintf(err, size, "%s", why);
        return -1;
    }
    int by_values = !strcmp(mode, "values");
    /* the latest checkpoint serves when it is at the last reported step */
    int have_ckpt = t->row.checkpoint[0] && t->row.checkpoint_step >= t->row.last_step &&
                    t->row.last_step >= 0;
    json_t *data = json_pack(
        "{s:O, s:o, s:s, s:I, s:f, s:s, s:s, s:f, s:f, s:I}", "values", values, "old",
        s_old_values(t, values), "mode", mode, "watch_steps", (json_int_t)K, "tolerance",
        tolerance, "who", who ? who : "cli", "metric", metric, "jump", test.jump, "alpha",
        test.alpha, "warmup", (json_int_t)test.warmup);
    if (!by_values && have_ckpt)
        json_object_set_new(data, "ckpt",
                            json_pack("{s:s, s:I}", "path", t->row.checkpoint, "step",
                                      (json_int_t)t->row.checkpoint_step));
    store_guard_state first = by_values || have_ckpt ? GUARD_APPLY : GUARD_CHECKPOINT;
    ctl_iv *iv = ctl__iv_add(c, IV_GUARD, t, first, data);
    if (!iv) {
        *code = "internal";
        snprintf(err, size, "cannot record the guarded change");
        return -1;
    }
    char vals[200];
    s_values_text(values, vals, sizeof vals);
    json_t *detail = json_pack("{s:I, s:O, s:s, s:I, s:f}", "intervention",
                               (json_int_t)iv->id, "values", values, "mode", mode,
                               "watch_steps", (json_int_t)K, "tolerance", tolerance);
    store_event_add(c->store, util_wall(), iv->study_id, iv->trial_id, who ? who : "cli",
                    "guarded_change", detail, -1);
    json_decref(detail);
    if (from) {
        iv->waiter = *from;
        iv->waiter_req = req;
        iv->wait_s = wait_s;
        iv->wait_until = wait_s > 0 ? util_now() + wait_s : 0;
    }
    if (first == GUARD_CHECKPOINT)
        s_send_checkpoint(c, iv, t);
    else
        s_send_change(c, iv, t);
    log_info("ctl", "trial %ld: guarded change %s (watch %ld reports, tolerance %g, %s)",
             t->row.id, vals, K, tolerance, mode);
    return 0;
}
