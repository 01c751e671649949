/*  ctl_types.h - the controller's objects: the data of the ctl, its
    studies, trials, dispatchers, instructions and outbox, and nothing
    else (no functions). The ground floor of controller/: every file of
    the controller reads these, and no definition here calls a file of
    it. Who does what with them:

    ctl_svc.c    the services every handler uses: the iteration's
                 transaction, the outbox, the refusal log, lookups and
                 saving a trial or study row (ctl_svc.h)
    ctl_state.c  the state machines of a trial and a study: legal moves,
                 refusals (ctl_state.h; pure: no store, no sockets)
    the others   handlers layered over those two, each listed in
                 ctl_internal.h; ctl.c, the event loop, on top

    Ownership: the ctl owns its studies, dispatchers, instructions and
    outbox; a study owns its trials, spec and schedulers; the id map
    borrows the trials.
*/
#ifndef JZ_CTL_TYPES_H
#define JZ_CTL_TYPES_H

#include "../common/authkeys.h"
#include "../common/ident.h"
#include "../common/spec.h"
#include "../common/wire.h"
#include "../schedulers/sched.h"
#include "../store/store.h"
#include "ctl_due.h"
#include "ctl_idmap.h"

#include <jansson.h>
#include <signal.h>

/* The same type as ctl.h's (the public face, which this header does not
   include: the loop that defines ctl.h's functions sits on top). */
typedef struct ctl ctl_t;
typedef struct ctl_study ctl_study;
typedef struct ctl_trial ctl_trial;
typedef struct ctl_disp ctl_disp;
typedef struct ctl_alerts ctl_alerts; /* ctl_alert.c */
typedef struct ctl_queue ctl_queue;   /* ctl_queue.c */

/* ---- a trial (its states and moves: ctl_state.h) ---- */

/* What the controller drives a live trial towards (ctl_state.h). */
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
    store_trial row;          /* persisted columns; row.state, the lifecycle
                                 state, is written only by ctl_trial_move */
    ctl_trial_plan plan;      /* see above */
    char plan_reason[128];    /* why it is being stopped (STOP, RELEASE) */
    int plan_by_study;        /* STOP came from its study's stop */
    int plan_pruned;          /* STOP came from a scheduler: the exit is PRUNED */
    double plan_since;        /* monotonic time of the stop instruction, 0 if none */
    int kill_sent;            /* a kill went to its dispatcher this attempt */
    char load_on_start[1024]; /* checkpoint the next start loads, "" if none */
    long eval_on_start;       /* step the next start is asked to report its objective
                                 at (JIZHI_EVAL_AT_STEP: a fork's judgment), 0 if none */
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
    double due_at;     /* when its next check is due (ctl_due.h) ... */
    int due_queued;    /* ... while 1 */
};

/* ---- a study (its states and moves: ctl_state.h) ---- */

struct ctl_study {
    store_study row; /* id, name, spec json; row.state, the lifecycle
                        state, is written only by ctl__study_move */
    spec_t *spec;    /* owned */
    sched_t *sched;  /* owned */
    sched_t *mon[4]; /* monitors (early stopping, guard), owned */
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
    ctl_due due;          /* when each trial is next looked at (ctl_due.h) */
    long due_checked;     /* trials the periodic pass looked at (tests) */
    long by_state[TRIAL_STATE_COUNT]; /* its trials in each state, kept by
                                         ctl__study_add_trial and ctl_trial_move
                                         so that the loop's per-iteration work
                                         (the queue, a study's end) does not walk
                                         every trial */
};

/* ---- dispatchers, instructions, peers, the outbox ---- */

/* At most this many dispatchers are known at once: a new name beyond that
   is refused (ctl_disp.c). */
#define CTL_MAX_DISPS 4096

struct ctl_disp {
    char name[64];
    wire_peer peer;
    long slots, used;
    long ngpus;
    int gpu_ids[64];
    int gpu_used[64];
    double last_seen; /* monotonic */
    int alive;
    char owner[72]; /* the principal (ctl_ident) its name is bound to */
};

/* An instruction sent to a trial and not yet acknowledged. */
typedef struct {
    long id; /* event id = instruction id */
    long trial_id;
    json_t *msg;      /* the `instruction` message, owned */
    double sent;      /* monotonic, first send */
    wire_peer waiter; /* CLI peer waiting for the ack, len 0 if none */
    long waiter_req;
    double wait_until; /* monotonic: the waiter is answered `not_acknowledged`
                          after it (0: never) */
    double wait_s;     /* the wait it was given, for that answer */
    long batch;        /* a `trial set` of several values: the first one's id
                          (one params generation for all), 0 alone */
    int release;       /* the checkpoint of a person's `pause --release` */
    int nbatch;        /* values in its batch */
    int nrefused;      /* waiter's instruction of a batch: values of the batch the
                          trial refused so far ... */
    char refused[400]; /* ... and what it said */
    char untaken[160]; /* a stop the trial did not take, what it said: carried
                          out all the same by the kill after the grace
                          (ctl__instr_stops_done) */
} ctl_instr;

