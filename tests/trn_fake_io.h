/*  trn_fake_io.h - what the trainer's unit tests (test_trn_train.c,
    test_trn_start.c) share: a fake helper (trn_io) that records reports
    and serves queued instructions, the synthetic data sets g_syn and
    g_syn_val (main() fills them) and a small MLP config on them. Static
    (inline) definitions: include it from one test file per program. */
#ifndef TRN_FAKE_IO_H
#define TRN_FAKE_IO_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trainer/trn.h"

static char g_dir[256];

/* ---- a fake helper ---- */
#define MAXREP 4096
typedef struct {
    jz_instruction q[16];
    int nq, qi;
    int acks, acks_ok;
    char last_detail[256];
    int nrep;
    char rep_name[MAXREP][32];
    double rep_val[MAXREP];
    long rep_step[MAXREP];
    int ck_done;
    char ck_path[512];
    int flushes, nrep_at_flush; /* flush calls; reports made before the last */
} fake_io;

static inline int f_report(void *ud, long step, const char *m, double v)
{
    fake_io *f = ud;
    if (f->nrep < MAXREP) {
        snprintf(f->rep_name[f->nrep], 32, "%s", m);
        f->rep_val[f->nrep] = v;
        f->rep_step[f->nrep] = step;
        f->nrep++;
    }
    return 0;
}

static inline int f_poll(void *ud, jz_instruction *out)
{
    fake_io *f = ud;
    if (f->qi >= f->nq) {
        out->kind = JZ_INS_NONE;
        return 0;
    }
    *out = f->q[f->qi++];
    return 1;
}

static inline int f_ack(void *ud, const jz_instruction *ins, int ok, const char *detail)
{
    fake_io *f = ud;
    (void)ins;
    f->acks++;
    f->acks_ok += ok;
    snprintf(f->last_detail, sizeof f->last_detail, "%s", detail ? detail : "");
    return 0;
}

static inline const char *f_ckdir(void *ud)
{
    (void)ud;
    return g_dir;
}

static inline int f_ckdone(void *ud, long step, const char *path)
{
    fake_io *f = ud;
    (void)step;
    f->ck_done++;
    snprintf(f->ck_path, sizeof f->ck_path, "%s", path);
    return 0;
}

static inline int f_flush(void *ud)
{
    fake_io *f = ud;
    f->flushes++;
    f->nrep_at_flush = f->nrep;
    return 0;
}

static inline trn_io s_io(fake_io *f)
{
    trn_io io = {.ud = f,
                 .report = f_report,
                 .poll = f_poll,
                 .ack = f_ack,
                 .checkpoint_dir = f_ckdir,
                 .checkpoint_done = f_ckdone,
                 .flush = f_flush};
    return io;
}

static inline void s_push_set(fake_io *f, const char *name, double v)
{
    jz_instruction *i = &f->q[f->nq++];
    memset(i, 0, sizeof *i);
    i->kind = JZ_INS_SET;
    i->id = f->nq;
    snprintf(i->name, sizeof i->name, "%s", name);
    i->value = v;
}

static inline void s_push(fake_io *f, jz_ins_kind k, const char *str)
{
    jz_instruction *i = &f->q[f->nq++];
    memset(i, 0, sizeof *i);
    i->kind = k;
    i->id = f->nq;
    i->value = NAN;
    if (str)
        snprintf(i->str, sizeof i->str, "%s", str);
}

static inline double s_last(const fake_io *f, const char *name)
{
    for (int i = f->nrep - 1; i >= 0; i--)
        if (!strcmp(f->rep_name[i], name))
            return f->rep_val[i];
    return NAN;
}

/* ---- shared data ---- */
static trn_dataset g_syn, g_syn_val;

static inline void s_cfg(trn_config *c)
{
    trn_config_defaults(c);
    strcpy(c->dataset, "synthetic");
    strcpy(c->hidden, "32");
    c->batch_size = 32;
    c->epochs = 2;
    c->log_every = 5;
    c->quiet = 1;
    c->lr = 0.05;
}

static inline trn_trainer *s_new(const trn_config *c)
{
    char err[TRN_ERRLEN];
    trn_trainer *t = trn_trainer_new(c, &g_syn, &g_syn_val, NULL, err);
    if (!t)
        printf("trainer: %s\n", err);
    return t;
}

#endif
