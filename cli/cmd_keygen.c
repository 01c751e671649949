/*  cmd_keygen.c - `jizhi keygen`: a CURVE key pair for talking to (or
    being) a controller over tcp:// (common/keys.h, docs/cli.md). */
#include "cli.h"

#include "../common/keys.h"

#include <getopt.h>
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
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"name", required_argument, 0, 'n'},
                                         {"force", no_argument, 0, 'f'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *out = NULL, *name = "client";
    int force = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            out = optarg;
            break;
        case 'n':
            name = optarg;
            break;
        case 'f':
            force = 1;
            break;
        case 'h':
            fputs(s_usage, stdout);
            return CLI_OK;
        default:
            fputs(s_usage, stderr);
            return CLI_USAGE;
        }
    }
    if (optind != argc) {
        cli_error("keygen: unexpected argument \"%s\"", argv[optind]);
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
