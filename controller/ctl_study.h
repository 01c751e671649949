/*  ctl_study.h - a study in the controller: its state machine, loading,
    submit, new trials from its scheduler, the periodic tick and status
    (ctl_study.c).

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
#ifndef JZ_CTL_STUDY_H
#define JZ_CTL_STUDY_H

/* included by ctl_internal.h, which declares the types used here */

struct ctl_study {
    store_study row;         /* id, name, spec json; row.state is written only by
                                ctl__study_move, from `state` */
    store_study_state state; /* the lifecycle state */
    spec_t *spec;            /* owned */
    sched_t *sched;          /* owned */
    sched_t *mon[4];         /* monitors (early stopping, guard), owned */
    int nmon;
    ctl_trial **trials; /* owned, index = trial number */
    size_t ntrials, cap;
    int exhausted;        /* scheduler returned SCHED_DONE */
    int sched_dirty;      /* scheduler state to persist this iteration */
    long next_id;         /* id reserved for the trial being suggested, 0 if none */
    char es_resource[64]; /* early stopping's resource metric, "" when none or "step" */
    int es_warned;        /* a warning said trials report no es_resource */
    char queue_why[200];  /* why it waits in the queue, "" when it does not
                             (ctl_queue.c, each tick) */
    int queue_unfit;      /* it waits because no alive dispatcher can ever run
                             one of its trials (ctl__queue_unfit) */
    long queued;          /* configurations waiting in the store's queue */
};

/* 1 when `from -> to` is a legal study move. */
int ctl_study_move_legal(store_study_state from, store_study_state to);

/* Moves s and persists the state (in the iteration's transaction).
   0, or -1 for an illegal move or a store error (nothing changed). */
int ctl__study_move(ctl_t *c, ctl_study *s, store_study_state to);

/* Loads the running studies from the store, and the stopped ones whose
   trials still run (the tick stops and, after the grace, kills them).
   0 or -1. */
int ctl__load(ctl_t *c, char *err, size_t errsize);
/* Submits a spec (borrowed json). Fills *out with the study; sets
 *resumed and *finished. 0, or -1 with code/message for the error reply. */
int ctl__submit(ctl_t *c, json_t *spec_json, ctl_study **out, int *resumed, int *finished,
                const char **code, char *msg, size_t msgsize);
ctl_study *ctl__study_by_name(ctl_t *c, const char *name);
/* Starts trials where budget and slots allow, detects lost trials,
   finishes studies. Called once per iteration. */
void ctl__tick(ctl_t *c, double now);
/* 1 when the running study has trials to start (pending, preempted or
   new within its budget); *active: its active trials, whatever the
   study's state (a stopped study's trials live until they exit). */
int ctl__study_wants(const ctl_study *s, long *active);
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
/* Stops a running study: its active trials are stopped (by_study). */
void ctl__study_stop(ctl_t *c, ctl_study *s, const char *who, const char *reason);
/* Resumes a stopped study; the trials its stop ended run again. */
void ctl__study_resume(ctl_t *c, ctl_study *s, const char *who);
/* Status of a study as the `ok` fields of a status reply (new object). */
json_t *ctl__study_status(ctl_t *c, ctl_study *s);
/* The load timeout of the study's schedulers (sched_ops.load_timeout of
   the main scheduler, else of the first monitor that has one; else
   SCHED_LOAD_TIMEOUT_DEFAULT_S). <= 0: never. */
double ctl__study_load_timeout(const ctl_study *s);
/* Appends t to s (s owns it). */
void ctl__study_add_trial(ctl_study *s, ctl_trial *t);
void ctl__study_free(ctl_study *s);

#endif
