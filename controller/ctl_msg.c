/*  ctl_msg.c - the controller's message handlers, one per message type
    of docs/PROTOCOL.md. Each handler validates its fields first and
    answers `error` without changing anything when they are wrong.
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/ident.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_POINTS 100000

static void s_reply_error(ctl_t *c, const wire_peer *to, long req, const char *code,
                          const char *text)
{
    ctl__send(c, to, wire_error(req, code, "%s", text));
}

/* Metric names: [A-Za-z_][A-Za-z0-9_.]*, under 64 characters (jizhi.h). */
static int s_valid_metric(const char *s)
{
    if (!s || !(isalpha((unsigned char)*s) || *s == '_'))
        return 0;
    size_t n = 0;
    for (; s[n]; n++)
        if (!(isalnum((unsigned char)s[n]) || s[n] == '_' || s[n] == '.'))
            return 0;
    return n < 64;
}

/* Authenticates a trial message: the trial exists and the token matches. */
static ctl_trial *s_auth(ctl_t *c, const wire_peer *from, const json_t *msg, long req)
{
    long id;
    const char *token;
    char err[128];
    if (wire_get_long(msg, "trial", &id, err, sizeof err) ||
        wire_get_str(msg, "token", &token, err, sizeof err)) {
        s_reply_error(c, from, req, "malformed", err);
        return NULL;
    }
    ctl_trial *t = ctl__trial_by_id(c, id);
    if (!t || strcmp(t->row.token, token) != 0) {
        log_warn("ctl", "refused a %s message for trial %ld: wrong token", wire_type(msg),
                 id);
        s_reply_error(c, from, req, "unauthorized", "wrong token for this trial");
        return NULL;
    }
    t->peer = *from;
    t->last_heard = wire_now();
    if (!strcmp(t->row.state, "starting")) {
        snprintf(t->row.state, sizeof t->row.state, "running");
        ctl__save_trial(c, t);
    }
    ctl__instr_resend(c, t);
    return t;
}

static void s_hello(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    ctl_trial *t = s_auth(c, from, msg, req);
    if (!t)
        return;
    json_t *r = wire_ok(req);
    json_object_set(r, "params", t->row.params);
    json_object_set_new(r, "study", json_string(t->study->row.name));
    json_object_set_new(r, "state", json_string(t->row.state));
    ctl__send(c, from, r);
}

static void s_metrics(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    ctl_trial *t = s_auth(c, from, msg, req);
    if (!t)
        return;
    json_t *pts = json_object_get(msg, "points");
    if (!json_is_array(pts) || json_array_size(pts) > MAX_POINTS) {
        s_reply_error(
            c, from, req, "malformed",
            "field 'points': expected an array of at most 100000 [step, name, value]");
        return;
    }
    /* each helper instance (process) numbers its batches from its own
       session; a batch resent after a lost reply or a controller restart
       has the same session and req as the one stored */
    const char *session = json_string_value(json_object_get(msg, "session"));
    if (!session)
        session = "";
    if (strlen(session) >= sizeof t->row.metric_session) {
        s_reply_error(c, from, req, "malformed", "field 'session': too long");
        return;
    }
    if (!strcmp(session, t->row.metric_session) && req <= t->row.metric_req) {
        ctl__send(c, from, wire_ok(req));
        return;
    }
    if (!ctl__trial_active(t)) {
        s_reply_error(c, from, req, "bad_state", "the trial has ended; metrics refused");
        return;
    }
    size_t n = json_array_size(pts);
    store_point *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(pts, i);
        json_t *step = json_array_get(e, 0), *name = json_array_get(e, 1);
        if (!json_is_array(e) || json_array_size(e) != 3 || !json_is_integer(step) ||
            !json_is_string(name) || !s_valid_metric(json_string_value(name)) ||
            wire_to_double(json_array_get(e, 2), &p[i].value) != 0) {
            char text[128];
            snprintf(text, sizeof text,
                     "points[%zu]: expected [step (integer), name, value]", i);
            s_reply_error(c, from, req, "malformed", text);
            free(p);
            return;
        }
        p[i].step = (long)json_integer_value(step);
        p[i].name = json_string_value(name);
    }
    if (ctl__txn(c) != 0) {
        free(p);
        return;
    }
    t->row.metric_req = req;
    snprintf(t->row.metric_session, sizeof t->row.metric_session, "%s", session);
    if (ctl__trial_metrics(c, t, p, n, wire_now()) == 0)
        ctl__send(c, from, wire_ok(req));
    free(p);
}

