/*  sched_cmaes.c - CMA-ES (docs/design.md, Schedulers "cmaes"; Hansen's
    tutorial, "The CMA Evolution Strategy", 2016, for the updates; Auger and
    Hansen 2005 for IPOP; Ros and Hansen 2008 for the separable variant).

    The search runs on the unit cube: one dimension per parameter on the
    scale of spec_param_to_unit (log for log parameters, an int or a choice
    owning a cell; consts take none). A generation of lambda points is
    drawn from N(m, sigma^2 C) by mirrored orthogonal sampling (steps in
    blocks of D orthogonal directions of C's metric, up to 100 dimensions;
    from 3 dimensions each step is taken both ways, m + z and m - z, and
    only the better of such a pair is selected), a point outside [0, 1]^D
    redrawn independently up to 100 times and then clipped, and decoded
    with spec_param_from_unit, so
    ints, choices and quantised values are legal (their dimensions keep an
    sd of at least a quarter of a cell, so a plateau cannot freeze them);
    inactive conditional
    parameters are pruned (their dimensions are neutral: the objective
    does not depend on them). When lambda results of the current generation
    are in, m, sigma, C and the paths are updated (positive weights, rank-1
    and rank-mu updates, cumulative step-size adaptation). Suggestions
    never wait: past lambda, the same generation's distribution gives more
    points, and results of an older generation only count for the best.

    Restarts (IPOP, default): when the best values of the last
    10 + ceil(30 D / lambda) generations and of the current one span less
    than 1e-12, the steps sigma x sd fall below 1e-12 sigma0, or C's
    condition number passes 1e14, the search restarts at a uniform random
    mean with lambda doubled. "separable" keeps C diagonal with its
    learning rates raised by (D + 2) / 3; it is the default beyond 100
    searched parameters, where a full C's eigendecomposition (D^3) would
    hold the controller's loop too long.

    Warm start and enqueued trials: results that arrive before the first
    suggestion (warm start) place the first mean at the best of them;
    results of trials it did not suggest that arrive later join the
    current generation, their step clipped to the length a drawn point
    would have (Hansen 2011, "Injecting external solutions into CMA-ES").

    Randomness comes from streams derived from (seed, restart, generation,
    index); the saved state holds the distribution and the generation's
    results, so a restored scheduler draws the same points.
*/
#include "sched.h"

#include <gsl/gsl_eigen.h>
#include <gsl/gsl_matrix.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_RESAMPLE 100    /* draws until a point lies in the cube */
#define S_TOLFUN 1e-12    /* stalled: the best values span less */
#define S_TOLX 1e-12      /* converged: every sigma x sd below this x sigma0 */
#define S_MAXCOND 1e14    /* C's condition number */
#define S_MAX_LAMBDA 4096 /* IPOP stops doubling here */
#define S_MAX_FULL 100    /* beyond, "separable" defaults to true */
#define S_MAX_ORTH 100    /* beyond, points are drawn independently (D^3 a block) */
#define S_MIN_MIRROR 3    /* mirrored pairs from 3 dimensions (2: slower, bench.md) */

typedef struct {
    long trial;
    int restart, gen; /* the distribution it was drawn from */
    double *x;        /* D, owned */
    long pair;        /* its mirrored pair in the generation (s_draw), -1 none */
} s_pend;

typedef struct {
    sched_t base;
    /* options */
    int ipop;
    int separable;
    double sigma0;
    int lambda0;
    /* the encoding: dim[i] is the parameter of dimension i */
    int D;
    int *dim;
    /* the distribution */
    int started;  /* m, sigma and C are set */
    int restart;  /* restarts so far */
    int gen;      /* generation within the restart */
    int lambda;   /* population size */
    long drawn;   /* points drawn in this generation */
    double sigma; /* step size */
    double *m;    /* D: mean */
    double *C;    /* D x D covariance (separable: the diagonal alone is used) */
    double *pc;   /* D: evolution path of C */
    double *ps;   /* D: evolution path of sigma */
    double *B;    /* D x D: eigenvectors of C (columns); derived from C */
    double *ev;   /* D: sqrt of C's eigenvalues; derived from C */
    double *wk;   /* 3 x D scratch */
    /* the orthogonal block being drawn from (s_block); derived */
    double *ob;   /* D x D: orthonormal directions (rows) */
    double *olen; /* D: their lengths */
    int ob_valid, ob_restart, ob_gen;
    long ob_blk;
    /* this generation's results: x (lambda x D) and f (lambda) */
    double *gx, *gf;
    long *gp; /* lambda: each result's mirrored pair, -1 none */
    int ngot;
    /* the best value of each of the last generations (tolfun) */
    double *hist;
    int nhist, caphist;
    /* warm start: the best result before the first suggestion */
    double *warm_x;
    double warm_f;
    /* suggested, not ended */
    s_pend *pend;
    size_t npend, cappend;
    long count; /* suggestions made */
} sched_cmaes;

/* ---- the distribution ------------------------------------------------- */

static double s_gauss(sched_rng *r)
{
    double u1 = sched_rng_uniform(r), u2 = sched_rng_uniform(r);
    return sqrt(-2 * log(1 - u1)) * cos(2 * M_PI * u2);
}

