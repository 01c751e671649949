/*  ctl.c - the controller object and its event loop (see ctl.h).

    Each iteration: poll, receive up to a burst of messages and apply them
    (ctl_msg.c) inside one transaction, run the periodic work (ctl__tick),
    commit, then flush the outbox. Nothing leaves before the commit, so an
    acknowledgement always means "persisted".
*/
#include "ctl_internal.h"

#include "../common/log.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define BURST 2000 /* messages applied per transaction at most */

int ctl__txn(ctl_t *c)
{
    if (c->in_txn)
        return 0;
    if (store_begin(c->store) != 0) {
        log_error("ctl", "cannot begin a transaction: %s", store_errmsg(c->store));
        return -1;
    }
    c->in_txn = 1;
    return 0;
}

void ctl__send(ctl_t *c, const wire_peer *to, json_t *msg)
{
    if (!msg)
        return;
    if (c->nout == c->out_cap) {
        c->out_cap = c->out_cap ? c->out_cap * 2 : 64;
        c->outbox = realloc(c->outbox, c->out_cap * sizeof *c->outbox);
    }
    c->outbox[c->nout].to = *to;
    c->outbox[c->nout].msg = msg;
    c->nout++;
}

/* Commits the iteration, then sends what it produced. On a failed commit
   nothing is sent: peers resend what was not acknowledged. */
static void s_commit_and_flush(ctl_t *c)
{
    int ok = 1;
    if (c->in_txn) {
        if (store_commit(c->store) != 0) {
            log_error("ctl", "commit failed, dropping this iteration's replies: %s",
                      store_errmsg(c->store));
            store_rollback(c->store);
            ok = 0;
        }
        c->in_txn = 0;
    }
    for (size_t i = 0; i < c->nout; i++) {
        if (ok)
            wire_send(c->router, &c->outbox[i].to, c->outbox[i].msg, 1);
        else
            json_decref(c->outbox[i].msg);
    }
    c->nout = 0;
}

ctl_study *ctl__study_by_name(ctl_t *c, const char *name)
{
    for (size_t i = 0; i < c->nstudies; i++)
        if (strcmp(c->studies[i]->row.name, name) == 0)
            return c->studies[i];
    return NULL;
}

ctl_trial *ctl__trial_by_id(ctl_t *c, long id)
{
    for (size_t i = 0; i < c->nstudies; i++) {
        ctl_study *s = c->studies[i];
        for (size_t k = 0; k < s->ntrials; k++)
            if (s->trials[k]->row.id == id)
                return s->trials[k];
    }
    return NULL;
}

ctl_disp *ctl__disp_by_name(ctl_t *c, const char *name)
{
    for (size_t i = 0; i < c->ndisps; i++)
        if (strcmp(c->disps[i]->name, name) == 0)
            return c->disps[i];
    return NULL;
}

int ctl__save_trial(ctl_t *c, ctl_trial *t)
{
    if (ctl__txn(c) != 0 || store_trial_save(c->store, &t->row) != 0) {
        log_error("ctl", "cannot save trial %ld: %s", t->row.id, store_errmsg(c->store));
        return -1;
    }
    return 0;
}

/* ---- instructions ---- */

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
    long id = store_event_add(c->store, wire_wall(), t->study->row.id, t->row.id, who,
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
        c->instrs = realloc(c->instrs, c->instr_cap * sizeof *c->instrs);
    }
    ctl_instr *in = &c->instrs[c->ninstrs++];
    memset(in, 0, sizeof *in);
    in->id = id;
    in->trial_id = t->row.id;
    in->msg = msg;
    in->sent = wire_now();
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
static void s_instr_applied(ctl_t *c, const ctl_instr *in)
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
    } else if (!strcmp(kind, "pause") && !strcmp(t->row.state, "running")) {
        snprintf(t->row.state, sizeof t->row.state, "paused");
    } else if (!strcmp(kind, "resume") && !strcmp(t->row.state, "paused")) {
        snprintf(t->row.state, sizeof t->row.state, "running");
    } else {
        return;
    }
    ctl__save_trial(c, t);
}

