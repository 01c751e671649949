/*  test_trn_gather.c - batches taken on the device (--gpu-data device,
    trn_backend.set_data/set_order/step_at) see exactly the host's batches.

    The CUDA backend's gather kernel finds each element's source with
    trn_gather_src (gather.h); here that element-wise form is checked
    against the host's row copy (trn_gather_rows), and a stand-in device
    backend that keeps its own copy of the data and of each epoch's order
    and gathers element by element follows the host-batch trajectory bit
    for bit: over several epochs with a partial last batch, across a live
    batch-size change and a re-attach, on one rank through the comm layer,
    and with the trainer's fallbacks (--gpu-data host, a failed copy). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jz_test.h"
#include "trainer/comm.h"
#include "trainer/gather.h"
#include "trainer/layout.h"
#include "trainer/trn.h"

static trn_dataset g_syn, g_syn_val;

TEST(element_gather_equals_the_row_copy)
{
    enum { N = 53, DIM = 7 };
    float x[N * DIM];
    uint8_t y[N];
    int perm[N];
    for (int i = 0; i < N * DIM; i++)
        x[i] = (float)i * 0.25f - 3.0f;
    for (int i = 0; i < N; i++) {
        y[i] = (uint8_t)(i % 10);
        perm[i] = (i * 17 + 5) % N; /* 17 is prime to 53: a permutation */
    }
    /* whole batches, a rank's shard in the middle, the epoch's partial tail */
    int cases[][2] = {{0, 16}, {16, 16}, {21, 5}, {48, 5}, {52, 1}, {0, N}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int at = cases[c][0], nb = cases[c][1];
        float xo[N * DIM], xe[N * DIM];
        uint8_t yo[N], ye[N];
        trn_gather_rows(x, y, DIM, perm, at, nb, xo, yo);
        for (long i = 0; i < (long)nb * DIM; i++)
            xe[i] = x[trn_gather_src(perm, at, DIM, i)];
        for (int r = 0; r < nb; r++)
            ye[r] = y[trn_gather_row(perm, at, r)];
        CHECK(memcmp(xo, xe, (size_t)nb * DIM * sizeof(float)) == 0);
        CHECK(memcmp(yo, ye, (size_t)nb) == 0);
        /* and row r really is dataset row perm[at + r] */
        CHECK(xo[(nb - 1) * DIM + 3] == x[perm[at + nb - 1] * DIM + 3]);
    }
}

/* The bf16 gather (the input of a bf16 MLP on oneDNN) is the row copy
   rounded by trn_bf16_from_f32, bit for bit: values that round up, down,
   to even at a tie, and large ones; so is the row copy out of the set's
   bf16 copy. */
TEST(bf16_gather_equals_the_row_copy_rounded)
{
    enum { N = 41, DIM = 37 };
    float x[N * DIM];
    uint8_t y[N];
    int perm[N];
    for (int i = 0; i < N * DIM; i++)
        x[i] = (float)(i - 700) * 0.3183099f + (i % 5 == 0 ? 1e30f : 0.0f);
    x[3] = 1.0f + 0x1p-8f; /* a tie: rounds to even (1.0) */
    x[4] = 1.0f + 0x3p-8f; /* a tie: rounds to even (1 + 2^-6) */
    for (int i = 0; i < N; i++) {
        y[i] = (uint8_t)(i % 10);
        perm[i] = (i * 13 + 7) % N;
    }
    uint16_t all[N * DIM]; /* the whole set in bf16 */
    trn_bf16_from_f32(all, x, N * DIM);
    int cases[][2] = {{0, 16}, {16, 16}, {40, 1}, {0, N}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int at = cases[c][0], nb = cases[c][1];
        float xf[N * DIM];
        uint16_t xh[N * DIM], xe[N * DIM];
        uint8_t yo[N], ye[N];
        trn_gather_rows(x, y, DIM, perm, at, nb, xf, ye);
        trn_bf16_from_f32(xe, xf, (long)nb * DIM);
        trn_gather_rows_bf16(x, y, DIM, perm, at, nb, xh, yo);
        CHECK(memcmp(xh, xe, (size_t)nb * DIM * sizeof(uint16_t)) == 0);
        CHECK(memcmp(yo, ye, (size_t)nb) == 0);
        /* and the gather from the set's bf16 copy (train_batch.c) */
        memset(xh, 0, sizeof xh);
        memset(yo, 0, sizeof yo);
        trn_gather_rows_h(all, y, DIM, perm, at, nb, xh, yo);
        CHECK(memcmp(xh, xe, (size_t)nb * DIM * sizeof(uint16_t)) == 0);
        CHECK(memcmp(yo, ye, (size_t)nb) == 0);
    }
}

