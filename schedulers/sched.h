/*  sched.h - the scheduler interface (docs/design.md, Schedulers).

    A scheduler is pure decision logic: given the study's spec and the
    trials' results it suggests new trials' parameters and may return
    instructions for running trials. No SQL, no sockets, no clock reads:
    time, when needed, comes in as arguments. Every scheduler takes the
    spec's seed and is reproducible for a given seed and order of calls.

    The controller owns the scheduler and calls it from its event loop, so
    no call may take more than a few milliseconds: heavy work (fitting a
    GP) belongs in a worker thread owned by the scheduler, with `suggest`
    returning SCHED_WAIT until the answer is ready.

    After every call that changes it, the controller persists
    `save(...)`; a restarted controller creates the scheduler again with
    sched_new and calls `restore` with the saved state, and nothing else
    is replayed: the saved state must hold all the scheduler needs.
*/
#ifndef JZ_SCHED_H
#define JZ_SCHED_H

#include "../common/ins.h"
#include "../common/spec.h"
#include <jansson.h>
#include <stddef.h>

typedef struct sched sched_t;

enum {
    SCHED_OK = 0,   /* a suggestion is in *params */
    SCHED_DONE = 1, /* the scheduler has nothing more to suggest (grid exhausted) */
    SCHED_WAIT = 2, /* not ready yet; ask again later */
    SCHED_ERR = -1
};

/* Trial outcome passed to on_complete. */
typedef enum {
    SCHED_COMPLETED = 0, /* finished with a result */
    SCHED_FAILED,        /* failed for good (retries used up) */
    SCHED_STOPPED        /* stopped early (by early stopping or a person) */
} sched_outcome;

/* An instruction a scheduler wants sent to a running trial. */
typedef struct {
    long trial;       /* target trial id */
    ins_kind kind;    /* INS_SET, INS_STOP, INS_PAUSE, INS_RESUME, INS_CHECKPOINT,
                         INS_LOAD (common/ins.h: its text only on the wire) */
    json_t *args;     /* kind-specific object (owned by the instruction): for set
                         {"name":..,"value":..}; for load {"path":..,"params":{..},
                         "from": donor trial} ; NULL when none */
    char reason[128]; /* why, recorded in the event */
} sched_instr;

typedef struct {
    const char *name;
    /* Suggests parameters for new trial `trial_id` (already allocated by the
       controller). On SCHED_OK *params is a new object (caller owns). */
    int (*suggest)(sched_t *s, long trial_id, json_t **params);
    /* Optional (NULL: ignores metrics; leave it NULL then, since the
       controller saves the state of a scheduler that has on_metric with
       every batch of metrics). A metric reported by a running trial, at
       that trial's `step`, at time
       `now` (seconds, controller clock). May append up to `max` instructions
       to `out` and returns how many (0..max), or -1 on error. */
    int (*on_metric)(sched_t *s, long trial_id, long step, const char *metric,
                     double value, double now, sched_instr *out, int max);
    /* Optional (NULL: ignores ends). A trial ended. `params` borrowed;
       `value` is its objective (NaN when it has none, e.g. failed). */
    void (*on_complete)(sched_t *s, long trial_id, const json_t *params,
                        sched_outcome outcome, double value);
    /* State as JSON (caller owns), or NULL on error. */
    json_t *(*save)(sched_t *s);
    /* Restores state saved by `save` (borrowed). 0 or -1. */
    int (*restore)(sched_t *s, const json_t *state);
    void (*destroy)(sched_t *s);
    /* Optional (NULL when unused): trial `trial_id` saved a checkpoint for
       `step` at `path`. May append instructions like on_metric. */
    int (*on_checkpoint)(sched_t *s, long trial_id, long step, const char *path,
                         double now, sched_instr *out, int max);
    /* Optional (NULL for schedulers that send no "load"): seconds a "load"
       it sent may go unacknowledged before the controller restarts the
       trial from the load's checkpoint instead; <= 0: never. */
    double (*load_timeout)(const sched_t *s);
    /* Optional (NULL: on_complete alone). For a study with several
       objectives or with constraints, called instead of on_complete, with
       the trial's last value of every metric it reported (`metrics`, an
       object {name: value}, borrowed; NULL when unknown). */
    void (*on_complete_metrics)(sched_t *s, long trial_id, const json_t *params,
                                sched_outcome outcome, double value,
                                const json_t *metrics);
} sched_ops;

/* The load timeout when no scheduler of a study states one. */
#define SCHED_LOAD_TIMEOUT_DEFAULT_S 60.0

/* Every scheduler struct starts with this header. */
struct sched {
    const sched_ops *ops;
    const spec_t *spec; /* borrowed; outlives the scheduler */
};

/* Creates the scheduler named by spec->sched_type. Borrows spec, which
   must outlive the scheduler. Returns NULL with a message in err (size
   errsize) when the type is unknown or its options are wrong. Caller owns
   the result and must destroy it with sched_destroy. */
sched_t *sched_new(const spec_t *spec, char *err, size_t errsize);

