/*  disp.h - the dispatcher: starts trial processes on one machine.

    A dispatcher connects a DEALER socket to the controller, registers its
    resources (CPU slots, and GPUs when nvidia-smi lists them), heartbeats,
    and on `start` forks and execvp's the trial's argv (never a shell) with
    the trial environment, CUDA_VISIBLE_DEVICES, and stdout/stderr sent to
    per-trial log files. It enforces timeout_s (SIGTERM, then SIGKILL after
    a grace period), kills on request, and reports every exit until the
    controller acknowledges it. It has no database. Protocol:
    docs/PROTOCOL.md (dispatcher section).

    The same object runs as the `jizhi dispatcher` daemon or as a thread
    inside `jizhi run`: it installs no signal handler and waits only for
    its own children (never waitpid(-1)), so it can share a process.

    Trust: a trial's argv runs as the dispatcher's own user, whoever
    submitted the study, so dispatchers run unprivileged. Over tcp://
    disp_new refuses a controller whose public key is not known (common/
    keys.h) unless plain TCP was chosen (JIZHI_SERVER_KEY=none, which
    trials then get too), and warns when it runs as root.

    Resources: `slots` trials at once; each also takes `gpus` of the GPU
    indices (cfg->gpus, or what nvidia-smi lists). A start that does not
    fit is answered with exited/start_failed ("no free slot", "no free GPU
    (needs 2, 1 free)", "needs 3 GPUs, this dispatcher has 2").

    A trial: argv is exec'd unchanged with execvp (PATH from the trial's
    environment). It leads its own process group (signals reach its
    children; what is left of the group when it exits is killed), and gets
    PR_SET_PDEATHSIG(SIGTERM) when kill_on_stop is on, so it dies with the
    thread running disp_run. stdin is /dev/null; stdout and stderr go to
    <log_dir>/<study>/trial-<id>.<attempt>.out and .err (mode 0600; the
    directories it creates, checkpoints' too, are 0700; log_dir: the
    start's `log_dir`, else cfg->log_dir; <study> with '/' and control
    bytes made '_'). Its environment: the dispatcher's own, minus the
    variables below; then the start's `env`; then, where `env` did not set
    them, JIZHI_ENDPOINT (cfg->trial_endpoint or cfg->controller),
    JIZHI_CHECKPOINT_DIR (<log_dir>/<study>/checkpoints/trial-<id>,
    created) and CUDA_DEVICE_ORDER=PCI_BUS_ID; and always JIZHI_STUDY,
    JIZHI_TRIAL, JIZHI_ATTEMPT, JIZHI_DISPATCHER (its name) and
    CUDA_VISIBLE_DEVICES ("0,2", or "" for gpus 0). JIZHI_TOKEN and
    JIZHI_PARAMS come only from `env`.

    Reports (each with `req` and `name`, resent with the same req until
    answered, after resend_s to 1.5 resend_s, then each wait doubled up to
    8 resend_s (util_backoff); dropped on an error other than
    unknown_dispatcher/internal/timeout):
      started: trial, attempt, pid, stdout, stderr (log paths), gpus (array)
      exited:  trial, attempt, how (exited, signaled, timeout, killed,
               start_failed), code (exit status, -1 if none; 127 when exec
               failed), signal (0 if none), message (for people, e.g.
               "exit code 3", "execvp foo: No such file or directory",
               "timed out after 600 s; killed by signal 15 (Terminated)",
               "malformed start: field 'argv': ..."), elapsed_s; and pid,
               stdout, stderr when a process was started.
    A start that is malformed but names trial and attempt is answered with
    exited/start_failed; without them it is only logged. A start repeated
    for a (trial, attempt) that runs or recently ended is ignored. `kill`
    without `attempt` kills every attempt of the trial.

    Slurm (backend "slurm", disp_slurm.c): each trial attempt becomes one
    Slurm job instead of a child process; `slots` is the most jobs held at
    once (queued or running; <= 0: 64), a trial with `ranks` R counting R, as the
    controller reserves a slot per rank. The dispatcher writes
    <log_dir>/<study>/trial-<id>.<attempt>.sbatch (an exec of argv, every
    word quoted; for ranks > 1 an exec of `srun --ntasks=R` with argv, so
    srun starts the MPI ranks with the cluster's MpiDefault or
    SLURM_MPI_TYPE, and --ntasks=R on sbatch) and submits it with sbatch in the trial's
   environment (sbatch exports it to the job), with --output/--error on the same log
    paths, --gres=gpu:N for the trial's GPUs (--gpus-per-task=N with
    ranks; JIZHI_RANKS and JIZHI_GPUS_PER_RANK as with mpirun; Slurm sets
    CUDA_VISIBLE_DEVICES), --time from timeout_s plus the kill grace (a
    backstop: the dispatcher's own timeout comes first), --no-requeue, and
    --partition/--account when given. The log and checkpoint directories
    must be on a file system the compute nodes share, and JIZHI_ENDPOINT a
    tcp:// address they can reach. `pid` in reports is the job id. Job
    states come from squeue every poll_s, a job's end from `scontrol show
    job` (or sacct where the cluster keeps accounting); a kill is
    `scancel --signal=TERM --full`, then `scancel` after the grace. A job
    that was preempted, requeued, whose node failed or that someone else
    cancelled ends with how "lost" (the controller retries it as a new
    attempt); one that hit Slurm's own time limit with how "timeout".
    Jobs outlive the dispatcher: kill_on_stop is off by default, and at
    disp_run's start the dispatcher takes back the queued and running jobs
    an earlier run with the same name submitted (found by their comment,
    "jizhi NAME trial T attempt A"), so a restart loses no trial; their
    timeout_s is then left to Slurm's --time.
*/
#ifndef JZ_DISP_H
#define JZ_DISP_H

