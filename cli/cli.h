/*  cli.h - the `jizhi` command: shared helpers of the cli/ files.

    main.c       command table, global help, PATH set-up; built twice: the
                 `jizhi` front (trial, report; hands the rest to jizhi-core)
                 and `jizhi-core` (every command)
    cli_util.c   database and controller resolution, requests, output
    cli_spec.c   spec files: paths resolved, admitted (schedulers: core only)
    cli_opts.c   the options study and trial share
    cmd_run.c    run (embedded controller + dispatcher), controller, dispatcher
    cmd_study.c  study submit|list|show|stop|resume|export|events
    cmd_importance.c study importance (parameter importance)
    cmd_trial.c  trial list|show|logs|stop|pause|resume|set, report
    cmd_bseval.c batchsize-eval (batch-size measurements of a study)
    cmd_watch.c  watch (live terminal view of a study)
    watch_model.c, watch_view.c  its model and its screen (watch_internal.h)
    cmd_plot.c   plot (metric curves as SVG)
    cmd_serve.c  serve (the web dashboard), --http of run and controller
    cmd_token.c  token create|list|revoke (web API bearer tokens)
    cmd_keygen.c keygen (CURVE key pairs)
    cmd_alerts.c alerts (the alerts that fired)
    cmd_queue.c  queue (what waits and why), quota set|list

    Exit status: 0 success, 1 the operation failed, 2 usage error.
*/
#ifndef JZ_CLI_H
#define JZ_CLI_H

#include <jansson.h>
#include <stdio.h>

#include "../common/spec.h"
#include "../common/text.h"
#include "../common/wire.h"
#include "jizhi.h"
#include "../store/store.h"
#include "../web/web.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Each command: argc/argv start at the command's own name. */
int cmd_run(int argc, char **argv);
int cmd_controller(int argc, char **argv);
int cmd_dispatcher(int argc, char **argv);
/* `jizhi dispatcher release NAME` (cmd_disp_release.c). */
int cmd_disp_release(int argc, char **argv);
int cmd_study(int argc, char **argv);
int cmd_trial(int argc, char **argv);
int cmd_report(int argc, char **argv);

/* The trial helper's calls `jizhi report` makes (jizhi.h). jizhi-core
   links the helper; the `jizhi` front loads libjizhi on first use
   (cli/main.c), so that its other commands load no libzmq. */
typedef struct {
    jz_trial *(*open)(void);
    int (*report)(jz_trial *t, long step, const char *metric, double value);
    int (*flush)(jz_trial *t, int timeout_ms);
    void (*close)(jz_trial **tp);
} cli_helper_api;
/* The helper's calls (borrowed, static), or NULL after printing why they
   cannot be loaded. */
