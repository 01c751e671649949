/*  spec_param.c - a study's parameters (spec.h): the map to and from the
    unit cube that schedulers search in, legality, conditional (`when`)
    activity, coercion and checks of a trial's values, the expansion of
    trial.command's {placeholders}, and the objective helpers (constraint
    violation, objective vectors, which value is better).

    Split from spec.c, which parses and validates the spec itself; the two
    share spec__fail and spec__format_number (spec_internal.h).
*/
#include "spec.h"
#include "spec_internal.h"
#include "text.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double s_clamp01(double u)
{
    return u < 0 ? 0 : u > 1 ? 1 : u;
}

double spec_round_sig(double x)
{
    if (!isfinite(x) || x == 0)
        return x;
    char buf[40];
    snprintf(buf, sizeof buf, "%.15g", x);
    return strtod(buf, NULL);
}

/* ---- steps (quantised parameters) ---- */

int spec__parse_step(spec_param *p, const json_t *v, const char *path, spec_error *err)
{
    char field[200];
    snprintf(field, sizeof field, "%s.step", path);
    p->step = 0;
    if (!v)
        return 0;
    if (p->type == SPEC_INT ? !json_is_integer(v) : !json_is_number(v))
        return spec__fail(err, field, "must be %s",
                          p->type == SPEC_INT ? "a whole number >= 1" : "a number > 0");
    double st = json_number_value(v);
    if (!isfinite(st) || st <= 0 || (p->type == SPEC_INT && st < 1))
        return spec__fail(err, field, "must be %s, not %g",
                          p->type == SPEC_INT ? ">= 1" : "> 0", st);
    if (p->log)
        return spec__fail(err, field,
                          "step and log: choose one (a log scale has no even steps)");
    double n = (p->high - p->low) / st;
    if (n > 1e9)
        return spec__fail(err, field, "%g gives more than 1e9 values from low to high",
                          st);
    if (fabs(n - floor(n + 0.5)) > 1e-9 * fmax(1, n))
        return spec__fail(err, field,
                          "high - low (%g) must be a whole number of steps of %g "
                          "(high %g would be)",
                          p->high - p->low, st, p->low + floor(n) * st);
    p->step = st;
    return 0;
}

long spec_param_grid(const spec_param *p)
{
    if (p->type == SPEC_CHOICE)
        return (long)p->nvalues;
    if (p->step > 0)
        return (long)floor((p->high - p->low) / p->step + 0.5) + 1;
    if (p->type == SPEC_INT)
        return (long)(p->high - p->low) + 1;
    return 0;
}

json_t *spec_param_snap(const spec_param *p, double x)
{
    if (isnan(x))
        x = p->low;
    x = x < p->low ? p->low : x > p->high ? p->high : x;
    if (p->step > 0) {
        long n = spec_param_grid(p);
        double i = floor((x - p->low) / p->step + 0.5);
        i = i < 0 ? 0 : i > (double)(n - 1) ? (double)(n - 1) : i;
        x = i == (double)(n - 1) ? p->high : p->low + i * p->step;
    }
    if (p->type == SPEC_INT)
        return json_integer((json_int_t)floor(x + 0.5));
    x = spec_round_sig(x);
    return json_real(x < p->low ? p->low : x > p->high ? p->high : x);
}

json_t *spec_param_from_unit(const spec_param *p, double u)
{
    u = s_clamp01(isnan(u) ? 0.5 : u);
    if (p->step > 0) { /* each grid value owns an equal cell of [0, 1] */
        long n = spec_param_grid(p);
        double i = floor(u * (double)n);
        if (i > (double)(n - 1))
            i = (double)(n - 1);
        return spec_param_snap(p, p->low + i * p->step);
    }
    if (p->type == SPEC_CHOICE) {
        size_t i = (size_t)(u * (double)p->nvalues);
        if (i >= p->nvalues)
            i = p->nvalues - 1;
        return json_deep_copy(json_array_get(p->values, i));
    }
    if (p->type == SPEC_FLOAT) {
        double x =
            spec_round_sig(p->log ? exp(log(p->low) + u * (log(p->high) - log(p->low)))
                                  : p->low + u * (p->high - p->low));
        if (x < p->low)
            x = p->low;
        if (x > p->high)
            x = p->high;
        return json_real(x);
    }
    /* int: each integer owns an equal cell of [low-0.5, high+0.5] */
    double lo = p->low - 0.5, hi = p->high + 0.5;
    double x = p->log ? exp(log(lo) + u * (log(hi) - log(lo))) : lo + u * (hi - lo);
    double r = floor(x + 0.5);
    if (r < p->low)
        r = p->low;
    if (r > p->high)
        r = p->high;
    return json_integer((json_int_t)r);
}