static void s_trial_heartbeat(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    if (s_auth(c, from, msg, req))
        ctl__send(c, from, wire_ok(req));
}

static void s_ins_ack(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    ctl_trial *t = s_auth(c, from, msg, req);
    if (!t)
        return;
    long id;
    char err[128];
    json_t *applied = json_object_get(msg, "applied");
    if (wire_get_long(msg, "id", &id, err, sizeof err) || !json_is_boolean(applied)) {
        s_reply_error(c, from, req, "malformed",
                      "ins_ack needs 'id' (integer) and 'applied' (boolean)");
        return;
    }
    const char *detail = json_string_value(json_object_get(msg, "detail"));
    ctl__instr_done(c, id, json_is_true(applied), detail);
    ctl__send(c, from, wire_ok(req));
}

static void s_checkpoint_done(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    ctl_trial *t = s_auth(c, from, msg, req);
    if (!t)
        return;
    long step;
    const char *path;
    char err[128];
    if (wire_get_long(msg, "step", &step, err, sizeof err) ||
        wire_get_str(msg, "path", &path, err, sizeof err) ||
        strlen(path) >= sizeof t->row.checkpoint) {
        s_reply_error(c, from, req, "malformed", *err ? err : "path too long");
        return;
    }
    if (ctl__txn(c) != 0)
        return;
    ctl__trial_checkpoint(c, t, step, path);
    ctl__send(c, from, wire_ok(req));
}

/* ---- dispatchers ---- */

/* Marks the trials a dispatcher lists as alive. */
static void s_running_list(ctl_t *c, ctl_disp *d, json_t *running, int reconcile)
{
    double now = wire_now();
    size_t i;
    json_t *e;
    json_array_foreach(running, i, e)
    {
        ctl_trial *t =
            ctl__trial_by_id(c, (long)json_integer_value(json_object_get(e, "trial")));
        if (t && ctl__trial_active(t) &&
            json_integer_value(json_object_get(e, "attempt")) == t->row.attempt) {
            t->last_heard = now;
            if (!t->disp) {
                t->disp = d;
                d->used++;
            }
        }
    }
    if (!reconcile)
        return;
    /* after a (re-)registration: trials the dispatcher no longer has are lost */
    for (size_t s = 0; s < c->nstudies; s++)
        for (size_t k = 0; k < c->studies[s]->ntrials; k++) {
            ctl_trial *t = c->studies[s]->trials[k];
            if (!ctl__trial_active(t) || strcmp(t->row.dispatcher, d->name))
                continue;
            int listed = 0;
            json_array_foreach(running, i,
                               e) if (json_integer_value(json_object_get(e, "trial")) ==
                                          t->row.id &&
                                      json_integer_value(json_object_get(e, "attempt")) ==
                                          t->row.attempt) listed = 1;
            if (!listed)
                ctl__trial_lost(c, t, "lost: its dispatcher restarted without it");
        }
}

static int s_valid_running(json_t *running)
{
    if (!json_is_array(running))
        return 0;
    size_t i;
    json_t *e;
    json_array_foreach(running, i,
                       e) if (!json_is_object(e) ||
                              !json_is_integer(json_object_get(e, "trial")) ||
                              !json_is_integer(json_object_get(e, "attempt"))) return 0;
    return 1;
}

