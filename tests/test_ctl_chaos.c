/*  test_ctl_chaos.c - no input crashes the controller.

    A real controller (ctl_run in a thread, a temporary SQLite file, an
    ipc:// endpoint) gets a study, a registered fake dispatcher and running
    trials, then thousands of seeded random messages on a DEALER socket:
    every message type the schema (common/msg.h) says the controller takes,
    with its fields dropped, retyped or set to extreme values, random JSON, random bytes
   and bad framing. It must keep answering, refuse wrong tokens, and leave the store
    consistent (every trial in a known state, metrics only for real trials).
    Before that, each message type's peer role is checked: wrong tokens,
    unregistered dispatchers and the old `heartbeat` are refused and
    change nothing, and commands the trial's state does not allow are
    refused with bad_state.
*/
#include "jz_test.h"

#include "controller/ctl.h"
#include "common/ident.h"
#include "common/util.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/wire.h"
#include "store/store.h"
#include "msg_testlib.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <unistd.h>
#include <zmq.h>

static atomic_int s_stop;
static char s_dir[64], s_db[128], s_ep[160];
static void *s_ctx, *s_sock;

static void *s_ctl_thread(void *arg)
{
    ctl_run(arg, &s_stop);
    return NULL;
}

static uint64_t s_rng = 0x9E3779B97F4A7C15ULL;
static uint64_t s_next(void)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return s_rng;
}

/* A reply to `msg` (takes ownership), or NULL after a timeout (generous:
   a liveness check on a loaded machine, not a latency bound). */
static json_t *s_ask(json_t *msg)
{
    char err[128];
    return wire_request(s_sock, msg, 20000, err, sizeof err);
}

static int s_ok(json_t *reply)
{
    int ok = reply && !strcmp(wire_type(reply), "ok");
    json_decref(reply);
    return ok;
}

/* A reply to `msg` (takes ownership) sent from a fresh peer, or NULL
   after a timeout. The chaos socket itself may have a full receive pipe
   (it reads only now and then, and the controller pushes instructions to
   it as a trial), where the ROUTER drops what it sends, as ZeroMQ's ROUTER
   does for any peer that does not read. */
static json_t *s_ask_fresh(json_t *msg)
{
    void *sock = zmq_socket(s_ctx, ZMQ_DEALER);
    wire_socket_setup(sock);
    zmq_connect(sock, s_ep);
    char err[128];
    json_t *r = wire_request(sock, msg, 20000, err, sizeof err);
    zmq_close(sock);
    return r;
}

