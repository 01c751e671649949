/*  ctl_interv.c - the list of a person's interventions on running trials
    (ctl_interv.h): guarded changes (ctl_guard.c) and live forks
    (ctl_fork.c). Adds and persists them, reads the unfinished ones back
    when the controller starts, and passes the controller's events
    (instructions resolved, metrics, ticks) to the one they concern.
    Finished interventions leave the list; their rows stay in the store.
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ctl_interv {
    ctl_iv *v;
    size_t n, cap;
};

static ctl_interv *s_list(ctl_t *c)
{
    if (!c->interv)
        c->interv = util_xcalloc(1, sizeof *c->interv);
    return c->interv;
}

int ctl__iv_done(const ctl_iv *iv)
{
    return iv->kind == IV_GUARD ? iv->state >= GUARD_KEPT : iv->state >= FORK_DECIDED;
}

long ctl__iv_long(const ctl_iv *iv, const char *k, long dflt)
{
    json_t *v = json_object_get(iv->data, k);
    return json_is_integer(v) ? (long)json_integer_value(v) : dflt;
}

const char *ctl__iv_str(const ctl_iv *iv, const char *k)
{
    const char *s = json_string_value(json_object_get(iv->data, k));
    return s ? s : "";
}

int ctl__iv_name_index(const char *const *names, int n, const char *name)
{
    for (int i = 0; name && i < n; i++)
        if (!strcmp(name, names[i]))
            return i;
    return -1;
}

int ctl__iv_busy(ctl_t *c, const ctl_trial *t, char *err, size_t size)
{
    const ctl_iv *busy = c->interv ? ctl__iv_of_trial(c, t->row.id) : NULL;
    if (!busy)
        return 0;
    snprintf(err, size,
             "trial %ld already has a %s under way (state %s); wait for its outcome",
             t->row.id, busy->kind == IV_GUARD ? "guarded change" : "fork",
             busy->kind == IV_GUARD ? ctl_guard_state_name(busy->state)
                                    : ctl_fork_state_name(busy->state));
    return 1;
}

static ctl_iv *s_push(ctl_t *c)
{
    ctl_interv *l = s_list(c);
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->v = util_xrealloc(l->v, l->cap * sizeof *l->v);
    }
    ctl_iv *iv = &l->v[l->n++];
    memset(iv, 0, sizeof *iv);
    iv->instr = -1;
    return iv;
}

ctl_iv *ctl__iv_add(ctl_t *c, ctl_iv_kind kind, ctl_trial *t, int state, json_t *data,
                    const char *state_name, int done)
{
    if (ctl__txn(c) != 0) {
        json_decref(data);
        return NULL;
    }
    long id = store_interv_insert(c->store, t->study->row.id, t->row.id,
                                  kind == IV_GUARD ? "guard" : "fork", state_name, done,
                                  data, util_wall());
    if (id < 0) {
        log_error("ctl", "cannot record an intervention: %s", store_errmsg(c->store));
        json_decref(data);
        return NULL;
    }
    ctl_iv *iv = s_push(c);
    iv->id = id;
    iv->kind = kind;
    iv->study_id = t->study->row.id;
    iv->trial_id = t->row.id;
    iv->state = state;
    iv->data = data;
    return iv;
}

int ctl__iv_save(ctl_t *c, ctl_iv *iv, const char *state_name, int done)
{
    if (ctl__txn(c) != 0 || store_interv_save(c->store, iv->id, state_name, done,
                                              iv->data, util_wall()) != 0) {
        log_error("ctl", "cannot save intervention %ld: %s", iv->id,
                  store_errmsg(c->store));
        return -1;
    }
    return 0;
}

ctl_iv *ctl__iv_of_trial(ctl_t *c, long trial_id)
{
    ctl_interv *l = s_list(c);
    for (size_t i = 0; i < l->n; i++) {
        ctl_iv *iv = &l->v[i];
        if (ctl__iv_done(iv))
            continue;
        if (iv->trial_id == trial_id)
            return iv;
        size_t k;
        json_t *x;
        json_array_foreach(json_object_get(iv->data, "siblings"), k, x)
        {
            if (json_integer_value(x) == trial_id)
                return iv;
        }
    }
    return NULL;
}

void ctl__iv_answer(ctl_t *c, ctl_iv *iv, json_t *msg)
{
    if (!iv->waiter.len) {
        json_decref(msg);
        return;
    }
    ctl__send(c, &iv->waiter, msg);
    iv->waiter.len = 0;
    iv->wait_until = 0;
}

/* Drops the finished ones from the list. */
static void s_sweep(ctl_t *c)
{
    ctl_interv *l = s_list(c);
    for (size_t i = 0; i < l->n;) {
        if (ctl__iv_done(&l->v[i]) && !l->v[i].waiter.len) {
            json_decref(l->v[i].data);
            l->v[i] = l->v[--l->n];
            continue;
        }
        i++;
    }
}

