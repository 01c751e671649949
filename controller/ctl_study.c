/*  ctl_study.c - studies and trials in the controller: loading, submit,
    creating trials from the scheduler, starting them on dispatchers,
    retries, lost trials, ends, budgets and study completion.

    Every change goes through the iteration's transaction (ctl__txn) and
    is committed before anything it causes leaves the controller.
*/
#include "ctl_internal.h"

#include "../common/log.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STOP_GRACE_S 10.0 /* after a stop instruction, kill the process */

static int s_is_ended(const ctl_trial *t)
{
    return !strcmp(t->row.state, "completed") || !strcmp(t->row.state, "failed") ||
           !strcmp(t->row.state, "stopped");
}

static void s_token(char *out, size_t size)
{
    unsigned char raw[16] = {0};
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, raw, sizeof raw) != (ssize_t)sizeof raw) {
        /* no urandom: fall back to a weaker but still per-trial value */
        unsigned long long x = (unsigned long long)(wire_wall() * 1e6) ^
                               ((unsigned long long)getpid() << 32);
        for (size_t i = 0; i < sizeof raw;
             i++, x = x * 6364136223846793005ULL + 1442695040888963407ULL)
            raw[i] ^= (unsigned char)(x >> 56);
    }
    if (fd >= 0)
        close(fd);
    for (size_t i = 0; i < sizeof raw && 2 * i + 2 < size; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

void ctl__study_free(ctl_study *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->ntrials; i++) {
        store_trial_fini(&s->trials[i]->row);
        free(s->trials[i]);
    }
    free(s->trials);
    sched_destroy(&s->sched);
    for (int i = 0; i < s->nmon; i++)
        sched_destroy(&s->mon[i]);
    spec_destroy(&s->spec);
    store_study_fini(&s->row);
    free(s);
}

static ctl_trial *s_add_trial(ctl_study *s)
{
    if (s->ntrials == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->trials = realloc(s->trials, s->cap * sizeof *s->trials);
    }
    ctl_trial *t = calloc(1, sizeof *t);
    t->study = s;
    s->trials[s->ntrials++] = t;
    return t;
}

/* Builds the in-memory study from its row (takes ownership of row's
   JSON). NULL with err on failure. */
static ctl_study *s_study_open(ctl_t *c, store_study *row, char *err, size_t errsize)
{
    ctl_study *s = calloc(1, sizeof *s);
    s->row = *row;
    memset(row, 0, sizeof *row);
    spec_error serr;
    s->spec = spec_parse(s->row.spec, 0, &serr);
    if (!s->spec) {
        char buf[400];
        snprintf(err, errsize, "study %s: stored spec is invalid: %s", s->row.name,
                 spec_strerror(&serr, buf, sizeof buf));
        ctl__study_free(s);
        return NULL;
    }
    s->sched = sched_new(s->spec, err, errsize);
    if (!s->sched) {
        ctl__study_free(s);
        return NULL;
    }
    s->nmon = sched_monitors_new(s->spec, s->mon, 4, err, errsize);
    if (s->nmon < 0) {
        s->nmon = 0;
        ctl__study_free(s);
        return NULL;
    }
    /* saved state: {"main": scheduler, "monitors": [one per monitor]} */
    json_t *saved = s->row.sched_state, *mons = json_object_get(saved, "monitors");
    int bad = saved && json_object_get(saved, "main") &&
              s->sched->ops->restore(s->sched, json_object_get(saved, "main")) != 0;
    for (int i = 0; saved && !bad && i < s->nmon && i < (int)json_array_size(mons); i++)
        bad = s->mon[i]->ops->restore(s->mon[i], json_array_get(mons, (size_t)i)) != 0;
    if (bad) {
        snprintf(err, errsize, "study %s: cannot restore the %s scheduler's state",
                 s->row.name, s->spec->sched_type);
        ctl__study_free(s);
        return NULL;
    }
    store_trial *rows;
    long n = store_trials_load(c->store, s->row.id, &rows);
    if (n < 0) {
        snprintf(err, errsize, "study %s: cannot load trials: %s", s->row.name,
                 store_errmsg(c->store));
        ctl__study_free(s);
        return NULL;
    }
    double now = wire_now();
    for (long i = 0; i < n; i++) {
        ctl_trial *t = s_add_trial(s);
        t->row = rows[i];
        /* a trial that was running gets lost_timeout to come back */
        t->last_heard = now;
    }
    free(rows); /* the rows' params moved into the trials */
    return s;
}

