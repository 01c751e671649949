/*  ctl_instr.c - instructions to trials (see ctl_internal.h).

    An instruction is recorded as an event (its id is the event id),
    queued to the trial when it has spoken, re-sent when the trial speaks
    again, and resolved by the trial's `ins_ack`, or as not applied when
    the trial ends first. A stop is the exception: a trial that does not
    take it (one that reports with `jizhi report` closes before it polls)
    is killed at the end of the stop's grace, so the stop is resolved when
    the trial ends, as carried out, saying how it ended (by that kill, by
    its own exit, lost, or told) and what the trial said. An asked
    trial's stop that its study's resume withdraws is resolved as not
    applied. The table is in memory only: a controller that starts
    resolves the instruction events left unresolved as not applied
    (ctl__load); a trial that took one all the same and acknowledges it
    to the new controller has its event resolved again as it says
    (ctl__instr_ack).

    Restart-from-checkpoint fallback: a `load` (PBT exploit, guard
    rollback) reaches a program only when it polls. When one is not
    acknowledged within the study's load timeout (sched_ops.load_timeout;
    0 = never), the instruction is resolved as not applied, the trial's
    process is killed through its dispatcher (plan RESTART, ctl_trial.h),
    and when it has exited the same trial starts as its next attempt with
    JIZHI_LOAD_CHECKPOINT=path; its params are already the load's new
    generation. Recorded as a `restart_from_checkpoint` event. The
    pending restart lives in memory: a controller restarted in between
    handles the exit as a normal one. (The fallback, ctl__instr_load_fallback,
    is in ctl_trial.c: it restarts the trial, and a trial's file sits above
    this one.)

    A person's steering: `trial set` values are checked against the space
    before anything is recorded (ctl__set_check) and sent as one batch,
    one params generation once applied. A waiting CLI or web request is
    answered when the trial acknowledges, or `not_acknowledged` after its
    wait (the instruction stays outstanding), saying what the controller
    knows: whether it forwarded it and when the trial last spoke. A waited
    `pause --release` is answered once the trial has exited suspended
    (`released`), refused to checkpoint, or ended.
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/text.h"
#include "../common/util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long ctl__instruct(ctl_t *c, ctl_trial *t, const char *kind, const json_t *args,
                   const char *who, const char *reason, const wire_peer *waiter,
                   long waiter_req)
{
    if (ctl__txn(c) != 0)
        return -1;
    json_t *detail =
        json_pack("{s:s, s:s}", "kind", kind, "reason", reason ? reason : "");
    if (args)
        json_object_update(detail, (json_t *)args);
    long id = store_event_add(c->store, util_wall(), t->study->row.id, t->row.id, who,
                              "instruction", detail, -1);
    json_decref(detail);
    if (id < 0) {
        log_error("ctl", "cannot record an instruction: %s", store_errmsg(c->store));
        return -1;
    }
    json_t *msg = json_pack("{s:s, s:I, s:s}", "type", "instruction", "id",
                            (json_int_t)id, "kind", kind);
    if (args)
        json_object_update(msg, (json_t *)args);
    if (c->ninstrs == c->instr_cap) {
        c->instr_cap = c->instr_cap ? c->instr_cap * 2 : 16;
        c->instrs = util_xrealloc(c->instrs, c->instr_cap * sizeof *c->instrs);
    }
    ctl_instr *in = &c->instrs[c->ninstrs++];
    memset(in, 0, sizeof *in);
    in->id = id;
    in->trial_id = t->row.id;
    in->msg = msg;
    in->sent = util_now();
    if (waiter) {
        in->waiter = *waiter;
        in->waiter_req = waiter_req;
    }
    if (t->peer.len)
        ctl__send(c, &t->peer, json_incref(msg));
    return id;
}

/* What an applied instruction changes in the trial's persisted state: a
   `set` is a new params generation, `pause`/`resume` its state. */
