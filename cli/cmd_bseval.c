/*  cmd_bseval.c - `jizhi batchsize-eval`: the critical-batch-size
    evaluation mode of the batchsize scheduler (docs/design.md, Schedulers).

    From a short run of a model it estimates the critical batch size
    B_crit ~ B_simple = tr(Sigma)/|G|^2 (McCandlish et al. 2018) with a
    bootstrap confidence interval, using the same estimators as the
    scheduler (sched_gns_estimate, sched_gns_critical). The measurements
    are the four gradient-noise metrics (grad_sqnorm_small/big,
    batch_small/big) of each step; they come from one of:
      -- COMMAND ARGS   runs the program standalone (JIZHI_TRIAL unset, so
                        the helper prints "jizhi: step N name=value" to
                        stderr) and reads them from there;
      --log FILE        a saved standalone log ("-" = stdin);
      --trial ID        a trial's stored metrics (--db FILE).
*/
#include "cli.h"

#include "../schedulers/sched.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char s_help[] =
    "usage: jizhi batchsize-eval [OPTIONS] -- COMMAND [ARGS...]\n"
    "       jizhi batchsize-eval [OPTIONS] --log FILE\n"
    "       jizhi batchsize-eval [OPTIONS] --trial ID [--db FILE]\n"
    "\n"
    "Estimates the critical batch size of a model from a short run: the\n"
    "gradient noise scale B_simple = tr(Sigma)/|G|^2 (McCandlish et al. 2018),\n"
    "the batch size beyond which larger batches stop paying off, with a\n"
    "bootstrap confidence interval over the per-step measurements. The run\n"
    "must report grad_sqnorm_small, grad_sqnorm_big, batch_small and\n"
    "batch_big (jizhi-train does, every --log-every steps). |G|^2 and tr(Sigma)\n"
    "are averaged over the measurements before dividing. B_simple grows as\n"
    "training proceeds: the estimate is for the stretch of training measured.\n"
    "\n"
    "  -- COMMAND ARGS   run COMMAND standalone (outside any study) and read its\n"
    "                    reports; its other output passes through to stderr\n"
    "  --log FILE        read a saved standalone log (\"jizhi: step N name=value\"\n"
    "                    lines; - for stdin)\n"
    "  --trial ID        read trial ID's metrics from the database\n"
    "  --db FILE         database for --trial (default ./jizhi.db or $JIZHI_DB)\n"
    "  --skip N          ignore the first N measurements (warm-up) [0]\n"
    "  --boot N          bootstrap resamples [2000]\n"
    "  --conf C          confidence level of the interval [0.95]\n"
    "  --seed S          bootstrap seed [1]\n"
    "  --quiet           do not pass the command's other output through\n"
    "  --json            print the result as JSON\n"
    "\n"
    "Example:\n"
    "  jizhi batchsize-eval -- jizhi-train --dataset fashion-mnist --epochs 1 \\\n"
    "      --batch-size 128 --log-every 10\n"
    "\n"
    "Exit status: 0 success, 1 too few usable measurements or the run failed,\n"
    "2 usage error.\n";

typedef struct {
    sched_gns_point *pts;
    size_t n, cap;
    long step; /* step of the measurement being gathered */
    int have;  /* bits of its four values */
    sched_gns_point cur;
    double batch; /* last batch_size seen */
    int oom;      /* a measurement was dropped: memory ran out */
} s_acc;

static void s_add(s_acc *a, long step, const char *name, double v)
{
    int bit = !strcmp(name, "grad_sqnorm_small") ? 1
              : !strcmp(name, "grad_sqnorm_big") ? 2
              : !strcmp(name, "batch_small")     ? 4
              : !strcmp(name, "batch_big")       ? 8
                                                 : 0;
    if (!strcmp(name, "batch_size"))
        a->batch = v;
    if (!bit)
        return;
    if (step != a->step) {
        a->step = step;
        a->have = 0;
    }
    a->have |= bit;
    if (bit == 1)
        a->cur.gs = v;
    else if (bit == 2)
        a->cur.gb = v;
    else if (bit == 4)
        a->cur.bs = v;
    else
        a->cur.bb = v;
    if (a->have == 15) {
        a->have = 0;
        if (a->n == a->cap) {
            size_t cap = a->cap ? a->cap * 2 : 64;
            sched_gns_point *more = realloc(a->pts, cap * sizeof *more);
            if (!more) {
                a->oom = 1;
                return;
            }
            a->pts = more;
            a->cap = cap;
        }
        a->pts[a->n++] = a->cur;
    }
}

