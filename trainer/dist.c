/*  dist.c - fusion buckets and the communication thread (see dist.h).

    Thread protocol: the training thread packs a bucket and appends its
    index to a queue (mutex + condition); the communication thread takes
    the queue in order and runs the all-reduce. Buckets are always queued in
    index order on every rank (a bucket waits for the ones before it), so
    the collectives match across ranks. The training thread calls the comm
    only after trn_dist_finish has drained the queue (SERIALIZED MPI).
*/
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/dist.h"
#include "trainer/devplan.h"
#include "common/util.h"

/* Measuring auto fusion: at most this many candidate layouts, each timed
   in this many rounds (the first one a warm-up). */
#define S_TUNE_MAX 6
#define S_TUNE_ROUNDS 4
#define S_ONE_BUCKET (1L << 40) /* a threshold no net reaches */

typedef struct {
    int first, last; /* param indices, first > last (backward order) */
    long n;          /* floats */
    float *buf;      /* packed gradients */
    float *residual; /* top-k error feedback (n floats) */
    float *velocity; /* top-k momentum correction (n floats) or NULL */
    int pending;     /* params not yet final this step */
} s_bucket;

struct trn_dist {
    trn_comm *comm;
    trn_net *net;
    trn_dist_opts o;
    double density; /* top-k: fraction sent now (warm-up) */
    long ntotal;    /* floats over all buckets */
    long fusion_bytes;
    double alpha, beta, pred, pred_none; /* auto fusion: fit and predictions */
    s_bucket *b;
    int nb;
    int *bucket_of; /* param -> bucket */
    double *unscale;
    double *gnorm;     /* top-k: per param, this rank's gradient norm (after clipping) */
    int next_queue;    /* first bucket not yet queued */
    int complete_upto; /* buckets [0, complete_upto) reduced */
    int failed;
    /* thread */
    int threaded;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* the buckets' storage: one array each, buckets point into them, so a
       new layout is only a new partition (bucket order = backward order) */
    float *flat_buf, *flat_res, *flat_vel;
    /* auto fusion, measuring: candidate thresholds, each used in turn for
       one step per round; the time of trn_dist_begin .. the end of
       trn_dist_finish of rounds after the first (warm-up) is recorded */
    int tune_n, tune_step, tune_model; /* tune_model: index of the model's pick */
    long tune_thr[S_TUNE_MAX];
    double tune_t[S_TUNE_MAX][S_TUNE_ROUNDS];
    double tune_t0;
    int tuning, tune_told; /* measuring now; 1 once the choice is made, until told */
    char tune_note[512];
    /* the layout benchmark (opts.compare): cmp_thr[0] is the layout in
       use, the others the compared ones (cmp_again: the layout in use once
       more, an A/A control); cycle c times each once, in an order of its
       own (s_cmp_arm), and the time of layout k is cmp_t[c * cmp_n + k] */
    long cmp_thr[TRN_COMPARE_KB_MAX + 1];
    int cmp_again[TRN_COMPARE_KB_MAX + 1];
    int cmp_n, cmp_on;
    double *cmp_t;
    long cmp_steps, cmp_cap;
    int queued;    /* buckets [0, queued) handed to the thread */
    int computing; /* backward still runs: the thread's waits are patient */
    int quit;
};

/* Local gradient clipping (top-k): this rank's share of the bucket is
   rescaled when its norm exceeds the bucket's part of the threshold. */
static void s_clip(trn_dist *d, s_bucket *b)
{
    double thr = d->o.clip * sqrt((double)b->n / (double)d->ntotal / d->comm->size);
    double s = 0;
    for (long i = 0; i < b->n; i++)
        s += (double)b->buf[i] * b->buf[i];
    s = sqrt(s);
    if (s > thr && thr > 0) {
        float f = (float)(thr / s);
        for (long i = 0; i < b->n; i++)
            b->buf[i] *= f;
    }
}