static void s_applied(ctl_t *c, const ctl_instr *in)
{
    ctl_trial *t = ctl__trial_by_id(c, in->trial_id);
    const char *kind = json_string_value(json_object_get(in->msg, "kind"));
    if (!t || !kind || ctl__txn(c) != 0)
        return;
    if (!strcmp(kind, "set")) {
        const char *name = json_string_value(json_object_get(in->msg, "name"));
        json_t *value = json_object_get(in->msg, "value");
        if (!name || !value)
            return;
        json_object_set(t->row.params, name, value);
        /* the later values of a batch join the generation its first made */
        int same =
            in->batch && t->set_batch == in->batch && t->set_gen == t->row.generation;
        long gen = t->row.generation + (same ? 0 : 1);
        if (store_trial_set_params(c->store, t->row.id, gen, t->row.parent,
                                   t->row.params) == 0) {
            t->row.generation = gen;
            t->set_batch = in->batch;
            t->set_gen = gen;
        }
    } else if (!strcmp(kind, "pause") && t->row.state == TRIAL_RUNNING) {
        ctl_trial_move(t, TRIAL_PAUSED);
    } else if (!strcmp(kind, "resume") && t->row.state == TRIAL_PAUSED) {
        ctl_trial_move(t, TRIAL_RUNNING);
    } else {
        return;
    }
    ctl__trial_save(c, t);
}

long ctl__instr_trial(const ctl_t *c, long id)
{
    for (size_t i = 0; i < c->ninstrs; i++)
        if (c->instrs[i].id == id)
            return c->instrs[i].trial_id;
    return -1;
}

ctl_instr *ctl__instr_get(ctl_t *c, long id)
{
    for (size_t i = 0; i < c->ninstrs; i++)
        if (c->instrs[i].id == id)
            return &c->instrs[i];
    return NULL;
}

void ctl__instr_wait(ctl_t *c, long id, const wire_peer *from, long req, double wait_s)
{
    ctl_instr *in = ctl__instr_get(c, id);
    if (!in || !from)
        return;
    in->waiter = *from;
    in->waiter_req = req;
    in->wait_s = wait_s;
    in->wait_until = wait_s > 0 ? util_now() + wait_s : 0;
}

/* What the controller knows of t's side, for a waiter that timed out:
   whether it holds or forwarded instruction `in`, and when t last spoke. */
static void s_trial_side(const ctl_trial *t, const ctl_instr *in, double now, char *buf,
                         size_t size)
{
    if (!t || !t->peer.len || t->spoke_wall <= 0) {
        snprintf(buf, size,
                 "the controller holds it (instruction %ld) for a trial that has never "
                 "spoken to it (a program that does not use the jizhi helper takes no "
                 "live changes); it is sent when the trial connects",
                 in->id);
        return;
    }
    double wall = util_wall(), sent_wall = wall - (now - in->sent);
    char at[TEXT_TIME_MAX];
    text_time(t->spoke_wall, at);
    if (t->spoke_wall >= sent_wall)
        snprintf(
            buf, size,
            "the controller forwarded it (instruction %ld) and the trial's helper is "
            "connected (it last spoke at %s, %.1f s ago), so the program has not "
            "polled for instructions since (jz_poll, Trial.poll); it stays pending "
            "until the trial polls or ends",
            in->id, at, wall - t->spoke_wall);
    else
        snprintf(
            buf, size,
            "the controller forwarded it (instruction %ld); the trial last spoke to "
            "the controller at %s (%.1f s ago) and not since; it stays pending until "
            "the trial polls or ends",
            in->id, at, wall - t->spoke_wall);
}

/* Answers in's waiter `not_acknowledged`; the instruction stays. */
static void s_not_acked(ctl_t *c, ctl_instr *in, double now)
{
    ctl_trial *t = ctl__trial_by_id(c, in->trial_id);
    const char *kind = json_string_value(json_object_get(in->msg, "kind"));
    char side[600];
    s_trial_side(t, in, now, side, sizeof side);
    ctl__send(c, &in->waiter,
              wire_error(in->waiter_req, "not_acknowledged",
                         "trial %ld has not acknowledged the %s within %g s (timed out): "
                         "%s",
                         in->trial_id,
                         in->release ? "checkpoint of pause --release"
                         : kind      ? kind
                                     : "instruction",
                         in->wait_s, side));
    in->waiter.len = 0;
    in->wait_until = 0;
}

