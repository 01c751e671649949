/*  wire.c - see wire.h and docs/PROTOCOL.md: the framing over libzmq
    sockets. The decoded values, replies and field getters, which need no
    socket, are wire_value.c (the `jizhi` front links them without libzmq). */
#include "wire.h"

#include "common/util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

void wire_socket_setup(void *sock)
{
    int linger = 0;
    int64_t maxsize = WIRE_MAX_BYTES + 1024;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxsize, sizeof maxsize);
}

int wire_send(void *sock, const wire_peer *to, json_t *msg, int dontwait)
{
    int flags = dontwait ? ZMQ_DONTWAIT : 0;
    char *body = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (!body) {
        errno = ENOMEM;
        return -1;
    }
    int rc = 0;
    if (to && to->len > 0 && zmq_send(sock, to->id, to->len, flags | ZMQ_SNDMORE) < 0)
        rc = -1;
    if (rc == 0 && zmq_send(sock, "", 0, flags | ZMQ_SNDMORE) < 0)
        rc = -1;
    if (rc == 0 && zmq_send(sock, body, strlen(body), flags) < 0)
        rc = -1;
    free(body);
    return rc;
}

/* Drops the remaining frames of a message. */
static void s_drain(void *sock)
{
    int more = 1;
    size_t sz = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, sock, 0);
        zmq_msg_close(&m);
    }
}

json_t *wire_recv(void *sock, wire_peer *from, int dontwait, char *err, size_t errsize)
{
    return wire_recv_meta(sock, from, NULL, WIRE_MAX_BYTES, NULL, dontwait, err, errsize);
}

static void s_meta_copy(zmq_msg_t *m, const char *prop, char *out, size_t size)
{
    const char *v = zmq_msg_gets(m, prop);
    snprintf(out, size, "%s", v ? v : "");
}

json_t *wire_recv_meta(void *sock, wire_peer *from, wire_meta *meta, size_t max_bytes,
                       size_t *size_out, int dontwait, char *err, size_t errsize)
{
    return wire_recv_points(sock, from, meta, max_bytes, size_out, dontwait, NULL, err,
                            errsize);
}

json_t *wire_recv_points(void *sock, wire_peer *from, wire_meta *meta, size_t max_bytes,
                         size_t *size_out, int dontwait, wire_points *wp, char *err,
                         size_t errsize)
{
    if (wp)
        wp->n = 0;
    if (size_out)
        *size_out = 0;
    zmq_msg_t frames[3];
    int n = 0, more = 1;
    if (err && errsize)
        err[0] = 0;
    if (from)
        from->len = 0; /* set from the first frame, whatever follows */
    if (meta)
        meta->user_id[0] = meta->peer_addr[0] = 0;
    while (more) {
        if (n == 3) {
            s_drain(sock);
            for (int i = 0; i < n; i++)
                zmq_msg_close(&frames[i]);
            snprintf(err, errsize, "too many frames");
            errno = EPROTO;
            return NULL;
        }
        zmq_msg_init(&frames[n]);
        if (zmq_msg_recv(&frames[n], sock, (n == 0 && dontwait) ? ZMQ_DONTWAIT : 0) < 0) {
            int e = errno;
            for (int i = 0; i <= n; i++)
                zmq_msg_close(&frames[i]);
            errno = e;
            if (e != EAGAIN)
                snprintf(err, errsize, "receive failed: %s", zmq_strerror(e));
            return NULL;
        }
        more = zmq_msg_more(&frames[n]);
        if (!more && meta) { /* a ROUTER's id frame carries none: the last does */
            s_meta_copy(&frames[n], "User-Id", meta->user_id, sizeof meta->user_id);
            s_meta_copy(&frames[n], "Peer-Address", meta->peer_addr,
                        sizeof meta->peer_addr);
        }
        if (n == 0 && from && zmq_msg_size(&frames[0]) <= WIRE_MAX_ID) {
            from->len = zmq_msg_size(&frames[0]);
            memcpy(from->id, zmq_msg_data(&frames[0]), from->len);
        }
        n++;
    }
    if (size_out)
        *size_out = zmq_msg_size(&frames[n - 1]);
    json_t *out = NULL;
    int want = from ? 3 : 2; /* ROUTER: id, "", body; DEALER: "", body */
    if (n != want || zmq_msg_size(&frames[want - 2]) != 0) {
        snprintf(err, errsize, "expected %d frames with an empty delimiter, got %d", want,
                 n);
    } else if (zmq_msg_size(&frames[n - 1]) > max_bytes) {
        snprintf(err, errsize, "message of %zu bytes is over the %zu-byte limit",
                 zmq_msg_size(&frames[n - 1]), max_bytes);
    } else if (!wp || !(out = wire_points_split(wp, zmq_msg_data(&frames[n - 1]),
                                                zmq_msg_size(&frames[n - 1])))) {
        json_error_t jerr;
        out = json_loadb(zmq_msg_data(&frames[n - 1]), zmq_msg_size(&frames[n - 1]),
                         JSON_REJECT_DUPLICATES, &jerr);
        if (!out) {
            snprintf(err, errsize, "invalid JSON: %s", jerr.text);
        } else if (!json_is_object(out) ||
                   !json_is_string(json_object_get(out, "type"))) {
            snprintf(err, errsize, "not a JSON object with a string \"type\"");
            json_decref(out);
            out = NULL;
        }
    }
    for (int i = 0; i < n; i++)
        zmq_msg_close(&frames[i]);
    if (!out)
        errno = EPROTO;
    return out;
}

json_t *wire_request(void *dealer, json_t *msg, int timeout_ms, char *err, size_t errsize)
{
    return wire_request_check(dealer, msg, timeout_ms, 0, NULL, NULL, err, errsize);
}

json_t *wire_request_check(void *dealer, json_t *msg, int timeout_ms, int slice_ms,
                           wire_check_fn check, void *arg, char *err, size_t errsize)
{
    static long s_next_req = 1;
    long req = __atomic_fetch_add(&s_next_req, 1, __ATOMIC_RELAXED);
    json_object_set_new(msg, "req", json_integer(req));
    if (wire_send(dealer, NULL, msg, 0) != 0) {
        snprintf(err, errsize, "send failed: %s", zmq_strerror(errno));
        return NULL;
    }
    double deadline = util_now() + timeout_ms / 1000.0;
    for (;;) {
        double left = deadline - util_now();
        if (left <= 0) {
            snprintf(err, errsize, "timeout");
            return NULL;
        }
        long wait_ms = (long)(left * 1000) + 1;
        if (check && slice_ms > 0 && wait_ms > slice_ms)
            wait_ms = slice_ms;
        zmq_pollitem_t item = {dealer, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, wait_ms) < 0 && errno != EINTR) {
            snprintf(err, errsize, "poll failed: %s", zmq_strerror(errno));
            return NULL;
        }
        if (!(item.revents & ZMQ_POLLIN)) {
            json_t *known = check ? check(arg) : NULL;
            if (known)
                return known;
            continue;
        }
        json_t *reply = wire_recv(dealer, NULL, 1, err, errsize);
        if (!reply) {
            if (errno == EAGAIN)
                continue;
            return NULL;
        }
        json_t *r = json_object_get(reply, "req");
        if (json_is_integer(r) && json_integer_value(r) == req)
            return reply;
        json_decref(reply); /* a late answer to an earlier request */
    }
}
