/*  disp.c - the dispatcher object and its event loop (what it sends is in
    disp_send.c, what it receives in disp_recv.c: disp_core.h).

    One thread, one loop: zmq_poll on the DEALER socket, the trials' exec
    status pipes and pidfds, with a 50 ms tick. Each turn it handles what
    the controller sent (start, kill, replies), resolves exec results,
    reaps exited trials (waitid/waitpid on its own pids only: no SIGCHLD
    handler, so it can live inside a bigger process), enforces timeouts and
    kill escalation, and runs the protocol timers: register every resend_s
    until `ok` (REGISTERING), then heartbeat every heartbeat_s (READY), back
    to REGISTERING on error/unknown_dispatcher or silence_s without a word
    from the controller. `started`/`exited` reports are kept until answered
    and resent with the same req. docs/PROTOCOL.md, dispatcher section.
*/
#define _GNU_SOURCE
#include "disp.h"
#include "disp_int.h"
#include "disp_core.h"
#include "common/log.h"
#include "common/keys.h"
#include "common/msg.h"
#include "common/wire.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

/* An absolute version of path (relative ones against the working
   directory). Caller frees. */
char *disp__abs(const char *path)
{
    if (path[0] == '/')
        return strdup(path);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return strdup(path);
    if (!strcmp(path, "."))
        return strdup(cwd);
    return util_strf("%s/%s", cwd, path[0] == '.' && path[1] == '/' ? path + 2 : path);
}

/* ---- construction ------------------------------------------------------- */

/* The controller's key (common/keys.h): over tcp:// a dispatcher without
   one refuses to start unless plain TCP was chosen (--insecure, that is
   JIZHI_SERVER_KEY=none); a `start` from whoever answers a plain socket
   would run as this user. Also decides what trials get as
   JIZHI_SERVER_KEY, and warns when root runs trials for a tcp://
   controller. 0, or -1 after saying why on stderr. */
static int s_keys(disp_t *d)
{
    char err[1200];
    if (keys_client_server_key(d->endpoint, d->server_key, err, sizeof err) != 0) {
        fprintf(stderr, "jizhi dispatcher: %s\n", err);
        return -1;
    }
    int tcp = !strncmp(d->endpoint, "tcp://", 6);
    d->trial_key[0] = 0;
    if (!strncmp(d->trial_endpoint, "tcp://", 6)) {
        int known = 1;
        if (!strcmp(d->trial_endpoint, d->endpoint))
            memcpy(d->trial_key, d->server_key, sizeof d->trial_key);
        else if (keys_client_server_key(d->trial_endpoint, d->trial_key, err,
                                        sizeof err) != 0)
            known = 0;                 /* left to the trial's own env or key directory */
        if (known && !d->trial_key[0]) /* plain TCP by choice: the trials too */
            snprintf(d->trial_key, sizeof d->trial_key, "none");
    }
    if (tcp && geteuid() == 0) {
        const char *w = "WARNING: running as root for the tcp:// controller %s: every "
                        "trial's command runs as root on this machine, whoever submitted "
                        "it; run dispatchers as an unprivileged user";
        fprintf(stderr, "jizhi dispatcher: ");
        fprintf(stderr, w, d->endpoint);
        fputc('\n', stderr);
        log_warn(TAG, w, d->endpoint);
    }
    return 0;
}

