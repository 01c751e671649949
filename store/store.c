/*  store.c - the store itself: the SQLite schema and its migrations,
    opening and closing, transactions, state names, and the binding and
    column helpers every store file shares (store_internal.h).

    The queries live beside their tables: store_study.c, store_trial.c,
    store_metric.c, store_event.c, store_dispatcher.c and the smaller
    store_*.c files. Statements used on hot paths are prepared once here
    and cached in the store_t; the rest are prepared per call. NaN is
    stored as NULL.
*/
#include "store_internal.h"

#include "../common/text.h"
#include "../common/util.h"
#include "../common/wire.h"

#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 64 rows of (trial_id ?1, attempt ?2, step, name, value, time ?3): a
   bare `?` takes the number after the largest so far, so after the first
   row's ?4-?6 row r binds step, name, value at 4 + 3r, 5 + 3r, 6 + 3r
   (store_metric.c). */
#define S_ROW "(?1, ?2, ?, ?, ?, ?3)"
#define S_ROWS3 S_ROW "," S_ROW "," S_ROW
#define S_ROWS15 S_ROWS3 "," S_ROWS3 "," S_ROWS3 "," S_ROWS3 "," S_ROWS3
#define S_ROWS16 S_ROW "," S_ROWS15
#define S_ROWS64                                                                         \
    "(?1, ?2, ?4, ?5, ?6, ?3)," S_ROWS15 "," S_ROWS16 "," S_ROWS16 "," S_ROWS16
_Static_assert(STORE_METRIC_ROWS == 64, "S_ROWS64 writes 64 rows");

