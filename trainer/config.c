/*  config.c - jizhi-train's options: one table, one namespace.

    Every option is a flag --foo-bar and a param foo_bar (docs/design.md, The built-in
   trainer, contract). Order of precedence: defaults < command-line flags < the trial's
   params from the helper, so a study's `space` can tune any option even when its command
   passes a fixed flag. Values are checked against the option's type and range, and the
   message names the option.
*/
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/cudnn_host.h"
#include "trainer/trn.h"

typedef enum { OPT_INT, OPT_LONG, OPT_DOUBLE, OPT_STR, OPT_BOOL } s_opt_type;

/* What else an option is, besides a flag and a param. */
enum {
    OPT_LIVE = 1 << 0,     /* may change while the trial runs (`set`) */
    OPT_RESTORED = 1 << 1, /* taken from a checkpoint on --resume: shapes the
                              trajectory; the run's length and reporting
                              come from the current command instead */
};

typedef struct {
    const char *flag; /* without the leading "--" */
    s_opt_type type;
    size_t off;          /* offset in trn_config */
    size_t size;         /* OPT_STR: buffer size */
    double lo, hi;       /* numeric range, inclusive */
    const char *choices; /* OPT_STR: "a|b|c" or NULL */
    const char *dflt;    /* default as text */
    const char *help;
    unsigned when; /* OPT_LIVE | OPT_RESTORED */
} s_opt;

#define O(f) offsetof(trn_config, f)
#define SZ(f) sizeof(((trn_config *)0)->f)

