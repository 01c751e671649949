/*  ingest_trial.c - a simulated trial for the ingest benchmark: reports
    --points metric points through libjizhi as fast as it can, waits until
    the controller has acknowledged all of them as persisted (jz_flush),
    and appends "start end points" (wall clock seconds) to $BENCH_LOG.
*/
#include "jizhi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double s_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long points = argc > 2 && !strcmp(argv[1], "--points") ? atol(argv[2]) : 100000;
    jz_trial *t = jz_open();
    if (!t)
        return 1;
    double start = s_wall();
    for (long i = 0; i < points; i++) {
        /* four metrics per step, like a trainer reporting loss, lr, ... */
        static const char *const names[] = {"train_loss", "lr", "samples_per_s", "score"};
        if (jz_report(t, i / 4, names[i % 4], 1.0 / (double)(i + 1)) != 0) {
            fprintf(stderr, "report refused at point %ld\n", i);
            jz_close(&t);
            return 1;
        }
    }
    int rc = jz_flush(t, 600000);
    double end = s_wall();
    jz_close(&t);
    if (rc != 0) {
        fprintf(stderr, "flush timed out\n");
        return 1;
    }
    const char *log = getenv("BENCH_LOG");
    FILE *f = log ? fopen(log, "a") : NULL;
    if (f) {
        fprintf(f, "%.6f %.6f %ld\n", start, end, points);
        fclose(f);
    }
    return 0;
}
