/*  test_oom.c - the out-of-memory policy, by allocation-failure injection
    over the parsers, as SQLite's malloc tests do: the spec (JSON text and
    spec_parse), a wire message (wire_recv over an inproc pair), the
    authorized-keys file, the controller's alerts file and a jizhi-train
    checkpoint (trn_trainer_load).

    Each parse runs once to count its allocations (K), then K more times
    with allocation N (N = 1..K) failing: once only, and from N on (every
    later one fails too). Each run must end cleanly: either the parse
    succeeds (the failure was on a path it can do without), or it returns
    its error with a message; nothing leaks (every block allocated during
    the run is freed once the result is destroyed) and nothing crashes.

    The hook: this binary alone links with -Wl,--wrap=malloc,calloc,
    realloc,free,strdup,strndup (Makefile), which routes our own code's
    allocations through s_malloc and friends; jansson's go through the same
    functions by json_set_alloc_funcs. libzmq's and libc's own are not
    counted.

    JSON text itself is lexed without injection: jansson 2.14's lexer
    writes past its string buffer when an allocation fails inside it (seen
    here under valgrind), so json_loads and json_loadb are wrapped too and
    run unarmed; what jansson allocates for our code everywhere else (the
    values we build and copy) is injected into. */
#include "jz_test.h"

#include "common/authkeys.h"
#include "common/keys.h"
#include "common/spec.h"
#include "common/wire.h"
#include "trainer/trn.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
json_t *__real_json_loads(const char *input, size_t flags, json_error_t *error);
json_t *__real_json_loadb(const char *buffer, size_t buflen, size_t flags,
                          json_error_t *error);
json_t *__wrap_json_loads(const char *input, size_t flags, json_error_t *error);
json_t *__wrap_json_loadb(const char *buffer, size_t buflen, size_t flags,
                          json_error_t *error);

/* ---- the injector ---- */

static int g_armed;      /* count (and maybe fail) allocations */
static long g_count;     /* allocations since armed */
static long g_fail_at;   /* the allocation that fails (0: none) */
static int g_persistent; /* from g_fail_at on, every one fails */
static int g_failed;     /* an allocation was refused in this run */
static int g_in_lexer;   /* inside json_loads/json_loadb: never refused */

/* The blocks handed out while armed and not yet freed: open addressing. */
#define LIVE_CAP (1 << 16)
static void *g_live[LIVE_CAP];
static long g_nlive;

static size_t s_slot(void *p)
{
    return (size_t)(((uintptr_t)p >> 4) * 2654435761u) & (LIVE_CAP - 1);
}

static void s_live_add(void *p)
{
    size_t i = s_slot(p);
    while (g_live[i] && g_live[i] != (void *)1)
        i = (i + 1) & (LIVE_CAP - 1);
    g_live[i] = p;
    g_nlive++;
}

static void s_live_del(void *p)
{
    for (size_t i = s_slot(p); g_live[i]; i = (i + 1) & (LIVE_CAP - 1))
        if (g_live[i] == p) {
            g_live[i] = (void *)1; /* a tombstone */
            g_nlive--;
            return;
        }
}

/* 1 when this allocation must fail. */
static int s_refuse(void)
{
    if (!g_armed || g_in_lexer)
        return 0;
    g_count++;
    if (g_fail_at > 0 &&
        (g_count == g_fail_at || (g_persistent && g_count > g_fail_at))) {
        g_failed = 1;
        return 1;
    }
    return 0;
}

static void *s_track(void *p)
{
    if (p && g_armed)
        s_live_add(p);
    return p;
}

void *__wrap_malloc(size_t n)
{
    return s_refuse() ? NULL : s_track(__real_malloc(n));
}

void *__wrap_calloc(size_t k, size_t n)
{
    return s_refuse() ? NULL : s_track(__real_calloc(k, n));
}

void *__wrap_realloc(void *p, size_t n)
{
    if (s_refuse())
        return NULL;
    void *q = __real_realloc(p, n);
    if (q && p)
        s_live_del(p);
    return s_track(q);
}