static int s_reduce(trn_dist *d, s_bucket *b)
{
    if (d->o.topk > 0) {
        long k = (long)ceil(d->density * (double)b->n);
        k = k < 1 ? 1 : k;
        if (d->o.clip > 0)
            s_clip(d, b);
        long off = 0; /* the norms of what enters compression (LARS) */
        for (int i = b->first; i >= b->last; i--) {
            long pn = trn_net_param(d->net, i)->n;
            double acc = 0;
            for (long j = 0; j < pn; j++)
                acc += (double)b->buf[off + j] * b->buf[off + j];
            d->gnorm[i] = sqrt(acc);
            off += pn;
        }
        if (b->velocity)
            return trn_comm_topk_dgc(d->comm, b->buf, b->residual, b->velocity, b->n, k,
                                     (float)d->o.momentum, d->o.nesterov);
        return trn_comm_topk(d->comm, b->buf, b->residual, b->n, k);
    }
    return trn_comm_allreduce(d->comm, b->buf, b->n, d->o.algo, d->o.wire);
}

static void s_layout(trn_dist *d, long thr);
static int s_tune_decide(trn_dist *d);

/* The layout benchmark's step k: which layout. Each cycle takes the
   layouts in its own shuffled order (Fisher-Yates on a xorshift seeded by
   the cycle number: the same on every rank), so no layout always follows
   the same one (with a rotated order the A/A control always followed the
   layout it repeats, which could favour it). */