/* The CUDA CNN's weight layout (layout.h): KRSC element (o, r, s, i) is
   OIHW element (o, i, r, s), and the two conversions undo each other. */
TEST(conv_weights_krsc_is_oihw_reordered)
{
    enum { CO = 3, C = 5, K = 3, N = CO * C * K * K };
    float w[N], krsc[N], back[N];
    for (int i = 0; i < N; i++)
        w[i] = (float)i;
    trn_oihw_to_krsc(w, krsc, CO, C, K);
    int bad = 0;
    for (int o = 0; o < CO; o++)
        for (int i = 0; i < C; i++)
            for (int r = 0; r < K; r++)
                for (int s = 0; s < K; s++)
                    bad += krsc[((o * K + r) * K + s) * C + i] !=
                           w[((o * C + i) * K + r) * K + s];
    CHECK(bad == 0);
    trn_krsc_to_oihw(krsc, back, CO, C, K);
    CHECK(memcmp(back, w, sizeof w) == 0);
    CHECK(krsc[1] == w[K * K]); /* the second value of KRSC: input channel 1 */
}

/* ---- a stand-in device backend on the host ---- */
typedef struct {
    int attach, detach, set_data, set_order, step, step_at, fail_data;
    trn_net *net;
    trn_comm *comm; /* set_comm: one rank of a data-parallel run */
    /* "device" memory: the data set and the epoch's order, copied */
    float *x;
    uint8_t *y;
    int n, dim;
    int *perm;
    float *xb;
    uint8_t *yb;
    long examples; /* seen through step_at */
} fake;

static int f_attach(void *self, trn_net *net, const trn_config *cfg, char *err)
{
    fake *f = self;
    (void)cfg, (void)err;
    f->attach++;
    f->net = net;
    return 0;
}

static void f_sync(void *self, trn_net *net)
{
    (void)self, (void)net;
}

static void f_detach(void *self)
{
    ((fake *)self)->detach++;
}

/* forward, backward, the sum over ranks (with a comm), plain SGD */
static double f_update(fake *f, const float *x, const uint8_t *y, int nb, int global,
                       double lr, double loss_scale, int *overflow, double *gsq)
{
    trn_net *net = f->net;
    trn_net_zero_grad(net);
    double l = nb > 0 ? trn_net_forward_backward(net, x, y, nb, 1, 0.0,
                                                 loss_scale / global, NULL, NULL)
                      : 0;
    for (int i = 0; f->comm && i < trn_net_nparams(net); i++) {
        trn_param *p = trn_net_param(net, i);
        if (trn_comm_allreduce(f->comm, p->g, p->n, TRN_AR_NATIVE, TRN_WIRE_FP32) < 0)
            return -1;
    }
    *overflow = 0;
    *gsq = trn_net_grad_sqnorm(net) / (loss_scale * loss_scale);
    for (int i = 0; i < trn_net_nparams(net); i++) {
        trn_param *p = trn_net_param(net, i);
        for (long j = 0; j < p->n; j++)
            p->w[j] -= (float)(lr * p->g[j] / loss_scale);
    }
    trn_net_sync_weights(net);
    return l * nb;
}

static double f_step(void *self, const float *x, const uint8_t *y, int nb, double lr,
                     double loss_scale, int *overflow, double *gsq)
{
    fake *f = self;
    f->step++;
    return f_update(f, x, y, nb, nb, lr, loss_scale, overflow, gsq) / nb;
}

static int f_set_comm(void *self, trn_comm *c, const struct trn_dist_opts *o,
                      const char *grad_path, char *msg)
{
    (void)o, (void)grad_path;
    ((fake *)self)->comm = c;
    snprintf(msg, TRN_ERRLEN, "fake");
    return 0;
}

static double f_step_dist(void *self, const float *x, const uint8_t *y, int nb,
                          int global, double lr, double loss_scale, int *overflow,
                          double *gsq)
{
    fake *f = self;
    f->step++;
    return f_update(f, x, y, nb, global, lr, loss_scale, overflow, gsq);
}

