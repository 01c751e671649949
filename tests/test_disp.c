/*  test_disp.c - the dispatcher against a fake controller.

    Each test binds a ZeroMQ ROUTER on an ipc:// endpoint in a fresh temp
    directory (the fake controller, driven from the test's own thread with
    wire_recv/wire_send) and runs disp_run in a pthread. Real processes are
    started. Waits have generous upper bounds; nothing asserts on time.
*/
#define _GNU_SOURCE
#include "jz_test.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/wire.h"
#include "common/util.h"
#include "dispatcher/disp.h"
#include "dispatcher/disp_int.h"
#include "msg_testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

/* ---- fake controller ---------------------------------------------------- */

enum { HB_OK, HB_UNKNOWN_ONCE, HB_SILENT };

typedef struct {
    void *ctx, *router;
    char dir[128];            /* temp dir */
    char endpoint[256];       /* ipc://<dir>/ctl */
    wire_peer peer;           /* the dispatcher, once heard */
    int hb_mode;              /* how heartbeats are answered */
    int reg_silent;           /* do not answer register */
    int reg_refuse;           /* answer register with forbidden */
    int drop_exited;          /* exited acks still to drop */
    const char *exited_error; /* answer exited with this error code */
    int nregister;            /* registers seen */
    int nheartbeat;           /* heartbeats seen */
} fake_ctl;

typedef struct {
    disp_t *d;
    pthread_t th;
    atomic_int stop;
    volatile int done;
    int rc;
} disp_thread;

static void fc_reply(fake_ctl *fc, json_t *m)
{
    wire_send(fc->router, &fc->peer, m, 0);
}

/* Receives one message (up to timeout_s), answering as a controller
   would. Returns it (caller owns) or NULL. */
static json_t *fc_recv(fake_ctl *fc, double timeout_s)
{
    zmq_pollitem_t it = {fc->router, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, (long)(timeout_s * 1000)) <= 0)
        return NULL;
    char err[256];
    wire_peer from;
    json_t *m = wire_recv(fc->router, &from, 1, err, sizeof err);
    if (!m)
        return NULL;
    fc->peer = from;
    const char *type = wire_type(m);
    json_int_t req = json_integer_value(json_object_get(m, "req"));
    if (!strcmp(type, "register")) {
        fc->nregister++;
        if (fc->reg_refuse)
            fc_reply(fc, wire_error(req, "forbidden", "not a dispatcher's key"));
        else if (!fc->reg_silent)
            fc_reply(fc, wire_ok(req));
    } else if (!strcmp(type, "disp_heartbeat")) {
        fc->nheartbeat++;
        if (fc->hb_mode == HB_OK) {
            fc_reply(fc, wire_ok(req));
        } else if (fc->hb_mode == HB_UNKNOWN_ONCE) {
            fc_reply(fc, wire_error(req, "unknown_dispatcher", "who are you"));
            fc->hb_mode = HB_OK;
        }
    } else if (!strcmp(type, "started")) {
        fc_reply(fc, wire_ok(req));
    } else if (!strcmp(type, "exited")) {
        if (fc->drop_exited > 0)
            fc->drop_exited--;
        else if (fc->exited_error)
            fc_reply(fc, wire_error(req, fc->exited_error, "refused"));
        else
            fc_reply(fc, wire_ok(req));
    }
    return m;
}

/* Waits for a message of `type` (about `trial`, unless < 0), answering
   everything else. Caller owns the result; NULL on timeout. */
static json_t *fc_wait(fake_ctl *fc, const char *type, long trial, double timeout_s)
{
    double until = util_now() + timeout_s;
    for (;;) {
        double left = until - util_now();
        if (left <= 0)
            return NULL;
        json_t *m = fc_recv(fc, left);
        if (!m)
            continue;
        if (!strcmp(wire_type(m), type) &&
            (trial < 0 || json_integer_value(json_object_get(m, "trial")) == trial))
            return m;
        json_decref(m);
    }
}

/* Sends to the dispatcher (takes ownership). */
static void fc_send(fake_ctl *fc, json_t *m)
{
    REQUIRE(fc->peer.len > 0);
    wire_send(fc->router, &fc->peer, m, 0);
}

