/*  cmd_token.c - `jizhi token create|list|revoke`: the bearer tokens that
    the web API's write endpoints require. A token is shown once, when it
    is created; the store keeps only its SHA-256 (common/ident.h). */
#include "cli.h"

#include "../common/ident.h"
#include "../common/wire.h"
#include "../common/util.h"

#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char s_usage[] =
    "usage: jizhi token create [USER] [--role admin|user|viewer] [--db FILE]\n"
    "       jizhi token list [--json] [--db FILE]\n"
    "       jizhi token revoke ID|USER [--db FILE]\n"
    "create prints a new token for USER (default: you, by your login name, the\n"
    "owner of the studies you submit; default role: user) once; keep it. A\n"
    "user's token steers only the studies that user owns. The web page and API\n"
    "take it as \"Authorization: Bearer TOKEN\". revoke ID revokes one token,\n"
    "revoke USER every token of that user.\n";

static store_t *s_open_rw(const char *db)
{
    char err[600];
    store_t *s = store_open(db, 0, err, sizeof err);
    if (!s)
        cli_error("%s", err);
    return s;
}

/* The login name of uid into out; "" when it has none that is a valid
   user name. Returns out. */
static const char *s_login(uid_t uid, char *out, size_t size)
{
    struct passwd pw, *res = NULL;
    char buf[4096];
    *out = 0;
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res &&
        ident_valid_user(res->pw_name))
        snprintf(out, size, "%s", res->pw_name);
    return out;
}

static int s_create(const char *db, const char *user, const char *role_text)
{
    ident_role role;
    if (!ident_valid_user(user)) {
        cli_error("token create: \"%s\" is not a user name ([A-Za-z0-9_.@-], 1-63 chars)",
                  user);
        return CLI_USAGE;
    }
    if (ident_role_parse(role_text, &role) != 0 || role == IDENT_DISPATCHER) {
        cli_error("token create: --role must be admin, user or viewer, not \"%s\"",
                  role_text);
        return CLI_USAGE;
    }
    char token[IDENT_TOKEN_LEN + 1], hash[IDENT_HASH_LEN + 1];
    if (ident_token_new(token) != 0) {
        cli_error("token create: no randomness available");
        return CLI_FAIL;
    }
    ident_token_hash(token, hash);
    store_t *s = s_open_rw(db);
    if (!s)
        return CLI_FAIL;
    long id = store_token_add(s, user, ident_role_str(role), hash, util_wall());
    if (id < 0) {
        cli_error("token create: %s", store_errmsg(s));
        store_close(&s);
        return CLI_FAIL;
    }
    store_close(&s);
    printf("%s\n", token);
    fprintf(stderr, "token %ld for %s (role %s); it is shown only now\n", id, user,
            ident_role_str(role));
    /* the controller owns the database file, and the studies its own user
       submits from the command line are that user's */
    struct stat st;
    char owner[64];
    if (role == IDENT_USER && stat(db, &st) == 0 &&
        *s_login(st.st_uid, owner, sizeof owner) && strcmp(owner, user) != 0)
        fprintf(stderr,
                "note: %s steers only the studies %s owns; those submitted from the "
                "command line by %s (the controller's user) are %s's: `jizhi token "
                "create %s` makes a token that steers them\n",
                user, user, owner, owner, owner);
    return CLI_OK;
}

static int s_list(const char *db, int as_json)
{
    store_t *s = cli_open_db(db);
    if (!s)
        return CLI_FAIL;
    json_t *list = store_token_list(s);
    if (!list) {
        cli_error("token list: %s", store_errmsg(s));
        store_close(&s);
        return CLI_FAIL;
    }
    store_close(&s);
    if (as_json) {
        cli_print_json(list);
        return CLI_OK;
    }
    printf("%-5s %-20s %-7s %-20s %s\n", "ID", "USER", "ROLE", "CREATED", "STATE");
    size_t i;
    json_t *t;
    json_array_foreach(list, i, t)
    {
        time_t created = (time_t)json_number_value(json_object_get(t, "created"));
        char when[32];
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&created));
        printf("%-5lld %-20s %-7s %-20s %s\n",
               (long long)json_integer_value(json_object_get(t, "id")),
               json_string_value(json_object_get(t, "user")),
               json_string_value(json_object_get(t, "role")), when,
               json_is_null(json_object_get(t, "revoked")) ? "valid" : "revoked");
    }
    json_decref(list);
    return CLI_OK;
}

static int s_revoke(const char *db, const char *what)
{
    char *end;
    long id = strtol(what, &end, 10);
    int by_id = *what && !*end;
    if (!by_id && !ident_valid_user(what)) {
        cli_error("token revoke: expected a token ID or a user name, got \"%s\"", what);
        return CLI_USAGE;
    }
    if (by_id && id <= 0) {
        cli_error("token revoke: no token %ld", id);
        return CLI_FAIL;
    }
    store_t *s = s_open_rw(db);
    if (!s)
        return CLI_FAIL;
    long n = store_token_revoke(s, by_id ? id : 0, by_id ? NULL : what, util_wall());
    if (n < 0)
        cli_error("token revoke: %s", store_errmsg(s));
    store_close(&s);
    if (n < 0)
        return CLI_FAIL;
    if (n == 0) {
        cli_error("token revoke: no valid token %s %s", by_id ? "with id" : "of user",
                  what);
        return CLI_FAIL;
    }
    printf("revoked %ld token%s\n", n, n == 1 ? "" : "s");
    return CLI_OK;
}

int cmd_token(int argc, char **argv)
{
    const char *role = NULL;
    const cli_opt_extra extra[] = {{"role", &role, NULL}, {NULL}};
    cli_opts o;
    int prc =
        cli_opts_parse_ext(argc, argv, CLI_OPT_DB | CLI_OPT_JSON, extra, s_usage, &o);
    if (prc)
        return prc < 0 ? CLI_OK : prc;
    int nargs = o.nargs, as_json = o.json;
    char **args = o.args;
    const char *db = o.db;
    if ((nargs == 1 || nargs == 2) && !strcmp(args[0], "create")) {
        char me[64];
        if (nargs == 1 && !*s_login(geteuid(), me, sizeof me)) {
            cli_error("token create: your uid has no login name; name the USER");
            return CLI_USAGE;
        }
        return s_create(db, nargs == 2 ? args[1] : me, role ? role : "user");
    }
    if (role) {
        cli_error("token: --role goes with `token create` only");
        return CLI_USAGE;
    }
    if (nargs == 1 && !strcmp(args[0], "list"))
        return s_list(db, as_json);
    if (nargs == 2 && !strcmp(args[0], "revoke"))
        return s_revoke(db, args[1]);
    return cli_usage_error(s_usage,
                           "token: expected create [USER], list, or revoke ID|USER");
}
