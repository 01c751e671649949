/*  ctl_study.c - a study in the controller (see ctl_study.h): loading,
    submit, new trials from the scheduler, its part of the periodic tick
    (lost trials, budgets, completion; ctl__tick in ctl.c runs it) and
    status. Its state machine is in ctl_state.c.

    Every change goes through the iteration's transaction (ctl__txn) and
    is committed before anything it causes leaves the controller.
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/text.h"
#include "../common/util.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- objects ---- */

void ctl__study_free(ctl_study *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->ntrials; i++)
        ctl__trial_free(s->trials[i]);
    free(s->trials);
    ctl_due_fini(&s->due);
    sched_destroy(&s->sched);
    for (int i = 0; i < s->nmon; i++)
        sched_destroy(&s->mon[i]);
    spec_destroy(&s->spec);
    store_study_fini(&s->row);
    free(s);
}

ctl_study *ctl__study_by_name(ctl_t *c, const char *name)
{
    for (size_t i = 0; i < c->nstudies; i++)
        if (strcmp(c->studies[i]->row.name, name) == 0)
            return c->studies[i];
    return NULL;
}

static void s_add_study(ctl_t *c, ctl_study *s)
{
    c->studies = util_xrealloc(c->studies, (c->nstudies + 1) * sizeof *c->studies);
    c->studies[c->nstudies++] = s;
}

/* Builds the in-memory study from its row (takes ownership of row's
   JSON) with its trials. NULL with err on failure; then the trials it
   had put in the id map are gone again. */
/* warm_start: the completed trials of the studies named in
   spec->warm_from whose params fit this space (unknown names dropped,
   consts filled in, then spec_params_check) and that report this study's
   objectives go to the scheduler as finished trials, with ids -1, -2, ...
   (never a real trial's). Once, when the study has no saved scheduler
   state yet: afterwards they are part of that state. An event says how
   many came from each study (none for a scheduler that learns nothing
   from finished trials, with the reason). */
static void s_warm_start(ctl_t *c, ctl_study *s)
{
    sched_t *sc = s->sched;
    if (!s->spec->warm_from)
        return;
    int learns = sc->ops->on_complete || sc->ops->on_complete_metrics;
    char why_unused[120];
    snprintf(why_unused, sizeof why_unused,
             "the %s scheduler learns nothing from finished trials", s->spec->sched_type);
    long next = -1;
    size_t i;
    json_t *name;
    json_array_foreach(s->spec->warm_from, i, name)
    {
        store_study row;
        long used = 0, skipped = 0;
        if (store_study_get(c->store, json_string_value(name), &row) != 1)
            continue;
        const json_t *their = spec_json_objective(row.spec);
        const char *tm = json_string_value(json_object_get(their, "metric"));
        int same = tm && !strcmp(tm, s->spec->metric);
        store_trial *rows = NULL;
        long n = same && learns ? store_trials_load(c->store, row.id, &rows) : 0;
        for (long k = 0; k < n; k++) {
            if (rows[k].state != TRIAL_COMPLETED || !isfinite(rows[k].value)) {
                skipped += rows[k].state == TRIAL_COMPLETED;
                continue;
            }
            json_t *p = json_object();
            const char *key;
            json_t *v;
            json_object_foreach(rows[k].params, key, v)
            {
                if (spec_param_index(s->spec, key) >= 0)
                    json_object_set(p, key, v);
            }
            spec_error serr;
            json_t *m = NULL;
            int ok = spec_params_check(s->spec, p, &serr) == 0;
            if (ok && (s->spec->nobjectives > 1 || s->spec->nconstraints)) {
                m = store_metrics_last(c->store, rows[k].id);
                double f[SPEC_MAX_OBJECTIVES];
                ok = m && spec_objective_values(s->spec, rows[k].value, m, f) == 0;
            }
            if (ok) {
                if (m && sc->ops->on_complete_metrics)
                    sc->ops->on_complete_metrics(sc, next, p, SCHED_COMPLETED,
                                                 rows[k].value, m);
                else if (sc->ops->on_complete)
                    sc->ops->on_complete(sc, next, p, SCHED_COMPLETED, rows[k].value);
                next--;
                used++;
            } else {
                skipped++;
            }
            json_decref(m);
            json_decref(p);
        }
        store_trials_free(rows, n < 0 ? 0 : n);
        json_t *d = json_pack("{s:s, s:I, s:I}", "from", json_string_value(name), "used",
                              (json_int_t)used, "skipped", (json_int_t)skipped);
        if (!learns)
            json_object_set_new(d, "reason", json_string(why_unused));
        else if (!same)
            json_object_set_new(d, "reason",
                                json_string("its objective metric differs from this "
                                            "study's"));
        store_event_add(c->store, util_wall(), s->row.id, -1, "controller", "warm_start",
                        d, 1);
        json_decref(d);
        log_info("ctl", "study %s: warm start from %s: %ld trials used, %ld skipped",
                 s->row.name, json_string_value(name), used, skipped);
        store_study_fini(&row);
    }
    s->sched_dirty = 1;
}

