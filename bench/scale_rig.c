/*  scale_rig.c - the load side of `make bench-scale` (bench/scale.sh): a
    cluster simulated in a few processes against one real `jizhi
    controller`, over real ZeroMQ with CURVE (tcp://) and the real store.
      - N fake dispatchers, each its own DEALER socket, CURVE key pair and
        name (scale-dI), S slots; a `start` is answered `started` and
        becomes a fake trial: its own DEALER socket (an anonymous CURVE
        pair, as a real trial's), `hello`, then every P ms a `metrics`
        batch of M points [step, "mK", value] with a session and
        increasing req (one batch outstanding, as libjizhi; a hello or
        batch not answered is resent with libjizhi's backoff, 2-3 s, then
        4-6, 8-12, 16-24 s: util_backoff); instructions
        are acknowledged at once (`ins_ack` applied); a `kill` is answered
        `exited`;
      - U users (their own keys, role user) submit one study each (budget
        and parallel: the slots / U), then steer their running trials
        with `trial_set` ... `wait` (one request outstanding per user) and
        time each answer.
    The work is split over --procs processes (file descriptors: two per
    ZeroMQ socket). The parent lines them up, reads the controller's CPU
    and RSS from /proc and prints one JSON object (the measurements) on
    stdout. `--keys` prints the authorized_keys lines instead.

    usage: scale_rig --controller EP --server-key Z85 [--disps N] [--slots S]
                     [--metrics M] [--period-ms P] [--users U] [--steady-s D]
                     [--procs K] [--ctl-pid PID] [--ramp-s T] [--fixed-resend]
           scale_rig --keys --disps N --users U
    The JSON: dispatch_per_s (starts answered per second, from the first
    submit to the last start), running (trials that said hello),
    points_acked, points_per_s (acknowledged during the steady phase),
    set_n / set_p50_ms / set_p99_ms / set_failed, behind (batches due
    while the previous one was still unanswered), errors (error replies
    by code), ctl_cpu_s / ctl_rss_mb.
*/
#include "common/util.h"
#include "common/wire.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

typedef enum { RT_FREE = 0, RT_HELLO, RT_RUNNING } rt_state;

typedef struct {
    rt_state st;
    long id, attempt;
    char token[96];
    int user; /* owner's index, -1 when not one of this process's users */
    void *sock;
    long req, out_req, out_points;
    double next_due, resend_at; /* resend_at: of the hello or batch not answered */
    int sends;                  /* times that one went out (the backoff's) */
    json_t *out_msg; /* that batch, resent as is after 2-3, 4-6, 8-12, 16-24 s ...
                        (util_backoff, as libjizhi) */
    long step;
} rig_trial;

typedef struct {
    void *sock;
    char name[32];
    long req, reg_req;
    int registered;
    double hb_next;
} rig_disp;

typedef struct {
    void *sock;
    char name[32];
    long req, out_req;
    double t_sent;
    int submitted;
} rig_user;

typedef struct {
    const char *ep;
    char server_pub[41];
    long ndisps, slots, metrics, period_ms, nusers, procs, ctl_pid;
    double steady_s, ramp_s;
    int fixed_resend; /* --fixed-resend: every 3 s, no backoff */
} rig_opts;

typedef struct {
    rig_opts *o;
    int part;
    void *ctx;
    int ep;
    rig_disp *disps; /* this part's */
    long nd, d0;
    rig_trial *trials; /* nd * slots */
    rig_user *users;
    long nu, u0;
    long starts, running, errors, behind, set_failed, resent;
    double t_last_start;
    long acked_steady, acked_total;
    int steady;
    double *lat;
    long nlat, caplat;
    char err_codes[512];
    uint64_t rng;
} rig_t;

enum { K_DISP = 1, K_TRIAL = 2, K_USER = 3 };

/* The deterministic key pair of dispatcher / user `who` (secret from a seed). */
static void s_pair(const char *who, char pub[41], char sec[41])
{
    uint64_t st = 1469598103934665603ULL;
    for (const char *p = who; *p; p++)
        st = (st ^ (unsigned char)*p) * 1099511628211ULL;
    uint8_t raw[32];
    for (int i = 0; i < 32; i += 8) {
        uint64_t v = util_splitmix64(&st);
        memcpy(raw + i, &v, 8);
    }
    zmq_z85_encode(sec, raw, 32);
    zmq_curve_public(pub, sec);
}

