/*  disp_proc.c - one trial process: environment, fork/exec, signals, reaping.

    Everything the child needs (argv, envp, log fds, the exec-status pipe)
    is prepared before fork, so between fork and exec the child only makes
    async-signal-safe system calls: the dispatcher may be a thread of a
    bigger process whose other threads hold locks at the moment of fork.

    The child leads its own process group, so signals reach its children
    too; an exec failure travels back over a CLOEXEC pipe (EOF there means
    exec succeeded). Reaping waits for this one pid only (never
    waitpid(-1)) and kills what is left of the group while the zombie
    leader still pins the group id, so no other process can be hit.
*/
#define _GNU_SOURCE
#include "disp_int.h"
#include "common/util.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

/* Variables jizhi sets: never inherited from the dispatcher's own
   environment, so a dispatcher started inside a trial leaks nothing.
   Also jizhi-train's test-only knobs (fault injection, piece size): one
   left in the dispatcher's environment would alter every trial; a study's
   env may still set them on purpose. */
static const char *const s_scrub[] = {"JIZHI_ENDPOINT",
                                      "JIZHI_STUDY",
                                      "JIZHI_TRIAL",
                                      "JIZHI_ATTEMPT",
                                      "JIZHI_TOKEN",
                                      "JIZHI_PARAMS",
                                      "JIZHI_CHECKPOINT_DIR",
                                      "JIZHI_DISPATCHER",
                                      "CUDA_VISIBLE_DEVICES",
                                      "JIZHI_KEY",
                                      "JIZHI_SERVER_KEY",
                                      "JIZHI_RANK",
                                      "JIZHI_TEST_CKPT_NOMEM",
                                      "JIZHI_CKPT_PIECE_BYTES",
                                      NULL};

/* ---- environment -------------------------------------------------------- */

typedef struct {
    char **v; /* "KEY=VALUE" strings, NULL-terminated when done */
    size_t n, cap;
    int oom;
} s_envv;

/* Index of KEY in e, or -1. */
static long s_env_find(const s_envv *e, const char *key, size_t klen)
{
    for (size_t i = 0; i < e->n; i++)
        if (!strncmp(e->v[i], key, klen) && e->v[i][klen] == '=')
            return (long)i;
    return -1;
}

/* Sets KEY=VAL (replacing an existing KEY only when `overwrite`). */
static void s_env_set(s_envv *e, const char *key, const char *val, int overwrite)
{
    if (e->oom)
        return;
    long i = s_env_find(e, key, strlen(key));
    if (i >= 0 && !overwrite)
        return;
    char *kv = util_strf("%s=%s", key, val);
    if (!kv) {
        e->oom = 1;
        return;
    }
    if (i >= 0) {
        free(e->v[i]);
        e->v[i] = kv;
        return;
    }
    if (e->n + 2 > e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 64;
        char **nv = realloc(e->v, cap * sizeof *nv);
        if (!nv) {
            free(kv);
            e->oom = 1;
            return;
        }
        e->v = nv;
        e->cap = cap;
    }
    e->v[e->n++] = kv;
    e->v[e->n] = NULL;
}

/* Removes KEY. */
static void s_env_unset(s_envv *e, const char *key)
{
    long i = s_env_find(e, key, strlen(key));
    if (i < 0)
        return;
    free(e->v[i]);
    e->v[i] = e->v[--e->n];
    e->v[e->n] = NULL;
}

void disp__strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