double spec_param_to_unit(const spec_param *p, const json_t *value)
{
    if (!spec_param_legal(p, value))
        return -1;
    if (p->type == SPEC_CHOICE) {
        for (size_t i = 0; i < p->nvalues; i++)
            if (json_equal((json_t *)value, json_array_get(p->values, i)))
                return ((double)i + 0.5) / (double)p->nvalues;
        return -1;
    }
    double x = json_number_value(value);
    if (p->step > 0) {
        long n = spec_param_grid(p);
        double i = floor((x - p->low) / p->step + 0.5);
        return s_clamp01((i + 0.5) / (double)n);
    }
    double lo = p->low, hi = p->high;
    if (p->type == SPEC_INT) {
        lo -= 0.5;
        hi += 0.5;
    }
    if (hi == lo)
        return 0.5;
    double u = p->log ? (log(x) - log(lo)) / (log(hi) - log(lo)) : (x - lo) / (hi - lo);
    return s_clamp01(u);
}

int spec_param_legal(const spec_param *p, const json_t *value)
{
    if (!value)
        return 0;
    if (p->type == SPEC_CHOICE) {
        for (size_t i = 0; i < p->nvalues; i++)
            if (json_equal((json_t *)value, json_array_get(p->values, i)))
                return 1;
        return 0;
    }
    if (p->type == SPEC_INT && !json_is_integer(value))
        return 0;
    if (!json_is_number(value))
        return 0;
    double x = json_number_value(value);
    if (!isfinite(x) || x < p->low || x > p->high)
        return 0;
    if (p->step > 0) { /* on the grid, to rounding of the printed value */
        double k = (x - p->low) / p->step;
        return fabs(k - floor(k + 0.5)) <= 1e-9 * fmax(1, fabs(k));
    }
    return 1;
}

