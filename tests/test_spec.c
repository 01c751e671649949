/*  test_spec.c - the study spec (common/spec.c): the data-driven cases in
    tests/data/specs/{valid,invalid}/ (see the README there), the parsed
    fields, spec_load's file errors, the unit-cube mappings from_unit /
    to_unit / legal for every parameter type, command placeholder
    expansion with {{ }} escapes and spec_better.
*/
#include "jz_test.h"
#include "common/spec.h"
#include "common/text.h"
#include "schedulers/sched.h"
#include "trainer/trn.h"

#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------ */

static char s_data[PATH_MAX + 32]; /* tests/data, found once */

static int s_is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Finds tests/data from the cwd (the runner runs in the repo root) or by
   walking up from the executable's folder (build/tests/test_spec). */
static const char *s_data_dir(void)
{
    if (s_data[0])
        return s_data;
    if (s_is_dir("tests/data/specs")) {
        snprintf(s_data, sizeof s_data, "tests/data");
        return s_data;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        for (int up = 0; up < 5; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash)
                break;
            *slash = 0;
            char cand[PATH_MAX + 32];
            snprintf(cand, sizeof cand, "%s/tests/data/specs", exe);
            if (s_is_dir(cand)) {
                snprintf(s_data, sizeof s_data, "%s/tests/data", exe);
                return s_data;
            }
        }
    }
    return NULL;
}

static spec_t *s_parse_text(const char *text, int check_command, spec_error *err)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) {
        printf("bad test json: %s: %s\n", je.text, text);
        return NULL;
    }
    spec_t *s = spec_parse(j, check_command, err);
    json_decref(j);
    return s;
}

/* A spec with the given space and command (JSON texts). */
static spec_t *s_spec(const char *space, const char *command)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"name\":\"t\",\"objective\":{\"metric\":\"y\",\"mode\":\"min\"},"
             "\"budget\":{\"trials\":5},\"space\":%s,\"trial\":{\"command\":%s}}",
             space, command);
    spec_error err;
    spec_t *s = s_parse_text(buf, 0, &err);
    if (!s) {
        char eb[512];
        printf("spec refused: %s\n", spec_strerror(&err, eb, sizeof eb));
    }
    return s;
}

static const spec_param *s_param(const spec_t *s, const char *name)
{
    for (size_t i = 0; i < s->nparams; i++)
        if (!strcmp(s->params[i].name, name))
            return &s->params[i];
    return NULL;
}

static int s_has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Reads a whole small file, strips trailing newlines. Caller frees. */
static char *s_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = calloc(1, 4096);
    size_t n = fread(buf, 1, 4095, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = 0;
    return buf;
}

/* Sorted .json names in dir (caller frees each and the array). */
static size_t s_list_json(const char *dir, char ***out)
{
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, alphasort);
    size_t k = 0;
    *out = calloc(n > 0 ? (size_t)n : 1, sizeof **out);
    for (int i = 0; i < n; i++) {
        if (s_has_suffix(ents[i]->d_name, ".json"))
            (*out)[k++] = strdup(ents[i]->d_name);
        free(ents[i]);
    }
    if (n > 0)
        free(ents);
    return k;
}

/* ---- data-driven cases -------------------------------------------------- */

TEST(valid_cases)
{
    const char *data = s_data_dir();
    REQUIRE(data);
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/specs/valid", data);
    char **names;
    size_t n = s_list_json(dir, &names);
    CHECK(n >= 8);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX * 2];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        spec_error err = {{0}, {0}};
        spec_t *s = spec_load(path, 1, &err);
        if (!s) {
            char eb[512];
            JZT_FAIL("valid/%s refused: %s", names[i],
                     spec_strerror(&err, eb, sizeof eb));
        } else {
            CHECK(s->json != NULL);
            CHECK(s->nparams >= 1);
            json_t *probe = json_object();
            for (size_t k = 0; k < s->nparams; k++)
                json_object_set_new(probe, s->params[k].name,
                                    spec_param_from_unit(&s->params[k], 0.25));
            json_t *cmd = spec_expand_command(s, probe, &err);
            CHECK(cmd && json_array_size(cmd) == json_array_size(s->command));
            json_decref(cmd);
            json_decref(probe);
        }
        spec_destroy(&s);
        free(names[i]);
    }
    free(names);
}

/* Every study in examples/ is a valid spec its scheduler accepts, and every
   file of examples/ that its command names exists (the trainer's and
   other programs' names are looked up on PATH at run time, not here). */