static int s_hist_len(const sched_cmaes *c)
{
    return 10 + (int)ceil(30.0 * c->D / c->lambda);
}

/* B and ev from C (symmetrised; eigenvalues below 1e-20 raised). 0, or -1
   out of memory. */
static int s_eigen(sched_cmaes *c)
{
    int D = c->D;
    if (c->separable) {
        for (int i = 0; i < D; i++) {
            for (int j = 0; j < D; j++)
                c->B[i * D + j] = i == j;
            c->ev[i] = sqrt(fmax(c->C[i * D + i], 1e-20));
        }
        return 0;
    }
    gsl_matrix *A = gsl_matrix_alloc((size_t)D, (size_t)D);
    gsl_matrix *V = gsl_matrix_alloc((size_t)D, (size_t)D);
    gsl_vector *e = gsl_vector_alloc((size_t)D);
    gsl_eigen_symmv_workspace *w = gsl_eigen_symmv_alloc((size_t)D);
    int rc = -1;
    if (A && V && e && w) {
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++)
                gsl_matrix_set(A, (size_t)i, (size_t)j,
                               0.5 * (c->C[i * D + j] + c->C[j * D + i]));
        gsl_eigen_symmv(A, e, V, w);
        gsl_eigen_symmv_sort(e, V, GSL_EIGEN_SORT_VAL_DESC);
        for (int i = 0; i < D; i++) {
            c->ev[i] = sqrt(fmax(gsl_vector_get(e, (size_t)i), 1e-20));
            for (int j = 0; j < D; j++)
                c->B[i * D + j] = gsl_matrix_get(V, (size_t)i, (size_t)j);
        }
        rc = 0;
    }
    if (w)
        gsl_eigen_symmv_free(w);
    gsl_vector_free(e);
    gsl_matrix_free(V);
    gsl_matrix_free(A);
    return rc;
}

/* A (re)start: mean m0 (NULL: uniform random from the restart's stream;
   may be wk), sigma0, C = I, paths 0. */
static int s_start(sched_cmaes *c, const double *m0)
{
    int D = c->D;
    sched_rng r;
    sched_rng_seed(&r, (unsigned long long)c->base.spec->seed,
                   (3ULL << 56) ^ (unsigned long long)c->restart);
    for (int i = 0; i < D; i++) {
        c->m[i] = m0 ? m0[i] : sched_rng_uniform(&r);
        c->pc[i] = c->ps[i] = 0;
        for (int j = 0; j < D; j++)
            c->C[i * D + j] = i == j;
    }
    c->sigma = c->sigma0;
    c->gen = 0;
    c->drawn = 0;
    c->ngot = 0;
    c->nhist = 0;
    c->started = 1;
    return s_eigen(c);
}

/* The orthogonal block of point idx (see s_draw) into c->ob and c->olen,
   unless it is there already: D directions from Gram-Schmidt on D x D
   Gaussian numbers of the block's stream, D lengths |N(0, I)|. */
static void s_block(sched_cmaes *c, long idx)
{
    int D = c->D;
    long blk = idx / D;
    if (c->ob_valid && c->ob_restart == c->restart && c->ob_gen == c->gen &&
        c->ob_blk == blk)
        return;
    sched_rng r;
    sched_rng_seed(&r, (unsigned long long)c->base.spec->seed,
                   (2ULL << 56) ^ ((unsigned long long)c->restart << 40) ^
                       ((unsigned long long)c->gen << 20) ^ (unsigned long long)blk);
    double *Q = c->ob;
    for (int i = 0; i < D * D; i++)
        Q[i] = s_gauss(&r);
    for (int j = 0; j < D; j++) { /* modified Gram-Schmidt, row by row */
        double *q = Q + (size_t)j * D, nq = 0;
        for (int i = 0; i < j; i++) {
            const double *p = Q + (size_t)i * D;
            double d = 0;
            for (int t = 0; t < D; t++)
                d += p[t] * q[t];
            for (int t = 0; t < D; t++)
                q[t] -= d * p[t];
        }
        for (int t = 0; t < D; t++)
            nq += q[t] * q[t];
        nq = sqrt(nq);
        for (int t = 0; t < D; t++) /* a null row (probability 0): an axis */
            q[t] = nq > 1e-300 ? q[t] / nq : t == j;
    }
    for (int j = 0; j < D; j++) {
        double len = 0;
        for (int t = 0; t < D; t++) {
            double g = s_gauss(&r);
            len += g * g;
        }
        c->olen[j] = sqrt(len);
    }
    c->ob_valid = 1;
    c->ob_restart = c->restart;
    c->ob_gen = c->gen;
    c->ob_blk = blk;
}

/* x = m + sigma B diag(ev) z, clipped to nothing; whether it lies in the
   cube. */
static int s_place(const sched_cmaes *c, const double *z, double *x)
{
    int D = c->D, in = 1;
    for (int i = 0; i < D; i++) {
        double y = 0;
        for (int j = 0; j < D; j++)
            y += c->B[i * D + j] * c->ev[j] * z[j];
        x[i] = c->m[i] + c->sigma * y;
        in &= x[i] >= 0 && x[i] <= 1;
    }
    return in;
}