static void *s_disp_main(void *arg)
{
    disp_thread *t = arg;
    t->rc = disp_run(t->d, &t->stop);
    __atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static disp_config s_cfg(fake_ctl *fc, char *logs, size_t n)
{
    snprintf(logs, n, "%s/logs", fc->dir);
    disp_config c = {0};
    c.controller = fc->endpoint;
    c.name = "test-disp";
    c.slots = 4;
    c.gpus = "none";
    c.log_dir = logs;
    c.kill_grace_s = 0.5;
    return c;
}

/* Binds the fake controller in a new temp dir. */
static int fc_open(fake_ctl *fc)
{
    memset(fc, 0, sizeof *fc);
    snprintf(fc->dir, sizeof fc->dir, "/tmp/jzdisp-XXXXXX");
    if (!mkdtemp(fc->dir))
        return -1;
    snprintf(fc->endpoint, sizeof fc->endpoint, "ipc://%s/ctl", fc->dir);
    fc->ctx = zmq_ctx_new();
    fc->router = zmq_socket(fc->ctx, ZMQ_ROUTER);
    wire_socket_setup(fc->router);
    return zmq_bind(fc->router, fc->endpoint);
}

/* Starts the dispatcher thread and waits for its registration. */
static int dt_start(disp_thread *t, fake_ctl *fc, const disp_config *cfg,
                    int kill_on_stop)
{
    memset(t, 0, sizeof *t);
    t->d = disp_new(cfg);
    if (!t->d)
        return -1;
    disp_set_kill_on_stop(t->d, kill_on_stop);
    if (pthread_create(&t->th, NULL, s_disp_main, t) != 0)
        return -1;
    json_t *r = fc_wait(fc, "register", -1, 10);
    if (!r)
        return -1;
    json_decref(r);
    return 0;
}

/* Stops the dispatcher, answering it meanwhile; collects what it sends
   into `seen` (when not NULL). */
static void dt_stop(disp_thread *t, fake_ctl *fc, json_t *seen)
{
    atomic_store(&t->stop, 1);
    while (!__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) {
        json_t *m = fc_recv(fc, 0.05);
        if (m && seen)
            json_array_append(seen, m);
        json_decref(m);
    }
    pthread_join(t->th, NULL);
    CHECK(t->rc == 0);
    disp_destroy(&t->d);
    CHECK(t->d == NULL);
}

static int s_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void fc_close(fake_ctl *fc)
{
    zmq_close(fc->router);
    zmq_ctx_term(fc->ctx);
    nftw(fc->dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- helpers ------------------------------------------------------------ */

static json_t *s_start_msg(long trial, long attempt, json_t *argv)
{
    return json_pack("{s:s, s:I, s:I, s:s, s:o, s:{}, s:f, s:i}", "type", "start",
                     "trial", (json_int_t)trial, "attempt", (json_int_t)attempt, "study",
                     "s1", "argv", argv, "env", "timeout_s", 0.0, "gpus", 0);
}

static char *s_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = (len + 4096 + 1) * 2;
            buf = realloc(buf, cap);
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        if (r == 0)
            break;
        len += r;
    }
    fclose(f);
    buf[len] = 0;
    return buf;
}

/* Reads a file once it has content (up to timeout_s). */
static char *s_read_wait(const char *path, double timeout_s)
{
    double until = util_now() + timeout_s;
    for (;;) {
        char *s = s_read(path);
        if ((s && s[0]) || util_now() > until)
            return s;
        free(s);
        usleep(20000);
    }
}

static const char *s_str(const json_t *m, const char *key)
{
    const char *s = json_string_value(json_object_get(m, key));
    return s ? s : "(none)";
}

static long s_int(const json_t *m, const char *key)
{
    json_t *v = json_object_get(m, key);
    return json_is_integer(v) ? (long)json_integer_value(v) : -999;
}

/* A process that is gone, or a zombie nobody reaped yet (it is dead). */
static int s_proc_dead(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    char *s = s_read(path);
    if (!s)
        return 1;
    char *p = strrchr(s, ')');
    int dead = p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
    free(s);
    return dead;
}

static int s_wait_dead(pid_t pid, double timeout_s)
{
    double until = util_now() + timeout_s;
    while (!s_proc_dead(pid)) {
        if (util_now() > until)
            return 0;
        usleep(20000);
    }
    return 1;
}

/* The log (stderr) into <fc's dir>/disp.log, its path in `path`, warnings
   and errors only: returns the saved stderr for s_log_back, or -1. */
static int s_log_to_file(const fake_ctl *fc, char *path, size_t n)
{
    snprintf(path, n, "%s/disp.log", fc->dir);
    fflush(stderr);
    int lfd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (lfd < 0)
        return -1;
    int saved_err = dup(2);
    dup2(lfd, 2);
    close(lfd);
    log_set_level(LOGL_WARN);
    return saved_err;
}

static void s_log_back(int saved_err)
{
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    log_set_level(getenv("JIZHI_LOG") ? LOGL_INFO : LOGL_ERROR);
}

/* Waits (answering the dispatcher meanwhile) until the log at path holds
   `want`: 1, or 0 after timeout_s. */
static int s_log_wait(fake_ctl *fc, const char *path, const char *want, double timeout_s)
{
    double until = util_now() + timeout_s;
    for (;;) {
        char *text = s_read(path);
        int found = text && strstr(text, want);
        free(text);
        if (found || util_now() > until)
            return found;
        json_decref(fc_recv(fc, 0.05));
    }
}

/* ---- tests -------------------------------------------------------------- */

/* The usual fixture: a fake controller, the default config and a running
   dispatcher that kills its trials when stopped (fx_open), or the same in
   two steps with a changed config between them (fx_init, fx_start). */
typedef struct {
    fake_ctl fc;
    char logs[256];
    disp_config cfg;
    disp_thread t;
} disp_fix;

/* The fake controller and the default config, the dispatcher not started
   yet (a test may change x->cfg first): 0 or -1. */
static int fx_init(disp_fix *x)
{
    if (fc_open(&x->fc) != 0)
        return -1;
    x->cfg = s_cfg(&x->fc, x->logs, sizeof x->logs);
    return 0;
}

/* Starts the dispatcher on x->cfg, killing its trials when stopped or not:
   0 once it registered, or -1. */
static int fx_start(disp_fix *x, int kill_on_stop)
{
    return dt_start(&x->t, &x->fc, &x->cfg, kill_on_stop);
}

static int fx_open(disp_fix *x)
{
    return fx_init(x) == 0 ? fx_start(x, 1) : -1;
}

/* Stops the dispatcher (collecting into seen, when not NULL) and removes the
   fake controller's folder. */
static void fx_close(disp_fix *x, json_t *seen)
{
    dt_stop(&x->t, &x->fc, seen);
    fc_close(&x->fc);
}

TEST(unit_parsers)
{
    int *g, n;
    char err[256];
    CHECK(disp__gpu_parse("0,1, 3", &g, &n, err, sizeof err) == 0);
    CHECK(n == 3 && g[0] == 0 && g[1] == 1 && g[2] == 3);
    free(g);
    CHECK(disp__gpu_parse("none", &g, &n, err, sizeof err) == 0 && n == 0);
    CHECK(disp__gpu_parse("0,0", &g, &n, err, sizeof err) == -1);
    CHECK(disp__gpu_parse("a", &g, &n, err, sizeof err) == -1);
    CHECK(disp__gpu_parse("1,", &g, &n, err, sizeof err) == -1);
    CHECK(disp__gpu_parse("-1", &g, &n, err, sizeof err) == -1);
    CHECK(strstr(err, "gpus") != NULL);

    const char *cases[][2] = {{"a/b", "a_b"}, {"..", "_.."}, {"", "_"},
                              {"x y", "x y"}, {".h", "_.h"}, {"a\nb", "a_b"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *s = disp__path_component(cases[i][0]);
        CHECK_STR(s, cases[i][1]);
        free(s);
    }
}

/* A random JSON value, sometimes one of the right shape. */
static json_t *s_rand_json(unsigned *seed, int depth)
{
    static const char *strs[] = {"",    "x",   "/bin/true", "a/b",     "..",
                                 "A=B", "nan", "-inf",      "\xc3\xa9"};
    switch (rand_r(seed) % (depth > 2 ? 6 : 8)) {
    case 0:
        return json_null();
    case 1:
        return json_boolean(rand_r(seed) & 1);
    case 2: {
        static const json_int_t ints[] = {0, 1, -1, 7, 4096, 4097, LLONG_MAX, LLONG_MIN};
        return json_integer(ints[rand_r(seed) % 8]);
    }
    case 3: {
        static const double reals[] = {0.0, -0.5, 0.25, 1e300, -1e-300};
        return json_real(reals[rand_r(seed) % 5]);
    }
    case 4:
    case 5:
        return json_string(strs[rand_r(seed) % (sizeof strs / sizeof *strs)]);
    case 6: {
        json_t *a = json_array();
        for (int i = rand_r(seed) % 4; i > 0; i--)
            json_array_append_new(a, s_rand_json(seed, depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (int i = rand_r(seed) % 4; i > 0; i--)
            json_object_set_new(o, strs[rand_r(seed) % (sizeof strs / sizeof *strs)],
                                s_rand_json(seed, depth + 1));
        return o;
    }
    }
}

TEST(chaos_start_and_kill)
{
    static const char *keys[] = {"trial",     "attempt", "study",   "argv",   "env",
                                 "timeout_s", "gpus",    "log_dir", "reason", "req"};
    unsigned seed = 12345;
    int accepted = 0;
    for (int it = 0; it < 20000; it++) {
        json_t *m = json_pack("{s:s}", "type", "start");
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            if (rand_r(&seed) % 4 != 0)
                json_object_set_new(m, keys[k], s_rand_json(&seed, 0));
        if (rand_r(&seed) % 2) { /* mostly right, one field random */
            json_object_set_new(m, "trial", json_integer(1));
            json_object_set_new(m, "attempt", json_integer(0));
            json_object_set_new(m, "study", json_string("s"));
            json_object_set_new(m, "argv", json_pack("[s]", "true"));
            json_object_set_new(m, keys[rand_r(&seed) % 10], s_rand_json(&seed, 0));
        }
        disp__start st;
        int ids;
        char err[256];
        if (disp__parse_start(m, &st, &ids, err, sizeof err) == 0) {
            accepted++;
            CHECK(st.trial >= 0 && st.attempt >= 0 && st.study && st.study[0]);
            CHECK(json_array_size(st.argv) > 0 && st.gpus >= 0 && st.timeout_s >= 0);
            for (size_t i = 0; i < json_array_size(st.argv); i++)
                CHECK(json_is_string(json_array_get(st.argv, i)));
            CHECK(!st.env || json_is_object(st.env));
        } else {
            CHECK(err[0] != 0);
        }
        long tr, at;
        const char *why;
        if (disp__parse_kill(m, &tr, &at, &why, err, sizeof err) == 0)
            CHECK(tr >= 0 && at >= -1);
        json_decref(m);
    }
    CHECK(accepted > 0);
}

TEST(register_and_heartbeat)
{
    fake_ctl fc;
    REQUIRE(fc_open(&fc) == 0);
    char logs[256];
    disp_config cfg = s_cfg(&fc, logs, sizeof logs);
    cfg.slots = 3;
    cfg.gpus = "2,0";
    disp_thread t;
    memset(&t, 0, sizeof t);
    t.d = disp_new(&cfg);
    REQUIRE(t.d);
    REQUIRE(pthread_create(&t.th, NULL, s_disp_main, &t) == 0);

    json_t *r = fc_wait(&fc, "register", -1, 10);
    CHECK(r != NULL);
    if (r) {
        CHECK_STR(s_str(r, "name"), "test-disp");
        CHECK(s_int(r, "slots") == 3);
        CHECK(json_is_integer(json_object_get(r, "req")));
        json_t *g = json_object_get(r, "gpus");
        CHECK(json_array_size(g) == 2 && json_integer_value(json_array_get(g, 0)) == 2 &&
              json_integer_value(json_array_get(g, 1)) == 0);
        CHECK(json_is_array(json_object_get(r, "running")));
        CHECK(json_array_size(json_object_get(r, "running")) == 0);
    }
    json_decref(r);
    for (int i = 0; i < 2; i++) {
        json_t *h = fc_wait(&fc, "disp_heartbeat", -1, 5);
        CHECK(h != NULL);
        if (h) {
            CHECK_STR(s_str(h, "name"), "test-disp");
            CHECK(json_is_array(json_object_get(h, "running")));
            CHECK(json_is_integer(json_object_get(h, "req")));
        }
        json_decref(h);
    }
    /* unknown_dispatcher -> register again (with running trials listed) */
    fc_send(&fc, s_start_msg(1, 0, json_pack("[s,s]", "sleep", "30")));
    json_t *st = fc_wait(&fc, "started", 1, 10);
    CHECK(st != NULL);
    fc.hb_mode = HB_UNKNOWN_ONCE;
    int before = fc.nregister;
    r = fc_wait(&fc, "register", -1, 10);
    CHECK(r != NULL && fc.nregister == before + 1);
    if (r && st) {
        json_t *run = json_object_get(r, "running");
        CHECK(json_array_size(run) == 1);
        json_t *e = json_array_get(run, 0);
        CHECK(s_int(e, "trial") == 1 && s_int(e, "attempt") == 0);
        CHECK(s_int(e, "pid") == s_int(st, "pid"));
    }
    json_decref(r);
    json_decref(st);
    /* and heartbeats go on after the new registration */
    json_t *h = fc_wait(&fc, "disp_heartbeat", -1, 5);
    CHECK(h != NULL);
    json_decref(h);
    json_t *seen = json_array();
    dt_stop(&t, &fc, seen);
    /* stopping killed the trial and reported it */
    int killed = 0;
    size_t i;
    json_t *m;
    json_array_foreach(seen, i,
                       m) if (!strcmp(wire_type(m), "exited") && s_int(m, "trial") == 1)
    {
        killed = !strcmp(s_str(m, "how"), "killed");
        CHECK(strstr(s_str(m, "message"), "dispatcher stopping") != NULL);
    }
    CHECK(killed);
    json_decref(seen);
    fc_close(&fc);
}

TEST(reregister_after_silence)
{
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    x.cfg.heartbeat_s = 0.2;
    x.cfg.silence_s = 0.6;
    x.cfg.resend_s = 0.3;
    REQUIRE(fx_start(&x, 1) == 0);
    x.fc.hb_mode = HB_SILENT;
    int before = x.fc.nregister;
    json_t *r = fc_wait(&x.fc, "register", -1, 10);
    CHECK(r != NULL && x.fc.nregister == before + 1);
    json_decref(r);
    /* registering: register resent until answered */
    x.fc.reg_silent = 1;
    x.fc.hb_mode = HB_SILENT;
    r = fc_wait(&x.fc, "register", -1, 10);
    json_decref(r);
    r = fc_wait(&x.fc, "register", -1, 10);
    CHECK(r != NULL);
    json_decref(r);
    fx_close(&x, NULL);
}

TEST(refused_register_backs_off)
{
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    x.cfg.resend_s = 0.2;
    x.fc.reg_refuse = 1;
    REQUIRE(fx_start(&x, 1) == 0);
    /* every 0.2 s would be ~15 registers in 3 s; waits of 0.2 + 0.2, 0.4,
       0.8, 1.6 ... after each refusal leave about 3 */
    int before = x.fc.nregister;
    json_t *none = fc_wait(&x.fc, "no-such-type", -1, 3.0);
    CHECK(none == NULL);
    int sent = x.fc.nregister - before;
    CHECK(sent >= 2 && sent <= 6);
    /* once accepted (keys reloaded), it registers and works */
    x.fc.reg_refuse = 0;
    json_t *r = fc_wait(&x.fc, "register", -1, 10);
    CHECK(r != NULL);
    json_decref(r);
    json_t *hb = fc_wait(&x.fc, "disp_heartbeat", -1, 15);
    CHECK(hb != NULL);
    json_decref(hb);
    fx_close(&x, NULL);
}

/* A controller that never answers (nothing listens at the endpoint) is
   warned of, naming the endpoint, after unanswered_s, and its answer once
   it comes is said too (review35 item 6: silent forever). */
TEST(unanswered_controller_is_warned_of)
{
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    x.cfg.resend_s = 0.2;
    x.cfg.unanswered_s = 0.3;
    char logpath[300];
    int saved_err = s_log_to_file(&x.fc, logpath, sizeof logpath);
    REQUIRE(saved_err >= 0);
    log_set_level(LOGL_INFO); /* the answer is said at info level */
    REQUIRE(zmq_unbind(x.fc.router, x.fc.endpoint) == 0);
    memset(&x.t, 0, sizeof x.t);
    x.t.d = disp_new(&x.cfg);
    REQUIRE(x.t.d != NULL);
    REQUIRE(pthread_create(&x.t.th, NULL, s_disp_main, &x.t) == 0);
    char want[400];
    snprintf(want, sizeof want, "warn  disp: no answer from the controller at %s for ",
             x.fc.endpoint);
    CHECK(s_log_wait(&x.fc, logpath, want, 10));
    CHECK(s_log_wait(&x.fc, logpath,
                     " s (is it running? are the endpoint and its key right?)", 1));
    /* the controller comes: it registers, and says the wait is over */
    REQUIRE(zmq_bind(x.fc.router, x.fc.endpoint) == 0);
    json_t *r = fc_wait(&x.fc, "register", -1, 10);
    CHECK(r != NULL);
    json_decref(r);
    snprintf(want, sizeof want, "info  disp: the controller at %s answered, after ",
             x.fc.endpoint);
    CHECK(s_log_wait(&x.fc, logpath, want, 10));
    json_t *hb = fc_wait(&x.fc, "disp_heartbeat", -1, 10);
    CHECK(hb != NULL);
    json_decref(hb);
    fx_close(&x, NULL);
    s_log_back(saved_err);
}

TEST(gpu_detection)
{
    fake_ctl fc;
    REQUIRE(fc_open(&fc) == 0);
    char logs[256], smi[256];
    snprintf(smi, sizeof smi, "%s/fake-smi", fc.dir);
    FILE *f = fopen(smi, "w");
    REQUIRE(f);
    fprintf(
        f,
        "#!/bin/sh\n[ \"$1\" = --query-gpu=index ] || exit 1\nprintf '0\\n1\\n3\\n'\n");
    fclose(f);
    chmod(smi, 0755);
    disp_config cfg = s_cfg(&fc, logs, sizeof logs);
    cfg.gpus = NULL;
    cfg.nvidia_smi = smi;
    disp_thread t;
    memset(&t, 0, sizeof t);
    t.d = disp_new(&cfg);
    REQUIRE(t.d);
    REQUIRE(pthread_create(&t.th, NULL, s_disp_main, &t) == 0);
    json_t *r = fc_wait(&fc, "register", -1, 10);
    CHECK(r != NULL);
    json_t *g = json_object_get(r, "gpus");
    CHECK(json_array_size(g) == 3 && json_integer_value(json_array_get(g, 2)) == 3);
    json_decref(r);
    dt_stop(&t, &fc, NULL);

    /* no nvidia-smi: no error, and it registers no GPUs and its CPU slots */
    cfg.nvidia_smi = "/nonexistent/nvidia-smi";
    memset(&t, 0, sizeof t);
    t.d = disp_new(&cfg);
    REQUIRE(t.d);
    REQUIRE(pthread_create(&t.th, NULL, s_disp_main, &t) == 0);
    r = fc_wait(&fc, "register", -1, 10);
    REQUIRE(r != NULL);
    g = json_object_get(r, "gpus");
    CHECK(json_is_array(g) && json_array_size(g) == 0);
    CHECK(s_int(r, "slots") == cfg.slots);
    json_decref(r);
    dt_stop(&t, &fc, NULL);
    /* bad explicit list: refused */
    cfg.gpus = "0,x";
    CHECK(disp_new(&cfg) == NULL);
    cfg.gpus = "none";
    cfg.controller = NULL;
    CHECK(disp_new(&cfg) == NULL);
    disp_destroy(NULL);
    fc_close(&fc);
}

TEST(run_and_logs)
{
    disp_fix x;
    REQUIRE(fx_open(&x) == 0);

    fc_send(&x.fc, s_start_msg(1, 0,
                               json_pack("[s,s,s]", "/bin/sh", "-c",
                                         "echo hi; echo err >&2; exit 3")));
    json_t *st = fc_wait(&x.fc, "started", 1, 10);
    json_t *ex = fc_wait(&x.fc, "exited", 1, 10);
    REQUIRE(st && ex);
    CHECK(s_int(st, "attempt") == 0 && s_int(st, "pid") > 0);
    CHECK_STR(s_str(st, "name"), "test-disp");
    char out[512], errp[512];
    snprintf(out, sizeof out, "%s/s1/trial-1.0.out", x.logs);
    snprintf(errp, sizeof errp, "%s/s1/trial-1.0.err", x.logs);
    CHECK_STR(s_str(st, "stdout"), out);
    CHECK_STR(s_str(st, "stderr"), errp);
    CHECK(json_array_size(json_object_get(st, "gpus")) == 0);
    CHECK_STR(s_str(ex, "how"), "exited");
    CHECK(s_int(ex, "code") == 3 && s_int(ex, "signal") == 0);
    CHECK(s_int(ex, "req") != s_int(st, "req"));
    CHECK_STR(s_str(ex, "message"), "exit code 3");
    CHECK(json_is_number(json_object_get(ex, "elapsed_s")));
    char *o = s_read(out), *e = s_read(errp);
    CHECK_STR(o, "hi\n");
    CHECK_STR(e, "err\n");
    free(o);
    free(e);
    json_decref(st);
    json_decref(ex);

    /* argv is used unchanged: no shell, no expansion, no splitting */
    fc_send(&x.fc, s_start_msg(2, 0,
                               json_pack("[s,s,s,s,s,s,s]", "printf", "[%s]\\n", "a b",
                                         "$HOME", "*", "", "'q' \"r\"")));
    ex = fc_wait(&x.fc, "exited", 2, 10);
    REQUIRE(ex);
    CHECK(s_int(ex, "code") == 0);
    snprintf(out, sizeof out, "%s/s1/trial-2.0.out", x.logs);
    o = s_read(out);
    CHECK_STR(o, "[a b]\n[$HOME]\n[*]\n[]\n['q' \"r\"]\n");
    free(o);
    json_decref(ex);

    /* killed by a signal of its own */
    fc_send(&x.fc,
            s_start_msg(3, 1, json_pack("[s,s,s]", "/bin/sh", "-c", "kill -9 $$")));
    ex = fc_wait(&x.fc, "exited", 3, 10);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "signaled");
    CHECK(s_int(ex, "signal") == 9 && s_int(ex, "code") == -1 &&
          s_int(ex, "attempt") == 1);
    json_decref(ex);
    fx_close(&x, NULL);
}

/* Finds "KEY=..." as a whole line in env output; returns the value. */
static const char *s_env_line(const char *text, const char *key, char *buf, size_t n)
{
    size_t k = strlen(key);
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > k && !strncmp(p, key, k) && p[k] == '=') {
            snprintf(buf, n, "%.*s", (int)(len - k - 1), p + k + 1);
            return buf;
        }
        p = nl ? nl + 1 : NULL;
    }
    return NULL;
}

TEST(environment)
{
    setenv("JIZHI_TOKEN", "leaked-from-parent", 1); /* before the thread exists */
    setenv("JZ_TEST_INHERITED", "yes", 1);
    setenv("JIZHI_TEST_CKPT_NOMEM", "1", 1); /* jizhi-train's test knobs */
    setenv("JIZHI_CKPT_PIECE_BYTES", "5", 1);
    disp_fix x;
    REQUIRE(fx_open(&x) == 0);

    json_t *m =
        json_pack("{s:s, s:I, s:I, s:s, s:[s], s:{s:s, s:s, s:s}, s:i}", "type", "start",
                  "trial", (json_int_t)5, "attempt", (json_int_t)2, "study", "a/b",
                  "argv", "env", "env", "FOO", "bar baz", "JIZHI_TOKEN", "tok",
                  "JIZHI_PARAMS", "{\"lr\":0.1}", "gpus", 0);
    fc_send(&x.fc, m);
    json_t *ex = fc_wait(&x.fc, "exited", 5, 10);
    REQUIRE(ex);
    CHECK(s_int(ex, "code") == 0);
    char out[512], v[1024];
    snprintf(out, sizeof out, "%s/a_b/trial-5.2.out", x.logs);
    CHECK_STR(s_str(ex, "stdout"), out);
    char *o = s_read(out);
    REQUIRE(o);
    CHECK_STR(s_env_line(o, "JIZHI_TRIAL", v, sizeof v), "5");
    CHECK_STR(s_env_line(o, "JIZHI_ATTEMPT", v, sizeof v), "2");
    CHECK_STR(s_env_line(o, "JIZHI_STUDY", v, sizeof v), "a/b");
    CHECK_STR(s_env_line(o, "JIZHI_TOKEN", v, sizeof v), "tok");
    CHECK_STR(s_env_line(o, "JIZHI_PARAMS", v, sizeof v), "{\"lr\":0.1}");
    CHECK_STR(s_env_line(o, "JIZHI_ENDPOINT", v, sizeof v), x.fc.endpoint);
    CHECK_STR(s_env_line(o, "JIZHI_DISPATCHER", v, sizeof v), "test-disp");
    CHECK_STR(s_env_line(o, "FOO", v, sizeof v), "bar baz");
    CHECK_STR(s_env_line(o, "CUDA_VISIBLE_DEVICES", v, sizeof v), "");
    CHECK_STR(s_env_line(o, "JZ_TEST_INHERITED", v, sizeof v), "yes");
    const char *ck = s_env_line(o, "JIZHI_CHECKPOINT_DIR", v, sizeof v);
    struct stat sb;
    CHECK(ck && stat(ck, &sb) == 0 && S_ISDIR(sb.st_mode));
    free(o);
    json_decref(ex);

    /* a checkpoint dir given in env is used, and created */
    char ck2[300];
    snprintf(ck2, sizeof ck2, "%s/ck/t7", x.fc.dir);
    m = s_start_msg(7, 0, json_pack("[s]", "env"));
    json_object_set_new(json_object_get(m, "env"), "JIZHI_CHECKPOINT_DIR",
                        json_string(ck2));
    fc_send(&x.fc, m);
    ex = fc_wait(&x.fc, "exited", 7, 10);
    REQUIRE(ex);
    o = s_read(s_str(ex, "stdout"));
    CHECK(o && s_env_line(o, "JIZHI_CHECKPOINT_DIR", v, sizeof v) && !strcmp(v, ck2));
    CHECK(stat(ck2, &sb) == 0 && S_ISDIR(sb.st_mode));
    free(o);
    json_decref(ex);

    /* inherited JIZHI_* values never leak into a trial */
    fc_send(&x.fc, s_start_msg(6, 0, json_pack("[s]", "env")));
    ex = fc_wait(&x.fc, "exited", 6, 10);
    REQUIRE(ex);
    o = s_read(s_str(ex, "stdout"));
    CHECK(o && s_env_line(o, "JIZHI_TOKEN", v, sizeof v) == NULL);
    CHECK(o && s_env_line(o, "JIZHI_PARAMS", v, sizeof v) == NULL);
    CHECK(o && s_env_line(o, "JIZHI_TEST_CKPT_NOMEM", v, sizeof v) == NULL);
    CHECK(o && s_env_line(o, "JIZHI_CKPT_PIECE_BYTES", v, sizeof v) == NULL);
    CHECK(o && s_env_line(o, "JZ_TEST_INHERITED", v, sizeof v) != NULL);
    free(o);
    json_decref(ex);
    fx_close(&x, NULL);
    unsetenv("JIZHI_TOKEN");
    unsetenv("JZ_TEST_INHERITED");
    unsetenv("JIZHI_TEST_CKPT_NOMEM");
    unsetenv("JIZHI_CKPT_PIECE_BYTES");
}

TEST(start_failed)
{
    disp_fix x;
    REQUIRE(fx_open(&x) == 0);

    fc_send(&x.fc, s_start_msg(1, 0, json_pack("[s,s]", "jizhi-trainx", "--x")));
    json_t *ex = fc_wait(&x.fc, "exited", 1, 10);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "start_failed");
    CHECK_STR(s_str(ex, "message"), "execvp jizhi-trainx: No such file or directory");
    CHECK(s_int(ex, "code") == 127);
    char *e = s_read(s_str(ex, "stderr"));
    CHECK(e && strstr(e, "execvp jizhi-trainx: No such file or directory"));
    free(e);
    json_decref(ex);

    /* a file that is not executable */
    char path[256];
    snprintf(path, sizeof path, "%s/notexec", x.fc.dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fclose(f);
    fc_send(&x.fc, s_start_msg(2, 0, json_pack("[s]", path)));
    ex = fc_wait(&x.fc, "exited", 2, 10);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "start_failed");
    CHECK(strstr(s_str(ex, "message"), "Permission denied") != NULL);
    json_decref(ex);
    /* neither got a `started` */
    json_t *seen = json_array();
    dt_stop(&x.t, &x.fc, seen);
    size_t i;
    json_t *m;
    json_array_foreach(seen, i, m) CHECK(strcmp(wire_type(m), "started") != 0);
    json_decref(seen);
    fc_close(&x.fc);
}

