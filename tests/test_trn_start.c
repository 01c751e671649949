/*  test_trn_start.c - the trainer's data at the start and the end of a
    run: the training subset's rows are the full set's, decompressed cache
    copies give the same data, the test set is read at the end of a run
    (never by a stopped one), a test file missing at the start fails the
    start, one that cannot be read at the end costs the test_* metrics and
    not the run, and eval_at_step's evaluation is reported and flushed at
    once. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jz_test.h"
#include "trainer/trn.h"

static char g_fmnist_dir[512]; /* the default --data-dir */

#include "trn_fake_io.h"

/* The training subset and the validation split are converted from the
   pixel bytes row by row (trainer/data.c keeps the full set as bytes):
   the rows are the full set's, the training rows in their order, each
   pixel the normalisation of its byte, exactly. */
TEST(subset_rows_are_the_full_sets_rows)
{
    trn_config c;
    trn_config_defaults(&c);
    c.train_subset = 300;
    c.val_size = 100;
    trn_dataset tr, va, te, full;
    char err[TRN_ERRLEN], pi[600], pl[600];
    REQUIRE(trn_data_load(&c, &tr, &va, &te, err) == 0);
    snprintf(pi, sizeof pi, "%s/train-images-idx3-ubyte.gz", c.data_dir);
    snprintf(pl, sizeof pl, "%s/train-labels-idx1-ubyte.gz", c.data_dir);
    REQUIRE(trn_data_load_idx(&full, pi, pl, err) == 0);
    CHECK(tr.n == 300 && va.n == 100 && full.n == 60000 && te.n == 10000);
    size_t row = (size_t)full.dim * sizeof(float);
    int i = 0, ordered = 1, exact = 1;
    for (int k = 0; k < tr.n; k++, i++) { /* increasing rows of the full set */
        while (i < full.n &&
               memcmp(tr.x + (size_t)k * full.dim, full.x + (size_t)i * full.dim, row))
            i++;
        ordered &= i < full.n && tr.y[k] == full.y[i];
    }
    CHECK(ordered);
    int found = 0;
    for (int k = 0; k < va.n; k++)
        for (int j = 0; j < full.n; j++)
            if (!memcmp(va.x + (size_t)k * full.dim, full.x + (size_t)j * full.dim,
                        row)) {
                found += va.y[k] == full.y[j];
                break;
            }
    CHECK(found == va.n);
    for (size_t j = 0; j < (size_t)tr.n * tr.dim; j++) {
        double b = nearbyint(((double)tr.x[j] * 0.3530 + 0.2860) * 255.0);
        exact &= b >= 0 && b <= 255 && tr.x[j] == ((float)b / 255.0f - 0.2860f) / 0.3530f;
    }
    CHECK(exact);
    trn_data_free(&tr);
    trn_data_free(&va);
    trn_data_free(&te);
    trn_data_free(&full);
}

/* 1 when a and b hold the same examples, byte for byte. */
static int s_same_data(const trn_dataset *a, const trn_dataset *b)
{
    return a->n == b->n && a->dim == b->dim &&
           !memcmp(a->x, b->x, (size_t)a->n * a->dim * sizeof(float)) &&
           !memcmp(a->y, b->y, (size_t)a->n);
}

/* --data-cache: the first load leaves decompressed copies of the image
   files, the next loads read them (a changed byte in a copy shows in the
   data), the data are exactly the .gz's, and a truncated copy is passed
   over for the .gz (and written again). */
