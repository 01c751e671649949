/*  align.h - memory on 64-byte (cache line) boundaries for the arrays the
    MLP's and CNN's kernels stream through: the network's pass buffers
    (net_bufs.c), its parameters, their gradients, moments and rounded
    copies (net.c), the fp32 batch (train_batch.c) and the linears' bf16
    weights and gradients (linear_dnnl.c); and on huge pages for the
    training set's bytes (data.c).

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

/* bytes for a large set read in random rows (the training set's bytes):
   at 2 MiB boundaries and advised onto transparent huge pages when it is
   2 MiB or more (one TLB entry covers 2 MiB of rows instead of 4 KiB;
   the gather of a 1024-row batch out of Fashion-MNIST's bytes ran 200 ->
   140 us, one thread, this project's VM), else as trn_alloc64. Not
   zeroed; NULL when out of memory. */
void *trn_alloc_rows(size_t bytes);

#endif