/* trial.cwd and trial.venv: the child runs in cwd, with the venv's bin
   first on PATH, VIRTUAL_ENV set and PYTHONHOME unset; a missing cwd or a
   venv without bin/python fails the start naming the path; a relative
   program is tried in cwd and the failure names that path. */
TEST(cwd_and_venv)
{
    setenv("PYTHONHOME", "/jz-test-home", 1); /* before the thread exists */
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    char venv[300], py[340], work[300], v[1024];
    snprintf(venv, sizeof venv, "%s/venv", x.fc.dir);
    snprintf(work, sizeof work, "%s/work", x.fc.dir);
    snprintf(py, sizeof py, "%s/bin", venv);
    REQUIRE(util_mkdirs(py, 0700) == 0 && util_mkdirs(work, 0700) == 0);
    snprintf(py, sizeof py, "%s/bin/python", venv);
    FILE *f = fopen(py, "w");
    REQUIRE(f);
    fputs("#!/bin/sh\n", f);
    fclose(f);
    chmod(py, 0700);
    REQUIRE(fx_start(&x, 1) == 0);

    json_t *m = s_start_msg(
        1, 0,
        json_pack("[s,s,s]", "sh", "-c",
                  "echo CWD=$(pwd); echo PATH=$PATH; echo VIRTUAL_ENV=$VIRTUAL_ENV; "
                  "echo PYTHONHOME=${PYTHONHOME-unset}"));
    json_object_set_new(m, "cwd", json_string(work));
    json_object_set_new(m, "venv", json_string(venv));
    fc_send(&x.fc, m);
    json_t *ex = fc_wait(&x.fc, "exited", 1, 10);
    REQUIRE(ex);
    CHECK(s_int(ex, "code") == 0);
    char *o = s_read(s_str(ex, "stdout"));
    REQUIRE(o);
    CHECK_STR(s_env_line(o, "CWD", v, sizeof v), work);
    char want[800];
    snprintf(want, sizeof want, "%s/bin:", venv);
    CHECK(s_env_line(o, "PATH", v, sizeof v) && !strncmp(v, want, strlen(want)));
    CHECK_STR(s_env_line(o, "VIRTUAL_ENV", v, sizeof v), venv);
    CHECK_STR(s_env_line(o, "PYTHONHOME", v, sizeof v), "unset");
    free(o);
    json_decref(ex);

    /* a venv without bin/python, a cwd that is not there */
    unlink(py);
    m = s_start_msg(2, 0, json_pack("[s]", "true"));
    json_object_set_new(m, "venv", json_string(venv));
    fc_send(&x.fc, m);
    ex = fc_wait(&x.fc, "exited", 2, 10);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "start_failed");
    snprintf(want, sizeof want,
             "trial.venv %s is not a virtual environment on this dispatcher's machine: "
             "%s is missing or not executable",
             venv, py);
    CHECK_STR(s_str(ex, "message"), want);
    json_decref(ex);
    m = s_start_msg(3, 0, json_pack("[s]", "true"));
    json_object_set_new(m, "cwd", json_string("/jz-no-such-folder"));
    fc_send(&x.fc, m);
    ex = fc_wait(&x.fc, "exited", 3, 10);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "message"), "trial.cwd /jz-no-such-folder: No such file or "
                                    "directory on this dispatcher's machine");
    json_decref(ex);

    /* ./prog is looked for in cwd */
    m = s_start_msg(4, 0, json_pack("[s]", "./prog"));
    json_object_set_new(m, "cwd", json_string(work));
    fc_send(&x.fc, m);
    ex = fc_wait(&x.fc, "exited", 4, 10);
    REQUIRE(ex);
    snprintf(want, sizeof want, "execvp %s/prog: No such file or directory", work);
    CHECK_STR(s_str(ex, "message"), want);
    json_decref(ex);

    /* a relative cwd is a malformed start */
    m = s_start_msg(5, 0, json_pack("[s]", "true"));
    json_object_set_new(m, "cwd", json_string("work"));
    fc_send(&x.fc, m);
    ex = fc_wait(&x.fc, "exited", 5, 10);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "message"),
              "malformed start: field 'cwd': expected an absolute path");
    json_decref(ex);
    fx_close(&x, NULL);
    unsetenv("PYTHONHOME");
}

