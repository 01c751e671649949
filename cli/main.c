/*  main.c - the `jizhi` command line (docs/cli.md): the command table.

    Built twice. `jizhi-core` (the default build) runs every command.
    `jizhi` (built with CLI_FRONT) is the front users type: it runs the
    commands a trial's life calls often and in a hurry (`trial ...`:
    set, pause, stop, list, ...; `report`) itself and hands every other
    command to jizhi-core next to it (execv, same pid, arguments and
    environment). The front links SQLite and jansson only: no GSL,
    OpenBLAS (whose constructor starts a busy-waiting thread) or curses
    to load, relocate and tear down, which was about half of the time a
    `trial set` process took (docs/bench.md, bench-torch); and no libzmq:
    its requests over ipc:// speak ZMTP on its own thread
    (common/zmtp.h), a request to a tcp:// endpoint hands the whole
    command to jizhi-core (client__zmq_call below), and `report` loads
    the trial helper, libjizhi, when it runs (cli_helper below).

    The directory holding this executable is put in front of PATH so that
    trials find `jizhi` (for `jizhi report`) and `jizhi-train` next to it.
*/
#include "cli.h"
#ifndef CLI_FRONT
#include "common/blaskern.h"
#else
#include "common/client.h"

#include <dlfcn.h>
#endif

#include <errno.h>

#include <libgen.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char s_usage[] =
    "usage: jizhi COMMAND [ARGS]\n"
    "\n"
    "  run SPEC.json [--db FILE] [--slots N]       embedded controller + dispatcher, to "
    "completion\n"
    "  controller [--db FILE] [--bind ENDPOINT]    the controller daemon\n"
    "  dispatcher --controller ENDPOINT [--gpus LIST] [--slots N] [--name NAME]\n"
    "        | release NAME                        free a silent dispatcher's name\n"
    "  study submit SPEC.json | list | show NAME | stop NAME | resume NAME\n"
    "        | enqueue NAME PARAM=VALUE... | extend NAME --trials N\n"
    "        | export NAME [--format csv|json|curves] | events NAME | importance NAME\n"
    "        | delete NAME [--yes] | copy NAME NEW\n"
    "  trial list STUDY | show ID | logs ID | stop ID | pause ID [--release]\n"
    "        | resume ID | set ID KEY=VALUE... [--force] [--guard[=values]]\n"
    "        | fork ID KEY=VALUE... [--steps K] [--keep best|all] | fork ID --decide\n"
    "        | ask STUDY [--json] | tell ID VALUE...     ask-and-tell (docs/python.md)\n"
    "  watch STUDY [--interval S]                  live terminal view; steer the trials\n"
    "  plot STUDY [--output FILE.svg] [--x step|time|METRIC]   SVG: history, learning "
    "curves\n"
    "  batchsize-eval [OPTS] -- COMMAND | --log FILE | --trial ID   critical batch size\n"
    "  serve [--http HOST:PORT] [--db FILE]        web dashboard and HTTP API\n"
    "  token create USER [--role R] | list | revoke ID|USER   web API tokens\n"
    "  keygen [--out DIR] [--name NAME]            a CURVE key pair for tcp://\n"
    "  alerts [STUDY]                              the alerts that fired\n"
    "  queue                                       what waits for a slot, and why\n"
    "  quota set USER slots=N gpus=N | list        per-user limits\n"
    "  report [--step N] NAME=VALUE...             from inside a trial\n"
    "\n"
    "  --version                                   print the version\n"
    "\n"
    "Every command takes --help. The database is ./jizhi.db unless --db FILE or\n"
    "JIZHI_DB says otherwise; commands find the controller serving it through\n"
    "FILE.endpoint, or --controller ENDPOINT / JIZHI_CONTROLLER.\n"
    "Over tcp:// every command that talks to a controller needs its public key:\n"
    "--server-key KEY|FILE or JIZHI_SERVER_KEY (default KEYDIR/controller.pub;\n"
    "`jizhi keygen --name controller` printed it on the controller's host), or\n"
    "--insecure for plain TCP to an --insecure controller (trusted networks only).\n"
    "Exit status: 0 success, 1 the operation failed, 2 usage error.\n";

