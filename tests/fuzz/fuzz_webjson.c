/*  fuzz_webjson.c - libFuzzer target: any bytes as the body of a web API
    POST (web/web_body.h), through every check a body meets before the
    controller sees it: the parse (an object, or a refusal with a
    message), the checks of `trial set` and `trial pause`, and the spec
    parser a submitted study goes through. Each must accept or refuse
    with a message, without crashing, leaking or reading out of bounds;
    what it accepts must hold what it promised. Build and run:
    `make fuzz`. */
#include "common/spec.h"
#include "web/web_body.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *in = NULL;
    char err[300] = "";
    if (web_body_parse((const char *)data, size, &in, err, sizeof err) != 0) {
        if (in || !err[0])
            __builtin_trap();
        return 0;
    }
    if (!json_is_object(in))
        __builtin_trap();
    const json_t *values;
    err[0] = 0;
    if (web_body_set_values(in, &values, err, sizeof err) == 0) {
        const char *key;
        json_t *v;
        if (!json_is_object(values) || !json_object_size(values))
            __builtin_trap();
        json_object_foreach((json_t *)values, key, v)
        {
            if (!spec_valid_name(key) || !(json_is_number(v) || json_is_string(v)))
                __builtin_trap();
        }
    } else if (!err[0] || values) {
        __builtin_trap();
    }
    int release = -1;
    err[0] = 0;
    if (web_body_release(in, &release, err, sizeof err) == 0) {
        if (release != json_is_true(json_object_get(in, "release")))
            __builtin_trap();
    } else if (!err[0]) {
        __builtin_trap();
    }
    int wait = -1;
    double wait_s = 0;
    err[0] = 0;
    if (web_body_wait(in, &wait, &wait_s, 120, 600, err, sizeof err) == 0) {
        if (wait != json_is_true(json_object_get(in, "wait")) || !(wait_s >= 1) ||
            wait_s > 600)
            __builtin_trap();
    } else if (!err[0]) {
        __builtin_trap();
    }
    spec_error se;
    spec_t *spec = spec_parse(in, 1, &se);
    spec_destroy(&spec);
    json_decref(in);
    return 0;
}
