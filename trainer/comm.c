/*  comm.c - the all-reduce algorithms on a backend's point-to-point calls
    (see comm.h), the wire formats, and the choice of backend by name.

    Ring over P ranks of a group: the buffer is cut into P chunks; in P-1
    reduce-scatter steps each rank sends one chunk to its right neighbour
    and adds the one from its left, so rank i ends owning the full sum of
    chunk (i+1) mod P; in P-1 all-gather steps the owned chunks travel round.
    Each rank sends 2(P-1)/P of the buffer: the bandwidth-optimal volume.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/comm.h"
#include "trainer/ring.h"

/* ---- wire formats --------------------------------------------------------- */

uint16_t trn_f2h(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* subnormal half (or zero) */
        float f;
        memcpy(&f, &a, 4);
        /* f * 2^24 rounded to nearest even gives the subnormal mantissa */
        float m = nearbyintf(f * 16777216.0f);
        return (uint16_t)(sign | (uint32_t)m);
    }
    uint32_t e = ((a >> 23) - 112u) << 10;
    uint32_t m = a & 0x7fffffu;
    uint32_t h = e | (m >> 13);
    uint32_t rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

float trn_h2f(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float x;
    if (e == 0) {
        x = (float)m / 16777216.0f;
        return sign ? -x : x;
    }
    uint32_t u;
    if (e == 31)
        u = sign | 0x7f800000u | (m << 13);
    else
        u = sign | ((e + 112u) << 23) | (m << 13);
    memcpy(&x, &u, 4);
    return x;
}

static size_t s_wire_size(trn_wire w)
{
    return w == TRN_WIRE_FP32 ? 4 : 2;
}

static void s_encode(trn_wire w, const float *x, long n, void *out)
{
    if (w == TRN_WIRE_FP32) {
        memcpy(out, x, (size_t)n * 4);
        return;
    }
    uint16_t *o = out;
    if (w == TRN_WIRE_FP16)
        for (long i = 0; i < n; i++)
            o[i] = trn_f2h(x[i]);
    else
        for (long i = 0; i < n; i++)
            o[i] = trn_f2bf(x[i]);
}

/* add = 1: x += decoded; else x = decoded */
static void s_decode(trn_wire w, const void *in, long n, float *x, int add)
{
    if (w == TRN_WIRE_FP32) {
        const float *f = in;
        if (add)
            for (long i = 0; i < n; i++)
                x[i] += f[i];
        else
            memcpy(x, in, (size_t)n * 4);
        return;
    }
    const uint16_t *h = in;
    for (long i = 0; i < n; i++) {
        float v = w == TRN_WIRE_FP16 ? trn_h2f(h[i]) : trn_bf2f(h[i]);
        x[i] = add ? x[i] + v : v;
    }
}

/* Rounds x to the wire format in place (owners before the all-gather). */
static void s_round_wire(trn_wire w, float *x, long n)
{
    if (w == TRN_WIRE_FP16)
        for (long i = 0; i < n; i++)
            x[i] = trn_h2f(trn_f2h(x[i]));
    else if (w == TRN_WIRE_BF16)
        for (long i = 0; i < n; i++)
            x[i] = trn_bf2f(trn_f2bf(x[i]));
}

/* ---- scratch and point-to-point ------------------------------------------ */

static int s_reserve(void **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    void *q = realloc(*p, need);
    if (!q)
        return -1;
    *p = q;
    *cap = need;
    return 0;
}

static int s_sendrecv(trn_comm *c, const void *sb, size_t sn, int dst, void *rb,
                      size_t rn, int src)
{
    if (dst >= 0)
        c->bytes_out += sn;
    return c->ops->sendrecv(c->self, sb, sn, dst, rb, rn, src);
}

/* Exchanges segmented buffers: the backend's exchange where it has one,
   else one sendrecv per segment (see trn_comm_ops.exchange). */
