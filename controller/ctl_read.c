/*  ctl_read.c - the `read` request: what list/show/export/events and watch
    read from a database file, answered by the controller from its store,
    so those commands work from another machine through --controller.

    Reads only: nothing here changes the controller's state. Answers are
    capped (MAX_POINTS metric points per call; callers page with `after`).
*/
#include "ctl_internal.h"

#include "../common/util.h"

#include <stdio.h>
#include <string.h>

#define MAX_POINTS 100000

typedef struct {
    json_t *points;
} s_points_arg;

static int s_on_point(void *arg, long trial, long attempt, long step, const char *name,
                      double value)
{
    s_points_arg *a = arg;
    json_array_append_new(a->points, json_pack("[I, I, I, s, o]", (json_int_t)trial,
                                               (json_int_t)attempt, (json_int_t)step,
                                               name, wire_real(value)));
    return 0;
}

/* Whether `who` may see the values of a study's trial.env (where people
   put secrets): its owner (role user), an admin, or a trusted peer, as
   ctl__auth_may_steer decides for a loaded study. */
static int s_may_see_env(const ctl_t *c, const ctl_ident *who, const json_t *spec)
{
    if (who->trusted || who->id.role == IDENT_ADMIN)
        return 1;
    const char *owner = json_string_value(json_object_get(spec, "owner"));
    return who->id.role == IDENT_USER &&
           !strcmp(owner ? owner : c->self.user, who->id.user);
}

/* Replaces the values of detail's spec.trial.env by "***" (names kept). */
static void s_hide_env(json_t *detail)
{
    json_t *spec = json_object_get(detail, "spec");
    json_t *env = json_object_get(json_object_get(spec, "trial"), "env");
    if (!json_object_size(env))
        return;
    json_t *copy = json_deep_copy(spec); /* spec may be shared with the study */
    env = json_object_get(json_object_get(copy, "trial"), "env");
    const char *key;
    json_t *v;
    json_object_foreach(env, key, v)
    {
        json_object_set_new(env, key, json_string("***"));
    }
    json_object_set_new(detail, "spec", copy);
}

json_t *ctl__read(ctl_t *c, const ctl_ident *who, const json_t *msg, const char **code,
                  char *err, size_t size)
{
    const char *what = json_string_value(json_object_get(msg, "what"));
    *code = "malformed";
    if (!what) {
        snprintf(err, size, "field 'what': expected a string");
        return NULL;
    }
    if (!strcmp(what, "studies"))
        return store_study_list(c->store);
    if (!strcmp(what, "quotas"))
        return store_quota_list(c->store);
    if (!strcmp(what, "trial")) {
        json_t *id = json_object_get(msg, "trial");
        if (!json_is_integer(id)) {
            snprintf(err, size, "field 'trial': expected an integer");
            return NULL;
        }
        json_t *j = store_trial_detail(c->store, (long)json_integer_value(id));
        store_trial t;
        int found = j ? 1 : store_trial_get(c->store, (long)json_integer_value(id), &t);
        if (!j && found == 1)
            store_trial_fini(&t);
        if (!j && found == 0) {
            *code = "unknown_trial";
            snprintf(err, size, "no trial %" JSON_INTEGER_FORMAT, json_integer_value(id));
        } else if (!j) { /* a row the store refuses (an unknown state text) */
            *code = "internal";
            snprintf(err, size, "cannot read trial %" JSON_INTEGER_FORMAT ": %s",
                     json_integer_value(id), store_errmsg(c->store));
        }
        return j;
    }
    const char *name = json_string_value(json_object_get(msg, "study"));
    if (!strcmp(what, "alerts") && !name)
        return store_alerts_list(c->store, 0);
    if (strcmp(what, "study") && strcmp(what, "metrics_since") &&
        strcmp(what, "alerts")) {
        snprintf(err, size,
                 "field 'what': expected studies, study, trial, metrics_since, alerts or "
                 "quotas, "
                 "got \"%.40s\"",
                 what);
        return NULL;
    }
    if (!name) {
        snprintf(err, size, "field 'study': expected a string");
        return NULL;
    }
    store_study st;
    int found = store_study_get(c->store, name, &st);
    if (found != 1) {
        *code = found == 0 ? "unknown_study" : "internal";
        if (found == 0)
            snprintf(err, size, "no study named \"%s\"", name);
        else
            snprintf(err, size, "cannot read study %s: %s", name, store_errmsg(c->store));
        return NULL;
    }
    json_t *out;
    if (!strcmp(what, "study")) {
        out = store_study_detail(c->store, name);
        if (!out) { /* a row the store refuses (an unknown state text) */
            *code = "internal";
            snprintf(err, size, "cannot read study %s: %s", name, store_errmsg(c->store));
        }
        ctl_ident eff;
        ctl__auth_effective(msg, who, &eff); /* a trusted front end reads for its user */
        if (out && !s_may_see_env(c, &eff, st.spec))
            s_hide_env(out);
    } else if (!strcmp(what, "alerts")) {
        out = store_alerts_list(c->store, st.id);
    } else { /* metrics_since: points after rowid `after`, at most MAX_POINTS */
        json_t *a = json_object_get(msg, "after");
        long after = json_is_integer(a) ? (long)json_integer_value(a) : 0;
        s_points_arg arg = {json_array()};
        long n = store_study_metrics_since(c->store, st.id, &after, MAX_POINTS,
                                           s_on_point, &arg);
        if (n < 0) {
            json_decref(arg.points);
            store_study_fini(&st);
            *code = "internal";
            snprintf(err, size, "cannot read metrics: %s", store_errmsg(c->store));
            return NULL;
        }
        /* what watch shows besides the points: the state, the latest
           warning, the trials' rows */
        char warning[512];
        store_event_last_reason(c->store, st.id, "warning", warning, sizeof warning);
        store_trial *rows;
        long nt = store_trials_load(c->store, st.id, &rows);
        if (nt < 0) { /* e.g. a state text that names no state */
            json_decref(arg.points);
            *code = "internal";
            snprintf(err, size, "cannot read the trials of %s: %s", name,
                     store_errmsg(c->store));
            store_study_fini(&st);
            return NULL;
        }
        json_t *trials = json_array();
        for (long i = 0; i < nt; i++)
            json_array_append_new(trials, store_trial_json(&rows[i], NULL));
        store_trials_free(rows, nt);
        /* and the lineage it shows: the study's guarded changes and forks */
        json_t *ivs = store_interv_study(c->store, st.id);
        out = json_pack("{s:o, s:I, s:s, s:s, s:o, s:o, s:o, s:o}", "points", arg.points,
                        "after", (json_int_t)after, "state",
                        store_study_state_name(st.state), "warning", warning, "created",
                        wire_real(st.created), "finished", wire_real(st.finished),
                        "trials", trials, "interventions", ivs ? ivs : json_array());
    }
    store_study_fini(&st);
    return out;
}

