/*  store_queue.c - the alerts and quotas tables (see store.h): which alert
    rule fired for which trial (so a restarted controller does not fire it
    again), and the per-user quotas of the queue (controller/ctl_queue.c).
    Written by the controller inside its iteration's transaction. */
#include "store_internal.h"

#include "../common/text.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int store_alert_add(store_t *s, double now, long study_id, long trial_id,
                    const char *rule, const char *kind, const json_t *detail)
{
    sqlite3 *db = store__db(s);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db,
                           "INSERT OR IGNORE INTO alerts(time, study_id, trial_id, rule, "
                           "kind, detail) VALUES (?,?,?,?,?,?)",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_double(st, 1, now);
    sqlite3_bind_int64(st, 2, study_id);
    sqlite3_bind_int64(st, 3, trial_id);
    sqlite3_bind_text(st, 4, rule, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, kind, -1, SQLITE_TRANSIENT);
    store__bind_json(st, 6, detail, JSON_COMPACT, NULL);
    if (store__exec(s, st) != 0)
        return -1;
    return sqlite3_changes(db) > 0 ? 1 : 0;
}

json_t *store_alerts_list(store_t *s, long study_id)
{
    enum { C_ID, C_TIME, C_STUDY, C_STUDY_ID, C_TRIAL_ID, C_RULE, C_KIND, C_DETAIL };
    sqlite3_stmt *st =
        store__prepare(s, "SELECT a.id, a.time, COALESCE(st.name, ''), a.study_id, "
                          "a.trial_id, a.rule, a.kind, a.detail FROM alerts a "
                          "LEFT JOIN studies st ON st.id=a.study_id "
                          "WHERE ?1 <= 0 OR a.study_id=?1 ORDER BY a.id");
    if (!st)
        return NULL;
    sqlite3_bind_int64(st, 1, study_id);
    json_t *out = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *d = (const char *)sqlite3_column_text(st, C_DETAIL);
        json_t *detail = d ? json_loads(d, 0, NULL) : NULL;
        long trial = (long)sqlite3_column_int64(st, C_TRIAL_ID);
        json_array_append_new(
            out, json_pack("{s:I, s:f, s:s, s:I, s:o, s:s, s:s, s:o}", "id",
                           (json_int_t)sqlite3_column_int64(st, C_ID), "time",
                           sqlite3_column_double(st, C_TIME), "study",
                           (const char *)sqlite3_column_text(st, C_STUDY), "study_id",
                           (json_int_t)sqlite3_column_int64(st, C_STUDY_ID), "trial",
                           trial >= 0 ? json_integer(trial) : json_null(), "rule",
                           (const char *)sqlite3_column_text(st, C_RULE), "kind",
                           (const char *)sqlite3_column_text(st, C_KIND), "detail",
                           detail ? detail : json_object()));
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        json_decref(out);
        return NULL;
    }
    return out;
}

int store_quota_set(store_t *s, const char *user, long slots, long gpus,
                    const char *max_priority, double now)
{
    sqlite3_stmt *st =
        store__prepare(s, "INSERT INTO quotas(user, slots, gpus, max_priority, updated) "
                          "VALUES (?,?,?,?,?) ON CONFLICT(user) DO UPDATE SET "
                          "slots=excluded.slots, gpus=excluded.gpus, "
                          "max_priority=excluded.max_priority, updated=excluded.updated");
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, user, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, slots);
    sqlite3_bind_int64(st, 3, gpus);
    sqlite3_bind_text(st, 4, max_priority, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 5, now);
    return store__exec(s, st);
}

json_t *store_quota_list(store_t *s)
{
    sqlite3_stmt *st =
        store__prepare(s, "SELECT user, slots, gpus, max_priority FROM quotas "
                          "ORDER BY user");
    if (!st)
        return NULL;
    enum { C_USER, C_SLOTS, C_GPUS, C_MAX_PRIORITY };
    json_t *out = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        json_array_append_new(
            out, json_pack("{s:s, s:I, s:I, s:s}", "user",
                           (const char *)sqlite3_column_text(st, C_USER), "slots",
                           (json_int_t)sqlite3_column_int64(st, C_SLOTS), "gpus",
                           (json_int_t)sqlite3_column_int64(st, C_GPUS), "max_priority",
                           (const char *)sqlite3_column_text(st, C_MAX_PRIORITY)));
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        json_decref(out);
        return NULL;
    }
    return out;
}
