/*  disp_torch.c - DDP trials (trial.launcher "torch"): the dispatcher starts
    a trial's ranks itself, the way torchrun does.

    Local backend. The trial's process is a launcher that disp__spawn forks
    like any trial (own process group, the log files on 0..2, the
    exec-status pipe), but that does not exec: it forks the ranks, each
    exec'ing the trial's argv with its own environment. Every environment
    is built by the dispatcher before the fork (disp__build_env, then
    RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
    MASTER_PORT a free port, JIZHI_RANK, ... and the rank's share of the
    trial's GPUs in CUDA_VISIBLE_DEVICES), so the launcher, a child of a
    process that may have other threads, only makes system calls: fork,
    execvp, poll, read, write, waitpid, kill.

    The ranks stay in the launcher's process group, so the dispatcher's
    signals to the group (stop, kill, timeout) reach every rank, and each
    has PR_SET_PDEATHSIG(SIGKILL): none outlives its launcher. A rank's
    stdout and stderr go through pipes to the trial's logs in whole lines,
    each prefixed with its rank as torchrun's --tee does ("[rank1]: ...";
    a line longer than TORCH_LINE is split, a line still without its
    newline TORCH_HOLD_S after it began is written as it is at the poll
    tick, its rest then following as a line of its own with the prefix,
    and a last line without a newline when the rank's pipe ends), the
    launcher keeping the last KiB of each rank's stderr. A rank that
    exits 0 is waited for (the others go on, as under torchrun); one that
    exits non-zero or dies by a signal ends the trial: the others get
    SIGTERM, then SIGKILL at the larger of 0.8 x kill_grace_s and
    kill_grace_s - 1 s (so before the dispatcher's own SIGKILL to the
    group at kill_grace_s, which would end the launcher too), and once
    all are reaped the launcher writes one line to the stderr log

        jizhi: rank 1 of 2 (pid 4242) was killed by signal 9 (SIGKILL); its
        last stderr line: ...

    (the last line, so it becomes the attempt's stderr_tail and the trial's
    reason) and ends the same way (the same exit code, or the same signal
    raised on itself), which the dispatcher reports as the attempt's end.
    When the launcher itself is signalled (the dispatcher's stop, kill or
    timeout, sent to the whole group) before any rank failed, no rank is
    to blame: it ends the ranks the same way, writes a line per rank (still
    running when the signal came, or had exited with code N before it or
    in the same sweep of the loop, its last stderr line and how long
    before the signal it wrote it), then the last line

        jizhi: SIGTERM (stop, kill or timeout) ended the 2 ranks; last
        stderr lines: rank 0: ...; rank 1: ...

    and ends by that signal (exit 0 when every rank exited 0).
    An exec failure of the ranks travels back over the trial's exec-status
    pipe like a plain trial's (start_failed).

    Slurm backend (disp_slurm.c): the batch script sets MASTER_ADDR (the
    job's first node) and MASTER_PORT, and srun starts each rank through a
    /bin/sh wrapper that maps SLURM_PROCID and friends to RANK and friends;
    srun --kill-on-bad-exit ends the other ranks when one fails.
*/
#define _GNU_SOURCE
#include "disp_int.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TORCH_TAIL 1024        /* bytes of each rank's stderr kept for the reason */
#define TORCH_LINE (64 * 1024) /* a rank's longer line is written in pieces */
#define TORCH_HOLD_S 1.0       /* a partial line waits this long for its newline */

extern char **environ;

/* Everything the launcher needs, allocated by the dispatcher before the
   fork (the launcher writes only into its own copy). */
typedef struct {
    int n;             /* ranks */
    double grace_s;    /* SIGTERM -> SIGKILL, less than the dispatcher's */
    char ***envp;      /* [n] each rank's environment */
    pid_t *pid;        /* [n] */
    int *status;       /* [n] wait status */
    int *done;         /* [n] 0, or the sweep of the loop that reaped it (from 1) */
    int *fd;           /* [2n] read ends of rank r's stdout (2r) and stderr
                          (2r + 1) pipes, -1 at EOF */
    int *pidfd;        /* [n] or -1 */
    char *tail;        /* [n * TORCH_TAIL] last bytes of each rank's stderr */
    size_t *tail_len;  /* [n] */
    double *err_at;    /* [n] when its stderr last had something (s_now), or 0 */
    char *line;        /* [2n * TORCH_LINE] each pipe's unfinished line */
    size_t *line_len;  /* [2n] */
    double *line_at;   /* [2n] when each unfinished line began (s_now) */
    struct pollfd *pf; /* [3n] */
    int *pf_idx;       /* [3n] the pipe (2r + s) of each pollfd, or -1 - r: pidfd */
} s_launch;

