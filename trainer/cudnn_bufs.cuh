/*  cudnn_bufs.cuh - the CUDA CNN's device buffers, tensor descriptors and
    convolution algorithms per batch size (the workspace grown to what they
    need), at the attached precision's types (cudnn_host.h: the element
    size and cuDNN data type; the sizes from trn_cudnn_sizes_for). A
    section of backend_cudnn.cu (included by it alone, after its structs),
    split out to keep that file under 1000 lines. NEVER RUN ON A GPU. */
#ifndef JZ_TRN_CUDNN_BUFS_CUH
#define JZ_TRN_CUDNN_BUFS_CUH

/* Exit 1 with a message when need bytes (what, at batch nb) are more
   than the GPU has free; call with the old buffers of that kind freed. */
static void s_mem_check(s_cnn *q, int nb, size_t need, const char *what)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess && need > fr) {
        fprintf(stderr,
                "jizhi-train: CUDA CNN: batch %d needs %.0f MB of %s at --precision %s, "
                "the GPU has %.0f MB free; use a smaller --batch-size\n",
                nb, need / 1e6, what, trn_precision_name(q->prec), fr / 1e6);
        exit(1);
    }
}

/* The workspace grown to need bytes (never shrunk); the old one freed
   before the free memory is read. */
static void s_ws_grow(s_cnn *q, size_t need, int nb)
{
    if (need > q->ws_size) {
        CUDA_CHECK(cudaStreamSynchronize(q->stream));
        cudaFree(q->ws);
        q->ws = NULL, q->ws_size = 0;
        s_mem_check(q, nb, need, "cuDNN workspace");
        CUDA_CHECK(cudaMalloc(&q->ws, need));
        q->ws_size = need;
    }
}

/* The _v7 results of one query as host structs (cudnn_host.h) */
template <typename P> static void s_perfs(const P *p, int n, trn_algo_perf *r)
{
    for (int j = 0; j < n; j++)
        r[j] = trn_algo_perf{(int)p[j].algo, (int)p[j].status, (int)p[j].determinism,
                             (int)p[j].mathType, p[j].memory};
}

/* Direction k of op i at batch nb: the result trn_cudnn_algo_pick chooses
   of r (n of them), its algorithm into algo[k] and the math type to set
   into math[k]; none qualifies: exit 1 naming the layer, the direction
   and the precision (no fallback to an algorithm not checked). */
static void s_pick(s_cnn *q, int i, int nb, int k, const trn_algo_perf *r, int n,
                   int *algo, int *math)
{
    int j = trn_cudnn_algo_pick(&q->ty, r, n, S_WS_MAX);
    if (j < 0) {
        char err[TRN_ERRLEN];
        trn_cudnn_algo_none(i, k, q->prec, nb, n, err);
        fprintf(stderr, "jizhi-train: CUDA CNN: %s; cuDNN offered:\n", err);
        trn_cudnn_algo_list(stderr, r, n);
        exit(1);
    }
    algo[k] = r[j].algo;
    math[k] = trn_cudnn_algo_math(&q->ty, r[j].math);
}

/* Conv algorithms of op i (o) at batch nb: the choice cached for (i, nb)
   when this batch size was seen before (cudnn_host.h), else per direction
   the result trn_cudnn_algo_pick chooses of its _v7 list, then cached
   (not the backward-data one of a conv on the images, whose gradient is
   never taken: backend_cudnn.cu's need_dx).
   Each direction has its own descriptor, set to its choice's math type
   before the workspace query (and so for the calls); the workspace grown
   to the largest the three need. */
