/*  web_stream.c - Server-Sent Events for a live page.

    GET /api/studies/NAME/stream[?metric=ROWID&event=ID&trial=ID] sends,
    as they are stored (polled every 250 ms on the connection's own
    read-only store):
      event: metrics  data: {"points": [[trial, name, step, value, time], ...]}
      event: events   data: [event, ...]        (as GET .../events)
      event: trials   data: [brief trial, ...]  (those that changed)
      event: resolved data: [event, ...]        (sent earlier with applied
                                                 null, now settled)
    and a comment line every 10 s so proxies and browsers keep it open.
    Starting marks come from the page data ("marks"), so nothing stored
    between the page's read and the stream's start is missed. With
    `trial`, metrics are only that trial's.

    A stream holds a connection and its thread, so it is bounded: at most
    WEB_MAX_STREAMS open, WEB_MAX_STREAMS_PER_IP from one address (503
    `too_many_streams` beyond), and each ends after w->stream_max_s (or
    when the server stops or the client goes away). After each batch an
    `id: METRIC,EVENT` line names the marks reached; the browser's
    EventSource reconnects by itself with them in Last-Event-ID, which
    takes precedence over the query's marks, and then gets every trial
    row once (those changed meanwhile included). */
#include "web_internal.h"

#include "../common/text.h"
#include "../common/wire.h"
#include "../common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLL_MS 250
#define KEEPALIVE_S 10.0
#define MAX_POINTS 20000   /* per message */
#define MAX_UNSETTLED 1000 /* instructions followed until settled */

typedef struct {
    web_t *w;
    long study_id;
    long trial; /* 0: every trial */
    long after_metric, after_event;
    store_t *db;        /* opened in the connection's thread */
    json_t *trials;     /* last sent brief rows, by id */
    json_t *unsettled;  /* ids of events sent with applied null, by id */
    long unsettled_min; /* smallest of them, or 0 */
    web_buf pending;    /* formatted, not yet handed to MHD */
    size_t sent;        /* bytes of pending already handed */
    double last_out, last_trials;
    double ends; /* util_now() after which the stream ends */
    int first;
    int resumed; /* started from Last-Event-ID: send every trial row once */
    int slot;    /* index in w->stream_ip, -1 none */
} s_stream;

/* Takes a place for a stream from `ip`: its index, or -1 when the server
   or this address holds its most. */
static int s_slot_take(web_t *w, const char *ip)
{
    int free_at = -1, mine = 0;
    pthread_mutex_lock(&w->stream_mu);
    for (int i = 0; i < WEB_MAX_STREAMS; i++) {
        if (!w->stream_ip[i][0])
            free_at = free_at < 0 ? i : free_at;
        else
            mine += !strcmp(w->stream_ip[i], ip);
    }
    if (free_at >= 0 && mine < WEB_MAX_STREAMS_PER_IP)
        snprintf(w->stream_ip[free_at], sizeof w->stream_ip[free_at], "%s",
                 *ip ? ip : "?");
    else
        free_at = -1;
    pthread_mutex_unlock(&w->stream_mu);
    return free_at;
}

static void s_free(void *cls)
{
    s_stream *st = cls;
    if (st->slot >= 0) {
        pthread_mutex_lock(&st->w->stream_mu);
        st->w->stream_ip[st->slot][0] = 0;
        pthread_mutex_unlock(&st->w->stream_mu);
    }
    store_close(&st->db);
    json_decref(st->trials);
    json_decref(st->unsettled);
    web_buf_fini(&st->pending);
    free(st);
}

typedef struct {
    s_stream *st;
    web_buf *b;
    long n;
} s_pts;

static int s_point(void *arg, const store_metric_row *row)
{
    s_pts *p = arg;
    if (p->st->trial && row->trial_id != p->st->trial)
        return 0;
    web_buf *b = p->b;
    web_buf_str(b, p->n ? ",[" : "[");
    web_buf_long(b, row->trial_id);
    web_buf_add(b, ",", 1);
    web_buf_jstr(b, row->name);
    web_buf_add(b, ",", 1);
    web_buf_long(b, row->step);
    web_buf_add(b, ",", 1);
    web_buf_num(b, row->value);
    web_buf_printf(b, ",%.3f]", row->time);
    p->n++;
    return 0;
}

static long s_id(const json_t *event)
{
    return (long)json_integer_value(json_object_get(event, "id"));
}

/* Remembers the events of `ev` whose outcome is not known yet (an
   instruction waits for the trial's acknowledgement) and whose id is at
   most `upto`, so that their settling can be sent later. */
