/*  disp_recv.c - what a dispatcher receives from the controller
    (docs/PROTOCOL.md, dispatcher section): every message is decoded once
    through the schema (common/msg.h) and dispatched by its type to a
    handler here: `start` (slots, GPUs, log folders, the backend's start),
    `kill`, `disown`, `read_log` (a chunk of a trial's log, answered with
    `log_data`) and the replies to what it sent (`ok`, `error`: registered,
    a report answered, back to REGISTERING on unknown_dispatcher).
*/
#define _GNU_SOURCE
#include "disp.h"
#include "disp_int.h"
#include "disp_core.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/wire.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

/* ---- trials ------------------------------------------------------------- */

/* Picks `want` free GPUs into a new array; NULL when there are not enough
   (or want is 0). */
static int *s_pick_gpus(disp_t *d, int want, int *nfree)
{
    int *out = want > 0 ? calloc((size_t)want, sizeof *out) : NULL;
    int k = 0;
    *nfree = 0;
    for (int g = 0; g < d->ngpus; g++) {
        int busy = 0;
        for (size_t i = 0; i < d->nprocs && !busy; i++)
            for (int j = 0; j < d->procs[i]->ngpus; j++)
                if (d->procs[i]->gpus[j] == d->gpus[g])
                    busy = 1;
        if (busy)
            continue;
        ++*nfree;
        if (out && k < want)
            out[k++] = d->gpus[g];
    }
    if (k < want) {
        free(out);
        return NULL;
    }
    return out;
}

static void s_on_start(disp_t *d, json_t *msg)
{
    disp__start st;
    int have_ids;
    char err[512];
    if (disp__parse_start(msg, &st, &have_ids, err, sizeof err) != 0) {
        log_warn(TAG, "refusing malformed start: %s", err);
        if (have_ids) {
            char why[600];
            snprintf(why, sizeof why, "malformed start: %s", err);
            disp__report_start_failed(d, st.trial, st.attempt, why);
        }
        return;
    }
    for (size_t i = 0; i < d->nprocs; i++)
        if (d->procs[i]->trial == st.trial && d->procs[i]->attempt == st.attempt) {
            log_info(TAG, "trial %ld.%ld: start repeated while it runs; ignored",
                     st.trial, st.attempt);
            return;
        }
    if (disp__is_done(d, st.trial, st.attempt)) {
        log_warn(TAG, "trial %ld.%ld: start repeated after it ended; ignored", st.trial,
                 st.attempt);
        return;
    }
    int in_use = 0; /* a slot per rank */
    for (size_t i = 0; i < d->nprocs; i++)
        in_use += d->procs[i]->ranks > 0 ? d->procs[i]->ranks : 1;
    if (in_use + st.ranks > d->slots) {
        if (st.ranks > 1)
            snprintf(err, sizeof err, "no free slots for %d ranks (%d of %d in use)",
                     st.ranks, in_use, d->slots);
        else
            snprintf(err, sizeof err, "no free slot (%d of %d in use)", in_use, d->slots);
        disp__report_start_failed(d, st.trial, st.attempt, err);
        return;
    }
    int nfree = 0, want = st.gpus * st.ranks;
    int *gpus = s_pick_gpus(d, want, &nfree);
    if (want > 0 && !gpus) {
        if (want > d->ngpus)
            snprintf(err, sizeof err, "needs %d GPUs, this dispatcher has %d", want,
                     d->ngpus);
        else
            snprintf(err, sizeof err, "no free GPU (needs %d, %d free)", want, nfree);
        disp__report_start_failed(d, st.trial, st.attempt, err);
        return;
    }

    /* <log_dir>/<study>/, and a default checkpoint dir beside the logs; what
       it creates is this user's only (0700): trials' output and weights */
    char *root = disp__abs(st.log_dir ? st.log_dir : d->log_dir);
    char *study = disp__path_component(st.study);
    char *dir = root && study ? util_strf("%s/%s", root, study) : NULL;
    char *ckpt = NULL;
    char *cuda = NULL;
    size_t cuda_len = 1 + (size_t)want * 8;
    if (!json_object_get(st.env, "JIZHI_CHECKPOINT_DIR") && dir)
        ckpt = util_strf("%s/checkpoints/trial-%ld", dir, st.trial);
    cuda = calloc(1, cuda_len);
    if (!dir || !cuda) {
        disp__report_start_failed(d, st.trial, st.attempt, "out of memory");
        goto out;
    }
    if (util_mkdirs(dir, 0700) != 0) {
        snprintf(err, sizeof err, "cannot create log directory %s: %s", dir,
                 strerror(errno));
        disp__report_start_failed(d, st.trial, st.attempt, err);
        goto out;
    }
    if (ckpt && util_mkdirs(ckpt, 0700) != 0) {
        log_warn(TAG, "cannot create %s: %s", ckpt, strerror(errno));
        free(ckpt);
        ckpt = NULL;
    }
    /* a checkpoint dir chosen by the controller lives on this machine too */
    const char *given =
        json_string_value(json_object_get(st.env, "JIZHI_CHECKPOINT_DIR"));
    if (given && given[0] == '/' && util_mkdirs(given, 0700) != 0)
        log_warn(TAG, "cannot create %s: %s", given, strerror(errno));
    for (int i = 0; i < want; i++) {
        size_t n = strlen(cuda);
        snprintf(cuda + n, cuda_len - n, "%s%d", i ? "," : "", gpus[i]);
    }

    if (d->nprocs == d->cap) {
        disp__proc **np = realloc(d->procs, (d->cap * 2 + 8) * sizeof *np);
        if (!np) {
            disp__report_start_failed(d, st.trial, st.attempt, "out of memory");
            goto out;
        }
        d->procs = np;
        d->cap = d->cap * 2 + 8;
    }
    disp__proc *p = calloc(1, sizeof *p);
    if (!p) {
        disp__report_start_failed(d, st.trial, st.attempt, "out of memory");
        goto out;
    }
    disp__spawn_args a = {&st,
                          dir,
                          d->trial_endpoint,
                          ckpt,
                          d->name,
                          cuda,
                          d->kill_on_stop,
                          d->trial_key,
                          .kill_grace_s = d->kill_grace_s};
    if (d->be->ops->start(d->be, &a, p, err, sizeof err) != 0) {
        free(p);
        disp__report_start_failed(d, st.trial, st.attempt, err);
        goto out;
    }
    p->gpus = gpus;
    p->ngpus = want;
    p->ranks = st.ranks;
    memcpy(p->tag, st.tag, sizeof p->tag);
    gpus = NULL;
    p->t_start = util_now();
    p->timeout_s = st.timeout_s; /* the clock starts when it runs */
    d->procs[d->nprocs++] = p;
    log_info(TAG, "trial %ld.%ld: %s %d: %s (logs %s/trial-%ld.%ld.*, gpus %s)", st.trial,
             st.attempt, d->be->ops->id_word, (int)p->pid, p->argv0, dir, st.trial,
             st.attempt, cuda[0] ? cuda : "none");
out:
    free(gpus);
    free(root);
    free(study);
    free(dir);
    free(ckpt);
    free(cuda);
}

