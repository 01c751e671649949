/*  ctl_fork.c - a live fork of a running trial (`trial fork ID lr=0.1
    lr=0.4 [--steps K] [--keep best|all]`, see ctl_interv.h for its state
    machine).

    The parent checkpoints (its latest checkpoint serves when it is at its
    last reported step); then each sibling is a new trial of the parent's
    study (the study's trial budget grows by their number, as `study
    extend` does, so the scheduler keeps its own) with the parent's params
    and its changed values, lineage parent = the forked trial (params
    generation 1), starting from the checkpoint (JIZHI_LOAD_CHECKPOINT).
    They wait in the queue like any pending trial: the study's parallel
    budget and the owner's quota hold. The parent keeps running as the
    control. Each sibling's result is its objective at the first report at
    or past fork step + K (default 10), or its last one when it ends
    first (none: it ranks last); each is started with JIZHI_EVAL_AT_STEP =
    fork step + K, asking it to report its objective at that step (one
    that ignores it is judged at its next regular report). Once every
    sibling has one, or on `--decide` (the latest objective of each
    then), the best by the objective continues and the others are stopped
    (keep best), or all continue (keep all). The decision is an event `fork_decided`.

    Persisted data (interventions.data): values [objects], steps, keep,
    who, ckpt {path, step}, fork_step, siblings [ids], results {id: value
    or null}, decision {best, kept, stopped}, reason.
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORK_STEPS_DEFAULT 10
#define FORK_MAX_SIBLINGS 16

static json_t *s_fields(const ctl_iv *iv)
{
    json_t *o = json_pack("{s:s, s:I, s:I, s:O, s:O}", "fork",
                          store_iv_state_name(IV_FORK, iv->state), "trial",
                          (json_int_t)iv->trial_id, "intervention", (json_int_t)iv->id,
                          "values", json_object_get(iv->data, "values"), "siblings",
                          json_object_get(iv->data, "siblings"));
    const char *const keys[] = {"fork_step", "results", "decision", "reason",
                                "steps",     "keep",    "waiting"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *x = json_object_get(iv->data, keys[i]);
        if (x)
            json_object_set(o, keys[i], x);
    }
    return o;
}

static void s_refuse(ctl_t *c, ctl_iv *iv, const char *reason)
{
    json_object_set_new(iv->data, "reason", json_string(reason));
    if (ctl__iv_move(c, iv, FORK_REFUSED) != 0)
        return;
    json_t *d = s_fields(iv);
    store_event_add(c->store, util_wall(), iv->study_id, iv->trial_id, "controller",
                    "fork_refused", d, 1);
    json_decref(d);
    log_info("ctl", "trial %ld: fork refused: %s", iv->trial_id, reason);
    ctl__iv_answer(c, iv, wire_error(iv->waiter_req, "refused", "%s", reason));
}

static void s_send_checkpoint(ctl_t *c, ctl_iv *iv, ctl_trial *t)
{
    iv->instr = ctl__instruct(c, t, "checkpoint", NULL, ctl__iv_str(iv, "who"),
                              "fork: the checkpoint its siblings start from", NULL, 0);
}

/* The step a sibling is judged at: fork step + K. Each sibling is asked
   to report its objective there (JIZHI_EVAL_AT_STEP at its start), so the
   decision does not wait for the program's next regular evaluation (with
   jizhi-train's every 50 steps and a fork at step 608, K 100 was judged at
   step 750: 42 more steps of every sibling, all on the machine at once). */
static long s_judge_step(const ctl_iv *iv)
{
    return ctl__iv_long(iv, "fork_step", 0) +
           ctl__iv_long(iv, "steps", FORK_STEPS_DEFAULT);
}

