/*  config.c - jizhi-train's options: one table, one namespace.

    Every option is a flag --foo-bar and a param foo_bar (DESIGN §6,
    contract). Order of precedence: defaults < command-line flags < the
    trial's params from the helper, so a study's `space` can tune any option
    even when its command passes a fixed flag. Values are checked against
    the option's type and range, and the message names the option.
*/
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/trn.h"

typedef enum { OPT_INT, OPT_LONG, OPT_DOUBLE, OPT_STR, OPT_BOOL } s_opt_type;

typedef struct {
    const char *flag; /* without the leading "--" */
    s_opt_type type;
    size_t off;          /* offset in trn_config */
    size_t size;         /* OPT_STR: buffer size */
    double lo, hi;       /* numeric range, inclusive */
    const char *choices; /* OPT_STR: "a|b|c" or NULL */
    const char *dflt;    /* default as text */
    const char *help;
} s_opt;

#define O(f) offsetof(trn_config, f)
#define SZ(f) sizeof(((trn_config *)0)->f)

static const s_opt s_opts[] = {
    {"dataset", OPT_STR, O(dataset), SZ(dataset), 0, 0, "fashion-mnist|synthetic",
     "fashion-mnist", "training data"},
    {"data-dir", OPT_STR, O(data_dir), SZ(data_dir), 0, 0, NULL,
     "/usr/share/datasets/fashion-mnist", "directory of the IDX .gz files"},
    {"val-size", OPT_INT, O(val_size), 0, 0, 1e7, NULL, "5000",
     "validation examples held out of the training set"},
    {"train-subset", OPT_INT, O(train_subset), 0, 0, 1e7, NULL, "0",
     "train on the first N examples only (0 = all)"},
    {"synthetic-n", OPT_INT, O(synthetic_n), 0, 10, 1e7, NULL, "6000",
     "synthetic: training examples"},
    {"model", OPT_STR, O(model), SZ(model), 0, 0, "mlp|cnn", "mlp", "model"},
    {"hidden", OPT_STR, O(hidden), SZ(hidden), 0, 0, NULL, "256,256",
     "mlp: hidden layer sizes, comma-separated"},
    {"channels", OPT_STR, O(channels), SZ(channels), 0, 0, NULL, "16,32",
     "cnn: channels per stage, comma-separated"},
    {"blocks", OPT_INT, O(blocks), 0, 0, 16, NULL, "1", "cnn: residual blocks per stage"},
    {"epochs", OPT_INT, O(epochs), 0, 1, 100000, NULL, "10", "epochs to train"},
    {"max-steps", OPT_LONG, O(max_steps), 0, 0, 1e15, NULL, "0",
     "stop after N steps (0 = no limit)"},
    {"batch-size", OPT_INT, O(batch_size), 0, 1, 1 << 20, NULL, "128",
     "global batch size"},
    {"micro-batch", OPT_INT, O(micro_batch), 0, 0, 1 << 20, NULL, "0",
     "gradient-accumulation chunk (0 = whole batch)"},
    {"lr", OPT_DOUBLE, O(lr), 0, 0, 1e6, NULL, "0.05",
     "peak learning rate (at --base-batch when scaling)"},
    {"momentum", OPT_DOUBLE, O(momentum), 0, 0, 0.999999, NULL, "0.9",
     "SGD/LARS momentum"},
    {"nesterov", OPT_BOOL, O(nesterov), 0, 0, 1, NULL, "0", "SGD: Nesterov momentum"},
    {"weight-decay", OPT_DOUBLE, O(weight_decay), 0, 0, 10, NULL, "0.0005",
     "weight decay (decoupled for adamw/lamb)"},
    {"optimizer", OPT_STR, O(optimizer), SZ(optimizer), 0, 0, "sgd|lars|lamb|adamw",
     "sgd", "optimiser"},
    {"beta1", OPT_DOUBLE, O(beta1), 0, 0, 0.999999, NULL, "0.9",
     "adamw/lamb: first-moment decay"},
    {"beta2", OPT_DOUBLE, O(beta2), 0, 0, 0.9999999, NULL, "0.999",
     "adamw/lamb: second-moment decay"},
    {"eps", OPT_DOUBLE, O(eps), 0, 1e-30, 1, NULL, "1e-8", "adamw/lamb: epsilon"},
    {"trust", OPT_DOUBLE, O(trust), 0, 1e-9, 10, NULL, "0.001",
     "lars: trust coefficient eta"},
    {"warmup-epochs", OPT_DOUBLE, O(warmup_epochs), 0, 0, 1e5, NULL, "0",
     "linear warmup length in epochs"},
    {"schedule", OPT_STR, O(schedule), SZ(schedule), 0, 0, "constant|cosine|poly",
     "constant", "lr decay after warmup"},
    {"poly-power", OPT_DOUBLE, O(poly_power), 0, 0, 10, NULL, "2",
     "poly: decay exponent"},
    {"lr-scaling", OPT_STR, O(lr_scaling), SZ(lr_scaling), 0, 0, "none|linear|sqrt",
     "none", "scale lr with batch size / base-batch"},
    {"base-batch", OPT_INT, O(base_batch), 0, 1, 1 << 20, NULL, "128",
     "batch size at which --lr is given"},
    {"precision", OPT_STR, O(precision), SZ(precision), 0, 0, "fp32|bf16|fp16", "fp32",
     "compute precision (fp32 master weights)"},
    {"precision-schedule", OPT_STR, O(precision_schedule), SZ(precision_schedule), 0, 0,
     NULL, "", "per-epoch precision, e.g. fp32:1,bf16:8,fp32:1"},
    {"loss-scale", OPT_STR, O(loss_scale), SZ(loss_scale), 0, 0, NULL, "auto",
     "auto|dynamic|none|<number> (auto: dynamic for fp16)"},
    {"init-loss-scale", OPT_DOUBLE, O(init_loss_scale), 0, 1e-30, 1e30, NULL, "65536",
     "dynamic: initial loss scale"},
    {"scale-window", OPT_INT, O(scale_window), 0, 1, 1 << 30, NULL, "2000",
     "dynamic: clean steps before doubling the scale"},
    {"per-layer-scale", OPT_BOOL, O(per_layer_scale), 0, 0, 1, NULL, "0",
     "one dynamic loss scale per layer"},
    {"label-smoothing", OPT_DOUBLE, O(label_smoothing), 0, 0, 0.999, NULL, "0",
     "cross-entropy label smoothing"},
    {"seed", OPT_LONG, O(seed), 0, 0, 9.2e18, NULL, "1", "random seed (init, shuffling)"},
    {"threads", OPT_INT, O(threads), 0, 0, 1024, NULL, "0",
     "CPU threads (0 = all cores)"},
    {"log-every", OPT_INT, O(log_every), 0, 1, 1 << 30, NULL, "50",
     "report training metrics every N steps"},
    {"eval-every", OPT_INT, O(eval_every), 0, 0, 1 << 30, NULL, "0",
     "evaluate every N steps (0 = each epoch)"},
    {"checkpoint-dir", OPT_STR, O(checkpoint_dir), SZ(checkpoint_dir), 0, 0, NULL, "",
     "checkpoint directory (default: the helper's)"},
    {"checkpoint-every", OPT_INT, O(checkpoint_every), 0, 0, 1 << 30, NULL, "0",
     "checkpoint every N epochs (0 = on request)"},
    {"resume", OPT_STR, O(resume), SZ(resume), 0, 0, NULL, "",
     "resume from this checkpoint"},
    {"save", OPT_STR, O(save), SZ(save), 0, 0, NULL, "",
     "write a checkpoint here at the end"},
    {"backend", OPT_STR, O(backend), SZ(backend), 0, 0, "cpu|cuda", "cpu",
     "compute backend"},
    {"quiet", OPT_BOOL, O(quiet), 0, 0, 1, NULL, "0", "no progress lines on stderr"},
    {"comm", OPT_STR, O(comm), SZ(comm), 0, 0, "auto|local|mpi|nccl", "auto",
     "rank communication (auto: mpi under mpirun, else one rank); command line only"},
    {"allreduce", OPT_STR, O(allreduce), SZ(allreduce), 0, 0, "ring|hier|native", "ring",
     "all-reduce: ring, hierarchical (node, leaders, node) or the backend's own"},
    {"ranks-per-node", OPT_INT, O(ranks_per_node), 0, 0, 1 << 20, NULL, "0",
     "hier: ranks per node (0 = from MPI's shared-memory split)"},
    {"fusion-kb", OPT_LONG, O(fusion_kb), 0, -1, 1 << 20, NULL, "-1",
     "gradient bucket KiB (0 = no fusion, -1 = auto from a measured curve)"},
    {"overlap", OPT_BOOL, O(overlap), 0, 0, 1, NULL, "1",
     "all-reduce buckets on a thread while backward continues"},
    {"wire", OPT_STR, O(wire), SZ(wire), 0, 0, "fp32|fp16|bf16", "fp32",
     "gradient format on the wire (ring, hier)"},
    {"topk", OPT_DOUBLE, O(topk), 0, 0, 1, NULL, "0",
     "top-k sparsification: fraction of each bucket sent, error feedback (0 = dense)"},
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

int trn_config_validate(const trn_config *c, char *err)
{
    int sizes[32];
    if (!strcmp(c->model, "mlp") && trn_parse_int_list(c->hidden, sizes, 32) < 0) {
        s_err(err, "--hidden: expected comma-separated sizes like 256,256, got \"%s\"",
              c->hidden);
        return -1;
    }
    if (!strcmp(c->model, "cnn") && trn_parse_int_list(c->channels, sizes, 8) < 1) {
        s_err(err,
              "--channels: expected 1 to 8 comma-separated sizes like 16,32, got \"%s\"",
              c->channels);
        return -1;
    }
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
