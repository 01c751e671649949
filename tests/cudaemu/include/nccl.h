/* cudaemu stand-in for <nccl.h> (tests/cudaemu/README.md): the part of the
   NCCL API that trainer/comm_nccl.cu calls, with NCCL 2.28's signatures and
   numeric values, emulated over MPI by tests/cudaemu/nccl.cc (one MPI rank
   is one emulated GPU). Only the names the trainer uses are declared: other
   datatypes and reduction ops exist in NCCL but not here. NOT A GPU. */
#ifndef JZ_CUDAEMU_NCCL_H
#define JZ_CUDAEMU_NCCL_H

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm *ncclComm_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

/* NCCL has 12 types (0 .. 11); the trainer names these three */
typedef enum { ncclChar = 0, ncclFloat = 7, ncclDouble = 8 } ncclDataType_t;

/* NCCL has 5 built-in ops (0 .. 4); the trainer names ncclSum */
typedef enum { ncclSum = 0 } ncclRedOp_t;

const char *ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                              int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                      int peer, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);

ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif
