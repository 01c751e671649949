/*  test_trn_wpack.c - fp32 weights rounded into oneDNN's bf16 BA16a64b2a
    layout in one pass (trainer/wpack.h): the vector packers against the
    one-value-at-a-time ones for shapes around the blocks (32 and 64) and
    the vectors (16), every value and every padding element, with values
    that round up, down, to even at a tie, and NaN; and, where this build
    has oneDNN, the layout itself against oneDNN's own reorder into the
    layout its matmul asked for (what linear_dnnl.c checks before packing).
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jz_test.h"
#include "trainer/bf16.h"
#include "trainer/wpack.h"

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#define S_DNNL 1
#endif

static const int s_shapes[][2] = {{1, 1},   {10, 256}, {256, 784}, {256, 256}, {7, 33},
                                  {33, 70}, {64, 32},  {65, 31},   {19, 37},   {2, 130}};

/* m*k weights: varied values, some bf16 ties (exact in fp32), one NaN */
static float *s_weights(int m, int k)
{
    float *w = malloc(sizeof(float) * (size_t)m * k);
    for (long i = 0; i < (long)m * k; i++) {
        w[i] = (float)sin((double)i * 0.37) * (float)(1 + i % 7);
        if (i % 13 == 0)
            w[i] = 1.0f + (float)(i % 256) / 128.0f + 1.0f / 256.0f; /* a tie */
    }
    if ((long)m * k > 5)
        w[5] = NAN;
    return w;
}

TEST(vector_packers_equal_the_scalar_ones)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (!__builtin_cpu_supports("avx512f"))
        SKIP("no AVX-512 on this CPU: the packers take their scalar paths, compared with "
             "oneDNN below");
#else
    SKIP("not x86-64: the packers take their scalar paths, compared with oneDNN below");
#endif
    for (size_t s = 0; s < sizeof s_shapes / sizeof s_shapes[0]; s++) {
        int m = s_shapes[s][0], k = s_shapes[s][1];
        float *w = s_weights(m, k);
        for (int bwd = 0; bwd < 2; bwd++) {
            size_t ne = bwd ? trn_wpack_elems(m, k) : trn_wpack_elems(k, m);
            uint16_t *a = malloc(ne * 2), *b = malloc(ne * 2);
            REQUIRE(a && b);
            memset(a, 0, ne * 2);
            memset(b, 0, ne * 2);
            (bwd ? trn_wpack_bwd : trn_wpack_fwd)(a, w, m, k);
            (bwd ? trn__wpack_bwd_scalar : trn__wpack_fwd_scalar)(b, w, m, k);
            CHECK(memcmp(a, b, ne * 2) == 0);
            /* every weight once, rounded as trn_f2bf; padding zero */
            size_t nz = 0;
            for (size_t i = 0; i < ne; i++)
                nz += b[i] != 0;
            long want = 0;
            for (long i = 0; i < (long)m * k; i++)
                want += trn_f2bf(w[i]) != 0;
            CHECK((long)nz == want);
            free(a);
            free(b);
        }
        free(w);
    }
}

TEST(the_layout_is_onednns)
{
#ifdef S_DNNL
    dnnl_engine_t eng;
    dnnl_stream_t st;
    REQUIRE(dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success);
    REQUIRE(dnnl_stream_create(&st, eng, dnnl_stream_default_flags) == dnnl_success);
    for (size_t s = 0; s < sizeof s_shapes / sizeof s_shapes[0]; s++) {
        int m = s_shapes[s][0], k = s_shapes[s][1];
        float *w = s_weights(m, k);
        w[5 < m * k ? 5 : 0] = 0.5f; /* no NaN: oneDNN's reorder may quiet it otherwise */
        for (int bwd = 0; bwd < 2; bwd++) {
            /* the forward's {k, m} seen over [m][k], the backward's {m, k} */
            dnnl_dims_t dims = {bwd ? m : k, bwd ? k : m};
            dnnl_dims_t strides = {bwd ? k : 1, bwd ? 1 : k};
            dnnl_memory_desc_t from, to;
            dnnl_memory_desc_init_by_strides(&from, 2, dims, dnnl_f32, strides);
            dnnl_memory_desc_init_by_tag(&to, 2, dims, dnnl_bf16, dnnl_BA16a64b2a);
            size_t bytes = dnnl_memory_desc_get_size(&to);
            size_t ne = bwd ? trn_wpack_elems(m, k) : trn_wpack_elems(k, m);
            CHECK(bytes == ne * 2);
            uint16_t *ours = calloc(ne, 2), *theirs = calloc(ne, 2);
            REQUIRE(ours && theirs);
            (bwd ? trn_wpack_bwd : trn_wpack_fwd)(ours, w, m, k);
            dnnl_memory_t mf, mt;
            dnnl_primitive_desc_t pd;
            dnnl_primitive_t r;
            REQUIRE(dnnl_memory_create(&mf, &from, eng, w) == dnnl_success);
            REQUIRE(dnnl_memory_create(&mt, &to, eng, theirs) == dnnl_success);
            REQUIRE(dnnl_reorder_primitive_desc_create(&pd, &from, eng, &to, eng, NULL) ==
                    dnnl_success);
            REQUIRE(dnnl_primitive_create(&r, pd) == dnnl_success);
            dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, mf}, {DNNL_ARG_TO, mt}};
            REQUIRE(dnnl_primitive_execute(r, st, 2, a) == dnnl_success);
            dnnl_stream_wait(st);
            size_t diff = 0;
            for (size_t i = 0; i < ne; i++)
                diff += ours[i] != theirs[i];
            if (diff)
                printf("  %s %dx%d: %zu of %zu elements differ\n", bwd ? "bwd" : "fwd", m,
                       k, diff, ne);
            CHECK(diff == 0);
            dnnl_primitive_destroy(r);
            dnnl_primitive_desc_destroy(pd);
            dnnl_memory_destroy(mf);
            dnnl_memory_destroy(mt);
            free(ours);
            free(theirs);
        }
        free(w);
    }
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
#else
    SKIP("this build has no oneDNN headers (libdnnl-dev)");
#endif
}

int main(void)
{
    RUN(vector_packers_equal_the_scalar_ones);
    RUN(the_layout_is_onednns);
    TEST_DONE();
}
