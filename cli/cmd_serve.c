/*  cmd_serve.c - `jizhi serve`: the web dashboard and HTTP API (web/)
    over a database, and the --http option that `jizhi run` and `jizhi
    controller` share (cli_web_start). */
#include "cli.h"

#include "../common/log.h"
#include "../common/util.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static const char s_usage[] =
    "usage: jizhi serve [--http HOST:PORT] [--db FILE] [--controller ENDPOINT]\n"
    "Serves the web dashboard and its HTTP API for the database (default\n"
    "http://127.0.0.1:8080/) until SIGINT/SIGTERM. Reads use the database\n"
    "read-only; changes (submit, stop, set, pause...) go to the controller serving\n"
    "it and need a token from `jizhi token create`.\n";

web_t *cli_web_start(const char *listen, const char *db, const char *controller)
{
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    /* the server's threads must not take the signals meant for the main thread */
    pthread_sigmask(SIG_BLOCK, &set, &old);
    char err[512];
    web_config wc = {.listen = listen, .db_path = db, .controller = controller};
    web_t *w = web_new(&wc, err, sizeof err);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!w) {
        cli_error("%s", err);
        return NULL;
    }
    char host[128];
    snprintf(host, sizeof host, "%s", listen);
    char *colon = strrchr(host, ':');
    if (colon)
        *colon = 0;
    fprintf(stderr, "jizhi: web dashboard at http://%s:%d/\n",
            !strcmp(host, "localhost") ? "127.0.0.1" : host, web_port(w));
    return w;
}

int cli_http_check(const char *listen)
{
    char err[256];
    if (listen && web_listen_check(listen, err, sizeof err) != 0) {
        cli_error("%s", err);
        return -1;
    }
    return 0;
}

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    s_stop = sig;
}

int cmd_serve(int argc, char **argv)
{
    const char *listen = "127.0.0.1:8080";
    const cli_opt_extra extra[] = {{"http", &listen, NULL}, {NULL}};
    cli_opts o;
    int prc = cli_opts_parse_ext(argc, argv, CLI_OPT_DB | CLI_OPT_CONTROLLER, extra,
                                 s_usage, &o);
    if (prc)
        return prc < 0 ? CLI_OK : prc;
    if (o.nargs) {
        cli_error("serve: unexpected argument \"%s\"", o.args[0]);
        return CLI_USAGE;
    }
    if (cli_http_check(listen) != 0)
        return CLI_USAGE;
    const char *db = o.db, *controller = o.controller;
    store_t *s = cli_open_db(db); /* refuse a missing or foreign database now */
    if (!s)
        return CLI_FAIL;
    store_close(&s);
    util_on_stop_signals(s_on_signal, 0);
    signal(SIGPIPE, SIG_IGN);
    web_t *w = cli_web_start(listen, db, controller);
    if (!w)
        return CLI_FAIL;
    while (!s_stop)
        pause();
    web_destroy(&w);
    return CLI_OK;
}
