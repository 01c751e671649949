/*  ctl_trial.c - a trial's lifecycle (see ctl_trial.h); its state machine
    is in ctl_state.c.

    Every change goes through the iteration's transaction (ctl__txn) and
    is committed before anything it causes leaves the controller.
*/
#include "ctl_internal.h"

#include "../common/exit_how.h"
#include "../common/log.h"
#include "../common/util.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STOP_GRACE_S 10.0 /* after a stop instruction, kill the process */

/* The grace, STOP_GRACE_S or shorter: JIZHI_STOP_GRACE_S lowers it (tests
   of trials that never read their stop, which would wait the whole grace);
   a value above STOP_GRACE_S or not a number leaves it. Read once. */
double ctl__stop_grace(void)
{
    static double grace = -1;
    if (grace < 0)
        grace = util_env_at_most("JIZHI_STOP_GRACE_S", STOP_GRACE_S);
    return grace;
}

/* ---- objects ---- */

ctl_trial *ctl__trial_create(ctl_t *c, ctl_study *s, long id, json_t *params)
{
    ctl_trial *t = util_xcalloc(1, sizeof *t);
    t->study = s;
    t->row.id = id;
    t->row.study_id = s->row.id;
    t->row.number = (long)s->ntrials;
    t->row.state = TRIAL_PENDING;
    util_random_hex(t->row.token, 16);
    t->row.params = params;
    t->row.parent = -1;
    t->row.value = t->row.last_value = t->row.best_value = wire_none();
    t->row.last_step = -1;
    t->row.created = util_wall();
    if (store_trial_insert(c->store, &t->row) != 0) {
        log_error("ctl", "cannot store a new trial: %s", store_errmsg(c->store));
        ctl__trial_free(t);
        return NULL;
    }
    ctl__study_add_trial(s, t);
    ctl_idmap_put(&c->trials, t->row.id, t);
    return t;
}

ctl_trial *ctl__trial_adopt(ctl_t *c, ctl_study *s, store_trial *row)
{
    ctl_trial *t = util_xcalloc(1, sizeof *t);
    t->study = s;
    t->row = *row;
    memset(row, 0, sizeof *row);
    if (ctl_trial_init_state(t) != 0) {
        log_error("ctl", "study %s trial %ld: state %d out of range", s->row.name,
                  t->row.id, (int)t->row.state);
        ctl__trial_free(t);
        return NULL;
    }
    /* a trial that was running gets lost_timeout to come back */
    t->last_heard = t->last_report = util_now();
    ctl__study_add_trial(s, t);
    ctl_idmap_put(&c->trials, t->row.id, t);
    return t;
}

void ctl__trial_free(ctl_trial *t)
{
    if (!t)
        return;
    store_trial_fini(&t->row);
    free(t);
}

double ctl__trial_result(const ctl_trial *t)
{
    return t->study->spec->use_best ? t->row.best_value : t->row.last_value;
}

/* ---- lifecycle ---- */

/* How many trials of the study ended failed in a row, the latest last
   (trials stopped by the study or still running do not count). */
static long s_failures_in_a_row(const ctl_study *s)
{
    long n = 0;
    double after = -1; /* end time of the latest non-failure */
    for (size_t i = 0; i < s->ntrials; i++) {
        const ctl_trial *u = s->trials[i];
        if ((u->row.state == TRIAL_COMPLETED || u->row.state == TRIAL_STOPPED ||
             u->row.state == TRIAL_PRUNED) &&
            u->row.ended > after)
            after = u->row.ended;
    }
    for (size_t i = 0; i < s->ntrials; i++)
        n += s->trials[i]->row.state == TRIAL_FAILED && s->trials[i]->row.ended >= after;
    return n;
}

int ctl__trial_feasible(ctl_t *c, ctl_trial *t)
{
    if (!t->study->spec->nconstraints)
        return 1;
    if (!t->feas) {
        json_t *last = store_metrics_last(c->store, t->row.id);
        if (!last)
            return 1; /* unknown now: judged again next time */
        t->feas = spec_violation(t->study->spec, last) == 0 ? 1 : 2;
        json_decref(last);
    }
    return t->feas == 1;
}

/* The best result of the study's completed feasible trials other than t,
   NaN when none. */
static double s_best_other(ctl_t *c, const ctl_study *s, const ctl_trial *t)
{
    double best = NAN;
    for (size_t i = 0; i < s->ntrials; i++) {
        ctl_trial *u = s->trials[i];
        if (u != t &&
            spec_best_counts(store_trial_state_name(u->row.state), u->row.value, 1) &&
            ctl__trial_feasible(c, u) &&
            (isnan(best) || spec_better(s->spec, u->row.value, best)))
            best = u->row.value;
    }
    return best;
}

