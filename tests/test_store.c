/*  test_store.c - the SQLite store (store/store.c) on files in a temp
    folder: create and migrate, reopen, read-only refusals (not a database,
    not a jizhi database, a newer schema), studies, every trial field
    through insert/save/get/load (NaN values, parent, metric_session),
    params generations and lineage, metrics with NaN, events, the
    interventions' kinds and states (enums, text only in the columns), and
    transactions that survive (or not) a close and reopen.
*/
#include "jz_test.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "common/wire.h"

#include <sqlite3.h>
#include <unistd.h>

static char s_dir[64];

static void s_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", s_dir, name);
}

static void s_rm_db(const char *name)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal", NULL};
    for (const char *const *x = suffixes; *x; x++) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s%s", s_dir, name, *x);
        unlink(p);
    }
}

static store_t *s_open(const char *name, int readonly)
{
    char p[256], err[512];
    s_path(p, sizeof p, name);
    store_t *s = store_open(p, readonly, err, sizeof err);
    if (!s)
        printf("store_open %s: %s\n", p, err);
    return s;
}

/* Runs one SQL statement on a raw connection; returns the first column of
   the first row as an int (or -1). */
static int s_sql_int(const char *name, const char *sql)
{
    char p[256];
    s_path(p, sizeof p, name);
    sqlite3 *db;
    int v = -1;
    if (sqlite3_open(p, &db) == SQLITE_OK) {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
            if (sqlite3_step(st) == SQLITE_ROW)
                v = sqlite3_column_int(st, 0);
            sqlite3_finalize(st);
        }
    }
    sqlite3_close(db);
    return v;
}

static json_t *s_spec_json(const char *name)
{
    return json_pack("{s:s, s:{s:s, s:s}, s:{s:i}, s:{s:{s:s, s:f, s:f}}, s:{s:[s]}}",
                     "name", name, "objective", "metric", "y", "mode", "min", "budget",
                     "trials", 12, "space", "x", "type", "float", "low", 0.0, "high", 1.0,
                     "trial", "command", "sh");
}

/* Inserts study `name` (s_spec_json) in state st, created at `created`;
   its id, or -1. */
static long s_study(store_t *s, const char *name, store_study_state st, double created)
{
    json_t *spec = s_spec_json(name);
    long sid = store_study_insert(s, name, spec, st, created);
    json_decref(spec);
    return sid;
}

/* A trial row with every field set to something distinct. */
static void s_fill_trial(store_trial *t, long study, long number)
{
    memset(t, 0, sizeof *t);
    t->study_id = study;
    t->number = number;
    t->state = TRIAL_PENDING;
    snprintf(t->token, sizeof t->token, "tok-%ld-%ld", study, number);
    t->params = json_pack("{s:f, s:i, s:s}", "lr", 0.001 * (double)(number + 1), "n", 32,
                          "opt", "sgd");
    t->generation = 0;
    t->parent = -1;
    t->value = t->last_value = t->best_value = wire_none();
    t->last_step = -1;
    t->created = 1700000000.5 + (double)number;
}

/* ---- open / migrate ----------------------------------------------------- */

TEST(create_and_reopen)
{
    store_t *s = s_open("a.db", 0);
    REQUIRE(s);
    CHECK(s_sql_int("a.db", "PRAGMA user_version") == STORE_SCHEMA_VERSION);
    json_t *spec = s_spec_json("s1");
    CHECK(store_study_insert(s, "s1", spec, STUDY_RUNNING, 100) > 0);
    store_close(&s);
    CHECK(s == NULL);
    store_close(&s); /* NULL-safe */
    store_close(NULL);
    char wal[32] = "";
    /* WAL mode is persistent in the file */
    {
        char p[256];
        s_path(p, sizeof p, "a.db");
        sqlite3 *db;
        sqlite3_open(p, &db);
        sqlite3_stmt *st;
        sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL);
        if (sqlite3_step(st) == SQLITE_ROW)
            snprintf(wal, sizeof wal, "%s", sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        sqlite3_close(db);
    }
    CHECK_STR(wal, "wal");
    /* reopening keeps the data and does not migrate again */
    s = s_open("a.db", 0);
    REQUIRE(s);
    store_study st;
    CHECK(store_study_get(s, "s1", &st) == 1);
    CHECK(json_equal(st.spec, spec));
    store_study_fini(&st);
    store_close(&s);
    /* read-only works on a jizhi database, and refuses writes */
    s = s_open("a.db", 1);
    REQUIRE(s);
    CHECK(store_study_get(s, "s1", &st) == 1);
    store_study_fini(&st);
    CHECK(store_study_insert(s, "s2", spec, STUDY_RUNNING, 1) == -1);
    json_t *list = store_study_list(s);
    CHECK(json_array_size(list) == 1);
    json_decref(list);
    store_close(&s);
    json_decref(spec);
    s_rm_db("a.db");
}

TEST(refusals)
{
    char p[256], err[512];
    /* read-only does not create */
    s_path(p, sizeof p, "none.db");
    err[0] = 0;
    CHECK(store_open(p, 1, err, sizeof err) == NULL);
    CHECK(err[0] != 0);
    CHECK(access(p, F_OK) != 0);

    /* a text file: refused both ways */
    s_path(p, sizeof p, "text.db");
    FILE *f = fopen(p, "w");
    REQUIRE(f);
    for (int i = 0; i < 200; i++)
        fputs("this is not a database at all\n", f);
    fclose(f);
    err[0] = 0;
    CHECK(store_open(p, 1, err, sizeof err) == NULL);
    CHECK(err[0] != 0);
    err[0] = 0;
    CHECK(store_open(p, 0, err, sizeof err) == NULL);
    CHECK(err[0] != 0);
    unlink(p);

    /* an SQLite database that is not jizhi's: refused read-only */
    s_path(p, sizeof p, "other.db");
    sqlite3 *db;
    REQUIRE(sqlite3_open(p, &db) == SQLITE_OK);
    sqlite3_exec(db, "CREATE TABLE x(a); INSERT INTO x VALUES (1);", NULL, NULL, NULL);
    sqlite3_close(db);
    err[0] = 0;
    CHECK(store_open(p, 1, err, sizeof err) == NULL);
    CHECK(strstr(err, "not a jizhi database") != NULL);
    s_rm_db("other.db");

    /* a newer schema: refused both ways */
    store_t *s = s_open("new.db", 0);
    REQUIRE(s);
    store_close(&s);
    CHECK(s_sql_int("new.db", "PRAGMA user_version=99") == -1); /* no row, just sets it */
    CHECK(s_sql_int("new.db", "PRAGMA user_version") == 99);
    s_path(p, sizeof p, "new.db");
    err[0] = 0;
    CHECK(store_open(p, 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "newer") != NULL);
    CHECK(store_open(p, 1, err, sizeof err) == NULL);
    s_rm_db("new.db");
}

/* ---- studies ------------------------------------------------------------ */

TEST(studies)
{
    store_t *s = s_open("st.db", 0);
    REQUIRE(s);
    json_t *spec1 = s_spec_json("alpha"), *spec2 = s_spec_json("beta");
    long a = store_study_insert(s, "alpha", spec1, STUDY_RUNNING, 10.5);
    long b = store_study_insert(s, "beta", spec2, STUDY_STOPPED, 20.25);
    CHECK(a > 0 && b > 0 && a != b);
    CHECK(store_study_insert(s, "alpha", spec1, STUDY_RUNNING, 30) ==
          -1); /* name taken */

    store_study st;
    CHECK(store_study_get(s, "alpha", &st) == 1);
    CHECK(st.id == a);
    CHECK_STR(st.name, "alpha");
    CHECK(st.state == STUDY_RUNNING);
    CHECK(json_equal(st.spec, spec1));
    CHECK(st.sched_state == NULL);
    CHECK_NEAR(st.created, 10.5, 0);
    CHECK(isnan(st.finished));
    store_study_fini(&st);
    CHECK(st.spec == NULL);
    CHECK(store_study_get(s, "gamma", &st) == 0);
    CHECK(store_study_get_id(s, b, &st) == 1);
    CHECK_STR(st.name, "beta");
    CHECK(st.state == STUDY_STOPPED);
    store_study_fini(&st);
    CHECK(store_study_get_id(s, 9999, &st) == 0);

    /* state: finished records the time, running clears it */
    CHECK(store_study_set_state(s, a, STUDY_FINISHED, 99.5) == 0);
    CHECK(store_study_get_id(s, a, &st) == 1);
    CHECK(st.state == STUDY_FINISHED);
    CHECK_NEAR(st.finished, 99.5, 0);
    store_study_fini(&st);
    CHECK(store_study_set_state(s, a, STUDY_RUNNING, 120) == 0);
    CHECK(store_study_get_id(s, a, &st) == 1);
    CHECK(st.state == STUDY_RUNNING);
    CHECK(isnan(st.finished));
    store_study_fini(&st);

    /* scheduler state round trip, and cleared by NULL */
    json_t *sched = json_pack("{s:I, s:[f,f], s:s}", "count", (json_int_t)7, "x", 0.25,
                              1e-9, "tag", "ok");
    CHECK(store_study_set_sched(s, a, sched) == 0);
    CHECK(store_study_get_id(s, a, &st) == 1);
    CHECK(json_equal(st.sched_state, sched));
    store_study_fini(&st);
    CHECK(store_study_set_sched(s, a, NULL) == 0);
    CHECK(store_study_get_id(s, a, &st) == 1);
    CHECK(st.sched_state == NULL);
    store_study_fini(&st);
    json_decref(sched);

    /* the studies a controller loads: running ones (beta is stopped with
       no trial alive) */
    long *ids = NULL;
    CHECK(store_live_studies(s, &ids) == 1);
    CHECK(ids && ids[0] == a);
    free(ids);

    /* list with trial counts */
    const store_trial_state states[] = {TRIAL_COMPLETED, TRIAL_COMPLETED, TRIAL_FAILED,
                                        TRIAL_RUNNING,   TRIAL_STARTING,  TRIAL_PENDING};
    for (long i = 0; i < 6; i++) {
        store_trial t;
        s_fill_trial(&t, a, i);
        CHECK(store_trial_insert(s, &t) == 0);
        t.state = states[i];
        CHECK(store_trial_save(s, &t) == 0);
        store_trial_fini(&t);
    }
    json_t *list = store_study_list(s);
    REQUIRE(json_array_size(list) == 2);
    json_t *la = json_array_get(list, 0), *lb = json_array_get(list, 1);
    CHECK_STR(json_string_value(json_object_get(la, "name")), "alpha");
    CHECK(json_integer_value(json_object_get(la, "id")) == a);
    CHECK(json_integer_value(json_object_get(la, "trials")) == 6);
    CHECK(json_integer_value(json_object_get(la, "completed")) == 2);
    CHECK(json_integer_value(json_object_get(la, "failed")) == 1);
    CHECK(json_integer_value(json_object_get(la, "running")) == 2);
    CHECK(json_integer_value(json_object_get(la, "budget")) == 12);
    CHECK(json_is_null(json_object_get(la, "finished")));
    CHECK_STR(json_string_value(json_object_get(lb, "state")), "stopped");
    CHECK(json_integer_value(json_object_get(lb, "trials")) == 0);
    CHECK(json_integer_value(json_object_get(lb, "completed")) == 0);
    CHECK_NEAR(json_real_value(json_object_get(lb, "created")), 20.25, 0);
    json_decref(list);

    /* a stopped study whose trial still runs is loaded too (its process
       is stopped, then killed after the grace, and counts for quotas) */
    store_trial live;
    s_fill_trial(&live, b, 100);
    CHECK(store_trial_insert(s, &live) == 0);
    CHECK(store_live_studies(s, &ids) == 1); /* pending: no process */
    free(ids);
    live.state = TRIAL_RUNNING;
    CHECK(store_trial_save(s, &live) == 0);
    CHECK(store_live_studies(s, &ids) == 2);
    CHECK(ids && ids[0] == a && ids[1] == b);
    free(ids);
    store_trial_fini(&live);

    json_decref(spec1);
    json_decref(spec2);
    store_close(&s);
    s_rm_db("st.db");
}

