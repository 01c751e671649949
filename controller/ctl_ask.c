/*  ctl_ask.c - ask-and-tell (docs/PROTOCOL.md trial_ask, trial_tell): the
    trials of a study without a `trial` section (spec_t.ask_only), which a
    program outside the dispatchers asks for and ends itself: the Python
    package's Study.ask/tell/optimize and `jizhi trial ask/tell`.

    An asked trial is an ordinary trial row: the scheduler (or a queued
    configuration) gives its params, it is RUNNING from the moment it is
    asked, and its token lets the asker open a helper connection (jz_open_as)
    to report metrics and receive instructions, so early stopping, `trial
    set` and `trial stop` reach it as any other. It is never lost for
    silence (no dispatcher watches it) and ends only by a tell (or the
    study's deletion). A tell records the told objective value(s) as the
    last metric point and ends the trial through the trial's own end
    (ctl__trial_end): completed, failed or pruned, or pruned/stopped when
    a scheduler or a person stopped it before the tell.

    Both messages need the right to steer the study (its owner or an
    admin) and change nothing when they refuse.
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sets *code and err; returns NULL (for `return s_no(...)`). */
static json_t *s_no(const char **code, const char *what, char *err, size_t size,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static json_t *s_no(const char **code, const char *what, char *err, size_t size,
                    const char *fmt, ...)
{
    *code = what;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return NULL;
}

json_t *ctl__trial_ask(ctl_t *c, const ctl_ident *who, const json_t *msg,
                       const char **code, char *err, size_t size)
{
    const char *name;
    if (wire_get_str(msg, "study", &name, err, size)) {
        *code = "malformed";
        return NULL;
    }
    ctl_study *s = ctl__study_load(c, name, code, err, size);
    if (!s)
        return NULL;
    if (!ctl__auth_may_steer(c, who, s))
        return s_no(code, "forbidden", err, size,
                    "%s may not ask for trials of study %s: it belongs to %s (only its "
                    "owner or an admin may)",
                    who->id.user, s->row.name, ctl__auth_owner(c, s));
    if (!s->spec->ask_only)
        return s_no(code, "bad_state", err, size,
                    "study %s runs its trials through dispatchers (trial.command); "
                    "ask-and-tell needs a study whose spec has no `trial` section",
                    s->row.name);
    if (s->row.state != STUDY_RUNNING)
        return s_no(code, "bad_state", err, size,
                    "study %s is %s (`jizhi study %s %s` runs it again)", s->row.name,
                    store_study_state_name(s->row.state),
                    s->row.state == STUDY_STOPPED ? "resume" : "extend",
                    s->row.state == STUDY_STOPPED ? s->row.name : "NAME --trials N");
    if (s->spec->time_s > 0 && util_wall() - s->row.created > s->spec->time_s)
        return s_no(code, "bad_state", err, size,
                    "study %s: its time budget (budget.time_s %g) is used up",
                    s->row.name, s->spec->time_s);
    if ((long)s->ntrials >= s->spec->trials)
        return s_no(code, "bad_state", err, size,
                    "study %s: its budget of %ld trials is used up (`jizhi study extend "
                    "%s --trials N` adds more)",
                    s->row.name, s->spec->trials, s->row.name);
    int rc = ctl__study_new_trial(c, s);
    if (rc == 0)
        return s_no(code, "try_again", err, size,
                    "study %s: the %s scheduler is not ready to suggest yet; ask again",
                    s->row.name, s->spec->sched_type);
    if (rc < 0)
        return s_no(code, "bad_state", err, size,
                    "study %s: the %s scheduler has nothing more to suggest", s->row.name,
                    s->spec->sched_type);
    ctl_trial *t = s->trials[s->ntrials - 1];
    /* asked is started: the asker runs it now */
    if (ctl_trial_move(t, TRIAL_STARTING) != 0 || ctl_trial_move(t, TRIAL_RUNNING) != 0)
        return s_no(code, "internal", err, size, "trial %ld: cannot start it", t->row.id);
    t->row.started = util_wall();
    t->last_heard = t->last_report = util_now();
    if (ctl__trial_save(c, t) != 0)
        return s_no(code, "internal", err, size, "cannot store trial %ld", t->row.id);
    json_t *detail = json_pack("{s:O}", "params", t->row.params);
    store_event_add(c->store, util_wall(), s->row.id, t->row.id, "controller",
                    "trial_asked", detail, 1);
    json_decref(detail);
    log_info("ctl", "study %s trial %ld asked by %s", s->row.name, t->row.id,
             who->id.user[0] ? who->id.user : "a trusted peer");
    char ckpt[1200];
    snprintf(ckpt, sizeof ckpt, "%s/%s/trial-%ld", c->ckpt_root, s->row.name, t->row.id);
    return json_pack("{s:I, s:I, s:s, s:O, s:s, s:s, s:s}", "trial",
                     (json_int_t)t->row.id, "number", (json_int_t)t->row.number, "token",
                     t->row.token, "params", t->row.params, "study", s->row.name,
                     "endpoint", c->endpoint, "checkpoint_dir", ckpt);
}

/* The told values: `value` (one objective) or `values` (one per
   objective), numbers or "nan"/"inf"/"-inf". n: how many were given.
   0, or -1 with err. */
static int s_told_values(const json_t *msg, const spec_t *spec, double *out, size_t *n,
                         char *err, size_t size)
{
    const json_t *v = json_object_get(msg, "value");
    const json_t *vs = json_object_get(msg, "values");
    *n = 0;
    if (v && vs) {
        snprintf(err, size, "give 'value' or 'values', not both");
        return -1;
    }
    if (v) {
        if (wire_to_double(v, &out[0]) != 0) {
            snprintf(err, size, "field 'value': expected a number");
            return -1;
        }
        *n = 1;
    } else if (vs) {
        if (!json_is_array(vs) || json_array_size(vs) > SPEC_MAX_OBJECTIVES) {
            snprintf(err, size, "field 'values': expected an array of at most %d numbers",
                     SPEC_MAX_OBJECTIVES);
            return -1;
        }
        for (size_t i = 0; i < json_array_size(vs); i++)
            if (wire_to_double(json_array_get(vs, i), &out[i]) != 0) {
                snprintf(err, size, "values[%zu]: expected a number", i);
                return -1;
            }
        *n = json_array_size(vs);
    }
    if (*n && *n != spec->nobjectives) {
        snprintf(err, size,
                 "the study has %zu objective%s (%s%s): tell %zu value%s, not %zu",
                 spec->nobjectives, spec->nobjectives > 1 ? "s" : "", spec->metric,
                 spec->nobjectives > 1 ? ", ..." : "", spec->nobjectives,
                 spec->nobjectives > 1 ? "s" : "", *n);
        return -1;
    }
    return 0;
}

json_t *ctl__trial_tell(ctl_t *c, const ctl_ident *who, const json_t *msg,
                        const char **code, char *err, size_t size)
{
    long id;
    if (wire_get_long(msg, "trial", &id, err, size)) {
        *code = "malformed";
        return NULL;
    }
    ctl_trial *t = ctl__trial_by_id(c, id);
    if (!t) {
        store_trial row;
        int found = store_trial_get(c->store, id, &row);
        if (found == 1) {
            json_t *r = s_no(code, "bad_state", err, size,
                             "trial %ld has ended (%s): only a running trial can be told",
                             id, store_trial_state_name(row.state));
            store_trial_fini(&row);
            return r;
        }
        return s_no(code, "unknown_trial", err, size, "no trial %ld", id);
    }
    ctl_study *s = t->study;
    if (!ctl__auth_may_steer(c, who, s))
        return s_no(code, "forbidden", err, size,
                    "%s may not tell trial %ld of study %s: it belongs to %s (only its "
                    "owner or an admin may)",
                    who->id.user, id, s->row.name, ctl__auth_owner(c, s));
    if (!ctl_trial_active(t))
        return s_no(code, "bad_state", err, size,
                    "trial %ld is %s: only a running trial can be told", id,
                    store_trial_state_name(t->row.state));
    if (!s->spec->ask_only)
        return s_no(code, "bad_state", err, size,
                    "trial %ld runs under a dispatcher (trial.command): its program's "
                    "exit ends it, not a tell",
                    id);
    const char *state = json_string_value(json_object_get(msg, "state"));
    store_trial_state to = TRIAL_COMPLETED;
    if (state && !strcmp(state, "failed"))
        to = TRIAL_FAILED;
    else if (state && !strcmp(state, "pruned"))
        to = TRIAL_PRUNED;
    else if (state && strcmp(state, "completed"))
        return s_no(
            code, "malformed", err, size,
            "field 'state': expected \"completed\", \"failed\" or \"pruned\", not "
            "\"%.40s\"",
            state);
    const json_t *mj = json_object_get(msg, "message");
    if (mj && !json_is_string(mj))
        return s_no(code, "malformed", err, size, "field 'message': expected a string");
    const char *message = mj ? json_string_value(mj) : "";
    double vals[SPEC_MAX_OBJECTIVES];
    size_t n;
    if (s_told_values(msg, s->spec, vals, &n, err, size) != 0) {
        *code = "malformed";
        return NULL;
    }
    if (to == TRIAL_COMPLETED && n == 0)
        return s_no(code, "malformed", err, size,
                    "a completed trial needs its objective: 'value' (or 'values' for "
                    "several objectives)");
    if (ctl__txn(c) != 0)
        return s_no(code, "internal", err, size, "the store is unavailable");
    if (n > 0) {
        /* the told values are the trial's last objective values, a metric
           point each like any report: its best value and its result (per
           objective.use) follow from them and the reports before */
        store_point pts[SPEC_MAX_OBJECTIVES];
        long step = t->row.last_step >= 0 ? t->row.last_step + 1 : 0;
        for (size_t k = 0; k < n; k++) {
            pts[k].step = step;
            pts[k].name = s->spec->objectives[k].metric;
            pts[k].value = vals[k];
        }
        if (ctl__trial_metrics(c, t, pts, n, util_now()) != 0)
            return s_no(code, "internal", err, size, "cannot store trial %ld's value",
                        id);
    }
    char reason[300];
    if (t->plan == PLAN_STOP) { /* stopped before the tell: as its exit would end */
        to = to == TRIAL_FAILED ? TRIAL_FAILED
             : t->plan_pruned   ? TRIAL_PRUNED
                                : TRIAL_STOPPED;
        snprintf(reason, sizeof reason, "%s",
                 to == TRIAL_FAILED ? message : t->plan_reason);
    } else if (to == TRIAL_FAILED) {
        snprintf(reason, sizeof reason, "%s", *message ? message : "failed (told)");
    } else if (to == TRIAL_PRUNED) {
        snprintf(reason, sizeof reason, "%s",
                 *message ? message : "pruned by its program (told)");
    } else {
        snprintf(reason, sizeof reason, "%s", message);
    }
    ctl__trial_end(c, t, to, reason);
    return json_pack("{s:I, s:s, s:o}", "trial", (json_int_t)id, "state",
                     store_trial_state_name(t->row.state), "value",
                     wire_real(t->row.value));
}
