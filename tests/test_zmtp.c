/*  test_zmtp.c - the ZMTP 3 client (common/zmtp.c) against a real libzmq
    ROUTER bound on ipc:// in a temp folder: multi-frame messages both
    ways, a long-size frame (> 255 bytes) and one larger than a read, two
    messages on one connection, a frame over the caller's limit, a timeout
    with nothing answered; and against plain unix sockets that this test
    writes bytes into: a peer that is no ZMTP peer, one that closes in the
    middle of a reply, one that sends the ERROR command, silence. Then
    client_call (common/client.c) over ipc:// against a ROUTER that
    answers as the controller does, and to a path where nothing listens.
*/
#include "jz_test.h"
#include "common/client.h"
#include "common/util.h"
#include "common/wire.h"
#include "common/zmtp.h"

#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

static void *s_ctx;
static char s_dir[64];
static char s_path[128]; /* the socket of the current test */

/* A ROUTER bound on ipc://s_path, receiving with a 5 s timeout. */
static void *s_router(void)
{
    void *r = zmq_socket(s_ctx, ZMQ_ROUTER);
    int tmo = 5000, linger = 0;
    zmq_setsockopt(r, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(r, ZMQ_LINGER, &linger, sizeof linger);
    char ep[200];
    snprintf(ep, sizeof ep, "ipc://%s", s_path);
    if (zmq_bind(r, ep) != 0) {
        zmq_close(r);
        return NULL;
    }
    return r;
}

/* Receives one message on a ZeroMQ socket into parts (each malloc'd,
   NUL-terminated) with sizes; returns the number of frames, -1. */
static int s_zrecv(void *sock, char **parts, size_t *sizes, int max)
{
    int n = 0, more = 1;
    while (more && n < max) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            return -1;
        }
        sizes[n] = zmq_msg_size(&m);
        parts[n] = malloc(sizes[n] + 1);
        memcpy(parts[n], zmq_msg_data(&m), sizes[n]);
        parts[n][sizes[n]] = 0;
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        n++;
    }
    return n;
}

static void s_set_path(const char *name)
{
    snprintf(s_path, sizeof s_path, "%s/%s.sock", s_dir, name);
    unlink(s_path);
}

static char *s_filled(size_t n, char c)
{
    char *p = malloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (char)(c + i % 7);
    return p;
}

TEST(round_trips_with_a_router)
{
    s_set_path("rt");
    void *r = s_router();
    REQUIRE(r != NULL);
    char err[256] = "";
    zmtp_t *z = zmtp_new(s_path, err, sizeof err);
    REQUIRE(z != NULL);
    char *big = s_filled(300, 'a'); /* a long-size frame */
    zmtp_frame out[3] = {{(unsigned char *)"", 0},
                         {(unsigned char *)"hello", 5},
                         {(unsigned char *)big, 300}};
    REQUIRE(zmtp_send(z, out, 3, 5000, err, sizeof err) == 0);
    char *parts[8];
    size_t sizes[8];
    int n = s_zrecv(r, parts, sizes, 8);
    if (n != 4)
        printf("  the ROUTER got %d frames: %s\n", n, zmq_strerror(errno));
    if (n != 4)
        zmq_close(r);
    REQUIRE(n == 4); /* the ROUTER adds the routing id */
    CHECK(sizes[1] == 0);
    CHECK_STR(parts[2], "hello");
    CHECK(sizes[3] == 300 && !memcmp(parts[3], big, 300));

    /* the answer: 4 frames, one of 200 000 bytes (more than one read) */
    size_t huge_n = 200000;
    char *huge = s_filled(huge_n, 'k');
    zmq_send(r, parts[0], sizes[0], ZMQ_SNDMORE);
    zmq_send(r, "", 0, ZMQ_SNDMORE);
    zmq_send(r, "x", 1, ZMQ_SNDMORE);
    zmq_send(r, huge, huge_n, ZMQ_SNDMORE);
    zmq_send(r, "end", 3, 0);
    zmtp_msg m;
    int rc = zmtp_recv(z, &m, 1 << 20, 5000, err, sizeof err);
    CHECK(rc == 1);
    if (rc == 1) {
        CHECK(m.n == 4);
        CHECK(m.f[0].size == 0);
        CHECK(m.f[1].size == 1 && m.f[1].data[0] == 'x');
        CHECK(m.f[2].size == huge_n && !memcmp(m.f[2].data, huge, huge_n));
        CHECK(m.f[3].size == 3 && !memcmp(m.f[3].data, "end", 3));
        zmtp_msg_fini(&m);
    } else {
        printf("  zmtp_recv: %s\n", err);
    }

    /* a second message each way on the same connection */
    zmtp_frame again[2] = {{(unsigned char *)"", 0}, {(unsigned char *)"two", 3}};
    REQUIRE(zmtp_send(z, again, 2, 5000, err, sizeof err) == 0);
    char *p2[8];
    size_t s2[8];
    int n2 = s_zrecv(r, p2, s2, 8);
    CHECK(n2 == 3 && !strcmp(p2[2], "two"));
    zmq_send(r, parts[0], sizes[0], ZMQ_SNDMORE);
    zmq_send(r, "", 0, ZMQ_SNDMORE);
    zmq_send(r, "back", 4, 0);
    rc = zmtp_recv(z, &m, 1 << 20, 5000, err, sizeof err);
    CHECK(rc == 1 && m.n == 2 && m.f[1].size == 4 && !memcmp(m.f[1].data, "back", 4));
    zmtp_msg_fini(&m);

    /* nothing more: the time runs out, and the connection stays usable */
    rc = zmtp_recv(z, &m, 1 << 20, 50, err, sizeof err);
    CHECK(rc == 0 && m.n == 0);

    /* a frame over the caller's limit is refused before it is read */
    zmq_send(r, parts[0], sizes[0], ZMQ_SNDMORE);
    zmq_send(r, "", 0, ZMQ_SNDMORE);
    zmq_send(r, huge, 5000, 0);
    rc = zmtp_recv(z, &m, 1000, 5000, err, sizeof err);
    CHECK(rc == -1 && errno == EPROTO);
    CHECK(strstr(err, "5000 bytes") && strstr(err, "limit of 1000"));
    CHECK(zmtp_send(z, again, 2, 100, err, sizeof err) == -1); /* broken from now on */

    for (int i = 0; i < n; i++)
        free(parts[i]);
    for (int i = 0; i < n2; i++)
        free(p2[i]);
    free(big);
    free(huge);
    zmtp_destroy(&z);
    CHECK(z == NULL);
    zmtp_destroy(&z); /* NULL is fine */
    zmq_close(r);
}

