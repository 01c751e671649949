/*  main.c - jizhi-train: the built-in trainer (docs/design.md, The built-in trainer).

    Reads flags, opens the trial through libjizhi (standalone outside a
    study), lets the trial's params override the flags, loads the data,
    trains with live control and reports metrics through the helper.
    Exit status: 0 done (or stopped), 1 failure, 2 usage error (bad flag,
    bad param value). Under an MPI launcher (`mpirun -np N jizhi-train`)
    every process is one data-parallel rank: rank 0 alone opens the trial,
    applies its params and broadcasts the resulting config, then all ranks
    train one model (comm.h). Built twice: without CUDA (jizhi-train) and, with
    -DTRN_WITH_CUDA, linked to backend_cuda.cu (jizhi-train-cuda).
*/
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/blaskern.h"
#include "common/util.h"
#include "trainer/comm.h"
#include "trainer/conv_dnnl.h"
#include "trainer/trn.h"

#ifdef TRN_WITH_CUDA
trn_backend *trn_cuda_backend_new(char *err);
void trn_cuda_backend_destroy(trn_backend *b);
#endif
#ifdef TRN_WITH_NCCL
trn_comm *trn_comm_nccl_new(char *err);
#define S_NCCL_CTOR trn_comm_nccl_new
#else
#define S_NCCL_CTOR NULL
#endif

/* Rank 0's verdict on the params and the config it leads to. */
typedef struct {
    int status; /* 0 go on, else the exit status */
    trn_config cfg;
    uint64_t ck_len;        /* the restored checkpoint rank 0 read: its length; 0: none */
    uint64_t ck_piece;      /* bytes per broadcast of it (rank 0's, s_ck_piece) */
    char ck_path[PATH_MAX]; /* and where rank 0 read it (messages) */
} s_start;

/* FNV-1a of every weight: the ranks must agree after training. */
static uint64_t s_weights_hash(trn_trainer *t)
{
    uint64_t h = 1469598103934665603ULL;
    trn_net *n = trn_trainer_net(t);
    for (int i = 0; i < trn_net_nparams(n); i++) {
        const unsigned char *b = (const unsigned char *)trn_net_param(n, i)->w;
        for (size_t j = 0; j < (size_t)trn_net_param(n, i)->n * sizeof(float); j++)
            h = (h ^ b[j]) * 1099511628211ULL;
    }
    return h;
}

/* The end of a run once the ranks have agreed on its start: a failure
   (status != 0) may be this rank's alone, and with several ranks the others
   may wait in a collective it no longer joins, so it leaves without
   MPI_Finalize (_exit) and the launcher ends every rank; otherwise the comm
   is destroyed and status returned. */
static int s_leave(trn_comm **comm, int status)
{
    if (status && (*comm)->size > 1) {
        fflush(NULL);
        _exit(status);
    }
    trn_comm_destroy(comm);
    return status;
}

/* Several ranks: 0 when every rank holds rank 0's weights; -1 when they
   differ or a collective failed here (the caller then leaves without
   MPI_Finalize: the others may wait in the next collective). */
static int s_check_ranks_agree(trn_trainer *t, trn_comm *c, int quiet)
{
    uint64_t mine = s_weights_hash(t), r0 = mine;
    if (trn_comm_bcast(c, &r0, sizeof r0, 0) < 0) {
        fprintf(stderr,
                "jizhi-train: rank %d: comparing the weights: the broadcast failed\n",
                c->rank);
        return -1;
    }
    double differ = mine != r0;
    if (trn_comm_sum_d(c, &differ, 1) < 0) {
        fprintf(stderr, "jizhi-train: rank %d: comparing the weights: the sum failed\n",
                c->rank);
        return -1;
    }
    if (c->rank == 0 && (differ > 0 || !quiet))
        fprintf(stderr, "jizhi-train: %d ranks: weights %s (hash %016llx)\n", c->size,
                differ > 0 ? "DIFFER between ranks" : "identical on every rank",
                (unsigned long long)r0);
    return differ > 0 ? -1 : 0;
}

