/*  web_internal.h - what the files of web/ share (not for other parts).

    web.c         the server: routes, checks on every request, responses
    web_read.c    GET handlers: JSON read from the store
    web_write.c   POST handlers: requests to the controller
    web_stream.c  Server-Sent Events (metrics, events, trial states)
    web_static.c  the built-in page files
    web_importance.c  parameter importance (schedulers/importance.h)
    web_export.c  downloads: a study's export (CSV, JSON), a trial's log
    web_curves.c  downsampled study curves kept in memory
    web_gate.c    at most N expensive reads at once
    web_body.c    POST bodies: parsed and checked (fuzzed)
    web_access.c  who asks: the optional token of a read, trial.env hidden
    web_buf.c     text buffer for large replies
    web_mhd.c     libmicrohttpd, loaded when a server starts
*/
#ifndef JZ_WEB_INTERNAL_H
#define JZ_WEB_INTERNAL_H

#include "web.h"

#include "../common/ident.h"
#include "../store/store.h"
#include "web_buf.h"
#include "web_curves.h"
#include "web_gate.h"

#include <jansson.h>
#include "web_mhd.h"
#include <pthread.h>

#define WEB_MAX_BODY (1024 * 1024) /* bytes of a POST body */
/* What one client may hold, so that no client locks out the others:
   connections in all and from one address, how long one may sit idle,
   event streams in all and from one address and how long one lasts (the
   browser's EventSource reconnects, resuming from its Last-Event-ID;
   JIZHI_WEB_STREAM_MAX_S overrides it; JIZHI_WEB_IDLE_S overrides the
   idle timeout, for tests that check it without waiting 30 s). */
#define WEB_MAX_CONNECTIONS 256
#define WEB_MAX_PER_IP 32
#define WEB_IDLE_TIMEOUT_S 30
#define WEB_MAX_STREAMS 64
#define WEB_MAX_STREAMS_PER_IP 8
#define WEB_STREAM_MAX_S 600.0
/* Expensive reads (an importance fit, a whole study's detail, a trial's
   every point): at most WEB_MAX_HEAVY at once; the next wait up to
   WEB_HEAVY_WAIT_MS, then get 503 with Retry-After. */
#define WEB_MAX_HEAVY 2
#define WEB_HEAVY_WAIT_MS 2000
#define WEB_IMP_CACHE 16 /* importance answers kept (one per study) */

struct web {
    struct MHD_Daemon *d;
    char db[1024];        /* store path */
    char controller[512]; /* fixed endpoint, "" to read <db>.endpoint */
    web_curves_t *curves;
    volatile int stopping; /* set by web_destroy: streams and the warm-up end */
    pthread_t warm;        /* reads the curves of every study at start */
    int warming;           /* the thread was started */
    int port;
    int loopback; /* bound to 127.x.x.x: Host must name it */
    /* importance answers (web_importance.c), each given again while its
       study's completed trials are the same; imp_mu guards the table
       only, never a fit */
    pthread_mutex_t imp_mu;
    struct {
        long study, done, last; /* study id, completed count, last id */
        unsigned long used;     /* imp_clock when last given: the oldest goes */
        json_t *ans;            /* owned; NULL: a free entry */
    } imp[WEB_IMP_CACHE];
    unsigned long imp_clock;
    web_gate heavy; /* expensive reads at once (WEB_MAX_HEAVY) */
    /* open event streams (web_stream.c), by client address, under
       stream_mu: at most WEB_MAX_STREAMS, WEB_MAX_STREAMS_PER_IP each */
    pthread_mutex_t stream_mu;
    char stream_ip[WEB_MAX_STREAMS][48]; /* "" free */
    double stream_max_s;                 /* a stream ends after this long */
};

/* One request: filled by web.c, answered by a handler. */
typedef struct {
    web_t *w;
    struct MHD_Connection *conn;
    const char *method; /* borrowed from MHD */
    char path[512];     /* the URL path, decoded */
    char arg[256];      /* the segment matched by '*' in the route */
    web_buf body;       /* POST body */
    int too_big;        /* body over WEB_MAX_BODY */
    json_t *in;         /* parsed POST body (object), owned */
    ident_t who;        /* the token's user and role (POST, whoami) */
    store_t *db;        /* read-only connection, opened by web__db */
    /* the answer: JSON, or text, or a ready response */
    int status;
    json_t *json;
    web_buf text;
    const char *ctype;
    struct MHD_Response *resp;
    int retry_after; /* > 0: a Retry-After header (503 busy) */
} web_req;