/* A listening plain unix socket at s_path. */
static int s_plain_listener(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(s_path) >= sizeof sa.sun_path) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    memcpy(sa.sun_path, s_path, strlen(s_path) + 1);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(fd, 4) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* The greeting and READY (Socket-Type ROUTER) a ZMTP ROUTER sends. */
static size_t s_server_hello(unsigned char *b)
{
    unsigned char g[64] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 1, 'N', 'U', 'L', 'L'};
    memcpy(b, g, 64);
    static const char ready[] = "\x05READY\x0bSocket-Type\0\0\0\x06ROUTER";
    b[64] = 0x04;
    b[65] = sizeof ready - 1;
    memcpy(b + 66, ready, sizeof ready - 1);
    return 66 + sizeof ready - 1;
}

/* Connects a client to a plain listener, writes `len` bytes of `bytes`
   from the server's side (then closes it if `close_after`), and
   receives with timeout_ms. Returns zmtp_recv's result, err filled. */
static int s_against_plain(const void *bytes, size_t len, int close_after, int timeout_ms,
                           char *err, size_t errsize)
{
    int l = s_plain_listener();
    if (l < 0)
        return -2;
    zmtp_t *z = zmtp_new(s_path, err, errsize);
    int c = z ? accept(l, NULL, NULL) : -1;
    int rc = -2;
    if (c >= 0) {
        if (len)
            rc = (int)write(c, bytes, len) == (int)len ? 0 : -2;
        else
            rc = 0;
        if (close_after)
            close(c);
        zmtp_msg m;
        if (rc == 0)
            rc = zmtp_recv(z, &m, 1 << 20, timeout_ms, err, errsize);
        if (rc == 1)
            zmtp_msg_fini(&m);
        if (!close_after)
            close(c);
    }
    zmtp_destroy(&z);
    close(l);
    unlink(s_path);
    return rc;
}

/* Whether needle's bytes appear in hay. */
static int s_contains(const unsigned char *hay, size_t n, const unsigned char *needle,
                      size_t k)
{
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(hay + i, needle, k))
            return 1;
    return 0;
}

/* As s_against_plain without closing early: writes bytes at once, lets the
   client receive one message, then reads everything the client sent until
   it closes (greeting, READY, and any command it answered with). */