TEST(timeouts)
{
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    char pidfile[256], cmd[1024];
    REQUIRE(fx_start(&x, 1) == 0);

    /* a child that runs into its timeout, with a grandchild: the timeout
       leaves the shell ample time to start it (the pid file is written
       first thing), and the grandchild must die with it */
    snprintf(pidfile, sizeof pidfile, "%s/gc.pid", x.fc.dir);
    snprintf(cmd, sizeof cmd, "sleep 30 & echo $! > %s.tmp; mv %s.tmp %s; wait", pidfile,
             pidfile, pidfile);
    json_t *m = s_start_msg(1, 0, json_pack("[s,s,s]", "/bin/sh", "-c", cmd));
    json_object_set_new(m, "timeout_s", json_real(2.0));
    fc_send(&x.fc, m);
    char *p = s_read_wait(pidfile, 10);
    REQUIRE(p); /* started before the timeout */
    pid_t gc = (pid_t)atoi(p);
    free(p);
    REQUIRE(gc > 0);
    json_t *ex = fc_wait(&x.fc, "exited", 1, 15);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "timeout");
    CHECK(s_int(ex, "signal") == SIGTERM);
    CHECK(strstr(s_str(ex, "message"), "timed out after 2 s") != NULL);
    CHECK(s_wait_dead(gc, 5));
    json_decref(ex);

    /* one that ignores SIGTERM gets SIGKILL after the grace period */
    m = s_start_msg(2, 0,
                    json_pack("[s,s,s]", "/bin/sh", "-c", "trap '' TERM; sleep 30"));
    json_object_set_new(m, "timeout_s", json_real(0.3));
    fc_send(&x.fc, m);
    ex = fc_wait(&x.fc, "exited", 2, 15);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "timeout");
    CHECK(s_int(ex, "signal") == SIGKILL);
    json_decref(ex);
    fx_close(&x, NULL);
}