TEST(examples_are_valid)
{
    const char *data = s_data_dir();
    REQUIRE(data);
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/../../examples", data);
    char **names;
    size_t n = s_list_json(dir, &names);
    CHECK(n >= 5);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX * 2];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        spec_error err = {{0}, {0}};
        spec_t *s = spec_load(path, 0, &err);
        char eb[512];
        if (!s) {
            JZT_FAIL("examples/%s refused: %s", names[i],
                     spec_strerror(&err, eb, sizeof eb));
        } else {
            if (sched_check(s, eb, sizeof eb) != 0)
                JZT_FAIL("examples/%s: %s", names[i], eb);
            /* jizhi-train's flags must be ones it knows, with legal values */
            if (!strcmp(json_string_value(json_array_get(s->command, 0)),
                        "jizhi-train")) {
                size_t argc = json_array_size(s->command);
                char **argv = calloc(argc + 1, sizeof *argv);
                REQUIRE(argv);
                for (size_t k = 0; k < argc; k++)
                    argv[k] = (char *)json_string_value(json_array_get(s->command, k));
                trn_config c;
                trn_config_defaults(&c);
                char terr[TRN_ERRLEN];
                FILE *devnull = fopen("/dev/null", "w");
                if (trn_config_parse_args(&c, (int)argc, argv, devnull, terr) != 0)
                    JZT_FAIL("examples/%s: jizhi-train refuses its flags: %s", names[i],
                             terr);
                if (devnull)
                    fclose(devnull);
                free(argv);
            }
            size_t k;
            json_t *arg;
            json_array_foreach(s->command, k, arg)
            {
                const char *a = json_string_value(arg);
                if (strncmp(a, "examples/", 9) != 0)
                    continue;
                char file[PATH_MAX * 2];
                snprintf(file, sizeof file, "%s/../../%s", data, a);
                if (access(file, R_OK) != 0)
                    JZT_FAIL("examples/%s: its command names %s, which is missing",
                             names[i], a);
            }
        }
        spec_destroy(&s);
        free(names[i]);
    }
    free(names);
}

TEST(invalid_cases)
{
    const char *data = s_data_dir();
    REQUIRE(data);
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/specs/invalid", data);
    char **names;
    size_t n = s_list_json(dir, &names);
    CHECK(n >= 14);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX * 2], exp_path[PATH_MAX * 2];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(exp_path, sizeof exp_path, "%.*s.expected", (int)(strlen(path) - 5),
                 path);
        char *expected = s_slurp(exp_path);
        if (!expected || !*expected) {
            JZT_FAIL("invalid/%s has no .expected file", names[i]);
            free(expected);
            free(names[i]);
            continue;
        }
        spec_error err = {{0}, {0}};
        spec_t *s = spec_load(path, 1, &err);
        char eb[512];
        if (s)
            JZT_FAIL("invalid/%s was accepted (expected \"%s\")", names[i], expected);
        else if (!strstr(spec_strerror(&err, eb, sizeof eb), expected))
            JZT_FAIL("invalid/%s: got \"%s\", expected \"%s\"", names[i], eb, expected);
        spec_destroy(&s);
        free(expected);
        free(names[i]);
    }
    free(names);
}

/* The must-have cases of the brief are present (a deleted file would
   otherwise go unnoticed by the loop above). */