/* Rank 0 at start: the BLAS kernels line (--verbose) and a warning when
   they are narrower than the CPU allows (always). */
static void s_say_kernels(const trn_config *cfg)
{
    char line[512];
    if (cfg->verbose) {
        blaskern_describe(line, sizeof line);
        fprintf(stderr, "jizhi-train: %s\n", line);
    }
    if (blaskern_warning(line, sizeof line))
        fprintf(stderr, "jizhi-train: warning: %s\n", line);
}

/* Rank 0, once the start step is known (0, or a restored checkpoint's):
   the kernels as metrics at the first step this run makes (`step` + 1),
   blas_vector_bits and cpu_vector_bits (blaskern.h), so a resumed run
   reports nothing at or before its checkpoint. */
static void s_report_kernels(jz_trial *jz, long step)
{
    blaskern_info in;
    blaskern_get(&in);
    if (jz && in.core_level != BLASKERN_UNKNOWN) {
        jz_report(jz, step + 1, "blas_vector_bits", blaskern_bits(in.core_level));
        jz_report(jz, step + 1, "cpu_vector_bits", blaskern_bits(in.cpu_level));
    }
}

/* The thread pools' settings, read when their libraries load, so they
   are set here and the program runs itself again, once (what the user set
   is kept):
   - oneDNN's OpenMP threads (and the fused kernels') wait at each parallel
     region's end; by default libgomp spins there, which on a shared
     machine (a study's trials side by side, other jobs) burns the time
     slice the partner thread needs: on the 2-core build machine under load
     the CNN at --threads 2 ran 160-200 samples/s spinning and 750-850
     sleeping. OMP_WAIT_POLICY=passive.
   - OpenBLAS starts a worker per core when it loads, and each spins
     (sched_yield) for its timeout before sleeping: 0.1 CPU-seconds at
     every start of a --threads 1 trial (a sixth of a 300-step run's CPU),
     taken from the other trials on the machine. OPENBLAS_NUM_THREADS=1
     when no thread count is in the environment; trn_cpu_set_threads then
     raises it to --threads (OpenBLAS adds workers on demand). */
static void s_thread_env(char **argv)
{
    int again = 0;
    if (trn_dnnl_available() && !getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        again = 1;
    }
    if (!getenv("OPENBLAS_NUM_THREADS") && !getenv("GOTO_NUM_THREADS") &&
        !getenv("OMP_NUM_THREADS")) {
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        again = 1;
    }
    if (again)
        util_reexec_self(argv);
    /* no re-exec needed, or it failed: go on with the libraries' defaults */
}

/* JIZHI_EVAL_AT_STEP (the controller's, for a fork's sibling): one more
   evaluation at that step, so the fork judges it there and not at the
   next --eval-every. 0, or -1 after a message. */
static int s_eval_at_step(trn_config *cfg)
{
    const char *e = getenv("JIZHI_EVAL_AT_STEP");
    if (!e || !*e)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(e, &end, 10);
    if (*end || v < 1 || errno == ERANGE) {
        fprintf(
            stderr,
            "jizhi-train: JIZHI_EVAL_AT_STEP: expected a step from 1 to %ld, got '%s'\n",
            LONG_MAX, e);
        return -1;
    }
    cfg->eval_at_step = v;
    return 0;
}

/* The checkpoint a run restores: --resume, or JIZHI_LOAD_CHECKPOINT for a
   trial the controller restarts (pause --release then resume, or a load the
   program did not acknowledge); --resume wins. NULL when none. */
static const char *s_restore_path(const trn_config *cfg)
{
    const char *p = cfg->resume[0] ? cfg->resume : getenv("JIZHI_LOAD_CHECKPOINT");
    return p && *p ? p : NULL;
}

static const char *s_restore_flag(const trn_config *cfg)
{
    return cfg->resume[0] ? "--resume" : "JIZHI_LOAD_CHECKPOINT";
}

