/*  ctl_msg.c - the controller's messages: a handler per message type of
    the schema (common/msg.h, docs/PROTOCOL.md).

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

#include "../common/ident.h"
#include "../common/log.h"
#include "../common/msg.h"
#include "../common/util.h"
#include "jizhi.h" /* JZ_VERSION */

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

/* What a handler gets: the message, its sender, and the sender's
   identity as the table row's role established it. */
typedef struct {
    const wire_peer *from;
    json_t *msg;
    long req;
    ctl_trial *trial;     /* MSG_AUTH_TRIAL: the authenticated trial */
    ctl_disp *disp;       /* MSG_AUTH_DISP: the registered dispatcher */
    const ctl_ident *who; /* the sender as the transport identified it */
} ctl_msg;

/* ---- authentication (changes nothing) ---- */

/* The trial whose id and token the message carries, or NULL (answered). */
static ctl_trial *s_auth_trial(ctl_t *c, const ctl_msg *m)
{
    long id;
    const char *token;
    char err[128];
    if (wire_get_long(m->msg, "trial", &id, err, sizeof err) ||
        wire_get_str(m->msg, "token", &token, err, sizeof err)) {
        s_reply_error(c, m->from, m->req, "malformed", err);
        return NULL;
    }
    ctl_trial *t = ctl__trial_by_id(c, id);
    if (!t || strcmp(t->row.token, token) != 0) {
        ctl__refused(c, "refused a %s message for trial %ld: wrong token",
                     wire_type(m->msg), id);
        s_reply_error(c, m->from, m->req, "unauthorized", "wrong token for this trial");
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
        s_reply_error(c, m->from, m->req, "malformed", err);
        return NULL;
    }
    ctl_disp *d = ctl__disp_by_name(c, name);
    if (!d) {
        s_reply_error(c, m->from, m->req, "unknown_dispatcher", "register first");
        return NULL;
    }
    if (d->owner[0] && strcmp(d->owner, m->who->principal) != 0) {
        ctl__refused(c, "refused %s for dispatcher %s from another identity (%s)",
                     wire_type(m->msg), name, m->who->principal);
        s_reply_error(c, m->from, m->req, "forbidden",
                      "this dispatcher name belongs to another key or user");
        return NULL;
    }
    return d;
}

/* 1 when the sender may steer s; else answers `forbidden` (changes
   nothing). */
static int s_may_steer(ctl_t *c, const ctl_msg *m, const ctl_study *s)
{
    if (ctl__auth_may_steer(c, m->who, s))
        return 1;
    ctl__refused(c, "refused %s of study %s from %s (%s)", wire_type(m->msg), s->row.name,
                 m->who->id.user, ident_role_str(m->who->id.role));
    ctl__send(c, m->from,
              wire_error(m->req, "forbidden",
                         "%s may not steer study %s: it belongs to %s (only its owner or "
                         "an admin may)",
                         m->who->id.user, s->row.name, ctl__auth_owner(c, s)));
    return 0;
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
    json_object_set_new(r, "state", json_string(store_trial_state_name(t->state)));
    ctl__send(c, m->from, r);
}

