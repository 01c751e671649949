/*  kernels_f32.c - the layer kernels in float, as the trainer runs them
    (see kernels_impl.h); the softmax cross-entropy of up to 16 classes on
    AVX-512 (softmax_avx512.c) in front of the template's, where the CPU
    has it. */
#include <cblas.h>

#include "trainer/softmax.h"
#include "trainer/trn.h"

#define R float
#define SFX f
#define GEMM cblas_sgemm
#define SOFTMAX_CE trn__softmax_ce_generic_f
double trn__softmax_ce_generic_f(const float *logits, const uint8_t *labels,
                                 float *dlogits, int n, int k, double smoothing,
                                 double gscale, int *correct);
#include "trainer/kernels_impl.h"

double trn_softmax_ce_f(const float *logits, const uint8_t *labels, float *dlogits, int n,
                        int k, double smoothing, double gscale, int *correct)
{
    if (trn_softmax_ce16_ok(k))
        return trn_softmax_ce16(logits, labels, dlogits, n, k, smoothing, gscale,
                                correct);
    return trn__softmax_ce_generic_f(logits, labels, dlogits, n, k, smoothing, gscale,
                                     correct);
}
