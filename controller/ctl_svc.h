/*  ctl_svc.h - the services every file of the controller calls
    (ctl_svc.c): the iteration's transaction, the outbox, the refusal log,
    finding a trial, and saving a trial's or a study's row. They sit on
    the ground floor with the data (ctl_types.h) and the state machines
    (ctl_state.h): they call no handler, and the loop (ctl.c) that calls
    the handlers is above them all.

    Everything here runs inside the iteration: a change goes into the
    transaction ctl__txn opens, and what ctl__send queues leaves only
    after ctl.c committed it (an acknowledgement always means
    "persisted").
*/
#ifndef JZ_CTL_SVC_H
#define JZ_CTL_SVC_H

#include "ctl_state.h"
#include "ctl_types.h"

/* Opens the iteration's transaction if needed. 0 or -1 (logged). */
int ctl__txn(ctl_t *c);
/* Queues msg (takes ownership; NULL is ignored) for `to`, sent after the
   commit. */
void ctl__send(ctl_t *c, const wire_peer *to, json_t *msg);
/* Logs a refusal of a peer's message (or a malformed one): at most
   CTL_REFUSALS_LOGGED lines per CTL_REFUSAL_WINDOW_S, then one line
   counting those not logged, so that no peer can flood the log.
   JIZHI_REFUSAL_WINDOW_S in the environment shortens the window (tests). */
#define CTL_REFUSALS_LOGGED 20
#define CTL_REFUSAL_WINDOW_S 10.0
void ctl__refused(ctl_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A field of m's message as the schema's row has it (common/msg.h): a
   required one is there with its type, so a handler reads it without
   checking; an optional one absent or null gives 0 or NULL. Borrowed. */
long ctl__msg_int(const ctl_msg *m, const char *key);
const char *ctl__msg_str(const ctl_msg *m, const char *key);

/* Answers `error` with `code` and `text` (changes nothing). */
void ctl__msg_error(ctl_t *c, const wire_peer *to, long req, const char *code,
                    const char *text);
/* The loaded trial with this id (borrowed), or NULL. */
ctl_trial *ctl__trial_by_id(ctl_t *c, long id);
/* Persists the trial row. 0 or -1 (logged). */
int ctl__trial_save(ctl_t *c, ctl_trial *t);
/* Moves s (ctl_study_move_legal; another move is a programmer error) and
   persists the state (in the iteration's transaction). 0, or -1 for an
   illegal move or a store error (nothing changed). */
int ctl__study_move(ctl_t *c, ctl_study *s, store_study_state to);
/* Appends t to s (s owns it). */
void ctl__study_add_trial(ctl_study *s, ctl_trial *t);
/* The load timeout of the study's schedulers (sched_ops.load_timeout of
   the main scheduler, else of the first monitor that has one; else
   SCHED_LOAD_TIMEOUT_DEFAULT_S). <= 0: never. */
double ctl__study_load_timeout(const ctl_study *s);

#endif
