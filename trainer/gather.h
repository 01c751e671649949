/*  gather.h - taking a batch out of a dataset in the epoch's order, shared
    by the host (train.c, through trn_gather_rows) and the CUDA backend's
    device gather (backend_cuda.cu, k_gather: one thread per element, each
    finding its source with trn_gather_src).

    A batch is the examples perm[at .. at + nb) of the epoch's order perm:
    row r of the batch is dataset row perm[at + r]. Both sides take their
    indices from the same perm (the trainer draws it from (seed, epoch) and
    the device gets a copy once per epoch), so a device-resident run sees
    the examples of the host run in the same order, bit for bit.
    tests/test_trn_gather.c checks the element-wise form against the row
    copy. Pure functions: no allocation, no errors (indices are the
    caller's to keep in range). */
#ifndef TRN_GATHER_H
#define TRN_GATHER_H

#include <stdint.h>

#ifdef __CUDACC__
#define TRN_HD __host__ __device__
#else
#define TRN_HD
#endif

/* Element i (0 <= i < nb * dim, row-major) of the batch perm[at .. at+nb)
   of a dataset of rows of dim values: the index of its source element. */
TRN_HD static inline long trn_gather_src(const int *perm, int at, int dim, long i)
{
    return (long)perm[at + i / dim] * dim + i % dim;
}

/* Row r of that batch: the dataset row its label comes from. */
TRN_HD static inline int trn_gather_row(const int *perm, int at, int r)
{
    return perm[at + r];
}

#ifndef __CUDACC__
/* The host's gather: rows perm[at .. at+nb) of x (rows of dim floats) and
   their labels y into xo (nb * dim) and yo (nb). Everything borrowed. */
void trn_gather_rows(const float *x, const uint8_t *y, int dim, const int *perm, int at,
                     int nb, float *xo, uint8_t *yo);

/* The same with the rows rounded to bf16 (to nearest even, as
   trn_bf16_from_f32) into xo as they are copied: the input of a bf16
   model on oneDNN (trn_net_input_bf16), without an fp32 copy between. */
void trn_gather_rows_bf16(const float *x, const uint8_t *y, int dim, const int *perm,
                          int at, int nb, uint16_t *xo, uint8_t *yo);

/* trn_gather_rows over a dataset already in bf16 (x: rows of dim bf16
   values, the fp32 set rounded as trn_gather_rows_bf16 rounds it): the
   same batch in half the bytes read. */
void trn_gather_rows_h(const uint16_t *x, const uint8_t *y, int dim, const int *perm,
                       int at, int nb, uint16_t *xo, uint8_t *yo);

/* The gathers out of a set's bytes (trn_dataset.code: x[i] ==
   lut[code[i]]): trn_gather_rows's batch, and with lut16 (lut rounded to
   bf16 as trn_bf16_from_f32 rounds it) trn_gather_rows_bf16's, bit for
   bit, reading a quarter of the fp32 set's bytes. The table lookups run
   16 (fp32: AVX-512's gather) or 64 (bf16: AVX-512 VBMI's byte permutes)
   values at a time where the CPU has those instructions, one at a time
   elsewhere. */
void trn_gather_rows_code(const uint8_t *code, const float *lut, const uint8_t *y,
                          int dim, const int *perm, int at, int nb, float *xo,
                          uint8_t *yo);
void trn_gather_rows_code_h(const uint8_t *code, const uint16_t *lut16, const uint8_t *y,
                            int dim, const int *perm, int at, int nb, uint16_t *xo,
                            uint8_t *yo);

/* 1 when those take their vector paths on this CPU (bf16: AVX-512 VBMI;
   fp32: AVX-512 where the kernel says the CPU is "Not affected" by the
   "Downfall" gather slowdown, /sys/devices/system/cpu/vulnerabilities):
   the trainer reads the bytes only then (one value at a time is slower
   than copying rows), and data.c keeps them only then.
   And, for tests, the same gathers one value at a time. */
int trn_gather_code_simd(int bf16);
void trn__gather_rows_code_scalar(const uint8_t *code, const float *lut, const uint8_t *y,
                                  int dim, const int *perm, int at, int nb, float *xo,
                                  uint8_t *yo);
void trn__gather_rows_code_h_scalar(const uint8_t *code, const uint16_t *lut16,
                                    const uint8_t *y, int dim, const int *perm, int at,
                                    int nb, uint16_t *xo, uint8_t *yo);
#endif

#endif