/* A refused value of a batch: noted on the batch's waited instruction. */
static void s_batch_refused(ctl_t *c, const ctl_instr *in, const char *why)
{
    const char *name = json_string_value(json_object_get(in->msg, "name"));
    for (size_t i = 0; i < c->ninstrs; i++) {
        ctl_instr *w = &c->instrs[i];
        if (w->batch != in->batch || !w->waiter.len)
            continue;
        size_t n = strlen(w->refused);
        snprintf(w->refused + n, sizeof w->refused - n, "%s%s (%s)", n ? "; " : "",
                 name ? name : "?", why);
        w->nrefused++;
        return;
    }
}

/* The checkpoint of a person's pause --release, resolved. */
static void s_release_resolved(ctl_t *c, ctl_instr *in, int applied, const char *why)
{
    ctl_trial *t = ctl__trial_by_id(c, in->trial_id);
    if (applied) { /* the trial is asked to exit now: answered when it has */
        if (!in->waiter.len)
            return;
        if (c->nreleases == c->release_cap) {
            c->release_cap = c->release_cap ? c->release_cap * 2 : 4;
            c->releases =
                util_xrealloc(c->releases, c->release_cap * sizeof *c->releases);
        }
        c->releases[c->nreleases++] = (ctl_release){
            in->trial_id, in->waiter, in->waiter_req, in->wait_until, in->wait_s};
        return;
    }
    /* no checkpoint, no release: the trial goes on as it was (a preempted
       one keeps its plan, for the queue's fallback) */
    int alive = t && ctl_trial_active(t);
    if (alive && t->plan == PLAN_RELEASE_CHECKPOINT && !t->row.preempted)
        ctl_trial_plan_to(t, PLAN_NONE);
    if (in->waiter.len)
        ctl__send(
            c, &in->waiter,
            wire_error(in->waiter_req, "refused",
                       "trial %ld was not released: it refused to checkpoint (%s)%s",
                       in->trial_id, why,
                       alive ? "; it keeps running and keeps its slot" : ""));
}

/* Answers the waiter of a resolved instruction (not a release). */
static void s_answer(ctl_t *c, const ctl_instr *in, int applied, const char *why,
                     double latency)
{
    json_t *r;
    if (in->nrefused) /* a batch: what the trial refused of it */
        r = wire_error(in->waiter_req, "refused", "the trial refused %s%s", in->refused,
                       in->nrefused < in->nbatch ? "; it applied the other values" : "");
    else if (!applied)
        r = wire_error(in->waiter_req, "refused", "the trial refused: %s", why);
    else {
        r = wire_ok(in->waiter_req);
        json_object_set_new(r, "instruction", json_integer(in->id));
        json_object_set_new(r, "latency_s", json_real(latency));
    }
    ctl__send(c, &in->waiter, r);
}

/* 1 when `in` is a stop instruction. */
static int s_is_stop(const ctl_instr *in)
{
    const char *kind = json_string_value(json_object_get(in->msg, "kind"));
    return kind && !strcmp(kind, "stop");
}

