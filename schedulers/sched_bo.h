/*  sched_bo.h - the Bayesian-optimisation scheduler (docs/design.md, Schedulers "bo").

    Options (the spec's "scheduler" object):
      "type": "bo", "seed": integer      as for every scheduler
      "acq": "ei" | "ucb"                log expected improvement (default)
                                         or the confidence bound
      "kappa": number >= 0               ucb: mean - kappa sd (default 1.96)
      "n_init": integer >= 1             Sobol initial design size
                                         (default clamp(2 x params, 5, 10))
      "fantasy": "believer" | "liar"     pending trials count as observed at
                                         the GP mean (kriging believer,
                                         default) or at the worst value
      "warp": "auto" | "power" | "halfrank" | "none"
                                         output warping before the GP
                                         (warp.h): "halfrank" maps the worse
                                         half of the values by rank onto a
                                         Gaussian tail; "power" applies a
                                         Yeo-Johnson transform (lambda by
                                         maximum likelihood) first; "auto"
                                         (default) also fits a GP to the
                                         Yeo-Johnson values alone and keeps
                                         the model with the higher
                                         leave-one-out density of the better
                                         half (from 8 to 300 observations;
                                         else "power"); "none" only
                                         standardises
      "lengthscale_prior": "wall" | "lognormal"
                                         the objective GP's prior on its
                                         lengthscales (gp.h): steep walls
                                         around 1 (default), or the weaker
                                         log-normal (which resolves narrow
                                         wells better)
      "constraint_model": "pof" | "penalty"
                                         with the spec's constraints: a GP per
                                         constraint metric and log EI + log
                                         probability of feasibility (default;
                                         while nothing is feasible, the
                                         probability alone), or one GP on the
                                         objective with a violation penalty
      "fidelity": "joint" | "rungs" | "final"
                                         with early_stopping (one objective, no
                                         constraints): one GP over (params,
                                         resource) (default), a GP on the
                                         highest resource level with n_init
                                         results (BOHB), or finished trials
                                         only; stopped trials are never taken
                                         as finished (sched_bo_mf.c)
      "local": number in [0, 1]          the end-game: the last fraction
                                         (default 0.3) of budget.trials
                                         maximises the acquisition only in
                                         a trust region around the best
                                         observation (see sched__bo_tr_box
                                         and sched__bo_tr_update); 0 never.
                                         One objective without constraints
                                         or early stopping only
      "rugged": "auto" | "off"           "auto" (default): after each fit
                                         (from 12 to 300 observations) the
                                         model's leave-one-out R^2 and noise
                                         share say whether the objective has
                                         many basins; when they do and a fit
                                         under the log-normal lengthscale
                                         prior predicts the observations
                                         better, the study keeps that prior
                                         from then on (saved in the state as
                                         "rugged"; sched_bo_portfolio.c).
                                         One objective, without early
                                         stopping; "off" never
      "large_n": integer 100..5000       the most finished trials one fit
                                         uses (default 1000); past it a
                                         subset (sched_bo_large.c):
      "large_subset": "best" | "nearest" which rows the subset takes first:
                                         the best by the modelled value, or
                                         the nearest to the best trial in the
                                         last fit's lengthscales
      "large_first": number in (0, 1]    the share of large_n taken first
                                         (default 0.5); the rest is a random
                                         sample of the others
*/
#ifndef JZ_SCHED_BO_H
#define JZ_SCHED_BO_H

#include "sched.h"

/* Creates the bo scheduler for spec (borrowed; must outlive it). NULL with
   "scheduler.xxx: ..." in err when an option is wrong. Caller owns the
   result and must destroy it with sched_destroy. */
sched_t *sched_bo_new(const spec_t *spec, char *err, size_t errsize);

/* Internal (sched_bo_mo.c): the values the GP models for a study with
   several objectives or constraints, lower is better, into y[0..n): for
   observation i, `value[i]` (the first objective as reported), its last
   metrics `metrics[i]` (borrowed, may be NULL) and whether it failed.
   Failed ones, and ones missing an objective metric, get NaN. With
   `penalise` the constraints are folded in as a violation penalty (and a
   missing constraint metric gives NaN too); without, they are ignored
   here (probability of feasibility models them). `seed` draws the ParEGO
   weights. 0, or -1 when out of memory. */
int sched__bo_targets(const spec_t *spec, size_t n, const double *value,
                      json_t *const *metrics, const unsigned char *failed,
                      unsigned long long seed, int penalise, double *y);

/* Internal (sched_bo_mo.c): the objective vectors in minimisation form,
   each objective scaled to [0, 1] over the observations that have them
   all, into F (n x nobjectives); rows of failed observations, or ones
   missing an objective, are NaN. 0, or -1 when out of memory. */
int sched__bo_objectives(const spec_t *spec, size_t n, const double *value,
                         json_t *const *metrics, const unsigned char *failed, double *F);

/* Internal (sched_bo_mf.c): partial results under early stopping. A
   trial's objective at each level of a resource ladder (see that file).
   sched__bo_mf_new returns NULL when the spec has no early stopping (or
   memory runs out). Levels are 0..levels-1; _at gives NaN for a level the
   trial did not reach (or an unknown trial). save returns a new array;
   restore takes one back (0 or -1). */
typedef struct bo_mf bo_mf;
bo_mf *sched__bo_mf_new(const spec_t *spec);
void sched__bo_mf_free(bo_mf *m);
int sched__bo_mf_levels(const bo_mf *m);
double sched__bo_mf_level(const bo_mf *m, int k);
/* Level k's place on [0, 1] for the joint model: log(level/level 0) over
   log(full resource/level 0); 1 (a full trial) for k out of range. */
double sched__bo_mf_u(const bo_mf *m, int k);
void sched__bo_mf_metric(bo_mf *m, long trial, long step, const char *metric,
                         double value);
double sched__bo_mf_at(const bo_mf *m, long trial, int k);
json_t *sched__bo_mf_save(const bo_mf *m);
int sched__bo_mf_restore(bo_mf *m, const json_t *arr);

/* Internal (sched_bo_job.c), the end-game's trust region (option "local"):
   the box [lo, hi] (D values each) of side `len` around x0 on the mask's
   dimensions (NULL mask: all), each side in proportion to that dimension's
   lengthscale (theta's first D values are their logs) so that their
   geometric mean is len, cut to [0, 1]; [0, 1] on the other dimensions. */
void sched__bo_tr_box(int D, const unsigned char *mask, const double *theta,
                      const double *x0, double len, double *lo, double *hi);

/* Internal (sched_bo_job.c): the trust region's rule after a local trial
   ended, improving the incumbent or not: *len doubles after BO_TR_SUCC
   improvements in a row and halves after BO_TR_FAIL failures to improve in
   a row (the counters *succ and *fail then restart), within its limits. */
void sched__bo_tr_update(double *len, int *succ, int *fail, int improved);

/* Internal (sched_bo.c), for tests: the dimensions of a bo scheduler's
   encoding (one-hot choices within BO_MAX_ONEHOT_DIMS, one ordered
   dimension per other choice, one per float or int). */
int sched__bo_dims(const sched_t *s);

#endif
