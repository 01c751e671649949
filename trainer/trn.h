/*  trn.h - internals of jizhi-train, the built-in trainer (docs/design.md, The built-in
   trainer).

    The trainer is a user of the helper's public API (jizhi.h) like any
    other program; everything here is internal to trainer/ (prefix trn_).
    Pieces, one file each:
      config.c     flags and params, one namespace (--foo-bar == foo_bar)
      data.c       Fashion-MNIST (IDX + zlib), synthetic data, splits
      rng.c        xoshiro256** generator with savable state
      kernels_*.c  layer kernels, compiled in float (training) and in
                   double (gradient tests) from kernels_impl.h
      precision.c  bf16/fp16 emulation, dynamic loss scaling, schedules
      net.c        the model graph (MLP, CNN), forward/backward, params
      optim.c      SGD, LARS, LAMB, AdamW; warmup + cosine/poly schedule
      ckpt.c       checkpoint files (header, version, CRC-32)
      train.c      the training loop, evaluation, metrics
      control.c    live instructions (set/stop/pause/checkpoint/load)
      train_impl.h the trainer's state, shared by train.c, control.c, ckpt.c
      io_jizhi.c   the bridge from trn_io to libjizhi
      backend_cpu.c  BLAS threads (the CPU backend is the default path)
      backend_cuda.cu  the CUDA backend (make cuda -> jizhi-train-cuda)
      main.c       the jizhi-train program
    Errors: functions return 0/-1 (constructors NULL) and write a message
    into a caller's char buffer `err` of size TRN_ERRLEN.
*/
#ifndef TRN_H
#define TRN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "jizhi.h"

#define TRN_ERRLEN 512

/* An element-wise loop compiled for AVX-512, AVX2 and the baseline and
   chosen at load time by what the CPU has (GCC's target_clones); other
   compilers (clang builds the fuzz targets) get the baseline only. */
#if defined(__GNUC__) && !defined(__clang__)
#define TRN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRN_CLONES
#endif
#define TRN_VERSION "0.1"

/* ---- config (config.c) -------------------------------------------------- */

typedef enum { TRN_FP32 = 0, TRN_BF16 = 1, TRN_FP16 = 2 } trn_precision;

typedef struct trn_config {
    char dataset[32];             /* fashion-mnist | synthetic */
    char data_dir[256];           /* where the IDX .gz files are */
    char data_cache[256];         /* decompressed copies: "" default dir, "off" none */
    int val_size;                 /* held-out validation examples */
    int train_subset;             /* use only the first N training examples (0 = all) */
    int synthetic_n;              /* synthetic: training examples */
    char model[16];               /* mlp | cnn */
    char hidden[128];             /* mlp: hidden sizes, "256,256" */
    char channels[64];            /* cnn: channels per stage, "16,32" */
    int blocks;                   /* cnn: residual blocks per stage */
    int zero_gamma;               /* cnn: residual branch's last BN: gamma 0 */
    int epochs;                   /* epochs to train */
    long max_steps;               /* stop after this many steps (0 = no limit) */
    int batch_size;               /* global batch */
    int micro_batch;              /* gradient accumulation chunk (0 = whole batch) */
    double lr;                    /* peak learning rate (at base_batch if scaling) */
    double momentum;              /* SGD/LARS momentum */
    int nesterov;                 /* SGD: Nesterov momentum */
    double weight_decay;          /* L2 (SGD/LARS) or decoupled (AdamW/LAMB) */
    char optimizer[16];           /* sgd | lars | lamb | adamw */
    double beta1, beta2, eps;     /* Adam-family moments */
    double trust;                 /* LARS trust coefficient eta */
    double warmup_epochs;         /* linear warmup length */
    char schedule[16];            /* constant | cosine | poly */
    double poly_power;            /* poly: exponent */
    char lr_scaling[16];          /* none | linear | sqrt: lr vs batch size */
    int base_batch;               /* batch size at which lr is given (scaling) */
    char precision[8];            /* fp32 | bf16 | fp16 */
    char precision_schedule[128]; /* "fp32:1,bf16:8,fp32:1" epochs; overrides */
    char loss_scale[24];          /* auto | dynamic | none | <number> */
    double init_loss_scale;       /* dynamic: initial scale (2^16) */
    int scale_window;             /* dynamic: clean steps before x2 (2000) */
    int per_layer_scale;          /* one dynamic loss scale per layer */
    double label_smoothing;       /* cross-entropy label smoothing */
    long seed;                    /* init, shuffling */
    int threads;                  /* BLAS threads (0 = all cores) */
    int log_every;                /* report train metrics every N steps */
    int eval_every;               /* evaluate every N steps (0 = each epoch) */
    long eval_every_samples;      /* also once N samples since the last eval (0 = off) */
    long eval_at_step;            /* also at this step (0 = none): JIZHI_EVAL_AT_STEP */
    int bn_recompute;             /* BN stats from N batches of 256 before each eval */
    char checkpoint_dir[256];     /* "" = the helper's directory */
    int checkpoint_every;         /* save every N epochs (0 = only on request) */
    char resume[256];             /* checkpoint to resume from */
    char save[256];               /* write a checkpoint here at the end */
    char backend[8];              /* cpu | cuda */
    char conv[8];                 /* auto | dnnl | gemm: the CPU convolutions (net.c) */
    char matmul[8];               /* auto | dnnl | blas: the MLP's linears (net.c) */
    int quiet;                    /* no progress lines on stderr */
    int verbose;                  /* the BLAS kernels line at start */
    /* data-parallel ranks (comm.h, dist.h) */
    char comm[8];            /* auto | local | mpi | nccl: the backend */
    char allreduce[8];       /* ring | hier | native */
    int ranks_per_node;      /* hier: ranks per node (0 = MPI's shared-memory split) */
    long fusion_kb;          /* bucket size in KiB; 0 = one param per bucket; -1 = auto */
    char fusion_compare[64]; /* benchmark: KiB list the steps cycle through ("" = off) */
    int overlap;             /* all-reduce on a thread during backward */
    char wire[8];            /* fp32 | fp16 | bf16: values on the wire (ring, hier) */
    double topk;             /* 0 = dense; else the fraction of each bucket sent */
    int topk_correction;     /* top-k + sgd/lars momentum: momentum correction */
    double topk_warmup;      /* epochs of density warm-up, 25% -> topk exponentially */
    double topk_clip;        /* local gradient clipping threshold (0 = off) */
    char grad_path[8]; /* auto | device | host: --backend cuda's gradient exchange */
    char gpu_data[8];  /* auto | device | host: where --backend cuda takes its batches */
    char cuda_graphs[8];   /* auto | on | off: --backend cuda replays the step as a CUDA
                              graph */
    char cuda_epilogue[8]; /* lt | kernel: --backend cuda's forward bias + ReLU */
    /* not options: set from a restored checkpoint (--resume,
       JIZHI_LOAD_CHECKPOINT: main.c) */
    int bf16_from_ckpt; /* the checkpoint's own precision or schedule names bf16
                           (before the trial's params), so bf16 is not refused
                           under --conv/--matmul dnnl (net_kernels.c) */
    char conv_route[8]; /* "dnnl" | "gemm": the CNN's convolution path its run
                           began on, recorded in the checkpoint; under --conv
                           auto a resume keeps it ("": the current rule) */
} trn_config;

