/*  web_importance.c - GET /api/studies/NAME/importance: the study's
    parameter importance, the same answer as `jizhi study importance NAME
    --json` (schedulers/importance.h: Sobol indices of a GP fitted to the
    completed trials). 409 while fewer than 2 trials have completed. */
#include "web_internal.h"

#include "../schedulers/importance.h"

int web__get_importance(web_req *r)
{
    store_study st;
    if (web__study(r, &st) != 1)
        return r->status;
    json_t *d = store_study_detail(r->db, st.name);
    store_study_fini(&st);
    if (!d)
        return web__error(r, 500, "store", "reading trials: %s", store_errmsg(r->db));
    char err[512];
    json_t *imp = imp_study(d, err, sizeof err);
    json_decref(d);
    if (!imp)
        return web__error(r, 409, "no_importance", "%s", err);
    r->json = imp;
    return 200;
}