TEST(kill_request)
{
    disp_fix x;
    REQUIRE(fx_open(&x) == 0);

    char pidfile[256], cmd[1024];
    snprintf(pidfile, sizeof pidfile, "%s/gc.pid", x.fc.dir);
    snprintf(cmd, sizeof cmd, "sleep 30 & echo $! > %s.tmp; mv %s.tmp %s; wait", pidfile,
             pidfile, pidfile);
    fc_send(&x.fc, s_start_msg(4, 1, json_pack("[s,s,s]", "/bin/sh", "-c", cmd)));
    json_t *st = fc_wait(&x.fc, "started", 4, 10);
    REQUIRE(st);
    pid_t pid = (pid_t)s_int(st, "pid");
    json_decref(st);
    char *gcs = s_read_wait(pidfile, 10);
    REQUIRE(gcs);
    pid_t gc = (pid_t)atoi(gcs);
    free(gcs);
    CHECK(gc > 0 && !s_proc_dead(gc));
    /* a kill for another attempt or trial changes nothing */
    fc_send(&x.fc, json_pack("{s:s, s:I, s:I}", "type", "kill", "trial", (json_int_t)4,
                             "attempt", (json_int_t)0));
    fc_send(&x.fc, json_pack("{s:s, s:I}", "type", "kill", "trial", (json_int_t)99));
    fc_send(&x.fc,
            json_pack("{s:s, s:I, s:I, s:s}", "type", "kill", "trial", (json_int_t)4,
                      "attempt", (json_int_t)1, "reason", "user asked"));
    json_t *ex = fc_wait(&x.fc, "exited", 4, 10);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "killed");
    CHECK(s_int(ex, "signal") == SIGTERM && s_int(ex, "attempt") == 1);
    CHECK(strstr(s_str(ex, "message"), "user asked") != NULL);
    CHECK(s_wait_dead(pid, 5));
    CHECK(gc > 0 && s_wait_dead(gc, 5)); /* the whole process group */
    json_decref(ex);
    fx_close(&x, NULL);
}

/* A trial's reports carry its attempt's tag (from JIZHI_TOKEN); a disown
   names the attempt by it: another tag changes nothing, and a process this
   dispatcher started is ended, not left unwatched. */
TEST(disown_by_tag)
{
    disp_fix x;
    REQUIRE(fx_open(&x) == 0);

    json_t *m = s_start_msg(5, 0, json_pack("[s,s]", "sleep", "30"));
    json_object_set_new(m, "env", json_pack("{s:s}", "JIZHI_TOKEN", "abc"));
    fc_send(&x.fc, m);
    json_t *st = fc_wait(&x.fc, "started", 5, 10);
    REQUIRE(st);
    pid_t pid = (pid_t)s_int(st, "pid");
    CHECK_STR(s_str(st, "tag"), "ba7816bf8f01cfea"); /* SHA-256("abc"), its start */
    json_decref(st);
    json_t *hb = fc_wait(&x.fc, "disp_heartbeat", -1, 10);
    REQUIRE(hb);
    json_t *e = json_array_get(json_object_get(hb, "running"), 0);
    CHECK(json_integer_value(json_object_get(e, "trial")) == 5);
    CHECK_STR(json_string_value(json_object_get(e, "tag")), "ba7816bf8f01cfea");
    json_decref(hb);

    fc_send(&x.fc,
            json_pack("{s:s, s:I, s:I, s:s}", "type", "disown", "trial", (json_int_t)5,
                      "attempt", (json_int_t)0, "tag", "0000000000000000"));
    fc_send(&x.fc, json_pack("{s:s, s:I, s:I}", "type", "disown", "trial", (json_int_t)5,
                             "attempt", (json_int_t)0)); /* no tag: malformed */
    usleep(300 * 1000);
    CHECK(!s_proc_dead(pid));
    fc_send(&x.fc, json_pack("{s:s, s:I, s:I, s:s, s:s}", "type", "disown", "trial",
                             (json_int_t)5, "attempt", (json_int_t)0, "tag",
                             "ba7816bf8f01cfea", "reason", "not this store's"));
    json_t *ex = fc_wait(&x.fc, "exited", 5, 10);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "killed");
    CHECK_STR(s_str(ex, "tag"), "ba7816bf8f01cfea");
    CHECK(strstr(s_str(ex, "message"), "not this store's") != NULL);
    CHECK(s_wait_dead(pid, 5));
    json_decref(ex);
    fx_close(&x, NULL);
}

