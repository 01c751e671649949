/*  kernels_f32.c - the layer kernels in float, as the trainer runs them
    (see kernels_impl.h). */
#include <cblas.h>

#include "trainer/trn.h"

#define R float
#define SFX f
#define GEMM cblas_sgemm
#include "trainer/kernels_impl.h"
