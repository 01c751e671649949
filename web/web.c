/*  web.c - the HTTP server: binding, the route table, the checks every
    request goes through, and turning a handler's answer into a response
    (see web.h; routes and shapes in docs/WEB.md).

    Checks, in order: on a loopback address a Host header naming it (403:
    DNS rebinding); a known route (404) and method (405); for POST a JSON
    content type (415), an Origin equal to the server's own when the
    browser sends one (403: cross-site requests), a body within
    WEB_MAX_BODY (413) that parses as a JSON object (400), and a valid
    bearer token whose role allows the action (401/403). GET never changes
    state. Static files come only from the built-in set.
*/
#include "web_internal.h"

#include "../common/log.h"
#include "../common/text.h"
#include "web_body.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *method;
    const char *pattern; /* '*' matches one path segment */
    web_handler fn;
    ident_action need; /* POST: what the token's role must allow */
} s_route;

static const s_route s_routes[] = {
    {"GET", "/api/studies", web__get_studies, IDENT_READ},
    {"GET", "/api/studies/*", web__get_study, IDENT_READ},
    {"GET", "/api/studies/*/trials", web__get_trials, IDENT_READ},
    {"GET", "/api/studies/*/pareto", web__get_pareto, IDENT_READ},
    {"GET", "/api/studies/*/events", web__get_events, IDENT_READ},
    {"GET", "/api/studies/*/curves", web__get_curves, IDENT_READ},
    {"GET", "/api/studies/*/page", web__get_page, IDENT_READ},
    {"GET", "/api/studies/*/stream", web__get_stream, IDENT_READ},
    {"GET", "/api/studies/*/importance", web__get_importance, IDENT_READ},
    {"GET", "/api/studies/*/export", web__get_export, IDENT_READ},
    {"GET", "/api/trials/*", web__get_trial, IDENT_READ},
    {"GET", "/api/trials/*/metrics", web__get_trial_metrics, IDENT_READ},
    {"GET", "/api/trials/*/log", web__get_trial_log, IDENT_READ},
    {"GET", "/api/whoami", web__get_whoami, IDENT_READ},
    {"POST", "/api/studies", web__post_submit, IDENT_SUBMIT},
    {"POST", "/api/studies/*/stop", web__post_study_stop, IDENT_STEER},
    {"POST", "/api/studies/*/resume", web__post_study_resume, IDENT_STEER},
    {"POST", "/api/studies/*/delete", web__post_study_delete, IDENT_STEER},
    {"POST", "/api/studies/*/copy", web__post_study_copy, IDENT_SUBMIT},
    {"POST", "/api/trials/*/stop", web__post_trial_stop, IDENT_STEER},
    {"POST", "/api/trials/*/pause", web__post_trial_pause, IDENT_STEER},
    {"POST", "/api/trials/*/resume", web__post_trial_resume, IDENT_STEER},
    {"POST", "/api/trials/*/set", web__post_trial_set, IDENT_STEER},
    {"POST", "/api/trials/*/fork", web__post_trial_fork, IDENT_STEER},
};
#define NROUTES (sizeof s_routes / sizeof s_routes[0])

/* ---- helpers for handlers ---- */

int web__error(web_req *r, int status, const char *code, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    json_decref(r->json);
    r->json =
        json_pack("{s:s, s:s, s:i}", "error", code, "message", text, "status", status);
    r->status = status;
    return status;
}

store_t *web__db(web_req *r)
{
    if (r->db)
        return r->db;
    char err[600];
    r->db = store_open(r->w->db, 1, err, sizeof err);
    if (!r->db)
        web__error(r, 503, "no_database", "%s", err);
    return r->db;
}

