/*  ctl_msg.c - the controller's messages: a handler per message type of
    the schema (common/msg.h, docs/PROTOCOL.md). This file holds the
    dispatch (ctl__handle) and the trials' messages; the dispatchers'
    are in ctl_msg_disp.c, the CLI's and web server's in ctl_msg_cli.c,
    each with its table of handlers (ctl_msg.h).

    ctl__handle looks the type up in the schema, checks that the sender's
    role allows the row's action, authenticates the peer for the row's
    identity (a trial message needs the trial's id and token: the handler
    gets the trial; a dispatcher message a registered dispatcher name: the
    handler gets the dispatcher; `register`, the CLI's requests and `ping`
    need none), then checks the row's fields and their JSON types, once;
    all of it changes nothing. A handler trusts those fields and checks
    only their meaning (ranges, names), answering `error` without changing
    anything when they are wrong; only then does it change state, through
    the trial's and study's transition functions (ctl_trial.h,
    ctl_study.h), which refuse moves the current state does not allow
    (`bad_state`).
*/
#include "ctl_internal.h"
#include "ctl_msg.h"

#include "../common/ident.h"
#include "../common/log.h"
#include "../common/msg.h"
#include "../common/util.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- authentication (changes nothing) ---- */

/* The trial whose id and token the message carries, or NULL (answered). */
static ctl_trial *s_auth_trial(ctl_t *c, const ctl_msg *m)
{
    long id;
    const char *token;
    char err[128];
    if (wire_get_long(m->msg, "trial", &id, err, sizeof err) ||
        wire_get_str(m->msg, "token", &token, err, sizeof err)) {
        ctl__msg_error(c, m->from, m->req, "malformed", err);
        return NULL;
    }
    ctl_trial *t = ctl__trial_by_id(c, id);
    if (!t || strcmp(t->row.token, token) != 0) {
        ctl__refused(c, "refused a %s message for trial %ld: wrong token",
                     wire_type(m->msg), id);
        ctl__msg_error(c, m->from, m->req, "unauthorized", "wrong token for this trial");
        return NULL;
    }
    return t;
}

/* The registered dispatcher the message names, or NULL (answered). */
static ctl_disp *s_auth_disp(ctl_t *c, const ctl_msg *m)
{
    const char *name;
    char err[128];
    if (wire_get_str(m->msg, "name", &name, err, sizeof err)) {
        ctl__msg_error(c, m->from, m->req, "malformed", err);
        return NULL;
    }
    ctl_disp *d = ctl__disp_by_name(c, name);
    if (!d) {
        ctl__msg_error(c, m->from, m->req, "unknown_dispatcher", "register first");
        return NULL;
    }
    if (d->owner[0] && strcmp(d->owner, m->who->principal) != 0) {
        ctl__refused(c, "refused %s for dispatcher %s from another identity (%s)",
                     wire_type(m->msg), name, m->who->principal);
        ctl__msg_error(c, m->from, m->req, "forbidden",
                       "this dispatcher name belongs to another key or user");
        return NULL;
    }
    return d;
}

#define MAX_POINTS 100000

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

/* ---- trials ---- */

/* An authenticated trial spoke: where it is, that it lives, and what it
   has not acknowledged yet. */
static void s_trial_spoke(ctl_t *c, const ctl_msg *m)
{
    ctl_trial *t = m->trial;
    t->peer = *m->from;
    t->spoke_wall = util_wall();
    ctl__trial_heard(c, t);
    ctl__instr_resend(c, t);
}

static void s_hello(ctl_t *c, const ctl_msg *m)
{
    ctl_trial *t = m->trial;
    s_trial_spoke(c, m);
    json_t *r = wire_ok(m->req);
    json_object_set(r, "params", t->row.params);
    json_object_set_new(r, "study", json_string(t->study->row.name));
    json_object_set_new(r, "state", json_string(store_trial_state_name(t->row.state)));
    ctl__send(c, m->from, r);
}

/* The points of a metrics message (at most MAX_POINTS): read by
   wire_recv_points into m->points (checked there: plain integers, valid
   names, numbers), or from its JSON. Returns the count and *out (caller
   frees), or -1 after answering `malformed`. */
