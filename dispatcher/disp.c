/*  disp.c - the dispatcher's event loop and its side of the protocol.

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

#define TAG "disp"
#define DISP_TICK_MS 50
#define DISP_REG_RING 8
#define DISP_REG_BACKOFF_MAX 60.0 /* s: longest wait between refused registers */
#define DISP_DONE_RING 256

/* A `started` or `exited` report waiting for its answer. */
typedef struct s_report {
    struct s_report *next;
    long req;
    json_t *msg;    /* complete message, req included */
    double sent_at; /* monotonic; -INFINITY: not sent yet */
} s_report;

struct disp {
    char *endpoint;                    /* controller endpoint */
    char *trial_endpoint;              /* JIZHI_ENDPOINT default for trials */
    char server_key[KEYS_Z85_LEN + 1]; /* the controller's CURVE key, "" if none */
    char trial_key[KEYS_Z85_LEN + 1];  /* JIZHI_SERVER_KEY for trials: a key, "none"
                                          (plain TCP by --insecure) or "" (unset) */
    char *name;
    char *log_dir; /* absolute */
    int slots;
    int *gpus; /* device indices */
    int ngpus;
    double kill_grace_s, heartbeat_s, silence_s, resend_s;
    int kill_on_stop;
    disp__backend *be; /* how trials run: local processes or Slurm jobs */

    void *ctx;
    int own_ctx;
    void *sock; /* DEALER, only while disp_run runs */

    int ready;          /* READY, else REGISTERING */
    double last_reg;    /* when register was last sent */
    double reg_backoff; /* extra wait after a refused register (doubles, capped) */
    double last_hb;     /* when heartbeat was last sent */
    double last_heard;  /* when the controller last sent anything */
    long reg_reqs[DISP_REG_RING]; /* recent register reqs */
    int reg_i;
    long next_req;

    disp__proc **procs; /* running trials */
    size_t nprocs, cap;
    s_report *reports;            /* unanswered reports, oldest first */
    long done[DISP_DONE_RING][2]; /* (trial, attempt) recently ended */
    int done_i, ndone;

    zmq_pollitem_t *items;
    size_t nitems_cap;
};

/* An absolute version of path (relative ones against the working
   directory). Caller frees. */
static char *s_abs(const char *path)
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
    d->log_dir = s_abs(cfg->log_dir ? cfg->log_dir : "./jizhi-logs");
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
        if (cfg->gpus) {
            fprintf(stderr, "jizhi dispatcher: --gpus lists local devices; with the "
                            "slurm backend use --max-gpus N\n");
            goto fail;
        }
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
        s_report *r = d->reports;
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

/* ---- sending ------------------------------------------------------------ */

/* Sends msg (takes ownership) without blocking. 0, or -1 (EAGAIN: no
   connection yet). */
static int s_send(disp_t *d, json_t *msg)
{
    if (!msg)
        return -1;
    if (wire_send(d->sock, NULL, msg, 1) != 0) {
        if (errno != EAGAIN)
            log_warn(TAG, "send failed: %s", zmq_strerror(errno));
        return -1;
    }
    return 0;
}

/* Adds the attempt's tag to a message about it, when it is known. */
static json_t *s_tagged(json_t *m, const char *tag)
{
    if (m && tag && tag[0])
        json_object_set_new(m, "tag", json_string(tag));
    return m;
}

/* The trials the controller must still consider running here: live
   processes, and those whose `exited` report is not answered yet (a trial
   that ended while the controller was away is reported after the
   registration, not taken for lost by it). */
static json_t *s_running(disp_t *d)
{
    json_t *a = json_array();
    for (size_t i = 0; i < d->nprocs; i++)
        json_array_append_new(
            a,
            s_tagged(json_pack("{s:I, s:I, s:i}", "trial", (json_int_t)d->procs[i]->trial,
                               "attempt", (json_int_t)d->procs[i]->attempt, "pid",
                               (int)d->procs[i]->pid),
                     d->procs[i]->tag));
    for (s_report *r = d->reports; r; r = r->next)
        if (!strcmp(wire_type(r->msg), "exited"))
            json_array_append_new(
                a, s_tagged(json_pack("{s:O, s:O, s:i}", "trial",
                                      json_object_get(r->msg, "trial"), "attempt",
                                      json_object_get(r->msg, "attempt"), "pid", 0),
                            json_string_value(json_object_get(r->msg, "tag"))));
    return a;
}

