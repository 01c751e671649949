/*  emu.h - the CPU emulation of the CUDA API that the CUDA trainer's code
    is tested on where no GPU is (tests/cudaemu/README.md): what the
    library emulations (cuBLAS, cuBLASLt, cuDNN, NCCL) share with the
    runtime's (runtime.cc). Device memory is host memory; every stream is a
    queue of host closures run in stream order at the synchronisation
    points, the other streams' work first where the order allows it (work
    that lacks a needed wait then reads stale data, as on a GPU); a
    capturing stream records its work into the graph. NOT A GPU: nothing
    measured here is a GPU number.

    Errors: a call that a real GPU would reject with an error code returns
    it; a misuse that a GPU would turn into a fault or silent garbage (a
    host pointer given to the device, an access past an allocation) ends
    the process with "cudaemu: " and the reason (emu_fail), so a test sees
    it at once.
*/
#ifndef JZ_CUDAEMU_EMU_H
#define JZ_CUDAEMU_EMU_H

#include <cuda_runtime.h>
#include <stddef.h>

#include <functional>

/* Enqueues op on stream st (NULL: the legacy default stream, which runs it
   after all other streams' work, at once). what names it in errors. While
   st captures, op is recorded into the graph (run at each launch). op
   owns what it captured: scalars read from host memory at the call (a
   cuBLAS alpha in host pointer mode) must be copied into it by value. */
void emu_enqueue(cudaStream_t st, const char *what, std::function<void()> op);

/* Ends the process (status 3) unless [p, p + bytes) lies inside one live
   device allocation (cudaMalloc), or, when pinned_ok, one live pinned host
   allocation (cudaMallocHost: device-accessible). what names the call and
   the argument. bytes 0: p must be NULL or inside one. */
void emu_need(const void *p, size_t bytes, int pinned_ok, const char *what);

/* Prints "cudaemu: " and the message to stderr and ends the process
   (status 3). */
[[noreturn]] void emu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* 1 while st is capturing into a graph. */
int emu_capturing(cudaStream_t st);

/* The calling thread's current device (cudaSetDevice; 0 until set), and
   the device whose memory p is (-1: host memory, pinned or not). */
int emu_current_device(void);
int emu_device_of(const void *p);

#endif
