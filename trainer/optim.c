/*  optim.c - optimisers and learning-rate schedules.

    SGD with momentum (optionally Nesterov; PyTorch's formulation), LARS
    (You et al. 2017: local rate eta*|w|/(|g| + wd*|w|), computed in fp32
    from the fp32 master weights), LAMB (You et al. 2019) and AdamW
    (decoupled weight decay). Biases and BN parameters get no weight decay
    and no layer-wise adaptation (plain momentum SGD under LARS, trust ratio
    1 under LAMB). Schedules: linear warmup then constant, cosine or
    polynomial decay to zero at the last epoch.
*/
#include <math.h>
#include <string.h>

#include "trainer/trn.h"

int trn_optim_from_name(const char *s)
{
    if (!strcmp(s, "sgd"))
        return TRN_SGD;
    if (!strcmp(s, "lars"))
        return TRN_LARS;
    if (!strcmp(s, "lamb"))
        return TRN_LAMB;
    if (!strcmp(s, "adamw"))
        return TRN_ADAMW;
    return -1;
}

void trn_optim_init(trn_optim *o, const trn_config *c)
{
    memset(o, 0, sizeof *o);
    int k = trn_optim_from_name(c->optimizer);
    o->kind = k < 0 ? TRN_SGD : (trn_opt_kind)k;
    o->momentum = c->momentum;
    o->nesterov = c->nesterov;
    o->weight_decay = c->weight_decay;
    o->beta1 = c->beta1;
    o->beta2 = c->beta2;
    o->eps = c->eps;
    o->trust = c->trust;
}

static double s_norm(const float *x, long n)
{
    double s = 0;
    for (long i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s);
}

/* Compiled for AVX-512 and AVX2 too (chosen at load time), with no
   multiply-add contracted into an FMA (-ffp-contract=off for this file,
   trainer.mk: GCC's optimize attribute is unknown to clang, which the fuzz
   build uses), so every clone rounds as the baseline does (the same bits
   on every CPU). */
TRN_CLONES static void s_sgd(const trn_optim *o, trn_param *p, double lr, double wd)
{
    float mu = (float)o->momentum, fwd = (float)wd, flr = (float)lr;
    float *restrict w = p->w, *restrict m = p->m;
    const float *restrict gr = p->g;
    long n = p->n;
    if (o->corrected) { /* g: the ranks' momentum-corrected sum (top-k) */
        for (long i = 0; i < n; i++) {
            float d = fwd * w[i];
            m[i] = mu * m[i] + d;
            w[i] -= flr * (gr[i] + (o->nesterov ? d + mu * m[i] : m[i]));
        }
        return;
    }
    if (o->nesterov)
        for (long i = 0; i < n; i++) {
            float g = gr[i] + fwd * w[i];
            float v = mu * m[i] + g;
            m[i] = v;
            w[i] -= flr * (g + mu * v);
        }
    else
        for (long i = 0; i < n; i++) {
            float v =
                mu * m[i] + (gr[i] + fwd * w[i]); /* same order as the CUDA kernel */
            m[i] = v;
            w[i] -= flr * v;
        }
}

static void s_lars(const trn_optim *o, trn_param *p, double lr, int k)
{
    float mu = (float)o->momentum;
    if (p->kind != TRN_PW) { /* biases, BN: momentum SGD, no decay, no LARS */
        if (o->corrected) {  /* momentum already in g (top-k) */
            for (long i = 0; i < p->n; i++)
                p->w[i] -= (float)lr * p->g[i];
            return;
        }
        for (long i = 0; i < p->n; i++) {
            p->m[i] = mu * p->m[i] + (float)lr * p->g[i];
            p->w[i] -= p->m[i];
        }
        return;
    }
    double wn = s_norm(p->w, p->n), wd = o->weight_decay;
    double gn = o->gnorm ? o->gnorm[k] : s_norm(p->g, p->n);
    double local = 1.0;
    if (wn > 0 && gn > 0)
        local = o->trust * wn / (gn + wd * wn);
    float step = (float)(lr * local), fwd = (float)wd;
    if (o->corrected) { /* the trust ratio scales the decompressed update */
        for (long i = 0; i < p->n; i++) {
            p->m[i] = mu * p->m[i] + fwd * p->w[i];
            p->w[i] -= step * (p->g[i] + p->m[i]);
        }
        return;
    }
    for (long i = 0; i < p->n; i++) {
        p->m[i] = mu * p->m[i] + step * (p->g[i] + fwd * p->w[i]);
        p->w[i] -= p->m[i];
    }
}

/* Adam moments; writes the update direction r into g (reused as scratch). */
static void s_adam_dir(const trn_optim *o, trn_param *p, double wd)
{
    float b1 = (float)o->beta1, b2 = (float)o->beta2;
    double bc1 = 1.0 - pow(o->beta1, (double)o->t),
           bc2 = 1.0 - pow(o->beta2, (double)o->t);
    for (long i = 0; i < p->n; i++) {
        float g = p->g[i];
        p->m[i] = b1 * p->m[i] + (1 - b1) * g;
        p->v[i] = b2 * p->v[i] + (1 - b2) * g * g;
        double mh = p->m[i] / bc1, vh = p->v[i] / bc2;
        p->g[i] = (float)(mh / (sqrt(vh) + o->eps) + wd * p->w[i]);
    }
}

void trn_optim_step(trn_optim *o, trn_param *params, int np, double lr)
{
    o->t++;
    for (int k = 0; k < np; k++) {
        trn_param *p = &params[k];
        int decay = p->kind == TRN_PW;
        double wd = decay ? o->weight_decay : 0.0;
        switch (o->kind) {
        case TRN_SGD:
            s_sgd(o, p, lr, wd);
            break;
        case TRN_LARS:
            s_lars(o, p, lr, k);
            break;
        case TRN_ADAMW:
            s_adam_dir(o, p, wd);
            for (long i = 0; i < p->n; i++)
                p->w[i] -= (float)lr * p->g[i];
            break;
        case TRN_LAMB: {
            s_adam_dir(o, p, wd);
            double ratio = 1.0;
            if (decay) {
                double wn = s_norm(p->w, p->n), rn = s_norm(p->g, p->n);
                if (wn > 0 && rn > 0)
                    ratio = wn / rn;
            }
            float step = (float)(lr * ratio);
            for (long i = 0; i < p->n; i++)
                p->w[i] -= step * p->g[i];
            break;
        }
        }
    }
}

double trn_lr_factor(const char *schedule, double e, double warmup, double epochs,
                     double poly_power)
{
    if (warmup > 0 && e < warmup)
        return e / warmup;
    double span = epochs - warmup;
    double p = span > 0 ? (e - warmup) / span : 1.0;
    if (p < 0)
        p = 0;
    if (p > 1)
        p = 1;
    if (!strcmp(schedule, "cosine"))
        return 0.5 * (1.0 + cos(M_PI * p));
    if (!strcmp(schedule, "poly"))
        return pow(1.0 - p, poly_power);
    return 1.0;
}

double trn_lr_scale_rule(const char *rule, double b0, double b1)
{
    if (b0 <= 0 || b1 <= 0)
        return 1.0;
    if (!strcmp(rule, "linear"))
        return b1 / b0;
    if (!strcmp(rule, "sqrt"))
        return sqrt(b1 / b0);
    return 1.0;
}
