/*  runtime.cc - cudaemu's CUDA runtime (tests/cudaemu/README.md): memory,
    streams, events, graphs and kernel launches on the CPU, so that the CUDA
    trainer's own code runs in tests where no GPU is. NOT A GPU.

    Memory: cudaMalloc and cudaMallocHost are malloc'd blocks kept in a
    registry; every copy, set, library call and kernel argument is checked
    against it (emu_need), so a host pointer given to the device or an
    access past an allocation ends the process with the reason.

    Streams are queues of closures. Nothing runs when enqueued: a stream
    runs its queue at a synchronisation point (cudaStreamSynchronize, an
    event's, a blocking copy, a copy back to pageable memory), and another
    stream's work runs only when a wait on one of its events needs it. Work
    on another stream is therefore as late as the waits allow, and host
    memory written by the device is stale until the host has waited: a
    missing wait shows as a wrong result, as it may on a GPU. A capturing
    stream records into its graph instead; a launch replays the records in
    order. Calls that a capture forbids (cudaMalloc, cudaFree, a blocking
    copy or set, a synchronisation) return cudaErrorStreamCaptureUnsupported
    and invalidate it, as CUDA does.

    Kernels: the blocks of a grid run one after another; a block's threads
    run as fibers (ucontext) that switch at __syncthreads and
    __shfl_down_sync, so the kernels' shared-memory reductions run as
    written. Thread 0 runs first; when it ends without a barrier, the other
    threads run as plain calls (a barrier then is divergent, an error).
    CUDAEMU_ORDER=reverse runs the blocks and each block's threads last to
    first instead: a result that depends on the order differs. A
    barrier that some threads of the block never reach, a shuffle in a
    partial warp, or threads waiting forever end the process.

    Environment: CUDAEMU_DEVICES (default 1), CUDAEMU_MEM_MB (the device's
    memory for cudaMemGetInfo, default 81920), CUDAEMU_STATS=1 prints the
    counts of launches, graph launches and copies at exit.
*/
#include "emu.h"

#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <setjmp.h>
#include <ucontext.h>

#include <deque>
#include <map>
#include <memory>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

/* ---- errors and counters ------------------------------------------------------- */

void emu_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cudaemu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(NULL);
    _Exit(3);
}

static struct {
    long launches, graph_launches, copies, graphs;
} g_stats;

static void s_print_stats(void)
{
    fprintf(stderr,
            "cudaemu: %ld kernel launches, %ld graphs captured, %ld graph launches, %ld "
            "copies\n",
            g_stats.launches, g_stats.graphs, g_stats.graph_launches, g_stats.copies);
}

static cudaError_t g_last; /* sticky until cudaGetLastError */

static cudaError_t s_err(cudaError_t e)
{
    if (e != cudaSuccess)
        g_last = e;
    return e;
}

/* ---- memory -------------------------------------------------------------------- */

struct s_block {
    size_t bytes;
    int pinned;
    int dev; /* the device it is on (pinned: -1) */
};
static std::map<uintptr_t, s_block> g_mem;
static size_t g_dev_bytes;
static thread_local int g_device; /* the thread's current device */

/* the live block holding p, or NULL */
static const s_block *s_find(const void *p, uintptr_t *base)
{
    uintptr_t a = (uintptr_t)p;
    auto it = g_mem.upper_bound(a);
    if (it == g_mem.begin())
        return NULL;
    --it;
    if (a >= it->first + (it->second.bytes ? it->second.bytes : 1))
        return NULL;
    *base = it->first;
    return &it->second;
}

void emu_need(const void *p, size_t bytes, int pinned_ok, const char *what)
{
    if (!p && bytes == 0)
        return;
    uintptr_t base = 0;
    const s_block *b = p ? s_find(p, &base) : NULL;
    if (!b || (b->pinned && !pinned_ok))
        emu_fail("%s: %p is not in device memory%s", what, p,
                 b ? " (it is pinned host memory)"
                   : " (a host pointer or a freed block)");
    if ((uintptr_t)p + bytes > base + b->bytes)
        emu_fail("%s: %zu bytes at offset %zu run past the end of a %zu-byte allocation",
                 what, bytes, (size_t)((uintptr_t)p - base), b->bytes);
}

