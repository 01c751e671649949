/*  gp.h - Gaussian-process regression for the bo scheduler (docs/design.md, Schedulers).

    A GP over inputs in [0,1]^d with a Matérn-5/2 ARD kernel, a signal
    variance (amplitude) and a noise variance. Outputs are standardised
    (zero mean, unit sd) before fitting; predictions are in standardised
    units (use gp_y_mean/gp_y_sd to map back). Hyperparameters are fitted by
    maximising the log marginal likelihood plus weak log-normal priors with
    GSL's BFGS2 and analytic gradients, from several starts. The Cholesky
    factorisation adds jitter, escalating, when the matrix is not positive
    definite. Linear algebra is GSL on OpenBLAS.

    Hyperparameters are a vector theta of gp_ntheta(d) = d + 2 logs:
      theta[0..d-1]  log lengthscales
      theta[d]       log signal variance sf2
      theta[d+1]     log noise variance; the noise is GP_NOISE_FLOOR + exp()

    A gp_t is not thread-safe (predictions use its scratch space); use one
    per thread. Nothing here reads a clock or global random state.
*/
#ifndef JZ_GP_H
#define JZ_GP_H

#include <stdatomic.h>
#include <stddef.h>

#define GP_NOISE_FLOOR 1e-9

typedef struct gp gp_t;

/* Number of hyperparameters for d inputs: d + 2. */
int gp_ntheta(int d);

/* A GP over d >= 1 inputs with default hyperparameters (the prior means)
   and no data. NULL when out of memory. Caller owns the result and must
   destroy it with gp_destroy. */
gp_t *gp_new(int d);

/* NULL-safe; sets *gp_p to NULL. */
void gp_destroy(gp_t **gp_p);

int gp_dim(const gp_t *gp);
int gp_size(const gp_t *gp); /* number of data points */

/* Copies n >= 1 points X (row-major n x d, in [0,1]^d) and their values y
   (finite). With `standardise` the output mean and sd are recomputed from
   y (sd 1 when all values are equal); else the previous ones are kept
   (used to add fantasies without moving the scale). Drops any previous
   factorisation: call gp_fit or gp_set_theta next. 0, or -1 when out of
   memory or n < 1. */
int gp_set_data(gp_t *gp, const double *X, const double *y, int n, int standardise);

double gp_y_mean(const gp_t *gp);
double gp_y_sd(const gp_t *gp);

/* Standardised value of the i-th data point. */
double gp_y_std(const gp_t *gp, int i);

/* The kernel k(a, b) under theta (signal variance included, no noise).
   When dtheta is non-NULL it receives dk/dtheta (gp_ntheta(d) values; the
   noise entry is 0); when dx is non-NULL it receives dk/da (d values). */
double gp_kernel(int d, const double *theta, const double *a, const double *b,
                 double *dtheta, double *dx);

/* Log marginal likelihood of the standardised data under theta (no
   prior), and its gradient into grad (gp_ntheta values) when non-NULL.
   -INFINITY when the kernel matrix cannot be factorised even with the
   largest jitter. Leaves the GP's own factorisation unchanged. */
double gp_log_marginal(gp_t *gp, const double *theta, double *grad);

/* The prior on the lengthscales l (in the unit cube):
   GP_PRIOR_LOGNORMAL (the default): log-normal, centred at 0.5 sqrt(d),
     sd 1.5 in log l: weak, so a few close points can pull l down;
   GP_PRIOR_WALL: log density -0.1 (l^2 + 1/l^2) (the shape Optuna's
     GPSampler uses on 1/l^2): mode at l = 1, and steep walls that keep l
     from shrinking much below 0.2 on little data: a smoother, more
     confident model that converges more sharply on smooth objectives but
     resolves narrow wells less. */
typedef enum { GP_PRIOR_LOGNORMAL = 0, GP_PRIOR_WALL = 1 } gp_prior;

/* Selects gp's lengthscale prior for the next gp_fit (and the objective
   gp_set_theta reports); drops the factorisation. */
void gp_set_prior(gp_t *gp, gp_prior prior);

/* Log density of the weak hyperparameter prior (up to a constant) and its
   gradient into grad when non-NULL: gp_log_prior_kind with the default. */
double gp_log_prior(int d, const double *theta, double *grad);

/* The same under a given lengthscale prior. */
double gp_log_prior_kind(int d, gp_prior prior, const double *theta, double *grad);

/* The prior mean of theta (the default hyperparameters), into theta. */
void gp_default_theta(int d, double *theta);

typedef struct {
    const double *theta0;     /* warm start (gp_ntheta values) or NULL */
    int restarts;             /* random starts drawn from the prior, besides
                                 theta0 and the prior mean (default 2) */
    int default_start;        /* with theta0: also start from the prior
                                 mean (without, always); and when set
                                 (default 1), from the prior mean with a
                                 noise of 1e-2 too */
    int max_iter;             /* BFGS iterations per start (default 100) */
    int subset;               /* when n > subset > 0, the starts run on a
                                 random subset of this size and only the
                                 best is polished on all data (default 0) */
    int polish_iter;          /* iterations of that polish (default 20; 0
                                 keeps the subset's answer) */
    unsigned long long seed;  /* for the random starts and the subset */
    const atomic_int *cancel; /* when non-NULL and set, gives up (-1) */
} gp_fit_opts;

/* Fills opts with the defaults. */
void gp_fit_opts_init(gp_fit_opts *opts);

/* Maximises log marginal likelihood + log prior over theta from several
   starts, keeps the best, and factorises. 0, or -1 when cancelled or
   nothing could be factorised (the GP then has no usable factorisation). */
int gp_fit(gp_t *gp, const gp_fit_opts *opts);

/* Sets theta and factorises the kernel matrix. 0 or -1. */
int gp_set_theta(gp_t *gp, const double *theta);

/* Current theta (gp_ntheta values, borrowed). */
const double *gp_theta(const gp_t *gp);

/* Jitter (absolute, added to the diagonal) used by the last factorisation. */
double gp_jitter(const gp_t *gp);

/* Log marginal likelihood + log prior of the last factorisation. */
double gp_objective(const gp_t *gp);

/* Posterior of the latent function at x (standardised units): mean and
   variance, and when non-NULL their gradients with respect to x (d values
   each). Requires a factorisation (gp_fit or gp_set_theta). */
void gp_predict(gp_t *gp, const double *x, double *mean, double *var, double *dmean,
                double *dvar);

/* Posterior mean and variance at m points Xs (row-major m x d), in
   batches through BLAS level 3; var may be NULL (the mean alone is much
   cheaper). 0 or -1 when out of memory. */
int gp_predict_batch(gp_t *gp, const double *Xs, int m, double *mean, double *var);

/* Leave-one-out posterior of each data point's (noisy) value given the
   others, in standardised units, under the current factorisation
   (theta kept): mean into mu and variance into var (n values each).
   0, or -1 without a factorisation, with fewer than 2 points or when out
   of memory. */
int gp_loo(gp_t *gp, double *mu, double *var);

#endif
