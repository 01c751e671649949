/*  ctl_svc.c - the services every file of the controller calls (see
    ctl_svc.h): the iteration's transaction, the outbox, the refusal log,
    lookups, saving a trial's or a study's row.
*/
#include "ctl_svc.h"

#include "../common/log.h"
#include "../common/util.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the iteration ---- */

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
        c->outbox = util_xrealloc(c->outbox, c->out_cap * sizeof *c->outbox);
    }
    c->outbox[c->nout].to = *to;
    c->outbox[c->nout].msg = msg;
    c->nout++;
}

/* CTL_REFUSAL_WINDOW_S, or shorter with JIZHI_REFUSAL_WINDOW_S (never
   longer). Read once. */
static double s_refusal_window(void)
{
    static double w = -1;
    if (w < 0)
        w = util_env_at_most("JIZHI_REFUSAL_WINDOW_S", CTL_REFUSAL_WINDOW_S);
    return w;
}

void ctl__refused(ctl_t *c, const char *fmt, ...)
{
    double now = util_now();
    if (now - c->refusal_window >= s_refusal_window()) {
        if (c->refusals_dropped)
            log_warn("ctl", "%ld more refusals in the last %.0f s were not logged",
                     c->refusals_dropped, s_refusal_window());
        c->refusal_window = now;
        c->refusals_logged = c->refusals_dropped = 0;
    }
    if (c->refusals_logged >= CTL_REFUSALS_LOGGED) {
        c->refusals_dropped++;
        return;
    }
    c->refusals_logged++;
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    log_warn("ctl", "%s", text);
}

long ctl__msg_int(const ctl_msg *m, const char *key)
{
    return (long)json_integer_value(json_object_get(m->msg, key));
}

const char *ctl__msg_str(const ctl_msg *m, const char *key)
{
    return json_string_value(json_object_get(m->msg, key));
}

void ctl__msg_error(ctl_t *c, const wire_peer *to, long req, const char *code,
                    const char *text)
{
    ctl__send(c, to, wire_error(req, code, "%s", text));
}

/* ---- lookups and rows ---- */

ctl_trial *ctl__trial_by_id(ctl_t *c, long id)
{
    return ctl_idmap_get(&c->trials, id);
}

int ctl__trial_save(ctl_t *c, ctl_trial *t)
{
    if (ctl__txn(c) != 0 || store_trial_save(c->store, &t->row) != 0) {
        log_error("ctl", "cannot save trial %ld: %s", t->row.id, store_errmsg(c->store));
        return -1;
    }
    return 0;
}

int ctl__study_move(ctl_t *c, ctl_study *s, store_study_state to)
{
    if (!ctl_study_move_legal(s->row.state, to)) {
        log_error("ctl", "programmer error: study %s cannot move from %s to %s",
                  s->row.name, store_study_state_name(s->row.state),
                  store_study_state_name(to));
        assert(!"illegal study state move");
        return -1;
    }
    if (ctl__txn(c) != 0 || store_study_set_state(c->store, s->row.id, to, util_wall()))
        return -1;
    s->row.state = to;
    return 0;
}

void ctl__study_add_trial(ctl_study *s, ctl_trial *t)
{
    if (s->ntrials == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->trials = util_xrealloc(s->trials, s->cap * sizeof *s->trials);
    }
    s->trials[s->ntrials++] = t;
    assert((unsigned)t->row.state < TRIAL_STATE_COUNT); /* ctl_trial_init_state */
    s->by_state[t->row.state]++;
    if (ctl_trial_active(t)) /* one that was running: looked at by the periodic pass */
        ctl_due_at(t, 0);
}

double ctl__study_load_timeout(const ctl_study *s)
{
    if (s->sched->ops->load_timeout)
        return s->sched->ops->load_timeout(s->sched);
    for (int i = 0; i < s->nmon; i++)
        if (s->mon[i]->ops->load_timeout)
            return s->mon[i]->ops->load_timeout(s->mon[i]);
    return SCHED_LOAD_TIMEOUT_DEFAULT_S;
}
