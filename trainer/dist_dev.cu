/*  dist_dev.cu - the gradient exchange of the CUDA backend's data-parallel
    step: fusion buckets in device memory, events between the compute and
    the communication stream, the ring on ncclSend/ncclRecv (see
    dist_dev.h). Built by `make cuda` into jizhi-train-cuda; the device
    path needs NCCL (TRN_WITH_NCCL), the host path only the comm layer.
*/
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/cuda_check.cuh"
#include "trainer/dev_elem.cuh" /* C++ templates: outside extern "C" */

extern "C" {
#include "trainer/devplan.h"
#include "trainer/dist_dev.h"
#ifdef TRN_WITH_NCCL
#include "trainer/comm_nccl.h"
#endif
}

/* auto fusion: the layout of the timed steps (and of the host path, which
   measures nothing), the sizes of the measured curve (floats) and the
   steps timed (the first a warm-up) */
#define S_AUTO_BYTES (4L << 20)
#define S_CURVE_N 6
#define S_TUNE_STEPS 3
static const long s_curve[S_CURVE_N] = {1024, 4096, 16384, 65536, 262144, 1048576};

struct trn_devdist {
    trn_comm *comm; /* borrowed */
    trn_dist_opts o;
    trn_grad_path path;
    int np, nstages, nb;
    int next;    /* first bucket not yet launched this step */
    long ntotal; /* floats over all buckets */
    long fusion_bytes;
    long *pn;   /* floats per param */
    long *poff; /* param -> offset in dbuf */
    trn_devbucket *b;
    float *dbuf;         /* the buckets (device) */
    void *dsend, *drecv; /* ring: wire scratch (device) */
    float *hbuf;         /* host path: pinned copy of dbuf */
    cudaStream_t cs;     /* compute (the backend's) */
    cudaStream_t ms;     /* communication (NCCL's) */
    cudaEvent_t *ev;     /* one per stage, recorded on cs */
    cudaEvent_t done;    /* recorded on ms after the last bucket */
    void **g;            /* this step's gradients (device) */
    int *ring_all;       /* 0 .. size-1: the flat ring's group */
    int *stage;          /* param -> backward stage */
    /* auto fusion (device path, several ranks): the curve's fit, then the
       first S_TUNE_STEPS steps timed with events (tev0 at the start, tev[s]
       after stage s, on the compute stream); the choice at the next begin */
    int tuning, tune_step, verbose;
    double alpha, beta;
    cudaEvent_t tev0, *tev;
    double *stage_s; /* fastest end of each stage over the timed steps (s) */
    trn_precision prec;
    float unscale;
};

/* ---- kernels ------------------------------------------------------------------ */

/* out = g * f in fp32 (dist.c's s_pack: the same product) */
template <typename T> __global__ void k_pack(const T *g, float *out, long n, float f)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = to_f<T>(g[i]) * f;
}

__global__ void k_add(float *__restrict__ x, const float *__restrict__ y, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += y[i];
}

template <typename W> __global__ void k_encode(const float *x, W *y, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = from_f<W>(x[i]);
}

/* add: x += decoded (comm.c adds x[i] + v in this order), else x = decoded */
template <typename W> __global__ void k_decode(const W *y, float *x, long n, int add)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = to_f<W>(y[i]);
        x[i] = add ? x[i] + v : v;
    }
}

template <typename W> __global__ void k_round(float *x, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = to_f<W>(from_f<W>(x[i]));
}

static unsigned s_blocks(long n)
{
    return (unsigned)((n + 255) / 256);
}

/* ---- the ring on the device ------------------------------------------------------ */

#ifdef TRN_WITH_NCCL
static void s_encode(trn_wire w, const float *x, void *y, long n, cudaStream_t st)
{
    if (w == TRN_WIRE_FP16)
        k_encode<__half><<<s_blocks(n), 256, 0, st>>>(x, (__half *)y, n);
    else
        k_encode<__nv_bfloat16><<<s_blocks(n), 256, 0, st>>>(x, (__nv_bfloat16 *)y, n);
}

static void s_round(trn_wire w, float *x, long n, cudaStream_t st)
{
    if (w == TRN_WIRE_FP16)
        k_round<__half><<<s_blocks(n), 256, 0, st>>>(x, n);
    else if (w == TRN_WIRE_BF16)
        k_round<__nv_bfloat16><<<s_blocks(n), 256, 0, st>>>(x, n);
}