void ctl__instr_done(ctl_t *c, long id, int applied, const char *detail)
{
    ctl_instr *in = ctl__instr_get(c, id);
    if (!in)
        return;
    ctl_trial *t = ctl__trial_by_id(c, in->trial_id);
    if (!applied && s_is_stop(in) && t && ctl_trial_active(t) &&
        (t->plan == PLAN_STOP || t->plan == PLAN_RELEASE)) {
        /* not taken, yet carried out when the trial ends */
        snprintf(in->untaken, sizeof in->untaken, "%s",
                 detail && *detail ? detail : "no reason given");
        return;
    }
    double latency = util_now() - in->sent;
    const char *why = detail && *detail ? detail : "no reason given";
    if (ctl__txn(c) == 0)
        store_event_resolve(c->store, id, applied, latency, detail);
    if (applied)
        s_applied(c, in);
    else if (in->batch)
        s_batch_refused(c, in, why);
    if (in->release)
        s_release_resolved(c, in, applied, why);
    else if (in->waiter.len)
        s_answer(c, in, applied, why, latency);
    long trial_id = in->trial_id;
    json_decref(in->msg);
    *in = c->instrs[--c->ninstrs];
    /* last: a guarded change or fork may send the next instruction */
    if (c->on.instr_done)
        c->on.instr_done(c, id, trial_id, applied, why);
}

int ctl__instr_ack(ctl_t *c, ctl_trial *t, long id, int applied, const char *detail)
{
    if (ctl__instr_get(c, id)) {
        ctl__instr_done(c, id, applied, detail);
        return 0;
    }
    /* lost with the last controller: the trial took it all the same */
    json_t *ev = ctl__txn(c) == 0 ? store_event_reresolve(c->store, id, t->row.id,
                                                          applied, util_wall(), detail)
                                  : NULL;
    if (!ev)
        return 0;
    log_info("ctl",
             "trial %ld acknowledged instruction %ld, left by the last controller, "
             "as %s: resolved again",
             t->row.id, id, applied ? "applied" : "refused");
    if (applied)
        s_applied(c, &(ctl_instr){.id = id, .trial_id = t->row.id, .msg = ev});
    const char *kind = json_string_value(json_object_get(ev, "kind"));
    int stop = applied && kind && !strcmp(kind, "stop");
    json_decref(ev);
    return stop;
}

void ctl__instr_stops_done(ctl_t *c, ctl_trial *t, int applied, const char *how)
{
    for (size_t i = 0; i < c->ninstrs;) {
        ctl_instr *in = &c->instrs[i];
        if (in->trial_id != t->row.id || !s_is_stop(in)) {
            i++;
            continue;
        }
        char result[400];
        snprintf(result, sizeof result, "%s%s%s", how,
                 in->untaken[0] ? "; the trial did not take it: " : "", in->untaken);
        ctl__instr_done(c, in->id, applied, result); /* the slot now holds another one */
    }
}

void ctl__instr_resend(ctl_t *c, ctl_trial *t)
{
    double now = util_now();
    for (size_t i = 0; i < c->ninstrs; i++)
        if (c->instrs[i].trial_id == t->row.id && now - c->instrs[i].sent > 0.5 &&
            t->peer.len)
            ctl__send(c, &t->peer, json_incref(c->instrs[i].msg));
}

/* The answer to a waited release past its checkpoint, or NULL while it
   is still on its way. */
static json_t *s_release_answer(ctl_t *c, const ctl_release *r, double now)
{
    ctl_trial *t = ctl__trial_by_id(c, r->trial_id);
    if (t && t->row.state == TRIAL_SUSPENDED) {
        json_t *ok = wire_ok(r->waiter_req);
        json_object_set_new(ok, "released", json_true());
        json_object_set_new(ok, "checkpoint", json_string(t->row.checkpoint));
        json_object_set_new(ok, "checkpoint_step", json_integer(t->row.checkpoint_step));
        return ok;
    }
    if (!t || !ctl_trial_active(t))
        return wire_error(r->waiter_req, "bad_state",
                          "trial %ld was not released: it ended (%s%s%s) first",
                          r->trial_id, t ? store_trial_state_name(t->row.state) : "gone",
                          t && t->row.reason[0] ? ": " : "", t ? t->row.reason : "");
    if (t->plan == PLAN_NONE || t->plan == PLAN_RESTART)
        return wire_error(r->waiter_req, "refused",
                          "trial %ld was not released: it saved its checkpoint but did "
                          "not exit; it keeps running",
                          r->trial_id);
    if (r->until > 0 && now > r->until)
        return wire_error(r->waiter_req, "not_acknowledged",
                          "trial %ld saved its checkpoint (step %ld) but has not exited "
                          "within %g s (timed out); it was asked to stop, is killed if "
                          "it does not, and is then suspended (`jizhi trial show %ld`)",
                          r->trial_id, t->row.checkpoint_step, r->wait_s, r->trial_id);
    return NULL;
}

