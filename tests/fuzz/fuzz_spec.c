/*  fuzz_spec.c - libFuzzer target: any bytes as a study spec. The parser
    must refuse or accept without crashing, leaking or reading out of
    bounds, and an accepted spec must expand its command and map every
    parameter to and from the unit cube. Build and run: `make fuzz`. */
#include "common/spec.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *j = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!j)
        return 0;
    spec_error err;
    spec_t *s = spec_parse(j, 0, &err);
    if (s) {
        json_t *params = json_object();
        for (size_t i = 0; i < s->nparams; i++) {
            json_t *v = spec_param_from_unit(&s->params[i], 0.37);
            if (!spec_param_legal(&s->params[i], v) ||
                spec_param_to_unit(&s->params[i], v) < 0)
                __builtin_trap();
            json_object_set_new(params, s->params[i].name, v);
        }
        json_decref(spec_expand_command(s, params, &err));
        json_decref(params);
        spec_destroy(&s);
    }
    json_decref(j);
    return 0;
}
