/*  spec.h - the study spec (docs/spec.md): parsing, validation, parameters.

    A spec is parsed from JSON into a spec_t. Validation is strict: unknown
    keys, wrong types and bad ranges are refused with a message that names
    the field ("space.lr.low: must be > 0 when log is true"). Parameters of
    a trial are a JSON object {name: value}; helpers here map them to and
    from the unit cube for schedulers.
*/
#ifndef JZ_SPEC_H
#define JZ_SPEC_H

#include <jansson.h>
#include <stddef.h>

typedef enum { SPEC_FLOAT = 0, SPEC_INT, SPEC_CHOICE } spec_type;

typedef struct {
    char *name; /* owned */
    spec_type type;
    double low, high; /* FLOAT and INT (INT holds whole numbers) */
    int log;          /* FLOAT and INT: sample on a log scale */
    double step;      /* FLOAT and INT: "step", the grid low, low+step, ..., high
                         every value lies on (0: none; an INT without it steps
                         by 1); never with log */
    json_t *values;   /* CHOICE: array of strings or numbers, owned */
    size_t nvalues;   /* CHOICE: length of values */
    int konst;        /* "const": a CHOICE of exactly one value (values[0]) */
    json_t *when;     /* condition {parent: [values..], ...} or NULL, owned: the
                         parameter is active when every parent is active and has
                         one of the listed values (parents are other choices or
                         consts; no cycles) */
    int conditional;  /* 1 when it has `when`, so it can be inactive */
} spec_param;

typedef struct {
    char *metric; /* owned */
    int maximize; /* mode == "max" */
} spec_objective;

typedef struct {
    char *metric; /* owned */
    int upper;    /* 1: metric <= bound; 0: metric >= bound */
    double bound;
} spec_constraint;

#define SPEC_MAX_OBJECTIVES 4
#define SPEC_MAX_CONSTRAINTS 8

typedef struct {
    char *name;                   /* study name */
    char *metric;                 /* objective.metric */
    int maximize;                 /* objective.mode == "max" */
    int use_best;                 /* objective.use == "best" (default: last) */
    spec_objective *objectives;   /* every objective (objective may be a list), owned;
                                     [0] is metric/maximize */
    size_t nobjectives;           /* 1, or more for a multi-objective study */
    spec_constraint *constraints; /* constraints on reported metrics, owned */
    size_t nconstraints;
    json_t *warm_from;  /* warm_start.from: array of study names, owned, or NULL */
    char *sched_type;   /* scheduler.type */
    long seed;          /* scheduler.seed (default 0) */
    json_t *sched_opts; /* the whole scheduler object, owned */
    json_t *early_stop; /* early_stopping object or NULL, owned */
    json_t *guard;      /* guard object (divergence guard) or NULL, owned */
    long trials;        /* budget.trials */
    long parallel;      /* budget.parallel (default 1) */
    double time_s;      /* budget.time_s (0 = no limit) */
    long max_failures;  /* budget.max_consecutive_failures: the study stops after
                           that many trials failed in a row (default 5, 0 = never) */
    spec_param *params; /* space, in the order of the spec file */
    size_t nparams;
    json_t *command;  /* trial.command, array of strings, owned (empty when
                         ask_only) */
    int ask_only;     /* no `trial` section: an ask-and-tell study, whose trials
                         a program asks for (trial_ask) and ends (trial_tell);
                         the queue never starts them on a dispatcher */
    long gpus;        /* trial.gpus (per rank) */
    long ranks;       /* trial.ranks: data-parallel ranks of one trial (default 1) */
    int launcher;     /* spec_launcher: trial.launcher, how the ranks are started
                         (default SPEC_LAUNCH_MPIRUN) */
    double timeout_s; /* trial.timeout_s (0 = none) */
    long retries;     /* trial.retries */
    json_t *env;      /* trial.env object of strings, owned */
    char *cwd;        /* trial.cwd: the folder trials run in (absolute), owned;
                         NULL: the dispatcher's */
    char *venv;       /* trial.venv: a virtual environment (absolute) whose bin
                         goes first on the trials' PATH, owned, or NULL */
    json_t *json;     /* the normalised spec as given, owned */
    int priority;     /* spec_priority: "priority" (default normal) */
    int preemptible;  /* spec_preempt: "preemptible" (default checkpoint) */
    char *owner;      /* "owner": who the queue counts the study's trials for
                         (quotas, fair share) until authenticated identities
                         name it; NULL when not given */
    json_t *alerts;   /* "alerts": rules checked by spec_alerts_check, owned,
                         NULL when none */
} spec_t;

/* Study priorities, lowest first (the queue starts higher ones first and
   preempts lower ones for them). */
typedef enum { SPEC_PRIO_LOW, SPEC_PRIO_NORMAL, SPEC_PRIO_HIGH } spec_priority;
/* Whether the queue may preempt a study's trials for a higher priority:
   CHECKPOINT (default) only trials that have saved a checkpoint (released
   and resumed from it), RESTART any trial (killed and started again, from
   its checkpoint when it has one), NEVER none. */
