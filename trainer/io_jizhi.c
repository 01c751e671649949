/*  io_jizhi.c - connects the trainer (trn_io) to libjizhi: metrics go to
    jz_report, instructions come from jz_poll and are answered with jz_ack,
    checkpoints are announced with jz_checkpoint_done, params are read
    with jz_param_* (text first, then number), and the evaluation a fork
    waits on is flushed with jz_flush. */
#include <math.h>
#include <string.h>

#include "trainer/trn.h"

static int s_report(void *ud, long step, const char *metric, double value)
{
    return jz_report(ud, step, metric, value);
}

static int s_poll(void *ud, jz_instruction *out)
{
    return jz_poll(ud, out);
}

static int s_ack(void *ud, const jz_instruction *ins, int applied, const char *detail)
{
    return jz_ack(ud, ins, applied, detail);
}

static const char *s_ckdir(void *ud)
{
    return jz_checkpoint_dir(ud);
}

static int s_ckdone(void *ud, long step, const char *path)
{
    return jz_checkpoint_done(ud, step, path);
}

/* The helper sends its queued points every 50 ms; a fork's decision waits
   on this one. At most 2 s (a controller that does not answer). */
static int s_flush(void *ud)
{
    return jz_flush(ud, 2000);
}

int trn_jz_param(void *ud, const char *name, char *buf, size_t len)
{
    const char *s = jz_param_str(ud, name, NULL);
    if (s) {
        snprintf(buf, len, "%s", s);
        return 1;
    }
    double d = jz_param_double(ud, name, NAN);
    if (!isnan(d)) {
        snprintf(buf, len, "%.17g", d);
        return 1;
    }
    return 0;
}

void trn_io_jizhi(trn_io *io, jz_trial *t)
{
    memset(io, 0, sizeof *io);
    io->ud = t;
    io->report = s_report;
    io->poll = s_poll;
    io->ack = s_ack;
    io->checkpoint_dir = s_ckdir;
    io->checkpoint_done = s_ckdone;
    io->param = trn_jz_param;
    io->flush = s_flush;
}
