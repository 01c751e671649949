/*  selftest.cc - cudaemu's own checks, one misuse per case
    (tests/integration/test_cudaemu.py runs each and reads its status and
    message): that the emulation catches what it says it catches
    (tests/cudaemu/README.md), and that a correct program passes.

    usage: cudaemu-selftest CASE. Exit 0 and "ok" for a program that should
    pass; a misuse ends with status 3 and "cudaemu: " and the reason (from
    the emulation itself), or with status 1 and "WRONG: ..." when the
    emulation let it through. The kernels are written here in CUDA's
    syntax and built through launch.py as the trainer's are. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__global__ void k_scale(float *x, float f, long n)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= f;
}

/* a block's sum by a shared-memory tree, as the trainer's norms */
__global__ void k_block_sum(const float *x, long n, float *out)
{
    __shared__ float s[256];
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h)
            s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = s[0];
}

/* a warp's sum by shuffles */
__global__ void k_warp_sum(const float *x, float *out)
{
    float v = x[threadIdx.x];
    for (int s = 16; s > 0; s >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, s);
    if ((threadIdx.x & 31) == 0)
        out[threadIdx.x / 32] = v;
}

/* the misuse: threads past n leave before the barrier */
__global__ void k_divergent(float *x, long n)
{
    __shared__ float s[256];
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    s[threadIdx.x] = x[i];
    __syncthreads();
    x[i] = s[(threadIdx.x + 1) % blockDim.x];
}

static int wrong(const char *what)
{
    printf("WRONG: %s\n", what);
    return 1;
}

