/*  net.c - the model as a static graph of ops over numbered buffers.

    An op reads one or two buffers and writes one; backward runs the ops in
    reverse and accumulates each buffer's gradient (a buffer read by two ops,
    like a residual block's input, gets both contributions). Ops: linear,
    relu, conv (im2col + GEMM, CNHW layout), batch norm, add, global average
    pooling; the loss is softmax cross-entropy on the last buffer.

    Mixed precision is emulated here (precision.c): with bf16/fp16 the
    forward uses a rounded working copy of the weights, and every stored
    activation, activation gradient and weight gradient is rounded to the
    format; each buffer's gradient carries a scale (with per-layer loss
    scales an op's incoming gradient is rescaled to its layer's scale before
    its backward, so each layer's weight gradient carries its own scale).
    On the oneDNN path in bf16 the CNN's activations and gradients are real
    bf16 (trn__buf.xh/gh, NHWC) from the input's copy to the pooling: conv,
    BN(+ReLU), add(+ReLU) read and write bf16 (fp32 inside); the pooled
    features, the head, weights and weight gradients stay fp32.
    The MLP's linears run on oneDNN's matmul primitives (linear_dnnl.c, their
    ReLU fused; inner products as the alternative) in fp32 and in bf16 (where
    the CPU has bf16 instructions) by default and with --matmul dnnl, else on
    OpenBLAS (fp16, --matmul blas, bf16 without bf16 instructions); in bf16
    its activations and their gradients are real bf16 (xh/gh) from the
    input's copy to the logits, which are stored in fp32 but rounded to bf16
    values, as the emulation's; its weights are rounded to bf16 by
    linear_dnnl.c itself (trn_bf16_from_f32 into its own bf16 copy once per
    forward; no working copy here), biases and weight gradients stay fp32.
*/
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/align.h"
#include "trainer/conv_dnnl.h"
#include "trainer/linear_dnnl.h"
#include "trainer/net_impl.h"
#include "trainer/trn.h"

static const float s_bn_eps = 1e-5f;
static const float s_bn_momentum = 0.1f;

/* ---- construction ---------------------------------------------------------- */

static int s_buf_new(trn_net *n, int feat)
{
    trn__buf *b = &n->bufs[n->nbufs]; /* one per op and the input's: within MAX_OPS + 1 */
    memset(b, 0, sizeof *b);
    b->feat = feat;
    return n->nbufs++;
}

static int s_param_new(trn_net *n, const char *name, trn_pkind kind, long count,
                       int layer)
{
    assert(n->np < MAX_PARAMS);
    trn_param *p = &n->params[n->np];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->kind = kind;
    p->n = count;
    p->layer = layer;
    p->w = trn_alloc64((size_t)count * sizeof(float), 1);
    p->g = trn_alloc64((size_t)count * sizeof(float), 1);
    p->m = trn_alloc64((size_t)count * sizeof(float), 1);
    p->v = trn_alloc64((size_t)count * sizeof(float), 1);
    p->wlp = p->w;
    if (!p->w || !p->g || !p->m || !p->v) { /* none kept: np does not count it */
        free(p->w);
        free(p->g);
        free(p->m);
        free(p->v);
        memset(p, 0, sizeof *p);
        return -1;
    }
    return n->np++;
}

