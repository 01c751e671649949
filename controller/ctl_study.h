/*  ctl_study.h - a study in the controller (ctl_study.c): loading,
    submit, new trials from its scheduler, the periodic tick and status.
    Its data is in ctl_types.h, its states and legal moves in ctl_state.h,
    ctl__study_move in ctl_svc.h.
*/
#ifndef JZ_CTL_STUDY_H
#define JZ_CTL_STUDY_H

#include "ctl_types.h"

/* Loads the running studies from the store, and the stopped ones whose
   trials still run (the tick stops and, after the grace, kills them).
   0 or -1. */
int ctl__load(ctl_t *c, char *err, size_t errsize);
/* Submits a spec (borrowed json). Fills *out with the study; sets
 *resumed and *finished. 0, or -1 with code/message for the error reply. */
int ctl__submit(ctl_t *c, json_t *spec_json, ctl_study **out, int *resumed, int *finished,
                const char **code, char *msg, size_t msgsize);
ctl_study *ctl__study_by_name(ctl_t *c, const char *name);
/* Each iteration (ctl__tick), before the queue fills free slots: s's
   active trials that are lost, over the time budget, past a stop's grace
   or waiting on a load are handled. */
void ctl__study_tick_trials(ctl_t *c, ctl_study *s, double now);
/* Each iteration, after the queue filled free slots, for a running s:
   saves its scheduler, finishes it when nothing is left. */
void ctl__study_tick_end(ctl_t *c, ctl_study *s);
/* 1 when the running study has trials to start (pending, preempted or
   new within its budget); *active: its active trials, whatever the
   study's state (a stopped study's trials live until they exit). */
int ctl__study_wants(const ctl_study *s, long *active);
/* s's active trials (starting, running, paused), from its counts. */
long ctl__study_active(const ctl_study *s);
/* A new pending trial of s (the last of s->trials): the oldest
   configuration a person queued, else the scheduler's suggestion. 1
   created, 0 not now (the scheduler waits), -1 nothing more. */
int ctl__study_new_trial(ctl_t *c, ctl_study *s);
/* Starts s's next trial on d: a preempted one (resumed from its
   checkpoint), else a pending one, else a new one from the scheduler.
   1 started, 0 not now (the scheduler waits), -1 nothing left. */
int ctl__study_start_next(ctl_t *c, ctl_study *s, ctl_disp *d);
/* The study named `name`: the loaded one, else opened from the store (a
   finished or stopped study) and added. NULL with code/msg for the error
   reply. */
ctl_study *ctl__study_load(ctl_t *c, const char *name, const char **code, char *msg,
                           size_t msgsize);
/* Queues a configuration (borrowed; a missing const is filled in) after
   checking it against the space; it runs before the scheduler's next
   suggestion. 0, or -1 with code/msg ("bad_params": "params.lr: ..."). */
int ctl__study_enqueue(ctl_t *c, ctl_study *s, json_t *params, const char *who,
                       const char **code, char *msg, size_t msgsize);
/* Adds n trials to the budget (persisted); a finished study runs again.
   0, or -1 with code/msg. */
int ctl__study_extend(ctl_t *c, ctl_study *s, long n, const char *who, const char **code,
                      char *msg, size_t msgsize);
/* Resumes a stopped study; the trials its stop ended run again (one still
   being stopped runs again when it has ended: ctl_trial.c, s_end). */
void ctl__study_resume(ctl_t *c, ctl_study *s, const char *who);
/* Status of a study as the `ok` fields of a status reply (new object). */
json_t *ctl__study_status(ctl_t *c, ctl_study *s);
void ctl__study_free(ctl_study *s);

#endif