/* ---- trials ---------------------------------------------------------------- */

static void s_check_same_trial(const store_trial *a, const store_trial *b, int line)
{
#define SAME_L(f)                                                                        \
    if (a->f != b->f)                                                                    \
    JZT_FAIL("line %d: " #f " %ld != %ld", line, (long)a->f, (long)b->f)
#define SAME_D(f)                                                                        \
    if (!((isnan(a->f) && isnan(b->f)) || a->f == b->f))                                 \
    JZT_FAIL("line %d: " #f " %.17g != %.17g", line, a->f, b->f)
/* an objective value: none (wire_none) and a reported NaN differ */
#define SAME_V(f)                                                                        \
    if (wire_is_none(a->f) != wire_is_none(b->f) ||                                      \
        !((isnan(a->f) && isnan(b->f)) || a->f == b->f))                                 \
    JZT_FAIL("line %d: " #f " %.17g != %.17g (none %d %d)", line, a->f, b->f,            \
             wire_is_none(a->f), wire_is_none(b->f))
#define SAME_S(f)                                                                        \
    if (strcmp(a->f, b->f))                                                              \
    JZT_FAIL("line %d: " #f " \"%s\" != \"%s\"", line, a->f, b->f)
    SAME_L(id);
    SAME_L(study_id);
    SAME_L(number);
    SAME_L(state);
    SAME_L(attempt);
    SAME_S(token);
    SAME_L(generation);
    SAME_L(parent);
    SAME_V(value);
    SAME_V(last_value);
    SAME_V(best_value);
    SAME_L(last_step);
    SAME_L(metric_req);
    SAME_S(metric_session);
    SAME_S(dispatcher);
    SAME_L(pid);
    SAME_S(exit_how);
    SAME_L(exit_code);
    SAME_S(reason);
    SAME_S(out_path);
    SAME_S(err_path);
    SAME_S(checkpoint);
    SAME_L(checkpoint_step);
    SAME_D(created);
    SAME_D(started);
    SAME_D(ended);
    if (!json_equal(a->params, b->params))
        JZT_FAIL("line %d: params differ", line);
#undef SAME_L
#undef SAME_D
#undef SAME_V
#undef SAME_S
}

TEST(trial_round_trip)
{
    store_t *s = s_open("tr.db", 0);
    REQUIRE(s);
    long sid = s_study(s, "t", STUDY_RUNNING, 1);
    REQUIRE(sid > 0);

    /* as inserted: nothing known yet */
    store_trial t, got;
    s_fill_trial(&t, sid, 0);
    REQUIRE(store_trial_insert(s, &t) == 0);
    CHECK(t.id > 0);
    REQUIRE(store_trial_get(s, t.id, &got) == 1);
    s_check_same_trial(&t, &got, __LINE__);
    store_trial_fini(&got);

    /* every mutable field set, NaN kept in one value */
    t.state = TRIAL_COMPLETED;
    t.attempt = 2;
    t.value = -0.125;
    t.last_value = NAN;
    t.best_value = 1e-300;
    t.last_step = 41;
    t.metric_req = 17;
    snprintf(t.metric_session, sizeof t.metric_session, "sess-0123456789abcdef");
    snprintf(t.dispatcher, sizeof t.dispatcher, "node-3");
    t.pid = 43210;
    snprintf(t.exit_how, sizeof t.exit_how, "signaled");
    t.exit_code = 9;
    snprintf(t.reason, sizeof t.reason, "killed by signal 9 'SIGKILL' \"quoted\"");
    snprintf(t.out_path, sizeof t.out_path, "/var/log/jizhi/t/0.out");
    snprintf(t.err_path, sizeof t.err_path, "/var/log/jizhi/t/0.err");
    snprintf(t.checkpoint, sizeof t.checkpoint, "/ckpt/t-0/step40");
    t.checkpoint_step = 40;
    t.started = 1700000100.25;
    t.ended = 1700000200.75;
    REQUIRE(store_trial_save(s, &t) == 0);
    REQUIRE(store_trial_get(s, t.id, &got) == 1);
    s_check_same_trial(&t, &got, __LINE__);
    store_trial_fini(&got);

    /* a diverged run: inf, -inf and a reported NaN are values, kept as
       such (SQLite turns a bound NaN into NULL, which is none) */
    t.value = INFINITY;
    t.last_value = NAN;
    t.best_value = -INFINITY;
    REQUIRE(store_trial_save(s, &t) == 0);
    REQUIRE(store_trial_get(s, t.id, &got) == 1);
    s_check_same_trial(&t, &got, __LINE__);
    CHECK(isnan(got.last_value) && !wire_is_none(got.last_value));
    CHECK(isinf(got.value) && got.value > 0 && isinf(got.best_value) &&
          got.best_value < 0);
    json_t *tj = store_trial_json(&got, NULL);
    REQUIRE(tj);
    CHECK_STR(json_string_value(json_object_get(tj, "value")), "inf");
    CHECK_STR(json_string_value(json_object_get(tj, "last_value")), "nan");
    CHECK_STR(json_string_value(json_object_get(tj, "best_value")), "-inf");
    char *text = json_dumps(tj, 0);
    CHECK(text != NULL);
    free(text);
    json_decref(tj);
    store_trial_fini(&got);

    /* and back to empty strings and none (a retry) */
    t.state = TRIAL_PENDING;
    t.value = t.best_value = wire_none();
    t.last_value = 3.5;
    t.last_step = -1;
    t.metric_req = 0;
    t.metric_session[0] = t.dispatcher[0] = t.exit_how[0] = t.reason[0] = 0;
    t.checkpoint[0] = 0;
    t.pid = 0;
    REQUIRE(store_trial_save(s, &t) == 0);
    REQUIRE(store_trial_get(s, t.id, &got) == 1);
    s_check_same_trial(&t, &got, __LINE__);
    store_trial_fini(&got);

    /* survives a reopen */
    store_close(&s);
    s = s_open("tr.db", 0);
    REQUIRE(s);
    REQUIRE(store_trial_get(s, t.id, &got) == 1);
    s_check_same_trial(&t, &got, __LINE__);
    store_trial_fini(&got);
    CHECK(store_trial_get(s, t.id + 100, &got) == 0);

    /* a duplicate (study, number) is refused */
    store_trial dup;
    s_fill_trial(&dup, sid, 0);
    CHECK(store_trial_insert(s, &dup) == -1);
    store_trial_fini(&dup);

    store_trial_fini(&t);
    CHECK(t.params == NULL);
    store_trial_fini(NULL);
    store_close(&s);
    s_rm_db("tr.db");
}

/* Rows hold the states as enums; the column keeps its text (no schema
   change), and a text that names no state is refused with a message. */
static int s_count_brief(void *arg, const store_trial_brief *t, const char *params)
{
    (void)t, (void)params;
    ++*(long *)arg;
    return 0;
}

TEST(states_round_trip_as_enums)
{
    s_rm_db("st.db");
    store_t *s = s_open("st.db", 0);
    REQUIRE(s);
    long sid = s_study(s, "st", STUDY_STOPPED, 1);
    REQUIRE(sid > 0);
    long ids[TRIAL_STATE_COUNT];
    for (int i = 0; i < TRIAL_STATE_COUNT; i++) {
        store_trial t;
        s_fill_trial(&t, sid, i);
        REQUIRE(store_trial_insert(s, &t) == 0);
        t.state = (store_trial_state)i;
        CHECK(store_trial_save(s, &t) == 0);
        ids[i] = t.id;
        store_trial_fini(&t);
    }
    store_close(&s);
    char sql[128];
    for (int i = 0; i < TRIAL_STATE_COUNT; i++) { /* the column holds the text */
        snprintf(sql, sizeof sql, "SELECT state='%s' FROM trials WHERE id=%ld",
                 store_trial_state_name((store_trial_state)i), ids[i]);
        CHECK(s_sql_int("st.db", sql) == 1);
    }
    CHECK(s_sql_int("st.db", "SELECT state='stopped' FROM studies WHERE name='st'") == 1);
    s = s_open("st.db", 1);
    REQUIRE(s);
    store_study st;
    REQUIRE(store_study_get(s, "st", &st) == 1);
    CHECK(st.state == STUDY_STOPPED);
    store_study_fini(&st);
    store_trial *rows;
    long n = store_trials_load(s, sid, &rows);
    REQUIRE(n == TRIAL_STATE_COUNT);
    for (long i = 0; i < n; i++)
        CHECK(rows[i].state == (store_trial_state)i);
    store_trials_free(rows, n);
    json_t *brief = store_trials_brief(s, sid); /* the enum's name, each */
    REQUIRE(brief && json_array_size(brief) == TRIAL_STATE_COUNT);
    for (int i = 0; i < TRIAL_STATE_COUNT; i++)
        CHECK_STR(
            json_string_value(json_object_get(json_array_get(brief, (size_t)i), "state")),
            store_trial_state_name((store_trial_state)i));
    json_decref(brief);
    store_close(&s);

    /* an unknown text: refused by every reader of rows, with a message */
    snprintf(sql, sizeof sql, "UPDATE trials SET state='bogus' WHERE id=%ld",
             ids[TRIAL_RUNNING]);
    s_sql_int("st.db", sql);
    s = s_open("st.db", 1);
    REQUIRE(s);
    store_trial t;
    CHECK(store_trial_get(s, ids[TRIAL_PENDING], &t) == 1); /* the others read */
    store_trial_fini(&t);
    CHECK(store_trial_get(s, ids[TRIAL_RUNNING], &t) == -1);
    char want[64];
    snprintf(want, sizeof want, "trial %ld: unknown state 'bogus'", ids[TRIAL_RUNNING]);
    CHECK(strstr(store_errmsg(s), want) != NULL);
    CHECK(store_trials_load(s, sid, &rows) == -1 && rows == NULL);
    CHECK(strstr(store_errmsg(s), want) != NULL);
    long seen = 0;
    CHECK(store_trials_each(s, sid, s_count_brief, &seen) == -1);
    CHECK(strstr(store_errmsg(s), want) != NULL);
    CHECK(store_trials_brief(s, sid) == NULL); /* not the text passed on */
    CHECK(strstr(store_errmsg(s), want) != NULL);
    CHECK(store_study_get(s, "st", &st) == 1); /* a fresh call forgets it */
    CHECK(!strstr(store_errmsg(s), "unknown state"));
    store_study_fini(&st);
    store_close(&s);
    s_sql_int("st.db", "UPDATE studies SET state='paused' WHERE name='st'");
    s = s_open("st.db", 1);
    REQUIRE(s);
    CHECK(store_study_get(s, "st", &st) == -1);
    CHECK(strstr(store_errmsg(s), "study 'st': unknown state 'paused'") != NULL);
    CHECK(store_study_get_id(s, sid, &st) == -1);
    CHECK(store_study_list(s) == NULL); /* not the text passed on */
    CHECK(strstr(store_errmsg(s), "study 'st': unknown state 'paused'") != NULL);
    store_close(&s);
}

/* store_interv_open's rows as "id kind state" words, and the bad ones'
   messages, in a buffer. */
typedef struct {
    char seen[512];
    char bad[256];
} s_ivlog;

static void s_iv_seen(void *arg, const store_interv *iv, const char *bad)
{
    s_ivlog *l = arg;
    size_t n = strlen(l->seen);
    if (bad)
        snprintf(l->bad + strlen(l->bad), sizeof l->bad - strlen(l->bad), "%s;", bad);
    else
        snprintf(l->seen + n, sizeof l->seen - n, "%ld %s %s %ld;", iv->id,
                 store_iv_kind_name(iv->kind), store_iv_state_name(iv->kind, iv->state),
                 (long)json_integer_value(json_object_get(iv->data, "k")));
}

/* An intervention's kind and state are enums in rows and text only in the
   column and the JSON: each round-trips, done follows a final state, and
   a text that names none is refused with the intervention's id (before,
   the lists copied it through). */
TEST(intervention_states_as_enums)
{
    for (int k = 0; k < IV_KIND_COUNT; k++) {
        store_iv_kind kind;
        CHECK(store_iv_kind_parse(store_iv_kind_name(k), &kind) == 0 && (int)kind == k);
        int n = k == IV_GUARD ? GUARD_COUNT : FORK_COUNT;
        for (int i = 0; i < n; i++) {
            int st = -1;
            CHECK(store_iv_state_parse(k, store_iv_state_name(k, i), &st) == 0 &&
                  st == i);
        }
        CHECK_STR(store_iv_state_name(k, n), "invalid");
    }
    int st = 5;
    CHECK(store_iv_state_parse(IV_GUARD, "running", &st) == -1 && st == 5); /* a fork's */
    CHECK(store_iv_state_parse(IV_FORK, "kept", &st) == -1 && st == 5); /* a guard's */
    CHECK(store_iv_state_parse(IV_FORK, NULL, &st) == -1);
    store_iv_kind kind = IV_FORK;
    CHECK(store_iv_kind_parse("spoon", &kind) == -1 && kind == IV_FORK);
    CHECK(store_iv_state_final(IV_GUARD, GUARD_REVERT) == 0);
    CHECK(store_iv_state_final(IV_GUARD, GUARD_KEPT) == 1);
    CHECK(store_iv_state_final(IV_FORK, FORK_RUNNING) == 0);
    CHECK(store_iv_state_final(IV_FORK, FORK_REFUSED) == 1);
    json_t *ans = json_pack("{s:s, s:s}", "guard", "kept", "fork", "kept");
    CHECK(store_iv_answer_state(ans, IV_GUARD) == GUARD_KEPT);
    CHECK(store_iv_answer_state(ans, IV_FORK) == -1); /* not a fork's state */
    json_object_set_new(ans, "fork", json_string("decided"));
    CHECK(store_iv_answer_state(ans, IV_FORK) == FORK_DECIDED);
    json_object_del(ans, "guard");
    CHECK(store_iv_answer_state(ans, IV_GUARD) == -1);
    json_decref(ans);

    s_rm_db("iv.db");
    store_t *s = s_open("iv.db", 0);
    REQUIRE(s);
    long sid = s_study(s, "iv", STUDY_RUNNING, 1);
    store_trial t;
    s_fill_trial(&t, sid, 0);
    REQUIRE(store_trial_insert(s, &t) == 0);
    long tid = t.id;
    store_trial_fini(&t);
    json_t *d = json_pack("{s:i}", "k", 1);
    long g = store_interv_insert(s, sid, tid, IV_GUARD, GUARD_WATCH, d, 10);
    json_object_set_new(d, "k", json_integer(2));
    long f = store_interv_insert(s, sid, tid, IV_FORK, FORK_CHECKPOINT, d, 11);
    json_object_set_new(d, "k", json_integer(3));
    long g2 = store_interv_insert(s, sid, tid, IV_GUARD, GUARD_REFUSED, d, 12);
    REQUIRE(g > 0 && f > g && g2 > f);
    json_object_set_new(d, "k", json_integer(4));
    CHECK(store_interv_save(s, f, IV_FORK, FORK_RUNNING, d, 13) == 0);
    /* a kind or state that names none: refused with a message, nothing
       written (no row, f still "running") */
    CHECK(store_interv_insert(s, sid, tid, IV_GUARD, GUARD_COUNT, d, 14) == -1);
    CHECK(strstr(store_errmsg(s), "names no guard state") != NULL);
    CHECK(store_interv_insert(s, sid, tid, (store_iv_kind)7, 0, d, 14) == -1);
    CHECK(strstr(store_errmsg(s), "names no kind") != NULL);
    CHECK(store_interv_save(s, f, IV_FORK, FORK_COUNT, d, 14) == -1);
    CHECK(store_interv_save(s, f, IV_FORK, -1, d, 14) == -1);
    CHECK(strstr(store_errmsg(s), "names no fork state") != NULL);
    json_decref(d);
    store_close(&s);
    char sql[160];
    const struct {
        long id;
        const char *kind, *state;
        int done;
    } cols[] = {
        {g, "guard", "watch", 0}, {f, "fork", "running", 0}, {g2, "guard", "refused", 1}};
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) { /* the columns' text */
        snprintf(sql, sizeof sql,
                 "SELECT kind='%s' AND state='%s' AND done=%d FROM interventions "
                 "WHERE id=%ld",
                 cols[i].kind, cols[i].state, cols[i].done, cols[i].id);
        CHECK(s_sql_int("iv.db", sql) == 1);
    }

    s = s_open("iv.db", 1);
    REQUIRE(s);
    s_ivlog l = {{0}, {0}};
    CHECK(store_interv_open(s, s_iv_seen, &l) == 2); /* the unfinished ones */
    char want[256];
    snprintf(want, sizeof want, "%ld guard watch 1;%ld fork running 4;", g, f);
    CHECK_STR(l.seen, want);
    CHECK_STR(l.bad, "");
    json_t *list = store_interv_list(s, tid);
    REQUIRE(list && json_array_size(list) == 3);
    CHECK_STR(json_string_value(json_object_get(json_array_get(list, 1), "kind")),
              "fork");
    CHECK_STR(json_string_value(json_object_get(json_array_get(list, 1), "state")),
              "running");
    CHECK(json_is_true(json_object_get(json_array_get(list, 2), "done")));
    json_decref(list);
    store_close(&s);

    /* a text that names none: refused by the lists, passed as bad to
       store_interv_open, with the intervention's id */
    snprintf(sql, sizeof sql, "UPDATE interventions SET state='bogus' WHERE id=%ld", g);
    s_sql_int("iv.db", sql);
    snprintf(sql, sizeof sql, "UPDATE interventions SET kind='spoon' WHERE id=%ld", g2);
    s_sql_int("iv.db", sql);
    s = s_open("iv.db", 1);
    REQUIRE(s);
    CHECK(store_interv_list(s, tid) == NULL);
    snprintf(want, sizeof want, "intervention %ld: unknown guard state 'bogus'", g);
    CHECK(strstr(store_errmsg(s), want) != NULL);
    CHECK(store_interv_study(s, sid) == NULL);
    CHECK(strstr(store_errmsg(s), want) != NULL);
    memset(&l, 0, sizeof l);
    CHECK(store_interv_open(s, s_iv_seen, &l) == 2);
    snprintf(want, sizeof want, "%ld fork running 4;", f);
    CHECK_STR(l.seen, want);
    CHECK(strstr(l.bad, "unknown guard state 'bogus'") != NULL);
    store_close(&s);
    snprintf(sql, sizeof sql, "UPDATE interventions SET state='watch' WHERE id=%ld", g);
    s_sql_int("iv.db", sql);
    s = s_open("iv.db", 1);
    REQUIRE(s);
    CHECK(store_interv_list(s, tid) == NULL);
    snprintf(want, sizeof want, "intervention %ld: unknown kind 'spoon'", g2);
    CHECK(strstr(store_errmsg(s), want) != NULL);
    store_close(&s);
}

TEST(trials_load_in_order)
{
    store_t *s = s_open("tl.db", 0);
    REQUIRE(s);
    json_t *spec = s_spec_json("x");
    long s1 = store_study_insert(s, "x", spec, STUDY_RUNNING, 1);
    long s2 = store_study_insert(s, "y", spec, STUDY_RUNNING, 1);
    json_decref(spec);
    long numbers[] = {3, 0, 2, 1};
    store_trial mine[4];
    for (int i = 0; i < 4; i++) {
        s_fill_trial(&mine[i], s1, numbers[i]);
        CHECK(store_trial_insert(s, &mine[i]) == 0);
    }
    store_trial other;
    s_fill_trial(&other, s2, 0);
    CHECK(store_trial_insert(s, &other) == 0);
    store_trial_fini(&other);

    store_trial *all = NULL;
    long n = store_trials_load(s, s1, &all);
    REQUIRE(n == 4);
    for (long k = 0; k < 4; k++) {
        CHECK(all[k].number == k);
        for (int i = 0; i < 4; i++)
            if (mine[i].number == k)
                s_check_same_trial(&mine[i], &all[k], __LINE__);
    }
    store_trials_free(all, n);
    n = store_trials_load(s, 12345, &all);
    CHECK(n == 0);
    store_trials_free(all, n);
    for (int i = 0; i < 4; i++)
        store_trial_fini(&mine[i]);
    store_close(&s);
    s_rm_db("tl.db");
}

TEST(params_generations_and_lineage)
{
    store_t *s = s_open("pg.db", 0);
    REQUIRE(s);
    long sid = s_study(s, "p", STUDY_RUNNING, 1);
    store_trial donor, t;
    s_fill_trial(&donor, sid, 0);
    s_fill_trial(&t, sid, 1);
    REQUIRE(store_trial_insert(s, &donor) == 0);
    REQUIRE(store_trial_insert(s, &t) == 0);
    json_t *gen0 = json_deep_copy(t.params);

    /* generation 1 continues the donor's checkpoint with new params */
    json_t *gen1 = json_pack("{s:f, s:i, s:s}", "lr", 0.5, "n", 64, "opt", "adam");
    CHECK(store_trial_set_params(s, t.id, 1, donor.id, gen1) == 0);
    t.generation = 1;
    t.parent = donor.id;
    json_decref(t.params);
    t.params = json_incref(gen1);
    CHECK(store_trial_save(s, &t) == 0);

    store_trial got;
    REQUIRE(store_trial_get(s, t.id, &got) == 1);
    CHECK(got.generation == 1);
    CHECK(got.parent == donor.id);
    CHECK(json_equal(got.params, gen1));
    store_trial_fini(&got);

    json_t *lin = store_trial_lineage(s, t.id);
    REQUIRE(json_array_size(lin) == 2);
    json_t *l0 = json_array_get(lin, 0), *l1 = json_array_get(lin, 1);
    CHECK(json_integer_value(json_object_get(l0, "generation")) == 0);
    CHECK(json_is_null(json_object_get(l0, "parent")));
    CHECK(json_equal(json_object_get(l0, "params"), gen0));
    CHECK(json_integer_value(json_object_get(l1, "generation")) == 1);
    CHECK(json_integer_value(json_object_get(l1, "parent")) == donor.id);
    CHECK(json_equal(json_object_get(l1, "params"), gen1));
    json_decref(lin);
    lin = store_trial_lineage(s, donor.id);
    CHECK(json_array_size(lin) == 1);
    json_decref(lin);

    /* rewriting a generation replaces it */
    json_t *gen1b = json_pack("{s:f, s:i, s:s}", "lr", 0.25, "n", 64, "opt", "adam");
    CHECK(store_trial_set_params(s, t.id, 1, donor.id, gen1b) == 0);
    REQUIRE(store_trial_get(s, t.id, &got) == 1);
    CHECK(json_equal(got.params, gen1b));
    store_trial_fini(&got);
    lin = store_trial_lineage(s, t.id);
    CHECK(json_array_size(lin) == 2);
    json_decref(lin);

    json_decref(gen0);
    json_decref(gen1);
    json_decref(gen1b);
    store_trial_fini(&donor);
    store_trial_fini(&t);
    store_close(&s);
    s_rm_db("pg.db");
}

/* ---- metrics ---------------------------------------------------------------- */

static int s_brief_value(void *arg, const store_trial_brief *t, const char *params)
{
    double *out = arg;
    out[0] = t->value;
    out[1] = t->last_value;
    out[2] = t->best_value;
    return 0;
}

/* inf, -inf and NaN, as a metric and as a trial's objective, come back
   out of every read as values: "inf", "-inf", "nan" in JSON, never
   dropped and never null (issue 36 item 8) */
TEST(non_finite_values)
{
    store_t *s = s_open("nf.db", 0);
    REQUIRE(s);
    long sid = s_study(s, "nf", STUDY_RUNNING, 1);
    store_trial t;
    s_fill_trial(&t, sid, 0);
    REQUIRE(store_trial_insert(s, &t) == 0);
    store_point pts[] = {{1, "a", INFINITY}, {1, "b", -INFINITY}, {1, "c", NAN}};
    REQUIRE(store_begin(s) == 0);
    CHECK(store_metrics_add(s, t.id, 0, pts, 3, 10.0) == 0);
    t.state = TRIAL_COMPLETED;
    t.value = t.last_value = NAN;
    t.best_value = INFINITY;
    CHECK(store_trial_save(s, &t) == 0);
    REQUIRE(store_commit(s) == 0);

    json_t *last = store_metrics_last(s, t.id);
    CHECK_STR(json_string_value(json_object_get(last, "a")), "inf");
    CHECK_STR(json_string_value(json_object_get(last, "b")), "-inf");
    CHECK_STR(json_string_value(json_object_get(last, "c")), "nan");
    json_decref(last);

    json_t *d = store_study_detail(s, "nf");
    REQUIRE(d);
    json_t *tj = json_array_get(json_object_get(d, "trials"), 0);
    REQUIRE(tj);
    CHECK_STR(json_string_value(json_object_get(tj, "value")), "nan");
    CHECK_STR(json_string_value(json_object_get(tj, "best_value")), "inf");
    CHECK_STR(json_string_value(json_object_get(json_object_get(tj, "metrics"), "b")),
              "-inf");
    char *text = json_dumps(d, 0); /* valid JSON text, all of it */
    CHECK(text && strstr(text, "\"nan\""));
    free(text);
    json_decref(d);

    json_t *brief = store_trials_brief(s, sid);
    REQUIRE(brief && json_array_size(brief) == 1);
    json_t *b0 = json_array_get(brief, 0);
    CHECK_STR(json_string_value(json_object_get(b0, "value")), "nan");
    CHECK_STR(json_string_value(json_object_get(b0, "best_value")), "inf");
    json_decref(brief);
    double v[3] = {0, 0, 0};
    CHECK(store_trials_each(s, sid, s_brief_value, v) == 1);
    CHECK(isnan(v[0]) && !wire_is_none(v[0]) && isinf(v[2]) && v[2] > 0);

    /* none stays none: null, not "nan" */
    t.value = t.last_value = t.best_value = wire_none();
    REQUIRE(store_begin(s) == 0);
    CHECK(store_trial_save(s, &t) == 0);
    REQUIRE(store_commit(s) == 0);
    CHECK(store_trials_each(s, sid, s_brief_value, v) == 1);
    CHECK(wire_is_none(v[0]) && wire_is_none(v[1]) && wire_is_none(v[2]));
    brief = store_trials_brief(s, sid);
    CHECK(json_is_null(json_object_get(json_array_get(brief, 0), "value")));
    json_decref(brief);
    store_trial_fini(&t);
    store_close(&s);
}

/* Checks each row of store_study_points_since against the batch given. */
typedef struct {
    const store_point *want;
    long n, seen, bad;
    long trial_id;
} s_rows;

static int s_row_check(void *arg, const store_metric_row *r)
{
    s_rows *a = arg;
    const store_point *w = a->seen < a->n ? &a->want[a->seen] : NULL;
    int same = w && r->trial_id == a->trial_id && r->attempt == 1 && r->step == w->step &&
               !strcmp(r->name, w->name) && r->time == 12.0 &&
               (isnan(w->value) ? isnan(r->value) : r->value == w->value);
    if (!same && a->bad++ < 3)
        printf("  row %ld: step %ld %s %g at %g\n", a->seen, r->step, r->name, r->value,
               r->time);
    a->seen++;
    return 0;
}

/* The points the incremental reads give, as "trial/attempt/step name=value@time" lines.
 */
typedef struct {
    char text[1024];
    int stop_after; /* 0: never */
    int seen;
} s_pointlog;

static int s_log_point(s_pointlog *l, long trial, long attempt, long step,
                       const char *name, double value, double time)
{
    size_t len = strlen(l->text);
    snprintf(l->text + len, sizeof l->text - len, "%ld/%ld/%ld %s=%g@%g\n", trial,
             attempt, step, name, value, time);
    return l->stop_after && ++l->seen >= l->stop_after;
}

static int s_curve_point(void *arg, long trial, long attempt, long step, const char *name,
                         double value, double time)
{
    return s_log_point(arg, trial, attempt, step, name, value, time);
}

static int s_since_point(void *arg, long trial, long attempt, long step, const char *name,
                         double value)
{
    return s_log_point(arg, trial, attempt, step, name, value, -1);
}

/* store_study_curves (trial, name, attempt, step order, with the time) and
   store_study_metrics_since (insertion order, from a rowid, a limit, the
   callback able to stop) over the same points. */
TEST(incremental_reads)
{
    store_t *s = s_open("inc.db", 0);
    REQUIRE(s);
    long sid = s_study(s, "inc", STUDY_RUNNING, 1);
    store_trial a, b;
    s_fill_trial(&a, sid, 0);
    s_fill_trial(&b, sid, 1);
    REQUIRE(store_trial_insert(s, &a) == 0 && store_trial_insert(s, &b) == 0);
    store_point pa[] = {{1, "loss", 2}, {1, "acc", 0.5}}, pb[] = {{0, "loss", 3}};
    store_point pa2[] = {{0, "loss", 1}};
    REQUIRE(store_begin(s) == 0);
    CHECK(store_metrics_add(s, b.id, 0, pb, 1, 5.0) == 0);
    CHECK(store_metrics_add(s, a.id, 0, pa, 2, 6.0) == 0);
    CHECK(store_metrics_add(s, a.id, 1, pa2, 1, 7.0) == 0);
    REQUIRE(store_commit(s) == 0);

    s_pointlog l = {"", 0, 0};
    CHECK(store_study_curves(s, sid, s_curve_point, &l) == 4);
    char want[512];
    snprintf(want, sizeof want,
             "%ld/0/1 acc=0.5@6\n%ld/0/1 loss=2@6\n%ld/1/0 loss=1@7\n"
             "%ld/0/0 loss=3@5\n",
             a.id, a.id, a.id, b.id);
    CHECK_STR(l.text, want);

    long after = 0;
    s_pointlog m = {"", 0, 0};
    CHECK(store_study_metrics_since(s, sid, &after, 2, s_since_point, &m) == 2);
    snprintf(want, sizeof want, "%ld/0/0 loss=3@-1\n%ld/0/1 loss=2@-1\n", b.id, a.id);
    CHECK_STR(m.text, want);
    long mark = after;
    s_pointlog r = {"", 1, 0}; /* stops after one */
    CHECK(store_study_metrics_since(s, sid, &after, 0, s_since_point, &r) == 1);
    snprintf(want, sizeof want, "%ld/0/1 acc=0.5@-1\n", a.id);
    CHECK_STR(r.text, want);
    CHECK(after == mark + 1);
    s_pointlog rest = {"", 0, 0};
    CHECK(store_study_metrics_since(s, sid, &after, 0, s_since_point, &rest) == 1);
    CHECK(store_study_metrics_since(s, sid, &after, 0, s_since_point, &rest) == 0);
    snprintf(want, sizeof want, "%ld/1/0 loss=1@-1\n", a.id);
    CHECK_STR(rest.text, want);
    store_trial_fini(&a);
    store_trial_fini(&b);
    store_close(&s);
}

/* A study's best with one objective (store_study_best's path without a
   JSON object per trial): the first completed trial in number order with
   the least (min) or greatest (max) finite value; running, pruned, NaN
   and infinite ones never count. */
TEST(best_of_one_objective)
{
    store_t *s = s_open("best.db", 0);
    REQUIRE(s);
    static const struct {
        store_trial_state state;
        double value;
    } rows[] = {
        {TRIAL_COMPLETED, 0.5},      {TRIAL_RUNNING, 0.1},         {TRIAL_COMPLETED, NAN},
        {TRIAL_COMPLETED, 0.2},      {TRIAL_COMPLETED, 0.2},       {TRIAL_PRUNED, 0.01},
        {TRIAL_COMPLETED, INFINITY}, {TRIAL_COMPLETED, -INFINITY},
    };
    for (int mode = 0; mode < 2; mode++) {
        json_t *spec = s_spec_json(mode ? "max" : "min");
        json_object_set_new(json_object_get(spec, "objective"), "mode",
                            json_string(mode ? "max" : "min"));
        long sid = store_study_insert(s, mode ? "max" : "min", spec, STUDY_RUNNING, 1);
        json_decref(spec);
        for (int i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++) {
            store_trial t;
            s_fill_trial(&t, sid, i);
            REQUIRE(store_trial_insert(s, &t) == 0);
            t.state = rows[i].state;
            t.value = rows[i].value;
            REQUIRE(store_trial_save(s, &t) == 0);
            store_trial_fini(&t);
        }
        store_study st;
        REQUIRE(store_study_get(s, mode ? "max" : "min", &st) == 1);
        json_t *out = json_object();
        CHECK(store_study_best(s, &st, out) == 0);
        json_t *best = json_object_get(out, "best");
        CHECK(json_integer_value(json_object_get(best, "number")) == (mode ? 0 : 3));
        CHECK_NEAR(json_real_value(json_object_get(best, "value")), mode ? 0.5 : 0.2, 0);
        CHECK(json_is_object(json_object_get(best, "params")));
        json_decref(out);
        store_study_fini(&st);
    }
    store_close(&s);
}

/* store_trials_page's callback: the ids in the order given. */
static int s_page_id(void *arg, const store_trial_brief *b, const char *params)
{
    long *ids = arg;
    ids[++ids[0]] = b->id;
    return 0;
}

/* store_trials_page's callback that stops after ids[0] reaches 2. */
static int s_page_id_stop2(void *arg, const store_trial_brief *b, const char *params)
{
    long *ids = arg;
    ids[++ids[0]] = b->id;
    return ids[0] >= 2;
}

/* The plan of `sql` on a raw connection to `name`, its lines joined. */
static void s_plan(const char *name, const char *sql, char *out, size_t size)
{
    char p[256], q[2048];
    s_path(p, sizeof p, name);
    snprintf(q, sizeof q, "EXPLAIN QUERY PLAN %s", sql);
    out[0] = 0;
    sqlite3 *db;
    sqlite3_stmt *st;
    if (sqlite3_open(p, &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, q, -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW)
            snprintf(out + strlen(out), size - strlen(out), "%s|",
                     (const char *)sqlite3_column_text(st, 3));
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
}

/* Pages of a study's trials (the web API's GET .../trials): keyset by id
   across another study's interleaved ids, both orders, a state filter,
   next on the last page only; counts per state; each reads an index
   range (issue 43). */
TEST(trial_pages_and_counts)
{
    store_t *s = s_open("pg.db", 0);
    REQUIRE(s);
    json_t *spec = s_spec_json("a");
    long sa = store_study_insert(s, "a", spec, STUDY_RUNNING, 1);
    long sb = store_study_insert(s, "b", spec, STUDY_RUNNING, 1);
    json_decref(spec);
    long a_ids[5];
    for (long k = 0; k < 5; k++) {
        store_trial t;
        s_fill_trial(&t, sa, k);
        t.state = k < 2 ? TRIAL_COMPLETED : TRIAL_RUNNING;
        REQUIRE(store_trial_insert(s, &t) == 0);
        a_ids[k] = t.id;
        store_trial_fini(&t);
        s_fill_trial(&t, sb, k);
        REQUIRE(store_trial_insert(s, &t) == 0);
        store_trial_fini(&t);
    }
    long ids[16] = {0}, next = -1;
    store_trial_page q = {.after = 0, .limit = 2, .state = -1};
    CHECK(store_trials_page(s, sa, &q, s_page_id, ids, &next) == 2);
    CHECK(next == a_ids[1]);
    q.after = next;
    CHECK(store_trials_page(s, sa, &q, s_page_id, ids, &next) == 2);
    CHECK(next == a_ids[3]);
    q.after = next;
    CHECK(store_trials_page(s, sa, &q, s_page_id, ids, &next) == 1);
    CHECK(next == 0);
    CHECK(ids[0] == 5);
    for (int k = 0; k < 5; k++)
        CHECK(ids[k + 1] == a_ids[k]);
    /* a page that ends at the last trial has no next */
    ids[0] = 0;
    q = (store_trial_page){.after = a_ids[2], .limit = 2, .state = -1};
    CHECK(store_trials_page(s, sa, &q, s_page_id, ids, &next) == 2 && next == 0);
    /* newest first, one state */
    ids[0] = 0;
    q = (store_trial_page){.after = 0, .limit = 9, .desc = 1, .state = TRIAL_RUNNING};
    CHECK(store_trials_page(s, sa, &q, s_page_id, ids, &next) == 3 && next == 0);
    CHECK(ids[1] == a_ids[4] && ids[2] == a_ids[3] && ids[3] == a_ids[2]);
    /* fn stops the page early: next says more may follow (review item 8) */
    ids[0] = 0;
    q = (store_trial_page){.after = 0, .limit = 4, .state = -1};
    CHECK(store_trials_page(s, sa, &q, s_page_id_stop2, ids, &next) == 2);
    CHECK(next == a_ids[1]);
    long c[TRIAL_STATE_COUNT];
    REQUIRE(store_trial_counts(s, sa, c) == 0);
    CHECK(c[TRIAL_COMPLETED] == 2 && c[TRIAL_RUNNING] == 3 && c[TRIAL_PENDING] == 0);
    REQUIRE(store_trial_counts(s, sb, c) == 0);
    CHECK(c[TRIAL_PENDING] == 5 && c[TRIAL_RUNNING] == 0);
    store_close(&s);

    /* the statements store_web.c prepares read an index range, never the
       table: no SCAN, no sort (review item 16: their own text) */
    char plan[2048];
    s_plan("pg.db", store__page_sql(0, 0), plan, sizeof plan);
    CHECK(strstr(plan, "USING INDEX trials_by_study (study_id=? AND rowid>?)") ||
          strstr(plan, "USING COVERING INDEX trials_by_study (study_id=? AND rowid>?)"));
    CHECK(!strstr(plan, "SCAN") && !strstr(plan, "TEMP B-TREE"));
    s_plan("pg.db", store__page_sql(1, 0), plan, sizeof plan);
    CHECK(strstr(plan, "INDEX trials_by_study (study_id=? AND rowid<?)"));
    CHECK(!strstr(plan, "SCAN") && !strstr(plan, "TEMP B-TREE"));
    s_plan("pg.db", store__page_sql(0, 1), plan, sizeof plan);
    CHECK(
        strstr(plan, "INDEX trials_by_study_state (study_id=? AND state=? AND rowid>?)"));
    CHECK(!strstr(plan, "SCAN") && !strstr(plan, "TEMP B-TREE"));
    s_plan("pg.db", store__page_sql(1, 1), plan, sizeof plan);
    CHECK(
        strstr(plan, "INDEX trials_by_study_state (study_id=? AND state=? AND rowid<?)"));
    CHECK(!strstr(plan, "SCAN") && !strstr(plan, "TEMP B-TREE"));
    s_plan("pg.db", store__counts_sql(), plan, sizeof plan);
    CHECK(strstr(plan, "COVERING INDEX trials_by_study_state (study_id=?)"));
    CHECK(!strstr(plan, "TEMP B-TREE"));
    if (!strstr(plan, "COVERING"))
        printf("plan: %s\n", plan);
}

/* A read transaction sees one snapshot: a trial another connection commits
   meanwhile shows in neither the counts nor the page until it ends (the
   web's page and counts agree; review item 7). */
TEST(read_transaction_is_one_snapshot)
{
    store_t *w = s_open("rt.db", 0);
    REQUIRE(w);
    long sid = s_study(w, "a", STUDY_RUNNING, 1);
    store_trial t;
    s_fill_trial(&t, sid, 0);
    REQUIRE(store_trial_insert(w, &t) == 0);
    store_trial_fini(&t);
    store_t *r = s_open("rt.db", 1);
    REQUIRE(r);
    long c[TRIAL_STATE_COUNT], ids[8] = {0}, next;
    store_trial_page q = {.after = 0, .limit = 5, .state = -1};
    REQUIRE(store_read_begin(r) == 0);
    CHECK(store_trial_counts(r, sid, c) == 0 && c[TRIAL_PENDING] == 1);
    s_fill_trial(&t, sid, 1); /* committed by the other connection */
    REQUIRE(store_trial_insert(w, &t) == 0);
    store_trial_fini(&t);
    CHECK(store_trials_page(r, sid, &q, s_page_id, ids, &next) == 1);
    CHECK(store_trial_counts(r, sid, c) == 0 && c[TRIAL_PENDING] == 1);
    store_read_end(r);
    ids[0] = 0;
    CHECK(store_trials_page(r, sid, &q, s_page_id, ids, &next) == 2);
    CHECK(store_trial_counts(r, sid, c) == 0 && c[TRIAL_PENDING] == 2);
    store_close(&r);
    store_close(&w);
}

TEST(metrics)
{
    store_t *s = s_open("m.db", 0);
    REQUIRE(s);
    long sid = s_study(s, "m", STUDY_RUNNING, 1);
    store_trial t;
    s_fill_trial(&t, sid, 0);
    REQUIRE(store_trial_insert(s, &t) == 0);

    store_point pts[] = {
        {0, "loss", 2.5}, {0, "acc", 0.1},   {1, "loss", NAN},
        {1, "acc", 0.3},  {2, "loss", 1.25}, {2, "acc", NAN},
    };
    REQUIRE(store_begin(s) == 0);
    CHECK(store_metrics_add(s, t.id, 0, pts, 6, 10.0) == 0);
    CHECK(store_metrics_add(s, t.id, 0, pts, 0, 10.0) == 0); /* empty batch */
    REQUIRE(store_commit(s) == 0);
    CHECK(store_metrics_count(s, t.id) == 6);
    CHECK(store_metrics_count(s, t.id + 1) == 0);

    json_t *last = store_metrics_last(s, t.id);
    CHECK(json_object_size(last) == 2);
    CHECK_NEAR(json_real_value(json_object_get(last, "loss")), 1.25, 0);
    /* the last acc was NaN: a value reported, written as wire_real does */
    CHECK_STR(json_string_value(json_object_get(last, "acc")), "nan");
    json_decref(last);

    json_t *series = store_metrics_series(s, t.id, "loss");
    json_t *want = json_loads("[[0,2.5],[1,\"nan\"],[2,1.25]]", 0, NULL);
    CHECK(json_equal(series, want));
    json_decref(series);
    json_decref(want);
    series = store_metrics_series(s, t.id, "nope");
    CHECK(json_is_array(series) && json_array_size(series) == 0);
    json_decref(series);

    /* a second attempt adds to the count; last follows the newest row */
    store_point again[] = {{0, "acc", 0.9}};
    REQUIRE(store_begin(s) == 0);
    CHECK(store_metrics_add(s, t.id, 1, again, 1, 11.0) == 0);
    REQUIRE(store_commit(s) == 0);
    CHECK(store_metrics_count(s, t.id) == 7);
    last = store_metrics_last(s, t.id);
    CHECK_NEAR(json_real_value(json_object_get(last, "acc")), 0.9, 0);
    json_decref(last);

    /* a batch of many points in one transaction: 78 statements of 64 rows
       and 8 of one (store_metrics_add); every row reads back as given, in
       order, with the batch's trial, attempt and time */
    enum { N = 5000 };
    long mark = 0, ev = 0;
    REQUIRE(store_marks(s, &mark, &ev) == 0);
    store_point *many = malloc(N * sizeof *many);
    for (int i = 0; i < N; i++) {
        many[i].step = 100 + i;
        many[i].name = (i % 2) ? "loss" : "lr";
        many[i].value = (i % 7 == 0) ? NAN : i * 0.5;
    }
    REQUIRE(store_begin(s) == 0);
    CHECK(store_metrics_add(s, t.id, 1, many, N, 12.0) == 0);
    REQUIRE(store_commit(s) == 0);
    CHECK(store_metrics_count(s, t.id) == 7 + N);
    series = store_metrics_series(s, t.id, "lr");
    CHECK(json_array_size(series) == N / 2);
    json_t *p7 = json_array_get(series, 0); /* i = 0: NaN */
    CHECK_STR(json_string_value(json_array_get(p7, 1)), "nan");
    json_t *p2 = json_array_get(series, 1); /* i = 2 */
    CHECK(json_integer_value(json_array_get(p2, 0)) == 102);
    CHECK_NEAR(json_real_value(json_array_get(p2, 1)), 1.0, 0);
    json_decref(series);
    s_rows rows = {many, N, 0, 0, t.id};
    CHECK(store_study_points_since(s, sid, &mark, 0, s_row_check, &rows) == N);
    CHECK(rows.seen == N && rows.bad == 0);
    free(many);

    /* store_trial_json carries the last metrics */
    json_t *tj = store_trial_json(&t, s);
    REQUIRE(tj);
    CHECK(json_integer_value(json_object_get(tj, "id")) == t.id);
    CHECK(json_is_null(json_object_get(tj, "value")));
    CHECK(json_is_null(json_object_get(tj, "parent")));
    CHECK(json_equal(json_object_get(tj, "params"), t.params));
    json_t *m = json_object_get(tj, "metrics");
    CHECK(json_is_object(m) && json_object_size(m) == 3);
    json_decref(tj);
    tj = store_trial_json(&t, NULL);
    CHECK(tj && json_object_get(tj, "metrics") == NULL);
    json_decref(tj);

    store_trial_fini(&t);
    store_close(&s);
    s_rm_db("m.db");
}

/* ---- events ------------------------------------------------------------------ */

TEST(events)
{
    store_t *s = s_open("ev.db", 0);
    REQUIRE(s);
    json_t *spec = s_spec_json("e");
    long sid = store_study_insert(s, "e", spec, STUDY_RUNNING, 1);
    long other = store_study_insert(s, "f", spec, STUDY_RUNNING, 1);
    json_decref(spec);
    json_t *detail = json_pack("{s:s, s:f}", "name", "lr", "value", 0.01);
    long e1 = store_event_add(s, 100.5, sid, 7, "person", "set", detail, -1);
    long e2 = store_event_add(s, 101.0, sid, -1, "controller", "study_start", NULL, 1);
    long e3 = store_event_add(s, 102.0, other, 3, "scheduler", "stop", NULL, 0);
    CHECK(e1 > 0 && e2 > e1 && e3 > e2);
    CHECK(store_event_resolve(s, e1, 1, 0.25, "applied at step 12") == 0);

    json_t *list = store_events_list(s, sid);
    REQUIRE(json_array_size(list) == 2);
    json_t *a = json_array_get(list, 0), *b = json_array_get(list, 1);
    CHECK(json_integer_value(json_object_get(a, "id")) == e1);
    CHECK_NEAR(json_real_value(json_object_get(a, "time")), 100.5, 0);
    CHECK(json_integer_value(json_object_get(a, "trial")) == 7);
    CHECK_STR(json_string_value(json_object_get(a, "who")), "person");
    CHECK_STR(json_string_value(json_object_get(a, "kind")), "set");
    CHECK(json_equal(json_object_get(a, "detail"), detail));
    CHECK(json_is_true(json_object_get(a, "applied")));
    CHECK_NEAR(json_real_value(json_object_get(a, "latency_s")), 0.25, 0);
    CHECK_STR(json_string_value(json_object_get(a, "result")), "applied at step 12");
    CHECK(json_is_null(json_object_get(b, "trial")));
    CHECK(json_is_null(json_object_get(b, "detail")));
    CHECK(json_is_true(json_object_get(b, "applied")));
    CHECK(json_is_null(json_object_get(b, "latency_s")));
    CHECK(json_is_null(json_object_get(b, "result")));
    json_decref(list);

    /* not yet known -> null; refused -> false */
    long e4 = store_event_add(s, 103.0, sid, 8, "person", "pause", NULL, -1);
    list = store_events_list(s, sid);
    CHECK(json_is_null(json_object_get(json_array_get(list, 2), "applied")));
    json_decref(list);
    CHECK(store_event_resolve(s, e4, 0, 1.5, NULL) == 0);
    list = store_events_list(s, other);
    REQUIRE(json_array_size(list) == 1);
    CHECK(json_is_false(json_object_get(json_array_get(list, 0), "applied")));
    json_decref(list);
    list = store_events_list(s, sid);
    CHECK(json_is_false(json_object_get(json_array_get(list, 2), "applied")));
    CHECK(json_is_null(json_object_get(json_array_get(list, 2), "result")));
    json_decref(list);
    list = store_events_list(s, 424242);
    CHECK(json_is_array(list) && json_array_size(list) == 0);
    json_decref(list);

    /* an instruction a controller's start resolved, acknowledged late by
       its trial: resolved again, once, and only for that trial */
    long e5 = store_event_add(s, 104.0, sid, 8, "person", "instruction", detail, -1);
    long e6 = store_event_add(s, 105.0, sid, 8, "person", "instruction", NULL, -1);
    CHECK(store_event_resolve(s, e6, 0, 0.5, "refused by its ack") == 0);
    CHECK(store_events_resolve_instructions(s, "the controller restarted") == 1);
    CHECK(store_event_reresolve(s, e5, 9, 1, 110.0, NULL) == NULL);
    CHECK(store_event_reresolve(s, e6, 8, 1, 110.0, NULL) == NULL);
    json_t *late = store_event_reresolve(s, e5, 8, 1, 110.0, "applied late");
    CHECK(late && json_equal(late, detail));
    json_decref(late);
    CHECK(store_event_reresolve(s, e5, 8, 0, 111.0, NULL) == NULL);
    list = store_events_list(s, sid);
    json_t *ev5 = json_array_get(list, 3), *ev6 = json_array_get(list, 4);
    CHECK(json_is_true(json_object_get(ev5, "applied")));
    CHECK_NEAR(json_real_value(json_object_get(ev5, "latency_s")), 6.0, 0);
    CHECK_STR(json_string_value(json_object_get(ev5, "result")), "applied late");
    CHECK(json_is_false(json_object_get(ev6, "applied")));
    CHECK_STR(json_string_value(json_object_get(ev6, "result")), "refused by its ack");
    json_decref(list);

    CHECK(store_dispatcher_upsert(s, "node-1", 4, "0,1", 5.0) == 0);
    CHECK(store_dispatcher_upsert(s, "node-1", 8, NULL, 6.0) == 0);
    json_decref(detail);
    store_close(&s);
    CHECK(s_sql_int("ev.db", "SELECT slots FROM dispatchers WHERE name='node-1'") == 8);
    CHECK(s_sql_int("ev.db", "SELECT COUNT(*) FROM dispatchers") == 1);
    s_rm_db("ev.db");
}

/* ---- transactions ---------------------------------------------------------- */

TEST(transactions_survive_reopen)
{
    store_t *s = s_open("tx.db", 0);
    REQUIRE(s);
    json_t *spec = s_spec_json("kept");
    long kept = -1;
    store_trial t;
    s_fill_trial(&t, 0, 0);

    REQUIRE(store_begin(s) == 0);
    kept = store_study_insert(s, "kept", spec, STUDY_RUNNING, 1);
    t.study_id = kept;
    CHECK(store_trial_insert(s, &t) == 0);
    store_point p[] = {{0, "y", 1.5}, {1, "y", 0.5}};
    CHECK(store_metrics_add(s, t.id, 0, p, 2, 3.0) == 0);
    CHECK(store_event_add(s, 3.0, kept, t.id, "controller", "start", NULL, 1) > 0);
    REQUIRE(store_commit(s) == 0);

    REQUIRE(store_begin(s) == 0);
    CHECK(store_study_insert(s, "dropped", spec, STUDY_RUNNING, 2) > 0);
    t.state = TRIAL_RUNNING;
    CHECK(store_trial_save(s, &t) == 0);
    store_point q[] = {{2, "y", 0.25}};
    CHECK(store_metrics_add(s, t.id, 0, q, 1, 4.0) == 0);
    store_study st;
    CHECK(store_study_get(s, "dropped", &st) == 1); /* visible inside */
    store_study_fini(&st);
    store_rollback(s);
    CHECK(store_study_get(s, "dropped", &st) == 0);

    /* begin fails while a transaction is open, and a lone commit fails */
    REQUIRE(store_begin(s) == 0);
    CHECK(store_begin(s) == -1);
    CHECK(store_commit(s) == 0);
    CHECK(store_commit(s) == -1);
    store_close(&s);

    s = s_open("tx.db", 0);
    REQUIRE(s);
    CHECK(store_study_get(s, "kept", &st) == 1);
    store_study_fini(&st);
    CHECK(store_study_get(s, "dropped", &st) == 0);
    store_trial got;
    REQUIRE(store_trial_get(s, t.id, &got) == 1);
    CHECK(got.state == TRIAL_PENDING);
    store_trial_fini(&got);
    CHECK(store_metrics_count(s, t.id) == 2);
    json_t *ev = store_events_list(s, kept);
    CHECK(json_array_size(ev) == 1);
    json_decref(ev);
    store_close(&s);

    /* a transaction left open at close is not committed */
    s = s_open("tx.db", 0);
    REQUIRE(s);
    REQUIRE(store_begin(s) == 0);
    CHECK(store_study_insert(s, "unfinished", spec, STUDY_RUNNING, 5) > 0);
    store_close(&s);
    s = s_open("tx.db", 1);
    REQUIRE(s);
    CHECK(store_study_get(s, "unfinished", &st) == 0);
    CHECK(store_study_get(s, "kept", &st) == 1);
    store_study_fini(&st);
    store_close(&s);

    json_decref(spec);
    store_trial_fini(&t);
    s_rm_db("tx.db");
}

/* A version-1 database (no study_stopped column) told the trials a study
   stop ended by their reason text; migration 2 keeps that as a field. */
TEST(migration_2_turns_the_reason_text_into_study_stopped)
{
    s_rm_db("v1.db");
    store_t *s = s_open("v1.db", 0);
    REQUIRE(s);
    long sid = s_study(s, "m", STUDY_STOPPED, 100);
    REQUIRE(sid > 0);
    static const char *const reasons[] = {"study stopped", "stopped by a person",
                                          "study stopped"};
    static const store_trial_state states[] = {TRIAL_STOPPED, TRIAL_STOPPED,
                                               TRIAL_FAILED};
    long ids[3];
    for (int i = 0; i < 3; i++) {
        store_trial t;
        s_fill_trial(&t, sid, i);
        REQUIRE(store_trial_insert(s, &t) == 0);
        t.state = states[i];
        snprintf(t.reason, sizeof t.reason, "%s", reasons[i]);
        t.study_stopped = 0; /* what version 1 had: no such field */
        CHECK(store_trial_save(s, &t) == 0);
        ids[i] = t.id;
        store_trial_fini(&t);
    }
    store_close(&s);
    /* back to version 1's schema */
    CHECK(s_sql_int("v1.db", "ALTER TABLE trials DROP COLUMN study_stopped") == -1);
    CHECK(s_sql_int("v1.db", "DROP TABLE tokens") == -1); /* version 3's */
    CHECK(s_sql_int("v1.db", "DROP TABLE alerts") == -1); /* version 4's */
    CHECK(s_sql_int("v1.db", "DROP TABLE quotas") == -1);
    CHECK(s_sql_int("v1.db", "ALTER TABLE trials DROP COLUMN preemptions") == -1);
    CHECK(s_sql_int("v1.db", "ALTER TABLE trials DROP COLUMN preempted") == -1);
    CHECK(s_sql_int("v1.db", "DROP TABLE enqueued") == -1); /* version 5's */
    CHECK(s_sql_int("v1.db", "ALTER TABLE studies DROP COLUMN extra_trials") == -1);
    CHECK(s_sql_int("v1.db", "ALTER TABLE events DROP COLUMN actor") == -1); /* 6's */
    CHECK(s_sql_int("v1.db", "ALTER TABLE dispatchers DROP COLUMN owner") == -1);
    CHECK(s_sql_int("v1.db", "DROP TABLE interventions") == -1);   /* version 8's */
    CHECK(s_sql_int("v1.db", "DROP INDEX trials_by_study") == -1); /* version 9's */
    CHECK(s_sql_int("v1.db", "DROP INDEX trials_by_study_state") == -1);
    CHECK(s_sql_int("v1.db", "ALTER TABLE trials DROP COLUMN failures") == -1); /* 10 */
    CHECK(s_sql_int("v1.db", "PRAGMA user_version=1") == -1);
    CHECK(s_sql_int("v1.db", "PRAGMA user_version") == 1);
    /* read-only opening refuses the older schema; a writer migrates it */
    CHECK(s_open("v1.db", 1) == NULL);
    s = s_open("v1.db", 0);
    REQUIRE(s);
    CHECK(s_sql_int("v1.db", "PRAGMA user_version") == STORE_SCHEMA_VERSION);
    for (int i = 0; i < 3; i++) {
        store_trial t;
        REQUIRE(store_trial_get(s, ids[i], &t) == 1);
        CHECK(t.study_stopped == (i == 0));
        store_trial_fini(&t);
    }
    /* and the field round-trips */
    store_trial t;
    REQUIRE(store_trial_get(s, ids[1], &t) == 1);
    t.study_stopped = 1;
    CHECK(store_trial_save(s, &t) == 0);
    store_trial_fini(&t);
    REQUIRE(store_trial_get(s, ids[1], &t) == 1);
    CHECK(t.study_stopped == 1);
    store_trial_fini(&t);
    store_close(&s);
}

/* A version-9 database (no failures column: `retries` counted every
   attempt) opens with each trial's failures counted from its retry events
   but those of a resume or a restart from a checkpoint, plus its own end
   when it failed; the field then round-trips (review37 item 3). */
TEST(migration_10_counts_the_failures_of_older_trials)
{
    s_rm_db("v9.db");
    store_t *s = s_open("v9.db", 0);
    REQUIRE(s);
    long sid = s_study(s, "m", STUDY_RUNNING, 100);
    REQUIRE(sid > 0);
    /* each trial's retry reasons, "" ending the list, and its state */
    static const char *const retries[][4] = {
        {"killed by signal 9", "resumed from its checkpoint", ""},
        {"resumed from its checkpoint",
         "restart from a checkpoint (load not acknowledged)", "lost by its dispatcher",
         ""},
        {""},
    };
    static const store_trial_state states[] = {TRIAL_FAILED, TRIAL_RUNNING,
                                               TRIAL_COMPLETED};
    static const long want[] = {2, 1, 0};
    long ids[3];
    for (int i = 0; i < 3; i++) {
        store_trial t;
        s_fill_trial(&t, sid, i);
        REQUIRE(store_trial_insert(s, &t) == 0);
        t.state = states[i];
        for (int k = 0; *retries[i][k]; k++) {
            json_t *d =
                json_pack("{s:s, s:i}", "reason", retries[i][k], "attempt", k + 1);
            CHECK(store_event_add(s, 100 + k, sid, t.id, "controller", "retry", d, 1) >
                  0);
            json_decref(d);
            t.attempt = k + 1;
        }
        CHECK(store_trial_save(s, &t) == 0);
        ids[i] = t.id;
        store_trial_fini(&t);
    }
    store_close(&s);
    CHECK(s_sql_int("v9.db", "ALTER TABLE trials DROP COLUMN failures") == -1);
    CHECK(s_sql_int("v9.db", "PRAGMA user_version=9") == -1);
    s = s_open("v9.db", 0);
    REQUIRE(s);
    CHECK(s_sql_int("v9.db", "PRAGMA user_version") == STORE_SCHEMA_VERSION);
    for (int i = 0; i < 3; i++) {
        store_trial t;
        REQUIRE(store_trial_get(s, ids[i], &t) == 1);
        CHECK(t.failures == want[i]);
        if (i == 1) { /* and it round-trips */
            t.failures = 5;
            CHECK(store_trial_save(s, &t) == 0);
        }
        store_trial_fini(&t);
    }
    store_trial t;
    REQUIRE(store_trial_get(s, ids[1], &t) == 1);
    CHECK(t.failures == 5 && t.attempt == 3);
    json_t *j = store_trial_json(&t, NULL);
    CHECK(json_integer_value(json_object_get(j, "failures")) == 5);
    json_decref(j);
    store_trial_fini(&t);
    store_close(&s);
    s_rm_db("v9.db");
}

TEST(queue_and_extra_trials)
{
    store_t *s = s_open("q.db", 0);
    REQUIRE(s);
    json_t *spec = json_pack("{s:s, s:{s:i}}", "name", "q", "budget", "trials", 4);
    long sid = store_study_insert(s, "q", spec, STUDY_FINISHED, 100);
    json_decref(spec);
    REQUIRE(sid > 0);
    json_t *a = json_pack("{s:f}", "x", 0.25), *b = json_pack("{s:s}", "opt", "sgd");
    long qa = store_enqueued_add(s, sid, a, "cli", 1),
         qb = store_enqueued_add(s, sid, b, "cli", 2);
    CHECK(qa > 0 && qb > qa);
    CHECK(store_enqueued_count(s, sid) == 2);
    json_t *p = NULL;
    CHECK(store_enqueued_first(s, sid, &p) == qa); /* first in, first out */
    CHECK(json_equal(p, a));
    json_decref(p);
    CHECK(store_enqueued_del(s, qa) == 0);
    CHECK(store_enqueued_first(s, sid, &p) == qb && json_equal(p, b));
    json_decref(p);
    CHECK(store_enqueued_del(s, qb) == 0);
    CHECK(store_enqueued_first(s, sid, &p) == 0 && p == NULL);
    CHECK(store_enqueued_count(s, sid) == 0);
    json_decref(a);
    json_decref(b);
    /* extend: the row and the list carry the added trials */
    CHECK(store_study_add_trials(s, sid, 3) == 0);
    CHECK(store_study_add_trials(s, sid + 100, 3) == -1); /* no such study */
    store_study row;
    REQUIRE(store_study_get_id(s, sid, &row) == 1);
    CHECK(row.extra_trials == 3);
    store_study_fini(&row);
    json_t *list = store_study_list(s);
    CHECK(json_integer_value(json_object_get(json_array_get(list, 0), "budget")) == 7);
    json_decref(list);
    store_close(&s);
}

TEST(quotas_keep_the_granted_priority)
{
    store_t *s = s_open("quota.db", 0);
    REQUIRE(s);
    CHECK(store_quota_set(s, "bob", 2, -1, "normal", 1) == 0);
    CHECK(store_quota_set(s, "amy", -1, 4, "high", 2) == 0);
    CHECK(store_quota_set(s, "bob", 3, 1, "high", 3) == 0); /* replaces bob's */
    store_close(&s);
    s = s_open("quota.db", 0); /* persisted */
    REQUIRE(s);
    json_t *list = store_quota_list(s);
    REQUIRE(json_array_size(list) == 2);
    json_t *amy = json_array_get(list, 0), *bob = json_array_get(list, 1);
    CHECK_STR(json_string_value(json_object_get(amy, "user")), "amy");
    CHECK(json_integer_value(json_object_get(amy, "slots")) == -1);
    CHECK(json_integer_value(json_object_get(amy, "gpus")) == 4);
    CHECK_STR(json_string_value(json_object_get(amy, "max_priority")), "high");
    CHECK_STR(json_string_value(json_object_get(bob, "user")), "bob");
    CHECK(json_integer_value(json_object_get(bob, "slots")) == 3);
    CHECK_STR(json_string_value(json_object_get(bob, "max_priority")), "high");
    json_decref(list);
    store_close(&s);
    s_rm_db("quota.db");
}

int main(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/jz-test-store-XXXXXX");
    if (!mkdtemp(s_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(create_and_reopen);
    RUN(refusals);
    RUN(studies);
    RUN(trial_round_trip);
    RUN(states_round_trip_as_enums);
    RUN(intervention_states_as_enums);
    RUN(trials_load_in_order);
    RUN(params_generations_and_lineage);
    RUN(trial_pages_and_counts);
    RUN(read_transaction_is_one_snapshot);
    RUN(best_of_one_objective);
    RUN(metrics);
    RUN(incremental_reads);
    RUN(non_finite_values);
    RUN(events);
    RUN(transactions_survive_reopen);
    RUN(migration_2_turns_the_reason_text_into_study_stopped);
    RUN(migration_10_counts_the_failures_of_older_trials);
    RUN(queue_and_extra_trials);
    RUN(quotas_keep_the_granted_priority);
    rmdir(s_dir);
    TEST_DONE();
}
