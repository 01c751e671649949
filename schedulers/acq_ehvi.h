/*  acq_ehvi.h - expected hypervolume improvement (EHVI) over independent
    GPs, one per objective: the bo scheduler's acquisition for several
    objectives when its option "mo" is "ehvi" (docs/design.md, Schedulers
    "bo").

    Everything is minimised. The region that a new point y could add to
    the hypervolume (below the reference point, dominated by no point of
    the front) is cut once into axis-aligned boxes: the front's
    coordinates split the first m-1 axes into cells, and in each cell the
    free part along the last axis runs from -infinity up to the lowest
    last coordinate of the front points that dominate the cell's lower
    corner. HVI(y) is then a sum over boxes of products, and so is its
    gradient. EHVI is a quasi-Monte Carlo mean of HVI over the models'
    posteriors (shifted Sobol points mapped through the normal quantile,
    fixed for one acquisition, so the surface is smooth in x).

    The boxes number prod over the first m-1 axes of (distinct front
    coordinates + 1): (np + 1)^(m-1), which is why the scheduler uses EHVI
    for at most 3 objectives.
*/
#ifndef JZ_ACQ_EHVI_H
#define JZ_ACQ_EHVI_H

#include "gp.h"

typedef struct acq_ehvi acq_ehvi;

/* gps: m fitted models (borrowed; must outlive the object), model k of
   objective k in the units of `front` and `ref` (the model's own
   standardisation is undone). front: np x m points (dominated ones and
   ones not below ref are ignored; np may be 0). ref: m. nsamples: the
   number of posterior draws per evaluation (>= 1). NULL when out of
   memory. */
acq_ehvi *acq_ehvi_new(int m, gp_t *const *gps, const double *front, int np,
                       const double *ref, int nsamples, unsigned long long seed);

void acq_ehvi_destroy(acq_ehvi **e_p);

/* The hypervolume that y (m values) adds to the front; when dy is
   non-NULL it receives the gradient in y (m values). */
double acq_ehvi_hvi(const acq_ehvi *e, const double *y, double *dy);

/* log EHVI at x (the models' dimension), -INFINITY where no draw
   improves; when grad is non-NULL it receives the gradient in x (zero
   where the value is -INFINITY). NAN when out of memory. */
double acq_ehvi_log(const acq_ehvi *e, const double *x, double *grad);

/* Number of boxes the region was cut into (for tests and diagnostics). */
int acq_ehvi_nboxes(const acq_ehvi *e);

#endif
