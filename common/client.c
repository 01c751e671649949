/*  client.c - one request to the controller (see client.h).

    Two paths. ipc:// (NULL mechanism, the local default): the request
    and its answer go over a ZMTP connection of our own on the caller's
    thread (zmtp.h), so a short-lived process such as `jizhi trial set`
    starts no libzmq context and hands nothing between threads (on a
    machine whose cores are busy each hand-off waits for a CPU:
    docs/bench.md, bench-torch). The controller's ROUTER sees a DEALER
    sending ["", request] as libzmq's would. tcp:// (CURVE, or plain by
    --insecure): a libzmq DEALER.
*/
#include "client.h"

#include "keys.h"
#include "util.h"
#include "wire.h"
#include "zmtp.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* Waits, over a CURVE tcp:// connection, for the handshake's outcome, up to
   timeout_ms. A controller that cannot open our HELLO (we hold another
   public key than its own) drops the connection during the handshake, and
   the socket reconnects and is dropped again, silently: two such drops
   without a completed handshake are a rejection. Returns -1 then (err
   says so), else 0 (handshake done, or nothing decided: nobody listening
   yet, or the time is up; the request's own timeout then speaks). */
static int s_await_handshake(void *ctx, void *sock, const char *endpoint, int timeout_ms,
                             char *err, size_t errsize)
{
    char addr[64];
    snprintf(addr, sizeof addr, "inproc://jz-client-mon-%p", sock);
    int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                 ZMQ_EVENT_DISCONNECTED;
    if (zmq_socket_monitor(sock, addr, events) != 0)
        return 0;
    void *mon = zmq_socket(ctx, ZMQ_PAIR);
    int rc = 0, drops = 0;
    if (mon && zmq_connect(mon, addr) == 0) {
        double end = util_now() + timeout_ms / 1000.0;
        while (util_now() < end && drops < 2) {
            zmq_pollitem_t item = {mon, 0, ZMQ_POLLIN, 0};
            if (zmq_poll(&item, 1, (long)((end - util_now()) * 1000) + 1) <= 0)
                continue;
            zmq_msg_t frame;
            zmq_msg_init(&frame);
            int n = zmq_msg_recv(&frame, mon, 0);
            uint16_t ev = 0;
            if (n >= 2)
                memcpy(&ev, zmq_msg_data(&frame), sizeof ev);
            while (zmq_msg_more(&frame)) /* the endpoint frame */
                zmq_msg_recv(&frame, mon, 0);
            zmq_msg_close(&frame);
            if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
                break;
            if (n >= 2)
                drops++;
        }
    }
    if (drops >= 2) {
        snprintf(err, errsize,
                 "the controller at %s rejected the CURVE handshake: the server key this "
                 "client uses (--server-key or JIZHI_SERVER_KEY) is not the controller's "
                 "public key; copy its KEYDIR/controller.pub and pass the file "
                 "(--server-key FILE), or quote the key: JIZHI_SERVER_KEY='KEY'",
                 endpoint);
        rc = -1;
    }
    zmq_socket_monitor(sock, NULL, 0);
    if (mon)
        zmq_close(mon);
    return rc;
}

/* An "unauthorized" reply over tcp:// names what the operator must add. */
static void s_unknown_key_hint(void *sock, json_t *reply)
{
    const char *code = json_string_value(json_object_get(reply, "code"));
    const char *text = json_string_value(json_object_get(reply, "message"));
    char pub[KEYS_Z85_LEN + 1];
    size_t len = sizeof pub;
    if (!code || strcmp(code, "unauthorized") != 0 || !text ||
        zmq_getsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, &len) != 0)
        return;
    char more[2048], path[4096];
    if (!*keys_client_key_path(path, sizeof path))
        snprintf(more, sizeof more,
                 "%s. This client has no key pair of its own (it spoke with a fresh "
                 "anonymous one): run `jizhi keygen`, then on the controller's host add "
                 "the line 'PUBLIC-KEY USER ROLE' to its authorized_keys with the key it "
                 "prints, and send the controller SIGHUP (after --bind tcp:// the "
                 "operator too needs a line with role admin)",
                 text);
    else
        snprintf(
            more, sizeof more,
            "%s. This client's public key is %s (%.900s): on the controller's host add "
            "the line '%s USER ROLE' to its authorized_keys and send it SIGHUP "
            "(after --bind tcp:// the operator too needs a line with role admin)",
            text, pub, path, pub);
    json_object_set_new(reply, "message", json_string(more));
}

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

/* wire_request_check over ipc://path, on this thread: sends msg (takes
   ownership) with a fresh "req" and waits up to timeout_ms for the reply
   with that req, asking check(arg) after each slice_ms without one. A
   refused connect is retried until the time is up; a connection the
   controller closes before answering ends the wait at once, unless
   check may still learn the outcome (the controller restarted). NULL
   with `why` ("timeout", or what went wrong). */
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
    zmtp_t *z = NULL;
    int sent = 0;
    char cwhy[300] = "";
    json_t *reply = NULL;
    for (;;) {
        if (!sent) {
            z = zmtp_new(path, cwhy, sizeof cwhy);
            if (!z && errno != ENOENT && errno != ECONNREFUSED && errno != EAGAIN) {
                snprintf(why, whysize, "%s", cwhy);
                break;
            }
            if (z && zmtp_send(z, frames, 2, timeout_ms, why, whysize) != 0)
                break;
            sent = z != NULL;
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
    void *ctx = zmq_ctx_new();
    void *sock = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
    json_t *reply = NULL;
    if (!sock) {
        snprintf(err, errsize, "cannot create a socket: %s", zmq_strerror(errno));
        json_decref(msg);
    } else {
        wire_socket_setup(sock);
        char kerr[1200], spub[KEYS_Z85_LEN + 1];
        if (keys_client_setup(sock, endpoint, spub, kerr, sizeof kerr) != 0) {
            snprintf(err, errsize, "%s", kerr);
            json_decref(msg);
        } else if (zmq_connect(sock, endpoint) != 0) {
            snprintf(err, errsize, "cannot connect to the controller at %s: %s", endpoint,
                     zmq_strerror(errno));
            json_decref(msg);
        } else if (spub[0] && !strncmp(endpoint, "tcp://", 6) &&
                   s_await_handshake(ctx, sock, endpoint, timeout_ms, err, errsize) !=
                       0) {
            json_decref(msg);
        } else {
            char why[200];
            reply = wire_request_check(sock, msg, timeout_ms, slice_ms, check, arg, why,
                                       sizeof why);
            if (reply && spub[0] && !strcmp(wire_type(reply), "error"))
                s_unknown_key_hint(sock, reply);
            if (!reply)
                snprintf(err, errsize,
                         "no answer from the controller at %s (%s); is it running?%s",
                         endpoint, why,
                         strncmp(endpoint, "tcp://", 6) ? ""
                         : spub[0] ? " (CURVE: is JIZHI_SERVER_KEY its public key?)"
                                   : " (plain TCP by --insecure: a CURVE controller "
                                     "needs --server-key or JIZHI_SERVER_KEY)");
        }
        zmq_close(sock);
    }
    if (ctx)
        zmq_ctx_term(ctx);
    return reply;
}