/* The alerts of a trial that ended: trial_failed, failures_in_a_row,
   best_improved. 1 when a rule asks to stop the study. */
static int s_end_alerts(ctl_t *c, ctl_trial *t, long fails, const char *reason)
{
    ctl_study *s = t->study;
    char text[400];
    int stop = 0;
    if (t->row.state == TRIAL_FAILED) {
        snprintf(text, sizeof text, "trial %ld failed: %s", t->row.id, reason);
        json_t *d = json_pack("{s:s}", "reason", reason);
        ctl__alert(c, s, t, SPEC_ALERT_TRIAL_FAILED, 0, text, d);
        snprintf(text, sizeof text, "%ld trials failed in a row; the last: %s", fails,
                 reason);
        json_object_set_new(d, "failures_in_a_row", json_integer(fails));
        stop = ctl__alert(c, s, t, SPEC_ALERT_FAILURES, (double)fails, text, d);
        json_decref(d);
    } else if (spec_best_counts(store_trial_state_name(t->row.state), t->row.value, 1) &&
               ctl__trial_feasible(c, t)) {
        double prev = s_best_other(c, s, t);
        if (isnan(prev) || spec_better(s->spec, t->row.value, prev)) {
            snprintf(text, sizeof text, "trial %ld: new best %s %.6g (was %.6g)",
                     t->row.id, s->spec->metric, t->row.value, prev);
            json_t *d = json_pack("{s:o, s:o}", "value", wire_real(t->row.value),
                                  "previous", wire_real(prev));
            ctl__alert(c, s, t, SPEC_ALERT_BEST, 0, text, d);
            json_decref(d);
        }
    }
    return stop;
}

/* How an active trial ended, for the result of the stop it was being
   given (s_stop_carried_out). */
typedef enum {
    S_EXITED, /* its process ended, not by our kill (or it never ran) */
    S_KILLED, /* by the kill at the end of the stop's grace */
    S_LOST,   /* lost: its dispatcher lost it, or it went silent */
    S_TOLD,   /* an asked trial, told (ctl_ask.c) */
} s_ended;

/* t, being stopped (or released), has ended `how`: its stop is carried
   out (ctl_instr.c), and the result says how and, unless a kill ended it,
   how long after the stop. */
static void s_stop_carried_out(ctl_t *c, ctl_trial *t, s_ended how)
{
    if (t->plan != PLAN_STOP && t->plan != PLAN_RELEASE)
        return;
    double grace = ctl__stop_grace(), after = util_now() - t->plan_since;
    char text[160];
    if (how == S_KILLED && t->kill_sent) /* the grace's kill, not a person's */
        snprintf(text, sizeof text,
                 "carried out by a kill at the end of the %g s stop grace", grace);
    else if (how == S_KILLED)
        snprintf(text, sizeof text, "the trial was killed %.1f s after the stop", after);
    else if (how == S_EXITED && after <= grace)
        snprintf(text, sizeof text, "the trial ended within the %g s stop grace", grace);
    else
        snprintf(text, sizeof text, "the trial %s %.1f s after the stop%s",
                 how == S_LOST   ? "was lost"
                 : how == S_TOLD ? "was told"
                                 : "ended",
                 after, how == S_LOST ? " (its dispatcher lost it or went silent)" : "");
    ctl__instr_stops_done(c, t, 1, text);
}

