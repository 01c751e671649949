/*  client_zmq.c - client_call over tcp:// (CURVE, or plain by --insecure):
    a libzmq DEALER, the handshake watched through a socket monitor (see
    client.h). ipc:// requests never come here (client.c, zmtp.h). */
#include "client.h"

#include "keys.h"
#include "util.h"
#include "wire.h"

#include <errno.h>
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

json_t *client__zmq_call(const char *endpoint, json_t *msg, int timeout_ms, int slice_ms,
                         wire_check_fn check, void *arg, char *err, size_t errsize)
{
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