int ctl__interv_load(ctl_t *c, char *err, size_t errsize)
{
    json_t *rows = store_interv_list(c->store, 1, 0);
    if (!rows) {
        snprintf(err, errsize, "cannot read the interventions: %s",
                 store_errmsg(c->store));
        return -1;
    }
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        const char *kind = json_string_value(json_object_get(r, "kind"));
        const char *state = json_string_value(json_object_get(r, "state"));
        int guard = kind && !strcmp(kind, "guard");
        int st = guard ? ctl_guard_state_parse(state) : ctl_fork_state_parse(state);
        if (!kind || st < 0) {
            log_warn("ctl",
                     "intervention %" JSON_INTEGER_FORMAT
                     ": unknown kind or state; left as it is",
                     json_integer_value(json_object_get(r, "id")));
            continue;
        }
        ctl_iv *iv = s_push(c);
        iv->id = (long)json_integer_value(json_object_get(r, "id"));
        iv->study_id = (long)json_integer_value(json_object_get(r, "study_id"));
        iv->trial_id = (long)json_integer_value(json_object_get(r, "trial_id"));
        iv->kind = guard ? IV_GUARD : IV_FORK;
        iv->state = st;
        iv->data = json_incref(json_object_get(r, "data"));
        log_info("ctl", "resuming the %s of trial %ld (intervention %ld, state %s)",
                 guard ? "guarded change" : "fork", iv->trial_id, iv->id, state);
        if (guard)
            ctl__guard_resume(c, iv);
        else
            ctl__fork_resume(c, iv);
    }
    json_decref(rows);
    s_sweep(c);
    return 0;
}

void ctl__interv_free(ctl_t *c)
{
    if (!c->interv)
        return;
    for (size_t i = 0; i < c->interv->n; i++)
        json_decref(c->interv->v[i].data);
    free(c->interv->v);
    free(c->interv);
    c->interv = NULL;
}

void ctl__interv_instr_done(ctl_t *c, long id, long trial_id, int applied,
                            const char *why)
{
    ctl_interv *l = s_list(c);
    for (size_t i = 0; i < l->n; i++) {
        ctl_iv *iv = &l->v[i];
        if (iv->instr != id || ctl__iv_done(iv))
            continue;
        iv->instr = -1;
        if (iv->kind == IV_GUARD)
            ctl__guard_instr_done(c, iv, applied, why);
        else
            ctl__fork_instr_done(c, iv, applied, why);
        return;
    }
    (void)trial_id;
}

void ctl__interv_metrics(ctl_t *c, ctl_trial *t, const store_point *pts, size_t n)
{
    ctl_iv *iv = c->interv ? ctl__iv_of_trial(c, t->row.id) : NULL;
    if (!iv)
        return;
    if (iv->kind == IV_GUARD)
        ctl__guard_metrics(c, iv, t, pts, n);
    else
        ctl__fork_metrics(c, iv, t, pts, n);
}

void ctl__interv_checkpoint(ctl_t *c, ctl_trial *t)
{
    ctl_iv *iv = c->interv ? ctl__iv_of_trial(c, t->row.id) : NULL;
    if (!iv || iv->trial_id != t->row.id)
        return;
    if (iv->kind == IV_GUARD)
        ctl__guard_checkpoint(c, iv, t);
    else
        ctl__fork_checkpoint(c, iv, t);
}

void ctl__interv_tick(ctl_t *c, double now)
{
    if (!c->interv)
        return;
    ctl_interv *l = c->interv;
    for (size_t i = 0; i < l->n; i++) {
        ctl_iv *iv = &l->v[i];
        if (!ctl__iv_done(iv)) {
            if (iv->kind == IV_GUARD)
                ctl__guard_tick(c, iv, now);
            else
                ctl__fork_tick(c, iv, now);
        }
        if (iv->waiter.len && iv->wait_until > 0 && now > iv->wait_until)
            ctl__iv_answer(
                c, iv,
                wire_error(iv->waiter_req, "not_acknowledged",
                           "the %s of trial %ld is not decided within %g s (timed out); "
                           "it goes on (state %s): `jizhi trial show %ld` tells the "
                           "outcome",
                           iv->kind == IV_GUARD ? "guarded change" : "fork", iv->trial_id,
                           iv->wait_s,
                           iv->kind == IV_GUARD ? ctl_guard_state_name(iv->state)
                                                : ctl_fork_state_name(iv->state),
                           iv->trial_id));
    }
    s_sweep(c);
}
