/*  disp_slurm.c - the Slurm backend: each trial attempt is one Slurm job.

    start   writes <dir>/trial-<id>.<attempt>.sbatch (a /bin/sh script that
            execs the trial's argv, every word single-quoted; with ranks
            > 1 it execs `srun --ntasks=R` with the argv, so srun starts
            the MPI ranks, and the job asks --ntasks=R; with trial.launcher
            "torch" srun runs each rank through disp_torch.c's wrapper, which
            sets torchrun's variables) and runs sbatch
            --parsable in the trial's environment, which sbatch exports to
            the job. The job id is the trial's `pid`.
    refresh at most every poll_s, one `squeue -h -t all -j ID,...` for the
            jobs still alive; a job that reached an end state, or that
            squeue no longer lists, is looked up once with `scontrol show
            job -o` (or sacct, when the cluster has accounting) for its
            exit code and state.
    signal  SIGTERM: `scancel --signal=TERM --full` (the batch script and
            its steps) once the job runs, a plain `scancel` while it waits
            in the queue; SIGKILL: `scancel --signal=KILL --full`, then
            `scancel`. SIGCONT is not forwarded (Slurm resumes a job it
            cancels by itself).

    How a job ended (disp__end): COMPLETED/FAILED give the exit code or
    signal from ExitCode=code:signal; TIMEOUT and DEADLINE give "timeout";
    PREEMPTED, NODE_FAIL, BOOT_FAIL, a requeue (REQUEUED states, or PENDING
    again after it ran) and CANCELLED by someone other than this dispatcher
    give "lost", which the controller retries as a new attempt. A requeued
    job is cancelled first: jizhi, not Slurm, decides about a new attempt.

    Every command runs directly (no shell), with a time limit, from the
    dispatcher's thread; it waits for its own child only.
*/
#define _GNU_SOURCE
#include "disp_int.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TAG "slurm"
#define SLURM_CMD_TIMEOUT_S 30.0
#define SLURM_ADOPT_TRIES 3 /* squeue asked at start to find jobs to take back */
#define SLURM_OUT_MAX (256 * 1024)

extern char **environ;

/* What the backend knows about one job. */
typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_ENDED } s_job_state;

typedef struct {
    long id;
    s_job_state state;
    int cancelled; /* we ran scancel on it */
    int ran;       /* it started on a node (seen RUNNING, or ended after running) */
    int unseen;    /* squeue rounds in a row that did not list it */
    disp__end end; /* valid in JOB_ENDED */
} s_job;

typedef struct {
    disp__backend base;
    char *partition, *account, *name;
    double poll_s, kill_grace_s;
    double last_poll;
    int have_sacct;  /* sacct answers (slurmdbd is there) */
    int squeue_down; /* the last squeue failed (warned once) */
} s_slurm;

/* ---- running a command ---------------------------------------------------- */

/* Runs argv (argv[0] searched in PATH; no shell) with envp (NULL: the
   dispatcher's own), stdin /dev/null, for at most timeout_s. Its stdout
   goes to out and its stderr to errb (each truncated, NUL-terminated;
   either may be NULL). Returns the exit status (0..255), or -1 with errb
   saying why when it could not run, was killed or timed out. */
