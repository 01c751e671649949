/*  sched_guard.c - the divergence guard (docs/design.md, Schedulers), a monitor next to
   any scheduler, configured by the spec's top-level "guard" object.

    It watches one loss metric per trial (option `metric`, default
    "train_loss"). A value that is NaN/inf, or above `jump` (default 3)
    times the loss's exponential moving average (weight `ema`, default 0.2,
    once `warmup` healthy values are in, default 3), counts as divergence:

      - the trial is rolled back with `load` {path: its last checkpoint,
        params: {lr: lr × lr_factor}} (default 0.5), at most
        `max_rollbacks` times (default 3), each with a reason;
      - after that, or when the trial has no checkpoint yet, it gets
        `stop` with a reason starting "diverged".

    The learning rate: monitors do not see a trial's params, so the guard
    takes the trial's lr from its reports of `lr_metric` (default "lr",
    which jizhi-train reports: the effective rate, i.e. after warmup and
    decay) until it has set one itself; then it uses the one it set. With
    no lr known the rollback keeps the trial's lr. The param name sent is
    `lr_param` (default "lr").

    Checkpoints come from on_checkpoint (the trial's own, PBT's requests,
    or the guard's): one taken while the loss is unhealthy is not used.
    With `checkpoint_every` N > 0 the guard asks each trial for a
    checkpoint every N steps of the loss reports, so that a rollback point
    exists; with 0 (the default) a trial that diverges before any
    checkpoint is stopped as diverged.

    After a rollback the reports still in flight from before the load have
    steps beyond the divergence step: they are ignored until a report at or
    before that step shows the trial went back (at most 50 of them, in
    case the load was refused), and the average returns to its value at
    the checkpoint.

    The loss-jump test itself (sched_jump_judge) is shared with a
    person's guarded change (controller/ctl_guard.c).
*/
#include "sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_MAX_STALE 50

typedef struct {
    long id;
    double ema;  /* moving average of healthy losses */
    long n;      /* healthy losses seen */
    double lr;   /* known lr, NaN when none */
    int lr_ours; /* lr is the one the guard set */
    long rollbacks;
    char *ckpt; /* last usable checkpoint (owned) or NULL */
    long ckpt_step;
    double ckpt_ema; /* the average at that checkpoint */
    long ckpt_n;
    int healthy;    /* the last loss was healthy */
    long wait_step; /* after a rollback: the divergence step, else -1 */
    long stale;     /* reports ignored while waiting */
    long next_ckpt; /* checkpoint_every: step of the next request */
    int done;       /* stopped or ended: nothing more to do */
} guard_trial;

typedef struct {
    sched_t base;
    char metric[64];    /* loss metric */
    char lr_metric[64]; /* where the lr is read */
    char lr_param[64];  /* the param a rollback sets */
    double jump;        /* spike threshold, × the average */
    double alpha;       /* EMA weight of a new value */
    long warmup;        /* healthy values before spikes are judged */
    double lr_factor;   /* lr multiplier per rollback */
    long max_rollbacks;
    long checkpoint_every;
    double load_timeout_s; /* restart from the checkpoint after this (0: never) */
    guard_trial *t;
    size_t nt, cap;
} sched_guard;

_Static_assert(offsetof(guard_trial, id) == 0, "sched_rows: id first");

static guard_trial *s_find(sched_guard *g, long id)
{
    return SCHED_ROWS_GET(g->t, g->nt, g->cap, id, 0, NULL);
}

static guard_trial *s_trial(sched_guard *g, long id)
{
    int created;
    guard_trial *t = SCHED_ROWS_GET(g->t, g->nt, g->cap, id, 1, &created);
    if (!created)
        return t;
    t->lr = t->ema = t->ckpt_ema = NAN;
    t->ckpt_step = -1;
    t->healthy = 1;
    t->wait_step = -1;
    t->next_ckpt = g->checkpoint_every;
    return t;
}

