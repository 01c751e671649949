/*  ctl_alert.c - alerts: rules of a study's spec ("alerts") and of the
    controller's --alerts file, checked where things happen (a trial
    failed or completed, the guard acted, a study finished) and each tick
    (stalled trials). See docs/spec.md (Alerts).

    A rule fires at most once per (rule, study, trial): the firing is a
    row of the alerts table (UNIQUE), written in the iteration's
    transaction with an `alert` event, so a restarted controller does not
    fire it again. Each firing also goes to syslog (LOG_USER, ident
    "jizhi") and, when the rule has a hook, runs it: the program and its
    arguments (no shell) with the alert as JSON on stdin. Hooks start only
    after the iteration's commit (an alert that was not stored never runs
    its hook) and never block the loop: fork/exec, reaped with WNOHANG each
    tick, killed (its process group) after hook_timeout_s.
*/
#define _GNU_SOURCE
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/text.h"
#include "../common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>

#define HOOK_TIMEOUT_DEFAULT_S 30.0
#define MAX_HOOKS 64 /* running at once; more wait in the queue */

typedef struct {
    json_t *argv;   /* owned */
    char *input;    /* the alert as JSON text, owned */
    double timeout; /* seconds */
} s_hook_job;

typedef struct {
    pid_t pid;
    double deadline; /* monotonic */
    int killed;
    char rule[80];
} s_hook_proc;

struct ctl_alerts {
    json_t *rules;       /* the controller's rules (--alerts), owned, NULL if none */
    s_hook_job *pending; /* hooks of this iteration's alerts: run after the commit */
    size_t npending, pending_cap;
    s_hook_job *waiting; /* committed, waiting for a free hook process */
    size_t nwaiting, waiting_cap;
    s_hook_proc procs[MAX_HOOKS];
    size_t nprocs;
    int syslog_open;
};

static void s_job_free(s_hook_job *j)
{
    json_decref(j->argv);
    free(j->input);
}

int ctl__alerts_init(ctl_t *c, const char *path, char *err, size_t errsize)
{
    c->alerts = util_xcalloc(1, sizeof *c->alerts);
    if (!path)
        return 0;
    json_error_t jerr;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        snprintf(err, errsize, "--alerts %s: %s (line %d)", path, jerr.text, jerr.line);
        return -1;
    }
    json_t *rules = spec_alerts_file(j, path, err, errsize);
    json_decref(j);
    if (!rules)
        return -1;
    c->alerts->rules = rules;
    log_info("ctl", "%zu controller-wide alert rules from %s", json_array_size(rules),
             path);
    return 0;
}

void ctl__alerts_free(ctl_t *c)
{
    ctl_alerts *a = c->alerts;
    if (!a)
        return;
    for (size_t i = 0; i < a->npending; i++)
        s_job_free(&a->pending[i]);
    for (size_t i = 0; i < a->nwaiting; i++)
        s_job_free(&a->waiting[i]);
    free(a->pending);
    free(a->waiting);
    json_decref(a->rules);
    free(a);
    c->alerts = NULL;
}

static void s_push(s_hook_job **v, size_t *n, size_t *cap, s_hook_job job)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 8;
        *v = util_xrealloc(*v, *cap * sizeof **v);
    }
    (*v)[(*n)++] = job;
}