/* The siblings, from the parent's checkpoint. */
static void s_create_siblings(ctl_t *c, ctl_iv *iv, ctl_trial *parent)
{
    ctl_study *s = parent->study;
    json_t *values = json_object_get(iv->data, "values");
    long n = (long)json_array_size(values);
    const char *code;
    char err[300];
    if (ctl__study_extend(c, s, n, ctl__iv_str(iv, "who"), &code, err, sizeof err) != 0) {
        s_refuse(c, iv, err);
        return;
    }
    const char *path = parent->row.checkpoint;
    json_object_set_new(iv->data, "ckpt",
                        json_pack("{s:s, s:I}", "path", path, "step",
                                  (json_int_t)parent->row.checkpoint_step));
    json_object_set_new(iv->data, "fork_step", json_integer(parent->row.checkpoint_step));
    json_t *ids = json_array(), *results = json_object();
    size_t i;
    json_t *v;
    json_array_foreach(values, i, v)
    {
        json_t *params = json_deep_copy(parent->row.params);
        json_object_update(params, v);
        spec_params_prune(s->spec, params);
        ctl_trial *t = ctl__trial_create(c, s, c->next_trial_id++, params);
        if (!t)
            continue;
        t->row.generation = 1;
        t->row.parent = parent->row.id;
        store_trial_set_params(c->store, t->row.id, 1, parent->row.id, t->row.params);
        ctl__trial_save(c, t);
        snprintf(t->load_on_start, sizeof t->load_on_start, "%s", path);
        t->eval_on_start = s_judge_step(iv);
        json_array_append_new(ids, json_integer(t->row.id));
        char key[32];
        snprintf(key, sizeof key, "%ld", t->row.id);
        json_object_set_new(results, key, json_null());
    }
    json_object_set_new(iv->data, "siblings", ids);
    json_object_set_new(iv->data, "results", results);
    if (ctl__iv_move(c, iv, FORK_RUNNING) != 0)
        return;
    char why[200];
    ctl_trial *last = ctl__trial_by_id(
        c, (long)json_integer_value(json_array_get(ids, json_array_size(ids) - 1)));
    if (last && ctl__study_waits(c, s, last, why, sizeof why)) /* the queue says why */
        json_object_set_new(iv->data, "waiting", json_string(why));
    json_t *d = s_fields(iv);
    store_event_add(c->store, util_wall(), iv->study_id, iv->trial_id,
                    ctl__iv_str(iv, "who"), "fork_started", d, 1);
    json_decref(d);
    ctl__iv_save(c, iv);
    log_info("ctl", "trial %ld: forked into %zu siblings from step %ld", iv->trial_id,
             json_array_size(ids), parent->row.checkpoint_step);
}

/* The decision: the best sibling by its result (NaN ranks last; the lower
   id on a tie) continues; with keep best the others are stopped. */
static void s_decide(ctl_t *c, ctl_iv *iv, const char *how)
{
    ctl_study *s = NULL;
    json_t *results = json_object_get(iv->data, "results");
    long best = -1;
    double bestv = NAN;
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(iv->data, "siblings"), i, x)
    {
        long id = (long)json_integer_value(x);
        ctl_trial *t = ctl__trial_by_id(c, id);
        if (t)
            s = t->study;
        char key[32];
        snprintf(key, sizeof key, "%ld", id);
        double v = NAN;
        json_t *r = json_object_get(results, key);
        if (r && !json_is_null(r))
            v = sched_json_double(results, key);
        else if (t && !wire_is_none(t->row.last_value)) { /* --decide: its latest */
            v = t->row.last_value;
            json_object_set_new(results, key, sched_json_real(v));
        }
        if (s && isfinite(v) &&
            (best < 0 || !isfinite(bestv) || spec_better(s->spec, v, bestv))) {
            best = id;
            bestv = v;
        }
    }
    int keep_all = !strcmp(ctl__iv_str(iv, "keep"), "all");
    json_t *kept = json_array(), *stopped = json_array();
    char reason[300];
    json_array_foreach(json_object_get(iv->data, "siblings"), i, x)
    {
        long id = (long)json_integer_value(x);
        ctl_trial *t = ctl__trial_by_id(c, id);
        if (keep_all || id == best) {
            json_array_append_new(kept, json_integer(id));
            continue;
        }
        json_array_append_new(stopped, json_integer(id));
        if (t && !ctl_trial_ended(t)) {
            snprintf(reason, sizeof reason,
                     "fork of trial %ld decided: sibling %ld is the best (%.6g)",
                     iv->trial_id, best, bestv);
            ctl__trial_stop(c, t, "fork", reason, CTL_STOP_BY_PERSON);
        }
    }
    json_object_set_new(iv->data, "decision",
                        json_pack("{s:o, s:o, s:o, s:o, s:s}", "best",
                                  best >= 0 ? json_integer(best) : json_null(), "value",
                                  sched_json_real(bestv), "kept", kept, "stopped",
                                  stopped, "how", how));
    if (best >= 0)
        snprintf(reason, sizeof reason, "sibling %ld is the best (%s %.6g, %s)%s", best,
                 s ? s->spec->metric : "objective", bestv, how,
                 keep_all ? "; all continue" : "; the others were stopped");
    else
        snprintf(reason, sizeof reason, "no sibling has a result (%s)%s", how,
                 keep_all ? "; all continue" : "; all were stopped");
    json_object_set_new(iv->data, "reason", json_string(reason));
    if (ctl__iv_move(c, iv, FORK_DECIDED) != 0)
        return;
    json_t *d = s_fields(iv);
    store_event_add(c->store, util_wall(), iv->study_id, iv->trial_id, "controller",
                    "fork_decided", d, 1);
    log_info("ctl", "trial %ld: fork decided: %s", iv->trial_id, reason);
    json_t *ok = wire_ok(iv->waiter_req);
    json_object_update(ok, d);
    json_decref(d);
    ctl__iv_answer(c, iv, ok);
}