static void s_decode(trn_wire w, const void *y, float *x, long n, int add,
                     cudaStream_t st)
{
    if (w == TRN_WIRE_FP16)
        k_decode<__half><<<s_blocks(n), 256, 0, st>>>((const __half *)y, x, n, add);
    else
        k_decode<__nv_bfloat16>
            <<<s_blocks(n), 256, 0, st>>>((const __nv_bfloat16 *)y, x, n, add);
}

/* comm.c's trn_comm_ring over the ranks group[0..gn), on device memory:
   the same neighbours, chunks, steps, additions and wire roundings (the one
   schedule of ring.h). */
static int s_ring(trn_devdist *d, const int *group, int gn, float *buf, long n)
{
    trn_comm *c = d->comm;
    if (gn <= 1 || n <= 0)
        return 0;
    int p = gn, right, left, me = trn_ring_place(group, gn, c->rank, &right, &left);
    if (me < 0)
        return -1;
    trn_wire w = d->o.wire;
    size_t ws = w == TRN_WIRE_FP32 ? 4 : 2;
    cudaStream_t st = d->ms;
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1 && w != TRN_WIRE_FP32) { /* the owner rounds its chunk */
            long oo, ol;
            trn_ring_chunk(n, p, trn_ring_owned(p, me), &oo, &ol);
            if (ol > 0)
                s_round(w, buf + oo, ol, st);
        }
        for (int s = 0; s < p - 1; s++) {
            trn_ring_move m = trn_ring_move_at(n, p, me, phase, s);
            long co = m.soff, cl = m.slen, ro = m.roff, rl = m.rlen;
            const void *sp = buf + co;
            void *rp = phase == 1 && w == TRN_WIRE_FP32 ? (void *)(buf + ro) : d->drecv;
            if (w != TRN_WIRE_FP32 && cl > 0) {
                s_encode(w, buf + co, d->dsend, cl, st);
                sp = d->dsend;
            }
            /* a side of length 0 is skipped on both ends (same chunk) */
            if (trn_nccl_dev_sendrecv(c, sp, (size_t)cl * ws, cl > 0 ? right : -1, rp,
                                      (size_t)rl * ws, rl > 0 ? left : -1) < 0)
                return -1;
            c->bytes_out += (uint64_t)cl * ws;
            if (rl <= 0)
                continue;
            if (w == TRN_WIRE_FP32) {
                if (phase == 0)
                    k_add<<<s_blocks(rl), 256, 0, st>>>(buf + ro, (const float *)d->drecv,
                                                        rl);
            } else {
                s_decode(w, d->drecv, buf + ro, rl, phase == 0, st);
            }
        }
    }
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

/* comm.c's trn_comm_hier on device memory: the node's members send their
   buckets to the leader, which adds them in rank order; the ring across
   the leaders; the leader rounds to the wire format and sends the result
   to each member. */