static int s_cmd(char *const argv[], char **envp, char *out, size_t outsz, char *errb,
                 size_t errsz, double timeout_s)
{
    char scratch[512];
    if (!errb) {
        errb = scratch;
        errsz = sizeof scratch;
    }
    if (out && outsz)
        out[0] = 0;
    errb[0] = 0;
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nul < 0 || pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
        snprintf(errb, errsz, "%s: cannot create pipes: %s", argv[0], strerror(errno));
        for (int i = 0; i < 5; i++) {
            int fd = (int[]){nul, po[0], po[1], pe[0], pe[1]}[i];
            if (fd >= 0)
                close(fd);
        }
        return -1;
    }
    char **env = envp ? envp : environ;
    pid_t pid = fork();
    if (pid == 0) {
        /* async-signal-safe calls only: the dispatcher may share a process */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        if (dup2(nul, 0) < 0 || dup2(po[1], 1) < 0 || dup2(pe[1], 2) < 0)
            _exit(126);
        environ = env;
        execvp(argv[0], argv);
        _exit(127);
    }
    close(nul);
    close(po[1]);
    close(pe[1]);
    if (pid < 0) {
        snprintf(errb, errsz, "%s: fork: %s", argv[0], strerror(errno));
        close(po[0]);
        close(pe[0]);
        return -1;
    }
    size_t no = 0, ne = 0;
    char sink[4096];
    struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    double deadline = util_now() + timeout_s;
    int timed_out = 0;
    while (fds[0].fd >= 0 || fds[1].fd >= 0) {
        double left = deadline - util_now();
        if (left <= 0) {
            timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        int r = poll(fds, 2, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !fds[i].revents)
                continue;
            char *buf = i == 0 ? out : errb;
            size_t sz = i == 0 ? outsz : errsz;
            size_t *n = i == 0 ? &no : &ne;
            ssize_t got;
            if (buf && *n + 1 < sz)
                got = read(fds[i].fd, buf + *n, sz - 1 - *n);
            else
                got = read(fds[i].fd, sink, sizeof sink);
            if (got > 0 && buf && *n + 1 < sz) {
                *n += (size_t)got;
                buf[*n] = 0;
            } else if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
                close(fds[i].fd);
                fds[i].fd = -1;
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0)
            close(fds[i].fd);
    int status = 0;
    pid_t w;
    do
        w = waitpid(pid, &status, 0);
    while (w < 0 && errno == EINTR);
    /* one line is enough for messages */
    char *nl = strchr(errb, '\n');
    if (nl && nl[1] == 0)
        *nl = 0;
    if (timed_out) {
        snprintf(errb, errsz, "%s did not answer within %g s", argv[0], timeout_s);
        return -1;
    }
    if (w < 0 || !WIFEXITED(status)) {
        snprintf(errb, errsz, "%s was killed by signal %d", argv[0],
                 w < 0 ? 0 : WTERMSIG(status));
        return -1;
    }
    if (WEXITSTATUS(status) == 127 && !errb[0]) {
        snprintf(errb, errsz, "cannot run %s (not installed, or not on PATH)", argv[0]);
        return -1;
    }
    return WEXITSTATUS(status);
}

/* ---- job states ------------------------------------------------------------ */

typedef enum { ST_QUEUED, ST_RUNNING, ST_REQUEUED, ST_ENDED, ST_UNKNOWN } s_kind;

/* How an ended job ended, for the report. */
typedef enum {
    END_EXIT,      /* ExitCode=code:signal tells */
    END_CANCELLED, /* ours (killed) or someone else's (lost) */
    END_TIMEOUT,   /* Slurm's time limit */
    END_OOM,       /* killed for memory */
    END_PREEMPTED, /* lost */
    END_NODE_FAIL, /* lost */
    END_OTHER,     /* lost */
} s_end_kind;

/* What a Slurm job state (squeue %T, scontrol JobState, sacct State)
   means here. */
static const struct {
    const char *name;
    s_kind kind;
    s_end_kind end; /* for ST_ENDED */
} s_states[] = {
    {"PENDING", ST_QUEUED, 0},
    {"CONFIGURING", ST_QUEUED, 0},
    {"RESV_DEL_HOLD", ST_QUEUED, 0},
    {"RUNNING", ST_RUNNING, 0},
    {"COMPLETING", ST_RUNNING, 0},
    {"SUSPENDED", ST_RUNNING, 0},
    {"STOPPED", ST_RUNNING, 0},
    {"SIGNALING", ST_RUNNING, 0},
    {"STAGE_OUT", ST_RUNNING, 0},
    {"RESIZING", ST_RUNNING, 0},
    {"REQUEUED", ST_REQUEUED, 0},
    {"REQUEUE_FED", ST_REQUEUED, 0},
    {"REQUEUE_HOLD", ST_REQUEUED, 0},
    {"SPECIAL_EXIT", ST_REQUEUED, 0},
    {"COMPLETED", ST_ENDED, END_EXIT},
    {"FAILED", ST_ENDED, END_EXIT},
    {"CANCELLED", ST_ENDED, END_CANCELLED},
    {"TIMEOUT", ST_ENDED, END_TIMEOUT},
    {"DEADLINE", ST_ENDED, END_TIMEOUT},
    {"NODE_FAIL", ST_ENDED, END_NODE_FAIL},
    {"BOOT_FAIL", ST_ENDED, END_NODE_FAIL},
    {"PREEMPTED", ST_ENDED, END_PREEMPTED},
    {"OUT_OF_MEMORY", ST_ENDED, END_OOM},
    {"REVOKED", ST_ENDED, END_OTHER},
};

/* The row of state st, or -1 when Slurm has a state this table lacks. */
static int s_state_row(const char *st)
{
    for (size_t i = 0; i < sizeof s_states / sizeof s_states[0]; i++)
        if (!strcmp(st, s_states[i].name))
            return (int)i;
    return -1;
}

static s_kind s_classify(const char *st)
{
    int r = s_state_row(st);
    return r < 0 ? ST_UNKNOWN : s_states[r].kind;
}