/* 1 when c computes in bf16 at some point (--precision, or a
   --precision-schedule naming bf16). */
int trn_config_wants_bf16(const trn_config *c);

/* Fills `c` with the defaults. */
void trn_config_defaults(trn_config *c);

/* Parses argv (flags --foo-bar V or --foo-bar=V). Returns 0, 1 when
   --help was given (usage printed to `out`), or -1 with a message in err. */
int trn_config_parse_args(trn_config *c, int argc, char **argv, FILE *out, char *err);

/* Param lookup callback: returns the param's text in buf (1) or 0. */
typedef int (*trn_param_fn)(void *ud, const char *name, char *buf, size_t len);

/* Applies params (name = flag with '-' -> '_') from `fn`; a param wins over a
   flag. Returns 0 or -1 with a message naming the param. */
int trn_config_apply_params(trn_config *c, trn_param_fn fn, void *ud, char *err);

/* The keys of params_json (a JSON object: the trial's params, as
   jz_params_json gives them) that name no option, in buf as "learning_rate
   (did you mean lr?), foo" (NUL-terminated, truncated): each with the option
   it names in other words, where one is close (the same letters, its
   initials, a word or a part of its name). Returns how many (0 for NULL or
   what is not a JSON object). */
size_t trn_config_unknown_params(const char *params_json, char *buf, size_t len);

/* Sets one option by its param or flag name from text. Returns 0, -1 with
   err (bad value), or -2 (unknown name). */
int trn_config_set(trn_config *c, const char *name, const char *value, char *err);

/* A live change of option `name` to `value` on c, as `set` makes it: the
   name must be live, a --micro-batch larger than the new batch drops to 0,
   and the whole config must validate. 0 (c changed), -1 with err (c
   unchanged), -2 for an unknown name. */
int trn_config_set_live(trn_config *c, const char *name, const char *value, char *err);

/* Writes option `name`'s value as text (round-trips through set).
   Returns 0, or -1 for an unknown name. */
int trn_config_get(const trn_config *c, const char *name, char *buf, size_t len);

/* 1 when option `name` (param or flag form) may change while the trial
   runs (a live `set`), else 0 (unknown names too). */
int trn_config_is_live(const char *name);

/* The i-th (from 0) live option's param name ('_' form) into buf: 1, or 0
   when i is past the last. */
int trn_config_live_param(size_t i, char *buf, size_t len);

/* The options a checkpoint carries: writes "param=value\n" for each (param
   names in '_' form) into buf, NUL-terminated, truncated to len - 1 bytes.
   Returns the length written. */
size_t trn_config_restored_text(const trn_config *c, char *buf, size_t len);

/* Checks cross-field constraints. Returns 0 or -1 with err. */
int trn_config_validate(const trn_config *c, char *err);

/* The most ops a model's graph holds (net.c, the CUDA CNN); a cnn with more
   is refused by trn_config_validate ("model too large"). */
#define TRN_MAX_OPS 256

/* Ops in net.c's cnn with `stages` stages of `blocks` residual blocks (stem
   3, a transition 3 per later stage, a block 7, pooling and head 2); its
   params are fewer. */
int trn_cnn_ops(int stages, int blocks);

/* Writes the usage text. */
void trn_config_usage(FILE *out);

/* Parses "256,256" into sizes (max n). Returns count or -1. */
int trn_parse_int_list(const char *s, int *out, int max);

/* Parses a comma-separated list of KiB (each -1 .. 2^20) into out (at most
   max); returns the count, or -1 when malformed or too long. */
