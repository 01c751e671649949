/*  disp_send.c - what a dispatcher sends the controller (docs/PROTOCOL.md,
    dispatcher section): `register` and `disp_heartbeat` with the trials it
    runs, and the `started`/`exited` reports, kept until answered and
    resent with the same req; and the turn of the loop that watches the
    trials' processes (exec results, exits, timeouts, kill escalation) and
    queues those reports.
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

/* ---- sending ------------------------------------------------------------ */

/* Sends msg (takes ownership) without blocking. 0, or -1 (EAGAIN: no
   connection yet). */
int disp__send(disp_t *d, json_t *msg)
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
json_t *disp__tagged(json_t *m, const char *tag)
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
            a, disp__tagged(json_pack("{s:I, s:I, s:i}", "trial",
                                      (json_int_t)d->procs[i]->trial, "attempt",
                                      (json_int_t)d->procs[i]->attempt, "pid",
                                      (int)d->procs[i]->pid),
                            d->procs[i]->tag));
    for (disp__report *r = d->reports; r; r = r->next)
        if (!strcmp(wire_type(r->msg), "exited"))
            json_array_append_new(
                a, disp__tagged(json_pack("{s:O, s:O, s:i}", "trial",
                                          json_object_get(r->msg, "trial"), "attempt",
                                          json_object_get(r->msg, "attempt"), "pid", 0),
                                json_string_value(json_object_get(r->msg, "tag"))));
    return a;
}

void disp__send_register(disp_t *d, double now)
{
    long req = d->next_req++;
    json_t *gpus = json_array();
    for (int i = 0; i < d->ngpus; i++)
        json_array_append_new(gpus, json_integer(d->gpus[i]));
    json_t *m = json_pack("{s:s, s:I, s:s, s:i, s:o, s:o}", "type", "register", "req",
                          (json_int_t)req, "name", d->name, "slots", d->slots, "gpus",
                          gpus, "running", s_running(d));
    d->reg_reqs[d->reg_i++ % DISP_REG_RING] = req;
    if (!d->asked_since) { /* the wait for an answer starts (disp__warn_unanswered) */
        d->asked_since = now;
        d->unanswered_warn = now + d->unanswered_s;
    }
    /* not connected yet: try again soon instead of after resend_s */
    d->last_reg = disp__send(d, m) == 0 ? now : now - d->resend_s + 0.1;
}

void disp__send_heartbeat(disp_t *d, double now)
{
    json_t *m =
        json_pack("{s:s, s:I, s:s, s:o}", "type", "disp_heartbeat", "req",
                  (json_int_t)d->next_req++, "name", d->name, "running", s_running(d));
    disp__send(d, m);
    d->last_hb = now;
}

/* Sends r now; it is due again after resend_s (to 1.5 times that),
   then twice that, ... up to 8 times resend_s (util_backoff), so that a
   controller slow to answer is not sent more the longer it takes. Not
   connected: tried again in 0.1 s. */
static void s_report_send(disp_t *d, disp__report *r, double now)
{
    json_incref(r->msg);
    if (disp__send(d, r->msg) == 0) {
        r->sends++;
        r->due = now + util_backoff(r->sends, d->resend_s, 8 * d->resend_s, &d->rng);
    } else {
        r->due = now + 0.1;
    }
}

/* Sends the reports that are due (all of them when `all`: after a
   registration, to a controller that may be new, each from the start of
   its backoff). */
void disp__send_reports(disp_t *d, double now, int all)
{
    for (disp__report *r = d->reports; r; r = r->next) {
        if (all)
            r->sends = 0;
        else if (now < r->due)
            continue;
        s_report_send(d, r, now);
    }
}

/* Queues a report (takes ownership of m; adds req and name) and sends it
   at once when registered. */
static void s_report_add(disp_t *d, json_t *m)
{
    disp__report *r = calloc(1, sizeof *r);
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
    r->due = -INFINITY;
    disp__report **tail = &d->reports;
    while (*tail)
        tail = &(*tail)->next;
    *tail = r;
    if (d->ready && d->sock)
        s_report_send(d, r, util_now());
}

/* exited/start_failed for a trial that got no process. */
void disp__report_start_failed(disp_t *d, long trial, long attempt, const char *why)
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

int disp__is_done(const disp_t *d, long trial, long attempt)
{
    for (int i = 0; i < d->ndone; i++)
        if (d->done[i][0] == trial && d->done[i][1] == attempt)
            return 1;
    return 0;
}

static void s_queue_started(disp_t *d, disp__proc *p)
{
    p->started = 1;
    if (p->timeout_s > 0)
        p->deadline = util_now() + p->timeout_s;
    json_t *gpus = json_array();
    for (int i = 0; i < p->ngpus; i++)
        json_array_append_new(gpus, json_integer(p->gpus[i]));
    s_report_add(
        d, disp__tagged(json_pack("{s:s, s:I, s:I, s:i, s:s, s:s, s:o}", "type",
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
        disp__tagged(
            json_pack("{s:s, s:I, s:I, s:s, s:i, s:i, s:s, s:f, s:i, s:s, s:s, s:s}",
                      "type", "exited", "trial", (json_int_t)p->trial, "attempt",
                      (json_int_t)p->attempt, "how", how, "code", code, "signal", sig,
                      "message", msg, "elapsed_s", elapsed, "pid", (int)p->pid, "stdout",
                      p->out_path, "stderr", p->err_path, "stderr_tail", last),
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
void disp__check_procs(disp_t *d, double now)
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
            disp__terminate(d, p, "timeout", NULL);
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
