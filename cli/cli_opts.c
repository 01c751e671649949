/*  cli_opts.c - the one option parser of the `jizhi` commands (cli.h).

    One getopt_long table; each command says which of the optional entries
    it accepts, and an option it does not accept is a usage error there.
    A command's own options (run's --slots, watch's --interval, ...) come
    as a table of cli_opt_extra beside it, so no command writes its own
    getopt loop.
*/
#include "cli.h"

#include "../common/spec.h"

#include <assert.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

/* Says what getopt_long (opterr = 0) refused in the form of the commands'
   other errors, "jizhi: CMD: ...": c is what it returned (':' a missing
   value, '?' else), optopt the option's letter or value (0: an unknown or
   ambiguous --NAME). A long option is always argv[optind - 1]; a letter
   inside a cluster of short ones may not be. */
static void s_bad_option(char **argv, int c, const struct option *opts)
{
    const char *arg = argv[optind - 1];
    int is_long = !strncmp(arg, "--", 2);
    int len = is_long ? (int)strcspn(arg + 2, "=") : 0, matches = 0;
    const struct option *known = NULL;
    for (const struct option *p = opts; is_long && p->name; p++)
        if (!strncmp(p->name, arg + 2, (size_t)len)) { /* an abbreviation counts */
            matches++;
            if (optopt && p->val == optopt)
                known = p;
        }
    if (known)
        cli_error("%s: --%s %s", argv[0], known->name,
                  c == ':' ? "needs a value" : "takes no value");
    else if (optopt && c == ':')
        cli_error("%s: -%c needs a value", argv[0], optopt);
    else if (optopt)
        cli_error("%s: unknown option \"-%c\"", argv[0], optopt);
    else
        cli_error("%s: %s option \"--%.*s\"", argv[0],
                  matches > 1 ? "ambiguous" : "unknown", len, arg + 2);
}

int cli_opts_parse(int argc, char **argv, unsigned accept, const char *usage, cli_opts *o)
{
    return cli_opts_parse_ext(argc, argv, accept | CLI_OPT_BASE, NULL, usage, o);
}

