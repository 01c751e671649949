/*  web_gate.c - at most N expensive reads at once (see web_gate.h). */
#include "web_gate.h"

#include "../common/util.h"

#include <errno.h>
#include <time.h>

void web_gate_init(web_gate *g, int max)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    g->busy = 0;
    g->max = max < 1 ? 1 : max;
}

void web_gate_fini(web_gate *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

int web_gate_enter(web_gate *g, int wait_ms)
{
    struct timespec until = util_deadline(wait_ms);
    pthread_mutex_lock(&g->mu);
    int rc = 0;
    while (g->busy >= g->max && rc != ETIMEDOUT)
        rc = wait_ms > 0 ? pthread_cond_timedwait(&g->cv, &g->mu, &until) : ETIMEDOUT;
    int ok = g->busy < g->max;
    if (ok)
        g->busy++;
    pthread_mutex_unlock(&g->mu);
    return ok ? 0 : -1;
}

void web_gate_leave(web_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->busy--;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}