TEST(invalid_cases_present)
{
    const char *data = s_data_dir();
    REQUIRE(data);
    static const char *const must[] = {
        "unknown_top_key",  "unknown_param_key", "trials_string",
        "low_gt_high",      "log_low_zero",      "empty_choice",
        "duplicate_choice", "missing_objective", "bad_mode",
        "bad_param_name",   "command_not_found", "placeholder_unknown",
        "negative_retries", "invalid_json",      NULL};
    for (const char *const *m = must; *m; m++) {
        char p[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/specs/invalid/%s.expected", data, *m);
        if (access(p, R_OK) != 0)
            JZT_FAIL("missing case %s", p);
    }
}

/* ---- parsed fields -------------------------------------------------------- */

TEST(design_example_fields)
{
    char path[PATH_MAX * 2];
    REQUIRE(s_data_dir());
    snprintf(path, sizeof path, "%s/specs/valid/design_example.json", s_data_dir());
    spec_error err;
    spec_t *s = spec_load(path, 0, &err);
    REQUIRE(s);
    CHECK_STR(s->name, "fmnist-bo");
    CHECK_STR(s->metric, "val_acc");
    CHECK(s->maximize == 1);
    CHECK(s->use_best == 0);
    CHECK_STR(s->sched_type, "bo");
    CHECK(s->seed == 1);
    CHECK(json_is_object(s->sched_opts));
    CHECK(s->early_stop &&
          !strcmp(json_string_value(json_object_get(s->early_stop, "type")), "asha"));
    CHECK(s->trials == 40);
    CHECK(s->parallel == 4);
    CHECK_NEAR(s->time_s, 3600, 0);
    REQUIRE(s->nparams == 4);
    /* the order of the spec file */
    CHECK_STR(s->params[0].name, "lr");
    CHECK_STR(s->params[1].name, "momentum");
    CHECK_STR(s->params[2].name, "batch_size");
    CHECK_STR(s->params[3].name, "optimizer");
    CHECK(s->params[0].type == SPEC_FLOAT && s->params[0].log == 1);
    CHECK_NEAR(s->params[0].low, 1e-4, 0);
    CHECK_NEAR(s->params[0].high, 1.0, 0);
    CHECK(s->params[1].type == SPEC_FLOAT && s->params[1].log == 0);
    CHECK(s->params[2].type == SPEC_INT && s->params[2].log == 1);
    CHECK_NEAR(s->params[2].low, 32, 0);
    CHECK_NEAR(s->params[2].high, 8192, 0);
    CHECK(s->params[3].type == SPEC_CHOICE && s->params[3].nvalues == 3);
    CHECK(json_array_size(s->command) == 7);
    CHECK(s->gpus == 0);
    CHECK_NEAR(s->timeout_s, 600, 0);
    CHECK(s->retries == 1);
    CHECK(json_is_object(s->env) && json_object_size(s->env) == 0);
    spec_destroy(&s);
    CHECK(s == NULL);
    spec_destroy(&s); /* NULL-safe */
    spec_destroy(NULL);
}

TEST(defaults)
{
    spec_t *s = s_spec("{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1}}", "[\"sh\"]");
    REQUIRE(s);
    CHECK_STR(s->sched_type, "random");
    CHECK(s->seed == 0);
    CHECK(s->early_stop == NULL);
    CHECK(s->parallel == 1);
    CHECK(s->time_s == 0);
    CHECK(s->maximize == 0);
    CHECK(s->use_best == 0);
    CHECK(s->gpus == 0 && s->retries == 0 && s->timeout_s == 0);
    CHECK(s->ranks == 1);
    CHECK(json_is_object(s->env));
    spec_destroy(&s);
    spec_error err;
    s = spec_load("tests/data/specs/valid/ranks_four.json", 1, &err);
    REQUIRE(s);
    CHECK(s->ranks == 4 && s->gpus == 2);
    CHECK(s->launcher == SPEC_LAUNCH_MPIRUN);
    spec_destroy(&s);
    s = spec_load("tests/data/specs/valid/ranks_torch.json", 1, &err);
    REQUIRE(s);
    CHECK(s->ranks == 2 && s->launcher == SPEC_LAUNCH_TORCH);
    CHECK_STR(spec_launcher_name(s->launcher), "torch");
    CHECK_STR(spec_launcher_name(SPEC_LAUNCH_MPIRUN), "mpirun");
    spec_destroy(&s);
}

TEST(load_errors)
{
    spec_error err;
    char eb[600];
    spec_t *s = spec_load("/nonexistent/dir/spec.json", 0, &err);
    CHECK(s == NULL);
    CHECK_STR(err.field, "");
    CHECK(strstr(spec_strerror(&err, eb, sizeof eb),
                 "cannot read /nonexistent/dir/spec.json") != NULL);

    char path[PATH_MAX * 2];
    REQUIRE(s_data_dir());
    snprintf(path, sizeof path, "%s/specs/invalid/invalid_json.json", s_data_dir());
    s = spec_load(path, 0, &err);
    CHECK(s == NULL);
    CHECK_STR(err.field, "");
    /* the message names the file and the position */
    CHECK(strstr(err.text, "invalid_json.json:1:") != NULL);
}

TEST(strerror_format)
{
    spec_error e;
    char buf[400];
    snprintf(e.field, sizeof e.field, "space.lr.low");
    snprintf(e.text, sizeof e.text, "must be > 0 when log is true");
    CHECK_STR(spec_strerror(&e, buf, sizeof buf),
              "space.lr.low: must be > 0 when log is true");
    e.field[0] = 0;
    CHECK_STR(spec_strerror(&e, buf, sizeof buf), "must be > 0 when log is true");
    char tiny[8];
    CHECK_STR(spec_strerror(&e, tiny, sizeof tiny), "must be");
}

TEST(not_an_object_and_null_err)
{
    json_t *j = json_integer(3);
    spec_error err;
    CHECK(spec_parse(j, 0, &err) == NULL);
    CHECK_STR(err.field, "");
    CHECK(spec_parse(j, 0, NULL) == NULL); /* err may be NULL */
    json_decref(j);
}

TEST(valid_names)
{
    CHECK(spec_valid_name("lr"));
    CHECK(spec_valid_name("_x1"));
    CHECK(spec_valid_name("A_b_9"));
    CHECK(!spec_valid_name(""));
    CHECK(!spec_valid_name(NULL));
    CHECK(!spec_valid_name("9a"));
    CHECK(!spec_valid_name("a-b"));
    CHECK(!spec_valid_name("a b"));
    CHECK(!spec_valid_name("a.b"));
    char n[80];
    memset(n, 'a', 63);
    n[63] = 0;
    CHECK(spec_valid_name(n));
    n[63] = 'a';
    n[64] = 0;
    CHECK(!spec_valid_name(n));
}

TEST(study_name_length)
{
    char name[128], buf[1024];
    spec_error err;
    memset(name, 'a', 100);
    name[100] = 0;
    const char *fmt =
        "{\"name\":\"%s\",\"objective\":{\"metric\":\"y\",\"mode\":\"min\"},"
        "\"budget\":{\"trials\":5},\"space\":{\"x\":{\"type\":\"int\",\"low\":0,\"high\":"
        "1}},\"trial\":{\"command\":[\"sh\"]}}";
    snprintf(buf, sizeof buf, fmt, name);
    spec_t *s = s_parse_text(buf, 0, &err);
    CHECK(s != NULL);
    spec_destroy(&s);
    name[100] = 'a';
    name[101] = 0;
    snprintf(buf, sizeof buf, fmt, name);
    s = s_parse_text(buf, 0, &err);
    CHECK(s == NULL);
    CHECK_STR(err.field, "name");
    spec_destroy(&s);
}

/* Names that would climb out of the log and checkpoint folders. */
TEST(study_names_are_not_dot_folders)
{
    const char *bad[] = {".", "..", "...", ".hidden", "-rf"};
    const char *fmt =
        "{\"name\":\"%s\",\"objective\":{\"metric\":\"y\",\"mode\":\"min\"},"
        "\"budget\":{\"trials\":5},\"space\":{\"x\":{\"type\":\"int\",\"low\":0,\"high\":"
        "1}},\"trial\":{\"command\":[\"sh\"]}}";
    char buf[1024];
    spec_error err;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(buf, sizeof buf, fmt, bad[i]);
        spec_t *s = s_parse_text(buf, 0, &err);
        CHECK(s == NULL);
        CHECK_STR(err.field, "name");
        spec_destroy(&s);
    }
    snprintf(buf, sizeof buf, fmt, "run.2-a_b");
    spec_t *s = s_parse_text(buf, 0, &err);
    CHECK(s != NULL);
    spec_destroy(&s);
}