static int s_cmp_arm(const trn_dist *d, long k)
{
    int perm[TRN_COMPARE_KB_MAX + 1], n = d->cmp_n;
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(k / n + 1);
    for (int i = 0; i < n; i++)
        perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int j = (int)(x % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    return perm[k % n];
}
static void s_thr_name(long t, char *out, size_t n);
static int s_cmp_double(const void *a, const void *b);

static void *s_thread(void *arg)
{
    trn_dist *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->quit && d->complete_upto >= d->queued)
            pthread_cond_wait(&d->cv, &d->mu);
        if (d->quit)
            break;
        int i = d->complete_upto;
        int computing = d->computing;
        pthread_mutex_unlock(&d->mu);
        /* while backward runs, waits leave the core to the training thread;
           once it waits for us, they poll */
        trn_comm_set_patient(d->comm, computing);
        int rc = s_reduce(d, &d->b[i]);
        pthread_mutex_lock(&d->mu);
        if (rc < 0)
            d->failed = 1;
        d->complete_upto = i + 1;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static void s_pack(trn_dist *d, s_bucket *b)
{
    long off = 0;
    for (int i = b->first; i >= b->last; i--) {
        trn_param *p = trn_net_param(d->net, i);
        float f = (float)d->unscale[i];
        for (long j = 0; j < p->n; j++)
            b->buf[off + j] = p->g[j] * f;
        off += p->n;
    }
}

static void s_unpack(trn_dist *d, s_bucket *b)
{
    long off = 0;
    for (int i = b->first; i >= b->last; i--) {
        trn_param *p = trn_net_param(d->net, i);
        memcpy(p->g, b->buf + off, (size_t)p->n * sizeof(float));
        off += p->n;
    }
}

/* Queues complete buckets in order (overlap) or leaves them for finish. */
static void s_queue_ready(trn_dist *d)
{
    while (d->next_queue < d->nb && d->b[d->next_queue].pending == 0) {
        s_pack(d, &d->b[d->next_queue]);
        d->next_queue++;
        if (d->threaded) {
            pthread_mutex_lock(&d->mu);
            d->queued = d->next_queue;
            pthread_cond_broadcast(&d->cv);
            pthread_mutex_unlock(&d->mu);
        }
    }
}

void trn_dist_begin(trn_dist *d, const double *unscale)
{
    int np = trn_net_nparams(d->net);
    memcpy(d->unscale, unscale, (size_t)np * sizeof(double));
    if (d->tuning) { /* this step's candidate (the thread is idle) */
        s_layout(d, d->tune_thr[d->tune_step % d->tune_n]);
        d->tune_t0 = util_now();
    } else if (d->cmp_n > 1) { /* the layout benchmark: this step's layout */
        if (!d->cmp_on) {
            for (int k = 0; k < d->cmp_n; k++) /* the choice, once made */
                if (k == 0 || d->cmp_again[k])
                    d->cmp_thr[k] = d->fusion_bytes;
            d->cmp_on = 1;
        }
        s_layout(d, d->cmp_thr[s_cmp_arm(d, d->cmp_steps)]);
        d->tune_t0 = util_now();
    }
    for (int i = 0; i < d->nb; i++)
        d->b[i].pending = d->b[i].first - d->b[i].last + 1;
    d->next_queue = 0;
    d->complete_upto = 0;
    d->queued = 0;
    d->failed = 0;
    if (d->threaded) {
        pthread_mutex_lock(&d->mu);
        d->computing = 1;
        pthread_mutex_unlock(&d->mu);
    }
}

void trn_dist_ready(trn_dist *d, int i)
{
    s_bucket *b = &d->b[d->bucket_of[i]];
    if (b->pending > 0)
        b->pending--;
    if (d->o.overlap)
        s_queue_ready(d);
}

int trn_dist_finish(trn_dist *d)
{
    for (int i = 0; i < d->nb; i++)
        d->b[i].pending = 0; /* whatever did not report (no examples) is final */
    s_queue_ready(d);
    if (d->threaded) {
        pthread_mutex_lock(&d->mu);
        d->computing = 0;
        while (d->complete_upto < d->nb)
            pthread_cond_wait(&d->cv, &d->mu);
        pthread_mutex_unlock(&d->mu);
        trn_comm_set_patient(d->comm, 0); /* the thread is idle: ours again */
    } else {
        for (int i = 0; i < d->nb; i++)
            if (s_reduce(d, &d->b[i]) < 0)
                d->failed = 1;
    }
    for (int i = 0; i < d->nb; i++)
        s_unpack(d, &d->b[i]);
    if (d->failed)
        return -1;
    if (d->tuning) {
        int k = d->tune_step % d->tune_n, r = d->tune_step / d->tune_n;
        d->tune_t[k][r] = util_now() - d->tune_t0;
        if (++d->tune_step >= d->tune_n * S_TUNE_ROUNDS && s_tune_decide(d) < 0)
            return -1;
    } else if (d->cmp_on) {
        double t = util_now() - d->tune_t0;
        long cycle = d->cmp_steps / d->cmp_n;
        if ((cycle + 1) * d->cmp_n > d->cmp_cap) {
            long cap = d->cmp_cap ? d->cmp_cap * 2 : 64L * d->cmp_n;
            double *q = realloc(d->cmp_t, (size_t)cap * sizeof *q);
            if (!q)
                return 0; /* no memory: the benchmark stops growing, training goes on */
            d->cmp_t = q;
            d->cmp_cap = cap;
        }
        d->cmp_t[cycle * d->cmp_n + s_cmp_arm(d, d->cmp_steps)] = t;
        d->cmp_steps++;
    }
    return 0;
}

/* q1, median, q3 (nearest rank) of v[0..n), sorted in place. */
static void s_quartiles(double *v, long n, double q[3])
{
    qsort(v, (size_t)n, sizeof(double), s_cmp_double);
    for (int i = 0; i < 3; i++)
        q[i] = v[(long)((0.25 * (i + 1)) * (double)(n - 1) + 0.5)];
}

int trn_dist_compare_report(const trn_dist *d, char *out, size_t n)
{
    long cycles = d->cmp_n > 1 ? d->cmp_steps / d->cmp_n : 0;
    if (cycles < 1 || n == 0)
        return -1;
    double *v = malloc((size_t)cycles * sizeof(double));
    if (!v)
        return -1;
    char name[32];
    size_t used = 0;
    int w =
        snprintf(out, n,
                 "fusion compare: %ld cycles of %d steps (order shuffled each cycle), "
                 "ms per step (forward + backward + communication; q1 median q3), "
                 "ratio to the layout in use per cycle (q1 median q3):",
                 cycles, d->cmp_n);
    for (int k = 0; k < d->cmp_n && w > 0 && (used += (size_t)w) < n; k++) {
        double q[3], r[3];
        for (long c = 0; c < cycles; c++)
            v[c] = d->cmp_t[c * d->cmp_n + k] / d->cmp_t[c * d->cmp_n];
        s_quartiles(v, cycles, r);
        for (long c = 0; c < cycles; c++)
            v[c] = d->cmp_t[c * d->cmp_n + k];
        s_quartiles(v, cycles, q);
        s_thr_name(d->cmp_thr[k], name, sizeof name);
        if (d->cmp_again[k])
            snprintf(name, sizeof name, "in use again");
        if (k == 0)
            w = snprintf(out + used, n - used, " %s%s %.2f %.2f %.2f", name,
                         d->o.fusion_bytes < 0 ? " (auto's choice)" : " (in use)",
                         q[0] * 1e3, q[1] * 1e3, q[2] * 1e3);
        else
            w = snprintf(out + used, n - used, "; %s %.2f %.2f %.2f ratio %.3f %.3f %.3f",
                         name, q[0] * 1e3, q[1] * 1e3, q[2] * 1e3, r[0], r[1], r[2]);
    }
    free(v);
    return 0;
}

const char *trn_dist_fusion_note(trn_dist *d)
{
    if (d->tune_told != 1)
        return NULL;
    d->tune_told = 2;
    return d->tune_note;
}

void trn_dist_set_density(trn_dist *d, double density)
{
    d->density = density > 1 ? 1 : density > 0 ? density : d->o.topk;
}

const double *trn_dist_local_gnorm(const trn_dist *d)
{
    return d->gnorm;
}

long trn_dist_state_count(const trn_dist *d)
{
    if (!(d->o.topk > 0))
        return 0;
    return d->ntotal * (d->o.momentum > 0 ? 2 : 1);
}

void trn_dist_state_get(const trn_dist *d, float *out)
{
    for (int i = 0; d->o.topk > 0 && i < d->nb; i++) {
        memcpy(out, d->b[i].residual, (size_t)d->b[i].n * sizeof(float));
        out += d->b[i].n;
        if (d->b[i].velocity) {
            memcpy(out, d->b[i].velocity, (size_t)d->b[i].n * sizeof(float));
            out += d->b[i].n;
        }
    }
}

void trn_dist_state_clear(trn_dist *d)
{
    for (int i = 0; d->o.topk > 0 && i < d->nb; i++) {
        memset(d->b[i].residual, 0, (size_t)d->b[i].n * sizeof(float));
        if (d->b[i].velocity)
            memset(d->b[i].velocity, 0, (size_t)d->b[i].n * sizeof(float));
    }
}

int trn_dist_state_set(trn_dist *d, const float *in, long n)
{
    if (n != trn_dist_state_count(d))
        return -1;
    for (int i = 0; d->o.topk > 0 && i < d->nb; i++) {
        memcpy(d->b[i].residual, in, (size_t)d->b[i].n * sizeof(float));
        in += d->b[i].n;
        if (d->b[i].velocity) {
            memcpy(d->b[i].velocity, in, (size_t)d->b[i].n * sizeof(float));
            in += d->b[i].n;
        }
    }
    return 0;
}

long trn_dist_fusion_bytes(const trn_dist *d)
{
    return d->fusion_bytes;
}

void trn_dist_fusion_model(const trn_dist *d, double *alpha, double *beta, double *cost,
                           double *cost_none)
{
    *alpha = d->alpha;
    *beta = d->beta;
    *cost = d->pred;
    *cost_none = d->pred_none;
}

int trn_dist_nbuckets(const trn_dist *d)
{
    return d->nb;
}

int trn_dist_fit_curve(trn_comm *c, const trn_dist_opts *o, double *alpha, double *beta)
{
    enum { NS = 6 };
    const long sizes[NS] = {1024, 4096, 16384, 65536, 262144, 1048576}; /* floats */
    double t[NS];
    float *buf = calloc((size_t)sizes[NS - 1], sizeof(float));
    if (!buf)
        return -1;
    /* the fastest of a few repetitions: other processes on the cores only
       ever add time */
    for (int s = 0; s < NS; s++) {
        int reps = s < 3 ? 10 : 4;
        trn_comm_allreduce(c, buf, sizes[s], o->algo, o->wire); /* warm */
        trn_comm_barrier(c);
        t[s] = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = util_now();
            if (trn_comm_allreduce(c, buf, sizes[s], o->algo, o->wire) < 0) {
                free(buf);
                return -1;
            }
            double dt = util_now() - t0;
            t[s] = dt < t[s] ? dt : t[s];
        }
    }
    free(buf);
    /* beta: least squares of the slope over the three largest sizes (the
       bandwidth part); alpha: the intercept of the line through the 4 KB
       and 16 KB times (small messages run from cache, faster than the
       large sizes' slope says, so that slope would leave no latency) */
    double fit[2]; /* (trn_devplan_fit: the device path fits its curve the same way) */
    trn_devplan_fit(sizes, t, NS, &fit[0], &fit[1]);
    if (trn_comm_bcast(c, fit, sizeof fit, 0) < 0)
        return -1;
    *alpha = fit[0];
    *beta = fit[1];
    return 0;
}

