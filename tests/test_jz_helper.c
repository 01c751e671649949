/*  test_jz_helper.c - unit tests of libjizhi (trial_helper/) against a fake
    controller.

    The fake controller is a ZeroMQ ROUTER on an ipc:// endpoint in a temp
    directory, run by a thread of this process. It speaks the trial part of
    docs/PROTOCOL.md with wire_recv/wire_send: it answers hello with params,
    stores metrics batches and dedups them on the highest req (as the real
    controller does), can drop replies or go silent, pushes instructions and
    resends the unacknowledged ones whenever the trial sends anything.

    `test_jz_helper --serve ENDPOINT NPOINTS [PARAMS_JSON]` runs the same
    fake controller alone, for tests/integration/test_helper_python.py: it
    prints "listening ENDPOINT", pushes three instructions after hello, and
    when NPOINTS points, three acks and one checkpoint have arrived (or 15 s
    passed) prints a JSON summary and exits 0 (or 1).
*/
#include "jizhi.h"

#include "jz_internal.h"

#include "common/msg.h"
#include "common/wire.h"
#include "common/util.h"
#include "jz_test.h"
#include "msg_testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

/* ---- the fake controller -------------------------------------------------- */

#define FAKE_TOKEN "s3cret"

typedef struct {
    long step;
    char name[64];
    double value;
    int was_real; /* the value was a JSON real */
} fpoint;

typedef struct {
    char endpoint[300];
    void *ctx, *sock;
    pthread_t thread;
    pthread_mutex_t mu;
    int stop;
    /* behaviour (set under mu) */
    json_t *hello_params; /* answered to hello */
    int drop_replies;     /* metrics replies still to drop (points stored) */
    int silent;           /* answer nothing, push nothing */
    json_t *push;         /* instructions not yet acknowledged (resent) */
    json_t *raw;          /* messages to send once, as they are */
    int push_new;         /* push now without waiting for a trial message */
    int hold_hello;       /* 1: keep the hello reply until release_hello */
    int release_hello;    /* 1: send the held hello reply now */
    long held_req;        /* req of the held hello, -1 none */
    /* what arrived */
    wire_peer peer;
    int have_peer;
    long hellos, heartbeats, batches, dup_batches, max_batch, bad_points, highest_req;
    long unauthorized;
    long silent_hellos, silent_batches; /* arrived while silent (resends) */
    char session[40]; /* session of highest_req, as the controller stores it */
    fpoint *points;
    size_t npoints, cappoints;
    json_t *acks;        /* ins_ack messages */
    json_t *checkpoints; /* checkpoint_done messages */
} fake;

static void fake_push_all(fake *f)
{
    if (!f->have_peer)
        return;
    size_t i;
    json_t *ins;
    json_array_foreach(f->push, i, ins) wire_send(f->sock, &f->peer, json_incref(ins), 1);
}

static void fake_store_points(fake *f, json_t *pts)
{
    size_t i;
    json_t *p;
    json_array_foreach(pts, i, p)
    {
        double v;
        if (!json_is_array(p) || json_array_size(p) != 3 ||
            !json_is_integer(json_array_get(p, 0)) ||
            !json_is_string(json_array_get(p, 1)) ||
            wire_to_double(json_array_get(p, 2), &v) != 0) {
            f->bad_points++;
            continue;
        }
        if (f->npoints == f->cappoints) {
            f->cappoints = f->cappoints ? 2 * f->cappoints : 1024;
            f->points = realloc(f->points, f->cappoints * sizeof *f->points);
        }
        fpoint *fp = &f->points[f->npoints++];
        fp->step = (long)json_integer_value(json_array_get(p, 0));
        snprintf(fp->name, sizeof fp->name, "%s",
                 json_string_value(json_array_get(p, 1)));
        fp->value = v;
        fp->was_real = json_is_real(json_array_get(p, 2));
    }
}

static void fake_handle(fake *f, json_t *m, const wire_peer *from)
{
    const char *type = wire_type(m);
    json_t *jreq = json_object_get(m, "req");
    long req = json_is_integer(jreq) ? (long)json_integer_value(jreq) : -1;
    const char *token = json_string_value(json_object_get(m, "token"));
    if (f->silent) {
        f->silent_hellos += !strcmp(type, "hello");
        f->silent_batches += !strcmp(type, "metrics");
        return;
    }
    f->peer = *from;
    f->have_peer = 1;
    if (!token || strcmp(token, FAKE_TOKEN) != 0 ||
        !json_is_integer(json_object_get(m, "trial"))) {
        f->unauthorized++;
        wire_send(f->sock, from, wire_error(req, "unauthorized", "wrong token"), 1);
        return;
    }
    json_t *reply = wire_ok(req);
    if (!strcmp(type, "hello") && f->hold_hello) {
        f->hellos++;
        f->held_req = req;
        json_decref(reply);
        reply = NULL;
    } else if (!strcmp(type, "hello")) {
        f->hellos++;
        json_object_set(reply, "params", f->hello_params);
        json_object_set_new(reply, "study", json_string("fake"));
        json_object_set_new(reply, "state", json_string("running"));
    } else if (!strcmp(type, "metrics")) {
        json_t *pts = json_object_get(m, "points");
        f->batches++;
        if ((long)json_array_size(pts) > f->max_batch)
            f->max_batch = (long)json_array_size(pts);
        const char *session = json_string_value(json_object_get(m, "session"));
        if (!session || !session[0] || strlen(session) >= sizeof f->session)
            f->bad_points++; /* every batch names its helper session */
        if (session && !strcmp(session, f->session) && req <= f->highest_req) {
            f->dup_batches++; /* acknowledged, not stored twice */
        } else {
            f->highest_req = req;
            snprintf(f->session, sizeof f->session, "%s", session ? session : "");
            fake_store_points(f, pts);
            if (f->drop_replies > 0) {
                f->drop_replies--;
                json_decref(reply);
                reply = NULL;
            }
        }
    } else if (!strcmp(type, "ins_ack")) {
        /* how many points were stored when the ack arrived (order checks) */
        json_object_set_new(m, "points_before", json_integer((json_int_t)f->npoints));
        json_array_append(f->acks, m);
        json_t *id = json_object_get(m, "id");
        for (size_t i = json_array_size(f->push); i-- > 0;)
            if (json_equal(json_object_get(json_array_get(f->push, i), "id"), id))
                json_array_remove(f->push, i);
    } else if (!strcmp(type, "checkpoint_done")) {
        json_array_append(f->checkpoints, m);
    } else if (!strcmp(type, "trial_heartbeat")) {
        f->heartbeats++;
    }
    if (reply)
        wire_send(f->sock, from, reply, 1);
    fake_push_all(f); /* as the controller: resend outstanding instructions */
}

static void *fake_run(void *arg)
{
    fake *f = arg;
    for (;;) {
        zmq_pollitem_t it = {f->sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 5);
        pthread_mutex_lock(&f->mu);
        if (f->stop) {
            pthread_mutex_unlock(&f->mu);
            break;
        }
        if (f->release_hello && f->held_req >= 0 && f->have_peer) {
            json_t *r = wire_ok(f->held_req);
            json_object_set(r, "params", f->hello_params);
            wire_send(f->sock, &f->peer, r, 1);
            f->held_req = -1;
            f->hold_hello = f->release_hello = 0;
        }
        if (json_array_size(f->raw) && f->have_peer && !f->silent) {
            size_t i;
            json_t *m;
            json_array_foreach(f->raw, i, m)
                wire_send(f->sock, &f->peer, json_incref(m), 1);
            json_array_clear(f->raw);
        }
        if (f->push_new && !f->silent) {
            f->push_new = 0;
            fake_push_all(f);
        }
        for (;;) {
            wire_peer from;
            char err[256];
            json_t *m = wire_recv(f->sock, &from, 1, err, sizeof err);
            if (!m) {
                if (errno == EAGAIN)
                    break;
                continue;
            }
            fake_handle(f, m, &from);
            json_decref(m);
        }
        pthread_mutex_unlock(&f->mu);
    }
    return NULL;
}