static volatile sig_atomic_t s_signalled; /* the launcher got SIGTERM/INT/HUP */

static void s_on_signal(int sig)
{
    s_signalled = sig;
}

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void s_write_all(int fd, const char *b, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        b += w;
        n -= (size_t)w;
    }
}

/* Keeps the last TORCH_TAIL bytes of rank r's stderr. */
static void s_tail_add(s_launch *L, int r, const char *b, size_t n)
{
    char *t = L->tail + (size_t)r * TORCH_TAIL;
    size_t len = L->tail_len[r];
    if (n >= TORCH_TAIL) {
        memcpy(t, b + n - TORCH_TAIL, TORCH_TAIL);
        L->tail_len[r] = TORCH_TAIL;
        return;
    }
    if (len + n > TORCH_TAIL) {
        size_t drop = len + n - TORCH_TAIL;
        memmove(t, t + drop, len - drop);
        len -= drop;
    }
    memcpy(t + len, b, n);
    L->tail_len[r] = len + n;
}

/* Writes pipe i's unfinished line to the trial's stdout (i even) or
   stderr (i odd) as one line, prefixed with its rank as torchrun's --tee
   does, and empties it. */
static void s_line_flush(s_launch *L, int i)
{
    char prefix[32];
    int k =
        snprintf(prefix, sizeof prefix, "[rank%d]:%s", i / 2, L->line_len[i] ? " " : "");
    struct iovec v[3] = {{prefix, (size_t)k},
                         {L->line + (size_t)i * TORCH_LINE, L->line_len[i]},
                         {"\n", 1}};
    size_t left = (size_t)k + L->line_len[i] + 1;
    int fd = i % 2 ? 2 : 1, at = 0;
    L->line_len[i] = 0;
    while (left > 0) { /* one writev for the line, unless the file takes less */
        ssize_t w = writev(fd, v + at, 3 - at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        left -= (size_t)w;
        while (at < 3 && (size_t)w >= v[at].iov_len)
            w -= (ssize_t)v[at++].iov_len;
        if (at < 3) {
            v[at].iov_base = (char *)v[at].iov_base + w;
            v[at].iov_len -= (size_t)w;
        }
    }
}

/* Adds what pipe i gave at `now` to its unfinished line, writing each
   line it completes (and the line so far when it reaches TORCH_LINE). */
static void s_line_add(s_launch *L, int i, const char *b, size_t n, double now)
{
    char *line = L->line + (size_t)i * TORCH_LINE;
    while (n > 0) {
        const char *nl = memchr(b, '\n', n);
        size_t take = nl ? (size_t)(nl - b) : n;
        size_t room = TORCH_LINE - L->line_len[i];
        if (take > room)
            take = room;
        if (take > 0 && L->line_len[i] == 0)
            L->line_at[i] = now;
        memcpy(line + L->line_len[i], b, take);
        L->line_len[i] += take;
        b += take;
        n -= take;
        if (n > 0 && *b == '\n') { /* the line ends here */
            b++;
            n--;
            s_line_flush(L, i);
        } else if (L->line_len[i] == TORCH_LINE) {
            s_line_flush(L, i);
        }
    }
}

/* Writes each unfinished line that has waited TORCH_HOLD_S for its
   newline (a progress bar, a print(..., end="") before a long compute);
   its rest follows on a line of its own. */
static void s_line_flush_old(s_launch *L, double now)
{
    for (int i = 0; i < 2 * L->n; i++)
        if (L->line_len[i] > 0 && now - L->line_at[i] >= TORCH_HOLD_S)
            s_line_flush(L, i);
}

/* Reads what pipe i (rank i / 2's stdout or stderr) has: to the trial's
   log in lines (s_line_add), a stderr's also kept in its tail. At EOF
   closes it and writes its last unfinished line. Returns 0 at EOF, 1
   otherwise. */
static int s_pump(s_launch *L, int i)
{
    char buf[4096];
    int r = i / 2;
    for (;;) {
        ssize_t k = read(L->fd[i], buf, sizeof buf);
        if (k > 0) {
            double now = s_now();
            s_line_add(L, i, buf, (size_t)k, now);
            if (i % 2) {
                s_tail_add(L, r, buf, (size_t)k);
                L->err_at[r] = now;
            }
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) /* EAGAIN: nothing now */
            return 1;
        close(L->fd[i]);
        L->fd[i] = -1;
        if (L->line_len[i] > 0) /* a last line without its newline */
            s_line_flush(L, i);
        return 0;
    }
}

/* Signals every rank not reaped yet. */
static void s_signal_live(s_launch *L, int sig)
{
    for (int r = 0; r < L->n; r++)
        if (L->pid[r] > 0 && !L->done[r])
            kill(L->pid[r], sig);
}

/* Reaps what ended, marking it done in `sweep`. Returns the rank that
   failed first in this sweep (a death by signal before a non-zero exit),
   or -1. */
static int s_reap(s_launch *L, int *live, int sweep)
{
    int failed = -1;
    *live = 0;
    for (int r = 0; r < L->n; r++) {
        if (L->done[r] || L->pid[r] <= 0)
            continue;
        int st;
        pid_t w = waitpid(L->pid[r], &st, WNOHANG);
        if (w == 0 || (w < 0 && errno == EINTR)) {
            ++*live;
            continue;
        }
        L->done[r] = sweep;
        L->status[r] = w < 0 ? (127 << 8) : st; /* reaped elsewhere: a failure */
        if (L->pidfd[r] >= 0) {
            close(L->pidfd[r]);
            L->pidfd[r] = -1;
        }
        if (WIFEXITED(L->status[r]) && WEXITSTATUS(L->status[r]) == 0)
            continue;
        if (failed < 0 || (WIFSIGNALED(L->status[r]) && !WIFSIGNALED(L->status[failed])))
            failed = r;
    }
    return failed;
}

/* The last non-empty line of rank r's kept stderr, into buf. */
static void s_tail_line(const s_launch *L, int r, char *buf, size_t size)
{
    const char *t = L->tail + (size_t)r * TORCH_TAIL;
    size_t n = L->tail_len[r];
    while (n > 0 && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' '))
        n--;
    size_t from = n;
    while (from > 0 && t[from - 1] != '\n')
        from--;
    size_t m = n - from < size - 1 ? n - from : size - 1;
    memcpy(buf, t + from, m);
    buf[m] = 0;
}

