/*  dnnl_impl.h - what the trainer's oneDNN files (conv_dnnl.c,
    linear_dnnl.c) share, internal to them and compiled only where the
    build has oneDNN (TRN_HAVE_DNNL): the process's one CPU engine and
    stream, weight reorders, owned memory and execution on a set number of
    OpenMP threads. Implemented in conv_dnnl.c.
*/
#ifndef TRN_DNNL_IMPL_H
#define TRN_DNNL_IMPL_H

#include <oneapi/dnnl/dnnl.h>

/* The process's CPU engine and stream (created at the first call; borrowed,
   never destroyed). 0, or -1 with err. */
int trn__dnnl_engine(dnnl_engine_t *eng, dnnl_stream_t *stream, char *err);

/* A reorder primitive from one layout to another (caller owns *out and
   destroys it), or *out NULL and *same 1 when the layouts are equal.
   Created for thr OpenMP threads (run it on as many). 0 or -1. */
int trn__dnnl_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                      dnnl_primitive_t *out, int *same, int thr);

/* A memory object over md with its own 64-byte aligned buffer *buf (the
   caller owns both: dnnl_memory_destroy, free). 0 or -1. */
int trn__dnnl_owned(dnnl_memory_t *m, const dnnl_memory_desc_t *md, void **buf);

/* Threads for primitive i (0 forward, 1 backward data, 2 backward
   weights) at batch n when nthr are configured: all of them, but the
   backward weights on one thread per 256 images (conv_dnnl.c,
   S_BWW_IMAGES: there they were slower on two threads than on one). */
int trn__dnnl_threads_for(int i, int n, int nthr);

/* 1 when oneDNN's effective ISA (cpuid, capped by ONEDNN_MAX_CPU_ISA)
   has AMX, else 0. */
int trn__dnnl_amx(void);

/* The thread count trn_dnnl_set_threads configured (--threads), whatever
   a push set for the moment; OpenMP's count when never configured. */
int trn__dnnl_threads(void);

/* Sets the OpenMP threads oneDNN reads (at creation and execution);
   returns the previous count for trn__dnnl_threads_pop. */
int trn__dnnl_threads_push(int t);
void trn__dnnl_threads_pop(int old);

/* Runs p on thr OpenMP threads (the count it was created under). 0 or -1. */
int trn__dnnl_exec(dnnl_primitive_t p, int thr, int nargs, const dnnl_exec_arg_t *args);

/* Copies fp32 weights w (borrowed) into a kernel's layout `to` through
   reorder r (rounding to bf16 where `to` is bf16), or, with r NULL (the
   same layout and type), points `to` at w. user: a memory object of the
   user's layout; thr: the threads r was made for. 0 or -1. */
int trn__dnnl_weights(dnnl_memory_t user, dnnl_primitive_t r, dnnl_memory_t to,
                      const float *w, int thr);

/* o = beta*o + g over n floats. */
void trn__dnnl_axpby(float *restrict o, const float *restrict g, float beta, long n);

#endif
