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

enum {
    P_ROWID,
    P_TRIAL_ID,
    P_ATTEMPT,
    P_STEP,
    P_NAME,
    P_VALUE,
    P_TIME
}; /* STORE_MROW_COLS */

long store__metric_rows(store_t *s, sqlite3_stmt *st, long *after, store_row_fn fn,
                        void *arg)
{
    long n = 0;
    int rc;
    while ((rc = store__step(s, st)) == SQLITE_ROW) {
        store_metric_row r;
        r.rowid = (long)sqlite3_column_int64(st, P_ROWID);
        r.trial_id = (long)sqlite3_column_int64(st, P_TRIAL_ID);
        r.attempt = (long)sqlite3_column_int64(st, P_ATTEMPT);
        r.step = (long)sqlite3_column_int64(st, P_STEP);
        const char *name = (const char *)sqlite3_column_text(st, P_NAME);
        r.name = name ? name : "";
        r.value = store__col_double(st, P_VALUE);
        r.time = store__col_double(st, P_TIME);
        if (after)
            *after = r.rowid;
        n++;
        if (fn(arg, &r))
            break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? n : -1;
}

/* store_study_curves' and store_study_metrics_since's callback (one of the
   two) behind a store_row_fn. */
typedef struct {
    store_curve_fn curve;
    store_metric_fn metric;
    void *arg;
} s_point_fn;

static int s_point(void *arg, const store_metric_row *r)
{
    const s_point_fn *f = arg;
    return f->curve
               ? f->curve(f->arg, r->trial_id, r->attempt, r->step, r->name, r->value,
                          r->time)
               : f->metric(f->arg, r->trial_id, r->attempt, r->step, r->name, r->value);
}

long store_study_curves(store_t *s, long study_id, store_curve_fn fn, void *arg)
{
    sqlite3_stmt *st =
        store__prepare(s, "SELECT " STORE_MROW_COLS " FROM metrics WHERE trial_id IN "
                          "(SELECT id FROM trials WHERE study_id=?1) "
                          "ORDER BY trial_id, name, attempt, step, rowid");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    s_point_fn f = {fn, NULL, arg};
    return store__metric_rows(s, st, NULL, s_point, &f);
}

long store_study_metrics_since(store_t *s, long study_id, long *after, long limit,
                               store_metric_fn fn, void *arg)
{
    s_point_fn f = {NULL, fn, arg};
    return store_study_points_since(s, study_id, after, limit, s_point, &f);
}
