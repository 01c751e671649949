/*  dnn_compute.cc - the arithmetic of cudaemu's cuDNN (dnn.cc, dnn_impl.h):
    element loads and stores (float, half, bf16; stores rounded once, to
    nearest even), TF32 rounding, tensors and filters to and from packed
    float arrays, the three convolutions and batch norm's statistics. Sums
    in float, in a fixed order (ascending reduction index: r, s, c for the
    forward, r, s, k for backward data, n, p, q for backward filter,
    ascending positions for batch norm). NOT A GPU. */
#include "dnn_impl.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- elements ---------------------------------------------------------------------- */

bool dnn_type_valid(int t)
{
    return t >= CUDNN_DATA_FLOAT && t <= CUDNN_DATA_COMPLEX_FP64;
}

/* the types the computations here take (with float compute) */
bool dnn_type_computed(cudnnDataType_t t)
{
    return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_HALF || t == CUDNN_DATA_BFLOAT16;
}

size_t dnn_esize(cudnnDataType_t t)
{
    return t == CUDNN_DATA_FLOAT ? 4 : 2; /* only for dnn_type_computed types */
}

float dnn_ld(cudnnDataType_t t, const void *p, size_t i)
{
    if (t == CUDNN_DATA_FLOAT)
        return ((const float *)p)[i];
    if (t == CUDNN_DATA_HALF)
        return __half2float(((const __half *)p)[i]);
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

void dnn_st(cudnnDataType_t t, void *p, size_t i, float v)
{
    if (t == CUDNN_DATA_FLOAT)
        ((float *)p)[i] = v;
    else if (t == CUDNN_DATA_HALF)
        ((__half *)p)[i] = __float2half_rn(v);
    else
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
}

/* v rounded to TF32 (10 mantissa bits, to nearest, ties away from zero, as
   the tensor cores' cvt.rna); infinities and NaN kept */
float dnn_tf32(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u)
        u = (u + 0x1000u) & ~0x1fffu;
    memcpy(&v, &u, 4);
    return v;
}

/* alpha * acc, plus beta * the old value unless beta is 0 (then not read) */
float dnn_blend(float alpha, float acc, float beta, cudnnDataType_t t, const void *p,
                size_t i)
{
    float v = alpha * acc;
    if (beta != 0.0f)
        v = v + beta * dnn_ld(t, p, i);
    return v;
}

size_t dnn_tidx(const Tensor &t, long n, long c, long h, long w)
{
    return (size_t)(n * t.ns + c * t.cs + h * t.hs + w * t.ws);
}

/* bytes from the first element to past the last one */
size_t dnn_tbytes(const Tensor &t)
{
    size_t last = dnn_tidx(t, t.n - 1, t.c - 1, t.h - 1, t.w - 1);
    return (last + 1) * dnn_esize(t.type);
}

size_t dnn_fidx(const Filter &f, long k, long c, long r, long s)
{
    if (f.fmt == CUDNN_TENSOR_NHWC)
        return (size_t)(((k * f.r + r) * f.s + s) * f.c + c);
    return (size_t)(((k * f.c + c) * f.r + r) * f.s + s);
}

size_t dnn_fbytes(const Filter &f)
{
    return (size_t)f.k * f.c * f.r * f.s * dnn_esize(f.type);
}

/* the tensor's values as float, NHWC packed */
std::vector<float> dnn_unpack(const Tensor &t, const void *p, bool tf32)
{
    std::vector<float> out((size_t)t.n * t.h * t.w * t.c);
    size_t o = 0;
    for (long n = 0; n < t.n; n++)
        for (long h = 0; h < t.h; h++)
            for (long w = 0; w < t.w; w++)
                for (long c = 0; c < t.c; c++) {
                    float v = dnn_ld(t.type, p, dnn_tidx(t, n, c, h, w));
                    out[o++] = tf32 ? dnn_tf32(v) : v;
                }
    return out;
}

/* acc (NHWC packed) blended into the tensor at p */
void dnn_pack(const Tensor &t, void *p, const std::vector<float> &acc, float alpha,
              float beta)
{
    size_t o = 0;
    for (long n = 0; n < t.n; n++)
        for (long h = 0; h < t.h; h++)
            for (long w = 0; w < t.w; w++)
                for (long c = 0; c < t.c; c++) {
                    size_t i = dnn_tidx(t, n, c, h, w);
                    dnn_st(t.type, p, i, dnn_blend(alpha, acc[o++], beta, t.type, p, i));
                }
}

/* the filter's values as float, KRSC packed, flipped for CUDNN_CONVOLUTION */
std::vector<float> dnn_unpack_filter(const Filter &f, const void *p, bool flip, bool tf32)
{
    std::vector<float> out((size_t)f.k * f.r * f.s * f.c);
    size_t o = 0;
    for (long k = 0; k < f.k; k++)
        for (long r = 0; r < f.r; r++)
            for (long s = 0; s < f.s; s++)
                for (long c = 0; c < f.c; c++) {
                    long rr = flip ? f.r - 1 - r : r, ss = flip ? f.s - 1 - s : s;
                    float v = dnn_ld(f.type, p, dnn_fidx(f, k, c, rr, ss));
                    out[o++] = tf32 ? dnn_tf32(v) : v;
                }
    return out;
}

/* ---- convolutions: the computations ------------------------------------------------ */

/* y[n][p][q][k] (float, NHWC) from x (NHWC) and w (KRSC): each output
   summed over r, s, c ascending (the K outputs of a position side by side,
   so the innermost loop runs over independent sums) */