/* Monitors watch every trial of a study next to its scheduler: early
   stopping (spec->early_stop: "asha", "median") and the divergence guard
   (spec->guard). They are schedulers whose `suggest` is NULL; their
   on_metric/on_checkpoint return "stop" or "load" instructions. Fills
   out[0..max) with the monitors the spec asks for and returns how many,
   or -1 with err ("early_stopping.xxx: ..."). Caller owns them. */
int sched_monitors_new(const spec_t *spec, sched_t **out, int max, char *err,
                       size_t errsize);

/* Validates scheduler options without creating one (used by spec checks).
   0 or -1 with err filled ("scheduler.xxx: ..."). */
int sched_check(const spec_t *spec, char *err, size_t errsize);

/* A study's admission, the same at every door (jizhi run, jizhi study
   submit, the web API's submit, the controller's submit): spec_json
   parsed and validated (spec_parse; check_command as it says), then its
   scheduler and monitors created with their options and destroyed
   (sched_check). Borrows spec_json; changes nothing. The spec (caller owns
   it: spec_destroy), or NULL with err: the spec's error as spec_strerror
   words it ("params.lr.low: ...") or the scheduler's ("scheduler.xxx:
   ...", "early_stopping.xxx: ..."). */
spec_t *sched_admit(json_t *spec_json, int check_command, char *err, size_t errsize);

/* NULL-safe; sets *sp to NULL. */
void sched_destroy(sched_t **sp);

/* Releases an instruction's args. */
void sched_instr_fini(sched_instr *in);

/* Deterministic random numbers for schedulers: a splitmix64 stream. */
typedef struct {
    unsigned long long s;
} sched_rng;
void sched_rng_seed(sched_rng *r, unsigned long long seed, unsigned long long stream);
unsigned long long sched_rng_u64(sched_rng *r);
double sched_rng_uniform(sched_rng *r); /* in [0,1) */

/* A random point of the spec's space: each parameter, in the spec's order, drawn
   from one uniform of r mapped by spec_param_from_unit (log-uniform for log
   parameters, uniform over choices). Caller owns the result and must decref it. */
json_t *sched_random_params(const spec_t *spec, sched_rng *r);

/* Per-trial tables. A scheduler keeps its per-trial rows in an array
   `T *rows` of *n rows (room for *cap), each row beginning with `long id`.
   sched_rows_get returns the row for id; when there is none and `create`,
   appends a zeroed row with that id (growing the array; *created set to
   1), else returns NULL. NULL too when memory runs out. Rows may move when
   one is appended. The array stays the caller's: free(rows) when done.
   Use SCHED_ROWS_GET(arr, n, cap, id, create, created) for the typed form. */
void *sched_rows_get(void *rowsp, size_t *n, size_t *cap, size_t size, long id,
                     int create, int *created);
#define SCHED_ROWS_GET(arr, n, cap, id, create, created)                                 \
    ((__typeof__(*(arr)) *)sched_rows_get(&(arr), &(n), &(cap), sizeof *(arr), (id),     \
                                          (create), (created)))

/* Reads the optional number obj.key into *out, `dflt` when absent. A value
   that is not a finite number in [lo, hi] (a whole one when `whole`) is
   refused: -1 with err "WHERE.KEY: must be a number from LO to HI" ("an
   integer" when whole; just "must be a number" when lo and hi are
   infinite). `where` is the spec object: "scheduler", "guard", ... */
int sched_opt_num(const json_t *obj, const char *where, const char *key, double dflt,
                  double lo, double hi, int whole, double *out, char *err,
                  size_t errsize);

/* A zeroed scheduler of `size` bytes (a struct that begins with its
   sched_t) with base.ops and base.spec set. NULL with err "out of memory"
   when memory runs out. Caller owns it (ops->destroy, or free() while the
   constructor still holds it). */
void *sched_alloc(size_t size, const sched_ops *ops, const spec_t *spec, char *err,
                  size_t errsize);

/* The first key of the object obj (NULL: none) that is not in `known`
   (NULL-terminated), or NULL when every key is known. Borrowed from obj.
   The caller words the error: "WHERE.KEY: unknown option ...". */
const char *sched_opt_unknown(const json_t *obj, const char *const *known);

/* A value and its index. qsort(a, n, sizeof *a, sched_vi_cmp) orders by
   value, then index (ties deterministic). */
typedef struct {
    double v;
    int i;
} sched_vi;
int sched_vi_cmp(const void *a, const void *b);

/* Saved-state helpers: a double as JSON (wire_real: "nan", "inf", "-inf"
   when not finite; new reference), and a number field of `obj` back (those
   strings too; NaN when absent or null). */
json_t *sched_json_real(double x);
double sched_json_double(const json_t *obj, const char *key);

/* One saved observation {"trial": n, "params": {..}, "value": x} read back
   (sched_bo and sched_tpe save their lists so). *params is borrowed from
   `e`. With `with_value` the value is required: a finite number sets
   *value (*failed 0), null sets *failed 1 (*value NaN); without it *value
   is NaN and *failed 0. 0, or -1 when `e` is not of that form. */
int sched_json_point(const json_t *e, int with_value, long *trial, json_t **params,
                     double *value, int *failed);