static int s_hier(trn_devdist *d, float *buf, long n)
{
    trn_comm *c = d->comm;
    if (c->size <= 1 || n <= 0)
        return 0;
    trn_wire w = d->o.wire;
    size_t ws = w == TRN_WIRE_FP32 ? 4 : 2, bytes = (size_t)n * ws;
    cudaStream_t st = d->ms;
    int leader = c->local[0];
    if (c->rank != leader) {
        const void *sp = buf;
        if (w != TRN_WIRE_FP32) {
            s_encode(w, buf, d->dsend, n, st);
            sp = d->dsend;
        }
        if (trn_nccl_dev_sendrecv(c, sp, bytes, leader, NULL, 0, -1) < 0)
            return -1;
        c->bytes_out += bytes;
        void *rp = w == TRN_WIRE_FP32 ? (void *)buf : d->drecv;
        if (trn_nccl_dev_sendrecv(c, NULL, 0, -1, rp, bytes, leader) < 0)
            return -1;
        if (w != TRN_WIRE_FP32)
            s_decode(w, d->drecv, buf, n, 0, st);
        return cudaGetLastError() == cudaSuccess ? 0 : -1;
    }
    for (int i = 1; i < c->nlocal; i++) {
        if (trn_nccl_dev_sendrecv(c, NULL, 0, -1, d->drecv, bytes, c->local[i]) < 0)
            return -1;
        if (w == TRN_WIRE_FP32)
            k_add<<<s_blocks(n), 256, 0, st>>>(buf, (const float *)d->drecv, n);
        else
            s_decode(w, d->drecv, buf, n, 1, st);
    }
    if (s_ring(d, c->leaders, c->nleaders, buf, n) < 0)
        return -1;
    if (c->nlocal <= 1)
        return 0;
    const void *sp = buf;
    if (w != TRN_WIRE_FP32) {
        s_round(w, buf, n, st);
        s_encode(w, buf, d->dsend, n, st);
        sp = d->dsend;
    }
    for (int i = 1; i < c->nlocal; i++) {
        if (trn_nccl_dev_sendrecv(c, sp, bytes, c->local[i], NULL, 0, -1) < 0)
            return -1;
        c->bytes_out += bytes;
    }
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
#endif

/* ---- buckets --------------------------------------------------------------------- */

/* Packs bucket k's params into dbuf on stream st: unscaled, fp32. */
static void s_pack(trn_devdist *d, int k, cudaStream_t st)
{
    const trn_devbucket *b = &d->b[k];
    for (int i = b->first; i >= b->last; i--) {
        long n = d->pn[i];
        float *out = d->dbuf + d->poff[i];
        if (n <= 0)
            continue;
        if (d->prec == TRN_BF16)
            k_pack<__nv_bfloat16><<<s_blocks(n), 256, 0, st>>>(
                (const __nv_bfloat16 *)d->g[i], out, n, d->unscale);
        else if (d->prec == TRN_FP16)
            k_pack<__half><<<s_blocks(n), 256, 0, st>>>((const __half *)d->g[i], out, n,
                                                        d->unscale);
        else
            k_pack<float>
                <<<s_blocks(n), 256, 0, st>>>((const float *)d->g[i], out, n, d->unscale);
    }
}

/* Device path: the sum over ranks of n floats at buf, enqueued on the
   communication stream. */
static int s_reduce(trn_devdist *d, float *buf, long n)
{
#ifdef TRN_WITH_NCCL
    if (d->o.algo == TRN_AR_NATIVE)
        return trn_nccl_dev_allreduce(d->comm, buf, n);
    if (d->o.algo == TRN_AR_HIER)
        return s_hier(d, buf, n);
    return d->ring_all ? s_ring(d, d->ring_all, d->comm->size, buf, n) : -1;
#else
    (void)d, (void)buf, (void)n;
    return -1;
#endif
}

/* Device path: bucket k after the event `after`: packed and reduced on the
   communication stream. */
static int s_launch(trn_devdist *d, int k, cudaEvent_t after)
{
    CUDA_CHECK(cudaStreamWaitEvent(d->ms, after, 0));
    s_pack(d, k, d->ms);
    return s_reduce(d, d->dbuf + d->b[k].off, d->b[k].n);
}

/* Cuts the buckets for threshold thr and places the params in dbuf. */
static void s_plan(trn_devdist *d, long thr, int overlap)
{
    d->fusion_bytes = thr;
    d->nb = trn_devplan_buckets(d->np, d->pn, d->stage, d->nstages, thr, overlap, d->b);
    for (int k = 0; k < d->nb; k++)
        for (long i = d->b[k].first, off = d->b[k].off; i >= d->b[k].last; i--) {
            d->poff[i] = off;
            off += d->pn[i];
        }
}

/* Auto fusion: times the all-reduce of the chosen algorithm on the device
   at S_CURVE_N sizes (the fastest of a few runs each, CUDA events on the
   communication stream) and fits alpha, beta; rank 0's fit is used by all.
   Collective. 0 or -1. */
static int s_measure(trn_devdist *d)
{
    float *buf = NULL;
    long big = s_curve[S_CURVE_N - 1];
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaMalloc(&buf, (size_t)big * sizeof(float)));
    CUDA_CHECK(cudaMemsetAsync(buf, 0, (size_t)big * sizeof(float), d->ms));
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    uint64_t sent = d->comm->bytes_out;
    double t[S_CURVE_N];
    int rc = 0;
    for (int k = 0; k < S_CURVE_N && rc == 0; k++) {
        int reps = k < 3 ? 10 : 4;
        rc = s_reduce(d, buf, s_curve[k]); /* warm */
        t[k] = 1e30;
        for (int r = 0; r < reps && rc == 0; r++) {
            CUDA_CHECK(cudaEventRecord(e0, d->ms));
            rc = s_reduce(d, buf, s_curve[k]);
            CUDA_CHECK(cudaEventRecord(e1, d->ms));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            t[k] = ms * 1e-3 < t[k] ? ms * 1e-3 : t[k];
        }
    }
    CUDA_CHECK(cudaStreamSynchronize(d->ms));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(buf);
    d->comm->bytes_out = sent; /* measuring is not training traffic */
    if (rc < 0)
        return -1;
    double fit[2];
    trn_devplan_fit(s_curve, t, S_CURVE_N, &fit[0], &fit[1]);
    if (trn_comm_bcast(d->comm, fit, sizeof fit, 0) < 0)
        return -1;
    d->alpha = fit[0];
    d->beta = fit[1];
    return 0;
}

