/*  ctl_trial.h - a trial in the controller: its state machine and its
    lifecycle (ctl_trial.c).

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
*/
#ifndef JZ_CTL_TRIAL_H
#define JZ_CTL_TRIAL_H

/* included by ctl_internal.h, which declares the types used here */

typedef enum {
    PLAN_NONE,
    PLAN_RELEASE_CHECKPOINT, /* pause --release: checkpoint instruction sent */
    PLAN_RELEASE,            /* checkpoint saved, stop sent: exit suspends */
    PLAN_STOP,               /* stop sent: exit ends it as stopped */
    PLAN_RESTART,            /* killed: exit makes it pending, loading a checkpoint */
    PLAN_COUNT
} ctl_trial_plan;

/* What a person (or the CLI) asks of a trial. */
typedef enum {
    TRIAL_CMD_STOP,
    TRIAL_CMD_PAUSE,
    TRIAL_CMD_RESUME,
    TRIAL_CMD_SET,
    TRIAL_CMD_RELEASE, /* pause --release */
} ctl_trial_cmd;

struct ctl_trial {
    store_trial row;          /* persisted columns; row.state is written only by
                                 ctl_trial_move, from `state` */
    store_trial_state state;  /* the lifecycle state */
    ctl_trial_plan plan;      /* see above */
    char plan_reason[128];    /* why it is being stopped (STOP, RELEASE) */
    int plan_by_study;        /* STOP came from its study's stop */
    int plan_pruned;          /* STOP came from a scheduler: the exit is PRUNED */
    double plan_since;        /* monotonic time of the stop instruction, 0 if none */
    int kill_sent;            /* a kill went to its dispatcher this attempt */
    char load_on_start[1024]; /* checkpoint the next start loads, "" if none */
    ctl_study *study;         /* borrowed back-pointer */
    wire_peer peer;           /* the trial's routing id, len 0 until it speaks */
    double last_heard; /* monotonic: last message from it or its dispatcher listing it */
    ctl_disp *disp;    /* where it runs, NULL when not started */
    long gpus;         /* GPUs it holds on its dispatcher */
    long objective_reports; /* objective points it reported (all attempts) */
    int saw_resource;       /* reported its study's early-stopping resource */
    double last_report;     /* monotonic: start, last metrics or checkpoint (alerts:
                               stalled) */
    unsigned stall_mask;    /* stalled alert rules already looked at (ctl_alert.c) */
    int feas; /* constraints: 0 not judged yet, 1 met, 2 not met (ctl__trial_feasible) */
    double spoke_wall; /* wall clock of its last own message (0: none yet) */
    long set_batch;    /* the `trial set` batch (ctl_instr.batch) that made ... */
    long set_gen;      /* ... this params generation */
};

/* 1 when t's last metrics meet its study's constraints (always 1 without
   constraints); judged once from the store and remembered. */
int ctl__trial_feasible(ctl_t *c, ctl_trial *t);

/* ---- the state machine (pure: no store, no sockets) ---- */

/* 1 when `from -> to` is a legal lifecycle move (the table above). */
int ctl_trial_move_legal(store_trial_state from, store_trial_state to);
/* 1 when the plan may go from `from` to `to`. */
int ctl_trial_plan_legal(ctl_trial_plan from, ctl_trial_plan to);
/* Moves t (legal moves only: an illegal one is a programmer error) and
   keeps row.state's text in step. 0, or -1 for an illegal move (nothing
   changed). Does not persist: callers save the row. */
int ctl_trial_move(ctl_trial *t, store_trial_state to);
int ctl_trial_plan_to(ctl_trial *t, ctl_trial_plan to);
/* Sets the state of a trial read from the store (its row's text); -1
   when the text names no state. */
int ctl_trial_init_state(ctl_trial *t);
/* NULL when `cmd` may be applied to t now, else why not (static text or
   `buf`). Never changes t. */
const char *ctl_trial_cmd_refusal(const ctl_trial *t, ctl_trial_cmd cmd, char *buf,
                                  size_t size);
const char *ctl_trial_plan_name(ctl_trial_plan p);

/* 1 while the trial's process is meant to be alive (STARTING, RUNNING,
   PAUSED). */
int ctl_trial_active(const ctl_trial *t);
/* 1 for COMPLETED, FAILED, STOPPED, PRUNED. */
int ctl_trial_ended(const ctl_trial *t);

