/*  test_trn_numerics.c - low-precision rounding, the loss scaler,
    precision schedules, single optimiser steps against hand-computed
    values, learning-rate schedules and scaling rules. */
#include <stdlib.h>
#include <string.h>

#include "jz_test.h"
#include "trainer/bf16.h"
#include "trainer/trn.h"

TEST(bf16_rounding)
{
    CHECK(trn_round_bf16(1.0f) == 1.0f);
    CHECK(trn_round_bf16(1.0f + 0x1p-8f) == 1.0f);               /* tie -> even */
    CHECK(trn_round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f); /* tie -> even */
    CHECK(trn_round_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
    CHECK(trn_round_bf16(-3.0f) == -3.0f);
    CHECK(trn_round_bf16(0.1f) == 0.10009765625f);
    CHECK(isnan(trn_round_bf16(NAN)));
    CHECK(isinf(trn_round_bf16(INFINITY)));
    CHECK(isinf(trn_round_bf16(3.4028235e38f))); /* rounds up past the bf16 max */
}

/* The array conversion (trn_bf16_from_f32: 512-bit vectors where the CPU
   has AVX-512BW, the clones elsewhere) rounds every value as the scalar
   trn_f2bf does, bit for bit: ties, subnormals, infinities, NaNs with and
   without the quiet bit, both signs, at every offset of a vector (a
   length that is no multiple of 16, and a start off the alignment). */
TEST(bf16_array_conversion_is_the_scalar_one)
{
    enum { N = 70000 }; /* over one chunk (16384), so the chunks' loop runs */
    float *x = malloc(N * sizeof *x);
    uint16_t *o = malloc(N * sizeof *o);
    uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x00000001u, 0x00400000u,
                          0x807fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                          0x7f800001u, 0xffbfffffu, 0x7f7fffffu, 0x80000000u};
    uint64_t st = 7;
    for (int i = 0; i < N; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t u = (uint32_t)(st >> 32);
        if (i % 5 == 0)
            u = special[(i / 5) % (sizeof special / sizeof special[0])];
        memcpy(&x[i], &u, 4);
    }
    /* each path this CPU reaches (the 512-bit function where built and
       the CPU has AVX-512BW; of the target clones, only the one the loader
       picks for this CPU: the others, avx2 or default, run on CPUs without
       that level and are not reached here, as GCC's clone resolver reads
       cpuid and no variable caps it) and the entry point; the values after
       n (sentinels) stay unwritten */
#if defined(__GNUC__) && !defined(__clang__) /* TRN_CLONES (trn.h) */
    printf("  target clone reached: %s (the others not on this CPU)\n",
           __builtin_cpu_supports("avx512f") ? "avx512f"
           : __builtin_cpu_supports("avx2")  ? "avx2"
                                             : "default");
#endif
    for (int path = 0; path < 3; path++)
        for (int off = 0; off < 3; off++) {
            long n = N - 5 - off;
            memset(o, 0xa5, N * sizeof *o);
            if (path < 2 && trn__bf16_from_f32_path(o + off, x + off, n, path) < 0) {
                printf("  the 512-bit path is not built or not supported here\n");
                break;
            }
            if (path == 2)
                trn_bf16_from_f32(o + off, x + off, n);
            int bad = 0, past = 0;
            for (long i = 0; i < n; i++)
                bad += o[off + i] != trn_f2bf(x[off + i]);
            for (long i = 0; i < off; i++)
                past += o[i] != 0xa5a5;
            for (long i = off + n; i < N; i++)
                past += o[i] != 0xa5a5;
            if (bad || past)
                JZT_FAIL("path %d offset %d: %d of %ld values differ from trn_f2bf, %d "
                         "written outside [off, off+n)",
                         path, off, bad, n, past);
        }
    free(x);
    free(o);
}