disp_t *disp_new(const disp_config *cfg)
{
    if (!cfg || !cfg->controller || !cfg->controller[0]) {
        fprintf(stderr, "jizhi dispatcher: no controller endpoint\n");
        return NULL;
    }
    disp_t *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->kill_on_stop = 1;
    d->endpoint = strdup(cfg->controller);
    d->trial_endpoint =
        strdup(cfg->trial_endpoint ? cfg->trial_endpoint : cfg->controller);
    d->log_dir = disp__abs(cfg->log_dir ? cfg->log_dir : "./jizhi-logs");
    if (cfg->name) {
        d->name = strdup(cfg->name);
    } else {
        char host[256] = "localhost";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        d->name = strdup(host);
    }
    if (!d->endpoint || !d->trial_endpoint || !d->log_dir || !d->name)
        goto fail;
    int slurm = cfg->backend && !strcmp(cfg->backend, "slurm");
    if (cfg->backend && !slurm && strcmp(cfg->backend, "local")) {
        fprintf(stderr, "jizhi dispatcher: unknown backend \"%s\" (local or slurm)\n",
                cfg->backend);
        goto fail;
    }
    if (!d->name[0]) {
        fprintf(stderr, "jizhi dispatcher: empty name\n");
        goto fail;
    }
    d->slots = cfg->slots;
    if (d->slots <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        d->slots = n > 0 ? (int)n : 1;
    }
    d->kill_grace_s = cfg->kill_grace_s > 0 ? cfg->kill_grace_s : 5.0;
    d->heartbeat_s = cfg->heartbeat_s > 0 ? cfg->heartbeat_s : 1.0;
    d->silence_s = cfg->silence_s > 0 ? cfg->silence_s : 5.0;
    d->resend_s = cfg->resend_s > 0 ? cfg->resend_s : 2.0;
    d->unanswered_s = cfg->unanswered_s > 0 ? cfg->unanswered_s : 10.0;

    if (slurm) {
        /* Trials run in jobs, maybe on other machines: they must reach the
           controller over TCP. The GPUs are the cluster's: jizhi holds at
           most max_gpus of them at once (indices 0..max_gpus-1 for the
           controller's bookkeeping; Slurm picks the devices). */
        if (strncmp(d->trial_endpoint, "tcp://", 6) != 0) {
            fprintf(stderr,
                    "jizhi dispatcher: the slurm backend needs a tcp:// endpoint that "
                    "trials on the compute nodes can reach (--trial-endpoint), not "
                    "%s\n",
                    d->trial_endpoint);
            goto fail;
        }
        if (cfg->slots <= 0)
            d->slots = 64; /* jobs, not this machine's cores */
        /* jobs outlive the dispatcher: a restart takes them back (adopt) */
        d->kill_on_stop = 0;
        /* cfg->gpus (local devices) is not read: `jizhi dispatcher` refuses
           --gpus with --backend slurm as a usage error */
        if (cfg->max_gpus < 0) {
            fprintf(stderr, "jizhi dispatcher: --max-gpus must be >= 0\n");
            goto fail;
        }
        if (cfg->max_gpus > 0 &&
            !(d->gpus = calloc((size_t)cfg->max_gpus, sizeof *d->gpus)))
            goto fail;
        for (int i = 0; i < cfg->max_gpus; i++)
            d->gpus[i] = i;
        d->ngpus = cfg->max_gpus;
        disp__slurm_config sc = {cfg->partition, cfg->account, cfg->poll_s,
                                 d->kill_grace_s, d->name};
        if (!(d->be = disp__slurm_new(&sc)))
            goto fail;
    } else if (cfg->gpus) {
        char err[256];
        if (disp__gpu_parse(cfg->gpus, &d->gpus, &d->ngpus, err, sizeof err) != 0) {
            fprintf(stderr, "jizhi dispatcher: %s\n", err);
            goto fail;
        }
    } else {
        int n =
            disp__gpu_detect(cfg->nvidia_smi ? cfg->nvidia_smi : "nvidia-smi", &d->gpus);
        if (n < 0)
            goto fail;
        d->ngpus = n;
    }
    if (!d->be && !(d->be = disp__local_new()))
        goto fail;
    if (s_keys(d) != 0)
        goto fail;

    if (cfg->zmq_ctx) {
        d->ctx = cfg->zmq_ctx;
    } else {
        d->ctx = zmq_ctx_new();
        d->own_ctx = 1;
        if (!d->ctx) {
            fprintf(stderr, "jizhi dispatcher: zmq_ctx_new: %s\n", zmq_strerror(errno));
            goto fail;
        }
    }
    /* Increasing across restarts, so a restarted dispatcher's reports are
       never mistaken for repeats of its previous life's. */
    d->next_req = (long)(util_wall() * 1000.0);
    char seed[17]; /* the report resends' jitter differs between dispatchers */
    util_random_hex(seed, 8);
    d->rng = strtoull(seed, NULL, 16);
    return d;
fail:
    disp_destroy(&d);
    return NULL;
}