static void *s_socket(rig_t *r, const char *pub, const char *sec, int kind, long idx)
{
    void *s = zmq_socket(r->ctx, ZMQ_DEALER);
    if (!s)
        return NULL;
    wire_socket_setup(s);
    char p[41], k[41];
    if (!pub) {
        zmq_curve_keypair(p, k);
        pub = p;
        sec = k;
    }
    zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, r->o->server_pub, 40);
    zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40);
    zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40);
    if (zmq_connect(s, r->o->ep) != 0) {
        zmq_close(s);
        return NULL;
    }
    int fd;
    size_t fl = sizeof fd;
    zmq_getsockopt(s, ZMQ_FD, &fd, &fl);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET};
    ev.data.u64 = ((uint64_t)kind << 32) | (uint64_t)idx;
    epoll_ctl(r->ep, EPOLL_CTL_ADD, fd, &ev);
    return s;
}

static void s_close(rig_t *r, void *s)
{
    int fd;
    size_t fl = sizeof fd;
    zmq_getsockopt(s, ZMQ_FD, &fd, &fl);
    epoll_ctl(r->ep, EPOLL_CTL_DEL, fd, NULL);
    zmq_close(s);
}

static void s_send(void *sock, json_t *msg)
{
    wire_send(sock, NULL, msg, 1);
}

static void s_error(rig_t *r, const char *who, json_t *m)
{
    r->errors++;
    const char *code = json_string_value(json_object_get(m, "code"));
    const char *text = json_string_value(json_object_get(m, "message"));
    if (!code)
        code = "?";
    if (!strstr(r->err_codes, code) && strlen(r->err_codes) + strlen(code) + 2 < 500) {
        strcat(r->err_codes, code);
        strcat(r->err_codes, " ");
        fprintf(stderr, "scale_rig: %s: error %s: %s\n", who, code, text ? text : "");
    }
}

/* The wait after the n-th send of an unanswered request: libjizhi's
   (trial_helper/jz_conn.c), or a fixed 3 s with --fixed-resend (the rig
   before the backoff, for an A/B). */
static double s_backoff(rig_t *r, int n)
{
    return r->o->fixed_resend ? 3.0 : util_backoff(n, 2.0, 16.0, &r->rng);
}

static rig_trial *s_trial_by_id(rig_t *r, long disp, long id)
{
    for (long k = 0; k < r->o->slots; k++) {
        rig_trial *t = &r->trials[disp * r->o->slots + k];
        if (t->st != RT_FREE && t->id == id)
            return t;
    }
    return NULL;
}

static void s_trial_end(rig_t *r, long disp, rig_trial *t, const char *how)
{
    rig_disp *d = &r->disps[disp];
    s_send(d->sock,
           json_pack("{s:s, s:I, s:s, s:I, s:I, s:s, s:i, s:i, s:s}", "type", "exited",
                     "req", (json_int_t)++d->req, "name", d->name, "trial",
                     (json_int_t)t->id, "attempt", (json_int_t)t->attempt, "how", how,
                     "code", -1, "signal", 15, "message", "scale rig"));
    if (t->st == RT_RUNNING)
        r->running--;
    s_close(r, t->sock);
    json_decref(t->out_msg);
    memset(t, 0, sizeof *t);
}

static json_t *s_hello(rig_trial *t, long idx)
{
    return json_pack("{s:s, s:I, s:s, s:I, s:i}", "type", "hello", "trial",
                     (json_int_t)t->id, "token", t->token, "req", (json_int_t)t->out_req,
                     "pid", (int)(100000 + idx));
}