TEST(fp16_rounding)
{
    CHECK(trn_round_fp16(65504.0f) == 65504.0f);
    CHECK(trn_round_fp16(65519.0f) == 65504.0f);
    CHECK(isinf(trn_round_fp16(65520.0f)));
    CHECK(isinf(trn_round_fp16(-1e5f)) && trn_round_fp16(-1e5f) < 0);
    CHECK(trn_round_fp16(0x1p-24f) == 0x1p-24f);     /* smallest subnormal */
    CHECK(trn_round_fp16(0x1p-25f) == 0.0f);         /* tie -> even (zero) */
    CHECK(trn_round_fp16(3 * 0x1p-25f) == 0x1p-23f); /* tie -> even */
    CHECK(trn_round_fp16(1e-9f) == 0.0f);            /* underflow */
    CHECK(trn_round_fp16(1.0f + 0x1p-11f) == 1.0f);
    CHECK(trn_round_fp16(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f);
    CHECK(trn_round_fp16(0.1f) == 0.0999755859375f);
    CHECK(trn_round_fp16(-2.5f) == -2.5f);
    CHECK(isnan(trn_round_fp16(NAN)));
    float buf[3] = {1e5f, 0.1f, 1.0f};
    trn_round_buf(buf, 3, TRN_FP16);
    CHECK(trn_has_nonfinite(buf, 3));
    CHECK(buf[1] == 0.0999755859375f);
    float ok[2] = {1, 2};
    CHECK(!trn_has_nonfinite(ok, 2));
}

TEST(loss_scaler)
{
    trn_scaler s;
    trn_scaler_init(&s, 65536.0, 1, 2000);
    for (int i = 0; i < 1999; i++)
        CHECK(trn_scaler_update(&s, 0) == 0);
    CHECK(s.scale == 65536.0);
    trn_scaler_update(&s, 0);
    CHECK(s.scale == 131072.0); /* x2 after 2000 clean steps */
    CHECK(trn_scaler_update(&s, 1) == 1);
    CHECK(s.scale == 65536.0); /* x0.5 and skip */
    CHECK(s.skipped == 1);
    CHECK(s.good_steps == 0);
    trn_scaler s2;
    trn_scaler_init(&s2, 8.0, 0, 2000); /* static: never changes, still skips */
    CHECK(trn_scaler_update(&s2, 1) == 1);
    CHECK(s2.scale == 8.0);
}

TEST(precision_schedule)
{
    trn_prec_schedule ps;
    char err[TRN_ERRLEN];
    REQUIRE(trn_prec_schedule_parse(&ps, "fp32:1,bf16:8,fp32:1", err) == 0);
    CHECK(trn_prec_schedule_at(&ps, 0) == TRN_FP32);
    CHECK(trn_prec_schedule_at(&ps, 1) == TRN_BF16);
    CHECK(trn_prec_schedule_at(&ps, 8) == TRN_BF16);
    CHECK(trn_prec_schedule_at(&ps, 9) == TRN_FP32);
    CHECK(trn_prec_schedule_at(&ps, 50) == TRN_FP32);
    CHECK(trn_prec_schedule_parse(&ps, "fp8:1", err) < 0);
    CHECK(strstr(err, "fp8") != NULL);
    CHECK(trn_prec_schedule_parse(&ps, "bf16:0", err) < 0);
    CHECK(trn_prec_schedule_parse(&ps, "bf16", err) < 0);
    CHECK(trn_prec_schedule_parse(&ps, "", err) < 0);
}

/* Two params: a weight [2] and a bias [1]. */
typedef struct {
    trn_param p[2];
    float w[2], g[2], m[2], v[2];
    float b[1], gb[1], mb[1], vb[1];
} two_params;

static void s_two(two_params *t, float w0, float w1, float g0, float g1, float b,
                  float gb)
{
    memset(t, 0, sizeof *t);
    t->w[0] = w0, t->w[1] = w1, t->g[0] = g0, t->g[1] = g1;
    t->b[0] = b, t->gb[0] = gb;
    t->p[0] =
        (trn_param){.kind = TRN_PW, .n = 2, .w = t->w, .g = t->g, .m = t->m, .v = t->v};
    t->p[1] = (trn_param){
        .kind = TRN_PBIAS, .n = 1, .w = t->b, .g = t->gb, .m = t->mb, .v = t->vb};
}

static trn_optim s_opt(const char *name)
{
    trn_config c;
    trn_config_defaults(&c);
    snprintf(c.optimizer, sizeof c.optimizer, "%s", name);
    c.momentum = 0.9;
    c.weight_decay = 0.01;
    trn_optim o;
    trn_optim_init(&o, &c);
    return o;
}

TEST(sgd_steps)
{
    two_params t;
    s_two(&t, 1, -2, 0.5f, 0.25f, 1, 0.5f);
    trn_optim o = s_opt("sgd");
    trn_optim_step(&o, t.p, 2, 0.1);
    /* g' = g + 0.01 w = [0.51, 0.23]; v = g'; w -= 0.1 v */
    CHECK_NEAR(t.w[0], 0.949, 1e-6);
    CHECK_NEAR(t.w[1], -2.023, 1e-6);
    CHECK_NEAR(t.b[0], 0.95, 1e-6); /* no weight decay on biases */
    t.g[0] = 0.5f, t.g[1] = 0.25f;
    trn_optim_step(&o, t.p, 2, 0.1);
    /* g' = [0.50949, 0.22977]; v = 0.9*[0.51, 0.23] + g' = [0.96849, 0.43677] */
    CHECK_NEAR(t.w[0], 0.852151, 1e-6);
    CHECK_NEAR(t.w[1], -2.066677, 1e-6);

    s_two(&t, 1, -2, 0.5f, 0.25f, 1, 0.5f);
    o = s_opt("sgd");
    o.nesterov = 1;
    trn_optim_step(&o, t.p, 2, 0.1);
    /* Nesterov: d = g' + 0.9 v = 1.9 g' = [0.969, 0.437] */
    CHECK_NEAR(t.w[0], 0.9031, 1e-6);
    CHECK_NEAR(t.w[1], -2.0437, 1e-6);
}

/* SGD's loop runs in the CPU's widest clone (AVX-512, AVX2 or the
   baseline, optim.c) and must round as the baseline does, operation by
   operation, on every CPU: bit for bit against a float-by-float
   reference (each product and sum stored, so none fuses into an FMA,
   which moves the last bit of some of these 1000 values), plain and
   Nesterov, over three steps. */
TEST(sgd_rounds_as_the_baseline_in_every_clone)
{
    enum { N = 1000 };
    static float w[N], g[N], m[N], rw[N], rm[N];
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        for (int i = 0; i < N; i++) {
            w[i] = rw[i] = (float)sin(i * 0.37) * 3.1f;
            m[i] = rm[i] = 0;
        }
        trn_param p = {.kind = TRN_PW, .n = N, .w = w, .g = g, .m = m};
        trn_optim o = s_opt("sgd");
        o.nesterov = nesterov;
        float mu = 0.9f, wd = 0.01f, lr = 0.1f;
        for (int step = 0; step < 3; step++) {
            for (int i = 0; i < N; i++)
                g[i] = (float)cos(i * 0.91 + step) * 0.7f;
            trn_optim_step(&o, &p, 1, 0.1);
            for (int i = 0; i < N; i++) {
                volatile float d = wd * rw[i], gg = g[i] + d, mm = mu * rm[i];
                volatile float v = mm + gg;
                rm[i] = v;
                volatile float u = nesterov ? gg + (volatile float){mu * v} : v;
                volatile float s = lr * u;
                rw[i] = rw[i] - s;
            }
        }
        int bad = 0;
        for (int i = 0; i < N; i++)
            bad +=
                memcmp(&w[i], &rw[i], sizeof w[i]) != 0 || memcmp(&m[i], &rm[i], 4) != 0;
        if (bad)
            JZT_FAIL("%s SGD: %d of %d weights differ from the reference in their bits",
                     nesterov ? "Nesterov" : "plain", bad, N);
    }
}