/* A handler returns the HTTP status and sets r->json (or r->text, or r->resp). */
typedef int (*web_handler)(web_req *r);

/* Sets r->json to {"error": code, "message": text}; returns status. */
int web__error(web_req *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The request's read-only store (opened once per request); NULL with the
   error already set (503) when the database cannot be opened. */
store_t *web__db(web_req *r);
/* A query argument, or NULL. Borrowed. */
const char *web__query(web_req *r, const char *key);
/* A query argument as an integer in [lo, hi], or `dflt` when absent;
   -1 with a 400 error set when malformed. */
int web__query_long(web_req *r, const char *key, long lo, long hi, long dflt, long *out);
/* Enters the server's gate for expensive reads: 0 (call web__heavy_leave
   after), or -1 with 503 `busy` and Retry-After set. */
int web__heavy_enter(web_req *r);
void web__heavy_leave(web_req *r);
/* The client's address as text ("127.0.0.2"), "" when unknown. */
void web__peer_ip(web_req *r, char *out, size_t size);
/* Finds the study named r->arg: 1 (filled, release with store_study_fini),
   0 with a 404 set, -1 with a 5xx set. */
int web__study(web_req *r, store_study *out);

/* web_read.c */
int web__get_studies(web_req *r);
int web__get_study(web_req *r);
int web__get_trials(web_req *r);
/* GET /api/studies/NAME/pareto: the objectives, the constraints and the
   trials on the Pareto front (feasible, not dominated; with one objective
   the best feasible trial), each {id, number, values: {metric: v},
   params}. */
int web__get_pareto(web_req *r);
int web__get_events(web_req *r);
int web__get_curves(web_req *r);
int web__get_page(web_req *r);
int web__get_trial(web_req *r);
int web__get_trial_metrics(web_req *r);
int web__get_whoami(web_req *r);

/* web_access.c: what a reader may see */
#define WEB_HIDDEN "***" /* a trial.env value shown to others than its owner */
/* Whether the request carries a valid bearer token: 1 with r->who set,
   else 0 (none, or one that does not check out: an anonymous read). */
int web__reader(web_req *r);
/* 1 when the reader may see the values of spec's trial.env: an admin
   token, or a user token of the spec's owner. */
int web__may_see_env(web_req *r, const json_t *spec);
/* spec as this reader may see it: itself, or a copy whose trial.env
   values are WEB_HIDDEN. New reference. */
json_t *web__spec_for(web_req *r, json_t *spec);

/* web_export.c: the page's downloads */
#define WEB_LOG_MAX (256 * 1024) /* bytes of a log's tail in one answer */
/* GET /api/studies/NAME/export?format=csv|json[&all=1]: `jizhi study
   export`'s bytes, as an attachment. */
int web__get_export(web_req *r);
/* GET /api/trials/ID/log?stream=out|err[&tail=N]: the last N bytes (at
   most WEB_LOG_MAX) of the trial's latest log, from the file when it is
   on this machine, else its first N bytes through the controller. */
int web__get_trial_log(web_req *r);

/* web_importance.c */
int web__get_importance(web_req *r);

/* web_write.c */
int web__post_submit(web_req *r);
int web__post_study_stop(web_req *r);
int web__post_study_resume(web_req *r);
/* study_delete; study_copy with {"name": NEW} (the controller's rules:
   the study's owner or an admin) */
int web__post_study_delete(web_req *r);
int web__post_study_copy(web_req *r);
int web__post_trial_stop(web_req *r);
int web__post_trial_pause(web_req *r);
int web__post_trial_resume(web_req *r);
int web__post_trial_set(web_req *r);
/* trial_fork (ctl_fork.c): a live fork, or its decision now */
int web__post_trial_fork(web_req *r);
/* Checks the bearer token of a POST: 0 with r->who set, or -1 with 401 set. */
int web__authenticate(web_req *r);
/* The controller serving the database: the configured endpoint, else the
   one in <db>.endpoint (read into buf); NULL when none. */
const char *web__endpoint(web_req *r, char *buf, size_t size);

/* web_stream.c: GET /api/studies/NAME/stream */
int web__get_stream(web_req *r);

/* web_static.c: a built-in file for path ("/" is index.html). 1 found
   (r->resp set), 0 not a built-in file. */
int web__static(web_req *r);

#endif
