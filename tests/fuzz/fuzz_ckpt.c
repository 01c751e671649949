/*  fuzz_ckpt.c - libFuzzer target: any bytes as a jizhi-train checkpoint
    file. Two passes per input:
      1. the bytes as they are, through trn_ckpt_verify (the envelope:
         magic, version, byte order, length, CRC-32);
      2. the bytes with a whole, intact envelope put around them (magic,
         version, byte order, the payload's length and its CRC-32 rewritten),
         loaded into a real trainer with trn_trainer_load, so that mutations
         reach the payload parser (architecture, optimiser, counters, layer
         scales, config text, tensors, state, the ranks' section) instead of
         stopping at the checksum.
    Both must refuse what is not a whole, consistent checkpoint for this
    model without crashing. The trainer matches the seed build-fuzz/seeds/
    fuzz_ckpt/tiny.ckpt (synthetic data, 10 examples, hidden 2, batch 5).
    Build and run: `make fuzz`. */
#include "trainer/trn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HDR 24 /* magic 8, version 4, byte order 4, payload length 8 */

static trn_trainer *g_t;
static trn_dataset g_train, g_val, g_test;

static trn_trainer *s_trainer(void)
{
    if (g_t)
        return g_t;
    trn_config c;
    char err[TRN_ERRLEN];
    trn_config_defaults(&c);
    strcpy(c.dataset, "synthetic");
    c.synthetic_n = 10;
    c.val_size = 0;
    strcpy(c.hidden, "2");
    c.epochs = 1;
    c.batch_size = 5;
    c.quiet = 1;
    if (trn_data_load(&c, &g_train, &g_val, &g_test, err) != 0 ||
        !(g_t = trn_trainer_new(&c, &g_train, &g_val, &g_test, err))) {
        fprintf(stderr, "fuzz_ckpt: cannot build the trainer: %s\n", err);
        abort();
    }
    return g_t;
}

static int s_write(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[] = "/tmp/jz-fuzz-ckpt-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 0;
    close(fd);
    char err[TRN_ERRLEN];
    if (s_write(path, data, size) == 0)
        trn_ckpt_verify(path, err);

    /* pass 2: the payload is whatever follows the header (the input's own
       trailing 4 bytes, its old CRC, are dropped when it has a header) */
    const uint8_t *pl = data;
    size_t plen = size;
    if (size >= HDR + 4 && memcmp(data, "JZTRNCK", 8) == 0) {
        pl = data + HDR;
        plen = size - HDR - 4;
    }
    unsigned char *b = malloc(HDR + plen + 4);
    if (b) {
        uint32_t ver = 1, bom = 0x01020304u;
        uint64_t n64 = plen;
        memcpy(b, "JZTRNCK", 8);
        memcpy(b + 8, &ver, 4);
        memcpy(b + 12, &bom, 4);
        memcpy(b + 16, &n64, 8);
        if (plen)
            memcpy(b + HDR, pl, plen);
        uint32_t crc = (uint32_t)crc32_z(crc32(0L, NULL, 0), b, HDR + plen);
        memcpy(b + HDR + plen, &crc, 4);
        if (s_write(path, b, HDR + plen + 4) == 0)
            trn_trainer_load(s_trainer(), path, err);
        free(b);
    }
    unlink(path);
    return 0;
}