static void s_on_disp(rig_t *r, long di, json_t *m)
{
    rig_disp *d = &r->disps[di];
    const char *type = wire_type(m);
    if (!strcmp(type, "ok")) {
        if (json_integer_value(json_object_get(m, "req")) == d->reg_req)
            d->registered = 1;
    } else if (!strcmp(type, "error")) {
        s_error(r, d->name, m);
    } else if (!strcmp(type, "start")) {
        long id = (long)json_integer_value(json_object_get(m, "trial"));
        long att = (long)json_integer_value(json_object_get(m, "attempt"));
        const char *study = json_string_value(json_object_get(m, "study"));
        json_t *env = json_object_get(m, "env");
        const char *tok = json_string_value(json_object_get(env, "JIZHI_TOKEN"));
        rig_trial *t = NULL;
        for (long k = 0; k < r->o->slots && !t; k++)
            if (r->trials[di * r->o->slots + k].st == RT_FREE)
                t = &r->trials[di * r->o->slots + k];
        if (!t || !tok || !study) {
            s_send(d->sock, json_pack("{s:s, s:I, s:s, s:I, s:I, s:s, s:i, s:i, s:s}",
                                      "type", "exited", "req", (json_int_t)++d->req,
                                      "name", d->name, "trial", (json_int_t)id, "attempt",
                                      (json_int_t)att, "how", "start_failed", "code", -1,
                                      "signal", 0, "message", "no free slot"));
            return;
        }
        t->id = id;
        t->attempt = att;
        snprintf(t->token, sizeof t->token, "%s", tok);
        t->user = -1;
        for (long u = 0; u < r->nu; u++)
            if (!strcmp(study, r->users[u].name))
                t->user = (int)u;
        long idx = t - r->trials;
        t->sock = s_socket(r, NULL, NULL, K_TRIAL, idx);
        if (!t->sock) {
            fprintf(stderr, "scale_rig: cannot open a trial socket: %s\n",
                    zmq_strerror(errno));
            memset(t, 0, sizeof *t);
            return;
        }
        t->st = RT_HELLO;
        r->starts++;
        r->t_last_start = util_now();
        s_send(d->sock,
               json_pack("{s:s, s:I, s:s, s:I, s:I, s:i}", "type", "started", "req",
                         (json_int_t)++d->req, "name", d->name, "trial", (json_int_t)id,
                         "attempt", (json_int_t)att, "pid", (int)(100000 + idx)));
        t->out_req = ++t->req;
        t->sends = 1;
        t->resend_at = util_now() + s_backoff(r, 1);
        s_send(t->sock, s_hello(t, idx));
    } else if (!strcmp(type, "kill")) {
        long id = (long)json_integer_value(json_object_get(m, "trial"));
        rig_trial *t = s_trial_by_id(r, di, id);
        if (t)
            s_trial_end(r, di, t, "killed");
    }
}