int trn_parse_kb_list(const char *s, long *out, int max);
#define TRN_COMPARE_KB_MAX 8 /* --fusion-compare: at most this many thresholds */

trn_precision trn_precision_from_name(const char *s);
const char *trn_precision_name(trn_precision p);

/* ---- rng (rng.c) --------------------------------------------------------- */

typedef struct {
    uint64_t s[4];
} trn_rng;

void trn_rng_seed(trn_rng *r, uint64_t seed);
uint64_t trn_rng_next(trn_rng *r);
double trn_rng_uniform(trn_rng *r); /* [0,1) */
double trn_rng_normal(trn_rng *r);
/* Fisher-Yates permutation of 0..n-1. */
void trn_rng_perm(trn_rng *r, int *perm, int n);

/* ---- data (data.c) -------------------------------------------------------- */

typedef struct {
    int n;       /* examples */
    int dim;     /* features per example (c*h*w) */
    int c, h, w; /* image shape */
    int classes; /* label count */
    float *x;    /* n*dim, normalised */
    uint8_t *y;  /* n labels */
    /* The training set of an IDX pair also as its pixel bytes, so that
       x[i] == lut[code[i]] bit for bit: the batches' gathers read these,
       a quarter of the bytes of x (gather.h), at one more byte per value
       held (Fashion-MNIST: 43 MB beside x's 172 MB). Kept only where the
       run has a vector lookup to read them with (trn_gather_code_simd:
       fp32's, or bf16's for a run asking for bf16 at start or in its
       schedule; not for a CUDA run with --gpu-data device); NULL otherwise
       (a later live change to bf16 then uses the bf16 copy), for
       every other set (validation, test, synthetic), or where that memory
       was not there (silently: the gathers then read x). */
    uint8_t *code;
    float lut[256];
} trn_dataset;

/* Reads an IDX images+labels pair (gzip) into a dataset. Returns 0 or -1
   with err naming the file and what is wrong (missing, corrupt, truncated). */
int trn_data_load_idx(trn_dataset *d, const char *images_gz, const char *labels_gz,
                      char *err);

/* Loads train/val/test per the config (dataset, data_dir, val_size,
   train_subset, synthetic_n). test NULL: the test set is not read, only
   checked to be readable (a start that does not need it yet:
   trn_trainer_defer_test). Returns 0 or -1 with err. */
int trn_data_load(const trn_config *c, trn_dataset *train, trn_dataset *val,
                  trn_dataset *test, char *err);

/* Loads the test set alone (what trn_data_load puts in test). Returns 0
   or -1 with err. */
int trn_data_load_test(const trn_config *c, trn_dataset *test, char *err);

/* Synthetic 10-class problem of 28x28 "images" (learnable, seeded). */
int trn_data_synthetic(trn_dataset *d, int n, uint64_t seed, char *err);

void trn_data_free(trn_dataset *d);

/* ---- kernels (kernels_impl.h; suffix _f float, _d double) ---------------- */

#define TRN_KERNEL_DECLS(R, S)                                                           \
    void trn_linear_fwd_##S(const R *x, const R *w, const R *b, R *y, int n, int k,      \
                            int m);                                                      \
    void trn_linear_bwd_##S(const R *x, const R *w, const R *dy, R *dx, R *dw, R *db,    \
                            int n, int k, int m, R beta);                                \
    void trn_relu_fwd_##S(const R *x, R *y, long n);                                     \
    void trn_relu_bwd_##S(const R *y, const R *dy, R *dx, long n, R beta);               \
    void trn_conv_fwd_##S(const R *x, const R *w, R *y, R *cols, int c, int n, int h,    \
                          int wd, int co, int k, int stride, int pad);                   \
    void trn_conv_bwd_##S(const R *x, const R *w, const R *dy, R *dx, R *dw, R *cols,    \
                          int c, int n, int h, int wd, int co, int k, int stride,        \
                          int pad, R beta, R dxbeta);                                    \
    void trn_bn_fwd_train_##S(const R *x, const R *g, const R *b, R *y, R *mean,         \
                              R *invstd, int c, long s, R eps);                          \
    void trn_bn_fwd_eval_##S(const R *x, const R *g, const R *b, R *y, const R *rmean,   \
                             const R *rvar, int c, long s, R eps);                       \
    void trn_bn_bwd_##S(const R *x, const R *g, const R *mean, const R *invstd,          \
                        const R *dy, R *dx, R *dg, R *db, int c, long s, R beta,         \
                        R dxbeta);                                                       \
    void trn_gap_fwd_##S(const R *x, R *y, int c, int n, int hw);                        \
    void trn_gap_bwd_##S(const R *dy, R *dx, int c, int n, int hw, R dxbeta);            \
    void trn_bn_fwd_train_nhwc_##S(const R *x, const R *g, const R *b, R *y, R *mean,    \
                                   R *invstd, int c, long s, R eps);                     \
    void trn_bn_fwd_eval_nhwc_##S(const R *x, const R *g, const R *b, R *y,              \
                                  const R *rmean, const R *rvar, int c, long s, R eps);  \
    void trn_bn_bwd_nhwc_##S(const R *x, const R *g, const R *mean, const R *invstd,     \
                             const R *dy, R *dx, R *dg, R *db, int c, long s, R beta,    \
                             R dxbeta);                                                  \
    void trn_gap_fwd_nhwc_##S(const R *x, R *y, int c, int n, int hw);                   \
    void trn_gap_bwd_nhwc_##S(const R *dy, R *dx, int c, int n, int hw, R dxbeta);       \
    double trn_softmax_ce_##S(const R *logits, const uint8_t *labels, R *dlogits, int n, \
                              int k, double smoothing, double gscale, int *correct);

