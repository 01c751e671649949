/*  store_web.c - the reads behind the web API (see store.h): metric
    points with their time, one trial's series, the trials of a study
    without their params, and the high-water marks a live page polls from.
    Read-only; safe on a connection opened with store_open(readonly). */
#include "store_internal.h"

#include "../common/wire.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

long store_study_points_since(store_t *s, long study_id, long *after, long limit,
                              store_row_fn fn, void *arg)
{
    /* rowid order is insertion order (rows are never deleted); the rowid
       range keeps each poll proportional to what is new. The unary + keeps
       SQLite off the (trial_id, name) index, which would read every point
       of the study and sort them on each call. store_study_metrics_since
       reads through here too. */
    sqlite3_stmt *st =
        store__prepare(s, "SELECT " STORE_MROW_COLS " "
                          "FROM metrics WHERE rowid > ?1 AND +trial_id IN (SELECT id "
                          "FROM trials WHERE study_id=?2) ORDER BY rowid LIMIT ?3");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, *after);
    sqlite3_bind_int64(st, 2, study_id);
    sqlite3_bind_int64(st, 3, limit > 0 ? limit : -1);
    return store__metric_rows(s, st, after, fn, arg);
}

long store_trial_points(store_t *s, long trial_id, const char *name, store_row_fn fn,
                        void *arg)
{
    sqlite3_stmt *st =
        store__prepare(s, "SELECT " STORE_MROW_COLS " "
                          "FROM metrics WHERE trial_id=?1 AND name=?2 AND attempt="
                          "(SELECT MAX(attempt) FROM metrics WHERE trial_id=?1 AND "
                          "name=?2) ORDER BY step, rowid");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, trial_id);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
    return store__metric_rows(s, st, NULL, fn, arg);
}

json_t *store_trial_metric_names(store_t *s, long trial_id)
{
    sqlite3_stmt *st = store__prepare(
        s, "SELECT DISTINCT name FROM metrics WHERE trial_id=? ORDER BY name");
    if (!st)
        return NULL;
    sqlite3_bind_int64(st, 1, trial_id);
    json_t *out = json_array();
    while (sqlite3_step(st) == SQLITE_ROW)
        json_array_append_new(out, json_string((const char *)sqlite3_column_text(st, 0)));
    sqlite3_finalize(st);
    return out;
}

/* A trial's brief row: BRIEF_COLS (store_trials_each adds its params as
   BRIEF_C_PARAMS), read through BRIEF_C_*. */
#define BRIEF_COLS                                                                       \
    "t.id, t.number, t.state, t.attempt, t.value, t.last_value, t.best_value, "          \
    "t.last_step, t.generation, t.started, t.ended, t.reason"
enum {
    BRIEF_C_ID,
    BRIEF_C_NUMBER,
    BRIEF_C_STATE,
    BRIEF_C_ATTEMPT,
    BRIEF_C_VALUE,
    BRIEF_C_LAST_VALUE,
    BRIEF_C_BEST_VALUE,
    BRIEF_C_LAST_STEP,
    BRIEF_C_GENERATION,
    BRIEF_C_STARTED,
    BRIEF_C_ENDED,
    BRIEF_C_REASON,
    BRIEF_C_PARAMS
};
/* The column BRIEF_C_PARAMS: the trial's current params as one JSON
   object's text (a value that is not JSON text as a JSON string). */
#define BRIEF_PARAMS                                                                     \
    "(SELECT json_group_object(p.name, CASE WHEN json_valid(p.value) THEN "              \
    "json(p.value) ELSE json_quote(p.value) END) FROM params p "                         \
    "WHERE p.trial_id = t.id AND p.generation = t.generation)"

/* Reads the current row of st (BRIEF_COLS first) into *b, the state as its
   enum. 0, or -1 for a state text that names no state (store_errmsg says
   which). */
