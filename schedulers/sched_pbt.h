/*  sched_pbt.h - private to the pbt scheduler (sched_pbt.c) and its pb2
    explore step (sched_pbt_pb2.c).

    pb2 (Parker-Holder et al. 2020, "Provably efficient online
    hyperparameter optimization with population-based bandits") models the
    improvement of the objective over one ready interval as a function of
    the params held during it and of the time (the step), with the GP of
    the bo scheduler (gp.h), and picks the new params of an exploiting
    trial by maximising an upper confidence bound at the current time.
*/
#ifndef JZ_SCHED_PBT_H
#define JZ_SCHED_PBT_H

#include "sched.h"

/* One observation for pb2: the unit-cube params (spec order) held during
   an interval, the step at its end, and the improvement of the objective
   over it (positive is better, whatever the mode). */
typedef struct {
    double *x;   /* nparams values, owned */
    double step; /* step at the end of the interval */
    double y;    /* improvement over the interval */
} pbt_obs;

/* Picks new params by GP-UCB over `n` observations (the caller passes
   the most recent window) at time `step_now`. `kappa` > 0 weighs the
   uncertainty; `seed` makes it reproducible. Returns a new object of
   legal params (caller owns) or NULL when there are too few points or the
   GP cannot be fitted (the caller then falls back to perturbation). */
json_t *sched__pb2_select(const spec_t *spec, const pbt_obs *obs, int n, double step_now,
                          double kappa, unsigned long long seed);

#endif
