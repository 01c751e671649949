/*  zmtp.h - a small ZMTP 3 client on the caller's own thread.

    One connection to a ZeroMQ socket bound on ipc:// (a unix stream
    socket), spoken as a DEALER with the NULL mechanism (no security, as
    the controller's ipc:// endpoint has): the greeting, the READY
    command, then whole messages of frames either way. No library thread,
    no context: the process that sends one request and waits for one
    answer (the `jizhi` front's `trial set`) hands nothing to another
    thread. tcp:// and CURVE stay with libzmq (common/client.c).

    The wire (ZMTP 3.1, rfc.zeromq.org 37/ZMTP), as this file speaks it:
    a 64-byte greeting each way (0xFF, 8 padding bytes, 0x7F, version
    3.1, the mechanism "NULL" padded to 20 bytes, as-server 0, 31 zero
    bytes); then frames of a flags byte (bit 0 MORE, bit 1 LONG: an
    8-byte size instead of 1, bit 2 COMMAND), the size in network order
    and the body. The first frame each way is the READY command with the
    Socket-Type property ("DEALER" here; a ROUTER or DEALER peer is
    accepted); an ERROR command carries the peer's reason; PING is
    answered with PONG; other commands are skipped.

    zmtp_new queues our greeting and READY; the first zmtp_send (or
    zmtp_recv) sends them and reads the peer's before the first message
    goes: libzmq ends a connection whose first message arrives before its
    own READY has left.
    Nothing here prints; errors come back as text in the caller's buffer.
*/
#ifndef JZ_ZMTP_H
#define JZ_ZMTP_H

#include <stddef.h>

typedef struct zmtp_t zmtp_t;

/* One frame: `data` of `size` bytes. In a zmtp_msg the message owns it;
   passed to zmtp_send it is borrowed. */
typedef struct {
    unsigned char *data;
    size_t size;
} zmtp_frame;

/* A received message: frames f[0..n). Owned by the caller: zmtp_msg_fini. */
typedef struct {
    zmtp_frame *f;
    size_t n;
} zmtp_msg;

/* Frees the frames of m (accepts a zeroed or already finished one). */
void zmtp_msg_fini(zmtp_msg *m);

/* At most this many frames in one received message (the controller's
   answers have two). */
#define ZMTP_MAX_FRAMES 16

/* Connects to the unix socket at `path` (the part after "ipc://") and
   queues the greeting and READY. Never blocks. Returns the connection
   (caller owns it and must destroy it), or NULL with errno set (ENOENT:
   no socket there; ECONNREFUSED: nobody accepting; EAGAIN: the
   listener's backlog is full; ENAMETOOLONG) and err saying why. */
zmtp_t *zmtp_new(const char *path, char *err, size_t errsize);

/* Closes the connection and frees it; accepts NULL, nulls *self_p. */
void zmtp_destroy(zmtp_t **self_p);

/* Sends frames[0..n) (borrowed, n >= 1) as one message, after the
   handshake if it is not done yet, waiting up to timeout_ms in all.
   Returns 0, or -1 with err and errno as zmtp_recv's, or ETIMEDOUT;
   after -1 the connection is broken. */
int zmtp_send(zmtp_t *self, const zmtp_frame *frames, size_t n, int timeout_ms, char *err,
              size_t errsize);

/* Receives one message, doing the handshake first if not yet done,
   waiting up to timeout_ms (0: only what is there now).
   A frame over max_bytes is refused before it is read. Returns 1 with
   *msg filled (caller owns it: zmtp_msg_fini), 0 when the time ran out
   (what arrived so far is kept for the next call), or -1 with err: the
   peer closed the connection (errno EPIPE), refused it (an ERROR
   command: ECONNREFUSED), or is not a ZMTP 3 ROUTER speaking NULL, sent
   a malformed or oversized frame or more than ZMTP_MAX_FRAMES frames
   (EPROTO). After -1 the connection is broken: every later call fails. */
int zmtp_recv(zmtp_t *self, zmtp_msg *msg, size_t max_bytes, int timeout_ms, char *err,
              size_t errsize);

/* The connection's socket, to poll beside others (POLLIN: call zmtp_recv
   with timeout 0). Borrowed; -1 once closed. */
int zmtp_fd(const zmtp_t *self);

#endif
