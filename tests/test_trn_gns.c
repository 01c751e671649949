/*  test_trn_gns.c - the gradient-noise measure's host logic (gns.h), shared
    by the CPU step and the CUDA MLP step, on any machine (no GPU):

    - the cadence (every --log-every steps), the first part's size and the
      scaling of the two parts' squared norms into grad_sqnorm_small and
      batch_small, against hand-computed numbers, odd batches and refusals;
    - a CPU twin of the CUDA step's measure: a stand-in backend on the host
      that measures as backend_cuda.cu does (the whole batch's gradient,
      then the first half's alone in the same units, the rest as the
      difference) gives, through the trainer's backend path, the numbers
      the CPU step reports on the same problem (grad_sqnorm_small/big,
      batch_small/big), even and odd batches; a backend without the hooks
      still reports none, and the halves are asked for on measuring steps
      only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jz_test.h"
#include "trainer/gns.h"
#include "trainer/train_impl.h" /* the noise inputs kept for the report */
#include "trainer/trn.h"

#include "trn_fake_io.h"

TEST(cadence_half_and_scaling)
{
    CHECK(trn_gns_measures(4, 5) == 1);
    CHECK(trn_gns_measures(5, 5) == 0);
    CHECK(trn_gns_measures(0, 1) == 1);
    CHECK(trn_gns_measures(3, 0) == 0);
    CHECK(trn_gns_half(1) == 0);
    CHECK(trn_gns_half(2) == 1);
    CHECK(trn_gns_half(33) == 16);
    double g = -1;
    int b = -1;
    /* equal halves of 4: (0.25 * 2^2 + 1.0 * 2^2) / 2 */
    double sq[2] = {0.25, 1.0};
    REQUIRE(trn_gns_small(sq, 2, 4, &g, &b) == 0);
    CHECK(g == 2.5 && b == 2);
    /* unequal parts (5 = 2 + 3): the first alone, 0.25 * 2.5^2 */
    double sq_odd[2] = {0.25, NAN};
    REQUIRE(trn_gns_small(sq_odd, 2, 5, &g, &b) == 0);
    CHECK(g == 1.5625 && b == 2);
    /* refused: nothing written */
    g = -1, b = -1;
    CHECK(trn_gns_small(sq, 0, 4, &g, &b) == -1);
    CHECK(trn_gns_small(sq, 4, 4, &g, &b) == -1);
    double bad[2] = {NAN, 1.0}, neg[2] = {1.0, -1.0};
    CHECK(trn_gns_small(bad, 2, 4, &g, &b) == -1);
    CHECK(trn_gns_small(neg, 2, 4, &g, &b) == -1);
    CHECK(g == -1 && b == -1);
}

/* The stand-in for the CUDA MLP step, on the host: plain SGD; on a step
   asked to measure, the first half's gradient is computed on its own in
   the step's units (loss_scale / nb, as the half GEMM with the step's
   dscale) and the rest is the whole batch's less it. */
typedef struct {
    trn_net *net;
    int half, half_ok, asked, steps;
    double sq[2];
    float *keep;
} twin_dev;

static int tw_attach(void *self, trn_net *net, const trn_config *cfg, char *err)
{
    (void)cfg, (void)err;
    ((twin_dev *)self)->net = net;
    return 0;
}

static double s_sq(trn_net *n, const float *sub, double inv)
{
    double s = 0;
    for (int i = 0; i < trn_net_nparams(n); i++) {
        trn_param *p = trn_net_param(n, i);
        for (long j = 0; j < p->n; j++) {
            double d = ((double)p->g[j] - (sub ? sub[j] : 0)) * inv;
            s += d * d;
        }
        if (sub)
            sub += p->n;
    }
    return s;
}

static double tw_step(void *self, const float *x, const uint8_t *y, int nb, double lr,
                      double loss_scale, int *overflow, double *gsq)
{
    twin_dev *d = self;
    trn_net *n = d->net;
    int h = d->half > 0 && d->half < nb ? d->half : 0;
    d->half = 0, d->half_ok = 0, d->steps++;
    double gscale = loss_scale / nb, inv = 1.0 / loss_scale;
    if (h) { /* the first half alone, kept flat in d->keep */
        long total = 0;
        for (int i = 0; i < trn_net_nparams(n); i++)
            total += trn_net_param(n, i)->n;
        free(d->keep);
        d->keep = malloc((size_t)total * sizeof(float));
        if (!d->keep)
            return -1;
        trn_net_zero_grad(n);
        trn_net_forward_backward(n, x, y, h, 1, 0.0, gscale, NULL, NULL);
        d->sq[0] = s_sq(n, NULL, inv);
        float *k = d->keep;
        for (int i = 0; i < trn_net_nparams(n); i++) {
            trn_param *p = trn_net_param(n, i);
            memcpy(k, p->g, (size_t)p->n * sizeof(float));
            k += p->n;
        }
    }
    trn_net_zero_grad(n);
    double l = trn_net_forward_backward(n, x, y, nb, 1, 0.0, gscale, NULL, NULL);
    *overflow = 0;
    *gsq = s_sq(n, NULL, inv);
    if (h) {
        d->sq[1] = s_sq(n, d->keep, inv);
        d->half_ok = 1;
    }
    for (int i = 0; i < trn_net_nparams(n); i++) {
        trn_param *p = trn_net_param(n, i);
        for (long j = 0; j < p->n; j++)
            p->w[j] -= (float)(lr * p->g[j] * inv);
    }
    trn_net_sync_weights(n);
    return l;
}