static int s_exchange(trn_comm *c, const void *sb, size_t sn, int dst, void *rb,
                      size_t rn, int src, size_t seg, long nseg, trn_seg_fn done,
                      void *arg)
{
    if (dst >= 0)
        c->bytes_out += sn;
    if (c->ops->exchange)
        return c->ops->exchange(c->self, sb, sn, dst, rb, rn, src, seg, nseg, done, arg);
    for (long k = 0; k < nseg; k++) {
        size_t so = (size_t)k * seg, ro = so;
        size_t sl = so < sn ? (sn - so < seg ? sn - so : seg) : 0;
        size_t rl = ro < rn ? (rn - ro < seg ? rn - ro : seg) : 0;
        if (c->ops->sendrecv(c->self, (const char *)sb + (so < sn ? so : 0), sl, dst,
                             (char *)rb + (ro < rn ? ro : 0), rl, src) < 0)
            return -1;
        if (done && rl && src >= 0)
            done(arg, ro, rl);
    }
    return 0;
}

void trn_comm_set_patient(trn_comm *c, int patient)
{
    if (c && c->ops->set_patient)
        c->ops->set_patient(c->self, patient);
}

/* ---- ring ------------------------------------------------------------------ */

/* x += y, both n floats, not overlapping (restrict lets the compiler
   vectorise it; one clone per vector width, picked at load time: AVX-512
   and AVX2 clones measured 5-10 % more ring busbw than SSE2 alone from
   1 MB up on this machine). */
__attribute__((target_clones("avx512f", "avx2", "default"))) static void
s_add(float *restrict x, const float *restrict y, long n)
{
    for (long i = 0; i < n; i++)
        x[i] += y[i];
}

/* Where received segments go: decoded from the wire format into dst
   (added when add). */
typedef struct {
    trn_wire w;
    const char *rbuf; /* the receive buffer the offsets refer to */
    float *dst;
    int add;
} s_sink;

static void s_sink_seg(void *arg, size_t off, size_t len)
{
    const s_sink *k = arg;
    size_t ws = s_wire_size(k->w);
    float *x = k->dst + off / ws;
    long n = (long)(len / ws);
    if (k->w == TRN_WIRE_FP32 && k->add)
        s_add(x, (const float *)(const void *)(k->rbuf + off), n);
    else
        s_decode(k->w, k->rbuf + off, n, x, k->add);
}

/* Floats per segment (64 MB in fp32): chunks up to that size go as one
   message. OpenMPI's shared-memory transport moves a large message with
   one copy by the receiver (CMA), so fewer, larger messages win: with
   256 KB segments the 2-rank ring measured 0.6-0.8x of MPI_Allreduce; with
   4 MB segments, a 16 MB all-reduce on 2 ranks (three segments of 2.7 MB
   per chunk) 0.75-0.83x and 64 MB 1.08-1.16x; with whole chunks 0.99-1.04x
   and 1.47x (SCHED_FIFO runs, so other jobs stayed out). Segments still
   bound the staging of backends that have no exchange of their own. */
#define S_SEGLEN (16L * 1024 * 1024)

/* Segment length (floats) and count for chunks of at most maxlen floats:
   the same on every rank of the group. */
static void s_segs(const trn_comm *c, long maxlen, long *seglen, long *nseg)
{
    long sl = c->seglen > 0 ? c->seglen : S_SEGLEN;
    *nseg = (maxlen + sl - 1) / sl;
    if (*nseg < 1)
        *nseg = 1;
    *seglen = (maxlen + *nseg - 1) / *nseg;
}

/* Each step of the ring is one exchange with the neighbours: the chunk to
   send goes out whole (fp32 straight from buf), the chunk received arrives
   in segments that are reduced (reduce-scatter) or decoded into place
   (all-gather) as they come, so the adding follows the copying. With 2
   ranks this is the classic halving exchange: each rank sends the half the
   other reduces, then the reduced halves cross. */