static const s_opt s_opts[] = {
    {.flag = "dataset",
     .type = OPT_STR,
     .off = O(dataset),
     .size = SZ(dataset),
     .choices = "fashion-mnist|synthetic",
     .dflt = "fashion-mnist",
     .help = "training data"},
    {.flag = "data-dir",
     .type = OPT_STR,
     .off = O(data_dir),
     .size = SZ(data_dir),
     .dflt = "/usr/share/datasets/fashion-mnist",
     .help = "directory of the IDX .gz files"},
    {.flag = "data-cache",
     .type = OPT_STR,
     .off = O(data_cache),
     .size = SZ(data_cache),
     .dflt = "",
     .help = "directory of decompressed copies of the training images, so that "
             "the next start (a fork's sibling, a restart) skips gunzip "
             "(default: $XDG_CACHE_HOME/jizhi-train or ~/.cache/jizhi-train; "
             "off: none)"},
    {.flag = "val-size",
     .type = OPT_INT,
     .off = O(val_size),
     .lo = 0,
     .hi = 1e7,
     .dflt = "5000",
     .help = "validation examples held out of the training set"},
    {.flag = "train-subset",
     .type = OPT_INT,
     .off = O(train_subset),
     .lo = 0,
     .hi = 1e7,
     .dflt = "0",
     .help = "train on the first N examples only (0 = all)"},
    {.flag = "synthetic-n",
     .type = OPT_INT,
     .off = O(synthetic_n),
     .lo = 10,
     .hi = 1e7,
     .dflt = "6000",
     .help = "synthetic: training examples"},
    {.flag = "model",
     .type = OPT_STR,
     .off = O(model),
     .size = SZ(model),
     .choices = "mlp|cnn",
     .dflt = "mlp",
     .help = "model"},
    {.flag = "hidden",
     .type = OPT_STR,
     .off = O(hidden),
     .size = SZ(hidden),
     .dflt = "256,256",
     .help = "mlp: hidden layer sizes, comma-separated"},
    {.flag = "channels",
     .type = OPT_STR,
     .off = O(channels),
     .size = SZ(channels),
     .dflt = "16,32",
     .help = "cnn: channels per stage, comma-separated"},
    {.flag = "blocks",
     .type = OPT_INT,
     .off = O(blocks),
     .lo = 0,
     .hi = 16,
     .dflt = "1",
     .help = "cnn: residual blocks per stage"},
    {.flag = "zero-gamma",
     .type = OPT_BOOL,
     .off = O(zero_gamma),
     .lo = 0,
     .hi = 1,
     .dflt = "1",
     .help = "cnn: the last BN of each residual branch starts with gamma 0 (the block "
             "starts as the identity); 0: gamma 1 like every other BN (a resume takes "
             "the checkpoint's value)",
     /* init only, as --seed: a checkpoint records how its run began, and a
        resumed run takes the checkpoint's value and says so where the command's
        differs (main.c; its gammas come from the checkpoint either way) */
     .when = OPT_RESTORED},
    {.flag = "epochs",
     .type = OPT_INT,
     .off = O(epochs),
     .lo = 1,
     .hi = 100000,
     .dflt = "10",
     .help = "epochs to train",
     .when = OPT_LIVE},
    {.flag = "max-steps",
     .type = OPT_LONG,
     .off = O(max_steps),
     .lo = 0,
     .hi = 1e15,
     .dflt = "0",
     .help = "stop after N steps (0 = no limit)",
     .when = OPT_LIVE},
    {.flag = "batch-size",
     .type = OPT_INT,
     .off = O(batch_size),
     .lo = 1,
     .hi = 1 << 20,
     .dflt = "128",
     .help = "global batch size",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "micro-batch",
     .type = OPT_INT,
     .off = O(micro_batch),
     .lo = 0,
     .hi = 1 << 20,
     .dflt = "0",
     .help = "gradient-accumulation chunk (0 = whole batch)",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "lr",
     .type = OPT_DOUBLE,
     .off = O(lr),
     .lo = 0,
     .hi = 1e6,
     .dflt = "0.05",
     .help = "peak learning rate (at --base-batch when scaling)",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "momentum",
     .type = OPT_DOUBLE,
     .off = O(momentum),
     .lo = 0,
     .hi = 0.999999,
     .dflt = "0.9",
     .help = "SGD/LARS momentum",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "nesterov",
     .type = OPT_BOOL,
     .off = O(nesterov),
     .lo = 0,
     .hi = 1,
     .dflt = "0",
     .help = "SGD: Nesterov momentum",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "weight-decay",
     .type = OPT_DOUBLE,
     .off = O(weight_decay),
     .lo = 0,
     .hi = 10,
     .dflt = "0.0005",
     .help = "weight decay (decoupled for adamw/lamb)",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "optimizer",
     .type = OPT_STR,
     .off = O(optimizer),
     .size = SZ(optimizer),
     .choices = "sgd|lars|lamb|adamw",
     .dflt = "sgd",
     .help = "optimiser"},
    {.flag = "beta1",
     .type = OPT_DOUBLE,
     .off = O(beta1),
     .lo = 0,
     .hi = 0.999999,
     .dflt = "0.9",
     .help = "adamw/lamb: first-moment decay",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "beta2",
     .type = OPT_DOUBLE,
     .off = O(beta2),
     .lo = 0,
     .hi = 0.9999999,
     .dflt = "0.999",
     .help = "adamw/lamb: second-moment decay",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "eps",
     .type = OPT_DOUBLE,
     .off = O(eps),
     .lo = 1e-30,
     .hi = 1,
     .dflt = "1e-8",
     .help = "adamw/lamb: epsilon",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "trust",
     .type = OPT_DOUBLE,
     .off = O(trust),
     .lo = 1e-9,
     .hi = 10,
     .dflt = "0.001",
     .help = "lars: trust coefficient eta",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "warmup-epochs",
     .type = OPT_DOUBLE,
     .off = O(warmup_epochs),
     .lo = 0,
     .hi = 1e5,
     .dflt = "0",
     .help = "linear warmup length in epochs",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "schedule",
     .type = OPT_STR,
     .off = O(schedule),
     .size = SZ(schedule),
     .choices = "constant|cosine|poly",
     .dflt = "constant",
     .help = "lr decay after warmup",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "poly-power",
     .type = OPT_DOUBLE,
     .off = O(poly_power),
     .lo = 0,
     .hi = 10,
     .dflt = "2",
     .help = "poly: decay exponent",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "lr-scaling",
     .type = OPT_STR,
     .off = O(lr_scaling),
     .size = SZ(lr_scaling),
     .choices = "none|linear|sqrt",
     .dflt = "none",
     .help = "scale lr with batch size / base-batch",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "base-batch",
     .type = OPT_INT,
     .off = O(base_batch),
     .lo = 1,
     .hi = 1 << 20,
     .dflt = "128",
     .help = "batch size at which --lr is given",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "precision",
     .type = OPT_STR,
     .off = O(precision),
     .size = SZ(precision),
     .choices = "fp32|bf16|fp16",
     .dflt = "fp32",
     .help = "compute precision (fp32 master weights)",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "precision-schedule",
     .type = OPT_STR,
     .off = O(precision_schedule),
     .size = SZ(precision_schedule),
     .dflt = "",
     .help = "per-epoch precision, e.g. fp32:1,bf16:8,fp32:1",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "loss-scale",
     .type = OPT_STR,
     .off = O(loss_scale),
     .size = SZ(loss_scale),
     .dflt = "auto",
     .help = "auto|dynamic|none|<number> (auto: dynamic for fp16)",
     .when = OPT_RESTORED},
    {.flag = "init-loss-scale",
     .type = OPT_DOUBLE,
     .off = O(init_loss_scale),
     .lo = 1e-30,
     .hi = 1e30,
     .dflt = "65536",
     .help = "dynamic: initial loss scale"},
    {.flag = "scale-window",
     .type = OPT_INT,
     .off = O(scale_window),
     .lo = 1,
     .hi = 1 << 30,
     .dflt = "2000",
     .help = "dynamic: clean steps before doubling the scale",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "per-layer-scale",
     .type = OPT_BOOL,
     .off = O(per_layer_scale),
     .lo = 0,
     .hi = 1,
     .dflt = "0",
     .help = "one dynamic loss scale per layer",
     .when = OPT_RESTORED},
    {.flag = "label-smoothing",
     .type = OPT_DOUBLE,
     .off = O(label_smoothing),
     .lo = 0,
     .hi = 0.999,
     .dflt = "0",
     .help = "cross-entropy label smoothing",
     .when = OPT_LIVE | OPT_RESTORED},
    {.flag = "seed",
     .type = OPT_LONG,
     .off = O(seed),
     .lo = 0,
     .hi = 9.2e18,
     .dflt = "1",
     .help = "random seed (init, shuffling)",
     .when = OPT_RESTORED},
    {.flag = "threads",
     .type = OPT_INT,
     .off = O(threads),
     .lo = 0,
     .hi = 1024,
     .dflt = "0",
     .help = "CPU threads (0 = all cores)",
     .when = OPT_LIVE},
    {.flag = "log-every",
     .type = OPT_INT,
     .off = O(log_every),
     .lo = 1,
     .hi = 1 << 30,
     .dflt = "50",
     .help = "report training metrics every N steps",
     .when = OPT_LIVE},
    {.flag = "eval-every",
     .type = OPT_INT,
     .off = O(eval_every),
     .lo = 0,
     .hi = 1 << 30,
     .dflt = "0",
     .help = "evaluate every N steps (0 = each epoch)",
     .when = OPT_LIVE},
    {.flag = "eval-every-samples",
     .type = OPT_LONG,
     .off = O(eval_every_samples),
     .lo = 0,
     .hi = 1 << 30,
     .dflt = "0",
     .help = "also evaluate once N samples were trained since the last evaluation, "
             "whatever the batch size (0 = off)",
     .when = OPT_LIVE},
    {.flag = "bn-recompute",
     .type = OPT_INT,
     .off = O(bn_recompute),
     .lo = 0,
     .hi = 1 << 16,
     .dflt = "0",
     .help = "before each evaluation, recompute BatchNorm's running statistics from N "
             "batches of 256 training examples (the first N*256) under the weights in "
             "force (precise BN); the evaluation uses them, training is unchanged (0 = "
             "off: the running averages of training)"},
    {.flag = "checkpoint-dir",
     .type = OPT_STR,
     .off = O(checkpoint_dir),
     .size = SZ(checkpoint_dir),
     .dflt = "",
     .help = "checkpoint directory (default: the helper's)"},
    {.flag = "checkpoint-every",
     .type = OPT_INT,
     .off = O(checkpoint_every),
     .lo = 0,
     .hi = 1 << 30,
     .dflt = "0",
     .help = "checkpoint every N epochs (0 = on request)",
     .when = OPT_LIVE},
    {.flag = "resume",
     .type = OPT_STR,
     .off = O(resume),
     .size = SZ(resume),
     .dflt = "",
     .help = "resume from this checkpoint"},
    {.flag = "save",
     .type = OPT_STR,
     .off = O(save),
     .size = SZ(save),
     .dflt = "",
     .help = "write a checkpoint here at the end"},
    {.flag = "backend",
     .type = OPT_STR,
     .off = O(backend),
     .size = SZ(backend),
     .choices = "cpu|cuda",
     .dflt = "cpu",
     .help = "compute backend"},
    {.flag = "conv",
     .type = OPT_STR,
     .off = O(conv),
     .size = SZ(conv),
     .choices = "auto|dnnl|gemm",
     .dflt = "auto",
     .help = "CPU convolutions: oneDNN (dnnl, NHWC) or im2col + GEMM (gemm); auto = "
             "dnnl when the build has oneDNN, the images have one channel and, in a "
             "run with bf16, the CPU has bf16 instructions (chosen once per process; "
             "a resume keeps the path its checkpoint's run began on)"},
    {.flag = "matmul",
     .type = OPT_STR,
     .off = O(matmul),
     .size = SZ(matmul),
     .choices = "auto|dnnl|blas",
     .dflt = "auto",
     .help =
         "CPU linears of the MLP: oneDNN matmuls (dnnl; real bf16 kernels in bf16) "
         "or OpenBLAS sgemm (blas); auto = dnnl in fp32, and in bf16 where the CPU has "
         "bf16 instructions, when the build has oneDNN; blas in fp16 (emulated)"},
    {.flag = "quiet",
     .type = OPT_BOOL,
     .off = O(quiet),
     .lo = 0,
     .hi = 1,
     .dflt = "0",
     .help = "no progress lines on stderr",
     .when = OPT_LIVE},
    {.flag = "verbose",
     .type = OPT_BOOL,
     .off = O(verbose),
     .lo = 0,
     .hi = 1,
     .dflt = "0",
     .help = "say at start which BLAS kernels run and why (JIZHI_BLAS_CORE, "
             "OPENBLAS_CORETYPE), and the convolutions' and linears' kernels (CPU "
             "backend) at start and at each precision change"},
    /* data-parallel ranks (comm.h, dist.h): fixed for a run */
    {.flag = "comm",
     .type = OPT_STR,
     .off = O(comm),
     .size = SZ(comm),
     .choices = "auto|local|mpi|nccl",
     .dflt = "auto",
     .help = "rank communication (auto: mpi under mpirun, else one rank); command line "
             "only"},
    {.flag = "allreduce",
     .type = OPT_STR,
     .off = O(allreduce),
     .size = SZ(allreduce),
     .choices = "ring|hier|native",
     .dflt = "ring",
     .help = "all-reduce: ring, hierarchical (node, leaders, node) or the backend's own"},
    {.flag = "ranks-per-node",
     .type = OPT_INT,
     .off = O(ranks_per_node),
     .lo = 0,
     .hi = 1 << 20,
     .dflt = "0",
     .help = "hier: ranks per node (0 = from MPI's shared-memory split)"},
    {.flag = "fusion-kb",
     .type = OPT_LONG,
     .off = O(fusion_kb),
     .lo = -1,
     .hi = 1 << 20,
     .dflt = "-1",
     .help = "gradient bucket KiB (0 = no fusion, -1 = auto from a measured curve)"},
    {.flag = "fusion-compare",
     .type = OPT_STR,
     .off = O(fusion_compare),
     .size = SZ(fusion_compare),
     .dflt = "",
     .help = "benchmark of bucket layouts (dense, several ranks): after the layout in "
             "use is fixed, steps cycle through it and these KiB thresholds (e.g. "
             "0,256,1024; 0 = no fusion, -1 = the layout in use again, a control), one "
             "step each in an order shuffled each cycle, timed; the summary is printed "
             "at the end"},
    {.flag = "overlap",
     .type = OPT_BOOL,
     .off = O(overlap),
     .lo = 0,
     .hi = 1,
     .dflt = "1",
     .help = "all-reduce buckets on a thread while backward continues"},
    {.flag = "wire",
     .type = OPT_STR,
     .off = O(wire),
     .size = SZ(wire),
     .choices = "fp32|fp16|bf16",
     .dflt = "fp32",
     .help = "gradient format on the wire (ring, hier)"},
    {.flag = "topk",
     .type = OPT_DOUBLE,
     .off = O(topk),
     .lo = 0,
     .hi = 1,
     .dflt = "0",
     .help = "top-k sparsification: fraction of each bucket sent, error feedback (0 = "
             "dense)"},
    {.flag = "topk-correction",
     .type = OPT_BOOL,
     .off = O(topk_correction),
     .lo = 0,
     .hi = 1,
     .dflt = "1",
     .help = "top-k with sgd/lars momentum: accumulate the velocity, not the gradient, "
             "into the residual and clear sent entries of both (momentum correction and "
             "factor masking)"},
    {.flag = "topk-warmup",
     .type = OPT_DOUBLE,
     .off = O(topk_warmup),
     .lo = 0,
     .hi = 1e6,
     .dflt = "0",
     .help = "top-k density warm-up: epochs over which the fraction sent falls from 25% "
             "to --topk exponentially (0 = none)"},
    {.flag = "topk-clip",
     .type = OPT_DOUBLE,
     .off = O(topk_clip),
     .lo = 0,
     .hi = 1e30,
     .dflt = "0",
     .help = "top-k local gradient clipping: global L2-norm threshold; each rank clips "
             "its share of a bucket at clip*sqrt(bucket params/all params/ranks) (0 = "
             "off)"},
    {.flag = "grad-path",
     .type = OPT_STR,
     .off = O(grad_path),
     .size = SZ(grad_path),
     .choices = "auto|device|host",
     .dflt = "auto",
     .help = "--backend cuda, several ranks: where gradient buckets are summed: device "
             "(NCCL in GPU memory, overlapped with backward), host (copied to host, the "
             "comm layer's algorithms), auto (device with --comm nccl)"},
    {.flag = "gpu-data",
     .type = OPT_STR,
     .off = O(gpu_data),
     .size = SZ(gpu_data),
     .choices = "auto|device|host",
     .dflt = "auto",
     .help = "--backend cuda: where batches come from: device (the training set copied "
             "to GPU memory once, each batch gathered there in the epoch's order), host "
             "(gathered in host memory and copied every step), auto (device, host when "
             "the copy does not fit)"},
    {.flag = "cuda-graphs",
     .type = OPT_STR,
     .off = O(cuda_graphs),
     .size = SZ(cuda_graphs),
     .choices = "auto|on|off",
     .dflt = "auto",
     .help = "--backend cuda, one rank, device data: replay the steady-state step as "
             "a CUDA graph (captured per batch size after a warm-up step); auto: plain "
             "launches after a capture or launch that fails, said once; on: such a "
             "failure ends the run (exit 2)"},
    {.flag = "cuda-epilogue",
     .type = OPT_STR,
     .off = O(cuda_epilogue),
     .size = SZ(cuda_epilogue),
     .choices = "lt|kernel",
     .dflt = "lt",
     .help = "--backend cuda: the forward GEMM's bias + ReLU fused into cuBLASLt's "
             "epilogue (lt; GemmEx and a kernel where cuBLASLt offers no algorithm) or "
             "added by a kernel after GemmEx (kernel)"},
};
#define S_NOPTS (sizeof(s_opts) / sizeof(s_opts[0]))

