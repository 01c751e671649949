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

/* At most this many trials are fitted (an evenly spaced subsample of the
   usable ones, in their given order, beyond it): the GP's cost grows with
   the cube of the trials, and 256 already pin the indices down. */
#define IMP_MAX_TRIALS 256

typedef struct {
    double *first;      /* nparams, owned */
    double *total;      /* nparams, owned */
    double *importance; /* nparams, owned */
    int n_used;         /* trials the model was fitted on (<= IMP_MAX_TRIALS) */
} imp_result;

/* Computes the indices for the parameters of spec from n trials: params[i]
   (borrowed JSON objects holding a legal value for every parameter) and
   their objective values y[i] (finite; the mode does not matter). Trials
   whose params are not all legal are skipped. samples is N (0: 2048).
   0 and *out filled (release with imp_result_fini), or -1 with a message
   in err: fewer than 2 usable trials, a spec with no parameters, a model
   that could not be fitted, or no memory. */
int imp_compute(const spec_t *spec, json_t *const *params, const double *y, int n,
                int samples, unsigned long long seed, imp_result *out, char *err,
                size_t errsize);

/* NULL-safe. */
void imp_result_fini(imp_result *r);

/* The importance of a study's parameters from `detail` (borrowed: the
   shape of store_study_detail, {"spec", "trials": [{"state", "value",
   "params"}]}), fitted on its completed trials with a finite value (the
   others' values are not final): {"method": "sobol-gp", "trials": N
   fitted, "completed": M usable (N < M beyond IMP_MAX_TRIALS), "params":
   [{"name", "importance", "first", "total"}, ...]}, most
   important first (ties in spec order). New reference, or NULL with a
   message in err (as imp_compute, or a spec that no longer parses).
   importance_study.c. */
json_t *imp_study(const json_t *detail, char *err, size_t errsize);

#endif