TRN_KERNEL_DECLS(float, f)
TRN_KERNEL_DECLS(double, d)

/* Fused channels-last BN (+ ReLU) of the oneDNN path (kernels_nhwc.c),
   for float activations (_f: stored values rounded to p) and for real
   bf16 storage (_bf: uint16_t, every store rounded to bf16; p ignored).
   Forward: training statistics into mean/invstd (rmean == NULL) or the
   running ones (rmean, rvar), y = round_p(BN(x)), then max(y, 0) when
   relu. Backward: BN's gradients of dy, masked by the ReLU output ry
   (ry == NULL: no ReLU), beta/dxbeta as the other kernels (0: write,
   else add), dx rounded to p as it is stored; dx NULL: parameters only. */
void trn_bn_relu_fwd_nhwc_f(const float *x, const float *g, const float *b, float *y,
                            float *mean, float *invstd, const float *rmean,
                            const float *rvar, int c, long s, float eps, trn_precision p,
                            int relu);
void trn_bn_relu_bwd_nhwc_f(const float *x, const float *g, const float *mean,
                            const float *invstd, const float *ry, const float *dy,
                            float *dx, float *dg, float *db, int c, long s, float beta,
                            float dxbeta, trn_precision p);
void trn_bn_relu_fwd_nhwc_bf(const uint16_t *x, const float *g, const float *b,
                             uint16_t *y, float *mean, float *invstd, const float *rmean,
                             const float *rvar, int c, long s, float eps, trn_precision p,
                             int relu);
void trn_bn_relu_bwd_nhwc_bf(const uint16_t *x, const float *g, const float *mean,
                             const float *invstd, const uint16_t *ry, const uint16_t *dy,
                             uint16_t *dx, float *dg, float *db, int c, long s,
                             float beta, float dxbeta, trn_precision p);
/* The element-wise passes of the bf16 storage path (kernels_nhwc.c), all
   rounding to nearest even as they store: conversions; y = a + b (relu:
   max(., 0)); the ReLU and its gradient (dxbeta 0: write, else add);
   o = beta*o + g; x *= f; global average pooling of NHWC bf16 into float
   [n][c] and its gradient (dx = dxbeta*dx + dy/hw). */
void trn_bf16_from_f32(uint16_t *o, const float *x, long n);
/* trn_bf16_from_f32 on one path, for tests: wide 1 the 512-bit function
   (GCC builds, CPUs with AVX-512BW), 0 the target clones (the one the CPU
   picks at load time). 0, or -1 (nothing written) where the wide path is
   absent. */
int trn__bf16_from_f32_path(uint16_t *o, const float *x, long n, int wide);
void trn_bf16_to_f32(float *o, const uint16_t *x, long n);
void trn_add_relu_bf(const uint16_t *a, const uint16_t *b, uint16_t *y, long n, int relu);
void trn_relu_fwd_bf(const uint16_t *x, uint16_t *y, long n);
void trn_relu_bwd_bf(const uint16_t *y, const uint16_t *dy, uint16_t *dx, long n,
                     float dxbeta);
/* trn_relu_bwd_bf with dxbeta 0 over n rows of m, and colsum[j] = the sum
   of column j of dx, row after row (the sums a linear's bias gradient
   takes: trn_dlin_bwd's dysum), in one pass. -1, nothing done, where the
   pass would run on more than one OpenMP thread (then the two passes). */
int trn_relu_bwd_colsum_bf(const uint16_t *y, const uint16_t *dy, uint16_t *dx, int n,
                           int m, float *colsum);
void trn_acc_bf(uint16_t *o, const uint16_t *g, float beta, long n);
void trn_scale_bf(uint16_t *x, float f, long n);
void trn_gap_fwd_nhwc_bf(const uint16_t *x, float *y, int c, int n, int hw);
void trn_gap_bwd_nhwc_bf(const float *dy, uint16_t *dx, int c, int n, int hw,
                         float dxbeta);

/* Bytes of im2col columns a conv kernel builds at a time: a tile of whole
   images (at least one), so the columns it multiplies are still in cache.
   `cols` needs min(n, tile) images of c*k*k*ho*wo values, at most
   max(one image, TRN_CONV_TILE bytes). */
#define TRN_CONV_TILE (256L * 1024)

/* Output size of a conv along one axis. */
static inline int trn_conv_out(int in, int k, int stride, int pad)
{
    return (in + 2 * pad - k) / stride + 1;
}

/* ---- precision (precision.c) --------------------------------------------- */

float trn_round_bf16(float x);
float trn_round_fp16(float x);
/* Rounds n values in place to the storage format p (no-op for fp32). */
void trn_round_buf(float *x, long n, trn_precision p);
/* 1 when any of n values is inf or NaN. */
int trn_has_nonfinite(const float *x, long n);

typedef struct {
    double scale;    /* current loss scale */
    int dynamic;     /* adjusts itself */
    long good_steps; /* clean steps since the last change */
    int window;      /* clean steps before growing */
    double growth;   /* x2 */
    double backoff;  /* x0.5 */
    long skipped;    /* steps skipped so far (overflow) */
} trn_scaler;

