/*  jz_trial.c - libjizhi's public API (jizhi.h): the application side.

    jz_open reads the trial environment and, inside a study, starts the
    connection thread (jz_conn.c) and waits briefly for the answer to
    `hello` so the first parameter reads see the controller's current
    values. jz_report appends to a queue under a mutex and never touches
    the network; jz_poll takes instructions the thread has received and
    applies SET and LOAD to the params table, which only this side touches
    (so strings returned by jz_param_str stay valid until the next jz_poll).
    Standalone (JIZHI_TRIAL unset) nothing is started: reports go to stderr.
    A rank other than 0 of a multi-rank trial (JIZHI_RANK > 0, set by the
    dispatcher's torch launcher) is a follower: it never connects (only
    rank 0 talks to the controller), reads JIZHI_PARAMS, drops its reports
    silently and polls nothing; jizhi.torch gives it rank 0's instructions.
*/
#include "jz_internal.h"

#include "common/log.h"
#include "common/util.h"
#include "common/wire.h"
#include "common/spec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define S_CLOSE_TIMEOUT_MS 10000
#define S_HELLO_TIMEOUT_MS 1000

/* ---- environment ---------------------------------------------------------- */

/* jz_open_as: the values it gives, in place of the environment's, for the
   thread that opens ({name, value} pairs, NULL-ended; a NULL value is
   unset). */
static __thread const char *const *s_given;