void disp_set_kill_on_stop(disp_t *d, int on)
{
    d->kill_on_stop = on != 0;
}

static void s_drop_procs(disp_t *d)
{
    for (size_t i = 0; i < d->nprocs; i++) {
        d->be->ops->fini(d->be, d->procs[i]);
        free(d->procs[i]);
    }
    d->nprocs = 0;
}

void disp_destroy(disp_t **dp)
{
    if (!dp || !*dp)
        return;
    disp_t *d = *dp;
    if (d->be) {
        s_drop_procs(d);
        d->be->ops->destroy(d->be);
    }
    free(d->procs);
    while (d->reports) {
        disp__report *r = d->reports;
        d->reports = r->next;
        json_decref(r->msg);
        free(r);
    }
    if (d->sock)
        zmq_close(d->sock);
    if (d->own_ctx && d->ctx)
        zmq_ctx_term(d->ctx);
    free(d->items);
    free(d->gpus);
    free(d->endpoint);
    free(d->trial_endpoint);
    free(d->name);
    free(d->log_dir);
    free(d);
    *dp = NULL;
}

/* ---- trials ------------------------------------------------------------- */

void disp__terminate(disp_t *d, disp__proc *p, const char *how, const char *reason)
{
    if (p->how)
        return; /* already on its way out */
    p->how = how;
    if (reason)
        p->reason = strdup(reason);
    d->be->ops->signal(d->be, p, SIGTERM);
    d->be->ops->signal(d->be, p, SIGCONT); /* a stopped process must see it */
    p->kill_at = util_now() + d->kill_grace_s;
    log_info(TAG, "trial %ld.%ld: %s, SIGTERM to %s %d", p->trial, p->attempt,
             !strcmp(how, "timeout") ? "timed out" : "kill requested",
             d->be->ops->id_word, (int)p->pid);
}

/* ---- the loop ----------------------------------------------------------- */

static void s_timers(disp_t *d, double now)
{
    if (d->ready && now - d->last_heard >= d->silence_s)
        disp__to_registering(d, "no reply from the controller");
    if (!d->ready) {
        if (now - d->last_reg >= d->resend_s + d->reg_backoff)
            disp__send_register(d, now);
        disp__warn_unanswered(d, now);
        return;
    }
    if (now - d->last_hb >= d->heartbeat_s)
        disp__send_heartbeat(d, now);
    disp__send_reports(d, now, 0);
}

/* One zmq_poll on the socket and the trials' fds, up to timeout_ms. */
static int s_poll(disp_t *d, long timeout_ms)
{
    size_t need = 1 + 2 * d->nprocs;
    if (need > d->nitems_cap) {
        zmq_pollitem_t *ni = realloc(d->items, need * 2 * sizeof *ni);
        if (!ni)
            need = 1; /* poll the socket only; the tick still finds exits */
        else {
            d->items = ni;
            d->nitems_cap = need * 2;
        }
    }
    size_t n = 0;
    d->items[n++] = (zmq_pollitem_t){d->sock, 0, ZMQ_POLLIN, 0};
    for (size_t i = 0; n < need && i < d->nprocs; i++) {
        if (d->procs[i]->exec_fd >= 0)
            d->items[n++] = (zmq_pollitem_t){NULL, d->procs[i]->exec_fd, ZMQ_POLLIN, 0};
        if (d->procs[i]->pidfd >= 0)
            d->items[n++] = (zmq_pollitem_t){NULL, d->procs[i]->pidfd, ZMQ_POLLIN, 0};
    }
    int rc = zmq_poll(d->items, (int)n, timeout_ms);
    if (rc < 0 && errno != EINTR) {
        if (errno == ETERM)
            return -1;
        log_warn(TAG, "zmq_poll: %s", zmq_strerror(errno));
    }
    return 0;
}

/* Stopping: kill the trials (when asked), wait for them, then give the
   controller a moment to acknowledge the last reports. */
