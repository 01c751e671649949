/*  store_metric.c - the metrics table: points as trials report them, a
    trial's last values and series, and the incremental reads over a whole
    study (store_study_curves, store_study_metrics_since) (see store.h).
*/
#include "store_internal.h"

#include "../common/wire.h"

/* ---- metrics ---- */

/* One statement per STORE_METRIC_ROWS points, then one per point for the
   rest: a batch of 5 000 points costs 78 + 8 statement runs, not 5 000.
   Names are bound by pointer (SQLITE_STATIC: they outlive the run). */
int store_metrics_add(store_t *s, long trial_id, long attempt, const store_point *pts,
                      size_t n, double now)
{
    size_t i = 0;
    sqlite3_stmt *many = s->q[Q_METRIC_INSERT_MANY];
    sqlite3_bind_int64(many, 1, trial_id);
    sqlite3_bind_int64(many, 2, attempt);
    sqlite3_bind_double(many, 3, now);
    for (; n - i >= STORE_METRIC_ROWS; i += STORE_METRIC_ROWS) {
        for (int r = 0; r < STORE_METRIC_ROWS; r++) {
            const store_point *p = &pts[i + r];
            sqlite3_bind_int64(many, 4 + 3 * r, p->step);
            sqlite3_bind_text(many, 5 + 3 * r, p->name, -1, SQLITE_STATIC);
            store__bind_double(many, 6 + 3 * r, p->value);
        }
        int rc = store__step(s, many);
        sqlite3_reset(many);
        if (rc != SQLITE_DONE)
            return -1;
    }
    sqlite3_stmt *st = s->q[Q_METRIC_INSERT];
    for (; i < n; i++) {
        sqlite3_bind_int64(st, 1, trial_id);
        sqlite3_bind_int64(st, 2, attempt);
        sqlite3_bind_int64(st, 3, pts[i].step);
        sqlite3_bind_text(st, 4, pts[i].name, -1, SQLITE_STATIC);
        store__bind_double(st, 5, pts[i].value);
        sqlite3_bind_double(st, 6, now);
        int rc = store__step(s, st);
        sqlite3_reset(st);
        if (rc != SQLITE_DONE)
            return -1;
    }
    return 0;
}

long store_metrics_count(store_t *s, long trial_id)
{
    sqlite3_stmt *st = store__prepare(s, "SELECT COUNT(*) FROM metrics WHERE trial_id=?");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, trial_id);
    long n = store__step(s, st) == SQLITE_ROW ? (long)sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return n;
}

json_t *store_metrics_last(store_t *s, long trial_id)
{
    /* the row with the largest rowid per name is the last reported */
    enum { C_NAME, C_VALUE };
    sqlite3_stmt *st = store__prepare(
        s,
        "SELECT name, value FROM metrics WHERE rowid IN "
        "(SELECT MAX(rowid) FROM metrics WHERE trial_id=? GROUP BY name) ORDER BY name");
    json_t *out = json_object();
    if (!st)
        return out;
    sqlite3_bind_int64(st, 1, trial_id);
    while (store__step(s, st) == SQLITE_ROW)
        json_object_set_new(out, (const char *)sqlite3_column_text(st, C_NAME),
                            wire_real(store__col_double(st, C_VALUE)));
    sqlite3_finalize(st);
    return out;
}

json_t *store_metrics_series(store_t *s, long trial_id, const char *name)
{
    enum { C_STEP, C_VALUE };
    sqlite3_stmt *st = store__prepare(
        s, "SELECT step, value FROM metrics WHERE trial_id=? AND name=? ORDER BY rowid");
    json_t *out = json_array();
    if (!st)
        return out;
    sqlite3_bind_int64(st, 1, trial_id);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
    while (store__step(s, st) == SQLITE_ROW)
        json_array_append_new(out, json_pack("[I,o]",
                                             (json_int_t)sqlite3_column_int64(st, C_STEP),
                                             wire_real(store__col_double(st, C_VALUE))));
    sqlite3_finalize(st);
    return out;
}

/* ---- incremental reads ---- */

/* The incremental reads' row: POINT_COLS, read through P_*. */
#define POINT_COLS "rowid, trial_id, attempt, step, name, value, time"
enum { P_ROWID, P_TRIAL_ID, P_ATTEMPT, P_STEP, P_NAME, P_VALUE, P_TIME };

/* Calls curve (with the time) or else metric per row of st (POINT_COLS),
   *after taking each row's rowid when given, and finalizes st. Returns
   the number of points given, or -1 on a read error. */
static long s_points(store_t *s, sqlite3_stmt *st, long *after, store_curve_fn curve,
                     store_metric_fn metric, void *arg)
{
    long n = 0;
    int rc;
    while ((rc = store__step(s, st)) == SQLITE_ROW) {
        if (after)
            *after = (long)sqlite3_column_int64(st, P_ROWID);
        n++;
        const char *name = (const char *)sqlite3_column_text(st, P_NAME);
        long trial = (long)sqlite3_column_int64(st, P_TRIAL_ID);
        long attempt = (long)sqlite3_column_int64(st, P_ATTEMPT);
        long step = (long)sqlite3_column_int64(st, P_STEP);
        double value = store__col_double(st, P_VALUE);
        if (curve ? curve(arg, trial, attempt, step, name ? name : "", value,
                          store__col_double(st, P_TIME))
                  : metric(arg, trial, attempt, step, name ? name : "", value))
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? n : -1;
}

long store_study_curves(store_t *s, long study_id, store_curve_fn fn, void *arg)
{
    sqlite3_stmt *st =
        store__prepare(s, "SELECT " POINT_COLS " FROM metrics WHERE trial_id IN "
                          "(SELECT id FROM trials WHERE study_id=?1) "
                          "ORDER BY trial_id, name, attempt, step, rowid");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    return s_points(s, st, NULL, fn, NULL, arg);
}

long store_study_metrics_since(store_t *s, long study_id, long *after, long limit,
                               store_metric_fn fn, void *arg)
{
    /* rowid order is insertion order (rows are never deleted); the rowid
       range keeps each poll proportional to what is new. The unary + keeps
       SQLite off the (trial_id, name) index, which would read every point
       of the study and sort them on each call. */
    sqlite3_stmt *st =
        store__prepare(s, "SELECT " POINT_COLS " FROM metrics WHERE rowid > ?1 "
                          "AND +trial_id IN (SELECT id FROM trials WHERE "
                          "study_id=?2) ORDER BY rowid LIMIT ?3");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, *after);
    sqlite3_bind_int64(st, 2, study_id);
    sqlite3_bind_int64(st, 3, limit > 0 ? limit : -1);
    return s_points(s, st, after, NULL, fn, arg);
}