static int s_ping_exchange(const void *bytes, size_t len, unsigned char *got,
                           size_t gotsize, size_t *gotlen)
{
    char err[256] = "";
    int l = s_plain_listener();
    if (l < 0)
        return -2;
    zmtp_t *z = zmtp_new(s_path, err, sizeof err);
    int c = z ? accept(l, NULL, NULL) : -1;
    int rc = -2;
    if (c >= 0 && (size_t)write(c, bytes, len) == len) {
        zmtp_msg m;
        rc = zmtp_recv(z, &m, 1 << 20, 5000, err, sizeof err);
        if (rc == 1)
            zmtp_msg_fini(&m);
    }
    zmtp_destroy(&z);
    *gotlen = 0;
    ssize_t r;
    while (c >= 0 && *gotlen < gotsize &&
           (r = read(c, got + *gotlen, gotsize - *gotlen)) > 0)
        *gotlen += (size_t)r;
    if (c >= 0)
        close(c);
    close(l);
    unlink(s_path);
    return rc;
}

TEST(a_peer_that_is_not_zmtp)
{
    s_set_path("plain");
    char err[256] = "";
    const char *http = "HTTP/1.1 400 Bad Request\r\n\r\n";
    int rc = s_against_plain(http, strlen(http), 1, 5000, err, sizeof err);
    CHECK(rc == -1 && errno == EPROTO);
    CHECK(strstr(err, "not a ZeroMQ peer") != NULL);
    printf("  said: %s\n", err);

    /* a ZMTP 3 peer that asks for CURVE */
    unsigned char g[64] = {0xFF, 0, 0, 0,   0,   0,   0,   0,  0,
                           0x7F, 3, 0, 'C', 'U', 'R', 'V', 'E'};
    rc = s_against_plain(g, sizeof g, 1, 5000, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "CURVE mechanism") != NULL);

    /* a short greeting, then the peer is gone */
    rc = s_against_plain(g, 20, 1, 5000, err, sizeof err);
    CHECK(rc == -1 && errno == EPIPE);
    CHECK(strstr(err, "during the greeting (20 of 64 bytes)") != NULL);
}

TEST(a_peer_closing_in_the_middle_of_a_reply)
{
    s_set_path("mid");
    unsigned char b[256];
    size_t n = s_server_hello(b);
    /* an empty frame with MORE, then a long frame of 1000 bytes of which 3 */
    unsigned char part[] = {0x01, 0x00, 0x02, 0,    0,   0,   0,
                            0,    0,    0x03, 0xE8, 'a', 'b', 'c'};
    memcpy(b + n, part, sizeof part);
    char err[256] = "";
    int rc = s_against_plain(b, n + sizeof part, 1, 5000, err, sizeof err);
    CHECK(rc == -1 && errno == EPIPE);
    CHECK(strstr(err, "closed the connection in the middle of a message") != NULL);

    /* closed after a whole frame with MORE and nothing after it */
    rc = s_against_plain(b, n + 2, 1, 5000, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "in the middle of a message") != NULL);

    /* closed between messages */
    rc = s_against_plain(b, n, 1, 5000, err, sizeof err);
    CHECK(rc == -1 && errno == EPIPE && strstr(err, "closed the connection") &&
          !strstr(err, "middle"));
}

TEST(error_command_and_bad_frames)
{
    s_set_path("bad");
    unsigned char b[256];
    unsigned char g[64] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 1, 'N', 'U', 'L', 'L'};
    memcpy(b, g, 64);
    static const char e[] = "\x05"
                            "ERROR"
                            "\x0e"
                            "not authorized";
    b[64] = 0x04;
    b[65] = sizeof e - 1;
    memcpy(b + 66, e, sizeof e - 1);
    char err[256] = "";
    int rc = s_against_plain(b, 66 + sizeof e - 1, 0, 5000, err, sizeof err);
    CHECK(rc == -1 && errno == ECONNREFUSED);
    CHECK(strstr(err, "refused: not authorized") != NULL);

    /* a PUB peer: a DEALER does not talk to it */
    size_t n = s_server_hello(b);
    memcpy(b + n - 6, "PUB\0\0\0", 6);
    b[n - 7] = 3; /* the value's size */
    b[65] -= 3;
    rc = s_against_plain(b, n - 3, 0, 5000, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "a PUB socket") != NULL);

    /* a message frame before READY; unknown flag bits */
    n = 64;
    memcpy(b, g, 64);
    b[n++] = 0x00;
    b[n++] = 0x00;
    rc = s_against_plain(b, n, 0, 5000, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "before the READY") != NULL);
    n = s_server_hello(b);
    b[n++] = 0x40;
    b[n++] = 0x00;
    rc = s_against_plain(b, n, 0, 5000, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "unknown flags 0x40") != NULL);

    /* a frame announcing 2^40 bytes is refused unread */
    n = s_server_hello(b);
    unsigned char huge[] = {0x02, 0, 0, 0x01, 0, 0, 0, 0, 0};
    memcpy(b + n, huge, sizeof huge);
    rc = s_against_plain(b, n + sizeof huge, 0, 5000, err, sizeof err);
    CHECK(rc == -1 && errno == EPROTO && strstr(err, "over the limit") != NULL);

    /* a PING is answered, then the message arrives */
    n = s_server_hello(b);
    static const char ping[] = "\x04PING\x00\x0a"
                               "ctx";
    b[n++] = 0x04;
    b[n++] = sizeof ping - 1;
    memcpy(b + n, ping, sizeof ping - 1);
    n += sizeof ping - 1;
    unsigned char msg[] = {0x01, 0x00, 0x00, 0x02, 'o', 'k'};
    memcpy(b + n, msg, sizeof msg);
    /* the PING and the message arrive in one read: the PONG (its context
       echoed) must still go out before the caller closes */
    unsigned char got[512];
    size_t gotlen = 0;
    rc = s_ping_exchange(b, n + sizeof msg, got, sizeof got, &gotlen);
    CHECK(rc == 1);
    static const unsigned char pong[] = {0x04, 0x08, 0x04, 'P', 'O',
                                         'N',  'G',  'c',  't', 'x'};
    CHECK(s_contains(got, gotlen, pong, sizeof pong));
}

