/*  test_trn_ckpt.c - what a checkpoint restores before and after the model
    is built (ckpt.c): its config read without a trainer (what main uses to
    build the model for the run's restored config), the options that cannot
    change live and that it overrides (named for the resume's line), a
    checkpoint written before zero_gamma was recorded, a live load in
    another precision said by --verbose, and the convolutions' path named
    for images with several channels. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "jz_test.h"
#include "trainer/trn.h"

#include "trn_fake_io.h"

static void s_cnn(trn_config *c)
{
    s_cfg(c);
    strcpy(c->model, "cnn");
    strcpy(c->channels, "4");
    c->batch_size = 16;
}

static unsigned char *s_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len);
    if (b && fread(b, 1, *len, f) != *len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

/* The checkpoint's restored options land on the command's config, the rest
   stays; the options that cannot change live and differ are named, the live
   ones (lr) are not; a bad file changes nothing. */
TEST(read_config_takes_the_checkpoints_options)
{
    trn_config c;
    s_cnn(&c);
    strcpy(c.precision_schedule, "fp32:1,bf16:1");
    c.seed = 3;
    c.zero_gamma = 0;
    c.lr = 0.02;
    char path[512], err[TRN_ERRLEN];
    snprintf(path, sizeof path, "%s/cfg.jzck", g_dir);
    trn_trainer *a = s_new(&c);
    REQUIRE(a);
    trn_trainer_step(a);
    REQUIRE(trn_trainer_save(a, path, err) == 0);
    trn_trainer_destroy(&a);

    trn_config cmd, r;
    s_cnn(&cmd);
    strcpy(cmd.precision, "bf16");
    cmd.epochs = 7;
    r = cmd;
    REQUIRE(trn_ckpt_read_config(path, &r, err) == 0);
    CHECK(!strcmp(r.precision, "fp32"));
    CHECK(!strcmp(r.precision_schedule, "fp32:1,bf16:1"));
    CHECK(r.seed == 3 && r.zero_gamma == 0 && r.lr == 0.02);
    CHECK(r.epochs == 7); /* not restored: the command's */
    char kept[512];
    CHECK(trn_ckpt_kept_options(&cmd, &r, kept, sizeof kept) > 0);
    printf("  kept: %s\n", kept);
    CHECK(strstr(kept, "zero_gamma=0 (this command: 1)") != NULL);
    CHECK(strstr(kept, "seed=3 (this command: 1)") != NULL);
    CHECK(strstr(kept, "lr") == NULL && strstr(kept, "precision") == NULL);
    CHECK(trn_ckpt_kept_options(&r, &r, kept, sizeof kept) == 0 && kept[0] == 0);

    trn_config before = cmd;
    CHECK(trn_ckpt_read_config("/nonexistent/x.jzck", &cmd, err) < 0);
    CHECK(strstr(err, "cannot open") != NULL);
    CHECK(!memcmp(&before, &cmd, sizeof cmd));
}

/* A checkpoint written before its config text recorded zero_gamma (the
   line removed, the lengths and checksum redone) loads; the run keeps the
   resuming command's value, as nothing says how it began, and no override
   is named. */
TEST(old_checkpoint_without_zero_gamma_keeps_the_commands_value)
{
    trn_config c;
    s_cnn(&c);
    c.zero_gamma = 0;
    char path[512], old[512], err[TRN_ERRLEN];
    snprintf(path, sizeof path, "%s/zg.jzck", g_dir);
    snprintf(old, sizeof old, "%s/zg-old.jzck", g_dir);
    trn_trainer *a = s_new(&c);
    REQUIRE(a);
    trn_trainer_step(a);
    REQUIRE(trn_trainer_save(a, path, err) == 0);
    size_t len;
    unsigned char *b = s_slurp(path, &len);
    REQUIRE(b);
    const char *line = "zero_gamma=0\n";
    size_t ln = strlen(line), at = 0;
    for (size_t i = 24; i + ln <= len && !at; i++)
        if (!memcmp(b + i, line, ln))
            at = i;
    REQUIRE(at > 28);
    uint32_t cl;
    uint64_t plen;
    memcpy(&cl, b + at - 4, 4); /* the config text's length: it starts there */
    REQUIRE(cl > ln && at - 4 > 24);
    cl -= (uint32_t)ln;
    memcpy(b + at - 4, &cl, 4);
    memmove(b + at, b + at + ln, len - at - ln);
    len -= ln;
    memcpy(&plen, b + 16, 8);
    plen -= ln;
    memcpy(b + 16, &plen, 8);
    uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, (uInt)(len - 4));
    memcpy(b + len - 4, &crc, 4);
    FILE *f = fopen(old, "wb");
    REQUIRE(f);
    fwrite(b, 1, len, f);
    fclose(f);
    free(b);

    trn_config cmd;
    s_cnn(&cmd); /* zero_gamma 1 */
    trn_config r = cmd;
    REQUIRE(trn_ckpt_read_config(old, &r, err) == 0);
    CHECK(r.zero_gamma == 1);
    char kept[256];
    CHECK(trn_ckpt_kept_options(&cmd, &r, kept, sizeof kept) == 0);
    trn_trainer *t = s_new(&cmd);
    REQUIRE(t);
    if (trn_trainer_load(t, old, err) < 0)
        printf("  %s\n", err);
    CHECK(trn_trainer_step_count(t) == 1);
    CHECK(trn_trainer_config(t)->zero_gamma == 1);
    /* its gammas are the checkpoint's all the same */
    trn_net *na = trn_trainer_net(a), *nt = trn_trainer_net(t);
    int same = 1;
    for (int i = 0; i < trn_net_nparams(na); i++)
        same &= !memcmp(trn_net_param(na, i)->w, trn_net_param(nt, i)->w,
                        (size_t)trn_net_param(na, i)->n * sizeof(float));
    CHECK(same);
    trn_trainer_destroy(&a), trn_trainer_destroy(&t);
}