static void s_follow(s_stream *st, const json_t *ev, long upto)
{
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        if (s_id(e) > upto || !json_is_null(json_object_get(e, "applied")) ||
            json_object_size(st->unsettled) >= MAX_UNSETTLED)
            continue;
        char key[32];
        snprintf(key, sizeof key, "%ld", s_id(e));
        json_object_set_new(st->unsettled, key, json_true());
        if (!st->unsettled_min || s_id(e) < st->unsettled_min)
            st->unsettled_min = s_id(e);
    }
}

/* Sends, as `resolved`, the followed events that have settled since. */
static int s_settled(s_stream *st)
{
    if (!st->unsettled_min)
        return 0;
    json_t *ev =
        store_events_since(st->db, st->study_id, st->unsettled_min - 1, MAX_UNSETTLED);
    if (!ev)
        return -1;
    json_t *done = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        char key[32];
        snprintf(key, sizeof key, "%ld", s_id(e));
        if (json_is_null(json_object_get(e, "applied")) ||
            !json_object_get(st->unsettled, key))
            continue;
        json_array_append(done, e);
        json_object_del(st->unsettled, key);
    }
    st->unsettled_min = 0;
    const char *key;
    json_t *v;
    json_object_foreach(st->unsettled, key, v)
    {
        long id = atol(key);
        if (!st->unsettled_min || id < st->unsettled_min)
            st->unsettled_min = id;
    }
    if (json_array_size(done)) {
        char *text = text_json_dumps(done, JSON_COMPACT);
        web_buf_printf(&st->pending, "event: resolved\ndata: %s\n\n", text);
        free(text);
    }
    json_decref(done);
    json_decref(ev);
    return 0;
}

static int s_poll_once(s_stream *st);

/* Polls the store once; formats what is new into st->pending, then the
   marks reached as the SSE id. */
static int s_poll(s_stream *st)
{
    size_t had = st->pending.len;
    int rc = s_poll_once(st);
    if (rc == 0 && st->pending.len > had) /* where a reconnect resumes from */
        web_buf_printf(&st->pending, "id: %ld,%ld\n\n", st->after_metric,
                       st->after_event);
    return rc;
}

static int s_poll_once(s_stream *st)
{
    double now = util_now();
    int news = 0;
    web_buf pts;
    web_buf_init(&pts);
    s_pts p = {st, &pts, 0};
    long got = store_study_points_since(st->db, st->study_id, &st->after_metric,
                                        MAX_POINTS, s_point, &p);
    if (got < 0) {
        web_buf_fini(&pts);
        return -1;
    }
    if (p.n) {
        web_buf_str(&st->pending, "event: metrics\ndata: {\"points\":[");
        web_buf_add(&st->pending, pts.data, pts.len);
        web_buf_str(&st->pending, "]}\n\n");
    }
    web_buf_fini(&pts);
    news |= got > 0;
    if (st->first) {
        /* instructions shown by the page's first read may settle later */
        long from = st->after_event > MAX_UNSETTLED ? st->after_event - MAX_UNSETTLED : 0;
        json_t *old = store_events_since(st->db, st->study_id, from, MAX_UNSETTLED);
        if (old)
            s_follow(st, old, st->after_event);
        json_decref(old);
    }
    if (s_settled(st) != 0) {
        web_buf_fini(&pts);
        return -1;
    }
    json_t *ev = store_events_since(st->db, st->study_id, st->after_event, 1000);
    if (ev && json_array_size(ev)) {
        s_follow(st, ev, 1L << 62);
        json_t *last = json_array_get(ev, json_array_size(ev) - 1);
        st->after_event = (long)json_integer_value(json_object_get(last, "id"));
        char *text = text_json_dumps(ev, JSON_COMPACT);
        web_buf_printf(&st->pending, "event: events\ndata: %s\n\n", text);
        free(text);
        news = 1;
    }
    json_decref(ev);
    if (news || st->first || now - st->last_trials > 1.0) {
        st->last_trials = now;
        json_t *brief = store_trials_brief(st->db, st->study_id);
        json_t *changed = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(brief, i, t)
        {
            char key[32];
            snprintf(key, sizeof key, "%lld",
                     (long long)json_integer_value(json_object_get(t, "id")));
            json_t *old = json_object_get(st->trials, key);
            if (!old || !json_equal(old, t)) {
                json_array_append(changed, t);
                json_object_set(st->trials, key, t);
            }
        }
        if (json_array_size(changed) && (!st->first || st->resumed)) {
            char *text = text_json_dumps(changed, JSON_COMPACT);
            web_buf_printf(&st->pending, "event: trials\ndata: %s\n\n", text);
            free(text);
        }
        json_decref(changed);
        json_decref(brief);
        st->first = 0;
    }
    return 0;
}

