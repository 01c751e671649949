/*  test_exit_how.c - how an attempt ended and its wire text
    (common/exit_how.h): each kind reads back from the text a dispatcher
    sends (docs/PROTOCOL.md, `exited`'s `how`), and a text this controller
    does not know is EXIT_OTHER, never one of the kinds it acts on.
*/
#include "jz_test.h"

#include "common/exit_how.h"

TEST(each_kind_reads_back_from_its_text)
{
    static const char *const want[EXIT_HOW_COUNT] = {
        "", "exited", "signaled", "timeout", "killed", "start_failed", "lost"};
    for (int h = 0; h < EXIT_HOW_COUNT; h++) {
        CHECK_STR(exit_how_name((exit_how)h), want[h]);
        if (h != EXIT_OTHER)
            CHECK(exit_how_parse(want[h]) == (exit_how)h);
    }
    CHECK(exit_how_parse(NULL) == EXIT_OTHER);
    CHECK(exit_how_parse("") == EXIT_OTHER);
    CHECK(exit_how_parse("Exited") == EXIT_OTHER);
    CHECK(exit_how_parse("oom_killed") == EXIT_OTHER);
    CHECK_STR(exit_how_name(EXIT_HOW_COUNT), "");
}

int main(void)
{
    RUN(each_kind_reads_back_from_its_text);
    TEST_DONE();
}
