/*  cuda_mlp_half.cuh - the CUDA MLP step's small-batch measure for the
    gradient-noise scale (trn_backend.set_half / half_sqnorms; the host
    logic, which rows and how the norms become the reported metrics, is
    gns.h, shared with the CPU step).

    On a measuring step of one rank, after layer l's weight and bias
    gradients of the whole batch (unchanged: the update and the trajectory
    are those of a step that does not measure), the same GEMMs run once more
    over the batch's first `half` rows into a scratch buffer (gtmp): the
    first half's gradient in the step's units (dscale = loss_scale / nb). Its
    squared norm (unscaled) and that of the whole batch's gradient less it
    (the other half's, the CPU's definition: accumulators minus the first
    half's) are summed on the device by k_sqdiff and the deterministic fold
    of the norms (k_norms_fold), into scratch[SCR_HALF + 1] and
    [SCR_HALF + 3], and come back with the step's other scalars (no extra
    wait). Costs half a weight-gradient GEMM per layer on measuring steps
    only, which never run as a CUDA graph (eager launches). Several ranks:
    nothing is measured. A section of backend_cuda.cu (included by it
    alone, after s_gemm). NEVER RUN ON A GPU: written and compiled on a
    machine without one. */
#ifndef JZ_TRN_CUDA_MLP_HALF_CUH
#define JZ_TRN_CUDA_MLP_HALF_CUH

/* part[2b] = 0, part[2b+1] = sum over block b of ((g - sub) * inv_scale)^2
   (sub NULL: g alone), for k_norms_fold. blockDim.x 256. */
template <typename T>
__global__ void k_sqdiff(const T *g, const T *sub, long n, const s_args *a, float *part)
{
    __shared__ float sg[256];
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    float y = 0;
    if (i < n) {
        float d = (to_f<T>(g[i]) - (sub ? to_f<T>(sub[i]) : 0.0f)) * a->inv_scale;
        y = d * d;
    }
    sg[threadIdx.x] = y;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sg[threadIdx.x] += sg[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = 0;
        part[2 * blockIdx.x + 1] = sg[0];
    }
}

/* |first half|^2 into out[1], |whole - first half|^2 into out[3], for the
   first-half gradient in gtmp and the whole batch's in g (n elements). */
template <typename T>
static void s_half_norms(s_cuda *c, const void *g, long n, float *out)
{
    int nblk = (int)((n + 255) / 256);
    k_sqdiff<T>
        <<<nblk, 256, 0, c->stream>>>((const T *)c->gtmp, NULL, n, c->args, c->part);
    k_norms_fold<<<1, 256, 0, c->stream>>>(c->part, nblk, out);
    k_sqdiff<T><<<nblk, 256, 0, c->stream>>>((const T *)g, (const T *)c->gtmp, n, c->args,
                                             c->part);
    k_norms_fold<<<1, 256, 0, c->stream>>>(c->part, nblk, out + 2);
}

/* Layer l (k inputs, m outputs) of a measuring step: its first-half weight
   and bias gradients into gtmp one after the other, each measured against
   the whole batch's (gw[l], gb[l], already computed). */
template <typename T> static void s_half_layer(s_cuda *c, int l, int k, int m, int nb)
{
    int h = c->meas;
    s_gemm<T>(c, CUBLAS_OP_N, CUBLAS_OP_T, k, m, h, c->act[l], k, c->dact[l + 1], m,
              c->gtmp, k, 0.0f);
    s_half_norms<T>(c, c->gw[l], (long)k * m, c->scratch + SCR_HALF);
    s_gemm<T>(c, CUBLAS_OP_N, CUBLAS_OP_N, m, 1, h, c->dact[l + 1], m, c->ones, nb,
              c->gtmp, m, 0.0f);
    s_half_norms<T>(c, c->gb[l], m, c->scratch + SCR_HALF);
}

/* Before a one-rank step of nb: the half asked for by set_half, if any and
   valid, becomes this step's measure (c->meas; the request is used up),
   with gtmp sized for the largest layer. */
static void s_half_begin(s_cuda *c, int nb)
{
    c->meas = c->half > 0 && c->half < nb ? c->half : 0;
    c->half = 0;
    c->half_ok = 0;
    if (c->meas && !c->gtmp) {
        long most = 1;
        for (int l = 0; l < c->nl; l++)
            if ((long)c->dims[l] * c->dims[l + 1] > most)
                most = (long)c->dims[l] * c->dims[l + 1];
        CUDA_CHECK(cudaMalloc(&c->gtmp, (size_t)most * c->esize));
    }
}

/* After s_results: the measured norms kept for half_sqnorms. */
static void s_half_end(s_cuda *c)
{
    if (c->meas) {
        c->half_sq[0] = c->res_h[SCR_HALF + 1];
        c->half_sq[1] = c->res_h[SCR_HALF + 3];
        c->half_ok = 1;
    }
    c->meas = 0;
}

/* trn_backend.set_half (trn.h): for the next one-rank step. */
static void s_set_half(void *self, int half)
{
    ((s_cuda *)self)->half = half > 0 ? half : 0;
}

/* trn_backend.half_sqnorms (trn.h): the last step's, or -1. */
static int s_half_sqnorms(void *self, double sq[2])
{
    s_cuda *c = (s_cuda *)self;
    if (c->cnn_on || !c->half_ok)
        return -1;
    sq[0] = c->half_sq[0];
    sq[1] = c->half_sq[1];
    return 0;
}

#endif