static char s_tmpdir[256];
static int s_nfake;

static fake *fake_start_at(const char *endpoint)
{
    fake *f = calloc(1, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    f->hello_params = json_object();
    f->held_req = -1;
    f->push = json_array();
    f->raw = json_array();
    f->acks = json_array();
    f->checkpoints = json_array();
    if (endpoint)
        snprintf(f->endpoint, sizeof f->endpoint, "%s", endpoint);
    else
        snprintf(f->endpoint, sizeof f->endpoint, "ipc://%s/ctl%d", s_tmpdir, s_nfake++);
    f->ctx = zmq_ctx_new();
    f->sock = zmq_socket(f->ctx, ZMQ_ROUTER);
    wire_socket_setup(f->sock);
    if (zmq_bind(f->sock, f->endpoint) != 0) {
        fprintf(stderr, "fake: cannot bind %s: %s\n", f->endpoint, zmq_strerror(errno));
        exit(2);
    }
    size_t elen = sizeof f->endpoint; /* tcp://127.0.0.1:* gets its port */
    zmq_getsockopt(f->sock, ZMQ_LAST_ENDPOINT, f->endpoint, &elen);
    pthread_create(&f->thread, NULL, fake_run, f);
    return f;
}

static fake *fake_start(void)
{
    return fake_start_at(NULL);
}

static void fake_stop(fake *f)
{
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    zmq_close(f->sock);
    zmq_ctx_term(f->ctx);
    json_decref(f->hello_params);
    json_decref(f->push);
    json_decref(f->raw);
    json_decref(f->acks);
    json_decref(f->checkpoints);
    free(f->points);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

static void fake_instruct(fake *f, json_t *ins)
{
    if (!ins) {
        fprintf(stderr, "fake_instruct: json_pack failed\n");
        abort();
    }
    pthread_mutex_lock(&f->mu);
    json_object_set_new(ins, "type", json_string("instruction"));
    json_array_append_new(f->push, ins);
    f->push_new = 1;
    pthread_mutex_unlock(&f->mu);
}

/* Sets the trial environment for fake `f` (NULL: standalone). */
static void env_trial(const fake *f, const char *params)
{
    unsetenv("JIZHI_TRIAL");
    unsetenv("JIZHI_ENDPOINT");
    unsetenv("JIZHI_TOKEN");
    unsetenv("JIZHI_PARAMS");
    unsetenv("JIZHI_CHECKPOINT_DIR");
    unsetenv("JIZHI_CLOSE_TIMEOUT_MS");
    unsetenv("JIZHI_HELLO_TIMEOUT_MS");
    if (params)
        setenv("JIZHI_PARAMS", params, 1);
    if (f) {
        setenv("JIZHI_TRIAL", "7", 1);
        setenv("JIZHI_STUDY", "fake", 1);
        setenv("JIZHI_ENDPOINT", f->endpoint, 1);
        setenv("JIZHI_TOKEN", FAKE_TOKEN, 1);
        setenv("JIZHI_HELLO_TIMEOUT_MS", "3000", 1);
    }
}

static void sleep_ms(int ms)
{
    usleep((useconds_t)ms * 1000);
}

/* ---- stderr capture ------------------------------------------------------- */

static int s_saved_err = -1;
static char s_errpath[300];

static void capture_begin(void)
{
    fflush(stderr);
    snprintf(s_errpath, sizeof s_errpath, "%s/stderr.txt", s_tmpdir);
    int fd = open(s_errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    s_saved_err = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* Returns what was written to stderr since capture_begin (static buffer). */
static const char *capture_end(void)
{
    static char buf[8192];
    fflush(stderr);
    dup2(s_saved_err, 2);
    close(s_saved_err);
    FILE *fp = fopen(s_errpath, "r");
    size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
    if (fp)
        fclose(fp);
    buf[n] = 0;
    return buf;
}

/* ---- tests ---------------------------------------------------------------- */

TEST(standalone_mode)
{
    env_trial(NULL, NULL);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    CHECK(jz_trial_id(t) == -1);
    CHECK_NEAR(jz_param_double(t, "lr", 0.1), 0.1, 0);
    CHECK(jz_param_long(t, "bs", 32) == 32);
    CHECK_STR(jz_param_str(t, "opt", "sgd"), "sgd");
    CHECK_STR(jz_checkpoint_dir(t), ".");
    capture_begin();
    int r1 = jz_report(t, 3, "loss", 0.25);
    int r2 = jz_report(t, 4, "val.acc", NAN);
    int r3 = jz_report(t, 5, "bad name", 1);
    int r4 = jz_checkpoint_done(t, 5, "/tmp/x");
    const char *err = capture_end();
    CHECK(r1 == 0 && r2 == 0 && r4 == 0);
    CHECK(r3 == -1);
    CHECK(strstr(err, "jizhi: step 3 loss=0.25\n") != NULL);
    CHECK(strstr(err, "jizhi: step 4 val.acc=nan\n") != NULL);
    jz_instruction ins;
    CHECK(jz_poll(t, &ins) == 0);
    CHECK(ins.kind == JZ_INS_NONE);
    CHECK(jz_flush(t, 0) == 0);
    CHECK(jz_poll(t, NULL) == -1);
    jz_close(&t);
    CHECK(t == NULL);
    jz_close(&t);
    jz_close(NULL);
    /* a NULL trial gives defaults */
    CHECK_NEAR(jz_param_double(NULL, "lr", 0.5), 0.5, 0);
    CHECK(jz_report(NULL, 1, "x", 1) == -1);
}

TEST(param_types_and_defaults)
{
    char ck[400];
    snprintf(ck, sizeof ck, "%s/ck/a/b", s_tmpdir);
    env_trial(
        NULL,
        "{\"lr\":0.1,\"bs\":256,\"opt\":\"lars\",\"f\":2.0,\"g\":\"inf\",\"b\":true}");
    setenv("JIZHI_CHECKPOINT_DIR", ck, 1);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    CHECK_NEAR(jz_param_double(t, "lr", 9), 0.1, 0);
    CHECK(jz_param_long(t, "bs", 9) == 256);
    CHECK_NEAR(jz_param_double(t, "bs", 9), 256, 0);
    CHECK(jz_param_long(t, "lr", 9) == 9); /* 0.1 is not an integer */
    CHECK(jz_param_long(t, "f", 9) == 2);  /* 2.0 is */
    CHECK_STR(jz_param_str(t, "opt", "sgd"), "lars");
    CHECK_STR(jz_param_str(t, "lr", "dflt"), "dflt");
    CHECK(jz_param_double(t, "opt", 3) == 3);
    CHECK(isinf(jz_param_double(t, "g", 0)));
    CHECK(jz_param_long(t, "b", 4) == 4);
    CHECK(jz_param_long(t, "missing", 5) == 5);
    CHECK_STR(jz_params_json(t),
              "{\"b\":true,\"bs\":256,\"f\":2.0,\"g\":\"inf\",\"lr\":0.10000000000000001,"
              "\"opt\":\"lars\"}");
    CHECK_STR(jz_checkpoint_dir(t), ck);
    struct stat st;
    CHECK(stat(ck, &st) == 0 && S_ISDIR(st.st_mode));
    jz_close(&t);
}

static void expect_env_error(const char *var, const char *value, const char *needle)
{
    env_trial(NULL, NULL);
    setenv("JIZHI_TRIAL", "3", 1);
    setenv("JIZHI_ENDPOINT", "ipc:///nonexistent/x", 1);
    setenv("JIZHI_TOKEN", "t", 1);
    if (value)
        setenv(var, value, 1);
    else
        unsetenv(var);
    capture_begin();
    jz_trial *t = jz_open();
    const char *err = capture_end();
    if (t != NULL || !strstr(err, needle))
        JZT_FAIL("%s=%s: expected NULL and a message naming %s, got \"%s\"", var,
                 value ? value : "(unset)", needle, err);
    jz_close(&t);
}

TEST(env_errors)
{
    expect_env_error("JIZHI_PARAMS", "{\"lr\": ", "JIZHI_PARAMS");
    expect_env_error("JIZHI_PARAMS", "[1,2]", "JIZHI_PARAMS");
    expect_env_error("JIZHI_TRIAL", "abc", "JIZHI_TRIAL");
    expect_env_error("JIZHI_TRIAL", "12x", "JIZHI_TRIAL");
    expect_env_error("JIZHI_TOKEN", NULL, "JIZHI_TOKEN");
    expect_env_error("JIZHI_ENDPOINT", NULL, "JIZHI_ENDPOINT");
    expect_env_error("JIZHI_CLOSE_TIMEOUT_MS", "soon", "JIZHI_CLOSE_TIMEOUT_MS");
    /* bad JSON is refused in standalone mode too */
    env_trial(NULL, "not json");
    capture_begin();
    jz_trial *t = jz_open();
    const char *err = capture_end();
    CHECK(t == NULL);
    CHECK(strstr(err, "JIZHI_PARAMS") != NULL);
}

/* A rank other than 0 of a multi-rank trial (JIZHI_RANK > 0) never talks
   to the controller: params from JIZHI_PARAMS, reports dropped silently,
   nothing to poll. Rank 0 connects as any trial does. */
TEST(follower_rank_sends_nothing)
{
    fake *f = fake_start();
    env_trial(f, "{\"lr\":0.5}");
    setenv("JIZHI_RANK", "1", 1);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    CHECK(jz_trial_id(t) == 7);
    CHECK_NEAR(jz_param_double(t, "lr", 0.1), 0.5, 0);
    capture_begin();
    int r1 = jz_report(t, 1, "loss", 0.25);
    int r2 = jz_report(t, 1, "bad name", 1);
    int r3 = jz_checkpoint_done(t, 1, "/tmp/x");
    const char *err = capture_end();
    CHECK(r1 == 0 && r2 == -1 && r3 == 0);
    CHECK_STR(err, "");
    jz_instruction ins;
    CHECK(jz_poll(t, &ins) == 0 && ins.kind == JZ_INS_NONE);
    CHECK(jz_flush(t, 1000) == 0);
    jz_close(&t);
    pthread_mutex_lock(&f->mu);
    CHECK(f->hellos == 0 && f->batches == 0);
    pthread_mutex_unlock(&f->mu);

    /* rank 0 is the trial's voice */
    setenv("JIZHI_RANK", "0", 1);
    t = jz_open();
    REQUIRE(t != NULL);
    CHECK(jz_report(t, 1, "loss", 0.25) == 0);
    CHECK(jz_flush(t, 5000) == 0);
    jz_close(&t);
    pthread_mutex_lock(&f->mu);
    CHECK(f->hellos >= 1 && f->npoints == 1);
    pthread_mutex_unlock(&f->mu);
    fake_stop(f);
    expect_env_error("JIZHI_RANK", "one", "JIZHI_RANK");
    expect_env_error("JIZHI_RANK", "-1", "JIZHI_RANK");
    unsetenv("JIZHI_RANK");
}

TEST(hello_params_override_env)
{
    fake *f = fake_start();
    pthread_mutex_lock(&f->mu); /* its thread reads them on a hello */
    json_object_set_new(f->hello_params, "lr", json_real(0.5));
    json_object_set_new(f->hello_params, "opt", json_string("lamb"));
    pthread_mutex_unlock(&f->mu);
    env_trial(f, "{\"lr\":0.1,\"bs\":64}");
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    CHECK(jz_trial_id(t) == 7);
    CHECK_NEAR(jz_param_double(t, "lr", 0), 0.5, 0);
    CHECK(jz_param_long(t, "bs", 0) == 64);
    CHECK_STR(jz_param_str(t, "opt", ""), "lamb");
    jz_close(&t);
    pthread_mutex_lock(&f->mu);
    CHECK(f->hellos >= 1);
    pthread_mutex_unlock(&f->mu);
    fake_stop(f);
}

static const char *const s_metric_names[] = {"loss", "val_acc", "lr.group0"};

TEST(batching_in_order_with_resend_dedup)
{
    fake *f = fake_start();
    pthread_mutex_lock(&f->mu);
    f->drop_replies = 1; /* the first batch's reply is lost: resent after 2 s */
    pthread_mutex_unlock(&f->mu);
    env_trial(f, NULL);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    const long n = 50000;
    for (long i = 0; i < n; i++)
        CHECK(jz_report(t, i, s_metric_names[i % 3], (double)i * 0.5) == 0);
    CHECK(jz_flush(t, 30000) == 0);
    pthread_mutex_lock(&f->mu);
    CHECK(f->npoints == (size_t)n);
    CHECK(f->dup_batches >= 1);
    CHECK(f->bad_points == 0);
    int in_order = f->npoints == (size_t)n;
    for (size_t i = 0; in_order && i < f->npoints; i++)
        in_order = f->points[i].step == (long)i &&
                   !strcmp(f->points[i].name, s_metric_names[i % 3]) &&
                   f->points[i].value == (double)i * 0.5;
    CHECK(in_order);
    pthread_mutex_unlock(&f->mu);
    jz_close(&t);
    fake_stop(f);
}

TEST(large_volume_batches_capped)
{
    fake *f = fake_start();
    env_trial(f, NULL);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    const long n = 250000;
    double t0 = util_now();
    for (long i = 0; i < n; i++)
        if (jz_report(t, i, "loss", 1.0 / (double)(i + 1)) != 0) {
            JZT_FAIL("report %ld refused", i);
            break;
        }
    double t1 = util_now();
    CHECK(jz_flush(t, 60000) == 0);
    double t2 = util_now();
    printf("  info: %ld reports: queued at %.2g/s, acknowledged at %.3g points/s\n", n,
           n / (t1 - t0), n / (t2 - t0));
    pthread_mutex_lock(&f->mu);
    CHECK(f->npoints == (size_t)n);
    CHECK(f->max_batch <= 100000);
    CHECK(f->batches >= 3);
    int ok = 1;
    for (size_t i = 0; ok && i < f->npoints; i++)
        ok = f->points[i].step == (long)i && f->points[i].value == 1.0 / (double)(i + 1);
    CHECK(ok);
    pthread_mutex_unlock(&f->mu);
    jz_close(&t);
    fake_stop(f);
}

static json_t *find_ack(fake *f, long id)
{
    size_t i;
    json_t *a;
    json_array_foreach(f->acks, i, a) if (json_integer_value(json_object_get(a, "id")) ==
                                          id) return a;
    return NULL;
}

TEST(instructions_delivered_once_params_updated_acked)
{
    fake *f = fake_start();
    env_trial(f, "{\"lr\":0.1,\"bs\":64,\"opt\":\"sgd\"}");
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    fake_instruct(f, json_pack("{s:i, s:s, s:s, s:f}", "id", 1, "kind", "set", "name",
                               "lr", "value", 0.01));
    fake_instruct(f, json_pack("{s:i, s:s, s:s, s:s}", "id", 2, "kind", "set", "name",
                               "opt", "value", "lamb"));
    fake_instruct(f, json_pack("{s:i, s:s}", "id", 3, "kind", "pause"));
    fake_instruct(f, json_pack("{s:i, s:s, s:s, s:{s:f, s:i}}", "id", 4, "kind", "load",
                               "path", "/ck/trial3/step100", "params", "lr", 0.2, "bs",
                               512));
    fake_instruct(f, json_pack("{s:i, s:s}", "id", 5, "kind", "checkpoint"));
    fake_instruct(f, json_pack("{s:i, s:s}", "id", 6, "kind", "dance"));
    fake_instruct(f, json_pack("{s:i, s:s, s:s}", "id", 7, "kind", "set", "name", "x"));
    fake_instruct(f, json_pack("{s:i, s:s}", "id", 8, "kind", "stop"));

    int ngot = 0;
    double end = util_now() + 5;
    while (ngot < 6 && util_now() < end) {
        jz_instruction ins;
        int r = jz_poll(t, &ins);
        if (r == 0) {
            jz_report(t, ngot, "loss", 1); /* makes the fake resend what is unacked */
            sleep_ms(5);
            continue;
        }
        ngot++;
        switch (ins.id) {
        case 1:
            CHECK(ins.kind == JZ_INS_SET);
            CHECK_STR(ins.name, "lr");
            CHECK_NEAR(ins.value, 0.01, 0);
            CHECK_STR(ins.str, "0.01");
            CHECK_NEAR(jz_param_double(t, "lr", 0), 0.01, 0);
            break;
        case 2:
            CHECK(ins.kind == JZ_INS_SET);
            CHECK(isnan(ins.value));
            CHECK_STR(ins.str, "lamb");
            CHECK_STR(jz_param_str(t, "opt", ""), "lamb");
            CHECK(jz_ack(t, &ins, 0, "optimizer is fixed") == 0);
            CHECK(jz_ack(t, &ins, 1, NULL) == -1); /* once */
            break;
        case 3:
            CHECK(ins.kind == JZ_INS_PAUSE);
            CHECK(jz_ack(t, &ins, 1, NULL) == 0); /* the program pauses itself */
            break;
        case 4:
            CHECK(ins.kind == JZ_INS_LOAD);
            CHECK_STR(ins.str, "/ck/trial3/step100");
            CHECK_NEAR(jz_param_double(t, "lr", 0), 0.2, 0);
            CHECK(jz_param_long(t, "bs", 0) == 512);
            break;
        case 5:
            CHECK(ins.kind == JZ_INS_CHECKPOINT);
            CHECK(jz_checkpoint_done(t, 7, "/ck/mine") == 0);
            break;
        case 8:
            CHECK(ins.kind == JZ_INS_STOP);
            break;
        default:
            JZT_FAIL("unexpected instruction id %ld", ins.id);
        }
    }
    CHECK(ngot == 6);
    /* let the fake resend a few times more: nothing is delivered twice */
    for (int i = 0; i < 20; i++) {
        jz_instruction ins;
        jz_report(t, 100 + i, "loss", 1);
        if (jz_poll(t, &ins) == 1)
            JZT_FAIL("instruction %ld delivered again", ins.id);
        sleep_ms(5);
    }
    CHECK(jz_flush(t, 30000) == 0);
    pthread_mutex_lock(&f->mu);
    for (long id = 1; id <= 8; id++) {
        json_t *a = find_ack(f, id);
        if (!a) {
            JZT_FAIL("no ack for instruction %ld", id);
            continue;
        }
        /* applied: the implicit set, the pause acked by the program, the
           checkpoint it wrote; refused: the explicit refusal, the unknown kind,
           the set without a value, the load never confirmed, the stop the
           program went on after */
        int applied = json_is_true(json_object_get(a, "applied"));
        CHECK(applied == (id == 1 || id == 3 || id == 5));
    }
    CHECK_STR(json_string_value(json_object_get(find_ack(f, 8), "detail")),
              "the program went on after stop");
    CHECK_STR(json_string_value(json_object_get(find_ack(f, 2), "detail")),
              "optimizer is fixed");
    CHECK(json_array_size(f->push) == 0);
    pthread_mutex_unlock(&f->mu);
    jz_close(&t);
    fake_stop(f);
}

/* The points a trial reported before it acknowledged a load are stored
   before the acknowledgement, although batches otherwise go every 50 ms:
   the load's event never precedes the trial's earlier reports. */
TEST(points_before_a_load_are_stored_before_its_ack)
{
    fake *f = fake_start();
    env_trial(f, "{\"lr\":0.1}");
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    fake_instruct(f, json_pack("{s:i, s:s, s:s, s:{s:f}}", "id", 1, "kind", "load",
                               "path", "/ck/donor/step100", "params", "lr", 0.2));
    sleep_ms(300); /* the load reaches the helper's queue */
    jz_report(t, 1, "loss", 1);
    CHECK(jz_flush(t, 5000) == 0); /* a batch just went: the next one waits 50 ms */
    for (long step = 2; step <= 6; step++)
        CHECK(jz_report(t, step, "loss", (double)step) == 0);
    jz_instruction ins;
    int got = -1;
    for (double end = util_now() + 5; got != 1 && util_now() < end; sleep_ms(2))
        got = jz_poll(t, &ins);
    REQUIRE(got == 1 && ins.kind == JZ_INS_LOAD);
    CHECK(jz_ack(t, &ins, 1, NULL) == 0);
    CHECK(jz_flush(t, 5000) == 0);
    pthread_mutex_lock(&f->mu);
    json_t *a = find_ack(f, 1);
    CHECK(a != NULL && json_is_true(json_object_get(a, "applied")));
    CHECK(a != NULL && json_integer_value(json_object_get(a, "points_before")) == 6);
    pthread_mutex_unlock(&f->mu);
    jz_close(&t);
    fake_stop(f);
}

typedef struct {
    jz_trial *t;
    volatile int returned;
} reporter_arg;

static void *s_reporter(void *arg)
{
    reporter_arg *r = arg;
    jz_report(r->t, 1, "loss", 1); /* blocks while the helper holds the pause */
    __atomic_store_n(&r->returned, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Polls until instruction `id` arrives; 0 when it did. */
static int s_poll_for(jz_trial *t, long id, jz_instruction *ins)
{
    double end = util_now() + 5;
    while (util_now() < end) {
        if (jz_poll(t, ins) == 1)
            return ins->id == id ? 0 : -1;
        sleep_ms(2);
    }
    return -1;
}

/* Pause `id` sent to t and polled by the program, which ignores it and
   reports from thread *th (s_reporter on r): that call is held by the
   helper. 0, or -1 when the pause did not arrive or the thread did not
   start. */
static int s_pause_ignored(fake *f, jz_trial *t, long id, jz_instruction *ins,
                           reporter_arg *r, pthread_t *th)
{
    fake_instruct(f, json_pack("{s:I, s:s}", "id", (json_int_t)id, "kind", "pause"));
    if (s_poll_for(t, id, ins) != 0)
        return -1;
    return pthread_create(th, NULL, s_reporter, r) == 0 ? 0 : -1;
}

TEST(unhandled_pause_is_carried_out_by_the_helper)
{
    fake *f = fake_start();
    env_trial(f, NULL);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    /* the program ignores pause 21 and reports: that call holds until resume */
    jz_instruction ins;
    reporter_arg r = {t, 0};
    pthread_t th;
    REQUIRE(s_pause_ignored(f, t, 21, &ins, &r, &th) == 0);
    json_t *a21 = NULL;
    for (int i = 0; i < 500 && !a21; i++) {
        sleep_ms(10);
        pthread_mutex_lock(&f->mu);
        a21 = find_ack(f, 21);
        pthread_mutex_unlock(&f->mu);
    }
    CHECK(a21 != NULL); /* acknowledged: the helper holds the program */
    CHECK(!__atomic_load_n(&r.returned, __ATOMIC_ACQUIRE));
    fake_instruct(f, json_pack("{s:i, s:s}", "id", 22, "kind", "resume"));
    pthread_join(th, NULL);
    CHECK(__atomic_load_n(&r.returned, __ATOMIC_ACQUIRE));
    /* the resume still reaches the program, and is applied: it runs */
    CHECK(s_poll_for(t, 22, &ins) == 0);
    CHECK(ins.kind == JZ_INS_RESUME);
    CHECK(jz_flush(t, 10000) == 0);
    pthread_mutex_lock(&f->mu);
    json_t *a22 = find_ack(f, 22);
    CHECK(a21 && json_is_true(json_object_get(a21, "applied")));
    CHECK(a22 && json_is_true(json_object_get(a22, "applied")));
    pthread_mutex_unlock(&f->mu);
    jz_close(&t);
    fake_stop(f);
}

TEST(stop_ends_a_pause_held_by_the_helper_and_reaches_the_program)
{
    fake *f = fake_start();
    env_trial(f, NULL);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    jz_instruction ins;
    reporter_arg r = {t, 0};
    pthread_t th;
    REQUIRE(s_pause_ignored(f, t, 31, &ins, &r, &th) == 0);
    fake_instruct(f, json_pack("{s:i, s:s}", "id", 32, "kind", "stop"));
    pthread_join(th, NULL);
    CHECK(__atomic_load_n(&r.returned, __ATOMIC_ACQUIRE));
    CHECK(s_poll_for(t, 32, &ins) == 0);
    CHECK(ins.kind == JZ_INS_STOP);
    jz_close(&t); /* the program closes: the stop was applied */
    pthread_mutex_lock(&f->mu);
    json_t *a32 = find_ack(f, 32);
    CHECK(a32 && json_is_true(json_object_get(a32, "applied")));
    pthread_mutex_unlock(&f->mu);
    fake_stop(f);
}

TEST(unpolled_instructions_refused_at_close)
{
    fake *f = fake_start();
    env_trial(f, NULL);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    fake_instruct(f, json_pack("{s:i, s:s}", "id", 11, "kind", "stop"));
    fake_instruct(f, json_pack("{s:i, s:s}", "id", 12, "kind", "pause"));
    jz_instruction ins;
    double end = util_now() + 5;
    while (jz_poll(t, &ins) == 0 && util_now() < end)
        sleep_ms(5);
    CHECK(ins.id == 11);
    sleep_ms(50); /* instruction 12 arrives too, and is never polled */
    jz_close(&t);
    pthread_mutex_lock(&f->mu);
    json_t *a11 = find_ack(f, 11), *a12 = find_ack(f, 12);
    CHECK(a11 && json_is_true(json_object_get(a11, "applied")));
    CHECK(a12 && json_is_false(json_object_get(a12, "applied")));
    pthread_mutex_unlock(&f->mu);
    fake_stop(f);
}

/* A stop the program polled is judged by what it does next, not by the
   poll that drains the queue after it (a Python `for ins in t.poll()`
   loop, should_stop): closing takes it, flushing or polling again says
   nothing, and the program may still acknowledge it itself. */
TEST(stop_judged_by_close_not_by_a_draining_poll)
{
    for (int explicit_ack = 0; explicit_ack <= 1; explicit_ack++) {
        fake *f = fake_start();
        env_trial(f, NULL);
        jz_trial *t = jz_open();
        REQUIRE(t != NULL);
        fake_instruct(f, json_pack("{s:i, s:s}", "id", 41, "kind", "stop"));
        jz_instruction ins, none;
        CHECK(s_poll_for(t, 41, &ins) == 0);
        CHECK(ins.kind == JZ_INS_STOP);
        CHECK(jz_poll(t, &none) == 0); /* the queue drained */
        CHECK(jz_flush(t, 5000) == 0);
        pthread_mutex_lock(&f->mu);
        CHECK(find_ack(f, 41) == NULL); /* not judged yet */
        pthread_mutex_unlock(&f->mu);
        if (explicit_ack) {
            CHECK(jz_ack(t, &ins, 0, "finishing the epoch") == 0);
            CHECK(jz_ack(t, &ins, 1, NULL) == -1); /* once */
        }
        jz_close(&t);
        pthread_mutex_lock(&f->mu);
        json_t *a = find_ack(f, 41);
        CHECK(a && json_is_true(json_object_get(a, "applied")) == !explicit_ack);
        if (explicit_ack)
            CHECK_STR(json_string_value(json_object_get(a, "detail")),
                      "finishing the epoch");
        pthread_mutex_unlock(&f->mu);
        fake_stop(f);
    }
}

TEST(late_hello_does_not_undo_set)
{
    fake *f = fake_start();
    pthread_mutex_lock(&f->mu); /* its thread reads them on a hello */
    f->hold_hello = 1;
    json_object_set_new(f->hello_params, "lr", json_real(0.1));
    json_object_set_new(f->hello_params, "bs", json_integer(128));
    pthread_mutex_unlock(&f->mu);
    env_trial(f, "{\"lr\":0.1,\"bs\":64}");
    setenv("JIZHI_HELLO_TIMEOUT_MS", "0", 1);
    capture_begin();
    jz_trial *t = jz_open();
    capture_end();
    REQUIRE(t != NULL);
    fake_instruct(f, json_pack("{s:i, s:s, s:s, s:f}", "id", 1, "kind", "set", "name",
                               "lr", "value", 0.5));
    jz_instruction ins;
    double end = util_now() + 5;
    while (jz_poll(t, &ins) == 0 && util_now() < end)
        sleep_ms(2);
    CHECK(ins.id == 1);
    CHECK_NEAR(jz_param_double(t, "lr", 0), 0.5, 0);
    CHECK(jz_param_long(t, "bs", 0) == 64);
    /* the hello reply comes after the set: its older lr must not win */
    pthread_mutex_lock(&f->mu);
    f->release_hello = 1;
    pthread_mutex_unlock(&f->mu);
    end = util_now() + 5;
    while (jz_param_long(t, "bs", 0) != 128 && util_now() < end) {
        jz_poll(t, &ins);
        sleep_ms(2);
    }
    CHECK(jz_param_long(t, "bs", 0) == 128);
    CHECK_NEAR(jz_param_double(t, "lr", 0), 0.5, 0);
    jz_close(&t);
    fake_stop(f);
}

TEST(flush_semantics)
{
    fake *f = fake_start();
    env_trial(f, NULL);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    CHECK(jz_flush(t, 1000) == 0); /* nothing queued */
    pthread_mutex_lock(&f->mu);
    f->silent = 1;
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < 100; i++)
        jz_report(t, i, "loss", i);
    CHECK(jz_flush(t, 200) == -1); /* not acknowledged */
    pthread_mutex_lock(&f->mu);
    f->silent = 0;
    pthread_mutex_unlock(&f->mu);
    CHECK(jz_flush(t, 30000) == 0); /* the batch is resent and acknowledged */
    pthread_mutex_lock(&f->mu);
    CHECK(f->npoints == 100);
    pthread_mutex_unlock(&f->mu);
    jz_close(&t);
    fake_stop(f);
}

/* The helper thread's wake-ups from zmq_poll so far (jz_trial.polls). */
static long s_conn_polls(jz_trial *t)
{
    pthread_mutex_lock(&t->mu);
    long n = t->polls;
    pthread_mutex_unlock(&t->mu);
    return n;
}

/* The thread sleeps until something is due instead of ticking every 10 ms:
   an idle trial's thread wakes for its heartbeat (once a second), and a
   point reported after a quiet spell is still sent within JZ__BATCH_EVERY. */
TEST(idle_thread_sleeps_until_something_is_due)
{
    fake *f = fake_start();
    env_trial(f, NULL);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    CHECK(jz_report(t, 1, "loss", 1.0) == 0);
    CHECK(jz_flush(t, 10000) == 0);
    long before = s_conn_polls(t);
    CHECK(before >= 1);
    usleep(600 * 1000); /* idle: the 10 ms tick woke it 60 times here */
    long idle = s_conn_polls(t) - before;
    CHECK(idle >= 0 && idle <= 5);
    if (idle > 5)
        fprintf(stderr, "  the idle helper thread woke %ld times in 0.6 s\n", idle);
    /* a point after the quiet spell goes out by itself, without a flush */
    CHECK(jz_report(t, 2, "loss", 2.0) == 0);
    double end = util_now() + 10;
    int stored = 0;
    while (!stored && util_now() < end) {
        pthread_mutex_lock(&f->mu);
        stored = f->npoints == 2;
        pthread_mutex_unlock(&f->mu);
        if (!stored)
            usleep(2000);
    }
    CHECK(stored);
    jz_close(&t);
    fake_stop(f);
}

TEST(checkpoint_done_sent)
{
    fake *f = fake_start();
    env_trial(f, NULL);
    char ck[400];
    snprintf(ck, sizeof ck, "%s/ckpt/trial7", s_tmpdir);
    setenv("JIZHI_CHECKPOINT_DIR", ck, 1);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    CHECK_STR(jz_checkpoint_dir(t), ck);
    struct stat st;
    CHECK(stat(ck, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(jz_checkpoint_done(t, 42, "/ck/trial7/step42") == 0);
    CHECK(jz_checkpoint_done(t, 1, NULL) == -1);
    CHECK(jz_flush(t, 30000) == 0);
    pthread_mutex_lock(&f->mu);
    CHECK(json_array_size(f->checkpoints) == 1);
    json_t *c = json_array_get(f->checkpoints, 0);
    CHECK(json_integer_value(json_object_get(c, "step")) == 42);
    CHECK_STR(json_string_value(json_object_get(c, "path")), "/ck/trial7/step42");
    CHECK(json_integer_value(json_object_get(c, "trial")) == 7);
    pthread_mutex_unlock(&f->mu);
    jz_close(&t);
    fake_stop(f);
}

TEST(non_finite_values)
{
    fake *f = fake_start();
    env_trial(f, NULL);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    const double v[] = {NAN, INFINITY, -INFINITY, 1e308, -0.0, 5e-324, 0.1, 3.0, -2.5e-7};
    const size_t n = sizeof v / sizeof v[0];
    for (size_t i = 0; i < n; i++)
        CHECK(jz_report(t, (long)i - 2, "m", v[i]) == 0);
    CHECK(jz_flush(t, 30000) == 0);
    pthread_mutex_lock(&f->mu);
    REQUIRE(f->npoints == n);
    CHECK(f->bad_points == 0);
    CHECK(isnan(f->points[0].value));
    CHECK(isinf(f->points[1].value) && f->points[1].value > 0);
    CHECK(isinf(f->points[2].value) && f->points[2].value < 0);
    for (size_t i = 3; i < n; i++)
        CHECK(f->points[i].value == v[i]);
    CHECK(signbit(f->points[4].value));
    for (size_t i = 3; i < n; i++)
        CHECK(f->points[i].was_real); /* 3.0 stays a real, -0.0 keeps its sign */
    CHECK(f->points[0].step == -2);
    pthread_mutex_unlock(&f->mu);
    jz_close(&t);
    fake_stop(f);
}

/* A well-typed value for field f of a message to a trial: a reply to no
   request, an instruction of its own id that a trial could carry out. */
static json_t *s_good_field(const msg_field *f, void *arg)
{
    long id = *(const long *)arg;
    if (!strcmp(f->name, "id"))
        return json_integer(id);
    if (!strcmp(f->name, "kind"))
        return json_string("pause");
    if (!strcmp(f->name, "req"))
        return json_integer(987654);
    if (!strcmp(f->name, "code"))
        return json_string("internal");
    return mtl_value_of(f->type, 0, "x");
}

/* Every type a trial takes (common/msg.h), each required field missing and
   then of the wrong JSON type: refused before its handler (nothing reaches
   jz_poll), with a log line naming type and field; an instruction that
   still has its id is acknowledged `applied: false` naming the field. */
TEST(every_type_refuses_a_missing_or_mistyped_field)
{
    fake *f = fake_start();
    env_trial(f, NULL);
    capture_begin();
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    char want[32][96];
    long acked[32];
    int nwant = 0, nacked = 0;
    long id = 300;
    pthread_mutex_lock(&f->mu);
    for (int ty = 0; ty < MSG_COUNT; ty++) {
        const msg_def *d = msg_def_of((msg_type)ty);
        if (d->to != MSG_TRIAL && d->to != MSG_ANY)
            continue;
        const char *cur = d->fields;
        msg_field fl;
        while (msg_field_next(&cur, &fl)) {
            if (fl.optional)
                continue;
            for (int retype = 0; retype < 2; retype++, id++) {
                json_t *m = mtl_broken(d, &fl, retype, 0, s_good_field, &id);
                json_array_append_new(f->raw, m);
                REQUIRE(nwant < 32);
                snprintf(want[nwant++], sizeof want[0],
                         "malformed %s dropped: field '%s': %s", d->name, fl.name,
                         retype ? "expected" : "missing");
                if (d->type == MSG_INSTRUCTION && strcmp(fl.name, "id"))
                    acked[nacked++] = id;
            }
        }
    }
    pthread_mutex_unlock(&f->mu);
    CHECK(nwant >= 10);
    CHECK(nacked >= 2);
    /* wait for the acks and the log lines; nothing may reach jz_poll */
    int found = 0, acks = 0, polled = 0;
    double until = util_now() + 10;
    while ((found < nwant || acks < nacked) && util_now() < until) {
        jz_instruction ins;
        if (jz_poll(t, &ins) == 1)
            polled++;
        sleep_ms(5);
        found = acks = 0;
        FILE *fp = fopen(s_errpath, "r");
        char buf[16384];
        size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
        if (fp)
            fclose(fp);
        buf[n] = 0;
        for (int i = 0; i < nwant; i++)
            found += strstr(buf, want[i]) != NULL;
        pthread_mutex_lock(&f->mu);
        for (int i = 0; i < nacked; i++) {
            size_t k;
            json_t *a;
            json_array_foreach(f->acks, k, a)
            {
                const char *detail = json_string_value(json_object_get(a, "detail"));
                if (json_integer_value(json_object_get(a, "id")) == acked[i] &&
                    json_is_false(json_object_get(a, "applied")) && detail &&
                    !strncmp(detail, "malformed instruction: field 'kind'", 35)) {
                    acks++;
                    break;
                }
            }
        }
        pthread_mutex_unlock(&f->mu);
    }
    jz_close(&t);
    const char *err = capture_end();
    for (int i = 0; i < nwant; i++)
        if (!strstr(err, want[i]))
            JZT_FAIL("not in the log: \"%s\"", want[i]);
    CHECK(found == nwant);
    CHECK(acks == nacked);
    CHECK(polled == 0);
    fake_stop(f);
}

TEST(wrong_token_refused)
{
    fake *f = fake_start();
    env_trial(f, NULL);
    setenv("JIZHI_TOKEN", "forged", 1);
    /* A close that still waited for the refused reports would time out
       and say "closing with N reports not acknowledged". */
    setenv("JIZHI_CLOSE_TIMEOUT_MS", "20000", 1);
    capture_begin();
    jz_trial *t = jz_open();
    CHECK(t != NULL);
    CHECK(jz_report(t, 1, "loss", 1) == -1);
    CHECK(jz_flush(t, 5000) == -1);
    jz_close(&t);
    const char *err = capture_end();
    unsetenv("JIZHI_CLOSE_TIMEOUT_MS");
    CHECK(strstr(err, "not acknowledged") == NULL); /* nothing left to wait for */
    CHECK(strstr(err, "refused") != NULL);
    pthread_mutex_lock(&f->mu);
    CHECK(f->unauthorized >= 1);
    CHECK(f->npoints == 0);
    pthread_mutex_unlock(&f->mu);
    fake_stop(f);
}

TEST(queue_bounded_without_controller)
{
    char ep[400];
    snprintf(ep, sizeof ep, "ipc://%s/nobody", s_tmpdir);
    env_trial(NULL, NULL);
    setenv("JIZHI_TRIAL", "9", 1);
    setenv("JIZHI_ENDPOINT", ep, 1);
    setenv("JIZHI_TOKEN", FAKE_TOKEN, 1);
    setenv("JIZHI_HELLO_TIMEOUT_MS", "20", 1);
    setenv("JIZHI_CLOSE_TIMEOUT_MS", "50", 1);
    capture_begin();
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    long accepted = 0;
    for (long i = 0; i < 1000001; i++)
        if (jz_report(t, i, "loss", 1) == 0)
            accepted++;
    CHECK(accepted == 1000000);
    CHECK(jz_report(t, 0, "loss", 1) == -1);
    CHECK(jz_flush(t, 10) == -1);
    jz_close(&t);
    capture_end();
}

TEST(controller_starts_late)
{
    char ep[400];
    snprintf(ep, sizeof ep, "ipc://%s/late", s_tmpdir);
    env_trial(NULL, NULL);
    setenv("JIZHI_TRIAL", "7", 1);
    setenv("JIZHI_ENDPOINT", ep, 1);
    setenv("JIZHI_TOKEN", FAKE_TOKEN, 1);
    setenv("JIZHI_HELLO_TIMEOUT_MS", "10", 1);
    capture_begin();
    jz_trial *t = jz_open();
    capture_end();
    REQUIRE(t != NULL);
    for (int i = 0; i < 10; i++)
        jz_report(t, i, "loss", i);
    sleep_ms(100);
    fake *f = fake_start_at(ep);
    CHECK(jz_flush(t, 30000) == 0);
    pthread_mutex_lock(&f->mu);
    CHECK(f->hellos >= 1);
    CHECK(f->npoints == 10);
    pthread_mutex_unlock(&f->mu);
    jz_close(&t);
    fake_stop(f);
}

TEST(controller_restart_resend_dedup)
{
    fake *f = fake_start();
    env_trial(f, NULL);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    for (int i = 0; i < 1000; i++)
        jz_report(t, i, "loss", i);
    CHECK(jz_flush(t, 30000) == 0);
    /* the next batch is persisted but the controller dies before answering */
    pthread_mutex_lock(&f->mu);
    f->drop_replies = 1;
    pthread_mutex_unlock(&f->mu);
    for (int i = 1000; i < 2000; i++)
        jz_report(t, i, "loss", i);
    CHECK(jz_flush(t, 300) == -1);
    char ep[300];
    snprintf(ep, sizeof ep, "%s", f->endpoint);
    pthread_mutex_lock(&f->mu);
    size_t n1 = f->npoints;
    long highest = f->highest_req;
    char session[40];
    snprintf(session, sizeof session, "%s", f->session);
    fpoint *p1 = malloc(n1 * sizeof *p1);
    memcpy(p1, f->points, n1 * sizeof *p1);
    pthread_mutex_unlock(&f->mu);
    fake_stop(f);
    for (int i = 2000; i < 3000; i++)
        jz_report(t, i, "loss", i);
    /* a new controller on the same endpoint, with the persisted highest req */
    f = fake_start_at(ep);
    pthread_mutex_lock(&f->mu);
    f->highest_req = highest;
    snprintf(f->session, sizeof f->session, "%s", session);
    pthread_mutex_unlock(&f->mu);
    CHECK(jz_flush(t, 30000) == 0);
    pthread_mutex_lock(&f->mu);
    CHECK(n1 == 2000);
    CHECK(f->dup_batches >= 1); /* the resent batch was not stored twice */
    CHECK(n1 + f->npoints == 3000);
    int ok = n1 + f->npoints == 3000;
    for (size_t i = 0; ok && i < 3000; i++)
        ok = (i < n1 ? p1[i].step : f->points[i - n1].step) == (long)i;
    CHECK(ok);
    pthread_mutex_unlock(&f->mu);
    free(p1);
    jz_close(&t);
    fake_stop(f);
}

/* A controller that hears but never answers (stopped, or overloaded):
   the helper resends its hello after 2-3 s, then 4-6 s later, ... (the
   backoff of util_backoff), not every 2 s. In 6.5 s: the hello and 1 or
   2 resends, where a fixed period sent it 4 times. Then the controller
   answers: the points of the meantime arrive, once each. */
TEST(resends_back_off_while_the_controller_does_not_answer)
{
    fake *f = fake_start();
    pthread_mutex_lock(&f->mu);
    f->silent = 1;
    pthread_mutex_unlock(&f->mu);
    env_trial(f, NULL);
    setenv("JIZHI_HELLO_TIMEOUT_MS", "10", 1);
    capture_begin();
    jz_trial *t = jz_open();
    capture_end();
    REQUIRE(t != NULL);
    for (int i = 0; i < 10; i++)
        jz_report(t, i, "loss", i);
    sleep_ms(6500);
    pthread_mutex_lock(&f->mu);
    long hellos = f->silent_hellos, batches = f->silent_batches;
    f->silent = 0;
    pthread_mutex_unlock(&f->mu);
    printf("  hello sent %ld times in 6.5 s, %ld batches\n", hellos, batches);
    CHECK(hellos >= 2 && hellos <= 3);
    CHECK(batches == 0); /* no batch before the hello is answered */
    CHECK(jz_flush(t, 30000) == 0);
    pthread_mutex_lock(&f->mu);
    CHECK(f->npoints == 10);
    pthread_mutex_unlock(&f->mu);
    jz_close(&t);
    fake_stop(f);
}

/* ---- --serve mode --------------------------------------------------------- */

/* The instruction parser alone (jz__parse_instruction; fuzzed by
   tests/fuzz/fuzz_instr.c): what is delivered, refused with a reason, or
   dropped. */
TEST(instruction_parser)
{
    jz__pending_ins p;
    char detail[128];
    struct {
        const char *json;
        int rc;             /* 0 delivered, 1 refused, -1 dropped */
        const char *detail; /* part of the refusal */
    } cases[] = {
        {"{\"type\":\"instruction\",\"kind\":\"stop\"}", -1, ""},
        {"{\"id\":\"3\",\"kind\":\"stop\"}", -1, ""},
        {"{\"id\":3,\"kind\":\"explode\"}", 1, "unknown instruction kind"},
        {"{\"id\":3,\"kind\":7}", 1, "unknown instruction kind"},
        {"{\"id\":3,\"kind\":\"stop\"}", 0, ""},
        {"{\"id\":3,\"kind\":\"set\",\"name\":\"a b\",\"value\":1}", 1, "'name'"},
        {"{\"id\":3,\"kind\":\"set\",\"value\":1}", 1, "'name'"},
        {"{\"id\":3,\"kind\":\"set\",\"name\":\"lr\",\"value\":{}}", 1, "'value'"},
        {"{\"id\":3,\"kind\":\"set\",\"name\":\"lr\",\"value\":\"a\\u0000b\"}", 1,
         "'value'"},
        {"{\"id\":3,\"kind\":\"set\",\"name\":\"lr\"}", 1, "'value'"},
        {"{\"id\":3,\"kind\":\"load\",\"path\":5}", 1, "'path'"},
        {"{\"id\":3,\"kind\":\"load\",\"path\":\"/c\",\"params\":[1]}", 1, "'params'"},
        {"{\"id\":3,\"kind\":\"load\",\"path\":\"/c\",\"params\":null}", 0, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *m = json_loads(cases[i].json, JSON_ALLOW_NUL, NULL);
        REQUIRE(m != NULL);
        int rc = jz__parse_instruction(m, &p, detail, sizeof detail);
        if (rc != cases[i].rc || !strstr(detail, cases[i].detail))
            fprintf(stderr, "  case %zu: %s -> %d \"%s\"\n", i, cases[i].json, rc,
                    detail);
        CHECK(rc == cases[i].rc);
        CHECK(strstr(detail, cases[i].detail) != NULL);
        if (rc >= 0)
            CHECK(p.ins.id == 3);
        jz__pending_ins_fini(&p);
        json_decref(m);
    }
    /* what a delivered set and load carry */
    json_t *m = json_pack("{s:i, s:s, s:s, s:f}", "id", 9, "kind", "set", "name", "lr",
                          "value", 1.0);
    CHECK(jz__parse_instruction(m, &p, detail, sizeof detail) == 0);
    CHECK(p.ins.kind == JZ_INS_SET && p.ins.id == 9);
    CHECK_STR(p.ins.name, "lr");
    CHECK_STR(p.ins.str, "1.0");
    CHECK(p.ins.value == 1.0 && json_is_real(p.value));
    jz__pending_ins_fini(&p);
    json_decref(m);
    m = json_pack("{s:i, s:s, s:s, s:s}", "id", 9, "kind", "set", "name", "opt", "value",
                  "lamb");
    CHECK(jz__parse_instruction(m, &p, detail, sizeof detail) == 0);
    CHECK_STR(p.ins.str, "lamb");
    CHECK(isnan(p.ins.value));
    jz__pending_ins_fini(&p);
    json_decref(m);
    m = json_pack("{s:i, s:s, s:s, s:{s:i}}", "id", 10, "kind", "load", "path", "/ck/5",
                  "params", "bs", 64);
    CHECK(jz__parse_instruction(m, &p, detail, sizeof detail) == 0);
    CHECK(p.ins.kind == JZ_INS_LOAD);
    CHECK_STR(p.ins.str, "/ck/5");
    CHECK(json_integer_value(json_object_get(p.params, "bs")) == 64);
    jz__pending_ins_fini(&p);
    json_decref(m);
}

/* The checkpoint directory the helper creates is the trial's user's only. */
TEST(checkpoint_dir_private)
{
    mode_t old = umask(022);
    env_trial(NULL, NULL);
    char dir[400], sub[420];
    snprintf(dir, sizeof dir, "%s/ck", s_tmpdir);
    snprintf(sub, sizeof sub, "%s/ck/trial-3", s_tmpdir);
    setenv("JIZHI_CHECKPOINT_DIR", sub, 1);
    jz_trial *t = jz_open();
    REQUIRE(t != NULL);
    CHECK_STR(jz_checkpoint_dir(t), sub);
    struct stat sb;
    CHECK(stat(dir, &sb) == 0 && (sb.st_mode & 07777) == 0700);
    CHECK(stat(sub, &sb) == 0 && (sb.st_mode & 07777) == 0700);
    jz_close(&t);
    unsetenv("JIZHI_CHECKPOINT_DIR");
    umask(old);
}

/* A trial told a tcp:// endpoint without the controller's key does not
   fall back to plain TCP: it says how to get the key and sends nothing;
   JIZHI_SERVER_KEY=none (from an --insecure dispatcher) is plain TCP. */
TEST(tcp_needs_server_key)
{
    fake *f = fake_start_at("tcp://127.0.0.1:*");
    env_trial(f, NULL);
    char home[400];
    snprintf(home, sizeof home, "%s/nokeys", s_tmpdir);
    setenv("JIZHI_HOME", home, 1);
    unsetenv("JIZHI_SERVER_KEY");
    setenv("JIZHI_HELLO_TIMEOUT_MS", "300", 1);
    setenv("JIZHI_CLOSE_TIMEOUT_MS", "300", 1);
    capture_begin();
    jz_trial *t = jz_open();
    CHECK(t != NULL);
    jz_report(t, 1, "loss", 1);
    jz_flush(t, 300);
    jz_close(&t);
    const char *err = capture_end();
    CHECK(strstr(err, "no server key") != NULL);
    CHECK(strstr(err, "--insecure") != NULL);
    pthread_mutex_lock(&f->mu);
    CHECK(f->hellos == 0 && f->npoints == 0);
    pthread_mutex_unlock(&f->mu);

    setenv("JIZHI_SERVER_KEY", "none", 1);
    setenv("JIZHI_HELLO_TIMEOUT_MS", "3000", 1);
    t = jz_open();
    REQUIRE(t != NULL);
    CHECK(jz_report(t, 1, "loss", 1) == 0);
    CHECK(jz_flush(t, 5000) == 0);
    jz_close(&t);
    pthread_mutex_lock(&f->mu);
    CHECK(f->hellos >= 1 && f->npoints == 1);
    pthread_mutex_unlock(&f->mu);
    unsetenv("JIZHI_SERVER_KEY");
    unsetenv("JIZHI_HOME");
    unsetenv("JIZHI_CLOSE_TIMEOUT_MS");
    fake_stop(f);
}

static int serve(const char *endpoint, long want, const char *params)
{
    snprintf(s_tmpdir, sizeof s_tmpdir, "/tmp");
    fake *f = fake_start_at(endpoint);
    if (params) {
        json_decref(f->hello_params);
        f->hello_params = json_loads(params, 0, NULL);
        if (!json_is_object(f->hello_params)) {
            fprintf(stderr, "--serve: PARAMS must be a JSON object\n");
            return 2;
        }
    }
    printf("listening %s\n", endpoint);
    fflush(stdout);
    /* wait for hello, then push three instructions */
    double end = util_now() + 15;
    int pushed = 0, done = 0;
    while (util_now() < end && !done) {
        sleep_ms(5);
        pthread_mutex_lock(&f->mu);
        int hello = f->hellos > 0;
        done = pushed && (long)f->npoints >= want && json_array_size(f->acks) >= 3 &&
               json_array_size(f->checkpoints) >= 1;
        pthread_mutex_unlock(&f->mu);
        if (hello && !pushed) {
            pushed = 1;
            fake_instruct(f, json_pack("{s:i, s:s, s:s, s:f}", "id", 1, "kind", "set",
                                       "name", "lr", "value", 0.5));
            fake_instruct(f, json_pack("{s:i, s:s, s:s, s:s}", "id", 2, "kind", "set",
                                       "name", "optimizer", "value", "lamb"));
            fake_instruct(f, json_pack("{s:i, s:s}", "id", 3, "kind", "checkpoint"));
        }
    }
    sleep_ms(50); /* let the last replies go out */
    pthread_mutex_lock(&f->mu);
    json_t *names = json_object();
    json_t *nonfinite = json_array();
    for (size_t i = 0; i < f->npoints; i++) {
        json_t *c = json_object_get(names, f->points[i].name);
        json_object_set_new(names, f->points[i].name,
                            json_integer(c ? json_integer_value(c) + 1 : 1));
        if (!isfinite(f->points[i].value))
            json_array_append_new(
                nonfinite, json_pack("[I, s, o]", (json_int_t)f->points[i].step,
                                     f->points[i].name, wire_real(f->points[i].value)));
    }
    json_t *first = f->npoints
                        ? json_pack("[I, s, o]", (json_int_t)f->points[0].step,
                                    f->points[0].name, wire_real(f->points[0].value))
                        : json_null();
    fpoint *lp = f->npoints ? &f->points[f->npoints - 1] : NULL;
    json_t *last =
        lp ? json_pack("[I, s, o]", (json_int_t)lp->step, lp->name, wire_real(lp->value))
           : json_null();
    json_t *sum = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:O, s:O, s:o}", "points",
        (json_int_t)f->npoints, "hellos", (json_int_t)f->hellos, "batches",
        (json_int_t)f->batches, "dup_batches", (json_int_t)f->dup_batches, "bad_points",
        (json_int_t)f->bad_points, "names", names, "first", first, "last", last, "acks",
        f->acks, "checkpoints", f->checkpoints, "nonfinite", nonfinite);
    pthread_mutex_unlock(&f->mu);
    char *s = json_dumps(sum, JSON_COMPACT | JSON_SORT_KEYS);
    printf("%s\n", s);
    fflush(stdout);
    free(s);
    json_decref(sum);
    fake_stop(f);
    return done ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "--serve"))
        return serve(argv[2], atol(argv[3]), argc >= 5 ? argv[4] : NULL);
    snprintf(s_tmpdir, sizeof s_tmpdir, "/tmp/jz_helper_test.XXXXXX");
    if (!mkdtemp(s_tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    setenv("JIZHI_LOG", "warn", 1);
    RUN(standalone_mode);
    RUN(param_types_and_defaults);
    RUN(env_errors);
    RUN(follower_rank_sends_nothing);
    RUN(hello_params_override_env);
    RUN(batching_in_order_with_resend_dedup);
    RUN(large_volume_batches_capped);
    RUN(points_before_a_load_are_stored_before_its_ack);
    RUN(instructions_delivered_once_params_updated_acked);
    RUN(unhandled_pause_is_carried_out_by_the_helper);
    RUN(stop_ends_a_pause_held_by_the_helper_and_reaches_the_program);
    RUN(unpolled_instructions_refused_at_close);
    RUN(stop_judged_by_close_not_by_a_draining_poll);
    RUN(late_hello_does_not_undo_set);
    RUN(flush_semantics);
    RUN(idle_thread_sleeps_until_something_is_due);
    RUN(checkpoint_done_sent);
    RUN(non_finite_values);
    RUN(every_type_refuses_a_missing_or_mistyped_field);
    RUN(wrong_token_refused);
    RUN(queue_bounded_without_controller);
    RUN(controller_starts_late);
    RUN(controller_restart_resend_dedup);
    RUN(resends_back_off_while_the_controller_does_not_answer);
    RUN(instruction_parser);
    RUN(checkpoint_dir_private);
    RUN(tcp_needs_server_key);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", s_tmpdir);
    TEST_DONE();
}
