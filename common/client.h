/*  client.h - one request to the controller, as every front end sends it.

    The CLI (cli_request) and the web API (web/) both go through
    client_call: connect a DEALER to the endpoint, send, wait for the reply
    with the same "req", close. Nothing here prints.
*/
#ifndef JZ_CLIENT_H
#define JZ_CLIENT_H

#include <jansson.h>
#include <stddef.h>

#include "wire.h"

/* Sends `msg` (takes ownership, even on failure) to the controller at
   `endpoint` and waits up to timeout_ms. Returns the reply, "ok" or
   "error" (caller owns), or NULL with `err` saying why (cannot connect,
   no answer, a request over WIRE_MAX_REQUEST, a tcp:// endpoint without
   the controller's key and without JIZHI_SERVER_KEY=none: see keys.h). Thread-safe: each
   call uses its own ZeroMQ context. */
json_t *client_call(const char *endpoint, json_t *msg, int timeout_ms, char *err,
                    size_t errsize);
/* client_call, asking check(arg) between slices of slice_ms of the wait
   (wire_request_check): a non-NULL result is returned as the reply. */
json_t *client_call_check(const char *endpoint, json_t *msg, int timeout_ms, int slice_ms,
                          wire_check_fn check, void *arg, char *err, size_t errsize);

/* Internal: client_call_check's path for every endpoint but ipc://, a
   libzmq DEALER (client_zmq.c), called after the size check. The `jizhi`
   front (cli/main.c built with CLI_FRONT) defines its own, which hands the
   whole command to jizhi-core, so that the front links no libzmq. */
json_t *client__zmq_call(const char *endpoint, json_t *msg, int timeout_ms, int slice_ms,
                         wire_check_fn check, void *arg, char *err, size_t errsize);

#endif