void trn_scaler_init(trn_scaler *s, double init, int dynamic, int window);
/* Records one step's result; returns 1 when the step must be skipped. */
int trn_scaler_update(trn_scaler *s, int overflow);

#define TRN_MAX_PHASES 16
typedef struct {
    int n;
    trn_precision prec[TRN_MAX_PHASES];
    int epochs[TRN_MAX_PHASES];
} trn_prec_schedule;

/* Parses "fp32:1,bf16:8,fp32:1". Returns 0 or -1 with err. */
int trn_prec_schedule_parse(trn_prec_schedule *s, const char *text, char *err);
/* Precision for (0-based) epoch; the last phase continues. */
trn_precision trn_prec_schedule_at(const trn_prec_schedule *s, int epoch);

/* ---- net (net.c) ---------------------------------------------------------- */

typedef enum { TRN_PW = 0, TRN_PBIAS, TRN_PBN } trn_pkind;

typedef struct {
    char name[32];
    trn_pkind kind; /* weights get weight decay and LARS; biases and BN not */
    long n;         /* element count */
    float *w;       /* fp32 master */
    float *g;       /* fp32 gradient (mean over the batch) */
    float *wlp;     /* working copy rounded to the compute precision; the
                       master itself (wlp == w) in fp32 and for the MLP's
                       linears on oneDNN in bf16 (linear_dnnl.c rounds
                       them into its own bf16 copy) */
    float *m, *v;   /* optimiser state (momentum / Adam moments) */
    int layer;      /* index of the op owning it (per-layer loss scales) */
    long st;        /* BN gamma and beta: offset of their BN's running mean in
                       trn_net_state (the variance follows); 0 for others */
} trn_param;

typedef struct trn_net trn_net;

/* Builds the model in the config for inputs (c,h,w) and `classes`.
   Returns NULL with err. Caller owns; destroy with trn_net_destroy. */
trn_net *trn_net_new(const trn_config *cfg, int c, int h, int w, int classes, char *err);
void trn_net_destroy(trn_net **np);

int trn_net_nparams(const trn_net *n);
trn_param *trn_net_param(trn_net *n, int i);
/* Layers that own params (for per-layer loss scales). */
int trn_net_nlayers(const trn_net *n);
/* A short text naming the architecture (checkpoint compatibility). */
const char *trn_net_arch(const trn_net *n);

/* Extra non-parameter state (BN running statistics). */
long trn_net_state_count(const trn_net *n);
float *trn_net_state(trn_net *n);

/* Initialises weights from rng (He uniform, zero biases, BN 1/0). */
void trn_net_init(trn_net *n, trn_rng *r);

/* Sets the compute precision (rounds the working copy of weights). */
void trn_net_set_precision(trn_net *n, trn_precision p);
/* Refreshes the working copies after the master weights changed. */
void trn_net_sync_weights(trn_net *n);

void trn_net_zero_grad(trn_net *n);

/* One forward (+ backward when train) pass over x[nb*dim] with labels y.
   With train: gradients of (loss * gscale) are ADDED to each param's g;
   gscale includes the loss scale and the micro-batch weight. With per-layer
   scales (lscale != NULL, one per layer) layer l's gradients carry lscale[l]
   instead of the global scale; the caller unscales. Returns the mean loss,
   *correct gets the count of right predictions. -1 on allocation failure. */
/* x NULL: the batch is already in trn_net_input_bf16's buffer (-1 where
   that gives NULL). */
double trn_net_forward_backward(trn_net *n, const float *x, const uint8_t *y, int nb,
                                int train, double label_smoothing, double gscale,
                                const double *lscale, int *correct);

/* The model's input buffer, sized for nb examples (NULL on allocation
   failure): a caller may gather a batch straight into it and pass it as x
   to trn_net_forward_backward, saving a copy. Borrowed; valid until the
   next call that takes a larger nb. */
float *trn_net_input(trn_net *n, int nb);

/* The model's bf16 input buffer for nb examples where the MLP runs in bf16
   on oneDNN (its first layer reads only that copy), else NULL (or on
   allocation failure): a caller may gather the batch straight into it in
   bf16 (trn_gather_rows_bf16) and pass x NULL to trn_net_forward_backward,
   saving the fp32 batch and its conversion. Borrowed, as trn_net_input. */
uint16_t *trn_net_input_bf16(trn_net *n, int nb);

/* Precise BN: sets the BN running statistics to the average of the batch
   statistics of count examples x[count*dim], taken in chunks of `chunk`,
   under the weights in force (forward only; gradients untouched). Only
   evaluation reads the running statistics, so training is unchanged. 0
   (also without BN), -1 on allocation failure (statistics unchanged). */
int trn_net_bn_recompute(trn_net *n, const float *x, int count, int chunk);

/* Like trn_net_forward_backward in evaluation mode (running BN stats). */
double trn_net_eval(trn_net *n, const float *x, const uint8_t *y, int nb, int *correct);

/* The rows the next trn_net_eval of an evaluation takes with `left` rows
   still to go (at most left; 0 when left <= 0): 256 (it bounds the CNN's
   im2col workspace), and for the MLP on oneDNN a whole number of its rows
   per thread (trn_dlin_rows_per_thread) up to that times the configured
   threads, so that the forward runs on up to all of them with the same
   rows on each, whatever --threads is (an uneven share rounds bf16
   differently: the loss then moved by ~1e-7 with --threads), and all of
   `left` below one thread's rows; capped so that the activations of a
   chunk fit TRN_EVAL_BYTES; where not even one thread's rows fit (a very
   wide layer), one thread takes the rows that fit, at least 1. */
