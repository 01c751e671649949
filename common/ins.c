/*  ins.c - instruction kinds and their wire text (see ins.h). */
#include "ins.h"

#include "util.h"

#include <string.h>

static const char *const s_names[INS_COUNT] = {
    [INS_NONE] = "",       [INS_SET] = "set",       [INS_STOP] = "stop",
    [INS_PAUSE] = "pause", [INS_RESUME] = "resume", [INS_CHECKPOINT] = "checkpoint",
    [INS_LOAD] = "load",
};

const char *ins_kind_name(ins_kind k)
{
    return (unsigned)k < INS_COUNT ? s_names[k] : "";
}

ins_kind ins_kind_parse(const char *text)
{
    int k = util_name_index(s_names, INS_COUNT, text);
    return k > 0 ? (ins_kind)k : INS_NONE;
}
