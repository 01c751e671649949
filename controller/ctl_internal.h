/*  ctl_internal.h - the controller's objects, shared by its files:

    ctl.c        the object, the event loop, the outbox, transactions
    ctl_study.c  studies and trials: creation, scheduling, retries, ends
    ctl_msg.c    one handler per wire message type

    Ownership: the ctl owns its studies and dispatchers; a study owns its
    trials, spec and scheduler; instructions are owned by the ctl's list.
*/
#ifndef JZ_CTL_INTERNAL_H
#define JZ_CTL_INTERNAL_H

#include "ctl.h"

#include "../common/spec.h"
#include "../common/wire.h"
#include "../schedulers/sched.h"
#include "../store/store.h"

#include <jansson.h>
#include <string.h>

typedef struct ctl_study ctl_study;
typedef struct ctl_disp ctl_disp;

typedef struct {
    store_trial row;    /* persisted columns */
    ctl_study *study;   /* borrowed back-pointer */
    wire_peer peer;     /* the trial's routing id, len 0 until it speaks */
    double last_heard;  /* monotonic: last message from it or its dispatcher listing it */
    ctl_disp *disp;     /* where it runs, NULL when not started */
    int stop_requested; /* ended by a stop: mark "stopped", not failed */
    char stop_reason[128];   /* why it was stopped */
    double stop_sent;        /* monotonic time of the stop instruction, 0 if none */
    int kill_sent;           /* a kill went to its dispatcher */
    long gpus;               /* GPUs it holds on its dispatcher */
    char restart_from[1024]; /* checkpoint its pending restart loads, "" if none */
    int release;             /* pause --release: 1 checkpoint asked, 2 stop sent */
} ctl_trial;

struct ctl_study {
    store_study row; /* id, name, state, spec json */
    spec_t *spec;    /* owned */
    sched_t *sched;  /* owned */
    sched_t *mon[4]; /* monitors (early stopping, guard), owned */
    int nmon;
    ctl_trial **trials; /* owned, index = trial number */
    size_t ntrials, cap;
    int exhausted;   /* scheduler returned SCHED_DONE */
    int sched_dirty; /* scheduler state to persist this iteration */
    long next_id;    /* id reserved for the trial being suggested, 0 if none */
};

struct ctl_disp {
    char name[64];
    wire_peer peer;
    long slots, used;
    long ngpus;
    int gpu_ids[64];
    int gpu_used[64];
    double last_seen; /* monotonic */
    int alive;
};

/* An instruction sent to a trial and not yet acknowledged. */
typedef struct {
    long id; /* event id = instruction id */
    long trial_id;
    json_t *msg;      /* the `instruction` message, owned */
    double sent;      /* monotonic, first send */
    wire_peer waiter; /* CLI peer waiting for the ack, len 0 if none */
    long waiter_req;
} ctl_instr;

/* A message to send after the iteration's commit. */
typedef struct {
    wire_peer to;
    json_t *msg; /* owned */
} ctl_out;

struct ctl {
    store_t *store;
    void *zctx;
    void *router;
    char endpoint[512];
    char ckpt_root[1024];
    double lost_timeout;
    double started;     /* monotonic, controller start */
    int in_txn;         /* a transaction is open this iteration */
    long next_trial_id; /* next unused trials.id (ids are reserved before suggest) */
    ctl_study **studies;
    size_t nstudies;
    ctl_disp **disps;
    size_t ndisps;
    ctl_instr *instrs;
    size_t ninstrs, instr_cap;
    ctl_out *outbox;
    size_t nout, out_cap;
};

/* 1 while the trial's process is meant to be alive. */
static inline int ctl__trial_active(const ctl_trial *t)
{
    return !strcmp(t->row.state, "starting") || !strcmp(t->row.state, "running") ||
           !strcmp(t->row.state, "paused");
}

/* ---- ctl.c ---- */
/* Opens the iteration's transaction if needed. 0 or -1. */
int ctl__txn(ctl_t *c);
/* Queues msg (takes ownership) for `to`, sent after the commit. */
void ctl__send(ctl_t *c, const wire_peer *to, json_t *msg);
ctl_study *ctl__study_by_name(ctl_t *c, const char *name);
ctl_trial *ctl__trial_by_id(ctl_t *c, long id);
ctl_disp *ctl__disp_by_name(ctl_t *c, const char *name);
/* Persists a trial row (inside the iteration's transaction). */
int ctl__save_trial(ctl_t *c, ctl_trial *t);
/* Creates, records and queues an instruction for a running trial.
   `args` borrowed. Returns the instruction id or -1. */
long ctl__instruct(ctl_t *c, ctl_trial *t, const char *kind, const json_t *args,
                   const char *who, const char *reason, const wire_peer *waiter,
                   long waiter_req);
/* Resolves an outstanding instruction; answers its waiter. */
void ctl__instr_done(ctl_t *c, long id, int applied, const char *detail);
/* Re-pushes outstanding instructions of a trial (after it spoke). */
void ctl__instr_resend(ctl_t *c, ctl_trial *t);

/* ---- ctl_study.c ---- */
/* Loads the running studies from the store. 0 or -1. */
int ctl__load(ctl_t *c, char *err, size_t errsize);
/* Submits a spec (borrowed json). Fills *out with the study; sets
 *resumed and *finished. 0, or -1 with code/message for the error reply. */
int ctl__submit(ctl_t *c, json_t *spec_json, ctl_study **out, int *resumed, int *finished,
                const char **code, char *msg, size_t msgsize);
/* Starts trials where budget and slots allow, detects lost trials,
   finishes studies. Called once per iteration. */
void ctl__tick(ctl_t *c, double now);
/* A trial's process ended (from the dispatcher). */
void ctl__trial_exited(ctl_t *c, ctl_trial *t, const char *how, long code,
                       const char *message);
/* A trial is lost (its dispatcher no longer has it). */
void ctl__trial_lost(ctl_t *c, ctl_trial *t, const char *why);
/* A trial saved a checkpoint: record it and tell the schedulers. */
void ctl__trial_checkpoint(ctl_t *c, ctl_trial *t, long step, const char *path);
/* Stores a batch of metrics for a trial; runs schedulers. 0 or -1. */
int ctl__trial_metrics(ctl_t *c, ctl_trial *t, const store_point *pts, size_t n,
                       double now);
/* Stops a study (state stopped; its running trials are stopped). */
void ctl__study_stop(ctl_t *c, ctl_study *s, const char *who);
/* Resumes a stopped study. */
void ctl__study_resume(ctl_t *c, ctl_study *s, const char *who);
/* Status of a study as the `ok` fields of a status reply (new object). */
json_t *ctl__study_status(ctl_t *c, ctl_study *s);
/* pause --release: checkpoint, then exit, so the slot is free; the trial
   is "suspended" until ctl__trial_unsuspend puts it back to pending with
   JIZHI_LOAD_CHECKPOINT set to that checkpoint. */
void ctl__trial_release(ctl_t *c, ctl_trial *t, const char *who);
void ctl__trial_unsuspend(ctl_t *c, ctl_trial *t, const char *who);
/* Stops one trial (instruction, then kill after a grace period). */
void ctl__trial_stop(ctl_t *c, ctl_trial *t, const char *who, const char *reason);
void ctl__study_free(ctl_study *s);

/* ---- ctl_msg.c ---- */
/* Handles one decoded message from `from` (borrowed). */
void ctl__handle(ctl_t *c, const wire_peer *from, json_t *msg);

#endif
