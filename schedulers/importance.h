/*  importance.h - how much each parameter of a study matters
    (`jizhi study importance`, docs/cli.md).

    A GP (gp.c) is fitted to the finished trials (parameters encoded into
    [0,1]^D as the bo scheduler does: one dimension per float or int, log
    scale for log ones, one-hot for choices; the objective standardised),
    and the variance of its posterior mean over the whole space, each
    parameter drawn uniformly on its own scale, is split by Sobol indices,
    estimated by Monte Carlo on N base points (Saltelli's estimator of the
    first-order index, Jansen's of the total one):

      first[k]      Var(E[m | x_k]) / Var(m): the share of the variance that
                    parameter k explains alone
      total[k]      E[Var(m | x_-k)] / Var(m): its share with all its
                    interactions
      importance[k] first[k] clipped at 0 and normalised to sum to 1 (as
                    Optuna's fANOVA evaluator reports its importances);
                    all 0 when the model is flat

    Nothing here reads a clock or global random state: the same trials and
    seed give the same answer.
*/
#ifndef JZ_IMPORTANCE_H
#define JZ_IMPORTANCE_H

#include "common/spec.h"

#include <jansson.h>

/* What one fit may take, so that a read of a big study stays cheap (the
   web API answers it to anyone): beyond IMP_MAX_PARAMS parameters or
   IMP_MAX_WIDTH encoded dimensions (a float or int counts 1, a choice its
   number of values) no model is fitted and imp_study answers with the
   rank correlation (imp_rank); at most IMP_MAX_TRIALS trials are fitted
   (IMP_MAX_TRIALS_WIDE beyond IMP_WIDE dimensions: an evenly spaced
   subsample of the usable ones, in their given order), as the GP's cost
   grows with the cube of the trials and 256 already pin the indices
   down; and the Monte Carlo sample N shrinks (down to IMP_MIN_SAMPLES) so
   that N x (parameters + 2) x trials x dimensions stays under
   IMP_MAX_WORK kernel terms. Measured on one core of a loaded machine:
   64 dimensions and 128 trials in 1-3 s, 16 and 256 in 1-2 s. */
#define IMP_MAX_PARAMS 64
#define IMP_MAX_WIDTH 64
#define IMP_MAX_TRIALS 256
#define IMP_WIDE 16
#define IMP_MAX_TRIALS_WIDE 128
#define IMP_MIN_SAMPLES 256
#define IMP_MAX_WORK 250000000.0
/* The rank correlation reads at most this many trials (evenly spaced). */
#define IMP_RANK_MAX_TRIALS 4096

typedef struct {
    double *first;      /* nparams, owned */
    double *total;      /* nparams, owned */
    double *importance; /* nparams, owned */
    int n_used;         /* trials the model was fitted on (<= IMP_MAX_TRIALS) */
} imp_result;

/* Computes the indices for the parameters of spec from n trials: params[i]
   (borrowed JSON objects holding a legal value for every parameter active
   in them: a conditional one may be absent where its `when` is not met)
   and their objective values y[i] (finite; the mode does not matter).
   Trials whose params are not all legal are skipped. 0 <= first[k] <=
   total[k] <= 1 (the estimates are clipped to what the indices are). samples is N (0:
   2048, less when IMP_MAX_WORK says so). 0 and *out filled (release with
   imp_result_fini), or -1 with a message in err: fewer than 2 usable
   trials, a spec with no parameters or over IMP_MAX_PARAMS/IMP_MAX_WIDTH,
   a model that could not be fitted, or no memory. */
int imp_compute(const spec_t *spec, json_t *const *params, const double *y, int n,
                int samples, unsigned long long seed, imp_result *out, char *err,
                size_t errsize);

/* The encoded width of spec's space (see IMP_MAX_WIDTH). */
long imp_width(const spec_t *spec);

/* The model-free fallback: for each parameter k, out[k] in [0, 1] is
   |Spearman rho| between its value and y over the trials that have one
   (a number: a float, an int, or a choice of numbers only), or, for a
   choice with other values, the square root of the adjusted share of y's
   rank variance its values explain (rank eta^2, adjusted for the number
   of distinct values, so that a value per trial explains nothing); 0 with
   fewer than 3 trials. At most IMP_RANK_MAX_TRIALS trials are read
   (evenly spaced); *n_used says how many. params and y as imp_compute
   (values need not be legal). 0, or -1 with err when out of memory.
   importance_rank.c. */
int imp_rank(const spec_t *spec, json_t *const *params, const double *y, int n,
             double *out, int *n_used, char *err, size_t errsize);

/* NULL-safe. */
void imp_result_fini(imp_result *r);

/* The importance of a study's parameters from `detail` (borrowed: the
   shape of store_study_detail, {"spec", "trials": [{"state", "value",
   "params"}]}, where only "completed" trials with a finite value count:
   the others' values are not final). Fitted by imp_compute: {"method":
   "sobol-gp", "trials": N fitted, "completed": M usable (N < M beyond
   IMP_MAX_TRIALS), "params": [{"name", "importance", "first", "total"},
   ...]}, most important first (ties in spec order). Over the caps (or
   when no model can be fitted) the rank correlation instead, saying so:
   {"method": "spearman", "note": why and what it is, "trials",
   "completed", "params": [{"name", "importance": imp_rank's value,
   "first": null, "total": null}]}. New reference, or NULL with a message
   in err (fewer than 2 usable trials, a spec that no longer parses, no
   memory). importance_study.c. */
json_t *imp_study(const json_t *detail, char *err, size_t errsize);

#endif
