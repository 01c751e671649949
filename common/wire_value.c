/*  wire_value.c - see wire.h: what a decoded message holds (its type,
    typed fields, the one encoding of doubles) and the replies, with no
    socket: every program that reads jizhi's JSON links these, including
    the `jizhi` front, which links no libzmq. */
#include "wire.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

const char *wire_type(const json_t *msg)
{
    const char *t = json_string_value(json_object_get(msg, "type"));
    return t ? t : "";
}

int wire_get_long(const json_t *msg, const char *key, long *out, char *err,
                  size_t errsize)
{
    json_t *v = json_object_get(msg, key);
    if (!json_is_integer(v)) {
        snprintf(err, errsize, "field '%s': expected an integer", key);
        return -1;
    }
    *out = (long)json_integer_value(v);
    return 0;
}

int wire_get_double(const json_t *msg, const char *key, double *out, char *err,
                    size_t errsize)
{
    if (wire_to_double(json_object_get(msg, key), out) != 0) {
        snprintf(err, errsize, "field '%s': expected a number", key);
        return -1;
    }
    return 0;
}

int wire_get_str(const json_t *msg, const char *key, const char **out, char *err,
                 size_t errsize)
{
    json_t *v = json_object_get(msg, key);
    if (!json_is_string(v)) {
        snprintf(err, errsize, "field '%s': expected a string", key);
        return -1;
    }
    *out = json_string_value(v);
    return 0;
}

/* A quiet NaN whose payload spells "none": no operation makes it from
   a reported value (strtod and the JSON decoders give the plain NAN). */
#define WIRE_NONE_BITS UINT64_C(0x7ff800006e6f6e65)

double wire_none(void)
{
    uint64_t b = WIRE_NONE_BITS;
    double x;
    memcpy(&x, &b, sizeof x);
    return x;
}

int wire_is_none(double x)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return b == WIRE_NONE_BITS;
}

const char *wire_real_name(double x)
{
    if (isfinite(x) || wire_is_none(x))
        return NULL;
    return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}

json_t *wire_real(double x)
{
    if (wire_is_none(x))
        return json_null();
    const char *name = wire_real_name(x);
    return name ? json_string(name) : json_real(x);
}

int wire_to_double(const json_t *v, double *out)
{
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return 0;
    }
    const char *s = json_string_value(v);
    if (!s)
        return -1;
    if (!strcmp(s, "nan"))
        *out = NAN;
    else if (!strcmp(s, "inf"))
        *out = INFINITY;
    else if (!strcmp(s, "-inf"))
        *out = -INFINITY;
    else
        return -1;
    return 0;
}

int wire_to_value(const json_t *v, double *out)
{
    if (!v || json_is_null(v)) {
        *out = wire_none();
        return 0;
    }
    return wire_to_double(v, out);
}

json_t *wire_ok(long req)
{
    return json_pack("{s:s, s:I}", "type", "ok", "req", (json_int_t)req);
}

json_t *wire_error(long req, const char *code, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return json_pack("{s:s, s:I, s:s, s:s}", "type", "error", "req", (json_int_t)req,
                     "code", code, "message", text);
}