/* "SIGTERM" for 15, into buf. */
static const char *s_sig_name(int sig, char *buf, size_t size)
{
    const char *abbr = sigabbrev_np(sig);
    snprintf(buf, size, "SIG%s", abbr ? abbr : "?");
    return buf;
}

/* Writes the text in line (k from its snprintf) as one line of the
   trial's stderr, cut to the buffer's size. */
static void s_say(const char *line, int k, size_t size)
{
    s_write_all(2, line, k > 0 && (size_t)k < size ? (size_t)k : size - 1);
    if (k < 0 || (size_t)k >= size)
        s_write_all(2, "\n", 1);
}

/* Ends the launcher by sig (raised on itself, no core dump), or with
   exit code `code` when sig is 0. */
static void __attribute__((noreturn)) s_exit_like(int sig, int code)
{
    if (sig) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core); /* a rank dumped its own, if any */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(sig, &sa, NULL);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, sig);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        kill(getpid(), sig);
        _exit(128 + sig);
    }
    _exit(code);
}

/* Ends the launcher the way rank r ended (after the line naming it). */
static void __attribute__((noreturn)) s_end_as(s_launch *L, int r)
{
    int st = L->status[r];
    char how[96], last[160], line[400], name[32];
    if (WIFSIGNALED(st))
        snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(st),
                 s_sig_name(WTERMSIG(st), name, sizeof name));
    else
        snprintf(how, sizeof how, "exited with code %d", WEXITSTATUS(st));
    s_tail_line(L, r, last, sizeof last);
    int k = snprintf(
        line, sizeof line, "jizhi: rank %d of %d (pid %d) %s%s%s\n", r, L->n,
        (int)L->pid[r], how,
        last[0] ? "; its last stderr line: " : "; it wrote nothing to stderr", last);
    s_say(line, k, sizeof line);
    s_exit_like(WIFSIGNALED(st) ? WTERMSIG(st) : 0, WEXITSTATUS(st));
}