static void s_register(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    const char *name;
    long slots;
    char err[128];
    json_t *gpus = json_object_get(msg, "gpus");
    json_t *running = json_object_get(msg, "running");
    if (wire_get_str(msg, "name", &name, err, sizeof err) ||
        wire_get_long(msg, "slots", &slots, err, sizeof err) || !json_is_array(gpus) ||
        json_array_size(gpus) > 64 || !s_valid_running(running) || !*name ||
        strlen(name) >= 64 || slots < 0) {
        s_reply_error(c, from, req, "malformed",
                      "register needs name, slots >= 0, gpus (array of <= 64), running");
        return;
    }
    ctl_disp *d = ctl__disp_by_name(c, name);
    if (!d) {
        d = calloc(1, sizeof *d);
        snprintf(d->name, sizeof d->name, "%s", name);
        c->disps = realloc(c->disps, (c->ndisps + 1) * sizeof *c->disps);
        c->disps[c->ndisps++] = d;
    }
    d->peer = *from;
    d->slots = slots;
    d->used = 0;
    d->ngpus = (long)json_array_size(gpus);
    for (long g = 0; g < d->ngpus; g++) {
        d->gpu_ids[g] = (int)json_integer_value(json_array_get(gpus, (size_t)g));
        d->gpu_used[g] = 0;
    }
    d->last_seen = wire_now();
    d->alive = 1;
    /* trials bound to this dispatcher are re-counted from its list */
    for (size_t s = 0; s < c->nstudies; s++)
        for (size_t k = 0; k < c->studies[s]->ntrials; k++)
            if (c->studies[s]->trials[k]->disp == d)
                c->studies[s]->trials[k]->disp = NULL;
    if (ctl__txn(c) != 0)
        return;
    s_running_list(c, d, running, 1);
    char *gtext = json_dumps(gpus, JSON_COMPACT);
    store_dispatcher_upsert(c->store, name, slots, gtext, wire_wall());
    free(gtext);
    log_info("ctl", "dispatcher %s registered: %ld slots, %ld GPUs, %zu running", name,
             slots, d->ngpus, json_array_size(running));
    ctl__send(c, from, wire_ok(req));
}

static ctl_disp *s_disp(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    const char *name;
    char err[128];
    if (wire_get_str(msg, "name", &name, err, sizeof err)) {
        s_reply_error(c, from, req, "malformed", err);
        return NULL;
    }
    ctl_disp *d = ctl__disp_by_name(c, name);
    if (!d) {
        s_reply_error(c, from, req, "unknown_dispatcher", "register first");
        return NULL;
    }
    d->peer = *from;
    d->last_seen = wire_now();
    d->alive = 1;
    return d;
}

static void s_disp_heartbeat(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    ctl_disp *d = s_disp(c, from, msg, req);
    if (!d)
        return;
    json_t *running = json_object_get(msg, "running");
    if (running && s_valid_running(running))
        s_running_list(c, d, running, 0);
    ctl__send(c, from, wire_ok(req));
}

/* The trial named by a dispatcher report, if the attempt is current. */
static ctl_trial *s_reported_trial(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    long id, attempt;
    char err[128];
    if (wire_get_long(msg, "trial", &id, err, sizeof err) ||
        wire_get_long(msg, "attempt", &attempt, err, sizeof err)) {
        s_reply_error(c, from, req, "malformed", err);
        return NULL;
    }
    ctl_trial *t = ctl__trial_by_id(c, id);
    if (!t || t->row.attempt != attempt) {
        ctl__send(c, from, wire_ok(req)); /* stale: nothing to apply */
        return NULL;
    }
    return t;
}

static void s_started(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    if (!s_disp(c, from, msg, req))
        return;
    ctl_trial *t = s_reported_trial(c, from, msg, req);
    if (!t)
        return;
    if (ctl__trial_active(t)) {
        long pid = 0;
        char err[64];
        wire_get_long(msg, "pid", &pid, err, sizeof err);
        t->row.pid = pid;
        const char *out = json_string_value(json_object_get(msg, "stdout"));
        const char *errp = json_string_value(json_object_get(msg, "stderr"));
        snprintf(t->row.out_path, sizeof t->row.out_path, "%s", out ? out : "");
        snprintf(t->row.err_path, sizeof t->row.err_path, "%s", errp ? errp : "");
        if (!strcmp(t->row.state, "starting"))
            snprintf(t->row.state, sizeof t->row.state, "running");
        t->last_heard = wire_now();
        if (ctl__save_trial(c, t) != 0)
            return;
    }
    ctl__send(c, from, wire_ok(req));
}

static void s_exited(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    if (!s_disp(c, from, msg, req))
        return;
    ctl_trial *t = s_reported_trial(c, from, msg, req);
    if (!t)
        return;
    const char *how = json_string_value(json_object_get(msg, "how"));
    if (!how) {
        s_reply_error(c, from, req, "malformed", "field 'how': expected a string");
        return;
    }
    long code = 0, sig = 0;
    char err[64];
    wire_get_long(msg, "code", &code, err, sizeof err);
    wire_get_long(msg, "signal", &sig, err, sizeof err);
    const char *text = json_string_value(json_object_get(msg, "message"));
    if (ctl__txn(c) != 0)
        return;
    ctl__trial_exited(c, t, how, !strcmp(how, "signaled") ? sig : code, text);
    ctl__send(c, from, wire_ok(req));
}