int trn_comm_ring(trn_comm *c, const int *group, int gn, float *buf, long n, trn_wire w)
{
    if (gn <= 1 || n <= 0)
        return 0;
    int right, left, me = trn_ring_place(group, gn, c->rank, &right, &left);
    if (me < 0)
        return -1;
    size_t ws = s_wire_size(w);
    long maxlen = (n + gn - 1) / gn, seglen, nseg; /* the largest chunk */
    s_segs(c, maxlen, &seglen, &nseg);
    if (s_reserve(&c->sbuf, &c->scap, (size_t)maxlen * ws) < 0 ||
        s_reserve(&c->rbuf, &c->rcap, (size_t)maxlen * ws) < 0)
        return -1;
    /* reduce-scatter */
    for (int s = 0; s < gn - 1; s++) {
        trn_ring_move m = trn_ring_move_at(n, gn, me, 0, s);
        long co = m.soff, cl = m.slen, ro = m.roff, rl = m.rlen;
        const void *sp = buf + co; /* fp32 goes out as it is */
        if (w != TRN_WIRE_FP32) {
            s_encode(w, buf + co, cl, c->sbuf);
            sp = c->sbuf;
        }
        s_sink k = {w, c->rbuf, buf + ro, 1};
        if (s_exchange(c, sp, (size_t)cl * ws, right, c->rbuf, (size_t)rl * ws, left,
                       (size_t)seglen * ws, nseg, s_sink_seg, &k) < 0)
            return -1;
    }
    /* this rank owns a chunk now: round it as the others will see it */
    long oo, ol;
    trn_ring_chunk(n, gn, trn_ring_owned(gn, me), &oo, &ol);
    s_round_wire(w, buf + oo, ol);
    /* all-gather */
    for (int s = 0; s < gn - 1; s++) {
        trn_ring_move m = trn_ring_move_at(n, gn, me, 1, s);
        long co = m.soff, cl = m.slen, ro = m.roff, rl = m.rlen;
        if (w == TRN_WIRE_FP32) { /* straight into place, one message */
            if (s_exchange(c, buf + co, (size_t)cl * 4, right, buf + ro, (size_t)rl * 4,
                           left, (size_t)maxlen * 4, 1, NULL, NULL) < 0)
                return -1;
            continue;
        }
        s_encode(w, buf + co, cl, c->sbuf);
        s_sink k = {w, c->rbuf, buf + ro, 0};
        if (s_exchange(c, c->sbuf, (size_t)cl * ws, right, c->rbuf, (size_t)rl * ws, left,
                       (size_t)seglen * ws, nseg, s_sink_seg, &k) < 0)
            return -1;
    }
    return 0;
}

/* ---- hierarchical ------------------------------------------------------------ */

/* What goes out for buf[0..n) (`bytes` on the wire): buf itself in fp32,
   else its encoding in c->sbuf. NULL when c->sbuf cannot grow. */
static const void *s_outgoing(trn_comm *c, trn_wire w, const float *buf, long n,
                              size_t bytes)
{
    if (w == TRN_WIRE_FP32)
        return buf;
    if (s_reserve(&c->sbuf, &c->scap, bytes) < 0)
        return NULL;
    s_encode(w, buf, n, c->sbuf);
    return c->sbuf;
}

