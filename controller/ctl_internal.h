/*  ctl_internal.h - the controller's files, what each one offers the
    others, and in which order they may call each other. Every file of
    controller/ includes this header. One object per file, on floors: a
    file calls only files below it, never one above, so no two files call
    each other (tests/integration/test_layers.py holds the code to it):

    ctl.c          top: the event loop (poll, apply, tick, commit, flush)
    ctl_msg.c      the dispatch of a message through its type's handler
                   (ctl_msg.h) and the trials' messages
    ctl_msg_cli.c  the CLI's and web server's messages
    ctl_interv_ev.c  a person's interventions: the controller's events
                   passed to the guarded change or the fork they concern
    ctl_fork.c     a live fork (ctl_interv.h)
    ctl_study_ops.c  study_delete, study_copy, what a resume waits for
    ctl_ask.c      ask-and-tell: trial_ask, trial_tell
    ctl_queue.c    quotas, priorities, the queue that starts waiting trials
    ctl_study.c    a study: loading, submit, new trials from the
                   scheduler, its part of the periodic tick, status
    ctl_msg_disp.c the dispatchers' messages
    ctl_trial.c    a trial's lifecycle: start, end, retry, exit, loss,
                   stop, release, checkpoint, the load fallback; the stop
                   of its study (a trial's end may ask for it); its
                   metrics and checkpoints are told to ctl.on (ctl_types.h)
    ctl_guard.c    a guarded change (ctl_interv.h)
    ctl_read.c     read and read_log requests
    ctl_interv.c   the list of interventions the guard and the fork share,
                   and their state machines
    ctl_instr.c    instructions to trials: send, resend, acknowledgement,
                   expiry (a resolved one is told to ctl.on.instr_done)
    ctl_disp.c     dispatchers: registry, slots and GPUs, silence
    ctl_alert.c    alert rules and their hooks
    ctl_auth.c     who speaks: CURVE and the ZAP handler, authorized keys,
                   Unix uids over ipc, the identity of each message
    ctl_svc.c      ground: the iteration's transaction, the outbox and
                   error answers, the refusal log, lookups, saving rows
    ctl_state.c    ground: the trial and study state machines (ctl_state.h)
    ctl_idmap.c    ground: trial id -> trial, a hash map
    ctl_due.c      ground: when each trial is next due, a min-heap
    ctl_types.h    ground: the data of them all; its `on` pointers, set by
                   ctl_new, are the only calls up (to ctl_interv_ev.c)

    Out of memory: the controller cannot back a half-applied change out,
    so it allocates through util_xmalloc/util_xcalloc/util_xrealloc and
    has jansson allocate through util_xmalloc (set in ctl_new): a failed
    allocation logs one line and aborts, and the store makes the restart
    safe. The policy is stated in common/util.h.
*/
#ifndef JZ_CTL_INTERNAL_H
#define JZ_CTL_INTERNAL_H

#include "ctl_idmap.h"
#include "ctl_interv.h"
#include "ctl_state.h"
#include "ctl_study.h"
#include "ctl_svc.h"
#include "ctl_trial.h"
#include "ctl_types.h"

#include <string.h>

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
/* Resolves an outstanding instruction; answers its waiter. A stop the
   trial did not take (applied 0) while it is still being stopped stays
   outstanding: the kill after the grace carries it out (ctl__instr_stops_done). */
void ctl__instr_done(ctl_t *c, long id, int applied, const char *detail);
/* Trial t's acknowledgement of instruction `id`: ctl__instr_done when it
   is outstanding; else, when a controller's start resolved t's event `id`
   as not applied (the instruction was lost with its predecessor), the
   event is resolved again as t says, and an applied one changes t's
   persisted state as ctl__instr_done's would. Returns 1 when that late
   acknowledgement was of a stop t took (the caller gives t the stop's plan
   again, which went with the last controller), else 0. */
int ctl__instr_ack(ctl_t *c, ctl_trial *t, long id, int applied, const char *detail);
/* t ended while being stopped (applied 1: they are resolved as carried
   out), or its stop was withdrawn (applied 0): its outstanding stop
   instructions are resolved, `how` (and what the trial said if it did not
   take them) as the result. */
void ctl__instr_stops_done(ctl_t *c, ctl_trial *t, int applied, const char *how);
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
void ctl__instr_free_all(ctl_t *c);

/* ---- ctl_disp.c ---- */
ctl_disp *ctl__disp_by_name(ctl_t *c, const char *name);
/* The named dispatcher, created (not alive, no slots) when new. */
ctl_disp *ctl__disp_get(ctl_t *c, const char *name);
/* Dispatchers silent for twice --lost-timeout, with no trial, are
   forgotten in memory (their name's binding stays in the store). At most
   CTL_MAX_DISPS (ctl_types.h) are known at once. */
/* The controller socket's listen queue (connections not yet accepted). */
#define CTL_LISTEN_BACKLOG 4096
/* ctl__tick's pass over the trials (timeouts, silence, a stopped study's
   trials) runs at most this often, not once per loop iteration: with
   10 000 trials and a message per iteration it was the controller's
   largest cost per message (bench/scale.sh). The poll's own timeout is
   50 ms, so an idle controller ticks as before. The pass looks only at
   the trials that are due (ctl_due.h), not at every trial. */
#define CTL_TRIAL_TICK_S 0.05
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

/* ---- ctl.c ---- */
/* The periodic work of one iteration (after its messages, before the
   commit): silent dispatchers, expired reads, each study's trials, the
   queue, finished studies. */
void ctl__tick(ctl_t *c, double now);

/* ---- ctl_msg.c ---- */
/* Handles one decoded message from `from` (borrowed), sent by `who`;
   `points` (borrowed, may be NULL): a metrics message's points read by
   wire_recv_points, when it read any. */
void ctl__handle(ctl_t *c, const wire_peer *from, const ctl_ident *who, json_t *msg,
                 const wire_points *points);

/* ---- ctl_auth.c ---- */
/* Sets the router (created, not bound) up for `bind`: CURVE and the ZAP
   handler for tcp:// (refused without a server key unless `insecure`),
   nothing for ipc://. key_path, authorized_keys: ctl_config's (NULL: the
   key directory's). 0, or -1 with err. */
int ctl__auth_setup(ctl_t *c, const char *bind, int insecure, const char *key_path,
                    const char *authorized_keys, char *err, size_t errsize);
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