/* A choice of 100 000 values: a repeat is found (sorted, not pairwise),
   where it is, and the same list without it is accepted. */
TEST(long_choice_repeat_found)
{
    enum { N = SPEC_MAX_CHOICE_VALUES };
    json_t *vals = json_array();
    for (int i = 0; i < N; i++)
        json_array_append_new(vals, i % 3 ? json_integer(i) : json_sprintf("v%d", i));
    json_t *spec = json_pack("{s:s, s:{s:s, s:s}, s:{s:i}, s:{s:{s:s, s:O}}, s:{s:[s]}}",
                             "name", "long", "objective", "metric", "y", "mode", "min",
                             "budget", "trials", 5, "space", "c", "type", "choice",
                             "values", vals, "trial", "command", "sh");
    spec_error err;
    spec_t *s = spec_parse(spec, 0, &err);
    CHECK(s != NULL);
    spec_destroy(&s);
    /* 1.0 next to the integer 1 is another value; a second "v3" is not */
    json_array_set_new(vals, 5000, json_real(1.0));
    json_array_set_new(vals, 7001, json_string("v3"));
    json_array_set_new(vals, 9001, json_string("v3"));
    json_object_set(json_object_get(json_object_get(spec, "space"), "c"), "values", vals);
    s = spec_parse(spec, 0, &err);
    CHECK(s == NULL);
    CHECK_STR(err.field, "space.c.values[7001]");
    spec_destroy(&s);
    json_decref(vals);
    json_decref(spec);
}

/* ---- limits (docs/spec.md, Limits) ---- */

/* A spec {name, objective, budget, trial.command} around `space` (taken). */
static json_t *s_spec_json(json_t *space, json_t *command)
{
    return json_pack("{s:s, s:{s:s, s:s}, s:{s:i}, s:o, s:{s:o}}", "name", "big",
                     "objective", "metric", "y", "mode", "min", "budget", "trials", 5,
                     "space", space, "trial", "command",
                     command ? command : json_pack("[s]", "true"));
}

/* Parses (and frees) j; NULL with err naming the refusal. */
static spec_t *s_parse_json(json_t *j, spec_error *err)
{
    spec_t *s = spec_parse(j, 0, err);
    json_decref(j);
    return s;
}

static json_t *s_floats(int n)
{
    json_t *space = json_object();
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "p%d", i);
        json_object_set_new(
            space, name,
            json_pack("{s:s, s:f, s:f}", "type", "float", "low", 0.0, "high", 1.0));
    }
    return space;
}

static json_t *s_choice(int n, int first)
{
    json_t *vals = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(vals, json_integer(first + i));
    return json_pack("{s:s, s:o}", "type", "choice", "values", vals);
}

TEST(limit_parameters_per_spec)
{
    spec_error err;
    spec_t *s = s_parse_json(s_spec_json(s_floats(SPEC_MAX_PARAMS), NULL), &err);
    CHECK(s != NULL);
    CHECK(s && s->nparams == SPEC_MAX_PARAMS);
    spec_destroy(&s);
    s = s_parse_json(s_spec_json(s_floats(SPEC_MAX_PARAMS + 1), NULL), &err);
    REQUIRE(s == NULL);
    CHECK_STR(err.field, "space");
    CHECK(strstr(err.text, "1001 parameters") != NULL);
    CHECK(strstr(err.text, "limit of 1000 parameters per spec") != NULL);
}

TEST(limit_choice_values_per_spec)
{
    spec_error err;
    /* one choice over the limit: refused before its values are compared */
    json_t *space = json_pack("{s:o}", "c", s_choice(SPEC_MAX_CHOICE_VALUES + 1, 0));
    spec_t *s = s_parse_json(s_spec_json(space, NULL), &err);
    REQUIRE(s == NULL);
    CHECK_STR(err.field, "space.c.values");
    CHECK(strstr(err.text, "10001 values") && strstr(err.text, "limit of 10000 values"));
    /* two under it, together over it */
    space = json_pack("{s:o, s:o}", "a", s_choice(6000, 0), "b", s_choice(4001, 0));
    s = s_parse_json(s_spec_json(space, NULL), &err);
    REQUIRE(s == NULL);
    CHECK_STR(err.field, "space");
    CHECK(strstr(err.text, "10001 choice values in all") != NULL);
    CHECK(strstr(err.text, "limit of 10000 values per spec") != NULL);
    /* at the limit: accepted */
    space = json_pack("{s:o, s:o}", "a", s_choice(6000, 0), "b", s_choice(4000, 0));
    s = s_parse_json(s_spec_json(space, NULL), &err);
    CHECK(s != NULL);
    spec_destroy(&s);
}

