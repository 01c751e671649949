/*  ctl_interv.h - a person's interventions on a running trial, each a
    persisted state machine (one row of the store's interventions table,
    written before the controller acts, read back when it starts):

    ctl_interv.c the list, loading and resuming, and the hooks below
    ctl_guard.c  a guarded change (`trial set --guard`): checkpoint, apply,
                 watch K reports with the divergence guard's loss-jump test
                 (schedulers/sched.h: sched_jump_judge) and the trend, then
                 keep or revert (load the checkpoint with the old values;
                 `--guard=values`: set the old values back)

                   CHECKPOINT --ack--> APPLY --ack--> WATCH --K reports--> KEPT
                        |                |              |  jump, NaN,
                        |  refused/ended |              |  worse trend
                        v                v              v
                     REFUSED          REFUSED         REVERT --ack--> REVERTED
                     (nothing changed)                  |   refused/ended
                                          ended: ENDED  '--------------> FAILED

    ctl_fork.c   a live fork (`trial fork`): the parent checkpoints, then
                 one sibling trial per value starts from that checkpoint
                 (new trials of the study: the queue's slots, parallel
                 budget and quotas; lineage parent = the forked trial);
                 once every sibling has reported its objective K steps past
                 the fork step (or `trial fork --decide`), the best
                 continues and the others are stopped (keep best), or all
                 continue (keep all)

                   CHECKPOINT --ack--> RUNNING --K steps or --decide--> DECIDED
                        |
                        '--refused/ended--> REFUSED (nothing changed)

    Ownership: the ctl owns its interventions (ctl->interv); each keeps
    its persisted data (JSON) and, in memory only, the CLI or web request
    waiting for its outcome. At most one unfinished intervention per trial.
    Resumed after a restart: the instruction of the current state is sent
    again (a checkpoint, the change, the revert), the watch goes on from
    the reports counted so far, pending siblings load the fork's
    checkpoint when they start.
*/
#ifndef JZ_CTL_INTERV_H
#define JZ_CTL_INTERV_H

#include "ctl_types.h"

typedef struct ctl_interv ctl_interv; /* the list (ctl_interv.c) */

/* The kinds and states (store_iv_kind, store_guard_state,
   store_fork_state) and their names are the store's (store/store.h), as
   the trial states are: text only in the store's SQL and on the wire. */

/* ---- the state machines (pure; ctl_interv.c) ---- */
/* 1 when the move is legal (the diagrams above). */
int ctl_guard_move_legal(store_guard_state from, store_guard_state to);
int ctl_fork_move_legal(store_fork_state from, store_fork_state to);

/* ---- the controller's side (ctl_interv_ev.c passes the events to
   ctl_guard.c and ctl_fork.c) ---- */
/* Reads the unfinished interventions back and resumes them (after the
   studies are loaded). 0, or -1 with err. */
int ctl__interv_load(ctl_t *c, char *err, size_t errsize);
void ctl__interv_free(ctl_t *c); /* ctl_interv.c */
/* These three hear the lower files' events through ctl.on (ctl_types.h),
   which ctl_new points at them. An instruction was resolved (from
   ctl__instr_done). */
void ctl__interv_instr_done(ctl_t *c, long id, long trial_id, int applied,
                            const char *why);
/* A trial reported (after ctl__trial_metrics stored the points). */
void ctl__interv_metrics(ctl_t *c, ctl_trial *t, const store_point *pts, size_t n);
/* A trial saved a checkpoint (after ctl__trial_checkpoint recorded it). */
void ctl__interv_checkpoint(ctl_t *c, ctl_trial *t);
/* Each tick: trials that ended, waiters whose wait ran out, forks to decide. */
void ctl__interv_tick(ctl_t *c, double now);

/* trial_set with "guard" (msg borrowed; values checked by ctl__set_check,
   borrowed): starts a guarded change of t; `from` (NULL: none) is answered
   with its outcome, or `not_acknowledged` after wait_s. 0, or -1 with
   *code and err (nothing changed). */
int ctl__guard_start(ctl_t *c, ctl_trial *t, const json_t *values, const json_t *guard,
                     const char *who, const wire_peer *from, long req, double wait_s,
                     const char **code, char *err, size_t size);

