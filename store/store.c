/*  store.c - the SQLite schema, migrations and every query (see store.h).

    Statements used on hot paths are prepared once and cached in the
    store_t; the rest are prepared per call. NaN is stored as NULL.
*/
#include "store.h"

#include "../common/text.h"
#include "../common/wire.h"

#include <fcntl.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    Q_METRIC_INSERT,
    Q_TRIAL_SAVE,
    Q_TRIAL_INSERT,
    Q_PARAM_INSERT,
    Q_EVENT_INSERT,
    Q_COUNT
};

static const char *const s_sql[Q_COUNT] = {
    [Q_METRIC_INSERT] = "INSERT INTO metrics(trial_id, attempt, step, name, value, time) "
                        "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [Q_TRIAL_SAVE] =
        "UPDATE trials SET state=?2, attempt=?3, value=?4, last_value=?5, "
        "best_value=?6, last_step=?7, metric_req=?8, dispatcher=?9, pid=?10, "
        "exit_how=?11, exit_code=?12, reason=?13, out_path=?14, err_path=?15, "
        "checkpoint=?16, checkpoint_step=?17, started=?18, ended=?19, "
        "generation=?20, parent=?21, metric_session=?22, study_stopped=?23, token=?24, "
        "preemptions=?25, preempted=?26 WHERE id=?1",
    [Q_TRIAL_INSERT] =
        "INSERT INTO trials(study_id, number, state, attempt, token, generation, "
        "parent, created, id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    [Q_PARAM_INSERT] =
        "INSERT OR REPLACE INTO params(trial_id, generation, parent, name, value) "
        "VALUES (?1, ?2, ?3, ?4, ?5)",
    [Q_EVENT_INSERT] =
        "INSERT INTO events(time, study_id, trial_id, who, kind, detail, applied, actor) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
};

struct store {
    sqlite3 *db;
    sqlite3_stmt *q[Q_COUNT];
    int readonly;
    int write_failed; /* a write of the open transaction failed (s_step) */
    char actor[64];   /* store_set_actor: the events' actor, "" none */
};

/* Migrations: migration[i] brings the schema from version i to i+1. */
static const char *const s_migrations[] = {
    "CREATE TABLE studies("
    "  id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, spec TEXT NOT NULL,"
    "  state TEXT NOT NULL, sched_state TEXT, created REAL, finished REAL);"
    "CREATE TABLE trials("
    "  id INTEGER PRIMARY KEY, study_id INTEGER NOT NULL REFERENCES studies(id),"
    "  number INTEGER NOT NULL, state TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 0,"
    "  token TEXT NOT NULL, generation INTEGER NOT NULL DEFAULT 0, parent INTEGER,"
    "  value REAL, last_value REAL, best_value REAL, last_step INTEGER,"
    "  metric_req INTEGER NOT NULL DEFAULT 0, metric_session TEXT, dispatcher TEXT, pid "
    "INTEGER,"
    "  exit_how TEXT, exit_code INTEGER, reason TEXT, out_path TEXT, err_path TEXT,"
    "  checkpoint TEXT, checkpoint_step INTEGER, created REAL, started REAL, ended REAL,"
    "  UNIQUE(study_id, number));"
    "CREATE TABLE params("
    "  trial_id INTEGER NOT NULL REFERENCES trials(id), generation INTEGER NOT NULL,"
    "  parent INTEGER, name TEXT NOT NULL, value TEXT NOT NULL,"
    "  PRIMARY KEY(trial_id, generation, name));"
    "CREATE TABLE metrics("
    "  trial_id INTEGER NOT NULL, attempt INTEGER NOT NULL, step INTEGER NOT NULL,"
    "  name TEXT NOT NULL, value REAL, time REAL);"
    "CREATE INDEX metrics_by_trial ON metrics(trial_id, name);"
    "CREATE TABLE events("
    "  id INTEGER PRIMARY KEY, time REAL NOT NULL, study_id INTEGER, trial_id INTEGER,"
    "  who TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT, applied INTEGER,"
    "  latency_s REAL, result TEXT);"
    "CREATE INDEX events_by_study ON events(study_id);"
    "CREATE TABLE dispatchers("
    "  name TEXT PRIMARY KEY, slots INTEGER, gpus TEXT, last_seen REAL);",
    /* 2: why a trial was stopped, as a field: version 1 told the trials a
       study stop ended by their reason text */
    "ALTER TABLE trials ADD COLUMN study_stopped INTEGER NOT NULL DEFAULT 0;"
    "UPDATE trials SET study_stopped=1 WHERE state='stopped' AND reason='study stopped';",
    /* 3: bearer tokens of the web API (store_token.c): only their hash. */
    "CREATE TABLE tokens("
    "  id INTEGER PRIMARY KEY, user TEXT NOT NULL, role TEXT NOT NULL,"
    "  hash TEXT NOT NULL UNIQUE, created REAL NOT NULL, revoked REAL);",
    /* 4: alerts fired, at most once per (rule, study, trial; -1 for a study's
       own alerts); per-user quotas; preemptions per trial (store_queue.c) */
    "CREATE TABLE alerts("
    "  id INTEGER PRIMARY KEY, time REAL NOT NULL, study_id INTEGER NOT NULL,"
    "  trial_id INTEGER NOT NULL, rule TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT,"
    "  UNIQUE(rule, study_id, trial_id));"
    "CREATE INDEX alerts_by_study ON alerts(study_id);"
    "CREATE TABLE quotas("
    "  user TEXT PRIMARY KEY, slots INTEGER NOT NULL, gpus INTEGER NOT NULL, updated "
    "REAL);"
    "ALTER TABLE trials ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE trials ADD COLUMN preempted INTEGER NOT NULL DEFAULT 0;",
    /* 5: configurations a person queued (study enqueue), run before the
       scheduler's; trials added to a study's budget (study extend) */
    "CREATE TABLE enqueued("
    "  id INTEGER PRIMARY KEY, study_id INTEGER NOT NULL REFERENCES studies(id),"
    "  params TEXT NOT NULL, who TEXT, created REAL);"
    "ALTER TABLE studies ADD COLUMN extra_trials INTEGER NOT NULL DEFAULT 0;",
    /* 6: who did it (the authenticated user behind an event) and which
       identity a dispatcher name is bound to (store_auth.c) */
    "ALTER TABLE events ADD COLUMN actor TEXT;"
    "ALTER TABLE dispatchers ADD COLUMN owner TEXT;",
    /* 7: the highest priority a user may submit, an admin's grant
       (store_queue.c; controller/ctl_queue.c) */
    "ALTER TABLE quotas ADD COLUMN max_priority TEXT NOT NULL DEFAULT 'normal';",
};
/* The one schema version is STORE_SCHEMA_VERSION (store.h): a new
   migration bumps it, and this fails to compile until both agree. */
