/*  cmd_run.c - `jizhi run` (a controller and a local dispatcher in one
    process, each in its own thread, talking over ipc:// in a private run
    directory), and the `jizhi controller` / `jizhi dispatcher` daemons.
*/
#include "cli.h"

#include "../common/client.h"
#include "../common/log.h"
#include "../common/spec.h"
#include "../common/util.h"
#include "../common/wire.h"
#include "../controller/ctl.h"
#include "../dispatcher/disp.h"
#include "../schedulers/sched.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Shared by the main thread, the controller and dispatcher threads and the
   signal handlers: C11 atomics (lock-free here, so a handler may touch
   them). ctl_run and disp_run watch their stop flag. */
static atomic_int s_stop_ctl, s_stop_disp, s_interrupted;

static void s_on_signal(int sig)
{
    /* the first asks for a clean stop, a second quits at once */
    atomic_fetch_add(&s_interrupted, 1);
}

static void s_signals(void)
{
    util_on_stop_signals(s_on_signal, 0);
    signal(SIGPIPE, SIG_IGN);
}

/* Starts a worker thread with SIGINT/SIGTERM blocked, so that the main
   thread is the one that sees them. */
static void s_spawn(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static atomic_int s_ctl_failed; /* the controller stopped by itself */

static void *s_ctl_thread(void *arg)
{
    if (ctl_run(arg, &s_stop_ctl) != 0) {
        atomic_store(&s_ctl_failed,
                     1); /* e.g. the database could not be written: wake main */
        kill(getpid(), SIGTERM);
    }
    return NULL;
}

static void *s_disp_thread(void *arg)
{
    disp_run(arg, &s_stop_disp);
    return NULL;
}

static int s_write_endpoint(const char *db, const char *endpoint)
{
    char path[1100], tmp[1200];
    cli_endpoint_file(db, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600); /* the owner's */
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f && fd >= 0)
        close(fd);
    if (!f || fprintf(f, "%s\n", endpoint) < 0 || fclose(f) != 0 ||
        rename(tmp, path) != 0) {
        cli_error("cannot write %s", path);
        return -1;
    }
    return 0;
}

static void s_remove_endpoint(const char *db, const char *endpoint)
{
    char path[1100], buf[512];
    cli_endpoint_file(db, path, sizeof path);
    const char *cur = cli_controller(NULL, db, buf, sizeof buf);
    if (cur && !strcmp(cur, endpoint))
        unlink(path);
}

