/*  zmtp.c - a small ZMTP 3 client (see zmtp.h for the wire as spoken).

    Sends go out of one buffer (the queued handshake, then the message)
    with send(); receives fill one buffer that s_parse takes greetings,
    commands and frames from, so that a timeout keeps a partial message
    for the next call. Memory: everything is checked; a failed allocation
    is an error like any other (ENOMEM).
*/
#include "zmtp.h"

#include "util.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define S_GREETING_LEN 64
#define S_FLAG_MORE 0x01
#define S_FLAG_LONG 0x02
#define S_FLAG_COMMAND 0x04
#define S_MAX_COMMAND 65536 /* a READY with room for any property we would read */
#define S_READ_CHUNK 65536

/* The connection's side of the handshake, then its life. */
typedef enum {
    ZMTP_GREETING, /* waiting for the peer's greeting */
    ZMTP_READY,    /* greeting read; waiting for the peer's READY */
    ZMTP_OPEN,     /* messages flow */
    ZMTP_BROKEN,   /* an error: every call fails */
} zmtp_state;

struct zmtp_t {
    int fd;             /* the unix stream socket, non-blocking; -1 once closed */
    zmtp_state state;   /* see s_state_set */
    unsigned char *out; /* bytes queued to send */
    size_t out_len, out_cap;
    unsigned char *in; /* bytes received, not yet parsed */
    size_t in_len, in_cap;
    zmtp_msg part; /* the frames of a message being received */
};

/* The one place the state changes: forward through the handshake, or
   to BROKEN from anywhere. */
static void s_state_set(zmtp_t *self, zmtp_state to)
{
    assert(to == ZMTP_BROKEN || (self->state == ZMTP_GREETING && to == ZMTP_READY) ||
           (self->state == ZMTP_READY && to == ZMTP_OPEN));
    self->state = to;
}

/* Marks the connection broken with errno e and err's text; returns -1. */
static int s_fail(zmtp_t *self, int e, char *err, size_t errsize, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int s_fail(zmtp_t *self, int e, char *err, size_t errsize, const char *fmt, ...)
{
    if (err && errsize) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsize, fmt, ap);
        va_end(ap);
    }
    s_state_set(self, ZMTP_BROKEN);
    errno = e;
    return -1;
}

/* Milliseconds left until deadline (util_now seconds), at least 0. */
static int s_left_ms(double deadline)
{
    double left = (deadline - util_now()) * 1000.0;
    return left <= 0 ? 0 : left > 1e9 ? 1000000000 : (int)left + 1;
}

void zmtp_msg_fini(zmtp_msg *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        free(m->f[i].data);
    free(m->f);
    m->f = NULL;
    m->n = 0;
}

/* ---- sending ---- */

/* Appends n bytes to the send buffer. 0, or -1 (ENOMEM). */
static int s_put(zmtp_t *self, const void *data, size_t n)
{
    if (self->out_len + n > self->out_cap) {
        size_t cap = self->out_cap ? self->out_cap : 256;
        while (cap < self->out_len + n)
            cap *= 2;
        unsigned char *p = realloc(self->out, cap);
        if (!p) {
            errno = ENOMEM;
            return -1;
        }
        self->out = p;
        self->out_cap = cap;
    }
    if (n)
        memcpy(self->out + self->out_len, data, n);
    self->out_len += n;
    return 0;
}

/* Appends one frame's header (flags, then a 1- or 8-byte size). */
static int s_put_header(zmtp_t *self, unsigned flags, size_t size)
{
    unsigned char h[9];
    size_t n = 0;
    if (size > 255) {
        h[n++] = (unsigned char)(flags | S_FLAG_LONG);
        for (int i = 7; i >= 0; i--)
            h[n++] = (unsigned char)((uint64_t)size >> (8 * i));
    } else {
        h[n++] = (unsigned char)flags;
        h[n++] = (unsigned char)size;
    }
    return s_put(self, h, n);
}

/* Sends the buffer, waiting for room until deadline; with deadline 0,
   only what the socket takes now. 0 (all sent, or deadline 0), or -1
   with err: the connection is then broken, except for errno EPIPE (the
   peer closed: the buffer is dropped, and what the peer sent before it
   closed can still be read). */
