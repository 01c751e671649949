/*  ctl_interv_ev.c - the controller's events for a person's interventions
    (ctl_interv.h): reads the unfinished ones back when the controller
    starts, and passes each instruction resolved, metrics report,
    checkpoint and tick to the guarded change (ctl_guard.c) or the fork
    (ctl_fork.c) it concerns. Above both; the list they share is
    ctl_interv.c, below them.
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The events of iv's kind. */
static const ctl_iv_ops *s_ops(const ctl_iv *iv)
{
    static const ctl_iv_ops *const ops[IV_KIND_COUNT] = {
        [IV_GUARD] = &ctl__guard_ops, [IV_FORK] = &ctl__fork_ops};
    return ops[iv->kind];
}

/* store_interv_open's row: added to the list, or left as it is when the
   store cannot name its kind or state. */
static void s_read(void *arg, const store_interv *r, const char *bad)
{
    ctl_t *c = arg;
    if (bad) {
        log_warn("ctl", "%s; left as it is", bad);
        return;
    }
    ctl_iv *iv = ctl__iv_push(c);
    iv->id = r->id;
    iv->study_id = r->study_id;
    iv->trial_id = r->trial_id;
    iv->kind = r->kind;
    iv->state = r->state;
    iv->data = json_incref(r->data);
}

int ctl__interv_load(ctl_t *c, char *err, size_t errsize)
{
    /* all read first: resuming writes to the table being read */
    size_t first = ctl__iv_list(c)->n;
    if (store_interv_open(c->store, s_read, c) < 0) {
        snprintf(err, errsize, "cannot read the interventions: %s",
                 store_errmsg(c->store));
        return -1;
    }
    for (size_t i = first; i < ctl__iv_list(c)->n; i++) {
        ctl_iv *iv = &ctl__iv_list(c)->v[i];
        log_info("ctl", "resuming the %s of trial %ld (intervention %ld, state %s)",
                 ctl__iv_what(iv), iv->trial_id, iv->id, ctl__iv_state_name(iv));
        s_ops(iv)->resume(c, iv);
    }
    ctl__iv_sweep(c);
    return 0;
}

void ctl__interv_instr_done(ctl_t *c, long id, long trial_id, int applied,
                            const char *why)
{
    ctl_interv *l = ctl__iv_list(c);
    for (size_t i = 0; i < l->n; i++) {
        ctl_iv *iv = &l->v[i];
        if (iv->instr != id || ctl__iv_done(iv))
            continue;
        iv->instr = -1;
        s_ops(iv)->instr_done(c, iv, applied, why);
        return;
    }
    (void)trial_id;
}

void ctl__interv_metrics(ctl_t *c, ctl_trial *t, const store_point *pts, size_t n)
{
    ctl_iv *iv = c->interv ? ctl__iv_of_trial(c, t->row.id) : NULL;
    if (!iv)
        return;
    s_ops(iv)->metrics(c, iv, t, pts, n);
}

void ctl__interv_checkpoint(ctl_t *c, ctl_trial *t)
{
    ctl_iv *iv = c->interv ? ctl__iv_of_trial(c, t->row.id) : NULL;
    if (!iv || iv->trial_id != t->row.id)
        return;
    s_ops(iv)->checkpoint(c, iv, t);
}

void ctl__interv_tick(ctl_t *c, double now)
{
    if (!c->interv)
        return;
    ctl_interv *l = c->interv;
    for (size_t i = 0; i < l->n; i++) {
        ctl_iv *iv = &l->v[i];
        if (!ctl__iv_done(iv))
            s_ops(iv)->tick(c, iv, now);
        if (iv->waiter.len && iv->wait_until > 0 && now > iv->wait_until)
            ctl__iv_answer(
                c, iv,
                wire_error(iv->waiter_req, "not_acknowledged",
                           "the %s of trial %ld is not decided within %g s (timed out); "
                           "it goes on (state %s): `jizhi trial show %ld` tells the "
                           "outcome",
                           ctl__iv_what(iv), iv->trial_id, iv->wait_s,
                           ctl__iv_state_name(iv), iv->trial_id));
    }
    ctl__iv_sweep(c);
}
