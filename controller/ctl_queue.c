/*  ctl_queue.c - the queue: which waiting trial gets a free slot, per-user
    quotas, and preemption (docs/spec.md, Queue, priority and preemption).

    Each tick, after the studies handled their trials, ctl__queue_fill
    hands out the free slots one trial at a time: among the running
    studies that want to start a trial, the one of highest priority; at
    equal priority the one whose owner holds the fewest running slots
    (fair share), then the older study. A study whose owner's quota
    (slots, GPUs) would be exceeded waits; so does every study of a lower
    priority than one that waits for capacity (no backfill past it), unless
    no alive dispatcher could ever host it (then it holds back nothing). Each
    waiting study keeps why in its queue_why, which `jizhi queue` shows.

    Preemption: a study that waits for capacity may take it from studies
    of lower priority. One trial is preempted at a time (the next only
    after the previous one freed its slot): the lowest priority, then the
    latest started. Its study's `preemptible` says how: "checkpoint" (only
    trials that saved a checkpoint, through pause --release: checkpoint,
    stop, SUSPENDED with row.preempted set), "restart" (killed and started
    again later, from its latest checkpoint when it has one), "never".
    A preempted trial is started again before any other trial of its
    study (ctl__study_start_next). Every preemption is an event and
    counted in the trial's row (preemptions).

    Usage counts every live process: each active trial (STARTING, RUNNING,
    PAUSED) of every loaded study, whatever the study's state; a stopped
    study's trials hold their slots until they exit or are killed after
    the stop's grace (ctl_study.c's tick).

    Quotas are persisted (quotas table) and mirrored here; the owner of a
    study is ctl_study_owner(). A quota also says the highest priority
    the user may submit (max_priority, normal unless an admin granted
    high): ctl__queue_check_priority refuses a submit above it.
*/
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char user[64];
    long slots, gpus; /* -1: no limit */
    int max_prio;     /* spec_priority: the highest the user may submit */
} s_quota;

typedef struct {
    const char *user; /* borrowed from a study's spec */
    long slots, gpus; /* held by active trials */
} s_usage;

struct ctl_queue {
    s_quota *quotas;
    size_t nquotas;
};

const char *ctl_study_owner(const ctl_study *s)
{
    return s->spec->owner ? s->spec->owner : "-";
}

/* ---- quotas ---- */

/* q may be NULL (a ctl built without ctl_new, as unit tests do): no quotas. */
static s_quota *s_quota_of(ctl_queue *q, const char *user)
{
    for (size_t i = 0; q && i < q->nquotas; i++)
        if (!strcmp(q->quotas[i].user, user))
            return &q->quotas[i];
    return NULL;
}

static void s_quota_put(ctl_queue *q, const char *user, long slots, long gpus,
                        int max_prio)
{
    s_quota *e = s_quota_of(q, user);
    if (!e) {
        q->quotas = util_xrealloc(q->quotas, (q->nquotas + 1) * sizeof *q->quotas);
        e = &q->quotas[q->nquotas++];
        snprintf(e->user, sizeof e->user, "%s", user);
    }
    e->slots = slots;
    e->gpus = gpus;
    e->max_prio = max_prio;
}

int ctl__queue_init(ctl_t *c, char *err, size_t errsize)
{
    c->queue = util_xcalloc(1, sizeof *c->queue);
    json_t *list = store_quota_list(c->store);
    if (!list) {
        snprintf(err, errsize, "cannot read the quotas: %s", store_errmsg(c->store));
        return -1;
    }
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *user = json_string_value(json_object_get(e, "user"));
        int prio =
            spec_priority_parse(json_string_value(json_object_get(e, "max_priority")));
        if (!user)
            continue;
        s_quota_put(c->queue, user, (long)json_integer_value(json_object_get(e, "slots")),
                    (long)json_integer_value(json_object_get(e, "gpus")),
                    prio < 0 ? SPEC_PRIO_NORMAL : prio);
    }
    json_decref(list);
    return 0;
}

void ctl__queue_free(ctl_t *c)
{
    if (!c->queue)
        return;
    free(c->queue->quotas);
    free(c->queue);
    c->queue = NULL;
}