static int s_emit(sched_instr *out, int max, long trial, ins_kind kind, json_t *args,
                  const char *reason)
{
    if (max < 1) {
        json_decref(args);
        return 0;
    }
    memset(out, 0, sizeof *out);
    out->trial = trial;
    out->kind = kind;
    out->args = args;
    snprintf(out->reason, sizeof out->reason, "%.*s", (int)sizeof out->reason - 1,
             reason);
    return 1;
}

int sched_jump_judge(const sched_jump_test *test, const char *metric, long step,
                     double value, double *ema, long *n, char *what, size_t size)
{
    if (!isfinite(value))
        snprintf(what, size, "%s is %s at step %ld", metric, isnan(value) ? "nan" : "inf",
                 step);
    else if (*n >= test->warmup && *ema > 0 && value > test->jump * *ema)
        snprintf(what, size, "%s %.4g at step %ld > %g× its average %.4g", metric, value,
                 step, test->jump, *ema);
    else {
        *ema = *n == 0 ? value : *ema + test->alpha * (value - *ema);
        (*n)++;
        return 0;
    }
    return 1;
}

static int s_on_metric(sched_t *s, long trial_id, long step, const char *metric,
                       double value, double now, sched_instr *out, int max)
{
    sched_guard *g = (sched_guard *)s;
    int is_loss = !strcmp(metric, g->metric), is_lr = !strcmp(metric, g->lr_metric);
    if (!is_loss && !is_lr)
        return 0;
    guard_trial *t = s_trial(g, trial_id);
    if (!t || t->done)
        return 0;
    if (is_lr && !t->lr_ours && isfinite(value) && value > 0)
        t->lr = value;
    if (!is_loss)
        return 0;
    if (t->wait_step >= 0) {
        if (step > t->wait_step && ++t->stale <= GUARD_MAX_STALE)
            return 0; /* from before the rollback was applied */
        t->wait_step = -1;
        t->stale = 0;
    }
    char what[256];
    const sched_jump_test test = {g->jump, g->alpha, g->warmup};
    if (!sched_jump_judge(&test, g->metric, step, value, &t->ema, &t->n, what,
                          sizeof what)) {
        t->healthy = 1;
        if (g->checkpoint_every > 0 && step >= t->next_ckpt) {
            t->next_ckpt = step + g->checkpoint_every;
            return s_emit(out, max, trial_id, INS_CHECKPOINT, NULL,
                          "guard: periodic checkpoint");
        }
        return 0;
    }
    t->healthy = 0;
    char reason[512];
    if (t->rollbacks >= g->max_rollbacks || !t->ckpt) {
        if (t->ckpt)
            snprintf(reason, sizeof reason, "diverged: %s after %ld rollbacks", what,
                     t->rollbacks);
        else
            snprintf(reason, sizeof reason, "diverged: %s, no checkpoint to roll back to",
                     what);
        t->done = 1;
        return s_emit(out, max, trial_id, INS_STOP, NULL, reason);
    }
    t->rollbacks++;
    json_t *params = json_object();
    double old = t->lr;
    if (isfinite(t->lr)) {
        t->lr *= g->lr_factor;
        t->lr_ours = 1;
        json_object_set_new(params, g->lr_param, json_real(t->lr));
    }
    json_t *args = json_pack("{s:s, s:o}", "path", t->ckpt, "params", params);
    if (isfinite(old))
        snprintf(reason, sizeof reason,
                 "guard: %s; rollback %ld/%ld to step %ld, %s %.4g -> %.4g", what,
                 t->rollbacks, g->max_rollbacks, t->ckpt_step, g->lr_param, old, t->lr);
    else
        snprintf(reason, sizeof reason,
                 "guard: %s; rollback %ld/%ld to step %ld (lr unknown)", what,
                 t->rollbacks, g->max_rollbacks, t->ckpt_step);
    t->wait_step = step;
    t->stale = 0;
    t->ema = t->ckpt_ema;
    t->n = t->ckpt_n;
    t->healthy = 1;
    if (g->checkpoint_every > 0)
        t->next_ckpt = t->ckpt_step + g->checkpoint_every;
    return s_emit(out, max, trial_id, INS_LOAD, args, reason);
}

