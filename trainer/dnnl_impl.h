/*  dnnl_impl.h - what the trainer's oneDNN files (conv_dnnl.c,
    linear_dnnl.c) share, internal to them and compiled only where the
    build has oneDNN (TRN_HAVE_DNNL): the process's one CPU engine and
    stream, weight reorders, owned memory and execution on a set number of
    OpenMP threads (implemented in conv_dnnl.c), and a layer's primitive
    cache (dnnl_cache.c).
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

/* ---- a layer's primitive cache (dnnl_cache.c) ---- */

/* What every cache entry starts with (conv_dnnl.c's and linear_dnnl.c's
   s_entry hold it as their first member, then their own fields): the key,
   the three primitives (forward, backward data, backward weights) with
   the thread counts they were made for, the weight reorders and the
   memory objects both kinds use. The entry owns all of it; the cache
   destroys it. */
typedef struct {
    int n, bf16;                     /* key: batch, precision */
    int used;                        /* LRU clock */
    int nthr;                        /* trn__dnnl_threads() when made: a live
                                        change of --threads makes it stale */
    int thr[3];                      /* OpenMP threads each of prim[] was made for
                                        and runs on */
    dnnl_primitive_desc_t pd[3];     /* fwd, bwd data, bwd weights */
    dnnl_primitive_t prim[3];        /* same order */
    dnnl_primitive_t wr_fwd, wr_bwd; /* jizhi's fp32 weights -> the fwd / bwd-data
                                        kernels' layout (NULL: the same) */
    dnnl_primitive_t dwr;            /* bwd-weights diff layout -> jizhi's (NULL: same) */
    dnnl_memory_t src, dst, ddst, dsrc; /* activations: handles set per call */
    dnnl_memory_t wuser, wfwd, wbwd, dw, dwuser;
    void *wfwd_buf, *wbwd_buf, *dw_buf; /* weights in the kernels' layouts */
    char impl[3][64];                   /* each primitive's implementation */
} trn__dnnl_entry;

/* Fills entry e (zeroed but for its key: n, bf16, nthr) of layer owner:
   the thread counts and primitives of its head and the kind's own fields.
   0, or -1 with err (the cache then frees what it made). */
typedef int (*trn__dnnl_entry_init)(void *owner, trn__dnnl_entry *e, char *err);

/* cap entries of size bytes each (a kind's s_entry, trn__dnnl_entry
   first) in storage slots (borrowed: the layer's array). */
typedef struct {
    void *slots;
    size_t size;
    int cap, ne, clock;
    trn__dnnl_entry_init init;
    void (*fini)(void *entry); /* frees the kind's own fields (NULL: none) */
    void *owner;               /* the layer, given to init */
} trn__dnnl_cache;

/* An empty cache over slots (zeroed here). */
void trn__dnnl_cache_init(trn__dnnl_cache *c, void *slots, size_t size, int cap,
                          trn__dnnl_entry_init init, void (*fini)(void *entry),
                          void *owner);

/* Destroys every entry (the cache is empty after). */
void trn__dnnl_cache_fini(trn__dnnl_cache *c);

/* The entry for (n, bf16) (borrowed, valid until the next get), made on
   first use (replacing the least recently used when full) and made again
   when trn__dnnl_threads() changed since. NULL with err, the cache
   unchanged, where n < 1 or oneDNN has no primitive. */
void *trn__dnnl_cache_get(trn__dnnl_cache *c, int n, int bf16, char *err);

/* The OpenMP threads primitive `which` (0 fwd, 1 bwd data, 2 bwd weights)
   of (n, bf16) runs on, or -1 with err. */
int trn__dnnl_cache_threads(trn__dnnl_cache *c, int n, int bf16, int which, char *err);

/* "<kind>fwd <impl>, bwd-data <impl>, bwd-weights <impl>" of (n, bf16)
   into buf. 0 or -1 with err. */
int trn__dnnl_cache_describe(trn__dnnl_cache *c, int n, int bf16, const char *kind,
                             char *buf, size_t len, char *err);

#endif