static int s_stream_device(cudaStream_t st);

void emu_need_arg(const void *p, const char *kernel, int index, cudaStream_t st)
{
    if (!p)
        return;
    uintptr_t base;
    const s_block *b = s_find(p, &base);
    if (!b)
        emu_fail("kernel %s: argument %d (%p) is not device-accessible memory", kernel,
                 index, p);
    int dev = s_stream_device(st);
    if (!b->pinned && b->dev != dev)
        emu_fail(
            "kernel %s: argument %d is memory of device %d, the launch is on device %d",
            kernel, index, b->dev, dev);
}

int emu_current_device(void)
{
    return g_device;
}

int emu_device_of(const void *p)
{
    uintptr_t base;
    const s_block *b = s_find(p, &base);
    return b && !b->pinned ? b->dev : -1;
}

/* 0 host, 1 pinned host, 2 device */
static int s_kind(const void *p)
{
    uintptr_t base;
    const s_block *b = s_find(p, &base);
    return !b ? 0 : b->pinned ? 1 : 2;
}

/* ---- streams, events, graphs ------------------------------------------------------- */

struct s_op {
    std::function<void()> fn;
    const char *what;
    cudaEvent_t wait_ev; /* a wait: runnable once wait_ev->done >= wait_n */
    unsigned long wait_n;
    cudaEvent_t rec_ev; /* a record: sets rec_ev->done = rec_n */
    unsigned long rec_n;
};

struct CUgraph_st {
    std::vector<s_op> ops;
    int invalid;
    char why[160];
    /* streams forked into the capture: how many ops each had recorded when
       it was last joined back (an event recorded on it, waited on by a
       stream of the capture), and how many it has recorded in all */
    std::map<CUstream_st *, std::pair<size_t, size_t>> forks;
    std::vector<cudaEvent_t> events; /* recorded in it */
};

struct CUstream_st {
    std::deque<s_op> q;
    CUgraph_st *cap; /* the graph this stream records into, or NULL */
    int draining;
    int dev; /* the device current when it was made */
};

struct CUevent_st {
    unsigned long recorded, done; /* records enqueued, records run */
    std::deque<std::pair<CUstream_st *, unsigned long>> pending; /* where they wait */
    double t;                                                    /* when the last ran */
    int in_capture;      /* last record captured (in the open capture) */
    CUstream_st *cap_on; /* ... on this stream */
    size_t cap_ops;      /* ... after this many of its ops */
};

struct CUgraphExec_st {
    std::vector<s_op> ops;
};

static std::vector<CUstream_st *> g_streams;
static CUgraph_st *g_capture; /* the open capture (one at a time) */

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void s_drain(CUstream_st *s);
static void s_drain_all(void);

static void s_run_op(s_op &op);

/* runs the streams holding ev's records until ev->done >= n */
static void s_satisfy(cudaEvent_t ev, unsigned long n, const char *for_what)
{
    while (ev->done < n) {
        if (ev->pending.empty())
            emu_fail("%s waits for an event record that is not in any stream", for_what);
        CUstream_st *s = ev->pending.front().first;
        if (s->draining)
            emu_fail("%s: streams wait on each other's events in a cycle", for_what);
        s->draining = 1;
        while (ev->done < n && !s->q.empty()) {
            s_op op = std::move(s->q.front());
            s->q.pop_front();
            s_run_op(op);
        }
        s->draining = 0;
    }
}

static void s_run_op(s_op &op)
{
    if (op.wait_ev)
        s_satisfy(op.wait_ev, op.wait_n, op.what);
    if (op.fn)
        op.fn();
    if (op.rec_ev) {
        op.rec_ev->done = op.rec_n;
        op.rec_ev->t = s_now_ms();
        op.rec_ev->pending.pop_front();
    }
}

static void s_drain(CUstream_st *s)
{
    if (s->draining)
        emu_fail("a stream waits on its own unfinished work");
    s->draining = 1;
    while (!s->q.empty()) {
        s_op op = std::move(s->q.front());
        s->q.pop_front();
        s_run_op(op);
    }
    s->draining = 0;
}