static int s_flush(zmtp_t *self, double deadline, char *err, size_t errsize)
{
    size_t off = 0;
    int rc = 0;
    while (off < self->out_len) {
        ssize_t k = send(self->fd, self->out + off, self->out_len - off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            off += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            /* the peer is gone, perhaps after saying why: the caller
               reads that first (s_handshake), so not broken yet */
            snprintf(err, errsize, "the peer closed the connection (%s)",
                     strerror(errno));
            off = self->out_len;
            errno = EPIPE;
            rc = -1;
            break;
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            rc = s_fail(self, errno, err, errsize, "send: %s", strerror(errno));
            break;
        }
        if (deadline == 0)
            break;
        struct pollfd p = {self->fd, POLLOUT, 0};
        int left = s_left_ms(deadline);
        int r = left > 0 ? poll(&p, 1, left) : 0;
        if (r < 0 && errno != EINTR) {
            rc = s_fail(self, errno, err, errsize, "poll: %s", strerror(errno));
            break;
        }
        if (r == 0) {
            rc = s_fail(self, ETIMEDOUT, err, errsize,
                        "timeout: the peer took %zu of %zu bytes", off, self->out_len);
            break;
        }
    }
    memmove(self->out, self->out + off, self->out_len - off);
    self->out_len -= off;
    return rc;
}

/* ---- connecting ---- */

zmtp_t *zmtp_new(const char *path, char *err, size_t errsize)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errsize, "the socket path %s is over %zu bytes", path,
                 sizeof sa.sun_path - 1);
        errno = ENAMETOOLONG;
        return NULL;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    zmtp_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errsize, "out of memory");
        errno = ENOMEM;
        return NULL;
    }
    self->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int e = errno;
    if (self->fd < 0 || connect(self->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        e = errno;
        snprintf(err, errsize, "cannot connect to %s: %s", path, strerror(e));
        zmtp_destroy(&self);
        errno = e;
        return NULL;
    }
    /* the greeting: signature, version 3.1, mechanism NULL, as-server 0 */
    unsigned char g[S_GREETING_LEN] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 1};
    memcpy(g + 12, "NULL", 4);
    /* READY with Socket-Type DEALER */
    static const char ready[] = "\x05READY\x0bSocket-Type\0\0\0\x06"
                                "DEALER";
    if (s_put(self, g, sizeof g) != 0 ||
        s_put_header(self, S_FLAG_COMMAND, sizeof ready - 1) != 0 ||
        s_put(self, ready, sizeof ready - 1) != 0) {
        snprintf(err, errsize, "out of memory");
        zmtp_destroy(&self);
        errno = ENOMEM;
        return NULL;
    }
    return self;
}

void zmtp_destroy(zmtp_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zmtp_t *self = *self_p;
    if (self->fd >= 0)
        close(self->fd);
    free(self->out);
    free(self->in);
    zmtp_msg_fini(&self->part);
    free(self);
    *self_p = NULL;
}

int zmtp_fd(const zmtp_t *self)
{
    return self->fd;
}

/* ---- receiving ---- */

/* The peer's greeting from the front of the buffer. 1 taken, 0 more
   needed, -1 not a ZMTP 3 NULL peer. */
static int s_greeting(zmtp_t *self, size_t *used, char *err, size_t errsize)
{
    const unsigned char *g = self->in;
    if (self->in_len >= 1 && g[0] != 0xFF)
        return s_fail(self, EPROTO, err, errsize,
                      "not a ZeroMQ peer: its first byte is 0x%02x, not a ZMTP signature",
                      g[0]);
    if (self->in_len >= 10 && !(g[9] & 1))
        return s_fail(self, EPROTO, err, errsize,
                      "not a ZMTP 3 peer: a ZMTP 1.0 signature");
    if (self->in_len >= 11 && g[10] < 3)
        return s_fail(self, EPROTO, err, errsize,
                      "the peer speaks ZMTP %u, this client ZMTP 3 only", g[10]);
    if (self->in_len < S_GREETING_LEN)
        return 0;
    static const unsigned char null_mech[20] = "NULL";
    if (memcmp(g + 12, null_mech, sizeof null_mech) != 0) {
        char mech[21];
        memcpy(mech, g + 12, 20);
        mech[20] = 0;
        for (char *c = mech; *c; c++)
            if (*c < 0x20 || *c > 0x7e)
                *c = '?';
        return s_fail(self, EPROTO, err, errsize,
                      "the peer asks for the %s mechanism; this client speaks NULL only "
                      "(ipc://)",
                      mech);
    }
    *used = S_GREETING_LEN;
    s_state_set(self, ZMTP_READY);
    return 1;
}