static int s_brief_row(store_t *s, sqlite3_stmt *st, store_trial_brief *b)
{
    b->id = (long)sqlite3_column_int64(st, BRIEF_C_ID);
    b->number = (long)sqlite3_column_int64(st, BRIEF_C_NUMBER);
    if (store__col_trial_state(s, st, BRIEF_C_STATE, b->id, &b->state) != 0)
        return -1;
    b->attempt = (long)sqlite3_column_int64(st, BRIEF_C_ATTEMPT);
    b->value = store__col_value(st, BRIEF_C_VALUE);
    b->last_value = store__col_value(st, BRIEF_C_LAST_VALUE);
    b->best_value = store__col_value(st, BRIEF_C_BEST_VALUE);
    b->last_step = store__col_id(st, BRIEF_C_LAST_STEP);
    b->generation = (long)sqlite3_column_int64(st, BRIEF_C_GENERATION);
    b->started = store__col_double(st, BRIEF_C_STARTED);
    b->ended = store__col_double(st, BRIEF_C_ENDED);
    const char *reason = (const char *)sqlite3_column_text(st, BRIEF_C_REASON);
    b->reason = reason ? reason : "";
    return 0;
}

/* Calls fn per row of st (BRIEF_COLS, then the params' JSON text when the
   query has a BRIEF_C_PARAMS column; "{}" otherwise) and finalizes st.
   Returns the count, or -1 on a read error or a state text that names no
   state. */
static long s_briefs(store_t *s, sqlite3_stmt *st, store_brief_fn fn, void *arg)
{
    int with_params = sqlite3_column_count(st) > BRIEF_C_PARAMS;
    long n = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        store_trial_brief b;
        if (s_brief_row(s, st, &b) != 0) {
            rc = SQLITE_ERROR;
            break;
        }
        const char *params =
            with_params ? (const char *)sqlite3_column_text(st, BRIEF_C_PARAMS) : NULL;
        n++;
        if (fn(arg, &b, params ? params : "{}"))
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? n : -1;
}

/* A time as JSON: null for NaN (none). */
static json_t *s_time(double t)
{
    return isnan(t) ? json_null() : json_real(t);
}

/* store_trials_brief's row: one object appended to the array arg. */
static int s_brief_json(void *arg, const store_trial_brief *b, const char *params)
{
    (void)params;
    return json_array_append_new(
        (json_t *)arg,
        json_pack("{s:I, s:I, s:s, s:I, s:o, s:o, s:o, s:o, s:I, s:o, s:o, s:s}", "id",
                  (json_int_t)b->id, "number", (json_int_t)b->number, "state",
                  store_trial_state_name(b->state), "attempt", (json_int_t)b->attempt,
                  "value", wire_real(b->value), "last_value", wire_real(b->last_value),
                  "best_value", wire_real(b->best_value), "last_step",
                  b->last_step >= 0 ? json_integer(b->last_step) : json_null(),
                  "generation", (json_int_t)b->generation, "started", s_time(b->started),
                  "ended", s_time(b->ended), "reason", b->reason));
}