void __wrap_free(void *p)
{
    if (p)
        s_live_del(p);
    __real_free(p);
}

char *__wrap_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = __wrap_malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

char *__wrap_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = __wrap_malloc(len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = 0;
    }
    return p;
}

/* jansson's lexer, unarmed (see the top of the file); what it returns is
   tracked, so that a parse that drops it is still seen to leak. */

json_t *__wrap_json_loads(const char *input, size_t flags, json_error_t *error)
{
    g_in_lexer++;
    json_t *j = __real_json_loads(input, flags, error);
    g_in_lexer--;
    return j;
}

json_t *__wrap_json_loadb(const char *buffer, size_t buflen, size_t flags,
                          json_error_t *error)
{
    g_in_lexer++;
    json_t *j = __real_json_loadb(buffer, buflen, flags, error);
    g_in_lexer--;
    return j;
}

static void *s_json_malloc(size_t n)
{
    return __wrap_malloc(n);
}

static void s_json_free(void *p)
{
    __wrap_free(p);
}

static void s_arm(long fail_at, int persistent)
{
    memset(g_live, 0, sizeof g_live);
    g_nlive = 0;
    g_count = 0;
    g_failed = 0;
    g_fail_at = fail_at;
    g_persistent = persistent;
    g_armed = 1;
}

static long s_disarm(void)
{
    g_armed = 0;
    return g_count;
}

/* One parse: 0 on success, -1 on its error with `err` set; must leave
   nothing allocated once its result is gone. */
typedef int (*parse_fn)(void *ctx, char *err, size_t errsize);

/* Runs fn once to count, then with each allocation failing, once only and
   from there on. Returns the count of allocations it injected into. */
static long s_inject(const char *what, parse_fn fn, void *ctx)
{
    char err[512] = "";
    s_arm(0, 0);
    int rc = fn(ctx, err, sizeof err);
    long k = s_disarm();
    if (rc != 0) {
        JZT_FAIL("%s: does not parse without injection: %s", what, err);
        return 0;
    }
    if (g_nlive != 0)
        JZT_FAIL("%s: %ld blocks left without injection", what, g_nlive);
    long bad = 0;
    for (int persistent = 0; persistent <= 1; persistent++)
        for (long n = 1; n <= k; n++) {
            err[0] = 0;
            s_arm(n, persistent);
            rc = fn(ctx, err, sizeof err);
            s_disarm();
            if (bad < 5 && rc != 0 && g_failed && !strstr(err, "memory")) {
                /* an error caused by the refused allocation says so */
                JZT_FAIL(
                    "%s: allocation %ld of %ld failing%s: error \"%.200s\" does not say "
                    "out of memory",
                    what, n, k, persistent ? " (and after)" : "", err);
                bad++;
            } else if (bad < 5 && rc != 0 && !err[0]) {
                JZT_FAIL(
                    "%s: allocation %ld of %ld failing%s: an error without a message",
                    what, n, k, persistent ? " (and after)" : "");
                bad++;
            }
            if (bad < 5 && rc == 0 && persistent && g_failed && n == 1 && k > 1) {
                /* nothing at all could be allocated, yet it parsed */
                JZT_FAIL("%s: parsed with every allocation failing", what);
                bad++;
            }
            if (bad < 5 && g_nlive != 0) {
                JZT_FAIL("%s: allocation %ld of %ld failing%s: %ld blocks leaked", what,
                         n, k, persistent ? " (and after)" : "", g_nlive);
                bad++;
            }
        }
    printf("  %s: %ld allocations, each failed once and from there on: clean\n", what, k);
    return k;
}

/* ---- the parsers ---- */