static void s_on_kill(disp_t *d, json_t *msg)
{
    long trial, attempt;
    const char *reason;
    char err[256];
    if (disp__parse_kill(msg, &trial, &attempt, &reason, err, sizeof err) != 0) {
        log_warn(TAG, "refusing malformed kill: %s", err);
        return;
    }
    int found = 0;
    for (size_t i = 0; i < d->nprocs; i++) {
        disp__proc *p = d->procs[i];
        if (p->trial == trial && (attempt < 0 || p->attempt == attempt)) {
            found = 1;
            disp__terminate(d, p, "killed", reason);
        }
    }
    if (!found)
        log_info(TAG, "kill: trial %ld.%ld is not running here", trial, attempt);
}

/* The controller says a trial attempt listed here is not its own (a Slurm
   job of another store, taken back under the same dispatcher name): a job
   taken back is forgotten and left running, one started here is ended. */
static void s_on_disown(disp_t *d, json_t *msg)
{
    long trial, attempt;
    const char *reason;
    char err[256];
    const char *tag = json_string_value(json_object_get(msg, "tag"));
    if (disp__parse_kill(msg, &trial, &attempt, &reason, err, sizeof err) != 0 || !tag) {
        log_warn(TAG, "refusing malformed disown: %s",
                 tag ? err : "field 'tag': expected a string");
        return;
    }
    for (size_t i = 0; i < d->nprocs; i++) {
        disp__proc *p = d->procs[i];
        if (p->trial != trial || p->attempt != attempt || strcmp(p->tag, tag))
            continue;
        if (!p->adopted) {
            disp__terminate(d, p, "killed", reason);
            continue;
        }
        log_warn(TAG, "trial %ld.%ld (%s %d): %s; left running, no longer watched", trial,
                 attempt, d->be->ops->id_word, (int)p->pid, reason ? reason : "disowned");
        d->be->ops->fini(d->be, p);
        free(p);
        memmove(&d->procs[i], &d->procs[i + 1], (d->nprocs - i - 1) * sizeof *d->procs);
        d->nprocs--;
        i--;
    }
}

