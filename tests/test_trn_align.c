/*  test_trn_align.c - the trainer's aligned memory (trainer/align.h) and
    what rests on it: blocks on 64-byte (and, for the training set's rows,
    2 MiB) boundaries, zeroed on request; a failed regrowth leaves the
    caller's block; the network's pass buffers, which now grow without
    keeping their contents, give a net that has grown through small,
    large and evaluation batches the same results, bit for bit, as a
    fresh one; and the set's bytes gather the same batches as its floats.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jz_test.h"
#include "trainer/align.h"
#include "trainer/bf16.h"
#include "trainer/gather.h"
#include "trainer/trn.h"

/* Under AddressSanitizer an impossible allocation returns NULL, as it
   does without it, instead of ending the program: what the failure
   checks below test. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

TEST(blocks_are_aligned_and_zeroed_on_request)
{
    size_t sizes[] = {0, 1, 63, 64, 65, 1000, 3136, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = trn_alloc64(sizes[i], 1);
        REQUIRE(p);
        CHECK((uintptr_t)p % 64 == 0);
        int zero = 1;
        for (size_t j = 0; j < sizes[i]; j++)
            zero &= p[j] == 0;
        CHECK(zero);
        memset(p, 0xab, sizes[i]); /* the whole size is writable (ASan) */
        free(p);
    }
    CHECK(trn_alloc64(SIZE_MAX - 10, 0) == NULL); /* rounding up overflows */
}

TEST(a_failed_regrowth_keeps_the_callers_block)
{
    void *p = NULL;
    REQUIRE(trn_regrow64(&p, 100) == 0);
    CHECK(p && (uintptr_t)p % 64 == 0);
    memset(p, 7, 100);
    void *before = p;
    CHECK(trn_regrow64(&p, SIZE_MAX / 2) == -1);
    CHECK(p == before && ((unsigned char *)p)[99] == 7);
    REQUIRE(trn_regrow64(&p, 5000) == 0);
    CHECK((uintptr_t)p % 64 == 0);
    memset(p, 1, 5000);
    free(p);
}

TEST(row_blocks_sit_on_2_mib_boundaries)
{
    size_t big = (size_t)5 << 20;
    unsigned char *p = trn_alloc_rows(big);
    REQUIRE(p);
    CHECK((uintptr_t)p % ((size_t)2 << 20) == 0);
    memset(p, 3, big);
    free(p);
    CHECK(trn_alloc_rows(SIZE_MAX - 10) == NULL); /* rounding up overflows */
    unsigned char *q = trn_alloc_rows(1000); /* small: an ordinary line-aligned block */
    REQUIRE(q);
    CHECK((uintptr_t)q % 64 == 0);
    free(q);
}

/* An MLP (784 inputs, as Fashion-MNIST's) in prec after init(seed). */
static trn_net *s_mlp(const char *prec)
{
    char err[TRN_ERRLEN];
    trn_config cfg;
    trn_config_defaults(&cfg);
    snprintf(cfg.model, sizeof cfg.model, "mlp");
    snprintf(cfg.hidden, sizeof cfg.hidden, "32,16");
    trn_net *n = trn_net_new(&cfg, 1, 28, 28, 10, err);
    if (!n)
        return NULL;
    trn_rng r;
    trn_rng_seed(&r, 11);
    trn_net_init(n, &r);
    trn_net_set_precision(n, !strcmp(prec, "bf16") ? TRN_BF16 : TRN_FP32);
    return n;
}

TEST(pass_buffers_grown_without_their_contents_give_a_fresh_nets_results)
{
    enum { BIG = 96, DIM = 784 };
    float *x = malloc(sizeof(float) * BIG * DIM);
    uint8_t y[BIG];
    REQUIRE(x);
    trn_rng r;
    trn_rng_seed(&r, 5);
    for (int i = 0; i < BIG * DIM; i++)
        x[i] = (float)trn_rng_normal(&r);
    for (int i = 0; i < BIG; i++)
        y[i] = (uint8_t)(i % 10);
    const char *precs[] = {"fp32", "bf16"};
    for (int pi = 0; pi < 2; pi++) {
        trn_net *grown = s_mlp(precs[pi]), *fresh = s_mlp(precs[pi]);
        REQUIRE(grown && fresh);
        /* small training batches, a larger evaluation, then the large batch */
        trn_net_forward_backward(grown, x, y, 8, 1, 0.0, 1.0 / 8, NULL, NULL);
        trn_net_forward_backward(grown, x + 8 * DIM, y + 8, 16, 1, 0.0, 1.0 / 16, NULL,
                                 NULL);
        int c1 = 0, c2 = 0;
        double e1 = trn_net_eval(grown, x, y, 40, &c1);
        trn_net_zero_grad(grown);
        double l1 =
            trn_net_forward_backward(grown, x, y, BIG, 1, 0.0, 1.0 / BIG, NULL, NULL);
        double l2 =
            trn_net_forward_backward(fresh, x, y, BIG, 1, 0.0, 1.0 / BIG, NULL, NULL);
        CHECK(l1 == l2);
        for (int i = 0; i < trn_net_nparams(grown); i++) {
            const trn_param *a = trn_net_param(grown, i), *b = trn_net_param(fresh, i);
            CHECK(memcmp(a->g, b->g, (size_t)a->n * sizeof(float)) == 0);
        }
        double e2 = trn_net_eval(fresh, x, y, 40, &c2);
        CHECK(e1 == e2 && c1 == c2);
        trn_net_destroy(&grown);
        trn_net_destroy(&fresh);
    }
    free(x);
}

