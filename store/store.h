/*  store.h - the SQLite store: the schema and all of jizhi's SQL.

    One store_t wraps one database file (WAL mode, prepared statements).
    While a controller runs it is the only writer; CLI commands open the
    same file read-only for list/show/export. Writes happen inside
    store_begin/store_commit so that the controller can commit a whole
    event-loop iteration (metrics of many trials, state changes) at once
    and acknowledge only after the commit.

    Errors: functions return 0 / an id on success and -1 on failure, with
    the SQLite message in store_errmsg(). Nothing here prints.
*/
#ifndef JZ_STORE_H
#define JZ_STORE_H

#include <jansson.h>
#include <stddef.h>

typedef struct store store_t;

/* The trial states, in the order of the `state` column's text. Rows hold
   these values; they become text only in the store's SQL (the column
   stays text) and at the wire, JSON and CLI output; controller/ctl_state.h holds the
   diagram of the legal moves between them. */
typedef enum {
    TRIAL_PENDING,   /* waits for a free slot */
    TRIAL_STARTING,  /* start sent to a dispatcher, not yet heard */
    TRIAL_RUNNING,   /* its process runs */
    TRIAL_PAUSED,    /* its process runs, paused by an instruction */
    TRIAL_SUSPENDED, /* released by pause --release: checkpointed, no process */
    TRIAL_COMPLETED, /* ended with a result */
    TRIAL_FAILED,    /* ended without one, retries used up */
    TRIAL_STOPPED,   /* ended by a stop (a person, the budget, the study's stop) */
    TRIAL_PRUNED,    /* ended by its scheduler's early-stopping decision (ASHA,
                        Hyperband, median, the divergence guard) */
    TRIAL_STATE_COUNT
} store_trial_state;

/* The study states (diagram in controller/ctl_state.h). */
typedef enum {
    STUDY_RUNNING,
    STUDY_STOPPED,
    STUDY_FINISHED,
    STUDY_STATE_COUNT
} store_study_state;

/* A person's interventions on a running trial (store_interv.c), each a
   state machine of the controller: the diagrams and the legal moves are
   in controller/ctl_interv.h. Rows hold these values; kind and state
   become text only in the store's SQL (the columns stay text) and in the
   JSON it writes for the wire and the outputs. */
typedef enum {
    IV_GUARD, /* a guarded change (`trial set --guard`) */
    IV_FORK,  /* a live fork (`trial fork`) */
    IV_KIND_COUNT
} store_iv_kind;

typedef enum {
    GUARD_CHECKPOINT, /* the trial was asked for a checkpoint */
    GUARD_APPLY,      /* the change was sent */
    GUARD_WATCH,      /* applied: the next K reports are watched */
    GUARD_REVERT,     /* diverged: the revert was sent */
    GUARD_KEPT,       /* final: the change stands */
    GUARD_REVERTED,   /* final: the old values (and checkpoint) are back */
    GUARD_REFUSED,    /* final: nothing was changed (no checkpoint, refused) */
    GUARD_ENDED,      /* final: the trial ended while it was watched */
    GUARD_FAILED,     /* final: the revert was refused or the trial ended first */
    GUARD_COUNT
} store_guard_state;

typedef enum {
    FORK_CHECKPOINT, /* the parent was asked for a checkpoint */
    FORK_RUNNING,    /* the siblings run (or wait for a slot) */
    FORK_DECIDED,    /* final: the best kept (or all) */
    FORK_REFUSED,    /* final: no checkpoint, nothing created */
    FORK_COUNT
} store_fork_state;

/* State <-> column text. The names are static strings ("pending", ...);
   an out-of-range value gives "invalid". _parse returns 0 and sets *out,
   or -1 when the text names no state. */
