/*  fuzz_authkeys.c - libFuzzer target: any bytes as the controller's
    authorized-keys file. The parser must refuse (naming a line) or accept
    without crashing, leaking or reading out of bounds; every accepted
    entry must be found again by its key. Build and run: `make fuzz`. */
#include "common/authkeys.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    authkeys_t a;
    authkeys_init(&a);
    char err[256];
    if (authkeys_parse(text, &a, err, sizeof err) == 0) {
        for (size_t i = 0; i < a.n; i++)
            if (authkeys_find(&a, a.v[i].key) != &a.v[i].id)
                __builtin_trap();
    } else if (strncmp(err, "line ", 5) != 0) {
        __builtin_trap();
    }
    authkeys_fini(&a);
    free(text);
    return 0;
}
