/*  ctl_msg_cli.c - the controller's handlers of the requests of the CLI
    and the web server (common/msg.h, docs/PROTOCOL.md "CLI <-> controller"):
    studies, trials, reads, the queue and quotas, ping. ctl__handle
    (ctl_msg.c) has checked the sender's role and the schema's fields
    before any of these runs; whether the sender may steer the study it
    names (its owner or an admin) is checked here (s_may_steer).
*/
#include "ctl_internal.h"
#include "ctl_msg.h"

#include "../common/ident.h"
#include "../common/log.h"
#include "../common/util.h"
#include "jizhi.h" /* JZ_VERSION */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- CLI ---- */

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

static ctl_study *s_study_arg(ctl_t *c, const ctl_msg *m)
{
    const char *name = ctl__msg_str(m, "study");
    ctl_study *s = ctl__study_by_name(c, name);
    if (!s) {
        char text[200];
        snprintf(text, sizeof text, "no study named \"%s\" is loaded in this controller",
                 name);
        ctl__msg_error(c, m->from, m->req, "unknown_study", text);
    }
    return s;
}

static void s_submit(ctl_t *c, const ctl_msg *m)
{
    json_t *spec = json_object_get(m->msg, "spec");
    ctl_study *s = NULL;
    int resumed, finished;
    const char *code = "internal";
    char text[512] = "";
    if (ctl__auth_submit_owner(c, m->who, spec, text, sizeof text) != 0 ||
        ctl__queue_check_priority(c, m->who, spec, text, sizeof text) != 0) {
        ctl__msg_error(c, m->from, m->req, "forbidden", text);
        return;
    }
    if (ctl__submit(c, spec, &s, &resumed, &finished, &code, text, sizeof text) != 0) {
        ctl__msg_error(c, m->from, m->req, code, text);
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
    if (s->row.state == STUDY_FINISHED) {
        ctl__msg_error(c, m->from, m->req, "bad_state", "the study has finished");
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

/* Answers m: ok with d's fields (d, owned, is released), or when d is NULL the
   error `code` with text err. */
static void s_reply(ctl_t *c, const ctl_msg *m, json_t *d, const char *code,
                    const char *err)
{
    if (!d) {
        ctl__msg_error(c, m->from, m->req, code, err);
        return;
    }
    json_t *r = wire_ok(m->req);
    json_object_update(r, d);
    json_decref(d);
    ctl__send(c, m->from, r);
}

/* study_delete {study} and study_copy {study, name} (ctl_study_ops.c) */
static void s_study_delete(ctl_t *c, const ctl_msg *m)
{
    const char *name = ctl__msg_str(m, "study"), *code = "internal";
    char err[600];
    json_t *d = ctl__study_delete(c, m->who, name, s_who(m->msg), &code, err, sizeof err);
    s_reply(c, m, d, code, err);
}

static void s_study_copy(ctl_t *c, const ctl_msg *m)
{
    const char *name = ctl__msg_str(m, "study"), *to = ctl__msg_str(m, "name");
    const char *code = "internal";
    char err[600];
    json_t *d = ctl__study_copy(c, m->who, name, to, &code, err, sizeof err);
    s_reply(c, m, d, code, err);
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
    const char *name = ctl__msg_str(m, "study"), *code = "internal";
    char text[512];
    json_t *params = json_object_get(m->msg, "params");
    ctl_study *s = ctl__study_load(c, name, &code, text, sizeof text);
    if (s && !s_may_steer(c, m, s))
        return;
    json_t *copy = json_deep_copy(params);
    if (!s || ctl__study_enqueue(c, s, copy, s_who(m->msg), &code, text, sizeof text)) {
        json_decref(copy);
        ctl__msg_error(c, m->from, m->req, code, text);
        return;
    }
    json_t *r = wire_ok(m->req);
    json_object_set_new(r, "params", copy);
    json_object_set_new(r, "queued", json_integer(s->queued));
    json_object_set_new(r, "state", json_string(store_study_state_name(s->row.state)));
    ctl__send(c, m->from, r);
}

/* study_extend {study, trials} */
static void s_study_extend(ctl_t *c, const ctl_msg *m)
{
    const char *name = ctl__msg_str(m, "study"), *code = "internal";
    char text[512];
    long n = ctl__msg_int(m, "trials");
    ctl_study *s = ctl__study_load(c, name, &code, text, sizeof text);
    if (s && !s_may_steer(c, m, s))
        return;
    if (!s || ctl__study_extend(c, s, n, s_who(m->msg), &code, text, sizeof text)) {
        ctl__msg_error(c, m->from, m->req, code, text);
        return;
    }
    json_t *r = wire_ok(m->req);
    json_object_set_new(r, "trials", json_integer(s->spec->trials));
    json_object_set_new(r, "state", json_string(store_study_state_name(s->row.state)));
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
        ctl__msg_error(c, m->from, m->req, code, err);
        return;
    }
    json_t *guard = json_object_get(m->msg, "guard");
    if (guard && !json_is_false(guard) && !json_is_null(guard)) { /* ctl_guard.c */
        if (ctl__guard_start(c, t, checked, guard, s_who(m->msg), wait ? m->from : NULL,
                             m->req, s_wait_s(m->msg), &code, err, sizeof err) != 0)
            ctl__msg_error(c, m->from, m->req, code, err);
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
    long id = ctl__msg_int(m, "trial");
    char err[128];
    ctl_trial *t = ctl__trial_by_id(c, id);
    if (!t) {
        snprintf(err, sizeof err, "no trial %ld in a study this controller runs", id);
        ctl__msg_error(c, m->from, m->req, "unknown_trial", err);
        return;
    }
    if (!s_may_steer(c, m, t->study))
        return;
    if (cmd == TRIAL_CMD_PAUSE && json_is_true(json_object_get(m->msg, "release")))
        cmd = TRIAL_CMD_RELEASE;
    const char *refusal = ctl_trial_cmd_refusal(t, cmd, err, sizeof err);
    if (refusal) {
        ctl__msg_error(c, m->from, m->req, "bad_state", refusal);
        return;
    }
    int wait = json_is_true(json_object_get(m->msg, "wait"));
    if (ctl__txn(c) != 0)
        return;
    json_t *r;
    long iid;
    switch (cmd) {
    case TRIAL_CMD_RESUME:
        if (t->row.state == TRIAL_SUSPENDED) {
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
            ctl__msg_error(c, m->from, m->req, "internal", "cannot record the release");
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
    s_reply(c, m, d, code, err);
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
        ctl__msg_error(c, m->from, m->req, "malformed", err);
        return;
    }
    ctl_trial *t = ctl__trial_by_id(c, id);
    if (!t) {
        snprintf(err, sizeof err, "no trial %ld in a study this controller runs", id);
        ctl__msg_error(c, m->from, m->req, "unknown_trial", err);
        return;
    }
    if (!s_may_steer(c, m, t->study) || ctl__txn(c) != 0)
        return;
    int answer_now = !json_is_true(json_object_get(m->msg, "wait")) ||
                     json_is_true(json_object_get(m->msg, "decide"));
    json_t *f = ctl__fork_msg(c, t, m->msg, s_who(m->msg), answer_now ? NULL : m->from,
                              m->req, s_wait_s(m->msg), &code, err, sizeof err);
    if (!f) {
        ctl__msg_error(c, m->from, m->req, code, err);
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
        ctl__msg_error(c, m->from, m->req, code, err);
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
        ctl__msg_error(c, m->from, m->req, code, err);
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
    const char *name = ctl__msg_str(m, "name");
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

/* The handlers of the CLI -> controller messages (ctl_msg.h). */
const ctl_handler ctl__msg_cli_handlers[MSG_COUNT] = {
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
