/*  cuda_mlp_state.cuh - the CUDA MLP backend's state (backend_cuda.cu
    only; split out of it to keep that file readable): the data-parallel
    settings, the device-resident training set, the captured graphs, the
    cuBLASLt descriptors and the backend object. Ownership: everything
    device-side is the backend's, freed at detach, except s_data (kept
    across attach/detach, freed by trn_cuda_backend_destroy); the
    data-parallel settings and the --cuda-graphs policy are kept across
    attach/detach too (host values).
    Needs MAXL, s_args (cuda_mlp_kernels.cuh) and the CUDA, cuBLAS(Lt)
    and trainer headers included before it. */
#ifndef JZ_TRN_CUDA_MLP_STATE_CUH
#define JZ_TRN_CUDA_MLP_STATE_CUH

/* data-parallel settings (set_comm): kept across attach/detach */
typedef struct {
    trn_comm *comm; /* borrowed; NULL: one rank */
    trn_dist_opts o;
    trn_grad_path path;
} s_ranks;

/* the device-resident training set (set_data) and the epoch's order
   (set_order): kept across attach/detach, freed by destroy */
typedef struct {
    float *x;         /* n * dim, fp32 as on the host */
    unsigned char *y; /* n labels */
    int *perm;        /* the epoch's order, n indices */
    int n, dim;       /* n = 0: no data on the device */
} s_data;

/* CUDA graphs of the one-rank device-data step, one per batch size */
#define NGRAPH 4
typedef struct {
    int nb;               /* 0: free slot */
    cudaGraphExec_t exec; /* owned */
    long used;            /* last use, for eviction */
} s_graph;

/* layer l's fused forward (--cuda-epilogue lt) at batch size nb:
   cuBLASLt's descriptors and the algorithm its heuristic chose */
typedef struct {
    int nb; /* 0: not prepared */
    int ok; /* 1: an algorithm; 0: GemmEx + k_bias_act at this size */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} s_lt;

typedef struct {
    cublasHandle_t blas;
    cublasLtHandle_t lt; /* --cuda-epilogue lt; NULL: kernel */
    s_lt ltl[MAXL];      /* per layer */
    int lt_said;         /* the fallback line was printed */
    cudaStream_t stream;
    void *blas_ws;      /* cuBLAS workspace (the same with and without graphs) */
    int nl;             /* linear layers */
    int dims[MAXL + 1]; /* dims[0] input ... dims[nl] classes */
    trn_precision prec;
    int esize;                                      /* bytes per stored element */
    float *w[MAXL], *b[MAXL], *mw[MAXL], *mb[MAXL]; /* fp32 master + momentum */
    void *wlp[MAXL], *blp[MAXL];                    /* compute-format copies */
    void *gw[MAXL], *gb[MAXL];                      /* gradients, compute format */
    void *act[MAXL + 1]; /* act[0] input, act[i+1] output of layer i */
    void *dact[MAXL + 1];
    void *ones; /* cap ones in T: bias gradients as a GEMM */
    float *xin; /* fp32 input staging (host batches) */
    unsigned char *y;
    float *scratch; /* loss, norms[2*MAXL], gsq */
    float *part;    /* the norms' per-block partial sums (trn_norms) */
    int *flag;
    s_args *args;   /* the step's scalars on the device */
    s_args *args_h; /* and in pinned host memory (written before each step) */
    float *res_h;   /* pinned: scratch read back at the end of the step */
    int *flag_h;    /* pinned: the overflow flag read back */
    int cap;
    trn_opt_kind opt;
    double momentum, wd, trust;
    int nesterov;
    double smoothing;
    int quiet;
    trn_graphs graphs;     /* --cuda-graphs and its fallback (graph_policy.h);
                              kept across attach/detach */
    int warm_nb;           /* batch size of the last eager device-data step */
    long nsteps;           /* steps taken since attach (graph eviction clock) */
    s_graph graph[NGRAPH]; /* captured steps (device data, one rank) */
    s_ranks rk;
    trn_devdist *dd; /* with rk.comm: built at attach */
    s_data data;
    trn_backend *cnn; /* a "cnn:" model: backend_cudnn.cu's backend (owned, kept
                         across attach/detach); NULL until one is attached */
    int cnn_on;       /* attached to a CNN: every call goes to cnn */
    /* the small-batch measure (cuda_mlp_half.cuh) */
    int half;          /* asked for by set_half, for the next one-rank step */
    int meas;          /* this step's first part (0: no measure) */
    int half_ok;       /* half_sq holds the last step's norms */
    double half_sq[2]; /* |first half|^2, |the rest|^2 (gns.h's units) */
    void *gtmp;        /* the first half's gradient of one tensor, in T */
} s_cuda;

#endif