int ctl__load(ctl_t *c, char *err, size_t errsize)
{
    long *ids = NULL;
    long n = store_running_studies(c->store, &ids);
    if (n < 0) {
        snprintf(err, errsize, "cannot list studies: %s", store_errmsg(c->store));
        return -1;
    }
    for (long i = 0; i < n; i++) {
        store_study row;
        if (store_study_get_id(c->store, ids[i], &row) != 1)
            continue;
        ctl_study *s = s_study_open(c, &row, err, errsize);
        if (!s) {
            log_error("ctl", "not resuming: %s", err);
            continue;
        }
        c->studies = realloc(c->studies, (c->nstudies + 1) * sizeof *c->studies);
        c->studies[c->nstudies++] = s;
    }
    free(ids);
    err[0] = 0;
    return 0;
}

int ctl__submit(ctl_t *c, json_t *spec_json, ctl_study **out, int *resumed, int *finished,
                const char **code, char *msg, size_t msgsize)
{
    spec_error serr;
    char buf[400];
    *resumed = *finished = 0;
    spec_t *spec = spec_parse(spec_json, 1, &serr);
    if (!spec) {
        *code = "bad_spec";
        snprintf(msg, msgsize, "%s", spec_strerror(&serr, buf, sizeof buf));
        return -1;
    }
    if (sched_check(spec, msg, msgsize) != 0) {
        *code = "bad_spec";
        spec_destroy(&spec);
        return -1;
    }
    char *canon = spec_canonical(spec);
    ctl_study *live = ctl__study_by_name(c, spec->name);
    store_study row;
    int found = store_study_get(c->store, spec->name, &row);
    int rc = -1;
    if (found < 0) {
        *code = "internal";
        snprintf(msg, msgsize, "database error: %s", store_errmsg(c->store));
    } else if (found == 1) {
        char *old = json_dumps(row.spec, JSON_SORT_KEYS | JSON_COMPACT);
        if (strcmp(old, canon) != 0) {
            *code = "conflict";
            snprintf(msg, msgsize,
                     "a study named \"%s\" already exists with a different spec; "
                     "choose another name or use the same spec to continue it",
                     spec->name);
        } else if (!strcmp(row.state, "finished")) {
            *finished = 1;
            *out = live;
            rc = 0;
        } else {
            *resumed = 1;
            if (!live) {
                /* stopped earlier: load it and run it again */
                live = s_study_open(c, &row, msg, msgsize);
                if (live) {
                    c->studies =
                        realloc(c->studies, (c->nstudies + 1) * sizeof *c->studies);
                    c->studies[c->nstudies++] = live;
                }
            }
            if (live) {
                if (strcmp(live->row.state, "running"))
                    ctl__study_resume(c, live, "cli");
                *out = live;
                rc = 0;
            } else {
                *code = "internal";
            }
        }
        free(old);
        store_study_fini(&row);
    } else {
        long id = ctl__txn(c) == 0 ? store_study_insert(c->store, spec->name, spec->json,
                                                        "running", wire_wall())
                                   : -1;
        if (id < 0 || store_study_get_id(c->store, id, &row) != 1) {
            *code = "internal";
            snprintf(msg, msgsize, "cannot store the study: %s", store_errmsg(c->store));
        } else {
            ctl_study *s = s_study_open(c, &row, msg, msgsize);
            if (s) {
                c->studies = realloc(c->studies, (c->nstudies + 1) * sizeof *c->studies);
                c->studies[c->nstudies++] = s;
                store_event_add(c->store, wire_wall(), id, -1, "cli", "study_submitted",
                                NULL, 1);
                log_info("ctl",
                         "study %s submitted (%ld trials, %ld in parallel, scheduler %s)",
                         s->row.name, s->spec->trials, s->spec->parallel,
                         s->spec->sched_type);
                *out = s;
                rc = 0;
            } else {
                *code = "internal";
            }
        }
    }
    free(canon);
    spec_destroy(&spec);
    return rc;
}