/* Auto fusion, after the timed steps: rank 0 simulates every layout with
   the fit and the measured stage ends (trn_fusion_choose) and every rank
   takes its pick. Collective. 0 or -1. */
static int s_tune_decide(trn_devdist *d)
{
    double *ready = (double *)calloc((size_t)d->np, sizeof(double));
    if (!ready)
        return -1;
    double total = trn_devplan_ready(d->np, d->stage, d->nstages, d->stage_s, ready);
    double pick[3] = {0, 0, 0};
    pick[0] = (double)trn_fusion_choose(d->np, d->pn, ready, total, d->alpha, d->beta,
                                        d->o.overlap, &pick[1], &pick[2]);
    free(ready);
    if (trn_comm_bcast(d->comm, pick, sizeof pick, 0) < 0)
        return -1;
    s_plan(d, (long)pick[0], d->o.overlap);
    d->tuning = 0;
    if (d->verbose && d->comm->rank == 0)
        fprintf(stderr,
                "jizhi-train: fusion auto (device): alpha %.1f us, %.2f GB/s, "
                "forward+backward %.3f ms: %ld KiB, %d buckets, exposed communication "
                "predicted %.3f ms/step (no fusion %.3f ms)\n",
                d->alpha * 1e6, 1e-9 / d->beta, total * 1e3, d->fusion_bytes / 1024,
                d->nb, pick[1] * 1e3, pick[2] * 1e3);
    return 0;
}

trn_grad_path trn_devdist_auto_path(trn_comm *c, const trn_dist_opts *o)
{
#ifdef TRN_WITH_NCCL
    if (trn_nccl_is(c))
        return TRN_GRAD_DEVICE;
#else
    (void)c, (void)o;
#endif
    return TRN_GRAD_HOST;
}

int trn_devdist_check(trn_comm *c, const trn_dist_opts *o, trn_grad_path path, char *err)
{
    if (o->topk > 0) {
        snprintf(
            err, TRN_ERRLEN,
            "--topk with --backend cuda: top-k compression runs on the CPU path only "
            "(drop --backend cuda or --topk)");
        return -1;
    }
    if (path == TRN_GRAD_DEVICE) {
#ifdef TRN_WITH_NCCL
        if (!trn_nccl_is(c)) {
            snprintf(err, TRN_ERRLEN,
                     "--grad-path device needs --comm nccl (the comm is %s); use "
                     "--grad-path host or auto",
                     c->ops->name);
            return -1;
        }
#else
        snprintf(err, TRN_ERRLEN,
                 "--grad-path device: this jizhi-train-cuda is built without NCCL");
        return -1;
#endif
    }
    return 0;
}

