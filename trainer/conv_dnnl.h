/*  conv_dnnl.h - convolutions through oneDNN (Intel's deep-learning kernel
    library, Debian's libdnnl-dev; the library PyTorch's CPU convolutions
    use), for the CNN of net.c when the build found it (TRN_HAVE_DNNL).

    oneDNN picks its kernels by what the CPU has (cpuid) at run time. One
    trn_dconv per convolution layer holds its primitives (forward, backward
    data, backward weights and the weight reorders), created once per batch
    size and precision and cached, so a step creates nothing. Activations
    are NHWC (channels last, the layout net.c keeps across every layer of
    the CNN on this path), weights are jizhi's OIHW ([co][c][k][k], as the
    GEMM path), reordered into the kernel's blocked layout once per call.
    bf16: the activations and their gradients are real bf16 (uint16_t,
    NHWC) in and out, as net.c stores them on this path; the weights come
    as fp32 (net.c's working copy) and are rounded to bf16 by the weight
    reorder; the kernels multiply in bf16 with fp32 accumulation
    (avx512_core_bf16 or AMX where the CPU has it) and the weight gradient
    comes back in fp32.

    Without oneDNN in the build every function fails and
    trn_dnnl_available() says 0; net.c then uses the im2col + GEMM path.
    Errors: 0/-1 (constructors NULL) with a message in err (TRN_ERRLEN).
*/
#ifndef TRN_CONV_DNNL_H
#define TRN_CONV_DNNL_H

#include <stddef.h>

/* 1 when this build has oneDNN. */
int trn_dnnl_available(void);

/* 1 when oneDNN runs real bf16 kernels on this CPU: its effective ISA
   (cpuid, capped by ONEDNN_MAX_CPU_ISA) has avx512_core_bf16 (AVX512-BF16,
   or AMX). Without them oneDNN's bf16 primitives are missing (AVX2: none
   created) or reference/gemm fallbacks several times slower than
   OpenBLAS's emulation, so --matmul/--conv auto keep bf16 off oneDNN.
   0 without oneDNN in the build. */
int trn_dnnl_bf16_native(void);

/* oneDNN's effective ISA ("avx2", "avx512_core", "avx512_core_bf16",
   "avx512_core_amx", ...; "none" without oneDNN), a static string. */
const char *trn_dnnl_isa_name(void);

/* "oneDNN 2.6.3" (or "no oneDNN in this build") into buf. */
void trn_dnnl_version(char *buf, size_t len);

/* Threads the oneDNN kernels use (its OpenMP runtime); n <= 0 leaves it. */
void trn_dnnl_set_threads(int n);

typedef struct trn_dconv trn_dconv;

/* One convolution layer: input c x h x w per image, co outputs, k x k
   kernel, stride, pad; no bias. Creates nothing yet (primitives come at
   the first call of each batch size). Caller owns the result and must
   destroy it; NULL with err when out of memory or without oneDNN. */
trn_dconv *trn_dconv_new(int c, int h, int w, int co, int k, int stride, int pad,
                         char *err);
void trn_dconv_destroy(trn_dconv **dp);

/* y[n][ho][wo][co] = conv(x[n][h][w][c], w[co][c][k][k]); x and y are
   float, or with bf16 != 0 uint16_t bf16 values. 0 or -1 with err. */
int trn_dconv_fwd(trn_dconv *d, const void *x, const float *w, void *y, int n, int bf16,
                  char *err);

/* Backward of trn_dconv_fwd with the same x and w: dw = beta*dw + dL/dw
   (fp32, OIHW), and when dx is not NULL dx = dxbeta*dx + dL/dx (NHWC; x,
   dy and dx float, or bf16 values with bf16 != 0). 0 or -1. */
int trn_dconv_bwd(trn_dconv *d, const void *x, const float *w, const void *dy, void *dx,
                  float *dw, int n, int bf16, float beta, float dxbeta, char *err);

/* The oneDNN implementations this layer runs for batch n ("fwd brg:avx512_core,
   bwd-data ..., bwd-weights ...") into buf, creating the primitives when
   needed. 0 or -1 with err. */
int trn_dconv_describe(trn_dconv *d, int n, int bf16, char *buf, size_t len, char *err);

/* The OpenMP threads primitive `which` (0 forward, 1 backward data, 2
   backward weights) of batch n runs on, creating the primitives when
   needed: the count trn_dnnl_set_threads configured, except the backward
   weights, which run on one thread per 256 images (fewer threads than
   configured below 256 images a thread: there they were slower on two
   threads than on one). The weight reorders always run on one. The
   count or -1 with err. */
int trn_dconv_threads(trn_dconv *d, int n, int bf16, int which, char *err);

#endif
