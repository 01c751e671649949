/*  sched_bo_job.h - internal to the bo scheduler: the parameter encoding
    (sched_bo_enc.c) and the job a worker thread runs (sched_bo_job.c), shared
    with the state and the interface in sched_bo.c. Not for other parts.

    A job owns its arrays; its layout and constraints are borrowed from the
    scheduler and the spec, which outlive it. Once launched, only the worker
    writes the job's results until `done` is set; the scheduler then reads
    them (after sched__bo_job_join), or cancels the job.
*/
#ifndef JZ_SCHED_BO_JOB_H
#define JZ_SCHED_BO_JOB_H

#include "gp.h"
#include "sched_bo.h"

#include <pthread.h>
#include <stdatomic.h>

enum { BO_BELIEVER = 0, BO_LIAR = 1 };
enum { BO_WARP_HALFRANK = 0, BO_WARP_NONE = 1, BO_WARP_POWER = 2, BO_WARP_AUTO = 3 };
enum { BO_CON_POF = 0, BO_CON_PENALTY = 1 };
enum { BO_MO_EHVI = 0, BO_MO_PAREGO = 1 };
enum { BO_FID_RUNGS = 0, BO_FID_FINAL = 1, BO_FID_JOINT = 2 };
enum { BO_RUGGED_AUTO = 0, BO_RUGGED_OFF = 1 };
#define BO_EHVI_MAX_OBJECTIVES 3 /* the boxes grow as (front size)^(m-1) */
#define BO_TOPK 8                /* ranked suggestions the worker returns */
/* The most dimensions one-hot choices may bring the encoding to; beyond,
   a choice is one ordered dimension. Bounds the model's size (theta has
   D + 2 values, the candidates D each) whatever the spec's choices. */
#define BO_MAX_ONEHOT_DIMS 256
/* the end-game's trust region (option "local"): its side on a dimension of
   average lengthscale, in [0,1] units, starts at BO_TR_INIT, doubles after
   BO_TR_SUCC improvements in a row and halves after BO_TR_FAIL local trials
   in a row that did not improve, within [BO_TR_MIN, BO_TR_MAX] */
#define BO_TR_INIT 0.2
#define BO_TR_MIN (1.0 / 256)
#define BO_TR_MAX 0.8
#define BO_TR_SUCC 2
#define BO_TR_FAIL 2

/* ---- rugged objectives (sched_bo_portfolio.c) ------------------------- */

/* The evidence is read from this many observations on, and up to the
   next (beyond, the leave-one-out's inverse costs too much: the decision
   made by then stands) */
#define BO_RUGGED_MIN_N 12
#define BO_RUGGED_MAX_N 300
/* "rugged": leave-one-out R^2 below this and noise share above the next */
#define BO_RUGGED_R2 0.5
#define BO_RUGGED_NOISE 0.01

typedef struct {
    int n;         /* observations it was read from */
    double loo_r2; /* 1 - leave-one-out squared error / variance (NaN below
                      BO_RUGGED_MIN_N observations) */
    double noise;  /* the noise's share of the prior variance */
    double ls;     /* geometric mean lengthscale of the masked dimensions */
    int rugged;    /* 1 when the model says many basins */
    int refit;     /* 1 when the model was refitted under the log-normal prior
                      (sched__bo_rugged_refit) */
} bo_evidence;

typedef struct {
    const spec_t *spec;
    int np;              /* parameters */
    int D;               /* encoded dimensions */
    int *off;            /* first dimension of parameter k */
    unsigned char *mask; /* 1 for float/int/ordered dimensions, 0 for one-hot */
    unsigned char *hot;  /* per parameter: 1 for a one-hot choice (owned by lay,
                            shared by lay1) */
    int resdim;          /* 1: the last dimension is the resource (the joint
                            multi-fidelity model), kept at 1 by sched__bo_round */
} bo_layout;

typedef struct {
    const bo_layout *lay; /* borrowed from the scheduler, read-only */
    int n, m;             /* observations, pending */
    double *X, *y, *Xp;   /* n x D, n (lower is better; NaN = failed), m x D */
    double *theta0;       /* warm start or NULL */
    int acq, fantasy, warp;
    gp_prior prior; /* the objective model's lengthscale prior */
    double kappa;
    /* the end-game: > 0 to search only the trust region of this side
       around the incumbent (the best observation) */
    double tr_len;
    /* constraints modelled by probability of feasibility: nc GPs on the
       constraint metrics C (n x nc, NaN when not reported); feas[i] says
       whether observation i met every constraint. nc is 0 otherwise. */
    int nc;
    double *C;
    const spec_constraint *cons; /* nc, the spec's (outlives the job) */
    unsigned char *feas;
    /* several objectives modelled by EHVI: nobj GPs on F (n x nobj, each
       objective scaled to [0, 1], NaN for failed); nobj is 0 otherwise */
    int nobj;
    double *F;
    /* rugged objectives (sched_bo_portfolio.c): 1 to read the evidence
       after the fit and act on it (only while prior is GP_PRIOR_WALL) */
    int rugged;
    /* many observations (sched_bo_large.c; 0: the defaults): the most rows
       the model fits on, which rule picks the first share of them, and
       that share (the rest: a random sample) */
    int large_n;
    int large_rule; /* BO_LARGE_BEST or BO_LARGE_NEAREST */
    double large_first;
    unsigned long long seed;
    atomic_int cancel;
    atomic_int done;
    pthread_t thread;
    int threaded;
    /* results */
    double *outp;  /* BO_TOPK x D */
    int got;       /* rows in outp, or -1 */
    double *theta; /* fitted, D + 2 */
    int theta_ok;
    bo_evidence ev; /* read when `rugged` (else zero) */
} bo_job;

