/*  layout.h - convolution weight layouts between the host and cuDNN:
    net.c keeps a k x k convolution's weights as OIHW (co, c, k, k); the
    CUDA CNN (backend_cudnn.cu) keeps them on the device as KRSC, also
    called OHWI (co, k, k, c), the filter layout of cuDNN's NHWC tensors.
    Pure functions on caller storage (src and dst must not overlap);
    tests/test_trn_gather.c checks them element by element and round trip. */
#ifndef TRN_LAYOUT_H
#define TRN_LAYOUT_H

/* OIHW (co x c x k x k) -> KRSC (co x k x k x c). */
static inline void trn_oihw_to_krsc(const float *src, float *dst, int co, int c, int k)
{
    for (int o = 0; o < co; o++)
        for (int i = 0; i < c; i++)
            for (int r = 0; r < k * k; r++)
                dst[((long)o * k * k + r) * c + i] = src[((long)o * c + i) * k * k + r];
}

/* KRSC -> OIHW, the inverse. */
static inline void trn_krsc_to_oihw(const float *src, float *dst, int co, int c, int k)
{
    for (int o = 0; o < co; o++)
        for (int i = 0; i < c; i++)
            for (int r = 0; r < k * k; r++)
                dst[((long)o * c + i) * k * k + r] = src[((long)o * k * k + r) * c + i];
}

#endif
