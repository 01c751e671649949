/*  web_body.c - POST bodies parsed and checked (see web_body.h). */
#include "web_body.h"

#include "../common/spec.h"

#include <stdio.h>

int web_body_parse(const char *data, size_t len, json_t **out, char *err, size_t errsize)
{
    json_error_t jerr;
    json_t *in =
        json_loadb(len ? data : "{}", len ? len : 2, JSON_REJECT_DUPLICATES, &jerr);
    *out = NULL;
    if (!in) {
        snprintf(err, errsize, "malformed JSON: %s", jerr.text);
        return -1;
    }
    if (!json_is_object(in)) {
        json_decref(in);
        snprintf(err, errsize, "the body must be a JSON object");
        return -1;
    }
    *out = in;
    return 0;
}

int web_body_set_values(const json_t *in, const json_t **values, char *err,
                        size_t errsize)
{
    json_t *v = json_object_get(in, "values");
    *values = NULL;
    if (!json_is_object(v) || json_object_size(v) == 0) {
        snprintf(err, errsize, "values: expected a non-empty object {\"name\": value}");
        return -1;
    }
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x)
    {
        if (!spec_valid_name(key)) {
            snprintf(err, errsize, "\"%.64s\" is not a parameter name", key);
            return -1;
        }
        if (!json_is_number(x) && !json_is_string(x)) {
            snprintf(err, errsize, "values.%s: expected a number or string", key);
            return -1;
        }
    }
    *values = v;
    return 0;
}

/* The boolean field `name` of in: absent is false. */
static int s_flag(const json_t *in, const char *name, int *flag, char *err,
                  size_t errsize)
{
    json_t *v = json_object_get(in, name);
    *flag = 0;
    if (v && !json_is_boolean(v)) {
        snprintf(err, errsize, "%s: expected true or false", name);
        return -1;
    }
    *flag = json_is_true(v);
    return 0;
}

int web_body_release(const json_t *in, int *release, char *err, size_t errsize)
{
    return s_flag(in, "release", release, err, errsize);
}

int web_body_force(const json_t *in, int *force, char *err, size_t errsize)
{
    return s_flag(in, "force", force, err, errsize);
}

int web_body_wait(const json_t *in, int *wait, double *wait_s, double def_s, double max_s,
                  char *err, size_t errsize)
{
    *wait_s = def_s;
    if (s_flag(in, "wait", wait, err, errsize) != 0)
        return -1;
    json_t *v = json_object_get(in, "wait_s");
    if (!v)
        return 0;
    if (!json_is_number(v) || !(json_number_value(v) >= 1) ||
        json_number_value(v) > max_s) {
        snprintf(err, errsize, "wait_s: expected seconds from 1 to %g", max_s);
        return -1;
    }
    *wait_s = json_number_value(v);
    return 0;
}