json_t *ctl__queue_quota_msg(ctl_t *c, const json_t *msg, const char **code, char *err,
                             size_t size)
{
    *code = "malformed";
    const char *user = json_string_value(json_object_get(msg, "user"));
    if (!user || !ident_valid_user(user)) {
        snprintf(err, size,
                 "field 'user': expected a user name ([A-Za-z0-9_.@-], 1-63 "
                 "chars)");
        return NULL;
    }
    const s_quota *old = s_quota_of(c->queue, user);
    long v[2] = {old ? old->slots : -1, old ? old->gpus : -1};
    int prio = old ? old->max_prio : SPEC_PRIO_NORMAL;
    static const char *const keys[2] = {"slots", "gpus"};
    int given = 0;
    for (int k = 0; k < 2; k++) {
        json_t *x = json_object_get(msg, keys[k]);
        if (!x)
            continue;
        if (!json_is_integer(x) || json_integer_value(x) < -1 ||
            json_integer_value(x) > 1000000) {
            snprintf(err, size,
                     "field '%s': expected an integer from 0 to 1000000, or -1 for no "
                     "limit",
                     keys[k]);
            return NULL;
        }
        v[k] = (long)json_integer_value(x);
        given = 1;
    }
    json_t *mp = json_object_get(msg, "max_priority");
    if (mp) {
        int p = json_is_string(mp) ? spec_priority_parse(json_string_value(mp)) : -1;
        if (p != SPEC_PRIO_NORMAL && p != SPEC_PRIO_HIGH) {
            snprintf(err, size, "field 'max_priority': expected \"normal\" or \"high\"");
            return NULL;
        }
        prio = p;
        given = 1;
    }
    if (!given) {
        snprintf(err, size, "give 'slots', 'gpus', 'max_priority' or several");
        return NULL;
    }
    const char *pname = spec_priority_name(prio);
    if (ctl__txn(c) != 0 ||
        store_quota_set(c->store, user, v[0], v[1], pname, util_wall()) != 0) {
        *code = "internal";
        snprintf(err, size, "cannot store the quota: %s", store_errmsg(c->store));
        return NULL;
    }
    s_quota_put(c->queue, user, v[0], v[1], prio);
    json_t *q = json_pack("{s:s, s:I, s:I, s:s}", "user", user, "slots", (json_int_t)v[0],
                          "gpus", (json_int_t)v[1], "max_priority", pname);
    store_event_add(c->store, util_wall(), -1, -1, "cli", "quota_set", q, 1);
    log_info("ctl", "quota of %s: %ld slots, %ld GPUs (-1: no limit), priority up to %s",
             user, v[0], v[1], pname);
    return q;
}

int ctl__queue_check_priority(const ctl_t *c, const ctl_ident *who, const json_t *spec,
                              char *err, size_t size)
{
    if (who->trusted || who->id.role == IDENT_ADMIN)
        return 0; /* an admin's submit grants what it asks */
    const char *asked = json_string_value(json_object_get(spec, "priority"));
    int prio = asked ? spec_priority_parse(asked) : SPEC_PRIO_NORMAL;
    if (prio <= SPEC_PRIO_NORMAL)
        return 0; /* unknown names are the spec check's to refuse */
    const s_quota *q = s_quota_of(c->queue, who->id.user);
    int max = q ? q->max_prio : SPEC_PRIO_NORMAL;
    if (prio <= max)
        return 0;
    snprintf(
        err, size,
        "priority: %s (role %s) may submit at most priority %s, not %s: priority "
        "above normal preempts everyone else's trials, so an admin grants it (`jizhi "
        "quota set %s max_priority=high`) or submits the study",
        who->id.user, ident_role_str(who->id.role), spec_priority_name(max),
        spec_priority_name(prio), who->id.user);
    return -1;
}

/* ---- usage ---- */

static long s_trial_slots(const ctl_study *s)
{
    return s->spec->ranks;
}

static long s_trial_gpus(const ctl_study *s)
{
    return s->spec->gpus * s->spec->ranks;
}

static s_usage *s_usage_of(s_usage *u, size_t *n, const char *user)
{
    for (size_t i = 0; i < *n; i++)
        if (!strcmp(u[i].user, user))
            return &u[i];
    u[*n] = (s_usage){user, 0, 0};
    return &u[(*n)++];
}

/* ---- preemption ---- */

/* A preempted trial that does not answer the checkpoint instruction
   within its study's load timeout is killed and restarted later from its
   latest checkpoint (the one that made it preemptible): what it computed
   since is lost, what it reported is not. */
