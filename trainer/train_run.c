/*  train_run.c - jizhi-train's run loop around the step (train.c):
    evaluation (the data split over ranks and summed), the metrics it
    reports to the helper, automatic checkpoints, trn_trainer_run, which
    steps until max_steps, a stop or an error, and --verbose's lines: the
    model and its parameter count at the start, the kernels at the start
    and at a precision change.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainer/train_impl.h"
#include "common/util.h"

void trn_trainer_say_kernels(trn_trainer *t, int at_start)
{
    /* the size the next step runs (a describe builds its kernels) */
    int off, nb;
    trn__shard(t, trn__next_batch_size(t), &off, &nb);
    char line[512], head[96];
    if (at_start) { /* the gradient's size: what a data-parallel step exchanges */
        long n = 0;
        for (int i = 0; i < trn_net_nparams(t->net); i++)
            n += trn_net_param(t->net, i)->n;
        fprintf(stderr,
                "jizhi-train: model: %s, %ld parameters (%ld bytes of fp32 gradients)\n",
                trn_net_arch(t->net), n, n * (long)sizeof(float));
    }
    if (at_start) /* a device backend trains; the CPU evaluates */
        snprintf(head, sizeof head, "%s", t->backend ? "CPU evaluation: " : "");
    else
        snprintf(head, sizeof head, "%s from step %ld: ", trn_precision_name(t->prec),
                 t->step + 1);
    trn_net_conv_describe(t->net, nb, line, sizeof line);
    fprintf(stderr, "jizhi-train: %sconvolutions: %s\n", head, line);
    trn_net_matmul_describe(t->net, nb, line, sizeof line);
    fprintf(stderr, "jizhi-train: %slinears: %s\n", head, line);
    t->said_prec = (int)t->prec;
}

int trn_trainer_evaluate(trn_trainer *t, const trn_dataset *d, double *loss, double *acc)
{
    if (t->backend && t->backend_attached)
        t->backend->sync_to_host(t->backend->self, t->net);
    double ls = 0;
    long ok = 0;
    const int chunk = 256; /* --bn-recompute's: bounds the CNN's im2col workspace */
    /* --bn-recompute: every rank the same first training examples, so the
       same statistics; training's running averages are put back after, so
       checkpoints and later evaluations without it see only those (out of
       memory for the copy: the running averages are used) */
    long ns = trn_net_state_count(t->net);
    float *keep = NULL;
    if (t->cfg.bn_recompute > 0 && ns > 0 && t->train &&
        (keep = malloc((size_t)ns * sizeof *keep))) {
        memcpy(keep, trn_net_state(t->net), (size_t)ns * sizeof *keep);
        long cnt = (long)t->cfg.bn_recompute * chunk;
        trn_net_bn_recompute(t->net, t->train->x,
                             cnt < t->train->n ? (int)cnt : t->train->n, chunk);
    }
    int lo = 0, hi = d->n;
    int split = t->dist || t->backend_dist;
    if (split) { /* this rank's slice; sums over ranks below */
        int cnt;
        trn__shard(t, d->n, &lo, &cnt);
        hi = lo + cnt;
    }
    int failed = 0; /* a chunk's forward failed (out of memory, oneDNN) */
    for (int i = lo, m; i < hi && !failed; i += m) {
        m = trn_net_eval_chunk(t->net, hi - i); /* the MLP on oneDNN: every thread */
        int c = 0;
        double l = trn_net_eval(t->net, d->x + (size_t)i * d->dim, d->y + i, m, &c);
        failed = l < 0;
        ls += l * m;
        ok += c;
    }
    int mine = failed, sum_failed = 0;
    if (split) { /* every rank learns of one's failure */
        double r[3] = {ls, (double)ok, (double)failed};
        if (trn_comm_sum_d(t->comm, r, 3) < 0)
            r[2] = sum_failed = 1; /* the sum itself failed: nothing to trust */
        ls = r[0];
        ok = (long)r[1];
        failed = r[2] > 0;
    }
    if (keep) {
        memcpy(trn_net_state(t->net), keep, (size_t)ns * sizeof *keep);
        free(keep);
    }
    *loss = failed ? NAN : d->n ? ls / d->n : 0;
    *acc = failed ? NAN : d->n ? (double)ok / d->n : 0;
    return mine ? -1 : sum_failed ? -3 : failed ? -2 : 0;
}

/* CPU-seconds of the whole process (every thread): a step's cost that a
   neighbour's load on a shared machine does not inflate, unlike its wall
   time (step_cpu_s; the batchsize scheduler's "throughput": "cpu"). */