const char *web__query(web_req *r, const char *key)
{
    return web__mhd.lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

int web__query_long(web_req *r, const char *key, long lo, long hi, long dflt, long *out)
{
    const char *v = web__query(r, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) {
        web__error(r, 400, "bad_argument",
                   "%s: expected an integer in [%ld, %ld], got \"%s\"", key, lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

int web__heavy_enter(web_req *r)
{
    if (web_gate_enter(&r->w->heavy, WEB_HEAVY_WAIT_MS) == 0)
        return 0;
    r->retry_after = 2;
    web__error(r, 503, "busy",
               "%d expensive reads are running; try again in a few seconds",
               WEB_MAX_HEAVY);
    return -1;
}

void web__heavy_leave(web_req *r)
{
    web_gate_leave(&r->w->heavy);
}

void web__peer_ip(web_req *r, char *out, size_t size)
{
    *out = 0;
    const union MHD_ConnectionInfo *ci =
        web__mhd.get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out,
                  (socklen_t)size);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out,
                  (socklen_t)size);
}

int web__study(web_req *r, store_study *out)
{
    store_t *s = web__db(r);
    if (!s)
        return -1;
    int found = store_study_get(s, r->arg, out);
    if (found < 0)
        web__error(r, 500, "store", "reading study %s: %s", r->arg, store_errmsg(s));
    else if (!found)
        web__error(r, 404, "unknown_study", "no study named \"%s\"", r->arg);
    return found;
}

/* ---- routing ---- */

/* Matches path against pattern; 1 on a match (the '*' segment in arg). */
static int s_match(const char *pattern, const char *path, char *arg, size_t argsize)
{
    const char *p = pattern, *u = path;
    while (*p && *u) {
        if (*p == '*') {
            size_t n = strcspn(u, "/");
            if (n == 0 || n >= argsize)
                return 0;
            memcpy(arg, u, n);
            arg[n] = 0;
            u += n;
            p++;
        } else if (*p++ != *u++) {
            return 0;
        }
    }
    return !*p && !*u;
}

static int s_route_find(web_req *r, const s_route **out)
{
    int path_known = 0;
    for (size_t i = 0; i < NROUTES; i++) {
        char arg[sizeof r->arg];
        if (!s_match(s_routes[i].pattern, r->path, arg, sizeof arg))
            continue;
        path_known = 1;
        if (!strcmp(s_routes[i].method, r->method)) {
            memcpy(r->arg, arg, sizeof arg);
            *out = &s_routes[i];
            return 0;
        }
    }
    return path_known ? 405 : 404;
}

static const char *s_header(web_req *r, const char *name)
{
    return web__mhd.lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

/* Origin (when a browser sends one) must be this server: http://HOST. */
static int s_origin_ok(web_req *r)
{
    const char *origin = s_header(r, "Origin");
    if (!origin)
        return 1;
    const char *host = s_header(r, "Host");
    char mine[600];
    snprintf(mine, sizeof mine, "http://%s", host ? host : "");
    return host && !strcmp(origin, mine);
}

static int s_post_checks(web_req *r, const s_route *rt)
{
    const char *ct = s_header(r, "Content-Type");
    if (!ct || strncmp(ct, "application/json", 16) || (ct[16] && ct[16] != ';'))
        return web__error(r, 415, "content_type", "POST bodies must be application/json");
    if (!s_origin_ok(r))
        return web__error(r, 403, "cross_origin",
                          "requests from another origin are refused");
    if (r->too_big)
        return web__error(r, 413, "too_large", "the body is over %d bytes", WEB_MAX_BODY);
    char err[300];
    if (web_body_parse(r->body.data, r->body.len, &r->in, err, sizeof err) != 0)
        return web__error(r, 400, "malformed", "%s", err);
    if (web__authenticate(r) != 0)
        return r->status;
    if (!ident_allows(r->who.role, rt->need))
        return web__error(r, 403, "forbidden", "user %s (role %s) may not do this",
                          r->who.user, ident_role_str(r->who.role));
    return 0;
}

/* On a loopback address, the Host header must name it (127.0.0.1, localhost
   or [::1] with our port): a page elsewhere whose name was made to point at
   127.0.0.1 (DNS rebinding) gets nothing, not even reads. */
static int s_host_ok(web_req *r)
{
    if (!r->w->loopback)
        return 1;
    const char *host = s_header(r, "Host");
    if (!host)
        return 0;
    char want[64];
    static const char *const names[] = {"127.0.0.1", "localhost", "[::1]"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(want, sizeof want, "%s:%d", names[i], r->w->port);
        if (!strcmp(host, want))
            return 1;
    }
    return 0;
}

static int s_dispatch(web_req *r)
{
    if (!s_host_ok(r))
        return web__error(r, 403, "bad_host",
                          "this server answers only to 127.0.0.1:%d or localhost:%d",
                          r->w->port, r->w->port);
    if (strncmp(r->path, "/api/", 5) != 0 && strcmp(r->path, "/api")) {
        if (strcmp(r->method, "GET") && strcmp(r->method, "HEAD"))
            return web__error(r, 405, "method", "only GET serves the page");
        if (web__static(r))
            return 200;
        return web__error(r, 404, "not_found", "no page at %s", r->path);
    }
    const s_route *rt = NULL;
    int st = s_route_find(r, &rt);
    if (st == 404)
        return web__error(r, 404, "not_found", "no API route %s", r->path);
    if (st == 405)
        return web__error(r, 405, "method", "%s is not allowed on %s", r->method,
                          r->path);
    if (!strcmp(r->method, "POST") && (st = s_post_checks(r, rt)) != 0)
        return st;
    return rt->fn(r);
}

/* ---- libmicrohttpd glue ---- */

static void s_add_common_headers(struct MHD_Response *resp)
{
    web__mhd.add_response_header(resp, "X-Content-Type-Options", "nosniff");
    web__mhd.add_response_header(resp, "X-Frame-Options", "DENY");
    web__mhd.add_response_header(resp, "Referrer-Policy", "no-referrer");
}

static enum MHD_Result s_answer(web_req *r)
{
    int status = s_dispatch(r);
    r->status = status;
    struct MHD_Response *resp = r->resp;
    if (!resp) {
        char *body;
        size_t len;
        const char *ctype = r->ctype ? r->ctype : "application/json";
        if (r->json) {
            body = text_json_dumps(r->json, JSON_COMPACT | JSON_ENCODE_ANY);
            len = body ? strlen(body) : 0;
        } else {
            body = web_buf_take(&r->text, &len);
        }
        if (!body)
            return MHD_NO;
        resp = web__mhd.create_response_from_buffer_with_free_callback(len, body, free);
        if (!resp) {
            free(body);
            return MHD_NO;
        }
        web__mhd.add_response_header(resp, "Content-Type", ctype);
        web__mhd.add_response_header(resp, "Cache-Control", "no-store");
    }
    s_add_common_headers(resp);
    if (r->retry_after > 0) {
        char secs[16];
        snprintf(secs, sizeof secs, "%d", r->retry_after);
        web__mhd.add_response_header(resp, "Retry-After", secs);
    }
    enum MHD_Result ret = web__mhd.queue_response(r->conn, (unsigned)status, resp);
    web__mhd.destroy_response(resp);
    r->resp = NULL;
    if (status >= 500)
        log_warn("web", "%s %s: %d", r->method, r->path, status);
    return ret;
}

static enum MHD_Result s_access(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version,
                                const char *upload_data, size_t *upload_data_size,
                                void **con_cls)
{
    web_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->w = cls;
        r->conn = conn;
        r->method = method;
        snprintf(r->path, sizeof r->path, "%s", url);
        web_buf_init(&r->body);
        web_buf_init(&r->text);
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (r->body.len + *upload_data_size > WEB_MAX_BODY)
            r->too_big = 1;
        else
            web_buf_add(&r->body, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    return s_answer(r);
}

static void s_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                        enum MHD_RequestTerminationCode toe)
{
    web_req *r = *con_cls;
    if (!r)
        return;
    json_decref(r->in);
    json_decref(r->json);
    web_buf_fini(&r->body);
    web_buf_fini(&r->text);
    store_close(&r->db);
    free(r);
    *con_cls = NULL;
}

static void s_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char text[512];
    vsnprintf(text, sizeof text, fmt, ap);
    text[strcspn(text, "\n")] = 0;
    log_debug("web", "%s", text);
}

/* At start, reads every study's points into the curve cache, a slice at a
   time, so that the first look at a big study does not wait for them. */
static void *s_warm(void *arg)
{
    web_t *w = arg;
    char err[600];
    store_t *s = store_open(w->db, 1, err, sizeof err);
    json_t *list = s ? store_study_list(s) : NULL;
    size_t i;
    json_t *row;
    json_array_foreach(list, i, row)
    {
        long id = (long)json_integer_value(json_object_get(row, "id"));
        long got;
        while (!w->stopping &&
               (got = web_curves_warm(w->curves, s, id, 200000, err, sizeof err)) > 0)
            ;
        if (w->stopping)
            break;
    }
    json_decref(list);
    store_close(&s);
    return NULL;
}

static int s_parse_listen(const char *listen, struct sockaddr_in *sa, char *err,
                          size_t errsize)
{
    char host[128];
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof host) {
        snprintf(err, errsize, "--http: expected HOST:PORT, got \"%s\"", listen);
        return -1;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || port < 0 || port > 65535) {
        snprintf(err, errsize, "--http: \"%s\" is not a port (0-65535)", colon + 1);
        return -1;
    }
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (!strcmp(host, "localhost"))
        snprintf(host, sizeof host, "127.0.0.1");
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
        snprintf(err, errsize, "--http: \"%s\" is not an IPv4 address", host);
        return -1;
    }
    return 0;
}

