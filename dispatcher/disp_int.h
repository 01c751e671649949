/*  disp_int.h - internals shared by the dispatcher's files (not public).

    disp.c       the dispatcher object and its event loop (disp_core.h)
    disp_send.c  register, heartbeat, reports kept until acknowledged, and
                 watching the trials' processes
    disp_recv.c  the controller's messages (start, kill, disown, read_log,
                 replies), decoded through the schema (common/msg.h)
    disp_msg.c   validation of the controller's `start` and `kill` messages
    disp_proc.c  one trial process: environment, fork/exec, signals, reaping
    disp_gpu.c   the GPU list: parsing "0,1,3" and asking nvidia-smi
    disp_local.c the local backend: trials as child processes (disp_proc.c)
    disp_mpi.c   ranks under mpirun (trial.launcher "mpirun")
    disp_torch.c ranks started by the dispatcher, torchrun's way ("torch")
    disp_slurm.c the Slurm backend: each trial attempt is a Slurm job

    A backend (disp__backend) is how a trial runs; disp*.c keep everything
    else (the protocol, slots, GPUs, timeouts, reports) the same for all.
*/
#ifndef JZ_DISP_INT_H
#define JZ_DISP_INT_H

#include "common/ident.h"
#include "common/spec.h"

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

/* ---- disp_msg.c --------------------------------------------------------- */

/* A validated `start` message. Every pointer is borrowed from the message
   and valid while it lives. */
typedef struct {
    long trial;          /* >= 0 */
    long attempt;        /* >= 0 */
    const char *study;   /* non-empty */
    const json_t *argv;  /* non-empty array of strings without NUL bytes */
    const json_t *env;   /* object of strings, or NULL */
    double timeout_s;    /* 0: none */
    int gpus;            /* devices wanted per rank, >= 0 */
    int ranks;           /* ranks, >= 1 (absent: 1) */
    int launcher;        /* spec_launcher: how ranks start (absent: mpirun) */
    const char *log_dir; /* root for the logs, or NULL: the dispatcher's */
    const char *cwd;     /* trial.cwd: absolute folder to run in, or NULL */
    const char *venv;    /* trial.venv: absolute, its bin first on PATH, or NULL */
    char tag[IDENT_TAG_LEN + 1]; /* ident_attempt_tag of env's JIZHI_TOKEN, or "" */
} disp__start;

#define DISP_MAX_RANKS 1024

/* Validates a `start`. Returns 0, or -1 with err naming the field and what
   was expected. On failure *have_ids says whether trial and attempt were
   valid (so a start_failed report can still name the trial). */
int disp__parse_start(const json_t *msg, disp__start *out, int *have_ids, char *err,
                      size_t errsize);

/* Validates a `kill`: trial (integer >= 0), attempt (integer >= 0, or
   absent: -1, any attempt), reason (string, optional: NULL). 0 or -1. */
int disp__parse_kill(const json_t *msg, long *trial, long *attempt, const char **reason,
                     char *err, size_t errsize);

/* Replaces what cannot appear in one path component ('/', control bytes,
   a leading '.') with '_'; never empty. Caller owns the result (NULL when
   out of memory). */
char *disp__path_component(const char *s);

/* ---- disp_proc.c -------------------------------------------------------- */

/* One trial process, from fork to reaping. */
typedef struct {
    long trial, attempt;
    pid_t pid;        /* leader of its own process group (pgid == pid) */
    int pidfd;        /* readable when the process exits; -1 if unsupported */
    int exec_fd;      /* read end of the CLOEXEC exec-status pipe; -1 when resolved */
    int exec_errno;   /* errno of a failed execvp, else 0 */
    int running;      /* the backend saw it run (exec succeeded, job RUNNING) */
    int started;      /* `started` was queued */
    double t_start;   /* monotonic start time */
    double deadline;  /* monotonic time of the timeout, 0: none */
    double timeout_s; /* as requested, for messages */
    double kill_at;   /* monotonic time to send SIGKILL, 0: not terminating */
    int killed_hard;  /* SIGKILL sent */
    const char *how;  /* NULL, or "timeout"/"killed" once we decided to end it */
    char *reason;     /* why it was killed (kill's `reason`), or NULL */
    int *gpus;        /* device indices handed to it */
    int ngpus;
    int ranks;                   /* slots it holds: its MPI ranks (1: a plain process) */
    double rank_check_at;        /* ranks > 1: monotonic time of the next look */
    double zombie_since;         /* when an unreaped rank was first seen, 0: none */
    char *argv0;                 /* for messages */
    char *out_path;              /* stdout log */
    char *err_path;              /* stderr log */
    void *job;                   /* the backend's own record (Slurm: the job), or NULL */
    char tag[IDENT_TAG_LEN + 1]; /* its attempt's tag (disp__start), "" unknown */
    int adopted; /* taken back from an earlier run (Slurm), not started by this one */
} disp__proc;