TEST(decompressed_copies_give_the_same_data)
{
    char dir[] = "/tmp/jz-test-datacache-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    trn_config c;
    trn_config_defaults(&c);
    c.train_subset = 300;
    c.val_size = 100;
    char err[TRN_ERRLEN], copy[600];
    trn_dataset ref[3], got[3];
    snprintf(c.data_cache, sizeof c.data_cache, "off");
    REQUIRE(trn_data_load(&c, &ref[0], &ref[1], &ref[2], err) == 0);
    snprintf(c.data_cache, sizeof c.data_cache, "%s/sub", dir);
    REQUIRE(trn_data_load(&c, &got[0], &got[1], &got[2], err) == 0); /* writes */
    for (int k = 0; k < 3; k++) {
        CHECK(s_same_data(&ref[k], &got[k]));
        trn_data_free(&got[k]);
    }
    struct stat st;
    snprintf(copy, sizeof copy, "%s/train-images-idx3-ubyte.gz-", c.data_cache);
    char gz[600];
    snprintf(gz, sizeof gz, "%s/train-images-idx3-ubyte.gz", c.data_dir);
    REQUIRE(stat(gz, &st) == 0);
    snprintf(copy + strlen(copy), sizeof copy - strlen(copy), "%lld-%lld.%09ld.idx",
             (long long)st.st_size, (long long)st.st_mtim.tv_sec,
             (long)st.st_mtim.tv_nsec);
    REQUIRE(stat(copy, &st) == 0);
    CHECK(st.st_size == 16 + 60000L * 784);
    REQUIRE(trn_data_load(&c, &got[0], &got[1], &got[2], err) == 0); /* reads */
    for (int k = 0; k < 3; k++) {
        CHECK(s_same_data(&ref[k], &got[k]));
        trn_data_free(&got[k]);
    }
    /* the copy is what the load reads: flip every pixel byte of the
       first training example (not in the validation split: the split's shuffle is fixed)
     */
    FILE *f = fopen(copy, "r+b");
    REQUIRE(f != NULL);
    unsigned char px[784];
    REQUIRE(fseek(f, 16, SEEK_SET) == 0 && fread(px, 1, 784, f) == 784);
    for (int j = 0; j < 784; j++)
        px[j] ^= 0xff;
    REQUIRE(fseek(f, 16, SEEK_SET) == 0 && fwrite(px, 1, 784, f) == 784);
    REQUIRE(fclose(f) == 0);
    REQUIRE(trn_data_load(&c, &got[0], &got[1], &got[2], err) == 0);
    CHECK(!s_same_data(&ref[0], &got[0]) && s_same_data(&ref[1], &got[1]));
    for (int k = 0; k < 3; k++)
        trn_data_free(&got[k]);
    /* a truncated copy: the .gz's data, and a whole copy again */
    REQUIRE(truncate(copy, 1000) == 0);
    REQUIRE(trn_data_load(&c, &got[0], &got[1], &got[2], err) == 0);
    for (int k = 0; k < 3; k++) {
        CHECK(s_same_data(&ref[k], &got[k]));
        trn_data_free(&got[k]);
        trn_data_free(&ref[k]);
    }
    REQUIRE(stat(copy, &st) == 0);
    CHECK(st.st_size == 16 + 60000L * 784);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* A run of jizhi-train (trainer/main.c) reads the test set at its end
   (trn_trainer_defer_test), not at its start: a run ended by a stop
   instruction never reads it (a fork's stopped sibling), a run to the end
   reads the same set and reports the same test_acc as one that read it
   first, and a test file that is missing still fails the start. */
TEST(test_set_is_read_at_the_end)
{
    trn_config c;
    trn_config_defaults(&c);
    strcpy(c.hidden, "32");
    c.train_subset = 300;
    c.val_size = 100;
    c.max_steps = 5;
    c.quiet = 1;
    char err[TRN_ERRLEN];
    trn_dataset tr, va, te, late = {0}, none = {0};
    REQUIRE(trn_data_load(&c, &tr, &va, &te, err) == 0);
    fake_io fe = {0}, fl = {0}, fs = {0};
    trn_io io = s_io(&fe);
    trn_trainer *t = trn_trainer_new(&c, &tr, &va, &te, err);
    REQUIRE(t);
    trn_trainer_set_io(t, &io);
    REQUIRE(trn_trainer_run(t, err) == 0);
    trn_trainer_destroy(&t);
    t = trn_trainer_new(&c, &tr, &va, NULL, err);
    REQUIRE(t);
    io = s_io(&fl);
    trn_trainer_set_io(t, &io);
    trn_trainer_defer_test(t, &late);
    CHECK(late.n == 0);
    REQUIRE(trn_trainer_run(t, err) == 0);
    CHECK(late.n == 10000 && s_same_data(&te, &late));
    CHECK(!isnan(s_last(&fe, "test_acc")) &&
          s_last(&fl, "test_acc") == s_last(&fe, "test_acc"));
    trn_trainer_destroy(&t);
    t = trn_trainer_new(&c, &tr, &va, NULL, err);
    REQUIRE(t);
    io = s_io(&fs);
    trn_trainer_set_io(t, &io);
    trn_trainer_defer_test(t, &none);
    s_push(&fs, JZ_INS_STOP, NULL);
    REQUIRE(trn_trainer_run(t, err) == 0);
    CHECK(none.n == 0 && none.x == NULL && isnan(s_last(&fs, "test_acc")));
    trn_trainer_destroy(&t);
    trn_data_free(&tr);
    trn_data_free(&va);
    trn_data_free(&te);
    trn_data_free(&late);
    /* a data dir without t10k-labels: the start fails and names it */
    char dir[] = "/tmp/jz-test-notest-XXXXXX", src[600], dst[600];
    REQUIRE(mkdtemp(dir) != NULL);
    const char *files[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz"};
    for (int i = 0; i < 3; i++) {
        snprintf(src, sizeof src, "%s/%s", c.data_dir, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        REQUIRE(symlink(src, dst) == 0);
    }
    snprintf(c.data_dir, sizeof c.data_dir, "%s", dir);
    snprintf(c.data_cache, sizeof c.data_cache, "off");
    CHECK(trn_data_load(&c, &tr, &va, NULL, err) < 0);
    CHECK(strstr(err, "t10k-labels-idx1-ubyte.gz: cannot open") != NULL);
    CHECK(tr.x == NULL && va.x == NULL);
    for (int i = 0; i < 3; i++) {
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        unlink(dst);
    }
    rmdir(dir);
}

/* eval_at_step (JIZHI_EVAL_AT_STEP, a fork's sibling): one more
   evaluation at that step, off the --eval-every grid, and it is flushed at
   once (the fork's decision waits on it; the helper would send it with
   its next batch, up to 50 ms later); the regular evaluations are not. */
TEST(eval_at_step_is_reported_and_flushed)
{
    trn_config c;
    s_cfg(&c);
    c.epochs = 1;
    c.max_steps = 20;
    c.eval_every = 10;
    c.eval_at_step = 13;
    trn_trainer *t = s_new(&c);
    REQUIRE(t);
    fake_io f = {0};
    trn_io io = s_io(&f);
    trn_trainer_set_io(t, &io);
    char err[TRN_ERRLEN];
    REQUIRE(trn_trainer_run(t, err) == 0);
    int at = -1, evals = 0;
    for (int i = 0; i < f.nrep; i++)
        if (!strcmp(f.rep_name[i], "val_acc")) {
            evals++;
            if (f.rep_step[i] == 13)
                at = i;
        }
    CHECK(evals == 3); /* 10, 13, 20 */
    CHECK(at >= 0);
    CHECK(f.flushes == 1);
    CHECK(at < f.nrep_at_flush && f.nrep_at_flush <= at + 2); /* right after it */
    trn_trainer_destroy(&t);
}

/* A test file that cannot be read at the end of a run (removed, or
   corrupt, after the start): the run finishes (0), reports its val_* and
   no test_*, and says why on stderr. */
TEST(unreadable_test_set_at_the_end_finishes_the_run)
{
    trn_config c;
    trn_config_defaults(&c);
    strcpy(c.hidden, "32");
    c.train_subset = 300;
    c.val_size = 100;
    c.max_steps = 5;
    c.quiet = 1;
    char dir[] = "/tmp/jz-test-latetest-XXXXXX", src[600], dst[600], log[600];
    REQUIRE(mkdtemp(dir) != NULL);
    const char *files[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 4; i++) {
        snprintf(src, sizeof src, "%s/%s", c.data_dir, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        REQUIRE(symlink(src, dst) == 0);
    }
    snprintf(c.data_dir, sizeof c.data_dir, "%s", dir);
    snprintf(c.data_cache, sizeof c.data_cache, "off");
    snprintf(log, sizeof log, "%s/stderr", dir);
    char err[TRN_ERRLEN];
    for (int corrupt = 0; corrupt < 2; corrupt++) {
        snprintf(dst, sizeof dst, "%s/%s", dir, files[3]);
        if (corrupt) { /* back in place, then a few bytes that are no gzip */
            snprintf(src, sizeof src, "%s/%s", g_fmnist_dir, files[3]);
            unlink(dst);
            REQUIRE(symlink(src, dst) == 0);
        }
        trn_dataset tr, va, late = {0};
        REQUIRE(trn_data_load(&c, &tr, &va, NULL, err) == 0);
        fake_io f = {0};
        trn_io io = s_io(&f);
        trn_trainer *t = trn_trainer_new(&c, &tr, &va, NULL, err);
        REQUIRE(t);
        trn_trainer_set_io(t, &io);
        trn_trainer_defer_test(t, &late);
        unlink(dst); /* after the start */
        if (corrupt) {
            FILE *g = fopen(dst, "w");
            REQUIRE(g);
            fputs("not a gzip file\n", g);
            fclose(g);
        }
        fflush(stderr);
        int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        REQUIRE(saved >= 0 && fd >= 0);
        dup2(fd, 2);
        close(fd);
        int rc = trn_trainer_run(t, err);
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        CHECK(rc == 0);
        CHECK(!isnan(s_last(&f, "val_acc")) && isnan(s_last(&f, "test_acc")) &&
              isnan(s_last(&f, "test_loss")));
        CHECK(late.n == 0);
        char text[2048] = "";
        FILE *g = fopen(log, "r");
        REQUIRE(g);
        size_t got = fread(text, 1, sizeof text - 1, g);
        text[got] = 0;
        fclose(g);
        CHECK(strstr(text, "training completed, 5 steps; the test set could not be "
                           "read: ") != NULL);
        CHECK(strstr(text, "t10k-labels-idx1-ubyte.gz") != NULL);
        if (!strstr(text, "training completed"))
            printf("stderr was: %s\n", text);
        trn_trainer_destroy(&t);
        trn_data_free(&tr);
        trn_data_free(&va);
        trn_data_free(&late);
    }
    for (int i = 0; i < 4; i++) {
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        unlink(dst);
    }
    unlink(log);
    rmdir(dir);
}

int main(void)
{
    char err[TRN_ERRLEN];
    trn_config d;
    trn_config_defaults(&d);
    snprintf(g_fmnist_dir, sizeof g_fmnist_dir, "%s", d.data_dir);
    snprintf(g_dir, sizeof g_dir, "/tmp/test_trn_start.XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    if (trn_data_synthetic(&g_syn, 6000, 1000, err) < 0 ||
        trn_data_synthetic(&g_syn_val, 1000, 2000, err) < 0)
        return 1;
    trn_cpu_set_threads(0);
    RUN(subset_rows_are_the_full_sets_rows);
    RUN(decompressed_copies_give_the_same_data);
    RUN(test_set_is_read_at_the_end);
    RUN(unreadable_test_set_at_the_end_finishes_the_run);
    RUN(eval_at_step_is_reported_and_flushed);
    trn_data_free(&g_syn);
    trn_data_free(&g_syn_val);
    rmdir(g_dir);
    TEST_DONE();
}
