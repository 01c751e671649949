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
      cache is bounded (least recently used entry evicted), and keyed by
      the model and the precision (trn_cudnn_algo_key): a re-attach in
      another precision chooses again; which _v7 result each direction
      uses and the math type its own descriptor gets (trn_cudnn_algo_pick,
      trn_cudnn_algo_math; none qualifying ends the run, exit 1);
    - per --precision, the types the CNN runs in (trn_cudnn_types: cuDNN's
      data type for activations and conv weights, float compute and fp32
      BatchNorm parameters, tensor-op math for bf16/fp16, cuDNN's BN or
      the CNN's own at bf16; trn_cudnn_bn_type_check on what cuDNN
      derives) and what it allocates on the device (trn_cudnn_sizes, the
      buffers allocated by the same counts);
    - the combinations of options the CUDA CNN refuses before it starts
      (trn_cudnn_refuse, called by trn_config_validate: exit status 2).

    Errors: -1 with a message in err (TRN_ERRLEN) where stated.
*/
#ifndef TRN_CUDNN_HOST_H
#define TRN_CUDNN_HOST_H

#include <stddef.h>
#include <stdio.h>

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
    int math[TRN_ALGO_KINDS]; /* the math type each direction's descriptor is
                                 set to (trn_cudnn_algo_math), as ints */
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

/* Records the choice for (layer, nb): algorithms and math types per
   direction, replacing an entry with that key, or else the least recently
   used one when the cache is full. */
void trn_algo_cache_put(trn_algo_cache *c, int layer, int nb,
                        const int algo[TRN_ALGO_KINDS], const int math[TRN_ALGO_KINDS],
                        size_t ws);

/* cuDNN's values (cudnn_graph.h, cudnn_cnn.h), as ints; backend_cudnn.cu
   checks them against the headers at compile time. */
#define TRN_CUDNN_STATUS_SUCCESS 0
#define TRN_CUDNN_DETERMINISTIC 1
#define TRN_CUDNN_DEFAULT_MATH 0
#define TRN_CUDNN_TENSOR_OP_MATH 1
#define TRN_CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION 2
#define TRN_CUDNN_FMA_MATH 3

/* One result of a _v7 algorithm query (cudnnConvolution*AlgoPerf_t), as
   ints so that host code needs no CUDA header. */
typedef struct {
    int algo, status, determinism, math;
    size_t memory;
} trn_algo_perf;

struct trn_cudnn_types_s;
/* The result to use of n (cuDNN's order: the fastest first) for one
   direction at types t: the first that succeeded, is deterministic, needs
   at most ws_max bytes of workspace and, at fp32 (no tensor ops), runs
   without tensor cores (its math DEFAULT or FMA: a TENSOR_OP result would
   be TF32). Returns its index, or -1 when none qualifies: the caller fails
   (trn_cudnn_algo_none), never falls back to an algorithm not checked. */
int trn_cudnn_algo_pick(const struct trn_cudnn_types_s *t, const trn_algo_perf *r, int n,
                        size_t ws_max);

/* The math type to set on a direction's descriptor for the chosen result's
   math at types t: the result's own, except DEFAULT at fp32, set as FMA
   (DEFAULT lets cuDNN use TF32 on Ampere and later; fp32 runs without). */
int trn_cudnn_algo_math(const struct trn_cudnn_types_s *t, int result_math);

/* Writes r[0..n) to out, one line each (algorithm, status, determinism,
   math, workspace bytes): what cuDNN offered where nothing qualified. */
void trn_cudnn_algo_list(FILE *out, const trn_algo_perf *r, int n);

/* The message when no result qualifies for direction kind (0 forward, 1
   backward data, 2 backward filter) of conv op layer at precision p and
   batch nb, of n results: into err (TRN_ERRLEN). The run ends with exit
   status 1. */
void trn_cudnn_algo_none(int layer, int kind, int p, int nb, int n, char *err);

/* cuDNN's cudnnDataType_t values (cudnn_graph.h), as ints so that host
   code needs no CUDA header; backend_cudnn.cu checks them against the
   headers at compile time. */
#define TRN_CUDNN_DATA_FLOAT 0
#define TRN_CUDNN_DATA_HALF 2
#define TRN_CUDNN_DATA_BFLOAT16 9