/* ---- CLI ---- */

static ctl_study *s_study_arg(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    const char *name;
    char err[128];
    if (wire_get_str(msg, "study", &name, err, sizeof err)) {
        s_reply_error(c, from, req, "malformed", err);
        return NULL;
    }
    ctl_study *s = ctl__study_by_name(c, name);
    if (!s) {
        char text[200];
        snprintf(text, sizeof text, "no study named \"%s\" is loaded in this controller",
                 name);
        s_reply_error(c, from, req, "unknown_study", text);
    }
    return s;
}

static void s_submit(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    json_t *spec = json_object_get(msg, "spec");
    if (!json_is_object(spec)) {
        s_reply_error(c, from, req, "malformed", "field 'spec': expected an object");
        return;
    }
    ctl_study *s = NULL;
    int resumed, finished;
    const char *code = "internal";
    char text[512] = "";
    if (ctl__submit(c, spec, &s, &resumed, &finished, &code, text, sizeof text) != 0) {
        s_reply_error(c, from, req, code, text);
        return;
    }
    json_t *r = wire_ok(req);
    json_object_set_new(r, "study",
                        json_string(json_string_value(json_object_get(spec, "name"))));
    json_object_set_new(r, "resumed", json_boolean(resumed));
    json_object_set_new(r, "finished", json_boolean(finished));
    ctl__send(c, from, r);
}

static void s_status(ctl_t *c, const wire_peer *from, json_t *msg, long req)
{
    ctl_study *s = s_study_arg(c, from, msg, req);
    if (!s)
        return;
    json_t *r = wire_ok(req);
    json_t *st = ctl__study_status(c, s);
    json_object_update(r, st);
    json_decref(st);
    ctl__send(c, from, r);
}

/* Who asked, for the events: "cli", or the label a front end passes as
   "who" ("web:USER", from the web API's token). A label the sender claims,
   not an authenticated identity, until the controller checks keys. */
static const char *s_who(const json_t *msg)
{
    const char *w = json_string_value(json_object_get(msg, "who"));
    if (w && !strncmp(w, "web:", 4) && ident_valid_user(w + 4))
        return w;
    return "cli";
}

static void s_study_cmd(ctl_t *c, const wire_peer *from, json_t *msg, long req, int stop)
{
    ctl_study *s = s_study_arg(c, from, msg, req);
    if (!s)
        return;
    if (!strcmp(s->row.state, "finished")) {
        s_reply_error(c, from, req, "bad_state", "the study has finished");
        return;
    }
    if (stop)
        ctl__study_stop(c, s, s_who(msg));
    else
        ctl__study_resume(c, s, s_who(msg));
    ctl__send(c, from, wire_ok(req));
}

