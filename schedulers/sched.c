/*  sched.c - scheduler registry, shared helpers and the rng.

    sched_new looks the spec's scheduler type up in the table below; each
    scheduler lives in its own file (sched_random.c, sched_grid.c, ...).
*/
#include "sched.h"
#include "common/util.h"
#include "common/wire.h"
#include "sched_bo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef sched_t *(*sched_ctor)(const spec_t *spec, char *err, size_t errsize);

static const struct {
    const char *name;
    sched_ctor ctor;
} s_registry[] = {
    {"random", sched_random_new},
    {"grid", sched_grid_new},
    {"bo", sched_bo_new},
    {"tpe", sched_tpe_new},
    {"cmaes", sched_cmaes_new},
    {"pbt", sched_pbt_new},
    {"batchsize", sched_batchsize_new},
};

sched_t *sched_new(const spec_t *spec, char *err, size_t errsize)
{
    for (size_t i = 0; i < sizeof s_registry / sizeof s_registry[0]; i++)
        if (strcmp(spec->sched_type, s_registry[i].name) == 0)
            return s_registry[i].ctor(spec, err, errsize);
    size_t off = (size_t)snprintf(
        err, errsize,
        "scheduler.type: unknown scheduler \"%s\" (expected one of:", spec->sched_type);
    for (size_t i = 0; i < sizeof s_registry / sizeof s_registry[0] && off < errsize; i++)
        off += (size_t)snprintf(err + off, errsize - off, " %s", s_registry[i].name);
    if (off < errsize)
        snprintf(err + off, errsize - off, ")");
    return NULL;
}

/* Early-stopping rules by early_stopping.type. */
static const struct {
    const char *name;
    sched_ctor ctor;
} s_stoppers[] = {
    {"asha", sched_asha_new},
    {"median", sched_median_new},
    {"hyperband", sched_hyperband_new},
};

int sched_monitors_new(const spec_t *spec, sched_t **out, int max, char *err,
                       size_t errsize)
{
    int n = 0;
    if (spec->early_stop) {
        const char *type = json_string_value(json_object_get(spec->early_stop, "type"));
        sched_ctor ctor = NULL;
        for (size_t i = 0; i < sizeof s_stoppers / sizeof s_stoppers[0]; i++)
            if (type && s_stoppers[i].ctor && strcmp(type, s_stoppers[i].name) == 0)
                ctor = s_stoppers[i].ctor;
        if (!ctor) {
            snprintf(err, errsize,
                     "early_stopping.type: \"%s\" is not available in this build",
                     type ? type : "");
            return -1;
        }
        if (n < max && !(out[n++] = ctor(spec, err, errsize)))
            return -1;
    }
    if (spec->guard && n < max && !(out[n++] = sched_guard_new(spec, err, errsize))) {
        for (int i = 0; i < n - 1; i++)
            sched_destroy(&out[i]);
        return -1;
    }
    return n;
}

int sched_check(const spec_t *spec, char *err, size_t errsize)
{
    sched_t *s = sched_new(spec, err, errsize);
    if (!s)
        return -1;
    sched_destroy(&s);
    sched_t *mon[4];
    int n = sched_monitors_new(spec, mon, 4, err, errsize);
    for (int i = 0; i < n; i++)
        sched_destroy(&mon[i]);
    return n < 0 ? -1 : 0;
}

spec_t *sched_admit(json_t *spec_json, int check_command, char *err, size_t errsize)
{
    spec_error serr;
    spec_t *spec = spec_parse(spec_json, check_command, &serr);
    if (!spec) {
        spec_strerror(&serr, err, errsize);
        return NULL;
    }
    if (sched_check(spec, err, errsize) != 0) {
        spec_destroy(&spec);
        return NULL;
    }
    return spec;
}

void sched_destroy(sched_t **sp)
{
    if (sp && *sp) {
        (*sp)->ops->destroy(*sp);
        *sp = NULL;
    }
}

void sched_instr_fini(sched_instr *in)
{
    if (in) {
        json_decref(in->args);
        in->args = NULL;
    }
}

json_t *sched_json_real(double x)
{
    return wire_real(x);
}

double sched_json_double(const json_t *obj, const char *key)
{
    double x;
    return wire_to_double(json_object_get(obj, key), &x) == 0 ? x : NAN;
}

int sched_json_point(const json_t *e, int with_value, long *trial, json_t **params,
                     double *value, int *failed)
{
    json_int_t id;
    json_t *v = NULL;
    if (json_unpack((json_t *)e, "{s:I,s:o,s?o}", "trial", &id, "params", params, "value",
                    &v) != 0 ||
        !json_is_object(*params))
        return -1;
    *trial = (long)id;
    *value = NAN;
    *failed = 0;
    if (!with_value)
        return 0;
    if (json_is_number(v) && isfinite(json_number_value(v)))
        *value = json_number_value(v);
    else if (json_is_null(v))
        *failed = 1;
    else
        return -1;
    return 0;
}

/* splitmix64 (common/util.h) with a seed and a stream mixed in. */
void sched_rng_seed(sched_rng *r, unsigned long long seed, unsigned long long stream)
{
    r->s = seed * 0x9E3779B97F4A7C15ULL ^ (stream + 0x632BE59BD9B4E019ULL);
    (void)sched_rng_u64(r);
}

unsigned long long sched_rng_u64(sched_rng *r)
{
    uint64_t s = r->s;
    unsigned long long z = util_splitmix64(&s);
    r->s = s;
    return z;
}

double sched_rng_uniform(sched_rng *r)
{
    return (double)(sched_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

json_t *sched_random_params(const spec_t *spec, sched_rng *r)
{
    json_t *p = json_object();
    for (size_t i = 0; i < spec->nparams; i++) {
        const spec_param *sp = &spec->params[i];
        json_object_set_new(p, sp->name, spec_param_from_unit(sp, sched_rng_uniform(r)));
    }
    return p;
}

int sched_vi_cmp(const void *a, const void *b)
{
    const sched_vi *x = a, *y = b;
    if (x->v != y->v)
        return (x->v > y->v) - (x->v < y->v);
    return (x->i > y->i) - (x->i < y->i);
}

void *sched_alloc(size_t size, const sched_ops *ops, const spec_t *spec, char *err,
                  size_t errsize)
{
    sched_t *s = calloc(1, size);
    if (!s) {
        snprintf(err, errsize, "out of memory");
        return NULL;
    }
    s->ops = ops;
    s->spec = spec;
    return s;
}

const char *sched_opt_unknown(const json_t *obj, const char *const *known)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = !strcmp(key, known[i]);
        if (!ok)
            return key;
    }
    return NULL;
}

int sched_opt_num(const json_t *obj, const char *where, const char *key, double dflt,
                  double lo, double hi, int whole, double *out, char *err, size_t errsize)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (isfinite(x) && x >= lo && x <= hi && (!whole || x == floor(x))) {
        *out = x;
        return 0;
    }
    if (isinf(lo) && isinf(hi))
        snprintf(err, errsize, "%s.%s: must be a number", where, key);
    else
        snprintf(err, errsize, "%s.%s: must be %s from %g to %g", where, key,
                 whole ? "an integer" : "a number", lo, hi);
    return -1;
}