const char *store_trial_state_name(store_trial_state st);
int store_trial_state_parse(const char *text, store_trial_state *out);
const char *store_study_state_name(store_study_state st);
int store_study_state_parse(const char *text, store_study_state *out);
/* 1 for the final states of an attempt: COMPLETED, FAILED, STOPPED, PRUNED. */
int store_trial_state_ended(store_trial_state st);
/* An intervention's kind and state (a store_guard_state for IV_GUARD, a
   store_fork_state for IV_FORK) <-> column text, as above: "guard",
   "fork"; "checkpoint", "watch", ... (static; "invalid" out of range).
   _parse returns 0 and sets *out, or -1 when the text names none of
   kind's. _final: 1 for a final state (KEPT and after, DECIDED and
   after). */
const char *store_iv_kind_name(store_iv_kind kind);
int store_iv_kind_parse(const char *text, store_iv_kind *out);
const char *store_iv_state_name(store_iv_kind kind, int state);
int store_iv_state_parse(store_iv_kind kind, const char *text, int *out);
int store_iv_state_final(store_iv_kind kind, int state);
/* The state an answer to a guarded change or fork names in its field of
   kind's name ("guard": "kept", ...; the controller's answer or
   store_interv_wait_check's), or -1 when it names none. */
int store_iv_answer_state(const json_t *answer, store_iv_kind kind);

/* The schema version a database is migrated to (PRAGMA user_version);
   store.c holds one migration per version. */
#define STORE_SCHEMA_VERSION 10

/* A trial row: what the controller reads back on restart and writes on
   every change. Strings are fixed buffers; `params` is owned by the row
   (release with store_trial_fini). The objective values are wire_none()
   (common/wire.h) when there is none; a reported NaN, inf or -inf is a
   value, kept as reported (stored as the text 'nan', Inf, -Inf; NULL is
   none). */
typedef struct {
    long id; /* trials.id (global) */
    long study_id;
    long number;             /* 0-based index within its study */
    store_trial_state state; /* text only in the database and on the wire */
    long attempt;            /* 0 for the first run; +1 per retry */
    char token[40];          /* the current attempt's secret (new for each attempt) */
    json_t *params;          /* current params (latest generation), owned */
    long generation;         /* PBT generation of params (0 at creation) */
    long parent;             /* trial whose checkpoint this one continues, or -1 */
    double value;            /* objective result when ended, wire_none() when none */
    double last_value;       /* last reported objective this attempt, or wire_none() */
    double best_value;       /* best reported objective this attempt, or wire_none() */
    long last_step;          /* last step reported this attempt, -1 when none */
    long metric_req; /* highest persisted metrics batch of metric_session (dedup) */
    char metric_session[40]; /* helper session that sent metric_req, "" when none */
    char dispatcher[64];     /* where it runs or ran, "" when never started */
    long pid;                /* on its dispatcher, 0 when none */
    char exit_how[16]; /* exited, signaled, timeout, killed, start_failed, lost, "" */
    long exit_code;
    char reason[256];     /* why it ended (for people), "" when none */
    char out_path[512];   /* stdout log file on its dispatcher */
    char err_path[512];   /* stderr log file */
    char checkpoint[512]; /* latest checkpoint path, "" when none */
    long checkpoint_step;
    double created, started, ended; /* wall clock; 0 when not yet */
    int study_stopped; /* 1: stopped because its study was stopped; the study's
                          resume runs it again (schema version 2) */
    long preemptions;  /* times the queue preempted it for a higher-priority study */
    int preempted;     /* 1: suspended by a preemption; the queue resumes it (v4) */
    long failures;     /* attempts that failed (exit, signal, timeout, lost): what
                          `retries` counts; a pause, stop or preemption is none (v10) */
} store_trial;

/* A study row. */
typedef struct {
    long id;
    char name[128];
    store_study_state state; /* text only in the database and on the wire */
    json_t *spec;            /* owned */
    json_t *sched_state;     /* owned, NULL when none saved */
    double created, finished;
    long extra_trials; /* trials added by `study extend`, on top of budget.trials */
} store_study;

/* A metric point. NaN values are stored as NULL and read back as NaN
   (a point always has a value: NULL is the NaN reported). */
typedef struct {
    long step;
    const char *name; /* borrowed */
    double value;
} store_point;