typedef enum {
    SPEC_PREEMPT_CHECKPOINT,
    SPEC_PREEMPT_RESTART,
    SPEC_PREEMPT_NEVER
} spec_preempt;
/* "high", "normal", "low"; "invalid" out of range. */
const char *spec_priority_name(int priority);
/* The priority named `text`, or -1. */
int spec_priority_parse(const char *text);

#define SPEC_MAX_RANKS 1024

/* How a trial's ranks are started (trial.launcher): MPIRUN (default) runs
   `mpirun -np RANKS command` when ranks > 1; TORCH has the dispatcher start
   the ranks itself with torchrun's environment (RANK, WORLD_SIZE,
   MASTER_ADDR, ...), for torch.distributed programs. */
typedef enum { SPEC_LAUNCH_MPIRUN, SPEC_LAUNCH_TORCH } spec_launcher;
/* "mpirun", "torch"; "invalid" out of range. */
const char *spec_launcher_name(int launcher);

/* Limits on one spec (docs/spec.md, Limits), checked by spec_parse: they
   bound what a study costs the controller and keep every trial startable.
   A spec over one is refused with a message naming the limit and the
   value. */
#define SPEC_MAX_PARAMS 1000         /* parameters in space */
#define SPEC_MAX_CHOICE_VALUES 10000 /* values of every choice and const together */
/* The longest JIZHI_PARAMS (the compact JSON of a trial's parameters, in
   its environment) and the longest trial.command argument once expanded,
   in bytes. Linux refuses to exec a program with one environment or
   argument string over MAX_ARG_STRLEN (128 KiB); half of that leaves room
   for the rest. */
#define SPEC_MAX_PARAMS_JSON (64 * 1024)
#define SPEC_MAX_ARG_BYTES (64 * 1024)

/* The length in bytes of the longest JIZHI_PARAMS text a trial of s can
   get: every parameter present (conditional ones too) with its longest
   value, as the controller writes it (compact JSON). */
size_t spec_params_json_max(const spec_t *s);

/* Error detail for parsing, like jansson's json_error_t. */
typedef struct {
    char field[128]; /* dotted path of the field at fault, "" for the file */
    char text[256];  /* what was expected */
} spec_error;

/* The alert rules (docs/spec.md, Alerts): "on" is one of the names below.
   ALERT_COUNT ends the list. */
typedef enum {
    SPEC_ALERT_TRIAL_FAILED,
    SPEC_ALERT_FAILURES, /* "failures_in_a_row": count, stop_study */
    SPEC_ALERT_GUARD,    /* the divergence guard rolled back or stopped a trial */
    SPEC_ALERT_STALLED,  /* a running trial silent for `seconds` */
    SPEC_ALERT_BEST,     /* "best_improved": a completed trial beat the study's best */
    SPEC_ALERT_FINISHED, /* "study_finished" */
    SPEC_ALERT_COUNT
} spec_alert_on;
const char *spec_alert_on_name(spec_alert_on on);
/* Checks an array of alert rules at `path` ("alerts" in a spec, the
   controller's --alerts file): 0, or -1 with err naming the field.
   Changes nothing. A rule's identity (what "at most once per rule and
   trial" counts by) is its "name", else "<on>#<index>": spec_alert_id. */
int spec_alerts_check(json_t *alerts, const char *path, spec_error *err);
/* The rules of the controller's --alerts file `path`, parsed as `doc`
   (borrowed): {"alerts": [rules]} or the array itself, checked as
   spec_alerts_check does. The rules (a new reference: caller owns), or
   NULL with err naming the file and the field. */
json_t *spec_alerts_file(json_t *doc, const char *path, char *err, size_t errsize);
/* The identity of rule `i` of an array checked by spec_alerts_check into
   buf. Returns buf. */
const char *spec_alert_id(const json_t *rule, size_t i, char *buf, size_t size);
/* The `on` of a checked rule. */
spec_alert_on spec_alert_kind(const json_t *rule);

/* Parses and validates a spec. Borrows `json`. Returns a new spec (caller
   owns it; release with spec_destroy) or NULL with `err` filled. When
   `check_command` is set (the caller sees the file system the trials
   will see), trial.cwd must be a folder, trial.venv hold bin/python, and
   trial.command[0] be found as a trial would: a relative path in
   trial.cwd, a bare name in trial.venv's bin or on PATH. Without it
   nothing is looked up (the controller: dispatchers judge). */
spec_t *spec_parse(json_t *json, int check_command, spec_error *err);

/* Reads and parses a spec file. NULL with `err` filled on failure (the
   field is "" and the text names the file for I/O and JSON errors). */
spec_t *spec_load(const char *path, int check_command, spec_error *err);

/* Formats `err` as "field: text" (or "text") into buf. Returns buf. */
const char *spec_strerror(const spec_error *err, char *buf, size_t size);

/* NULL-safe; sets *sp to NULL. */
void spec_destroy(spec_t **sp);

/* Maps u in [0,1] to a legal value of parameter p (log scale, integer
   rounding, choice index). Returns a new reference. */