static trn__op *s_op_new(trn_net *n, trn__kind kind, int in)
{
    assert(n->nops < MAX_OPS);
    trn__op *o = &n->ops[n->nops++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->in = in;
    o->in2 = o->pw = o->pb = o->layer = o->relu_op = -1;
    return o;
}

static int s_linear(trn_net *n, int in, int k, int m, int bias)
{
    char name[32];
    trn__op *o = s_op_new(n, OP_LINEAR, in);
    o->c = k;
    o->h = o->w = 1;
    o->co = m;
    o->layer = n->nlayers++;
    snprintf(name, sizeof name, "l%d.weight", o->layer);
    if ((o->pw = s_param_new(n, name, TRN_PW, (long)k * m, o->layer)) < 0)
        return -1;
    if (bias) {
        snprintf(name, sizeof name, "l%d.bias", o->layer);
        if ((o->pb = s_param_new(n, name, TRN_PBIAS, m, o->layer)) < 0)
            return -1;
    }
    o->out = s_buf_new(n, m);
    return o->out;
}

static int s_relu(trn_net *n, int in)
{
    trn__op *o = s_op_new(n, OP_RELU, in);
    o->out = s_buf_new(n, n->bufs[in].feat);
    n->bufs[o->out].hs = n->bufs[in].hs;
    return o->out;
}

static int s_conv(trn_net *n, int in, int c, int h, int w, int co, int k, int stride,
                  int pad)
{
    char name[32];
    trn__op *o = s_op_new(n, OP_CONV, in);
    o->c = c;
    o->h = h;
    o->w = w;
    o->co = co;
    o->k = k;
    o->stride = stride;
    o->pad = pad;
    o->layer = n->nlayers++;
    snprintf(name, sizeof name, "l%d.weight", o->layer);
    if ((o->pw = s_param_new(n, name, TRN_PW, (long)co * c * k * k, o->layer)) < 0)
        return -1;
    int ho = trn_conv_out(h, k, stride, pad), wo = trn_conv_out(w, k, stride, pad);
    long cps = (long)c * k * k * ho * wo;
    if (n->nhwc) {
        if (!(o->dc = trn_dconv_new(c, h, w, co, k, stride, pad, n->conv_err)))
            return -1;
    } else if (cps > n->cols_per_sample) {
        n->cols_per_sample = cps;
    }
    o->out = s_buf_new(n, co * ho * wo);
    n->bufs[o->out].hs = n->nhwc;
    n->bufs[in].hs = n->nhwc;
    return o->out;
}

static int s_bn(trn_net *n, int in, int c, int hw, int zero_gamma)
{
    char name[32];
    trn__op *o = s_op_new(n, OP_BN, in);
    o->c = c;
    o->h = hw;
    o->w = 1;
    o->layer = n->nlayers++;
    o->k = zero_gamma;
    snprintf(name, sizeof name, "l%d.gamma", o->layer);
    if ((o->pw = s_param_new(n, name, TRN_PBN, c, o->layer)) < 0)
        return -1;
    snprintf(name, sizeof name, "l%d.beta", o->layer);
    if ((o->pb = s_param_new(n, name, TRN_PBN, c, o->layer)) < 0)
        return -1;
    o->st = n->params[o->pw].st = n->params[o->pb].st = n->nstate;
    n->nstate += 2L * c;
    o->mean = calloc((size_t)c, sizeof(float));
    o->invstd = calloc((size_t)c, sizeof(float));
    if (!o->mean || !o->invstd)
        return -1;
    o->out = s_buf_new(n, n->bufs[in].feat);
    n->bufs[o->out].hs = n->nhwc;
    return o->out;
}

static int s_add(trn_net *n, int a, int b)
{
    trn__op *o = s_op_new(n, OP_ADD, a);
    o->in2 = b;
    o->out = s_buf_new(n, n->bufs[a].feat);
    n->bufs[o->out].hs = n->nhwc;
    return o->out;
}

static int s_gap(trn_net *n, int in, int c, int hw)
{
    trn__op *o = s_op_new(n, OP_GAP, in);
    o->c = c;
    o->h = hw;
    o->w = 1;
    o->out = s_buf_new(n, c);
    return o->out;
}

/* conv-BN(-ReLU) */
static int s_cbr(trn_net *n, int in, int c, int h, int w, int co, int stride, int relu,
                 int zero_gamma)
{
    int x = s_conv(n, in, c, h, w, co, 3, stride, 1);
    if (x < 0)
        return -1;
    int ho = trn_conv_out(h, 3, stride, 1), wo = trn_conv_out(w, 3, stride, 1);
    x = s_bn(n, x, co, ho * wo, zero_gamma);
    return x >= 0 && relu ? s_relu(n, x) : x;
}

/* On the oneDNN path: each BN whose only reader is a ReLU runs with it as
   one kernel (kernels_nhwc.c); the BN output buffer then holds only the
   gradient's place, never values. A residual ADD whose only reader is a
   ReLU writes relu(a + b) straight into the ReLU's buffer in the forward
   (the ADD's buffer is never written); the backward stays two ops (the
   ReLU's mask, then the ADD's copies). */
static void s_fuse(trn_net *n)
{
    for (int i = 0; i + 1 < n->nops; i++) {
        trn__op *o = &n->ops[i], *r = &n->ops[i + 1];
        if ((o->kind != OP_BN && o->kind != OP_ADD) || r->kind != OP_RELU ||
            r->in != o->out)
            continue;
        int readers = 0;
        for (int j = 0; j < n->nops; j++)
            readers += (n->ops[j].in == o->out) + (n->ops[j].in2 == o->out);
        if (readers == 1) {
            o->relu_op = i + 1;
            r->fused = o->kind == OP_BN;
            r->fwd_only = o->kind == OP_ADD;
        }
    }
}

trn_net *trn_net_new(const trn_config *cfg, int c, int h, int w, int classes, char *err)
{
    trn_net *n = calloc(1, sizeof *n);
    if (!n) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    n->classes = classes;
    n->dysum_buf = -1;
    n->bn_momentum = s_bn_momentum;
    int x = s_buf_new(n, c * h * w);
    int ok = 1;
    if (!strcmp(cfg->model, "mlp")) {
        if (trn__net_dnnl_check(cfg, "--matmul", cfg->matmul, c, err) < 0) {
            trn_net_destroy(&n);
            return NULL;
        }
        n->mm = !strcmp(cfg->matmul, "dnnl")   ? TRN__MM_DNNL
                : !strcmp(cfg->matmul, "blas") ? TRN__MM_BLAS
                                               : TRN__MM_AUTO;
        int sizes[32];
        int nh = trn_parse_int_list(cfg->hidden, sizes, 32);
        if (nh < 0) {
            snprintf(err, TRN_ERRLEN, "--hidden: bad sizes \"%s\"", cfg->hidden);
            trn_net_destroy(&n);
            return NULL;
        }
        int d = c * h * w;
        int len = snprintf(n->arch, sizeof n->arch, "mlp:%d", d);
        for (int i = 0; i < nh && ok; i++) {
            x = s_linear(n, x, d, sizes[i], 1);
            ok = x >= 0 && (x = s_relu(n, x)) >= 0;
            d = sizes[i];
            len += snprintf(n->arch + len, sizeof n->arch - (size_t)len, "-%d", d);
        }
        if (ok)
            ok = s_linear(n, x, d, classes, 1) >= 0;
        snprintf(n->arch + len, sizeof n->arch - (size_t)len, "-%d", classes);
        if (ok && n->mm != TRN__MM_BLAS && trn_dnnl_available())
            ok = trn__net_mlp_dnnl(n) == 0;
    } else if (!strcmp(cfg->model, "cnn")) {
        /* the oneDNN path: asked for, or by default where it runs (single-
           channel images: their NCHW rows are already NHWC; bf16 needs the
           CPU's bf16 instructions) */
        if (trn__net_dnnl_check(cfg, "--conv", cfg->conv, c, err) < 0) {
            trn_net_destroy(&n);
            return NULL;
        }
        n->nhwc = trn__net_conv_route(n, cfg, c);
        int ch[8];
        int ns = trn_parse_int_list(cfg->channels, ch, 8);
        if (ns < 1 || trn_cnn_ops(ns, cfg->blocks) > MAX_OPS) {
            snprintf(err, TRN_ERRLEN, "--channels %s --blocks %d: %s", cfg->channels,
                     cfg->blocks, ns < 1 ? "bad sizes" : "model too large");
            trn_net_destroy(&n);
            return NULL;
        }
        snprintf(n->arch, sizeof n->arch, "cnn:%dx%dx%d:%s:b%d:%d", c, h, w,
                 cfg->channels, cfg->blocks, classes);
        int cc = ch[0], hh = h, ww = w;
        x = s_cbr(n, x, c, hh, ww, cc, 1, 1, 0); /* stem */
        ok = x >= 0;
        for (int s = 0; s < ns && ok; s++) {
            if (s > 0) { /* downsampling transition */
                x = s_cbr(n, x, cc, hh, ww, ch[s], 2, 1, 0);
                hh = trn_conv_out(hh, 3, 2, 1);
                ww = trn_conv_out(ww, 3, 2, 1);
                cc = ch[s];
                ok = x >= 0;
            }
            for (int b = 0; b < cfg->blocks && ok; b++) {
                int y = s_cbr(n, x, cc, hh, ww, cc, 1, 1, 0);
                y = y < 0 ? -1 : s_cbr(n, y, cc, hh, ww, cc, 1, 0, cfg->zero_gamma);
                y = y < 0 ? -1 : s_add(n, y, x);
                x = y < 0 ? -1 : s_relu(n, y);
                ok = x >= 0;
            }
        }
        if (ok)
            x = s_gap(n, x, cc, hh * ww);
        ok = ok && x >= 0 && s_linear(n, x, cc, classes, 1) >= 0;
    } else {
        snprintf(err, TRN_ERRLEN, "--model: unknown model \"%s\"", cfg->model);
        trn_net_destroy(&n);
        return NULL;
    }
    if (ok && n->nhwc)
        s_fuse(n);
    trn__net_mm_route(n);
    if (ok && n->nstate > 0) {
        n->state = calloc((size_t)n->nstate, sizeof(float));
        ok = n->state != NULL;
    }
    if (!ok) {
        snprintf(err, TRN_ERRLEN, "%s",
                 n->conv_err[0] ? n->conv_err : "out of memory building the model");
        trn_net_destroy(&n);
        return NULL;
    }
    return n;
}

static void s_free_lp(trn_param *p)
{
    if (p->wlp && p->wlp != p->w)
        free(p->wlp);
    p->wlp = p->w;
}

void trn_net_destroy(trn_net **np)
{
    if (!np || !*np)
        return;
    trn_net *n = *np;
    for (int i = 0; i < n->np; i++) {
        trn_param *p = &n->params[i];
        s_free_lp(p);
        free(p->w);
        free(p->g);
        free(p->m);
        free(p->v);
    }
    for (int i = 0; i < n->nops; i++) {
        free(n->ops[i].mean);
        free(n->ops[i].invstd);
        trn_dconv_destroy(&n->ops[i].dc);
        trn_dlin_destroy(&n->ops[i].dl);
    }
    for (int i = 0; i < n->nbufs; i++) {
        free(n->bufs[i].x);
        free(n->bufs[i].g);
        free(n->bufs[i].xh);
        free(n->bufs[i].gh);
    }
    free(n->state);
    free(n->cols);
    free(n->dysum);
    free(n);
    *np = NULL;
}

int trn_net_nparams(const trn_net *n)
{
    return n->np;
}

trn_param *trn_net_param(trn_net *n, int i)
{
    return &n->params[i];
}

int trn_net_nlayers(const trn_net *n)
{
    return n->nlayers;
}

const char *trn_net_arch(const trn_net *n)
{
    return n->arch;
}

long trn_net_state_count(const trn_net *n)
{
    return n->nstate;
}

float *trn_net_state(trn_net *n)
{
    return n->state;
}

void trn_net_init(trn_net *n, trn_rng *r)
{
    for (int i = 0; i < n->nops; i++) {
        trn__op *o = &n->ops[i];
        if (o->kind == OP_LINEAR || o->kind == OP_CONV) {
            trn_param *p = &n->params[o->pw];
            double fan_in = o->kind == OP_LINEAR ? o->c : (double)o->c * o->k * o->k;
            int last = i == n->nops - 1;
            double bound =
                last ? sqrt(1.0 / fan_in) : sqrt(6.0 / fan_in); /* He uniform */
            for (long j = 0; j < p->n; j++)
                p->w[j] = (float)((2 * trn_rng_uniform(r) - 1) * bound);
            if (o->pb >= 0)
                memset(n->params[o->pb].w, 0, (size_t)n->params[o->pb].n * sizeof(float));
        } else if (o->kind == OP_BN) {
            /* gamma 1 (0 for the last BN of a residual branch), beta 0,
               running mean 0, running var 1 */
            for (int j = 0; j < o->c; j++) {
                n->params[o->pw].w[j] = o->k ? 0.0f : 1.0f;
                n->params[o->pb].w[j] = 0.0f;
                n->state[o->st + j] = 0.0f;
                n->state[o->st + o->c + j] = 1.0f;
            }
        }
    }
    trn_net_sync_weights(n);
}

void trn_net_sync_weights(trn_net *n)
{
    for (int i = 0; i < n->np; i++) {
        trn_param *p = &n->params[i];
        if (p->wlp == p->w) /* fp32, or no rounded copy (trn_net_set_precision) */
            continue;
        memcpy(p->wlp, p->w, (size_t)p->n * sizeof(float));
        trn_round_buf(p->wlp, p->n, n->prec);
    }
}

void trn_net_set_precision(trn_net *n, trn_precision prec)
{
    n->prec = prec;
    trn__net_mm_route(n);
    /* the MLP on oneDNN in bf16 keeps no rounded copy: linear_dnnl.c rounds
       the weights to its own bf16 copy each forward (to nearest even, as
       trn_round_bf16), biases stay fp32 */
    int keep = prec != TRN_FP32 && !(n->half && !n->nhwc);
    for (int i = 0; i < n->np; i++) {
        trn_param *p = &n->params[i];
        if (!keep)
            s_free_lp(p);
        else if (p->wlp == p->w) {
            float *lp = trn_alloc64((size_t)p->n * sizeof(float), 0);
            if (!lp) { /* stay in fp32 rather than fail */
                prec = TRN_FP32;
                break;
            }
            p->wlp = lp;
        }
    }
    if (prec == TRN_FP32) {
        for (int i = 0; i < n->np; i++)
            s_free_lp(&n->params[i]);
        n->prec = prec;
        trn__net_mm_route(n);
    }
    trn_net_sync_weights(n);
}

void trn_net_zero_grad(trn_net *n)
{
    /* lazily: the next backward overwrites (beta = 0) instead of adding */
    n->grad_fresh = 1;
}

double trn_net_grad_sqnorm(const trn_net *n)
{
    double s = 0;
    for (int i = 0; i < n->np; i++) {
        const float *g = n->params[i].g;
        for (long j = 0; j < n->params[i].n; j++)
            s += (double)g[j] * g[j];
    }
    return s;
}

/* ---- passes -------------------------------------------------------------- */

/* The BN running statistics after a training pass over s positions. */
static void s_bn_running(trn_net *n, const trn__op *o, long s)
{
    float *rm = n->state + o->st, *rv = rm + o->c;
    for (int j = 0; j < o->c; j++) {
        double var = 1.0 / ((double)o->invstd[j] * o->invstd[j]) - s_bn_eps;
        if (s > 1)
            var *= (double)s / (double)(s - 1);
        float mo = n->bn_momentum;
        rm[j] = (1 - mo) * rm[j] + mo * o->mean[j];
        rv[j] = (float)((1 - mo) * rv[j] + mo * var);
    }
}

/* One op of the forward in half mode (its input stored in bf16). */
static int s_forward_half(trn_net *n, trn__op *o, int nb, int train)
{
    const uint16_t *x = n->bufs[o->in].xh;
    uint16_t *y = n->bufs[o->out].xh;
    long cnt = (long)nb * n->bufs[o->out].feat;
    switch (o->kind) {
    case OP_CONV:
        return trn_dconv_fwd(o->dc, x, n->params[o->pw].wlp, y, nb, 1, n->conv_err);
    case OP_BN: {
        float *rm = n->state + o->st;
        int relu = o->relu_op >= 0;
        trn_bn_relu_fwd_nhwc_bf(x, n->params[o->pw].wlp, n->params[o->pb].wlp,
                                relu ? n->bufs[n->ops[o->relu_op].out].xh : y, o->mean,
                                o->invstd, train ? NULL : rm, rm + o->c, o->c,
                                (long)nb * o->h, s_bn_eps, n->prec, relu);
        if (train)
            s_bn_running(n, o, (long)nb * o->h);
        return 0;
    }
    case OP_ADD: {
        int relu = o->relu_op >= 0;
        trn_add_relu_bf(x, n->bufs[o->in2].xh,
                        relu ? n->bufs[n->ops[o->relu_op].out].xh : y, cnt, relu);
        return 0;
    }
    case OP_RELU:
        if (!o->fused && !o->fwd_only)
            trn_relu_fwd_bf(x, y, cnt);
        return 0;
    case OP_GAP: {
        float *yf = n->bufs[o->out].x;
        trn_gap_fwd_nhwc_bf(x, yf, o->c, nb, o->h);
        trn_round_buf(yf, cnt, n->prec);
        return 0;
    }
    case OP_LINEAR: { /* the MLP's, on oneDNN with its ReLU */
        trn__buf *ob = &n->bufs[o->relu_op >= 0 ? n->ops[o->relu_op].out : o->out];
        if (trn_dlin_fwd(o->dl, x, n->params[o->pw].wlp,
                         o->pb >= 0 ? n->params[o->pb].wlp : NULL,
                         ob->hs ? (void *)ob->xh : ob->x, nb, 1, n->conv_err) < 0)
            return -1;
        if (!ob->hs) /* the logits: fp32, rounded as the emulation's */
            trn_round_buf(ob->x, cnt, n->prec);
        return 0;
    }
    }
    return -1;
}

static int s_forward(trn_net *n, int nb, int train)
{
    if (n->fwd_hook)
        n->fwd_hook(n->fwd_hook_ud, nb);
    if (n->half && !n->xh_given) /* the input's bf16 copy */
        trn_bf16_from_f32(n->bufs[0].xh, n->bufs[0].x, (long)nb * n->bufs[0].feat);
    for (int i = 0; i < n->nops; i++) {
        trn__op *o = &n->ops[i];
        if (n->half && n->bufs[o->in].hs) {
            if (s_forward_half(n, o, nb, train) < 0)
                return -1;
            continue;
        }
        const float *x = n->bufs[o->in].x;
        float *y = n->bufs[o->out].x;
        long cnt = (long)nb * n->bufs[o->out].feat;
        switch (o->kind) {
        case OP_LINEAR:
            if (o->dl_on) { /* oneDNN, its ReLU fused: round what the ReLU keeps */
                if (o->relu_op >= 0)
                    y = n->bufs[n->ops[o->relu_op].out].x;
                if (trn_dlin_fwd(o->dl, x, n->params[o->pw].wlp,
                                 o->pb >= 0 ? n->params[o->pb].wlp : NULL, y, nb, 0,
                                 n->conv_err) < 0)
                    return -1;
                break;
            }
            trn_linear_fwd_f(x, n->params[o->pw].wlp,
                             o->pb >= 0 ? n->params[o->pb].wlp : NULL, y, nb, o->c,
                             o->co);
            break;
        case OP_RELU:
            if (o->fused || o->fwd_only)
                continue; /* ran inside the BN or ADD before it */
            trn_relu_fwd_f(x, y, cnt);
            continue; /* exact: its input is rounded already */
        case OP_CONV:
            if (o->dc) {
                if (trn_dconv_fwd(o->dc, x, n->params[o->pw].wlp, y, nb, 0, n->conv_err) <
                    0)
                    return -1;
            } else {
                trn_conv_fwd_f(x, n->params[o->pw].wlp, y, n->cols, o->c, nb, o->h, o->w,
                               o->co, o->k, o->stride, o->pad);
            }
            break;
        case OP_BN:
            if (o->relu_op >= 0) { /* BN + ReLU in one pass, rounded inside */
                float *rm = n->state + o->st;
                trn_bn_relu_fwd_nhwc_f(x, n->params[o->pw].wlp, n->params[o->pb].wlp,
                                       n->bufs[n->ops[o->relu_op].out].x, o->mean,
                                       o->invstd, train ? NULL : rm, rm + o->c, o->c,
                                       (long)nb * o->h, s_bn_eps, n->prec, 1);
                if (train)
                    s_bn_running(n, o, (long)nb * o->h);
                continue;
            }
            if (train) {
                long s = (long)nb * o->h;
                (n->nhwc ? trn_bn_fwd_train_nhwc_f : trn_bn_fwd_train_f)(
                    x, n->params[o->pw].wlp, n->params[o->pb].wlp, y, o->mean, o->invstd,
                    o->c, s, s_bn_eps);
                s_bn_running(n, o, s);
            } else {
                float *rm = n->state + o->st;
                (n->nhwc ? trn_bn_fwd_eval_nhwc_f : trn_bn_fwd_eval_f)(
                    x, n->params[o->pw].wlp, n->params[o->pb].wlp, y, rm, rm + o->c, o->c,
                    (long)nb * o->h, s_bn_eps);
            }
            break;
        case OP_ADD: {
            const float *b = n->bufs[o->in2].x;
            if (o->relu_op >= 0) { /* relu(round(a + b)) into the ReLU's buffer */
                float *r = n->bufs[n->ops[o->relu_op].out].x;
                for (long j = 0; j < cnt; j++)
                    r[j] = x[j] + b[j];
                trn_round_buf(r, cnt, n->prec);
                trn_relu_fwd_f(r, r, cnt);
                continue;
            }
            for (long j = 0; j < cnt; j++)
                y[j] = x[j] + b[j];
            break;
        }
        case OP_GAP:
            (n->nhwc ? trn_gap_fwd_nhwc_f : trn_gap_fwd_f)(x, y, o->c, nb, o->h);
            break;
        }
        trn_round_buf(y, cnt, n->prec);
    }
    return 0;
}

/* Multiplies a buffer's gradient by f (in bf16 when it is stored so;
   a float one rounded to the format when round). */
static void s_scale_grad(trn_net *n, trn__buf *buf, long cnt, float f, int round)
{
    if (n->half && buf->hs) {
        trn_scale_bf(buf->gh, f, cnt);
        return;
    }
    for (long j = 0; j < cnt; j++)
        buf->g[j] *= f;
    if (round)
        trn_round_buf(buf->g, cnt, n->prec);
}

/* Makes buffer b's gradient ready to receive a contribution at scale s:
   returns the dxbeta to use (0 = first contribution, overwrite). */
static float s_prepare_grad(trn_net *n, int b, int nb, double s)
{
    trn__buf *buf = &n->bufs[b];
    if (!buf->written) {
        buf->written = 1;
        buf->gs = s;
        return 0.0f;
    }
    if (buf->gs != s) {
        s_scale_grad(n, buf, (long)nb * buf->feat, (float)(s / buf->gs), 0);
        buf->gs = s;
    }
    return 1.0f;
}

/* 1 when the op the backward visits right after o (a ReLU; ops[i - 1])
   is a oneDNN matmul linear with a bias whose output o reads: the one
   that takes o's column sums (in the CNN a ReLU may follow a residual
   add, and an inner-product linear sums its own). */
static int s_feeds_bias(const trn_net *n, const trn__op *o)
{
    long i = o - n->ops;
    if (i < 1)
        return 0;
    const trn__op *p = &n->ops[i - 1];
    return p->kind == OP_LINEAR && p->pb >= 0 && p->dl_on && p->out == o->in &&
           trn_dlin_takes_sums(p->dl);
}

/* n->dysum for feat columns. 0 or -1. */
static int s_dysum_room(trn_net *n, int feat)
{
    size_t bytes = (size_t)feat * sizeof(float);
    if (feat < 1)
        return -1;
    if (bytes > n->dysum_cap) {
        if (trn_regrow64((void **)&n->dysum, bytes) < 0)
            return -1;
        n->dysum_cap = bytes;
    }
    return 0;
}

/* One op of the backward in half mode (its input stored in bf16): ob holds
   the incoming gradient, dx (ib->gh or NULL) receives with dxb. sums:
   the column sums of ob's gradient the op just before in the backward
   took (a ReLU's, fuse_sums: no per-layer scale between), or NULL. */
static int s_backward_half(trn_net *n, trn__op *o, int nb, trn__buf *ob, trn__buf *ib,
                           int need_dx, float dxb, float pbeta, double s, int fuse_sums,
                           const float *sums)
{
    long ocnt = (long)nb * ob->feat;
    uint16_t *dx = need_dx ? ib->gh : NULL;
    switch (o->kind) {
    case OP_CONV: {
        trn_param *w = &n->params[o->pw];
        if (trn_dconv_bwd(o->dc, ib->xh, w->wlp, ob->gh, dx, w->g, nb, 1, pbeta, dxb,
                          n->conv_err) < 0)
            return -1;
        trn_round_buf(w->g, w->n, n->prec);
        return 0;
    }
    case OP_BN: {
        trn_param *g = &n->params[o->pw], *b = &n->params[o->pb];
        trn_bn_relu_bwd_nhwc_bf(ib->xh, g->wlp, o->mean, o->invstd,
                                o->relu_op >= 0 ? ob->xh : NULL, ob->gh, dx, g->g, b->g,
                                o->c, (long)nb * o->h, pbeta, dxb, n->prec);
        trn_round_buf(g->g, g->n, n->prec);
        trn_round_buf(b->g, b->n, n->prec);
        return 0;
    }
    case OP_RELU:
        /* a fresh dx feeding a linear's bias next (no per-layer scale
           between): its column sums taken in the same pass, for that
           linear (n->dysum_buf), where it runs on one thread */
        if (dx && dxb == 0 && fuse_sums && s_feeds_bias(n, o) &&
            s_dysum_room(n, n->bufs[o->in].feat) == 0 &&
            trn_relu_bwd_colsum_bf(n->bufs[o->out].xh, ob->gh, dx, nb,
                                   n->bufs[o->in].feat, n->dysum) == 0) {
            n->dysum_buf = o->in;
            n->dysum_joined++;
            return 0;
        }
        if (dx)
            trn_relu_bwd_bf(n->bufs[o->out].xh, ob->gh, dx, ocnt, dxb);
        return 0;
    case OP_ADD:
        if (dx)
            trn_acc_bf(dx, ob->gh, dxb, ocnt);
        if (o->in2 != 0) {
            trn__buf *b2 = &n->bufs[o->in2];
            trn_acc_bf(b2->gh, ob->gh, s_prepare_grad(n, o->in2, nb, s), ocnt);
        }
        return 0;
    case OP_GAP:
        if (dx)
            trn_gap_bwd_nhwc_bf(ob->g, dx, o->c, nb, o->h, dxb);
        return 0;
    case OP_LINEAR: { /* the MLP's; its input has one reader: dx is written */
        trn_param *w = &n->params[o->pw], *b = o->pb >= 0 ? &n->params[o->pb] : NULL;
        if (trn_dlin_bwd(o->dl, ib->xh, w->wlp, ob->hs ? (void *)ob->gh : ob->g, dx, w->g,
                         b ? b->g : NULL, nb, 1, pbeta, sums, n->conv_err) < 0)
            return -1;
        return 0; /* weight and bias gradients stay fp32 */
    }
    }
    return -1;
}

static int s_backward(trn_net *n, int nb, const double *lscale)
{
    const float pbeta = n->grad_fresh ? 0.0f : 1.0f; /* param gradients: write or add */
    n->grad_fresh = 0;
    n->dysum_buf = -1;
    for (int i = n->nops - 1; i >= 0; i--) {
        trn__op *o = &n->ops[i];
        /* a ReLU's column sums serve the op right after it here, no other */
        const float *sums = n->dysum_buf == o->out ? n->dysum : NULL;
        n->dysum_buf = -1;
        if (o->fused) /* its gradient is taken inside the BN's backward */
            continue;
        /* a BN with its ReLU fused gets the ReLU output's gradient */
        trn__buf *ob =
            &n->bufs[o->kind == OP_BN && o->relu_op >= 0 ? n->ops[o->relu_op].out
                                                         : o->out];
        if (!ob->written)
            continue;
        long ocnt = (long)nb * ob->feat;
        /* per-layer loss scale: bring the incoming gradient to this layer's scale */
        if (lscale && o->layer >= 0 && ob->gs != lscale[o->layer]) {
            s_scale_grad(n, ob, ocnt, (float)(lscale[o->layer] / ob->gs), 1);
            ob->gs = lscale[o->layer];
        }
        double s = ob->gs;
        int need_dx = o->in != 0;
        trn__buf *ib = &n->bufs[o->in];
        float dxb = need_dx ? s_prepare_grad(n, o->in, nb, s) : 0;
        if (n->half && ib->hs) {
            if (s_backward_half(n, o, nb, ob, ib, need_dx, dxb, pbeta, s, lscale == NULL,
                                sums) < 0)
                return -1;
            goto hooks;
        }
        float *dx = need_dx ? ib->g : NULL;
        /* dx needs no rounding when it is a copy or mask of a rounded
           gradient, or the fused BN rounded it */
        int exact = 0;
        switch (o->kind) {
        case OP_LINEAR: {
            trn_param *w = &n->params[o->pw], *b = o->pb >= 0 ? &n->params[o->pb] : NULL;
            /* a linear's input has one reader in our graphs, so dx is
               written, not accumulated */
            (void)dxb;
            if (!o->dl_on)
                trn_linear_bwd_f(ib->x, w->wlp, ob->g, dx, w->g, b ? b->g : NULL, nb,
                                 o->c, o->co, pbeta);
            else if (trn_dlin_bwd(o->dl, ib->x, w->wlp, ob->g, dx, w->g, b ? b->g : NULL,
                                  nb, 0, pbeta, NULL, n->conv_err) < 0)
                return -1;
            trn_round_buf(w->g, w->n, n->prec);
            if (b)
                trn_round_buf(b->g, b->n, n->prec);
            break;
        }
        case OP_RELU:
            if (dx)
                trn_relu_bwd_f(n->bufs[o->out].x, ob->g, dx, ocnt, dxb);
            exact = dxb == 0;
            break;
        case OP_CONV: {
            trn_param *w = &n->params[o->pw];
            if (o->dc) {
                if (trn_dconv_bwd(o->dc, ib->x, w->wlp, ob->g, dx, w->g, nb, 0, pbeta,
                                  dxb, n->conv_err) < 0)
                    return -1;
            } else {
                trn_conv_bwd_f(ib->x, w->wlp, ob->g, dx, w->g, n->cols, o->c, nb, o->h,
                               o->w, o->co, o->k, o->stride, o->pad, pbeta, dxb);
            }
            trn_round_buf(w->g, w->n, n->prec);
            break;
        }
        case OP_BN: {
            trn_param *g = &n->params[o->pw], *b = &n->params[o->pb];
            if (o->relu_op >= 0) {
                trn_bn_relu_bwd_nhwc_f(ib->x, g->wlp, o->mean, o->invstd, ob->x, ob->g,
                                       dx, g->g, b->g, o->c, (long)nb * o->h, pbeta, dxb,
                                       n->prec);
                exact = 1;
            } else
                (n->nhwc ? trn_bn_bwd_nhwc_f
                         : trn_bn_bwd_f)(ib->x, g->wlp, o->mean, o->invstd, ob->g, dx,
                                         g->g, b->g, o->c, (long)nb * o->h, pbeta, dxb);
            trn_round_buf(g->g, g->n, n->prec);
            trn_round_buf(b->g, b->n, n->prec);
            break;
        }
        case OP_ADD: {
            if (dx)
                for (long j = 0; j < ocnt; j++)
                    dx[j] = dxb == 0 ? ob->g[j] : dx[j] + ob->g[j];
            exact = dxb == 0;
            if (o->in2 != 0) {
                trn__buf *b2 = &n->bufs[o->in2];
                float b2b = s_prepare_grad(n, o->in2, nb, s);
                for (long j = 0; j < ocnt; j++)
                    b2->g[j] = b2b == 0 ? ob->g[j] : b2->g[j] + ob->g[j];
                if (b2b != 0)
                    trn_round_buf(b2->g, ocnt, n->prec);
            }
            break;
        }
        case OP_GAP:
            if (dx)
                (n->nhwc ? trn_gap_bwd_nhwc_f : trn_gap_bwd_f)(ob->g, dx, o->c, nb, o->h,
                                                               dxb);
            break;
        }
        if (dx && !exact)
            trn_round_buf(dx, (long)nb * ib->feat, n->prec);
    hooks:
        if (n->hook && o->pw >= 0)
            n->hook(n->hook_ud, o->pw);
        if (n->hook && o->pb >= 0)
            n->hook(n->hook_ud, o->pb);
    }
    return 0;
}

void trn_net_set_grad_hook(trn_net *n, trn_grad_hook fn, void *ud)
{
    n->hook = fn;
    n->hook_ud = ud;
}

static double s_forward_backward(trn_net *n, const float *x, const uint8_t *y, int nb,
                                 int train, double label_smoothing, double gscale,
                                 const double *lscale, int *correct)
{
    if (nb <= 0)
        return 0;
    if (trn__net_reserve(n, nb, 1) < 0)
        return -1;
    trn__buf *in = &n->bufs[0];
    if (!x && (!n->half || n->nhwc)) /* x NULL: trn_net_input_bf16 filled xh */
        return -1;
    if (x && x != in->x) /* else the caller gathered into trn_net_input */
        memcpy(in->x, x, (size_t)nb * in->feat * sizeof(float));
    if (!n->half) /* else its bf16 copy rounds (s_forward) */
        trn_round_buf(in->x, (long)nb * in->feat, n->prec);
    n->xh_given = !x;
    int fw = s_forward(n, nb, train);
    n->xh_given = 0;
    if (fw < 0)
        return -1;
    trn__buf *out = &n->bufs[n->nbufs - 1];
    int ok = 0;
    double top = lscale ? lscale[n->nlayers - 1] : 1.0;
    double loss = trn_softmax_ce_f(out->x, y, train ? out->g : NULL, nb, n->classes,
                                   label_smoothing, gscale * top, &ok);
    if (correct)
        *correct = ok;
    if (!train)
        return loss;
    for (int i = 0; i < n->nbufs; i++)
        n->bufs[i].written = 0;
    out->written = 1;
    out->gs = top;
    trn_round_buf(out->g, (long)nb * out->feat, n->prec);
    if (s_backward(n, nb, lscale) < 0)
        return -1;
    return loss;
}

double trn_net_forward_backward(trn_net *n, const float *x, const uint8_t *y, int nb,
                                int train, double label_smoothing, double gscale,
                                const double *lscale, int *correct)
{
    int old = trn__net_threads_push(n, nb); /* the MLP's regions on its linears' count */
    double l =
        s_forward_backward(n, x, y, nb, train, label_smoothing, gscale, lscale, correct);
    trn__net_threads_pop(old);
    return l;
}

float *trn_net_input(trn_net *n, int nb)
{
    return trn__net_reserve(n, nb, 1) < 0 ? NULL : n->bufs[0].x;
}

uint16_t *trn_net_input_bf16(trn_net *n, int nb)
{
    return !n->half || n->nhwc || trn__net_reserve(n, nb, 1) < 0 ? NULL : n->bufs[0].xh;
}

int trn_net_bn_recompute(trn_net *n, const float *x, int count, int chunk)
{
    if (n->nstate == 0 || count <= 0 || chunk <= 0)
        return 0;
    if (trn__net_reserve(n, count < chunk ? count : chunk, 1) < 0)
        return -1;
    trn__buf *in = &n->bufs[0];
    int k = 0;
    for (int i = 0; i < count; i += chunk, k++) {
        int m = count - i < chunk ? count - i : chunk;
        memcpy(in->x, x + (size_t)i * in->feat, (size_t)m * in->feat * sizeof(float));
        if (!n->half)
            trn_round_buf(in->x, (long)m * in->feat, n->prec);
        n->bn_momentum = 1.0f / (float)(k + 1); /* the first batch replaces */
        if (s_forward(n, m, 1) < 0) {
            n->bn_momentum = s_bn_momentum;
            return -1;
        }
    }
    n->bn_momentum = s_bn_momentum;
    return 0;
}

double trn_net_eval(trn_net *n, const float *x, const uint8_t *y, int nb, int *correct)
{
    if (nb <= 0)
        return 0;
    if (trn__net_reserve(n, nb, 0) < 0) /* a forward alone: no gradient buffers */
        return -1;
    trn__buf *in = &n->bufs[0];
    memcpy(in->x, x, (size_t)nb * in->feat * sizeof(float));
    if (!n->half) /* else its bf16 copy rounds (s_forward) */
        trn_round_buf(in->x, (long)nb * in->feat, n->prec);
    int old = trn__net_threads_push(n, nb), fw = s_forward(n, nb, 0);
    trn__net_threads_pop(old);
    if (fw < 0)
        return -1;
    trn__buf *out = &n->bufs[n->nbufs - 1];
    return trn_softmax_ce_f(out->x, y, NULL, nb, n->classes, 0.0, 0.0, correct);
}

const char *trn_net_error(const trn_net *n)
{
    return n->conv_err[0] ? n->conv_err : "out of memory";
}