const cli_helper_api *cli_helper(void);
int cmd_bseval(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_token(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_alerts(int argc, char **argv);
int cmd_queue(int argc, char **argv);
int cmd_quota(int argc, char **argv);

/* Starts the web server (web/) on `listen` over db, sending changes to
   `controller` (NULL: the one in db.endpoint), and prints its address.
   NULL with a message printed when it cannot listen. Caller destroys it
   with web_destroy. */
web_t *cli_web_start(const char *listen, const char *db, const char *controller);
/* Checks an --http HOST:PORT (NULL: none given) before anything is
   created: 0, or -1 after printing why (the caller exits CLI_USAGE). */
int cli_http_check(const char *listen);

/* Prints "jizhi: <message>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A usage error: cli_error's line, then `usage` to stderr. Returns
   CLI_USAGE. */
int cli_usage_error(const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

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
/* cli_request, asking check(arg) between slices of slice_ms of the wait
   (client_call_check): its non-NULL result is taken as the answer. */
json_t *cli_request_check(const char *endpoint, json_t *msg, int timeout_ms, int slice_ms,
                          wire_check_fn check, void *arg);

/* 1 when a controller answers a ping at endpoint within timeout_ms. */
int cli_ping(const char *endpoint, int timeout_ms);

/* Opens the database read-only for list/show/export; prints an error and
   returns NULL when it cannot. */
store_t *cli_open_db(const char *db);

/* Prints a JSON value to stdout, indented. Takes ownership. */
void cli_print_json(json_t *j);

/* Sets spec_json's trial.cwd to this process's folder when absent (a
   relative one is taken against it), trial.venv absolute against
   trial.cwd, and resolves relative paths in trial.command and trial.env
   against trial.cwd, else the folder of the spec file `spec_path`,
   rewriting them as absolute paths, so trials find them wherever the
   dispatcher runs (a bare name like `train.py` is left: the trial runs in
   trial.cwd). An argument that looks like a relative path (has a '/', no
   placeholder, '=' or ':') but exists in neither folder is refused: -1
   with err naming the field; else 0. */
int cli_resolve_paths(json_t *spec_json, const char *spec_path, char *err, size_t size);

/* Reads the spec file `path`, resolves its paths (cli_resolve_paths) and
   admits it as every door does (sched_admit: spec_parse with every check
   of a submitter, trial.cwd, trial.venv, trial.command[0], then its
   scheduler and monitors). The spec (caller owns it), or NULL with err
   ("field: text", or the file's error). */
spec_t *cli_spec_load(const char *path, char *err, size_t size);

/* Prints the warning events of `events` (borrowed) as "warning: ..." lines. */
void cli_print_warnings(const json_t *events);

/* Prints trials (store_trial_json objects, borrowed) as the table that
   `study show` and `trial list` share: ID STATE TRY PRE (preemptions) STEP
   VALUE PARAMS,
   then the reason of each failed trial. */
void cli_print_trials(const json_t *trials);

/* Formats a parameter or metric value for tables. */
void cli_format_value(const json_t *v, char *buf, size_t size);

/* Formats seconds as HH:MM:SS. */
void cli_format_elapsed(double s, char *buf, size_t size);

/* Parses one KEY=VALUE (a parameter name, then a number when the value reads as
   one, an integer when it reads as a whole one, else the text) into values.
   0, or -1 with the reason in err (values unchanged). */
int cli_kv_parse(const char *arg, json_t *values, char *err, size_t errsize);

/* The options the commands share (cli_opts.c): --help always; the others
   when `accept` has their bit (cli_opts_parse adds CLI_OPT_BASE). */
enum {
    CLI_OPT_FORMAT = 1 << 0,      /* --format csv|json */
    CLI_OPT_OUTPUT = 1 << 1,      /* --output FILE, -o FILE */
    CLI_OPT_WAIT = 1 << 2,        /* --no-wait, --timeout S */
    CLI_OPT_STDERR = 1 << 3,      /* --stderr */
    CLI_OPT_RELEASE = 1 << 4,     /* --release */
    CLI_OPT_ALL = 1 << 5,         /* --all */
    CLI_OPT_FOLLOW = 1 << 6,      /* --follow, -f */
    CLI_OPT_TRIALS = 1 << 7,      /* --trials N (study extend) */
    CLI_OPT_PRIORITY = 1 << 8,    /* --priority high|normal|low */
    CLI_OPT_FORCE = 1 << 9,       /* --force (trial set: a value outside the space) */
    CLI_OPT_YES = 1 << 10,        /* --yes, -y (study delete: no question) */
    CLI_OPT_GUARD = 1 << 11,      /* --guard[=values], --watch-steps K, --tolerance X */
    CLI_OPT_FORK = 1 << 12,       /* --steps K, --keep best|all, --decide (trial fork) */
    CLI_OPT_DB = 1 << 24,         /* --db FILE */
    CLI_OPT_CONTROLLER = 1 << 25, /* --controller ENDPOINT */
    CLI_OPT_JSON = 1 << 26,       /* --json */
    CLI_OPT_BASE = CLI_OPT_DB | CLI_OPT_CONTROLLER | CLI_OPT_JSON,
};
typedef struct {
    const char *db;         /* --db, else $JIZHI_DB, else ./jizhi.db (borrowed) */
    const char *controller; /* --controller or NULL (borrowed from argv) */
    const char *format;     /* --format, default "csv" */
    const char *output;     /* --output or NULL */
    const char *priority;   /* --priority or NULL */
    int json, no_wait, err_only, release, all, follow, force, yes;
    long trials;      /* --trials, 0 when absent */
    double timeout;   /* --timeout, default 30 s */
    int timeout_set;  /* --timeout was given */
    int guard;        /* --guard: 1, --guard=values: 2, else 0 */
    long watch_steps; /* --watch-steps, 0 when absent */
    double tolerance; /* --tolerance, -1 when absent */
    long steps;       /* --steps (trial fork), 0 when absent */
    const char *keep; /* --keep best|all, NULL when absent */
    int decide;       /* --decide (trial fork) */
    int nargs;        /* positional arguments left */
    char **args;      /* borrowed from argv */
} cli_opts;

/* `study importance NAME` (cmd_importance.c), with the options parsed:
   o->args[0] is the study. CLI_OK or CLI_FAIL (after printing why). */
int cli_study_importance(const cli_opts *o);

/* `trial ask STUDY` and `trial tell ID VALUE...|failed [MESSAGE]|pruned
   [VALUE...]` (cmd_ask.c), with the options parsed (o->args: what follows
   the subcommand). CLI_OK, CLI_FAIL or CLI_USAGE (after printing why). */
int cli_trial_ask(const cli_opts *o);
int cli_trial_tell(const cli_opts *o);
/* 1 after saying why when spec (from the file `path`) is an ask-and-tell
   study, which `jizhi run` cannot run (nothing would start its trials); 0
   otherwise. */
int cli_ask_only_refused(const spec_t *spec, const char *path);

/* `study delete NAME` and `study copy NAME NEW` (cmd_study_ops.c), with
   the options parsed. CLI_OK, CLI_FAIL or CLI_USAGE (after printing why). */
int cli_study_delete(const cli_opts *o);
int cli_study_copy(const cli_opts *o);

/* Parses argv (argv[0] is the subcommand). 0 when done; -1 after printing
   `usage` to stdout for --help; CLI_USAGE after printing the error and
   `usage` to stderr. */
int cli_opts_parse(int argc, char **argv, unsigned accept, const char *usage,
                   cli_opts *o);

/* A command's own option, beside the shared ones: --NAME VALUE stores the
   value (borrowed from argv) in *value, --NAME alone sets *flag to 1 (one
   of the two is set). The command checks the values after the parse. A
   table ends with {NULL}; at most 24 entries. */
typedef struct {
    const char *name;   /* without "--" */
    const char **value; /* takes an argument: where it goes */
    int *flag;          /* takes none: set to 1 */
} cli_opt_extra;

/* cli_opts_parse with the shared options chosen by `accept` alone (no
   CLI_OPT_BASE added) and the command's own in `extra` (NULL: none).
   Returns as cli_opts_parse. */
int cli_opts_parse_ext(int argc, char **argv, unsigned accept, const cli_opt_extra *extra,
                       const char *usage, cli_opts *o);

/* cli_controller for o's --controller and --db; when none is known, NULL
   after printing "no controller known for DB: start `jizhi controller
   --db DB` (or `jizhi run`), or pass --controller ENDPOINT". */
const char *cli_controller_of(const cli_opts *o, char *buf, size_t size);
/* cli_request to cli_controller_of(o): takes ownership of msg, returns
   the `ok` reply (caller owns) or NULL after printing why. */
json_t *cli_request_of(const cli_opts *o, json_t *msg, int timeout_ms);

/* Where the read commands (list, show, export, events, logs, watch) read:
   the database file, or a controller when --controller is given (or
   $JIZHI_CONTROLLER is set and no database file is readable), so they work
   from another machine. */
typedef struct {
    store_t *s;     /* the database, or NULL when remote */
    char ep[512];   /* the controller's endpoint when remote */
    const char *db; /* borrowed */
} cli_src;
/* Opens the source for o (prints why not). CLI_OK or CLI_FAIL. */
int cli_src_open(const cli_opts *o, cli_src *src);
void cli_src_close(cli_src *src);
/* Reads "studies", "study" (name), "trial" (id) or "metrics_since" (name,
   after) as the controller's `read` answers it (docs/PROTOCOL.md): the
   data (caller owns), or NULL after printing why. */
json_t *cli_src_read(cli_src *src, const char *what, const char *study, long id,
                     long after);

#endif
