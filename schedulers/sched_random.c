/*  sched_random.c - random search: each parameter drawn independently
    (log-uniform for log parameters, uniform over choices).

    Suggestion k uses its own rng stream (seed, k), so the state is just
    the number of suggestions made and a restore continues the sequence.
*/
#include "sched.h"

#include <stdlib.h>
#include <string.h>
#include <stdio.h>

typedef struct {
    sched_t base;
    long count; /* suggestions made so far */
} sched_random;

static int s_suggest(sched_t *s, long trial_id, json_t **params)
{
    sched_random *self = (sched_random *)s;
    sched_rng rng;
    sched_rng_seed(&rng, (unsigned long long)s->spec->seed,
                   (unsigned long long)self->count);
    json_t *p = sched_random_params(s->spec, &rng);
    self->count++;
    *params = p;
    return SCHED_OK;
}

static json_t *s_save(sched_t *s)
{
    return json_pack("{s:I}", "count", (json_int_t)((sched_random *)s)->count);
}

static int s_restore(sched_t *s, const json_t *state)
{
    json_int_t count;
    if (json_unpack((json_t *)state, "{s:I}", "count", &count) != 0 || count < 0)
        return -1;
    ((sched_random *)s)->count = (long)count;
    return 0;
}

static void s_destroy(sched_t *s)
{
    free(s);
}

static const sched_ops s_ops = {
    .name = "random",
    .suggest = s_suggest,
    .save = s_save,
    .restore = s_restore,
    .destroy = s_destroy,
};

sched_t *sched_random_new(const spec_t *spec, char *err, size_t errsize)
{
    static const char *const known[] = {"type", "seed", NULL};
    const char *key = sched_opt_unknown(spec->sched_opts, known);
    if (key) {
        snprintf(err, errsize, "scheduler.%s: unknown option for the random scheduler",
                 key);
        return NULL;
    }
    sched_random *self = sched_alloc(sizeof *self, &s_ops, spec, err, errsize);
    if (!self)
        return NULL;
    return &self->base;
}
