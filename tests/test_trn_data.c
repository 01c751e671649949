/*  test_trn_data.c - an IDX training set keeps its pixel bytes for the
    gathers (trn_dataset.code, trainer/data.c): every byte of every kept
    example, in the order of its floats, with x == lut[code] bit for bit,
    the 256 values of the normalisation; the validation set (and a
    synthetic set) none. The IDX files are written here, small, in a
    temporary directory.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "jz_test.h"
#include "trainer/gather.h"
#include "trainer/trn.h"

static char s_dir[256];

/* An IDX file (gzip): magic 0x0803 (images, dims n 28 28) or 0x0801. */
static void s_write_idx(const char *name, int images, int n, const unsigned char *body,
                        size_t len)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", s_dir, name);
    gzFile f = gzopen(p, "wb");
    if (!f) {
        perror(p);
        exit(1);
    }
    unsigned char hdr[16] = {0, 0, 8, (unsigned char)(images ? 3 : 1)};
    uint32_t dims[3] = {(uint32_t)n, 28, 28};
    int nd = images ? 3 : 1;
    for (int i = 0; i < nd; i++) {
        hdr[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
        hdr[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
        hdr[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
        hdr[7 + 4 * i] = (unsigned char)dims[i];
    }
    gzwrite(f, hdr, (unsigned)(4 + 4 * nd));
    gzwrite(f, body, (unsigned)len);
    gzclose(f);
}

TEST(an_idx_training_set_keeps_its_bytes)
{
    enum { N = 40, D = 784 };
    unsigned char *px = malloc((size_t)N * D), lab[N];
    REQUIRE(px);
    for (int i = 0; i < N * D; i++)
        px[i] = (unsigned char)((i * 131 + i / 784) & 255);
    for (int i = 0; i < N; i++)
        lab[i] = (unsigned char)(i % 10);
    s_write_idx("train-images-idx3-ubyte.gz", 1, N, px, (size_t)N * D);
    s_write_idx("train-labels-idx1-ubyte.gz", 0, N, lab, N);
    s_write_idx("t10k-images-idx3-ubyte.gz", 1, 4, px, (size_t)4 * D);
    s_write_idx("t10k-labels-idx1-ubyte.gz", 0, 4, lab, 4);

    trn_config c;
    trn_config_defaults(&c);
    snprintf(c.dataset, sizeof c.dataset, "fashion-mnist");
    snprintf(c.data_dir, sizeof c.data_dir, "%s", s_dir);
    snprintf(c.data_cache, sizeof c.data_cache, "off");
    c.val_size = 10;
    c.train_subset = 0;
    trn_dataset train, val, test;
    char err[TRN_ERRLEN] = "";
    int rc = trn_data_load(&c, &train, &val, &test, err);
    if (rc < 0)
        printf("  %s\n", err);
    REQUIRE(rc == 0);
    CHECK(train.n == N - 10 && val.n == 10 && test.n == 4);
    if (!trn_gather_code_simd(0)) { /* data.c's rule for this fp32 CPU run */
        CHECK(train.code == NULL);  /* no vector lookup it takes would read them */
        trn_data_free(&train);
        trn_data_free(&val);
        trn_data_free(&test);
        free(px);
        SKIP("no vector lookups for the bytes on this CPU: none kept (checked)");
    }
    REQUIRE(train.code != NULL);
    CHECK(val.code == NULL && test.code == NULL);
    /* x == lut[code] everywhere, and each example's bytes are one of the
       file's examples, with its label */
    int exact = 1, found = 1;
    for (long i = 0; i < (long)train.n * D; i++)
        exact &= memcmp(&train.x[i], &train.lut[train.code[i]], sizeof(float)) == 0;
    for (int e = 0; e < train.n; e++) {
        int hit = 0;
        for (int f = 0; f < N && !hit; f++)
            hit = !memcmp(train.code + (size_t)e * D, px + (size_t)f * D, D) &&
                  train.y[e] == lab[f];
        found &= hit;
    }
    CHECK(exact);
    CHECK(found);
    /* the normalisation's 256 values: increasing, 0 and 255 at its ends */
    int inc = 1;
    for (int v = 1; v < 256; v++)
        inc &= train.lut[v] > train.lut[v - 1];
    CHECK(inc && train.lut[0] < 0 && train.lut[255] > 0);
    trn_data_free(&train);
    trn_data_free(&val);
    trn_data_free(&test);
    CHECK(train.code == NULL);

    /* a CUDA run with its data on the device keeps none; a bf16 run keeps
       them where either lookup is there */
    snprintf(c.backend, sizeof c.backend, "cuda");
    snprintf(c.gpu_data, sizeof c.gpu_data, "device");
    REQUIRE(trn_data_load(&c, &train, &val, NULL, err) == 0);
    CHECK(train.code == NULL);
    trn_data_free(&train);
    trn_data_free(&val);
    snprintf(c.backend, sizeof c.backend, "cpu");
    snprintf(c.precision, sizeof c.precision, "bf16");
    REQUIRE(trn_data_load(&c, &train, &val, NULL, err) == 0);
    CHECK((train.code != NULL) == (trn_gather_code_simd(0) || trn_gather_code_simd(1)));
    trn_data_free(&train);
    trn_data_free(&val);

    /* a synthetic set has no bytes */
    snprintf(c.dataset, sizeof c.dataset, "synthetic");
    c.synthetic_n = 32;
    REQUIRE(trn_data_load(&c, &train, &val, NULL, err) == 0);
    CHECK(train.code == NULL && val.code == NULL);
    trn_data_free(&train);
    trn_data_free(&val);
    free(px);
}

int main(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/jz-trn-data-XXXXXX");
    if (!mkdtemp(s_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(an_idx_training_set_keeps_its_bytes);
    const char *names[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 4; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", s_dir, names[i]);
        unlink(p);
    }
    rmdir(s_dir);
    TEST_DONE();
}
