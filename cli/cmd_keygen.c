/*  cmd_keygen.c - `jizhi keygen`: a CURVE key pair for talking to (or
    being) a controller over tcp:// (common/keys.h, docs/cli.md). */
#include "cli.h"

#include "../common/keys.h"

#include <stdio.h>
#include <string.h>

static const char s_usage[] =
    "usage: jizhi keygen [--out DIR] [--name NAME] [--force]\n"
    "Writes a new CURVE key pair: DIR/NAME.key (public and secret, mode 0600) and\n"
    "DIR/NAME.pub (the public key to give the controller's admin), and prints the\n"
    "public key. DIR defaults to $JIZHI_HOME, else ~/.config/jizhi (created 0700);\n"
    "NAME to `client` (what the CLI and dispatchers use by default); the\n"
    "controller's own pair is `--name controller`. An existing NAME.key is kept\n"
    "unless --force.\n";

int cmd_keygen(int argc, char **argv)
{
    const char *out = NULL, *name = "client";
    const cli_opt_extra extra[] = {{"out", &out, NULL}, {"name", &name, NULL}, {NULL}};
    cli_opts o;
    int prc = cli_opts_parse_ext(argc, argv, CLI_OPT_FORCE, extra, s_usage, &o);
    if (prc)
        return prc < 0 ? CLI_OK : prc;
    int force = o.force;
    if (o.nargs) {
        cli_error("keygen: unexpected argument \"%s\"", o.args[0]);
        return CLI_USAGE;
    }
    size_t nl = strlen(name);
    if (!nl || nl > 64 ||
        strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789_.-") != nl ||
        name[0] == '.') {
        cli_error("--name: expected 1 to 64 of letters, digits, _ . - (not starting with "
                  "'.'), got \"%s\"",
                  name);
        return CLI_USAGE;
    }
    char dir[2048];
    if (out) {
        snprintf(dir, sizeof dir, "%s", out);
    } else if (keys_dir(dir, sizeof dir) != 0) {
        cli_error("keygen: neither JIZHI_HOME nor HOME is set; pass --out DIR");
        return CLI_USAGE;
    }
    keys_pair kp;
    if (keys_generate(&kp) != 0) {
        cli_error("keygen: this libzmq has no CURVE support");
        return CLI_FAIL;
    }
    char err[4400];
    if (keys_write(dir, name, &kp, force, err, sizeof err) != 0) {
        cli_error("keygen: %s", err);
        return CLI_FAIL;
    }
    printf("%s\n", kp.pub);
    fprintf(stderr, "wrote %s/%s.key and %s/%s.pub\n", dir, name, dir, name);
    return CLI_OK;
}