static void s_on_trial(rig_t *r, long ti, json_t *m)
{
    rig_trial *t = &r->trials[ti];
    if (t->st == RT_FREE)
        return;
    const char *type = wire_type(m);
    long req = (long)json_integer_value(json_object_get(m, "req"));
    if (!strcmp(type, "ok")) {
        if (t->st == RT_HELLO && req == t->out_req) {
            t->st = RT_RUNNING;
            t->out_req = 0;
            r->running++;
            t->next_due = util_now() + util_unif01(&r->rng) * r->o->period_ms / 1e3;
        } else if (req == t->out_req) {
            r->acked_total += t->out_points;
            if (r->steady)
                r->acked_steady += t->out_points;
            t->out_req = 0;
            json_decref(t->out_msg);
            t->out_msg = NULL;
        }
    } else if (!strcmp(type, "error")) {
        char who[40];
        snprintf(who, sizeof who, "trial %ld", t->id);
        s_error(r, who, m);
        if (req == t->out_req && t->st == RT_RUNNING) {
            t->out_req = 0; /* not acknowledged: not counted */
            json_decref(t->out_msg);
            t->out_msg = NULL;
        }
    } else if (!strcmp(type, "instruction")) {
        json_int_t id = json_integer_value(json_object_get(m, "id"));
        s_send(t->sock, json_pack("{s:s, s:I, s:s, s:I, s:I, s:b}", "type", "ins_ack",
                                  "trial", (json_int_t)t->id, "token", t->token, "req",
                                  (json_int_t)++t->req, "id", id, "applied", 1));
    }
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void s_on_user(rig_t *r, long ui, json_t *m)
{
    rig_user *u = &r->users[ui];
    long req = (long)json_integer_value(json_object_get(m, "req"));
    if (req != u->out_req)
        return;
    const char *type = wire_type(m);
    if (!strcmp(type, "error")) {
        s_error(r, u->name, m);
        if (u->submitted)
            r->set_failed++;
    } else if (u->submitted && r->steady) {
        if (r->nlat == r->caplat) {
            r->caplat = r->caplat ? 2 * r->caplat : 1024;
            r->lat = util_xrealloc(r->lat, (size_t)r->caplat * sizeof *r->lat);
        }
        r->lat[r->nlat++] = (util_now() - u->t_sent) * 1e3;
    }
    u->submitted = 1;
    u->out_req = 0;
}

static void s_drain(rig_t *r, int kind, long idx)
{
    for (;;) {
        void *sock = kind == K_DISP    ? r->disps[idx].sock
                     : kind == K_TRIAL ? r->trials[idx].sock
                                       : r->users[idx].sock;
        if (!sock)
            return;
        char err[200];
        json_t *m = wire_recv(sock, NULL, 1, err, sizeof err);
        if (!m) {
            if (errno == EAGAIN)
                return;
            continue;
        }
        if (kind == K_DISP)
            s_on_disp(r, idx, m);
        else if (kind == K_TRIAL)
            s_on_trial(r, idx, m);
        else
            s_on_user(r, idx, m);
        json_decref(m);
    }
}

static void s_sweep(rig_t *r)
{
    for (long i = 0; i < r->nd; i++)
        s_drain(r, K_DISP, i);
    for (long i = 0; i < r->nd * r->o->slots; i++)
        if (r->trials[i].st != RT_FREE)
            s_drain(r, K_TRIAL, i);
    for (long i = 0; i < r->nu; i++)
        s_drain(r, K_USER, i);
}

static void s_poll(rig_t *r, int ms)
{
    struct epoll_event ev[512];
    int n = epoll_wait(r->ep, ev, 512, ms);
    for (int i = 0; i < n; i++)
        s_drain(r, (int)(ev[i].data.u64 >> 32), (long)(ev[i].data.u64 & 0xffffffffu));
}

/* Timers: dispatcher heartbeats, metric batches, users' sets. */
static void s_tick(rig_t *r, double now)
{
    for (long i = 0; i < r->nd; i++) {
        rig_disp *d = &r->disps[i];
        if (now < d->hb_next)
            continue;
        d->hb_next = now + 1.0;
        if (!d->registered) {
            d->reg_req = ++d->req;
            s_send(d->sock,
                   json_pack("{s:s, s:I, s:s, s:I, s:[], s:[]}", "type", "register",
                             "req", (json_int_t)d->reg_req, "name", d->name, "slots",
                             (json_int_t)r->o->slots, "gpus", "running"));
        } else {
            json_t *run = json_array();
            for (long k = 0; k < r->o->slots; k++) {
                rig_trial *t = &r->trials[i * r->o->slots + k];
                if (t->st != RT_FREE)
                    json_array_append_new(
                        run, json_pack("{s:I, s:I, s:I}", "trial", (json_int_t)t->id,
                                       "attempt", (json_int_t)t->attempt, "pid",
                                       (json_int_t)(100000 + i * r->o->slots + k)));
            }
            s_send(d->sock,
                   json_pack("{s:s, s:I, s:s, s:o}", "type", "disp_heartbeat", "req",
                             (json_int_t)++d->req, "name", d->name, "running", run));
        }
        s_drain(r, K_DISP, i);
    }
    for (long i = 0; i < r->nd * r->o->slots; i++) {
        rig_trial *t = &r->trials[i];
        if (t->st != RT_FREE && t->out_req && now >= t->resend_at) {
            r->resent++;
            t->resend_at = now + s_backoff(r, ++t->sends);
            s_send(t->sock, t->st == RT_HELLO ? s_hello(t, i) : json_incref(t->out_msg));
            s_drain(r, K_TRIAL, i);
        }
        if (t->st != RT_RUNNING || now < t->next_due)
            continue;
        t->next_due += r->o->period_ms / 1e3;
        if (t->next_due < now)
            t->next_due = now;
        if (t->out_req) {
            r->behind++;
            continue;
        }
        json_t *pts = json_array();
        for (long k = 0; k < r->o->metrics; k++) {
            char name[16];
            snprintf(name, sizeof name, "m%ld", k % 8);
            if (k % 8 == 0 && k)
                t->step++;
            json_array_append_new(pts, json_pack("[I, s, f]", (json_int_t)t->step, name,
                                                 util_unif01(&r->rng)));
        }
        t->step++;
        char session[40];
        snprintf(session, sizeof session, "rig%ld", t->id);
        t->out_req = ++t->req;
        t->out_points = r->o->metrics;
        t->sends = 1;
        t->resend_at = now + s_backoff(r, 1);
        t->out_msg = json_pack("{s:s, s:I, s:s, s:I, s:s, s:o}", "type", "metrics",
                               "trial", (json_int_t)t->id, "token", t->token, "req",
                               (json_int_t)t->out_req, "session", session, "points", pts);
        s_send(t->sock, json_incref(t->out_msg));
        s_drain(r, K_TRIAL, i);
    }
    if (!r->steady)
        return;
    for (long ui = 0; ui < r->nu; ui++) {
        rig_user *u = &r->users[ui];
        if (u->out_req)
            continue;
        /* a random running trial of this user's study, in this part */
        long n = r->nd * r->o->slots, pick = -1;
        for (int tries = 0; tries < 64 && pick < 0; tries++) {
            long i = (long)(util_splitmix64(&r->rng) % (uint64_t)n);
            if (r->trials[i].st == RT_RUNNING && r->trials[i].user == ui)
                pick = i;
        }
        if (pick < 0)
            continue;
        u->out_req = ++u->req;
        u->t_sent = util_now();
        s_send(u->sock,
               json_pack("{s:s, s:I, s:I, s:{s:f}, s:b, s:f}", "type", "trial_set", "req",
                         (json_int_t)u->out_req, "trial", (json_int_t)r->trials[pick].id,
                         "values", "lr", 0.001 + 0.5 * util_unif01(&r->rng), "wait", 1,
                         "wait_s", 30.0));
        s_drain(r, K_USER, ui);
    }
}

static json_t *s_spec(const char *name, long u, long trials)
{
    return json_pack("{s:s, s:{s:s, s:s}, s:{s:s, s:I}, s:{s:I, s:I}, s:{s:{s:s, s:f, "
                     "s:f, s:b}}, s:{s:[s], s:i}}",
                     "name", name, "objective", "metric", "m0", "mode", "max",
                     "scheduler", "type", "random", "seed", (json_int_t)(u + 1), "budget",
                     "trials", (json_int_t)trials, "parallel", (json_int_t)trials,
                     "space", "lr", "type", "float", "low", 0.001, "high", 1.0, "log", 1,
                     "trial", "command", "/bin/true", "retries", 0);
}

/* One part: returns its results as text lines on `out`; waits for a line
   on `in` before submitting (all parts registered) and before exiting. */
static int s_part(rig_opts *o, int part, int in, int out)
{
    rig_t r = {.o = o, .part = part, .rng = 0x5ca1e + (uint64_t)part};
    r.d0 = o->ndisps * part / o->procs;
    r.nd = o->ndisps * (part + 1) / o->procs - r.d0;
    r.u0 = o->nusers * part / o->procs;
    r.nu = o->nusers * (part + 1) / o->procs - r.u0;
    r.ctx = zmq_ctx_new();
    zmq_ctx_set(r.ctx, ZMQ_MAX_SOCKETS, 60000);
    zmq_ctx_set(r.ctx, ZMQ_IO_THREADS, 1);
    r.ep = epoll_create1(0);
    r.disps = util_xcalloc((size_t)(r.nd ? r.nd : 1), sizeof *r.disps);
    r.trials = util_xcalloc((size_t)(r.nd * o->slots + 1), sizeof *r.trials);
    r.users = util_xcalloc((size_t)(r.nu ? r.nu : 1), sizeof *r.users);
    for (long i = 0; i < r.nd; i++) {
        char pub[41], sec[41];
        snprintf(r.disps[i].name, sizeof r.disps[i].name, "d%ld", r.d0 + i);
        s_pair(r.disps[i].name, pub, sec);
        snprintf(r.disps[i].name, sizeof r.disps[i].name, "scale-d%ld", r.d0 + i);
        r.disps[i].sock = s_socket(&r, pub, sec, K_DISP, i);
        if (!r.disps[i].sock) {
            fprintf(stderr, "scale_rig: dispatcher socket %ld: %s\n", i,
                    zmq_strerror(errno));
            return 1;
        }
    }
    for (long i = 0; i < r.nu; i++) {
        char pub[41], sec[41];
        snprintf(r.users[i].name, sizeof r.users[i].name, "u%ld", r.u0 + i);
        s_pair(r.users[i].name, pub, sec);
        r.users[i].sock = s_socket(&r, pub, sec, K_USER, i);
    }
    /* register every dispatcher */
    double t_end = util_now() + 60;
    long reg = 0;
    while (reg < r.nd && util_now() < t_end) {
        s_tick(&r, util_now());
        s_poll(&r, 20);
        reg = 0;
        for (long i = 0; i < r.nd; i++)
            reg += r.disps[i].registered;
    }
    dprintf(out, "registered %ld\n", reg);
    char c;
    if (read(in, &c, 1) != 1)
        return 1;
    /* submit: each user one study of (its share of) every slot */
    long total = o->ndisps * o->slots;
    double t0 = util_now();
    for (long i = 0; i < r.nu; i++) {
        rig_user *u = &r.users[i];
        long share = total * (r.u0 + i + 1) / o->nusers - total * (r.u0 + i) / o->nusers;
        json_t *spec = s_spec(u->name, r.u0 + i, share);
        u->out_req = ++u->req;
        s_send(u->sock, json_pack("{s:s, s:I, s:o}", "type", "submit", "req",
                                  (json_int_t)u->out_req, "spec", spec));
    }
    /* ramp: until this part's slots all hold trials that said hello */
    t_end = t0 + o->ramp_s;
    double last_sweep = 0;
    while (r.running < r.nd * o->slots && util_now() < t_end) {
        double now = util_now();
        s_tick(&r, now);
        s_poll(&r, 5);
        if (now - last_sweep > 0.5) {
            s_sweep(&r);
            last_sweep = now;
        }
    }
    double t_ramp = util_now();
    dprintf(out, "ramp %.6f %.6f %ld %ld\n", t0, r.t_last_start, r.starts, r.running);
    r.steady = 1;
    t_end = t_ramp + o->steady_s;
    while (util_now() < t_end) {
        double now = util_now();
        s_tick(&r, now);
        s_poll(&r, 2);
        if (now - last_sweep > 0.5) {
            s_sweep(&r);
            last_sweep = now;
        }
    }
    double t_steady = util_now() - t_ramp;
    r.steady = 0;
    /* let the last batches be answered (they count in acked_total only) */
    t_end = util_now() + 5;
    for (;;) {
        long out_n = 0;
        for (long i = 0; i < r.nd * o->slots; i++)
            out_n += r.trials[i].st == RT_RUNNING && r.trials[i].out_req;
        if (!out_n || util_now() > t_end)
            break;
        s_poll(&r, 10);
        s_sweep(&r);
    }
    qsort(r.lat, (size_t)r.nlat, sizeof *r.lat, s_cmp);
    dprintf(out, "steady %.6f %ld %ld %ld %ld %ld %ld %ld\n", t_steady, r.acked_steady,
            r.acked_total, r.behind, r.errors, r.set_failed, r.running, r.resent);
    dprintf(out, "codes %s\n", r.err_codes[0] ? r.err_codes : "-");
    for (long i = 0; i < r.nlat; i++)
        dprintf(out, "lat %.4f\n", r.lat[i]);
    dprintf(out, "end\n");
    if (read(in, &c, 1) != 1) {
        /* the parent is gone: exit all the same */
    }
    /* leave without closing thousands of sockets one by one */
    _exit(0);
}

static double s_ctl_cpu(long pid)
{
    char buf[1024];
    const char *p = util_proc_stat(pid, buf, sizeof buf);
    unsigned long ut = 0, st = 0;
    if (!p ||
        sscanf(p, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double s_ctl_rss_mb(long pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    double kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %lf", &kb) == 1)
            break;
    fclose(f);
    return kb / 1024.0;
}

int main(int argc, char **argv)
{
    rig_opts o = {.ndisps = 10,
                  .slots = 10,
                  .metrics = 10,
                  .period_ms = 1000,
                  .nusers = 4,
                  .procs = 1,
                  .steady_s = 10,
                  .ramp_s = 120};
    int keys = 0;
    const char *skey = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--keys")) {
            keys = 1;
            continue;
        }
        if (!strcmp(a, "--fixed-resend")) {
            o.fixed_resend = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "scale_rig: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--controller"))
            o.ep = v;
        else if (!strcmp(a, "--server-key"))
            skey = v;
        else if (!strcmp(a, "--disps"))
            o.ndisps = atol(v);
        else if (!strcmp(a, "--slots"))
            o.slots = atol(v);
        else if (!strcmp(a, "--metrics"))
            o.metrics = atol(v);
        else if (!strcmp(a, "--period-ms"))
            o.period_ms = atol(v);
        else if (!strcmp(a, "--users"))
            o.nusers = atol(v);
        else if (!strcmp(a, "--procs"))
            o.procs = atol(v);
        else if (!strcmp(a, "--ctl-pid"))
            o.ctl_pid = atol(v);
        else if (!strcmp(a, "--steady-s"))
            o.steady_s = atof(v);
        else if (!strcmp(a, "--ramp-s"))
            o.ramp_s = atof(v);
        else {
            fprintf(stderr, "scale_rig: unknown option %s\n", a);
            return 2;
        }
    }
    if (o.ndisps < 1 || o.slots < 1 || o.nusers < 1 || o.procs < 1 ||
        o.procs > o.ndisps || o.metrics < 1 || o.period_ms < 1) {
        fprintf(stderr, "scale_rig: --disps, --slots, --users, --metrics, --period-ms "
                        "must be >= 1, --procs between 1 and --disps\n");
        return 2;
    }
    if (keys) {
        for (long i = 0; i < o.ndisps; i++) {
            char n[32], pub[41], sec[41];
            snprintf(n, sizeof n, "d%ld", i);
            s_pair(n, pub, sec);
            printf("%s scale-d%ld dispatcher\n", pub, i);
        }
        for (long i = 0; i < o.nusers; i++) {
            char n[32], pub[41], sec[41];
            snprintf(n, sizeof n, "u%ld", i);
            s_pair(n, pub, sec);
            printf("%s u%ld user\n", pub, i);
        }
        return 0;
    }
    if (!o.ep || !skey || strlen(skey) != 40) {
        fprintf(stderr, "scale_rig: --controller and --server-key (Z85) are needed\n");
        return 2;
    }
    memcpy(o.server_pub, skey, 41);
    signal(SIGPIPE, SIG_IGN);
    int *to = util_xcalloc((size_t)o.procs, sizeof *to);
    FILE **from = util_xcalloc((size_t)o.procs, sizeof *from);
    pid_t *kids = util_xcalloc((size_t)o.procs, sizeof *kids);
    for (long p = 0; p < o.procs; p++) {
        int a[2], b[2];
        if (pipe(a) || pipe(b))
            return 1;
        kids[p] = fork();
        if (kids[p] == 0) {
            close(a[1]);
            close(b[0]);
            return s_part(&o, (int)p, a[0], b[1]);
        }
        close(a[0]);
        close(b[1]);
        to[p] = a[1];
        from[p] = fdopen(b[0], "r");
    }
    char *line = NULL;
    size_t cap = 0;
    long reg = 0;
    for (long p = 0; p < o.procs; p++) {
        long n = 0;
        if (getline(&line, &cap, from[p]) > 0 && sscanf(line, "registered %ld", &n) == 1)
            reg += n;
    }
    double cpu0 = o.ctl_pid ? s_ctl_cpu(o.ctl_pid) : -1, w0 = util_now();
    for (long p = 0; p < o.procs; p++)
        if (write(to[p], "g", 1) != 1)
            return 1;
    double t0 = 1e300, tlast = 0, steady_s = 0;
    long starts = 0, running = 0, acked_steady = 0, acked = 0, behind = 0, errors = 0,
         set_failed = 0, still = 0, resent = 0;
    double *lat = NULL;
    long nlat = 0, caplat = 0;
    char codes[1024] = "";
    double rss = -1, cpu1 = -1, w1 = 0;
    /* the steady phase starts when every part has reported its ramp */
    double cpu_s0 = -1, w_s0 = 0;
    for (long p = 0; p < o.procs; p++) {
        while (getline(&line, &cap, from[p]) > 0) {
            double a, b;
            long x1, x2;
            if (sscanf(line, "ramp %lf %lf %ld %ld", &a, &b, &x1, &x2) == 4) {
                t0 = a < t0 ? a : t0;
                tlast = b > tlast ? b : tlast;
                starts += x1;
                running += x2;
                break;
            }
        }
    }
    if (o.ctl_pid) {
        cpu_s0 = s_ctl_cpu(o.ctl_pid);
        w_s0 = util_now();
    }
    for (long p = 0; p < o.procs; p++) {
        while (getline(&line, &cap, from[p]) > 0) {
            double a;
            long x1, x2, x3, x4, x5, x6, x7;
            char cs[600];
            if (!strncmp(line, "end", 3))
                break;
            if (sscanf(line, "steady %lf %ld %ld %ld %ld %ld %ld %ld", &a, &x1, &x2, &x3,
                       &x4, &x5, &x6, &x7) == 8) {
                resent += x7;
                steady_s = a > steady_s ? a : steady_s;
                acked_steady += x1;
                acked += x2;
                behind += x3;
                errors += x4;
                set_failed += x5;
                still += x6;
            } else if (sscanf(line, "codes %599[^\n]", cs) == 1) {
                if (strcmp(cs, "-") && strlen(codes) + strlen(cs) < sizeof codes - 2)
                    strcat(strcat(codes, cs), " ");
            } else if (sscanf(line, "lat %lf", &a) == 1) {
                if (nlat == caplat) {
                    caplat = caplat ? 2 * caplat : 1024;
                    lat = util_xrealloc(lat, (size_t)caplat * sizeof *lat);
                }
                lat[nlat++] = a;
            }
        }
    }
    if (o.ctl_pid) { /* every part is past its steady phase: trials still connected */
        rss = s_ctl_rss_mb(o.ctl_pid);
        cpu1 = s_ctl_cpu(o.ctl_pid);
        w1 = util_now();
    }
    for (long p = 0; p < o.procs; p++)
        if (write(to[p], "x", 1) != 1) {
            /* the part is gone already */
        }
    for (long p = 0; p < o.procs; p++)
        waitpid(kids[p], NULL, 0);
    qsort(lat, (size_t)nlat, sizeof *lat, s_cmp);
#define PCT(q) (nlat ? lat[(long)((q) * (double)(nlat - 1) + 0.5)] : -1.0)
    double disp_s = tlast > t0 ? tlast - t0 : 0;
    printf(
        "{\"disps\": %ld, \"slots\": %ld, \"users\": %ld, \"metrics\": %ld, "
        "\"period_ms\": %ld, \"registered\": %ld, \"starts\": %ld, \"running\": %ld, "
        "\"dispatch_s\": %.3f, \"dispatch_per_s\": %.1f, \"steady_s\": %.2f, "
        "\"points_acked\": %ld, \"points_acked_steady\": %ld, \"points_per_s\": %.0f, "
        "\"set_n\": %ld, \"set_p50_ms\": %.3f, \"set_p99_ms\": %.3f, "
        "\"set_max_ms\": %.3f, \"set_failed\": %ld, \"behind\": %ld, \"errors\": %ld, "
        "\"error_codes\": \"%s\", \"running_at_end\": %ld, \"resent\": %ld, "
        "\"ctl_cpu_s\": %.2f, "
        "\"ctl_cpu_frac\": %.3f, \"ctl_cpu_steady_frac\": %.3f, \"ctl_rss_mb\": %.1f}\n",
        o.ndisps, o.slots, o.nusers, o.metrics, o.period_ms, reg, starts, running, disp_s,
        disp_s > 0 ? (double)starts / disp_s : 0.0, steady_s, acked, acked_steady,
        steady_s > 0 ? (double)acked_steady / steady_s : 0.0, nlat, PCT(0.5), PCT(0.99),
        nlat ? lat[nlat - 1] : -1.0, set_failed, behind, errors, codes, still, resent,
        cpu1 >= 0 ? cpu1 - cpu0 : -1.0,
        cpu1 >= 0 && w1 > w0 ? (cpu1 - cpu0) / (w1 - w0) : -1.0,
        cpu_s0 >= 0 && w1 > w_s0 ? (cpu1 - cpu_s0) / (w1 - w_s0) : -1.0, rss);
    free(lat);
    free(line);
    return 0;
}
