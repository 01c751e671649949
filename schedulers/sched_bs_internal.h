/*  sched_bs_internal.h - internal to the batch-size scheduler: its state (the
    scheduler and each trial's row), shared by the interface and options in
    sched_batchsize.c, the per-trial measurements and decisions in
    sched_bs_trial.c and the estimators in sched_bs_gns.c. Not for other parts.
    docs/design.md and sched_batchsize.c's header tell what it does.

    The scheduler owns its trials array; a bs_trial pointer is borrowed and
    valid until the next sched__bs_trial call that creates a row.
*/
#ifndef JZ_SCHED_BS_INTERNAL_H
#define JZ_SCHED_BS_INTERNAL_H

#include "sched.h"

#define BS_MAX_TP 24 /* distinct batch sizes in a trial's throughput table */

enum { GNS_GS = 1, GNS_GB = 2, GNS_BS = 4, GNS_BB = 8, GNS_ALL = 15 };
enum { RULE_ADASCALE = 0, RULE_SQRT, RULE_LINEAR, RULE_NONE };
extern const char *const sched__bs_rules[4]; /* by RULE_*, in sched_bs_trial.c */

#define BS_TP_WIN 16 /* step times kept per batch size (their lower quartile is used) */
#define BS_PL_MAX 64 /* the largest plateau_window */

typedef struct {
    double b;            /* batch size */
    double t[BS_TP_WIN]; /* the last step times seen at b (a ring) */
    int n, next;         /* how many held, where the next goes */
} bs_tp;

typedef struct {
    long id;
    double b0, lr0;        /* initial batch and base lr (NaN unknown) */
    double mom;            /* the trial's SGD momentum (0: none or unknown) */
    double b;              /* current batch (last reported or set) */
    double lr_sent;        /* peak lr in force (last set, else lr0) */
    long pstep;            /* step of the pending gns measurement */
    int have;              /* GNS_* bits present for pstep */
    sched_gns_point p;     /* the pending measurement */
    double ema_g2, ema_tr; /* raw EMAs (bias-corrected on use) */
    long nmeas;            /* measurements folded into the EMAs */
    bs_tp tp[BS_MAX_TP];   /* throughput table */
    int ntp;
    int skip_tp;      /* drop the first throughput report after a change */
    int pend_b;       /* a set batch_size not yet seen in the reports */
    int explored;     /* tried a second size to measure throughput */
    double undo_b;    /* the size an explore left, a candidate even under grow_only
                         until the next decision, within `interval` steps (NaN: none) */
    int probing;      /* no change yet, or the last one explored: `probe` steps apply */
    int lr_fixed;     /* lr0 came from the params or the option, not reports */
    long last_change; /* step of the last decision (0 at start) */
    int ramp;         /* lr warmup in progress */
    double ramp_from, ramp_to;
    long ramp_start, ramp_last; /* ramp start step; last step a ramp lr was considered */
    long decisions;
    long last_step;       /* highest step reported (a lower one: a new attempt) */
    double pl[BS_PL_MAX]; /* the objective's reports since the last change (a ring) */
    int npl, pl_next;     /* how many held, where the next goes */
    int annealing;        /* a plateau decision was made: goodput no longer decides */
} bs_trial;

typedef struct {
    sched_t base;
    long count;            /* suggestions made */
    long bmin, bmax;       /* batch range */
    int grid_int;          /* candidates: every integer (else powers of two) */
    int tp_cpu;            /* step cost from step_cpu_s (else wall: samples_per_s) */
    int grow_only;         /* never a smaller batch than the current one */
    long interval, warmup; /* steps */
    long probe;            /* steps before the first change and after an exploring one */
    int rule;              /* RULE_* */
    double ema, min_gain, prior_overhead, lr_opt; /* lr_opt NaN = none */
    double mom_opt;                               /* option momentum, NaN = none */
    long min_meas;
    int plateau_w;        /* objective reports in the plateau window (0: off) */
    double plateau_delta; /* the least gain of the window's trend */
    bs_trial *trials;
    size_t ntrials, cap;
} sched_bs;

/* qsort's comparison of doubles, ascending. */
int sched__bs_cmp_double(const void *a, const void *b);

/* Resets a trial's row to its start (NaN batch and lr, probing). */
void sched__bs_trial_init(bs_trial *t, long id);

/* The row of trial `id`; created (initialised) if absent and `create`. Returns NULL
   when absent and not created, or on out of memory. Borrowed. */
bs_trial *sched__bs_trial(sched_bs *self, long id, int create);

/* Adds one step time measured at batch b to the trial's throughput table (ignored
   when not a positive finite number). */
void sched__bs_tp_add(bs_trial *t, double b, double step_time);

/* Folds the trial's complete gradient-noise measurement at `step` into its EMAs and
   decides whether to change the batch: writes up to `max` instructions to out.
   Returns how many. */
int sched__bs_measure(sched_bs *self, bs_trial *t, long step, sched_instr *out, int max);

/* Adds an objective report to the plateau window and decides a batch doubling or an
   lr halving when its trend is flat. Returns the instructions written to out. */
int sched__bs_plateau(sched_bs *self, bs_trial *t, long step, double value,
                      sched_instr *out, int max);

/* The next `set lr` of a warmup ramp under way at `step`, if due. Returns 0 or 1. */
int sched__bs_ramp(sched_bs *self, bs_trial *t, long step, sched_instr *out, int max);

#endif
