/*  disp_gpu.c - the dispatcher's GPU list.

    Either given ("0,1,3", "none") or asked from nvidia-smi, which is run
    directly (posix_spawnp, no shell) with a time limit; only that child is
    waited for, so this is safe inside a bigger process.
*/
#define _GNU_SOURCE
#include "disp_int.h"
#include "common/log.h"
#include "common/wire.h"
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DISP_MAX_GPU_INDEX 65535

extern char **environ;

/* Appends x to *v unless it is already there. 0, 1 on a duplicate, -1
   when out of memory. */
static int s_push(int **v, int *n, int x)
{
    for (int i = 0; i < *n; i++)
        if ((*v)[i] == x)
            return 1;
    int *nv = realloc(*v, (size_t)(*n + 1) * sizeof **v);
    if (!nv)
        return -1;
    nv[(*n)++] = x;
    *v = nv;
    return 0;
}

int disp__gpu_parse(const char *s, int **out, int *n, char *err, size_t errsize)
{
    *out = NULL;
    *n = 0;
    if (!strcmp(s, "none") || !strcmp(s, ""))
        return 0;
    const char *p = s;
    for (;;) {
        while (*p == ' ')
            p++;
        if (!isdigit((unsigned char)*p))
            goto bad;
        char *end;
        long x = strtol(p, &end, 10);
        if (x > DISP_MAX_GPU_INDEX)
            goto bad;
        while (*end == ' ')
            end++;
        if (s_push(out, n, (int)x) != 0)
            goto bad;
        if (*end == 0)
            return 0;
        if (*end != ',')
            goto bad;
        p = end + 1;
    }
bad:
    snprintf(err, errsize,
             "gpus \"%.64s\": expected a comma-separated list of distinct device indices "
             "(\"0,1,3\") or \"none\"",
             s);
    free(*out);
    *out = NULL;
    *n = 0;
    return -1;
}

int disp_gpus_check(const char *gpus, char *err, size_t errsize)
{
    int *v, n;
    if (disp__gpu_parse(gpus, &v, &n, err, errsize) != 0)
        return -1;
    free(v);
    return 0;
}

int disp__gpu_detect(const char *cmd, int **out)
{
    *out = NULL;
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return 0;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    char *argv[] = {(char *)cmd, "--query-gpu=index", "--format=csv,noheader", NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, cmd, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        log_info("disp", "no GPUs: cannot run %s: %s", cmd, strerror(rc));
        return 0;
    }

    char buf[8192];
    size_t len = 0;
    double deadline = util_now() + 10.0;
    int timed_out = 0;
    for (;;) {
        double left = deadline - util_now();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd p = {pfd[0], POLLIN, 0};
        int k = poll(&p, 1, (int)(left * 1000) + 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            continue;
        ssize_t r = read(pfd[0], buf + len, sizeof buf - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == sizeof buf - 1)
            break;
    }
    close(pfd[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        log_info("disp", "no GPUs: %s %s", cmd,
                 timed_out ? "took more than 10 s" : "failed");
        return 0;
    }
    buf[len] = 0;

    int n = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        while (*line == ' ')
            line++;
        char *end;
        long x = strtol(line, &end, 10);
        while (*end == ' ' || *end == '\r')
            end++;
        if (end == line || *end != 0 || x < 0 || x > DISP_MAX_GPU_INDEX) {
            log_warn("disp", "%s: ignoring unexpected line \"%.80s\"", cmd, line);
            continue;
        }
        if (s_push(out, &n, (int)x) < 0) {
            free(*out);
            *out = NULL;
            return -1;
        }
    }
    return n;
}