/* Simulated cost of the layout threshold thr gives (see dist.h). */
static double s_sim(int np, const long *pn, const double *ready, double bw, double a,
                    double b, int overlap, long thr, long total)
{
    double end = 0, sum = 0;
    long cum = 0;
    int i = np - 1;
    while (i >= 0) {
        long n = 0;
        double r = 0;
        while (i >= 0) {
            n += pn[i];
            cum += pn[i];
            double ri = ready ? ready[i] : bw * (double)cum / (double)total;
            r = ri > r ? ri : r;
            i--;
            if (n * (long)sizeof(float) >= thr)
                break;
        }
        double dur = a + (double)n * sizeof(float) * b;
        double start = r > end ? r : end;
        end = start + dur;
        sum += dur;
    }
    if (!overlap)
        return sum;
    return end > bw ? end - bw : 0;
}

long trn_fusion_choose(int np, const long *pn, const double *ready_s, double backward_s,
                       double alpha, double beta, int overlap, double *cost,
                       double *cost_none)
{
    long total = 0;
    for (int i = 0; i < np; i++)
        total += pn[i];
    if (total <= 0)
        total = 1;
    double best = s_sim(np, pn, ready_s, backward_s, alpha, beta, overlap, 0, total);
    if (cost_none)
        *cost_none = best;
    /* candidates: no fusion, then a bucket closing after each param */
    long cand[np + 1];
    double c[np + 1];
    int nc = 0;
    cand[nc] = 0;
    c[nc++] = best;
    long cum = 0;
    for (int i = np - 1; i >= 0; i--) {
        cum += pn[i];
        cand[nc] = cum * (long)sizeof(float);
        c[nc] = s_sim(np, pn, ready_s, backward_s, alpha, beta, overlap, cand[nc], total);
        if (c[nc] < best)
            best = c[nc];
        nc++;
    }
    int pick = 0;
    for (int j = 0; j < nc; j++)
        if (c[j] <= best * 1.02 + 1e-12 && cand[j] >= cand[pick])
            pick = j;
    if (cost)
        *cost = c[pick];
    return cand[pick];
}

