/*  cuda_check.cuh - CUDA_CHECK, the trainer's exit-on-error check of a CUDA
    runtime call (backend_cuda.cu, dist_dev.cu): on an error it prints
    "jizhi-train: CUDA error NAME at FILE:LINE: TEXT" and exits with status
    1. The trainer only (docs: CONVENTIONS, "Errors and logging"); never in
    a daemon.
*/
#ifndef JZ_TRN_CUDA_CHECK_CUH
#define JZ_TRN_CUDA_CHECK_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_CHECK(x)                                                                    \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "jizhi-train: CUDA error %s at %s:%d: %s\n",                 \
                    cudaGetErrorName(e_), __FILE__, __LINE__, cudaGetErrorString(e_));   \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#endif
