/*  web_importance.c - GET /api/studies/NAME/importance: the study's
    parameter importance, the same answer as `jizhi study importance NAME
    --json` (schedulers/importance.h: Sobol indices of a GP fitted to the
    completed trials). 409 while fewer than 2 trials have completed. The
    last answer is given again while the study's completed trials are the
    same (count and last id), and one fit runs at a time, so open pages of
    a large study cost one fit per change, not one per page. */
#include "web_internal.h"

#include "../schedulers/importance.h"

#include <math.h>
#include <string.h>

typedef struct {
    long done, last;
} s_key;

static int s_count(void *arg, const store_trial_brief *t, const char *params_json)
{
    s_key *k = arg;
    if (!strcmp(t->state, "completed") && isfinite(t->value)) {
        k->done++;
        k->last = t->id > k->last ? t->id : k->last;
    }
    return 0;
}

int web__get_importance(web_req *r)
{
    store_study st;
    if (web__study(r, &st) != 1)
        return r->status;
    s_key key = {0, 0};
    if (store_trials_each(r->db, st.id, s_count, &key) < 0) {
        store_study_fini(&st);
        return web__error(r, 500, "store", "reading trials: %s", store_errmsg(r->db));
    }
    web_t *w = r->w;
    pthread_mutex_lock(&w->imp_mu);
    if (w->imp && w->imp_study == st.id && w->imp_done == key.done &&
        w->imp_last == key.last) {
        r->json = json_incref(w->imp);
        pthread_mutex_unlock(&w->imp_mu);
        store_study_fini(&st);
        return 200;
    }
    json_t *d = store_study_detail(r->db, st.name);
    char err[512] = "";
    json_t *imp = d ? imp_study(d, err, sizeof err) : NULL;
    json_decref(d);
    if (imp) {
        json_decref(w->imp);
        w->imp = json_incref(imp);
        w->imp_study = st.id;
        w->imp_done = key.done;
        w->imp_last = key.last;
    }
    pthread_mutex_unlock(&w->imp_mu);
    store_study_fini(&st);
    if (!d)
        return web__error(r, 500, "store", "reading trials: %s", store_errmsg(r->db));
    if (!imp)
        return web__error(r, 409, "no_importance", "%s", err);
    r->json = imp;
    return 200;
}
