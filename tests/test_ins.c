/*  test_ins.c - instruction kinds and their wire text (common/ins.h): each
    kind's text reads back as the kind, the texts are the protocol's
    (docs/PROTOCOL.md `instruction`), an unknown or missing text is
    INS_NONE, and the helper's public jz_ins_kind has the same values.
*/
#include "jz_test.h"

#include "common/ins.h"
#include "jizhi.h"

#include <string.h>

TEST(each_kind_reads_back_from_its_text)
{
    static const char *const want[INS_COUNT] = {"",       "set",        "stop", "pause",
                                                "resume", "checkpoint", "load"};
    for (int k = 0; k < INS_COUNT; k++) {
        CHECK_STR(ins_kind_name((ins_kind)k), want[k]);
        if (k != INS_NONE)
            CHECK(ins_kind_parse(want[k]) == (ins_kind)k);
    }
    CHECK(ins_kind_parse(NULL) == INS_NONE);
    CHECK(ins_kind_parse("") == INS_NONE);
    CHECK(ins_kind_parse("Stop") == INS_NONE);
    CHECK(ins_kind_parse("stopp") == INS_NONE);
    CHECK_STR(ins_kind_name(INS_COUNT), "");
    CHECK_STR(ins_kind_name((ins_kind)-1), "");
}

TEST(the_helper_spells_the_same_kinds)
{
    CHECK((int)JZ_INS_SET == (int)ins_kind_parse("set"));
    CHECK((int)JZ_INS_STOP == (int)ins_kind_parse("stop"));
    CHECK((int)JZ_INS_PAUSE == (int)ins_kind_parse("pause"));
    CHECK((int)JZ_INS_RESUME == (int)ins_kind_parse("resume"));
    CHECK((int)JZ_INS_CHECKPOINT == (int)ins_kind_parse("checkpoint"));
    CHECK((int)JZ_INS_LOAD == (int)ins_kind_parse("load"));
}

int main(void)
{
    RUN(each_kind_reads_back_from_its_text);
    RUN(the_helper_spells_the_same_kinds);
    TEST_DONE();
}
