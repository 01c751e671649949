/*  ctl_state.h - the state machines of a trial and of a study (ctl_state.c):
    their legal moves, the moves on the object (its row's state) and
    the commands each state refuses. Pure: no store, no sockets, no
    outbox; the callers persist (ctl__trial_save, ctl__study_move in
    ctl_svc.h). The data is in ctl_types.h.

    ---- a trial ----

    A trial has two states. `state` is its persisted lifecycle
    (store_trial_state, text only in the store row and on the wire):

                    create
                      |
                      v      start                 heard
       .-------->  PENDING ----------> STARTING ----------> RUNNING
       |  retry    ^ |  |  \                               ^    |
       |           | |  |   '--> FAILED             resume |    | pause
       |           | |  |       (command invalid)          |    v
       |  unsuspend| |  '--- idle stop ---.                PAUSED
       |           | |                    v
       |       SUSPENDED --- idle stop -> STOPPED --------> PENDING
       |           ^                            study resume
       |           '--- released exit of RUNNING or PAUSED
       |
       '--- exit or loss of STARTING, RUNNING or PAUSED ---> COMPLETED,
            with retries left (else)                         FAILED, STOPPED,
                                                             PRUNED

    The legal moves, exactly (ctl_trial_move_legal):

      PENDING   -> STARTING (start sent), FAILED (its command cannot be
                   expanded), STOPPED (stopped while waiting)
      STARTING  -> RUNNING (the trial or its dispatcher spoke), PENDING
                   (retry), COMPLETED, FAILED, STOPPED, PRUNED (exit or loss)
      RUNNING   -> PAUSED (pause applied), SUSPENDED (released exit),
                   PENDING, COMPLETED, FAILED, STOPPED, PRUNED
      PAUSED    -> RUNNING (resume applied), SUSPENDED, PENDING,
                   COMPLETED, FAILED, STOPPED, PRUNED
      SUSPENDED -> PENDING (resume: restarts from its checkpoint), STOPPED
      STOPPED   -> PENDING (its study resumes and it was stopped by the
                   study stop: store_trial.study_stopped)
      COMPLETED, FAILED, PRUNED: final. PRUNED is the exit of a stop a
      scheduler asked for (early stopping: ASHA, Hyperband, median, the
      divergence guard); STOPPED the exit of any other stop.

    `plan` is what the controller is driving the process towards while
    it is meant to be alive (STARTING, RUNNING, PAUSED); in memory only (a
    restarted controller handles the exit as a plain one):

      NONE ----------> STOP -------------------> (exit: STOPPED, or PRUNED)
        |  stop         ^ stop  (kill after STOP_GRACE_S)
        |               |
        +-> RELEASE_CHECKPOINT --checkpoint saved--> RELEASE -> (exit: SUSPENDED)
        |   (pause --release)                        (stop sent, kill after grace;
        |                                             later stops change nothing)
        +-> RESTART (a `load` not acknowledged in time: kill sent)
              |  stop -> STOP     exit: PENDING, next start loads
              '------------------ the checkpoint (a completed run stands)

    Every plan goes back to NONE when the trial starts, ends, retries or
    is suspended. Moves by code go through ctl_trial_move/ctl_trial_plan,
    which treat an illegal move as a programmer error (assert; logged and
    ignored when asserts are off). Moves a message asks for are checked
    first with ctl_trial_cmd_refusal and refused with `bad_state`.

    ---- a study ----

    Study states (store_study_state, text only in the store row and on
    the wire):

        submit            study_stop
          |     .------------------------------.
          v     |                              v
        RUNNING <------- study_resume ------ STOPPED
          |        (or the same spec submitted again)
          | budget used up (trials, time or the scheduler is done)
          | and no trial pending, active or suspended      ^
          v                                                |
        FINISHED ------------ study_extend ----------------'

    ctl_study_move_legal holds exactly these four moves; ctl__study_move
    treats another as a programmer error. A stop or resume asked by a
    message for a finished study is refused (`bad_state`); asking a
    running study to resume, or a stopped one to stop, changes nothing.
*/
#ifndef JZ_CTL_STATE_H
#define JZ_CTL_STATE_H

#include "ctl_types.h"

/* ---- a trial ---- */

/* 1 when `from -> to` is a legal lifecycle move (the table above). */
int ctl_trial_move_legal(store_trial_state from, store_trial_state to);
/* 1 when the plan may go from `from` to `to`. */
int ctl_trial_plan_legal(ctl_trial_plan from, ctl_trial_plan to);
/* Moves t's row.state (legal moves only: an illegal one is a programmer
   error). 0, or -1 for an illegal move (nothing changed). Does not
   persist: callers save the row. */
int ctl_trial_move(ctl_trial *t, store_trial_state to);
int ctl_trial_plan_to(ctl_trial *t, ctl_trial_plan to);
/* Readies a trial read from the store (no plan); -1 when its row's state
   is out of range (the store refuses a text that names no state). */
int ctl_trial_init_state(ctl_trial *t);
/* Why a command is refused, by state and plan alone. */
typedef enum {
    TRIAL_REFUSE_NONE = 0,   /* it may be applied */
    TRIAL_REFUSE_NOT_ACTIVE, /* the trial is not alive (nor waiting, for a stop) */
    TRIAL_REFUSE_BUSY,       /* a release while starting, stopping or releasing */
} ctl_trial_refusal;
/* The one place that decides which commands each state (and plan) allows:
   SUSPENDED takes resume and stop, PENDING stop, an active trial (STARTING,
   RUNNING, PAUSED) every command but a release while STARTING or while a
   plan runs; the rest nothing. */
ctl_trial_refusal ctl_trial_state_refusal(store_trial_state st, ctl_trial_plan plan,
                                          ctl_trial_cmd cmd);
/* ctl_trial_state_refusal for t, in words for a person: NULL when `cmd`
   may be applied to t now, else why not (static text or `buf`). Never
   changes t. */
const char *ctl_trial_cmd_refusal(const ctl_trial *t, ctl_trial_cmd cmd, char *buf,
                                  size_t size);
const char *ctl_trial_plan_name(ctl_trial_plan p);

/* 1 while the trial's process is meant to be alive (STARTING, RUNNING,
   PAUSED). */
int ctl_trial_active(const ctl_trial *t);
/* 1 for COMPLETED, FAILED, STOPPED, PRUNED. */
int ctl_trial_ended(const ctl_trial *t);

/* ---- a study ---- */

/* 1 when `from -> to` is a legal study move. */
int ctl_study_move_legal(store_study_state from, store_study_state to);

#endif