_Static_assert(sizeof s_migrations / sizeof s_migrations[0] == STORE_SCHEMA_VERSION,
               "one migration per schema version: bump STORE_SCHEMA_VERSION");

/* ---- state names ---- */

static const char *const s_trial_states[TRIAL_STATE_COUNT] = {
    [TRIAL_PENDING] = "pending",     [TRIAL_STARTING] = "starting",
    [TRIAL_RUNNING] = "running",     [TRIAL_PAUSED] = "paused",
    [TRIAL_SUSPENDED] = "suspended", [TRIAL_COMPLETED] = "completed",
    [TRIAL_FAILED] = "failed",       [TRIAL_STOPPED] = "stopped",
    [TRIAL_PRUNED] = "pruned",
};

static const char *const s_study_states[STUDY_STATE_COUNT] = {
    [STUDY_RUNNING] = "running",
    [STUDY_STOPPED] = "stopped",
    [STUDY_FINISHED] = "finished",
};

const char *store_trial_state_name(store_trial_state st)
{
    return (unsigned)st < TRIAL_STATE_COUNT ? s_trial_states[st] : "invalid";
}

int store_trial_state_parse(const char *text, store_trial_state *out)
{
    for (int i = 0; text && i < TRIAL_STATE_COUNT; i++)
        if (!strcmp(text, s_trial_states[i])) {
            *out = (store_trial_state)i;
            return 0;
        }
    return -1;
}

int store_trial_state_ended(store_trial_state st)
{
    return st == TRIAL_COMPLETED || st == TRIAL_FAILED || st == TRIAL_STOPPED ||
           st == TRIAL_PRUNED;
}

const char *store_study_state_name(store_study_state st)
{
    return (unsigned)st < STUDY_STATE_COUNT ? s_study_states[st] : "invalid";
}

int store_study_state_parse(const char *text, store_study_state *out)
{
    for (int i = 0; text && i < STUDY_STATE_COUNT; i++)
        if (!strcmp(text, s_study_states[i])) {
            *out = (store_study_state)i;
            return 0;
        }
    return -1;
}

static void s_err(store_t *s, char *err, size_t errsize, const char *what)
{
    snprintf(err, errsize, "%s: %s", what,
             s->db ? sqlite3_errmsg(s->db) : "out of memory");
}