static json_t *s_random_value(int depth)
{
    switch (s_next() % (depth > 2 ? 7 : 9)) {
    case 0:
        return json_null();
    case 1:
        return json_true();
    case 2:
        return json_integer((json_int_t)(s_next() % 7) - 3);
    case 3:
        return json_integer((json_int_t)s_next());
    case 4:
        return json_real((double)(int64_t)s_next() / 1e3);
    case 5: {
        static const char *const words[] = {"",         "nan",   "inf",
                                            "-inf",     "x",     "run",
                                            "\xff\xfe", "trial", "../../etc/passwd",
                                            "lr"};
        return json_string(words[s_next() % 10]);
    }
    case 6:
        return json_string("a very long string that is still fine to carry around");
    case 7: {
        json_t *a = json_array();
        for (int i = (int)(s_next() % 4); i > 0; i--)
            json_array_append_new(a, s_random_value(depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (int i = (int)(s_next() % 4); i > 0; i--) {
            char k[8];
            snprintf(k, sizeof k, "k%d", (int)(s_next() % 5));
            json_object_set_new(o, k, s_random_value(depth + 1));
        }
        return o;
    }
    }
}

/* A value for schema field f of a message to the chaos study: small
   numbers, names of what exists (a study to delete or copy never is). */
static json_t *s_field_value(const msg_def *d, const msg_field *f)
{
    switch (f->type) {
    case MSG_T_INT:
        return json_integer((json_int_t)(s_next() % 4));
    case MSG_T_NUM:
        return json_real(0.5);
    case MSG_T_STR:
        if (!strcmp(f->name, "study"))
            return json_string(d->type == MSG_STUDY_DELETE ? "chaos-none" : "chaos");
        return json_string(!strcmp(f->name, "stream") ? "out" : "x");
    case MSG_T_BOOL:
        return json_boolean(s_next() % 2);
    case MSG_T_ARRAY:
        return json_array();
    case MSG_T_OBJECT:
        return json_object();
    }
    return json_null();
}

/* A message of a type the schema says the controller takes (every one of
   them, at random, and an unknown one), with the fields the schema lists
   and some more, then kept, dropped or replaced. */
static json_t *s_mutant(long trial, const char *token)
{
    const msg_def *to_ctl[MSG_COUNT];
    size_t n = 0;
    for (int t = 0; t < MSG_COUNT; t++)
        if (msg_def_of((msg_type)t)->to == MSG_CTL)
            to_ctl[n++] = msg_def_of((msg_type)t);
    size_t pick = (size_t)(s_next() % (n + 1));
    const msg_def *def = pick < n ? to_ctl[pick] : NULL;
    const char *type = def ? def->name : "no_such_type";
    json_t *m = json_pack(
        "{s:s, s:I, s:s, s:s, s:s, s:I, s:I, s:[[I,s,f]], s:s, s:I, s:b, s:{s:f}, "
        "s:[], s:[], s:s, s:I, s:s}",
        "type", type, "trial", (json_int_t)trial, "token", token, "name", "d1", "study",
        "chaos", "attempt", (json_int_t)0, "slots", (json_int_t)2, "points",
        (json_int_t)1, "score", 0.5, "how", "exited", "code", (json_int_t)0, "applied", 1,
        "values", "lr", 0.1, "gpus", "running", "path", "/tmp/x", "step", (json_int_t)3,
        "tag", "0123456789abcdef");
    if (def && def->type == MSG_STUDY_DELETE)
        json_object_set_new(m, "study", json_string("chaos-none"));
    const char *cur = def ? def->fields : "";
    msg_field f;
    while (msg_field_next(&cur, &f))
        if (!json_object_get(m, f.name))
            json_object_set_new(m, f.name, s_field_value(def, &f));
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(m, tmp, key, v)
    {
        if (!strcmp(key, "type"))
            continue;
        int r = (int)(s_next() % 6);
        if (r == 0)
            json_object_del(m, key);
        else if (r == 1 &&
                 !(def && def->type == MSG_STUDY_DELETE && !strcmp(key, "study")))
            json_object_set_new(m, key, s_random_value(0));
    }
    if (s_next() % 8 == 0)
        json_object_set_new(m, "spec", s_random_value(0));
    return m;
}

static void s_send_raw(int frames, size_t len)
{
    char *buf = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)s_next();
    for (int f = 0; f < frames; f++)
        zmq_send(s_sock, buf, f == 0 && frames > 1 && s_next() % 2 ? 0 : len,
                 f + 1 < frames ? ZMQ_SNDMORE : 0);
    free(buf);
}

/* The first trial of `study` as stored: its state text into state (size
   16), its id and token. 1 when there is one. */
static int s_first_trial(const char *study, char *state, long *id, char *token)
{
    char err[256];
    store_t *st = store_open(s_db, 1, err, sizeof err);
    if (!st)
        return 0;
    store_study sd;
    int found = 0;
    if (store_study_get(st, study, &sd) == 1) {
        store_trial *rows;
        long n = store_trials_load(st, sd.id, &rows);
        if (n >= 1) {
            snprintf(state, 16, "%s", store_trial_state_name(rows[0].state));
            *id = rows[0].id;
            snprintf(token, 40, "%s", rows[0].token);
            found = 1;
        }
        if (n >= 0)
            store_trials_free(rows, n);
        store_study_fini(&sd);
    }
    store_close(&st);
    return found;
}

/* The error code of a reply (owned), "" for ok, "(none)" for no reply. */
static const char *s_code(json_t *reply)
{
    static char code[32];
    snprintf(code, sizeof code, "%s",
             !reply                            ? "(none)"
             : !strcmp(wire_type(reply), "ok") ? ""
             : json_string_value(json_object_get(reply, "code"))
                 ? json_string_value(json_object_get(reply, "code"))
                 : "?");
    json_decref(reply);
    return code;
}

/* Each message type belongs to one kind of peer, checked before anything
   changes: a wrong token or an unregistered dispatcher is refused and the
   trial stays as it was; `heartbeat` (the old two-meaning type) is gone;
   commands the trial's state does not allow are refused with bad_state. */
TEST(roles_are_checked_first_and_refusals_change_nothing)
{
    json_t *spec = json_loads(
        "{\"name\":\"roles\",\"objective\":{\"metric\":\"score\",\"mode\":\"max\"},"
        "\"budget\":{\"trials\":1,\"parallel\":1},"
        "\"space\":{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1}},"
        "\"trial\":{\"command\":[\"true\"]}}",
        0, NULL);
    REQUIRE(s_ok(s_ask(json_pack("{s:s, s:o}", "type", "submit", "spec", spec))));
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:s, s:[]}", "type", "disp_heartbeat", "name",
                                     "nobody", "running"))),
              "unknown_dispatcher");
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:s, s:i, s:i}", "type", "started", "name",
                                     "nobody", "trial", 1, "attempt", 0))),
              "unknown_dispatcher");
    REQUIRE(s_ok(s_ask(json_pack("{s:s, s:s, s:i, s:[], s:[]}", "type", "register",
                                 "name", "d9", "slots", 1, "gpus", "running"))));
    char state[16] = "", token[40] = "";
    long id = 0;
    for (int i = 0; i < 100 && strcmp(state, "starting"); i++) {
        usleep(50 * 1000); /* the controller starts it on one of its next ticks */
        s_first_trial("roles", state, &id, token);
    }
    REQUIRE(!strcmp(state, "starting"));

    /* a release before the trial runs is refused */
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:I, s:b}", "type", "trial_pause", "trial",
                                     (json_int_t)id, "release", 1))),
              "bad_state");
    /* wrong token, the old heartbeat, a dispatcher report from nobody: the
       trial is still starting */
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:I, s:s}", "type", "hello", "trial",
                                     (json_int_t)id, "token", "wrong"))),
              "unauthorized");
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:I, s:s}", "type", "heartbeat", "trial",
                                     (json_int_t)id, "token", token))),
              "malformed");
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:s, s:I, s:i, s:s}", "type", "exited",
                                     "name", "nobody", "trial", (json_int_t)id, "attempt",
                                     0, "how", "exited"))),
              "unknown_dispatcher");
    REQUIRE(s_first_trial("roles", state, &id, token));
    CHECK_STR(state, "starting");

    /* the right token: it runs */
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:I, s:s}", "type", "trial_heartbeat",
                                     "trial", (json_int_t)id, "token", token))),
              "");
    REQUIRE(s_first_trial("roles", state, &id, token));
    CHECK_STR(state, "running");
    /* release once, not twice */
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:I, s:b}", "type", "trial_pause", "trial",
                                     (json_int_t)id, "release", 1))),
              "");
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:I, s:b}", "type", "trial_pause", "trial",
                                     (json_int_t)id, "release", 1))),
              "bad_state");
    /* the dispatcher reports the exit: it ends (the release's stop was not
       acknowledged with a checkpoint, so it is not suspended) */
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:s, s:I, s:i, s:s, s:i}", "type", "exited",
                                     "name", "d9", "trial", (json_int_t)id, "attempt", 0,
                                     "how", "exited", "code", 1))),
              "");
    REQUIRE(s_first_trial("roles", state, &id, token));
    CHECK_STR(state, "failed");
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:I}", "type", "trial_stop", "trial",
                                     (json_int_t)id))),
              "bad_state");
    /* metrics of an ended trial are refused */
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:I, s:s, s:s, s:[[i,s,f]]}", "type",
                                     "metrics", "trial", (json_int_t)id, "token", token,
                                     "session", "z", "points", 1, "score", 0.5))),
              "bad_state");
}

