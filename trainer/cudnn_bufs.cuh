/*  cudnn_bufs.cuh - the CUDA CNN's device buffers, tensor descriptors and
    convolution algorithms per batch size (the workspace grown to what they
    need), at the attached precision's types (cudnn_host.h: the element
    size and cuDNN data type; the sizes from trn_cudnn_sizes_for). A
    section of backend_cudnn.cu (included by it alone, after its structs),
    split out to keep that file under 1000 lines. NEVER RUN ON A GPU. */
#ifndef JZ_TRN_CUDNN_BUFS_CUH
#define JZ_TRN_CUDNN_BUFS_CUH

/* The workspace grown to need bytes (never shrunk). */
static void s_ws_grow(s_cnn *q, size_t need)
{
    if (need > q->ws_size) {
        CUDA_CHECK(cudaStreamSynchronize(q->stream));
        cudaFree(q->ws);
        CUDA_CHECK(cudaMalloc(&q->ws, need));
        q->ws_size = need;
    }
}

/* Conv algorithms of op i (o) at batch nb: the choice cached for (i, nb)
   when this batch size was seen before (cudnn_host.h), else the first
   deterministic one of each _v7 list whose workspace fits S_WS_MAX, then
   cached; the workspace grown to the largest the three need. */
static void s_algos(s_cnn *q, int i, s_op *o, int nb)
{
    const trn_algo_entry *hit = trn_algo_cache_get(&q->algos, i, nb);
    if (hit) {
        o->fa = (cudnnConvolutionFwdAlgo_t)hit->algo[0];
        o->ba = (cudnnConvolutionBwdDataAlgo_t)hit->algo[1];
        o->fb = (cudnnConvolutionBwdFilterAlgo_t)hit->algo[2];
        s_ws_grow(q, hit->ws);
        return;
    }
    cudnnTensorDescriptor_t xd = q->buf[o->in].td, yd = q->buf[o->out].td;
    int n = 0;
    size_t need = 0, sz = 0;
    cudnnConvolutionFwdAlgoPerf_t pf[8];
    CUDNN_CHECK(p_cudnnGetConvolutionForwardAlgorithm_v7(q->dnn, xd, o->fd, o->cd, yd, 8,
                                                         &n, pf));
    o->fa = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    for (int j = 0; j < n; j++)
        if (pf[j].status == CUDNN_STATUS_SUCCESS &&
            pf[j].determinism == CUDNN_DETERMINISTIC && pf[j].memory <= S_WS_MAX) {
            o->fa = pf[j].algo;
            break;
        }
    CUDNN_CHECK(p_cudnnGetConvolutionForwardWorkspaceSize(q->dnn, xd, o->fd, o->cd, yd,
                                                          o->fa, &sz));
    need = sz > need ? sz : need;
    cudnnConvolutionBwdDataAlgoPerf_t pd[8];
    CUDNN_CHECK(p_cudnnGetConvolutionBackwardDataAlgorithm_v7(q->dnn, o->fd, yd, o->cd,
                                                              xd, 8, &n, pd));
    o->ba = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    for (int j = 0; j < n; j++)
        if (pd[j].status == CUDNN_STATUS_SUCCESS &&
            pd[j].determinism == CUDNN_DETERMINISTIC && pd[j].memory <= S_WS_MAX) {
            o->ba = pd[j].algo;
            break;
        }
    CUDNN_CHECK(p_cudnnGetConvolutionBackwardDataWorkspaceSize(q->dnn, o->fd, yd, o->cd,
                                                               xd, o->ba, &sz));
    need = sz > need ? sz : need;
    cudnnConvolutionBwdFilterAlgoPerf_t pw[8];
    CUDNN_CHECK(p_cudnnGetConvolutionBackwardFilterAlgorithm_v7(q->dnn, xd, yd, o->cd,
                                                                o->fd, 8, &n, pw));
    o->fb = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    for (int j = 0; j < n; j++)
        if (pw[j].status == CUDNN_STATUS_SUCCESS &&
            pw[j].determinism == CUDNN_DETERMINISTIC && pw[j].memory <= S_WS_MAX) {
            o->fb = pw[j].algo;
            break;
        }
    CUDNN_CHECK(p_cudnnGetConvolutionBackwardFilterWorkspaceSize(q->dnn, xd, yd, o->cd,
                                                                 o->fd, o->fb, &sz));
    need = sz > need ? sz : need;
    int algo[TRN_ALGO_KINDS] = {(int)o->fa, (int)o->ba, (int)o->fb};
    trn_algo_cache_put(&q->algos, i, nb, algo, need);
    s_ws_grow(q, need);
}

/* Buffers for nb examples and every descriptor at batch size nb, sized by
   trn_cudnn_sizes_for at the attached precision's types. */
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
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess && sz.act + sz.stage > fr) {
            fprintf(stderr,
                    "jizhi-train: CUDA CNN: batch %d needs %.0f MB of activations at "
                    "--precision %s, the GPU has %.0f MB free; use a smaller "
                    "--batch-size\n",
                    nb, (sz.act + sz.stage) / 1e6, trn_precision_name(q->prec), fr / 1e6);
            exit(1);
        }
        size_t es = (size_t)q->ty.esize;
        for (int i = 0; i < q->nbufs; i++) {
            s_buf *b = &q->buf[i];
            cudaFree(b->x), cudaFree(b->g);
            CUDA_CHECK(cudaMalloc(&b->x, (size_t)nb * feat[i] * es));
            CUDA_CHECK(cudaMalloc(&b->g, (size_t)nb * feat[i] * es));
        }
        cudaFree(q->ones), cudaFree(q->y), cudaFree(q->stage);
        q->stage = NULL;
        CUDA_CHECK(cudaMalloc(&q->ones, (size_t)nb * es));
        CUDA_CHECK(cudaMalloc(&q->y, (size_t)nb));
        if (sz.stage)
            CUDA_CHECK(cudaMalloc(&q->stage, sz.stage));
        if (sz.gconv && !q->gconv)
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
