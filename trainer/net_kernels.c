/*  net_kernels.c - which kernels the network's ops run on: the MLP's
    linears' oneDNN twins (linear_dnnl.c) and the --matmul routing between
    them and OpenBLAS, and the lines --verbose prints about the
    convolutions and the linears. Part of net.c's object (net_impl.h).
*/
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "trainer/net_impl.h"

/* fp32 linears through oneDNN by default (--matmul auto) when 1. End to
   end (the MLP 784-256-256-10, alternating pairs of --matmul blas and
   dnnl, docs/bench.md "The MLP in bf16 through oneDNN"), oneDNN's fp32
   matmuls were 1.06-1.12x OpenBLAS's sgemm in samples/s and 1.06-1.12x
   per CPU-second at batch 128 and 1024 on one and two threads; with
   oneDNN capped at AVX2 (its gemm:jit, against OpenBLAS's Haswell kernels)
   1.01-1.09x at batch 1024 and 0.97-1.06x at 128, at AVX512_CORE
   1.06-1.13x (docs/bench.md, "On CPUs without bf16 instructions"). fp16, an emulation
   either way, was not measured and stays on OpenBLAS. bf16 goes to oneDNN
   only where the CPU has bf16 instructions (trn_dnnl_bf16_native). */
#define S_DNNL_FP32 1

int trn__net_wants_bf16(const trn_config *cfg)
{
    return trn_config_wants_bf16(cfg);
}

int trn__net_conv_route(trn_net *n, const trn_config *cfg, int c)
{
    /* under --conv auto a resume keeps the path its run began on (the
       checkpoint's conv_route), whatever precision it was saved in */
    int is_auto = !strcmp(cfg->conv, "auto");
    n->conv_path = !trn_dnnl_available()        ? TRN__CONV_NO_DNNL
                   : !strcmp(cfg->conv, "gemm") ? TRN__CONV_ASKED
                   : c != 1                     ? TRN__CONV_CHANNELS
                   : is_auto && strcmp(cfg->conv_route, "dnnl") &&
                           trn__net_wants_bf16(cfg) && !trn_dnnl_bf16_native()
                       ? TRN__CONV_NO_BF16
                   : is_auto && !strcmp(cfg->conv_route, "gemm") ? TRN__CONV_RESUMED
                                                                 : TRN__CONV_DNNL;
    /* what named bf16, for --verbose (the config may change later: a live
       change, a live load) */
    n->conv_bf16_why[0] = 0;
    if (n->conv_path == TRN__CONV_NO_BF16)
        snprintf(n->conv_bf16_why, sizeof n->conv_bf16_why, "%s %s%s",
                 strcmp(cfg->precision, "bf16") ? "--precision-schedule" : "--precision",
                 strcmp(cfg->precision, "bf16") ? cfg->precision_schedule : "bf16",
                 cfg->bf16_from_ckpt ? ", from the checkpoint" : "");
    return n->conv_path == TRN__CONV_DNNL;
}

