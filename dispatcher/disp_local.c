/*  disp_local.c - the local backend: each trial is a child process of the
    dispatcher (fork/exec, process groups and reaping live in disp_proc.c;
    a multi-rank trial is one mpirun, disp_mpi.c, or, with trial.launcher
    "torch", a launcher that starts the ranks itself, disp_torch.c).

    It is the default backend and the one `jizhi run` uses; disp_slurm.c
    implements the same operations with Slurm jobs.
*/
#define _GNU_SOURCE
#include "disp_int.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* A trial with ranks > 1 runs under mpirun (disp_mpi.c), one with the
   torch launcher under disp_torch.c's: the launcher is the trial's
   process. */
static int s_start(disp__backend *b, const disp__spawn_args *a, disp__proc *p, char *err,
                   size_t errsize)
{
    (void)b;
    if (a->st->launcher == SPEC_LAUNCH_TORCH)
        return disp__torch_spawn(a, p, err, errsize);
    if (a->st->ranks <= 1)
        return disp__spawn(a, p, err, errsize);
    json_t *argv, *env;
    if (disp__mpi_prepare(a->st, &argv, &env, err, errsize) != 0)
        return -1;
    disp__start st = *a->st;
    st.argv = argv;
    st.env = env;
    disp__spawn_args mpi = *a;
    mpi.st = &st;
    int rc = disp__spawn(&mpi, p, err, errsize);
    json_decref(argv);
    json_decref(env);
    return rc;
}

static void s_refresh(disp__backend *b, disp__proc **procs, size_t n, double now)
{
    (void)b, (void)procs, (void)n, (void)now; /* pidfds and the tick do it */
}

static int s_poll(disp__backend *b, disp__proc *p, disp__end *end)
{
    (void)b;
    if (disp__exec_poll(p) && !p->exec_errno)
        p->running = 1;
    int status, lost;
    if (!disp__reap(p, &status, &lost))
        return 0;
    /* A failed exec wrote its errno before the child exited, so one read
       tells. Nothing there (EOF, or EAGAIN while a child another thread
       forked still holds the write end): it ran. */
    disp__exec_poll(p);
    if (!p->exec_errno)
        p->running = 1;
    memset(end, 0, sizeof *end);
    end->code = -1;
    if (lost) {
        end->unknown = 1;
        snprintf(end->what, sizeof end->what,
                 "exit status unavailable (the process was reaped "
                 "outside the dispatcher)");
    } else if (WIFEXITED(status)) {
        end->code = WEXITSTATUS(status);
        snprintf(end->what, sizeof end->what, "exit code %d", end->code);
    } else if (WIFSIGNALED(status)) {
        end->sig = WTERMSIG(status);
        snprintf(end->what, sizeof end->what, "killed by signal %d (%s)", end->sig,
                 strsignal(end->sig));
    } else {
        snprintf(end->what, sizeof end->what, "wait status %#x", (unsigned)status);
    }
    return 1;
}

/* A child of an earlier process is nobody's to reap here. */
static size_t s_adopt(disp__backend *b, disp__proc ***out)
{
    (void)b;
    *out = NULL;
    return 0;
}

static void s_signal(disp__backend *b, disp__proc *p, int sig)
{
    (void)b;
    disp__signal(p, sig);
}

static void s_fini(disp__backend *b, disp__proc *p)
{
    (void)b;
    disp__proc_fini(p);
}

static void s_destroy(disp__backend *b)
{
    free(b);
}

static const disp__backend_ops s_ops = {
    .name = "local",
    .id_word = "pid",
    .start = s_start,
    .refresh = s_refresh,
    .poll = s_poll,
    .signal = s_signal,
    .adopt = s_adopt,
    .fini = s_fini,
    .destroy = s_destroy,
};

disp__backend *disp__local_new(void)
{
    disp__backend *b = calloc(1, sizeof *b);
    if (b)
        b->ops = &s_ops;
    return b;
}