TEST(lars_step)
{
    two_params t;
    s_two(&t, 3, 4, 0.6f, 0.8f, 1, 0.5f); /* |w| = 5, |g| = 1 */
    trn_optim o = s_opt("lars");
    CHECK_NEAR(o.trust, 0.001, 0);
    trn_optim_step(&o, t.p, 2, 2.0);
    /* local = 0.001*5/(1 + 0.01*5) = 1/210; step = 2/210;
       v = step*(g + 0.01 w) = (2/210)*[0.63, 0.84] = [0.006, 0.008] */
    CHECK_NEAR(t.w[0], 2.994, 1e-6);
    CHECK_NEAR(t.w[1], 3.992, 1e-6);
    CHECK_NEAR(t.m[0], 0.006, 1e-6);
    /* bias: plain momentum SGD, no decay, no LARS: v = 2*0.5 = 1 */
    CHECK_NEAR(t.b[0], 0.0, 1e-7);
    t.g[0] = 0.6f, t.g[1] = 0.8f, t.gb[0] = 0.5f;
    trn_optim_step(&o, t.p, 2, 2.0);
    double wn = sqrt(2.994 * 2.994 + 3.992 * 3.992);
    double local = 0.001 * wn / (1.0 + 0.01 * wn);
    double v0 = 0.9 * 0.006 + 2.0 * local * (0.6 + 0.01 * 2.994);
    CHECK_NEAR(t.w[0], 2.994 - v0, 1e-6);
    CHECK_NEAR(t.b[0], -(0.9 * 1.0 + 1.0), 1e-6);
}