int trn_comm_hier(trn_comm *c, float *buf, long n, trn_wire w)
{
    if (c->size <= 1 || n <= 0)
        return 0;
    if (!c->local && trn_comm_set_nodes(c, 0) < 0)
        return -1;
    size_t ws = s_wire_size(w), bytes = (size_t)n * ws;
    long seglen, nseg;
    s_segs(c, n, &seglen, &nseg);
    int leader = c->local[0];
    if (c->rank != leader) {
        /* send my part to the leader (fp32 straight from buf), then receive
           the result */
        const void *sp = s_outgoing(c, w, buf, n, bytes);
        if (!sp)
            return -1;
        if (s_exchange(c, sp, bytes, leader, NULL, 0, -1, (size_t)seglen * ws, nseg, NULL,
                       NULL) < 0)
            return -1;
        if (w == TRN_WIRE_FP32)
            return s_sendrecv(c, NULL, 0, -1, buf, bytes, leader);
        if (s_reserve(&c->rbuf, &c->rcap, bytes) < 0 ||
            s_sendrecv(c, NULL, 0, -1, c->rbuf, bytes, leader) < 0)
            return -1;
        s_decode(w, c->rbuf, n, buf, 0);
        return 0;
    }
    /* leader: reduce the node's members in rank order, each added segment
       by segment as it arrives */
    for (int i = 1; i < c->nlocal; i++) {
        if (s_reserve(&c->rbuf, &c->rcap, bytes) < 0)
            return -1;
        s_sink k = {w, c->rbuf, buf, 1};
        if (s_exchange(c, NULL, 0, -1, c->rbuf, bytes, c->local[i], (size_t)seglen * ws,
                       nseg, s_sink_seg, &k) < 0)
            return -1;
    }
    if (trn_comm_ring(c, c->leaders, c->nleaders, buf, n, w) < 0)
        return -1;
    if (c->nlocal <= 1)
        return 0;
    s_round_wire(w, buf, n);
    const void *sp = s_outgoing(c, w, buf, n, bytes);
    if (!sp)
        return -1;
    for (int i = 1; i < c->nlocal; i++)
        if (s_sendrecv(c, sp, bytes, c->local[i], NULL, 0, -1) < 0)
            return -1;
    return 0;
}

/* ---- top-k --------------------------------------------------------------- */