static ctl_study *s_study_open(ctl_t *c, store_study *row, char *err, size_t errsize)
{
    ctl_study *s = util_xcalloc(1, sizeof *s);
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
    s->spec->trials += s->row.extra_trials; /* study extend */
    s->queued = store_enqueued_count(c->store, s->row.id);
    if (s->queued < 0)
        s->queued = 0;
    s->sched = sched_new(s->spec, err, errsize);
    if (!s->sched) {
        ctl__study_free(s);
        return NULL;
    }
    json_t *res = json_object_get(s->spec->early_stop, "resource");
    if (s->spec->early_stop)
        snprintf(s->es_resource, sizeof s->es_resource, "%s",
                 json_is_string(res) ? json_string_value(res) : "epoch");
    if (!strcmp(s->es_resource, "step")) /* the report step itself: always there */
        s->es_resource[0] = 0;
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
    if (!saved && ctl__txn(c) == 0)
        s_warm_start(c, s);
    store_trial *rows;
    long n = store_trials_load(c->store, s->row.id, &rows);
    if (n < 0) {
        snprintf(err, errsize, "study %s: cannot load trials: %s", s->row.name,
                 store_errmsg(c->store));
        ctl__study_free(s);
        return NULL;
    }
    long bad_state = -1;
    for (long i = 0; i < n && bad_state < 0; i++)
        if (!ctl__trial_adopt(c, s, &rows[i]))
            bad_state = i;
    store_trials_free(rows, n); /* the adopted rows' params moved into the trials */
    if (bad_state >= 0) {
        snprintf(err, errsize, "study %s: trial %ld has an unknown state", s->row.name,
                 bad_state);
        for (size_t i = 0; i < s->ntrials; i++)
            ctl_idmap_put(&c->trials, s->trials[i]->row.id, NULL);
        ctl__study_free(s);
        return NULL;
    }
    return s;
}

int ctl__load(ctl_t *c, char *err, size_t errsize)
{
    /* the instructions a controller held are in its memory only: those
       left unresolved by the last one never will be */
    long left = store_events_resolve_instructions(
        c->store, "the controller restarted before it was resolved");
    if (left < 0) {
        snprintf(err, errsize, "cannot resolve the instructions left: %s",
                 store_errmsg(c->store));
        return -1;
    }
    if (left > 0)
        log_info("ctl",
                 "%ld instructions left unresolved by the last controller: "
                 "resolved as not applied",
                 left);
    long *ids = NULL;
    long n = store_live_studies(c->store, &ids);
    if (n < 0) {
        snprintf(err, errsize, "cannot list studies: %s", store_errmsg(c->store));
        return -1;
    }
    for (long i = 0; i < n; i++) {
        store_study row;
        int found = store_study_get_id(c->store, ids[i], &row);
        if (found < 0) /* e.g. a state text that names no state */
            log_error("ctl", "not resuming study %ld: %s", ids[i],
                      store_errmsg(c->store));
        if (found != 1)
            continue;
        ctl_study *s = s_study_open(c, &row, err, errsize);
        if (!s) {
            log_error("ctl", "not resuming: %s", err);
            continue;
        }
        s_add_study(c, s);
    }
    free(ids);
    err[0] = 0;
    return 0;
}

/* The first field where JSON values a (stored) and b (given) differ, as
   "path: stored X, given Y" into buf. 1 when they differ, 0 when equal. */
