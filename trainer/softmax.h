/*  softmax.h - the mean softmax cross-entropy of rows of at most 16
    logits, 16 lanes of AVX-512 a row (softmax_avx512.c): the MLP's loss
    (10 classes), in front of the template's (kernels_impl.h), which takes
    two exp and a log in double per logit (4.4% of a bf16 step at batch
    1024, one thread). The same contract as trn_softmax_ce_f (trn.h): the
    mean loss, dlogits (may be NULL) = gscale * d(sum of losses), label
    smoothing, *correct (may be NULL) the rows whose largest logit (the
    first of equal ones) is the label. Here exp is a float polynomial
    (within 3 ulp), the sums are float and log(sum) is log1p of the
    other logits' share, the loss summed in double: within 1e-6 of the
    template's, relative, on rows the template gets right; on confident
    rows, where the template's log of its sum rounds to 0 (a gap of
    about 37 between the logits), within 1e-6 of log1p(the others' share)
    (tests/test_trn_grad.c); where a logit is NaN the loss is NaN and the
    row's right answer may count otherwise than there. Pure; no
    allocation, no errors. */
#ifndef TRN_SOFTMAX_H
#define TRN_SOFTMAX_H

#include <stdint.h>

/* 1 when k (classes) is 1..16 and the CPU has AVX-512 */
int trn_softmax_ce16_ok(int k);

double trn_softmax_ce16(const float *logits, const uint8_t *labels, float *dlogits, int n,
                        int k, double smoothing, double gscale, int *correct);

#endif