json_t *store_trials_brief(store_t *s, long study_id)
{
    sqlite3_stmt *st = store__prepare(s, "SELECT " BRIEF_COLS " FROM trials t "
                                         "WHERE t.study_id=? ORDER BY t.number");
    if (!st)
        return NULL;
    sqlite3_bind_int64(st, 1, study_id);
    json_t *out = json_array();
    if (s_briefs(s, st, s_brief_json, out) < 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

long store_trials_each(store_t *s, long study_id, store_brief_fn fn, void *arg)
{
    sqlite3_stmt *st = store__prepare(s, "SELECT " BRIEF_COLS ", " BRIEF_PARAMS
                                         " FROM trials t WHERE t.study_id = ? "
                                         "ORDER BY t.number");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    return s_briefs(s, st, fn, arg);
}

/* store_trials_page's wrapper around the caller's fn: stops at the row
   past the page, which only tells that there is a next page. */
typedef struct {
    store_brief_fn fn;
    void *arg;
    long limit, n, last_id;
    int more;
} s_pager;

static int s_page_row(void *arg, const store_trial_brief *t, const char *params)
{
    s_pager *p = arg;
    if (p->n == p->limit) {
        p->more = 1;
        return 1;
    }
    p->n++;
    p->last_id = t->id;
    if (p->fn(p->arg, t, params)) {
        p->more = 1; /* stopped early: the rows past it may follow */
        return 1;
    }
    return 0;
}

/* four statements, one per (order, state filter), so that each reads one
   index range: trials_by_study holds (study_id, id), and
   trials_by_study_state (study_id, state, id) */
const char *store__page_sql(int desc, int filtered)
{
#define PAGE_SQL(WHERE, ORDER)                                                           \
    "SELECT " BRIEF_COLS ", " BRIEF_PARAMS                                               \
    " FROM trials t WHERE t.study_id = ?1 AND " WHERE " ORDER BY t.id " ORDER            \
    " LIMIT ?4"
    static const char *const sql[2][2] = {
        {PAGE_SQL("t.id > ?2", "ASC"), PAGE_SQL("t.state = ?3 AND t.id > ?2", "ASC")},
        {PAGE_SQL("t.id < ?2", "DESC"), PAGE_SQL("t.state = ?3 AND t.id < ?2", "DESC")},
    };
#undef PAGE_SQL
    return sql[desc != 0][filtered != 0];
}

const char *store__counts_sql(void)
{
    return "SELECT state, COUNT(*) FROM trials WHERE study_id = ? GROUP BY state";
}

long store_trials_page(store_t *s, long study_id, const store_trial_page *q,
                       store_brief_fn fn, void *arg, long *next)
{
    assert(q->limit >= 1);
    int filtered = q->state >= 0;
    sqlite3_stmt *st = store__prepare(s, store__page_sql(q->desc, filtered));
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_int64(st, 2, q->after > 0 ? q->after : q->desc ? INT64_MAX : 0);
    if (filtered)
        sqlite3_bind_text(st, 3, store_trial_state_name((store_trial_state)q->state), -1,
                          SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, q->limit + 1); /* one more: is there a next page */
    s_pager p = {.fn = fn, .arg = arg, .limit = q->limit};
    long n = s_briefs(s, st, s_page_row, &p);
    if (n < 0)
        return -1;
    *next = p.more ? p.last_id : 0;
    return p.n;
}

int store_trial_counts(store_t *s, long study_id, long counts[TRIAL_STATE_COUNT])
{
    for (int i = 0; i < TRIAL_STATE_COUNT; i++)
        counts[i] = 0;
    sqlite3_stmt *st = store__prepare(s, store__counts_sql());
    if (!st)
        return -1;
    enum { C_STATE, C_COUNT };
    sqlite3_bind_int64(st, 1, study_id);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        store_trial_state ts;
        const char *text = (const char *)sqlite3_column_text(st, C_STATE);
        if (store_trial_state_parse(text, &ts) != 0) {
            store__refuse(s, "study %ld: unknown trial state '%s' in the database",
                          study_id, text ? text : "(null)");
            rc = SQLITE_ERROR;
            break;
        }
        counts[ts] = (long)sqlite3_column_int64(st, C_COUNT);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

int store_marks(store_t *s, long *metric_rowid, long *event_id)
{
    sqlite3_stmt *st =
        store__prepare(s, "SELECT (SELECT IFNULL(MAX(rowid),0) FROM metrics), "
                          "(SELECT IFNULL(MAX(id),0) FROM events)");
    if (!st)
        return -1;
    enum { C_METRIC_ROWID, C_EVENT_ID };
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *metric_rowid = (long)sqlite3_column_int64(st, C_METRIC_ROWID);
        *event_id = (long)sqlite3_column_int64(st, C_EVENT_ID);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : -1;
}