/* Shortest text that reads back as the same double. */
void spec__format_number(const json_t *v, char *buf, size_t size)
{
    if (json_is_integer(v)) {
        snprintf(buf, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return;
    }
    double x = json_real_value(v);
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

json_t *spec_expand_command(const spec_t *s, const json_t *params, spec_error *err)
{
    json_t *out = json_array();
    size_t i;
    json_t *arg;
    json_array_foreach(s->command, i, arg)
    {
        const char *a = json_string_value(arg);
        size_t cap = strlen(a) + 64, len = 0;
        char *buf = malloc(cap);
        if (!buf) {
            spec__fail(err, "trial.command", "out of memory");
            json_decref(out);
            return NULL;
        }
        for (const char *p = a; *p;) {
            char piece[512];
            const char *add = piece;
            size_t addlen;
            if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
                piece[0] = p[0];
                addlen = 1;
                p += 2;
            } else if (p[0] == '{') {
                const char *close = strchr(p, '}');
                char name[128];
                size_t n = close ? (size_t)(close - p - 1) : 0;
                if (!close || n == 0 || n >= sizeof name) {
                    char field[64];
                    snprintf(field, sizeof field, "trial.command[%zu]", i);
                    spec__fail(
                        err, field,
                        "unclosed or empty '{' placeholder in \"%s\" (write {{ for a "
                        "brace)",
                        a);
                    free(buf);
                    json_decref(out);
                    return NULL;
                }
                memcpy(name, p + 1, n);
                name[n] = 0;
                char *dflt = strchr(name, ':');
                if (dflt)
                    *dflt++ = 0;
                json_t *v = json_object_get(params, name);
                if (!v && !dflt) {
                    char field[64];
                    snprintf(field, sizeof field, "trial.command[%zu]", i);
                    int k = spec_param_index(s, name);
                    if (k >= 0)
                        spec__fail(
                            err, field,
                            "placeholder {%s} names a parameter that can be inactive "
                            "(space.%s.when): give a default, {%s:VALUE}",
                            name, name, name);
                    else
                        spec__fail(err, field,
                                   "placeholder {%s} names no parameter in space", name);
                    free(buf);
                    json_decref(out);
                    return NULL;
                }
                if (!v && spec_param_index(s, name) < 0) {
                    char field[64];
                    snprintf(field, sizeof field, "trial.command[%zu]", i);
                    spec__fail(err, field,
                               "placeholder {%s:%s} names no parameter in space", name,
                               dflt);
                    free(buf);
                    json_decref(out);
                    return NULL;
                }
                if (!v)
                    snprintf(piece, sizeof piece, "%s",
                             dflt); /* name ends with this block */
                else if (json_is_string(v))
                    add = json_string_value(v);
                else
                    spec__format_number(v, piece, sizeof piece);
                addlen = strlen(add);
                p = close + 1;
            } else {
                piece[0] = *p++;
                addlen = 1;
            }
            if (len + addlen + 1 > cap) {
                size_t ncap = (len + addlen + 1) * 2;
                char *nbuf = realloc(buf, ncap);
                if (!nbuf) {
                    spec__fail(err, "trial.command", "out of memory");
                    free(buf);
                    json_decref(out);
                    return NULL;
                }
                buf = nbuf;
                cap = ncap;
            }
            memcpy(buf + len, add, addlen);
            len += addlen;
        }
        buf[len] = 0;
        json_array_append_new(out, json_string(buf));
        free(buf);
    }
    return out;
}

int spec_param_index(const spec_t *s, const char *name)
{
    for (size_t k = 0; k < s->nparams; k++)
        if (s->params[k].name && !strcmp(s->params[k].name, name))
            return (int)k;
    return -1;
}

int spec_param_active(const spec_t *s, size_t k, const json_t *params)
{
    const spec_param *p = &s->params[k];
    if (!p->when)
        return 1;
    const char *parent;
    json_t *vals;
    json_object_foreach(p->when, parent, vals)
    {
        int j = spec_param_index(s, parent);
        if (j < 0 || !spec_param_active(s, (size_t)j, params))
            return 0;
        const json_t *v = json_object_get(params, parent);
        int hit = 0;
        size_t i;
        json_t *w;
        json_array_foreach(vals, i, w)
        {
            if (v && json_equal((json_t *)v, w))
                hit = 1;
        }
        if (!hit)
            return 0;
    }
    return 1;
}

int spec_params_prune(const spec_t *s, json_t *params)
{
    /* decide every parameter on the values as given, then remove */
    unsigned char *drop = calloc(s->nparams ? s->nparams : 1, 1);
    if (!drop)
        return -1;
    for (size_t k = 0; k < s->nparams; k++)
        drop[k] = s->params[k].when && !spec_param_active(s, k, params) &&
                  json_object_get(params, s->params[k].name);
    int removed = 0;
    for (size_t k = 0; k < s->nparams; k++)
        if (drop[k]) {
            json_object_del(params, s->params[k].name);
            removed++;
        }
    free(drop);
    return removed;
}

void spec_params_coerce(const spec_t *s, json_t *params)
{
    for (size_t k = 0; k < s->nparams; k++) {
        const spec_param *p = &s->params[k];
        json_t *v = json_object_get(params, p->name);
        if (!v || spec_param_legal(p, v))
            continue;
        json_t *nv = NULL;
        if (json_is_string(v)) {
            const char *t = json_string_value(v);
            char *end;
            errno = 0;
            long long i = strtoll(t, &end, 10);
            if (*t && !*end && !errno)
                nv = json_integer(i);
            else {
                double d = strtod(t, &end);
                if (*t && !*end)
                    nv = json_real(d);
            }
            if (nv && p->type == SPEC_FLOAT && json_is_integer(nv)) {
                json_t *r = json_real((double)json_integer_value(nv));
                json_decref(nv);
                nv = r;
            }
        } else if (json_is_number(v) && p->type == SPEC_CHOICE) {
            char buf[64];
            if (json_is_integer(v))
                snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
            else
                spec__format_number(v, buf, sizeof buf);
            nv = json_string(buf);
        } else if (json_is_integer(v) && p->type == SPEC_FLOAT) {
            nv = json_real((double)json_integer_value(v));
        }
        if (nv && p->type == SPEC_CHOICE && !spec_param_legal(p, nv) &&
            json_is_integer(nv)) {
            json_t *r = json_real((double)json_integer_value(nv));
            json_decref(nv);
            nv = r;
        }
        if (nv && spec_param_legal(p, nv))
            json_object_set(params, p->name, nv);
        json_decref(nv);
    }
}

int spec_params_check(const spec_t *s, json_t *params, spec_error *err)
{
    char field[128];
    if (!json_is_object(params))
        return spec__fail(err, "params", "must be an object");
    const char *key;
    json_t *v;
    json_object_foreach(params, key, v)
    {
        if (spec_param_index(s, key) < 0) {
            snprintf(field, sizeof field, "params.%s", key);
            return spec__fail(err, field, "names no parameter in space");
        }
    }
    for (size_t k = 0; k < s->nparams; k++) {
        const spec_param *p = &s->params[k];
        snprintf(field, sizeof field, "params.%s", p->name);
        v = json_object_get(params, p->name);
        int active = spec_param_active(s, k, params);
        if (!active) {
            if (v)
                return spec__fail(
                    err, field,
                    "is inactive for these values (space.%s.when); leave it out",
                    p->name);
            continue;
        }
        if (!v && p->konst) {
            json_object_set(params, p->name, json_array_get(p->values, 0));
            continue;
        }
        if (!v)
            return spec__fail(err, field,
                              "missing (every active parameter needs a value)");
        if (!spec_param_legal(p, v)) {
            if (p->type == SPEC_CHOICE) {
                char *list = text_json_dumps(p->values, JSON_COMPACT);
                spec__fail(err, field, "must be one of %s", list ? list : "the values");
                free(list);
                return -1;
            }
            if (p->step > 0)
                return spec__fail(err, field, "must be %s from %g to %g in steps of %g",
                                  p->type == SPEC_INT ? "an integer" : "a number", p->low,
                                  p->high, p->step);
            return spec__fail(err, field, "must be %s from %g to %g",
                              p->type == SPEC_INT ? "an integer" : "a number", p->low,
                              p->high);
        }
    }
    return 0;
}

const json_t *spec_json_objective(const json_t *spec)
{
    const json_t *o = json_object_get(spec, "objective");
    return json_is_array(o) ? json_array_get(o, 0) : o;
}

double spec_violation(const spec_t *s, const json_t *metrics)
{
    double v = 0;
    for (size_t k = 0; k < s->nconstraints; k++) {
        const spec_constraint *c = &s->constraints[k];
        const json_t *m = json_object_get(metrics, c->metric);
        if (!json_is_number(m) || !isfinite(json_number_value(m)))
            return INFINITY;
        double x = json_number_value(m);
        double over = c->upper ? x - c->bound : c->bound - x;
        if (over > 0)
            v += over;
    }
    return v;
}

int spec_objective_values(const spec_t *s, double value, const json_t *metrics,
                          double *out)
{
    int ok = 1;
    for (size_t k = 0; k < s->nobjectives; k++) {
        double x = value;
        if (k > 0) {
            const json_t *m = json_object_get(metrics, s->objectives[k].metric);
            x = json_is_number(m) ? json_number_value(m) : NAN;
        }
        if (!isfinite(x))
            ok = 0;
        out[k] = s->objectives[k].maximize ? -x : x;
    }
    return ok ? 0 : -1;
}

int spec_better(const spec_t *s, double a, double b)
{
    return spec_better_mode(s->maximize, a, b);
}

int spec_better_mode(int maximize, double a, double b)
{
    /* a diverged run (inf, -inf, nan) is the worst result in either
       direction; an infinity still beats a NaN (also "no value yet") */
    if (isfinite(a) != isfinite(b))
        return isfinite(a);
    if (!isfinite(a))
        return !isnan(a) && isnan(b);
    return maximize ? a > b : a < b;
}

const char *spec_launcher_name(int launcher)
{
    return launcher == SPEC_LAUNCH_MPIRUN  ? "mpirun"
           : launcher == SPEC_LAUNCH_TORCH ? "torch"
                                           : "invalid";
}

/* ---- limits (docs/spec.md, Limits) ---- */

#define S_REAL_MAX_LEN 24 /* "-2.2250738585072014e-308": %.17g, jansson's */

/* The length of the longest value of p: as compact JSON (`json` set: a
   string quoted and escaped) or as the text a {placeholder} becomes. */
static size_t s_value_max_len(const spec_param *p, int json)
{
    if (p->type == SPEC_FLOAT)
        return S_REAL_MAX_LEN;
    if (p->type == SPEC_INT) {
        char a[64], b[64];
        snprintf(a, sizeof a, "%.0f", p->low);
        snprintf(b, sizeof b, "%.0f", p->high);
        return strlen(a) > strlen(b) ? strlen(a) : strlen(b);
    }
    size_t most = 0, i;
    json_t *v;
    json_array_foreach(p->values, i, v)
    {
        size_t len;
        if (!json && json_is_string(v)) {
            len = strlen(json_string_value(v));
        } else if (json_is_real(v)) {
            len = S_REAL_MAX_LEN;
        } else {
            char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            len = t ? strlen(t) : S_REAL_MAX_LEN;
            free(t);
        }
        if (len > most)
            most = len;
    }
    return most;
}

size_t spec_params_json_max(const spec_t *s)
{
    size_t len = 2; /* {} */
    for (size_t k = 0; k < s->nparams; k++) {
        const spec_param *p = &s->params[k];
        /* "name":value, names need no escaping (spec_valid_name) */
        len += strlen(p->name) + 3 + s_value_max_len(p, 1) + (k > 0);
    }
    return len;
}

/* Total choice values, and JIZHI_PARAMS within the exec limit. */
int spec__check_sizes(const spec_t *s, spec_error *err)
{
    size_t total = 0;
    for (size_t k = 0; k < s->nparams; k++)
        if (s->params[k].type == SPEC_CHOICE)
            total += s->params[k].nvalues;
    if (total > SPEC_MAX_CHOICE_VALUES)
        return spec__fail(
            err, "space",
            "%zu choice values in all is more than the limit of %d values per "
            "spec (docs/spec.md, Limits)",
            total, SPEC_MAX_CHOICE_VALUES);
    size_t pj = spec_params_json_max(s);
    if (pj > SPEC_MAX_PARAMS_JSON)
        return spec__fail(
            err, "space",
            "the parameters' JSON (JIZHI_PARAMS) can reach %zu bytes, more than "
            "the limit of %d bytes (a trial could not be started: one "
            "environment string must stay under 128 KiB); use fewer "
            "parameters or shorter names and values (docs/spec.md, Limits)",
            pj, SPEC_MAX_PARAMS_JSON);
    return 0;
}

/* Each trial.command argument, its placeholders replaced by their longest
   values, within the exec limit (an upper bound: the placeholder's own
   text is counted too). */
int spec__check_args(const spec_t *s, spec_error *err)
{
    size_t i;
    json_t *arg;
    json_array_foreach(s->command, i, arg)
    {
        const char *a = json_string_value(arg);
        size_t len = strlen(a);
        for (const char *p = strchr(a, '{'); p; p = strchr(p, '{')) {
            if (p[1] == '{') {
                p += 2;
                continue;
            }
            const char *close = strchr(p, '}');
            if (!close)
                break; /* spec_expand_command names the error */
            char name[128];
            size_t n = (size_t)(close - p - 1);
            if (n < sizeof name) {
                memcpy(name, p + 1, n);
                name[n] = 0;
                char *colon = strchr(name, ':');
                if (colon)
                    *colon = 0;
                int k = spec_param_index(s, name);
                if (k >= 0)
                    len += s_value_max_len(&s->params[k], 0);
            }
            p = close + 1;
        }
        if (len > SPEC_MAX_ARG_BYTES) {
            char field[64];
            snprintf(field, sizeof field, "trial.command[%zu]", i);
            return spec__fail(
                err, field,
                "can reach %zu bytes once its placeholders are replaced, more "
                "than the limit of %d bytes per argument (docs/spec.md, "
                "Limits)",
                len, SPEC_MAX_ARG_BYTES);
        }
    }
    return 0;
}