static long s_points(ctl_t *c, const ctl_msg *m, store_point **out)
{
    if (m->points) {
        size_t n = m->points->n;
        store_point *p = util_xmalloc((n ? n : 1) * sizeof *p);
        for (size_t i = 0; i < n; i++)
            p[i] = (store_point){m->points->p[i].step, m->points->p[i].name,
                                 m->points->p[i].value};
        *out = p;
        return (long)n;
    }
    json_t *pts = json_object_get(m->msg, "points");
    size_t n = json_array_size(pts);
    store_point *p = util_xmalloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(pts, i);
        json_t *step = json_array_get(e, 0), *name = json_array_get(e, 1);
        if (!json_is_array(e) || json_array_size(e) != 3 || !json_is_integer(step) ||
            !json_is_string(name) || !s_valid_metric(json_string_value(name)) ||
            wire_to_double(json_array_get(e, 2), &p[i].value) != 0) {
            char text[128];
            snprintf(text, sizeof text,
                     "points[%zu]: expected [step (integer), name, value]", i);
            ctl__msg_error(c, m->from, m->req, "malformed", text);
            free(p);
            return -1;
        }
        p[i].step = (long)json_integer_value(step);
        p[i].name = json_string_value(name);
    }
    *out = p;
    return (long)n;
}

static void s_metrics(ctl_t *c, const ctl_msg *m)
{
    ctl_trial *t = m->trial;
    const wire_peer *from = m->from;
    long req = m->req;
    s_trial_spoke(c, m);
    size_t npts =
        m->points ? m->points->n : json_array_size(json_object_get(m->msg, "points"));
    if (npts > MAX_POINTS) {
        ctl__msg_error(
            c, from, req, "malformed",
            "field 'points': expected an array of at most 100000 [step, name, value]");
        return;
    }
    /* each helper instance (process) numbers its batches from its own
       session; a batch resent after a lost reply or a controller restart
       has the same session and req as the one stored */
    const char *session = json_string_value(json_object_get(m->msg, "session"));
    if (!session)
        session = "";
    if (strlen(session) >= sizeof t->row.metric_session) {
        ctl__msg_error(c, from, req, "malformed", "field 'session': too long");
        return;
    }
    if (!strcmp(session, t->row.metric_session) && req <= t->row.metric_req) {
        ctl__send(c, from, wire_ok(req));
        return;
    }
    if (!ctl_trial_active(t)) {
        ctl__msg_error(c, from, req, "bad_state", "the trial has ended; metrics refused");
        return;
    }
    store_point *p;
    long n = s_points(c, m, &p);
    if (n < 0)
        return;
    if (ctl__txn(c) != 0) {
        free(p);
        return;
    }
    t->row.metric_req = req;
    snprintf(t->row.metric_session, sizeof t->row.metric_session, "%s", session);
    if (ctl__trial_metrics(c, t, p, (size_t)n, util_now()) == 0)
        ctl__send(c, from, wire_ok(req));
    free(p);
}

static void s_trial_heartbeat(ctl_t *c, const ctl_msg *m)
{
    s_trial_spoke(c, m);
    ctl__send(c, m->from, wire_ok(m->req));
}

static void s_ins_ack(ctl_t *c, const ctl_msg *m)
{
    s_trial_spoke(c, m);
    long id = ctl__msg_int(m, "id");
    long to = ctl__instr_trial(c, id);
    if (to >= 0 && to != m->trial->row.id) {
        ctl__refused(c, "trial %ld acknowledged instruction %ld of trial %ld",
                     m->trial->row.id, id, to);
        ctl__send(c, m->from,
                  wire_error(m->req, "forbidden",
                             "instruction %ld is not addressed to trial %ld", id,
                             m->trial->row.id));
        return;
    }
    ctl_trial *t = m->trial;
    /* a stop it took, acknowledged to this controller after a restart: its
       end is a stop's, not a failure to retry or a completion */
    if (ctl__instr_ack(c, t, id, json_is_true(json_object_get(m->msg, "applied")),
                       ctl__msg_str(m, "detail")) == 1 &&
        ctl_trial_active(t) && t->plan == PLAN_NONE)
        ctl__trial_stop(c, t, "controller", "a stop sent before the controller restarted",
                        CTL_STOP_BY_PERSON);
    ctl__send(c, m->from, wire_ok(m->req));
}

