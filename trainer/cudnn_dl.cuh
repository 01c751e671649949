/*  cudnn_dl.cuh - cuDNN opened at run time for the CUDA CNN: the entry
    points it takes and the version check after the dlopen (cudnn_host.h).
    A section of backend_cudnn.cu (included by it alone), split out to keep
    that file under 1000 lines. NEVER RUN ON A GPU. */
#ifndef JZ_TRN_CUDNN_DL_CUH
#define JZ_TRN_CUDNN_DL_CUH

/* ---- cuDNN, loaded when a CNN is attached ------------------------------------- */

/* jizhi-train-cuda does not link libcudnn: a machine without it still runs
   the MLP; the first CNN attach dlopens it (the binary's run path, then
   the loader's) and takes these entry points. */
#define S_DNN_FUNCS(X)                                                                   \
    X(cudnnBatchNormalizationBackward)                                                   \
    X(cudnnBatchNormalizationForwardTraining)                                            \
    X(cudnnConvolutionBackwardData)                                                      \
    X(cudnnConvolutionBackwardFilter)                                                    \
    X(cudnnConvolutionForward)                                                           \
    X(cudnnCreate)                                                                       \
    X(cudnnCreateConvolutionDescriptor)                                                  \
    X(cudnnCreateFilterDescriptor)                                                       \
    X(cudnnCreateTensorDescriptor)                                                       \
    X(cudnnDeriveBNTensorDescriptor)                                                     \
    X(cudnnDestroy)                                                                      \
    X(cudnnDestroyConvolutionDescriptor)                                                 \
    X(cudnnDestroyFilterDescriptor)                                                      \
    X(cudnnDestroyTensorDescriptor)                                                      \
    X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                                       \
    X(cudnnGetConvolutionBackwardDataWorkspaceSize)                                      \
    X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)                                     \
    X(cudnnGetConvolutionBackwardFilterWorkspaceSize)                                    \
    X(cudnnGetConvolutionForwardAlgorithm_v7)                                            \
    X(cudnnGetConvolutionForwardWorkspaceSize)                                           \
    X(cudnnGetCudartVersion)                                                             \
    X(cudnnGetErrorString)                                                               \
    X(cudnnGetTensor4dDescriptor)                                                        \
    X(cudnnGetVersion)                                                                   \
    X(cudnnSetConvolution2dDescriptor)                                                   \
    X(cudnnSetConvolutionMathType)                                                       \
    X(cudnnSetFilter4dDescriptor)                                                        \
    X(cudnnSetStream)                                                                    \
    X(cudnnSetTensor4dDescriptor)

#define S_DECL(f) static decltype(&f) p_##f;
S_DNN_FUNCS(S_DECL)

/* 0 when cuDNN's entry points are loaded and its version is the one this
   program was built for, or -1 with the reason in err; *mismatch is set
   when the library was found but its version (or the CUDA runtime it was
   built for) differs: cudnn_host.h's check, naming both versions. The
   library is opened once per process (the file name from the headers'
   CUDNN_MAJOR); an older minor than the headers' is said once on stderr. */
static int s_dnn_load(char *err, int *mismatch)
{
    static int state; /* 0 not tried, 1 loaded, -1 failed, -2 wrong version */
    static char why[TRN_ERRLEN];
    if (state == 0) {
        char so[32]; /* the headers' major: libcudnn.so.9 for cuDNN 9 */
        trn_cudnn_soname(CUDNN_VERSION, so, sizeof so);
        char first[160] = ""; /* why so did not load: the reason that counts */
        void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(first, sizeof first, "%s", dlerror());
            h = dlopen("libcudnn.so", RTLD_NOW | RTLD_LOCAL);
        }
        state = h ? 1 : -1;
        if (!h)
            snprintf(why, sizeof why,
                     "cuDNN not found (%s): the CUDA CNN needs %s (the CUDA "
                     "toolkit's cuDNN, or NVIDIA's nvidia-cudnn wheel on "
                     "LD_LIBRARY_PATH)",
                     first, so);
#define S_LOAD(f)                                                                        \
    if (state > 0 && !(p_##f = (decltype(&f))dlsym(h, #f))) {                            \
        snprintf(why, sizeof why, "cuDNN lacks %s", #f);                                 \
        state = -1;                                                                      \
    }
        S_DNN_FUNCS(S_LOAD)
#undef S_LOAD
        int rt = 0;
        char warn[TRN_ERRLEN] = "";
        if (state > 0 && cudaRuntimeGetVersion(&rt) != cudaSuccess)
            rt = 0;
        if (state > 0 &&
            trn_cudnn_version_check((long)p_cudnnGetVersion(), CUDNN_VERSION,
                                    (long)p_cudnnGetCudartVersion(), rt, why, warn) < 0) {
            state = -2;
            if (first[0]) { /* the fallback's libcudnn.so was another cuDNN */
                size_t l = strlen(why);
                snprintf(why + l, sizeof why - l, " (%s did not load: %s)", so, first);
            }
        }
        if (warn[0]) /* an older minor than the headers': said once, runs on */
            fprintf(stderr, "%s\n", warn);
    }
    *mismatch = state == -2;
    if (state < 0)
        snprintf(err, TRN_ERRLEN, "%s", why);
    return state > 0 ? 0 : -1;
}

#endif
