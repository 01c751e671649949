/*  fuzz_ckpt.c - libFuzzer target: any bytes as a jizhi-train checkpoint
    file. Verification must refuse what is not a whole, intact checkpoint
    without crashing. Build and run: `make fuzz`. */
#include "trainer/trn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[] = "/tmp/jz-fuzz-ckpt-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) == (ssize_t)size) {
        char err[512];
        trn_ckpt_verify(path, err);
    }
    close(fd);
    unlink(path);
    return 0;
}
