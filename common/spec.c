/*  spec.c - study spec parsing and validation (see spec.h).

    Every check names the field at fault. The parser walks the JSON object
    by hand rather than with a schema so that each message can say what
    was expected.
*/
#include "spec.h"
#include "spec_internal.h"
#include "text.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int spec__fail(spec_error *err, const char *field, const char *fmt, ...)
{
    if (err) {
        snprintf(err->field, sizeof err->field, "%s", field);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->text, sizeof err->text, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int spec_valid_name(const char *s)
{
    if (!s || !(isalpha((unsigned char)*s) || *s == '_'))
        return 0;
    for (const char *p = s; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_'))
            return 0;
    return strlen(s) < 64;
}

/* Study names become folder names (logs, checkpoints): no leading '.' or
   '-', so never "." or "..". */
static int s_valid_study_name(const char *s)
{
    if (!s || !*s || strlen(s) > 100 || *s == '.' || *s == '-')
        return 0;
    for (const char *p = s; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '-' || *p == '.'))
            return 0;
    return 1;
}

typedef struct {
    char *key; /* the value's type and text: "s:lars", "i:3", "r:0.5" */
    size_t idx;
} s_choice_key;

static int s_cmp_choice_key(const void *a, const void *b)
{
    const s_choice_key *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

/* The index of the first value of the array `vals` (strings and numbers)
   that repeats an earlier one (as json_equal: 1 and 1.0 differ), -1 when
   none, -2 when out of memory. Sorts, so a long list costs n log n. */
static size_t s_first_repeat(const json_t *vals)
{
    size_t n = json_array_size(vals), first = (size_t)-1;
    s_choice_key *k = calloc(n ? n : 1, sizeof *k);
    if (!k)
        return (size_t)-2;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(vals, i);
        char num[TEXT_DOUBLE_MAX];
        const char *text = json_is_string(v) ? json_string_value(v)
                           : json_is_integer(v)
                               ? (snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT,
                                           json_integer_value(v)),
                                  num)
                               : text_double(json_real_value(v), num);
        size_t len = strlen(text) + 3;
        k[i].idx = i;
        if (!(k[i].key = malloc(len))) {
            first = (size_t)-2;
            n = i;
            break;
        }
        snprintf(k[i].key, len, "%c:%s",
                 json_is_string(v)    ? 's'
                 : json_is_integer(v) ? 'i'
                                      : 'r',
                 text);
    }
    if (first != (size_t)-2) {
        qsort(k, n, sizeof *k, s_cmp_choice_key);
        for (size_t i = 1; i < n; i++)
            if (!strcmp(k[i].key, k[i - 1].key) &&
                (k[i].idx < first || first == (size_t)-1))
                first = k[i].idx; /* k[i-1] is an earlier equal value */
    }
    for (size_t i = 0; i < n; i++)
        free(k[i].key);
    free(k);
    return first;
}

/* Checks that object `obj` at `path` has only keys from the NULL-ended
   list `allowed`. */
static int s_only_keys(json_t *obj, const char *path, const char *const *allowed,
                       spec_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(key, *a) == 0)
                ok = 1;
        if (!ok) {
            char field[128];
            snprintf(field, sizeof field, "%s%s%s", path, *path ? "." : "", key);
            char list[160] = "";
            size_t off = 0;
            for (const char *const *a = allowed; *a && off < sizeof list; a++)
                off += (size_t)snprintf(list + off, sizeof list - off, "%s%s",
                                        a == allowed ? "" : ", ", *a);
            return spec__fail(err, field, "unknown key (expected one of: %s)", list);
        }
    }
    return 0;
}

static const char *s_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* Fetches obj.key with an expected type; missing and optional -> *out NULL. */
static int s_get(json_t *obj, const char *path, const char *key, json_type want,
                 int required, json_t **out, spec_error *err)
{
    char field[128];
    snprintf(field, sizeof field, "%s%s%s", path, *path ? "." : "", key);
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v) {
        if (required)
            return spec__fail(err, field, "missing (required)");
        return 0;
    }
    int ok = json_typeof(v) == want || (want == JSON_REAL && json_is_integer(v)) ||
             (want == JSON_TRUE && json_is_boolean(v));
    if (!ok) {
        const char *expected = want == JSON_OBJECT    ? "an object"
                               : want == JSON_ARRAY   ? "an array"
                               : want == JSON_STRING  ? "a string"
                               : want == JSON_INTEGER ? "an integer"
                               : want == JSON_REAL    ? "a number"
                                                      : "true or false";
        return spec__fail(err, field, "must be %s, not %s", expected, s_type_name(v));
    }
    *out = v;
    return 0;
}

/* Parses p->when from def.when: parents are other choice/const parameters
   of the space, each with a non-empty array of its legal values. Cycles
   are refused afterwards by s_check_cycles (the stored spec's keys are
   sorted, so "defined earlier" cannot be the rule). */