/* 1 when every sibling has a result. */
static int s_all_in(const ctl_iv *iv)
{
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(iv->data, "results"), key, v)
    {
        if (json_is_null(v))
            return 0;
    }
    return 1;
}

/* ---- events ---- */

static void s_on_instr_done(ctl_t *c, ctl_iv *iv, int applied, const char *why)
{
    if (iv->state != FORK_CHECKPOINT || applied)
        return; /* applied: its checkpoint_done follows */
    char reason[400];
    snprintf(reason, sizeof reason,
             "trial %ld cannot checkpoint (%s): a fork starts its siblings from a "
             "checkpoint; nothing was created",
             iv->trial_id, why && *why ? why : "no checkpoint");
    s_refuse(c, iv, reason);
}

static void s_on_checkpoint(ctl_t *c, ctl_iv *iv, ctl_trial *t)
{
    if (iv->state == FORK_CHECKPOINT)
        s_create_siblings(c, iv, t);
}

static void s_on_metrics(ctl_t *c, ctl_iv *iv, ctl_trial *t, const store_point *pts,
                         size_t n)
{
    if (iv->state != FORK_RUNNING || t->row.id == iv->trial_id)
        return;
    long target = s_judge_step(iv);
    char key[32];
    snprintf(key, sizeof key, "%ld", t->row.id);
    json_t *results = json_object_get(iv->data, "results");
    if (!json_is_null(json_object_get(results, key)))
        return;
    for (size_t i = 0; i < n; i++)
        if (pts[i].step >= target && !strcmp(pts[i].name, t->study->spec->metric)) {
            json_object_set_new(results, key, sched_json_real(pts[i].value));
            break;
        }
    if (s_all_in(iv))
        s_decide(c, iv, "after the steps");
    else
        ctl__iv_save(c, iv);
}

static void s_on_tick(ctl_t *c, ctl_iv *iv, double now)
{
    (void)now;
    ctl_trial *parent = ctl__trial_by_id(c, iv->trial_id);
    if (iv->state == FORK_CHECKPOINT) {
        if ((!parent || !ctl_trial_active(parent)) && iv->instr < 0)
            s_refuse(c, iv, "the trial ended before its checkpoint");
        return;
    }
    /* a sibling that ended before its result: its last value, or none */
    json_t *results = json_object_get(iv->data, "results");
    int changed = 0;
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(iv->data, "siblings"), i, x)
    {
        ctl_trial *t = ctl__trial_by_id(c, (long)json_integer_value(x));
        char key[32];
        snprintf(key, sizeof key, "%" JSON_INTEGER_FORMAT, json_integer_value(x));
        if (!json_is_null(json_object_get(results, key)) || (t && !ctl_trial_ended(t)))
            continue;
        double v = t ? ctl__trial_result(t) : NAN;
        json_object_set_new(results, key,
                            wire_is_none(v) ? json_string("none") : sched_json_real(v));
        changed = 1;
    }
    if (changed && s_all_in(iv))
        s_decide(c, iv, "the siblings ended");
}

static void s_on_resume(ctl_t *c, ctl_iv *iv)
{
    ctl_trial *parent = ctl__trial_by_id(c, iv->trial_id);
    if (iv->state == FORK_CHECKPOINT) {
        if (parent && ctl_trial_active(parent))
            s_send_checkpoint(c, iv, parent);
        return;
    }
    /* pending siblings start from the checkpoint (kept in memory only) */
    const char *path =
        json_string_value(json_object_get(json_object_get(iv->data, "ckpt"), "path"));
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(iv->data, "siblings"), i, x)
    {
        ctl_trial *t = ctl__trial_by_id(c, (long)json_integer_value(x));
        if (t && path && t->row.state == TRIAL_PENDING && t->row.attempt == 0) {
            snprintf(t->load_on_start, sizeof t->load_on_start, "%s", path);
            t->eval_on_start = s_judge_step(iv);
        }
    }
}