TEST(adamw_step)
{
    two_params t;
    s_two(&t, 1, -2, 0.5f, -0.25f, 1, 0.5f);
    trn_optim o = s_opt("adamw");
    trn_optim_step(&o, t.p, 2, 0.1);
    /* t=1: mhat = g, vhat = g^2, mhat/(sqrt(vhat)+eps) = sign(g) (to 1e-7);
       w -= 0.1*(sign(g) + 0.01 w) */
    CHECK_NEAR(t.w[0], 1 - 0.1 * (1 + 0.01), 1e-6);
    CHECK_NEAR(t.w[1], -2 - 0.1 * (-1 - 0.02), 1e-6);
    CHECK_NEAR(t.b[0], 1 - 0.1, 1e-6); /* no decay on biases */
    CHECK_NEAR(t.m[0], 0.05, 1e-7);
    CHECK_NEAR(t.v[1], 0.001 * 0.0625, 1e-9);
    /* t=2 with the same g: m = 0.095 = 0.19 g, v = 0.001999 g^2, so the
       bias-corrected mhat = g and vhat = g^2 again */
    t.g[0] = 0.5f, t.g[1] = -0.25f, t.gb[0] = 0.5f;
    double w0 = t.w[0];
    trn_optim_step(&o, t.p, 2, 0.1);
    CHECK_NEAR(t.w[0], w0 - 0.1 * (1 + 0.01 * w0), 1e-6);
}

TEST(lamb_step)
{
    two_params t;
    s_two(&t, 1, -2, 0.5f, -0.25f, 1, 0.5f);
    trn_optim o = s_opt("lamb");
    trn_optim_step(&o, t.p, 2, 0.1);
    /* r = sign(g) + 0.01 w = [1.01, -1.02]; ratio = |w|/|r| */
    double r0 = 1.01, r1 = -1.02;
    double ratio = sqrt(5.0) / sqrt(r0 * r0 + r1 * r1);
    CHECK_NEAR(ratio, 1.5577533, 1e-6); /* sqrt(5)/sqrt(2.0605) */
    CHECK_NEAR(t.w[0], 1 - 0.1 * ratio * r0, 1e-6);
    CHECK_NEAR(t.w[1], -2 - 0.1 * ratio * r1, 1e-6);
    CHECK_NEAR(t.b[0], 1 - 0.1, 1e-6); /* biases: ratio 1, no decay */
}

TEST(lr_schedules)
{
    CHECK_NEAR(trn_lr_factor("constant", 0.5, 1, 10, 2), 0.5, 1e-12); /* warmup */
    CHECK_NEAR(trn_lr_factor("constant", 5, 1, 10, 2), 1.0, 1e-12);
    CHECK_NEAR(trn_lr_factor("cosine", 1, 1, 11, 2), 1.0, 1e-12);
    CHECK_NEAR(trn_lr_factor("cosine", 6, 1, 11, 2), 0.5, 1e-12);
    CHECK_NEAR(trn_lr_factor("cosine", 11, 1, 11, 2), 0.0, 1e-12);
    CHECK_NEAR(trn_lr_factor("poly", 6, 1, 11, 2), 0.25, 1e-12);
    CHECK_NEAR(trn_lr_factor("poly", 3, 0, 4, 1), 0.25, 1e-12);
    CHECK_NEAR(trn_lr_scale_rule("linear", 128, 1024), 8.0, 1e-12);
    CHECK_NEAR(trn_lr_scale_rule("sqrt", 128, 1024), sqrt(8.0), 1e-12);
    CHECK_NEAR(trn_lr_scale_rule("none", 128, 1024), 1.0, 1e-12);
}

int main(void)
{
    RUN(bf16_rounding);
    RUN(bf16_array_conversion_is_the_scalar_one);
    RUN(fp16_rounding);
    RUN(loss_scaler);
    RUN(precision_schedule);
    RUN(sgd_steps);
    RUN(sgd_rounds_as_the_baseline_in_every_clone);
    RUN(lars_step);
    RUN(adamw_step);
    RUN(lamb_step);
    RUN(lr_schedules);
    TEST_DONE();
}