static void s_metrics(ctl_t *c, const ctl_msg *m)
{
    ctl_trial *t = m->trial;
    const wire_peer *from = m->from;
    long req = m->req;
    s_trial_spoke(c, m);
    json_t *pts = json_object_get(m->msg, "points");
    if (!json_is_array(pts) || json_array_size(pts) > MAX_POINTS) {
        s_reply_error(
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
        s_reply_error(c, from, req, "malformed", "field 'session': too long");
        return;
    }
    if (!strcmp(session, t->row.metric_session) && req <= t->row.metric_req) {
        ctl__send(c, from, wire_ok(req));
        return;
    }
    if (!ctl_trial_active(t)) {
        s_reply_error(c, from, req, "bad_state", "the trial has ended; metrics refused");
        return;
    }
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
    if (ctl__trial_metrics(c, t, p, n, util_now()) == 0)
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
    long id;
    char err[128];
    json_t *applied = json_object_get(m->msg, "applied");
    if (wire_get_long(m->msg, "id", &id, err, sizeof err) || !json_is_boolean(applied)) {
        s_reply_error(c, m->from, m->req, "malformed",
                      "ins_ack needs 'id' (integer) and 'applied' (boolean)");
        return;
    }
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
    const char *detail = json_string_value(json_object_get(m->msg, "detail"));
    ctl__instr_done(c, id, json_is_true(applied), detail);
    ctl__send(c, m->from, wire_ok(m->req));
}

static void s_checkpoint_done(ctl_t *c, const ctl_msg *m)
{
    ctl_trial *t = m->trial;
    s_trial_spoke(c, m);
    long step;
    const char *path;
    char err[128] = "";
    if (wire_get_long(m->msg, "step", &step, err, sizeof err) ||
        wire_get_str(m->msg, "path", &path, err, sizeof err) ||
        strlen(path) >= sizeof t->row.checkpoint) {
        s_reply_error(c, m->from, m->req, "malformed", *err ? err : "path too long");
        return;
    }
    if (ctl__txn(c) != 0)
        return;
    ctl__trial_checkpoint(c, t, step, path);
    ctl__send(c, m->from, wire_ok(m->req));
}

/* ---- dispatchers ---- */

static int s_listed(json_t *running, const ctl_trial *t)
{
    size_t i;
    json_t *e;
    json_array_foreach(running, i, e)
    {
        if (json_integer_value(json_object_get(e, "trial")) == t->row.id &&
            json_integer_value(json_object_get(e, "attempt")) == t->row.attempt)
            return 1;
    }
    return 0;
}

/* 1 when a process a dispatcher names by trial `id`, `attempt` and the
   attempt's `tag` (NULL: none given, from a dispatcher that does not
   know it) is this store's. The current attempt's tag must match; an
   earlier attempt's token is gone, so such a process is taken as ours. A
   Slurm job of another store, taken back by a dispatcher of the same
   name, is not. */
static int s_ours(ctl_t *c, const ctl_trial *t, long id, long attempt, const char *tag)
{
    if (!tag)
        return 1;
    char mine[IDENT_TAG_LEN + 1];
    if (t) {
        if (attempt != t->row.attempt)
            return 1;
        ident_attempt_tag(t->row.token, mine);
        return !strcmp(tag, mine);
    }
    store_trial row;
    if (store_trial_get(c->store, id, &row) != 1)
        return 0;
    int ours = row.attempt != attempt;
    if (!ours) {
        ident_attempt_tag(row.token, mine);
        ours = !strcmp(tag, mine);
    }
    store_trial_fini(&row);
    return ours;
}

/* 1 when d holds t's current attempt: only that dispatcher may report
   on it (started, exited, running lists). */
static int s_holds(const ctl_disp *d, const ctl_trial *t)
{
    return !strcmp(t->row.dispatcher, d->name);
}

/* Marks the trials a dispatcher lists as alive. */
static void s_running_list(ctl_t *c, ctl_disp *d, json_t *running, int reconcile)
{
    double now = util_now();
    size_t i;
    json_t *e;
    json_array_foreach(running, i, e)
    {
        long id = (long)json_integer_value(json_object_get(e, "trial"));
        ctl_trial *t = ctl__trial_by_id(c, id);
        json_int_t attempt = json_integer_value(json_object_get(e, "attempt"));
        const char *tag = json_string_value(json_object_get(e, "tag"));
        if (!s_ours(c, t, id, (long)attempt, tag)) {
            /* not this store's to keep or to kill */
            log_warn("ctl",
                     "dispatcher %s lists trial %ld.%" JSON_INTEGER_FORMAT
                     " (pid %" JSON_INTEGER_FORMAT
                     ") with another attempt's tag: not this controller's; disowning it",
                     d->name, id, attempt, json_integer_value(json_object_get(e, "pid")));
            ctl__send(c, &d->peer,
                      json_pack("{s:s, s:I, s:I, s:s, s:s}", "type", "disown", "trial",
                                (json_int_t)id, "attempt", attempt, "tag", tag, "reason",
                                "not an attempt of this controller's store"));
            continue;
        }
        if (t && ctl_trial_active(t) && attempt == t->row.attempt && !s_holds(d, t)) {
            /* another dispatcher's attempt: neither kept alive nor killed */
            ctl__refused(c,
                         "dispatcher %s lists trial %ld.%" JSON_INTEGER_FORMAT
                         ", which runs on %s: ignored",
                         d->name, id, attempt,
                         t->row.dispatcher[0] ? t->row.dispatcher : "no dispatcher");
            continue;
        }
        if (t && ctl_trial_active(t) && attempt == t->row.attempt) {
            t->last_heard = now;
            if (!t->disp) {
                t->disp = d;
                d->used += t->study && t->study->spec ? t->study->spec->ranks : 1;
            }
        } else if (json_integer_value(json_object_get(e, "pid")) != 0 &&
                   (!t || attempt != t->row.attempt || !ctl_trial_active(t))) {
            /* a process of an attempt that is over for the controller (lost
               and run again elsewhere, or ended): it must not run on */
            log_warn("ctl",
                     "dispatcher %s still runs trial %" JSON_INTEGER_FORMAT
                     ".%" JSON_INTEGER_FORMAT ", a stale attempt: killing it",
                     d->name, json_integer_value(json_object_get(e, "trial")), attempt);
            ctl__send(
                c, &d->peer,
                json_pack("{s:s, s:O, s:I, s:s}", "type", "kill", "trial",
                          json_object_get(e, "trial"), "attempt", attempt, "reason",
                          "stale attempt: the controller runs a newer one or none"));
        }
    }
    if (!reconcile)
        return;
    /* after a (re-)registration: trials the dispatcher no longer has are lost */
    for (size_t s = 0; s < c->nstudies; s++)
        for (size_t k = 0; k < c->studies[s]->ntrials; k++) {
            ctl_trial *t = c->studies[s]->trials[k];
            if (ctl_trial_active(t) && !strcmp(t->row.dispatcher, d->name) &&
                !s_listed(running, t))
                ctl__trial_lost(c, t, "lost: its dispatcher restarted without it");
        }
}

static int s_valid_running(json_t *running)
{
    if (!json_is_array(running))
        return 0;
    size_t i;
    json_t *e;
    json_array_foreach(running, i, e)
    {
        json_t *tag = json_object_get(e, "tag");
        if (!json_is_object(e) || !json_is_integer(json_object_get(e, "trial")) ||
            !json_is_integer(json_object_get(e, "attempt")) ||
            (tag && !json_is_string(tag)))
            return 0;
    }
    return 1;
}

/* A registered dispatcher spoke. */
static void s_disp_spoke(ctl_disp *d, const wire_peer *from)
{
    d->peer = *from;
    d->last_seen = util_now();
    d->alive = 1;
}

static void s_register(ctl_t *c, const ctl_msg *m)
{
    const char *name;
    long slots;
    char err[128];
    json_t *gpus = json_object_get(m->msg, "gpus");
    json_t *running = json_object_get(m->msg, "running");
    if (wire_get_str(m->msg, "name", &name, err, sizeof err) ||
        wire_get_long(m->msg, "slots", &slots, err, sizeof err) || !json_is_array(gpus) ||
        json_array_size(gpus) > 64 || !s_valid_running(running) || !*name ||
        strlen(name) >= 64 || slots < 0) {
        s_reply_error(c, m->from, m->req, "malformed",
                      "register needs name, slots >= 0, gpus (array of <= 64), running");
        return;
    }
    /* a name is bound to the identity that first registered it */
    ctl_disp *known = ctl__disp_by_name(c, name);
    char bound[72] = "";
    if (known && known->owner[0])
        snprintf(bound, sizeof bound, "%s", known->owner);
    else if (store_dispatcher_owner(c->store, name, bound, sizeof bound) != 0)
        bound[0] = 0;
    if (bound[0] && strcmp(bound, m->who->principal) != 0) {
        ctl__refused(c, "refused register of dispatcher %s from another identity (%s)",
                     name, m->who->principal);
        s_reply_error(c, m->from, m->req, "forbidden",
                      "this dispatcher name belongs to another key or user");
        return;
    }
    if (!known && c->ndisps >= CTL_MAX_DISPS) {
        s_reply_error(c, m->from, m->req, "too_many",
                      "too many dispatchers are known; silent ones are forgotten after "
                      "a while");
        return;
    }
    ctl_disp *d = ctl__disp_get(c, name);
    s_disp_spoke(d, m->from);
    d->slots = slots;
    d->used = 0;
    d->ngpus = (long)json_array_size(gpus);
    for (long g = 0; g < d->ngpus; g++) {
        d->gpu_ids[g] = (int)json_integer_value(json_array_get(gpus, (size_t)g));
        d->gpu_used[g] = 0;
    }
    /* trials bound to this dispatcher are re-counted from its list */
    for (size_t s = 0; s < c->nstudies; s++)
        for (size_t k = 0; k < c->studies[s]->ntrials; k++)
            if (c->studies[s]->trials[k]->disp == d)
                c->studies[s]->trials[k]->disp = NULL;
    if (ctl__txn(c) != 0)
        return;
    s_running_list(c, d, running, 1);
    char *gtext = json_dumps(gpus, JSON_COMPACT);
    store_dispatcher_upsert(c->store, name, slots, gtext, util_wall());
    free(gtext);
    if (!d->owner[0]) {
        snprintf(d->owner, sizeof d->owner, "%s", m->who->principal);
        store_dispatcher_set_owner(c->store, name, d->owner);
    }
    log_info("ctl", "dispatcher %s registered: %ld slots, %ld GPUs, %zu running", name,
             slots, d->ngpus, json_array_size(running));
    ctl__send(c, m->from, wire_ok(m->req));
}

static void s_disp_heartbeat(ctl_t *c, const ctl_msg *m)
{
    s_disp_spoke(m->disp, m->from);
    json_t *running = json_object_get(m->msg, "running");
    if (running && s_valid_running(running))
        s_running_list(c, m->disp, running, 0);
    ctl__send(c, m->from, wire_ok(m->req));
}

/* The trial named by a dispatcher report, if the attempt is current. */
static ctl_trial *s_reported_trial(ctl_t *c, const ctl_msg *m)
{
    long id, attempt;
    char err[128];
    if (wire_get_long(m->msg, "trial", &id, err, sizeof err) ||
        wire_get_long(m->msg, "attempt", &attempt, err, sizeof err)) {
        s_reply_error(c, m->from, m->req, "malformed", err);
        return NULL;
    }
    ctl_trial *t = ctl__trial_by_id(c, id);
    const char *tag = json_string_value(json_object_get(m->msg, "tag"));
    if (!t || t->row.attempt != attempt || !s_ours(c, t, id, attempt, tag)) {
        ctl__send(c, m->from, wire_ok(m->req)); /* stale: nothing to apply */
        return NULL;
    }
    if (!s_holds(m->disp, t)) {
        ctl__refused(
            c, "refused %s of trial %ld.%ld from dispatcher %s: the attempt runs on %s",
            wire_type(m->msg), id, attempt, m->disp->name,
            t->row.dispatcher[0] ? t->row.dispatcher : "no dispatcher");
        ctl__send(c, m->from,
                  wire_error(m->req, "forbidden",
                             "trial %ld attempt %ld is not this dispatcher's (%s)", id,
                             attempt, m->disp->name));
        return NULL;
    }
    return t;
}

static void s_started(ctl_t *c, const ctl_msg *m)
{
    s_disp_spoke(m->disp, m->from);
    ctl_trial *t = s_reported_trial(c, m);
    if (!t)
        return;
    if (ctl_trial_active(t)) {
        long pid = 0;
        char err[64];
        wire_get_long(m->msg, "pid", &pid, err, sizeof err);
        t->row.pid = pid;
        const char *out = json_string_value(json_object_get(m->msg, "stdout"));
        const char *errp = json_string_value(json_object_get(m->msg, "stderr"));
        snprintf(t->row.out_path, sizeof t->row.out_path, "%s", out ? out : "");
        snprintf(t->row.err_path, sizeof t->row.err_path, "%s", errp ? errp : "");
        ctl__trial_heard(c, t);
        if (ctl__trial_save(c, t) != 0)
            return;
    }
    ctl__send(c, m->from, wire_ok(m->req));
}

static void s_exited(ctl_t *c, const ctl_msg *m)
{
    s_disp_spoke(m->disp, m->from);
    ctl_trial *t = s_reported_trial(c, m);
    if (!t)
        return;
    const char *how = json_string_value(json_object_get(m->msg, "how"));
    if (!how) {
        s_reply_error(c, m->from, m->req, "malformed", "field 'how': expected a string");
        return;
    }
    long code = 0, sig = 0;
    char err[64];
    wire_get_long(m->msg, "code", &code, err, sizeof err);
    wire_get_long(m->msg, "signal", &sig, err, sizeof err);
    const char *text = json_string_value(json_object_get(m->msg, "message"));
    const char *tail = json_string_value(json_object_get(m->msg, "stderr_tail"));
    if (ctl__txn(c) != 0)
        return;
    ctl__trial_exited(c, t, how, !strcmp(how, "signaled") ? sig : code, text, tail);
    ctl__send(c, m->from, wire_ok(m->req));
}

/* ---- CLI ---- */

static ctl_study *s_study_arg(ctl_t *c, const ctl_msg *m)
{
    const char *name;
    char err[128];
    if (wire_get_str(m->msg, "study", &name, err, sizeof err)) {
        s_reply_error(c, m->from, m->req, "malformed", err);
        return NULL;
    }
    ctl_study *s = ctl__study_by_name(c, name);
    if (!s) {
        char text[200];
        snprintf(text, sizeof text, "no study named \"%s\" is loaded in this controller",
                 name);
        s_reply_error(c, m->from, m->req, "unknown_study", text);
    }
    return s;
}

static void s_submit(ctl_t *c, const ctl_msg *m)
{
    json_t *spec = json_object_get(m->msg, "spec");
    if (!json_is_object(spec)) {
        s_reply_error(c, m->from, m->req, "malformed",
                      "field 'spec': expected an object");
        return;
    }
    ctl_study *s = NULL;
    int resumed, finished;
    const char *code = "internal";
    char text[512] = "";
    if (ctl__auth_submit_owner(c, m->who, spec, text, sizeof text) != 0 ||
        ctl__queue_check_priority(c, m->who, spec, text, sizeof text) != 0) {
        s_reply_error(c, m->from, m->req, "forbidden", text);
        return;
    }
    if (ctl__submit(c, spec, &s, &resumed, &finished, &code, text, sizeof text) != 0) {
        s_reply_error(c, m->from, m->req, code, text);
        return;
    }
    json_t *r = wire_ok(m->req);
    json_object_set_new(r, "study",
                        json_string(json_string_value(json_object_get(spec, "name"))));
    json_object_set_new(r, "resumed", json_boolean(resumed));
    json_object_set_new(r, "finished", json_boolean(finished));
    char why[200];
    if (s && !finished && ctl__queue_unfit(c, s->spec, why, sizeof why))
        json_object_set_new(r, "warning", json_string(why)); /* stored all the same */
    else if (s && resumed && ctl__study_waits(c, s, NULL, why, sizeof why))
        json_object_set_new(r, "waiting", json_string(why)); /* continues, queued */
    ctl__send(c, m->from, r);
}

static void s_status(ctl_t *c, const ctl_msg *m)
{
    ctl_study *s = s_study_arg(c, m);
    if (!s)
        return;
    json_t *r = wire_ok(m->req);
    json_t *st = ctl__study_status(c, s);
    json_object_update(r, st);
    json_decref(st);
    ctl__send(c, m->from, r);
}

/* Who asked, for the events: "cli", or the label a front end passes as
   "who" ("web:USER", from the web API's token). A label the sender claims,
   not an authenticated identity, until the controller checks keys. */
static const char *s_who(const json_t *msg)
{
    /* the label is kept for a delegated web request (ctl__auth_effective);
       the authenticated user goes to the events' actor either way */
    const char *w = json_string_value(json_object_get(msg, "who"));
    if (w && !strncmp(w, "web:", 4) && ident_valid_user(w + 4))
        return w;
    return "cli";
}

static void s_study_cmd(ctl_t *c, const ctl_msg *m, int stop)
{
    ctl_study *s = s_study_arg(c, m);
    if (!s || !s_may_steer(c, m, s))
        return;
    if (s->state == STUDY_FINISHED) {
        s_reply_error(c, m->from, m->req, "bad_state", "the study has finished");
        return;
    }
    if (stop)
        ctl__study_stop(c, s, s_who(m->msg), NULL);
    else
        ctl__study_resume(c, s, s_who(m->msg));
    json_t *r = wire_ok(m->req);
    char why[200];
    if (!stop && ctl__study_waits(c, s, NULL, why, sizeof why))
        json_object_set_new(r, "waiting", json_string(why)); /* nothing could start */
    ctl__send(c, m->from, r);
}

/* study_delete {study} and study_copy {study, name} (ctl_study_ops.c) */
static void s_study_delete(ctl_t *c, const ctl_msg *m)
{
    const char *name, *code = "internal";
    char err[600];
    if (wire_get_str(m->msg, "study", &name, err, sizeof err)) {
        s_reply_error(c, m->from, m->req, "malformed", err);
        return;
    }
    json_t *d = ctl__study_delete(c, m->who, name, s_who(m->msg), &code, err, sizeof err);
    if (!d) {
        s_reply_error(c, m->from, m->req, code, err);
        return;
    }
    json_t *r = wire_ok(m->req);
    json_object_update(r, d);
    json_decref(d);
    ctl__send(c, m->from, r);
}

static void s_study_copy(ctl_t *c, const ctl_msg *m)
{
    const char *name, *to, *code = "internal";
    char err[600];
    if (wire_get_str(m->msg, "study", &name, err, sizeof err) ||
        wire_get_str(m->msg, "name", &to, err, sizeof err)) {
        s_reply_error(c, m->from, m->req, "malformed", err);
        return;
    }
    json_t *d = ctl__study_copy(c, m->who, name, to, &code, err, sizeof err);
    if (!d) {
        s_reply_error(c, m->from, m->req, code, err);
        return;
    }
    json_t *r = wire_ok(m->req);
    json_object_update(r, d);
    json_decref(d);
    ctl__send(c, m->from, r);
}

static void s_study_stop(ctl_t *c, const ctl_msg *m)
{
    s_study_cmd(c, m, 1);
}

static void s_study_resume(ctl_t *c, const ctl_msg *m)
{
    s_study_cmd(c, m, 0);
}

/* study_enqueue {study, params}: the study is loaded from the store when
   it is not (a finished one keeps the configuration until it is
   extended). */
static void s_study_enqueue(ctl_t *c, const ctl_msg *m)
{
    const char *name, *code = "internal";
    char text[512];
    if (wire_get_str(m->msg, "study", &name, text, sizeof text)) {
        s_reply_error(c, m->from, m->req, "malformed", text);
        return;
    }
    json_t *params = json_object_get(m->msg, "params");
    if (!json_is_object(params)) {
        s_reply_error(c, m->from, m->req, "malformed",
                      "field 'params': expected an object");
        return;
    }
    ctl_study *s = ctl__study_load(c, name, &code, text, sizeof text);
    if (s && !s_may_steer(c, m, s))
        return;
    json_t *copy = json_deep_copy(params);
    if (!s || ctl__study_enqueue(c, s, copy, s_who(m->msg), &code, text, sizeof text)) {
        json_decref(copy);
        s_reply_error(c, m->from, m->req, code, text);
        return;
    }
    json_t *r = wire_ok(m->req);
    json_object_set_new(r, "params", copy);
    json_object_set_new(r, "queued", json_integer(s->queued));
    json_object_set_new(r, "state", json_string(store_study_state_name(s->state)));
    ctl__send(c, m->from, r);
}

/* study_extend {study, trials} */
static void s_study_extend(ctl_t *c, const ctl_msg *m)
{
    const char *name, *code = "internal";
    char text[512];
    long n;
    if (wire_get_str(m->msg, "study", &name, text, sizeof text) ||
        wire_get_long(m->msg, "trials", &n, text, sizeof text)) {
        s_reply_error(c, m->from, m->req, "malformed", text);
        return;
    }
    ctl_study *s = ctl__study_load(c, name, &code, text, sizeof text);
    if (s && !s_may_steer(c, m, s))
        return;
    if (!s || ctl__study_extend(c, s, n, s_who(m->msg), &code, text, sizeof text)) {
        s_reply_error(c, m->from, m->req, code, text);
        return;
    }
    json_t *r = wire_ok(m->req);
    json_object_set_new(r, "trials", json_integer(s->spec->trials));
    json_object_set_new(r, "state", json_string(store_study_state_name(s->state)));
    ctl__send(c, m->from, r);
}

static void s_reply_instruction(ctl_t *c, const ctl_msg *m, long iid)
{
    json_t *r = wire_ok(m->req);
    json_object_set_new(r, "instruction", json_integer(iid));
    ctl__send(c, m->from, r);
}

/* How long a waited steering request waits for the trial: `wait_s`, else
   30 s. */
static double s_wait_s(const json_t *msg)
{
    json_t *w = json_object_get(msg, "wait_s");
    double x = json_is_number(w) ? json_number_value(w) : 30.0;
    return x > 0 && x <= 86400 ? x : 30.0;
}

/* trial set: the values checked against the space (nothing recorded when
   one is refused), then one batch; the reply waits for all of it. */
static void s_trial_set(ctl_t *c, const ctl_msg *m, ctl_trial *t, int wait)
{
    const char *code;
    char err[600];
    json_t *checked = ctl__set_check(t, json_object_get(m->msg, "values"),
                                     json_is_true(json_object_get(m->msg, "force")),
                                     &code, err, sizeof err);
    if (!checked) {
        s_reply_error(c, m->from, m->req, code, err);
        return;
    }
    json_t *guard = json_object_get(m->msg, "guard");
    if (guard && !json_is_false(guard) && !json_is_null(guard)) { /* ctl_guard.c */
        if (ctl__guard_start(c, t, checked, guard, s_who(m->msg), wait ? m->from : NULL,
                             m->req, s_wait_s(m->msg), &code, err, sizeof err) != 0)
            s_reply_error(c, m->from, m->req, code, err);
        else if (!wait)
            ctl__send(c, m->from, wire_ok(m->req));
        json_decref(checked);
        return;
    }
    long iid = ctl__set_send(c, t, checked, s_who(m->msg), wait ? m->from : NULL, m->req,
                             s_wait_s(m->msg));
    json_decref(checked);
    if (iid >= 0 && !wait)
        s_reply_instruction(c, m, iid);
}

static void s_trial_cmd(ctl_t *c, const ctl_msg *m, ctl_trial_cmd cmd)
{
    long id;
    char err[128];
    if (wire_get_long(m->msg, "trial", &id, err, sizeof err)) {
        s_reply_error(c, m->from, m->req, "malformed", err);
        return;
    }
    ctl_trial *t = ctl__trial_by_id(c, id);
    if (!t) {
        snprintf(err, sizeof err, "no trial %ld in a study this controller runs", id);
        s_reply_error(c, m->from, m->req, "unknown_trial", err);
        return;
    }
    if (!s_may_steer(c, m, t->study))
        return;
    if (cmd == TRIAL_CMD_PAUSE && json_is_true(json_object_get(m->msg, "release")))
        cmd = TRIAL_CMD_RELEASE;
    const char *refusal = ctl_trial_cmd_refusal(t, cmd, err, sizeof err);
    if (refusal) {
        s_reply_error(c, m->from, m->req, "bad_state", refusal);
        return;
    }
    int wait = json_is_true(json_object_get(m->msg, "wait"));
    if (ctl__txn(c) != 0)
        return;
    json_t *r;
    long iid;
    switch (cmd) {
    case TRIAL_CMD_RESUME:
        if (t->state == TRIAL_SUSPENDED) {
            ctl__trial_unsuspend(c, t, s_who(m->msg));
            r = wire_ok(m->req);
            json_object_set_new(r, "restarting", json_true());
            char why[200];
            if (ctl__study_waits(c, t->study, t, why, sizeof why))
                json_object_set_new(r, "waiting", json_string(why)); /* queued */
            ctl__send(c, m->from, r);
            return;
        }
        break;
    case TRIAL_CMD_RELEASE:
        iid = ctl__trial_release(c, t, s_who(m->msg));
        if (iid < 0) {
            s_reply_error(c, m->from, m->req, "internal", "cannot record the release");
            return;
        }
        ctl__instr_get(c, iid)->release = 1;
        if (wait) { /* answered once released, refused or ended */
            ctl__instr_wait(c, iid, m->from, m->req, s_wait_s(m->msg));
            return;
        }
        r = wire_ok(m->req);
        json_object_set_new(r, "releasing", json_true());
        json_object_set_new(r, "instruction", json_integer(iid));
        ctl__send(c, m->from, r);
        return;
    case TRIAL_CMD_STOP:
        ctl__trial_stop(c, t, s_who(m->msg), "stopped by a person", 0);
        ctl__send(c, m->from, wire_ok(m->req));
        return;
    case TRIAL_CMD_SET:
        s_trial_set(c, m, t, wait);
        return;
    case TRIAL_CMD_PAUSE:
        break;
    }
    iid = ctl__instruct(c, t, cmd == TRIAL_CMD_PAUSE ? "pause" : "resume", NULL,
                        s_who(m->msg), "by a person", NULL, 0);
    if (iid >= 0 && wait)
        ctl__instr_wait(c, iid, m->from, m->req, s_wait_s(m->msg));
    else if (iid >= 0)
        s_reply_instruction(c, m, iid);
}

static void s_trial_stop(ctl_t *c, const ctl_msg *m)
{
    s_trial_cmd(c, m, TRIAL_CMD_STOP);
}

static void s_trial_pause(ctl_t *c, const ctl_msg *m)
{
    s_trial_cmd(c, m, TRIAL_CMD_PAUSE);
}

static void s_trial_resume(ctl_t *c, const ctl_msg *m)
{
    s_trial_cmd(c, m, TRIAL_CMD_RESUME);
}

static void s_trial_set_msg(ctl_t *c, const ctl_msg *m)
{
    s_trial_cmd(c, m, TRIAL_CMD_SET);
}

/* trial_ask {study} and trial_tell {trial, value|values, state, message}
   (ctl_ask.c) */
static void s_ask_tell(ctl_t *c, const ctl_msg *m, int tell)
{
    const char *code = "internal";
    char err[600];
    json_t *d = tell ? ctl__trial_tell(c, m->who, m->msg, &code, err, sizeof err)
                     : ctl__trial_ask(c, m->who, m->msg, &code, err, sizeof err);
    if (!d) {
        s_reply_error(c, m->from, m->req, code, err);
        return;
    }
    json_t *r = wire_ok(m->req);
    json_object_update(r, d);
    json_decref(d);
    ctl__send(c, m->from, r);
}

static void s_trial_ask(ctl_t *c, const ctl_msg *m)
{
    s_ask_tell(c, m, 0);
}

static void s_trial_tell(ctl_t *c, const ctl_msg *m)
{
    s_ask_tell(c, m, 1);
}

/* trial_fork: a live fork, or with `decide` its decision now
   (ctl_fork.c); a waited fork is answered once decided. */
static void s_trial_fork(ctl_t *c, const ctl_msg *m)
{
    long id;
    char err[600];
    const char *code;
    if (wire_get_long(m->msg, "trial", &id, err, sizeof err)) {
        s_reply_error(c, m->from, m->req, "malformed", err);
        return;
    }
    ctl_trial *t = ctl__trial_by_id(c, id);
    if (!t) {
        snprintf(err, sizeof err, "no trial %ld in a study this controller runs", id);
        s_reply_error(c, m->from, m->req, "unknown_trial", err);
        return;
    }
    if (!s_may_steer(c, m, t->study) || ctl__txn(c) != 0)
        return;
    int answer_now = !json_is_true(json_object_get(m->msg, "wait")) ||
                     json_is_true(json_object_get(m->msg, "decide"));
    json_t *f = ctl__fork_msg(c, t, m->msg, s_who(m->msg), answer_now ? NULL : m->from,
                              m->req, s_wait_s(m->msg), &code, err, sizeof err);
    if (!f) {
        s_reply_error(c, m->from, m->req, code, err);
        return;
    }
    if (answer_now) {
        json_t *ok = wire_ok(m->req);
        json_object_update(ok, f);
        ctl__send(c, m->from, ok);
    }
    json_decref(f);
}

static void s_read(ctl_t *c, const ctl_msg *m)
{
    const char *code;
    char err[300];
    json_t *data = ctl__read(c, m->who, m->msg, &code, err, sizeof err);
    if (!data) {
        s_reply_error(c, m->from, m->req, code, err);
        return;
    }
    json_t *ok = wire_ok(m->req);
    json_object_set_new(ok, "data", data);
    ctl__send(c, m->from, ok);
}

static void s_read_log(ctl_t *c, const ctl_msg *m)
{
    ctl__read_log(c, m->from, m->req, m->msg);
}

static void s_log_data(ctl_t *c, const ctl_msg *m)
{
    ctl__log_data(c, m->disp->name, m->msg);
}

static void s_queue(ctl_t *c, const ctl_msg *m)
{
    json_t *ok = wire_ok(m->req);
    json_t *q = ctl__queue_status(c);
    json_object_update(ok, q);
    json_decref(q);
    ctl__send(c, m->from, ok);
}

/* quota_set: user, slots, gpus and/or max_priority (ctl_queue.c). The
   table row asks for the admin's right. */
static void s_quota_set(ctl_t *c, const ctl_msg *m)
{
    const char *code;
    char err[200];
    json_t *q = ctl__queue_quota_msg(c, m->msg, &code, err, sizeof err);
    if (!q) {
        s_reply_error(c, m->from, m->req, code, err);
        return;
    }
    json_t *ok = wire_ok(m->req);
    json_object_update(ok, q);
    json_decref(q);
    ctl__send(c, m->from, ok);
}

/* disp_release: an admin frees a dispatcher name from the identity it
   is bound to (the table row asks for the admin's right). */
static void s_disp_release(ctl_t *c, const ctl_msg *m)
{
    const char *name;
    char err[128];
    if (wire_get_str(m->msg, "name", &name, err, sizeof err)) {
        s_reply_error(c, m->from, m->req, "malformed", err);
        return;
    }
    char bound[72] = "";
    if (store_dispatcher_owner(c->store, name, bound, sizeof bound) != 0 || !bound[0]) {
        ctl__send(c, m->from,
                  wire_error(m->req, "unknown_dispatcher",
                             "no dispatcher name \"%.64s\" is bound", name));
        return;
    }
    if (ctl__disp_release_name(c, name) != 0) {
        ctl__send(
            c, m->from,
            wire_error(m->req, "bad_state",
                       "dispatcher %.64s is connected or holds trials; stop it first",
                       name));
        return;
    }
    log_info("ctl", "dispatcher name %s released (it was bound to %s)", name, bound);
    ctl__send(c, m->from, wire_ok(m->req));
}

static void s_ping(ctl_t *c, const ctl_msg *m)
{
    json_t *ok = wire_ok(m->req);
    json_object_set_new(ok, "version", json_string(JZ_VERSION));
    ctl__send(c, m->from, ok);
}

/* ---- the table: a view of the schema (common/msg.h) ---- */

/* The handler of each message type the controller receives; the row's
   sender, identity check and action are the schema's. */
typedef void (*ctl_handler)(ctl_t *c, const ctl_msg *m);
static const ctl_handler s_handlers[MSG_COUNT] = {
    /* trial -> controller */
    [MSG_HELLO] = s_hello,
    [MSG_METRICS] = s_metrics,
    [MSG_TRIAL_HEARTBEAT] = s_trial_heartbeat,
    [MSG_INS_ACK] = s_ins_ack,
    [MSG_CHECKPOINT_DONE] = s_checkpoint_done,
    /* dispatcher -> controller */
    [MSG_REGISTER] = s_register,
    [MSG_DISP_HEARTBEAT] = s_disp_heartbeat,
    [MSG_STARTED] = s_started,
    [MSG_EXITED] = s_exited,
    [MSG_LOG_DATA] = s_log_data,
    /* CLI -> controller */
    [MSG_SUBMIT] = s_submit,
    [MSG_STATUS] = s_status,
    [MSG_STUDY_STOP] = s_study_stop,
    [MSG_STUDY_RESUME] = s_study_resume,
    [MSG_STUDY_ENQUEUE] = s_study_enqueue,
    [MSG_STUDY_EXTEND] = s_study_extend,
    [MSG_STUDY_DELETE] = s_study_delete,
    [MSG_STUDY_COPY] = s_study_copy,
    [MSG_TRIAL_STOP] = s_trial_stop,
    [MSG_TRIAL_PAUSE] = s_trial_pause,
    [MSG_TRIAL_RESUME] = s_trial_resume,
    [MSG_TRIAL_SET] = s_trial_set_msg,
    [MSG_TRIAL_FORK] = s_trial_fork,
    [MSG_TRIAL_ASK] = s_trial_ask,
    [MSG_TRIAL_TELL] = s_trial_tell,
    [MSG_READ] = s_read,
    [MSG_READ_LOG] = s_read_log,
    [MSG_PING] = s_ping,
    [MSG_QUEUE] = s_queue,
    [MSG_QUOTA_SET] = s_quota_set,
    [MSG_DISP_RELEASE] = s_disp_release,
};

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
        s_reply_error(c, m->from, m->req, "unauthorized",
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

void ctl__handle(ctl_t *c, const wire_peer *from, const ctl_ident *who, json_t *msg)
{
    const char *type = wire_type(msg);
    json_t *r = json_object_get(msg, "req");
    ctl_ident eff;
    ctl__auth_effective(msg, who, &eff);
    ctl_msg m = {from, msg,  json_is_integer(r) ? (long)json_integer_value(r) : -1,
                 NULL, NULL, &eff};
    const msg_def *def = msg_find(type, MSG_CTL);
    if (!def || !s_handlers[def->type]) {
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
    s_handlers[def->type](c, &m);
    store_set_actor(c->store, NULL);
}