/* x[i] == lut[code[i]]: the byte gathers give the float gathers' batches,
   fp32 and bf16, bit for bit, on the vector paths (where this CPU has
   them) and one value at a time, for row lengths around the vectors'
   widths (16 and 64) and a permutation with a partial last batch. */
TEST(byte_gathers_equal_the_float_gathers)
{
    enum { N = 61 };
    float lut[256];
    uint16_t lut16[256];
    for (int v = 0; v < 256; v++) { /* varied signs, ties of the rounding */
        lut[v] = ((float)v / 255.0f - 0.2860f) / 0.3530f;
        if (v % 17 == 0)
            lut[v] = -lut[v] * 1e-3f;
        if (v % 31 == 0)
            lut[v] = 1.0f + (float)v / 128.0f; /* exact in fp32, a bf16 tie */
        lut16[v] = trn_f2bf(lut[v]);
    }
    int dims[] = {1, 15, 16, 17, 63, 64, 65, 130, 784};
    int perm[N];
    for (int i = 0; i < N; i++)
        perm[i] = (i * 23 + 7) % N; /* 23 is prime to 61 */
    int simd_f = trn_gather_code_simd(0), simd_h = trn_gather_code_simd(1);
    printf("  vector paths here: fp32 %s, bf16 %s\n", simd_f ? "yes" : "no",
           simd_h ? "yes" : "no");
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        int dim = dims[di];
        uint8_t *code = malloc((size_t)N * dim), yl[N], yo[N], yr[N];
        float *x = malloc(sizeof(float) * N * dim), *xo = malloc(sizeof(float) * N * dim),
              *xr = malloc(sizeof(float) * N * dim);
        uint16_t *ho = malloc(2u * N * dim), *hr = malloc(2u * N * dim);
        REQUIRE(code && x && xo && xr && ho && hr);
        for (int i = 0; i < N * dim; i++) {
            code[i] = (uint8_t)((i * 97 + i / 7) & 255);
            x[i] = lut[code[i]];
        }
        for (int i = 0; i < N; i++)
            yl[i] = (uint8_t)(i % 10);
        int cases[][2] = {{0, 32}, {32, 29}, {60, 1}};
        for (int c = 0; c < 3; c++) {
            int at = cases[c][0], nb = cases[c][1];
            size_t nf = (size_t)nb * dim;
            trn_gather_rows(x, yl, dim, perm, at, nb, xr, yr);
            trn_gather_rows_code(code, lut, yl, dim, perm, at, nb, xo, yo);
            CHECK(memcmp(xo, xr, nf * sizeof(float)) == 0 &&
                  memcmp(yo, yr, (size_t)nb) == 0);
            memset(xo, 0, nf * sizeof(float));
            memset(yo, 0, (size_t)nb);
            trn__gather_rows_code_scalar(code, lut, yl, dim, perm, at, nb, xo, yo);
            CHECK(memcmp(xo, xr, nf * sizeof(float)) == 0 &&
                  memcmp(yo, yr, (size_t)nb) == 0);
            trn_gather_rows_bf16(x, yl, dim, perm, at, nb, hr, yr);
            trn_gather_rows_code_h(code, lut16, yl, dim, perm, at, nb, ho, yo);
            CHECK(memcmp(ho, hr, nf * 2) == 0 && memcmp(yo, yr, (size_t)nb) == 0);
            memset(ho, 0, nf * 2);
            trn__gather_rows_code_h_scalar(code, lut16, yl, dim, perm, at, nb, ho, yo);
            CHECK(memcmp(ho, hr, nf * 2) == 0);
        }
        free(code);
        free(x);
        free(xo);
        free(xr);
        free(ho);
        free(hr);
    }
}

int main(void)
{
    RUN(blocks_are_aligned_and_zeroed_on_request);
    RUN(a_failed_regrowth_keeps_the_callers_block);
    RUN(row_blocks_sit_on_2_mib_boundaries);
    RUN(pass_buffers_grown_without_their_contents_give_a_fresh_nets_results);
    RUN(byte_gathers_equal_the_float_gathers);
    TEST_DONE();
}