static const char *const s_sql[Q_COUNT] = {
    [Q_METRIC_INSERT] = "INSERT INTO metrics(trial_id, attempt, step, name, value, time) "
                        "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    /* trial_id ?1, attempt ?2 and time ?3 are the batch's; each row binds
       its own step, name and value (?4 ...): STORE_METRIC_ROWS rows */
    [Q_METRIC_INSERT_MANY] = "INSERT INTO metrics(trial_id, attempt, step, name, value, "
                             "time) VALUES " S_ROWS64,
    [Q_TRIAL_SAVE] =
        "UPDATE trials SET state=?2, attempt=?3, value=?4, last_value=?5, "
        "best_value=?6, last_step=?7, metric_req=?8, dispatcher=?9, pid=?10, "
        "exit_how=?11, exit_code=?12, reason=?13, out_path=?14, err_path=?15, "
        "checkpoint=?16, checkpoint_step=?17, started=?18, ended=?19, "
        "generation=?20, parent=?21, metric_session=?22, study_stopped=?23, token=?24, "
        "preemptions=?25, preempted=?26, failures=?27 WHERE id=?1",
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
    /* 8: a person's guarded changes and live forks, persisted state
       machines (store_interv.c; controller/ctl_guard.c, ctl_fork.c) */
    "CREATE TABLE interventions("
    "  id INTEGER PRIMARY KEY, study_id INTEGER NOT NULL, trial_id INTEGER NOT NULL,"
    "  kind TEXT NOT NULL, state TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0,"
    "  data TEXT NOT NULL, created REAL, updated REAL);"
    "CREATE INDEX interventions_by_trial ON interventions(trial_id);",
    /* 9: a study's trials in id order and by state, so that a page of them
       (the web API's GET .../trials?after=ID&limit=N) and its counts per
       state read an index range, not the whole table (store_web.c) */
    "CREATE INDEX trials_by_study ON trials(study_id);"
    "CREATE INDEX trials_by_study_state ON trials(study_id, state);",
    /* 10: the attempts of a trial that failed, which `retries` counts
       (version 9 counted every attempt, a pause --release's or a study
       resume's too). An older row counts its retry events but those of a
       resume from a release or preemption and of a restart from a
       checkpoint (their reasons, controller/ctl_trial.c), and its own
       failure when it failed */
    "ALTER TABLE trials ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;"
    "UPDATE trials SET failures=r.n FROM (SELECT trial_id, COUNT(*) AS n FROM events"
    "  WHERE kind='retry' AND json_extract(detail, '$.reason') NOT IN"
    "  ('resumed from its checkpoint', 'restart from a checkpoint (load not "
    "acknowledged)')"
    "  GROUP BY trial_id) AS r WHERE r.trial_id=trials.id;"
    "UPDATE trials SET failures=failures+1 WHERE state='failed';",
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
    int i = util_name_index(s_trial_states, TRIAL_STATE_COUNT, text);
    if (i < 0)
        return -1;
    *out = (store_trial_state)i;
    return 0;
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
    int i = util_name_index(s_study_states, STUDY_STATE_COUNT, text);
    if (i < 0)
        return -1;
    *out = (store_study_state)i;
    return 0;
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
    char why[512];
    if (s_migrate(s, why, sizeof why) != 0) { /* named, as the errors above */
        snprintf(err, errsize, "cannot use %s as a database: %s", path, why);
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

const char *store_errmsg(store_t *s)
{
    if (s && s->err[0])
        return s->err;
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

int store_read_begin(store_t *s)
{
    return sqlite3_exec(s->db, "BEGIN DEFERRED", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

void store_read_end(store_t *s)
{
    sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
}

/* ---- small binding helpers ---- */

void store__bind_double(sqlite3_stmt *st, int i, double x)
{
    if (isnan(x))
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_double(st, i, x);
}

double store__col_double(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

long store__col_id(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? -1
                                                     : (long)sqlite3_column_int64(st, i);
}

/* An objective value: SQLite keeps inf and -inf in a REAL column but
   turns a NaN into NULL, which is "none" here; a reported NaN is stored
   as the text 'nan' (REAL affinity leaves text that is no number as it
   is), so it reads back as a value. */
void store__bind_value(sqlite3_stmt *st, int i, double x)
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

void store__col_text(sqlite3_stmt *st, int i, char *buf, size_t size)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(buf, size, "%s", t ? (const char *)t : "");
}

json_t *store__col_json(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? json_loads((const char *)t, 0, NULL) : NULL;
}

/* Runs a cached statement to completion and resets it. */
/* sqlite3_step that remembers a failed write (disk full, I/O error, ...):
   SQLite may then have rolled back part or all of the transaction, so the
   caller's commit must fail too (see store_commit). */
int store__step(store_t *s, sqlite3_stmt *st)
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

int store__run(store_t *s, sqlite3_stmt *st)
{
    int rc = store__step(s, st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

sqlite3_stmt *store__prepare(store_t *s, const char *sql)
{
    sqlite3_stmt *st = NULL;
    s->err[0] = '\0';
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return NULL;
    return st;
}

int store__exec(store_t *s, sqlite3_stmt *st)
{
    int rc = store__step(s, st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

int store__refuse(store_t *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

int store__col_trial_state(store_t *s, sqlite3_stmt *st, int i, long trial_id,
                           store_trial_state *out)
{
    const char *text = (const char *)sqlite3_column_text(st, i);
    if (store_trial_state_parse(text, out) == 0)
        return 0;
    return store__refuse(s, "trial %ld: unknown state '%s' in the database", trial_id,
                         text ? text : "(null)");
}

int store__col_study_state(store_t *s, sqlite3_stmt *st, int i, const char *name,
                           store_study_state *out)
{
    const char *text = (const char *)sqlite3_column_text(st, i);
    if (store_study_state_parse(text, out) == 0)
        return 0;
    return store__refuse(s, "study '%s': unknown state '%s' in the database",
                         name ? name : "", text ? text : "(null)");
}

/* A time or latency: null when not there (NaN). */
json_t *store__num_or_null(double x)
{
    return isnan(x) ? json_null() : json_real(x);
}

void store__bind_text_or_null(sqlite3_stmt *st, int i, const char *text)
{
    if (text && *text)
        sqlite3_bind_text(st, i, text, -1, SQLITE_TRANSIENT);
}

void store__bind_json(sqlite3_stmt *st, int i, const json_t *v, size_t flags,
                      const char *dflt)
{
    char *text = v ? text_json_dumps(v, flags) : NULL;
    sqlite3_bind_text(st, i, text ? text : dflt, -1, SQLITE_TRANSIENT);
    free(text);
}

int store__reserve(void *arrayp, long *cap, long n, size_t size)
{
    void *p;
    memcpy(&p, arrayp, sizeof p);
    if (p && n < *cap)
        return 0;
    long ncap = p ? *cap * 2 : *cap > 0 ? *cap : 8;
    void *more = realloc(p, (size_t)ncap * size);
    if (!more)
        return -1; /* *arrayp is still the caller's, unchanged */
    memcpy(arrayp, &more, sizeof more);
    *cap = ncap;
    return 0;
}
