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
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainer/train_impl.h"

int trn_trainer_set_param(trn_trainer *t, const char *name, const char *value, char *err)
{
    trn_config c = t->cfg;
    int rc = trn_config_set(&c, name, value, err);
    if (rc == -2) {
        snprintf(err, TRN_ERRLEN, "unknown parameter \"%s\"", name);
        return -1;
    }
    if (rc < 0)
        return -1;
    if (!trn_config_is_live(name)) {
        snprintf(err, TRN_ERRLEN,
                 "%s cannot change while the trial runs (it needs a restart)", name);
        return -1;
    }
    if (c.micro_batch > c.batch_size)
        c.micro_batch = 0;
    if (trn_config_validate(&c, err) < 0)
        return -1;
    t->cfg = c;
    trn__apply_config(t);
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

/* After LOAD: the helper's params (updated with the new ones) win over the
   checkpoint's, for the params that may change live. */
static void s_reapply_params(trn_trainer *t, char *detail, size_t len)
{
    if (!t->io.param)
        return;
    detail[0] = 0;
    char name[64];
    for (size_t i = 0; trn_config_live_param(i, name, sizeof name); i++) {
        char buf[512], err[TRN_ERRLEN];
        if (t->io.param(t->io.ud, name, buf, sizeof buf) != 1)
            continue;
        if (trn_trainer_set_param(t, name, buf, err) < 0 && !detail[0])
            snprintf(detail, len, "param ignored: %.400s", err);
    }
}

static int s_apply(trn_trainer *t, const jz_instruction *ins)
{
    char err[TRN_ERRLEN], val[1100];
    switch (ins->kind) {
    case JZ_INS_NONE:
        return 0;
    case JZ_INS_SET:
        s_value_text(ins, val, sizeof val);
        if (trn_trainer_set_param(t, ins->name, val, err) < 0)
            s_ack(t, ins, 0, err);
        else
            s_ack(t, ins, 1, NULL);
        return 0;
    case JZ_INS_STOP:
        t->stop = 1;
        s_ack(t, ins, 1, NULL);
        return 1;
    case JZ_INS_PAUSE:
        t->paused = 1;
        s_ack(t, ins, 1, NULL);
        return 0;
    case JZ_INS_RESUME:
        t->paused = 0;
        s_ack(t, ins, 1, NULL);
        return 0;
    case JZ_INS_CHECKPOINT: {
        const char *dir = t->cfg.checkpoint_dir[0] ? t->cfg.checkpoint_dir
                          : t->io.checkpoint_dir   ? t->io.checkpoint_dir(t->io.ud)
                                                   : ".";
        char path[1200];
        snprintf(path, sizeof path, "%s/ckpt-%ld.jzck", dir ? dir : ".", t->step);
        if (trn_trainer_save(t, path, err) < 0) {
            s_ack(t, ins, 0, err);
            return 0;
        }
        s_ack(t, ins, 1, NULL);
        if (t->io.checkpoint_done)
            t->io.checkpoint_done(t->io.ud, t->step, path);
        return 0;
    }
    case JZ_INS_LOAD: {
        if (trn_trainer_load(t, ins->str, err) < 0) {
            s_ack(t, ins, 0, err);
            return 0;
        }
        char detail[TRN_ERRLEN];
        detail[0] = 0;
        s_reapply_params(t, detail, sizeof detail);
        s_ack(t, ins, 1, detail[0] ? detail : NULL);
        return 0;
    }
    }
    s_ack(t, ins, 0, "unknown instruction");
    return 0;
}

int trn_trainer_control(trn_trainer *t)
{
    if (!t->io.poll)
        return t->stop;
    for (;;) {
        jz_instruction ins;
        memset(&ins, 0, sizeof ins);
        int rc = t->io.poll(t->io.ud, &ins);
        if (rc < 0)
            return -1;
        if (rc == 1) {
            s_apply(t, &ins);
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
