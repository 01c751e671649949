/*  linear_dnnl.h - fully connected layers through oneDNN's matmul (or, with
    JIZHI_DNNL_LINEAR=ip, inner-product) primitives, for the MLP of net.c
    when the build has oneDNN (TRN_HAVE_DNNL) and --matmul picks it.

    oneDNN picks its kernels by what the CPU has (cpuid) at run time (AMX
    or avx512_core_bf16 in bf16 where the CPU has them). One trn_dlin per
    linear layer holds its primitives (forward with bias and, for a hidden
    layer, the ReLU fused as a post-op; backward data; backward weights
    with the bias gradient), created once per batch size and precision and
    cached, so a step creates nothing. Activations are row-major
    [n][features], weights jizhi's [m][k] fp32 (net.c's master weights on
    the bf16 path), in bf16 rounded to bf16 (to nearest even) once per
    forward.
    bf16: activations and their gradients are real bf16 (uint16_t) in and
    out, except a layer made with f32out, whose output (the logits) and its
    gradient are fp32 (the gradient is rounded to bf16 for the backward);
    products in bf16, fp32 accumulation; weight and bias gradients fp32.
    fp32: everything fp32.

    Without oneDNN in the build every function fails (trn_dnnl_available()
    in conv_dnnl.h says 0); net.c then keeps OpenBLAS's sgemm.
    Errors: 0/-1 (constructors NULL) with a message in err (TRN_ERRLEN).
*/
#ifndef TRN_LINEAR_DNNL_H
#define TRN_LINEAR_DNNL_H

#include <stddef.h>

typedef struct trn_dlin trn_dlin;

/* One layer of k inputs and m outputs, with a bias when bias != 0, a ReLU
   fused into its forward when relu != 0, and in bf16 a fp32 output (and
   output gradient) when f32out != 0. Creates no primitive yet. Caller owns
   the result and must destroy it; NULL with err when out of memory or
   without oneDNN. */
trn_dlin *trn_dlin_new(int k, int m, int bias, int relu, int f32out, char *err);
void trn_dlin_destroy(trn_dlin **dp);

/* y[n][m] = x[n][k] w[m][k]^T + b (then max(0, .) with relu). x, y are
   float, or with bf16 != 0 uint16_t bf16 values (y float with f32out).
   0 or -1 with err. */
int trn_dlin_fwd(trn_dlin *d, const void *x, const float *w, const float *b, void *y,
                 int n, int bf16, char *err);

/* Backward of the layer's linear part (the ReLU's mask is applied to dy
   before, by the ReLU op): dw = beta*dw + dy^T x and db = beta*db +
   sum(dy) (fp32; db ignored without a bias), and when dx is not NULL
   dx = dy w (written, not accumulated). x, dy, dx as in the forward; x
   and w are those of the last trn_dlin_fwd at batch n, unchanged since
   (the backward may reuse the forward's reordered copy of w). dysum
   (may be NULL): the column sums of dy already taken, in row order (the
   ReLU's backward took them as it wrote dy: trn_relu_bwd_colsum_bf);
   the bias gradient is then those. 0 or -1 with err. */
int trn_dlin_bwd(trn_dlin *d, const void *x, const float *w, const void *dy, void *dx,
                 float *dw, float *db, int n, int bf16, float beta, const float *dysum,
                 char *err);

/* Tests: how the entry of (n, bf16) holds its weights: 0 as they are (or
   a plain bf16 copy), 1 packed by wpack.h, 2 packed by oneDNN's reorders
   (a layout other than wpack.h's); -1 with err. And a switch making
   entries made from now on pack by oneDNN's reorders (the fallback),
   whatever the layout. */
int trn__dlin_packing(trn_dlin *d, int n, int bf16, char *err);

/* 1 when trn_dlin_bwd takes its bias gradient from dysum (the matmul
   kind; the inner products' comes from oneDNN); 0 without oneDNN. */
int trn_dlin_takes_sums(const trn_dlin *d);
void trn__dlin_force_reorder(int on);

/* Rows of a batch per OpenMP thread of the MLP's step: 256 in fp32 and
   in bf16 without AMX, 1024 in bf16 where oneDNN's effective ISA has AMX
   (linear_dnnl.c, S_ROWS_AMX). Without oneDNN: 0. */
int trn_dlin_rows_per_thread(int bf16);

/* trn_dlin_rows_per_thread times the threads trn_dnnl_set_threads
   configured: the smallest batch whose step runs on all of them (at most
   INT_MAX). Without oneDNN: 0. */
int trn_dlin_eval_rows(int bf16);

/* The OpenMP threads primitive `which` (0 forward, 1 backward data, 2
   backward weights) of batch n runs on, creating the primitives when
   needed: one per trn_dlin_rows_per_thread rows of the batch, at most
   the count trn_dnnl_set_threads configured. The count or -1 with err. */
int trn_dlin_threads(trn_dlin *d, int n, int bf16, int which, char *err);

/* Sets OpenMP's thread count to the one a step of the MLP at batch n (in
   bf16 when bf16 != 0) runs on, the primitives' (trn_dlin_threads), so
   that every parallel region of the step (the element-wise passes and
   copies between the linears too) runs on it; returns the count to give
   trn_dlin_threads_pop after the step. Without oneDNN: nothing, 0. */
int trn_dlin_threads_push(int n, int bf16);
void trn_dlin_threads_pop(int old);

/* The oneDNN primitives and implementations this layer runs at batch n
   ("inner product fwd brgemm:..., bwd-data ..., bwd-weights ...") into buf, creating the
   primitives when needed. 0 or -1 with err. */
int trn_dlin_describe(trn_dlin *d, int n, int bf16, char *buf, size_t len, char *err);

#endif
