/*  wire_points.c - see wire_points.h. Two passes over the body: the
    object's top level, skipping every member but "points" (jansson checks
    them afterwards, on the message without its points), and the points
    array in the plain form, read strictly: whatever it does not expect
    declines the message.
*/
#include "wire_points.h"

#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void wire_points_init(wire_points *wp)
{
    memset(wp, 0, sizeof *wp);
}

void wire_points_fini(wire_points *wp)
{
    free(wp->p);
    free(wp->names);
    free(wp->rest);
    memset(wp, 0, sizeof *wp);
}

/* ---- the reader ---- */

typedef struct {
    const char *s, *end;
} s_in;

static void s_ws(s_in *in)
{
    while (in->s < in->end &&
           (*in->s == ' ' || *in->s == '\t' || *in->s == '\n' || *in->s == '\r'))
        in->s++;
}

/* The next character after whitespace, consumed when it is `c`. */
static int s_eat(s_in *in, char c)
{
    s_ws(in);
    if (in->s < in->end && *in->s == c) {
        in->s++;
        return 1;
    }
    return 0;
}

/* Skips a string whose opening quote was consumed. 0 or -1. */
static int s_skip_string(s_in *in)
{
    while (in->s < in->end) {
        char c = *in->s++;
        if (c == '"')
            return 0;
        if (c == '\\') {
            if (in->s == in->end)
                return -1;
            in->s++;
        }
    }
    return -1;
}

/* Skips any value (not checked: jansson reads it later). 0 or -1. */
static int s_skip_value(s_in *in)
{
    int depth = 0;
    s_ws(in);
    do {
        if (in->s == in->end)
            return -1;
        char c = *in->s++;
        if (c == '"') {
            if (s_skip_string(in) != 0)
                return -1;
        } else if (c == '[' || c == '{') {
            depth++;
        } else if (c == ']' || c == '}') {
            if (--depth < 0)
                return -1;
        } else if (depth == 0) { /* a number or literal: up to its end */
            while (in->s < in->end && !strchr(",}] \t\n\r", *in->s))
                in->s++;
        }
    } while (depth > 0);
    return 0;
}

/* Past the run of one or more digits at p (before end), or NULL when no
   digit is there. */
static const char *s_digits(const char *p, const char *end)
{
    if (p == end || *p < '0' || *p > '9')
        return NULL;
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    return p;
}

/* -?(0|[1-9][0-9]*): the integer's digits; 1 when a fraction or exponent
   follows (a real), 0 when not, -1 when it is no JSON number. */
static int s_number(s_in *in, const char **start)
{
    const char *p = in->s;
    *start = p;
    if (p < in->end && *p == '-')
        p++;
    if (p < in->end && *p == '0')
        p++;
    else if (!(p = s_digits(p, in->end)))
        return -1;
    int real = 0;
    if (p < in->end && *p == '.') {
        if (!(p = s_digits(p + 1, in->end)))
            return -1;
        real = 1;
    }
    if (p < in->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < in->end && (*p == '+' || *p == '-'))
            p++;
        if (!(p = s_digits(p, in->end)))
            return -1;
        real = 1;
    }
    in->s = p;
    return real;
}

/* A plain integer of at most 18 digits (no json_int_t overflow). */
static int s_int(const char *a, const char *b, long *out)
{
    int neg = *a == '-';
    if (neg)
        a++;
    if (b - a > 18)
        return -1;
    long v = 0;
    for (; a < b; a++)
        v = v * 10 + (*a - '0');
    *out = neg ? -v : v;
    return 0;
}

/* The value of a point: what wire_to_double makes of jansson's value. */
static int s_value(s_in *in, double *out)
{
    s_ws(in);
    if (in->s < in->end && *in->s == '"') {
        static const struct {
            const char *text;
            size_t len;
        } words[] = {{"\"nan\"", 5}, {"\"inf\"", 5}, {"\"-inf\"", 6}};
        const double vals[] = {NAN, INFINITY, -INFINITY};
        for (size_t i = 0; i < 3; i++)
            if ((size_t)(in->end - in->s) >= words[i].len &&
                !memcmp(in->s, words[i].text, words[i].len)) {
                in->s += words[i].len;
                *out = vals[i];
                return 0;
            }
        return -1;
    }
    const char *a;
    int real = s_number(in, &a);
    if (real < 0)
        return -1;
    if (!real) { /* jansson: an integer, then converted to double */
        long v;
        if (s_int(a, in->s, &v) != 0)
            return -1;
        *out = (double)v;
        return 0;
    }
    /* a real: strtod stops where the JSON number ends, since the next
       character (whitespace, ',' or ']'; one must follow inside the body,
       which is not NUL-terminated) continues no decimal number */
    if (in->s == in->end)
        return -1;
    char *e;
    errno = 0;
    *out = strtod(a, &e);
    return e == in->s && errno == 0 ? 0 : -1;
}