/* Reads READY's properties (body after the name): the peer must say it
   is a ROUTER (or a DEALER). 0, or -1. */
static int s_ready(zmtp_t *self, const unsigned char *p, size_t len, char *err,
                   size_t errsize)
{
    char type[32] = "";
    while (len > 0) {
        size_t nlen = p[0];
        if (len < 1 + nlen + 4)
            return s_fail(self, EPROTO, err, errsize, "a malformed READY property");
        const unsigned char *name = p + 1;
        uint32_t vlen = (uint32_t)p[1 + nlen] << 24 | (uint32_t)p[2 + nlen] << 16 |
                        (uint32_t)p[3 + nlen] << 8 | p[4 + nlen];
        if (len - 1 - nlen - 4 < vlen)
            return s_fail(self, EPROTO, err, errsize, "a malformed READY property");
        const unsigned char *val = p + 1 + nlen + 4;
        if (nlen == 11 && !strncasecmp((const char *)name, "Socket-Type", 11) &&
            vlen < sizeof type) {
            memcpy(type, val, vlen);
            type[vlen] = 0;
        }
        p = val + vlen;
        len -= 1 + nlen + 4 + vlen;
    }
    if (strcmp(type, "ROUTER") != 0 && strcmp(type, "DEALER") != 0)
        return s_fail(self, EPROTO, err, errsize,
                      "the peer is a %s socket; a DEALER talks to a ROUTER",
                      type[0] ? type : "(unnamed)");
    s_state_set(self, ZMTP_OPEN);
    return 0;
}

/* One command (body of `len` bytes). 0 handled, -1 error. */
static int s_command(zmtp_t *self, const unsigned char *b, size_t len, char *err,
                     size_t errsize)
{
    size_t nlen = len ? b[0] : 0;
    if (len == 0 || nlen + 1 > len)
        return s_fail(self, EPROTO, err, errsize, "a malformed command");
    const char *name = (const char *)b + 1;
    const unsigned char *rest = b + 1 + nlen;
    size_t rlen = len - 1 - nlen;
    if (nlen == 5 && !memcmp(name, "ERROR", 5)) {
        size_t r = rlen ? rest[0] : 0;
        if (r + 1 > rlen)
            r = rlen ? rlen - 1 : 0;
        return s_fail(self, ECONNREFUSED, err, errsize, "the peer refused: %.*s", (int)r,
                      rlen ? (const char *)rest + 1 : "");
    }
    if (self->state == ZMTP_READY) {
        if (nlen == 5 && !memcmp(name, "READY", 5))
            return s_ready(self, rest, rlen, err, errsize);
        return s_fail(self, EPROTO, err, errsize, "expected READY, got the %.*s command",
                      (int)nlen, name);
    }
    if (nlen == 4 && !memcmp(name, "PING", 4)) {
        /* PONG with the ping's context (after its 2-byte TTL) */
        size_t ctx = rlen > 2 ? rlen - 2 : 0;
        if (ctx > 16)
            ctx = 16;
        if (s_put_header(self, S_FLAG_COMMAND, 5 + ctx) != 0 ||
            s_put(self, "\x04PONG", 5) != 0 || s_put(self, rest + 2, ctx) != 0)
            return s_fail(self, ENOMEM, err, errsize, "out of memory");
    }
    return 0; /* PONG and the rest: nothing for a DEALER to do */
}

/* Takes what it can from the receive buffer: the greeting, commands,
   frames. 1 with a whole message in *msg, 0 more bytes needed (or, with
   msg NULL, the handshake done: nothing after it is taken), -1. */
