/*  slurm_trial.c - the trial of `make bench-slurm`: reports one metric
    point as soon as it starts, waits until the controller has it
    (jz_flush) and exits. The controller stamps both ends of what the
    benchmark measures: the start decision (trials.started) and the
    arrival of this first report (metrics.time).
*/
#include "jizhi.h"

#include <stdio.h>

int main(void)
{
    jz_trial *t = jz_open();
    if (!t)
        return 1;
    int rc = jz_report(t, 0, "score", 1.0) == 0 && jz_flush(t, 60000) == 0 ? 0 : 1;
    if (rc)
        fprintf(stderr, "slurm_trial: the report was not acknowledged\n");
    jz_close(&t);
    return rc;
}