/* The one transition function of a job: QUEUED -> RUNNING -> ENDED, or
   QUEUED -> ENDED. Nothing leaves ENDED; a job back in the queue after it
   ran is ended as lost by its caller, not moved back. */
static void s_job_move(s_job *j, s_job_state to)
{
    static const char *const names[] = {"queued", "running", "ended"};
    int ok = (j->state == JOB_QUEUED && to != JOB_QUEUED) ||
             (j->state == JOB_RUNNING && to == JOB_ENDED) || j->state == to;
    if (!ok) {
        log_error(TAG, "job %ld: no move from %s to %s", j->id, names[j->state],
                  names[to]);
        return;
    }
    if (to == JOB_RUNNING || (to == JOB_ENDED && j->state == JOB_RUNNING))
        j->ran = 1;
    j->state = to;
}

/* Ends j as lost, with what happened. */
static void s_end_lost(s_job *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void s_end_lost(s_job *j, const char *fmt, ...)
{
    memset(&j->end, 0, sizeof j->end);
    j->end.how = "lost";
    j->end.code = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->end.what, sizeof j->end.what, fmt, ap);
    va_end(ap);
    s_job_move(j, JOB_ENDED);
}

/* Fills j->end from a final state and ExitCode=code:sig. */
static void s_set_end(s_job *j, const char *state, int code, int sig)
{
    int r = s_state_row(state);
    s_end_kind kind = r < 0 || s_states[r].kind != ST_ENDED ? END_OTHER : s_states[r].end;
    if (kind != END_CANCELLED)
        j->ran = 1; /* only a cancel ends a job that never ran */
    disp__end *e = &j->end;
    switch (kind) {
    case END_CANCELLED:
        if (!j->cancelled) {
            s_end_lost(j,
                       "Slurm job %ld was cancelled outside jizhi (scancel by a user or "
                       "an administrator)",
                       j->id);
            return;
        }
        memset(e, 0, sizeof *e);
        e->code = -1;
        e->sig = sig > 0 ? sig : SIGTERM;
        snprintf(e->what, sizeof e->what, "Slurm job %ld cancelled (scancel)", j->id);
        break;
    case END_EXIT:
        memset(e, 0, sizeof *e);
        e->code = -1;
        if (sig > 0) {
            e->sig = sig;
            snprintf(e->what, sizeof e->what,
                     "killed by signal %d (%s); Slurm job %ld %s", sig, strsignal(sig),
                     j->id, state);
        } else {
            e->code = code;
            snprintf(e->what, sizeof e->what, "exit code %d", code);
        }
        break;
    case END_TIMEOUT:
        memset(e, 0, sizeof *e);
        e->code = -1;
        e->how = "timeout";
        e->sig = sig;
        snprintf(e->what, sizeof e->what, "Slurm job %ld reached its time limit (%s)",
                 j->id, state);
        break;
    case END_OOM:
        memset(e, 0, sizeof *e);
        e->code = -1;
        e->sig = SIGKILL;
        snprintf(e->what, sizeof e->what,
                 "Slurm job %ld ran out of memory (OUT_OF_MEMORY)", j->id);
        break;
    case END_PREEMPTED:
        s_end_lost(j, "Slurm job %ld was preempted", j->id);
        return;
    case END_NODE_FAIL:
        s_end_lost(j, "Slurm job %ld: its node failed (%s)", j->id, state);
        return;
    case END_OTHER:
        s_end_lost(j, "Slurm job %ld ended in state %.40s", j->id, state);
        return;
    }
    s_job_move(j, JOB_ENDED);
}

/* The value of KEY= in a `scontrol show job -o` line (words separated by
   spaces), copied into buf. 0, or -1 when absent. */
static int s_field(const char *line, const char *key, char *buf, size_t size)
{
    size_t kl = strlen(key);
    for (const char *p = line; (p = strstr(p, key)); p += kl) {
        if (p != line && p[-1] != ' ')
            continue;
        p += kl;
        size_t n = strcspn(p, " \n");
        if (n >= size)
            n = size - 1;
        memcpy(buf, p, n);
        buf[n] = 0;
        return 0;
    }
    return -1;
}

/* Asks scontrol, then sacct, how job j ended. 0 with j->end set, or -1
   when neither knows the job. */
