/*  ctl_msg_disp.c - the controller's handlers of the dispatchers'
    messages (common/msg.h, docs/PROTOCOL.md "Dispatcher <-> controller"):
    register, disp_heartbeat, started, exited, log_data. ctl__handle
    (ctl_msg.c) has checked the sender's role, its registered name (but for
    `register`) and the schema's fields before any of these runs.
*/
#include "ctl_internal.h"
#include "ctl_msg.h"

#include "../common/exit_how.h"
#include "../common/ident.h"
#include "../common/log.h"
#include "../common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    const char *name = ctl__msg_str(m, "name");
    long slots = ctl__msg_int(m, "slots");
    json_t *gpus = json_object_get(m->msg, "gpus");
    json_t *running = json_object_get(m->msg, "running");
    if (json_array_size(gpus) > 64 || !s_valid_running(running) || !*name ||
        strlen(name) >= 64 || slots < 0) {
        ctl__msg_error(c, m->from, m->req, "malformed",
                       "register needs a name (1 to 63 characters), slots >= 0, at most "
                       "64 gpus and running entries {trial, attempt, tag?}");
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
        ctl__msg_error(c, m->from, m->req, "forbidden",
                       "this dispatcher name belongs to another key or user");
        return;
    }
    if (!known && c->ndisps >= CTL_MAX_DISPS) {
        ctl__msg_error(c, m->from, m->req, "too_many",
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
    long id = ctl__msg_int(m, "trial"), attempt = ctl__msg_int(m, "attempt");
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
        t->row.pid = ctl__msg_int(m, "pid");
        const char *out = ctl__msg_str(m, "stdout");
        const char *errp = ctl__msg_str(m, "stderr");
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
    const char *how = ctl__msg_str(m, "how");
    long code = ctl__msg_int(m, "code"), sig = ctl__msg_int(m, "signal");
    const char *text = ctl__msg_str(m, "message");
    const char *tail = ctl__msg_str(m, "stderr_tail");
    if (ctl__txn(c) != 0)
        return;
    ctl__trial_exited(c, t, how, exit_how_parse(how) == EXIT_SIGNALED ? sig : code, text,
                      tail);
    ctl__send(c, m->from, wire_ok(m->req));
}

static void s_log_data(ctl_t *c, const ctl_msg *m)
{
    ctl__log_data(c, m->disp->name, m->msg);
}

/* The handlers of the dispatcher -> controller messages (ctl_msg.h). */
const ctl_handler ctl__msg_disp_handlers[MSG_COUNT] = {
    [MSG_REGISTER] = s_register, [MSG_DISP_HEARTBEAT] = s_disp_heartbeat,
    [MSG_STARTED] = s_started,   [MSG_EXITED] = s_exited,
    [MSG_LOG_DATA] = s_log_data,
};