static void s_send_register(disp_t *d, double now)
{
    long req = d->next_req++;
    json_t *gpus = json_array();
    for (int i = 0; i < d->ngpus; i++)
        json_array_append_new(gpus, json_integer(d->gpus[i]));
    json_t *m = json_pack("{s:s, s:I, s:s, s:i, s:o, s:o}", "type", "register", "req",
                          (json_int_t)req, "name", d->name, "slots", d->slots, "gpus",
                          gpus, "running", s_running(d));
    d->reg_reqs[d->reg_i++ % DISP_REG_RING] = req;
    /* not connected yet: try again soon instead of after resend_s */
    d->last_reg = s_send(d, m) == 0 ? now : now - d->resend_s + 0.1;
}

static void s_send_heartbeat(disp_t *d, double now)
{
    json_t *m =
        json_pack("{s:s, s:I, s:s, s:o}", "type", "disp_heartbeat", "req",
                  (json_int_t)d->next_req++, "name", d->name, "running", s_running(d));
    s_send(d, m);
    d->last_hb = now;
}

/* Sends the reports that are due (all of them when `all`). */
static void s_send_reports(disp_t *d, double now, int all)
{
    for (s_report *r = d->reports; r; r = r->next) {
        if (!all && now - r->sent_at < d->resend_s)
            continue;
        json_incref(r->msg);
        if (s_send(d, r->msg) == 0)
            r->sent_at = now;
        else
            r->sent_at = now - d->resend_s + 0.1;
    }
}

/* Queues a report (takes ownership of m; adds req and name) and sends it
   at once when registered. */
static void s_report_add(disp_t *d, json_t *m)
{
    s_report *r = calloc(1, sizeof *r);
    if (!r || !m) {
        log_error(TAG, "out of memory: a report is lost");
        free(r);
        json_decref(m);
        return;
    }
    r->req = d->next_req++;
    json_object_set_new(m, "req", json_integer(r->req));
    json_object_set_new(m, "name", json_string(d->name));
    r->msg = m;
    r->sent_at = -INFINITY;
    s_report **tail = &d->reports;
    while (*tail)
        tail = &(*tail)->next;
    *tail = r;
    if (d->ready && d->sock) {
        json_incref(m);
        r->sent_at = s_send(d, m) == 0 ? util_now() : util_now() - d->resend_s + 0.1;
    }
}

/* exited/start_failed for a trial that got no process. */
static void s_report_start_failed(disp_t *d, long trial, long attempt, const char *why)
{
    log_warn(TAG, "trial %ld.%ld: start failed: %s", trial, attempt, why);
    s_report_add(d, json_pack("{s:s, s:I, s:I, s:s, s:i, s:i, s:s, s:f}", "type",
                              "exited", "trial", (json_int_t)trial, "attempt",
                              (json_int_t)attempt, "how", "start_failed", "code", -1,
                              "signal", 0, "message", why, "elapsed_s", 0.0));
}

static void s_remember_done(disp_t *d, long trial, long attempt)
{
    d->done[d->done_i][0] = trial;
    d->done[d->done_i][1] = attempt;
    d->done_i = (d->done_i + 1) % DISP_DONE_RING;
    if (d->ndone < DISP_DONE_RING)
        d->ndone++;
}

static int s_is_done(const disp_t *d, long trial, long attempt)
{
    for (int i = 0; i < d->ndone; i++)
        if (d->done[i][0] == trial && d->done[i][1] == attempt)
            return 1;
    return 0;
}

/* ---- trials ------------------------------------------------------------- */