static int s_lookup_end(s_slurm *s, s_job *j)
{
    char id[32], out[8192], err[512], state[64], exitc[64];
    snprintf(id, sizeof id, "%ld", j->id);
    char *sc[] = {"scontrol", "show", "job", "-o", id, NULL};
    if (s_cmd(sc, NULL, out, sizeof out, err, sizeof err, SLURM_CMD_TIMEOUT_S) == 0 &&
        s_field(out, "JobState=", state, sizeof state) == 0 &&
        s_field(out, "ExitCode=", exitc, sizeof exitc) == 0) {
        if (s_classify(state) != ST_ENDED)
            return 1; /* not over yet (COMPLETING): ask again next round */
        int code = 0, sig = 0;
        sscanf(exitc, "%d:%d", &code, &sig);
        s_set_end(j, state, code, sig);
        return 0;
    }
    if (s->have_sacct) {
        char *sa[] = {"sacct", "-n", "-P", "-X", "-j", id, "-o", "State,ExitCode", NULL};
        if (s_cmd(sa, NULL, out, sizeof out, err, sizeof err, SLURM_CMD_TIMEOUT_S) == 0 &&
            out[0]) {
            /* "CANCELLED by 0|0:15" */
            char *bar = strchr(out, '|');
            if (bar) {
                *bar = 0;
                int code = 0, sig = 0;
                sscanf(bar + 1, "%d:%d", &code, &sig);
                out[strcspn(out, " ")] = 0;
                if (s_classify(out) == ST_ENDED) {
                    s_set_end(j, out, code, sig);
                    return 0;
                }
                if (s_classify(out) != ST_UNKNOWN)
                    return 1;
            }
        }
    }
    return -1;
}

static void s_cancel(s_job *j, int full_kill)
{
    char id[32], err[512];
    snprintf(id, sizeof id, "%ld", j->id);
    j->cancelled = 1;
    if (full_kill) {
        char *k[] = {"scancel", "--signal=KILL", "--full", id, NULL};
        if (s_cmd(k, NULL, NULL, 0, err, sizeof err, SLURM_CMD_TIMEOUT_S) != 0)
            log_warn(TAG, "scancel --signal=KILL %s: %s", id, err);
    }
    char *c[] = {"scancel", id, NULL};
    if (s_cmd(c, NULL, NULL, 0, err, sizeof err, SLURM_CMD_TIMEOUT_S) != 0)
        log_warn(TAG, "scancel %s: %s", id, err);
}

/* ---- the operations -------------------------------------------------------- */

/* Appends 'word' to the script, quoted for /bin/sh. */
static void s_quote(FILE *f, const char *w)
{
    fputc('\'', f);
    for (; *w; w++) {
        if (*w == '\'')
            fputs("'\\''", f);
        else
            fputc(*w, f);
    }
    fputc('\'', f);
}

/* Slurm expands %j and friends in --output/--error: "%%" is a '%'. */
static char *s_pattern_escape(const char *path)
{
    size_t n = 0;
    for (const char *p = path; *p; p++)
        n += *p == '%' ? 2 : 1;
    char *o = malloc(n + 1), *q = o;
    if (!o)
        return NULL;
    for (const char *p = path; *p; p++) {
        if (*p == '%')
            *q++ = '%';
        *q++ = *p;
    }
    *q = 0;
    return o;
}