/* Opens (creating if needed) the database at `path`, applies migrations
   up to STORE_SCHEMA_VERSION, WAL mode. `readonly` opens without creating
   or migrating (an older schema is refused). Returns NULL with a message
   in err on failure. Caller owns the result and must close it. */
store_t *store_open(const char *path, int readonly, char *err, size_t errsize);

/* NULL-safe; sets *sp to NULL. */
void store_close(store_t **sp);

/* Why the last call failed (borrowed): a row the store refused (a state
   text that names no state), else SQLite's last error message. */
const char *store_errmsg(store_t *s);

/* Transactions. store_commit fails (-1, nothing committed: roll back)
   also when any write of the transaction failed (disk full, I/O error),
   since SQLite may have rolled part of it back already. */
int store_begin(store_t *s);
int store_commit(store_t *s);
void store_rollback(store_t *s);
/* A read transaction (deferred BEGIN): the reads until store_read_end see
   one snapshot of the database, whatever another connection commits
   meanwhile (a page and its counts agree). 0, or -1 (store_errmsg says
   why; nothing to end). store_read_end ends it; nothing was written. */
int store_read_begin(store_t *s);
void store_read_end(store_t *s);

/* ---- studies ---- */
/* Inserts a study; returns its id or -1 (also -1 if the name exists). */
long store_study_insert(store_t *s, const char *name, const json_t *spec,
                        store_study_state state, double now);
/* Fills `out` for the named study. 1 found, 0 not found, -1 error (also
   when its state column holds a text that names no state: store_errmsg
   says which). Release with store_study_fini. */
int store_study_get(store_t *s, const char *name, store_study *out);
int store_study_get_id(store_t *s, long id, store_study *out);
int store_study_set_state(store_t *s, long id, store_study_state state, double now);
/* Saves the scheduler state (borrowed). */
int store_study_set_sched(store_t *s, long id, const json_t *sched_state);
/* Adds n trials to a study's budget (extra_trials). 0 or -1. */
int store_study_add_trials(store_t *s, long id, long n);

/* What store_study_delete removed. */
typedef struct {
    long trials, metrics, events, enqueued; /* rows removed */
    long last_trial; /* the study's highest trial id, 0 when it had none */
} store_deleted;
/* Removes study `study_id` and what the store holds under it (trials,
   params, metrics, events, alerts, enqueued configurations) in the open
   transaction; files (logs, checkpoints) are left. 0, or -1 (roll back).
   The caller records the deletion (an event of kind "study_deleted" with
   "last_trial" in its detail) so that store_trial_next_id never gives a
   deleted trial's id again: its log files keep that id. */
int store_study_delete(store_t *s, long study_id, store_deleted *out);

/* The queue of configurations a person asked for (study enqueue), first
   in first out. store_enqueued_add returns the entry's id or -1 (params
   borrowed). store_enqueued_first fills *params with the oldest entry's
   params (caller owns) and returns its id, 0 when the queue is empty,
   -1 on error. store_enqueued_count: entries or -1. store_enqueued_del: 0/-1. */
long store_enqueued_add(store_t *s, long study_id, const json_t *params, const char *who,
                        double now);
long store_enqueued_first(store_t *s, long study_id, json_t **params);
long store_enqueued_count(store_t *s, long study_id);
int store_enqueued_del(store_t *s, long id);

/* Every study as a JSON array of {id, name, state, created, finished,
   trials, completed, failed, stopped, pruned, running, budget, best} and,
   with several objectives, pareto (store_study_best) (caller owns), NULL
   on error (also for a state text that names no state: store_errmsg says
   which). */
json_t *store_study_list(store_t *s);
/* A study's answer by the one definition of best (spec_best_counts,
   spec_mark_trials; store_best.c), set in `out` (an object, borrowed):
   "best": {trial (the global id), number, value, params} of the best
   completed feasible trial, or null (and null with several objectives);
   with several objectives also "pareto": [{trial, number, value, values:
   {metric: value}, params}], the completed feasible trials no other one
   dominates, by id. 0, or -1 on a store error (nothing set). */