/* Rank 0, before the model is built: a run that restores a checkpoint reads
   it once (*ck, *ck_len: the bytes the weights are loaded from later, so
   config and weights come from one file even if it is replaced meanwhile;
   caller frees), takes its restored options and then, as
   trn_trainer_reapply_params does after the load, the trial's live params,
   so the model is built for the config the run will have. The CNN's
   convolution path (once per process, trn_net_new) follows the path the
   checkpoint's run began on (conv_route), or for an older checkpoint its
   precision and schedule. bf16 named by the checkpoint itself is not
   refused under --conv/--matmul dnnl; on --resume bf16 from a trial param
   is (as at a fresh start), under JIZHI_LOAD_CHECKPOINT it is not: that
   restart stands in for a live load, after which the trial's params are
   set live and bf16 runs as the emulation there too. Says which
   options that cannot change live (--seed, --zero-gamma, ...) the
   checkpoint overrode. 0, or -1 with err. */
static int s_restored_config(trn_config *cfg, jz_trial *jz, unsigned char **ck,
                             size_t *ck_len, char *err)
{
    const char *restore = s_restore_path(cfg);
    if (!restore)
        return 0;
    trn_config c = *cfg;
    char e2[TRN_ERRLEN];
    size_t len;
    unsigned char *buf = trn_ckpt_read(restore, &len, e2);
    if (!buf || trn_ckpt_config_buf(buf, len, restore, &c, e2) < 0) {
        snprintf(err, TRN_ERRLEN, "%s: %.400s", s_restore_flag(cfg), e2);
        free(buf);
        return -1;
    }
    c.bf16_from_ckpt = trn_config_wants_bf16(&c); /* before the trial's params */
    char name[64], val[512];
    for (size_t i = 0; jz && trn_config_live_param(i, name, sizeof name); i++)
        if (trn_jz_param(jz, name, val, sizeof val) == 1)
            trn_config_set_live(&c, name, val, e2); /* refused: reapply says it */
    if (!cfg->resume[0]) /* JIZHI_LOAD_CHECKPOINT: as the live load it stands in for */
        c.bf16_from_ckpt = trn_config_wants_bf16(&c);
    char kept[1024];
    if (trn_ckpt_kept_options(cfg, &c, kept, sizeof kept) && !c.quiet)
        fprintf(stderr,
                "jizhi-train: %s: kept from the checkpoint, as its run began: %s\n",
                s_restore_flag(cfg), kept);
    *cfg = c;
    *ck = buf;
    *ck_len = len;
    return 0;
}

/* A rank other than 0, after the start was broadcast: a checkpoint path in
   its own environment, or its own --resume (own_resume), that rank 0 does
   not restore is ignored, with a line saying so (rank 0's environment and
   command line decide, as for every option). */
/* A rank's own checkpoint request that rank 0's choice overrides. */
static void s_say_ignored(const trn_comm *c, const s_start *st, const char *what,
                          const char *value)
{
    if (st->ck_len)
        fprintf(stderr,
                "jizhi-train: rank %d: %s%.300s ignored: every rank restores the "
                "checkpoint rank 0 read (%.300s)\n",
                c->rank, what, value, st->ck_path);
    else
        fprintf(stderr,
                "jizhi-train: rank %d: %s%.300s ignored: rank 0 restores no "
                "checkpoint, so no rank does\n",
                c->rank, what, value);
}

static void s_say_ignored_env(const trn_comm *c, const s_start *st,
                              const char *own_resume)
{
    /* this rank's own --resume, where it differs from rank 0's (before:
       ignored without a word) */
    if (c->rank != 0 && own_resume[0] && strcmp(own_resume, st->cfg.resume))
        s_say_ignored(c, st, "--resume ", own_resume);
    const char *e = getenv("JIZHI_LOAD_CHECKPOINT");
    if (c->rank == 0 || !e || !*e || st->cfg.resume[0] ||
        (st->ck_len && !strcmp(e, st->ck_path)))
        return;
    s_say_ignored(c, st, "JIZHI_LOAD_CHECKPOINT=", e);
}

/* Bytes per broadcast of the checkpoint (MPI counts are int). */
#define S_CK_CHUNK ((size_t)1 << 28)