static void s_drain_all(void)
{
    for (size_t i = 0; i < g_streams.size(); i++)
        s_drain(g_streams[i]);
}

static cudaError_t s_forbidden_in_capture(const char *call)
{
    if (!g_capture)
        return cudaSuccess;
    if (!g_capture->invalid) {
        g_capture->invalid = 1;
        snprintf(g_capture->why, sizeof g_capture->why, "%s during a capture", call);
    }
    return s_err(cudaErrorStreamCaptureUnsupported);
}

/* CUDAEMU_SCHED=eager: each stream runs its work as soon as its waits
   allow, instead of as late as a synchronisation needs it: a stream that
   overwrites what another still reads without waiting for it then shows
   (the default order shows the reverse: a reader that does not wait) */
static int s_eager(void)
{
    static int e = -1;
    if (e < 0) {
        const char *v = getenv("CUDAEMU_SCHED");
        e = v && !strcmp(v, "eager");
    }
    return e;
}

/* eager: every stream's work whose waits are met, until none is */
static void s_run_ready(void)
{
    for (int again = 1; again;) {
        again = 0;
        for (CUstream_st *s : g_streams) {
            while (!s->draining && !s->q.empty() &&
                   (!s->q.front().wait_ev ||
                    s->q.front().wait_ev->done >= s->q.front().wait_n)) {
                s_op op = std::move(s->q.front());
                s->q.pop_front();
                s->draining = 1;
                s_run_op(op);
                s->draining = 0;
                again = 1;
            }
        }
    }
}

static void s_push(cudaStream_t st, s_op op)
{
    if (!st) { /* the legacy default stream: after every other stream's work */
        if (g_capture) {
            s_forbidden_in_capture("work on the legacy default stream");
            return;
        }
        s_drain_all();
        s_run_op(op);
        return;
    }
    if (st->cap) {
        st->cap->ops.push_back(std::move(op));
        auto f = st->cap->forks.find(st);
        if (f != st->cap->forks.end())
            f->second.second++;
        return;
    }
    st->q.push_back(std::move(op));
    if (s_eager())
        s_run_ready();
}

void emu_enqueue(cudaStream_t st, const char *what, std::function<void()> op)
{
    s_op o{std::move(op), what, NULL, 0, NULL, 0};
    s_push(st, std::move(o));
}

int emu_capturing(cudaStream_t st)
{
    return st && st->cap;
}