char **disp__build_env(const disp__spawn_args *a)
{
    s_envv e = {0};
    for (char **p = environ; p && *p; p++) {
        const char *eq = strchr(*p, '=');
        if (!eq)
            continue;
        size_t klen = (size_t)(eq - *p);
        int scrub = 0;
        for (int i = 0; s_scrub[i]; i++)
            if (strlen(s_scrub[i]) == klen && !strncmp(*p, s_scrub[i], klen))
                scrub = 1;
        if (scrub || s_env_find(&e, *p, klen) >= 0)
            continue;
        char *key = strndup(*p, klen);
        if (!key) {
            e.oom = 1;
            break;
        }
        s_env_set(&e, key, eq + 1, 0);
        free(key);
    }
    if (a->st->env) {
        const char *key;
        const json_t *val;
        json_object_foreach((json_t *)a->st->env, key, val)
            s_env_set(&e, key, json_string_value(val), 1);
    }
    if (a->st->venv) { /* trial.venv: what its bin/activate would do */
        long i = s_env_find(&e, "PATH", 4);
        char *path =
            util_strf("%s/bin:%s", a->st->venv, i >= 0 ? e.v[i] + 5 : "/usr/bin:/bin");
        if (!path)
            e.oom = 1;
        s_env_set(&e, "PATH", path, 1);
        free(path);
        s_env_set(&e, "VIRTUAL_ENV", a->st->venv, 1);
        s_env_unset(&e, "PYTHONHOME");
    }
    /* defaults the controller may override through `env` */
    s_env_set(&e, "JIZHI_ENDPOINT", a->endpoint, 0);
    if (a->ckpt_dir)
        s_env_set(&e, "JIZHI_CHECKPOINT_DIR", a->ckpt_dir, 0);
    s_env_set(&e, "CUDA_DEVICE_ORDER", "PCI_BUS_ID", 0); /* nvidia-smi's numbering */
    /* what the dispatcher decides */
    char num[32];
    s_env_set(&e, "JIZHI_STUDY", a->st->study, 1);
    snprintf(num, sizeof num, "%ld", a->st->trial);
    s_env_set(&e, "JIZHI_TRIAL", num, 1);
    snprintf(num, sizeof num, "%ld", a->st->attempt);
    s_env_set(&e, "JIZHI_ATTEMPT", num, 1);
    s_env_set(&e, "JIZHI_DISPATCHER", a->disp_name, 1);
    /* over CURVE a trial needs the controller's public key ("none" from an
       --insecure dispatcher: plain TCP); its token, not the dispatcher's
       key, is what identifies it */
    if (a->server_key && *a->server_key)
        s_env_set(&e, "JIZHI_SERVER_KEY", a->server_key, 1);
    s_env_set(&e, "JIZHI_KEY", "anonymous", 1);
    if (a->cuda_devices)
        s_env_set(&e, "CUDA_VISIBLE_DEVICES", a->cuda_devices, 1);
    if (e.oom || !e.v) {
        disp__strv_free(e.v);
        return NULL;
    }
    return e.v;
}

/* ---- fork/exec ---------------------------------------------------------- */

/* Moves fd above 2 (a daemon may run with stdin/stdout closed, and the
   child's dup2 onto 0..2 must not clobber another of its fds). */
static int s_fd_high(int fd)
{
    if (fd < 0 || fd > 2)
        return fd;
    int nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return nfd;
}

typedef struct {
    char **argv, **envp;
    int in_fd, out_fd, err_fd, status_fd; /* all CLOEXEC, all > 2 */
    int pdeathsig;
    pid_t parent;
    int max_fd; /* fallback bound for marking fds CLOEXEC */
    void (*launch)(void *arg, char **argv, int status_fd); /* disp__spawn_args */
    void *launch_arg;
    const char *cwd; /* trial.cwd, or NULL: the dispatcher's folder */
} s_child_args;

/* In the child, between fork and exec: async-signal-safe calls only. */
static void __attribute__((noreturn)) s_child(const s_child_args *c)
{
    setpgid(0, 0);
    if (c->pdeathsig) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != c->parent)
            _exit(126); /* the dispatcher died before prctl */
    }
    /* Signals: handlers are reset by exec, but ignored ones and the mask
       (the forking thread's) are inherited; start the trial clean. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        sigaction(s, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    if (dup2(c->in_fd, 0) < 0 || dup2(c->out_fd, 1) < 0 || dup2(c->err_fd, 2) < 0) {
        int e = errno;
        (void)!write(c->status_fd, &e, sizeof e);
        _exit(127);
    }
    /* No other descriptor of the dispatcher's process reaches the trial. */
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
#endif
        for (int fd = 3; fd < c->max_fd; fd++)
            if (fd != c->status_fd)
                fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (c->cwd && chdir(c->cwd) != 0) { /* disp__check_start looked before fork */
        int e = errno;
        (void)!write(c->status_fd, &e, sizeof e);
        _exit(127);
    }
    environ = c->envp; /* execvp searches the trial's PATH */
    if (c->launch)     /* a launcher (disp_torch.c) starts the ranks itself */
        c->launch(c->launch_arg, c->argv, c->status_fd);
    execvp(c->argv[0], c->argv);
    int e = errno;
    (void)!write(c->status_fd, &e, sizeof e);
    _exit(127);
}

