/*  intervene_trial.c - a scripted trial for `make bench-intervene`: polls
    its instructions every BENCH_POLL_MS (default 2) milliseconds and
    sleeps in between, like a training loop with short steps. `set lr`
    changes the lr it reports, any other key is refused (acknowledged as
    not applied), pause/resume hold and release it, stop ends it. It
    reports lr and score (= lr) every 500 ms and exits on its own after
    BENCH_MAX_S seconds (default 600) so a broken benchmark leaves nothing.
*/
#include "jizhi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double s_env(const char *name, double dflt)
{
    const char *v = getenv(name);
    return v && *v ? atof(v) : dflt;
}

int main(void)
{
    jz_trial *t = jz_open();
    if (!t)
        return 1;
    double lr = jz_param_double(t, "lr", 0.1);
    double poll_ms = s_env("BENCH_POLL_MS", 2), max_s = s_env("BENCH_MAX_S", 600);
    struct timespec nap = {0, (long)(poll_ms * 1e6)};
    double start = s_now(), next_report = start;
    long step = 0;
    int paused = 0, stop = 0;
    while (!stop && s_now() - start < max_s) {
        jz_instruction ins;
        while (jz_poll(t, &ins) > 0) {
            if (ins.kind == JZ_INS_SET) {
                if (!strcmp(ins.name, "lr"))
                    lr = ins.value;
                else
                    jz_ack(t, &ins, 0, "unknown parameter");
            } else if (ins.kind == JZ_INS_PAUSE) {
                paused = 1;
            } else if (ins.kind == JZ_INS_RESUME) {
                paused = 0;
            } else if (ins.kind == JZ_INS_STOP) {
                stop = 1;
            }
        }
        double now = s_now();
        if (!paused && now >= next_report) {
            jz_report(t, step, "lr", lr);
            jz_report(t, step, "score", lr);
            step++;
            next_report = now + 0.5;
        }
        nanosleep(&nap, NULL);
    }
    jz_report(t, step, "score", lr);
    jz_close(&t);
    return 0;
}
