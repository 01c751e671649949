/*  main.c - the `jizhi` command line (docs/cli.md): the command table.

    The directory holding this executable is put in front of PATH so that
    trials find `jizhi` (for `jizhi report`) and `jizhi-train` next to it.
*/
#include "cli.h"

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
    "  study submit SPEC.json | list | show NAME | stop NAME | resume NAME\n"
    "        | export NAME [--format csv|json] | events NAME\n"
    "  trial list STUDY | show ID | logs ID | stop ID | pause ID | resume ID\n"
    "        | set ID KEY=VALUE...\n"
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
    "Exit status: 0 success, 1 the operation failed, 2 usage error.\n";

static void s_path_setup(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return;
    exe[n] = 0;
    const char *dir = dirname(exe);
    const char *path = getenv("PATH");
    size_t len = strlen(dir) + (path ? strlen(path) : 0) + 2;
    char *np = malloc(len);
    snprintf(np, len, "%s%s%s", dir, path ? ":" : "", path ? path : "");
    setenv("PATH", np, 1);
    free(np);
}

int main(int argc, char **argv)
{
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
    s_path_setup();
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } table[] = {
        {"run", cmd_run},
        {"controller", cmd_controller},
        {"dispatcher", cmd_dispatcher},
        {"study", cmd_study},
        {"trial", cmd_trial},
        {"report", cmd_report},
        {"batchsize-eval", cmd_bseval},
        {"watch", cmd_watch},
        {"plot", cmd_plot},
        {"serve", cmd_serve},
        {"token", cmd_token},
        {"keygen", cmd_keygen},
        {"alerts", cmd_alerts},
        {"queue", cmd_queue},
        {"quota", cmd_quota},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(cmd, table[i].name))
            return table[i].fn(argc - 1, argv + 1);
    cli_error("unknown command \"%s\"", cmd);
    fputs(s_usage, stderr);
    return CLI_USAGE;
}
