/*  test_wire.c - message framing and decoding (common/wire.c) over real
    ZeroMQ sockets: a ROUTER bound on inproc:// or on ipc:// in a temp
    folder and a DEALER connected to it. Covers the round trip both ways,
    every malformed shape (not JSON, not an object, no type, too many
    frames, no empty delimiter, oversize) with the socket staying in sync
    afterwards, non-finite doubles, the typed getters, and wire_request
    matching its reply and dropping stale ones.
*/
#include "jz_test.h"
#include "common/wire.h"
#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <zmq.h>

static void *s_ctx;

/* A connected ROUTER/DEALER pair. */
typedef struct {
    void *router, *dealer;
    char endpoint[256];
    char dir[128]; /* temp folder for ipc, "" for inproc */
} pair_t;

static int s_pair_open(pair_t *p, int ipc, const char *dealer_id)
{
    static int counter;
    memset(p, 0, sizeof *p);
    if (ipc) {
        snprintf(p->dir, sizeof p->dir, "/tmp/jz-test-wire-XXXXXX");
        if (!mkdtemp(p->dir))
            return -1;
        snprintf(p->endpoint, sizeof p->endpoint, "ipc://%s/ctl.sock", p->dir);
    } else {
        snprintf(p->endpoint, sizeof p->endpoint, "inproc://wire-test-%d", counter++);
    }
    p->router = zmq_socket(s_ctx, ZMQ_ROUTER);
    p->dealer = zmq_socket(s_ctx, ZMQ_DEALER);
    wire_socket_setup(p->router);
    wire_socket_setup(p->dealer);
    if (dealer_id)
        zmq_setsockopt(p->dealer, ZMQ_ROUTING_ID, dealer_id, strlen(dealer_id));
    if (zmq_bind(p->router, p->endpoint) != 0 || zmq_connect(p->dealer, p->endpoint) != 0)
        return -1;
    return 0;
}

static void s_pair_close(pair_t *p)
{
    zmq_close(p->dealer);
    zmq_close(p->router);
    if (p->dir[0]) {
        char sock[300];
        snprintf(sock, sizeof sock, "%s/ctl.sock", p->dir);
        unlink(sock);
        rmdir(p->dir);
    }
}

/* Sends raw frames (NULL-ended list of strings) from a socket. */
static void s_send_frames(void *sock, const char *const *frames)
{
    for (const char *const *f = frames; *f; f++)
        zmq_send(sock, *f, strlen(*f), f[1] ? ZMQ_SNDMORE : 0);
}

/* A well-formed message with n:k. */
static json_t *s_msg(const char *type, long k)
{
    return json_pack("{s:s, s:I}", "type", type, "n", (json_int_t)k);
}

/* Receives on the ROUTER and checks that it is the good message n:k. */
static void s_expect_good(pair_t *p, long k, int line)
{
    wire_peer from;
    char err[256];
    json_t *m = wire_recv(p->router, &from, 0, err, sizeof err);
    if (!m) {
        JZT_FAIL("line %d: good message refused: %s", line, err);
        return;
    }
    if (strcmp(wire_type(m), "good") || json_integer_value(json_object_get(m, "n")) != k)
        JZT_FAIL("line %d: got another message", line);
    json_decref(m);
}

/* ---- round trips ------------------------------------------------------- */