/* A command of jizhi-core's: NULL in the front's table (s_core_exec). */
#ifdef CLI_FRONT
#define S_CORE(fn) NULL
#else
#define S_CORE(fn) fn
#endif
#define S_CORE_NAME "jizhi-core"

/* Writes this executable's folder (from /proc/self/exe) into dir, of
   PATH_MAX bytes. Returns 0, or -1 with errno set when it cannot be read. */
static int s_exe_dir(char *dir)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        if (n == 0)
            errno = ENOENT;
        return -1;
    }
    exe[n] = 0;
    snprintf(dir, PATH_MAX, "%s", dirname(exe));
    return 0;
}

static void s_path_setup(void)
{
    char dir[PATH_MAX];
    if (s_exe_dir(dir) != 0)
        return;
    const char *path = getenv("PATH");
    size_t len = strlen(dir) + (path ? strlen(path) : 0) + 2;
    char *np = malloc(len);
    if (!np) /* PATH stays as it is: the commands still run by full path */
        return;
    snprintf(np, len, "%s%s%s", dir, path ? ":" : "", path ? path : "");
    setenv("PATH", np, 1);
    free(np);
}

/* The options every command that talks to a controller takes, wherever
   they stand before a "--": --server-key KEY|FILE and --insecure, read by
   keys_client_setup (common/keys.h) through JIZHI_SERVER_KEY ("none" for
   plain TCP; JIZHI_SERVER_KEY_FROM says the flag set it). Removes them
   from argv; returns the new argc, or -1 after printing a usage error. */
static int s_client_opts(int argc, char **argv)
{
    const char *key = NULL;
    int insecure = 0, n = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            while (i < argc)
                argv[n++] = argv[i++];
            break;
        }
        if (!strcmp(a, "--insecure")) {
            insecure = 1;
        } else if (!strcmp(a, "--server-key")) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                cli_error("--server-key: expected the controller's public key or its "
                          "file");
                return -1;
            }
            key = argv[++i];
        } else if (!strncmp(a, "--server-key=", 13)) {
            key = a + 13;
            if (!*key) {
                cli_error("--server-key: expected the controller's public key or its "
                          "file");
                return -1;
            }
        } else {
            argv[n++] = argv[i];
        }
    }
    argv[n] = NULL;
    if (insecure && key) {
        cli_error("--insecure and --server-key: choose one (plain TCP, or CURVE with "
                  "that key)");
        return -1;
    }
    if (insecure)
        setenv("JIZHI_SERVER_KEY", "none", 1);
    else if (key)
        setenv("JIZHI_SERVER_KEY", key, 1);
    /* what a bad key is blamed on (keys.h); none inherited from a parent */
    if (key)
        setenv("JIZHI_SERVER_KEY_FROM", "--server-key", 1);
    else
        unsetenv("JIZHI_SERVER_KEY_FROM");
    return n;
}

/* The front: runs jizhi-core, from this executable's folder, with argv.
   Returns only when it cannot (CLI_FAIL, after saying why). */
static int s_core_exec(char **argv)
{
    char dir[PATH_MAX], core[PATH_MAX + sizeof S_CORE_NAME + 1];
    if (s_exe_dir(dir) != 0) {
        cli_error("cannot find this program's folder (/proc/self/exe): %s",
                  strerror(errno));
        return CLI_FAIL;
    }
    snprintf(core, sizeof core, "%s/%s", dir, S_CORE_NAME);
    execv(core, argv);
    cli_error("cannot run %s, which runs `jizhi %s`: %s (install it next to jizhi)", core,
              argv[1], strerror(errno));
    return CLI_FAIL;
}

#ifdef CLI_FRONT
/* main's, for handing the command to jizhi-core: a copy taken before
   s_client_opts removes --server-key from argv, so that jizhi-core reads
   the flag too (and names it in its messages) */
static char **s_argv;

/* The front's tcp:// path (common/client.h): jizhi-core runs the whole
   command again (same arguments; --server-key and --insecure are in the
   environment by then), so CURVE and libzmq stay out of the front. Its
   commands send no request after printing or changing anything, so
   nothing is done twice. When jizhi-core cannot run, s_core_exec has
   said why and the front exits with CLI_FAIL: nothing was sent, and a
   second line blaming the controller would mislead. */