trn_devdist *trn_devdist_new(trn_comm *c, int np, const long *pn, const int *stage,
                             int nstages, const trn_dist_opts *o, trn_grad_path path,
                             void *compute_stream, int verbose, char *err)
{
    if (trn_devdist_check(c, o, path, err) < 0)
        return NULL;
    if (np < 1 || nstages < 1) {
        snprintf(err, TRN_ERRLEN, "no parameters to exchange");
        return NULL;
    }
    trn_devdist *d = (trn_devdist *)calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    d->comm = c;
    d->o = *o;
    d->path = path;
    d->np = np;
    d->nstages = nstages;
    d->cs = (cudaStream_t)compute_stream;
    d->pn = (long *)calloc((size_t)np, sizeof(long));
    d->poff = (long *)calloc((size_t)np, sizeof(long));
    d->b = (trn_devbucket *)calloc((size_t)np, sizeof *d->b);
    d->g = (void **)calloc((size_t)np, sizeof(void *));
    d->ev = (cudaEvent_t *)calloc((size_t)nstages, sizeof(cudaEvent_t));
    d->tev = (cudaEvent_t *)calloc((size_t)nstages, sizeof(cudaEvent_t));
    d->stage = (int *)calloc((size_t)np, sizeof(int));
    d->stage_s = (double *)calloc((size_t)nstages, sizeof(double));
    d->verbose = verbose;
    if (!d->pn || !d->poff || !d->b || !d->g || !d->ev || !d->tev || !d->stage ||
        !d->stage_s) {
        trn_devdist_destroy(&d);
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    memcpy(d->pn, pn, (size_t)np * sizeof(long));
    memcpy(d->stage, stage, (size_t)np * sizeof(int));
    /* the host path reduces after the backward: its plan has no overlap */
    s_plan(d, o->fusion_bytes < 0 ? S_AUTO_BYTES : o->fusion_bytes,
           path == TRN_GRAD_DEVICE && o->overlap);
    d->tuning = path == TRN_GRAD_DEVICE && o->fusion_bytes < 0 && c->size > 1;
    long maxn = 0;
    for (int k = 0; k < d->nb; k++) {
        maxn = d->b[k].n > maxn ? d->b[k].n : maxn;
        d->ntotal += d->b[k].n;
    }
    if (d->tuning) /* any layout may follow, and the curve's sizes */
        maxn = d->ntotal > s_curve[S_CURVE_N - 1] ? d->ntotal : s_curve[S_CURVE_N - 1];
    CUDA_CHECK(
        cudaMalloc(&d->dbuf, (size_t)(d->ntotal > 0 ? d->ntotal : 1) * sizeof(float)));
    if (path == TRN_GRAD_HOST) {
        CUDA_CHECK(cudaMallocHost(&d->hbuf, (size_t)(d->ntotal > 0 ? d->ntotal : 1) *
                                                sizeof(float)));
    } else {
#ifdef TRN_WITH_NCCL
        d->ms = (cudaStream_t)trn_nccl_stream(c);
        /* scratch: a ring chunk, or a whole bucket for hier's in-node steps */
        size_t chunk =
            (size_t)(o->algo == TRN_AR_HIER ? maxn + 1
                                            : maxn / (c->size > 0 ? c->size : 1) + 1) *
            sizeof(float);
        d->ring_all = (int *)calloc((size_t)(c->size > 0 ? c->size : 1), sizeof(int));
        if (!d->ring_all ||
            (o->algo == TRN_AR_HIER && !c->local && trn_comm_set_nodes(c, 0) < 0)) {
            trn_devdist_destroy(&d);
            snprintf(err, TRN_ERRLEN, "out of memory");
            return NULL;
        }
        for (int r = 0; r < c->size; r++)
            d->ring_all[r] = r;
        CUDA_CHECK(cudaMalloc(&d->dsend, chunk));
        CUDA_CHECK(cudaMalloc(&d->drecv, chunk));
#endif
        for (int s = 0; s < nstages; s++)
            CUDA_CHECK(cudaEventCreateWithFlags(&d->ev[s], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&d->done, cudaEventDisableTiming));
    }
    if (d->tuning) {
        CUDA_CHECK(cudaEventCreate(&d->tev0));
        for (int s = 0; s < nstages; s++) {
            CUDA_CHECK(cudaEventCreate(&d->tev[s]));
            d->stage_s[s] = 1e30;
        }
        if (s_measure(d) < 0) {
            trn_devdist_destroy(&d);
            snprintf(err, TRN_ERRLEN, "fusion auto: measuring the all-reduce failed");
            return NULL;
        }
    }
    return d;
}

void trn_devdist_destroy(trn_devdist **dp)
{
    if (!dp || !*dp)
        return;
    trn_devdist *d = *dp;
    if (d->ms)
        cudaStreamSynchronize(d->ms);
    cudaFree(d->dbuf);
    cudaFree(d->dsend);
    cudaFree(d->drecv);
    if (d->hbuf)
        cudaFreeHost(d->hbuf);
    for (int s = 0; d->ev && s < d->nstages; s++)
        if (d->ev[s])
            cudaEventDestroy(d->ev[s]);
    for (int s = 0; d->tev && s < d->nstages; s++)
        if (d->tev[s])
            cudaEventDestroy(d->tev[s]);
    if (d->tev0)
        cudaEventDestroy(d->tev0);
    free(d->tev);
    free(d->stage);
    free(d->stage_s);
    if (d->done)
        cudaEventDestroy(d->done);
    free(d->ev);
    free(d->ring_all);
    free(d->pn);
    free(d->poff);
    free(d->b);
    free(d->g);
    free(d);
    *dp = NULL;
}

int trn_devdist_begin(trn_devdist *d, void *const *g, trn_precision prec, float unscale)
{
    memcpy(d->g, g, (size_t)d->np * sizeof(void *));
    d->prec = prec;
    d->unscale = unscale;
    d->next = 0;
    /* auto fusion: the timed steps are over, choose before this step's
       buckets (the previous step's readers of dbuf are ahead of them on the
       compute stream) */
    if (d->tuning && d->tune_step >= S_TUNE_STEPS && s_tune_decide(d) < 0)
        return -1;
    if (d->tuning)
        CUDA_CHECK(cudaEventRecord(d->tev0, d->cs));
    return 0;
}

int trn_devdist_stage(trn_devdist *d, int s)
{
    if (d->path != TRN_GRAD_DEVICE || s < 0 || s >= d->nstages)
        return 0;
    if (d->tuning)
        CUDA_CHECK(cudaEventRecord(d->tev[s], d->cs));
    if (d->next >= d->nb || d->b[d->next].launch != s)
        return 0; /* nothing starts after this stage: no event needed */
    CUDA_CHECK(cudaEventRecord(d->ev[s], d->cs));
    while (d->next < d->nb && d->b[d->next].launch == s)
        if (s_launch(d, d->next++, d->ev[s]) < 0)
            return -1;
    return 0;
}

int trn_devdist_finish(trn_devdist *d)
{
    if (d->path == TRN_GRAD_HOST) {
        for (int k = 0; k < d->nb; k++)
            s_pack(d, k, d->cs);
        size_t bytes = (size_t)d->ntotal * sizeof(float);
        CUDA_CHECK(
            cudaMemcpyAsync(d->hbuf, d->dbuf, bytes, cudaMemcpyDeviceToHost, d->cs));
        CUDA_CHECK(cudaStreamSynchronize(d->cs));
        int rc = 0;
        for (int k = 0; k < d->nb; k++) /* in bucket order on every rank */
            if (trn_comm_allreduce(d->comm, d->hbuf + d->b[k].off, d->b[k].n, d->o.algo,
                                   d->o.wire) < 0)
                rc = -1;
        CUDA_CHECK(
            cudaMemcpyAsync(d->dbuf, d->hbuf, bytes, cudaMemcpyHostToDevice, d->cs));
        return rc;
    }
    int rc = 0;
    if (d->next < d->nb) { /* stages not reported: after everything so far */
        int last = d->nstages - 1;
        CUDA_CHECK(cudaEventRecord(d->ev[last], d->cs));
        while (d->next < d->nb)
            if (s_launch(d, d->next++, d->ev[last]) < 0)
                rc = -1;
    }
    CUDA_CHECK(cudaEventRecord(d->done, d->ms));
    CUDA_CHECK(cudaStreamWaitEvent(d->cs, d->done, 0));
    if (d->tuning && d->tune_step < S_TUNE_STEPS) { /* the stage ends of this step */
        CUDA_CHECK(cudaEventSynchronize(d->tev[d->nstages - 1]));
        for (int s = 0; d->tune_step > 0 && s < d->nstages; s++) { /* step 0 warms up */
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, d->tev0, d->tev[s]));
            d->stage_s[s] = ms * 1e-3 < d->stage_s[s] ? ms * 1e-3 : d->stage_s[s];
        }
        d->tune_step++;
    }
    return rc;
}

int trn_devdist_tuning(const trn_devdist *d)
{
    return d->tuning;
}

float *trn_devdist_grad(trn_devdist *d, int i)
{
    return d->dbuf + d->poff[i];
}

trn_grad_path trn_devdist_path(const trn_devdist *d)
{
    return d->path;
}

int trn_devdist_nbuckets(const trn_devdist *d)
{
    return d->nb;
}

long trn_devdist_fusion_bytes(const trn_devdist *d)
{
    return d->fusion_bytes;
}

long trn_devdist_keep_fusion(const trn_devdist *d, long asked)
{
    if (d && asked < 0 && !d->tuning && d->path == TRN_GRAD_DEVICE && d->comm &&
        d->comm->size > 1)
        return d->fusion_bytes;
    return asked;
}