/* ---- trial lifecycle ---- */

static void s_release(ctl_trial *t)
{
    ctl_disp *d = t->disp;
    if (!d)
        return;
    if (d->used > 0)
        d->used--;
    for (long g = 0; g < d->ngpus && t->gpus > 0; g++)
        if (d->gpu_used[g] == (int)t->row.id) {
            d->gpu_used[g] = 0;
            t->gpus--;
        }
    t->disp = NULL;
}

static double s_result(const ctl_trial *t)
{
    return t->study->spec->use_best ? t->row.best_value : t->row.last_value;
}

static void s_end(ctl_t *c, ctl_trial *t, const char *state, const char *reason)
{
    ctl_study *s = t->study;
    s_release(t);
    snprintf(t->row.state, sizeof t->row.state, "%s", state);
    snprintf(t->row.reason, sizeof t->row.reason, "%s", reason);
    t->row.value = strcmp(state, "failed") ? s_result(t) : NAN;
    t->row.ended = wire_wall();
    ctl__save_trial(c, t);
    sched_outcome oc = !strcmp(state, "completed") ? SCHED_COMPLETED
                       : !strcmp(state, "stopped") ? SCHED_STOPPED
                                                   : SCHED_FAILED;
    for (int m = -1; m < s->nmon; m++) {
        sched_t *sc = m < 0 ? s->sched : s->mon[m];
        if (sc->ops->on_complete)
            sc->ops->on_complete(sc, t->row.id, t->row.params, oc, t->row.value);
    }
    s->sched_dirty = 1;
    json_t *detail =
        json_pack("{s:s, s:o}", "reason", reason, "value", wire_real(t->row.value));
    store_event_add(c->store, wire_wall(), s->row.id, t->row.id, "controller", state,
                    detail, 1);
    json_decref(detail);
    log_info("ctl", "study %s trial %ld %s%s%s", s->row.name, t->row.number, state,
             *reason ? ": " : "", reason);
}

/* Puts a trial back to pending for another attempt. */
static void s_retry(ctl_t *c, ctl_trial *t, const char *reason)
{
    s_release(t);
    t->row.attempt++;
    snprintf(t->row.state, sizeof t->row.state, "pending");
    snprintf(t->row.reason, sizeof t->row.reason, "%s", reason);
    t->row.last_value = t->row.best_value = NAN;
    t->row.last_step = -1;
    t->row.metric_req = 0;
    t->row.metric_session[0] = 0;
    t->row.pid = 0;
    t->peer.len = 0;
    ctl__save_trial(c, t);
    json_t *detail =
        json_pack("{s:s, s:I}", "reason", reason, "attempt", (json_int_t)t->row.attempt);
    store_event_add(c->store, wire_wall(), t->study->row.id, t->row.id, "controller",
                    "retry", detail, 1);
    json_decref(detail);
    log_info("ctl", "study %s trial %ld: %s; retrying (attempt %ld)", t->study->row.name,
             t->row.number, reason, t->row.attempt + 1);
}

/* ---- restart-from-checkpoint fallback ----

   A `load` (PBT exploit, guard rollback) reaches a program only when it
   polls. When one is not acknowledged within load_timeout_s (the pbt
   scheduler's option, else the guard's; default 60 s, 0 = never), the
   instruction is resolved as not applied, the trial's process is killed
   through its dispatcher, and when it has exited the same trial starts
   as its next attempt with JIZHI_LOAD_CHECKPOINT=path; its params are
   already the load's new generation. Recorded as a
   `restart_from_checkpoint` event. The pending restarts live in memory:
   a controller restarted in between handles the exit as a normal one. */

#define LOAD_TIMEOUT_DEFAULT_S 60.0

static double s_load_timeout(const ctl_study *s)
{
    json_t *v = NULL;
    if (!strcmp(s->spec->sched_type, "pbt"))
        v = json_object_get(s->spec->sched_opts, "load_timeout_s");
    if (!v && s->spec->guard)
        v = json_object_get(s->spec->guard, "load_timeout_s");
    return json_is_number(v) ? json_number_value(v) : LOAD_TIMEOUT_DEFAULT_S;
}