/* Point `idx` of the current generation into x (D); returns its mirrored
   pair's number, or -1 when it has none. Mirrored orthogonal sampling
   (Wang, Emmerich and Baeck 2014): the steps z come in blocks of D
   orthogonal directions, each of a chi-distributed length, so each is
   still N(0, I) alone but a block covers every direction once; from 3
   dimensions each step is also drawn mirrored (points 2k and 2k + 1 are
   m + z and m - z, pair k), and the pairs are selected pairwise
   (s_pairwise). Measured: faster convergence at 200 and 1000 evaluations
   (docs/bench.md). A point outside the cube is redrawn independently (no
   pair), up to S_RESAMPLE times, then clipped. */
static long s_draw(sched_cmaes *c, long idx, double *x)
{
    int D = c->D;
    double *z = c->wk;
    int mir = D >= S_MIN_MIRROR;
    if (D > 1 && D <= S_MAX_ORTH) {
        long k = mir ? idx / 2 : idx;
        double sg = mir && (idx & 1) ? -1 : 1;
        s_block(c, k);
        const double *q = c->ob + (size_t)(k % D) * D;
        for (int i = 0; i < D; i++)
            z[i] = sg * c->olen[k % D] * q[i];
        if (s_place(c, z, x))
            return mir ? k : -1;
    }
    sched_rng r;
    sched_rng_seed(&r, (unsigned long long)c->base.spec->seed,
                   (1ULL << 56) ^ ((unsigned long long)c->restart << 40) ^
                       ((unsigned long long)c->gen << 20) ^ (unsigned long long)idx);
    for (int t = 0; t < S_RESAMPLE; t++) {
        for (int i = 0; i < D; i++)
            z[i] = s_gauss(&r);
        if (s_place(c, z, x))
            return -1;
    }
    for (int i = 0; i < D; i++)
        x[i] = fmin(fmax(x[i], 0), 1);
    return -1;
}

/* C^(-1/2) v into out (not v); uses wk's second third */
static void s_invsqrt(const sched_cmaes *c, const double *v, double *out)
{
    int D = c->D;
    double *t = c->wk + D;
    for (int k = 0; k < D; k++) {
        double s = 0;
        for (int i = 0; i < D; i++)
            s += c->B[i * D + k] * v[i];
        t[k] = s / c->ev[k];
    }
    for (int i = 0; i < D; i++) {
        double s = 0;
        for (int k = 0; k < D; k++)
            s += c->B[i * D + k] * t[k];
        out[i] = s;
    }
}

/* a value and its index, sorted by value, then index */
typedef struct {
    int lose; /* the worse of a mirrored pair: ranked after every winner */
    double f;
    int i;
} s_fi;

static int s_fi_cmp(const void *a, const void *b)
{
    const s_fi *x = a, *y = b;
    if (x->lose != y->lose)
        return x->lose - y->lose;
    if (x->f != y->f)
        return (x->f > y->f) - (x->f < y->f);
    return (x->i > y->i) - (x->i < y->i);
}

/* Whether the restart has stalled or converged (IPOP's criteria). */
static int s_should_restart(const sched_cmaes *c, double genbest, double genworst)
{
    int D = c->D;
    if (c->nhist >= s_hist_len(c)) {
        double lo = genbest, hi = genworst;
        for (int i = 0; i < c->nhist; i++) {
            lo = fmin(lo, c->hist[i]);
            hi = fmax(hi, c->hist[i]);
        }
        if (isfinite(hi) && hi - lo < S_TOLFUN)
            return 1;
    }
    int small = 1;
    for (int i = 0; i < D && small; i++)
        small = c->sigma * sqrt(c->C[i * D + i]) < S_TOLX * c->sigma0 &&
                c->sigma * fabs(c->pc[i]) < S_TOLX * c->sigma0;
    if (small)
        return 1;
    double emax = c->ev[0], emin = c->ev[0];
    for (int i = 1; i < D; i++) {
        emax = fmax(emax, c->ev[i]);
        emin = fmin(emin, c->ev[i]);
    }
    return emax * emax > S_MAXCOND * emin * emin;
}

/* Pairwise selection (Auger, Brockhoff and Hansen 2011): of two results
   of one mirrored pair (gp), the worse (the later on a tie) is marked to
   rank after all others, so only the better can take a positive weight
   and the pair's steps do not cancel in the mean. 0, or -1 out of
   memory. */
static int s_pairwise(const sched_cmaes *c, s_fi *fi)
{
    long maxp = -1;
    for (int i = 0; i < c->ngot; i++)
        maxp = c->gp[i] > maxp ? c->gp[i] : maxp;
    if (maxp < 0)
        return 0;
    int *first = malloc(sizeof(int) * (size_t)(maxp + 1));
    if (!first)
        return -1;
    for (long k = 0; k <= maxp; k++)
        first[k] = -1;
    for (int i = 0; i < c->ngot; i++) {
        long k = c->gp[i];
        if (k < 0)
            continue;
        int j = first[k];
        if (j < 0) {
            first[k] = i;
            continue;
        }
        fi[c->gf[i] < c->gf[j] ? j : i].lose = 1;
    }
    free(first);
    return 0;
}

/* The update after lambda results (gx, gf), then a restart when stalled.
   0, or -1 out of memory. */