/* What disp__spawn needs besides the start message. */
typedef struct {
    const disp__start *st;
    const char *dir;          /* log directory, created */
    const char *endpoint;     /* JIZHI_ENDPOINT default */
    const char *ckpt_dir;     /* JIZHI_CHECKPOINT_DIR default, or NULL */
    const char *disp_name;    /* JIZHI_DISPATCHER */
    const char *cuda_devices; /* CUDA_VISIBLE_DEVICES ("" for none; NULL: not set,
                                 e.g. Slurm sets it from --gres) */
    int pdeathsig;            /* set PR_SET_PDEATHSIG(SIGTERM) in the child */
    const char *server_key;   /* JIZHI_SERVER_KEY: the controller's key, "none"
                                 (plain TCP by --insecure), "" or NULL: not set */
    double kill_grace_s;      /* a launcher's SIGTERM -> SIGKILL delay for ranks */
    /* Set by disp_torch.c: instead of exec, the child calls launch (after
       the log fds are on 0..2 and the child's setup is done) with argv and
       the exec-status fd; it never returns. NULL: exec argv. */
    void (*launch)(void *arg, char **argv, int status_fd);
    void *launch_arg;
} disp__spawn_args;

/* Builds the trial's environment: the inherited one without the variables
   jizhi sets, then the message's env, then the defaults it did not set,
   then the forced ones (JIZHI_STUDY/TRIAL/ATTEMPT/DISPATCHER,
   CUDA_VISIBLE_DEVICES; with st->venv: VIRTUAL_ENV, its bin first on
   PATH, no PYTHONHOME). NULL-terminated; caller frees with
   disp__strv_free. NULL when out of memory. */
char **disp__build_env(const disp__spawn_args *a);
void disp__strv_free(char **v);

/* Whether the trial of st can start on this machine: st->cwd is a
   folder, st->venv has bin/python (argv[0] is left to exec, whose failure
   names the path tried). 0, or -1 with err naming the path at fault. */
int disp__check_start(const disp__start *st, char *err, size_t errsize);

/* Opens the log files and forks; the child enters st->cwd (when set) and
   execs argv unchanged. Fills p
   (pid, pidfd, exec_fd, paths). Returns 0, or -1 with err when nothing
   was started (p is then left empty). p->gpus is not touched. */
int disp__spawn(const disp__spawn_args *a, disp__proc *p, char *err, size_t errsize);

/* Reads the exec-status pipe if it has something to say: sets
   p->exec_errno, closes exec_fd. Returns 1 when resolved now, 0 otherwise. */
int disp__exec_poll(disp__proc *p);

/* ---- disp_mpi.c ---------------------------------------------------------- */

/* For st->ranks > 1: the launcher's argv (mpirun --oversubscribe -np N
   then st->argv) and st->env plus the launcher's defaults. Caller owns
   both. Returns 0, or -1 with err (no mpirun on PATH, out of memory). */
int disp__mpi_prepare(const disp__start *st, json_t **argv, json_t **env, char *err,
                      size_t errsize);

/* How many direct children of root are zombies (exited, not reaped). */
int disp__mpi_zombie_children(pid_t root);

/* Seconds a launcher may leave a rank unreaped before it is killed. */
#define DISP_MPI_UNREAPED_S 10.0

/* Sends sig to every descendant of root (and the process group of each
   that leads one). Returns how many were signalled. */
int disp__mpi_signal_tree(pid_t root, int sig);

/* Sends sig to the trial's process group (falls back to the pid); for a
   multi-rank trial to the launcher's descendants first. */
void disp__signal(disp__proc *p, int sig);

/* Checks whether the leader exited without blocking. When it has, kills
   what is left of its process group (SIGKILL), reaps it and returns 1
   with *status set; *lost is set when the status could not be had (the
   child was reaped by someone else). Returns 0 while it runs. */
int disp__reap(disp__proc *p, int *status, int *lost);

/* Frees what p owns (fds, strings); does not signal the process. */
void disp__proc_fini(disp__proc *p);

/* ---- disp_torch.c -------------------------------------------------------- */

/* For st->launcher == SPEC_LAUNCH_TORCH: starts the trial as a launcher
   process (forked from the dispatcher, not exec'd: p->pid, its own process
   group) that starts st->ranks copies of argv with torchrun's environment
   (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
   MASTER_PORT a free port, JIZHI_RANK, JIZHI_RANKS, JIZHI_GPUS_PER_RANK,
   OMP_NUM_THREADS=1 unless set, CUDA_VISIBLE_DEVICES: rank r the r-th
   `gpus` of a->cuda_devices), their stdout and stderr to the trial's logs
   in whole lines prefixed "[rankN]: ". A rank that fails ends the others
   (SIGTERM, SIGKILL a little before a->kill_grace_s); the launcher then writes one
   line naming the rank, how it ended and its last stderr line, and ends
   the same way. Signalled itself (stop, kill, timeout), it ends the ranks
   the same way and writes each rank's last stderr line, blaming none.
   Fills p like disp__spawn. 0, or -1 with err when nothing was started. */