static void s_trial_cmd(ctl_t *c, const wire_peer *from, json_t *msg, long req,
                        const char *kind)
{
    long id;
    char err[128];
    if (wire_get_long(msg, "trial", &id, err, sizeof err)) {
        s_reply_error(c, from, req, "malformed", err);
        return;
    }
    ctl_trial *t = ctl__trial_by_id(c, id);
    if (!t) {
        snprintf(err, sizeof err, "no trial %ld in a study this controller runs", id);
        s_reply_error(c, from, req, "unknown_trial", err);
        return;
    }
    int suspended = !strcmp(t->row.state, "suspended");
    int idle_ok =
        (!strcmp(kind, "stop") && (!strcmp(t->row.state, "pending") || suspended)) ||
        (!strcmp(kind, "resume") && suspended);
    if (!ctl__trial_active(t) && !idle_ok) {
        snprintf(err, sizeof err, "trial %ld is %s, not running", id, t->row.state);
        s_reply_error(c, from, req, "bad_state", err);
        return;
    }
    int wait = json_is_true(json_object_get(msg, "wait"));
    if (ctl__txn(c) != 0)
        return;
    if (suspended && !strcmp(kind, "resume")) {
        ctl__trial_unsuspend(c, t, s_who(msg));
        json_t *r = wire_ok(req);
        json_object_set_new(r, "restarting", json_true());
        ctl__send(c, from, r);
        return;
    }
    if (!strcmp(kind, "pause") && json_is_true(json_object_get(msg, "release"))) {
        if (t->release || !strcmp(t->row.state, "starting")) {
            s_reply_error(c, from, req, "bad_state",
                          "the trial is starting or already releasing");
            return;
        }
        ctl__trial_release(c, t, s_who(msg));
        json_t *r = wire_ok(req);
        json_object_set_new(r, "releasing", json_true());
        ctl__send(c, from, r);
        return;
    }
    if (!strcmp(kind, "stop")) {
        ctl__trial_stop(c, t, s_who(msg), "stopped by a person");
        ctl__send(c, from, wire_ok(req));
        return;
    }
    if (!strcmp(kind, "set")) {
        json_t *values = json_object_get(msg, "values");
        if (!json_is_object(values) || json_object_size(values) == 0) {
            s_reply_error(c, from, req, "malformed",
                          "field 'values': expected a non-empty object");
            return;
        }
        const char *key;
        json_t *v;
        json_object_foreach(values, key, v)
        {
            if (!spec_valid_name(key) || !(json_is_number(v) || json_is_string(v))) {
                snprintf(err, sizeof err,
                         "values.%s: expected a name and a number or string", key);
                s_reply_error(c, from, req, "malformed", err);
                return;
            }
        }
        /* one instruction per key; the reply waits for the last */
        size_t left = json_object_size(values);
        json_object_foreach(values, key, v)
        {
            json_t *args = json_pack("{s:s, s:O}", "name", key, "value", v);
            int last = --left == 0;
            long iid = ctl__instruct(c, t, "set", args, s_who(msg), "set by a person",
                                     wait && last ? from : NULL, req);
            json_decref(args);
            if (iid < 0)
                return;
            if (last && !wait) {
                json_t *r = wire_ok(req);
                json_object_set_new(r, "instruction", json_integer(iid));
                ctl__send(c, from, r);
            }
        }
        return;
    }
    long iid = ctl__instruct(c, t, kind, NULL, s_who(msg), "by a person",
                             wait ? from : NULL, req);
    if (iid >= 0 && !wait) {
        json_t *r = wire_ok(req);
        json_object_set_new(r, "instruction", json_integer(iid));
        ctl__send(c, from, r);
    }
}

void ctl__handle(ctl_t *c, const wire_peer *from, json_t *msg)
{
    const char *type = wire_type(msg);
    json_t *r = json_object_get(msg, "req");
    long req = json_is_integer(r) ? (long)json_integer_value(r) : -1;
    int is_trial = json_object_get(msg, "token") != NULL;
    if (!strcmp(type, "hello"))
        s_hello(c, from, msg, req);
    else if (!strcmp(type, "metrics"))
        s_metrics(c, from, msg, req);
    else if (!strcmp(type, "heartbeat") && is_trial)
        s_trial_heartbeat(c, from, msg, req);
    else if (!strcmp(type, "ins_ack"))
        s_ins_ack(c, from, msg, req);
    else if (!strcmp(type, "checkpoint_done"))
        s_checkpoint_done(c, from, msg, req);
    else if (!strcmp(type, "register"))
        s_register(c, from, msg, req);
    else if (!strcmp(type, "heartbeat"))
        s_disp_heartbeat(c, from, msg, req);
    else if (!strcmp(type, "started"))
        s_started(c, from, msg, req);
    else if (!strcmp(type, "exited"))
        s_exited(c, from, msg, req);
    else if (!strcmp(type, "submit"))
        s_submit(c, from, msg, req);
    else if (!strcmp(type, "status"))
        s_status(c, from, msg, req);
    else if (!strcmp(type, "study_stop"))
        s_study_cmd(c, from, msg, req, 1);
    else if (!strcmp(type, "study_resume"))
        s_study_cmd(c, from, msg, req, 0);
    else if (!strcmp(type, "trial_stop"))
        s_trial_cmd(c, from, msg, req, "stop");
    else if (!strcmp(type, "trial_pause"))
        s_trial_cmd(c, from, msg, req, "pause");
    else if (!strcmp(type, "trial_resume"))
        s_trial_cmd(c, from, msg, req, "resume");
    else if (!strcmp(type, "trial_set"))
        s_trial_cmd(c, from, msg, req, "set");
    else if (!strcmp(type, "ping")) {
        json_t *ok = wire_ok(req);
        json_object_set_new(ok, "version", json_string("0.1.0"));
        ctl__send(c, from, ok);
    } else {
        log_warn("ctl", "dropped a message of unknown type \"%.40s\"", type);
        ctl__send(c, from,
                  wire_error(req, "malformed", "unknown message type \"%.40s\"", type));
    }
}