void ctl__instr_expire(ctl_t *c)
{
    double now = util_now();
    for (size_t i = 0; i < c->ninstrs;) {
        ctl_trial *t = ctl__trial_by_id(c, c->instrs[i].trial_id);
        if (!t || !ctl_trial_active(t)) {
            ctl__instr_done(c, c->instrs[i].id, 0, "the trial has ended");
            continue; /* the slot now holds another instruction */
        }
        if (c->instrs[i].waiter.len && c->instrs[i].wait_until > 0 &&
            now > c->instrs[i].wait_until)
            s_not_acked(c, &c->instrs[i], now);
        i++;
    }
    for (size_t i = 0; i < c->nreleases;) {
        json_t *answer = s_release_answer(c, &c->releases[i], now);
        if (!answer) {
            i++;
            continue;
        }
        ctl__send(c, &c->releases[i].waiter, answer);
        c->releases[i] = c->releases[--c->nreleases];
    }
}

/* ---- trial set: values checked against the space ---- */

/* The number a text reads as (a whole one as an integer), or NULL. */
static json_t *s_number_of(const char *text)
{
    char *end;
    errno = 0;
    long long i = strtoll(text, &end, 10);
    if (*text && !*end && !errno)
        return json_integer(i);
    double d = strtod(text, &end);
    return *text && !*end && isfinite(d) ? json_real(d) : NULL;
}

/* 1 when the value v means the choice value x: the same JSON, the same
   number, or a number and the text that reads as it. */
static int s_same(const json_t *v, const json_t *x)
{
    if (json_equal((json_t *)v, (json_t *)x))
        return 1;
    if (json_is_number(v) && json_is_number(x))
        return json_number_value(v) == json_number_value(x);
    const json_t *num = json_is_number(v) ? v : x, *str = json_is_number(v) ? x : v;
    if (!json_is_number(num) || !json_is_string(str))
        return 0;
    json_t *n = s_number_of(json_string_value(str));
    int same = n && json_number_value(n) == json_number_value(num);
    json_decref(n);
    return same;
}

/* The space of p in words, for messages. */
static void s_space_text(const spec_param *p, char *buf, size_t size)
{
    if (p->type == SPEC_CHOICE) {
        char *list = text_json_dumps(p->values, JSON_COMPACT);
        snprintf(buf, size, "one of %.200s", list ? list : "its values");
        free(list);
        return;
    }
    char lo[TEXT_DOUBLE_MAX], hi[TEXT_DOUBLE_MAX], st[TEXT_DOUBLE_MAX + 16] = "";
    if (p->step > 0)
        snprintf(st, sizeof st, " in steps of %s", text_double(p->step, lo));
    snprintf(buf, size, "%s from %s to %s%s%s",
             p->type == SPEC_INT ? "a whole number" : "a number", text_double(p->low, lo),
             text_double(p->high, hi), st, p->log ? ", log scale" : "");
}

/* v as tuned parameter p takes it: 0 in the space, 1 outside it (*out set
   either way, a new reference), -1 a wrong type (*out NULL). */