TEST(resend_until_acked)
{
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    x.cfg.resend_s = 0.5;
    REQUIRE(fx_start(&x, 1) == 0);

    x.fc.drop_exited = 1;
    fc_send(&x.fc, s_start_msg(1, 0, json_pack("[s]", "true")));
    json_t *a = fc_wait(&x.fc, "exited", 1, 10); /* not acked */
    json_t *b = fc_wait(&x.fc, "exited", 1, 10); /* resent, acked */
    REQUIRE(a && b);
    CHECK(s_int(a, "req") == s_int(b, "req"));
    CHECK(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    /* a report refused with a permanent error is dropped */
    x.fc.exited_error = "unknown_trial";
    fc_send(&x.fc, s_start_msg(2, 0, json_pack("[s]", "true")));
    a = fc_wait(&x.fc, "exited", 2, 10);
    CHECK(a != NULL);
    json_decref(a);
    /* neither is sent again: after copies that were already on their way
       when the reply came (a loaded machine can delay a reply past one
       resend period), several resend periods pass in silence. A dispatcher
       that kept resending would send ~3 per window and never fall quiet. */
    json_t *c = NULL;
    for (int late = 0; late <= 3; late++) {
        c = fc_wait(&x.fc, "exited", -1, 1.6);
        if (!c)
            break;
        long tr = (long)json_integer_value(json_object_get(c, "trial"));
        CHECK(tr == 1 || tr == 2);
        json_decref(c);
        c = NULL;
        if (late == 3)
            c = fc_wait(&x.fc, "exited", -1, 1.6);
    }
    CHECK(c == NULL);
    json_decref(c);
    fx_close(&x, NULL);
}

/* A controller that hears and does not answer: the dispatcher resends
   an `exited` report after resend_s to 1.5 resend_s, then doubles the
   wait (up to 8 resend_s), not every resend_s. With resend_s 0.2 s, in
   the 3 s after the first copy: at most 4 more (at about 0.25, 0.75,
   1.75 s ...), where a fixed period sent about 15. Then an answer ends
   it. */
TEST(report_resends_back_off)
{
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    x.cfg.resend_s = 0.2;
    REQUIRE(fx_start(&x, 1) == 0);

    x.fc.drop_exited = 1000000;
    fc_send(&x.fc, s_start_msg(1, 0, json_pack("[s]", "true")));
    json_t *a = fc_wait(&x.fc, "exited", 1, 10);
    REQUIRE(a);
    json_decref(a);
    double t0 = util_now();
    int copies = 0;
    json_t *c;
    while ((c = fc_wait(&x.fc, "exited", 1, t0 + 3.0 - util_now())) != NULL) {
        copies++;
        json_decref(c);
    }
    printf("  %d copies of the report in 3 s after the first\n", copies);
    CHECK(copies >= 2 && copies <= 4);
    x.fc.drop_exited = 0; /* answered from now: the next copy is acked ... */
    c = fc_wait(&x.fc, "exited", 1, 10);
    CHECK(c != NULL);
    json_decref(c);
    c = fc_wait(&x.fc, "exited", 1, 3.0); /* ... and none follows it */
    CHECK(c == NULL);
    json_decref(c);
    fx_close(&x, NULL);
}

TEST(malformed_messages)
{
    disp_fix x;
    REQUIRE(fx_open(&x) == 0);

    /* starts with valid ids but a bad field: refused with start_failed */
    const char *bad[] = {
        "{}",
        "{\"argv\": []}",
        "{\"argv\": \"/bin/true\"}",
        "{\"argv\": [1]}",
        "{\"argv\": [\"true\", 2]}",
        "{\"argv\": [\"\"]}",
        "{\"argv\": [\"true\"], \"env\": \"x\"}",
        "{\"argv\": [\"true\"], \"env\": {\"A\": 1}}",
        "{\"argv\": [\"true\"], \"env\": {\"A=B\": \"x\"}}",
        "{\"argv\": [\"true\"], \"env\": {\"\": \"x\"}}",
        "{\"argv\": [\"true\"], \"timeout_s\": \"abc\"}",
        "{\"argv\": [\"true\"], \"timeout_s\": -1}",
        "{\"argv\": [\"true\"], \"timeout_s\": \"nan\"}",
        "{\"argv\": [\"true\"], \"gpus\": -1}",
        "{\"argv\": [\"true\"], \"gpus\": 1.5}",
        "{\"argv\": [\"true\"], \"gpus\": \"2\"}",
        "{\"argv\": [\"true\"], \"study\": 5}",
        "{\"argv\": [\"true\"], \"study\": \"\"}",
        "{\"argv\": [\"true\"], \"log_dir\": 3}",
        "{\"argv\": [\"true\"], \"req\": \"x\"}",
    };
    int n = (int)(sizeof bad / sizeof *bad);
    for (int i = 0; i < n; i++) {
        json_error_t je;
        json_t *m = json_loads(bad[i], 0, &je);
        REQUIRE(m);
        json_object_set_new(m, "type", json_string("start"));
        json_object_set_new(m, "trial", json_integer(100 + i));
        json_object_set_new(m, "attempt", json_integer(0));
        if (!json_object_get(m, "study"))
            json_object_set_new(m, "study", json_string("s1"));
        fc_send(&x.fc, m);
    }
    /* bad ids: only a log line */
    fc_send(&x.fc, json_pack("{s:s}", "type", "start"));
    fc_send(&x.fc, json_pack("{s:s, s:s, s:i, s:s, s:[s]}", "type", "start", "trial", "7",
                             "attempt", 0, "study", "s", "argv", "true"));
    fc_send(&x.fc, json_pack("{s:s, s:i, s:i, s:s, s:[s]}", "type", "start", "trial", 7,
                             "attempt", -1, "study", "s", "argv", "true"));
    fc_send(&x.fc, json_pack("{s:s}", "type", "kill"));
    fc_send(&x.fc, json_pack("{s:s, s:s}", "type", "kill", "trial", "x"));
    fc_send(&x.fc, json_pack("{s:s, s:i, s:i}", "type", "kill", "trial", 1, "reason", 3));
    fc_send(&x.fc, json_pack("{s:s}", "type", "bogus"));
    fc_send(&x.fc, json_pack("{s:s}", "type", "ok"));
    fc_send(&x.fc, json_pack("{s:s, s:i}", "type", "ok", "req", 12345));
    fc_send(&x.fc, json_pack("{s:s, s:i, s:i}", "type", "error", "req", 1, "code", 2));
    /* frames that are not a message at all */
    const char *raw[] = {"not json", "[1,2]", "{\"no\":\"type\"}", "{\"type\":3}", ""};
    for (size_t i = 0; i < sizeof raw / sizeof *raw; i++) {
        zmq_send(x.fc.router, x.fc.peer.id, x.fc.peer.len, ZMQ_SNDMORE);
        zmq_send(x.fc.router, "", 0, ZMQ_SNDMORE);
        zmq_send(x.fc.router, raw[i], strlen(raw[i]), 0);
    }
    zmq_send(x.fc.router, x.fc.peer.id, x.fc.peer.len, ZMQ_SNDMORE); /* no delimiter */
    zmq_send(x.fc.router, "{\"type\":\"kill\"}", 15, 0);
    zmq_send(x.fc.router, x.fc.peer.id, x.fc.peer.len, ZMQ_SNDMORE); /* too many frames */
    for (int i = 0; i < 4; i++)
        zmq_send(x.fc.router, "", 0, i < 3 ? ZMQ_SNDMORE : 0);

    int got = 0;
    for (int i = 0; i < n; i++) {
        json_t *ex = fc_wait(&x.fc, "exited", 100 + i, 10);
        CHECK(ex != NULL);
        if (!ex)
            continue;
        got++;
        CHECK_STR(s_str(ex, "how"), "start_failed");
        if (strncmp(s_str(ex, "message"), "malformed start: field '", 24) != 0)
            printf("FAIL: case %d: message \"%s\"\n", i, s_str(ex, "message"));
        CHECK(!strncmp(s_str(ex, "message"), "malformed start: field '", 24));
        json_decref(ex);
    }
    CHECK(got == n);
    /* still alive and working */
    fc_send(&x.fc, s_start_msg(1, 0, json_pack("[s,s,s]", "/bin/sh", "-c", "exit 0")));
    json_t *ex = fc_wait(&x.fc, "exited", 1, 10);
    CHECK(ex && s_int(ex, "code") == 0);
    json_decref(ex);
    json_t *h = fc_wait(&x.fc, "disp_heartbeat", -1, 5);
    CHECK(h != NULL);
    json_decref(h);
    fx_close(&x, NULL);
}

/* A well-typed value for field f of a message to the dispatcher: names of
   nothing there (a message that got through would change nothing), the
   `trial` of a start its own so its start_failed can be told. */
static json_t *s_good_field(const msg_field *f, void *arg)
{
    long trial = *(const long *)arg;
    if (!strcmp(f->name, "trial"))
        return json_integer(trial);
    if (!strcmp(f->name, "req"))
        return json_integer(987654);
    if (!strcmp(f->name, "argv"))
        return json_pack("[s]", "true");
    if (!strcmp(f->name, "code"))
        return json_string("internal");
    if (!strcmp(f->name, "path"))
        return json_string("/nonexistent/trial-1.0.out");
    return mtl_value_of(f->type, 0, "s1");
}

/* Every type a dispatcher takes (common/msg.h), each required field
   missing and then of the wrong JSON type: refused before its handler,
   with a log line naming type and field; a start that still names its
   trial and attempt is answered start_failed naming the field. */
TEST(every_type_refuses_a_missing_or_mistyped_field)
{
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    char logpath[300];
    int saved_err = s_log_to_file(&x.fc, logpath, sizeof logpath);
    REQUIRE(saved_err >= 0);
    REQUIRE(fx_start(&x, 1) == 0);

    char want[64][96];
    long failed_trial[64];
    int nwant = 0, nfailed = 0;
    long trial = 700;
    for (int ty = 0; ty < MSG_COUNT; ty++) {
        const msg_def *d = msg_def_of((msg_type)ty);
        if (d->to != MSG_DISP && d->to != MSG_ANY)
            continue;
        const char *cur = d->fields;
        msg_field f;
        while (msg_field_next(&cur, &f)) {
            if (f.optional)
                continue;
            for (int retype = 0; retype < 2; retype++, trial++) {
                json_t *m = mtl_broken(d, &f, retype, 0, s_good_field, &trial);
                fc_send(&x.fc, m);
                REQUIRE(nwant < 64);
                snprintf(want[nwant++], sizeof want[0],
                         "refusing malformed %s: field '%s': %s", d->name, f.name,
                         retype ? "expected" : "missing");
                if (d->type == MSG_START && strcmp(f.name, "trial") &&
                    strcmp(f.name, "attempt"))
                    failed_trial[nfailed++] = trial;
            }
        }
    }
    CHECK(nwant >= 20);
    CHECK(nfailed >= 4);
    /* the starts that named their trial: start_failed naming the field */
    for (int i = 0; i < nfailed; i++) {
        json_t *ex = fc_wait(&x.fc, "exited", failed_trial[i], 10);
        CHECK(ex != NULL);
        if (ex) {
            CHECK_STR(s_str(ex, "how"), "start_failed");
            CHECK(!strncmp(s_str(ex, "message"), "malformed start: field '", 24));
        }
        json_decref(ex);
    }
    /* every refusal logged, naming type and field (the log is written by the
       dispatcher's thread: wait for the lines, answering it meanwhile) */
    int found = 0;
    double until = util_now() + 10;
    while (found < nwant && util_now() < until) {
        json_decref(fc_recv(&x.fc, 0.05));
        char *text = s_read(logpath);
        found = 0;
        for (int i = 0; text && i < nwant; i++)
            found += strstr(text, want[i]) != NULL;
        if (found == nwant || util_now() >= until)
            for (int i = 0; text && i < nwant; i++)
                if (!strstr(text, want[i]))
                    JZT_FAIL("not in the log: \"%s\"", want[i]);
        free(text);
    }
    CHECK(found == nwant);
    /* nothing ran and nothing was read: no started, no log_data */
    json_t *seen = json_array();
    dt_stop(&x.t, &x.fc, seen);
    size_t i;
    json_t *m;
    json_array_foreach(seen, i, m)
    {
        CHECK(strcmp(wire_type(m), "started") != 0);
        CHECK(strcmp(wire_type(m), "log_data") != 0);
    }
    json_decref(seen);
    s_log_back(saved_err);
    fc_close(&x.fc);
}

TEST(slots_and_gpus)
{
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    x.cfg.slots = 2;
    x.cfg.gpus = "0,1";
    REQUIRE(fx_start(&x, 1) == 0);

    const char *show = "echo \"$CUDA_VISIBLE_DEVICES\"; exec sleep 30";
    for (long id = 1; id <= 2; id++) {
        json_t *m = s_start_msg(id, 0, json_pack("[s,s,s]", "/bin/sh", "-c", show));
        json_object_set_new(m, "gpus", json_integer(1));
        fc_send(&x.fc, m);
        json_t *st = fc_wait(&x.fc, "started", id, 10);
        REQUIRE(st);
        char *o = s_read_wait(s_str(st, "stdout"), 5);
        CHECK_STR(o, id == 1 ? "0\n" : "1\n");
        json_t *g = json_object_get(st, "gpus");
        CHECK(json_array_size(g) == 1 &&
              json_integer_value(json_array_get(g, 0)) == id - 1);
        free(o);
        json_decref(st);
    }
    /* both slots taken */
    fc_send(&x.fc, s_start_msg(3, 0, json_pack("[s]", "true")));
    json_t *ex = fc_wait(&x.fc, "exited", 3, 10);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "start_failed");
    CHECK(strstr(s_str(ex, "message"), "no free slot") != NULL);
    json_decref(ex);
    /* a start repeated while it runs is ignored (no start_failed) */
    json_t *m = s_start_msg(2, 0, json_pack("[s]", "true"));
    json_object_set_new(m, "gpus", json_integer(1));
    fc_send(&x.fc, m);

    /* free one: its slot and GPU come back */
    fc_send(&x.fc, json_pack("{s:s, s:I, s:I}", "type", "kill", "trial", (json_int_t)1,
                             "attempt", (json_int_t)0));
    ex = fc_wait(&x.fc, "exited", 1, 10);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "killed");
    json_decref(ex);
    m = s_start_msg(4, 0, json_pack("[s,s,s]", "/bin/sh", "-c", show));
    json_object_set_new(m, "gpus", json_integer(2));
    fc_send(&x.fc, m);
    ex = fc_wait(&x.fc, "exited", 4, 10);
    REQUIRE(ex);
    CHECK(strstr(s_str(ex, "message"), "no free GPU (needs 2, 1 free)") != NULL);
    json_decref(ex);
    m = s_start_msg(5, 0, json_pack("[s,s,s]", "/bin/sh", "-c", show));
    json_object_set_new(m, "gpus", json_integer(3));
    fc_send(&x.fc, m);
    ex = fc_wait(&x.fc, "exited", 5, 10);
    REQUIRE(ex);
    CHECK(strstr(s_str(ex, "message"), "needs 3 GPUs, this dispatcher has 2") != NULL);
    json_decref(ex);
    m = s_start_msg(6, 0, json_pack("[s,s,s]", "/bin/sh", "-c", show));
    json_object_set_new(m, "gpus", json_integer(1));
    fc_send(&x.fc, m);
    json_t *st = fc_wait(&x.fc, "started", 6, 10);
    REQUIRE(st);
    char *o = s_read_wait(s_str(st, "stdout"), 5);
    CHECK_STR(o, "0\n");
    free(o);
    json_decref(st);

    json_t *seen = json_array();
    dt_stop(&x.t, &x.fc, seen);
    /* the repeated start of trial 2 never produced a report of its own */
    size_t i;
    json_array_foreach(seen, i, m)
    {
        if (!strcmp(wire_type(m), "exited") && s_int(m, "trial") == 2)
            CHECK_STR(s_str(m, "how"), "killed");
        CHECK(strcmp(wire_type(m), "started") != 0);
    }
    json_decref(seen);
    fc_close(&x.fc);
}

