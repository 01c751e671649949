/*  net_impl.h - the layout of trn_net (net.c), internal to the files that
    implement the network: net.c (construction and the passes) and
    net_kernels.c (which kernels run). Ops read numbered buffers and write
    one; see net.c's header for the graph and the precision modes.
*/
#ifndef TRN_NET_IMPL_H
#define TRN_NET_IMPL_H

#include <stdint.h>

#include "trainer/conv_dnnl.h"
#include "trainer/linear_dnnl.h"
#include "trainer/trn.h"

typedef enum { OP_LINEAR, OP_RELU, OP_CONV, OP_BN, OP_ADD, OP_GAP } trn__kind;

/* --matmul: where the MLP's linears run (oneDNN's inner products or
   OpenBLAS's sgemm); auto picks by precision (net.c, s_mm_route). */
typedef enum { TRN__MM_AUTO, TRN__MM_DNNL, TRN__MM_BLAS } trn__mm;

/* Which path the CNN's convolutions take for the whole run, and why
   (trn__net_conv_route; --verbose says it). */
typedef enum {
    TRN__CONV_DNNL,     /* oneDNN, NHWC activations */
    TRN__CONV_NO_DNNL,  /* im2col + GEMM: no oneDNN in this build */
    TRN__CONV_ASKED,    /* --conv gemm */
    TRN__CONV_CHANNELS, /* images with several channels */
    TRN__CONV_NO_BF16,  /* bf16 in the run (--precision or its schedule), no
                           bf16 instructions for oneDNN on this CPU */
    TRN__CONV_RESUMED,  /* --conv auto resuming a checkpoint whose run began on
                           im2col + GEMM (its conv_route) */
} trn__conv_path;

typedef struct {
    trn__kind kind;
    int in, in2, out;       /* buffer ids (in2: ADD only) */
    int pw, pb;             /* param indices, -1 when none */
    int c, h, w;            /* input shape per sample (linear: c features) */
    int co, k, stride, pad; /* conv / linear output features */
    int layer;              /* param-owning layer index, or -1 */
    long st;                /* BN: offset of running mean (var follows) in state */
    float *mean, *invstd;   /* BN: batch statistics saved for backward */
    trn_dconv *dc;          /* conv on the oneDNN path (owned), else NULL */
    trn_dlin *dl;           /* MLP linear with a oneDNN twin (owned), else NULL */
    int dl_on;              /* linear: runs on dl in the current precision */
    int relu_op;  /* BN / ADD on the oneDNN path, a linear with dl: the ReLU fused
                     into it (a linear's when dl_on), or -1 */
    int fused;    /* ReLU: runs inside the BN before it (forward and backward) */
    int fwd_only; /* ReLU: its forward runs inside the ADD or linear before it */
} trn__op;

typedef struct {
    int feat;          /* values per sample */
    float *x, *g;      /* cap * feat */
    uint16_t *xh, *gh; /* hcap * feat: bf16 storage (half mode, hs buffers) */
    int hs;      /* stored in bf16 in half mode (the CNN's NHWC activations, the MLP's) */
    int written; /* gradient holds a contribution this pass */
    double gs;   /* scale the gradient carries */
} trn__buf;

#define MAX_OPS TRN_MAX_OPS /* a cnn with more is refused by trn_net_new */
#define MAX_PARAMS TRN_MAX_OPS