static double s_cpu_now(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void s_report(trn_trainer *t, const char *name, double v)
{
    if (t->io.report)
        t->io.report(t->io.ud, t->step, name, v);
}

/* samples_per_s is the training loop's rate: the time since `since` (a
   control call that applied an instruction: a pause, a load, a
   checkpoint asked for; an evaluation and an epoch's checkpoint) leaves
   its window. */
static void s_leave_window(trn_trainer *t, double since)
{
    t->t_since += util_now() - since;
}

static void s_report_train(trn_trainer *t)
{
    double now = util_now();
    double dt = now - t->t_since;
    if (t->loss_n)
        s_report(t, "train_loss", t->loss_acc / t->loss_n);
    s_report(t, "lr", trn_trainer_lr(t));
    s_report(t, "batch_size", t->cfg.batch_size);
    double ls = t->scaler.scale;
    if (t->cfg.per_layer_scale) /* the smallest of the per-layer scales */
        for (int l = 0; l < t->nlayers; l++)
            ls = l == 0 || t->lscale[l] < ls ? t->lscale[l] : ls;
    s_report(t, "loss_scale", ls);
    if (dt > 0 && t->samples_since)
        s_report(t, "samples_per_s", t->samples_since / dt);
    if (t->steps_since > 0 && t->step_cpu > 0)
        s_report(t, "step_cpu_s", t->step_cpu / (double)t->steps_since);
    if (t->have_gns) {
        s_report(t, "grad_sqnorm_small", t->gs_small);
        s_report(t, "grad_sqnorm_big", t->gs_big);
        s_report(t, "batch_small", t->b_small);
        s_report(t, "batch_big", t->b_big);
        t->have_gns = 0;
    }
    t->loss_acc = 0;
    t->loss_n = 0;
    t->samples_since = 0;
    t->step_cpu = 0;
    t->steps_since = 0;
    t->t_since = util_now();
}

const char *trn__eval_failure(const trn_trainer *t, int rc, char *buf, size_t len)
{
    if (rc == -2)
        snprintf(buf, len, " on another rank (rank %d's own succeeded)", t->rank);
    else if (rc == -3)
        snprintf(buf, len, ": the ranks' sum of the evaluation failed on rank %d",
                 t->rank);
    else if (t->nranks > 1)
        snprintf(buf, len, " on rank %d: %.400s", t->rank, trn_net_error(t->net));
    else
        snprintf(buf, len, ": %.400s", trn_net_error(t->net));
    return buf;
}

/* Evaluates on the validation set and reports it; 0, or -1 with err where
   the evaluation failed (nothing reported). */
static int s_report_eval(trn_trainer *t, double *vl_out, double *va_out, char *err)
{
    double vl = 0, va = 0;
    if (t->val && t->val->n) {
        int rc = trn_trainer_evaluate(t, t->val, &vl, &va);
        if (rc < 0) {
            char who[TRN_ERRLEN];
            snprintf(err, TRN_ERRLEN, "evaluation at step %ld failed%s", t->step,
                     trn__eval_failure(t, rc, who, sizeof who));
            return -1;
        }
        s_report(t, "val_loss", vl);
        s_report(t, "val_acc", va);
    }
    s_report(t, "epoch", t->epoch + (double)t->pos / t->train->n);
    t->last_eval_step = t->step;
    if (vl_out)
        *vl_out = vl;
    if (va_out)
        *va_out = va;
    return 0;
}

static int s_auto_checkpoint(trn_trainer *t, char *err)
{
    const char *dir = t->cfg.checkpoint_dir[0] ? t->cfg.checkpoint_dir
                      : t->io.checkpoint_dir   ? t->io.checkpoint_dir(t->io.ud)
                                               : ".";
    char path[1024];
    snprintf(path, sizeof path, "%s/ckpt-%ld.jzck", dir ? dir : ".", t->step);
    if (trn_trainer_save(t, path, err) < 0)
        return -1;
    if (t->io.checkpoint_done)
        t->io.checkpoint_done(t->io.ud, t->step, path);
    return 0;
}

int trn_trainer_run(trn_trainer *t, char *err)
{
    const trn_config *c = &t->cfg;
    double t0 = util_now();
    t->t_since = t0;
    t->samples_since = 0;
    t->step_cpu = 0;
    t->steps_since = 0;
    for (;;) {
        double tc = util_now();
        long acts = t->ctl_acts;
        int rc = trn_trainer_control(t);
        if (t->ctl_acts !=
            acts) /* not the polling itself (a broadcast a step with ranks) */
            s_leave_window(t, tc);
        if (rc < 0) {
            snprintf(err, TRN_ERRLEN, "live control failed");
            return -1;
        }
        if (rc == 1 || t->stop)
            break;
        if (t->epoch >= c->epochs || (c->max_steps > 0 && t->step >= c->max_steps))
            break;
        int ep = t->epoch;
        int nb = trn__next_batch_size(t);
        double cpu0 = s_cpu_now();
        if (trn_trainer_step(t) < 0) {
            snprintf(err, TRN_ERRLEN, "training step %ld failed: %s", t->step,
                     trn_net_error(t->net));
            return -1;
        }
        t->step_cpu += s_cpu_now() - cpu0;
        t->steps_since++;
        t->samples_since += nb;
        t->samples_eval += nb;
        if (!isfinite(t->last_loss) && t->prec == TRN_FP32 && !c->quiet)
            fprintf(stderr, "jizhi-train: step %ld: loss is %g\n", t->step, t->last_loss);
        if (t->step % c->log_every == 0)
            s_report_train(t);
        int epoch_end = t->epoch != ep;
        if (epoch_end || (c->eval_every > 0 && t->step % c->eval_every == 0) ||
            (c->eval_at_step > 0 && t->step == c->eval_at_step) ||
            (c->eval_every_samples > 0 && t->samples_eval >= c->eval_every_samples)) {
            double vl, va, te = util_now();
            if (s_report_eval(t, &vl, &va, err) < 0)
                return -1;
            t->samples_eval = 0;
            /* the evaluation asked for (a fork's judgment): sent now, not
               with the helper's next batch */
            if (c->eval_at_step > 0 && t->step == c->eval_at_step && t->io.flush)
                t->io.flush(t->io.ud);
            if (epoch_end && !c->quiet)
                fprintf(
                    stderr,
                    "jizhi-train: epoch %d/%d step %ld loss %.4f val_loss %.4f val_acc "
                    "%.4f lr %.4g scale %g %.1fs\n",
                    t->epoch, c->epochs, t->step, t->last_loss, vl, va, trn_trainer_lr(t),
                    t->scaler.scale, util_now() - t0);
            if (epoch_end && c->checkpoint_every > 0 &&
                t->epoch % c->checkpoint_every == 0 && s_auto_checkpoint(t, err) < 0)
                return -1;
            s_leave_window(t, te);
        }
    }
    /* A stop instruction finishes promptly: evaluate only when the trial has
       no validation result yet (its objective), and skip the test set. */
    if ((t->stop ? t->last_eval_step < 0 : t->last_eval_step != t->step) &&
        s_report_eval(t, NULL, NULL, err) < 0)
        return -1;
    /* The trial's objective (val_*) is reported: a test set that cannot be
       read now (moved, corrupt, out of memory) costs its test_* metrics,
       not the trial. */
    if (t->test_deferred && !t->stop) {
        char terr[TRN_ERRLEN];
        if (!t->test_deferred->n &&
            trn_data_load_test(&t->cfg, t->test_deferred, terr) < 0)
            fprintf(stderr,
                    "jizhi-train: training completed, %ld steps; the test set could not "
                    "be read: %s (no test_* metrics)\n",
                    t->step, terr);
        else
            t->test = t->test_deferred;
    }
    if (t->test && t->test->n && !t->stop) {
        double tl, ta;
        int rc = trn_trainer_evaluate(t, t->test, &tl, &ta);
        if (rc < 0) {
            char who[TRN_ERRLEN];
            snprintf(err, TRN_ERRLEN, "the test set's evaluation failed%s",
                     trn__eval_failure(t, rc, who, sizeof who));
            return -1;
        }
        s_report(t, "test_loss", tl);
        s_report(t, "test_acc", ta);
        if (!c->quiet)
            fprintf(stderr,
                    "jizhi-train: done: %ld steps, test_loss %.4f test_acc %.4f, %.1fs\n",
                    t->step, tl, ta, util_now() - t0);
    }
    if ((t->dist || t->backend_dist) && t->rank == 0 && !c->quiet && t->step > 0)
        fprintf(stderr, "jizhi-train: rank 0 sent %.3f MB of gradients in %ld steps\n",
                (double)t->comm->bytes_out / 1e6, t->step);
    char line[1024];
    if (t->dist && t->rank == 0 && c->fusion_compare[0] &&
        trn_dist_compare_report(t->dist, line, sizeof line) == 0)
        fprintf(stderr, "jizhi-train: %s\n", line);
    if (c->save[0] && trn_trainer_save(t, c->save, err) < 0)
        return -1;
    return 0;
}
