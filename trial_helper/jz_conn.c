/*  jz_conn.c - libjizhi's background connection thread.

    The thread owns the ZeroMQ DEALER socket connected to the controller
    (docs/PROTOCOL.md, "Trial helper <-> controller"). It
    - sends `hello` (resent every 2 s until answered) and hands the params
      of the reply to the application side;
    - takes queued points in order and sends them as `metrics` batches: one
      batch in flight at a time (the controller dedups on this instance's
      random `session` and the highest persisted `req`, so a later batch
      must never overtake an earlier one), sent when 10 000 points are queued, 50 ms after
   the previous batch, or at once while jz_flush waits; up to 100 000 points each; a batch
   without a reply for 2 s is resent with the same `req` and the same bytes;
    - sends the `ins_ack` and `checkpoint_done` messages the application
      queues (kept and resent the same way until answered);
    - sends a `trial_heartbeat` after a second without sending anything;
    - receives `instruction` pushes, drops ids it has already delivered and
      queues the rest for jz_poll.
    What arrives is decoded once through the message schema (common/msg.h)
    and dispatched by type (s_handlers); a message that does not decode is
    logged and dropped (an instruction with an id is acked applied: false).
    The metrics body is written directly as text (%.17g per value): several
    times cheaper than building one json_t per point.
*/
#include "jz_internal.h"

#include "common/ins.h"
#include "common/log.h"
#include "common/spec.h"
#include "common/keys.h"
#include "common/msg.h"
#include "common/wire.h"
#include "common/util.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <zmq.h>

typedef enum { R_HELLO, R_METRICS, R_INS_ACK, R_CKPT } s_kind;

/* A request waiting for its reply. */
typedef struct {
    long req;
    s_kind kind;
    char *body; /* the exact bytes sent (owned) */
    size_t len;
    double due;   /* monotonic: when it is sent (again) if still unanswered */
    int sends;    /* times it went out: the next wait doubles (s_resend_due) */
    long npoints; /* R_METRICS: points in the batch */
} s_out;

typedef struct {
    jz_trial *t;
    void *sock;
    long next_req;
    char session[24]; /* random id of this helper instance (metrics dedup) */
    uint64_t rng;     /* the resend jitter's */
    s_out *outs;      /* outstanding requests */
    size_t nouts, capouts;
    int batch_inflight;
    double last_batch; /* when the last batch was first sent */
    double last_send;  /* when anything was last sent */
    long *seen;        /* instruction ids already delivered */
    size_t nseen, capseen;
    jz__point *batch; /* points of the batch being written */
    size_t capbatch;
    char *buf; /* text of the batch being written */
    size_t len, cap;
} s_conn;

static const char *const s_kind_names[] = {"hello", "metrics", "ins_ack",
                                           "checkpoint_done"};

/* ---- small helpers -------------------------------------------------------- */

void jz__wake(jz_trial *t)
{
    char b = 1;
    ssize_t rc = write(t->wake_fd[1], &b, 1);
    (void)rc; /* a full pipe already wakes the thread */
}

void jz__pending_ins_fini(jz__pending_ins *p)
{
    json_decref(p->value);
    json_decref(p->params);
    p->value = p->params = NULL;
}