int store_study_best(store_t *s, const store_study *st, json_t *out);
/* Ids of the studies a controller loads when it starts: those in state
   "running", and stopped ones with a trial still starting, running or
   paused (its process lives until it exits or is killed). Caller frees
   *ids. Count, or -1 (out of memory or a failed read; *ids is NULL
   then). */
long store_live_studies(store_t *s, long **ids);
void store_study_fini(store_study *st);

/* ---- trials ---- */
/* Inserts trial `t` with its params as generation 0 (or t->generation).
   t->id > 0 is used as the id (it must be unused), else one is chosen and
   stored in t->id. 0 or -1. */
int store_trial_insert(store_t *s, store_trial *t);
/* One more than the largest trial id ever stored (a deleted study's
   too: store_study_delete), or -1. */
long store_trial_next_id(store_t *s);
/* Writes every mutable column of `t` (matched by t->id). 0 or -1. */
int store_trial_save(store_t *s, const store_trial *t);
/* Records a new params generation for the trial (PBT), borrowed params. */
int store_trial_set_params(store_t *s, long trial_id, long generation, long parent,
                           const json_t *params);
/* Loads all trials of a study, ordered by number. Returns the count (and
   *out, caller frees with store_trials_free) or -1 (out of memory, a
   failed read, or a state text that names no state: store_errmsg says
   which; *out is NULL then). */
long store_trials_load(store_t *s, long study_id, store_trial **out);
/* Loads one trial. 1 found, 0 not found, -1 error (also an unknown state
   text, as above). store_trial_fini after. */
int store_trial_get(store_t *s, long trial_id, store_trial *out);
void store_trial_fini(store_trial *t);
void store_trials_free(store_trial *t, long n);
/* A trial as JSON (all columns, params, and the last value of every
   metric it reported as "metrics": {name: value}). Caller owns. */
json_t *store_trial_json(const store_trial *t, store_t *s);
/* Parameter history: array of {generation, parent, params}. Caller owns. */
json_t *store_trial_lineage(store_t *s, long trial_id);

/* What `study show` and `export` read, as one object (caller owns): {id,
   name, state, spec, created, finished, trials: [store_trial_json + sampled
   (its params as first suggested)], events, best (and pareto):
   store_study_best}. NULL when there is no such
   study or on error (store_errmsg says which error: a row the store
   refuses, SQLite's). */
json_t *store_study_detail(store_t *s, const char *name);
/* What `trial show` reads (caller owns): store_trial_json + lineage and
   study (its name). NULL when there is no such trial or on error. */
json_t *store_trial_detail(store_t *s, long trial_id);

/* ---- interventions (store_interv.c): a person's guarded changes and
   live forks, each a state machine of the controller (ctl_guard.c,
   ctl_fork.c) whose state and data are written before it acts ---- */
/* An intervention row. */
typedef struct {
    long id; /* interventions.id */
    long study_id, trial_id;
    store_iv_kind kind;
    int state;    /* a store_guard_state or store_fork_state, as kind says */
    int done;     /* 1 once state is final */
    json_t *data; /* persisted with the state */
    double created, updated;
} store_interv;
/* Inserts one in state (its done flag follows); `data` borrowed. Its id,
   or -1 (also for a kind or state that names none: store_errmsg says
   which, nothing is written). */
long store_interv_insert(store_t *s, long study_id, long trial_id, store_iv_kind kind,
                         int state, const json_t *data, double now);
/* Writes its state (and done flag) and data (borrowed). 0 or -1 (also
   for a kind or state that names none: store_errmsg says which, nothing
   is written). */
int store_interv_save(store_t *s, long id, store_iv_kind kind, int state,
                      const json_t *data, double now);
/* Calls fn for each unfinished intervention, oldest first; iv and its
   data are borrowed for the call. A row whose kind or state text names
   none is passed with bad set to why (the store's words, naming the
   intervention; only iv->id is filled), else bad is NULL. The count of
   rows passed, or -1 on a read error. */
