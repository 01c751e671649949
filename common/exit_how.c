/*  exit_how.c - how an attempt ended and its wire text (see exit_how.h). */
#include "exit_how.h"

#include "util.h"

#include <string.h>

static const char *const s_names[EXIT_HOW_COUNT] = {
    [EXIT_OTHER] = "",
    [EXIT_EXITED] = "exited",
    [EXIT_SIGNALED] = "signaled",
    [EXIT_TIMEOUT] = "timeout",
    [EXIT_KILLED] = "killed",
    [EXIT_START_FAILED] = "start_failed",
    [EXIT_LOST] = "lost",
};

const char *exit_how_name(exit_how h)
{
    return (unsigned)h < EXIT_HOW_COUNT ? s_names[h] : "";
}

exit_how exit_how_parse(const char *text)
{
    int h = util_name_index(s_names, EXIT_HOW_COUNT, text);
    return h > 0 ? (exit_how)h : EXIT_OTHER;
}
