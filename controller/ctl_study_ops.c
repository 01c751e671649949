/*  ctl_study_ops.c - what a person does to a whole study besides stop and
    resume (see ctl_study.h): delete it, copy its spec under a new name,
    and say whether what a resume asked for starts or waits in the queue.

    Delete and copy are the owner's or an admin's (the rule of
    ctl__auth_may_steer, judged on the stored spec's owner, so a finished
    study need not be loaded): a copy runs the study's command with its
    trial.env, where people put secrets. Everything happens in the
    iteration's transaction; the store removes a study all or nothing
    (store_study_delete).
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 when `who` is the owner of the study whose stored spec is `spec` (a
   user), an admin or a trusted peer. */
static int s_owner_or_admin(const ctl_t *c, const ctl_ident *who, const json_t *spec)
{
    if (who->trusted || who->id.role == IDENT_ADMIN)
        return 1;
    const char *owner = json_string_value(json_object_get(spec, "owner"));
    return who->id.role == IDENT_USER &&
           !strcmp(owner ? owner : c->self.user, who->id.user);
}

/* Refuses `what` (delete, copy) of study `name` to a sender who is neither
   its owner nor an admin: 0 when allowed, else -1 with code and err. */
static int s_check_owner(ctl_t *c, const ctl_ident *who, const store_study *row,
                         const char *what, const char **code, char *err, size_t size)
{
    if (s_owner_or_admin(c, who, row->spec))
        return 0;
    const char *owner = json_string_value(json_object_get(row->spec, "owner"));
    ctl__refused(c, "refused study %s of %s from %s (%s)", what, row->name, who->id.user,
                 ident_role_str(who->id.role));
    *code = "forbidden";
    snprintf(err, size,
             "%s may not %s study %s: it belongs to %s (only its owner or an admin may)",
             who->id.user, what, row->name, owner ? owner : c->self.user);
    return -1;
}

/* The study `name` from the store into row: 0, or -1 with code and err. */
static int s_row(ctl_t *c, const char *name, store_study *row, const char **code,
                 char *err, size_t size)
{
    int found = store_study_get(c->store, name, row);
    if (found == 1)
        return 0;
    *code = found == 0 ? "unknown_study" : "internal";
    if (found == 0)
        snprintf(err, size, "no study named \"%s\" in the database", name);
    else
        snprintf(err, size, "database error: %s", store_errmsg(c->store));
    return -1;
}

/* Drops the loaded study s from the controller's memory. */
static void s_unload(ctl_t *c, ctl_study *s)
{
    for (size_t i = 0; i < s->ntrials; i++)
        ctl_idmap_put(&c->trials, s->trials[i]->row.id, NULL);
    for (size_t i = 0; i < c->nstudies; i++)
        if (c->studies[i] == s) {
            memmove(&c->studies[i], &c->studies[i + 1],
                    (c->nstudies - i - 1) * sizeof *c->studies);
            c->nstudies--;
            break;
        }
    ctl__study_free(s);
}

/* The folders of a study's files that the store does not hold: the
   checkpoint folder the controller names, and each folder its trials'
   logs went to (on the dispatchers' machines). A new array. */
static json_t *s_folders(ctl_t *c, const store_study *row, json_t **logs)
{
    *logs = json_array();
    store_trial *rows = NULL;
    long n = store_trials_load(c->store, row->id, &rows);
    for (long i = 0; i < n; i++) {
        if (!rows[i].out_path[0])
            continue;
        char dir[sizeof rows[i].out_path];
        snprintf(dir, sizeof dir, "%s", rows[i].out_path);
        const char *d = dirname(dir);
        size_t k;
        json_t *e;
        int seen = 0;
        json_array_foreach(*logs, k, e) seen |= !strcmp(json_string_value(e), d);
        if (!seen)
            json_array_append_new(*logs, json_string(d));
    }
    store_trials_free(rows, n < 0 ? 0 : n);
    char ckpt[1400];
    snprintf(ckpt, sizeof ckpt, "%s/%s", c->ckpt_root, row->name);
    return json_string(ckpt);
}

