/*  sched_bs_gns.c - the batch-size scheduler's estimators: the gradient noise
    scale from pairs of gradient norms at two batch sizes (McCandlish et al.
    2018), its bootstrap interval, and the statistical efficiency and AdaScale
    gain of a batch size (contracts in sched.h). Public: `jizhi batchsize-eval`
    uses them too; sched_bs_trial.c uses them for its decisions.
*/
#include "sched_bs_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the estimators (public, used by `jizhi batchsize-eval` too) ---- */

int sched_gns_estimate(const sched_gns_point *p, double *g2, double *trace)
{
    if (!(p->bb > p->bs) || !(p->bs > 0) || !isfinite(p->gs) || !isfinite(p->gb))
        return -1;
    *g2 = (p->bb * p->gb - p->bs * p->gs) / (p->bb - p->bs);
    *trace = (p->gs - p->gb) / (1 / p->bs - 1 / p->bb);
    return 0;
}

int sched__bs_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int sched_gns_critical(const sched_gns_point *pts, size_t n, int nboot, double conf,
                       unsigned long long seed, sched_gns_result *out)
{
    memset(out, 0, sizeof *out);
    out->lo = out->hi = NAN;
    double *g2 = malloc((n ? n : 1) * sizeof *g2), *tr = malloc((n ? n : 1) * sizeof *tr);
    if (!g2 || !tr) {
        free(g2);
        free(tr);
        return -1;
    }
    size_t m = 0;
    double sg = 0, st = 0;
    for (size_t i = 0; i < n; i++)
        if (sched_gns_estimate(&pts[i], &g2[m], &tr[m]) == 0) {
            sg += g2[m];
            st += tr[m];
            m++;
        }
    out->n = (int)m;
    if (m < 2 || sg <= 0) {
        free(g2);
        free(tr);
        return -1;
    }
    out->g2 = sg / (double)m;
    out->trace = st / (double)m;
    out->b_simple = st / sg;
    if (nboot > 0) {
        double *bs = malloc((size_t)nboot * sizeof *bs);
        if (bs) {
            sched_rng r;
            sched_rng_seed(&r, seed, 0x6e73);
            for (int k = 0; k < nboot; k++) {
                double a = 0, b = 0;
                for (size_t i = 0; i < m; i++) {
                    size_t j = (size_t)(sched_rng_uniform(&r) * (double)m);
                    a += g2[j];
                    b += tr[j];
                }
                bs[k] = a > 0 ? (b > 0 ? b / a : 0) : INFINITY; /* B_simple >= 0 */
            }
            qsort(bs, (size_t)nboot, sizeof *bs, sched__bs_cmp_double);
            double ql = (1 - conf) / 2 * (nboot - 1), qh = (1 + conf) / 2 * (nboot - 1);
            out->lo = bs[(size_t)floor(ql)];
            out->hi = bs[(size_t)ceil(qh)];
            if (!isfinite(out->lo))
                out->lo = NAN;
            if (!isfinite(out->hi))
                out->hi = NAN;
            free(bs);
        }
    }
    free(g2);
    free(tr);
    return 0;
}

double sched_bs_efficiency(double bsimple, double b0, double b)
{
    return (bsimple + b0) / (bsimple + b);
}

double sched_bs_noise_scale(double bsimple, double momentum)
{
    return momentum > 0 && momentum < 1 ? bsimple / (1 - momentum) : bsimple;
}

double sched_bs_adascale_gain(double bsimple, double b0, double b)
{
    /* sigma^2 = tr/b0 and mu^2 = |G|^2, divided through by |G|^2 */
    double s2 = bsimple / b0, S = b / b0;
    return (s2 + 1) / (s2 / S + 1);
}
