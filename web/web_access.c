/*  web_access.c - who reads: reads need no token, but one may be given
    (Authorization: Bearer, as for writes), and what a study shows depends
    on it. `trial.env` is where people put secrets (API keys, passwords
    for a data store), so a spec is shown with the env's names and its
    values replaced by WEB_HIDDEN, except to the study's owner (a `user`
    token of the user in the spec's "owner") and to admins. The
    controller's `read` answers hide them the same way
    (controller/ctl_read.c). */
#include "web_internal.h"

#include <string.h>

int web__reader(web_req *r)
{
    if (!web__mhd.lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization"))
        return 0;
    if (web__authenticate(r) == 0)
        return 1;
    /* a token that does not check out reads as anyone does */
    json_decref(r->json);
    r->json = NULL;
    r->status = 0;
    memset(&r->who, 0, sizeof r->who);
    return 0;
}

int web__may_see_env(web_req *r, const json_t *spec)
{
    if (!web__reader(r))
        return 0;
    if (r->who.role == IDENT_ADMIN)
        return 1;
    const char *owner = json_string_value(json_object_get(spec, "owner"));
    return r->who.role == IDENT_USER && owner && !strcmp(owner, r->who.user);
}

json_t *web__spec_for(web_req *r, json_t *spec)
{
    json_t *env = json_object_get(json_object_get(spec, "trial"), "env");
    if (!json_object_size(env) || web__may_see_env(r, spec))
        return json_incref(spec);
    json_t *out = json_deep_copy(spec);
    json_t *hidden = json_object_get(json_object_get(out, "trial"), "env");
    const char *key;
    json_t *v;
    json_object_foreach(hidden, key, v)
    {
        json_object_set_new(hidden, key, json_string(WEB_HIDDEN));
    }
    return out;
}