/* Fires one rule: stored once, then event, syslog, hook. 1 fired now. */
static int s_fire(ctl_t *c, ctl_study *s, ctl_trial *t, const json_t *rule,
                  const char *rule_id, const char *text, const json_t *detail)
{
    ctl_alerts *a = c->alerts;
    spec_alert_on on = spec_alert_kind(rule);
    long tid = t ? t->row.id : -1;
    json_t *alert =
        json_pack("{s:s, s:s, s:s, s:o, s:s, s:f}", "rule", rule_id, "on",
                  spec_alert_on_name(on), "study", s->row.name, "trial",
                  t ? json_integer(tid) : json_null(), "text", text, "time", util_wall());
    if (detail)
        json_object_set_new(alert, "detail", json_deep_copy(detail));
    if (ctl__txn(c) != 0) {
        json_decref(alert);
        return 0;
    }
    int rc = store_alert_add(c->store, util_wall(), s->row.id, tid, rule_id,
                             spec_alert_on_name(on), alert);
    if (rc != 1) {
        if (rc < 0)
            log_error("ctl", "cannot store an alert: %s", store_errmsg(c->store));
        json_decref(alert);
        return 0;
    }
    json_t *ev = json_pack("{s:s, s:s, s:s}", "rule", rule_id, "on",
                           spec_alert_on_name(on), "reason", text);
    store_event_add(c->store, util_wall(), s->row.id, tid, "controller", "alert", ev, 1);
    json_decref(ev);
    log_warn("ctl", "alert %s (%s): study %s%s: %s", rule_id, spec_alert_on_name(on),
             s->row.name, t ? " trial" : "", text);
    if (!a->syslog_open) {
        openlog("jizhi", LOG_PID, LOG_USER);
        a->syslog_open = 1;
    }
    if (t)
        syslog(LOG_USER | LOG_WARNING, "alert %s (%s): study %s trial %ld: %s", rule_id,
               spec_alert_on_name(on), s->row.name, tid, text);
    else
        syslog(LOG_USER | LOG_WARNING, "alert %s (%s): study %s: %s", rule_id,
               spec_alert_on_name(on), s->row.name, text);
    json_t *hook = json_object_get(rule, "hook");
    if (hook) {
        json_t *to = json_object_get(rule, "hook_timeout_s");
        s_hook_job job = {json_deep_copy(hook), text_json_dumps(alert, JSON_COMPACT),
                          to ? json_number_value(to) : HOOK_TIMEOUT_DEFAULT_S};
        s_push(&a->pending, &a->npending, &a->pending_cap, job);
    }
    json_decref(alert);
    return 1;
}

/* Checks one array of rules (prefix "study:" or "controller:"). */
static int s_check_rules(ctl_t *c, ctl_study *s, ctl_trial *t, const json_t *rules,
                         const char *prefix, spec_alert_on on, double value,
                         const char *text, const json_t *detail)
{
    int stop = 0;
    for (size_t i = 0; i < json_array_size(rules); i++) {
        json_t *r = json_array_get(rules, i);
        if (spec_alert_kind(r) != on)
            continue;
        if (on == SPEC_ALERT_FAILURES &&
            value < (double)json_integer_value(json_object_get(r, "count")))
            continue;
        if (on == SPEC_ALERT_STALLED &&
            value < json_number_value(json_object_get(r, "seconds")))
            continue;
        char id[64], full[96];
        spec_alert_id(r, i, id, sizeof id);
        snprintf(full, sizeof full, "%s%s", prefix, id);
        int fired = s_fire(c, s, t, r, full, text, detail);
        if (fired && on == SPEC_ALERT_FAILURES &&
            json_is_true(json_object_get(r, "stop_study")))
            stop = 1;
    }
    return stop;
}

int ctl__alert(ctl_t *c, ctl_study *s, ctl_trial *t, spec_alert_on on, double value,
               const char *text, const json_t *detail)
{
    if (!c->alerts)
        return 0;
    int stop = 0;
    if (s->spec->alerts)
        stop |=
            s_check_rules(c, s, t, s->spec->alerts, "study:", on, value, text, detail);
    if (c->alerts->rules)
        stop |= s_check_rules(c, s, t, c->alerts->rules, "controller:", on, value, text,
                              detail);
    return stop;
}