static int s_json_diff(const json_t *a, const json_t *b, const char *path, char *buf,
                       size_t size)
{
    char sub[256];
    if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)a, k, v)
        {
            snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", k);
            if (s_json_diff(v, json_object_get(b, k), sub, buf, size))
                return 1;
        }
        json_object_foreach((json_t *)b, k, v)
        {
            snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", k);
            if (!json_object_get(a, k))
                return s_json_diff(NULL, v, sub, buf, size);
        }
        return 0;
    }
    if (json_is_array(a) && json_is_array(b) &&
        json_array_size(a) == json_array_size(b)) {
        for (size_t i = 0; i < json_array_size(a); i++) {
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            if (s_json_diff(json_array_get(a, i), json_array_get(b, i), sub, buf, size))
                return 1;
        }
        return 0;
    }
    if (a && b && json_equal((json_t *)a, (json_t *)b))
        return 0;
    char *ta = a ? text_json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    char *tb = b ? text_json_dumps(b, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    snprintf(buf, size, "%s: stored %.60s, given %.60s", path, ta ? ta : "(none)",
             tb ? tb : "(none)");
    free(ta);
    free(tb);
    return 1;
}

/* The most live (running or stopped) studies one owner may have loaded at
   once (docs/spec.md, Limits): every loaded study holds its spec, its
   scheduler and its trials in the controller's memory. Admins (the
   controller's own user, an admin key) are exempt. */
#define S_MAX_LIVE_STUDIES 100

/* 1 when `user` is an admin: the controller's own user or a name an admin
   key carries. */
static int s_owner_is_admin(const ctl_t *c, const char *user)
{
    if (!strcmp(user, c->self.user))
        return 1;
    for (size_t i = 0; i < c->keys.n; i++)
        if (c->keys.v[i].id.role == IDENT_ADMIN && !strcmp(c->keys.v[i].id.user, user))
            return 1;
    return 0;
}

/* Refuses a study that would be one more live study of its owner than
   S_MAX_LIVE_STUDIES: 0, or -1 with code and msg. A spec without an owner
   comes from the controller's own user (ctl__auth_submit_owner sets every
   other sender's). */
static int s_check_live_limit(ctl_t *c, const spec_t *spec, const char **code, char *msg,
                              size_t msgsize)
{
    if (!spec->owner || s_owner_is_admin(c, spec->owner))
        return 0;
    long live = 0;
    for (size_t i = 0; i < c->nstudies; i++) {
        const ctl_study *s = c->studies[i];
        if (s->row.state != STUDY_FINISHED && s->spec->owner &&
            !strcmp(s->spec->owner, spec->owner))
            live++;
    }
    if (live < S_MAX_LIVE_STUDIES)
        return 0;
    *code = "limit";
    snprintf(msg, msgsize,
             "%s has %ld live (running or stopped) studies, and the limit is %d live "
             "studies per user: study %s is refused until one of them finishes "
             "(docs/spec.md, Limits)",
             spec->owner, live, S_MAX_LIVE_STUDIES, spec->name);
    return -1;
}