#define OK(x)                                                                            \
    do {                                                                                 \
        if ((x) != cudaSuccess)                                                          \
            return wrong(#x " failed");                                                  \
    } while (0)

/* a correct program: reductions, a graph replayed with new scalars, two
   streams ordered by an event */
static int s_good(void)
{
    enum { N = 1000 };
    float h[N], *d, *part, out[4];
    double want = 0;
    for (int i = 0; i < N; i++)
        h[i] = (float)(i % 7) - 3.0f, want += h[i];
    OK(cudaMalloc(&d, N * sizeof(float)));
    OK(cudaMalloc(&part, 4 * sizeof(float)));
    cudaStream_t a, b;
    OK(cudaStreamCreate(&a));
    OK(cudaStreamCreate(&b));
    OK(cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, a));
    k_block_sum<<<4, 256, 0, a>>>(d, N, part);
    OK(cudaMemcpyAsync(out, part, sizeof out, cudaMemcpyDeviceToHost, a));
    if (out[0] + out[1] + out[2] + out[3] != (float)want)
        return wrong("block sums");
    float w[64], ws[2];
    for (int i = 0; i < 64; i++)
        w[i] = (float)i;
    OK(cudaMemcpy(d, w, sizeof w, cudaMemcpyHostToDevice));
    k_warp_sum<<<1, 64, 0, a>>>(d, part);
    OK(cudaMemcpyAsync(ws, part, sizeof ws, cudaMemcpyDeviceToHost, a));
    if (ws[0] != 496.0f || ws[1] != 1520.0f)
        return wrong("warp sums");
    /* b scales what a wrote, after a's event */
    cudaEvent_t ev;
    OK(cudaEventCreate(&ev));
    OK(cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, a));
    OK(cudaEventRecord(ev, a));
    OK(cudaStreamWaitEvent(b, ev, 0));
    k_scale<<<4, 256, 0, b>>>(d, 2.0f, N);
    OK(cudaStreamSynchronize(b));
    float back[N];
    OK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    if (back[10] != 2.0f * h[10])
        return wrong("the event's order");
    /* a captured graph replays its work */
    cudaGraph_t g;
    cudaGraphExec_t x;
    OK(cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal));
    k_scale<<<4, 256, 0, a>>>(d, 0.5f, N);
    OK(cudaStreamEndCapture(a, &g));
    OK(cudaGraphInstantiate(&x, g, 0));
    OK(cudaGraphLaunch(x, a));
    OK(cudaGraphLaunch(x, a));
    OK(cudaStreamSynchronize(a));
    OK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    if (back[10] != 0.5f * h[10])
        return wrong("the graph's replays");
    /* a capture forked onto b and joined back */
    cudaEvent_t e1, e2;
    OK(cudaEventCreate(&e1));
    OK(cudaEventCreate(&e2));
    OK(cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal));
    OK(cudaEventRecord(e1, a));
    OK(cudaStreamWaitEvent(b, e1, 0));
    k_scale<<<4, 256, 0, b>>>(d, 4.0f, N);
    OK(cudaEventRecord(e2, b));
    OK(cudaStreamWaitEvent(a, e2, 0));
    OK(cudaStreamEndCapture(a, &g));
    OK(cudaGraphInstantiate(&x, g, 0));
    OK(cudaGraphLaunch(x, a));
    OK(cudaStreamSynchronize(a));
    OK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    if (back[10] != 2.0f * h[10])
        return wrong("a forked and joined capture's replay");
    printf("ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    float *d = NULL, host[300];
    memset(host, 0, sizeof host);
    if (strcmp(c, "good") && cudaMalloc(&d, 256 * sizeof(float)) != cudaSuccess)
        return wrong("cudaMalloc");
    if (!strcmp(c, "good"))
        return s_good();
    if (!strcmp(c, "host-pointer")) { /* a host array given to a kernel */
        k_scale<<<1, 256>>>(host, 2.0f, 256);
        cudaDeviceSynchronize();
        return wrong("a host pointer reached a kernel");
    }
    if (!strcmp(c, "copy-past-end")) { /* 300 floats into 256 */
        cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice);
        return wrong("a copy ran past its allocation");
    }
    if (!strcmp(c, "divergent-barrier")) {
        k_divergent<<<1, 256>>>(d, 200);
        cudaDeviceSynchronize();
        return wrong("a divergent barrier ran");
    }
    if (!strcmp(c, "bad-launch")) { /* 0 blocks: CUDA's invalid configuration */
        k_scale<<<0, 256>>>(d, 2.0f, 0);
        cudaError_t e = cudaGetLastError();
        if (e != cudaErrorInvalidConfiguration)
            return wrong("a launch of 0 blocks was accepted");
        printf("ok: %s\n", cudaGetErrorName(e));
        return 0;
    }
    if (!strcmp(c, "missing-wait")) { /* b reads what a writes, without a wait */
        cudaStream_t a, b;
        cudaStreamCreate(&a);
        cudaStreamCreate(&b);
        float ones[256], back[256];
        for (int i = 0; i < 256; i++)
            ones[i] = 1.0f;
        cudaMemset(d, 0, 256 * sizeof(float));
        cudaMemcpyAsync(d, ones, sizeof ones, cudaMemcpyHostToDevice, a);
        k_scale<<<1, 256, 0, b>>>(d, 3.0f, 256); /* should have waited for a */
        cudaStreamSynchronize(b);
        cudaStreamSynchronize(a);
        cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost);
        /* a's copy ran last: the scale is lost, as it may be on a GPU */
        printf("%s: d[0] = %g\n", back[0] == 1.0f ? "stale" : "WRONG: ordered", back[0]);
        return back[0] == 1.0f ? 0 : 1;
    }
    if (!strcmp(c, "malloc-in-capture")) {
        cudaStream_t a;
        cudaStreamCreate(&a);
        cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal);
        float *e = NULL;
        cudaError_t m = cudaMalloc(&e, 64);
        cudaGraph_t g = NULL;
        cudaError_t end = cudaStreamEndCapture(a, &g);
        if (m != cudaErrorStreamCaptureUnsupported ||
            end != cudaErrorStreamCaptureInvalidated)
            return wrong("cudaMalloc inside a capture was allowed");
        printf("ok: %s, then %s\n", cudaGetErrorName(m), cudaGetErrorName(end));
        return 0;
    }
    if (!strcmp(c, "unjoined-fork")) { /* b forked into the capture, never joined */
        cudaStream_t a, b;
        cudaEvent_t e;
        cudaStreamCreate(&a);
        cudaStreamCreate(&b);
        cudaEventCreate(&e);
        cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal);
        cudaEventRecord(e, a);
        cudaStreamWaitEvent(b, e, 0);
        k_scale<<<1, 256, 0, b>>>(d, 2.0f, 256);
        cudaGraph_t g = NULL;
        cudaError_t end = cudaStreamEndCapture(a, &g);
        if (end != cudaErrorStreamCaptureUnjoined || g)
            return wrong("a capture ended with a forked stream never joined");
        printf("ok: %s\n", cudaGetErrorName(end));
        return 0;
    }
    if (!strcmp(c, "outside-wait")) { /* a capture waits on b's work outside it */
        cudaStream_t a, b;
        cudaEvent_t e;
        cudaStreamCreate(&a);
        cudaStreamCreate(&b);
        cudaEventCreate(&e);
        k_scale<<<1, 256, 0, b>>>(d, 2.0f, 256);
        cudaEventRecord(e, b);
        cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal);
        cudaError_t w = cudaStreamWaitEvent(a, e, 0);
        cudaGraph_t g = NULL;
        cudaError_t end = cudaStreamEndCapture(a, &g);
        float ms = 0;
        cudaEvent_t e2;
        cudaEventCreate(&e2);
        cudaEventRecord(e2, b); /* queued, not run: not ready */
        cudaError_t t = cudaEventElapsedTime(&ms, e, e2);
        if (w != cudaErrorStreamCaptureIsolation ||
            end != cudaErrorStreamCaptureInvalidated || g || t != cudaErrorNotReady)
            return wrong(
                "a capture's wait on outside work, or an unfinished event's time");
        printf("ok: %s, then %s; %s\n", cudaGetErrorName(w), cudaGetErrorName(end),
               cudaGetErrorName(t));
        return 0;
    }
    if (!strcmp(c, "partial-warp-shuffle")) { /* a full mask over 48 threads */
        k_warp_sum<<<1, 48>>>(d, d + 128);
        cudaDeviceSynchronize();
        return wrong("a full-mask shuffle in a partial warp ran");
    }
    if (!strcmp(c, "pinned-past-end")) { /* 100 floats out of a 64-float pinned block */
        float *p = NULL;
        cudaMallocHost(&p, 64 * sizeof(float));
        cudaMemcpyAsync(d, p, 100 * sizeof(float), cudaMemcpyHostToDevice, 0);
        return wrong("a copy ran past its pinned block");
    }
    if (!strcmp(c, "other-device")) { /* device 1's memory to a launch on device 0 */
        setenv("CUDAEMU_DEVICES", "2", 1);
        float *e = NULL;
        if (cudaSetDevice(1) != cudaSuccess || cudaMalloc(&e, 256 * sizeof(float)) ||
            cudaSetDevice(0) != cudaSuccess)
            return wrong("two devices");
        k_scale<<<1, 256>>>(e, 2.0f, 256);
        cudaDeviceSynchronize();
        return wrong("a launch read another device's memory");
    }
    printf("usage: cudaemu-selftest good|host-pointer|copy-past-end|divergent-barrier|"
           "bad-launch|missing-wait|malloc-in-capture|unjoined-fork|outside-wait|"
           "partial-warp-shuffle|pinned-past-end|other-device\n");
    return 2;
}