int cli_opts_parse_ext(int argc, char **argv, unsigned accept, const cli_opt_extra *extra,
                       const char *usage, cli_opts *o)
{
    static const struct {
        struct option opt;
        unsigned need; /* 0: every command */
    } table[] = {
        {{"db", required_argument, 0, 'd'}, CLI_OPT_DB},
        {{"controller", required_argument, 0, 'c'}, CLI_OPT_CONTROLLER},
        {{"json", no_argument, 0, 'j'}, CLI_OPT_JSON},
        {{"help", no_argument, 0, 'h'}, 0},
        {{"format", required_argument, 0, 'm'}, CLI_OPT_FORMAT},
        {{"output", required_argument, 0, 'o'}, CLI_OPT_OUTPUT},
        {{"no-wait", no_argument, 0, 'n'}, CLI_OPT_WAIT},
        {{"timeout", required_argument, 0, 't'}, CLI_OPT_WAIT},
        {{"stderr", no_argument, 0, 'e'}, CLI_OPT_STDERR},
        {{"release", no_argument, 0, 'r'}, CLI_OPT_RELEASE},
        {{"all", no_argument, 0, 'a'}, CLI_OPT_ALL},
        {{"follow", no_argument, 0, 'f'}, CLI_OPT_FOLLOW},
        {{"priority", required_argument, 0, 'p'}, CLI_OPT_PRIORITY},
        {{"trials", required_argument, 0, 'T'}, CLI_OPT_TRIALS},
        {{"force", no_argument, 0, 'F'}, CLI_OPT_FORCE},
        {{"yes", no_argument, 0, 'y'}, CLI_OPT_YES},
        {{"guard", optional_argument, 0, 'G'}, CLI_OPT_GUARD},
        {{"watch-steps", required_argument, 0, 'W'}, CLI_OPT_GUARD},
        {{"tolerance", required_argument, 0, 'O'}, CLI_OPT_GUARD},
        {{"steps", required_argument, 0, 'S'}, CLI_OPT_FORK},
        {{"keep", required_argument, 0, 'K'}, CLI_OPT_FORK},
        {{"decide", no_argument, 0, 'D'}, CLI_OPT_FORK},
    };
    enum { N = sizeof table / sizeof table[0], X_MAX = 24, X_BASE = 256 };
    struct option opts[N + X_MAX + 1];
    int k = 0;
    for (int i = 0; i < N; i++)
        if (!table[i].need || (accept & table[i].need))
            opts[k++] = table[i].opt;
    int nx = 0;
    for (; extra && extra[nx].name; nx++) {
        assert(nx < X_MAX && (!extra[nx].value != !extra[nx].flag));
        opts[k++] = (struct option){extra[nx].name,
                                    extra[nx].value ? required_argument : no_argument, 0,
                                    X_BASE + nx};
    }
    memset(&opts[k], 0, sizeof opts[k]);

    memset(o, 0, sizeof *o);
    o->format = "csv";
    o->timeout = 30;
    o->tolerance = -1;
    char shorts[8] = ":h"; /* ':': a missing value is told apart (s_bad_option) */
    if (accept & CLI_OPT_OUTPUT)
        strcat(shorts, "o:");
    if (accept & CLI_OPT_FOLLOW)
        strcat(shorts, "f");
    if (accept & CLI_OPT_YES)
        strcat(shorts, "y");
    int c;
    optind = 1;
    opterr = 0; /* getopt's own messages lack "jizhi: ": s_bad_option's instead */
    while ((c = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            o->db = optarg;
            break;
        case 'c':
            o->controller = optarg;
            break;
        case 'j':
            o->json = 1;
            break;
        case 'm':
            o->format = optarg;
            break;
        case 'o':
            o->output = optarg;
            break;
        case 'n':
            o->no_wait = 1;
            break;
        case 'e':
            o->err_only = 1;
            break;
        case 'r':
            o->release = 1;
            break;
        case 'a':
            o->all = 1;
            break;
        case 'f':
            o->follow = 1;
            break;
        case 'F':
            o->force = 1;
            break;
        case 'y':
            o->yes = 1;
            break;
        case 'p':
            if (spec_priority_parse(optarg) < 0) {
                cli_error("--priority: expected high, normal or low, got \"%s\"", optarg);
                return CLI_USAGE;
            }
            o->priority = optarg;
            break;
        case 'G':
            if (optarg && strcmp(optarg, "values")) {
                cli_error(
                    "--guard: expected --guard or --guard=values, got \"--guard=%s\"",
                    optarg);
                return CLI_USAGE;
            }
            o->guard = optarg ? 2 : 1;
            break;
        case 'W':
        case 'S': {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || !*optarg || n < 1 || n > 100000) {
                cli_error("--%s: expected a whole number from 1 to 100000, got \"%s\"",
                          c == 'W' ? "watch-steps" : "steps", optarg);
                return CLI_USAGE;
            }
            *(c == 'W' ? &o->watch_steps : &o->steps) = n;
            break;
        }
        case 'O': {
            char *end;
            o->tolerance = strtod(optarg, &end);
            if (*end || !*optarg || !(o->tolerance >= 0 && o->tolerance <= 100)) {
                cli_error("--tolerance: expected a number from 0 to 100, got \"%s\"",
                          optarg);
                return CLI_USAGE;
            }
            break;
        }
        case 'K':
            if (strcmp(optarg, "best") && strcmp(optarg, "all")) {
                cli_error("--keep: expected best or all, got \"%s\"", optarg);
                return CLI_USAGE;
            }
            o->keep = optarg;
            break;
        case 'D':
            o->decide = 1;
            break;
        case 't': {
            char *end;
            o->timeout_set = 1;
            o->timeout = strtod(optarg, &end);
            if (*end || !(o->timeout > 0)) {
                cli_error("--timeout: expected seconds > 0, got \"%s\"", optarg);
                return CLI_USAGE;
            }
            break;
        }
        case 'T': {
            char *end;
            o->trials = strtol(optarg, &end, 10);
            if (*end || !*optarg || o->trials < 1 || o->trials > 1000000) {
                cli_error(
                    "--trials: expected a whole number from 1 to 1000000, got \"%s\"",
                    optarg);
                return CLI_USAGE;
            }
            break;
        }
        case 'h':
            fputs(usage, stdout);
            return -1;
        default:
            if (c >= X_BASE && c < X_BASE + nx) { /* the command's own option */
                const cli_opt_extra *x = &extra[c - X_BASE];
                if (x->value)
                    *x->value = optarg;
                else
                    *x->flag = 1;
                break;
            }
            s_bad_option(argv, c, opts);
            fputs(usage, stderr);
            return CLI_USAGE;
        }
    }
    o->db = cli_db_path(o->db);
    o->nargs = argc - optind;
    o->args = argv + optind;
    return 0;
}
