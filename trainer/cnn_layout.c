/*  cnn_layout.c - the CUDA CNN's op and parameter layout, on the host
    (cnn_layout.h). Mirrors net.c's "cnn" branch: stem conv-BN-ReLU; per
    stage a stride-2 transition conv-BN-ReLU after the first; per block
    conv-BN-ReLU, conv-BN, add the block's input, ReLU; global average
    pooling; linear head. Every conv, BN and linear takes the next layer
    number, as in net.c, and names its parameters after it.
*/
#include "trainer/cnn_layout.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

static int s_buf(trn_cnn_layout *L, int c, int h, int w)
{
    assert(L->nbufs < TRN_MAX_OPS + 1);
    trn_qbuf *b = &L->buf[L->nbufs];
    b->c = c, b->h = h, b->w = w;
    return L->nbufs++;
}

static trn_qop *s_op(trn_cnn_layout *L, trn_qkind kind, int in)
{
    assert(L->nops < TRN_MAX_OPS);
    trn_qop *o = &L->op[L->nops++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->in = in;
    o->in2 = o->pw = o->pb = o->layer = -1;
    o->c = L->buf[in].c, o->h = L->buf[in].h, o->w = L->buf[in].w;
    return o;
}

static int s_param(trn_cnn_layout *L, int layer, const char *role, long n, trn_pkind kind,
                   int conv)
{
    assert(L->np < TRN_MAX_OPS);
    trn_qparam *p = &L->p[L->np];
    snprintf(p->name, sizeof p->name, "l%d.%s", layer, role);
    p->kind = kind;
    p->n = n;
    p->off = L->total;
    p->conv = conv;
    L->total += n;
    return L->np++;
}

static int s_conv(trn_cnn_layout *L, int *layers, int in, int co, int stride)
{
    trn_qop *o = s_op(L, TRN_Q_CONV, in);
    o->co = co, o->k = 3, o->stride = stride, o->pad = 1;
    o->layer = (*layers)++;
    o->pw = s_param(L, o->layer, "weight", (long)co * o->c * 9, TRN_PW, L->nops - 1);
    o->out =
        s_buf(L, co, trn_conv_out(o->h, 3, stride, 1), trn_conv_out(o->w, 3, stride, 1));
    return o->out;
}

static int s_bn(trn_cnn_layout *L, int *layers, int in)
{
    trn_qop *o = s_op(L, TRN_Q_BN, in);
    o->layer = (*layers)++;
    o->pw = s_param(L, o->layer, "gamma", o->c, TRN_PBN, -1);
    o->pb = s_param(L, o->layer, "beta", o->c, TRN_PBN, -1);
    o->st = L->nstate;
    L->nstate += 2L * o->c;
    o->out = s_buf(L, o->c, o->h, o->w);
    return o->out;
}

static int s_simple(trn_cnn_layout *L, trn_qkind kind, int in, int in2)
{
    trn_qop *o = s_op(L, kind, in);
    o->in2 = in2;
    o->out = kind == TRN_Q_GAP ? s_buf(L, o->c, 1, 1) : s_buf(L, o->c, o->h, o->w);
    return o->out;
}

static int s_cbr(trn_cnn_layout *L, int *layers, int in, int co, int stride, int relu)
{
    int x = s_bn(L, layers, s_conv(L, layers, in, co, stride));
    return relu ? s_simple(L, TRN_Q_RELU, x, -1) : x;
}

int trn_cnn_layout_build(trn_cnn_layout *L, const char *arch, char *err)
{
    int c, h, w, blocks, classes, ch[8], ns = 0, layers = 0;
    char list[64];
    memset(L, 0, sizeof *L);
    if (!arch ||
        sscanf(arch, "cnn:%dx%dx%d:%63[0-9,]:b%d:%d", &c, &h, &w, list, &blocks,
               &classes) != 6 ||
        (ns = trn_parse_int_list(list, ch, 8)) < 1 || c < 1 || h < 1 || w < 1 ||
        classes < 1) {
        snprintf(err, TRN_ERRLEN, "the CUDA CNN runs net.c's cnn only (model %s)",
                 arch ? arch : "(none)");
        return -1;
    }
    if (blocks < 0 || trn_cnn_ops(ns, blocks) > TRN_MAX_OPS) {
        snprintf(err, TRN_ERRLEN, "model too large: %d ops, at most %d",
                 trn_cnn_ops(ns, blocks), TRN_MAX_OPS);
        return -1;
    }
    int x = s_buf(L, c, h, w);
    x = s_cbr(L, &layers, x, ch[0], 1, 1); /* stem */
    for (int s = 0; s < ns; s++) {
        if (s > 0)
            x = s_cbr(L, &layers, x, ch[s], 2, 1); /* transition */
        for (int b = 0; b < blocks; b++) {
            int y = s_cbr(L, &layers, x, ch[s], 1, 1);
            y = s_cbr(L, &layers, y, ch[s], 1, 0);
            y = s_simple(L, TRN_Q_ADD, y, x);
            x = s_simple(L, TRN_Q_RELU, y, -1);
        }
    }
    x = s_simple(L, TRN_Q_GAP, x, -1);
    trn_qop *o = s_op(L, TRN_Q_LINEAR, x);
    o->co = classes;
    o->layer = layers++;
    o->pw = s_param(L, o->layer, "weight", (long)o->c * classes, TRN_PW, -1);
    o->pb = s_param(L, o->layer, "bias", classes, TRN_PBIAS, -1);
    o->out = s_buf(L, classes, 1, 1);
    L->classes = classes;
    for (int i = L->nops - 1; i >= 0; i--) /* the backward runs the ops in reverse */
        L->op[i].stage = L->op[i].pw >= 0 ? L->nstages++ : -1;
    return 0;
}

void trn_cnn_layout_param_stages(const trn_cnn_layout *L, int *stage)
{
    for (int i = 0; i < L->nops; i++) {
        const trn_qop *o = &L->op[i];
        if (o->pw >= 0)
            stage[o->pw] = o->stage;
        if (o->pb >= 0)
            stage[o->pb] = o->stage;
    }
}

int trn_cnn_layout_compare(const trn_cnn_layout *L, trn_net *net, char *err)
{
    int np = trn_net_nparams(net);
    int n = np < L->np ? np : L->np;
    long off = 0;
    for (int i = 0; i < n; i++) {
        const trn_param *p = trn_net_param(net, i);
        const trn_qparam *q = &L->p[i];
        if (strcmp(p->name, q->name) || p->kind != q->kind || p->n != q->n ||
            q->off != off) {
            snprintf(err, TRN_ERRLEN,
                     "parameter %d: net.c has %s (kind %d, %ld values at %ld), the CUDA "
                     "CNN %s (kind %d, %ld values at %ld)",
                     i, p->name, (int)p->kind, p->n, off, q->name, (int)q->kind, q->n,
                     q->off);
            return i;
        }
        off += p->n;
    }
    if (np != L->np || trn_net_state_count(net) != L->nstate) {
        snprintf(err, TRN_ERRLEN,
                 "net.c has %d parameters and %ld state values, the CUDA CNN %d and %ld",
                 np, trn_net_state_count(net), L->np, L->nstate);
        return n;
    }
    return -1;
}