/* Ends t as `state` with `reason`; `how`: how it ended. */
static void s_end(ctl_t *c, ctl_trial *t, store_trial_state state, const char *reason,
                  s_ended how)
{
    ctl_study *s = t->study;
    if (ctl_trial_move(t, state) != 0)
        return;
    ctl__disp_release(t);
    s_stop_carried_out(c, t, how);
    t->row.study_stopped = state == TRIAL_STOPPED && t->plan_by_study;
    t->row.failures += state == TRIAL_FAILED;
    ctl_trial_plan_to(t, PLAN_NONE);
    t->load_on_start[0] = 0;
    snprintf(t->row.reason, sizeof t->row.reason, "%s", reason);
    t->row.value = state != TRIAL_FAILED ? ctl__trial_result(t) : wire_none();
    t->row.ended = util_wall();
    ctl__trial_save(c, t);
    sched_outcome oc = state == TRIAL_COMPLETED                          ? SCHED_COMPLETED
                       : state == TRIAL_STOPPED || state == TRIAL_PRUNED ? SCHED_STOPPED
                                                                         : SCHED_FAILED;
    /* several objectives or constraints: the schedulers that can use
       them get every metric's last value */
    json_t *last = s->spec->nobjectives > 1 || s->spec->nconstraints
                       ? store_metrics_last(c->store, t->row.id)
                       : NULL;
    for (int m = -1; m < s->nmon; m++) {
        sched_t *sc = m < 0 ? s->sched : s->mon[m];
        if (last && sc->ops->on_complete_metrics)
            sc->ops->on_complete_metrics(sc, t->row.id, t->row.params, oc, t->row.value,
                                         last);
        else if (sc->ops->on_complete)
            sc->ops->on_complete(sc, t->row.id, t->row.params, oc, t->row.value);
    }
    t->feas = !last || spec_violation(s->spec, last) == 0 ? 1 : 2;
    json_decref(last);
    s->sched_dirty = 1;
    const char *name = store_trial_state_name(state);
    json_t *detail =
        json_pack("{s:s, s:o}", "reason", reason, "value", wire_real(t->row.value));
    store_event_add(c->store, util_wall(), s->row.id, t->row.id, "controller", name,
                    detail, 1);
    json_decref(detail);
    log_info("ctl", "study %s trial %ld %s%s%s", s->row.name, t->row.id, name,
             *reason ? ": " : "", reason);
    long fails = state == TRIAL_FAILED ? s_failures_in_a_row(s) : 0;
    if (s_end_alerts(c, t, fails, reason)) {
        char why[400];
        snprintf(why, sizeof why,
                 "%ld trials failed in a row (alert failures_in_a_row with stop_study); "
                 "the last: %s",
                 fails, reason);
        ctl__study_stop(c, s, "controller", why);
    } else if (s->spec->max_failures > 0 && fails >= s->spec->max_failures) {
        char why[400];
        snprintf(
            why, sizeof why,
            "%ld trials failed in a row (budget.max_consecutive_failures); the last: %s",
            fails, reason);
        ctl__study_stop(c, s, "controller", why);
    } else if (t->row.study_stopped && s->row.state == STUDY_RUNNING &&
               ctl__trial_rerun(c, t) == 0) {
        /* its study was resumed while this stop was under way: it runs
           again, as the resume ran the trials the stop had already ended */
        log_info("ctl", "study %s trial %ld runs again (try %ld): the study was resumed",
                 s->row.name, t->row.id, t->row.attempt + 1);
    }
}

/* A new attempt gets a new token: an earlier attempt that shows up again
   (declared lost, yet still running somewhere) is refused. Nothing the
   attempt before reported or ran with (value, end, last and best values,
   step, metric session, pid, peer) is this one's. */
static void s_new_attempt(ctl_trial *t)
{
    t->row.attempt++;
    util_random_hex(t->row.token, 16);
    t->row.value = wire_none();
    t->row.ended = 0;
    t->row.last_value = t->row.best_value = wire_none();
    t->row.last_step = -1;
    t->row.metric_req = 0;
    t->row.metric_session[0] = 0;
    t->row.pid = 0;
    t->peer.len = 0;
}

/* Puts a trial back to pending for another attempt. */
static void s_retry(ctl_t *c, ctl_trial *t, const char *reason)
{
    if (ctl_trial_move(t, TRIAL_PENDING) != 0)
        return;
    ctl__disp_release(t);
    ctl_trial_plan_to(t, PLAN_NONE);
    s_new_attempt(t);
    snprintf(t->row.reason, sizeof t->row.reason, "%s", reason);
    ctl__trial_save(c, t);
    json_t *detail =
        json_pack("{s:s, s:I}", "reason", reason, "attempt", (json_int_t)t->row.attempt);
    store_event_add(c->store, util_wall(), t->study->row.id, t->row.id, "controller",
                    "retry", detail, 1);
    json_decref(detail);
    log_info("ctl", "study %s trial %ld: %s; retrying (try %ld)", t->study->row.name,
             t->row.id, reason, t->row.attempt + 1);
}

/* t's attempt failed (`how`: it exited, or was lost): one more of its
   failures (row.failures, persisted with it; s_end counts the one that
   ends it), which `retries` counts. A restart that no failure caused (a
   resume after a release or a preemption, a study's resume, a restart
   from a checkpoint) is none, though it is a new attempt. t starts again
   while its failures before this one are fewer than its retries, plus two
   when lost or killed by its dispatcher (not its fault); else it ends
   failed. */
static void s_failed(ctl_t *c, ctl_trial *t, const char *reason, s_ended how)
{
    long allowed = t->study->spec->retries + (how == S_LOST ? 2 : 0);
    if (t->row.failures < allowed) {
        t->row.failures++;
        s_retry(c, t, reason);
    } else
        s_end(c, t, TRIAL_FAILED, reason, how); /* counts this failure */
}

