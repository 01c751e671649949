/*  test_trn_config.c - jizhi-train's flags and params (one namespace, a
    param wins over a flag), clear errors for bad flags and values, and
    clear errors for missing, foreign, truncated or corrupt data files. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "jz_test.h"
#include "trainer/trn.h"

static char g_dir[256];

static int s_parse(trn_config *c, char *err, ...)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = "jizhi-train";
    va_list ap;
    va_start(ap, err);
    char *a;
    while ((a = va_arg(ap, char *)) && argc < 31)
        argv[argc++] = a;
    va_end(ap);
    FILE *devnull = fopen("/dev/null", "w");
    int rc = trn_config_parse_args(c, argc, argv, devnull, err);
    fclose(devnull);
    return rc;
}

TEST(flags)
{
    trn_config c;
    char err[TRN_ERRLEN];
    trn_config_defaults(&c);
    CHECK_STR(c.optimizer, "sgd");
    CHECK(c.batch_size == 128 && c.scale_window == 2000 && c.init_loss_scale == 65536);
    REQUIRE(s_parse(&c, err, "--batch-size", "256", "--lr=0.3", "--optimizer", "lars",
                    "--nesterov", "--hidden", "64,32", "--precision", "bf16", NULL) == 0);
    CHECK(c.batch_size == 256);
    CHECK(c.lr == 0.3);
    CHECK_STR(c.optimizer, "lars");
    CHECK(c.nesterov == 1);
    CHECK_STR(c.hidden, "64,32");
    CHECK(trn_config_validate(&c, err) == 0);
    CHECK(s_parse(&c, err, "--help", NULL) == 1);

    CHECK(s_parse(&c, err, "--batch-sise", "3", NULL) < 0);
    CHECK(strstr(err, "unknown flag --batch-sise") != NULL);
    CHECK(s_parse(&c, err, "--lr", NULL) < 0);
    CHECK(strstr(err, "--lr: missing value") != NULL);
    CHECK(s_parse(&c, err, "--lr", "fast", NULL) < 0);
    CHECK(strstr(err, "--lr: expected a number") != NULL);
    CHECK(s_parse(&c, err, "--batch-size", "0", NULL) < 0);
    CHECK(strstr(err, "out of range") != NULL);
    CHECK(s_parse(&c, err, "--epochs", "2.5", NULL) < 0);
    CHECK(strstr(err, "whole number") != NULL);
    CHECK(s_parse(&c, err, "--optimizer", "rmsprop", NULL) < 0);
    CHECK(strstr(err, "sgd|lars|lamb|adamw") != NULL);
    CHECK(s_parse(&c, err, "positional", NULL) < 0);

    trn_config_defaults(&c);
    strcpy(c.hidden, "64,x");
    CHECK(trn_config_validate(&c, err) < 0 && strstr(err, "--hidden") != NULL);
    trn_config_defaults(&c);
    c.micro_batch = 500;
    CHECK(trn_config_validate(&c, err) < 0 && strstr(err, "--micro-batch") != NULL);
    trn_config_defaults(&c);
    strcpy(c.loss_scale, "huge");
    CHECK(trn_config_validate(&c, err) < 0 && strstr(err, "--loss-scale") != NULL);
    trn_config_defaults(&c);
    strcpy(c.precision_schedule, "fp32:1,int8:2");
    CHECK(trn_config_validate(&c, err) < 0 && strstr(err, "int8") != NULL);
}

/* params: lr=0.2 (text), batch_size=512, momentum=bad */
static int s_params(void *ud, const char *name, char *buf, size_t len)
{
    int bad = *(int *)ud;
    if (!strcmp(name, "lr"))
        return snprintf(buf, len, "0.2"), 1;
    if (!strcmp(name, "batch_size"))
        return snprintf(buf, len, "512"), 1;
    if (bad && !strcmp(name, "momentum"))
        return snprintf(buf, len, "2"), 1;
    return 0;
}