static void s_err(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err)
        vsnprintf(err, TRN_ERRLEN, fmt, ap);
    va_end(ap);
}

/* Finds an option by flag ("batch-size") or param ("batch_size") name. */
static const s_opt *s_find(const char *name)
{
    char buf[64];
    size_t n = strlen(name);
    if (n >= sizeof buf)
        return NULL;
    for (size_t i = 0; i <= n; i++)
        buf[i] = name[i] == '_' ? '-' : name[i];
    for (size_t i = 0; i < S_NOPTS; i++)
        if (strcmp(s_opts[i].flag, buf) == 0)
            return &s_opts[i];
    return NULL;
}

static void s_param_name(const char *flag, char *out, size_t len)
{
    size_t i = 0;
    for (; flag[i] && i + 1 < len; i++)
        out[i] = flag[i] == '-' ? '_' : flag[i];
    out[i] = 0;
}

int trn_config_is_live(const char *name)
{
    const s_opt *o = s_find(name);
    return o && (o->when & OPT_LIVE);
}

int trn_config_live_param(size_t i, char *buf, size_t len)
{
    for (size_t k = 0; k < S_NOPTS; k++)
        if ((s_opts[k].when & OPT_LIVE) && i-- == 0) {
            s_param_name(s_opts[k].flag, buf, len);
            return 1;
        }
    return 0;
}