/* Allocates the flat storage and the bucket table (once). */
static int s_alloc(trn_dist *d, char *err)
{
    int np = trn_net_nparams(d->net);
    long total = 0;
    for (int i = 0; i < np; i++)
        total += trn_net_param(d->net, i)->n;
    size_t bytes = (size_t)(total > 0 ? total : 1) * sizeof(float);
    d->b = calloc((size_t)(np > 0 ? np : 1), sizeof *d->b);
    d->bucket_of = calloc((size_t)(np > 0 ? np : 1), sizeof(int));
    d->unscale = calloc((size_t)(np > 0 ? np : 1), sizeof(double));
    d->gnorm = calloc((size_t)(np > 0 ? np : 1), sizeof(double));
    d->flat_buf = malloc(bytes);
    if (!d->b || !d->bucket_of || !d->unscale || !d->gnorm || !d->flat_buf)
        goto oom;
    if (d->o.topk > 0 && !(d->flat_res = calloc(1, bytes)))
        goto oom;
    if (d->o.topk > 0 && d->o.momentum > 0 && !(d->flat_vel = calloc(1, bytes)))
        goto oom;
    d->ntotal = total;
    return 0;
oom:
    snprintf(err, TRN_ERRLEN, "out of memory (fusion buckets)");
    return -1;
}

/* Cuts the params, in backward order, into buckets of at least thr bytes
   (one param per bucket when 0). No allocation: buckets point into the
   flat arrays. */
static void s_layout(trn_dist *d, long thr)
{
    int np = trn_net_nparams(d->net);
    d->nb = 0;
    long off = 0;
    int i = np - 1;
    while (i >= 0) {
        s_bucket *b = &d->b[d->nb];
        b->first = i;
        b->n = 0;
        while (i >= 0) {
            b->n += trn_net_param(d->net, i)->n;
            d->bucket_of[i] = d->nb;
            i--;
            if (b->n * (long)sizeof(float) >= thr)
                break;
        }
        b->last = i + 1;
        b->buf = d->flat_buf + off;
        b->residual = d->flat_res ? d->flat_res + off : NULL;
        b->velocity = d->flat_vel ? d->flat_vel + off : NULL;
        off += b->n;
        d->nb++;
    }
    d->fusion_bytes = thr;
}

