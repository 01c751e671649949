/*  control.c - live control of a running trainer through the helper.

    At each step boundary the loop polls for instructions and applies them
    before the next step, acknowledging each: `set` (any param that can
    change while running: lr, batch_size, momentum, ...; others are refused
    with a reason), `stop`, `pause`/`resume`, `checkpoint` (save into the
    helper's directory, then jz_checkpoint_done) and `load` (another trial's
    checkpoint, then the trial's updated params on top: PBT exploit).

    A live `batch_size` change also rescales the learning rate when
    --lr-scaling is linear or sqrt: the effective peak rate is
    lr * rule(base_batch, batch_size), recomputed every step.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trainer/train_impl.h"

int trn_trainer_set_param(trn_trainer *t, const char *name, const char *value, char *err)
{
    trn_config c = t->cfg;
    int rc = trn_config_set_live(&c, name, value, err);
    if (rc == -2) {
        snprintf(err, TRN_ERRLEN, "unknown parameter \"%s\"", name);
        return -1;
    }
    if (rc < 0)
        return -1;
    int fp16 = trn__auto_fp16(t);
    t->cfg = c;
    trn__apply_config(t);
    /* --loss-scale auto follows a live precision: dynamic from fp16 on
       (fresh, at --init-loss-scale), none when fp16 leaves */
    if (!strcmp(c.loss_scale, "auto") && trn__auto_fp16(t) != fp16) {
        long skipped = t->scaler.skipped; /* the run's count, checkpointed */
        trn__setup_scalers(t);
        t->scaler.skipped = skipped;
    }
    if (t->backend && t->backend_attached) { /* re-attach with the new settings */
        t->backend->sync_to_host(t->backend->self, t->net);
        t->backend->detach(t->backend->self);
        t->backend_attached = 0;
    }
    if (!strcmp(name, "threads"))
        trn_cpu_set_threads(c.threads);
    return 0;
}

static int s_value_text(const jz_instruction *ins, char *buf, size_t len)
{
    if (ins->str[0] || isnan(ins->value))
        snprintf(buf, len, "%s", ins->str);
    else
        snprintf(buf, len, "%.17g", ins->value);
    return 0;
}

static void s_ack(trn_trainer *t, const jz_instruction *ins, int ok, const char *detail)
{
    if (t->io.ack)
        t->io.ack(t->io.ud, ins, ok, detail);
}

/* After LOAD (and --resume): the helper's params (updated with the new ones)
   win over the checkpoint's, for the params that may change live. One
   broadcast per param from a buffer on the stack: nothing to allocate, so
   no rank can fail before the others' broadcast (before: a calloc refused
   on one rank returned while the others waited). */
void trn_trainer_reapply_params(trn_trainer *t, char *detail, size_t len)
{
    detail[0] = 0;
    int multi = t->nranks > 1;
    if (!multi && !t->io.param)
        return;
    enum { VLEN = 512, NLEN = 64 };
    char name[NLEN];
    for (size_t i = 0; trn_config_live_param(i, name, sizeof name); i++) {
        /* rank 0 reads the helper's value; the others get it broadcast */
        char val[VLEN] = {0};
        if (t->rank == 0 && t->io.param &&
            t->io.param(t->io.ud, name, val + 1, VLEN - 1) == 1)
            val[0] = 1; /* found */
        if (multi && trn_comm_bcast(t->comm, val, VLEN, 0) < 0) {
            /* not collective (a device buffer refused here alone): the
               others may wait in the broadcast, and this rank's params
               would differ from theirs; leave without MPI_Finalize so the
               launcher ends every rank */
            fprintf(stderr,
                    "jizhi-train: rank %d: broadcasting the trial's params after a "
                    "load failed\n",
                    t->rank);
            if (t->rank == 0 && t->io.flush) /* the helper's queued reports */
                t->io.flush(t->io.ud);
            fflush(NULL);
            _exit(1);
        }
        char err[TRN_ERRLEN];
        if (val[0] && trn_trainer_set_param(t, name, val + 1, err) < 0 && !detail[0])
            snprintf(detail, len, "param ignored: %.400s", err);
    }
}

/* Applies one instruction on this rank. Returns 1 applied, 0 refused
   (reason in detail). Only rank 0 writes a checkpoint (the ranks hold the
   same state); a barrier after it lets every rank read the file. */