/* fork/exec of one hook; the caller reaps it. -1 when it cannot start. */
static pid_t s_spawn(const s_hook_job *j)
{
    size_t n = json_array_size(j->argv);
    char **argv = util_xcalloc(n + 1, sizeof *argv);
    for (size_t i = 0; i < n; i++)
        argv[i] = (char *)json_string_value(json_array_get(j->argv, i));
    /* the alert as the hook's stdin: an anonymous file, so no pipe can
       block the controller */
    int fd = memfd_create("jizhi-alert", MFD_CLOEXEC);
    size_t len = strlen(j->input);
    if (fd < 0 || write(fd, j->input, len) != (ssize_t)len ||
        lseek(fd, 0, SEEK_SET) != 0) {
        log_error("ctl", "alert hook %s: cannot prepare its input: %s", argv[0],
                  strerror(errno));
        if (fd >= 0)
            close(fd);
        free(argv);
        return -1;
    }
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    pid_t pid = fork();
    if (pid == 0) { /* child: async-signal-safe calls only */
        /* the controller's thread blocks signals; the hook starts clean */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigaction(SIGPIPE, &dfl, NULL);
        setpgid(0, 0);
        dup2(fd, 0);
        if (null >= 0)
            dup2(null, 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    int e = errno;
    close(fd);
    if (null >= 0)
        close(null);
    if (pid < 0)
        log_error("ctl", "alert hook %s: cannot fork: %s", argv[0], strerror(e));
    else
        setpgid(pid, pid); /* also from here: no race with the kill */
    free(argv);
    return pid;
}

static void s_start_waiting(ctl_alerts *a, double now)
{
    size_t k = 0;
    for (; k < a->nwaiting && a->nprocs < MAX_HOOKS; k++) {
        s_hook_job *j = &a->waiting[k];
        pid_t pid = s_spawn(j);
        if (pid > 0) {
            s_hook_proc *p = &a->procs[a->nprocs++];
            p->pid = pid;
            p->deadline = now + j->timeout;
            p->killed = 0;
            snprintf(p->rule, sizeof p->rule, "%s",
                     json_string_value(json_array_get(j->argv, 0)));
        }
        s_job_free(j);
    }
    if (k > 0 && k < a->nwaiting)
        memmove(a->waiting, a->waiting + k, (a->nwaiting - k) * sizeof *a->waiting);
    a->nwaiting -= k;
}

void ctl__alerts_after_commit(ctl_t *c, int committed)
{
    ctl_alerts *a = c->alerts;
    if (!a)
        return;
    for (size_t i = 0; i < a->npending; i++) {
        if (committed)
            s_push(&a->waiting, &a->nwaiting, &a->waiting_cap, a->pending[i]);
        else
            s_job_free(&a->pending[i]);
    }
    a->npending = 0;
    if (committed)
        s_start_waiting(a, util_now());
}

/* Reaps finished hooks, kills overdue ones. */
static void s_reap(ctl_alerts *a, double now)
{
    for (size_t i = 0; i < a->nprocs;) {
        s_hook_proc *p = &a->procs[i];
        int st;
        pid_t w = waitpid(p->pid, &st, WNOHANG);
        if (w == p->pid || (w < 0 && errno == ECHILD)) {
            if (w == p->pid && WIFEXITED(st) && WEXITSTATUS(st) != 0)
                log_warn("ctl", "alert hook %s exited with status %d%s", p->rule,
                         WEXITSTATUS(st),
                         WEXITSTATUS(st) == 127 ? " (could not be run)" : "");
            else if (w == p->pid && WIFSIGNALED(st))
                log_warn("ctl", "alert hook %s killed by signal %d%s", p->rule,
                         WTERMSIG(st), p->killed ? " after its timeout" : "");
            a->procs[i] = a->procs[--a->nprocs];
            continue;
        }
        if (!p->killed && now > p->deadline) {
            kill(-p->pid, SIGKILL);
            p->killed = 1;
        }
        i++;
    }
}

/* Stalled rules of one array (bits from `bit0` of t->stall_mask: each
   rule is looked at once per trial, the store deduplicates across
   restarts). At most 16 stalled rules per array are checked. */
static void s_check_stalled(ctl_t *c, ctl_study *s, ctl_trial *t, const json_t *rules,
                            const char *prefix, int bit0, double silent)
{
    for (size_t i = 0; i < json_array_size(rules) && i < 16; i++) {
        json_t *r = json_array_get(rules, i);
        unsigned bit = 1u << (bit0 + (int)i);
        if (spec_alert_kind(r) != SPEC_ALERT_STALLED || (t->stall_mask & bit) ||
            silent < json_number_value(json_object_get(r, "seconds")))
            continue;
        t->stall_mask |= bit;
        char id[64], full[96], text[200];
        spec_alert_id(r, i, id, sizeof id);
        snprintf(full, sizeof full, "%s%s", prefix, id);
        snprintf(text, sizeof text,
                 "trial %ld reported nothing for %.0f s (last step %ld)", t->row.id,
                 silent, t->row.last_step);
        json_t *d = json_pack("{s:f, s:I}", "silent_s", silent, "last_step",
                              (json_int_t)t->row.last_step);
        s_fire(c, s, t, r, full, text, d);
        json_decref(d);
    }
}

void ctl__alerts_tick(ctl_t *c, double now)
{
    ctl_alerts *a = c->alerts;
    if (!a)
        return;
    s_reap(a, now);
    s_start_waiting(a, now);
    for (size_t i = 0; i < c->nstudies; i++) {
        ctl_study *s = c->studies[i];
        if (s->row.state != STUDY_RUNNING || (!a->rules && !s->spec->alerts))
            continue;
        for (size_t k = 0; k < s->ntrials; k++) {
            ctl_trial *t = s->trials[k];
            if (t->row.state != TRIAL_RUNNING || t->plan != PLAN_NONE)
                continue;
            double silent = now - t->last_report;
            if (s->spec->alerts)
                s_check_stalled(c, s, t, s->spec->alerts, "study:", 0, silent);
            if (a->rules)
                s_check_stalled(c, s, t, a->rules, "controller:", 16, silent);
        }
    }
}