int disp__torch_spawn(const disp__spawn_args *a, disp__proc *p, char *err,
                      size_t errsize);

/* The /bin/sh text that, run by each srun task with the trial's argv as
   "$@", sets torchrun's environment from Slurm's (RANK=$SLURM_PROCID, ...;
   MASTER_ADDR and MASTER_PORT come from the batch script,
   disp__torch_slurm_head) and execs the argv. Static storage. */
const char *disp__torch_slurm_task(void);

/* The lines of a batch script before its srun: MASTER_ADDR (the job's
   first node), MASTER_PORT (from the job id), WORLD_SIZE, exported.
   Static storage. */
const char *disp__torch_slurm_head(void);

/* ---- backends (disp_local.c, disp_slurm.c) ------------------------------ */

/* How a trial ended, as its backend saw it. */
typedef struct {
    const char *how; /* NULL: from code/sig; "lost" (not the trial's fault:
                        preempted, node failure, cancelled outside jizhi) or
                        "timeout" (the backend's own time limit) */
    int code;        /* exit status, -1 when none */
    int sig;         /* terminating signal, 0 when none */
    int unknown;     /* the exit status could not be had */
    char what[256];  /* for people: "exit code 3", "job 12: NODE_FAIL" */
} disp__end;

typedef struct disp__backend disp__backend;

/* The operations every backend implements. All run on the dispatcher's
   thread; none blocks longer than its commands' time limits. */
typedef struct {
    const char *name;    /* "local", "slurm" */
    const char *id_word; /* what p->pid is: "pid", "job" (for messages) */
    /* Starts the trial: fills p (pid, paths, argv0, job) like disp__spawn.
       0, or -1 with err when nothing was started (p is left empty). */
    int (*start)(disp__backend *b, const disp__spawn_args *a, disp__proc *p, char *err,
                 size_t errsize);
    /* Once per loop turn before poll: refreshes what the backend knows about
       all its trials (Slurm: one squeue at most every poll_s). */
    void (*refresh)(disp__backend *b, disp__proc **procs, size_t n, double now);
    /* Sets p->running once the trial is seen running; returns 1 with *end
       filled when it has ended (then fini follows), 0 while it lives. */
    int (*poll)(disp__backend *b, disp__proc *p, disp__end *end);
    /* Sends sig (SIGTERM, SIGKILL; SIGCONT where it means something). */
    void (*signal)(disp__backend *b, disp__proc *p, int sig);
    /* At disp_run's start: the trials an earlier run of this dispatcher
       (same name) left behind that still run, as new procs (trial,
       attempt, pid, paths, job; `started` not yet queued). Returns how
       many, with *out a new array the caller owns with its procs; 0 when
       none or when the backend cannot take trials back (local). */
    size_t (*adopt)(disp__backend *b, disp__proc ***out);
    /* Frees what p owns, p->job included; does not stop the trial. */
    void (*fini)(disp__backend *b, disp__proc *p);
    /* NULL-safe. */
    void (*destroy)(disp__backend *b);
} disp__backend_ops;

struct disp__backend {
    const disp__backend_ops *ops;
};

/* The fork/exec backend. NULL when out of memory. Caller owns the result
   and must destroy it with ops->destroy. */
disp__backend *disp__local_new(void);

/* The Slurm backend's settings (strings borrowed during the call). */
typedef struct {
    const char *partition; /* sbatch --partition, or NULL: the cluster's default */
    const char *account;   /* sbatch --account, or NULL */
    double poll_s;         /* squeue period; <= 0: 1 s */
    double kill_grace_s;   /* our SIGTERM -> SIGKILL delay (added to --time) */
    const char *name;      /* the dispatcher's name (job comments) */
} disp__slurm_config;

/* The Slurm backend: checks that sbatch runs and whether sacct works (it
   does not without slurmdbd; then job states come from squeue and
   `scontrol show job`, which it logs). NULL with a message on stderr when
   Slurm's commands are missing. Caller owns the result and must destroy it
   with ops->destroy. */
disp__backend *disp__slurm_new(const disp__slurm_config *cfg);

/* ---- disp_gpu.c --------------------------------------------------------- */

/* Parses "0,1,3" (or "none"/"": no GPUs) into a new array. 0 or -1 with
   err. Caller frees *out. */
int disp__gpu_parse(const char *s, int **out, int *n, char *err, size_t errsize);

/* Runs `cmd --query-gpu=index --format=csv,noheader` (directly, no shell;
   at most 10 s) and parses its indices. Returns the number of GPUs found
   (0 when the command is missing or fails), -1 when out of memory. Caller
   frees *out. Waits only for its own child. */
int disp__gpu_detect(const char *cmd, int **out);

#endif
