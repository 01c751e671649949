/*  client.c - one request to the controller (see client.h).

    Two paths. ipc:// (NULL mechanism, the local default): the request
    and its answer go over a ZMTP connection of our own on the caller's
    thread (zmtp.h), so a short-lived process such as `jizhi trial set`
    starts no libzmq context and hands nothing between threads (on a
    machine whose cores are busy each hand-off waits for a CPU:
    docs/bench.md, bench-torch). The controller's ROUTER sees a DEALER
    sending ["", request] as libzmq's would. tcp:// (CURVE, or plain by
    --insecure): a libzmq DEALER (client_zmq.c; the `jizhi` front, which
    links no libzmq, hands such a command to jizhi-core instead).
*/
#include "client.h"

#include "util.h"
#include "wire.h"
#include "zmtp.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reply in m (["", JSON object with a string "type"]), decoded as
   wire_recv decodes a DEALER's message. NULL with err when malformed. */
static json_t *s_ipc_decode(const zmtp_msg *m, char *err, size_t errsize)
{
    if (m->n != 2 || m->f[0].size != 0) {
        snprintf(err, errsize, "expected 2 frames with an empty delimiter, got %zu",
                 m->n);
        return NULL;
    }
    json_error_t jerr;
    json_t *out = json_loadb((const char *)m->f[1].data, m->f[1].size,
                             JSON_REJECT_DUPLICATES, &jerr);
    if (!out) {
        snprintf(err, errsize, "invalid JSON: %s", jerr.text);
    } else if (!json_is_object(out) || !json_is_string(json_object_get(out, "type"))) {
        snprintf(err, errsize, "not a JSON object with a string \"type\"");
        json_decref(out);
        out = NULL;
    }
    return out;
}

/* Connecting again after a refused connect, as libzmq's DEALER would
   (its default reconnect interval): a controller still starting up. */
#define S_IPC_RECONNECT_MS 100

/* How long a socket file where nobody listens is retried before the
   request went out: a controller restarting after a crash binds its path
   again once its database is open. */
#define S_IPC_REFUSED_MS 2000

/* wire_request_check over ipc://path, on this thread: sends msg (takes
   ownership) with a fresh "req" and waits up to timeout_ms for the reply
   with that req, asking check(arg) after each slice_ms without one. A
   socket file that is not there yet (a controller starting) or a full
   backlog is retried until the time is up. One where nobody listens
   (ECONNREFUSED: its controller was killed before it could remove it) is
   retried for S_IPC_REFUSED_MS (or timeout_ms if less), as a controller
   restarting on the same path binds it again, and then ends the wait;
   after the request went out it is retried until the time is up (the
   controller restarts, and check may still learn the outcome). A
   connection the controller closes before answering ends the wait at
   once, unless check may still learn the outcome. NULL with `why`
   ("timeout", or what went wrong). */
static json_t *s_ipc_request(const char *path, json_t *msg, int timeout_ms, int slice_ms,
                             wire_check_fn check, void *arg, char *why, size_t whysize)
{
    static long s_next_req = 1;
    long req = __atomic_fetch_add(&s_next_req, 1, __ATOMIC_RELAXED);
    json_object_set_new(msg, "req", json_integer(req));
    char *body = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (!body) {
        snprintf(why, whysize, "out of memory");
        return NULL;
    }
    zmtp_frame frames[2] = {{(unsigned char *)"", 0},
                            {(unsigned char *)body, strlen(body)}};
    double deadline = util_now() + timeout_ms / 1000.0;
    double refused_end = /* a refused connect fails from then on */
        util_now() +
        (timeout_ms < S_IPC_REFUSED_MS ? timeout_ms : S_IPC_REFUSED_MS) / 1000.0;
    zmtp_t *z = NULL;
    int sent = 0, asked = 0; /* on this connection / ever */
    char cwhy[300] = "";
    json_t *reply = NULL;
    for (;;) {
        if (!sent) {
            z = zmtp_new(path, cwhy, sizeof cwhy);
            if (!z && errno != ENOENT && errno != EAGAIN &&
                (errno != ECONNREFUSED || (!asked && util_now() >= refused_end))) {
                snprintf(why, whysize, "%s", cwhy);
                break;
            }
            int send_ms = (int)((deadline - util_now()) * 1000.0) + 1;
            if (z &&
                zmtp_send(z, frames, 2, send_ms > 1 ? send_ms : 1, why, whysize) != 0)
                break;
            sent = z != NULL;
            asked |= sent;
        }
        double left = (deadline - util_now()) * 1000.0;
        if (left <= 0) {
            if (sent)
                snprintf(why, whysize, "timeout");
            else
                snprintf(why, whysize, "timeout; %s", cwhy);
            break;
        }
        int wait = (int)left + 1;
        if (!sent && wait > S_IPC_RECONNECT_MS)
            wait = S_IPC_RECONNECT_MS;
        if (check && slice_ms > 0 && wait > slice_ms)
            wait = slice_ms;
        if (z) {
            zmtp_msg m;
            int r = zmtp_recv(z, &m, WIRE_MAX_BYTES, wait, why, whysize);
            if (r < 0 && errno == EPIPE && check) {
                zmtp_destroy(&z); /* the answer is lost: check may learn it */
                continue;
            }
            if (r < 0)
                break;
            if (r == 1) {
                reply = s_ipc_decode(&m, why, whysize);
                zmtp_msg_fini(&m);
                if (!reply)
                    break;
                json_t *rq = json_object_get(reply, "req");
                if (json_is_integer(rq) && json_integer_value(rq) == req)
                    break;
                json_decref(reply); /* not ours: cannot happen on a fresh connection */
                reply = NULL;
                continue;
            }
        } else {
            poll(NULL, 0, wait);
        }
        if (check && (reply = check(arg)) != NULL)
            break;
    }
    zmtp_destroy(&z);
    free(body);
    return reply;
}

json_t *client_call(const char *endpoint, json_t *msg, int timeout_ms, char *err,
                    size_t errsize)
{
    return client_call_check(endpoint, msg, timeout_ms, 0, NULL, NULL, err, errsize);
}

json_t *client_call_check(const char *endpoint, json_t *msg, int timeout_ms, int slice_ms,
                          wire_check_fn check, void *arg, char *err, size_t errsize)
{
    /* the controller refuses requests over WIRE_MAX_REQUEST: say so here */
    char *text = json_dumps(msg, JSON_COMPACT);
    size_t len = text ? strlen(text) : 0;
    free(text);
    if (len + 32 > WIRE_MAX_REQUEST) {
        snprintf(err, errsize,
                 "the request is %zu bytes, over the controller's limit of %d bytes per "
                 "message (a smaller spec or fewer values)",
                 len, WIRE_MAX_REQUEST);
        json_decref(msg);
        return NULL;
    }
    if (!strncmp(endpoint, "ipc://", 6)) {
        char why[400];
        json_t *reply = s_ipc_request(endpoint + 6, msg, timeout_ms, slice_ms, check, arg,
                                      why, sizeof why);
        if (!reply)
            snprintf(err, errsize,
                     "no answer from the controller at %s (%s); is it running?", endpoint,
                     why);
        return reply;
    }
    return client__zmq_call(endpoint, msg, timeout_ms, slice_ms, check, arg, err,
                            errsize);
}