static void s_terminate(disp_t *d, disp__proc *p, const char *how, const char *reason)
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
            s_report_start_failed(d, st.trial, st.attempt, why);
        }
        return;
    }
    for (size_t i = 0; i < d->nprocs; i++)
        if (d->procs[i]->trial == st.trial && d->procs[i]->attempt == st.attempt) {
            log_info(TAG, "trial %ld.%ld: start repeated while it runs; ignored",
                     st.trial, st.attempt);
            return;
        }
    if (s_is_done(d, st.trial, st.attempt)) {
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
        s_report_start_failed(d, st.trial, st.attempt, err);
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
        s_report_start_failed(d, st.trial, st.attempt, err);
        return;
    }

    /* <log_dir>/<study>/, and a default checkpoint dir beside the logs; what
       it creates is this user's only (0700): trials' output and weights */
    char *root = s_abs(st.log_dir ? st.log_dir : d->log_dir);
    char *study = disp__path_component(st.study);
    char *dir = root && study ? util_strf("%s/%s", root, study) : NULL;
    char *ckpt = NULL;
    char *cuda = NULL;
    size_t cuda_len = 1 + (size_t)want * 8;
    if (!json_object_get(st.env, "JIZHI_CHECKPOINT_DIR") && dir)
        ckpt = util_strf("%s/checkpoints/trial-%ld", dir, st.trial);
    cuda = calloc(1, cuda_len);
    if (!dir || !cuda) {
        s_report_start_failed(d, st.trial, st.attempt, "out of memory");
        goto out;
    }
    if (util_mkdirs(dir, 0700) != 0) {
        snprintf(err, sizeof err, "cannot create log directory %s: %s", dir,
                 strerror(errno));
        s_report_start_failed(d, st.trial, st.attempt, err);
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
            s_report_start_failed(d, st.trial, st.attempt, "out of memory");
            goto out;
        }
        d->procs = np;
        d->cap = d->cap * 2 + 8;
    }
    disp__proc *p = calloc(1, sizeof *p);
    if (!p) {
        s_report_start_failed(d, st.trial, st.attempt, "out of memory");
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
        s_report_start_failed(d, st.trial, st.attempt, err);
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
            s_terminate(d, p, "killed", reason);
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
            s_terminate(d, p, "killed", reason);
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

static void s_queue_started(disp_t *d, disp__proc *p)
{
    p->started = 1;
    if (p->timeout_s > 0)
        p->deadline = util_now() + p->timeout_s;
    json_t *gpus = json_array();
    for (int i = 0; i < p->ngpus; i++)
        json_array_append_new(gpus, json_integer(p->gpus[i]));
    s_report_add(d,
                 s_tagged(json_pack("{s:s, s:I, s:I, s:i, s:s, s:s, s:o}", "type",
                                    "started", "trial", (json_int_t)p->trial, "attempt",
                                    (json_int_t)p->attempt, "pid", (int)p->pid, "stdout",
                                    p->out_path, "stderr", p->err_path, "gpus", gpus),
                          p->tag));
}

/* Appends a line to the trial's stderr log (for exec failures). */
static void s_append_err(const disp__proc *p, const char *text)
{
    int fd = open(p->err_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (!f && fd >= 0)
        close(fd);
    if (f) {
        fprintf(f, "jizhi dispatcher: %s\n", text);
        fclose(f);
    }
}

/* The last non-empty line of the file at `path` (at most size-1 bytes of
   it, from its last 4 KiB), "" when there is none. */
static void s_last_line(const char *path, char *buf, size_t size)
{
    buf[0] = 0;
    FILE *f = path[0] ? fopen(path, "re") : NULL;
    if (!f)
        return;
    char tail[4096];
    long len = 0;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0) {
        long from = len > (long)sizeof tail - 1 ? len - (long)sizeof tail + 1 : 0;
        fseek(f, from, SEEK_SET);
        size_t n = fread(tail, 1, sizeof tail - 1, f);
        tail[n] = 0;
        while (n > 0 &&
               (tail[n - 1] == '\n' || tail[n - 1] == '\r' || tail[n - 1] == ' '))
            tail[--n] = 0;
        const char *line = strrchr(tail, '\n');
        line = line ? line + 1 : tail;
        size_t m = strlen(line) < size - 1 ? strlen(line) : size - 1;
        memcpy(buf, line, m);
        buf[m] = 0;
    }
    fclose(f);
}

static void s_queue_exited(disp_t *d, disp__proc *p, const disp__end *e)
{
    const char *how;
    int code = e->code, sig = e->sig;
    const char *what = e->what;
    char msg[768];
    if (e->unknown)
        how = p->how ? p->how : "exited";
    else if (sig)
        how = "signaled";
    else
        how = "exited";
    if (p->exec_errno) {
        how = "start_failed";
        code = 127; /* the child's _exit status, whatever a tool made of it */
        sig = 0;
        snprintf(msg, sizeof msg, "execvp %s: %s", p->argv0, strerror(p->exec_errno));
        s_append_err(p, msg);
    } else if (p->how && !strcmp(p->how, "timeout")) {
        how = "timeout";
        snprintf(msg, sizeof msg, "timed out after %g s; %s", p->timeout_s, what);
    } else if (p->how) {
        how = "killed";
        snprintf(msg, sizeof msg, "killed on request%s%s%s; %s", p->reason ? " (" : "",
                 p->reason ? p->reason : "", p->reason ? ")" : "", what);
    } else if (e->how) {
        how = e->how; /* lost, or the backend's own time limit */
        snprintf(msg, sizeof msg, "%s", what);
    } else {
        snprintf(msg, sizeof msg, "%s", what);
    }
    double elapsed = util_now() - p->t_start;
    char last[200];
    s_last_line(p->err_path, last, sizeof last);
    log_info(TAG, "trial %ld.%ld: %s: %s", p->trial, p->attempt, how, msg);
    s_report_add(
        d,
        s_tagged(json_pack("{s:s, s:I, s:I, s:s, s:i, s:i, s:s, s:f, s:i, s:s, s:s, s:s}",
                           "type", "exited", "trial", (json_int_t)p->trial, "attempt",
                           (json_int_t)p->attempt, "how", how, "code", code, "signal",
                           sig, "message", msg, "elapsed_s", elapsed, "pid", (int)p->pid,
                           "stdout", p->out_path, "stderr", p->err_path, "stderr_tail",
                           last),
                 p->tag));
}

/* A local multi-rank launcher that leaves one of its ranks a zombie for
   DISP_MPI_UNREAPED_S is hung: SIGKILL to its tree. Looks once a second. */
static void s_check_ranks(disp_t *d, disp__proc *p, double now)
{
    if (p->ranks <= 1 || !p->running || p->how || p->killed_hard || p->adopted ||
        p->job || now < p->rank_check_at)
        return;
    p->rank_check_at = now + 1.0;
    if (disp__mpi_zombie_children(p->pid) == 0) {
        p->zombie_since = 0;
        return;
    }
    if (p->zombie_since == 0)
        p->zombie_since = now;
    if (now - p->zombie_since >= DISP_MPI_UNREAPED_S) {
        log_warn(TAG,
                 "trial %ld.%ld: the MPI launcher %d left an ended rank unreaped for "
                 "%g s (hung): SIGKILL to its ranks",
                 p->trial, p->attempt, (int)p->pid, DISP_MPI_UNREAPED_S);
        d->be->ops->signal(d->be, p, SIGKILL);
        p->killed_hard = 1;
    }
}

/* Exec results, exits, timeouts, kill escalation. */
static void s_check_procs(disp_t *d, double now)
{
    d->be->ops->refresh(d->be, d->procs, d->nprocs, now);
    for (size_t i = 0; i < d->nprocs;) {
        disp__proc *p = d->procs[i];
        disp__end end;
        int ended = d->be->ops->poll(d->be, p, &end);
        if (p->running && !p->started)
            s_queue_started(d, p);
        if (ended) {
            s_queue_exited(d, p, &end);
            s_remember_done(d, p->trial, p->attempt);
            d->be->ops->fini(d->be, p);
            free(p);
            memmove(&d->procs[i], &d->procs[i + 1],
                    (d->nprocs - i - 1) * sizeof *d->procs);
            d->nprocs--;
            continue;
        }
        if (!p->how && p->deadline > 0 && now >= p->deadline)
            s_terminate(d, p, "timeout", NULL);
        s_check_ranks(d, p, now);
        if (p->kill_at > 0 && !p->killed_hard && now >= p->kill_at) {
            log_info(TAG, "trial %ld.%ld: still there %g s after SIGTERM, SIGKILL",
                     p->trial, p->attempt, d->kill_grace_s);
            d->be->ops->signal(d->be, p, SIGKILL);
            p->killed_hard = 1;
        }
        i++;
    }
}

/* ---- receiving ---------------------------------------------------------- */

static int s_is_reg_req(const disp_t *d, long req)
{
    for (int i = 0; i < DISP_REG_RING; i++)
        if (d->reg_reqs[i] == req && req != 0)
            return 1;
    return 0;
}

static void s_to_registering(disp_t *d, const char *why)
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
            s_send_reports(d, util_now(), 1);
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
    for (s_report **rp = &d->reports; *rp; rp = &(*rp)->next) {
        s_report *r = *rp;
        if (r->req != req)
            continue;
        if (!ok) {
            const char *type = wire_type(r->msg);
            if (!strcmp(code, "unknown_dispatcher") || !strcmp(code, "internal") ||
                !strcmp(code, "timeout")) {
                log_warn(TAG, "%s report %ld: %s: %s; will resend", type, req, code,
                         text);
                if (!strcmp(code, "unknown_dispatcher"))
                    s_to_registering(d, "controller does not know this dispatcher");
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
            s_to_registering(d, "controller does not know this dispatcher");
        else
            log_warn(TAG, "error reply to request %ld: %s: %s", req, code, text);
    }
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid
   or cut off. */
static size_t s_utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80             ? 1
                 : (s[0] & 0xE0) == 0xC0 ? 2
                 : (s[0] & 0xF0) == 0xE0 ? 3
                 : (s[0] & 0xF8) == 0xF0 ? 4
                                         : 0;
    if (len == 0 || len > n || (len == 2 && s[0] < 0xC2))
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
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
            if ((k = s_utf8_len(buf + used, n - used)) == 0) {
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
    s_send(d, reply);
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
        s_report_start_failed(d, (long)json_integer_value(t), (long)json_integer_value(a),
                              why);
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
    d->last_heard = util_now();
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
static int s_drain_socket(disp_t *d)
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
        d->last_heard = util_now();
        log_warn(TAG, "dropping malformed message: %s", err);
    }
}

/* ---- the loop ----------------------------------------------------------- */

static void s_timers(disp_t *d, double now)
{
    if (d->ready && now - d->last_heard >= d->silence_s)
        s_to_registering(d, "no reply from the controller");
    if (!d->ready) {
        if (now - d->last_reg >= d->resend_s + d->reg_backoff)
            s_send_register(d, now);
        return;
    }
    if (now - d->last_hb >= d->heartbeat_s)
        s_send_heartbeat(d, now);
    s_send_reports(d, now, 0);
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
            s_terminate(d, d->procs[i], "killed", "dispatcher stopping");
        /* a process in uninterruptible sleep may outlive SIGKILL for a
           while: bound the wait */
        double give_up = util_now() + d->kill_grace_s + 10.0;
        while (d->nprocs && util_now() < give_up) {
            s_poll(d, 20);
            s_drain_socket(d);
            s_check_procs(d, util_now());
        }
        if (d->nprocs)
            log_error(TAG, "%d trial(s) did not die after SIGKILL", (int)d->nprocs);
    } else if (d->nprocs) {
        log_info(TAG, "stopping: leaving %d trial(s) running", (int)d->nprocs);
    }
    s_drop_procs(d);
    double until = util_now() + 1.0;
    if (d->ready)
        s_send_reports(d, util_now(), 1);
    while (d->ready && d->reports && util_now() < until) {
        s_poll(d, 20);
        if (s_drain_socket(d) != 0)
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

int disp_run(disp_t *d, volatile int *stop)
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
    int rc = 0;
    while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
        s_timers(d, util_now());
        if (s_poll(d, DISP_TICK_MS) != 0 || s_drain_socket(d) != 0) {
            rc = -1;
            break;
        }
        s_check_procs(d, util_now());
    }
    s_shutdown(d);
    zmq_close(d->sock);
    d->sock = NULL;
    return rc;
}