static void s_roundtrip(int ipc)
{
    pair_t p;
    REQUIRE(s_pair_open(&p, ipc, "peer-7") == 0);
    char err[256];
    json_t *m = json_pack("{s:s, s:I, s:s, s:[i,i], s:{s:b}}", "type", "hello", "req",
                          (json_int_t)5, "text", "héllo \"quoted\"", "list", 1, 2, "obj",
                          "flag", 1);
    json_t *copy = json_deep_copy(m);
    CHECK(wire_send(p.dealer, NULL, m, 0) == 0);
    wire_peer from;
    memset(&from, 0xAB, sizeof from);
    json_t *got = wire_recv(p.router, &from, 0, err, sizeof err);
    REQUIRE(got);
    CHECK(json_equal(got, copy));
    CHECK_STR(wire_type(got), "hello");
    CHECK(from.len == 6 && !memcmp(from.id, "peer-7", 6));
    json_decref(got);
    json_decref(copy);
    /* and back to the peer by its routing id */
    CHECK(wire_send(p.router, &from, wire_ok(5), 0) == 0);
    got = wire_recv(p.dealer, NULL, 0, err, sizeof err);
    REQUIRE(got);
    CHECK_STR(wire_type(got), "ok");
    CHECK(json_integer_value(json_object_get(got, "req")) == 5);
    json_decref(got);
    s_pair_close(&p);
}

TEST(roundtrip_inproc)
{
    s_roundtrip(0);
}

TEST(roundtrip_ipc)
{
    s_roundtrip(1);
}

TEST(nothing_there)
{
    pair_t p;
    REQUIRE(s_pair_open(&p, 0, NULL) == 0);
    char err[64] = "junk";
    wire_peer from;
    errno = 0;
    CHECK(wire_recv(p.router, &from, 1, err, sizeof err) == NULL);
    CHECK(errno == EAGAIN);
    CHECK_STR(err, ""); /* not malformed: nothing said */
    errno = 0;
    CHECK(wire_recv(p.dealer, NULL, 1, err, sizeof err) == NULL);
    CHECK(errno == EAGAIN);
    s_pair_close(&p);
}

/* wire_send takes the message even when it fails (ASan sees a leak if not). */
TEST(send_failures)
{
    void *lonely = zmq_socket(s_ctx, ZMQ_DEALER);
    wire_socket_setup(lonely);
    errno = 0;
    CHECK(wire_send(lonely, NULL, s_msg("x", 1), 1) == -1); /* no peer: would block */
    CHECK(errno == EAGAIN);
    CHECK(wire_send(lonely, NULL, NULL, 1) == -1); /* nothing to encode */
    zmq_close(lonely);
}

/* ---- malformed, seen by the ROUTER ------------------------------------- */