TEST(limit_params_json_fits_exec)
{
    spec_error err;
    /* 1000 floats with short names: ~33 bytes each, within 64 KiB */
    spec_t *s = s_parse_json(s_spec_json(s_floats(1000), NULL), &err);
    REQUIRE(s != NULL);
    size_t max = spec_params_json_max(s);
    CHECK(max > 1000 * 24 && max <= SPEC_MAX_PARAMS_JSON);
    /* the worst case is at least what a trial really gets */
    json_t *p = json_object();
    for (size_t k = 0; k < s->nparams; k++)
        json_object_set_new(p, s->params[k].name, json_real(-2.2250738585072014e-308));
    char *text = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK(strlen(text) <= max);
    free(text);
    json_decref(p);
    spec_destroy(&s);
    /* choices of long strings: a few values of 20 KB each are legal, but
       four parameters of them make a JIZHI_PARAMS of ~80 KB */
    char *big = malloc(20001);
    memset(big, 'a', 20000);
    big[20000] = 0;
    json_t *space = json_object();
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "c%d", i);
        json_object_set_new(
            space, name,
            json_pack("{s:s, s:[s, s]}", "type", "choice", "values", "short", big));
    }
    s = s_parse_json(s_spec_json(json_deep_copy(space), NULL), &err);
    REQUIRE(s == NULL);
    CHECK_STR(err.field, "space");
    CHECK(strstr(err.text, "JIZHI_PARAMS") && strstr(err.text, "can reach 80") &&
          strstr(err.text, "limit of 65536 bytes"));
    /* three of them fit */
    json_object_del(space, "c3");
    s = s_parse_json(s_spec_json(json_deep_copy(space), NULL), &err);
    CHECK(s != NULL);
    spec_destroy(&s);
    /* ... but not four placeholders of them in one argument */
    char arg[64];
    snprintf(arg, sizeof arg, "--x={c0}{c1}{c2}{c0}");
    s = s_parse_json(s_spec_json(space, json_pack("[s, s]", "prog", arg)), &err);
    REQUIRE(s == NULL);
    CHECK_STR(err.field, "trial.command[1]");
    CHECK(strstr(err.text, "can reach 800") &&
          strstr(err.text, "limit of 65536 bytes per argument"));
    free(big);
}

TEST(check_command_modes)
{
    spec_error err;
    const char *fmt = "{\"name\":\"t\",\"objective\":{\"metric\":\"y\",\"mode\":\"min\"},"
                      "\"budget\":{\"trials\":5},\"space\":{\"p\":{\"type\":\"choice\","
                      "\"values\":[\"sh\"]}},\"trial\":{\"command\":[\"%s\"]}}";
    char buf[1024];
    /* not checked without check_command */
    snprintf(buf, sizeof buf, fmt, "jizhi-no-such-program-42");
    spec_t *s = s_parse_text(buf, 0, &err);
    CHECK(s != NULL);
    spec_destroy(&s);
    /* an executable path */
    snprintf(buf, sizeof buf, fmt, "/bin/sh");
    s = s_parse_text(buf, 1, &err);
    CHECK(s != NULL);
    spec_destroy(&s);
    /* a path that is not there */
    snprintf(buf, sizeof buf, fmt, "./no/such/file");
    s = s_parse_text(buf, 1, &err);
    CHECK(s == NULL);
    CHECK_STR(err.field, "trial.command[0]");
    spec_destroy(&s);
    /* a placeholder as the program is not looked up */
    snprintf(buf, sizeof buf, fmt, "{p}");
    s = s_parse_text(buf, 1, &err);
    CHECK(s != NULL);
    spec_destroy(&s);
}

/* ---- unit-cube mappings ------------------------------------------------- */

TEST(float_linear_mapping)
{
    spec_t *s = s_spec("{\"x\":{\"type\":\"float\",\"low\":-2,\"high\":6}}", "[\"sh\"]");
    REQUIRE(s);
    const spec_param *p = &s->params[0];
    double us[] = {0, 0.125, 0.5, 0.9, 1};
    double xs[] = {-2, -1, 2, 5.2, 6};
    for (int i = 0; i < 5; i++) {
        json_t *v = spec_param_from_unit(p, us[i]);
        CHECK(json_is_real(v));
        CHECK_NEAR(json_real_value(v), xs[i], 1e-12);
        CHECK(spec_param_legal(p, v));
        CHECK_NEAR(spec_param_to_unit(p, v), us[i], 1e-12);
        json_decref(v);
    }
    /* out-of-cube u is clamped, NaN maps to the centre */
    json_t *v = spec_param_from_unit(p, -0.5);
    CHECK_NEAR(json_real_value(v), -2, 0);
    json_decref(v);
    v = spec_param_from_unit(p, 7);
    CHECK_NEAR(json_real_value(v), 6, 0);
    json_decref(v);
    v = spec_param_from_unit(p, NAN);
    CHECK_NEAR(json_real_value(v), 2, 1e-12);
    json_decref(v);
    /* an integer JSON value is a legal float */
    v = json_integer(3);
    CHECK(spec_param_legal(p, v));
    CHECK_NEAR(spec_param_to_unit(p, v), 5.0 / 8.0, 1e-12);
    json_decref(v);
    /* illegal values */
    json_t *bad[] = {json_real(6.0001), json_real(-2.5), json_string("1"),
                     json_null(),       json_real(NAN),  json_true()};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i]) { /* json_real(NAN) is NULL in jansson */
            CHECK(!spec_param_legal(p, bad[i]));
            CHECK(spec_param_to_unit(p, bad[i]) == -1);
        }
        json_decref(bad[i]);
    }
    CHECK(!spec_param_legal(p, NULL));
    spec_destroy(&s);
}