/* Rank 0's piece size: S_CK_CHUNK, or JIZHI_CKPT_PIECE_BYTES (1 to
   S_CK_CHUNK; tests use a few hundred bytes to reach several pieces).
   0 after a message for a bad value. */
static uint64_t s_ck_piece(void)
{
    const char *e = getenv("JIZHI_CKPT_PIECE_BYTES");
    if (!e || !*e)
        return S_CK_CHUNK;
    char *end;
    errno = 0;
    long long v = strtoll(e, &end, 10);
    if (*end || v < 1 || (unsigned long long)v > S_CK_CHUNK || errno == ERANGE) {
        fprintf(stderr,
                "jizhi-train: JIZHI_CKPT_PIECE_BYTES: expected bytes from 1 to %zu, got "
                "'%.100s'\n",
                S_CK_CHUNK, e);
        return 0;
    }
    return (uint64_t)v;
}

/* JIZHI_TEST_CKPT_NOMEM=1 on a rank: its allocation for the shared
   checkpoint counts as failed (the tests' fault injection: a real shortage
   under Linux's overcommit ends in the OOM killer, not in NULL). */
static int s_ck_nomem_injected(void)
{
    const char *e = getenv("JIZHI_TEST_CKPT_NOMEM");
    return e && !strcmp(e, "1");
}

/* Several ranks, after the start was broadcast: rank 0's checkpoint bytes
   (*ck, st->ck_len of them) go to every other rank, which allocates *ck
   (caller frees), so no rank reads the file again (a FIFO, a file replaced
   meanwhile, a path that differs between nodes). Collective: every rank
   learns whether any could not take the bytes: -1 with err (the rank and
   what it lacked) on every rank. After that agreement a rank whose
   broadcast fails returns -2 with err: the others may wait in a broadcast
   it no longer joins, so the caller must leave without MPI_Finalize
   (_exit), which ends every rank through the launcher. 0 when shared. */
static int s_share_checkpoint(trn_comm *c, const s_start *st, unsigned char **ck,
                              char *err)
{
    if (c->size <= 1 || !st->ck_len)
        return 0;
    double failed = 0;
    if (c->rank != 0) {
        *ck = st->ck_len <= SIZE_MAX && !s_ck_nomem_injected()
                  ? malloc((size_t)st->ck_len)
                  : NULL;
        failed = !*ck;
    }
    double nfailed = failed;
    if (trn_comm_sum_d(c, &nfailed, 1) < 0) {
        snprintf(err, TRN_ERRLEN, "rank %d: %s: sharing the checkpoint failed", c->rank,
                 s_restore_flag(&st->cfg));
        return -2;
    }
    if (nfailed > 0) {
        if (failed)
            snprintf(err, TRN_ERRLEN,
                     "rank %d: %s: no memory for the %llu bytes of %.300s that rank 0 "
                     "read%s",
                     c->rank, s_restore_flag(&st->cfg), (unsigned long long)st->ck_len,
                     st->ck_path,
                     s_ck_nomem_injected() ? " (injected: JIZHI_TEST_CKPT_NOMEM=1)" : "");
        else
            snprintf(err, TRN_ERRLEN,
                     "rank %d: %s: %g other rank(s) had no memory for the checkpoint",
                     c->rank, s_restore_flag(&st->cfg), nfailed);
        return -1;
    }
    size_t piece = (size_t)st->ck_piece, pieces = 0;
    for (size_t off = 0; off < st->ck_len; off += piece, pieces++) {
        size_t n = st->ck_len - off < piece ? st->ck_len - off : piece;
        if (trn_comm_bcast(c, *ck + off, n, 0) < 0) {
            snprintf(err, TRN_ERRLEN,
                     "rank %d: %s: broadcasting the checkpoint failed at byte %zu of "
                     "%llu",
                     c->rank, s_restore_flag(&st->cfg), off,
                     (unsigned long long)st->ck_len);
            return -2;
        }
    }
    if (c->rank == 0 && st->cfg.verbose)
        fprintf(stderr, "jizhi-train: checkpoint: %llu bytes in %zu broadcasts\n",
                (unsigned long long)st->ck_len, pieces);
    return 0;
}

