/*  web_write.c - the POST handlers: each becomes one request to the
    controller through client_call (the CLI's own path), and the answer is
    the controller's acknowledgement with the round trip it took. Bearer
    tokens are checked here against the hashes in the store. A refused
    request changes nothing: the controller checks before it acts. */
#include "web_internal.h"

#include "../common/client.h"
#include "../common/spec.h"
#include "../common/wire.h"
#include "../schedulers/sched.h"
#include "../common/util.h"
#include "web_body.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long a waited acknowledgement may take: the controller answers one
   that runs out itself after WAIT_S (saying what it knows of the trial),
   the margin is for its answer to arrive. */
#define WAIT_S 25
#define WAIT_MS ((WAIT_S + 5) * 1000)
/* A guarded change is answered once decided: its watch window takes longer. */
#define GUARD_WAIT_S 120
/* A waited fork ({"wait": true}): by default as long, at most 600 s. */
#define FORK_WAIT_S 120
#define FORK_WAIT_MAX_S 600
/* How often a waited guarded change or fork reads the store. */
#define IV_SLICE_MS 500

int web__authenticate(web_req *r)
{
    const char *auth =
        web__mhd.lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    if (!auth || strncmp(auth, "Bearer ", 7)) {
        web__error(r, 401, "unauthenticated",
                   "this needs a token: Authorization: Bearer <token from `jizhi token "
                   "create`>");
        return -1;
    }
    const char *token = auth + 7;
    if (!ident_token_wellformed(token)) {
        web__error(r, 401, "bad_token", "the token is malformed");
        return -1;
    }
    store_t *s = web__db(r);
    if (!s)
        return -1;
    char hash[IDENT_HASH_LEN + 1];
    ident_token_hash(token, hash);
    store_token tk;
    int found = store_token_find(s, hash, &tk);
    if (found < 0) {
        web__error(r, 500, "store", "checking the token: %s", store_errmsg(s));
        return -1;
    }
    if (!found || ident_role_parse(tk.role, &r->who.role) != 0) {
        web__error(r, 401, "bad_token", "unknown or revoked token");
        return -1;
    }
    snprintf(r->who.user, sizeof r->who.user, "%s", tk.user);
    return 0;
}

const char *web__endpoint(web_req *r, char *buf, size_t size)
{
    if (r->w->controller[0])
        return r->w->controller;
    char path[1100];
    snprintf(path, sizeof path, "%s.endpoint", r->w->db);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *line = fgets(buf, (int)size, f);
    fclose(f);
    if (!line)
        return NULL;
    buf[strcspn(buf, "\r\n")] = 0;
    return *buf ? buf : NULL;
}