/* Refuses to start a second controller on one database. */
static int s_check_no_controller(const char *db)
{
    char buf[512];
    char path[1100];
    cli_endpoint_file(db, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char *ok = fgets(buf, sizeof buf, f);
    fclose(f);
    if (!ok)
        return 0;
    buf[strcspn(buf, "\r\n")] = 0;
    if (cli_ping(buf, 500)) {
        cli_error("a controller already serves %s at %s; use `jizhi study submit` with "
                  "it, or stop it",
                  db, buf);
        return -1;
    }
    return 0;
}

/* A study whose trials have `ranks` > 1: refuses without mpirun on PATH
   or with --slots below ranks; without --slots, at least ranks slots (the
   ranks oversubscribe the cores). 0 or -1 (message printed). */
static int s_ranks_check(long ranks, int *slots)
{
    const char *path = getenv("PATH");
    char cand[4096];
    int found = 0;
    for (const char *p = path ? path : ""; *p && !found;) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        snprintf(cand, sizeof cand, "%.*s/mpirun", (int)n, p);
        found = n > 0 && access(cand, X_OK) == 0;
        p = e ? e + 1 : p + n;
    }
    if (!found) {
        cli_error("trial.ranks = %ld needs MPI: mpirun is not on PATH (install "
                  "openmpi-bin)",
                  ranks);
        return -1;
    }
    if (*slots > 0 && *slots < ranks) {
        cli_error("--slots %d is fewer than trial.ranks = %ld (a slot per rank)", *slots,
                  ranks);
        return -1;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (*slots == 0 && cores < ranks)
        *slots = (int)ranks;
    return 0;
}

/* A PBT study: its population (budget.parallel trials, at most
   budget.trials) must run at once, or its members run as generations that
   never meet. Refuses --slots below the population; without --slots, gives
   it a slot per member (they oversubscribe the cores). 0 or -1 (message
   printed). */
static int s_pbt_check(const spec_t *spec, int *slots)
{
    long pop = spec->parallel < spec->trials ? spec->parallel : spec->trials;
    if (*slots > 0 && *slots < pop) {
        cli_error("--slots %d is fewer than the PBT population of %ld (budget.parallel): "
                  "its members would run one after another and never exploit each "
                  "other; give --slots %ld or a smaller budget.parallel",
                  *slots, pop, pop);
        return -1;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (*slots == 0 && cores < pop) {
        fprintf(
            stderr,
            "jizhi: the PBT population of %ld runs at once on %ld slots (more than the "
            "%ld cores; --slots sets them)\n",
            pop, pop, cores);
        *slots = (int)pop;
    }
    return 0;
}

static int s_parse_slots(const char *text, int *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (!*text || *end || v < 1 || v > 4096) {
        cli_error("--slots: expected an integer from 1 to 4096, got \"%s\"", text);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* --log FILE of the controller, checked before the database is opened and
   the file made: the file can be written, or its folder can. 0 or -1
   (message printed, as s_log_target's). */
static int s_log_check(const char *target)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", target);
    if (strcmp(target, "syslog") && access(target, W_OK) != 0 &&
        (errno != ENOENT || access(dirname(tmp), W_OK) != 0)) {
        cli_error("--log: cannot open %s for appending", target);
        return -1;
    }
    return 0;
}

/* What `jizhi run` or `jizhi controller` made before it could still fail
   (a port in use, a log folder it cannot make, a spec its controller
   refuses): s_unmake removes it again, so that a command that fails
   changes nothing. */
typedef struct {
    const char *db;     /* the database it created, else NULL */
    struct stat db_st;  /* its device and inode, as created */
    const char *logdir; /* the log folder of run, else NULL */
    char logtop[1024];  /* the top-most folder of logdir it made, else "" */
    char logfile[1100]; /* the log file it created, else "" */
    struct stat log_st; /* its device and inode, as created */
} s_made;

/* Creates the empty file `path` (mode as open(2)'s) when nothing is there,
   not even a dangling symlink (O_EXCL), and says in st what it made: 1
   when it made it, else 0 (something was there, or it cannot be made: the
   caller's own open then says why). What it made is the command's own: a
   file another process creates at the same time is not. */
static int s_create(const char *path, mode_t mode, struct stat *st)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return 0;
    int made = fstat(fd, st) == 0;
    close(fd);
    return made;
}

/* 1 when path is still the regular file that s_create made (st). */
static int s_still_made(const char *path, const struct stat *st)
{
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_dev == st->st_dev &&
           sb.st_ino == st->st_ino;
}

/* util_mkdirs(dir), saying in m which folders it made: logdir and, in
   logtop, the top-most one ("" when dir was there). */
static int s_mkdirs(const char *dir, s_made *m)
{
    char p[sizeof m->logtop];
    snprintf(p, sizeof p, "%s", dir);
    struct stat sb;
    while (p[0] && lstat(p, &sb) != 0 && errno == ENOENT) {
        snprintf(m->logtop, sizeof m->logtop, "%s", p);
        char *slash = strrchr(p, '/');
        if (!slash || slash == p)
            break;
        *slash = 0;
    }
    m->logdir = dir;
    return util_mkdirs(dir, 0700);
}

/* Opens log file `target` (log_set_target), saying in m when it made it
   (mode 0666 less the umask, as fopen's). */
static int s_log_open(const char *target, s_made *m)
{
    if (strcmp(target, "syslog") && s_create(target, 0666, &m->log_st))
        snprintf(m->logfile, sizeof m->logfile, "%s", target);
    return log_set_target(target);
}

/* --log FILE|syslog of the daemons (m: NULL, or where to say that it made
   the file). */
static int s_log_target(const char *target, s_made *m)
{
    if ((m ? s_log_open(target, m) : log_set_target(target)) != 0) {
        cli_error("--log: cannot open %s for appending", target);
        return -1;
    }
    return 0;
}

/* Removes what m says was made: the log file, the log folders (from
   logdir up to logtop; only while empty), and the database with its
   journal files. A file is removed only while it is still the one the
   command made (the same inode): never a file that replaced it, nor what
   a symlink given as --db or --log points to. */
static void s_unmake(const s_made *m)
{
    if (m->logfile[0] && s_still_made(m->logfile, &m->log_st))
        unlink(m->logfile);
    char p[sizeof m->logtop];
    snprintf(p, sizeof p, "%s", m->logtop[0] ? m->logdir : "");
    while (p[0]) {
        rmdir(p);
        char *slash = strrchr(p, '/');
        if (!strcmp(p, m->logtop) || !slash || slash == p)
            break;
        *slash = 0;
    }
    static const char *const ext[] = {"", "-wal", "-shm", "-journal"};
    int db = m->db && s_still_made(m->db, &m->db_st);
    for (size_t i = 0; db && i < sizeof ext / sizeof ext[0]; i++) {
        snprintf(p, sizeof p, "%s%s", m->db, ext[i]);
        unlink(p);
    }
}

/* Opens the database that run and controller serve (a new one is created,
   and said so in m) and closes it again: a file that is no jizhi database,
   or a folder that does not exist (neither command creates one), is
   refused before any log or run directory exists. 0 or -1 (message
   printed). */
static int s_db_check(const char *db, s_made *m)
{
    char tmp[1024], err[1600];
    snprintf(tmp, sizeof tmp, "%s", db);
    const char *dir = dirname(tmp);
    struct stat sb;
    int e = stat(dir, &sb) != 0 ? errno : S_ISDIR(sb.st_mode) ? 0 : ENOTDIR;
    if (e) {
        cli_error("cannot create the database %s: its folder %s %s", db, dir,
                  e == ENOENT ? "does not exist (create it first, or give another --db)"
                              : strerror(e));
        return -1;
    }
    /* made here, with store_open's mode: store_open takes the empty file
       as a new database */
    if (s_create(db, 0600, &m->db_st))
        m->db = db;
    store_t *s = store_open(db, 0, err, sizeof err);
    if (!s) {
        cli_error("%s", err);
        return -1;
    }
    store_close(&s);
    return 0;
}

/* ---- progress ---- */

static void s_progress(const json_t *st, int tty, long *last_done)
{
    long done = (long)json_integer_value(json_object_get(st, "done"));
    long total = (long)json_integer_value(json_object_get(st, "total"));
    long running = (long)json_integer_value(json_object_get(st, "running"));
    long failed = (long)json_integer_value(json_object_get(st, "failed"));
    double elapsed = json_real_value(json_object_get(st, "elapsed_s"));
    json_t *best = json_object_get(st, "best");
    char el[32], bv[64] = "-";
    cli_format_elapsed(elapsed, el, sizeof el);
    if (json_is_object(best)) {
        double v;
        wire_to_double(json_object_get(best, "value"), &v);
        snprintf(bv, sizeof bv, "%.6g (trial %" JSON_INTEGER_FORMAT ")", v,
                 json_integer_value(json_object_get(best, "trial")));
    }
    long pruned = (long)json_integer_value(json_object_get(st, "pruned"));
    char line[400], pr[48] = "";
    if (pruned > 0) /* early stopping's count */
        snprintf(pr, sizeof pr, " (%ld pruned)", pruned);
    snprintf(line, sizeof line,
             "[%s] %ld/%ld done%s, %ld running, %ld failed, best %s=%s, %s",
             json_string_value(json_object_get(st, "study")), done, total, pr, running,
             failed, json_string_value(json_object_get(st, "metric")), bv, el);
    if (tty) {
        fprintf(stderr, "\r\033[K%s", line);
        fflush(stderr);
    } else if (done != *last_done) {
        fprintf(stderr, "%s\n", line);
    }
    *last_done = done;
}

/* Prints why trials failed: each distinct reason once, with how many
   trials and the first of them, so a broken command is seen at once. */
static void s_print_failures(const store_trial *rows, long n)
{
    enum { MAX_SHOWN = 5 };
    long shown = 0;
    for (long i = 0; i < n && shown < MAX_SHOWN; i++) {
        if (rows[i].state != TRIAL_FAILED)
            continue;
        int seen = 0;
        for (long k = 0; k < i && !seen; k++)
            seen =
                rows[k].state == TRIAL_FAILED && !strcmp(rows[k].reason, rows[i].reason);
        if (seen)
            continue;
        long count = 0;
        for (long k = i; k < n; k++)
            count +=
                rows[k].state == TRIAL_FAILED && !strcmp(rows[k].reason, rows[i].reason);
        printf("  failed: %s (%ld trial%s, e.g. trial %ld; jizhi trial logs %ld)\n",
               rows[i].reason[0] ? rows[i].reason : "no reason recorded", count,
               count == 1 ? "" : "s", rows[i].id, rows[i].id);
        shown++;
    }
}

/* Asks the controller at `ep` to stop study `name` (stop = 1) and waits,
   at most limit_s or until a second Ctrl-C, until no trial of it is active,
   so that the store says what happened before this process ends. */
static void s_stop_and_drain(const char *ep, const char *name, int stop, double limit_s)
{
    if (stop) {
        json_t *r = cli_request(
            ep, json_pack("{s:s, s:s}", "type", "study_stop", "study", name), 5000);
        json_decref(r);
    }
    double end = util_now() + limit_s;
    while (s_interrupted < 2 && util_now() < end) {
        json_t *st = cli_request(
            ep, json_pack("{s:s, s:s}", "type", "status", "study", name), 5000);
        long running = st ? (long)json_integer_value(json_object_get(st, "running")) : 0;
        json_decref(st);
        if (running == 0)
            return;
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Other studies submitted to this run's controller: stopped before it ends,
   so none stays "running" without a controller. */
static void s_stop_others(const char *ep, const char *db, const char *mine)
{
    char err[256];
    store_t *s = store_open(db, 1, err, sizeof err);
    json_t *list = s ? store_study_list(s) : NULL;
    store_close(&s);
    size_t i;
    json_t *st;
    json_array_foreach(list, i, st)
    {
        const char *name = json_string_value(json_object_get(st, "name"));
        const char *state = json_string_value(json_object_get(st, "state"));
        if (!name || !state || !strcmp(name, mine) || strcmp(state, "running"))
            continue;
        fprintf(stderr,
                "stopping study %s, submitted to this run: `jizhi run` on its spec (or "
                "`jizhi controller`) with --db %s continues it\n",
                name, db);
        s_stop_and_drain(ep, name, 1, 60);
    }
    json_decref(list);
}

/* 1 when the queue of the controller at `ep` says study `name` waits
   because no dispatcher of it can ever run one of its trials (too few GPUs
   or slots), with the queue's reason in why. */
static int s_unfit(const char *ep, const char *name, char *why, size_t size)
{
    json_t *q = cli_request(ep, json_pack("{s:s}", "type", "queue"), 5000);
    size_t i;
    json_t *w;
    int unfit = 0;
    json_array_foreach(json_object_get(q, "waiting"), i, w)
    {
        const char *study = json_string_value(json_object_get(w, "study"));
        const char *reason = json_string_value(json_object_get(w, "reason"));
        if (study && reason && !strcmp(study, name) &&
            json_is_true(json_object_get(w, "unfit"))) {
            unfit = 1;
            snprintf(why, size, "%s", reason);
        }
    }
    json_decref(q);
    return unfit;
}

/* ---- the run directory: /tmp/jizhi-run-XXXXXX holds the controller's
   socket and a `pid` file naming the jizhi run that owns it ---- */

static int s_write_pid(const char *dir)
{
    char path[128];
    snprintf(path, sizeof path, "%s/pid", dir);
    FILE *f = fopen(path, "we");
    if (!f)
        return -1;
    fprintf(f, "%ld\n", (long)getpid());
    return fclose(f) == 0 ? 0 : -1;
}

static void s_remove_rundir(const char *dir)
{
    char path[160];
    snprintf(path, sizeof path, "%s/pid", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/ctl.sock", dir);
    unlink(path);
    rmdir(dir);
}

/* Removes the run directories of earlier runs of this user that were
   killed (kill -9 leaves them): those whose pid file names a process that
   no longer exists. */
static void s_sweep_rundirs(void)
{
    DIR *d = opendir("/tmp");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "jizhi-run-", 10) || strlen(e->d_name) != 16)
            continue;
        char dir[64], path[96];
        snprintf(dir, sizeof dir, "/tmp/%s", e->d_name);
        struct stat sb;
        if (lstat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || sb.st_uid != getuid())
            continue;
        snprintf(path, sizeof path, "%s/pid", dir);
        FILE *f = fopen(path, "re");
        long pid = 0;
        if (!f)
            continue; /* not ours to judge */
        if (fscanf(f, "%ld", &pid) != 1)
            pid = 0;
        fclose(f);
        if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            s_remove_rundir(dir);
    }
    closedir(d);
}

/* Prints the best trial of a study from the database. */
static int s_print_best(const char *db, const char *name)
{
    store_t *s = cli_open_db(db);
    if (!s)
        return CLI_FAIL;
    store_study st;
    int found = store_study_get(s, name, &st);
    if (found != 1) {
        if (found < 0)
            cli_error("cannot read study %s: %s", name, store_errmsg(s));
        store_close(&s);
        return CLI_FAIL;
    }
    const char *metric =
        json_string_value(json_object_get(spec_json_objective(st.spec), "metric"));
    spec_error serr;
    spec_t *spec = spec_parse(st.spec, 0, &serr); /* for its constraints */
    store_trial *rows;
    long n = store_trials_load(s, st.id, &rows);
    if (n < 0) { /* e.g. a state text that names no state */
        cli_error("cannot read the trials of %s: %s", name, store_errmsg(s));
        spec_destroy(&spec);
        store_study_fini(&st);
        store_close(&s);
        return CLI_FAIL;
    }
    long completed = 0, failed = 0, stopped = 0, pruned = 0, infeasible = 0,
         nonfinite = 0, silent = 0;
    for (long i = 0; i < n; i++) {
        if (rows[i].state == TRIAL_COMPLETED) {
            completed++;
            silent += wire_is_none(rows[i].value);
            nonfinite += !wire_is_none(rows[i].value) && !isfinite(rows[i].value);
            if (spec && spec->nconstraints) { /* best means best feasible */
                json_t *m = store_metrics_last(s, rows[i].id);
                infeasible += !m || spec_violation(spec, m) != 0;
                json_decref(m);
            }
        }
        failed += rows[i].state == TRIAL_FAILED;
        stopped += rows[i].state == TRIAL_STOPPED;
        pruned += rows[i].state == TRIAL_PRUNED;
    }
    /* the best by the one definition (store_study_best), as study show */
    json_t *answer = json_object();
    store_study_best(s, &st, answer);
    const json_t *bj = json_object_get(answer, "best"),
                 *front = json_object_get(answer, "pareto");
    long best = -1;
    for (long i = 0; json_is_object(bj) && i < n; i++)
        if (rows[i].id == json_integer_value(json_object_get(bj, "trial")))
            best = i;
    printf("study %s: %s, %ld trials (%ld completed, %ld pruned, %ld failed, %ld "
           "stopped)\n",
           name, store_study_state_name(st.state), n, completed, pruned, failed, stopped);
    if (spec && spec->nconstraints)
        printf("%ld of the completed trials broke a constraint; the best is the best "
               "feasible one\n",
               infeasible);
    spec_destroy(&spec);
    s_print_failures(rows, n);
    json_t *events = store_events_list(s, st.id);
    cli_print_warnings(events);
    json_decref(events);
    int rc = CLI_OK;
    if (json_array_size(front)) { /* several objectives: the Pareto set */
        printf("Pareto set (%zu trials):\n", json_array_size(front));
        size_t k;
        const json_t *p;
        json_array_foreach(front, k, p)
        {
            char *vals = text_json_dumps(json_object_get(p, "values"), JSON_COMPACT);
            char *params = text_json_dumps(json_object_get(p, "params"),
                                           JSON_COMPACT | JSON_SORT_KEYS);
            printf("  trial %" JSON_INTEGER_FORMAT " %s params %s\n",
                   json_integer_value(json_object_get(p, "trial")), vals ? vals : "",
                   params ? params : "");
            free(vals);
            free(params);
        }
    } else if (best >= 0) {
        char *params = text_json_dumps(rows[best].params, JSON_COMPACT | JSON_SORT_KEYS);
        printf("best trial %ld: %s=%.6g\n  params %s\n", rows[best].id, metric,
               rows[best].value, params);
        json_t *m = store_metrics_last(s, rows[best].id);
        json_t *ta = json_object_get(m, "test_acc");
        if (json_is_number(ta))
            printf("  test_acc %.4f\n", json_number_value(ta));
        json_decref(m);
        free(params);
    } else {
        if (!completed)
            printf("no trial completed\n");
        else if (nonfinite + silent ==
                 completed) /* nothing to rank: say what they sent */
            printf("no completed trial has a finite %s: %ld reported nan or inf, %ld "
                   "reported none\n",
                   metric, nonfinite, silent);
        else
            printf("no completed trial is feasible\n");
        rc = CLI_FAIL;
    }
    json_decref(answer);
    store_trials_free(rows, n < 0 ? 0 : n);
    store_study_fini(&st);
    store_close(&s);
    return rc;
}

static const char s_run_usage[] =
    "usage: jizhi run SPEC.json [--db FILE] [--slots N] [--log-dir DIR] [--http "
    "HOST:PORT]\n"
    "Runs a study to the end with a controller and a local dispatcher in this\n"
    "process, shows progress, and prints the best trial. Run it again on the\n"
    "same database to continue an unfinished study. Their log goes to\n"
    "LOG-DIR/jizhi-run.log (LOG-DIR: --log-dir, else jizhi-logs beside the\n"
    "database); JIZHI_LOG=LEVEL keeps it on stderr instead.\n";

int cmd_run(int argc, char **argv)
{
    const char *logdir = NULL, *http = NULL, *slots_text = NULL;
    const cli_opt_extra extra[] = {{"slots", &slots_text, NULL},
                                   {"log-dir", &logdir, NULL},
                                   {"http", &http, NULL},
                                   {NULL}};
    cli_opts o;
    int prc = cli_opts_parse_ext(argc, argv, CLI_OPT_DB, extra, s_run_usage, &o);
    if (prc)
        return prc < 0 ? CLI_OK : prc;
    int slots = 0;
    if ((slots_text && s_parse_slots(slots_text, &slots) != 0) ||
        cli_http_check(http) != 0)
        return CLI_USAGE;
    const char *dbflag = o.db; /* positional arguments: argv[optind..] */
    if (optind != argc - 1) {
        cli_error("run: expected one SPEC.json");
        fputs(s_run_usage, stderr);
        return CLI_USAGE;
    }
    const char *db = cli_db_path(dbflag);
    char err[512];
    spec_t *spec = cli_spec_load(argv[optind], err, sizeof err);
    if (!spec) {
        cli_error("%s: %s", argv[optind], err);
        return CLI_FAIL;
    }
    if (cli_ask_only_refused(spec, argv[optind])) { /* no trial would ever start */
        spec_destroy(&spec);
        return CLI_FAIL;
    }
    if (spec->ranks > 1) { /* ranks need MPI and a slot each */
        if (s_ranks_check(spec->ranks, &slots) != 0) {
            spec_destroy(&spec);
            return CLI_FAIL;
        }
    }
    if (strcmp(spec->sched_type, "pbt") == 0 && s_pbt_check(spec, &slots) != 0) {
        spec_destroy(&spec);
        return CLI_FAIL;
    }
    json_t *spec_json = json_incref(spec->json);
    char name[128];
    snprintf(name, sizeof name, "%s", spec->name);
    spec_destroy(&spec);
    /* every check, then the database, and only then the log folder; what
       it made is removed when it fails later: a run refused changes nothing */
    s_made made = {0};
    char rundir[] = "/tmp/jizhi-run-XXXXXX";
    int have_rundir = 0;
    ctl_t *ctl = NULL;
    disp_t *disp = NULL;
    web_t *web = NULL;
    if (s_check_no_controller(db) != 0 || s_db_check(db, &made) != 0)
        goto fail;

    s_sweep_rundirs();
    have_rundir = mkdtemp(rundir) != NULL;
    if (!have_rundir || s_write_pid(rundir) != 0) {
        cli_error("cannot create a run directory in /tmp");
        goto fail;
    }
    char bind[128], logroot[1024];
    snprintf(bind, sizeof bind, "ipc://%s/ctl.sock", rundir);
    if (!logdir) {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", db);
        snprintf(logroot, sizeof logroot, "%s/jizhi-logs", dirname(tmp));
        logdir = logroot;
    }
    if (s_mkdirs(logdir, &made) != 0) {
        cli_error("cannot make the log folder %s: %s", logdir, strerror(errno));
        goto fail;
    }
    /* the progress line is the output: the daemons' log goes to a file
       (JIZHI_LOG keeps it on stderr at that level) */
    char logfile[1100];
    if (!getenv("JIZHI_LOG")) {
        snprintf(logfile, sizeof logfile, "%s/jizhi-run.log", logdir);
        if (s_log_open(logfile, &made) != 0) {
            cli_error("cannot write the run's log %s: %s", logfile, strerror(errno));
            goto fail;
        }
        fprintf(stderr, "jizhi: the controller's and dispatcher's log: %s\n", logfile);
    }
    ctl_config cc = {.db_path = db, .bind = bind};
    ctl = ctl_new(&cc, err, sizeof err);
    if (!ctl) {
        cli_error("%s", err);
        goto fail;
    }
    disp_config dc = {.controller = ctl_endpoint(ctl),
                      .name = "local",
                      .slots = slots,
                      .log_dir = logdir};
    disp = disp_new(&dc);
    if (!disp)
        goto fail;
    web = http ? cli_web_start(http, db, ctl_endpoint(ctl)) : NULL;
    if (http && !web)
        goto fail;
    s_signals();
    pthread_t tc, td;
    s_spawn(&tc, s_ctl_thread, ctl);
    s_spawn(&td, s_disp_thread, disp);
    s_write_endpoint(db, ctl_endpoint(ctl));

    int rc = CLI_FAIL;
    char cerr[1200];
    json_t *r = client_call(ctl_endpoint(ctl),
                            json_pack("{s:s, s:O}", "type", "submit", "spec", spec_json),
                            10000, cerr, sizeof cerr);
    /* only a refusal says that nothing was written: with no answer, others
       may have written into the database through the endpoint published */
    int refused = r && strcmp(wire_type(r), "ok") != 0;
    if (!r || refused) {
        const char *text = r ? json_string_value(json_object_get(r, "message")) : cerr;
        cli_error("%s", text ? text : "the controller refused the request");
        json_decref(r);
        r = NULL;
    }
    int finished = 0, unfit = 0, was_finished = 0;
    char unfit_why[256];
    if (r) {
        /* finished before this run: not loaded, nothing of it to drain */
        finished = was_finished = json_is_true(json_object_get(r, "finished"));
        if (json_is_true(json_object_get(r, "resumed")))
            fprintf(stderr, "continuing study %s from %s\n", name, db);
        else if (finished)
            fprintf(stderr, "study %s already finished in %s\n", name, db);
        json_decref(r);
        int tty = isatty(2);
        long last_done = -1;
        while (!finished && !s_interrupted) {
            json_t *st = cli_request(
                ctl_endpoint(ctl),
                json_pack("{s:s, s:s}", "type", "status", "study", name), 5000);
            if (!st)
                break;
            s_progress(st, tty, &last_done);
            const char *state = json_string_value(json_object_get(st, "state"));
            finished = strcmp(state, "running") != 0;
            long running = (long)json_integer_value(json_object_get(st, "running"));
            json_decref(st);
            if (!finished && running == 0 &&
                s_unfit(ctl_endpoint(ctl), name, unfit_why, sizeof unfit_why)) {
                unfit = 1;
                break;
            }
            if (!finished) {
                struct timespec ts = {0, 250 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        if (tty)
            fputc('\n', stderr);
        if (unfit) { /* stopped: `jizhi run` on a machine that can continues it */
            cli_error("study %s cannot start: %s; it is stopped (`jizhi run` where "
                      "nvidia-smi lists enough GPUs continues it)",
                      name, unfit_why);
            s_stop_and_drain(ctl_endpoint(ctl), name, 1, 60);
        } else if (s_interrupted == 1) {
            fprintf(stderr,
                    "stopping the trials of study %s (Ctrl-C again to quit at once)\n",
                    name);
            s_stop_and_drain(ctl_endpoint(ctl), name, 1, 60);
        } else if (!s_interrupted && !was_finished) {
            /* stopped from outside: let its trials end */
            s_stop_and_drain(ctl_endpoint(ctl), name, 0, 60);
        }
        if (s_interrupted < 2)
            s_stop_others(ctl_endpoint(ctl), db, name);
    }
    /* The controller stops first: trials the dispatcher then kills (after
       Ctrl-C) stay "running" in the store, and the next `jizhi run` finds
       them lost and runs them again instead of counting them as failed. */
    web_destroy(&web);
    atomic_store(&s_stop_ctl, 1);
    pthread_join(tc, NULL);
    atomic_store(&s_stop_disp, 1);
    pthread_join(td, NULL);
    s_remove_endpoint(db, ctl_endpoint(ctl));
    disp_destroy(&disp);
    ctl_destroy(&ctl);
    s_remove_rundir(rundir);
    json_decref(spec_json);
    if (refused) /* (a warm_start.from of no study here): as `fail`; kept on no answer */
        s_unmake(&made);
    if (s_ctl_failed) {
        fprintf(stderr, "the controller stopped (see above); run the same command again "
                        "to continue the study\n");
        return CLI_FAIL;
    }
    if (s_interrupted) {
        fprintf(stderr,
                "interrupted; run the same command again to continue the study\n");
        return CLI_FAIL;
    }
    if (finished && !unfit)
        rc = s_print_best(db, name);
    return rc;

fail:
    disp_destroy(&disp);
    ctl_destroy(&ctl);
    if (have_rundir)
        s_remove_rundir(rundir);
    s_unmake(&made);
    json_decref(spec_json);
    return CLI_FAIL;
}

static const char s_ctl_usage[] =
    "usage: jizhi controller [--db FILE] [--bind ENDPOINT] [--lost-timeout SECONDS]\n"
    "                        [--log FILE|syslog] [--http HOST:PORT] [--alerts FILE]\n"
    "                        [--key FILE] [--authorized-keys FILE] [--insecure]\n"
    "Runs the controller daemon until SIGINT/SIGTERM. By default it listens on an\n"
    "ipc:// socket in a private directory (0700), where local users are known by\n"
    "their Unix uid. A tcp:// bind uses CURVE: the controller's key pair (--key,\n"
    "default KEYDIR/controller.key; make it with `jizhi keygen --name controller`)\n"
    "and the clients' keys in --authorized-keys (default KEYDIR/authorized_keys;\n"
    "reread on SIGHUP). --insecure allows plain TCP, trusted networks only.\n"
    "KEYDIR is $JIZHI_HOME, else ~/.config/jizhi.\n"
    "--alerts FILE: controller-wide alert rules, {\"alerts\": [...]} (docs/spec.md).\n"
    "It writes the endpoint it serves to FILE.endpoint for other commands.\n";

static _Atomic(ctl_t *) s_hup_ctl; /* the controller SIGHUP reloads the keys of */

static void s_on_hup(int sig)
{
    ctl_t *c = atomic_load(&s_hup_ctl);
    if (c)
        ctl_reload_keys(c);
}

int cmd_controller(int argc, char **argv)
{
    const char *bind = NULL, *http = NULL, *key = NULL, *akeys = NULL, *alerts = NULL,
               *lost_text = NULL, *log_target = NULL;
    int insecure = 0;
    const cli_opt_extra extra[] = {{"bind", &bind, NULL},
                                   {"lost-timeout", &lost_text, NULL},
                                   {"log", &log_target, NULL},
                                   {"http", &http, NULL},
                                   {"alerts", &alerts, NULL},
                                   {"key", &key, NULL},
                                   {"authorized-keys", &akeys, NULL},
                                   {"insecure", NULL, &insecure},
                                   {NULL}};
    cli_opts o;
    int prc = cli_opts_parse_ext(argc, argv, CLI_OPT_DB, extra, s_ctl_usage, &o);
    if (prc)
        return prc < 0 ? CLI_OK : prc;
    const char *dbflag = o.db;
    double lost = 0;
    if (lost_text) {
        char *end;
        lost = strtod(lost_text, &end);
        if (*end || !(lost > 0)) {
            cli_error("--lost-timeout: expected a number of seconds > 0, got \"%s\"",
                      lost_text);
            return CLI_USAGE;
        }
    }
    if (optind != argc) {
        cli_error("controller: unexpected argument \"%s\"", argv[optind]);
        return CLI_USAGE;
    }
    if ((key || akeys || insecure) && !(bind && !strncmp(bind, "tcp://", 6))) {
        cli_error("controller: --key, --authorized-keys and --insecure are for a tcp:// "
                  "--bind");
        return CLI_USAGE;
    }
    if (cli_http_check(http) != 0)
        return CLI_USAGE;
    /* the flags, then the database, then the log file; what it made is
       removed when it fails later (a --bind or --http in use): a refusal
       changes nothing */
    const char *db = cli_db_path(dbflag);
    s_made made = {0};
    ctl_t *ctl = NULL;
    if ((log_target && s_log_check(log_target) != 0) || s_check_no_controller(db) != 0 ||
        s_db_check(db, &made) != 0 ||
        (log_target && s_log_target(log_target, &made) != 0))
        goto fail;
    char err[1600];
    ctl_config cc = {.db_path = db,
                     .bind = bind,
                     .lost_timeout_s = lost,
                     .key_path = key,
                     .authorized_keys = akeys,
                     .insecure = insecure,
                     .alerts = alerts};
    ctl = ctl_new(&cc, err, sizeof err);
    if (!ctl) {
        cli_error("%s", err);
        goto fail;
    }
    s_signals();
    atomic_store(&s_hup_ctl, ctl);
    struct sigaction hup;
    memset(&hup, 0, sizeof hup);
    hup.sa_handler = s_on_hup;
    sigaction(SIGHUP, &hup, NULL);
    if (s_write_endpoint(db, ctl_endpoint(ctl)) != 0)
        goto fail;
    if (insecure) /* its own web server (--http) talks plain TCP to it */
        setenv("JIZHI_SERVER_KEY", "none", 1);
    web_t *web = http ? cli_web_start(http, db, ctl_endpoint(ctl)) : NULL;
    if (http && !web) {
        s_remove_endpoint(db, ctl_endpoint(ctl));
        goto fail;
    }
    pthread_t tc;
    s_spawn(&tc, s_ctl_thread, ctl);
    while (!s_interrupted)
        pause();
    web_destroy(&web);
    atomic_store(&s_stop_ctl, 1);
    pthread_join(tc, NULL);
    s_remove_endpoint(db, ctl_endpoint(ctl));
    signal(SIGHUP, SIG_IGN);
    atomic_store(&s_hup_ctl, NULL);
    ctl_destroy(&ctl);
    return s_ctl_failed ? CLI_FAIL : CLI_OK;

fail:
    atomic_store(&s_hup_ctl, NULL);
    if (ctl && !strncmp(ctl_endpoint(ctl), "ipc://", 6))
        unlink(ctl_endpoint(ctl) + 6); /* its socket, which libzmq leaves */
    ctl_destroy(&ctl);
    s_unmake(&made);
    return CLI_FAIL;
}

static const char s_disp_usage[] =
    "usage: jizhi dispatcher --controller ENDPOINT|--db FILE [--gpus LIST|none] [--slots "
    "N]\n"
    "                        [--name NAME] [--log-dir DIR] [--log FILE|syslog]\n"
    "                        [--trial-endpoint ENDPOINT] [--key FILE]\n"
    "                        [--server-key KEY|FILE | --insecure]\n"
    "       jizhi dispatcher --backend slurm --controller tcp://HOST:PORT\n"
    "                        [--partition P] [--account A] [--max-jobs N]\n"
    "                        [--max-gpus N] [--poll-s S] [--name NAME] [--log-dir DIR]\n"
    "       jizhi dispatcher release NAME   (admin) free the name of a dispatcher\n"
    "                        gone silent, for a new key\n"
    "Runs trials for the controller until SIGINT/SIGTERM: as processes on this\n"
    "machine (--backend local, the default), or as one Slurm job per trial\n"
    "attempt (--backend slurm; --log-dir must be on a file system the compute\n"
    "nodes share, and the endpoint reachable from them).\n"
    "Over tcp:// it uses CURVE: --server-key (or JIZHI_SERVER_KEY, default\n"
    "KEYDIR/controller.pub) and its own pair --key (or JIZHI_KEY, default\n"
    "KEYDIR/client.key), listed as role `dispatcher` in the controller's\n"
    "authorized keys; trials get JIZHI_SERVER_KEY from it. Without a server key\n"
    "it refuses tcp:// unless --insecure (plain TCP to an --insecure controller,\n"
    "trusted networks only).\n"
    "Trust: a trial's `command` runs as the user who runs this dispatcher, with\n"
    "that user's files and rights, whoever submitted the study. Run dispatchers\n"
    "as an unprivileged user of their own, never as root (it warns at start when\n"
    "it runs as root on a tcp:// controller). Trial logs are written 0600 and the\n"
    "log and checkpoint directories it creates 0700.\n";

/* A count option from 0 (or 1) to 4096. */
static int s_parse_count(const char *opt, const char *text, int min, int *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (!*text || *end || v < min || v > 4096) {
        cli_error("%s: expected an integer from %d to 4096, got \"%s\"", opt, min, text);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int cmd_dispatcher(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "release"))
        return cmd_disp_release(argc - 1, argv + 1);
    disp_config dc = {0};
    const char *dbflag = NULL, *log_target = NULL, *slots_text = NULL, *max_jobs = NULL,
               *max_gpus = NULL, *poll_s = NULL, *key = NULL, *server_key = NULL;
    const cli_opt_extra extra[] = {{"gpus", &dc.gpus, NULL},
                                   {"slots", &slots_text, NULL},
                                   {"name", &dc.name, NULL},
                                   {"log-dir", &dc.log_dir, NULL},
                                   {"log", &log_target, NULL},
                                   {"trial-endpoint", &dc.trial_endpoint, NULL},
                                   {"backend", &dc.backend, NULL},
                                   {"partition", &dc.partition, NULL},
                                   {"account", &dc.account, NULL},
                                   {"max-jobs", &max_jobs, NULL},
                                   {"max-gpus", &max_gpus, NULL},
                                   {"poll-s", &poll_s, NULL},
                                   {"key", &key, NULL},
                                   {"server-key", &server_key, NULL},
                                   {"db", &dbflag, NULL},
                                   {NULL}};
    cli_opts o;
    int prc = cli_opts_parse_ext(argc, argv, CLI_OPT_CONTROLLER, extra, s_disp_usage, &o);
    if (prc)
        return prc < 0 ? CLI_OK : prc;
    dc.controller = o.controller;
    if (slots_text && max_jobs) {
        cli_error("dispatcher: --slots and --max-jobs (its Slurm name): give one");
        return CLI_USAGE;
    }
    if (slots_text && s_parse_slots(slots_text, &dc.slots) != 0)
        return CLI_USAGE;
    if (dc.backend && strcmp(dc.backend, "local") && strcmp(dc.backend, "slurm")) {
        cli_error("--backend: expected local or slurm, got \"%s\"", dc.backend);
        return CLI_USAGE;
    }
    if (max_jobs && s_parse_count("--max-jobs", max_jobs, 1, &dc.slots) != 0)
        return CLI_USAGE;
    if (max_gpus && s_parse_count("--max-gpus", max_gpus, 0, &dc.max_gpus) != 0)
        return CLI_USAGE;
    if (poll_s) {
        char *end;
        dc.poll_s = strtod(poll_s, &end);
        if (!*poll_s || *end || !(dc.poll_s >= 0.05 && dc.poll_s <= 3600)) {
            cli_error("--poll-s: expected seconds from 0.05 to 3600, got \"%s\"", poll_s);
            return CLI_USAGE;
        }
    }
    if (key) /* read by keys_client_setup (common/keys.h) */
        setenv("JIZHI_KEY", key, 1);
    if (server_key)
        setenv("JIZHI_SERVER_KEY", server_key, 1);
    /* the Slurm-only options, in the order of --help */
    const char *slurm_opt = dc.partition ? "--partition"
                            : dc.account ? "--account"
                            : max_jobs   ? "--max-jobs"
                            : max_gpus   ? "--max-gpus"
                            : poll_s     ? "--poll-s"
                                         : NULL;
    int slurm = dc.backend && !strcmp(dc.backend, "slurm");
    if (slurm_opt && !slurm) {
        cli_error("dispatcher: %s needs --backend slurm", slurm_opt);
        return CLI_USAGE;
    }
    char err[256];
    if (dc.gpus && slurm) {
        cli_error("dispatcher: --gpus lists local devices; with --backend slurm give "
                  "--max-gpus N");
        return CLI_USAGE;
    }
    if (dc.gpus && disp_gpus_check(dc.gpus, err, sizeof err) != 0) {
        cli_error("--%s", err);
        return CLI_USAGE;
    }
    char buf[512];
    if (optind != argc) {
        cli_error("dispatcher: unexpected argument \"%s\"", argv[optind]);
        fputs(s_disp_usage, stderr);
        return CLI_USAGE;
    }
    if (dc.controller && dbflag) {
        cli_error("dispatcher: --controller and --db: choose one");
        return CLI_USAGE;
    }
    if (!dc.controller) /* the controller serving the database, as other commands */
        dc.controller = cli_controller(NULL, cli_db_path(dbflag), buf, sizeof buf);
    if (!dc.controller) {
        cli_error("dispatcher: no controller: give --controller ENDPOINT, or --db FILE "
                  "of a running local controller (%s.endpoint does not exist)",
                  cli_db_path(dbflag));
        return CLI_FAIL;
    }
    if (log_target && s_log_target(log_target, NULL) != 0)
        return CLI_FAIL;
    disp_t *d = disp_new(&dc);
    if (!d)
        return CLI_FAIL;
    s_signals();
    pthread_t td;
    s_spawn(&td, s_disp_thread, d);
    while (!s_interrupted)
        pause();
    atomic_store(&s_stop_disp, 1);
    pthread_join(td, NULL);
    disp_destroy(&d);
    return CLI_OK;
}
