/*  sched_bo_mo.c - what the bo scheduler models when a study has several
    objectives or constraints (docs/design.md, Schedulers "bo").

    Several objectives: ParEGO (Knowles 2006). Each suggestion draws a
    weight vector w uniformly from the simplex (seeded by the suggestion's
    own stream, so a restored scheduler draws the same), normalises every
    objective to [0, 1] over the observed trials and models the augmented
    Chebyshev scalarisation  max_k w_k f_k + 0.05 sum_k w_k f_k  with the
    one GP. Over many suggestions the weights sweep the front.

    Constraints, with "constraint_model": "penalty" (by default they have
    models of their own in sched_bo.c, and the targets here ignore them): a
    trial's violation is the sum over constraints of the
    amount by which it passes its bound, each divided by that
    constraint's observed spread. Infeasible trials are not thrown away:
    they get a target worse than every feasible one and growing with the
    violation, so the model learns where the feasible region ends; while
    no trial is feasible the target is the violation itself, so the search
    first heads for feasibility. (A penalty, not probability of
    feasibility x EI: one GP, no model per constraint.)
*/
#include "sched_bo.h"

#include <math.h>
#include <stdlib.h>

#define S_RHO 0.05

int sched__bo_targets(const spec_t *spec, size_t n, const double *value,
                      json_t *const *metrics, const unsigned char *failed,
                      unsigned long long seed, int penalise, double *y)
{
    size_t m = spec->nobjectives, nc = spec->nconstraints;
    double *F = malloc(sizeof(double) * (n ? n : 1) * m);
    double *lo = malloc(sizeof(double) * m), *hi = malloc(sizeof(double) * m);
    double *w = malloc(sizeof(double) * m);
    double *viol = calloc(n ? n : 1, sizeof(double));
    double *cscale = calloc(nc ? nc : 1, sizeof(double));
    unsigned char *ok = calloc(n ? n : 1, 1);
    int rc = -1;
    if (!F || !lo || !hi || !w || !viol || !cscale || !ok)
        goto done;
    for (size_t k = 0; k < m; k++) {
        lo[k] = INFINITY;
        hi[k] = -INFINITY;
    }
    for (size_t i = 0; i < n; i++) {
        ok[i] = !failed[i] &&
                spec_objective_values(spec, value[i], metrics[i], F + i * m) == 0;
        for (size_t k = 0; ok[i] && k < m; k++) {
            lo[k] = fmin(lo[k], F[i * m + k]);
            hi[k] = fmax(hi[k], F[i * m + k]);
        }
    }
    /* constraint spreads: the largest distance to the bound seen */
    for (size_t c = 0; c < nc; c++) {
        for (size_t i = 0; i < n; i++) {
            const json_t *g = json_object_get(metrics[i], spec->constraints[c].metric);
            if (json_is_number(g) && isfinite(json_number_value(g)))
                cscale[c] = fmax(cscale[c],
                                 fabs(json_number_value(g) - spec->constraints[c].bound));
        }
        if (!(cscale[c] > 0))
            cscale[c] = 1;
    }
    int any_feasible = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ok[i])
            continue;
        for (size_t c = 0; c < nc; c++) {
            const spec_constraint *sc = &spec->constraints[c];
            const json_t *g = json_object_get(metrics[i], sc->metric);
            if (!json_is_number(g) || !isfinite(json_number_value(g))) {
                viol[i] = INFINITY;
                break;
            }
            double over = sc->upper ? json_number_value(g) - sc->bound
                                    : sc->bound - json_number_value(g);
            if (over > 0)
                viol[i] += over / cscale[c];
        }
        if (isinf(viol[i]) && penalise)
            ok[i] = 0; /* a constraint metric never reported: as failed */
        any_feasible |= ok[i] && viol[i] == 0;
    }
    /* the weights: uniform on the simplex (normalised exponentials) */
    sched_rng r;
    sched_rng_seed(&r, seed, 0x9a4e60ULL);
    double sum = 0;
    for (size_t k = 0; k < m; k++) {
        w[k] = -log(1 - sched_rng_uniform(&r));
        sum += w[k];
    }
    for (size_t k = 0; k < m; k++)
        w[k] = m == 1 ? 1 : w[k] / sum;
    for (size_t i = 0; i < n; i++) {
        if (!ok[i]) {
            y[i] = NAN; /* imputed as the worst by the caller */
            continue;
        }
        double mx = -INFINITY, lin = 0;
        for (size_t k = 0; k < m; k++) {
            double span = hi[k] - lo[k];
            double f = span > 0 ? (F[i * m + k] - lo[k]) / span : 0;
            mx = fmax(mx, w[k] * f);
            lin += w[k] * f;
        }
        double s = m == 1 ? F[i * m] : mx + S_RHO * lin;
        if (m == 1 && nc && penalise) /* one objective: on the same [0, 1] scale */
            s = hi[0] > lo[0] ? (F[i] - lo[0]) / (hi[0] - lo[0]) : 0;
        if (nc && penalise && viol[i] > 0)
            s = any_feasible ? 1 + S_RHO * (double)m + viol[i] : viol[i];
        else if (nc && penalise && !any_feasible)
            s = 0;
        y[i] = s;
    }
    rc = 0;
done:
    free(F);
    free(lo);
    free(hi);
    free(w);
    free(viol);
    free(cscale);
    free(ok);
    return rc;
}
