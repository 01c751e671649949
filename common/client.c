/*  client.c - one request to the controller (see client.h). */
#include "client.h"

#include "keys.h"
#include "wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

json_t *client_call(const char *endpoint, json_t *msg, int timeout_ms, char *err,
                    size_t errsize)
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
        } else {
            char why[200];
            reply = wire_request(sock, msg, timeout_ms, why, sizeof why);
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