/* ---- lifecycle (ctl_trial.c; each change is saved in the iteration's
   transaction) ---- */

/* A new pending trial of study s with id `id` (reserved) and `params`
   (taken), inserted in the store. NULL when the store refuses it. */
ctl_trial *ctl__trial_create(ctl_t *c, ctl_study *s, long id, json_t *params);
/* Adds a trial read from the store to s (takes row's JSON); NULL when
   its state text is unknown. */
ctl_trial *ctl__trial_adopt(ctl_t *c, ctl_study *s, store_trial *row);
void ctl__trial_free(ctl_trial *t);
/* Persists the trial row. 0 or -1 (logged). */
int ctl__trial_save(ctl_t *c, ctl_trial *t);
/* Starts a pending trial on d. */
void ctl__trial_start(ctl_t *c, ctl_trial *t, ctl_disp *d);
/* The trial (or its dispatcher, for it) spoke: STARTING becomes RUNNING. */
void ctl__trial_heard(ctl_t *c, ctl_trial *t);
/* A trial's process ended (from the dispatcher). Ignored unless active.
   how "lost" (the dispatcher's backend lost it: preempted, node failure)
   is handled as ctl__trial_lost with message as the reason. The last line
   the program wrote to stderr (stderr_tail, may be NULL) goes into the
   reason of a failure. */
void ctl__trial_exited(ctl_t *c, ctl_trial *t, const char *how, long code,
                       const char *message, const char *stderr_tail);
/* Ends an active trial as `state` (COMPLETED, FAILED, STOPPED or PRUNED)
   with `reason`: the value from its reports, the schedulers told, the
   event and alerts (ctl_ask.c's tell). */
void ctl__trial_end(ctl_t *c, ctl_trial *t, store_trial_state state, const char *reason);
/* A trial is lost (its dispatcher no longer has it). */
void ctl__trial_lost(ctl_t *c, ctl_trial *t, const char *why);
/* A trial saved a checkpoint: record it and tell the schedulers. */
void ctl__trial_checkpoint(ctl_t *c, ctl_trial *t, long step, const char *path);
/* Stores a batch of metrics for a trial; runs schedulers. 0 or -1. */
int ctl__trial_metrics(ctl_t *c, ctl_trial *t, const store_point *pts, size_t n,
                       double now);
/* Who stops a trial (ctl__trial_stop). */
typedef enum {
    CTL_STOP_BY_PERSON = 0, /* a person, the time budget: ends STOPPED */
    CTL_STOP_BY_STUDY = 1,  /* the study's stop: STOPPED, its resume runs it again */
    CTL_STOP_BY_SCHED = 2,  /* a scheduler's early-stopping decision: ends PRUNED */
} ctl_stop_by;

/* Stops one trial: a waiting one at once, an active one by instruction,
   then a kill after a grace period. `by`: who asks (ctl_stop_by). */
void ctl__trial_stop(ctl_t *c, ctl_trial *t, const char *who, const char *reason,
                     ctl_stop_by by);
/* pause --release: checkpoint, then exit, so the slot is free; the trial
   is SUSPENDED until ctl__trial_unsuspend puts it back to PENDING with
   JIZHI_LOAD_CHECKPOINT set to that checkpoint. Returns the checkpoint
   instruction's id, or -1 (nothing sent). */
long ctl__trial_release(ctl_t *c, ctl_trial *t, const char *who);
void ctl__trial_unsuspend(ctl_t *c, ctl_trial *t, const char *who);
/* A stopped trial of a resumed study runs again (STOPPED -> PENDING). */
void ctl__trial_rerun(ctl_t *c, ctl_trial *t);
/* Kills it for a restart from `path` (plan RESTART). */
void ctl__trial_restart_from(ctl_t *c, ctl_trial *t, const char *path,
                             const char *reason);
/* Per active trial each tick: the kill after a stop's grace period. */
void ctl__trial_tick(ctl_t *c, ctl_trial *t, double now);
/* Carries out (and releases) the instructions a scheduler returned. */
void ctl__trial_apply_sched(ctl_t *c, ctl_study *s, sched_t *by, sched_instr *ins, int k);
/* The objective of the current attempt (best or last, per the spec). */
double ctl__trial_result(const ctl_trial *t);

#endif