/* Parses "jizhi: step N name=value"; 1 when the line is one. */
static int s_line(s_acc *a, const char *line)
{
    long step;
    char name[128];
    int off = 0;
    if (sscanf(line, "jizhi: step %ld %127[A-Za-z0-9_.]=%n", &step, name, &off) != 2 ||
        !off)
        return 0;
    char *end;
    double v = strtod(line + off, &end);
    if (end == line + off)
        return 0;
    s_add(a, step, name, v);
    return 1;
}

static void s_read(s_acc *a, FILE *f, FILE *echo)
{
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0)
        if (!s_line(a, line) && echo)
            fputs(line, echo);
    free(line);
}

/* Runs argv standalone, reading its stderr. Returns its exit status
   (128+signal when killed) or -1 when it cannot start. */
static int s_run(s_acc *a, char **argv, int quiet)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        close(fd[1]);
        static const char *const unset[] = {"JIZHI_TRIAL", "JIZHI_TOKEN",
                                            "JIZHI_ENDPOINT", "JIZHI_STUDY", NULL};
        for (int i = 0; unset[i]; i++)
            unsetenv(unset[i]);
        execvp(argv[0], argv);
        fprintf(stderr, "jizhi: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    s_read(a, f, quiet ? NULL : stderr);
    fclose(f);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int s_from_db(s_acc *a, const char *db, long trial)
{
    store_t *s = cli_open_db(db);
    if (!s)
        return -1;
    static const char *const names[] = {"batch_size", "grad_sqnorm_small",
                                        "grad_sqnorm_big", "batch_small", "batch_big"};
    json_t *series[5];
    for (int i = 0; i < 5; i++)
        series[i] = store_metrics_series(s, trial, names[i]);
    store_close(&s);
    /* merge by step: each series is in step order */
    size_t pos[5] = {0};
    for (;;) {
        long next = -1;
        for (int i = 0; i < 5; i++) {
            json_t *p = json_array_get(series[i], pos[i]);
            long st = p ? (long)json_integer_value(json_array_get(p, 0)) : -1;
            if (p && (next < 0 || st < next))
                next = st;
        }
        if (next < 0)
            break;
        for (int i = 0; i < 5; i++) {
            json_t *p;
            while ((p = json_array_get(series[i], pos[i])) &&
                   (long)json_integer_value(json_array_get(p, 0)) == next) {
                s_add(a, next, names[i], json_number_value(json_array_get(p, 1)));
                pos[i]++;
            }
        }
    }
    for (int i = 0; i < 5; i++)
        json_decref(series[i]);
    return 0;
}

static int s_num_arg(const char *flag, const char *v, double lo, double hi, double *out)
{
    char *end;
    double x = v ? strtod(v, &end) : NAN;
    if (!v || *end || !(x >= lo && x <= hi)) {
        cli_error("%s: expected a number in [%g, %g]", flag, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int cmd_bseval(int argc, char **argv)
{
    const char *log = NULL, *db = NULL;
    double trial = -1, skip = 0, boot = 2000, conf = 0.95, seed = 1;
    int json = 0, quiet = 0, cmd = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            cmd = i + 1;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(s_help, stdout);
            return CLI_OK;
        }
        if (!strcmp(a, "--json") || !strcmp(a, "--quiet")) {
            *(a[2] == 'j' ? &json : &quiet) = 1;
            continue;
        }
        if (!v) {
            cli_error("%s: expected a value (see jizhi batchsize-eval --help)", a);
            return CLI_USAGE;
        }
        i++;
        if (!strcmp(a, "--log"))
            log = v;
        else if (!strcmp(a, "--db"))
            db = v;
        else if (!strcmp(a, "--trial")  ? s_num_arg(a, v, 1, 1e15, &trial)
                 : !strcmp(a, "--skip") ? s_num_arg(a, v, 0, 1e12, &skip)
                 : !strcmp(a, "--boot") ? s_num_arg(a, v, 0, 1e7, &boot)
                 : !strcmp(a, "--conf") ? s_num_arg(a, v, 0.5, 0.9999, &conf)
                 : !strcmp(a, "--seed")
                     ? s_num_arg(a, v, 0, 1e15, &seed)
                     : (cli_error("unknown option %s (see jizhi batchsize-eval "
                                  "--help)",
                                  a),
                        -1))
            return CLI_USAGE;
    }
    int sources = (cmd >= 0) + (log != NULL) + (trial > 0);
    if (sources != 1 || (cmd >= 0 && cmd >= argc)) {
        cli_error("give exactly one of -- COMMAND, --log FILE, --trial ID (see jizhi "
                  "batchsize-eval --help)");
        return CLI_USAGE;
    }
    s_acc acc = {.step = -1};
    if (cmd >= 0) {
        int rc = s_run(&acc, argv + cmd, quiet);
        if (rc != 0) {
            cli_error("%s %s", argv[cmd],
                      rc < 0      ? "could not be started"
                      : rc >= 128 ? "was killed"
                                  : "failed");
            if (acc.n < 2) {
                free(acc.pts);
                return CLI_FAIL;
            }
        }
    } else if (log) {
        FILE *f = strcmp(log, "-") ? fopen(log, "r") : stdin;
        if (!f) {
            cli_error("cannot read %s: %s", log, strerror(errno));
            return CLI_FAIL;
        }
        s_read(&acc, f, NULL);
        if (f != stdin)
            fclose(f);
    } else if (s_from_db(&acc, cli_db_path(db), (long)trial) != 0) {
        return CLI_FAIL;
    }
    if (acc.oom) {
        cli_error("batchsize-eval: out of memory reading the measurements");
        free(acc.pts);
        return CLI_FAIL;
    }
    size_t k = (size_t)skip < acc.n ? (size_t)skip : acc.n;
    sched_gns_result r;
    int ok = sched_gns_critical(acc.pts + k, acc.n - k, (int)boot, conf,
                                (unsigned long long)seed, &r);
    if (ok != 0) {
        cli_error("no estimate: %zu gradient-noise measurements (%zu after --skip), %s",
                  acc.n, acc.n - k,
                  acc.n - k < 2
                      ? "need at least 2 (does the program report grad_sqnorm_small, "
                        "grad_sqnorm_big, batch_small and batch_big?)"
                      : "mean |G|^2 <= 0: the noise swamps the gradient (run longer)");
        free(acc.pts);
        return CLI_FAIL;
    }
    /* the batch sizes most measurements were taken at (an epoch's last,
       partial batch gives a few odd ones) */
    double bs = acc.pts[acc.n - 1].bs, bb = acc.pts[acc.n - 1].bb;
    size_t most = 0;
    for (size_t i = k; i < acc.n; i++) {
        size_t c = 0;
        for (size_t j = k; j < acc.n; j++)
            c += acc.pts[j].bb == acc.pts[i].bb && acc.pts[j].bs == acc.pts[i].bs;
        if (c > most) {
            most = c;
            bs = acc.pts[i].bs;
            bb = acc.pts[i].bb;
        }
    }
    free(acc.pts);
    /* An interval wider than WIDE_RATIO (hi/lo), or open, says little: more
       steps or a bigger big batch would narrow it. The recommended range is
       the powers of two within [B/2, 2B] (training near the critical batch
       trades steps for examples evenly), kept inside the interval. */
    enum { WIDE_RATIO = 4 };
    int trusted =
        boot > 0 && !isnan(r.lo) && !isnan(r.hi) && r.lo > 0 && r.hi / r.lo <= WIDE_RATIO;
    double rlo = r.b_simple / 2, rhi = r.b_simple * 2;
    if (trusted) {
        rlo = fmax(rlo, r.lo);
        rhi = fmin(rhi, r.hi);
    }
    rlo = pow(2, ceil(log2(fmax(rlo, 1))));
    rhi = pow(2, floor(log2(fmax(rhi, 1))));
    if (rhi < rlo)
        rhi = rlo;
    if (json) {
        json_t *o = json_pack(
            "{s:f, s:o, s:o, s:f, s:i, s:f, s:f, s:i, s:f, s:f, s:b, s:[f, f]}",
            "b_simple", r.b_simple, "lo", isnan(r.lo) ? json_null() : json_real(r.lo),
            "hi", isnan(r.hi) ? json_null() : json_real(r.hi), "conf", conf,
            "measurements", r.n, "grad_sqnorm", r.g2, "trace", r.trace, "bootstrap",
            (int)boot, "batch_small", bs, "batch_big", bb, "trusted", trusted,
            "recommended", rlo, rhi);
        cli_print_json(o);
        return CLI_OK;
    }
    printf("critical batch size B_simple = tr(Sigma)/|G|^2: %.4g\n", r.b_simple);
    if (boot > 0) {
        char lo[32] = "?", hi[32] = "unbounded";
        if (!isnan(r.lo))
            snprintf(lo, sizeof lo, "%.4g", r.lo);
        if (!isnan(r.hi))
            snprintf(hi, sizeof hi, "%.4g", r.hi);
        printf("  %g%% confidence interval: %s .. %s (bootstrap, %d resamples of %d "
               "measurements)\n",
               conf * 100, lo, hi, (int)boot, r.n);
    }
    printf("  |G|^2 = %.4g, tr(Sigma) = %.4g, measured with batches %.0f/%.0f\n", r.g2,
           r.trace, bs, bb);
    if (boot > 0 && !trusted)
        printf(
            "  the interval is too wide to trust (more than %dx, or open): measure for "
            "more steps or with a bigger big batch\n",
            WIDE_RATIO);
    printf("  recommended batch size: %.0f .. %.0f%s\n", rlo, rhi,
           trusted ? "" : " (from B_simple alone; tentative)");
    return CLI_OK;
}