static void s_preempt_fallback(ctl_t *c, ctl_trial *t, double now)
{
    double limit = ctl__study_load_timeout(t->study);
    if (t->plan != PLAN_RELEASE_CHECKPOINT || t->plan_since <= 0 || limit <= 0 ||
        now - t->plan_since <= limit || ctl__txn(c) != 0 ||
        ctl_trial_plan_to(t, PLAN_NONE) != 0)
        return;
    char why[200];
    snprintf(why, sizeof why,
             "preempted: no checkpoint within %.0f s of asking; restarting from step %ld",
             limit, t->row.checkpoint_step);
    json_t *d = json_pack("{s:s, s:I}", "reason", why, "step",
                          (json_int_t)t->row.checkpoint_step);
    store_event_add(c->store, util_wall(), t->study->row.id, t->row.id, "queue",
                    "preemption_fallback", d, 1);
    json_decref(d);
    log_warn("ctl", "study %s trial %ld: %s", t->study->row.name, t->row.id, why);
    ctl__trial_restart_from(c, t, t->row.checkpoint, why);
}

/* 1 while a preemption started by the queue is still freeing its slot;
   applies the fallback to those that take too long. */
static int s_preempting(ctl_t *c, double now)
{
    int busy = 0;
    for (size_t i = 0; i < c->nstudies; i++) {
        ctl_study *s = c->studies[i];
        for (size_t k = 0; k < s->ntrials; k++) {
            ctl_trial *t = s->trials[k];
            if (!t->row.preempted || !ctl_trial_active(t) || t->plan == PLAN_NONE)
                continue;
            s_preempt_fallback(c, t, now);
            busy = 1;
        }
    }
    return busy;
}

/* 1 when t may be preempted now. */
static int s_preemptible(const ctl_trial *t)
{
    const spec_t *sp = t->study->spec;
    if (t->row.state != TRIAL_RUNNING || t->plan != PLAN_NONE || !t->disp ||
        sp->preemptible == SPEC_PREEMPT_NEVER)
        return 0;
    return t->row.checkpoint[0] || sp->preemptible == SPEC_PREEMPT_RESTART;
}

/* Preempts one trial of a study of lower priority than `for_s` that frees
   what one of for_s's trials needs. 1 when one was preempted. */
static int s_preempt_for(ctl_t *c, ctl_study *for_s)
{
    ctl_trial *victim = NULL;
    for (size_t i = 0; i < c->nstudies; i++) {
        ctl_study *s = c->studies[i];
        if (s->row.state != STUDY_RUNNING || s->spec->priority >= for_s->spec->priority)
            continue;
        for (size_t k = 0; k < s->ntrials; k++) {
            ctl_trial *t = s->trials[k];
            /* it must free enough: its ranks' slots and GPUs per rank */
            if (!s_preemptible(t) || s->spec->ranks < for_s->spec->ranks ||
                s->spec->gpus < for_s->spec->gpus)
                continue;
            if (!victim || s->spec->priority < victim->study->spec->priority ||
                (s->spec->priority == victim->study->spec->priority &&
                 t->row.started > victim->row.started))
                victim = t;
        }
    }
    if (!victim)
        return 0;
    ctl_study *vs = victim->study;
    int restart =
        !victim->row.checkpoint[0] || vs->spec->preemptible == SPEC_PREEMPT_RESTART;
    char why[300];
    snprintf(why, sizeof why, "preempted for study %s (priority %s > %s)",
             for_s->row.name, spec_priority_name(for_s->spec->priority),
             spec_priority_name(vs->spec->priority));
    victim->row.preemptions++;
    victim->row.preempted = 1;
    if (ctl__trial_save(c, victim) != 0)
        return 0;
    json_t *d = json_pack("{s:s, s:s, s:I, s:s, s:I}", "for_study", for_s->row.name,
                          "how", restart ? "restart" : "checkpoint", "step",
                          (json_int_t)victim->row.last_step, "reason", why, "count",
                          (json_int_t)victim->row.preemptions);
    store_event_add(c->store, util_wall(), vs->row.id, victim->row.id, "queue",
                    "preempted", d, 1);
    json_decref(d);
    log_info("ctl", "study %s trial %ld: %s (%s)", vs->row.name, victim->row.id, why,
             restart ? "restart" : "checkpoint and release");
    if (restart)
        ctl__trial_restart_from(c, victim, victim->row.checkpoint, why);
    else {
        ctl__trial_release(c, victim, "queue");
        victim->plan_since = util_now(); /* for the fallback */
    }
    return 1;
}