/* The options (sched_bo.h describes them). */
typedef struct {
    int acq;        /* 0: log EI, 1: UCB */
    double kappa;   /* UCB's multiple of the sd */
    long n_init;    /* Sobol design size */
    int fantasy;    /* BO_BELIEVER or BO_LIAR */
    int warp;       /* BO_WARP_* */
    int cmodel;     /* BO_CON_POF or BO_CON_PENALTY */
    int momodel;    /* BO_MO_EHVI or BO_MO_PAREGO */
    gp_prior prior; /* the objective model's lengthscale prior */
    double local;   /* the end-game: this fraction of budget.trials, last */
    int fidelity;   /* BO_FID_* */
    int rugged;     /* BO_RUGGED_AUTO or BO_RUGGED_OFF */
    /* many observations: "large_n" (the most a fit uses), "large_subset"
       (BO_LARGE_BEST or BO_LARGE_NEAREST), "large_first" (its share) */
    int large_n;
    int large_rule;
    double large_first;
} bo_opts;

/* Fills o with the defaults for spec (borrowed), then the spec's
   "scheduler" options. 0, or -1 with "scheduler.KEY: ..." in err when an
   option is unknown or wrong (sched_bo_opts.c). */
int sched__bo_options(bo_opts *o, const spec_t *spec, char *err, size_t errsize);

/* ---- encoding (sched_bo_enc.c) ---------------------------------------- */

/* Fills l (caller storage) for spec (borrowed): which choices are one-hot,
   each parameter's first dimension, the mask. 0, or -1 out of memory (l
   then holds nothing to free). sched__bo_layout_fini frees what it owns. */
int sched__bo_layout_init(bo_layout *l, const spec_t *spec);
void sched__bo_layout_fini(bo_layout *l);

/* params (borrowed) into x (l->D values): 0, or -1 when a parameter is
   missing or illegal. Inactive conditional parameters take a fixed place. */
int sched__bo_encode(const bo_layout *l, const json_t *params, double *x);

/* x back to params (pruned to the active ones). Caller owns the result. */
json_t *sched__bo_decode(const bo_layout *l, const double *x);

/* acq's round callback (ctx: the layout): int dimensions to their
   integer's place, one-hot blocks to their argmax, inactive parameters to
   their fixed place. Thread-safe. */
void sched__bo_round(void *ctx, double *x);

/* ---- many observations (sched_bo_large.c) ------------------------------ */

/* Past this many observations a job fits its GP on BO_LARGE_N of them
   (the default of option "large_n"): measured, bench_bo latency and
   bench_bo large (docs/design.md, Schedulers: bo at large n). */
#ifndef BO_LARGE_N /* -D for a benchmark of the exact model */
#define BO_LARGE_N 1000
#endif
/* which rows a large job keeps first (option "large_subset"), the rest
   being a random sample: the best by the modelled value, or the nearest
   to the incumbent in the previous fit's lengthscales */
enum { BO_LARGE_BEST = 0, BO_LARGE_NEAREST = 1 };
#define BO_LARGE_FIRST 0.5 /* the default of option "large_first" */

/* When j->n > K (j->large_n, or BO_LARGE_N when 0), keeps K rows of j (X,
   y, and C, feas, F where present), in their original order: the first
   round(K x F) (F: j->large_first, or BO_LARGE_FIRST when 0) by
   j->large_rule (BO_LARGE_BEST: lowest y, NaN last; BO_LARGE_NEAREST:
   nearest to the row of lowest y, each dimension's distance divided by
   its lengthscale from j->theta0 when set, ties to the lower index) and a
   random sample of the others, seeded by j->seed; j->n becomes K. Pending
   rows (Xp) are untouched. 0, or -1 out of memory (j unchanged). */
int sched__bo_large_subset(bo_job *j);

/* ---- rugged objectives: the functions (sched_bo_portfolio.c) ---------- */

/* Reads the evidence from gp (fitted, factorised; borrowed) into ev;
   mask (borrowed, may be NULL) marks the dimensions whose lengthscales
   count. 0, or -1 out of memory or when the leave-one-out fails (ev then
   says not rugged). */
int sched__bo_evidence(gp_t *gp, const unsigned char *mask, bo_evidence *ev);

/* When ev (from *gp_p) says rugged: fits a second GP to the same data
   (X, n x D, and y, as *gp_p has them; borrowed) under the log-normal
   lengthscale prior with fo's starts, and when its leave-one-out R^2 is
   higher swaps it into *gp_p (the first is destroyed) and ev describes it
   with refit set. 0 (whether or not it swapped; a failed second fit keeps
   the first model), or -1 when fo's cancel flag was raised. */
int sched__bo_rugged_refit(gp_t **gp_p, const double *X, const double *y,
                           const gp_fit_opts *fo, const unsigned char *mask,
                           bo_evidence *ev);

/* ---- the worker (sched_bo_job.c) -------------------------------------- */

/* Runs j in a worker thread, or here when no thread can start; `done` is
   set when it ends. */
void sched__bo_job_launch(bo_job *j);

/* Waits for a launched job's thread to end (after `done`). */
void sched__bo_job_join(bo_job *j);

/* Cancels, waits for and frees a launched job. NULL is fine. */
void sched__bo_job_abandon(bo_job *j);

/* Frees a job (not launched, or joined). NULL is fine. */
void sched__bo_job_free(bo_job *j);

#endif
