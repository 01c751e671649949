/*  ctl_fork.c - a live fork of a running trial (`trial fork`, see
    ctl_interv.h for its state machine). */
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the state machine ---- */

static const char *const s_names[FORK_COUNT] = {
    [FORK_CHECKPOINT] = "checkpoint",
    [FORK_RUNNING] = "running",
    [FORK_DECIDED] = "decided",
    [FORK_REFUSED] = "refused",
};

const char *ctl_fork_state_name(ctl_fork_state s)
{
    return s >= 0 && s < FORK_COUNT ? s_names[s] : "?";
}

int ctl_fork_state_parse(const char *name)
{
    for (int i = 0; name && i < FORK_COUNT; i++)
        if (!strcmp(name, s_names[i]))
            return i;
    return -1;
}

int ctl_fork_move_legal(ctl_fork_state from, ctl_fork_state to)
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

void ctl__fork_instr_done(ctl_t *c, ctl_iv *iv, int applied, const char *why) {}

void ctl__fork_metrics(ctl_t *c, ctl_iv *iv, ctl_trial *t, const store_point *pts,
                       size_t n)
{
}

void ctl__fork_tick(ctl_t *c, ctl_iv *iv, double now) {}

void ctl__fork_resume(ctl_t *c, ctl_iv *iv) {}

void ctl__fork_checkpoint(ctl_t *c, ctl_iv *iv, ctl_trial *t) {}