static int s_parse_when(const spec_t *s, size_t k, json_t *def, const char *path,
                        spec_error *err)
{
    spec_param *p = &s->params[k];
    json_t *w = json_object_get(def, "when");
    if (!w)
        return 0;
    char field[200];
    snprintf(field, sizeof field, "%s.when", path);
    if (!json_is_object(w) || json_object_size(w) == 0)
        return spec__fail(err, field,
                          "must be a non-empty object {\"parent\": [values...]}, not %s",
                          json_is_object(w) ? "an empty object" : s_type_name(w));
    const char *key;
    json_t *vals;
    json_object_foreach(w, key, vals)
    {
        snprintf(field, sizeof field, "%s.when.%s", path, key);
        if (!strcmp(key, p->name))
            return spec__fail(err, field, "a parameter cannot depend on itself");
        int j = spec_param_index(s, key);
        if (j < 0)
            return spec__fail(err, field, "names no parameter in space");
        const spec_param *par = &s->params[j];
        if (par->type != SPEC_CHOICE)
            return spec__fail(err, field, "the parent must be a choice or a const");
        if (!json_is_array(vals) || json_array_size(vals) == 0)
            return spec__fail(err, field, "must be a non-empty array of values of %s",
                              key);
        size_t i;
        json_t *v;
        json_array_foreach(vals, i, v)
        {
            if (!spec_param_legal(par, v)) {
                char f2[240];
                snprintf(f2, sizeof f2, "%s[%zu]", field, i);
                return spec__fail(err, f2, "not a value of %s", key);
            }
        }
    }
    p->when = json_incref(w);
    return 0;
}

/* 1 when `target` is reached from parameter k by following `when`
   parents; depth-bounded by the number of parameters. */
static int s_reaches(const spec_t *s, size_t k, size_t target, size_t depth)
{
    if (depth > s->nparams || !s->params[k].when)
        return 0;
    const char *parent;
    json_t *v;
    json_object_foreach(s->params[k].when, parent, v)
    {
        int j = spec_param_index(s, parent);
        if (j < 0)
            continue;
        if ((size_t)j == target || s_reaches(s, (size_t)j, target, depth + 1))
            return 1;
    }
    return 0;
}

static int s_check_cycles(const spec_t *s, spec_error *err)
{
    for (size_t k = 0; k < s->nparams; k++) {
        if (!s->params[k].when)
            continue;
        const char *parent;
        json_t *v;
        json_object_foreach(s->params[k].when, parent, v)
        {
            int j = spec_param_index(s, parent);
            if (j >= 0 && s_reaches(s, (size_t)j, k, 0)) {
                char field[200];
                snprintf(field, sizeof field, "space.%s.when.%s", s->params[k].name,
                         parent);
                return spec__fail(err, field, "a cycle: %s depends on %s through %s",
                                  s->params[k].name, s->params[k].name, parent);
            }
        }
    }
    return 0;
}

