/*  ctl.c - the controller object (see ctl.h): its event loop, on top of
    every other file of controller/ (ctl_internal.h); none calls it back.

    Each iteration: poll, receive up to a burst of messages and apply them
    (ctl_msg.c) inside one transaction (ctl_svc.c), run the periodic work
    (ctl__tick), commit, then flush the outbox (queued by ctl__send). Nothing leaves
   before the commit, so an acknowledgement always means "persisted".
*/
#include "ctl.h"
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

#include <errno.h>
#include <libgen.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define BURST 2000 /* messages applied per transaction at most */

/* Commits the iteration, then sends what it produced. On a failed commit
   (disk full, I/O error) nothing is sent and -1 is returned: the memory
   now holds changes the database does not, so the controller stops
   serving (fail-stop) rather than go on inconsistent; started again it
   rebuilds everything from the database, and peers resend what was not
   acknowledged. */
static int s_commit_and_flush(ctl_t *c)
{
    int ok = 1;
    if (c->in_txn) {
        if (store_commit(c->store) != 0) {
            log_error("ctl",
                      "cannot store this iteration (%s): stopping, nothing of it was "
                      "acknowledged; start the controller again when the database can be "
                      "written (it continues from the database)",
                      store_errmsg(c->store));
            store_rollback(c->store);
            ok = 0;
        }
        c->in_txn = 0;
    }
    for (size_t i = 0; i < c->nout; i++) {
        if (ok)
            wire_send(c->router, &c->outbox[i].to, c->outbox[i].msg, 1);
        else
            json_decref(c->outbox[i].msg);
    }
    c->nout = 0;
    ctl__alerts_after_commit(c, ok);
    return ok ? 0 : -1;
}

/* Messages of at least this many bytes leave the controller's memory
   trimmed once the loop is idle again: a large request's frame and its
   parsed JSON (up to ~30 times the text) are freed, and malloc_trim gives
   the pages back so that a few big requests do not leave the RSS high.
   Not after each one: under a steady stream of large metric batches the
   memory is reused anyway, and trimming would cost every iteration. */
#define TRIM_AFTER_BYTES (256 * 1024)

/* ---- the iteration ---- */

/* The periodic work of one iteration, after its messages: dispatchers
   gone silent, relayed reads past their deadline, each study's trials
   (lost, over budget, stop grace, load fallback), then the queue gives
   free slots to waiting trials, then running studies save their
   scheduler and finish when nothing is left. */
void ctl__tick(ctl_t *c, double now)
{
    ctl__read_expire(c, now);
    if (now - c->trials_ticked >= CTL_TRIAL_TICK_S) {
        c->trials_ticked = now;
        ctl__disp_check_silence(c, now);         /* a walk over every dispatcher */
        for (size_t i = 0; i < c->nstudies; i++) /* the trials due (ctl_due.h) */
            ctl__study_tick_trials(c, c->studies[i], now);
        ctl__instr_load_fallbacks(c, now); /* a walk over the instructions in flight */
    }
    ctl__interv_tick(c, now); /* guarded changes and forks (ctl_interv.c) */
    /* free slots go to waiting trials in queue order (ctl_queue.c) */
    ctl__queue_fill(c, now);
    for (size_t i = 0; i < c->nstudies; i++)
        if (c->studies[i]->row.state == STUDY_RUNNING)
            ctl__study_tick_end(c, c->studies[i]);
}

/* ---- object ---- */

const char *ctl_endpoint(const ctl_t *c)
{
    return c->endpoint;
}

static int s_bind(ctl_t *c, const ctl_config *cfg, const char *bind, char *err,
                  size_t errsize)
{
    c->router = zmq_socket(c->zctx, ZMQ_ROUTER);
    wire_socket_setup(c->router);
    int on = 1;
    zmq_setsockopt(c->router, ZMQ_ROUTER_HANDOVER, &on, sizeof on);
    int64_t hard = WIRE_MAX_REQUEST_HARD; /* larger: dropped unread, peer disconnected */
    zmq_setsockopt(c->router, ZMQ_MAXMSGSIZE, &hard, sizeof hard);
    /* A cluster's trials and dispatchers connect in bursts (thousands when
       a study starts): with ZeroMQ's default listen queue of 100 the
       kernel drops the SYNs beyond it and those peers retry after 1, 3,
       7, 15 ... s (bench/scale.sh: 10 000 trials took minutes to say
       hello). The kernel caps it at net.core.somaxconn. */
    int backlog = CTL_LISTEN_BACKLOG;
    zmq_setsockopt(c->router, ZMQ_BACKLOG, &backlog, sizeof backlog);
    if (ctl__auth_setup(c, bind, cfg->insecure, cfg->key_path, cfg->authorized_keys, err,
                        errsize) != 0)
        return -1;
    if (zmq_bind(c->router, bind) != 0) {
        snprintf(err, errsize, "cannot bind %s: %s", bind, zmq_strerror(errno));
        return -1;
    }
    char last[512];
    size_t len = sizeof last;
    zmq_getsockopt(c->router, ZMQ_LAST_ENDPOINT, last, &len);
    /* peers cannot connect to a wildcard address */
    const char *star = strstr(last, "://0.0.0.0:");
    if (star)
        snprintf(c->endpoint, sizeof c->endpoint, "tcp://127.0.0.1:%s",
                 strrchr(last, ':') + 1);
    else
        snprintf(c->endpoint, sizeof c->endpoint, "%s", last);
    return 0;
}

