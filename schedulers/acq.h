/*  acq.h - acquisition functions for the bo scheduler and their optimiser.

    Log expected improvement (for minimisation, in the GP's standardised
    units), computed without underflow however far a point is from the
    incumbent (Ament et al. 2023, "Unexpected improvements to expected
    improvement"), optionally times the probability of feasibility under
    constraint models (in log form: log EI + sum log PoF), and a lower confidence bound
   ("ucb": mean - kappa sd, negated so that both are maximised). The optimiser scores a
   Sobol set (gsl_qrng_sobol with a seeded random shift) plus points drawn near given
   starts, then polishes the best with a projected spectral gradient method inside
   [0,1]^d, and returns the best distinct legal points.
*/
#ifndef JZ_ACQ_H
#define JZ_ACQ_H

#include "acq_ehvi.h"
#include "gp.h"

typedef enum { ACQ_EI = 0, ACQ_UCB = 1 } acq_kind;

/* A constraint model for probability of feasibility: a GP (borrowed) of
   the constraint metric, and the bound in that GP's standardised units. */
typedef struct {
    gp_t *gp;
    double bound;
    int upper; /* 1: feasible when the metric <= bound; 0: when >= bound */
} acq_con;

typedef struct {
    acq_kind kind;
    double best;  /* EI: incumbent value, standardised (lower is better) */
    double kappa; /* UCB: the bound is mean - kappa sd */
    /* Constraints (Gardner et al. 2014): with ncons > 0 the acquisition is
       the base one + sum_k log P(constraint k holds), i.e. log(EI x PoF)
       for EI; while `infeasible` is set (nothing feasible is known yet, so
       there is no incumbent) it is the log PoF alone. */
    int ncons;
    const acq_con *cons; /* ncons, borrowed */
    int infeasible;
    /* Several objectives: when non-NULL the base acquisition is log EHVI
       over these objective models (acq_ehvi.h, borrowed) instead of the
       one given GP's (which then only gives the dimension). */
    const acq_ehvi *ehvi;
} acq_t;

/* log h(z) with h(z) = z Phi(z) + phi(z) = E[max(0, z + N(0,1))]; finite
   for every finite z (for |z| > 1e150 the value saturates near -5e299).
   When dlogh is non-NULL it receives d log h / dz = Phi(z) / h(z). */
double acq_log_h(double z, double *dlogh);

/* log Phi(z), the standard normal's log CDF; finite for every finite z.
   When dlog is non-NULL it receives d log Phi / dz = phi(z) / Phi(z). */
double acq_log_Phi(double z, double *dlog);

/* log E[max(0, best - f)] for f ~ N(mu, sigma^2), sigma > 0, and its
   partial derivatives (when non-NULL). */
double acq_log_ei(double mu, double sigma, double best, double *dmu, double *dsigma);

/* The acquisition (to maximise) at x under gp, and its gradient with
   respect to x (d values) when grad is non-NULL. */
double acq_value(gp_t *gp, const acq_t *a, const double *x, double *grad);

/* Acquisition at m points (rows of X); 0 or -1 when out of memory. */
int acq_values(gp_t *gp, const acq_t *a, const double *X, int m, double *vals);

/* Maps a point of [0,1]^d to the nearest legal one, in place. */
typedef void (*acq_round_fn)(void *ctx, double *x);

typedef struct {
    int n_candidates;          /* Sobol points (default 1024) */
    int n_local;               /* points drawn near `starts` (default 256) */
    int n_polish;              /* best distinct candidates polished (default 5) */
    int max_iter;              /* gradient iterations per polish (default 40) */
    const unsigned char *mask; /* per dimension: 1 continuous (polished,
                                  perturbed), 0 discrete; NULL = all 1 */
    acq_round_fn round;        /* NULL = every point is legal */
    void *round_ctx;
    const double *lo, *hi; /* a box inside [0,1]^d that every point of the
                              search stays in, on the mask's dimensions
                              (d values each); NULL = all of [0,1]^d */
    const double *starts;  /* n_starts rows of d: where to search locally */
    int n_starts;
    unsigned long long seed;  /* for the Sobol shift and the local draws */
    const atomic_int *cancel; /* when non-NULL and set, gives up (-1) */
} acq_opt_opts;

void acq_opt_opts_init(acq_opt_opts *o);

/* Maximises the acquisition over legal points of [0,1]^d. Writes up to k
   best distinct legal points, best first, to out (k x d) and their values
   to vals. Returns how many were written (>= 1), or -1 when out of memory
   or cancelled. */
int acq_optimize(gp_t *gp, const acq_t *a, const acq_opt_opts *o, double *out,
                 double *vals, int k);

#endif
