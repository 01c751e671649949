/*  cnn_layout.h - the residual CNN's graph as the CUDA CNN builds it
    (backend_cudnn.cu): its ops in forward order, its activation buffers
    and its parameters in net.c's order, built from the net's arch string
    alone ("cnn:CxHxW:c0,c1,...:bB:K", trn_net_arch). Host code without
    CUDA, so every machine's unit tests check that it agrees with net.c
    (tests/test_trn_cuda_host.c): the checkpoint and the data-parallel
    gradient buffer hold the parameters of both in one order, each at the
    offset the sizes before it give, and the BN running statistics in one
    state layout (per BN its mean then its variance).

    A value struct on caller storage (large: TRN_MAX_OPS ops); no
    allocation. Errors: -1 with a message in err (TRN_ERRLEN).
*/
#ifndef TRN_CNN_LAYOUT_H
#define TRN_CNN_LAYOUT_H

#include "trainer/trn.h"

typedef enum {
    TRN_Q_CONV = 0, /* 3x3 convolution, pad 1 */
    TRN_Q_BN,       /* spatial BatchNorm */
    TRN_Q_RELU,
    TRN_Q_ADD, /* out = in + in2 (the residual) */
    TRN_Q_GAP, /* global average pooling */
    TRN_Q_LINEAR
} trn_qkind;

typedef struct {
    trn_qkind kind;
    int in, in2, out;   /* buffer ids (in2: ADD only, else -1) */
    int pw, pb;         /* param indices (-1: none) */
    int c, h, w, co;    /* input shape per sample; conv/linear output channels */
    int k, stride, pad; /* conv */
    int layer;          /* net.c's layer number (conv, BN, linear count) or -1 */
    long st;            /* BN: offset of its running mean in the state */
    int stage;          /* the backward stage after which its params are final
                           (ops with params, last op first: 0, 1, ...), or -1 */
} trn_qop;

typedef struct {
    int c, h, w; /* per sample (NHWC on the device) */
} trn_qbuf;

typedef struct {
    char name[32];  /* net.c's name: l<layer>.weight|bias|gamma|beta */
    trn_pkind kind; /* as net.c: weight, bias or BN */
    long n;         /* element count */
    long off;       /* offset in the flat parameter vector (sizes before it) */
    int conv;       /* a conv weight: its op index (OIHW <-> KRSC), else -1 */
} trn_qparam;

typedef struct {
    trn_qop op[TRN_MAX_OPS];
    int nops;
    trn_qbuf buf[TRN_MAX_OPS + 1]; /* buf[0] the input; the last the logits */
    int nbufs;
    trn_qparam p[TRN_MAX_OPS]; /* a cnn has fewer params than ops */
    int np;
    long total;  /* parameter values in all */
    long nstate; /* BN running statistics in all */
    int nstages; /* backward stages: the ops with params */
    int classes;
} trn_cnn_layout;

/* Builds net.c's cnn from its arch string into L (overwritten). Returns 0,
   or -1 with err when arch is not a cnn's or holds more than TRN_MAX_OPS
   ops. */
int trn_cnn_layout_build(trn_cnn_layout *L, const char *arch, char *err);

/* Param i's backward stage into stage[i] (L->np values): the stage of the
   op that owns it, for the data-parallel gradient exchange (devplan.h,
   dist_dev.h): on several ranks the CUDA CNN reports each stage once its
   op's parameter gradients are final. */
void trn_cnn_layout_param_stages(const trn_cnn_layout *L, int *stage);

/* Compares L with the parameters and state of net (borrowed): same count,
   and for each parameter in order the same name, kind and size (offsets
   follow), and L's state count. Returns the index of the first parameter
   that differs (np when only the counts differ), or -1 when they agree;
   what differs into err. */
int trn_cnn_layout_compare(const trn_cnn_layout *L, trn_net *net, char *err);

#endif