/* A name in the plain form, copied NUL-terminated to *dst. */
static int s_name(s_in *in, char **dst)
{
    if (!s_eat(in, '"'))
        return -1;
    const char *a = in->s, *p = a;
    if (p == in->end ||
        !((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || *p == '_'))
        return -1;
    while (p < in->end && *p != '"') {
        char c = *p;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '.'))
            return -1;
        p++;
    }
    if (p == in->end || p - a >= 64)
        return -1;
    memcpy(*dst, a, (size_t)(p - a));
    (*dst)[p - a] = 0;
    *dst += p - a + 1;
    in->s = p + 1;
    return 0;
}

/* The points array in the plain form, at in->s. Names go to wp->names,
   which holds at least as many bytes as the array's text. 0 or -1. */
static int s_points(wire_points *wp, s_in *in)
{
    if (!s_eat(in, '['))
        return -1;
    char *names = wp->names;
    if (s_eat(in, ']'))
        return 0;
    do {
        if (wp->n == wp->cap) {
            wp->cap = wp->cap ? 2 * wp->cap : 1024;
            wp->p = util_xrealloc(wp->p, wp->cap * sizeof *wp->p);
        }
        wire_point *pt = &wp->p[wp->n];
        const char *a;
        if (!s_eat(in, '[') || (s_ws(in), s_number(in, &a)) != 0 ||
            s_int(a, in->s, &pt->step) != 0 || !s_eat(in, ','))
            return -1;
        pt->name = names;
        if (s_name(in, &names) != 0 || !s_eat(in, ',') || s_value(in, &pt->value) != 0 ||
            !s_eat(in, ']'))
            return -1;
        wp->n++;
    } while (s_eat(in, ','));
    return s_eat(in, ']') ? 0 : -1;
}

/* ---- the split ---- */

static json_t *s_split(wire_points *wp, const char *body, size_t len)
{
    s_in in = {body, body + len};
    const char *from = NULL, *to = NULL; /* the points array's text */
    if (!s_eat(&in, '{'))
        return NULL;
    if (!s_eat(&in, '}')) {
        do {
            if (!s_eat(&in, '"'))
                return NULL;
            const char *key = in.s;
            if (s_skip_string(&in) != 0)
                return NULL;
            int is_points = in.s - key == 7 && !memcmp(key, "points", 6);
            if (!s_eat(&in, ':'))
                return NULL;
            if (!from && is_points) {
                s_ws(&in);
                from = in.s;
                if (wp->names_cap < len) {
                    wp->names_cap = len;
                    wp->names = util_xrealloc(wp->names, len);
                }
                if (s_points(wp, &in) != 0)
                    return NULL;
                to = in.s;
            } else if (s_skip_value(&in) != 0) {
                return NULL;
            }
        } while (s_eat(&in, ','));
        if (!s_eat(&in, '}'))
            return NULL;
    }
    s_ws(&in);
    if (in.s != in.end || !from)
        return NULL;
    /* the rest, with "points": [] for the array, to jansson */
    size_t head = (size_t)(from - body), tail = (size_t)(in.end - to);
    if (wp->rest_cap < head + 2 + tail) {
        wp->rest_cap = head + 2 + tail;
        wp->rest = util_xrealloc(wp->rest, wp->rest_cap);
    }
    memcpy(wp->rest, body, head);
    memcpy(wp->rest + head, "[]", 2);
    memcpy(wp->rest + head + 2, to, tail);
    json_error_t err;
    json_t *msg = json_loadb(wp->rest, head + 2 + tail, JSON_REJECT_DUPLICATES, &err);
    const char *type = json_string_value(json_object_get(msg, "type"));
    if (!type || strcmp(type, "metrics") != 0) {
        json_decref(msg);
        return NULL;
    }
    return msg;
}

json_t *wire_points_split(wire_points *wp, const char *body, size_t len)
{
    wp->n = 0;
    json_t *msg = s_split(wp, body, len);
    if (!msg)
        wp->n = 0;
    return msg;
}