/* 1 when some alive dispatcher could run one of the spec's trials once
   free, or none is alive (one may come): a study that none of the
   machines there can host does not hold back lower priorities. */
static int s_fits_somewhere(const ctl_t *c, const spec_t *spec)
{
    int alive = 0;
    for (size_t i = 0; i < c->ndisps; i++) {
        const ctl_disp *d = c->disps[i];
        alive += d->alive;
        if (d->alive && d->slots >= spec->ranks && d->ngpus >= spec->gpus * spec->ranks)
            return 1;
    }
    return !alive;
}

int ctl__queue_unfit(const ctl_t *c, const spec_t *spec, char *why, size_t size)
{
    if (s_fits_somewhere(c, spec))
        return 0;
    snprintf(why, size,
             "no dispatcher can run it: a trial needs %ld slots and %ld GPUs on one "
             "machine",
             spec->ranks, spec->gpus * spec->ranks);
    return 1;
}

/* ---- the fill ---- */

typedef struct {
    ctl_study *s;
    long active;
    int out; /* no more starts this tick */
} s_cand;

void ctl__queue_fill(ctl_t *c, double now)
{
    size_t n = c->nstudies;
    if (n == 0)
        return;
    s_cand *cand = util_xcalloc(n, sizeof *cand);
    s_usage *use = util_xcalloc(n, sizeof *use);
    size_t ncand = 0, nuse = 0;
    for (size_t i = 0; i < n; i++) {
        ctl_study *s = c->studies[i];
        s->queue_why[0] = 0;
        s->queue_unfit = 0;
        /* every live process counts, a stopped study's too (its trials
           hold their slots until they exit or are killed) */
        long active;
        int wants = ctl__study_wants(s, &active);
        s_usage *u = s_usage_of(use, &nuse, ctl_study_owner(s));
        u->slots += active * s_trial_slots(s);
        u->gpus += active * s_trial_gpus(s);
        if (!wants)
            continue;
        if (active >= s->spec->parallel) {
            snprintf(s->queue_why, sizeof s->queue_why,
                     "its own limit: budget.parallel %ld running", s->spec->parallel);
            continue;
        }
        cand[ncand++] = (s_cand){s, active, 0};
    }
    int preempting = s_preempting(c, now);
    int waiting_prio = -1; /* highest priority that waits for capacity */
    const ctl_study *waiting_for = NULL;
    for (;;) {
        s_cand *best = NULL;
        long best_used = 0;
        for (size_t i = 0; i < ncand; i++) {
            s_cand *k = &cand[i];
            if (k->out)
                continue;
            ctl_study *s = k->s;
            if (s->spec->priority < waiting_prio) {
                snprintf(s->queue_why, sizeof s->queue_why,
                         "lower priority: study %s (%s) waits for capacity first",
                         waiting_for->row.name,
                         spec_priority_name(waiting_for->spec->priority));
                k->out = 1;
                continue;
            }
            const char *owner = ctl_study_owner(s);
            s_usage *u = s_usage_of(use, &nuse, owner);
            s_quota *q = s_quota_of(c->queue, owner);
            if (q && q->slots >= 0 && u->slots + s_trial_slots(s) > q->slots) {
                snprintf(s->queue_why, sizeof s->queue_why,
                         "quota: user %s runs %ld of %ld slots", owner, u->slots,
                         q->slots);
                k->out = 1;
                continue;
            }
            if (q && q->gpus >= 0 && s_trial_gpus(s) > 0 &&
                u->gpus + s_trial_gpus(s) > q->gpus) {
                snprintf(s->queue_why, sizeof s->queue_why,
                         "quota: user %s holds %ld of %ld GPUs", owner, u->gpus, q->gpus);
                k->out = 1;
                continue;
            }
            if (!best || s->spec->priority > best->s->spec->priority ||
                (s->spec->priority == best->s->spec->priority &&
                 (u->slots < best_used ||
                  (u->slots == best_used && s->row.id < best->s->row.id)))) {
                best = k;
                best_used = u->slots;
            }
        }
        if (!best)
            break;
        ctl_study *s = best->s;
        ctl_disp *d = ctl__disp_pick(c, s->spec->gpus, s->spec->ranks);
        if (!d && ctl__queue_unfit(c, s->spec, s->queue_why, sizeof s->queue_why)) {
            best->out = 1;
            s->queue_unfit = 1;
            continue;
        }
        if (!d) {
            best->out = 1;
            if (!preempting && s_preempt_for(c, s))
                preempting = 1;
            if (preempting)
                snprintf(s->queue_why, sizeof s->queue_why,
                         "no capacity: preempting a trial of lower priority for it");
            else if (s->spec->gpus > 0)
                snprintf(s->queue_why, sizeof s->queue_why,
                         "no capacity: no dispatcher has a free slot with %ld free GPUs "
                         "per rank",
                         s->spec->gpus);
            else
                snprintf(s->queue_why, sizeof s->queue_why,
                         "no capacity: no dispatcher has a free slot");
            if (s->spec->priority > waiting_prio) {
                waiting_prio = s->spec->priority;
                waiting_for = s;
            }
            continue;
        }
        int rc = ctl__study_start_next(c, s, d);
        if (rc != 1) {
            best->out = 1;
            if (rc == 0)
                snprintf(s->queue_why, sizeof s->queue_why,
                         "its scheduler waits for results before the next trial");
            continue;
        }
        s_usage *u = s_usage_of(use, &nuse, ctl_study_owner(s));
        u->slots += s_trial_slots(s);
        u->gpus += s_trial_gpus(s);
        if (++best->active >= s->spec->parallel || !ctl__study_wants(s, &best->active))
            best->out = 1;
    }
    free(cand);
    free(use);
}

