/*  train_impl.h - the trainer's state, shared by train.c (the loop),
    control.c (live instructions) and ckpt.c (checkpoints). Internal to
    trainer/; nothing outside these three files looks inside. */
#ifndef TRN_TRAIN_IMPL_H
#define TRN_TRAIN_IMPL_H

#include "trainer/dist.h"
#include "trainer/trn.h"

/* The training set's bf16 copy (train_batch.c). */
typedef enum {
    TRN__XH_UNMADE,  /* no bf16 batch yet */
    TRN__XH_READY,   /* xh holds the copy */
    TRN__XH_REFUSED, /* too large or out of memory: bf16 batches round fp32 rows */
} trn__xh_state;

struct trn_trainer {
    trn_config cfg;                        /* current values (live changes land here) */
    const trn_dataset *train, *val, *test; /* borrowed */
    trn_dataset *test_deferred;            /* borrowed: loaded at the end, or NULL */
    trn_net *net;
    trn_optim opt;
    trn_scaler scaler;    /* the global loss scale */
    trn_scaler *lscalers; /* per-layer loss scales (per_layer_scale) */
    double *lscale;       /* their current values, one per layer */
    int *bad;             /* per layer: inf/NaN in this step's gradients */
    int nlayers;
    trn_prec_schedule psched; /* n = 0: fixed cfg.precision */
    trn_precision prec;       /* precision of the current epoch */
    trn_rng rng;              /* init; saved with checkpoints */
    int *perm;                /* order of the current epoch */
    int perm_epoch;           /* epoch perm belongs to, -1 none */
    long step;                /* optimisation steps taken (skipped count) */
    int epoch;                /* completed epochs */
    long pos;                 /* samples of this epoch consumed */
    float *xb;                /* gathered batch */
    uint8_t *yb;
    int xb_cap;
    uint16_t *xh; /* train->x rounded to bf16 (owned; see xh_state) */
    trn__xh_state xh_state;
    long xh_limit; /* bytes the copy may take; 0: trn__xh_limit() (a test sets it) */
    trn_io io;
    int said_prec; /* --verbose: the precision last described (trn_trainer_say_kernels) */
    const trn_backend *backend; /* NULL: CPU */
    int backend_attached;
    trn_precision backend_prec; /* precision the backend was attached with */
    int devdata;                /* batches on the device (set_data): 0 undecided,
                                   1 yes, 2 no (host batches) */
    int dev_order_epoch;        /* the epoch whose order the backend holds, -1 none */
    /* metrics */
    double loss_acc; /* sum of batch losses since last report */
    long loss_n;
    long samples_since;
    long samples_eval; /* samples trained since the last evaluation */
    double t_since;    /* time at last train report */
    double step_cpu;   /* process CPU-seconds in training steps since then */
    long steps_since;  /* steps since then */
    double last_loss;
    double gs_small, gs_big; /* last |G|^2 at micro-batch and batch */
    int b_small, b_big;
    float *gns_prev; /* measure steps: the accumulators before this chunk (owned) */
    long gns_prev_n; /* its length: every parameter's gradient */
    double gns_sum;  /* sum of the full-size chunks' |g|^2 so far */
    int gns_chunks;  /* and how many */
    int have_gns;
    long last_eval_step; /* -1: never */
    int paused, stop;
    long ctl_acts; /* instructions received, applied or refused (control.c): a
                      control call that got one leaves samples_per_s's window
                      (train_run.c) */
    /* data-parallel ranks: comm borrowed, dist owned (NULL with one rank) */
    trn_comm *comm;
    trn_dist *dist;
    int dist_corrected;   /* top-k momentum correction: optimiser skips momentum */
    int backend_dist;     /* the device backend takes the rank's steps (step_dist) */
    char ckpt_path[1200]; /* the last checkpoint an instruction wrote */
    double *unscale;      /* per param: 1 / the loss scale of this step's gradients */
    int rank, nranks;
};

/* Resets optimiser hyperparameters and precision from cfg after a change. */
void trn__apply_config(trn_trainer *t);

/* The loss scalers from cfg (--loss-scale, --init-loss-scale,
   --scale-window), fresh; and whether --loss-scale auto means dynamic: fp16
   is the precision, or in the precision schedule. */
void trn__setup_scalers(trn_trainer *t);
int trn__auto_fp16(const trn_trainer *t);
/* The scalers' kind (dynamic or not, the window) from cfg, their scales
   and counts kept: after a checkpoint's config is loaded. */
void trn__scalers_follow_config(trn_trainer *t);

/* Where an evaluation failed, for its message (trn_trainer_evaluate's rc,
   -1, -2 or -3): ": why" with one rank, " on rank N: why" for this rank's
   own failure, " on another rank (rank N's own succeeded)", ": the ranks'
   sum of the evaluation failed on rank N"; written into buf
   (len bytes), which it returns. */
const char *trn__eval_failure(const trn_trainer *t, int rc, char *buf, size_t len);

/* The size of the next global batch: batch_size, or what is left of the
   epoch (train.c). */
int trn__next_batch_size(const trn_trainer *t);

/* This rank's share of a global batch of nb: [*off, *off + *cnt). */
void trn__shard(const trn_trainer *t, int nb, int *off, int *cnt);

/* The epoch's order in t->perm: a permutation drawn from (seed, epoch). A
   new draw makes the device backend's copy stale (dev_order_epoch)
   (train_batch.c). */
void trn__order(trn_trainer *t);

/* Gathers examples pos+off .. pos+off+nb of the epoch's order into dst (or
   t->xb when dst is NULL), their labels into t->yb. 0, or -1 out of
   memory. */
int trn__gather_at(trn_trainer *t, int off, int nb, float *dst);

/* The same (off 0) in bf16 into dst (trn_net_input_bf16), from the
   training set's bf16 copy, made by the first call (train_batch.c).
   0, or -1 out of memory. */
int trn__gather_bf16(trn_trainer *t, int nb, uint16_t *dst);

/* The most bytes the training set's bf16 copy may take on this machine:
   1 GiB, and 1/16 of the least of the physical memory, the cgroup's limit
   (v1 or v2, the process's own cgroup and its parents: memlimit.h) and
   MemAvailable (/proc/meminfo), for trials side by side. */
long trn__xh_limit(void);

#endif
