/*  ctl_interv.c - the list of a person's interventions on running trials
    (ctl_interv.h): guarded changes (ctl_guard.c) and live forks
    (ctl_fork.c). Adds and persists them; finished interventions leave the
    list (their rows stay in the store). The list sits below the guard and
    the fork, which use it; ctl_interv_ev.c, above them, reads the
    unfinished ones back at start and passes the controller's events
    (instructions resolved, metrics, ticks) to the one they concern.
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ctl_interv *ctl__iv_list(ctl_t *c)
{
    if (!c->interv)
        c->interv = util_xcalloc(1, sizeof *c->interv);
    return c->interv;
}

int ctl__iv_done(const ctl_iv *iv)
{
    return store_iv_state_final(iv->kind, iv->state);
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

int ctl__iv_busy(ctl_t *c, const ctl_trial *t, char *err, size_t size)
{
    const ctl_iv *busy = c->interv ? ctl__iv_of_trial(c, t->row.id) : NULL;
    if (!busy)
        return 0;
    snprintf(err, size,
             "trial %ld already has a %s under way (state %s); wait for its outcome",
             t->row.id, ctl__iv_what(busy), ctl__iv_state_name(busy));
    return 1;
}

ctl_iv *ctl__iv_push(ctl_t *c)
{
    ctl_interv *l = ctl__iv_list(c);
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->v = util_xrealloc(l->v, l->cap * sizeof *l->v);
    }
    ctl_iv *iv = &l->v[l->n++];
    memset(iv, 0, sizeof *iv);
    iv->instr = -1;
    return iv;
}

const char *ctl__iv_what(const ctl_iv *iv)
{
    return iv->kind == IV_GUARD ? "guarded change" : "fork";
}

const char *ctl__iv_state_name(const ctl_iv *iv)
{
    return store_iv_state_name(iv->kind, iv->state);
}

ctl_iv *ctl__iv_add(ctl_t *c, store_iv_kind kind, ctl_trial *t, int state, json_t *data)
{
    if (ctl__txn(c) != 0) {
        json_decref(data);
        return NULL;
    }
    long id = store_interv_insert(c->store, t->study->row.id, t->row.id, kind, state,
                                  data, util_wall());
    if (id < 0) {
        log_error("ctl", "cannot record an intervention: %s", store_errmsg(c->store));
        json_decref(data);
        return NULL;
    }
    ctl_iv *iv = ctl__iv_push(c);
    iv->id = id;
    iv->kind = kind;
    iv->study_id = t->study->row.id;
    iv->trial_id = t->row.id;
    iv->state = state;
    iv->data = data;
    return iv;
}

int ctl__iv_move(ctl_t *c, ctl_iv *iv, int to)
{
    int legal = iv->kind == IV_GUARD ? ctl_guard_move_legal(iv->state, to)
                                     : ctl_fork_move_legal(iv->state, to);
    if (!legal) {
        log_error("ctl", "%s %ld: illegal move %s -> %s", ctl__iv_what(iv), iv->id,
                  ctl__iv_state_name(iv), store_iv_state_name(iv->kind, to));
        return -1;
    }
    int from = iv->state;
    iv->state = to;
    if (ctl__iv_save(c, iv) != 0) {
        iv->state = from; /* the store kept the old state: so does memory */
        return -1;
    }
    return 0;
}

int ctl__iv_save(ctl_t *c, ctl_iv *iv)
{
    if (ctl__txn(c) != 0 || store_interv_save(c->store, iv->id, iv->kind, iv->state,
                                              iv->data, util_wall()) != 0) {
        log_error("ctl", "cannot save intervention %ld: %s", iv->id,
                  store_errmsg(c->store));
        return -1;
    }
    return 0;
}

ctl_iv *ctl__iv_of_trial(ctl_t *c, long trial_id)
{
    ctl_interv *l = ctl__iv_list(c);
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

void ctl__iv_sweep(ctl_t *c)
{
    ctl_interv *l = ctl__iv_list(c);
    for (size_t i = 0; i < l->n;) {
        if (ctl__iv_done(&l->v[i]) && !l->v[i].waiter.len) {
            json_decref(l->v[i].data);
            l->v[i] = l->v[--l->n];
            continue;
        }
        i++;
    }
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

/* ---- the state machines of a guarded change and a fork (pure; here,
   below both; their states' names are the store's) ---- */

int ctl_guard_move_legal(store_guard_state from, store_guard_state to)
{
    switch (from) {
    case GUARD_CHECKPOINT:
        return to == GUARD_APPLY || to == GUARD_REFUSED;
    case GUARD_APPLY:
        return to == GUARD_WATCH || to == GUARD_REFUSED;
    case GUARD_WATCH:
        return to == GUARD_KEPT || to == GUARD_REVERT || to == GUARD_ENDED;
    case GUARD_REVERT:
        return to == GUARD_REVERTED || to == GUARD_FAILED;
    default:
        return 0;
    }
}

int ctl_fork_move_legal(store_fork_state from, store_fork_state to)
{
    switch (from) {
    case FORK_CHECKPOINT:
        return to == FORK_RUNNING || to == FORK_REFUSED;
    case FORK_RUNNING:
        return to == FORK_DECIDED;
    default:
        return 0;
    }
}