TEST(stop_without_kill)
{
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    REQUIRE(fx_start(&x, 0) == 0);
    fc_send(&x.fc, s_start_msg(1, 0, json_pack("[s,s]", "sleep", "30")));
    json_t *st = fc_wait(&x.fc, "started", 1, 10);
    REQUIRE(st);
    pid_t pid = (pid_t)s_int(st, "pid");
    json_decref(st);
    dt_stop(&x.t, &x.fc, NULL);
    /* the trial outlives the dispatcher (and its thread) */
    usleep(100000);
    CHECK(!s_proc_dead(pid));
    kill(pid, SIGKILL);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    fc_close(&x.fc);
}

/* Trial logs 0600; the log and checkpoint directories it creates 0700,
   whatever the umask lets through (issue 36). */
TEST(files_private)
{
    mode_t old = umask(022);
    disp_fix x;
    REQUIRE(fx_open(&x) == 0);
    char ck2[300];
    snprintf(ck2, sizeof ck2, "%s/given/ck", x.fc.dir);
    fc_send(&x.fc, s_start_msg(1, 0, json_pack("[s,s,s]", "/bin/sh", "-c", "echo out")));
    json_t *e1 = fc_wait(&x.fc, "exited", 1, 10);
    json_t *m = s_start_msg(2, 0, json_pack("[s]", "true"));
    json_object_set_new(json_object_get(m, "env"), "JIZHI_CHECKPOINT_DIR",
                        json_string(ck2));
    fc_send(&x.fc, m);
    json_t *e2 = fc_wait(&x.fc, "exited", 2, 10);
    REQUIRE(e1 && e2);
    char path[600];
    struct {
        const char *rel;
        mode_t mode;
    } want[] = {{"logs", 0700},
                {"logs/s1", 0700},
                {"logs/s1/trial-1.0.out", 0600},
                {"logs/s1/trial-1.0.err", 0600},
                {"logs/s1/checkpoints", 0700},
                {"logs/s1/checkpoints/trial-1", 0700},
                {"given", 0700},
                {"given/ck", 0700}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", x.fc.dir, want[i].rel);
        CHECK(stat(path, &sb) == 0);
        if ((sb.st_mode & 07777) != want[i].mode)
            fprintf(stderr, "  %s: mode %03o, want %03o\n", path,
                    (unsigned)(sb.st_mode & 07777), (unsigned)want[i].mode);
        CHECK((sb.st_mode & 07777) == want[i].mode);
    }
    json_decref(e1);
    json_decref(e2);
    fx_close(&x, NULL);
    umask(old);
}

/* Over tcp:// a dispatcher needs the controller's public key, or plain TCP
   chosen with JIZHI_SERVER_KEY=none (--insecure), which its trials then
   get too (issue 36: no silent fallback to plain TCP). */
TEST(tcp_needs_server_key)
{
    fake_ctl fc;
    REQUIRE(fc_open(&fc) == 0);
    char home[300], logs[256], ep[256];
    snprintf(home, sizeof home, "%s/home", fc.dir); /* no controller.pub there */
    setenv("JIZHI_HOME", home, 1);
    unsetenv("JIZHI_SERVER_KEY");
    disp_config cfg = s_cfg(&fc, logs, sizeof logs);
    cfg.controller = "tcp://127.0.0.1:9";
    disp_t *d = disp_new(&cfg);
    CHECK(d == NULL);
    disp_destroy(&d);
    struct stat sb;
    CHECK(stat(logs, &sb) != 0); /* nothing made */

    /* a key that is no key: refused too */
    setenv("JIZHI_SERVER_KEY", "not-a-key", 1);
    d = disp_new(&cfg);
    CHECK(d == NULL);
    disp_destroy(&d);

    /* --insecure: plain TCP, and trials are told so */
    setenv("JIZHI_SERVER_KEY", "none", 1);
    void *tcp = zmq_socket(fc.ctx, ZMQ_ROUTER);
    wire_socket_setup(tcp);
    REQUIRE(zmq_bind(tcp, "tcp://127.0.0.1:*") == 0);
    size_t n = sizeof ep;
    REQUIRE(zmq_getsockopt(tcp, ZMQ_LAST_ENDPOINT, ep, &n) == 0);
    void *ipc = fc.router;
    fc.router = tcp;
    cfg.controller = ep;
    disp_thread t;
    REQUIRE(dt_start(&t, &fc, &cfg, 1) == 0);
    fc_send(&fc, s_start_msg(1, 0, json_pack("[s]", "env")));
    json_t *ex = fc_wait(&fc, "exited", 1, 10);
    REQUIRE(ex);
    char *o = s_read(s_str(ex, "stdout")), v[256];
    CHECK(o && s_env_line(o, "JIZHI_SERVER_KEY", v, sizeof v) && !strcmp(v, "none"));
    CHECK(o && s_env_line(o, "JIZHI_ENDPOINT", v, sizeof v) && !strcmp(v, ep));
    free(o);
    json_decref(ex);
    dt_stop(&t, &fc, NULL);
    zmq_close(ipc);
    unsetenv("JIZHI_SERVER_KEY");
    unsetenv("JIZHI_HOME");
    fc_close(&fc);
}

/* ---- trial.launcher "torch" (disp_torch.c) ------------------------------- */

static json_t *s_torch_msg(long trial, int ranks, int gpus, const char *script)
{
    json_t *m = s_start_msg(trial, 0, json_pack("[s,s,s]", "/bin/sh", "-c", script));
    json_object_set_new(m, "ranks", json_integer(ranks));
    json_object_set_new(m, "gpus", json_integer(gpus));
    json_object_set_new(m, "launcher", json_string("torch"));
    json_object_set_new(json_object_get(m, "env"), "JIZHI_TOKEN", json_string("tok"));
    return m;
}

/* The line of `out` that starts with `prefix`, copied into buf; NULL. */
static const char *s_line(const char *out, const char *prefix, char *buf, size_t n)
{
    const char *p = out;
    while (p && *p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (!strncmp(p, prefix, strlen(prefix))) {
            snprintf(buf, n, "%.*s", (int)len, p);
            return buf;
        }
        p = e ? e + 1 : NULL;
    }
    return NULL;
}

/* Each rank gets torchrun's environment, its own share of the trial's GPUs
   and the trial's JIZHI_* variables. */