void ctl__trial_start(ctl_t *c, ctl_trial *t, ctl_disp *d)
{
    ctl_study *s = t->study;
    spec_error serr;
    json_t *argv = spec_expand_command(s->spec, t->row.params, &serr);
    if (!argv) {
        char buf[400];
        s_end(c, t, TRIAL_FAILED, spec_strerror(&serr, buf, sizeof buf), S_EXITED);
        return;
    }
    if (ctl_trial_move(t, TRIAL_STARTING) != 0) {
        json_decref(argv);
        return;
    }
    char id[32], ckpt[1200];
    snprintf(id, sizeof id, "%ld", t->row.id);
    snprintf(ckpt, sizeof ckpt, "%s/%s/trial-%ld", c->ckpt_root, s->row.name, t->row.id);
    char *params = json_dumps(t->row.params, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *env = json_deep_copy(s->spec->env);
    json_object_set_new(env, "JIZHI_STUDY", json_string(s->row.name));
    json_object_set_new(env, "JIZHI_TRIAL", json_string(id));
    json_object_set_new(env, "JIZHI_TOKEN", json_string(t->row.token));
    json_object_set_new(env, "JIZHI_PARAMS", json_string(params));
    json_object_set_new(env, "JIZHI_CHECKPOINT_DIR", json_string(ckpt));
    if (t->load_on_start[0]) {
        json_object_set_new(env, "JIZHI_LOAD_CHECKPOINT", json_string(t->load_on_start));
        t->load_on_start[0] = 0;
    }
    if (t->eval_on_start > 0) {
        char at[32];
        snprintf(at, sizeof at, "%ld", t->eval_on_start);
        json_object_set_new(env, "JIZHI_EVAL_AT_STEP", json_string(at));
        t->eval_on_start = 0;
    }
    free(params);
    json_t *msg =
        json_pack("{s:s, s:I, s:I, s:s, s:o, s:o, s:f, s:I}", "type", "start", "trial",
                  (json_int_t)t->row.id, "attempt", (json_int_t)t->row.attempt, "study",
                  s->row.name, "argv", argv, "env", env, "timeout_s", s->spec->timeout_s,
                  "gpus", (json_int_t)s->spec->gpus);
    if (s->spec->ranks > 1)
        json_object_set_new(msg, "ranks", json_integer(s->spec->ranks));
    if (s->spec->cwd) /* absent: the dispatcher's folder */
        json_object_set_new(msg, "cwd", json_string(s->spec->cwd));
    if (s->spec->venv)
        json_object_set_new(msg, "venv", json_string(s->spec->venv));
    if (s->spec->launcher != SPEC_LAUNCH_MPIRUN) /* absent: mpirun */
        json_object_set_new(msg, "launcher",
                            json_string(spec_launcher_name(s->spec->launcher)));
    ctl__disp_take(d, t, s->spec->gpus, s->spec->ranks);
    snprintf(t->row.dispatcher, sizeof t->row.dispatcher, "%s", d->name);
    t->row.exit_how[0] = 0;
    t->row.started = util_wall();
    t->last_heard = t->last_report = util_now();
    ctl_trial_plan_to(t, PLAN_NONE);
    if (ctl__trial_save(c, t) == 0)
        ctl__send(c, &d->peer, msg);
    else
        json_decref(msg);
}

void ctl__trial_heard(ctl_t *c, ctl_trial *t)
{
    t->last_heard = util_now();
    if (t->row.state == TRIAL_STARTING && ctl_trial_move(t, TRIAL_RUNNING) == 0)
        ctl__trial_save(c, t);
}

void ctl__trial_end(ctl_t *c, ctl_trial *t, store_trial_state state, const char *reason)
{
    s_end(c, t, state, reason, S_TOLD);
}

void ctl__trial_exited(ctl_t *c, ctl_trial *t, const char *how, long code,
                       const char *message, const char *stderr_tail)
{
    if (!ctl_trial_active(t))
        return;                       /* a repeated report */
    exit_how h = exit_how_parse(how); /* the wire's text, once */
    /* the backend lost it (preempted, node failure): not the trial's fault */
    if (h == EXIT_LOST) {
        ctl__trial_lost(c, t, message && *message ? message : "lost by its dispatcher");
        return;
    }
    int clean = h == EXIT_EXITED && code == 0;
    if (t->plan == PLAN_RESTART) {
        /* killed for a restart; a run that completed before the kill stands */
        if (!clean || wire_is_none(ctl__trial_result(t))) {
            s_retry(c, t, "restart from a checkpoint (load not acknowledged)");
            return;
        }
        ctl_trial_plan_to(t, PLAN_NONE);
        t->load_on_start[0] = 0;
    }
    if (t->plan == PLAN_RELEASE) { /* pause --release: checkpointed and exited */
        if (ctl_trial_move(t, TRIAL_SUSPENDED) != 0)
            return;
        ctl__disp_release(t);
        s_stop_carried_out(c, t, h == EXIT_KILLED ? S_KILLED : S_EXITED);
        ctl_trial_plan_to(t, PLAN_NONE);
        snprintf(t->row.reason, sizeof t->row.reason, "%s at step %ld",
                 t->row.preempted ? "preempted (resumes when capacity frees)"
                                  : "paused and released",
                 t->row.checkpoint_step);
        t->row.pid = 0;
        ctl__trial_save(c, t);
        /* the release's stop (now applied) did not end it: plot and the
           events list tell a release from a stop by this event */
        json_t *d = json_pack("{s:s, s:I}", "reason", t->row.reason, "step",
                              (json_int_t)t->row.checkpoint_step);
        store_event_add(c->store, util_wall(), t->study->row.id, t->row.id, "controller",
                        store_trial_state_name(TRIAL_SUSPENDED), d, 1);
        json_decref(d);
        return;
    }
    snprintf(t->row.exit_how, sizeof t->row.exit_how, "%s", how);
    t->row.exit_code = code;
    if (t->plan == PLAN_STOP) {
        char reason[sizeof t->plan_reason];
        snprintf(reason, sizeof reason, "%s", t->plan_reason);
        s_end(c, t, t->plan_pruned ? TRIAL_PRUNED : TRIAL_STOPPED, reason,
              h == EXIT_KILLED ? S_KILLED : S_EXITED);
        return;
    }
    if (clean && !wire_is_none(ctl__trial_result(t))) { /* a NaN reported counts */
        s_end(c, t, TRIAL_COMPLETED, "", S_EXITED);
        return;
    }
    char reason[256];
    if (clean)
        snprintf(reason, sizeof reason,
                 "exited without reporting its objective metric '%s'",
                 t->study->spec->metric);
    else if (h == EXIT_EXITED)
        snprintf(reason, sizeof reason, "exited with status %ld", code);
    else if (h == EXIT_TIMEOUT)
        snprintf(reason, sizeof reason, "killed after timeout_s=%g",
                 t->study->spec->timeout_s);
    else if (h == EXIT_SIGNALED)
        snprintf(reason, sizeof reason, "killed by signal %ld", code);
    else
        snprintf(reason, sizeof reason, "%s%s%s", how, message && *message ? ": " : "",
                 message ? message : "");
    if (stderr_tail && *stderr_tail) { /* what the program said last */
        size_t n = strlen(reason);
        snprintf(reason + n, sizeof reason - n, "; stderr: %s", stderr_tail);
    }
    /* killed with no stop of ours under way: its dispatcher stopped (or a
       restart's kill): not the trial's failure, counted as a lost one */
    s_failed(c, t, reason, h == EXIT_KILLED ? S_LOST : S_EXITED);
}

void ctl__trial_lost(ctl_t *c, ctl_trial *t, const char *why)
{
    if (!ctl_trial_active(t))
        return;
    snprintf(t->row.exit_how, sizeof t->row.exit_how, "%s", exit_how_name(EXIT_LOST));
    if (t->plan == PLAN_STOP || t->plan == PLAN_RELEASE) {
        char reason[sizeof t->plan_reason];
        snprintf(reason, sizeof reason, "%s", t->plan_reason);
        s_end(c, t, t->plan_pruned ? TRIAL_PRUNED : TRIAL_STOPPED, reason, S_LOST);
        return;
    }
    /* a pending restart keeps its checkpoint for the next start */
    s_failed(c, t, why, S_LOST);
}

/* A "load" gives the trial new params: a new generation, with the donor
   as parent (PBT exploit), persisted before the instruction leaves. */
static int s_new_generation(ctl_t *c, ctl_trial *t, const json_t *args)
{
    json_t *params = json_object_get(args, "params");
    json_t *from = json_object_get(args, "from");
    if (!json_is_object(params))
        return 0;
    json_t *merged = json_deep_copy(t->row.params);
    json_object_update(merged, params);
    spec_params_prune(t->study->spec, merged); /* conditional spaces */
    long parent = json_is_integer(from) ? (long)json_integer_value(from) : t->row.parent;
    if (store_trial_set_params(c->store, t->row.id, t->row.generation + 1, parent,
                               merged) != 0) {
        json_decref(merged);
        return -1;
    }
    json_decref(t->row.params);
    t->row.params = merged;
    t->row.generation++;
    t->row.parent = parent;
    return ctl__trial_save(c, t);
}

void ctl__trial_apply_sched(ctl_t *c, ctl_study *s, sched_t *by, sched_instr *ins, int k)
{
    for (int j = 0; j < k; j++) {
        ctl_trial *target = ctl__trial_by_id(c, ins[j].trial);
        if (target && ctl_trial_active(target) && target->study == s &&
            ctl__txn(c) == 0) {
            if (!strcmp(by->ops->name, "guard")) {
                json_t *d = json_pack("{s:s, s:s}", "action", ins_kind_name(ins[j].kind),
                                      "reason", ins[j].reason);
                ctl__alert(c, s, target, SPEC_ALERT_GUARD, 0, ins[j].reason, d);
                json_decref(d);
            }
            if (ins[j].kind == INS_STOP)
                ctl__trial_stop(c, target, by->ops->name, ins[j].reason,
                                CTL_STOP_BY_SCHED);
            else if (ins[j].kind != INS_LOAD ||
                     s_new_generation(c, target, ins[j].args) == 0)
                /* the wire's text of the kind, made here */
                ctl__instruct(c, target, ins_kind_name(ins[j].kind), ins[j].args,
                              by->ops->name, ins[j].reason, NULL, 0);
        }
        sched_instr_fini(&ins[j]);
    }
    if (k > 0)
        s->sched_dirty = 1;
}

long ctl__trial_release(ctl_t *c, ctl_trial *t, const char *who)
{
    if (ctl_trial_plan_to(t, PLAN_RELEASE_CHECKPOINT) != 0)
        return -1;
    return ctl__instruct(c, t, "checkpoint", NULL, who,
                         "pause --release: checkpoint, then exit", NULL, 0);
}

void ctl__trial_unsuspend(ctl_t *c, ctl_trial *t, const char *who)
{
    if (t->row.state != TRIAL_SUSPENDED || ctl__txn(c) != 0)
        return;
    s_retry(c, t, "resumed from its checkpoint");
    snprintf(t->load_on_start, sizeof t->load_on_start, "%s", t->row.checkpoint);
}

int ctl__trial_rerun(ctl_t *c, ctl_trial *t)
{
    if (t->study->spec->ask_only) {
        /* nothing hands out a pending asked trial: one the study's stop
           has not ended keeps running (its tell a normal result), one told
           meanwhile stays as it ended */
        if (ctl_trial_active(t) && t->plan == PLAN_STOP && t->plan_by_study &&
            ctl_trial_plan_to(t, PLAN_NONE) == 0)
            ctl__instr_stops_done(c, t, 0,
                                  "withdrawn: the study was resumed before the trial "
                                  "was told");
        return -1;
    }
    if (t->row.state != TRIAL_STOPPED || !t->row.study_stopped ||
        ctl_trial_move(t, TRIAL_PENDING) != 0)
        return -1;
    s_new_attempt(t);
    t->row.study_stopped = 0;
    /* a fresh run: nothing of the stopped attempt shows as this one's
       (its metrics stay, under their attempt) */
    t->row.reason[0] = 0;
    t->row.exit_how[0] = 0;
    t->row.exit_code = 0;
    ctl__trial_save(c, t);
    return 0;
}

void ctl__trial_checkpoint(ctl_t *c, ctl_trial *t, long step, const char *path)
{
    ctl_study *s = t->study;
    snprintf(t->row.checkpoint, sizeof t->row.checkpoint, "%s", path);
    t->row.checkpoint_step = step;
    t->last_report = util_now();
    if (ctl__trial_save(c, t) != 0)
        return;
    json_t *detail = json_pack("{s:I, s:s}", "step", (json_int_t)step, "path", path);
    store_event_add(c->store, util_wall(), s->row.id, t->row.id, "trial", "checkpoint",
                    detail, 1);
    json_decref(detail);
    for (int m = -1; m < s->nmon; m++) {
        sched_t *sc = m < 0 ? s->sched : s->mon[m];
        if (!sc->ops->on_checkpoint)
            continue;
        sched_instr ins[8];
        int k = sc->ops->on_checkpoint(sc, t->row.id, step, path, util_now(), ins, 8);
        ctl__trial_apply_sched(c, s, sc, ins, k);
    }
    if (c->on.trial_checkpoint) /* a guarded change or fork waiting for it */
        c->on.trial_checkpoint(c, t);
    if (t->plan == PLAN_RELEASE_CHECKPOINT && ctl_trial_active(t) &&
        ctl_trial_plan_to(t, PLAN_RELEASE) == 0) {
        snprintf(t->plan_reason, sizeof t->plan_reason, "paused and released");
        t->plan_since = util_now();
        ctl__instruct(c, t, "stop", NULL, "cli", t->plan_reason, NULL, 0);
    }
}

/* Early stopping judges trials by a resource metric (epoch by default):
   a trial that reports its objective a few times without it is never
   judged. Says so once per study (event, log), rather than doing nothing
   silently. */
static void s_check_resource(ctl_t *c, ctl_trial *t)
{
    enum { REPORTS_BEFORE_WARNING = 3 };
    ctl_study *s = t->study;
    if (!s->es_resource[0] || s->es_warned || t->saw_resource ||
        t->objective_reports < REPORTS_BEFORE_WARNING)
        return;
    s->es_warned = 1;
    char why[512];
    snprintf(why, sizeof why,
             "early_stopping: trial %ld reported %s %ld times but never '%s' (the "
             "resource early stopping judges by), so it is never stopped early; report "
             "'%s' or set early_stopping.resource",
             t->row.id, s->spec->metric, t->objective_reports, s->es_resource,
             s->es_resource);
    json_t *detail = json_pack("{s:s}", "reason", why);
    store_event_add(c->store, util_wall(), s->row.id, t->row.id, "controller", "warning",
                    detail, 1);
    json_decref(detail);
    log_warn("ctl", "study %s: %s", s->row.name, why);
}

int ctl__trial_metrics(ctl_t *c, ctl_trial *t, const store_point *pts, size_t n,
                       double now)
{
    ctl_study *s = t->study;
    if (store_metrics_add(c->store, t->row.id, t->row.attempt, pts, n, util_wall()) !=
        0) {
        log_error("ctl", "cannot store metrics: %s", store_errmsg(c->store));
        return -1;
    }
    t->last_report = util_now();
    for (size_t i = 0; i < n; i++) {
        if (pts[i].step > t->row.last_step)
            t->row.last_step = pts[i].step;
        if (s->es_resource[0] && !strcmp(pts[i].name, s->es_resource))
            t->saw_resource = 1;
        if (!strcmp(pts[i].name, s->spec->metric)) {
            t->objective_reports++;
            t->row.last_value = pts[i].value;
            if (wire_is_none(t->row.best_value) ||
                spec_better(s->spec, pts[i].value, t->row.best_value))
                t->row.best_value = pts[i].value;
        }
        for (int m = -1; m < s->nmon; m++) {
            sched_t *sc = m < 0 ? s->sched : s->mon[m];
            if (!sc->ops->on_metric)
                continue;
            /* its state may have changed: saved in this iteration's
               transaction, with the metrics, before they are acknowledged */
            s->sched_dirty = 1;
            sched_instr ins[8];
            int k = sc->ops->on_metric(sc, t->row.id, pts[i].step, pts[i].name,
                                       pts[i].value, now, ins, 8);
            ctl__trial_apply_sched(c, s, sc, ins, k);
        }
    }
    s_check_resource(c, t);
    if (c->on.trial_metrics) /* a guarded change's watch, a fork's decision */
        c->on.trial_metrics(c, t, pts, n);
    return ctl__trial_save(c, t);
}

void ctl__trial_stop(ctl_t *c, ctl_trial *t, const char *who, const char *reason,
                     ctl_stop_by by)
{
    if (t->row.state == TRIAL_PENDING || t->row.state == TRIAL_SUSPENDED) {
        t->plan_by_study = by == CTL_STOP_BY_STUDY;
        /* never ran this attempt: not pruned */
        s_end(c, t, TRIAL_STOPPED, reason, S_EXITED);
        return;
    }
    if (!ctl_trial_active(t) || t->plan == PLAN_STOP || t->plan == PLAN_RELEASE)
        return; /* ended, or already being stopped */
    if (ctl_trial_plan_to(t, PLAN_STOP) != 0)
        return;
    snprintf(t->plan_reason, sizeof t->plan_reason, "%s", reason);
    t->plan_by_study = by == CTL_STOP_BY_STUDY;
    t->plan_pruned = by == CTL_STOP_BY_SCHED;
    t->plan_since = util_now();
    ctl__instruct(c, t, "stop", NULL, who, reason, NULL, 0);
}

void ctl__trial_restart_from(ctl_t *c, ctl_trial *t, const char *path, const char *reason)
{
    if (ctl_trial_plan_to(t, PLAN_RESTART) != 0)
        return;
    snprintf(t->load_on_start, sizeof t->load_on_start, "%s", path);
    ctl__disp_kill(c, t, reason);
}

void ctl__trial_tick(ctl_t *c, ctl_trial *t, double now)
{
    if ((t->plan == PLAN_STOP || t->plan == PLAN_RELEASE) && !t->kill_sent &&
        now - t->plan_since > ctl__stop_grace() && t->disp)
        ctl__disp_kill(c, t, t->plan_reason);
}

/* ---- moves the other files ask for, placed here so that they call down:
   a trial's end may stop its study, the tick restarts a trial whose load
   was not acknowledged, the queue resumes a preempted trial ---- */

void ctl__study_stop(ctl_t *c, ctl_study *s, const char *who, const char *reason)
{
    if (s->row.state != STUDY_RUNNING || ctl__txn(c) != 0)
        return;
    for (size_t i = 0; i < s->ntrials; i++)
        if (ctl_trial_active(s->trials[i]))
            ctl__trial_stop(c, s->trials[i], who, "study stopped", CTL_STOP_BY_STUDY);
    if (ctl__study_move(c, s, STUDY_STOPPED) == 0) {
        json_t *detail = reason ? json_pack("{s:s}", "reason", reason) : NULL;
        store_event_add(c->store, util_wall(), s->row.id, -1, who, "study_stopped",
                        detail, 1);
        json_decref(detail);
        if (reason)
            log_warn("ctl", "study %s stopped: %s", s->row.name, reason);
    }
}

/* The fallback for one instruction: when `in` is a `load` of t not
   acknowledged within its study's load timeout, restarts t from its
   checkpoint and returns 1 (`in` is then done: its slot holds another
   instruction, or none). 0 when `in` is no such load, or t cannot be
   restarted now. */
static int s_load_fallback_one(ctl_t *c, ctl_trial *t, ctl_instr *in, double now)
{
    ctl_study *s = t->study;
    double limit = ctl__study_load_timeout(s);
    if (limit <= 0 || t->plan != PLAN_NONE || !t->disp)
        return 0;
    const char *kind = json_string_value(json_object_get(in->msg, "kind"));
    const char *path = json_string_value(json_object_get(in->msg, "path"));
    if (in->trial_id != t->row.id || now - in->sent < limit || !kind ||
        strcmp(kind, "load") || !path || strlen(path) >= sizeof t->load_on_start)
        return 0;
    if (ctl__txn(c) != 0)
        return 0;
    json_t *detail = json_pack("{s:s, s:I, s:O?, s:f}", "path", path, "instruction",
                               (json_int_t)in->id, "from",
                               json_object_get(in->msg, "from"), "timeout_s", limit);
    char why[160];
    snprintf(why, sizeof why,
             "not acknowledged within %g s: restarting the trial from the "
             "checkpoint",
             limit);
    ctl__trial_restart_from(c, t, path,
                            "restart from a checkpoint (load not acknowledged)");
    ctl__instr_done(c, in->id, 0, why); /* `in` and `path` are gone after this */
    store_event_add(c->store, util_wall(), s->row.id, t->row.id, "controller",
                    "restart_from_checkpoint", detail, 1);
    json_decref(detail);
    log_info("ctl",
             "study %s trial %ld: load not acknowledged within %g s; restarting it "
             "from %s",
             s->row.name, t->row.id, limit, t->load_on_start);
    return 1;
}

void ctl__instr_load_fallback(ctl_t *c, ctl_trial *t, double now)
{
    for (size_t i = 0; i < c->ninstrs; i++)
        if (s_load_fallback_one(c, t, &c->instrs[i], now))
            return;
}

void ctl__instr_load_fallbacks(ctl_t *c, double now)
{
    for (size_t i = 0; i < c->ninstrs;) {
        ctl_instr *in = &c->instrs[i];
        ctl_trial *t = ctl_idmap_get(&c->trials, in->trial_id);
        if (t && ctl_trial_active(t) && t->study->row.state == STUDY_RUNNING &&
            s_load_fallback_one(c, t, in, now))
            continue; /* `in` was done: its slot holds another instruction */
        i++;
    }
}

void ctl__queue_resume(ctl_t *c, ctl_trial *t)
{
    /* the run goes on from its checkpoint: keep what it reported so far */
    double last = t->row.last_value, best = t->row.best_value;
    ctl__trial_unsuspend(c, t, "queue");
    if (t->row.state != TRIAL_PENDING)
        return;
    t->row.last_value = last;
    t->row.best_value = best;
    json_t *d = json_pack("{s:s, s:I}", "checkpoint", t->row.checkpoint, "step",
                          (json_int_t)t->row.checkpoint_step);
    store_event_add(c->store, util_wall(), t->study->row.id, t->row.id, "queue",
                    "preemption_resumed", d, 1);
    json_decref(d);
}
