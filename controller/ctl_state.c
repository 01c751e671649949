/*  ctl_state.c - the state machines of a trial and a study (see
    ctl_state.h). Pure: no store, no sockets.
*/
#include "ctl_state.h"

#include "../common/log.h"

#include <assert.h>
#include <stdio.h>

/* ---- a trial ---- */

#define B(s) (1u << (s))

/* s_moves[from]: the set of states `from` may move to. */
static const unsigned s_moves[TRIAL_STATE_COUNT] = {
    [TRIAL_PENDING] = B(TRIAL_STARTING) | B(TRIAL_FAILED) | B(TRIAL_STOPPED),
    [TRIAL_STARTING] = B(TRIAL_RUNNING) | B(TRIAL_PENDING) | B(TRIAL_COMPLETED) |
                       B(TRIAL_FAILED) | B(TRIAL_STOPPED) | B(TRIAL_PRUNED),
    [TRIAL_RUNNING] = B(TRIAL_PAUSED) | B(TRIAL_SUSPENDED) | B(TRIAL_PENDING) |
                      B(TRIAL_COMPLETED) | B(TRIAL_FAILED) | B(TRIAL_STOPPED) |
                      B(TRIAL_PRUNED),
    [TRIAL_PAUSED] = B(TRIAL_RUNNING) | B(TRIAL_SUSPENDED) | B(TRIAL_PENDING) |
                     B(TRIAL_COMPLETED) | B(TRIAL_FAILED) | B(TRIAL_STOPPED) |
                     B(TRIAL_PRUNED),
    [TRIAL_SUSPENDED] = B(TRIAL_PENDING) | B(TRIAL_STOPPED),
    [TRIAL_COMPLETED] = 0,
    [TRIAL_FAILED] = 0,
    [TRIAL_STOPPED] = B(TRIAL_PENDING),
    [TRIAL_PRUNED] = 0,
};

/* s_plans[from]: the plans `from` may move to (any plan may go back to
   NONE: the trial started, ended, retried or was suspended). */
static const unsigned s_plans[PLAN_COUNT] = {
    [PLAN_NONE] = B(PLAN_STOP) | B(PLAN_RELEASE_CHECKPOINT) | B(PLAN_RESTART),
    [PLAN_RELEASE_CHECKPOINT] = B(PLAN_RELEASE) | B(PLAN_STOP),
    [PLAN_RELEASE] = 0,
    [PLAN_STOP] = 0,
    [PLAN_RESTART] = B(PLAN_STOP),
};

int ctl_trial_move_legal(store_trial_state from, store_trial_state to)
{
    if ((unsigned)from >= TRIAL_STATE_COUNT || (unsigned)to >= TRIAL_STATE_COUNT)
        return 0;
    return (s_moves[from] & B(to)) != 0;
}

int ctl_trial_plan_legal(ctl_trial_plan from, ctl_trial_plan to)
{
    if ((unsigned)from >= PLAN_COUNT || (unsigned)to >= PLAN_COUNT)
        return 0;
    return to == PLAN_NONE || (s_plans[from] & B(to)) != 0;
}

const char *ctl_trial_plan_name(ctl_trial_plan p)
{
    static const char *const names[PLAN_COUNT] = {
        [PLAN_NONE] = "none",       [PLAN_RELEASE_CHECKPOINT] = "release_checkpoint",
        [PLAN_RELEASE] = "release", [PLAN_STOP] = "stop",
        [PLAN_RESTART] = "restart",
    };
    return (unsigned)p < PLAN_COUNT ? names[p] : "invalid";
}

int ctl_trial_move(ctl_trial *t, store_trial_state to)
{
    if (!ctl_trial_move_legal(t->row.state, to)) {
        log_error("ctl", "programmer error: trial %ld cannot move from %s to %s",
                  t->row.id, store_trial_state_name(t->row.state),
                  store_trial_state_name(to));
        assert(!"illegal trial state move");
        return -1;
    }
    int was_active = ctl_trial_active(t);
    if (t->study) { /* the study's counts (ctl_types.h) */
        t->study->by_state[t->row.state]--;
        t->study->by_state[to]++;
    }
    t->row.state = to;
    if (t->study && !was_active && ctl_trial_active(t))
        ctl_due_at(t, 0); /* the periodic pass looks at it from now on */
    return 0;
}

