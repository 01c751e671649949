/*  dnn_impl.h - what cudaemu's cuDNN (dnn.cc: the API, its checks and its
    stream work; dnn_compute.cc: the arithmetic) share: the descriptors'
    contents and the element, layout and convolution helpers. Internal to
    the libcudnn.so.9 they make (hidden symbols). NOT A GPU. */
#ifndef JZ_CUDAEMU_DNN_IMPL_H
#define JZ_CUDAEMU_DNN_IMPL_H

#include <cudnn.h>
#include <stddef.h>

#include <vector>

#pragma GCC visibility push(hidden)

struct cudnnContext {
    cudaStream_t stream;
};

struct cudnnTensorStruct {
    int set;
    cudnnDataType_t type;
    int n, c, h, w;
    int ns, cs, hs, ws; /* element strides */
};

struct cudnnFilterStruct {
    int set;
    cudnnDataType_t type;
    cudnnTensorFormat_t fmt; /* NCHW: KCRS, NHWC: KRSC */
    int k, c, r, s;
};

struct cudnnConvolutionStruct {
    int set;
    int pad_h, pad_w, u, v, dil_h, dil_w;
    cudnnConvolutionMode_t mode;
    cudnnDataType_t compute;
    cudnnMathType_t math;
};

typedef cudnnTensorStruct Tensor;
typedef cudnnFilterStruct Filter;
typedef cudnnConvolutionStruct Conv;

/* The geometry of one convolution: x N x C x H x W, filter K x C x R x S,
   y N x K x P x Q. */
struct Geo {
    long N, C, H, W, K, R, S, P, Q;
    long ph, pw, u, v, dh, dw;
    bool flip; /* CUDNN_CONVOLUTION: the kernel flipped */
    size_t es; /* bytes per element of x, w and y */
};

/* ---- elements (dnn_compute.cc) ----------------------------------------------------- */

bool dnn_type_valid(int t);                /* a cudnnDataType_t enumerant */
bool dnn_type_computed(cudnnDataType_t t); /* FLOAT, HALF, BFLOAT16: computed here */
size_t dnn_esize(cudnnDataType_t t);       /* bytes, of a computed type */
float dnn_ld(cudnnDataType_t t, const void *p, size_t i);
void dnn_st(cudnnDataType_t t, void *p, size_t i, float v); /* rounded once */
float dnn_tf32(float v);                                    /* v rounded to TF32 */
/* alpha * acc, plus beta * p[i] unless beta is 0 (then p is not read) */
float dnn_blend(float alpha, float acc, float beta, cudnnDataType_t t, const void *p,
                size_t i);

/* element indices and byte extents (first element to past the last) */
size_t dnn_tidx(const Tensor &t, long n, long c, long h, long w);
size_t dnn_tbytes(const Tensor &t);
size_t dnn_fidx(const Filter &f, long k, long c, long r, long s);
size_t dnn_fbytes(const Filter &f);

/* a tensor's values as float, NHWC packed (rounded to TF32 when tf32) */
std::vector<float> dnn_unpack(const Tensor &t, const void *p, bool tf32);
/* acc (NHWC packed) blended into the tensor at p (dnn_blend) */
void dnn_pack(const Tensor &t, void *p, const std::vector<float> &acc, float alpha,
              float beta);
/* a filter's values as float, KRSC packed, flipped in r and s when flip */
std::vector<float> dnn_unpack_filter(const Filter &f, const void *p, bool flip,
                                     bool tf32);

/* ---- convolutions (dnn_compute.cc), float NHWC / KRSC in and out ------------------- */

std::vector<float> dnn_fwd(const Geo &g, const std::vector<float> &x,
                           const std::vector<float> &w);
std::vector<float> dnn_bwd_data(const Geo &g, const std::vector<float> &dy,
                                const std::vector<float> &w);
std::vector<float> dnn_bwd_filter(const Geo &g, const std::vector<float> &x,
                                  const std::vector<float> &dy);

/* ---- batch normalization (dnn_compute.cc) ------------------------------------------ */

/* per channel of X (M rows of C): the mean and the biased variance */
void dnn_moments(const std::vector<float> &X, long M, long C, std::vector<float> &mean,
                 std::vector<float> &var);
float dnn_invstd(float var, double eps); /* 1 / sqrt(var + eps) */

#pragma GCC visibility pop

#endif