static int s_tell(sched_cmaes *c)
{
    int D = c->D, lam = c->ngot, mu = lam / 2;
    s_fi *fi = malloc(sizeof(s_fi) * (size_t)lam);
    int *idx = malloc(sizeof(int) * (size_t)lam);
    double *w = malloc(sizeof(double) * (size_t)lam);
    double *yw = c->wk, *t = c->wk + 2 * D;
    if (!fi || !idx || !w) {
        free(fi);
        free(idx);
        free(w);
        return -1;
    }
    for (int i = 0; i < lam; i++)
        fi[i] = (s_fi){0, c->gf[i], i};
    if (s_pairwise(c, fi) != 0) {
        free(fi);
        free(idx);
        free(w);
        return -1;
    }
    qsort(fi, (size_t)lam, sizeof *fi, s_fi_cmp);
    for (int i = 0; i < lam; i++)
        idx[i] = fi[i].i;
    free(fi);
    /* weights: positive for the best mu, negative for the others (active
       CMA, Hansen 2016), except in the separable variant */
    double ws = 0, ws2 = 0, wn = 0, wn2 = 0, n = D;
    for (int i = 0; i < lam; i++) {
        w[i] = log((lam + 1) / 2.0) - log(i + 1.0);
        if (i < mu) {
            ws += w[i];
            ws2 += w[i] * w[i];
        } else {
            wn += w[i];
            wn2 += w[i] * w[i];
        }
    }
    double mueff = ws * ws / ws2, mueffm = wn2 > 0 ? wn * wn / wn2 : 0;
    double cs = (mueff + 2) / (n + mueff + 5);
    double ds = 1 + 2 * fmax(0, sqrt((mueff - 1) / (n + 1)) - 1) + cs;
    double cc = (4 + mueff / n) / (n + 4 + 2 * mueff / n);
    double c1 = 2 / ((n + 1.3) * (n + 1.3) + mueff);
    double cmu =
        fmin(1 - c1 - 1e-8, 2 * (mueff - 2 + 1 / mueff) / ((n + 2) * (n + 2) + mueff));
    if (c->separable) {
        c1 = fmin(1, c1 * (n + 2) / 3);
        cmu = fmin(1 - c1, cmu * (n + 2) / 3);
    }
    double amin = fmin(fmin(1 + c1 / cmu, 1 + 2 * mueffm / (mueff + 2)),
                       (1 - c1 - cmu) / (n * cmu));
    double wsum = 0;
    for (int i = 0; i < lam; i++) {
        w[i] = i < mu ? w[i] / ws : c->separable || wn == 0 ? 0 : amin * w[i] / fabs(wn);
        wsum += w[i];
    }
    double chin = sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n * n));
    /* y_i = (x_i - m) / sigma, ranked; the weighted mean step */
    double *Y = malloc(sizeof(double) * (size_t)lam * (size_t)D);
    if (!Y) {
        free(idx);
        free(w);
        return -1;
    }
    for (int i = 0; i < lam; i++)
        for (int j = 0; j < D; j++)
            Y[i * D + j] = (c->gx[idx[i] * D + j] - c->m[j]) / c->sigma;
    for (int j = 0; j < D; j++) {
        yw[j] = 0;
        for (int i = 0; i < mu; i++)
            yw[j] += w[i] * Y[i * D + j];
    }
    for (int j = 0; j < D; j++)
        c->m[j] += c->sigma * yw[j];
    s_invsqrt(c, yw, t);
    double psn = 0;
    for (int j = 0; j < D; j++) {
        c->ps[j] = (1 - cs) * c->ps[j] + sqrt(cs * (2 - cs) * mueff) * t[j];
        psn += c->ps[j] * c->ps[j];
    }
    psn = sqrt(psn);
    double hs =
        psn / sqrt(1 - pow(1 - cs, 2.0 * (c->gen + 1))) < (1.4 + 2 / (n + 1)) * chin;
    for (int j = 0; j < D; j++)
        c->pc[j] = (1 - cc) * c->pc[j] + hs * sqrt(cc * (2 - cc) * mueff) * yw[j];
    double dh = (1 - hs) * cc * (2 - cc);
    /* negative weights act on steps scaled to the length n in C's metric */
    for (int i = mu; i < lam; i++) {
        if (w[i] == 0)
            continue;
        s_invsqrt(c, Y + (size_t)i * D, t);
        double q = 0;
        for (int j = 0; j < D; j++)
            q += t[j] * t[j];
        w[i] *= n / (q + 1e-8);
    }
    for (int a = 0; a < D; a++)
        for (int b = 0; b < D; b++) {
            if (c->separable && a != b)
                continue;
            double rmu = 0;
            for (int i = 0; i < lam; i++)
                if (w[i] != 0)
                    rmu += w[i] * Y[i * D + a] * Y[i * D + b];
            c->C[a * D + b] = (1 + c1 * dh - c1 - cmu * wsum) * c->C[a * D + b] +
                              c1 * c->pc[a] * c->pc[b] + cmu * rmu;
        }
    free(Y);
    c->sigma *= exp(fmin(1, (cs / ds) * (psn / chin - 1)));
    c->sigma = fmin(c->sigma, 4);
    /* a margin on discrete dimensions (ints, choices, stepped floats): their
       sd stays at least a quarter of a cell, so a plateau (the objective
       is flat within a cell) cannot freeze them on one value (after
       Hamano et al. 2022, CMA-ES with margin) */
    for (int i = 0; i < D; i++) {
        long g = spec_param_grid(&c->base.spec->params[c->dim[i]]);
        double floor_sd = g > 1 ? 0.25 / (double)g : 0;
        if (c->sigma * sqrt(c->C[i * D + i]) < floor_sd)
            c->C[i * D + i] = pow(floor_sd / c->sigma, 2);
    }
    double best = c->gf[idx[0]], worst = -INFINITY;
    free(idx);
    free(w);
    if (s_eigen(c) != 0)
        return -1;
    for (int i = 0; i < lam; i++)
        if (isfinite(c->gf[i]))
            worst = fmax(worst, c->gf[i]);
    int stop = c->ipop && s_should_restart(c, best, worst);
    /* the history of the generations' best values */
    int H = s_hist_len(c);
    if (c->nhist < H && c->nhist < c->caphist)
        c->hist[c->nhist++] = best;
    else if (c->nhist > 0) {
        memmove(c->hist, c->hist + 1, sizeof(double) * (size_t)(c->nhist - 1));
        c->hist[c->nhist - 1] = best;
    }
    c->gen++;
    c->drawn = 0;
    c->ngot = 0;
    if (!stop)
        return 0;
    /* IPOP: a fresh start, twice the population */
    c->restart++;
    if (c->lambda * 2 <= S_MAX_LAMBDA)
        c->lambda *= 2;
    double *ngx =
        realloc(c->gx, sizeof(double) * (size_t)c->lambda * (size_t)(D ? D : 1));
    if (ngx)
        c->gx = ngx;
    double *ngf = realloc(c->gf, sizeof(double) * (size_t)c->lambda);
    if (ngf)
        c->gf = ngf;
    long *ngp = realloc(c->gp, sizeof(long) * (size_t)c->lambda);
    if (ngp)
        c->gp = ngp;
    if (!ngx || !ngf || !ngp)
        return -1;
    return s_start(c, NULL);
}