TEST(float_log_mapping)
{
    spec_t *s = s_spec(
        "{\"lr\":{\"type\":\"float\",\"low\":1e-4,\"high\":1,\"log\":true}}", "[\"sh\"]");
    REQUIRE(s);
    const spec_param *p = &s->params[0];
    json_t *v = spec_param_from_unit(p, 0);
    CHECK_NEAR(json_real_value(v), 1e-4, 1e-12);
    json_decref(v);
    v = spec_param_from_unit(p, 1);
    CHECK_NEAR(json_real_value(v), 1, 1e-12);
    CHECK(spec_param_legal(p, v)); /* never above high from rounding */
    json_decref(v);
    v = spec_param_from_unit(p, 0.5); /* geometric midpoint */
    CHECK_NEAR(json_real_value(v), 1e-2, 1e-12);
    json_decref(v);
    v = spec_param_from_unit(p, 0.25);
    CHECK_NEAR(json_real_value(v), 1e-3, 1e-12);
    CHECK_NEAR(spec_param_to_unit(p, v), 0.25, 1e-12);
    json_decref(v);
    /* round trip over the cube */
    for (int i = 0; i <= 100; i++) {
        double u = i / 100.0;
        v = spec_param_from_unit(p, u);
        CHECK(spec_param_legal(p, v));
        CHECK_NEAR(spec_param_to_unit(p, v), u, 1e-9);
        json_decref(v);
    }
    spec_destroy(&s);
}

TEST(int_mapping)
{
    spec_t *s = s_spec("{\"n\":{\"type\":\"int\",\"low\":3,\"high\":7}}", "[\"sh\"]");
    REQUIRE(s);
    const spec_param *p = &s->params[0];
    /* each of the 5 integers owns an equal fifth of the cube */
    int counts[5] = {0};
    for (int i = 0; i < 1000; i++) {
        json_t *v = spec_param_from_unit(p, (i + 0.5) / 1000.0);
        REQUIRE(json_is_integer(v));
        json_int_t k = json_integer_value(v);
        REQUIRE(k >= 3 && k <= 7);
        counts[k - 3]++;
        json_decref(v);
    }
    for (int k = 0; k < 5; k++)
        CHECK(counts[k] == 200);
    /* to_unit gives the centre of the cell, from_unit maps it back */
    for (int k = 3; k <= 7; k++) {
        json_t *v = json_integer(k);
        double u = spec_param_to_unit(p, v);
        CHECK_NEAR(u, (k - 3 + 0.5) / 5.0, 1e-12);
        json_t *back = spec_param_from_unit(p, u);
        CHECK(json_integer_value(back) == k);
        json_decref(back);
        json_decref(v);
    }
    json_t *ends[] = {spec_param_from_unit(p, 0), spec_param_from_unit(p, 1)};
    CHECK(json_integer_value(ends[0]) == 3);
    CHECK(json_integer_value(ends[1]) == 7);
    json_decref(ends[0]);
    json_decref(ends[1]);
    /* a real, even a whole one, is not a legal int */
    json_t *r = json_real(4.0);
    CHECK(!spec_param_legal(p, r));
    CHECK(spec_param_to_unit(p, r) == -1);
    json_decref(r);
    r = json_integer(8);
    CHECK(!spec_param_legal(p, r));
    json_decref(r);
    spec_destroy(&s);
}

TEST(int_log_and_single_value)
{
    spec_t *s =
        s_spec("{\"b\":{\"type\":\"int\",\"low\":1,\"high\":1024,\"log\":true},"
               "\"k\":{\"type\":\"int\",\"low\":5,\"high\":5},"
               "\"f\":{\"type\":\"float\",\"low\":2.5,\"high\":2.5,\"log\":true}}",
               "[\"sh\"]");
    REQUIRE(s);
    const spec_param *b = s_param(s, "b"), *k = s_param(s, "k"), *f = s_param(s, "f");
    REQUIRE(b && k && f);
    int seen_low = 0, seen_high = 0;
    json_int_t prev = 0;
    for (int i = 0; i <= 1000; i++) {
        json_t *v = spec_param_from_unit(b, i / 1000.0);
        REQUIRE(json_is_integer(v));
        json_int_t x = json_integer_value(v);
        CHECK(x >= 1 && x <= 1024);
        CHECK(x >= prev); /* monotone */
        prev = x;
        seen_low |= x == 1;
        seen_high |= x == 1024;
        json_t *back = spec_param_from_unit(b, spec_param_to_unit(b, v));
        CHECK(json_integer_value(back) == x);
        json_decref(back);
        json_decref(v);
    }
    CHECK(seen_low && seen_high);
    for (int i = 0; i <= 10; i++) {
        json_t *v = spec_param_from_unit(k, i / 10.0);
        CHECK(json_integer_value(v) == 5);
        CHECK_NEAR(spec_param_to_unit(k, v), 0.5, 1e-12);
        json_decref(v);
        v = spec_param_from_unit(f, i / 10.0);
        CHECK_NEAR(json_real_value(v), 2.5, 0);
        CHECK_NEAR(spec_param_to_unit(f, v), 0.5, 0);
        json_decref(v);
    }
    spec_destroy(&s);
}

