/*  disp_mpi.c - multi-rank trials: a trial with `ranks` > 1 runs as one
    MPI job on this machine.

    The command is started under the MPI launcher (mpirun from PATH):
        mpirun --oversubscribe -np RANKS COMMAND...
    with OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1 in its environment (a dispatcher
    running as root must not make users add flags), JIZHI_RANKS and
    JIZHI_GPUS_PER_RANK. The launcher is the trial's process: its exit is
    the attempt's. OpenMPI ends every rank when one crashes or when the
    launcher gets SIGTERM; the ranks are leaders of their own process
    groups, so signals go to the launcher's descendants too
    (disp__mpi_signal_tree), and a SIGKILL of the launcher leaves no rank.
    A launcher that leaves a rank unreaped (a zombie) for DISP_MPI_UNREAPED_S
    is hung (OpenMPI 4.1.4 can miss a rank that dies during MPI_Init,
    leaving its sibling a zombie and itself waiting forever): disp.c kills
    its tree, so the attempt ends as "killed by signal 9" and may be
    retried. A working launcher reaps its ranks at once, however unevenly
    they finish.
*/
#include "disp_int.h"
#include "common/util.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Finds prog on PATH; caller frees. NULL when absent. */
static char *s_which(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    size_t plen = strlen(prog);
    const char *p = path;
    while (*p) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char *cand = malloc(n + plen + 2);
        if (!cand)
            return NULL;
        snprintf(cand, n + plen + 2, "%.*s/%s", (int)n, p, prog);
        struct stat sb;
        if (n > 0 && stat(cand, &sb) == 0 && S_ISREG(sb.st_mode) &&
            access(cand, X_OK) == 0)
            return cand;
        free(cand);
        if (!e)
            break;
        p = e + 1;
    }
    return NULL;
}

int disp__mpi_prepare(const disp__start *st, json_t **argv, json_t **env, char *err,
                      size_t errsize)
{
    *argv = *env = NULL;
    char *mpirun = s_which("mpirun");
    if (!mpirun) {
        snprintf(
            err, errsize,
            "trial.ranks = %d needs MPI, and mpirun is not on this dispatcher's PATH "
            "(install openmpi-bin)",
            st->ranks);
        return -1;
    }
    json_t *a = json_array();
    json_t *e = st->env ? json_deep_copy(st->env) : json_object();
    if (!a || !e) {
        free(mpirun);
        json_decref(a);
        json_decref(e);
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    char num[32];
    snprintf(num, sizeof num, "%d", st->ranks);
    json_array_append_new(a, json_string(mpirun));
    json_array_append_new(a, json_string("--oversubscribe"));
    json_array_append_new(a, json_string("-np"));
    json_array_append_new(a, json_string(num));
    json_array_extend(a, (json_t *)st->argv);
    free(mpirun);
    /* defaults: what the study's env sets wins */
    static const char *const dflt[] = {"OMPI_ALLOW_RUN_AS_ROOT", "1",
                                       "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", NULL};
    for (int i = 0; dflt[i]; i += 2)
        if (!json_object_get(e, dflt[i]))
            json_object_set_new(e, dflt[i], json_string(dflt[i + 1]));
    json_object_set_new(e, "JIZHI_RANKS", json_string(num));
    snprintf(num, sizeof num, "%d", st->gpus);
    json_object_set_new(e, "JIZHI_GPUS_PER_RANK", json_string(num));
    if (json_array_size(a) != json_array_size(st->argv) + 4) {
        json_decref(a);
        json_decref(e);
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    *argv = a;
    *env = e;
    return 0;
}

/* Parent pid of pid from /proc, or -1; *state gets its state letter. */
static pid_t s_ppid_state(pid_t pid, char *state)
{
    char buf[512];
    const char *rp = util_proc_stat((long)pid, buf, sizeof buf);
    int ppid;
    if (!rp || sscanf(rp, " %c %d", state, &ppid) != 2)
        return -1;
    return (pid_t)ppid;
}

static pid_t s_ppid(pid_t pid)
{
    char state;
    return s_ppid_state(pid, &state);
}

int disp__mpi_zombie_children(pid_t root)
{
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char *end, state = 0;
        long v = strtol(de->d_name, &end, 10);
        if (*end || v <= 0)
            continue;
        if (s_ppid_state((pid_t)v, &state) == root && state == 'Z')
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

int disp__mpi_signal_tree(pid_t root, int sig)
{
    enum { MAXP = 4096 };
    pid_t *pid = malloc(MAXP * sizeof *pid), *par = malloc(MAXP * sizeof *par);
    if (!pid || !par) {
        free(pid);
        free(par);
        return 0;
    }
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d)) && n < MAXP) {
        char *end;
        long v = strtol(de->d_name, &end, 10);
        if (*end || v <= 0)
            continue;
        pid_t pp = s_ppid((pid_t)v);
        if (pp > 0) {
            pid[n] = (pid_t)v;
            par[n++] = pp;
        }
    }
    if (d)
        closedir(d);
    /* descendants of root, breadth first in place: mark by moving par to 0 */
    pid_t *todo = malloc(MAXP * sizeof *todo);
    int nt = 0, head = 0, hit = 0;
    if (todo) {
        todo[nt++] = root;
        while (head < nt) {
            pid_t cur = todo[head++];
            for (int i = 0; i < n; i++)
                if (par[i] == cur && nt < MAXP) {
                    par[i] = 0;
                    todo[nt++] = pid[i];
                    kill(pid[i], sig);
                    if (getpgid(pid[i]) == pid[i]) /* a rank's own group */
                        killpg(pid[i], sig);
                    hit++;
                }
        }
    }
    free(todo);
    free(pid);
    free(par);
    return hit;
}