int ctl_trial_plan_to(ctl_trial *t, ctl_trial_plan to)
{
    if (!ctl_trial_plan_legal(t->plan, to)) {
        log_error("ctl", "programmer error: trial %ld plan cannot move from %s to %s",
                  t->row.id, ctl_trial_plan_name(t->plan), ctl_trial_plan_name(to));
        assert(!"illegal trial plan move");
        return -1;
    }
    /* a stop after a restart's kill: kill_sent is then its grace's kill */
    if ((to == PLAN_STOP || to == PLAN_RELEASE) && t->plan != PLAN_STOP &&
        t->plan != PLAN_RELEASE)
        t->kill_sent = 0;
    t->plan = to;
    if (t->study && (to == PLAN_STOP || to == PLAN_RELEASE))
        ctl_due_at(t, 0); /* its stop's grace: the kill after it (ctl__trial_tick) */
    if (to == PLAN_NONE) {
        t->plan_reason[0] = 0;
        t->plan_by_study = 0;
        t->plan_pruned = 0;
        t->plan_since = 0;
        t->kill_sent = 0;
    }
    return 0;
}

int ctl_trial_init_state(ctl_trial *t)
{
    t->plan = PLAN_NONE;
    return (unsigned)t->row.state < TRIAL_STATE_COUNT ? 0 : -1;
}

int ctl_trial_active(const ctl_trial *t)
{
    return t->row.state == TRIAL_STARTING || t->row.state == TRIAL_RUNNING ||
           t->row.state == TRIAL_PAUSED;
}

int ctl_trial_ended(const ctl_trial *t)
{
    return store_trial_state_ended(t->row.state);
}

ctl_trial_refusal ctl_trial_state_refusal(store_trial_state st, ctl_trial_plan plan,
                                          ctl_trial_cmd cmd)
{
    if (st == TRIAL_SUSPENDED && (cmd == TRIAL_CMD_RESUME || cmd == TRIAL_CMD_STOP))
        return TRIAL_REFUSE_NONE;
    if (st == TRIAL_PENDING && cmd == TRIAL_CMD_STOP)
        return TRIAL_REFUSE_NONE;
    if (st != TRIAL_STARTING && st != TRIAL_RUNNING && st != TRIAL_PAUSED)
        return TRIAL_REFUSE_NOT_ACTIVE;
    if (cmd == TRIAL_CMD_RELEASE && (st == TRIAL_STARTING || plan != PLAN_NONE))
        return TRIAL_REFUSE_BUSY;
    return TRIAL_REFUSE_NONE;
}

const char *ctl_trial_cmd_refusal(const ctl_trial *t, ctl_trial_cmd cmd, char *buf,
                                  size_t size)
{
    switch (ctl_trial_state_refusal(t->row.state, t->plan, cmd)) {
    case TRIAL_REFUSE_NONE:
        return NULL;
    case TRIAL_REFUSE_NOT_ACTIVE:
        snprintf(buf, size, "trial %ld is %s, not running", t->row.id,
                 store_trial_state_name(t->row.state));
        return buf;
    case TRIAL_REFUSE_BUSY:
        break;
    }
    return "the trial is starting, stopping or already releasing";
}

/* ---- a study ---- */

int ctl_study_move_legal(store_study_state from, store_study_state to)
{
    return (from == STUDY_RUNNING && (to == STUDY_STOPPED || to == STUDY_FINISHED)) ||
           (from == STUDY_STOPPED && to == STUDY_RUNNING) ||
           (from == STUDY_FINISHED && to == STUDY_RUNNING); /* study extend */
}
