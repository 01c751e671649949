/*  cli_spec.c - a spec file as the commands that submit one read it (see
    cli.h: cli_resolve_paths, cli_spec_load). Apart from cli_util.c because
    admitting a spec runs its scheduler's checks (schedulers/, GSL and
    OpenBLAS): the `jizhi` front (the trial and report commands, main.c)
    links cli_util.c without them. */
#include "cli.h"

#include "../schedulers/sched.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Makes `text` absolute when it names an existing file or folder relative
   to `cwd` (the trial's folder), or else to the spec's folder `specdir`. 1
   when it was rewritten (into out), 0 when left alone, -1 when it looks
   like a relative path (has a '/', no placeholder, option or '=') that
   exists in neither place. */
static int s_resolve(const char *text, const char *cwd, const char *specdir, char *out,
                     size_t size)
{
    if (text[0] == '/' || text[0] == '-' || !strchr(text, '/') || strpbrk(text, "{}=:"))
        return 0;
    char joined[8192], real[PATH_MAX];
    const char *base[2] = {cwd, specdir};
    for (int i = 0; i < 2; i++) {
        if (!base[i])
            continue;
        snprintf(joined, sizeof joined, "%s/%s", base[i], text);
        if (realpath(joined, real)) {
            snprintf(out, size, "%s", real);
            return 1;
        }
    }
    return -1;
}

/* trial[key] made absolute against `base` (realpath when it exists, so
   the stored path names what the submitter saw). */
static void s_absolute(json_t *trial, const char *key, const char *base)
{
    const char *p = json_string_value(json_object_get(trial, key));
    if (!p || p[0] == '/' || !*p)
        return; /* absent, absolute, not a string or empty: spec_parse judges */
    char joined[8192], real[PATH_MAX];
    snprintf(joined, sizeof joined, "%s/%s", base, p);
    json_object_set_new(trial, key, json_string(realpath(joined, real) ? real : joined));
}

/* Relative paths in trial.command and trial.env are resolved here, by the
   submitting command, not against the dispatcher's folder (which may be
   another one, on another machine): rewritten into absolute ones in
   spec_json, or refused with the field named. trial.cwd defaults to this
   process's folder. 0, or -1 with err set. */
int cli_resolve_paths(json_t *spec_json, const char *spec_path, char *err, size_t size)
{
    char specdir[4096], abs[8192], here[4096];
    if (!realpath(spec_path, specdir))
        snprintf(specdir, sizeof specdir, ".");
    char *slash = strrchr(specdir, '/');
    if (slash)
        *slash = 0;
    json_t *trial = json_object_get(spec_json, "trial");
    if (!json_is_object(trial))
        return 0; /* spec_parse says what is wrong */
    if (!getcwd(here, sizeof here)) {
        snprintf(err, size, "cannot read this process's folder: %s", strerror(errno));
        return -1;
    }
    if (!json_object_get(trial, "cwd"))
        json_object_set_new(trial, "cwd", json_string(here));
    s_absolute(trial, "cwd", here);
    const char *cwd = json_string_value(json_object_get(trial, "cwd"));
    if (!cwd || cwd[0] != '/')
        return 0; /* not a string: spec_parse says so */
    s_absolute(trial, "venv", cwd);
    json_t *cmd = json_object_get(trial, "command");
    for (size_t i = 0; i < json_array_size(cmd); i++) {
        const char *a = json_string_value(json_array_get(cmd, i));
        int r = a ? s_resolve(a, cwd, specdir, abs, sizeof abs) : 0;
        if (r < 0 && i == 0)
            continue; /* spec_parse names the path it looked for */
        if (r < 0) {
            snprintf(err, size,
                     "trial.command[%zu]: \"%s\" is not found in trial.cwd (%s) or the "
                     "spec's folder (%s); give an absolute path",
                     i, a, cwd, specdir);
            return -1;
        }
        if (r > 0)
            json_array_set_new(cmd, i, json_string(abs));
    }
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(trial, "env"), k, v)
    {
        const char *val = json_string_value(v);
        if (val && s_resolve(val, cwd, specdir, abs, sizeof abs) > 0)
            json_object_set_new(json_object_get(trial, "env"), k, json_string(abs));
    }
    return 0;
}

/* The message in err never names the file: callers print "PATH: err". */
spec_t *cli_spec_load(const char *path, char *err, size_t size)
{
    json_error_t jerr;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        struct stat sb; /* a folder opens, and reads as an empty file */
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            snprintf(err, size, "a folder, not a spec file (SPEC.json)");
        else if (jerr.line <= 0 && access(path, R_OK) != 0)
            snprintf(err, size, "cannot read it: %s", strerror(errno));
        else
            snprintf(err, size, "line %d, column %d: invalid JSON: %s", jerr.line,
                     jerr.column, jerr.text);
        return NULL;
    }
    spec_t *spec = NULL;
    if (cli_resolve_paths(j, path, err, size) == 0)
        spec = sched_admit(j, 1, err, size); /* the spec, its scheduler, monitors */
    json_decref(j);
    return spec;
}
