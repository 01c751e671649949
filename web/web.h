/*  web.h - the web dashboard and its HTTP API (libmicrohttpd).

    A web_t serves, on one address (127.0.0.1 by default):
      - the page (HTML, JS, CSS and Chart.js, built into the binary);
      - GET /api/... JSON read from the store over read-only SQLite
        connections (the controller stays the only writer);
      - GET .../stream Server-Sent Events with new metrics, events and
        trial states;
      - POST /api/... write requests, sent to the controller with the same
        client code as the CLI (common/client.h) and answered with the
        controller's acknowledgement. They need a bearer token from
        `jizhi token create` with a role that allows the action
        (common/ident.h).
    The routes, the JSON shapes and the errors are docs/WEB.md.

    Threads: libmicrohttpd runs one thread per connection; every request
    opens its own read-only store connection. No input stops the server.
*/
#ifndef JZ_WEB_H
#define JZ_WEB_H

#include <stddef.h>

typedef struct web web_t;

typedef struct {
    const char *listen;  /* "HOST:PORT" (IPv4 literal or localhost); port 0: any */
    const char *db_path; /* the store file */
    const char
        *controller; /* controller endpoint; NULL: read "<db>.endpoint" per request */
} web_config;

/* Checks that `listen` reads as HOST:PORT (what web_new takes), so a
   command can refuse a bad --http before it creates anything. 0, or -1
   with a message in err ("--http: ..."). */
int web_listen_check(const char *listen, char *err, size_t errsize);

/* Binds and starts serving. Returns NULL with a message in err when the
   address is malformed or cannot be bound. Borrows cfg during the call.
   Caller owns the result and must destroy it. */
web_t *web_new(const web_config *cfg, char *err, size_t errsize);

/* The bound port (useful with port 0). */
int web_port(const web_t *w);

/* Stops serving (open streams end) and frees. NULL-safe; sets *wp NULL. */
void web_destroy(web_t **wp);

#endif