/* The launcher got sig at time `at`, in the loop's sweep `sweep`, before
   any rank failed: the dispatcher ends the trial (stop, kill, timeout),
   and the ranks it ended are not the cause. Writes what is known of each
   rank (running or exited 0 before, its last stderr line and when it
   wrote it), then a last line with every rank's last stderr line, and
   ends by sig (exit 0 when every rank exited 0). */
static void __attribute__((noreturn))
s_end_signalled(s_launch *L, int sig, double at, int sweep)
{
    char name[32], last[160], line[400], sum[400];
    int all_ok = 1;
    s_sig_name(sig, name, sizeof name);
    int m = snprintf(sum, sizeof sum,
                     "jizhi: %s (stop, kill or timeout) ended the %d rank%s; "
                     "last stderr lines:",
                     name, L->n, L->n == 1 ? "" : "s");
    for (int r = 0; r < L->n; r++) {
        /* reaped in an earlier sweep: it exited 0 (else it failed first);
           in the signal's own sweep: it may have exited with any code */
        int before = L->done[r] && L->done[r] < sweep;
        int exited = L->done[r] && L->done[r] <= sweep && WIFEXITED(L->status[r]);
        int code = WEXITSTATUS(L->status[r]);
        all_ok &= WIFEXITED(L->status[r]) && code == 0;
        char how[64] = "was running when", had[32] = "";
        if (exited) {
            snprintf(how, sizeof how, "had exited with code %d %s", code,
                     before ? "before" : "when");
            snprintf(had, sizeof had, " (had exited %d)", code);
        }
        s_tail_line(L, r, last, sizeof last);
        char when[64] = "";
        if (last[0])
            snprintf(when, sizeof when, " (%.0f s before the %s)",
                     at - L->err_at[r] > 0 ? at - L->err_at[r] : 0.0, name);
        int k = snprintf(
            line, sizeof line, "jizhi: rank %d of %d (pid %d) %s the %s came%s%s%s%s\n",
            r, L->n, (int)L->pid[r], how, name,
            last[0] ? "; its last stderr line" : "; it wrote nothing to stderr", when,
            last[0] ? ": " : "", last);
        s_say(line, k, sizeof line);
        if (m > 0 && (size_t)m < sizeof sum)
            m += snprintf(sum + m, sizeof sum - (size_t)m, "%s rank %d%s: %s",
                          r ? ";" : "", r, had, last[0] ? last : "(nothing)");
    }
    if (m > 0 && (size_t)m < sizeof sum - 1)
        sum[m++] = '\n';
    s_say(sum, m, sizeof sum);
    s_exit_like(all_ok ? 0 : sig, 0);
}

/* The launcher: runs in the trial's child process instead of exec (see
   the header). Never returns. */
static void __attribute__((noreturn)) s_launch_main(void *arg, char **argv, int status_fd)
{
    s_launch *L = arg;
    pid_t self = getpid();
    /* the exec-status pipe on fd 3 (not inherited by the ranks' programs),
       nothing else of the dispatcher's beyond it */
    if (status_fd != 3) {
        if (dup2(status_fd, 3) < 0)
            _exit(127);
        close(status_fd);
    }
    fcntl(3, F_SETFD, FD_CLOEXEC);
    struct rlimit rl;
    int max_fd = 4096;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        max_fd = rl.rlim_cur < 65536 ? (int)rl.rlim_cur : 65536;
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 4U, ~0U, 0U) != 0)
#endif
        for (int fd = 4; fd < max_fd; fd++)
            close(fd);
    util_on_stop_signals(s_on_signal, 1);

    int exec_err = 0;
    for (int r = 0; r < L->n && !exec_err; r++) {
        /* ep: the exec status; io[0], io[1]: its stdout and stderr */
        int ep[2] = {-1, -1}, io[2][2] = {{-1, -1}, {-1, -1}};
        if (pipe2(ep, O_CLOEXEC) != 0 || pipe2(io[0], O_CLOEXEC) != 0 ||
            pipe2(io[1], O_CLOEXEC) != 0) {
            exec_err = errno;
            for (int *fd = ep; fd < ep + 2; fd++)
                if (*fd >= 0)
                    close(*fd);
            for (int *fd = &io[0][0]; fd < &io[0][0] + 4; fd++)
                if (*fd >= 0)
                    close(*fd);
            break;
        }
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != self)
                _exit(127);
            util_on_stop_signals(SIG_DFL, 1);
            int e = 0;
            if (dup2(io[0][1], 1) < 0 || dup2(io[1][1], 2) < 0)
                e = errno;
            if (!e) {
                environ = L->envp[r];
                execvp(argv[0], argv);
                e = errno;
            }
            (void)!write(ep[1], &e, sizeof e);
            _exit(127);
        }
        int fork_errno = errno;
        close(ep[1]);
        close(io[0][1]);
        close(io[1][1]);
        if (pid < 0) {
            exec_err = fork_errno;
            close(ep[0]);
            close(io[0][0]);
            close(io[1][0]);
            break;
        }
        L->pid[r] = pid;
        for (int s = 0; s < 2; s++) {
            L->fd[2 * r + s] = io[s][0];
            fcntl(io[s][0], F_SETFL, O_NONBLOCK);
        }
        L->pidfd[r] = -1;