/* 1 when path is a regular file this user may execute. */
static int s_runnable(const char *path)
{
    struct stat sb;
    return access(path, X_OK) == 0 && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

int disp__check_start(const disp__start *st, char *err, size_t errsize)
{
    struct stat sb;
    if (st->cwd && stat(st->cwd, &sb) != 0) {
        snprintf(err, errsize, "trial.cwd %s: %s on this dispatcher's machine", st->cwd,
                 strerror(errno));
        return -1;
    }
    if (st->cwd && !S_ISDIR(sb.st_mode)) {
        snprintf(err, errsize, "trial.cwd %s is not a folder", st->cwd);
        return -1;
    }
    if (!st->venv)
        return 0;
    char *python = util_strf("%s/bin/python", st->venv);
    int ok = !python || s_runnable(python);
    if (!ok)
        snprintf(err, errsize,
                 "trial.venv %s is not a virtual environment on this dispatcher's "
                 "machine: %s is missing or not executable",
                 st->venv, python);
    free(python);
    return ok ? 0 : -1;
}

/* argv[0] for messages: a relative path as the child finds it, in
   st->cwd (the exec failure then names the path tried). Caller frees. */
static char *s_argv0(const disp__start *st)
{
    const char *cmd = json_string_value(json_array_get(st->argv, 0));
    if (!st->cwd || cmd[0] == '/' || !strchr(cmd, '/'))
        return strdup(cmd);
    return util_strf("%s/%s", st->cwd, strncmp(cmd, "./", 2) ? cmd : cmd + 2);
}

int disp__spawn(const disp__spawn_args *a, disp__proc *p, char *err, size_t errsize)
{
    const disp__start *st = a->st;
    memset(p, 0, sizeof *p);
    p->pidfd = p->exec_fd = -1;
    p->trial = st->trial;
    p->attempt = st->attempt;

    size_t argc = json_array_size(st->argv);
    char **argv = calloc(argc + 1, sizeof *argv);
    char **envp = disp__build_env(a);
    p->out_path = util_strf("%s/trial-%ld.%ld.out", a->dir, st->trial, st->attempt);
    p->err_path = util_strf("%s/trial-%ld.%ld.err", a->dir, st->trial, st->attempt);
    p->argv0 = s_argv0(st);
    int in_fd = -1, out_fd = -1, err_fd = -1, ep[2] = {-1, -1};
    int rc = -1;
    if (!argv || !envp || !p->out_path || !p->err_path || !p->argv0) {
        snprintf(err, errsize, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < argc; i++)
        argv[i] = (char *)json_string_value(json_array_get(st->argv, i));
    if (disp__check_start(st, err, errsize) != 0)
        goto out;

    /* the trial's output is the dispatcher's user's only */
    const int wflags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY;
    in_fd = s_fd_high(open("/dev/null", O_RDONLY | O_CLOEXEC));
    out_fd = s_fd_high(open(p->out_path, wflags, 0600));
    if (out_fd < 0 || fchmod(out_fd, 0600) != 0) {
        snprintf(err, errsize, "cannot open %s: %s", p->out_path, strerror(errno));
        goto out;
    }
    err_fd = s_fd_high(open(p->err_path, wflags, 0600));
    if (err_fd < 0 || fchmod(err_fd, 0600) != 0) {
        snprintf(err, errsize, "cannot open %s: %s", p->err_path, strerror(errno));
        goto out;
    }
    if (in_fd < 0 || pipe2(ep, O_CLOEXEC) != 0) {
        snprintf(err, errsize, "cannot create pipe: %s", strerror(errno));
        goto out;
    }
    ep[0] = s_fd_high(ep[0]);
    ep[1] = s_fd_high(ep[1]);
    if (ep[0] < 0 || ep[1] < 0) {
        snprintf(err, errsize, "cannot create pipe: %s", strerror(errno));
        goto out;
    }

    struct rlimit rl;
    int max_fd = 4096;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        max_fd = rl.rlim_cur < 65536 ? (int)rl.rlim_cur : 65536;
    s_child_args c = {argv,         envp,     in_fd,  out_fd,    err_fd,        ep[1],
                      a->pdeathsig, getpid(), max_fd, a->launch, a->launch_arg, st->cwd};

    pid_t pid = fork();
    if (pid == 0)
        s_child(&c);
    if (pid < 0) {
        snprintf(err, errsize, "fork: %s", strerror(errno));
        goto out;
    }
    setpgid(pid, pid); /* also here, so a kill right away reaches the group */
    p->pid = pid;
    p->exec_fd = ep[0];
    ep[0] = -1;
    fcntl(p->exec_fd, F_SETFL, O_NONBLOCK);
#ifdef SYS_pidfd_open
    /* Wakes the loop at once when the trial exits (Linux >= 5.3); without
       it the 50 ms tick finds the exit. */
    static int s_no_pidfd; /* ENOSYS once: do not ask again */
    if (!__atomic_load_n(&s_no_pidfd, __ATOMIC_RELAXED)) {
        p->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (p->pidfd >= 0)
            fcntl(p->pidfd, F_SETFD, FD_CLOEXEC);
        else if (errno == ENOSYS)
            __atomic_store_n(&s_no_pidfd, 1, __ATOMIC_RELAXED);
    }
#endif
    rc = 0;
out:
    for (int i = 0; i < 5; i++) {
        int fd = (int[]){in_fd, out_fd, err_fd, ep[0], ep[1]}[i];
        if (fd >= 0)
            close(fd);
    }
    free(argv);
    disp__strv_free(envp);
    if (rc != 0) {
        disp__proc_fini(p);
        p->pid = 0;
    }
    return rc;
}

int disp__exec_poll(disp__proc *p)
{
    if (p->exec_fd < 0)
        return 0;
    int e = 0;
    ssize_t r = read(p->exec_fd, &e, sizeof e);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (r == (ssize_t)sizeof e)
        p->exec_errno = e ? e : EIO;
    else if (r != 0)
        p->exec_errno = EIO;
    close(p->exec_fd);
    p->exec_fd = -1;
    return 1;
}

void disp__signal(disp__proc *p, int sig)
{
    if (p->pid <= 0)
        return;
    if (p->ranks > 1)
        disp__mpi_signal_tree(p->pid, sig);
    if (killpg(p->pid, sig) != 0)
        kill(p->pid, sig);
}

int disp__reap(disp__proc *p, int *status, int *lost)
{
    *status = 0;
    *lost = 0;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
        if (errno != ECHILD)
            return 0;
        /* Someone else reaped it (a SIGCHLD handler set to SIG_IGN, or a
           waitpid(-1) elsewhere in the process). Its group id may be free
           again, so leave any stragglers alone rather than risk a stranger. */
        *lost = 1;
        return 1;
    }
    if (si.si_pid == 0)
        return 0;
    /* The zombie leader still holds the group id: clean up its group. */
    killpg(p->pid, SIGKILL);
    pid_t w;
    do
        w = waitpid(p->pid, status, 0);
    while (w < 0 && errno == EINTR);
    if (w < 0)
        *lost = 1;
    return 1;
}

void disp__proc_fini(disp__proc *p)
{
    if (p->pidfd >= 0)
        close(p->pidfd);
    if (p->exec_fd >= 0)
        close(p->exec_fd);
    p->pidfd = p->exec_fd = -1;
    free(p->reason);
    free(p->gpus);
    free(p->argv0);
    free(p->out_path);
    free(p->err_path);
    p->reason = p->argv0 = p->out_path = p->err_path = NULL;
    p->gpus = NULL;
}