static int s_parse_param(spec_param *p, const char *name, json_t *def, spec_error *err)
{
    char path[128];
    snprintf(path, sizeof path, "space.%s", name);
    if (!spec_valid_name(name))
        return spec__fail(
            err, path,
            "parameter names must match [A-Za-z_][A-Za-z0-9_]* (under 64 characters)");
    if (!json_is_object(def))
        return spec__fail(err, path, "must be an object, not %s", s_type_name(def));
    if (!(p->name = strdup(name)))
        return spec__fail(err, path, "out of memory");
    json_t *type;
    if (s_get(def, path, "type", JSON_STRING, 1, &type, err))
        return -1;
    const char *t = json_string_value(type);
    char field[160];
    if (!strcmp(t, "float") || !strcmp(t, "int")) {
        static const char *const keys[] = {"type", "low",  "high", "log",
                                           "step", "when", NULL};
        if (s_only_keys(def, path, keys, err))
            return -1;
        p->type = !strcmp(t, "float") ? SPEC_FLOAT : SPEC_INT;
        json_t *lo, *hi, *lg;
        json_type nt = p->type == SPEC_INT ? JSON_INTEGER : JSON_REAL;
        if (s_get(def, path, "low", nt, 1, &lo, err) ||
            s_get(def, path, "high", nt, 1, &hi, err) ||
            s_get(def, path, "log", JSON_TRUE, 0, &lg, err))
            return -1;
        p->low = json_number_value(lo);
        p->high = json_number_value(hi);
        p->log = lg && json_is_true(lg);
        if (!isfinite(p->low) || !isfinite(p->high))
            return spec__fail(err, path, "low and high must be finite");
        snprintf(field, sizeof field, "%s.low", path);
        if (p->low > p->high)
            return spec__fail(err, field, "must be <= high (%g > %g)", p->low, p->high);
        if (p->log && p->low <= 0)
            return spec__fail(err, field, "must be > 0 when log is true");
        if (spec__parse_step(p, json_object_get(def, "step"), path, err))
            return -1;
    } else if (!strcmp(t, "choice")) {
        static const char *const keys[] = {"type", "values", "when", NULL};
        if (s_only_keys(def, path, keys, err))
            return -1;
        p->type = SPEC_CHOICE;
        json_t *vals;
        if (s_get(def, path, "values", JSON_ARRAY, 1, &vals, err))
            return -1;
        snprintf(field, sizeof field, "%s.values", path);
        if (json_array_size(vals) == 0)
            return spec__fail(err, field, "must not be empty");
        size_t i;
        json_t *v;
        json_array_foreach(vals, i, v)
        {
            if (!json_is_string(v) && !json_is_number(v)) {
                snprintf(field, sizeof field, "%s.values[%zu]", path, i);
                return spec__fail(err, field, "must be a string or a number, not %s",
                                  s_type_name(v));
            }
        }
        if (json_array_size(vals) > SPEC_MAX_CHOICE_VALUES)
            return spec__fail(err, field,
                              "%zu values is more than the limit of %d values per spec "
                              "(docs/spec.md, Limits)",
                              json_array_size(vals), SPEC_MAX_CHOICE_VALUES);
        size_t rep = s_first_repeat(vals);
        if (rep == (size_t)-2)
            return spec__fail(err, field, "out of memory");
        if (rep != (size_t)-1) {
            snprintf(field, sizeof field, "%s.values[%zu]", path, rep);
            return spec__fail(err, field, "repeats an earlier value");
        }
        p->values = json_incref(vals);
        p->nvalues = json_array_size(vals);
    } else if (!strcmp(t, "const")) {
        static const char *const keys[] = {"type", "value", "when", NULL};
        if (s_only_keys(def, path, keys, err))
            return -1;
        json_t *val = json_object_get(def, "value");
        snprintf(field, sizeof field, "%s.value", path);
        if (!val)
            return spec__fail(err, field, "missing (required)");
        if (!json_is_string(val) && !json_is_number(val))
            return spec__fail(err, field, "must be a string or a number, not %s",
                              s_type_name(val));
        p->type = SPEC_CHOICE;
        p->konst = 1;
        p->values = json_pack("[O]", val);
        p->nvalues = 1;
    } else {
        snprintf(field, sizeof field, "%s.type", path);
        return spec__fail(
            err, field, "must be \"float\", \"int\", \"choice\" or \"const\", not \"%s\"",
            t);
    }
    return 0;
}