struct trn_net {
    trn__op ops[MAX_OPS];
    int nops;
    trn__buf bufs[MAX_OPS + 1];
    int nbufs;
    trn_param params[MAX_PARAMS];
    int np;
    int nlayers;
    float *state; /* BN running mean/var */
    long nstate;
    float bn_momentum; /* the running statistics' update weight (s_bn_momentum) */
    float *cols;       /* im2col workspace */
    long cols_per_sample;
    int cap;  /* samples the activation buffers (x, cols) hold */
    int gcap; /* samples the gradient buffers (g) hold: training's batches only */
    int classes;
    trn_precision prec;
    int nhwc;                  /* CNN activations channels last: the oneDNN conv path */
    trn__conv_path conv_path;  /* the convolutions' path and why (nhwc: DNNL) */
    char conv_bf16_why[192];   /* TRN__CONV_NO_BF16: the option that named bf16 */
    trn__mm mm;                /* --matmul (the MLP) */
    int half;                  /* bf16 on oneDNN (nhwc, or the MLP's linears): the hs
                                  buffers are stored in bf16 */
    int hcap;                  /* samples the bf16 activations (xh) hold */
    int ghcap;                 /* samples the bf16 gradients (gh) hold */
    int xh_given;              /* this pass's bufs[0].xh came filled (x NULL) */
    char conv_err[TRN_ERRLEN]; /* why the last pass failed (oneDNN) */
    int grad_fresh;     /* zero_grad was called: the next backward writes, not adds */
    float *dysum;       /* a ReLU's backward's column sums of the gradient it wrote */
    size_t dysum_cap;   /* bytes */
    int dysum_buf;      /* the buffer whose gradient they sum (-1: none; the next op's) */
    long dysum_joined;  /* ReLU passes that took them (tests) */
    trn_grad_hook hook; /* told when a param's gradient is final (or NULL) */
    void *hook_ud;
    trn_grad_hook fwd_hook; /* a test's, told at each forward with its batch */
    void *fwd_hook_ud;
    char arch[256];
};

/* Gives each linear of the MLP its oneDNN twin (its ReLU fused when one
   follows) and marks the buffers stored in bf16 in half mode. 0, or -1
   with n->conv_err. */
int trn__net_mlp_dnnl(trn_net *n);

/* 1 when the run computes in bf16 at some point (--precision, or a
   --precision-schedule naming bf16). */
int trn__net_wants_bf16(const trn_config *cfg);

/* Chooses the CNN's convolution path once for the run, for images of c
   channels: oneDNN (NHWC) unless --conv gemm, no oneDNN, several channels,
   or, under --conv auto, the path a resumed checkpoint's run began on
   (cfg->conv_route, recorded at save) or, where the checkpoint recorded none
   or there is none, bf16 anywhere in cfg on a CPU without bf16
   instructions. The layouts differ (NHWC with fused ops vs CNHW with im2col),
   so an epoch cannot change it. Sets n->conv_path; returns 1 for oneDNN. */
int trn__net_conv_route(trn_net *n, const trn_config *cfg, int c);

/* Refuses flag (--matmul or --conv) set to val "dnnl" where it cannot run
   well: no oneDNN in the build, images with c != 1 (--conv), or bf16 on a
   CPU without bf16 instructions (trn_dnnl_bf16_native) unless the bf16 came
   from the checkpoint itself (cfg->bf16_from_ckpt: run as the emulation, as
   after a live change). 0, or -1 with a
   message in err (TRN_ERRLEN). */
int trn__net_dnnl_check(const trn_config *cfg, const char *flag, const char *val, int c,
                        char *err);

/* Sets which linears run on oneDNN for n->prec and n->mm, the ReLUs that
   run inside them, and half mode. */
void trn__net_mm_route(trn_net *n);

/* The pass buffers for nb samples (net_bufs.c): the activations (x, xh,
   the im2col tile), and with grads (a training pass) their gradients (g,
   gh) too; an evaluation's forward reserves no gradients (trn_net_eval).
   0 or -1 (out of memory; what was reserved stays, the capacities
   unchanged). */
int trn__net_reserve(trn_net *n, int nb, int grads);

/* Around a forward (and backward) of nb samples: where the MLP's linears
   run on oneDNN, sets OpenMP's thread count to theirs at nb
   (trn_dlin_threads_push) for every region of the pass; returns what
   trn__net_threads_pop restores (0: nothing was set, the CNN and OpenBLAS
   keep --threads). */
int trn__net_threads_push(const trn_net *n, int nb);
void trn__net_threads_pop(int old);

#endif
