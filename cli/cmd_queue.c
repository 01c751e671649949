/*  cmd_queue.c - `jizhi queue` (what waits for a slot and why) and `jizhi
    quota set|list` (per-user limits on live slots and GPUs, and the
    highest priority a user may submit). See
    docs/cli.md; the queue itself is controller/ctl_queue.c. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char s_queue_usage[] =
    "usage: jizhi queue [--json] [--db FILE] [--controller ENDPOINT]\n"
    "Shows the studies that wait to start trials and why (quota reached, no\n"
    "capacity, lower priority, ...), and each user's running slots and GPUs\n"
    "against their quota. Asks the controller.\n";

static const char s_quota_usage[] =
    "usage: jizhi quota set USER [slots=N] [gpus=N] [max_priority=normal|high]\n"
    "                       [--db FILE] [--controller ENDPOINT]\n"
    "       jizhi quota list [--json] [--db FILE] [--controller ENDPOINT]\n"
    "set limits what USER's live trials hold at once: slots (one per rank)\n"
    "and GPUs; N is a count, or `none` for no limit; a limit not given keeps\n"
    "its value. Trials beyond it wait in the queue; running ones are not\n"
    "stopped. max_priority=high lets USER submit studies of priority high\n"
    "(which preempt others' trials); without it USER may submit normal and\n"
    "low only. Admins only.\n";

static void s_limit(json_int_t v, char *buf, size_t size)
{
    if (v < 0)
        snprintf(buf, size, "none");
    else
        snprintf(buf, size, "%" JSON_INTEGER_FORMAT, v);
}

int cmd_queue(int argc, char **argv)
{
    cli_opts o;
    int rc = cli_opts_parse(argc, argv, 0, s_queue_usage, &o);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (o.nargs) {
        cli_error("queue: takes no arguments");
        fputs(s_queue_usage, stderr);
        return CLI_USAGE;
    }
    json_t *r = cli_request_of(&o, json_pack("{s:s}", "type", "queue"), 10000);
    if (!r)
        return CLI_FAIL;
    if (o.json) {
        json_object_del(r, "type");
        json_object_del(r, "req");
        cli_print_json(r);
        return CLI_OK;
    }
    json_t *waiting = json_object_get(r, "waiting"), *users = json_object_get(r, "users");
    size_t i;
    json_t *w;
    if (json_array_size(waiting) == 0)
        printf("nothing waits\n");
    else
        printf("%-24s %-12s %-8s %7s %7s %9s %5s  %s\n", "STUDY", "OWNER", "PRIORITY",
               "RUNNING", "PENDING", "PREEMPTED", "NEW", "WAITS BECAUSE");
    json_array_foreach(waiting, i, w)
    {
        printf("%-24s %-12s %-8s %7" JSON_INTEGER_FORMAT " %7" JSON_INTEGER_FORMAT
               " %9" JSON_INTEGER_FORMAT " %5" JSON_INTEGER_FORMAT "  %s\n",
               json_string_value(json_object_get(w, "study")),
               json_string_value(json_object_get(w, "owner")),
               json_string_value(json_object_get(w, "priority")),
               json_integer_value(json_object_get(w, "running")),
               json_integer_value(json_object_get(w, "pending")),
               json_integer_value(json_object_get(w, "preempted")),
               json_integer_value(json_object_get(w, "new")),
               json_string_value(json_object_get(w, "reason")));
    }
    if (json_array_size(users)) {
        printf("\n%-16s %11s %11s\n", "USER", "SLOTS", "GPUS");
        json_array_foreach(users, i, w)
        {
            char qs[32], qg[32], a[48], b[48];
            s_limit(json_integer_value(json_object_get(w, "quota_slots")), qs, sizeof qs);
            s_limit(json_integer_value(json_object_get(w, "quota_gpus")), qg, sizeof qg);
            snprintf(a, sizeof a, "%" JSON_INTEGER_FORMAT "/%s",
                     json_integer_value(json_object_get(w, "slots")), qs);
            snprintf(b, sizeof b, "%" JSON_INTEGER_FORMAT "/%s",
                     json_integer_value(json_object_get(w, "gpus")), qg);
            printf("%-16s %11s %11s\n", json_string_value(json_object_get(w, "user")), a,
                   b);
        }
    }
    json_decref(r);
    return CLI_OK;
}

/* "slots=N" / "gpus=N" / "...=none" / "max_priority=P" into msg; CLI_USAGE
   on a bad one. */
