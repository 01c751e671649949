/*  web_internal.h - what the files of web/ share (not for other parts).

    web.c         the server: routes, checks on every request, responses
    web_read.c    GET handlers: JSON read from the store
    web_write.c   POST handlers: requests to the controller
    web_stream.c  Server-Sent Events (metrics, events, trial states)
    web_static.c  the built-in page files
    web_importance.c  parameter importance (schedulers/importance.h)
    web_curves.c  downsampled study curves kept in memory
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

#include <jansson.h>
#include "web_mhd.h"
#include <pthread.h>

#define WEB_MAX_BODY (1024 * 1024) /* bytes of a POST body */

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
    /* the last importance answer (web_importance.c), given again while the
       study's completed trials are the same; computed under imp_mu, so
       one fit runs at a time */
    pthread_mutex_t imp_mu;
    long imp_study, imp_done, imp_last; /* study id, completed count, last id */
    json_t *imp;                        /* owned; NULL: none */
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

/* web_importance.c */
int web__get_importance(web_req *r);

/* web_write.c */
int web__post_submit(web_req *r);
int web__post_study_stop(web_req *r);
int web__post_study_resume(web_req *r);
int web__post_trial_stop(web_req *r);
int web__post_trial_pause(web_req *r);
int web__post_trial_resume(web_req *r);
int web__post_trial_set(web_req *r);
/* Checks the bearer token of a POST: 0 with r->who set, or -1 with 401 set. */
int web__authenticate(web_req *r);

/* web_stream.c: GET /api/studies/NAME/stream */
int web__get_stream(web_req *r);

/* web_static.c: a built-in file for path ("/" is index.html). 1 found
   (r->resp set), 0 not a built-in file. */
int web__static(web_req *r);

#endif