static const char *s_env(const char *name)
{
    for (const char *const *g = s_given; g && *g; g += 2)
        if (!strcmp(g[0], name))
            return g[1] && *g[1] ? g[1] : NULL;
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* Reads a non-negative integer variable. 0 or -1 (message printed). */
static int s_env_ms(const char *name, int dflt, int *out)
{
    const char *v = s_env(name);
    *out = dflt;
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < 0 || x > INT_MAX) {
        fprintf(stderr, "jizhi: %s: expected a number of milliseconds, got '%s'\n", name,
                v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static void s_free(jz_trial *t)
{
    if (!t)
        return;
    json_decref(t->params);
    json_decref(t->touched);
    free(t->params_text);
    free(t->endpoint);
    free(t->study);
    free(t->token);
    free(t->token_json);
    free(t->ckdir);
    free(t->htab);
    for (size_t i = 0; i < JZ__NAME_CHUNKS; i++)
        free(t->names[i]);
    free(t->pend);
    json_decref(t->outbox);
    for (size_t i = t->inq_head; i < t->ninq; i++)
        jz__pending_ins_fini(&t->inq[i]);
    free(t->inq);
    json_decref(t->hello_params);
    if (t->wake_fd[0] >= 0)
        close(t->wake_fd[0]);
    if (t->wake_fd[1] >= 0)
        close(t->wake_fd[1]);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

/* Applies params from the hello reply, if any arrived. App thread. */
static void s_take_hello_params(jz_trial *t)
{
    pthread_mutex_lock(&t->mu);
    json_t *hp = t->hello_params;
    t->hello_params = NULL;
    pthread_mutex_unlock(&t->mu);
    if (hp) {
        const char *k;
        json_t *v;
        json_object_foreach(hp, k, v) if (!json_object_get(t->touched, k))
            json_object_set(t->params, k, v);
        json_decref(hp);
        free(t->params_text);
        t->params_text = NULL;
    }
}

jz_trial *jz_open(void)
{
    jz_trial *t = calloc(1, sizeof *t);
    if (!t) {
        fprintf(stderr, "jizhi: out of memory\n");
        return NULL;
    }
    t->wake_fd[0] = t->wake_fd[1] = -1;
    t->trial_id = -1;
    t->pid = getpid();
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    t->outbox = json_array();
    t->touched = json_object();

    const char *params = s_env("JIZHI_PARAMS");
    if (params) {
        json_error_t jerr;
        t->params = json_loads(params, JSON_REJECT_DUPLICATES, &jerr);
        if (!t->params) {
            fprintf(stderr, "jizhi: JIZHI_PARAMS: invalid JSON: %s (column %d)\n",
                    jerr.text, jerr.column);
            goto fail;
        }
        if (!json_is_object(t->params)) {
            fprintf(stderr, "jizhi: JIZHI_PARAMS: expected a JSON object\n");
            goto fail;
        }
    } else {
        t->params = json_object();
    }
    const char *ck = s_env("JIZHI_CHECKPOINT_DIR");
    t->ckdir = strdup(ck ? ck : ".");
    const char *study = s_env("JIZHI_STUDY");
    t->study = study ? strdup(study) : NULL;
    if (s_env_ms("JIZHI_CLOSE_TIMEOUT_MS", S_CLOSE_TIMEOUT_MS, &t->close_timeout_ms) ||
        s_env_ms("JIZHI_HELLO_TIMEOUT_MS", S_HELLO_TIMEOUT_MS, &t->hello_timeout_ms))
        goto fail;
    if (!t->params || !t->outbox || !t->touched || !t->ckdir) {
        fprintf(stderr, "jizhi: out of memory\n");
        goto fail;
    }

    const char *trial = s_env("JIZHI_TRIAL");
    if (!trial) {
        t->standalone = 1;
        return t;
    }
    char *end;
    errno = 0;
    long id = strtol(trial, &end, 10);
    if (errno || *end || id < 0) {
        fprintf(stderr,
                "jizhi: JIZHI_TRIAL: expected a trial id (an integer), got '%s'\n",
                trial);
        goto fail;
    }
    t->trial_id = id;
    const char *rank = s_env("JIZHI_RANK");
    if (rank) {
        errno = 0;
        long r = strtol(rank, &end, 10);
        if (errno || *end || r < 0) {
            fprintf(stderr,
                    "jizhi: JIZHI_RANK: expected a rank (an integer >= 0), "
                    "got '%s'\n",
                    rank);
            goto fail;
        }
        if (r > 0) { /* only rank 0 talks to the controller */
            t->standalone = t->follower = 1;
            return t;
        }
    }
    const char *endpoint = s_env("JIZHI_ENDPOINT");
    const char *token = s_env("JIZHI_TOKEN");
    if (!endpoint) {
        fprintf(stderr, "jizhi: JIZHI_ENDPOINT: must be set when JIZHI_TRIAL is\n");
        goto fail;
    }
    if (!token) {
        fprintf(stderr, "jizhi: JIZHI_TOKEN: must be set when JIZHI_TRIAL is\n");
        goto fail;
    }
    t->endpoint = strdup(endpoint);
    t->token = strdup(token);
    json_t *tok = json_string(token);
    t->token_json = tok ? json_dumps(tok, JSON_ENCODE_ANY) : NULL;
    json_decref(tok);
    if (!t->endpoint || !t->token || !t->token_json) {
        fprintf(stderr, "jizhi: JIZHI_TOKEN: must be UTF-8 text\n");
        goto fail;
    }
    if (pipe(t->wake_fd) != 0) {
        t->wake_fd[0] = t->wake_fd[1] = -1;
        fprintf(stderr, "jizhi: cannot create a pipe: %s\n", strerror(errno));
        goto fail;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(t->wake_fd[i], F_SETFL, fcntl(t->wake_fd[i], F_GETFL) | O_NONBLOCK);
        fcntl(t->wake_fd[i], F_SETFD, FD_CLOEXEC);
    }
    if (jz__conn_start(t) != 0) {
        fprintf(stderr, "jizhi: cannot start the connection thread\n");
        goto fail;
    }
    /* Wait for the hello reply so params are the controller's current ones. */
    struct timespec dl = util_deadline(t->hello_timeout_ms);
    pthread_mutex_lock(&t->mu);
    while (t->state == JZ__CONNECTING)
        if (pthread_cond_timedwait(&t->cv, &t->mu, &dl) == ETIMEDOUT)
            break;
    jz__state st = t->state;
    pthread_mutex_unlock(&t->mu);
    if (st == JZ__CONNECTING)
        log_warn("jizhi",
                 "trial %ld: no answer from %s yet; continuing with JIZHI_PARAMS", id,
                 endpoint);
    s_take_hello_params(t);
    return t;

fail:
    jz__conn_stop(t);
    s_free(t);
    return NULL;
}

jz_trial *jz_open_as(const char *endpoint, long trial, const char *token,
                     const char *params_json, const char *checkpoint_dir)
{
    if (!endpoint || trial < 0 || !token) {
        fprintf(stderr, "jizhi: jz_open_as: needs an endpoint, a trial id and a token\n");
        return NULL;
    }
    char id[32];
    snprintf(id, sizeof id, "%ld", trial);
    const char *const given[] = {"JIZHI_ENDPOINT",
                                 endpoint,
                                 "JIZHI_TRIAL",
                                 id,
                                 "JIZHI_TOKEN",
                                 token,
                                 "JIZHI_PARAMS",
                                 params_json,
                                 "JIZHI_CHECKPOINT_DIR",
                                 checkpoint_dir,
                                 "JIZHI_RANK",
                                 NULL,
                                 "JIZHI_STUDY",
                                 NULL,
                                 NULL};
    s_given = given;
    jz_trial *t = jz_open();
    s_given = NULL;
    return t;
}

/* ---- params --------------------------------------------------------------- */

/* The value of param `name` (borrowed), NULL when absent or not asked
   properly. */
static json_t *s_param(jz_trial *t, const char *name)
{
    return t && name ? json_object_get(t->params, name) : NULL;
}

double jz_param_double(jz_trial *t, const char *name, double dflt)
{
    double x; /* a number, or the wire spelling of a non-finite one */
    return wire_to_double(s_param(t, name), &x) == 0 ? x : dflt;
}

long jz_param_long(jz_trial *t, const char *name, long dflt)
{
    json_t *v = s_param(t, name);
    if (json_is_integer(v))
        return (long)json_integer_value(v);
    if (json_is_real(v)) { /* 256.0 is an integer; 0.5 is not */
        double x = json_real_value(v);
        if (x == floor(x) && fabs(x) < 9.2e18)
            return (long)x;
    }
    return dflt;
}

const char *jz_param_str(jz_trial *t, const char *name, const char *dflt)
{
    const char *s = json_string_value(s_param(t, name));
    return s ? s : dflt;
}

const char *jz_params_json(jz_trial *t)
{
    if (!t)
        return NULL;
    if (!t->params_text)
        t->params_text = json_dumps(t->params, JSON_COMPACT | JSON_SORT_KEYS);
    return t->params_text;
}

/* ---- acknowledgements ----------------------------------------------------- */

/* Queues a message for the thread to send (takes ownership). 0 or -1. */
static int s_post(jz_trial *t, json_t *msg)
{
    if (!msg)
        return -1;
    pthread_mutex_lock(&t->mu);
    if (t->state == JZ__REFUSED) {
        pthread_mutex_unlock(&t->mu);
        json_decref(msg);
        return -1;
    }
    int rc = json_array_append_new(t->outbox, msg);
    if (rc == 0)
        t->unacked_msgs++;
    pthread_mutex_unlock(&t->mu);
    jz__wake(t);
    return rc;
}

/* Has the thread send queued points at once and waits until the
   controller acknowledged them as persisted (and the queued messages too
   when `msgs`), the controller refused the trial, or `timeout_ms` passed.
   0 when all were acknowledged, else -1. */
static int s_wait_persisted(jz_trial *t, int timeout_ms, int msgs)
{
    struct timespec dl = util_deadline(timeout_ms > 0 ? timeout_ms : 0);
    pthread_mutex_lock(&t->mu);
    t->flushing++;
    pthread_mutex_unlock(&t->mu);
    jz__wake(t);
    pthread_mutex_lock(&t->mu);
    while (t->state != JZ__REFUSED &&
           (t->unacked_points > 0 || (msgs && t->unacked_msgs > 0)))
        if (pthread_cond_timedwait(&t->cv, &t->mu, &dl) == ETIMEDOUT)
            break;
    int done = t->unacked_points == 0 && (!msgs || t->unacked_msgs == 0) && !t->failed;
    t->flushing--;
    pthread_mutex_unlock(&t->mu);
    return done ? 0 : -1;
}

static int s_send_ack(jz_trial *t, long id, int applied, const char *detail)
{
    json_t *m = json_pack("{s:s, s:I, s:b}", "type", "ins_ack", "id", (json_int_t)id,
                          "applied", applied ? 1 : 0);
    if (m && detail)
        json_object_set_new(m, "detail", json_string(detail));
    return s_post(t, m);
}

/* The program polled a pause and called the helper again without handling
   it: the helper carries the pause out, so that its acknowledgement is true.
   Acknowledges the pause, then blocks until a resume or a stop is queued
   (both stay queued for the program's jz_poll, so a program that kept its
   own paused flag sees the resume), or the controller refuses the trial.
   Reports keep being sent meanwhile. */
static void s_pause(jz_trial *t)
{
    s_send_ack(t, t->open_id, 1,
               "paused by the helper: the program did not acknowledge pause");
    pthread_mutex_lock(&t->mu);
    while (t->state != JZ__REFUSED && !t->stop) {
        size_t i;
        for (i = t->inq_head; i < t->ninq; i++)
            if (t->inq[i].ins.kind == JZ_INS_RESUME || t->inq[i].ins.kind == JZ_INS_STOP)
                break;
        if (i < t->ninq)
            break;
        struct timespec dl = util_deadline(200);
        pthread_cond_timedwait(&t->cv, &t->mu, &dl);
    }
    pthread_mutex_unlock(&t->mu);
}

/* What the call that settles an open instruction says of the program. */
typedef enum {
    S_CALL,     /* jz_poll, jz_flush, jz_checkpoint_done: nothing about a stop */
    S_PROGRESS, /* jz_report: the program went on */
    S_CLOSE     /* jz_close: the program stopped */
} s_call;

/* Settles the instruction jz_poll returned last when the program did not
   call jz_ack, acknowledging only what is true. SET (the helper's params
   hold the new value) and RESUME (the program runs) count as applied; a
   CHECKPOINT only when jz_checkpoint_done was called; an unhandled PAUSE is
   carried out here (see s_pause); a LOAD needs the program's own jz_ack. A
   STOP is held until the program shows what it did: a report after it
   (it went on: refused) or jz_close (it stopped: applied). A program that
   polls again to drain the queue, flushes or writes a last checkpoint has
   not gone on. Called at every entry point but jz_ack. */
static void s_settle(jz_trial *t, s_call call)
{
    if (t->open_ins) {
        t->open_ins = 0;
        switch (t->open_kind) {
        case JZ_INS_SET:
        case JZ_INS_RESUME:
            s_send_ack(t, t->open_id, 1, NULL);
            break;
        case JZ_INS_STOP:
            /* an earlier held stop stays unacknowledged: the controller
               resolves it when the trial ends */
            t->held_stop = t->open_id;
            break;
        case JZ_INS_CHECKPOINT:
            s_send_ack(t, t->open_id, t->open_ckpt_done,
                       t->open_ckpt_done ? NULL : "the program wrote no checkpoint");
            break;
        case JZ_INS_PAUSE:
            if (call == S_CLOSE)
                s_send_ack(t, t->open_id, 0, "the trial closed");
            else
                s_pause(t);
            break;
        default:
            s_send_ack(t, t->open_id, 0, "the program did not acknowledge it (jz_ack)");
        }
    }
    if (t->held_stop && call != S_CALL) {
        s_send_ack(t, t->held_stop, call == S_CLOSE,
                   call == S_CLOSE ? NULL : "the program went on after stop");
        t->held_stop = 0;
    }
}

int jz_ack(jz_trial *t, const jz_instruction *ins, int applied, const char *detail)
{
    if (!t || !ins)
        return -1;
    if (t->standalone)
        return 0;
    if (t->held_stop && ins->id == t->held_stop) {
        t->held_stop = 0;
        return s_send_ack(t, ins->id, applied, detail);
    }
    if (!t->open_ins || ins->id != t->open_id)
        return -1; /* unknown, or acknowledged already */
    t->open_ins = 0;
    /* a load moves the trial to another step: what it reported before is
       persisted before the controller learns of the load (bounded: a slow
       controller delays the acknowledgement, never the order of the rest) */
    if (applied && t->open_kind == JZ_INS_LOAD)
        s_wait_persisted(t, JZ__LOAD_DRAIN_MS, 0);
    return s_send_ack(t, ins->id, applied, detail);
}

/* ---- reports -------------------------------------------------------------- */

static int s_valid_metric(const char *s)
{
    if (!s || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
        return 0;
    size_t n = 0;
    for (const char *p = s; *p; p++, n++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
              (*p >= '0' && *p <= '9') || *p == '_' || *p == '.'))
            return 0;
    return n < JZ__NAME_LEN;
}

static uint32_t s_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static const char *s_name(const jz_trial *t, uint32_t i)
{
    return t->names[i / JZ__NAME_CHUNK] + (size_t)(i % JZ__NAME_CHUNK) * JZ__NAME_LEN;
}

/* The index of metric `name` in the name table, added when new. -1 when
   the name is invalid or the table is full. */
static long s_intern(jz_trial *t, const char *name)
{
    if (!name)
        return -1;
    uint32_t h = s_hash(name);
    if (t->hcap) {
        for (size_t i = h & (t->hcap - 1);; i = (i + 1) & (t->hcap - 1)) {
            uint32_t e = t->htab[i];
            if (!e)
                break;
            if (!strcmp(s_name(t, e - 1), name))
                return (long)(e - 1);
        }
    }
    if (!s_valid_metric(name) || t->nnames >= JZ__NAME_CHUNK * JZ__NAME_CHUNKS)
        return -1;
    if (2 * (t->nnames + 1) > t->hcap) { /* grow and rehash */
        size_t cap = t->hcap ? 2 * t->hcap : 64;
        uint32_t *tab = calloc(cap, sizeof *tab);
        if (!tab)
            return -1;
        for (uint32_t k = 0; k < t->nnames; k++) {
            size_t i = s_hash(s_name(t, k)) & (cap - 1);
            while (tab[i])
                i = (i + 1) & (cap - 1);
            tab[i] = k + 1;
        }
        free(t->htab);
        t->htab = tab;
        t->hcap = cap;
    }
    uint32_t idx = t->nnames;
    if (!t->names[idx / JZ__NAME_CHUNK]) {
        t->names[idx / JZ__NAME_CHUNK] = malloc(JZ__NAME_CHUNK * JZ__NAME_LEN);
        if (!t->names[idx / JZ__NAME_CHUNK])
            return -1;
    }
    snprintf((char *)s_name(t, idx), JZ__NAME_LEN, "%s", name);
    size_t i = h & (t->hcap - 1);
    while (t->htab[i])
        i = (i + 1) & (t->hcap - 1);
    t->htab[i] = idx + 1;
    t->nnames++;
    return (long)idx;
}

int jz_report(jz_trial *t, long step, const char *metric, double value)
{
    if (!t)
        return -1;
    if (t->standalone) {
        if (!s_valid_metric(metric))
            return -1;
        if (t->follower)
            return 0; /* rank 0 reports for the trial */
        char v[32];
        jz__fmt_double(v, sizeof v, value);
        fprintf(stderr, "jizhi: step %ld %s=%s\n", step, metric, v);
        return 0;
    }
    s_settle(t, S_PROGRESS);
    long idx = s_intern(t, metric);
    if (idx < 0)
        return -1;
    int wake = 0, rc = 0;
    pthread_mutex_lock(&t->mu);
    if (t->state == JZ__REFUSED || t->unacked_points >= JZ__QUEUE_MAX) {
        rc = -1;
    } else {
        if (t->npend == t->cappend) {
            size_t cap = t->cappend ? 2 * t->cappend : 4096;
            jz__point *p = realloc(t->pend, cap * sizeof *p);
            if (!p) {
                pthread_mutex_unlock(&t->mu);
                return -1;
            }
            t->pend = p;
            t->cappend = cap;
        }
        t->pend[t->npend++] = (jz__point){step, value, (uint32_t)idx};
        t->unacked_points++;
        /* the thread sleeps until something is due (jz_conn.c s_wait_ms):
           the first point after a batch starts the batch's clock, the
           JZ__BATCH_TRIGGER-th sends at once */
        wake = t->npend == 1 || t->npend == JZ__BATCH_TRIGGER;
    }
    pthread_mutex_unlock(&t->mu);
    if (wake)
        jz__wake(t);
    return rc;
}

/* ---- instructions --------------------------------------------------------- */

/* Takes the oldest instruction not polled yet into *p (the caller owns
   it then: jz__pending_ins_fini): 1, or 0 when none waits. */
static int s_next_ins(jz_trial *t, jz__pending_ins *p)
{
    int got = 0;
    pthread_mutex_lock(&t->mu);
    if (t->inq_head < t->ninq) {
        *p = t->inq[t->inq_head++];
        got = 1;
    }
    pthread_mutex_unlock(&t->mu);
    return got;
}

int jz_poll(jz_trial *t, jz_instruction *out)
{
    if (!t || !out)
        return -1;
    memset(out, 0, sizeof *out);
    out->kind = JZ_INS_NONE;
    out->value = NAN;
    if (t->standalone)
        return 0;
    s_settle(t, S_CALL);
    s_take_hello_params(t);
    jz__pending_ins p;
    if (!s_next_ins(t, &p))
        return 0;
    if (p.ins.kind == JZ_INS_SET && p.value) {
        json_object_set(t->params, p.ins.name, p.value);
        json_object_set_new(t->touched, p.ins.name, json_true());
    } else if (p.ins.kind == JZ_INS_LOAD && p.params) {
        json_object_update(t->params, p.params);
        const char *k;
        json_t *v;
        json_object_foreach(p.params, k, v)
            json_object_set_new(t->touched, k, json_true());
    }
    if (p.value || p.params) {
        free(t->params_text);
        t->params_text = NULL;
    }
    jz__pending_ins_fini(&p);
    *out = p.ins;
    t->open_ins = 1;
    t->open_id = p.ins.id;
    t->open_kind = p.ins.kind;
    t->open_ckpt_done = 0;
    return 1;
}

/* ---- checkpoints ---------------------------------------------------------- */

const char *jz_checkpoint_dir(jz_trial *t)
{
    if (!t)
        return NULL;
    if (!t->ckdir_made) {
        t->ckdir_made = 1;
        if (util_mkdirs(t->ckdir, 0700) != 0)
            log_warn("jizhi", "cannot create checkpoint directory %s: %s", t->ckdir,
                     strerror(errno));
    }
    return t->ckdir;
}

int jz_checkpoint_done(jz_trial *t, long step, const char *path)
{
    if (!t || !path)
        return -1;
    if (t->standalone) {
        if (!t->follower)
            fprintf(stderr, "jizhi: step %ld checkpoint=%s\n", step, path);
        return 0;
    }
    t->open_ckpt_done = 1;
    s_settle(t, S_CALL);
    return s_post(t, json_pack("{s:s, s:I, s:s}", "type", "checkpoint_done", "step",
                               (json_int_t)step, "path", path));
}

/* ---- flush and close ------------------------------------------------------ */

int jz_flush(jz_trial *t, int timeout_ms)
{
    if (!t)
        return -1;
    if (t->standalone)
        return 0;
    s_settle(t, S_CALL);
    return s_wait_persisted(t, timeout_ms, 1);
}

long jz_trial_id(const jz_trial *t)
{
    return t ? t->trial_id : -1;
}

unsigned long jz_instruction_size(void)
{
    return (unsigned long)sizeof(jz_instruction);
}

void jz_close(jz_trial **tp)
{
    if (!tp || !*tp)
        return;
    jz_trial *t = *tp;
    *tp = NULL;
    if (t->standalone) {
        s_free(t);
        return;
    }
    if (getpid() != t->pid) {
        /* a forked child: the thread and the socket belong to the parent */
        t->thread_started = 0;
        t->zctx = NULL;
        s_free(t);
        return;
    }
    s_settle(t, S_CLOSE);
    /* instructions never polled were not applied: say so */
    jz__pending_ins p;
    while (s_next_ins(t, &p)) {
        s_send_ack(t, p.ins.id, 0, "the trial closed before polling it");
        jz__pending_ins_fini(&p);
    }
    if (jz_flush(t, t->close_timeout_ms) != 0) {
        pthread_mutex_lock(&t->mu);
        long lost = t->unacked_points;
        pthread_mutex_unlock(&t->mu);
        if (lost > 0)
            log_warn("jizhi", "trial %ld: closing with %ld reports not acknowledged",
                     t->trial_id, lost);
    }
    jz__conn_stop(t);
    s_free(t);
}