TEST(choice_mapping)
{
    spec_t *s = s_spec(
        "{\"o\":{\"type\":\"choice\",\"values\":[\"sgd\",1,2.5,\"adam\"]}}", "[\"sh\"]");
    REQUIRE(s);
    const spec_param *p = &s->params[0];
    REQUIRE(p->nvalues == 4);
    for (size_t i = 0; i < 4; i++) {
        json_t *want = json_array_get(p->values, i);
        CHECK(spec_param_legal(p, want));
        double u = spec_param_to_unit(p, want);
        CHECK_NEAR(u, (i + 0.5) / 4.0, 1e-12);
        json_t *back = spec_param_from_unit(p, u);
        CHECK(json_equal(back, want));
        CHECK(back != want); /* a new reference to a copy */
        json_decref(back);
        /* the whole cell maps to the value */
        back = spec_param_from_unit(p, i / 4.0 + 0.01);
        CHECK(json_equal(back, want));
        json_decref(back);
    }
    json_t *v = spec_param_from_unit(p, 1.0);
    CHECK_STR(json_string_value(v), "adam");
    json_decref(v);
    v = spec_param_from_unit(p, 0.0);
    CHECK_STR(json_string_value(v), "sgd");
    json_decref(v);
    json_t *bad[] = {json_string("lamb"), json_string("SGD"), json_integer(2),
                     json_null()};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(!spec_param_legal(p, bad[i]));
        CHECK(spec_param_to_unit(p, bad[i]) == -1);
        json_decref(bad[i]);
    }
    spec_destroy(&s);
}

/* ---- command expansion ----------------------------------------------------- */

/* Expands `command` (a JSON array text) with `params` (a JSON object text)
   and compares with `want` (a JSON array text), or expects a failure
   naming `want_field` when want is NULL. */
static void s_expand_case(const char *command, const char *params, const char *want,
                          const char *want_field, int line)
{
    spec_t *s = s_spec("{\"lr\":{\"type\":\"float\",\"low\":1e-5,\"high\":1},"
                       "\"n\":{\"type\":\"int\",\"low\":1,\"high\":4096},"
                       "\"opt\":{\"type\":\"choice\",\"values\":[\"sgd\",\"adam\"]}}",
                       "[\"sh\"]");
    if (!s) {
        JZT_FAIL("line %d: spec", line);
        return;
    }
    json_decref(s->command);
    s->command = json_loads(command, 0, NULL);
    json_t *p = json_loads(params, 0, NULL);
    spec_error err = {{0}, {0}};
    json_t *out = spec_expand_command(s, p, &err);
    if (want) {
        json_t *w = json_loads(want, 0, NULL);
        if (!out || !json_equal(out, w)) {
            char *got = out ? json_dumps(out, JSON_COMPACT) : NULL;
            JZT_FAIL("line %d: expanded %s to %s, expected %s (%s: %s)", line, command,
                     got ? got : "NULL", want, err.field, err.text);
            free(got);
        }
        json_decref(w);
    } else {
        if (out)
            JZT_FAIL("line %d: %s expanded, expected an error", line, command);
        else if (strcmp(err.field, want_field))
            JZT_FAIL("line %d: error field \"%s\", expected \"%s\"", line, err.field,
                     want_field);
    }
    json_decref(out);
    json_decref(p);
    spec_destroy(&s);
}

TEST(expand_command)
{
    const char *P = "{\"lr\":0.1,\"n\":32,\"opt\":\"adam\"}";
    s_expand_case("[\"train\",\"--lr\",\"{lr}\"]", P, "[\"train\",\"--lr\",\"0.1\"]",
                  NULL, __LINE__);
    s_expand_case("[\"--lr={lr}\",\"--bs={n}\",\"{opt}\"]", P,
                  "[\"--lr=0.1\",\"--bs=32\",\"adam\"]", NULL, __LINE__);
    /* several in one argument, next to each other */
    s_expand_case("[\"{opt}{n}/{lr}\"]", P, "[\"adam32/0.1\"]", NULL, __LINE__);
    /* shortest text that reads back as the same double */
    s_expand_case("[\"{lr}\"]", "{\"lr\":1e-4}", "[\"0.0001\"]", NULL, __LINE__);
    s_expand_case("[\"{lr}\"]", "{\"lr\":0.30000000000000004}",
                  "[\"0.30000000000000004\"]", NULL, __LINE__);
    s_expand_case("[\"{lr}\"]", "{\"lr\":2.5e-300}", "[\"2.5e-300\"]", NULL, __LINE__);
    s_expand_case("[\"{n}\"]", "{\"n\":-7}", "[\"-7\"]", NULL, __LINE__);
    /* escapes */
    s_expand_case("[\"{{lr}}\"]", P, "[\"{lr}\"]", NULL, __LINE__);
    s_expand_case("[\"{{{lr}}}\"]", P, "[\"{0.1}\"]", NULL, __LINE__);
    s_expand_case("[\"{{\\\"a\\\": {n}}}\"]", P, "[\"{\\\"a\\\": 32}\"]", NULL, __LINE__);
    s_expand_case("[\"a}b\",\"}\"]", P, "[\"a}b\",\"}\"]", NULL, __LINE__);
    s_expand_case("[\"{{\",\"}}\",\"\"]", P, "[\"{\",\"}\",\"\"]", NULL, __LINE__);
    /* no placeholders: unchanged */
    s_expand_case("[\"sh\",\"-c\",\"echo hi\"]", P, "[\"sh\",\"-c\",\"echo hi\"]", NULL,
                  __LINE__);
    /* errors name the argument */
    s_expand_case("[\"sh\",\"{rate}\"]", P, NULL, "trial.command[1]", __LINE__);
    s_expand_case("[\"sh\",\"x\",\"{lr\"]", P, NULL, "trial.command[2]", __LINE__);
    s_expand_case("[\"{}\"]", P, NULL, "trial.command[0]", __LINE__);
    s_expand_case("[\"{lr}\"]", "{}", NULL, "trial.command[0]", __LINE__);
}