static int s_apply(trn_trainer *t, const jz_instruction *ins, char *detail, size_t dlen)
{
    char err[TRN_ERRLEN], val[1100];
    detail[0] = 0;
    if (ins->kind != JZ_INS_NONE)
        t->ctl_acts++;
    switch (ins->kind) {
    case JZ_INS_NONE:
        return 1;
    case JZ_INS_SET:
        s_value_text(ins, val, sizeof val);
        if (trn_trainer_set_param(t, ins->name, val, err) < 0) {
            snprintf(detail, dlen, "%s", err);
            return 0;
        }
        return 1;
    case JZ_INS_STOP:
        t->stop = 1;
        return 1;
    case JZ_INS_PAUSE:
        t->paused = 1;
        return 1;
    case JZ_INS_RESUME:
        t->paused = 0;
        return 1;
    case JZ_INS_CHECKPOINT: {
        const char *dir = t->cfg.checkpoint_dir[0] ? t->cfg.checkpoint_dir
                          : t->io.checkpoint_dir   ? t->io.checkpoint_dir(t->io.ud)
                                                   : ".";
        snprintf(t->ckpt_path, sizeof t->ckpt_path, "%s/ckpt-%ld.jzck", dir ? dir : ".",
                 t->step);
        int rc = trn_trainer_save(t, t->ckpt_path, err);
        if (t->nranks > 1 && trn_comm_barrier(t->comm) < 0) {
            /* not collective: the ranks no longer pair their collectives;
               leave without MPI_Finalize so the launcher ends every rank */
            fprintf(stderr,
                    "jizhi-train: rank %d: the barrier after a checkpoint failed\n",
                    t->rank);
            if (t->rank == 0 && t->io.flush) /* the helper's queued reports */
                t->io.flush(t->io.ud);
            fflush(NULL);
            _exit(1);
        }
        if (rc < 0) {
            snprintf(detail, dlen, "%s", err);
            return 0;
        }
        return 1;
    }
    case JZ_INS_LOAD: {
        if (trn_trainer_load(t, ins->str, err) < 0) {
            snprintf(detail, dlen, "%s", err);
            return 0;
        }
        trn_trainer_reapply_params(t, detail, dlen);
        return 1;
    }
    }
    snprintf(detail, dlen, "unknown instruction");
    return 0;
}

static const char *s_kind_name(jz_ins_kind k)
{
    static const char *const names[] = {"none",   "set",        "stop", "pause",
                                        "resume", "checkpoint", "load"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "unknown";
}

/* Acknowledges (rank 0) after every rank applied; then tells the helper of
   a checkpoint written. */
static void s_finish(trn_trainer *t, const jz_instruction *ins, int ok,
                     const char *detail)
{
    s_ack(t, ins, ok, detail[0] ? detail : NULL);
    if (ok && ins->kind == JZ_INS_CHECKPOINT && t->io.checkpoint_done)
        t->io.checkpoint_done(t->io.ud, t->step, t->ckpt_path);
}

/* Several ranks: rank 0 polls and broadcasts each round's instructions
   (count, then the records); every rank applies them in order at this
   step boundary; the acknowledgements follow a sum of the ranks' refusals,
   so an instruction is acknowledged only once all ranks applied it. */
/* One instruction per round: the helper keeps one instruction open until it
   is acknowledged (jz_poll before jz_ack abandons it). */
#define S_MAX_ROUND 1
static int s_control_ranks(trn_trainer *t)
{
    jz_instruction *ins = calloc(S_MAX_ROUND, sizeof *ins);
    if (!ins)
        return -1;
    int rc = 0;
    for (;;) {
        int n = 0;
        if (t->rank == 0 && t->io.poll)
            while (n < S_MAX_ROUND) {
                memset(&ins[n], 0, sizeof ins[n]);
                int p = t->io.poll(t->io.ud, &ins[n]);
                if (p < 0) {
                    n = -1;
                    break;
                }
                if (p != 1)
                    break;
                if (ins[n++].kind == JZ_INS_STOP)
                    break;
            }
        if (trn_comm_bcast(t->comm, &n, sizeof n, 0) < 0 || n < 0) {
            rc = -1;
            break;
        }
        if (n > 0 && trn_comm_bcast(t->comm, ins, (size_t)n * sizeof *ins, 0) < 0) {
            rc = -1;
            break;
        }
        for (int i = 0; i < n; i++) {
            char detail[TRN_ERRLEN];
            int ok = s_apply(t, &ins[i], detail, sizeof detail);
            double refused = ok ? 0 : 1;
            if (trn_comm_sum_d(t->comm, &refused, 1) < 0) {
                rc = -1;
                break;
            }
            if (ok && refused > 0)
                snprintf(detail, sizeof detail, "refused on %g other rank(s)", refused);
            /* one line per rank: where each instruction took effect */
            fprintf(stderr,
                    "jizhi-train: rank %d: instruction %ld (%s%s%s) %s at step %ld\n",
                    t->rank, ins[i].id, s_kind_name(ins[i].kind),
                    ins[i].kind == JZ_INS_SET ? " " : "",
                    ins[i].kind == JZ_INS_SET ? ins[i].name : "",
                    ok ? "applied" : "refused", t->step);
            if (t->rank == 0)
                s_finish(t, &ins[i], ok && refused == 0, detail);
        }
        if (rc < 0 || t->stop) {
            rc = rc < 0 ? -1 : 1;
            break;
        }
        if (n > 0)
            continue; /* drain what arrived meanwhile */
        if (!t->paused)
            break;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    free(ins);
    return rc;
}

int trn_trainer_control(trn_trainer *t)
{
    if (t->nranks > 1)
        return s_control_ranks(t);
    if (!t->io.poll)
        return t->stop;
    for (;;) {
        jz_instruction ins;
        memset(&ins, 0, sizeof ins);
        int rc = t->io.poll(t->io.ud, &ins);
        if (rc < 0)
            return -1;
        if (rc == 1) {
            char detail[TRN_ERRLEN];
            int ok = s_apply(t, &ins, detail, sizeof detail);
            s_finish(t, &ins, ok, detail);
            if (t->stop)
                return 1;
            continue;
        }
        if (!t->paused)
            return 0;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}
