/*  store_delete.c - removing a study from the store (see store.h): its
    trials, their params and metrics, its events, alerts and enqueued
    configurations, then the study row, inside the caller's transaction
    (the controller's iteration: all of it is committed or none). Logs and
    checkpoints are files the store does not know; the controller names
    their folders. */
#include "store_internal.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

/* Runs `sql` with ?1 = study_id; the rows it changed, or -1. */
static long s_exec(store_t *s, const char *sql, long study_id)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(store__db(s), sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    return store__exec(s, st) == 0 ? (long)sqlite3_changes(store__db(s)) : -1;
}

/* The highest trial id of the study, 0 when it has none, -1 on error. */
static long s_last_trial(store_t *s, long study_id)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(store__db(s),
                           "SELECT COALESCE(MAX(id), 0) FROM trials WHERE study_id=?1",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    long id = store__step(s, st) == SQLITE_ROW ? (long)sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return id;
}

/* Runs a statement without parameters (the savepoint's). 0 or -1. */
static int s_plain(store_t *s, const char *sql)
{
    return sqlite3_exec(store__db(s), sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

int store_study_delete(store_t *s, long study_id, store_deleted *out)
{
    memset(out, 0, sizeof *out);
    out->last_trial = s_last_trial(s, study_id);
    /* all or nothing inside the caller's transaction */
    if (out->last_trial < 0 || s_plain(s, "SAVEPOINT study_delete") != 0)
        return -1;
    /* children first: params and metrics by trial, then the trials */
    long params = s_exec(s,
                         "DELETE FROM params WHERE trial_id IN "
                         "(SELECT id FROM trials WHERE study_id=?1)",
                         study_id);
    out->metrics = s_exec(s,
                          "DELETE FROM metrics WHERE trial_id IN "
                          "(SELECT id FROM trials WHERE study_id=?1)",
                          study_id);
    out->trials = s_exec(s, "DELETE FROM trials WHERE study_id=?1", study_id);
    out->events = s_exec(s, "DELETE FROM events WHERE study_id=?1", study_id);
    long alerts = s_exec(s, "DELETE FROM alerts WHERE study_id=?1", study_id);
    out->enqueued = s_exec(s, "DELETE FROM enqueued WHERE study_id=?1", study_id);
    long interv = s_exec(s, "DELETE FROM interventions WHERE study_id=?1", study_id);
    long studies = s_exec(s, "DELETE FROM studies WHERE id=?1", study_id);
    if (params < 0 || out->metrics < 0 || out->trials < 0 || out->events < 0 ||
        alerts < 0 || out->enqueued < 0 || interv < 0 || studies != 1) {
        s_plain(s, "ROLLBACK TO study_delete");
        s_plain(s, "RELEASE study_delete");
        return -1;
    }
    return s_plain(s, "RELEASE study_delete");
}