/* A person's `pause --release` whose checkpoint the trial saved: the
   waiter is answered once the trial has exited (suspended) or ended. */
typedef struct {
    long trial_id;
    wire_peer waiter;
    long waiter_req;
    double until; /* monotonic: answered `not_acknowledged` after it */
    double wait_s;
} ctl_release;

/* A `read_log` relayed to a dispatcher, waiting for its `log_data`. */
typedef struct {
    long id;          /* sent to the dispatcher, echoed in its answer */
    char disp[64];    /* the dispatcher asked */
    wire_peer waiter; /* the CLI that asked */
    long waiter_req;
    double deadline; /* monotonic: answered with an error after it */
} ctl_logread;

/* How peers reach the controller (ctl_auth.c). */
typedef enum {
    CTL_TR_IPC = 0, /* Unix uids (SO_PEERCRED) */
    CTL_TR_CURVE,   /* tcp:// with CURVE: authorized keys */
    CTL_TR_TRUSTED, /* tcp:// --insecure, inproc://: every peer is the admin */
} ctl_transport;

/* The sender of one message. */
typedef struct {
    ident_t id;         /* role IDENT_NONE: anonymous (may only speak as a trial) */
    int trusted;        /* the controller's own user over ipc, or --insecure: may do
                           everything, dispatcher work included */
    char principal[72]; /* what it proves: "key:<z85>", "uid:<n>", "trusted";
                           a dispatcher name is bound to it */
} ctl_ident;

/* What a handler gets: the message, its sender, and the sender's
   identity as the schema's row established it. All borrowed. */
typedef struct {
    const wire_peer *from;
    json_t *msg;
    long req;                  /* the request's `req`, -1 when none */
    ctl_trial *trial;          /* MSG_AUTH_TRIAL: the authenticated trial */
    ctl_disp *disp;            /* MSG_AUTH_DISP: the registered dispatcher */
    const ctl_ident *who;      /* the sender as the transport identified it */
    const wire_points *points; /* `metrics`: its points when wire_recv_points read
                                  them (msg's "points" is then []), else NULL */
} ctl_msg;

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
    double started;       /* monotonic, controller start */
    double trials_ticked; /* monotonic, the last pass over every trial (ctl__tick) */
    int in_txn;           /* a transaction is open this iteration */
    long next_trial_id;   /* next unused trials.id (ids are reserved before suggest) */
    ctl_study **studies;
    size_t nstudies;
    ctl_idmap trials;   /* every loaded trial by id (borrowed from the studies) */
    ctl_disp **disps;   /* owned, in the order they registered (ctl__disp_pick) */
    ctl_disp **by_name; /* the same, sorted by name: a message's dispatcher
                           found by binary search (ctl_disp.c) */
    size_t ndisps;
    ctl_instr *instrs;
    size_t ninstrs, instr_cap;
    ctl_release *releases; /* waited releases past their checkpoint (ctl_instr.c) */
    size_t nreleases, release_cap;
    ctl_out *outbox;
    size_t nout, out_cap;
    wire_points rx_points; /* the received metrics' points (wire_recv_points), owned */
    ctl_logread *logreads; /* relayed read_log requests (ctl_read.c) */
    size_t nlogreads, logread_cap;
    long next_logread;
    ctl_transport transport;      /* ctl_auth.c */
    void *zap;                    /* ZAP handler socket (CURVE), or NULL */
    authkeys_t keys;              /* authorized keys (CURVE) */
    char keys_path[1024];         /* their file, "" if none */
    ident_t self;                 /* the controller's own user (admin) */
    volatile sig_atomic_t reload; /* SIGHUP: reread keys_path */
    ctl_alerts *alerts;           /* alert rules and running hooks (ctl_alert.c), owned */
    ctl_queue *queue;             /* quotas and why studies wait (ctl_queue.c), owned */
    struct ctl_interv *interv;    /* guarded changes and forks (ctl_interv.c), owned */
    /* Events of the lower files that a file above them hears of: an
       instruction resolved (ctl__instr_done, last), a trial's metrics
       stored (ctl__trial_metrics) or checkpoint recorded
       (ctl__trial_checkpoint). ctl_new points them at ctl_interv_ev.c,
       which passes them to a guarded change or fork (they may instruct,
       start or stop trials). The only calls up that a lower file makes,
       through pointers the loop sets; NULL: nobody hears. */
    struct {
        void (*instr_done)(ctl_t *c, long id, long trial_id, int applied,
                           const char *why);
        void (*trial_metrics)(ctl_t *c, ctl_trial *t, const store_point *pts, size_t n);
        void (*trial_checkpoint)(ctl_t *c, ctl_trial *t);
    } on;
    double refusal_window; /* ctl__refused: the window's start (monotonic) */
    long refusals_logged, refusals_dropped; /* ... and its counts */
};

#endif
