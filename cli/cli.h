/*  cli.h - the `jizhi` command: shared helpers of the cli/ files.

    main.c       command table, global help, PATH set-up
    cli_util.c   database and controller resolution, requests, output
    cmd_run.c    run (embedded controller + dispatcher), controller, dispatcher
    cmd_study.c  study submit|list|show|stop|resume|export|events
    cmd_trial.c  trial list|show|logs|stop|pause|resume|set, report
    cmd_serve.c  serve (the web dashboard), --http of run and controller
    cmd_token.c  token create|list|revoke (web API bearer tokens)

    Exit status: 0 success, 1 the operation failed, 2 usage error.
*/
#ifndef JZ_CLI_H
#define JZ_CLI_H

#include <jansson.h>
#include <stdio.h>

#include "../store/store.h"
#include "../web/web.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Each command: argc/argv start at the command's own name. */
int cmd_run(int argc, char **argv);
int cmd_controller(int argc, char **argv);
int cmd_dispatcher(int argc, char **argv);
int cmd_study(int argc, char **argv);
int cmd_trial(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_bseval(int argc, char **argv); /* cmd_bseval.c */
int cmd_watch(int argc, char **argv);  /* cmd_watch.c */
int cmd_plot(int argc, char **argv);   /* cmd_plot.c */
int cmd_serve(int argc, char **argv);  /* cmd_serve.c */
int cmd_token(int argc, char **argv);  /* cmd_token.c */

/* Starts the web server (web/) on `listen` over db, sending changes to
   `controller` (NULL: the one in db.endpoint), and prints its address.
   NULL with a message printed when it cannot listen. Caller destroys it
   with web_destroy. */
web_t *cli_web_start(const char *listen, const char *db, const char *controller);

/* Prints "jizhi: <message>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The database path: --db value if given, else $JIZHI_DB, else ./jizhi.db. */
const char *cli_db_path(const char *flag);

/* The endpoint file written next to a database ("<db>.endpoint"). */
void cli_endpoint_file(const char *db, char *out, size_t size);

/* The controller to talk to: --controller flag, $JIZHI_CONTROLLER, or the
   endpoint file next to the database. NULL when none is known. */
const char *cli_controller(const char *flag, const char *db, char *buf, size_t size);

/* Sends a request to the controller (takes ownership of msg) and returns
   the `ok` reply (caller owns). On an error reply or no answer it prints
   a message and returns NULL. */
json_t *cli_request(const char *endpoint, json_t *msg, int timeout_ms);

/* 1 when a controller answers a ping at endpoint within timeout_ms. */
int cli_ping(const char *endpoint, int timeout_ms);

/* Opens the database read-only for list/show/export; prints an error and
   returns NULL when it cannot. */
store_t *cli_open_db(const char *db);

/* Prints a JSON value to stdout, indented. Takes ownership. */
void cli_print_json(json_t *j);

/* Formats a parameter or metric value for tables. */
void cli_format_value(const json_t *v, char *buf, size_t size);

/* Formats seconds as HH:MM:SS. */
void cli_format_elapsed(double s, char *buf, size_t size);

/* 1 when argv has -h or --help. */
int cli_wants_help(int argc, char **argv);

#endif