json_t *ctl__study_delete(ctl_t *c, const ctl_ident *who, const char *name,
                          const char *label, const char **code, char *err, size_t size)
{
    store_study row;
    if (s_row(c, name, &row, code, err, size) != 0)
        return NULL;
    json_t *out = NULL;
    ctl_study *live = ctl__study_by_name(c, name);
    store_study_state state;
    long active = 0;
    if (live) {
        state = live->row.state;
        for (size_t i = 0; i < live->ntrials; i++)
            active += ctl_trial_active(live->trials[i]);
    } else {
        state = row.state;
    }
    if (s_check_owner(c, who, &row, "delete", code, err, size) != 0)
        goto done;
    *code = "bad_state";
    if (state == STUDY_RUNNING) {
        snprintf(err, size,
                 "study %s is running: stop it first (`jizhi study stop %s`), then "
                 "delete it",
                 name, name);
        goto done;
    }
    if (active > 0) {
        snprintf(err, size,
                 "study %s is stopping: %ld of its trials still run; delete it once they "
                 "have ended (`jizhi study show %s`)",
                 name, active, name);
        goto done;
    }
    json_t *logs;
    json_t *ckpt = s_folders(c, &row, &logs);
    store_deleted del;
    *code = "internal";
    if (ctl__txn(c) != 0 || store_study_delete(c->store, row.id, &del) != 0) {
        snprintf(err, size, "cannot delete study %s: %s", name, store_errmsg(c->store));
        json_decref(ckpt);
        json_decref(logs);
        goto done;
    }
    /* the record that outlives the study: who deleted what, and the last
       trial id, which store_trial_next_id never gives again */
    json_t *d = json_pack("{s:s, s:I, s:I, s:I, s:I, s:O, s:O}", "study", name, "trials",
                          (json_int_t)del.trials, "metrics", (json_int_t)del.metrics,
                          "events", (json_int_t)del.events, "last_trial",
                          (json_int_t)del.last_trial, "checkpoints", ckpt, "logs", logs);
    store_event_add(c->store, util_wall(), -1, -1, label, "study_deleted", d, 1);
    json_decref(d);
    if (live)
        s_unload(c, live);
    log_info("ctl", "study %s deleted by %s: %ld trials, %ld metric points, %ld events",
             name, who->id.user[0] ? who->id.user : label, del.trials, del.metrics,
             del.events);
    out = json_pack("{s:s, s:I, s:I, s:I, s:I, s:o, s:o}", "deleted", name, "trials",
                    (json_int_t)del.trials, "metrics", (json_int_t)del.metrics, "events",
                    (json_int_t)del.events, "enqueued", (json_int_t)del.enqueued,
                    "checkpoints", ckpt, "logs", logs);
done:
    store_study_fini(&row);
    return out;
}

json_t *ctl__study_copy(ctl_t *c, const ctl_ident *who, const char *name,
                        const char *new_name, const char **code, char *err, size_t size)
{
    store_study row;
    if (s_row(c, name, &row, code, err, size) != 0)
        return NULL;
    json_t *out = NULL, *spec = NULL;
    store_study other;
    int taken = store_study_get(c->store, new_name, &other);
    if (s_check_owner(c, who, &row, "copy", code, err, size) != 0)
        goto done;
    if (taken != 0) {
        *code = taken == 1 ? "conflict" : "internal";
        if (taken == 1) {
            snprintf(
                err, size,
                "a study named \"%s\" already exists: choose another name (or `jizhi "
                "study delete %s` first)",
                new_name, new_name);
            store_study_fini(&other);
        } else {
            snprintf(err, size, "database error: %s", store_errmsg(c->store));
        }
        goto done;
    }
    /* the stored spec (paths already absolute) under the new name, owned by
       whoever copies it; its trials, scheduler state and `study extend`
       trials stay with the original */
    spec = json_deep_copy(row.spec);
    json_object_set_new(spec, "name", json_string(new_name));
    json_object_del(spec, "owner");
    *code = "forbidden";
    if (ctl__auth_submit_owner(c, who, spec, err, size) != 0 ||
        ctl__queue_check_priority(c, who, spec, err, size) != 0)
        goto done;
    ctl_study *s = NULL;
    int resumed, finished;
    *code = "internal";
    if (ctl__submit(c, spec, &s, &resumed, &finished, code, err, size) != 0)
        goto done;
    out = json_pack("{s:s, s:s, s:I}", "study", new_name, "from", name, "trials",
                    (json_int_t)(s ? s->spec->trials : 0));
    char why[200];
    if (s && ctl__queue_unfit(c, s->spec, why, sizeof why))
        json_object_set_new(out, "warning", json_string(why));
    log_info("ctl", "study %s copied from %s", new_name, name);
done:
    json_decref(spec);
    store_study_fini(&row);
    return out;
}

int ctl__study_waits(ctl_t *c, ctl_study *s, const ctl_trial *t, char *why, size_t size)
{
    why[0] = 0;
    if (s->row.state != STUDY_RUNNING)
        return 0;
    /* what the queue starts now starts before the answer leaves */
    ctl__queue_fill(c, util_now());
    long active = 0;
    int waits;
    if (t) {
        waits = t->row.state == TRIAL_PENDING;
    } else {
        waits = ctl__study_wants(s, &active) && active == 0;
    }
    if (!waits)
        return 0;
    snprintf(why, size, "%s",
             s->queue_why[0] ? s->queue_why
                             : "no capacity: no dispatcher has a free slot");
    return 1;
}
