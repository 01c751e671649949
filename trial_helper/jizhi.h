/*  jizhi.h - the trial-helper library (libjizhi), the public API.

    A training program embeds libjizhi to read its hyperparameters, report
    metrics and receive live instructions (set a parameter, stop, pause,
    resume, checkpoint, load another trial's checkpoint) from the jizhi
    controller. A background thread batches reports and keeps the
    connection, so no call here blocks on the network (except jz_flush).

    Outside a study (JIZHI_TRIAL unset) the helper runs standalone: params
    take their defaults (or JIZHI_PARAMS if set), reports are printed to
    stderr and jz_poll returns nothing, so the same program runs with and
    without jizhi.

    Multi-rank trials: only rank 0 talks to the controller. A process with
    JIZHI_RANK set to a rank > 0 (the dispatcher sets it on every rank under
    trial.launcher "torch") never connects: params come from JIZHI_PARAMS
    as usual, jz_report and jz_checkpoint_done succeed and send nothing,
    jz_poll returns nothing, jz_trial_id gives the trial's id. Rank 0
    passes its instructions on to the others itself (the Python package's
    jizhi.torch broadcasts them through torch.distributed).

    Thread safety: one jz_trial may be used from one thread at a time.
    Only symbols prefixed jz_ are exported by the library.
*/
#ifndef JIZHI_H
#define JIZHI_H

/* The version of jizhi this header belongs to (the library's soname carries
   its major number). */
#define JZ_VERSION "0.2.0"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct jz_trial jz_trial;

/* Kinds of instruction delivered through jz_poll (the same values as the
   project's common/ins.h, which holds their wire text). */
typedef enum {
    JZ_INS_NONE = 0,
    JZ_INS_SET,        /* set parameter `name` to `value` (or `str`) */
    JZ_INS_STOP,       /* finish now: flush and exit cleanly */
    JZ_INS_PAUSE,      /* stop making progress until JZ_INS_RESUME */
    JZ_INS_RESUME,     /* continue after a pause */
    JZ_INS_CHECKPOINT, /* save now into jz_checkpoint_dir, then jz_checkpoint_done */
    JZ_INS_LOAD        /* load the checkpoint at `str`; params are already updated */
} jz_ins_kind;

typedef struct {
    jz_ins_kind kind; /* JZ_INS_NONE when nothing is pending */
    long id;          /* controller's instruction id (for jz_ack) */
    char name[64];    /* SET: parameter name */
    double value;     /* SET: numeric value; NaN when the value is a string */
    char str[1024];   /* SET: value as text; LOAD: checkpoint path */
} jz_instruction;

/* Opens the trial described by the environment (JIZHI_ENDPOINT,
   JIZHI_TRIAL, JIZHI_TOKEN, JIZHI_PARAMS, ...), or a standalone trial when
   JIZHI_TRIAL is unset. Returns NULL only when the environment is set but
   malformed (a message names the variable on stderr). Caller owns the
   result and must release it with jz_close. */
jz_trial *jz_open(void);

/* Opens trial `trial` of an ask-and-tell study as jz_open does, from the
   values a trial_ask answered (`jizhi trial ask STUDY --json`: endpoint,
   trial, token, params as compact JSON or NULL, checkpoint_dir or NULL)
   instead of the environment (the environment still gives
   JIZHI_SERVER_KEY and the timeouts). Several may be open at once, from
   several threads. Returns NULL when an argument is missing or malformed
   (a message on stderr). Caller owns the result and must release it with
   jz_close (which does not end the trial: `trial tell` does). */
jz_trial *jz_open_as(const char *endpoint, long trial, const char *token,
                     const char *params_json, const char *checkpoint_dir);

/* Parameter lookup. Returns the trial's value of `name`, converted, or
   `dflt` when the trial has no such parameter or it has another type.
   jz_param_str returns a string borrowed from the trial, valid until the
   next jz_poll or jz_close. A NULL trial gives the default. */
double jz_param_double(jz_trial *t, const char *name, double dflt);
long jz_param_long(jz_trial *t, const char *name, long dflt);
const char *jz_param_str(jz_trial *t, const char *name, const char *dflt);

/* All current parameters as a compact JSON object (keys sorted), borrowed
   from the trial and valid until the next jz_poll or jz_close; NULL for a
   NULL trial. (Used by the Python package's Trial.params.) */
const char *jz_params_json(jz_trial *t);

/* Queues one metric point. Never blocks on the network. Returns 0, or -1
   when `metric` is not a valid name ([A-Za-z_][A-Za-z0-9_.]*, < 64 chars)
   or the queue is full (more than a million unsent points). */
int jz_report(jz_trial *t, long step, const char *metric, double value);

/* Non-blocking. Fills `out` with the next pending instruction and returns
   1, or returns 0 (out->kind = JZ_INS_NONE) when none is pending, -1 on a
   NULL argument. SET and LOAD update the trial's params before returning.
   An instruction the program does not jz_ack is settled at its next call
   into the helper, and acknowledged only as what is true: SET and RESUME
   as applied; CHECKPOINT as applied only if jz_checkpoint_done was called;
   LOAD as refused (confirm a load with jz_ack). A STOP is judged by what
   the program does after it: applied at jz_close, refused at a jz_report
   (the program went on); jz_poll, jz_flush and jz_checkpoint_done in
   between (draining the queue, a last checkpoint) judge nothing, and the
   program may still jz_ack it. A PAUSE the program does not handle is
   carried out by the helper: that next call blocks until a RESUME or a STOP
   arrives (which the program's next jz_poll then returns). */
int jz_poll(jz_trial *t, jz_instruction *out);

/* Acknowledges instruction `ins` as applied (applied = 1) or refused
   (applied = 0, `detail` says why; may be NULL). Returns 0 or -1. An
   applied LOAD is acknowledged only once the points reported before it are
   persisted (up to 2 s): the trial's reports before the load are stored
   before the load's event, never after it. */
int jz_ack(jz_trial *t, const jz_instruction *ins, int applied, const char *detail);

/* Directory where this trial should write checkpoints (created if
   missing, mode 0700: the trial's user's only). Borrowed string; "." in standalone mode
   without JIZHI_CHECKPOINT_DIR. */
const char *jz_checkpoint_dir(jz_trial *t);

/* Tells the controller that a checkpoint for `step` is complete at
   `path`. Returns 0 or -1. */
int jz_checkpoint_done(jz_trial *t, long step, const char *path);

/* Blocks until every queued report has been acknowledged as persisted by
   the controller, or `timeout_ms` passes. Returns 0, or -1 on timeout.
   Standalone: returns 0 at once. */
int jz_flush(jz_trial *t, int timeout_ms);

/* The trial id given by the controller, or -1 in standalone mode. */
long jz_trial_id(const jz_trial *t);

/* sizeof(jz_instruction) in this library: bindings that mirror the struct
   (the Python package's ctypes one) check their layout against it. */
unsigned long jz_instruction_size(void);

/* Flushes (waiting up to JIZHI_CLOSE_TIMEOUT_MS, default 10 s), stops the
   background thread and frees the trial. NULL-safe; sets *tp to NULL. */
void jz_close(jz_trial **tp);

#ifdef __cplusplus
}
#endif
#endif
