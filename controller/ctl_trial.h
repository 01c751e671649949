/*  ctl_trial.h - a trial's lifecycle in the controller (ctl_trial.c):
    start, end, retry, exit, loss, stop, release, checkpoint. Its data is
    in ctl_types.h, its states and legal moves in ctl_state.h.
*/
#ifndef JZ_CTL_TRIAL_H
#define JZ_CTL_TRIAL_H

#include "ctl_types.h"

/* 1 when t's last metrics meet its study's constraints (always 1 without
   constraints); judged once from the store and remembered. */
int ctl__trial_feasible(ctl_t *c, ctl_trial *t);

/* ---- lifecycle (ctl_trial.c; each change is saved in the iteration's
   transaction) ---- */

/* A new pending trial of study s with id `id` (reserved) and `params`
   (taken), inserted in the store. NULL when the store refuses it. */
ctl_trial *ctl__trial_create(ctl_t *c, ctl_study *s, long id, json_t *params);
/* Adds a trial read from the store to s (takes row's JSON); NULL when
   its state text is unknown. */
ctl_trial *ctl__trial_adopt(ctl_t *c, ctl_study *s, store_trial *row);
void ctl__trial_free(ctl_trial *t);
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
/* t's study was resumed: t, if its study's stop ended it, runs again
   (STOPPED -> PENDING); 0 then, else -1. An asked trial (ask-only study)
   never runs again: one still being stopped by the study keeps running,
   its stop withdrawn (resolved as not applied), so its tell stands; one
   that ended stays as it ended. */
int ctl__trial_rerun(ctl_t *c, ctl_trial *t);
/* Kills it for a restart from `path` (plan RESTART). */
void ctl__trial_restart_from(ctl_t *c, ctl_trial *t, const char *path,
                             const char *reason);
/* Per active trial each tick: the kill after a stop's grace period. */
void ctl__trial_tick(ctl_t *c, ctl_trial *t, double now);
/* Seconds between a stop instruction and the kill (STOP_GRACE_S, or
   JIZHI_STOP_GRACE_S when set lower). */
double ctl__stop_grace(void);
/* Carries out (and releases) the instructions a scheduler returned. */
void ctl__trial_apply_sched(ctl_t *c, ctl_study *s, sched_t *by, sched_instr *ins, int k);
/* The objective of the current attempt (best or last, per the spec). */
double ctl__trial_result(const ctl_trial *t);

/* ---- what other files ask of a trial, here so that they call down ---- */

/* Stops a running study: its active trials are stopped (by_study), then
   the study moves to STOPPED. Here, not in ctl_study.c, because a
   trial's end may ask for it (failures in a row). */
void ctl__study_stop(ctl_t *c, ctl_study *s, const char *who, const char *reason);
/* An active trial's `load` unacknowledged for longer than the study's
   load timeout restarts the trial from the checkpoint (the fallback
   ctl_instr.c describes). */
void ctl__instr_load_fallback(ctl_t *c, ctl_trial *t, double now);
/* Each tick: ctl__instr_load_fallback for the trials of the `load`
   instructions waiting for longer than their study's load timeout, found
   from the instructions in flight rather than by a walk over the trials
   (a running study's active trials only, as before). */
void ctl__instr_load_fallbacks(ctl_t *c, double now);
/* A preempted (SUSPENDED) trial goes back to PENDING, loading its
   checkpoint at the next start, keeping the values it reported (the
   queue's resume, ctl_queue.c). */
void ctl__queue_resume(ctl_t *c, ctl_trial *t);

#endif
