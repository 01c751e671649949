/*  pareto.h - non-dominated sorting and hypervolume for multi-objective
    studies (docs/spec.md, objective as a list).

    Points are rows of an n x m array of objective vectors in minimisation
    form (spec_objective_values: a "max" objective negated). Used by the
    bo scheduler (normalisation), study show/export and the web API to
    mark the Pareto set, and by tests and benchmarks for the hypervolume.
*/
#ifndef JZ_PARETO_H
#define JZ_PARETO_H

#include <stddef.h>

/* 1 when a dominates b: no worse in every objective, better in one. */
int pareto_dominates(const double *a, const double *b, size_t m);

/* Marks in front[i] (1/0) the rows of F (n x m) that no other row
   dominates. Rows with valid[i] == 0 (or a non-finite value) are never on
   the front and dominate nothing; valid may be NULL (all valid). Equal
   rows are all on the front. Returns how many are on it. O(n^2 m). */
size_t pareto_front(const double *F, size_t n, size_t m, const unsigned char *valid,
                    unsigned char *front);

/* The hypervolume dominated by the rows of F (n x m) and bounded by the
   reference point ref (m): the measure of the points x <= ref dominated
   by some row. Rows not strictly below ref in every objective add
   nothing. Exact, by slicing along the last objective: O(n^(m-1) log n),
   meant for m <= 4 and a few thousand rows. Returns -1 when out of
   memory. */
double pareto_hypervolume(const double *F, size_t n, size_t m, const double *ref);

#endif