static ssize_t s_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    s_stream *st = cls;
    for (;;) {
        if (st->sent < st->pending.len) {
            size_t n = st->pending.len - st->sent;
            if (n > max)
                n = max;
            memcpy(buf, st->pending.data + st->sent, n);
            st->sent += n;
            if (st->sent == st->pending.len) {
                st->pending.len = st->sent = 0;
            }
            st->last_out = util_now();
            return (ssize_t)n;
        }
        if (st->w->stopping || util_now() > st->ends)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (!st->db) {
            char err[600];
            st->db = store_open(st->w->db, 1, err, sizeof err);
            if (!st->db)
                return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (s_poll(st) != 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (st->pending.len)
            continue;
        if (util_now() - st->last_out > KEEPALIVE_S) {
            web_buf_str(&st->pending, ": keepalive\n\n");
            continue;
        }
        struct timespec ts = {0, POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Last-Event-ID "METRIC,EVENT" (sent by a reconnecting EventSource):
   1 with the marks, 0 when absent or malformed. */
static int s_last_id(web_req *r, long *metric, long *event)
{
    const char *v =
        web__mhd.lookup_connection_value(r->conn, MHD_HEADER_KIND, "Last-Event-ID");
    if (!v)
        return 0;
    char *end;
    long m = strtol(v, &end, 10);
    if (end == v || *end != ',' || m < 0)
        return 0;
    const char *e0 = end + 1;
    long e = strtol(e0, &end, 10);
    if (end == e0 || *end || e < 0)
        return 0;
    *metric = m;
    *event = e;
    return 1;
}

int web__get_stream(web_req *r)
{
    long after_metric, after_event, trial;
    if (web__query_long(r, "metric", 0, 1L << 62, -1, &after_metric) ||
        web__query_long(r, "event", 0, 1L << 62, -1, &after_event) ||
        web__query_long(r, "trial", 1, 1L << 62, 0, &trial))
        return 400;
    int resumed = s_last_id(r, &after_metric, &after_event);
    store_study sd;
    if (web__study(r, &sd) != 1)
        return r->status;
    char ip[48];
    web__peer_ip(r, ip, sizeof ip);
    int slot = s_slot_take(r->w, ip);
    if (slot < 0) {
        store_study_fini(&sd);
        r->retry_after = 30;
        return web__error(r, 503, "too_many_streams",
                          "too many live streams are open (at most %d, %d from one "
                          "address); close a page or try again later",
                          WEB_MAX_STREAMS, WEB_MAX_STREAMS_PER_IP);
    }
    long marks_m = 0, marks_e = 0;
    store_marks(r->db, &marks_m, &marks_e);
    s_stream *st = calloc(1, sizeof *st);
    if (!st) {
        store_study_fini(&sd);
        pthread_mutex_lock(&r->w->stream_mu);
        r->w->stream_ip[slot][0] = 0;
        pthread_mutex_unlock(&r->w->stream_mu);
        return web__error(r, 503, "busy", "out of memory");
    }
    st->w = r->w;
    st->slot = slot;
    st->study_id = sd.id;
    st->trial = trial;
    st->after_metric = after_metric >= 0 ? after_metric : marks_m;
    st->after_event = after_event >= 0 ? after_event : marks_e;
    st->trials = json_object();
    st->unsettled = json_object();
    st->first = 1;
    st->resumed = resumed;
    st->last_out = util_now();
    st->ends = st->last_out + r->w->stream_max_s;
    web_buf_init(&st->pending);
    store_study_fini(&sd);
    /* a first line at once, so the client sees the stream open */
    web_buf_printf(&st->pending,
                   "retry: 2000\nevent: hello\ndata: {\"metric\":%ld,\"event\":%ld}\n\n",
                   st->after_metric, st->after_event);
    r->resp = web__mhd.create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, s_read,
                                                     st, s_free);
    if (!r->resp) {
        s_free(st);
        return web__error(r, 503, "busy", "cannot start the stream");
    }
    web__mhd.add_response_header(r->resp, "Content-Type", "text/event-stream");
    web__mhd.add_response_header(r->resp, "Cache-Control", "no-store");
    return 200;
}