/* Adds a result of the current generation; tells when lambda are in. */
static int s_add(sched_cmaes *c, const double *x, double f, long pair)
{
    c->gp[c->ngot] = pair;
    memcpy(c->gx + (size_t)c->ngot * c->D, x, sizeof(double) * (size_t)c->D);
    c->gf[c->ngot++] = f;
    return c->ngot >= c->lambda ? s_tell(c) : 0;
}

/* ---- encoding --------------------------------------------------------- */

/* params into x (D); a missing or illegal parameter takes the mean's
   coordinate (or 0.5 before the start). */
static void s_encode(const sched_cmaes *c, const json_t *params, double *x)
{
    const spec_t *sp = c->base.spec;
    for (int i = 0; i < c->D; i++) {
        const spec_param *p = &sp->params[c->dim[i]];
        const json_t *v = json_object_get(params, p->name);
        double u = v ? spec_param_to_unit(p, v) : -1;
        x[i] = u >= 0 ? u : c->started ? c->m[i] : 0.5;
    }
}

static json_t *s_decode(const sched_cmaes *c, const double *x)
{
    const spec_t *sp = c->base.spec;
    json_t *o = json_object();
    int i = 0;
    for (size_t k = 0; k < sp->nparams; k++) {
        const spec_param *p = &sp->params[k];
        if (p->konst)
            json_object_set_new(o, p->name, json_deep_copy(json_array_get(p->values, 0)));
        else
            json_object_set_new(o, p->name, spec_param_from_unit(p, x[i++]));
    }
    spec_params_prune(sp, o);
    return o;
}

/* ---- the interface ---------------------------------------------------- */

static int s_suggest(sched_t *s, long trial_id, json_t **params)
{
    sched_cmaes *c = (sched_cmaes *)s;
    int D = c->D;
    if (!c->started) {
        /* the first start: at the best warm-start result, else the centre */
        for (int i = 0; i < D; i++)
            c->wk[i] = c->warm_x ? c->warm_x[i] : 0.5;
        if (s_start(c, c->wk) != 0)
            return SCHED_ERR;
    }
    s_pend p = {
        trial_id, c->restart, c->gen, malloc(sizeof(double) * (size_t)(D ? D : 1)), -1,
    };
    if (!p.x)
        return SCHED_ERR;
    p.pair = s_draw(c, c->drawn, p.x);
    if (c->npend == c->cappend) {
        size_t nc = c->cappend ? c->cappend * 2 : 16;
        s_pend *na = realloc(c->pend, sizeof(s_pend) * nc);
        if (!na) {
            free(p.x);
            return SCHED_ERR;
        }
        c->pend = na;
        c->cappend = nc;
    }
    json_t *o = s_decode(c, p.x);
    if (!o) {
        free(p.x);
        return SCHED_ERR;
    }
    c->pend[c->npend++] = p;
    c->drawn++;
    c->count++;
    *params = o;
    return SCHED_OK;
}

/* An external point x's step from the mean clipped to the length of a
   drawn one (Mahalanobis norm at most sqrt(D) + 2D/(D+2)). */
