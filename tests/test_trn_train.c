/*  test_trn_train.c - the trainer end to end: a short Fashion-MNIST run
    reaches a stated validation accuracy, mixed precision trains, loss-scale
    overflow skips the step and halves the scale, checkpoints round-trip
    bit-exactly and a resumed run equals the uninterrupted one, corrupt and
    foreign checkpoints are refused, live instructions (lr, batch_size,
    stop, checkpoint, load, unknown keys) act at the next step, measuring
    the gradient noise does not change the trajectory, and precise BN
    (--bn-recompute) changes the evaluation only. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jz_test.h"
#include "trainer/bf16.h"
#include "trainer/comm.h"
#include "trainer/conv_dnnl.h"
#include "trainer/memlimit.h"
#include "trainer/train_impl.h" /* per-layer scalers */
#include "trainer/trn.h"

#include "trn_fake_io.h"

/* 1 when every master weight, optimiser moment and BN statistic is equal. */
static int s_same_state(trn_trainer *a, trn_trainer *b)
{
    trn_net *na = trn_trainer_net(a), *nb = trn_trainer_net(b);
    for (int i = 0; i < trn_net_nparams(na); i++) {
        trn_param *p = trn_net_param(na, i), *q = trn_net_param(nb, i);
        size_t bytes = (size_t)p->n * sizeof(float);
        if (memcmp(p->w, q->w, bytes) || memcmp(p->m, q->m, bytes) ||
            memcmp(p->v, q->v, bytes))
            return 0;
    }
    long ns = trn_net_state_count(na);
    return ns == 0 ||
           !memcmp(trn_net_state(na), trn_net_state(nb), (size_t)ns * sizeof(float));
}