static const char *s_spec_text =
    "{\"name\": \"oom\", \"objective\": {\"metric\": \"val_acc\", \"mode\": \"max\"},"
    " \"scheduler\": {\"type\": \"bo\", \"seed\": 1},"
    " \"early_stopping\": {\"type\": \"asha\", \"resource\": \"epoch\", \"grace\": 1,"
    "  \"reduction\": 3},"
    " \"budget\": {\"trials\": 32, \"parallel\": 2, \"time_s\": 420},"
    " \"space\": {"
    "  \"lr\": {\"type\": \"float\", \"low\": 0.003, \"high\": 0.3, \"log\": true},"
    "  \"batch_size\": {\"type\": \"int\", \"low\": 32, \"high\": 512, \"log\": true},"
    "  \"opt\": {\"type\": \"choice\", \"values\": [\"sgd\", \"lamb\"]},"
    "  \"beta\": {\"type\": \"float\", \"low\": 0.8, \"high\": 0.99,"
    "   \"when\": {\"opt\": [\"lamb\"]}}},"
    " \"alerts\": [{\"on\": \"trial_failed\"}, {\"on\": \"failures_in_a_row\", "
    "\"count\": 3}],"
    " \"trial\": {\"command\": [\"python3\", \"train.py\", \"--lr\", \"{lr}\"],"
    "  \"timeout_s\": 300, \"retries\": 1, \"env\": {\"A\": \"1\"}}}";

static int s_parse_spec(void *ctx, char *err, size_t errsize)
{
    json_error_t jerr;
    json_t *doc = json_loads(s_spec_text, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc) {
        snprintf(err, errsize, "json: %s", jerr.text);
        return -1;
    }
    spec_error se = {"", ""};
    spec_t *s = spec_parse(doc, 0, &se);
    json_decref(doc);
    if (!s) {
        snprintf(err, errsize, "%s%s%s", se.field, se.field[0] ? ": " : "", se.text);
        return -1;
    }
    spec_destroy(&s);
    return 0;
}

static int s_parse_alerts(void *ctx, char *err, size_t errsize)
{
    json_error_t jerr;
    json_t *doc = json_loads(
        "{\"alerts\": [{\"on\": \"trial_failed\", \"hook\": [\"notify\", \"{trial}\"],"
        " \"hook_timeout_s\": 5}, {\"on\": \"failures_in_a_row\", \"count\": 3,"
        " \"stop_study\": true}]}",
        0, &jerr);
    if (!doc) {
        snprintf(err, errsize, "json: %s", jerr.text);
        return -1;
    }
    json_t *rules = spec_alerts_file(doc, "alerts.json", err, errsize);
    json_decref(doc);
    if (!rules)
        return -1;
    json_decref(rules);
    return 0;
}

static int s_parse_authkeys(void *ctx, char *err, size_t errsize)
{
    authkeys_t k;
    authkeys_init(&k);
    if (authkeys_parse(ctx, &k, err, errsize) != 0)
        return -1;
    authkeys_fini(&k);
    return 0;
}

typedef struct {
    void *router, *dealer;
} s_pair_t;

static int s_parse_wire(void *ctx, char *err, size_t errsize)
{
    s_pair_t *p = ctx;
    static const char msg[] =
        "{\"type\": \"metrics\", \"req\": 7, \"session\": \"abc\", \"points\": "
        "[[1, \"loss\", 0.5], [2, \"loss\", 0.25], [2, \"val_acc\", 0.75]]}";
    /* sent unarmed: only the receiving side is under test */
    int armed = g_armed;
    g_armed = 0;
    zmq_send(p->dealer, "", 0, ZMQ_SNDMORE);
    zmq_send(p->dealer, msg, sizeof msg - 1, 0);
    g_armed = armed;
    wire_peer from;
    json_t *m = wire_recv(p->router, &from, 0, err, errsize);
    if (!m) {
        /* a refused message is drained: nothing is left queued */
        if (!err[0])
            snprintf(err, errsize, "(no message)");
        return -1;
    }
    long req = 0;
    char e2[128];
    int rc = wire_get_long(m, "req", &req, e2, sizeof e2);
    json_decref(m);
    if (rc != 0 || req != 7) {
        snprintf(err, errsize, "req: %s", e2);
        return -1;
    }
    return 0;
}

typedef struct {
    trn_trainer *t;
    char path[256];
} s_ckpt_t;

