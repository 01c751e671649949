/*  ctl_internal.h - the controller's objects, shared by its files. One
    object per file:

    ctl.c        the ctl object: event loop, the iteration's transaction,
                 the outbox (replies and pushes sent after the commit)
    ctl_trial.c  a trial: its state machine (ctl_trial.h) and lifecycle:
                 start, end, retry, exit, loss, stop, release, checkpoint
    ctl_instr.c  instructions to trials: send, resend, acknowledgement,
                 expiry, and the restart-from-checkpoint fallback of loads
    ctl_study.c  a study: its state machine (ctl_study.h), loading, submit,
                 new trials from the scheduler, the periodic tick, status
    ctl_disp.c   dispatchers: registry, slots and GPUs, silence
    ctl_idmap.c  trial id -> trial, a hash map
    ctl_interv.c a person's guarded changes (ctl_guard.c) and live forks
                 (ctl_fork.c): persisted state machines (ctl_interv.h)
    ctl_msg.c    the message table {type, peer role, handler} and the
                 handlers of docs/PROTOCOL.md
    ctl_auth.c   who speaks: CURVE and the ZAP handler, authorized keys,
                 Unix uids over ipc, the identity of each message

    Ownership: the ctl owns its studies, dispatchers, instructions and
    outbox; a study owns its trials, spec and schedulers; the id map
    borrows the trials.

    Out of memory: the controller cannot back a half-applied change out,
    so it allocates through util_xmalloc/util_xcalloc/util_xrealloc and
    has jansson allocate through util_xmalloc (set in ctl_new): a failed
    allocation logs one line and aborts, and the store makes the restart
    safe. The policy is stated in common/util.h.
*/
#ifndef JZ_CTL_INTERNAL_H
#define JZ_CTL_INTERNAL_H

#include "ctl.h"

#include "../common/authkeys.h"
#include "../common/ident.h"
#include "../common/spec.h"
#include "../common/wire.h"
#include "../schedulers/sched.h"
#include "../store/store.h"

#include <jansson.h>
#include <signal.h>
#include <string.h>

typedef struct ctl_study ctl_study;
typedef struct ctl_trial ctl_trial;
typedef struct ctl_disp ctl_disp;
typedef struct ctl_alerts ctl_alerts; /* ctl_alert.c */
typedef struct ctl_queue ctl_queue;   /* ctl_queue.c */

#include "ctl_idmap.h"
#include "ctl_interv.h"
#include "ctl_study.h"
#include "ctl_trial.h"

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
    ctl_idmap trials; /* every loaded trial by id (borrowed from the studies) */
    ctl_disp **disps;
    size_t ndisps;
    ctl_instr *instrs;
    size_t ninstrs, instr_cap;
    ctl_release *releases; /* waited releases past their checkpoint (ctl_instr.c) */
    size_t nreleases, release_cap;
    ctl_out *outbox;
    size_t nout, out_cap;
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
    ctl_interv *interv;           /* guarded changes and forks (ctl_interv.c), owned */
    double refusal_window;        /* ctl__refused: the window's start (monotonic) */
    long refusals_logged, refusals_dropped; /* ... and its counts */
};

/* ---- ctl.c ---- */
/* Opens the iteration's transaction if needed. 0 or -1. */
int ctl__txn(ctl_t *c);
/* Queues msg (takes ownership) for `to`, sent after the commit. */
void ctl__send(ctl_t *c, const wire_peer *to, json_t *msg);
/* Logs a refusal of a peer's message (or a malformed one): at most
   CTL_REFUSALS_LOGGED lines per CTL_REFUSAL_WINDOW_S, then one line
   counting those not logged, so that no peer can flood the log. */
