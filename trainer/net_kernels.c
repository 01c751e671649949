/*  net_kernels.c - which kernels the network's ops run on: the MLP's
    linears' oneDNN twins (linear_dnnl.c) and the --matmul routing between
    them and OpenBLAS, and the lines --verbose prints about the
    convolutions and the linears. Part of net.c's object (net_impl.h).
*/
#include <stdio.h>
#include <string.h>

#include "trainer/net_impl.h"

/* fp32 linears through oneDNN by default (--matmul auto) when 1. End to
   end (the MLP 784-256-256-10, alternating pairs of --matmul blas and
   dnnl, docs/bench.md "The MLP in bf16 through oneDNN"), oneDNN's fp32
   matmuls were 1.06-1.12x OpenBLAS's sgemm in samples/s and 1.06-1.12x
   per CPU-second at batch 128 and 1024 on one and two threads. fp16, an
   emulation either way, was not measured and stays on OpenBLAS. */
#define S_DNNL_FP32 1

/* The MLP's oneDNN twins: each linear gets one, with its ReLU fused
   (forward) when one follows; the buffers between them are stored in bf16
   in half mode, all but the logits. */
int trn__net_mlp_dnnl(trn_net *n)
{
    n->bufs[0].hs = 1;
    for (int i = 0; i < n->nops; i++) {
        trn__op *o = &n->ops[i];
        if (o->kind != OP_LINEAR)
            continue;
        int relu = i + 1 < n->nops && n->ops[i + 1].kind == OP_RELU;
        o->relu_op = relu ? i + 1 : -1;
        n->bufs[o->out].hs = relu;
        if (relu)
            n->bufs[n->ops[i + 1].out].hs = 1;
        if (!(o->dl = trn_dlin_new(o->c, o->co, o->pb >= 0, relu, !relu, n->conv_err)))
            return -1;
    }
    return 0;
}

/* Which linears run on oneDNN in the current precision (--matmul): auto is
   oneDNN in bf16 (real bf16 kernels) and in fp32 (while S_DNNL_FP32), and
   fp16 (emulated) on OpenBLAS. A ReLU after a oneDNN linear runs
   inside it (forward). Sets half mode. */
void trn__net_mm_route(trn_net *n)
{
    int on = n->mm == TRN__MM_DNNL ||
             (n->mm == TRN__MM_AUTO &&
              (n->prec == TRN_BF16 || (S_DNNL_FP32 && n->prec == TRN_FP32)));
    int any = 0;
    for (int i = 0; i < n->nops; i++) {
        trn__op *o = &n->ops[i];
        if (!o->dl)
            continue;
        any = o->dl_on = on;
        if (o->relu_op >= 0)
            n->ops[o->relu_op].fwd_only = on;
    }
    n->half = (n->nhwc || any) && n->prec == TRN_BF16;
}

int trn_net_conv_describe(trn_net *n, int nb, char *buf, size_t len)
{
    const trn__op *first = NULL;
    for (int i = 0; i < n->nops && !first; i++)
        if (n->ops[i].kind == OP_CONV)
            first = &n->ops[i];
    if (!first) {
        snprintf(buf, len, "none (no convolutions in this model)");
        return 0;
    }
    if (!first->dc) {
        snprintf(buf, len, "im2col + OpenBLAS GEMM, CNHW activations%s",
                 trn_dnnl_available() ? " (--conv gemm)" : " (no oneDNN in this build)");
        return 0;
    }
    char ver[64], impl[256];
    trn_dnnl_version(ver, sizeof ver);
    int bf16 = n->prec == TRN_BF16;
    if (trn_dconv_describe(first->dc, nb, bf16, impl, sizeof impl, n->conv_err) < 0) {
        snprintf(buf, len, "%s", n->conv_err);
        return -1;
    }
    snprintf(buf, len, "%s, NHWC activations, %s kernels: %s", ver,
             bf16 ? "bf16" : "fp32", impl);
    return 0;
}

int trn_net_matmul_describe(trn_net *n, int nb, char *buf, size_t len)
{
    const trn__op *first = NULL;
    for (int i = 0; i < n->nops && !first; i++)
        if (n->ops[i].kind == OP_LINEAR)
            first = &n->ops[i];
    if (!first) {
        snprintf(buf, len, "none (no linear layers)");
        return 0;
    }
    if (!first->dl_on) {
        const char *why = !trn_dnnl_available()   ? "no oneDNN in this build"
                          : n->mm == TRN__MM_BLAS ? "--matmul blas"
                          : !first->dl            ? "the CNN's head"
                          : n->prec == TRN_FP16   ? "fp16 is emulated"
                                                  : "--matmul auto";
        snprintf(buf, len, "OpenBLAS sgemm%s (%s)",
                 n->prec == TRN_FP32 ? "" : ", precision emulated by rounding", why);
        return 0;
    }
    char ver[64], impl[256];
    trn_dnnl_version(ver, sizeof ver);
    int bf16 = n->prec == TRN_BF16;
    if (trn_dlin_describe(first->dl, nb, bf16, impl, sizeof impl, n->conv_err) < 0) {
        snprintf(buf, len, "%s", n->conv_err);
        return -1;
    }
    snprintf(buf, len, "%s, ReLU fused, %s kernels: %s", ver, bf16 ? "bf16" : "fp32",
             impl);
    return 0;
}
