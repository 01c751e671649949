/*  cli_util.c - helpers shared by the CLI commands (see cli.h). */
#include "cli.h"

#include "../common/client.h"
#include "../common/wire.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

static void s_verror(const char *fmt, va_list ap)
{
    fputs("jizhi: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s_verror(fmt, ap);
    va_end(ap);
}

int cli_usage_error(const char *usage, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s_verror(fmt, ap);
    va_end(ap);
    fputs(usage, stderr);
    return CLI_USAGE;
}

const char *cli_db_path(const char *flag)
{
    if (flag && *flag)
        return flag;
    const char *e = getenv("JIZHI_DB");
    return e && *e ? e : "jizhi.db";
}

void cli_endpoint_file(const char *db, char *out, size_t size)
{
    snprintf(out, size, "%s.endpoint", db);
}

const char *cli_controller(const char *flag, const char *db, char *buf, size_t size)
{
    if (flag && *flag)
        return flag;
    const char *e = getenv("JIZHI_CONTROLLER");
    if (e && *e)
        return e;
    char path[1100];
    cli_endpoint_file(db, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    if (!fgets(buf, (int)size, f)) {
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[strcspn(buf, "\r\n")] = 0;
    return *buf ? buf : NULL;
}

json_t *cli_request(const char *endpoint, json_t *msg, int timeout_ms)
{
    return cli_request_check(endpoint, msg, timeout_ms, 0, NULL, NULL);
}

json_t *cli_request_check(const char *endpoint, json_t *msg, int timeout_ms, int slice_ms,
                          wire_check_fn check, void *arg)
{
    char err[1200];
    json_t *reply = client_call_check(endpoint, msg, timeout_ms, slice_ms, check, arg,
                                      err, sizeof err);
    if (!reply) {
        cli_error("%s", err);
    } else if (strcmp(wire_type(reply), "ok") != 0) {
        const char *text = json_string_value(json_object_get(reply, "message"));
        cli_error("%s", text ? text : "the controller refused the request");
        json_decref(reply);
        reply = NULL;
    }
    return reply;
}

const char *cli_controller_of(const cli_opts *o, char *buf, size_t size)
{
    const char *ep = cli_controller(o->controller, o->db, buf, size);
    if (!ep)
        cli_error("no controller known for %s: start `jizhi controller --db %s` (or "
                  "`jizhi run`), or pass --controller ENDPOINT",
                  o->db, o->db);
    return ep;
}

json_t *cli_request_of(const cli_opts *o, json_t *msg, int timeout_ms)
{
    char buf[512];
    const char *ep = cli_controller_of(o, buf, sizeof buf);
    if (!ep) {
        json_decref(msg);
        return NULL;
    }
    return cli_request(ep, msg, timeout_ms);
}

int cli_ping(const char *endpoint, int timeout_ms)
{
    char err[1200];
    json_t *r = client_call(endpoint, json_pack("{s:s}", "type", "ping"), timeout_ms, err,
                            sizeof err);
    int alive = r && !strcmp(wire_type(r), "ok");
    json_decref(r);
    return alive;
}

store_t *cli_open_db(const char *db)
{
    if (access(db, R_OK) != 0) {
        cli_error("cannot read database %s: %s (use --db FILE or JIZHI_DB)", db,
                  strerror(errno));
        return NULL;
    }
    char err[512];
    store_t *s = store_open(db, 1, err, sizeof err);
    if (!s)
        cli_error("%s", err);
    return s;
}

void cli_print_json(json_t *j)
{
    char *text = text_json_dumps(j, JSON_INDENT(2) | JSON_ENCODE_ANY);
    if (text)
        puts(text);
    free(text);
    json_decref(j);
}

void cli_format_value(const json_t *v, char *buf, size_t size)
{
    if (json_is_string(v))
        snprintf(buf, size, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, size, "%.6g", json_real_value(v));
    else if (json_is_boolean(v))
        snprintf(buf, size, "%s", json_is_true(v) ? "true" : "false");
    else
        snprintf(buf, size, "-");
}

void cli_print_trials(const json_t *trials)
{
    printf("%-7s %-10s %-3s %-3s %-7s %-12s %s\n", "ID", "STATE", "TRY", "PRE", "STEP",
           "VALUE", "PARAMS");
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t)
    {
        char v[64], step[32] = "-";
        json_t *val = json_object_get(t, "value");
        cli_format_value(json_is_null(val) ? json_object_get(t, "last_value") : val, v,
                         sizeof v);
        json_int_t ls = json_integer_value(json_object_get(t, "last_step"));
        if (ls >= 0)
            snprintf(step, sizeof step, "%" JSON_INTEGER_FORMAT, ls);
        char *p =
            text_json_dumps(json_object_get(t, "params"), JSON_COMPACT | JSON_SORT_KEYS);
        printf("%-7" JSON_INTEGER_FORMAT " %-10s %-3" JSON_INTEGER_FORMAT
               " %-3" JSON_INTEGER_FORMAT " %-7s %-12s %s\n",
               json_integer_value(json_object_get(t, "id")),
               json_string_value(json_object_get(t, "state")),
               /* TRY counts runs from 1, as "retrying (try 2)" does; the
                  stored attempt (log file names, exports) counts from 0 */
               json_integer_value(json_object_get(t, "attempt")) + 1,
               json_integer_value(json_object_get(t, "preemptions")), step, v,
               p ? p : "");
        free(p);
    }
    int header = 0;
    json_array_foreach(trials, i, t)
    {
        const char *state = json_string_value(json_object_get(t, "state"));
        if (!state || strcmp(state, "failed"))
            continue;
        if (!header++)
            printf("failed trials:\n");
        const char *why = json_string_value(json_object_get(t, "reason"));
        printf("  trial %" JSON_INTEGER_FORMAT ": %s\n",
               json_integer_value(json_object_get(t, "id")),
               why && *why ? why : "no reason recorded");
    }
}

void cli_format_elapsed(double s, char *buf, size_t size)
{
    long t = (long)(s < 0 ? 0 : s);
    snprintf(buf, size, "%02ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

int cli_kv_parse(const char *arg, json_t *values, char *err, size_t errsize)
{
    const char *eq = strchr(arg, '=');
    char key[64];
    if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof key) {
        snprintf(err, errsize, "expected KEY=VALUE, got \"%.100s\"", arg);
        return -1;
    }
    memcpy(key, arg, (size_t)(eq - arg));
    key[eq - arg] = 0;
    if (!spec_valid_name(key)) {
        snprintf(err, errsize, "\"%s\" is not a parameter name ([A-Za-z_][A-Za-z0-9_]*)",
                 key);
        return -1;
    }
    const char *val = eq + 1;
    char *end;
    double x = strtod(val, &end);
    if (*val && !*end && isfinite(x)) {
        char *iend;
        long long li = strtoll(val, &iend, 10);
        json_object_set_new(values, key, !*iend ? json_integer(li) : json_real(x));
    } else {
        json_object_set_new(values, key, json_string(val));
    }
    return 0;
}

void cli_print_warnings(const json_t *ev)
{
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        const char *kind = json_string_value(json_object_get(e, "kind"));
        const char *why =
            json_string_value(json_object_get(json_object_get(e, "detail"), "reason"));
        if (kind && why && !strcmp(kind, "warning"))
            printf("warning: %s\n", why);
    }
}

int cli_src_open(const cli_opts *o, cli_src *src)
{
    memset(src, 0, sizeof *src);
    src->db = o->db;
    const char *env = getenv("JIZHI_CONTROLLER");
    const char *ep = o->controller                               ? o->controller
                     : (access(o->db, R_OK) != 0 && env && *env) ? env
                                                                 : NULL;
    if (ep) {
        snprintf(src->ep, sizeof src->ep, "%s", ep);
        return CLI_OK;
    }
    src->s = cli_open_db(o->db);
    return src->s ? CLI_OK : CLI_FAIL;
}

void cli_src_close(cli_src *src)
{
    store_close(&src->s);
}

json_t *cli_src_read(cli_src *src, const char *what, const char *study, long id,
                     long after)
{
    if (!src->s) {
        json_t *req = json_pack("{s:s, s:s}", "type", "read", "what", what);
        if (study)
            json_object_set_new(req, "study", json_string(study));
        if (!strcmp(what, "trial"))
            json_object_set_new(req, "trial", json_integer(id));
        if (!strcmp(what, "metrics_since"))
            json_object_set_new(req, "after", json_integer(after));
        json_t *r = cli_request(src->ep, req, 30000);
        json_t *data = r ? json_incref(json_object_get(r, "data")) : NULL;
        json_decref(r);
        return data;
    }
    json_t *data = NULL;
    if (!strcmp(what, "studies")) {
        data = store_study_list(src->s);
        if (!data)
            cli_error("cannot list studies: %s", store_errmsg(src->s));
    } else if (!strcmp(what, "study")) {
        data = store_study_detail(src->s, study);
        if (!data) { /* not there, or a row the store refuses */
            char why[300];
            snprintf(why, sizeof why, "%s", store_errmsg(src->s));
            store_study st;
            int found = store_study_get(src->s, study, &st);
            if (found == 1)
                store_study_fini(&st);
            if (found == 0)
                cli_error("no study named \"%s\" in %s", study, src->db);
            else
                cli_error("cannot read study \"%s\" from %s: %s", study, src->db, why);
        }
    } else if (!strcmp(what, "trial")) {
        data = store_trial_detail(src->s, id);
        if (!data) {
            store_trial t;
            int found = store_trial_get(src->s, id, &t);
            if (found == 1)
                store_trial_fini(&t);
            if (found == 0)
                cli_error("no trial %ld in %s", id, src->db);
            else
                cli_error("cannot read trial %ld from %s: %s", id, src->db,
                          store_errmsg(src->s));
        }
    } else if (!strcmp(what, "quotas")) {
        if (!(data = store_quota_list(src->s)))
            cli_error("cannot read quotas: %s", store_errmsg(src->s));
    } else if (!strcmp(what, "alerts")) {
        store_study st = {0};
        int found = study ? store_study_get(src->s, study, &st) : 1;
        if (found != 1)
            cli_error("no study named \"%s\" in %s", study, src->db);
        else if (!(data = store_alerts_list(src->s, study ? st.id : 0)))
            cli_error("cannot read alerts: %s", store_errmsg(src->s));
        store_study_fini(&st);
    } else {
        cli_error("cannot read %s from %s", what, src->db);
    }
    return data;
}