/* Runs one step of t with stderr in a file; returns what it printed. */
static char *s_step_stderr(trn_trainer *t)
{
    char path[512];
    snprintf(path, sizeof path, "%s/stderr.txt", g_dir);
    fflush(stderr);
    int keep = dup(2), fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    if (keep < 0 || fd < 0)
        return NULL;
    dup2(fd, 2);
    close(fd);
    trn_trainer_step(t);
    fflush(stderr);
    dup2(keep, 2);
    close(keep);
    size_t len;
    unsigned char *b = s_slurp(path, &len);
    char *s = b ? realloc(b, len + 1) : NULL;
    if (s)
        s[len] = 0;
    else
        free(b);
    return s;
}

/* A live load (a PBT exploit) that brings another precision: --verbose
   names the kernels at the next step, as a schedule's epoch or a live set
   does (before: the load set the precision silently). A load in the same
   precision says nothing. */
TEST(live_load_in_another_precision_says_the_kernels)
{
    trn_config c;
    s_cfg(&c);
    strcpy(c.precision, "bf16");
    char path[512], err[TRN_ERRLEN];
    snprintf(path, sizeof path, "%s/bf16.jzck", g_dir);
    trn_trainer *a = s_new(&c);
    REQUIRE(a);
    s_step_stderr(a);
    REQUIRE(trn_trainer_save(a, path, err) == 0);
    strcpy(c.precision, "fp32");
    c.verbose = 1;
    trn_trainer *t = s_new(&c);
    REQUIRE(t);
    char *out = s_step_stderr(t);
    REQUIRE(out);
    CHECK(strstr(out, "from step") == NULL); /* fp32 as at its start */
    free(out);
    REQUIRE(trn_trainer_load(t, path, err) == 0);
    out = s_step_stderr(t);
    REQUIRE(out);
    printf("  %s", out);
    CHECK(strstr(out, "jizhi-train: bf16 from step 2: linears: ") != NULL);
    free(out);
    REQUIRE(trn_trainer_load(t, path, err) == 0);
    out = s_step_stderr(t);
    REQUIRE(out);
    CHECK(strstr(out, "from step") == NULL);
    free(out);
    trn_trainer_destroy(&a), trn_trainer_destroy(&t);
}

/* Images with several channels keep the CNN on im2col + GEMM under --conv
   auto, and the line names that reason alone (no dataset of the CLI has
   several channels, so only here). */
TEST(several_channels_named_as_the_reason)
{
    trn_config c;
    s_cnn(&c);
    char err[TRN_ERRLEN], line[512];
    trn_net *n = trn_net_new(&c, 3, 28, 28, 10, err);
    REQUIRE(n);
    trn_net_set_precision(n, TRN_BF16);
    REQUIRE(trn_net_conv_describe(n, 4, line, sizeof line) == 0);
    printf("  %s\n", line);
    CHECK(!strcmp(line, "im2col + OpenBLAS GEMM, CNHW activations (images with several "
                        "channels)") ||
          !strcmp(line, "im2col + OpenBLAS GEMM, CNHW activations (no oneDNN in this "
                        "build)"));
    trn_net_destroy(&n);
}

int main(void)
{
    char err[TRN_ERRLEN];
    snprintf(g_dir, sizeof g_dir, "/tmp/test_trn_ckpt.XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    if (trn_data_synthetic(&g_syn, 512, 1000, err) < 0 ||
        trn_data_synthetic(&g_syn_val, 64, 2000, err) < 0)
        return 1;
    trn_cpu_set_threads(1);
    RUN(read_config_takes_the_checkpoints_options);
    RUN(old_checkpoint_without_zero_gamma_keeps_the_commands_value);
    RUN(live_load_in_another_precision_says_the_kernels);
    RUN(several_channels_named_as_the_reason);
    trn_data_free(&g_syn);
    trn_data_free(&g_syn_val);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        printf("could not remove %s\n", g_dir);
    TEST_DONE();
}