static int f_set_data(void *self, const trn_dataset *d, char *err)
{
    fake *f = self;
    f->set_data++;
    if (f->fail_data) {
        snprintf(err, TRN_ERRLEN, "no room for %d examples", d->n);
        return -1;
    }
    f->n = d->n, f->dim = d->dim;
    f->x = malloc((size_t)d->n * d->dim * sizeof(float));
    f->y = malloc((size_t)d->n);
    f->perm = malloc((size_t)d->n * sizeof(int));
    f->xb = malloc((size_t)d->n * d->dim * sizeof(float));
    f->yb = malloc((size_t)d->n);
    if (!f->x || !f->y || !f->perm || !f->xb || !f->yb) {
        snprintf(err, TRN_ERRLEN, "out of memory");
        return -1;
    }
    memcpy(f->x, d->x, (size_t)d->n * d->dim * sizeof(float));
    memcpy(f->y, d->y, (size_t)d->n);
    return 0;
}

static int f_set_order(void *self, const int *perm, int n, char *err)
{
    fake *f = self;
    (void)err;
    f->set_order++;
    memcpy(f->perm, perm, (size_t)n * sizeof(int));
    return 0;
}

/* the device's gather, element by element (the kernel's logic) */
static double f_step_at(void *self, int at, int nb, int global, double lr,
                        double loss_scale, int *overflow, double *gsq)
{
    fake *f = self;
    f->step_at++;
    f->examples += nb;
    for (long i = 0; i < (long)nb * f->dim; i++)
        f->xb[i] = f->x[trn_gather_src(f->perm, at, f->dim, i)];
    for (int r = 0; r < nb; r++)
        f->yb[r] = f->y[trn_gather_row(f->perm, at, r)];
    return f_update(f, f->xb, f->yb, nb, global, lr, loss_scale, overflow, gsq);
}

static void f_free(fake *f)
{
    free(f->x), free(f->y), free(f->perm), free(f->xb), free(f->yb);
}

static trn_backend s_backend(fake *f, int devdata, int dist)
{
    trn_backend b = {.name = "fake",
                     .attach = f_attach,
                     .step = f_step,
                     .sync_to_host = f_sync,
                     .detach = f_detach,
                     .self = f};
    if (dist) {
        b.set_comm = f_set_comm;
        b.step_dist = f_step_dist;
    }
    if (devdata) {
        b.set_data = f_set_data;
        b.set_order = f_set_order;
        b.step_at = f_step_at;
    }
    return b;
}

static void s_cfg(trn_config *c)
{
    trn_config_defaults(c);
    strcpy(c->dataset, "synthetic");
    strcpy(c->hidden, "32");
    c->batch_size = 32; /* 1000 examples: 31 batches of 32 and one of 8 per epoch */
    c->epochs = 10;
    c->quiet = 1;
    c->lr = 0.05;
}

/* Runs `steps` steps (a live batch size of 48 from step `bs_at`, a live
   momentum change, which re-attaches, at `mom_at`) and returns the
   validation loss. */
static double s_run(const trn_config *c, trn_backend *b, trn_comm *comm, int steps,
                    int bs_at, int mom_at)
{
    char err[TRN_ERRLEN];
    trn_trainer *t = trn_trainer_new(c, &g_syn, &g_syn_val, NULL, err);
    if (!t)
        return NAN;
    trn_trainer_set_backend(t, b);
    if (comm && trn_trainer_set_comm(t, comm, err) < 0) {
        trn_trainer_destroy(&t);
        return NAN;
    }
    double loss = NAN, acc;
    for (int i = 0; i < steps; i++) {
        if (i == bs_at && trn_trainer_set_param(t, "batch_size", "48", err) < 0)
            goto out;
        if (i == mom_at && trn_trainer_set_param(t, "momentum", "0.5", err) < 0)
            goto out;
        if (trn_trainer_step(t) != 0)
            goto out;
    }
    trn_trainer_evaluate(t, &g_syn_val, &loss, &acc);
out:
    trn_trainer_destroy(&t);
    return loss;
}