size_t trn_config_restored_text(const trn_config *c, char *buf, size_t len)
{
    size_t cl = 0;
    if (len == 0)
        return 0;
    buf[0] = 0;
    for (size_t i = 0; i < S_NOPTS; i++) {
        if (!(s_opts[i].when & OPT_RESTORED))
            continue;
        char param[64], v[512];
        s_param_name(s_opts[i].flag, param, sizeof param);
        trn_config_get(c, param, v, sizeof v);
        cl += (size_t)snprintf(buf + cl, len - cl, "%s=%s\n", param, v);
        if (cl >= len)
            cl = len - 1;
    }
    buf[cl] = 0;
    return cl;
}

static int s_in_choices(const char *choices, const char *v)
{
    size_t n = strlen(v);
    const char *p = choices;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0)
            return 1;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

/* `who` is "--flag" or "param flag_name" for messages. */
static int s_set(trn_config *c, const s_opt *o, const char *v, const char *who, char *err)
{
    char *end;
    void *dst = (char *)c + o->off;
    while (isspace((unsigned char)*v))
        v++;
    switch (o->type) {
    case OPT_INT:
    case OPT_LONG:
    case OPT_DOUBLE: {
        errno = 0;
        double d = strtod(v, &end);
        while (isspace((unsigned char)*end))
            end++;
        if (*v == 0 || *end != 0 || errno == ERANGE || !isfinite(d)) {
            s_err(err, "%s: expected a number, got \"%s\"", who, v);
            return -1;
        }
        if (o->type != OPT_DOUBLE && d != floor(d)) {
            s_err(err, "%s: expected a whole number, got \"%s\"", who, v);
            return -1;
        }
        if (d < o->lo || d > o->hi) {
            s_err(err, "%s: %s is out of range [%g, %g]", who, v, o->lo, o->hi);
            return -1;
        }
        if (o->type == OPT_INT)
            *(int *)dst = (int)d;
        else if (o->type == OPT_LONG)
            *(long *)dst = (long)d;
        else
            *(double *)dst = d;
        return 0;
    }
    case OPT_BOOL:
        if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") ||
            !strcmp(v, "on"))
            *(int *)dst = 1;
        else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") ||
                 !strcmp(v, "off"))
            *(int *)dst = 0;
        else {
            s_err(err, "%s: expected true or false, got \"%s\"", who, v);
            return -1;
        }
        return 0;
    case OPT_STR:
        if (o->choices && !s_in_choices(o->choices, v)) {
            s_err(err, "%s: expected one of %s, got \"%s\"", who, o->choices, v);
            return -1;
        }
        if (strlen(v) >= o->size) {
            s_err(err, "%s: value too long (max %zu characters)", who, o->size - 1);
            return -1;
        }
        strcpy((char *)dst, v);
        return 0;
    }
    return -1;
}

