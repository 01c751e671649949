/*  ctl.h - the controller: owns studies and trials, hosts the schedulers,
    persists every state change before acknowledging it, answers the CLI,
    the dispatchers and the trials over one ZeroMQ ROUTER socket
    (docs/PROTOCOL.md).

    One event loop, one thread: each iteration receives a burst of
    messages, applies them inside one SQLite transaction, commits, and only
    then sends the replies and pushes the iteration produced. The same
    object runs as the `jizhi controller` daemon or as a thread inside
    `jizhi run`.
*/
#ifndef JZ_CTL_H
#define JZ_CTL_H

#include <stdatomic.h>
#include <stddef.h>

typedef struct ctl ctl_t;

typedef struct {
    const char *db_path;   /* SQLite file (created if missing) */
    const char *bind;      /* endpoint to bind; tcp port "*" picks a free one;
                              NULL: ctl_default_bind. tcp:// needs CURVE keys
                              (key_path) unless insecure */
    const char *ckpt_root; /* root of per-trial checkpoint dirs; NULL: next to the db */
    double lost_timeout_s; /* a running trial unheard for this long is lost; <= 0: 30 s */
    const char *key_path;  /* tcp: the controller's key pair (keys.h);
                              NULL: KEYDIR/controller.key */
    const char *authorized_keys; /* tcp: `<z85 key> <user> <role>` lines
                                    (authkeys.h); NULL: KEYDIR/authorized_keys
                                    if it exists */
    int insecure;                /* tcp: plain, every peer the admin (warned) */
    const char *alerts;          /* JSON file of controller-wide alert rules, or NULL */
} ctl_config;

/* The default endpoint for the database at db_path: ipc://DIR/ctl-<hash>.sock
   where DIR is $XDG_RUNTIME_DIR/jizhi, else $JIZHI_HOME/run, else
   /tmp/jizhi-<uid>, created 0700 and refused unless it is this user's
   with mode 0700. 0, or -1 with err. */
int ctl_default_bind(const char *db_path, char *out, size_t size, char *err,
                     size_t errsize);

/* Asks the controller to reread its authorized-keys file at its next
   iteration (a bad file keeps the keys in use). Async-signal-safe. */
void ctl_reload_keys(ctl_t *c);

/* Opens the store, reloads unfinished studies and binds the socket.
   Returns NULL with a message in err when the database cannot be opened,
   the alerts file is invalid or the endpoint cannot be bound. Borrows cfg's strings
   during the call. Caller owns the result and must destroy it. */
ctl_t *ctl_new(const ctl_config *cfg, char *err, size_t errsize);

/* The endpoint peers should connect to (wildcards resolved; "*" hosts
   become 127.0.0.1). Borrowed, valid until destroy. */
const char *ctl_endpoint(const ctl_t *c);

/* Runs the event loop until *stop becomes nonzero (an atomic load every
   50 ms; another thread or a signal handler sets it with atomic_store:
   atomic_int is lock-free, so that is async-signal-safe).
   Returns 0, or -1 on a fatal socket error or when the database cannot be
   written (it stops rather than serve state it could not store). */
int ctl_run(ctl_t *c, atomic_int *stop);

/* NULL-safe; sets *cp to NULL. */
void ctl_destroy(ctl_t **cp);

#endif
