/*  jz_internal.h - private to libjizhi: the trial object shared by the
    application side (jz_trial.c, the public API) and the background
    connection thread (jz_conn.c).

    Ownership across the two threads:
    - config fields are set by jz_open before the thread starts, then
      read-only;
    - "app" fields are touched only by the application thread;
    - "shared" fields are guarded by `mu` (the condition `cv` signals
      acknowledgements and state changes to jz_open and jz_flush);
    - the ZeroMQ DEALER socket lives entirely inside the thread (jz_conn.c).
    The application wakes the thread by writing a byte to wake_fd[1].

    Internal functions shared by the two files are jz__name and hidden, so
    the version script's jz_* export glob does not publish them.
*/
#ifndef JZ_INTERNAL_H
#define JZ_INTERNAL_H

#include "jizhi.h"

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define JZ__HIDDEN __attribute__((visibility("hidden")))

#define JZ__QUEUE_MAX 1000000   /* unacknowledged points before jz_report fails */
#define JZ__BATCH_TRIGGER 10000 /* queued points that trigger a batch at once */
#define JZ__BATCH_MAX 100000    /* points per metrics message */
/* bytes of one metrics message at most (under the controller's
   WIRE_MAX_REQUEST): a point takes its name + JZ__POINT_BYTES at most */
#define JZ__BATCH_BYTES (900 * 1024)
#define JZ__POINT_BYTES 56    /* [step,"",value], with a 20-digit step, 24-char value */
#define JZ__BATCH_EVERY 0.050 /* seconds between batches otherwise */
#define JZ__LOAD_DRAIN_MS                                                                \
    2000 /* jz_ack of a load waits this long at most for earlier points */
#define JZ__RESEND_AFTER                                                                 \
    2.0                         /* seconds without a reply before the first resend;      \
                                   each next wait doubles (util_backoff) ... */
#define JZ__RESEND_MAX 16.0     /* ... up to this, with jitter up to half more */
#define JZ__HEARTBEAT_EVERY 1.0 /* seconds of silence before a heartbeat */
#define JZ__IDLE_MS 1000        /* the thread's longest sleep (s_wait_ms) */

#define JZ__NAME_CHUNK 256  /* metric names per chunk */
#define JZ__NAME_CHUNKS 256 /* at most 65536 distinct metric names */
#define JZ__NAME_LEN 64

typedef enum {
    JZ__CONNECTING = 0, /* hello sent, not answered yet */
    JZ__CONNECTED,      /* hello answered */
    JZ__REFUSED         /* the controller refused our token: nothing more is sent */
} jz__state;

typedef struct {
    long step;
    double value;
    uint32_t name; /* index into the trial's name table */
} jz__point;

/* An instruction received by the thread, waiting for jz_poll. */
typedef struct {
    jz_instruction ins;
    json_t *value;  /* SET: the new value (owned) */
    json_t *params; /* LOAD: the new params (owned), or NULL */
} jz__pending_ins;

struct jz_trial {
    /* config: set by jz_open, then read-only */
    int standalone;       /* 1: no JIZHI_TRIAL, or a follower: nothing is sent */
    int follower;         /* JIZHI_RANK > 0: a rank other than 0 of a multi-rank
                             trial; standalone, and reports are dropped silently */
    long trial_id;        /* -1 standalone (a follower keeps its trial's id) */
    char *endpoint;       /* JIZHI_ENDPOINT */
    char *study;          /* JIZHI_STUDY, may be NULL */
    char *token_json;     /* JIZHI_TOKEN as a JSON string literal, quotes included */
    char *token;          /* JIZHI_TOKEN */
    char *ckdir;          /* JIZHI_CHECKPOINT_DIR, or "." */
    int close_timeout_ms; /* JIZHI_CLOSE_TIMEOUT_MS */
    int hello_timeout_ms; /* JIZHI_HELLO_TIMEOUT_MS */
    pid_t pid;            /* the process that opened the trial */

    /* app: the application thread only */
    json_t *params;        /* current parameter values */
    char *params_text;     /* jz_params_json's cached text, or NULL */
    json_t *touched;       /* names set by delivered SET/LOAD: a late hello reply
                              does not overwrite them with older values */
    int ckdir_made;        /* mkdir -p done */
    uint32_t *htab;        /* name hash table: index + 1, 0 empty */
    size_t hcap;           /* slots in htab (power of two) */
    int open_ins;          /* 1: an instruction returned by jz_poll awaits its ack */
    long open_id;          /* its id */
    jz_ins_kind open_kind; /* its kind */
    int open_ckpt_done;    /* jz_checkpoint_done was called since it was polled */
    long held_stop;        /* a polled STOP not acknowledged yet, judged by what the
                              program does next (s_settle); 0 when none */

    /* name table: appended by the app thread before the points that use a
       name are queued; read by the thread after taking them under mu */
    char *names[JZ__NAME_CHUNKS];
    uint32_t nnames;

    /* shared: guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    jz__point *pend; /* queued points, oldest first */
    size_t npend, cappend;
    long unacked_points;  /* queued + in flight, not yet acknowledged */
    long unacked_msgs;    /* acks/checkpoint reports queued or in flight */
    json_t *outbox;       /* array of messages from the app for the thread to send */
    jz__pending_ins *inq; /* instructions for jz_poll: inq[inq_head..ninq) */
    size_t inq_head, ninq, capinq;
    json_t *hello_params; /* params from the hello reply, not yet applied */
    jz__state state;
    int failed;   /* sticky: some reports were refused by the controller */
    int flushing; /* jz_flush is waiting: send without delay */
    int stop;     /* jz_close: the thread must exit */
    long polls;   /* the thread's wake-ups from zmq_poll so far (tests read it) */

    /* thread */
    pthread_t thread;
    int thread_started;
    int wake_fd[2]; /* pipe: app writes, thread reads */
    void *zctx;     /* ZeroMQ context */
};

/* Starts the connection thread. 0 or -1. */
JZ__HIDDEN int jz__conn_start(jz_trial *t);

/* Asks the thread to stop and joins it. */
JZ__HIDDEN void jz__conn_stop(jz_trial *t);

/* Wakes the thread (non-blocking). Call with mu held or not. */
JZ__HIDDEN void jz__wake(jz_trial *t);

/* Frees a pending instruction's JSON values. */
JZ__HIDDEN void jz__pending_ins_fini(jz__pending_ins *p);

/* Decodes an `instruction` push from the controller (docs/PROTOCOL.md)
   into *out, zeroed first. Returns 0 when it is to be delivered (out's
   value and params are new references: free them with
   jz__pending_ins_fini); 1 when it is refused: out->ins.id is set and
   `detail` says why, for an ins_ack with applied false; -1 when it has no
   integer id (it is dropped). Pure: no trial, no socket; any JSON is safe. */
JZ__HIDDEN int jz__parse_instruction(const json_t *m, jz__pending_ins *out, char *detail,
                                     size_t size);

/* Writes `x` as the shortest decimal text that reads back as the same
   double (finite), or "nan"/"inf"/"-inf". Returns the length. */
JZ__HIDDEN int jz__fmt_double(char *buf, size_t size, double x);

#endif