ctl_t *ctl_new(const ctl_config *cfg, char *err, size_t errsize)
{
    /* one out-of-memory policy (util.h): JSON allocations abort too */
    json_set_alloc_funcs(util_xmalloc, free);
    ctl_t *c = util_xcalloc(1, sizeof *c);
    wire_points_init(&c->rx_points);
    c->lost_timeout = cfg->lost_timeout_s > 0 ? cfg->lost_timeout_s : 30;
    c->on.instr_done = ctl__interv_instr_done; /* the interventions hear ... */
    c->on.trial_metrics = ctl__interv_metrics;
    c->on.trial_checkpoint = ctl__interv_checkpoint;
    c->started = util_now();
    if (cfg->ckpt_root) {
        snprintf(c->ckpt_root, sizeof c->ckpt_root, "%s", cfg->ckpt_root);
    } else {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", cfg->db_path);
        char *abs = realpath(dirname(tmp), NULL);
        snprintf(c->ckpt_root, sizeof c->ckpt_root, "%s/jizhi-checkpoints",
                 abs ? abs : ".");
        free(abs);
    }
    c->store = store_open(cfg->db_path, 0, err, errsize);
    if (!c->store) {
        ctl_destroy(&c);
        return NULL;
    }
    c->next_trial_id = store_trial_next_id(c->store);
    c->zctx = zmq_ctx_new();
    char defbind[1200];
    const char *bind = cfg->bind;
    if (!bind && c->next_trial_id >= 0 &&
        ctl_default_bind(cfg->db_path, defbind, sizeof defbind, err, errsize) != 0) {
        ctl_destroy(&c);
        return NULL;
    }
    if (!bind)
        bind = defbind;
    if (c->next_trial_id < 0 || ctl__alerts_init(c, cfg->alerts, err, errsize) != 0 ||
        ctl__queue_init(c, err, errsize) != 0 ||
        s_bind(c, cfg, bind, err, errsize) != 0 || ctl__load(c, err, errsize) != 0 ||
        ctl__interv_load(c, err, errsize) != 0) {
        ctl_destroy(&c);
        return NULL;
    }
    log_info("ctl", "serving %s (database %s, %zu unfinished studies)", c->endpoint,
             cfg->db_path, c->nstudies);
    return c;
}

int ctl_run(ctl_t *c, atomic_int *stop)
{
    int trim_pending = 0; /* a large message came since the last trim */
    while (!atomic_load_explicit(stop, memory_order_acquire)) {
        zmq_pollitem_t items[2] = {{c->router, 0, ZMQ_POLLIN, 0},
                                   {ctl__auth_socket(c), 0, ZMQ_POLLIN, 0}};
        int rc = zmq_poll(items, items[1].socket ? 2 : 1, 50);
        if (rc < 0 && errno != EINTR) {
            log_error("ctl", "poll failed: %s", zmq_strerror(errno));
            return -1;
        }
        if (rc == 0 && trim_pending) { /* idle for a poll's timeout */
            malloc_trim(0);
            trim_pending = 0;
        }
        ctl__auth_poll(c);
        for (int i = 0; i < BURST; i++) {
            wire_peer from;
            wire_meta meta;
            char why[256];
            size_t size;
            json_t *msg = wire_recv_points(c->router, &from, &meta, WIRE_MAX_REQUEST,
                                           &size, 1, &c->rx_points, why, sizeof why);
            if (!msg) {
                if (errno == EAGAIN)
                    break;
                if (errno == ETERM)
                    return -1;
                ctl__refused(c, "dropped a malformed message: %s", why);
                if (from.len)
                    ctl__send(c, &from,
                              wire_error(
                                  -1, size > WIRE_MAX_REQUEST ? "too_large" : "malformed",
                                  "%s", why));
                trim_pending |= size >= TRIM_AFTER_BYTES;
                continue;
            }
            ctl_ident who;
            ctl__auth_identify(c, &meta, &who);
            ctl__handle(c, &from, &who, msg, c->rx_points.n ? &c->rx_points : NULL);
            json_decref(msg);
            trim_pending |= size >= TRIM_AFTER_BYTES;
        }
        ctl__tick(c, util_now());
        ctl__alerts_tick(c, util_now());
        ctl__instr_expire(c);
        if (s_commit_and_flush(c) != 0)
            return -1;
    }
    return 0;
}

void ctl_destroy(ctl_t **cp)
{
    if (!cp || !*cp)
        return;
    ctl_t *c = *cp;
    if (c->in_txn)
        store_rollback(c->store);
    for (size_t i = 0; i < c->nstudies; i++)
        ctl__study_free(c->studies[i]);
    free(c->studies);
    ctl_idmap_clear(&c->trials);
    ctl__disp_free_all(c);
    ctl__instr_free_all(c);
    ctl__alerts_free(c);
    ctl__queue_free(c);
    ctl__interv_free(c);
    for (size_t i = 0; i < c->nout; i++)
        json_decref(c->outbox[i].msg);
    free(c->outbox);
    wire_points_fini(&c->rx_points);
    free(c->logreads);
    if (c->router)
        zmq_close(c->router);
    ctl__auth_fini(c);
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    store_close(&c->store);
    free(c);
    *cp = NULL;
}