static void s_shutdown(disp_t *d)
{
    if (d->kill_on_stop && d->nprocs) {
        log_info(TAG, "stopping: killing %d running trial(s)", (int)d->nprocs);
        for (size_t i = 0; i < d->nprocs; i++)
            disp__terminate(d, d->procs[i], "killed", "dispatcher stopping");
        /* a process in uninterruptible sleep may outlive SIGKILL for a
           while: bound the wait */
        double give_up = util_now() + d->kill_grace_s + 10.0;
        while (d->nprocs && util_now() < give_up) {
            s_poll(d, 20);
            disp__drain_socket(d);
            disp__check_procs(d, util_now());
        }
        if (d->nprocs)
            log_error(TAG, "%d trial(s) did not die after SIGKILL", (int)d->nprocs);
    } else if (d->nprocs) {
        log_info(TAG, "stopping: leaving %d trial(s) running", (int)d->nprocs);
    }
    s_drop_procs(d);
    double until = util_now() + 1.0;
    if (d->ready)
        disp__send_reports(d, util_now(), 1);
    while (d->ready && d->reports && util_now() < until) {
        s_poll(d, 20);
        if (disp__drain_socket(d) != 0)
            break;
    }
}

/* Takes back what an earlier run left running (Slurm jobs): they are
   listed as running when registering, so the controller keeps them. */
static void s_adopt(disp_t *d)
{
    disp__proc **v = NULL;
    size_t n = d->be->ops->adopt(d->be, &v), kept = 0;
    for (size_t i = 0; i < n; i++) {
        disp__proc *p = v[i];
        int dup = 0;
        for (size_t k = 0; k < d->nprocs; k++)
            dup |= d->procs[k]->trial == p->trial && d->procs[k]->attempt == p->attempt;
        if (!dup && d->nprocs == d->cap) {
            disp__proc **np = realloc(d->procs, (d->cap * 2 + 8) * sizeof *np);
            if (np) {
                d->procs = np;
                d->cap = d->cap * 2 + 8;
            }
        }
        if (dup || d->nprocs == d->cap) {
            d->be->ops->fini(d->be, p);
            free(p);
            continue;
        }
        /* its timeout_s is not known here: Slurm's --time still holds */
        p->t_start = util_now();
        d->procs[d->nprocs++] = p;
        kept++;
    }
    free(v);
    if (kept)
        log_info(TAG, "took back %zu trial(s) an earlier run left running", kept);
}

int disp_run(disp_t *d, atomic_int *stop)
{
    d->sock = zmq_socket(d->ctx, ZMQ_DEALER);
    if (!d->sock) {
        log_error(TAG, "zmq_socket: %s", zmq_strerror(errno));
        return -1;
    }
    wire_socket_setup(d->sock);
    int immediate = 1; /* no queueing towards a controller that is not there */
    zmq_setsockopt(d->sock, ZMQ_IMMEDIATE, &immediate, sizeof immediate);
    char kerr[600];
    if (keys_client_setup(d->sock, d->endpoint, d->server_key, kerr, sizeof kerr) != 0) {
        log_error(TAG, "%s", kerr);
        zmq_close(d->sock);
        d->sock = NULL;
        return -1;
    }
    if (zmq_connect(d->sock, d->endpoint) != 0) {
        log_error(TAG, "cannot connect to %s: %s", d->endpoint, zmq_strerror(errno));
        zmq_close(d->sock);
        d->sock = NULL;
        return -1;
    }
    log_info(TAG, "dispatcher %s: controller %s, %d slots, %d GPUs, logs in %s", d->name,
             d->endpoint, d->slots, d->ngpus, d->log_dir);
    s_adopt(d);
    d->ready = 0;
    d->last_reg = -INFINITY;
    d->last_heard = util_now();
    d->asked_since = 0;
    d->unanswered_warned = 0;
    int rc = 0;
    while (!atomic_load_explicit(stop, memory_order_acquire)) {
        s_timers(d, util_now());
        if (s_poll(d, DISP_TICK_MS) != 0 || disp__drain_socket(d) != 0) {
            rc = -1;
            break;
        }
        disp__check_procs(d, util_now());
    }
    s_shutdown(d);
    zmq_close(d->sock);
    d->sock = NULL;
    return rc;
}