TEST(torch_launcher_environment)
{
    unsetenv("OMP_NUM_THREADS");
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    x.cfg.gpus = "0,1,2,3";
    REQUIRE(fx_start(&x, 1) == 0);

    const char *show = "echo \"rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE "
                       "lworld=$LOCAL_WORLD_SIZE addr=$MASTER_ADDR port=$MASTER_PORT "
                       "jrank=$JIZHI_RANK jranks=$JIZHI_RANKS gpr=$JIZHI_GPUS_PER_RANK "
                       "cuda=$CUDA_VISIBLE_DEVICES trial=$JIZHI_TRIAL tok=$JIZHI_TOKEN "
                       "omp=$OMP_NUM_THREADS\"";
    fc_send(&x.fc, s_torch_msg(1, 2, 2, show));
    json_t *st = fc_wait(&x.fc, "started", 1, 10);
    REQUIRE(st);
    CHECK(json_array_size(json_object_get(st, "gpus")) == 4);
    json_decref(st);
    json_t *ex = fc_wait(&x.fc, "exited", 1, 20);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "exited");
    CHECK(s_int(ex, "code") == 0);
    char *o = s_read(s_str(ex, "stdout"));
    REQUIRE(o);
    char l0[512], l1[512], want[512];
    /* each line prefixed with its rank, as torchrun --tee */
    REQUIRE(s_line(o, "[rank0]: rank=0 ", l0, sizeof l0));
    REQUIRE(s_line(o, "[rank1]: rank=1 ", l1, sizeof l1));
    const char *pp = strstr(l0, "port=");
    REQUIRE(pp);
    int port = atoi(pp + 5);
    CHECK(port > 0 && port < 65536);
    snprintf(want, sizeof want,
             "[rank0]: rank=0 local=0 world=2 lworld=2 addr=127.0.0.1 port=%d jrank=0 "
             "jranks=2 "
             "gpr=2 cuda=0,1 trial=1 tok=tok omp=1",
             port);
    CHECK_STR(l0, want);
    snprintf(want, sizeof want,
             "[rank1]: rank=1 local=1 world=2 lworld=2 addr=127.0.0.1 port=%d jrank=1 "
             "jranks=2 "
             "gpr=2 cuda=2,3 trial=1 tok=tok omp=1",
             port);
    CHECK_STR(l1, want);
    free(o);
    json_decref(ex);

    /* no GPUs: none visible; one rank still gets the variables; the study's
       OMP_NUM_THREADS wins */
    json_t *m = s_torch_msg(2, 1, 0, show);
    json_object_set_new(json_object_get(m, "env"), "OMP_NUM_THREADS", json_string("2"));
    fc_send(&x.fc, m);
    ex = fc_wait(&x.fc, "exited", 2, 20);
    REQUIRE(ex);
    CHECK(s_int(ex, "code") == 0);
    o = s_read(s_str(ex, "stdout"));
    REQUIRE(o);
    CHECK(s_line(o, "[rank0]: rank=0 local=0 world=1 lworld=1 addr=127.0.0.1 port=", l0,
                 sizeof l0) != NULL);
    CHECK(strstr(l0, " jrank=0 jranks=1 gpr=0 cuda= trial=2 tok=tok omp=2") != NULL);
    free(o);
    json_decref(ex);
    fx_close(&x, NULL);
}

/* Reads the pid a rank wrote into DIR/rankR.pid (waits for it). */
static pid_t s_rank_pid(const fake_ctl *fc, int r)
{
    char path[256];
    snprintf(path, sizeof path, "%s/rank%d.pid", fc->dir, r);
    char *s = s_read_wait(path, 10);
    pid_t pid = s ? (pid_t)atoi(s) : 0;
    free(s);
    return pid;
}

/* A rank that dies ends the trial: the others are ended, and its exit
   status and its last stderr line are the attempt's end and stderr tail. */
TEST(torch_launcher_rank_death)
{
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    char script[1024];
    REQUIRE(fx_start(&x, 1) == 0);

    /* rank 1 is killed by SIGKILL; rank 0 would sleep on */
    snprintf(script, sizeof script,
             "echo $$ > %s/rank$RANK.pid; echo \"rank $RANK up\" >&2; "
             "if [ \"$RANK\" = 1 ]; then while [ ! -s %s/rank0.pid ]; do sleep 0.05; "
             "done; echo 'rank one: about to die' >&2; kill -9 $$; fi; exec sleep 60",
             x.fc.dir, x.fc.dir);
    fc_send(&x.fc, s_torch_msg(1, 2, 0, script));
    json_t *ex = fc_wait(&x.fc, "exited", 1, 30);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "signaled");
    CHECK(s_int(ex, "signal") == 9);
    pid_t r0 = s_rank_pid(&x.fc, 0), r1 = s_rank_pid(&x.fc, 1);
    REQUIRE(r0 > 0 && r1 > 0);
    char want[256];
    snprintf(want, sizeof want,
             "jizhi: rank 1 of 2 (pid %d) was killed by signal 9 (SIGKILL); its last "
             "stderr line: rank one: about to die",
             (int)r1);
    CHECK_STR(s_str(ex, "stderr_tail"), want);
    CHECK(s_wait_dead(r0, 10)); /* the other rank is gone too */
    char *e = s_read(s_str(ex, "stderr"));
    CHECK(e && strstr(e, "rank 0 up") && strstr(e, "rank 1 up"));
    free(e);
    json_decref(ex);

    /* rank 0 exits 3 while rank 1 sleeps: its code is the attempt's */
    char p0[256];
    snprintf(p0, sizeof p0, "%s/rank0.pid", x.fc.dir);
    unlink(p0);
    snprintf(script, sizeof script,
             "echo $$ > %s/rank$RANK.pid; if [ \"$RANK\" = 0 ]; then "
             "echo 'RuntimeError: boom' >&2; exit 3; fi; exec sleep 60",
             x.fc.dir);
    fc_send(&x.fc, s_torch_msg(2, 2, 0, script));
    ex = fc_wait(&x.fc, "exited", 2, 30);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "exited");
    CHECK(s_int(ex, "code") == 3);
    CHECK(strstr(s_str(ex, "stderr_tail"), "rank 0 of 2 (pid ") != NULL);
    CHECK(strstr(s_str(ex, "stderr_tail"),
                 ") exited with code 3; its last stderr line: RuntimeError: boom") !=
          NULL);
    json_decref(ex);

    /* ranks that all exit 0 end the attempt cleanly, however far apart */
    fc_send(&x.fc, s_torch_msg(3, 2, 0, "[ \"$RANK\" = 1 ] && sleep 0.5; exit 0"));
    ex = fc_wait(&x.fc, "exited", 3, 30);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "exited");
    CHECK(s_int(ex, "code") == 0);
    CHECK_STR(s_str(ex, "stderr_tail"), "");
    json_decref(ex);
    fx_close(&x, NULL);
}

/* A kill ends every rank; a command that cannot be exec'd fails the start
   as a plain trial's does. */
TEST(torch_launcher_kill_and_exec_failure)
{
    disp_fix x;
    REQUIRE(fx_init(&x) == 0);
    char script[512];
    REQUIRE(fx_start(&x, 1) == 0);

    /* ranks that ignore SIGTERM: SIGKILL after the grace */
    snprintf(script, sizeof script,
             "trap '' TERM; echo $$ > %s/rank$RANK.pid; while :; do sleep 0.1; done",
             x.fc.dir);
    fc_send(&x.fc, s_torch_msg(1, 2, 0, script));
    json_t *st = fc_wait(&x.fc, "started", 1, 10);
    REQUIRE(st);
    json_decref(st);
    pid_t r0 = s_rank_pid(&x.fc, 0), r1 = s_rank_pid(&x.fc, 1);
    REQUIRE(r0 > 0 && r1 > 0);
    fc_send(&x.fc, json_pack("{s:s, s:I, s:I, s:s}", "type", "kill", "trial",
                             (json_int_t)1, "attempt", (json_int_t)0, "reason", "test"));
    json_t *ex = fc_wait(&x.fc, "exited", 1, 30);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "killed");
    CHECK(s_wait_dead(r0, 10) && s_wait_dead(r1, 10));
    json_decref(ex);

    json_t *m = s_torch_msg(2, 2, 0, "x");
    json_object_set_new(m, "argv", json_pack("[s]", "jizhi-no-such-program"));
    fc_send(&x.fc, m);
    ex = fc_wait(&x.fc, "exited", 2, 20);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "start_failed");
    CHECK(strstr(s_str(ex, "message"), "jizhi-no-such-program") != NULL);
    json_decref(ex);

    /* a launcher the controller does not know is refused, naming the field */
    m = s_torch_msg(3, 2, 0, "true");
    json_object_set_new(m, "launcher", json_string("horovod"));
    fc_send(&x.fc, m);
    ex = fc_wait(&x.fc, "exited", 3, 10);
    REQUIRE(ex);
    CHECK_STR(s_str(ex, "how"), "start_failed");
    CHECK(strstr(s_str(ex, "message"), "field 'launcher'") != NULL);
    json_decref(ex);
    json_t *seen = json_array();
    dt_stop(&x.t, &x.fc, seen);
    size_t i;
    json_array_foreach(seen, i, m) if (!strcmp(wire_type(m), "started"))
        CHECK(s_int(m, "trial") != 2 && s_int(m, "trial") != 3);
    json_decref(seen);
    fc_close(&x.fc);
}

int main(void)
{
    if (!getenv("JIZHI_LOG"))
        log_set_level(LOGL_ERROR);
    signal(SIGPIPE, SIG_IGN);
    RUN(unit_parsers);
    RUN(chaos_start_and_kill);
    RUN(register_and_heartbeat);
    RUN(reregister_after_silence);
    RUN(gpu_detection);
    RUN(run_and_logs);
    RUN(environment);
    RUN(start_failed);
    RUN(cwd_and_venv);
    RUN(timeouts);
    RUN(kill_request);
    RUN(disown_by_tag);
    RUN(resend_until_acked);
    RUN(report_resends_back_off);
    RUN(refused_register_backs_off);
    RUN(unanswered_controller_is_warned_of);
    RUN(malformed_messages);
    RUN(every_type_refuses_a_missing_or_mistyped_field);
    RUN(slots_and_gpus);
    RUN(stop_without_kill);
    RUN(files_private);
    RUN(tcp_needs_server_key);
    RUN(torch_launcher_environment);
    RUN(torch_launcher_rank_death);
    RUN(torch_launcher_kill_and_exec_failure);
    TEST_DONE();
}