static int s_is_reg_req(const disp_t *d, long req)
{
    for (int i = 0; i < DISP_REG_RING; i++)
        if (d->reg_reqs[i] == req && req != 0)
            return 1;
    return 0;
}

void disp__warn_unanswered(disp_t *d, double now)
{
    if (!d->asked_since || now < d->unanswered_warn)
        return;
    double waited = now - d->asked_since;
    log_warn(TAG,
             "no answer from the controller at %s for %.*f s (is it running? are the "
             "endpoint and its key right?); still trying",
             d->endpoint, waited < 10 ? 1 : 0, waited);
    d->unanswered_warn = now + DISP_UNANSWERED_REPEAT * d->unanswered_s;
    d->unanswered_warned = 1;
}

/* The controller spoke: the wait for its answer is over (said when it was
   warned of). */
static void s_heard(disp_t *d)
{
    d->last_heard = util_now();
    double waited = d->last_heard - d->asked_since;
    if (d->asked_since && d->unanswered_warned)
        log_info(TAG, "the controller at %s answered, after %.*f s", d->endpoint,
                 waited < 10 ? 1 : 0, waited);
    d->asked_since = 0;
    d->unanswered_warned = 0;
}

void disp__to_registering(disp_t *d, const char *why)
{
    if (d->ready)
        log_warn(TAG, "re-registering with %s: %s", d->endpoint, why);
    d->ready = 0;
    d->last_reg = -INFINITY;
}

static void s_on_reply(disp_t *d, const json_t *msg, int ok)
{
    long req;
    char err[128];
    if (wire_get_long(msg, "req", &req, err, sizeof err) != 0) {
        log_warn(TAG, "ignoring %s reply: %s", ok ? "ok" : "error", err);
        return;
    }
    const char *code = "", *text = "";
    if (!ok) {
        wire_get_str(msg, "code", &code, err, sizeof err);
        wire_get_str(msg, "message", &text, err, sizeof err);
    }
    if (s_is_reg_req(d, req)) {
        if (ok && !d->ready) {
            log_info(TAG, "registered with %s as %s (%d slots, %d GPUs, %d running)",
                     d->endpoint, d->name, d->slots, d->ngpus, (int)d->nprocs);
            d->ready = 1;
            d->reg_backoff = 0;
            d->last_hb = util_now();
            disp__send_reports(d, util_now(), 1);
        } else if (!ok) {
            /* a refusal (a key or role the controller does not accept) stands
               until its authorized keys change: ask again ever more slowly */
            d->reg_backoff = d->reg_backoff > 0 ? 2 * d->reg_backoff : d->resend_s;
            if (d->reg_backoff > DISP_REG_BACKOFF_MAX)
                d->reg_backoff = DISP_REG_BACKOFF_MAX;
            log_warn(TAG, "register refused: %s: %s; asking again in %.0f s", code, text,
                     d->resend_s + d->reg_backoff);
        }
        return;
    }
    for (disp__report **rp = &d->reports; *rp; rp = &(*rp)->next) {
        disp__report *r = *rp;
        if (r->req != req)
            continue;
        if (!ok) {
            const char *type = wire_type(r->msg);
            if (!strcmp(code, "unknown_dispatcher") || !strcmp(code, "internal") ||
                !strcmp(code, "timeout")) {
                log_warn(TAG, "%s report %ld: %s: %s; will resend", type, req, code,
                         text);
                if (!strcmp(code, "unknown_dispatcher"))
                    disp__to_registering(d, "controller does not know this dispatcher");
                return;
            }
            log_warn(TAG, "%s report %ld refused: %s: %s; dropped", type, req, code,
                     text);
        }
        *rp = r->next;
        json_decref(r->msg);
        free(r);
        return;
    }
    if (!ok) {
        if (!strcmp(code, "unknown_dispatcher"))
            disp__to_registering(d, "controller does not know this dispatcher");
        else
            log_warn(TAG, "error reply to request %ld: %s: %s", req, code, text);
    }
}

/* read_log: a chunk of one of this dispatcher's trial logs for the
   controller (`jizhi trial logs` from another machine). Only files named
   like the logs of the trial asked for (trial-<id>.<attempt>.out|err) are
   read; bytes that are not UTF-8 become '?', and `bytes` says how many
   bytes of the file the text stands for. */
