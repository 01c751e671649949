/*  cuda_mlp_lt.cuh - the CUDA MLP backend's fused forward epilogue
    (--cuda-epilogue lt): each layer's bias (+ ReLU) in cuBLASLt's
    epilogue. A section of backend_cuda.cu (included by it alone, after
    s_cuda, dtype<T> and S_BLAS_WS), split out to keep that file under
    1000 lines. */
#ifndef JZ_TRN_CUDA_MLP_LT_CUH
#define JZ_TRN_CUDA_MLP_LT_CUH

static void s_lt_free(s_lt *p)
{
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
    if (p->a)
        cublasLtMatrixLayoutDestroy(p->a);
    if (p->b)
        cublasLtMatrixLayoutDestroy(p->b);
    if (p->d)
        cublasLtMatrixLayoutDestroy(p->d);
    memset(p, 0, sizeof *p);
}

/* Layer l's fused forward at batch nb, prepared once per batch size (host
   work only, no GPU operation: it may run inside a graph capture): act[l+1]
   (m x nb) = W^T act[l] + b, then ReLU unless last, the bias added in
   fp32 before the one rounding to T. 1 when cuBLASLt has an algorithm. */
template <typename T> static int s_lt_ready(s_cuda *c, int l, int nb)
{
    s_lt *p = &c->ltl[l];
    if (p->nb == nb)
        return p->ok;
    s_lt_free(p);
    p->nb = nb;
    int k = c->dims[l], m = c->dims[l + 1];
    cudaDataType_t dt = dtype<T>();
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t ep =
        l < c->nl - 1 ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    const void *bias = c->blp[l];
    size_t ws = S_BLAS_WS;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h[32]; /* split-K ones may be filtered out */
    int got = 0;
    /* fp32 math (no TF32: cuBLASLt uses it only under ..._FAST_TF32). Not
       the PEDANTIC type GemmEx gets: whether cuBLASLt's matmul takes it was
       not established here, and COMPUTE_32F is its documented fp32 type */
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                       sizeof ta) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                       sizeof tb) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep,
                                       sizeof ep) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                       sizeof bias) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&p->a, dt, k, m, k) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&p->b, dt, k, nb, k) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&p->d, dt, m, nb, m) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref,
                                             CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ws, sizeof ws) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->a, p->b, p->d, p->d, pref, 32, h,
                                       &got) == CUBLAS_STATUS_SUCCESS) {
        /* the first usable one whose split-K partial sums (if any) are added
           in the compute type (float): not in place in the output buffer
           nor in the output type, which are the half type (the fp32 sums
           rounded once, as GemmEx is told too). Filtered here rather than
           by CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, which does not say
           whether it keeps the algorithms without split-K */
        for (int i = 0; i < got && !p->ok; i++) {
            uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE;
            size_t n = 0;
            if (h[i].state != CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoConfigGetAttribute(&h[i].algo,
                                                     CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                     &red, sizeof red,
                                                     &n) != CUBLAS_STATUS_SUCCESS)
                continue;
            if (red == CUBLASLT_REDUCTION_SCHEME_NONE ||
                red == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) {
                p->algo = h[i].algo;
                p->ok = 1;
            }
        }
    }
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (!p->ok && !c->lt_said && !c->quiet) {
        c->lt_said = 1;
        fprintf(stderr,
                "jizhi-train: cuda: cuBLASLt offers no fused bias%s for layer %d at "
                "batch %d; GemmEx and a kernel there\n",
                l < c->nl - 1 ? " + ReLU" : "", l, nb);
    }
    return p->ok;
}

#endif