static int s_parse(zmtp_t *self, zmtp_msg *msg, size_t max_bytes, char *err,
                   size_t errsize)
{
    if (self->in_len == 0) /* and perhaps no buffer yet */
        return 0;
    size_t off = 0;
    int rc = 0;
    while (rc == 0 && (msg || self->state != ZMTP_OPEN)) {
        const unsigned char *p = self->in + off;
        size_t avail = self->in_len - off;
        if (self->state == ZMTP_GREETING) {
            size_t used = 0;
            rc = s_greeting(self, &used, err, errsize);
            if (rc == 1) {
                off += used;
                rc = 0;
                continue;
            }
            break;
        }
        if (avail < 2)
            break;
        unsigned flags = p[0];
        if (flags & ~(unsigned)(S_FLAG_MORE | S_FLAG_LONG | S_FLAG_COMMAND)) {
            rc = s_fail(self, EPROTO, err, errsize, "a frame with unknown flags 0x%02x",
                        flags);
            break;
        }
        size_t hlen = flags & S_FLAG_LONG ? 9 : 2;
        if (avail < hlen)
            break;
        uint64_t size = 0;
        if (flags & S_FLAG_LONG)
            for (int i = 1; i <= 8; i++)
                size = size << 8 | p[i];
        else
            size = p[1];
        int command = (flags & S_FLAG_COMMAND) != 0;
        if (command ? size > S_MAX_COMMAND : size > max_bytes) {
            rc = s_fail(self, EPROTO, err, errsize,
                        "a %s of %llu bytes, over the limit of %zu",
                        command ? "command" : "frame", (unsigned long long)size,
                        command ? (size_t)S_MAX_COMMAND : max_bytes);
            break;
        }
        if (command && (flags & S_FLAG_MORE)) {
            rc = s_fail(self, EPROTO, err, errsize, "a command frame marked MORE");
            break;
        }
        if (!command && self->state != ZMTP_OPEN) {
            rc = s_fail(self, EPROTO, err, errsize, "a message before the READY command");
            break;
        }
        if (avail - hlen < size)
            break;
        const unsigned char *body = p + hlen;
        off += hlen + (size_t)size;
        if (command) {
            rc = s_command(self, body, (size_t)size, err, errsize);
            continue;
        }
        if (self->part.n == ZMTP_MAX_FRAMES) {
            rc = s_fail(self, EPROTO, err, errsize, "a message of more than %d frames",
                        ZMTP_MAX_FRAMES);
            break;
        }
        zmtp_frame *f = realloc(self->part.f, (self->part.n + 1) * sizeof *f);
        unsigned char *data = f ? malloc(size ? size : 1) : NULL;
        if (f)
            self->part.f = f;
        if (!data) {
            rc = s_fail(self, ENOMEM, err, errsize, "out of memory");
            break;
        }
        memcpy(data, body, (size_t)size);
        self->part.f[self->part.n++] = (zmtp_frame){data, (size_t)size};
        if (!(flags & S_FLAG_MORE)) {
            *msg = self->part;
            self->part = (zmtp_msg){0};
            rc = 1;
        }
    }
    memmove(self->in, self->in + off, self->in_len - off);
    self->in_len -= off;
    return rc;
}

/* Reads what the socket has, waiting until deadline for something.
   1 bytes added, 0 the time ran out, -1 the peer closed or an error
   (err; broken). */