/* The number of rows of the store's events table (-1 on error). */
static long s_events(void)
{
    sqlite3 *db;
    sqlite3_stmt *q;
    long n = -1;
    if (sqlite3_open_v2(s_db, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM events", -1, &q, NULL) ==
            SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        n = (long)sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

/* What s_good_value reads (mtl_value_fn's arg). */
typedef struct {
    const msg_def *d;  /* the message's type */
    long trial;        /* the live trial */
    const char *token; /* its token */
} s_good;

/* A well-typed value for field f of d: the live trial's id and token for
   a trial's message, the registered dispatcher's name, otherwise names of
   nothing that exists (should a malformed message get through, it would
   change nothing either). */
static json_t *s_good_value(const msg_field *f, void *arg)
{
    const s_good *g = arg;
    if (!strcmp(f->name, "trial"))
        return json_integer(g->d->auth == MSG_AUTH_TRIAL ? g->trial : 999999);
    if (!strcmp(f->name, "token"))
        return json_string(g->token);
    if (!strcmp(f->name, "name"))
        return json_string(g->d->auth == MSG_AUTH_DISP ? "d9" : "no-such-name");
    return mtl_value_of(f->type, 1.0, "no-such-thing");
}

/* Every type the controller takes, each required field missing and then
   of the wrong JSON type: answered `malformed` naming the field, before
   any handler runs, and nothing changes (no event, the trial as it was). */
TEST(every_type_refuses_a_missing_or_mistyped_field)
{
    json_t *spec = json_loads(
        "{\"name\":\"fields\",\"objective\":{\"metric\":\"score\",\"mode\":\"max\"},"
        "\"budget\":{\"trials\":1,\"parallel\":1},"
        "\"space\":{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1}},"
        "\"trial\":{\"command\":[\"true\"]}}",
        0, NULL);
    REQUIRE(s_ok(s_ask(json_pack("{s:s, s:s, s:i, s:[], s:[]}", "type", "register",
                                 "name", "d9", "slots", 1, "gpus", "running"))));
    REQUIRE(s_ok(s_ask(json_pack("{s:s, s:o}", "type", "submit", "spec", spec))));
    char state[16] = "", token[40] = "";
    long id = 0;
    for (int i = 0; i < 200 && strcmp(state, "starting"); i++) {
        usleep(50 * 1000); /* the controller starts it on one of its next ticks */
        s_first_trial("fields", state, &id, token);
    }
    REQUIRE(!strcmp(state, "starting"));
    long events = s_events();
    REQUIRE(events > 0);
    int types = 0, refusals = 0;
    for (int t = 0; t < MSG_COUNT; t++) {
        const msg_def *d = msg_def_of((msg_type)t);
        if (d->to != MSG_CTL)
            continue;
        types++;
        const char *cur = d->fields;
        msg_field f;
        while (msg_field_next(&cur, &f)) {
            if (f.optional)
                continue;
            for (int retype = 0; retype < 2; retype++) {
                s_good good = {d, id, token};
                json_t *m = mtl_broken(d, &f, retype, 1, s_good_value, &good);
                json_t *r = s_ask(m);
                const char *code =
                    r ? json_string_value(json_object_get(r, "code")) : NULL;
                const char *text =
                    r ? json_string_value(json_object_get(r, "message")) : NULL;
                char want[48];
                snprintf(want, sizeof want, "field '%s'", f.name);
                if (!code || strcmp(code, "malformed") || !text || !strstr(text, want))
                    JZT_FAIL("%s with %s %s: %s: %s", d->name, f.name,
                             retype ? "retyped" : "missing", code ? code : "(no code)",
                             text ? text : "(no message)");
                json_decref(r);
                refusals++;
            }
        }
    }
    CHECK(types >= 28);
    CHECK(refusals >= 80);
    CHECK(s_events() == events);
    REQUIRE(s_first_trial("fields", state, &id, token));
    CHECK_STR(state, "starting");
    /* and the trial's own well-formed message still works */
    CHECK_STR(s_code(s_ask(json_pack("{s:s, s:I, s:s}", "type", "trial_heartbeat",
                                     "trial", (json_int_t)id, "token", token))),
              "");
}

TEST(chaos_keeps_the_controller_alive_and_consistent)
{
    /* a study with two running trials on a fake dispatcher */
    json_t *spec = json_loads(
        "{\"name\":\"chaos\",\"objective\":{\"metric\":\"score\",\"mode\":\"max\"},"
        "\"budget\":{\"trials\":4,\"parallel\":2},"
        "\"space\":{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1}},"
        "\"trial\":{\"command\":[\"true\"]}}",
        0, NULL);
    REQUIRE(s_ok(s_ask(json_pack("{s:s, s:o}", "type", "submit", "spec", spec))));
    REQUIRE(s_ok(s_ask(json_pack("{s:s, s:s, s:i, s:[], s:[]}", "type", "register",
                                 "name", "d1", "slots", 2, "gpus", "running"))));
    /* the controller creates the trials on its next ticks: wait for them */
    char err[256];
    store_t *st = NULL;
    store_study sd;
    store_trial *rows = NULL;
    long n = 0;
    for (int tries = 0; tries < 3000 && n < 1; tries++) {
        if (st) {
            store_trials_free(rows, n);
            store_study_fini(&sd);
            store_close(&st);
            usleep(10 * 1000);
        }
        st = store_open(s_db, 1, err, sizeof err);
        REQUIRE(st);
        REQUIRE(store_study_get(st, "chaos", &sd) == 1);
        n = store_trials_load(st, sd.id, &rows);
    }
    REQUIRE(n >= 1);
    long trial = rows[0].id;
    char token[40];
    snprintf(token, sizeof token, "%s", rows[0].token);
    store_trials_free(rows, n);
    store_study_fini(&sd);
    store_close(&st);

    /* the right token works, a wrong one is refused */
    json_t *r = s_ask(json_pack("{s:s, s:I, s:s, s:s, s:[[i,s,f]]}", "type", "metrics",
                                "trial", (json_int_t)trial, "token", token, "session",
                                "t", "points", 1, "score", 0.25));
    CHECK(s_ok(r));
    r = s_ask(json_pack("{s:s, s:I, s:s, s:[[i,s,f]]}", "type", "metrics", "trial",
                        (json_int_t)trial, "token", "wrong", "points", 2, "score", 0.5));
    CHECK(r && !strcmp(json_string_value(json_object_get(r, "code")), "unauthorized"));
    json_decref(r);

    /* chaos */
    for (int i = 0; i < 20000; i++) {
        int what = (int)(s_next() % 10);
        if (what < 7) {
            int right = s_next() % 2;
            json_t *m =
                s_mutant(right ? trial : (long)(s_next() % 50) - 5, right ? token : "zz");
            wire_send(s_sock, NULL, m, 0);
        } else if (what < 9) {
            zmq_send(s_sock, "", 0, ZMQ_SNDMORE);
            s_send_raw(1, (size_t)(s_next() % 200));
        } else {
            s_send_raw(1 + (int)(s_next() % 4), (size_t)(s_next() % 64));
        }
        if (i % 500 == 0) {
            /* drain replies so the socket does not fill up, then check life */
            char e2[64];
            json_t *x;
            while ((x = wire_recv(s_sock, NULL, 1, e2, sizeof e2)) || errno != EAGAIN)
                json_decref(x);
            CHECK(s_ok(s_ask_fresh(json_pack("{s:s}", "type", "ping"))));
        }
    }
    CHECK(s_ok(s_ask_fresh(json_pack("{s:s}", "type", "ping"))));
    json_t *status =
        s_ask_fresh(json_pack("{s:s, s:s}", "type", "status", "study", "chaos"));
    CHECK(status && !strcmp(wire_type(status), "ok"));
    json_decref(status);

    /* the store is consistent */
    st = store_open(s_db, 1, err, sizeof err);
    REQUIRE(st);
    json_t *list = store_study_list(st);
    /* "roles", "fields" (the tests before) and "chaos" are there; the others are
       copies of them (study_copy is among the chaos) */
    int have_roles = 0, have_chaos = 0;
    size_t li;
    json_t *le;
    json_array_foreach(list, li, le)
    {
        const char *nm = json_string_value(json_object_get(le, "name"));
        have_roles |= nm && !strcmp(nm, "roles");
        have_chaos |= nm && !strcmp(nm, "chaos");
    }
    CHECK(have_roles && have_chaos);
    json_decref(list);
    REQUIRE(store_study_get(st, "chaos", &sd) == 1);
    n = store_trials_load(st, sd.id, &rows);
    CHECK(n >= 1); /* study_extend is among the chaos: the budget may grow */
    for (long i = 0; i < n; i++) /* the store refuses a state it does not know */
        CHECK((unsigned)rows[i].state < TRIAL_STATE_COUNT);
    store_trials_free(rows, n);
    store_study_fini(&sd);
    store_close(&st);

    /* metrics only for real trials: every stored point belongs to the one
       trial whose token the messages carried (the others were refused),
       and the right-token points are there */
    sqlite3 *db;
    REQUIRE(sqlite3_open_v2(s_db, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    sqlite3_stmt *q;
    REQUIRE(sqlite3_prepare_v2(db,
                               "SELECT trial_id, COUNT(*) FROM metrics GROUP BY trial_id",
                               -1, &q, NULL) == SQLITE_OK);
    int groups = 0;
    long ours = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        groups++;
        long id = (long)sqlite3_column_int64(q, 0);
        CHECK(id == trial);
        if (id == trial)
            ours = (long)sqlite3_column_int64(q, 1);
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    CHECK(groups == 1);
    CHECK(ours >= 1); /* at least the first, well-formed report */
}

/* A controller of its own in a new directory (a test that needs other
   settings than the shared one), run in a thread, with a DEALER on it. */
typedef struct {
    char dir[64], db[128], ep[160];
    ctl_t *c;
    atomic_int stop;
    pthread_t th;
    void *sock;
} own_ctl;

static void *s_own_thread(void *arg)
{
    own_ctl *o = arg;
    ctl_run(o->c, &o->stop);
    return NULL;
}

static int s_own_start(own_ctl *o, const char *prefix, double lost_timeout_s)
{
    char err[256];
    memset(o, 0, sizeof *o);
    snprintf(o->dir, sizeof o->dir, "/tmp/%s-XXXXXX", prefix);
    if (!mkdtemp(o->dir))
        return -1;
    snprintf(o->db, sizeof o->db, "%s/c.db", o->dir);
    snprintf(o->ep, sizeof o->ep, "ipc://%s/ctl.sock", o->dir);
    ctl_config cfg = {.db_path = o->db, .bind = o->ep, .lost_timeout_s = lost_timeout_s};
    if (!(o->c = ctl_new(&cfg, err, sizeof err)))
        return -1;
    pthread_create(&o->th, NULL, s_own_thread, o);
    o->sock = zmq_socket(s_ctx, ZMQ_DEALER);
    wire_socket_setup(o->sock);
    zmq_connect(o->sock, o->ep);
    return 0;
}

/* Stops it; its store stays for the test to read until s_own_remove. */
static void s_own_stop(own_ctl *o)
{
    zmq_close(o->sock);
    atomic_store(&o->stop, 1);
    pthread_join(o->th, NULL);
    ctl_destroy(&o->c);
}

static void s_own_remove(own_ctl *o)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", o->dir);
    CHECK(system(cmd) == 0);
}

/* Dispatchers registered and never heard again are forgotten in memory
   once silent for twice the lost timeout, their names still bound to their
   identity in the store until an admin releases one; one that heartbeats
   stays.
   A controller of its own, with a short lost timeout. */
TEST(silent_dispatchers_are_forgotten)
{
    own_ctl o;
    REQUIRE(s_own_start(&o, "jz-forget", 1.0) == 0);
    void *sock = o.sock;
    char err[256];
    enum { N = 200 };
    int registered = 0;
    for (int i = 0; i <= N; i++) {
        char name[32];
        snprintf(name, sizeof name, i < N ? "fake-%d" : "keep", i);
        registered +=
            s_ok(wire_request(sock,
                              json_pack("{s:s, s:s, s:i, s:[], s:[]}", "type", "register",
                                        "name", name, "slots", 1, "gpus", "running"),
                              5000, err, sizeof err));
    }
    CHECK(registered == N + 1);
    /* 3 s (past the 2 s after which a silent one is forgotten, with room
       for a loaded machine's late ticks): "keep" heartbeats every 0.1 s,
       the others are silent */
    for (double t0 = util_now(); util_now() - t0 < 3.0;) {
        json_decref(wire_request(sock,
                                 json_pack("{s:s, s:s, s:[]}", "type", "disp_heartbeat",
                                           "name", "keep", "running"),
                                 5000, err, sizeof err));
        usleep(100 * 1000);
    }
    json_t *r = wire_request(sock,
                             json_pack("{s:s, s:s, s:[]}", "type", "disp_heartbeat",
                                       "name", "fake-7", "running"),
                             5000, err, sizeof err);
    const char *code = json_string_value(json_object_get(r, "code"));
    CHECK(code && !strcmp(code, "unknown_dispatcher"));
    json_decref(r);
    /* an admin releases a forgotten name; a connected one is refused */
    r = wire_request(sock,
                     json_pack("{s:s, s:s}", "type", "disp_release", "name", "fake-8"),
                     5000, err, sizeof err);
    CHECK(s_ok(r));
    r = wire_request(sock,
                     json_pack("{s:s, s:s}", "type", "disp_release", "name", "keep"),
                     5000, err, sizeof err);
    code = json_string_value(json_object_get(r, "code"));
    CHECK(code && !strcmp(code, "bad_state"));
    json_decref(r);
    s_own_stop(&o);
    sqlite3 *q;
    REQUIRE(sqlite3_open(o.db, &q) == SQLITE_OK);
    sqlite3_stmt *st;
    /* the forgotten names stay bound to their identity in the store, but
       for the released one */
    REQUIRE(sqlite3_prepare_v2(q,
                               "SELECT COUNT(*), SUM(name='keep'), SUM(name='fake-8'), "
                               "SUM(owner IS NOT NULL) FROM dispatchers",
                               -1, &st, NULL) == SQLITE_OK);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    CHECK(sqlite3_column_int(st, 0) == N && sqlite3_column_int(st, 1) == 1 &&
          sqlite3_column_int(st, 2) == 0 && sqlite3_column_int(st, 3) == N);
    sqlite3_finalize(st);
    sqlite3_close(q);
    s_own_remove(&o);
}

/* Sends `msg` with req 1 on `sock` and collects what comes until the
   reply: the pushes (kill, disown, start) the controller sent before it.
   Returns the pushes of type `type` (caller owns), counts the reply's
   being ok in *ok. */
static json_t *s_pushes_until_reply(void *sock, json_t *msg, const char *type, int *ok)
{
    json_t *out = json_array();
    json_object_set_new(msg, "req", json_integer(1));
    *ok = 0;
    if (wire_send(sock, NULL, msg, 0) != 0)
        return out;
    for (double t0 = util_now(); util_now() - t0 < 5.0;) {
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 100) <= 0)
            continue;
        char err[128];
        json_t *m = wire_recv(sock, NULL, 1, err, sizeof err);
        if (!m)
            continue;
        const char *t = wire_type(m);
        if (!strcmp(t, "ok") || !strcmp(t, "error")) {
            *ok = !strcmp(t, "ok");
            json_decref(m);
            break;
        }
        if (!strcmp(t, type))
            json_array_append(out, m);
        json_decref(m);
    }
    return out;
}

/* A dispatcher names a process by trial, attempt and the attempt's tag
   (a Slurm job of another store can carry this store's trial and attempt
   numbers): the controller disowns one whose tag is not its current
   attempt's, and ignores its reports. Without a tag, as before. */
TEST(the_attempts_tag_tells_this_stores_processes_from_others)
{
    own_ctl o;
    REQUIRE(s_own_start(&o, "jz-tag", 30.0) == 0);
    void *sock = o.sock;
    char err[256];

    /* no trial 42 in this store: a tagged process is disowned, an untagged
       one killed as a stale attempt (as before tags) */
    int ok;
    json_t *reg = json_pack(
        "{s:s, s:s, s:i, s:[], s:[{s:i, s:i, s:i, s:s}, {s:i, s:i, s:i}]}", "type",
        "register", "name", "dt", "slots", 1, "gpus", "running", "trial", 42, "attempt",
        0, "pid", 77, "tag", "0123456789abcdef", "trial", 43, "attempt", 0, "pid", 78);
    json_t *got = s_pushes_until_reply(sock, json_deep_copy(reg), "disown", &ok);
    CHECK(ok && json_array_size(got) == 1);
    json_t *d0 = json_array_get(got, 0);
    CHECK(json_integer_value(json_object_get(d0, "trial")) == 42);
    CHECK(!strcmp(json_string_value(json_object_get(d0, "tag")), "0123456789abcdef"));
    json_decref(got);
    got = s_pushes_until_reply(sock, reg, "kill", &ok);
    CHECK(ok && json_array_size(got) == 1 &&
          json_integer_value(json_object_get(json_array_get(got, 0), "trial")) == 43);
    json_decref(got);
    /* a heartbeat whose list has a malformed tag is not taken (as any bad list) */
    got = s_pushes_until_reply(sock,
                               json_pack("{s:s, s:s, s:[{s:i, s:i, s:i, s:i}]}", "type",
                                         "disp_heartbeat", "name", "dt", "running",
                                         "trial", 42, "attempt", 0, "pid", 77, "tag", 5),
                               "disown", &ok);
    CHECK(json_array_size(got) == 0);
    json_decref(got);

    /* a study's trial started on dt */
    json_t *spec = json_loads(
        "{\"name\":\"tagged\",\"objective\":{\"metric\":\"score\",\"mode\":\"max\"},"
        "\"budget\":{\"trials\":1,\"parallel\":1},"
        "\"space\":{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1}},"
        "\"trial\":{\"command\":[\"true\"]}}",
        0, NULL);
    REQUIRE(
        s_ok(wire_request(sock, json_pack("{s:s, s:o}", "type", "submit", "spec", spec),
                          5000, err, sizeof err)));
    json_t *start = NULL;
    for (double t0 = util_now(); !start && util_now() - t0 < 10.0;) {
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 100) <= 0)
            continue;
        json_t *m = wire_recv(sock, NULL, 1, err, sizeof err);
        if (m && !strcmp(wire_type(m), "start"))
            start = m;
        else
            json_decref(m);
    }
    REQUIRE(start);
    json_int_t id = json_integer_value(json_object_get(start, "trial"));
    const char *token =
        json_string_value(json_object_get(json_object_get(start, "env"), "JIZHI_TOKEN"));
    REQUIRE(token);
    char tag[IDENT_TAG_LEN + 1];
    ident_attempt_tag(token, tag);
    json_decref(start);

    /* its own tag: kept; another: disowned */
    got =
        s_pushes_until_reply(sock,
                             json_pack("{s:s, s:s, s:[{s:I, s:i, s:i, s:s}]}", "type",
                                       "disp_heartbeat", "name", "dt", "running", "trial",
                                       id, "attempt", 0, "pid", 79, "tag", tag),
                             "disown", &ok);
    CHECK(ok && json_array_size(got) == 0);
    json_decref(got);
    got = s_pushes_until_reply(sock,
                               json_pack("{s:s, s:s, s:[{s:I, s:i, s:i, s:s}]}", "type",
                                         "disp_heartbeat", "name", "dt", "running",
                                         "trial", id, "attempt", 0, "pid", 80, "tag",
                                         "0123456789abcdef"),
                               "disown", &ok);
    CHECK(ok && json_array_size(got) == 1);
    json_decref(got);

    /* a report under another tag changes nothing; under its own it ends
       the attempt */
    for (int own = 0; own < 2; own++) {
        got = s_pushes_until_reply(
            sock,
            json_pack("{s:s, s:s, s:I, s:i, s:s, s:i, s:i, s:s, s:s}", "type", "exited",
                      "name", "dt", "trial", id, "attempt", 0, "how", "exited", "code", 3,
                      "signal", 0, "message", "exit 3", "tag",
                      own ? tag : "0123456789abcdef"),
            "none", &ok);
        CHECK(ok);
        json_decref(got);
        char state[16] = "";
        for (double t0 = util_now(); util_now() - t0 < (own ? 5.0 : 0.5);) {
            store_t *st = store_open(o.db, 1, err, sizeof err);
            store_trial row;
            if (st && store_trial_get(st, (long)id, &row) == 1) {
                snprintf(state, sizeof state, "%s", store_trial_state_name(row.state));
                store_trial_fini(&row);
            }
            store_close(&st);
            if (own && strcmp(state, "starting") && strcmp(state, "running"))
                break;
            usleep(50 * 1000);
        }
        if (own)
            CHECK(strcmp(state, "starting") && strcmp(state, "running"));
        else
            CHECK(!strcmp(state, "starting") || !strcmp(state, "running"));
    }

    s_own_stop(&o);
    s_own_remove(&o);
}