static void s_algos(s_cnn *q, int i, s_op *o, int nb)
{
    int algo[TRN_ALGO_KINDS], math[TRN_ALGO_KINDS];
    size_t need = 0;
    const trn_algo_entry *hit = trn_algo_cache_get(&q->algos, i, nb);
    if (hit) {
        for (int k = 0; k < TRN_ALGO_KINDS; k++)
            algo[k] = hit->algo[k], math[k] = hit->math[k];
        need = hit->ws;
    } else {
        cudnnTensorDescriptor_t xd = q->buf[o->in].td, yd = q->buf[o->out].td;
        int n = 0;
        trn_algo_perf r[8];
        for (int k = 0; k < TRN_ALGO_KINDS; k++) /* the queries' math (as at attach),
                                                    not the last batch size's choice */
            CUDNN_CHECK(p_cudnnSetConvolutionMathType(
                o->cd[k], q->ty.tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
        cudnnConvolutionFwdAlgoPerf_t pf[8];
        CUDNN_CHECK(p_cudnnGetConvolutionForwardAlgorithm_v7(q->dnn, xd, o->fd, o->cd[0],
                                                             yd, 8, &n, pf));
        s_perfs(pf, n, r);
        s_pick(q, i, nb, 0, r, n, algo, math);
        if (o->in != 0) { /* the input's gradient: not for the images (op 0) */
            cudnnConvolutionBwdDataAlgoPerf_t pd[8];
            CUDNN_CHECK(p_cudnnGetConvolutionBackwardDataAlgorithm_v7(
                q->dnn, o->fd, yd, o->cd[1], xd, 8, &n, pd));
            s_perfs(pd, n, r);
            s_pick(q, i, nb, 1, r, n, algo, math);
        } else { /* never run: no algorithm required, no workspace */
            algo[1] = 0;
            math[1] = q->ty.tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
        }
        cudnnConvolutionBwdFilterAlgoPerf_t pw[8];
        CUDNN_CHECK(p_cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            q->dnn, xd, yd, o->cd[2], o->fd, 8, &n, pw));
        s_perfs(pw, n, r);
        s_pick(q, i, nb, 2, r, n, algo, math);
    }
    for (int k = 0; k < TRN_ALGO_KINDS; k++)
        CUDNN_CHECK(p_cudnnSetConvolutionMathType(o->cd[k], (cudnnMathType_t)math[k]));
    o->fa = (cudnnConvolutionFwdAlgo_t)algo[0];
    o->ba = (cudnnConvolutionBwdDataAlgo_t)algo[1];
    o->fb = (cudnnConvolutionBwdFilterAlgo_t)algo[2];
    if (!hit) { /* the workspace each needs under its own math type */
        cudnnTensorDescriptor_t xd = q->buf[o->in].td, yd = q->buf[o->out].td;
        size_t sz = 0;
        CUDNN_CHECK(p_cudnnGetConvolutionForwardWorkspaceSize(q->dnn, xd, o->fd, o->cd[0],
                                                              yd, o->fa, &sz));
        need = sz > need ? sz : need;
        if (o->in != 0) {
            CUDNN_CHECK(p_cudnnGetConvolutionBackwardDataWorkspaceSize(
                q->dnn, o->fd, yd, o->cd[1], xd, o->ba, &sz));
            need = sz > need ? sz : need;
        }
        CUDNN_CHECK(p_cudnnGetConvolutionBackwardFilterWorkspaceSize(
            q->dnn, xd, yd, o->cd[2], o->fd, o->fb, &sz));
        need = sz > need ? sz : need;
        trn_algo_cache_put(&q->algos, i, nb, algo, math, need);
    }
    s_ws_grow(q, need, nb);
}

/* Buffers for nb examples and every descriptor at batch size nb. The
   sizes are trn_cudnn_sizes_for's at the attached precision's types (each
   activation buffer by trn_cudnn_buf_bytes, the rest by the sz fields);
   the old batch buffers are freed before the free memory is read, and
   the check covers all of them (the workspace: s_ws_grow; weights and
   their copies: s_attach). */
static void s_reserve(s_cnn *q, int nb)
{
    if (nb > q->cap) {
        CUDA_CHECK(cudaStreamSynchronize(q->stream));
        long feat[MAXOPS + 1];
        int conv[MAXP], lp[MAXP];
        for (int i = 0; i < q->nbufs; i++)
            feat[i] = (long)q->buf[i].c * q->buf[i].h * q->buf[i].w;
        for (int i = 0; i < q->np; i++)
            conv[i] = q->pconv[i] >= 0, lp[i] = q->lp[i] != q->w[i];
        trn_cudnn_sizes sz;
        trn_cudnn_sizes_for(&q->ty, nb, q->nbufs, feat, q->np, q->pn, conv, lp, &sz);
        for (int i = 0; i < q->nbufs; i++) {
            cudaFree(q->buf[i].x), cudaFree(q->buf[i].g);
            q->buf[i].x = q->buf[i].g = NULL;
        }
        cudaFree(q->ones), cudaFree(q->y), cudaFree(q->stage), cudaFree(q->gconv);
        q->ones = q->gconv = NULL, q->y = NULL, q->stage = NULL, q->cap = 0;
        s_mem_check(q, nb, trn_cudnn_sizes_batch(&sz),
                    "activations, their gradients and batch buffers");
        for (int i = 0; i < q->nbufs; i++) {
            s_buf *b = &q->buf[i];
            CUDA_CHECK(cudaMalloc(&b->x, trn_cudnn_buf_bytes(&q->ty, nb, feat[i])));
            CUDA_CHECK(cudaMalloc(&b->g, trn_cudnn_buf_bytes(&q->ty, nb, feat[i])));
        }
        CUDA_CHECK(cudaMalloc(&q->ones, sz.ones));
        CUDA_CHECK(cudaMalloc(&q->y, sz.labels));
        if (sz.stage)
            CUDA_CHECK(cudaMalloc(&q->stage, sz.stage));
        if (sz.gconv)
            CUDA_CHECK(cudaMalloc(&q->gconv, sz.gconv));
        if (q->prec == TRN_BF16)
            k_fill<__nv_bfloat16>
                <<<s_blocks(nb), 256, 0, q->stream>>>((__nv_bfloat16 *)q->ones, 1.0f, nb);
        else if (q->prec == TRN_FP16)
            k_fill<__half>
                <<<s_blocks(nb), 256, 0, q->stream>>>((__half *)q->ones, 1.0f, nb);
        else
            k_fill<float>
                <<<s_blocks(nb), 256, 0, q->stream>>>((float *)q->ones, 1.0f, nb);
        CUDA_CHECK(cudaGetLastError());
        q->cap = nb;
    }
    if (nb == q->desc_nb)
        return;
    for (int i = 0; i < q->nbufs; i++) {
        s_buf *b = &q->buf[i];
        CUDNN_CHECK(p_cudnnSetTensor4dDescriptor(
            b->td, CUDNN_TENSOR_NHWC, (cudnnDataType_t)q->ty.act, nb, b->c, b->h, b->w));
    }
    for (int i = 0; i < q->nops; i++)
        if (q->op[i].kind == Q_CONV)
            s_algos(q, i, &q->op[i], nb);
    q->desc_nb = nb;
}

#endif