static int s_start(disp__backend *b, const disp__spawn_args *a, disp__proc *p, char *err,
                   size_t errsize)
{
    s_slurm *s = (s_slurm *)b;
    const disp__start *st = a->st;
    int ranks = st->ranks > 1 ? st->ranks : 1;
    int torch = st->launcher == SPEC_LAUNCH_TORCH; /* srun starts even one rank */
    memset(p, 0, sizeof *p);
    p->pidfd = p->exec_fd = -1;
    p->trial = st->trial;
    p->attempt = st->attempt;
    p->out_path = util_strf("%s/trial-%ld.%ld.out", a->dir, st->trial, st->attempt);
    p->err_path = util_strf("%s/trial-%ld.%ld.err", a->dir, st->trial, st->attempt);
    p->argv0 = strdup(json_string_value(json_array_get(st->argv, 0)));
    char *script = util_strf("%s/trial-%ld.%ld.sbatch", a->dir, st->trial, st->attempt);
    char *o_arg = NULL, *e_arg = NULL, *name = NULL, *comment = NULL, *time_arg = NULL;
    char *gres = NULL, *part = NULL, *acct = NULL, *ntasks = NULL, *esc = NULL;
    char *chdir_arg = NULL;
    char **envp = NULL;
    json_t *env = NULL;
    disp__start st_ranks;
    disp__spawn_args a_ranks;
    s_job *j = calloc(1, sizeof *j);
    int rc = -1;
    if (!p->out_path || !p->err_path || !p->argv0 || !script || !j) {
        snprintf(err, errsize, "out of memory");
        goto out;
    }

    /* the script: exec the argv unchanged (srun starts the ranks) */
    /* the script names the trial's argv, the logs hold its output: the
       dispatcher's user's only (0600); Slurm keeps the mode of a log file
       that exists */
    for (int i = 0; i < 2; i++) {
        const char *log = i ? p->err_path : p->out_path;
        int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0600);
        if (lfd < 0 || fchmod(lfd, 0600) != 0) {
            snprintf(err, errsize, "cannot create %s: %s", log, strerror(errno));
            if (lfd >= 0)
                close(lfd);
            goto out;
        }
        close(lfd);
    }
    int sfd = open(script, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0600);
    FILE *f = sfd >= 0 && fchmod(sfd, 0600) == 0 ? fdopen(sfd, "w") : NULL;
    if (!f) {
        snprintf(err, errsize, "cannot write %s: %s", script, strerror(errno));
        if (sfd >= 0)
            close(sfd);
        goto out;
    }
    fprintf(f, "#!/bin/sh\n# jizhi: trial %ld attempt %ld of study ", st->trial,
            st->attempt);
    for (const char *c = st->study; *c; c++)
        fputc(*c == '\n' || *c == '\r' ? ' ' : *c, f);
    fprintf(f, ", dispatcher %s\n%sexec", s->name, torch ? disp__torch_slurm_head() : "");
    if (ranks > 1 || torch)
        fprintf(f, " srun --ntasks=%d --kill-on-bad-exit=1 --", ranks);
    if (torch) { /* each task: torchrun's variables from Slurm's, then the argv */
        fputs(" /bin/sh -c ", f);
        s_quote(f, disp__torch_slurm_task());
        fputs(" jizhi-rank", f);
    }
    for (size_t i = 0; i < json_array_size(st->argv); i++) {
        fputc(' ', f);
        s_quote(f, json_string_value(json_array_get(st->argv, i)));
    }
    fputc('\n', f);
    if (fclose(f) != 0) {
        snprintf(err, errsize, "cannot write %s: %s", script, strerror(errno));
        goto out;
    }

    esc = s_pattern_escape(p->out_path);
    o_arg = esc ? util_strf("--output=%s", esc) : NULL;
    free(esc);
    esc = s_pattern_escape(p->err_path);
    e_arg = esc ? util_strf("--error=%s", esc) : NULL;
    free(esc);
    name = util_strf("--job-name=jizhi-%ld.%ld", st->trial, st->attempt);
    comment = util_strf("--comment=jizhi %s trial %ld attempt %ld%s%s", s->name,
                        st->trial, st->attempt, st->tag[0] ? " tag " : "", st->tag);
    ntasks = util_strf("--ntasks=%d", ranks);
    if (!o_arg || !e_arg || !name || !comment || !ntasks) {
        snprintf(err, errsize, "out of memory");
        goto out;
    }
    char *argv[20];
    int n = 0;
    argv[n++] = "sbatch";
    argv[n++] = "--parsable";
    argv[n++] = "--no-requeue";
    argv[n++] = name;
    argv[n++] = comment;
    argv[n++] = o_arg;
    argv[n++] = e_arg;
    argv[n++] = ntasks;
    if (st->cwd) { /* trial.cwd: the job starts there */
        if (!(chdir_arg = util_strf("--chdir=%s", st->cwd)))
            goto oom;
        argv[n++] = chdir_arg;
    }
    if (st->timeout_s > 0) {
        /* a backstop after our own timeout and kill grace, in whole minutes */
        long min = (long)ceil((st->timeout_s + s->kill_grace_s + 30.0) / 60.0);
        if (!(time_arg = util_strf("--time=%ld", min)))
            goto oom;
        argv[n++] = time_arg;
    }
    if (st->gpus > 0) {
        /* per rank: a one-task job asks the node, a multi-rank one each task */
        if (!(gres = ranks > 1 || torch ? util_strf("--gpus-per-task=%d", st->gpus)
                                        : util_strf("--gres=gpu:%d", st->gpus)))
            goto oom;
        argv[n++] = gres;
    }
    if (s->partition) {
        if (!(part = util_strf("--partition=%s", s->partition)))
            goto oom;
        argv[n++] = part;
    }
    if (s->account) {
        if (!(acct = util_strf("--account=%s", s->account)))
            goto oom;
        argv[n++] = acct;
    }
    argv[n++] = script;
    argv[n] = NULL;

    /* sbatch exports its environment (the trial's) to the job */
    /* what the local backend's mpirun sets too */
    if (ranks > 1 || torch) {
        char num[32];
        if (!(env = st->env ? json_deep_copy(st->env) : json_object()))
            goto oom;
        snprintf(num, sizeof num, "%d", ranks);
        json_object_set_new(env, "JIZHI_RANKS", json_string(num));
        snprintf(num, sizeof num, "%d", st->gpus);
        json_object_set_new(env, "JIZHI_GPUS_PER_RANK", json_string(num));
        st_ranks = *st;
        st_ranks.env = env;
        a_ranks = *a;
        a_ranks.st = &st_ranks;
        a = &a_ranks;
    }
    if (!(envp = disp__build_env(a)))
        goto oom;
    char outb[512], errb[1024];
    int x = s_cmd(argv, envp, outb, sizeof outb, errb, sizeof errb, SLURM_CMD_TIMEOUT_S);
    char *end = NULL;
    long id = x == 0 ? strtol(outb, &end, 10) : 0;
    if (x != 0 || id <= 0 || end == outb || (*end && *end != ';' && *end != '\n')) {
        snprintf(err, errsize, "sbatch failed: %s", errb[0] ? errb : outb);
        goto out;
    }
    j->id = id;
    j->state = JOB_QUEUED; /* where every job starts */
    p->pid = (pid_t)id;
    p->job = j;
    j = NULL;
    log_debug(TAG, "trial %ld.%ld: submitted %s as job %ld", st->trial, st->attempt,
              script, id);
    rc = 0;
    goto out;