static void s_checkpoint_done(ctl_t *c, const ctl_msg *m)
{
    ctl_trial *t = m->trial;
    s_trial_spoke(c, m);
    long step = ctl__msg_int(m, "step");
    const char *path = ctl__msg_str(m, "path");
    if (strlen(path) >= sizeof t->row.checkpoint) {
        ctl__msg_error(c, m->from, m->req, "malformed", "field 'path': too long");
        return;
    }
    if (ctl__txn(c) != 0)
        return;
    ctl__trial_checkpoint(c, t, step, path);
    ctl__send(c, m->from, wire_ok(m->req));
}

/* The handlers of the trial -> controller messages (ctl_msg.h). */
const ctl_handler ctl__msg_trial_handlers[MSG_COUNT] = {
    [MSG_HELLO] = s_hello,
    [MSG_METRICS] = s_metrics,
    [MSG_TRIAL_HEARTBEAT] = s_trial_heartbeat,
    [MSG_INS_ACK] = s_ins_ack,
    [MSG_CHECKPOINT_DONE] = s_checkpoint_done,
};

/* ---- the table: a view of the schema (common/msg.h) ---- */

/* The handler of type t: each part's table has the types it handles. */
static ctl_handler s_handler(msg_type t)
{
    if (ctl__msg_trial_handlers[t])
        return ctl__msg_trial_handlers[t];
    if (ctl__msg_disp_handlers[t])
        return ctl__msg_disp_handlers[t];
    return ctl__msg_cli_handlers[t];
}

static const char *const s_action_text[] = {
    [IDENT_READ] = "read",
    [IDENT_SUBMIT] = "submit studies",
    [IDENT_STEER] = "steer studies and trials",
    [IDENT_RUN] = "do a dispatcher's work",
    [IDENT_ADMINISTER] = "administer",
};

/* 1 when the sender may do `action`; else answers a refusal and logs it
   (changes nothing). */
static int s_permitted(ctl_t *c, const ctl_msg *m, int action)
{
    const ctl_ident *w = m->who;
    if (action == MSG_ACT_FREE || w->trusted ||
        ident_allows(w->id.role, (ident_action)action))
        return 1;
    if (w->id.role == IDENT_NONE) {
        ctl__refused(c, "refused %s from an unknown key or peer", wire_type(m->msg));
        ctl__msg_error(c, m->from, m->req, "unauthorized",
                       "unknown key: the controller's authorized keys do not list it");
    } else {
        ctl__refused(c, "refused %s from %s (%s)", wire_type(m->msg), w->id.user,
                     ident_role_str(w->id.role));
        ctl__send(c, m->from,
                  wire_error(m->req, "forbidden", "%s (role %s) may not %s", w->id.user,
                             ident_role_str(w->id.role), s_action_text[action]));
    }
    return 0;
}

void ctl__handle(ctl_t *c, const wire_peer *from, const ctl_ident *who, json_t *msg,
                 const wire_points *points)
{
    const char *type = wire_type(msg);
    json_t *r = json_object_get(msg, "req");
    ctl_ident eff;
    ctl__auth_effective(msg, who, &eff);
    ctl_msg m = {from,  msg,  json_is_integer(r) ? (long)json_integer_value(r) : -1,
                 NULL,  NULL, &eff,
                 points};
    const msg_def *def = msg_find(type, MSG_CTL);
    if (!def || !s_handler(def->type)) {
        ctl__refused(c, "dropped a message of unknown type \"%.40s\"", type);
        ctl__send(c, from,
                  wire_error(m.req, "malformed", "unknown message type \"%.40s\"", type));
        return;
    }
    if (!s_permitted(c, &m, def->action))
        return;
    /* who it is (a trial's token, a registered name), then the fields,
       once: a handler trusts the schema's fields and their types */
    if (def->auth == MSG_AUTH_TRIAL && !(m.trial = s_auth_trial(c, &m)))
        return;
    if (def->auth == MSG_AUTH_DISP && !(m.disp = s_auth_disp(c, &m)))
        return;
    char err[160];
    if (msg_check(def, msg, err, sizeof err) != 0) {
        ctl__refused(c, "refused a malformed %s: %s", def->name, err);
        ctl__send(c, from, wire_error(m.req, "malformed", "%s: %s", def->name, err));
        return;
    }
    /* the events this message causes record who did it */
    store_set_actor(c->store, def->auth != MSG_AUTH_TRIAL && eff.id.role != IDENT_NONE
                                  ? eff.id.user
                                  : NULL);
    s_handler(def->type)(c, &m);
    store_set_actor(c->store, NULL);
}