cudaError_t cudaStreamCreate(cudaStream_t *st)
{
    if (!st)
        return s_err(cudaErrorInvalidValue);
    *st = new CUstream_st();
    (*st)->dev = g_device;
    g_streams.push_back(*st);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t st)
{
    if (!st)
        return s_err(cudaErrorInvalidResourceHandle);
    if (st->cap)
        emu_fail("cudaStreamDestroy of a capturing stream");
    s_drain(st); /* CUDA: pending work completes first */
    for (size_t i = 0; i < g_streams.size(); i++)
        if (g_streams[i] == st)
            g_streams.erase(g_streams.begin() + (long)i);
    delete st;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
    if (st && st->cap)
        return s_forbidden_in_capture("cudaStreamSynchronize");
    if (g_capture)
        return s_forbidden_in_capture("cudaStreamSynchronize");
    if (st)
        s_drain(st);
    else
        s_drain_all();
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (g_capture)
        return s_forbidden_in_capture("cudaDeviceSynchronize");
    s_drain_all();
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *ev)
{
    return cudaEventCreateWithFlags(ev, 0);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
    (void)flags;
    if (!ev)
        return s_err(cudaErrorInvalidValue);
    *ev = new CUevent_st();
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    if (!ev)
        return s_err(cudaErrorInvalidResourceHandle);
    /* CUDA lets an event be destroyed with its record pending; its waits
       already hold their targets. Run what it still waits for first. */
    s_satisfy(ev, ev->recorded, "cudaEventDestroy");
    if (g_capture) /* its captured records stay nodes; the event goes */
        for (cudaEvent_t &e : g_capture->events)
            if (e == ev)
                e = NULL;
    delete ev;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st)
{
    if (!ev)
        return s_err(cudaErrorInvalidResourceHandle);
    if (st && st->cap) { /* a node of the graph: replays in order, no event */
        auto f = st->cap->forks.find(st);
        ev->in_capture = 1;
        ev->cap_on = st;
        ev->cap_ops = f != st->cap->forks.end() ? f->second.second : 0;
        st->cap->events.push_back(ev);
        return cudaSuccess;
    }
    if (!st) {
        if (g_capture)
            return s_forbidden_in_capture("cudaEventRecord on the legacy stream");
        s_drain_all();
        ev->recorded++;
        ev->done = ev->recorded;
        ev->t = s_now_ms();
        return cudaSuccess;
    }
    ev->in_capture = 0;
    ev->recorded++;
    ev->pending.push_back({st, ev->recorded});
    s_op o{nullptr, "cudaEventRecord", NULL, 0, ev, ev->recorded};
    st->q.push_back(std::move(o));
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned flags)
{
    (void)flags;
    if (!ev)
        return s_err(cudaErrorInvalidResourceHandle);
    if (ev->in_capture) { /* a fork into the capture, or a join back */
        if (!st)
            return s_forbidden_in_capture(
                "a wait of the legacy stream on a captured event");
        if (!st->cap) { /* st joins the capture as a forked stream */
            st->cap = g_capture;
            g_capture->forks[st] = {0, 0};
        }
        auto f = g_capture->forks.find(ev->cap_on);
        if (f != g_capture->forks.end() && ev->cap_on != st &&
            ev->cap_ops > f->second.first)
            f->second.first = ev->cap_ops; /* joined back up to there */
        return cudaSuccess;
    }
    if (st && st->cap) { /* on work outside the capture: CUDA refuses it */
        if (!g_capture->invalid) {
            g_capture->invalid = 1;
            snprintf(g_capture->why, sizeof g_capture->why,
                     "a wait on an event recorded outside the capture");
        }
        return s_err(cudaErrorStreamCaptureIsolation);
    }
    s_op o{nullptr, "cudaStreamWaitEvent", ev, ev->recorded, NULL, 0};
    s_push(st, std::move(o));
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    if (!ev)
        return s_err(cudaErrorInvalidResourceHandle);
    if (g_capture)
        return s_forbidden_in_capture("cudaEventSynchronize");
    s_satisfy(ev, ev->recorded, "cudaEventSynchronize");
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!ms || !a || !b)
        return s_err(cudaErrorInvalidValue);
    if (a->done < a->recorded || b->done < b->recorded || !a->recorded || !b->recorded)
        return s_err(cudaErrorNotReady);
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t st, enum cudaStreamCaptureMode mode)
{
    (void)mode;
    if (!st)
        return s_err(cudaErrorInvalidValue); /* the legacy stream cannot capture */
    if (g_capture || st->cap)
        return s_err(cudaErrorIllegalState);
    g_capture = new CUgraph_st();
    st->cap = g_capture;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph)
{
    if (!st || !graph)
        return s_err(cudaErrorInvalidValue);
    if (!st->cap || st->cap != g_capture)
        return s_err(cudaErrorIllegalState);
    CUgraph_st *g = g_capture;
    if (g->forks.count(st))
        return s_err(cudaErrorIllegalState); /* ended on a forked stream */
    int unjoined = 0; /* a forked stream's work after its last join */
    for (auto &f : g->forks)
        unjoined |= f.second.second > f.second.first;
    for (size_t i = 0; i < g_streams.size(); i++)
        if (g_streams[i]->cap == g)
            g_streams[i]->cap = NULL;
    for (cudaEvent_t ev : g->events)
        if (ev)
            ev->in_capture = 0;
    g_capture = NULL;
    if (g->invalid || unjoined) {
        cudaError_t e = g->invalid ? cudaErrorStreamCaptureInvalidated
                                   : cudaErrorStreamCaptureUnjoined;
        *graph = NULL;
        delete g;
        return s_err(e);
    }
    *graph = g;
    g_stats.graphs++;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags)
{
    (void)flags;
    if (!exec || !graph)
        return s_err(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st{graph->ops};
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st)
{
    if (!exec)
        return s_err(cudaErrorInvalidResourceHandle);
    if (g_capture)
        return s_forbidden_in_capture("cudaGraphLaunch");
    g_stats.graph_launches++;
    CUgraphExec_st *x = exec;
    emu_enqueue(st, "cudaGraphLaunch", [x]() {
        for (s_op &op : x->ops)
            if (op.fn)
                op.fn();
    });
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    delete graph;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    /* a launch still queued holds it: let it run first */
    s_drain_all();
    delete exec;
    return cudaSuccess;
}

/* ---- device, memory calls ------------------------------------------------------- */

static long s_env(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? atol(v) : dflt;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    static int said;
    if (!said++ && getenv("CUDAEMU_STATS"))
        atexit(s_print_stats);
    int n = (int)s_env("CUDAEMU_DEVICES", 1);
    *count = n;
    return n > 0 ? cudaSuccess : s_err(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
    int n = (int)s_env("CUDAEMU_DEVICES", 1);
    if (device < 0 || device >= n)
        return s_err(cudaErrorInvalidDevice);
    g_device = device;
    return cudaSuccess;
}

static int s_stream_device(cudaStream_t st)
{
    return st ? st->dev : g_device;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    size_t total = (size_t)s_env("CUDAEMU_MEM_MB", 81920) << 20;
    *total_bytes = total;
    *free_bytes = total > g_dev_bytes ? total - g_dev_bytes : 0;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
        return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice:
        return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
        return "cudaErrorInvalidDevice";
    case cudaErrorNotReady:
        return "cudaErrorNotReady";
    case cudaErrorStreamCaptureUnjoined:
        return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation:
        return "cudaErrorStreamCaptureIsolation";
    case cudaErrorInvalidResourceHandle:
        return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState:
        return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
        return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
        return "cudaErrorStreamCaptureInvalidated";
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    default:
        return cudaGetErrorName(e);
    }
}

static cudaError_t s_alloc(void **p, size_t bytes, int pinned)
{
    if (!p)
        return s_err(cudaErrorInvalidValue);
    *p = NULL;
    if (cudaError_t e = s_forbidden_in_capture(pinned ? "cudaMallocHost" : "cudaMalloc"))
        return e;
    size_t total = (size_t)s_env("CUDAEMU_MEM_MB", 81920) << 20;
    if (!pinned && g_dev_bytes + bytes > total)
        return s_err(cudaErrorMemoryAllocation);
    void *m = NULL; /* 256-byte aligned, as cudaMalloc's */
    if (posix_memalign(&m, 256, bytes ? bytes : 1))
        return s_err(cudaErrorMemoryAllocation);
    memset(m, 0xFF, bytes); /* NaN in fp32, bf16 and fp16: an unwritten read shows */
    g_mem[(uintptr_t)m] = s_block{bytes, pinned, pinned ? -1 : g_device};
    if (!pinned)
        g_dev_bytes += bytes;
    *p = m;
    return cudaSuccess;
}

static cudaError_t s_free(void *p, int pinned)
{
    if (!p)
        return cudaSuccess;
    if (cudaError_t e = s_forbidden_in_capture(pinned ? "cudaFreeHost" : "cudaFree"))
        return e;
    auto it = g_mem.find((uintptr_t)p);
    if (it == g_mem.end() || it->second.pinned != pinned)
        emu_fail("%s of %p, which %s", pinned ? "cudaFreeHost" : "cudaFree", p,
                 it == g_mem.end() ? "is not a live allocation's start"
                                   : "came from the other allocator");
    s_drain_all(); /* cudaFree waits for the device's work */
    if (!pinned)
        g_dev_bytes -= it->second.bytes;
    g_mem.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    return s_alloc(p, bytes, 0);
}

cudaError_t cudaFree(void *p)
{
    return s_free(p, 0);
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    return s_alloc(p, bytes, 1);
}

cudaError_t cudaFreeHost(void *p)
{
    return s_free(p, 1);
}

/* A copy's two ends checked; kind must agree with where they are. */
static cudaError_t s_copy_check(void *dst, const void *src, size_t bytes,
                                enum cudaMemcpyKind kind, const char *call)
{
    int kd = s_kind(dst), ks = s_kind(src);
    char what[96];
    if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) {
        snprintf(what, sizeof what, "%s destination", call);
        emu_need(dst, bytes, 0, what);
    }
    if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) {
        snprintf(what, sizeof what, "%s source", call);
        emu_need(src, bytes, 0, what);
    }
    if ((kind == cudaMemcpyHostToDevice && ks == 2) ||
        (kind == cudaMemcpyDeviceToHost && kd == 2))
        emu_fail("%s: the host end of a %s copy is device memory", call,
                 kind == cudaMemcpyHostToDevice ? "host-to-device" : "device-to-host");
    if (kd == 1) { /* pinned memory is the device's too: within its block */
        snprintf(what, sizeof what, "%s destination (pinned)", call);
        emu_need(dst, bytes, 1, what);
    }
    if (ks == 1) {
        snprintf(what, sizeof what, "%s source (pinned)", call);
        emu_need(src, bytes, 1, what);
    }
    if (kind == cudaMemcpyDefault || kind == cudaMemcpyHostToHost) {
        if (kd == 2)
            emu_need(dst, bytes, 0, call);
        if (ks == 2)
            emu_need(src, bytes, 0, call);
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                            enum cudaMemcpyKind kind, cudaStream_t st)
{
    if (bytes == 0)
        return cudaSuccess;
    s_copy_check(dst, src, bytes, kind, "cudaMemcpyAsync");
    g_stats.copies++;
    int ks = s_kind(src), kd = s_kind(dst);
    if (ks == 0 && kd != 0) { /* from pageable memory: staged at the call */
        if (st && st->cap)
            return s_forbidden_in_capture("cudaMemcpyAsync from pageable host memory");
        std::shared_ptr<std::vector<char>> snap(
            new std::vector<char>((const char *)src, (const char *)src + bytes));
        emu_enqueue(st, "cudaMemcpyAsync",
                    [dst, snap]() { memcpy(dst, snap->data(), snap->size()); });
        return cudaSuccess;
    }
    emu_enqueue(st, "cudaMemcpyAsync", [dst, src, bytes]() { memcpy(dst, src, bytes); });
    if (kd == 0 && ks != 0) { /* to pageable memory: returns once copied */
        if (st && st->cap)
            return s_forbidden_in_capture("cudaMemcpyAsync to pageable host memory");
        if (st)
            s_drain(st);
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    if (cudaError_t e = s_forbidden_in_capture("cudaMemcpy"))
        return e;
    if (bytes == 0)
        return cudaSuccess;
    s_copy_check(dst, src, bytes, kind, "cudaMemcpy");
    g_stats.copies++;
    s_drain_all();
    memcpy(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t st)
{
    if (bytes == 0)
        return cudaSuccess;
    emu_need(p, bytes, 0, "cudaMemsetAsync");
    emu_enqueue(st, "cudaMemsetAsync", [p, v, bytes]() { memset(p, v, bytes); });
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t bytes)
{
    if (cudaError_t e = s_forbidden_in_capture("cudaMemset"))
        return e;
    emu_need(p, bytes, 0, "cudaMemset");
    s_drain_all();
    memset(p, v, bytes);
    return cudaSuccess;
}

/* ---- kernels: blocks in turn, threads as fibers
 * ---------------------------------------- */

/* A fiber is made once (makecontext, its own stack) and then serves one
   thread after another: it parks at the top of its loop, and a switch is
   a _setjmp/_longjmp pair (no system call, unlike swapcontext). */

emu_place *emu_here;

enum { S_STACK = 256 << 10 };

struct s_fiber {
    ucontext_t ctx;
    jmp_buf jb; /* where it parked or waits */
    void *stack;
    emu_place place;
    int made, done;
};

struct s_warp {
    int arrived;
    unsigned long gen;
    float val[32], snap[32];
};

static struct {
    const char *kernel;
    const std::function<void()> *body;
    std::vector<std::unique_ptr<s_fiber>> f;
    std::vector<s_warp> warps;
    int nt, live, exited, arrived;
    unsigned long gen, progress;
    s_fiber *cur; /* the fiber running, NULL when a thread runs as a plain call */
    jmp_buf sched;
    const void *sched_bottom; /* the scheduler's stack (AddressSanitizer's fibers) */
    size_t sched_size;
} B;

#ifdef EMU_ASAN
#define S_TO_FIBER(fake, f) __sanitizer_start_switch_fiber(&(fake), (f)->stack, S_STACK)
#define S_TO_SCHED(fake)                                                                 \
    __sanitizer_start_switch_fiber(&(fake), B.sched_bottom, B.sched_size)
#define S_ARRIVED(fake) __sanitizer_finish_switch_fiber((fake), NULL, NULL)
#else
#define S_TO_FIBER(fake, f) (void)(fake)
#define S_TO_SCHED(fake) (void)(fake)
#define S_ARRIVED(fake) (void)(fake)
#endif

/* from the running fiber back to the scheduler, until resumed */
static void s_yield(void)
{
    s_fiber *f = B.cur;
    void *fake = NULL;
    if (!_setjmp(f->jb)) {
        S_TO_SCHED(fake);
        _longjmp(B.sched, 1);
    }
    S_ARRIVED(fake);
    B.cur = f;
    emu_here = &f->place;
}

static void s_fiber_main(void)
{
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &B.sched_bottom, &B.sched_size);
#endif
    s_fiber *f = B.cur;
    for (;;) {
        s_yield(); /* parked: resumed with a thread to run */
        (*B.body)();
        f->done = 1;
        B.live--;
        B.exited++;
        B.progress++;
        if (B.arrived > 0)
            emu_fail("kernel %s: a thread of block %u ended while others wait at "
                     "__syncthreads (a divergent barrier)",
                     B.kernel, f->place.b.x);
    }
}

/* into fiber f until it yields or ends its thread */
static void s_resume(s_fiber *f)
{
    void *fake = NULL;
    B.cur = f;
    emu_here = &f->place;
    if (!_setjmp(B.sched)) {
        S_TO_FIBER(fake, f);
        _longjmp(f->jb, 1);
    }
    S_ARRIVED(fake);
    B.cur = NULL;
}

/* fiber i, made on first use and parked at the top of its loop */
static s_fiber *s_fiber_at(int i)
{
    while ((int)B.f.size() <= i)
        B.f.emplace_back(new s_fiber());
    s_fiber *f = B.f[i].get();
    if (!f->made) {
        f->stack = mmap(NULL, S_STACK, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (f->stack == MAP_FAILED)
            emu_fail("no memory for a thread's stack");
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = f->stack;
        f->ctx.uc_stack.ss_size = S_STACK;
        f->ctx.uc_link = NULL;
        makecontext(&f->ctx, s_fiber_main, 0);
        ucontext_t here;
        void *fake = NULL;
        B.cur = f;
        if (!_setjmp(B.sched)) { /* it parks at once, jumping back here */
            S_TO_FIBER(fake, f);
            swapcontext(&here, &f->ctx);
        }
        S_ARRIVED(fake);
        B.cur = NULL;
        f->made = 1;
    }
    return f;
}

void __syncthreads(void)
{
    if (!B.cur)
        emu_fail("kernel %s: __syncthreads reached by a thread after the block's first "
                 "thread ended without it (a divergent barrier)",
                 B.kernel);
    if (B.exited)
        emu_fail("kernel %s: __syncthreads after a thread of the block ended "
                 "(a divergent barrier)",
                 B.kernel);
    B.arrived++;
    B.progress++;
    unsigned long g = B.gen;
    if (B.arrived == B.live) {
        B.arrived = 0;
        B.gen++;
        return;
    }
    while (B.gen == g)
        s_yield();
}

float emu_shfl_down(float v, unsigned delta)
{
    if (!B.cur)
        emu_fail("kernel %s: __shfl_down_sync after the block's first thread ended "
                 "without it",
                 B.kernel);
    unsigned t = B.cur->place.t.x;
    unsigned w = t / 32, lane = t % 32;
    if ((w + 1) * 32 > (unsigned)B.nt)
        emu_fail("kernel %s: __shfl_down_sync with a full mask in a partial warp "
                 "(block of %d threads)",
                 B.kernel, B.nt);
    s_warp *W = &B.warps[w];
    W->val[lane] = v;
    W->arrived++;
    B.progress++;
    unsigned long g = W->gen;
    if (W->arrived == 32) {
        memcpy(W->snap, W->val, sizeof W->snap);
        W->arrived = 0;
        W->gen++;
    } else {
        while (W->gen == g)
            s_yield();
    }
    return lane + delta < 32 ? W->snap[lane + delta] : v;
}

static void s_place(emu_place *p, dim3 grid, dim3 block, unsigned bx, unsigned by,
                    unsigned bz, int t)
{
    p->gd = grid;
    p->bd = block;
    p->b = dim3(bx, by, bz);
    p->t = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
}

/* CUDAEMU_ORDER=reverse: blocks and the threads of a block run last to
   first (a result that depends on the order, a race on a GPU, then
   differs from the default order's) */
static int s_reverse(void)
{
    static int r = -1;
    if (r < 0) {
        const char *v = getenv("CUDAEMU_ORDER");
        r = v && !strcmp(v, "reverse");
    }
    return r;
}

static void s_run_block(dim3 grid, dim3 block, unsigned bx, unsigned by, unsigned bz)
{
    int nt = B.nt, rev = s_reverse();
    B.live = nt;
    B.exited = 0;
    B.arrived = 0;
    for (s_warp &w : B.warps)
        w.arrived = 0;
    /* the i-th thread to run is thread rev ? nt - 1 - i : i, on fiber i */
    s_fiber *f0 = s_fiber_at(0);
    f0->done = 0;
    s_place(&f0->place, grid, block, bx, by, bz, rev ? nt - 1 : 0);
    s_resume(f0);
    if (f0->done) { /* no barrier on the first thread's path: the rest as plain calls */
        for (int i = 1; i < nt; i++) {
            emu_place p;
            s_place(&p, grid, block, bx, by, bz, rev ? nt - 1 - i : i);
            emu_here = &p;
            (*B.body)();
            B.exited++;
        }
        return;
    }
    for (int i = 1; i < nt; i++) {
        s_fiber *f = s_fiber_at(i);
        f->done = 0;
        s_place(&f->place, grid, block, bx, by, bz, rev ? nt - 1 - i : i);
    }
    while (B.live > 0) {
        unsigned long before = B.progress;
        for (int i = 0; i < nt; i++)
            if (!B.f[i]->done)
                s_resume(B.f[i].get());
        if (B.progress == before)
            emu_fail("kernel %s: the threads of block %u wait forever (a barrier or "
                     "shuffle some never reach)",
                     B.kernel, bx);
    }
}

void emu_grid(const char *name, dim3 grid, dim3 block, size_t shm, cudaStream_t st,
              std::function<void()> body)
{
    (void)shm;
    unsigned long nt = (unsigned long)block.x * block.y * block.z;
    if (nt == 0 || nt > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 0x7fffffffu) {
        s_err(cudaErrorInvalidConfiguration);
        return;
    }
    g_stats.launches++;
    emu_enqueue(st, name, [name, grid, block, body]() {
        B.kernel = name;
        B.body = &body;
        B.nt = (int)((unsigned long)block.x * block.y * block.z);
        B.warps.assign((B.nt + 31) / 32, s_warp());
        unsigned long nb = (unsigned long)grid.x * grid.y * grid.z;
        for (unsigned long i = 0; i < nb; i++) {
            unsigned long b = s_reverse() ? nb - 1 - i : i;
            s_run_block(grid, block, (unsigned)(b % grid.x),
                        (unsigned)(b / grid.x % grid.y),
                        (unsigned)(b / ((unsigned long)grid.x * grid.y)));
        }
        emu_here = NULL;
    });
}
