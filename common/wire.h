/*  wire.h - framing and decoding of jizhi's ZeroMQ messages.

    The protocol (every message, its fields, each peer's states) is
    docs/PROTOCOL.md. A message is [routing id (ROUTER side only)] [""]
    [JSON object with a string "type"]. wire_recv enforces the framing and
    the size limit and returns the decoded object; field accessors check
    types so handlers can refuse bad fields without crashing.
*/
#ifndef JZ_WIRE_H
#define JZ_WIRE_H

#include "wire_points.h"

#include <jansson.h>
#include <stddef.h>

#define WIRE_MAX_BYTES (16 * 1024 * 1024)
/* What the controller accepts in one message (its JSON text): parsing
   costs many times the text's size in memory, so requests stay small
   (senders split metric batches; larger ones get an error reply). Its
   socket drops anything over WIRE_MAX_REQUEST_HARD unread. */
#define WIRE_MAX_REQUEST (1024 * 1024)
#define WIRE_MAX_REQUEST_HARD (4 * 1024 * 1024)
#define WIRE_MAX_ID 255

/* A peer's routing id as seen by a ROUTER socket. */
typedef struct {
    unsigned char id[WIRE_MAX_ID + 1];
    size_t len; /* 0: none (DEALER side) */
} wire_peer;

/* Sends `msg` (takes ownership, even on failure). `to` is the peer on a
   ROUTER socket, NULL on a DEALER/REQ socket. Non-blocking when
   `dontwait`. Returns 0 or -1 (errno set by zmq). */
int wire_send(void *sock, const wire_peer *to, json_t *msg, int dontwait);

/* Receives one message. `from` is filled on a ROUTER socket (NULL on a
   DEALER). Returns a new object (caller owns), or NULL: with errno EAGAIN
   when nothing is there (non-blocking, `dontwait`), else malformed, with
   `err` saying why (the frames are consumed, so the socket stays in sync). */
json_t *wire_recv(void *sock, wire_peer *from, int dontwait, char *err, size_t errsize);

/* What the transport says about a message's sender (ZeroMQ metadata):
   user_id is the ZAP handler's "User-Id" (CURVE: the controller sets the
   client's public key), peer_addr the "Peer-Address" (tcp: the IP; ipc:
   "...:uid:gid:pid" from SO_PEERCRED). "" when absent. */
typedef struct {
    char user_id[64];
    char peer_addr[128];
} wire_meta;

/* wire_recv that also fills `meta` (may be NULL) from the message and
   refuses a body over max_bytes (unparsed). *size_out (may be NULL) gets
   the body's size, also for a refused one. */
json_t *wire_recv_meta(void *sock, wire_peer *from, wire_meta *meta, size_t max_bytes,
                       size_t *size_out, int dontwait, char *err, size_t errsize);

/* wire_recv_meta that reads a `metrics` message's points with `wp`
   (wire_points.h): when they are in the plain form, the message returned
   has "points": [] and the points are wp->p[0..wp->n); otherwise wp->n is
   0 and the message is decoded whole, as by wire_recv_meta. */
json_t *wire_recv_points(void *sock, wire_peer *from, wire_meta *meta, size_t max_bytes,
                         size_t *size_out, int dontwait, wire_points *wp, char *err,
                         size_t errsize);

/* Sets the options every jizhi socket uses (linger, max message size). */
void wire_socket_setup(void *sock);

/* The "type" of a decoded message (never NULL after wire_recv). */
const char *wire_type(const json_t *msg);

/* Typed field getters: 0 on success, -1 when absent or of another type
   (with err: "field 'x': expected an integer"). */
int wire_get_long(const json_t *msg, const char *key, long *out, char *err,
                  size_t errsize);
int wire_get_double(const json_t *msg, const char *key, double *out, char *err,
                    size_t errsize);
int wire_get_str(const json_t *msg, const char *key, const char **out, char *err,
                 size_t errsize);

/* "No value" where a double field may lack one (a trial's objective
   before its first report, a failed trial's result): a NaN with a payload
   of its own, so that a NaN a trial reported (a diverged loss) stays a
   value. isnan() is true for both; wire_is_none() only for this one. Only
   the bits tell it: keep it out of arithmetic (copies keep it). */
double wire_none(void);
int wire_is_none(double x);

/* The one encoding of a double in JSON, everywhere values leave a
   process (wire, CLI --json and exports, the web API): a real when
   finite, the string "nan", "inf" or "-inf" when not (JSON has no
   numbers for them; json_real() would fail), null for wire_none().
   New reference; NULL only when out of memory. */
json_t *wire_real(double x);
/* The string wire_real writes for x: "nan", "inf" or "-inf"; NULL when x
   is finite or wire_none() (for encoders that write JSON text directly). */
const char *wire_real_name(double x);
/* Reads a number or one of the three strings into *out (a reported NaN
   is NAN, never wire_none()). 0, or -1 for anything else (null
   included), *out untouched. */
int wire_to_double(const json_t *v, double *out);
/* wire_to_double that also reads null (and an absent value) as
   wire_none(). 0 or -1. */
int wire_to_value(const json_t *v, double *out);

/* Builds replies. New references. */
json_t *wire_ok(long req);
json_t *wire_error(long req, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Client side: sends `msg` (takes ownership) with a fresh "req" on a
   DEALER socket and waits up to timeout_ms for the reply with that req,
   dropping others. Returns the reply (caller owns) or NULL with err
   ("timeout", or malformed). */
json_t *wire_request(void *dealer, json_t *msg, int timeout_ms, char *err,
                     size_t errsize);

/* Asked between slices of a wait: a reply learned another way (caller of
   wire_request_check owns it), or NULL to go on waiting. */
typedef json_t *(*wire_check_fn)(void *arg);
/* wire_request, calling check(arg) after each slice_ms without an answer
   (a long wait that may learn its outcome elsewhere, e.g. from the
   database when the controller restarted and lost the request); its
   non-NULL result ends the wait and is returned. */
json_t *wire_request_check(void *dealer, json_t *msg, int timeout_ms, int slice_ms,
                           wire_check_fn check, void *arg, char *err, size_t errsize);

#endif