int trn_config_wants_bf16(const trn_config *c)
{
    return !strcmp(c->precision, "bf16") || strstr(c->precision_schedule, "bf16");
}

void trn_config_defaults(trn_config *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < S_NOPTS; i++) {
        char err[TRN_ERRLEN];
        int rc = s_set(c, &s_opts[i], s_opts[i].dflt, s_opts[i].flag, err);
        (void)rc;
    }
}

int trn_config_set(trn_config *c, const char *name, const char *value, char *err)
{
    const s_opt *o = s_find(name);
    if (!o) {
        s_err(err, "unknown option \"%s\"", name);
        return -2;
    }
    char who[80];
    snprintf(who, sizeof who, "--%s", o->flag);
    return s_set(c, o, value, who, err);
}

int trn_config_set_live(trn_config *c, const char *name, const char *value, char *err)
{
    trn_config n = *c;
    int rc = trn_config_set(&n, name, value, err);
    if (rc < 0)
        return rc;
    if (!trn_config_is_live(name)) {
        s_err(err, "%s cannot change while the trial runs (it needs a restart)", name);
        return -1;
    }
    if (n.micro_batch > n.batch_size)
        n.micro_batch = 0;
    /* the CUDA steps take the batch whole: a micro-batch of the whole
       batch meant none, and still does at a new batch size */
    if (!strcmp(n.backend, "cuda") && n.micro_batch == c->micro_batch &&
        c->micro_batch >= c->batch_size)
        n.micro_batch = 0;
    if (trn_config_validate(&n, err) < 0)
        return -1;
    *c = n;
    return 0;
}