/* ---- trial logs, relayed to the dispatcher that has them ---- */

void ctl__read_log(ctl_t *c, const wire_peer *from, long req, const json_t *msg)
{
    json_t *jt = json_object_get(msg, "trial");
    const char *stream = json_string_value(json_object_get(msg, "stream"));
    json_t *joff = json_object_get(msg, "offset"), *jmax = json_object_get(msg, "max");
    if (!json_is_integer(jt) || !stream ||
        (strcmp(stream, "out") && strcmp(stream, "err")) ||
        (joff && !json_is_integer(joff)) || (jmax && !json_is_integer(jmax))) {
        ctl__send(c, from,
                  wire_error(req, "malformed",
                             "read_log needs 'trial' (integer), 'stream' (out or err), "
                             "'offset' and 'max' (integers)"));
        return;
    }
    store_trial row;
    if (store_trial_get(c->store, (long)json_integer_value(jt), &row) != 1) {
        ctl__send(c, from,
                  wire_error(req, "unknown_trial", "no trial %" JSON_INTEGER_FORMAT,
                             json_integer_value(jt)));
        return;
    }
    const char *path = !strcmp(stream, "out") ? row.out_path : row.err_path;
    ctl_disp *d = row.dispatcher[0] ? ctl__disp_by_name(c, row.dispatcher) : NULL;
    if (!path[0]) { /* never started: nothing written */
        json_t *ok = wire_ok(req);
        json_object_set_new(ok, "data", json_string(""));
        json_object_set_new(ok, "bytes", json_integer(0));
        ctl__send(c, from, ok);
    } else if (!d || !d->alive) {
        ctl__send(c, from,
                  wire_error(req, "unavailable",
                             "trial %ld's logs are on dispatcher \"%s\", which is not "
                             "connected now",
                             row.id, row.dispatcher));
    } else {
        if (c->nlogreads == c->logread_cap) {
            size_t cap = c->logread_cap ? 2 * c->logread_cap : 8;
            c->logreads = util_xrealloc(c->logreads, cap * sizeof *c->logreads);
            c->logread_cap = cap;
        }
        ctl_logread *lr = &c->logreads[c->nlogreads++];
        lr->id = ++c->next_logread;
        snprintf(lr->disp, sizeof lr->disp, "%s", d->name);
        lr->waiter = *from;
        lr->waiter_req = req;
        lr->deadline = util_now() + 10;
        ctl__send(c, &d->peer,
                  json_pack("{s:s, s:I, s:I, s:s, s:I, s:I}", "type", "read_log", "id",
                            (json_int_t)lr->id, "trial", (json_int_t)row.id, "path", path,
                            "offset", joff ? json_integer_value(joff) : 0, "max",
                            jmax ? json_integer_value(jmax) : 65536));
    }
    store_trial_fini(&row);
}

static void s_logread_drop(ctl_t *c, size_t i)
{
    c->logreads[i] = c->logreads[--c->nlogreads];
}

void ctl__log_data(ctl_t *c, const char *disp, const json_t *msg)
{
    json_t *id = json_object_get(msg, "id");
    for (size_t i = 0; i < c->nlogreads; i++) {
        ctl_logread *lr = &c->logreads[i];
        if (!json_is_integer(id) || lr->id != json_integer_value(id) ||
            strcmp(lr->disp, disp))
            continue;
        const char *error = json_string_value(json_object_get(msg, "error"));
        json_t *data = json_object_get(msg, "data"),
               *bytes = json_object_get(msg, "bytes");
        if (error || !json_is_string(data) || !json_is_integer(bytes)) {
            ctl__send(c, &lr->waiter,
                      wire_error(lr->waiter_req, "unavailable", "dispatcher %s: %s", disp,
                                 error ? error : "malformed log_data"));
        } else {
            json_t *ok = wire_ok(lr->waiter_req);
            json_object_set(ok, "data", data);
            json_object_set(ok, "bytes", bytes);
            ctl__send(c, &lr->waiter, ok);
        }
        s_logread_drop(c, i);
        return;
    }
}

void ctl__read_expire(ctl_t *c, double now)
{
    for (size_t i = 0; i < c->nlogreads;) {
        ctl_logread *lr = &c->logreads[i];
        if (now < lr->deadline) {
            i++;
            continue;
        }
        ctl__send(c, &lr->waiter,
                  wire_error(lr->waiter_req, "unavailable",
                             "dispatcher %s did not answer for the logs", lr->disp));
        s_logread_drop(c, i);
    }
}