TEST(params_override_flags)
{
    trn_config c;
    char err[TRN_ERRLEN];
    trn_config_defaults(&c);
    REQUIRE(s_parse(&c, err, "--lr", "0.5", "--batch-size", "64", "--epochs", "7",
                    NULL) == 0);
    int bad = 0;
    REQUIRE(trn_config_apply_params(&c, s_params, &bad, err) == 0);
    CHECK(c.lr == 0.2); /* the tuned param wins */
    CHECK(c.batch_size == 512);
    CHECK(c.epochs == 7); /* the flag stays where no param is given */
    bad = 1;
    CHECK(trn_config_apply_params(&c, s_params, &bad, err) < 0);
    CHECK(strstr(err, "param momentum") != NULL);
    /* both spellings name the same option */
    CHECK(trn_config_set(&c, "weight_decay", "0.01", err) == 0 && c.weight_decay == 0.01);
    CHECK(trn_config_set(&c, "weight-decay", "0.02", err) == 0 && c.weight_decay == 0.02);
    CHECK(trn_config_set(&c, "nope", "1", err) == -2);
    char v[64];
    CHECK(trn_config_get(&c, "weight_decay", v, sizeof v) == 0);
    CHECK(strtod(v, NULL) == 0.02);
}

static void s_write_gz(const char *path, const void *p, size_t n)
{
    gzFile f = gzopen(path, "wb");
    gzwrite(f, p, (unsigned)n);
    gzclose(f);
}

static void s_idx_images(unsigned char *h, unsigned n)
{
    const unsigned v[4] = {0x803, n, 28, 28};
    for (int i = 0; i < 4; i++)
        h[4 * i] = (unsigned char)(v[i] >> 24),
              h[4 * i + 1] = (unsigned char)(v[i] >> 16),
              h[4 * i + 2] = (unsigned char)(v[i] >> 8),
              h[4 * i + 3] = (unsigned char)v[i];
}

TEST(data_errors)
{
    char img[512], lab[512], err[TRN_ERRLEN];
    trn_dataset d;
    snprintf(img, sizeof img, "%s/img.gz", g_dir);
    snprintf(lab, sizeof lab, "%s/lab.gz", g_dir);
    /* 3 valid images and labels */
    size_t isz = 16 + 3 * 784;
    unsigned char *ib = calloc(1, isz);
    s_idx_images(ib, 3);
    unsigned char lb[11] = {0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 9};
    s_write_gz(img, ib, isz);
    s_write_gz(lab, lb, sizeof lb);
    REQUIRE(trn_data_load_idx(&d, img, lab, err) == 0);
    CHECK(d.n == 3 && d.dim == 784 && d.y[2] == 9);
    CHECK_NEAR(d.x[0], -0.2860 / 0.3530, 1e-6);
    trn_data_free(&d);

    CHECK(trn_data_load_idx(&d, "/nonexistent/img.gz", lab, err) < 0);
    CHECK(strstr(err, "cannot open") && strstr(err, "dataset-fashion-mnist"));
    s_write_gz(img, ib, isz - 100); /* truncated pixels */
    CHECK(trn_data_load_idx(&d, img, lab, err) < 0);
    CHECK(strstr(err, "truncated") != NULL);
    ib[3] = 0x01; /* label magic on an image file */
    s_write_gz(img, ib, isz);
    CHECK(trn_data_load_idx(&d, img, lab, err) < 0);
    CHECK(strstr(err, "not an IDX image file") != NULL);
    ib[3] = 0x03;
    lb[10] = 42; /* label out of range */
    s_write_gz(img, ib, isz);
    s_write_gz(lab, lb, sizeof lb);
    CHECK(trn_data_load_idx(&d, img, lab, err) < 0);
    CHECK(strstr(err, "not in 0..9") != NULL);
    lb[10] = 1;
    lb[7] = 4; /* 4 labels for 3 images */
    s_write_gz(lab, lb, sizeof lb);
    CHECK(trn_data_load_idx(&d, img, lab, err) < 0);
    CHECK(strstr(err, "has 4 labels") != NULL);
    lb[7] = 3;
    /* a damaged gzip stream */
    s_write_gz(lab, lb, sizeof lb);
    FILE *f = fopen(img, "wb");
    unsigned char junk[600];
    gzFile g;
    fclose(f);
    g = gzopen(img, "wb");
    for (int i = 0; i < 600; i++)
        junk[i] = (unsigned char)(i * 7);
    gzwrite(g, ib, 16);
    gzwrite(g, junk, sizeof junk);
    gzclose(g);
    f = fopen(img, "r+b");
    fseek(f, 30, SEEK_SET);
    fwrite("\xff\xff\xff\xff\xff\xff\xff\xff", 1, 8, f);
    fclose(f);
    CHECK(trn_data_load_idx(&d, img, lab, err) < 0);
    CHECK(strstr(err, "corrupt") || strstr(err, "truncated") ||
          strstr(err, "not an IDX"));
    free(ib);

    trn_config c;
    trn_config_defaults(&c);
    strcpy(c.data_dir, g_dir);
    trn_dataset a, b, t;
    CHECK(trn_data_load(&c, &a, &b, &t, err) < 0);
    CHECK(strstr(err, "train-images-idx3-ubyte.gz") != NULL);
}