static int s_cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* k-th largest of a (n values, destroyed), by quickselect. */
static float s_kth_largest(float *a, long n, long k)
{
    long lo = 0, hi = n - 1, want = k - 1;
    while (hi - lo > 16) {
        float p = a[lo + (hi - lo) / 2];
        long i = lo, j = hi;
        while (i <= j) {
            while (a[i] > p)
                i++;
            while (a[j] < p)
                j--;
            if (i <= j) {
                float t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return a[want];
    }
    qsort(a + lo, (size_t)(hi - lo + 1), sizeof(float), s_cmp_desc);
    return a[want];
}

void trn_topk_select(const float *v, long n, long k, int32_t *idx)
{
    if (k >= n) {
        for (long i = 0; i < n; i++)
            idx[i] = (int32_t)i;
        return;
    }
    float *a = malloc((size_t)n * sizeof(float));
    if (!a) { /* no memory: the first k (error feedback keeps the rest) */
        for (long i = 0; i < k; i++)
            idx[i] = (int32_t)i;
        return;
    }
    for (long i = 0; i < n; i++) /* NaN sorts first: an overflow is always sent */
        a[i] = isnan(v[i]) ? INFINITY : fabsf(v[i]);
    float thr = s_kth_largest(a, n, k);
    long above = 0;
    for (long i = 0; i < n; i++) {
        float x = isnan(v[i]) ? INFINITY : fabsf(v[i]);
        above += x > thr;
    }
    long ties = k - above, m = 0;
    for (long i = 0; i < n && m < k; i++) {
        float x = isnan(v[i]) ? INFINITY : fabsf(v[i]);
        if (x > thr || (x == thr && ties-- > 0))
            idx[m++] = (int32_t)i;
    }
    free(a);
}

/* Sends the k largest |residual| to every rank (sparse ring all-gather),
   zeroes them in residual (and in velocity when given: momentum factor
   masking) and writes the rank-ordered sum into buf. */
static int s_topk_send(trn_comm *c, float *buf, float *residual, float *velocity, long n,
                       long k)
{
    if (k > n)
        k = n;
    if (k < 1)
        k = 1;
    size_t rec = (size_t)k * 8; /* k int32 indices then k floats */
    int p = c->size;
    if (s_reserve(&c->rbuf, &c->rcap, rec * (size_t)p) < 0 ||
        s_reserve(&c->sbuf, &c->scap, rec) < 0)
        return -1;
    char *all = c->rbuf;
    char *mine = all + rec * (size_t)c->rank;
    int32_t *idx = (int32_t *)mine;
    float *val = (float *)(mine + (size_t)k * 4);
    trn_topk_select(residual, n, k, idx);
    for (long j = 0; j < k; j++) {
        val[j] = residual[idx[j]];
        residual[idx[j]] = 0;
        if (velocity)
            velocity[idx[j]] = 0;
    }
    if (p > 1) { /* ring all-gather of the fixed-size records */
        int right, left, me = trn_ring_place(NULL, p, c->rank, &right, &left);
        for (int s = 0; s < p - 1; s++) {
            int sb, rb; /* the reduce-scatter's order: record sb goes, rb comes */
            trn_ring_step(p, me, 0, s, &sb, &rb);
            /* send from rbuf, receive into sbuf then move (no aliasing) */
            if (s_sendrecv(c, all + rec * (size_t)sb, rec, right, c->sbuf, rec, left) < 0)
                return -1;
            memcpy(all + rec * (size_t)rb, c->sbuf, rec);
        }
    }
    memset(buf, 0, (size_t)n * sizeof(float));
    for (int r = 0; r < p; r++) {
        const int32_t *ri = (const int32_t *)(all + rec * (size_t)r);
        const float *rv = (const float *)(all + rec * (size_t)r + (size_t)k * 4);
        for (long j = 0; j < k; j++)
            buf[ri[j]] += rv[j];
    }
    return 0;
}

int trn_comm_topk(trn_comm *c, float *buf, float *residual, long n, long k)
{
    if (n <= 0)
        return 0;
    for (long i = 0; i < n; i++)
        residual[i] += buf[i];
    return s_topk_send(c, buf, residual, NULL, n, k);
}

int trn_comm_topk_dgc(trn_comm *c, float *buf, float *residual, float *velocity, long n,
                      long k, float momentum, int nesterov)
{
    if (n <= 0)
        return 0;
    if (nesterov)
        for (long i = 0; i < n; i++) {
            float u = momentum * (velocity[i] + buf[i]);
            velocity[i] = u;
            residual[i] += u + buf[i];
        }
    else
        for (long i = 0; i < n; i++) {
            float u = momentum * velocity[i] + buf[i];
            velocity[i] = u;
            residual[i] += u;
        }
    return s_topk_send(c, buf, residual, velocity, n, k);
}

/* ---- groups, dispatch --------------------------------------------------------- */

static int s_cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int trn_comm_set_nodes(trn_comm *c, int ranks_per_node)
{
    if (ranks_per_node > 0)
        for (int r = 0; r < c->size; r++)
            c->node[r] = r / ranks_per_node;
    free(c->local);
    free(c->leaders);
    c->local = malloc((size_t)c->size * sizeof(int));
    c->leaders = malloc((size_t)c->size * sizeof(int));
    if (!c->local || !c->leaders)
        return -1;
    c->nlocal = c->nleaders = 0;
    int mynode = c->node[c->rank];
    for (int r = 0; r < c->size; r++) {
        if (c->node[r] == mynode)
            c->local[c->nlocal++] = r; /* ascending: leader (lowest) first */
        int first = 1;
        for (int q = 0; q < r; q++)
            if (c->node[q] == c->node[r])
                first = 0;
        if (first)
            c->leaders[c->nleaders++] = r;
    }
    qsort(c->leaders, (size_t)c->nleaders, sizeof(int), s_cmp_int);
    return 0;
}

int trn_comm_allreduce(trn_comm *c, float *buf, long n, trn_ar_algo a, trn_wire w)
{
    if (n <= 0 || (c->size <= 1 && a != TRN_AR_NATIVE)) /* native: the backend's path */
        return 0;
    switch (a) {
    case TRN_AR_NATIVE:
        return c->ops->allreduce_f(c->self, buf, n);
    case TRN_AR_HIER:
        return trn_comm_hier(c, buf, n, w);
    case TRN_AR_RING:
        break;
    }
    int *g = malloc((size_t)c->size * sizeof(int));
    if (!g)
        return -1;
    for (int i = 0; i < c->size; i++)
        g[i] = i;
    int rc = trn_comm_ring(c, g, c->size, buf, n, w);
    free(g);
    return rc;
}

int trn_comm_mean(trn_comm *c, float *buf, long n)
{
    if (trn_comm_allreduce(c, buf, n, TRN_AR_RING, TRN_WIRE_FP32) < 0)
        return -1;
    float inv = 1.0f / (float)c->size;
    for (long j = 0; j < n; j++)
        buf[j] *= inv;
    return 0;
}

int trn_comm_gather(trn_comm *c, const void *sbuf, size_t bytes, void *rbuf)
{
    if (c->rank != 0)
        return c->ops->sendrecv(c->self, sbuf, bytes, 0, NULL, 0, -1);
    memcpy(rbuf, sbuf, bytes);
    for (int r = 1; r < c->size; r++)
        if (c->ops->sendrecv(c->self, NULL, 0, -1, (char *)rbuf + bytes * (size_t)r,
                             bytes, r) < 0)
            return -1;
    return 0;
}

int trn_comm_bcast(trn_comm *c, void *buf, size_t bytes, int root)
{
    return c->size <= 1 ? 0 : c->ops->bcast(c->self, buf, bytes, root);
}

int trn_comm_sum_d(trn_comm *c, double *buf, long n)
{
    return c->size <= 1 ? 0 : c->ops->allreduce_d(c->self, buf, n);
}

int trn_comm_barrier(trn_comm *c)
{
    return c->size <= 1 ? 0 : c->ops->barrier(c->self);
}

/* The index of s in names[0..n), or -1. */
static int s_name_index(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

int trn_ar_algo_from_name(const char *s)
{
    static const char *const names[] = {
        [TRN_AR_RING] = "ring", [TRN_AR_HIER] = "hier", [TRN_AR_NATIVE] = "native"};
    return s_name_index(s, names, 3);
}

int trn_wire_from_name(const char *s)
{
    static const char *const names[] = {
        [TRN_WIRE_FP32] = "fp32", [TRN_WIRE_FP16] = "fp16", [TRN_WIRE_BF16] = "bf16"};
    return s_name_index(s, names, 3);
}

trn_comm *trn_comm_new(const char *name, trn_comm_ctor nccl_new, char *err)
{
    if (!strcmp(name, "local"))
        return trn_comm_local_new(err);
    if (!strcmp(name, "mpi"))
        return trn_comm_mpi_new(err);
    if (!strcmp(name, "nccl")) {
        if (!nccl_new) {
            snprintf(err, TRN_ERRLEN,
                     "--comm nccl: this binary is built without NCCL (use "
                     "jizhi-train-cuda, built by `make cuda` where nccl.h exists)");
            return NULL;
        }
        return nccl_new(err);
    }
    if (!strcmp(name, "auto"))
        return trn_comm_under_mpi() ? trn_comm_mpi_new(err) : trn_comm_local_new(err);
    snprintf(err, TRN_ERRLEN, "--comm: unknown backend \"%s\"", name);
    return NULL;
}

void trn_comm_destroy(trn_comm **cp)
{
    if (!cp || !*cp)
        return;
    trn_comm *c = *cp;
    if (c->ops && c->ops->destroy)
        c->ops->destroy(c->self);
    free(c->node);
    free(c->local);
    free(c->leaders);
    free(c->sbuf);
    free(c->rbuf);
    free(c);
    *cp = NULL;
}

int trn_comm_under_mpi(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}
