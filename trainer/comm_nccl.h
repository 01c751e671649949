/*  comm_nccl.h - device-memory calls of the NCCL backend (comm_nccl.cu),
    for the device-resident gradient exchange (dist_dev.cu). Only in
    jizhi-train-cuda built with NCCL (TRN_WITH_NCCL).

    The backend's own calls (comm.h) stage host buffers through device
    memory and wait for the result; these take device buffers and only
    enqueue the NCCL call on the backend's communication stream (returned by
    trn_nccl_stream as a cudaStream_t), so the caller orders them against
    its compute stream with events. Every call is collective in the usual
    NCCL sense: all ranks issue the same calls in the same order.
    Errors: 0 or -1 (an NCCL error, printed).
*/
#ifndef TRN_COMM_NCCL_H
#define TRN_COMM_NCCL_H

#include <stddef.h>

#include "trainer/comm.h"

/* 1 when c is the NCCL backend. */
int trn_nccl_is(const trn_comm *c);
/* The communication stream (a cudaStream_t). */
void *trn_nccl_stream(trn_comm *c);
/* Sum all-reduce of n floats in device memory, in place (ncclAllReduce). */
int trn_nccl_dev_allreduce(trn_comm *c, float *dbuf, long n);
/* Sends sbytes of device memory to dst while receiving rbytes from src
   (ncclSend/ncclRecv in one group; -1 skips a side). Not counted in
   c->bytes_out (the caller counts its payload). */
int trn_nccl_dev_sendrecv(trn_comm *c, const void *sbuf, size_t sbytes, int dst,
                          void *rbuf, size_t rbytes, int src);

#endif