TEST(fashion_mnist_short_run)
{
    /* MLP 784-128-10, 10000 training examples, 3 epochs, batch 64, SGD
       lr 0.02 momentum 0.9: validation accuracy >= 0.82 on 2000 held-out
       examples, test accuracy >= 0.82 (seeds 1-3 give 0.834-0.845 val,
       0.830-0.837 test; PyTorch's same setup is in the same range). */
    trn_config c;
    trn_config_defaults(&c);
    strcpy(c.hidden, "128");
    c.train_subset = 10000;
    c.val_size = 2000;
    c.epochs = 3;
    c.batch_size = 64;
    c.lr = 0.02;
    c.quiet = 1;
    trn_dataset tr, va, te;
    char err[TRN_ERRLEN];
    REQUIRE(trn_data_load(&c, &tr, &va, &te, err) == 0);
    CHECK(tr.n == 10000 && va.n == 2000 && te.n == 10000 && tr.dim == 784);
    trn_trainer *t = trn_trainer_new(&c, &tr, &va, &te, err);
    REQUIRE(t);
    fake_io f = {0};
    trn_io io = s_io(&f);
    trn_trainer_set_io(t, &io);
    REQUIRE(trn_trainer_run(t, err) == 0);
    double va_acc = s_last(&f, "val_acc"), te_acc = s_last(&f, "test_acc");
    printf("  fashion-mnist 10k/3 epochs: val_acc %.4f test_acc %.4f\n", va_acc, te_acc);
    CHECK(va_acc >= 0.82);
    CHECK(te_acc >= 0.82);
    CHECK(s_last(&f, "epoch") == 3);
    CHECK(trn_trainer_step_count(t) == 3 * 157);
    /* the metric contract */
    const char *names[] = {
        "train_loss",  "val_loss",   "val_acc",    "test_acc",          "samples_per_s",
        "lr",          "batch_size", "loss_scale", "grad_sqnorm_small", "grad_sqnorm_big",
        "batch_small", "batch_big",  "epoch"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (isnan(s_last(&f, names[i])))
            JZT_FAIL("metric %s was not reported", names[i]);
    CHECK(s_last(&f, "batch_small") == 32 && s_last(&f, "batch_big") == 64);
    /* the small batch's gradient is noisier: |G_small|^2 > |G_big|^2 on average */
    double ss = 0, sb = 0;
    for (int i = 0; i < f.nrep; i++) {
        if (!strcmp(f.rep_name[i], "grad_sqnorm_small"))
            ss += f.rep_val[i];
        if (!strcmp(f.rep_name[i], "grad_sqnorm_big"))
            sb += f.rep_val[i];
    }
    CHECK(ss > sb);
    trn_trainer_destroy(&t);
    trn_data_free(&tr), trn_data_free(&va), trn_data_free(&te);
}

/* grad_sqnorm_small is the mean |g|^2 over the full-size micro-batches,
   each measured alone: by Cauchy-Schwarz that mean is never below |G|^2 of
   their average (the whole batch), so the noise trace it implies is never
   negative. The first chunk alone (the old measure) is below the whole
   batch's on many steps. */
TEST(gradient_noise_small_is_the_mean_over_chunks)
{
    int mbs[] = {0, 8}; /* two halves on report steps; four micro-batches */
    for (int k = 0; k < 2; k++) {
        trn_config c;
        s_cfg(&c);
        c.log_every = 1;
        c.epochs = 1; /* ~190 measurements: the report buffer holds them */
        c.micro_batch = mbs[k];
        trn_trainer *t = s_new(&c);
        REQUIRE(t);
        fake_io f = {0};
        trn_io io = s_io(&f);
        trn_trainer_set_io(t, &io);
        char err[TRN_ERRLEN];
        REQUIRE(trn_trainer_run(t, err) == 0);
        int n = 0, below = 0;
        double gs = NAN;
        for (int i = 0; i < f.nrep; i++) {
            if (!strcmp(f.rep_name[i], "grad_sqnorm_small"))
                gs = f.rep_val[i];
            else if (!strcmp(f.rep_name[i], "grad_sqnorm_big") && !isnan(gs)) {
                n++;
                below += gs < f.rep_val[i] * (1 - 1e-5);
                gs = NAN;
            }
        }
        printf("  micro-batch %d: %d measurements, %d with small < big\n", mbs[k], n,
               below);
        CHECK(n >= 20);
        CHECK(below == 0);
        double first_small = NAN; /* the last step of the epoch may be short */
        for (int i = 0; i < f.nrep && isnan(first_small); i++)
            if (!strcmp(f.rep_name[i], "batch_small"))
                first_small = f.rep_val[i];
        CHECK(first_small == (k ? 8 : 16));
        trn_trainer_destroy(&t);
    }
}

/* Measuring the gradient noise (every --log-every steps) leaves the
   training untouched: a run that measures every third step ends with the
   same bits as one that never measures, in every precision, with per-layer
   loss scales, with BN (the CNN), and with an odd batch (unequal halves). */
TEST(measuring_does_not_change_the_trajectory)
{
    const char *precs[] = {"fp32", "bf16", "fp16", "fp16", "fp32", "bf16"};
    const char *models[] = {"mlp", "mlp", "mlp", "cnn", "mlp", "cnn"};
    int per_layer[] = {0, 0, 1, 1, 0, 0}, batch[] = {32, 32, 32, 16, 33, 15};
    for (int k = 0; k < 6; k++) {
        trn_trainer *t[2];
        for (int j = 0; j < 2; j++) {
            trn_config c;
            s_cfg(&c);
            strcpy(c.model, models[k]);
            strcpy(c.channels, "4,8");
            snprintf(c.precision, sizeof c.precision, "%s", precs[k]);
            c.per_layer_scale = per_layer[k];
            c.batch_size = batch[k];
            c.log_every = j ? 1000 : 3;
            REQUIRE(t[j] = s_new(&c));
            for (int i = 0; i < 30; i++)
                REQUIRE(trn_trainer_step(t[j]) >= 0);
        }
        if (!s_same_state(t[0], t[1]))
            JZT_FAIL("%s %s batch %d: measuring changed the weights", models[k], precs[k],
                     batch[k]);
        trn_trainer_destroy(&t[0]);
        trn_trainer_destroy(&t[1]);
    }
}

TEST(mixed_precision_trains)
{
    const char *precs[] = {"bf16", "fp16"};
    for (int i = 0; i < 2; i++) {
        trn_config c;
        s_cfg(&c);
        strcpy(c.precision, precs[i]);
        trn_trainer *t = s_new(&c);
        REQUIRE(t);
        fake_io f = {0};
        trn_io io = s_io(&f);
        trn_trainer_set_io(t, &io);
        char err[TRN_ERRLEN];
        REQUIRE(trn_trainer_run(t, err) == 0);
        double acc = s_last(&f, "val_acc");
        printf("  synthetic %s: val_acc %.4f loss_scale %g\n", precs[i], acc,
               s_last(&f, "loss_scale"));
        CHECK(acc >= 0.9);
        /* fp16 gets dynamic loss scaling (2^16), bf16 needs none */
        CHECK(s_last(&f, "loss_scale") == (i == 1 ? 65536.0 : 1.0));
        trn_trainer_destroy(&t);
    }
    /* precision schedule fp32 -> bf16 */
    trn_config c;
    s_cfg(&c);
    strcpy(c.precision_schedule, "fp32:1,bf16:1");
    trn_trainer *t = s_new(&c);
    REQUIRE(t);
    char err[TRN_ERRLEN];
    REQUIRE(trn_trainer_run(t, err) == 0);
    /* after the bf16 epoch: on oneDNN (the MLP's default in bf16 where the
       build has it and the CPU has bf16 instructions) linear_dnnl.c rounds
       the weights into its own bf16 copy, so no working copy here */
    trn_param *p = trn_net_param(trn_trainer_net(t), 0);
    CHECK(trn_dnnl_bf16_native() ? p->wlp == p->w : p->wlp != p->w);
    trn_trainer_destroy(&t);
    /* on OpenBLAS the working weights are rounded copies */
    s_cfg(&c);
    strcpy(c.precision_schedule, "fp32:1,bf16:1");
    strcpy(c.matmul, "blas");
    t = s_new(&c);
    REQUIRE(t);
    REQUIRE(trn_trainer_run(t, err) == 0);
    p = trn_net_param(trn_trainer_net(t), 0);
    CHECK(p->wlp != p->w);
    CHECK(p->wlp[3] == trn_round_bf16(p->w[3]));
    trn_trainer_destroy(&t);
}

/* A bf16 MLP on oneDNN takes its batches from a bf16 copy of the training
   set (train_batch.c): made at the first bf16 batch (not during a
   schedule's fp32 epoch), and the trajectory is the one of the fp32 rows
   rounded as they are gathered (the copy refused), bit for bit. */
TEST(bf16_batches_from_the_training_sets_bf16_copy)
{
    if (!trn_dnnl_bf16_native())
        SKIP("no oneDNN bf16 on this CPU or build: bf16 runs on the emulation");
    trn_trainer *t[2];
    for (int j = 0; j < 2; j++) {
        trn_config c;
        s_cfg(&c);
        strcpy(c.precision_schedule, "fp32:1,bf16:1");
        c.log_every = 1000;
        REQUIRE(t[j] = s_new(&c));
        if (j)
            t[j]->xh_state = TRN__XH_REFUSED;
    }
    int per_epoch = (g_syn.n + 31) / 32;
    for (int i = 0; i < per_epoch; i++)
        for (int j = 0; j < 2; j++)
            REQUIRE(trn_trainer_step(t[j]) >= 0);
    CHECK(t[0]->xh_state == TRN__XH_UNMADE && t[0]->xh == NULL);
    for (int i = 0; i < 20; i++)
        for (int j = 0; j < 2; j++)
            REQUIRE(trn_trainer_step(t[j]) >= 0);
    CHECK(t[0]->xh_state == TRN__XH_READY && t[0]->xh != NULL);
    CHECK(t[1]->xh == NULL);
    CHECK(t[0]->xh[7] == trn_f2bf(g_syn.x[7]));
    CHECK(s_same_state(t[0], t[1]));
    trn_trainer_destroy(&t[0]);
    trn_trainer_destroy(&t[1]);
}

/* The bf16 copy's limit is the least of 1 GiB and 1/16 of the machine's
   memory, its cgroup's limit and MemAvailable (each resolved and tested
   against a fake cgroup tree in test_trn_memlimit.c); a copy over the
   limit is refused with a --verbose line naming the sizes (before:
   silently); a schedule's fp32 epoch with no bf16 epoch after it frees the
   copy, and one with bf16 after it keeps it (before: kept to the end
   either way). */
TEST(bf16_copy_limit_said_and_freed_when_no_bf16_ahead)
{
    long lim = trn__xh_limit();
    long phys = trn_memlimit_phys();
    long cg = trn_memlimit_cgroup_self();
    long av = trn_memlimit_available();
    printf("  limit %.1f MB (memory %.0f MB, cgroup %.0f MB, available %.0f MB)\n",
           lim / 1e6, phys / 1e6, cg / 1e6, av / 1e6);
    CHECK(lim > 0 && lim <= (1L << 30) && lim <= phys / 16);
    if (cg > 0)
        CHECK(lim <= cg / 16);
    if (av > 0) /* MemAvailable moves between the two reads: 1/4 of slack */
        CHECK(lim <= av / 16 + av / 64);
    if (!trn_dnnl_bf16_native())
        SKIP("no oneDNN bf16 on this CPU or build: bf16 runs on the emulation");

    trn_config c;
    s_cfg(&c);
    strcpy(c.precision, "bf16");
    c.verbose = 1;
    c.quiet = 0;
    trn_trainer *t = s_new(&c);
    REQUIRE(t);
    t->xh_limit = 1 << 20;
    char path[512];
    snprintf(path, sizeof path, "%s/xh-stderr.txt", g_dir);
    fflush(stderr);
    int keep = dup(2), fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    REQUIRE(keep >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    int rc = trn_trainer_step(t);
    fflush(stderr);
    dup2(keep, 2);
    close(keep);
    REQUIRE(rc >= 0);
    char out[4096] = "";
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    fclose(f);
    const char *l = strstr(out, "jizhi-train: bf16 batches: ");
    printf("  %.200s\n", l ? l : out);
    CHECK(t->xh_state == TRN__XH_REFUSED && t->xh == NULL);
    char want[128];
    snprintf(want, sizeof want,
             "no bf16 copy of the training set (%.1f MB, over its limit: "
             "1.0 MB",
             (double)g_syn.n * g_syn.dim * 2 / 1e6);
    CHECK(l && strstr(l, want) != NULL);
    trn_trainer_destroy(&t);

    static const char *sched[] = {"bf16:1,fp32:1", "bf16:1,fp32:1,bf16:1"};
    for (int k = 0; k < 2; k++) {
        s_cfg(&c);
        strcpy(c.precision_schedule, sched[k]);
        c.log_every = 1000;
        REQUIRE(t = s_new(&c));
        int per_epoch = (g_syn.n + 31) / 32;
        for (int i = 0; i < per_epoch; i++)
            REQUIRE(trn_trainer_step(t) >= 0);
        CHECK(t->xh_state == TRN__XH_READY && t->xh != NULL);
        REQUIRE(trn_trainer_step(t) >= 0); /* the fp32 epoch's first */
        if (k == 0)
            CHECK(t->xh_state == TRN__XH_UNMADE && t->xh == NULL);
        else
            CHECK(t->xh_state == TRN__XH_READY && t->xh != NULL);
        trn_trainer_destroy(&t);
    }
}

TEST(overflow_skips_and_halves)
{
    trn_config c;
    s_cfg(&c);
    strcpy(c.precision, "fp16");
    c.init_loss_scale = 0x1p40; /* the gradients overflow fp16 */
    trn_trainer *t = s_new(&c);
    REQUIRE(t);
    trn_param *p = trn_net_param(trn_trainer_net(t), 0);
    float *w0 = malloc((size_t)p->n * sizeof(float));
    memcpy(w0, p->w, (size_t)p->n * sizeof(float));
    CHECK(trn_trainer_step(t) == 1); /* skipped */
    CHECK(trn_trainer_scaler(t)->scale == 0x1p39);
    CHECK(trn_trainer_scaler(t)->skipped == 1);
    CHECK(memcmp(w0, p->w, (size_t)p->n * sizeof(float)) == 0); /* no update */
    CHECK(trn_trainer_step_count(t) == 1);
    int skipped = 1, s;
    while ((s = trn_trainer_step(t)) == 1)
        skipped++;
    CHECK(s == 0);
    double sc = trn_trainer_scaler(t)->scale;
    printf("  overflow: %d skipped steps, scale now 2^%g\n", skipped, log2(sc));
    CHECK(sc == ldexp(1.0, 40 - skipped));
    CHECK(sc * 65504 < 1e30); /* sanity */
    CHECK(memcmp(w0, p->w, (size_t)p->n * sizeof(float)) != 0);
    free(w0);
    trn_trainer_destroy(&t);

    /* per-layer scales: only the overflowing layers back off */
    s_cfg(&c);
    strcpy(c.precision, "fp16");
    c.per_layer_scale = 1;
    strcpy(c.loss_scale, "dynamic");
    c.init_loss_scale = 0x1p19; /* the output layer overflows fp16, the first not */
    t = s_new(&c);
    REQUIRE(t);
    for (int i = 0; i < 30; i++)
        REQUIRE(trn_trainer_step(t) >= 0);
    CHECK(isfinite(trn_trainer_last_loss(t)));
    int backed = 0, kept = 0;
    for (int l = 0; l < t->nlayers; l++) {
        printf("  per-layer: layer %d scale 2^%g, %ld skipped\n", l,
               log2(t->lscalers[l].scale), t->lscalers[l].skipped);
        if (t->lscalers[l].skipped > 0)
            backed += t->lscalers[l].scale < 0x1p19;
        else
            kept += t->lscalers[l].scale == 0x1p19; /* untouched */
        CHECK(t->lscalers[l].skipped > 0 || t->lscalers[l].scale == 0x1p19);
    }
    CHECK(backed >= 1); /* some layer overflowed and backed off */
    CHECK(kept >= 1);   /* and not every layer did */
    trn_trainer_destroy(&t);
}

/* --loss-scale auto follows a live precision (seen on the CUDA backend's
   emulation, where a live fp16 kept fp32's scale 1): fp16 on, dynamic from
   --init-loss-scale; a set that keeps fp16 keeps the scale it reached;
   fp16 off, none again */
TEST(live_precision_brings_the_auto_loss_scale)
{
    trn_config c;
    char err[TRN_ERRLEN];
    s_cfg(&c);
    c.init_loss_scale = 1024;
    trn_trainer *t = s_new(&c);
    REQUIRE(t);
    REQUIRE(trn_trainer_step(t) >= 0);
    CHECK(trn_trainer_scaler(t)->scale == 1 && !trn_trainer_scaler(t)->dynamic);
    REQUIRE(trn_trainer_set_param(t, "precision", "fp16", err) == 0);
    CHECK(trn_trainer_scaler(t)->scale == 1024 && trn_trainer_scaler(t)->dynamic);
    t->scaler.scale = 512; /* as after one overflow */
    REQUIRE(trn_trainer_set_param(t, "lr", "0.01", err) == 0);
    REQUIRE(trn_trainer_set_param(t, "precision_schedule", "fp16:1,bf16:1", err) == 0);
    CHECK(trn_trainer_scaler(t)->scale == 512); /* fp16 still there: kept */
    REQUIRE(trn_trainer_step(t) >= 0);
    CHECK(isfinite(trn_trainer_last_loss(t)));
    REQUIRE(trn_trainer_set_param(t, "precision_schedule", "", err) == 0);
    REQUIRE(trn_trainer_set_param(t, "precision", "bf16", err) == 0);
    CHECK(trn_trainer_scaler(t)->scale == 1 && !trn_trainer_scaler(t)->dynamic);
    trn_trainer_destroy(&t);
    /* --loss-scale given: a live precision leaves it as it is */
    s_cfg(&c);
    strcpy(c.loss_scale, "none");
    REQUIRE(t = s_new(&c));
    REQUIRE(trn_trainer_set_param(t, "precision", "fp16", err) == 0);
    CHECK(trn_trainer_scaler(t)->scale == 1 && !trn_trainer_scaler(t)->dynamic);
    trn_trainer_destroy(&t);
}

static void s_run_steps(trn_trainer *t, int n)
{
    for (int i = 0; i < n; i++)
        trn_trainer_step(t);
}

TEST(checkpoint_roundtrip_and_resume)
{
    const char *opts[] = {"sgd", "lamb"};
    for (int k = 0; k < 2; k++) {
        trn_config c;
        s_cfg(&c);
        strcpy(c.optimizer, opts[k]);
        strcpy(c.precision, k ? "fp16" : "fp32");
        c.lr = k ? 0.002 : 0.05;
        c.warmup_epochs = 0.5;
        strcpy(c.schedule, "cosine");
        char path[512], err[TRN_ERRLEN];
        snprintf(path, sizeof path, "%s/a.jzck", g_dir);
        trn_trainer *a = s_new(&c), *b = s_new(&c), *r = s_new(&c);
        REQUIRE(a && b && r);
        /* uninterrupted: 250 steps (crosses an epoch boundary at 188) */
        s_run_steps(a, 250);
        /* interrupted at 120, saved, restored into a fresh trainer */
        s_run_steps(b, 120);
        REQUIRE(trn_trainer_save(b, path, err) == 0);
        REQUIRE(trn_trainer_load(r, path, err) == 0);
        CHECK(s_same_state(b, r)); /* bit-exact round trip */
        CHECK(trn_trainer_step_count(r) == 120);
        s_run_steps(r, 130);
        CHECK(trn_trainer_step_count(r) == 250);
        CHECK(s_same_state(a, r)); /* resume == uninterrupted */
        CHECK(trn_trainer_lr(a) == trn_trainer_lr(r));
        CHECK(trn_trainer_scaler(a)->scale == trn_trainer_scaler(r)->scale);
        trn_trainer_destroy(&a), trn_trainer_destroy(&b), trn_trainer_destroy(&r);
    }
}

/* --zero-gamma only shapes the initialisation, but a checkpoint records it
   as it records the seed: a run resumed with the other value reports the
   checkpoint's, and takes the checkpoint's gammas (the same state). */
TEST(checkpoint_records_zero_gamma)
{
    trn_config c;
    s_cfg(&c);
    strcpy(c.model, "cnn");
    strcpy(c.channels, "4");
    c.zero_gamma = 0;
    char path[512], err[TRN_ERRLEN];
    snprintf(path, sizeof path, "%s/zg.jzck", g_dir);
    trn_trainer *a = s_new(&c);
    c.zero_gamma = 1;
    trn_trainer *r = s_new(&c);
    REQUIRE(a && r);
    s_run_steps(a, 2);
    REQUIRE(trn_trainer_save(a, path, err) == 0);
    REQUIRE(trn_trainer_load(r, path, err) == 0);
    CHECK(trn_trainer_config(r)->zero_gamma == 0);
    CHECK(s_same_state(a, r));
    trn_trainer_destroy(&a), trn_trainer_destroy(&r);
}

static int s_write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    fwrite(p, 1, n, f);
    fclose(f);
    return 0;
}

TEST(bad_checkpoints_refused)
{
    trn_config c;
    s_cfg(&c);
    char path[512], bad[512], err[TRN_ERRLEN];
    snprintf(path, sizeof path, "%s/good.jzck", g_dir);
    snprintf(bad, sizeof bad, "%s/bad.jzck", g_dir);
    trn_trainer *a = s_new(&c), *b = s_new(&c);
    REQUIRE(a && b);
    s_run_steps(a, 7);
    REQUIRE(trn_trainer_save(a, path, err) == 0);
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len);
    REQUIRE(fread(buf, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    trn_param *p = trn_net_param(trn_trainer_net(b), 0);
    float w0 = p->w[0];

    s_write_file(bad, buf, (size_t)len / 2); /* truncated */
    CHECK(trn_trainer_load(b, bad, err) < 0);
    CHECK(strstr(err, "truncated") != NULL);
    buf[len / 2] ^= 0x40; /* one flipped bit */
    s_write_file(bad, buf, (size_t)len);
    CHECK(trn_trainer_load(b, bad, err) < 0);
    CHECK(strstr(err, "checksum") != NULL);
    buf[len / 2] ^= 0x40;
    s_write_file(bad, "PK\3\4 this is a zip file", 24); /* foreign */
    CHECK(trn_trainer_load(b, bad, err) < 0);
    CHECK(strstr(err, "not a jizhi-train checkpoint") != NULL);
    CHECK(trn_trainer_load(b, "/nonexistent/x.jzck", err) < 0);
    CHECK(strstr(err, "cannot open") != NULL);
    buf[8] = 99; /* version */
    s_write_file(bad, buf, (size_t)len);
    CHECK(trn_trainer_load(b, bad, err) < 0);
    CHECK(strstr(err, "version 99") != NULL);
    /* another architecture */
    trn_config c2 = c;
    strcpy(c2.hidden, "16");
    trn_trainer *o = s_new(&c2);
    REQUIRE(o);
    CHECK(trn_trainer_load(o, path, err) < 0);
    CHECK(strstr(err, "mlp:784-32-10") != NULL);
    /* nothing changed by the refusals */
    CHECK(p->w[0] == w0);
    CHECK(trn_trainer_step_count(b) == 0);
    CHECK(trn_ckpt_verify(path, err) == 0);
    free(buf);
    trn_trainer_destroy(&a), trn_trainer_destroy(&b), trn_trainer_destroy(&o);
}

TEST(live_control)
{
    trn_config c;
    s_cfg(&c);
    c.momentum = 0;
    c.weight_decay = 0;
    trn_trainer *t = s_new(&c);
    REQUIRE(t);
    fake_io f = {0};
    trn_io io = s_io(&f);
    trn_trainer_set_io(t, &io);
    s_run_steps(t, 3);
    /* lr = 0 at the next step: the weights do not move */
    s_push_set(&f, "lr", 0.0);
    CHECK(trn_trainer_control(t) == 0);
    CHECK(f.acks == 1 && f.acks_ok == 1);
    CHECK(trn_trainer_lr(t) == 0.0);
    trn_param *p = trn_net_param(trn_trainer_net(t), 0);
    float *w0 = malloc((size_t)p->n * sizeof(float));
    memcpy(w0, p->w, (size_t)p->n * sizeof(float));
    trn_trainer_step(t);
    CHECK(memcmp(w0, p->w, (size_t)p->n * sizeof(float)) == 0);
    /* lr = 0.1: the next step moves w by exactly -0.1 g (plain SGD) */
    s_push_set(&f, "lr", 0.1);
    trn_trainer_control(t);
    trn_trainer_step(t);
    long moved = 0, exact = 0;
    for (long j = 0; j < p->n; j++) {
        if (p->w[j] != w0[j])
            moved++;
        if (p->w[j] == w0[j] - 0.1f * p->g[j])
            exact++;
    }
    CHECK(moved > 0);
    CHECK(exact == p->n);
    /* batch size with linear scaling rescales the lr */
    s_push(&f, JZ_INS_SET, "linear");
    strcpy(f.q[f.nq - 1].name, "lr_scaling");
    s_push_set(&f, "batch_size", 256);
    trn_trainer_control(t);
    CHECK(trn_trainer_config(t)->batch_size == 256);
    CHECK_NEAR(trn_trainer_lr(t), 0.1 * 256 / 128, 1e-12);
    long before = trn_trainer_step_count(t);
    trn_trainer_step(t);
    CHECK(trn_trainer_step_count(t) == before + 1);
    /* refusals: unknown key, not changeable live, bad value */
    int acks = f.acks, ok = f.acks_ok;
    s_push_set(&f, "no_such_param", 1);
    trn_trainer_control(t);
    CHECK(f.acks == acks + 1 && f.acks_ok == ok);
    CHECK(strstr(f.last_detail, "unknown parameter") != NULL);
    s_push_set(&f, "hidden", 5);
    trn_trainer_control(t);
    CHECK(strstr(f.last_detail, "cannot change while the trial runs") != NULL);
    s_push_set(&f, "lr", -1);
    trn_trainer_control(t);
    CHECK(strstr(f.last_detail, "out of range") != NULL);
    CHECK(f.acks_ok == ok);
    /* checkpoint, then load it back (PBT exploit with new params) */
    s_push(&f, JZ_INS_CHECKPOINT, NULL);
    trn_trainer_control(t);
    CHECK(f.ck_done == 1);
    CHECK(access(f.ck_path, R_OK) == 0);
    long at = trn_trainer_step_count(t);
    s_run_steps(t, 4);
    s_push(&f, JZ_INS_LOAD, f.ck_path);
    trn_trainer_control(t);
    CHECK(trn_trainer_step_count(t) == at);
    CHECK(f.acks_ok == ok + 2);
    s_push(&f, JZ_INS_LOAD, "/nonexistent.jzck");
    trn_trainer_control(t);
    CHECK(f.acks_ok == ok + 2);
    /* pause, resume and stop: run() returns at once, test_acc not needed */
    s_push(&f, JZ_INS_PAUSE, NULL);
    s_push(&f, JZ_INS_RESUME, NULL);
    s_push(&f, JZ_INS_STOP, NULL);
    char err[TRN_ERRLEN];
    long s0 = trn_trainer_step_count(t);
    CHECK(trn_trainer_run(t, err) == 0);
    CHECK(trn_trainer_step_count(t) == s0);
    CHECK(!isnan(s_last(&f, "val_acc")));
    free(w0);
    trn_trainer_destroy(&t);
}

TEST(eval_every_samples)
{
    /* --eval-every-samples 1000 on 6000 synthetic examples, one epoch:
       at batch 32 an evaluation once 1000 samples were trained since the
       last (steps 32, 64, ... 160: 32 x 32 = 1024), then the epoch end (step
       188, a last batch of 16); after a live set batch_size 100 every 10
       steps, whatever the batch size (the steps would be 32, 64, ... with a
       count of steps). */
    static const long want[2][7] = {{32, 64, 96, 128, 160, 188, -1},
                                    {10, 20, 30, 40, 50, 60, -1}};
    for (int k = 0; k < 2; k++) {
        trn_config c;
        s_cfg(&c);
        c.epochs = 1;
        c.eval_every_samples = 1000;
        fake_io f;
        memset(&f, 0, sizeof f);
        if (k == 1)
            s_push_set(&f, "batch_size", 100);
        trn_trainer *t = s_new(&c);
        REQUIRE(t);
        trn_io io = s_io(&f);
        trn_trainer_set_io(t, &io);
        char err[TRN_ERRLEN];
        CHECK(trn_trainer_run(t, err) == 0);
        int n = 0, ok = 1;
        for (int i = 0; i < f.nrep; i++)
            if (!strcmp(f.rep_name[i], "val_acc")) {
                ok &= n < 6 && f.rep_step[i] == want[k][n];
                n++;
            }
        CHECK(ok && n == 6);
        trn_trainer_destroy(&t);
    }
}

TEST(cnn_trains)
{
    /* conv-BN-ReLU stem, a residual block per stage, stride-2 transition,
       global pooling, linear head: 8,16 channels on 3200 Fashion-MNIST
       examples, batch 32, lr 0.1. PyTorch's identical model (same init
       scheme) goes from 2.28 to 1.26 mean loss over 100 steps; we require
       the mean loss of steps 61-80 to be below 1.75 and under the first
       ten's by 0.4. */
    trn_config c;
    trn_config_defaults(&c);
    strcpy(c.model, "cnn");
    strcpy(c.channels, "8,16");
    c.blocks = 1;
    c.train_subset = 3200;
    c.val_size = 500;
    c.batch_size = 32;
    c.lr = 0.1;
    c.log_every = 1000;
    c.quiet = 1;
    trn_dataset tr, va, te;
    char err[TRN_ERRLEN];
    REQUIRE(trn_data_load(&c, &tr, &va, &te, err) == 0);
    trn_trainer *t = trn_trainer_new(&c, &tr, &va, NULL, err);
    REQUIRE(t);
    double first = 0, last = 0;
    for (int i = 0; i < 80; i++) {
        REQUIRE(trn_trainer_step(t) == 0);
        if (i < 10)
            first += trn_trainer_last_loss(t) / 10;
        if (i >= 60)
            last += trn_trainer_last_loss(t) / 20;
    }
    printf("  cnn 8,16: mean loss steps 1-10 %.3f, steps 61-80 %.3f\n", first, last);
    CHECK(last < 1.75);
    CHECK(last < first - 0.4);
    CHECK(trn_net_state_count(trn_trainer_net(t)) == 2 * (8 * 3 + 16 * 3));
    trn_trainer_destroy(&t);
    trn_data_free(&tr), trn_data_free(&va), trn_data_free(&te);
}

/* Precise BN (--bn-recompute). Net: recomputed from one batch, evaluating
   that batch matches a training-mode forward of it (batch statistics; the
   running variance is unbiased by s/(s-1), s = 32*784 per channel at the
   stem, so within 1e-3), which training's running averages after 30 steps
   at lr 0.2 do not; from two chunks the statistics are the two chunks'
   average. Trainer: with and without it, steps are bit-identical and the
   running averages are put back after each evaluation; only the
   evaluation differs. */
TEST(bn_recompute_evaluates_with_the_statistics_of_the_weights_in_force)
{
    trn_config c;
    trn_config_defaults(&c);
    strcpy(c.model, "cnn");
    strcpy(c.channels, "8,16");
    c.train_subset = 3200;
    c.val_size = 500;
    c.batch_size = 32;
    c.lr = 0.2;
    c.log_every = 1000;
    c.quiet = 1;
    trn_dataset tr, va, te;
    char err[TRN_ERRLEN];
    REQUIRE(trn_data_load(&c, &tr, &va, &te, err) == 0);
    trn_trainer *t = trn_trainer_new(&c, &tr, &va, NULL, err);
    c.bn_recompute = 2;
    trn_trainer *tp = trn_trainer_new(&c, &tr, &va, NULL, err);
    REQUIRE(t && tp);
    for (int i = 0; i < 30; i++)
        REQUIRE(trn_trainer_step(t) == 0 && trn_trainer_step(tp) == 0);
    double l0, a0, l1, a1;
    trn_trainer_evaluate(t, &va, &l0, &a0);
    trn_trainer_evaluate(tp, &va, &l1, &a1);
    printf("  val loss: running averages %.4f, recomputed %.4f\n", l0, l1);
    CHECK(l1 != l0);
    CHECK(s_same_state(t, tp)); /* put back */
    for (int i = 0; i < 10; i++)
        REQUIRE(trn_trainer_step(t) == 0 && trn_trainer_step(tp) == 0);
    CHECK(s_same_state(t, tp));
    CHECK(trn_trainer_last_loss(t) == trn_trainer_last_loss(tp));

    trn_net *n = trn_trainer_net(t);
    long ns = trn_net_state_count(n);
    float *a = malloc((size_t)ns * sizeof *a), *b = malloc((size_t)ns * sizeof *b);
    REQUIRE(a && b);
    int ok;
    double l_ema = trn_net_eval(n, tr.x, tr.y, 32, &ok);
    REQUIRE(trn_net_bn_recompute(n, tr.x, 32, 32) == 0);
    double l_pb = trn_net_eval(n, tr.x, tr.y, 32, &ok);
    memcpy(a, trn_net_state(n), (size_t)ns * sizeof *a);
    double l_train = trn_net_forward_backward(n, tr.x, tr.y, 32, 1, 0, 0, NULL, &ok);
    printf("  batch loss: train mode %.5f, eval recomputed %.5f, eval running %.5f\n",
           l_train, l_pb, l_ema);
    CHECK(fabs(l_pb - l_train) < 1e-3 * l_train);
    CHECK(fabs(l_ema - l_train) > 0.05);
    REQUIRE(trn_net_bn_recompute(n, tr.x + 32L * tr.dim, 32, 32) == 0);
    memcpy(b, trn_net_state(n), (size_t)ns * sizeof *b);
    REQUIRE(trn_net_bn_recompute(n, tr.x, 64, 32) == 0);
    const float *ab = trn_net_state(n);
    double worst = 0;
    for (long j = 0; j < ns; j++)
        worst = fmax(worst, fabs(ab[j] - 0.5 * (a[j] + b[j])) /
                                (fabs(a[j]) + fabs(b[j]) + 1e-6));
    CHECK(worst < 1e-5);
    free(a), free(b);
    trn_trainer_destroy(&t);
    trn_trainer_destroy(&tp);
    trn_data_free(&tr), trn_data_free(&va), trn_data_free(&te);
}

int main(void)
{
    char err[TRN_ERRLEN];
    snprintf(g_dir, sizeof g_dir, "/tmp/test_trn_train.XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    if (trn_data_synthetic(&g_syn, 6000, 1000, err) < 0 ||
        trn_data_synthetic(&g_syn_val, 1000, 2000, err) < 0)
        return 1;
    trn_cpu_set_threads(0);
    RUN(fashion_mnist_short_run);
    RUN(gradient_noise_small_is_the_mean_over_chunks);
    RUN(measuring_does_not_change_the_trajectory);
    RUN(mixed_precision_trains);
    RUN(bf16_batches_from_the_training_sets_bf16_copy);
    RUN(bf16_copy_limit_said_and_freed_when_no_bf16_ahead);
    RUN(overflow_skips_and_halves);
    RUN(live_precision_brings_the_auto_loss_scale);
    RUN(checkpoint_roundtrip_and_resume);
    RUN(checkpoint_records_zero_gamma);
    RUN(bad_checkpoints_refused);
    RUN(live_control);
    RUN(eval_every_samples);
    RUN(cnn_trains);
    RUN(bn_recompute_evaluates_with_the_statistics_of_the_weights_in_force);
    trn_data_free(&g_syn);
    trn_data_free(&g_syn_val);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        printf("could not remove %s\n", g_dir);
    TEST_DONE();
}