static int s_on_checkpoint(sched_t *s, long trial_id, long step, const char *path,
                           double now, sched_instr *out, int max)
{
    sched_guard *g = (sched_guard *)s;
    guard_trial *t = s_trial(g, trial_id);
    if (!t || t->done || !t->healthy || t->wait_step >= 0)
        return 0;
    char *p = strdup(path);
    if (!p)
        return 0;
    free(t->ckpt);
    t->ckpt = p;
    t->ckpt_step = step;
    t->ckpt_ema = t->ema;
    t->ckpt_n = t->n;
    return 0;
}

static void s_on_complete(sched_t *s, long trial_id, const json_t *params,
                          sched_outcome outcome, double value)
{
    guard_trial *t = s_find((sched_guard *)s, trial_id);
    if (t)
        t->done = 1;
}

static json_t *s_real(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

static json_t *s_save(sched_t *s)
{
    sched_guard *g = (sched_guard *)s;
    json_t *a = json_array();
    for (size_t i = 0; i < g->nt; i++) {
        const guard_trial *t = &g->t[i];
        json_array_append_new(
            a,
            json_pack(
                "{s:I, s:o, s:I, s:o, s:b, s:I, s:s?, s:I, s:o, s:I, s:b, s:I, s:I, s:I, "
                "s:b}",
                "id", (json_int_t)t->id, "ema", s_real(t->ema), "n", (json_int_t)t->n,
                "lr", s_real(t->lr), "lr_ours", t->lr_ours, "rollbacks",
                (json_int_t)t->rollbacks, "ckpt", t->ckpt, "ckpt_step",
                (json_int_t)t->ckpt_step, "ckpt_ema", s_real(t->ckpt_ema), "ckpt_n",
                (json_int_t)t->ckpt_n, "healthy", t->healthy, "wait_step",
                (json_int_t)t->wait_step, "stale", (json_int_t)t->stale, "next_ckpt",
                (json_int_t)t->next_ckpt, "done", t->done));
    }
    return json_pack("{s:o}", "trials", a);
}

static double s_num(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static long s_long(const json_t *o, const char *k, long dflt)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (long)json_integer_value(v) : dflt;
}

static void s_clear(sched_guard *g)
{
    for (size_t i = 0; i < g->nt; i++)
        free(g->t[i].ckpt);
    g->nt = 0;
}

static int s_restore(sched_t *s, const json_t *state)
{
    sched_guard *g = (sched_guard *)s;
    json_t *a = json_object_get(state, "trials");
    if (!json_is_array(a))
        return -1;
    s_clear(g);
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        guard_trial *t = s_trial(g, s_long(v, "id", -1));
        if (!t)
            return -1;
        t->ema = s_num(v, "ema");
        t->n = s_long(v, "n", 0);
        t->lr = s_num(v, "lr");
        t->lr_ours = json_is_true(json_object_get(v, "lr_ours"));
        t->rollbacks = s_long(v, "rollbacks", 0);
        const char *ck = json_string_value(json_object_get(v, "ckpt"));
        t->ckpt = ck ? strdup(ck) : NULL;
        t->ckpt_step = s_long(v, "ckpt_step", -1);
        t->ckpt_ema = s_num(v, "ckpt_ema");
        t->ckpt_n = s_long(v, "ckpt_n", 0);
        t->healthy = json_is_true(json_object_get(v, "healthy"));
        t->wait_step = s_long(v, "wait_step", -1);
        t->stale = s_long(v, "stale", 0);
        t->next_ckpt = s_long(v, "next_ckpt", 0);
        t->done = json_is_true(json_object_get(v, "done"));
    }
    return 0;
}

static void s_destroy(sched_t *s)
{
    sched_guard *g = (sched_guard *)s;
    s_clear(g);
    free(g->t);
    free(g);
}

static double s_load_timeout(const sched_t *s)
{
    return ((const sched_guard *)s)->load_timeout_s;
}

