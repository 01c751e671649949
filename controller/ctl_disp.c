/*  ctl_disp.c - the dispatchers the controller knows (see ctl_internal.h):
    their slots and GPUs, which trial holds what, and their silence.
    A dispatcher is created by its first `register`; a silent one is
    marked dead until it registers or speaks again, and forgotten (in
    memory) after twice the lost timeout without trials. Its name stays
    bound to the identity that registered it (in the store) until an admin
    releases it.
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The index in c->by_name where `name` is or would be inserted; *found
   says which. */
static size_t s_name_slot(const ctl_t *c, const char *name, int *found)
{
    size_t lo = 0, hi = c->ndisps;
    *found = 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = strcmp(c->by_name[mid]->name, name);
        if (cmp == 0) {
            *found = 1;
            return mid;
        }
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

ctl_disp *ctl__disp_by_name(ctl_t *c, const char *name)
{
    int found;
    size_t k = s_name_slot(c, name, &found);
    return found ? c->by_name[k] : NULL;
}

ctl_disp *ctl__disp_get(ctl_t *c, const char *name)
{
    int found;
    size_t k = s_name_slot(c, name, &found);
    if (found)
        return c->by_name[k];
    ctl_disp *d = util_xcalloc(1, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    c->disps = util_xrealloc(c->disps, (c->ndisps + 1) * sizeof *c->disps);
    c->by_name = util_xrealloc(c->by_name, (c->ndisps + 1) * sizeof *c->by_name);
    memmove(&c->by_name[k + 1], &c->by_name[k], (c->ndisps - k) * sizeof *c->by_name);
    c->by_name[k] = d;
    c->disps[c->ndisps++] = d;
    return d;
}

/* Frees c->disps[i] and drops it from both arrays (the registration
   order of the others is kept up to the swap of the last into i, as
   before the index). */
static void s_disp_forget(ctl_t *c, size_t i)
{
    ctl_disp *d = c->disps[i];
    int found;
    size_t k = s_name_slot(c, d->name, &found);
    assert(found && c->by_name[k] == d);
    memmove(&c->by_name[k], &c->by_name[k + 1], (c->ndisps - k - 1) * sizeof *c->by_name);
    c->disps[i] = c->disps[--c->ndisps];
    free(d);
}

ctl_disp *ctl__disp_pick(ctl_t *c, long gpus, long ranks)
{
    ctl_disp *best = NULL;
    gpus *= ranks; /* a slot and `gpus` per rank */
    for (size_t i = 0; i < c->ndisps; i++) {
        ctl_disp *d = c->disps[i];
        if (!d->alive || d->slots - d->used < ranks)
            continue;
        long free_gpus = 0;
        for (long g = 0; g < d->ngpus; g++)
            free_gpus += d->gpu_used[g] == 0;
        if (free_gpus < gpus)
            continue;
        if (!best || d->slots - d->used > best->slots - best->used)
            best = d;
    }
    return best;
}

void ctl__disp_take(ctl_disp *d, ctl_trial *t, long gpus, long ranks)
{
    t->disp = d;
    d->used += ranks;
    t->gpus = 0;
    for (long g = 0; g < d->ngpus && t->gpus < gpus * ranks; g++)
        if (!d->gpu_used[g]) {
            d->gpu_used[g] = (int)t->row.id;
            t->gpus++;
        }
}

void ctl__disp_release(ctl_trial *t)
{
    ctl_disp *d = t->disp;
    if (!d)
        return;
    long ranks = t->study && t->study->spec ? t->study->spec->ranks : 1;
    d->used = d->used > ranks ? d->used - ranks : 0;
    for (long g = 0; g < d->ngpus && t->gpus > 0; g++)
        if (d->gpu_used[g] == (int)t->row.id) {
            d->gpu_used[g] = 0;
            t->gpus--;
        }
    t->disp = NULL;
}

/* 1 when some loaded trial is bound to d. */
static int s_disp_in_use(const ctl_t *c, const ctl_disp *d)
{
    for (size_t s = 0; s < c->nstudies; s++)
        for (size_t k = 0; k < c->studies[s]->ntrials; k++)
            if (c->studies[s]->trials[k]->disp == d)
                return 1;
    return 0;
}

void ctl__disp_check_silence(ctl_t *c, double now)
{
    for (size_t i = 0; i < c->ndisps;) {
        ctl_disp *d = c->disps[i];
        if (d->alive && now - d->last_seen > c->lost_timeout) {
            d->alive = 0;
            log_warn("ctl", "dispatcher %s is silent; its trials will be marked lost",
                     d->name);
        }
        /* a dispatcher silent for long with no trial is forgotten, so that
           names registered and never heard again do not pile up in memory;
           its name stays bound to its identity in the store until an admin
           releases it (ctl__disp_release_name) */
        if (!d->alive && now - d->last_seen > 2 * c->lost_timeout &&
            !s_disp_in_use(c, d)) {
            log_info("ctl", "forgot dispatcher %s (silent, no trials)", d->name);
            s_disp_forget(c, i);
            continue;
        }
        i++;
    }
}

int ctl__disp_release_name(ctl_t *c, const char *name)
{
    for (size_t i = 0; i < c->ndisps; i++) {
        ctl_disp *d = c->disps[i];
        if (strcmp(d->name, name) != 0)
            continue;
        if (d->alive || s_disp_in_use(c, d))
            return -1;
        s_disp_forget(c, i);
        break;
    }
    if (ctl__txn(c) != 0 || store_dispatcher_delete(c->store, name) != 0)
        return -1;
    return 0;
}

void ctl__disp_kill(ctl_t *c, ctl_trial *t, const char *reason)
{
    if (!t->disp)
        return;
    ctl__send(c, &t->disp->peer,
              json_pack("{s:s, s:I, s:I, s:s}", "type", "kill", "trial",
                        (json_int_t)t->row.id, "attempt", (json_int_t)t->row.attempt,
                        "reason", reason));
    t->kill_sent = 1;
}

void ctl__disp_free_all(ctl_t *c)
{
    for (size_t i = 0; i < c->ndisps; i++)
        free(c->disps[i]);
    free(c->disps);
    free(c->by_name);
    c->disps = c->by_name = NULL;
    c->ndisps = 0;
}
