/*  disp_core.h - the dispatcher object and what its files share (internal
    to dispatcher/, not public).

    disp.c       construction, the trial processes' signals, the loop
    disp_send.c  register, heartbeats, the started/exited reports, and
                 watching the trials' processes (which queues the reports)
    disp_recv.c  the controller's messages, through the schema (common/msg.h)

    One thread runs all of it (disp_run); nothing here locks.
*/
#ifndef JZ_DISP_CORE_H
#define JZ_DISP_CORE_H

#include "disp.h"
#include "disp_int.h"
#include "common/keys.h"

#include <jansson.h>
#include <stdint.h>
#include <zmq.h>

#define TAG "disp"
#define DISP_TICK_MS 50
#define DISP_REG_RING 8
#define DISP_REG_BACKOFF_MAX 60.0  /* s: longest wait between refused registers */
#define DISP_UNANSWERED_REPEAT 6.0 /* the silence warning's period, in unanswered_s */
#define DISP_DONE_RING 256

/* A `started` or `exited` report waiting for its answer. */
typedef struct disp__report {
    struct disp__report *next;
    long req;
    json_t *msg; /* complete message, req included */
    double due;  /* monotonic: when it is sent (again) if still unanswered;
                    -INFINITY: not sent yet */
    int sends;   /* times it went out: each wait doubles (disp__send_reports) */
} disp__report;

struct disp {
    char *endpoint;                    /* controller endpoint */
    char *trial_endpoint;              /* JIZHI_ENDPOINT default for trials */
    char server_key[KEYS_Z85_LEN + 1]; /* the controller's CURVE key, "" if none */
    char trial_key[KEYS_Z85_LEN + 1];  /* JIZHI_SERVER_KEY for trials: a key, "none"
                                          (plain TCP by --insecure) or "" (unset) */
    char *name;
    char *log_dir; /* absolute */
    int slots;
    int *gpus; /* device indices */
    int ngpus;
    double kill_grace_s, heartbeat_s, silence_s, resend_s;
    int kill_on_stop;
    disp__backend *be; /* how trials run: local processes or Slurm jobs */

    void *ctx;
    int own_ctx;
    void *sock; /* DEALER, only while disp_run runs */

    int ready;              /* READY, else REGISTERING */
    double last_reg;        /* when register was last sent */
    double reg_backoff;     /* extra wait after a refused register (doubles, capped) */
    double last_hb;         /* when heartbeat was last sent */
    double last_heard;      /* when the controller last sent anything */
    double unanswered_s;    /* cfg->unanswered_s */
    double asked_since;     /* when registering began without a word from the
                               controller since, 0: not waiting */
    double unanswered_warn; /* when to warn (again) that it does not answer */
    int unanswered_warned;  /* it was warned of (say when it answers) */
    long reg_reqs[DISP_REG_RING]; /* recent register reqs */
    int reg_i;
    long next_req;
    uint64_t rng; /* the report resends' jitter */

    disp__proc **procs; /* running trials */
    size_t nprocs, cap;
    disp__report *reports;        /* unanswered reports, oldest first */
    long done[DISP_DONE_RING][2]; /* (trial, attempt) recently ended */
    int done_i, ndone;

    zmq_pollitem_t *items;
    size_t nitems_cap;
};

/* ---- disp.c --------------------------------------------------------------- */

/* An absolute version of path (relative ones against the working
   directory). Caller frees; NULL when out of memory. */
char *disp__abs(const char *path);

/* Asks trial p to end (SIGTERM, then SIGKILL after kill_grace_s); `how`
   is "killed" or "timeout", `reason` (borrowed, may be NULL) goes into its
   exited report. Nothing when it is already on its way out. */
void disp__terminate(disp_t *d, disp__proc *p, const char *how, const char *reason);

/* ---- disp_send.c ---------------------------------------------------------- */

/* Sends msg (takes ownership) without blocking. 0, or -1 (EAGAIN: no
   connection yet). */
int disp__send(disp_t *d, json_t *msg);
/* Adds the attempt's tag to m when it is known. Returns m. */
json_t *disp__tagged(json_t *m, const char *tag);
void disp__send_register(disp_t *d, double now);
void disp__send_heartbeat(disp_t *d, double now);
/* Sends the reports that are due (all of them when `all`). */
void disp__send_reports(disp_t *d, double now, int all);
/* Queues exited/start_failed for a trial that got no process. */
void disp__report_start_failed(disp_t *d, long trial, long attempt, const char *why);
/* 1 when (trial, attempt) ended here recently. */
int disp__is_done(const disp_t *d, long trial, long attempt);
/* Exec results, exits, timeouts, kill escalation; queues the reports. */
void disp__check_procs(disp_t *d, double now);

/* ---- disp_recv.c ---------------------------------------------------------- */

/* Back to REGISTERING (logged with `why` when it was READY). */
void disp__to_registering(disp_t *d, const char *why);
/* Registering and nothing heard for unanswered_s: a warning naming the
   endpoint, repeated every DISP_UNANSWERED_REPEAT times that. */
void disp__warn_unanswered(disp_t *d, double now);
/* Reads and handles everything there is. -1 on a fatal socket error. */
int disp__drain_socket(disp_t *d);

#endif