TEST(malformed_at_router)
{
    pair_t p;
    REQUIRE(s_pair_open(&p, 0, "bad-peer") == 0);
    struct {
        const char *frames[6];
        const char *want; /* substring of err */
    } cases[] = {
        {{"", "not json", NULL}, "invalid JSON"},
        {{"", "", NULL}, "invalid JSON"},
        {{"", "{\"type\":\"x\",", NULL}, "invalid JSON"},
        {{"", "{\"type\":\"x\",\"type\":\"y\"}", NULL}, "invalid JSON"},
        {{"", "[1,2]", NULL}, "not a JSON object with a string \"type\""},
        {{"", "\"hello\"", NULL}, "invalid JSON"}, /* a bare string is not a message */
        {{"", "{\"kind\":\"x\"}", NULL}, "not a JSON object with a string \"type\""},
        {{"", "{\"type\":5}", NULL}, "not a JSON object with a string \"type\""},
        {{"", "{\"type\":null}", NULL}, "not a JSON object"},
        /* too many frames: id + 3 or more */
        {{"", "{\"type\":\"x\"}", "extra", NULL}, "too many frames"},
        {{"", "{\"type\":\"x\"}", "a", "b", "c", NULL}, "too many frames"},
        /* no empty delimiter */
        {{"{\"type\":\"x\"}", NULL}, "expected 3 frames with an empty delimiter, got 2"},
        {{"x", "{\"type\":\"x\"}", NULL}, "empty delimiter"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s_send_frames(p.dealer, cases[i].frames);
        /* a good one right behind: the socket must stay in sync */
        CHECK(wire_send(p.dealer, NULL, s_msg("good", (long)i), 0) == 0);
        wire_peer from;
        char err[256] = "";
        errno = 0;
        json_t *m = wire_recv(p.router, &from, 0, err, sizeof err);
        if (m) {
            JZT_FAIL("case %zu accepted", i);
            json_decref(m);
        } else {
            if (errno != EPROTO)
                JZT_FAIL("case %zu: errno %d, expected EPROTO", i, errno);
            if (!strstr(err, cases[i].want))
                JZT_FAIL("case %zu: err \"%s\", expected \"%s\"", i, err, cases[i].want);
            /* the sender is still known, so it can be answered */
            if (from.len != 8 || memcmp(from.id, "bad-peer", 8))
                JZT_FAIL("case %zu: sender not filled", i);
        }
        s_expect_good(&p, (long)i, __LINE__);
    }
    s_pair_close(&p);
}

/* A message with too many frames names its own sender, not the peer heard
   before it (it is answered there). */
TEST(too_many_frames_names_its_sender)
{
    pair_t p;
    REQUIRE(s_pair_open(&p, 0, "peer-a") == 0);
    void *b = zmq_socket(s_ctx, ZMQ_DEALER);
    REQUIRE(b != NULL);
    zmq_setsockopt(b, ZMQ_ROUTING_ID, "peer-b", 6);
    REQUIRE(zmq_connect(b, p.endpoint) == 0);
    CHECK(wire_send(p.dealer, NULL, s_msg("good", 1), 0) == 0);
    wire_peer from;
    memset(&from, 0, sizeof from);
    char err[256] = "";
    json_t *m = wire_recv(p.router, &from, 0, err, sizeof err);
    CHECK(m != NULL && from.len == 6 && !memcmp(from.id, "peer-a", 6));
    json_decref(m);
    const char *frames[] = {"", "{\"type\":\"x\"}", "a", "b", NULL};
    s_send_frames(b, frames);
    CHECK(wire_recv(p.router, &from, 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "too many frames") != NULL);
    CHECK(from.len == 6 && !memcmp(from.id, "peer-b", 6));
    zmq_close(b);
    s_pair_close(&p);
}

/* A malformed message with err NULL must not crash. */
TEST(malformed_without_err_buffer)
{
    pair_t p;
    REQUIRE(s_pair_open(&p, 0, NULL) == 0);
    const char *f1[] = {"", "nope", NULL};
    s_send_frames(p.dealer, f1);
    wire_peer from;
    CHECK(wire_recv(p.router, &from, 0, NULL, 0) == NULL);
    const char *f2[] = {"", "{}", "x", "y", NULL};
    s_send_frames(p.dealer, f2);
    CHECK(wire_recv(p.router, &from, 0, NULL, 0) == NULL);
    CHECK(wire_send(p.dealer, NULL, s_msg("good", 1), 0) == 0);
    s_expect_good(&p, 1, __LINE__);
    s_pair_close(&p);
}

/* ---- malformed, seen by the DEALER ------------------------------------- */

TEST(malformed_at_dealer)
{
    pair_t p;
    REQUIRE(s_pair_open(&p, 0, "d") == 0);
    /* learn the route first */
    CHECK(wire_send(p.dealer, NULL, s_msg("hi", 0), 0) == 0);
    wire_peer from;
    char err[256];
    json_t *m = wire_recv(p.router, &from, 0, err, sizeof err);
    REQUIRE(m);
    json_decref(m);
    struct {
        const char *frames[5]; /* after the routing id */
        const char *want;
    } cases[] = {
        {{"{\"type\":\"x\"}", NULL}, "expected 2 frames with an empty delimiter, got 1"},
        {{"", "{\"type\":\"x\"}", "more", NULL}, "expected 2 frames"},
        {{"", "{\"type\":\"x\"}", "a", "b", NULL}, "too many frames"},
        {{"", "{nope", NULL}, "invalid JSON"},
        {{"", "{}", NULL}, "not a JSON object with a string \"type\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zmq_send(p.router, from.id, from.len, ZMQ_SNDMORE);
        s_send_frames(p.router, cases[i].frames);
        CHECK(wire_send(p.router, &from, s_msg("good", (long)i), 0) == 0);
        err[0] = 0;
        m = wire_recv(p.dealer, NULL, 0, err, sizeof err);
        if (m) {
            JZT_FAIL("case %zu accepted", i);
            json_decref(m);
        } else if (!strstr(err, cases[i].want)) {
            JZT_FAIL("case %zu: err \"%s\", expected \"%s\"", i, err, cases[i].want);
        }
        m = wire_recv(p.dealer, NULL, 0, err, sizeof err);
        if (!m || strcmp(wire_type(m), "good") ||
            json_integer_value(json_object_get(m, "n")) != (json_int_t)i)
            JZT_FAIL("case %zu: the next good message was lost (%s)", i, m ? "" : err);
        json_decref(m);
    }
    s_pair_close(&p);
}

/* ---- size limit (over ipc, so the socket's own limit applies too) ------- */

/* A JSON body of exactly `size` bytes: {"type":"big","pad":"xxx..."}. */
static char *s_big_body(size_t size)
{
    const char *head = "{\"type\":\"big\",\"pad\":\"", *tail = "\"}";
    char *b = malloc(size + 1);
    size_t h = strlen(head), t = strlen(tail);
    memcpy(b, head, h);
    memset(b + h, 'x', size - h - t);
    memcpy(b + size - t, tail, t);
    b[size] = 0;
    return b;
}

TEST(size_limit)
{
    pair_t p;
    REQUIRE(s_pair_open(&p, 1, NULL) == 0);
    char err[256];
    wire_peer from;
    /* exactly at the limit: accepted */
    char *body = s_big_body(WIRE_MAX_BYTES);
    const char *f1[] = {"", body, NULL};
    s_send_frames(p.dealer, f1);
    json_t *m = wire_recv(p.router, &from, 0, err, sizeof err);
    CHECK(m != NULL);
    if (m)
        CHECK(strlen(json_string_value(json_object_get(m, "pad"))) ==
              WIRE_MAX_BYTES - 23);
    json_decref(m);
    free(body);
    /* one byte over: refused by wire_recv (still under the socket's limit) */
    body = s_big_body(WIRE_MAX_BYTES + 1);
    const char *f2[] = {"", body, NULL};
    s_send_frames(p.dealer, f2);
    CHECK(wire_send(p.dealer, NULL, s_msg("good", 3), 0) == 0);
    m = wire_recv(p.router, &from, 0, err, sizeof err);
    CHECK(m == NULL);
    CHECK(strstr(err, "over the 16777216-byte limit") != NULL);
    CHECK(strstr(err, "16777217 bytes") != NULL);
    json_decref(m);
    free(body);
    s_expect_good(&p, 3, __LINE__);
    s_pair_close(&p);
}

/* ---- values and fields ------------------------------------------------- */

TEST(non_finite_doubles)
{
    json_t *v = wire_real(NAN);
    CHECK_STR(json_string_value(v), "nan");
    json_decref(v);
    v = wire_real(INFINITY);
    CHECK_STR(json_string_value(v), "inf");
    json_decref(v);
    v = wire_real(-INFINITY);
    CHECK_STR(json_string_value(v), "-inf");
    json_decref(v);
    v = wire_real(-0.25);
    CHECK(json_is_real(v) && json_real_value(v) == -0.25);
    json_decref(v);

    double x = 0;
    v = json_string("nan");
    CHECK(wire_to_double(v, &x) == 0 && isnan(x));
    json_decref(v);
    v = json_string("inf");
    CHECK(wire_to_double(v, &x) == 0 && isinf(x) && x > 0);
    json_decref(v);
    v = json_string("-inf");
    CHECK(wire_to_double(v, &x) == 0 && isinf(x) && x < 0);
    json_decref(v);
    v = json_integer(7);
    CHECK(wire_to_double(v, &x) == 0 && x == 7.0);
    json_decref(v);
    v = json_real(1e-300);
    CHECK(wire_to_double(v, &x) == 0 && x == 1e-300);
    json_decref(v);
    x = 42;
    json_t *bad[] = {json_string("NaN"), json_string("infinity"),
                     json_string(""),    json_true(),
                     json_null(),        json_array()};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(wire_to_double(bad[i], &x) == -1);
        json_decref(bad[i]);
    }
    CHECK(wire_to_double(NULL, &x) == -1);
    CHECK(x == 42); /* untouched on failure */
}

/* wire_none() is "no value", a reported NaN is a value: the encoder and
   the store tell them apart (issue 36 item 8) */
TEST(none_and_nan_differ)
{
    double none = wire_none();
    CHECK(isnan(none) && wire_is_none(none));
    CHECK(!wire_is_none(NAN) && !wire_is_none(-NAN) && !wire_is_none(0.0));
    CHECK(!wire_is_none(INFINITY) && !wire_is_none(-INFINITY));
    double copy = none; /* copies keep it */
    CHECK(wire_is_none(copy));
    CHECK(!wire_is_none(strtod("nan", NULL)));

    json_t *v = wire_real(none);
    CHECK(json_is_null(v));
    json_decref(v);
    CHECK(wire_real_name(none) == NULL && wire_real_name(1.5) == NULL);
    CHECK_STR(wire_real_name(NAN), "nan");
    CHECK_STR(wire_real_name(-NAN), "nan");
    CHECK_STR(wire_real_name(INFINITY), "inf");
    CHECK_STR(wire_real_name(-INFINITY), "-inf");
    CHECK_STR(wire_real_name(-HUGE_VAL), "-inf");

    /* every double gives a value json_dumps can write */
    double xs[] = {0.0, -0.0, 1e308, -1e-308, 5e-324, NAN, INFINITY, -INFINITY, none};
    json_t *arr = json_array();
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        json_t *e = wire_real(xs[i]);
        CHECK(e != NULL);
        json_array_append_new(arr, e);
    }
    char *text = json_dumps(arr, JSON_COMPACT);
    REQUIRE(text);
    CHECK_STR(strchr(text, '"'), "\"nan\",\"inf\",\"-inf\",null]");
    free(text);
    /* and reads back: the same doubles, none as none */
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        double x = 42;
        CHECK(wire_to_value(json_array_get(arr, i), &x) == 0);
        if (isnan(xs[i]))
            CHECK(isnan(x) && wire_is_none(x) == wire_is_none(xs[i]));
        else
            CHECK(x == xs[i]);
    }
    json_decref(arr);
    double x = 42;
    CHECK(wire_to_value(NULL, &x) == 0 && wire_is_none(x));
    v = json_string("NaN");
    x = 42;
    CHECK(wire_to_value(v, &x) == -1 && x == 42);
    json_decref(v);
    /* a decoded "nan" is a value, never none */
    v = json_string("nan");
    CHECK(wire_to_double(v, &x) == 0 && isnan(x) && !wire_is_none(x));
    json_decref(v);
}