int trn_net_eval_chunk(const trn_net *n, int left);

/* The activation bytes an evaluation's chunk may take (trn_net_eval_chunk):
   its buffers are kept after it, never shrunk. */
#define TRN_EVAL_BYTES (128L << 20)

/* trn_net_eval_chunk's rule, pure: left rows to go, per rows a thread,
   most = per x threads, a chunk's row_bytes against budget bytes. Below
   per rows fitting: max(1, budget / row_bytes) rows (before: per, the
   budget given way). */
int trn__eval_rows(int left, int per, long most, long row_bytes, long budget);

/* The bytes the passes' buffers hold now (activations, and gradients once
   a training pass reserved them; bf16 copies included): an evaluation
   reserves no gradients. */
long trn_net_buffer_bytes(const trn_net *n);

/* Called during backward when param i's gradient for this pass is final
   (ops run in reverse, so params arrive in backward order). NULL clears.
   ud is borrowed. */
typedef void (*trn_grad_hook)(void *ud, int i);
void trn_net_set_grad_hook(trn_net *n, trn_grad_hook fn, void *ud);

/* A test hook, told at the start of every forward pass (training,
   evaluation, --bn-recompute) with its batch, as that pass runs: NULL
   removes it. */
void trn_net_set_forward_hook(trn_net *n, trn_grad_hook fn, void *ud);

/* Sum of squares of all gradients. */
double trn_net_grad_sqnorm(const trn_net *n);

/* Which convolutions run (oneDNN with its kernels' names at batch nb and
   the current precision, creating them if needed, or im2col + GEMM) into
   buf. 0, or -1 with the reason in buf. */
int trn_net_conv_describe(trn_net *n, int nb, char *buf, size_t len);

/* The path the CNN's convolutions run on for the whole run: "dnnl" (oneDNN,
   NHWC) or "gemm" (im2col + GEMM); NULL for a model without convolutions.
   A checkpoint records it (conv_route). Static string. */
const char *trn_net_conv_route(const trn_net *n);

/* 1 when that path was a choice (this build has oneDNN, so the rule or
   --conv picked it), 0 where the build has im2col + GEMM only. */
int trn_net_conv_route_chosen(const trn_net *n);

/* Which kernels the linear layers run for batch nb (the first linear's:
   "oneDNN 2.6.3, ReLU fused, bf16 kernels: matmul fwd brg:...",
   or "OpenBLAS sgemm (why)") into buf. 0, or -1 with the error in buf. */
int trn_net_matmul_describe(trn_net *n, int nb, char *buf, size_t len);

/* Why the last pass returned -1 (a oneDNN failure, else out of memory).
   Borrowed. */
const char *trn_net_error(const trn_net *n);

/* ---- optimisers (optim.c) -------------------------------------------------- */

typedef enum { TRN_SGD = 0, TRN_LARS, TRN_LAMB, TRN_ADAMW } trn_opt_kind;

typedef struct {
    trn_opt_kind kind;
    double momentum, weight_decay, beta1, beta2, eps, trust;
    int nesterov;
    long t; /* Adam-family step count (bias correction) */
    /* LARS: per param, the gradient norm for the trust ratio instead of the
       norm of g (top-k ranks: an estimate of the dense gradient's norm, as
       g holds only what was sent). NULL: from g. Borrowed. */
    const double *gnorm;
    /* SGD/LARS: g already carries momentum (top-k momentum correction,
       dist.h): applied without the optimiser's momentum; weight decay,
       identical on every rank, keeps its own momentum in m. */
    int corrected;
} trn_optim;

int trn_optim_from_name(const char *s); /* kind or -1 */
void trn_optim_init(trn_optim *o, const trn_config *c);
/* Applies one update with learning rate lr to every param of the net from
   its g. Master weights only; call trn_net_sync_weights after. */
void trn_optim_step(trn_optim *o, trn_param *params, int np, double lr);

/* Learning-rate factor in [0,1] at progress `epoch_f` (fractional epoch)
   for warmup + schedule over `epochs` total. */
double trn_lr_factor(const char *schedule, double epoch_f, double warmup_epochs,
                     double epochs, double poly_power);
/* Multiplier for lr when the batch goes from b0 to b1 under rule
   (none/linear/sqrt). */
double trn_lr_scale_rule(const char *rule, double b0, double b1);

/* ---- training (train.c) ------------------------------------------------- */

/* How the trainer talks to the world: libjizhi in production (io_jizhi.c),
   a fake in tests. Every function may be NULL. */
typedef struct {
    void *ud;
    int (*report)(void *ud, long step, const char *metric, double value);
    int (*poll)(void *ud, jz_instruction *out);
    int (*ack)(void *ud, const jz_instruction *ins, int applied, const char *detail);
    const char *(*checkpoint_dir)(void *ud);
    int (*checkpoint_done)(void *ud, long step, const char *path);
    int (*param)(void *ud, const char *name, char *buf, size_t len); /* for LOAD */
    /* sends what was reported at once and waits until it is stored: after
       the evaluation at eval_at_step, which a fork's decision waits on */
    int (*flush)(void *ud);
} trn_io;

typedef struct trn_trainer trn_trainer;

/* Backend hooks: a device backend (CUDA) may take over the training step of
   an MLP. NULL means the CPU path. */
typedef struct trn_backend trn_backend;
typedef struct trn_comm trn_comm;

