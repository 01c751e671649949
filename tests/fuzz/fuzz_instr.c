/*  fuzz_instr.c - libFuzzer target: any bytes as the body of an
    `instruction` push from the controller, decoded as the trial helper
    decodes it (jz__parse_instruction, trial_helper/jz_conn.c).

    The body is parsed as wire_recv parses it (JSON, duplicate keys
    refused; JSON_ALLOW_NUL too, so strings with NUL bytes reach the
    parser). Dropped (no integer id), refused with a reason, or delivered:
    a delivered instruction has a known kind, NUL-terminated name and str
    within their arrays, a valid parameter name for set, a value of the
    right type and params an object for load. Build and run: `make fuzz`. */
#include "jz_internal.h"

#include "common/spec.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *m = json_loadb((const char *)data, size,
                           JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    if (!m)
        return 0;
    jz__pending_ins p;
    char detail[128];
    int rc = jz__parse_instruction(m, &p, detail, sizeof detail);
    if (rc == 1 && !detail[0])
        __builtin_trap(); /* a refusal always says why */
    if (rc >= 0 && p.ins.id != (long)json_integer_value(json_object_get(m, "id")))
        __builtin_trap();
    if (rc == 0) {
        if (p.ins.kind < JZ_INS_SET || p.ins.kind > JZ_INS_LOAD)
            __builtin_trap();
        if (memchr(p.ins.name, 0, sizeof p.ins.name) == NULL ||
            memchr(p.ins.str, 0, sizeof p.ins.str) == NULL)
            __builtin_trap();
        if (p.ins.kind == JZ_INS_SET) {
            if (!spec_valid_name(p.ins.name) || !p.value ||
                !(json_is_number(p.value) || json_is_string(p.value)))
                __builtin_trap();
            if (json_is_string(p.value) && !isnan(p.ins.value))
                __builtin_trap();
        } else if (p.value) {
            __builtin_trap();
        }
        if (p.params && (p.ins.kind != JZ_INS_LOAD || !json_is_object(p.params)))
            __builtin_trap();
    }
    if (rc != 0 && (p.value || p.params))
        __builtin_trap(); /* nothing is kept from a refused instruction */
    jz__pending_ins_fini(&p);
    json_decref(m);
    return 0;
}