oom:
    snprintf(err, errsize, "out of memory");
out:
    free(j);
    free(script);
    free(o_arg);
    free(e_arg);
    free(name);
    free(comment);
    free(time_arg);
    free(gres);
    free(chdir_arg);
    free(part);
    free(acct);
    free(ntasks);
    disp__strv_free(envp);
    json_decref(env);
    if (rc != 0) {
        disp__proc_fini(p);
        p->pid = 0;
    }
    return rc;
}

static s_job *s_job_of(disp__proc **procs, size_t n, long id)
{
    for (size_t i = 0; i < n; i++) {
        s_job *j = procs[i]->job;
        if (j && j->id == id)
            return j;
    }
    return NULL;
}

/* A job Slurm requeued or put back in the queue after it ran: cancel it and
   call the attempt lost. */
static void s_requeued(s_job *j, const char *state)
{
    log_warn(TAG,
             "job %ld was requeued by Slurm (%s); cancelling it, jizhi retries the "
             "trial as a new attempt",
             j->id, state);
    s_cancel(j, 0);
    s_end_lost(j, "Slurm job %ld was requeued (%s: preempted, or its node failed)", j->id,
               state);
}

static void s_refresh(disp__backend *b, disp__proc **procs, size_t n, double now)
{
    s_slurm *s = (s_slurm *)b;
    if (now - s->last_poll < s->poll_s)
        return;
    s->last_poll = now;
    int live = 0;
    for (size_t i = 0; i < n; i++) {
        s_job *j = procs[i]->job;
        live |= j && j->state != JOB_ENDED;
    }
    if (!live)
        return;
    /* all of the user's jobs Slurm still remembers, ours picked out here:
       asking for ids (-j) fails as a whole once one of them is forgotten */
    char *argv[] = {"squeue", "-h", "--me", "-t", "all", "-o", "%i|%T", NULL};
    char *out = malloc(SLURM_OUT_MAX), err[1024];
    if (!out)
        return;
    if (s_cmd(argv, NULL, out, SLURM_OUT_MAX, err, sizeof err, SLURM_CMD_TIMEOUT_S) !=
        0) {
        if (!s->squeue_down)
            log_warn(TAG, "squeue failed (%s); job states unknown until it answers", err);
        s->squeue_down = 1;
        free(out);
        return;
    }
    if (s->squeue_down)
        log_info(TAG, "squeue answers again");
    s->squeue_down = 0;
    for (size_t i = 0; i < n; i++)
        if (procs[i]->job)
            ((s_job *)procs[i]->job)->unseen++;
    for (char *line = out, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        char *bar = strchr(line, '|');
        if (!bar)
            continue;
        *bar = 0;
        s_job *j = s_job_of(procs, n, strtol(line, NULL, 10));
        if (!j || j->state == JOB_ENDED)
            continue;
        j->unseen = 0;
        const char *state = bar + 1;
        switch (s_classify(state)) {
        case ST_QUEUED:
            if (j->state == JOB_RUNNING && !j->cancelled)
                s_requeued(j, state);
            break;
        case ST_RUNNING:
            s_job_move(j, JOB_RUNNING);
            break;
        case ST_REQUEUED:
            if (!j->cancelled)
                s_requeued(j, state);
            break;
        case ST_ENDED:
            if (s_lookup_end(s, j) < 0) /* no exit code to be had */
                s_set_end(j, state, 0, 0);
            break;
        case ST_UNKNOWN:
            log_debug(TAG, "job %ld: state %s", j->id, state);
            break;
        }
    }
    free(out);
    /* not listed (squeue's output cut short, or slurmctld forgot it) */
    for (size_t i = 0; i < n; i++) {
        s_job *j = procs[i]->job;
        if (!j || j->state == JOB_ENDED || j->unseen == 0)
            continue;
        if (s_lookup_end(s, j) >= 0 || j->unseen < 3)
            continue;
        const char *what = "is gone and neither scontrol nor sacct knows how it ended";
        if (!j->cancelled) {
            s_end_lost(j, "Slurm job %ld %s", j->id, what);
            continue;
        }
        memset(&j->end, 0, sizeof j->end); /* ours, and over */
        j->end.code = -1;
        j->end.unknown = 1;
        snprintf(j->end.what, sizeof j->end.what, "Slurm job %ld %s", j->id, what);
        s_job_move(j, JOB_ENDED);
    }
}

