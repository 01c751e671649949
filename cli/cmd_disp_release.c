/*  cmd_disp_release.c - `jizhi dispatcher release NAME`: an admin frees
    a dispatcher name. A name stays bound to the key (or Unix user) that
    first registered it, through silence and restarts, so that no one else
    can take it over; releasing it lets another identity register under
    it. See docs/cli.md; the controller's side is `disp_release`
    (controller/ctl_msg.c). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char s_usage[] =
    "usage: jizhi dispatcher release NAME [--db FILE] [--controller ENDPOINT]\n"
    "Frees dispatcher name NAME (admin only): its binding to the key or user\n"
    "that registered it is dropped, so another identity may register under\n"
    "it. Refused while a dispatcher of that name is connected or holds trials.\n";

int cmd_disp_release(int argc, char **argv)
{
    cli_opts o;
    int rc = cli_opts_parse(argc, argv, 0, s_usage, &o);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if (o.nargs != 1)
        return cli_usage_error(s_usage,
                               "dispatcher release: expected one dispatcher NAME");
    json_t *r = cli_request_of(
        &o, json_pack("{s:s, s:s}", "type", "disp_release", "name", o.args[0]), 10000);
    if (!r)
        return CLI_FAIL;
    printf("dispatcher name %s released\n", o.args[0]);
    json_decref(r);
    return CLI_OK;
}