typedef void (*store_interv_fn)(void *arg, const store_interv *iv, const char *bad);
long store_interv_open(store_t *s, store_interv_fn fn, void *arg);
/* Interventions as an array of {id, study_id, trial_id, kind, state, done,
   data, created, updated} (caller owns), oldest first: those of trial_id
   (the ones on it and the forks it came from). NULL on error (also for a
   kind or state text that names none: store_errmsg says which). */
json_t *store_interv_list(store_t *s, long trial_id);
/* The interventions of a study, oldest first, as store_interv_list's
   objects (caller owns). NULL on error, as store_interv_list. */
json_t *store_interv_study(store_t *s, long study_id);

/* A wait for a guarded change or a fork that may outlive its controller
   (`trial set --guard`, `trial fork`, the web API's set and fork): the
   request dies with a controller killed during the wait, while the
   restarted one resumes the intervention from the database and decides.
   The waiter reads the intervention's persisted state between slices of
   its wait (wire_request_check) and answers from it once it is final and
   the controller has not answered for STORE_INTERV_GRACE_S since (the
   controller's answer normally comes first). */
#define STORE_INTERV_GRACE_S 2.0
typedef struct {
    store_t *store;     /* borrowed; NULL: no reading (the plain wait) */
    long trial;         /* the trial intervened on */
    store_iv_kind kind; /* a guarded change or a fork */
    long after;         /* interventions of kind on the trial up to this id are older */
    double final_at;    /* when it was first seen final (util_now), 0 before */
} store_interv_wait;
/* Starts w on s (borrowed, may be NULL: then w never answers): notes the
   newest intervention of kind on trial, so that only a later one counts. */
void store_interv_wait_init(store_interv_wait *w, store_t *s, long trial,
                            store_iv_kind kind);
/* A wire_check_fn on a store_interv_wait: the answer the controller would
   have sent ({type "ok", <kind>: state, trial, intervention, from_store
   true, and the intervention's data}; caller owns), once the intervention
   begun after store_interv_wait_init has been final for
   STORE_INTERV_GRACE_S; NULL meanwhile. */
json_t *store_interv_wait_check(void *w);

/* ---- metrics ---- */
/* Inserts n points for (trial, attempt). Call inside a transaction. */
int store_metrics_add(store_t *s, long trial_id, long attempt, const store_point *pts,
                      size_t n, double now);
/* Number of metric points stored for a trial (all attempts), or -1. */
long store_metrics_count(store_t *s, long trial_id);
/* Last value of every metric of a trial as a JSON object (caller owns). */
json_t *store_metrics_last(store_t *s, long trial_id);
/* All points of one metric for a trial, as [[step, value], ...] (caller owns). */
json_t *store_metrics_series(store_t *s, long trial_id, const char *name);

/* ---- events ---- */
/* Appends an event; `detail` borrowed (may be NULL); applied: 1, 0, or -1
   for not yet known. Returns the event id or -1. */
long store_event_add(store_t *s, double now, long study_id, long trial_id,
                     const char *who, const char *kind, const json_t *detail,
                     int applied);
/* The authenticated user the next events are recorded for (their `actor`)
   until set again; NULL or "": none (the controller's own doing). The
   events lists carry it as "actor" (null when none). */
void store_set_actor(store_t *s, const char *actor);
/* Marks an event applied/refused with its latency. */
int store_event_resolve(store_t *s, long event_id, int applied, double latency_s,
                        const char *detail);
/* Resolves every instruction event not resolved yet as not applied, with
   `result`: at a controller's start, as the instructions it held in
   memory are gone. Their latency stays NULL (no acknowledgement timed
   them): the mark store_event_reresolve looks for. The number resolved,
   or -1. */
long store_events_resolve_instructions(store_t *s, const char *result);
/* Resolves again, as trial `trial_id`'s late acknowledgement says
   (applied, `result`, may be NULL), its instruction event `event_id` that
   a controller's start resolved (store_events_resolve_instructions); the
   latency runs from the event's time to wall time `now`. Returns the
   event's detail (caller owns) when it did, NULL when there is no such
   event (another trial's, or resolved otherwise) or on error. */
json_t *store_event_reresolve(store_t *s, long event_id, long trial_id, int applied,
                              double now, const char *result);