static void s_on_read_log(disp_t *d, json_t *msg)
{
    enum { MAX_CHUNK = 65536 };
    long id = 0, trial = 0, off = 0, max = 0;
    const char *path = json_string_value(json_object_get(msg, "path"));
    char err[128] = "", expect[64];
    if (wire_get_long(msg, "id", &id, err, sizeof err) ||
        wire_get_long(msg, "trial", &trial, err, sizeof err) ||
        wire_get_long(msg, "offset", &off, err, sizeof err) ||
        wire_get_long(msg, "max", &max, err, sizeof err) || !path) {
        log_warn(TAG, "refusing malformed read_log: %s", err[0] ? err : "no path");
        return;
    }
    json_t *reply = json_pack("{s:s, s:s, s:I}", "type", "log_data", "name", d->name,
                              "id", (json_int_t)id);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(expect, sizeof expect, "trial-%ld.", trial);
    size_t bl = strlen(base);
    FILE *f = NULL;
    if (strncmp(base, expect, strlen(expect)) ||
        (bl < 4 || (strcmp(base + bl - 4, ".out") && strcmp(base + bl - 4, ".err")))) {
        json_object_set_new(reply, "error", json_string("not a log of that trial"));
    } else if (!(f = fopen(path, "re"))) {
        json_object_set_new(reply, "data", json_string("")); /* not written yet */
        json_object_set_new(reply, "bytes", json_integer(0));
    } else {
        unsigned char *buf = malloc(MAX_CHUNK + 1);
        size_t n = 0;
        if (buf && off >= 0 && fseek(f, off, SEEK_SET) == 0)
            n = fread(buf, 1, max > 0 && max < MAX_CHUNK ? (size_t)max : MAX_CHUNK, f);
        size_t used = 0, k;
        while (buf && used < n) { /* drop a sequence cut at the end: next time */
            if ((k = util_utf8_len(buf + used, n - used)) == 0) {
                if (n - used < 4 && buf[used] >= 0xC0 && n == MAX_CHUNK)
                    break;
                buf[used] = '?';
                k = 1;
            }
            used += k;
        }
        json_object_set_new(
            reply, "data", buf ? json_stringn((const char *)buf, used) : json_string(""));
        json_object_set_new(reply, "bytes", json_integer((json_int_t)used));
        free(buf);
        fclose(f);
    }
    disp__send(d, reply);
}

static void s_on_ok(disp_t *d, json_t *msg)
{
    s_on_reply(d, msg, 1);
}

static void s_on_error(disp_t *d, json_t *msg)
{
    s_on_reply(d, msg, 0);
}

/* A start the schema refused: answered with exited/start_failed when it
   still names its trial and attempt, else only logged. */
static void s_refuse_start(disp_t *d, const json_t *msg, const char *err)
{
    json_t *t = json_object_get(msg, "trial"), *a = json_object_get(msg, "attempt");
    if (json_is_integer(t) && json_is_integer(a) && json_integer_value(t) >= 0 &&
        json_integer_value(a) >= 0) {
        char why[340];
        snprintf(why, sizeof why, "malformed start: %s", err);
        disp__report_start_failed(d, (long)json_integer_value(t),
                                  (long)json_integer_value(a), why);
    }
}

/* The handler of each message type a dispatcher receives: a view of the
   schema (common/msg.h), which checks the fields before any of these. */
typedef void (*s_handler)(disp_t *d, json_t *msg);
static const s_handler s_handlers[MSG_COUNT] = {
    [MSG_OK] = s_on_ok,         [MSG_ERROR] = s_on_error,
    [MSG_START] = s_on_start,   [MSG_KILL] = s_on_kill,
    [MSG_DISOWN] = s_on_disown, [MSG_DISP_READ_LOG] = s_on_read_log,
};

static void s_on_message(disp_t *d, json_t *msg)
{
    const char *type = wire_type(msg);
    s_heard(d);
    char err[300];
    const msg_def *def = msg_decode(msg, MSG_DISP, err, sizeof err);
    if (def && s_handlers[def->type]) {
        s_handlers[def->type](d, msg);
        return;
    }
    def = msg_find(type, MSG_DISP);
    if (!def || !s_handlers[def->type]) {
        log_warn(TAG, "ignoring message of unknown type \"%.40s\"", type);
        return;
    }
    log_warn(TAG, "refusing malformed %s: %s", def->name, err);
    if (def->type == MSG_START)
        s_refuse_start(d, msg, err);
}

/* Reads everything there is. -1 on a fatal socket error. */
int disp__drain_socket(disp_t *d)
{
    for (;;) {
        char err[256];
        json_t *msg = wire_recv(d->sock, NULL, 1, err, sizeof err);
        if (msg) {
            s_on_message(d, msg);
            json_decref(msg);
            continue;
        }
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        if (errno == ETERM || errno == ENOTSOCK) {
            log_error(TAG, "socket closed: %s", zmq_strerror(errno));
            return -1;
        }
        if (errno != EPROTO) {
            log_warn(TAG, "%s", err);
            return 0;
        }
        s_heard(d);
        log_warn(TAG, "dropping malformed message: %s", err);
    }
}