#ifdef SYS_pidfd_open
        L->pidfd[r] = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
        /* EOF: exec'd (the pipe is close-on-exec); else its errno */
        int e = 0;
        ssize_t k;
        do
            k = read(ep[0], &e, sizeof e);
        while (k < 0 && errno == EINTR);
        close(ep[0]);
        if (k > 0)
            exec_err = e ? e : EIO;
    }
    if (exec_err) { /* as a plain trial's failed exec: start_failed */
        s_signal_live(L, SIGKILL);
        for (int r = 0; r < L->n; r++)
            if (L->pid[r] > 0)
                while (waitpid(L->pid[r], NULL, 0) < 0 && errno == EINTR)
                    ;
        (void)!write(3, &exec_err, sizeof exec_err);
        _exit(127);
    }
    close(3); /* every rank runs: the dispatcher sees the trial start */

    int first = -1, live = L->n, stopping = 0, sig = 0, sweep = 0, sig_sweep = 0;
    double kill_at = 0, sig_at = 0;
    while (live > 0) {
        int np = 0;
        for (int i = 0; i < 2 * L->n; i++)
            if (L->fd[i] >= 0) {
                L->pf[np] = (struct pollfd){L->fd[i], POLLIN, 0};
                L->pf_idx[np++] = i;
            }
        for (int r = 0; r < L->n; r++)
            if (L->pidfd[r] >= 0) {
                L->pf[np] = (struct pollfd){L->pidfd[r], POLLIN, 0};
                L->pf_idx[np++] = -1 - r;
            }
        poll(L->pf, (nfds_t)np, stopping ? 50 : 200);
        for (int i = 0; i < np; i++)
            if (L->pf_idx[i] >= 0 && (L->pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                s_pump(L, L->pf_idx[i]);
        s_line_flush_old(L, s_now());
        int failed = s_reap(L, &live, ++sweep);
        if (!stopping && s_signalled) {
            /* read after the sweep: a rank it reaped may have died of the
               same signal (the dispatcher's go to the whole group) */
            sig = s_signalled;
            sig_at = s_now();
            sig_sweep = sweep;
        } else if (!stopping && failed >= 0) {
            first = failed;
        }
        if (!stopping && (first >= 0 || sig)) {
            stopping = 1; /* a rank failed, or the dispatcher ends the trial */
            s_signal_live(L, SIGTERM);
            kill_at = s_now() + L->grace_s;
        }
        if (stopping && kill_at > 0 && s_now() >= kill_at) {
            s_signal_live(L, SIGKILL);
            kill_at = 0;
        }
    }
    /* what the ranks wrote last (a rank's own child may still hold its
       pipe: read what is there, do not wait for EOF) */
    for (int i = 0; i < 2 * L->n; i++)
        if (L->fd[i] >= 0 && s_pump(L, i) && L->line_len[i] > 0)
            s_line_flush(L, i);
    if (first >= 0)
        s_end_as(L, first);
    if (sig)
        s_end_signalled(L, sig, sig_at, sig_sweep);
    _exit(0);
}

/* A TCP port free on 127.0.0.1 now (the kernel's pick), or -1 with errno. */
static int s_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sin;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0 &&
        getsockname(fd, (struct sockaddr *)&sin, &len) == 0)
        port = ntohs(sin.sin_port);
    int e = errno;
    close(fd);
    errno = e;
    return port;
}