/* Events of a study as a JSON array (caller owns). */
json_t *store_events_list(store_t *s, long study_id);
/* The detail's "reason" of the study's latest event of `kind` into buf
   ("" when none). 0, or -1 on error. */
int store_event_last_reason(store_t *s, long study_id, const char *kind, char *buf,
                            size_t size);

/* Events of a study with id > after, oldest first, at most `limit` (<= 0:
   all), as in store_events_list. Caller owns; NULL on error. */
json_t *store_events_since(store_t *s, long study_id, long after, long limit);

/* ---- dispatchers ---- */
/* Forgets dispatcher `name` (0 or -1). */
int store_dispatcher_delete(store_t *s, const char *name);
int store_dispatcher_upsert(store_t *s, const char *name, long slots, const char *gpus,
                            double now);

/* ---- incremental reads (jizhi watch) ---- */
/* Called once per metric point; return non-zero to stop early. `name` is
   borrowed for the call only. */
typedef int (*store_metric_fn)(void *arg, long trial_id, long attempt, long step,
                               const char *name, double value);
/* Calls fn for every metric point of the study's trials stored after
   point *after (0: from the first), in the order they were stored, at
   most `limit` of them (limit <= 0: all), and advances *after past the
   last one given, so a caller polling with the same variable sees each
   point once. Returns the number of points given, or -1 on error. */
long store_study_metrics_since(store_t *s, long study_id, long *after, long limit,
                               store_metric_fn fn, void *arg);

/* ---- bearer tokens (store_token.c) ---- */
/* Only a hash of each token is stored (SHA-256, hex); the token itself is
   shown once, by `jizhi token create`. */
typedef struct {
    long id;
    char user[64];
    char role[16]; /* ident_role_str() text */
    double created;
    double revoked; /* 0 when valid */
} store_token;

/* Stores a token hash for user/role. Returns the token's id or -1. */
long store_token_add(store_t *s, const char *user, const char *role, const char *hash_hex,
                     double now);
/* Finds the valid (not revoked) token with this hash: 1 found (filled),
   0 none, -1 error. */
int store_token_find(store_t *s, const char *hash_hex, store_token *out);
/* Every token (revoked ones too) as a JSON array of {id, user, role,
   created, revoked} (caller owns), NULL on error. */
json_t *store_token_list(store_t *s);
/* Revokes token `id` (id > 0), or every token of `user` (id <= 0).
   Returns how many were revoked (0: none matched) or -1. */
long store_token_revoke(store_t *s, long id, const char *user, double now);

/* The store's own files share store_internal.h (the store_t, its statements
   and column helpers); nothing outside store/ includes it. */

/* ---- identities (store_auth.c) ---- */
/* The identity dispatcher `name` is bound to into out ("" when the name is
   unknown or unbound). 0, or -1 on error. */
int store_dispatcher_owner(store_t *s, const char *name, char *out, size_t size);
/* Binds dispatcher `name` (already upserted) to `owner`. 0 or -1. */
int store_dispatcher_set_owner(store_t *s, const char *name, const char *owner);

/* ---- alerts and quotas (store_queue.c) ---- */
/* Records that alert rule `rule` fired for (study, trial; -1: the study
   itself), detail borrowed. 1 recorded now, 0 it had fired already (nothing
   changed), -1 error. */
int store_alert_add(store_t *s, double now, long study_id, long trial_id,
                    const char *rule, const char *kind, const json_t *detail);
/* Alerts of one study (study_id > 0) or of all (<= 0), oldest first, as a
   JSON array of {id, time, study, study_id, trial, rule, kind, detail}
   (caller owns), NULL on error. */
json_t *store_alerts_list(store_t *s, long study_id);
/* Sets user's quota (slots, gpus; -1: no limit) and the highest priority
   the user may submit (`max_priority`, a spec priority's name: "normal",
   "high"; borrowed). 0 or -1. */
int store_quota_set(store_t *s, const char *user, long slots, long gpus,
                    const char *max_priority, double now);
