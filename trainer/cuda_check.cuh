/*  cuda_check.cuh - CUDA_CHECK, the trainer's exit-on-error check of a CUDA
    runtime call (backend_cuda.cu, dist_dev.cu): on an error it prints
    "jizhi-train: CUDA error NAME at FILE:LINE: TEXT" and exits with status
    1. The trainer only (docs: CONVENTIONS, "Errors and logging"); never in
    a daemon.

    Inside a CUDA graph capture (backend_cuda.cu, s_graph_launch sets
    trn__capture()->on) a failing call does not exit: the first failure is
    kept in trn__capture() and the capture goes on to its end, where the
    backend ends it cleanly and falls back to plain launches
    (graph_policy.h). CUBLAS_CHECK (backend_cuda.cu) does the same.
*/
#ifndef JZ_TRN_CUDA_CHECK_CUH
#define JZ_TRN_CUDA_CHECK_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

/* The open capture's first failure (per translation unit; only
   backend_cuda.cu opens captures). */
typedef struct {
    int on;         /* a capture is open */
    int failed;     /* a call failed since it opened */
    char what[160]; /* the first failure: the call's error and place */
} trn_capture_state;

static inline trn_capture_state *trn__capture(void)
{
    static trn_capture_state s;
    return &s;
}

/* 1 (and the failure kept) when a capture is open, else 0. */
static inline int trn__capture_note(const char *err, const char *file, int line)
{
    trn_capture_state *c = trn__capture();
    if (!c->on)
        return 0;
    if (!c->failed)
        snprintf(c->what, sizeof c->what, "%s at %s:%d", err, file, line);
    c->failed = 1;
    return 1;
}

#define CUDA_CHECK(x)                                                                    \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess &&                                                         \
            !trn__capture_note(cudaGetErrorName(e_), __FILE__, __LINE__)) {              \
            fprintf(stderr, "jizhi-train: CUDA error %s at %s:%d: %s\n",                 \
                    cudaGetErrorName(e_), __FILE__, __LINE__, cudaGetErrorString(e_));   \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#endif
