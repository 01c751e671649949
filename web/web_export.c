/*  web_export.c - the page's downloads: a study's trials as `jizhi study
    export` writes them (CSV or JSON, store_export.h), and the tail of a
    trial's stdout or stderr log. Reads need no token, as every read. */
#include "web_internal.h"

#include "../common/client.h"
#include "../common/util.h"
#include "../common/wire.h"
#include "../store/store_export.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- GET /api/studies/NAME/export?format=csv|json[&all=1] ---- */

int web__get_export(web_req *r)
{
    const char *format = web__query(r, "format");
    const char *all = web__query(r, "all");
    if (!format)
        format = "csv";
    if (strcmp(format, "csv") && strcmp(format, "json"))
        return web__error(r, 400, "bad_argument",
                          "format: expected csv or json, got \"%s\"", format);
    store_study st;
    if (web__study(r, &st) != 1) /* 404 for no such study */
        return r->status;
    store_study_fini(&st);
    if (web__heavy_enter(r) != 0) /* the study's whole detail is read */
        return r->status;
    json_t *d = store_study_detail(r->db, r->arg);
    web__heavy_leave(r);
    if (!d)
        return web__error(r, 500, "store", "reading the study: %s", store_errmsg(r->db));
    spec_t *marked = store_export_mark(d);
    spec_destroy(&marked);
    char *body = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&body, &len);
    if (!f) {
        json_decref(d);
        return web__error(r, 500, "internal", "out of memory");
    }
    if (!strcmp(format, "json"))
        store_export_json(f, json_object_get(d, "trials"));
    else
        store_export_csv(f, json_object_get(d, "trials"), all && !strcmp(all, "1"));
    fclose(f);
    json_decref(d);
    r->resp = web__mhd.create_response_from_buffer_with_free_callback(len, body, free);
    if (!r->resp) {
        free(body);
        return web__error(r, 500, "internal", "out of memory");
    }
    char disp[300];
    snprintf(disp, sizeof disp, "attachment; filename=\"%s.%s\"", r->arg, format);
    web__mhd.add_response_header(r->resp, "Content-Type",
                                 !strcmp(format, "json") ? "application/json"
                                                         : "text/csv; charset=utf-8");
    web__mhd.add_response_header(r->resp, "Content-Disposition", disp);
    web__mhd.add_response_header(r->resp, "Cache-Control", "no-store");
    return 200;
}

/* ---- GET /api/trials/ID/log?stream=out|err[&tail=BYTES] ---- */

/* buf[0..n) as a JSON string: bytes that are not UTF-8 become '?'. */
static json_t *s_text(unsigned char *buf, size_t n)
{
    for (size_t i = 0, k; i < n; i += k)
        if ((k = util_utf8_len(buf + i, n - i)) == 0) {
            buf[i] = '?';
            k = 1;
        }
    return json_stringn((const char *)buf, n);
}

/* 1 when `path` is named like a log of trial `id` (trial-ID.*.out|err),
   as the dispatcher checks before it reads one: a path in the store is
   never a way to read any other file. */
static int s_log_name(const char *path, long id)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char expect[64];
    snprintf(expect, sizeof expect, "trial-%ld.", id);
    size_t bl = strlen(base);
    return !strncmp(base, expect, strlen(expect)) && bl > 4 &&
           (!strcmp(base + bl - 4, ".out") || !strcmp(base + bl - 4, ".err"));
}

/* The last `tail` bytes of the local file: 1 with *out set ({size, from,
   data}), 0 when the file is not here, -1 with the error set. */
static int s_log_file(web_req *r, const char *path, long tail, json_t **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return 0;
    }
    off_t from = st.st_size > tail ? st.st_size - tail : 0;
    size_t want = (size_t)(st.st_size - from);
    unsigned char *buf = malloc(want + 1);
    ssize_t n = buf ? pread(fd, buf, want, from) : -1;
    close(fd);
    if (n < 0) {
        free(buf);
        return web__error(r, 500, "internal", "reading %s: %s", path, strerror(errno)),
               -1;
    }
    size_t skip = 0; /* a sequence cut at the start of the tail */
    while (from > 0 && skip < (size_t)n && skip < 3 && (buf[skip] & 0xC0) == 0x80)
        skip++;
    *out = json_pack("{s:I, s:I, s:o}", "size", (json_int_t)st.st_size, "from",
                     (json_int_t)(from + (off_t)skip), "data",
                     s_text(buf + skip, (size_t)n - skip));
    free(buf);
    return 1;
}