TEST(non_finite_over_the_wire)
{
    pair_t p;
    REQUIRE(s_pair_open(&p, 0, NULL) == 0);
    json_t *m = json_pack("{s:s, s:o, s:o, s:o, s:o}", "type", "metrics", "a",
                          wire_real(NAN), "b", wire_real(INFINITY), "c",
                          wire_real(-INFINITY), "d", wire_real(0.5));
    CHECK(wire_send(p.dealer, NULL, m, 0) == 0);
    wire_peer from;
    char err[256];
    json_t *got = wire_recv(p.router, &from, 0, err, sizeof err);
    REQUIRE(got);
    double a, b, c, d;
    CHECK(wire_get_double(got, "a", &a, err, sizeof err) == 0 && isnan(a));
    CHECK(wire_get_double(got, "b", &b, err, sizeof err) == 0 && b == INFINITY);
    CHECK(wire_get_double(got, "c", &c, err, sizeof err) == 0 && c == -INFINITY);
    CHECK(wire_get_double(got, "d", &d, err, sizeof err) == 0 && d == 0.5);
    json_decref(got);
    s_pair_close(&p);
}

TEST(getters)
{
    json_t *m = json_pack("{s:s, s:I, s:f, s:s, s:b}", "type", "t", "i", (json_int_t)-12,
                          "f", 2.5, "s", "text", "b", 1);
    char err[128];
    long l = 0;
    double d = 0;
    const char *s = NULL;
    CHECK(wire_get_long(m, "i", &l, err, sizeof err) == 0 && l == -12);
    CHECK(wire_get_double(m, "i", &d, err, sizeof err) == 0 && d == -12);
    CHECK(wire_get_double(m, "f", &d, err, sizeof err) == 0 && d == 2.5);
    CHECK(wire_get_str(m, "s", &s, err, sizeof err) == 0 && !strcmp(s, "text"));
    CHECK(wire_get_long(m, "f", &l, err, sizeof err) == -1);
    CHECK_STR(err, "field 'f': expected an integer");
    CHECK(wire_get_long(m, "missing", &l, err, sizeof err) == -1);
    CHECK_STR(err, "field 'missing': expected an integer");
    CHECK(wire_get_double(m, "s", &d, err, sizeof err) == -1);
    CHECK_STR(err, "field 's': expected a number");
    CHECK(wire_get_double(m, "b", &d, err, sizeof err) == -1);
    CHECK(wire_get_str(m, "i", &s, err, sizeof err) == -1);
    CHECK_STR(err, "field 'i': expected a string");
    CHECK_STR(wire_type(m), "t");
    json_t *notype = json_object();
    CHECK_STR(wire_type(notype), "");
    json_decref(notype);
    json_decref(m);
}