/* Creates a trainer: builds and initialises the model. The datasets are
   borrowed and must outlive it. Returns NULL with err. */
trn_trainer *trn_trainer_new(const trn_config *cfg, const trn_dataset *train,
                             const trn_dataset *val, const trn_dataset *test, char *err);
void trn_trainer_destroy(trn_trainer **tp);

void trn_trainer_set_io(trn_trainer *t, const trn_io *io);

/* The test set read when the run needs it (its end, after the last
   step; never for a run ended by a stop instruction) instead of at the
   start: test (borrowed, empty, must outlive the trainer) is loaded with
   trn_data_load_test(config) there and used in place of the test set
   given to trn_trainer_new. A load that fails then fails the run. */
void trn_trainer_defer_test(trn_trainer *t, trn_dataset *test);
void trn_trainer_set_backend(trn_trainer *t, const trn_backend *b);

/* Data-parallel ranks (comm.h): makes this trainer one rank of c (borrowed;
   must outlive the trainer). Collective: every rank calls it after
   trn_trainer_new with the same config. With more than one rank each step
   takes this rank's shard of the global batch (batch_size examples: the
   first batch_size % ranks ranks take one more; a rank may get none) and
   sums the shard-weighted gradients over ranks, so the update is the
   global-batch mean; BatchNorm normalises with each rank's own shard
   statistics and the running statistics are averaged over ranks every step.
   Also broadcasts rank 0's weights. With a device backend that has
   set_comm (CUDA, MLP) the backend takes the steps and exchanges its
   gradients itself (dist_dev.h; --grad-path). Returns 0 or -1 with err. */
int trn_trainer_set_comm(trn_trainer *t, trn_comm *c, char *err);

/* Top-k density at fractional epoch `epoch`: c->topk, or during the first
   c->topk_warmup epochs 25% falling exponentially to c->topk. */
double trn_topk_density(const trn_config *c, double epoch);

/* Runs one optimisation step (one global batch). Returns 0, 1 when the
   step was skipped (loss-scale overflow), -1 on error. */
int trn_trainer_step(trn_trainer *t);

/* Polls and applies pending instructions (normally called by run at each
   step boundary). Returns 0, 1 if a stop was requested, -1 on error. */
int trn_trainer_control(trn_trainer *t);

/* Trains to the end (epochs or max_steps, or a stop instruction),
   evaluating and reporting as configured; reports test_acc at the end.
   Returns 0 or -1 with err. */
int trn_trainer_run(trn_trainer *t, char *err);

/* Evaluates on a dataset: mean loss and accuracy. 0; -1 where a forward
   failed on this rank (out of memory, oneDNN; trn_net_error says why);
   -2 where (data parallel) only another rank's failed; -3 where the sum
   that tells every rank failed on this rank: loss and acc NaN after each. */
int trn_trainer_evaluate(trn_trainer *t, const trn_dataset *d, double *loss, double *acc);

/* Accessors and live setters used by control and tests. */
long trn_trainer_step_count(const trn_trainer *t);
double trn_trainer_lr(const trn_trainer *t); /* the lr the next step uses */
double trn_trainer_last_loss(const trn_trainer *t);
const trn_scaler *trn_trainer_scaler(const trn_trainer *t);
trn_net *trn_trainer_net(trn_trainer *t);
const trn_config *trn_trainer_config(const trn_trainer *t);
/* Live change of one param by name ("lr", "batch_size", ...). Returns 0,
   or -1 with a reason in err (unknown, or not changeable while running). */
int trn_trainer_set_param(trn_trainer *t, const char *name, const char *value, char *err);

/* --verbose on the CPU backend: the convolutions' and the linears' kernels
   in the current precision, on stderr, at this rank's share of the next
   batch (a describe builds that size's kernels). at_start: first "model:
   ARCH, N parameters (B bytes of fp32 gradients)", then "convolutions:
   ..." (under a device backend "CPU evaluation: convolutions: ...": the
   CPU only evaluates); else "bf16 from step N: convolutions: ...". The
   trainer calls it (rank 0, no backend) at its next step whenever the
   precision differs from the one last described: a schedule's epoch, a
   live `set`, a live `load` (train_run.c). */
void trn_trainer_say_kernels(trn_trainer *t, int at_start);

/* Checkpoints (ckpt.c). Save writes atomically (temp file + rename).
   Load refuses foreign, truncated, corrupt or incompatible files and then
   changes nothing. Return 0 or -1 with err. */
int trn_trainer_save(trn_trainer *t, const char *path, char *err);
int trn_trainer_load(trn_trainer *t, const char *path, char *err);
/* trn_trainer_load on the bytes trn_ckpt_read returned (borrowed); path
   only names the file in messages. */
int trn_trainer_load_buf(trn_trainer *t, const unsigned char *buf, size_t len,
                         const char *path, char *err);
/* After a load: the trial's params (the helper's, JIZHI_PARAMS standalone)
   that may change live are set on top of the checkpoint's config, as a live
   `load` does. A param that cannot be set is skipped and named in detail
   (empty when all were set). Collective with several ranks (one broadcast
   per live param, nothing allocated); a rank whose broadcast fails says so
   and ends the process (_exit 1, no MPI_Finalize: the launcher ends the
   others, which may wait in the broadcast). */
void trn_trainer_reapply_params(trn_trainer *t, char *detail, size_t len);

/* Verifies a checkpoint file's header and checksum only. */
int trn_ckpt_verify(const char *path, char *err);