TEST(silence_times_out_and_nothing_there_is_said)
{
    s_set_path("quiet");
    char err[256] = "";
    int rc = s_against_plain(NULL, 0, 0, 80, err, sizeof err);
    CHECK(rc == 0);

    s_set_path("none");
    zmtp_t *z = zmtp_new(s_path, err, sizeof err);
    CHECK(z == NULL && errno == ENOENT);
    CHECK(strstr(err, "cannot connect to") != NULL);
    char longp[200];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = 0;
    z = zmtp_new(longp, err, sizeof err);
    CHECK(z == NULL && errno == ENAMETOOLONG);
}

/* Answers requests as the controller does: ["", {"type":"ok","req":N,
   "echo": the request's type}], until it receives type "quit". */
static void *s_answerer(void *arg)
{
    void *r = arg;
    for (;;) {
        char *parts[8];
        size_t sizes[8];
        int n = s_zrecv(r, parts, sizes, 8);
        if (n < 0)
            break;
        int quit = 1;
        if (n == 3 && sizes[1] == 0) {
            json_t *q = json_loads(parts[2], 0, NULL);
            const char *type = json_string_value(json_object_get(q, "type"));
            quit = !type || !strcmp(type, "quit");
            json_t *a = json_pack("{s:s, s:O, s:s}", "type", "ok", "req",
                                  json_object_get(q, "req"), "echo", type ? type : "");
            char *text = json_dumps(a, JSON_COMPACT);
            zmq_send(r, parts[0], sizes[0], ZMQ_SNDMORE);
            zmq_send(r, "", 0, ZMQ_SNDMORE);
            zmq_send(r, text, strlen(text), 0);
            free(text);
            json_decref(a);
            json_decref(q);
        }
        for (int i = 0; i < n; i++)
            free(parts[i]);
        if (quit)
            break;
    }
    return NULL;
}

TEST(client_call_over_ipc)
{
    s_set_path("ctl");
    void *r = s_router();
    REQUIRE(r != NULL);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, s_answerer, r) == 0);
    char ep[200], err[1200] = "";
    snprintf(ep, sizeof ep, "ipc://%s", s_path);
    json_t *a =
        client_call(ep, json_pack("{s:s}", "type", "ping"), 5000, err, sizeof err);
    CHECK(a && !strcmp(wire_type(a), "ok"));
    CHECK(a && !strcmp(json_string_value(json_object_get(a, "echo")), "ping"));
    json_decref(a);
    a = client_call(ep, json_pack("{s:s}", "type", "quit"), 5000, err, sizeof err);
    CHECK(a != NULL);
    json_decref(a);
    pthread_join(th, NULL);
    zmq_close(r);
    unlink(s_path);

    /* nobody there: the time runs out, and the message says why */
    a = client_call(ep, json_pack("{s:s}", "type", "ping"), 250, err, sizeof err);
    CHECK(a == NULL);
    CHECK(strstr(err, "no answer from the controller at ipc://") &&
          strstr(err, "timeout; cannot connect") && strstr(err, "is it running?"));
    printf("  said: %s\n", err);
}

int main(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/jz-test-zmtp-XXXXXX");
    if (!mkdtemp(s_dir)) {
        perror("mkdtemp");
        return 1;
    }
    s_ctx = zmq_ctx_new();
    RUN(round_trips_with_a_router);
    RUN(a_peer_that_is_not_zmtp);
    RUN(a_peer_closing_in_the_middle_of_a_reply);
    RUN(error_command_and_bad_frames);
    RUN(silence_times_out_and_nothing_there_is_said);
    RUN(client_call_over_ipc);
    zmq_ctx_term(s_ctx);
    rmdir(s_dir);
    TEST_DONE();
}