/* HTTP status for a controller error code. */
static int s_status_of(const char *code)
{
    static const struct {
        const char *code;
        int status;
    } map[] = {{"unknown_study", 404}, {"unknown_trial", 404},    {"bad_state", 409},
               {"malformed", 400},     {"bad_spec", 400},         {"unauthorized", 403},
               {"forbidden", 403},     {"bad_value", 400},        {"out_of_space", 409},
               {"refused", 409},       {"not_acknowledged", 504}, {"conflict", 409}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (code && !strcmp(code, map[i].code))
            return map[i].status;
    return 422;
}

/* Sends msg (takes ownership) as r->who and answers with the reply. With
   iv (a waited guarded change or fork), the answer may come from the
   store instead, when the controller restarted during the wait and lost
   the request (store_interv_wait, as the CLI's wait). */
static int s_call_iv(web_req *r, json_t *msg, int timeout_ms, store_interv_wait *iv)
{
    char buf[512], err[600];
    const char *ep = web__endpoint(r, buf, sizeof buf);
    if (!ep) {
        json_decref(msg);
        return web__error(r, 503, "no_controller",
                          "no controller serves %s (start one, or pass --controller)",
                          r->w->db);
    }
    char who[80];
    snprintf(who, sizeof who, "web:%s", r->who.user);
    json_object_set_new(msg, "who", json_string(who));
    /* the controller applies this user's rights (owners, roles) when it
       trusts this server: same Unix user, or an admin key */
    json_object_set_new(msg, "as_role", json_string(ident_role_str(r->who.role)));
    double t0 = util_now();
    json_t *reply = iv ? client_call_check(ep, msg, timeout_ms, IV_SLICE_MS,
                                           store_interv_wait_check, iv, err, sizeof err)
                       : client_call(ep, msg, timeout_ms, err, sizeof err);
    double ms = (util_now() - t0) * 1e3;
    if (!reply)
        return web__error(r, 504, "no_answer", "%s", err);
    if (strcmp(wire_type(reply), "ok") != 0) {
        const char *code = json_string_value(json_object_get(reply, "code"));
        const char *text = json_string_value(json_object_get(reply, "message"));
        int st = web__error(r, s_status_of(code), code ? code : "refused", "%s",
                            text ? text : "the controller refused the request");
        json_decref(reply);
        return st;
    }
    if (iv && store_iv_answer_state(reply, iv->kind) ==
                  (iv->kind == IV_GUARD ? GUARD_REFUSED : FORK_REFUSED)) {
        /* read from the store: as the controller's */
        const char *why = json_string_value(json_object_get(reply, "reason"));
        int st = web__error(r, 409, "refused", "%s", why ? why : "refused");
        json_decref(reply);
        return st;
    }
    json_object_del(reply, "type");
    json_object_del(reply, "req");
    r->json = json_pack("{s:b, s:o, s:f, s:s}", "ok", 1, "ack", reply, "round_trip_ms",
                        ms, "who", who);
    return 200;
}

static int s_call(web_req *r, json_t *msg, int timeout_ms)
{
    return s_call_iv(r, msg, timeout_ms, NULL);
}

/* s_call for a waited guarded change or fork (kind) on trial: the wait
   also reads the intervention from this server's store. */
static int s_call_waited_iv(web_req *r, json_t *msg, int timeout_ms, long trial,
                            store_iv_kind kind)
{
    store_t *s = web__db(r);
    if (!s) {
        json_decref(msg);
        return r->status;
    }
    store_interv_wait iv;
    store_interv_wait_init(&iv, s, trial, kind);
    return s_call_iv(r, msg, timeout_ms, &iv);
}

int web__post_submit(web_req *r)
{
    /* a web client has no folder: trials without trial.cwd run in this
       server's (docs/WEB.md); a relative one is refused by spec_parse */
    json_t *trial = json_object_get(r->in, "trial");
    char here[4096];
    if (json_is_object(trial) && !json_object_get(trial, "cwd") &&
        getcwd(here, sizeof here))
        json_object_set_new(trial, "cwd", json_string(here));
    char buf[512];
    spec_t *spec = sched_admit(r->in, 1, buf, sizeof buf); /* as every door does */
    if (!spec)
        return web__error(r, 400, "bad_spec", "%s", buf);
    json_t *msg = json_pack("{s:s, s:O}", "type", "submit", "spec", spec->json);
    spec_destroy(&spec);
    return s_call(r, msg, 10000);
}

static int s_study_cmd(web_req *r, const char *type)
{
    return s_call(r, json_pack("{s:s, s:s}", "type", type, "study", r->arg), 10000);
}

int web__post_study_stop(web_req *r)
{
    return s_study_cmd(r, "study_stop");
}

int web__post_study_resume(web_req *r)
{
    return s_study_cmd(r, "study_resume");
}

int web__post_study_delete(web_req *r)
{
    return s_study_cmd(r, "study_delete");
}

int web__post_study_copy(web_req *r)
{
    const char *name = json_string_value(json_object_get(r->in, "name"));
    if (!name)
        return web__error(r, 400, "malformed",
                          "body: expected {\"name\": NEW}, the new study's name");
    return s_call(
        r,
        json_pack("{s:s, s:s, s:s}", "type", "study_copy", "study", r->arg, "name", name),
        10000);
}

/* The trial id in the path: > 0, or 0 with a 400 set. */
static long s_trial_id(web_req *r)
{
    char *end;
    long id = strtol(r->arg, &end, 10);
    if (*end || id <= 0) {
        web__error(r, 400, "bad_argument", "\"%s\" is not a trial id", r->arg);
        return 0;
    }
    return id;
}

static int s_trial_cmd(web_req *r, const char *kind, int wait, int release)
{
    long id = s_trial_id(r);
    if (!id)
        return r->status;
    char type[32];
    snprintf(type, sizeof type, "trial_%s", kind);
    json_t *msg =
        json_pack("{s:s, s:I, s:b, s:b, s:i}", "type", type, "trial", (json_int_t)id,
                  "wait", wait, "release", release, "wait_s", WAIT_S);
    return s_call(r, msg, wait ? WAIT_MS : 10000);
}

int web__post_trial_stop(web_req *r)
{
    return s_trial_cmd(r, "stop", 0, 0);
}

int web__post_trial_pause(web_req *r)
{
    int release;
    char err[300];
    if (web_body_release(r->in, &release, err, sizeof err) != 0)
        return web__error(r, 400, "malformed", "%s", err);
    return s_trial_cmd(r, "pause", 1, release); /* a release: until released */
}

int web__post_trial_resume(web_req *r)
{
    return s_trial_cmd(r, "resume", 1, 0);
}

int web__post_trial_set(web_req *r)
{
    long id = s_trial_id(r);
    if (!id)
        return r->status;
    const json_t *values;
    char err[300];
    int force;
    if (web_body_set_values(r->in, &values, err, sizeof err) != 0 ||
        web_body_force(r->in, &force, err, sizeof err) != 0)
        return web__error(r, 400, "malformed", "%s", err);
    json_t *guard = json_object_get(r->in, "guard");
    if (guard && !json_is_object(guard) && !json_is_null(guard))
        return web__error(r, 400, "malformed",
                          "field 'guard': expected {\"mode\": \"checkpoint\" or "
                          "\"values\", \"watch_steps\"?, \"tolerance\"?}");
    int guarded = json_is_object(guard);
    json_t *msg = json_pack("{s:s, s:I, s:b, s:O, s:b, s:i}", "type", "trial_set",
                            "trial", (json_int_t)id, "wait", 1, "values", values, "force",
                            force, "wait_s", guarded ? GUARD_WAIT_S : WAIT_S);
    if (!guarded)
        return s_call(r, msg, WAIT_MS);
    json_object_set(msg, "guard", guard); /* the controller checks its fields */
    return s_call_waited_iv(r, msg, (GUARD_WAIT_S + 5) * 1000, id, IV_GUARD);
}

/* POST /api/trials/ID/fork {"siblings": [{values}...], "steps"?, "keep"?,
   "force"?, "wait"?, "wait_s"?} or {"decide": true}: a live fork,
   answered at once, or once decided with "wait" (the controller checks
   the other fields). */
int web__post_trial_fork(web_req *r)
{
    long id = s_trial_id(r);
    if (!id)
        return r->status;
    int wait;
    double wait_s;
    char err[300];
    if (web_body_wait(r->in, &wait, &wait_s, FORK_WAIT_S, FORK_WAIT_MAX_S, err,
                      sizeof err) != 0)
        return web__error(r, 400, "malformed", "%s", err);
    if (json_is_true(json_object_get(r->in, "decide")))
        wait = 0; /* a decision is answered at once */
    json_t *msg = json_pack("{s:s, s:I, s:b, s:f}", "type", "trial_fork", "trial",
                            (json_int_t)id, "wait", wait, "wait_s", wait_s);
    static const char *const keys[] = {"siblings", "steps", "keep", "force", "decide"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *v = json_object_get(r->in, keys[i]);
        if (v && !json_is_null(v))
            json_object_set(msg, keys[i], v);
    }
    if (!wait)
        return s_call(r, msg, WAIT_MS);
    return s_call_waited_iv(r, msg, (int)(wait_s + 5) * 1000, id, IV_FORK);
}