static int s_poll(disp__backend *b, disp__proc *p, disp__end *end)
{
    (void)b;
    s_job *j = p->job;
    if (!j)
        return 0;
    if (j->state == JOB_RUNNING || j->ran)
        p->running = 1; /* ran, even when it ended between two squeues */
    if (j->state != JOB_ENDED)
        return 0;
    *end = j->end;
    return 1;
}

static void s_signal(disp__backend *b, disp__proc *p, int sig)
{
    (void)b;
    s_job *j = p->job;
    if (!j || j->state == JOB_ENDED)
        return;
    if (sig == SIGKILL) {
        s_cancel(j, 1);
        return;
    }
    if (sig != SIGTERM)
        return;
    if (j->state != JOB_RUNNING) {
        s_cancel(j, 0); /* still queued: nothing to signal */
        return;
    }
    char id[32], err[512];
    snprintf(id, sizeof id, "%ld", j->id);
    char *argv[] = {"scancel", "--signal=TERM", "--full", id, NULL};
    j->cancelled = 1;
    if (s_cmd(argv, NULL, NULL, 0, err, sizeof err, SLURM_CMD_TIMEOUT_S) != 0) {
        log_warn(TAG, "scancel --signal=TERM %s: %s; cancelling it", id, err);
        s_cancel(j, 0);
    }
}

/* Jobs are found again by their comment, "jizhi NAME trial T attempt A tag H"
   (H: the attempt's tag, which the controller checks; older jobs lack it),
   among the user's jobs that are still queued or running. */
static size_t s_adopt(disp__backend *b, disp__proc ***out)
{
    s_slurm *s = (s_slurm *)b;
    *out = NULL;
    char *argv[] = {"squeue", "-h", "--me", "-o", "%i|%T|%o|%k", NULL};
    char *buf = malloc(SLURM_OUT_MAX), err[1024];
    char *prefix = util_strf("|jizhi %s trial ", s->name);
    disp__proc **v = NULL;
    size_t n = 0, cap = 0;
    if (!buf || !prefix)
        goto out;
    /* a busy slurmctld can refuse a moment: its jobs would be lost and run
       again, so ask a few times */
    int tries = 0;
    while (s_cmd(argv, NULL, buf, SLURM_OUT_MAX, err, sizeof err, SLURM_CMD_TIMEOUT_S) !=
           0) {
        if (++tries == SLURM_ADOPT_TRIES) {
            log_warn(TAG,
                     "squeue --me: %s (%d tries); jobs of an earlier run are not "
                     "taken back",
                     err, tries);
            goto out;
        }
        log_info(TAG, "squeue --me: %s; asking again in 1 s", err);
        sleep(1);
    }
    for (char *line = buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        /* id|state|script|comment: the script path may hold anything but
           our comment's prefix */
        char *b1 = strchr(line, '|'), *b2 = b1 ? strchr(b1 + 1, '|') : NULL;
        char *b3 = b2 ? strstr(b2, prefix) : NULL;
        long trial, attempt;
        char tag[IDENT_TAG_LEN + 1] = "";
        int got = b3 ? sscanf(b3 + strlen(prefix), "%ld attempt %ld tag %16[0-9a-f]",
                              &trial, &attempt, tag)
                     : 0;
        if (got < 2 || (got == 3 && strlen(tag) != IDENT_TAG_LEN))
            continue;
        *b1 = *b2 = *b3 = 0;
        const char *state = b1 + 1, *script = b2 + 1;
        long id = strtol(line, NULL, 10);
        size_t sl = strlen(script);
        s_kind kind = s_classify(state);
        if (id <= 0 || (kind != ST_QUEUED && kind != ST_RUNNING) || sl < 7 ||
            strcmp(script + sl - 7, ".sbatch"))
            continue;
        if (n == cap) {
            disp__proc **nv = realloc(v, (cap = cap * 2 + 8) * sizeof *nv);
            if (!nv)
                break;
            v = nv;
        }
        /* the logs are beside the script: trial-T.A.sbatch -> .out, .err */
        char *out_p = util_strf("%.*s.out", (int)(sl - 7), script);
        char *err_p = util_strf("%.*s.err", (int)(sl - 7), script);
        int ranks = 1;
        char ids[32], info[8192], tasks[32];
        snprintf(ids, sizeof ids, "%ld", id);
        char *sc[] = {"scontrol", "show", "job", "-o", ids, NULL};
        if (s_cmd(sc, NULL, info, sizeof info, err, sizeof err, SLURM_CMD_TIMEOUT_S) ==
                0 &&
            s_field(info, "NumTasks=", tasks, sizeof tasks) == 0 && atoi(tasks) > 1)
            ranks = atoi(tasks);
        disp__proc *p = calloc(1, sizeof *p);
        s_job *j = calloc(1, sizeof *j);
        if (p) {
            p->pidfd = p->exec_fd = -1;
            p->out_path = out_p;
            p->err_path = err_p;
            p->argv0 = strdup(script);
            out_p = err_p = NULL;
        }
        free(out_p);
        free(err_p);
        if (!p || !j || !p->out_path || !p->err_path || !p->argv0) {
            free(j);
            if (p)
                disp__proc_fini(p);
            free(p);
            break;
        }
        p->trial = trial;
        p->attempt = attempt;
        p->pid = (pid_t)id;
        p->ranks = ranks;
        p->adopted = 1;
        memcpy(p->tag, tag, sizeof p->tag);
        j->id = id;
        j->state = JOB_QUEUED;
        if (kind == ST_RUNNING)
            s_job_move(j, JOB_RUNNING);
        p->job = j;
        v[n++] = p;
        log_info(TAG, "took back job %ld (%s): trial %ld attempt %ld%s%s", id, state,
                 trial, attempt, tag[0] ? " tag " : "", tag);
    }
out:
    free(buf);
    free(prefix);
    *out = v;
    return n;
}