TEST(expand_long_values)
{
    /* a string value far longer than the argument and any fixed buffer */
    char big[3001];
    memset(big, 'z', 3000);
    big[3000] = 0;
    spec_t *s =
        s_spec("{\"o\":{\"type\":\"choice\",\"values\":[\"a\"]}}", "[\"x{o}y{o}\"]");
    REQUIRE(s);
    json_t *p = json_pack("{s:s}", "o", big);
    spec_error err;
    json_t *out = spec_expand_command(s, p, &err);
    REQUIRE(out);
    const char *a = json_string_value(json_array_get(out, 0));
    REQUIRE(a);
    CHECK(strlen(a) == 6002);
    CHECK(a[0] == 'x' && a[3001] == 'y' && a[6001] == 'z');
    json_decref(out);
    json_decref(p);
    spec_destroy(&s);
}

/* ---- comparisons ----------------------------------------------------------- */

TEST(better)
{
    spec_t *mn = s_spec("{\"x\":{\"type\":\"int\",\"low\":0,\"high\":1}}", "[\"sh\"]");
    REQUIRE(mn);
    spec_t mx = *mn;
    mx.maximize = 1;
    CHECK(spec_better(mn, 1, 2));
    CHECK(!spec_better(mn, 2, 1));
    CHECK(!spec_better(mn, 1, 1));
    CHECK(spec_better(&mx, 2, 1));
    CHECK(!spec_better(&mx, 1, 2));
    CHECK(!spec_better(&mx, 1, 1));
    /* NaN is never better, anything is better than NaN */
    CHECK(!spec_better(mn, NAN, 1));
    CHECK(!spec_better(&mx, NAN, 1));
    CHECK(spec_better(mn, 1, NAN));
    CHECK(spec_better(&mx, -1e300, NAN));
    CHECK(!spec_better(mn, NAN, NAN));
    /* a diverged run (inf, -inf) is the worst in either direction, above
       only NaN; every finite value beats it */
    CHECK(!spec_better(mn, -INFINITY, 0));
    CHECK(!spec_better(&mx, INFINITY, 0));
    CHECK(spec_better(mn, 1e300, -INFINITY));
    CHECK(spec_better(&mx, -1e300, INFINITY));
    CHECK(spec_better(mn, 0, INFINITY) && spec_better(&mx, 0, -INFINITY));
    CHECK(spec_better(mn, INFINITY, NAN) && spec_better(&mx, -INFINITY, NAN));
    CHECK(!spec_better(mn, NAN, INFINITY) && !spec_better(&mx, NAN, -INFINITY));
    CHECK(!spec_better(&mx, INFINITY, -INFINITY) &&
          !spec_better(&mx, -INFINITY, INFINITY));
    CHECK(spec_better_mode(1, 2, 1) && spec_better_mode(0, 1, 2));
    spec_destroy(&mn);
}

/* Sampled floats carry no arithmetic noise past 15 significant digits:
   the log boundary is 0.001 itself, not 0.0010000000000000002. */
TEST(sampled_values_without_noise)
{
    spec_t *s =
        s_spec("{\"lr\":{\"type\":\"float\",\"low\":0.001,\"high\":0.3,"
               "\"log\":true},\"m\":{\"type\":\"float\",\"low\":0.1,\"high\":0.7}}",
               "[\"sh\"]");
    REQUIRE(s);
    char buf[TEXT_DOUBLE_MAX];
    json_t *v = spec_param_from_unit(&s->params[0], 0);
    CHECK_STR(text_double(json_real_value(v), buf), "0.001");
    json_decref(v);
    for (size_t k = 0; k < 2; k++)
        for (int i = 0; i <= 1000; i++) {
            v = spec_param_from_unit(&s->params[k], i / 1000.0);
            CHECK(spec_param_legal(&s->params[k], v));
            CHECK(strlen(text_double(json_real_value(v), buf)) <= 21); /* 15 digits */
            json_decref(v);
        }
    v = spec_param_from_unit(&s->params[1], 1.0 / 3); /* 0.1 + 0.6 / 3 = 0.3 */
    CHECK_STR(text_double(json_real_value(v), buf), "0.3");
    json_decref(v);
    CHECK(spec_round_sig(0.1 + 0.2) == 0.3);
    CHECK(isnan(spec_round_sig(NAN)) && spec_round_sig(-INFINITY) == -INFINITY);
    spec_destroy(&s);
}

int main(void)
{
    RUN(valid_cases);
    RUN(examples_are_valid);
    RUN(invalid_cases);
    RUN(invalid_cases_present);
    RUN(design_example_fields);
    RUN(defaults);
    RUN(load_errors);
    RUN(strerror_format);
    RUN(not_an_object_and_null_err);
    RUN(valid_names);
    RUN(study_name_length);
    RUN(study_names_are_not_dot_folders);
    RUN(long_choice_repeat_found);
    RUN(check_command_modes);
    RUN(float_linear_mapping);
    RUN(float_log_mapping);
    RUN(sampled_values_without_noise);
    RUN(int_mapping);
    RUN(int_log_and_single_value);
    RUN(choice_mapping);
    RUN(expand_command);
    RUN(expand_long_values);
    RUN(better);
    RUN(limit_parameters_per_spec);
    RUN(limit_choice_values_per_spec);
    RUN(limit_params_json_fits_exec);
    TEST_DONE();
}
