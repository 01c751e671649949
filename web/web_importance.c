/*  web_importance.c - GET /api/studies/NAME/importance: the study's
    parameter importance, the same answer as `jizhi study importance NAME
    --json` (schedulers/importance.h: Sobol indices of a GP fitted to the
    completed trials, or, over the model's caps, the rank correlation with
    a "note" saying why). 409 while fewer than 2 trials have completed.

    A read anyone may make, so its cost is bounded: the fit's own caps
    (parameters, dimensions, trials), an answer kept per study (the last
    WEB_IMP_CACHE studies) and given again while the study's completed
    trials are the same (count and last id), and at most WEB_MAX_HEAVY
    fits at once (the next wait briefly, then get 503 with Retry-After).
    Only completed trials with a value are read, not the whole detail. It
    runs in the connection's thread: with `jizhi controller --http`, never
    on the controller's loop. */
#include "web_internal.h"

#include "../schedulers/importance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    long done, last; /* completed trials with a value, the largest id */
    json_t *trials;  /* NULL: count only; else [{"state", "value", "params"}] */
    int bad;         /* a params text that does not parse */
} s_pass;

static int s_row(void *arg, const store_trial_brief *t, const char *params_json)
{
    s_pass *k = arg;
    if (t->state != TRIAL_COMPLETED || !isfinite(t->value))
        return 0;
    k->done++;
    k->last = t->id > k->last ? t->id : k->last;
    if (!k->trials)
        return 0;
    json_t *params = json_loads(params_json, 0, NULL);
    if (!params) {
        k->bad = 1;
        return 0;
    }
    json_array_append_new(k->trials, json_pack("{s:s, s:f, s:o}", "state", "completed",
                                               "value", t->value, "params", params));
    return 0;
}

/* The kept answer for this study and key, or NULL. New reference. */
static json_t *s_cached(web_t *w, long study, const s_pass *key)
{
    json_t *ans = NULL;
    pthread_mutex_lock(&w->imp_mu);
    for (int i = 0; i < WEB_IMP_CACHE; i++)
        if (w->imp[i].ans && w->imp[i].study == study && w->imp[i].done == key->done &&
            w->imp[i].last == key->last) {
            w->imp[i].used = ++w->imp_clock;
            ans = json_incref(w->imp[i].ans);
            break;
        }
    pthread_mutex_unlock(&w->imp_mu);
    return ans;
}

/* Keeps ans (borrowed) for the study: in its entry, else the oldest. */
static void s_keep(web_t *w, long study, const s_pass *key, json_t *ans)
{
    pthread_mutex_lock(&w->imp_mu);
    int at = -1, oldest = 0;
    for (int i = 0; i < WEB_IMP_CACHE && at < 0; i++)
        if (w->imp[i].ans && w->imp[i].study == study)
            at = i;
    for (int i = 0; i < WEB_IMP_CACHE && at < 0; i++) {
        if (!w->imp[i].ans)
            at = i;
        else if (w->imp[i].used < w->imp[oldest].used)
            oldest = i;
    }
    if (at < 0)
        at = oldest;
    json_decref(w->imp[at].ans);
    w->imp[at].ans = json_incref(ans);
    w->imp[at].study = study;
    w->imp[at].done = key->done;
    w->imp[at].last = key->last;
    w->imp[at].used = ++w->imp_clock;
    pthread_mutex_unlock(&w->imp_mu);
}

int web__get_importance(web_req *r)
{
    store_study st;
    if (web__study(r, &st) != 1)
        return r->status;
    s_pass key = {0, 0, NULL, 0};
    if (store_trials_each(r->db, st.id, s_row, &key) < 0) {
        store_study_fini(&st);
        return web__error(r, 500, "store", "reading trials: %s", store_errmsg(r->db));
    }
    web_t *w = r->w;
    if ((r->json = s_cached(w, st.id, &key)) != NULL) {
        store_study_fini(&st);
        return 200;
    }
    if (web__heavy_enter(r) != 0) {
        store_study_fini(&st);
        return r->status;
    }
    s_pass full = {0, 0, json_array(), 0};
    json_t *imp = NULL;
    char err[512] = "";
    int rc = store_trials_each(r->db, st.id, s_row, &full);
    if (rc >= 0) {
        json_t *d = json_pack("{s:O, s:O}", "spec", st.spec, "trials", full.trials);
        imp = d ? imp_study(d, err, sizeof err) : NULL;
        json_decref(d);
    }
    web__heavy_leave(r);
    json_decref(full.trials);
    if (imp) /* kept under the key read first: a trial completed meanwhile
                makes the next read fit again, never one stale answer */
        s_keep(w, st.id, &key, imp);
    store_study_fini(&st);
    if (rc < 0)
        return web__error(r, 500, "store", "reading trials: %s", store_errmsg(r->db));
    if (!imp)
        return web__error(r, 409, "no_importance", "%s", err);
    r->json = imp;
    return 200;
}