TEST(device_batches_follow_the_host_trajectory)
{
    trn_config c;
    s_cfg(&c);
    /* 100 steps: 3 epochs and a part (three partial batches of 8), then
       the batch size goes to 48 at step 70 and momentum changes at 40 */
    fake h = {0}, d = {0};
    trn_backend hb = s_backend(&h, 0, 0), db = s_backend(&d, 1, 0);
    double lh = s_run(&c, &hb, NULL, 100, 70, 40);
    double ld = s_run(&c, &db, NULL, 100, 70, 40);
    CHECK(isfinite(lh));
    CHECK(ld == lh); /* bit for bit */
    CHECK(h.step == 100 && d.step == 0 && d.step_at == 100);
    CHECK(d.set_data == 1);
    /* the live changes re-attach (momentum, batch size); the data stays */
    CHECK(d.attach == 3 && d.detach == 3);
    /* epochs 0 and 1 at 32 (steps 0-63), epoch 2: 6 steps at 32, 16 at 48
       and a tail of 40 (steps 64-86), epoch 3: 13 steps at 48; one order
       per epoch */
    CHECK(d.set_order == 4);
    long want = 3L * 1000 + 13 * 48;
    CHECK(d.examples == want);
    f_free(&d);

    /* --gpu-data host: a backend that could hold the data is not asked */
    fake d2 = {0};
    trn_backend db2 = s_backend(&d2, 1, 0);
    strcpy(c.gpu_data, "host");
    CHECK(s_run(&c, &db2, NULL, 40, -1, -1) == s_run(&c, &hb, NULL, 40, -1, -1));
    CHECK(d2.set_data == 0 && d2.step_at == 0 && d2.step == 40);
    f_free(&d2);
}

TEST(a_failed_copy_falls_back_or_fails_as_asked)
{
    trn_config c;
    s_cfg(&c);
    fake h = {0}, d = {.fail_data = 1};
    trn_backend hb = s_backend(&h, 0, 0), db = s_backend(&d, 1, 0);
    /* auto: host batches, the same trajectory */
    CHECK(s_run(&c, &db, NULL, 20, -1, -1) == s_run(&c, &hb, NULL, 20, -1, -1));
    CHECK(d.set_data == 1 && d.step == 20 && d.step_at == 0);
    /* device: the step fails (the reason is on stderr) */
    strcpy(c.gpu_data, "device");
    char err[TRN_ERRLEN];
    trn_trainer *t = trn_trainer_new(&c, &g_syn, &g_syn_val, NULL, err);
    REQUIRE(t);
    trn_trainer_set_backend(t, &db);
    CHECK(trn_trainer_step(t) == -1);
    trn_trainer_destroy(&t);
    /* a bad value is refused by the option table, naming it */
    trn_config_defaults(&c);
    CHECK(trn_config_set(&c, "gpu_data", "gpu", err) == -1);
    CHECK(strstr(err, "gpu-data") || strstr(err, "gpu_data"));
    CHECK(trn_config_set(&c, "cuda_graphs", "maybe", err) == -1);
    CHECK(strstr(err, "cuda-graphs") || strstr(err, "cuda_graphs"));
    CHECK(trn_config_set(&c, "cuda_epilogue", "fused", err) == -1);
    CHECK(strstr(err, "cuda-epilogue") || strstr(err, "cuda_epilogue"));
    CHECK(trn_config_set(&c, "cuda_epilogue", "kernel", err) == 0);
    f_free(&d);
}

TEST(one_rank_through_the_comm_layer_gathers_its_shard)
{
    char err[TRN_ERRLEN];
    trn_config c;
    s_cfg(&c);
    strcpy(c.comm, "mpi");
    strcpy(c.allreduce, "native");
    c.fusion_kb = 64;
    strcpy(c.grad_path, "host");
    trn_comm *comm = trn_comm_local_new(err);
    REQUIRE(comm);
    fake h = {0}, d = {0};
    trn_backend hb = s_backend(&h, 0, 1), db = s_backend(&d, 1, 1);
    double lh = s_run(&c, &hb, comm, 70, -1, -1);
    double ld = s_run(&c, &db, comm, 70, -1, -1);
    CHECK(isfinite(lh) && ld == lh);
    CHECK(h.step == 70 && d.step == 0 && d.step_at == 70 && d.set_order == 3);
    CHECK(d.examples == 2L * 1000 + 6 * 32);
    f_free(&d);
    trn_comm_destroy(&comm);
}

int main(void)
{
    char err[TRN_ERRLEN];
    if (trn_data_synthetic(&g_syn, 1000, 1000, err) < 0 ||
        trn_data_synthetic(&g_syn_val, 500, 2000, err) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    RUN(element_gather_equals_the_row_copy);
    RUN(bf16_gather_equals_the_row_copy_rounded);
    RUN(conv_weights_krsc_is_oihw_reordered);
    RUN(device_batches_follow_the_host_trajectory);
    RUN(a_failed_copy_falls_back_or_fails_as_asked);
    RUN(one_rank_through_the_comm_layer_gathers_its_shard);
    trn_data_free(&g_syn);
    trn_data_free(&g_syn_val);
    TEST_DONE();
}