TEST(replies)
{
    json_t *ok = wire_ok(17);
    CHECK_STR(wire_type(ok), "ok");
    CHECK(json_integer_value(json_object_get(ok, "req")) == 17);
    CHECK(json_object_size(ok) == 2);
    json_decref(ok);
    json_t *e = wire_error(3, "unknown_trial", "no trial %d in study %s", 9, "s1");
    CHECK_STR(wire_type(e), "error");
    CHECK(json_integer_value(json_object_get(e, "req")) == 3);
    CHECK_STR(json_string_value(json_object_get(e, "code")), "unknown_trial");
    CHECK_STR(json_string_value(json_object_get(e, "message")), "no trial 9 in study s1");
    json_decref(e);
}

/* ---- wire_request -------------------------------------------------------- */

/* A server thread on the ROUTER: for each request it sends, in order, a
   stale reply (req - 1000), a reply with no req, a reply to the last
   request it left unanswered (if any), and then the right reply. Requests
   of type "mute" are left unanswered; "quit" ends the thread. */
typedef struct {
    void *router;
    int served;
} server_t;

static void *s_server(void *arg)
{
    server_t *sv = arg;
    long unanswered = -1;
    for (;;) {
        wire_peer from;
        char err[256];
        json_t *m = wire_recv(sv->router, &from, 0, err, sizeof err);
        if (!m)
            continue;
        long req = (long)json_integer_value(json_object_get(m, "req"));
        if (!strcmp(wire_type(m), "quit")) {
            json_decref(m);
            break;
        }
        if (!strcmp(wire_type(m), "mute")) {
            unanswered = req;
            json_decref(m);
            continue;
        }
        wire_send(sv->router, &from, wire_ok(req - 1000), 0);
        wire_send(sv->router, &from, json_pack("{s:s}", "type", "ok"), 0);
        if (unanswered >= 0) {
            wire_send(sv->router, &from, wire_error(unanswered, "timeout", "late"), 0);
            unanswered = -1;
        }
        json_t *r = wire_ok(req);
        json_object_set(r, "echo", json_object_get(m, "n"));
        wire_send(sv->router, &from, r, 0);
        sv->served++;
        json_decref(m);
    }
    return NULL;
}