/* An executable regular file (a directory passes access(X_OK) too). */
static int s_executable(const char *path)
{
    struct stat st;
    return access(path, X_OK) == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* 1 when the program `cmd` is found as a trial would find it: a path with
   a '/' relative to `cwd` (NULL: this process's folder), a bare name in
   venv/bin (when `venv`) and then on PATH. */
static int s_command_found(const char *cmd, const char *cwd, const char *venv)
{
    char buf[4096];
    if (strchr(cmd, '/')) {
        if (cmd[0] == '/' || !cwd)
            return s_executable(cmd);
        snprintf(buf, sizeof buf, "%s/%s", cwd, cmd);
        return s_executable(buf);
    }
    if (venv) {
        snprintf(buf, sizeof buf, "%s/bin/%s", venv, cmd);
        if (s_executable(buf))
            return 1;
    }
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        snprintf(buf, sizeof buf, "%.*s/%s", (int)len, len ? path : ".", cmd);
        if (s_executable(buf))
            return 1;
        if (!end)
            break;
        path = end + 1;
    }
    return 0;
}

/* trial.command[0] judged from where the trial runs (trial.cwd,
   trial.venv): 0, or -1 with err naming what was looked for. */
static int s_check_command(const spec_t *s, const char *cmd0, spec_error *err)
{
    if (s_command_found(cmd0, s->cwd, s->venv))
        return 0;
    if (strchr(cmd0, '/') && cmd0[0] != '/' && s->cwd)
        return spec__fail(
            err, "trial.command[0]",
            "command not found: \"%s\" (looked for %s/%s, in trial.cwd; not "
            "there or not executable)",
            cmd0, s->cwd, strncmp(cmd0, "./", 2) ? cmd0 : cmd0 + 2);
    if (s->venv && !strchr(cmd0, '/'))
        return spec__fail(err, "trial.command[0]",
                          "command not found: \"%s\" (not in %s/bin, not on PATH or not "
                          "executable)",
                          cmd0, s->venv);
    return spec__fail(err, "trial.command[0]",
                      "command not found: \"%s\" (not on PATH or not executable)", cmd0);
}

/* trial.cwd and trial.venv: absolute paths (`jizhi run` and `study submit`
   make relative ones absolute, the web API fills in its folder), stored
   in s. With `check` (the submitter sees the file system the trials will
   see): cwd is a folder, venv a virtual environment with bin/python. */
static int s_parse_paths(spec_t *s, json_t *trial, int check, spec_error *err)
{
    static const char *const keys[2] = {"cwd", "venv"};
    for (int i = 0; i < 2; i++) {
        json_t *v;
        char field[32];
        snprintf(field, sizeof field, "trial.%s", keys[i]);
        if (s_get(trial, "trial", keys[i], JSON_STRING, 0, &v, err))
            return -1;
        if (!v)
            continue;
        const char *p = json_string_value(v);
        if (p[0] != '/' || strlen(p) != json_string_length(v) || strlen(p) > 2048)
            return spec__fail(
                err, field,
                "must be an absolute path (at most 2048 bytes), not \"%.200s\"", p);
        char *copy = strdup(p);
        if (!copy)
            return spec__fail(err, field, "out of memory");
        if (i == 0)
            s->cwd = copy;
        else
            s->venv = copy;
    }
    if (!check)
        return 0;
    struct stat st;
    if (s->cwd && stat(s->cwd, &st) != 0)
        return spec__fail(err, "trial.cwd", "%s: %s", s->cwd, strerror(errno));
    if (s->cwd && !S_ISDIR(st.st_mode))
        return spec__fail(err, "trial.cwd", "%s is not a folder", s->cwd);
    if (s->venv) {
        char py[2100];
        snprintf(py, sizeof py, "%s/bin/python", s->venv);
        if (!s_executable(py))
            return spec__fail(err, "trial.venv",
                              "%s is not a virtual environment: it has no executable "
                              "bin/python (make one with `python3 -m venv %s`)",
                              s->venv, s->venv);
    }
    return 0;
}

/* priority, preemptible, owner, alerts (docs/spec.md: Queue, Alerts). */
static int s_parse_queue(spec_t *s, json_t *j, spec_error *err)
{
    json_t *v;
    if (s_get(j, "", "priority", JSON_STRING, 0, &v, err))
        return -1;
    s->priority = v ? spec_priority_parse(json_string_value(v)) : SPEC_PRIO_NORMAL;
    if (s->priority < 0)
        return spec__fail(err, "priority", "must be \"high\", \"normal\" or \"low\"");
    if (s_get(j, "", "preemptible", JSON_STRING, 0, &v, err))
        return -1;
    const char *p = v ? json_string_value(v) : "checkpoint";
    s->preemptible = !strcmp(p, "checkpoint") ? SPEC_PREEMPT_CHECKPOINT
                     : !strcmp(p, "restart")  ? SPEC_PREEMPT_RESTART
                     : !strcmp(p, "never")    ? SPEC_PREEMPT_NEVER
                                              : -1;
    if (s->preemptible < 0)
        return spec__fail(err, "preemptible",
                          "must be \"checkpoint\", \"restart\" or \"never\"");
    if (s_get(j, "", "owner", JSON_STRING, 0, &v, err))
        return -1;
    if (v) {
        const char *o = json_string_value(v);
        size_t n = strlen(o);
        int ok = n > 0 && n < 64 && (isalnum((unsigned char)*o) || *o == '_');
        for (size_t i = 0; ok && i < n; i++)
            ok = isalnum((unsigned char)o[i]) || strchr("_.-@", o[i]);
        if (!ok)
            return spec__fail(
                err, "owner",
                "must be 1-63 letters, digits, '_', '.', '-' or '@', starting "
                "with a letter, digit or '_'");
        if (!(s->owner = strdup(o)))
            return spec__fail(err, "owner", "out of memory");
    }
    v = json_object_get(j, "alerts");
    if (v) {
        if (spec_alerts_check(v, "alerts", err))
            return -1;
        s->alerts = json_incref(v);
    }
    return 0;
}

/* One objective {metric, mode[, use]} at `path` into s->objectives[k]. */
static int s_parse_objective(spec_t *s, size_t k, json_t *obj, const char *path,
                             spec_error *err)
{
    char field[160];
    json_t *v;
    if (!json_is_object(obj))
        return spec__fail(err, path, "must be an object {\"metric\", \"mode\"}, not %s",
                          s_type_name(obj));
    static const char *const okeys[] = {"metric", "mode", "use", NULL};
    if (s_only_keys(obj, path, okeys, err) ||
        s_get(obj, path, "metric", JSON_STRING, 1, &v, err))
        return -1;
    snprintf(field, sizeof field, "%s.metric", path);
    if (!spec_valid_name(json_string_value(v)))
        return spec__fail(err, field, "must match [A-Za-z_][A-Za-z0-9_]*");
    for (size_t i = 0; i < k; i++)
        if (!strcmp(s->objectives[i].metric, json_string_value(v)))
            return spec__fail(err, field, "\"%s\" is already an objective",
                              json_string_value(v));
    if (!(s->objectives[k].metric = strdup(json_string_value(v))))
        return spec__fail(err, path, "out of memory");
    if (s_get(obj, path, "mode", JSON_STRING, 1, &v, err))
        return -1;
    snprintf(field, sizeof field, "%s.mode", path);
    if (strcmp(json_string_value(v), "max") && strcmp(json_string_value(v), "min"))
        return spec__fail(err, field, "must be \"max\" or \"min\"");
    s->objectives[k].maximize = !strcmp(json_string_value(v), "max");
    if (s_get(obj, path, "use", JSON_STRING, 0, &v, err))
        return -1;
    snprintf(field, sizeof field, "%s.use", path);
    if (v && strcmp(json_string_value(v), "last") && strcmp(json_string_value(v), "best"))
        return spec__fail(err, field, "must be \"last\" or \"best\"");
    if (v && k > 0 && !strcmp(json_string_value(v), "best"))
        return spec__fail(err, field,
                          "only the first objective may use \"best\" (the others take "
                          "the last value)");
    if (k == 0)
        s->use_best = v && !strcmp(json_string_value(v), "best");
    return 0;
}

/* objective: one object, or an array of 1 to SPEC_MAX_OBJECTIVES of them
   (multi-objective). s->metric / s->maximize are the first. */
static int s_parse_objectives(spec_t *s, json_t *j, spec_error *err)
{
    json_t *obj = json_object_get(j, "objective");
    if (!obj)
        return spec__fail(err, "objective", "missing (required)");
    if (json_is_array(obj)) {
        size_t n = json_array_size(obj);
        if (n < 1 || n > SPEC_MAX_OBJECTIVES)
            return spec__fail(err, "objective",
                              "a list of objectives holds 1 to %d of them",
                              SPEC_MAX_OBJECTIVES);
        s->objectives = calloc(n, sizeof *s->objectives);
        if (!s->objectives)
            return spec__fail(err, "objective", "out of memory");
        s->nobjectives = n;
        for (size_t k = 0; k < n; k++) {
            char path[64];
            snprintf(path, sizeof path, "objective[%zu]", k);
            if (s_parse_objective(s, k, json_array_get(obj, k), path, err))
                return -1;
        }
    } else if (json_is_object(obj)) {
        s->objectives = calloc(1, sizeof *s->objectives);
        if (!s->objectives)
            return spec__fail(err, "objective", "out of memory");
        s->nobjectives = 1;
        if (s_parse_objective(s, 0, obj, "objective", err))
            return -1;
    } else {
        return spec__fail(err, "objective",
                          "must be an object or an array of objects, not %s",
                          s_type_name(obj));
    }
    if (!(s->metric = strdup(s->objectives[0].metric)))
        return spec__fail(err, "objective", "out of memory");
    s->maximize = s->objectives[0].maximize;
    return 0;
}

/* constraints: [{"metric": M, "<=": X} or {"metric": M, ">=": X}, ...] */
static int s_parse_constraints(spec_t *s, json_t *j, spec_error *err)
{
    json_t *arr = json_object_get(j, "constraints");
    if (!arr)
        return 0;
    if (!json_is_array(arr))
        return spec__fail(err, "constraints", "must be an array, not %s",
                          s_type_name(arr));
    size_t n = json_array_size(arr);
    if (n > SPEC_MAX_CONSTRAINTS)
        return spec__fail(err, "constraints", "at most %d constraints",
                          SPEC_MAX_CONSTRAINTS);
    s->constraints = calloc(n ? n : 1, sizeof *s->constraints);
    if (!s->constraints)
        return spec__fail(err, "constraints", "out of memory");
    for (size_t k = 0; k < n; k++) {
        char path[64], field[96];
        snprintf(path, sizeof path, "constraints[%zu]", k);
        json_t *c = json_array_get(arr, k), *v;
        if (!json_is_object(c))
            return spec__fail(err, path,
                              "must be an object {\"metric\": M, \"<=\": X}, not %s",
                              s_type_name(c));
        static const char *const ckeys[] = {"metric", "<=", ">=", NULL};
        if (s_only_keys(c, path, ckeys, err) ||
            s_get(c, path, "metric", JSON_STRING, 1, &v, err))
            return -1;
        snprintf(field, sizeof field, "%s.metric", path);
        if (!spec_valid_name(json_string_value(v)))
            return spec__fail(err, field, "must match [A-Za-z_][A-Za-z0-9_]*");
        spec_constraint *sc = &s->constraints[s->nconstraints++];
        if (!(sc->metric = strdup(json_string_value(v))))
            return spec__fail(err, path, "out of memory");
        json_t *le = json_object_get(c, "<="), *ge = json_object_get(c, ">=");
        if (!!le == !!ge)
            return spec__fail(err, path, "needs exactly one bound, \"<=\" or \">=\"");
        snprintf(field, sizeof field, "%s.%s", path, le ? "<=" : ">=");
        v = le ? le : ge;
        if (!json_is_number(v) || !isfinite(json_number_value(v)))
            return spec__fail(err, field, "must be a finite number, not %s",
                              s_type_name(v));
        sc->upper = le != NULL;
        sc->bound = json_number_value(v);
    }
    return 0;
}

/* warm_start: {"from": ["study", ...]} (1 to 16 names, none repeated, not
   this study) */
static int s_parse_warm(spec_t *s, json_t *j, spec_error *err)
{
    json_t *w = json_object_get(j, "warm_start"), *from;
    if (!w)
        return 0;
    if (!json_is_object(w))
        return spec__fail(err, "warm_start",
                          "must be an object {\"from\": [studies]}, not %s",
                          s_type_name(w));
    static const char *const keys[] = {"from", NULL};
    if (s_only_keys(w, "warm_start", keys, err) ||
        s_get(w, "warm_start", "from", JSON_ARRAY, 1, &from, err))
        return -1;
    size_t n = json_array_size(from);
    if (n < 1 || n > 16)
        return spec__fail(err, "warm_start.from", "must name 1 to 16 studies");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(from, i);
        char field[64];
        snprintf(field, sizeof field, "warm_start.from[%zu]", i);
        if (!json_is_string(v) || !s_valid_study_name(json_string_value(v)))
            return spec__fail(err, field, "must be a study name");
        if (!strcmp(json_string_value(v), s->name))
            return spec__fail(err, field, "a study cannot warm-start from itself");
    }
    size_t rep = s_first_repeat(from); /* its trials would be fed twice */
    if (rep == (size_t)-2)
        return spec__fail(err, "warm_start.from", "out of memory");
    if (rep != (size_t)-1) {
        char field[64];
        snprintf(field, sizeof field, "warm_start.from[%zu]", rep);
        return spec__fail(err, field, "\"%s\" is named twice",
                          json_string_value(json_array_get(from, rep)));
    }
    s->warm_from = json_incref(from);
    return 0;
}