json_t *ctl__queue_status(ctl_t *c)
{
    json_t *waiting = json_array(), *users = json_array();
    size_t n = c->nstudies;
    size_t nq = c->queue ? c->queue->nquotas : 0;
    s_usage *use = util_xcalloc(n + nq + 1, sizeof *use);
    size_t nuse = 0;
    for (size_t i = 0; i < n; i++) {
        ctl_study *s = c->studies[i];
        long active = 0, pending = 0, preempted = 0;
        for (size_t k = 0; k < s->ntrials; k++) {
            const ctl_trial *t = s->trials[k];
            active += ctl_trial_active(t);
            pending += t->row.state == TRIAL_PENDING;
            preempted += t->row.state == TRIAL_SUSPENDED && t->row.preempted;
        }
        s_usage *u = s_usage_of(use, &nuse, ctl_study_owner(s));
        u->slots += active * s_trial_slots(s);
        u->gpus += active * s_trial_gpus(s);
        if (s->row.state != STUDY_RUNNING || !s->queue_why[0])
            continue;
        json_array_append_new(
            waiting, json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:s}", "study",
                               s->row.name, "owner", ctl_study_owner(s), "priority",
                               spec_priority_name(s->spec->priority), "running",
                               (json_int_t)active, "pending", (json_int_t)pending,
                               "preempted", (json_int_t)preempted, "new",
                               (json_int_t)(s->exhausted && s->queued <= 0
                                                ? 0
                                                : s->spec->trials - (long)s->ntrials),
                               "reason", s->queue_why));
        /* no alive dispatcher can ever run one of its trials (`jizhi run`
           gives up on it) */
        json_object_set_new(json_array_get(waiting, json_array_size(waiting) - 1),
                            "unfit", json_boolean(s->queue_unfit));
    }
    for (size_t i = 0; i < nq; i++)
        s_usage_of(use, &nuse, c->queue->quotas[i].user);
    for (size_t i = 0; i < nuse; i++) {
        s_quota *q = s_quota_of(c->queue, use[i].user);
        json_array_append_new(
            users, json_pack("{s:s, s:I, s:I, s:I, s:I}", "user", use[i].user, "slots",
                             (json_int_t)use[i].slots, "gpus", (json_int_t)use[i].gpus,
                             "quota_slots", (json_int_t)(q ? q->slots : -1), "quota_gpus",
                             (json_int_t)(q ? q->gpus : -1)));
    }
    free(use);
    return json_pack("{s:o, s:o}", "waiting", waiting, "users", users);
}