/* The first param index of each bucket thr gives, as a signature: equal
   signatures are the same layout. Returns the bucket count. */
static int s_signature(const trn_dist *d, long thr, int *sig)
{
    int np = trn_net_nparams(d->net), nb = 0;
    int i = np - 1;
    while (i >= 0) {
        long n = 0;
        sig[nb++] = i;
        while (i >= 0) {
            n += trn_net_param(d->net, i)->n;
            i--;
            if (n * (long)sizeof(float) >= thr)
                break;
        }
    }
    return nb;
}

/* The candidates auto fusion times: the model's pick, no fusion, 256 KiB,
   1 MiB, 4 MiB and everything in one bucket, each layout once. */
static void s_tune_candidates(trn_dist *d, long model_thr)
{
    const long cand[] = {model_thr, 0, 256L << 10, 1L << 20, 4L << 20, S_ONE_BUCKET};
    int np = trn_net_nparams(d->net), w = np > 0 ? np : 1;
    int *sig = malloc((size_t)(S_TUNE_MAX + 1) * (size_t)w * sizeof(int));
    int nsig[S_TUNE_MAX];
    d->tune_n = 0;
    d->tune_model = 0;
    if (!sig) { /* no memory: the model's pick alone (nothing to time) */
        d->tune_thr[d->tune_n++] = model_thr;
        return;
    }
    int *cur = sig + (size_t)S_TUNE_MAX * (size_t)w;
    for (size_t c = 0; c < sizeof cand / sizeof cand[0] && d->tune_n < S_TUNE_MAX; c++) {
        int nb = s_signature(d, cand[c], cur), dup = 0;
        for (int k = 0; k < d->tune_n && !dup; k++)
            dup = nsig[k] == nb &&
                  !memcmp(sig + (size_t)k * (size_t)w, cur, (size_t)nb * sizeof(int));
        if (dup)
            continue;
        memcpy(sig + (size_t)d->tune_n * (size_t)w, cur, (size_t)nb * sizeof(int));
        nsig[d->tune_n] = nb;
        d->tune_thr[d->tune_n++] = cand[c];
    }
    free(sig);
}