int trn__net_dnnl_check(const trn_config *cfg, const char *flag, const char *val, int c,
                        char *err)
{
    if (strcmp(val, "dnnl"))
        return 0;
    const char *alt = !strcmp(flag, "--conv") ? "gemm" : "blas";
    if (!trn_dnnl_available())
        snprintf(err, TRN_ERRLEN,
                 "%s dnnl: this jizhi-train was built without oneDNN (install "
                 "libdnnl-dev and rebuild, or use %s %s)",
                 flag, flag, alt);
    else if (!strcmp(flag, "--conv") && c != 1)
        snprintf(err, TRN_ERRLEN,
                 "--conv dnnl: the oneDNN path takes single-channel images");
    else if (trn__net_wants_bf16(cfg) && !cfg->bf16_from_ckpt && !trn_dnnl_bf16_native())
        snprintf(err, TRN_ERRLEN,
                 "%s dnnl: this CPU has no bf16 instructions for oneDNN (its ISA: %s), "
                 "where bf16 would run on slow fallbacks or not at all; use %s auto or "
                 "%s %s (bf16 emulated)",
                 flag, trn_dnnl_isa_name(), flag, flag, alt);
    else
        return 0;
    return -1;
}

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
   oneDNN in bf16 where the CPU has bf16 instructions (real bf16 kernels;
   without them OpenBLAS's emulation), in fp32 (while S_DNNL_FP32), and
   fp16 (emulated) on OpenBLAS; --matmul dnnl too keeps bf16 off oneDNN
   without bf16 instructions (trn_net_new refuses it when the run starts in
   bf16; reached later, by a checkpoint or a live change, bf16 runs as
   OpenBLAS's emulation). A ReLU after a oneDNN linear runs
   inside it (forward). Sets half mode. */
void trn__net_mm_route(trn_net *n)
{
    int bf16_ok = n->prec != TRN_BF16 || trn_dnnl_bf16_native();
    int on = bf16_ok && (n->mm == TRN__MM_DNNL ||
                         (n->mm == TRN__MM_AUTO &&
                          (n->prec == TRN_BF16 || (S_DNNL_FP32 && n->prec == TRN_FP32))));
    int any = 0;
    for (int i = 0; i < n->nops; i++) {
        trn__op *o = &n->ops[i];
        if (!o->dl)
            continue;
        any = o->dl_on = on;
        if (o->relu_op >= 0)
            n->ops[o->relu_op].fwd_only = on;
    }
    /* the CNN's oneDNN layout is chosen once (trn_net_new); bf16 reached
       later (a checkpoint, a live change) on a CPU without bf16
       instructions runs as the emulation on its fp32 kernels */
    n->half = ((n->nhwc && trn_dnnl_bf16_native()) || any) && n->prec == TRN_BF16;
}

int trn__net_threads_push(const trn_net *n, int nb)
{
    for (int i = 0; i < n->nops; i++)
        if (n->ops[i].dl_on)
            return trn_dlin_threads_push(nb, n->half);
    return 0;
}

void trn__net_threads_pop(int old)
{
    if (old > 0)
        trn_dlin_threads_pop(old);
}

int trn__eval_rows(int left, int per, long most, long row_bytes, long budget)
{
    if (left <= 0)
        return 0;
    long rows = row_bytes > 0 ? budget / row_bytes : LONG_MAX; /* rows that fit */
    if (rows < per) /* not even one thread's rows fit: one thread, what fits */
        return (int)(rows < 1 ? 1 : rows < left ? rows : left);
    if (left < per) /* one thread takes the rest */
        return left;
    long fit = rows / per * per;
    if (most > fit)
        most = fit;
    if (most < per)
        most = per;
    long m = (long)left / per * per; /* whole rows per thread on each thread */
    return (int)(m < most ? m : most);
}

int trn_net_eval_chunk(const trn_net *n, int left)
{
    enum { base = 256 };
    for (int i = 0; i < n->nops; i++)
        if (n->ops[i].dl_on) {
            long row = 0; /* an evaluation's bytes per row: x, and xh in bf16 */
            for (int b = 0; b < n->nbufs; b++)
                row += (long)n->bufs[b].feat *
                       (long)(sizeof(float) + (n->half && n->bufs[b].hs ? 2 : 0));
            return trn__eval_rows(left, trn_dlin_rows_per_thread(n->half),
                                  trn_dlin_eval_rows(n->half), row, TRN_EVAL_BYTES);
        }
    return left < base ? left : base;
}

void trn_net_set_forward_hook(trn_net *n, trn_grad_hook fn, void *ud)
{
    n->fwd_hook = fn;
    n->fwd_hook_ud = ud;
}

const char *trn_net_conv_route(const trn_net *n)
{
    for (int i = 0; i < n->nops; i++)
        if (n->ops[i].kind == OP_CONV)
            return n->conv_path == TRN__CONV_DNNL ? "dnnl" : "gemm";
    return NULL;
}

int trn_net_conv_route_chosen(const trn_net *n)
{
    return n->conv_path != TRN__CONV_NO_DNNL;
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
        const char *why = n->conv_path == TRN__CONV_NO_DNNL ? "no oneDNN in this build"
                          : n->conv_path == TRN__CONV_ASKED ? "--conv gemm"
                          : n->conv_path == TRN__CONV_CHANNELS
                              ? "images with several channels"
                          : n->conv_path == TRN__CONV_RESUMED
                              ? "the checkpoint's run began on this path "
                                "(conv_route=gemm), kept on resume"
                              : "no bf16 instructions for oneDNN on this CPU";
        if (n->conv_path != TRN__CONV_NO_BF16) {
            snprintf(buf, len, "im2col + OpenBLAS GEMM, CNHW activations (%s)", why);
            return 0;
        }
        /* a process whose config named bf16 when it started (the command
           line, or a restored checkpoint's) stays on this path in its
           other precisions: the layout is chosen once */
        char rest[400] = "";
        if (n->prec != TRN_BF16)
            snprintf(
                rest, sizeof rest,
                "; the run started with %s, and the layout is chosen once per "
                "process, so its %s epochs run here too, not on oneDNN's fp32 kernels",
                n->conv_bf16_why, trn_precision_name(n->prec));
        snprintf(buf, len, "im2col + OpenBLAS GEMM, CNHW activations (%s (ISA %s)%s)",
                 why, trn_dnnl_isa_name(), rest);
        return 0;
    }
    char ver[64], impl[256];
    trn_dnnl_version(ver, sizeof ver);
    int bf16 = n->half;
    if (trn_dconv_describe(first->dc, nb, bf16, impl, sizeof impl, n->conv_err) < 0) {
        snprintf(buf, len, "%s", n->conv_err);
        return -1;
    }
    char emu[160] = "";
    if (n->prec == TRN_FP16)
        snprintf(emu, sizeof emu, " (fp16 emulated by rounding)");
    else if (n->prec == TRN_BF16 && !bf16)
        snprintf(emu, sizeof emu,
                 " (bf16 emulated by rounding: no bf16 instructions for oneDNN on this "
                 "CPU (ISA %s))",
                 trn_dnnl_isa_name());
    snprintf(buf, len, "%s, NHWC activations, %s kernels%s: %s", ver,
             bf16 ? "bf16" : "fp32", emu, impl);
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
        char isa[96];
        snprintf(isa, sizeof isa, "no bf16 instructions for oneDNN on this CPU (ISA %s)",
                 trn_dnnl_isa_name());
        const char *why = !trn_dnnl_available()   ? "no oneDNN in this build"
                          : n->mm == TRN__MM_BLAS ? "--matmul blas"
                          : !first->dl            ? "the CNN's head"
                          : n->prec == TRN_FP16   ? "fp16 is emulated"
                          : n->prec == TRN_BF16 && !trn_dnnl_bf16_native()
                              ? isa
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
    snprintf(buf, len, "%s, ReLU fused, %s kernels%s: %s", ver, bf16 ? "bf16" : "fp32",
             n->prec == TRN_FP16 ? " (fp16 emulated by rounding)" : "", impl);
    return 0;
}