/* Constructors of the built-in schedulers (registry in sched.c). */
sched_t *sched_random_new(const spec_t *spec, char *err, size_t errsize);
sched_t *sched_grid_new(const spec_t *spec, char *err, size_t errsize);
/* The tree-structured Parzen estimator (sched_tpe.c) and CMA-ES
   (sched_cmaes.c); their options are in those files' headers and in
   docs/spec.md. One objective without constraints: otherwise NULL with
   "scheduler.type: ...". */
sched_t *sched_tpe_new(const spec_t *spec, char *err, size_t errsize);
sched_t *sched_cmaes_new(const spec_t *spec, char *err, size_t errsize);

/* ---- batch size (sched_batchsize.c, sched_bs_*.c), early stopping (sched_es.c) */

sched_t *sched_batchsize_new(const spec_t *spec, char *err, size_t errsize);
sched_t *sched_asha_new(const spec_t *spec, char *err, size_t errsize);   /* a monitor */
sched_t *sched_median_new(const spec_t *spec, char *err, size_t errsize); /* a monitor */
sched_t *sched_hyperband_new(const spec_t *spec, char *err,
                             size_t errsize); /* a monitor */

/* One gradient-noise measurement (McCandlish et al. 2018): squared norms
   of the mean gradient over a small batch bs and a big batch bb > bs. */
typedef struct {
    double gs, gb; /* |G_Bs|^2, |G_Bb|^2 */
    double bs, bb; /* B_s, B_b */
} sched_gns_point;

/* Unbiased per-measurement estimates of |G|^2 and tr(Sigma):
   |G|^2 = (bb gb - bs gs)/(bb - bs), tr = (gs - gb)/(1/bs - 1/bb).
   0, or -1 when the point is unusable (bb <= bs, non-finite). */
int sched_gns_estimate(const sched_gns_point *p, double *g2, double *trace);

/* Critical batch size of a run: B_simple = mean(tr)/mean(|G|^2) over the
   n points (ratio of means, as the EMAs do), with a percentile bootstrap
   confidence interval at level `conf` (e.g. 0.95) from `nboot` resamples
   of the points (seeded: reproducible). lo/hi are NaN when the interval is
   unbounded (resampled |G|^2 <= 0 too often). 0, or -1 when fewer than 2
   usable points or mean |G|^2 <= 0. */
typedef struct {
    double b_simple, lo, hi; /* estimate and interval */
    double g2, trace;        /* the means */
    int n;                   /* usable points */
} sched_gns_result;
int sched_gns_critical(const sched_gns_point *pts, size_t n, int nboot, double conf,
                       unsigned long long seed, sched_gns_result *out);

/* Pollux efficiency of batch b relative to b0 for noise scale bsimple:
   (bsimple + b0)/(bsimple + b). AdaScale gain at scale S = b/b0:
   r = (sigma^2 + mu^2)/(sigma^2/S + mu^2) with sigma^2 = tr/b0, mu^2 = |G|^2,
   which equals S * efficiency. */
double sched_bs_efficiency(double bsimple, double b0, double b);
double sched_bs_adascale_gain(double bsimple, double b0, double b);
/* The noise scale the efficiency uses for SGD with momentum m in [0, 1):
   bsimple / (1 - m) (momentum raises the critical batch: in the
   curvature-limited regime of large batches it allows a 1/(1 - m) larger
   step, while the noise-limited regime of small ones is unchanged; Zhang
   et al. 2019, "Which algorithmic choices matter at which batch sizes?").
   bsimple itself for m = 0 or out of range. */
double sched_bs_noise_scale(double bsimple, double momentum);

/* Population based training (sched_pbt.c): scheduler.type "pbt". */
sched_t *sched_pbt_new(const spec_t *spec, char *err, size_t errsize);

/* The divergence guard (sched_guard.c), a monitor built from spec->guard:
   NULL with err ("guard.xxx: ...") when its options are wrong. */
sched_t *sched_guard_new(const spec_t *spec, char *err, size_t errsize);

/* The divergence guard's loss-jump test (sched_guard.c), shared with the
   controller's guarded changes (controller/ctl_guard.c). */
typedef struct {
    double jump;  /* a value above jump × the average is a jump (guard.jump, 3) */
    double alpha; /* weight of a new healthy value in the average (guard.ema, 0.2) */
    long warmup;  /* healthy values before jumps are judged (guard.warmup, 3) */
} sched_jump_test;
/* Judges `value` of `metric` at `step` against the moving average *ema of
   *n healthy values: 1 when it is NaN/inf or a jump, with what it saw in
   `what` (average unchanged); else 0, and the value joins the average. */
int sched_jump_judge(const sched_jump_test *test, const char *metric, long step,
                     double value, double *ema, long *n, char *what, size_t size);
/* The test the spec's "guard" object configures (its defaults without
   one); 0, or -1 with err when its options are wrong. *metric (size
   msize) gets guard.metric, "train_loss" by default. */
int sched_jump_test_of(const spec_t *spec, sched_jump_test *out, char *metric,
                       size_t msize, char *err, size_t errsize);

#endif