/* The first `max` bytes through the controller, which asks the trial's
   dispatcher (the log is on another machine): 1 with *out set, -1 with
   the error set. */
static int s_log_remote(web_req *r, const store_trial *t, const char *stream, long max,
                        json_t **out)
{
    char buf[512], err[600];
    const char *ep = web__endpoint(r, buf, sizeof buf);
    if (!ep)
        return web__error(r, 503, "no_controller",
                          "trial %ld's log is not on this machine and no controller "
                          "serves %s to ask its dispatcher",
                          t->id, r->w->db),
               -1;
    json_t *reply = client_call(
        ep,
        json_pack("{s:s, s:I, s:I, s:s, s:I, s:I}", "type", "read_log", "trial",
                  (json_int_t)t->id, "attempt", (json_int_t)t->attempt, "stream", stream,
                  "offset", (json_int_t)0, "max", (json_int_t)max),
        15000, err, sizeof err);
    if (!reply)
        return web__error(r, 504, "no_answer", "%s", err), -1;
    if (strcmp(wire_type(reply), "ok") != 0) {
        const char *text = json_string_value(json_object_get(reply, "message"));
        web__error(r, 503, "unavailable", "%s", text ? text : "the log cannot be read");
        json_decref(reply);
        return -1;
    }
    json_t *data = json_object_get(reply, "data");
    *out = json_pack("{s:n, s:I, s:O}", "size", "from", (json_int_t)0, "data",
                     json_is_string(data) ? data : json_string(""));
    json_decref(reply);
    return 1;
}

int web__get_trial_log(web_req *r)
{
    long tail;
    if (web__query_long(r, "tail", 1, WEB_LOG_MAX, WEB_LOG_MAX, &tail))
        return 400;
    const char *stream = web__query(r, "stream");
    if (!stream)
        stream = "out";
    if (strcmp(stream, "out") && strcmp(stream, "err"))
        return web__error(r, 400, "bad_argument",
                          "stream: expected out or err, got \"%s\"", stream);
    char *end;
    long id = strtol(r->arg, &end, 10);
    if (*end || id <= 0)
        return web__error(r, 400, "bad_argument", "\"%s\" is not a trial id", r->arg);
    store_t *s = web__db(r);
    if (!s)
        return r->status;
    store_trial t;
    int found = store_trial_get(s, id, &t);
    if (found < 0)
        return web__error(r, 500, "store", "reading trial %ld: %s", id, store_errmsg(s));
    if (!found)
        return web__error(r, 404, "unknown_trial", "no trial %ld", id);
    const char *path = !strcmp(stream, "out") ? t.out_path : t.err_path;
    json_t *out = NULL;
    int rc = 1;
    const char *source = "none";
    if (!path[0]) /* never started: nothing written */
        out = json_pack("{s:I, s:I, s:s}", "size", (json_int_t)0, "from", (json_int_t)0,
                        "data", "");
    else if (!s_log_name(path, id)) {
        web__error(r, 404, "no_log", "trial %ld's %s log is not named as one", id,
                   stream);
        rc = -1;
    } else if ((rc = s_log_file(r, path, tail, &out)) == 1)
        source = "file";
    else if (rc == 0 && (rc = s_log_remote(r, &t, stream, tail, &out)) == 1)
        source = "dispatcher";
    if (rc == 1) {
        json_object_set_new(out, "trial", json_integer(id));
        json_object_set_new(out, "attempt", json_integer(t.attempt));
        json_object_set_new(out, "state", json_string(store_trial_state_name(t.state)));
        json_object_set_new(out, "stream", json_string(stream));
        json_object_set_new(out, "source", json_string(source));
        r->json = out;
    }
    store_trial_fini(&t);
    return rc == 1 ? 200 : r->status;
}
