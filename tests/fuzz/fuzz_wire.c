/*  fuzz_wire.c - libFuzzer target: any bytes as the frames of one message,
    received by wire_recv on both sides of a real (inproc) connection.

    The input is split at NUL bytes into frames (JSON never holds a raw
    NUL), so "\0{...}" is a well-formed message from a DEALER. The same
    frames go DEALER -> ROUTER (the controller's side, with a routing id)
    and ROUTER -> DEALER (a peer's side). wire_recv must refuse or accept
    without crashing, leaking or losing frame sync; an accepted message
    goes through the typed getters and must survive a wire_send /
    wire_recv round trip unchanged. The last frame also goes to the quick
    points decoder (wire_points.h): what it accepts must be what jansson
    reads, point for point and bit for bit. Build and run: `make fuzz`. */
#include "common/wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void *s_ctx, *s_router, *s_dealer;

static void s_setup(void)
{
    s_ctx = zmq_ctx_new();
    s_router = zmq_socket(s_ctx, ZMQ_ROUTER);
    s_dealer = zmq_socket(s_ctx, ZMQ_DEALER);
    if (!s_router || !s_dealer)
        abort();
    wire_socket_setup(s_router);
    wire_socket_setup(s_dealer);
    zmq_setsockopt(s_dealer, ZMQ_ROUTING_ID, "fz", 2);
    if (zmq_bind(s_router, "inproc://fuzz-wire") != 0 ||
        zmq_connect(s_dealer, "inproc://fuzz-wire") != 0)
        abort();
    /* the ROUTER learns the DEALER's id from its first message */
    zmq_send(s_dealer, "", 0, ZMQ_SNDMORE);
    zmq_send(s_dealer, "{\"type\":\"ping\"}", 15, 0);
    char err[256];
    wire_peer from;
    json_t *m = wire_recv(s_router, &from, 0, err, sizeof err);
    if (!m)
        abort();
    json_decref(m);
}

/* Sends the NUL-separated frames of data on sock, after the routing id
   `id` when sending from the ROUTER. */
static void s_send_frames(void *sock, const char *id, const uint8_t *data, size_t size)
{
    if (id)
        zmq_send(sock, id, strlen(id), ZMQ_SNDMORE);
    size_t start = 0;
    for (size_t i = 0; i <= size; i++) {
        if (i < size && data[i] != 0)
            continue;
        zmq_send(sock, data + start, i - start, i < size ? ZMQ_SNDMORE : 0);
        start = i + 1;
    }
}

static void s_exercise(void *sock, wire_peer *to, json_t *m)
{
    char err[256];
    long l;
    double d;
    const char *s;
    static const char *const keys[] = {"type", "req",   "trial", "step",   "value",
                                       "name", "token", "id",    "points", NULL};
    for (int i = 0; keys[i]; i++) {
        wire_get_long(m, keys[i], &l, err, sizeof err);
        wire_get_double(m, keys[i], &d, err, sizeof err);
        wire_get_str(m, keys[i], &s, err, sizeof err);
    }
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) wire_to_double(v, &d);
    (void)wire_type(m);

    /* round trip: what was accepted reads back the same */
    json_t *copy = json_deep_copy(m);
    if (wire_send(sock, to, copy, 0) != 0)
        abort();
}

static void s_roundtrip_check(void *rsock, wire_peer *from, const json_t *want)
{
    char err[256];
    json_t *back = wire_recv(rsock, from, 0, err, sizeof err);
    if (!back || !json_equal(back, (json_t *)want))
        __builtin_trap();
    json_decref(back);
}

/* The quick points decoder against jansson on one body. */
static void s_points_check(const char *body, size_t len)
{
    static wire_points wp;
    json_t *m = wire_points_split(&wp, body, len);
    if (!m)
        return;
    json_t *full = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    json_t *pts = json_object_get(full, "points");
    if (!full || json_array_size(pts) != wp.n)
        __builtin_trap();
    for (size_t i = 0; i < wp.n; i++) {
        json_t *p = json_array_get(pts, i);
        double v;
        if (json_integer_value(json_array_get(p, 0)) != wp.p[i].step ||
            !json_is_integer(json_array_get(p, 0)) ||
            strcmp(json_string_value(json_array_get(p, 1)), wp.p[i].name) != 0 ||
            wire_to_double(json_array_get(p, 2), &v) != 0 ||
            memcmp(&v, &wp.p[i].value, sizeof v) != 0)
            __builtin_trap();
    }
    json_object_set_new(full, "points", json_array());
    if (!json_equal(full, m))
        __builtin_trap();
    json_decref(full);
    json_decref(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!s_ctx)
        s_setup();
    size_t last = size;
    while (last > 0 && data[last - 1] != 0)
        last--;
    s_points_check((const char *)data + last, size - last);
    char err[256];
    wire_peer from;

    /* a peer -> the controller */
    s_send_frames(s_dealer, NULL, data, size);
    json_t *m = wire_recv(s_router, &from, 0, err, sizeof err);
    if (m) {
        if (from.len != 2 || memcmp(from.id, "fz", 2) != 0)
            __builtin_trap();
        s_exercise(s_router, &from, m);
        s_roundtrip_check(s_dealer, NULL, m);
        json_decref(m);
    } else if (!err[0]) {
        __builtin_trap(); /* a refusal always says why */
    }

    /* the controller -> a peer */
    s_send_frames(s_router, "fz", data, size);
    m = wire_recv(s_dealer, NULL, 0, err, sizeof err);
    if (m) {
        s_exercise(s_dealer, NULL, m);
        s_roundtrip_check(s_router, &from, m);
        json_decref(m);
    } else if (!err[0]) {
        __builtin_trap();
    }
    return 0;
}
