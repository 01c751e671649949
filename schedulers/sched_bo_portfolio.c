/*  sched_bo_portfolio.c - bo's own evidence of a rugged, many-basin
    objective and what it does about it (sched_bo_job.h; docs/design.md,
    Schedulers "bo": rugged objectives).

    After each fit the worker asks the model how well it explains the data:
    the leave-one-out fit (R^2 of each observation predicted from the
    others, in the warped, standardised units the GP models) and the share
    of the variance the GP puts in noise. A smooth objective is predicted
    well from its neighbours once a few points are in; a function with
    many basins narrower than the points' spacing is not, and the GP, held
    near unit lengthscales by its default prior's walls, turns the part it
    cannot resolve into noise. When both say "rugged", the worker refits
    the objective's GP under the weaker log-normal lengthscale prior, which
    lets it resolve short lengthscales (sched__bo_rugged_refit), and keeps
    the refit when its leave-one-out fit is the better one; from then on
    the study's models use that prior (sched_bo.c latches it, and saves
    it). Everything here is a pure function of its arguments: the same
    data and seed give the same choice.
*/
#include "sched_bo_job.h"

#include <math.h>
#include <stdlib.h>

int sched__bo_evidence(gp_t *gp, const unsigned char *mask, bo_evidence *ev)
{
    int n = gp_size(gp), D = gp_dim(gp);
    const double *th = gp_theta(gp);
    ev->n = n;
    ev->loo_r2 = NAN;
    ev->rugged = 0;
    double sf2 = exp(th[D]), noise = GP_NOISE_FLOOR + exp(th[D + 1]);
    ev->noise = noise / (sf2 + noise);
    double ls = 0;
    int nm = 0;
    for (int i = 0; i < D; i++)
        if (!mask || mask[i]) {
            ls += th[i];
            nm++;
        }
    ev->ls = nm ? exp(ls / nm) : NAN;
    if (n < BO_RUGGED_MIN_N)
        return 0;
    double *mv = malloc(sizeof(double) * 2 * (size_t)n);
    if (!mv)
        return -1;
    if (gp_loo(gp, mv, mv + n) != 0) {
        free(mv);
        return -1;
    }
    double mean = 0, ss = 0, se = 0;
    for (int i = 0; i < n; i++)
        mean += gp_y_std(gp, i);
    mean /= n;
    for (int i = 0; i < n; i++) {
        double y = gp_y_std(gp, i);
        ss += (y - mean) * (y - mean);
        se += (y - mv[i]) * (y - mv[i]);
    }
    free(mv);
    ev->loo_r2 = ss > 0 ? 1 - se / ss : 1;
    ev->rugged = ev->loo_r2 < BO_RUGGED_R2 && ev->noise > BO_RUGGED_NOISE;
    return 0;
}

int sched__bo_rugged_refit(gp_t **gp_p, const double *X, const double *y,
                           const gp_fit_opts *fo, const unsigned char *mask,
                           bo_evidence *ev)
{
    ev->refit = 0;
    if (!ev->rugged)
        return 0;
    gp_t *g2 = gp_new(gp_dim(*gp_p));
    bo_evidence e2;
    int rc = 0;
    if (!g2 || gp_set_data(g2, X, y, gp_size(*gp_p), 1) != 0)
        goto done;
    gp_set_prior(g2, GP_PRIOR_LOGNORMAL);
    if (gp_fit(g2, fo) != 0) {
        rc = fo->cancel && atomic_load(fo->cancel) ? -1 : 0;
        goto done;
    }
    if (sched__bo_evidence(g2, mask, &e2) != 0 || !(e2.loo_r2 > ev->loo_r2))
        goto done;
    gp_t *t = *gp_p;
    *gp_p = g2;
    g2 = t;
    e2.rugged = 1; /* what the first model said, which chose this one */
    *ev = e2;
    ev->refit = 1;
done:
    gp_destroy(&g2);
    return rc;
}