/* trial_fork (msg borrowed): forks t into siblings, or with "decide"
   decides its running fork now. The answer's fields (caller owns) are
   sent now for a fork not waited for (--no-wait) or a decision; a waited
   fork is answered by the controller once it has decided. NULL with
   *code and err (nothing changed). */
json_t *ctl__fork_msg(ctl_t *c, ctl_trial *t, const json_t *msg, const char *who,
                      const wire_peer *from, long req, double wait_s, const char **code,
                      char *err, size_t size);

/* ---- shared by ctl_interv.c, ctl_guard.c and ctl_fork.c ---- */

/* One intervention. */
typedef struct {
    long id; /* interventions.id */
    long study_id, trial_id;
    store_iv_kind kind;
    int state;        /* store_guard_state or store_fork_state, as kind says */
    json_t *data;     /* persisted with the state, owned */
    long instr;       /* the instruction it waits for, -1 none (memory) */
    wire_peer waiter; /* the request waiting for its outcome, len 0 none */
    long waiter_req;
    double wait_until; /* monotonic; 0: no limit */
    double wait_s;
} ctl_iv;

/* ctl__iv_add adds one (data taken) to the list, inserted in the store
   with its state: NULL on a store error (data released). ctl__iv_move,
   the one transition of both machines, moves iv to `to` (a state of its
   kind) and persists it with its data before anything is sent: 0, or -1
   for an illegal move (logged; iv unchanged) or a store error.
   ctl__iv_save persists iv's state (done when it is final) and data: 0
   or -1. */
ctl_iv *ctl__iv_add(ctl_t *c, store_iv_kind kind, ctl_trial *t, int state, json_t *data);
int ctl__iv_move(ctl_t *c, ctl_iv *iv, int to);
int ctl__iv_save(ctl_t *c, ctl_iv *iv);
/* The name of iv's state, for messages and outputs, and its kind in
   messages: "guarded change", "fork" (static). */
const char *ctl__iv_state_name(const ctl_iv *iv);
const char *ctl__iv_what(const ctl_iv *iv);
/* The unfinished intervention on (or, for a fork, of a sibling) trial id. */
ctl_iv *ctl__iv_of_trial(ctl_t *c, long trial_id);
/* Answers iv's waiter with msg (taken) and forgets it. */
void ctl__iv_answer(ctl_t *c, ctl_iv *iv, json_t *msg);
/* The list (created empty when there is none yet; owned by c). */
struct ctl_interv {
    ctl_iv *v;
    size_t n, cap;
};
ctl_interv *ctl__iv_list(ctl_t *c);
/* A new zeroed entry at the list's end (instr -1), borrowed until the
   list changes. */
ctl_iv *ctl__iv_push(ctl_t *c);
/* Drops the finished ones whose waiter was answered. */
void ctl__iv_sweep(ctl_t *c);

/* One kind's events, in ctl_guard.c (ctl__guard_ops) and ctl_fork.c
   (ctl__fork_ops); ctl_interv_ev.c passes each to the kind of the
   intervention it concerns. */
typedef struct {
    /* an instruction it waited for was resolved */
    void (*instr_done)(ctl_t *c, ctl_iv *iv, int applied, const char *why);
    /* t (the trial or a fork's sibling) reported */
    void (*metrics)(ctl_t *c, ctl_iv *iv, ctl_trial *t, const store_point *pts, size_t n);
    void (*tick)(ctl_t *c, ctl_iv *iv, double now);         /* while unfinished */
    void (*checkpoint)(ctl_t *c, ctl_iv *iv, ctl_trial *t); /* t saved one */
    /* after a restart: the state's instruction again */
    void (*resume)(ctl_t *c, ctl_iv *iv);
} ctl_iv_ops;
extern const ctl_iv_ops ctl__guard_ops;
extern const ctl_iv_ops ctl__fork_ops;
/* 1 when iv is in a final state. */
int ctl__iv_done(const ctl_iv *iv);
/* The data's integer `k` (dflt when absent) and text `k` ("" when absent,
   borrowed). */
long ctl__iv_long(const ctl_iv *iv, const char *k, long dflt);
const char *ctl__iv_str(const ctl_iv *iv, const char *k);
/* 1 with why in err (code bad_state) when t already has an unfinished
   guarded change or fork (as the trial or one of a fork's siblings). */
int ctl__iv_busy(ctl_t *c, const ctl_trial *t, char *err, size_t size);

#endif