#include <stdatomic.h>
#include <stddef.h>

typedef struct disp disp_t;

typedef struct {
    const char *controller; /* endpoint to connect to (borrowed) */
    const char *name;       /* dispatcher name; NULL: the host name */
    int slots;              /* concurrent CPU trials; <= 0: number of CPUs */
    const char *gpus;       /* "0,1,3", "none", or NULL to detect with nvidia-smi */
    const char *log_dir;    /* root for per-trial logs; NULL: "./jizhi-logs" */
    double kill_grace_s;    /* SIGTERM -> SIGKILL delay; <= 0: 5 s */
    /* Additions; zero means the default, so `disp_config c = {0}` works. */
    void *zmq_ctx;              /* ZeroMQ context to use (borrowed; must outlive the
                                   dispatcher; needed for inproc://); NULL: its own */
    const char *trial_endpoint; /* JIZHI_ENDPOINT for trials (e.g. ipc:// when the
                                   controller is reached over inproc://); NULL:
                                   `controller`. A start's env may override it. */
    const char *nvidia_smi;     /* command that lists GPUs; NULL: "nvidia-smi" */
    double heartbeat_s;         /* heartbeat period; <= 0: 1 s */
    double silence_s;           /* no reply for this long -> re-register; <= 0: 5 s */
    double resend_s;            /* unanswered register/started/exited resent after
                                   (reports: the first wait of a backoff); <= 0: 2 s */
    double unanswered_s;        /* registering this long without a word from the
                                   controller: a warning, repeated every 6 times
                                   that while it lasts; <= 0: 10 s */
    /* Backend: how trials run. See "Slurm" above. */
    const char *backend;   /* "local" (NULL) or "slurm" */
    const char *partition; /* slurm: sbatch --partition (NULL: the default one) */
    const char *account;   /* slurm: sbatch --account (NULL: the user's default) */
    int max_gpus;          /* slurm: GPUs held at once over all jobs (default 0) */
    double poll_s;         /* slurm: squeue period; <= 0: 1 s */
} disp_config;

/* Checks a --gpus list as disp_new reads cfg->gpus ("0,1,3" or "none"), so
   the command can call a bad one a usage error. 0, or -1 with err. */
int disp_gpus_check(const char *gpus, char *err, size_t errsize);

/* Creates a dispatcher (connects lazily: a controller that is not up yet
   is fine). Borrows cfg's strings only during the call. Returns NULL with
   a message on stderr when the configuration is invalid (a tcp://
   controller without its public key and without JIZHI_SERVER_KEY=none
   included). Caller owns the result and must destroy it. */
disp_t *disp_new(const disp_config *cfg);

/* Runs the event loop until *stop becomes nonzero (an atomic load at least
   every 100 ms; another thread or a signal handler sets it with
   atomic_store: atomic_int is lock-free, so that is async-signal-safe),
   then kills its running trials (SIGTERM, then
   SIGKILL) only if `kill_on_stop` was requested with disp_set_kill_on_stop, else leaves
   them running. Returns 0, or -1 on a fatal socket error. */
int disp_run(disp_t *d, atomic_int *stop);

/* Whether disp_run kills running trials when it stops (default 1). */
void disp_set_kill_on_stop(disp_t *d, int on);

/* NULL-safe; sets *dp to NULL. */
void disp_destroy(disp_t **dp);

#endif