int trn_config_get(const trn_config *c, const char *name, char *buf, size_t len)
{
    const s_opt *o = s_find(name);
    if (!o)
        return -1;
    const void *src = (const char *)c + o->off;
    switch (o->type) {
    case OPT_INT:
    case OPT_BOOL:
        snprintf(buf, len, "%d", *(const int *)src);
        break;
    case OPT_LONG:
        snprintf(buf, len, "%ld", *(const long *)src);
        break;
    case OPT_DOUBLE:
        snprintf(buf, len, "%.17g", *(const double *)src);
        break;
    case OPT_STR:
        snprintf(buf, len, "%s", (const char *)src);
        break;
    }
    return 0;
}

void trn_config_usage(FILE *out)
{
    fprintf(out, "usage: jizhi-train [--flag VALUE]...\n"
                 "The built-in trainer of jizhi. Every flag --foo-bar is also the trial\n"
                 "param foo_bar; a param from the study overrides the flag.\n\n");
    for (size_t i = 0; i < S_NOPTS; i++) {
        const s_opt *o = &s_opts[i];
        char left[64];
        snprintf(left, sizeof left, "--%s %s", o->flag,
                 o->type == OPT_BOOL  ? "[BOOL]"
                 : o->type == OPT_STR ? "TEXT"
                                      : "N");
        fprintf(out, "  %-30s %s", left, o->help);
        if (o->choices)
            fprintf(out, " (%s)", o->choices);
        fprintf(out, " [%s]\n", o->dflt[0] ? o->dflt : "\"\"");
    }
    fprintf(out, "  %-30s %s\n", "--help", "this text");
}

