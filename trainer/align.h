/*  align.h - memory for the arrays the kernels stream through: batches,
    activations, gradients, weights and their bf16 copies, on 64-byte
    (cache line) boundaries.

    Why: a large malloc comes from mmap at 16 bytes past a page boundary,
    so every row of a batch and every AMX/AVX-512 load in oneDNN's matmul
    straddles two cache lines. Measured on this project's AMX VM, one
    thread: the MLP's first bf16 linear (1024x784 by 784x256) ran 0.55-0.65
    ms on such buffers and 0.42-0.45 ms on 64-byte aligned ones.

    What is returned is the caller's, freed with free(). Nothing here
    keeps contents across a growth: the buffers are a pass's scratch.
*/
#ifndef TRN_ALIGN_H
#define TRN_ALIGN_H

#include <stddef.h>

/* bytes (0 allowed: one line) on a 64-byte boundary, zeroed when zero != 0.
   NULL when out of memory. */
void *trn_alloc64(size_t bytes, int zero);

/* Replaces *p (freed; may be NULL) by a new 64-byte aligned block of
   bytes, contents not kept. 0, or -1 when out of memory, *p then
   unchanged and still the caller's. */
int trn_regrow64(void **p, size_t bytes);

#endif