#define CTL_REFUSALS_LOGGED 20
#define CTL_REFUSAL_WINDOW_S 10.0
void ctl__refused(ctl_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The loaded trial with this id, or NULL. */
ctl_trial *ctl__trial_by_id(ctl_t *c, long id);

/* ---- ctl_study_ops.c ---- */
/* study_delete (ctl_study_ops.c): removes the stopped or finished study
   `name` and all the store holds of it (trials, params, metrics, events,
   alerts, enqueued), and unloads it; its log and checkpoint folders are
   left and named in the answer. Only its owner or an admin (`who`); a
   running study, or a stopped one whose trials still run, is refused
   (bad_state). The answer's fields {deleted, trials, metrics, events,
   enqueued, checkpoints, logs} (caller owns), or NULL with code and err. */
json_t *ctl__study_delete(ctl_t *c, const ctl_ident *who, const char *name,
                          const char *label, const char **code, char *err, size_t size);
/* study_copy: a new study `new_name` with the stored spec of `name` (no
   trials), owned by `who`, who must be its owner or an admin. The
   answer's fields {study, from, trials, warning?} (caller owns), or NULL
   with code ("conflict" when new_name is taken) and err. */
json_t *ctl__study_copy(ctl_t *c, const ctl_ident *who, const char *name,
                        const char *new_name, const char **code, char *err, size_t size);
/* After a resume of s (t: the resumed trial, NULL for the study): lets the
   queue start what it can now, then 1 with why (the queue's words, as
   `jizhi queue` shows them) when t, or every trial of s, still waits;
   else 0. */
int ctl__study_waits(ctl_t *c, ctl_study *s, const ctl_trial *t, char *why, size_t size);

/* ---- ctl_ask.c ---- */
/* trial_ask {study} from `who`: a new RUNNING trial of the ask-and-tell
   study (spec ask_only) from its scheduler; the answer's fields {trial,
   number, token, params, study, endpoint, checkpoint_dir} (caller owns),
   or NULL with *code (unknown_study, forbidden, bad_state, try_again: the
   scheduler waits) and err; nothing changed then. msg borrowed. */
json_t *ctl__trial_ask(ctl_t *c, const ctl_ident *who, const json_t *msg,
                       const char **code, char *err, size_t size);
/* trial_tell {trial, value | values, state, message} from `who`: ends the
   asked trial (completed, failed or pruned; stopped or pruned when a stop
   came first). The answer's fields {trial, state, value} (caller owns), or
   NULL with *code (unknown_trial, forbidden, bad_state, malformed) and
   err; nothing changed then. */
json_t *ctl__trial_tell(ctl_t *c, const ctl_ident *who, const json_t *msg,
                        const char **code, char *err, size_t size);

/* ---- ctl_read.c ---- */
/* Answers a `read` request (msg borrowed) from `who` from the store: the
   data (caller owns), or NULL with *code and err set. A study's
   trial.env values are "***" unless `who` may steer it. Changes nothing. */
json_t *ctl__read(ctl_t *c, const ctl_ident *who, const json_t *msg, const char **code,
                  char *err, size_t size);
/* read_log from `from`: relays it to the dispatcher holding the trial's
   logs (answers an error at once when it cannot). msg borrowed. */
void ctl__read_log(ctl_t *c, const wire_peer *from, long req, const json_t *msg);
/* log_data from dispatcher `disp`: answers the waiting CLI. */
void ctl__log_data(ctl_t *c, const char *disp, const json_t *msg);
/* Answers the relayed reads past their deadline with an error. */
void ctl__read_expire(ctl_t *c, double now);

/* ---- ctl_instr.c ---- */
/* Creates, records and queues an instruction for a running trial.
   `args` borrowed. Returns the instruction id or -1. */
long ctl__instruct(ctl_t *c, ctl_trial *t, const char *kind, const json_t *args,
                   const char *who, const char *reason, const wire_peer *waiter,
                   long waiter_req);
/* The trial an outstanding instruction is addressed to, or -1 when no
   instruction with this id is outstanding. */
long ctl__instr_trial(const ctl_t *c, long id);
/* The outstanding instruction with this id (borrowed: valid until the
   next instruction is created or resolved), or NULL. */
ctl_instr *ctl__instr_get(ctl_t *c, long id);
/* Makes `from` wait for instruction `id`: answered when the trial
   acknowledges it, or `not_acknowledged` after wait_s seconds (the
   instruction stays outstanding). */
void ctl__instr_wait(ctl_t *c, long id, const wire_peer *from, long req, double wait_s);
/* Resolves an outstanding instruction; answers its waiter. */
void ctl__instr_done(ctl_t *c, long id, int applied, const char *detail);
/* trial_set's values checked against t's space: each of a tuned
   parameter must have its type (a number for float and int, a whole one
   for int, a text that reads as a number is taken as one; a choice's
   type) and, unless `force`, lie in the space; others go as given, for
   the program's ack to decide. The values to send (caller owns), or NULL
   with *code ("malformed", "bad_value", "out_of_space") and err. Changes
   nothing. */
json_t *ctl__set_check(const ctl_trial *t, const json_t *values, int force,
                       const char **code, char *err, size_t size);
/* Sends checked values (borrowed) to t as one batch: one instruction per
   value, one params generation once applied; `from` (may be NULL) waits
   for all of them, answered as ctl__instr_wait says. Returns the last
   instruction's id, or -1. */
long ctl__set_send(ctl_t *c, ctl_trial *t, const json_t *values, const char *who,
                   const wire_peer *from, long req, double wait_s);
/* Re-pushes outstanding instructions of a trial (after it spoke). */
void ctl__instr_resend(ctl_t *c, ctl_trial *t);
/* Resolves the instructions of trials that are no longer active. */
void ctl__instr_expire(ctl_t *c);
/* Per active trial each tick: a `load` unacknowledged for longer than
   the study's load timeout restarts the trial from the checkpoint. */
void ctl__instr_load_fallback(ctl_t *c, ctl_trial *t, double now);
void ctl__instr_free_all(ctl_t *c);

/* ---- ctl_disp.c ---- */
ctl_disp *ctl__disp_by_name(ctl_t *c, const char *name);
/* The named dispatcher, created (not alive, no slots) when new. */
ctl_disp *ctl__disp_get(ctl_t *c, const char *name);
/* Dispatchers silent for twice --lost-timeout, with no trial, are
   forgotten in memory (their name's binding stays in the store). At most CTL_MAX_DISPS
   are known at once: a new name beyond that is refused. */
#define CTL_MAX_DISPS 4096
/* The controller socket's listen queue (connections not yet accepted). */
#define CTL_LISTEN_BACKLOG 4096
/* The alive dispatcher with a free slot per rank and `gpus` free GPUs per
   rank that has the most free slots, or NULL. */
ctl_disp *ctl__disp_pick(ctl_t *c, long gpus, long ranks);
/* Binds t to d: a slot and `gpus` GPUs per rank (released by the study's
   trial.ranks). */
void ctl__disp_take(ctl_disp *d, ctl_trial *t, long gpus, long ranks);
/* Frees what t holds on its dispatcher, if any. */
void ctl__disp_release(ctl_trial *t);
/* Marks dispatchers silent for longer than the lost timeout as dead. */
void ctl__disp_check_silence(ctl_t *c, double now);
/* An admin frees dispatcher name `name` from its identity: forgotten in
   memory and in the store. -1 while such a dispatcher is alive or holds
   trials (or the store fails); nothing changed then. */
int ctl__disp_release_name(ctl_t *c, const char *name);
/* Queues a `kill` of t's current attempt to its dispatcher (if it has one). */
void ctl__disp_kill(ctl_t *c, ctl_trial *t, const char *reason);
void ctl__disp_free_all(ctl_t *c);

/* ---- ctl_alert.c ---- */
/* Loads the controller-wide rules of --alerts FILE (NULL: none). 0, or -1
   with err naming the file and field. */
int ctl__alerts_init(ctl_t *c, const char *path, char *err, size_t errsize);
void ctl__alerts_free(ctl_t *c);
/* Something happened: fires the rules of s's spec and of the controller
   that are `on` it, each at most once per (rule, study, trial; t NULL for
   the study itself). `value`: the failures in a row (FAILURES), else
   unused. detail borrowed. Returns 1 when a fired rule asks to stop the
   study (failures_in_a_row with stop_study). */
int ctl__alert(ctl_t *c, ctl_study *s, ctl_trial *t, spec_alert_on on, double value,
               const char *text, const json_t *detail);
/* Each tick: stalled trials; reaps and times out hooks. */
void ctl__alerts_tick(ctl_t *c, double now);
/* After the iteration's commit (committed 1) or its failure (0): starts
   the hooks of the alerts it stored, or drops them. */
void ctl__alerts_after_commit(ctl_t *c, int committed);

/* ---- ctl_queue.c ---- */
/* Loads the quotas. 0, or -1 with err. */
int ctl__queue_init(ctl_t *c, char *err, size_t errsize);
void ctl__queue_free(ctl_t *c);
/* The user a study's trials count for (quotas, fair share): the spec's
   owner, which the controller sets from the submitting identity
   (ctl__auth_submit_owner); "-" when none. Borrowed. */
const char *ctl_study_owner(const ctl_study *s);
/* 1 when dispatchers are alive and none of them could ever run one trial
   of `spec` (its ranks' slots, gpus x ranks GPUs), with why (the queue's
   words, as `jizhi queue` shows them); else 0. */
int ctl__queue_unfit(const ctl_t *c, const spec_t *spec, char *why, size_t size);
/* Each tick: starts waiting trials on free slots in queue order, sets
   each waiting study's queue_why, preempts for higher priorities. */
void ctl__queue_fill(ctl_t *c, double now);
/* A preempted (SUSPENDED) trial goes back to PENDING, loading its
   checkpoint at the next start, keeping the values it reported. */
void ctl__queue_resume(ctl_t *c, ctl_trial *t);
/* quota_set (msg borrowed): {user, slots, gpus (-1: no limit),
   max_priority ("normal" or "high")}, one not given keeping its value.
   Checks, persists and applies it; the admin's right is the caller's to
   check. The quota as {user, slots, gpus, max_priority} (caller owns), or
   NULL with *code and err (nothing changed). */
json_t *ctl__queue_quota_msg(ctl_t *c, const json_t *msg, const char **code, char *err,
                             size_t size);
/* At submit: 0 when `who` may ask for the spec's priority (normal or
   low: anyone; high: an admin, a trusted peer, or a user whose quota's
   max_priority an admin set to high), else -1 with err saying why and
   how to get it. Changes nothing. */
int ctl__queue_check_priority(const ctl_t *c, const ctl_ident *who, const json_t *spec,
                              char *err, size_t size);
/* What waits and why, and each user's usage and quota (caller owns):
   {waiting: [{study, owner, priority, running, pending, preempted, new,
   reason}], users: [{user, slots, gpus, quota_slots, quota_gpus}]}. */
json_t *ctl__queue_status(ctl_t *c);

/* ---- ctl_msg.c ---- */
/* Handles one decoded message from `from` (borrowed), sent by `who`. */
void ctl__handle(ctl_t *c, const wire_peer *from, const ctl_ident *who, json_t *msg);

/* ---- ctl_auth.c ---- */
/* Sets the router (created, not bound) up for `bind`: CURVE and the ZAP
   handler for tcp:// (refused without a server key unless cfg->insecure),
   nothing for ipc://. 0, or -1 with err. */
int ctl__auth_setup(ctl_t *c, const ctl_config *cfg, const char *bind, char *err,
                    size_t errsize);
/* The ZAP socket to poll, or NULL. */
void *ctl__auth_socket(const ctl_t *c);
/* Answers ZAP requests; applies a pending reload. */
void ctl__auth_poll(ctl_t *c);
/* The identity of a message's sender from its metadata. */
void ctl__auth_identify(const ctl_t *c, const wire_meta *m, ctl_ident *out);
void ctl__auth_fini(ctl_t *c);
/* The identity a message acts for: `who`, or, when `who` is trusted or an
   admin and the message says "who": "web:USER" with "as_role", that user
   and role (the web API acting for its token's user). */
void ctl__auth_effective(const json_t *msg, const ctl_ident *who, ctl_ident *out);
/* The study's owner: its spec's "owner", else the controller's own user.
   Borrowed. */
const char *ctl__auth_owner(const ctl_t *c, const ctl_study *s);
/* 1 when `who` may steer s (stop, resume, pause, set, enqueue, extend): its
   owner (role user), an admin, or a trusted peer. */
int ctl__auth_may_steer(const ctl_t *c, const ctl_ident *who, const ctl_study *s);
/* What `who` may put in a spec it submits, and its owner: an untrusted
   sender owns it (an "owner" naming another user is refused unless `who`
   is an admin), and only an admin or a trusted peer may give an alert a
   `hook` (it runs as the controller's user). 0, or -1 with err (nothing
   changed). spec is modified (its owner). */
int ctl__auth_submit_owner(const ctl_t *c, const ctl_ident *who, json_t *spec, char *err,
                           size_t errsize);

#endif