/* One table says which options change live and which a checkpoint carries. */
TEST(live_and_restored_options)
{
    CHECK(trn_config_is_live("lr") && trn_config_is_live("batch-size"));
    CHECK(trn_config_is_live("batch_size") && trn_config_is_live("epochs"));
    CHECK(!trn_config_is_live("model") && !trn_config_is_live("seed"));
    CHECK(!trn_config_is_live("no_such_option"));
    char name[64];
    int n = 0, saw_lr = 0;
    for (size_t i = 0; trn_config_live_param(i, name, sizeof name); i++, n++) {
        CHECK(strchr(name, '-') == NULL);
        CHECK(trn_config_is_live(name));
        saw_lr |= !strcmp(name, "lr");
    }
    CHECK(n == 27 && saw_lr); /* eval_every_samples is the 27th */
    trn_config c;
    trn_config_defaults(&c);
    char err[TRN_ERRLEN];
    REQUIRE(trn_config_set(&c, "lr", "0.125", err) == 0);
    char text[8192];
    size_t len = trn_config_restored_text(&c, text, sizeof text);
    CHECK(len == strlen(text));
    CHECK(strstr(text, "lr=0.125\n") != NULL);
    CHECK(strstr(text, "seed=1\n") != NULL);
    CHECK(strstr(text, "zero_gamma=1\n") != NULL); /* init only, as the seed */
    CHECK(strstr(text, "per_layer_scale=") != NULL);
    /* the run's length is the command's */
    CHECK(strncmp(text, "epochs=", 7) != 0 && strstr(text, "\nepochs=") == NULL);
    int lines = 0;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    CHECK(lines == 23);
    char small[8];
    CHECK(trn_config_restored_text(&c, small, sizeof small) == 7 && strlen(small) == 7);
}

TEST(fashion_mnist_split)
{
    trn_config c;
    trn_config_defaults(&c);
    trn_dataset a, b, t;
    char err[TRN_ERRLEN];
    REQUIRE(trn_data_load(&c, &a, &b, &t, err) == 0);
    CHECK(a.n == 55000 && b.n == 5000 && t.n == 10000);
    /* normalised: the training mean is about 0, the std about 1 */
    double s = 0, sq = 0;
    long n = (long)a.n * a.dim;
    for (long i = 0; i < n; i++)
        s += a.x[i], sq += (double)a.x[i] * a.x[i];
    CHECK_NEAR(s / n, 0.0, 0.01);
    CHECK_NEAR(sqrt(sq / n), 1.0, 0.02);
    int counts[10] = {0};
    for (int i = 0; i < b.n; i++)
        counts[b.y[i]]++;
    for (int k = 0; k < 10; k++)
        CHECK(counts[k] > 400 && counts[k] < 600); /* a random split is balanced */
    trn_data_free(&a), trn_data_free(&b), trn_data_free(&t);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/test_trn_config.XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    RUN(flags);
    RUN(params_override_flags);
    RUN(data_errors);
    RUN(live_and_restored_options);
    RUN(fashion_mnist_split);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        printf("could not remove %s\n", g_dir);
    TEST_DONE();
}