/* Called per active trial each tick: starts the fallback for a load
   that waited too long. */
static void s_load_fallback(ctl_t *c, ctl_study *s, ctl_trial *t, double now)
{
    double limit = s_load_timeout(s);
    if (limit <= 0 || t->stop_requested || !t->disp || t->restart_from[0])
        return;
    for (size_t i = 0; i < c->ninstrs; i++) {
        ctl_instr *in = &c->instrs[i];
        const char *kind = json_string_value(json_object_get(in->msg, "kind"));
        const char *path = json_string_value(json_object_get(in->msg, "path"));
        if (in->trial_id != t->row.id || now - in->sent < limit || !kind ||
            strcmp(kind, "load") || !path || strlen(path) >= sizeof t->restart_from)
            continue;
        if (ctl__txn(c) != 0)
            return;
        snprintf(t->restart_from, sizeof t->restart_from, "%s", path);
        json_t *detail = json_pack("{s:s, s:I, s:O?, s:f}", "path", path, "instruction",
                                   (json_int_t)in->id, "from",
                                   json_object_get(in->msg, "from"), "timeout_s", limit);
        char why[160];
        snprintf(why, sizeof why,
                 "not acknowledged within %g s: restarting the trial from the "
                 "checkpoint",
                 limit);
        ctl__instr_done(c, in->id, 0, why); /* `in` is gone after this */
        store_event_add(c->store, wire_wall(), s->row.id, t->row.id, "controller",
                        "restart_from_checkpoint", detail, 1);
        json_decref(detail);
        ctl__send(c, &t->disp->peer,
                  json_pack("{s:s, s:I, s:I, s:s}", "type", "kill", "trial",
                            (json_int_t)t->row.id, "attempt", (json_int_t)t->row.attempt,
                            "reason",
                            "restart from a checkpoint (load not acknowledged)"));
        t->kill_sent = 1;
        log_info("ctl",
                 "study %s trial %ld: load not acknowledged within %g s; restarting it "
                 "from %s",
                 s->row.name, t->row.number, limit, t->restart_from);
        return;
    }
}

/* At the trial's exit: 1 when it was killed for a restart, now pending
   as its next attempt. A run that completed before the kill stands. */
static int s_restart_exited(ctl_t *c, ctl_trial *t, const char *how, long code)
{
    if (!t->restart_from[0])
        return 0;
    if (!strcmp(how, "exited") && code == 0 && !isnan(s_result(t))) {
        t->restart_from[0] = 0;
        return 0;
    }
    s_retry(c, t, "restart from a checkpoint (load not acknowledged)");
    return 1;
}

/* At the trial's start: the checkpoint its restart loads, if any. */
static void s_restart_env(ctl_t *c, ctl_trial *t, json_t *env)
{
    if (!t->restart_from[0])
        return;
    json_object_set_new(env, "JIZHI_LOAD_CHECKPOINT", json_string(t->restart_from));
    t->restart_from[0] = 0;
}