int ctl__submit(ctl_t *c, json_t *spec_json, ctl_study **out, int *resumed, int *finished,
                const char **code, char *msg, size_t msgsize)
{
    *resumed = *finished = 0;
    /* the same admission as jizhi run's and the web's; no paths looked up
       here (dispatchers judge them) */
    spec_t *spec = sched_admit(spec_json, 0, msg, msgsize);
    if (!spec) {
        *code = "bad_spec";
        return -1;
    }
    size_t wi;
    json_t *wname;
    json_array_foreach(spec->warm_from, wi, wname)
    {
        store_study wrow;
        int wf = store_study_get(c->store, json_string_value(wname), &wrow);
        if (wf == 1)
            store_study_fini(&wrow);
        else {
            *code = "bad_spec";
            snprintf(msg, msgsize, "warm_start.from[%zu]: no study named \"%s\" in %s",
                     wi, json_string_value(wname), "this database");
            spec_destroy(&spec);
            return -1;
        }
    }
    ctl_study *live = ctl__study_by_name(c, spec->name);
    store_study row;
    int found = store_study_get(c->store, spec->name, &row);
    int rc = -1;
    if (found < 0) {
        *code = "internal";
        snprintf(msg, msgsize, "database error: %s", store_errmsg(c->store));
    } else if (found == 1) {
        /* the same study when the values are the same: compared as values,
           never as text, since a stored real reads back as the double it
           was (an older build wrote 0.99 as 0.98999999999999999) */
        char diff[300];
        if (s_json_diff(row.spec, spec->json, "", diff, sizeof diff)) {
            *code = "conflict";
            snprintf(msg, msgsize,
                     "a study named \"%s\" already exists with a different spec (%s); "
                     "choose another name or use the same spec to continue it",
                     spec->name, diff);
        } else if (row.state == STUDY_FINISHED) {
            *finished = 1;
            *out = live;
            rc = 0;
        } else {
            *resumed = 1;
            if (!live && s_check_live_limit(c, spec, code, msg, msgsize) != 0) {
                *resumed = 0; /* refused: one live study too many */
            } else {
                if (!live) {
                    /* stopped earlier: load it and run it again */
                    live = s_study_open(c, &row, msg, msgsize);
                    if (live)
                        s_add_study(c, live);
                }
                if (live) {
                    if (live->row.state == STUDY_STOPPED)
                        ctl__study_resume(c, live, "cli");
                    *out = live;
                    rc = 0;
                } else {
                    *code = "internal";
                }
            }
        }
        store_study_fini(&row);
    } else if (s_check_live_limit(c, spec, code, msg, msgsize) != 0) {
        /* refused before anything is stored */
    } else {
        long id = ctl__txn(c) == 0 ? store_study_insert(c->store, spec->name, spec->json,
                                                        STUDY_RUNNING, util_wall())
                                   : -1;
        if (id < 0 || store_study_get_id(c->store, id, &row) != 1) {
            *code = "internal";
            snprintf(msg, msgsize, "cannot store the study: %s", store_errmsg(c->store));
        } else {
            ctl_study *s = s_study_open(c, &row, msg, msgsize);
            if (s) {
                s_add_study(c, s);
                store_event_add(c->store, util_wall(), id, -1, "cli", "study_submitted",
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
    spec_destroy(&spec);
    return rc;
}

/* ---- scheduling ---- */

/* Starts the oldest configuration a person queued, if any: 1 created, 0
   none (or not now). One that no longer fits the spec is dropped with an
   event. */
static int s_create_queued(ctl_t *c, ctl_study *s)
{
    if (s->queued <= 0 || ctl__txn(c) != 0)
        return 0;
    json_t *params = NULL;
    long qid = store_enqueued_first(c->store, s->row.id, &params);
    if (qid <= 0) {
        s->queued = qid < 0 ? s->queued : 0;
        return 0;
    }
    spec_error serr;
    if (spec_params_check(s->spec, params, &serr) != 0) {
        char buf[400];
        json_t *d = json_pack("{s:s, s:O}", "reason",
                              spec_strerror(&serr, buf, sizeof buf), "params", params);
        store_event_add(c->store, util_wall(), s->row.id, -1, "controller",
                        "enqueued_dropped", d, 0);
        json_decref(d);
        json_decref(params);
        store_enqueued_del(c->store, qid);
        s->queued--;
        return 0;
    }
    if (s->next_id <= 0)
        s->next_id = c->next_trial_id++;
    if (store_enqueued_del(c->store, qid) != 0) {
        json_decref(params);
        return 0;
    }
    if (!ctl__trial_create(c, s, s->next_id, params))
        return 0;
    s->next_id = 0;
    s->queued--;
    return 1;
}

int ctl__study_new_trial(ctl_t *c, ctl_study *s)
{
    if (s_create_queued(c, s))
        return 1;
    if (s->exhausted)
        return -1;
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
    /* inactive conditional parameters never reach a trial, whatever the
       scheduler drew for them */
    spec_params_prune(s->spec, params);
    if (ctl__txn(c) != 0) {
        json_decref(params);
        return 0;
    }
    if (!ctl__trial_create(c, s, s->next_id, params))
        return 0;
    s->next_id = 0;
    s->sched_dirty = 1;
    return 1;
}

static int s_time_over(const ctl_study *s)
{
    return s->spec->time_s > 0 && util_wall() - s->row.created > s->spec->time_s;
}

static void s_save_sched(ctl_t *c, ctl_study *s)
{
    if (!s->sched_dirty || ctl__txn(c) != 0)
        return;
    json_t *mons = json_array();
    for (int i = 0; i < s->nmon; i++)
        json_array_append_new(mons, s->mon[i]->ops->save(s->mon[i]));
    json_t *state =
        json_pack("{s:o, s:o}", "main", s->sched->ops->save(s->sched), "monitors", mons);
    store_study_set_sched(c->store, s->row.id, state);
    json_decref(state);
    s->sched_dirty = 0;
}

/* The first part of a study's tick: lost trials, the time budget, stop
   grace periods. Every loaded study, whatever its state: the trials of a
   stopped study live until they exit or are killed, and one that never
   reads its stop instruction is killed after the grace like any other.
   An active trial of a study that is not running and that no stop drives
   yet (a controller that restarted forgot the plan) is stopped by its
   study.

   Only the trials that are due are looked at (s->due, ctl_due.h): each
   active one when it became active (or was loaded), then when it would
   be lost if not heard from meanwhile (an ask-only one, never lost, every
   lost timeout), and when its stop's grace ends;
   one whose study's stop could not be written (no transaction) at the
   next pass.
   A study out of time looks at every trial, as its end is near. At most
   the entries there were at the start: a trial that a look makes active
   again (a retry) waits for the next pass. */
static void s_look(ctl_t *c, ctl_study *s, ctl_trial *t, int time_over, double now)
{
    int running = s->row.state == STUDY_RUNNING;
    if (!ctl_trial_active(t))
        return;           /* ended or waiting: looked at again once active */
    int stop_put_off = 0; /* no transaction: the study's stop waits a pass */
    if (!running && t->plan != PLAN_STOP && t->plan != PLAN_RELEASE) {
        if (ctl__txn(c) == 0)
            ctl__trial_stop(c, t, "controller", "study stopped", CTL_STOP_BY_STUDY);
        else
            stop_put_off = 1;
    }
    if (!s->spec->ask_only && now - t->last_heard > c->lost_timeout) {
        ctl__trial_lost(c, t, "lost: no word from the trial or its dispatcher");
        return;
    }
    if (time_over)
        ctl__trial_stop(c, t, "controller", "study time budget used up",
                        CTL_STOP_BY_PERSON);
    ctl__trial_tick(c, t, now);
    if (!ctl_trial_active(t))
        return;
    /* the next look: when it would be lost, or its stop's grace ends */
    double next = s->spec->ask_only ? now + c->lost_timeout /* never lost: a period */
                                    : t->last_heard + c->lost_timeout;
    if ((t->plan == PLAN_STOP || t->plan == PLAN_RELEASE) && !t->kill_sent) {
        double grace = t->plan_since + ctl__stop_grace();
        next = next < 0 || grace < next ? grace : next;
    }
    if (stop_put_off && (next < 0 || now + CTL_TRIAL_TICK_S < next))
        next = now + CTL_TRIAL_TICK_S;
    if (next >= 0)
        ctl_due_at(t, next);
}

void ctl__study_tick_trials(ctl_t *c, ctl_study *s, double now)
{
    int time_over = s->row.state == STUDY_RUNNING && s_time_over(s);
    for (size_t i = 0; time_over && i < s->ntrials; i++) {
        ctl_trial *t = s->trials[i];
        if (ctl_trial_active(t))
            ctl_due_at(t, 0); /* stopped by s_look, after its lost check */
        else if (t->row.state == TRIAL_PENDING || t->row.state == TRIAL_SUSPENDED)
            ctl__trial_stop(c, t, "controller", "study time budget used up",
                            CTL_STOP_BY_PERSON);
    }
    size_t budget = ctl_due_size(&s->due);
    ctl_trial *t;
    while (budget-- > 0 && ctl_due_pop(&s->due, now, &t)) {
        s->due_checked++;
        s_look(c, s, t, time_over, now);
    }
}

long ctl__study_active(const ctl_study *s)
{
    return s->by_state[TRIAL_STARTING] + s->by_state[TRIAL_RUNNING] +
           s->by_state[TRIAL_PAUSED];
}

/* 1 when a suspended trial of s was preempted (it resumes first); walks
   the trials only when some are suspended. */
static int s_has_preempted(const ctl_study *s)
{
    if (!s->by_state[TRIAL_SUSPENDED])
        return 0;
    for (size_t i = 0; i < s->ntrials; i++)
        if (s->trials[i]->row.state == TRIAL_SUSPENDED && s->trials[i]->row.preempted)
            return 1;
    return 0;
}

int ctl__study_wants(const ctl_study *s, long *active)
{
    *active = ctl__study_active(s);
    if (s->row.state != STUDY_RUNNING || s_time_over(s) || s->spec->ask_only)
        return 0;
    return s->by_state[TRIAL_PENDING] > 0 || s_has_preempted(s) ||
           ((long)s->ntrials < s->spec->trials && (!s->exhausted || s->queued > 0));
}

int ctl__study_start_next(ctl_t *c, ctl_study *s, ctl_disp *d)
{
    /* preempted trials first (they resume from their checkpoint), then
       retries, then new trials */
    ctl_trial *next = NULL;
    for (size_t i = 0; s->by_state[TRIAL_SUSPENDED] && i < s->ntrials && !next; i++)
        if (s->trials[i]->row.state == TRIAL_SUSPENDED && s->trials[i]->row.preempted)
            next = s->trials[i];
    for (size_t i = 0; s->by_state[TRIAL_PENDING] && i < s->ntrials && !next; i++)
        if (s->trials[i]->row.state == TRIAL_PENDING)
            next = s->trials[i];
    if (!next) {
        if ((long)s->ntrials >= s->spec->trials)
            return -1;
        /* a configuration a person queued, else the scheduler's */
        int rc = ctl__study_new_trial(c, s);
        if (rc != 1)
            return rc;
        next = s->trials[s->ntrials - 1];
    }
    if (next->row.state == TRIAL_SUSPENDED)
        ctl__queue_resume(c, next);
    if (next->row.state != TRIAL_PENDING)
        return 0;
    next->row.preempted = 0;
    ctl__trial_start(c, next, d);
    return 1;
}

/* The last part of a study's tick, after the queue started what it could:
   saves the scheduler, finishes the study when nothing is left. */
void ctl__study_tick_end(ctl_t *c, ctl_study *s)
{
    long active = ctl__study_active(s), pending = s->by_state[TRIAL_PENDING],
         held = s->by_state[TRIAL_SUSPENDED];
    s_save_sched(c, s);
    int budget_done = (long)s->ntrials >= s->spec->trials ||
                      (s->exhausted && s->queued <= 0) || s_time_over(s);
    if (active == 0 && pending == 0 && held == 0 && budget_done &&
        ctl__study_move(c, s, STUDY_FINISHED) == 0) {
        store_event_add(c->store, util_wall(), s->row.id, -1, "controller",
                        "study_finished", NULL, 1);
        log_info("ctl", "study %s finished", s->row.name);
        char text[200];
        snprintf(text, sizeof text, "study %s finished (%zu trials)", s->row.name,
                 s->ntrials);
        ctl__alert(c, s, NULL, SPEC_ALERT_FINISHED, 0, text, NULL);
    }
}

ctl_study *ctl__study_load(ctl_t *c, const char *name, const char **code, char *msg,
                           size_t msgsize)
{
    ctl_study *live = ctl__study_by_name(c, name);
    if (live)
        return live;
    store_study row;
    int found = store_study_get(c->store, name, &row);
    if (found != 1) {
        *code = found == 0 ? "unknown_study" : "internal";
        if (found == 0)
            snprintf(msg, msgsize, "no study named \"%s\" in the database", name);
        else
            snprintf(msg, msgsize, "database error: %s", store_errmsg(c->store));
        return NULL;
    }
    live = s_study_open(c, &row, msg, msgsize);
    store_study_fini(&row);
    if (!live) {
        *code = "internal";
        return NULL;
    }
    s_add_study(c, live);
    return live;
}

int ctl__study_enqueue(ctl_t *c, ctl_study *s, json_t *params, const char *who,
                       const char **code, char *msg, size_t msgsize)
{
    spec_error serr;
    char buf[400];
    spec_params_coerce(s->spec, params);
    if (spec_params_check(s->spec, params, &serr) != 0) {
        *code = "bad_params";
        snprintf(msg, msgsize, "%s", spec_strerror(&serr, buf, sizeof buf));
        return -1;
    }
    if (ctl__txn(c) != 0 ||
        store_enqueued_add(c->store, s->row.id, params, who, util_wall()) < 0) {
        *code = "internal";
        snprintf(msg, msgsize, "cannot store the configuration: %s",
                 store_errmsg(c->store));
        return -1;
    }
    json_t *d = json_pack("{s:O}", "params", params);
    store_event_add(c->store, util_wall(), s->row.id, -1, who, "trial_enqueued", d, 1);
    json_decref(d);
    s->queued++;
    return 0;
}

int ctl__study_extend(ctl_t *c, ctl_study *s, long n, const char *who, const char **code,
                      char *msg, size_t msgsize)
{
    if (n < 1 || s->spec->trials + n > 1000000) {
        *code = "malformed";
        snprintf(msg, msgsize,
                 "trials: must be from 1 to %ld (a study has at most 1000000)",
                 1000000 - s->spec->trials);
        return -1;
    }
    if (ctl__txn(c) != 0 || store_study_add_trials(c->store, s->row.id, n) != 0 ||
        (s->row.state == STUDY_FINISHED && ctl__study_move(c, s, STUDY_RUNNING) != 0)) {
        *code = "internal";
        snprintf(msg, msgsize, "cannot extend the study: %s", store_errmsg(c->store));
        return -1;
    }
    s->spec->trials += n;
    s->row.extra_trials += n;
    json_t *d = json_pack("{s:I, s:I}", "added", (json_int_t)n, "trials",
                          (json_int_t)s->spec->trials);
    store_event_add(c->store, util_wall(), s->row.id, -1, who, "study_extended", d, 1);
    json_decref(d);
    log_info("ctl", "study %s extended by %ld trials (%ld in all)", s->row.name, n,
             s->spec->trials);
    return 0;
}

void ctl__study_resume(ctl_t *c, ctl_study *s, const char *who)
{
    if (s->row.state != STUDY_STOPPED || ctl__txn(c) != 0)
        return;
    /* trials stopped by the study stop run again; asked ones do not (an
       active one's stop is withdrawn: ctl__trial_rerun) */
    for (size_t i = 0; i < s->ntrials; i++)
        ctl__trial_rerun(c, s->trials[i]);
    if (ctl__study_move(c, s, STUDY_RUNNING) == 0)
        store_event_add(c->store, util_wall(), s->row.id, -1, who, "study_resumed", NULL,
                        1);
}

json_t *ctl__study_status(ctl_t *c, ctl_study *s)
{
    long done = 0, running = 0, failed = 0, pending = 0, pruned = 0;
    ctl_trial *best = NULL;
    for (size_t i = 0; i < s->ntrials; i++) {
        ctl_trial *t = s->trials[i];
        done += ctl_trial_ended(t);
        failed += t->row.state == TRIAL_FAILED;
        pruned += t->row.state == TRIAL_PRUNED;
        running += ctl_trial_active(t);
        pending += t->row.state == TRIAL_PENDING;
        /* the one definition (spec_best_counts); several objectives have
           a Pareto set instead (study show) */
        if (s->spec->nobjectives == 1 &&
            spec_best_counts(store_trial_state_name(t->row.state), t->row.value, 1) &&
            ctl__trial_feasible(c, t) &&
            (!best || spec_better(s->spec, t->row.value, best->row.value)))
            best = t; /* the best feasible one */
    }
    json_t *b = best
                    ? json_pack("{s:I, s:I, s:o, s:O}", "trial", (json_int_t)best->row.id,
                                "number", (json_int_t)best->row.number, "value",
                                wire_real(best->row.value), "params", best->row.params)
                    : json_null();
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:f, s:I}",
                     "study", s->row.name, "state", store_study_state_name(s->row.state),
                     "metric", s->spec->metric, "total", (json_int_t)s->spec->trials,
                     "done", (json_int_t)done, "running", (json_int_t)running, "failed",
                     (json_int_t)failed, "pruned", (json_int_t)pruned, "pending",
                     (json_int_t)pending, "best", b, "elapsed_s",
                     util_wall() - s->row.created, "queued", (json_int_t)s->queued);
}