static void s_clip_external(const sched_cmaes *c, double *x)
{
    int D = c->D;
    double *y = c->wk, *t = c->wk + 2 * D, nrm = 0;
    for (int i = 0; i < D; i++)
        y[i] = (x[i] - c->m[i]) / c->sigma;
    s_invsqrt(c, y, t);
    for (int i = 0; i < D; i++)
        nrm += t[i] * t[i];
    nrm = sqrt(nrm);
    double cap = sqrt((double)D) + 2.0 * D / (D + 2.0);
    if (nrm > cap)
        for (int i = 0; i < D; i++)
            x[i] = c->m[i] + c->sigma * y[i] * cap / nrm;
}

static void s_on_complete(sched_t *s, long trial_id, const json_t *params,
                          sched_outcome outcome, double value)
{
    sched_cmaes *c = (sched_cmaes *)s;
    int D = c->D;
    double f = outcome == SCHED_COMPLETED && isfinite(value)
                   ? (s->spec->maximize ? -value : value)
                   : INFINITY; /* failed or stopped: ranked last */
    long pi = -1;
    for (size_t i = 0; i < c->npend; i++)
        if (c->pend[i].trial == trial_id)
            pi = (long)i;
    if (pi >= 0) {
        s_pend p = c->pend[pi];
        memmove(&c->pend[pi], &c->pend[pi + 1],
                sizeof(s_pend) * (c->npend - (size_t)pi - 1));
        c->npend--;
        /* the trial's params as it ran (they may have been changed live) */
        json_t *mine = s_decode(c, p.x);
        if (json_is_object(params) && mine && !json_equal(mine, (json_t *)params))
            s_encode(c, params, p.x);
        json_decref(mine);
        if (p.restart == c->restart && p.gen == c->gen && c->ngot < c->lambda)
            s_add(c, p.x, f, p.pair);
        free(p.x);
        return;
    }
    if (!json_is_object(params) || !isfinite(f))
        return;
    double *x = malloc(sizeof(double) * (size_t)D);
    if (!x)
        return;
    s_encode(c, params, x);
    if (!c->started) { /* warm start: the best places the first mean */
        if (!c->warm_x || f < c->warm_f) {
            free(c->warm_x);
            c->warm_x = x;
            c->warm_f = f;
            return;
        }
        free(x);
        return;
    }
    s_clip_external(c, x);
    s_add(c, x, f, -1);
    free(x);
}

/* ---- state ------------------------------------------------------------ */

static json_t *s_arr(const double *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, sched_json_real(v[i]));
    return a;
}

/* obj.key, an array of n numbers (or "inf" unless finite), into v */
static int s_get_arr(const json_t *o, const char *key, double *v, int n, int finite)
{
    const json_t *a = json_object_get(o, key);
    if (!json_is_array(a) || json_array_size(a) != (size_t)n)
        return -1;
    for (int i = 0; i < n; i++) {
        const json_t *e = json_array_get(a, (size_t)i);
        const char *t = json_string_value(e);
        v[i] = json_is_number(e)        ? json_number_value(e)
               : t && !strcmp(t, "inf") ? INFINITY
                                        : NAN;
        if (isnan(v[i]) || (finite && !isfinite(v[i])))
            return -1;
    }
    return 0;
}

static json_t *s_save(sched_t *s)
{
    sched_cmaes *c = (sched_cmaes *)s;
    int D = c->D;
    json_t *pend = json_array();
    for (size_t i = 0; i < c->npend; i++)
        json_array_append_new(pend, json_pack("{s:I,s:i,s:i,s:o,s:I}", "trial",
                                              (json_int_t)c->pend[i].trial, "restart",
                                              c->pend[i].restart, "gen", c->pend[i].gen,
                                              "x", s_arr(c->pend[i].x, D), "pair",
                                              (json_int_t)c->pend[i].pair));
    json_t *st = json_pack("{s:i,s:I,s:b,s:i,s:i,s:i,s:I,s:o}", "version", 1, "count",
                           (json_int_t)c->count, "started", c->started, "restart",
                           c->restart, "gen", c->gen, "lambda", c->lambda, "drawn",
                           (json_int_t)c->drawn, "pending", pend);
    if (!st)
        return NULL;
    if (c->started) {
        json_object_set_new(st, "sigma", json_real(c->sigma));
        json_object_set_new(st, "m", s_arr(c->m, D));
        json_object_set_new(st, "C", s_arr(c->C, D * D));
        json_object_set_new(st, "pc", s_arr(c->pc, D));
        json_object_set_new(st, "ps", s_arr(c->ps, D));
        json_object_set_new(st, "gx", s_arr(c->gx, c->ngot * D));
        json_object_set_new(st, "gf", s_arr(c->gf, c->ngot));
        json_t *gp = json_array();
        for (int i = 0; i < c->ngot; i++)
            json_array_append_new(gp, json_integer(c->gp[i]));
        json_object_set_new(st, "gp", gp);
        json_object_set_new(st, "hist", s_arr(c->hist, c->nhist));
    } else if (c->warm_x) {
        json_object_set_new(st, "warm_x", s_arr(c->warm_x, D));
        json_object_set_new(st, "warm_f", json_real(c->warm_f));
    }
    return st;
}