static int s_parse(spec_t *s, json_t *j, int check_command, spec_error *err)
{
    static const char *const top[] = {
        "name",           "objective",   "constraints", "warm_start", "scheduler",
        "early_stopping", "guard",       "budget",      "space",      "trial",
        "priority",       "preemptible", "owner",       "alerts",     NULL};
    if (!json_is_object(j))
        return spec__fail(err, "", "the spec must be a JSON object");
    if (s_only_keys(j, "", top, err))
        return -1;
    json_t *v;
    if (s_get(j, "", "name", JSON_STRING, 1, &v, err))
        return -1;
    if (!s_valid_study_name(json_string_value(v)))
        return spec__fail(err, "name",
                          "must be 1-100 characters of letters, digits, '_', '-' or '.', "
                          "starting with a letter, digit or '_'");
    if (!(s->name = strdup(json_string_value(v))))
        return spec__fail(err, "name", "out of memory");

    json_t *obj;
    if (s_parse_objectives(s, j, err) || s_parse_constraints(s, j, err) ||
        s_parse_warm(s, j, err))
        return -1;

    if (s_get(j, "", "scheduler", JSON_OBJECT, 0, &obj, err))
        return -1;
    s->sched_opts = obj ? json_incref(obj) : json_pack("{s:s}", "type", "random");
    if (s_get(s->sched_opts, "scheduler", "type", JSON_STRING, 1, &v, err))
        return -1;
    if (!(s->sched_type = strdup(json_string_value(v))))
        return spec__fail(err, "scheduler.type", "out of memory");
    if (s_get(s->sched_opts, "scheduler", "seed", JSON_INTEGER, 0, &v, err))
        return -1;
    s->seed = v ? (long)json_integer_value(v) : 0;

    if (s_get(j, "", "early_stopping", JSON_OBJECT, 0, &obj, err))
        return -1;
    if (obj) {
        if (s_get(obj, "early_stopping", "type", JSON_STRING, 1, &v, err))
            return -1;
        if (strcmp(json_string_value(v), "asha") &&
            strcmp(json_string_value(v), "hyperband") &&
            strcmp(json_string_value(v), "median"))
            return spec__fail(err, "early_stopping.type",
                              "must be \"asha\", \"hyperband\" or \"median\"");
        s->early_stop = json_incref(obj);
    }

    if (s_get(j, "", "guard", JSON_OBJECT, 0, &obj, err))
        return -1;
    s->guard = obj ? json_incref(obj) : NULL;

    if (s_get(j, "", "budget", JSON_OBJECT, 1, &obj, err))
        return -1;
    static const char *const bkeys[] = {"trials", "parallel", "time_s",
                                        "max_consecutive_failures", NULL};
    if (s_only_keys(obj, "budget", bkeys, err) ||
        s_get(obj, "budget", "trials", JSON_INTEGER, 1, &v, err))
        return -1;
    s->trials = (long)json_integer_value(v);
    if (s->trials < 1 || s->trials > 1000000)
        return spec__fail(err, "budget.trials", "must be from 1 to 1000000");
    if (s_get(obj, "budget", "parallel", JSON_INTEGER, 0, &v, err))
        return -1;
    s->parallel = v ? (long)json_integer_value(v) : 1;
    if (s->parallel < 1 || s->parallel > 10000)
        return spec__fail(err, "budget.parallel", "must be from 1 to 10000");
    if (s_get(obj, "budget", "time_s", JSON_REAL, 0, &v, err))
        return -1;
    s->time_s = v ? json_number_value(v) : 0;
    if (s->time_s < 0)
        return spec__fail(err, "budget.time_s", "must be >= 0");
    if (s_get(obj, "budget", "max_consecutive_failures", JSON_INTEGER, 0, &v, err))
        return -1;
    s->max_failures = v ? (long)json_integer_value(v) : 5;
    if (s->max_failures < 0)
        return spec__fail(err, "budget.max_consecutive_failures",
                          "must be >= 0 (0: never stop)");

    if (s_get(j, "", "space", JSON_OBJECT, 1, &obj, err))
        return -1;
    if (json_object_size(obj) > SPEC_MAX_PARAMS)
        return spec__fail(
            err, "space",
            "%zu parameters is more than the limit of %d parameters per spec "
            "(docs/spec.md, Limits)",
            json_object_size(obj), SPEC_MAX_PARAMS);
    s->params =
        calloc(json_object_size(obj) ? json_object_size(obj) : 1, sizeof *s->params);
    if (!s->params)
        return spec__fail(err, "space", "out of memory");
    s->nparams = json_object_size(obj);
    size_t i = 0;
    const char *key;
    json_object_foreach(obj, key, v)
    {
        if (s_parse_param(&s->params[i++], key, v, err))
            return -1;
    }
    i = 0;
    json_object_foreach(obj, key, v)
    {
        char path[128];
        snprintf(path, sizeof path, "space.%s", key);
        if (s_parse_when(s, i, v, path, err))
            return -1;
        s->params[i].conditional = s->params[i].when != NULL;
        i++;
    }
    if (s_check_cycles(s, err) || spec__check_sizes(s, err))
        return -1;

    if (s_get(j, "", "trial", JSON_OBJECT, 0, &obj, err))
        return -1;
    if (!obj) { /* ask-and-tell: the program asks for its trials itself */
        s->ask_only = 1;
        s->command = json_array();
        s->env = json_object();
        s->ranks = 1;
        s->launcher = SPEC_LAUNCH_MPIRUN;
        if (!s->command || !s->env)
            return spec__fail(err, "trial", "out of memory");
        if (s_parse_queue(s, j, err))
            return -1;
        s->json = json_incref(j);
        return 0;
    }
    static const char *const tkeys[] = {"command",   "gpus",    "ranks", "launcher",
                                        "timeout_s", "retries", "env",   "cwd",
                                        "venv",      NULL};
    if (s_only_keys(obj, "trial", tkeys, err) ||
        s_get(obj, "trial", "command", JSON_ARRAY, 1, &v, err))
        return -1;
    if (json_array_size(v) == 0)
        return spec__fail(err, "trial.command", "must not be empty");
    json_t *a;
    json_array_foreach(v, i, a)
    {
        if (!json_is_string(a)) {
            char field[64];
            snprintf(field, sizeof field, "trial.command[%zu]", i);
            return spec__fail(err, field, "must be a string, not %s", s_type_name(a));
        }
    }
    s->command = json_incref(v);
    if (spec__check_args(s, err))
        return -1;
    const char *cmd0 = json_string_value(json_array_get(v, 0));
    if (!*cmd0)
        return spec__fail(err, "trial.command[0]", "must not be empty");
    if (s_parse_paths(s, obj, check_command, err) != 0)
        return -1;
    if (check_command && !strchr(cmd0, '{') && s_check_command(s, cmd0, err) != 0)
        return -1;
    spec_error perr = {"", ""};
    /* twice: with every parameter, then without the conditional ones (a
       placeholder for one of those needs a {name:default}) */
    for (int pass = 0; pass < 2; pass++) {
        json_t *probe = json_object();
        if (!probe)
            return spec__fail(err, "trial.command", "out of memory");
        for (size_t k = 0; k < s->nparams; k++)
            if ((!pass || !s->params[k].conditional) &&
                json_object_set_new(probe, s->params[k].name,
                                    spec_param_from_unit(&s->params[k], 0.5)) != 0) {
                json_decref(probe);
                return spec__fail(err, "trial.command", "out of memory");
            }
        json_t *expanded = spec_expand_command(s, probe, &perr);
        json_decref(probe);
        if (!expanded) /* perr is empty only when an allocation failed */
            return spec__fail(err, perr.text[0] ? perr.field : "trial.command", "%s",
                              perr.text[0] ? perr.text : "out of memory");
        json_decref(expanded);
    }

    if (s_get(obj, "trial", "gpus", JSON_INTEGER, 0, &v, err))
        return -1;
    s->gpus = v ? (long)json_integer_value(v) : 0;
    if (s->gpus < 0 || s->gpus > 64)
        return spec__fail(err, "trial.gpus", "must be from 0 to 64");
    if (s_get(obj, "trial", "ranks", JSON_INTEGER, 0, &v, err))
        return -1;
    s->ranks = v ? (long)json_integer_value(v) : 1;
    if (s->ranks < 1 || s->ranks > SPEC_MAX_RANKS)
        return spec__fail(err, "trial.ranks", "must be from 1 to %d", SPEC_MAX_RANKS);
    if (s_get(obj, "trial", "launcher", JSON_STRING, 0, &v, err))
        return -1;
    s->launcher = SPEC_LAUNCH_MPIRUN;
    if (v && !strcmp(json_string_value(v), "torch"))
        s->launcher = SPEC_LAUNCH_TORCH;
    else if (v && strcmp(json_string_value(v), "mpirun"))
        return spec__fail(err, "trial.launcher",
                          "must be \"mpirun\" or \"torch\", not \"%.64s\"",
                          json_string_value(v));
    if (s->gpus * s->ranks > 64)
        return spec__fail(err, "trial.gpus",
                          "%ld GPUs per rank x %ld ranks is more than 64", s->gpus,
                          s->ranks);
    if (s_get(obj, "trial", "timeout_s", JSON_REAL, 0, &v, err))
        return -1;
    s->timeout_s = v ? json_number_value(v) : 0;
    if (s->timeout_s < 0)
        return spec__fail(err, "trial.timeout_s", "must be >= 0");
    if (s_get(obj, "trial", "retries", JSON_INTEGER, 0, &v, err))
        return -1;
    s->retries = v ? (long)json_integer_value(v) : 0;
    if (s->retries < 0 || s->retries > 100)
        return spec__fail(err, "trial.retries", "must be from 0 to 100");
    if (s_get(obj, "trial", "env", JSON_OBJECT, 0, &v, err))
        return -1;
    if (v) {
        json_object_foreach(v, key, a)
        {
            char field[128];
            snprintf(field, sizeof field, "trial.env.%s", key);
            if (!json_is_string(a))
                return spec__fail(err, field, "must be a string, not %s", s_type_name(a));
            if (!*key || strchr(key, '=') || !strncmp(key, "JIZHI_", 6))
                return spec__fail(
                    err, field,
                    "not a settable variable name (no '=', no JIZHI_ prefix)");
        }
    }
    s->env = v ? json_incref(v) : json_object();
    if (s_parse_queue(s, j, err))
        return -1;
    s->json = json_incref(j);
    return 0;
}

