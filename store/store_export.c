/*  store_export.c - a study's trials as CSV or JSON, the bytes of `jizhi
    study export` and of the web page's download (store_export.h). */
#include "store_export.h"

#include "../common/text.h"

#include <stdlib.h>
#include <string.h>

int store_export_internal(const char *name)
{
    return !strncmp(name, "grad_sqnorm_", 12) || !strcmp(name, "batch_small") ||
           !strcmp(name, "batch_big");
}

void store_export_field(FILE *f, const char *text, int last)
{
    if (strpbrk(text, ",\"\n\r")) {
        fputc('"', f);
        for (const char *p = text; *p; p++) {
            if (*p == '"')
                fputc('"', f);
            fputc(*p, f);
        }
        fputc('"', f);
    } else {
        fputs(text, f);
    }
    fputc(last ? '\n' : ',', f);
}

/* Sorted union of the keys of field `key` over all trials. */
static json_t *s_key_union(json_t *trials, const char *key)
{
    json_t *set = json_object();
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t)
    {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(t, key), k, v)
            json_object_set_new(set, k, json_true());
    }
    json_t *keys = json_array();
    char *text = text_json_dumps(set, JSON_SORT_KEYS | JSON_COMPACT);
    json_t *sorted =
        json_loads(text, JSON_DECODE_ANY, NULL); /* key order kept as sorted */
    const char *k;
    json_t *v;
    json_object_foreach(sorted, k, v) json_array_append_new(keys, json_string(k));
    json_decref(sorted);
    free(text);
    json_decref(set);
    return keys;
}

/* One CSV cell of a JSON value: reals as their shortest text, "" for none. */
static void s_cell(const json_t *v, char *cell, size_t size)
{
    if (json_is_real(v))
        text_double(json_real_value(v), cell);
    else if (!v || json_is_null(v))
        cell[0] = 0;
    else if (json_is_string(v))
        snprintf(cell, size, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(cell, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_boolean(v))
        snprintf(cell, size, "%s", json_is_true(v) ? "true" : "false");
    else
        snprintf(cell, size, "-");
}

/* Names of the params some trial changed after it was sampled. */
static json_t *s_changed_params(json_t *trials, json_t *pk)
{
    json_t *out = json_array();
    size_t k;
    json_t *name;
    json_array_foreach(pk, k, name)
    {
        size_t i;
        json_t *t;
        json_array_foreach(trials, i, t)
        {
            const char *n = json_string_value(name);
            json_t *a = json_object_get(json_object_get(t, "params"), n);
            json_t *b = json_object_get(json_object_get(t, "sampled"), n);
            if (a && b && !json_equal(a, b)) {
                json_array_append(out, name);
                break;
            }
        }
    }
    return out;
}

void store_export_csv(FILE *f, json_t *trials, int all)
{
    json_t *pk = s_key_union(trials, "params"), *mk = s_key_union(trials, "metrics");
    json_t *ck = s_changed_params(trials, pk);
    if (!all) { /* drop internal metrics */
        for (size_t i = json_array_size(mk); i-- > 0;)
            if (store_export_internal(json_string_value(json_array_get(mk, i))))
                json_array_remove(mk, i);
    }
    /* columns: trial fields, param_X (final), sampled_X (for the params
       changed live), metric_X (last values) */
    json_t *cols = json_array(); /* [prefix, field of the trial, key] */
    static const char *const fixed[] = {"number",     "id",     "state", "attempt",
                                        "generation", "parent", "value"};
    for (size_t c = 0; c < sizeof fixed / sizeof fixed[0]; c++)
        json_array_append_new(cols, json_pack("[s, n, s]", "", fixed[c]));
    /* spec_mark_trials' marks, for studies with several objectives or
       constraints */
    static const char *const marks[] = {"feasible", "pareto", "best"};
    for (size_t c = 0; c < sizeof marks / sizeof marks[0]; c++) {
        int any = 0;
        size_t i;
        json_t *t;
        json_array_foreach(trials, i, t) any |= json_object_get(t, marks[c]) != NULL;
        if (any)
            json_array_append_new(cols, json_pack("[s, n, s]", "", marks[c]));
    }
    const struct {
        json_t *keys;
        const char *prefix, *field;
    } groups[] = {{pk, "param_", "params"},
                  {ck, "sampled_", "sampled"},
                  {mk, "metric_", "metrics"}};
    for (int g = 0; g < 3; g++)
        for (size_t k = 0; k < json_array_size(groups[g].keys); k++)
            json_array_append_new(cols, json_pack("[s, s, O]", groups[g].prefix,
                                                  groups[g].field,
                                                  json_array_get(groups[g].keys, k)));
    size_t ncols = json_array_size(cols);
    char cell[512];
    for (size_t c = 0; c < ncols; c++) {
        json_t *col = json_array_get(cols, c);
        snprintf(cell, sizeof cell, "%s%s", json_string_value(json_array_get(col, 0)),
                 json_string_value(json_array_get(col, 2)));
        store_export_field(f, cell, c + 1 == ncols);
    }
    size_t j;
    json_t *t;
    json_array_foreach(trials, j, t)
    {
        for (size_t c = 0; c < ncols; c++) {
            json_t *col = json_array_get(cols, c);
            const char *field = json_string_value(json_array_get(col, 1));
            const char *key = json_string_value(json_array_get(col, 2));
            s_cell(json_object_get(field ? json_object_get(t, field) : t, key), cell,
                   sizeof cell);
            store_export_field(f, cell, c + 1 == ncols);
        }
    }
    json_decref(cols);
    json_decref(pk);
    json_decref(mk);
    json_decref(ck);
}

void store_export_json(FILE *f, const json_t *trials)
{
    char *text = text_json_dumps(trials, JSON_INDENT(2));
    fprintf(f, "%s\n", text ? text : "[]");
    free(text);
}

spec_t *store_export_mark(json_t *detail)
{
    spec_error err;
    spec_t *spec = spec_parse(json_object_get(detail, "spec"), 0, &err);
    if (spec && (spec->nobjectives > 1 || spec->nconstraints)) {
        spec_mark_trials(spec, json_object_get(detail, "trials"));
        return spec;
    }
    spec_destroy(&spec);
    return NULL;
}
