/*  warp.h - output warpings for the bo scheduler's GP (docs/design.md,
    Schedulers "bo"). Each maps a minimisation target's values, in place,
    by a monotone map (the order of the values is kept), so that a few
    very bad values stop dominating the GP's fit.

    Pure functions: no allocation survives a call, nothing reads a clock or
    global state. Values must be finite.
*/
#ifndef JZ_WARP_H
#define JZ_WARP_H

/* Half-rank warping (after Vizier): values at or below the median stay;
   worse ones are replaced by median + s Phi^-1(q), q their rank quantile
   (ties share their mean rank) and s the RMS distance of the better half
   from the median, never raising a value. Nothing for n < 4 or when
   allocation fails. */
void warp_halfrank(double *y, int n);

/* The Yeo-Johnson power transform psi_lambda of the standardised values
   z = (y - mean) / sd:
     z >= 0: ((z + 1)^lambda - 1) / lambda      (log(z + 1) at lambda 0)
     z < 0:  -((1 - z)^(2 - lambda) - 1) / (2 - lambda)   (-log(1 - z) at 2)
   with lambda in [-3, 5] maximising the Gaussian log likelihood of the
   transformed values (Jacobian included), found by golden-section search.
   lambda < 1 compresses the worse (upper) tail and spreads the better one.
   Returns lambda (1 and nothing changed for n < 4, equal values or when
   allocation fails). */
double warp_yeojohnson(double *y, int n);

/* psi_lambda(z) as above (exposed for the tests). */
double warp_yj(double z, double lambda);

#endif