/* Reads the checkpoint at path once and checks its envelope (magic, version,
   length, checksum): what trn_ckpt_config_buf and trn_trainer_load_buf then
   parse, so the config and the weights come from the same bytes. Returns the
   file's bytes (*len of them; the last 4 are its CRC-32); caller owns the
   result and must free() it. NULL with err. */
unsigned char *trn_ckpt_read(const char *path, size_t *len, char *err);

/* trn_ckpt_read_config on bytes from trn_ckpt_read (borrowed); path only
   names the file in messages. Sets c->conv_route where the checkpoint
   recorded one. 0, or -1 with err (c unchanged). */
int trn_ckpt_config_buf(const unsigned char *buf, size_t len, const char *path,
                        trn_config *c, char *err);

/* Sets on c the options a checkpoint restores (its config text), as a load
   will, without a trainer: the run's config before its model is built, so
   what is chosen once per process (the CNN's convolution path) follows the
   checkpoint. Reads and checks the whole file. 0, or -1 with err (c
   unchanged). */
int trn_ckpt_read_config(const char *path, trn_config *c, char *err);

/* The options a checkpoint restores that cannot change live (--seed,
   --zero-gamma, ...: how the run began) whose value in `now` (restored)
   differs from `was` (the resuming command's): "seed=3 (this command: 1),
   ..." into buf (NUL-terminated, truncated). Returns the length (0: none). */
size_t trn_ckpt_kept_options(const trn_config *was, const trn_config *now, char *buf,
                             size_t len);

/* The trn_io and param lookup over a libjizhi trial (io_jizhi.c). */
void trn_io_jizhi(trn_io *io, jz_trial *t);
int trn_jz_param(void *ud, const char *name, char *buf, size_t len);

/* The default CPU BLAS thread setup (backend_cpu.c). */
void trn_cpu_set_threads(int n);
int trn_cpu_cores(void);

/* Optional device backend interface (backend_cuda.cu implements it). */
struct trn_dist_opts; /* dist.h */
struct trn_backend {
    const char *name;
    /* Creates device state for the net (MLP only). Returns 0 or -1. */
    int (*attach)(void *self, trn_net *net, const trn_config *cfg, char *err);
    /* One full step on a batch: forward, backward (loss scaled by
       loss_scale), overflow check; when no overflow, unscale and apply SGD
       with lr. Copies nothing back. Returns loss; *overflow set. */
    double (*step)(void *self, const float *x, const uint8_t *y, int nb, double lr,
                   double loss_scale, int *overflow, double *grad_sqnorm);
    /* Copies device master weights into the net's params. */
    void (*sync_to_host)(void *self, trn_net *net);
    void (*detach)(void *self);
    void *self;
    /* Optional, after self so that older initialisers stay valid (NULL:
       one rank only). Makes the backend one rank of a
       data-parallel run over c (borrowed, must outlive the backend): the
       gradients go through a device gradient exchange (dist_dev.h) with
       options o on path grad_path ("auto", "device" or "host"), built at
       the next attach. Checks what it can at once: 0 with a line naming
       the path taken in msg, or -1 with the reason in msg (TRN_ERRLEN). */
    int (*set_comm)(void *self, trn_comm *c, const struct trn_dist_opts *o,
                    const char *grad_path, char *msg);
    /* With set_comm: one step on this rank's shard x, y of nb examples
       (nb may be 0) of a global batch of `global`: forward, backward of
       loss_scale * (shard loss sum) / global, the gradients summed over the
       ranks, the overflow check and |G|^2 on the sums (the same on every
       rank), the update unless overflow. Returns the shard's loss sum, or
       -1 when the exchange failed. */
    double (*step_dist)(void *self, const float *x, const uint8_t *y, int nb, int global,
                        double lr, double loss_scale, int *overflow, double *grad_sqnorm);
    /* Optional (NULL: every batch comes from host memory through step or
       step_dist). Device-resident data: copies the training set d (read
       during the call only) into device memory once; it stays there
       across attach/detach. Returns 0, or -1 with the reason
       in err (TRN_ERRLEN); then nothing is kept and batches keep coming
       from the host. */
    int (*set_data)(void *self, const trn_dataset *d, char *err);
    /* With set_data: the epoch's order, n indices into d (borrowed: copied
       to the device; the trainer calls it once per epoch). 0, or -1 with
       err. */
    int (*set_order)(void *self, const int *perm, int n, char *err);
    /* With set_data: one step on the examples perm[at .. at + nb) of the
       last set_order, gathered on the device (gather.h): as step (one
       rank, global == nb) or step_dist (after set_comm: this rank's shard
       of a global batch of `global`), with no batch copied from the host.
       Returns the loss sum over the nb examples (not the mean), or -1 when
       the gradient exchange failed. */
    double (*step_at)(void *self, int at, int nb, int global, double lr,
                      double loss_scale, int *overflow, double *grad_sqnorm);
    /* Optional, both or neither (NULL: no small-batch measure; the trainer
       then reports no gradient-noise inputs). set_half: the next one-rank
       step or step_at (not step_dist) also measures the squared norms of
       the gradient of its first `half` examples and of the rest (0: it
       does not), without changing the step's update. half_sqnorms: after
       that step, sq[0] and sq[1] in the units of gns.h (unscaled, share of
       the mean); 0, or -1 when the last step measured nothing. */
    void (*set_half)(void *self, int half);
    int (*half_sqnorms)(void *self, double sq[2]);
};

#endif
