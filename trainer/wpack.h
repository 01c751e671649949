/*  wpack.h - a linear layer's fp32 weights rounded to bf16 straight into
    the blocked layout oneDNN's AMX matmul kernels read (BA16a64b2a), for
    the bf16 MLP (linear_dnnl.c).

    Why: handed plain bf16 weights, the matmul packs them into that layout
    inside every execution; handed them packed, it does not (784 -> 256,
    batch 1024, one thread, this project's AMX VM: 0.53 -> 0.48 ms), but
    oneDNN's own reorder from fp32 into it took 0.14 ms for those weights,
    more than the packing saved. This does the rounding and the packing in
    one pass, at about the cost of the plain bf16 copy it replaces.

    The layout of a dims {A, B} matrix, A padded to a multiple of 32 and B
    to a multiple of 64 (padding zero): blocks of 32 a by 64 b, B's blocks
    outermost; inside a block [16][64][2]: element (a, b) at
        ((b / 64) * (A_pad / 32) + a / 32) * 2048
        + ((a % 32) / 2) * 128 + (b % 64) * 2 + a % 2.
    Rounding to nearest even, NaN kept quiet: trn_f2bf's values exactly.

    w is the layer's [m][k] (borrowed); dst (the caller's, sized by
    trn_wpack_elems) gets every value, and the vector packers also write
    zeros into some padding (past k within a block of 32, past m within a
    row of 16); the rest of the padding is never written: the caller
    zeroes dst once. No errors.
*/
#ifndef TRN_WPACK_H
#define TRN_WPACK_H

#include <stddef.h>
#include <stdint.h>

/* bf16 elements of the packed {a, b} matrix, padding included */
size_t trn_wpack_elems(int a, int b);

/* The forward's weights, dims {A = k, B = m}: a is the input feature. */
void trn_wpack_fwd(uint16_t *dst, const float *w, int m, int k);

/* The backward data's weights, dims {A = m, B = k}: a is the output. */
void trn_wpack_bwd(uint16_t *dst, const float *w, int m, int k);

/* Tests: the same one value at a time. */
void trn__wpack_fwd_scalar(uint16_t *dst, const float *w, int m, int k);
void trn__wpack_bwd_scalar(uint16_t *dst, const float *w, int m, int k);

#endif