static int s_param_value(const spec_param *p, const json_t *v, json_t **out)
{
    *out = NULL;
    if (p->type == SPEC_CHOICE) {
        int numbers = 1, texts = 1;
        for (size_t i = 0; i < p->nvalues; i++) {
            json_t *x = json_array_get(p->values, i);
            if (s_same(v, x)) {
                *out = json_incref(x);
                return 0;
            }
            numbers &= json_is_number(x);
            texts &= json_is_string(x);
        }
        json_t *n = json_is_string(v) ? s_number_of(json_string_value(v)) : NULL;
        if ((numbers && json_is_string(v) && !n) || (texts && json_is_number(v))) {
            json_decref(n);
            return -1; /* a text where every value is a number, or the reverse */
        }
        *out = n ? n : json_incref((json_t *)v);
        return 1;
    }
    json_t *x =
        json_is_string(v) ? s_number_of(json_string_value(v)) : json_incref((json_t *)v);
    if (!x || !isfinite(json_number_value(x))) {
        json_decref(x);
        return -1;
    }
    double d = json_number_value(x);
    if (p->type == SPEC_INT && json_is_real(x)) {
        json_decref(x);
        if (d != floor(d) || fabs(d) > 9007199254740992.0)
            return -1;
        x = json_integer((json_int_t)d);
    } else if (p->type == SPEC_FLOAT && json_is_integer(x)) {
        json_decref(x);
        x = json_real(d);
    }
    *out = x;
    return spec_param_legal(p, x) ? 0 : 1; /* its range, and its step if any */
}

json_t *ctl__set_check(const ctl_trial *t, const json_t *values, int force,
                       const char **code, char *err, size_t size)
{
    const spec_t *spec = t->study->spec;
    if (!json_is_object(values) || json_object_size(values) == 0) {
        *code = "malformed";
        snprintf(err, size, "field 'values': expected a non-empty object");
        return NULL;
    }
    json_t *checked = json_object();
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)values, key, v)
    {
        if (!spec_valid_name(key) || !(json_is_number(v) || json_is_string(v))) {
            *code = "malformed";
            snprintf(err, size, "values.%.60s: expected a name and a number or string",
                     key);
            json_decref(checked);
            return NULL;
        }
        int k = spec_param_index(spec, key);
        if (k < 0) { /* not tuned: the program's ack decides */
            json_object_set(checked, key, v);
            continue;
        }
        const spec_param *p = &spec->params[k];
        json_t *x;
        int in_space = s_param_value(p, v, &x);
        if (in_space != 0 && (in_space < 0 || !force)) {
            char space[300], *given = text_json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            s_space_text(p, space, sizeof space);
            if (in_space < 0) {
                *code = "bad_value";
                snprintf(err, size,
                         "%s: expected %s (space.%s), got %.100s; nothing was sent", key,
                         space, key, given ? given : "?");
            } else {
                *code = "out_of_space";
                snprintf(err, size,
                         "%s=%.100s is outside the space (space.%s: %s); nothing was "
                         "sent: --force (the API's \"force\": true) sends it anyway",
                         key, given ? given : "?", key, space);
            }
            free(given);
            json_decref(x);
            json_decref(checked);
            return NULL;
        }
        json_object_set_new(checked, key, x);
    }
    return checked;
}

long ctl__set_send(ctl_t *c, ctl_trial *t, const json_t *values, const char *who,
                   const wire_peer *from, long req, double wait_s)
{
    size_t n = json_object_size(values);
    long batch = 0, iid = -1;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)values, key, v)
    {
        json_t *args = json_pack("{s:s, s:O}", "name", key, "value", v);
        iid = ctl__instruct(c, t, "set", args, who, "set by a person", NULL, 0);
        json_decref(args);
        if (iid < 0)
            return -1;
        if (n > 1) {
            ctl_instr *in = ctl__instr_get(c, iid);
            in->batch = batch ? batch : (batch = iid);
            in->nbatch = (int)n;
        }
    }
    ctl__instr_wait(c, iid, from, req, wait_s);
    return iid;
}

void ctl__instr_free_all(ctl_t *c)
{
    for (size_t i = 0; i < c->ninstrs; i++)
        json_decref(c->instrs[i].msg);
    free(c->instrs);
    c->instrs = NULL;
    c->ninstrs = c->instr_cap = 0;
    free(c->releases);
    c->releases = NULL;
    c->nreleases = c->release_cap = 0;
}