static int s_quota_arg(json_t *msg, const char *arg)
{
    const char *eq = strchr(arg, '=');
    size_t klen = eq ? (size_t)(eq - arg) : 0;
    const char *key = !eq                                               ? NULL
                      : klen == 5 && !strncmp(arg, "slots", 5)          ? "slots"
                      : klen == 4 && !strncmp(arg, "gpus", 4)           ? "gpus"
                      : klen == 12 && !strncmp(arg, "max_priority", 12) ? "max_priority"
                                                                        : NULL;
    if (!key) {
        cli_error("quota set: expected slots=N, gpus=N or max_priority=normal|high, got "
                  "\"%s\"",
                  arg);
        return CLI_USAGE;
    }
    const char *v = eq + 1;
    if (!strcmp(key, "max_priority")) {
        if (strcmp(v, "normal") != 0 && strcmp(v, "high") != 0) {
            cli_error("quota set: max_priority: expected normal or high, got \"%s\"", v);
            return CLI_USAGE;
        }
        json_object_set_new(msg, key, json_string(v));
        return CLI_OK;
    }
    long n = -1;
    if (strcmp(v, "none") != 0) {
        char *end;
        n = strtol(v, &end, 10);
        if (!*v || *end || n < 0 || n > 1000000) {
            cli_error("quota set: %s: expected a count from 0 to 1000000 or none, got "
                      "\"%s\"",
                      key, v);
            return CLI_USAGE;
        }
    }
    json_object_set_new(msg, key, json_integer(n));
    return CLI_OK;
}

/* A quota's max_priority, "normal" when the reply has none (an older
   controller or database). */
static const char *s_max_priority(const json_t *q)
{
    const char *p = json_string_value(json_object_get(q, "max_priority"));
    return p ? p : "normal";
}

int cmd_quota(int argc, char **argv)
{
    if (argc < 2) {
        fputs(s_quota_usage, stderr);
        return CLI_USAGE;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
        fputs(s_quota_usage, stdout);
        return CLI_OK;
    }
    cli_opts o;
    int rc = cli_opts_parse(argc - 1, argv + 1, 0, s_quota_usage, &o);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (!strcmp(sub, "list")) {
        if (o.nargs) {
            cli_error("quota list: takes no arguments");
            return CLI_USAGE;
        }
        cli_src src;
        if (cli_src_open(&o, &src) != CLI_OK)
            return CLI_FAIL;
        json_t *list = cli_src_read(&src, "quotas", NULL, 0, 0);
        cli_src_close(&src);
        if (!list)
            return CLI_FAIL;
        if (o.json) {
            cli_print_json(list);
            return CLI_OK;
        }
        printf("%-24s %8s %8s  %s\n", "USER", "SLOTS", "GPUS", "MAX PRIORITY");
        size_t i;
        json_t *q;
        json_array_foreach(list, i, q)
        {
            char a[32], b[32];
            s_limit(json_integer_value(json_object_get(q, "slots")), a, sizeof a);
            s_limit(json_integer_value(json_object_get(q, "gpus")), b, sizeof b);
            printf("%-24s %8s %8s  %s\n", json_string_value(json_object_get(q, "user")),
                   a, b, s_max_priority(q));
        }
        json_decref(list);
        return CLI_OK;
    }
    if (strcmp(sub, "set") != 0) {
        cli_error("quota: unknown subcommand \"%s\" (expected set or list)", sub);
        fputs(s_quota_usage, stderr);
        return CLI_USAGE;
    }
    if (o.nargs < 2) {
        cli_error("quota set: expected USER and slots=N, gpus=N and/or "
                  "max_priority=normal|high");
        fputs(s_quota_usage, stderr);
        return CLI_USAGE;
    }
    json_t *msg = json_pack("{s:s, s:s}", "type", "quota_set", "user", o.args[0]);
    for (int i = 1; i < o.nargs; i++)
        if ((rc = s_quota_arg(msg, o.args[i])) != CLI_OK) {
            json_decref(msg);
            return rc;
        }
    json_t *r = cli_request_of(&o, msg, 10000);
    if (!r)
        return CLI_FAIL;
    char a[32], b[32];
    s_limit(json_integer_value(json_object_get(r, "slots")), a, sizeof a);
    s_limit(json_integer_value(json_object_get(r, "gpus")), b, sizeof b);
    printf("quota of %s: slots %s, gpus %s, max priority %s\n",
           json_string_value(json_object_get(r, "user")), a, b, s_max_priority(r));
    json_decref(r);
    return CLI_OK;
}