static int s_restore(sched_t *s, const json_t *state)
{
    sched_cmaes *c = (sched_cmaes *)s;
    int D = c->D, version, started, restart, gen, lambda;
    json_int_t count, drawn;
    json_t *pend;
    if (json_unpack((json_t *)state, "{s:i,s:I,s:b,s:i,s:i,s:i,s:I,s:o}", "version",
                    &version, "count", &count, "started", &started, "restart", &restart,
                    "gen", &gen, "lambda", &lambda, "drawn", &drawn, "pending",
                    &pend) != 0 ||
        version != 1 || count < 0 || restart < 0 || gen < 0 || lambda < 2 ||
        lambda > S_MAX_LAMBDA || drawn < 0 || !json_is_array(pend))
        return -1;
    size_t nd = (size_t)(D ? D : 1);
    double *m = malloc(sizeof(double) * nd), *C = malloc(sizeof(double) * nd * nd);
    double *pc = malloc(sizeof(double) * nd), *ps = malloc(sizeof(double) * nd);
    double *gx = malloc(sizeof(double) * (size_t)lambda * nd);
    double *gf = malloc(sizeof(double) * (size_t)lambda);
    long *gp = malloc(sizeof(long) * (size_t)lambda);
    int H = 10 + (int)ceil(30.0 * D / 2);
    double *hist = malloc(sizeof(double) * (size_t)H);
    double *wx = NULL, wf = 0, sigma = c->sigma0;
    s_pend *np = calloc(json_array_size(pend) + 1, sizeof *np);
    int ngot = 0, nhist = 0, ok = m && C && pc && ps && gx && gf && gp && hist && np;
    size_t i;
    json_t *e;
    json_array_foreach(pend, i, e)
    {
        if (!ok)
            break;
        json_int_t trial;
        int r, g;
        ok = json_unpack(e, "{s:I,s:i,s:i}", "trial", &trial, "restart", &r, "gen", &g) ==
                 0 &&
             (np[i].x = malloc(sizeof(double) * nd)) &&
             s_get_arr(e, "x", np[i].x, D, 1) == 0;
        np[i].trial = (long)trial;
        np[i].restart = r;
        np[i].gen = g;
        /* no "pair" (a state of an older version): unpaired */
        const json_t *jp = json_object_get(e, "pair");
        np[i].pair = json_is_integer(jp) ? (long)json_integer_value(jp) : -1;
    }
    if (ok && started) {
        const json_t *jgf = json_object_get(state, "gf"),
                     *jh = json_object_get(state, "hist");
        ngot = (int)json_array_size(jgf);
        nhist = (int)json_array_size(jh);
        sigma = json_number_value(json_object_get(state, "sigma"));
        ok = ngot < lambda && nhist <= H && sigma > 0 && isfinite(sigma) &&
             s_get_arr(state, "m", m, D, 1) == 0 &&
             s_get_arr(state, "C", C, D * D, 1) == 0 &&
             s_get_arr(state, "pc", pc, D, 1) == 0 &&
             s_get_arr(state, "ps", ps, D, 1) == 0 &&
             s_get_arr(state, "gx", gx, ngot * D, 1) == 0 &&
             s_get_arr(state, "gf", gf, ngot, 0) == 0 &&
             s_get_arr(state, "hist", hist, nhist, 0) == 0;
        const json_t *jgp = json_object_get(state, "gp");
        for (int k = 0; ok && k < ngot; k++) {
            const json_t *v = json_array_get(jgp, (size_t)k);
            gp[k] = json_is_integer(v) ? (long)json_integer_value(v) : -1;
        }
    } else if (ok && json_object_get(state, "warm_x")) {
        wx = malloc(sizeof(double) * nd);
        wf = json_number_value(json_object_get(state, "warm_f"));
        ok = wx && s_get_arr(state, "warm_x", wx, D, 1) == 0;
    }
    if (!ok) {
        for (size_t k = 0; np && k < json_array_size(pend); k++)
            free(np[k].x);
        free(np);
        free(m), free(C), free(pc), free(ps), free(gx), free(gf), free(gp), free(hist),
            free(wx);
        return -1;
    }
    for (size_t k = 0; k < c->npend; k++)
        free(c->pend[k].x);
    free(c->pend);
    free(c->m), free(c->C), free(c->pc), free(c->ps), free(c->gx), free(c->gf);
    free(c->gp), free(c->hist), free(c->warm_x);
    c->pend = np;
    c->npend = c->cappend = json_array_size(pend);
    if (!c->cappend) {
        c->cappend = 1;
    }
    c->m = m, c->C = C, c->pc = pc, c->ps = ps, c->gx = gx, c->gf = gf, c->gp = gp;
    c->hist = hist;
    c->caphist = H;
    c->nhist = nhist;
    c->ngot = ngot;
    c->warm_x = wx;
    c->warm_f = wf;
    c->sigma = sigma;
    c->count = (long)count;
    c->started = started;
    c->restart = restart;
    c->gen = gen;
    c->lambda = lambda;
    c->drawn = (long)drawn;
    return started ? s_eigen(c) : 0;
}