static void tw_sync(void *self, trn_net *net)
{
    (void)self, (void)net;
}

static void tw_detach(void *self)
{
    (void)self;
}

static void tw_set_half(void *self, int half)
{
    twin_dev *d = self;
    d->half = half;
    d->asked += half > 0;
}

static int tw_half_sqnorms(void *self, double sq[2])
{
    twin_dev *d = self;
    if (!d->half_ok)
        return -1;
    sq[0] = d->sq[0], sq[1] = d->sq[1];
    return 0;
}

static int s_close(double a, double b)
{
    return fabs(a - b) <= 1e-5 * fabs(b);
}

TEST(cpu_twin_of_the_cuda_measure)
{
    int batch[] = {32, 33};
    for (int k = 0; k < 2; k++) {
        trn_config c;
        s_cfg(&c);
        c.momentum = 0; /* the stand-in's plain SGD */
        c.weight_decay = 0;
        c.log_every = 1;
        c.batch_size = batch[k];
        twin_dev dev = {0};
        trn_backend b = {.name = "twin",
                         .attach = tw_attach,
                         .step = tw_step,
                         .sync_to_host = tw_sync,
                         .detach = tw_detach,
                         .self = &dev,
                         .set_half = tw_set_half,
                         .half_sqnorms = tw_half_sqnorms};
        trn_trainer *cpu = s_new(&c), *twin = s_new(&c);
        REQUIRE(cpu && twin);
        trn_trainer_set_backend(twin, &b);
        for (int i = 0; i < 3; i++) {
            REQUIRE(trn_trainer_step(cpu) == 0);
            REQUIRE(trn_trainer_step(twin) == 0);
            CHECK(cpu->have_gns == 1);
            CHECK(twin->have_gns == 1);
            printf("  batch %d step %d: small %.6g / %.6g (cpu / twin), big %.6g / "
                   "%.6g\n",
                   batch[k], i + 1, cpu->gs_small, twin->gs_small, cpu->gs_big,
                   twin->gs_big);
            CHECK(s_close(twin->gs_small, cpu->gs_small));
            CHECK(s_close(twin->gs_big, cpu->gs_big));
            CHECK(twin->b_small == cpu->b_small && twin->b_small == batch[k] / 2);
            CHECK(twin->b_big == cpu->b_big && twin->b_big == batch[k]);
        }
        CHECK(dev.asked == 3 && dev.steps == 3);
        trn_trainer_destroy(&cpu);
        trn_trainer_destroy(&twin);
        free(dev.keep);
    }

    /* measuring every third step: asked on steps 3 and 6 only; without
       the hooks a backend reports no noise inputs */
    trn_config c;
    s_cfg(&c);
    c.log_every = 3;
    twin_dev dev = {0};
    trn_backend b = {.name = "twin",
                     .attach = tw_attach,
                     .step = tw_step,
                     .sync_to_host = tw_sync,
                     .detach = tw_detach,
                     .self = &dev,
                     .set_half = tw_set_half,
                     .half_sqnorms = tw_half_sqnorms};
    trn_trainer *t = s_new(&c);
    REQUIRE(t);
    trn_trainer_set_backend(t, &b);
    for (int i = 0; i < 6; i++) {
        REQUIRE(trn_trainer_step(t) == 0);
        CHECK(t->have_gns == (i % 3 == 2));
        t->have_gns = 0; /* as the report does */
    }
    CHECK(dev.asked == 2);
    trn_trainer_destroy(&t);
    free(dev.keep);
    b.set_half = NULL, b.half_sqnorms = NULL;
    t = s_new(&c);
    REQUIRE(t);
    trn_trainer_set_backend(t, &b);
    for (int i = 0; i < 3; i++)
        REQUIRE(trn_trainer_step(t) == 0);
    CHECK(t->have_gns == 0);
    trn_trainer_destroy(&t);
}

int main(void)
{
    char err[TRN_ERRLEN];
    snprintf(g_dir, sizeof g_dir, "/tmp/test_trn_gns.XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    if (trn_data_synthetic(&g_syn, 2000, 1000, err) < 0 ||
        trn_data_synthetic(&g_syn_val, 500, 2000, err) < 0)
        return 1;
    trn_cpu_set_threads(1);
    RUN(cadence_half_and_scaling);
    RUN(cpu_twin_of_the_cuda_measure);
    trn_data_free(&g_syn);
    trn_data_free(&g_syn_val);
    rmdir(g_dir);
    TEST_DONE();
}