std::vector<float> dnn_fwd(const Geo &g, const std::vector<float> &x,
                           const std::vector<float> &w)
{
    std::vector<float> wt((size_t)g.R * g.S * g.C * g.K); /* [r][s][c][k] */
    for (long k = 0; k < g.K; k++)
        for (long r = 0; r < g.R; r++)
            for (long s = 0; s < g.S; s++)
                for (long c = 0; c < g.C; c++)
                    wt[(size_t)((r * g.S + s) * g.C + c) * g.K + k] =
                        w[(size_t)((k * g.R + r) * g.S + s) * g.C + c];
    std::vector<float> y((size_t)g.N * g.P * g.Q * g.K, 0.0f);
    for (long n = 0; n < g.N; n++)
        for (long p = 0; p < g.P; p++)
            for (long q = 0; q < g.Q; q++) {
                float *acc = &y[(size_t)((n * g.P + p) * g.Q + q) * g.K];
                for (long r = 0; r < g.R; r++) {
                    long hi = p * g.u - g.ph + r * g.dh;
                    if (hi < 0 || hi >= g.H)
                        continue;
                    for (long s = 0; s < g.S; s++) {
                        long wi = q * g.v - g.pw + s * g.dw;
                        if (wi < 0 || wi >= g.W)
                            continue;
                        const float *xp = &x[(size_t)((n * g.H + hi) * g.W + wi) * g.C];
                        for (long c = 0; c < g.C; c++) {
                            const float *wp =
                                &wt[(size_t)((r * g.S + s) * g.C + c) * g.K];
                            float xv = xp[c];
                            for (long k = 0; k < g.K; k++)
                                acc[k] = acc[k] + xv * wp[k];
                        }
                    }
                }
            }
    return y;
}

/* dx[n][h][w][c] (float, NHWC) from dy (NHWC) and w (KRSC): each summed
   over r, s, k ascending (the C sums of a position side by side) */
std::vector<float> dnn_bwd_data(const Geo &g, const std::vector<float> &dy,
                                const std::vector<float> &w)
{
    std::vector<float> dx((size_t)g.N * g.H * g.W * g.C, 0.0f);
    for (long n = 0; n < g.N; n++)
        for (long h = 0; h < g.H; h++)
            for (long wi = 0; wi < g.W; wi++) {
                float *acc = &dx[(size_t)((n * g.H + h) * g.W + wi) * g.C];
                for (long r = 0; r < g.R; r++) {
                    long tp = h + g.ph - r * g.dh;
                    if (tp < 0 || tp % g.u || tp / g.u >= g.P)
                        continue;
                    long p = tp / g.u;
                    for (long s = 0; s < g.S; s++) {
                        long tq = wi + g.pw - s * g.dw;
                        if (tq < 0 || tq % g.v || tq / g.v >= g.Q)
                            continue;
                        long q = tq / g.v;
                        const float *dp = &dy[(size_t)((n * g.P + p) * g.Q + q) * g.K];
                        for (long k = 0; k < g.K; k++) {
                            const float *wp = &w[(size_t)((k * g.R + r) * g.S + s) * g.C];
                            float d = dp[k];
                            for (long c = 0; c < g.C; c++)
                                acc[c] = acc[c] + d * wp[c];
                        }
                    }
                }
            }
    return dx;
}

/* dw[k][r][s][c] (float, KRSC) from x and dy (NHWC): over n, p, q */
std::vector<float> dnn_bwd_filter(const Geo &g, const std::vector<float> &x,
                                  const std::vector<float> &dy)
{
    std::vector<float> dw((size_t)g.K * g.R * g.S * g.C, 0.0f);
    for (long k = 0; k < g.K; k++)
        for (long r = 0; r < g.R; r++)
            for (long s = 0; s < g.S; s++) {
                float *acc = &dw[(size_t)((k * g.R + r) * g.S + s) * g.C];
                for (long n = 0; n < g.N; n++)
                    for (long p = 0; p < g.P; p++) {
                        long hi = p * g.u - g.ph + r * g.dh;
                        if (hi < 0 || hi >= g.H)
                            continue;
                        for (long q = 0; q < g.Q; q++) {
                            long wi = q * g.v - g.pw + s * g.dw;
                            if (wi < 0 || wi >= g.W)
                                continue;
                            float d = dy[(size_t)((n * g.P + p) * g.Q + q) * g.K + k];
                            const float *xp =
                                &x[(size_t)((n * g.H + hi) * g.W + wi) * g.C];
                            for (long c = 0; c < g.C; c++)
                                acc[c] = acc[c] + d * xp[c];
                        }
                    }
            }
    return dw;
}

/* per channel of X (M rows of C, NHWC packed): the mean and the biased
   variance, summed in float in ascending row order */
void dnn_moments(const std::vector<float> &X, long M, long C, std::vector<float> &mean,
                 std::vector<float> &var)
{
    std::vector<float> sum(C, 0.0f), sq(C, 0.0f);
    for (long i = 0; i < M; i++)
        for (long c = 0; c < C; c++)
            sum[c] = sum[c] + X[i * C + c];
    mean.assign(C, 0.0f);
    var.assign(C, 0.0f);
    for (long c = 0; c < C; c++)
        mean[c] = sum[c] / (float)M;
    for (long i = 0; i < M; i++)
        for (long c = 0; c < C; c++) {
            float d = X[i * C + c] - mean[c];
            sq[c] = sq[c] + d * d;
        }
    for (long c = 0; c < C; c++)
        var[c] = sq[c] / (float)M;
}

float dnn_invstd(float var, double eps)
{
    return (float)(1.0 / sqrt((double)var + eps));
}