static void s_destroy(sched_t *s)
{
    sched_cmaes *c = (sched_cmaes *)s;
    for (size_t k = 0; k < c->npend; k++)
        free(c->pend[k].x);
    free(c->pend);
    free(c->dim);
    free(c->m), free(c->C), free(c->pc), free(c->ps), free(c->B), free(c->ev),
        free(c->wk);
    free(c->gx), free(c->gf), free(c->gp), free(c->hist), free(c->warm_x);
    free(c->ob), free(c->olen);
    free(c);
}

static const sched_ops s_ops = {.name = "cmaes",
                                .suggest = s_suggest,
                                .on_complete = s_on_complete,
                                .save = s_save,
                                .restore = s_restore,
                                .destroy = s_destroy};

/* ---- options ---------------------------------------------------------- */

static int s_options(sched_cmaes *c, const spec_t *spec, char *err, size_t errsize)
{
    const json_t *o = spec->sched_opts;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v)
    {
        if (strcmp(key, "type") && strcmp(key, "seed") && strcmp(key, "restart") &&
            strcmp(key, "separable") && strcmp(key, "sigma0") && strcmp(key, "popsize")) {
            snprintf(
                err, errsize,
                "scheduler.%s: unknown option for the cmaes scheduler (expected type, "
                "seed, restart, separable, sigma0, popsize)",
                key);
            return -1;
        }
    }
    const json_t *r = json_object_get(o, "restart");
    if (r && (!json_is_string(r) || (strcmp(json_string_value(r), "ipop") &&
                                     strcmp(json_string_value(r), "none")))) {
        snprintf(err, errsize, "scheduler.restart: must be \"ipop\" or \"none\"");
        return -1;
    }
    c->ipop = !r || !strcmp(json_string_value(r), "ipop");
    const json_t *sep = json_object_get(o, "separable");
    if (sep && !json_is_boolean(sep)) {
        snprintf(err, errsize, "scheduler.separable: must be true or false");
        return -1;
    }
    c->separable = sep ? json_is_true(sep) : -1; /* -1: by the dimension */
    double pop;
    if (sched_opt_num(o, "scheduler", "sigma0", 1.0 / 6, 1e-6, 1, 0, &c->sigma0, err,
                      errsize) != 0 ||
        sched_opt_num(o, "scheduler", "popsize", 0, 2, 1000, 1, &pop, err, errsize) != 0)
        return -1;
    c->lambda0 = (int)pop;
    return 0;
}

sched_t *sched_cmaes_new(const spec_t *spec, char *err, size_t errsize)
{
    if (spec->nobjectives > 1 || spec->nconstraints) {
        snprintf(err, errsize,
                 "scheduler.type: cmaes optimises one objective without constraints; use "
                 "\"bo\" for several objectives or constraints");
        return NULL;
    }
    sched_cmaes *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errsize, "out of memory");
        return NULL;
    }
    c->base.ops = &s_ops;
    c->base.spec = spec;
    if (s_options(c, spec, err, errsize) != 0) {
        free(c);
        return NULL;
    }
    int D = 0;
    for (size_t k = 0; k < spec->nparams; k++)
        D += !spec->params[k].konst;
    if (D == 0) {
        snprintf(err, errsize,
                 "space: no parameter to search (only consts), so cmaes has nothing to "
                 "adapt; use scheduler \"random\" to repeat the command");
        free(c);
        return NULL;
    }
    c->D = D;
    if (c->separable < 0) /* a full covariance's eigendecomposition costs D^3 */
        c->separable = D > S_MAX_FULL;
    c->lambda = c->lambda0 > 0 ? c->lambda0 : 4 + (int)floor(3 * log((double)D));
    size_t nd = (size_t)D;
    int H = 10 + (int)ceil(30.0 * D / 2); /* the longest history (lambda >= 2) */
    c->dim = malloc(sizeof(int) * nd);
    c->m = malloc(sizeof(double) * nd);
    c->C = malloc(sizeof(double) * nd * nd);
    c->pc = malloc(sizeof(double) * nd);
    c->ps = malloc(sizeof(double) * nd);
    c->B = malloc(sizeof(double) * nd * nd);
    c->ev = malloc(sizeof(double) * nd);
    c->wk = malloc(sizeof(double) * 3 * nd);
    if (D <= S_MAX_ORTH) {
        c->ob = malloc(sizeof(double) * nd * nd);
        c->olen = malloc(sizeof(double) * nd);
    }
    c->gx = malloc(sizeof(double) * (size_t)c->lambda * nd);
    c->gf = malloc(sizeof(double) * (size_t)c->lambda);
    c->gp = malloc(sizeof(long) * (size_t)c->lambda);
    c->hist = malloc(sizeof(double) * (size_t)H);
    c->caphist = H;
    if (!c->dim || !c->m || !c->C || !c->pc || !c->ps || !c->B || !c->ev || !c->wk ||
        !c->gx || !c->gf || !c->gp || !c->hist ||
        (D <= S_MAX_ORTH && (!c->ob || !c->olen))) {
        snprintf(err, errsize, "out of memory");
        s_destroy(&c->base);
        return NULL;
    }
    int i = 0;
    for (size_t k = 0; k < spec->nparams; k++)
        if (!spec->params[k].konst)
            c->dim[i++] = (int)k;
    return &c->base;
}