int jz__fmt_double(char *buf, size_t size, double x)
{
    if (isnan(x))
        return snprintf(buf, size, "nan");
    if (isinf(x))
        return snprintf(buf, size, x > 0 ? "inf" : "-inf");
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(buf, size, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    return n;
}

static int s_reserve(s_conn *c, size_t more)
{
    if (c->len + more <= c->cap)
        return 0;
    size_t cap = c->cap ? c->cap : 4096;
    while (cap < c->len + more)
        cap *= 2;
    char *b = realloc(c->buf, cap);
    if (!b)
        return -1;
    c->buf = b;
    c->cap = cap;
    return 0;
}

/* Sends one body as [""][body]. 0 or -1 (EAGAIN: no connection or full). */
static int s_send_raw(s_conn *c, const char *body, size_t len)
{
    if (zmq_send(c->sock, "", 0, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0)
        return -1;
    /* the parts of a multipart message are queued atomically */
    if (zmq_send(c->sock, body, len, ZMQ_DONTWAIT) < 0)
        return -1;
    c->last_send = util_now();
    return 0;
}

/* Sends `body` (takes ownership) and keeps it until its reply. A send that
   the socket refuses (not connected yet) is retried at the next tick. */
static int s_track(s_conn *c, s_kind kind, long req, char *body, size_t len, long npoints)
{
    if (c->nouts == c->capouts) {
        size_t cap = c->capouts ? 2 * c->capouts : 8;
        s_out *o = realloc(c->outs, cap * sizeof *o);
        if (!o) {
            free(body);
            return -1;
        }
        c->outs = o;
        c->capouts = cap;
    }
    s_out *o = &c->outs[c->nouts++];
    *o = (s_out){req, kind, body, len, 0, 0, npoints};
    double now = util_now();
    if (s_send_raw(c, body, len) == 0) {
        o->sends = 1;
        o->due = now + util_backoff(1, JZ__RESEND_AFTER, JZ__RESEND_MAX, &c->rng);
    } else {
        o->due = now; /* not connected: tried again at the next tick */
    }
    return 0;
}

static s_out *s_find(s_conn *c, long req)
{
    for (size_t i = 0; i < c->nouts; i++)
        if (c->outs[i].req == req)
            return &c->outs[i];
    return NULL;
}

static void s_remove(s_conn *c, s_out *o)
{
    free(o->body);
    size_t i = (size_t)(o - c->outs);
    memmove(&c->outs[i], &c->outs[i + 1], (c->nouts - i - 1) * sizeof *o);
    c->nouts--;
}

/* Adds trial, token and a fresh req to `msg` (takes ownership) and sends it:
   tracked for resend unless it is a heartbeat. */
static void s_send_msg(s_conn *c, json_t *msg, s_kind kind, int tracked)
{
    jz_trial *t = c->t;
    long req = c->next_req++;
    json_object_set_new(msg, "trial", json_integer(t->trial_id));
    json_object_set_new(msg, "token", json_string(t->token));
    json_object_set_new(msg, "req", json_integer(req));
    char *body = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (!body) {
        log_error("jizhi", "out of memory building a message");
        return;
    }
    if (tracked) {
        s_track(c, kind, req, body, strlen(body), 0);
    } else {
        s_send_raw(c, body, strlen(body));
        free(body);
    }
}

/* Queues an ins_ack the thread itself decides (a refused instruction). */
static void s_ack_direct(s_conn *c, long id, const char *detail)
{
    pthread_mutex_lock(&c->t->mu);
    c->t->unacked_msgs++;
    pthread_mutex_unlock(&c->t->mu);
    s_send_msg(c,
               json_pack("{s:s, s:I, s:b, s:s}", "type", "ins_ack", "id", (json_int_t)id,
                         "applied", 0, "detail", detail),
               R_INS_ACK, 1);
}

/* ---- refusal -------------------------------------------------------------- */

/* The controller refused our token: drop everything, send nothing more. */
static void s_refuse(s_conn *c, const char *why)
{
    jz_trial *t = c->t;
    log_error("jizhi",
              "trial %ld: the controller refused this trial (%s); reports are dropped",
              t->trial_id, why);
    for (size_t i = 0; i < c->nouts; i++)
        free(c->outs[i].body);
    c->nouts = 0;
    c->batch_inflight = 0;
    pthread_mutex_lock(&t->mu);
    t->state = JZ__REFUSED;
    t->failed = 1;
    t->npend = 0;
    t->unacked_points = 0;
    t->unacked_msgs = 0;
    json_array_clear(t->outbox);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* ---- incoming ------------------------------------------------------------- */

static int s_retryable(const char *code)
{
    return !strcmp(code, "internal") || !strcmp(code, "timeout");
}

static void s_on_reply(s_conn *c, json_t *m, int ok)
{
    jz_trial *t = c->t;
    json_t *r = json_object_get(m, "req");
    const char *code = ok ? "" : json_string_value(json_object_get(m, "code"));
    const char *text = ok ? "" : json_string_value(json_object_get(m, "message"));
    if (!code)
        code = "";
    if (!text)
        text = "";
    if (!ok && !strcmp(code, "unauthorized")) {
        s_refuse(c, text[0] ? text : code);
        return;
    }
    s_out *o = json_is_integer(r) ? s_find(c, (long)json_integer_value(r)) : NULL;
    if (!o) {
        if (!ok) /* debug: a heartbeat refused every second would flood the log */
            log_debug("jizhi", "trial %ld: error %s: %s", t->trial_id, code, text);
        return; /* a heartbeat's reply, or a late duplicate */
    }
    if (!ok) {
        if (s_retryable(code)) {
            log_warn("jizhi", "trial %ld: %s: error %s (%s); will resend", t->trial_id,
                     s_kind_names[o->kind], code, text);
            return; /* resent when due (s_resend_due) */
        }
        if (o->kind == R_HELLO && strcmp(code, "unknown_trial") != 0) {
            log_warn("jizhi", "trial %ld: hello: error %s (%s); will resend", t->trial_id,
                     code, text);
            return;
        }
        if (o->kind == R_HELLO) {
            s_refuse(c, text[0] ? text : code);
            return;
        }
        log_warn("jizhi", "trial %ld: %s refused: %s (%s)", t->trial_id,
                 s_kind_names[o->kind], code, text);
    }
    s_kind kind = o->kind;
    long npoints = o->npoints;
    s_remove(c, o);
    pthread_mutex_lock(&t->mu);
    switch (kind) {
    case R_HELLO: {
        json_t *p = json_object_get(m, "params");
        /* a copy: the app thread takes it, and jansson's reference counts
           are not meant to be shared across threads (build-tsan saw the
           reply's last decref here race the app thread's) */
        json_t *copy = json_is_object(p) ? json_deep_copy(p) : NULL;
        if (copy) {
            json_decref(t->hello_params);
            t->hello_params = copy;
        } else if (json_is_object(p)) {
            log_error("jizhi", "out of memory copying the hello's params: not applied");
        }
        t->state = JZ__CONNECTED;
        break;
    }
    case R_METRICS:
        log_debug("jizhi", "trial %ld: batch of %ld points acknowledged in %.1f ms",
                  t->trial_id, npoints, (util_now() - c->last_batch) * 1e3);
        c->batch_inflight = 0;
        t->unacked_points -= npoints;
        if (!ok)
            t->failed = 1;
        break;
    case R_INS_ACK:
    case R_CKPT:
        t->unacked_msgs--;
        break;
    }
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static int s_seen(s_conn *c, long id)
{
    for (size_t i = c->nseen; i-- > 0;)
        if (c->seen[i] == id)
            return 1;
    if (c->nseen == c->capseen) {
        size_t cap = c->capseen ? 2 * c->capseen : 16;
        long *s = realloc(c->seen, cap * sizeof *s);
        if (!s)
            return 0;
        c->seen = s;
        c->capseen = cap;
    }
    c->seen[c->nseen++] = id;
    return 0;
}

/* The helper's public jz_ins_kind spells common/ins.h's kinds (one
   enum, one wire text: ins_kind_parse); they must agree value for value. */
_Static_assert(JZ_INS_NONE == (int)INS_NONE && JZ_INS_SET == (int)INS_SET &&
                   JZ_INS_STOP == (int)INS_STOP && JZ_INS_PAUSE == (int)INS_PAUSE &&
                   JZ_INS_RESUME == (int)INS_RESUME &&
                   JZ_INS_CHECKPOINT == (int)INS_CHECKPOINT &&
                   JZ_INS_LOAD == (int)INS_LOAD && INS_COUNT == JZ_INS_LOAD + 1,
               "jz_ins_kind (jizhi.h) and ins_kind (common/ins.h) differ");

int jz__parse_instruction(const json_t *m, jz__pending_ins *out, char *detail,
                          size_t size)
{
    memset(out, 0, sizeof *out);
    out->ins.value = NAN;
    detail[0] = 0;
    json_t *jid = json_object_get(m, "id");
    if (!json_is_integer(jid))
        return -1;
    out->ins.id = (long)json_integer_value(jid);
    const char *kind = json_string_value(json_object_get(m, "kind"));
    out->ins.kind = (jz_ins_kind)ins_kind_parse(kind);
    if (out->ins.kind == JZ_INS_NONE) {
        snprintf(detail, size, "unknown instruction kind");
        return 1;
    }
    if (out->ins.kind == JZ_INS_SET) {
        const char *name = json_string_value(json_object_get(m, "name"));
        json_t *v = json_object_get(m, "value");
        if (!name || !spec_valid_name(name) || strlen(name) >= sizeof out->ins.name) {
            snprintf(detail, size, "set: 'name' must be a parameter name");
            return 1;
        }
        snprintf(out->ins.name, sizeof out->ins.name, "%s", name);
        if (json_is_integer(v)) {
            out->ins.value = (double)json_integer_value(v);
            snprintf(out->ins.str, sizeof out->ins.str, "%" JSON_INTEGER_FORMAT,
                     json_integer_value(v));
        } else if (json_is_real(v)) {
            out->ins.value = json_real_value(v);
            int k = jz__fmt_double(out->ins.str, sizeof out->ins.str - 2, out->ins.value);
            if (isfinite(out->ins.value) && !strpbrk(out->ins.str, ".e"))
                memcpy(out->ins.str + k, ".0", 3); /* a real reads as one: "1.0" */
        } else if (json_is_string(v) && json_string_length(v) < sizeof out->ins.str &&
                   strlen(json_string_value(v)) == json_string_length(v)) {
            snprintf(out->ins.str, sizeof out->ins.str, "%s", json_string_value(v));
        } else {
            snprintf(detail, size,
                     "set: 'value' must be a number or a string under 1024 bytes");
            return 1;
        }
        out->value = json_incref(v);
    } else if (out->ins.kind == JZ_INS_LOAD) {
        json_t *path = json_object_get(m, "path");
        json_t *params = json_object_get(m, "params");
        if (!json_is_string(path) || json_string_length(path) >= sizeof out->ins.str ||
            strlen(json_string_value(path)) != json_string_length(path)) {
            snprintf(detail, size, "load: 'path' must be a string under 1024 bytes");
            return 1;
        }
        if (params && !json_is_object(params) && !json_is_null(params)) {
            snprintf(detail, size, "load: 'params' must be an object");
            return 1;
        }
        snprintf(out->ins.str, sizeof out->ins.str, "%s", json_string_value(path));
        if (json_is_object(params))
            out->params = json_incref(params);
    }
    return 0;
}

static void s_on_instruction(s_conn *c, json_t *m)
{
    jz_trial *t = c->t;
    jz__pending_ins p;
    char detail[128];
    int rc = jz__parse_instruction(m, &p, detail, sizeof detail);
    if (rc < 0) {
        log_warn("jizhi", "trial %ld: instruction without an integer id dropped",
                 t->trial_id);
        return;
    }
    if (s_seen(c, p.ins.id)) {
        jz__pending_ins_fini(&p);
        return;
    }
    if (rc > 0) {
        log_warn("jizhi", "trial %ld: instruction %ld refused: %s", t->trial_id, p.ins.id,
                 detail);
        s_ack_direct(c, p.ins.id, detail);
        jz__pending_ins_fini(&p);
        return;
    }
    pthread_mutex_lock(&t->mu);
    if (t->inq_head > 0 && t->inq_head == t->ninq)
        t->inq_head = t->ninq = 0;
    if (t->ninq == t->capinq) {
        size_t cap = t->capinq ? 2 * t->capinq : 8;
        jz__pending_ins *q = realloc(t->inq, cap * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&t->mu);
            jz__pending_ins_fini(&p);
            return;
        }
        t->inq = q;
        t->capinq = cap;
    }
    t->inq[t->ninq++] = p;
    pthread_cond_broadcast(&t->cv); /* a pause carried out by the helper waits for it */
    pthread_mutex_unlock(&t->mu);
}

static void s_on_ok(s_conn *c, json_t *m)
{
    s_on_reply(c, m, 1);
}

static void s_on_error(s_conn *c, json_t *m)
{
    s_on_reply(c, m, 0);
}

/* The handler of each message type a trial receives: a view of the schema
   (common/msg.h), which checks the fields before any of these. */
typedef void (*s_handler)(s_conn *c, json_t *m);
static const s_handler s_handlers[MSG_COUNT] = {
    [MSG_OK] = s_on_ok,
    [MSG_ERROR] = s_on_error,
    [MSG_INSTRUCTION] = s_on_instruction,
};

/* A message the schema refused: logged and dropped; an instruction that
   still has its id is acknowledged `applied: false` with the reason (once),
   so that the controller does not send it again. */
static void s_refuse_msg(s_conn *c, json_t *m, const char *err)
{
    const char *type = wire_type(m);
    const msg_def *def = msg_find(type, MSG_TRIAL);
    if (!def || !s_handlers[def->type]) {
        log_warn("jizhi", "trial %ld: unexpected message '%.40s' dropped", c->t->trial_id,
                 type);
        return;
    }
    log_warn("jizhi", "trial %ld: malformed %s dropped: %s", c->t->trial_id, def->name,
             err);
    json_t *id = json_object_get(m, "id");
    if (def->type == MSG_INSTRUCTION && json_is_integer(id) &&
        !s_seen(c, (long)json_integer_value(id))) {
        char detail[300];
        snprintf(detail, sizeof detail, "malformed instruction: %s", err);
        s_ack_direct(c, (long)json_integer_value(id), detail);
    }
}

static void s_receive(s_conn *c)
{
    for (;;) {
        char err[256];
        json_t *m = wire_recv(c->sock, NULL, 1, err, sizeof err);
        if (!m) {
            if (errno == EAGAIN)
                return;
            log_warn("jizhi", "trial %ld: malformed message dropped: %s", c->t->trial_id,
                     err);
            continue;
        }
        const msg_def *def = msg_decode(m, MSG_TRIAL, err, sizeof err);
        if (def && s_handlers[def->type])
            s_handlers[def->type](c, m);
        else
            s_refuse_msg(c, m, err);
        json_decref(m);
    }
}

/* ---- outgoing ------------------------------------------------------------- */

static void s_send_outbox(s_conn *c)
{
    jz_trial *t = c->t;
    json_t *box = NULL;
    pthread_mutex_lock(&t->mu);
    if (json_array_size(t->outbox) > 0) {
        box = t->outbox;
        t->outbox = json_array();
    }
    pthread_mutex_unlock(&t->mu);
    if (!box)
        return;
    size_t i;
    json_t *m;
    json_array_foreach(box, i, m)
    {
        s_kind kind = !strcmp(wire_type(m), "checkpoint_done") ? R_CKPT : R_INS_ACK;
        s_send_msg(c, json_incref(m), kind, 1);
    }
    json_decref(box);
}

static size_t s_write_long(char *p, long v)
{
    char tmp[24];
    unsigned long u = v < 0 ? 0UL - (unsigned long)v : (unsigned long)v;
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t k = 0;
    if (v < 0)
        p[k++] = '-';
    while (n)
        p[k++] = tmp[--n];
    return k;
}

/* Writes a metrics message for c->batch[0..n) into c->buf. 0 or -1. */
static int s_write_batch(s_conn *c, size_t n, long req)
{
    jz_trial *t = c->t;
    c->len = 0;
    if (s_reserve(c, 256 + strlen(t->token_json)))
        return -1;
    c->len +=
        (size_t)snprintf(c->buf, c->cap,
                         "{\"type\":\"metrics\",\"trial\":%ld,\"token\":%s,\"req\":%ld,"
                         "\"session\":\"%s\",\"points\":[",
                         t->trial_id, t->token_json, req, c->session);
    for (size_t i = 0; i < n; i++) {
        const jz__point *pt = &c->batch[i];
        const char *name = t->names[pt->name / JZ__NAME_CHUNK] +
                           (size_t)(pt->name % JZ__NAME_CHUNK) * JZ__NAME_LEN;
        if (s_reserve(c, JZ__NAME_LEN + 64))
            return -1;
        char *p = c->buf + c->len;
        *p++ = '[';
        p += s_write_long(p, pt->step);
        *p++ = ',';
        *p++ = '"';
        size_t nl = strlen(name);
        memcpy(p, name, nl);
        p += nl;
        *p++ = '"';
        *p++ = ',';
        double v = pt->value;
        if (isnan(v)) {
            memcpy(p, "\"nan\"", 5);
            p += 5;
        } else if (isinf(v)) {
            const char *s = v > 0 ? "\"inf\"" : "\"-inf\"";
            memcpy(p, s, strlen(s));
            p += strlen(s);
        } else {
            int k = snprintf(p, 32, "%.17g", v);
            /* keep it a JSON real (as jansson writes them): "3" -> "3.0",
               and "-0" would read back as the integer 0 */
            if (!memchr(p, '.', (size_t)k) && !memchr(p, 'e', (size_t)k)) {
                p[k++] = '.';
                p[k++] = '0';
            }
            p += k;
        }
        *p++ = ']';
        *p++ = ',';
        c->len = (size_t)(p - c->buf);
    }
    if (s_reserve(c, 4))
        return -1;
    if (c->buf[c->len - 1] == ',')
        c->len--;
    memcpy(c->buf + c->len, "]}", 3);
    c->len += 2;
    return 0;
}

/* Sends the next batch when one is due. */
static void s_maybe_batch(s_conn *c)
{
    jz_trial *t = c->t;
    double now = util_now();
    size_t n = 0;
    pthread_mutex_lock(&t->mu);
    if (t->npend > 0 && (t->npend >= JZ__BATCH_TRIGGER || t->flushing || t->stop ||
                         now - c->last_batch >= JZ__BATCH_EVERY)) {
        n = t->npend < JZ__BATCH_MAX ? t->npend : JZ__BATCH_MAX;
        /* and under JZ__BATCH_BYTES of JSON: the controller refuses more */
        size_t bytes = 512 + strlen(t->token_json);
        for (size_t i = 0; i < n; i++) {
            const jz__point *pt = &t->pend[i];
            bytes += JZ__POINT_BYTES +
                     strlen(t->names[pt->name / JZ__NAME_CHUNK] +
                            (size_t)(pt->name % JZ__NAME_CHUNK) * JZ__NAME_LEN);
            if (bytes > JZ__BATCH_BYTES) {
                n = i;
                break;
            }
        }
        if (n > c->capbatch) {
            size_t cap = c->capbatch ? c->capbatch : 1024;
            while (cap < n)
                cap *= 2;
            jz__point *b = realloc(c->batch, cap * sizeof *b);
            if (b) {
                c->batch = b;
                c->capbatch = cap;
            } else {
                n = c->capbatch;
            }
        }
        if (n == 0) {
            /* no batch buffer at all (out of memory): try again
               JZ__BATCH_EVERY from now, not on every wake-up (s_wait_ms) */
            c->last_batch = now;
        } else {
            memcpy(c->batch, t->pend, n * sizeof *t->pend);
            memmove(t->pend, t->pend + n, (t->npend - n) * sizeof *t->pend);
            t->npend -= n;
        }
    }
    pthread_mutex_unlock(&t->mu);
    if (n == 0)
        return;
    long req = c->next_req++;
    if (s_write_batch(c, n, req) != 0) {
        log_error("jizhi", "trial %ld: out of memory writing a batch of %zu points",
                  t->trial_id, n);
        pthread_mutex_lock(&t->mu);
        t->unacked_points -= (long)n;
        t->failed = 1;
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        return;
    }
    char *body = malloc(c->len);
    if (!body) {
        /* keep the buffer as the body; a new one is allocated next time */
        body = c->buf;
        c->buf = NULL;
        c->cap = 0;
    } else {
        memcpy(body, c->buf, c->len);
    }
    c->batch_inflight = 1;
    c->last_batch = now;
    s_track(c, R_METRICS, req, body, c->len, (long)n);
}

/* Resends what is unanswered and due: after 2-3 s, then 4-6, 8-12 and
   16-24 s for ever (util_backoff), so that a controller that is stopped
   or slow to answer is not sent more the longer it takes, and trials
   that lost their answers at once spread their resends. */
static void s_resend_due(s_conn *c)
{
    double now = util_now();
    for (size_t i = 0; i < c->nouts; i++) {
        s_out *o = &c->outs[i];
        if (now < o->due)
            continue;
        if (s_send_raw(c, o->body, o->len) == 0) {
            o->sends++;
            o->due =
                now + util_backoff(o->sends, JZ__RESEND_AFTER, JZ__RESEND_MAX, &c->rng);
            log_debug("jizhi", "trial %ld: resent %s req %ld", c->t->trial_id,
                      s_kind_names[o->kind], o->req);
        }
    }
}

/* ---- the thread ----------------------------------------------------------- */

/* A random hex id: the controller dedups resent batches per (session, req),
   so two helper instances of one trial (e.g. successive `jizhi report`
   processes) never shadow each other. */
static void s_session_id(char *out, size_t size)
{
    char hex[17];
    util_random_hex(hex, 8);
    snprintf(out, size, "%s", hex);
}

/* Milliseconds the thread may sleep in zmq_poll before something of its
   own is due: an outstanding request's resend, the heartbeat after
   JZ__HEARTBEAT_EVERY of silence, the next batch of queued points
   (JZ__BATCH_EVERY after the last, none while one is in flight). Messages
   from the controller and from the application (jz__wake: the first point
   queued after a batch, the JZ__BATCH_TRIGGER-th, a flush, an ack, close)
   wake it earlier. At most JZ__IDLE_MS: an idle trial's thread wakes about
   once a second, not every tick. */
static long s_wait_ms(s_conn *c, jz__state state)
{
    jz_trial *t = c->t;
    double now = util_now(), due = now + JZ__IDLE_MS / 1000.0;
    for (size_t i = 0; i < c->nouts; i++)
        if (c->outs[i].due < due)
            due = c->outs[i].due;
    if (state == JZ__CONNECTED) {
        if (c->last_send + JZ__HEARTBEAT_EVERY < due)
            due = c->last_send + JZ__HEARTBEAT_EVERY;
        pthread_mutex_lock(&t->mu);
        int pending = t->npend > 0;
        pthread_mutex_unlock(&t->mu);
        if (pending && !c->batch_inflight && c->last_batch + JZ__BATCH_EVERY < due)
            due = c->last_batch + JZ__BATCH_EVERY;
    }
    double ms = (due - now) * 1000.0;
    return ms <= 0 ? 0 : (long)ms + 1;
}

static void *s_run(void *arg)
{
    jz_trial *t = arg;
    prctl(PR_SET_NAME, "jz-conn"); /* so top and /proc tell it from the program's */
    s_conn c;
    memset(&c, 0, sizeof c);
    c.t = t;
    /* The controller dedups metrics on (session, highest persisted req).
       Requests are also numbered from the wall clock in microseconds
       (< 2^53), so even a controller that keyed on req alone would never
       take a new instance's batches for old ones. */
    c.next_req = (long)(util_wall() * 1e6);
    s_session_id(c.session, sizeof c.session);
    char seed[17];
    util_random_hex(seed, 8);
    c.rng = strtoull(seed, NULL, 16);
    c.sock = zmq_socket(t->zctx, ZMQ_DEALER);
    if (!c.sock) {
        log_error("jizhi", "trial %ld: cannot create a socket: %s", t->trial_id,
                  zmq_strerror(errno));
        return NULL;
    }
    wire_socket_setup(c.sock);
    int one = 1, hb_ivl = 1000, hb_timeout = 5000;
    /* queue only to live connections: nothing piles up while the controller
       is away (unacknowledged messages are resent anyway) */
    zmq_setsockopt(c.sock, ZMQ_IMMEDIATE, &one, sizeof one);
    zmq_setsockopt(c.sock, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof hb_ivl);
    zmq_setsockopt(c.sock, ZMQ_HEARTBEAT_TIMEOUT, &hb_timeout, sizeof hb_timeout);
    char kerr[600];
    if (keys_client_setup(c.sock, t->endpoint, NULL, kerr, sizeof kerr) != 0)
        log_error("jizhi", "trial %ld: %s", t->trial_id, kerr);
    else if (zmq_connect(c.sock, t->endpoint) != 0)
        log_error("jizhi", "trial %ld: cannot connect to %s: %s", t->trial_id,
                  t->endpoint, zmq_strerror(errno));
    c.last_batch = util_now();
    s_send_msg(&c, json_pack("{s:s, s:i}", "type", "hello", "pid", (int)t->pid), R_HELLO,
               1);

    jz__state state = JZ__CONNECTING;
    for (;;) {
        zmq_pollitem_t items[2] = {{c.sock, 0, ZMQ_POLLIN, 0},
                                   {NULL, t->wake_fd[0], ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, s_wait_ms(&c, state)) < 0 && errno == ETERM)
            break;
        if (items[1].revents & ZMQ_POLLIN) {
            char drain[64];
            while (read(t->wake_fd[0], drain, sizeof drain) > 0) {
            }
        }
        s_receive(&c);
        pthread_mutex_lock(&t->mu);
        t->polls++;
        int stop = t->stop;
        state = t->state;
        pthread_mutex_unlock(&t->mu);
        if (stop)
            break;
        if (state == JZ__REFUSED)
            continue;
        s_send_outbox(&c);
        if (state == JZ__CONNECTED && !c.batch_inflight)
            s_maybe_batch(&c);
        s_resend_due(&c);
        if (state == JZ__CONNECTED && util_now() - c.last_send >= JZ__HEARTBEAT_EVERY)
            s_send_msg(&c, json_pack("{s:s}", "type", "trial_heartbeat"), R_HELLO, 0);
    }
    zmq_close(c.sock);
    for (size_t i = 0; i < c.nouts; i++)
        free(c.outs[i].body);
    free(c.outs);
    free(c.seen);
    free(c.batch);
    free(c.buf);
    return NULL;
}

int jz__conn_start(jz_trial *t)
{
    t->zctx = zmq_ctx_new();
    if (!t->zctx)
        return -1;
    /* the thread takes no signals: they stay with the application */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&t->thread, NULL, s_run, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        zmq_ctx_term(t->zctx);
        t->zctx = NULL;
        return -1;
    }
    t->thread_started = 1;
    return 0;
}

void jz__conn_stop(jz_trial *t)
{
    if (t->thread_started) {
        pthread_mutex_lock(&t->mu);
        t->stop = 1;
        pthread_mutex_unlock(&t->mu);
        jz__wake(t);
        pthread_join(t->thread, NULL);
        t->thread_started = 0;
    }
    if (t->zctx) {
        zmq_ctx_term(t->zctx);
        t->zctx = NULL;
    }
}