int trn_config_parse_args(trn_config *c, int argc, char **argv, FILE *out, char *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            trn_config_usage(out);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == 0) {
            s_err(err, "unexpected argument \"%s\" (flags look like --name VALUE)", a);
            return -1;
        }
        char name[80];
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
        if (len >= sizeof name) {
            s_err(err, "unknown flag \"%s\"", a);
            return -1;
        }
        memcpy(name, a + 2, len);
        name[len] = 0;
        const s_opt *o = NULL;
        for (size_t k = 0; k < S_NOPTS; k++)
            if (!strcmp(s_opts[k].flag, name))
                o = &s_opts[k];
        if (!o) {
            s_err(err, "unknown flag --%s (see jizhi-train --help)", name);
            return -1;
        }
        const char *v;
        if (eq)
            v = eq + 1;
        else if (o->type == OPT_BOOL &&
                 (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0))
            v = "1";
        else if (i + 1 < argc)
            v = argv[++i];
        else {
            s_err(err, "--%s: missing value", name);
            return -1;
        }
        char who[96];
        snprintf(who, sizeof who, "--%s", name);
        if (s_set(c, o, v, who, err) < 0)
            return -1;
    }
    return 0;
}

int trn_config_apply_params(trn_config *c, trn_param_fn fn, void *ud, char *err)
{
    if (!fn)
        return 0;
    for (size_t i = 0; i < S_NOPTS; i++) {
        char pname[64], buf[512], who[96];
        s_param_name(s_opts[i].flag, pname, sizeof pname);
        if (fn(ud, pname, buf, sizeof buf) != 1)
            continue;
        snprintf(who, sizeof who, "param %s", pname);
        if (s_set(c, &s_opts[i], buf, who, err) < 0)
            return -1;
    }
    return 0;
}

/* The letters of name, lower case, without '_' and '-'. */
static void s_letters(const char *name, char *out, size_t len)
{
    size_t n = 0;
    for (; *name && n + 1 < len; name++)
        if (*name != '_' && *name != '-')
            out[n++] = (char)tolower((unsigned char)*name);
    out[n] = 0;
}

/* The first letters of name's words ("learning_rate": "lr"); "" for a
   single word. */
static void s_initials(const char *name, char *out, size_t len)
{
    size_t n = 0;
    for (const char *p = name; *p && n + 1 < len; p++)
        if (p == name || p[-1] == '_')
            out[n++] = (char)tolower((unsigned char)*p);
    out[n] = 0;
    if (n < 2)
        out[0] = 0;
}

/* Whether name has the word `word` ('_'-separated), of 3 letters or more. */
static int s_has_word(const char *name, const char *word, size_t wlen)
{
    for (const char *p = name; wlen >= 3 && *p; p++)
        if ((p == name || p[-1] == '_') && !strncmp(p, word, wlen) &&
            (p[wlen] == 0 || p[wlen] == '_'))
            return 1;
    return 0;
}

/* How close unknown name u is to param k: 4 the same letters, 3 one is the
   other's initials, 2 a shared word, 1 one holds the other, 0 none. */
static int s_closeness(const char *u, const char *k)
{
    char lu[64], lk[64], iu[64], ik[64];
    s_letters(u, lu, sizeof lu);
    s_letters(k, lk, sizeof lk);
    if (!strcmp(lu, lk))
        return 4;
    s_initials(u, iu, sizeof iu);
    s_initials(k, ik, sizeof ik);
    if (!strcmp(iu, lk) || !strcmp(ik, lu))
        return 3;
    for (const char *w = k; *w; w++)
        if (w == k || w[-1] == '_')
            if (s_has_word(u, w, strcspn(w, "_")))
                return 2;
    if ((strlen(lk) >= 2 && strstr(lu, lk)) || (strlen(lu) >= 2 && strstr(lk, lu)))
        return 1;
    return 0;
}

size_t trn_config_unknown_params(const char *params_json, char *buf, size_t len)
{
    size_t n = 0, bl = 0;
    if (len)
        buf[0] = 0;
    json_t *params = params_json ? json_loads(params_json, 0, NULL) : NULL;
    const char *u;
    json_t *v;
    json_object_foreach(params, u, v)
    {
        char best[64] = "";
        int score = 0, known = 0;
        for (size_t i = 0; i < S_NOPTS && !known; i++) {
            char k[64];
            s_param_name(s_opts[i].flag, k, sizeof k);
            known = !strcmp(u, k);
            int c = s_closeness(u, k);
            if (c > score) {
                score = c;
                snprintf(best, sizeof best, "%s", k);
            }
        }
        if (known)
            continue;
        if (bl < len)
            bl += (size_t)snprintf(buf + bl, len - bl, "%s%s%s%s%s", n ? ", " : "", u,
                                   best[0] ? " (did you mean " : "", best,
                                   best[0] ? "?)" : "");
        n++;
    }
    json_decref(params);
    return n;
}

