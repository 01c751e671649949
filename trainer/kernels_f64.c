/*  kernels_f64.c - the same layer kernels in double, for the gradient
    tests against finite differences (see kernels_impl.h). */
#include <cblas.h>

#include "trainer/trn.h"

#define R double
#define SFX d
#define GEMM cblas_dgemm
#include "trainer/kernels_impl.h"