int main(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/jz-chaos-XXXXXX");
    if (!mkdtemp(s_dir))
        return 1;
    snprintf(s_db, sizeof s_db, "%s/chaos.db", s_dir);
    snprintf(s_ep, sizeof s_ep, "ipc://%s/ctl.sock", s_dir);
    log_set_level(LOGL_ERROR); /* every refusal is a warning line: too many here */
    char err[256];
    ctl_config cfg = {.db_path = s_db, .bind = s_ep, .lost_timeout_s = 3600};
    ctl_t *c = ctl_new(&cfg, err, sizeof err);
    if (!c) {
        printf("ctl_new: %s\n", err);
        return 1;
    }
    pthread_t th;
    pthread_create(&th, NULL, s_ctl_thread, c);
    s_ctx = zmq_ctx_new();
    s_sock = zmq_socket(s_ctx, ZMQ_DEALER);
    wire_socket_setup(s_sock);
    zmq_connect(s_sock, s_ep);

    RUN(roles_are_checked_first_and_refusals_change_nothing);
    RUN(every_type_refuses_a_missing_or_mistyped_field);
    RUN(chaos_keeps_the_controller_alive_and_consistent);
    RUN(silent_dispatchers_are_forgotten);
    RUN(the_attempts_tag_tells_this_stores_processes_from_others);

    zmq_close(s_sock);
    zmq_ctx_term(s_ctx);
    atomic_store(&s_stop, 1);
    pthread_join(th, NULL);
    ctl_destroy(&c);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        printf("could not remove %s\n", s_dir);
    TEST_DONE();
}