static void s_fini(disp__backend *b, disp__proc *p)
{
    (void)b;
    free(p->job);
    p->job = NULL;
    disp__proc_fini(p);
}

static void s_destroy(disp__backend *b)
{
    s_slurm *s = (s_slurm *)b;
    if (!s)
        return;
    free(s->partition);
    free(s->account);
    free(s->name);
    free(s);
}

static const disp__backend_ops s_ops = {
    .name = "slurm",
    .id_word = "job",
    .start = s_start,
    .refresh = s_refresh,
    .poll = s_poll,
    .signal = s_signal,
    .adopt = s_adopt,
    .fini = s_fini,
    .destroy = s_destroy,
};

disp__backend *disp__slurm_new(const disp__slurm_config *cfg)
{
    s_slurm *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->base.ops = &s_ops;
    s->poll_s = cfg->poll_s > 0 ? cfg->poll_s : 1.0;
    s->kill_grace_s = cfg->kill_grace_s;
    s->last_poll = -INFINITY;
    s->partition = cfg->partition ? strdup(cfg->partition) : NULL;
    s->account = cfg->account ? strdup(cfg->account) : NULL;
    s->name = strdup(cfg->name ? cfg->name : "jizhi");
    if ((cfg->partition && !s->partition) || (cfg->account && !s->account) || !s->name) {
        s_destroy(&s->base);
        return NULL;
    }
    char out[256], err[512];
    char *ver[] = {"sbatch", "--version", NULL};
    if (s_cmd(ver, NULL, out, sizeof out, err, sizeof err, SLURM_CMD_TIMEOUT_S) != 0) {
        fprintf(stderr,
                "jizhi dispatcher: the slurm backend needs Slurm's commands: %s\n",
                err[0] ? err : "sbatch --version failed");
        s_destroy(&s->base);
        return NULL;
    }
    out[strcspn(out, "\n")] = 0;
    char *acct[] = {"sacct", "-n", "-X", "-j", "1", "-o", "JobID", NULL};
    s->have_sacct = s_cmd(acct, NULL, NULL, 0, err, sizeof err, SLURM_CMD_TIMEOUT_S) == 0;
    if (s->have_sacct)
        log_info(TAG, "%s; job states from squeue, scontrol and sacct", out);
    else
        log_info(TAG,
                 "%s; sacct unavailable (%s): job states from squeue and `scontrol show "
                 "job` only, so a job slurmctld has forgotten (MinJobAge) ends as lost",
                 out, err[0] ? err : "no accounting");
    return &s->base;
}