spec_t *spec_parse(json_t *json, int check_command, spec_error *err)
{
    spec_t *s = calloc(1, sizeof *s);
    if (!s) {
        spec__fail(err, "", "out of memory");
        return NULL;
    }
    if (s_parse(s, json, check_command, err)) {
        spec_destroy(&s);
        return NULL;
    }
    return s;
}

spec_t *spec_load(const char *path, int check_command, spec_error *err)
{
    json_error_t jerr;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        if (jerr.line <= 0 && access(path, R_OK) != 0)
            spec__fail(err, "", "cannot read %s: %s", path, strerror(errno));
        else
            spec__fail(err, "", "%s:%d:%d: invalid JSON: %s", path, jerr.line,
                       jerr.column, jerr.text);
        return NULL;
    }
    spec_t *s = spec_parse(j, check_command, err);
    json_decref(j);
    return s;
}

const char *spec_strerror(const spec_error *err, char *buf, size_t size)
{
    if (err->field[0])
        snprintf(buf, size, "%s: %s", err->field, err->text);
    else
        snprintf(buf, size, "%s", err->text);
    return buf;
}

void spec_destroy(spec_t **sp)
{
    if (!sp || !*sp)
        return;
    spec_t *s = *sp;
    for (size_t i = 0; i < s->nparams; i++) {
        free(s->params[i].name);
        json_decref(s->params[i].values);
        json_decref(s->params[i].when);
    }
    free(s->params);
    free(s->name);
    free(s->metric);
    for (size_t i = 0; i < s->nobjectives; i++)
        free(s->objectives[i].metric);
    free(s->objectives);
    for (size_t i = 0; i < s->nconstraints; i++)
        free(s->constraints[i].metric);
    free(s->constraints);
    json_decref(s->warm_from);
    free(s->sched_type);
    json_decref(s->sched_opts);
    json_decref(s->early_stop);
    json_decref(s->guard);
    json_decref(s->command);
    json_decref(s->env);
    free(s->cwd);
    free(s->venv);
    json_decref(s->json);
    free(s->owner);
    json_decref(s->alerts);
    free(s);
    *sp = NULL;
}