const ctl_iv_ops ctl__fork_ops = {
    .instr_done = s_on_instr_done,
    .metrics = s_on_metrics,
    .tick = s_on_tick,
    .checkpoint = s_on_checkpoint,
    .resume = s_on_resume,
};

/* ---- the request ---- */

/* The siblings' values, each checked against the space. NULL with code
   and err. */
static json_t *s_check_values(ctl_trial *t, const json_t *list, int force,
                              const char **code, char *err, size_t size)
{
    if (!json_is_array(list) || json_array_size(list) < 1 ||
        json_array_size(list) > FORK_MAX_SIBLINGS) {
        *code = "malformed";
        snprintf(err, size, "field 'siblings': expected 1 to %d objects of values",
                 FORK_MAX_SIBLINGS);
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *v;
    json_array_foreach((json_t *)list, i, v)
    {
        json_t *checked = ctl__set_check(t, v, force, code, err, size);
        if (!checked) {
            json_decref(out);
            return NULL;
        }
        json_array_append_new(out, checked);
    }
    return out;
}

json_t *ctl__fork_msg(ctl_t *c, ctl_trial *t, const json_t *msg, const char *who,
                      const wire_peer *from, long req, double wait_s, const char **code,
                      char *err, size_t size)
{
    ctl_iv *busy = c->interv ? ctl__iv_of_trial(c, t->row.id) : NULL;
    if (json_is_true(json_object_get(msg, "decide"))) {
        if (!busy || busy->kind != IV_FORK) {
            *code = "bad_state";
            snprintf(err, size, "trial %ld has no fork under way to decide", t->row.id);
            return NULL;
        }
        if (busy->state != FORK_RUNNING) {
            *code = "bad_state";
            snprintf(
                err, size,
                "the fork of trial %ld has no siblings yet (state %s): the trial has "
                "not checkpointed",
                busy->trial_id, store_iv_state_name(IV_FORK, busy->state));
            return NULL;
        }
        s_decide(c, busy, "decided by a person");
        return s_fields(busy);
    }
    json_t *st = json_object_get(msg, "steps"), *kp = json_object_get(msg, "keep");
    long steps = st ? (long)json_integer_value(st) : FORK_STEPS_DEFAULT;
    const char *keep = kp ? json_string_value(kp) : "best";
    *code = "malformed";
    if ((st && (!json_is_integer(st) || steps < 1 || steps > 100000000)) || !keep ||
        (strcmp(keep, "best") && strcmp(keep, "all"))) {
        snprintf(err, size,
                 "trial_fork: steps must be a whole number from 1 to 100000000 and keep "
                 "\"best\" or \"all\"");
        return NULL;
    }
    json_t *values =
        s_check_values(t, json_object_get(msg, "siblings"),
                       json_is_true(json_object_get(msg, "force")), code, err, size);
    if (!values)
        return NULL;
    *code = "bad_state";
    if (!ctl_trial_active(t) || t->plan != PLAN_NONE ||
        t->study->row.state != STUDY_RUNNING) {
        snprintf(err, size,
                 "trial %ld is not running in a running study (%s): a fork needs it",
                 t->row.id, store_trial_state_name(t->row.state));
        json_decref(values);
        return NULL;
    }
    if (ctl__iv_busy(c, t, err, size)) {
        json_decref(values);
        return NULL;
    }
    int have_ckpt = t->row.checkpoint[0] && t->row.checkpoint_step >= t->row.last_step &&
                    t->row.last_step >= 0;
    json_t *data = json_pack("{s:o, s:I, s:s, s:s, s:[], s:{}}", "values", values,
                             "steps", (json_int_t)steps, "keep", keep, "who",
                             who ? who : "cli", "siblings", "results");
    ctl_iv *iv = ctl__iv_add(c, IV_FORK, t, FORK_CHECKPOINT, data);
    if (!iv) {
        *code = "internal";
        snprintf(err, size, "cannot record the fork");
        return NULL;
    }
    if (from) {
        iv->waiter = *from;
        iv->waiter_req = req;
        iv->wait_s = wait_s;
        iv->wait_until = wait_s > 0 ? util_now() + wait_s : 0;
    }
    if (have_ckpt)
        s_create_siblings(c, iv, t);
    else
        s_send_checkpoint(c, iv, t);
    return s_fields(iv);
}
