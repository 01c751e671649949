/*  ctl_instr.c - instructions to trials (see ctl_internal.h).

    An instruction is recorded as an event (its id is the event id),
    queued to the trial when it has spoken, re-sent when the trial speaks
    again, and resolved by the trial's `ins_ack`, or as not applied when
    the trial ends first.

    Restart-from-checkpoint fallback: a `load` (PBT exploit, guard
    rollback) reaches a program only when it polls. When one is not
    acknowledged within the study's load timeout (sched_ops.load_timeout;
    0 = never), the instruction is resolved as not applied, the trial's
    process is killed through its dispatcher (plan RESTART, ctl_trial.h),
    and when it has exited the same trial starts as its next attempt with
    JIZHI_LOAD_CHECKPOINT=path; its params are already the load's new
    generation. Recorded as a `restart_from_checkpoint` event. The
    pending restart lives in memory: a controller restarted in between
    handles the exit as a normal one.
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

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
        if (store_trial_set_params(c->store, t->row.id, t->row.generation + 1,
                                   t->row.parent, t->row.params) == 0)
            t->row.generation++;
    } else if (!strcmp(kind, "pause") && t->state == TRIAL_RUNNING) {
        ctl_trial_move(t, TRIAL_PAUSED);
    } else if (!strcmp(kind, "resume") && t->state == TRIAL_PAUSED) {
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

void ctl__instr_done(ctl_t *c, long id, int applied, const char *detail)
{
    for (size_t i = 0; i < c->ninstrs; i++) {
        ctl_instr *in = &c->instrs[i];
        if (in->id != id)
            continue;
        double latency = util_now() - in->sent;
        if (ctl__txn(c) == 0)
            store_event_resolve(c->store, id, applied, latency, detail);
        if (applied)
            s_applied(c, in);
        if (in->waiter.len) {
            json_t *r =
                applied ? wire_ok(in->waiter_req)
                        : wire_error(in->waiter_req, "refused", "the trial refused: %s",
                                     detail && *detail ? detail : "no reason given");
            if (applied) {
                json_object_set_new(r, "instruction", json_integer(id));
                json_object_set_new(r, "latency_s", json_real(latency));
            }
            ctl__send(c, &in->waiter, r);
        }
        json_decref(in->msg);
        c->instrs[i] = c->instrs[--c->ninstrs];
        return;
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

void ctl__instr_expire(ctl_t *c)
{
    for (size_t i = 0; i < c->ninstrs;) {
        ctl_trial *t = ctl__trial_by_id(c, c->instrs[i].trial_id);
        if (!t || !ctl_trial_active(t)) {
            ctl__instr_done(c, c->instrs[i].id, 0, "the trial has ended");
            continue; /* the slot now holds another instruction */
        }
        i++;
    }
}

void ctl__instr_load_fallback(ctl_t *c, ctl_trial *t, double now)
{
    ctl_study *s = t->study;
    double limit = ctl__study_load_timeout(s);
    if (limit <= 0 || t->plan != PLAN_NONE || !t->disp)
        return;
    for (size_t i = 0; i < c->ninstrs; i++) {
        ctl_instr *in = &c->instrs[i];
        const char *kind = json_string_value(json_object_get(in->msg, "kind"));
        const char *path = json_string_value(json_object_get(in->msg, "path"));
        if (in->trial_id != t->row.id || now - in->sent < limit || !kind ||
            strcmp(kind, "load") || !path || strlen(path) >= sizeof t->load_on_start)
            continue;
        if (ctl__txn(c) != 0)
            return;
        json_t *detail = json_pack("{s:s, s:I, s:O?, s:f}", "path", path, "instruction",
                                   (json_int_t)in->id, "from",
                                   json_object_get(in->msg, "from"), "timeout_s", limit);
        char why[160];
        snprintf(why, sizeof why,
                 "not acknowledged within %g s: restarting the trial from the "
                 "checkpoint",
                 limit);
        ctl__trial_restart_from(c, t, path,
                                "restart from a checkpoint (load not acknowledged)");
        ctl__instr_done(c, in->id, 0, why); /* `in` and `path` are gone after this */
        store_event_add(c->store, util_wall(), s->row.id, t->row.id, "controller",
                        "restart_from_checkpoint", detail, 1);
        json_decref(detail);
        log_info("ctl",
                 "study %s trial %ld: load not acknowledged within %g s; restarting it "
                 "from %s",
                 s->row.name, t->row.id, limit, t->load_on_start);
        return;
    }
}

void ctl__instr_free_all(ctl_t *c)
{
    for (size_t i = 0; i < c->ninstrs; i++)
        json_decref(c->instrs[i].msg);
    free(c->instrs);
    c->instrs = NULL;
    c->ninstrs = c->instr_cap = 0;
}