static const sched_ops s_ops = {
    .name = "guard",
    .on_metric = s_on_metric,
    .on_complete = s_on_complete,
    .save = s_save,
    .restore = s_restore,
    .destroy = s_destroy,
    .on_checkpoint = s_on_checkpoint,
    .load_timeout = s_load_timeout,
};

static int s_opt_str(const json_t *o, const char *key, const char *dflt, char *out,
                     size_t size, char *err, size_t errsize)
{
    json_t *v = json_object_get(o, key);
    const char *s = v ? json_string_value(v) : dflt;
    if (!s || !*s || strlen(s) >= size) {
        snprintf(err, errsize,
                 "guard.%s: must be a non-empty string under %zu characters", key, size);
        return -1;
    }
    snprintf(out, size, "%s", s);
    return 0;
}

sched_t *sched_guard_new(const spec_t *spec, char *err, size_t errsize)
{
    static const char *const known[] = {
        "metric",           "jump",           "ema",       "warmup",
        "lr_factor",        "lr_param",       "lr_metric", "max_rollbacks",
        "checkpoint_every", "load_timeout_s", NULL};
    const json_t *o = spec->guard;
    const char *key = sched_opt_unknown(o, known);
    if (key) {
        snprintf(err, errsize, "guard.%s: unknown option", key);
        return NULL;
    }
    sched_guard *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errsize, "out of memory");
        return NULL;
    }
    double warmup, maxr, every, timeout;
    if (s_opt_str(o, "metric", "train_loss", g->metric, sizeof g->metric, err, errsize) ||
        s_opt_str(o, "lr_metric", "lr", g->lr_metric, sizeof g->lr_metric, err,
                  errsize) ||
        s_opt_str(o, "lr_param", "lr", g->lr_param, sizeof g->lr_param, err, errsize) ||
        sched_opt_num(o, "guard", "jump", 3.0, 1.0 + 1e-9, 1e6, 0, &g->jump, err,
                      errsize) ||
        sched_opt_num(o, "guard", "ema", 0.2, 1e-6, 1, 0, &g->alpha, err, errsize) ||
        sched_opt_num(o, "guard", "warmup", 3, 1, 1e6, 1, &warmup, err, errsize) ||
        sched_opt_num(o, "guard", "lr_factor", 0.5, 1e-6, 1 - 1e-9, 0, &g->lr_factor, err,
                      errsize) ||
        sched_opt_num(o, "guard", "max_rollbacks", 3, 0, 1000, 1, &maxr, err, errsize) ||
        sched_opt_num(o, "guard", "checkpoint_every", 0, 0, 1e12, 1, &every, err,
                      errsize) ||
        sched_opt_num(o, "guard", "load_timeout_s", SCHED_LOAD_TIMEOUT_DEFAULT_S, 0, 1e9,
                      0, &timeout, err, errsize)) {
        free(g);
        return NULL;
    }
    g->base.ops = &s_ops;
    g->base.spec = spec;
    g->warmup = (long)warmup;
    g->max_rollbacks = (long)maxr;
    g->checkpoint_every = (long)every;
    g->load_timeout_s = timeout;
    return &g->base;
}

int sched_jump_test_of(const spec_t *spec, sched_jump_test *out, char *metric,
                       size_t msize, char *err, size_t errsize)
{
    json_t *empty = json_object();
    const json_t *o = spec->guard ? spec->guard : empty;
    double warmup = 3;
    int rc =
        s_opt_str(o, "metric", "train_loss", metric, msize, err, errsize) ||
                sched_opt_num(o, "guard", "jump", 3.0, 1.0 + 1e-9, 1e6, 0, &out->jump,
                              err, errsize) ||
                sched_opt_num(o, "guard", "ema", 0.2, 1e-6, 1, 0, &out->alpha, err,
                              errsize) ||
                sched_opt_num(o, "guard", "warmup", 3, 1, 1e6, 1, &warmup, err, errsize)
            ? -1
            : 0;
    json_decref(empty);
    out->warmup = (long)warmup;
    return rc;
}
