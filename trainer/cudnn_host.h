/*  cudnn_host.h - the CUDA CNN's host-side logic around cuDNN
    (backend_cudnn.cu), without CUDA, so every machine's unit tests check
    it (tests/test_trn_cuda_host.c):

    - the version check after cuDNN is opened at run time: the library's
      major version must be the header's (cuDNN's API and its descriptors
      differ between majors), and the CUDA runtime major it was built for
      must be the one this program runs; a library whose minor version
      is older than the headers' is used with a warning;
    - the cache of convolution algorithm choices per (layer, batch size):
      cuDNN's _v7 heuristics and workspace queries run once per pair, a
      batch size seen before reuses its choice and workspace size. The
      cache is bounded (least recently used entry evicted).

    Errors: -1 with a message in err (TRN_ERRLEN) where stated.
*/
#ifndef TRN_CUDNN_HOST_H
#define TRN_CUDNN_HOST_H

#include <stddef.h>

/* The major version in a cuDNN version number: major*10000 + minor*100 +
   patch from cuDNN 9 on, major*1000 + minor*100 + patch before. */
int trn_cudnn_major(long version);

/* The minor version in a cuDNN version number (as trn_cudnn_major). */
int trn_cudnn_minor(long version);

/* Checks the cuDNN opened at run time: lib (cudnnGetVersion), hdr (the
   CUDNN_VERSION this program was built with), lib_cudart
   (cudnnGetCudartVersion: the CUDA runtime cuDNN was built for, major*1000
   + minor*10) and rt (cudaRuntimeGetVersion; 0 when unknown: not
   checked). Returns 0, or -1 with err naming both versions of what
   differs. On 0, warn (TRN_ERRLEN) holds a line to print once on stderr
   when the library's minor version is older than the headers' (the run
   goes on), else "". */
int trn_cudnn_version_check(long lib, long hdr, long lib_cudart, long rt, char *err,
                            char *warn);

/* The file name to dlopen for the cuDNN major of hdr (CUDNN_VERSION):
   "libcudnn.so.9" for 9.x. Returns buf. */
const char *trn_cudnn_soname(long hdr, char *buf, size_t len);

/* Formats a cuDNN version number as "9.19.0" into buf. Returns buf. */
const char *trn_cudnn_version_text(long version, char *buf, size_t len);

/* Formats a CUDA version number (major*1000 + minor*10) as "13.0". */
const char *trn_cuda_version_text(long version, char *buf, size_t len);

#define TRN_ALGO_KINDS 3 /* forward, backward data, backward filter */

typedef struct {
    int layer, nb;            /* the key: conv op index, batch size */
    int algo[TRN_ALGO_KINDS]; /* cuDNN's algorithm enums, as ints */
    size_t ws;                /* workspace bytes the three need at most */
    unsigned long used;       /* the cache clock at the last hit or put */
} trn_algo_entry;

typedef struct {
    trn_algo_entry *e; /* cap entries, owned */
    int n, cap;
    unsigned long clock;
    long hits, misses, evictions;
    char *model; /* trn_algo_cache_attach's key (the model's arch), owned */
} trn_algo_cache;

/* An empty cache of at most cap entries (cap >= 1). Returns 0, or -1 when
   out of memory. Destroy with trn_algo_cache_fini (also frees the key). */
int trn_algo_cache_init(trn_algo_cache *c, int cap);
void trn_algo_cache_fini(trn_algo_cache *c);

/* At each attach of the CUDA CNN: c (zeroed before the first call) kept
   across detach/attach. When it already holds the choices for model (the
   net's arch text, copied) with cap entries, nothing changes: a batch
   size seen before the re-attach (a live `set`, a load) reuses its
   choice. Otherwise it is emptied and keyed to model. Returns 0, or -1
   when out of memory (c then empty, without a key). */
int trn_algo_cache_attach(trn_algo_cache *c, int cap, const char *model);

/* The entry of (layer, nb), marked used, or NULL (a miss; counted).
   Borrowed: valid until the next put. */
const trn_algo_entry *trn_algo_cache_get(trn_algo_cache *c, int layer, int nb);

/* Records the choice for (layer, nb), replacing an entry with that key, or
   else the least recently used one when the cache is full. */
void trn_algo_cache_put(trn_algo_cache *c, int layer, int nb,
                        const int algo[TRN_ALGO_KINDS], size_t ws);

#endif
