/* cudaemu stand-in for <cuda_runtime.h> (tests/cudaemu/README.md): the part
   of the CUDA runtime API that jizhi's CUDA code calls, with the toolkit's
   signatures and values, run on the CPU by tests/cudaemu/runtime.cc; and
   what nvcc gives device code (threadIdx, __syncthreads, __shfl_down_sync,
   atomicAdd, the __f*_rn intrinsics, the <<< >>> launch, which
   tests/cudaemu/launch.py rewrites into emu_launch). NOT A GPU. */
#ifndef JZ_CUDAEMU_CUDA_RUNTIME_H
#define JZ_CUDAEMU_CUDA_RUNTIME_H

#include <math.h>
#include <stddef.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "library_types.h"

#define CUDART_VERSION 12080

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotReady = 600,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnjoined = 904,
    cudaErrorStreamCaptureIsolation = 905
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
};

#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
template <typename T> static inline cudaError_t cudaMallocHost(T **p, size_t bytes)
{
    return cudaMallocHost((void **)p, bytes);
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes,
                       enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                            enum cudaMemcpyKind kind, cudaStream_t st = 0);
cudaError_t cudaMemset(void *p, int v, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t st = 0);

cudaError_t cudaStreamCreate(cudaStream_t *st);
cudaError_t cudaStreamDestroy(cudaStream_t st);
cudaError_t cudaStreamSynchronize(cudaStream_t st);
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t *ev);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t ev);
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t ev);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

cudaError_t cudaStreamBeginCapture(cudaStream_t st, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

/* ---- what nvcc gives device code ------------------------------------------------ */

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)
        : x(x_), y(y_), z(z_)
    {
    }
};

/* the running thread's place (runtime.cc sets it before each thread runs) */
struct emu_place {
    dim3 t, b, bd, gd;
};
extern emu_place *emu_here;
#define threadIdx (emu_here->t)
#define blockIdx (emu_here->b)
#define blockDim (emu_here->bd)
#define gridDim (emu_here->gd)

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
/* blocks run one at a time: one copy serves each. It keeps the previous
   block's values (a GPU's would be garbage): a read of a slot this block
   never wrote is not caught (GCC ignores a section for a template's
   statics, so the arrays cannot be found and poisoned between blocks) */
#define __shared__ static

void __syncthreads(void);
float emu_shfl_down(float v, unsigned delta);
static inline float __shfl_down_sync(unsigned mask, float v, unsigned delta)
{
    (void)mask;
    return emu_shfl_down(v, delta);
}
static inline float atomicAdd(float *p, float v)
{
    float old = *p;
    *p = old + v;
    return old;
}
static inline float __fmul_rn(float a, float b)
{
    return a * b;
}
static inline float __fadd_rn(float a, float b)
{
    return a + b;
}
static inline float __fsub_rn(float a, float b)
{
    return a - b;
}

/* ---- launches ---------------------------------------------------------------------- */

/* Runs body once per thread of the grid (runtime.cc); enqueued on st. */
void emu_grid(const char *name, dim3 grid, dim3 block, size_t shm, cudaStream_t st,
              std::function<void()> body);
/* Ends the process unless p is NULL or device-accessible memory: pinned
   host memory, or device memory of the device st belongs to (NULL: the
   thread's current device). */
void emu_need_arg(const void *p, const char *kernel, int index, cudaStream_t st);

template <typename A>
static inline void emu_check_arg(const A &a, const char *k, int i, cudaStream_t st)
{
    if constexpr (std::is_pointer<A>::value)
        emu_need_arg((const void *)a, k, i, st);
}

template <typename... P> struct emu_launcher {
    void (*k)(P...);
    const char *name;
    dim3 grid, block;
    size_t shm;
    cudaStream_t st;
    template <typename... A> void operator()(A &&...a) const
    {
        std::tuple<typename std::decay<P>::type...> args(
            (P)a...); /* by value, as a launch */
        int i = 0;
        std::apply([&](const auto &...v) { (emu_check_arg(v, name, i++, st), ...); },
                   args);
        auto kk = k;
        emu_grid(name, grid, block, shm, st, [kk, args]() { std::apply(kk, args); });
    }
};

template <typename... P>
static inline emu_launcher<P...> emu_launch(void (*k)(P...), const char *name, dim3 grid,
                                            dim3 block, size_t shm = 0,
                                            cudaStream_t st = 0)
{
    return emu_launcher<P...>{k, name, grid, block, shm, st};
}

#endif