int trn_parse_int_list(const char *s, int *out, int max)
{
    int n = 0;
    const char *p = s;
    if (!*p)
        return 0;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > 1 << 20 || n >= max)
            return -1;
        out[n++] = (int)v;
        if (*end == 0)
            return n;
        if (*end != ',')
            return -1;
        p = end + 1;
    }
}

int trn_parse_kb_list(const char *s, long *out, int max)
{
    int n = 0;
    const char *p = s;
    if (!*p)
        return 0;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < -1 || v > 1 << 20 || n >= max)
            return -1;
        out[n++] = v;
        if (*end == 0)
            return n;
        if (*end != ',')
            return -1;
        p = end + 1;
    }
}

trn_precision trn_precision_from_name(const char *s)
{
    if (!strcmp(s, "bf16"))
        return TRN_BF16;
    if (!strcmp(s, "fp16"))
        return TRN_FP16;
    return TRN_FP32;
}

const char *trn_precision_name(trn_precision p)
{
    return p == TRN_BF16 ? "bf16" : p == TRN_FP16 ? "fp16" : "fp32";
}

int trn_cnn_ops(int stages, int blocks)
{
    return 3 + 3 * (stages - 1) + 7 * stages * blocks + 2;
}

int trn_config_validate(const trn_config *c, char *err)
{
    int sizes[32], ns = 0;
    if (!strcmp(c->model, "mlp") && trn_parse_int_list(c->hidden, sizes, 32) < 0) {
        s_err(err, "--hidden: expected comma-separated sizes like 256,256, got \"%s\"",
              c->hidden);
        return -1;
    }
    if (!strcmp(c->model, "cnn") &&
        (ns = trn_parse_int_list(c->channels, sizes, 8)) < 1) {
        s_err(err,
              "--channels: expected 1 to 8 comma-separated sizes like 16,32, got \"%s\"",
              c->channels);
        return -1;
    }
    if (!strcmp(c->model, "cnn") && trn_cnn_ops(ns, c->blocks) > TRN_MAX_OPS) {
        s_err(err,
              "model too large: %d ops (--channels: %d stages, --blocks %d), at most %d; "
              "use fewer stages or blocks",
              trn_cnn_ops(ns, c->blocks), ns, c->blocks, TRN_MAX_OPS);
        return -1;
    }
    long kb[TRN_COMPARE_KB_MAX];
    if (trn_parse_kb_list(c->fusion_compare, kb, TRN_COMPARE_KB_MAX) < 0) {
        s_err(err,
              "--fusion-compare: expected up to %d comma-separated KiB like 0,256,1024 "
              "(each -1 .. 1048576), got \"%s\"",
              TRN_COMPARE_KB_MAX, c->fusion_compare);
        return -1;
    }
    if (c->fusion_compare[0] && c->topk > 0) {
        s_err(err, "--fusion-compare: compares dense layouts; it cannot run with --topk");
        return -1;
    }
    if (trn_cudnn_refuse(c, err) < 0) /* --backend cuda --model cnn */
        return -1;
    if (c->micro_batch > c->batch_size) {
        s_err(err, "--micro-batch: %d is larger than --batch-size %d", c->micro_batch,
              c->batch_size);
        return -1;
    }
    if (strcmp(c->loss_scale, "auto") && strcmp(c->loss_scale, "dynamic") &&
        strcmp(c->loss_scale, "none")) {
        char *end;
        double v = strtod(c->loss_scale, &end);
        if (end == c->loss_scale || *end || !(v > 0) || !isfinite(v)) {
            s_err(err,
                  "--loss-scale: expected auto, dynamic, none or a positive number, got "
                  "\"%s\"",
                  c->loss_scale);
            return -1;
        }
    }
    if (c->precision_schedule[0]) {
        trn_prec_schedule ps;
        char e2[TRN_ERRLEN];
        if (trn_prec_schedule_parse(&ps, c->precision_schedule, e2) < 0) {
            s_err(err, "--precision-schedule: %s", e2);
            return -1;
        }
    }
    if (!strcmp(c->dataset, "fashion-mnist") && c->train_subset && c->train_subset < 1) {
        s_err(err, "--train-subset: must be >= 1");
        return -1;
    }
    return 0;
}