TEST(request_matching)
{
    pair_t p;
    REQUIRE(s_pair_open(&p, 0, NULL) == 0);
    server_t sv = {p.router, 0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, s_server, &sv) == 0);
    char err[256];
    for (long k = 0; k < 5; k++) {
        json_t *r = wire_request(p.dealer, s_msg("ask", k), 5000, err, sizeof err);
        CHECK(r != NULL);
        if (r) {
            CHECK_STR(wire_type(r), "ok");
            CHECK(json_integer_value(json_object_get(r, "echo")) == k);
        }
        json_decref(r);
    }
    /* an unanswered request times out ... */
    err[0] = 0;
    json_t *r = wire_request(p.dealer, s_msg("mute", 99), 50, err, sizeof err);
    CHECK(r == NULL);
    CHECK_STR(err, "timeout");
    /* ... and its late answer does not pass for the next request's */
    r = wire_request(p.dealer, s_msg("ask", 100), 5000, err, sizeof err);
    CHECK(r != NULL);
    if (r) {
        CHECK_STR(wire_type(r), "ok");
        CHECK(json_integer_value(json_object_get(r, "echo")) == 100);
    }
    json_decref(r);
    /* nothing left behind: every stale reply was dropped */
    CHECK(wire_send(p.dealer, NULL, json_pack("{s:s}", "type", "quit"), 0) == 0);
    pthread_join(th, NULL);
    CHECK(sv.served == 6);
    char e2[64];
    errno = 0;
    CHECK(wire_recv(p.dealer, NULL, 1, e2, sizeof e2) == NULL && errno == EAGAIN);
    s_pair_close(&p);
}