json_t *spec_param_from_unit(const spec_param *p, double u);

/* Maps a legal value of p to [0,1] (the inverse of from_unit; a choice
   maps to the centre of its cell). Returns -1 when the value is illegal. */
double spec_param_to_unit(const spec_param *p, const json_t *value);

/* The number of values p can take: a choice's values, the points of a
   stepped FLOAT or of an INT ((high - low) / step + 1); 0 for a FLOAT
   without step (continuous). */
long spec_param_grid(const spec_param *p);

/* x moved onto p's range and grid (its step; whole numbers for INT) as
   the JSON number a trial gets (an integer for INT). Caller owns the
   result. p must be FLOAT or INT. */
json_t *spec_param_snap(const spec_param *p, double x);

/* 1 when `value` is a legal value of p, else 0. */
int spec_param_legal(const spec_param *p, const json_t *value);

/* x rounded to 15 significant digits: what float arithmetic adds past them
   (exp(log(0.001)) = 0.0010000000000000002, 0.1 * 3) is noise, not a
   hyperparameter. Non-finite x is returned as is. Pure. */
double spec_round_sig(double x);

/* 1 when parameter k is active in `params` (an object holding at least the
   values of the parameters that decide it). */
int spec_param_active(const spec_t *s, size_t k, const json_t *params);

/* Removes the inactive parameters (see `when`) from the object `params`,
   each judged on the values as given. Returns how many were removed. */
int spec_params_prune(const spec_t *s, json_t *params);

/* Checks a complete set of parameters given by a person (study enqueue):
   every active parameter present and legal, no inactive or unknown one.
   A const missing from `params` is added. 0, or -1 with err naming the
   parameter ("params.lr: ..."). */
int spec_params_check(const spec_t *s, json_t *params, spec_error *err);

/* Turns values typed on a command line into the parameters' types, in
   place: a text that reads as a number for a float or int parameter (or a
   choice holding that number), a number for a choice holding its text.
   Values that fit already, and unknown names, are left for
   spec_params_check to judge. */
void spec_params_coerce(const spec_t *s, json_t *params);

/* Index of the parameter named `name`, or -1. */
int spec_param_index(const spec_t *s, const char *name);

/* Expands {name} placeholders in trial.command with the params. Returns a
   new array of strings (caller owns) or NULL when a placeholder names no
   parameter (err filled). "{{" and "}}" stand for literal braces.
   "{name:default}" uses `default` when `name` is absent from params (an
   inactive conditional parameter). */
json_t *spec_expand_command(const spec_t *s, const json_t *params, spec_error *err);

/* 1 when s matches [A-Za-z_][A-Za-z0-9_]* and is under 64 characters. */
int spec_valid_name(const char *s);

/* The (first) objective object of a spec's JSON, whether `objective` is
   one object or a list (borrowed; NULL when absent). */
const json_t *spec_json_objective(const json_t *spec);

/* How far a trial's last metrics (object {name: value}, borrowed) are
   from meeting the constraints: the sum of the amounts by which each
   bound is passed; 0 when feasible (or no constraints), INFINITY when a
   constraint metric is missing or not finite. */
double spec_violation(const spec_t *s, const json_t *metrics);

/* The objective vector of a trial in minimisation form (a "max" objective
   negated) into out[0..nobjectives): out[0] from `value` (the primary
   objective's result), the others from `metrics`. 0, or -1 when one is
   missing or not finite (out holds NaN there). */
int spec_objective_values(const spec_t *s, double value, const json_t *metrics,
                          double *out);

/* Marks the trials of a study (an array of trial objects with "state",
   "value" and "metrics" {name: last value}, as the store's study detail
   gives them) in place: with constraints, "feasible": true/false on each
   completed trial; with several objectives, "pareto": true/false on each
   completed feasible one (not dominated by another); with one objective,
   "best": true on the best completed feasible trial (with constraints
   and several objectives too: best on the first). Returns how many are on
   the front (1 or 0 with one objective). spec_front.c. */
size_t spec_mark_trials(const spec_t *s, json_t *trials);

/* The one definition of which trials count for a study's best (docs/
   design.md, "Best trial"; as Optuna's best_trial, COMPLETE only): 1 when
   a trial in state `state` (store text) with objective result `value`
   and feasibility `feasible` (1 without constraints) is a candidate:
   completed (not pruned, stopped, failed or still running), a finite
   value, constraints met. Among candidates the best is the better value
   by spec_better, the lower trial id on a tie. spec_mark_trials, the
   controller's status, study show/list/export, run, watch, plot and the
   web API all judge with it. spec_front.c. */
int spec_best_counts(const char *state, double value, int feasible);

/* Compares objective values: 1 when a is better than b for this study.
   Non-finite values rank below every finite one in either direction
   (inf and -inf alike, NaN below them). */
int spec_better(const spec_t *s, double a, double b);
/* The same for a direction alone (maximize 1 or 0). */
int spec_better_mode(int maximize, double a, double b);

#endif
