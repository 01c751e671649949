/*  disp_msg.c - validation of the controller's messages to a dispatcher.

    Every field of `start` and `kill` is checked for type and range before
    anything acts on it (docs/PROTOCOL.md, dispatcher section); a bad
    message is refused with a text that names the field, and nothing in it
    can crash the dispatcher.
*/
#include "disp_int.h"
#include "common/wire.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DISP_MAX_ARGS 65536
#define DISP_MAX_GPUS 4096

/* An integer >= 0. */
static int s_get_id(const json_t *msg, const char *key, long *out, char *err, size_t n)
{
    if (wire_get_long(msg, key, out, err, n) != 0)
        return -1;
    if (*out < 0) {
        snprintf(err, n, "field '%s': expected an integer >= 0", key);
        return -1;
    }
    return 0;
}

/* A JSON string that holds no NUL byte (so it can be a C string). */
static int s_is_cstring(const json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

int disp__parse_start(const json_t *msg, disp__start *out, int *have_ids, char *err,
                      size_t errsize)
{
    memset(out, 0, sizeof *out);
    *have_ids = 0;
    if (s_get_id(msg, "trial", &out->trial, err, errsize) != 0 ||
        s_get_id(msg, "attempt", &out->attempt, err, errsize) != 0)
        return -1;
    *have_ids = 1;

    const json_t *v = json_object_get(msg, "study");
    if (!s_is_cstring(v) || json_string_length(v) == 0) {
        snprintf(err, errsize, "field 'study': expected a non-empty string");
        return -1;
    }
    out->study = json_string_value(v);

    v = json_object_get(msg, "argv");
    if (!json_is_array(v) || json_array_size(v) == 0 ||
        json_array_size(v) > DISP_MAX_ARGS) {
        snprintf(err, errsize, "field 'argv': expected a non-empty array of strings");
        return -1;
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *a = json_array_get(v, i);
        if (!s_is_cstring(a)) {
            snprintf(err, errsize,
                     "field 'argv[%zu]': expected a string without NUL bytes", i);
            return -1;
        }
    }
    if (json_string_length(json_array_get(v, 0)) == 0) {
        snprintf(err, errsize, "field 'argv[0]': expected a program name, got \"\"");
        return -1;
    }
    out->argv = v;

    v = json_object_get(msg, "env");
    if (v && !json_is_null(v)) {
        if (!json_is_object(v)) {
            snprintf(err, errsize, "field 'env': expected an object of strings");
            return -1;
        }
        const char *key;
        const json_t *val;
        json_object_foreach((json_t *)v, key, val)
        {
            if (key[0] == 0 || strchr(key, '=')) {
                snprintf(err, errsize,
                         "field 'env': variable name \"%.64s\" is empty or holds '='",
                         key);
                return -1;
            }
            if (!s_is_cstring(val)) {
                snprintf(err, errsize, "field 'env.%.64s': expected a string", key);
                return -1;
            }
        }
        out->env = v;
        const char *token = json_string_value(json_object_get(v, "JIZHI_TOKEN"));
        if (token)
            ident_attempt_tag(token, out->tag);
    }

    v = json_object_get(msg, "timeout_s");
    if (v && !json_is_null(v)) {
        double t;
        if (wire_to_double(v, &t) != 0 || isnan(t) || t < 0) {
            snprintf(err, errsize, "field 'timeout_s': expected a number >= 0");
            return -1;
        }
        out->timeout_s = isinf(t) ? 0 : t; /* 0 and inf: no timeout */
    }

    v = json_object_get(msg, "gpus");
    if (v && !json_is_null(v)) {
        long g;
        if (!json_is_integer(v) || (g = (long)json_integer_value(v)) < 0 ||
            g > DISP_MAX_GPUS) {
            snprintf(err, errsize, "field 'gpus': expected an integer from 0 to %d",
                     DISP_MAX_GPUS);
            return -1;
        }
        out->gpus = (int)g;
    }

    out->ranks = 1;
    v = json_object_get(msg, "ranks");
    if (v && !json_is_null(v)) {
        long r;
        if (!json_is_integer(v) || (r = (long)json_integer_value(v)) < 1 ||
            r > DISP_MAX_RANKS) {
            snprintf(err, errsize, "field 'ranks': expected an integer from 1 to %d",
                     DISP_MAX_RANKS);
            return -1;
        }
        out->ranks = (int)r;
    }

    out->launcher = SPEC_LAUNCH_MPIRUN;
    v = json_object_get(msg, "launcher");
    if (v && !json_is_null(v)) {
        const char *l = json_string_value(v);
        if (l && !strcmp(l, "torch"))
            out->launcher = SPEC_LAUNCH_TORCH;
        else if (!l || strcmp(l, "mpirun")) {
            snprintf(err, errsize, "field 'launcher': expected \"mpirun\" or \"torch\"");
            return -1;
        }
    }

    /* trial.cwd and trial.venv: absolute paths, or absent */
    static const char *const paths[2] = {"cwd", "venv"};
    for (int i = 0; i < 2; i++) {
        v = json_object_get(msg, paths[i]);
        if (!v || json_is_null(v))
            continue;
        if (!s_is_cstring(v) || json_string_value(v)[0] != '/') {
            snprintf(err, errsize, "field '%s': expected an absolute path", paths[i]);
            return -1;
        }
        *(i ? &out->venv : &out->cwd) = json_string_value(v);
    }

    v = json_object_get(msg, "log_dir");
    if (v && !json_is_null(v)) {
        if (!s_is_cstring(v) || json_string_length(v) == 0) {
            snprintf(err, errsize, "field 'log_dir': expected a non-empty string");
            return -1;
        }
        out->log_dir = json_string_value(v);
    }

    v = json_object_get(msg, "req");
    if (v && !json_is_integer(v)) {
        snprintf(err, errsize, "field 'req': expected an integer");
        return -1;
    }
    return 0;
}

int disp__parse_kill(const json_t *msg, long *trial, long *attempt, const char **reason,
                     char *err, size_t errsize)
{
    *attempt = -1;
    *reason = NULL;
    if (s_get_id(msg, "trial", trial, err, errsize) != 0)
        return -1;
    const json_t *v = json_object_get(msg, "attempt");
    if (v && !json_is_null(v) && s_get_id(msg, "attempt", attempt, err, errsize) != 0)
        return -1;
    v = json_object_get(msg, "reason");
    if (v && !json_is_null(v)) {
        if (!s_is_cstring(v)) {
            snprintf(err, errsize, "field 'reason': expected a string");
            return -1;
        }
        *reason = json_string_value(v);
    }
    return 0;
}

char *disp__path_component(const char *s)
{
    size_t n = strlen(s);
    if (n > 200)
        n = 200;
    char *out = malloc(n + 2);
    if (!out)
        return NULL;
    size_t j = 0;
    if (n == 0 || s[0] == '.')
        out[j++] = '_';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        out[j++] = (c == '/' || c < 0x20 || c == 0x7f) ? '_' : (char)c;
    }
    out[j] = 0;
    return out;
}