void ctl__trial_exited(ctl_t *c, ctl_trial *t, const char *how, long code,
                       const char *message)
{
    if (s_is_ended(t) || !strcmp(t->row.state, "pending"))
        return;                 /* a repeated report */
    if (!strcmp(how, "lost")) { /* preempted, node failure: not the trial's fault */
        ctl__trial_lost(c, t, message && *message ? message : "lost by its dispatcher");
        return;
    }
    if (s_restart_exited(c, t, how, code))
        return;
    if (t->release == 2) { /* pause --release: checkpointed and exited */
        s_release(t);
        t->release = 0;
        t->stop_requested = 0;
        snprintf(t->row.state, sizeof t->row.state, "suspended");
        snprintf(t->row.reason, sizeof t->row.reason, "paused and released at step %ld",
                 t->row.checkpoint_step);
        t->row.pid = 0;
        ctl__save_trial(c, t);
        return;
    }
    snprintf(t->row.exit_how, sizeof t->row.exit_how, "%s", how);
    t->row.exit_code = code;
    char reason[256];
    if (t->stop_requested) {
        s_end(c, t, "stopped", t->stop_reason);
        return;
    }
    double v = s_result(t);
    if (!strcmp(how, "exited") && code == 0 && !isnan(v)) {
        s_end(c, t, "completed", "");
        return;
    }
    if (!strcmp(how, "exited") && code == 0)
        snprintf(reason, sizeof reason, "exited without reporting %s",
                 t->study->spec->metric);
    else if (!strcmp(how, "exited"))
        snprintf(reason, sizeof reason, "exited with status %ld", code);
    else if (!strcmp(how, "timeout"))
        snprintf(reason, sizeof reason, "killed after timeout_s=%g",
                 t->study->spec->timeout_s);
    else if (!strcmp(how, "signaled"))
        snprintf(reason, sizeof reason, "killed by signal %ld", code);
    else
        snprintf(reason, sizeof reason, "%s%s%s", how, message && *message ? ": " : "",
                 message ? message : "");
    if (t->row.attempt < t->study->spec->retries)
        s_retry(c, t, reason);
    else
        s_end(c, t, "failed", reason);
}

void ctl__trial_lost(ctl_t *c, ctl_trial *t, const char *why)
{
    if (!ctl__trial_active(t))
        return;
    snprintf(t->row.exit_how, sizeof t->row.exit_how, "lost");
    if (t->stop_requested) {
        s_end(c, t, "stopped", t->stop_reason);
        return;
    }
    /* losing a trial is not its fault: it gets its retries plus two */
    if (t->row.attempt < t->study->spec->retries + 2)
        s_retry(c, t, why);
    else
        s_end(c, t, "failed", why);
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
    return ctl__save_trial(c, t);
}

/* Carries out (and releases) the instructions a scheduler returned. */
static void s_apply(ctl_t *c, ctl_study *s, sched_t *by, sched_instr *ins, int k)
{
    for (int j = 0; j < k; j++) {
        ctl_trial *target = ctl__trial_by_id(c, ins[j].trial);
        if (target && ctl__trial_active(target) && target->study == s &&
            ctl__txn(c) == 0) {
            if (!strcmp(ins[j].kind, "stop"))
                ctl__trial_stop(c, target, by->ops->name, ins[j].reason);
            else if (strcmp(ins[j].kind, "load") ||
                     s_new_generation(c, target, ins[j].args) == 0)
                ctl__instruct(c, target, ins[j].kind, ins[j].args, by->ops->name,
                              ins[j].reason, NULL, 0);
        }
        sched_instr_fini(&ins[j]);
    }
    if (k > 0)
        s->sched_dirty = 1;
}

void ctl__trial_release(ctl_t *c, ctl_trial *t, const char *who)
{
    t->release = 1;
    ctl__instruct(c, t, "checkpoint", NULL, who, "pause --release: checkpoint, then exit",
                  NULL, 0);
}

void ctl__trial_unsuspend(ctl_t *c, ctl_trial *t, const char *who)
{
    if (strcmp(t->row.state, "suspended") || ctl__txn(c) != 0)
        return;
    s_retry(c, t, "resumed from its checkpoint");
    snprintf(t->restart_from, sizeof t->restart_from, "%s", t->row.checkpoint);
}

void ctl__trial_checkpoint(ctl_t *c, ctl_trial *t, long step, const char *path)
{
    ctl_study *s = t->study;
    snprintf(t->row.checkpoint, sizeof t->row.checkpoint, "%s", path);
    t->row.checkpoint_step = step;
    if (ctl__save_trial(c, t) != 0)
        return;
    json_t *detail = json_pack("{s:I, s:s}", "step", (json_int_t)step, "path", path);
    store_event_add(c->store, wire_wall(), s->row.id, t->row.id, "trial", "checkpoint",
                    detail, 1);
    json_decref(detail);
    for (int m = -1; m < s->nmon; m++) {
        sched_t *sc = m < 0 ? s->sched : s->mon[m];
        if (!sc->ops->on_checkpoint)
            continue;
        sched_instr ins[8];
        int k = sc->ops->on_checkpoint(sc, t->row.id, step, path, wire_now(), ins, 8);
        s_apply(c, s, sc, ins, k);
    }
    if (t->release == 1) {
        t->release = 2;
        ctl__trial_stop(c, t, "cli", "paused and released");
    }
}