static int s_user_version(store_t *s)
{
    sqlite3_stmt *st;
    int v = -1;
    if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

static int s_migrate(store_t *s, char *err, size_t errsize)
{
    int v = s_user_version(s);
    if (v < 0) {
        s_err(s, err, errsize, "reading the schema version");
        return -1;
    }
    if (v > STORE_SCHEMA_VERSION) {
        snprintf(err, errsize, "database schema version %d is newer than this jizhi (%d)",
                 v, STORE_SCHEMA_VERSION);
        return -1;
    }
    if (s->readonly) {
        if (v < STORE_SCHEMA_VERSION) {
            snprintf(err, errsize,
                     "not a jizhi database (or an older schema, version %d)", v);
            return -1;
        }
        return 0;
    }
    for (; v < STORE_SCHEMA_VERSION; v++) {
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA user_version=%d;", v + 1);
        if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(s->db, s_migrations[v], NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(s->db, pragma, NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
            s_err(s, err, errsize, "migrating the schema");
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
    }
    return 0;
}

store_t *store_open(const char *path, int readonly, char *err, size_t errsize)
{
    store_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errsize, "out of memory");
        return NULL;
    }
    s->readonly = readonly;
    int flags =
        readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    if (!readonly) { /* a new database is the owner's alone (its -wal and
                        -shm files take the same mode) */
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
    }
    if (sqlite3_open_v2(path, &s->db, flags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        snprintf(err, errsize, "cannot open database %s: %s", path,
                 s->db ? sqlite3_errmsg(s->db) : "out of memory");
        store_close(&s);
        return NULL;
    }
    sqlite3_busy_timeout(s->db, 5000);
    /* WAL: readers (the CLI) never block the controller. synchronous=NORMAL
       in WAL survives a killed process; only power loss can drop the last
       commits. */
    if (!readonly &&
        (sqlite3_exec(s->db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL) != SQLITE_OK ||
         sqlite3_exec(s->db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL) !=
             SQLITE_OK)) {
        snprintf(err, errsize, "cannot use %s as a database: %s", path,
                 sqlite3_errmsg(s->db));
        store_close(&s);
        return NULL;
    }
    sqlite3_exec(s->db, "PRAGMA foreign_keys=ON", NULL, NULL, NULL);
    if (s_migrate(s, err, errsize) != 0) {
        store_close(&s);
        return NULL;
    }
    if (!readonly) {
        for (int i = 0; i < Q_COUNT; i++)
            if (sqlite3_prepare_v3(s->db, s_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                   &s->q[i], NULL) != SQLITE_OK) {
                s_err(s, err, errsize, "preparing statements");
                store_close(&s);
                return NULL;
            }
    }
    return s;
}

void store_close(store_t **sp)
{
    if (!sp || !*sp)
        return;
    store_t *s = *sp;
    for (int i = 0; i < Q_COUNT; i++)
        sqlite3_finalize(s->q[i]);
    sqlite3_close(s->db);
    free(s);
    *sp = NULL;
}

sqlite3 *store__db(store_t *s)
{
    return s->db;
}

static int s_step(store_t *s, sqlite3_stmt *st);
int store__step(store_t *s, sqlite3_stmt *st)
{
    return s_step(s, st);
}

const char *store_errmsg(store_t *s)
{
    return s && s->db ? sqlite3_errmsg(s->db) : "out of memory";
}

int store_begin(store_t *s)
{
    s->write_failed = 0;
    return sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

int store_commit(store_t *s)
{
    if (s->write_failed) /* part of the transaction may be gone: keep none */
        return -1;
    return sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

void store_rollback(store_t *s)
{
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* ---- small binding helpers ---- */

static void s_bind_double(sqlite3_stmt *st, int i, double x)
{
    if (isnan(x))
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_double(st, i, x);
}

static double s_col_double(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* An objective value: SQLite keeps inf and -inf in a REAL column but
   turns a NaN into NULL, which is "none" here; a reported NaN is stored
   as the text 'nan' (REAL affinity leaves text that is no number as it
   is), so it reads back as a value. */
static void s_bind_value(sqlite3_stmt *st, int i, double x)
{
    if (wire_is_none(x))
        sqlite3_bind_null(st, i);
    else if (isnan(x))
        sqlite3_bind_text(st, i, "nan", -1, SQLITE_STATIC);
    else
        sqlite3_bind_double(st, i, x);
}

double store__col_value(sqlite3_stmt *st, int i)
{
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL:
        return wire_none();
    case SQLITE_TEXT: {
        double x;
        json_t *j = json_string((const char *)sqlite3_column_text(st, i));
        int ok = wire_to_double(j, &x) == 0;
        json_decref(j);
        return ok ? x : NAN;
    }
    default:
        return sqlite3_column_double(st, i);
    }
}

static void s_col_text(sqlite3_stmt *st, int i, char *buf, size_t size)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(buf, size, "%s", t ? (const char *)t : "");
}

static json_t *s_col_json(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? json_loads((const char *)t, 0, NULL) : NULL;
}

/* Runs a cached statement to completion and resets it. */
/* sqlite3_step that remembers a failed write (disk full, I/O error, ...):
   SQLite may then have rolled back part or all of the transaction, so the
   caller's commit must fail too (see store_commit). */
static int s_step(store_t *s, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    switch (rc & 0xff) {
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_NOMEM:
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
        s->write_failed = 1;
        break;
    default:
        break;
    }
    return rc;
}

static int s_run(store_t *s, sqlite3_stmt *st)
{
    int rc = s_step(s, st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

static sqlite3_stmt *s_prepare(store_t *s, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return NULL;
    return st;
}

/* ---- studies ---- */

long store_study_insert(store_t *s, const char *name, const json_t *spec,
                        const char *state, double now)
{
    sqlite3_stmt *st =
        s_prepare(s, "INSERT INTO studies(name, spec, state, created) VALUES (?,?,?,?)");
    if (!st)
        return -1;
    char *text = text_json_dumps(spec, JSON_SORT_KEYS | JSON_COMPACT);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, text, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, state, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 4, now);
    int rc = s_step(s, st);
    sqlite3_finalize(st);
    free(text);
    return rc == SQLITE_DONE ? (long)sqlite3_last_insert_rowid(s->db) : -1;
}

static int s_study_row(sqlite3_stmt *st, store_study *out)
{
    memset(out, 0, sizeof *out);
    out->id = (long)sqlite3_column_int64(st, 0);
    s_col_text(st, 1, out->name, sizeof out->name);
    s_col_text(st, 2, out->state, sizeof out->state);
    out->spec = s_col_json(st, 3);
    out->sched_state = s_col_json(st, 4);
    out->created = s_col_double(st, 5);
    out->finished = s_col_double(st, 6);
    out->extra_trials = (long)sqlite3_column_int64(st, 7);
    return out->spec ? 1 : -1;
}

#define STUDY_COLS "id, name, state, spec, sched_state, created, finished, extra_trials"

int store_study_get(store_t *s, const char *name, store_study *out)
{
    sqlite3_stmt *st = s_prepare(s, "SELECT " STUDY_COLS " FROM studies WHERE name=?");
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    int rc = s_step(s, st);
    int found = rc == SQLITE_ROW ? s_study_row(st, out) : rc == SQLITE_DONE ? 0 : -1;
    sqlite3_finalize(st);
    return found;
}

int store_study_get_id(store_t *s, long id, store_study *out)
{
    sqlite3_stmt *st = s_prepare(s, "SELECT " STUDY_COLS " FROM studies WHERE id=?");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, id);
    int rc = s_step(s, st);
    int found = rc == SQLITE_ROW ? s_study_row(st, out) : rc == SQLITE_DONE ? 0 : -1;
    sqlite3_finalize(st);
    return found;
}

void store_study_fini(store_study *st)
{
    if (st) {
        json_decref(st->spec);
        json_decref(st->sched_state);
        st->spec = st->sched_state = NULL;
    }
}

int store_study_set_state(store_t *s, long id, const char *state, double now)
{
    sqlite3_stmt *st = s_prepare(s, "UPDATE studies SET state=?2, finished=CASE WHEN "
                                    "?2='finished' THEN ?3 ELSE NULL END "
                                    "WHERE id=?1");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, state, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 3, now);
    int rc = s_step(s, st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

int store_study_set_sched(store_t *s, long id, const json_t *sched_state)
{
    sqlite3_stmt *st = s_prepare(s, "UPDATE studies SET sched_state=? WHERE id=?");
    if (!st)
        return -1;
    char *text = sched_state ? text_json_dumps(sched_state, JSON_COMPACT) : NULL;
    if (text)
        sqlite3_bind_text(st, 1, text, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, id);
    int rc = s_step(s, st);
    sqlite3_finalize(st);
    free(text);
    return rc == SQLITE_DONE ? 0 : -1;
}

int store_study_add_trials(store_t *s, long id, long n)
{
    sqlite3_stmt *st =
        s_prepare(s, "UPDATE studies SET extra_trials = extra_trials + ? WHERE id=?");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, n);
    sqlite3_bind_int64(st, 2, id);
    int rc = s_step(s, st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE && sqlite3_changes(s->db) == 1 ? 0 : -1;
}

long store_enqueued_add(store_t *s, long study_id, const json_t *params, const char *who,
                        double now)
{
    sqlite3_stmt *st = s_prepare(
        s, "INSERT INTO enqueued(study_id, params, who, created) VALUES (?,?,?,?)");
    if (!st)
        return -1;
    char *text = text_json_dumps(params, JSON_COMPACT);
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_text(st, 2, text ? text : "{}", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, who ? who : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 4, now);
    int rc = s_step(s, st);
    sqlite3_finalize(st);
    free(text);
    return rc == SQLITE_DONE ? (long)sqlite3_last_insert_rowid(s->db) : -1;
}

long store_enqueued_first(store_t *s, long study_id, json_t **params)
{
    *params = NULL;
    sqlite3_stmt *st = s_prepare(
        s, "SELECT id, params FROM enqueued WHERE study_id=? ORDER BY id LIMIT 1");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    int rc = s_step(s, st);
    long id = 0;
    if (rc == SQLITE_ROW) {
        id = (long)sqlite3_column_int64(st, 0);
        *params = s_col_json(st, 1);
        if (!*params)
            id = -1;
    } else if (rc != SQLITE_DONE) {
        id = -1;
    }
    sqlite3_finalize(st);
    return id;
}

long store_enqueued_count(store_t *s, long study_id)
{
    sqlite3_stmt *st = s_prepare(s, "SELECT COUNT(*) FROM enqueued WHERE study_id=?");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    long n = s_step(s, st) == SQLITE_ROW ? (long)sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return n;
}

int store_enqueued_del(store_t *s, long id)
{
    sqlite3_stmt *st = s_prepare(s, "DELETE FROM enqueued WHERE id=?");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, id);
    int rc = s_step(s, st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

json_t *store_study_list(store_t *s)
{
    sqlite3_stmt *st =
        s_prepare(s, "SELECT s.id, s.name, s.state, s.created, s.finished, COUNT(t.id),"
                     " SUM(t.state='completed'), SUM(t.state='failed'), SUM(t.state IN "
                     "('running','starting','paused')),"
                     " json_extract(s.spec, '$.budget.trials') + s.extra_trials,"
                     " SUM(t.state='stopped'), SUM(t.state='pruned')"
                     " FROM studies s LEFT JOIN trials t ON t.study_id = s.id GROUP BY "
                     "s.id ORDER BY s.id");
    if (!st)
        return NULL;
    json_t *out = json_array();
    while (s_step(s, st) == SQLITE_ROW) {
        json_array_append_new(
            out, json_pack("{s:I, s:s, s:s, s:o, s:o, s:I, s:I, s:I, s:I, s:I}", "id",
                           (json_int_t)sqlite3_column_int64(st, 0), "name",
                           (const char *)sqlite3_column_text(st, 1), "state",
                           (const char *)sqlite3_column_text(st, 2), "created",
                           json_real(sqlite3_column_double(st, 3)), "finished",
                           sqlite3_column_type(st, 4) == SQLITE_NULL
                               ? json_null()
                               : json_real(sqlite3_column_double(st, 4)),
                           "trials", (json_int_t)sqlite3_column_int64(st, 5), "completed",
                           (json_int_t)sqlite3_column_int64(st, 6), "failed",
                           (json_int_t)sqlite3_column_int64(st, 7), "running",
                           (json_int_t)sqlite3_column_int64(st, 8), "budget",
                           (json_int_t)sqlite3_column_int64(st, 9)));
        json_t *e = json_array_get(out, json_array_size(out) - 1);
        json_object_set_new(e, "stopped", json_integer(sqlite3_column_int64(st, 10)));
        json_object_set_new(e, "pruned", json_integer(sqlite3_column_int64(st, 11)));
    }
    sqlite3_finalize(st);
    /* each study's best (or Pareto set), by the one definition */
    size_t i;
    json_t *e;
    json_array_foreach(out, i, e)
    {
        store_study row = {0};
        if (store_study_get_id(s, json_integer_value(json_object_get(e, "id")), &row) ==
            1)
            store_study_best(s, &row, e);
        store_study_fini(&row);
    }
    return out;
}

long store_live_studies(store_t *s, long **ids)
{
    sqlite3_stmt *st = s_prepare(
        s, "SELECT id FROM studies WHERE state='running' OR (state='stopped' AND "
           "EXISTS (SELECT 1 FROM trials t WHERE t.study_id=studies.id AND "
           "t.state IN ('starting','running','paused'))) ORDER BY id");
    if (!st)
        return -1;
    long n = 0, cap = 8;
    *ids = malloc((size_t)cap * sizeof **ids);
    while (s_step(s, st) == SQLITE_ROW) {
        if (n == cap)
            *ids = realloc(*ids, (size_t)(cap *= 2) * sizeof **ids);
        (*ids)[n++] = (long)sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    return n;
}

/* ---- trials ---- */

static int s_params_insert(store_t *s, long trial_id, long generation, long parent,
                           const json_t *params)
{
    const char *name;
    json_t *v;
    json_object_foreach((json_t *)params, name, v)
    {
        sqlite3_stmt *st = s->q[Q_PARAM_INSERT];
        char *text = text_json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        sqlite3_bind_int64(st, 1, trial_id);
        sqlite3_bind_int64(st, 2, generation);
        if (parent >= 0)
            sqlite3_bind_int64(st, 3, parent);
        sqlite3_bind_text(st, 4, name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 5, text, -1, SQLITE_TRANSIENT);
        int rc = s_run(s, st);
        free(text);
        if (rc)
            return -1;
    }
    return 0;
}

int store_trial_insert(store_t *s, store_trial *t)
{
    sqlite3_stmt *st = s->q[Q_TRIAL_INSERT];
    sqlite3_bind_int64(st, 1, t->study_id);
    sqlite3_bind_int64(st, 2, t->number);
    sqlite3_bind_text(st, 3, t->state, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, t->attempt);
    sqlite3_bind_text(st, 5, t->token, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 6, t->generation);
    if (t->parent >= 0)
        sqlite3_bind_int64(st, 7, t->parent);
    sqlite3_bind_double(st, 8, t->created);
    if (t->id > 0)
        sqlite3_bind_int64(st, 9, t->id);
    if (s_run(s, st))
        return -1;
    t->id = (long)sqlite3_last_insert_rowid(s->db);
    return s_params_insert(s, t->id, t->generation, t->parent, t->params);
}

static void s_bind_text_or_null(sqlite3_stmt *st, int i, const char *text)
{
    if (text && *text)
        sqlite3_bind_text(st, i, text, -1, SQLITE_TRANSIENT);
}

long store_trial_next_id(store_t *s)
{
    /* a deleted study's last trial id is in its study_deleted event */
    sqlite3_stmt *st = s_prepare(
        s, "SELECT MAX(COALESCE((SELECT MAX(id) FROM trials), 0), "
           "COALESCE((SELECT MAX(json_extract(detail, '$.last_trial')) FROM events "
           "WHERE kind='study_deleted'), 0)) + 1");
    if (!st)
        return -1;
    long id = s_step(s, st) == SQLITE_ROW ? (long)sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return id;
}

int store_trial_save(store_t *s, const store_trial *t)
{
    sqlite3_stmt *st = s->q[Q_TRIAL_SAVE];
    sqlite3_bind_int64(st, 1, t->id);
    sqlite3_bind_text(st, 2, t->state, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, t->attempt);
    s_bind_value(st, 4, t->value);
    s_bind_value(st, 5, t->last_value);
    s_bind_value(st, 6, t->best_value);
    sqlite3_bind_int64(st, 7, t->last_step);
    sqlite3_bind_int64(st, 8, t->metric_req);
    s_bind_text_or_null(st, 9, t->dispatcher);
    sqlite3_bind_int64(st, 10, t->pid);
    s_bind_text_or_null(st, 11, t->exit_how);
    sqlite3_bind_int64(st, 12, t->exit_code);
    s_bind_text_or_null(st, 13, t->reason);
    s_bind_text_or_null(st, 14, t->out_path);
    s_bind_text_or_null(st, 15, t->err_path);
    s_bind_text_or_null(st, 16, t->checkpoint);
    sqlite3_bind_int64(st, 17, t->checkpoint_step);
    sqlite3_bind_double(st, 18, t->started);
    sqlite3_bind_double(st, 19, t->ended);
    sqlite3_bind_int64(st, 20, t->generation);
    if (t->parent >= 0)
        sqlite3_bind_int64(st, 21, t->parent);
    s_bind_text_or_null(st, 22, t->metric_session);
    sqlite3_bind_int(st, 23, t->study_stopped != 0);
    sqlite3_bind_text(st, 24, t->token, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 25, t->preemptions);
    sqlite3_bind_int(st, 26, t->preempted != 0);
    return s_run(s, st);
}

int store_trial_set_params(store_t *s, long trial_id, long generation, long parent,
                           const json_t *params)
{
    return s_params_insert(s, trial_id, generation, parent, params);
}

#define TRIAL_COLS                                                                       \
    "id, study_id, number, state, attempt, token, generation, parent, value, "           \
    "last_value, "                                                                       \
    "best_value, last_step, metric_req, dispatcher, pid, exit_how, exit_code, reason, "  \
    "out_path, "                                                                         \
    "err_path, checkpoint, checkpoint_step, created, started, ended, metric_session, "   \
    "study_stopped, preemptions, preempted"

static json_t *s_params_of(store_t *s, long trial_id, long generation)
{
    sqlite3_stmt *st =
        s_prepare(s, "SELECT name, value FROM params WHERE trial_id=? AND generation=?");
    json_t *p = json_object();
    if (!st)
        return p;
    sqlite3_bind_int64(st, 1, trial_id);
    sqlite3_bind_int64(st, 2, generation);
    while (s_step(s, st) == SQLITE_ROW) {
        json_t *v =
            json_loads((const char *)sqlite3_column_text(st, 1), JSON_DECODE_ANY, NULL);
        if (v)
            json_object_set_new(p, (const char *)sqlite3_column_text(st, 0), v);
    }
    sqlite3_finalize(st);
    return p;
}

static void s_trial_row(store_t *s, sqlite3_stmt *st, store_trial *t)
{
    memset(t, 0, sizeof *t);
    t->id = (long)sqlite3_column_int64(st, 0);
    t->study_id = (long)sqlite3_column_int64(st, 1);
    t->number = (long)sqlite3_column_int64(st, 2);
    s_col_text(st, 3, t->state, sizeof t->state);
    t->attempt = (long)sqlite3_column_int64(st, 4);
    s_col_text(st, 5, t->token, sizeof t->token);
    t->generation = (long)sqlite3_column_int64(st, 6);
    t->parent = sqlite3_column_type(st, 7) == SQLITE_NULL
                    ? -1
                    : (long)sqlite3_column_int64(st, 7);
    t->value = store__col_value(st, 8);
    t->last_value = store__col_value(st, 9);
    t->best_value = store__col_value(st, 10);
    /* NULL until the first save (store_trial_insert does not write it) */
    t->last_step = sqlite3_column_type(st, 11) == SQLITE_NULL
                       ? -1
                       : (long)sqlite3_column_int64(st, 11);
    t->metric_req = (long)sqlite3_column_int64(st, 12);
    s_col_text(st, 13, t->dispatcher, sizeof t->dispatcher);
    t->pid = (long)sqlite3_column_int64(st, 14);
    s_col_text(st, 15, t->exit_how, sizeof t->exit_how);
    t->exit_code = (long)sqlite3_column_int64(st, 16);
    s_col_text(st, 17, t->reason, sizeof t->reason);
    s_col_text(st, 18, t->out_path, sizeof t->out_path);
    s_col_text(st, 19, t->err_path, sizeof t->err_path);
    s_col_text(st, 20, t->checkpoint, sizeof t->checkpoint);
    t->checkpoint_step = (long)sqlite3_column_int64(st, 21);
    t->created = sqlite3_column_double(st, 22);
    t->started = sqlite3_column_double(st, 23);
    t->ended = sqlite3_column_double(st, 24);
    s_col_text(st, 25, t->metric_session, sizeof t->metric_session);
    t->study_stopped = sqlite3_column_int(st, 26);
    t->preemptions = (long)sqlite3_column_int64(st, 27);
    t->preempted = sqlite3_column_int(st, 28);
    t->params = s_params_of(s, t->id, t->generation);
}

long store_trials_load(store_t *s, long study_id, store_trial **out)
{
    sqlite3_stmt *st = s_prepare(s, "SELECT " TRIAL_COLS
                                    " FROM trials WHERE study_id=? ORDER BY number");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    long n = 0, cap = 16;
    *out = malloc((size_t)cap * sizeof **out);
    while (s_step(s, st) == SQLITE_ROW) {
        if (n == cap)
            *out = realloc(*out, (size_t)(cap *= 2) * sizeof **out);
        s_trial_row(s, st, &(*out)[n++]);
    }
    sqlite3_finalize(st);
    return n;
}

int store_trial_get(store_t *s, long trial_id, store_trial *out)
{
    sqlite3_stmt *st = s_prepare(s, "SELECT " TRIAL_COLS " FROM trials WHERE id=?");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, trial_id);
    int rc = s_step(s, st);
    int found = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
    if (found == 1)
        s_trial_row(s, st, out);
    sqlite3_finalize(st);
    return found;
}

void store_trial_fini(store_trial *t)
{
    if (t) {
        json_decref(t->params);
        t->params = NULL;
    }
}

void store_trials_free(store_trial *t, long n)
{
    for (long i = 0; i < n; i++)
        store_trial_fini(&t[i]);
    free(t);
}

/* A time or latency: null when not there (NaN). */
static json_t *s_num_or_null(double x)
{
    return isnan(x) ? json_null() : json_real(x);
}

json_t *store_trial_json(const store_trial *t, store_t *s)
{
    json_t *j = json_pack(
        "{s:I, s:I, s:I, s:s, s:I, s:O, s:I, s:o, s:o, s:o, s:o, s:I, s:s, s:I, s:s, "
        "s:I, s:s, "
        "s:s, s:s, s:s, s:f, s:f, s:f}",
        "id", (json_int_t)t->id, "study_id", (json_int_t)t->study_id, "number",
        (json_int_t)t->number, "state", t->state, "attempt", (json_int_t)t->attempt,
        "params", t->params, "generation", (json_int_t)t->generation, "parent",
        t->parent >= 0 ? json_integer(t->parent) : json_null(), "value",
        wire_real(t->value), "last_value", wire_real(t->last_value), "best_value",
        wire_real(t->best_value), "last_step", (json_int_t)t->last_step, "dispatcher",
        t->dispatcher, "pid", (json_int_t)t->pid, "exit_how", t->exit_how, "exit_code",
        (json_int_t)t->exit_code, "reason", t->reason, "stdout", t->out_path, "stderr",
        t->err_path, "checkpoint", t->checkpoint, "created", t->created, "started",
        t->started, "ended", t->ended);
    if (j)
        json_object_set_new(j, "preemptions", json_integer(t->preemptions));
    if (j && s)
        json_object_set_new(j, "metrics", store_metrics_last(s, t->id));
    return j;
}

json_t *store_trial_lineage(store_t *s, long trial_id)
{
    sqlite3_stmt *st = s_prepare(s, "SELECT DISTINCT generation, parent FROM params "
                                    "WHERE trial_id=? ORDER BY generation");
    json_t *out = json_array();
    if (!st)
        return out;
    sqlite3_bind_int64(st, 1, trial_id);
    while (s_step(s, st) == SQLITE_ROW) {
        long gen = (long)sqlite3_column_int64(st, 0);
        json_array_append_new(
            out, json_pack("{s:I, s:o, s:o}", "generation", (json_int_t)gen, "parent",
                           sqlite3_column_type(st, 1) == SQLITE_NULL
                               ? json_null()
                               : json_integer(sqlite3_column_int64(st, 1)),
                           "params", s_params_of(s, trial_id, gen)));
    }
    sqlite3_finalize(st);
    return out;
}

json_t *store_study_detail(store_t *s, const char *name)
{
    store_study st;
    if (store_study_get(s, name, &st) != 1)
        return NULL;
    store_trial *rows;
    long n = store_trials_load(s, st.id, &rows);
    json_t *trials = json_array();
    for (long i = 0; i < n; i++) {
        json_t *t = store_trial_json(&rows[i], s);
        json_t *lin = store_trial_lineage(s, rows[i].id);
        json_t *first = json_array_get(lin, 0);
        json_object_set(t, "sampled",
                        first ? json_object_get(first, "params") : rows[i].params);
        json_decref(lin);
        json_array_append_new(trials, t);
    }
    store_trials_free(rows, n < 0 ? 0 : n);
    json_t *out =
        json_pack("{s:I, s:s, s:s, s:O, s:o, s:o, s:o, s:o}", "id", (json_int_t)st.id,
                  "name", st.name, "state", st.state, "spec", st.spec, "created",
                  s_num_or_null(st.created), "finished", s_num_or_null(st.finished),
                  "trials", trials, "events", store_events_list(s, st.id));
    store_study_best(s, &st, out); /* best, or the Pareto set */
    store_study_fini(&st);
    return out;
}

json_t *store_trial_detail(store_t *s, long trial_id)
{
    store_trial t;
    if (store_trial_get(s, trial_id, &t) != 1)
        return NULL;
    json_t *j = store_trial_json(&t, s);
    json_object_set_new(j, "lineage", store_trial_lineage(s, t.id));
    store_study st;
    if (store_study_get_id(s, t.study_id, &st) == 1) {
        json_object_set_new(j, "study", json_string(st.name));
        store_study_fini(&st);
    }
    store_trial_fini(&t);
    return j;
}

/* ---- metrics ---- */

int store_metrics_add(store_t *s, long trial_id, long attempt, const store_point *pts,
                      size_t n, double now)
{
    sqlite3_stmt *st = s->q[Q_METRIC_INSERT];
    for (size_t i = 0; i < n; i++) {
        sqlite3_bind_int64(st, 1, trial_id);
        sqlite3_bind_int64(st, 2, attempt);
        sqlite3_bind_int64(st, 3, pts[i].step);
        sqlite3_bind_text(st, 4, pts[i].name, -1, SQLITE_STATIC);
        s_bind_double(st, 5, pts[i].value);
        sqlite3_bind_double(st, 6, now);
        int rc = s_step(s, st);
        sqlite3_reset(st);
        if (rc != SQLITE_DONE)
            return -1;
    }
    return 0;
}

long store_metrics_count(store_t *s, long trial_id)
{
    sqlite3_stmt *st = s_prepare(s, "SELECT COUNT(*) FROM metrics WHERE trial_id=?");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, trial_id);
    long n = s_step(s, st) == SQLITE_ROW ? (long)sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return n;
}

json_t *store_metrics_last(store_t *s, long trial_id)
{
    /* the row with the largest rowid per name is the last reported */
    sqlite3_stmt *st = s_prepare(
        s,
        "SELECT name, value FROM metrics WHERE rowid IN "
        "(SELECT MAX(rowid) FROM metrics WHERE trial_id=? GROUP BY name) ORDER BY name");
    json_t *out = json_object();
    if (!st)
        return out;
    sqlite3_bind_int64(st, 1, trial_id);
    while (s_step(s, st) == SQLITE_ROW)
        json_object_set_new(out, (const char *)sqlite3_column_text(st, 0),
                            wire_real(s_col_double(st, 1)));
    sqlite3_finalize(st);
    return out;
}

json_t *store_metrics_series(store_t *s, long trial_id, const char *name)
{
    sqlite3_stmt *st = s_prepare(
        s, "SELECT step, value FROM metrics WHERE trial_id=? AND name=? ORDER BY rowid");
    json_t *out = json_array();
    if (!st)
        return out;
    sqlite3_bind_int64(st, 1, trial_id);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
    while (s_step(s, st) == SQLITE_ROW)
        json_array_append_new(out,
                              json_pack("[I,o]", (json_int_t)sqlite3_column_int64(st, 0),
                                        wire_real(s_col_double(st, 1))));
    sqlite3_finalize(st);
    return out;
}

/* ---- events ---- */

long store_event_add(store_t *s, double now, long study_id, long trial_id,
                     const char *who, const char *kind, const json_t *detail, int applied)
{
    sqlite3_stmt *st = s->q[Q_EVENT_INSERT];
    char *text = detail ? text_json_dumps(detail, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    sqlite3_bind_double(st, 1, now);
    if (study_id >= 0)
        sqlite3_bind_int64(st, 2, study_id);
    if (trial_id >= 0)
        sqlite3_bind_int64(st, 3, trial_id);
    sqlite3_bind_text(st, 4, who, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, kind, -1, SQLITE_TRANSIENT);
    if (text)
        sqlite3_bind_text(st, 6, text, -1, SQLITE_TRANSIENT);
    if (applied >= 0)
        sqlite3_bind_int(st, 7, applied);
    if (s->actor[0])
        sqlite3_bind_text(st, 8, s->actor, -1, SQLITE_TRANSIENT);
    int rc = s_run(s, st);
    free(text);
    return rc ? -1 : (long)sqlite3_last_insert_rowid(s->db);
}

int store_event_resolve(store_t *s, long event_id, int applied, double latency_s,
                        const char *detail)
{
    sqlite3_stmt *st =
        s_prepare(s, "UPDATE events SET applied=?, latency_s=?, result=? WHERE id=?");
    if (!st)
        return -1;
    sqlite3_bind_int(st, 1, applied);
    sqlite3_bind_double(st, 2, latency_s);
    s_bind_text_or_null(st, 3, detail);
    sqlite3_bind_int64(st, 4, event_id);
    int rc = s_step(s, st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

static json_t *s_event_row(sqlite3_stmt *st)
{
    json_t *detail = s_col_json(st, 5);
    return json_pack("{s:I, s:f, s:o, s:s, s:s, s:o, s:o, s:o, s:o, s:o}", "id",
                     (json_int_t)sqlite3_column_int64(st, 0), "time",
                     sqlite3_column_double(st, 1), "trial",
                     sqlite3_column_type(st, 2) == SQLITE_NULL
                         ? json_null()
                         : json_integer(sqlite3_column_int64(st, 2)),
                     "who", (const char *)sqlite3_column_text(st, 3), "kind",
                     (const char *)sqlite3_column_text(st, 4), "detail",
                     detail ? detail : json_null(), "applied",
                     sqlite3_column_type(st, 6) == SQLITE_NULL
                         ? json_null()
                         : json_boolean(sqlite3_column_int(st, 6)),
                     "latency_s", s_num_or_null(s_col_double(st, 7)), "result",
                     sqlite3_column_type(st, 8) == SQLITE_NULL
                         ? json_null()
                         : json_string((const char *)sqlite3_column_text(st, 8)),
                     "actor",
                     sqlite3_column_type(st, 9) == SQLITE_NULL
                         ? json_null()
                         : json_string((const char *)sqlite3_column_text(st, 9)));
}

void store_set_actor(store_t *s, const char *actor)
{
    snprintf(s->actor, sizeof s->actor, "%s", actor ? actor : "");
}

json_t *store_events_list(store_t *s, long study_id)
{
    sqlite3_stmt *st =
        s_prepare(s, "SELECT id, time, trial_id, who, kind, detail, applied, "
                     "latency_s, result, actor FROM events WHERE study_id=? ORDER BY id");
    json_t *out = json_array();
    if (!st)
        return out;
    sqlite3_bind_int64(st, 1, study_id);
    while (s_step(s, st) == SQLITE_ROW)
        json_array_append_new(out, s_event_row(st));
    sqlite3_finalize(st);
    return out;
}

json_t *store_events_since(store_t *s, long study_id, long after, long limit)
{
    sqlite3_stmt *st = s_prepare(
        s, "SELECT id, time, trial_id, who, kind, detail, applied, latency_s, result, "
           "actor FROM events WHERE study_id=?1 AND id>?2 ORDER BY id LIMIT ?3");
    if (!st)
        return NULL;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int64(st, 3, limit > 0 ? limit : -1);
    json_t *out = json_array();
    int rc;
    while ((rc = s_step(s, st)) == SQLITE_ROW)
        json_array_append_new(out, s_event_row(st));
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        json_decref(out);
        return NULL;
    }
    return out;
}

int store_event_last_reason(store_t *s, long study_id, const char *kind, char *buf,
                            size_t size)
{
    buf[0] = 0;
    sqlite3_stmt *st =
        s_prepare(s, "SELECT json_extract(detail, '$.reason') FROM events "
                     "WHERE study_id=? AND kind=? ORDER BY id DESC LIMIT 1");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    int rc = s_step(s, st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_TEXT)
        snprintf(buf, size, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

/* ---- dispatchers ---- */

int store_dispatcher_upsert(store_t *s, const char *name, long slots, const char *gpus,
                            double now)
{
    sqlite3_stmt *st =
        s_prepare(s, "INSERT INTO dispatchers(name, slots, gpus, last_seen) "
                     "VALUES (?1,?2,?3,?4) ON CONFLICT(name) DO UPDATE SET "
                     "slots=?2, gpus=?3, last_seen=?4");
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, slots);
    sqlite3_bind_text(st, 3, gpus ? gpus : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 4, now);
    int rc = s_step(s, st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

int store_dispatcher_delete(store_t *s, const char *name)
{
    sqlite3_stmt *st = s_prepare(s, "DELETE FROM dispatchers WHERE name=?");
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    int rc = s_step(s, st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

/* ---- incremental reads ---- */

long store_study_curves(store_t *s, long study_id, store_curve_fn fn, void *arg)
{
    sqlite3_stmt *st =
        s_prepare(s, "SELECT trial_id, attempt, step, name, value, time "
                     "FROM metrics WHERE trial_id IN (SELECT id FROM trials "
                     "WHERE study_id=?1) ORDER BY trial_id, name, attempt, "
                     "step, rowid");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    long n = 0;
    int rc;
    while ((rc = s_step(s, st)) == SQLITE_ROW) {
        n++;
        const char *name = (const char *)sqlite3_column_text(st, 3);
        if (fn(arg, (long)sqlite3_column_int64(st, 0), (long)sqlite3_column_int64(st, 1),
               (long)sqlite3_column_int64(st, 2), name ? name : "", s_col_double(st, 4),
               s_col_double(st, 5)))
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? n : -1;
}

long store_study_metrics_since(store_t *s, long study_id, long *after, long limit,
                               store_metric_fn fn, void *arg)
{
    /* rowid order is insertion order (rows are never deleted); the rowid
       range keeps each poll proportional to what is new. The unary + keeps
       SQLite off the (trial_id, name) index, which would read every point
       of the study and sort them on each call. */
    sqlite3_stmt *st = s_prepare(s, "SELECT rowid, trial_id, attempt, step, name, value "
                                    "FROM metrics WHERE rowid > ?1 "
                                    "AND +trial_id IN (SELECT id FROM trials WHERE "
                                    "study_id=?2) ORDER BY rowid LIMIT ?3");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, *after);
    sqlite3_bind_int64(st, 2, study_id);
    sqlite3_bind_int64(st, 3, limit > 0 ? limit : -1);
    long n = 0;
    int rc;
    while ((rc = s_step(s, st)) == SQLITE_ROW) {
        *after = (long)sqlite3_column_int64(st, 0);
        n++;
        const char *name = (const char *)sqlite3_column_text(st, 4);
        if (fn(arg, (long)sqlite3_column_int64(st, 1), (long)sqlite3_column_int64(st, 2),
               (long)sqlite3_column_int64(st, 3), name ? name : "", s_col_double(st, 5)))
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? n : -1;
}