/* Rank r's devices: the r-th run of `per` indices in the comma list
   `all` ("" when per is 0). Caller frees; NULL when out of memory. */
static char *s_rank_devices(const char *all, int per, int r)
{
    char *out = calloc(1, strlen(all) + 1);
    if (!out || per <= 0)
        return out;
    int idx = 0;
    const char *p = all;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (idx >= r * per && idx < (r + 1) * per) {
            size_t n = strlen(out);
            sprintf(out + n, "%s%.*s", n ? "," : "", (int)len, p);
        }
        idx++;
        if (!e)
            break;
        p = e + 1;
    }
    return out;
}

static void s_launch_free(s_launch *L)
{
    if (!L)
        return;
    for (int r = 0; L->envp && r < L->n; r++)
        disp__strv_free(L->envp[r]);
    free(L->envp);
    free(L->pid);
    free(L->status);
    free(L->done);
    free(L->fd);
    free(L->pidfd);
    free(L->tail);
    free(L->tail_len);
    free(L->err_at);
    free(L->line);
    free(L->line_len);
    free(L->line_at);
    free(L->pf);
    free(L->pf_idx);
    free(L);
}

/* Sets key to an integer in env (a JSON object). */
static void s_set_int(json_t *env, const char *key, long v)
{
    char num[32];
    snprintf(num, sizeof num, "%ld", v);
    json_object_set_new(env, key, json_string(num));
}

int disp__torch_spawn(const disp__spawn_args *a, disp__proc *p, char *err, size_t errsize)
{
    const disp__start *st = a->st;
    int n = st->ranks > 0 ? st->ranks : 1;
    memset(p, 0, sizeof *p);
    p->pidfd = p->exec_fd = -1;
    int port = s_free_port();
    if (port <= 0) {
        snprintf(err, errsize, "cannot find a free port for MASTER_PORT: %s",
                 strerror(errno));
        return -1;
    }
    s_launch *L = calloc(1, sizeof *L);
    if (!L)
        goto oom;
    L->n = n;
    /* the dispatcher's SIGKILL to the group comes kill_grace_s after its
       SIGTERM and ends the launcher too: SIGKILL the ranks before it (the
       larger of 0.8 x the grace and the grace - 1 s), so that the launcher
       still writes what they left and its lines */
    double grace = a->kill_grace_s > 0 ? a->kill_grace_s : 5.0;
    L->grace_s = grace - 1.0 > 0.8 * grace ? grace - 1.0 : 0.8 * grace;
    L->envp = calloc((size_t)n, sizeof *L->envp);
    L->pid = calloc((size_t)n, sizeof *L->pid);
    L->status = calloc((size_t)n, sizeof *L->status);
    L->done = calloc((size_t)n, sizeof *L->done);
    L->fd = calloc(2 * (size_t)n, sizeof *L->fd);
    L->pidfd = calloc((size_t)n, sizeof *L->pidfd);
    L->tail = malloc((size_t)n * TORCH_TAIL);
    L->tail_len = calloc((size_t)n, sizeof *L->tail_len);
    L->err_at = calloc((size_t)n, sizeof *L->err_at);
    /* untouched until a rank writes a long line (the launcher, a child of
       a threaded process, must not allocate) */
    L->line = malloc(2 * (size_t)n * TORCH_LINE);
    L->line_len = calloc(2 * (size_t)n, sizeof *L->line_len);
    L->line_at = calloc(2 * (size_t)n, sizeof *L->line_at);
    L->pf = calloc(3 * (size_t)n, sizeof *L->pf);
    L->pf_idx = calloc(3 * (size_t)n, sizeof *L->pf_idx);
    if (!L->envp || !L->pid || !L->status || !L->done || !L->fd || !L->pidfd ||
        !L->tail || !L->tail_len || !L->err_at || !L->line || !L->line_len ||
        !L->line_at || !L->pf || !L->pf_idx)
        goto oom;
    for (int r = 0; r < n; r++) {
        L->fd[2 * r] = L->fd[2 * r + 1] = L->pidfd[r] = -1;
        json_t *env = st->env ? json_deep_copy(st->env) : json_object();
        char *cuda =
            a->cuda_devices ? s_rank_devices(a->cuda_devices, st->gpus, r) : NULL;
        if (!env || (a->cuda_devices && !cuda)) {
            json_decref(env);
            free(cuda);
            goto oom;
        }
        /* torchrun's variables (one node: local = global) */
        s_set_int(env, "RANK", r);
        s_set_int(env, "LOCAL_RANK", r);
        s_set_int(env, "WORLD_SIZE", n);
        s_set_int(env, "LOCAL_WORLD_SIZE", n);
        s_set_int(env, "GROUP_RANK", 0);
        s_set_int(env, "ROLE_RANK", r);
        s_set_int(env, "ROLE_WORLD_SIZE", n);
        json_object_set_new(env, "MASTER_ADDR", json_string("127.0.0.1"));
        s_set_int(env, "MASTER_PORT", port);
        /* jizhi's: only rank 0's helper talks to the controller */
        s_set_int(env, "JIZHI_RANK", r);
        s_set_int(env, "JIZHI_RANKS", n);
        s_set_int(env, "JIZHI_GPUS_PER_RANK", st->gpus);
        /* as torchrun: one thread per rank unless the study says otherwise */
        if (!json_object_get(env, "OMP_NUM_THREADS") && !getenv("OMP_NUM_THREADS"))
            json_object_set_new(env, "OMP_NUM_THREADS", json_string("1"));
        disp__start st_r = *st;
        st_r.env = env;
        disp__spawn_args ar = *a;
        ar.st = &st_r;
        ar.cuda_devices = cuda;
        L->envp[r] = disp__build_env(&ar);
        json_decref(env);
        free(cuda);
        if (!L->envp[r])
            goto oom;
    }
    disp__spawn_args al = *a;
    al.launch = s_launch_main;
    al.launch_arg = L;
    int rc = disp__spawn(&al, p, err, errsize);
    s_launch_free(L); /* the launcher has its own copy */
    return rc;
oom:
    s_launch_free(L);
    snprintf(err, errsize, "out of memory");
    return -1;
}