static int s_read(zmtp_t *self, double deadline, char *err, size_t errsize)
{
    for (;;) {
        if (self->in_cap - self->in_len < S_READ_CHUNK) {
            unsigned char *p = realloc(self->in, self->in_len + S_READ_CHUNK);
            if (!p)
                return s_fail(self, ENOMEM, err, errsize, "out of memory");
            self->in = p;
            self->in_cap = self->in_len + S_READ_CHUNK;
        }
        ssize_t k = recv(self->fd, self->in + self->in_len, self->in_cap - self->in_len,
                         MSG_DONTWAIT);
        if (k > 0) {
            self->in_len += (size_t)k;
            return 1;
        }
        if (k == 0) {
            if (self->state == ZMTP_GREETING)
                return s_fail(
                    self, EPIPE, err, errsize,
                    "the peer closed the connection during the greeting (%zu of "
                    "%d bytes)",
                    self->in_len, S_GREETING_LEN);
            return s_fail(self, EPIPE, err, errsize, "the peer closed the connection%s",
                          self->part.n || self->in_len ? " in the middle of a message"
                                                       : "");
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return s_fail(self, errno == ECONNRESET ? EPIPE : errno, err, errsize,
                          "the peer closed the connection (%s)", strerror(errno));
        int left = s_left_ms(deadline);
        if (left == 0)
            return 0;
        struct pollfd p = {self->fd, POLLIN, 0};
        int r = poll(&p, 1, left);
        if (r < 0 && errno != EINTR)
            return s_fail(self, errno, err, errsize, "poll: %s", strerror(errno));
        if (r == 0)
            return 0;
    }
}

/* Sends what is queued of our greeting and READY and reads the peer's,
   until deadline. 1 done (OPEN), 0 the time ran out, -1 (err). A peer
   that closed is read to its end first: its reason (an ERROR command, a
   greeting that is not ZMTP) says more than the broken pipe. */
static int s_handshake(zmtp_t *self, double deadline, char *err, size_t errsize)
{
    if (self->state == ZMTP_OPEN)
        return 1;
    if (s_flush(self, deadline, err, errsize) != 0 && errno != EPIPE)
        return -1;
    for (;;) {
        if (s_parse(self, NULL, 0, err, errsize) < 0)
            return -1;
        if (self->state == ZMTP_OPEN)
            return 1;
        int r = s_read(self, deadline, err, errsize);
        if (r <= 0)
            return r;
    }
}

int zmtp_send(zmtp_t *self, const zmtp_frame *frames, size_t n, int timeout_ms, char *err,
              size_t errsize)
{
    assert(n >= 1);
    if (self->state == ZMTP_BROKEN)
        return s_fail(self, EPIPE, err, errsize, "the connection is broken");
    double deadline = util_now() + (timeout_ms > 0 ? timeout_ms : 0) / 1000.0;
    /* libzmq takes a message only once its own READY has left: a message
       that arrives with our READY, before it answered, ends the connection */
    int hs = s_handshake(self, deadline, err, errsize);
    if (hs < 0)
        return -1;
    if (hs == 0)
        return s_fail(self, ETIMEDOUT, err, errsize,
                      "timeout: the peer did not complete the ZMTP handshake");
    for (size_t i = 0; i < n; i++)
        if (s_put_header(self, i + 1 < n ? S_FLAG_MORE : 0, frames[i].size) != 0 ||
            s_put(self, frames[i].data, frames[i].size) != 0)
            return s_fail(self, ENOMEM, err, errsize, "out of memory");
    if (s_flush(self, deadline, err, errsize) != 0) {
        if (errno == EPIPE)
            s_state_set(self, ZMTP_BROKEN);
        return -1;
    }
    return 0;
}

int zmtp_recv(zmtp_t *self, zmtp_msg *msg, size_t max_bytes, int timeout_ms, char *err,
              size_t errsize)
{
    *msg = (zmtp_msg){0};
    if (self->state == ZMTP_BROKEN)
        return s_fail(self, EPIPE, err, errsize, "the connection is broken");
    double deadline = util_now() + (timeout_ms > 0 ? timeout_ms : 0) / 1000.0;
    int hs = s_handshake(self, deadline, err, errsize);
    if (hs <= 0)
        return hs;
    for (;;) {
        int rc = s_parse(self, msg, max_bytes, err, errsize);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            /* a PONG queued beside the message goes out now: the caller may
               close the connection next; the message is here either way */
            if (self->out_len) {
                char ignored[64];
                (void)s_flush(self, 0, ignored, sizeof ignored);
            }
            return 1;
        }
        if (self->out_len && s_flush(self, 0, err, errsize) != 0 && errno != EPIPE)
            return -1; /* a PONG; a peer gone shows as the end of what it sent */
        int r = s_read(self, deadline, err, errsize);
        if (r <= 0)
            return r;
    }
}