static void s_thr_name(long t, char *out, size_t n)
{
    if (t == 0)
        snprintf(out, n, "no fusion");
    else if (t >= S_ONE_BUCKET)
        snprintf(out, n, "one bucket");
    else
        snprintf(out, n, "%ld KiB", t / 1024);
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* After the rounds: rank 0 picks the candidate with the lowest median step
   time, every rank takes its pick. Collective (every rank reaches it at the
   same step). */
static int s_tune_decide(trn_dist *d)
{
    double med[S_TUNE_MAX], pick = 0;
    const int m = S_TUNE_ROUNDS - 1;
    for (int k = 0; k < d->tune_n; k++) {
        double v[S_TUNE_ROUNDS];
        memcpy(v, d->tune_t[k] + 1, (size_t)m * sizeof(double));
        qsort(v, (size_t)m, sizeof(double), s_cmp_double);
        med[k] = m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
        if (med[k] < med[(int)pick])
            pick = k;
    }
    if (trn_comm_bcast(d->comm, &pick, sizeof pick, 0) < 0)
        return -1;
    int p = (int)pick;
    if (p < 0 || p >= d->tune_n)
        p = d->tune_model;
    s_layout(d, d->tune_thr[p]);
    /* the note: what was timed */
    char *o = d->tune_note, name[32];
    size_t left = sizeof d->tune_note;
    int w = snprintf(o, left,
                     "fusion auto: timed %d steps of each layout, ms per step "
                     "(median of the last %d):",
                     S_TUNE_ROUNDS, m);
    for (int k = 0; k < d->tune_n && w > 0 && (size_t)w < left; k++) {
        o += w;
        left -= (size_t)w;
        s_thr_name(d->tune_thr[k], name, sizeof name);
        w = snprintf(o, left, "%s %s%s %.2f", k ? "," : "", name,
                     k == d->tune_model ? " (model's pick)" : "", med[k] * 1e3);
    }
    if (w > 0 && (size_t)w < left) {
        s_thr_name(d->fusion_bytes, name, sizeof name);
        snprintf(o + w, left - (size_t)w, "; using %s (%d buckets)", name, d->nb);
    }
    d->tuning = 0;
    d->tune_told = 1;
    return 0;
}

trn_dist *trn_dist_new(trn_comm *c, trn_net *net, const trn_dist_opts *o, char *err)
{
    trn_dist *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    d->comm = c;
    d->net = net;
    d->o = *o;
    d->density = o->topk;
    long thr = o->fusion_bytes;
    if (thr < 0) {
        /* adaptive: the layout the alpha-beta model predicts cheapest for
           this net's gradients and backward timing (trn_fusion_choose) */
        double a, b;
        if (trn_dist_fit_curve(c, o, &a, &b) < 0) {
            snprintf(err, TRN_ERRLEN, "fusion auto: measuring the all-reduce failed");
            free(d);
            return NULL;
        }
        int np = trn_net_nparams(net);
        long *pn = malloc((size_t)(np > 0 ? np : 1) * sizeof(long));
        if (!pn) {
            snprintf(err, TRN_ERRLEN, "out of memory");
            free(d);
            return NULL;
        }
        for (int i = 0; i < np; i++)
            pn[i] = trn_net_param(net, i)->n;
        double pick[4] = {0};
        pick[0] = (double)trn_fusion_choose(np, pn, o->ready_s, o->backward_s, a, b,
                                            o->overlap, &pick[1], &pick[2]);
        free(pn);
        if (trn_comm_bcast(c, pick, sizeof pick, 0) < 0) { /* rank 0's choice */
            snprintf(err, TRN_ERRLEN, "fusion auto: broadcasting the choice failed");
            free(d);
            return NULL;
        }
        thr = (long)pick[0];
        d->alpha = a;
        d->beta = b;
        d->pred = pick[1];
        d->pred_none = pick[2];
    }
    if (s_alloc(d, err) < 0) {
        trn_dist_destroy(&d);
        return NULL;
    }
    s_layout(d, thr);
    /* auto, dense, several ranks: the model shortlists, the first steps
       decide by timing (top-k selects per bucket, so its layout stays put) */
    if (o->fusion_bytes < 0 && c->size > 1 && !(o->topk > 0)) {
        s_tune_candidates(d, thr);
        d->tuning = d->tune_n > 1;
    }
    if (o->ncompare > 0 && !(o->topk > 0)) { /* the layout benchmark */
        int m = o->ncompare < TRN_COMPARE_KB_MAX ? o->ncompare : TRN_COMPARE_KB_MAX;
        d->cmp_thr[0] = d->fusion_bytes;
        for (int k = 0; k < m; k++) {
            d->cmp_again[k + 1] = o->compare[k] < 0;
            d->cmp_thr[k + 1] = o->compare[k] < 0 ? d->fusion_bytes : o->compare[k];
        }
        d->cmp_n = m + 1;
    }
    d->o.compare = NULL; /* borrowed: not kept */
    if (o->overlap) {
        pthread_mutex_init(&d->mu, NULL);
        pthread_cond_init(&d->cv, NULL);
        if (pthread_create(&d->th, NULL, s_thread, d) != 0) {
            pthread_mutex_destroy(&d->mu);
            pthread_cond_destroy(&d->cv);
            snprintf(err, TRN_ERRLEN, "cannot start the communication thread");
            trn_dist_destroy(&d);
            return NULL;
        }
        d->threaded = 1;
    }
    return d;
}

void trn_dist_destroy(trn_dist **dp)
{
    if (!dp || !*dp)
        return;
    trn_dist *d = *dp;
    if (d->threaded) {
        pthread_mutex_lock(&d->mu);
        d->quit = 1;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->th, NULL);
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
    }
    free(d->flat_buf);
    free(d->flat_res);
    free(d->flat_vel);
    free(d->b);
    free(d->bucket_of);
    free(d->unscale);
    free(d->gnorm);
    free(d->cmp_t);
    free(d);
    *dp = NULL;
}