static int s_parse_ckpt(void *ctx, char *err, size_t errsize)
{
    s_ckpt_t *c = ctx;
    char e[TRN_ERRLEN] = "";
    if (trn_trainer_load(c->t, c->path, e) != 0) {
        snprintf(err, errsize, "%s", e);
        return -1;
    }
    return 0;
}

/* ---- tests ---- */

TEST(spec_parse_survives_every_allocation_failing)
{
    CHECK(s_inject("spec (JSON text + spec_parse)", s_parse_spec, NULL) > 20);
}

TEST(alerts_file_survives_every_allocation_failing)
{
    /* its allocations are jansson's lexer's (not injected): this checks
       that nothing else allocates, leaks or fails */
    CHECK(s_inject("alerts file (spec_alerts_file)", s_parse_alerts, NULL) >= 0);
}

TEST(authkeys_survive_every_allocation_failing)
{
    keys_pair a, b;
    REQUIRE(keys_generate(&a) == 0 && keys_generate(&b) == 0);
    char text[512];
    snprintf(text, sizeof text, "# keys\n%s alice admin\n\n%s bot.1 dispatcher\n", a.pub,
             b.pub);
    CHECK(s_inject("authorized keys (authkeys_parse)", s_parse_authkeys, text) >= 1);
}

TEST(wire_recv_survives_every_allocation_failing)
{
    void *ctx = zmq_ctx_new();
    s_pair_t p = {zmq_socket(ctx, ZMQ_ROUTER), zmq_socket(ctx, ZMQ_DEALER)};
    REQUIRE(p.router && p.dealer);
    wire_socket_setup(p.router);
    wire_socket_setup(p.dealer);
    REQUIRE(zmq_bind(p.router, "inproc://oom") == 0);
    REQUIRE(zmq_connect(p.dealer, "inproc://oom") == 0);
    /* as the alerts file: the lexer's allocations only */
    CHECK(s_inject("wire message (wire_recv)", s_parse_wire, &p) >= 0);
    /* every message was taken off the socket, refused or not */
    zmq_pollitem_t it = {p.router, 0, ZMQ_POLLIN, 0};
    CHECK(zmq_poll(&it, 1, 0) == 0);
    zmq_close(p.router);
    zmq_close(p.dealer);
    zmq_ctx_term(ctx);
}

TEST(checkpoint_load_survives_every_allocation_failing)
{
    trn_config c;
    trn_config_defaults(&c);
    strcpy(c.dataset, "synthetic");
    c.synthetic_n = 20;
    c.val_size = 0;
    strcpy(c.hidden, "4");
    c.epochs = 1;
    c.batch_size = 5;
    c.quiet = 1;
    trn_dataset tr, va, te;
    char err[TRN_ERRLEN];
    REQUIRE(trn_data_load(&c, &tr, &va, &te, err) == 0);
    trn_trainer *t = trn_trainer_new(&c, &tr, &va, &te, err);
    REQUIRE(t);
    s_ckpt_t ck = {t, ""};
    snprintf(ck.path, sizeof ck.path, "/tmp/jz-test-oom-%d.jzck", (int)getpid());
    REQUIRE(trn_trainer_run(t, err) == 0);
    REQUIRE(trn_trainer_save(t, ck.path, err) == 0);
    CHECK(s_inject("checkpoint (trn_trainer_load)", s_parse_ckpt, &ck) > 0);
    unlink(ck.path);
    trn_trainer_destroy(&t);
    trn_data_free(&tr);
    trn_data_free(&va);
    trn_data_free(&te);
}

int main(void)
{
    json_set_alloc_funcs(s_json_malloc, s_json_free);
    RUN(spec_parse_survives_every_allocation_failing);
    RUN(alerts_file_survives_every_allocation_failing);
    RUN(authkeys_survive_every_allocation_failing);
    RUN(wire_recv_survives_every_allocation_failing);
    RUN(checkpoint_load_survives_every_allocation_failing);
    TEST_DONE();
}