/* A malformed reply ends the wait with its reason. */
static void *s_bad_server(void *arg)
{
    server_t *sv = arg;
    wire_peer from;
    char err[256];
    json_t *m = wire_recv(sv->router, &from, 0, err, sizeof err);
    if (m) {
        zmq_send(sv->router, from.id, from.len, ZMQ_SNDMORE);
        zmq_send(sv->router, "", 0, ZMQ_SNDMORE);
        zmq_send(sv->router, "garbage", 7, 0);
        sv->served++;
        json_decref(m);
    }
    return NULL;
}

TEST(request_malformed_reply)
{
    pair_t p;
    REQUIRE(s_pair_open(&p, 0, NULL) == 0);
    server_t sv = {p.router, 0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, s_bad_server, &sv) == 0);
    char err[256] = "";
    json_t *r = wire_request(p.dealer, s_msg("ask", 1), 5000, err, sizeof err);
    pthread_join(th, NULL);
    CHECK(r == NULL);
    CHECK(strstr(err, "invalid JSON") != NULL);
    CHECK(sv.served == 1);
    json_decref(r);
    s_pair_close(&p);
}

TEST(clocks)
{
    double a = util_now(), b = util_now();
    CHECK(b >= a);
    CHECK(util_wall() > 1.5e9); /* after 2017 */
}

int main(void)
{
    s_ctx = zmq_ctx_new();
    RUN(roundtrip_inproc);
    RUN(roundtrip_ipc);
    RUN(nothing_there);
    RUN(send_failures);
    RUN(malformed_at_router);
    RUN(too_many_frames_names_its_sender);
    RUN(malformed_without_err_buffer);
    RUN(malformed_at_dealer);
    RUN(size_limit);
    RUN(non_finite_doubles);
    RUN(none_and_nan_differ);
    RUN(non_finite_over_the_wire);
    RUN(getters);
    RUN(replies);
    RUN(request_matching);
    RUN(request_malformed_reply);
    RUN(clocks);
    zmq_ctx_term(s_ctx);
    TEST_DONE();
}