/* ---- Slurm -------------------------------------------------------------- */

const char *disp__torch_slurm_head(void)
{
    /* the first node's address as Slurm reaches it (NodeAddr; its name
       when none is configured), which other nodes can resolve */
    return "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" 2>/dev/null "
           "| head -n 1)\n"
           "a=$(scontrol show node -o \"$MASTER_ADDR\" 2>/dev/null "
           "| sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')\n"
           "[ -n \"$a\" ] && MASTER_ADDR=$a\n"
           "[ -n \"$MASTER_ADDR\" ] || MASTER_ADDR=$(hostname)\n"
           "MASTER_PORT=$((20000 + ${SLURM_JOB_ID:-0} % 40000))\n"
           "WORLD_SIZE=${SLURM_NTASKS:-1}\n"
           "export MASTER_ADDR MASTER_PORT WORLD_SIZE\n";
}

const char *disp__torch_slurm_task(void)
{
    /* LOCAL_WORLD_SIZE: this node's entry of SLURM_STEP_TASKS_PER_NODE
       ("2(x3),1": 2 on each of the first three nodes, 1 on the fourth) */
    return "RANK=$SLURM_PROCID; LOCAL_RANK=$SLURM_LOCALID; JIZHI_RANK=$SLURM_PROCID; "
           "GROUP_RANK=${SLURM_NODEID:-0}; ROLE_RANK=$RANK; ROLE_WORLD_SIZE=$WORLD_SIZE; "
           "n=${SLURM_NODEID:-0}; LOCAL_WORLD_SIZE=1; IFS=,; "
           "for e in $SLURM_STEP_TASKS_PER_NODE; do c=${e%%(*}; k=1; "
           "case $e in *\"(x\"*) k=${e#*(x}; k=${k%)};; esac; "
           "if [ \"$n\" -lt \"$k\" ]; then LOCAL_WORLD_SIZE=$c; break; fi; "
           "n=$((n - k)); done; unset IFS; "
           ": \"${OMP_NUM_THREADS:=1}\"; "
           "export RANK LOCAL_RANK JIZHI_RANK GROUP_RANK ROLE_RANK ROLE_WORLD_SIZE "
           "LOCAL_WORLD_SIZE OMP_NUM_THREADS; exec \"$@\"";
}