int web_listen_check(const char *listen, char *err, size_t errsize)
{
    struct sockaddr_in sa;
    return s_parse_listen(listen, &sa, err, errsize);
}

/* Frees what web_new made besides the daemon. */
static void s_free(web_t *w)
{
    web_curves_destroy(&w->curves);
    pthread_mutex_destroy(&w->imp_mu);
    pthread_mutex_destroy(&w->stream_mu);
    web_gate_fini(&w->heavy);
    for (int i = 0; i < WEB_IMP_CACHE; i++)
        json_decref(w->imp[i].ans);
    free(w);
}

web_t *web_new(const web_config *cfg, char *err, size_t errsize)
{
    struct sockaddr_in sa;
    if (s_parse_listen(cfg->listen ? cfg->listen : "127.0.0.1:8080", &sa, err, errsize))
        return NULL;
    if (web_mhd_load(err, errsize) != 0)
        return NULL;
    web_t *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errsize, "out of memory");
        return NULL;
    }
    snprintf(w->db, sizeof w->db, "%s", cfg->db_path);
    snprintf(w->controller, sizeof w->controller, "%s",
             cfg->controller ? cfg->controller : "");
    w->curves = web_curves_new();
    pthread_mutex_init(&w->imp_mu, NULL);
    pthread_mutex_init(&w->stream_mu, NULL);
    web_gate_init(&w->heavy, WEB_MAX_HEAVY);
    const char *smax = getenv("JIZHI_WEB_STREAM_MAX_S");
    w->stream_max_s = smax && atof(smax) > 0 ? atof(smax) : WEB_STREAM_MAX_S;
    const char *idle_env = getenv("JIZHI_WEB_IDLE_S");
    unsigned idle = WEB_IDLE_TIMEOUT_S;
    if (idle_env && atoi(idle_env) > 0 && atoi(idle_env) <= WEB_IDLE_TIMEOUT_S)
        idle = (unsigned)atoi(idle_env);
    /* no client may hold every connection: WEB_MAX_PER_IP from one
       address, and an idle one is closed after WEB_IDLE_TIMEOUT_S */
    w->d = web__mhd.start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
            MHD_USE_ERROR_LOG,
        0, NULL, NULL, s_access, w, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_NOTIFY_COMPLETED, s_completed, w, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)WEB_MAX_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)WEB_MAX_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT, idle,
        MHD_OPTION_EXTERNAL_LOGGER, s_mhd_log, w, MHD_OPTION_END);
    if (!w->d) {
        char addr[64];
        inet_ntop(AF_INET, &sa.sin_addr, addr, sizeof addr);
        snprintf(err, errsize, "cannot listen on %s:%d (in use, or not an address here)",
                 addr, ntohs(sa.sin_port));
        s_free(w);
        return NULL;
    }
    const union MHD_DaemonInfo *info =
        web__mhd.get_daemon_info(w->d, MHD_DAEMON_INFO_BIND_PORT);
    w->port = info ? info->port : ntohs(sa.sin_port);
    w->loopback = (ntohl(sa.sin_addr.s_addr) >> 24) == 127;
    w->warming = pthread_create(&w->warm, NULL, s_warm, w) == 0;
    return w;
}

int web_port(const web_t *w)
{
    return w->port;
}

void web_destroy(web_t **wp)
{
    if (!wp || !*wp)
        return;
    web_t *w = *wp;
    w->stopping = 1;
    if (w->warming)
        pthread_join(w->warm, NULL);
    web__mhd.stop_daemon(w->d);
    s_free(w);
    *wp = NULL;
}