json_t *client__zmq_call(const char *endpoint, json_t *msg, int timeout_ms, int slice_ms,
                         wire_check_fn check, void *arg, char *err, size_t errsize)
{
    (void)endpoint, (void)timeout_ms, (void)slice_ms, (void)check, (void)arg, (void)err,
        (void)errsize;
    json_decref(msg);
    exit(s_core_exec(s_argv));
}

/* libjizhi next to this program (../lib, as built and as installed), else
   by its soname from the system's library path. */
const cli_helper_api *cli_helper(void)
{
    static cli_helper_api api;
    if (api.open)
        return &api;
    char dir[PATH_MAX], path[PATH_MAX + 64], why[600] = "";
    void *h = NULL;
    if (s_exe_dir(dir) == 0) {
        snprintf(path, sizeof path, "%s/../lib/%s", dir, JZ_SONAME);
        if (!(h = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
            snprintf(why, sizeof why, "%s", dlerror());
    }
    if (!h && !(h = dlopen(JZ_SONAME, RTLD_NOW | RTLD_LOCAL))) {
        cli_error("report: cannot load the trial helper library %s (%s; %s)", JZ_SONAME,
                  why[0] ? why : "no folder of this program", dlerror());
        return NULL;
    }
    cli_helper_api a = {
        .open = (jz_trial * (*)(void)) dlsym(h, "jz_open"),
        .report = (int (*)(jz_trial *, long, const char *, double))dlsym(h, "jz_report"),
        .flush = (int (*)(jz_trial *, int))dlsym(h, "jz_flush"),
        .close = (void (*)(jz_trial **))dlsym(h, "jz_close"),
    };
    if (!a.open || !a.report || !a.flush || !a.close) {
        cli_error("report: %s lacks the jz_* calls it needs (another version?)",
                  JZ_SONAME);
        return NULL;
    }
    api = a;
    return &api;
}
#else
const cli_helper_api *cli_helper(void)
{
    static const cli_helper_api api = {jz_open, jz_report, jz_flush, jz_close};
    return &api;
}
#endif

int main(int argc, char **argv)
{
#ifdef CLI_FRONT
    s_argv = malloc((size_t)(argc + 1) * sizeof *argv);
    if (!s_argv) {
        cli_error("out of memory");
        return CLI_FAIL;
    }
    memcpy(s_argv, argv, (size_t)(argc + 1) * sizeof *argv);
#endif
    if (argc < 2) {
        fputs(s_usage, stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(s_usage, stdout);
        return CLI_OK;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("jizhi %s\n", JIZHI_VERSION);
        return CLI_OK;
    }
    /* the commands that host the controller (the bo GP's BLAS): kernels
       from cpuid, before OpenBLAS is used (common/blaskern.h) */
#ifndef CLI_FRONT
    if (!strcmp(cmd, "run") || !strcmp(cmd, "controller"))
        blaskern_choose(argv);
#endif
    /* client: takes --server-key and --insecure as a client of a controller
       (the controller's own --insecure is the server side); fn NULL: the
       front hands the command to jizhi-core */
    static const struct {
        const char *name;
        int (*fn)(int, char **);
        int client;
    } table[] = {
        {"run", S_CORE(cmd_run), 0},
        {"controller", S_CORE(cmd_controller), 0},
        {"dispatcher", S_CORE(cmd_dispatcher), 1},
        {"study", S_CORE(cmd_study), 1},
        {"trial", cmd_trial, 1},
        {"report", cmd_report, 1},
        {"batchsize-eval", S_CORE(cmd_bseval), 1},
        {"watch", S_CORE(cmd_watch), 1},
        {"plot", S_CORE(cmd_plot), 1},
        {"serve", S_CORE(cmd_serve), 1},
        {"token", S_CORE(cmd_token), 1},
        {"keygen", S_CORE(cmd_keygen), 0},
        {"alerts", S_CORE(cmd_alerts), 1},
        {"queue", S_CORE(cmd_queue), 1},
        {"quota", S_CORE(cmd_quota), 1},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(cmd, table[i].name) != 0)
            continue;
        if (!table[i].fn)
            return s_core_exec(argv);
        s_path_setup();
        if (table[i].client && (argc = s_client_opts(argc, argv)) < 0)
            return CLI_USAGE;
        return table[i].fn(argc - 1, argv + 1);
    }
    return cli_usage_error(s_usage, "unknown command \"%s\"", cmd);
}
