/*  fuzz_alerts.c - libFuzzer target: any bytes as the controller's
    --alerts FILE (parsed as ctl__alerts_init does: JSON, then
    spec_alerts_file). It must refuse, naming the file, or accept rules
    whose kind and identity can be read back, without crashing, leaking or
    reading out of bounds. Build and run: `make fuzz`. */
#include "common/spec.h"

#include <jansson.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc)
        return 0;
    char err[512] = "";
    json_t *rules = spec_alerts_file(doc, "f.json", err, sizeof err);
    json_decref(doc);
    if (!rules) {
        if (strncmp(err, "--alerts f.json: ", 17) != 0)
            __builtin_trap();
        return 0;
    }
    size_t i;
    json_t *rule;
    json_array_foreach(rules, i, rule)
    {
        char id[128];
        if (spec_alert_kind(rule) >= SPEC_ALERT_COUNT ||
            !*spec_alert_id(rule, i, id, sizeof id))
            __builtin_trap();
    }
    json_decref(rules);
    return 0;
}
