/* cudaemu stand-in for <cublas_v2.h> (tests/cudaemu/README.md): the cuBLAS
   API of cublas_api.h under its plain names, as the real header maps
   them. NOT A GPU. */
#ifndef JZ_CUDAEMU_CUBLAS_V2_H
#define JZ_CUDAEMU_CUBLAS_V2_H

#include "cublas_api.h"

#define cublasCreate cublasCreate_v2
#define cublasDestroy cublasDestroy_v2
#define cublasSetStream cublasSetStream_v2
#define cublasSetWorkspace cublasSetWorkspace_v2
#define cublasSgemm cublasSgemm_v2

#endif