/* What the CUDA CNN runs in at one precision (trn_precision). */
typedef struct trn_cudnn_types_s {
    int act;        /* cuDNN data type of activations, their gradients, conv
                       filters and the head's GEMM inputs (TRN_CUDNN_DATA_*) */
    int compute;    /* the convolutions' compute type: always FLOAT */
    int bn;         /* BatchNorm scale/bias/statistics type: always FLOAT
                       (what cudnnDeriveBNTensorDescriptor is documented to
                       give for FLOAT and HALF input; checked at attach by
                       trn_cudnn_bn_type_check). For BFLOAT16 input cuDNN may
                       derive BFLOAT16: bf16 runs its own BN (own_bn) */
    int tensor_ops; /* 1: CUDNN_TENSOR_OP_MATH and cuBLAS tensor-op GEMMs
                       (bf16/fp16); 0: FMA math, no TF32 (fp32) */
    int esize;      /* bytes of one activation element: 4 or 2 */
    int lp_copy;    /* conv and linear weights keep a working copy in act
                       beside their fp32 master (bf16/fp16) */
    int own_bn;     /* 1 (bf16): BatchNorm by the CNN's own kernels
                       (cuda_bn_kernels.cuh, fp32 statistics, bn_half.h);
                       0 (fp32, fp16): cuDNN's, FLOAT parameters checked */
} trn_cudnn_types;

/* The types for precision p (TRN_FP32, TRN_BF16, TRN_FP16) into t.
   Returns 0, or -1 with err for another value. */
int trn_cudnn_types_for(int p, trn_cudnn_types *t, char *err);

/* Device memory of the CUDA CNN at one batch size, by kind (bytes). */
typedef struct {
    size_t act;    /* activations and their gradients: 2 x nb x every buffer,
                      in act's element size */
    size_t master; /* fp32 weights, momenta and fp32 gradients of every param */
    size_t lp;     /* the act-type working copies of the weights (lp_copy) */
    size_t gconv;  /* one act-type buffer for a conv's weight gradient (the
                      largest conv's), converted into its fp32 gradient
                      right after cuDNN writes it (lp_copy); else 0 */
    size_t stage;  /* fp32 staging of a host batch before its conversion
                      (lp_copy: nb x the input's values); else 0 */
    size_t ones;   /* nb ones in the act type (the head's bias gradient) */
    size_t labels; /* nb labels, one byte each */
} trn_cudnn_sizes;

/* The sizes for nb examples of the layout L (cnn_layout.h, not included
   here: passed as its parts) at types t: nbufs buffers of feat[i] values
   per example, np params of pn[i] values, is_conv[i] nonzero for conv
   weights, lp[i] nonzero for the params with a working copy
   (trn_cudnn_param_lp). nbufs 0 (feat NULL) and nb 0: the weights' sizes
   alone (master, lp, gconv), checked at attach before they are made. */
void trn_cudnn_sizes_for(const trn_cudnn_types *t, int nb, int nbufs, const long *feat,
                         int np, const long *pn, const int *is_conv, const int *lp,
                         trn_cudnn_sizes *out);

/* Bytes of one activation buffer's values (or of its gradient) for nb
   examples of feat values each at types t: act is the sum of two of these
   per buffer, and the backend allocates each buffer by this function. */
size_t trn_cudnn_buf_bytes(const trn_cudnn_types *t, int nb, long feat);

/* What the CUDA CNN allocates per batch size (s_reserve): act, gconv,
   stage, ones and labels (master and lp are allocated at attach). */
size_t trn_cudnn_sizes_batch(const trn_cudnn_sizes *s);

/* Whether a param of kind (trn_pkind) keeps a working copy in the act type
   at types t: conv and linear weights (TRN_PW) do with lp_copy; biases and
   BatchNorm's gamma/beta stay fp32 (the head's bias is added in fp32,
   cuDNN's BN takes fp32). */
int trn_cudnn_param_lp(const trn_cudnn_types *t, int kind);

/* At attach, the type cuDNN derived for a BN's parameter descriptor
   (cudnnGetTensor4dDescriptor of cudnnDeriveBNTensorDescriptor's result)
   at precision p: 0 when FLOAT (the fp32 gamma, beta and statistics the
   CUDA CNN keeps), else -1 with err naming the precision and the type
   (the run ends with exit status 2, before any step). */
int trn_cudnn_bn_type_check(int p, int derived, char *err);

/* The algorithm cache's key for the model arch at precision p:
   "<arch>@<fp32|bf16|fp16>" into buf. Returns buf. */
const char *trn_cudnn_algo_key(const char *arch, int p, char *buf, size_t len);

/* The options --backend cuda cannot run with (c: a parsed config,
   borrowed): --per-layer-scale for any model (one loss scale on the
   device; the MLP and the CNN ignored the flag), --micro-batch smaller
   than the batch for any model (the steps take the batch whole); and
   with --model cnn
   optimizers other than sgd and lars, --cuda-graphs on (the CNN runs
   plain launches; auto and off are accepted). Other backends: always 0.
   Returns 0, or -1 with err naming the option. */
struct trn_config;
int trn_cudnn_refuse(const struct trn_config *c, char *err);

#endif
