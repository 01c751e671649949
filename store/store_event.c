/*  store_event.c - the events table: what happened to a study and who
    did it (store_set_actor), how an applied event resolved, and the lists
    read back by study show, watch and the web API (see store.h).
*/
#include "store_internal.h"

#include "../common/text.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- events ---- */

long store_event_add(store_t *s, double now, long study_id, long trial_id,
                     const char *who, const char *kind, const json_t *detail, int applied)
{
    sqlite3_stmt *st = s->q[Q_EVENT_INSERT];
    sqlite3_bind_double(st, 1, now);
    if (study_id >= 0)
        sqlite3_bind_int64(st, 2, study_id);
    if (trial_id >= 0)
        sqlite3_bind_int64(st, 3, trial_id);
    sqlite3_bind_text(st, 4, who, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, kind, -1, SQLITE_TRANSIENT);
    store__bind_json(st, 6, detail, JSON_COMPACT | JSON_SORT_KEYS, NULL);
    if (applied >= 0)
        sqlite3_bind_int(st, 7, applied);
    if (s->actor[0])
        sqlite3_bind_text(st, 8, s->actor, -1, SQLITE_TRANSIENT);
    return store__run(s, st) ? -1 : (long)sqlite3_last_insert_rowid(s->db);
}

int store_event_resolve(store_t *s, long event_id, int applied, double latency_s,
                        const char *detail)
{
    sqlite3_stmt *st = store__prepare(
        s, "UPDATE events SET applied=?, latency_s=?, result=? WHERE id=?");
    if (!st)
        return -1;
    sqlite3_bind_int(st, 1, applied);
    sqlite3_bind_double(st, 2, latency_s);
    store__bind_text_or_null(st, 3, detail);
    sqlite3_bind_int64(st, 4, event_id);
    return store__exec(s, st);
}

long store_events_resolve_instructions(store_t *s, const char *result)
{
    sqlite3_stmt *st = store__prepare(s, "UPDATE events SET applied=0, result=? WHERE "
                                         "kind='instruction' AND applied IS NULL");
    if (!st)
        return -1;
    store__bind_text_or_null(st, 1, result);
    return store__exec(s, st) == 0 ? (long)sqlite3_changes(store__db(s)) : -1;
}

json_t *store_event_reresolve(store_t *s, long event_id, long trial_id, int applied,
                              double now, const char *result)
{
    sqlite3_stmt *st = store__prepare(
        s, "UPDATE events SET applied=?1, latency_s=?2-time, result=?3 WHERE id=?4 AND "
           "trial_id=?5 AND kind='instruction' AND applied=0 AND latency_s IS NULL");
    if (!st)
        return NULL;
    sqlite3_bind_int(st, 1, applied);
    sqlite3_bind_double(st, 2, now);
    store__bind_text_or_null(st, 3, result);
    sqlite3_bind_int64(st, 4, event_id);
    sqlite3_bind_int64(st, 5, trial_id);
    if (store__exec(s, st) != 0 || sqlite3_changes(store__db(s)) != 1 ||
        !(st = store__prepare(s, "SELECT detail FROM events WHERE id=?")))
        return NULL;
    sqlite3_bind_int64(st, 1, event_id);
    json_t *detail = store__step(s, st) == SQLITE_ROW ? store__col_json(st, 0) : NULL;
    sqlite3_finalize(st);
    return detail;
}

/* An event row: EVENT_COLS, read by s_event_row through EVENT_C_*. */
#define EVENT_COLS                                                                       \
    "id, time, trial_id, who, kind, detail, applied, latency_s, result, actor"
enum {
    EVENT_C_ID,
    EVENT_C_TIME,
    EVENT_C_TRIAL_ID,
    EVENT_C_WHO,
    EVENT_C_KIND,
    EVENT_C_DETAIL,
    EVENT_C_APPLIED,
    EVENT_C_LATENCY_S,
    EVENT_C_RESULT,
    EVENT_C_ACTOR,
};

static json_t *s_event_row(sqlite3_stmt *st)
{
    json_t *detail = store__col_json(st, EVENT_C_DETAIL);
    return json_pack(
        "{s:I, s:f, s:o, s:s, s:s, s:o, s:o, s:o, s:o, s:o}", "id",
        (json_int_t)sqlite3_column_int64(st, EVENT_C_ID), "time",
        sqlite3_column_double(st, EVENT_C_TIME), "trial",
        sqlite3_column_type(st, EVENT_C_TRIAL_ID) == SQLITE_NULL
            ? json_null()
            : json_integer(sqlite3_column_int64(st, EVENT_C_TRIAL_ID)),
        "who", (const char *)sqlite3_column_text(st, EVENT_C_WHO), "kind",
        (const char *)sqlite3_column_text(st, EVENT_C_KIND), "detail",
        detail ? detail : json_null(), "applied",
        sqlite3_column_type(st, EVENT_C_APPLIED) == SQLITE_NULL
            ? json_null()
            : json_boolean(sqlite3_column_int(st, EVENT_C_APPLIED)),
        "latency_s", store__num_or_null(store__col_double(st, EVENT_C_LATENCY_S)),
        "result",
        sqlite3_column_type(st, EVENT_C_RESULT) == SQLITE_NULL
            ? json_null()
            : json_string((const char *)sqlite3_column_text(st, EVENT_C_RESULT)),
        "actor",
        sqlite3_column_type(st, EVENT_C_ACTOR) == SQLITE_NULL
            ? json_null()
            : json_string((const char *)sqlite3_column_text(st, EVENT_C_ACTOR)));
}

void store_set_actor(store_t *s, const char *actor)
{
    snprintf(s->actor, sizeof s->actor, "%s", actor ? actor : "");
}

json_t *store_events_list(store_t *s, long study_id)
{
    sqlite3_stmt *st = store__prepare(s, "SELECT " EVENT_COLS
                                         " FROM events WHERE study_id=? ORDER BY id");
    json_t *out = json_array();
    if (!st)
        return out;
    sqlite3_bind_int64(st, 1, study_id);
    while (store__step(s, st) == SQLITE_ROW)
        json_array_append_new(out, s_event_row(st));
    sqlite3_finalize(st);
    return out;
}

json_t *store_events_since(store_t *s, long study_id, long after, long limit)
{
    sqlite3_stmt *st = store__prepare(
        s, "SELECT " EVENT_COLS " FROM events WHERE study_id=?1 AND id>?2 ORDER BY id "
           "LIMIT ?3");
    if (!st)
        return NULL;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int64(st, 3, limit > 0 ? limit : -1);
    json_t *out = json_array();
    int rc;
    while ((rc = store__step(s, st)) == SQLITE_ROW)
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
        store__prepare(s, "SELECT json_extract(detail, '$.reason') FROM events "
                          "WHERE study_id=? AND kind=? ORDER BY id DESC LIMIT 1");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    int rc = store__step(s, st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_TEXT)
        snprintf(buf, size, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}