/* Loads the restored checkpoint into t from the bytes rank 0 read before
   the model was built (buf; every rank holds them, s_share_checkpoint).
   0, or -1 with err. */
static int s_load_restored(trn_trainer *t, const s_start *st, const unsigned char *buf,
                           char *err)
{
    char e2[TRN_ERRLEN];
    int rc = trn_trainer_load_buf(t, buf, (size_t)st->ck_len, st->ck_path, e2);
    if (rc < 0)
        snprintf(err, TRN_ERRLEN, "%s: %.400s", s_restore_flag(&st->cfg), e2);
    return rc;
}

int main(int argc, char **argv)
{
    s_thread_env(argv);
    /* before anything else: may re-execute with OPENBLAS_CORETYPE set */
    blaskern_choose(argv);
    char err[TRN_ERRLEN];
    trn_config cfg;
    trn_config_defaults(&cfg);
    int rc = trn_config_parse_args(&cfg, argc, argv, stdout, err);
    if (rc == 1)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "jizhi-train: %s\n", err);
        return 2;
    }
    char flag_comm[sizeof cfg.comm];
    snprintf(flag_comm, sizeof flag_comm, "%s", cfg.comm);
    trn_comm *comm = trn_comm_new(cfg.comm, S_NCCL_CTOR, err);
    if (!comm) {
        fprintf(stderr, "jizhi-train: %s\n", err);
        return 2;
    }
    jz_trial *jz = NULL;
    s_start st = {0, cfg, 0, 0, ""};
    unsigned char *ck = NULL; /* rank 0: the restored checkpoint's bytes */
    size_t ck_len = 0;
    if (comm->rank == 0) {
        jz = jz_open();
        char unused[512]; /* a typo in the study's space tunes nothing: say so */
        if (jz && trn_config_unknown_params(jz_params_json(jz), unused, sizeof unused))
            fprintf(
                stderr,
                "jizhi-train: params not used by jizhi-train: %s (ignored; fine where "
                "the command uses them as {name})\n",
                unused);
        if (!jz) {
            fprintf(stderr,
                    "jizhi-train: cannot open the trial (see the message above)\n");
            st.status = 1;
        } else if (trn_config_apply_params(&st.cfg, trn_jz_param, jz, err) < 0 ||
                   trn_config_validate(&st.cfg, err) < 0) {
            fprintf(stderr, "jizhi-train: %s\n", err);
            st.status = 2;
        } else if (s_eval_at_step(&st.cfg) < 0) {
            st.status = 2;

        } else if (strcmp(st.cfg.comm, flag_comm)) {
            fprintf(stderr,
                    "jizhi-train: param comm: the communication backend is chosen on the "
                    "command line (--comm), not by a param\n");
            st.status = 2;
        } else if (s_restored_config(&st.cfg, jz, &ck, &ck_len, err) < 0) {
            fprintf(stderr, "jizhi-train: %s\n", err);
            st.status = 1;
        } else if (ck) {
            st.ck_len = ck_len;
            snprintf(st.ck_path, sizeof st.ck_path, "%s", s_restore_path(&st.cfg));
            /* read only where bytes go to other ranks: a bad value never
               fails a run that broadcasts no checkpoint */
            if (comm->size > 1 && !(st.ck_piece = s_ck_piece()))
                st.status = 2;
        }
    }
    if (trn_comm_bcast(comm, &st, sizeof st, 0) < 0) {
        /* not collective (a device buffer refused on this rank alone): the
           others may wait in the broadcast, so leave without MPI_Finalize */
        fprintf(stderr, "jizhi-train: rank %d: broadcasting the config failed\n",
                comm->rank);
        jz_close(&jz); /* rank 0: the helper sends what it queued */
        fflush(NULL);
        _exit(1);
    }
    if (!st.status) {
        s_say_ignored_env(comm, &st, cfg.resume);
        int shared = s_share_checkpoint(comm, &st, &ck, err);
        if (shared < 0)
            fprintf(stderr, "jizhi-train: %s\n", err);
        if (shared == -2) { /* this rank alone: see s_share_checkpoint */
            free(ck);
            jz_close(&jz); /* rank 0: the helper sends what it queued */
            fflush(NULL);
            _exit(1);
        }
        if (shared < 0)
            st.status = 1;
    }
    cfg = st.cfg;
    if (st.status) {
        free(ck);
        jz_close(&jz);
        trn_comm_destroy(&comm);
        return st.status;
    }
    if (comm->rank != 0)
        cfg.quiet = 1; /* progress lines from rank 0 only */
    if (comm->size > 1 && getppid() != 1) {
        /* a rank ends with its launcher, even one killed outright */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    }
    trn_backend *backend = NULL;
    if (!strcmp(cfg.backend, "cuda")) {
#ifdef TRN_WITH_CUDA
        backend = trn_cuda_backend_new(err);
        if (!backend) {
            fprintf(stderr, "jizhi-train: --backend cuda: %s\n", err);
            free(ck);
            jz_close(&jz);
            return s_leave(&comm, 1);
        }
#else
        fprintf(stderr, "jizhi-train: --backend cuda: this binary is built without CUDA "
                        "(build jizhi-train-cuda with `make cuda`)\n");
        free(ck);
        jz_close(&jz);
        trn_comm_destroy(&comm);
        return 2;
#endif
    }
    trn_cpu_set_threads(cfg.threads);
    if (comm->rank == 0)
        s_say_kernels(&cfg);

    /* the test set only at the end (a stopped fork sibling never reads it) */
    trn_dataset train, val, test = {0};
    if (trn_data_load(&cfg, &train, &val, NULL, err) < 0) {
        fprintf(stderr, "jizhi-train: %s\n", err);
        free(ck);
        jz_close(&jz);
        return s_leave(&comm, 1);
    }
    int status = 1;
    trn_trainer *t = trn_trainer_new(&cfg, &train, &val, NULL, err);
    if (!t) {
        fprintf(stderr, "jizhi-train: %s\n", err);
        goto out;
    }
    trn_trainer_defer_test(t, &test);
    if (jz) { /* rank 0 */
        trn_io io;
        trn_io_jizhi(&io, jz);
        trn_trainer_set_io(t, &io);
    }
    if (backend)
        trn_trainer_set_backend(t, backend);
    if (trn_trainer_set_comm(t, comm, err) < 0) {
        fprintf(stderr, "jizhi-train: %s\n", err);
        goto out;
    }
    int restore = st.ck_len > 0; /* rank 0's verdict, on every rank */
    if (restore && s_load_restored(t, &st, ck, err) < 0) {
        fprintf(stderr, "jizhi-train: %s\n", err);
        goto out;
    }
    free(ck);
    ck = NULL;
    if (restore) { /* the trial's params win, as after a live load */
        char detail[512];
        trn_trainer_reapply_params(t, detail, sizeof detail);
        if (detail[0] && !cfg.quiet)
            fprintf(stderr, "jizhi-train: after the load: %s\n", detail);
    }
    if (comm->rank == 0 && cfg.verbose) /* after a restore, in its precision */
        trn_trainer_say_kernels(t, 1);
    if (comm->rank == 0)
        s_report_kernels(jz, trn_trainer_step_count(t));
    if (trn_trainer_run(t, err) < 0) {
        fprintf(stderr, "jizhi-train: %s\n", err);
        goto out;
    }
    if (comm->size > 1 && s_check_ranks_agree(t, comm, cfg.quiet) < 0)
        goto out;
    status = 0;
out:
    trn_trainer_destroy(&t);
#ifdef TRN_WITH_CUDA
    if (backend)
        trn_cuda_backend_destroy(backend);
#endif
    trn_data_free(&train);
    trn_data_free(&val);
    trn_data_free(&test);
    free(ck);
    jz_close(&jz);
    return s_leave(&comm, status);
}