/* Every quota as a JSON array of {user, slots, gpus, max_priority} (-1: no
   limit), ordered by user (caller owns), NULL on error. */
json_t *store_quota_list(store_t *s);

/* ---- the web API's reads (store_web.c) ---- */
/* One stored metric point with where and when it came from. */
typedef struct {
    long rowid; /* insertion order */
    long trial_id, attempt, step;
    const char *name; /* borrowed for the call only */
    double value;     /* NaN when stored as NULL */
    double time;      /* wall clock when stored */
} store_metric_row;
typedef int (*store_row_fn)(void *arg, const store_metric_row *row);
/* As store_study_metrics_since, with the point's time and rowid. */
long store_study_points_since(store_t *s, long study_id, long *after, long limit,
                              store_row_fn fn, void *arg);
/* Points of one metric of one trial's latest attempt, in step order: calls fn per point.
 * Count or -1. */
long store_trial_points(store_t *s, long trial_id, const char *name, store_row_fn fn,
                        void *arg);
/* Names of the metrics a trial reported, as a JSON array (caller owns). */
json_t *store_trial_metric_names(store_t *s, long trial_id);
/* The trials of a study without their params, for polling: array of {id,
   number, state, attempt, value, last_value, best_value, last_step (null
   when none, as the web API's trial table writes it), generation,
   started, ended, reason} (caller owns), NULL on error (also
   for a state text that names no state: store_errmsg says which). Values
   as common/wire.h writes them (a reported NaN or infinity as "nan",
   "inf", "-inf"; none as null). */
json_t *store_trials_brief(store_t *s, long study_id);
/* The same rows, with their current params, one call of fn per trial in
   number order, without building JSON (the web page's 1000-trial tables).
   Strings and params_json (a JSON object's text) are borrowed for the
   call. Returns the count or -1 (also for a state text that names no
   state: store_errmsg says which). */
typedef struct {
    long id, number, attempt, generation;
    long last_step; /* -1 when none */
    store_trial_state state;
    const char *reason;
    double value, last_value, best_value; /* wire_none() when none */
    double started, ended;                /* NaN when none */
} store_trial_brief;
typedef int (*store_brief_fn)(void *arg, const store_trial_brief *t,
                              const char *params_json);
long store_trials_each(store_t *s, long study_id, store_brief_fn fn, void *arg);
/* Which page of a study's trials store_trials_page reads: keyset by trial
   id, so a page costs its own rows (index trials_by_study, or
   trials_by_study_state with a state), whatever its position. */
typedef struct {
    long after; /* ids above it (below it when desc); 0: from the first (last) */
    long limit; /* rows at most, >= 1 */
    int desc;   /* 1: highest id first */
    int state;  /* a store_trial_state, or -1 for every state */
} store_trial_page;
/* As store_trials_each for one page of the trials: fn per trial in id
   order (params included). *next is the id to pass as `after` for the
   page that follows, 0 when this page holds the last trial; when fn
   returns non-zero the page ends at that trial and *next is its id (more
   may follow). Returns the
   rows given to fn or -1 (store_errmsg says why). */
long store_trials_page(store_t *s, long study_id, const store_trial_page *q,
                       store_brief_fn fn, void *arg, long *next);
/* How many trials of the study are in each state: counts[state] for every
   store_trial_state, one COUNT .. GROUP BY over index trials_by_study_state
   (no row is read). 0 or -1. */
int store_trial_counts(store_t *s, long study_id, long counts[TRIAL_STATE_COUNT]);
/* Highest metrics rowid and event id so far (0 when none). 0 or -1. */
int store_marks(store_t *s, long *metric_rowid, long *event_id);

/* Called once per metric point with the wall-clock time it was stored. */
typedef int (*store_curve_fn)(void *arg, long trial_id, long attempt, long step,
                              const char *name, double value, double time);
/* Calls fn for every metric point of the study, ordered by trial, metric
   name, attempt and step (learning curves in long format). Returns the
   number of points given, or -1 on error. */
long store_study_curves(store_t *s, long study_id, store_curve_fn fn, void *arg);

#endif