int ctl__trial_metrics(ctl_t *c, ctl_trial *t, const store_point *pts, size_t n,
                       double now)
{
    ctl_study *s = t->study;
    if (store_metrics_add(c->store, t->row.id, t->row.attempt, pts, n, wire_wall()) !=
        0) {
        log_error("ctl", "cannot store metrics: %s", store_errmsg(c->store));
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (pts[i].step > t->row.last_step)
            t->row.last_step = pts[i].step;
        if (!strcmp(pts[i].name, s->spec->metric)) {
            t->row.last_value = pts[i].value;
            if (!isnan(pts[i].value) &&
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
            s_apply(c, s, sc, ins, k);
        }
    }
    return ctl__save_trial(c, t);
}

void ctl__trial_stop(ctl_t *c, ctl_trial *t, const char *who, const char *reason)
{
    int idle = !strcmp(t->row.state, "pending") || !strcmp(t->row.state, "suspended");
    if (!ctl__trial_active(t) && !idle)
        return;
    if (idle) {
        t->stop_requested = 1;
        snprintf(t->stop_reason, sizeof t->stop_reason, "%s", reason);
        s_end(c, t, "stopped", reason);
        return;
    }
    if (t->stop_requested)
        return;
    t->stop_requested = 1;
    snprintf(t->stop_reason, sizeof t->stop_reason, "%s", reason);
    t->stop_sent = wire_now();
    ctl__instruct(c, t, "stop", NULL, who, reason, NULL, 0);
}

/* ---- scheduling ---- */

static ctl_disp *s_pick_disp(ctl_t *c, long gpus)
{
    ctl_disp *best = NULL;
    for (size_t i = 0; i < c->ndisps; i++) {
        ctl_disp *d = c->disps[i];
        if (!d->alive || d->used >= d->slots)
            continue;
        long free_gpus = 0;
        for (long g = 0; g < d->ngpus; g++)
            free_gpus += d->gpu_used[g] == 0;
        if (free_gpus < gpus)
            continue;
        if (!best || d->slots - d->used > best->slots - best->used)
            best = d;
    }
    return best;
}

static void s_start(ctl_t *c, ctl_trial *t, ctl_disp *d)
{
    ctl_study *s = t->study;
    spec_error serr;
    json_t *argv = spec_expand_command(s->spec, t->row.params, &serr);
    if (!argv) {
        char buf[400];
        s_end(c, t, "failed", spec_strerror(&serr, buf, sizeof buf));
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
    s_restart_env(c, t, env);
    free(params);
    json_t *msg =
        json_pack("{s:s, s:I, s:I, s:s, s:o, s:o, s:f, s:I}", "type", "start", "trial",
                  (json_int_t)t->row.id, "attempt", (json_int_t)t->row.attempt, "study",
                  s->row.name, "argv", argv, "env", env, "timeout_s", s->spec->timeout_s,
                  "gpus", (json_int_t)s->spec->gpus);
    t->disp = d;
    d->used++;
    t->gpus = 0;
    for (long g = 0; g < d->ngpus && t->gpus < s->spec->gpus; g++)
        if (!d->gpu_used[g]) {
            d->gpu_used[g] = (int)t->row.id;
            t->gpus++;
        }
    snprintf(t->row.state, sizeof t->row.state, "starting");
    snprintf(t->row.dispatcher, sizeof t->row.dispatcher, "%s", d->name);
    t->row.exit_how[0] = 0;
    t->row.started = wire_wall();
    t->last_heard = wire_now();
    t->stop_requested = 0;
    t->stop_sent = 0;
    t->kill_sent = 0;
    if (ctl__save_trial(c, t) == 0)
        ctl__send(c, &d->peer, msg);
    else
        json_decref(msg);
}

/* Asks the scheduler for a new trial. 1 created, 0 not now, -1 no more. */
static int s_create(ctl_t *c, ctl_study *s)
{
    json_t *params = NULL;
    /* the new trial's id is reserved before suggest and kept across
       SCHED_WAIT, so the scheduler sees the id the trial will have */
    if (s->next_id <= 0)
        s->next_id = c->next_trial_id++;
    int rc = s->sched->ops->suggest(s->sched, s->next_id, &params);
    if (rc == SCHED_WAIT)
        return 0;
    if (rc == SCHED_DONE) {
        s->exhausted = 1;
        return -1;
    }
    if (rc != SCHED_OK || !params) {
        log_error("ctl", "study %s: the %s scheduler failed to suggest", s->row.name,
                  s->spec->sched_type);
        s->exhausted = 1;
        return -1;
    }
    if (ctl__txn(c) != 0) {
        json_decref(params);
        return 0;
    }
    ctl_trial *t = s_add_trial(s);
    t->row.id = s->next_id;
    s->next_id = 0;
    t->row.study_id = s->row.id;
    t->row.number = (long)s->ntrials - 1;
    snprintf(t->row.state, sizeof t->row.state, "pending");
    s_token(t->row.token, sizeof t->row.token);
    t->row.params = params;
    t->row.parent = -1;
    t->row.value = t->row.last_value = t->row.best_value = NAN;
    t->row.last_step = -1;
    t->row.created = wire_wall();
    if (store_trial_insert(c->store, &t->row) != 0) {
        log_error("ctl", "cannot store a new trial: %s", store_errmsg(c->store));
        store_trial_fini(&t->row);
        free(t);
        s->ntrials--;
        return 0;
    }
    s->sched_dirty = 1;
    return 1;
}

static int s_time_over(const ctl_study *s)
{
    return s->spec->time_s > 0 && wire_wall() - s->row.created > s->spec->time_s;
}

static void s_tick_study(ctl_t *c, ctl_study *s, double now)
{
    long active = 0, pending = 0, held = 0; /* held: suspended by pause --release */
    int time_over = s_time_over(s);
    for (size_t i = 0; i < s->ntrials; i++) {
        ctl_trial *t = s->trials[i];
        if (ctl__trial_active(t)) {
            if (now - t->last_heard > c->lost_timeout) {
                ctl__trial_lost(c, t, "lost: no word from the trial or its dispatcher");
                continue;
            }
            if (time_over && !t->stop_requested)
                ctl__trial_stop(c, t, "controller", "study time budget used up");
            s_load_fallback(c, s, t, now);
            if (t->stop_requested && !t->kill_sent && now - t->stop_sent > STOP_GRACE_S &&
                t->disp) {
                ctl__send(c, &t->disp->peer,
                          json_pack("{s:s, s:I, s:I, s:s}", "type", "kill", "trial",
                                    (json_int_t)t->row.id, "attempt",
                                    (json_int_t)t->row.attempt, "reason",
                                    t->stop_reason));
                t->kill_sent = 1;
            }
            active++;
        } else if (!strcmp(t->row.state, "pending") ||
                   !strcmp(t->row.state, "suspended")) {
            if (time_over)
                ctl__trial_stop(c, t, "controller", "study time budget used up");
            else if (!strcmp(t->row.state, "pending"))
                pending++;
            else
                held++;
        }
    }
    /* fill free parallel slots: retries first, then new trials */
    while (active < s->spec->parallel && !time_over) {
        ctl_trial *next = NULL;
        for (size_t i = 0; i < s->ntrials && !next; i++)
            if (!strcmp(s->trials[i]->row.state, "pending"))
                next = s->trials[i];
        ctl_disp *d = s_pick_disp(c, s->spec->gpus);
        if (!d)
            break;
        if (!next) {
            if ((long)s->ntrials >= s->spec->trials || s->exhausted ||
                s_create(c, s) != 1)
                break;
            next = s->trials[s->ntrials - 1];
        } else {
            pending--;
        }
        s_start(c, next, d);
        active++;
    }
    if (s->sched_dirty && ctl__txn(c) == 0) {
        json_t *mons = json_array();
        for (int i = 0; i < s->nmon; i++)
            json_array_append_new(mons, s->mon[i]->ops->save(s->mon[i]));
        json_t *state = json_pack("{s:o, s:o}", "main", s->sched->ops->save(s->sched),
                                  "monitors", mons);
        store_study_set_sched(c->store, s->row.id, state);
        json_decref(state);
        s->sched_dirty = 0;
    }
    int budget_done = (long)s->ntrials >= s->spec->trials || s->exhausted || time_over;
    if (active == 0 && pending == 0 && held == 0 && budget_done && ctl__txn(c) == 0) {
        store_study_set_state(c->store, s->row.id, "finished", wire_wall());
        snprintf(s->row.state, sizeof s->row.state, "finished");
        store_event_add(c->store, wire_wall(), s->row.id, -1, "controller",
                        "study_finished", NULL, 1);
        log_info("ctl", "study %s finished", s->row.name);
    }
}

void ctl__tick(ctl_t *c, double now)
{
    for (size_t i = 0; i < c->ndisps; i++) {
        ctl_disp *d = c->disps[i];
        if (d->alive && now - d->last_seen > c->lost_timeout) {
            d->alive = 0;
            log_warn("ctl", "dispatcher %s is silent; its trials will be marked lost",
                     d->name);
        }
    }
    for (size_t i = 0; i < c->nstudies; i++)
        if (!strcmp(c->studies[i]->row.state, "running"))
            s_tick_study(c, c->studies[i], now);
}

void ctl__study_stop(ctl_t *c, ctl_study *s, const char *who)
{
    if (strcmp(s->row.state, "running") || ctl__txn(c) != 0)
        return;
    for (size_t i = 0; i < s->ntrials; i++)
        if (ctl__trial_active(s->trials[i]))
            ctl__trial_stop(c, s->trials[i], who, "study stopped");
    snprintf(s->row.state, sizeof s->row.state, "stopped");
    store_study_set_state(c->store, s->row.id, "stopped", wire_wall());
    store_event_add(c->store, wire_wall(), s->row.id, -1, who, "study_stopped", NULL, 1);
}

void ctl__study_resume(ctl_t *c, ctl_study *s, const char *who)
{
    if (!strcmp(s->row.state, "running") || !strcmp(s->row.state, "finished") ||
        ctl__txn(c) != 0)
        return;
    /* trials stopped by the study stop run again */
    for (size_t i = 0; i < s->ntrials; i++) {
        ctl_trial *t = s->trials[i];
        if (!strcmp(t->row.state, "stopped") && !strcmp(t->row.reason, "study stopped")) {
            snprintf(t->row.state, sizeof t->row.state, "pending");
            t->row.attempt++;
            t->stop_requested = 0;
            ctl__save_trial(c, t);
        }
    }
    snprintf(s->row.state, sizeof s->row.state, "running");
    store_study_set_state(c->store, s->row.id, "running", wire_wall());
    store_event_add(c->store, wire_wall(), s->row.id, -1, who, "study_resumed", NULL, 1);
}

json_t *ctl__study_status(ctl_t *c, ctl_study *s)
{
    long done = 0, running = 0, failed = 0, pending = 0;
    ctl_trial *best = NULL;
    for (size_t i = 0; i < s->ntrials; i++) {
        ctl_trial *t = s->trials[i];
        if (s_is_ended(t))
            done++;
        if (!strcmp(t->row.state, "failed"))
            failed++;
        if (ctl__trial_active(t))
            running++;
        if (!strcmp(t->row.state, "pending"))
            pending++;
        if (!strcmp(t->row.state, "completed") &&
            (!best || spec_better(s->spec, t->row.value, best->row.value)))
            best = t;
    }
    json_t *b = best
                    ? json_pack("{s:I, s:I, s:o, s:O}", "trial", (json_int_t)best->row.id,
                                "number", (json_int_t)best->row.number, "value",
                                wire_real(best->row.value), "params", best->row.params)
                    : json_null();
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:o, s:f}", "study",
                     s->row.name, "state", s->row.state, "metric", s->spec->metric,
                     "total", (json_int_t)s->spec->trials, "done", (json_int_t)done,
                     "running", (json_int_t)running, "failed", (json_int_t)failed,
                     "pending", (json_int_t)pending, "best", b, "elapsed_s",
                     wire_wall() - s->row.created);
}