void ctl__instr_done(ctl_t *c, long id, int applied, const char *detail)
{
    for (size_t i = 0; i < c->ninstrs; i++) {
        ctl_instr *in = &c->instrs[i];
        if (in->id != id)
            continue;
        double latency = wire_now() - in->sent;
        if (ctl__txn(c) == 0)
            store_event_resolve(c->store, id, applied, latency, detail);
        if (applied)
            s_instr_applied(c, in);
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
    double now = wire_now();
    for (size_t i = 0; i < c->ninstrs; i++)
        if (c->instrs[i].trial_id == t->row.id && now - c->instrs[i].sent > 0.5 &&
            t->peer.len)
            ctl__send(c, &t->peer, json_incref(c->instrs[i].msg));
}

/* Instructions of ended trials can never be applied. */
static void s_instr_expire(ctl_t *c)
{
    for (size_t i = 0; i < c->ninstrs;) {
        ctl_trial *t = ctl__trial_by_id(c, c->instrs[i].trial_id);
        if (!t || !ctl__trial_active(t)) {
            ctl__instr_done(c, c->instrs[i].id, 0, "the trial has ended");
            continue; /* the slot now holds another instruction */
        }
        i++;
    }
}

/* ---- object ---- */

const char *ctl_endpoint(const ctl_t *c)
{
    return c->endpoint;
}

static int s_bind(ctl_t *c, const char *bind, char *err, size_t errsize)
{
    c->router = zmq_socket(c->zctx, ZMQ_ROUTER);
    wire_socket_setup(c->router);
    int on = 1;
    zmq_setsockopt(c->router, ZMQ_ROUTER_HANDOVER, &on, sizeof on);
    if (zmq_bind(c->router, bind) != 0) {
        snprintf(err, errsize, "cannot bind %s: %s", bind, zmq_strerror(errno));
        return -1;
    }
    char last[512];
    size_t len = sizeof last;
    zmq_getsockopt(c->router, ZMQ_LAST_ENDPOINT, last, &len);
    /* peers cannot connect to a wildcard address */
    const char *star = strstr(last, "://0.0.0.0:");
    if (star)
        snprintf(c->endpoint, sizeof c->endpoint, "tcp://127.0.0.1:%s",
                 strrchr(last, ':') + 1);
    else
        snprintf(c->endpoint, sizeof c->endpoint, "%s", last);
    return 0;
}

ctl_t *ctl_new(const ctl_config *cfg, char *err, size_t errsize)
{
    ctl_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errsize, "out of memory");
        return NULL;
    }
    c->lost_timeout = cfg->lost_timeout_s > 0 ? cfg->lost_timeout_s : 30;
    c->started = wire_now();
    if (cfg->ckpt_root) {
        snprintf(c->ckpt_root, sizeof c->ckpt_root, "%s", cfg->ckpt_root);
    } else {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", cfg->db_path);
        char *abs = realpath(dirname(tmp), NULL);
        snprintf(c->ckpt_root, sizeof c->ckpt_root, "%s/jizhi-checkpoints",
                 abs ? abs : ".");
        free(abs);
    }
    c->store = store_open(cfg->db_path, 0, err, errsize);
    if (!c->store) {
        ctl_destroy(&c);
        return NULL;
    }
    c->next_trial_id = store_trial_next_id(c->store);
    c->zctx = zmq_ctx_new();
    if (c->next_trial_id < 0 || s_bind(c, cfg->bind, err, errsize) != 0 ||
        ctl__load(c, err, errsize) != 0) {
        ctl_destroy(&c);
        return NULL;
    }
    log_info("ctl", "serving %s (database %s, %zu unfinished studies)", c->endpoint,
             cfg->db_path, c->nstudies);
    return c;
}

int ctl_run(ctl_t *c, volatile int *stop)
{
    while (!*stop) {
        zmq_pollitem_t item = {c->router, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&item, 1, 50);
        if (rc < 0 && errno != EINTR) {
            log_error("ctl", "poll failed: %s", zmq_strerror(errno));
            return -1;
        }
        for (int i = 0; i < BURST; i++) {
            wire_peer from;
            char why[256];
            json_t *msg = wire_recv(c->router, &from, 1, why, sizeof why);
            if (!msg) {
                if (errno == EAGAIN)
                    break;
                if (errno == ETERM)
                    return -1;
                log_warn("ctl", "dropped a malformed message: %s", why);
                if (from.len)
                    ctl__send(c, &from, wire_error(-1, "malformed", "%s", why));
                continue;
            }
            ctl__handle(c, &from, msg);
            json_decref(msg);
        }
        ctl__tick(c, wire_now());
        s_instr_expire(c);
        s_commit_and_flush(c);
    }
    return 0;
}

void ctl_destroy(ctl_t **cp)
{
    if (!cp || !*cp)
        return;
    ctl_t *c = *cp;
    if (c->in_txn)
        store_rollback(c->store);
    for (size_t i = 0; i < c->nstudies; i++)
        ctl__study_free(c->studies[i]);
    free(c->studies);
    for (size_t i = 0; i < c->ndisps; i++)
        free(c->disps[i]);
    free(c->disps);
    for (size_t i = 0; i < c->ninstrs; i++)
        json_decref(c->instrs[i].msg);
    free(c->instrs);
    for (size_t i = 0; i < c->nout; i++)
        json_decref(c->outbox[i].msg);
    free(c->outbox);
    if (c->router)
        zmq_close(c->router);
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    store_close(&c->store);
    free(c);
    *cp = NULL;
}
